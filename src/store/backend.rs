//! Choosing a backend by URL: `json:<dir>`, `sqlite:<file>`, `postgres://…`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::search::{MemoryIndex, SearchIndex};
use crate::store::{JsonFileStore, SessionStore};
use crate::transcript::{FileTranscriptStore, TranscriptStore};

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
        let invalid = |problem: &str| Error::InvalidStoreUrl {
            url: raw.to_owned(),
            problem: problem.to_owned(),
        };
        let trimmed = raw.trim();
        let path = |rest: &str| {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if rest.trim().is_empty() {
                Err(invalid("the path is empty"))
            } else {
                Ok(crate::paths::expand_home(std::path::Path::new(rest)))
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
/// assert_eq!(backend.sessions().len().await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Backend {
    url: StoreUrl,
    sessions: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
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
    /// schemas. A backend whose feature is not compiled in is
    /// [`Error::InvalidStoreUrl`].
    pub async fn open(url: &str) -> Result<Backend> {
        Backend::open_url(url.parse()?).await
    }

    /// Opens a parsed URL.
    pub async fn open_url(url: StoreUrl) -> Result<Backend> {
        type Parts = (
            Arc<dyn SessionStore>,
            Arc<dyn TranscriptStore>,
            Option<Arc<dyn SearchIndex>>,
        );
        let (sessions, transcripts, search): Parts = match &url {
            StoreUrl::Json(dir) => (
                Arc::new(JsonFileStore::new(dir)),
                Arc::new(FileTranscriptStore::new(dir)),
                None,
            ),
            #[cfg(feature = "sqlite")]
            StoreUrl::Sqlite(file) => {
                let file = file.clone();
                let store = crate::fsutil::blocking(&file.clone(), move || {
                    crate::store::SqliteStore::open(&file)
                })
                .await?;
                (
                    Arc::new(store.clone()),
                    Arc::new(store.clone()),
                    Some(Arc::new(store)),
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
                let store = crate::store::PostgresStore::connect_with(conninfo, options).await?;
                (
                    Arc::new(store.clone()),
                    Arc::new(store.clone()),
                    Some(Arc::new(store)),
                )
            }
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::InvalidStoreUrl {
                    url: other.to_string(),
                    problem: "this build lacks the backend's feature (`sqlite` or `postgres`)"
                        .into(),
                })
            }
        };
        Ok(Backend {
            url,
            sessions,
            transcripts,
            search: Arc::new(match search {
                Some(index) => tokio::sync::OnceCell::new_with(Some(index)),
                None => tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// The URL it was opened from.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The session store.
    pub fn sessions(&self) -> &Arc<dyn SessionStore> {
        &self.sessions
    }

    /// The transcript store.
    pub fn transcripts(&self) -> &Arc<dyn TranscriptStore> {
        &self.transcripts
    }

    /// The search index of the message log: the database's own (FTS5, `tsvector`) for
    /// SQLite and PostgreSQL; for a JSON tree a [`MemoryIndex`] saved at
    /// `<dir>/search/messages.json`, read on first use (so a damaged index file fails
    /// only the calls that search, with [`Error::Component`], and is left as it is).
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
                let file = crate::paths::expand_home(dir).join(SEARCH_INDEX_FILE);
                let index =
                    crate::fsutil::blocking(&file.clone(), move || MemoryIndex::open(file)).await?;
                Ok::<Arc<dyn SearchIndex>, Error>(Arc::new(index))
            })
            .await?;
        Ok(index.clone())
    }
}
