//! The histories of the sessions a manager served, kept between turns, so a turn
//! reads only the lines appended since the last one instead of the whole transcript.
//!
//! Each cached conversation remembers which copy of the transcript it read (the store's
//! [`identity`](TranscriptStore::identity): a file's inode) and the last line it took
//! in (its offset and id). The next turn reads the transcript from that line on: when
//! the copy is the same and the line is still there, under the same id, only the lines
//! after it are new; otherwise (the transcript was replaced, cut back, or is not one
//! this manager saw) the whole transcript is read again. A conversation keeps the newest lines that fill twice the largest budget
//! asked of it; all of them together stay under [`MAX_CACHED_BYTES`], the least
//! recently used let go first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::inbound::chat::{ChatMessage, History, TokenCounter, Want};
use crate::transcript::{Offset, TranscriptRef, TranscriptStore};

/// The most text (about) the conversations of one manager keep in memory.
pub(crate) const MAX_CACHED_BYTES: usize = 64 * 1024 * 1024;
/// The most conversations one manager keeps.
const MAX_CACHED: usize = 4096;

/// The session histories a manager keeps between turns.
#[derive(Debug, Default)]
pub(crate) struct HistoryCache {
    cached: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    tails: HashMap<TranscriptRef, Tail>,
    /// The sum of the tails' sizes.
    bytes: usize,
    /// Counts uses, to tell the least recently used.
    clock: u64,
}

/// One transcript's conversation, as of its last line taken in.
#[derive(Debug)]
struct Tail {
    conversation: History,
    /// The offset and id of the last line taken in.
    last: (Offset, Option<String>),
    /// Which copy of the transcript was read ([`TranscriptStore::identity`]).
    identity: Option<u64>,
    /// The most tokens a turn asked for.
    budget: usize,
    size: usize,
    used: u64,
}

impl HistoryCache {
    /// The newest messages of `transcript` that `want` asks for, and the summary of
    /// its last compaction: what the whole transcript's conversation gives, read from
    /// the line the last call for it took in.
    pub(crate) async fn newest(
        &self,
        transcripts: &dyn TranscriptStore,
        transcript: &TranscriptRef,
        want: Want,
        counter: &dyn TokenCounter,
    ) -> Result<(Vec<ChatMessage>, Option<String>)> {
        let kept = match self.take(transcript) {
            Some(tail) => catch_up(transcripts, transcript, tail, counter).await,
            None => None,
        };
        let found = kept.and_then(|tail| {
            let newest = tail.conversation.newest(want, counter)?;
            Some((tail, newest))
        });
        let (mut tail, newest) = match found {
            Some(found) => found,
            None => {
                let whole = read_whole(transcripts, transcript, counter).await?;
                let newest = whole
                    .conversation
                    .newest(want, counter)
                    .expect("a whole conversation lets go of no line");
                (whole, newest)
            }
        };
        let summary = tail.conversation.summary.clone();
        tail.budget = tail.budget.max(want.tokens);
        tail.conversation.trim(tail.budget.saturating_mul(2));
        self.put(transcript.clone(), tail);
        Ok((newest, summary))
    }

    /// Whether a conversation of `transcript` is kept: it existed when it was last read.
    pub(crate) fn holds(&self, transcript: &TranscriptRef) -> bool {
        self.cached
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tails
            .contains_key(transcript)
    }

    /// Takes `transcript`'s conversation out (a concurrent turn of the same session
    /// reads the whole transcript rather than wait).
    fn take(&self, transcript: &TranscriptRef) -> Option<Tail> {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        let tail = cached.tails.remove(transcript)?;
        cached.bytes -= tail.size;
        Some(tail)
    }

    /// Keeps `tail` as `transcript`'s conversation, letting go of the least recently
    /// used while there are too many.
    fn put(&self, transcript: TranscriptRef, mut tail: Tail) {
        tail.size = tail.conversation.size();
        if tail.size > MAX_CACHED_BYTES / 4 {
            return;
        }
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        cached.clock += 1;
        tail.used = cached.clock;
        cached.bytes += tail.size;
        if let Some(earlier) = cached.tails.insert(transcript, tail) {
            cached.bytes -= earlier.size;
        }
        while cached.bytes > MAX_CACHED_BYTES || cached.tails.len() > MAX_CACHED {
            let Some(oldest) = cached
                .tails
                .iter()
                .min_by_key(|(_, tail)| tail.used)
                .map(|(transcript, _)| transcript.clone())
            else {
                break;
            };
            if let Some(gone) = cached.tails.remove(&oldest) {
                cached.bytes -= gone.size;
            }
        }
    }
}

/// `tail` with the lines appended to `transcript` since its last line; `None` when
/// that line is no longer there as it was (or the transcript cannot be read: the whole
/// read that follows reports why).
async fn catch_up(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    mut tail: Tail,
    counter: &dyn TokenCounter,
) -> Option<Tail> {
    if transcripts.identity(transcript).await.ok()? != tail.identity {
        return None;
    }
    let read = transcripts.read(transcript, tail.last.0).await.ok()?;
    let mut events = read.events.into_iter();
    let first = events.next()?;
    if first.offset != tail.last.0 || first.entry.id != tail.last.1 {
        return None;
    }
    for event in events {
        tail.conversation
            .add(event.offset, &event.entry, counter)
            .ok()?;
        tail.last = (event.offset, event.entry.id);
    }
    Some(tail)
}

/// The conversation of the whole of `transcript`.
async fn read_whole(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    counter: &dyn TokenCounter,
) -> Result<Tail> {
    // Asked before the read: a replacement in between is caught by the next turn.
    let identity = transcripts.identity(transcript).await?;
    let read = transcripts.read(transcript, Offset::START).await?;
    let conversation = History::whole(&read.events, |e| (e.offset, &e.entry), counter);
    let last = read
        .events
        .last()
        .map_or((Offset::START, None), |e| (e.offset, e.entry.id.clone()));
    Ok(Tail {
        conversation,
        last,
        identity,
        budget: 0,
        size: 0,
        used: 0,
    })
}
