//! Reads `tests/data/vectors.txt` (bytes captured from the C++ library, kept in the repository)
//! at run time (never pasted by hand into tests).
//!
//! The file is a sequence of sections (`V5  TCP connection, ...` between `====` rulers). Inside a
//! section, `key = value` lines give named values (the value is the first word after the last
//! ` = `), `[A->B rec 0] ...` lines open a block (its hex lines follow, or come after a
//! `record hex:` / `decrypted frame hex:` sub-heading), and indented hex lines continue the
//! current hex item.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

/// One parsed section.
#[derive(Debug, Default)]
pub struct Section {
    /// `key -> value` (first word after the last ` = `); block-local keys are `block/key`.
    pub values: HashMap<String, String>,
    /// Hex items: block frames (`A->B #0`), block sub-items (`A->B rec 0/record hex`),
    /// and multi-line values (`datagram hex`).
    pub hex: HashMap<String, Vec<u8>>,
    /// Block label -> its description (the text after `]`).
    pub blocks: Vec<(String, String)>,
}

impl Section {
    /// A named value, panicking with a clear message when absent.
    pub fn val(&self, key: &str) -> &str {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("vectors.txt: value {key:?} missing"))
    }

    /// A named value decoded from hex.
    pub fn val_hex(&self, key: &str) -> Vec<u8> {
        hex::decode(self.val(key)).unwrap_or_else(|e| panic!("vectors.txt: {key:?} not hex: {e}"))
    }

    /// A named value decoded from hex into a fixed array.
    pub fn val_arr<const N: usize>(&self, key: &str) -> [u8; N] {
        let v = self.val_hex(key);
        v.try_into().unwrap_or_else(|v: Vec<u8>| {
            panic!("vectors.txt: {key:?} has {} bytes, want {N}", v.len())
        })
    }

    /// A hex item.
    pub fn bytes(&self, key: &str) -> &[u8] {
        self.hex
            .get(key)
            .unwrap_or_else(|| panic!("vectors.txt: hex item {key:?} missing"))
    }

    /// The description fields `name=value` of a block.
    pub fn block_field(&self, block: &str, field: &str) -> String {
        let desc = &self
            .blocks
            .iter()
            .find(|(l, _)| l == block)
            .unwrap_or_else(|| panic!("vectors.txt: block {block:?} missing"))
            .1;
        let needle = format!("{field}=");
        let at = desc
            .split([' ', ','])
            .find(|w| w.starts_with(&needle))
            .unwrap_or_else(|| panic!("vectors.txt: block {block:?} has no field {field}"));
        at[needle.len()..].to_string()
    }

    /// Labels of blocks whose label starts with `prefix` (e.g. `A->B rec `), in file order.
    pub fn blocks_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.blocks
            .iter()
            .filter(|(l, _)| l.starts_with(prefix))
            .map(|(l, _)| l.clone())
            .collect()
    }
}

/// The captured bytes, kept in the repository (`tests/data/vectors.txt`: what the C++ library
/// wrote, described in `mesh/proto/protocol/`).
pub fn vectors_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vectors.txt"
    ))
}

fn is_hex_line(line: &str) -> bool {
    let t = line.trim();
    line.starts_with("    ")
        && !t.is_empty()
        && t.len() % 2 == 0
        && t.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Parses the whole file into sections keyed `V1`..`V6`. Panics (test failure) when missing.
pub fn load() -> HashMap<String, Section> {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read test vectors at {}: {e}", path.display()));
    parse(&text)
}

/// Parses vectors text.
pub fn parse(text: &str) -> HashMap<String, Section> {
    let mut sections: HashMap<String, Section> = HashMap::new();
    let mut current: Option<String> = None;
    let mut block: Option<String> = None;
    let mut hex_target: Option<String> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("=====") {
            // A ruler; the next line may be a section title followed by another ruler.
            if let Some(title) = lines.peek() {
                let name = title.split_whitespace().next().unwrap_or("");
                if name.len() >= 2
                    && name.starts_with('V')
                    && name[1..].bytes().all(|b| b.is_ascii_digit())
                {
                    current = Some(name.to_string());
                    sections.entry(name.to_string()).or_default();
                    lines.next();
                    // The ruler closing the title belongs to it.
                    if lines.peek().is_some_and(|l| l.starts_with("=====")) {
                        lines.next();
                    }
                } else if !title.starts_with("=====") {
                    current = None;
                }
            }
            block = None;
            hex_target = None;
            continue;
        }
        let Some(sec) = current.as_ref().and_then(|c| sections.get_mut(c)) else {
            continue;
        };
        if is_hex_line(line) {
            if let Some(t) = &hex_target {
                let bytes = hex::decode(line.trim()).expect("hex line");
                sec.hex
                    .entry(t.clone())
                    .or_default()
                    .extend_from_slice(&bytes);
            }
            continue;
        }
        let t = line.trim();
        if t.starts_with("---") {
            block = None;
            hex_target = None;
            continue;
        }
        if let Some(rest) = t.strip_prefix('[') {
            if let Some((label, desc)) = rest.split_once(']') {
                sec.blocks
                    .push((label.to_string(), desc.trim().to_string()));
                block = Some(label.to_string());
                hex_target = Some(label.to_string());
                continue;
            }
        }
        let scoped = |k: &str| match &block {
            Some(b) => format!("{b}/{k}"),
            None => k.to_string(),
        };
        if let Some(rest) = t.strip_prefix("decoded:") {
            for word in rest.split_whitespace() {
                if let Some((k, v)) = word.split_once('=') {
                    sec.values.insert(format!("decoded.{k}"), v.to_string());
                }
            }
            hex_target = None;
            continue;
        }
        if let Some(head) = t.strip_suffix(':') {
            hex_target = Some(scoped(head));
            continue;
        }
        if let Some((key, _)) = t.split_once(" = ") {
            let last = t.rsplit_once(" = ").expect("has ' = '").1;
            let value = last.split_whitespace().next().unwrap_or("").to_string();
            let key = scoped(key.trim());
            if value.is_empty() {
                hex_target = Some(key.clone());
            } else {
                hex_target = None;
            }
            sec.values.insert(key, value);
            continue;
        }
        if let Some(key) = t.strip_suffix(" =") {
            hex_target = Some(scoped(key.trim()));
            continue;
        }
        hex_target = None;
    }
    sections
}
