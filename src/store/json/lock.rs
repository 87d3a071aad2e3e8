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
//! Waiting differs by holder. A holder of this crate is waited for on its OS lock, which
//! wakes the waiter the moment it is released. Any other holder (OpenClaw) takes no OS
//! lock and, when busy, takes the lock again right after releasing it, so a waiter that
//! looked every 25 ms as OpenClaw's do would rarely find it free: the waiter instead
//! tries every 2 ms or so, at jittered times, with its lock file staged so that each try
//! is one `link` ([`wait_foreign`]).
//!
//! Within one process, writers to one store queue on an async mutex first, so only one
//! task per process waits on the file.

use std::fs::{self, File, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::DateTime;
use serde_json::Value;

use super::io::create_private;
use crate::error::{Error, LockHolder, Result};

/// How long a writer waits for the store lock (OpenClaw: 10 s).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// OpenClaw's lock poll interval, 25 ms: how often its waiters look at the lock file
/// (see [`LockOptions::poll_interval`]).
pub(crate) const DEFAULT_LOCK_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// When a lock file not held by a live `agent-sessions` process counts as abandoned
/// (OpenClaw: 30 s, judged by the lock file's mtime).
pub(crate) const DEFAULT_LOCK_STALE_AFTER: Duration = Duration::from_secs(30);

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
    /// How often OpenClaw's waiters look at the lock (25 ms). A writer waiting behind
    /// another program's lock inspects it this often (evicting it once stale) while
    /// trying to take it every 2 ms or so; a writer that leaves the lock free for
    /// OpenClaw's waiters (now and then, while OpenClaw writes the same store) leaves it
    /// free a fifth longer than this. A lock held by another process of this crate is
    /// not polled: the waiter wakes when it is released.
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
    /// Always `Some` until [`release_keeping_os_lock`](Self::release_keeping_os_lock).
    file: Option<File>,
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
                    crate::store::fs::create_private_dir_all(dir)
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
    let staged = Staged::new(path)?;
    match staged.link(path) {
        Ok(true) => Ok(Some(staged.into_lock(path))),
        Ok(false) => Ok(None),
        Err(e) if no_hard_links(&e) => {
            let content = staged.content.clone();
            drop(staged);
            publish_without_links(path, &content)
        }
        Err(e) => Err(e),
    }
}

/// A lock file written in full under a temporary name next to `<store>.lock`: taking
/// the lock is then one `link`, as cheap as OpenClaw's `open(O_EXCL)`. Dropping it
/// removes the temporary name.
#[derive(Debug)]
struct Staged {
    temp: PathBuf,
    file: Option<File>,
    content: String,
    at: Instant,
}

impl Staged {
    fn new(path: &Path) -> io::Result<Staged> {
        let temp = super::io::temp_sibling(path);
        let file = create_private(&temp)?;
        // Nobody else can hold the OS lock of a file we just created exclusively; a file
        // system without flock support still gets OpenClaw's O_EXCL protocol.
        if let Err(TryLockError::Error(e)) = file.try_lock() {
            tracing::debug!(path = %path.display(), error = %e, "no OS lock on this file system");
        }
        let staged = Staged {
            temp,
            file: Some(file),
            content: holder_record(),
            at: Instant::now(),
        };
        // If this fails, dropping `staged` removes the temporary name.
        let mut file: &File = staged.file.as_ref().expect("created above");
        file.write_all(staged.content.as_bytes())?;
        Ok(staged)
    }

    /// Publishes the staged file as `path`: `true` if this took the lock, `false` if a
    /// lock file exists.
    fn link(&self, path: &Path) -> io::Result<bool> {
        match fs::hard_link(&self.temp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`link`](Self::link), tried again and again for up to `within` while the lock
    /// file is there.
    fn link_within(&self, path: &Path, within: Duration) -> io::Result<bool> {
        let started = Instant::now();
        loop {
            if self.link(path)? {
                return Ok(true);
            }
            if started.elapsed() >= within {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// The lock, once [`link`](Self::link) took it.
    fn into_lock(mut self, path: &Path) -> FileLock {
        FileLock {
            path: path.to_owned(),
            file: self.file.take(),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.temp);
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
        file: Some(file),
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

impl FileLock {
    /// Releases the lock but keeps the OS lock on the removed file until the returned
    /// file is dropped: the lock is free for everyone, while this crate's writers that
    /// are already waiting on the OS lock stay back.
    pub(crate) fn release_keeping_os_lock(mut self) -> Option<File> {
        self.remove();
        self.file.take()
    }

    /// Removes the lock file, if the path still names it: a foreign process may have
    /// evicted this one as stale.
    fn remove(&self) {
        let Some(file) = &self.file else {
            return;
        };
        if is_same_file(file, &self.path) {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove lock file");
            }
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Remove the file before closing it, which releases the OS lock.
        self.remove();
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
    if let Ok(file) = crate::store::fs::open_no_follow(path) {
        // Taking the OS lock waits for the holder; it is dropped at once.
        let _ = file.lock();
    }
}

/// How often, on average, a waiter tries to take a lock held by another program: each
/// pause is drawn at random between half and one and a half times this.
pub(crate) const FOREIGN_POLL: Duration = Duration::from_millis(2);

/// How long each try at a lock held by another program keeps trying before it sleeps.
///
/// On a busy machine a waiter whose sleep ends gets a processor only at the scheduler's
/// next tick, and so does a holder waking to release the lock: both start at once, the
/// waiter's single try comes a few microseconds before the release, and a holder that
/// re-takes the lock at once is back before the waiter runs again. Trying for a little
/// longer than a release takes catches it; the cost is this much processor time per
/// [`FOREIGN_POLL`], only while another program holds the lock.
pub(crate) const FOREIGN_SPIN: Duration = Duration::from_micros(300);

/// A staged lock file older than this is written again, so the lock is published with
/// a current `startedAt` and mtime.
const STAGED_FRESH: Duration = Duration::from_secs(1);

/// Waits until `until` for a lock file held by another program (OpenClaw), taking it
/// as soon as it is free.
///
/// Such a holder takes no OS lock, so nothing wakes the waiter when it lets go, and a
/// busy OpenClaw re-takes the lock right after releasing it: a waiter that looks only
/// every 25 ms, as OpenClaw's own waiters do, rarely finds it free. This one keeps a
/// lock file staged under a temporary name and tries to link it into place every
/// [`FOREIGN_POLL`] or so (one `link`, no file created), at jittered times so it does
/// not fall into step with the holder. Every `poll_interval` the lock file is
/// inspected as [`FileLock::try_acquire`] does (and evicted if abandoned); when a new
/// lock file appears it is inspected at once, and a holder of this crate ends the wait
/// ([`Attempt::Busy`]) so the caller can block on its OS lock instead. A wait that
/// ends busy names the holder last inspected (at first, `holder`).
pub(crate) fn wait_foreign(
    path: &Path,
    stale_after: Duration,
    poll_interval: Duration,
    until: Instant,
    mut holder: Option<LockHolder>,
) -> Result<Attempt> {
    let mut jitter = Jitter::new();
    let mut staged: Option<Staged> = None;
    // File systems without hard links (or a vanished directory) get plain attempts.
    let mut plain = false;
    let mut inspected_at = Instant::now();
    let mut seen = file_id(path);
    loop {
        let now = Instant::now();
        if now >= until {
            return Ok(Attempt::Busy(holder));
        }
        // Plain attempts create a file each: those go at OpenClaw's pace.
        let pause = jitter.around(if plain { poll_interval } else { FOREIGN_POLL });
        std::thread::sleep(pause.min(until - now));
        if plain {
            match FileLock::try_acquire(path, stale_after)? {
                Attempt::Busy(h) if !h.as_ref().is_some_and(|h| h.agent_sessions) => {
                    holder = h;
                    continue;
                }
                other => return Ok(other),
            }
        }
        let fresh = match staged.take() {
            Some(staged) if staged.at.elapsed() <= STAGED_FRESH => staged,
            // An old one's temporary name goes first.
            old => {
                drop(old);
                Staged::new(path).map_err(|e| Error::io("create lock file", path, e))?
            }
        };
        match fresh.link_within(path, FOREIGN_SPIN) {
            Ok(true) => return Ok(Attempt::Acquired(fresh.into_lock(path))),
            Ok(false) => staged = Some(fresh),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot link a staged lock file; trying plain attempts");
                plain = true;
                continue;
            }
        }
        let current = file_id(path);
        if current != seen || inspected_at.elapsed() >= poll_interval {
            seen = current;
            inspected_at = Instant::now();
            match inspect(path, stale_after)? {
                Existing::Held(h) if h.as_ref().is_some_and(|h| h.agent_sessions) => {
                    return Ok(Attempt::Busy(h));
                }
                Existing::Held(h) => holder = h,
                Existing::Gone => {}
            }
        }
    }
}

/// What identifies the file at `path` (`None`: no file), to notice a new lock file.
#[cfg(unix)]
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(path: &Path) -> Option<(u64, u64)> {
    let modified = fs::symlink_metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
    Some((since.as_secs(), u64::from(since.subsec_nanos())))
}

/// Random pause lengths (xorshift64*, seeded from the OS's random source).
struct Jitter(u64);

impl Jitter {
    fn new() -> Self {
        Jitter(uuid::Uuid::new_v4().as_u64_pair().0 | 1)
    }

    /// A duration drawn uniformly between half and one and a half times `mean`.
    fn around(&mut self, mean: Duration) -> Duration {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let unit = (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64;
        mean.mul_f64(0.5 + unit)
    }
}

/// Whether the lock file at `path` is abandoned (see [`abandoned`]).
pub(crate) fn is_abandoned(path: &Path, stale_after: Duration) -> bool {
    let Ok(mut file) = crate::store::fs::open_no_follow(path) else {
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
    let mut file = match crate::store::fs::open_no_follow(path) {
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
    crate::store::fs::open_no_follow(path)
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

    /// What the foreign holder in a [`wait_foreign`] case does.
    #[derive(Debug, Clone, Copy)]
    enum Holder {
        /// OpenClaw's lock, removed after this many milliseconds.
        Frees(u64),
        /// OpenClaw's lock, kept.
        Keeps,
        /// OpenClaw's lock with an mtime an hour old (its writer died).
        Abandoned,
        /// OpenClaw's lock, replaced after this many milliseconds by a live lock of this
        /// crate.
        HandsOver(u64),
    }

    /// How a [`wait_foreign`] case ends.
    #[derive(Debug, PartialEq)]
    enum Ended {
        Taken,
        BusyForeign,
        BusyOurs,
    }

    #[test]
    fn waiting_for_a_foreign_holder_takes_the_lock_as_soon_as_it_is_free() {
        // (the holder, how long the waiter may wait, how it ends, within how long; in ms)
        let cases = [
            (Holder::Frees(50), 2_000, Ended::Taken, 50..1_000),
            // Past a second the staged lock file is written again: still taken.
            (Holder::Frees(1_300), 3_000, Ended::Taken, 1_300..2_300),
            (Holder::Keeps, 200, Ended::BusyForeign, 200..1_000),
            // Too short to inspect the lock again: the holder it started with is named.
            (Holder::Keeps, 10, Ended::BusyForeign, 10..500),
            (Holder::Abandoned, 2_000, Ended::Taken, 0..1_000),
            (Holder::HandsOver(50), 2_000, Ended::BusyOurs, 50..1_000),
        ];
        for (holder, patience, expected, within) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("sessions.json.lock");
            fs::write(&path, r#"{"pid":4242,"startedAt":1770350000000}"#).unwrap();
            if let Holder::Abandoned = holder {
                let file = fs::OpenOptions::new().append(true).open(&path).unwrap();
                file.set_modified(SystemTime::now() - Duration::from_secs(3600))
                    .unwrap();
            }
            let holder_path = path.clone();
            let holder_thread = std::thread::spawn(move || match holder {
                Holder::Frees(after) => {
                    std::thread::sleep(Duration::from_millis(after));
                    fs::remove_file(&holder_path).unwrap();
                    None
                }
                Holder::HandsOver(after) => {
                    std::thread::sleep(Duration::from_millis(after));
                    // Our lock replaces OpenClaw's in one step, never leaving it free.
                    let beside = holder_path.with_extension("lock.next");
                    let ours = FileLock::try_acquire(&beside, DEFAULT_LOCK_STALE_AFTER);
                    let ours = acquired(ours.unwrap());
                    fs::rename(&beside, &holder_path).unwrap();
                    Some(ours)
                }
                Holder::Keeps | Holder::Abandoned => None,
            });
            let started = Instant::now();
            let attempt = wait_foreign(
                &path,
                DEFAULT_LOCK_STALE_AFTER,
                DEFAULT_LOCK_POLL_INTERVAL,
                started + Duration::from_millis(patience),
                parse_holder(r#"{"pid":4242,"startedAt":1770350000000}"#),
            )
            .unwrap();
            let took = started.elapsed();
            let ended = match &attempt {
                Attempt::Acquired(_) => Ended::Taken,
                Attempt::Busy(Some(h)) if h.agent_sessions => Ended::BusyOurs,
                Attempt::Busy(Some(h)) if h.pid == Some(4242) => Ended::BusyForeign,
                Attempt::Busy(other) => panic!("{holder:?}: busy with {other:?}"),
            };
            assert_eq!(ended, expected, "{holder:?}");
            let took_ms = took.as_millis() as u64;
            assert!(within.contains(&took_ms), "{holder:?}: took {took:?}");
            if let Attempt::Acquired(_) = attempt {
                // The lock names this process, taken just now.
                let record = read_holder(&path).unwrap();
                assert_eq!(record.pid, Some(std::process::id()), "{holder:?}");
                assert!(record.agent_sessions);
                let age = chrono::Utc::now() - record.started_at.unwrap();
                assert!(
                    age < chrono::TimeDelta::milliseconds(1_100),
                    "{holder:?}: {age}"
                );
            }
            drop(attempt);
            drop(holder_thread.join().unwrap());
            // No staged file is left behind.
            let left: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .filter(|name| name.to_string_lossy().ends_with(".tmp"))
                .collect();
            assert!(left.is_empty(), "{holder:?}: left {left:?}");
        }
    }
}
