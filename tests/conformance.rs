//! Every store passes the same conformance suite (`agent_sessions::testing`).

use agent_sessions::{Durability, JsonFileStore, JsonStoreOptions, MemoryStore};

async fn memory_store() -> (MemoryStore, ()) {
    (MemoryStore::new(), ())
}

async fn json_store() -> (JsonFileStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = JsonFileStore::with_options(
        dir.path(),
        JsonStoreOptions {
            durability: Durability::SyncFile,
            ..JsonStoreOptions::default()
        },
    );
    (store, dir)
}

mod memory {
    agent_sessions::store_conformance_tests!(super::memory_store());
}

mod json {
    agent_sessions::store_conformance_tests!(super::json_store());
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
}

async fn file_transcripts() -> (
    agent_sessions::transcript::FileTranscriptStore,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = agent_sessions::transcript::FileTranscriptStore::new(dir.path());
    (store, dir)
}

mod file_transcripts {
    agent_sessions::transcript_conformance_tests!(super::file_transcripts());
}

#[cfg(feature = "sqlite")]
mod sqlite_transcripts {
    agent_sessions::transcript_conformance_tests!(super::sqlite_store());
}

async fn memory_transcripts() -> (agent_sessions::transcript::MemoryTranscriptStore, ()) {
    (agent_sessions::transcript::MemoryTranscriptStore::new(), ())
}

mod memory_transcripts {
    agent_sessions::transcript_conformance_tests!(super::memory_transcripts());
}
