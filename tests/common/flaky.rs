//! A transcript store whose appends fail on demand, for the tests of what a failed
//! append leaves.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
};
use agent_sessions::Error;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A transcript store whose appends fail while `failing` is set: a disk that filled up,
/// a database that went away — or, with `written`, fail after writing their lines (a
/// connection lost after the commit).
pub struct Flaky {
    inner: Arc<dyn TranscriptStore>,
    failing: Arc<AtomicBool>,
    written: bool,
}

#[async_trait]
impl TranscriptStore for Flaky {
    async fn create(
        &self,
        transcript: &TranscriptRef,
        header: &SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> agent_sessions::Result<Vec<SessionEvent>> {
        if self.failing.load(Ordering::SeqCst) {
            if self.written {
                self.inner.append(transcript, entries).await?;
            }
            return Err(Error::Io {
                op: "append",
                path: PathBuf::from("transcript.jsonl"),
                source: std::io::Error::from_raw_os_error(28), // ENOSPC
            });
        }
        self.inner.append(transcript, entries).await
    }

    async fn read(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
    ) -> agent_sessions::Result<TranscriptRead> {
        self.inner.read(transcript, from).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> agent_sessions::Result<Option<PathBuf>> {
        self.inner.archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> agent_sessions::Result<bool> {
        self.inner.remove(transcript).await
    }

    async fn query_log(&self, query: &LogQuery) -> agent_sessions::Result<Vec<LogRecord>> {
        self.inner.query_log(query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.subscribe()
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.inner.location(transcript)
    }
}

/// A manager over `backend` whose transcript appends fail while `failing` is set
/// (after writing their lines, with `written`).
pub fn flaky_manager(
    backend: &Backend,
    failing: &Arc<AtomicBool>,
    written: bool,
) -> SessionManager {
    let inner: Arc<dyn TranscriptStore> = backend.transcripts().clone();
    SessionManager::builder(backend.sessions().clone())
        .transcripts(Flaky {
            inner,
            failing: failing.clone(),
            written,
        })
        .chatter(backend.chatter().clone())
        .system_events(backend.system_events().clone())
        .build()
        .unwrap()
}
