//! A turn on a sealed store (feature `encryption`) against the same turn on the plain
//! store, measured in the same run on every backend, 1,000 sessions, each backend's
//! fast durability mode, an 8,000-token window: `turn_and_complete` once the manager knows the session, and
//! `first_turn_of_a_fresh_manager` on a session 100 turns old (a restart, a new worker:
//! the conversation's end is read and opened). Each function has a session of its own.
//!
//! `cargo bench --bench encryption --features encryption,sqlite,postgres` (PostgreSQL
//! only when `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server).

mod common;

use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
use agent_sessions::transcript::TranscriptStore;
use criterion::{criterion_group, criterion_main, Criterion};
use tokio::runtime::Runtime;

const SESSIONS: usize = 1_000;
const HISTORY_TURNS: usize = 100;
/// The model's window, in tokens: what a turn gives the model stays the same size as
/// the sessions grow over the run.
const CONTEXT_WINDOW: u64 = 8_000;

fn message(peer: &str, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", peer, text)
}

async fn one_turn(manager: &SessionManager, message: &InboundMessage) {
    let turn = manager.turn(message).await.unwrap();
    let seen = turn.messages().await.unwrap();
    assert!(!seen.is_empty());
    let sent = turn
        .complete("Tomorrow at 9, at the usual place.")
        .await
        .unwrap();
    assert_eq!(sent.len(), 1);
}

fn bench(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    store: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
) {
    let keys = tempfile::tempdir().unwrap();
    let master = MasterKey::generate().unwrap();
    let manager = |sealed: bool| {
        let builder = SessionManager::builder(store.clone())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .context_window(CONTEXT_WINDOW)
            .transcripts(transcripts.clone());
        match sealed {
            true => builder.encryption(KeyFiles::open(keys.path(), master.clone()).unwrap()),
            false => builder,
        }
        .build()
        .unwrap()
    };
    let text = "what about tomorrow? I can do 9 or 10, whichever suits you.";
    let (plain, sealed) = (manager(false), manager(true));
    let (plain_old, sealed_old) = (message("300000001", text), message("300000002", text));
    runtime.block_on(async {
        for _ in 0..HISTORY_TURNS {
            one_turn(&plain, &plain_old).await;
            one_turn(&sealed, &sealed_old).await;
        }
    });
    let mut group = c.benchmark_group(format!("encryption/{name}/{SESSIONS}"));
    let (plain_new, sealed_new) = (message("300000003", text), message("300000004", text));
    group.bench_function("baseline_plain_turn", |b| {
        b.iter(|| runtime.block_on(one_turn(&plain, &plain_new)))
    });
    group.bench_function("sealed_turn", |b| {
        b.iter(|| runtime.block_on(one_turn(&sealed, &sealed_new)))
    });
    group.bench_function("baseline_plain_first_turn_of_a_fresh_manager", |b| {
        b.iter(|| runtime.block_on(one_turn(&manager(false), &plain_old)))
    });
    group.bench_function("sealed_first_turn_of_a_fresh_manager", |b| {
        b.iter(|| runtime.block_on(one_turn(&manager(true), &sealed_old)))
    });
    group.finish();
}

fn encryption(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    common::on_each_backend(&runtime, SESSIONS, |name, store, transcripts| {
        bench(c, &runtime, name, store, transcripts)
    });
}

criterion_group!(benches, encryption);
criterion_main!(benches);
