//! The OpenClaw-compatible JSON file store.

mod chatter;
mod closed;
mod commit;
mod copies;
mod courtesy;
pub(crate) mod document;
mod hints;
pub(crate) mod io;
mod keyed_files;
mod legacy;
pub(crate) mod lock;
pub(crate) mod paths;
mod system_events;
mod template;
pub(crate) mod transcripts;

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{watch, OwnedMutexGuard};

use self::commit::{file_queue, Batch, FileQueue, QueueState, MAX_BATCH};
use self::document::{parse_entry, Document};
use self::io::{backup_path, lock_path, write_atomically, FileStamp, RealIo, StoreIo};
use self::lock::{read_holder, Attempt, FileLock};
use self::template::AGENT_PLACEHOLDER;
use super::{
    distinct_keys, entry_revision, replaced_session, run_many_mutator, run_mutator, ListFilter,
    ManyMutator, Mutator, Revision, SessionStore, Slots, StoredSession,
};
use crate::error::{Error, LockHolder, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionEntry;
use crate::store::fs::blocking;

pub use self::chatter::JsonFileChatter;
pub(crate) use self::chatter::CHATTER_DIR;
pub use self::io::Durability;
pub(crate) use self::lock::DEFAULT_LOCK_STALE_AFTER;
pub use self::lock::{LockOptions, DEFAULT_LOCK_TIMEOUT};
pub use self::system_events::JsonFileSystemEvents;
pub(crate) use self::system_events::EVENTS_DIR;
pub use self::transcripts::FileTranscriptStore;

/// What a writer whose change joined an open batch waits on: the batch's write, done
/// (`Some`) or not yet (`None`).
type BatchOutcome = watch::Receiver<Option<Result<(), Arc<Error>>>>;

/// The longest single trip to the blocking pool while waiting for a lock held by
/// another program.
const FOREIGN_WAIT_SLICE: Duration = Duration::from_secs(1);

/// How long a read may reuse a parsed store without re-reading it (OpenClaw: 45 s).
pub(crate) const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(45);

/// Settings of a [`JsonFileStore`].
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::{Durability, JsonFileOptions};
///
/// let fast_and_loose = JsonFileOptions {
///     durability: Durability::Unsynced,
///     cache_ttl: Duration::ZERO, // no read cache
///     ..JsonFileOptions::default()
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonFileOptions {
    /// Lock timing.
    pub lock: LockOptions,
    /// How long reads reuse a parsed file whose size, mtime and inode are unchanged.
    /// Zero disables the cache. Writes always re-read inside the lock.
    pub cache_ttl: Duration,
    /// fsync policy of writes.
    pub durability: Durability,
    /// The agent whose file holds the `global` session.
    pub global_agent: AgentId,
    /// The largest `sessions.json` (and `.bak`) read whole; a larger file is
    /// [`Error::FileTooLarge`], left untouched.
    pub max_file_bytes: u64,
    /// Where each agent's store file is, as OpenClaw's `session.store` names it: a path
    /// in which `{agentId}` stands for the agent id, a leading `~` for the home
    /// directory, and a relative path is taken from the current directory. Without
    /// `{agentId}` every agent shares one file. `None` (the default):
    /// `<root>/agents/<agentId>/sessions/sessions.json`. Transcripts stay under the
    /// root either way, as in OpenClaw.
    ///
    /// ```
    /// use agent_sessions::{AgentId, JsonFileOptions, JsonFileStore};
    ///
    /// let options = JsonFileOptions {
    ///     store_path: Some("/srv/bot/{agentId}/sessions.json".into()),
    ///     ..JsonFileOptions::default()
    /// };
    /// let store = JsonFileStore::new_with("/srv/bot/state", options);
    /// let ops = AgentId::new("ops")?;
    /// assert_eq!(store.store_path(&ops), std::path::Path::new("/srv/bot/ops/sessions.json"));
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub store_path: Option<String>,
}

/// The largest store file read by default: 512 MiB, some 350,000 sessions of a
/// typical size (a 100,000-session store is about 145 MB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 512 * 1024 * 1024;

impl Default for JsonFileOptions {
    fn default() -> Self {
        JsonFileOptions {
            lock: LockOptions::default(),
            cache_ttl: DEFAULT_CACHE_TTL,
            durability: Durability::default(),
            global_agent: AgentId::main(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            store_path: None,
        }
    }
}

/// A [`SessionStore`] in OpenClaw's files: one `sessions.json` per agent under
/// `<root>/agents/<agentId>/sessions/`.
///
/// Point it at an OpenClaw state directory (`~/.openclaw`) and it reads and writes the
/// same files OpenClaw does, taking the same lock, so the two can run side by side.
///
/// * **Writes** take `sessions.json.lock`, re-read the file, apply the change to the one
///   entry, and replace the file atomically (temp file, fsync, rename, directory fsync
///   per [`Durability`]), keeping the previous version as `sessions.json.bak`. Untouched
///   entries are written back byte for byte; nothing is written when nothing changed.
/// * **Reads** need no lock: they see the previous or the next version, never a torn
///   file. A parsed file is cached for [`JsonFileOptions::cache_ttl`] while its size,
///   mtime and inode stay the same.
/// * **Corrupt files** are reported as [`Error::Corrupt`] and left untouched, never
///   replaced by an empty store.
///
/// File work runs on Tokio's blocking pool and lock waits use Tokio's timer, so call
/// the store from a Tokio runtime with the time driver enabled (`#[tokio::main]` and
/// `#[tokio::test]` enable it).
///
/// ```
/// use agent_sessions::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = JsonFileStore::new(dir.path());
/// let key = SessionKey::parse("agent:main:telegram:dm:123")?;
/// store.put(&key, SessionEntry::new_session(1_770_000_000_000)).await?;
/// assert!(dir.path().join("agents/main/sessions/sessions.json").exists());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JsonFileStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    /// [`JsonFileOptions::store_path`], `~` expanded and made absolute.
    store_template: Option<String>,
    options: JsonFileOptions,
    cache: Mutex<HashMap<PathBuf, Cached>>,
    io: Arc<dyn StoreIo>,
    /// The write queues of the files this store has written, kept alive (with the
    /// document last written) between writes.
    queues: Mutex<HashMap<PathBuf, Arc<FileQueue>>>,
}

#[derive(Debug)]
struct Cached {
    document: Arc<Document>,
    stamp: FileStamp,
    loaded_at: Instant,
}

impl JsonFileStore {
    /// A store rooted at `root` (an OpenClaw state directory; a leading `~` is expanded),
    /// with default options. Nothing is read or created until the first call.
    pub fn new(root: impl AsRef<Path>) -> Self {
        JsonFileStore::new_with(root, JsonFileOptions::default())
    }

    /// A store rooted at `root` with `options`.
    pub fn new_with(root: impl AsRef<Path>, options: JsonFileOptions) -> Self {
        JsonFileStore::with_io(root, options, Arc::new(RealIo))
    }

    fn with_io(root: impl AsRef<Path>, options: JsonFileOptions, io: Arc<dyn StoreIo>) -> Self {
        JsonFileStore {
            inner: Arc::new(Inner {
                root: paths::state_root(root.as_ref()),
                store_template: options
                    .store_path
                    .as_deref()
                    .map(str::trim)
                    .filter(|template| !template.is_empty())
                    .map(|template| {
                        paths::state_root(Path::new(template))
                            .to_string_lossy()
                            .into_owned()
                    }),
                options,
                cache: Mutex::default(),
                queues: Mutex::default(),
                io,
            }),
        }
    }

    /// The state directory this store lives in.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &JsonFileOptions {
        &self.inner.options
    }

    /// The `sessions.json` of `agent` (see [`JsonFileOptions::store_path`]).
    pub fn store_path(&self, agent: &AgentId) -> PathBuf {
        self.inner.store_path(agent)
    }

    /// The `sessions.json` that holds `key`: its agent's, or for `global`
    /// [`JsonFileOptions::global_agent`]'s.
    pub fn store_path_for(&self, key: &SessionKey) -> PathBuf {
        self.store_path(&self.inner.agent_of(key))
    }

    /// The session under `key` in `document`, the parsed file `path` (a legacy
    /// spelling of `key` included).
    fn session_in(
        &self,
        document: &Document,
        key: &SessionKey,
        path: &Path,
    ) -> Result<Option<StoredSession>> {
        let adoption = legacy::adoption(document, key, self.main_elsewhere(key, path));
        let source = adoption
            .as_ref()
            .map_or(key.as_str(), |a| a.source.as_str());
        document
            .get(source)
            .map(|raw| {
                let entry = parse_entry(raw).map_err(|source| Error::InvalidEntry {
                    key: key.to_string(),
                    path: path.to_owned(),
                    source,
                })?;
                Ok(StoredSession {
                    key: key.clone(),
                    entry,
                    revision: Revision::of_bytes(raw.as_bytes()),
                })
            })
            .transpose()
    }

    /// Whether agent `main`'s sessions live in a file other than `path`, the file of
    /// `key` (so `agent:main:<rest>` in it is a legacy spelling of `key`).
    fn main_elsewhere(&self, key: &SessionKey, path: &Path) -> bool {
        key.agent_id() != Some("main") && self.store_path(&AgentId::main()) != path
    }

    /// The agents that have a `sessions.json` under this root (or, with a
    /// [`store_path`](JsonFileOptions::store_path), where it points), sorted.
    pub async fn agents(&self) -> Result<Vec<AgentId>> {
        let inner = self.inner.clone();
        blocking(&self.inner.root, move || inner.agents()).await
    }

    async fn load(&self, path: &Path) -> Result<Arc<Document>> {
        let inner = self.inner.clone();
        let owned = path.to_owned();
        blocking(path, move || inner.load(&owned)).await
    }

    /// Takes the lock file within what is left of the lock timeout and opens a batch on
    /// the store's document in `state` (this process's queue, which the caller holds).
    ///
    /// A lock held by another process of this crate is waited for on its OS lock, so the
    /// waiter wakes as soon as it is released; a lock held by anyone else (OpenClaw) is
    /// watched closely ([`lock::wait_foreign`]), so that a holder that re-takes it at
    /// once cannot keep this process out.
    async fn lock_file(
        &self,
        store_path: &Path,
        started: Instant,
        state: &mut QueueState,
    ) -> Result<()> {
        let options = self.inner.options.lock;
        let lock_path = lock_path(store_path);
        let mut last_written = state.last_written.take();
        let mut logged_wait = false;
        let mut foreign = false;
        let mut holder: Option<LockHolder> = None;
        loop {
            let (attempt_path, store_file) = (lock_path.clone(), store_path.to_owned());
            let inner = self.inner.clone();
            let known = holder.take();
            // A foreign wait runs in slices, so a cancelled call frees its thread soon.
            let left = options.timeout.saturating_sub(started.elapsed());
            let until = Instant::now() + left.min(FOREIGN_WAIT_SLICE);
            // One trip to the blocking pool takes the lock and reads the store.
            let attempt = blocking(&lock_path, move || {
                crate::store::fs::refuse_linked_dirs(&inner.root, &attempt_path)
                    .map_err(|e| Error::io("lock", &attempt_path, e))?;
                let attempt = if foreign {
                    lock::wait_foreign(
                        &attempt_path,
                        options.stale_after,
                        options.poll_interval,
                        until,
                        known,
                    )?
                } else {
                    FileLock::try_acquire(&attempt_path, options.stale_after)?
                };
                match attempt {
                    Attempt::Acquired(file) => {
                        let (document, stamp) = inner.locked_document(&store_file, last_written)?;
                        Ok(Ok((file, document, stamp)))
                    }
                    Attempt::Busy(holder) => Ok(Err((holder, last_written))),
                }
            })
            .await?;
            holder = match attempt {
                Ok((lock, document, read_stamp)) => {
                    let waited = started.elapsed();
                    crate::ops::telemetry::lock_taken("json", waited);
                    if waited >= Duration::from_millis(100) {
                        tracing::info!(path = %lock_path.display(), waited_ms = waited.as_millis() as u64, "session store lock acquired after waiting");
                    } else {
                        tracing::trace!(path = %lock_path.display(), waited_us = waited.as_micros() as u64, "session store lock acquired");
                    }
                    if foreign {
                        // Another program had the lock until now.
                        state.foreign.saw_foreign(Instant::now());
                    }
                    state.open = Some(Batch::new(lock, document, read_stamp));
                    return Ok(());
                }
                Err((holder, kept)) => {
                    last_written = kept;
                    holder
                }
            };
            foreign = !holder.as_ref().is_some_and(|h| h.agent_sessions);
            if foreign {
                state.foreign.saw_foreign(Instant::now());
            }
            let waited = started.elapsed();
            if waited >= options.timeout {
                state.last_written = last_written;
                tracing::warn!(path = %lock_path.display(), holder = ?holder, waited_ms = waited.as_millis() as u64, "timed out waiting for the session store lock");
                crate::ops::telemetry::lock_timed_out("json");
                return Err(Error::LockTimeout {
                    path: lock_path,
                    holder,
                    waited,
                });
            }
            if !logged_wait {
                tracing::debug!(path = %lock_path.display(), holder = ?holder.as_ref().map(LockHolder::to_string), "session store lock busy; waiting");
                logged_wait = true;
            }
            if !foreign {
                let left = options.timeout - waited;
                let released = lock_path.clone();
                let wait = blocking(&lock_path, move || {
                    lock::wait_for_release(&released);
                    Ok(())
                });
                // Past the timeout the waiting thread is left to finish on its own: it
                // takes and at once drops the released OS lock.
                let _ = tokio::time::timeout(left, wait).await;
            }
        }
    }

    /// Removes the raw entries `expected` (key exactly as written, entry text exactly as
    /// read) from the store file `path`, under the store's lock; an entry that changed or
    /// went away since it was read is left alone. Returns the keys removed.
    ///
    /// This works on the file's own keys, not on normalised [`SessionKey`]s, so a legacy
    /// mixed-case key or a key filed under another agent's directory is removed from
    /// this file only and never touches the session its normalised key names.
    pub(crate) async fn remove_exact(
        &self,
        path: &Path,
        expected: &[(String, String)],
    ) -> Result<Vec<String>> {
        let started = Instant::now();
        let queue = self.inner.queue_of(path);
        let mut state = self.queue(path, &queue, started).await?;
        if state.open.is_none() {
            self.lock_file(path, started, &mut state).await?;
        }
        let mut batch = state.open.take().expect("a batch is open");
        let mut removed = Vec::new();
        for (key, raw) in expected {
            if batch.document.get(key) == Some(raw.as_str()) {
                Arc::make_mut(&mut batch.document).remove(key);
                removed.push(key.clone());
            }
        }
        if !removed.is_empty() {
            batch.members += 1;
        }
        self.commit(path, state, batch).await?;
        Ok(removed)
    }

    /// Applies to the closed-sessions file beside every store file the changes
    /// `changes` makes of the sessions it holds, each file under its store's lock (the
    /// store file itself is not written); only files with changes are locked and
    /// rewritten. Returns how many sessions were changed.
    async fn change_closed(
        &self,
        changes: impl Fn(&Path, &[closed::ClosedSession]) -> closed::ClosedChanges,
    ) -> Result<usize> {
        let mut paths: Vec<PathBuf> = Vec::new();
        for agent in self.agents().await? {
            let path = self.store_path(&agent);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        self.change_closed_in(paths, changes).await
    }

    /// [`change_closed`](Self::change_closed) in the stores at `paths`.
    async fn change_closed_in(
        &self,
        paths: Vec<PathBuf>,
        changes: impl Fn(&Path, &[closed::ClosedSession]) -> closed::ClosedChanges,
    ) -> Result<usize> {
        let mut changed = 0;
        for path in paths {
            let closed_path = closed::closed_path(&path);
            let limit = self.inner.options.max_file_bytes;
            let held = blocking(&closed_path.clone(), move || {
                closed::read(&closed_path, limit)
            })
            .await?;
            let wanted = changes(&path, &held);
            if wanted.is_empty() {
                continue;
            }
            changed += wanted.keep.len() + wanted.forget.len();
            let started = Instant::now();
            let queue = self.inner.queue_of(&path);
            let mut state = self.queue(&path, &queue, started).await?;
            if state.open.is_none() {
                self.lock_file(&path, started, &mut state).await?;
            }
            let mut batch = state.open.take().expect("a batch is open");
            batch.closed.keep.extend(wanted.keep);
            batch.closed.forget.extend(wanted.forget);
            self.commit(&path, state, batch).await?;
        }
        Ok(changed)
    }

    /// Applies a multi-key `mutator` to `keys` (all in the file `path`) in `document`;
    /// the sessions after it, and whether anything changed.
    ///
    /// Every entry is read (and decoded) before the mutator runs, and its changes are
    /// applied to a copy that replaces `document` only when all of them succeeded: a
    /// failure leaves `document` as it was.
    fn change_many(
        &self,
        document: &mut Arc<Document>,
        keys: &[SessionKey],
        path: &Path,
        mutator: &mut ManyMutator<'_>,
    ) -> Result<(Slots, bool, Vec<closed::ClosedSession>)> {
        let mut read = Vec::with_capacity(keys.len());
        for key in keys {
            read.push(self.session_in(document, key, path)?);
        }
        let before = Slots::from_stored(keys.to_vec(), read);
        let mut after = run_many_mutator(mutator, &before)?;
        let mut copy = document.clone();
        let mut changed_any = false;
        let mut replaced_sessions = Vec::new();
        for slot in after.slots.iter_mut() {
            let target = slot.entry.clone();
            let main_elsewhere = self.main_elsewhere(&slot.key, path);
            let (stored, changed, replaced) = apply_change(
                &mut copy,
                &slot.key,
                path,
                main_elsewhere,
                &mut |entry, _| {
                    entry.clone_from(&target);
                    Ok(())
                },
            )?;
            changed_any |= changed;
            if let Some(entry) = replaced {
                replaced_sessions.push(closed::ClosedSession {
                    session_key: slot.key.to_string(),
                    entry,
                });
            }
            let (entry, revision) = stored.map(|s| (s.entry, s.revision)).unzip();
            slot.entry = entry;
            slot.revision = revision;
        }
        if changed_any {
            *document = copy;
        }
        Ok((after, changed_any, replaced_sessions))
    }

    /// This process's queue for `path`, within the lock timeout.
    async fn queue(
        &self,
        path: &Path,
        queue: &FileQueue,
        started: Instant,
    ) -> Result<OwnedMutexGuard<QueueState>> {
        // Counted while waiting, and no longer once its caller stops waiting: a writer
        // leaves its batch open only for a writer that is still there.
        let waiting = queue.waiting();
        let acquired = tokio::time::timeout(
            self.inner.options.lock.timeout,
            queue.state.clone().lock_owned(),
        )
        .await;
        drop(waiting);
        acquired.map_err(|_| {
            let path = lock_path(path);
            Error::LockTimeout {
                holder: read_holder(&path),
                path,
                waited: started.elapsed(),
            }
        })
    }

    /// Writes the batch (if it holds a change), releases the lock file and tells the
    /// batch's members; the queue is held until all of it is done.
    ///
    /// Now and then, while another program (OpenClaw) writes the same store, the release
    /// is a courtesy release (see [`courtesy`]): after the members are answered, the
    /// queue and the OS lock on the removed lock file are kept a little longer than one
    /// OpenClaw poll interval, so OpenClaw's waiters find the lock free.
    async fn commit(
        &self,
        path: &Path,
        mut state: OwnedMutexGuard<QueueState>,
        batch: Batch,
    ) -> Result<()> {
        let inner = self.inner.clone();
        let file = path.to_owned();
        let courtesy = state.foreign.courtesy_due(Instant::now());
        let (result, state, kept) = blocking(path, move || {
            let Batch {
                lock,
                document,
                members,
                outcome,
                read_stamp,
                closed,
            } = batch;
            // The closed sessions first: if they cannot be kept, nothing is written.
            let kept_closed = if closed.is_empty() {
                Ok(())
            } else {
                closed::write(
                    &closed::closed_path(&file),
                    inner.options.max_file_bytes,
                    &closed,
                )
                .map(drop)
            };
            let written = match kept_closed {
                Err(error) => Some(Err(error)),
                Ok(()) => (members > 0).then(|| inner.write(&file, &document)),
            };
            let kept = if courtesy {
                lock.release_keeping_os_lock()
            } else {
                drop(lock);
                None
            };
            let result = match written {
                None => {
                    state.last_written = read_stamp.map(|stamp| (document, stamp));
                    Ok(())
                }
                Some(Ok(stamp)) => {
                    inner.remember(&file, document.clone(), stamp);
                    state.last_written = Some((document, stamp));
                    outcome.send_replace(Some(Ok(())));
                    Ok(())
                }
                // A failure only this caller sees is its own; one several callers
                // share reaches each of them, kind and all, as `Error::Shared`.
                Some(Err(error)) if members <= 1 => {
                    state.last_written = None;
                    Err(error)
                }
                Some(Err(error)) => {
                    state.last_written = None;
                    let error = Arc::new(error);
                    outcome.send_replace(Some(Err(error.clone())));
                    Err(Error::Shared(error))
                }
            };
            Ok((result, state, kept))
        })
        .await?;
        if let Some(os_lock) = kept {
            let window = courtesy::courtesy_window(self.inner.options.lock.poll_interval);
            tracing::trace!(path = %path.display(), window_ms = window.as_millis() as u64, "courtesy release of the session store lock");
            // On a thread of its own: a runtime that is not being driven (a caller's
            // `block_on` returned) must not keep the other processes waiting.
            tokio::task::spawn_blocking(move || {
                std::thread::sleep(window);
                drop(os_lock);
                drop(state);
            });
        }
        result
    }

    /// Ends a writer's turn on the open batch: leaves it open for the next writer when
    /// one waits (the write that holds this change acknowledges it, through `member`),
    /// else writes it now. A batch left open is closed by this writer if nobody else has
    /// written it by the time the queue is free again — also when its caller stops
    /// waiting (see [`finishing`](crate::exactly_once::finishing::finishing)): the lock file is never
    /// left held for a writer that went away.
    async fn end_change(
        &self,
        path: &Path,
        queue: &Arc<FileQueue>,
        mut state: OwnedMutexGuard<QueueState>,
        member: Option<BatchOutcome>,
    ) -> Result<()> {
        let members = state.open.as_ref().map_or(0, |batch| batch.members);
        if queue.has_waiters() && members < MAX_BATCH {
            drop(state);
            let (store, path, queue) = (self.clone(), path.to_owned(), queue.clone());
            crate::exactly_once::finishing::finishing(async move {
                store.await_batch(&path, &queue, member).await
            })
            .await
        } else {
            let batch = state.open.take().expect("a batch is open");
            self.commit(path, state, batch).await
        }
    }

    /// Waits until the batch holding this writer's change (`member`) is written; when
    /// the queue comes free with the batch still open (its next writer went away), this
    /// writer writes it. Without a change of its own, it only closes a batch left open.
    async fn await_batch(
        &self,
        path: &Path,
        queue: &FileQueue,
        member: Option<BatchOutcome>,
    ) -> Result<()> {
        let Some(mut outcome) = member else {
            let mut state = queue.state.clone().lock_owned().await;
            return match state.open.take() {
                Some(batch) => self.commit(path, state, batch).await,
                None => Ok(()),
            };
        };
        let finished = |outcome: &Option<Result<(), Arc<Error>>>| match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(error)) => Err(Error::Shared(error.clone())),
            None => unreachable!("waited for an outcome"),
        };
        let seen = outcome.clone();
        loop {
            tokio::select! {
                done = async { outcome.wait_for(Option::is_some).await.map(|v| v.clone()) } => {
                    return match done {
                        Ok(value) => finished(&value),
                        Err(_) => Err(Error::io(
                            "write (in a batch of updates)",
                            path,
                            std::io::Error::other("the batch was abandoned before it was written"),
                        )),
                    };
                }
                mut state = queue.state.clone().lock_owned() => {
                    let written = seen.borrow().clone();
                    if written.is_some() {
                        return finished(&written);
                    }
                    // Nobody wrote this writer's batch: it is still the open one.
                    if let Some(batch) = state.open.take() {
                        return self.commit(path, state, batch).await;
                    }
                }
            }
        }
    }
}

/// Applies `mutator` to `key` in `document`; whether it changed anything, and the
/// session it replaced under `key` (kept closed), if it did.
///
/// A session filed under a legacy spelling of `key` is taken over first (see
/// [`legacy`]): the mutator sees the freshest entry, which is written under `key`, and
/// the legacy spellings are removed — in this same change, so a failing mutator leaves
/// all of them as they were.
fn apply_change(
    document: &mut Arc<Document>,
    key: &SessionKey,
    path: &Path,
    main_elsewhere: bool,
    mutator: &mut Mutator<'_>,
) -> Result<(Option<StoredSession>, bool, Option<SessionEntry>)> {
    let adoption = legacy::adoption(document, key, main_elsewhere);
    let source = adoption
        .as_ref()
        .map_or(key.as_str(), |a| a.source.as_str());
    let (before, revision) = match document.get(source) {
        Some(raw) => {
            let entry = parse_entry(raw).map_err(|source| Error::InvalidEntry {
                key: key.to_string(),
                path: path.to_owned(),
                source,
            })?;
            (Some(entry), Some(Revision::of_bytes(raw.as_bytes())))
        }
        None => (None, None),
    };
    let after = run_mutator(mutator, before.as_ref(), revision)?;
    if after == before && adoption.is_none() {
        let stored = after.zip(revision).map(|(entry, revision)| StoredSession {
            key: key.clone(),
            entry,
            revision,
        });
        return Ok((stored, false, None));
    }
    let replaced = replaced_session(before.as_ref(), after.as_ref());
    let document = Arc::make_mut(document);
    if let Some(adoption) = &adoption {
        if adoption.source != key.as_str() {
            if let Some(raw) = document.get(&adoption.source).map(str::to_owned) {
                document.insert_raw(key.as_str(), &raw);
            }
        }
        for legacy in &adoption.legacy {
            document.remove(legacy);
        }
        tracing::info!(key = %key, from = %adoption.source, removed = ?adoption.legacy, path = %path.display(), "session under a legacy key taken over by its canonical key");
    }
    let new_revision = match &after {
        Some(_) if after == before => revision,
        Some(entry) => {
            let raw = document
                .set(key.as_str(), entry)
                .map_err(|source| Error::encode(format!("session entry {key}"), source))?;
            Some(Revision::of_bytes(raw.as_bytes()))
        }
        None => {
            document.remove(key.as_str());
            None
        }
    };
    let stored = after
        .zip(new_revision)
        .map(|(entry, revision)| StoredSession {
            key: key.clone(),
            entry,
            revision,
        });
    Ok((stored, true, replaced))
}

impl Inner {
    /// The store's document, under the lock: the one this process last wrote when the
    /// file is provably unchanged since (same inode, size and mtime), else read afresh.
    fn locked_document(
        &self,
        path: &Path,
        last_written: Option<(Arc<Document>, FileStamp)>,
    ) -> Result<(Arc<Document>, Option<FileStamp>)> {
        let stamp = self.io.stat(path).map_err(|e| Error::io("stat", path, e))?;
        if let Some((document, written)) = last_written {
            if stamp == Some(written) {
                // Drop this store's cached copy, so the change need not clone it.
                self.forget(path);
                return Ok((document, stamp));
            }
        }
        // Always re-read otherwise: a cached copy may predate another writer's update
        // (OpenClaw's lost-update bug #10331).
        Ok(match self.read(path)? {
            Some((document, stamp)) => (Arc::new(document), Some(stamp)),
            None => (Arc::default(), None),
        })
    }

    /// The process-wide write queue of `path`, held for as long as this store lives.
    fn queue_of(&self, path: &Path) -> Arc<FileQueue> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues
            .entry(path.to_owned())
            .or_insert_with(|| file_queue(path))
            .clone()
    }

    fn agent_of(&self, key: &SessionKey) -> AgentId {
        match key.agent_id() {
            // A parsed key's agent id is always a valid AgentId.
            Some(agent) => AgentId::new(agent).unwrap_or_else(|_| AgentId::normalize(agent)),
            None => self.options.global_agent.clone(),
        }
    }

    /// The store file of `agent`.
    fn store_path(&self, agent: &AgentId) -> PathBuf {
        match &self.store_template {
            Some(template) => PathBuf::from(template.replace(AGENT_PLACEHOLDER, agent.as_str())),
            None => paths::store_path(&self.root, agent),
        }
    }

    fn agents(&self) -> Result<Vec<AgentId>> {
        if let Some(template) = &self.store_template {
            return self.templated_agents(template);
        }
        let agents_dir = self.root.join("agents");
        let entries = match fs::read_dir(&agents_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", agents_dir, e)),
        };
        let mut agents = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list", &agents_dir, e))?;
            let Some(agent) = entry
                .file_name()
                .to_str()
                .and_then(|n| AgentId::new(n).ok())
            else {
                continue;
            };
            // Anything at the store's path counts: a FIFO or a directory there is
            // reported when read, never silently skipped.
            if fs::symlink_metadata(self.store_path(&agent)).is_ok() {
                agents.push(agent);
            }
        }
        agents.sort();
        Ok(agents)
    }

    /// What the tree holds but the store does not serve (see
    /// [`SessionStore::unreadable`]).
    fn unreadable(&self) -> Result<Vec<super::UnreadableEntry>> {
        if self.store_template.is_some() {
            return self.templated_unreadable();
        }
        let agents_dir = self.root.join("agents");
        let entries = match fs::read_dir(&agents_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", agents_dir, e)),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list", &agents_dir, e))?;
            let name = entry.file_name();
            // The store looks for `agents/<agent id>`: a name that is not already its
            // own agent id (`Work` for `work`) is never read.
            let Some(agent) = name
                .to_str()
                .and_then(|n| AgentId::new(n).ok().filter(|a| a.as_str() == n))
            else {
                let dir = entry.path();
                if fs::symlink_metadata(dir.join("sessions").join("sessions.json")).is_ok() {
                    found.push(super::UnreadableEntry {
                        location: dir.display().to_string(),
                        key: String::new(),
                        problem: "the directory's name is not an agent id (lower-case \
                                  letters, digits, `-` and `_`): its sessions are not read"
                            .into(),
                    });
                }
                continue;
            };
            let path = self.store_path(&agent);
            if fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let document = self.load(&path)?;
            for (key, raw) in document.iter() {
                let problem = if self.served_key(&agent, key).is_none() {
                    "the key is not a canonical session key of this agent (a legacy \
                     spelling — mixed case, no agent scope, or filed under `main` — which \
                     its canonical key takes over when that session is next used; \
                     another agent's key; or not a key at all)"
                        .to_owned()
                } else if let Err(error) = parse_entry(raw) {
                    format!("the entry does not decode: {error}")
                } else {
                    continue;
                };
                found.push(super::UnreadableEntry {
                    location: path.display().to_string(),
                    key: key.to_owned(),
                    problem,
                });
            }
            let closed_path = closed::closed_path(&path);
            crate::store::fs::refuse_linked_dirs(&self.root, &closed_path)
                .map_err(|e| Error::io("read", &closed_path, e))?;
            for (key, problem) in closed::unreadable(&closed_path, self.options.max_file_bytes)? {
                found.push(super::UnreadableEntry {
                    location: closed_path.display().to_string(),
                    key,
                    problem,
                });
            }
        }
        found.sort_by(|a, b| (&a.location, &a.key).cmp(&(&b.location, &b.key)));
        Ok(found)
    }

    /// The parsed store at `path`, from the cache when the file is unchanged.
    fn load(&self, path: &Path) -> Result<Arc<Document>> {
        let ttl = self.options.cache_ttl;
        if !ttl.is_zero() {
            let stamp = self.io.stat(path).map_err(|e| Error::io("stat", path, e))?;
            let Some(stamp) = stamp else {
                return Ok(Arc::default());
            };
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(cached) = cache.get(path) {
                if cached.stamp == stamp && cached.loaded_at.elapsed() <= ttl {
                    tracing::trace!(path = %path.display(), "session store cache hit");
                    return Ok(cached.document.clone());
                }
            }
        }
        let Some((document, stamp)) = self.read(path)? else {
            return Ok(Arc::default());
        };
        let document = Arc::new(document);
        self.remember(path, document.clone(), stamp);
        Ok(document)
    }

    /// Reads and parses the store at `path`, bypassing the cache.
    fn read(&self, path: &Path) -> Result<Option<(Document, FileStamp)>> {
        let started = Instant::now();
        crate::store::fs::refuse_linked_dirs(&self.root, path)
            .map_err(|e| Error::io("read", path, e))?;
        let Some((bytes, stamp)) = self
            .io
            .read(path, self.options.max_file_bytes)
            .map_err(|e| Error::io("read", path, e))?
        else {
            return Ok(None);
        };
        let size = bytes.len();
        let document = Document::from_bytes(bytes).map_err(|problem| {
            let backup = backup_path(path);
            let backup_is_valid = matches!(
                self.io.read(&backup, self.options.max_file_bytes),
                Ok(Some((bytes, _))) if Document::parse(&bytes).is_ok()
            );
            tracing::error!(path = %path.display(), %problem, backup_is_valid, "session store is corrupt; leaving it untouched");
            Error::Corrupt {
                path: path.to_owned(),
                problem,
                valid_backup: backup_is_valid.then_some(backup),
            }
        })?;
        tracing::debug!(path = %path.display(), bytes = size, entries = document.len(), elapsed_us = started.elapsed().as_micros() as u64, "session store read");
        Ok(Some((document, stamp)))
    }

    fn remember(&self, path: &Path, document: Arc<Document>, stamp: FileStamp) {
        if self.options.cache_ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.insert(
            path.to_owned(),
            Cached {
                document,
                stamp,
                loaded_at: Instant::now(),
            },
        );
    }

    fn forget(&self, path: &Path) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.remove(path);
    }

    /// Writes `document` to `path` (atomically, per the durability) and returns the
    /// stamp of the file written.
    fn write(&self, path: &Path, document: &Document) -> Result<FileStamp> {
        let started = Instant::now();
        let bytes = document.to_bytes();
        // A failed write may have replaced the file (e.g. only the directory fsync
        // failed); never serve the old version from the cache after trying.
        self.forget(path);
        let stamp = write_atomically(&*self.io, path, &bytes, self.options.durability)?;
        crate::ops::telemetry::wrote(bytes.len());
        tracing::debug!(path = %path.display(), bytes = bytes.len(), durability = ?self.options.durability, elapsed_us = started.elapsed().as_micros() as u64, "session store written");
        Ok(stamp)
    }

    /// The sessions of one store file that pass `filter`, in listing order, at most
    /// its limit of them. Only the two fields that order a listing are read from every
    /// entry; whole entries are read in that order until the page is full.
    fn scan(&self, agent: &AgentId, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        /// What orders a listing, read without the rest of the entry.
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Order {
            #[serde(default)]
            session_id: String,
            #[serde(default)]
            updated_at: u64,
        }
        let path = self.store_path(agent);
        let document = self.load(&path)?;
        let mut candidates = Vec::new();
        for (key, raw) in document.iter() {
            let Some(key) = self.served_key(agent, key) else {
                continue;
            };
            if !filter.matches_key(&key) {
                continue;
            }
            // An entry whose order cannot be read is reported below, like any other
            // that does not parse.
            let order =
                crate::store::json_text::from_slice::<Order>(raw.as_bytes()).unwrap_or(Order {
                    session_id: String::new(),
                    updated_at: 0,
                });
            let after_cursor = filter.after.as_ref().is_none_or(|cursor| {
                cursor.precedes(order.updated_at, key.as_str(), &order.session_id)
            });
            if after_cursor {
                candidates.push((Reverse(order.updated_at), key, order.session_id, raw));
            }
        }
        candidates.sort_unstable_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
        let limit = filter.limit.unwrap_or(usize::MAX);
        let mut sessions = Vec::new();
        for (_, key, _, raw) in candidates {
            if sessions.len() >= limit {
                break;
            }
            match parse_entry(raw) {
                Ok(entry) if filter.matches(&key, &entry) => sessions.push(StoredSession {
                    key,
                    entry,
                    revision: Revision::of_bytes(raw.as_bytes()),
                }),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(path = %path.display(), key = %key, %error, "skipping an invalid session entry")
                }
            }
        }
        if filter.status.includes_replaced() {
            sessions.extend(self.scan_closed(agent, &path, &document, filter)?);
        }
        Ok(sessions)
    }

    /// The closed sessions kept beside `agent`'s store file that pass `filter`. One that
    /// is still its key's current session (its replacement was never written) is left
    /// out.
    fn scan_closed(
        &self,
        agent: &AgentId,
        path: &Path,
        document: &Document,
        filter: &ListFilter,
    ) -> Result<Vec<StoredSession>> {
        let closed_path = closed::closed_path(path);
        crate::store::fs::refuse_linked_dirs(&self.root, &closed_path)
            .map_err(|e| Error::io("read", &closed_path, e))?;
        let mut sessions = Vec::new();
        for closed in closed::read(&closed_path, self.options.max_file_bytes)? {
            let Some(key) = self.served_key(agent, &closed.session_key) else {
                continue;
            };
            let current = document
                .get(key.as_str())
                .and_then(|raw| parse_entry(raw).ok())
                .is_some_and(|e| e.session_id == closed.entry.session_id);
            if current || !filter.matches(&key, &closed.entry) {
                continue;
            }
            let revision = entry_revision(&closed.entry)
                .map_err(|source| Error::encode(format!("session entry {key}"), source))?;
            sessions.push(StoredSession {
                key,
                entry: closed.entry,
                revision,
            });
        }
        Ok(sessions)
    }

    /// The key of a stored entry if this store serves it from `agent`'s file: a
    /// canonical key that routes to this file. Other entries are kept on disk untouched.
    fn served_key(&self, agent: &AgentId, raw_key: &str) -> Option<SessionKey> {
        let key = SessionKey::parse(raw_key).ok()?;
        let served = key.as_str() == raw_key && self.agent_of(&key) == *agent;
        if !served {
            tracing::debug!(key = raw_key, agent = %agent, "entry not served: key is not canonical or belongs to another agent's file");
        }
        served.then_some(key)
    }
}

impl JsonFileStore {
    /// The session under `key`, read from the file and never from this process's cache
    /// (OpenClaw's `skipCache`): for a host that must see a change another process made
    /// a moment ago.
    pub async fn get_uncached(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let path = self.store_path_for(key);
        let inner = self.inner.clone();
        let owned = path.clone();
        let document = blocking(&path, move || {
            Ok(inner
                .read(&owned)?
                .map(|(document, _)| document)
                .unwrap_or_default())
        })
        .await?;
        self.session_in(&document, key, &path)
    }
}

#[async_trait]
impl SessionStore for JsonFileStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let path = self.store_path_for(key);
        let document = self.load(&path).await?;
        self.session_in(&document, key, &path)
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        crate::ops::telemetry::update("json", std::slice::from_ref(key), async move {
            let path = self.store_path_for(key);
            let started = Instant::now();
            let queue = self.inner.queue_of(&path);
            let mut state = self.queue(&path, &queue, started).await?;
            if state.open.is_none() {
                self.lock_file(&path, started, &mut state).await?;
            }
            let batch = state.open.as_mut().expect("a batch is open");
            let main_elsewhere = self.main_elsewhere(key, &path);
            let applied = apply_change(&mut batch.document, key, &path, main_elsewhere, mutator);
            let member = match &applied {
                Ok((_, true, replaced)) => {
                    batch.members += 1;
                    if let Some(entry) = replaced {
                        batch.closed.keep.push(closed::ClosedSession {
                            session_key: key.to_string(),
                            entry: entry.clone(),
                        });
                    }
                    Some(batch.outcome.subscribe())
                }
                _ => None,
            };
            self.end_change(&path, &queue, state, member).await?;
            applied.map(|(stored, _, _)| stored)
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let agents = match &filter.agent {
            Some(agent) => vec![agent.clone()],
            None => self.agents().await?,
        };
        let inner = self.inner.clone();
        let filter_copy = filter.clone();
        let sessions = blocking(&self.inner.root, move || {
            let mut sessions = Vec::new();
            for agent in &agents {
                sessions.extend(inner.scan(agent, &filter_copy)?);
            }
            Ok(sessions)
        })
        .await?;
        Ok(filter.finish(sessions))
    }

    async fn unreadable(&self) -> Result<Vec<super::UnreadableEntry>> {
        let inner = self.inner.clone();
        blocking(&self.inner.root, move || inner.unreadable()).await
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if !filter.is_everything() {
            return Ok(self.list(filter).await?.len());
        }
        let agents = self.agents().await?;
        let inner = self.inner.clone();
        blocking(&self.inner.root, move || {
            let mut count = 0;
            for agent in &agents {
                let document = inner.load(&inner.store_path(agent))?;
                count += document
                    .iter()
                    .filter(|(key, _)| inner.served_key(agent, key).is_some())
                    .count();
            }
            Ok(count)
        })
        .await
    }

    fn as_erase(&self) -> Option<&dyn crate::store::Erase> {
        Some(self)
    }
}

#[async_trait]
impl crate::store::Erase for JsonFileStore {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        self.change_closed(|_, held| closed::ClosedChanges {
            keep: Vec::new(),
            forget: held
                .iter()
                .map(|h| h.entry.session_id.clone())
                .filter(|id| session_ids.contains(id))
                .collect(),
        })
        .await
    }
    async fn add_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        let current: std::collections::HashSet<String> = self
            .list(&ListFilter::all())
            .await?
            .into_iter()
            .map(|s| s.entry.session_id)
            .collect();
        let mut paths: Vec<PathBuf> = Vec::new();
        for session in sessions {
            let path = self.store_path_for(&session.key);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        self.change_closed_in(paths, |path, held| closed::ClosedChanges {
            keep: sessions
                .iter()
                .filter(|s| {
                    self.store_path_for(&s.key) == path
                        && !current.contains(&s.entry.session_id)
                        && !held
                            .iter()
                            .any(|h| h.entry.session_id == s.entry.session_id)
                })
                .map(|s| closed::ClosedSession {
                    session_key: s.key.to_string(),
                    entry: s.entry.clone(),
                })
                .collect(),
            forget: Vec::new(),
        })
        .await
    }
    async fn replace_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        self.change_closed(|_, held| closed::ClosedChanges {
            keep: sessions
                .iter()
                .filter(|s| {
                    held.iter()
                        .any(|h| h.entry.session_id == s.entry.session_id)
                })
                .map(|s| closed::ClosedSession {
                    session_key: s.key.to_string(),
                    entry: s.entry.clone(),
                })
                .collect(),
            forget: Vec::new(),
        })
        .await
    }
    async fn erase_copies(&self, needles: &[String], _vacuum: bool) -> Result<usize> {
        let (root, needles) = (
            crate::store::json::paths::state_root(&self.inner.root),
            needles.to_vec(),
        );
        blocking(&self.inner.root, move || {
            copies::erase_copies(&root, &needles)
        })
        .await
    }
}

#[async_trait]
impl crate::store::MultiKeyStore for JsonFileStore {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut ManyMutator<'_>,
    ) -> Result<Slots> {
        crate::ops::telemetry::update("json", keys, async move {
            let keys = distinct_keys(keys);
            let Some(first) = keys.first() else {
                mutator(&mut Slots::default())?;
                return Ok(Slots::default());
            };
            // One lock and one write of one file: keys in two files cannot change together
            // (a reader could see one file written and not the other, and a failure could
            // leave one written), so they are refused before anything is locked.
            let path = self.store_path_for(first);
            for key in &keys[1..] {
                let other = self.store_path_for(key);
                if other != path {
                    return Err(Error::NotAtomic {
                        first: first.clone(),
                        second: key.clone(),
                        reason: format!(
                            "their sessions are in different files ({} and {}), and one write \
                         replaces one file",
                            path.display(),
                            other.display()
                        ),
                    });
                }
            }
            let started = Instant::now();
            let queue = self.inner.queue_of(&path);
            let mut state = self.queue(&path, &queue, started).await?;
            if state.open.is_none() {
                self.lock_file(&path, started, &mut state).await?;
            }
            let batch = state.open.as_mut().expect("a batch is open");
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.change_many(&mut batch.document, &keys, &path, mutator)
            }));
            let mut applied = match applied {
                Ok(applied) => applied,
                Err(panic) => {
                    // The mutator panicked before anything of it reached the document: write
                    // what other writers left in the batch and release the lock file (which
                    // would otherwise stay taken until this process's next write), then let
                    // the panic go on.
                    let batch = state.open.take().expect("a batch is open");
                    let _ = self.commit(&path, state, batch).await;
                    std::panic::resume_unwind(panic);
                }
            };
            let member = match &mut applied {
                Ok((_, true, replaced)) => {
                    batch.members += 1;
                    batch.closed.keep.append(replaced);
                    Some(batch.outcome.subscribe())
                }
                _ => None,
            };
            self.end_change(&path, &queue, state, member).await?;
            applied.map(|(slots, _, _)| slots)
        })
        .await
    }
}
