//! Crash injection: the write path stopped at every step leaves the old or the new
//! store, never a torn or empty one, and the store stays writable.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::io::{temp_sibling, RealIo, StepArgs, StoreIo, WriteStep};
use super::*;
use crate::entry::SessionEntry;
use crate::store::SessionStoreExt;

/// Real I/O that fails at one step of the write path, as a crash at that point would
/// stop the writer. A crash while creating the temporary file leaves half of it.
#[derive(Debug)]
struct CrashAt(WriteStep);

impl StoreIo for CrashAt {
    fn read(&self, path: &Path) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
        RealIo.read(path)
    }

    fn stat(&self, path: &Path) -> io::Result<Option<FileStamp>> {
        RealIo.stat(path)
    }

    fn step(&self, step: WriteStep, args: StepArgs<'_>) -> io::Result<Option<FileStamp>> {
        if step != self.0 {
            return RealIo.step(step, args);
        }
        if let StepArgs::Create { path, bytes } = args {
            std::fs::write(path, &bytes[..bytes.len() / 2])?;
        }
        Err(io::Error::other(format!("injected crash at {step:?}")))
    }
}

fn key() -> SessionKey {
    SessionKey::parse("agent:main:main").unwrap()
}

fn options() -> JsonStoreOptions {
    JsonStoreOptions {
        durability: Durability::SyncFileAndDir,
        ..JsonStoreOptions::default()
    }
}

async fn session_id_on_disk(root: &Path) -> Option<String> {
    // A fresh store: no cache, real I/O.
    JsonFileStore::with_options(root, options())
        .get(&key())
        .await
        .expect("the store opens after a crash")
        .map(|stored| stored.entry.session_id)
}

fn sessions_dir_files(root: &Path) -> Vec<String> {
    let dir = paths::sessions_dir(root, &AgentId::main());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_crash_at_any_write_step_leaves_the_old_or_the_new_store() {
    let steps = [
        (WriteStep::WriteTemp, "old"),
        (WriteStep::SyncTemp, "old"),
        (WriteStep::LinkBackup, "old"),
        (WriteStep::RenameBackup, "old"),
        (WriteStep::Rename, "old"),
        // The rename happened; only its durability is in doubt.
        (WriteStep::SyncDir, "new"),
    ];
    for (step, expected) in steps {
        let dir = tempfile::tempdir().unwrap();
        let healthy = JsonFileStore::with_options(dir.path(), options());
        healthy
            .put(&key(), SessionEntry::new("old", 1))
            .await
            .unwrap();
        // One more write so that a backup exists and LinkBackup runs.
        healthy
            .put(&key(), SessionEntry::new("old", 2))
            .await
            .unwrap();

        let crashing = JsonFileStore::with_io(dir.path(), options(), Arc::new(CrashAt(step)));
        let error = crashing
            .put(&key(), SessionEntry::new("new", 3))
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Io { .. }), "{step:?}: {error:?}");

        assert_eq!(
            session_id_on_disk(dir.path()).await.as_deref(),
            Some(expected),
            "{step:?}"
        );
        assert_eq!(
            sessions_dir_files(dir.path()),
            ["sessions.json", "sessions.json.bak"],
            "{step:?}: temporary files and the lock are cleaned up"
        );
        // The lock was released: the next writer proceeds at once.
        healthy
            .put(&key(), SessionEntry::new("after", 4))
            .await
            .unwrap();
        assert_eq!(
            session_id_on_disk(dir.path()).await.as_deref(),
            Some("after")
        );
    }
}

#[tokio::test]
async fn orphaned_temp_files_from_a_real_crash_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::with_options(dir.path(), options());
    store
        .put(&key(), SessionEntry::new("old", 1))
        .await
        .unwrap();
    // What a process killed between writing its temp file and the rename leaves.
    let file = paths::store_path(dir.path(), &AgentId::main());
    let orphan = temp_sibling(&file);
    std::fs::write(
        &orphan,
        b"{\n  \"agent:main:main\": {\n    \"sessionId\": \"torn",
    )
    .unwrap();
    assert!(orphan
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("sessions.json."));

    assert_eq!(session_id_on_disk(dir.path()).await.as_deref(), Some("old"));
    store
        .put(&key(), SessionEntry::new("new", 2))
        .await
        .unwrap();
    assert_eq!(session_id_on_disk(dir.path()).await.as_deref(), Some("new"));
}

#[tokio::test]
async fn a_failed_write_is_not_served_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let crashing =
        JsonFileStore::with_io(dir.path(), options(), Arc::new(CrashAt(WriteStep::SyncDir)));
    // The first write renames and then fails; the store must not keep serving a
    // cached "missing" state, nor claim the write as cached.
    assert!(crashing
        .put(&key(), SessionEntry::new("new", 1))
        .await
        .is_err());
    assert_eq!(
        crashing
            .get(&key())
            .await
            .unwrap()
            .map(|s| s.entry.session_id),
        Some("new".to_owned()),
        "reads see what is on disk"
    );
}
