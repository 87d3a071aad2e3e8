//! [`JsonFileSystemEvents`]: system-event queues in files beside the sessions, shared
//! by every process on the machine.

use std::path::Path;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::keyed_files::KeyedFiles;
use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::inbound::events::{
    SystemEvent, SystemEvents, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS,
};

/// The directory under the state root that holds system events.
pub(crate) const EVENTS_DIR: &str = "system-events";

/// One event as a queue file keeps it.
#[derive(Serialize, Deserialize)]
struct Stored {
    text: String,
    at: DateTime<Utc>,
}

impl From<Stored> for SystemEvent {
    fn from(stored: Stored) -> Self {
        SystemEvent {
            text: stored.text,
            at: stored.at,
        }
    }
}

/// System events kept in files: `<root>/system-events/<session key>.json`, one per
/// session, with the same bounds and semantics as
/// [`SystemEventQueue`](crate::inbound::events::SystemEventQueue): at most 20
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
/// use agent_sessions::inbound::SystemEvents;
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
    files: KeyedFiles,
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
            files: KeyedFiles::new(root.as_ref(), EVENTS_DIR, "system events"),
            max_events: max_events.max(1),
            max_sessions: max_sessions.max(1),
        }
    }
}

#[async_trait]
impl SystemEvents for JsonFileSystemEvents {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        let text = text.trim().to_owned();
        if text.is_empty() {
            return Ok(false);
        }
        let path = self.files.file_of(key.as_ref());
        let (max_events, max_sessions) = (self.max_events, self.max_sessions);
        self.files
            .locked(move |files| {
                let existed = path.exists();
                let mut events: Vec<Stored> = files.read(&path)?;
                // A repeat is skipped but touches the session: the file is written again.
                let queued = events.last().is_none_or(|last| last.text != text);
                if queued {
                    events.push(Stored { text, at });
                    let excess = events.len().saturating_sub(max_events);
                    events.drain(..excess);
                }
                files.write(&path, &events)?;
                if !existed {
                    files.evict(max_sessions)?;
                }
                Ok(queued)
            })
            .await
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        if !self.files.exists() {
            return Ok(Vec::new());
        }
        // Read without the lock, writing nothing: a copy may read a tree opened
        // read-only.
        self.files
            .unlocked(|files| {
                let mut queues = Vec::new();
                for path in files.all_files()? {
                    let name = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or("")
                        .trim_end_matches(".json");
                    let key = crate::store::json::paths::decode_file_component(name)
                        .ok()
                        .and_then(|raw| SessionKey::parse(&raw).ok())
                        .filter(|key| files.file_of(key.as_ref()) == path);
                    let Some(key) = key else {
                        // A name shortened to fit the file system, or not a key: the
                        // events' session cannot be named, and a copy would lose them.
                        let problem = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the session key cannot be recovered from the file name",
                        );
                        return Err(crate::Error::io("copy system events", &path, problem));
                    };
                    let Some(events) = files.read_as_is::<Vec<Stored>>(&path)? else {
                        let problem = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the session's system events do not parse",
                        );
                        return Err(crate::Error::io("copy system events", &path, problem));
                    };
                    if !events.is_empty() {
                        queues.push((key, events.into_iter().map(SystemEvent::from).collect()));
                    }
                }
                Ok(queues)
            })
            .await
    }

    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        let path = self.files.file_of(key.as_ref());
        let max_sessions = self.max_sessions;
        self.files
            .locked(move |files| {
                let existed = path.exists();
                let held: Vec<Stored> = files.read(&path)?;
                if !held.is_empty() {
                    return Ok(false);
                }
                let events: Vec<Stored> = events
                    .into_iter()
                    .map(|e| Stored {
                        text: e.text,
                        at: e.at,
                    })
                    .collect();
                files.write(&path, &events)?;
                if !existed {
                    files.evict(max_sessions)?;
                }
                Ok(true)
            })
            .await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        let path = self.files.file_of(key.as_ref());
        self.files
            .locked(move |files| {
                let events: Vec<Stored> = files.take(&path)?;
                Ok(events.into_iter().map(SystemEvent::from).collect())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::testing::system_events::{self as system_events_suite, session};
    use std::fs;

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
        let path = events.files.file_of(session("a").as_ref());
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
            for file in [path.clone(), dir.path().join(EVENTS_DIR).join(".lock")] {
                let mode = fs::metadata(&file).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{}", file.display());
            }
        }
    }
}
