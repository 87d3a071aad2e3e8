//! The store lock: OpenClaw's `sessions.json.lock` protocol plus an OS lock.
//!
//! A writer owns the store while it owns the lock file `<store>.lock`, created with
//! `O_CREAT|O_EXCL` and holding `{"pid":…,"startedAt":…}` exactly as OpenClaw writes it,
//! so this crate and a running OpenClaw exclude each other. This crate additionally
//! holds an exclusive OS lock (`flock`, through std's `File::lock`) on the lock file for
//! as long as it owns it, and marks the file `"lockedBy":"agent-sessions"`:
//!
//! * a lock file marked as ours whose OS lock is free belongs to a process that died,
//!   and is removed at once instead of after the 30 s stale age;
//! * any other lock file is judged by OpenClaw's rule: stale when its mtime is older
//!   than [`LockOptions::stale_after`].
//!
//! Within one process, writers to one store queue on an async mutex first, so only one
//! task per process polls the file.

use std::fs::{self, File, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::DateTime;
use serde_json::Value;

use super::io::create_private;
use crate::error::{Error, LockHolder, Result};

/// How long a writer waits for the store lock (OpenClaw: 10 s).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a waiting writer looks at the lock file again (OpenClaw: 25 ms).
pub const DEFAULT_LOCK_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// When a lock file not held by a live `agent-sessions` process counts as abandoned
/// (OpenClaw: 30 s, judged by the lock file's mtime).
pub const DEFAULT_LOCK_STALE_AFTER: Duration = Duration::from_secs(30);

/// The marker this crate adds to its lock files.
const OWNER_MARKER: &str = "agent-sessions";

/// Lock timing for [`JsonFileStore`](super::JsonFileStore).
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::LockOptions;
///
/// let patient = LockOptions { timeout: Duration::from_secs(30), ..LockOptions::default() };
/// assert_eq!(patient.poll_interval, Duration::from_millis(25));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// How long to wait before [`Error::LockTimeout`]; counted from the call, including
    /// the wait behind other tasks of this process. Zero tries once.
    pub timeout: Duration,
    /// How often to look at a busy lock file again.
    pub poll_interval: Duration,
    /// When a lock file not held by a live `agent-sessions` process is removed.
    pub stale_after: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            timeout: DEFAULT_LOCK_TIMEOUT,
            poll_interval: DEFAULT_LOCK_POLL_INTERVAL,
            stale_after: DEFAULT_LOCK_STALE_AFTER,
        }
    }
}

/// An owned lock file. Dropping it removes the file and releases the OS lock.
#[derive(Debug)]
pub(crate) struct FileLock {
    path: PathBuf,
    file: File,
}

/// The outcome of one attempt to take the lock.
#[derive(Debug)]
pub(crate) enum Attempt {
    Acquired(FileLock),
    Busy(Option<LockHolder>),
}

impl FileLock {
    /// One non-blocking attempt to take the lock at `path`, removing it first if it is
    /// abandoned.
    ///
    /// The lock file is published complete: it is written (holder, OS lock) under a
    /// temporary name and then hard-linked to `path`, which fails if `path` exists —
    /// OpenClaw's `O_EXCL` rule. A writer killed at any point therefore leaves either
    /// no lock file or one that names it and whose OS lock died with it, which the next
    /// writer removes at once. File systems without hard links get OpenClaw's plain
    /// `O_EXCL` create.
    pub(crate) fn try_acquire(path: &Path, stale_after: Duration) -> Result<Attempt> {
        // A few rounds absorb races with a holder that is releasing or being evicted.
        for _ in 0..4 {
            match publish(path) {
                Ok(Some(lock)) => return Ok(Attempt::Acquired(lock)),
                Ok(None) => match inspect(path, stale_after)? {
                    Existing::Held(holder) => return Ok(Attempt::Busy(holder)),
                    Existing::Gone => continue,
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let dir = path.parent().unwrap_or(Path::new("."));
                    crate::fsutil::create_private_dir_all(dir)
                        .map_err(|e| Error::io("create directory", dir, e))?;
                }
                Err(e) => return Err(Error::io("create lock file", path, e)),
            }
        }
        Ok(Attempt::Busy(None))
    }
}

/// Creates the lock file at `path` complete, or returns `None` if one exists.
///
/// The lock is never published without its holder record: if the record cannot be
/// written (a full disk), the attempt fails and nothing is left at `path`.
fn publish(path: &Path) -> io::Result<Option<FileLock>> {
    let temp = super::io::temp_sibling(path);
    let mut file = create_private(&temp)?;
    // Nobody else can hold the OS lock of a file we just created exclusively; a file
    // system without flock support still gets OpenClaw's O_EXCL protocol.
    if let Err(TryLockError::Error(e)) = file.try_lock() {
        tracing::debug!(path = %path.display(), error = %e, "no OS lock on this file system");
    }
    let content = holder_record();
    let linked = file
        .write_all(content.as_bytes())
        .and_then(|()| fs::hard_link(&temp, path));
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(Some(FileLock {
            path: path.to_owned(),
            file,
        })),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) if no_hard_links(&e) => publish_without_links(path, &content),
        Err(e) => Err(e),
    }
}

/// Whether a failed `link` says the file system has no hard links (as opposed to a
/// full disk, a link limit or an I/O error, which fail the attempt).
fn no_hard_links(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(
            error.raw_os_error(),
            Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS)
        )
    }
    #[cfg(not(unix))]
    {
        error.kind() == io::ErrorKind::Unsupported
    }
}

/// OpenClaw's plain `O_EXCL` create, for file systems without hard links: the holder is
/// written right after; if that fails the file is removed again and the attempt fails.
fn publish_without_links(path: &Path, content: &str) -> io::Result<Option<FileLock>> {
    let mut file = match create_private(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(e),
    };
    let _ = file.try_lock();
    if let Err(e) = file.write_all(content.as_bytes()) {
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(Some(FileLock {
        path: path.to_owned(),
        file,
    }))
}

/// The holder record: OpenClaw's fields and this crate's marker.
fn holder_record() -> String {
    serde_json::json!({
        "pid": std::process::id(),
        "startedAt": epoch_ms(SystemTime::now()),
        "lockedBy": OWNER_MARKER,
    })
    .to_string()
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Remove the file before closing it (which releases the OS lock), and only if the
        // path is still our file: a foreign process may have evicted us as stale.
        if is_same_file(&self.file, &self.path) {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove lock file");
            }
        }
    }
}

enum Existing {
    Held(Option<LockHolder>),
    Gone,
}

/// Blocks until the process holding the lock file at `path` releases its OS lock (it
/// removes the file, then closes it), so a waiter of this crate wakes at the release
/// instead of at its next poll. Returns at once if there is no file or no OS lock.
pub(crate) fn wait_for_release(path: &Path) {
    if let Ok(file) = crate::fsutil::open_no_follow(path) {
        // Taking the OS lock waits for the holder; it is dropped at once.
        let _ = file.lock();
    }
}

/// Whether the lock file at `path` is abandoned (see [`abandoned`]).
pub(crate) fn is_abandoned(path: &Path, stale_after: Duration) -> bool {
    let Ok(mut file) = crate::fsutil::open_no_follow(path) else {
        return false;
    };
    let mut content = String::new();
    let _ = (&mut file).take(4096).read_to_string(&mut content);
    match file.try_lock() {
        Err(TryLockError::WouldBlock) => false,
        _ => abandoned(&file, &content, stale_after),
    }
}

/// How long an empty lock file may stand before it counts as abandoned: OpenClaw
/// writes its holder record right after it creates the file.
const EMPTY_LOCK_GRACE: Duration = Duration::from_secs(1);

/// Whether a lock file whose OS lock is free (`file`, holding `content`) is abandoned:
///
/// * marked as this crate's: its holder died (it holds the OS lock while alive);
/// * empty for longer than [`EMPTY_LOCK_GRACE`]: its writer died before writing the
///   holder record (this crate never publishes one without it; OpenClaw writes it
///   right after creating the file);
/// * anything older than `stale_after` (OpenClaw's rule). A foreign holder's pid is
///   not checked: a process missing from this machine's process table may live in
///   another PID namespace (a container sharing the directory).
fn abandoned(file: &File, content: &str, stale_after: Duration) -> bool {
    let age = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|mtime| SystemTime::now().duration_since(mtime).ok())
        .unwrap_or_default();
    let ours = parse_holder(content).is_some_and(|h| h.agent_sessions);
    let empty = content.trim().is_empty() && age > EMPTY_LOCK_GRACE;
    ours || empty || age > stale_after
}

/// Looks at an existing lock file: still held, or gone (vanished, or evicted now).
fn inspect(path: &Path, stale_after: Duration) -> Result<Existing> {
    let mut file = match crate::fsutil::open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Gone),
        Err(e) => return Err(Error::io("open lock file", path, e)),
    };
    let mut content = String::new();
    // The holder is informational; an unreadable file is still a lock.
    let _ = (&mut file).take(4096).read_to_string(&mut content);
    let holder = parse_holder(&content);
    let os_lock_free = match file.try_lock() {
        Ok(()) => true,
        Err(TryLockError::WouldBlock) => false,
        // No flock here: fall back to the mtime rule below.
        Err(TryLockError::Error(_)) => true,
    };
    if !os_lock_free {
        return Ok(Existing::Held(holder));
    }
    if !abandoned(&file, &content, stale_after) {
        return Ok(Existing::Held(holder));
    }
    let ours = holder.as_ref().is_some_and(|h| h.agent_sessions);
    // We hold the OS lock of the abandoned file, so no other process of ours is evicting
    // it at the same time; check the path still names it before removing.
    if !is_same_file(&file, path) {
        return Ok(Existing::Gone);
    }
    match fs::remove_file(path) {
        Ok(()) => {
            if ours {
                tracing::info!(path = %path.display(), holder = ?holder, "removed the lock of a dead agent-sessions process");
            } else {
                tracing::warn!(path = %path.display(), holder = ?holder, "removed an abandoned lock file");
            }
            Ok(Existing::Gone)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Existing::Gone),
        Err(e) => Err(Error::io("remove stale lock file", path, e)),
    }
}

fn parse_holder(content: &str) -> Option<LockHolder> {
    let value: Value = serde_json::from_str(content).ok()?;
    Some(LockHolder {
        pid: value
            .get("pid")
            .and_then(Value::as_u64)
            .and_then(|pid| u32::try_from(pid).ok()),
        started_at: value
            .get("startedAt")
            .and_then(Value::as_i64)
            .and_then(DateTime::from_timestamp_millis),
        agent_sessions: value.get("lockedBy").and_then(Value::as_str) == Some(OWNER_MARKER),
    })
}

/// Reads the holder of the lock at `path`, if it exists and names one.
pub(crate) fn read_holder(path: &Path) -> Option<LockHolder> {
    let mut content = String::new();
    crate::fsutil::open_no_follow(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut content)
        .ok()?;
    parse_holder(&content)
}

fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(unix)]
fn is_same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(attempt: Attempt) -> FileLock {
        match attempt {
            Attempt::Acquired(lock) => lock,
            Attempt::Busy(holder) => panic!("busy: {holder:?}"),
        }
    }

    #[test]
    fn lock_file_is_exclusive_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json.lock");
        let lock = acquired(FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap());
        let holder = read_holder(&path).unwrap();
        assert_eq!(holder.pid, Some(std::process::id()));
        assert!(holder.agent_sessions);
        match FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap() {
            Attempt::Busy(Some(h)) => assert_eq!(h.pid, Some(std::process::id())),
            other => panic!("expected busy, got {other:?}"),
        }
        drop(lock);
        assert!(!path.exists());
        acquired(FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap());
    }

    #[test]
    fn dead_agent_sessions_holder_is_evicted_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json.lock");
        // What a killed process of ours leaves: our marker, no OS lock held.
        fs::write(
            &path,
            r#"{"pid":999999,"startedAt":1770350000000,"lockedBy":"agent-sessions"}"#,
        )
        .unwrap();
        acquired(FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap());
    }

    #[test]
    fn fresh_foreign_lock_is_respected_and_stale_one_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json.lock");
        fs::write(&path, r#"{"pid":4242,"startedAt":1770350000000}"#).unwrap();
        match FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap() {
            Attempt::Busy(Some(holder)) => {
                assert_eq!(holder.pid, Some(4242));
                assert!(!holder.agent_sessions);
                assert_eq!(holder.started_at.unwrap().timestamp_millis(), 1770350000000);
            }
            other => panic!("expected busy, got {other:?}"),
        }
        // Zero stale age: the same lock is now abandoned by OpenClaw's mtime rule.
        std::thread::sleep(Duration::from_millis(5));
        acquired(FileLock::try_acquire(&path, Duration::from_millis(1)).unwrap());
    }

    #[test]
    fn an_empty_lock_left_by_a_writer_that_died_is_evicted_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json.lock");
        // What a writer killed between creating the file and writing its holder leaves.
        fs::write(&path, "").unwrap();
        // Fresh, it may be OpenClaw about to write its holder: respected.
        assert!(matches!(
            FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap(),
            Attempt::Busy(None)
        ));
        let file = fs::OpenOptions::new().append(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(2))
            .unwrap();
        acquired(FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap());
    }

    #[test]
    fn live_holder_in_this_process_blocks_even_when_marked_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json.lock");
        let _held = acquired(FileLock::try_acquire(&path, DEFAULT_LOCK_STALE_AFTER).unwrap());
        // The OS lock is held (by another open file description), so it is not evicted.
        assert!(matches!(
            FileLock::try_acquire(&path, Duration::ZERO).unwrap(),
            Attempt::Busy(_)
        ));
        assert!(path.exists());
    }
}
