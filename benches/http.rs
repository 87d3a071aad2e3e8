//! The sessions HTTP service under load: 8 client tasks each sending resolve + PATCH
//! (record a turn) for their own sender over loopback HTTP/1.1, against two baselines
//! measured in the same run: the same calls made directly on the `SessionManager` (the
//! service's own cost), and a bare axum server with the same two routes that parses the
//! same request bodies and answers the same response bodies without a session manager
//! (the cost of HTTP itself: client, server, JSON), on the memory store and the JSON
//! store. After each measurement every session's turn count is checked against the
//! turns sent: a lost update fails the benchmark.
//!
//! `cargo bench --bench http --features http`

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::http::{router, ServiceOptions};
use common::http::{
    assert_no_lost_update, bare_router, captured_replies, direct_round, http_round, manager,
    spawn_server, CLIENTS, ROUNDS,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

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
        let base = spawn_server(&runtime, router(served.clone(), ServiceOptions::default()));
        let client = reqwest::Client::new();
        if name == "memory" {
            // The bare server answers what the service answers; its cost does not
            // depend on the store, so it is measured once.
            let replies = runtime.block_on(captured_replies(&base, &client));
            let bare = spawn_server(&runtime, bare_router(Arc::new(replies)));
            group.bench_function("bare_axum", |b| {
                b.iter_custom(|iterations| {
                    let started = Instant::now();
                    for _ in 0..iterations {
                        runtime.block_on(http_round(&bare, &client));
                    }
                    started.elapsed()
                })
            });
        }
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
