//! `SessionManager::resolve` on a warm store of 10,000 sessions, against the store's own
//! one-entry update measured in the same run: what deciding and recording a message
//! costs beyond the write it needs, and what the access check of a scoped call adds.
//!
//! `cargo bench --bench resolve`

mod common;

use std::sync::Arc;

use agent_sessions::identity::Caller;
use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions};
use common::{entry, key, write_store};
use criterion::{criterion_group, criterion_main, Criterion};

const SESSIONS: usize = 10_000;

fn bench_store(
    c: &mut Criterion,
    name: &str,
    store: Arc<dyn SessionStore>,
    runtime: &tokio::runtime::Runtime,
) {
    let manager = SessionManager::builder(store.clone())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    let target = SESSIONS / 2;
    let message = InboundMessage::direct(
        "telegram",
        (100_000_000 + target).to_string(),
        "what about tomorrow?",
    )
    .with_sender_name("User");
    let target_key = key(target);
    assert_eq!(manager.key_for(&message).unwrap(), target_key);
    // Warm up: the first message starts a new session (the fixture's entries are old).
    runtime.block_on(manager.resolve(&message)).unwrap();

    let mut group = c.benchmark_group(format!("resolve/{name}/{SESSIONS}"));
    if name == "json" {
        group.sample_size(20);
    }
    let mut counter = 0u64;
    group.bench_function("baseline_store_update", |b| {
        b.iter(|| {
            counter += 1;
            runtime
                .block_on(store.with_session(&target_key, |e| {
                    e.message_count = Some(counter);
                }))
                .unwrap()
        })
    });
    group.bench_function("resolve", |b| {
        b.iter(|| {
            let resolution = runtime.block_on(manager.resolve(&message)).unwrap();
            assert_eq!(resolution.decision, Decision::Continue);
        })
    });
    // The same message from its sender, through the access check (one more read).
    let sender = Caller::person(message.participant_id().unwrap());
    let scoped = manager.scoped(sender);
    group.bench_function("scoped_resolve", |b| {
        b.iter(|| {
            let resolution = runtime.block_on(scoped.resolve(&message)).unwrap();
            assert_eq!(resolution.decision, Decision::Continue);
        })
    });
    group.finish();
}

fn resolve(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    let memory = InMemoryStore::new();
    runtime.block_on(async {
        for i in 0..SESSIONS {
            memory.put(&key(i), entry(i)).await.unwrap();
        }
    });
    bench_store(c, "memory", Arc::new(memory), &runtime);

    let dir = tempfile::tempdir().unwrap();
    write_store(dir.path(), SESSIONS);
    let json = JsonFileStore::new_with(
        dir.path(),
        JsonFileOptions {
            durability: Durability::Unsynced,
            ..JsonFileOptions::default()
        },
    );
    bench_store(c, "json", Arc::new(json), &runtime);
}

criterion_group!(benches, resolve);
criterion_main!(benches);
