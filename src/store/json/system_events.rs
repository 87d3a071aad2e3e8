//! [`JsonFileSystemEvents`]: system-event queues in files beside the sessions, shared
//! by every process on the machine.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::context::inbound::events::{
    SystemEvent, SystemEvents, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS,
};
use crate::error::{Error, Result};
use crate::fsutil::{blocking, create_private_dir_all, read_limited, write_private_atomically};
use crate::key::SessionKey;
use crate::paths::file_name_for;

/// The directory under the state root that holds system events.
const EVENTS_DIR: &str = "system-events";

/// The largest queue file read: far more than 20 events of any note.
const MAX_EVENTS_FILE: u64 = 16 * 1024 * 1024;

/// One event as a queue file keeps it.
#[derive(Serialize, Deserialize)]
struct Stored {
    text: String,
    at: DateTime<Utc>,
}

/// System events kept in files: `<root>/system-events/<session key>.json`, one per
/// session, with the same bounds and semantics as
/// [`SystemEventQueue`](crate::context::inbound::events::SystemEventQueue): at most 20
/// events a session (the oldest dropped first) and 1,000 sessions (the least recently
/// touched, by the file's modification time, dropped first); a blank text or a repeat
/// of the last queued one is skipped.
///
/// Every call takes an OS lock on `<root>/system-events/.lock`, so several processes on
/// one machine share the queues and every event is returned by exactly one
/// [`drain`](SystemEvents::drain). Each file is replaced by an atomic rename,
/// owner-only (0600). A file that does not parse is moved aside as
/// `<session key>.json.corrupt` (kept, reported in the log) and the queue starts over.
/// This is what [`SessionManager::connect`](crate::SessionManager::connect) uses for a
/// `json:` store.
///
/// ```
/// use agent_sessions::context::inbound::events::SystemEvents;
/// use agent_sessions::store::JsonFileSystemEvents;
/// use agent_sessions::SessionKey;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let key = SessionKey::parse("agent:main:main")?;
/// let events = JsonFileSystemEvents::new(dir.path());
/// events.enqueue(&key, "Model switched.", chrono::Utc::now()).await?;
///
/// // Another process, or this one after a restart, drains it once.
/// let other = JsonFileSystemEvents::new(dir.path());
/// assert_eq!(other.drain(&key).await?[0].text, "Model switched.");
/// assert!(events.drain(&key).await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JsonFileSystemEvents {
    dir: PathBuf,
    max_events: usize,
    max_sessions: usize,
}

impl JsonFileSystemEvents {
    /// System events under the state root `root` (the directory a [`JsonFileStore`]
    /// was made with), with OpenClaw's bounds.
    ///
    /// [`JsonFileStore`]: crate::JsonFileStore
    pub fn new(root: impl AsRef<Path>) -> Self {
        JsonFileSystemEvents::with_limits(root, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS)
    }

    /// At most `max_events` events a session and `max_sessions` sessions (each at
    /// least 1).
    pub fn with_limits(root: impl AsRef<Path>, max_events: usize, max_sessions: usize) -> Self {
        JsonFileSystemEvents {
            dir: crate::paths::state_root(root.as_ref()).join(EVENTS_DIR),
            max_events: max_events.max(1),
            max_sessions: max_sessions.max(1),
        }
    }

    /// The file of session `key` ([`file_name_for`]: long keys fit a file name too).
    fn file_of(&self, key: &SessionKey) -> PathBuf {
        self.dir
            .join(format!("{}.json", file_name_for(key.as_ref())))
    }

    /// Runs `f` with the directory's lock held, on the blocking pool.
    async fn locked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&JsonFileSystemEvents) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let events = self.clone();
        blocking(&self.dir, move || {
            create_private_dir_all(&events.dir)
                .map_err(|e| Error::io("create system events directory", &events.dir, e))?;
            let lock_path = events.dir.join(".lock");
            let lock = crate::fsutil::open_checked(
                OpenOptions::new().create(true).truncate(false).write(true),
                &lock_path,
            )
            .map_err(|e| Error::io("open system events lock", &lock_path, e))?;
            lock.lock()
                .map_err(|e| Error::io("lock system events", &lock_path, e))?;
            let result = f(&events);
            drop(lock);
            result
        })
        .await
    }

    /// The events in `path`, oldest first; a file that does not parse is moved aside.
    fn read(path: &Path) -> Result<Vec<Stored>> {
        let bytes = match read_limited(path, MAX_EVENTS_FILE) {
            Ok(Some((bytes, _))) => bytes,
            Ok(None) => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("read system events", path, e)),
        };
        match serde_json::from_slice(&bytes) {
            Ok(events) => Ok(events),
            Err(error) => {
                let aside = path.with_extension("json.corrupt");
                fs::rename(path, &aside)
                    .map_err(|e| Error::io("move corrupt system events aside", path, e))?;
                tracing::warn!(path = %path.display(), kept_as = %aside.display(), %error, "system events do not parse; kept aside, the queue starts over");
                Ok(Vec::new())
            }
        }
    }

    fn write(path: &Path, events: &[Stored]) -> Result<()> {
        let bytes = serde_json::to_vec(events)
            .map_err(|e| Error::encode(format!("system events for {}", path.display()), e))?;
        write_private_atomically(path, &bytes)
    }

    fn remove(path: &Path) -> Result<()> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove system events", path, e)),
        }
    }

    /// Drops the least recently touched sessions beyond `max_sessions`.
    fn evict(&self) -> Result<()> {
        let listing =
            fs::read_dir(&self.dir).map_err(|e| Error::io("list system events", &self.dir, e))?;
        let mut sessions: Vec<(std::time::SystemTime, PathBuf)> = listing
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|entry| {
                let modified = entry.metadata().ok()?.modified().ok()?;
                Some((modified, entry.path()))
            })
            .collect();
        if sessions.len() <= self.max_sessions {
            return Ok(());
        }
        sessions.sort();
        let excess = sessions.len() - self.max_sessions;
        for (_, path) in sessions.into_iter().take(excess) {
            JsonFileSystemEvents::remove(&path)?;
        }
        Ok(())
    }
}

#[async_trait]
impl SystemEvents for JsonFileSystemEvents {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        let text = text.trim().to_owned();
        if text.is_empty() {
            return Ok(false);
        }
        let path = self.file_of(key);
        self.locked(move |queues| {
            let existed = path.exists();
            let mut events = JsonFileSystemEvents::read(&path)?;
            // A repeat is skipped but touches the session: the file is written again.
            let queued = events.last().is_none_or(|last| last.text != text);
            if queued {
                events.push(Stored { text, at });
                let excess = events.len().saturating_sub(queues.max_events);
                events.drain(..excess);
            }
            JsonFileSystemEvents::write(&path, &events)?;
            if !existed {
                queues.evict()?;
            }
            Ok(queued)
        })
        .await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        let path = self.file_of(key);
        self.locked(move |_| {
            let events = JsonFileSystemEvents::read(&path)?;
            JsonFileSystemEvents::remove(&path)?;
            Ok(events
                .into_iter()
                .map(|stored| SystemEvent {
                    text: stored.text,
                    at: stored.at,
                })
                .collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::system_events_suite::{self, session};

    #[tokio::test]
    async fn is_bounded_and_skips_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        system_events_suite::bounded_and_skipping_repeats(
            |case, max_events, max_sessions| {
                let root = root.join(format!("case-{case}"));
                async move { JsonFileSystemEvents::with_limits(root, max_events, max_sessions) }
            },
            // Sessions are ordered by file time: distinct times, whatever the clock's grain.
            Duration::from_millis(15),
        )
        .await;
    }

    #[tokio::test]
    async fn keeps_text_and_time() {
        let dir = tempfile::tempdir().unwrap();
        system_events_suite::events_keep_text_and_time(JsonFileSystemEvents::new(dir.path())).await;
    }

    /// Four handles on one tree, as four processes would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drains_once_beside_other_processes_enqueuing() {
        let dir = tempfile::tempdir().unwrap();
        let handle = || JsonFileSystemEvents::with_limits(dir.path(), 1000, 10);
        system_events_suite::drain_once_beside_concurrent_enqueues(
            [handle(), handle()],
            [handle(), handle()],
            60,
        )
        .await;
    }

    #[tokio::test]
    async fn a_corrupt_queue_file_is_kept_aside_and_the_queue_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let events = JsonFileSystemEvents::new(dir.path());
        let at = Utc::now();
        events.enqueue(&session("a"), "x", at).await.unwrap();
        let path = events.file_of(&session("a"));
        fs::write(&path, b"{not json").unwrap();
        assert!(events.enqueue(&session("a"), "x", at).await.unwrap());
        assert_eq!(
            fs::read(path.with_extension("json.corrupt")).unwrap(),
            b"{not json"
        );
        assert_eq!(events.drain(&session("a")).await.unwrap().len(), 1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            events.enqueue(&session("a"), "y", at).await.unwrap();
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
