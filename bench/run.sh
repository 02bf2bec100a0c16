#!/usr/bin/env bash
# Runs the Shoal vs raw TCP comparison set in one go with the release build of shoal-loadgen
# and writes a markdown report (to stdout, or to the file given as the first argument):
# throughput at 64 B, 1 KiB and 64 KiB (Shoal A->B broadcast vs the same frames over bare TCP,
# in one process), Shoal with a PSK vs plaintext Shoal at 64 B and 1 KiB, and round-trip /
# one-way latency vs raw TCP. Whole run: about a minute
# after the build. Latency histograms (.hgrm) and percentile charts (.svg) go to
# $SHOAL_BENCH_OUT (default: target/bench-run).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${1:-}"
target="${CARGO_TARGET_DIR:-$root/target}"
artifacts="${SHOAL_BENCH_OUT:-$target/bench-run}"
mkdir -p "$artifacts"

cargo build --release --quiet -p shoal-loadgen
bin="$target/release/shoal-loadgen"

report() {
    local cpu
    cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)"
    echo "# Shoal vs raw TCP"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- machine: $(nproc) CPU(s), ${cpu:-unknown CPU}, Linux $(uname -r)"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- binary: \`cargo build --release -p shoal-loadgen\` (one process, loopback, 1 shard per node, unpinned)"
    echo
    echo "## Throughput, A -> B, as fast as backpressure allows"
    echo
    local cmd=("$bin" bench --sizes 64,1024,65536 --duration-ms 2000 --warmup-ms 500 --quiet)
    echo "\`shoal-loadgen ${cmd[*]:1}\`"
    echo
    "${cmd[@]}"
    echo
    echo "Same bytes on the wire per message on both sides (58-byte Data header + payload);"
    echo "raw TCP = one writer thread with a 64 KiB BufWriter, one reader thread."
    echo
    echo "## Secured (PSK) vs plaintext Shoal"
    echo
    local psk=("$bin" bench --compare-psk --sizes 64,1024 --duration-ms 2000 --warmup-ms 500 --quiet)
    echo "\`shoal-loadgen ${psk[*]:1}\`"
    echo
    "${psk[@]}"
    echo
    echo "## Latency"
    echo
    echo "| run | transport | p50 µs | p90 µs | p99 µs | p99.9 µs | p99.99 µs | max µs | samples |"
    echo "|---|---|---|---|---|---|---|---|---|"
    local runs=(
        "pingpong-max|latency --mode ping-pong --size 64 --duration-ms 3000 --inline"
        "pingpong-spin20|latency --mode ping-pong --size 64 --duration-ms 3000 --inline --spin-us 20"
        "pingpong-10k|latency --mode ping-pong --size 64 --rate 10000 --duration-ms 3000"
        "oneway-20k|latency --mode one-way --size 64 --rate 20000 --duration-ms 3000"
    )
    local cmds=()
    for r in "${runs[@]}"; do
        local name="${r%%|*}" args="${r#*|}"
        # shellcheck disable=SC2086
        "$bin" $args --compare --quiet --markdown "$name" --out-prefix "$artifacts/$name"
        cmds+=("\`shoal-loadgen $args --compare --out-prefix $artifacts/$name\`")
    done
    echo
    echo "Fixed-rate runs are corrected for coordinated omission (HdrHistogram record_correct);"
    echo "ping-pong = targeted send A->B, targeted echo B->A, one message in flight;"
    echo "shoal-inline = both ends answer in an on_event callback on their shard thread (no"
    echo "application thread on the round trip); spin20 = shard executors poll 20 µs before parking."
    echo "Commands:"
    echo
    for c in "${cmds[@]}"; do echo "- $c"; done
    echo
    echo "Histograms and charts: \`$artifacts/*.hgrm\`, \`$artifacts/*.svg\`."
}

if [[ -n "$out" ]]; then
    report > "$out"
    echo "wrote $out" >&2
else
    report
fi
