//! The sessions HTTP service under load: 8 client tasks each sending resolve + PATCH
//! (record a turn) for their own sender over loopback HTTP/1.1, against the same calls
//! made directly on the `SessionManager` in the same run — the service's own cost —
//! on the memory store and the JSON store. After each measurement every session's turn
//! count is checked against the turns sent: a lost update fails the benchmark.
//!
//! `cargo bench --bench http --features http`

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::http::{router, ServiceOptions};
use agent_sessions::manager::TurnOutcome;
use agent_sessions::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use serde_json::{json, Value};

const CLIENTS: usize = 8;
const ROUNDS: usize = 10;

/// A manager over the memory store (`None`) or a JSON store in `dir`.
fn manager(dir: Option<std::path::PathBuf>) -> Arc<SessionManager> {
    let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
    let manager = match dir {
        None => SessionManager::builder(MemoryStore::new()).key_builder(keys),
        Some(dir) => SessionManager::builder(JsonFileStore::new(dir)).key_builder(keys),
    };
    Arc::new(manager.build())
}

fn message(client: usize) -> InboundMessage {
    InboundMessage::direct("sms", format!("+1555000{client:04}"), "what is on today?")
        .with_agent("ws_bench")
}

/// One round per client, directly on the manager.
async fn direct_round(manager: &Arc<SessionManager>) {
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let manager = manager.clone();
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                let resolution = manager.resolve(&message(client)).await.unwrap();
                let outcome =
                    TurnOutcome::completed().with_exchange("what is on today?", "A meeting.");
                manager.record_turn(&resolution.key, outcome).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// The same over HTTP.
async fn http_round(base: &str, client: &reqwest::Client) {
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CLIENTS {
        let base = base.to_owned();
        let client = client.clone();
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                let resolved: Value = client
                    .post(format!("{base}/kernel/sessions/resolve"))
                    .json(&json!({
                        "workspace_id": "ws_bench", "channel": "sms",
                        "remote_jid": format!("+1555000{n:04}"),
                        "user_message": "what is on today?",
                    }))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                let id = resolved["session_id"].as_str().unwrap();
                let response = client
                    .patch(format!("{base}/kernel/sessions/{id}"))
                    .json(&json!({"user_message": "what is on today?", "assistant_response": "A meeting."}))
                    .send()
                    .await
                    .unwrap();
                assert!(response.status().is_success());
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// Every client's session has exactly the turns sent to it.
fn assert_no_lost_update(manager: &SessionManager, runtime: &tokio::runtime::Runtime, turns: u64) {
    for client in 0..CLIENTS {
        let key = manager.key_for(&message(client)).unwrap();
        let entry = runtime.block_on(manager.get(&key)).unwrap().unwrap().entry;
        assert_eq!(
            entry.turn_count,
            Some(turns),
            "lost updates for client {client}"
        );
    }
}

fn http(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("http");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements((CLIENTS * ROUNDS * 2) as u64));
    let dir = tempfile::tempdir().unwrap();
    let mut stores = 0;
    for name in ["memory", "json"] {
        // A fresh manager (and, for JSON, a fresh directory) for each measurement.
        let mut fresh = || {
            stores += 1;
            manager((name == "json").then(|| dir.path().join(stores.to_string())))
        };

        let direct = fresh();
        let mut rounds = 0u64;
        group.bench_function(BenchmarkId::new("direct", name), |b| {
            b.iter_custom(|iterations| {
                let started = Instant::now();
                for _ in 0..iterations {
                    runtime.block_on(direct_round(&direct));
                }
                rounds += iterations;
                started.elapsed()
            })
        });
        assert_no_lost_update(&direct, &runtime, rounds * ROUNDS as u64);

        let served = fresh();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = router(served.clone(), ServiceOptions::default());
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = reqwest::Client::new();
        let mut rounds = 0u64;
        group.bench_function(BenchmarkId::new("http", name), |b| {
            b.iter_custom(|iterations| {
                let started = Instant::now();
                for _ in 0..iterations {
                    runtime.block_on(http_round(&base, &client));
                }
                rounds += iterations;
                started.elapsed()
            })
        });
        assert_no_lost_update(&served, &runtime, rounds * ROUNDS as u64);
    }
    group.finish();
}

criterion_group!(benches, http);
criterion_main!(benches);
