//! PostgreSQL against `pgbench`, shared by the `postgres` and `floors` benchmarks: the
//! same read-modify-write transaction run by pgbench and by the store.

use std::process::Command;
use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::store::PostgresStore;

use super::{entry, key};

/// pgbench's transactions per second for `script` with `clients` connections.
pub fn pgbench(url: &str, script: &str, clients: usize, seconds: u64) -> f64 {
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

/// Fills the store with `sessions` sessions, 16 tasks at a time.
pub async fn fill(store: &Arc<PostgresStore>, sessions: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..16 {
        let store = store.clone();
        tasks.spawn(async move {
            for i in (chunk..sessions).step_by(16) {
                store.put(&key(i), entry(i)).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// pgbench's script: the store's read-modify-write on a random session of the
/// `sessions` in `schema` (`BEGIN`, `SELECT … FOR UPDATE`, `UPDATE`, `END`).
pub fn script(schema: &str, sessions: usize) -> String {
    // The key is built without `:` in a literal (pgbench would read `:main` as a
    // variable) and with a typed parameter (prepared mode).
    let key_sql = "concat('agent', chr(58), 'main', chr(58), 'telegram', chr(58), 'dm', chr(58), CAST(:k AS text))";
    format!(
        "\\set k random(100000000, {})\n\
         BEGIN;\n\
         SELECT entry FROM {schema}.sessions WHERE session_key = {key_sql} FOR UPDATE;\n\
         UPDATE {schema}.sessions SET updated_at = updated_at + 1 WHERE session_key = {key_sql};\n\
         END;\n",
        100_000_000 + sessions - 1
    )
}

/// `clients` concurrent tasks each making `per_client` updates through the store.
pub async fn store_round(
    store: &Arc<PostgresStore>,
    sessions: usize,
    clients: usize,
    per_client: usize,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let store = store.clone();
        tasks.spawn(async move {
            for n in 0..per_client {
                let i = (client * 7919 + n * 104_729) % sessions;
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
}
