//! What a whole turn costs as its session ages: `turn`, `Turn::messages` and
//! `Turn::complete` on a session after 10, 1,000, 10,000 and 50,000 earlier turns, with
//! the model's window at 8,000 tokens (the conversation the model gets is the same size
//! at every age) and at the default 200,000. Each backend in its fast durability mode.
//! The turn after 10 earlier turns is the baseline each older session is compared with.
//! Each measured turn adds to its session: about 60 turns over a run, which matter only
//! for the youngest.
//!
//! `cargo bench --bench turn_age --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; the run uses a schema of its own
//! and drops it).

mod common;

use std::sync::Arc;
use std::time::Duration;

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

fn message(age: usize, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", format!("{}", 100_000 + age), text)
}

/// Gives the session of `age` its earlier turns: a question and an answer each, about
/// the length of a chat message, appended as transcript lines in batches.
async fn age_session(manager: &SessionManager, age: usize) {
    let key = manager.resolve(&message(age, "hello")).await.unwrap().key;
    let session = manager.session(&key);
    let now = chrono::Utc::now();
    for start in (0..age).step_by(BATCH) {
        let lines = (start..age.min(start + BATCH))
            .flat_map(|n| {
                [
                    TranscriptEntry::user_text(
                        format!("question {n}: when is my next shift?"),
                        now,
                    ),
                    TranscriptEntry::assistant_text(
                        format!("answer {n}: Thursday from 9 to 5, at the front desk."),
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

async fn one_turn(manager: &SessionManager, age: usize) -> usize {
    let turn = manager
        .turn(&message(age, "and the one after?"))
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
        // Every measured turn makes its session two lines older: few iterations (55 over
        // the 10 samples, a few more to warm up), so the youngest session stays young.
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(1));
        group.measurement_time(Duration::from_millis(10));
        for age in AGES {
            // Each window has sessions of its own: the peer differs by window.
            let age_key = age + if window.is_some() { 0 } else { 1 };
            runtime.block_on(age_session(&manager, age_key));
            group.bench_with_input(BenchmarkId::from_parameter(age), &age_key, |b, &age| {
                b.iter(|| runtime.block_on(one_turn(&manager, age)))
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
