//! Choosing a backend by URL: `json:<dir>`, `sqlite:<file>`, `postgres://…`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::inbound::chatter::ChatterBuffer;
use crate::inbound::events::SystemEvents;
use crate::store::FileTranscriptStore;
use crate::store::{JsonFileStore, MultiKeyStore, SessionStore};
use crate::transcript::search::{InMemoryIndex, SearchIndex};
use crate::transcript::TranscriptExport;

/// Where sessions and transcripts live, as a URL.
///
/// | URL | backend |
/// | --- | --- |
/// | `json:<dir>` (`json:~/.openclaw`) | OpenClaw's files: `<dir>/agents/<agentId>/sessions/` |
/// | `sqlite:<file>` (`sqlite:sessions.db`) | one SQLite database (feature `sqlite`) |
/// | `postgres://user@host/db[?schema=name]` (`postgresql://` too) | a PostgreSQL server (feature `postgres`); tables in `schema`, default `agent_sessions` |
///
/// ```
/// use agent_sessions::store::StoreUrl;
///
/// let url: StoreUrl = "sqlite:~/bots/sessions.db".parse()?;
/// assert!(matches!(url, StoreUrl::Sqlite(_)));
/// let pg: StoreUrl = "postgres://bot@db/sessions?schema=support".parse()?;
/// assert_eq!(pg.to_string(), "postgres://bot@db/sessions?schema=support");
/// assert!("ftp://nope".parse::<StoreUrl>().is_err());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// OpenClaw's files under a state directory.
    Json(PathBuf),
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL server.
    Postgres {
        /// The connection URL, without the `schema` parameter.
        url: String,
        /// The schema holding the tables, if not the default.
        schema: Option<String>,
    },
}

impl FromStr for StoreUrl {
    type Err = Error;

    fn from_str(raw: &str) -> Result<Self> {
        let invalid = |problem: &str| Error::invalid_store_url(raw, problem);
        let trimmed = raw.trim();
        let path = |rest: &str| {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if rest.trim().is_empty() {
                Err(invalid("the path is empty"))
            } else {
                Ok(crate::store::json::paths::expand_home(
                    std::path::Path::new(rest),
                ))
            }
        };
        if let Some(rest) = trimmed.strip_prefix("json:") {
            return path(rest).map(StoreUrl::Json);
        }
        if let Some(rest) = trimmed.strip_prefix("sqlite:") {
            return path(rest).map(StoreUrl::Sqlite);
        }
        if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
            let (base, query) = trimmed.split_once('?').unwrap_or((trimmed, ""));
            let mut schema = None;
            let mut kept = Vec::new();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                match pair.split_once('=') {
                    Some(("schema", value)) if !value.is_empty() => schema = Some(value.to_owned()),
                    Some(("schema", _)) => return Err(invalid("the schema is empty")),
                    _ => kept.push(pair),
                }
            }
            let url = if kept.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", kept.join("&"))
            };
            return Ok(StoreUrl::Postgres { url, schema });
        }
        Err(invalid(
            "expected json:<dir>, sqlite:<file> or postgres://user@host/database",
        ))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Json(dir) => write!(f, "json:{}", dir.display()),
            StoreUrl::Sqlite(file) => write!(f, "sqlite:{}", file.display()),
            StoreUrl::Postgres { url, schema } => {
                f.write_str(url)?;
                if let Some(schema) = schema {
                    let separator = if url.contains('?') { '&' } else { '?' };
                    write!(f, "{separator}schema={schema}")?;
                }
                Ok(())
            }
        }
    }
}

impl StoreUrl {
    /// Whether `self` and `other` name the same store: the same resolved directory or
    /// file (symlinks and `..` followed, `~` expanded, a hard link to it), or the same
    /// PostgreSQL server (`localhost` and the loopback addresses are one), database and
    /// schema. Copying a store onto itself is the mistake this catches.
    ///
    /// ```
    /// use agent_sessions::store::StoreUrl;
    ///
    /// # let dir = tempfile::tempdir().unwrap();
    /// let a: StoreUrl = format!("json:{}", dir.path().display()).parse()?;
    /// let b: StoreUrl = format!("json:{}/sub/..", dir.path().display()).parse()?;
    /// # std::fs::create_dir(dir.path().join("sub")).unwrap();
    /// assert!(a.same_store(&b));
    /// let pg: StoreUrl = "postgres://bot@db/sessions".parse()?;
    /// let same: StoreUrl = "postgres://other@db:5432/sessions?schema=agent_sessions".parse()?;
    /// let other: StoreUrl = "postgres://bot@db/sessions?schema=support".parse()?;
    /// assert!(pg.same_store(&same));
    /// assert!(!pg.same_store(&other));
    /// let local: StoreUrl = "postgres://bot@localhost/sessions".parse()?;
    /// let loopback: StoreUrl = "postgres://bot@127.0.0.1:5432/sessions".parse()?;
    /// assert!(local.same_store(&loopback));
    /// assert!(!a.same_store(&pg));
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn same_store(&self, other: &StoreUrl) -> bool {
        match (self, other) {
            (StoreUrl::Json(a), StoreUrl::Json(b)) | (StoreUrl::Sqlite(a), StoreUrl::Sqlite(b)) => {
                resolved(a) == resolved(b) || same_file(a, b)
            }
            (
                StoreUrl::Postgres { url: a, schema: sa },
                StoreUrl::Postgres { url: b, schema: sb },
            ) => {
                let schema =
                    |s: &Option<String>| s.clone().unwrap_or_else(|| "agent_sessions".into());
                schema(sa) == schema(sb) && same_server(a, b)
            }
            _ => false,
        }
    }
}

/// `path` with `~` expanded and its longest existing ancestor canonicalised, so a
/// file not created yet still compares equal to another spelling of it.
fn resolved(path: &std::path::Path) -> PathBuf {
    let path = crate::store::json::paths::expand_home(path);
    let absolute = if path.is_absolute() {
        path
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut rest = Vec::new();
    let mut base = absolute.as_path();
    loop {
        if let Ok(real) = base.canonicalize() {
            return rest.iter().rev().fold(real, |at, part| at.join(part));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            _ => return absolute,
        }
    }
}

/// Whether `a` and `b` both exist and are one file or directory (a hard link).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let id = |path: &std::path::Path| {
            std::fs::metadata(crate::store::json::paths::expand_home(path))
                .ok()
                .map(|m| (m.dev(), m.ino()))
        };
        matches!((id(a), id(b)), (Some(a), Some(b)) if a == b)
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

#[cfg(feature = "postgres")]
fn same_server(a: &str, b: &str) -> bool {
    let key = |url: &str| {
        url.parse::<tokio_postgres::Config>().ok().map(|config| {
            let ports = if config.get_ports().is_empty() {
                vec![5432]
            } else {
                config.get_ports().to_vec()
            };
            // The loopback address by any of its names is one server.
            let hosts: Vec<String> = config
                .get_hosts()
                .iter()
                .map(|host| match host {
                    tokio_postgres::config::Host::Tcp(name) => {
                        let name = name.trim_start_matches('[').trim_end_matches(']');
                        let loopback = name.eq_ignore_ascii_case("localhost")
                            || name
                                .parse::<std::net::IpAddr>()
                                .is_ok_and(|ip| ip.is_loopback());
                        match loopback {
                            true => "loopback".to_owned(),
                            false => name.to_ascii_lowercase(),
                        }
                    }
                    other => format!("{other:?}"),
                })
                .collect();
            (
                hosts,
                ports,
                config.get_dbname().or(config.get_user()).map(str::to_owned),
            )
        })
    };
    match (key(a), key(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(not(feature = "postgres"))]
fn same_server(a: &str, b: &str) -> bool {
    a == b
}

/// How [`Backend::open_with`] treats a store that is not there yet.
///
/// ```
/// use agent_sessions::store::{Backend, OpenMode};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let url = format!("sqlite:{}", dir.path().join("sessions.db").display());
/// assert!(Backend::open_with(&url, OpenMode::ReadOnly).await.is_err());
/// Backend::open_with(&url, OpenMode::Create).await?;
/// let backend = Backend::open_with(&url, OpenMode::ReadOnly).await?;
/// assert_eq!(backend.sessions().count(&agent_sessions::ListFilter::new()).await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OpenMode {
    /// Create what is missing (directories, the database file, schemas and tables) and
    /// migrate database schemas: what a host serving sessions wants.
    #[default]
    Create,
    /// The store must exist ([`Error::StoreNotFound`] otherwise: also a database file
    /// or schema that holds no agent-sessions tables, which is left as it is); its
    /// schema is migrated. For commands that change sessions that are already there.
    Existing,
    /// The store must exist and nothing is written: SQLite is opened with
    /// `SQLITE_OPEN_READ_ONLY`, PostgreSQL transactions are read-only, and neither is
    /// migrated ([`Error::SchemaNotMigrated`] if it would need to be). For commands
    /// that only read.
    ReadOnly,
}

/// Where a JSON tree keeps its search index, relative to its root.
pub const SEARCH_INDEX_FILE: &str = "search/messages.json";

/// A session store and the transcript store beside it, opened from a [`StoreUrl`].
///
/// ```
/// use agent_sessions::store::Backend;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = format!("json:{}", dir.path().display());
/// let backend = Backend::open(&url).await?;
/// assert_eq!(backend.sessions().count(&agent_sessions::ListFilter::new()).await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Backend {
    url: StoreUrl,
    sessions: Arc<dyn SessionStore>,
    /// The same store, with its updates of several sessions at once.
    multi_key: Arc<dyn MultiKeyStore>,
    transcripts: Arc<dyn TranscriptExport>,
    history: Arc<dyn ChatterBuffer>,
    system_events: Arc<dyn SystemEvents>,
    /// The database's own index, or (JSON) opened on first use.
    search: Arc<tokio::sync::OnceCell<Arc<dyn SearchIndex>>>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend").field("url", &self.url).finish()
    }
}

impl Backend {
    /// Opens the backend `url` names: creates what is missing and migrates database
    /// schemas ([`OpenMode::Create`]). A backend whose feature is not compiled in is
    /// [`Error::InvalidStoreUrl`].
    pub async fn open(url: &str) -> Result<Backend> {
        Backend::open_url(url.parse()?).await
    }

    /// Opens the backend `url` names in `mode` (see [`OpenMode`]). With
    /// [`OpenMode::ReadOnly`] nothing is written: a missing directory, file or schema is
    /// [`Error::StoreNotFound`] naming it, and nothing is created.
    ///
    /// ```
    /// use agent_sessions::store::{Backend, OpenMode};
    /// use agent_sessions::Error;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let file = dir.path().join("typo/sessions.db");
    /// let url = format!("sqlite:{}", file.display());
    /// let err = Backend::open_with(&url, OpenMode::ReadOnly).await.unwrap_err();
    /// assert!(matches!(err, Error::StoreNotFound { .. }));
    /// assert!(!dir.path().join("typo").exists(), "nothing was created");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_with(url: &str, mode: OpenMode) -> Result<Backend> {
        Backend::open_url_with(url.parse()?, mode).await
    }

    /// Opens a parsed URL, creating what is missing ([`OpenMode::Create`]).
    pub(crate) async fn open_url(url: StoreUrl) -> Result<Backend> {
        Backend::open_url_with(url, OpenMode::Create).await
    }

    /// Opens a parsed URL in `mode`.
    pub(crate) async fn open_url_with(url: StoreUrl, mode: OpenMode) -> Result<Backend> {
        type Parts = (
            Arc<dyn MultiKeyStore>,
            Arc<dyn TranscriptExport>,
            Option<Arc<dyn SearchIndex>>,
            Arc<dyn ChatterBuffer>,
            Arc<dyn SystemEvents>,
        );
        // Group chatter and system events live beside the sessions; a read-only backend
        // reads them and writes nothing (see `ReadOnly`).
        let read_only = mode == OpenMode::ReadOnly;
        let (multi_key, transcripts, search, history, system_events): Parts = match &url {
            StoreUrl::Json(dir) => {
                if mode != OpenMode::Create {
                    json_tree_exists(dir, &url)?;
                }
                (
                    Arc::new(JsonFileStore::new(dir)),
                    Arc::new(FileTranscriptStore::new(dir)),
                    // Read-only: an index in memory, never saved into the tree.
                    (mode == OpenMode::ReadOnly)
                        .then(|| Arc::new(InMemoryIndex::new()) as Arc<dyn SearchIndex>),
                    read_only_chatter(Arc::new(super::JsonFileChatter::new(dir)), read_only),
                    read_only_events(Arc::new(super::JsonFileSystemEvents::new(dir)), read_only),
                )
            }
            #[cfg(feature = "sqlite")]
            StoreUrl::Sqlite(file) => {
                let file = file.clone();
                if mode == OpenMode::Existing {
                    let path = crate::store::json::paths::expand_home(&file);
                    let not_found = |problem: &str| Error::StoreNotFound {
                        store: url.to_string(),
                        problem: problem.to_owned(),
                    };
                    if !path.is_file() {
                        return Err(not_found("the file does not exist"));
                    }
                    // Another program's database is not made a store.
                    let checked = path.clone();
                    let holds = crate::store::fs::blocking(&path, move || {
                        crate::store::SqliteStore::holds_store(&checked)
                    })
                    .await?;
                    if !holds {
                        return Err(not_found("the file holds no agent-sessions tables"));
                    }
                }
                let store = crate::store::fs::blocking(&file.clone(), move || {
                    if mode == OpenMode::ReadOnly {
                        crate::store::SqliteStore::open_read_only(&file)
                    } else {
                        crate::store::SqliteStore::open(&file)
                    }
                })
                .await?;
                let history = read_only_chatter(
                    Arc::new(crate::store::SqliteChatter::new(&store)),
                    read_only,
                );
                let system_events = read_only_events(
                    Arc::new(crate::store::SqliteSystemEvents::new(&store)),
                    read_only,
                );
                (
                    Arc::new(store.clone()),
                    Arc::new(store.clone()),
                    Some(Arc::new(store)),
                    history,
                    system_events,
                )
            }
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres {
                url: conninfo,
                schema,
            } => {
                let mut options = crate::store::PostgresOptions::default();
                if let Some(schema) = schema {
                    options.schema = schema.clone();
                }
                let store =
                    crate::store::PostgresStore::connect_mode(conninfo, options, mode).await?;
                let history = read_only_chatter(
                    Arc::new(crate::store::PostgresChatter::new(&store)),
                    read_only,
                );
                let system_events = read_only_events(
                    Arc::new(crate::store::PostgresSystemEvents::new(&store)),
                    read_only,
                );
                (
                    Arc::new(store.clone()),
                    Arc::new(store.clone()),
                    Some(Arc::new(store)),
                    history,
                    system_events,
                )
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::invalid_store_url(
                    &other.to_string(),
                    "this build lacks the backend's feature (`sqlite` or `postgres`)",
                ))
            }
        };
        Ok(Backend {
            url,
            sessions: multi_key.clone(),
            multi_key,
            transcripts,
            history,
            system_events,
            search: Arc::new(match search {
                Some(index) => tokio::sync::OnceCell::new_with(Some(index)),
                None => tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// The same backend with its sessions, transcripts, chatter and system events
    /// read and written through others (a migration's sealing target). Its updates of
    /// several sessions at once still go to the store itself: only a migration, which
    /// makes none, uses it.
    #[cfg(feature = "encryption")]
    pub(crate) fn through(
        &self,
        sessions: Arc<dyn SessionStore>,
        transcripts: Arc<dyn TranscriptExport>,
        history: Arc<dyn ChatterBuffer>,
        system_events: Arc<dyn SystemEvents>,
    ) -> Backend {
        Backend {
            sessions,
            transcripts,
            history,
            system_events,
            ..self.clone()
        }
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The session store.
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        &self.sessions
    }

    /// The same session store, with its updates of several sessions at once
    /// ([`MultiKeyStore`]: every backend has them).
    pub fn multi_key(&self) -> &Arc<dyn MultiKeyStore> {
        &self.multi_key
    }

    /// The transcript store.
    pub fn transcripts(&self) -> &Arc<dyn TranscriptExport> {
        &self.transcripts
    }

    /// The group chatter kept with this backend, so group chatter survives a restart:
    /// files beside a JSON tree ([`JsonFileChatter`](super::JsonFileChatter)), the
    /// `group_history` table of a SQLite database or PostgreSQL schema
    /// (`SqliteChatter`, `PostgresChatter`). A backend opened
    /// [`OpenMode::ReadOnly`] reads it (a copy exports it) and refuses every write
    /// ([`Error::NotConfigured`]), since nothing may be written.
    pub fn chatter(&self) -> &Arc<dyn ChatterBuffer> {
        &self.history
    }

    /// The system-event queues kept with this backend, so an event queued by one worker
    /// reaches the next turn of its session on any worker, exactly once: files beside a
    /// JSON tree ([`JsonFileSystemEvents`](super::JsonFileSystemEvents)), the
    /// `system_events` table of a SQLite database or PostgreSQL schema
    /// (`SqliteSystemEvents`, `PostgresSystemEvents`). A backend opened
    /// [`OpenMode::ReadOnly`] reads them (a copy exports them) and refuses every write,
    /// draining included ([`Error::NotConfigured`]), since nothing may be written.
    pub fn system_events(&self) -> &Arc<dyn SystemEvents> {
        &self.system_events
    }

    /// The search index of the message log: the database's own (packed postings
    /// tables) for SQLite and PostgreSQL; for a JSON tree a [`InMemoryIndex`] saved at
    /// `<dir>/search/messages.json`, read on first use (so a damaged index file fails
    /// only the calls that search, with [`Error::Component`], and is left as it is).
    /// Opened [`OpenMode::ReadOnly`], nothing is written: the database's index refuses
    /// writes, and a JSON tree's is a fresh [`InMemoryIndex`] that is never saved.
    pub async fn search_index(&self) -> Result<Arc<dyn SearchIndex>> {
        let index = self
            .search
            .get_or_try_init(|| async {
                // Database backends are opened with their index; only JSON gets here.
                let StoreUrl::Json(dir) = &self.url else {
                    return Err(Error::NotConfigured {
                        what: "a search index for this backend",
                    });
                };
                let file = crate::store::json::paths::expand_home(dir).join(SEARCH_INDEX_FILE);
                let index =
                    crate::store::fs::blocking(&file.clone(), move || InMemoryIndex::open(file))
                        .await?;
                Ok::<Arc<dyn SearchIndex>, Error>(Arc::new(index))
            })
            .await?;
        Ok(index.clone())
    }
}

/// Refuses a JSON tree that is not there: no directory, or no `agents/` in it (a
/// mistyped path, `~/.openclaw` not created yet, or the `agents` directory itself).
fn json_tree_exists(dir: &std::path::Path, url: &StoreUrl) -> Result<()> {
    let dir = crate::store::json::paths::expand_home(dir);
    let not_found = |problem: &str| Error::StoreNotFound {
        store: url.to_string(),
        problem: problem.to_owned(),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(not_found("it is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_found("the directory does not exist"))
        }
        Err(e) => return Err(Error::io("read", &dir, e)),
    }
    if dir.join("agents").is_dir() {
        Ok(())
    } else if dir.file_name().is_some_and(|name| name == "agents") {
        Err(not_found(
            "it has no agents/ directory (give the directory that holds agents/, not agents/ itself)",
        ))
    } else {
        Err(not_found(
            "it has no agents/ directory (not an OpenClaw state directory)",
        ))
    }
}

/// `inner`, or — for a backend opened read-only — a view of it that reads (a copy's
/// export, a person's pending chatter) and writes nothing.
fn read_only_chatter(inner: Arc<dyn ChatterBuffer>, read_only: bool) -> Arc<dyn ChatterBuffer> {
    if read_only {
        Arc::new(ReadOnly(inner))
    } else {
        inner
    }
}

/// As [`read_only_chatter`], for system events.
fn read_only_events(inner: Arc<dyn SystemEvents>, read_only: bool) -> Arc<dyn SystemEvents> {
    if read_only {
        Arc::new(ReadOnly(inner))
    } else {
        inner
    }
}

/// A buffer or queue of a backend opened read-only: what it holds can be read, and
/// every write is refused ([`Error::NotConfigured`]) — a store opened read-only is never
/// written to.
struct ReadOnly<T: ?Sized>(Arc<T>);

const READ_ONLY: Error = Error::NotConfigured {
    what: "writing to a store opened read-only (OpenMode::ReadOnly)",
};

#[async_trait::async_trait]
impl ChatterBuffer for ReadOnly<dyn ChatterBuffer> {
    async fn append(&self, _: &str, _: crate::inbound::ChatterEntry) -> Result<()> {
        Err(READ_ONLY)
    }
    async fn entries(&self, key: &str) -> Result<Vec<crate::inbound::ChatterEntry>> {
        self.0.entries(key).await
    }
    async fn clear(&self, _: &str) -> Result<()> {
        Err(READ_ONLY)
    }
    async fn take(&self, _: &str) -> Result<Vec<crate::inbound::ChatterEntry>> {
        Err(READ_ONLY)
    }
    async fn append_once(
        &self,
        _: &str,
        _: crate::inbound::ChatterEntry,
        _: std::time::Duration,
    ) -> Result<bool> {
        Err(READ_ONLY)
    }
    async fn claim(
        &self,
        _: &str,
        _: &crate::inbound::ChatterClaim,
        _: &[String],
    ) -> Result<Vec<crate::inbound::ChatterEntry>> {
        Err(READ_ONLY)
    }
    async fn claims(&self, key: &str) -> Result<Vec<crate::inbound::ChatterClaim>> {
        self.0.claims(key).await
    }
    async fn settle(&self, _: &str, _: &str) -> Result<()> {
        Err(READ_ONLY)
    }
    async fn release(&self, _: &str, _: &str, _: Vec<crate::inbound::ChatterEntry>) -> Result<()> {
        Err(READ_ONLY)
    }
    async fn edit_entries(&self, _: crate::inbound::EntryEditor<'_>) -> Result<usize> {
        Err(READ_ONLY)
    }
    async fn export_groups(&self) -> Result<Vec<(String, crate::inbound::GroupChatter)>> {
        self.0.export_groups().await
    }
    async fn import_group(&self, _: &str, _: crate::inbound::GroupChatter) -> Result<bool> {
        Err(READ_ONLY)
    }
}

#[async_trait::async_trait]
impl SystemEvents for ReadOnly<dyn SystemEvents> {
    async fn enqueue(
        &self,
        _: &crate::identity::key::SessionKey,
        _: &str,
        _: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool> {
        Err(READ_ONLY)
    }
    async fn drain(
        &self,
        _: &crate::identity::key::SessionKey,
    ) -> Result<Vec<crate::inbound::SystemEvent>> {
        Err(READ_ONLY)
    }
    async fn export_queues(
        &self,
    ) -> Result<
        Vec<(
            crate::identity::key::SessionKey,
            Vec<crate::inbound::SystemEvent>,
        )>,
    > {
        self.0.export_queues().await
    }
    async fn import_queue(
        &self,
        _: &crate::identity::key::SessionKey,
        _: Vec<crate::inbound::SystemEvent>,
    ) -> Result<bool> {
        Err(READ_ONLY)
    }
}
