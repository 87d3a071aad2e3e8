//! Group chatter: what was said in a group since the agent last replied (documented in the parent module).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::identity::key::{normalize_account_id, normalize_channel};
use crate::inbound::pipeline::{CURRENT_MESSAGE_MARKER, HISTORY_CONTEXT_MARKER};

/// Entries kept per group (OpenClaw's `DEFAULT_GROUP_HISTORY_LIMIT`).
pub(crate) const DEFAULT_GROUP_HISTORY_LIMIT: usize = 50;
/// Groups kept (OpenClaw's `MAX_HISTORY_KEYS`).
pub(crate) const MAX_HISTORY_KEYS: usize = 1000;

/// One message of group chatter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatterEntry {
    /// Who said it (a display label).
    pub sender: String,
    /// What they said (already through the inbound pipeline).
    pub body: String,
    /// When, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// The channel's message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Who said it, as an id: the canonical person when known, else the sender's
    /// E.164 number or channel id. What [`SessionManager::forget_person`] finds a
    /// person's chatter by; `None` in entries kept before it was recorded.
    ///
    /// [`SessionManager::forget_person`]: crate::SessionManager::forget_person
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
}

/// What [`ChatterBuffer::edit_entries`] does with one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatterEdit {
    /// Leave it as it is.
    Keep,
    /// Remove it.
    Remove,
    /// Put this entry in its place.
    Replace(ChatterEntry),
}

/// The function [`ChatterBuffer::edit_entries`] applies to every entry, given the
/// entry's group key (`agent:<agentId>:<channel>:<account>:<kind>:<id>`; a very long
/// key may reach it cut short, its beginning kept) and the entry.
pub type EntryEditor<'a> = &'a (dyn Fn(&str, &ChatterEntry) -> ChatterEdit + Send + Sync);

/// A turn's hold on the group chatter it is about to show the model.
///
/// [`SessionManager::turn`](crate::SessionManager::turn) takes a group's chatter in
/// three steps, so that every line reaches exactly one model input whatever fails or
/// crashes: it *claims* the lines ([`ChatterBuffer::claim`]: they stay stored, marked
/// with the claim), logs the inbound message that carries them in the session's
/// transcript, a line whose id is the claim's id, and then *settles* the claim
/// ([`ChatterBuffer::settle`]: the lines leave the buffer). A turn that fails before its
/// line is logged *releases* the claim: the lines are there for the next turn. A claim
/// whose holder died is looked up by the next turn in the transcript it names: if its
/// line is there the claim is settled, else its lines are taken over.
///
/// A buffer stores a claim as it is given and returns it from
/// [`claims`](ChatterBuffer::claims); the fields other than the id mean something only
/// to the manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatterClaim {
    /// The claim's id, unique: the id of the transcript line that carries its entries.
    pub id: String,
    /// Who holds the claim (a process, and where it runs).
    pub holder: String,
    /// Where the line that settles the claim is written (the session's transcript).
    pub witness: String,
    /// When it was made, epoch milliseconds.
    pub at: u64,
}

/// Where group chatter is kept.
///
/// A buffer keeps, per group, the entries not yet shown to the model, oldest first;
/// [`take`](Self::take) is the simple way to show them, and the claim methods
/// ([`claim`](Self::claim), [`settle`](Self::settle), [`release`](Self::release),
/// [`claims`](Self::claims)) are how a turn shows them exactly once (see
/// [`ChatterClaim`]). The claim methods have defaults built on the others, so a host's
/// own buffer needs only `append`, `entries` and `clear` — it then gives up the
/// guarantee across crashes: its claim is a `take`, and a failed turn appends the lines
/// back at the end. The crate's buffers implement them all.
#[async_trait]
pub trait ChatterBuffer: Send + Sync {
    /// Adds `entry` to the group `key`, dropping the oldest unclaimed entries beyond the
    /// buffer's limit. `Ok` means the entry is kept (durably, for a durable buffer).
    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()>;
    /// The group's entries no turn has claimed, oldest first.
    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>>;
    /// Forgets the group's entries, claimed or not. With history off (a limit of 0) the
    /// crate's buffers leave what they hold, as OpenClaw's `clearHistoryEntriesIfEnabled`
    /// does: a group's chatter outlives a spell of history being off.
    async fn clear(&self, key: &str) -> Result<()>;
    /// The group's unclaimed entries, oldest first, forgetting them. An entry appended
    /// meanwhile is either returned or kept, never lost — implementations make this
    /// one atomic step (the default, `entries` then `clear`, is not).
    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let entries = self.entries(key).await?;
        self.clear(key).await?;
        Ok(entries)
    }

    /// Appends `entry` unless the group kept an entry with the same message id within
    /// `window` before it (the entry's timestamp is its time): `Ok(false)` for a
    /// message the channel delivered again. An entry without a message id, or with a
    /// blank one, is always appended. The crate's buffers check and append in one
    /// atomic step, remembering the ids of entries taken or claimed since; the default
    /// looks only at the entries still kept.
    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        let _ = window;
        if let Some(id) = entry_message_id(&entry) {
            let kept = self.entries(key).await?;
            if kept.iter().any(|e| e.message_id.as_deref() == Some(id)) {
                return Ok(false);
            }
        }
        self.append(key, entry).await?;
        Ok(true)
    }

    /// Marks the group's unclaimed entries, and those of the claims whose ids are in
    /// `take_over`, as claimed by `claim`, and returns them oldest first — in one
    /// atomic step: an entry is claimed by one claim at a time. Claimed entries stay
    /// stored until [`settle`](Self::settle) or [`release`](Self::release).
    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        let _ = (claim, take_over);
        self.take(key).await
    }

    /// The claims of the group that are neither settled nor released.
    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        let _ = key;
        Ok(Vec::new())
    }

    /// Forgets the entries of claim `claim_id`: they were shown to the model.
    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        let _ = (key, claim_id);
        Ok(())
    }

    /// Gives the entries of claim `claim_id` back to the group, before its unclaimed
    /// entries: the turn that claimed them did not log them. `entries` are what
    /// [`claim`](Self::claim) returned, for buffers that did not keep them.
    async fn release(&self, key: &str, claim_id: &str, entries: Vec<ChatterEntry>) -> Result<()> {
        let _ = claim_id;
        for entry in entries {
            self.append(key, entry).await?;
        }
        Ok(())
    }

    /// Applies `edit` to every entry of every group, claimed or not, removing or
    /// replacing what it says, one atomic step per group; returns how many entries
    /// were removed or replaced. This is how
    /// [`SessionManager::forget_person`](crate::SessionManager::forget_person) erases a
    /// person's chatter. The crate's buffers implement it; the default is
    /// [`Error::NotConfigured`](crate::Error::NotConfigured), so a buffer that cannot
    /// erase says so instead of keeping the data.
    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        let _ = edit;
        Err(crate::Error::NotConfigured {
            what: "erasing from this group-history buffer (ChatterBuffer::edit_entries)",
        })
    }

    /// Every group the buffer holds, whole, by group key: what a copy of the store
    /// carries ([`migrate`](crate::ops::migrate)). The crate's buffers implement it; the
    /// default is [`Error::NotConfigured`](crate::Error::NotConfigured), so a copy says
    /// what it could not carry instead of leaving it behind unsaid.
    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        Err(crate::Error::NotConfigured {
            what: "copying this group-chatter buffer (ChatterBuffer::export_groups)",
        })
    }

    /// Takes in group `key` as a copy carries it (see
    /// [`export_groups`](Self::export_groups)), when the buffer holds nothing of that
    /// group: `Ok(false)`, nothing written, when it holds an entry, a claim or a message
    /// id of it. The default is [`Error::NotConfigured`](crate::Error::NotConfigured).
    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        let _ = (key, group);
        Err(crate::Error::NotConfigured {
            what: "copying into this group-chatter buffer (ChatterBuffer::import_group)",
        })
    }
}

/// An `Arc` of a history buffer is a history buffer: a host keeps one handle (to change
/// a [`InMemoryChatter`]'s limit at run time) and gives the manager another.
#[async_trait]
impl<T: ChatterBuffer + ?Sized> ChatterBuffer for Arc<T> {
    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        (**self).append(key, entry).await
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        (**self).entries(key).await
    }

    async fn clear(&self, key: &str) -> Result<()> {
        (**self).clear(key).await
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        (**self).take(key).await
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        (**self).append_once(key, entry, window).await
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        (**self).claim(key, claim, take_over).await
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        (**self).claims(key).await
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        (**self).settle(key, claim_id).await
    }

    async fn release(&self, key: &str, claim_id: &str, entries: Vec<ChatterEntry>) -> Result<()> {
        (**self).release(key, claim_id, entries).await
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        (**self).edit_entries(edit).await
    }

    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        (**self).export_groups().await
    }

    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        (**self).import_group(key, group).await
    }
}

/// The in-memory [`ChatterBuffer`]: a FIFO per group, LRU over groups.
///
/// ```
/// use agent_sessions::inbound::{ChatterBuffer, ChatterEntry, InMemoryChatter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let history = InMemoryChatter::new(2, 100);
/// for body in ["one", "two", "three"] {
///     let entry = ChatterEntry { sender: "Alice".into(), body: body.into(), timestamp: None, message_id: None, sender_id: None };
///     history.append("whatsapp:default:group:120363@g.us", entry).await?;
/// }
/// let kept: Vec<String> = history.entries("whatsapp:default:group:120363@g.us").await?
///     .into_iter().map(|e| e.body).collect();
/// assert_eq!(kept, ["two", "three"]);
/// # Ok(())
/// # }
/// ```
///
/// The per-group limit can change while the buffer is in use, as OpenClaw applies a
/// reloaded `historyLimit`: see [`InMemoryChatter::set_limit`].
#[derive(Debug)]
pub struct InMemoryChatter {
    max_keys: usize,
    state: Mutex<ChatterState>,
}

/// The limit and the groups, under one lock: an append never sees a limit that is
/// being changed half-way.
#[derive(Debug)]
struct ChatterState {
    limit: usize,
    groups: IndexMap<String, GroupChatter>,
}

/// One group's chatter, whole: the entries no turn has claimed, oldest first, the
/// claimed ones by claim, and the message ids it remembers. What
/// [`InMemoryChatter`] keeps per group, what a
/// [`JsonFileChatter`](crate::store::JsonFileChatter) file holds, and what a copy of a
/// store carries ([`ChatterBuffer::export_groups`], [`ChatterBuffer::import_group`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GroupChatter {
    /// The unclaimed entries, oldest first.
    pub entries: VecDeque<ChatterEntry>,
    /// The claimed entries, by claim, in claim order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claimed: Vec<ClaimedChatter>,
    /// The message ids of the entries kept within the dedupe window, oldest first: a
    /// message delivered again with one of them is a duplicate.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub seen: VecDeque<SeenMessage>,
}

/// A message id a group kept, and when (epoch milliseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SeenMessage {
    /// The channel's message id.
    pub id: String,
    /// When the entry was kept, epoch milliseconds.
    pub at: u64,
}

impl SeenMessage {
    /// Message `id`, kept at `at` (epoch milliseconds).
    pub fn new(id: impl Into<String>, at: u64) -> Self {
        SeenMessage { id: id.into(), at }
    }
}

/// The most message ids a group remembers for deduplication; the oldest go first.
pub(crate) const MAX_SEEN_PER_GROUP: usize = 500;

/// The message id of `entry`, unless it has none or a blank one.
pub(crate) fn entry_message_id(entry: &ChatterEntry) -> Option<&str> {
    entry
        .message_id
        .as_deref()
        .filter(|id| !id.trim().is_empty())
}

/// The entries of one claim: the claim, and its entries oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClaimedChatter {
    /// The claim.
    pub claim: ChatterClaim,
    /// Its entries, oldest first.
    pub entries: Vec<ChatterEntry>,
}

impl ClaimedChatter {
    /// `entries`, claimed by `claim`.
    pub fn new(claim: ChatterClaim, entries: Vec<ChatterEntry>) -> Self {
        ClaimedChatter { claim, entries }
    }
}

impl GroupChatter {
    /// Every entry it holds: waiting, then claimed by a turn.
    pub(crate) fn all_entries(&self) -> impl Iterator<Item = &ChatterEntry> {
        let claimed = self.claimed.iter().flat_map(|c| c.entries.iter());
        self.entries.iter().chain(claimed)
    }

    /// Appends `entry`, keeping the `limit` newest unclaimed entries.
    pub(crate) fn append(&mut self, entry: ChatterEntry, limit: usize) {
        self.entries.push_back(entry);
        self.trim(limit);
    }

    /// Keeps the `limit` newest unclaimed entries.
    pub(crate) fn trim(&mut self, limit: usize) {
        while self.entries.len() > limit {
            self.entries.pop_front();
        }
    }

    /// [`append`](Self::append), unless the group kept an entry with the same message
    /// id within `window` (see [`ChatterBuffer::append_once`]): whether it appended.
    pub(crate) fn append_once(
        &mut self,
        entry: ChatterEntry,
        limit: usize,
        window: Duration,
    ) -> bool {
        if let Some(id) = entry_message_id(&entry) {
            let now = entry.timestamp.unwrap_or(0);
            let since = now.saturating_sub(window.as_millis() as u64);
            self.seen.retain(|seen| seen.at >= since);
            if self.seen.iter().any(|seen| seen.id == id) {
                return false;
            }
            if self.seen.len() >= MAX_SEEN_PER_GROUP {
                self.seen.pop_front();
            }
            self.seen.push_back(SeenMessage {
                id: id.to_owned(),
                at: now,
            });
        }
        self.append(entry, limit);
        true
    }

    /// Applies `edit` to every entry, claimed or not: how many it removed or replaced.
    pub(crate) fn edit(&mut self, group: &str, edit: EntryEditor<'_>) -> usize {
        let apply = |entries: &mut dyn Iterator<Item = &mut ChatterEntry>,
                     removed: &mut Vec<bool>| {
            let mut changed = 0;
            for entry in entries {
                let remove = match edit(group, entry) {
                    ChatterEdit::Keep => false,
                    ChatterEdit::Remove => true,
                    ChatterEdit::Replace(new) => {
                        *entry = new;
                        changed += 1;
                        false
                    }
                };
                changed += usize::from(remove);
                removed.push(remove);
            }
            changed
        };
        let mut changed = 0;
        let mut removed = Vec::new();
        changed += apply(&mut self.entries.iter_mut(), &mut removed);
        let mut marks = removed.into_iter();
        self.entries.retain(|_| !marks.next().unwrap_or(false));
        for claimed in &mut self.claimed {
            let mut removed = Vec::new();
            changed += apply(&mut claimed.entries.iter_mut(), &mut removed);
            let mut marks = removed.into_iter();
            claimed.entries.retain(|_| !marks.next().unwrap_or(false));
        }
        changed
    }

    /// Whether it holds nothing: no entry, claimed or not, and no message id.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.claimed.is_empty() && self.seen.is_empty()
    }

    /// The unclaimed entries, forgotten.
    pub(crate) fn take(&mut self) -> Vec<ChatterEntry> {
        Vec::from(std::mem::take(&mut self.entries))
    }

    /// Claims the entries of the claims in `take_over`, then the unclaimed ones, for
    /// `claim`; returns them in that order.
    pub(crate) fn claim(
        &mut self,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Vec<ChatterEntry> {
        let mut entries = Vec::new();
        self.claimed.retain_mut(|claimed| {
            let taken = take_over.contains(&claimed.claim.id);
            if taken {
                entries.append(&mut claimed.entries);
            }
            !taken
        });
        entries.extend(self.entries.drain(..));
        if !entries.is_empty() {
            self.claimed.push(ClaimedChatter {
                claim: claim.clone(),
                entries: entries.clone(),
            });
        }
        entries
    }

    /// The outstanding claims.
    pub(crate) fn claims(&self) -> Vec<ChatterClaim> {
        self.claimed.iter().map(|c| c.claim.clone()).collect()
    }

    /// Forgets the entries of `claim_id`; whether there was such a claim.
    pub(crate) fn settle(&mut self, claim_id: &str) -> bool {
        let before = self.claimed.len();
        self.claimed.retain(|c| c.claim.id != claim_id);
        self.claimed.len() != before
    }

    /// Puts the entries of `claim_id` back before the unclaimed ones; whether there was
    /// such a claim.
    pub(crate) fn release(&mut self, claim_id: &str) -> bool {
        let Some(at) = self.claimed.iter().position(|c| c.claim.id == claim_id) else {
            return false;
        };
        let released = self.claimed.remove(at);
        for entry in released.entries.into_iter().rev() {
            self.entries.push_front(entry);
        }
        true
    }
}

impl Default for InMemoryChatter {
    fn default() -> Self {
        InMemoryChatter::new(DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }
}

impl InMemoryChatter {
    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups.
    pub fn new(limit: usize, max_keys: usize) -> Self {
        InMemoryChatter {
            max_keys: max_keys.max(1),
            state: Mutex::new(ChatterState {
                limit,
                groups: IndexMap::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ChatterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many entries a group keeps now.
    pub fn limit(&self) -> usize {
        self.state().limit
    }

    /// Changes how many entries a group keeps, at run time and safely beside appends
    /// from other tasks: `Some(n)` keeps the `n` most recent (`Some(0)` turns group
    /// history off), `None` goes back to `50` — OpenClaw's
    /// behaviour when a reloaded config sets, or no longer sets, `historyLimit`. Groups
    /// holding more than the new limit lose their oldest entries at once; with a limit
    /// of 0 every group is forgotten.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agent_sessions::inbound::{ChatterBuffer, ChatterEntry, InMemoryChatter};
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let history = Arc::new(InMemoryChatter::default());
    /// let manager = SessionManager::builder(InMemoryStore::new()).chatter(Arc::clone(&history)).build()?;
    /// for body in ["a", "b", "c"] {
    ///     let entry = ChatterEntry { sender: "Bob".into(), body: body.into(), timestamp: None, message_id: None, sender_id: None };
    ///     history.append("slack:default:channel:c1", entry).await?;
    /// }
    ///
    /// history.set_limit(Some(1)); // config reloaded with historyLimit: 1
    /// assert_eq!(history.entries("slack:default:channel:c1").await?.len(), 1);
    /// history.set_limit(None); // historyLimit removed again
    /// assert_eq!(history.limit(), 50);
    /// # drop(manager);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_limit(&self, limit: Option<usize>) {
        let mut state = self.state();
        let limit = limit.unwrap_or(DEFAULT_GROUP_HISTORY_LIMIT);
        state.limit = limit;
        if limit == 0 {
            state.groups.clear();
            return;
        }
        for group in state.groups.values_mut() {
            group.trim(limit);
        }
    }

    /// How many groups have history.
    pub fn groups(&self) -> usize {
        self.state().groups.len()
    }

    /// Total entries held, over all groups.
    pub fn total_entries(&self) -> usize {
        self.state()
            .groups
            .values()
            .map(|group| {
                group.entries.len() + group.claimed.iter().map(|c| c.entries.len()).sum::<usize>()
            })
            .sum()
    }
}

#[async_trait]
impl ChatterBuffer for InMemoryChatter {
    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        let state = self.state();
        Ok(state
            .groups
            .iter()
            .filter(|(_, group)| !group.is_empty())
            .map(|(key, group)| (key.clone(), group.clone()))
            .collect())
    }

    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        let mut state = self.state();
        if state.groups.get(key).is_some_and(|held| !held.is_empty()) {
            return Ok(false);
        }
        if !group.is_empty() {
            state.groups.shift_remove(key);
            state.groups.insert(key.to_owned(), group);
            while state.groups.len() > self.max_keys {
                state.groups.shift_remove_index(0);
            }
        }
        Ok(true)
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        let mut state = self.state();
        let mut changed = 0;
        for (key, group) in state.groups.iter_mut() {
            changed += group.edit(key, edit);
        }
        state.groups.retain(|_, group| !group.is_empty());
        Ok(changed)
    }

    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        let mut state = self.state();
        let limit = state.limit;
        if limit == 0 {
            return Ok(());
        }
        // Re-insert at the end: the most recently used group is last.
        let mut group = state.groups.shift_remove(key).unwrap_or_default();
        group.append(entry, limit);
        state.groups.insert(key.to_owned(), group);
        while state.groups.len() > self.max_keys {
            state.groups.shift_remove_index(0);
        }
        Ok(())
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        let mut state = self.state();
        let limit = state.limit;
        if limit == 0 {
            return Ok(true);
        }
        let mut group = state.groups.shift_remove(key).unwrap_or_default();
        let appended = group.append_once(entry, limit, window);
        state.groups.insert(key.to_owned(), group);
        while state.groups.len() > self.max_keys {
            state.groups.shift_remove_index(0);
        }
        Ok(appended)
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        Ok(self
            .state()
            .groups
            .get(key)
            .map(|group| group.entries.iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        Ok(self.with_group(key, GroupChatter::take))
    }

    /// As OpenClaw's `clearHistoryEntries` (`historyMap.set(key, [])`): the group's slot
    /// stays, empty, where it was among the groups kept — it still counts toward the
    /// bound and is dropped in its turn — and a group not kept gets an empty slot.
    async fn clear(&self, key: &str) -> Result<()> {
        let mut state = self.state();
        if state.limit > 0 {
            match state.groups.get_mut(key) {
                Some(group) => *group = GroupChatter::default(),
                None => {
                    state.groups.insert(key.to_owned(), GroupChatter::default());
                }
            }
        }
        Ok(())
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        Ok(self.with_group(key, |group| group.claim(claim, take_over)))
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        Ok(self
            .state()
            .groups
            .get(key)
            .map(GroupChatter::claims)
            .unwrap_or_default())
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        self.with_group(key, |group| group.settle(claim_id));
        Ok(())
    }

    async fn release(&self, key: &str, claim_id: &str, _: Vec<ChatterEntry>) -> Result<()> {
        self.with_group(key, |group| group.release(claim_id));
        Ok(())
    }
}

impl InMemoryChatter {
    /// Runs `f` on group `key` if it has one, dropping the group when it is left empty.
    fn with_group<T: Default>(&self, key: &str, f: impl FnOnce(&mut GroupChatter) -> T) -> T {
        let mut state = self.state();
        let Some(group) = state.groups.get_mut(key) else {
            return T::default();
        };
        let value = f(group);
        if group.is_empty() {
            state.groups.shift_remove(key);
        }
        value
    }
}

/// The history key of a group message said to the agent of session `key`: the agent,
/// then the thread or forum topic when the session is per thread (`/<thread>`, encoded),
/// then the group as OpenClaw's `buildGroupHistoryKey` names it
/// (`<channel>:<accountId>:<group|channel>:<groupId>`). `None` for a message not said
/// in a group.
///
/// Each agent keeps its own history of a group, and each thread its own when the
/// session is per thread: what one agent or topic keeps never reaches another's model.
pub(crate) fn chatter_key(
    key: &crate::identity::key::SessionKey,
    message: &crate::inbound::InboundMessage,
) -> Option<String> {
    let group = message.group_resolution()?;
    let channel = normalize_channel(&group.channel).unwrap_or_else(|| "unknown".into());
    let account = normalize_account_id(message.account_id.as_deref().unwrap_or(""));
    let id = crate::identity::key::normalize_peer_id(&group.id).unwrap_or_else(|| "unknown".into());
    let agent = key
        .agent_id()
        .unwrap_or(crate::identity::key::DEFAULT_AGENT_ID);
    let thread = key
        .thread_id()
        .filter(|thread| !thread.is_empty())
        .map(|thread| {
            format!(
                "/{}",
                crate::store::json::paths::encode_file_component(thread)
            )
        })
        .unwrap_or_default();
    Some(format!(
        "agent:{agent}{thread}:{channel}:{account}:{kind}:{id}",
        kind = group.kind
    ))
}

/// The key the same group's chatter had before history was kept per agent
/// (`<channel>:<accountId>:<group|channel>:<groupId>`), for a buffer that adopts what
/// was kept under it; `None` for a key that is not a [`chatter_key`].
pub(crate) fn legacy_chatter_key(key: &str) -> Option<&str> {
    let (_, legacy) = key.strip_prefix("agent:")?.split_once(':')?;
    Some(legacy)
}

/// How a channel is named in envelopes (`WhatsApp`, `Telegram`, …).
pub(crate) fn channel_display_name(channel: &str) -> String {
    let normalized = normalize_channel(channel).unwrap_or_default();
    let known = match normalized.as_str() {
        "whatsapp" => "WhatsApp",
        "telegram" => "Telegram",
        "discord" => "Discord",
        "slack" => "Slack",
        "signal" => "Signal",
        "imessage" => "iMessage",
        "googlechat" => "Google Chat",
        "webchat" => "WebChat",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    let mut chars = normalized.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// One line of group context: `[<Channel> <group> <time>] <sender>: <body>`, the time as
/// `YYYY-MM-DDTHH:MMZ` (as OpenClaw writes it).
///
/// ```
/// use agent_sessions::inbound::format_envelope;
///
/// let at = "2026-01-13T07:45:31Z".parse().unwrap();
/// assert_eq!(
///     format_envelope("whatsapp", "120363@g.us", Some(at), "Alice", "hello"),
///     "[WhatsApp 120363@g.us 2026-01-13T07:45Z] Alice: hello"
/// );
/// ```
pub fn format_envelope(
    channel: &str,
    group: &str,
    at: Option<DateTime<Utc>>,
    sender: &str,
    body: &str,
) -> String {
    let mut tag = channel_display_name(channel);
    for part in [
        group.trim().to_owned(),
        at.map(|t| t.format("%Y-%m-%dT%H:%MZ").to_string())
            .unwrap_or_default(),
    ] {
        if !part.is_empty() {
            tag.push(' ');
            tag.push_str(&part);
        }
    }
    format!("[{tag}] {sender}: {body}")
}

/// The context block (OpenClaw's `buildHistoryContextFromEntries`): the history lines
/// under `[Chat messages since your last reply - for context]`, a blank line, and `current` under
/// `[Current message - respond to this]`. With `exclude_last`, the last history line is left out
/// (it is the current message). No history: `current` alone.
pub fn build_chatter_context(history: &[String], current: &str, exclude_last: bool) -> String {
    let history = if exclude_last {
        &history[..history.len().saturating_sub(1)]
    } else {
        history
    };
    let text = history.join("\n");
    if text.trim().is_empty() {
        return current.to_owned();
    }
    [
        HISTORY_CONTEXT_MARKER,
        &text,
        "",
        CURRENT_MESSAGE_MARKER,
        current,
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str) -> ChatterEntry {
        ChatterEntry {
            sender: "Alice".into(),
            body: body.into(),
            timestamp: None,
            message_id: None,
            sender_id: None,
        }
    }

    #[tokio::test]
    async fn keys_are_evicted_least_recently_used_first() {
        let history = InMemoryChatter::new(5, 2);
        history.append("a", entry("1")).await.unwrap();
        history.append("b", entry("1")).await.unwrap();
        history.append("a", entry("2")).await.unwrap(); // a is now the most recent
        history.append("c", entry("1")).await.unwrap(); // evicts b
        assert!(history.entries("b").await.unwrap().is_empty());
        assert_eq!(history.entries("a").await.unwrap().len(), 2);
        assert_eq!(history.groups(), 2);
    }

    #[tokio::test]
    async fn limit_zero_keeps_nothing_and_clear_forgets() {
        let history = InMemoryChatter::new(0, 10);
        history.append("a", entry("1")).await.unwrap();
        assert_eq!(history.groups(), 0);
        let history = InMemoryChatter::default();
        history.append("a", entry("1")).await.unwrap();
        history.clear("a").await.unwrap();
        assert!(history.entries("a").await.unwrap().is_empty());
    }

    /// OpenClaw's `clearHistoryEntries` sets the key to `[]`: the slot stays where it
    /// was and still counts toward the 1,000 groups, so the next new groups push it
    /// out first — and with it nothing, while the groups after it keep theirs.
    #[tokio::test]
    async fn clearing_a_group_keeps_its_empty_slot_as_openclaws_map_does() {
        let history = InMemoryChatter::new(5, 2);
        history.append("g1", entry("a")).await.unwrap();
        history.append("g2", entry("b")).await.unwrap();
        history.clear("g2").await.unwrap();
        assert_eq!(history.groups(), 2, "the cleared group keeps its slot");
        history.append("g3", entry("c")).await.unwrap();
        // g1 was the oldest slot: it goes, as in OpenClaw's map.
        assert!(history.entries("g1").await.unwrap().is_empty());
        history.append("g1", entry("d")).await.unwrap();
        // Now g2's empty slot is the oldest, and goes; g3 keeps its entry.
        assert_eq!(history.entries("g3").await.unwrap(), [entry("c")]);
        assert_eq!(history.entries("g1").await.unwrap(), [entry("d")]);
        assert_eq!(history.groups(), 2);
        // Clearing a group not kept gives it an empty slot too.
        history.clear("g9").await.unwrap();
        assert_eq!(history.groups(), 3);
        assert!(
            history.export_groups().await.unwrap().len() == 2,
            "empty slots are not copied"
        );
    }

    /// One step of [`the_limit_changes_at_run_time`].
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Append(&'static str, &'static str),
        SetLimit(Option<usize>),
    }

    #[tokio::test]
    async fn the_limit_changes_at_run_time() {
        use Step::{Append, SetLimit};
        // steps → (limit, entries of group "a", entries of group "b")
        type Case = (
            &'static [Step],
            usize,
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: &[Case] = &[
            (
                &[Append("a", "1"), Append("a", "2"), Append("a", "3")],
                3,
                &["1", "2", "3"],
                &[],
            ),
            // Lowering the limit trims every group at once, oldest first.
            (
                &[
                    Append("a", "1"),
                    Append("a", "2"),
                    Append("a", "3"),
                    Append("b", "x"),
                    SetLimit(Some(2)),
                ],
                2,
                &["2", "3"],
                &["x"],
            ),
            // Raising it keeps what is there and lets groups grow.
            (
                &[
                    SetLimit(Some(1)),
                    Append("a", "1"),
                    Append("a", "2"),
                    SetLimit(Some(5)),
                    Append("a", "3"),
                ],
                5,
                &["2", "3"],
                &[],
            ),
            // 0 turns history off: everything is forgotten, nothing is kept.
            (
                &[
                    Append("a", "1"),
                    Append("b", "x"),
                    SetLimit(Some(0)),
                    Append("a", "2"),
                ],
                0,
                &[],
                &[],
            ),
            // Cleared: back to the default, history on again.
            (
                &[
                    SetLimit(Some(0)),
                    Append("a", "1"),
                    SetLimit(None),
                    Append("a", "2"),
                ],
                DEFAULT_GROUP_HISTORY_LIMIT,
                &["2"],
                &[],
            ),
            (
                &[SetLimit(Some(1)), SetLimit(None)],
                DEFAULT_GROUP_HISTORY_LIMIT,
                &[],
                &[],
            ),
        ];
        for (steps, limit, a, b) in cases {
            let history = InMemoryChatter::new(3, 10);
            for step in *steps {
                match *step {
                    Append(key, body) => history.append(key, entry(body)).await.unwrap(),
                    SetLimit(limit) => history.set_limit(limit),
                }
            }
            let bodies = |entries: Vec<ChatterEntry>| -> Vec<String> {
                entries.into_iter().map(|e| e.body).collect()
            };
            assert_eq!(history.limit(), *limit, "{steps:?}");
            assert_eq!(bodies(history.entries("a").await.unwrap()), *a, "{steps:?}");
            assert_eq!(bodies(history.entries("b").await.unwrap()), *b, "{steps:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limit_changes_are_safe_beside_concurrent_appends() {
        let history = Arc::new(InMemoryChatter::new(50, 100));
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let history = Arc::clone(&history);
                tokio::spawn(async move {
                    for n in 0..500 {
                        let key = format!("g{}", n % 8);
                        history
                            .append(&key, entry(&format!("{writer}-{n}")))
                            .await
                            .unwrap();
                        let held = history.entries(&key).await.unwrap().len();
                        assert!(held <= 50, "never more than the largest limit: {held}");
                    }
                })
            })
            .collect();
        // Only this task changes the limit, so from the moment it is set until the next
        // change no group may hold more, whatever the writers do meanwhile.
        let limits = [Some(5), Some(0), None, Some(1), Some(20)];
        let mut round = 0;
        while round < 200 || !writers.iter().all(|w| w.is_finished()) {
            round += 1;
            let limit = limits[round % limits.len()];
            history.set_limit(limit);
            let limit = limit.unwrap_or(DEFAULT_GROUP_HISTORY_LIMIT);
            for group in 0..8 {
                let held = history.entries(&format!("g{group}")).await.unwrap().len();
                assert!(
                    held <= limit,
                    "round {round}: g{group} holds {held} > {limit}"
                );
            }
            tokio::task::yield_now().await;
        }
        for writer in writers {
            writer.await.unwrap();
        }
        history.set_limit(Some(3));
        for group in 0..8 {
            let held = history.entries(&format!("g{group}")).await.unwrap();
            assert!(held.len() <= 3, "g{group}: {}", held.len());
        }
        assert!(history.total_entries() <= 8 * 3);
    }

    #[test]
    fn context_block_matches_openclaw() {
        let at = |m: u32| format!("2026-01-13T07:{m:02}:00Z").parse().ok();
        let lines = vec![
            format_envelope("whatsapp", "120363@g.us", at(45), "Alice", "hello"),
            format_envelope("whatsapp", "120363@g.us", at(46), "Bob", "hi there"),
        ];
        let current = format!(
            "{}\n[from: Alice (+1234567890)]",
            format_envelope(
                "whatsapp",
                "120363@g.us",
                at(47),
                "Alice",
                "@bot what do you think?"
            )
        );
        assert_eq!(
            build_chatter_context(&lines, &current, false),
            "[Chat messages since your last reply - for context]\n\
             [WhatsApp 120363@g.us 2026-01-13T07:45Z] Alice: hello\n\
             [WhatsApp 120363@g.us 2026-01-13T07:46Z] Bob: hi there\n\
             \n\
             [Current message - respond to this]\n\
             [WhatsApp 120363@g.us 2026-01-13T07:47Z] Alice: @bot what do you think?\n\
             [from: Alice (+1234567890)]"
        );
        assert_eq!(
            build_chatter_context(&lines[..1], "now", true),
            "now",
            "only the current one"
        );
        assert_eq!(build_chatter_context(&[], "now", false), "now");
    }

    #[test]
    fn channel_names() {
        assert_eq!(channel_display_name("imsg"), "iMessage");
        assert_eq!(channel_display_name("matrix"), "Matrix");
        assert_eq!(channel_display_name(""), "");
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn chatter_key() {
        (|| {
            use crate::inbound::chatter::chatter_key;
            use crate::{InboundMessage, SessionKey};

            let message = InboundMessage::group("WhatsApp", "120363@G.US", "+1555", "hi");
            let key = SessionKey::parse("agent:main:whatsapp:group:120363@g.us")?;
            assert_eq!(
                chatter_key(&key, &message).as_deref(),
                Some("agent:main:whatsapp:default:group:120363@g.us")
            );
            let topic = SessionKey::parse("agent:ops:telegram:group:-100:topic:42")?;
            let in_topic =
                InboundMessage::group("telegram", "-100", "7", "hi").with_forum_topic(42);
            assert_eq!(
                chatter_key(&topic, &in_topic).as_deref(),
                Some("agent:ops/42:telegram:default:group:-100")
            );
            Ok::<(), crate::Error>(())
        })()
        .unwrap();
    }
}
