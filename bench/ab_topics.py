"""A/B of the topic legs of `shoal-loadgen bench --topics`: N interleaved pairs of two
binaries (env LG_A, LG_B; default /tmp/lg-A, /tmp/lg-B), medians and per-pair ratios.
Payload sizes from env LG_SIZES (default 64,1024). `topic_cpu_ns` is the topic leg's process
CPU (user + sys, both nodes, warm-up and drain included) per sample sent: lower is better.

Usage: python3 bench/ab_topics.py N
"""
import json, os, subprocess, sys, statistics

sizes = os.environ.get('LG_SIZES', '64,1024')
bins = {'A': os.environ.get('LG_A', '/tmp/lg-A'), 'B': os.environ.get('LG_B', '/tmp/lg-B')}
rows={k:[] for k in bins}
for i in range(int(sys.argv[1])):
    for k in (['A','B'] if i%2==0 else ['B','A']):
        out=subprocess.run([bins[k],'bench','--topics','--sizes',sizes,'--fanout','0','--duration-ms','2000','--warmup-ms','500','--json','--quiet'],capture_output=True,text=True).stdout
        v=json.loads(out)
        row={(r['payload_bytes'],m):(r[m]['msgs_per_s'] if isinstance(r[m],dict) else r[m]) for r in v for m in ('topic','raw_lp','broadcast','topic_per_raw_lp','topic_per_broadcast')}
        for r in v:
            t=r['topic']; u=t['usage']
            row[(r['payload_bytes'],'topic_cpu_ns')]=(u['cpu_user_s']+u['cpu_sys_s'])*1e9/max(t['sent'],1)
        rows[k].append(row); print(k, {f"{p}:{m}":round(x,3 if 'per' in m else 0 if 'ns' in m else -3) for (p,m),x in row.items()}, flush=True)
for p in [int(x) for x in sizes.split(',')]:
    for m in ('topic','topic_cpu_ns','topic_per_raw_lp','topic_per_broadcast'):
        a=[r[(p,m)] for r in rows['A']]; b=[r[(p,m)] for r in rows['B']]
        print(p,m,'A med',round(statistics.median(a),3),'B med',round(statistics.median(b),3),'B/A pairs',[round(y/x,2) for x,y in zip(a,b)])
