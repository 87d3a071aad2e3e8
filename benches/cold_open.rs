//! Opening a store of 100,000 sessions cold — a new store value reading one session —
//! for the JSON file (the whole file is read and indexed) and SQLite (one indexed row),
//! and the peak memory of a fresh process that does only that.
//!
//! `cargo bench --bench cold_open --features sqlite`

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use common::cold_open::{peak_memory, run_child};
use criterion::{criterion_group, Criterion};

const SESSIONS: usize = 100_000;

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

/// Prints the peak memory of a fresh process opening the store cold.
fn report_peak_memory(kind: &str, path: &std::path::Path) {
    let (before, after) = peak_memory(kind, path, SESSIONS);
    eprintln!("{kind}: peak RSS {before:.1} MiB before the open, {after:.1} MiB after");
}

criterion_group!(benches, cold_open);

fn main() {
    if run_child() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
