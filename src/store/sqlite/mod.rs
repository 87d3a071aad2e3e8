//! [`SqliteStore`]: sessions, transcripts and the message log in one SQLite file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{
    params, params_from_iter, Connection, OpenFlags, OptionalExtension, TransactionBehavior,
};
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::sql::{self, decode, log_records, Column, LogColumns, SessionRow, SqlValue};
use super::{
    replaced_session, run_mutator, Durability, ListFilter, Mutator, SessionStore, StoredSession,
};
use crate::error::{Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::fs::{blocking, create_private_dir_all};
use crate::transcript::lines::{header_line, validate_transcript_name};
use crate::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
    TranscriptUpdate, UpdateHub,
};

const BACKEND: &str = "sqlite";

mod chatter;
mod feed;
mod keyed_log;
mod schema;
mod search;
mod sessions;
mod system_events;
#[cfg(test)]
mod tests;
mod transcripts;

pub use self::chatter::SqliteChatter;
use self::schema::{migrate, schema_version, MIGRATIONS};
pub use self::system_events::SqliteSystemEvents;

/// How a [`SqliteStore`] waits and syncs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long a writer waits for another process's write transaction (default 10 s);
    /// past it, [`Error::Database`] with `transient: true`.
    pub busy_timeout: Duration,
    /// `Unsynced` is `synchronous = OFF`, `SyncFile` is `NORMAL` (survives a crash of
    /// the process, maybe not a power loss), `SyncFileAndDir` (the default) is `FULL`.
    pub durability: Durability,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            durability: Durability::default(),
        }
    }
}

/// Sessions, transcripts and the message log in one SQLite database (feature
/// `sqlite`).
///
/// One store serves every agent (the agent is a column). Each session update is one
/// `BEGIN IMMEDIATE` transaction — the write lock is taken before the entry is read —
/// so updates from several processes on one file never lose each other. The database
/// runs in WAL mode: readers do not wait for the writer. The file is created
/// owner-only (0600). The schema is versioned and migrated on open; a database from
/// a newer version of the crate is refused ([`Error::UnsupportedSchema`]).
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::store::SqliteStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = SqliteStore::open(dir.path().join("sessions.db"))?;
/// let manager = SessionManager::builder(db.clone()).transcripts(db).build()?;
/// let resolution = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
/// assert!(resolution.is_new());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    connection: Arc<Mutex<Connection>>,
    hub: UpdateHub,
    /// This handle's name in its append notices.
    writer: String,
    /// The task reading other processes' appends from the feed, once started (it ends
    /// with the runtime it was started on; the next subscription starts another).
    feed_reader: std::sync::Mutex<Option<feed::FeedReader>>,
}

type Guard = OwnedMutexGuard<Connection>;

/// Whether the database holds this crate's migration record.
fn has_schema(connection: &Connection) -> Result<bool> {
    connection
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master
             WHERE type = 'table' AND name = 'schema_migrations')",
            [],
            |row| row.get(0),
        )
        .map_err(db_error("read the schema"))
}

fn db_error(op: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
    move |error| {
        let transient = matches!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        Error::Database {
            backend: BACKEND,
            op,
            transient,
            source: Box::new(error),
        }
    }
}

impl SqliteStore {
    /// Opens (or creates) the database at `path` with the default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the database at `path`. A leading `~` is expanded; missing
    /// parent directories are created owner-only.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        let path = crate::store::json::paths::expand_home(path.as_ref());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        // Created owner-only; SQLite gives its -wal and -shm files the same mode.
        if let Err(e) = crate::store::fs::create_private(&path) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(Error::io("create", &path, e));
            }
        }
        let connection = Connection::open(&path).map_err(db_error("open the database"))?;
        configure(&connection, &options)?;
        migrate(&connection)?;
        Ok(SqliteStore::from_connection(path, connection))
    }

    /// Opens the existing database at `path` read-only: nothing is created, the schema
    /// is not migrated, and every write fails with [`Error::Database`]. A missing
    /// file, or one without this crate's tables, is [`Error::StoreNotFound`]; a
    /// schema older than this version's is [`Error::SchemaNotMigrated`].
    ///
    /// ```
    /// use agent_sessions::store::SqliteStore;
    /// use agent_sessions::{Error, SessionStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let file = dir.path().join("sessions.db");
    /// let missing = SqliteStore::open_read_only(&file).unwrap_err();
    /// assert!(matches!(missing, Error::StoreNotFound { .. }));
    /// assert!(!file.exists(), "nothing was created");
    ///
    /// SqliteStore::open(&file)?;
    /// let db = SqliteStore::open_read_only(&file)?;
    /// assert_eq!(db.count(&agent_sessions::ListFilter::new()).await?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        let path = crate::store::json::paths::expand_home(path.as_ref());
        let not_found = |problem: &str| Error::StoreNotFound {
            store: format!("sqlite:{}", path.display()),
            problem: problem.to_owned(),
        };
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Err(not_found("it is not a file")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(not_found("the file does not exist"))
            }
            Err(e) => return Err(Error::io("read", &path, e)),
        }
        let connection = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(db_error("open the database"))?;
        connection
            .busy_timeout(SqliteOptions::default().busy_timeout)
            .map_err(db_error("set the busy timeout"))?;
        if !has_schema(&connection)? {
            return Err(not_found("the file holds no agent-sessions tables"));
        }
        let found = schema_version(&connection)?;
        let latest = MIGRATIONS.len() as i64;
        if found > latest {
            return Err(Error::UnsupportedSchema {
                backend: BACKEND,
                found,
                supported: latest,
            });
        }
        if found < latest {
            return Err(Error::SchemaNotMigrated {
                backend: BACKEND,
                found,
                supported: latest,
            });
        }
        Ok(SqliteStore::from_connection(path, connection))
    }

    /// Whether the database at `path` (a file that exists) holds this crate's tables,
    /// read without writing: a store opened as [`OpenMode::Existing`](crate::store::OpenMode::Existing)
    /// must not be made in another program's database.
    pub(crate) fn holds_store(path: &Path) -> Result<bool> {
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(db_error("open the database"))?;
        connection
            .busy_timeout(SqliteOptions::default().busy_timeout)
            .map_err(db_error("set the busy timeout"))?;
        has_schema(&connection)
    }

    fn from_connection(path: PathBuf, connection: Connection) -> Self {
        SqliteStore {
            inner: Arc::new(Inner {
                path,
                connection: Arc::new(Mutex::new(connection)),
                hub: UpdateHub::default(),
                writer: uuid::Uuid::new_v4().simple().to_string(),
                feed_reader: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The schema version of the database (the newest this crate knows after open).
    pub async fn schema_version(&self) -> Result<i64> {
        self.read(|c| schema_version(c)).await
    }

    /// Creates (or re-creates) the SQL views with RABS's and ClawOS's shapes over this
    /// database's tables — `type2_sessions`, `type2_sessions_history`, `type2_messages`
    /// and `clawos_sessions` — so their SQL and dashboards read the crate's sessions and message log (see
    /// [`views`](crate::ops::ViewSchemas) for every column). Idempotent; one transaction.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::store::SqliteStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = SqliteStore::open(dir.path().join("sessions.db"))?;
    /// db.create_views().await?;
    /// db.create_views().await?; // again: replaced, no error
    /// let key = SessionKey::parse("agent:main:whatsapp:dm:+15550001")?;
    /// db.put(&key, SessionEntry::new("s-1", 1_770_000_000_000)).await?;
    ///
    /// let raw = rusqlite::Connection::open(db.path()).unwrap();
    /// let (id, jid): (String, String) = raw
    ///     .query_row("SELECT session_id, remote_jid FROM clawos_sessions", [], |r| {
    ///         Ok((r.get(0)?, r.get(1)?))
    ///     })
    ///     .unwrap();
    /// assert_eq!((id.as_str(), jid.as_str()), ("s-1", "+15550001"));
    /// db.drop_views().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_views(&self) -> Result<()> {
        let batch = crate::ops::views::sqlite_create();
        self.write(move |tx| {
            tx.execute_batch(&batch)
                .map_err(db_error("create the views"))
        })
        .await
    }

    /// Drops the views [`create_views`](Self::create_views) made (those that are
    /// there); the tables are untouched.
    pub async fn drop_views(&self) -> Result<()> {
        self.write(|tx| {
            tx.execute_batch(crate::ops::views::SQLITE_DROP)
                .map_err(db_error("drop the views"))
        })
        .await
    }

    /// Runs `work` on the connection off the async executor.
    async fn run<T, F>(&self, guard: Guard, work: F) -> Result<(Guard, T)>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        blocking(&self.inner.path, move || {
            let mut guard = guard;
            work(&mut guard).map(|value| (guard, value))
        })
        .await
    }

    async fn lock(&self) -> Guard {
        self.inner.connection.clone().lock_owned().await
    }

    /// A read (or a self-contained write) on the connection.
    async fn read<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let guard = self.lock().await;
        Ok(self
            .run(guard, move |c| {
                abandon_stale_transaction(c);
                work(c)
            })
            .await?
            .1)
    }

    /// A write transaction (`BEGIN IMMEDIATE`): `work` runs inside it, which commits
    /// when `work` succeeds and rolls back when it fails.
    async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&rusqlite::Transaction<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let started = std::time::Instant::now();
        self.read(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_error("begin a transaction"))?;
            crate::ops::telemetry::lock_taken(BACKEND, started.elapsed());
            let value = work(&tx)?;
            tx.commit().map_err(db_error("commit"))?;
            Ok(value)
        })
        .await
    }
}

fn configure(connection: &Connection, options: &SqliteOptions) -> Result<()> {
    // Room for every statement the store prepares, including an update's few shapes
    // (which columns it assigns).
    connection.set_prepared_statement_cache_capacity(64);
    connection
        .busy_timeout(options.busy_timeout)
        .map_err(db_error("set the busy timeout"))?;
    let synchronous = match options.durability {
        Durability::Unsynced => "OFF",
        Durability::SyncFile => "NORMAL",
        _ => "FULL",
    };
    let pragmas = format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON; PRAGMA secure_delete = ON;"
    );
    // Switching a new database to WAL needs it to itself, and SQLite answers "busy"
    // at once, without waiting, when another process is opening it at that moment:
    // try again for as long as the busy timeout allows.
    let started = std::time::Instant::now();
    loop {
        match connection.execute_batch(&pragmas) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < options.busy_timeout =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            done => return done.map_err(db_error("configure the connection")),
        }
    }
}

/// A task cancelled mid-update can leave its transaction open on the shared
/// connection; the next user rolls it back (nothing of it was committed).
fn abandon_stale_transaction(connection: &Connection) {
    if !connection.is_autocommit() {
        tracing::warn!("rolling back a transaction a cancelled task left open");
        let _ = connection.execute_batch("ROLLBACK");
    }
}

fn to_sql(value: &SqlValue) -> rusqlite::types::Value {
    match value {
        SqlValue::Text(text) => rusqlite::types::Value::Text(text.clone()),
        SqlValue::Int(int) => rusqlite::types::Value::Integer(*int),
    }
}

fn write_row(tx: &Connection, row: &SessionRow) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO sessions (session_key, agent_id, session_id, updated_at, channel, chat_type,
             person_id, agent_identity, revision, entry, status)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (session_key) DO UPDATE SET
             agent_id = excluded.agent_id, session_id = excluded.session_id,
             updated_at = excluded.updated_at, channel = excluded.channel,
             chat_type = excluded.chat_type, person_id = excluded.person_id,
             agent_identity = excluded.agent_identity, revision = excluded.revision,
             entry = excluded.entry, status = excluded.status",
    )
    .and_then(|mut statement| {
        statement.execute(params![
            row.session_key,
            row.agent_id,
            row.session_id,
            row.updated_at,
            row.channel,
            row.chat_type,
            row.person_id,
            row.agent_identity,
            row.revision,
            row.entry,
            row.status
        ])
    })
    .map_err(db_error("write a session"))?;
    Ok(())
}

/// Keeps a session replaced under its key as a closed row (and drops the key's
/// oldest closed rows beyond the bound), in the caller's transaction.
fn write_closed_row(tx: &Connection, row: &SessionRow, closed_at: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO closed_sessions (session_id, session_key, agent_id, updated_at,
             channel, chat_type, person_id, agent_identity, status, revision, entry, closed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )
    .and_then(|mut statement| {
        statement.execute(params![
            row.session_id,
            row.session_key,
            row.agent_id,
            row.updated_at,
            row.channel,
            row.chat_type,
            row.person_id,
            row.agent_identity,
            row.status,
            row.revision,
            row.entry,
            closed_at
        ])
    })
    .and_then(|_| {
        tx.execute(
            &sql::trim_closed_sql("closed_sessions", "?1"),
            [row.session_key.as_str()],
        )
    })
    .map_err(db_error("keep a closed session"))?;
    Ok(())
}

fn read_row(c: &Connection, key: &str) -> Result<Option<(i64, String)>> {
    c.prepare_cached("SELECT revision, entry FROM sessions WHERE session_key = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .map_err(db_error("read a session"))
}

/// The row stored under `key`, every column.
fn read_whole_row(c: &Connection, key: &str) -> Result<Option<SessionRow>> {
    c.prepare_cached(
        "SELECT agent_id, session_id, updated_at, channel, chat_type, person_id,
             agent_identity, status, revision, entry
         FROM sessions WHERE session_key = ?1",
    )
    .and_then(|mut statement| {
        statement
            .query_row([key], |row| {
                Ok(SessionRow {
                    session_key: key.to_owned(),
                    agent_id: row.get(0)?,
                    session_id: row.get(1)?,
                    updated_at: row.get(2)?,
                    channel: row.get(3)?,
                    chat_type: row.get(4)?,
                    person_id: row.get(5)?,
                    agent_identity: row.get(6)?,
                    status: row.get(7)?,
                    revision: row.get(8)?,
                    entry: row.get(9)?,
                })
            })
            .optional()
    })
    .map_err(db_error("read a session"))
}

/// Writes `row` over `before`, the same key's row as it is stored, assigning only the
/// columns that changed: SQLite rewrites every index one of whose columns is assigned,
/// so an update that leaves, say, the update time alone commits fewer pages.
fn update_row(tx: &Connection, row: &SessionRow, before: &SessionRow) -> Result<()> {
    let changed = row.changed_columns(before);
    let mut statement = String::from("UPDATE sessions SET revision = ?2, entry = ?3");
    let mut values: Vec<&dyn rusqlite::ToSql> = vec![&row.session_key, &row.revision, &row.entry];
    for column in changed {
        values.push(match column {
            Column::AgentId => &row.agent_id,
            Column::SessionId => &row.session_id,
            Column::UpdatedAt => &row.updated_at,
            Column::Channel => &row.channel,
            Column::ChatType => &row.chat_type,
            Column::PersonId => &row.person_id,
            Column::AgentIdentity => &row.agent_identity,
            Column::Status => &row.status,
        });
        statement.push_str(&format!(", {} = ?{}", column.name(), values.len()));
    }
    statement.push_str(" WHERE session_key = ?1");
    tx.prepare_cached(&statement)
        .and_then(|mut statement| statement.execute(values.as_slice()))
        .map_err(db_error("write a session"))?;
    Ok(())
}
