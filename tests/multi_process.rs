//! Several OS processes updating one JSON store lose no update.
//!
//! The test re-executes this test binary: each child runs the ignored test
//! `child_process_worker`, which finds its instructions in the environment.

mod common;

use std::process::{Command, Stdio};

use agent_sessions::prelude::*;

const ROOT_VAR: &str = "AGENT_SESSIONS_CHILD_ROOT";
const WORKER_VAR: &str = "AGENT_SESSIONS_CHILD_WORKER";
const PROCESSES: u64 = 4;
const INCREMENTS: u64 = 100;

fn shared_key() -> SessionKey {
    SessionKey::parse("agent:main:main").unwrap()
}

fn own_key(worker: &str) -> SessionKey {
    SessionKey::parse(&format!("agent:main:dm:worker{worker}")).unwrap()
}

async fn increment(store: &JsonFileStore, key: &SessionKey) {
    store
        .update(key, |slot| {
            let entry = slot.get_or_insert_with(|| SessionEntry::new_session(1));
            entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
        })
        .await
        .unwrap();
}

#[test]
fn processes_incrementing_one_entry_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|worker| {
            Command::new(&exe)
                .args([
                    "child_process_worker",
                    "--exact",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env(ROOT_VAR, dir.path())
                .env(WORKER_VAR, worker.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "child failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        // The child must really have run the worker, not an empty filter.
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("1 passed"),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = common::store(dir.path());
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
        assert_eq!(store.len().await.unwrap() as u64, PROCESSES + 1);
    });
}

#[test]
#[ignore = "a child process of processes_incrementing_one_entry_lose_no_update"]
fn child_process_worker() {
    let (Ok(root), Ok(worker)) = (std::env::var(ROOT_VAR), std::env::var(WORKER_VAR)) else {
        panic!("run by processes_incrementing_one_entry_lose_no_update, not directly");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = JsonFileStore::with_options(
            &root,
            agent_sessions::JsonStoreOptions {
                lock: agent_sessions::LockOptions {
                    timeout: std::time::Duration::from_secs(60),
                    ..Default::default()
                },
                ..common::test_options()
            },
        );
        for _ in 0..INCREMENTS {
            increment(&store, &shared_key()).await;
            increment(&store, &own_key(&worker)).await;
        }
    });
}
