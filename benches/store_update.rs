//! One-entry update in a JSON store of 100, 1,000 and 10,000 sessions, against two
//! baselines measured in the same run: the disk work alone (writing and renaming a file
//! of the same size) and a naive implementation of the same algorithm (lock file, read
//! and parse everything, change one entry, serialise everything, write, rename); 8
//! concurrent writers against one; and the memory store.
//!
//! `cargo bench --bench store_update`

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

mod common;

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions};
use common::{entry, key, write_and_rename, write_store};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// The same algorithm as the store, written naively: take the lock file, read and parse
/// the whole file, change one entry, serialise the whole store again (pretty, as
/// OpenClaw does), write a temporary file, optionally fsync, rename, release.
fn naive_update(file: &Path, key: &str, counter: u64, sync: bool) {
    let lock = file.with_extension("json.lock");
    let _lock = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)
        .unwrap();
    let bytes = std::fs::read(file).unwrap();
    let mut store: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).unwrap();
    store[key]["updatedAt"] = serde_json::json!(counter);
    let out = serde_json::to_vec_pretty(&store).unwrap();
    write_and_rename_to(file, &out, sync);
    std::fs::remove_file(&lock).unwrap();
}

fn write_and_rename_to(target: &Path, bytes: &[u8], sync: bool) {
    let temp = target.with_extension("tmp");
    let mut file = std::fs::File::create(&temp).unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    if sync {
        file.sync_all().unwrap();
    }
    drop(file);
    std::fs::rename(&temp, target).unwrap();
    if sync {
        std::fs::File::open(target.parent().unwrap())
            .unwrap()
            .sync_all()
            .unwrap();
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
            let naive_dir = tempfile::tempdir().unwrap();
            write_store(naive_dir.path(), sessions);
            let naive_file = agent_sessions::store::store_path(naive_dir.path(), &AgentId::main());
            let naive_key = key(sessions / 2).to_string();
            let mut naive_counter = 0u64;
            group.bench_function(BenchmarkId::new("naive", label), |b| {
                b.iter(|| {
                    naive_counter += 1;
                    naive_update(&naive_file, &naive_key, naive_counter, sync)
                })
            });
            let store = JsonFileStore::new_with(
                dir.path(),
                JsonFileOptions {
                    durability,
                    ..JsonFileOptions::default()
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

/// Eight tasks each updating its own session at once, against one task updating one:
/// what group commit buys.
fn json_concurrent(c: &mut Criterion) {
    const WRITERS: usize = 8;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sessions = 1_000;
    let mut group = c.benchmark_group(format!("json_concurrent/{sessions}"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    for (label, durability) in [
        ("unsynced", Durability::Unsynced),
        ("fsync", Durability::SyncFileAndDir),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write_store(dir.path(), sessions);
        let store = JsonFileStore::new_with(
            dir.path(),
            JsonFileOptions {
                durability,
                ..JsonFileOptions::default()
            },
        );
        let mut counter = 0u64;
        group.throughput(criterion::Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("1_writer", label), |b| {
            b.iter(|| {
                counter += 1;
                runtime
                    .block_on(store.with_session(&key(0), |e| e.updated_at = counter))
                    .unwrap()
            })
        });
        group.throughput(criterion::Throughput::Elements(WRITERS as u64));
        group.bench_function(BenchmarkId::new(format!("{WRITERS}_writers"), label), |b| {
            b.iter(|| {
                counter += 1;
                runtime.block_on(async {
                    let mut tasks = tokio::task::JoinSet::new();
                    for writer in 0..WRITERS {
                        let (store, stamp) = (store.clone(), counter);
                        tasks.spawn(async move {
                            store
                                .with_session(&key(writer * 100), |e| e.updated_at = stamp)
                                .await
                                .unwrap();
                        });
                    }
                    while let Some(done) = tasks.join_next().await {
                        done.unwrap();
                    }
                })
            })
        });
    }
    group.finish();
}

fn memory_update(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = InMemoryStore::new();
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

criterion_group!(benches, json_update, json_concurrent, memory_update);
criterion_main!(benches);
