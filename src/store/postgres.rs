//! [`PostgresStore`]: sessions, transcripts and the message log on a PostgreSQL server.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

use super::sql::{self, decode, lock_id, log_records, LogColumns, SessionRow, SqlValue};
use super::{ListFilter, Mutator, OpenMode, SessionStore, StoredSession};
use crate::error::{Error, Result};
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

const BACKEND: &str = "postgres";

/// The schema, one migration per version, `{schema}` standing for the store's schema.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE {schema}.sessions (
    session_key    TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    updated_at     BIGINT NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    revision       BIGINT NOT NULL,
    entry          TEXT NOT NULL
);
CREATE INDEX sessions_by_agent_activity ON {schema}.sessions (agent_id, updated_at DESC);
CREATE INDEX sessions_by_activity ON {schema}.sessions (updated_at DESC);
CREATE INDEX sessions_by_person ON {schema}.sessions (person_id, agent_identity) WHERE person_id IS NOT NULL;
CREATE INDEX sessions_by_session_id ON {schema}.sessions (session_id);

CREATE TABLE {schema}.transcripts (
    agent_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    line_count BIGINT NOT NULL,
    leaf       TEXT,
    PRIMARY KEY (agent_id, name)
);
CREATE INDEX transcripts_by_session ON {schema}.transcripts (agent_id, session_id);

CREATE TABLE {schema}.transcript_lines (
    agent_id       TEXT NOT NULL,
    name           TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    line           TEXT NOT NULL,
    log_at         BIGINT,
    person_id      TEXT,
    agent_identity TEXT,
    session_key    TEXT,
    PRIMARY KEY (agent_id, name, seq)
);
CREATE INDEX log_by_person ON {schema}.transcript_lines (person_id, agent_identity, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_agent ON {schema}.transcript_lines (agent_id, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_session_key ON {schema}.transcript_lines (session_key, log_at) WHERE log_at IS NOT NULL;
"#,
    r#"
CREATE TABLE {schema}.search_messages (
    id             TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    session_key    TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    channel        TEXT,
    direction      TEXT,
    correlation_id TEXT,
    at             BIGINT NOT NULL,
    text           TEXT NOT NULL,
    category       TEXT,
    embedding      REAL[],
    words          TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX search_messages_words ON {schema}.search_messages USING GIN (words);
CREATE INDEX search_messages_by_time ON {schema}.search_messages (at);
CREATE INDEX search_messages_by_session ON {schema}.search_messages (session_id, at);
CREATE INDEX search_messages_by_person ON {schema}.search_messages (person_id, at);
CREATE INDEX search_messages_uncategorized ON {schema}.search_messages (at) WHERE category IS NULL;
CREATE INDEX search_messages_unembedded ON {schema}.search_messages (at) WHERE embedding IS NULL;
"#,
];

#[path = "postgres_search.rs"]
mod search;

/// How a [`PostgresStore`] connects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The schema holding the tables (default `agent_sessions`; created if missing):
    /// several deployments, or test runs, can share one database.
    pub schema: String,
    /// The most connections the pool opens (default 16).
    pub max_connections: usize,
    /// How long a call waits for a free connection (default 30 s).
    pub wait_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            schema: "agent_sessions".into(),
            max_connections: 16,
            wait_timeout: Duration::from_secs(30),
        }
    }
}

impl PostgresOptions {
    /// The default options with tables in `schema`.
    pub fn in_schema(schema: impl Into<String>) -> Self {
        PostgresOptions {
            schema: schema.into(),
            ..PostgresOptions::default()
        }
    }
}

/// Sessions, transcripts and the message log on a PostgreSQL server (feature
/// `postgres`), for bots running as several processes on several machines.
///
/// Connections come from a pool (deadpool); a connection the server dropped is
/// replaced on the next call, and the call that met the loss fails with
/// [`Error::Database`] marked transient. Each session update is one transaction that
/// first takes a transaction-scoped advisory lock on the key, so concurrent updates
/// from any number of hosts — including two creating the same new session — are
/// serialised and none is lost. The schema is versioned and migrated on connect.
///
/// ```no_run
/// use agent_sessions::prelude::*;
/// use agent_sessions::store::PostgresStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let db = PostgresStore::connect("postgres://bot@db.internal/sessions").await?;
/// let manager = SessionManager::builder(db.clone()).transcripts(db).build();
/// # let _ = manager;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    schema: String,
    /// `host …, port …, database …, user …` for connection errors.
    server: String,
    location: PathBuf,
    hub: UpdateHub,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

fn pg_error(op: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Error {
    move |error| {
        let transient = error.is_closed()
            || error.code().is_some_and(|code| {
                let code = code.code();
                // Connection exceptions, shutdowns, serialisation failures, deadlocks,
                // too many connections.
                code.starts_with("08")
                    || code.starts_with("57P")
                    || matches!(code, "40001" | "40P01" | "53300")
            });
        Error::Database {
            backend: BACKEND,
            op,
            transient,
            source: Box::new(error),
        }
    }
}

/// A connection that could not be made, with the server it was for: host, port,
/// database and user (never the password), and the chain of causes.
#[derive(Debug)]
struct ConnectError {
    server: String,
    source: deadpool_postgres::PoolError,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The drivers' messages are terse ("error connecting to server", "db error"):
        // the cause (refused, no such database, bad password) is further down the chain.
        let mut causes: Vec<String> = Vec::new();
        use std::error::Error as _;
        // The pool's own wrapper ("error occurred while creating a new object") adds
        // nothing when it has a cause.
        let mut next: Option<&(dyn std::error::Error + 'static)> = self
            .source
            .source()
            .or(Some(&self.source as &(dyn std::error::Error + 'static)));
        while let Some(error) = next {
            let text = error.to_string();
            if !causes.iter().any(|c| c.contains(&text)) {
                causes.push(text);
            }
            next = error.source();
        }
        write!(f, "{}: {}", self.server, causes.join(": "))
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The configured hosts: names, or socket directories.
fn host_names(config: &tokio_postgres::Config) -> Vec<String> {
    config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect()
}

/// `host h, port p, database "d", user "u"`: what a connection was for, without the
/// password.
fn describe_server(config: &tokio_postgres::Config) -> String {
    let hosts = host_names(config);
    let ports = config
        .get_ports()
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>();
    let user = config.get_user().unwrap_or("(default)");
    format!(
        "host {}, port {}, database {:?}, user {user:?}",
        if hosts.is_empty() {
            "localhost".to_owned()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config
            .get_dbname()
            .or(config.get_user())
            .unwrap_or("(default)"),
    )
}

/// A store URL without the password: `postgres://user@host:port/db?schema=s`.
fn display_url(config: &tokio_postgres::Config, schema: &str) -> String {
    let host = host_names(config)
        .into_iter()
        .next()
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{host}:{port}/{db}?schema={schema}")
}

fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && schema.len() <= 63
}

fn params(values: &[SqlValue]) -> Vec<Box<dyn ToSql + Sync + Send>> {
    values
        .iter()
        .map(|value| -> Box<dyn ToSql + Sync + Send> {
            match value {
                SqlValue::Text(text) => Box::new(text.clone()),
                SqlValue::Int(int) => Box::new(*int),
            }
        })
        .collect()
}

fn refs(values: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| &**v as &(dyn ToSql + Sync)).collect()
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) with the
    /// default options, and migrates the schema.
    pub async fn connect(url: &str) -> Result<Self> {
        PostgresStore::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` and migrates the schema `options.schema`.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        PostgresStore::connect_mode(url, options, OpenMode::Create).await
    }

    /// Connects to `url` read-only: the schema `options.schema` must hold this
    /// crate's tables at this version ([`Error::StoreNotFound`] if it holds none,
    /// [`Error::SchemaNotMigrated`] if they are older); nothing is created or
    /// migrated, and every transaction is read-only (`default_transaction_read_only`).
    ///
    /// ```no_run
    /// use agent_sessions::store::{PostgresOptions, PostgresStore};
    /// use agent_sessions::SessionStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let db = PostgresStore::connect_read_only(
    ///     "postgres://bot@db.internal/sessions",
    ///     PostgresOptions::default(),
    /// )
    /// .await?;
    /// println!("{} sessions", db.count(&agent_sessions::ListFilter::new()).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_read_only(url: &str, options: PostgresOptions) -> Result<Self> {
        PostgresStore::connect_mode(url, options, OpenMode::ReadOnly).await
    }

    pub(crate) async fn connect_mode(
        url: &str,
        options: PostgresOptions,
        access: OpenMode,
    ) -> Result<Self> {
        let invalid = |problem: String| Error::InvalidStoreUrl {
            url: url.to_owned(),
            problem,
        };
        if !valid_schema(&options.schema) {
            return Err(invalid(format!(
                "schema {:?} is not 1-63 characters of [a-z0-9_] starting with a letter or _",
                options.schema
            )));
        }
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| invalid(format!("{e}")))?;
        if access == OpenMode::ReadOnly {
            let options = match config.get_options() {
                Some(given) => format!("{given} -c default_transaction_read_only=on"),
                None => "-c default_transaction_read_only=on".to_owned(),
            };
            config.options(&options);
        }
        let server = describe_server(&config);
        let shown = display_url(&config, &options.schema);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_connections.max(1))
            .wait_timeout(Some(options.wait_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let store = PostgresStore {
            pool,
            location: PathBuf::from(format!("postgres:{}", options.schema)),
            schema: options.schema,
            server,
            hub: UpdateHub::default(),
        };
        if access != OpenMode::Create {
            let found = store
                .existing_version()
                .await?
                .ok_or_else(|| Error::StoreNotFound {
                    store: shown,
                    problem: format!("schema {:?} holds no agent-sessions tables", store.schema),
                })?;
            let latest = MIGRATIONS.len() as i64;
            if access == OpenMode::ReadOnly && found < latest {
                return Err(Error::SchemaNotMigrated {
                    backend: BACKEND,
                    found,
                    supported: latest,
                });
            }
            if found > latest {
                return Err(Error::UnsupportedSchema {
                    backend: BACKEND,
                    found,
                    supported: latest,
                });
            }
        }
        if access != OpenMode::ReadOnly {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// The schema version, or `None` when the schema has no migrations table.
    async fn existing_version(&self) -> Result<Option<i64>> {
        let client = self.client().await?;
        let table = format!("{}.schema_migrations", self.schema);
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .map_err(pg_error("look for the schema"))?
            .get(0);
        if !exists {
            return Ok(None);
        }
        drop(client);
        self.schema_version().await.map(Some)
    }

    /// The schema holding the tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<i64> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT COALESCE(MAX(version), 0) FROM {}.schema_migrations",
                    self.schema
                ),
                &[],
            )
            .await
            .map_err(pg_error("read the schema version"))?;
        Ok(row.get(0))
    }

    /// Drops the store's schema and everything in it. For tests and tear-downs.
    pub async fn drop_schema(&self) -> Result<()> {
        let client = self.client().await?;
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
            .await
            .map_err(pg_error("drop the schema"))
    }

    async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|source| Error::Database {
            backend: BACKEND,
            op: "connect to the server",
            transient: true,
            source: Box::new(ConnectError {
                server: self.server.clone(),
                source,
            }),
        })
    }

    /// `{schema}.table`.
    fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.schema)
    }

    /// Applies the migrations the schema lacks, under an advisory lock so two hosts
    /// starting at once migrate it once.
    async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a migration"))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&lock_id(&format!("agent-sessions migrate {}", self.schema))],
        )
        .await
        .map_err(pg_error("lock the schema for migration"))?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
                 version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
            schema = self.schema
        ))
        .await
        .map_err(pg_error("create the migrations table"))?;
        let found: i64 = tx
            .query_one(
                &format!(
                    "SELECT COALESCE(MAX(version), 0) FROM {}",
                    self.table("schema_migrations")
                ),
                &[],
            )
            .await
            .map_err(pg_error("read the schema version"))?
            .get(0);
        let latest = MIGRATIONS.len() as i64;
        if found > latest {
            return Err(Error::UnsupportedSchema {
                backend: BACKEND,
                found,
                supported: latest,
            });
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.batch_execute(&migration.replace("{schema}", &self.schema))
                .await
                .map_err(pg_error("migrate the schema"))?;
            tx.execute(
                &format!(
                    "INSERT INTO {} (version, applied_at) VALUES ($1, $2)",
                    self.table("schema_migrations")
                ),
                &[&(index as i64 + 1), &Utc::now().timestamp_millis()],
            )
            .await
            .map_err(pg_error("record a migration"))?;
            tracing::info!(version = index + 1, schema = %self.schema, "postgres schema migrated");
        }
        tx.commit().await.map_err(pg_error("commit a migration"))
    }

    /// Locks `what` until the transaction ends.
    async fn lock(&self, tx: &Transaction<'_>, what: &str) -> Result<()> {
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&lock_id(&format!("{}\0{what}", self.schema))],
        )
        .await
        .map_err(pg_error("lock a row"))?;
        Ok(())
    }

    /// Writes `row`: an `UPDATE` of the row that was read, or an `INSERT` of a new one
    /// (the key's advisory lock makes "was read" still true).
    /// The statement that writes `row`: an `UPDATE` when the row exists, else an
    /// `INSERT`; its parameters are [`row_params`].
    fn write_statement(&self, exists: bool) -> String {
        if exists {
            format!(
                "UPDATE {} SET agent_id = $2, session_id = $3, updated_at = $4, channel = $5,
                     chat_type = $6, person_id = $7, agent_identity = $8, revision = $9,
                     entry = $10
                 WHERE session_key = $1",
                self.table("sessions")
            )
        } else {
            format!(
                "INSERT INTO {} (session_key, agent_id, session_id, updated_at, channel,
                     chat_type, person_id, agent_identity, revision, entry)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                self.table("sessions")
            )
        }
    }
}

/// The parameters of [`PostgresStore::write_statement`].
fn row_params(row: &SessionRow) -> [&(dyn ToSql + Sync); 10] {
    [
        &row.session_key,
        &row.agent_id,
        &row.session_id,
        &row.updated_at,
        &row.channel,
        &row.chat_type,
        &row.person_id,
        &row.agent_identity,
        &row.revision,
        &row.entry,
    ]
}

/// A pooled connection inside a transaction this code began by hand (so that `BEGIN`
/// can be pipelined with the first statements and `COMMIT` with the last). If it is
/// dropped before [`OpenTransaction::finish`] — a cancelled future, a panic — the
/// connection is taken out of the pool and closed, so the server rolls the
/// transaction back and releases its locks; it never returns to the pool mid-way.
struct OpenTransaction(Option<Object>);

impl OpenTransaction {
    fn client(&self) -> &Object {
        self.0.as_ref().expect("open until finished")
    }

    /// Ends the transaction's ownership: the connection goes back to the pool.
    fn finish(mut self) {
        self.0.take();
    }

    /// Rolls back and finishes; `error` is what the caller returns.
    async fn abandon(self, error: Error) -> Error {
        match self.client().batch_execute("ROLLBACK").await {
            Ok(()) => self.finish(),
            Err(rollback) => tracing::warn!(%rollback, "rollback failed; the connection is closed"),
        }
        error
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            drop(Object::take(connection));
        }
    }
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT revision, entry FROM {} WHERE session_key = $1",
                    self.table("sessions")
                ),
                &[&key.as_str()],
            )
            .await
            .map_err(pg_error("read a session"))?;
        row.map(|row| decode(&self.location, key.as_str(), row.get(0), row.get(1)))
            .transpose()
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        let client = self.client().await?;
        let lock = client
            .prepare_cached("SELECT pg_advisory_xact_lock($1)")
            .await
            .map_err(pg_error("lock a row"))?;
        let read = client
            .prepare_cached(&format!(
                "SELECT revision, entry FROM {} WHERE session_key = $1",
                self.table("sessions")
            ))
            .await
            .map_err(pg_error("read a session"))?;
        // Serialise updates of this key across every host, also while it does not
        // exist yet (a row lock needs a row). BEGIN, the lock and the read go out
        // together; the server runs the read once the lock is granted.
        let lock_id = lock_id(&format!("{}\0{}", self.schema, key.as_str()));
        let raw_key = key.as_str();
        let (lock_params, read_params): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
            (&[&lock_id], &[&raw_key]);
        let open = OpenTransaction(Some(client));
        let c = open.client();
        let (begun, locked, row) = tokio::join!(
            c.batch_execute("BEGIN"),
            c.execute(&lock, lock_params),
            c.query_opt(&read, read_params)
        );
        let current = match (begun, locked, row) {
            (Ok(()), Ok(_), Ok(row)) => row
                .map(|row| decode(&self.location, key.as_str(), row.get(0), row.get(1)))
                .transpose(),
            (Err(e), _, _) => return Err(pg_error("begin a transaction")(e)),
            (_, Err(e), _) => Err(pg_error("lock a row")(e)),
            (_, _, Err(e)) => Err(pg_error("read a session")(e)),
        };
        let current = match current {
            Ok(current) => current,
            Err(error) => return Err(open.abandon(error).await),
        };
        let mut slot = current.as_ref().map(|s| s.entry.clone());
        if let Err(error) = mutator(&mut slot, current.as_ref().map(|s| s.revision)) {
            return Err(open.abandon(error).await);
        }
        if slot.as_ref() == current.as_ref().map(|s| &s.entry) {
            return match open.client().batch_execute("COMMIT").await {
                Ok(()) => {
                    open.finish();
                    Ok(current)
                }
                Err(e) => Err(pg_error("commit")(e)),
            };
        }
        let (statement, row) = match &slot {
            Some(entry) => match SessionRow::new(key, entry) {
                Ok(row) => (self.write_statement(current.is_some()), Some(row)),
                Err(error) => return Err(open.abandon(error).await),
            },
            None => (
                format!(
                    "DELETE FROM {} WHERE session_key = $1",
                    self.table("sessions")
                ),
                None,
            ),
        };
        let prepared = match open.client().prepare_cached(&statement).await {
            Ok(prepared) => prepared,
            Err(e) => return Err(open.abandon(pg_error("write a session")(e)).await),
        };
        let key_param: [&(dyn ToSql + Sync); 1] = [&raw_key];
        let values: &[&(dyn ToSql + Sync)] = match &row {
            Some(row) => &row_params(row),
            None => &key_param,
        };
        // The write and COMMIT go out together: if the write fails, COMMIT ends the
        // failed transaction as a rollback.
        let c = open.client();
        let (written, committed) =
            tokio::join!(c.execute(&prepared, values), c.batch_execute("COMMIT"));
        // Once COMMIT was answered the transaction is over either way.
        committed.map_err(pg_error("commit"))?;
        open.finish();
        written.map_err(pg_error("write a session"))?;
        Ok(slot.zip(row).map(|(entry, row)| StoredSession {
            key: key.clone(),
            entry,
            revision: sql::revision_from_i64(row.revision),
        }))
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let clause = sql::session_filter(filter, &|n| format!("${n}"));
        let statement = format!(
            "SELECT session_key, revision, entry FROM {}{} \
             ORDER BY updated_at DESC, session_key COLLATE \"C\" ASC{}",
            self.table("sessions"),
            clause.sql,
            sql::Where::limit(filter.limit)
        );
        let values = params(&clause.values);
        let client = self.client().await?;
        let rows = client
            .query(&statement, &refs(&values))
            .await
            .map_err(pg_error("list sessions"))?;
        Ok(sql::decode_listed(
            &self.location,
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))),
        ))
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if !filter.is_everything() {
            return Ok(self.list(filter).await?.len());
        }
        let client = self.client().await?;
        let count: i64 = client
            .query_one(
                &format!("SELECT COUNT(*) FROM {}", self.table("sessions")),
                &[],
            )
            .await
            .map_err(pg_error("count sessions"))?
            .get(0);
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT session_key, revision, entry FROM {} ORDER BY session_key",
                    self.table("sessions")
                ),
                &[],
            )
            .await
            .map_err(pg_error("read sessions"))?;
        Ok(sql::undecodable(
            &self.location,
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))),
        ))
    }
}

// ---------------------------------------------------------------------------------
// Transcripts

impl PostgresStore {
    async fn transcript_row(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
    ) -> Result<Option<(i64, Option<String>)>> {
        Ok(tx
            .query_opt(
                &format!(
                    "SELECT line_count, leaf FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .map(|row| (row.get(0), row.get(1))))
    }

    async fn insert_lines(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        first: i64,
        lines: &[String],
    ) -> Result<()> {
        let statement = tx
            .prepare(&format!(
                "INSERT INTO {} (agent_id, name, seq, line, log_at, person_id, agent_identity,
                     session_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                self.table("transcript_lines")
            ))
            .await
            .map_err(pg_error("append to a transcript"))?;
        for (index, line) in lines.iter().enumerate() {
            let log = LogColumns::of_line(line);
            tx.execute(
                &statement,
                &[
                    &agent,
                    &name,
                    &(first + index as i64),
                    line,
                    &log.as_ref().map(|l| l.at),
                    &log.as_ref().and_then(|l| l.person_id.clone()),
                    &log.as_ref().and_then(|l| l.agent_identity.clone()),
                    &log.as_ref().and_then(|l| l.session_key.clone()),
                ],
            )
            .await
            .map_err(pg_error("append to a transcript"))?;
        }
        Ok(())
    }

    /// Creates a transcript of `lines` unless it exists (the caller holds its lock).
    async fn create_transcript(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        lines: &[String],
    ) -> Result<bool> {
        if self.transcript_row(tx, agent, name).await?.is_some() {
            return Ok(false);
        }
        tx.execute(
            &format!(
                "INSERT INTO {} (agent_id, name, session_id, line_count, leaf)
                 VALUES ($1, $2, $3, $4, $5)",
                self.table("transcripts")
            ),
            &[
                &agent,
                &name,
                &session_id_of_name(name),
                &(lines.len() as i64),
                &leaf_of(lines.iter().map(String::as_str)),
            ],
        )
        .await
        .map_err(pg_error("create a transcript"))?;
        self.insert_lines(tx, agent, name, 0, lines).await?;
        Ok(true)
    }

    async fn lines_from(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        from: i64,
    ) -> Result<Vec<(i64, String)>> {
        Ok(tx
            .query(
                &format!(
                    "SELECT seq, line FROM {} WHERE agent_id = $1 AND name = $2 AND seq >= $3
                     ORDER BY seq",
                    self.table("transcript_lines")
                ),
                &[&agent, &name, &from],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    /// A transaction on `client` holding the lock of transcript `name` of `agent`.
    async fn begin_transcript<'c>(
        &self,
        client: &'c mut Object,
        agent: &str,
        name: &str,
    ) -> Result<Transaction<'c>> {
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        self.lock(&tx, &format!("transcript\0{agent}\0{name}"))
            .await?;
        Ok(tx)
    }
}

#[async_trait]
impl TranscriptStore for PostgresStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let line = header_line(header);
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let value = self.create_transcript(&txn, &agent, &name, &[line]).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
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
        let mut client = self.client().await?;
        let txn = self
            .begin_transcript(&mut client, &agent, &child_name)
            .await?;
        let tx = &txn;
        if self
            .transcript_row(tx, &agent, &child_name)
            .await?
            .is_some()
        {
            return Ok(false);
        }
        let mut lines = vec![header];
        lines.extend(
            self.lines_from(tx, &parent_agent, &parent_name, 1)
                .await?
                .into_iter()
                .map(|(_, line)| line)
                .filter(|line| serde_json::from_str::<TranscriptEntry>(line).is_ok()),
        );
        let value = self
            .create_transcript(tx, &agent, &child_name, &lines)
            .await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let session_id = transcript.session_id.clone();
        let location = self.location.clone();
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let tx = &txn;
        let mut entries = entries;
        let (count, leaf) = match self.transcript_row(tx, &agent, &name).await? {
            Some(row) => row,
            None => {
                let header = header_line(&SessionHeader::new(&session_id, Utc::now()));
                self.create_transcript(tx, &agent, &name, &[header]).await?;
                (1, None)
            }
        };
        let (lines, leaf) = stamp_entries(&mut entries, leaf, Utc::now()).map_err(|e| {
            Error::encode(format!("a transcript entry for {}", location.display()), e)
        })?;
        self.insert_lines(tx, &agent, &name, count, &lines).await?;
        tx.execute(
            &format!(
                "UPDATE {} SET line_count = $3, leaf = $4
                     WHERE agent_id = $1 AND name = $2",
                self.table("transcripts")
            ),
            &[&agent, &name, &(count + lines.len() as i64), &leaf],
        )
        .await
        .map_err(pg_error("append to a transcript"))?;
        let events: Vec<SessionEvent> = entries
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
            .collect();
        txn.commit().await.map_err(pg_error("commit"))?;
        self.hub.publish(TranscriptUpdate {
            transcript: transcript.clone(),
            path: None,
            events: events.clone(),
        });
        Ok(events)
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        // One snapshot for the count and the lines.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("begin a transaction"))?;
        let Some((count, _)) = self.transcript_row(&tx, &agent, &name).await? else {
            return Ok(TranscriptRead {
                next: from,
                ..TranscriptRead::default()
            });
        };
        let count = count as u64;
        if from.0 > count {
            return Err(Error::InvalidOffset {
                path: self.location.join(&name),
                offset: from.0,
                len: count,
            });
        }
        let mut read = TranscriptRead {
            next: Offset(count),
            ..TranscriptRead::default()
        };
        for (seq, line) in self.lines_from(&tx, &agent, &name, from.0 as i64).await? {
            read_line(
                &mut read,
                seq as usize + 1,
                Offset(seq as u64),
                line.as_bytes(),
            );
        }
        Ok(read)
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let tx = &txn;
        if self.transcript_row(tx, &agent, &name).await?.is_none() {
            return Ok(None);
        }
        let base = archived_name(&name, reason, at);
        let mut target = base.clone();
        let mut attempt = 1;
        while self.transcript_row(tx, &agent, &target).await?.is_some() {
            target = format!("{base}-{attempt}");
            attempt += 1;
        }
        for table in ["transcripts", "transcript_lines"] {
            tx.execute(
                &format!(
                    "UPDATE {} SET name = $3 WHERE agent_id = $1 AND name = $2",
                    self.table(table)
                ),
                &[&agent, &name, &target],
            )
            .await
            .map_err(pg_error("archive a transcript"))?;
        }
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(Some(PathBuf::from(target)))
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let tx = &txn;
        tx.execute(
            &format!(
                "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                self.table("transcript_lines")
            ),
            &[&agent, &name],
        )
        .await
        .map_err(pg_error("remove a transcript"))?;
        let removed = tx
            .execute(
                &format!(
                    "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("remove a transcript"))?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(removed > 0)
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let clause = sql::log_filter(query, &|n| format!("${n}"));
        let statement = format!(
            "SELECT l.agent_id, t.session_id, l.seq, l.line
             FROM {} l JOIN {} t ON t.agent_id = l.agent_id AND t.name = l.name
             {} ORDER BY l.log_at, t.session_id COLLATE \"C\", l.seq{}",
            self.table("transcript_lines"),
            self.table("transcripts"),
            clause.sql,
            sql::Where::limit(query.limit)
        );
        let values = params(&clause.values);
        let client = self.client().await?;
        let rows = client
            .query(&statement, &refs(&values))
            .await
            .map_err(pg_error("query the message log"))?;
        Ok(log_records(
            rows.iter()
                .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
                .collect(),
        ))
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.hub.subscribe()
    }
}

#[async_trait]
impl TranscriptExport for PostgresStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        let client = self.client().await?;
        let agent = agent.map(ToString::to_string);
        let rows = client
            .query(
                &format!(
                    "SELECT agent_id, name FROM {} WHERE $1::TEXT IS NULL OR agent_id = $1
                     ORDER BY agent_id COLLATE \"C\", name COLLATE \"C\"",
                    self.table("transcripts")
                ),
                &[&agent],
            )
            .await
            .map_err(pg_error("list transcripts"))?;
        rows.iter()
            .map(|row| Ok((AgentId::new(row.get::<_, &str>(0))?, row.get(1))))
            .collect()
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("begin a transaction"))?;
        if self.transcript_row(&tx, &agent, &name).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            self.lines_from(&tx, &agent, &name, 0)
                .await?
                .into_iter()
                .map(|(_, line)| line)
                .collect(),
        ))
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let value = self.create_transcript(&txn, &agent, &name, &lines).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SessionStoreExt;
    use crate::SessionEntry;

    fn server() -> String {
        std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").expect("a test server")
    }

    fn key() -> SessionKey {
        SessionKey::parse("agent:main:main").unwrap()
    }

    async fn fresh(application: &str) -> PostgresStore {
        let schema = format!("unit_{}", uuid::Uuid::new_v4().simple());
        let url = format!("{}?application_name={application}", server());
        PostgresStore::connect_with(&url, PostgresOptions::in_schema(schema))
            .await
            .unwrap()
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_dropped_connection_fails_one_call_at_most_and_then_recovers() {
        let application = format!("as_{}", uuid::Uuid::new_v4().simple());
        let store = fresh(&application).await;
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();

        // The server (an admin, a restart, a failover) drops every connection of ours.
        let (admin, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let killed = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&application],
            )
            .await
            .unwrap();
        assert!(!killed.is_empty(), "the store had a pooled connection");
        tokio::time::sleep(Duration::from_millis(100)).await;

        match store.get(&key()).await {
            Ok(found) => assert!(found.is_some()),
            Err(error) => assert!(error.is_transient(), "{error}"),
        }
        let recovered = store.get(&key()).await.unwrap().unwrap();
        assert_eq!(recovered.entry.session_id, "s-1");
        store.drop_schema().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_cancelled_update_leaves_no_transaction_behind() {
        let application = format!("as_{}", uuid::Uuid::new_v4().simple());
        let store = std::sync::Arc::new(fresh(&application).await);
        store
            .put(&key(), SessionEntry::new("s-1", 1))
            .await
            .unwrap();
        // A holds the key's lock for a while; B waits for it and is cancelled.
        let (inside, entered) = std::sync::mpsc::channel();
        let holder = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .with_session(&key(), |e| {
                        let _ = inside.send(());
                        std::thread::sleep(Duration::from_millis(400));
                        e.updated_at += 1;
                    })
                    .await
            })
        };
        tokio::task::spawn_blocking(move || entered.recv().unwrap())
            .await
            .unwrap();
        let cancelled = tokio::time::timeout(
            Duration::from_millis(100),
            store.with_session(&key(), |e| e.updated_at += 10),
        )
        .await;
        assert!(cancelled.is_err(), "B was still waiting for the lock");
        holder.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;

        // B's connection was closed, not pooled in the middle of its transaction.
        let (admin, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
        tokio::spawn(connection);
        let stale: i64 = admin
            .query_one(
                "SELECT COUNT(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
                &[&application],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(stale, 0);
        tokio::time::timeout(
            Duration::from_secs(2),
            store.with_session(&key(), |e| e.updated_at += 100),
        )
        .await
        .expect("the key is not locked")
        .unwrap();
        let entry = store.get(&key()).await.unwrap().unwrap().entry;
        assert_eq!(entry.updated_at, 102, "A's and C's updates, not B's");
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_newer_schema_is_refused() {
        let store = fresh("as_unit").await;
        assert_eq!(
            store.schema_version().await.unwrap(),
            MIGRATIONS.len() as i64
        );
        store
            .client()
            .await
            .unwrap()
            .execute(
                &format!(
                    "INSERT INTO {} VALUES (99, 0)",
                    store.table("schema_migrations")
                ),
                &[],
            )
            .await
            .unwrap();
        let again =
            PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema()))
                .await;
        assert!(matches!(
            again,
            Err(Error::UnsupportedSchema { found: 99, .. })
        ));
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_transient_error() {
        let store = PostgresStore::connect_with(
            "postgres://nobody@127.0.0.1:1/none?connect_timeout=1",
            PostgresOptions::default(),
        )
        .await;
        assert!(matches!(store, Err(ref e) if e.is_transient()), "{store:?}");
    }

    #[test]
    fn schemas_are_plain_identifiers() {
        assert!(valid_schema("agent_sessions"));
        assert!(valid_schema("_t1"));
        for bad in ["", "1x", "Public", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(!valid_schema(bad), "{bad:?}");
        }
    }
}
