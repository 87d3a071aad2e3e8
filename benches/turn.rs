//! One turn through `SessionManager::turn` + `Turn::complete`, against the same turn
//! made of the low-level calls a host with its own loop makes (`resolve`, `log_message`,
//! `memory_flush_plan`, `log_message`, `record_turn`),
//! measured in the same run on every backend, 1,000 sessions, each backend's fast
//! durability mode (JSON transcripts unsynced too). Each function has a session of its
//! own, so neither inherits the other's transcript.
//!
//! `cargo bench --bench turn --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; the run uses a schema of its own
//! and drops it).

mod common;
#[path = "../tests/common/separate_calls.rs"]
mod separate_calls;

use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::transcript::TranscriptStore;
use criterion::{criterion_group, criterion_main, Criterion};
use separate_calls::separate_calls;
use tokio::runtime::Runtime;

const SESSIONS: usize = 1_000;

/// The message of each benchmark function: its own sender, so each measures its own
/// session (and transcript) from its first turn on.
fn message(peer: &str) -> InboundMessage {
    InboundMessage::direct("telegram", peer, "what about tomorrow?")
}

async fn one_turn(manager: &SessionManager, message: &InboundMessage) {
    let turn = manager.turn(message).await.unwrap();
    let sent = turn.complete("Tomorrow at 9.").await.unwrap();
    assert_eq!(sent.len(), 1);
}

fn bench(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    store: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
) {
    let manager = SessionManager::builder(store)
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(transcripts)
        .build()
        .unwrap();
    let (by_calls, by_turn) = (message("200000001"), message("200000002"));
    let mut group = c.benchmark_group(format!("turn/{name}/{SESSIONS}"));
    group.bench_function("baseline_separate_calls", |b| {
        b.iter(|| runtime.block_on(separate_calls(&manager, &by_calls, "Tomorrow at 9.")))
    });
    group.bench_function("turn_and_complete", |b| {
        b.iter(|| runtime.block_on(one_turn(&manager, &by_turn)))
    });
    group.finish();
}

fn turns(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    common::on_each_backend(&runtime, SESSIONS, |name, store, transcripts| {
        bench(c, &runtime, name, store, transcripts)
    });
}

criterion_group!(benches, turns);
criterion_main!(benches);
