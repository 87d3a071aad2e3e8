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
use common::key;
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
        common::on_each_backend(&runtime, sessions, |name, store, _| {
            bench(c, &runtime, name, sessions, store)
        });
    }
}

criterion_group!(benches, backends);
criterion_main!(benches);
