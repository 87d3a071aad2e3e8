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

use super::sql::{self, decode, log_records, LogColumns, SessionRow, SqlValue};
use super::{Durability, ListFilter, Mutator, SessionStore, StoredSession};
use crate::error::{Error, Result};
use crate::fsutil::{blocking, create_private_dir_all};
use crate::key::{AgentId, SessionKey};
use crate::transcript::lines::{
    archived_name, header_line, leaf_of, read_line, session_id_of_name, stamp_entries,
    validate_transcript_name,
};
use crate::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
    TranscriptUpdate, UpdateHub,
};

const BACKEND: &str = "sqlite";

/// The schema, one migration per version; applied in order on open.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    session_key    TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    updated_at     INTEGER NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    revision       INTEGER NOT NULL,
    entry          TEXT NOT NULL
);
CREATE INDEX sessions_by_agent_activity ON sessions (agent_id, updated_at DESC);
CREATE INDEX sessions_by_activity ON sessions (updated_at DESC);
CREATE INDEX sessions_by_person ON sessions (person_id, agent_identity) WHERE person_id IS NOT NULL;
CREATE INDEX sessions_by_session_id ON sessions (session_id);

CREATE TABLE transcripts (
    agent_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    line_count INTEGER NOT NULL,
    leaf       TEXT,
    PRIMARY KEY (agent_id, name)
);
CREATE INDEX transcripts_by_session ON transcripts (agent_id, session_id);

CREATE TABLE transcript_lines (
    agent_id       TEXT NOT NULL,
    name           TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    line           TEXT NOT NULL,
    log_at         INTEGER,
    person_id      TEXT,
    agent_identity TEXT,
    session_key    TEXT,
    PRIMARY KEY (agent_id, name, seq)
);
CREATE INDEX log_by_person ON transcript_lines (person_id, agent_identity, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_agent ON transcript_lines (agent_id, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_session_key ON transcript_lines (session_key, log_at) WHERE log_at IS NOT NULL;
"#,
    r#"
CREATE TABLE search_messages (
    id             TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    session_key    TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    channel        TEXT,
    direction      TEXT,
    correlation_id TEXT,
    at             INTEGER NOT NULL,
    text           TEXT NOT NULL,
    category       TEXT,
    embedding      BLOB
);
CREATE INDEX search_messages_by_time ON search_messages (at);
CREATE INDEX search_messages_by_session ON search_messages (session_id, at);
CREATE INDEX search_messages_by_person ON search_messages (person_id, at);
CREATE INDEX search_messages_uncategorized ON search_messages (at) WHERE category IS NULL;
CREATE INDEX search_messages_unembedded ON search_messages (at) WHERE embedding IS NULL;
CREATE VIRTUAL TABLE search_text USING fts5(
    text, content = 'search_messages', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER search_messages_indexed AFTER INSERT ON search_messages BEGIN
    INSERT INTO search_text (rowid, text) VALUES (new.rowid, new.text);
END;
"#,
];

#[path = "sqlite_search.rs"]
mod search;

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
/// let manager = SessionManager::builder(db.clone()).transcripts(db).build();
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
}

type Guard = OwnedMutexGuard<Connection>;

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
        let path = crate::paths::expand_home(path.as_ref());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        // Created owner-only; SQLite gives its -wal and -shm files the same mode.
        if let Err(e) = crate::fsutil::create_private(&path) {
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
        let path = crate::paths::expand_home(path.as_ref());
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
        let has_schema: bool = connection
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master
                 WHERE type = 'table' AND name = 'schema_migrations')",
                [],
                |row| row.get(0),
            )
            .map_err(db_error("read the schema"))?;
        if !has_schema {
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

    fn from_connection(path: PathBuf, connection: Connection) -> Self {
        SqliteStore {
            inner: Arc::new(Inner {
                path,
                connection: Arc::new(Mutex::new(connection)),
                hub: UpdateHub::default(),
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
        self.read(move |c| {
            let tx = c
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(db_error("begin a transaction"))?;
            let value = work(&tx)?;
            tx.commit().map_err(db_error("commit"))?;
            Ok(value)
        })
        .await
    }
}

fn configure(connection: &Connection, options: &SqliteOptions) -> Result<()> {
    connection
        .busy_timeout(options.busy_timeout)
        .map_err(db_error("set the busy timeout"))?;
    let synchronous = match options.durability {
        Durability::Unsynced => "OFF",
        Durability::SyncFile => "NORMAL",
        _ => "FULL",
    };
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
        ))
        .map_err(db_error("configure the connection"))
}

fn schema_version(connection: &Connection) -> Result<i64> {
    connection
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        )
        .map_err(db_error("read the schema version"))
}

/// Applies the migrations the database lacks, in one write transaction (two processes
/// opening a new database at once migrate it once).
fn migrate(connection: &Connection) -> Result<()> {
    let latest = MIGRATIONS.len() as i64;
    connection
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(db_error("begin a migration"))?;
    let result = (|| {
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                    version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
            )
            .map_err(db_error("create the migrations table"))?;
        let found = schema_version(connection)?;
        if found > latest {
            return Err(Error::UnsupportedSchema {
                backend: BACKEND,
                found,
                supported: latest,
            });
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            connection
                .execute_batch(migration)
                .map_err(db_error("migrate the schema"))?;
            connection
                .execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                    params![index as i64 + 1, Utc::now().timestamp_millis()],
                )
                .map_err(db_error("record a migration"))?;
            tracing::info!(version = index + 1, "sqlite schema migrated");
        }
        Ok(())
    })();
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    connection
        .execute_batch(end)
        .map_err(db_error("finish a migration"))?;
    result
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
             person_id, agent_identity, revision, entry)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (session_key) DO UPDATE SET
             agent_id = excluded.agent_id, session_id = excluded.session_id,
             updated_at = excluded.updated_at, channel = excluded.channel,
             chat_type = excluded.chat_type, person_id = excluded.person_id,
             agent_identity = excluded.agent_identity, revision = excluded.revision,
             entry = excluded.entry",
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
            row.entry
        ])
    })
    .map_err(db_error("write a session"))?;
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

#[async_trait]
impl SessionStore for SqliteStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let raw = key.to_string();
        let row = self.read(move |c| read_row(c, &raw)).await?;
        row.map(|(revision, json)| decode(&self.inner.path, key.as_str(), revision, &json))
            .transpose()
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        let location = self.inner.path.clone();
        // Take the write lock first, then read: no other process can change the row
        // between the read and the write.
        let guard = self.lock().await;
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread
        {
            // The whole transaction on this worker, which tokio replaces meanwhile: one
            // hand-over instead of two trips to the blocking pool.
            let mut connection = guard;
            return tokio::task::block_in_place(|| {
                let row = begin_update(&mut connection, key)?;
                let change = change(&location, key, row, mutator);
                finish_update(&mut connection, key, &change_summary(&change))?;
                change.map(Change::into_stored)
            });
        }
        let raw = key.clone();
        let (guard, row) = self.run(guard, move |c| begin_update(c, &raw)).await?;
        let change = change(&location, key, row, mutator);
        let (outcome, raw) = (change_summary(&change), key.clone());
        self.run(guard, move |c| finish_update(c, &raw, &outcome))
            .await?;
        change.map(Change::into_stored)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let clause = sql::session_filter(filter, &|n| format!("?{n}"));
        let query = format!(
            "SELECT session_key, revision, entry FROM sessions{} \
             ORDER BY updated_at DESC, session_key ASC{}",
            clause.sql,
            sql::Where::limit(filter.limit)
        );
        let rows: Vec<(String, i64, String)> = self
            .read(move |c| {
                let mut statement = c.prepare(&query).map_err(db_error("list sessions"))?;
                let rows = statement
                    .query_map(params_from_iter(clause.values.iter().map(to_sql)), |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .map_err(db_error("list sessions"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("list sessions"))?;
                Ok(rows)
            })
            .await?;
        Ok(sql::decode_listed(
            &self.inner.path,
            rows.iter()
                .map(|(key, revision, json)| (key.as_str(), *revision, json.as_str())),
        ))
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if !filter.is_everything() {
            return Ok(self.list(filter).await?.len());
        }
        let count: i64 = self
            .read(|c| {
                c.query_row("SELECT COUNT(*) FROM sessions", [], |row| row.get(0))
                    .map_err(db_error("count sessions"))
            })
            .await?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        let rows: Vec<(String, i64, String)> = self
            .read(|c| {
                let mut statement = c
                    .prepare(
                        "SELECT session_key, revision, entry FROM sessions ORDER BY session_key",
                    )
                    .map_err(db_error("read sessions"))?;
                let rows = statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .map_err(db_error("read sessions"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("read sessions"));
                rows
            })
            .await?;
        Ok(sql::undecodable(
            &self.inner.path,
            rows.iter().map(|(k, r, j)| (k.as_str(), *r, j.as_str())),
        ))
    }
}

/// What an update does to one row.
struct Change {
    /// The session as it was.
    current: Option<StoredSession>,
    /// The session as the mutator left it, if it changed.
    after: Option<(SessionKey, Option<crate::entry::SessionEntry>)>,
    /// The row to write (`None` with a change: delete).
    row: Option<SessionRow>,
}

impl Change {
    fn into_stored(self) -> Option<StoredSession> {
        match self.after {
            None => self.current,
            Some((key, entry)) => {
                let revision = self
                    .row
                    .as_ref()
                    .map(|row| sql::revision_from_i64(row.revision));
                entry.zip(revision).map(|(entry, revision)| StoredSession {
                    key,
                    entry,
                    revision,
                })
            }
        }
    }
}

/// Begins the write transaction and reads the row.
fn begin_update(c: &mut Connection, key: &SessionKey) -> Result<Option<(i64, String)>> {
    abandon_stale_transaction(c);
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(db_error("begin a transaction"))?;
    let row = read_row(c, key.as_str());
    if row.is_err() {
        let _ = c.execute_batch("ROLLBACK");
    }
    row
}

/// Runs the mutator on the row read.
fn change(
    location: &Path,
    key: &SessionKey,
    row: Option<(i64, String)>,
    mutator: &mut Mutator<'_>,
) -> Result<Change> {
    let current = row
        .map(|(revision, json)| decode(location, key.as_str(), revision, &json))
        .transpose()?;
    let mut slot = current.as_ref().map(|s| s.entry.clone());
    mutator(&mut slot, current.as_ref().map(|s| s.revision))?;
    if slot.as_ref() == current.as_ref().map(|s| &s.entry) {
        return Ok(Change {
            current,
            after: None,
            row: None,
        });
    }
    let row = slot
        .as_ref()
        .map(|entry| SessionRow::new(key, entry))
        .transpose()?;
    Ok(Change {
        current,
        after: Some((key.clone(), slot)),
        row,
    })
}

/// What the finishing step needs of a change: write this row, delete, or roll back.
enum Finish {
    Write(Box<SessionRow>),
    Delete,
    RollBack,
}

fn change_summary(change: &Result<Change>) -> Finish {
    match change {
        Ok(Change {
            after: Some(_),
            row: Some(row),
            ..
        }) => Finish::Write(Box::new(row.clone())),
        Ok(Change { after: Some(_), .. }) => Finish::Delete,
        _ => Finish::RollBack,
    }
}

/// Writes (and commits) or rolls back.
fn finish_update(c: &mut Connection, key: &SessionKey, finish: &Finish) -> Result<()> {
    let written = match finish {
        Finish::RollBack => {
            return c.execute_batch("ROLLBACK").map_err(db_error("roll back"));
        }
        Finish::Write(row) => write_row(c, row),
        Finish::Delete => c
            .execute(
                "DELETE FROM sessions WHERE session_key = ?1",
                [key.as_str()],
            )
            .map(drop)
            .map_err(db_error("delete a session")),
    };
    match written {
        Ok(()) => c.execute_batch("COMMIT").map_err(db_error("commit")),
        Err(error) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

// ---------------------------------------------------------------------------------
// Transcripts

/// A transcript's row: how many lines it has and its last entry's id.
fn transcript_row(
    c: &Connection,
    agent: &str,
    name: &str,
) -> Result<Option<(i64, Option<String>)>> {
    c.query_row(
        "SELECT line_count, leaf FROM transcripts WHERE agent_id = ?1 AND name = ?2",
        [agent, name],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .optional()
    .map_err(db_error("read a transcript"))
}

/// Inserts lines `first..` of a transcript, with their message-log columns.
fn insert_lines(
    c: &Connection,
    agent: &str,
    name: &str,
    first: i64,
    lines: &[String],
) -> Result<()> {
    let mut statement = c
        .prepare_cached(
            "INSERT INTO transcript_lines (agent_id, name, seq, line, log_at, person_id,
                 agent_identity, session_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(db_error("append to a transcript"))?;
    for (index, line) in lines.iter().enumerate() {
        let log = LogColumns::of_line(line);
        statement
            .execute(params![
                agent,
                name,
                first + index as i64,
                line,
                log.as_ref().map(|l| l.at),
                log.as_ref().and_then(|l| l.person_id.clone()),
                log.as_ref().and_then(|l| l.agent_identity.clone()),
                log.as_ref().and_then(|l| l.session_key.clone()),
            ])
            .map_err(db_error("append to a transcript"))?;
    }
    Ok(())
}

/// Creates a transcript of `lines` unless it exists; whether it did.
fn create_transcript(c: &Connection, agent: &str, name: &str, lines: &[String]) -> Result<bool> {
    if transcript_row(c, agent, name)?.is_some() {
        return Ok(false);
    }
    c.execute(
        "INSERT INTO transcripts (agent_id, name, session_id, line_count, leaf)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            agent,
            name,
            session_id_of_name(name),
            lines.len() as i64,
            leaf_of(lines.iter().map(String::as_str))
        ],
    )
    .map_err(db_error("create a transcript"))?;
    insert_lines(c, agent, name, 0, lines)?;
    Ok(true)
}

fn transcript_lines(
    c: &Connection,
    agent: &str,
    name: &str,
    from: i64,
) -> Result<Vec<(i64, String)>> {
    let mut statement = c
        .prepare_cached(
            "SELECT seq, line FROM transcript_lines
             WHERE agent_id = ?1 AND name = ?2 AND seq >= ?3 ORDER BY seq",
        )
        .map_err(db_error("read a transcript"))?;
    let rows = statement
        .query_map(params![agent, name, from], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(db_error("read a transcript"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_error("read a transcript"))?;
    Ok(rows)
}

#[async_trait]
impl TranscriptStore for SqliteStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let line = header_line(header);
        self.write(move |tx| create_transcript(tx, &agent, &name, &[line]))
            .await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let agent = child.agent.to_string();
        let (parent_agent, parent_name) = (parent.agent.to_string(), parent.file_name()?);
        let child_name = child.file_name()?;
        let mut header = header.clone();
        if header.parent_session.is_none() {
            header.parent_session = Some(parent_name.clone());
        }
        let header = header_line(&header);
        self.write(move |tx| {
            if transcript_row(tx, &agent, &child_name)?.is_some() {
                return Ok(false);
            }
            // The parent's entries, verbatim: the same ids, so the fork's context is
            // the parent's.
            let mut lines = vec![header];
            lines.extend(
                transcript_lines(tx, &parent_agent, &parent_name, 1)?
                    .into_iter()
                    .map(|(_, line)| line)
                    .filter(|line| serde_json::from_str::<TranscriptEntry>(line).is_ok()),
            );
            create_transcript(tx, &agent, &child_name, &lines)
        })
        .await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let session_id = transcript.session_id.clone();
        let location = self.inner.path.clone();
        let events = self
            .write(move |tx| {
                let mut entries = entries;
                let (count, leaf) = match transcript_row(tx, &agent, &name)? {
                    Some(row) => row,
                    None => {
                        let header = header_line(&SessionHeader::new(&session_id, Utc::now()));
                        create_transcript(tx, &agent, &name, &[header])?;
                        (1, None)
                    }
                };
                let (lines, leaf) = stamp_entries(&mut entries, leaf, Utc::now())
                    .map_err(|e| Error::encode(format!("a transcript entry for {}", location.display()), e))?;
                insert_lines(tx, &agent, &name, count, &lines)?;
                tx.execute(
                    "UPDATE transcripts SET line_count = ?3, leaf = ?4 WHERE agent_id = ?1 AND name = ?2",
                    params![agent, name, count + lines.len() as i64, leaf],
                )
                .map_err(db_error("append to a transcript"))?;
                Ok(entries
                    .into_iter()
                    .enumerate()
                    .map(|(index, entry)| {
                        let seq = count + index as i64;
                        SessionEvent {
                            offset: Offset(seq as u64),
                            line: seq as usize + 1,
                            entry,
                        }
                    })
                    .collect::<Vec<_>>())
            })
            .await?;
        self.inner.hub.publish(TranscriptUpdate {
            transcript: transcript.clone(),
            path: None,
            events: events.clone(),
        });
        Ok(events)
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let location = self.inner.path.clone();
        self.read(move |c| {
            let Some((count, _)) = transcript_row(c, &agent, &name)? else {
                return Ok(TranscriptRead {
                    next: from,
                    ..TranscriptRead::default()
                });
            };
            let count = count as u64;
            if from.0 > count {
                return Err(Error::InvalidOffset {
                    path: location.join(&name),
                    offset: from.0,
                    len: count,
                });
            }
            let mut read = TranscriptRead {
                next: Offset(count),
                ..TranscriptRead::default()
            };
            for (seq, line) in transcript_lines(c, &agent, &name, from.0 as i64)? {
                read_line(
                    &mut read,
                    seq as usize + 1,
                    Offset(seq as u64),
                    line.as_bytes(),
                );
            }
            Ok(read)
        })
        .await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        self.write(move |tx| {
            if transcript_row(tx, &agent, &name)?.is_none() {
                return Ok(None);
            }
            let base = archived_name(&name, reason, at);
            let mut target = base.clone();
            let mut attempt = 1;
            while transcript_row(tx, &agent, &target)?.is_some() {
                target = format!("{base}-{attempt}");
                attempt += 1;
            }
            for table in ["transcripts", "transcript_lines"] {
                tx.execute(
                    &format!("UPDATE {table} SET name = ?3 WHERE agent_id = ?1 AND name = ?2"),
                    params![agent, name, target],
                )
                .map_err(db_error("archive a transcript"))?;
            }
            Ok(Some(PathBuf::from(target)))
        })
        .await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM transcript_lines WHERE agent_id = ?1 AND name = ?2",
                [&agent, &name],
            )
            .map_err(db_error("remove a transcript"))?;
            tx.execute(
                "DELETE FROM transcripts WHERE agent_id = ?1 AND name = ?2",
                [&agent, &name],
            )
            .map(|removed| removed > 0)
            .map_err(db_error("remove a transcript"))
        })
        .await
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let clause = sql::log_filter(query, &|n| format!("?{n}"));
        let statement = format!(
            "SELECT l.agent_id, t.session_id, l.seq, l.line
             FROM transcript_lines l JOIN transcripts t ON t.agent_id = l.agent_id AND t.name = l.name
             {} ORDER BY l.log_at, t.session_id, l.seq{}",
            clause.sql,
            sql::Where::limit(query.limit)
        );
        let rows: Vec<(String, String, i64, String)> = self
            .read(move |c| {
                let mut prepared = c
                    .prepare(&statement)
                    .map_err(db_error("query the message log"))?;
                let rows = prepared
                    .query_map(params_from_iter(clause.values.iter().map(to_sql)), |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })
                    .map_err(db_error("query the message log"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("query the message log"))?;
                Ok(rows)
            })
            .await?;
        Ok(log_records(rows))
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.hub.subscribe()
    }
}

#[async_trait]
impl TranscriptExport for SqliteStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        let agent = agent.map(ToString::to_string);
        let rows: Vec<(String, String)> = self
            .read(move |c| {
                let mut statement = c
                    .prepare(
                        "SELECT agent_id, name FROM transcripts
                         WHERE ?1 IS NULL OR agent_id = ?1 ORDER BY agent_id, name",
                    )
                    .map_err(db_error("list transcripts"))?;
                let rows = statement
                    .query_map([agent], |row| Ok((row.get(0)?, row.get(1)?)))
                    .map_err(db_error("list transcripts"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("list transcripts"))?;
                Ok(rows)
            })
            .await?;
        rows.into_iter()
            .map(|(agent, name)| Ok((AgentId::new(&agent)?, name)))
            .collect()
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.read(move |c| {
            if transcript_row(c, &agent, &name)?.is_none() {
                return Ok(None);
            }
            Ok(Some(
                transcript_lines(c, &agent, &name, 0)?
                    .into_iter()
                    .map(|(_, line)| line)
                    .collect(),
            ))
        })
        .await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.write(move |tx| create_transcript(tx, &agent, &name, &lines))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SessionStoreExt;
    use crate::SessionEntry;

    fn key() -> SessionKey {
        SessionKey::parse("agent:main:main").unwrap()
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.schema_version().await.unwrap(),
            MIGRATIONS.len() as i64
        );
        drop(store);
        Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)",
                [],
            )
            .unwrap();
        assert!(matches!(
            SqliteStore::open(&path),
            Err(Error::UnsupportedSchema {
                found: 99,
                supported,
                ..
            }) if supported == MIGRATIONS.len() as i64
        ));
    }

    #[tokio::test]
    async fn a_version_1_database_gains_the_search_tables_and_keeps_its_sessions() {
        use crate::search::{LoggedMessage, SearchIndex};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(MIGRATIONS[0]).unwrap();
            old.execute_batch(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
                 INSERT INTO schema_migrations VALUES (1, 0);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();
        drop(store);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().await.unwrap(), 2);
        assert_eq!(
            store.get(&key()).await.unwrap().unwrap().entry.session_id,
            "s-1"
        );
        let message = LoggedMessage {
            id: "main/s-1/1".into(),
            agent: "main".into(),
            session_id: "s-1".into(),
            session_key: None,
            person_id: None,
            agent_identity: None,
            channel: None,
            direction: None,
            correlation_id: None,
            at: Utc::now(),
            text: "the roster for Thursday".into(),
            category: None,
            embedding: None,
        };
        assert_eq!(store.add(vec![message.clone(), message]).await.unwrap(), 1);
        let hits = store
            .full_text("rosters", &Default::default(), 5)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1);
    }

    #[tokio::test]
    async fn a_row_that_is_not_an_entry_is_reported_not_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let store = SqliteStore::open(&path).unwrap();
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();
        Connection::open(&path)
            .unwrap()
            .execute("UPDATE sessions SET entry = '{not json'", [])
            .unwrap();
        assert!(matches!(
            store.get(&key()).await,
            Err(Error::InvalidEntry { .. })
        ));
        assert!(matches!(
            store.update(&key(), |_| ()).await,
            Err(Error::InvalidEntry { .. })
        ));
        // Nothing was written over it.
        let raw: String = Connection::open(&path)
            .unwrap()
            .query_row("SELECT entry FROM sessions", [], |row| row.get(0))
            .unwrap();
        assert_eq!(raw, "{not json");
    }

    #[tokio::test]
    async fn a_busy_database_is_a_transient_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let store = SqliteStore::open_with(
            &path,
            SqliteOptions {
                busy_timeout: Duration::from_millis(50),
                ..SqliteOptions::default()
            },
        )
        .unwrap();
        // Another process holds the write lock.
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let error = store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap_err();
        assert!(error.is_transient(), "{error}");
        other.execute_batch("ROLLBACK").unwrap();
        // The next call goes through.
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_database_and_its_journal_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/sessions.db");
        let store = SqliteStore::open(&path).unwrap();
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        let wal = path.with_file_name("sessions.db-wal");
        assert!(wal.exists(), "WAL mode");
        assert_eq!(mode(&wal), 0o600);
    }
}
