//! The PostgreSQL store against `pgbench` running the same read-modify-write
//! transaction (`SELECT … FOR UPDATE`, `UPDATE`, `COMMIT`) on the same 100,000-row table
//! in the same run, at 1, 4 and 8 connections.
//!
//! `AGENT_SESSIONS_TEST_POSTGRES_URL=postgres://… cargo bench --bench postgres --features postgres`
//! (needs `pgbench` on the PATH). The schema is created for the run and dropped after.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::store::{PostgresOptions, PostgresStore};
use common::{entry, key};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SESSIONS: usize = 100_000;

/// pgbench's transactions per second for `script` with `clients` connections.
fn pgbench(url: &str, script: &str, clients: usize, seconds: u64) -> f64 {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), script).unwrap();
    let output = Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-c", &clients.to_string(), "-j"])
        .arg(clients.min(2).to_string())
        .args(["-T", &seconds.to_string(), "-f"])
        .arg(file.path())
        .arg(url)
        .output()
        .expect("pgbench runs");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix("tps = ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "no tps in pgbench output: {text}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

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
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for chunk in 0..16 {
            let store = store.clone();
            tasks.spawn(async move {
                for i in (chunk..SESSIONS).step_by(16) {
                    store.put(&key(i), entry(i)).await.unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    });
    // The key is built without `:` in a literal (pgbench would read `:main` as a
    // variable) and with a typed parameter (prepared mode).
    let key_sql = "concat('agent', chr(58), 'main', chr(58), 'telegram', chr(58), 'dm', chr(58), CAST(:k AS text))";
    let script = format!(
        "\\set k random(100000000, {})\n\
         BEGIN;\n\
         SELECT entry FROM {schema}.sessions WHERE session_key = {key_sql} FOR UPDATE;\n\
         UPDATE {schema}.sessions SET updated_at = updated_at + 1 WHERE session_key = {key_sql};\n\
         END;\n",
        100_000_000 + SESSIONS - 1
    );

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
                    runtime.block_on(async {
                        let mut tasks = tokio::task::JoinSet::new();
                        for client in 0..clients {
                            let store = store.clone();
                            tasks.spawn(async move {
                                for n in 0..50 {
                                    let i = (client * 7919 + n * 104_729) % SESSIONS;
                                    store
                                        .with_session(&key(i), |e| e.updated_at += 1)
                                        .await
                                        .unwrap();
                                }
                            });
                        }
                        while let Some(done) = tasks.join_next().await {
                            done.unwrap();
                        }
                    });
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
