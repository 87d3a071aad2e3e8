//! Per-agent isolation: no agent reads or writes another agent's sessions (documented in the parent module).

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{AccessDenial, Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionEntry;
use crate::store::{ListFilter, ManyMutator, Mutator, SessionStore, Slots, StoredSession};
use crate::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
};

/// A store seen by one agent only.
#[derive(Debug, Clone)]
pub struct AgentScoped<S> {
    agent: AgentId,
    inner: S,
}

impl<S> AgentScoped<S> {
    /// `inner`, limited to `agent`.
    pub fn new(agent: AgentId, inner: S) -> Self {
        AgentScoped { agent, inner }
    }

    /// The agent let through.
    pub fn agent(&self) -> &AgentId {
        &self.agent
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn check_key(&self, key: &SessionKey) -> Result<()> {
        if key.agent_id() == Some(self.agent.as_str()) {
            Ok(())
        } else {
            Err(other_agent(format!("session {key}")))
        }
    }

    fn check_transcript(&self, transcript: &TranscriptRef) -> Result<()> {
        self.check_agent(&transcript.agent, &transcript.session_id)
    }

    fn check_agent(&self, agent: &AgentId, transcript: &str) -> Result<()> {
        if *agent == self.agent {
            Ok(())
        } else {
            Err(other_agent(format!("transcript {agent}/{transcript}")))
        }
    }
}

fn other_agent(resource: String) -> Error {
    Error::AccessDenied {
        resource,
        reason: AccessDenial::OtherAgent,
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for AgentScoped<S> {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        self.check_key(key)?;
        self.inner.get(key).await
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        self.check_key(key)?;
        self.inner.apply(key, mutator).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        if filter.agent.as_ref().is_some_and(|a| *a != self.agent) {
            return Ok(Vec::new());
        }
        self.inner
            .list(&filter.clone().agent(self.agent.clone()))
            .await
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        // Only this agent's own store file: another agent's problems are not ours to see.
        let own = format!("agents/{}/", self.agent);
        Ok(self
            .inner
            .unreadable()
            .await?
            .into_iter()
            .filter(|u| {
                u.location.contains(&own) || u.key.starts_with(&format!("agent:{}:", self.agent))
            })
            .collect())
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        self.inner
            .count(&filter.clone().agent(self.agent.clone()))
            .await
    }

    async fn delete(&self, key: &SessionKey) -> Result<Option<SessionEntry>> {
        self.check_key(key)?;
        self.inner.delete(key).await
    }

    fn as_erase(&self) -> Option<&dyn crate::store::Erase> {
        self.inner
            .as_erase()
            .map(|_| self as &dyn crate::store::Erase)
    }
}

#[async_trait]
impl<S: SessionStore> crate::store::Erase for AgentScoped<S> {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        // Only this agent's closed sessions: another agent's ids are not ours to touch.
        let own: Vec<String> = self
            .inner
            .list(
                &ListFilter::new()
                    .agent(self.agent.clone())
                    .status(crate::store::entry::SessionStatus::Closed),
            )
            .await?
            .into_iter()
            .map(|s| s.entry.session_id)
            .filter(|id| session_ids.contains(id))
            .collect();
        if own.is_empty() {
            return Ok(0);
        }
        match self.inner.as_erase() {
            Some(inner) => inner.remove_closed(&own).await,
            None => Ok(0),
        }
    }
    async fn replace_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        for session in sessions {
            self.check_key(&session.key)?;
        }
        match self.inner.as_erase() {
            Some(inner) => inner.replace_closed(sessions).await,
            None => Ok(0),
        }
    }
    async fn add_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        for session in sessions {
            self.check_key(&session.key)?;
        }
        match self.inner.as_erase() {
            Some(inner) => inner.add_closed(sessions).await,
            None => Ok(0),
        }
    }
    async fn erase_copies(&self, needles: &[String], vacuum: bool) -> Result<usize> {
        match self.inner.as_erase() {
            Some(inner) => inner.erase_copies(needles, vacuum).await,
            None => Ok(0),
        }
    }
}

#[async_trait]
impl<S: crate::store::MultiKeyStore> crate::store::MultiKeyStore for AgentScoped<S> {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut ManyMutator<'_>,
    ) -> Result<Slots> {
        for key in keys {
            self.check_key(key)?;
        }
        self.inner.apply_many(keys, mutator).await
    }
}

#[async_trait]
impl<T: TranscriptStore> TranscriptStore for AgentScoped<T> {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        self.check_transcript(transcript)?;
        self.inner.create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        self.check_transcript(parent)?;
        self.check_transcript(child)?;
        self.inner.fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        self.check_transcript(transcript)?;
        self.inner.append(transcript, entries).await
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        self.check_transcript(transcript)?;
        self.inner.read(transcript, from).await
    }

    async fn identity(&self, transcript: &TranscriptRef) -> Result<Option<u64>> {
        self.check_transcript(transcript)?;
        self.inner.identity(transcript).await
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        self.check_transcript(transcript)?;
        self.inner.read_chunk(transcript, from, max_bytes).await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        self.check_transcript(transcript)?;
        self.inner.read_back(transcript, before, max_bytes).await
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        self.check_transcript(transcript)?;
        self.inner.last_compaction(transcript).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        self.check_transcript(transcript)?;
        self.inner.archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        self.check_transcript(transcript)?;
        self.inner.remove(transcript).await
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        if query.agent.as_ref().is_some_and(|a| *a != self.agent) {
            return Ok(Vec::new());
        }
        let mut query = query.clone();
        query.agent = Some(self.agent.clone());
        self.inner.query_log(&query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        let agent = self.agent.clone();
        self.inner
            .subscribe()
            .only(move |update| update.transcript.agent == agent)
    }

    fn follow_interval(&self) -> std::time::Duration {
        self.inner.follow_interval()
    }

    fn announce(&self, update: crate::transcript::TranscriptUpdate) -> bool {
        // Another agent's transcript is not this store's to announce.
        update.transcript.agent == self.agent && self.inner.announce(update)
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        self.check_transcript(transcript)?;
        self.inner.archived(transcript).await
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.check_transcript(transcript).ok()?;
        self.inner.location(transcript)
    }
}

#[async_trait]
impl<T: TranscriptExport> TranscriptExport for AgentScoped<T> {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        if agent.is_some_and(|a| *a != self.agent) {
            return Ok(Vec::new());
        }
        self.inner.transcript_names(Some(&self.agent)).await
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        self.check_agent(agent, name)?;
        self.inner.export_lines(agent, name).await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        self.check_agent(agent, name)?;
        self.inner.import_lines(agent, name, lines).await
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<crate::transcript::LineEdit>,
    ) -> Result<usize> {
        self.check_agent(agent, name)?;
        self.inner.overwrite_lines(agent, name, edits).await
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        self.check_agent(agent, name)?;
        self.inner.remove_named(agent, name).await
    }
}
