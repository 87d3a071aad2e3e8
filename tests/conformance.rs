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
