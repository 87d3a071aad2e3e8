//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_sessions::{AgentId, Durability, JsonFileStore, JsonStoreOptions, LockOptions};

/// The OpenClaw fixture tree, copied into a fresh temporary directory.
pub fn openclaw_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openclaw"),
        dir.path(),
    );
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Options for tests: fsync of the file only (a directory fsync per write adds nothing
/// to what these tests check), and a short lock timeout so lock tests finish quickly.
pub fn test_options() -> JsonStoreOptions {
    JsonStoreOptions {
        durability: Durability::SyncFile,
        lock: LockOptions {
            timeout: Duration::from_millis(300),
            ..LockOptions::default()
        },
        ..JsonStoreOptions::default()
    }
}

/// A store over `root` with [`test_options`].
pub fn store(root: &Path) -> JsonFileStore {
    JsonFileStore::with_options(root, test_options())
}

/// The main agent's `sessions.json` under `root`.
pub fn main_store_file(root: &Path) -> PathBuf {
    agent_sessions::paths::store_path(root, &AgentId::main())
}

/// Every file name in `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
