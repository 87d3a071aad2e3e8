//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_sessions::{AgentId, Durability, JsonFileOptions, JsonFileStore, LockOptions};

/// The OpenClaw fixture tree, copied into a fresh temporary directory.
pub fn openclaw_fixture() -> tempfile::TempDir {
    fixture("openclaw")
}

/// The fixture tree `tests/fixtures/<name>`, copied into a fresh temporary directory.
pub fn fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    copy_tree(&fixtures().join(name), dir.path());
    dir
}

/// `tests/fixtures` of the library, from the library's tests or a workspace member's
/// (which include this module by path).
fn fixtures() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        manifest.join("tests/fixtures"),
        manifest.join("../tests/fixtures"),
    ]
    .into_iter()
    .find(|dir| dir.is_dir())
    .expect("the library's tests/fixtures")
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
pub fn test_options() -> JsonFileOptions {
    JsonFileOptions {
        durability: Durability::SyncFile,
        lock: LockOptions {
            timeout: Duration::from_millis(300),
            ..LockOptions::default()
        },
        ..JsonFileOptions::default()
    }
}

/// A store over `root` with [`test_options`].
pub fn store(root: &Path) -> JsonFileStore {
    JsonFileStore::new_with(root, test_options())
}

/// The main agent's `sessions.json` under `root`.
pub fn main_store_file(root: &Path) -> PathBuf {
    agent_sessions::store::store_path(root, &AgentId::main())
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

/// A schema of its own on the test PostgreSQL server (`AGENT_SESSIONS_TEST_POSTGRES_URL`)
/// for one test; [`TestSchema::drop`] removes it.
#[cfg(feature = "postgres")]
pub struct TestSchema {
    /// The server's URL, without a schema.
    pub server: String,
    /// The schema's name.
    pub name: String,
}

#[cfg(feature = "postgres")]
impl TestSchema {
    /// A new, unique schema name starting with `prefix`.
    pub fn new(prefix: &str) -> Self {
        TestSchema {
            server: std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").expect("a test server"),
            name: format!("{prefix}_{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// The store URL of the schema (`…?schema=<name>`).
    pub fn url(&self) -> String {
        let separator = if self.server.contains('?') { '&' } else { '?' };
        format!("{}{separator}schema={}", self.server, self.name)
    }

    /// A store in the schema.
    pub async fn store(&self) -> agent_sessions::store::PostgresStore {
        agent_sessions::store::PostgresStore::connect_with(
            &self.server,
            agent_sessions::store::PostgresOptions::in_schema(&self.name),
        )
        .await
        .expect("the test server accepts connections")
    }

    /// Drops the schema and everything in it.
    pub async fn drop(self) {
        self.store()
            .await
            .drop_schema()
            .await
            .expect("the schema drops");
    }
}
