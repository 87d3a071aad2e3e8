//! Following one transcript from an offset: every event once, in order, across
//! processes — what every follower reads with.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::transcript::{
    Offset, SessionEvent, SubscriptionError, TranscriptRead, TranscriptRef, TranscriptStore,
    TranscriptSubscription, DEFAULT_CHUNK_BYTES,
};

/// How many of the lines it returned last a follower remembers, to find where a
/// transcript that lost its end parts from what it returned.
const REMEMBERED_LINES: usize = 64;

/// How often a follower that finds nothing new checks that the line it returned last
/// is still there (a promoted server may have as many lines as it read, but others, or
/// not the transcript at all).
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What a follower's read found.
#[derive(Debug)]
pub(crate) enum Read {
    /// Lines appended since the last read, in order.
    Events(Vec<SessionEvent>),
    /// The transcript no longer has lines this follower returned — a database failed
    /// over to a standby that had not received them, and the promoted server may have
    /// written other lines in their places: those at or after this offset are to be
    /// forgotten, and the lines from there come next.
    Rewound(Offset),
}

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
/// Each read that finds new lines or finds the transcript shorter than the follower's
/// position — and a read that finds nothing, every [`CHECK_EVERY`] — first checks that
/// the last line the follower returned is still where it was: when it is not (the
/// transcript lost its end in a failover, see [`Read::Rewound`]), the follower goes back
/// to just after the newest line it returned that is still there — to the transcript's
/// start when none of the [`REMEMBERED_LINES`] it remembers is — and says so before
/// reading on.
pub(crate) struct TranscriptFollow {
    store: Arc<dyn TranscriptStore>,
    transcript: TranscriptRef,
    position: Offset,
    /// The last lines returned, oldest first: where each starts and what it was.
    returned: VecDeque<(Offset, u64)>,
    /// When the last of them was last checked.
    checked_at: Instant,
    /// Found gone while checking, and not yet rewound to what is still there.
    parting: bool,
    /// New lines read, not yet returned: the check of the line before them failed.
    unchecked: Option<TranscriptRead>,
    /// For a follower resumed at a position: the id of the line just before it, as
    /// whoever kept the position read it — checked at the first read.
    expected: Option<String>,
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
            returned: VecDeque::new(),
            checked_at: Instant::now(),
            parting: false,
            unchecked: None,
            expected: None,
            wake,
            poll_interval,
            ended: false,
        }
    }

    /// Resumed at a position just after the line with id `line`, as whoever kept the
    /// position read it: the first read checks the store still has that line there, and
    /// goes back to the start ([`Read::Rewound`]) if it does not.
    #[cfg(feature = "http")]
    pub(crate) fn expecting(mut self, line: String) -> Self {
        if self.position > Offset::START {
            self.expected = Some(line);
        }
        self
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

    /// The next events after the last call's (or from the start offset), or word that
    /// the transcript lost some of those ([`Read::Rewound`]), waiting until there is
    /// one; `None` once the transcript was archived and every event of it returned. One
    /// call returns one chunk (about 256 KiB of the transcript) at most: what is left
    /// comes with the next calls. A transcript that does not exist yet is waited for.
    pub(crate) async fn next(&mut self) -> Result<Option<Read>> {
        loop {
            if let Some(read) = self.try_next().await? {
                return Ok(Some(read));
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

    /// The events appended since the last call (or a [`Read::Rewound`]), or `None`,
    /// without waiting.
    pub(crate) async fn try_next(&mut self) -> Result<Option<Read>> {
        let read = self.read().await?;
        if matches!(&read, Read::Events(events) if events.is_empty()) && !self.ended {
            // Nothing new: if the transcript was archived, the rest is in the copy.
            if self.follow_archive().await? {
                return Ok(self.read().await?.found());
            }
            // Not archived: now and then, is the line returned last still there?
            if self.checked_at.elapsed() >= CHECK_EVERY {
                if let Some(to) = self.parted().await? {
                    return Ok(Some(Read::Rewound(to)));
                }
            }
        }
        Ok(read.found())
    }

    /// Whether the transcript was archived and the follower reads its last events: once
    /// they are returned, [`next`](Self::next) returns `None`.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    async fn read(&mut self) -> Result<Read> {
        if let Some(line) = self.expected.take() {
            match self.resumed_after(&line).await {
                Ok(true) => {}
                Ok(false) => return Ok(Read::Rewound(self.rewind(Offset::START))),
                Err(error) => {
                    self.expected = Some(line);
                    return Err(error);
                }
            }
        }
        let read = match self.unchecked.take() {
            Some(read) => read,
            None => match self
                .store
                .read_chunk(&self.transcript, self.position, DEFAULT_CHUNK_BYTES)
                .await
            {
                Ok(read) => read,
                // Shorter than where the follower is: did it lose lines returned?
                Err(error @ Error::InvalidOffset { .. }) => {
                    return match self.parted().await? {
                        Some(to) => Ok(Read::Rewound(to)),
                        None => Err(error),
                    };
                }
                Err(error) => return Err(error),
            },
        };
        if read.events.is_empty() {
            // Past lines that are no events (a torn line, blank lines), if any.
            self.position = self.position.max(read.next);
            return Ok(Read::Events(Vec::new()));
        }
        // New lines: are they after the line returned last, or in place of lost ones?
        // Kept while that is asked, so a failed check costs no second read.
        self.unchecked = Some(read);
        if let Some(to) = self.parted().await? {
            return Ok(Read::Rewound(to));
        }
        let Some(read) = self.unchecked.take() else {
            return Ok(Read::Events(Vec::new()));
        };
        if self.returned.len() + read.events.len() > REMEMBERED_LINES {
            let keep = REMEMBERED_LINES.saturating_sub(read.events.len());
            self.returned.drain(..self.returned.len() - keep);
        }
        let newest = read.events.len().saturating_sub(REMEMBERED_LINES);
        self.returned.extend(
            read.events[newest..]
                .iter()
                .map(|event| (event.offset, fingerprint(event))),
        );
        self.position = self.position.max(read.next);
        Ok(Read::Events(read.events))
    }

    /// `None` when the line returned last is still where it was (or none was
    /// returned); otherwise where the follower goes back to, which it now reads from:
    /// just after the newest line returned that is still there, or the start. A check
    /// that fails part way goes on from there at the next call.
    async fn parted(&mut self) -> Result<Option<Offset>> {
        self.checked_at = Instant::now();
        while let Some(&(offset, line)) = self.returned.back() {
            let still = match self.store.read_chunk(&self.transcript, offset, 1).await {
                Ok(read) => read
                    .events
                    .first()
                    .filter(|event| event.offset == offset && fingerprint(event) == line)
                    .map(|_| read.next),
                Err(Error::InvalidOffset { .. }) => None,
                Err(error) => return Err(error),
            };
            match still {
                Some(_) if !self.parting => return Ok(None),
                Some(after) => return Ok(Some(self.rewind(after))),
                None => {
                    // Gone from the live transcript: archived (a reset, a delete) just
                    // now, rather than lost? Then the rest is read from the copy.
                    if !self.parting && self.follow_archive().await? {
                        continue;
                    }
                    self.returned.pop_back();
                    self.parting = true;
                }
            }
        }
        Ok(self.parting.then(|| self.rewind(Offset::START)))
    }

    /// Whether the line just before the follower's position is the line `id` (found
    /// in the transcript's archive if it was archived); remembered if it is.
    async fn resumed_after(&mut self, id: &str) -> Result<bool> {
        loop {
            let last = self.event_before(self.position).await?;
            match last {
                Some(event) if event.entry.id.as_deref() == Some(id) => {
                    self.returned.push_back((event.offset, fingerprint(&event)));
                    return Ok(true);
                }
                _ if self.follow_archive().await? => {}
                _ => return Ok(false),
            }
        }
    }

    /// The newest event before `before`, past lines that are no events (a blank or
    /// torn line; at most [`REMEMBERED_LINES`] of them): `None` if there is none, or if
    /// `before` is past the transcript's end. A position inside a line is an error.
    async fn event_before(&self, mut before: Offset) -> Result<Option<SessionEvent>> {
        for _ in 0..REMEMBERED_LINES {
            let read = match self
                .store
                .read_back(&self.transcript, Some(before), 1)
                .await
            {
                Ok(read) => read,
                // Past the end: shorter than whoever kept the position read it.
                Err(Error::InvalidOffset { offset, len, .. }) if offset > len => return Ok(None),
                Err(error) => return Err(error),
            };
            if let Some(event) = read.events.into_iter().last() {
                return Ok(Some(event));
            }
            if read.next == Offset::START || read.next >= before {
                return Ok(None);
            }
            before = read.next;
        }
        Ok(None)
    }

    /// Whether the transcript was archived (and not read from its archive yet): the
    /// follower then reads the archived copy, and ends with it.
    async fn follow_archive(&mut self) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        let Some(archived) = self.store.archived(&self.transcript).await? else {
            return Ok(false);
        };
        self.transcript = archived;
        self.ended = true;
        Ok(true)
    }

    /// Goes back to `to`: what was read after it is read again.
    fn rewind(&mut self, to: Offset) -> Offset {
        self.parting = false;
        self.unchecked = None;
        self.position = to;
        to
    }
}

impl Read {
    /// The read, unless it found nothing.
    fn found(self) -> Option<Read> {
        match self {
            Read::Events(events) if events.is_empty() => None,
            read => Some(read),
        }
    }
}

/// What tells a line from another written in its place: its id, its parent's and its
/// time, which a line overwritten by an erase keeps.
fn fingerprint(event: &SessionEvent) -> u64 {
    let entry = &event.entry;
    let mut hasher = std::hash::DefaultHasher::new();
    (&entry.id, &entry.parent_id, &entry.timestamp).hash(&mut hasher);
    hasher.finish()
}
