//! Opening a store of 100,000 sessions cold — a new store value reading one session —
//! for the JSON file (the whole file is read and indexed) and SQLite (one indexed row),
//! and the peak memory of a fresh process that does only that.
//!
//! `cargo bench --bench cold_open --features sqlite`

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use criterion::{criterion_group, Criterion};

const SESSIONS: usize = 100_000;

/// The process's peak resident memory (Linux `VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn cold_open(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = common::key(SESSIONS / 2);
    let mut group = c.benchmark_group(format!("cold_open/{SESSIONS}"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));

    let json_dir = tempfile::tempdir().unwrap();
    let bytes = common::write_store(json_dir.path(), SESSIONS).len();
    eprintln!("json store: {:.1} MB", bytes as f64 / 1e6);
    report_peak_memory("json", json_dir.path());
    group.bench_function("json", |b| {
        b.iter(|| {
            let store = JsonFileStore::new(json_dir.path());
            runtime.block_on(store.get(&target)).unwrap().unwrap()
        })
    });

    #[cfg(feature = "sqlite")]
    {
        use agent_sessions::store::{SqliteOptions, SqliteStore};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cold.db");
        let mut options = SqliteOptions::default();
        options.durability = agent_sessions::Durability::Unsynced;
        let filled = Arc::new(SqliteStore::open_with(&file, options).unwrap());
        runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for chunk in 0..4 {
                let store = filled.clone();
                tasks.spawn(async move {
                    for i in (chunk..SESSIONS).step_by(4) {
                        store.put(&common::key(i), common::entry(i)).await.unwrap();
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        drop(filled);
        report_peak_memory("sqlite", &file);
        group.bench_function("sqlite", |b| {
            b.iter(|| {
                let store = SqliteStore::open(&file).unwrap();
                runtime.block_on(store.get(&target)).unwrap().unwrap()
            })
        });
    }
    group.finish();
}

const CHILD: &str = "AGENT_SESSIONS_COLD_OPEN_CHILD";

/// Runs this binary again to open one store cold and prints that process's peak
/// resident memory, so the memory of building the store here is not counted.
fn report_peak_memory(kind: &str, path: &std::path::Path) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD, format!("{kind}|{}", path.display()))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
}

/// The child: peak memory of the bare process, then after a cold open and one read.
fn open_once(kind: &str, path: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = peak_rss_mib().unwrap_or(f64::NAN);
    let target = common::key(SESSIONS / 2);
    let entry = match kind {
        "json" => runtime.block_on(JsonFileStore::new(path).get(&target)),
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let store = agent_sessions::store::SqliteStore::open(path).unwrap();
            runtime.block_on(store.get(&target))
        }
        _ => unreachable!("unknown store kind {kind}"),
    };
    assert!(entry.unwrap().is_some());
    let after = peak_rss_mib().unwrap_or(f64::NAN);
    println!("{kind}: peak RSS {before:.1} MiB before the open, {after:.1} MiB after");
}

criterion_group!(benches, cold_open);

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        let (kind, path) = spec.split_once('|').unwrap();
        open_once(kind, path);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
