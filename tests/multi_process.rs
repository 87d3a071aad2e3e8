//! Several OS processes updating one store — JSON, SQLite, PostgreSQL — lose no update.
//!
//! The test re-executes this test binary: each child runs the ignored test
//! `child_process_worker`, which finds its instructions in the environment.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::store::Backend;

const STORE_VAR: &str = "AGENT_SESSIONS_CHILD_STORE";
const WORKER_VAR: &str = "AGENT_SESSIONS_CHILD_WORKER";
const PROCESSES: u64 = 4;
const INCREMENTS: u64 = 500;

fn shared_key() -> SessionKey {
    SessionKey::parse("agent:main:main").unwrap()
}

fn own_key(worker: &str) -> SessionKey {
    SessionKey::parse(&format!("agent:main:dm:worker{worker}")).unwrap()
}

async fn increment(store: &dyn SessionStore, key: &SessionKey) {
    store
        .update(key, |slot| {
            let entry = slot.get_or_insert_with(|| SessionEntry::new_session(1));
            entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
        })
        .await
        .unwrap();
}

/// Runs `PROCESSES` copies of this test binary, each running only the ignored test
/// `worker_test` with `var` set to `value` and its worker number, and checks each one
/// really ran it and passed.
fn run_children(worker_test: &str, var: &str, value: &str) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|worker| {
            Command::new(&exe)
                .args([worker_test, "--exact", "--ignored", "--test-threads=1"])
                .env(var, value)
                .env(WORKER_VAR, worker.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The child must really have run the worker, not an empty filter.
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Runs `PROCESSES` children on the store `url`, each incrementing one shared entry and
/// its own `INCREMENTS` times, then checks every increment landed.
fn processes_lose_no_update(url: &str) {
    run_children("child_process_worker", STORE_VAR, url);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = open(url).await;
        let shared = store.get(&shared_key()).await.unwrap().unwrap().entry;
        assert_eq!(shared.compaction_count, Some(PROCESSES * INCREMENTS));
        for worker in 0..PROCESSES {
            let own = store
                .get(&own_key(&worker.to_string()))
                .await
                .unwrap()
                .unwrap()
                .entry;
            assert_eq!(own.compaction_count, Some(INCREMENTS), "worker {worker}");
        }
        assert_eq!(
            store.count(&ListFilter::new()).await.unwrap() as u64,
            PROCESSES + 1
        );
    });
}

/// The store `url` names; a JSON store waits long for its lock (four processes
/// queue on one file).
async fn open(url: &str) -> Arc<dyn SessionStore> {
    match url.strip_prefix("json:") {
        Some(root) => Arc::new(JsonFileStore::new_with(
            root,
            agent_sessions::JsonFileOptions {
                lock: agent_sessions::LockOptions {
                    timeout: std::time::Duration::from_secs(60),
                    ..Default::default()
                },
                ..common::test_options()
            },
        )),
        None => Backend::open(url).await.unwrap().sessions().clone(),
    }
}

#[test]
fn processes_incrementing_one_entry_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    processes_lose_no_update(&format!("json:{}", dir.path().display()));
}

#[cfg(feature = "sqlite")]
#[test]
fn processes_updating_one_sqlite_database_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    processes_lose_no_update(&format!(
        "sqlite:{}",
        dir.path().join("sessions.db").display()
    ));
}

#[cfg(feature = "postgres")]
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn processes_updating_one_postgres_schema_lose_no_update() {
    let server = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").unwrap();
    let schema = format!("multi_process_{}", uuid::Uuid::new_v4().simple());
    let separator = if server.contains('?') { '&' } else { '?' };
    let url = format!("{server}{separator}schema={schema}");
    processes_lose_no_update(&url);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = agent_sessions::store::PostgresStore::connect_with(
                &server,
                agent_sessions::store::PostgresOptions::in_schema(&schema),
            )
            .await
            .unwrap();
            store.drop_schema().await.unwrap();
        });
}

#[test]
#[ignore = "a child process of the multi-process tests"]
fn child_process_worker() {
    let (Ok(url), Ok(worker)) = (std::env::var(STORE_VAR), std::env::var(WORKER_VAR)) else {
        panic!("run by the multi-process tests, not directly");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = open(&url).await;
        for _ in 0..INCREMENTS {
            increment(&*store, &shared_key()).await;
            increment(&*store, &own_key(&worker)).await;
        }
    });
}

const TRANSCRIPT_VAR: &str = "AGENT_SESSIONS_CHILD_TRANSCRIPT";
const APPENDS: usize = 150;

#[test]
fn processes_appending_to_one_transcript_keep_one_parent_chain() {
    use agent_sessions::store::FileTranscriptStore;
    use agent_sessions::transcript::{Offset, TranscriptRef, TranscriptStore};
    let dir = tempfile::tempdir().unwrap();
    run_children(
        "transcript_child_worker",
        TRANSCRIPT_VAR,
        &dir.path().display().to_string(),
    );
    let read = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            FileTranscriptStore::new(dir.path())
                .read(
                    &TranscriptRef::new(AgentId::main(), "shared"),
                    Offset::START,
                )
                .await
                .unwrap()
        });
    assert!(read.issues.is_empty(), "{:?}", read.issues);
    assert_eq!(read.events.len(), PROCESSES as usize * APPENDS);
    // One chain: each entry hangs from the one before it, so walking back from the
    // leaf (as OpenClaw does to build the model's context) reaches every entry.
    let mut previous: Option<String> = None;
    for event in &read.events {
        assert_eq!(
            event.entry.parent_id, previous,
            "line {}: the chain forks",
            event.line
        );
        previous = event.entry.id.clone();
    }
}

#[test]
#[ignore = "a child process of the multi-process tests"]
fn transcript_child_worker() {
    use agent_sessions::store::FileTranscriptStore;
    use agent_sessions::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
    let (Ok(root), Ok(worker)) = (std::env::var(TRANSCRIPT_VAR), std::env::var(WORKER_VAR)) else {
        panic!("run by the multi-process tests, not directly");
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            // Half the processes append unsynced (the short path), half with fsyncs.
            let durability = if worker.parse::<u64>().unwrap() % 2 == 1 {
                agent_sessions::Durability::Unsynced
            } else {
                agent_sessions::Durability::default()
            };
            let store = FileTranscriptStore::with_durability(&root, durability);
            let transcript = TranscriptRef::new(AgentId::main(), "shared");
            for n in 0..APPENDS {
                let text = format!("worker {worker} message {n}");
                let entry = TranscriptEntry::user_text(text, chrono::Utc::now());
                store.append(&transcript, vec![entry]).await.unwrap();
            }
        });
}
