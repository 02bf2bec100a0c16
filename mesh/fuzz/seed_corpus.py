#!/usr/bin/env python3
"""Writes the fuzz seed corpus for frame_decode from mesh/proto/tests/data/vectors.txt.

Every plaintext frame in the vectors file (handshake frames and the decrypted frames of the
secured captures) becomes one seed, plus each V4 direction as one stream of frames in a row,
a Hello with Shoal's extension, and Shoal's two topic frames (hand-written, below).
Usage: python3 mesh/fuzz/seed_corpus.py [path/to/vectors.txt]
"""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
default = os.path.join(here, "..", "proto", "tests", "data", "vectors.txt")
path = sys.argv[1] if len(sys.argv) > 1 else default
out_dir = os.path.join(here, "seeds", "frame_decode")
os.makedirs(out_dir, exist_ok=True)

lines = open(path).read().splitlines()
header = re.compile(r"^\[(\w->\w) (#\d+|rec \d+)\] (?:.* -> )?(\w+) \(")
hexline = re.compile(r"^    [0-9a-f]+$")
section, i, streams, count = "", 0, {}, 0
while i < len(lines):
    line = lines[i]
    if re.match(r"^V\d ", line):
        section = line.split()[0]
    m = header.match(line)
    if not m:
        i += 1
        continue
    i += 1
    if "rec" in m.group(2):
        while not lines[i].strip().startswith("decrypted frame hex:"):
            i += 1
        i += 1
    blob = ""
    while i < len(lines) and hexline.match(lines[i]):
        blob += lines[i].strip()
        i += 1
    data = bytes.fromhex(blob)
    name = f"{section}-{m.group(1).replace('->', '')}-{m.group(2).replace('#', '').replace(' ', '')}-{m.group(3)}"
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)
    count += 1
    if section == "V4":
        streams.setdefault(m.group(1), b"")
        streams[m.group(1)] += data
for direction, data in streams.items():
    with open(os.path.join(out_dir, f"V4-stream-{direction.replace('->', '')}"), "wb") as f:
        f.write(data)
# A Hello carrying Shoal's extension block (magic, version 1, features 0, empty tail), so the
# fuzzer starts from the extension decoder too.
hello = open(os.path.join(out_dir, "V4-AB-0-Hello"), "rb").read()
ext = b"SHOL" + bytes([1]) + (0).to_bytes(8, "big") + (0).to_bytes(2, "big")
body = hello[4:] + ext
with open(os.path.join(out_dir, "shoal-ext-Hello"), "wb") as f:
    f.write(len(body).to_bytes(4, "big") + body)
count += 1
# Shoal's topic frames, written out by hand from the layout (mesh/proto/src/wire/topic_frames.rs);
# mesh/proto/tests/wire_errors.rs holds the same bytes and checks these files against them.
# Discovery: a Record, an entry of an unknown kind (skipped) and a Withdraw.
discovery = bytes.fromhex(
    "00000044" "09"  # length 68, type Discovery
    + "11" * 16  # origin
    + "0102030405060708" "08" "0000002a" "0001" "0003" "0003"  # seq ttl cycle part parts count
    + "01" "0005" "deadbeef01"  # Record
    + "7f" "0002" "aabb"  # kind 127, skipped
    + "02" "0010" + "22" * 16  # Withdraw
)
# Samples: writer a0..af, firstSeq 255, the samples "hi", "" and "abc".
samples = bytes.fromhex(
    "0000002e" "0a" "07" "00" "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf" "00000000000000ff" "0003"
    "00000002" "6869" "00000000" "00000003" "616263"
)
# The reliability frames (types 11 to 14), as in mesh/proto/tests/wire_reliable.rs.
W, R = "a0" * 16, "b0" * 16
heartbeat = bytes.fromhex("00000022" "0b" "05" + W + "0000000000000003" "0000000000000009")
acknack = bytes.fromhex(
    "00000032" "0c" "03" + W + R + "00000007" "0000000000000064" "0009" "8180"
)
repair = bytes.fromhex(
    "0000003b" "0d" "00" + W + R + "000000000000000a" "0002"
    "00000002" "6869" "00000005" "776f726c64"
)
gap = bytes.fromhex("00000032" "0e" "00" + W + R + "0000000000000001" "0000000000000001")
for name, data in [
    ("topic-Discovery", discovery),
    ("topic-Samples", samples),
    ("topic-stream", discovery + samples),
    ("reliable-Heartbeat", heartbeat),
    ("reliable-AckNack", acknack),
    ("reliable-Repair", repair),
    ("reliable-Gap", gap),
    ("reliable-stream", samples + heartbeat + acknack + repair + gap),
]:
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)
    count += 1
print(f"wrote {count + len(streams)} seeds to {out_dir}")
