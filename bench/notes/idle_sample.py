#!/usr/bin/env python3
"""Idle cost of a storm's nodes, measured from outside (issue 29).

Usage: idle_sample.py BIN NODES [--perf SECONDS OUT] [-- STORM ARGS...]

Runs `BIN storm --nodes NODES --no-restart --settle-ms 10000 --idle-ms 10000
--converge-timeout-ms 30000` (plus STORM ARGS), waits for the storm's "idle for" line (the
idle window starts after every node has full membership and the settle time, so every link
exists), then samples every `storm-node` child of the run twice, 0.5 s and 9.5 s into the
10 s window: per thread its CPU time (`/proc/PID/task/TID/schedstat`, ns) and its context
switches (`/proc/PID/task/TID/status`, voluntary + involuntary: a voluntary switch is a
thread parking, so each is one wake-up). Prints one JSON object: per node CPU % of a core and
wake-ups per s, in total and per thread name, and the storm's own report (stdout).

With `--perf S OUT`, also records `perf record` of every node for S seconds from 1 s into
the window (to OUT; read it with `perf report -i OUT --sort comm,symbol`).

It reads only /proc; the storm itself asks the nodes nothing inside its idle window, so the
two builds of an A/B are measured the same way, whatever their storm tool prints.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rfind(")") + 2 :].split()
        if int(rest[1]) == pid:
            out.append(int(p))
    return out


def threads(pid):
    """{tid: (name, cpu_ns, switches)}"""
    r = {}
    base = f"/proc/{pid}/task"
    for t in os.listdir(base):
        try:
            with open(f"{base}/{t}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/{t}/schedstat") as f:
                cpu = int(f.read().split()[0])
            with open(f"{base}/{t}/status") as f:
                st = f.read()
        except OSError:
            continue
        v = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
        n = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
        r[int(t)] = (name, cpu, v + n)
    return r


def kind(name):
    # Thread names: the node's executors and the storm node's own threads.
    return re.sub(r"[-_ ]?\d+$", "", name)


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    perf = None
    perf_out = "perf.data"
    if "--perf" in argv:
        i = argv.index("--perf")
        perf = float(argv[i + 1])
        perf_out = argv[i + 2]
        del argv[i : i + 3]
    binary, nodes = argv[0], argv[1]
    cmd = [
        binary, "storm", "--nodes", nodes, "--no-restart", "--settle-ms", "10000",
        "--idle-ms", "10000", "--converge-timeout-ms", "30000",
    ] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines = []
    buf = ""
    while True:
        ch = p.stderr.read(1)
        if not ch:
            break
        buf += ch
        if ch in "\n\r":
            err_lines.append(buf)
            if "idle for" in buf:
                break
            buf = ""
    kids = children(p.pid)
    time.sleep(0.5)
    t0 = time.monotonic()
    a = {k: threads(k) for k in kids}
    perf_proc = None
    if perf:
        time.sleep(0.5)
        # Every node: one node's 1 % of a core gives too few samples to read.
        perf_proc = subprocess.Popen(
            ["perf", "record", "-F", "999", "-o", perf_out, "-p", ",".join(map(str, kids)),
             "--", "sleep", str(perf)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    time.sleep(max(0.0, 9.0 - (time.monotonic() - t0)))
    b = {k: threads(k) for k in kids}
    dt = time.monotonic() - t0
    out, rest_err = p.communicate()
    if perf_proc:
        perf_proc.wait()
    per_node = []
    by_kind = {}
    for k in kids:
        cpu = sw = 0
        mine = {}
        for tid, (name, c1, s1) in b[k].items():
            if tid not in a[k]:
                continue
            _, c0, s0 = a[k][tid]
            cpu += c1 - c0
            sw += s1 - s0
            m = mine.setdefault(kind(name), [0, 0, 0])
            m[0] += 1
            m[1] += (c1 - c0) / dt / 1e7
            m[2] += (s1 - s0) / dt
        for kn, (cnt, c, w) in mine.items():
            kk = by_kind.setdefault(kn, {"n": [], "cpu": [], "wake": []})
            kk["n"].append(cnt)
            kk["cpu"].append(c)
            kk["wake"].append(w)
        per_node.append({"pid": k, "cpu_pct": cpu / dt / 1e7, "wakeups_per_s": sw / dt})
    cpu = [n["cpu_pct"] for n in per_node]
    wk = [n["wakeups_per_s"] for n in per_node]
    res = {
        "binary": binary,
        "nodes": len(kids),
        "window_s": dt,
        "cpu_pct_median": statistics.median(cpu) if cpu else None,
        "cpu_pct_max": max(cpu) if cpu else None,
        "wakeups_per_s_median": statistics.median(wk) if wk else None,
        "wakeups_per_s_max": max(wk) if wk else None,
        "threads": {
            k: {
                "threads_per_node": statistics.median(v["n"]),
                "cpu_pct_median": statistics.median(v["cpu"]),
                "wakeups_per_s_median": statistics.median(v["wake"]),
            }
            for k, v in sorted(by_kind.items())
        },
        "storm": out,
        "storm_rc": p.returncode,
    }
    print(json.dumps(res))


if __name__ == "__main__":
    main()
