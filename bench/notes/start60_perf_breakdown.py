"""Where the CPU of a storm's start goes, from `perf script -F comm,ip,sym --inline` of a
`perf record -a --call-graph dwarf` (start60.md): each sample is put under the first of a few
known frames on its stack (the reverse-path rebuilds of the topics and control cores, the
membership input, shard reads and writes...), as a share of all samples of the machine.

    perf script -i perf.data -F comm,ip,sym --inline > perf.txt && python3 start60_perf_breakdown.py perf.txt
"""
import sys,collections
samples=[];cur=None
for line in open(sys.argv[1]):
    if not line.startswith((' ','\t')) and line.strip():
        cur=[line.split()[0],[]];samples.append(cur)
    elif line.strip() and cur: cur[1].append(line.strip())
tot=len(samples); c=collections.Counter()
for comm,st in samples:
    s=' '.join(st)
    if not comm.startswith('shoal-mesh'): c['other:'+comm[:12]]+=1; continue
    if comm.startswith('shoal-mesh-shar'):
        k='shard'
        for key in ['read_frames','next_write','on_link_timer','io_uring_enter','ToShard','on_cmd','handle_cmd','add_link','send_raw']:
            if key in s: k='shard: '+key; break
        c[k]+=1; continue
    for key,name in [('refresh_paths','ctl: topics refresh_paths'),('push_paths','ctl: push_paths'),('routes_due','ctl: routes_due other'),('refresh_snapshot','ctl: refresh_snapshot'),('on_membership','ctl: on_membership'),('on_digest','ctl: on_digest'),('on_discovery_in','ctl: on_discovery_in'),('handle_timeout','ctl: handle_timeout'),('topics_outputs','ctl: topics_outputs'),('round','ctl: round other'),('io_uring_enter','ctl: io_uring_enter')]:
        if key in s: c[name]+=1; break
    else: c['ctl: other']+=1
print(tot)
for k,v in c.most_common(25): print(f'{v/tot*100:5.1f}% {k}')
