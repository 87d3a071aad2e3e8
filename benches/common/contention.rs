//! Several processes updating one JSON store, shared by the `contention` and `floors`
//! benchmarks: each child is the benchmark binary itself, started with [`CHILD`] set,
//! and prints every update's latency (lock wait included).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions, LockOptions};

/// The environment variable that makes the benchmark binary a child:
/// `<root>|<worker>|<updates>`.
pub const CHILD: &str = "AGENT_SESSIONS_CONTENTION_CHILD";

/// What a run of several processes measured.
pub struct Contention {
    pub updates: usize,
    pub elapsed: Duration,
    pub timeouts: usize,
    /// Latencies of the updates that succeeded, in µs, sorted.
    pub latencies: Vec<u64>,
}

impl Contention {
    pub fn rate(&self) -> f64 {
        self.updates as f64 / self.elapsed.as_secs_f64()
    }

    pub fn percentile_us(&self, p: f64) -> u64 {
        self.latencies[((self.latencies.len() - 1) as f64 * p).round() as usize]
    }

    pub fn max_us(&self) -> u64 {
        *self.latencies.last().unwrap()
    }
}

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

/// Runs as a child if [`CHILD`] is set (and returns `true`): `updates` updates of the
/// worker's own session, one latency in µs per line (`timeout` for a lock timeout).
pub fn run_child() -> bool {
    let Ok(spec) = std::env::var(CHILD) else {
        return false;
    };
    let mut parts = spec.split('|');
    let (root, worker, updates): (&str, usize, usize) = (
        parts.next().unwrap(),
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = store(root);
    let key = super::key(worker);
    runtime.block_on(async {
        for n in 0..updates {
            let started = Instant::now();
            match store.with_session(&key, |e| e.updated_at = n as u64).await {
                Ok(()) => println!("{}", started.elapsed().as_micros()),
                Err(agent_sessions::Error::LockTimeout { .. }) => println!("timeout"),
                Err(error) => panic!("{error}"),
            }
        }
    });
    true
}

/// `processes` children of this binary, each making `updates` updates of its own
/// session in the store under `root`, all at once.
pub fn contend(root: &Path, processes: usize, updates: usize) -> Contention {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|worker| {
            Command::new(&exe)
                .env(CHILD, format!("{}|{worker}|{updates}", root.display()))
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
    Contention {
        updates: latencies.len() + timeouts,
        elapsed,
        timeouts,
        latencies,
    }
}
