//! What a whole turn costs as its session ages: `turn`, `Turn::messages` and
//! `Turn::complete` on a session after 10, 1,000, 10,000 and 50,000 earlier turns of
//! chat-sized messages, with the model's window at 8,000 tokens (the conversation the
//! model gets is about the same size at every age: 10 turns, then the 25 or so the
//! window holds) and at the default 200,000. Each backend in its fast durability mode.
//! The turn after 10 earlier turns is the baseline each older session is compared with;
//! it is measured on a new session each time (made before the clock starts), and the
//! older ones grow by the turns measured on them, a few hundred at most.
//!
//! `cargo bench --bench turn_age --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; the run uses a schema of its own
//! and drops it).

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::transcript::{TranscriptEntry, TranscriptStore};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::runtime::Runtime;

/// Earlier turns in the session before the measured one.
const AGES: [usize; 4] = [10, 1_000, 10_000, 50_000];
/// The model's window: 8,000 tokens, and the default.
const WINDOWS: [(&str, Option<u64>); 2] = [("window_8k", Some(8_000)), ("window_default", None)];
/// Earlier turns written per append.
const BATCH: usize = 1_000;

/// Ages up to this are measured on a new session each turn (made before the clock
/// starts), so measuring does not age them.
const YOUNG: usize = 100;

/// A message from `peer`, whose session is the one measured.
fn message(peer: usize, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", format!("{}", 100_000 + peer), text)
}

/// A model's answer of about 1,000 characters (250 tokens), as chat answers run.
const ANSWER: &str = "Thursday from 9 to 5, at the front desk. ";

/// Gives the session of `age` its earlier turns: a question of about 100 characters and
/// an answer of about 1,000 each (an 8,000-token window holds the last 25 or so),
/// appended as transcript lines in batches.
async fn age_session(manager: &SessionManager, peer: usize, age: usize) {
    let key = manager.resolve(&message(peer, "hello")).await.unwrap().key;
    let session = manager.session(&key);
    let now = chrono::Utc::now();
    for start in (0..age).step_by(BATCH) {
        let lines = (start..age.min(start + BATCH))
            .flat_map(|n| {
                [
                    TranscriptEntry::user_text(
                        format!(
                            "question {n}: when is my next shift, and is it at the front desk \
                             or in the back office this time?"
                        ),
                        now,
                    ),
                    TranscriptEntry::assistant_text(
                        format!("answer {n}: {}", ANSWER.repeat(24)),
                        "",
                        "",
                        now,
                    ),
                ]
            })
            .collect();
        session.append(lines).await.unwrap();
    }
}

async fn one_turn(manager: &SessionManager, peer: usize) -> usize {
    let turn = manager
        .turn(&message(peer, "and the one after?"))
        .await
        .unwrap();
    let seen = turn.messages().await.unwrap().len();
    turn.complete("Saturday from 10.").await.unwrap();
    seen
}

fn bench(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    store: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
) {
    for (window_name, window) in WINDOWS {
        let mut builder = SessionManager::builder(store.clone()).transcripts(transcripts.clone());
        if let Some(tokens) = window {
            builder = builder.context_window(tokens);
        }
        let manager = builder.build().unwrap();
        let mut group = c.benchmark_group(format!("turn_age/{name}/{window_name}"));
        // Every measured turn makes its session two lines older: the young are new
        // sessions each turn, the old are old enough not to notice.
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(1));
        group.measurement_time(Duration::from_millis(300));
        let mut fresh = 10_000_000 * (1 + usize::from(window.is_none()));
        for age in AGES {
            // Each window has sessions of its own: the peer differs by window.
            let peer = 2 * age + usize::from(window.is_none());
            if age > YOUNG {
                runtime.block_on(age_session(&manager, peer, age));
            }
            group.bench_with_input(BenchmarkId::from_parameter(age), &age, |b, &age| {
                b.iter_custom(|turns| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..turns {
                        let peer = if age > YOUNG {
                            peer
                        } else {
                            fresh += 1;
                            runtime.block_on(age_session(&manager, fresh, age));
                            fresh
                        };
                        let start = Instant::now();
                        black_box(runtime.block_on(one_turn(&manager, peer)));
                        spent += start.elapsed();
                    }
                    spent
                })
            });
        }
        group.finish();
    }
}

fn turn_age(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    common::on_each_backend(&runtime, 0, |name, store, transcripts| {
        bench(c, &runtime, name, store, transcripts)
    });
}

criterion_group!(benches, turn_age);
criterion_main!(benches);
