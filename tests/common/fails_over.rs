//! A transcript store that fails over, for the tests of what followers do when a
//! database's asynchronous standby is promoted without the primary's last lines.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use agent_sessions::transcript::{
    InMemoryTranscriptStore, SessionEvent, TranscriptEntry, TranscriptRef, TranscriptStore,
    TranscriptSubscription,
};

/// A transcript store standing for a primary database and its asynchronous standby:
/// appends reach the standby while `replicating` is set; once `failed_over` is set,
/// everything goes to the standby, which lacks what was appended while replication
/// was paused.
pub struct FailsOver {
    primary: InMemoryTranscriptStore,
    standby: InMemoryTranscriptStore,
    replicating: AtomicBool,
    failed_over: AtomicBool,
    /// Reads fail with a transient error meanwhile (the database away).
    down: AtomicBool,
}

impl FailsOver {
    pub fn new() -> Self {
        FailsOver {
            primary: InMemoryTranscriptStore::new(),
            standby: InMemoryTranscriptStore::new(),
            replicating: true.into(),
            failed_over: false.into(),
            down: false.into(),
        }
    }

    /// The standby stops receiving appends.
    pub fn pause_replication(&self) {
        self.replicating.store(false, SeqCst);
    }

    /// Reads fail (a transient error) while `down` is set.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, SeqCst);
    }

    /// The primary is lost: the standby serves from now on.
    pub fn fail_over(&self) {
        self.failed_over.store(true, SeqCst);
    }

    fn serving(&self) -> &InMemoryTranscriptStore {
        if self.failed_over.load(SeqCst) {
            &self.standby
        } else {
            &self.primary
        }
    }

    fn replicated(&self) -> bool {
        !self.failed_over.load(SeqCst) && self.replicating.load(SeqCst)
    }
}

#[async_trait::async_trait]
impl TranscriptStore for FailsOver {
    async fn create(
        &self,
        transcript: &TranscriptRef,
        header: &agent_sessions::transcript::SessionHeader,
    ) -> agent_sessions::Result<bool> {
        if self.replicated() {
            self.standby.create(transcript, header).await?;
        }
        self.serving().create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &agent_sessions::transcript::SessionHeader,
    ) -> agent_sessions::Result<bool> {
        if self.replicated() {
            self.standby.fork(parent, child, header).await?;
        }
        self.serving().fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> agent_sessions::Result<Vec<SessionEvent>> {
        let events = self.serving().append(transcript, entries).await?;
        if self.replicated() {
            let copies = events.iter().map(|e| e.entry.clone()).collect();
            self.standby.append(transcript, copies).await?;
        }
        Ok(events)
    }

    async fn read(
        &self,
        transcript: &TranscriptRef,
        from: agent_sessions::transcript::Offset,
    ) -> agent_sessions::Result<agent_sessions::transcript::TranscriptRead> {
        if self.down.load(SeqCst) {
            return Err(agent_sessions::Error::LockTimeout {
                path: "transcripts".into(),
                holder: None,
                waited: std::time::Duration::from_secs(1),
            });
        }
        self.serving().read(transcript, from).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: agent_sessions::transcript::ArchiveReason,
        at: chrono::DateTime<chrono::Utc>,
    ) -> agent_sessions::Result<Option<std::path::PathBuf>> {
        self.serving().archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> agent_sessions::Result<bool> {
        self.serving().remove(transcript).await
    }

    async fn query_log(
        &self,
        query: &agent_sessions::transcript::LogQuery,
    ) -> agent_sessions::Result<Vec<agent_sessions::transcript::LogRecord>> {
        self.serving().query_log(query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.serving().subscribe()
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.serving().location(transcript)
    }
}
