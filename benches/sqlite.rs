//! The SQLite store at 1,000 and 100,000 sessions, WAL mode with `synchronous = NORMAL`
//! and `FULL`: one read-modify-write update through `SqliteStore`, against the same
//! transaction written directly with rusqlite on the same file in the same run
//! (`BEGIN IMMEDIATE`, `SELECT`, `UPDATE`, `COMMIT`, cached statements), once writing
//! the entry's bytes back unchanged and once parsing it, changing one field and
//! serialising it again.
//!
//! `cargo bench --bench sqlite --features sqlite`

mod common;

use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::store::{SqliteOptions, SqliteStore};
use agent_sessions::Durability;
use common::{entry, key, raw_sqlite_update, RawChange};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn options(durability: Durability) -> SqliteOptions {
    let mut options = SqliteOptions::default();
    options.durability = durability;
    options
}

fn sqlite(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for sessions in [1_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bench.db");
        {
            let store =
                Arc::new(SqliteStore::open_with(&file, options(Durability::Unsynced)).unwrap());
            runtime.block_on(async {
                let mut tasks = tokio::task::JoinSet::new();
                for chunk in 0..4 {
                    let store = store.clone();
                    tasks.spawn(async move {
                        for i in (chunk..sessions).step_by(4) {
                            store.put(&key(i), entry(i)).await.unwrap();
                        }
                    });
                }
                while let Some(done) = tasks.join_next().await {
                    done.unwrap();
                }
            });
        }
        let target = key(sessions / 2);
        let mut group = c.benchmark_group(format!("sqlite/{sessions}"));
        group.throughput(Throughput::Elements(1));
        for (label, durability, pragma) in [
            ("normal", Durability::SyncFile, "NORMAL"),
            ("full", Durability::SyncFileAndDir, "FULL"),
        ] {
            let raw = rusqlite::Connection::open(&file).unwrap();
            raw.execute_batch(&format!(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = {pragma};"
            ))
            .unwrap();
            for change in [RawChange::CopyBytes, RawChange::ParseAndChange] {
                let mut counter = 0i64;
                let name = match change {
                    RawChange::CopyBytes => "baseline_rusqlite",
                    RawChange::ParseAndChange => "baseline_rusqlite_json",
                };
                group.bench_function(BenchmarkId::new(name, label), |b| {
                    b.iter(|| {
                        counter += 1;
                        raw_sqlite_update(&raw, target.as_str(), counter, change)
                    })
                });
            }
            let store = SqliteStore::open_with(&file, options(durability)).unwrap();
            let mut count = 0u64;
            group.bench_function(BenchmarkId::new("sqlite_store", label), |b| {
                b.iter(|| {
                    count += 1;
                    runtime
                        .block_on(store.with_session(&target, |e| {
                            e.message_count = Some(count);
                            e.updated_at = count;
                        }))
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, sqlite);
criterion_main!(benches);
