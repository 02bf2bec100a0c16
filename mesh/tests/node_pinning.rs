//! CPU pinning of a node's executors: with `pin_to_cpus`, the control-plane executor is pinned
//! too (to the last listed CPU), not only the data shards. And their niceness (`nice`): both
//! kinds of executor run at it, the application's threads keep their own.
//!
//! Each executor's affinity is read from inside it: event callbacks run on the executor that
//! raised the event (the control plane for `PeerConnected`, a data shard for `Message`), and
//! `/proc/thread-self/status` there describes that very thread, whatever else runs in the
//! test process.

mod node_support;

use node_support::*;
use shoal_mesh::{Event, MeshBuilder, MeshError};
use std::sync::{Arc, Mutex};

/// The CPUs the calling thread may run on.
fn my_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/thread-self/status").expect("thread status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/thread-self/status");
    parse_cpu_list(list.trim())
}

/// `0-2,5` → `[0, 1, 2, 5]` (the kernel's list format).
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let num = |s: &str| s.parse::<usize>().expect("a CPU number");
    list.split(',')
        .filter(|r| !r.is_empty())
        .flat_map(|r| match r.split_once('-') {
            Some((lo, hi)) => (num(lo)..=num(hi)).collect::<Vec<_>>(),
            None => vec![num(r)],
        })
        .collect()
}

/// The calling thread's niceness (field 19 of its stat line).
fn my_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("thread stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    rest.split(' ')
        .nth(16)
        .expect("field 19")
        .parse()
        .expect("a number")
}

/// What `probe` says on the thread of each kind of executor of `a`'s node, with the thread's
/// name: its control plane (where the `PeerConnected` callback runs) and its data shard
/// (where the `Message` callback runs), once a peer linked to it and broadcast.
fn on_each_executor<T: Clone + Send + 'static>(
    a: MeshBuilder,
    probe: fn() -> T,
) -> ((String, T), (String, T)) {
    type Seen<T> = Arc<Mutex<Option<(String, T)>>>;
    let record = move |slot: &Seen<T>| {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        slot.lock().unwrap().get_or_insert_with(|| (name, probe()));
    };
    let control: Seen<T> = Arc::default();
    let shard: Seen<T> = Arc::default();
    let (c, s) = (control.clone(), shard.clone());
    let a = a
        .on_event(move |ev| match ev {
            Event::PeerConnected { .. } => record(&c),
            Event::Message { .. } => record(&s),
            _ => {}
        })
        .build()
        .unwrap();
    a.start().unwrap();
    let b = fast().static_peer(ep(a.listen_port())).build().unwrap();
    b.start().unwrap();
    wait_until(10, "a raises PeerConnected", || {
        control.lock().unwrap().is_some()
    });
    wait_until(10, "b has its link to a", || {
        !b.connected_peers().is_empty()
    });
    b.broadcast_blocking("where do you run?").unwrap();
    wait_until(10, "a raises a Message event", || {
        shard.lock().unwrap().is_some()
    });
    a.stop();
    b.stop();
    let got = |slot: &Seen<T>| slot.lock().unwrap().clone().unwrap();
    (got(&control), got(&shard))
}

#[test]
fn pinning_puts_the_control_executor_on_the_last_listed_cpu() {
    assert_eq!(parse_cpu_list("0-2,5"), vec![0, 1, 2, 5]);
    // CPUs this process may use, so the test pins only where it is allowed (cpusets, CI).
    // With two or more, the first goes to the one shard and the last to the control plane;
    // unpinned, the control plane would keep all of them (what this test caught). With a
    // single CPU both get it and the test cannot tell pinned from unpinned.
    let cpus = my_cpus();
    let (shard_cpu, control_cpu) = (cpus[0], *cpus.last().expect("at least one CPU"));
    let ((name, on), (shard_name, shard_on)) =
        on_each_executor(fast().pin_to_cpus(vec![shard_cpu, control_cpu]), my_cpus);
    assert_eq!(
        name, "shoal-mesh-control",
        "PeerConnected runs on the control plane"
    );
    assert_eq!(
        on,
        vec![control_cpu],
        "control executor's CPUs (asked for {cpus:?})"
    );
    assert_eq!(
        shard_name, "shoal-mesh-shard-0",
        "Message runs on the data shard"
    );
    assert_eq!(shard_on, vec![shard_cpu], "data shard's CPUs");
}

#[test]
fn an_empty_cpu_list_is_refused_at_build() {
    assert!(matches!(
        fast().pin_to_cpus(Vec::new()).build(),
        Err(MeshError::Option(_))
    ));
}

#[test]
fn nice_from_the_settings_file_is_every_executors_and_not_the_applications() {
    let mine = my_nice();
    let want = (mine + 7).min(19);
    let a = MeshBuilder::from_toml_str(&format!("[node]\nnice = {want}\n"))
        .expect("valid settings")
        .scouting(false)
        .listen_addr(LOCALHOST);
    let (control, shard) = on_each_executor(a, my_nice);
    assert_eq!(control, ("shoal-mesh-control".to_owned(), want));
    assert_eq!(shard, ("shoal-mesh-shard-0".to_owned(), want));
    assert_eq!(
        my_nice(),
        mine,
        "the thread that started the node keeps its own"
    );
    for bad in ["[node]\nnice = 20\n", "[node]\nnice = -21\n"] {
        assert!(matches!(
            MeshBuilder::from_toml_str(bad).unwrap().build(),
            Err(MeshError::Option(_))
        ));
    }
}
