//! Four processes contending on one JSON store of 1,000 sessions: every update's
//! latency (lock wait included), and whether any timed out. Among this crate's
//! processes a waiter is woken when the lock is released, not by a 25 ms poll.
//!
//! `cargo bench --bench contention` (prints a table; each child is this binary).

mod common;

use common::contention::{contend, run_child};

const PROCESSES: usize = 4;
const UPDATES: usize = 500;
const SESSIONS: usize = 1_000;

fn main() {
    if run_child() {
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    common::write_store(dir.path(), SESSIONS);
    let run = contend(dir.path(), PROCESSES, UPDATES);
    println!(
        "contention: {PROCESSES} processes x {UPDATES} updates on {SESSIONS} sessions (unsynced)"
    );
    println!(
        "  {} updates in {:.2} s = {:.0} updates/s; lock timeouts: {}",
        run.updates,
        run.elapsed.as_secs_f64(),
        run.rate(),
        run.timeouts
    );
    let (p50, p99, max) = (
        run.percentile_us(0.50),
        run.percentile_us(0.99),
        run.max_us(),
    );
    println!(
        "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; max / p50 = {:.1}",
        p50 as f64 / 1000.0,
        p99 as f64 / 1000.0,
        max as f64 / 1000.0,
        max as f64 / p50 as f64
    );
}
