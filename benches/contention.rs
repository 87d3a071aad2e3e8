//! Four processes contending on one JSON store of 1,000 sessions: every update's
//! latency (lock wait included), and whether any timed out. Among this crate's
//! processes a waiter is woken when the lock is released, not by a 25 ms poll.
//!
//! `cargo bench --bench contention` (prints a table; each child is this binary).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions, LockOptions};

const PROCESSES: usize = 4;
const UPDATES: usize = 500;
const SESSIONS: usize = 1_000;
const CHILD: &str = "AGENT_SESSIONS_CONTENTION_CHILD";

fn store(root: &str) -> JsonFileStore {
    JsonFileStore::new_with(
        root,
        JsonFileOptions {
            durability: Durability::Unsynced,
            lock: LockOptions {
                timeout: Duration::from_secs(10),
                ..LockOptions::default()
            },
            ..JsonFileOptions::default()
        },
    )
}

/// A child: `UPDATES` updates of its own session, printing each latency in µs
/// (`timeout` for a lock timeout).
fn child(root: &str, worker: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = store(root);
    let key = common::key(worker);
    runtime.block_on(async {
        for n in 0..UPDATES {
            let started = Instant::now();
            match store.with_session(&key, |e| e.updated_at = n as u64).await {
                Ok(()) => println!("{}", started.elapsed().as_micros()),
                Err(agent_sessions::Error::LockTimeout { .. }) => println!("timeout"),
                Err(error) => panic!("{error}"),
            }
        }
    });
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        let (root, worker) = spec.split_once('|').unwrap();
        child(root, worker.parse().unwrap());
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    common::write_store(dir.path(), SESSIONS);
    let root = dir.path().to_str().unwrap().to_owned();
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|worker| {
            Command::new(&exe)
                .env(CHILD, format!("{root}|{worker}"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut latencies = Vec::new();
    let mut timeouts = 0;
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            match line.parse::<u64>() {
                Ok(us) => latencies.push(us),
                Err(_) if line == "timeout" => timeouts += 1,
                Err(_) => {}
            }
        }
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let total = latencies.len() + timeouts;
    println!(
        "contention: {PROCESSES} processes x {UPDATES} updates on {SESSIONS} sessions (unsynced)"
    );
    println!(
        "  {total} updates in {:.2} s = {:.0} updates/s; lock timeouts: {timeouts}",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
    let p50 = percentile(&latencies, 0.50);
    let p99 = percentile(&latencies, 0.99);
    let max = *latencies.last().unwrap();
    println!(
        "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; max / p50 = {:.1}",
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
        max as f64 / 1000.0,
        max as f64 / p50 as f64
    );
}
