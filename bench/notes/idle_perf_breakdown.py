# Groups a perf.data of storm nodes (idle_sample.py --perf) by thread and by kind of work (kernel wake-up, executor,
# membership, topics, ...): the breakdown in idle.md. Usage: idle_perf_breakdown.py FILE
import subprocess,sys,re,collections
f=sys.argv[1]
out=subprocess.run(["perf","report","-i",f,"--no-children","--sort","comm,dso,sym","--stdio","-F","overhead,comm,dso,sym"],capture_output=True,text=True).stdout
tot=collections.Counter(); cats=collections.Counter()
rules=[("membership",r"membership|on_membership|edge_with|MemberGraph"),("snapshot/refresh",r"refresh_snapshot|take_changed|nodes_view|TopicsCore>::view|connected_peers|known_peers|members"),
("topics/discovery",r"topics|discovery|Discovery|Announcer|record::"),("control round/poll",r"ControlCore|round|poll_timeout|handle_timeout|PeerManager|peers::"),
("beacon/scout",r"beacon|scout|Beacon"),("alloc",r"malloc|free|realloc|_int_|unlink_chunk|memmove|memcpy|memset"),("executor/compio",r"compio|Task|waker|Runtime|channel|wake|spawn"),
("shard core",r"shard|Links|read_frames|next_write|ShardCore|link::|Link::"),("kernel sched/wake",r"finish_task_switch|__schedule|io_cqring_wait|_raw_spin|schedule|irqentry|try_to_wake|ttwu|enqueue|dequeue|pick_next|update_"),("kernel other",r"\[k\]")]
for line in out.splitlines():
    m=re.match(r"\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+(\[.\])\s+(.*?)\s*$",line)
    if not m: continue
    pct=float(m.group(1)); comm=m.group(2); sym=m.group(4)+" "+m.group(5)
    tot[comm]+=pct
    c="other"
    for name,rx in rules:
        if re.search(rx,sym): c=name;break
    cats[(comm[:15],c)]+=pct
for k,v in tot.most_common(): print(f"{v:6.1f}% {k}")
for (comm,c),v in sorted(cats.items(),key=lambda x:-x[1]): print(f"{v:6.1f}% {comm} {c}")
