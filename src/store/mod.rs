//! Session stores: where entries live.
//!
//! [`SessionStore`] is the seam every backend implements. It is shaped around one
//! operation, [`SessionStore::apply`]: an atomic read-modify-write of one key. A file
//! store runs it under its lock; a SQL store runs it in a transaction with a row lock;
//! nothing requires loading every entry. [`MultiKeyStore::apply_many`] does the same for
//! several keys at once, all or nothing. [`SessionStoreExt`] builds the convenient calls
//! (`update`, `update_many`, `with_session`, `put`, `compare_and_set`) on top, for every
//! store.
//!
//! ```
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let store = InMemoryStore::new();
//! let key = SessionKey::parse("agent:main:telegram:dm:123")?;
//!
//! // Create the session if it is missing, and count a turn either way.
//! let turns = store
//!     .update(&key, |slot| {
//!         let entry = slot.get_or_insert_with(|| SessionEntry::new_session(1_770_000_000_000));
//!         let turns = entry.compaction_count.unwrap_or(0) + 1;
//!         entry.compaction_count = Some(turns);
//!         turns
//!     })
//!     .await?;
//! assert_eq!(turns, 1);
//! assert_eq!(store.count(&ListFilter::new()).await?, 1);
//! # Ok(())
//! # }
//! ```

pub(crate) mod backend;
mod cursor;
pub(crate) mod entry;
pub(crate) mod fs;
mod in_memory;
pub(crate) mod json;
pub(crate) mod json_text;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod revision;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql_transcripts;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

use std::cmp::Reverse;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::identity::key::{AgentId, PeerKind, SessionKey};
use crate::store::entry::{SessionEntry, SessionStatus};

pub use cursor::ListCursor;
pub use entry::{
    parse_session_label, parse_session_label_value, AuthProfileSource, DescriptionSource,
    ForkOrigin, GroupActivation, IdentitySummary, InboundRecord, LogCursor, QueueDrop, QueueMode,
    ResponseUsage, SendPolicy, SessionRun, SourceKind, WindowStart,
};
pub use json::paths::{
    decode_file_component, encode_file_component, expand_home, openclaw_state_dir, session_file,
    sessions_dir, store_path, transcript_path,
};
pub use revision::Revision;

pub use backend::{Backend, OpenMode, StoreUrl, SEARCH_INDEX_FILE};
pub use in_memory::InMemoryStore;
pub(crate) use json::DEFAULT_CACHE_TTL;
pub use json::{
    Durability, FileTranscriptStore, JsonFileChatter, JsonFileOptions, JsonFileStore,
    JsonFileSystemEvents, LockOptions, DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_FILE_BYTES,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresChatter, PostgresOptions, PostgresStore, PostgresSystemEvents};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteChatter, SqliteOptions, SqliteStore, SqliteSystemEvents};

/// One session as a store holds it: its key, its entry and the entry's revision.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The key.
    pub key: SessionKey,
    /// The entry (a copy: changing it changes nothing in the store).
    pub entry: SessionEntry,
    /// The entry's revision, for compare-and-set.
    pub revision: Revision,
}

/// Something a store holds but cannot serve ([`SessionStore::unreadable`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreadableEntry {
    /// Where it is: a store file, a directory, or a database table.
    pub location: String,
    /// Its key exactly as stored (empty for a whole directory).
    pub key: String,
    /// Why it cannot be served.
    pub problem: String,
}

/// The function [`SessionStore::apply`] runs on one key, under the store's lock.
///
/// It receives the current entry (`None` when there is none) and its revision. Leaving
/// the slot unchanged writes nothing; setting it to `None` deletes the entry; returning
/// an error aborts and writes nothing. The stores of this crate run it exactly once per
/// call (each holds the key's lock while it runs), but a store may run it more than
/// once — one that retries a transaction — so keep it free of side effects beyond the
/// slot and its own captured state.
pub type Mutator<'a> =
    dyn FnMut(&mut Option<SessionEntry>, Option<Revision>) -> Result<()> + Send + 'a;

/// Runs `mutator` on a copy of `before` the way every store of this crate does: a
/// changed entry leaves with its delivery fields in OpenClaw's saved shape
/// ([`normalize_delivery_fields`](crate::reply::delivery::normalize_delivery_fields)),
/// so an entry written whole is stored as OpenClaw would store it, on every backend.
pub(crate) fn run_mutator(
    mutator: &mut Mutator<'_>,
    before: Option<&SessionEntry>,
    revision: Option<Revision>,
) -> Result<Option<SessionEntry>> {
    let mut after = before.cloned();
    mutator(&mut after, revision)?;
    if after.as_ref() != before {
        if let Some(entry) = after.as_mut() {
            check_new_session_id(before, entry)?;
            crate::reply::delivery::normalize_delivery_fields(entry);
        }
    }
    Ok(after)
}

/// Refuses a session id that `after` brings in (a new entry, or a new id for an old
/// one) when it cannot name a transcript file
/// ([`validate_session_id`](crate::store::json::paths::validate_session_id)): written, it would
/// fail every later turn of the session. An id already stored is left to its reader.
fn check_new_session_id(before: Option<&SessionEntry>, after: &SessionEntry) -> Result<()> {
    if before.is_some_and(|b| b.session_id == after.session_id) {
        return Ok(());
    }
    crate::store::json::paths::validate_session_id(&after.session_id)
}

/// How many sessions replaced under one key a store keeps as `closed` (the oldest go
/// first). [`SessionManager::prune`](crate::SessionManager::prune) removes closed
/// sessions older than its age as well.
pub const CLOSED_SESSIONS_PER_KEY: usize = 20;

/// Which sessions a [`ListFilter`] selects by their status.
///
/// A store holds one current session per key. A session replaced by a new one under
/// the same key (a reset, an idle or daily timeout, topic drift, a message after a
/// close) is kept too, with status `closed`, up to [`CLOSED_SESSIONS_PER_KEY`] per
/// key: it is read back by its session id, and listed only when a filter asks for
/// closed sessions. A session without a status counts as `idle`.
///
/// ```
/// use agent_sessions::{ListFilter, SessionStatus, StatusFilter};
///
/// assert_eq!(ListFilter::new().status, StatusFilter::Listed);
/// assert_eq!(ListFilter::all().status, StatusFilter::Current);
/// let closed = ListFilter::new().status(SessionStatus::Closed);
/// assert_eq!(closed.status, StatusFilter::Only(vec![SessionStatus::Closed]));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusFilter {
    /// The current sessions except `inactive` ones: what a normal listing shows (the
    /// default).
    #[default]
    Listed,
    /// Every current session, `inactive` ones too: everything the store holds under a
    /// key ([`ListFilter::all`]).
    Current,
    /// Every session: the current ones and the closed sessions they replaced.
    Any,
    /// Only sessions with one of these statuses. With `Closed`, the sessions replaced
    /// under their key are included as well as current sessions that were closed.
    Only(Vec<SessionStatus>),
}

impl StatusFilter {
    /// Whether an entry's status passes (a missing status is `idle`).
    pub fn matches(&self, entry: &SessionEntry) -> bool {
        let status = entry.status.as_ref().unwrap_or(&SessionStatus::Idle);
        match self {
            StatusFilter::Listed => *status != SessionStatus::Inactive,
            StatusFilter::Current | StatusFilter::Any => true,
            StatusFilter::Only(wanted) => wanted.contains(status),
        }
    }

    /// Whether sessions replaced under their key (kept as `closed`) are included.
    pub(crate) fn includes_replaced(&self) -> bool {
        match self {
            StatusFilter::Any => true,
            StatusFilter::Only(wanted) => wanted.contains(&SessionStatus::Closed),
            StatusFilter::Listed | StatusFilter::Current => false,
        }
    }
}

/// The status a store records for `entry`: its status, `idle` when it has none.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn status_name(entry: &SessionEntry) -> &str {
    entry.status.as_ref().map_or("idle", SessionStatus::as_str)
}

/// The closed session `before` becomes when `after` replaces it under the same key (a
/// different session id): status `closed`, `closedAt` kept or set to when `after`
/// started. `None` when the change is no replacement.
pub(crate) fn replaced_session(
    before: Option<&SessionEntry>,
    after: Option<&SessionEntry>,
) -> Option<SessionEntry> {
    let (before, after) = (before?, after?);
    if before.session_id == after.session_id || before.session_id.is_empty() {
        return None;
    }
    let mut closed = before.clone();
    closed.status = Some(SessionStatus::Closed);
    closed.closed_at = Some(
        before
            .closed_at
            .unwrap_or_else(|| after.session_started_at.unwrap_or(after.updated_at)),
    );
    Some(closed)
}

/// One session of a [`MultiKeyStore::apply_many`] call: its key, its entry, and the
/// entry's revision.
///
/// The mutator changes [`entry`](Slot::entry): set it to create or replace the
/// session, to `None` to delete it. The key and the revision cannot be changed: the
/// revision is the one the entry had when it was read (in what `apply_many` returns:
/// the one it has after the call).
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    key: SessionKey,
    /// The entry (`None`: there is no session under the key).
    pub entry: Option<SessionEntry>,
    revision: Option<Revision>,
}

impl Slot {
    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// The entry's revision as read (`None`: there was no entry).
    pub fn revision(&self) -> Option<Revision> {
        self.revision
    }
}

/// The sessions a [`MultiKeyStore::apply_many`] call works on: one [`Slot`] per distinct
/// key, in the order the keys were first given (a key given twice is one slot).
///
/// The set of keys is fixed: the mutator can create, change or delete the session of
/// each key, but not reach any other.
///
/// ```
/// use agent_sessions::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let store = InMemoryStore::new();
/// let from = SessionKey::parse("agent:main:telegram:dm:alice")?;
/// let to = SessionKey::parse("agent:main:slack:dm:alice")?;
/// store.put(&from, SessionEntry::new("s-1", 1)).await?;
///
/// // Move the label from one session to another, both or neither.
/// store
///     .update_many(&[from.clone(), to.clone()], |slots| {
///         let label = slots.slot_mut(&from).and_then(|s| s.entry.as_mut()).and_then(|e| e.label.take());
///         let target = slots.slot_mut(&to).expect("requested");
///         target.entry.get_or_insert_with(|| SessionEntry::new("s-2", 2)).label = label;
///     })
///     .await?;
/// assert_eq!(store.get(&to).await?.unwrap().entry.label, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slots {
    slots: Vec<Slot>,
}

impl Slots {
    /// Slots for `keys` as read: `read(key)` is the stored entry and its revision.
    /// Duplicate keys are merged (the first occurrence's place is kept).
    pub fn new(
        keys: &[SessionKey],
        mut read: impl FnMut(&SessionKey) -> Option<(SessionEntry, Revision)>,
    ) -> Slots {
        Slots {
            slots: distinct_keys(keys)
                .into_iter()
                .map(|key| {
                    let (entry, revision) = read(&key).unzip();
                    Slot {
                        key,
                        entry,
                        revision,
                    }
                })
                .collect(),
        }
    }

    /// Slots from sessions read for `keys` (`None`: no session under that key).
    pub(crate) fn from_stored(keys: Vec<SessionKey>, stored: Vec<Option<StoredSession>>) -> Self {
        Slots {
            slots: keys
                .into_iter()
                .zip(stored)
                .map(|(key, stored)| {
                    let (entry, revision) = stored.map(|s| (s.entry, s.revision)).unzip();
                    Slot {
                        key,
                        entry,
                        revision,
                    }
                })
                .collect(),
        }
    }

    /// How many sessions (distinct keys).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &SessionKey> {
        self.slots.iter().map(|slot| &slot.key)
    }

    /// The slots, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Slot> {
        self.slots.iter()
    }

    /// The slots, in order, to change.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Slot> {
        self.slots.iter_mut()
    }

    /// The slot of `key`, if `key` was requested.
    pub fn slot(&self, key: &SessionKey) -> Option<&Slot> {
        self.slots.iter().find(|slot| slot.key == *key)
    }

    /// The slot of `key` to change, if `key` was requested.
    pub fn slot_mut(&mut self, key: &SessionKey) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|slot| slot.key == *key)
    }

    /// The entry under `key` (`None`: no session, or `key` was not requested).
    pub fn get(&self, key: &SessionKey) -> Option<&SessionEntry> {
        self.slot(key).and_then(|slot| slot.entry.as_ref())
    }

    /// The sessions that exist, as stored sessions.
    ///
    /// An entry whose revision is unknown (a `Slots` built by hand and changed) is
    /// given the revision of its serialised form.
    pub fn into_stored(self) -> Vec<StoredSession> {
        self.slots
            .into_iter()
            .filter_map(|slot| {
                let entry = slot.entry?;
                let revision = slot
                    .revision
                    .or_else(|| entry_revision(&entry).ok())
                    .unwrap_or(Revision::from_u64(0));
                Some(StoredSession {
                    key: slot.key,
                    entry,
                    revision,
                })
            })
            .collect()
    }
}

impl<'a> IntoIterator for &'a Slots {
    type Item = &'a Slot;
    type IntoIter = std::slice::Iter<'a, Slot>;

    fn into_iter(self) -> Self::IntoIter {
        self.slots.iter()
    }
}

/// The function [`MultiKeyStore::apply_many`] runs, once, on all the requested sessions
/// together, under the store's lock or in its transaction.
///
/// Leaving every slot unchanged writes nothing; returning an error aborts and writes
/// nothing. As with [`Mutator`], keep it free of side effects beyond the slots and its
/// own captured state.
pub type ManyMutator<'a> = dyn FnMut(&mut Slots) -> Result<()> + Send + 'a;

/// The distinct keys of `keys`, in the order they first appear.
pub(crate) fn distinct_keys(keys: &[SessionKey]) -> Vec<SessionKey> {
    let mut distinct: Vec<SessionKey> = Vec::with_capacity(keys.len());
    for key in keys {
        if !distinct.contains(key) {
            distinct.push(key.clone());
        }
    }
    distinct
}

/// Runs `mutator` on a copy of `before` the way every store of this crate does (see
/// [`run_mutator`]): every entry it changed leaves with its delivery fields in
/// OpenClaw's saved shape. The revisions are those read.
pub(crate) fn run_many_mutator(mutator: &mut ManyMutator<'_>, before: &Slots) -> Result<Slots> {
    let mut after = before.clone();
    mutator(&mut after)?;
    for (slot, old) in after.slots.iter_mut().zip(&before.slots) {
        // The mutator cannot add, remove or reorder slots; it could swap whole slots
        // (`std::mem::swap`), so keys and revisions are restored from what was read.
        slot.key = old.key.clone();
        slot.revision = old.revision;
        if slot.entry != old.entry {
            if let Some(entry) = slot.entry.as_mut() {
                check_new_session_id(old.entry.as_ref(), entry)?;
                crate::reply::delivery::normalize_delivery_fields(entry);
            }
        }
    }
    Ok(after)
}

/// Which sessions [`SessionStore::list`] returns.
///
/// All conditions must hold. Results come most recently updated first, then by key
/// (then by session id). [`ListFilter::new`] lists the current sessions that are not
/// `inactive`; [`status`](ListFilter::status),
/// [`include_inactive`](ListFilter::include_inactive) and
/// [`any_status`](ListFilter::any_status) widen or narrow that (see [`StatusFilter`]).
///
/// ```
/// use agent_sessions::{AgentId, ListFilter, PeerKind};
///
/// let filter = ListFilter::new()
///     .agent(AgentId::new("support")?)
///     .chat_type(PeerKind::Group)
///     .updated_after(1_770_000_000_000)
///     .limit(20);
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only this agent's sessions.
    pub agent: Option<AgentId>,
    /// Only keys starting with this (compared after lower-casing).
    pub key_prefix: Option<String>,
    /// Only sessions on this channel (see [`SessionEntry::channel_name`]).
    pub channel: Option<String>,
    /// Only this kind of conversation (from the entry's `chatType`, else the key).
    pub chat_type: Option<PeerKind>,
    /// Only sessions with this person.
    pub person_id: Option<String>,
    /// Only sessions with this agent identity.
    pub agent_identity: Option<String>,
    /// Only the session whose `sessionId` is this.
    pub session_id: Option<String>,
    /// Only sessions with these statuses (default: current, not `inactive`).
    pub status: StatusFilter,
    /// Only sessions with `updatedAt` strictly before this (epoch ms).
    pub updated_before: Option<u64>,
    /// Only sessions with `updatedAt` strictly after this (epoch ms).
    pub updated_after: Option<u64>,
    /// At most this many sessions.
    pub limit: Option<usize>,
    /// Only the sessions listed after this cursor: the next page (see [`ListCursor`]).
    pub after: Option<ListCursor>,
}

impl ListFilter {
    /// The current sessions that are not `inactive` (a normal listing).
    pub fn new() -> Self {
        ListFilter::default()
    }

    /// Every current session, `inactive` ones too: what the store holds under a key.
    /// `count(&ListFilter::all())` is the store's size.
    pub fn all() -> Self {
        ListFilter {
            status: StatusFilter::Current,
            ..ListFilter::default()
        }
    }

    /// Whether this filter lets every current session through (no condition, no
    /// limit): [`ListFilter::all`].
    pub(crate) fn is_everything(&self) -> bool {
        *self == ListFilter::all()
    }

    /// Only sessions with `status`; call again to allow more statuses.
    /// `SessionStatus::Closed` includes the sessions replaced under their key.
    ///
    /// ```
    /// use agent_sessions::{ListFilter, SessionStatus, StatusFilter};
    ///
    /// let busy = ListFilter::new()
    ///     .status(SessionStatus::Running)
    ///     .status(SessionStatus::AwaitingApproval);
    /// assert_eq!(
    ///     busy.status,
    ///     StatusFilter::Only(vec![SessionStatus::Running, SessionStatus::AwaitingApproval])
    /// );
    /// ```
    pub fn status(mut self, status: SessionStatus) -> Self {
        match &mut self.status {
            StatusFilter::Only(wanted) => {
                if !wanted.contains(&status) {
                    wanted.push(status);
                }
            }
            other => *other = StatusFilter::Only(vec![status]),
        }
        self
    }

    /// Lists `inactive` sessions too (they are hidden by default).
    pub fn include_inactive(mut self) -> Self {
        match &mut self.status {
            StatusFilter::Listed => self.status = StatusFilter::Current,
            StatusFilter::Only(wanted) => {
                if !wanted.contains(&SessionStatus::Inactive) {
                    wanted.push(SessionStatus::Inactive);
                }
            }
            StatusFilter::Current | StatusFilter::Any => {}
        }
        self
    }

    /// Every session whatever its status: the current ones, `inactive` ones, and the
    /// closed sessions replaced under their key.
    pub fn any_status(mut self) -> Self {
        self.status = StatusFilter::Any;
        self
    }

    /// Only `agent`'s sessions.
    pub fn agent(mut self, agent: AgentId) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Only keys starting with `prefix`.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.key_prefix = Some(prefix.trim().to_lowercase());
        self
    }

    /// Only sessions on `channel`.
    pub fn channel(mut self, channel: &str) -> Self {
        self.channel = crate::identity::key::normalize_channel(channel);
        self
    }

    /// Only this kind of conversation.
    pub fn chat_type(mut self, kind: PeerKind) -> Self {
        self.chat_type = Some(kind);
        self
    }

    /// Only sessions with `person_id`.
    pub fn person(mut self, person_id: impl Into<String>) -> Self {
        self.person_id = Some(person_id.into());
        self
    }

    /// Only sessions with `agent_identity`.
    pub fn agent_identity(mut self, identity: impl Into<String>) -> Self {
        self.agent_identity = Some(identity.into());
        self
    }

    /// Only the session whose `sessionId` is `session_id` (indexed on the SQL stores).
    pub fn session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Only sessions updated strictly before `epoch_ms`.
    pub fn updated_before(mut self, epoch_ms: u64) -> Self {
        self.updated_before = Some(epoch_ms);
        self
    }

    /// Only sessions updated strictly after `epoch_ms`.
    pub fn updated_after(mut self, epoch_ms: u64) -> Self {
        self.updated_after = Some(epoch_ms);
        self
    }

    /// At most `limit` sessions: a page of them.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only the sessions listed after `cursor`: the next page.
    pub fn after(mut self, cursor: ListCursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// The cursor of the page after `page` (what a listing with this filter returned),
    /// or `None` when `page` is shorter than the limit (or there is no limit): then it
    /// is the last. A full page gets a cursor even when nothing follows it (the next
    /// page is empty); to know, list one more than the page shows.
    pub fn next_page(&self, page: &[StoredSession]) -> Option<ListCursor> {
        let limit = self.limit?;
        (limit > 0 && page.len() >= limit)
            .then(|| page.last().map(ListCursor::after))
            .flatten()
    }

    /// Whether `key` passes the key-only conditions (agent and prefix). Stores check
    /// this before reading the entry.
    pub(crate) fn matches_key(&self, key: &SessionKey) -> bool {
        let agent_ok = self
            .agent
            .as_ref()
            .is_none_or(|agent| key.agent_id() == Some(agent.as_str()));
        let prefix_ok = self
            .key_prefix
            .as_deref()
            .is_none_or(|prefix| key.as_str().starts_with(prefix));
        agent_ok && prefix_ok
    }

    /// Whether a session passes every condition except the limit.
    pub fn matches(&self, key: &SessionKey, entry: &SessionEntry) -> bool {
        let channel_ok = self.channel.as_deref().is_none_or(|wanted| {
            entry
                .channel_name()
                .and_then(crate::identity::key::normalize_channel)
                .is_some_and(|channel| channel == wanted)
        });
        let kind_ok = self.chat_type.is_none_or(|wanted| {
            let kind = entry
                .chat_type
                .as_ref()
                .and_then(|t| t.peer_kind())
                .or_else(|| key.peer_kind());
            kind == Some(wanted)
        });
        let person_ok = self
            .person_id
            .as_deref()
            .is_none_or(|person| entry.person_id.as_deref() == Some(person));
        let identity_ok = self
            .agent_identity
            .as_deref()
            .is_none_or(|identity| entry.agent_identity.as_deref() == Some(identity));
        let session_ok = self
            .session_id
            .as_deref()
            .is_none_or(|id| entry.session_id == id);
        self.matches_key(key)
            && session_ok
            && self.status.matches(entry)
            && channel_ok
            && kind_ok
            && person_ok
            && identity_ok
            && self
                .updated_before
                .is_none_or(|before| entry.updated_at < before)
            && self
                .updated_after
                .is_none_or(|after| entry.updated_at > after)
            && self.after.as_ref().is_none_or(|cursor| {
                cursor.precedes(entry.updated_at, key.as_str(), &entry.session_id)
            })
    }

    /// Sorts sessions most recently updated first (then by key, then by session id) and
    /// applies the limit.
    pub fn finish(&self, mut sessions: Vec<StoredSession>) -> Vec<StoredSession> {
        sessions.sort_by(|a, b| {
            (Reverse(a.entry.updated_at), &a.key, &a.entry.session_id).cmp(&(
                Reverse(b.entry.updated_at),
                &b.key,
                &b.entry.session_id,
            ))
        });
        if let Some(limit) = self.limit {
            sessions.truncate(limit);
        }
        sessions
    }
}

/// A place that keeps session entries.
///
/// Implementations make [`apply`](SessionStore::apply) atomic per key — across tasks,
/// and for persistent stores across processes — so two writers never lose each other's
/// updates. Every method returns copies; nothing a caller does to a returned entry
/// changes the store.
///
/// The trait is object safe: a host can hold an `Arc<dyn SessionStore>`.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session stored under `key`, if any.
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>>;

    /// Atomically reads `key`, runs `mutator` on it and writes the result.
    ///
    /// Returns the session as it is after the call (`None` if there is no entry). When
    /// the mutator leaves the entry unchanged nothing is written.
    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>>;

    /// Sessions matching `filter`, most recently updated first.
    ///
    /// An entry that cannot be decoded is skipped (and logged as a warning), never
    /// fails the listing: one damaged entry must not hide every other session. It is
    /// kept as it is, and [`get`](Self::get) on its key reports it
    /// ([`Error::InvalidEntry`]).
    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>>;

    /// How many sessions match `filter`: as many as [`list`](Self::list) returns for
    /// it (its `limit` caps the count). `count(&ListFilter::all())` is the store's size.
    async fn count(&self, filter: &ListFilter) -> Result<usize>;

    /// What the store holds but cannot serve, each left exactly as it is: entries that
    /// do not decode, and (in OpenClaw's files) entries under keys this crate does not
    /// serve under their own key — legacy spellings (mixed case, no agent scope, filed
    /// under `main` in another agent's file), which the canonical key takes over when
    /// its session is next used, and keys of another agent — and agent directories
    /// whose names are not agent ids. [`list`](Self::list) skips these; whoever copies
    /// or checks a whole store (migration, `doctor`) must report them.
    ///
    /// The default is none: a store that can hold nothing it cannot read.
    async fn unreadable(&self) -> Result<Vec<UnreadableEntry>> {
        Ok(Vec::new())
    }

    /// Whether the store holds no session.
    async fn is_empty(&self) -> Result<bool> {
        Ok(self.count(&ListFilter::all()).await? == 0)
    }

    /// This store's [`Erase`] capability — forgetting its closed sessions and the
    /// copies it keeps — if it has one. The default is none: a store that keeps no
    /// closed sessions and no copies has nothing to erase beside its sessions.
    fn as_erase(&self) -> Option<&dyn Erase> {
        None
    }

    /// Removes `key`, returning the entry it had.
    async fn delete(&self, key: &SessionKey) -> Result<Option<SessionEntry>> {
        let mut removed = None;
        self.apply(key, &mut |slot, _| {
            removed = slot.take();
            Ok(())
        })
        .await?;
        Ok(removed)
    }
}

/// A store that forgets what it keeps beside its current sessions: the closed sessions
/// replaced under their keys, and copies of data it no longer holds (backups, files set
/// aside, a database's freed pages) — and takes closed sessions in from a copy. A capability split out of [`SessionStore`] as
/// [`MultiKeyStore`] is: what pruning, retention and
/// [`SessionManager::forget_person`](crate::SessionManager::forget_person) need, which a
/// store that keeps neither does not implement. Every store of this crate does, and
/// says so through [`SessionStore::as_erase`].
#[async_trait]
pub trait Erase: SessionStore {
    /// Forgets closed sessions that were replaced under their key (see
    /// [`StatusFilter`]), by session id; a current session is never touched. Returns
    /// how many were removed.
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize>;

    /// Replaces closed sessions (replaced under their key) by the entries given, each
    /// found by its session id; a current session is never touched. Returns how many
    /// were replaced. What [`SessionManager::forget_person`](crate::SessionManager::forget_person)
    /// takes a person out of other people's closed group sessions with.
    async fn replace_closed(&self, sessions: &[StoredSession]) -> Result<usize>;

    /// Adds closed sessions, given oldest first, each kept as replaced under its key
    /// (within [`CLOSED_SESSIONS_PER_KEY`]) unless the store already holds its session
    /// id, current or closed. Returns how many were added. What a migration
    /// ([`ops::migrate`](crate::ops::migrate)) copies a store's closed sessions with.
    async fn add_closed(&self, sessions: &[StoredSession]) -> Result<usize>;

    /// Erases what the store keeps of data it no longer holds, wherever one of
    /// `needles` (a person's identifiers, the ids of their erased sessions) is in it:
    /// `sessions.json.bak`, orphaned temporary files, files set aside as corrupt and
    /// quarantined copies in a JSON tree; freed pages, the write-ahead log and the
    /// full-text segments of a SQLite database. With `vacuum`, the database is also
    /// rewritten (SQLite `VACUUM`; PostgreSQL `VACUUM` of the crate's tables, after
    /// which dead row versions no longer hold the data). Returns how many copies were
    /// removed or rewritten. Called by
    /// [`SessionManager::forget_person`](crate::SessionManager::forget_person).
    async fn erase_copies(&self, needles: &[String], vacuum: bool) -> Result<usize>;
}

/// A store that updates several sessions in one atomic step: a capability only some
/// hosts need (moving a person's sessions together, relabelling a group of them), so
/// a store implements it beside [`SessionStore`] when it can. Every store of this
/// crate does; [`SessionStoreExt::update_many`] is the convenient call.
#[async_trait]
pub trait MultiKeyStore: SessionStore {
    /// Atomically reads the sessions of several keys, runs `mutator` once on all of
    /// them, and writes the result: every change or none (OpenClaw's
    /// `updateSessionStore`, whose mutator sees the whole store).
    ///
    /// The mutator sees one [`Slot`] per distinct key (a key given twice is one slot,
    /// in the place of its first occurrence) and may create, change or delete each;
    /// every entry it changes is written with its delivery fields normalised, as
    /// [`apply`](SessionStore::apply) writes one. Returns the sessions as they are after the
    /// call, in the same order, each with its current revision. Nothing is written
    /// when the mutator changes nothing, returns an error (which the call returns) or
    /// panics, or when one of the entries cannot be decoded
    /// ([`Error::InvalidEntry`], every entry left as it is).
    ///
    /// The stores of this crate run it under one lock or in one transaction: the
    /// memory store under its lock, SQLite and PostgreSQL in one transaction (locking
    /// the keys in a fixed order, so two calls over overlapping keys cannot deadlock),
    /// the JSON store under the lock of one `sessions.json` with one write — and it
    /// refuses keys whose sessions live in different files ([`Error::NotAtomic`]:
    /// different agents, unless [`JsonFileOptions::store_path`] puts every agent in
    /// one file).
    ///
    /// The conformance cases of [`multi_key_conformance_tests!`](crate::multi_key_conformance_tests)
    /// check an implementation.
    async fn apply_many(&self, keys: &[SessionKey], mutator: &mut ManyMutator<'_>)
        -> Result<Slots>;
}

/// Convenient calls built on [`SessionStore::apply`], available on every store.
#[async_trait]
pub trait SessionStoreExt: SessionStore {
    /// Serialised read-modify-write of `key`; returns what `f` returns.
    ///
    /// `f` sees `None` when there is no session; it may create one, change it, or set
    /// the slot to `None` to delete it.
    async fn update<R, F>(&self, key: &SessionKey, mut f: F) -> Result<R>
    where
        F: FnMut(&mut Option<SessionEntry>) -> R + Send,
        R: Send,
    {
        let mut result = None;
        self.apply(key, &mut |slot, _| {
            result = Some(f(slot));
            Ok(())
        })
        .await?;
        Ok(result.expect("a store runs the mutator before returning Ok"))
    }

    /// Atomic read-modify-write of several sessions at once; returns what `f` returns.
    ///
    /// `f` runs once on one [`Slot`] per distinct key and may create, change or delete
    /// each session; the store writes every change or none (see
    /// [`MultiKeyStore::apply_many`], which also takes a mutator that can fail).
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let store = InMemoryStore::new();
    /// let keys = [
    ///     SessionKey::parse("agent:main:telegram:dm:alice")?,
    ///     SessionKey::parse("agent:main:whatsapp:dm:alice")?,
    /// ];
    /// // Give both of Alice's sessions one label, in one step.
    /// let created = store
    ///     .update_many(&keys, |slots| {
    ///         let mut created = 0;
    ///         for slot in slots.iter_mut() {
    ///             if slot.entry.is_none() {
    ///                 created += 1;
    ///             }
    ///             slot.entry.get_or_insert_with(|| SessionEntry::new_session(1)).label =
    ///                 Some("alice".into());
    ///         }
    ///         created
    ///     })
    ///     .await?;
    /// assert_eq!(created, 2);
    /// assert_eq!(store.count(&ListFilter::new()).await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    async fn update_many<R, F>(&self, keys: &[SessionKey], mut f: F) -> Result<R>
    where
        Self: MultiKeyStore,
        F: FnMut(&mut Slots) -> R + Send,
        R: Send,
    {
        let mut result = None;
        self.apply_many(keys, &mut |slots| {
            result = Some(f(slots));
            Ok(())
        })
        .await?;
        Ok(result.expect("a store runs the mutator before returning Ok"))
    }

    /// Serialised read-modify-write of an existing session; [`Error::NotFound`] when
    /// there is none.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let store = InMemoryStore::new();
    /// let key = SessionKey::parse("agent:main:main")?;
    /// assert!(matches!(
    ///     store.with_session(&key, |e| e.label = Some("x".into())).await,
    ///     Err(agent_sessions::Error::NotFound { .. })
    /// ));
    /// store.put(&key, SessionEntry::new_session(1)).await?;
    /// store.with_session(&key, |e| e.label = Some("inbox".into())).await?;
    /// assert_eq!(store.get(&key).await?.unwrap().entry.label.as_deref(), Some("inbox"));
    /// # Ok(())
    /// # }
    /// ```
    async fn with_session<R, F>(&self, key: &SessionKey, mut f: F) -> Result<R>
    where
        F: FnMut(&mut SessionEntry) -> R + Send,
        R: Send,
    {
        let mut result = None;
        self.apply(key, &mut |slot, _| match slot {
            Some(entry) => {
                result = Some(f(entry));
                Ok(())
            }
            None => Err(Error::NotFound { key: key.clone() }),
        })
        .await?;
        Ok(result.expect("a store runs the mutator before returning Ok"))
    }

    /// Stores `entry` under `key`, replacing any entry there.
    async fn put(&self, key: &SessionKey, entry: SessionEntry) -> Result<StoredSession> {
        let stored = self
            .apply(key, &mut |slot, _| {
                *slot = Some(entry.clone());
                Ok(())
            })
            .await?;
        Ok(stored.expect("an entry was just stored"))
    }

    /// Replaces the entry only if its revision is still `expected` (`None`: only if
    /// there is no entry). `new = None` deletes. [`Error::Conflict`] otherwise, and
    /// nothing is written.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let store = InMemoryStore::new();
    /// let key = SessionKey::parse("agent:main:main")?;
    /// let first = store.compare_and_set(&key, None, Some(SessionEntry::new("a", 1))).await?;
    /// let read = first.unwrap().revision;
    /// store.put(&key, SessionEntry::new("b", 2)).await?; // someone else writes
    /// let stale = store.compare_and_set(&key, Some(read), Some(SessionEntry::new("c", 3))).await;
    /// assert!(matches!(stale, Err(agent_sessions::Error::Conflict { .. })));
    /// # Ok(())
    /// # }
    /// ```
    async fn compare_and_set(
        &self,
        key: &SessionKey,
        expected: Option<Revision>,
        new: Option<SessionEntry>,
    ) -> Result<Option<StoredSession>> {
        self.apply(key, &mut |slot, actual| {
            if actual != expected {
                return Err(Error::Conflict {
                    key: key.clone(),
                    expected,
                    actual,
                });
            }
            *slot = new.clone();
            Ok(())
        })
        .await
    }
}

impl<S: SessionStore + ?Sized> SessionStoreExt for S {}

#[async_trait]
impl<S: Erase + ?Sized> Erase for std::sync::Arc<S> {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        (**self).remove_closed(session_ids).await
    }

    async fn replace_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        (**self).replace_closed(sessions).await
    }

    async fn add_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        (**self).add_closed(sessions).await
    }

    async fn erase_copies(&self, needles: &[String], vacuum: bool) -> Result<usize> {
        (**self).erase_copies(needles, vacuum).await
    }
}

#[async_trait]
impl<S: MultiKeyStore + ?Sized> MultiKeyStore for std::sync::Arc<S> {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut ManyMutator<'_>,
    ) -> Result<Slots> {
        (**self).apply_many(keys, mutator).await
    }
}

/// A shared store is a store: `Arc<JsonFileStore>` can be handed to a
/// [`SessionManager`](crate::SessionManager) and used elsewhere at the same time.
#[async_trait]
impl<S: SessionStore + ?Sized> SessionStore for std::sync::Arc<S> {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        (**self).get(key).await
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        (**self).apply(key, mutator).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        (**self).list(filter).await
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        (**self).count(filter).await
    }

    async fn unreadable(&self) -> Result<Vec<UnreadableEntry>> {
        (**self).unreadable().await
    }

    async fn delete(&self, key: &SessionKey) -> Result<Option<SessionEntry>> {
        (**self).delete(key).await
    }

    fn as_erase(&self) -> Option<&dyn Erase> {
        (**self).as_erase()
    }
}

/// The revision of an entry as this crate serialises it (compact JSON).
pub(crate) fn entry_revision(entry: &SessionEntry) -> Result<Revision, serde_json::Error> {
    serde_json::to_vec(entry).map(|bytes| Revision::of_bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(Revision::of_bytes(b"").as_u64(), 0xcbf29ce484222325);
        assert_eq!(Revision::of_bytes(b"a").as_u64(), 0xaf63dc4c8601ec8c);
        assert_eq!(Revision::of_bytes(b"foobar").as_u64(), 0x85944171f73967e8);
    }

    #[test]
    fn filter_matches_by_every_condition() {
        let key = SessionKey::parse("agent:support:whatsapp:group:g1").unwrap();
        let mut entry = SessionEntry::new("s", 100);
        entry.channel = Some("WhatsApp".into());
        let yes = [
            ListFilter::new(),
            ListFilter::new().agent(AgentId::new("support").unwrap()),
            ListFilter::new().key_prefix("AGENT:SUPPORT:whatsapp"),
            ListFilter::new().channel("whatsapp"),
            ListFilter::new().chat_type(PeerKind::Group),
            ListFilter::new().updated_before(101).updated_after(99),
        ];
        for filter in yes {
            assert!(filter.matches(&key, &entry), "{filter:?}");
        }
        let no = [
            ListFilter::new().agent(AgentId::main()),
            ListFilter::new().key_prefix("agent:support:slack"),
            ListFilter::new().channel("slack"),
            ListFilter::new().chat_type(PeerKind::Direct),
            ListFilter::new().updated_before(100),
            ListFilter::new().updated_after(100),
        ];
        for filter in no {
            assert!(!filter.matches(&key, &entry), "{filter:?}");
        }
    }
}
