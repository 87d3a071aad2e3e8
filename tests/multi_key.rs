//! Updates of several sessions at once (`MultiKeyStore::apply_many`): what only some
//! backends can show — a damaged entry among the keys, the JSON store's files, an
//! agent-scoped store. The behaviour every store shares is in the conformance suite.

mod common;

use agent_sessions::identity::AgentScoped;
use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::{AccessDenial, Error, JsonFileOptions, MultiKeyStore};

fn key(raw: &str) -> SessionKey {
    SessionKey::parse(raw).unwrap()
}

/// Sets every requested session's label to `label`, creating missing ones.
async fn label_all<S: MultiKeyStore + ?Sized>(
    store: &S,
    keys: &[SessionKey],
    label: &str,
) -> agent_sessions::Result<()> {
    store
        .update_many(keys, |slots| {
            for slot in slots.iter_mut() {
                slot.entry
                    .get_or_insert_with(|| SessionEntry::new("s-new", 9))
                    .label = Some(label.to_owned());
            }
        })
        .await
}

/// With `bad` damaged behind the store's back, a multi-key update over `good`, `bad`
/// and a missing key fails with `InvalidEntry` naming `bad`, and writes nothing:
/// `good` keeps its revision, nothing is created, and the damaged entry is still
/// there (`read_damaged` shows it as stored).
async fn a_damaged_entry_fails_the_update_and_nothing_is_lost(
    backend: &Backend,
    good: &SessionKey,
    bad: &SessionKey,
    read_damaged: impl std::future::Future<Output = String>,
    damaged_before: &str,
) {
    let store = backend.multi_key();
    let before = store.get(good).await.unwrap().unwrap();
    let missing = key("agent:main:telegram:dm:missing");
    let result = label_all(store, &[good.clone(), bad.clone(), missing.clone()], "x").await;
    assert!(
        matches!(&result, Err(Error::InvalidEntry { key, .. }) if key == bad.as_str()),
        "{result:?}"
    );
    assert_eq!(
        store.get(good).await.unwrap(),
        Some(before),
        "good untouched"
    );
    assert!(
        store.get(&missing).await.unwrap().is_none(),
        "nothing created"
    );
    assert_eq!(
        read_damaged.await,
        damaged_before,
        "the damaged entry is kept"
    );
    // Without the damaged key the same update goes through.
    label_all(store, &[good.clone(), missing.clone()], "y")
        .await
        .unwrap();
    assert_eq!(
        store
            .get(&missing)
            .await
            .unwrap()
            .unwrap()
            .entry
            .label
            .as_deref(),
        Some("y")
    );
}

fn two_sessions() -> [(SessionKey, SessionEntry); 2] {
    [
        (
            key("agent:main:telegram:dm:good"),
            SessionEntry::new("s-good", 2),
        ),
        (
            key("agent:main:telegram:dm:bad"),
            SessionEntry::new("s-bad", 1),
        ),
    ]
}

#[tokio::test]
async fn json_a_damaged_entry_fails_a_multi_key_update_and_is_kept() {
    let [good, bad] = two_sessions();
    let dir = tempfile::tempdir().unwrap();
    let json = Backend::open(&format!("json:{}", dir.path().display()))
        .await
        .unwrap();
    for (key, entry) in [&good, &bad] {
        json.sessions().put(key, entry.clone()).await.unwrap();
    }
    // The entry's sessionId is a number.
    let file = common::main_store_file(dir.path());
    let damaged = std::fs::read_to_string(&file)
        .unwrap()
        .replace("\"s-bad\"", "42");
    std::fs::write(&file, &damaged).unwrap();
    let read = async { std::fs::read_to_string(&file).unwrap() };
    a_damaged_entry_fails_the_update_and_nothing_is_lost(&json, &good.0, &bad.0, read, &damaged)
        .await;
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("\"sessionId\": 42"));
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_a_damaged_entry_fails_a_multi_key_update_and_is_kept() {
    let [good, bad] = two_sessions();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let sqlite = Backend::open(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    for (key, entry) in [&good, &bad] {
        sqlite.sessions().put(key, entry.clone()).await.unwrap();
    }
    let raw = |db: std::path::PathBuf, k: SessionKey| {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row(
                "SELECT entry FROM sessions WHERE session_key = ?1",
                [k.as_str()],
                |row| row.get::<_, String>(0),
            )
            .unwrap()
    };
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE sessions SET entry = '{not json' WHERE session_key = ?1",
            [bad.0.as_str()],
        )
        .unwrap();
    let read = async { raw(db.clone(), bad.0.clone()) };
    a_damaged_entry_fails_the_update_and_nothing_is_lost(
        &sqlite,
        &good.0,
        &bad.0,
        read,
        "{not json",
    )
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_a_damaged_entry_fails_a_multi_key_update_and_is_kept() {
    let [good, bad] = two_sessions();
    let schema = common::TestSchema::new("multikey_damaged");
    let postgres = Backend::open(&schema.url()).await.unwrap();
    for (key, entry) in [&good, &bad] {
        postgres.sessions().put(key, entry.clone()).await.unwrap();
    }
    let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let damaged = r#"{"sessionId": 42}"#;
    client
        .execute(
            &format!(
                "UPDATE {}.sessions SET entry = $2 WHERE session_key = $1",
                schema.name
            ),
            &[&bad.0.as_str(), &damaged],
        )
        .await
        .unwrap();
    let read = async {
        client
            .query_one(
                &format!(
                    "SELECT entry FROM {}.sessions WHERE session_key = $1",
                    schema.name
                ),
                &[&bad.0.as_str()],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    a_damaged_entry_fails_the_update_and_nothing_is_lost(&postgres, &good.0, &bad.0, read, damaged)
        .await;
    schema.drop().await;
}

/// The JSON store updates keys together only when their sessions share one
/// `sessions.json`; otherwise it refuses them before locking anything.
#[tokio::test]
async fn the_json_store_updates_keys_of_one_file_together_and_refuses_two_files() {
    let shared_file = |dir: &std::path::Path| JsonFileOptions {
        store_path: Some(format!("{}/all/sessions.json", dir.display())),
        ..common::test_options()
    };
    let per_agent = |_: &std::path::Path| common::test_options();
    type Options = fn(&std::path::Path) -> JsonFileOptions;
    // (case, options, keys, written together?)
    let cases: [(&str, Options, [&str; 2], bool); 4] = [
        (
            "two sessions of one agent",
            per_agent,
            ["agent:main:telegram:dm:1", "agent:main:slack:dm:1"],
            true,
        ),
        (
            "`global` lives in the main agent's file",
            per_agent,
            ["global", "agent:main:telegram:dm:1"],
            true,
        ),
        (
            "two agents, two files",
            per_agent,
            ["agent:main:telegram:dm:1", "agent:ops:telegram:dm:1"],
            false,
        ),
        (
            "two agents sharing one file",
            shared_file,
            ["agent:main:telegram:dm:1", "agent:ops:telegram:dm:1"],
            true,
        ),
    ];
    for (case, options, keys, together) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonFileStore::new_with(dir.path(), options(dir.path()));
        let keys = keys.map(key);
        let result = label_all(&store, &keys, "both").await;
        let written = store.count(&ListFilter::new()).await.unwrap();
        if together {
            result.unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(written, 2, "{case}");
        } else {
            assert!(
                matches!(&result, Err(Error::NotAtomic { first, second, .. })
                    if *first == keys[0] && *second == keys[1]),
                "{case}: {result:?}"
            );
            assert_eq!(written, 0, "{case}: nothing written");
            assert!(
                !dir.path().join("agents").exists(),
                "{case}: no file or lock created"
            );
        }
    }
}

/// On the JSON store, several keys change in one write of `sessions.json`: its backup
/// afterwards is the file as it was before the call.
#[tokio::test]
async fn the_json_store_writes_a_multi_key_update_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::store(dir.path());
    let keys = ["a", "b", "c"].map(|n| key(&format!("agent:main:telegram:dm:{n}")));
    store
        .put(&keys[0], SessionEntry::new("s-a", 1))
        .await
        .unwrap();
    let file = common::main_store_file(dir.path());
    let before = std::fs::read_to_string(&file).unwrap();
    label_all(&store, &keys, "all").await.unwrap();
    let mut backup = file.clone().into_os_string();
    backup.push(".bak");
    assert_eq!(
        std::fs::read_to_string(backup).unwrap(),
        before,
        "one write replaced the file the call found"
    );
    for k in &keys {
        let label = store.get(k).await.unwrap().unwrap().entry.label;
        assert_eq!(label.as_deref(), Some("all"), "{k}");
    }
}

/// An agent-scoped store refuses a multi-key update naming another agent's session,
/// and writes nothing of it.
#[tokio::test]
async fn an_agent_scoped_store_refuses_another_agents_key_among_many() {
    let shared = std::sync::Arc::new(InMemoryStore::new());
    let ops = AgentScoped::new(AgentId::new("ops").unwrap(), shared.clone());
    let own = key("agent:ops:telegram:dm:1");
    let theirs = key("agent:main:telegram:dm:1");
    let result = label_all(&ops, &[own.clone(), theirs], "x").await;
    assert!(
        matches!(
            result,
            Err(Error::AccessDenied {
                reason: AccessDenial::OtherAgent,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(shared.is_empty().await.unwrap());
    label_all(&ops, std::slice::from_ref(&own), "x")
        .await
        .unwrap();
    assert!(shared.get(&own).await.unwrap().is_some());
}

/// Updates the sessions of `keys` with a mutator that panics, in a task of its own.
async fn panic_in_update_many<S: MultiKeyStore + Clone + 'static>(store: &S, keys: &[SessionKey]) {
    let (store, keys) = (store.clone(), keys.to_vec());
    let joined = tokio::spawn(async move {
        store
            .update_many(&keys, |slots| {
                for slot in slots.iter_mut() {
                    slot.entry = Some(SessionEntry::new("never-written", 1));
                }
                panic!("the mutator panics (this panic is expected by the test)");
            })
            .await
    })
    .await;
    assert!(joined.is_err_and(|e| e.is_panic()));
}

/// A panicking mutator releases the JSON store's lock file at once: OpenClaw, or
/// another process, is not kept waiting until this process writes again.
#[tokio::test]
async fn a_panicking_mutator_releases_the_json_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::store(dir.path());
    let keys = [
        key("agent:main:telegram:dm:1"),
        key("agent:main:telegram:dm:2"),
    ];
    store
        .put(&keys[0], SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    let file = common::main_store_file(dir.path());
    let before = std::fs::read(&file).unwrap();
    panic_in_update_many(&store, &keys).await;
    let mut lock = file.clone().into_os_string();
    lock.push(".lock");
    assert!(
        !std::path::Path::new(&lock).exists(),
        "the lock file is released"
    );
    assert!(std::fs::read(&file).unwrap() == before, "nothing written");
}

/// A panicking mutator rolls the SQLite transaction back at once: another process can
/// write without waiting for this store's next call.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_mutator_releases_the_sqlite_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = agent_sessions::store::SqliteStore::open(&path).unwrap();
    let keys = [
        key("agent:main:telegram:dm:1"),
        key("agent:main:telegram:dm:2"),
    ];
    panic_in_update_many(&store, &keys).await;
    let other = rusqlite::Connection::open(&path).unwrap();
    other.busy_timeout(std::time::Duration::ZERO).unwrap();
    other
        .execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
        .expect("the write lock is free");
    assert!(store.is_empty().await.unwrap(), "nothing written");
}
