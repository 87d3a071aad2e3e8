//! A transcript store whose appends fail on demand, or land late, for the tests of
//! what a failed append, or one whose caller gave up, leaves.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    late: Option<Late>,
}

/// Appends that land `by` after they began (a slow disk, a far database), counted as
/// they begin and as they end.
#[derive(Clone)]
pub struct Late {
    by: Duration,
    /// Appends begun, and ended.
    count: Arc<tokio::sync::watch::Sender<(usize, usize)>>,
}

/// Counts an append as ended when dropped.
struct Ends<'l>(&'l Late);

impl Drop for Ends<'_> {
    fn drop(&mut self) {
        self.0.count.send_modify(|(_, ended)| *ended += 1);
    }
}

impl Late {
    /// Waits until an append begins after this call.
    pub async fn next_append(&self) {
        let mut count = self.count.subscribe();
        let begun = count.borrow_and_update().0;
        count.wait_for(|now| now.0 > begun).await.unwrap();
    }

    /// Waits until every append that began has ended (landed, failed or dropped).
    pub async fn landed(&self) {
        let mut count = self.count.subscribe();
        count
            .wait_for(|(begun, ended)| begun == ended)
            .await
            .unwrap();
    }
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
        if let Some(late) = &self.late {
            late.count.send_modify(|(begun, _)| *begun += 1);
            // Ended when it lands, or when its caller drops it before.
            let _ends = Ends(late);
            tokio::time::sleep(late.by).await;
            return self.inner.append(transcript, entries).await;
        }
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
    manager_over(backend, failing, written, None)
}

/// A manager over `backend` whose transcript appends land `by` after they began.
pub fn late_manager(backend: &Backend, by: Duration) -> (SessionManager, Late) {
    let late = Late {
        by,
        count: Arc::new(tokio::sync::watch::Sender::new((0, 0))),
    };
    let failing = Arc::new(AtomicBool::new(false));
    let manager = manager_over(backend, &failing, false, Some(late.clone()));
    (manager, late)
}

fn manager_over(
    backend: &Backend,
    failing: &Arc<AtomicBool>,
    written: bool,
    late: Option<Late>,
) -> SessionManager {
    let inner: Arc<dyn TranscriptStore> = backend.transcripts().clone();
    SessionManager::builder(backend.sessions().clone())
        .transcripts(Flaky {
            inner,
            failing: failing.clone(),
            written,
            late,
        })
        .chatter(backend.chatter().clone())
        .system_events(backend.system_events().clone())
        .build()
        .unwrap()
}
