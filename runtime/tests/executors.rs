//! Executors: spawning, placement, shutdown, panics.

use std::rc::Rc;
use std::time::Duration;

use shoal_runtime::channel::channel;
use shoal_runtime::{
    current_executor, current_shard, spawn_local, ControlPlacement, ExecutorId, JoinError,
    Placement, Runtime, RuntimeError, SpawnError,
};

#[test]
fn spawn_on_every_executor_returns_results() {
    let rt = Runtime::builder().shards(3).build().unwrap();
    let mut handles = Vec::new();
    for id in rt.executors() {
        // The future holds an Rc: it is built on the target executor and never crosses threads.
        handles.push((
            id,
            rt.spawn_on(id, move || {
                let local = Rc::new(7u64);
                async move {
                    let inner = spawn_local(async move { *local * 6 }).await.unwrap();
                    (current_executor(), current_shard(), inner)
                }
            })
            .unwrap(),
        ));
    }
    for (id, h) in handles {
        let (exec, shard, v) = h.join_blocking().unwrap();
        assert_eq!(exec, Some(id));
        assert_eq!(
            shard,
            match id {
                ExecutorId::Shard(i) => Some(i),
                ExecutorId::Control => None,
            }
        );
        assert_eq!(v, 42);
    }
    assert_eq!(current_executor(), None);
    rt.join().unwrap();
}

#[test]
fn spawn_errors_are_typed() {
    let rt = Runtime::builder().shards(1).build().unwrap();
    let err = rt.spawn_on(ExecutorId::Shard(5), || async {}).unwrap_err();
    assert_eq!(err, SpawnError::NoSuchExecutor(ExecutorId::Shard(5)));
    assert!(shoal_runtime::try_spawn_local(async {}).is_err());
    let handle = rt.handle();
    rt.join().unwrap();
    assert_eq!(
        handle
            .spawn_on(ExecutorId::Control, || async {})
            .unwrap_err(),
        SpawnError::Stopped(ExecutorId::Control)
    );
}

#[test]
fn spawn_from_inside_an_executor_to_another() {
    let rt = Runtime::builder().shards(2).build().unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(0), || async {
            let handle = shoal_runtime::current_handle().unwrap();
            handle
                .spawn_on(ExecutorId::Shard(1), || async { current_shard() })
                .unwrap()
                .await
        })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), Ok(Some(1)));
    rt.join().unwrap();
}

#[test]
fn pinned_placement_runs() {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let rt = Runtime::builder()
        .shards(2)
        .placement(Placement::Pinned((0..cpus).collect()))
        .control_placement(ControlPlacement::Pinned(0))
        .build()
        .unwrap();
    let h = rt
        .spawn_on(ExecutorId::Shard(1), || async { current_shard() })
        .unwrap();
    assert_eq!(h.join_blocking().unwrap(), Some(1));
    rt.join().unwrap();
}

/// The niceness of the calling thread.
fn own_nice() -> i32 {
    // Field 19 of the thread's stat line (getpriority can return -1 as a value).
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

#[test]
fn every_executor_runs_at_the_niceness_asked_and_the_builder_keeps_its_own() {
    let before = own_nice();
    let want = (before + 6).min(19);
    let rt = Runtime::builder().shards(2).nice(want).build().unwrap();
    for id in rt.executors() {
        let h = rt.spawn_on(id, || async { own_nice() }).unwrap();
        assert_eq!(h.join_blocking().unwrap(), want, "{id}");
    }
    assert_eq!(own_nice(), before, "the building thread is not changed");
    rt.join().unwrap();
    for bad in [-21, 20] {
        assert!(matches!(
            Runtime::builder().nice(bad).build(),
            Err(RuntimeError::Config(_))
        ));
    }
}

#[test]
fn bad_config_is_rejected() {
    assert!(matches!(
        Runtime::builder().shards(0).build(),
        Err(RuntimeError::Config(_))
    ));
    assert!(matches!(
        Runtime::builder().ring_entries(100).build(),
        Err(RuntimeError::Config(_))
    ));
    assert!(matches!(
        Runtime::builder()
            .placement(Placement::Pinned(vec![100_000]))
            .build(),
        Err(RuntimeError::Pin { .. })
    ));
}

#[test]
fn executor_panic_is_reported_and_closes_its_channels() {
    let rt = Runtime::builder().shards(2).build().unwrap();
    let (mut tx, mut rx) = channel::<u64>(4);
    let (ack_tx, mut ack_rx) = channel::<()>(1);
    // Shard 0 owns the receiver, reads a few messages, then panics.
    let victim = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            for _ in 0..3 {
                rx.recv().await.unwrap();
            }
            let mut ack_tx = ack_tx;
            ack_tx.send(()).await.unwrap();
            panic!("shard state corrupted");
        })
        .unwrap();
    // Shard 1 keeps sending; once shard 0 is gone its send must fail instead of hanging.
    let sender = rt
        .spawn_on(ExecutorId::Shard(1), move || async move {
            let mut sent = 0u64;
            loop {
                if tx.send(sent).await.is_err() {
                    return sent;
                }
                sent += 1;
            }
        })
        .unwrap();
    let sent = sender.join_blocking().unwrap();
    assert!(sent >= 3);
    assert_eq!(
        victim.join_blocking(),
        Err(JoinError::Panicked("shard state corrupted".into()))
    );
    // The ack channel's sender died with shard 0.
    let ack = futures_block(async move {
        ack_rx.recv().await.unwrap();
        ack_rx.recv().await
    });
    assert!(ack.is_err());
    // Shard 1 still works.
    let alive = rt.spawn_on(ExecutorId::Shard(1), || async { 1 }).unwrap();
    assert_eq!(alive.join_blocking().unwrap(), 1);
    match rt.join() {
        Err(RuntimeError::ExecutorPanicked { executor, message }) => {
            assert_eq!(executor, ExecutorId::Shard(0));
            assert_eq!(message, "shard state corrupted");
        }
        other => panic!("expected a reported panic, got {other:?}"),
    }
}

/// A future that completes once opened, keeping the waker of whoever waits on it.
#[derive(Clone, Default)]
struct Gate(std::sync::Arc<std::sync::Mutex<(bool, Option<std::task::Waker>)>>);

impl Gate {
    fn waited_on(&self) -> bool {
        self.0.lock().unwrap().1.is_some()
    }

    /// Opens the gate and wakes its waiter straight away (no channel defers this wake).
    fn open(&self) {
        let waker = {
            let mut g = self.0.lock().unwrap();
            g.0 = true;
            g.1.take()
        };
        waker.expect("a waiter").wake();
    }
}

impl std::future::Future for Gate {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let mut g = self.0.lock().unwrap();
        if g.0 {
            return std::task::Poll::Ready(());
        }
        g.1 = Some(cx.waker().clone());
        std::task::Poll::Pending
    }
}

#[test]
fn a_drop_during_a_panic_wakes_an_executor_task_outside_the_unwind() {
    // compio aborts the process when its task is woken from a panicking thread: a handle
    // dropped by a panicking application thread must still reach its executor.
    struct Handle(Gate);
    impl Drop for Handle {
        fn drop(&mut self) {
            let gate = &self.0;
            assert!(std::thread::panicking());
            let done = shoal_runtime::outside_unwind(|| gate.open());
            assert_eq!(done, Some(()), "the helper ran it");
        }
    }
    let rt = Runtime::builder().shards(1).build().unwrap();
    let gate = Gate::default();
    let waiter = {
        let gate = gate.clone();
        rt.spawn_on(ExecutorId::Shard(0), move || gate).unwrap()
    };
    while !gate.waited_on() {
        std::thread::yield_now();
    }
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _handle = Handle(gate);
        panic!("application thread panics holding a handle");
    }));
    assert!(caught.is_err());
    assert_eq!(waiter.join_blocking(), Ok(()));
    // Outside an unwind it runs right here.
    let here = std::thread::current().id();
    assert_eq!(
        shoal_runtime::outside_unwind(|| std::thread::current().id()),
        Some(here)
    );
    rt.join().unwrap();
}

#[test]
fn shutdown_drops_running_tasks_and_their_channels() {
    let rt = Runtime::builder().shards(1).build().unwrap();
    let (tx, mut rx) = channel::<u8>(1);
    // A task that would wait forever holds the sender.
    drop(
        rt.spawn_on(ExecutorId::Shard(0), move || async move {
            let _tx = tx;
            std::future::pending::<()>().await
        })
        .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(20));
    rt.join().unwrap();
    assert!(futures_block(rx.recv()).is_err());
}

#[test]
fn two_runtimes_in_one_process() {
    let a = Runtime::builder().name("a").shards(2).build().unwrap();
    let b = Runtime::builder().name("b").shards(2).build().unwrap();
    let handle_b = b.handle();
    let ha = a
        .spawn_on(ExecutorId::Shard(1), || async {
            std::thread::current().name().map(str::to_owned)
        })
        .unwrap();
    let hb = b
        .spawn_on(ExecutorId::Control, || async {
            std::thread::current().name().map(str::to_owned)
        })
        .unwrap();
    assert_eq!(ha.join_blocking().unwrap().as_deref(), Some("a-shard-1"));
    assert_eq!(hb.join_blocking().unwrap().as_deref(), Some("b-control"));
    a.join().unwrap();
    // Dropping without join stops and joins too.
    drop(b);
    assert!(hb_after_drop_is_stopped(&handle_b));
}

/// Minimal block_on for a plain test thread (the runtime's channels accept any waker).
fn futures_block<F: std::future::Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct T(std::thread::Thread);
    impl Wake for T {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(T(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

#[test]
fn handles_cross_threads_and_spawn_queue_is_bounded() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Runtime>();
    send_sync::<shoal_runtime::Handle>();
    send_sync::<shoal_runtime::channel::IngressSender<u8>>();
    send::<shoal_runtime::JoinHandle<u8>>();
    send::<shoal_runtime::channel::Sender<u8>>();
    send::<shoal_runtime::channel::Receiver<u8>>();
    send::<shoal_runtime::channel::MeshEndpoint<u8>>();

    let rt = Runtime::builder().spawn_queue(2).build().unwrap();
    // Park the shard so the spawn queue cannot drain, then overfill it.
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
    let blocker = rt
        .spawn_on(ExecutorId::Shard(0), move || async move {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap()
        })
        .unwrap();
    started_rx.recv().unwrap();
    let mut accepted = Vec::new();
    let mut full = 0;
    for _ in 0..5 {
        match rt.spawn_on(ExecutorId::Shard(0), || async { 1 }) {
            Ok(h) => accepted.push(h),
            Err(SpawnError::QueueFull(ExecutorId::Shard(0))) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(accepted.len(), 2);
    assert_eq!(full, 3);
    assert_eq!(
        rt.handle().spawn_queue_full_events(ExecutorId::Shard(0)),
        Some(3)
    );
    gate_tx.send(()).unwrap();
    blocker.join_blocking().unwrap();
    for h in accepted {
        assert_eq!(h.join_blocking().unwrap(), 1);
    }
    rt.join().unwrap();
}

fn hb_after_drop_is_stopped(h: &shoal_runtime::Handle) -> bool {
    matches!(
        h.spawn_on(ExecutorId::Shard(0), || async {}),
        Err(SpawnError::Stopped(ExecutorId::Shard(0)))
    )
}
