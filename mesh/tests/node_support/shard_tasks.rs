//! Helpers of the shard-task tests: a bounded wait inside a shard task, a step counter and
//! a GUID handed between a task and the test thread, a bounded join.
//!
//! **Owns:** the coordination between a shard task and its test. **Must not touch:** the
//! nodes (public API only).

use super::wait_until;
use shoal_mesh::topics::EndpointGuid;
use shoal_mesh::{ShardTask, ShardTaskError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Waits on a shard task (without blocking its shard) until `cond` holds; bounded.
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        shoal_runtime::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits for a shard task's end, at most `secs` (a hang fails the test instead of hanging it).
pub fn join<T: Send + 'static>(t: ShardTask<T>, secs: u64) -> Result<T, ShardTaskError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.join_blocking());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("the shard task ends in time")
}

/// A step counter shared by a shard task and the test thread.
#[derive(Clone, Default)]
pub struct Step(Arc<AtomicU64>);

impl Step {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Release);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    pub async fn reached(&self, v: u64) {
        until(&format!("step {v}"), || self.get() >= v).await
    }
}

/// A GUID handed from a shard task to the test thread.
#[derive(Clone, Default)]
pub struct Guid(Arc<Mutex<Option<EndpointGuid>>>);

impl Guid {
    pub fn put(&self, g: EndpointGuid) {
        *self.0.lock().unwrap() = Some(g);
    }
    pub fn wait(&self) -> EndpointGuid {
        let mut got = None;
        wait_until(20, "the task opened its endpoint", || {
            got = *self.0.lock().unwrap();
            got.is_some()
        });
        got.unwrap()
    }
}
