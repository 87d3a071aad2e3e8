//! Following one transcript from an offset: every event once, in order, across
//! processes — what every follower reads with.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::transcript::{
    Offset, SessionEvent, SubscriptionError, TranscriptRef, TranscriptStore,
    TranscriptSubscription, DEFAULT_CHUNK_BYTES,
};

/// A durable feed of one transcript's events from an offset on, whoever appends them.
///
/// Events come from the transcript itself, read from the follower's position, so a
/// follower sees every event exactly once and in order — also the events appended by
/// other processes and those appended while it was not listening. A live update of the
/// store (an append in this process, or another process's as the store hears it) wakes
/// it at once; otherwise it looks again every `poll_interval`,
/// which is the longest it takes to see another process's append on a store that cannot
/// announce them (files and SQLite; PostgreSQL announces them with `NOTIFY`). To resume
/// after a restart, keep `position` and start a new follower there.
///
/// When the transcript is archived (its session was reset or deleted), the follower
/// reads the rest from the archived copy and then ends: `next` returns
/// `None`. Following a closed session's transcript returns its events and ends.
///
pub(crate) struct TranscriptFollow {
    store: Arc<dyn TranscriptStore>,
    transcript: TranscriptRef,
    position: Offset,
    wake: TranscriptSubscription,
    poll_interval: Duration,
    ended: bool,
}

impl std::fmt::Debug for TranscriptFollow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TranscriptFollow")
            .field("transcript", &self.transcript)
            .field("position", &self.position)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl TranscriptFollow {
    /// Follows `transcript` of `store` from `from` ([`Offset::START`] for everything),
    /// looking again every [`TranscriptStore::follow_interval`] when nothing wakes it.
    pub(crate) fn new(
        store: Arc<dyn TranscriptStore>,
        transcript: TranscriptRef,
        from: Offset,
    ) -> Self {
        let watched = transcript.clone();
        // Subscribed before the first read, so no append falls between the two.
        let wake = store.subscribe().only(move |update| {
            update.transcript.agent == watched.agent
                && update.transcript.session_id == watched.session_id
                && update.transcript.topic == watched.topic
        });
        let poll_interval = store.follow_interval();
        TranscriptFollow {
            store,
            transcript,
            position: from,
            wake,
            poll_interval,
            ended: false,
        }
    }

    /// Looks again this often when no live update wakes the follower.
    pub(crate) fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The transcript followed.
    pub(crate) fn transcript(&self) -> &TranscriptRef {
        &self.transcript
    }

    /// Where the next read starts: everything before it has been returned. A follower
    /// started here later returns only what came after.
    pub(crate) fn position(&self) -> Offset {
        self.position
    }

    /// The next events after the last call's (or from the start offset), waiting until
    /// there is at least one; `None` once the transcript was archived and every event of
    /// it returned. One call returns one chunk (about 256 KiB of
    /// the transcript) at most: what is left comes with the next calls. A
    /// transcript that does not exist yet is waited for.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<SessionEvent>>> {
        loop {
            if let Some(events) = self.try_next().await? {
                return Ok(Some(events));
            }
            if self.ended {
                return Ok(None);
            }
            // A wake-up is only a hint: the events are read from the transcript, so a
            // lag just means reading again.
            let woken = tokio::time::timeout(self.poll_interval, self.wake.recv()).await;
            if let Ok(Err(SubscriptionError::Closed)) = woken {
                tokio::time::sleep(self.poll_interval).await;
            }
        }
    }

    /// The events appended since the last call, or `None` without waiting.
    pub(crate) async fn try_next(&mut self) -> Result<Option<Vec<SessionEvent>>> {
        let events = self.read().await?;
        if events.is_empty() && !self.ended {
            // Nothing new: if the transcript was archived, the rest is in the copy.
            if let Some(archived) = self.store.archived(&self.transcript).await? {
                self.transcript = archived;
                self.ended = true;
                let rest = self.read().await?;
                return Ok((!rest.is_empty()).then_some(rest));
            }
        }
        Ok((!events.is_empty()).then_some(events))
    }

    /// Whether the transcript was archived and the follower reads its last events: once
    /// they are returned, [`next`](Self::next) returns `None`.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    async fn read(&mut self) -> Result<Vec<SessionEvent>> {
        let read = self
            .store
            .read_chunk(&self.transcript, self.position, DEFAULT_CHUNK_BYTES)
            .await?;
        self.position = self.position.max(read.next);
        Ok(read.events)
    }
}
