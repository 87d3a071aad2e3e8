//! Telling this process's followers that a transcript changed outside the crate:
//! [`SessionManager::emit_transcript_update`], what an OpenClaw host announces with
//! `emitSessionTranscriptUpdate`.

use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::manager::SessionManager;
use crate::transcript::{TranscriptNotice, TranscriptRef, TranscriptStore, TranscriptUpdate};

impl SessionManager {
    /// Tells this process's subscribers and followers that a transcript changed outside
    /// the crate — what an OpenClaw host announces with `emitSessionTranscriptUpdate`
    /// after it appended to a transcript file. The update they receive names the
    /// transcript and its file, carries the notice's session key and message (OpenClaw's
    /// object form) and no events: they read what is new from the transcript (a [`Follow`](crate::transcript::follow::Follow) does so at once instead of
    /// at its next look).
    ///
    /// The transcript is the session's, when the notice names a key whose session has
    /// that file; else the one the file's name names (`<sessionId>.jsonl` or
    /// `<sessionId>-topic-<topic>.jsonl` in an agent's sessions directory of this
    /// store). Returns it, or `None` for a blank file (ignored, as OpenClaw ignores
    /// it). A file that is no transcript of this store is [`Error::InvalidId`] of kind
    /// [`SessionFile`](crate::error::IdKind::SessionFile), and nothing is sent. Stores
    /// that hear other processes' appends themselves (SQLite, PostgreSQL) need no
    /// notice: theirs are ignored after the check.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::transcript::TranscriptNotice;
    /// # use agent_sessions::store::FileTranscriptStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # use std::sync::Arc;
    /// # use agent_sessions::transcript::TranscriptStore;
    /// let state = tempfile::tempdir().unwrap();
    /// let transcripts = Arc::new(FileTranscriptStore::new(state.path()));
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(transcripts.clone())
    ///     .build()?;
    /// let mut updates = transcripts.subscribe();
    /// let file = state.path().join("agents/main/sessions/0b6c1f0e-2c58-4f43-9a4a-3f1c1b0c9d10.jsonl");
    /// let notice = TranscriptNotice::from_openclaw(&serde_json::json!(file.to_str()))?;
    /// let transcript = manager.emit_transcript_update(&notice).await?.unwrap();
    /// assert_eq!(transcript.session_id, "0b6c1f0e-2c58-4f43-9a4a-3f1c1b0c9d10");
    /// assert_eq!(updates.recv().await.unwrap().transcript, transcript);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn emit_transcript_update(
        &self,
        notice: &TranscriptNotice,
    ) -> Result<Option<TranscriptRef>> {
        if notice.is_blank() {
            return Ok(None);
        }
        let store = self.transcript_store()?;
        let file = notice.session_file.trim();
        let transcript = match self.transcript_by_key(notice, file).await? {
            Some(transcript) => transcript,
            None => transcript_named_by(store, file)?,
        };
        store.announce(TranscriptUpdate {
            transcript: transcript.clone(),
            path: Some(file.into()),
            events: Vec::new(),
            session_key: notice.session_key.clone(),
            message: notice.message.clone(),
        });
        Ok(Some(transcript))
    }

    /// The transcript of the session `notice` names by key, if that session's
    /// transcript is at `file`.
    async fn transcript_by_key(
        &self,
        notice: &TranscriptNotice,
        file: &str,
    ) -> Result<Option<TranscriptRef>> {
        let Some(key) = notice.session_key.as_deref() else {
            return Ok(None);
        };
        let key = SessionKey::parse(key)?;
        let Some(stored) = self.seams.store.get(&key).await? else {
            return Ok(None);
        };
        let transcript = TranscriptRef::of(&key, &stored.entry, &self.settings.default_agent);
        let store = self.transcript_store()?;
        Ok((store.location(&transcript).as_deref() == Some(file)).then_some(transcript))
    }
}

/// The transcript of `store` at `file`, from the file's name and directory
/// (`…/agents/<agent>/sessions/<sessionId>[-topic-<topic>].jsonl`), checked by asking the
/// store where that transcript lives.
fn transcript_named_by(store: &dyn TranscriptStore, file: &str) -> Result<TranscriptRef> {
    use crate::error::IdKind;
    use crate::identity::key::AgentId;
    let refused = |problem| Error::invalid_id(IdKind::SessionFile, file, problem);
    let path = std::path::Path::new(file);
    let parent = path.parent();
    let sessions = parent.and_then(std::path::Path::file_name);
    let agent = parent.and_then(std::path::Path::parent);
    let agents = agent.and_then(std::path::Path::parent);
    let (Some(name), Some(agent), Some(agents)) = (
        path.file_name().and_then(|n| n.to_str()),
        agent
            .and_then(std::path::Path::file_name)
            .and_then(|a| a.to_str()),
        agents.and_then(std::path::Path::file_name),
    ) else {
        return Err(refused(
            "not a transcript file in an agent's sessions directory",
        ));
    };
    if sessions != Some(std::ffi::OsStr::new("sessions")) || agents != "agents" {
        return Err(refused(
            "not a transcript file in an agent's sessions directory",
        ));
    }
    let stem = name
        .strip_suffix(".jsonl")
        .ok_or_else(|| refused("a transcript file ends in .jsonl"))?;
    let (session_id, topic) = match stem.split_once("-topic-") {
        Some((id, topic)) => (
            id,
            Some(crate::store::json::paths::decode_file_component(topic)?),
        ),
        None => (stem, None),
    };
    let transcript = TranscriptRef {
        topic,
        ..TranscriptRef::new(AgentId::new(agent)?, session_id)
    };
    if store.location(&transcript).as_deref() == Some(file) {
        return Ok(transcript);
    }
    Err(refused("not a transcript of this store"))
}
