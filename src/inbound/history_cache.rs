//! The histories of the sessions a manager served, kept between turns, so a turn
//! reads only the lines appended since the last one instead of the whole transcript.
//!
//! Each cached conversation remembers which copy of the transcript it read (the store's
//! [`identity`](TranscriptStore::identity): a file's inode) and the last line it took
//! in (its offset and id). The next turn reads the transcript from that line on: when
//! the copy is the same and the line is still there, under the same id, only the lines
//! after it are new; otherwise (the transcript was replaced, cut back, or is not one
//! this manager saw, or the session's entry counts an edit in place since — an erase,
//! by any process) the transcript is read from its end, backwards, until it holds
//! what the turn needs ([`TranscriptStore::read_back`], with
//! [`TranscriptStore::last_compaction`] saying where the conversation starts): a fresh
//! process pays for the window, not for the session's age. A conversation keeps the newest lines that fill twice the largest budget
//! asked of it; all of them together stay under [`MAX_CACHED_BYTES`], the least
//! recently used let go first.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::error::Result;
use crate::inbound::chat::{History, HistoryMessage, TokenCounter, Want};
use crate::transcript::{Offset, SessionEvent, TranscriptRef, TranscriptStore};

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
    /// The session's count of in-place edits when it was read
    /// ([`SessionEntry::transcript_edits`](crate::store::SessionEntry::transcript_edits)).
    edits: u64,
    /// The most tokens a turn asked for.
    budget: usize,
    size: usize,
    used: u64,
}

impl HistoryCache {
    /// The newest messages of `transcript` that `want` asks for, and the summary of
    /// its last compaction: what the whole transcript's conversation gives, read from
    /// the line the last call for it took in — unless its lines were edited in place
    /// since (`edits`, the session's count of such edits, changed).
    pub(crate) async fn newest(
        &self,
        transcripts: &dyn TranscriptStore,
        transcript: &TranscriptRef,
        want: Want,
        counter: &dyn TokenCounter,
        edits: u64,
    ) -> Result<(Vec<HistoryMessage>, Option<String>)> {
        let kept = match self.take(transcript) {
            Some(tail) if tail.edits == edits => {
                catch_up(transcripts, transcript, tail, counter).await
            }
            _ => None,
        };
        let found = kept.and_then(|tail| {
            let newest = tail.conversation.newest(want, counter)?;
            Some((tail, newest))
        });
        let (mut tail, newest) = match found {
            Some(found) => found,
            None => read_end(transcripts, transcript, want, counter).await?,
        };
        let summary = tail.conversation.summary.clone();
        tail.edits = edits;
        tail.budget = tail.budget.max(want.tokens);
        tail.conversation.trim(tail.budget.saturating_mul(2));
        self.put(transcript.clone(), tail);
        Ok((newest, summary))
    }

    /// Lets go of every conversation kept: lines were edited in place (an erase), which
    /// reading on from the last line taken in would not see.
    pub(crate) fn clear(&self) {
        let mut cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
        cached.tails.clear();
        cached.bytes = 0;
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
/// that line is no longer there as it was (or the transcript cannot be read: the read
/// that follows reports why).
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

/// The least of a transcript's end read at first for a conversation not kept: the
/// first read takes about 8 bytes of lines for each token of the budget, and the read
/// goes back in steps twice as big.
const MIN_READ_BYTES: usize = 4 * 1024;
/// The biggest step back.
const MAX_READ_BYTES: usize = 16 * 1024 * 1024;

/// The conversation of `transcript` and the newest messages `want` asks for, read
/// backwards from the end a step at a time until it holds them. The last compaction
/// says where the conversation starts (its summary stands for what is before): when it
/// is older than what the turn needs, its line alone is read; when it is among the lines
/// read, the read goes back to the entry it keeps from (or the start).
async fn read_end(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    want: Want,
    counter: &dyn TokenCounter,
) -> Result<(Tail, Vec<HistoryMessage>)> {
    // Asked before the reads: a replacement in between is caught by the next turn.
    let identity = transcripts.identity(transcript).await?;
    let compaction = transcripts.last_compaction(transcript).await?;
    let mut step = want
        .tokens
        .saturating_mul(8)
        .clamp(MIN_READ_BYTES, MAX_READ_BYTES);
    let (mut before, mut events) = (None, Vec::new());
    let (conversation, newest) = loop {
        let read = transcripts.read_back(transcript, before, step).await?;
        let mut reached_start = read.next == Offset::START;
        let mut older = read.events;
        if older.is_empty() && !reached_start {
            // A store that read nothing before a place it says is not the start: the
            // whole transcript.
            let whole = transcripts.read(transcript, Offset::START).await?;
            (older, events, reached_start) = (whole.events, Vec::new(), true);
        }
        older.append(&mut events);
        events = older;
        if reached_start || History::starts_within(&events, event_line) {
            let conversation = History::whole(&events, event_line, counter);
            let newest = conversation
                .newest(want, counter)
                .expect("a whole conversation lets go of no line");
            break (conversation, newest);
        }
        let first = events.first().map_or(Offset::START, |e| e.offset);
        let compacted_within = events.iter().any(|e| e.entry.kind == "compaction");
        let older_compaction = compaction.as_ref().filter(|c| c.offset < first);
        if !compacted_within && (compaction.is_none() || older_compaction.is_some()) {
            // The conversation started before these lines: with the compaction's
            // summary (its kept entries are older still), they hold what the turn needs
            // if they hold enough.
            let mut conversation = match older_compaction {
                Some(compaction) => {
                    let lines: Vec<&SessionEvent> =
                        std::iter::once(compaction).chain(&events).collect();
                    History::whole(&lines, |e| event_line(e), counter)
                }
                None => History::whole(&events, event_line, counter),
            };
            conversation.read_from_the_end();
            if let Some(newest) = conversation.newest(want, counter) {
                break (conversation, newest);
            }
        }
        before = Some(first);
        step = (step * 2).min(MAX_READ_BYTES);
    };
    let last = events
        .last()
        .map_or((Offset::START, None), |e| (e.offset, e.entry.id.clone()));
    let tail = Tail {
        conversation,
        last,
        identity,
        edits: 0,
        budget: 0,
        size: 0,
        used: 0,
    };
    Ok((tail, newest))
}

fn event_line(event: &SessionEvent) -> (Offset, &crate::transcript::TranscriptEntry) {
    (event.offset, &event.entry)
}
