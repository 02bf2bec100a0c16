# Prints one line per run of an idle-ab.sh JSON-lines file: CPU and wake-ups per node (median, max) and per thread,
# frames per peer per s, full-membership time and links closed (from the storm report). Issue 29, see idle.md.
import json,sys,re
for line in open(sys.argv[1]):
    d=json.loads(line)
    s=d['storm']
    pp=re.search(r"per node per peer per s:\s+median ([\d.]+)",s)
    fr=re.search(r"control frames received per node per s: median ([\d.]+)",s)
    full=re.search(r"full membership after (\d+) ms",s)
    cl=re.search(r"links closed (\d+)",s)
    th=d['threads']
    ctl=[v for k,v in th.items() if 'cont' in k][0]; sh=[v for k,v in th.items() if 'shar' in k][0]
    print(f"{d['binary']:12} cpu med {d['cpu_pct_median']:.2f}% max {d['cpu_pct_max']:.2f}%  wakes/s med {d['wakeups_per_s_median']:.0f} max {d['wakeups_per_s_max']:.0f}  ctl {ctl['cpu_pct_median']:.2f}%/{ctl['wakeups_per_s_median']:.0f}  shard {sh['cpu_pct_median']:.2f}%/{sh['wakeups_per_s_median']:.0f}  frames/peer/s {pp.group(1) if pp else '?'} frames/s {fr.group(1) if fr else '?'} full {full.group(1) if full else 'never'} ms closed {cl.group(1) if cl else '?'} rc {d['storm_rc']}")
