#!/usr/bin/env python3
"""Medians per build of the runs storm-ab.sh wrote: storm_ab_summary.py DIR PREFIX...

With two builds, the last column is the second over the first (labels sorted)."""
import glob
import json
import statistics
import sys


def figures(r):
    s, x = r["startup"], r.get("restart") or {}
    b = s.get("bystander") or {}
    ba = s.get("bystander_apart") or {}
    xb = x.get("bystander") or {}
    xba = x.get("bystander_apart") or {}
    m = s.get("machine") or {}
    return {
        "full membership, ms": s["full_membership_ms"],
        "all linked, ms": s["all_linked_ms"],
        "start CPU per node, core-s": s["cpu_pct"]["median"] * s["window_s"] / 100,
        "frames received per node over the start": s["frames_in"]["median"],
        "links closed over the start": s["links_closed"],
        "bystander woke late p50, ms": b.get("woke_late_ms", {}).get("p50"),
        "bystander woke late p90, ms": b.get("woke_late_ms", {}).get("p90"),
        "bystander in a session of its own woke late p50, ms": ba.get("woke_late_ms", {}).get("p50"),
        "bystander in a session of its own woke late p90, ms": ba.get("woke_late_ms", {}).get("p90"),
        "bystander in a session of its own woke late max, ms": ba.get("woke_late_ms", {}).get("max"),
        "the machine's work over the start, core-s": m["busy_mean"] * s["window_s"] if m else None,
        "restart: full membership, ms": x.get("full_membership_ms"),
        "restart: all linked, ms": x.get("all_linked_ms"),
        "restart: others' CPU, % of a core": x.get("cpu_pct_window_mean"),
        "restart: machine, busy cores": (x.get("machine") or {}).get("busy_mean"),
        "restart: bystander woke late p90, ms": xb.get("woke_late_ms", {}).get("p90"),
        "restart: bystander in a session of its own woke late p90, ms": xba.get("woke_late_ms", {}).get("p90"),
    }


def main():
    d, prefixes = sys.argv[1], sys.argv[2:]
    runs = {}
    for p in prefixes:
        for f in sorted(glob.glob(f"{d}/{p}-*.json")):
            label = f.rsplit("-", 1)[1][: -len(".json")]
            try:
                r = json.load(open(f))
            except (OSError, ValueError):
                continue
            for k, v in figures(r).items():
                if v is not None:
                    runs.setdefault(label, {}).setdefault(k, []).append(v)
    labels = sorted(runs)
    print("figure |", " | ".join(f"{l} (median of {len(runs[l]['all linked, ms'])})" for l in labels))
    for k in runs[labels[0]]:
        med = [statistics.median(runs[l][k]) if runs[l].get(k) else float("nan") for l in labels]
        ratio = f" | {med[1] / med[0]:.2f}x" if len(med) == 2 and med[0] else ""
        print(k, "|", " | ".join(f"{m:.3f}" for m in med) + ratio)


if __name__ == "__main__":
    main()
