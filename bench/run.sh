#!/usr/bin/env bash
# Runs the Shoal vs raw TCP comparison set in one go with the release build of shoal-loadgen
# and writes a markdown report (to stdout, or to the file given as the first argument):
# throughput at 64 B, 1 KiB and 64 KiB (Shoal A->B broadcast vs the same frames over bare TCP,
# in one process), topic samples A->B vs broadcast A->B vs bare TCP of length-prefixed payloads
# at 64 B and 1 KiB with a fan-out to 3 reader nodes (issue 12's ratios), Shoal with a PSK vs
# plaintext Shoal at 64 B and 1 KiB, round-trip /
# one-way latency vs raw TCP in one process, and the same between two processes (`ping` +
# `pong`; `pub` + `sub`; with application threads, shard tasks (`--on-shard`) and raw TCP,
# raw-lp included), and the discovery / control-plane measurements (`discovery`). Whole
# run: about three minutes after the build. Latency histograms (.hgrm) and percentile charts (.svg) go to
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
    echo "## Topics: samples A -> B vs broadcast A -> B vs raw TCP (length-prefixed)"
    echo
    local topics=("$bin" bench --topics --sizes 64,1024 --fanout 3 --duration-ms 2000 --warmup-ms 500 --quiet)
    echo "\`shoal-loadgen ${topics[*]:1}\`"
    echo
    "${topics[@]}"
    echo
    echo "Interleaved in one process, per size: broadcast A->B (as above), topic samples A->B (one"
    echo "writer on A, one matched reader on B, started once both nodes list the match) and bare TCP"
    echo "of \`u32 length | payload\` (raw-lp; one writer thread with a 64 KiB BufWriter, one reader"
    echo "thread that splits, parses and counts every message as the raw-tcp baseline does)."
    echo "Fan-out: one writer, a reader on each of 3 other nodes (full mesh); bytes out/sample ="
    echo "bytes every node wrote to links over the run / samples delivered to the readers."
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
    echo "| run | transport | p50 µs | p90 µs | p99 µs | p99.9 µs | p99.99 µs | max µs | samples | cpu s | pong cpu s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
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
    echo "cpu s = CPU time of the process over the measured run (in one process: both ends)."
    echo
    echo "## Latency between two processes (\`ping\` + \`pong\` on loopback)"
    echo
    echo "| run | transport | p50 µs | p90 µs | p99 µs | p99.9 µs | p99.99 µs | max µs | samples | ping cpu s | pong cpu s |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    local rows="" row
    for form in "shoal|" "shoal-spin100|--spin-us 100" "shoal-inline|--inline" \
        "shoal-onshard|--on-shard" "raw-tcp|--raw"; do
        row="$(two_process_ping "2proc-max" "${form#*|}")"
        echo "$row"
        rows+="$row"$'\n'
    done
    echo
    ratio_lines "$rows"
    echo
    echo "One ping in flight, 64 B, 3 s after a 0.5 s warm-up; the pong in its own process"
    echo "(\`shoal-loadgen pong --listen 127.0.0.1:0 [--inline|--raw]\`), the ping dialing it"
    echo "(\`shoal-loadgen ping --static-peer ADDR --size 64 --duration-ms 3000 [--inline|--raw]\`)."
    echo "ping cpu s covers the measured run; pong cpu s its first probe to the goodbye."
    echo "shoal-spin100: both nodes \`--spin-us 100\` (shards and the application's blocking receive"
    echo "poll 100 µs before they sleep, yielding the core between polls): its CPU is in the cpu columns."
    echo "shoal-onshard: both ends shard tasks (\`--on-shard\`: pings and echoes written from a task on"
    echo "the origin shard, what arrives taken from its inbox; no application thread on the round trip)."
    echo
    echo "## Throughput between two processes (\`pub\` + \`sub\` on loopback), 64 B, max rate"
    echo
    echo "| run | transport | delivered msg/s | MB/s | delivered | lost | sub cpu s |"
    echo "|---|---|---|---|---|---|---|"
    rows=""
    for form in "shoal|" "shoal-topic|--topic bench/samples" \
        "shoal-topic-onshard|--on-shard --topic bench/samples" "raw-tcp|--raw" \
        "raw-lp|--raw --framing lp"; do
        row="$(two_process_throughput "2proc-64" "${form#*|}")"
        echo "$row"
        rows+="$row"$'\n'
    done
    echo
    awk -F'|' '{ gsub(/ /, "", $3); r[$3] = $4 } END {
        if (r["raw-tcp"] > 0) printf "shoal / raw TCP delivered msg/s: %.2fx\n", r["shoal"] / r["raw-tcp"]
        if (r["shoal"] > 0) printf "shoal-topic / shoal broadcast delivered msg/s: %.2fx\n", r["shoal-topic"] / r["shoal"]
        if (r["raw-lp"] > 0) printf "shoal-topic / raw-lp: %.2fx; shoal-topic-onshard / raw-lp: %.2fx\n", r["shoal-topic"] / r["raw-lp"], r["shoal-topic-onshard"] / r["raw-lp"] }' <<<"$rows"
    echo
    echo "\`shoal-loadgen sub --listen 127.0.0.1:0 [--raw|--topic bench/samples]\` and \`shoal-loadgen"
    echo "pub --static-peer ADDR --size 64 --warmup-ms 500 --duration-ms 2000 [--raw|--topic"
    echo "bench/samples]\`, one process each. shoal-topic: one writer, one reader; the pub starts once"
    echo "its own node lists the match, so samples it writes before the sub's node routes the writer"
    echo "are dropped there and counted (\`dropped_unrouted_samples\`): they show as lost."
    echo "shoal-topic-onshard: the writer and the reader's side shard tasks (\`--on-shard\`: samples"
    echo "written from the origin shard, sample runs taken from its inbox). raw-lp: bare TCP of"
    echo "\`u32 length | payload\` (\`--raw --framing lp\`), one writer and one reader thread."
    echo
    echo "## Discovery and control plane (topics)"
    echo
    local part
    for part in latency match cpu; do
        echo "\`shoal-loadgen discovery --part $part\`"
        echo
        # A part that fails (e.g. a control plane too slow to answer) says so and the report goes on.
        if ! "$bin" discovery --part "$part" --quiet; then
            echo "(\`discovery --part $part\` failed: its error is on stderr)"
        fi
        echo
    done
    echo "In one process on loopback, default announce period (1 s). Latency: a writer on A writes"
    echo "32 B every 1 ms; per trial a reader is created on B (B already knows the writer) and timed"
    echo "to its first sample, then dropped, and the next trial starts once A reports it unmatched."
    echo "Matching: 10 nodes in a ring of static peers, 100 endpoints each (50 writers, 50 readers,"
    echo "20 topics), opened at once (a thread per node), timed until every node lists exactly the"
    echo "expected (writer, reader) pairs. Control plane: 20 helper nodes (a star) x 500 endpoints"
    echo "and a measured leaf node with 100 of its own (500 topics); once all are matched, the CPU of"
    echo "the measured node's control thread (and of its shard) from /proc/self/task/<tid>/stat"
    echo "over 10 s, while every node re-announces all its records every period."
    echo
    echo "Histograms and charts: \`$artifacts/*.hgrm\`, \`$artifacts/*.svg\`."
}

# Starts `shoal-loadgen ARGS... --listen 127.0.0.1:0` in the background, its stderr to $1 and
# stdout to $1.out, and sets `addr` to the address it says it listens on, `pid` to its pid.
start_listener() {
    local log=$1 i; shift
    "$bin" "$@" --listen 127.0.0.1:0 >"$log.out" 2>"$log" &
    pid=$!
    for i in $(seq 300); do
        addr="$(sed -n 's/.* ready: .*listen=\([^ ]*\).*/\1/p' "$log" 2>/dev/null | head -1)"
        [[ -n $addr ]] && return 0
        sleep 0.1
    done
    echo "bench/run.sh: $* did not get ready:" >&2
    cat "$log" >&2
    return 1
}

# One two-process ping-pong row: NAME FLAGS (FLAGS for both ends: "", --inline, --on-shard or
# --raw).
# The pong ends by itself after the ping's goodbye.
two_process_ping() {
    local name=$1 flags=$2 tag addr pid
    tag="$name${flags:+-${flags#--}}"
    tag="${tag// /-}"
    # shellcheck disable=SC2086
    start_listener "$artifacts/$tag-pong.log" pong --quiet $flags
    # shellcheck disable=SC2086
    "$bin" ping --listen 127.0.0.1:0 --static-peer "$addr" --size 64 --duration-ms 3000 \
        --warmup-ms 500 $flags --markdown "$name" --out-prefix "$artifacts/$tag"
    wait "$pid"
}

# One two-process throughput row: NAME FLAGS ("", --raw, "--topic NAME", ..., for both ends). The
# subscriber ends once it has the publisher's end marker.
two_process_throughput() {
    local name=$1 flags=$2 tag addr pid
    tag="$name${flags:+-${flags#--}}"
    tag="${tag//[ \/]/-}"
    # shellcheck disable=SC2086
    start_listener "$artifacts/$tag-sub.log" sub --publishers 1 --warmup-ms 500 \
        --duration-ms 2000 --markdown "$name" $flags
    # shellcheck disable=SC2086
    "$bin" pub --static-peer "$addr" --size 64 --warmup-ms 500 --duration-ms 2000 --quiet \
        $flags >/dev/null 2>"$artifacts/$tag-pub.log"
    wait "$pid"
    cat "$artifacts/$tag-sub.log.out"
}

# Each Shoal row's p50 / p99 against the raw TCP row of the same table.
ratio_lines() {
    awk -F'|' '$3 != "" { gsub(/ /, "", $3); p50[$3] = $4; p99[$3] = $6; order[n++] = $3 } END {
        for (i = 0; i < n; i++) { t = order[i]
            if (t != "raw-tcp" && p50["raw-tcp"] > 0)
                printf "- %s / raw TCP: p50 %.2fx, p99 %.2fx\n", t, p50[t] / p50["raw-tcp"], p99[t] / p99["raw-tcp"] } }' <<<"$1"
}

if [[ -n "$out" ]]; then
    report > "$out"
    echo "wrote $out" >&2
else
    report
fi
