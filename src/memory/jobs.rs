//! The memory jobs over a manager's sessions: identity summaries shared across a
//! person's sessions, and introspection at checkpoints.

use crate::error::{Error, Result};
use crate::freshness::clock::{from_millis, to_millis};
use crate::identity::key::SessionKey;
use crate::manager::SessionManager;
use crate::memory::checkpoint::{IntrospectionInput, IntrospectionOutcome};
use crate::memory::summary::{SummaryInput, SummaryTurn, MAX_SUMMARY_CHARS};
use crate::store::entry::{DescriptionSource, IdentitySummary, LogCursor, SessionEntry};
use crate::store::{ListFilter, StoredSession};
use crate::transcript::{
    CheckpointReason, EventKind, LogQuery, Offset, SessionEvent, TranscriptEntry, TranscriptRef,
};

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

pub(crate) fn clip_summary(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_SUMMARY_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(MAX_SUMMARY_CHARS - 1).collect();
    cut.push('…');
    cut
}

impl SessionManager {
    /// The agent identity of an agent id: as configured with
    /// [`agent_identity`](crate::manager::SessionManagerBuilder::agent_identity), else the id.
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
    pub(crate) async fn seed_identity_summary(
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
    pub(crate) async fn introspect(
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
    pub(crate) async fn apply_introspection(
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

impl SessionManager {
    /// Merges the rolling summary of `person` with `agent_identity`: the messages logged
    /// since the summary's watermark, across every session, channel and engine variant,
    /// merged by the summarizer — but only once the conversation has been quiet for the
    /// configured gap (default one hour) — and written to every sibling session with the
    /// new watermark, and to `summary.md` in their workspaces (with
    /// [`workspaces`](crate::manager::SessionManagerBuilder::workspaces)).
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
