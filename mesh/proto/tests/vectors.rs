//! Checks the wire codec against the bytes captured from the C++ library in
//! `tests/data/vectors.txt` (kept in the repository), read at run time (never pasted here):
//! every plaintext frame and datagram must decode to the fields printed beside it and re-encode
//! to the same bytes.

use bytes::{Bytes, BytesMut};
use shoal_proto::wire::{
    decode_frame, take_frame, AuthConfirm, Beacon, Data, DecodeStatus, Frame, Hello, HelloIdentity,
    IdentityRecord, Membership, ANNOUNCE_FLAG_SECURED, MAX_MESSAGE_BYTES,
};
use shoal_proto::{MsgId, PeerId};
use std::collections::HashMap;
use std::path::PathBuf;

/// The captured bytes, kept in the repository (`tests/data/vectors.txt`; the protocol notes
/// are in `mesh/proto/protocol/`).
fn vectors_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/vectors.txt"
    ))
}

fn load() -> String {
    let path = vectors_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the wire test vectors at {}: {e}",
            path.display()
        )
    })
}

/// One frame printed in the file: its header line and the plaintext frame bytes under it.
#[derive(Debug)]
struct FrameVector {
    section: String,
    label: String,
    type_name: String,
    declared_len: usize,
    fields: HashMap<String, String>,
    bytes: Vec<u8>,
}

/// One discovery datagram with its decoded line.
#[derive(Debug)]
struct DatagramVector {
    section: String,
    bytes: Vec<u8>,
    fields: HashMap<String, String>,
    mac: Option<Vec<u8>>,
    mac_input_end: Option<usize>,
}

fn is_hex_line(l: &str) -> bool {
    let t = l.trim();
    l.starts_with("    ") && !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Collects the hex lines starting at `i`; returns the bytes and the index after them.
fn hex_block(lines: &[&str], mut i: usize) -> (Vec<u8>, usize) {
    let mut s = String::new();
    while i < lines.len() && is_hex_line(lines[i]) {
        s.push_str(lines[i].trim());
        i += 1;
    }
    (hex::decode(&s).expect("hex block"), i)
}

/// Splits `a=1, b=x, y, c=[...]` at the commas that start a new `key=`; values may hold commas.
fn parse_comma_fields(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut parts: Vec<String> = Vec::new();
    for piece in s.split(", ") {
        let starts_key = piece
            .split_once('=')
            .is_some_and(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric()));
        match parts.last_mut() {
            Some(last) if !starts_key => {
                last.push_str(", ");
                last.push_str(piece);
            }
            _ => parts.push(piece.to_owned()),
        }
    }
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let (k, v) = p.split_once('=').expect("key=value");
        out.insert(k.to_owned(), v.to_owned());
    }
    out
}

/// `magic=4d4d4341('MMCA') protocolVersion=1 ... groupName='vector-group'` (space separated).
fn parse_space_fields(s: &str) -> HashMap<String, String> {
    s.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// The parts of a frame's header line.
struct FrameHeader {
    label: String,
    type_name: String,
    declared_len: usize,
    fields: HashMap<String, String>,
    is_record: bool,
}

/// `[A->B #0] Hello (47 bytes)  fields` or `[A->B rec 0] 67 bytes record (...) -> Membership
/// (47-byte frame)  fields`.
fn parse_frame_header(l: &str) -> Option<FrameHeader> {
    let rest = l.strip_prefix('[')?;
    let (label, rest) = rest.split_once("] ")?;
    let (is_record, rest) = match rest.split_once(" -> ") {
        Some((_, after)) if label.contains(" rec ") => (true, after),
        _ => (false, rest),
    };
    let (type_name, rest) = rest.split_once(" (")?;
    let (len_text, fields) = rest.split_once(')')?;
    let declared_len = len_text
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(FrameHeader {
        label: label.to_owned(),
        type_name: type_name.to_owned(),
        declared_len,
        fields: parse_comma_fields(fields.trim()),
        is_record,
    })
}

fn parse(
    text: &str,
) -> (
    Vec<DatagramVector>,
    Vec<FrameVector>,
    HashMap<String, usize>,
) {
    let lines: Vec<&str> = text.lines().collect();
    let mut section = String::new();
    let mut datagrams = Vec::new();
    let mut frames = Vec::new();
    let mut captured = HashMap::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.len() > 3 && l.starts_with('V') && l.as_bytes()[1].is_ascii_digit() {
            section = l.split_whitespace().next().unwrap().to_owned();
            i += 1;
        } else if l == "datagram hex =" {
            let (bytes, next) = hex_block(&lines, i + 1);
            i = next;
            let mut dv = DatagramVector {
                section: section.clone(),
                bytes,
                fields: HashMap::new(),
                mac: None,
                mac_input_end: None,
            };
            while i < lines.len() && !lines[i].starts_with("=====") {
                let l = lines[i];
                if let Some(d) = l.strip_prefix("decoded: ") {
                    dv.fields = parse_space_fields(d);
                } else if let Some(m) = l.strip_prefix("mac (last 16 bytes) = ") {
                    dv.mac = Some(hex::decode(m.trim()).unwrap());
                } else if let Some((_, r)) = l.split_once("msg=datagram[0:") {
                    dv.mac_input_end = Some(r.split(']').next().unwrap().parse().unwrap());
                }
                i += 1;
            }
            datagrams.push(dv);
        } else if let Some(counts) = l.strip_prefix("bytes captured: ") {
            // "A->B 254, B->A 94 (whole connection, until close)"
            for part in counts.split(" (").next().unwrap().split(", ") {
                let (dir, n) = part.split_once(' ').unwrap();
                captured.insert(format!("{section} {dir}"), n.parse().unwrap());
            }
            i += 1;
        } else if let Some(h) = parse_frame_header(l) {
            i += 1;
            if h.is_record {
                // Skip the ciphertext; the plaintext frame follows "decrypted frame hex:".
                while !lines[i].trim().starts_with("decrypted frame hex:") {
                    i += 1;
                }
                i += 1;
            }
            let (bytes, next) = hex_block(&lines, i);
            i = next;
            frames.push(FrameVector {
                section: section.clone(),
                label: h.label,
                type_name: h.type_name,
                declared_len: h.declared_len,
                fields: h.fields,
                bytes,
            });
        } else {
            i += 1;
        }
    }
    (datagrams, frames, captured)
}

fn arr<const N: usize>(hex_text: &str) -> [u8; N] {
    hex::decode(hex_text)
        .expect("hex field")
        .try_into()
        .unwrap_or_else(|v: Vec<u8>| panic!("field {hex_text} has {} bytes, want {N}", v.len()))
}

fn field<'a>(f: &'a HashMap<String, String>, k: &str) -> &'a str {
    f.get(k)
        .unwrap_or_else(|| panic!("vector line lacks field {k}: {f:?}"))
}

fn flag(f: &HashMap<String, String>, k: &str) -> bool {
    match field(f, k) {
        "0" => false,
        "1" => true,
        v => panic!("{k}={v} is not a flag"),
    }
}

fn hello_from(f: &HashMap<String, String>) -> Hello {
    Hello {
        node_id: PeerId(arr(field(f, "nodeId"))),
        protocol_version: field(f, "protocolVersion").parse().unwrap(),
        tcp_listen_port: field(f, "tcpListenPort").parse().unwrap(),
        group_name: field(f, "groupName").to_owned(),
        nonce: u64::from_str_radix(field(f, "nonce"), 16).unwrap(),
        eph_pub_key: flag(f, "secure").then(|| arr(field(f, "ephPubKey"))),
        identity: flag(f, "hasIdentity").then(|| HelloIdentity {
            id_pub_key: arr(field(f, "idPubKey")),
            node_name: field(f, "nodeName").to_owned(),
        }),
        shoal: None,
    }
}

/// The frame the text line describes, built only from the printed fields.
fn expected_frame(v: &FrameVector) -> Frame {
    let f = &v.fields;
    match v.type_name.as_str() {
        "Hello" => Frame::Hello(hello_from(f)),
        "HelloAck" => Frame::HelloAck(hello_from(f)),
        "Heartbeat" => Frame::Heartbeat,
        "Goodbye" => Frame::Goodbye,
        "Data" => {
            let payload = hex::decode(field(f, "payloadHex")).unwrap();
            assert_eq!(
                payload.len(),
                field(f, "payloadLen").parse::<usize>().unwrap()
            );
            assert_eq!(payload, field(f, "payloadAscii").as_bytes());
            Frame::Data(Data {
                src: PeerId(arr(field(f, "src"))),
                dst: PeerId(arr(field(f, "dst"))),
                msg_id: MsgId(arr(field(f, "msgId"))),
                ttl: field(f, "ttl").parse().unwrap(),
                payload: Bytes::from(payload),
            })
        }
        "Membership" => {
            let list = field(f, "neighbors");
            let neighbours = list
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(", ")
                .filter(|s| !s.is_empty())
                .map(|s| PeerId(arr(s.trim_matches('\''))))
                .collect();
            Frame::Membership(Membership {
                origin: PeerId(arr(field(f, "origin"))),
                version: field(f, "version").parse().unwrap(),
                neighbours,
            })
        }
        "AuthConfirm" => Frame::AuthConfirm(AuthConfirm {
            tag: arr(field(f, "tag")),
            sig: flag(f, "hasSig").then(|| arr(field(f, "sig"))),
        }),
        "IdentityRecord" => Frame::IdentityRecord(IdentityRecord {
            id_pub_key: arr(field(f, "idPubKey")),
            version: field(f, "version").parse().unwrap(),
            sig: arr(field(f, "sig")),
            name: field(f, "name").to_owned(),
        }),
        other => panic!("{} {}: unknown frame type name {other}", v.section, v.label),
    }
}

#[test]
fn every_plaintext_frame_decodes_and_reencodes() {
    let (_, frames, _) = parse(&load());
    let mut per_section: HashMap<&str, usize> = HashMap::new();
    for v in &frames {
        let what = format!("{} {} {}", v.section, v.label, v.type_name);
        assert_eq!(
            v.bytes.len(),
            v.declared_len,
            "{what}: length in the header line"
        );
        let buf = Bytes::from(v.bytes.clone());
        let expected = expected_frame(v);
        match decode_frame(&buf, MAX_MESSAGE_BYTES).unwrap_or_else(|e| panic!("{what}: {e}")) {
            DecodeStatus::Complete { frame, len } => {
                assert_eq!(len, buf.len(), "{what}: consumed length");
                assert_eq!(frame, expected, "{what}: decoded fields");
            }
            DecodeStatus::NeedMore { .. } => panic!("{what}: NeedMore on a whole frame"),
        }
        let mut out = BytesMut::new();
        expected.encode(&mut out).unwrap();
        assert_eq!(
            hex::encode(&out),
            hex::encode(&v.bytes),
            "{what}: re-encoding"
        );
        assert_eq!(expected.encoded_len(), v.bytes.len(), "{what}: encoded_len");
        if let Frame::Data(d) = &expected {
            let mut vectored = d.header().unwrap().as_bytes().to_vec();
            vectored.extend_from_slice(&d.payload);
            assert_eq!(vectored, v.bytes, "{what}: header + payload");
        }
        *per_section.entry(v.section.as_str()).or_default() += 1;
    }
    // V4: 6 + 2 frames; V5: 2 + 4 records A->B, 2 + 1 B->A; V6: 2 + 6 A->B, 2 + 3 B->A.
    let want: HashMap<&str, usize> = [("V4", 8), ("V5", 9), ("V6", 13)].into();
    assert_eq!(
        per_section, want,
        "frames found per section of the vectors file"
    );
}

#[test]
fn v4_streams_split_into_the_captured_frames() {
    let (_, frames, captured) = parse(&load());
    for dir in ["A->B", "B->A"] {
        let mut stream = BytesMut::new();
        let mut expected = Vec::new();
        for v in frames
            .iter()
            .filter(|v| v.section == "V4" && v.label.starts_with(dir))
        {
            stream.extend_from_slice(&v.bytes);
            expected.push(expected_frame(v));
        }
        assert_eq!(
            Some(&stream.len()),
            captured.get(&format!("V4 {dir}")),
            "{dir} bytes"
        );
        let mut got = Vec::new();
        while let Some(f) = take_frame(&mut stream, MAX_MESSAGE_BYTES).unwrap() {
            got.push(f);
        }
        assert!(stream.is_empty(), "{dir}: bytes left over");
        assert_eq!(got, expected, "{dir}");
    }
}

#[test]
fn every_datagram_decodes_and_reencodes() {
    let (datagrams, _, _) = parse(&load());
    let sections: Vec<&str> = datagrams.iter().map(|d| d.section.as_str()).collect();
    assert_eq!(
        sections,
        ["V1", "V2", "V3"],
        "datagrams found in the vectors file"
    );
    for v in &datagrams {
        let f = &v.fields;
        let what = &v.section;
        assert_eq!(&field(f, "magic")[..8], "4d4d4341");
        let flags = u8::from_str_radix(field(f, "flags").trim_start_matches("0x"), 16).unwrap();
        let expected = Beacon {
            protocol_version: field(f, "protocolVersion").parse().unwrap(),
            flags,
            tcp_listen_port: field(f, "tcpListenPort").parse().unwrap(),
            node_id: PeerId(arr(field(f, "nodeId"))),
            group_name: field(f, "groupName").trim_matches('\'').to_owned(),
        };
        let d = Beacon::decode(&v.bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(d.announce, expected, "{what}");
        let mut out = Vec::new();
        match &v.mac {
            Some(mac) => {
                assert_eq!(flags & ANNOUNCE_FLAG_SECURED, 1, "{what}: secured flag");
                assert_eq!(
                    d.mac.as_ref().map(|m| m.to_vec()),
                    Some(mac.clone()),
                    "{what}"
                );
                assert_eq!(Some(d.mac_input.end), v.mac_input_end, "{what}: MAC input");
                assert_eq!(
                    d.mac_input.end + 16,
                    v.bytes.len(),
                    "{what}: MAC ends datagram"
                );
                expected
                    .encode_with_mac(&mut out, &arr(&hex::encode(mac)))
                    .unwrap();
            }
            None => {
                assert_eq!(d.mac, None, "{what}");
                assert_eq!(d.mac_input.end, v.bytes.len(), "{what}");
                expected.encode_body(&mut out).unwrap();
            }
        }
        assert_eq!(
            hex::encode(&out),
            hex::encode(&v.bytes),
            "{what}: re-encoding"
        );
    }
}
