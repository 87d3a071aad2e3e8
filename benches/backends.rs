//! Every backend at 1,000 and 100,000 sessions: a one-entry update and
//! `SessionManager::resolve` of a message that continues a session, measured in one run
//! so the backends can be compared with each other and with the memory store.
//!
//! `cargo bench --bench backends --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; each run uses a schema of its own
//! and drops it). Durability is each backend's fast mode, as the JSON store is run
//! elsewhere: JSON unsynced, SQLite `synchronous = OFF`, PostgreSQL
//! `synchronous_commit` as the server has it.

mod common;

use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions};
use common::{entry, key, write_store};
use criterion::{criterion_group, criterion_main, Criterion};
use tokio::runtime::Runtime;

const SIZES: [usize; 2] = [1_000, 100_000];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Puts `sessions` entries, several at a time.
async fn fill(store: Arc<dyn SessionStore>, sessions: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..8 {
        let store = store.clone();
        tasks.spawn(async move {
            for i in (chunk..sessions).step_by(8) {
                store.put(&key(i), entry(i)).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

fn bench(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    sessions: usize,
    store: Arc<dyn SessionStore>,
) {
    let manager = SessionManager::builder(store.clone())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    let target = sessions / 2;
    let target_key = key(target);
    let message = InboundMessage::direct(
        "telegram",
        (100_000_000 + target).to_string(),
        "what about tomorrow?",
    );
    assert_eq!(manager.key_for(&message).unwrap(), target_key);
    // The fixture's entries are old: the first message starts a new session.
    runtime.block_on(manager.resolve(&message)).unwrap();

    let mut group = c.benchmark_group(format!("backends/{sessions}"));
    if name == "json" && sessions > 10_000 {
        group.sample_size(10);
    }
    let mut counter = 0u64;
    group.bench_function(format!("{name}/update"), |b| {
        b.iter(|| {
            counter += 1;
            runtime
                .block_on(store.with_session(&target_key, |e| {
                    e.message_count = Some(counter);
                }))
                .unwrap()
        })
    });
    group.bench_function(format!("{name}/resolve"), |b| {
        b.iter(|| {
            let resolution = runtime.block_on(manager.resolve(&message)).unwrap();
            assert_eq!(resolution.decision, Decision::Continue);
        })
    });
    group.finish();
}

fn backends(c: &mut Criterion) {
    let runtime = runtime();
    for sessions in SIZES {
        let memory = Arc::new(MemoryStore::new());
        runtime.block_on(fill(memory.clone(), sessions));
        bench(c, &runtime, "memory", sessions, memory);

        let dir = tempfile::tempdir().unwrap();
        write_store(dir.path(), sessions);
        let json = JsonFileStore::new_with(
            dir.path(),
            JsonFileOptions {
                durability: Durability::Unsynced,
                ..JsonFileOptions::default()
            },
        );
        bench(c, &runtime, "json", sessions, Arc::new(json));

        #[cfg(feature = "sqlite")]
        {
            use agent_sessions::store::{SqliteOptions, SqliteStore};
            let dir = tempfile::tempdir().unwrap();
            let mut options = SqliteOptions::default();
            options.durability = Durability::Unsynced;
            let sqlite =
                Arc::new(SqliteStore::open_with(dir.path().join("bench.db"), options).unwrap());
            runtime.block_on(fill(sqlite.clone(), sessions));
            bench(c, &runtime, "sqlite", sessions, sqlite);
        }

        #[cfg(feature = "postgres")]
        if let Ok(server) = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL") {
            use agent_sessions::store::{PostgresOptions, PostgresStore};
            let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
            let postgres = runtime
                .block_on(PostgresStore::connect_with(
                    &server,
                    PostgresOptions::in_schema(&schema),
                ))
                .unwrap();
            let store = Arc::new(postgres.clone());
            runtime.block_on(fill(store.clone(), sessions));
            bench(c, &runtime, "postgres", sessions, store);
            runtime.block_on(postgres.drop_schema()).unwrap();
        }
    }
}

criterion_group!(benches, backends);
criterion_main!(benches);
