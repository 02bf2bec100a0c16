#!/usr/bin/env bash
# Interleaved 60-node storms of two (or more) builds, one JSON report per run and one summary
# line each (issue 29; bench/notes/start60.md). The builds are release `shoal-loadgen`
# binaries copied to DIR/lg-LABEL; the order is given, e.g. A B B A A B B A, so that drift in
# the machine's load falls on both alike. Summarise with storm_ab_summary.py DIR PREFIX.
#
#   storm-ab.sh DIR PREFIX LABEL...
set -euo pipefail
dir=$1 prefix=$2
shift 2
i=0
for label in "$@"; do
  i=$((i + 1))
  out="$dir/$prefix-$i-$label.json"
  rc=0
  timeout 400 "$dir/lg-$label" storm --nodes 60 --idle-ms 3000 --converge-timeout-ms 30000 \
    --json >"$out" 2>/dev/null || rc=$?
  echo "$(date +%T) $i $label rc=$rc $(python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, x = r["startup"], r.get("restart") or {}
b = (s.get("bystander") or {}).get("woke_late_ms", {})
ba = (s.get("bystander_apart") or {}).get("woke_late_ms", {})
print("full", s["full_membership_ms"], "linked", s["all_linked_ms"],
      "cpu-s/node", round(s["cpu_pct"]["median"] * s["window_s"] / 100, 3),
      "late p50/p90", round(b.get("p50", -1), 1), round(b.get("p90", -1), 1),
      "apart p90", round(ba.get("p90", -1), 1),
      "| restart full", x.get("full_membership_ms"), "linked", x.get("all_linked_ms"))
PY
)"
done
