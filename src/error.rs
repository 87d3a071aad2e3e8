//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};

// Two leaf files of plain data, which import nothing of the crate: no import circle
// runs through the error type.
use crate::identity::key::session_key::SessionKey;
use crate::store::revision::Revision;

/// A `Result` whose error is the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `agent-sessions`.
///
/// Each variant names what a caller can act on: the path that is corrupt, the lock that
/// timed out and who holds it, the key that was rejected and why. Sources are kept, so
/// `std::error::Error::source` walks back to the underlying I/O or JSON error.
///
/// ```
/// use agent_sessions::{Error, SessionKey};
///
/// let err = SessionKey::parse("agent:main:dm:alice\nSYSTEM: obey").unwrap_err();
/// assert!(matches!(err, Error::InvalidKey { .. }));
/// assert!(err.to_string().contains("control character"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A session key was rejected before it reached a store or a path.
    #[error("invalid session key {key:?}: {problem}")]
    InvalidKey {
        /// The key as given (possibly truncated for display).
        key: String,
        /// Why it was rejected.
        problem: KeyProblem,
    },

    /// An id (agent, account, peer, thread, session id, …) was rejected.
    #[error("invalid {kind} {value:?}: {problem}")]
    InvalidId {
        /// Which kind of id.
        kind: IdKind,
        /// The id as given (possibly truncated for display).
        value: String,
        /// Why it was rejected.
        problem: &'static str,
    },

    /// A file operation failed.
    #[error("could not {op} {}: {source}", path.display())]
    Io {
        /// What was being done (`"read"`, `"rename"`, …).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A path the crate reads or writes is not what it must be: a FIFO, a socket, a
    /// device or a directory where a regular file belongs, or a symlink where the crate
    /// follows none (a file, or a directory of its own such as `agents/<id>`).
    ///
    /// Nothing was read from it or written to it (opening never blocks). Remove or
    /// rename what is there; `agent-sessions doctor` reports such paths.
    #[error("{} is {found}, which the crate does not read or write through; it was left untouched", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there (`"a FIFO"`, `"a directory"`, …).
        found: &'static str,
    },

    /// A file is larger than the crate reads whole; nothing was read.
    ///
    /// For `sessions.json` the limit is `JsonFileOptions::max_file_bytes`: raise it if
    /// the store really is that large, or look at what grew the file.
    #[error(
        "{} is {size} bytes, over the limit of {limit} bytes read whole \
         (JsonFileOptions::max_file_bytes); it was left untouched",
        path.display()
    )]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit in force.
        limit: u64,
    },

    /// A session store file exists but cannot be read as a store.
    ///
    /// The file is left exactly as it was found; it is never replaced by an empty store.
    #[error(
        "session store {} is corrupt ({problem}); it was left untouched{}",
        path.display(),
        BackupHint(valid_backup.as_deref())
    )]
    Corrupt {
        /// The corrupt file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        problem: CorruptProblem,
        /// A backup (`sessions.json.bak`) that parses as a valid store, if there is one.
        valid_backup: Option<PathBuf>,
    },

    /// One entry of a store cannot be read as a [`SessionEntry`](crate::SessionEntry).
    ///
    /// The rest of the store is usable; this entry is preserved as written.
    #[error("session entry {key:?} in {} is invalid: {source}", path.display())]
    InvalidEntry {
        /// The key of the entry.
        key: String,
        /// The store holding it.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },

    /// The store lock could not be acquired in time.
    #[error(
        "timed out after {}ms waiting for the session store lock {}{}",
        waited.as_millis(),
        path.display(),
        HolderHint(holder.as_ref())
    )]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// Who held the lock when we gave up, as far as the lock file tells.
        holder: Option<LockHolder>,
        /// How long we waited.
        waited: Duration,
    },

    /// A compare-and-set found the entry changed since it was read.
    #[error("session {key} changed since it was read (expected {}, found {})", RevisionHint(*expected), RevisionHint(*actual))]
    Conflict {
        /// The session.
        key: SessionKey,
        /// The revision the caller expected (`None`: expected no entry).
        expected: Option<Revision>,
        /// The revision found (`None`: there is no entry).
        actual: Option<Revision>,
    },

    /// An update of several sessions at once
    /// ([`MultiKeyStore::apply_many`](crate::MultiKeyStore::apply_many)) named two
    /// sessions the store cannot change in one atomic step, and nothing was written.
    ///
    /// The JSON store keeps each agent's sessions in a file of its own and one write
    /// replaces one file, so it refuses keys whose sessions live in different files; a
    /// store that does not implement multi-key updates refuses any two keys.
    #[error("cannot update sessions {first} and {second} in one atomic step: {reason}")]
    NotAtomic {
        /// The first key of the request.
        first: SessionKey,
        /// A key that cannot be updated together with `first`.
        second: SessionKey,
        /// Why not.
        reason: String,
    },

    /// The operation needs an existing session and there is none.
    #[error("no session {key}")]
    NotFound {
        /// The session.
        key: SessionKey,
    },

    /// The turn's run lost its session: another turn holds it now (a message that
    /// interrupted it, or a take-over while this one was thought gone, past its lease).
    /// Its reply must not be sent: the model never sees it as said (when the run turned
    /// out lost only after the reply was logged, the line stays, marked not sent).
    #[error("the run of session {key} was taken by another turn: its reply counts as not sent; do not send it")]
    RunLost {
        /// The session.
        key: SessionKey,
    },

    /// A turn is running in the session: what takes turns back (undo, regenerate, an
    /// edit) waits until it has ended — try again then.
    #[error("a turn is running in session {key}: try again once it has ended")]
    TurnRunning {
        /// The session.
        key: SessionKey,
    },

    /// A session label was rejected (OpenClaw's `parseSessionLabel` rules).
    #[error("invalid label {label:?}: {problem}")]
    InvalidLabel {
        /// The label as given (possibly truncated for display).
        label: String,
        /// Why: not a string, empty, or longer than 64 characters.
        problem: &'static str,
    },

    /// A session may not be deleted: a turn is running, or it is a shared group or
    /// channel session and `force` was not given.
    #[error("session {key} was not deleted: {reason}")]
    DeleteRefused {
        /// The session.
        key: SessionKey,
        /// Why.
        reason: DeleteRefusal,
    },

    /// A transcript read started at an offset that is not the start of a line of it.
    #[error("offset {offset} is not the start of a line in {} ({len} bytes)", path.display())]
    InvalidOffset {
        /// The transcript.
        path: PathBuf,
        /// The offset asked for.
        offset: u64,
        /// The transcript's length.
        len: u64,
    },

    /// The caller may not read or change this session (access control, or per-agent
    /// isolation). No data of the session is returned.
    #[error("access to {resource} denied: {reason}")]
    AccessDenied {
        /// What was asked for: `session <key>`, `transcript <agent>/<session id>`.
        resource: String,
        /// Why.
        reason: AccessDenial,
    },

    /// Identity resolution does not know the channel.
    #[error(
        "no identity resolution for channel {channel:?} (or not with this kind of identifier)"
    )]
    UnknownChannel {
        /// The channel.
        channel: String,
    },

    /// A database backend failed: the server is unreachable or restarted, a statement
    /// failed, the database is locked beyond the busy timeout. A `transient` failure
    /// (connection lost, server restarting, lock contention) can be retried: the next
    /// call opens a fresh connection.
    #[error("{backend} could not {op}: {source}")]
    Database {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// What was being done (`"begin a transaction"`, `"read a session"`, …).
        op: &'static str,
        /// Whether retrying may succeed.
        transient: bool,
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A database was written by a newer version of this crate: its schema is newer
    /// than this version knows, so nothing is read or written.
    #[error("{backend} schema version {found} is newer than this version supports ({supported}); upgrade agent-sessions")]
    UnsupportedSchema {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The database's schema version.
        found: i64,
        /// The newest version this crate knows.
        supported: i64,
    },

    /// A store that had to exist is not there (opened with
    /// [`OpenMode::ReadOnly`](crate::store::OpenMode::ReadOnly) or
    /// [`OpenMode::Existing`](crate::store::OpenMode::Existing)): no directory, no
    /// database file, no tables in the schema. Nothing was created.
    ///
    /// ```
    /// use agent_sessions::store::{Backend, OpenMode};
    /// use agent_sessions::Error;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = Backend::open_with("json:/no/such/dir", OpenMode::ReadOnly).await.unwrap_err();
    /// assert!(matches!(err, Error::StoreNotFound { .. }));
    /// assert!(err.to_string().contains("/no/such/dir"));
    /// assert!(!std::path::Path::new("/no/such/dir").exists());
    /// # }
    /// ```
    #[error("no session store at {store}: {problem}")]
    StoreNotFound {
        /// The store, as a URL (`json:<dir>`, `sqlite:<file>`, `postgres://…?schema=…`),
        /// without any password.
        store: String,
        /// What is missing.
        problem: String,
    },

    /// A database opened read-only has an older schema than this version uses; it is
    /// not migrated without write access. Opening it once for writing migrates it.
    #[error("{backend} schema version {found} is older than this version's ({supported}) and the store was opened read-only; open it once for writing to migrate it")]
    SchemaNotMigrated {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The database's schema version.
        found: i64,
        /// The version this crate uses.
        supported: i64,
    },

    /// A store URL (`json:<dir>`, `sqlite:<file>`, `postgres://…`) could not be used.
    #[error("invalid store url {url:?}: {problem}")]
    InvalidStoreUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        problem: String,
    },

    /// A configuration value was refused before anything ran with it: an empty secret
    /// (which would let every caller in), a zero timeout, a connection limit of zero.
    #[error("invalid {option}: {problem}")]
    InvalidOption {
        /// Which option (`secret`, `header_read_timeout`, `max_connections`, …).
        option: &'static str,
        /// Why it was refused.
        problem: &'static str,
    },

    /// An OpenClaw configuration (`openclaw.json`) cannot be used: it is not JSON5, or a
    /// setting this crate reads holds a value OpenClaw would refuse too. `field` names
    /// the setting (`session.dmScope`); it is `None` when the file as a whole is
    /// unusable. Settings the crate does not read are never the cause.
    ///
    /// ```
    /// use agent_sessions::ops::openclaw::OpenClawConfig;
    /// use agent_sessions::Error;
    ///
    /// let err = OpenClawConfig::from_json5_str("{ session: { dmScope: 'per-user' } }").unwrap_err();
    /// assert!(matches!(&err, Error::Config { field: Some(field), .. } if field == "session.dmScope"));
    /// assert!(err.to_string().contains(
    ///     "session.dmScope: expected one of main, per-peer, per-channel-peer, per-account-channel-peer"
    /// ));
    /// ```
    #[error("invalid OpenClaw config{}: {}{message}", ConfigFileHint(path.as_deref()), ConfigFieldHint(field.as_deref()))]
    Config {
        /// The file, when the configuration was read from one.
        path: Option<PathBuf>,
        /// The setting, as a path from the top of the file (`session.reset.mode`,
        /// `session.sendPolicy.rules[1].action`).
        field: Option<String>,
        /// What is wrong, and what would be accepted.
        message: String,
    },

    /// The operation needs a part the manager was built without.
    #[error("this needs {what}")]
    NotConfigured {
        /// What is missing.
        what: &'static str,
    },

    /// A host-supplied component (an embedder, a categorizer, a summarizer) or a
    /// component of the crate's own (a search index) failed or answered something
    /// unusable. The component's own error is the [`source`](std::error::Error::source);
    /// build one with [`Error::component`].
    #[error("the {component} failed: {source}")]
    Component {
        /// Which component: `embedder`, `categorizer`, `search index`, ….
        component: &'static str,
        /// What went wrong, as the component reported it.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A value could not be encoded as JSON (a `serde_json::Value` inside it was not
    /// representable, or a serializer failed).
    #[error("could not encode {what} as JSON: {source}")]
    Encode {
        /// What was being encoded, and for where (`a transcript entry for <path>`).
        what: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },

    /// Encrypted data could not be sealed or opened: the master key is missing or not
    /// the one the data was sealed under, a sealed value was altered or moved to another
    /// session or line, or a key file is damaged. Nothing was written.
    #[error("encryption: {problem}")]
    Encryption {
        /// What went wrong, and what to check.
        problem: String,
    },

    /// The failure of one write shared by several callers — the JSON store writes the
    /// updates of concurrent callers together (a group commit) — as every one of them
    /// receives it: the same error, with its kind ([`Error::is_transient`] answers for
    /// it).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

impl Error {
    /// The error's kind as a stable snake_case name (`lock_timeout`, `corrupt`,
    /// `database`, …): what metrics and logs group errors by.
    ///
    /// ```
    /// use agent_sessions::Error;
    ///
    /// assert_eq!(Error::component("embedder", "down").kind(), "component");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidKey { .. } => "invalid_key",
            Error::InvalidId { .. } => "invalid_id",
            Error::Io { .. } => "io",
            Error::NotAFile { .. } => "not_a_file",
            Error::FileTooLarge { .. } => "file_too_large",
            Error::Corrupt { .. } => "corrupt",
            Error::InvalidEntry { .. } => "invalid_entry",
            Error::LockTimeout { .. } => "lock_timeout",
            Error::Conflict { .. } => "conflict",
            Error::NotAtomic { .. } => "not_atomic",
            Error::NotFound { .. } => "not_found",
            Error::RunLost { .. } => "run_lost",
            Error::TurnRunning { .. } => "turn_running",
            Error::InvalidLabel { .. } => "invalid_label",
            Error::DeleteRefused { .. } => "delete_refused",
            Error::InvalidOffset { .. } => "invalid_offset",
            Error::AccessDenied { .. } => "access_denied",
            Error::UnknownChannel { .. } => "unknown_channel",
            Error::Database { .. } => "database",
            Error::UnsupportedSchema { .. } => "unsupported_schema",
            Error::StoreNotFound { .. } => "store_not_found",
            Error::SchemaNotMigrated { .. } => "schema_not_migrated",
            Error::InvalidStoreUrl { .. } => "invalid_store_url",
            Error::InvalidOption { .. } => "invalid_option",
            Error::Config { .. } => "config",
            Error::NotConfigured { .. } => "not_configured",
            Error::Component { .. } => "component",
            Error::Encode { .. } => "encode",
            Error::Encryption { .. } => "encryption",
            Error::Shared(error) => error.kind(),
        }
    }

    /// Whether retrying the call may succeed: a lock timeout, a write conflict, a turn still running, a lost
    /// database connection, a server that is restarting, or a process or system out of
    /// file descriptors (`EMFILE`, `ENFILE`) for the moment.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::LockTimeout { .. } | Error::Conflict { .. } | Error::TurnRunning { .. } => true,
            Error::Io { source, .. } => is_out_of_descriptors(source),
            Error::Database { transient, .. } => *transient,
            Error::Shared(error) => error.is_transient(),
            _ => false,
        }
    }

    /// A [`Component`](Error::Component) error: `component` failed with `source` (any
    /// error, or a message).
    ///
    /// ```
    /// use agent_sessions::Error;
    ///
    /// let error = Error::component("embedder", "the model is down");
    /// assert_eq!(error.to_string(), "the embedder failed: the model is down");
    /// ```
    pub fn component(
        component: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Component {
            component,
            source: source.into(),
        }
    }

    /// [`Error::InvalidStoreUrl`] for `url`, with the password of a
    /// `scheme://user:password@host` URL masked: an error is printed and logged.
    pub(crate) fn invalid_store_url(url: &str, problem: impl Into<String>) -> Self {
        Error::InvalidStoreUrl {
            url: without_password(url),
            problem: problem.into(),
        }
    }

    pub(crate) fn encode(what: impl Into<String>, source: serde_json::Error) -> Self {
        Error::Encode {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn invalid_id(kind: IdKind, value: &str, problem: &'static str) -> Self {
        Error::InvalidId {
            kind,
            value: truncate_for_display(value),
            problem,
        }
    }

    pub(crate) fn invalid_label(label: &str, problem: &'static str) -> Self {
        Error::InvalidLabel {
            label: truncate_for_display(label),
            problem,
        }
    }

    pub(crate) fn invalid_key(key: &str, problem: KeyProblem) -> Self {
        Error::InvalidKey {
            key: truncate_for_display(key),
            problem,
        }
    }
}

/// Why access to a session was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessDenial {
    /// The caller is not the owner and does not take part in the session (or the
    /// session does not exist, which is not revealed).
    NotParticipant,
    /// The caller's channel token is limited to another part of the key space.
    OutsideTokenNamespace,
    /// The session belongs to another agent than the one this manager serves.
    OtherAgent,
    /// Only the owner, unrestricted by a namespace, may do this (erasing a person).
    OwnerOnly,
}

impl fmt::Display for AccessDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessDenial::NotParticipant => "the caller is not the owner and not a participant",
            AccessDenial::OutsideTokenNamespace => {
                "the key is outside the caller's token namespace"
            }
            AccessDenial::OtherAgent => "the session belongs to another agent",
            AccessDenial::OwnerOnly => "only the owner may do this",
        })
    }
}

/// Why a session was not deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteRefusal {
    /// A turn is running in it.
    Running,
    /// It is a group or channel session, kept as shared history unless forced.
    SharedHistory,
}

impl fmt::Display for DeleteRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeleteRefusal::Running => "a turn is running in it",
            DeleteRefusal::SharedHistory => {
                "group and channel sessions are shared history; delete with force to remove one"
            }
        })
    }
}

/// Why a session key was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyProblem {
    /// The key is empty or only whitespace.
    Empty,
    /// The key is longer than `4096` bytes.
    TooLong,
    /// The key contains a control character (newline, NUL, …).
    ControlCharacter,
    /// Two colons in a row, or a colon at either end.
    EmptySegment,
    /// The key is neither `global` nor `agent:<agentId>:<rest>`.
    NotAgentScoped,
    /// The key starts with `agent:` but lacks the agent id or the rest after it
    /// (`agent:main`, `agent:`): OpenClaw's `malformed_agent` shape, as opposed to a
    /// key with no agent scope at all ([`KeyProblem::NotAgentScoped`]).
    MalformedAgentKey,
    /// The agent id inside the key is not a valid agent id.
    InvalidAgentId,
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyProblem::Empty => "the key is empty",
            KeyProblem::TooLong => "the key is longer than 4096 bytes",
            KeyProblem::ControlCharacter => "the key contains a control character",
            KeyProblem::EmptySegment => "the key has an empty `:` segment",
            KeyProblem::NotAgentScoped => {
                "a key is `global` or `agent:<agentId>:<rest>` (use SessionKey::for_agent for request keys)"
            }
            KeyProblem::MalformedAgentKey => {
                "the key starts with `agent:` but has no agent id or nothing after it; write `agent:<agentId>:<rest>` (the agent's main session is `agent:<agentId>:main`)"
            }
            KeyProblem::InvalidAgentId => {
                "the agent id must be 1-64 characters of [a-z0-9_-], not starting with `-`"
            }
        })
    }
}

/// Which kind of id an [`Error::InvalidId`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdKind {
    /// An agent id.
    Agent,
    /// A channel account id.
    Account,
    /// A channel name.
    Channel,
    /// A DM peer, group or channel id.
    Peer,
    /// A thread or topic id.
    Thread,
    /// The main-session key name.
    MainKey,
    /// A subagent id.
    Subagent,
    /// A session id (names a transcript file).
    SessionId,
    /// A file-name component that failed to decode.
    FileComponent,
    /// A transcript path stored in an entry.
    SessionFile,
    /// A time zone.
    TimeZone,
    /// A session workspace's id.
    WorkspaceId,
    /// A file name in a session workspace.
    WorkspaceFile,
    /// Where a follower starts ([`Position`](crate::transcript::follow::Position)).
    Position,
}

impl fmt::Display for IdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdKind::Agent => "agent id",
            IdKind::Account => "account id",
            IdKind::Channel => "channel",
            IdKind::Peer => "peer id",
            IdKind::Thread => "thread id",
            IdKind::MainKey => "main key",
            IdKind::Subagent => "subagent id",
            IdKind::SessionId => "session id",
            IdKind::FileComponent => "file name component",
            IdKind::SessionFile => "session file",
            IdKind::TimeZone => "time zone",
            IdKind::WorkspaceId => "workspace id",
            IdKind::WorkspaceFile => "workspace file name",
            IdKind::Position => "follow position",
        })
    }
}

/// What is wrong with a corrupt store file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptProblem {
    /// The file has zero bytes.
    #[error("the file is empty")]
    Empty,
    /// The file is not UTF-8.
    #[error("the file is not valid UTF-8 after byte {valid_up_to}")]
    InvalidUtf8 {
        /// Bytes before the first invalid sequence.
        valid_up_to: usize,
    },
    /// The file is not JSON (nor JSON5); truncated files end up here.
    #[error("not valid JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    /// The file is JSON but its top level is not an object of entries.
    #[error("the top level is {found}, not an object of session entries")]
    NotAnObject {
        /// What the top level is (`"an array"`, `"a string"`, …).
        found: &'static str,
    },
}

/// Who holds a store lock, as read from the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    /// The holder's process id, if the lock file names one.
    pub pid: Option<u32>,
    /// When the holder took the lock, if the lock file says.
    pub started_at: Option<DateTime<Utc>>,
    /// Whether the holder is an `agent-sessions` process (as opposed to OpenClaw or unknown).
    pub agent_sessions: bool,
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.agent_sessions {
            "agent-sessions"
        } else {
            "another program"
        })?;
        if let Some(pid) = self.pid {
            write!(f, " pid {pid}")?;
        }
        if let Some(since) = self.started_at {
            write!(f, " since {}", since.format("%Y-%m-%dT%H:%M:%S%.3fZ"))?;
        }
        Ok(())
    }
}

struct BackupHint<'a>(Option<&'a Path>);

impl fmt::Display for BackupHint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, "; a valid backup exists at {}", path.display()),
            None => f.write_str("; no valid backup exists"),
        }
    }
}

struct ConfigFileHint<'a>(Option<&'a Path>);

impl fmt::Display for ConfigFileHint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, " {}", path.display()),
            None => Ok(()),
        }
    }
}

struct ConfigFieldHint<'a>(Option<&'a str>);

impl fmt::Display for ConfigFieldHint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(field) => write!(f, "{field}: "),
            None => Ok(()),
        }
    }
}

struct HolderHint<'a>(Option<&'a LockHolder>);

impl fmt::Display for HolderHint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(holder) => write!(f, " (held by {holder})"),
            None => Ok(()),
        }
    }
}

struct RevisionHint(Option<Revision>);

impl fmt::Display for RevisionHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(revision) => write!(f, "revision {revision}"),
            None => f.write_str("no entry"),
        }
    }
}

/// Ids and keys come from remote users; keep error messages bounded.
fn truncate_for_display(value: &str) -> String {
    const MAX: usize = 200;
    if value.len() <= MAX {
        return value.to_owned();
    }
    let mut end = MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &value[..end])
}

/// `url` with the password of its `user:password@` part, if any, as `***`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some((user_info, _)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let Some((user, _)) = user_info.split_once(':') else {
        return url.to_owned();
    };
    format!("{scheme}://{user}:***{}", &rest[user_info.len()..])
}

/// Whether `error` says the process or the system has no file descriptor left
/// (`EMFILE`, `ENFILE`): a condition that passes as other files close.
pub(crate) fn is_out_of_descriptors(error: &io::Error) -> bool {
    // EMFILE and ENFILE on Linux and the BSDs.
    matches!(error.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_url_in_an_error_shows_no_password() {
        for (url, shown) in [
            (
                "postgres://u:secretpw@host/db?schema=x;drop",
                "postgres://u:***@host/db?schema=x;drop",
            ),
            (
                "postgresql://u:p@ss:w@rd@host:5/db",
                "postgresql://u:***@host:5/db",
            ),
            ("postgres://u@host/db", "postgres://u@host/db"),
            ("sqlite:/tmp/a:b@c", "sqlite:/tmp/a:b@c"),
        ] {
            let error = Error::invalid_store_url(url, "refused");
            assert_eq!(
                error.to_string(),
                format!("invalid store url {shown:?}: refused")
            );
        }
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_postgres_url_refused_before_connecting_shows_no_password() {
        for url in [
            "postgres://u:secretpw@host/db?schema=x;drop",
            "postgres://u:secretpw@host/db?schema=",
            "postgres://u:secretpw@host:99999/db",
        ] {
            let error = crate::store::Backend::open(url).await.unwrap_err();
            assert!(!error.to_string().contains("secretpw"), "{error}");
        }
    }
}
