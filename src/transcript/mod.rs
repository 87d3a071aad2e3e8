//! Transcripts: every message of a session, durably, in OpenClaw's JSONL format.
//!
//! A transcript is the session's event log: user and assistant messages, tool calls and
//! results, status changes and checkpoints, one JSON line each, in order. Each event has
//! an [`Offset`] that only grows, so a client that reconnects replays from the last one
//! it saw. The message log (who said what to which agent, on which channel, how long it
//! took) rides on the message lines as a [`LogFields`] object; see `docs/transcripts.md`
//! for why it lives there.
//!
//! [`TranscriptStore`] is the seam; [`FileTranscriptStore`](crate::store::FileTranscriptStore) writes OpenClaw's files:
//!
//! ```text
//! <root>/agents/<agentId>/sessions/<sessionId>.jsonl
//! <root>/agents/<agentId>/sessions/<sessionId>-topic-<topicId>.jsonl
//! ```
//!
//! ```
//! use agent_sessions::transcript::{Offset, SessionHeader, TranscriptEntry, TranscriptRef, TranscriptStore};
//! use agent_sessions::store::FileTranscriptStore;
//! use agent_sessions::AgentId;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = FileTranscriptStore::new(dir.path());
//! let transcript = TranscriptRef::new(AgentId::main(), "0f5d59ee-034e-47d9-ac97-d383e6c022b8");
//! let now = chrono::Utc::now();
//! store.create(&transcript, &SessionHeader::new(&transcript.session_id, now)).await?;
//! store.append(&transcript, vec![TranscriptEntry::user_text("Hello", now)]).await?;
//!
//! let read = store.read(&transcript, Offset::START).await?;
//! assert_eq!(read.events[0].entry.message.as_ref().unwrap().text(), "Hello");
//! // Later: only what is new.
//! assert!(store.read(&transcript, read.next).await?.events.is_empty());
//! # Ok(())
//! # }
//! ```

mod entry;
mod fields;
pub mod follow;
mod in_memory;
mod index;
pub(crate) mod lines;
pub mod search;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::error::Result;
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionEntry;

pub(crate) use entry::iso_timestamp;
pub use entry::{
    AgentMessage, ChatterSender, CheckpointReason, Content, ContentBlock, Cost, Direction,
    EventKind, LogFields, Role, SessionHeader, TranscriptEntry, Usage,
};
pub use in_memory::InMemoryTranscriptStore;
pub use index::{IndexDelta, IndexedTranscript, TranscriptIndexer};

/// A position in a transcript: events at or after it are newer than events before it.
///
/// For files it is a byte offset; other stores may use any number that only grows.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Offset(pub u64);

impl Offset {
    /// The beginning: read everything.
    pub const START: Offset = Offset(0);
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Which transcript: an agent's session, optionally a thread topic of it, optionally at
/// an explicit path (an entry's `sessionFile`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TranscriptRef {
    /// The agent.
    pub agent: AgentId,
    /// The session id (names the file).
    pub session_id: String,
    /// The thread or topic, for `<sessionId>-topic-<topicId>.jsonl`.
    pub topic: Option<String>,
    /// An explicit transcript path (must be inside the agent's sessions directory).
    pub session_file: Option<String>,
}

impl TranscriptRef {
    /// The transcript of `session_id` under `agent`.
    pub fn new(agent: AgentId, session_id: impl Into<String>) -> Self {
        TranscriptRef {
            agent,
            session_id: session_id.into(),
            topic: None,
            session_file: None,
        }
    }

    /// The transcript of a stored session: its `sessionFile` if set, else named after
    /// its session id, with the key's thread or topic id for thread sessions.
    pub fn of(key: &SessionKey, entry: &SessionEntry, default_agent: &AgentId) -> Self {
        let agent = key
            .agent_id()
            .and_then(|agent| AgentId::new(agent).ok())
            .unwrap_or_else(|| default_agent.clone());
        TranscriptRef {
            agent,
            session_id: entry.session_id.clone(),
            topic: key.thread_id().map(str::to_owned),
            session_file: entry
                .session_file
                .clone()
                .filter(|file| !file.trim().is_empty()),
        }
    }
}

/// One event read from a transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// Where it starts; replaying from here yields it again.
    pub offset: Offset,
    /// Its line number (1 is the header).
    pub line: usize,
    /// The entry.
    pub entry: TranscriptEntry,
}

impl SessionEvent {
    /// What kind of event it is.
    pub fn kind(&self) -> EventKind {
        self.entry.event_kind()
    }

    /// The size of its entry as one JSON line, in bytes, counted without writing it.
    pub(crate) fn encoded_len(&self) -> u64 {
        struct Count(u64);
        impl std::io::Write for Count {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0 += bytes.len() as u64;
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        // Serialising a parsed entry into a sink that never fails cannot fail.
        let _ = serde_json::to_writer(&mut count, &self.entry);
        count.0
    }
}

/// Something wrong found while reading; the rest was still read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadIssue {
    /// The last line has no newline: a writer crashed mid-append. It is skipped, and
    /// the next append starts on a fresh line.
    TornLastLine {
        /// Its line number.
        line: usize,
        /// Where it starts.
        offset: Offset,
        /// How many bytes it has.
        bytes: usize,
    },
    /// A line that is not a JSON object with a `type`. It is skipped.
    InvalidLine {
        /// Its line number.
        line: usize,
        /// Where it starts.
        offset: Offset,
        /// What the parser said.
        message: String,
    },
    /// The first line is not a session header.
    MissingHeader,
}

impl fmt::Display for ReadIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadIssue::TornLastLine { line, bytes, .. } => {
                write!(f, "line {line}: torn last line ({bytes} bytes), skipped")
            }
            ReadIssue::InvalidLine { line, message, .. } => {
                write!(f, "line {line}: {message}, skipped")
            }
            ReadIssue::MissingHeader => f.write_str("line 1 is not a session header"),
        }
    }
}

/// What a read returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TranscriptRead {
    /// The header, when the read started at the beginning and found one.
    pub header: Option<SessionHeader>,
    /// The events, in order.
    pub events: Vec<SessionEvent>,
    /// What was wrong and skipped.
    pub issues: Vec<ReadIssue>,
    /// Where the next read starts to get only newer events.
    pub next: Offset,
}

/// Why a transcript is archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveReason {
    /// Its session was reset: `<file>.reset.<timestamp>`.
    Reset,
    /// Its session was deleted: `<file>.deleted.<timestamp>`.
    Deleted,
}

impl ArchiveReason {
    /// `reset` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ArchiveReason::Reset => "reset",
            ArchiveReason::Deleted => "deleted",
        }
    }
}

/// Which message-log records [`TranscriptStore::query_log`] returns; all conditions must
/// hold. Results are in time order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogQuery {
    /// Only this agent's transcripts (a filesystem store then reads one directory).
    pub agent: Option<AgentId>,
    /// Only this session instance.
    pub session_id: Option<String>,
    /// Only this session key.
    pub session_key: Option<String>,
    /// Only this person.
    pub person_id: Option<String>,
    /// Only this agent identity (all its variants).
    pub agent_identity: Option<String>,
    /// Only records at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only records before this time.
    pub until: Option<DateTime<Utc>>,
    /// At most this many (the earliest).
    pub limit: Option<usize>,
}

impl LogQuery {
    /// Every record.
    pub fn new() -> Self {
        LogQuery::default()
    }

    /// Only `person`'s messages with `agent_identity` — across sessions, channels and
    /// engine variants.
    pub fn person_with(person: impl Into<String>, agent_identity: impl Into<String>) -> Self {
        LogQuery {
            person_id: Some(person.into()),
            agent_identity: Some(agent_identity.into()),
            ..LogQuery::default()
        }
    }

    /// Only one session instance of `agent`.
    pub fn session(agent: AgentId, session_id: impl Into<String>) -> Self {
        LogQuery {
            agent: Some(agent),
            session_id: Some(session_id.into()),
            ..LogQuery::default()
        }
    }

    /// Only records at or after `since`.
    pub fn since(mut self, since: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self
    }

    /// Only records before `until`.
    pub fn until(mut self, until: DateTime<Utc>) -> Self {
        self.until = Some(until);
        self
    }

    /// At most `limit` records.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Whether `record` passes (all but the limit).
    pub fn matches(&self, record: &LogRecord) -> bool {
        fn eq(wanted: &Option<String>, actual: &Option<String>) -> bool {
            wanted
                .as_ref()
                .is_none_or(|w| actual.as_deref() == Some(w.as_str()))
        }
        self.agent.as_ref().is_none_or(|a| *a == record.agent)
            && self
                .session_id
                .as_ref()
                .is_none_or(|s| *s == record.session_id)
            && eq(&self.session_key, &record.log.session_key)
            && eq(&self.person_id, &record.log.person_id)
            && eq(&self.agent_identity, &record.log.agent_identity)
            && self.since.is_none_or(|since| record.at >= since)
            && self.until.is_none_or(|until| record.at < until)
    }
}

/// One message of the message log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord {
    /// The agent whose transcript holds it.
    pub agent: AgentId,
    /// The session instance.
    pub session_id: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The message text.
    pub text: String,
    /// The log fields.
    pub log: LogFields,
    /// Its event offset in the transcript.
    pub offset: Offset,
}

/// A change to a transcript, delivered live to subscribers.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptUpdate {
    /// Which transcript.
    pub transcript: TranscriptRef,
    /// The transcript's file, for file stores.
    pub path: Option<PathBuf>,
    /// The events appended.
    pub events: Vec<SessionEvent>,
    /// The session's key, when the update came from a host's notice that named it
    /// (OpenClaw's object form of `emitSessionTranscriptUpdate`).
    pub session_key: Option<String>,
    /// The message appended, as the host's notice gave it (OpenClaw's object form);
    /// `None` for the crate's own appends, whose lines are in `events`.
    pub message: Option<serde_json::Value>,
}

/// A transcript changed, as an OpenClaw host announces it with
/// `emitSessionTranscriptUpdate`: the transcript's file, and in OpenClaw's object form
/// the session's key and the appended message. Given to
/// [`SessionManager::emit_transcript_update`], it wakes the crate's subscribers (their
/// update carries the key and the message) and followers of that transcript.
///
/// [`SessionManager::emit_transcript_update`]: crate::SessionManager::emit_transcript_update
///
/// ```
/// use agent_sessions::transcript::TranscriptNotice;
/// use serde_json::json;
///
/// let by_path = TranscriptNotice::from_openclaw(&json!(" /state/agents/main/sessions/s-1.jsonl "))?;
/// assert_eq!(by_path.session_file, "/state/agents/main/sessions/s-1.jsonl");
/// let object = TranscriptNotice::from_openclaw(&json!({
///     "sessionFile": "/state/agents/main/sessions/s-1.jsonl",
///     "sessionKey": "agent:main:telegram:dm:42",
///     "message": {"role": "assistant", "content": "Done."}
/// }))?;
/// assert_eq!(object.session_key.as_deref(), Some("agent:main:telegram:dm:42"));
/// assert_eq!(object.message.unwrap()["content"], "Done.");
/// assert!(TranscriptNotice::from_openclaw(&json!(42)).is_err());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranscriptNotice {
    /// The transcript's file, trimmed; blank names nothing (the notice is ignored).
    pub session_file: String,
    /// The session's key, when the host gave it.
    pub session_key: Option<String>,
    /// The message appended, when the host gave it (OpenClaw's object form).
    pub message: Option<serde_json::Value>,
}

impl TranscriptNotice {
    /// A notice for the transcript at `session_file` (trimmed).
    pub fn file(session_file: impl AsRef<str>) -> Self {
        TranscriptNotice {
            session_file: session_file.as_ref().trim().to_owned(),
            session_key: None,
            message: None,
        }
    }

    /// The notice of OpenClaw's `emitSessionTranscriptUpdate` argument: a string (the
    /// file) or an object with `sessionFile` and optional `sessionKey` and `message`.
    /// Anything else — a number, an object without a string `sessionFile`, a
    /// `sessionKey` that is not a string — is [`Error::InvalidId`](crate::Error::InvalidId) of kind
    /// [`IdKind::SessionFile`](crate::error::IdKind::SessionFile).
    pub fn from_openclaw(update: &serde_json::Value) -> Result<Self> {
        use serde_json::Value;
        let refused = |problem| {
            crate::Error::invalid_id(
                crate::error::IdKind::SessionFile,
                &update.to_string(),
                problem,
            )
        };
        match update {
            Value::String(file) => Ok(TranscriptNotice::file(file)),
            Value::Object(fields) => {
                let Some(Value::String(file)) = fields.get("sessionFile") else {
                    return Err(refused(
                        "a transcript update names its sessionFile as a string",
                    ));
                };
                let session_key = match fields.get("sessionKey") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(key)) => {
                        Some(key.trim().to_owned()).filter(|key| !key.is_empty())
                    }
                    Some(_) => return Err(refused("sessionKey must be a string")),
                };
                Ok(TranscriptNotice {
                    session_key,
                    message: fields.get("message").filter(|m| !m.is_null()).cloned(),
                    ..TranscriptNotice::file(file)
                })
            }
            _ => Err(refused("a transcript update is a file path or an object")),
        }
    }

    /// Whether it names no transcript (a blank file): OpenClaw ignores such a notice.
    pub(crate) fn is_blank(&self) -> bool {
        self.session_file.trim().is_empty()
    }
}

/// A live feed of [`TranscriptUpdate`]s. Dropping it unsubscribes.
///
/// A subscriber that falls behind by more than the channel's capacity misses updates
/// ([`recv`](Self::recv) then reports how many); it can catch up from the durable log
/// with [`TranscriptStore::read`] from its last offset.
pub struct TranscriptSubscription {
    receiver: broadcast::Receiver<TranscriptUpdate>,
    only: Option<UpdateFilter>,
}

type UpdateFilter = Box<dyn Fn(&TranscriptUpdate) -> bool + Send + Sync>;

impl fmt::Debug for TranscriptSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TranscriptSubscription")
            .field("pending", &self.receiver.len())
            .field("filtered", &self.only.is_some())
            .finish()
    }
}

/// How a subscription ended or skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionError {
    /// The store is gone.
    Closed,
    /// This many updates were missed; replay them from the transcript.
    Lagged(u64),
}

impl TranscriptSubscription {
    /// The next update (that passes the filter, if there is one).
    pub async fn recv(&mut self) -> std::result::Result<TranscriptUpdate, SubscriptionError> {
        loop {
            let update = self.receiver.recv().await.map_err(|error| match error {
                broadcast::error::RecvError::Closed => SubscriptionError::Closed,
                broadcast::error::RecvError::Lagged(missed) => SubscriptionError::Lagged(missed),
            })?;
            if self.only.as_ref().is_none_or(|only| only(&update)) {
                return Ok(update);
            }
        }
    }

    /// Only the updates `keep` accepts (on top of any earlier filter). A lag count
    /// still counts every update missed, kept or not.
    pub fn only(
        mut self,
        keep: impl Fn(&TranscriptUpdate) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.only = Some(match self.only.take() {
            None => Box::new(keep),
            Some(earlier) => Box::new(move |update| earlier(update) && keep(update)),
        });
        self
    }
}

/// A shared transcript store is a transcript store.
#[async_trait]
impl<T: TranscriptStore + ?Sized> TranscriptStore for Arc<T> {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        (**self).create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        (**self).fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        (**self).append(transcript, entries).await
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        (**self).read(transcript, from).await
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        (**self).read_chunk(transcript, from, max_bytes).await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        (**self).read_back(transcript, before, max_bytes).await
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        (**self).last_compaction(transcript).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        (**self).archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        (**self).remove(transcript).await
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        (**self).query_log(query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        (**self).subscribe()
    }

    fn follow_interval(&self) -> Duration {
        (**self).follow_interval()
    }

    fn announce(&self, update: TranscriptUpdate) -> bool {
        (**self).announce(update)
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        (**self).archived(transcript).await
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        (**self).location(transcript)
    }

    async fn identity(&self, transcript: &TranscriptRef) -> Result<Option<u64>> {
        (**self).identity(transcript).await
    }
}

#[async_trait]
impl<T: TranscriptExport + ?Sized> TranscriptExport for Arc<T> {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        (**self).transcript_names(agent).await
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        (**self).export_lines(agent, name).await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        (**self).import_lines(agent, name, lines).await
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<LineEdit>,
    ) -> Result<usize> {
        (**self).overwrite_lines(agent, name, edits).await
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        (**self).remove_named(agent, name).await
    }
}

/// Cuts `read` down to its first events that hold about `max_bytes` (their entries as
/// JSON; at least one event), continuing after them.
fn first_chunk(read: &mut TranscriptRead, max_bytes: usize) {
    let mut size = 0usize;
    let keep = read
        .events
        .iter()
        .position(|event| {
            size = size
                .saturating_add(serde_json::to_vec(&event.entry).map_or(0, |json| json.len() + 1));
            size > max_bytes
        })
        .map_or(read.events.len(), |over| over.max(1));
    if keep < read.events.len() {
        read.next = read.events[keep].offset;
        read.events.truncate(keep);
        read.issues.retain(|issue| match issue {
            ReadIssue::TornLastLine { offset, .. } | ReadIssue::InvalidLine { offset, .. } => {
                *offset < read.next
            }
            ReadIssue::MissingHeader => true,
        });
    }
}

/// Cuts `read` (of a whole transcript) down to its newest events before `before` that
/// hold about `max_bytes` (their entries as JSON; at least one event), oldest first,
/// with `next` where they start.
fn last_chunk(read: &mut TranscriptRead, before: Option<Offset>, max_bytes: usize) {
    if let Some(before) = before {
        read.events.retain(|event| event.offset < before);
    }
    let mut size = 0usize;
    let keep = read
        .events
        .iter()
        .rev()
        .position(|event| {
            size = size.saturating_add(event.encoded_len() as usize + 1);
            size > max_bytes
        })
        .map_or(read.events.len(), |over| over.max(1));
    let from = read.events.len() - keep;
    read.events.drain(..from);
    if from > 0 {
        read.header = None;
        read.next = read
            .events
            .first()
            .map_or(Offset::START, |event| event.offset);
    } else {
        read.next = Offset::START;
    }
    let next = read.next;
    read.issues.retain(|issue| match issue {
        ReadIssue::TornLastLine { .. } => false,
        ReadIssue::InvalidLine { offset, .. } => *offset >= next,
        ReadIssue::MissingHeader => next == Offset::START,
    });
}

/// How much of a transcript a [`Follow`](crate::transcript::follow::Follow) reads at once by default.
pub(crate) const DEFAULT_CHUNK_BYTES: usize = 256 * 1024;

/// How often a [`Follow`](crate::transcript::follow::Follow) looks again by default when nothing wakes it.
pub(crate) const DEFAULT_FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// How many updates a slow subscriber may fall behind before it misses some.
pub(crate) const SUBSCRIPTION_CAPACITY: usize = 1024;

/// In-process publishing of transcript updates, for store implementations.
#[derive(Debug, Clone)]
pub struct UpdateHub(broadcast::Sender<TranscriptUpdate>);

impl Default for UpdateHub {
    fn default() -> Self {
        UpdateHub(broadcast::channel(SUBSCRIPTION_CAPACITY).0)
    }
}

impl UpdateHub {
    /// A new subscription.
    pub fn subscribe(&self) -> TranscriptSubscription {
        TranscriptSubscription {
            receiver: self.0.subscribe(),
            only: None,
        }
    }

    /// Sends `update` to every live subscriber (none: nothing happens).
    pub fn publish(&self, update: TranscriptUpdate) {
        let _ = self.0.send(update);
    }

    /// How many subscriptions are live.
    pub fn subscribers(&self) -> usize {
        self.0.receiver_count()
    }
}

/// Where transcripts live.
///
/// Appends are whole entries, in order, never interleaved with another writer's; reads
/// tolerate damage (a torn last line, a garbage line) and report it; nothing is erased
/// unless asked.
#[async_trait]
pub trait TranscriptStore: Send + Sync {
    /// Creates the transcript with `header` unless it exists. Returns whether it did.
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool>;

    /// Creates `child` as a fork of `parent`: `header` (whose `parentSession` names the
    /// parent) followed by the parent's entries, so the fork starts from the parent's
    /// context. Returns whether it did (`false`: `child` exists already).
    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool>;

    /// Appends entries, assigning each without an id an 8-hex-digit id and its parent
    /// (the entry before it), and creating the transcript (with a header) if needed.
    /// Returns the events as stored.
    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>>;

    /// The events at or after `from`, and where to continue.
    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead>;

    /// [`read`](Self::read), holding about `max_bytes` of lines at most: the events at
    /// or after `from` up to that size — at least one whole event when there is one,
    /// however long — and where to continue. What reads a long transcript bit by bit (a
    /// live stream, a follower) holds one chunk at a time.
    ///
    /// The default reads everything and returns the first chunk of it; the crate's
    /// stores read only the chunk (files by bytes; the SQL stores a batch of lines).
    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let mut read = self.read(transcript, from).await?;
        first_chunk(&mut read, max_bytes);
        Ok(read)
    }

    /// The newest events before `before` (the end of the transcript when `None`), about
    /// `max_bytes` of lines at most — at least one whole event when there is one,
    /// however long — oldest first. `next` is where the events start, for the next read
    /// back ([`Offset::START`] once it reached the beginning, with the header). What
    /// needs only a transcript's end (the conversation a turn gives the model, in a
    /// process that has not read it before) reads that much and not its whole age.
    /// Events read back carry line number 0 where the store cannot tell theirs without
    /// counting the lines before (a file); a torn last line is skipped.
    ///
    /// The default reads everything and keeps the newest chunk; the crate's stores read
    /// only the chunk (files backwards by bytes; the SQL stores newest first by line).
    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        if let Some(before) = before {
            // Refused as a read from there is (past the end, or not a line's start).
            self.read(transcript, before).await?;
        }
        let mut read = self.read(transcript, Offset::START).await?;
        last_chunk(&mut read, before, max_bytes);
        Ok(read)
    }

    /// The transcript's last compaction line, if it has one. The conversation a model
    /// sees starts at the last compaction (its summary stands for what is before), so
    /// what reads a conversation from its end knows how far back to go.
    ///
    /// The default reads the whole transcript; the crate's stores look for the word
    /// from the end and parse only the lines that hold it.
    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let read = self.read(transcript, Offset::START).await?;
        Ok(read
            .events
            .into_iter()
            .rev()
            .find(|event| event.entry.kind == "compaction"))
    }

    /// Archives a transcript by renaming it; returns the new name, `None` if there was
    /// no transcript.
    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>>;

    /// Erases a transcript. Returns whether there was one.
    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool>;

    /// Message-log records matching `query`, in time order.
    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>>;

    /// Live updates of every transcript of this store: the appends of this process, and
    /// of other processes where the store hears of them (PostgreSQL, SQLite). Updates
    /// are a live view; [`Follow`](crate::transcript::follow::Follow) reads one transcript durably, in order.
    fn subscribe(&self) -> TranscriptSubscription;

    /// How often a [`Follow`](crate::transcript::follow::Follow) looks again when no live update wakes it: the
    /// longest it takes a follower to see an append this store does not announce.
    fn follow_interval(&self) -> Duration {
        DEFAULT_FOLLOW_INTERVAL
    }

    /// Sends `update` to this store's subscribers, for a change made outside the
    /// store (another program appended to a transcript file and says so). Whether the
    /// store has subscribers to tell: the default has none, and its followers see the
    /// change at their next look.
    fn announce(&self, update: TranscriptUpdate) -> bool {
        let _ = update;
        false
    }

    /// Where `transcript` went if it was archived (its session was reset or deleted):
    /// its newest archived copy, as a reference [`read`](Self::read) accepts, with the
    /// same offsets. `None` while it is live, or when there is no archived copy.
    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        let _ = transcript;
        Ok(None)
    }

    /// Where `transcript` lives, as an entry's `sessionFile` records it (a path for file
    /// stores; `None` for stores without paths).
    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        let _ = transcript;
        None
    }

    /// Which copy of `transcript` is there now: a value that changes when the
    /// transcript is replaced by another (a file renamed over it, removed and made
    /// again) and stays while lines are appended; `None` when there is none or the
    /// store cannot tell. A reader that keeps what it read (as the manager keeps each
    /// session's conversation between turns) trusts it only while this is unchanged.
    ///
    /// The default is `None`: the reader then checks only that the last line it read
    /// is still there, under the same id.
    async fn identity(&self, transcript: &TranscriptRef) -> Result<Option<u64>> {
        let _ = transcript;
        Ok(None)
    }
}

/// A [`TranscriptStore`] whose transcripts can be listed and copied whole, line for
/// line: what moving transcripts between stores ([`migrate`](crate::ops::migrate)),
/// exporting and counting them need. Every store of this crate has it; a host's own
/// transcript store needs only the core trait to serve sessions.
#[async_trait]
pub trait TranscriptExport: TranscriptStore {
    /// Every transcript, live and archived, as `(agent, name)` sorted by agent and
    /// name; only `agent`'s when given. Names are file names
    /// ([`TranscriptRef::file_name`], archived ones with their suffix) in every store.
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>>;

    /// The lines of transcript `name` exactly as stored, without their newlines; a torn
    /// last line (no newline) is the last element too, so an export leaves nothing
    /// behind (imported, it ends with a newline like every line). `None` if there is no
    /// such transcript.
    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>>;

    /// Creates transcript `name` with `lines` unless it exists; returns whether it did.
    /// The lines are kept byte for byte.
    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool>;

    /// Overwrites lines of transcript `name` in place, each only if it still holds the
    /// text it was judged by; returns how many were overwritten. A new line is exactly
    /// as long as the line it replaces ([`LineEdit::new`] checks), so every other line
    /// keeps its offset and readers following the transcript are not disturbed. This is
    /// how [`SessionManager::forget_person`](crate::SessionManager::forget_person)
    /// redacts a person's lines in a shared transcript. The default is
    /// [`Error::NotConfigured`](crate::Error::NotConfigured).
    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<LineEdit>,
    ) -> Result<usize> {
        let _ = (agent, name, edits);
        Err(crate::Error::NotConfigured {
            what: "overwriting transcript lines in this transcript store",
        })
    }

    /// Removes transcript `name`, live or archived, with all its lines; returns whether
    /// it was there. The default is [`Error::NotConfigured`](crate::Error::NotConfigured).
    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        let _ = (agent, name);
        Err(crate::Error::NotConfigured {
            what: "removing transcripts by name in this transcript store",
        })
    }
}

/// One line of a transcript to overwrite in place: see
/// [`TranscriptExport::overwrite_lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineEdit {
    /// The line's index, as in [`TranscriptExport::export_lines`] (0 is the header).
    pub index: usize,
    /// The text the line must still hold.
    pub old: String,
    /// Its replacement, the same length in bytes.
    pub new: String,
}

impl LineEdit {
    /// The edit of line `index` from `old` to `new`; [`Error::InvalidOption`] when `new`
    /// is not exactly as long as `old` or holds a line break.
    ///
    /// [`Error::InvalidOption`]: crate::Error::InvalidOption
    pub fn new(index: usize, old: impl Into<String>, new: impl Into<String>) -> Result<Self> {
        let (old, new) = (old.into(), new.into());
        if old.len() != new.len() || new.contains('\n') {
            return Err(crate::Error::InvalidOption {
                option: "LineEdit",
                problem: "a line is overwritten by a line of the same length, without line breaks",
            });
        }
        Ok(LineEdit { index, old, new })
    }
}
