//! Starts runtimes until told to stop, to see what `RLIMIT_MEMLOCK` allows.
//!
//! `cargo run -p shoal-runtime --example memlock_probe -- <nodes> <shards> [ring_entries]`
//! starts `nodes` runtimes of `shards` shards (+1 control plane each) in this process and
//! prints the limit and the outcome. Run it under `prlimit --memlock=...` to probe.

use shoal_runtime::{memlock, Runtime};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let nodes = args.first().copied().unwrap_or(4);
    let shards = args.get(1).copied().unwrap_or(2);
    let entries = args.get(2).copied().unwrap_or(256) as u32;
    let (soft, hard) = memlock::memlock_limit().expect("getrlimit");
    println!(
        "RLIMIT_MEMLOCK soft={soft} hard={hard} uid={}",
        unsafe_free_uid()
    );
    let mut runtimes = Vec::new();
    for n in 0..nodes {
        match Runtime::builder()
            .name(format!("n{n}"))
            .shards(shards)
            .ring_entries(entries)
            .build()
        {
            Ok(rt) => runtimes.push(rt),
            Err(e) => {
                println!("node {n}: FAILED: {e}");
                std::process::exit(2);
            }
        }
    }
    println!("OK: {} executors running", nodes * (shards + 1));
    for rt in runtimes {
        rt.join().expect("clean stop");
    }
}

fn unsafe_free_uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l[4..].trim().to_owned())
        })
        .unwrap_or_default()
}
