#!/bin/bash
# bench/notes/shard-tasks.md, "Topic samples from shard tasks": two-process runs on loopback,
# interleaved, one process per end, each row a fresh pair of processes.
#
#   LG=/tmp/t26-tools/lg BASE=/tmp/t26-tools/lg-base QUIET=/work/wt/quiet.sh \
#     bench/notes/shard-topics-pairs.sh PART...
#
# PART (each prints TSV rows, then its ratios and medians):
#   topics  64 B and 1 KiB topic samples A->B, $PAIRS rounds (default 5), order alternated:
#           shard tasks at both ends (`pub --on-shard --topic` -> `sub --on-shard --topic`),
#           application threads (`pub --topic` -> `sub --topic`), and raw length-prefixed TCP
#           (`pub --raw --framing lp` -> `sub --raw --framing lp`: one writer thread with a
#           64 KiB BufWriter, one reader thread that splits and parses every payload);
#           samples/s and CPU (user+sys, both processes) per delivered sample.
#   base    the application-thread API, this build ($LG) against the one before ($BASE):
#           `pub --topic` -> `sub --topic`, 64 B and 1 KiB, $BASE_PAIRS pairs (default 10).
#   ping    64 B two-process ping-pong, $PAIRS rounds: raw TCP, application threads with
#           `--spin-us 100` at both ends, shard tasks at both ends (`--on-shard`).
#
# LG and BASE: release binaries copied outside /work/wt; run with a cwd outside the worktree.
# Each row runs under $QUIET (the wrapper that stops the other sessions' processes whose cwd is
# under /work/wt while it runs; one row at a time, so nobody stays stopped for long). It stops only processes whose cwd is under /work/wt, so each
# row first waits (at most $IDLE_WAIT s, default 120) until no other process runs from
# another directory under /tmp (another session's benchmark), and the last column says
# whether one ran at any time during the row (checked every 200 ms; 1: the row shared the
# machine, and the summary leaves its pair out).
set -u
bin=${LG:-/tmp/t26-tools/lg}
base=${BASE:-/tmp/t26-tools/lg-base}
pairs=${PAIRS:-5}
base_pairs=${BASE_PAIRS:-10}
dur=${DURATION_MS:-2000}
logs=$(mktemp -d)
QUIET=${QUIET:-}
export bin dur

# Processes running from another directory under /tmp than this run's (benchmarks of other
# sessions, which quiet.sh does not stop), by pid. One `ls` per call: the watcher below calls
# it five times a second while a row runs, so it must cost next to nothing.
foreign() {
  local here pid
  here=$(pwd)
  # shellcheck disable=SC2012
  ls -l /proc/[0-9]*/cwd 2>/dev/null | awk -v here="$here" '
    $NF ~ /^\/tmp\// && index($NF, here) != 1 { split($(NF-2), a, "/"); print a[3] }' |
    while read -r pid; do
      case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
        ""|bash|sh|*.sh|sleep|timeout|env|tee|top|python3|jq|awk|sed|ls) continue;;
      esac
      echo "$pid"
    done
}

idle() {
  local i
  for i in $(seq "${IDLE_WAIT:-120}"); do
    [[ -z $(foreign) ]] && return 0
    sleep 1
  done
  echo "still busy after ${IDLE_WAIT:-120} s: $(foreign | head -3 | tr '\n' ' ')" >&2
}

# Watches for foreign processes every 200 ms until killed; writes 1 to $1 once it saw one.
watch_foreign() {
  echo 0 >"$1"
  while true; do
    [[ -n $(foreign) ]] && { echo 1 >"$1"; return; }
    sleep 0.2
  done
}

# Compiler processes of other sessions' builds that quiet.sh does not stop: cargo runs rustc
# for a registry crate with that crate's source as cwd (their cargo is stopped by quiet.sh,
# not they).
builds() {
  local p cwd
  for p in /proc/[0-9]*; do
    case "$(cat "$p/comm" 2>/dev/null)" in rustc|rust-lld|cc|cc1|ld|build-script-bu*) ;; *) continue;; esac
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case "$cwd" in /work/wt/*) continue;; esac
    echo "${p#/proc/}"
  done
}

# Runs "$@" (a row) under $QUIET, with the other sessions' compiler processes stopped too;
# sets `seen` to 1 if another session's benchmark process ran meanwhile.
watched() {
  local flag=$logs/seen w stopped
  stopped=$(builds)
  # shellcheck disable=SC2086
  [[ -n $QUIET && -n $stopped ]] && kill -STOP $stopped 2>/dev/null
  watch_foreign "$flag" & w=$!
  $QUIET "$@"
  kill "$w" 2>/dev/null; wait "$w" 2>/dev/null
  # shellcheck disable=SC2086
  [[ -n $stopped ]] && kill -CONT $stopped 2>/dev/null
  seen=$(cat "$flag")
}

# Starts BIN ARGS... --listen 127.0.0.1:0 in the background (stdout to $1.out, stderr to $1);
# sets addr and pid.
listen() {
  local log=$1 b=$2 i; shift 2
  "$b" "$@" --listen 127.0.0.1:0 >"$log.out" 2>"$log" &
  pid=$!
  for i in $(seq 300); do
    addr="$(sed 2>/dev/null -n 's/.* ready: .*listen=\([^ ]*\).*/\1/p' "$log" | head -1)"
    [[ -n $addr ]] && return 0
    sleep 0.1
  done
  echo "not ready: $*" >&2; cat "$log" >&2; return 1
}

# The measured part of a throughput row: LOG BIN SIZE FLAGS.
tp_run() {
  local log=$1 b=$2 size=$3 flags=$4
  # shellcheck disable=SC2086
  listen "$log-sub" "$b" sub --json --publishers 1 --warmup-ms 500 --duration-ms "$dur" $flags || return
  # shellcheck disable=SC2086
  "$b" pub --json --static-peer "$addr" --size "$size" --warmup-ms 500 --duration-ms "$dur" \
    $flags >"$log-pub.json" 2>"$log-pub.err"
  wait "$pid"
}

# One throughput row: PART SIZE NAME PAIR BIN FLAGS. Prints
# part size name pair samples/s delivered lost sub-cpu-s pub-cpu-s shared.
tp() {
  local part=$1 size=$2 name=$3 pair=$4 b=$5 flags=$6 log=$logs/$1-$2-$3-$4
  idle
  local s p seen
  watched bash -c 'tp_run "$@"' _ "$log" "$b" "$size" "$flags"
  s=$(jq -r '[.msgs_per_s, .delivered, .lost, (.usage.cpu_user_s + .usage.cpu_sys_s)] | @tsv' "$log-sub.out")
  p=$(jq -r '.usage.cpu_user_s + .usage.cpu_sys_s' "$log-pub.json")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$part" "$size" "$name" "$pair" "$s" "$p" "$seen"
}

# One ping-pong row: NAME PAIR FLAGS. Prints ping part size name pair p50 p99 p99.9 round-trips
# ping-cpu pong-cpu shared.
pp_run() {
  local log=$1 name=$2 flags=$3
  # shellcheck disable=SC2086
  listen "$log-pong" "$bin" pong --quiet $flags || return
  # shellcheck disable=SC2086
  "$bin" ping $flags --listen 127.0.0.1:0 --static-peer "$addr" --size 64 --duration-ms 3000 \
    --warmup-ms 500 --markdown "$name" 2>"$log-ping.err" >"$log-ping.md"
  wait "$pid"
}

pp() {
  local name=$1 pair=$2 flags=$3 log=$logs/ping-$1-$2 seen
  idle
  watched bash -c 'pp_run "$@"' _ "$log" "$name" "$flags"
  awk -F'|' -v n="$name" -v p="$pair" -v s="$seen" '{ for (i = 2; i <= NF; i++) gsub(/ /, "", $i)
    printf "ping\t64\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, p, $4, $6, $7, $10, $11, $12, s }' "$log-ping.md"
}

export -f listen tp_run pp_run

topics() {
  local size i order f
  for size in 64 1024; do
    for i in $(seq "$pairs"); do
      if (( i % 2 )); then order="shard thread raw"; else order="raw thread shard"; fi
      for f in $order; do
        case $f in
          shard) tp topics "$size" shard "$i" "$bin" "--on-shard --topic bench/samples";;
          thread) tp topics "$size" thread "$i" "$bin" "--topic bench/samples";;
          raw) tp topics "$size" raw-lp "$i" "$bin" "--raw --framing lp";;
        esac
      done
    done
  done
}

base_ab() {
  local size i
  for size in 64 1024; do
    for i in $(seq "$base_pairs"); do
      if (( i % 2 )); then
        tp base "$size" before "$i" "$base" "--topic bench/samples"
        tp base "$size" after "$i" "$bin" "--topic bench/samples"
      else
        tp base "$size" after "$i" "$bin" "--topic bench/samples"
        tp base "$size" before "$i" "$base" "--topic bench/samples"
      fi
    done
  done
}

ping() {
  local i order f
  for i in $(seq "$pairs"); do
    if (( i % 2 )); then order="raw spin shard"; else order="shard spin raw"; fi
    for f in $order; do
      case $f in
        raw) pp raw "$i" "--raw";;
        spin) pp thread-spin100 "$i" "--spin-us 100";;
        shard) pp shard "$i" "--on-shard";;
      esac
    done
  done
}

# Per-pair ratios against the baseline row of the same part, size and pair; medians. Also
# usable alone on a saved TSV: `shard-topics-pairs.sh summary FILE`.
summary() {
  python3 -c '
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
# A pair with a row that shared the machine with another session (last column 1) is left out.
shared = {(r[0], r[1], r[3]) for r in rows if r[-1] == "1"}
if shared:
    print(f"left out (shared the machine): {len(shared)} pair(s): " + " ".join(f"{p}/{s}/{i}" for p, s, i in sorted(shared)))
by = {}
for r in rows:
    if (r[0], r[1], r[3]) not in shared:
        by.setdefault((r[0], r[1]), {}).setdefault(r[2], {})[r[3]] = r[4:-1]
med = lambda v: st.median(v) if v else float("nan")
for (part, size), names in sorted(by.items()):
    if part == "ping":
        raw = names.get("raw", {})
        for n, per in names.items():
            if n == "raw": continue
            for col, j in (("p50", 0), ("p99", 1), ("p99.9", 2)):
                rs = [float(v[j]) / float(raw[p][j]) for p, v in per.items() if p in raw]
                print(f"ping {n}/raw {col}: " + " ".join(f"{x:.2f}" for x in rs) + f" -> median {med(rs):.2f}x")
            for nn in (n, "raw"):
                vals = names[nn].values()
                print(f"ping {nn}: median p50 {med([float(v[0]) for v in vals]):.1f} us, p99.9 {med([float(v[2]) for v in vals]):.1f} us, cpu/round trip {med([(float(v[4]) + float(v[5])) / float(v[3]) * 1e6 for v in vals]):.1f} us")
        continue
    ref = "raw-lp" if part == "topics" else "before"
    base = names.get(ref, {})
    for n, per in sorted(names.items()):
        rate = med([float(v[0]) for v in per.values()])
        cpu = med([(float(v[3]) + float(v[4])) / float(v[1]) * 1e9 for v in per.values() if float(v[1]) > 0])
        lost = sum(int(float(v[2])) for v in per.values())
        print(f"{part} {size} B {n}: median {rate:.0f} samples/s, cpu {cpu:.0f} ns/sample (both processes), lost {lost}")
        if n == ref: continue
        rs = [float(v[0]) / float(base[p][0]) for p, v in per.items() if p in base]
        cs = [(float(v[3]) + float(v[4])) / float(v[1]) / ((float(base[p][3]) + float(base[p][4])) / float(base[p][1])) for p, v in per.items() if p in base and float(v[1]) > 0]
        print(f"  {n}/{ref} rate: " + " ".join(f"{x:.2f}" for x in rs) + f" -> median {med(rs):.2f}x")
        print(f"  {n}/{ref} cpu/sample: " + " ".join(f"{x:.2f}" for x in cs) + f" -> median {med(cs):.2f}x")
' "$1"
}

if [[ ${1:-} == summary ]]; then summary "$2"; exit; fi
for part in "$@"; do
  out=$logs/$part.tsv
  case $part in
    topics) topics;;
    base) base_ab;;
    ping) ping;;
    *) echo "unknown part $part" >&2; exit 2;;
  esac | tee "$out"
  summary "$out"
done
echo "rows: $logs" >&2
