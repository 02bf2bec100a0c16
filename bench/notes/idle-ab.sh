#!/usr/bin/env bash
# Copy idle_sample.py next to it and the binaries under test (lg-*) into a directory under /tmp; run under
# /work/wt/quiet.sh from there (see idle.md).
# ab.sh TAG A B: interleaved A B B A idle samples of 40-node storms (idle_sample.py), JSON lines to TAG.jsonl
set -u
tag=$1; a=$2; b=$3
: > "$tag.jsonl"
for bin in "$a" "$b" "$b" "$a"; do
  python3 idle_sample.py "./$bin" 40 >> "$tag.jsonl"
  sleep 2
done
