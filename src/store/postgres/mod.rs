//! [`PostgresStore`]: sessions, transcripts and the message log on a PostgreSQL server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Transaction};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

use super::sql::{self, decode, lock_id, log_records, LogColumns, SessionRow, SqlValue};
use super::{
    replaced_session, run_mutator, ListFilter, Mutator, OpenMode, SessionStore, StoredSession,
};
use crate::error::{Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::transcript::lines::{header_line, read_line, validate_transcript_name};
use crate::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
    TranscriptUpdate, UpdateHub,
};

const BACKEND: &str = "postgres";

mod backoff;
mod chatter;
mod keyed_log;
mod notify;
mod schema;
mod search;
mod sessions;
mod system_events;
#[cfg(test)]
mod tests;
mod transcripts;

pub use self::chatter::PostgresChatter;
use self::schema::MIGRATIONS;
pub use self::system_events::PostgresSystemEvents;

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
/// [`Error::Database`] marked transient. After a connect fails, calls that would
/// connect again fail at once with that failure until a wait has passed (25 ms,
/// doubling to 400 ms while the server refuses), so a failover is not met with a
/// connect per call. Each session update is one transaction that
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
/// let manager = SessionManager::builder(db.clone()).transcripts(db).build()?;
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
    /// Where the listening connection connects.
    config: Arc<tokio_postgres::Config>,
    /// This handle's name in its append notices.
    writer: Arc<str>,
    /// The task hearing other processes' appends, once started.
    listener: Arc<std::sync::Mutex<Option<notify::Listener>>>,
    /// The tails of the transcripts this handle appended to last.
    tails: Arc<transcripts::KnownTails>,
    /// Connects held back after one failed.
    backoff: Arc<backoff::Backoff>,
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
            source: Box::new(ServerError(error)),
        }
    }
}

/// A driver error whose message says what the server said: the driver's own says only
/// `db error` and keeps the server's message in its source.
#[derive(Debug)]
struct ServerError(tokio_postgres::Error);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Some(db) = self.0.as_db_error() else {
            return self.0.fmt(f);
        };
        write!(f, "{} (SQLSTATE {})", db.message(), db.code().code())?;
        if let Some(detail) = db.detail() {
            write!(f, ": {detail}")?;
        }
        if let Some(hint) = db.hint() {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The server's message is already in this one's.
        match self.0.as_db_error() {
            Some(_) => None,
            None => std::error::Error::source(&self.0),
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
    /// Connects to `url` (`postgres://user:password@host:port/database[?schema=name]`,
    /// the same URLs as [`SessionManager::connect`](crate::SessionManager::connect) and
    /// the command line) with the default options, and migrates the schema. A
    /// `?schema=` in the URL names the schema for every `connect_*` call; options that
    /// name a different one are [`Error::InvalidStoreUrl`].
    pub async fn connect(url: &str) -> Result<Self> {
        PostgresStore::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` and migrates the schema `options.schema`.
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        PostgresStore::connect_mode(url, options, OpenMode::Create).await
    }

    pub(crate) async fn connect_mode(
        url: &str,
        mut options: PostgresOptions,
        access: OpenMode,
    ) -> Result<Self> {
        let invalid = |problem: String| Error::invalid_store_url(url, problem);
        // The same URLs as `SessionManager::connect` and the command line: a
        // `?schema=` names the schema (the options' schema must agree, or be the
        // default).
        let (url, url_schema) = split_schema(url)?;
        let url = url.as_str();
        if let Some(schema) = url_schema {
            if options.schema != schema && options.schema != PostgresOptions::default().schema {
                return Err(invalid(format!(
                    "the URL names schema {schema:?} but the options name {:?}",
                    options.schema
                )));
            }
            options.schema = schema;
        }
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
        let listen_config = Arc::new(config.clone());
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
            config: listen_config,
            writer: uuid::Uuid::new_v4().simple().to_string().into(),
            listener: Arc::default(),
            tails: Arc::default(),
            backoff: Arc::default(),
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

    /// Creates (or re-creates) the SQL views with RABS's and ClawOS's shapes over this
    /// store's tables — `<rabs>.type2_sessions`, `<rabs>.type2_sessions_history`,
    /// `<rabs>.type2_messages` and `<clawos>.sessions`, each schema created if missing — so their SQL, joins and
    /// dashboards read the crate's sessions and message log (see
    /// [`views`](crate::ops::ViewSchemas) for every column). Idempotent; one transaction.
    /// A schema that is not a plain name, or is the store's own, is
    /// [`Error::InvalidOption`].
    ///
    /// ```no_run
    /// use agent_sessions::ops::ViewSchemas;
    /// use agent_sessions::store::PostgresStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let db = PostgresStore::connect("postgres://bot@db.internal/sessions").await?;
    /// // brainframe.type2_sessions (and _history), brainframe.type2_messages, clawos.sessions
    /// db.create_views(&ViewSchemas::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_views(&self, schemas: &crate::ops::views::ViewSchemas) -> Result<()> {
        schemas.check(&self.schema)?;
        let batch = crate::ops::views::postgres_create(&self.schema, schemas);
        self.view_transaction(&batch, "create the views").await
    }

    /// Drops the views [`create_views`](Self::create_views) made in `schemas` (those
    /// that are there); the schemas themselves and the tables are left.
    pub async fn drop_views(&self, schemas: &crate::ops::views::ViewSchemas) -> Result<()> {
        schemas.check(&self.schema)?;
        let batch = crate::ops::views::postgres_drop(schemas);
        self.view_transaction(&batch, "drop the views").await
    }

    async fn view_transaction(&self, batch: &str, op: &'static str) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error(op))?;
        // Two hosts creating the views at once take turns.
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&lock_id("agent-sessions views")],
        )
        .await
        .map_err(pg_error(op))?;
        tx.batch_execute(batch).await.map_err(pg_error(op))?;
        tx.commit().await.map_err(pg_error(op))
    }

    /// A connection from the pool. After a connect failed, a call that would connect
    /// again within the back-off fails at once with that failure (see
    /// [`backoff`]); an idle connection is still handed out.
    async fn client(&self) -> Result<Object> {
        let connect_error =
            |transient, source: Box<dyn std::error::Error + Send + Sync>| Error::Database {
                backend: BACKEND,
                op: "connect to the server",
                transient,
                source,
            };
        if self.pool.status().available == 0 {
            if let Some(backing_off) = self.backoff.waiting(std::time::Instant::now()) {
                let transient = backing_off.transient();
                return Err(connect_error(transient, Box::new(backing_off)));
            }
        }
        match self.pool.get().await {
            Ok(client) => {
                self.backoff.connected();
                Ok(client)
            }
            Err(source) => {
                let refused = matches!(
                    source,
                    deadpool_postgres::PoolError::Backend(_)
                        | deadpool_postgres::PoolError::Timeout(
                            deadpool_postgres::TimeoutType::Create
                        )
                );
                // Refused for good until someone changes the server: no such role or
                // database, a role that may not log in, a wrong password.
                let transient = !matches!(
                    &source,
                    deadpool_postgres::PoolError::Backend(error) if error.code().is_some_and(|code| {
                        code.code().starts_with("28") || code.code() == "3D000"
                    })
                );
                let error = ConnectError {
                    server: self.server.clone(),
                    source,
                };
                if refused {
                    self.backoff
                        .failed(std::time::Instant::now(), error.to_string(), transient);
                }
                Err(connect_error(transient, Box::new(error)))
            }
        }
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
        if found < schema::POSTINGS_MIGRATION {
            self.index_new_messages(&tx).await?;
            self.index_vectors(&tx, None).await?;
        }
        tx.commit().await.map_err(pg_error("commit a migration"))
    }

    /// Locks `what` until the transaction ends.
    async fn lock(&self, tx: &Transaction<'_>, what: &str) -> Result<()> {
        tx.execute_prepared(
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
                     entry = $10, status = $11
                 WHERE session_key = $1",
                self.table("sessions")
            )
        } else {
            format!(
                "INSERT INTO {} (session_key, agent_id, session_id, updated_at, channel,
                     chat_type, person_id, agent_identity, revision, entry, status)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                self.table("sessions")
            )
        }
    }
}

/// The parameters of [`PostgresStore::write_statement`].
fn row_params(row: &SessionRow) -> [&(dyn ToSql + Sync); 11] {
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
        &row.status,
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

    /// Ends a transaction whose `COMMIT` went out with its last statements (a failed
    /// statement makes that `COMMIT` a rollback), or rolls back one that failed before
    /// (`Err`).
    async fn end_pipelined<T>(self, outcome: Result<Committed<T>>) -> Result<T> {
        match outcome {
            Ok(Committed { committed, result }) => {
                // Once COMMIT was answered the transaction is over either way; when it
                // was not, the connection is closed.
                committed?;
                self.finish();
                result
            }
            Err(error) => Err(self.abandon(error).await),
        }
    }

    /// Commits when `result` is a success (a failed `COMMIT` leaves the transaction
    /// unfinished: the connection is closed), rolls back otherwise.
    async fn end<T>(self, result: Result<T>) -> Result<T> {
        match result {
            Ok(value) => {
                self.client()
                    .batch_execute("COMMIT")
                    .await
                    .map_err(pg_error("commit"))?;
                self.finish();
                Ok(value)
            }
            Err(error) => Err(self.abandon(error).await),
        }
    }
}

/// Statements of a fixed text, prepared once per connection and run from then on in
/// one round trip (a statement given as text is prepared again on every call: two).
///
/// Only for statements whose text is one of a fixed few (the table names are the
/// store's): each connection keeps every text it prepared.
#[async_trait]
trait Prepared: deadpool_postgres::GenericClient {
    async fn execute_prepared(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.execute(&statement, params).await
    }

    async fn query_prepared(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query(&statement, params).await
    }

    async fn query_one_prepared(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<tokio_postgres::Row, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query_one(&statement, params).await
    }

    async fn query_opt_prepared(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> std::result::Result<Option<tokio_postgres::Row>, tokio_postgres::Error> {
        let statement = self.prepare_cached(sql).await?;
        self.query_opt(&statement, params).await
    }
}

impl<C: deadpool_postgres::GenericClient + ?Sized> Prepared for C {}

/// A transaction whose `COMMIT` was sent with its last statements: what `COMMIT`
/// answered, and what the statements came to.
struct Committed<T> {
    committed: Result<()>,
    result: Result<T>,
}

/// The message-log columns of lines inserted together, one array per column.
struct LineColumns {
    seq: Vec<i64>,
    log_at: Vec<Option<i64>>,
    person_id: Vec<Option<String>>,
    agent_identity: Vec<Option<String>>,
    session_key: Vec<Option<String>>,
}

impl LineColumns {
    /// The columns of `lines`, numbered from `first`.
    fn of(first: i64, lines: &[String]) -> LineColumns {
        let mut columns = LineColumns {
            seq: Vec::with_capacity(lines.len()),
            log_at: Vec::with_capacity(lines.len()),
            person_id: Vec::with_capacity(lines.len()),
            agent_identity: Vec::with_capacity(lines.len()),
            session_key: Vec::with_capacity(lines.len()),
        };
        for (seq, line) in (first..).zip(lines) {
            let log = LogColumns::of_line(line);
            columns.seq.push(seq);
            columns.log_at.push(log.as_ref().map(|l| l.at));
            columns
                .person_id
                .push(log.as_ref().and_then(|l| l.person_id.clone()));
            columns
                .agent_identity
                .push(log.as_ref().and_then(|l| l.agent_identity.clone()));
            columns.session_key.push(log.and_then(|l| l.session_key));
        }
        columns
    }
}

impl PostgresStore {
    /// A transaction holding the advisory lock named `lock` (hashed by the server with
    /// `hashtextextended`, so SQL can name the same lock); `what` names the lock in
    /// errors.
    async fn begin_locked(&self, lock: &str, what: &'static str) -> Result<OpenTransaction> {
        let open = OpenTransaction(Some(self.client().await?));
        let c = open.client();
        let params: &[&(dyn ToSql + Sync)] = &[&lock];
        // BEGIN and the lock go out together.
        let (begun, locked) = tokio::join!(
            c.batch_execute("BEGIN"),
            c.execute_prepared(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                params,
            )
        );
        match (begun, locked) {
            (Ok(()), Ok(_)) => Ok(open),
            // Dropped unfinished: the connection is closed, not pooled.
            (Err(e), _) => Err(pg_error("begin a transaction")(e)),
            (_, Err(e)) => Err(open.abandon(pg_error(what)(e)).await),
        }
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(connection) = self.0.take() {
            drop(Object::take(connection));
        }
    }
}

/// Splits `?schema=<name>` off a PostgreSQL URL, as [`StoreUrl`](crate::store::StoreUrl)
/// reads it: the connection URL without it, and the schema if one is named.
fn split_schema(url: &str) -> Result<(String, Option<String>)> {
    if !url.trim_start().starts_with("postgres") {
        // A `key=value` connection string: used as given.
        return Ok((url.to_owned(), None));
    }
    match url.parse::<crate::store::StoreUrl>()? {
        crate::store::StoreUrl::Postgres { url, schema } => Ok((url, schema)),
        _ => Ok((url.to_owned(), None)),
    }
}
