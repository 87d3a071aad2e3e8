//! [`SqliteSystemEvents`]: system-event queues in the `system_events` table of a
//! [`SqliteStore`], shared by every process using the file.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension};

use super::keyed_log::KeyedLog;
use super::{db_error, SqliteStore};
use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::inbound::events::{
    SystemEvent, SystemEvents, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS,
};
use crate::store::sql::{event_time_from_i64, event_time_to_i64, history_bound, queues_of};

/// System events kept in the database of a [`SqliteStore`], with the same bounds and
/// semantics as [`SystemEventQueue`](crate::inbound::events::SystemEventQueue):
/// at most 20 events a session (the oldest dropped first) and 1,000 sessions (the
/// least recently touched dropped first); a blank text or a repeat of the last queued
/// one is skipped.
///
/// Each call is one write transaction, under the database's write lock: an enqueue
/// writes the event, trims the session and, when the session is new, drops the
/// sessions beyond the bound; [`drain`](SystemEvents::drain) reads and deletes the
/// session's events, so every event is returned by exactly one drain, whichever
/// process runs it. Times are kept to the microsecond. This is what
/// [`SessionManager::connect`](crate::SessionManager::connect) uses for a `sqlite:`
/// store.
///
/// ```
/// use agent_sessions::inbound::SystemEvents;
/// use agent_sessions::store::{SqliteStore, SqliteSystemEvents};
/// use agent_sessions::SessionKey;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("sessions.db");
/// let key = SessionKey::parse("agent:main:main")?;
/// let events = SqliteSystemEvents::new(&SqliteStore::open(&file)?);
/// events.enqueue(&key, "Model switched.", chrono::Utc::now()).await?;
///
/// // Another process, or this one after a restart, drains it once.
/// let other = SqliteSystemEvents::new(&SqliteStore::open(&file)?);
/// assert_eq!(other.drain(&key).await?[0].text, "Model switched.");
/// assert!(events.drain(&key).await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteSystemEvents {
    store: SqliteStore,
    max_events: usize,
    max_sessions: usize,
}

impl SqliteSystemEvents {
    /// System events in `store`'s database, with OpenClaw's bounds.
    pub fn new(store: &SqliteStore) -> Self {
        SqliteSystemEvents::with_limits(store, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS)
    }

    /// At most `max_events` events a session and `max_sessions` sessions (each at
    /// least 1).
    pub fn with_limits(store: &SqliteStore, max_events: usize, max_sessions: usize) -> Self {
        SqliteSystemEvents {
            store: store.clone(),
            max_events: max_events.max(1),
            max_sessions: max_sessions.max(1),
        }
    }
}

/// System events, a keyed bounded log: every event of a session counts.
const SYSTEM_EVENTS: KeyedLog = KeyedLog {
    table: "system_events",
    key_column: "session_key",
    counted: "TRUE",
    trim_op: "trim system events",
    evict_op: "evict system events",
};

#[async_trait]
impl SystemEvents for SqliteSystemEvents {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        let text = text.trim().to_owned();
        if text.is_empty() {
            return Ok(false);
        }
        let key = key.to_string();
        let (max_events, max_sessions) = (
            history_bound(self.max_events),
            history_bound(self.max_sessions),
        );
        self.store
            .write(move |tx| {
                let last: Option<(i64, String, i64)> = tx
                    .query_row(
                        "SELECT id, text, at FROM system_events WHERE session_key = ?1
                         ORDER BY id DESC LIMIT 1",
                        [&key],
                        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                    )
                    .optional()
                    .map_err(db_error("read system events"))?;
                let insert = |text: &str, at: i64| {
                    tx.prepare_cached(
                        "INSERT INTO system_events (session_key, text, at) VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut statement| statement.execute(params![key, text, at]))
                    .map_err(db_error("queue a system event"))
                };
                if let Some((id, last_text, last_at)) = &last {
                    if *last_text == text {
                        // A repeat is skipped but touches the session: its last event
                        // moves to the end of the order, unchanged.
                        tx.execute("DELETE FROM system_events WHERE id = ?1", [id])
                            .map_err(db_error("touch system events"))?;
                        insert(last_text, *last_at)?;
                        return Ok(false);
                    }
                }
                insert(&text, event_time_to_i64(at))?;
                // The session keeps its `max_events` newest events; a new session may
                // push the least recently touched ones out.
                SYSTEM_EVENTS.bound(tx, &key, max_events, max_sessions, last.is_none())?;
                Ok(true)
            })
            .await
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        let rows: Vec<(String, String, i64)> = self
            .store
            .read(|c| {
                let failed = || db_error("read system events");
                let mut statement = c
                    .prepare("SELECT session_key, text, at FROM system_events ORDER BY id")
                    .map_err(failed())?;
                let rows = statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .map_err(failed())?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(failed());
                rows
            })
            .await?;
        queues_of(rows)
    }

    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        let key = key.to_string();
        self.store
            .write(move |tx| {
                let failed = || db_error("copy system events");
                let held: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM system_events WHERE session_key = ?1)",
                        [&key],
                        |row| row.get(0),
                    )
                    .map_err(failed())?;
                if held {
                    return Ok(false);
                }
                for event in &events {
                    tx.prepare_cached(
                        "INSERT INTO system_events (session_key, text, at) VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut statement| {
                        statement.execute(params![key, event.text, event_time_to_i64(event.at)])
                    })
                    .map_err(failed())?;
                }
                Ok(true)
            })
            .await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        let key = key.to_string();
        self.store
            .write(move |tx| {
                let events = {
                    let mut statement = tx
                        .prepare_cached(
                            "SELECT text, at FROM system_events WHERE session_key = ?1
                             ORDER BY id",
                        )
                        .map_err(db_error("read system events"))?;
                    let rows = statement
                        .query_map([&key], |row| {
                            Ok(SystemEvent {
                                text: row.get(0)?,
                                at: event_time_from_i64(row.get(1)?),
                            })
                        })
                        .map_err(db_error("read system events"))?;
                    rows.collect::<rusqlite::Result<Vec<_>>>()
                        .map_err(db_error("read system events"))?
                };
                if !events.is_empty() {
                    tx.prepare_cached("DELETE FROM system_events WHERE session_key = ?1")
                        .and_then(|mut statement| statement.execute([&key]))
                        .map_err(db_error("drain system events"))?;
                }
                Ok(events)
            })
            .await
    }
}
