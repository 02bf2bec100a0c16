//! `chart`: the percentile curves of several runs, read back from their `.hgrm` files (the
//! HdrHistogram percentile distribution `--out-prefix` writes, or any other tool's), on one
//! SVG chart, so runs of separate invocations and hosts can be compared.

use crate::plot::Series;
use std::path::{Path, PathBuf};

/// Why a `.hgrm` file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not `value percentile count [1/(1-percentile)]`.
    #[error("{path}:{line}: not a percentile-distribution row: {text:?}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// No row at all.
    #[error("{path}: no percentile rows")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// The `(percentile in [0, 1), value)` points of a percentile distribution text (values in
/// the file's unit: microseconds for Shoal's files). The header, blank lines and `#[...]`
/// summary lines are skipped; the final 100 % row is left out (a percentile chart's x axis
/// ends before it).
pub fn parse_hgrm(text: &str, path: &Path) -> Result<Vec<(f64, f64)>, ChartError> {
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("Value") {
            continue;
        }
        let row = || ChartError::Row {
            path: path.to_path_buf(),
            line: i + 1,
            text: line.to_string(),
        };
        let mut cols = t.split_whitespace();
        let value: f64 = cols.next().and_then(|v| v.parse().ok()).ok_or_else(row)?;
        let q: f64 = cols.next().and_then(|v| v.parse().ok()).ok_or_else(row)?;
        let _count: u64 = cols.next().and_then(|v| v.parse().ok()).ok_or_else(row)?;
        if !(0.0..=1.0).contains(&q) || !value.is_finite() {
            return Err(row());
        }
        if q < 1.0 {
            points.push((q, value));
        }
    }
    if points.is_empty() {
        return Err(ChartError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(points)
}

/// One curve from a `.hgrm` file, labelled with the file's name without `.hgrm`.
pub fn read_series(path: &Path) -> Result<Series, ChartError> {
    let text = std::fs::read_to_string(path).map_err(|source| ChartError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().trim_end_matches(".hgrm").to_string())
        .unwrap_or_else(|| path.display().to_string());
    Ok((label, parse_hgrm(&text, path)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency_hist::Latency;

    #[test]
    fn an_hgrm_we_wrote_reads_back_as_its_curve() {
        let mut l = Latency::default();
        for us in 1..=2000u64 {
            l.record(us * 1000);
        }
        let mut text = Vec::new();
        l.write_hgrm(&mut text).unwrap();
        let pts = parse_hgrm(std::str::from_utf8(&text).unwrap(), Path::new("x.hgrm")).unwrap();
        assert_eq!(pts.len(), l.curve().len());
        for ((q, v), (cq, cv)) in pts.iter().zip(l.curve()) {
            assert!((q - cq).abs() < 1e-9, "{q} vs {cq}");
            assert!((v - cv).abs() < 0.001, "{v} vs {cv}");
        }
        let median = pts.iter().find(|(q, _)| *q >= 0.5).unwrap().1;
        assert!((median - 1000.0).abs() < 2.0, "{median}");
    }

    #[test]
    fn garbage_is_refused_with_its_line() {
        let err = parse_hgrm("  1.0 0.5 3 2.0\nnot a row\n", Path::new("bad.hgrm")).unwrap_err();
        assert!(err.to_string().contains("bad.hgrm:2"), "{err}");
        assert!(matches!(
            parse_hgrm("#[Mean = 1]\n", Path::new("e.hgrm")),
            Err(ChartError::Empty { .. })
        ));
        assert!(parse_hgrm("1.0 1.5 3\n", Path::new("q.hgrm")).is_err());
    }

    #[test]
    fn files_are_labelled_by_name() {
        let dir = std::env::temp_dir().join(format!("shoal-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run-a-shoal.hgrm");
        std::fs::write(&path, "Value Percentile TotalCount 1/(1-Percentile)\n\n 5.0 0.0 1 1.00\n 9.0 0.9 10 10.00\n 12.0 1.0 11\n").unwrap();
        let (label, pts) = read_series(&path).unwrap();
        assert_eq!(label, "run-a-shoal");
        assert_eq!(pts, vec![(0.0, 5.0), (0.9, 9.0)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
