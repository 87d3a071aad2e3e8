//! The PostgreSQL store against `pgbench` running the same read-modify-write
//! transaction (`SELECT … FOR UPDATE`, `UPDATE`, `COMMIT`) on the same 100,000-row table
//! in the same run, at 1, 4 and 8 connections.
//!
//! `AGENT_SESSIONS_TEST_POSTGRES_URL=postgres://… cargo bench --bench postgres --features postgres`
//! (needs `pgbench` on the PATH). The schema is created for the run and dropped after.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::store::{PostgresOptions, PostgresStore};
use common::postgres::{fill, pgbench, script, store_round};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SESSIONS: usize = 100_000;

fn postgres(c: &mut Criterion) {
    let Ok(url) = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL") else {
        eprintln!("AGENT_SESSIONS_TEST_POSTGRES_URL is not set: nothing to measure");
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let store = Arc::new(
        runtime
            .block_on(PostgresStore::connect_with(
                &url,
                PostgresOptions::in_schema(&schema),
            ))
            .unwrap(),
    );
    runtime.block_on(fill(&store, SESSIONS));
    let script = script(&schema, SESSIONS);

    let mut group = c.benchmark_group(format!("postgres/{SESSIONS}"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for clients in [1usize, 4, 8] {
        let tps = pgbench(&url, &script, clients, 10);
        eprintln!("pgbench, {clients} connection(s): {tps:.0} transactions/s");
        group.throughput(Throughput::Elements(clients as u64 * 50));
        group.bench_function(BenchmarkId::new("store_update", clients), |b| {
            b.iter_custom(|iterations| {
                let started = Instant::now();
                for _ in 0..iterations {
                    runtime.block_on(store_round(&store, SESSIONS, clients, 50));
                }
                started.elapsed()
            })
        });
    }
    group.finish();
    runtime.block_on(store.drop_schema()).unwrap();
}

criterion_group!(benches, postgres);
criterion_main!(benches);
