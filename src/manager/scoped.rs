//! Calls on behalf of a caller who may not see everything: [`SessionManager::scoped`].
//!
//! The [`SessionManager`]'s own methods are the trusted host's: they reach every
//! session of the store. A [`ScopedManager`] offers the same calls for one [`Caller`]
//! and runs [`verify_session_access`] before each, so a participant reaches only their
//! own sessions and a channel token only its namespace; everything else is
//! [`Error::AccessDenied`], with no data of the session. Jobs over many sessions
//! (`prune`, `refresh_identity_summary`, subscribing to every transcript) stay with the
//! host.

use serde_json::Value;

use super::sessions::subagent_key;
use super::{
    CompactionEvent, DeleteOptions, LogMessage, OverrideKind, Resolution, SessionManager,
    SessionOverride, Turn, TurnOutcome,
};
use crate::context::chat::ChatMessage;
use crate::context::delivery::DeliveryRoute;
use crate::context::inbound::InboundMessage;
use crate::entry::{DescriptionSource, SessionEntry, SessionSource, SessionStatus};
use crate::error::{AccessDenial, Error, Result};
use crate::identity::access::{denied, verify_namespace, verify_session_access, Caller};
use crate::identity::workspace::Workspace;
use crate::identity::{Identifier, Person};
use crate::key::{AgentId, SessionKey};
use crate::memory::flush::FlushPlan;
use crate::memory::usage::EngineKind;
use crate::store::{ListFilter, StoredSession};
use crate::transcript::{
    CheckpointReason, Offset, SessionEvent, TranscriptEntry, TranscriptFollow, TranscriptRead,
    TranscriptRef, TranscriptSubscription,
};

impl SessionManager {
    /// The person `identifier` on `channel` is, by the configured
    /// [`IdentityResolver`](crate::identity::IdentityResolver)
    /// ([`Error::NotConfigured`] without one).
    pub async fn identify(&self, channel: &str, identifier: &Identifier) -> Result<Person> {
        let resolver = self.seams.identity.as_deref().ok_or(Error::NotConfigured {
            what: "an identity resolver (SessionManagerBuilder::identity_resolver)",
        })?;
        resolver.resolve(channel, identifier).await
    }

    /// The session under `key`, if `caller` may open it.
    /// The owner gets `None` for a missing session; anyone else is denied, so that a
    /// denial does not tell whether the session exists.
    pub(crate) async fn verify_session_access(
        &self,
        caller: &Caller,
        key: &SessionKey,
    ) -> Result<Option<StoredSession>> {
        verify_namespace(caller, key)?;
        let stored = self.seams.store.get(key).await?;
        verify_session_access(caller, key, stored.as_ref().map(|s| &s.entry))?;
        Ok(stored)
    }

    /// This manager's calls on behalf of `caller`, each checked first.
    ///
    /// ```
    /// use agent_sessions::identity::Caller;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::{AccessDenial, Error};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(MemoryStore::new());
    /// let jane = manager.scoped(Caller::person("staff:17"));
    /// let mine = jane.resolve(&InboundMessage::direct("web", "jane", "hi").from_person("staff:17")).await?;
    /// assert!(jane.get(&mine.key).await?.is_some());
    ///
    /// let bob = manager.scoped(Caller::person("staff:18"));
    /// let denied = bob.get(&mine.key).await;
    /// assert!(matches!(denied, Err(Error::AccessDenied { reason: AccessDenial::NotParticipant, .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn scoped(&self, caller: Caller) -> ScopedManager<'_> {
        ScopedManager {
            manager: self,
            caller,
            person: None,
            identity: None,
        }
    }

    /// This manager's calls on behalf of whoever `identifier` on `channel` is
    /// ([`identify`](Self::identify)). The identity is resolved again on every
    /// [`ScopedManager::open`], so role changes and merges take effect.
    pub async fn scoped_as(
        &self,
        channel: &str,
        identifier: Identifier,
    ) -> Result<ScopedManager<'_>> {
        let person = self.identify(channel, &identifier).await?;
        Ok(ScopedManager {
            manager: self,
            caller: Caller::of(&person),
            person: Some(person),
            identity: Some((channel.to_owned(), identifier)),
        })
    }
}

/// A [`SessionManager`] seen by one [`Caller`]: every call checks access first.
///
/// Built by [`SessionManager::scoped`] or [`SessionManager::scoped_as`]; cheap, made
/// per request.
#[derive(Debug)]
pub struct ScopedManager<'a> {
    manager: &'a SessionManager,
    caller: Caller,
    person: Option<Person>,
    identity: Option<(String, Identifier)>,
}

/// A call that takes the session key first and is checked before it runs.
macro_rules! checked {
    ($host:ident; $(
        $(#[$doc:meta])*
        fn $name:ident(&self, $key:ident: &SessionKey $(, $arg:ident: $ty:ty)*) -> $ret:ty;
    )*) => {$(
        $(#[$doc])*
        #[doc = concat!(
            "\n\n[`", stringify!($host), "::", stringify!($name), "`](super::",
            stringify!($host), "::", stringify!($name), "), if the caller may open the session."
        )]
        pub async fn $name(&self, $key: &SessionKey $(, $arg: $ty)*) -> Result<$ret> {
            self.check($key).await?;
            self.target().$name($key $(, $arg)*).await
        }
    )*};
}

impl<'a> ScopedManager<'a> {
    /// Who is calling.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The resolved person, for a manager made by [`SessionManager::scoped_as`].
    pub fn person(&self) -> Option<&Person> {
        self.person.as_ref()
    }

    /// Limits this caller to keys in `prefix`'s namespace (see
    /// [`Caller::within_namespace`]).
    pub fn within_namespace(mut self, prefix: &str) -> Result<Self> {
        self.caller = self.caller.within_namespace(prefix)?;
        Ok(self)
    }

    async fn check(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.manager.verify_session_access(&self.caller, key).await
    }

    /// Where a checked call goes once allowed.
    fn target(&self) -> &SessionManager {
        self.manager
    }

    /// The transcript calls for this caller (see [`ScopedTranscripts`]).
    pub fn transcripts(&self) -> ScopedTranscripts<'_, 'a> {
        ScopedTranscripts { scoped: self }
    }

    /// The memory calls for this caller (see [`ScopedMemory`]).
    pub fn memory(&self) -> ScopedMemory<'_, 'a> {
        ScopedMemory { scoped: self }
    }

    /// Whether the caller may go on with the session under `key` whose entry is
    /// `entry`, where the call may create it: an existing session must be open to the
    /// caller; a missing one only needs the key in the caller's namespace (its creator
    /// becomes its first participant). Asked inside the store update.
    fn may_create(&self, key: &SessionKey, entry: Option<&SessionEntry>) -> Result<()> {
        verify_namespace(&self.caller, key)?;
        match entry {
            Some(entry) => verify_session_access(&self.caller, key, Some(entry)),
            None => Ok(()),
        }
    }

    /// Whether the caller may post `message`: a participant only as themselves (the
    /// message's participant id is theirs).
    fn may_post(&self, message: &InboundMessage) -> Result<()> {
        let key = self.manager.key_for(message)?;
        match self.caller.participant_id() {
            Some(id) if message.participant_id().as_deref() != Some(id) => {
                Err(denied(&key, AccessDenial::NotParticipant))
            }
            _ => Ok(()),
        }
    }

    /// [`SessionManager::record_inbound_meta`] for a message the caller may post, on the
    /// same terms as [`resolve`](Self::resolve).
    pub async fn record_inbound_meta(&self, message: &InboundMessage) -> Result<StoredSession> {
        self.may_post(message)?;
        self.manager
            .record_inbound_meta_admitted(message, &|key, entry| self.may_create(key, entry))
            .await
    }

    /// [`SessionManager::resolve`] for a message the caller may post: a participant
    /// posts only as themselves (the message's [`participant_id`] is theirs) and only
    /// into a session they take part in or a new one; a namespaced caller only into
    /// its namespace.
    ///
    /// [`participant_id`]: InboundMessage::participant_id
    pub async fn resolve(&self, message: &InboundMessage) -> Result<Resolution> {
        self.may_post(message)?;
        self.manager
            .resolve_admitted(message, &|key, entry| self.may_create(key, entry), false)
            .await
    }

    /// [`SessionManager::turn`] for a message the caller may post, on the same terms as
    /// [`resolve`](Self::resolve).
    pub async fn turn(&self, message: &InboundMessage) -> Result<Turn<'a>> {
        self.may_post(message)?;
        self.manager
            .turn_admitted(message, &|key, entry| self.may_create(key, entry))
            .await
    }

    /// [`SessionManager::report_delivery`], if the caller may open the session the
    /// payload's receipt names.
    pub async fn report_delivery(
        &self,
        payload: &crate::context::reply::ReplyPayload,
        delivery: super::Delivery,
    ) -> Result<()> {
        if let Some(receipt) = &payload.receipt {
            self.check(&receipt.key).await?;
        }
        self.manager.report_delivery(payload, delivery).await
    }

    /// [`SessionManager::open`] for the caller: the caller's identity is resolved again
    /// first (so role changes and merges apply); an existing session must already list a
    /// non-owner caller as a participant; a new session records them as its first. The
    /// session records the resolved person's id (if it has none) and current type.
    pub async fn open(
        &mut self,
        source: &SessionSource,
        agent: Option<&AgentId>,
    ) -> Result<Resolution> {
        if let Some((channel, identifier)) = &self.identity {
            let person = self.manager.identify(channel, identifier).await?;
            let namespace = self.caller.namespace().map(str::to_owned);
            self.caller = Caller::of(&person);
            if let Some(prefix) = namespace {
                self.caller = self.caller.clone().within_namespace(&prefix)?;
            }
            self.person = Some(person);
        }
        let participant = self.caller.participant_id();
        let person = self.person.as_ref();
        self.manager
            .open_admitted(
                source,
                agent,
                &|key, entry| self.may_create(key, entry),
                &|entry| stamp_caller(entry, participant, person),
            )
            .await
    }

    /// The session under `key`: [`SessionManager::get`] if the caller may open it
    /// (`None` only for the owner, when there is no session).
    pub async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.check(key).await
    }

    /// The sessions matching `filter` that the caller may open, most recently active
    /// first; the limit counts only those.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let mut unlimited = filter.clone();
        unlimited.limit = None;
        let visible = self
            .manager
            .list(&unlimited)
            .await?
            .into_iter()
            .filter(|s| verify_session_access(&self.caller, &s.key, Some(&s.entry)).is_ok())
            .collect();
        Ok(filter.finish(visible))
    }

    checked! {
        SessionManager;
        /// The conversation as chat messages for the model.
        fn messages(&self, key: &SessionKey) -> Vec<ChatMessage>;
        /// Closes a session.
        fn close(&self, key: &SessionKey) -> StoredSession;
        /// Resets a session.
        fn reset(&self, key: &SessionKey) -> StoredSession;
        /// Sets a session's status.
        fn set_status(&self, key: &SessionKey, status: SessionStatus) -> StoredSession;
        /// Deletes a session.
        fn delete(&self, key: &SessionKey, options: DeleteOptions) -> Option<SessionEntry>;
        /// Sets or clears a session's label.
        fn set_label(&self, key: &SessionKey, label: Option<&str>) -> StoredSession;
        /// Sets or clears what a session is about.
        fn set_description(
            &self,
            key: &SessionKey,
            description: Option<&str>,
            source: DescriptionSource
        ) -> StoredSession;
        /// Sets a per-session override.
        fn set_override(&self, key: &SessionKey, setting: SessionOverride) -> StoredSession;
        /// Clears a per-session override.
        fn clear_override(&self, key: &SessionKey, kind: OverrideKind) -> StoredSession;
        /// Changes where replies go.
        fn update_last_route(&self, key: &SessionKey, route: &DeliveryRoute) -> StoredSession;
        /// Starts a thread session forked from `parent`.
        fn fork_thread(&self, parent: &SessionKey, thread_id: &str) -> StoredSession;
        /// Records a finished turn.
        fn record_turn(&self, key: &SessionKey, outcome: TurnOutcome) -> StoredSession;
        /// The session's workspace.
        fn workspace(&self, key: &SessionKey) -> Workspace;
    }

    /// [`SessionManager::spawn_subagent`], if the caller may open `parent` and the new
    /// session's key is in the caller's namespace. The subagent's participants are the
    /// parent's.
    pub async fn spawn_subagent(
        &self,
        parent: &SessionKey,
        agent: &AgentId,
        label: Option<&str>,
    ) -> Result<StoredSession> {
        self.check(parent).await?;
        let key = subagent_key(parent, agent)?;
        verify_namespace(&self.caller, &key)?;
        self.manager.create_subagent(&key, parent, label).await
    }

    /// [`SessionManager::enqueue_system_event`], if the caller may open the session.
    pub async fn enqueue_system_event(&self, key: &SessionKey, text: &str) -> Result<bool> {
        self.check(key).await?;
        self.manager.enqueue_system_event(key, text).await
    }
}

/// Records an opening caller in the session: as a participant, and as its person (if it
/// has none) with their current type.
fn stamp_caller(entry: &mut SessionEntry, participant: Option<&str>, person: Option<&Person>) {
    if let Some(id) = participant {
        entry.add_participant(id);
    }
    if let Some(person) = person {
        if entry.person_id.is_none() {
            entry.person_id = Some(person.id.clone());
        }
        if entry.person_id.as_deref() == Some(person.id.as_str()) {
            entry.person_type = Some(person.person_type.as_str().to_owned());
        }
    }
}

/// [`SessionTranscripts`](super::SessionTranscripts) for one caller: each call checks
/// that the caller may open the session first. Borrowed from
/// [`ScopedManager::transcripts`].
#[derive(Debug, Clone, Copy)]
pub struct ScopedTranscripts<'s, 'a> {
    scoped: &'s ScopedManager<'a>,
}

impl ScopedTranscripts<'_, '_> {
    async fn check(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.scoped.check(key).await
    }

    fn target(&self) -> super::SessionTranscripts<'_> {
        self.scoped.manager.transcripts()
    }

    checked! {
        SessionTranscripts;
        /// Logs a message.
        fn log_message(&self, key: &SessionKey, message: LogMessage) -> SessionEvent;
        /// Mirrors a delivered reply into the transcript.
        fn mirror_delivery(
            &self,
            key: &SessionKey,
            text: &str,
            media_urls: &[String]
        ) -> Option<SessionEvent>;
        /// Appends transcript lines as they are.
        fn append(&self, key: &SessionKey, lines: Vec<TranscriptEntry>) -> Vec<SessionEvent>;
        /// Appends chat messages (a tool loop's steps).
        fn append_chat(
            &self,
            key: &SessionKey,
            messages: &[crate::context::chat::ChatMessage]
        ) -> Vec<SessionEvent>;
        /// Writes a checkpoint.
        fn checkpoint(&self, key: &SessionKey, reason: CheckpointReason) -> SessionEvent;
        /// Reads the session's transcript from `from`.
        fn replay(&self, key: &SessionKey, from: Offset) -> TranscriptRead;
    }

    /// Live updates of the session's current transcript, if the caller may open it.
    pub async fn subscribe(&self, key: &SessionKey) -> Result<TranscriptSubscription> {
        let stored = self
            .check(key)
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })?;
        let transcript = TranscriptRef::of(
            key,
            &stored.entry,
            &self.scoped.manager.settings.default_agent,
        );
        Ok(self.target().subscribe()?.only(move |update| {
            update.transcript.agent == transcript.agent
                && update.transcript.session_id == transcript.session_id
        }))
    }

    /// Follows the session's current transcript from `from`, if the caller may open it.
    pub async fn follow(&self, key: &SessionKey, from: Offset) -> Result<TranscriptFollow> {
        self.check(key)
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })?;
        self.target().follow(key, from).await
    }
}

/// [`SessionMemory`](super::SessionMemory) for one caller: each call checks that the
/// caller may open the session first. Borrowed from [`ScopedManager::memory`]; jobs
/// over a person's sessions (`refresh_identity_summary`) and the snapshot stay with the
/// host.
#[derive(Debug, Clone, Copy)]
pub struct ScopedMemory<'s, 'a> {
    scoped: &'s ScopedManager<'a>,
}

impl ScopedMemory<'_, '_> {
    async fn check(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.scoped.check(key).await
    }

    fn target(&self) -> super::SessionMemory<'_> {
        self.scoped.manager.memory()
    }

    /// [`SessionMemory::ensure_skills_snapshot`](super::SessionMemory::ensure_skills_snapshot),
    /// if the caller may open the session.
    pub async fn ensure_skills_snapshot<F>(
        &self,
        key: &SessionKey,
        version: u64,
        build: F,
    ) -> Result<bool>
    where
        F: FnOnce() -> Value + Send,
    {
        self.check(key).await?;
        self.target()
            .ensure_skills_snapshot(key, version, build)
            .await
    }

    checked! {
        SessionMemory;
        /// Whether a memory flush should run before compaction.
        fn memory_flush_plan(&self, key: &SessionKey) -> Option<FlushPlan>;
        /// Records that a memory flush ran.
        fn record_memory_flush(&self, key: &SessionKey) -> StoredSession;
        /// Records a compaction.
        fn record_compaction(&self, key: &SessionKey, tokens_after: Option<u64>) -> StoredSession;
        /// Handles an engine's compaction event.
        fn on_compaction_event(
            &self,
            key: &SessionKey,
            event: CompactionEvent
        ) -> Option<StoredSession>;
        /// The engine's own session id.
        fn engine_session(&self, key: &SessionKey, kind: &EngineKind) -> Option<String>;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The manager's sources, as compiled.
    const MANAGER_SOURCES: &[&str] = &[
        include_str!("idle.rs"),
        include_str!("mod.rs"),
        include_str!("model_input.rs"),
        include_str!("outcome.rs"),
        include_str!("scoped.rs"),
        include_str!("session_memory.rs"),
        include_str!("sessions.rs"),
        include_str!("transcripts.rs"),
        include_str!("turn.rs"),
        include_str!("workspace.rs"),
    ];

    /// Public methods of `SessionManager` a caller-scoped manager deliberately does not
    /// offer, each with the reason. Everything else must have a checked counterpart.
    const HOST_ONLY: &[(&str, &str)] = &[
        ("builder", "constructs a manager"),
        ("connect", "constructs a manager"),
        ("new", "constructs a manager"),
        ("scoped", "makes the scoped manager"),
        ("scoped_as", "makes the scoped manager"),
        ("identify", "resolves identities for the host"),
        ("store", "the host's own store handle"),
        ("key_for", "computes a key, reads nothing"),
        ("clock", "configuration"),
        ("list", "lists every session: the host's"),
        ("prune", "a job over many sessions"),
        ("checkpoint_idle_sessions", "a job over many sessions"),
        ("spawn_idle_checkpoints", "a job over many sessions"),
        ("subscribe", "every transcript's updates"),
        (
            "is_expired",
            "reads no session: judges an entry the caller already holds",
        ),
        (
            "follow_session",
            "looks up by id across sessions, closed ones included; a caller follows its keys",
        ),
        ("refresh_identity_summary", "a job over a person's sessions"),
        ("agent_identity_of", "configuration"),
        (
            "find_session",
            "looks up by id across sessions, closed ones too",
        ),
        ("transcripts", "the handle; the scoped manager has its own"),
        ("memory", "the handle; the scoped manager has its own"),
    ];

    /// Names of the `pub fn`s in the `impl <ty>` blocks of the manager's sources (and,
    /// for the scoped types, the calls declared through their `checked!` macro).
    fn methods(ty: &str) -> BTreeSet<String> {
        let scoped = ty.starts_with("Scoped");
        let mut names = BTreeSet::new();
        for source in MANAGER_SOURCES {
            let mut inside = false;
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("impl") {
                    // `impl Type {`, `impl Type<'_> {`, `impl<'a> Type<'a> {`
                    let rest = match rest.strip_prefix('<') {
                        Some(generic) => generic.split_once("> ").map_or("", |(_, r)| r),
                        None => rest.trim_start(),
                    };
                    inside =
                        rest.starts_with(&format!("{ty} ")) || rest.starts_with(&format!("{ty}<"));
                    continue;
                }
                if line == "}" {
                    inside = false;
                }
                let trimmed = line.trim_start();
                let declared = trimmed
                    .strip_prefix("pub async fn ")
                    .or_else(|| trimmed.strip_prefix("pub fn "))
                    .or_else(|| scoped.then(|| trimmed.strip_prefix("fn ")).flatten());
                if let (true, Some(rest)) = (inside, declared) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                }
            }
        }
        names
    }

    #[test]
    fn every_public_manager_call_is_scoped_or_named_host_only() {
        let host_only: BTreeSet<String> = HOST_ONLY.iter().map(|(n, _)| n.to_string()).collect();
        let mut seen = BTreeSet::new();
        for (host, scoped_ty, expected) in [
            ("SessionManager", "ScopedManager", "resolve"),
            ("SessionTranscripts", "ScopedTranscripts", "log_message"),
            ("SessionMemory", "ScopedMemory", "record_compaction"),
        ] {
            let manager = methods(host);
            let scoped = methods(scoped_ty);
            assert!(
                manager.contains(expected) && scoped.contains(expected),
                "{host}"
            );
            let escaping: Vec<&String> = manager
                .iter()
                .filter(|name| !scoped.contains(*name) && !host_only.contains(*name))
                .collect();
            assert!(
                escaping.is_empty(),
                "public {host} calls with no checked {scoped_ty} counterpart: {escaping:?}; \
                 add one, or name it in HOST_ONLY with the reason"
            );
            seen.extend(manager);
        }
        let stale: Vec<&String> = host_only.iter().filter(|n| !seen.contains(*n)).collect();
        assert!(
            stale.is_empty(),
            "HOST_ONLY names calls that no longer exist: {stale:?}"
        );
    }
}
