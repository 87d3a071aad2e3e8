//! Crash injection: the write path stopped at every step leaves the old or the new
//! store, never a torn or empty one, and the store stays writable.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::io::{temp_sibling, RealIo, StepArgs, StoreIo, WriteStep};
use super::*;
use crate::store::entry::SessionEntry;
use crate::store::SessionStoreExt;

/// Real I/O that fails at one step of the write path, as a crash at that point would
/// stop the writer. A crash while creating the temporary file leaves half of it.
#[derive(Debug)]
struct CrashAt(WriteStep);

impl StoreIo for CrashAt {
    fn read(&self, path: &Path, limit: u64) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
        RealIo.read(path, limit)
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

fn options() -> JsonFileOptions {
    JsonFileOptions {
        durability: Durability::SyncFileAndDir,
        ..JsonFileOptions::default()
    }
}

async fn session_id_on_disk(root: &Path) -> Option<String> {
    // A fresh store: no cache, real I/O.
    JsonFileStore::new_with(root, options())
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
        let healthy = JsonFileStore::new_with(dir.path(), options());
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
        // The replaced session was kept closed before the store file was written;
        // while it is still current, listings of closed sessions leave it out.
        assert_eq!(
            sessions_dir_files(dir.path()),
            ["sessions.closed.json", "sessions.json", "sessions.json.bak"],
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
    let store = JsonFileStore::new_with(dir.path(), options());
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

/// Real I/O that counts renames of the store file (one per write) and reads.
#[derive(Debug, Default)]
struct CountingIo(
    std::sync::atomic::AtomicUsize,
    std::sync::atomic::AtomicUsize,
);

impl StoreIo for CountingIo {
    fn read(&self, path: &Path, limit: u64) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        RealIo.read(path, limit)
    }

    fn stat(&self, path: &Path) -> io::Result<Option<FileStamp>> {
        RealIo.stat(path)
    }

    fn step(&self, step: WriteStep, args: StepArgs<'_>) -> io::Result<Option<FileStamp>> {
        if step == WriteStep::Rename {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        RealIo.step(step, args)
    }
}

fn numbered(n: usize) -> SessionKey {
    SessionKey::parse(&format!("agent:main:dm:user{n}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_writes_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(CountingIo::default());
    let store = JsonFileStore::with_io(dir.path(), options(), io.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..64 {
        let store = store.clone();
        tasks.spawn(async move {
            let own = store
                .put(&numbered(n), SessionEntry::new(format!("s-{n}"), n as u64))
                .await
                .unwrap();
            assert_eq!(
                own.entry.session_id,
                format!("s-{n}"),
                "each writer sees its change"
            );
            store
                .update(&key(), |slot| {
                    let entry = slot.get_or_insert_with(|| SessionEntry::new("shared", 0));
                    entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
                })
                .await
                .unwrap();
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let writes = io.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        writes < 128,
        "128 updates took {writes} writes: none were shared"
    );

    let fresh = JsonFileStore::new_with(dir.path(), options());
    assert_eq!(fresh.count(&ListFilter::new()).await.unwrap(), 65);
    let shared = fresh.get(&key()).await.unwrap().unwrap().entry;
    assert_eq!(shared.compaction_count, Some(64));
    for n in 0..64 {
        let own = fresh.get(&numbered(n)).await.unwrap().unwrap().entry;
        assert_eq!(own.session_id, format!("s-{n}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_batch_fails_every_member_and_acknowledges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    JsonFileStore::new_with(dir.path(), options())
        .put(&key(), SessionEntry::new("old", 1))
        .await
        .unwrap();
    let crashing =
        JsonFileStore::with_io(dir.path(), options(), Arc::new(CrashAt(WriteStep::Rename)));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..16 {
        let store = crashing.clone();
        tasks.spawn(async move { store.put(&numbered(n), SessionEntry::new("lost", 2)).await });
    }
    while let Some(done) = tasks.join_next().await {
        // Every member gets the write's own error, with its kind — a failed rename —
        // shared when several callers' updates were in the write.
        let error = done
            .unwrap()
            .expect_err("no member of a failed write is acknowledged");
        let own = match &error {
            Error::Shared(shared) => &**shared,
            alone => alone,
        };
        assert!(matches!(own, Error::Io { op: "rename", .. }), "{error:?}");
        assert!(!error.is_transient());
    }
    let fresh = JsonFileStore::new_with(dir.path(), options());
    assert_eq!(fresh.count(&ListFilter::new()).await.unwrap(), 1);
    assert_eq!(session_id_on_disk(dir.path()).await.as_deref(), Some("old"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_mutator_in_a_batch_fails_only_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new_with(dir.path(), options());
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..16 {
        let store = store.clone();
        tasks.spawn(async move {
            let result = store
                .apply(&numbered(n), &mut |slot, _| {
                    if n % 2 == 1 {
                        return Err(Error::NotFound { key: numbered(n) });
                    }
                    *slot = Some(SessionEntry::new(format!("s-{n}"), 1));
                    Ok(())
                })
                .await;
            (n, result.is_ok())
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (n, ok) = done.unwrap();
        assert_eq!(ok, n % 2 == 0, "writer {n}");
    }
    let fresh = JsonFileStore::new_with(dir.path(), options());
    assert_eq!(fresh.count(&ListFilter::new()).await.unwrap(), 8);
}

#[tokio::test]
async fn a_file_replaced_by_another_writer_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new_with(dir.path(), options());
    store
        .put(&key(), SessionEntry::new("ours", 1))
        .await
        .unwrap();
    // Another program (OpenClaw) replaces the file by rename, adding a session.
    let file = paths::store_path(dir.path(), &AgentId::main());
    let replacement = file.with_extension("other");
    std::fs::write(
        &replacement,
        r#"{"agent:main:main":{"sessionId":"ours","updatedAt":1},"agent:main:dm:theirs":{"sessionId":"theirs","updatedAt":2}}"#,
    )
    .unwrap();
    std::fs::rename(&replacement, &file).unwrap();
    store
        .update(&key(), |slot| slot.as_mut().unwrap().updated_at = 3)
        .await
        .unwrap();
    let fresh = JsonFileStore::new_with(dir.path(), options());
    assert!(
        fresh.get(&numbered_theirs()).await.unwrap().is_some(),
        "the other writer's session survives"
    );

    // The same for an edit in place that keeps the inode.
    std::fs::write(
        &file,
        r#"{"agent:main:main":{"sessionId":"ours","updatedAt":3},"agent:main:dm:edited":{"sessionId":"e","updatedAt":4}}"#,
    )
    .unwrap();
    store
        .update(&key(), |slot| slot.as_mut().unwrap().updated_at = 5)
        .await
        .unwrap();
    let edited = SessionKey::parse("agent:main:dm:edited").unwrap();
    assert!(fresh.get(&edited).await.unwrap().is_some());
}

fn numbered_theirs() -> SessionKey {
    SessionKey::parse("agent:main:dm:theirs").unwrap()
}

#[tokio::test]
async fn an_unchanged_file_is_not_read_again_under_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let io = Arc::new(CountingIo::default());
    let store = JsonFileStore::with_io(
        dir.path(),
        JsonFileOptions {
            cache_ttl: Duration::ZERO,
            ..options()
        },
        io.clone(),
    );
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    let reads = || io.1.load(std::sync::atomic::Ordering::SeqCst);
    let after_first = reads();
    for n in 2..10 {
        store
            .update(&key(), |slot| slot.as_mut().unwrap().updated_at = n)
            .await
            .unwrap();
    }
    assert_eq!(
        reads(),
        after_first,
        "the file this process wrote is reused"
    );
    // Another writer replaces it: the next update reads it.
    let file = paths::store_path(dir.path(), &AgentId::main());
    let text = std::fs::read_to_string(&file).unwrap();
    let other = file.with_extension("other");
    std::fs::write(&other, text.replace("\"s-1\"", "\"s-2\"")).unwrap();
    std::fs::rename(&other, &file).unwrap();
    let seen = store
        .update(&key(), |slot| slot.as_ref().unwrap().session_id.clone())
        .await
        .unwrap();
    assert_eq!(seen, "s-2");
    assert_eq!(reads(), after_first + 1);
}
