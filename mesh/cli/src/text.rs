//! Small text helpers shared by the commands: short ids, durations, sizes, payloads, name
//! patterns and close names.
//!
//! **Owns:** how numbers, ids and payloads read. **Must not touch:** any command's layout.

use crate::args::PayloadFormat;
use std::time::Duration;

/// The first 8 hex digits of an id (enough to tell nodes apart on a screen; `--json` has
/// them whole).
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// `1h 02m`, `3m 04s`, `12.3 s`, `450 ms`.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else if s >= 1 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// Microseconds as `45 µs` or `1.25 ms`.
pub fn micros(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

/// Bytes per second as `512 B/s`, `1.50 KiB/s`, `12.00 MiB/s`.
pub fn rate_bytes(bps: f64) -> String {
    if bps < 1024.0 {
        format!("{bps:.0} B/s")
    } else if bps < 1024.0 * 1024.0 {
        format!("{:.2} KiB/s", bps / 1024.0)
    } else {
        format!("{:.2} MiB/s", bps / (1024.0 * 1024.0))
    }
}

/// A payload as `echo` prints it: at most `max` bytes of it, rendered by `format`; with
/// the rendering's name (`utf8`, `json`, `hex`).
pub fn payload(bytes: &[u8], format: PayloadFormat, max: usize) -> (&'static str, String) {
    let cut = &bytes[..bytes.len().min(max)];
    let more = if bytes.len() > max { "…" } else { "" };
    let json = || {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .map(|v| v.to_string())
    };
    let hex = || ("hex", format!("{}{more}", hex::encode(cut)));
    match format {
        PayloadFormat::Hex => hex(),
        PayloadFormat::Utf8 => ("utf8", format!("{}{more}", String::from_utf8_lossy(cut))),
        PayloadFormat::Json => json().map_or_else(hex, |j| ("json", j)),
        PayloadFormat::Auto => {
            // A bare number or word also parses as JSON; text reads better as text then.
            if let Ok(s) = std::str::from_utf8(bytes) {
                let printable = s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t');
                let structured = matches!(s.trim_start().chars().next(), Some('{' | '['));
                if structured {
                    if let Some(j) = json() {
                        return ("json", j);
                    }
                }
                if printable {
                    let shown: String = s.chars().take(max).collect();
                    let more = if shown.len() < s.len() { "…" } else { "" };
                    return ("utf8", format!("{shown}{more}"));
                }
            }
            hex()
        }
    }
}

/// Whether `name` matches `pattern` (`*` any run of characters, `?` one character).
pub fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point: linear in practice, never exponential.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The names among `known` closest to `wanted` (edit distance at most a third of its
/// length, or containing it, or contained in it), closest first, at most five.
pub fn close_names<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = known
        .into_iter()
        .filter_map(|k| {
            let d = strsim::levenshtein(wanted, k);
            let near =
                d <= limit || (!wanted.is_empty() && (k.contains(wanted) || wanted.contains(k)));
            near.then_some((d, k))
        })
        .collect();
    scored.sort();
    scored.dedup_by_key(|(_, k)| *k);
    scored
        .into_iter()
        .take(5)
        .map(|(_, k)| k.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_runs_and_single_characters() {
        assert!(glob("sensors/*", "sensors/imu"));
        assert!(glob("*", ""));
        assert!(glob("s?n*/i*u", "sensors/imu"));
        assert!(!glob("sensors/?", "sensors/imu"));
        assert!(!glob("a*b", "acbd"));
        assert!(glob("*a*a*a*b", &"a".repeat(40).replace("aa", "ab")));
    }

    #[test]
    fn close_names_find_typos_and_parts_nearest_first() {
        let known = ["demo/topic", "demo/topics", "sensors/imu", "other"];
        assert_eq!(
            close_names("demo/topc", known),
            vec!["demo/topic".to_owned(), "demo/topics".to_owned()]
        );
        assert_eq!(close_names("imu", known), vec!["sensors/imu".to_owned()]);
        assert!(close_names("zzzzzzzzzz", known).is_empty());
    }

    #[test]
    fn payloads_render_as_json_text_or_hex() {
        let auto = |b: &[u8]| payload(b, PayloadFormat::Auto, 64);
        assert_eq!(auto(br#"{"x": 1}"#), ("json", r#"{"x":1}"#.to_owned()));
        assert_eq!(auto(b"hello 42"), ("utf8", "hello 42".to_owned()));
        assert_eq!(auto(&[0, 1, 0xff]), ("hex", "0001ff".to_owned()));
        assert_eq!(
            payload(b"abcdef", PayloadFormat::Hex, 2),
            ("hex", "6162…".to_owned())
        );
        assert_eq!(
            payload(b"[1,", PayloadFormat::Json, 8),
            ("hex", "5b312c".to_owned())
        );
        assert_eq!(
            payload(b"abcdef", PayloadFormat::Utf8, 3),
            ("utf8", "abc…".to_owned())
        );
    }

    #[test]
    fn durations_and_rates_read_at_their_scale() {
        assert_eq!(duration(Duration::from_millis(450)), "450 ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3 s");
        assert_eq!(duration(Duration::from_secs(184)), "3m 04s");
        assert_eq!(duration(Duration::from_secs(3720)), "1h 02m");
        assert_eq!(micros(45), "45 µs");
        assert_eq!(micros(1250), "1.25 ms");
        assert_eq!(rate_bytes(1536.0), "1.50 KiB/s");
    }
}
