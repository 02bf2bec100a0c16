#!/usr/bin/env bash
# What an observer costs the mesh (issue 28): a 64 B topic run, `shoal-loadgen pub --topic`
# -> `sub --topic` on loopback (two processes), without and with `shoal hz` attached to the
# subscriber's node (so the subscriber also relays every sample to the observer), runs
# interleaved (without, with, without, with, ...), every process niced. Prints one line per
# run (the subscriber's samples/s, its one-way latency p50 / p99, its CPU per sample, and
# for "with" what hz measured) and the ratios of the medians.
#
#   bench/observer_cost.sh [RUNS] [RATE] [MODES]
#       RUNS rounds (default 5); RATE samples/s the writer is paced at (default 0: as fast
#       as backpressure allows); MODES the runs of a round, in order (default
#       "without with"): `without` no observer; `with` hz attached to the subscriber's node
#       (the subscriber relays every sample to it); `pubside` hz attached to both nodes (the
#       writer's tree reaches it straight from the publisher); `idle` an observer joined to
#       the subscriber's node with no reader (what being a member costs).
#
# Release builds (`cargo build --release -p shoal-loadgen -p shoal-cli`) are used as found.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
lg="$target/release/shoal-loadgen"
sh="$target/release/shoal"
runs="${1:-5}"
rate="${2:-0}"
modes="${3:-without with}"
dur=5000
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

one() {
    local mode=$1 port pport sub hz=""
    port=$((20000 + RANDOM % 20000))
    pport=$((port + 1))
    nice "$lg" sub --topic obs/cost --listen "127.0.0.1:$port" --duration-ms "$dur" \
        --warmup-ms 1000 --linger-ms 3000 --json >"$work/sub.json" 2>"$work/sub.err" &
    sub=$!
    sleep 0.5
    local peers=(--static-peer "127.0.0.1:$port")
    [ "$mode" = pubside ] && peers+=(--static-peer "127.0.0.1:$pport")
    case "$mode" in
    with | pubside)
        nice "$sh" --no-multicast "${peers[@]}" --listen 127.0.0.1:0 \
            --settle-ms 300 --json hz obs/cost --window-ms 1000 >"$work/hz.jsonl" 2>"$work/hz.err" &
        hz=$!
        # The observer links, settles and opens its reader before the writer starts.
        sleep 1.5
        ;;
    idle)
        # `nodes` waits for a view unchanged for --settle-ms: joined, no reader, for longer
        # than the run.
        nice "$sh" --no-multicast "${peers[@]}" --listen 127.0.0.1:0 --settle-ms 60000 \
            nodes >/dev/null 2>&1 &
        hz=$!
        sleep 1.5
        ;;
    esac
    nice "$lg" pub --topic obs/cost --static-peer "127.0.0.1:$port" --listen "127.0.0.1:$pport" \
        --size 64 --rate "$rate" --duration-ms "$dur" --warmup-ms 1000 --quiet >/dev/null 2>"$work/pub.err"
    wait "$sub"
    local got
    got=$(python3 -c '
import json,sys
r=json.load(open(sys.argv[1]))
u=r["usage"]; cpu=(u["cpu_user_s"]+u["cpu_sys_s"])*1e6/max(r["delivered"],1)
print(round(r["msgs_per_s"]), r["latency"]["p50_us"], r["latency"]["p99_us"], round(cpu,3))' "$work/sub.json")
    if [ "$mode" = idle ]; then
        kill "$hz" 2>/dev/null || true
        wait "$hz" 2>/dev/null || true
        echo "idle    $got (samples/s, p50 us, p99 us, sub CPU us/sample)"
    elif [ -n "$hz" ]; then
        kill "$hz" 2>/dev/null || true
        wait "$hz" 2>/dev/null || true
        # hz's busiest windows: what the observer saw while the writer ran.
        local seen
        seen=$(python3 -c '
import json,sys
w=[json.loads(l)["rate_hz"] for l in open(sys.argv[1]) if l.strip()]
w=sorted(w)[-3:] if w else [0]
print(round(sum(w)/len(w)))' "$work/hz.jsonl")
        printf '%-7s %s (samples/s, p50 us, p99 us, sub CPU us/sample); hz saw %s Hz\n' "$mode" "$got" "$seen"
    else
        echo "without $got (samples/s, p50 us, p99 us, sub CPU us/sample)"
    fi
    echo "$mode $got" >>"$work/all"
}

for _ in $(seq 1 "$runs"); do
    for m in $modes; do
        one "$m"
    done
done
python3 - "$work/all" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
modes = list(dict.fromkeys(r[0] for r in rows))
for i, what in enumerate(["samples/s", "latency p50 us", "latency p99 us", "sub CPU us/sample"]):
    base = statistics.median(float(r[1 + i]) for r in rows if r[0] == "without")
    line = [f"{what}: median without {base:.3f}"]
    for m in modes:
        if m == "without":
            continue
        v = [float(r[1 + i]) for r in rows if r[0] == m]
        line.append(f"{m} {statistics.median(v):.3f} ({statistics.median(v) / base:.3f}x,"
                    f" {min(v):.3f}..{max(v):.3f})")
    a = [float(r[1 + i]) for r in rows if r[0] == "without"]
    line.append(f"[without {min(a):.3f}..{max(a):.3f}]")
    print("; ".join(line))
EOF
