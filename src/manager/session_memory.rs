//! The manager's side of memory: turns with their usage, the memory flush, compaction,
//! summaries, engine sessions, checkpoints and snapshots.

use serde_json::Value;

use super::SessionManager;
use crate::entry::{DescriptionSource, IdentitySummary, LogCursor, SessionEntry, SessionStatus};
use crate::error::{Error, Result};
use crate::freshness::clock::{from_millis, to_millis};
use crate::key::SessionKey;
use crate::memory::checkpoint::{snapshot_needs_refresh, IntrospectionInput, IntrospectionOutcome};
use crate::memory::flush::FlushPlan;
use crate::memory::summary::{SummaryInput, SummaryTurn, MAX_SUMMARY_CHARS};
use crate::memory::usage::{EngineKind, EngineSession, TurnUsage};
use crate::store::{ListFilter, StoredSession};
use crate::transcript::{
    CheckpointReason, EventKind, LogQuery, Offset, SessionEvent, TranscriptEntry, TranscriptRef,
};

/// How a turn ended, for [`Session::record_turn`](crate::manager::Session::record_turn): the one call after each turn.
///
/// ```
/// use agent_sessions::manager::TurnOutcome;
/// use agent_sessions::memory::{EngineSession, TurnUsage};
///
/// let outcome = TurnOutcome::completed()
///     .with_usage(TurnUsage::tokens(1_200, 340, 14_000, 120).by("anthropic", "claude-opus-4-6"))
///     .with_engine(EngineSession::Sdk { id: "sdk-7".into() })
///     .with_exchange("When is my shift?", "Tomorrow at 9.");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The run was aborted.
    pub aborted: bool,
    /// What the turn used.
    pub usage: Option<TurnUsage>,
    /// The engine session it ran in, to resume next time.
    pub engine: Option<EngineSession>,
    /// The user's message and the reply, for the context summary.
    pub exchange: Option<(String, String)>,
}

impl TurnOutcome {
    /// A turn that completed.
    pub fn completed() -> Self {
        TurnOutcome::default()
    }

    /// A turn that was aborted.
    pub fn aborted() -> Self {
        TurnOutcome {
            aborted: true,
            ..TurnOutcome::default()
        }
    }

    /// Records the turn's usage.
    pub fn with_usage(mut self, usage: TurnUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Records the engine session to resume.
    pub fn with_engine(mut self, engine: EngineSession) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Updates the context summary with this exchange.
    pub fn with_exchange(mut self, user: impl Into<String>, reply: impl Into<String>) -> Self {
        self.exchange = Some((user.into(), reply.into()));
        self
    }
}

/// A compaction event from the engine: compaction started or ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionEvent {
    /// Compaction started.
    Start,
    /// Compaction ended; `will_retry` when the engine will try again.
    End {
        /// Another attempt follows.
        will_retry: bool,
        /// The prompt size after compaction, if known.
        tokens_after: Option<u64>,
    },
}

/// What [`SessionManager::refresh_identity_summary`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SummaryRefresh {
    /// The summary was merged and written to every sibling session.
    Updated {
        /// The new summary.
        summary: IdentitySummary,
        /// The sessions that got it.
        sessions: Vec<SessionKey>,
    },
    /// The conversation is still going; try again after `until`.
    NotQuiet {
        /// When the quiet gap will have passed.
        until: chrono::DateTime<chrono::Utc>,
    },
    /// No message since the last summary.
    NothingNew,
}

fn clip_summary(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_SUMMARY_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}

impl SessionManager {
    /// See [`Session::record_turn`](super::Session::record_turn).
    pub(crate) async fn record_turn(
        &self,
        key: &SessionKey,
        outcome: TurnOutcome,
    ) -> Result<StoredSession> {
        self.record_turn_of(key, None, outcome).await
    }

    /// [`record_turn`](Self::record_turn) of `key`'s current session if it is
    /// `session_id` (when given); [`Error::NotFound`] and nothing written when it is not.
    pub(crate) async fn record_turn_of(
        &self,
        key: &SessionKey,
        session_id: Option<&str>,
        outcome: TurnOutcome,
    ) -> Result<StoredSession> {
        let summary = match &outcome.exchange {
            Some((user, reply)) => self.next_context_summary(key, user, reply).await?,
            None => None,
        };
        let now_ms = self.seams.clock.now_millis();
        let stored = self
            .change_of(key, session_id, |entry| {
                entry.turn_count = Some(entry.turn_count.unwrap_or(0) + 1);
                entry.system_sent = Some(true);
                entry.aborted_last_run = Some(outcome.aborted);
                if matches!(
                    entry.status,
                    Some(SessionStatus::Running | SessionStatus::AwaitingApproval)
                ) {
                    entry.status = Some(SessionStatus::Idle);
                }
                entry.updated_at = entry.updated_at.max(now_ms);
                if let Some(usage) = &outcome.usage {
                    usage.apply(entry);
                }
                if let Some(engine) = &outcome.engine {
                    engine.apply(entry);
                }
                if let Some(summary) = &summary {
                    entry.context_summary = Some(summary.clone());
                }
            })
            .await?;
        let turns = stored.entry.turn_count.unwrap_or(0);
        let at_limit = self
            .settings
            .checkpoint_every_turns
            .is_some_and(|every| every > 0 && turns % every == 0);
        if at_limit && self.seams.introspector.is_some() && self.seams.transcripts.is_some() {
            self.transcripts()
                .checkpoint(key, CheckpointReason::TurnLimit)
                .await?;
            return self.existing(key).await;
        }
        Ok(stored)
    }

    async fn next_context_summary(
        &self,
        key: &SessionKey,
        user: &str,
        reply: &str,
    ) -> Result<Option<String>> {
        let current = self.existing(key).await?.entry;
        let input = SummaryInput::new(vec![SummaryTurn::user(user), SummaryTurn::assistant(reply)])
            .merging(current.context_summary)
            .with_turn_count(current.turn_count.unwrap_or(0) + 1);
        match self.seams.summarizer.summarize(&input).await {
            Ok(summary) => Ok(Some(clip_summary(&summary))),
            Err(error) => {
                tracing::warn!(key = %key, %error, "summarizer failed; the context summary is unchanged");
                Ok(None)
            }
        }
    }

    /// The agent identity of an agent id: as configured with
    /// [`agent_identity`](super::SessionManagerBuilder::agent_identity), else the id.
    pub fn agent_identity_of(&self, agent_id: &str) -> String {
        self.settings
            .agent_identities
            .get(agent_id)
            .cloned()
            .unwrap_or_else(|| agent_id.to_owned())
    }

    /// Gives a new session of a known person the freshest identity summary of its
    /// siblings (same person, same agent identity): a person's first session with a new
    /// engine variant starts with what the others know.
    pub(super) async fn seed_identity_summary(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
    ) -> Result<Option<StoredSession>> {
        let (Some(person), Some(identity)) = (&entry.person_id, &entry.agent_identity) else {
            return Ok(None);
        };
        if entry.identity_summary.is_some() {
            return Ok(None);
        }
        let freshest = self
            .seams
            .store
            .list(
                &ListFilter::new()
                    .include_inactive()
                    .person(person.clone())
                    .agent_identity(identity.clone()),
            )
            .await?
            .into_iter()
            .filter(|s| s.key != *key)
            .filter_map(|s| s.entry.identity_summary)
            .max_by_key(|summary| summary.updated_at);
        let Some(summary) = freshest else {
            return Ok(None);
        };
        let seeded = self
            .change(key, |e| {
                e.identity_summary.get_or_insert_with(|| summary.clone());
            })
            .await?;
        if let Some(summary) = &seeded.entry.identity_summary {
            self.write_summary_files(std::slice::from_ref(key), &summary.text)
                .await?;
        }
        Ok(Some(seeded))
    }

    /// Introspects `transcript` over its events since its last checkpoint and appends a
    /// checkpoint event there. `None` when no introspector is configured.
    pub(super) async fn introspect(
        &self,
        key: &SessionKey,
        transcript: &TranscriptRef,
        entry: &SessionEntry,
        reason: CheckpointReason,
    ) -> Result<(Option<IntrospectionOutcome>, SessionEvent)> {
        let transcripts = self
            .seams
            .transcripts
            .as_deref()
            .ok_or(Error::NotConfigured {
                what: "a transcript store (SessionManagerBuilder::transcripts)",
            })?;
        let outcome = match &self.seams.introspector {
            Some(introspector) => {
                let read = transcripts.read(transcript, Offset::START).await?;
                let since_checkpoint = read
                    .events
                    .iter()
                    .rposition(|e| e.kind() == EventKind::Checkpoint)
                    .map_or(0, |at| at + 1);
                let input = IntrospectionInput {
                    key: key.clone(),
                    entry: entry.clone(),
                    reason,
                    events: read.events[since_checkpoint..].to_vec(),
                };
                match introspector.introspect(&input).await {
                    Ok(outcome) => Some(outcome),
                    Err(error) => {
                        tracing::warn!(key = %key, %error, "introspection failed; the checkpoint is recorded without it");
                        None
                    }
                }
            }
            None => None,
        };
        let line = TranscriptEntry::checkpoint(reason, self.seams.clock.now());
        let event = transcripts
            .append(transcript, vec![line])
            .await?
            .pop()
            .ok_or_else(|| Error::NotFound { key: key.clone() })?;
        Ok((outcome, event))
    }

    /// Applies an introspection's outcome; the description only when it concerns this
    /// session (not for `new_session`, which looked at the previous one).
    pub(super) async fn apply_introspection(
        &self,
        key: &SessionKey,
        outcome: IntrospectionOutcome,
        with_description: bool,
    ) -> Result<()> {
        if outcome.working_memory.is_none() && (outcome.description.is_none() || !with_description)
        {
            return Ok(());
        }
        self.change(key, |entry| {
            if let Some(memory) = &outcome.working_memory {
                entry.working_memory = Some(memory.clone());
            }
            if let (true, Some(description)) = (with_description, &outcome.description) {
                entry.description = Some(description.clone());
                entry.description_source = Some(DescriptionSource::Introspection);
            }
        })
        .await?;
        Ok(())
    }
}

/// The memory side of [`Session`](super::Session)'s calls: the memory flush before
/// compaction, compaction, engine sessions and the skills snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionMemory<'a> {
    pub(super) manager: &'a SessionManager,
}

impl SessionManager {
    /// The memory calls (see [`SessionMemory`]).
    pub(crate) fn memory(&self) -> SessionMemory<'_> {
        SessionMemory { manager: self }
    }
}

impl SessionMemory<'_> {
    /// See [`Session::memory_flush_plan`](super::Session::memory_flush_plan).
    pub(crate) async fn memory_flush_plan(&self, key: &SessionKey) -> Result<Option<FlushPlan>> {
        let entry = self.manager.existing(key).await?.entry;
        Ok(self.manager.seams.flush_guard.plan(&entry))
    }

    /// See [`Session::record_memory_flush`](super::Session::record_memory_flush).
    pub(crate) async fn record_memory_flush(&self, key: &SessionKey) -> Result<StoredSession> {
        let now_ms = self.manager.seams.clock.now_millis();
        self.manager
            .change(key, |entry| {
                entry.memory_flush_at = Some(now_ms);
                entry.memory_flush_compaction_count = Some(entry.compaction_count.unwrap_or(0));
            })
            .await
    }

    /// See [`Session::record_compaction`](super::Session::record_compaction).
    pub(crate) async fn record_compaction(
        &self,
        key: &SessionKey,
        tokens_after: Option<u64>,
    ) -> Result<StoredSession> {
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

    /// See [`Session::on_compaction_event`](super::Session::on_compaction_event).
    pub(crate) async fn on_compaction_event(
        &self,
        key: &SessionKey,
        event: CompactionEvent,
    ) -> Result<Option<StoredSession>> {
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
            } => self.record_compaction(key, tokens_after).await.map(Some),
        }
    }

    /// See [`Session::engine_session`](super::Session::engine_session).
    pub(crate) async fn engine_session(
        &self,
        key: &SessionKey,
        kind: &EngineKind,
    ) -> Result<Option<String>> {
        Ok(self
            .manager
            .seams
            .store
            .get(key)
            .await?
            .and_then(|s| kind.session_id(&s.entry)))
    }

    /// See [`Session::ensure_skills_snapshot`](super::Session::ensure_skills_snapshot).
    pub(crate) async fn ensure_skills_snapshot<F>(
        &self,
        key: &SessionKey,
        version: u64,
        build: F,
    ) -> Result<bool>
    where
        F: FnOnce() -> Value + Send,
    {
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
}

impl SessionManager {
    /// Merges the rolling summary of `person` with `agent_identity`: the messages logged
    /// since the summary's watermark, across every session, channel and engine variant,
    /// merged by the summarizer — but only once the conversation has been quiet for the
    /// configured gap (default one hour) — and written to every sibling session with the
    /// new watermark, and to `summary.md` in their workspaces (with
    /// [`workspaces`](super::SessionManagerBuilder::workspaces)).
    pub async fn refresh_identity_summary(
        &self,
        person: &str,
        agent_identity: &str,
    ) -> Result<SummaryRefresh> {
        // A raw id linked to a person (see `KeyBuilder::canonical_person`) names them.
        let canonical = self.seams.keys.canonical_person(person);
        let person = canonical.as_deref().unwrap_or(person);
        let transcripts = self
            .seams
            .transcripts
            .as_deref()
            .ok_or(Error::NotConfigured {
                what: "a transcript store (SessionManagerBuilder::transcripts)",
            })?;
        let siblings = self
            .seams
            .store
            .list(
                &ListFilter::new()
                    .include_inactive()
                    .person(person)
                    .agent_identity(agent_identity),
            )
            .await?;
        let current = siblings
            .iter()
            .filter_map(|s| s.entry.identity_summary.clone())
            .max_by_key(|summary| summary.updated_at);
        let watermark = current.as_ref().and_then(|s| s.watermark.clone());
        let mut query = LogQuery::person_with(person, agent_identity);
        if let Some(mark) = &watermark {
            query = query.since(from_millis(mark.at));
        }
        let records: Vec<_> = transcripts
            .query_log(&query)
            .await?
            .into_iter()
            .filter(|record| {
                watermark
                    .as_ref()
                    .is_none_or(|mark| LogCursor::of(record) > *mark)
            })
            .collect();
        let Some(last) = records.last() else {
            return Ok(SummaryRefresh::NothingNew);
        };
        let now = self.seams.clock.now();
        let quiet_until = last.at
            + chrono::Duration::from_std(self.settings.summary_quiet_gap).unwrap_or_default();
        if now < quiet_until {
            return Ok(SummaryRefresh::NotQuiet { until: quiet_until });
        }
        let turns = records
            .iter()
            .map(|record| SummaryTurn {
                direction: record
                    .log
                    .direction
                    .unwrap_or(crate::transcript::Direction::Inbound),
                text: record.text.clone(),
                agent_name: record.log.agent_name.clone(),
                channel: record.log.channel.clone(),
                at: Some(record.at),
            })
            .collect();
        let input = SummaryInput::new(turns).merging(current.map(|s| s.text));
        let summary = IdentitySummary {
            text: clip_summary(&self.seams.summarizer.summarize(&input).await?),
            updated_at: to_millis(now),
            watermark: Some(LogCursor::of(last)),
            extra: Default::default(),
        };
        let mut sessions = Vec::new();
        for sibling in siblings {
            self.change(&sibling.key, |entry| {
                entry.identity_summary = Some(summary.clone())
            })
            .await?;
            sessions.push(sibling.key);
        }
        self.write_summary_files(&sessions, &summary.text).await?;
        tracing::info!(
            person,
            agent_identity,
            sessions = sessions.len(),
            "identity summary merged"
        );
        Ok(SummaryRefresh::Updated { summary, sessions })
    }
}
