//! Every store passes the same conformance suite (`agent_sessions::store::testing`).

use agent_sessions::{Durability, InMemoryStore, JsonFileOptions, JsonFileStore};

async fn memory_store() -> (InMemoryStore, ()) {
    (InMemoryStore::new(), ())
}

async fn json_store() -> (JsonFileStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = JsonFileStore::new_with(
        dir.path(),
        JsonFileOptions {
            durability: Durability::SyncFile,
            ..JsonFileOptions::default()
        },
    );
    (store, dir)
}

mod memory {
    agent_sessions::store_conformance_tests!(super::memory_store());
    agent_sessions::multi_key_conformance_tests!(super::memory_store());
}

mod json {
    agent_sessions::store_conformance_tests!(super::json_store());
    agent_sessions::multi_key_conformance_tests!(super::json_store());
}

#[cfg(feature = "sqlite")]
async fn sqlite_store() -> (agent_sessions::store::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = agent_sessions::store::SqliteStore::open(dir.path().join("sessions.db"))
        .expect("a new database opens");
    (store, dir)
}

#[cfg(feature = "sqlite")]
mod sqlite {
    agent_sessions::store_conformance_tests!(super::sqlite_store());
    agent_sessions::multi_key_conformance_tests!(super::sqlite_store());
}

async fn file_transcripts() -> (
    agent_sessions::store::FileTranscriptStore,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = agent_sessions::store::FileTranscriptStore::new(dir.path());
    (store, dir)
}

mod file_transcripts {
    agent_sessions::transcript_conformance_tests!(super::file_transcripts());
}

#[cfg(feature = "sqlite")]
mod sqlite_transcripts {
    agent_sessions::transcript_conformance_tests!(super::sqlite_store());
}

async fn memory_transcripts() -> (agent_sessions::transcript::InMemoryTranscriptStore, ()) {
    (
        agent_sessions::transcript::InMemoryTranscriptStore::new(),
        (),
    )
}

mod memory_transcripts {
    agent_sessions::transcript_conformance_tests!(super::memory_transcripts());
}

/// A PostgreSQL store in a schema of its own, dropped when the guard goes.
#[cfg(feature = "postgres")]
async fn postgres_store() -> (agent_sessions::store::PostgresStore, SchemaGuard) {
    use agent_sessions::store::{PostgresOptions, PostgresStore};
    let url = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL")
        .expect("AGENT_SESSIONS_TEST_POSTGRES_URL names the test server");
    let schema = format!("conformance_{}", uuid::Uuid::new_v4().simple());
    let store = PostgresStore::connect_with(&url, PostgresOptions::in_schema(&schema))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    (store.clone(), SchemaGuard(Some(store)))
}

/// Drops a test schema on a thread of its own (a test's runtime is ending).
#[cfg(feature = "postgres")]
struct SchemaGuard(Option<agent_sessions::store::PostgresStore>);

#[cfg(feature = "postgres")]
impl Drop for SchemaGuard {
    fn drop(&mut self) {
        if let Some(store) = self.0.take() {
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(store.drop_schema())
            })
            .join()
            .unwrap()
            .unwrap();
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    agent_sessions::store_conformance_tests!(super::postgres_store();
        #[cfg_attr(not(postgres_tests), ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run")]);
    agent_sessions::multi_key_conformance_tests!(super::postgres_store();
        #[cfg_attr(not(postgres_tests), ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run")]);
}

#[cfg(feature = "postgres")]
mod postgres_transcripts {
    agent_sessions::transcript_conformance_tests!(super::postgres_store();
        #[cfg_attr(not(postgres_tests), ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run")]);
}

/// Group chatter and system events: every buffer and queue of the crate passes the same
/// suites, over the storage each backend keeps them in.
mod chatter_and_system_events {
    use agent_sessions::inbound::{InMemoryChatter, SystemEventQueue};
    use agent_sessions::store::{JsonFileChatter, JsonFileSystemEvents};

    mod memory {
        async fn chatter(limit: usize, max_keys: usize) -> (super::InMemoryChatter, ()) {
            (super::InMemoryChatter::new(limit, max_keys), ())
        }
        async fn events(max_events: usize, max_sessions: usize) -> (super::SystemEventQueue, ()) {
            (
                super::SystemEventQueue::with_limits(max_events, max_sessions),
                (),
            )
        }
        agent_sessions::chatter_conformance_tests!(chatter);
        agent_sessions::system_events_conformance_tests!(events);
    }

    mod json {
        async fn chatter(
            limit: usize,
            max_keys: usize,
        ) -> (super::JsonFileChatter, tempfile::TempDir) {
            let dir = tempfile::tempdir().expect("temporary directory");
            (
                super::JsonFileChatter::with_limits(dir.path(), limit, max_keys),
                dir,
            )
        }
        async fn events(
            max_events: usize,
            max_sessions: usize,
        ) -> (super::JsonFileSystemEvents, tempfile::TempDir) {
            let dir = tempfile::tempdir().expect("temporary directory");
            (
                super::JsonFileSystemEvents::with_limits(dir.path(), max_events, max_sessions),
                dir,
            )
        }
        agent_sessions::chatter_conformance_tests!(chatter);
        agent_sessions::system_events_conformance_tests!(events);
    }

    #[cfg(feature = "sqlite")]
    mod sqlite {
        use agent_sessions::store::{SqliteChatter, SqliteSystemEvents};

        async fn chatter(limit: usize, max_keys: usize) -> (SqliteChatter, tempfile::TempDir) {
            let (store, dir) = crate::sqlite_store().await;
            (SqliteChatter::with_limits(&store, limit, max_keys), dir)
        }
        async fn events(
            max_events: usize,
            max_sessions: usize,
        ) -> (SqliteSystemEvents, tempfile::TempDir) {
            let (store, dir) = crate::sqlite_store().await;
            (
                SqliteSystemEvents::with_limits(&store, max_events, max_sessions),
                dir,
            )
        }
        agent_sessions::chatter_conformance_tests!(chatter);
        agent_sessions::system_events_conformance_tests!(events);
    }

    #[cfg(feature = "postgres")]
    mod postgres {
        use agent_sessions::store::{PostgresChatter, PostgresSystemEvents};

        async fn chatter(limit: usize, max_keys: usize) -> (PostgresChatter, crate::SchemaGuard) {
            let (store, guard) = crate::postgres_store().await;
            (PostgresChatter::with_limits(&store, limit, max_keys), guard)
        }
        async fn events(
            max_events: usize,
            max_sessions: usize,
        ) -> (PostgresSystemEvents, crate::SchemaGuard) {
            let (store, guard) = crate::postgres_store().await;
            (
                PostgresSystemEvents::with_limits(&store, max_events, max_sessions),
                guard,
            )
        }
        agent_sessions::chatter_conformance_tests!(chatter;
            #[cfg_attr(not(postgres_tests), ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run")]);
        agent_sessions::system_events_conformance_tests!(events;
            #[cfg_attr(not(postgres_tests), ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run")]);
    }
}
