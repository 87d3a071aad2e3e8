//! [`PostgresSystemEvents`]: system-event queues in the `system_events` table of a
//! [`PostgresStore`], shared by every host using the schema.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use super::keyed_log::KeyedLog;
use super::{pg_error, Committed, OpenTransaction, PostgresStore, Prepared};
use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::inbound::events::{
    SystemEvent, SystemEvents, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS,
};
use crate::store::sql::{event_time_from_i64, event_time_to_i64, history_bound, queues_of};

/// System events kept in the schema of a [`PostgresStore`], with the same bounds and
/// semantics as [`SystemEventQueue`](crate::inbound::events::SystemEventQueue):
/// at most 20 events a session (the oldest dropped first) and 1,000 sessions (the
/// least recently touched dropped first); a blank text or a repeat of the last queued
/// one is skipped.
///
/// Enqueues to one session and its [`drain`](SystemEvents::drain) take turns on a
/// transaction-scoped advisory lock of the session, from any number of hosts;
/// different sessions do not wait for each other. A drain is one `DELETE … RETURNING`,
/// so every event is returned by exactly one drain, even when two workers race for
/// it. Times are kept to the microsecond. This is what
/// [`SessionManager::connect`](crate::SessionManager::connect) uses for a
/// `postgres://` store.
///
/// ```no_run
/// use agent_sessions::inbound::SystemEvents;
/// use agent_sessions::store::{PostgresStore, PostgresSystemEvents};
/// use agent_sessions::SessionKey;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let db = PostgresStore::connect("postgres://bot@db.internal/sessions").await?;
/// let events = PostgresSystemEvents::new(&db);
/// let key = SessionKey::parse("agent:main:main")?;
/// events.enqueue(&key, "Model switched.", chrono::Utc::now()).await?;
/// // Any host, before or after a restart, drains it once.
/// assert_eq!(events.drain(&key).await?.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresSystemEvents {
    store: PostgresStore,
    max_events: usize,
    max_sessions: usize,
}

impl PostgresSystemEvents {
    /// System events in `store`'s schema, with OpenClaw's bounds.
    pub fn new(store: &PostgresStore) -> Self {
        PostgresSystemEvents::with_limits(store, MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS)
    }

    /// At most `max_events` events a session and `max_sessions` sessions (each at
    /// least 1).
    pub fn with_limits(store: &PostgresStore, max_events: usize, max_sessions: usize) -> Self {
        PostgresSystemEvents {
            store: store.clone(),
            max_events: max_events.max(1),
            max_sessions: max_sessions.max(1),
        }
    }

    fn table(&self) -> String {
        self.store.table("system_events")
    }

    /// What a session's advisory lock is named after, without the session: the lock
    /// of session `k` is `hashtextextended(prefix || k, 0)`, computed by the server so
    /// that eviction can try the locks of the sessions it picks in SQL.
    fn lock_prefix(&self) -> String {
        format!("{}/system-events/", self.store.schema)
    }

    /// A transaction holding the lock of session `key`.
    async fn begin(&self, key: &str) -> Result<OpenTransaction> {
        let lock = format!("{}{key}", self.lock_prefix());
        self.store.begin_locked(&lock, "lock system events").await
    }
}

#[async_trait]
impl SystemEvents for PostgresSystemEvents {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(false);
        }
        let key = key.to_string();
        let table = self.table();
        let open = self.begin(&key).await?;
        let result = async {
            let c = open.client();
            let last = c
                .query_opt_prepared(
                    &format!(
                        "SELECT id, text, at FROM {table} WHERE session_key = $1
                         ORDER BY id DESC LIMIT 1"
                    ),
                    &[&key],
                )
                .await
                .map_err(pg_error("read system events"))?
                .map(|row| {
                    (
                        row.get::<_, i64>(0),
                        row.get::<_, String>(1),
                        row.get::<_, i64>(2),
                    )
                });
            let insert = format!("INSERT INTO {table} (session_key, text, at) VALUES ($1, $2, $3)");
            if let Some((id, last_text, last_at)) = &last {
                if last_text == text {
                    // A repeat is skipped but touches the session: its last event moves
                    // to the end of the order, unchanged.
                    c.execute_prepared(&format!("DELETE FROM {table} WHERE id = $1"), &[id])
                        .await
                        .map_err(pg_error("touch system events"))?;
                    c.execute_prepared(&insert, &[&key, last_text, last_at])
                        .await
                        .map_err(pg_error("touch system events"))?;
                    return Ok(false);
                }
            }
            c.execute_prepared(&insert, &[&key, &text, &event_time_to_i64(at)])
                .await
                .map_err(pg_error("queue a system event"))?;
            // The session keeps its `max_events` newest events; a new session may push
            // the least recently touched ones out.
            let (eviction_lock, lock_prefix) = (
                format!("{}/system-events", self.store.schema),
                self.lock_prefix(),
            );
            KeyedLog {
                table: &table,
                key_column: "session_key",
                counted: "TRUE",
                eviction_lock: &eviction_lock,
                lock_prefix: &lock_prefix,
                trim_op: "trim system events",
                evict_op: "evict system events",
            }
            .bound(
                c,
                &key,
                history_bound(self.max_events),
                history_bound(self.max_sessions),
                last.is_none(),
            )
            .await?;
            Ok(true)
        }
        .await;
        open.end(result).await
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        let client = self.store.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT session_key, text, at FROM {} ORDER BY id",
                    self.table()
                ),
                &[],
            )
            .await
            .map_err(pg_error("read system events"))?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        queues_of(rows)
    }

    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        let key = key.to_string();
        let table = self.table();
        let open = self.begin(&key).await?;
        let result = async {
            let c = open.client();
            let held: bool = c
                .query_one_prepared(
                    &format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE session_key = $1)"),
                    &[&key],
                )
                .await
                .map_err(pg_error("copy system events"))?
                .get(0);
            if held {
                return Ok(false);
            }
            for event in &events {
                c.execute_prepared(
                    &format!("INSERT INTO {table} (session_key, text, at) VALUES ($1, $2, $3)"),
                    &[&key, &event.text, &event_time_to_i64(event.at)],
                )
                .await
                .map_err(pg_error("copy system events"))?;
            }
            Ok(true)
        }
        .await;
        open.end(result).await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        let key = key.to_string();
        let lock = format!("{}{key}", self.lock_prefix());
        let open = OpenTransaction(Some(self.store.client().await?));
        let c = open.client();
        let drain = format!(
            "WITH drained AS (
                 DELETE FROM {} WHERE session_key = $1 RETURNING id, text, at)
             SELECT text, at FROM drained ORDER BY id",
            self.table()
        );
        let statements = tokio::try_join!(
            c.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"),
            c.prepare_cached(&drain),
        );
        let (lock_statement, drain) = match statements {
            Ok(statements) => statements,
            Err(e) => return Err(open.abandon(pg_error("drain system events")(e)).await),
        };
        let (lock_params, drain_params): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
            (&[&lock], &[&key]);
        // One round trip: BEGIN, the lock, the drain and COMMIT go out together (a
        // failed statement makes the COMMIT a rollback).
        let (begun, locked, drained, committed) = tokio::join!(
            biased;
            c.batch_execute("BEGIN"),
            c.execute(&lock_statement, lock_params),
            c.query(&drain, drain_params),
            c.batch_execute("COMMIT"),
        );
        let result = begun
            .map_err(pg_error("begin a transaction"))
            .and(locked.map_err(pg_error("lock system events")))
            .and(drained.map_err(pg_error("drain system events")))
            .map(|rows| {
                rows.iter()
                    .map(|row| SystemEvent {
                        text: row.get(0),
                        at: event_time_from_i64(row.get(1)),
                    })
                    .collect()
            });
        open.end_pipelined(Ok(Committed {
            committed: committed.map_err(pg_error("commit")),
            result,
        }))
        .await
    }
}
