//! One-entry update in a JSON store of 100, 1,000 and 10,000 sessions, against the
//! cost of the disk work alone (writing and renaming a file of the same size), measured
//! in the same run; and in the memory store.
//!
//! `cargo bench --bench store_update`

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

mod common;

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonStoreOptions};
use common::{entry, key, write_store};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// The disk work of one store write and nothing else: write a file of the same size,
/// optionally fsync it, rename it over the target, optionally fsync the directory.
fn write_and_rename(dir: &Path, bytes: &[u8], sync: bool) {
    let temp = dir.join("baseline.tmp");
    let mut file = std::fs::File::create(&temp).unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    if sync {
        file.sync_all().unwrap();
    }
    drop(file);
    std::fs::rename(&temp, dir.join("baseline.json")).unwrap();
    if sync {
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
    }
}

fn json_update(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    for sessions in [100, 1_000, 10_000] {
        let mut group = c.benchmark_group(format!("json_update/{sessions}"));
        if sessions >= 10_000 {
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(20));
        } else if sessions >= 1_000 {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(10));
        }
        for (label, durability) in [
            ("unsynced", Durability::Unsynced),
            ("fsync", Durability::SyncFileAndDir),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let bytes = write_store(dir.path(), sessions);
            eprintln!(
                "json_update/{sessions}: file {} bytes, {} bytes per entry",
                bytes.len(),
                bytes.len() / sessions
            );
            let sync = durability != Durability::Unsynced;
            group.bench_function(BenchmarkId::new("baseline_write_rename", label), |b| {
                b.iter(|| write_and_rename(dir.path(), black_box(&bytes), sync))
            });
            let store = JsonFileStore::with_options(
                dir.path(),
                JsonStoreOptions {
                    durability,
                    ..JsonStoreOptions::default()
                },
            );
            let target = key(sessions / 2);
            let mut counter = 0u64;
            group.bench_function(BenchmarkId::new("json_store", label), |b| {
                b.iter(|| {
                    counter += 1;
                    runtime
                        .block_on(store.with_session(&target, |e| e.updated_at = counter))
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

fn memory_update(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    runtime.block_on(async {
        for i in 0..10_000 {
            store.put(&key(i), entry(i)).await.unwrap();
        }
    });
    let target = key(5_000);
    let mut counter = 0u64;
    c.bench_function("memory_update/10000", |b| {
        b.iter(|| {
            counter += 1;
            runtime
                .block_on(store.with_session(&target, |e| e.updated_at = counter))
                .unwrap()
        })
    });
}

criterion_group!(benches, json_update, memory_update);
criterion_main!(benches);
