//! Fixtures shared by the benchmarks.

#![allow(dead_code)]

use std::path::Path;

pub mod cold_open;
pub mod contention;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod search;
pub mod turn_age;

use agent_sessions::prelude::*;
use agent_sessions::{ChatType, DeliveryContext, SessionOrigin};
use indexmap::IndexMap;

/// A realistic entry of about 1.46 KB, the size OpenClaw's users report.
pub fn entry(i: usize) -> SessionEntry {
    let mut entry = SessionEntry::new(
        format!("{:08x}-034e-47d9-ac97-d383e6c022b8", i),
        1_770_350_000_000 + i as u64,
    );
    entry.system_sent = Some(true);
    entry.aborted_last_run = Some(false);
    entry.chat_type = Some(ChatType::Direct);
    entry.channel = Some("telegram".into());
    entry.origin = Some(SessionOrigin {
        label: Some(format!("User {i}")),
        provider: Some("telegram".into()),
        surface: Some("telegram".into()),
        chat_type: Some(ChatType::Direct),
        from: Some(format!("telegram:{}", 100_000_000 + i)),
        to: Some(format!("telegram:{}", 100_000_000 + i)),
        account_id: Some("default".into()),
        ..SessionOrigin::default()
    });
    entry.delivery_context = Some(DeliveryContext {
        channel: Some("telegram".into()),
        to: Some(format!("telegram:{}", 100_000_000 + i)),
        account_id: Some("default".into()),
        ..DeliveryContext::default()
    });
    entry.last_channel = Some("telegram".into());
    entry.last_to = Some(format!("telegram:{}", 100_000_000 + i));
    entry.last_account_id = Some("default".into());
    entry.session_file = Some(format!(
        "/home/u/.openclaw/agents/main/sessions/{:08x}-034e-47d9-ac97-d383e6c022b8.jsonl",
        i
    ));
    entry.compaction_count = Some(2);
    entry.input_tokens = Some(1200);
    entry.output_tokens = Some(340);
    entry.total_tokens = Some(15_320);
    entry.context_tokens = Some(200_000);
    entry.model_provider = Some("anthropic".into());
    entry.model = Some("claude-opus-4-6".into());
    entry.thinking_level = Some("low".into());
    entry.system_prompt_report = Some(serde_json::json!({
        "source": "run",
        "generatedAt": 1_770_350_000_000u64,
        "systemPrompt": { "chars": 18_234, "projectContextChars": 4_120, "nonProjectContextChars": 14_114 },
        "injectedWorkspaceFiles": [
            { "name": "AGENTS.md", "path": "/home/u/work/AGENTS.md", "rawChars": 2_311, "injectedChars": 2_311 }
        ]
    }));
    entry
}

pub fn key(i: usize) -> SessionKey {
    SessionKey::parse(&format!("agent:main:telegram:dm:{}", 100_000_000 + i)).unwrap()
}

/// Writes a store of `sessions` entries the way OpenClaw does (JSON.stringify, 2 spaces).
pub fn write_store(root: &Path, sessions: usize) -> Vec<u8> {
    let store: IndexMap<String, SessionEntry> = (0..sessions)
        .map(|i| (key(i).to_string(), entry(i)))
        .collect();
    let bytes = serde_json::to_vec_pretty(&store).unwrap();
    let file = agent_sessions::store::store_path(root, &AgentId::main());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    bytes
}

/// The disk work of one store write and nothing else: write a file of the same size,
/// optionally fsync it, rename it over the target, optionally fsync the directory.
pub fn write_and_rename(dir: &Path, bytes: &[u8], sync: bool) {
    let temp = dir.join("baseline.tmp");
    let mut file = std::fs::File::create(&temp).unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    if sync {
        file.sync_all().unwrap();
    }
    drop(file);
    std::fs::rename(&temp, dir.join("baseline.json")).unwrap();
    if sync {
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
    }
}

/// What the raw rusqlite baseline does with the entry between its read and its write.
#[cfg(feature = "sqlite")]
#[derive(Clone, Copy, Debug)]
pub enum RawChange {
    /// Writes the bytes it read back unchanged (no JSON work).
    CopyBytes,
    /// Parses the entry as a `serde_json::Value`, changes its message count and update
    /// time, serialises it: the same read-modify-write as the store's (the `sqlite`
    /// benchmark's store update changes the same two fields), written directly.
    ParseAndChange,
}

/// One update written directly with rusqlite on the store's own table: `BEGIN
/// IMMEDIATE`, read the entry, `change` it, write it with the update time, `COMMIT`,
/// with cached statements.
#[cfg(feature = "sqlite")]
pub fn raw_sqlite_update(
    connection: &rusqlite::Connection,
    key: &str,
    counter: i64,
    change: RawChange,
) {
    connection.execute_batch("BEGIN IMMEDIATE").unwrap();
    let entry: String = connection
        .prepare_cached("SELECT entry FROM sessions WHERE session_key = ?1")
        .unwrap()
        .query_row([key], |row| row.get(0))
        .unwrap();
    let entry = match change {
        RawChange::CopyBytes => entry,
        RawChange::ParseAndChange => {
            let mut value: serde_json::Value = serde_json::from_str(&entry).unwrap();
            value["messageCount"] = serde_json::json!(counter);
            value["updatedAt"] = serde_json::json!(counter);
            serde_json::to_string(&value).unwrap()
        }
    };
    connection
        .prepare_cached("UPDATE sessions SET entry = ?2, updated_at = ?3 WHERE session_key = ?1")
        .unwrap()
        .execute(rusqlite::params![key, entry, counter])
        .unwrap();
    connection.execute_batch("COMMIT").unwrap();
}

/// A session store and a transcript store of one backend.
pub type Stores = (
    std::sync::Arc<dyn SessionStore>,
    std::sync::Arc<dyn agent_sessions::transcript::TranscriptStore>,
);

/// One backend's stores, and what they live in (a directory, a PostgreSQL schema),
/// removed when this is dropped.
pub struct Opened {
    pub stores: Stores,
    _dir: Option<tempfile::TempDir>,
    #[cfg(feature = "postgres")]
    schema: Option<(agent_sessions::store::PostgresStore, tokio::runtime::Handle)>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        #[cfg(feature = "postgres")]
        if let Some((postgres, runtime)) = self.schema.take() {
            std::thread::spawn(move || runtime.block_on(postgres.drop_schema()).unwrap())
                .join()
                .unwrap();
        }
    }
}

/// The backends [`open_backend`] opens here: memory, JSON, and SQLite and PostgreSQL
/// when the build (and, for PostgreSQL, `AGENT_SESSIONS_TEST_POSTGRES_URL`) has them.
pub fn backends() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut names = vec!["memory", "json"];
    #[cfg(feature = "sqlite")]
    names.push("sqlite");
    #[cfg(feature = "postgres")]
    if std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").is_ok() {
        names.push("postgres");
    }
    names
}

/// Backend `name` in its fast durability mode, holding `sessions` entries: memory,
/// JSON files (store and transcripts unsynced), SQLite (`synchronous = OFF`) or
/// PostgreSQL (in a schema of its own, dropped with the [`Opened`]).
pub fn open_backend(runtime: &tokio::runtime::Runtime, sessions: usize, name: &str) -> Opened {
    use agent_sessions::store::FileTranscriptStore;
    use agent_sessions::transcript::InMemoryTranscriptStore;
    use agent_sessions::{Durability, JsonFileOptions};
    use std::sync::Arc;

    /// Puts the `sessions` entries, eight writers at a time.
    async fn fill(store: Arc<dyn SessionStore>, sessions: usize) {
        let mut tasks = tokio::task::JoinSet::new();
        for chunk in 0..8 {
            let store = store.clone();
            tasks.spawn(async move {
                for i in (chunk..sessions).step_by(8) {
                    store.put(&key(i), entry(i)).await.unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
    let opened = |stores: Stores, dir: Option<tempfile::TempDir>| Opened {
        stores,
        _dir: dir,
        #[cfg(feature = "postgres")]
        schema: None,
    };

    match name {
        "memory" => {
            let memory = Arc::new(InMemoryStore::new());
            runtime.block_on(fill(memory.clone(), sessions));
            opened((memory, Arc::new(InMemoryTranscriptStore::new())), None)
        }
        "json" => {
            let dir = tempfile::tempdir().unwrap();
            if sessions > 0 {
                write_store(dir.path(), sessions);
            }
            let json = JsonFileStore::new_with(
                dir.path(),
                JsonFileOptions {
                    durability: Durability::Unsynced,
                    ..JsonFileOptions::default()
                },
            );
            let transcripts =
                FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
            opened((Arc::new(json), Arc::new(transcripts)), Some(dir))
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            use agent_sessions::store::{SqliteOptions, SqliteStore};
            let dir = tempfile::tempdir().unwrap();
            let mut options = SqliteOptions::default();
            options.durability = Durability::Unsynced;
            let sqlite =
                Arc::new(SqliteStore::open_with(dir.path().join("bench.db"), options).unwrap());
            runtime.block_on(fill(sqlite.clone(), sessions));
            opened((sqlite.clone(), sqlite), Some(dir))
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            use agent_sessions::store::{PostgresOptions, PostgresStore};
            let server = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").unwrap();
            let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
            let postgres = runtime
                .block_on(PostgresStore::connect_with(
                    &server,
                    PostgresOptions::in_schema(&schema),
                ))
                .unwrap();
            let store = Arc::new(postgres.clone());
            runtime.block_on(fill(store.clone(), sessions));
            Opened {
                stores: (store.clone(), store),
                _dir: None,
                schema: Some((postgres, runtime.handle().clone())),
            }
        }
        other => panic!("no backend {other} in this build"),
    }
}

/// Runs `bench` once per backend ([`backends`], [`open_backend`]), each in its fast
/// durability mode and holding `sessions` entries first.
pub fn on_each_backend(
    runtime: &tokio::runtime::Runtime,
    sessions: usize,
    mut bench: impl FnMut(
        &str,
        std::sync::Arc<dyn SessionStore>,
        std::sync::Arc<dyn agent_sessions::transcript::TranscriptStore>,
    ),
) {
    for name in backends() {
        let opened = open_backend(runtime, sessions, name);
        let (store, transcripts) = opened.stores.clone();
        bench(name, store, transcripts);
    }
}
