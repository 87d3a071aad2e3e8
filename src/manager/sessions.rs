//! The rest of a session's life: close, delete, labels, descriptions, overrides,
//! routes, turns, threads, subagents and non-channel sources.
//!
//! None of these is a conversation turn, so none of them moves `updatedAt` (and with it
//! the idle and daily resets) — except [`Session::record_turn`](crate::manager::Session::record_turn), which is one.

use super::{Admission, Decision, Reason, Resolution, SessionManager};
use crate::error::{Error, Result};
use crate::freshness::triggers::ModelRef;
use crate::identity::key::{AgentId, SessionKey};
use crate::inbound::record::{canonicalize_person, record_meta, start_session};
use crate::inbound::InboundMessage;
use crate::store::entry::{
    AuthProfileSource, GroupActivation, QueueMode, SendPolicy, SessionEntry, SessionSource,
    SessionStatus,
};
use crate::store::{ListFilter, StatusFilter, StoredSession};

/// How [`Session::delete`](crate::manager::Session::delete) treats shared sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// Delete group and channel sessions too (they are kept as shared history
    /// otherwise). A running session is never deleted.
    pub force: bool,
    /// Erase the session's transcript instead of archiving it as
    /// `<file>.deleted.<timestamp>`.
    pub erase_transcript: bool,
}

/// A per-session setting the manager can set and clear.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionOverride {
    /// The model (and its provider). Clears an auth-profile override, which belongs to
    /// a provider.
    Model(ModelRef),
    /// The auth profile, and who chose it.
    AuthProfile {
        /// The profile.
        profile: String,
        /// Who chose it.
        source: AuthProfileSource,
    },
    /// Thinking display level.
    ThinkingLevel(String),
    /// Verbose output level.
    VerboseLevel(String),
    /// Reasoning display level.
    ReasoningLevel(String),
    /// Whether replies are sent.
    SendPolicy(SendPolicy),
    /// When the agent answers in a group.
    GroupActivation(GroupActivation),
    /// How messages arriving during a run are queued.
    QueueMode(QueueMode),
}

/// Which [`SessionOverride`] to clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OverrideKind {
    /// Model and provider.
    Model,
    /// Auth profile.
    AuthProfile,
    /// Thinking level.
    ThinkingLevel,
    /// Verbose level.
    VerboseLevel,
    /// Reasoning level.
    ReasoningLevel,
    /// Send policy.
    SendPolicy,
    /// Group activation.
    GroupActivation,
    /// Queue mode.
    QueueMode,
}

impl SessionManager {
    /// The session with id `session_id` among the sessions `status` admits:
    /// [`StatusFilter::Current`] for the current session of its key (`inactive` or
    /// not), [`StatusFilter::Any`] for closed sessions too — a session replaced under
    /// its key by a reset, a timeout, topic drift or a message after a close is kept
    /// with status `closed` and found only then.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::{SessionStatus, StatusFilter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let first = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// let found = manager.find_session(first.session_id(), StatusFilter::Current).await?;
    /// assert_eq!(found.unwrap().key, first.key);
    ///
    /// manager.resolve(&InboundMessage::direct("telegram", "42", "/new")).await?;
    /// assert!(manager.find_session(first.session_id(), StatusFilter::Current).await?.is_none());
    /// let closed = manager.find_session(first.session_id(), StatusFilter::Any).await?.unwrap();
    /// assert_eq!(closed.entry.status, Some(SessionStatus::Closed));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn find_session(
        &self,
        session_id: &str,
        status: StatusFilter,
    ) -> Result<Option<StoredSession>> {
        if status != StatusFilter::Any {
            return self.find_one(session_id, status).await;
        }
        // The current session first: one closed in place is current under its key too.
        match self.find_one(session_id, StatusFilter::Current).await? {
            Some(current) => Ok(Some(current)),
            None => {
                let closed = StatusFilter::Only(vec![SessionStatus::Closed]);
                self.find_one(session_id, closed).await
            }
        }
    }

    async fn find_one(
        &self,
        session_id: &str,
        status: StatusFilter,
    ) -> Result<Option<StoredSession>> {
        let mut filter = ListFilter::new().session_id(session_id).limit(1);
        filter.status = status;
        Ok(self.seams.store.list(&filter).await?.into_iter().next())
    }

    /// Sessions matching `filter`, most recently active first.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        self.seams.store.list(filter).await
    }

    /// Gives every session `filter` selects whose person is linked to another id the
    /// canonical id the key builder's links give (see
    /// [`KeyBuilder::canonical_person`](crate::identity::key::KeyBuilder::canonical_person)), the
    /// id it recorded kept in [`SessionEntry::raw_person_ids`]. A session is corrected
    /// on its next message anyway; this corrects the ones that wait, after links were
    /// added. Current sessions only (also inactive and closed ones still under their
    /// key): a closed session replaced under its key keeps what it recorded. Each
    /// session is one store update, skipped if it changed person meanwhile. Returns the
    /// sessions corrected, most recent first.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::identity::{DefaultKeyBuilder, IdentityLinks};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let store = InMemoryStore::new();
    /// let before = SessionManager::new(store.clone());
    /// let sms = InboundMessage::direct("sms", "+15550100", "hi").from_person("+15550100");
    /// before.resolve(&sms).await?;
    ///
    /// // Later the operator links Jane's ids.
    /// let links = IdentityLinks::new().link("jane", ["+15550100"]);
    /// let after = SessionManager::builder(store)
    ///     .key_builder(DefaultKeyBuilder::new().identity_links(links))
    ///     .build()?;
    /// let corrected = after.canonicalize_people(&ListFilter::new()).await?;
    /// assert_eq!(corrected.len(), 1);
    /// assert_eq!(corrected[0].entry.person_id.as_deref(), Some("jane"));
    /// assert_eq!(corrected[0].entry.raw_person_ids, Some(vec!["+15550100".to_owned()]));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn canonicalize_people(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let mut filter = filter.clone();
        if matches!(filter.status, StatusFilter::Listed) {
            filter.status = StatusFilter::Current;
        }
        let people = &*self.seams.keys;
        let mut corrected = Vec::new();
        for session in self.seams.store.list(&filter).await? {
            let Some(person) = session.entry.person_id.clone() else {
                continue;
            };
            if people.canonical_person(&person).is_none() {
                continue;
            }
            let session_id = session.entry.session_id.clone();
            let mut changed = false;
            let stored = self
                .seams
                .store
                .apply(&session.key, &mut |slot, _| {
                    changed = false;
                    if let Some(entry) = slot.as_mut().filter(|entry| {
                        entry.session_id == session_id
                            && entry.person_id.as_deref() == Some(&person)
                    }) {
                        changed = canonicalize_person(entry, people);
                    }
                    Ok(())
                })
                .await?;
            if let (true, Some(stored)) = (changed, stored) {
                corrected.push(stored);
            }
        }
        Ok(corrected)
    }

    /// Records a message the bot does not answer (group chatter): its origin, group
    /// metadata and chat type, as OpenClaw's `recordSessionMetaFromInbound` does —
    /// without counting a message or a turn, without moving `updatedAt` (chatter
    /// neither keeps a session alive nor resets it) and without moving the reply route
    /// (only an answered message or a route update does). A key with no session gets one
    /// (`updatedAt` now), as in OpenClaw.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let chatter = InboundMessage::group("whatsapp", "120363@g.us", "+15550001", "lunch?")
    ///     .with_group_subject("Family");
    /// let stored = manager.record_inbound_meta(&chatter).await?;
    /// assert_eq!(stored.entry.subject.as_deref(), Some("Family"));
    /// assert_eq!(stored.entry.message_count, Some(0));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn record_inbound_meta(&self, message: &InboundMessage) -> Result<StoredSession> {
        self.record_inbound_meta_admitted(message, &|_, _| Ok(()))
            .await
    }

    pub(crate) async fn record_inbound_meta_admitted(
        &self,
        message: &InboundMessage,
        admit: &Admission<'_>,
    ) -> Result<StoredSession> {
        let key = self.key_for(message)?;
        let group = message.group_resolution();
        let now_ms = self.seams.clock.now_millis();
        self.seams
            .store
            .apply(&key, &mut |slot, _| {
                admit(&key, slot.as_ref())?;
                let entry = slot.get_or_insert_with(|| start_session(None, now_ms));
                record_meta(entry, message, group.as_ref(), &key);
                Ok(())
            })
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }

    /// Opens the session of a CLI, web, API or schedule source: creates it (`no_session`),
    /// starts a new one over a closed one (`session_closed`), or reopens it — an inactive
    /// session becomes idle — keeping its original source (`first_message` if it has had no
    /// message yet, else `within_timeout`). The metadata `source` brings is merged into
    /// the original source: its unknown fields (a chat id, a thread) are added, newer
    /// values winning, and a platform or chat type the original lacks is filled in; the
    /// kind, name, trigger and interactivity stay the original's. Opening is not a
    /// message: counts and `updatedAt` move only when one arrives.
    pub async fn open(
        &self,
        source: &SessionSource,
        agent: Option<&AgentId>,
    ) -> Result<Resolution> {
        self.open_admitted(source, agent, &|_, _| Ok(()), &|_| {})
            .await
    }

    /// [`open`](Self::open), when `admit` allows the key and its current entry, with
    /// `stamp` applied to the opened entry — in the one store update.
    pub(crate) async fn open_admitted(
        &self,
        source: &SessionSource,
        agent: Option<&AgentId>,
        admit: &Admission<'_>,
        stamp: &(dyn Fn(&mut SessionEntry) + Sync),
    ) -> Result<Resolution> {
        let agent = agent.unwrap_or(&self.settings.default_agent);
        let key = source.key(agent)?;
        let now_ms = self.seams.clock.now_millis();
        let mut outcome = None;
        let stored = self
            .seams
            .store
            .apply(&key, &mut |slot, _| {
                admit(&key, slot.as_ref())?;
                let current = slot.take();
                let (decision, reason, previous) = match &current {
                    None => (Decision::New, Reason::NoSession, None),
                    Some(e) if e.status.as_ref().is_some_and(SessionStatus::is_closed) => {
                        (Decision::New, Reason::SessionClosed, current.clone())
                    }
                    Some(e) if e.message_count == Some(0) => {
                        (Decision::Continue, Reason::FirstMessage, None)
                    }
                    Some(_) => (Decision::Continue, Reason::WithinTimeout, None),
                };
                let mut entry = match decision {
                    Decision::New => {
                        let mut entry = start_session(current.clone(), now_ms);
                        entry.start_reason = Some(reason.started_by().to_owned());
                        entry
                    }
                    Decision::Continue => current.unwrap_or_default(),
                };
                if entry.status == Some(SessionStatus::Inactive) {
                    entry.status = Some(SessionStatus::Idle);
                }
                match entry.source.as_mut() {
                    Some(original) => merge_source(original, source),
                    None => entry.source = Some(source.clone()),
                }
                stamp(&mut entry);
                *slot = Some(entry);
                outcome = Some((decision, reason, previous));
                Ok(())
            })
            .await?;
        let (Some(session), Some((decision, reason, previous))) = (stored, outcome) else {
            return Err(Error::NotFound { key });
        };
        Ok(Resolution {
            key,
            system_sent: session.entry.system_sent.unwrap_or(false)
                && decision == Decision::Continue,
            aborted_last_run: session.entry.aborted_last_run.unwrap_or(false)
                && decision == Decision::Continue,
            session,
            previous,
            decision,
            reason,
            reset_triggered: false,
            body: String::new(),
            model_override: None,
            expires_at: None,
        })
    }

    /// The session under `key`, which must exist ([`Error::NotFound`] if not).
    pub(crate) async fn existing(&self, key: &SessionKey) -> Result<StoredSession> {
        self.seams
            .store
            .get(key)
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }

    /// Changes an existing session without touching `updatedAt`.
    pub(crate) async fn change<F>(&self, key: &SessionKey, f: F) -> Result<StoredSession>
    where
        F: FnMut(&mut SessionEntry) + Send,
    {
        self.change_of(key, None, f).await
    }

    /// [`change`](Self::change), refused with [`Error::NotFound`] (nothing written)
    /// unless `key`'s current session is `session_id`, when one is given: a session a
    /// reset replaced since the caller looked is not changed in its successor's place.
    pub(crate) async fn change_of<F>(
        &self,
        key: &SessionKey,
        session_id: Option<&str>,
        mut f: F,
    ) -> Result<StoredSession>
    where
        F: FnMut(&mut SessionEntry) + Send,
    {
        self.seams
            .store
            .apply(key, &mut |slot, _| match slot {
                Some(entry) if session_id.is_none_or(|id| entry.session_id == id) => {
                    f(entry);
                    Ok(())
                }
                _ => Err(Error::NotFound { key: key.clone() }),
            })
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }
}

/// The key of a new subagent of `agent` spawned from `parent`.
pub(crate) fn subagent_key(parent: &SessionKey, agent: &AgentId) -> Result<SessionKey> {
    if parent.is_subagent() && parent.agent_id() == Some(agent.as_str()) {
        parent.nested_subagent(&uuid::Uuid::new_v4().to_string())
    } else {
        Ok(SessionKey::new_subagent(agent))
    }
}

/// Merges the metadata of `newer` into the `original` source of a session being
/// reopened: the original's identity (kind, name, trigger, interactivity) stays, fields
/// it lacks are filled in, and metadata keys are added or updated.
fn merge_source(original: &mut SessionSource, newer: &SessionSource) {
    if original.platform.is_none() {
        original.platform = newer.platform.clone();
    }
    if original.chat_type.is_none() {
        original.chat_type = newer.chat_type.clone();
    }
    for (name, value) in &newer.extra {
        original.extra.insert(name.clone(), value.clone());
    }
}

pub(crate) fn is_shared(key: &SessionKey, entry: &SessionEntry) -> bool {
    let kind = entry
        .chat_type
        .as_ref()
        .and_then(|t| t.peer_kind())
        .or_else(|| key.peer_kind());
    kind.is_some_and(|k| k.is_group())
}

pub(crate) fn clear_override(entry: &mut SessionEntry, kind: OverrideKind) {
    match kind {
        OverrideKind::Model => {
            entry.provider_override = None;
            entry.model_override = None;
        }
        OverrideKind::AuthProfile => {
            entry.auth_profile_override = None;
            entry.auth_profile_override_source = None;
            entry.auth_profile_override_compaction_count = None;
        }
        OverrideKind::ThinkingLevel => entry.thinking_level = None,
        OverrideKind::VerboseLevel => entry.verbose_level = None,
        OverrideKind::ReasoningLevel => entry.reasoning_level = None,
        OverrideKind::SendPolicy => entry.send_policy = None,
        OverrideKind::GroupActivation => entry.group_activation = None,
        OverrideKind::QueueMode => entry.queue_mode = None,
    }
}

#[cfg(all(test, feature = "http"))]
mod tests {
    use crate::manager::TurnOutcome;
    use crate::prelude::*;
    use crate::transcript::{InMemoryTranscriptStore, Offset, TranscriptRef, TranscriptStore};
    use crate::{Error, SessionStatus};

    /// A session named by id that a reset replaced since the caller looked is neither
    /// closed nor counted in its successor's place, and no status line goes anywhere.
    #[tokio::test]
    async fn a_change_for_a_replaced_session_id_leaves_its_successor_alone() {
        let transcripts = InMemoryTranscriptStore::new();
        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(transcripts.clone())
            .build()
            .unwrap();
        let message = InboundMessage::direct("sms", "+100", "hello");
        let turn = manager.turn(&message).await.unwrap();
        let key = turn.key().clone();
        turn.complete("Hi.").await.unwrap();
        let first = manager
            .session(&key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry
            .session_id;
        let successor = manager.session(&key).reset().await.unwrap().entry;
        let (turns, lines) = {
            let transcript = TranscriptRef::of(&key, &successor, &AgentId::main());
            let read = transcripts.read(&transcript, Offset::START).await.unwrap();
            (successor.turn_count, read.events.len())
        };

        let closed = manager.session(&key).close_if_current(&first).await;
        assert!(matches!(closed, Err(Error::NotFound { .. })), "{closed:?}");
        let recorded = manager
            .session(&key)
            .record_turn_of(Some(&first), TurnOutcome::completed())
            .await;
        assert!(
            matches!(recorded, Err(Error::NotFound { .. })),
            "{recorded:?}"
        );

        let now = manager.session(&key).get().await.unwrap().unwrap().entry;
        assert_eq!(now.session_id, successor.session_id);
        assert_ne!(now.status, Some(SessionStatus::Closed));
        assert_eq!(now.turn_count, turns);
        let transcript = TranscriptRef::of(&key, &now, &AgentId::main());
        let read = transcripts.read(&transcript, Offset::START).await.unwrap();
        assert_eq!(
            read.events.len(),
            lines,
            "no status line in the successor's log"
        );

        // Named by its own id, the successor closes, its line in its own log.
        let closed = manager
            .session(&key)
            .close_if_current(&successor.session_id)
            .await
            .unwrap();
        assert_eq!(closed.entry.status, Some(SessionStatus::Closed));
        let read = transcripts.read(&transcript, Offset::START).await.unwrap();
        assert_eq!(read.events.len(), lines + 1);
    }
}
