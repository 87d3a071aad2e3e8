//! One session, by key: [`SessionManager::session`] and [`ScopedManager::session`].

use serde_json::Value;

use super::sessions::subagent_key;
use super::{
    CompactionEvent, DeleteOptions, LogMessage, OverrideKind, ScopedManager, SessionManager,
    SessionOverride, TurnOutcome,
};
use crate::entry::DeliveryContext;
use crate::entry::{DescriptionSource, SessionEntry, SessionStatus};
use crate::error::{Error, Result};
use crate::follow::{Follow, Position, Scope};
use crate::identity::access::{verify_namespace, verify_session_access, Caller};
use crate::identity::workspace::Workspace;
use crate::inbound::chat::ChatMessage;
use crate::inbound::InboundMessage;
use crate::key::{AgentId, SessionKey};
use crate::memory::flush::FlushPlan;
use crate::memory::usage::EngineKind;
use crate::store::StoredSession;
use crate::transcript::{CheckpointReason, Offset, SessionEvent, TranscriptEntry, TranscriptRead};

/// One session of a [`SessionManager`], by key: every call about a single session.
///
/// [`SessionManager::session`] gives the host's handle, which reaches any session;
/// [`ScopedManager::session`] gives the same handle for one [`Caller`], and each call
/// first checks that the caller may open the session ([`Error::AccessDenied`]
/// otherwise, with no data of the session). The handle is cheap: make one per request.
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::transcript::InMemoryTranscriptStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .transcripts(InMemoryTranscriptStore::new())
///     .build()?;
/// let key = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?.key;
/// let session = manager.session(&key);
/// session.set_label(Some("Support")).await?;
/// assert_eq!(session.get().await?.unwrap().entry.label.as_deref(), Some("Support"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Session<'m> {
    manager: &'m SessionManager,
    key: SessionKey,
    caller: Option<Caller>,
}

impl SessionManager {
    /// The session under `key`, for the host: its calls reach it whoever it belongs to.
    /// For a caller who may not see everything, use [`ScopedManager::session`].
    pub fn session(&self, key: &SessionKey) -> Session<'_> {
        Session {
            manager: self,
            key: key.clone(),
            caller: None,
        }
    }
}

impl<'a> ScopedManager<'a> {
    /// The session under `key`, for this caller: each call first checks that the caller
    /// may open it.
    pub fn session(&self, key: &SessionKey) -> Session<'a> {
        Session {
            manager: self.manager,
            key: key.clone(),
            caller: Some(self.caller.clone()),
        }
    }
}

impl Session<'_> {
    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// Whether the caller may open the session (always, for the host's handle).
    async fn check(&self) -> Result<()> {
        if let Some(caller) = &self.caller {
            self.manager
                .verify_session_access(caller, &self.key)
                .await?;
        }
        Ok(())
    }

    /// The stored session that the caller may open, or [`Error::NotFound`].
    async fn existing(&self) -> Result<StoredSession> {
        self.get().await?.ok_or_else(|| Error::NotFound {
            key: self.key.clone(),
        })
    }

    /// The session, if there is one.
    ///
    /// For a scoped caller, the owner gets `None` when there is no session; anyone else
    /// is denied, so that a denial does not tell whether the session exists.
    pub async fn get(&self) -> Result<Option<StoredSession>> {
        match &self.caller {
            Some(caller) => self.manager.verify_session_access(caller, &self.key).await,
            None => self.manager.get(&self.key).await,
        }
    }

    /// The conversation of the current session as chat messages for the model, within
    /// the session's token budget (see [`Turn::messages`](super::Turn::messages)); it
    /// ends with the session's last logged message. Needs a transcript store
    /// ([`Error::NotConfigured`] otherwise): the conversation is read back from it.
    pub async fn messages(&self) -> Result<Vec<ChatMessage>> {
        self.check().await?;
        self.manager.messages(&self.key).await
    }

    /// Closes a session: its next message starts a new one (`session_closed`).
    pub async fn close(&self) -> Result<StoredSession> {
        self.check().await?;
        self.manager.close(&self.key).await
    }

    /// Sets a session's status (a host marks turns `Running`, approvals
    /// `AwaitingApproval`, hidden sessions `Inactive`). With a transcript store, the
    /// change is also an event in the session's log.
    pub async fn set_status(&self, status: SessionStatus) -> Result<StoredSession> {
        self.check().await?;
        self.manager.set_status(&self.key, status).await
    }

    /// Resets a session as an authorised `/new` would, without a message: the key gets
    /// a new session (new id, per-session settings and counters cleared; label,
    /// participants and identity kept) whose first message continues it, and the old
    /// transcript is archived (`<file>.reset.<timestamp>`). Returns the new session;
    /// [`Error::NotFound`] if there is none to reset.
    pub async fn reset(&self) -> Result<StoredSession> {
        self.check().await?;
        self.manager.reset(&self.key).await
    }

    /// Deletes a session: never while a turn runs ([`DeleteRefusal::Running`](crate::DeleteRefusal::Running)); group and
    /// channel sessions only with `force` ([`DeleteRefusal::SharedHistory`](crate::DeleteRefusal::SharedHistory)). Returns the
    /// deleted entry, `None` if there was none.
    pub async fn delete(&self, options: DeleteOptions) -> Result<Option<SessionEntry>> {
        self.check().await?;
        self.manager.delete(&self.key, options).await
    }

    /// Sets (or with `None` clears) a session's label: trimmed, 1–64 characters, else
    /// [`Error::InvalidLabel`].
    pub async fn set_label(&self, label: Option<&str>) -> Result<StoredSession> {
        self.check().await?;
        self.manager.set_label(&self.key, label).await
    }

    /// Sets (or with `None` clears) what a session is about, and who said so.
    pub async fn set_description(
        &self,
        description: Option<&str>,
        source: DescriptionSource,
    ) -> Result<StoredSession> {
        self.check().await?;
        self.manager
            .set_description(&self.key, description, source)
            .await
    }

    /// Sets a per-session override.
    pub async fn set_override(&self, setting: SessionOverride) -> Result<StoredSession> {
        self.check().await?;
        self.manager.set_override(&self.key, setting).await
    }

    /// Clears a per-session override.
    pub async fn clear_override(&self, kind: OverrideKind) -> Result<StoredSession> {
        self.check().await?;
        self.manager.clear_override(&self.key, kind).await
    }

    /// Changes where replies go, without touching `updatedAt` of an existing session
    /// (OpenClaw 3.x, #49515: a route update is not activity, or idle resets would never
    /// fire). A key with no session gets one, as OpenClaw's `updateLastRoute` creates
    /// it: a new session id, `updatedAt` now, and the route.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::DeliveryContext;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let key = SessionKey::parse("agent:main:telegram:dm:42")?;
    /// let stored = manager.session(&key).update_last_route(&DeliveryContext::to("Telegram", "42")).await?;
    /// assert_eq!(stored.entry.last_channel.as_deref(), Some("telegram"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_last_route(&self, route: &DeliveryContext) -> Result<StoredSession> {
        self.check().await?;
        self.manager.update_last_route(&self.key, route, None).await
    }

    /// [`update_last_route`](Self::update_last_route) that also records `message`'s
    /// metadata (origin, group fields, chat type) as
    /// [`SessionManager::record_inbound_meta`] does — in one store write, so no reader
    /// sees the route without the metadata (OpenClaw's `updateLastRoute` with `ctx`).
    /// `updatedAt` is not touched; the session is the one this handle names, whatever
    /// key `message` would resolve to.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::DeliveryContext;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::new(InMemoryStore::new());
    /// let message = InboundMessage::group("whatsapp", "120363@g.us", "+15550001", "lunch?")
    ///     .with_group_subject("Family");
    /// let key = manager.key_for(&message)?;
    /// let route = DeliveryContext::to("whatsapp", "120363@g.us");
    /// let stored = manager.session(&key).update_last_route_from(&route, &message).await?;
    /// assert_eq!(stored.entry.last_to.as_deref(), Some("120363@g.us"));
    /// assert_eq!(stored.entry.subject.as_deref(), Some("Family"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_last_route_from(
        &self,
        route: &DeliveryContext,
        message: &InboundMessage,
    ) -> Result<StoredSession> {
        self.check().await?;
        self.manager
            .update_last_route(&self.key, route, Some(message))
            .await
    }

    /// Starts a thread session `<parent>:thread:<threadId>` forked from `parent`: it
    /// records its parent ([`SessionEntry::forked_from`]) and takes the parent's reply
    /// route and group metadata; its first message continues it (`first_message`).
    /// An existing thread session is returned unchanged. A blank `thread_id` names no
    /// thread (OpenClaw's `resolveThreadSessionKeys`): the parent itself is returned,
    /// unchanged.
    ///
    /// A scoped caller gets an existing thread only if they may open it too.
    pub async fn fork_thread(&self, thread_id: &str) -> Result<StoredSession> {
        self.check().await?;
        let thread = self.manager.fork_thread(&self.key, thread_id).await?;
        if let Some(caller) = &self.caller {
            // A new thread takes the parent's participants; an existing one is returned
            // as it is, and may not be the caller's.
            verify_namespace(caller, &thread.key)?;
            verify_session_access(caller, &thread.key, Some(&thread.entry))?;
        }
        Ok(thread)
    }

    /// Spawns a subagent session under `agent`, `agent:<agent>:subagent:<uuid>` (nested
    /// under `parent` when `parent` is itself a subagent of `agent`), recording
    /// `spawnedBy`. The subagent's participants are its parent's.
    pub async fn spawn_subagent(
        &self,
        agent: &AgentId,
        label: Option<&str>,
    ) -> Result<StoredSession> {
        self.check().await?;
        let key = subagent_key(&self.key, agent)?;
        if let Some(caller) = &self.caller {
            verify_namespace(caller, &key)?;
        }
        self.manager.create_subagent(&key, &self.key, label).await
    }

    /// Records a turn — one call after each turn: the turn count, that the system
    /// prompt was sent, whether the run was aborted, the status back to idle, the usage
    /// (OpenClaw's rules: `totalTokens` is the prompt size), the engine session to
    /// resume, and — with an exchange — the context summary (the summarizer runs before
    /// the store update, outside its lock; a failing summarizer is logged and the
    /// summary left as it was). A turn is real activity: `updatedAt` moves.
    ///
    /// With `checkpoint_every_turns` configured and an introspector, every Nth turn
    /// takes a `turn_limit` checkpoint.
    pub async fn record_turn(&self, outcome: TurnOutcome) -> Result<StoredSession> {
        self.check().await?;
        self.manager.record_turn(&self.key, outcome).await
    }

    /// The workspace of the session, created on first use
    /// ([`Error::NotConfigured`] without [`workspaces`](super::SessionManagerBuilder::workspaces)).
    ///
    /// Its UUID is recorded in the entry ([`SessionEntry::workspace_id`]) and kept
    /// across resets. A session's first workspace takes, with
    /// [`WorkspaceSharing::PerIdentity`](crate::identity::WorkspaceSharing::PerIdentity), the workspace of a sibling (same person, same
    /// agent identity) if one has one; otherwise the session's own id.
    pub async fn workspace(&self) -> Result<Workspace> {
        self.check().await?;
        self.manager.workspace(&self.key).await
    }

    /// Queues a system event (model switched, reminder fired) for the next message of
    /// the session, in the manager's [`SystemEvents`] (shared by every worker on a
    /// database or JSON backend opened with [`SessionManager::connect`]). Returns
    /// `false` for a blank text or a repeat of the last one; an error when the shared
    /// queue cannot be written.
    ///
    /// [`SystemEvents`]: crate::inbound::events::SystemEvents
    pub async fn enqueue_system_event(&self, text: &str) -> Result<bool> {
        self.check().await?;
        self.manager.enqueue_system_event(&self.key, text).await
    }

    /// Logs one inbound or outbound message in the session: the one call every channel
    /// makes. The message becomes a transcript line — a user message in, an assistant
    /// message out — carrying the message-log fields, so it is in the session's event log
    /// and in [`query_log`](crate::transcript::TranscriptStore::query_log).
    pub async fn log_message(&self, message: LogMessage) -> Result<SessionEvent> {
        self.check().await?;
        self.manager
            .transcripts()
            .log_message(&self.key, message)
            .await
    }

    /// Mirrors a message delivered outside the model (a reminder, a broadcast) into the
    /// session's transcript, as OpenClaw does. `None` when there is nothing to mirror.
    pub async fn mirror_delivery(
        &self,
        text: &str,
        media_urls: &[String],
    ) -> Result<Option<SessionEvent>> {
        self.check().await?;
        self.manager
            .transcripts()
            .mirror_delivery(&self.key, text, media_urls)
            .await
    }

    /// Appends `lines` to the current session transcript (created on first use), as
    /// they are: for what the message log does not write, such as an assistant message
    /// that calls tools and the tools' results, which [`Session::messages`](Self::messages) reads
    /// back as tool calls and tool messages. Returns their events, in order.
    pub async fn append(&self, lines: Vec<TranscriptEntry>) -> Result<Vec<SessionEvent>> {
        self.check().await?;
        self.manager.transcripts().append(&self.key, lines).await
    }

    /// Appends chat messages to the current session transcript: the steps of a tool
    /// loop — the assistant's message that calls tools, the tools' results — from the
    /// [`ChatMessage`](crate::inbound::chat::ChatMessage)s a host already has
    /// (converted to transcript lines), so
    /// that the next turn's [`messages`](crate::manager::Turn::messages) carry the calls
    /// and their results. System messages are skipped. The turn's own input and reply
    /// are logged by the turn: append only what happened between them.
    ///
    /// ```
    /// use agent_sessions::inbound::ToolCall;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "When is my shift?")).await?;
    /// // The model called a tool; the host ran it.
    /// let mut asked = ChatMessage::assistant("");
    /// asked.tool_calls.push(ToolCall {
    ///     id: "call_1".into(),
    ///     name: "shifts".into(),
    ///     arguments: serde_json::json!({"day": "thu"}),
    /// });
    /// let result = ChatMessage::tool("call_1", "Thursday 9-17");
    /// manager.session(turn.key()).append_chat(&[asked, result]).await?;
    /// turn.complete("Thursday, 9 to 5.").await?;
    ///
    /// let next = manager.turn(&InboundMessage::direct("telegram", "42", "Thanks")).await?;
    /// let roles: Vec<ChatRole> = next.messages().await?.iter().map(|m| m.role).collect();
    /// assert_eq!(
    ///     roles,
    ///     [ChatRole::User, ChatRole::Assistant, ChatRole::Tool, ChatRole::Assistant, ChatRole::User]
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub async fn append_chat(&self, messages: &[ChatMessage]) -> Result<Vec<SessionEvent>> {
        self.check().await?;
        self.manager
            .transcripts()
            .append_chat(&self.key, messages)
            .await
    }

    /// Takes a checkpoint (`manual`, `new_session`, `turn_limit`, `idle`): with an
    /// [`Introspector`](crate::memory::checkpoint::Introspector), it looks over the session's
    /// events since the last checkpoint and its working memory and description are updated
    /// from what it returns; a checkpoint event is recorded either way.
    pub async fn checkpoint(&self, reason: CheckpointReason) -> Result<SessionEvent> {
        self.check().await?;
        self.manager
            .transcripts()
            .checkpoint(&self.key, reason)
            .await
    }

    /// The events of the current session from `from` on: a client that reconnects
    /// passes the `next` offset of its last read and gets only what it missed.
    pub async fn replay(&self, from: Offset) -> Result<TranscriptRead> {
        self.check().await?;
        self.manager.transcripts().replay(&self.key, from).await
    }

    /// Follows this key across its sessions from `from` — the key's session, then the
    /// one that replaces it after a reset, a close or an expiry, from any process (see
    /// [`Scope::Key`](crate::follow::Scope::Key)): [`Position::Start`] for the start of
    /// the key's current session, or the [`position`](crate::follow::Follow::position)
    /// a follower reached, to resume.
    ///
    /// [`Error::NotFound`] when there is no session. For a scoped caller, access is
    /// checked when the follower is made, and it lasts until it is dropped: a host that
    /// removes a caller from a session drops the caller's followers too.
    ///
    /// ```
    /// use agent_sessions::follow::{Position, Update};
    /// use agent_sessions::manager::LogMessage;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let key = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?.key;
    /// let mut follow = manager.session(&key).follow(Position::Start).await?;
    /// let Update::Session { .. } = follow.next().await? else { unreachable!() };
    /// manager.session(&key).log_message(LogMessage::inbound("hi")).await?;
    /// let Update::Events { events, .. } = follow.next().await? else { unreachable!() };
    /// assert_eq!(events.last().unwrap().entry.message.as_ref().unwrap().text(), "hi");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn follow(&self, from: Position) -> Result<Follow> {
        self.existing().await?;
        self.manager
            .follow(Scope::Key(self.key.clone()), from)
            .await
    }

    /// The memory flush to run before this session's next turn, if one is due (see
    /// [`MemoryFlushGuard`](crate::memory::flush::MemoryFlushGuard)).
    pub async fn memory_flush_plan(&self) -> Result<Option<FlushPlan>> {
        self.check().await?;
        self.manager.memory().memory_flush_plan(&self.key).await
    }

    /// Records that the memory flush ran: `memoryFlushAt` and the compaction cycle it
    /// belongs to, so it does not run again until the next compaction.
    pub async fn record_memory_flush(&self) -> Result<StoredSession> {
        self.check().await?;
        self.manager.memory().record_memory_flush(&self.key).await
    }

    /// Records a completed compaction in one atomic update (OpenClaw's
    /// `incrementCompactionCount`): the count goes up; with `tokens_after`, the prompt
    /// size becomes it and the input/output breakdown is cleared.
    pub async fn record_compaction(&self, tokens_after: Option<u64>) -> Result<StoredSession> {
        self.check().await?;
        self.manager
            .memory()
            .record_compaction(&self.key, tokens_after)
            .await
    }

    /// Handles an engine's compaction event: only the end of a compaction that will not
    /// be retried counts (a retried compaction counts once). Returns the session when a
    /// compaction was recorded.
    pub async fn on_compaction_event(
        &self,
        event: CompactionEvent,
    ) -> Result<Option<StoredSession>> {
        self.check().await?;
        self.manager
            .memory()
            .on_compaction_event(&self.key, event)
            .await
    }

    /// The engine session to resume, if one was recorded.
    pub async fn engine_session(&self, kind: &EngineKind) -> Result<Option<String>> {
        self.check().await?;
        self.manager.memory().engine_session(&self.key, kind).await
    }

    /// Makes sure the session holds a current skills snapshot (OpenClaw's
    /// `ensureSkillSnapshot`): rebuilt with `build` when there is none, when `version`
    /// is newer than the stored one, or on the first turn of a session the stored one
    /// was not built for (a snapshot survives a reset, so a new session rebuilds it
    /// once). The snapshot records its `version` and `sessionId`. Returns whether it was
    /// rebuilt.
    pub async fn ensure_skills_snapshot<F>(&self, version: u64, build: F) -> Result<bool>
    where
        F: FnOnce() -> Value + Send,
    {
        self.check().await?;
        self.manager
            .memory()
            .ensure_skills_snapshot(&self.key, version, build)
            .await
    }
}
