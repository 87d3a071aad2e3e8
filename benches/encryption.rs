//! A turn on a sealed store (feature `encryption`) against the same turn on the plain
//! store, measured in the same run on every backend: `turn_and_complete` once the
//! manager knows the session, and `first_turn_of_a_fresh_manager` on a session 100
//! turns old (a restart, a new worker: the conversation's end is read and opened).
//! Plain and sealed each run on a store of their own, filled alike (1,000 sessions of
//! one exchange, each written through its store's own manager: a sealed store is sealed
//! whole; each backend's fast durability mode), with an 8,000-token window, so neither
//! inherits what the other wrote; each timed turn is followed by an untimed one on
//! the other store, so both are measured under the same conditions, and each
//! measurement has sessions of its own (a turn costs more as its session grows).
//!
//! `cargo bench --bench encryption --features encryption,sqlite,postgres` (PostgreSQL
//! only when `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server).

mod common;

use agent_sessions::prelude::*;
use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
use criterion::{criterion_group, criterion_main, Criterion};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

const SESSIONS: usize = 1_000;
const HISTORY_TURNS: usize = 100;
/// The model's window, in tokens: what a turn gives the model stays the same size as
/// the sessions grow over the run.
const CONTEXT_WINDOW: u64 = 8_000;

use common::Stores;

fn message(peer: &str) -> InboundMessage {
    InboundMessage::direct(
        "telegram",
        peer,
        "what about tomorrow? I can do 9 or 10, whichever suits you.",
    )
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

fn bench(c: &mut Criterion, runtime: &Runtime, name: &str, plain: Stores, sealed: Stores) {
    let keys = tempfile::tempdir().unwrap();
    let master = MasterKey::generate().unwrap();
    let manager = |(store, transcripts): &Stores, seal: bool| {
        let builder = SessionManager::builder(store.clone())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .context_window(CONTEXT_WINDOW)
            .transcripts(transcripts.clone());
        match seal {
            true => builder.encryption(KeyFiles::open(keys.path(), master.clone()).unwrap()),
            false => builder,
        }
        .build()
        .unwrap()
    };
    let (warm_plain, warm_sealed) = (manager(&plain, false), manager(&sealed, true));
    // A turn costs more as its session grows, and the sessions grow by every turn
    // measured: each measurement has sessions of its own, so the sealed one, which
    // runs second, does not meet older ones. Two sessions 100 turns old, two new ones.
    let (old_for_plain, old_for_sealed) = (message("300000001"), message("300000003"));
    let (new_for_plain, new_for_sealed) = (message("300000002"), message("300000004"));
    runtime.block_on(async {
        for i in 0..SESSIONS {
            let other = message(&(100_000_000 + i).to_string());
            one_turn(&warm_plain, &other).await;
            one_turn(&warm_sealed, &other).await;
        }
        for _ in 0..HISTORY_TURNS {
            for old in [&old_for_plain, &old_for_sealed] {
                one_turn(&warm_plain, old).await;
                one_turn(&warm_sealed, old).await;
            }
        }
    });
    let mut group = c.benchmark_group(format!("encryption/{name}/{SESSIONS}"));
    // Each measured turn is paired with one on the other store, run untimed between
    // them: both see the same machine, the same moment and stores grown alike.
    let paired = |b: &mut criterion::Bencher,
                  timed: &SessionManager,
                  other: &SessionManager,
                  new: &InboundMessage| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    one_turn(timed, new).await;
                    took += start.elapsed();
                    one_turn(other, new).await;
                }
                took
            })
        })
    };
    group.bench_function("baseline_plain_turn", |b| {
        paired(b, &warm_plain, &warm_sealed, &new_for_plain)
    });
    group.bench_function("sealed_turn", |b| {
        paired(b, &warm_sealed, &warm_plain, &new_for_sealed)
    });
    let fresh = |b: &mut criterion::Bencher, seal: bool| {
        let old = if seal {
            &old_for_sealed
        } else {
            &old_for_plain
        };
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    one_turn(&manager(if seal { &sealed } else { &plain }, seal), old).await;
                    took += start.elapsed();
                    one_turn(&manager(if seal { &plain } else { &sealed }, !seal), old).await;
                }
                took
            })
        })
    };
    group.bench_function("baseline_plain_first_turn_of_a_fresh_manager", |b| {
        fresh(b, false)
    });
    group.bench_function("sealed_first_turn_of_a_fresh_manager", |b| fresh(b, true));
    group.finish();
}

fn encryption(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Two stores of each backend, empty: `bench` fills each through its manager, the
    // plain turns on one, the sealed on the other.
    for name in common::backends() {
        let plain = common::open_backend(&runtime, 0, name);
        let sealed = common::open_backend(&runtime, 0, name);
        bench(
            c,
            &runtime,
            name,
            plain.stores.clone(),
            sealed.stores.clone(),
        );
    }
}

criterion_group!(benches, encryption);
criterion_main!(benches);
