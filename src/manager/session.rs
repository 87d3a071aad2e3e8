//! One session, by key: [`SessionManager::session`] and [`ScopedManager::session`].

use serde_json::Value;
use std::time::Duration;

use uuid::Uuid;

use super::sessions::{clear_override, is_shared, subagent_key};
use super::transcripts::record_location;
use super::Reason;
use super::{
    DeleteOptions, LogMessage, OverrideKind, ScopedManager, SessionManager, SessionOverride,
    TurnOutcome,
};
use crate::error::{DeleteRefusal, Error, Result};
use crate::identity::access::{verify_namespace, verify_session_access, Caller};
use crate::identity::key::{AgentId, SessionKey};
use crate::identity::workspace::parse_workspace_id;
use crate::identity::workspace::Workspace;
use crate::identity::workspace::WorkspaceSharing;
use crate::inbound::chat::ChatMessage;
use crate::inbound::record::{record_meta, start_session};
use crate::inbound::InboundMessage;
use crate::memory::checkpoint::snapshot_needs_refresh;
use crate::memory::flush::FlushPlan;
use crate::memory::jobs::clip_summary;
use crate::memory::summary::{SummaryInput, SummaryTurn};
use crate::memory::usage::EngineKind;
use crate::memory::CompactionEvent;
use crate::reply::delivery::apply_route;
use crate::store::entry::DeliveryContext;
use crate::store::entry::{parse_session_label, ForkOrigin, SessionSource};
use crate::store::entry::{DescriptionSource, SessionEntry, SessionStatus};
use crate::store::fs::blocking;
use crate::store::StoredSession;
use crate::store::{ListFilter, SessionStoreExt};
use crate::transcript::follow::{Follow, Position, Scope};
use crate::transcript::{ArchiveReason, TranscriptRef};
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
            None => self.manager.seams.store.get(&self.key).await,
        }
    }

    /// The conversation of the current session as chat messages for the model, within
    /// the session's token budget (see [`Turn::messages`](super::Turn::messages)); it
    /// ends with the session's last logged message. Needs a transcript store
    /// ([`Error::NotConfigured`] otherwise): the conversation is read back from it.
    pub async fn messages(&self) -> Result<Vec<ChatMessage>> {
        self.check().await?;
        let key = &self.key;
        // With the summary of a cut this process is writing for it.
        self.manager.cuts.settled(key).await;
        let entry = self.manager.existing(key).await?.entry;
        let (mut history, compacted) = self.manager.history_messages(key, &entry, None).await?;
        let Some(last) = history.pop() else {
            return Ok(Vec::new());
        };
        let current = (last.message, last.id.as_deref());
        let (messages, _, _) =
            self.manager
                .fit_messages(&entry, Vec::new(), (history, compacted), current)?;
        Ok(messages)
    }

    /// Takes the session's last turn back from what the model sees: the last message
    /// of the person's the model still sees, and everything after it (the reply, tool
    /// calls and results). The transcript keeps those lines, named by an undo mark, so
    /// nothing is lost and operators see what happened. Returns the messages taken
    /// back, oldest first (none: nothing to undo). [`SessionManager::regenerate`] undoes
    /// the last turn and answers its message again.
    ///
    /// While a turn runs in the session it is refused ([`Error::TurnRunning`],
    /// transient: try again once the turn has ended), so no reply lands after the mark
    /// without its question. Undoing is not erasing: to remove what a person said from
    /// the store, see [`SessionManager::forget_person`].
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
    /// let say = |text: &str| InboundMessage::direct("telegram", "42", text);
    /// manager.turn(&say("Book the 9:00 slot")).await?.complete("Booked.").await?;
    ///
    /// // The person taps "undo".
    /// let key = manager.key_for(&say(""))?;
    /// let undone = manager.session(&key).undo_last_turn().await?;
    /// assert_eq!(undone.len(), 2);
    ///
    /// let next = manager.turn(&say("Hello")).await?;
    /// let seen: Vec<String> = next.messages().await?.into_iter().map(|m| m.content).collect();
    /// assert_eq!(seen, ["Hello"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn undo_last_turn(&self) -> Result<Vec<ChatMessage>> {
        self.check().await?;
        crate::inbound::edits::undo_last_turn(self.manager, &self.key).await
    }

    /// Closes a session: its next message starts a new one (`session_closed`).
    pub async fn close(&self) -> Result<StoredSession> {
        self.check().await?;
        self.change_status(SessionStatus::Closed, None).await
    }

    /// Sets a session's status (a host marks turns `Running`, approvals
    /// `AwaitingApproval`, hidden sessions `Inactive`). With a transcript store, the
    /// change is also an event in the session's log.
    pub async fn set_status(&self, status: SessionStatus) -> Result<StoredSession> {
        self.check().await?;
        self.change_status(status, None).await
    }

    /// Resets a session as an authorised `/new` would, without a message: the key gets
    /// a new session (new id, per-session settings and counters cleared; label,
    /// participants and identity kept) whose first message continues it, and the old
    /// transcript is archived (`<file>.reset.<timestamp>`). Returns the new session;
    /// [`Error::NotFound`] if there is none to reset.
    pub async fn reset(&self) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        let now_ms = self.manager.seams.clock.now_millis();
        let mut previous = None;
        let stored = self
            .manager
            .seams
            .store
            .apply(key, &mut |slot, _| {
                let Some(current) = slot.take() else {
                    return Err(Error::NotFound { key: key.clone() });
                };
                previous = Some(current.clone());
                let mut entry = start_session(Some(current), now_ms);
                entry.start_reason = Some(Reason::ExplicitReset.started_by().to_owned());
                *slot = Some(entry);
                Ok(())
            })
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })?;
        if let Some(old) = &previous {
            if let Some(updated) = self
                .manager
                .after_new_session(key, &stored.entry, Some(old), Reason::ExplicitReset)
                .await?
            {
                return Ok(updated);
            }
        }
        Ok(stored)
    }

    /// Deletes a session: never while a turn runs ([`DeleteRefusal::Running`](crate::DeleteRefusal::Running));
    /// a turn whose process was killed, or whose [`Turn`](crate::manager::Turn) was
    /// dropped, runs no longer. Group and channel sessions only with `force`
    /// ([`DeleteRefusal::SharedHistory`](crate::DeleteRefusal::SharedHistory)). Returns
    /// the deleted entry, `None` if there was none.
    pub async fn delete(&self, options: DeleteOptions) -> Result<Option<SessionEntry>> {
        self.check().await?;
        let key = &self.key;
        let mut removed = None;
        let now_ms = self.manager.seams.clock.now_millis();
        self.manager
            .seams
            .store
            .apply(key, &mut |slot, _| {
                let Some(entry) = slot.as_ref() else {
                    return Ok(());
                };
                let refusal = if crate::exactly_once::holders::runs(entry, now_ms) {
                    Some(DeleteRefusal::Running)
                } else if !options.force && is_shared(key, entry) {
                    Some(DeleteRefusal::SharedHistory)
                } else {
                    None
                };
                if let Some(reason) = refusal {
                    return Err(Error::DeleteRefused {
                        key: key.clone(),
                        reason,
                    });
                }
                removed = slot.take();
                Ok(())
            })
            .await?;
        if let Some(entry) = &removed {
            self.manager
                .retire_transcript(key, entry, ArchiveReason::Deleted, options.erase_transcript)
                .await;
        }
        Ok(removed)
    }

    /// Sets (or with `None` clears) a session's label: trimmed, 1–64 characters, else
    /// [`Error::InvalidLabel`].
    pub async fn set_label(&self, label: Option<&str>) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        let label = label.map(parse_session_label).transpose()?;
        self.manager
            .change(key, |entry| entry.label = label.clone())
            .await
    }

    /// Sets (or with `None` clears) what a session is about, and who said so.
    pub async fn set_description(
        &self,
        description: Option<&str>,
        source: DescriptionSource,
    ) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        let description = description.map(str::trim).filter(|d| !d.is_empty());
        self.manager
            .change(key, |entry| {
                entry.description = description.map(str::to_owned);
                entry.description_source = description.map(|_| source.clone());
            })
            .await
    }

    /// Sets a per-session override.
    pub async fn set_override(&self, setting: SessionOverride) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        self.manager
            .change(key, |entry| match &setting {
                SessionOverride::Model(model) => {
                    entry.provider_override = Some(model.provider.clone());
                    entry.model_override = Some(model.model.clone());
                    clear_override(entry, OverrideKind::AuthProfile);
                }
                SessionOverride::AuthProfile { profile, source } => {
                    entry.auth_profile_override = Some(profile.clone());
                    entry.auth_profile_override_source = Some(source.clone());
                    entry.auth_profile_override_compaction_count =
                        Some(entry.compaction_count.unwrap_or(0));
                }
                SessionOverride::ThinkingLevel(level) => entry.thinking_level = Some(level.clone()),
                SessionOverride::VerboseLevel(level) => entry.verbose_level = Some(level.clone()),
                SessionOverride::ReasoningLevel(level) => {
                    entry.reasoning_level = Some(level.clone())
                }
                SessionOverride::SendPolicy(policy) => entry.send_policy = Some(policy.clone()),
                SessionOverride::GroupActivation(activation) => {
                    entry.group_activation = Some(activation.clone())
                }
                SessionOverride::QueueMode(mode) => entry.queue_mode = Some(mode.clone()),
            })
            .await
    }

    /// Clears a per-session override.
    pub async fn clear_override(&self, kind: OverrideKind) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        self.manager
            .change(key, |entry| clear_override(entry, kind))
            .await
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
        self.route(route, None).await
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
        self.route(route, Some(message)).await
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
        let thread = self.fork(thread_id).await?;
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
        let label = label.map(parse_session_label).transpose()?;
        let participants = self
            .manager
            .seams
            .store
            .get(&self.key)
            .await?
            .and_then(|stored| stored.entry.participants);
        let now_ms = self.manager.seams.clock.now_millis();
        let mut entry = start_session(None, now_ms);
        entry.spawned_by = Some(self.key.to_string());
        entry.label = label;
        entry.source = Some(SessionSource::api(self.key.to_string()));
        entry.participants = participants;
        self.manager.seams.store.put(&key, entry).await
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
        self.record_turn_of(None, outcome).await
    }

    /// [`record_turn`](Self::record_turn) for the turn that holds the run `fence`: the
    /// run ends in the same update, which is refused ([`Error::RunLost`], nothing
    /// written) when another turn holds the run now.
    ///
    /// `entry` is the session as the turn began; while the turn holds the run, nothing
    /// else records a turn, so its context summary and turn count are the ones the next
    /// summary builds on, with no read before the update (the update checks them, and
    /// the session is read again if another call changed them meanwhile).
    pub(crate) async fn end_run(
        &self,
        outcome: TurnOutcome,
        fence: Option<u64>,
        entry: Option<&SessionEntry>,
    ) -> Result<StoredSession> {
        self.record_turn_fenced(None, outcome, fence, entry).await
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
        let key = &self.key;
        let workspaces = self
            .manager
            .seams
            .workspaces
            .clone()
            .ok_or(Error::NotConfigured {
                what: "session workspaces (SessionManagerBuilder::workspaces)",
            })?;
        let entry = self.manager.existing(key).await?.entry;
        let id = match &entry.workspace_id {
            Some(id) => parse_workspace_id(id)?,
            None => {
                let chosen = self.choose_workspace_id(&entry, &workspaces).await?;
                let recorded = self
                    .manager
                    .change(key, |e| {
                        e.workspace_id.get_or_insert_with(|| chosen.to_string());
                    })
                    .await?;
                // A racing call may have recorded another first; the store decides.
                parse_workspace_id(recorded.entry.workspace_id.as_deref().unwrap_or_default())?
            }
        };
        let root = workspaces.root().to_path_buf();
        blocking(&root, move || workspaces.open(id)).await
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
        let key = &self.key;
        self.manager
            .system_events
            .enqueue(key, text, self.manager.seams.clock.now())
            .await
    }

    /// Logs one inbound or outbound message in the session: the one call every channel
    /// makes. The message becomes a transcript line — a user message in, an assistant
    /// message out — carrying the message-log fields, so it is in the session's event log
    /// and in [`query_log`](crate::transcript::TranscriptStore::query_log).
    pub async fn log_message(&self, message: LogMessage) -> Result<SessionEvent> {
        self.check().await?;
        let key = &self.key;
        let (transcript, entry) = self.manager.transcript_of(key).await?;
        let line = self.manager.log_line(key, &entry, message);
        self.manager.append_line(key, &transcript, line).await
    }

    /// Mirrors a message delivered outside the model (a reminder, a broadcast) into the
    /// session's transcript, as OpenClaw does. `None` when there is nothing to mirror.
    pub async fn mirror_delivery(
        &self,
        text: &str,
        media_urls: &[String],
    ) -> Result<Option<SessionEvent>> {
        self.check().await?;
        let key = &self.key;
        let Some(line) =
            TranscriptEntry::delivery_mirror(text, media_urls, self.manager.seams.clock.now())
        else {
            return Ok(None);
        };
        let (transcript, _) = self.manager.transcript_of(key).await?;
        Ok(self
            .manager
            .transcript_store()?
            .append(&transcript, vec![line])
            .await?
            .pop())
    }

    /// Appends `lines` to the current session transcript (created on first use), as
    /// they are: for what the message log does not write, such as an assistant message
    /// that calls tools and the tools' results, which [`Session::messages`](Self::messages) reads
    /// back as tool calls and tool messages. Returns their events, in order.
    pub async fn append(&self, lines: Vec<TranscriptEntry>) -> Result<Vec<SessionEvent>> {
        self.check().await?;
        let key = &self.key;
        let (transcript, _) = self.manager.transcript_of(key).await?;
        self.manager
            .transcript_store()?
            .append(&transcript, lines)
            .await
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
        let now = self.manager.seams.clock.now();
        let lines = crate::inbound::chat::transcript_lines(messages, now);
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        self.append(lines).await
    }

    /// Takes a checkpoint (`manual`, `new_session`, `turn_limit`, `idle`): with an
    /// [`Introspector`](crate::memory::checkpoint::Introspector), it looks over the session's
    /// events since the last checkpoint and its working memory and description are updated
    /// from what it returns; a checkpoint event is recorded either way.
    pub async fn checkpoint(&self, reason: CheckpointReason) -> Result<SessionEvent> {
        self.check().await?;
        let key = &self.key;
        let (transcript, entry) = self.manager.transcript_of(key).await?;
        let (outcome, event) = self
            .manager
            .introspect(key, &transcript, &entry, reason)
            .await?;
        if let Some(outcome) = outcome {
            self.manager.apply_introspection(key, outcome, true).await?;
        }
        Ok(event)
    }

    /// The events of the current session from `from` on: a client that reconnects
    /// passes the `next` offset of its last read and gets only what it missed.
    pub async fn replay(&self, from: Offset) -> Result<TranscriptRead> {
        self.check().await?;
        let key = &self.key;
        let entry = self.manager.existing(key).await?.entry;
        let transcript = TranscriptRef::of(key, &entry, &self.manager.settings.default_agent);
        self.manager
            .transcript_store()?
            .read(&transcript, from)
            .await
    }

    /// Follows this key across its sessions from `from` — the key's session, then the
    /// one that replaces it after a reset, a close or an expiry, from any process (see
    /// [`Scope::Key`](crate::transcript::follow::Scope::Key)): [`Position::Start`] for the start of
    /// the key's current session, or the [`position`](crate::transcript::follow::Follow::position)
    /// a follower reached, to resume.
    ///
    /// [`Error::NotFound`] when there is no session. For a scoped caller, access is
    /// checked when the follower is made, and it lasts until it is dropped: a host that
    /// removes a caller from a session drops the caller's followers too.
    ///
    /// ```
    /// use agent_sessions::transcript::follow::{Position, Update};
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
        let key = &self.key;
        let entry = self.manager.existing(key).await?.entry;
        Ok(self.manager.seams.flush_guard.plan(&entry))
    }

    /// Records that the memory flush ran: `memoryFlushAt` and the compaction cycle it
    /// belongs to, so it does not run again until the next compaction.
    pub async fn record_memory_flush(&self) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        let now_ms = self.manager.seams.clock.now_millis();
        self.manager
            .change(key, |entry| {
                entry.memory_flush_at = Some(now_ms);
                entry.memory_flush_compaction_count = Some(entry.compaction_count.unwrap_or(0));
            })
            .await
    }

    /// Records a completed compaction in one atomic update (OpenClaw's
    /// `incrementCompactionCount`): the count goes up; with `tokens_after`, the prompt
    /// size becomes it and the input/output breakdown is cleared.
    pub async fn record_compaction(&self, tokens_after: Option<u64>) -> Result<StoredSession> {
        self.check().await?;
        let key = &self.key;
        let now_ms = self.manager.seams.clock.now_millis();
        self.manager
            .change(key, |entry| {
                entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
                entry.updated_at = entry.updated_at.max(now_ms);
                if let Some(tokens) = tokens_after.filter(|t| *t > 0) {
                    entry.total_tokens = Some(tokens);
                    entry.input_tokens = None;
                    entry.output_tokens = None;
                }
            })
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
        let key = &self.key;
        match event {
            CompactionEvent::Start => {
                tracing::debug!(key = %key, "compaction started");
                Ok(None)
            }
            CompactionEvent::End {
                will_retry: true, ..
            } => {
                tracing::debug!(key = %key, "compaction attempt ended; the engine retries");
                Ok(None)
            }
            CompactionEvent::End {
                will_retry: false,
                tokens_after,
            } => self.record_compaction(tokens_after).await.map(Some),
        }
    }

    /// The engine session to resume, if one was recorded.
    pub async fn engine_session(&self, kind: &EngineKind) -> Result<Option<String>> {
        self.check().await?;
        let key = &self.key;
        Ok(self
            .manager
            .seams
            .store
            .get(key)
            .await?
            .and_then(|s| kind.session_id(&s.entry)))
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
        let key = &self.key;
        let entry = self.manager.existing(key).await?.entry;
        let stored = entry.skills_snapshot.as_ref();
        let built_for_this_session = stored
            .and_then(|s| s.get("sessionId"))
            .and_then(Value::as_str)
            == Some(entry.session_id.as_str());
        let first_turn = entry.system_sent != Some(true) && !built_for_this_session;
        if !snapshot_needs_refresh(stored, first_turn, version) {
            return Ok(false);
        }
        let mut snapshot = build();
        if let Value::Object(fields) = &mut snapshot {
            fields.insert("version".into(), Value::from(version));
            fields.insert("sessionId".into(), Value::from(entry.session_id.clone()));
        }
        self.manager
            .change(key, |e| e.skills_snapshot = Some(snapshot.clone()))
            .await?;
        Ok(true)
    }

    /// Changes where replies go; with `inbound`, records the message's metadata in the
    /// same store write.
    async fn route(
        &self,
        route: &DeliveryContext,
        inbound: Option<&InboundMessage>,
    ) -> Result<StoredSession> {
        let key = &self.key;
        let now_ms = self.manager.seams.clock.now_millis();
        let group = inbound.and_then(InboundMessage::group_resolution);
        self.manager
            .seams
            .store
            .apply(key, &mut |slot, _| {
                let entry = slot.get_or_insert_with(|| start_session(None, now_ms));
                apply_route(entry, route);
                if let Some(message) = inbound {
                    record_meta(entry, message, group.as_ref(), key);
                }
                Ok(())
            })
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }

    /// The thread session `<key>:thread:<thread_id>`, forked from this one if new.
    async fn fork(&self, thread_id: &str) -> Result<StoredSession> {
        let parent = &self.key;
        let key = parent.thread(thread_id)?;
        let parent_entry = self.manager.existing(parent).await?.entry;
        let now_ms = self.manager.seams.clock.now_millis();
        self.manager
            .seams
            .store
            .apply(&key, &mut |slot, _| {
                if slot.is_none() {
                    let mut entry = start_session(Some(parent_entry.clone()), now_ms);
                    entry.label = None;
                    entry.spawned_by = None;
                    entry.chat_type = parent_entry.chat_type.clone();
                    entry.channel = parent_entry.channel.clone();
                    entry.group_id = parent_entry.group_id.clone();
                    entry.subject = parent_entry.subject.clone();
                    entry.group_channel = parent_entry.group_channel.clone();
                    entry.space = parent_entry.space.clone();
                    entry.display_name = parent_entry.display_name.clone();
                    entry.forked_from = Some(ForkOrigin {
                        session_key: parent.to_string(),
                        session_id: parent_entry.session_id.clone(),
                        session_file: parent_entry.session_file.clone(),
                        extra: Default::default(),
                    });
                    apply_route(
                        &mut entry,
                        &DeliveryContext::default().with_thread(thread_id.trim()),
                    );
                    *slot = Some(entry);
                }
                Ok(())
            })
            .await?
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }

    /// Sets a session's status and, when transcripts are kept, records the change in
    /// its event log — one write of the store: a transcript created for it is recorded
    /// in the same update, so the backup keeps the state before the call. The change
    /// and its log line are of one session: with `session_id`, only that one (else
    /// [`Error::NotFound`], nothing written); without, the key's current session, looked
    /// for again when a reset replaces it meanwhile. When the line cannot be logged, the
    /// change is undone and the error returned. A session already in `status` is left
    /// as it is (a second close neither moves its `closedAt` nor logs a line).
    async fn change_status(
        &self,
        status: SessionStatus,
        session_id: Option<&str>,
    ) -> Result<StoredSession> {
        let (manager, key) = (self.manager, &self.key);
        let now_ms = manager.seams.clock.now_millis();
        let mut attempts = 0;
        loop {
            let prepared = match manager.seams.transcripts {
                Some(_) => {
                    let entry = manager.existing(key).await?.entry;
                    Some(manager.prepare_transcript_for(key, entry).await?)
                }
                None => None,
            };
            let prepared_id = prepared
                .as_ref()
                .map(|(_, entry, _)| entry.session_id.as_str());
            if session_id.is_some() && prepared_id.is_some() && session_id != prepared_id {
                return Err(Error::NotFound { key: key.clone() });
            }
            let unrecorded = prepared.as_ref().and_then(|(_, entry, location)| {
                Some((entry.session_id.clone(), location.clone()?))
            });
            let (mut before, mut unchanged) = (None, false);
            let changed = manager
                .change_of(key, session_id.or(prepared_id), |entry| {
                    before = Some((entry.status.clone(), entry.closed_at));
                    // A session in this status already keeps it, and its time.
                    unchanged = entry.status.as_ref() == Some(&status);
                    if !unchanged {
                        entry.closed_at = status.is_closed().then_some(now_ms);
                        entry.status = Some(status.clone());
                    }
                    if let Some((session_id, location)) = &unrecorded {
                        record_location(entry, session_id, location);
                    }
                })
                .await;
            let stored = match changed {
                // A reset replaced the session whose transcript was prepared: again,
                // with its successor's.
                Err(Error::NotFound { .. })
                    if session_id.is_none() && prepared.is_some() && attempts < 3 =>
                {
                    attempts += 1;
                    continue;
                }
                changed => changed?,
            };
            if let Some((transcript, _, _)) = prepared.filter(|_| !unchanged) {
                let line =
                    TranscriptEntry::status_change(status.as_str(), manager.seams.clock.now());
                let logged = manager
                    .transcript_store()?
                    .append(&transcript, vec![line])
                    .await;
                if let (Err(error), Some(before)) = (logged, before) {
                    self.undo_status(&stored, before).await;
                    return Err(error);
                }
            }
            return Ok(stored);
        }
    }

    /// Puts back the status `before` of `changed`, a status change whose log line could
    /// not be written, so the failed call changed nothing (a call again does it whole).
    /// A change made by another since is kept, and so is a session a reset replaced
    /// meanwhile; a store that fails for a moment (the same outage, often) is tried
    /// again, a few times.
    async fn undo_status(
        &self,
        changed: &StoredSession,
        before: (Option<SessionStatus>, Option<u64>),
    ) {
        let key = &self.key;
        let mut pause = Duration::from_millis(10);
        for attempt in 1..=UNDO_ATTEMPTS {
            let undone = self
                .manager
                .change_of(key, Some(&changed.entry.session_id), |entry| {
                    if entry.status == changed.entry.status
                        && entry.closed_at == changed.entry.closed_at
                    {
                        (entry.status, entry.closed_at) = before.clone();
                    }
                })
                .await;
            match undone {
                Ok(_) | Err(Error::NotFound { .. }) => return,
                Err(error) if error.is_transient() && attempt < UNDO_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause *= 4;
                }
                Err(error) => {
                    tracing::warn!(key = %key, %error, "the status change whose log line failed could not be undone; calling again logs it");
                    return;
                }
            }
        }
    }

    #[cfg(feature = "http")]
    /// Closes the key's current session if it is `session_id`; [`Error::NotFound`] (and
    /// nothing written) when it is not.
    pub(crate) async fn close_if_current(&self, session_id: &str) -> Result<StoredSession> {
        self.check().await?;
        self.change_status(SessionStatus::Closed, Some(session_id))
            .await
    }

    /// [`record_turn`](Self::record_turn) of the key's current session if it is
    /// `session_id` (when given); [`Error::NotFound`] and nothing written when it is not.
    pub(crate) async fn record_turn_of(
        &self,
        session_id: Option<&str>,
        outcome: TurnOutcome,
    ) -> Result<StoredSession> {
        self.record_turn_fenced(session_id, outcome, None, None)
            .await
    }

    /// [`record_turn_of`](Self::record_turn_of), ending the run `fence` when given (see
    /// [`end_run`](Self::end_run)).
    async fn record_turn_fenced(
        &self,
        session_id: Option<&str>,
        outcome: TurnOutcome,
        fence: Option<u64>,
        mut known: Option<&SessionEntry>,
    ) -> Result<StoredSession> {
        let key = &self.key;
        let now_ms = self.manager.seams.clock.now_millis();
        // A summary is written only over the summary and turn count it was built on: when
        // another call changed them meanwhile (an erase clears the summary), the session
        // is read again and the summary built again, three times at most; after that
        // the turn is recorded with the summary left as it is.
        const ATTEMPTS: usize = 3;
        let mut attempt = 0;
        let stored = loop {
            attempt += 1;
            // The session as the turn began, else read now.
            let base = match (&outcome.exchange, known.take()) {
                (None, _) => None,
                (Some(_), Some(entry)) => Some(entry.clone()),
                (Some(_), None) => Some(self.manager.existing(key).await?.entry),
            };
            let summary = match (&outcome.exchange, &base) {
                (Some((user, reply)), Some(base)) => {
                    self.next_context_summary(base, user, reply).await
                }
                _ => None,
            };
            let (mut lost, mut moved) = (false, false);
            let stored = self
                .manager
                .change_of(key, session_id, |entry| {
                    (lost, moved) = (false, false);
                    // The run ends here, if it is still this turn's; else nothing changes.
                    if fence.is_some_and(|fence| crate::lane::interrupted(entry, fence)) {
                        lost = true;
                        return;
                    }
                    moved = base.as_ref().is_some_and(|base| {
                        base.context_summary != entry.context_summary
                            || base.turn_count != entry.turn_count
                    });
                    if moved && attempt < ATTEMPTS {
                        return;
                    }
                    match fence {
                        Some(fence) => {
                            crate::lane::release(entry, fence);
                        }
                        None => {
                            if matches!(
                                entry.status,
                                Some(SessionStatus::Running | SessionStatus::AwaitingApproval)
                            ) {
                                entry.status = Some(SessionStatus::Idle);
                                entry.run = None;
                            }
                        }
                    }
                    entry.turn_count = Some(entry.turn_count.unwrap_or(0) + 1);
                    entry.system_sent = Some(true);
                    entry.aborted_last_run = Some(outcome.aborted);
                    entry.updated_at = entry.updated_at.max(now_ms);
                    if let Some(usage) = &outcome.usage {
                        usage.apply(entry);
                    }
                    if let Some(engine) = &outcome.engine {
                        engine.apply(entry);
                    }
                    if let (Some(summary), false) = (&summary, moved) {
                        entry.context_summary = Some(summary.clone());
                    }
                })
                .await?;
            if lost {
                crate::ops::telemetry::run_lost();
                return Err(Error::RunLost { key: key.clone() });
            }
            if !moved || attempt >= ATTEMPTS {
                break stored;
            }
        };
        let turns = stored.entry.turn_count.unwrap_or(0);
        let at_limit = self
            .manager
            .settings
            .checkpoint_every_turns
            .is_some_and(|every| every > 0 && turns % every == 0);
        if at_limit
            && self.manager.seams.introspector.is_some()
            && self.manager.seams.transcripts.is_some()
        {
            self.checkpoint(CheckpointReason::TurnLimit).await?;
            return self.manager.existing(key).await;
        }
        Ok(stored)
    }

    /// The context summary after the exchange `user`/`reply`, built on `current`'s;
    /// `None` (logged) when the summarizer fails.
    async fn next_context_summary(
        &self,
        current: &SessionEntry,
        user: &str,
        reply: &str,
    ) -> Option<String> {
        let input = SummaryInput::new(vec![SummaryTurn::user(user), SummaryTurn::assistant(reply)])
            .merging(current.context_summary.clone())
            .with_turn_count(current.turn_count.unwrap_or(0) + 1);
        match self.manager.seams.summarizer.summarize(&input).await {
            Ok(summary) => Some(clip_summary(&summary)),
            Err(error) => {
                tracing::warn!(key = %self.key, %error, "summarizer failed; the context summary is unchanged");
                None
            }
        }
    }

    async fn choose_workspace_id(
        &self,
        entry: &SessionEntry,
        workspaces: &crate::identity::workspace::Workspaces,
    ) -> Result<Uuid> {
        let key = &self.key;
        if workspaces.sharing_mode() == WorkspaceSharing::PerIdentity {
            if let (Some(person), Some(identity)) = (&entry.person_id, &entry.agent_identity) {
                let siblings = self
                    .manager
                    .seams
                    .store
                    .list(
                        &ListFilter::new()
                            .include_inactive()
                            .person(person.clone())
                            .agent_identity(identity.clone()),
                    )
                    .await?;
                let shared = siblings
                    .iter()
                    .filter(|s| s.key != *key)
                    .find_map(|s| s.entry.workspace_id.as_deref());
                if let Some(id) = shared {
                    return parse_workspace_id(id);
                }
            }
        }
        Ok(Uuid::parse_str(&entry.session_id).unwrap_or_else(|_| Uuid::new_v4()))
    }
}

/// How many times a status change whose log line failed is tried to be undone.
const UNDO_ATTEMPTS: u32 = 4;

#[cfg(test)]
mod tests {
    use crate::manager::TurnOutcome;
    use crate::prelude::*;

    /// The end of a turn builds the context summary on the session as the turn began;
    /// when another call recorded an exchange meanwhile, the summary is built again on
    /// the session as it is, so that exchange is kept and counted.
    #[tokio::test]
    async fn a_turn_summary_keeps_what_was_recorded_while_the_model_ran() {
        let manager = SessionManager::builder(InMemoryStore::new())
            .build()
            .unwrap();
        let key = manager
            .resolve(&InboundMessage::direct("sms", "+100", "hi"))
            .await
            .unwrap()
            .key;
        let session = manager.session(&key);
        let began = session.get().await.unwrap().unwrap().entry;
        session
            .record_turn(
                TurnOutcome::completed()
                    .with_exchange("Please email the menu to anna@example.com", "Sent it."),
            )
            .await
            .unwrap();
        let ended = session
            .end_run(
                TurnOutcome::completed().with_exchange("Book Luigi's for Sunday?", "Booked."),
                None,
                Some(&began),
            )
            .await
            .unwrap()
            .entry;
        let summary = ended.context_summary.unwrap();
        assert!(summary.contains("anna@example.com"), "{summary}");
        assert!(summary.contains("Luigi"), "{summary}");
        assert!(summary.ends_with("TURNS: 2"), "{summary}");
        assert_eq!(ended.turn_count, Some(2));
    }
}
