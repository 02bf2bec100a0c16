//! The percentile curve of one or more latency runs on one SVG chart (plotters' SVG backend
//! only: text is emitted as SVG `<text>`, so no system fonts are needed).

use plotters::prelude::*;
use std::path::Path;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

/// One curve: its label and `(percentile in [0, 1), latency µs)` points.
pub type Series = (String, Vec<(f64, f64)>);

/// x position of percentile `q`: the "nines" scale, log10(1 / (1 - q)).
fn nines(q: f64) -> f64 {
    (1.0 / (1.0 - q.min(0.999_999))).log10()
}

fn percentile_label(x: &f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let s = format!("{p:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// Draws `series` (latency in µs on a log axis against percentile on the nines scale).
pub fn percentile_chart(path: &Path, title: &str, series: &[Series]) -> Result<(), PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut ymin, mut ymax, mut xmax) = (f64::MAX, 0f64, 1f64);
    for &(q, v) in pts {
        ymin = ymin.min(v.max(0.01));
        ymax = ymax.max(v);
        xmax = xmax.max(nines(q));
    }
    if ymax <= 0.0 {
        return Err(err(&"no samples to plot"));
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax.ceil(), (ymin * 0.8..ymax * 1.25).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (µs)")
        .x_labels(xmax.ceil() as usize + 1)
        .x_label_formatter(&percentile_label)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    let colours = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (label, points)) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(q, v)| (nines(q), v.max(ymin))),
                colour.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_as_percentiles() {
        assert_eq!(percentile_label(&0.0), "0%");
        assert_eq!(percentile_label(&1.0), "90%");
        assert_eq!(percentile_label(&3.0), "99.9%");
    }

    #[test]
    fn draws_two_runs_on_one_chart() {
        let dir = std::env::temp_dir().join(format!("shoal-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("curve.svg");
        let a = vec![(0.0, 10.0), (0.5, 20.0), (0.99, 80.0), (0.999, 300.0)];
        let b = vec![(0.0, 5.0), (0.5, 9.0), (0.99, 30.0)];
        percentile_chart(&path, "test", &[("shoal".into(), a), ("raw".into(), b)]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        // Text is emitted as SVG <text> (no font rasterisation): the legend names are there.
        let texts: Vec<&str> = svg.split("<text").skip(1).collect();
        assert!(texts.iter().any(|t| t.contains("shoal")), "{svg}");
        assert!(texts.iter().any(|t| t.contains("raw")), "{svg}");
        assert!(
            texts.iter().any(|t| t.contains("99.9%")),
            "percentile axis labels: {svg}"
        );
        assert!(svg.matches("<polyline").count() >= 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
