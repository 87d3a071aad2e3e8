//! What a whole turn costs as its session ages: `turn`, `Turn::messages` and
//! `Turn::complete` on a session after 10, 1,000, 10,000 and 50,000 earlier turns of
//! chat-sized messages, with the model's window at 8,000 tokens (the conversation the
//! model gets is about the same size at every age: 10 turns, then the 25 or so the
//! window holds) and at the default 200,000. Each backend in its fast durability mode.
//! The turn after 10 earlier turns is the baseline each older session is compared with;
//! it is measured on a new session each time (made before the clock starts), and the
//! older ones grow by the turns measured on them, a few hundred at most. `first/<age>`
//! is a session's first turn on a manager that never served it (a restarted process, a
//! new worker, a manager that let the conversation go): the turn reads the transcript
//! from its end, so it is compared with `first/10`, a young session's first turn on a
//! new manager too.
//!
//! `cargo bench --bench turn_age --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; the run uses a schema of its own
//! and drops it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::transcript::TranscriptStore;
use common::turn_age::Aged;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::runtime::Runtime;

/// Earlier turns in the session before the measured one.
const AGES: [usize; 4] = [10, 1_000, 10_000, 50_000];
/// The model's window: 8,000 tokens, and the default.
const WINDOWS: [(&str, Option<u64>); 2] = [("window_8k", Some(8_000)), ("window_default", None)];

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
        // A manager that has served no turn yet: a restarted process, a new worker.
        let fresh = || {
            let mut builder =
                SessionManager::builder(store.clone()).transcripts(transcripts.clone());
            if let Some(tokens) = window {
                builder = builder.context_window(tokens);
            }
            builder.build().unwrap()
        };
        let mut group = c.benchmark_group(format!("turn_age/{name}/{window_name}"));
        // Every measured turn makes its session two lines older: the young are new
        // sessions each turn, the old are old enough not to notice.
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(1));
        group.measurement_time(Duration::from_millis(300));
        // Every session made before any is measured: the writing of the old ones (and
        // the work it leaves the disk and the server) does not fall on one alone.
        let mut sessions: Vec<(usize, Aged)> = AGES
            .into_iter()
            .map(|age| {
                // Each window has sessions of its own, and room for the young ones.
                let peer = (2 * age + usize::from(window.is_none())) * 1_000_000;
                (age, Aged::new(runtime, &manager, peer, age))
            })
            .collect();
        for (age, aged) in &mut sessions {
            if let Some(first) = aged.first_turn {
                // Not a criterion figure: one turn, the session's first in this process.
                eprintln!(
                    "turn_age/{name}/{window_name}/{age}: first turn in this process {first:?}"
                );
            }
            group.bench_function(BenchmarkId::from_parameter(*age), |b| {
                b.iter_custom(|turns| aged.measure(runtime, &manager, turns))
            });
            group.bench_function(BenchmarkId::new("first", *age), |b| {
                b.iter_custom(|turns| aged.measure_first(runtime, &manager, fresh, turns))
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
