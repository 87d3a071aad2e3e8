//! The transcript algorithm of the SQL stores, written once.
//!
//! A transcript is a row (`line_count`, `leaf`: the id of its last entry) and its
//! numbered lines. Each SQL store supplies those rows through [`TranscriptRows`] inside
//! one of its transactions — SQLite synchronously (its futures never wait; [`now`]
//! runs them), PostgreSQL over the network — and the functions here do the rest: ids
//! and parents, the header of a new transcript, forks, offsets, archive names.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::identity::key::AgentId;
use crate::transcript::lines::{
    archived_name, header_line, leaf_of, read_line, session_id_of_name, stamp_entries,
};
use crate::transcript::{
    ArchiveReason, Offset, SessionEvent, SessionHeader, TranscriptEntry, TranscriptRead,
    TranscriptRef, TranscriptUpdate,
};

/// The rows of the transcript tables, inside one transaction of a SQL store.
pub(crate) trait TranscriptRows {
    /// The transcript's `line_count` and `leaf`, if it exists.
    async fn row(&mut self, agent: &str, name: &str) -> Result<Option<(i64, Option<String>)>>;
    /// Inserts the transcript's row.
    async fn insert_row(
        &mut self,
        agent: &str,
        name: &str,
        session_id: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()>;
    /// Inserts lines numbered from `first`, with their message-log columns.
    async fn insert_lines(
        &mut self,
        agent: &str,
        name: &str,
        first: i64,
        lines: &[String],
    ) -> Result<()>;
    /// The lines numbered `from` on, in order; at most `limit` of them when given, and
    /// with `max_bytes`, only those whose sizes before them add up to less than it (at
    /// least one): the database leaves the rest unsent, so a chunk of big lines is held
    /// one line at a time.
    async fn lines_from(
        &mut self,
        agent: &str,
        name: &str,
        from: i64,
        limit: Option<i64>,
        max_bytes: Option<i64>,
    ) -> Result<Vec<(i64, String)>>;
    /// The lines numbered below `before`, newest first, at most `limit` of them; with
    /// `compactions`, only those whose text holds the word `compaction` (read through
    /// the index of such lines).
    async fn lines_before(
        &mut self,
        agent: &str,
        name: &str,
        before: i64,
        limit: i64,
        compactions: bool,
    ) -> Result<Vec<(i64, String)>>;
    /// Sets the transcript's `line_count` and `leaf` (PostgreSQL sets them with the
    /// lines, in one round trip).
    #[cfg(feature = "sqlite")]
    async fn set_tail(
        &mut self,
        agent: &str,
        name: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()>;
    /// Renames the transcript and its lines.
    async fn rename(&mut self, agent: &str, from: &str, to: &str) -> Result<()>;
    /// The newest name `name` was archived under (`<name>.<reason>.<time>`), if any.
    async fn archived_as(&mut self, agent: &str, name: &str) -> Result<Option<String>>;
}

/// The name transcript `name` was archived under, while it is not live; `None` if it is
/// live or was never archived.
pub(crate) async fn archived(
    rows: &mut impl TranscriptRows,
    agent: &str,
    name: &str,
) -> Result<Option<String>> {
    if rows.row(agent, name).await?.is_some() {
        return Ok(None);
    }
    rows.archived_as(agent, name).await
}

/// Creates transcript `name` of `lines` unless it exists; whether it did.
pub(crate) async fn create(
    rows: &mut impl TranscriptRows,
    agent: &str,
    name: &str,
    lines: &[String],
) -> Result<bool> {
    if rows.row(agent, name).await?.is_some() {
        return Ok(false);
    }
    let leaf = leaf_of(lines.iter().map(String::as_str));
    rows.insert_row(
        agent,
        name,
        &session_id_of_name(name),
        lines.len() as i64,
        leaf,
    )
    .await?;
    rows.insert_lines(agent, name, 0, lines).await?;
    Ok(true)
}

/// Creates `child` (of `agent`) from `header` and the parent's entries, verbatim — the
/// same ids, so the fork's context is the parent's — unless it exists.
pub(crate) async fn fork(
    rows: &mut impl TranscriptRows,
    (parent_agent, parent_name): (&str, &str),
    (agent, child_name): (&str, &str),
    header: &SessionHeader,
) -> Result<bool> {
    if rows.row(agent, child_name).await?.is_some() {
        return Ok(false);
    }
    let mut header = header.clone();
    if header.parent_session.is_none() {
        header.parent_session = Some(parent_name.to_owned());
    }
    let mut lines = vec![header_line(&header)];
    lines.extend(
        rows.lines_from(parent_agent, parent_name, 1, None, None)
            .await?
            .into_iter()
            .map(|(_, line)| line)
            .filter(|line| {
                crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes()).is_ok()
            }),
    );
    create(rows, agent, child_name, &lines).await
}

/// Appends `entries` (ids and parents assigned), creating the transcript with its
/// header first if needed; the events as stored.
#[cfg(feature = "sqlite")]
pub(crate) async fn append(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
    session_id: &str,
    location: &Path,
    entries: Vec<TranscriptEntry>,
) -> Result<Vec<SessionEvent>> {
    let tail = tail_or_create(rows, (agent, name), session_id).await?;
    let appended = Appended::new(tail, location, entries)?;
    rows.insert_lines(agent, name, appended.first, &appended.lines)
        .await?;
    appended.count_bytes();
    rows.set_tail(agent, name, appended.line_count(), appended.leaf.clone())
        .await?;
    Ok(appended.events)
}

/// The transcript's `line_count` and `leaf`, after creating it with its header if it
/// does not exist.
pub(crate) async fn tail_or_create(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
    session_id: &str,
) -> Result<(i64, Option<String>)> {
    match rows.row(agent, name).await? {
        Some(row) => Ok(row),
        None => {
            let header = header_line(&SessionHeader::new(session_id, Utc::now()));
            create(rows, agent, name, &[header]).await?;
            Ok((1, None))
        }
    }
}

/// Entries stamped for a transcript whose tail is known: the lines to insert from
/// `first`, the new leaf, and the events as they will be stored.
pub(crate) struct Appended {
    pub first: i64,
    pub lines: Vec<String>,
    pub leaf: Option<String>,
    pub events: Vec<SessionEvent>,
}

impl Appended {
    /// Stamps `entries` (ids, parents, times) after the tail `(line_count, leaf)` of the
    /// transcript at `location`.
    pub(crate) fn new(
        (first, leaf): (i64, Option<String>),
        location: &Path,
        mut entries: Vec<TranscriptEntry>,
    ) -> Result<Appended> {
        let (lines, leaf) = stamp_entries(&mut entries, leaf, Utc::now()).map_err(|e| {
            Error::encode(format!("a transcript entry for {}", location.display()), e)
        })?;
        let events = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                let seq = first + index as i64;
                SessionEvent {
                    offset: Offset(seq as u64),
                    line: seq as usize + 1,
                    entry,
                }
            })
            .collect();
        Ok(Appended {
            first,
            lines,
            leaf,
            events,
        })
    }

    /// Counts the bytes appended, once they are in (see [`crate::ops::telemetry`]).
    pub(crate) fn count_bytes(&self) {
        crate::ops::telemetry::appended(self.lines.iter().map(|line| line.len() + 1).sum());
    }

    /// The transcript's `line_count` once the lines are in.
    pub(crate) fn line_count(&self) -> i64 {
        self.first + self.lines.len() as i64
    }
}

/// How many lines a chunked read asks for at a time.
const CHUNK_BATCH_LINES: i64 = 64;

/// The events at or after `from` (a line number), and where to continue; with
/// `max_bytes`, only the lines that fit in about that many bytes (at least one), read a
/// batch at a time.
pub(crate) async fn read(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
    from: Offset,
    location: &Path,
    max_bytes: Option<usize>,
) -> Result<TranscriptRead> {
    let Some((count, _)) = rows.row(agent, name).await? else {
        return Ok(nothing_at(from));
    };
    let mut read = read_from(count, from, location, name)?;
    let count = count as u64;
    let mut at = from.0;
    let mut size = 0usize;
    while at < count {
        let batch = max_bytes.map(|_| CHUNK_BATCH_LINES);
        let left = max_bytes.map(|max| i64::try_from(max.saturating_sub(size)).unwrap_or(i64::MAX));
        let lines = rows
            .lines_from(agent, name, at as i64, batch, left.map(|left| left.max(1)))
            .await?;
        let fetched = lines.len();
        // Lines past the count were appended after it was read (a store that reads
        // without one snapshot): the next read returns them, so they are not returned
        // twice.
        for (seq, line) in lines.into_iter().filter(|(seq, _)| (*seq as u64) < count) {
            if let Some(max) = max_bytes {
                // At least one event (the header is not one), however long.
                if !read.events.is_empty() && size + line.len() > max {
                    read.next = Offset(seq as u64);
                    return Ok(read);
                }
            }
            size += line.len() + 1;
            at = seq as u64 + 1;
            read_line(
                &mut read,
                seq as usize + 1,
                Offset(seq as u64),
                line.as_bytes(),
            );
        }
        if batch.is_none_or(|batch| (fetched as i64) < batch) {
            if max_bytes.is_none() || fetched == 0 || at >= count {
                break;
            }
            // A batch cut short by its size: the chunk is full, once it holds an event
            // (a chunk of the header alone reads on).
            if !read.events.is_empty() {
                read.next = Offset(at);
                return Ok(read);
            }
        }
    }
    // Where the lines read end: short of the count when the transcript went away while
    // it was read (archived by another process, on a store that reads without one
    // snapshot), so the next read — of the archived copy — goes on from there.
    read.next = Offset(at);
    Ok(read)
}

/// The newest events before `before` (the end when `None`) that fit in about
/// `max_bytes` (at least one event), oldest first, read newest first a batch at a
/// time; `next` is where they start (the header is read with the first line).
pub(crate) async fn read_back(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
    before: Option<Offset>,
    location: &Path,
    max_bytes: usize,
) -> Result<TranscriptRead> {
    let Some((count, _)) = rows.row(agent, name).await? else {
        return Ok(nothing_at(Offset::START));
    };
    let end = match before {
        Some(before) => {
            read_from(count, before, location, name)?;
            before.0 as i64
        }
        None => count,
    };
    let mut newest_first: Vec<(i64, String)> = Vec::new();
    let (mut at, mut size, mut events) = (end, 0usize, 0usize);
    'read: while at > 0 {
        let lines = rows
            .lines_before(agent, name, at, CHUNK_BATCH_LINES, false)
            .await?;
        if lines.is_empty() {
            break;
        }
        for (seq, line) in lines {
            // At least one event (the header, line 0, is not one), however long.
            if seq > 0 && events > 0 && size + line.len() > max_bytes {
                break 'read;
            }
            size += line.len() + 1;
            events += usize::from(seq > 0);
            at = seq;
            newest_first.push((seq, line));
        }
    }
    let mut read = TranscriptRead {
        next: Offset(at as u64),
        ..TranscriptRead::default()
    };
    for (seq, line) in newest_first.into_iter().rev() {
        read_line(
            &mut read,
            seq as usize + 1,
            Offset(seq as u64),
            line.as_bytes(),
        );
    }
    Ok(read)
}

/// The transcript's last compaction line: the lines that hold the word, newest first,
/// parsed until one is a compaction.
pub(crate) async fn last_compaction(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
) -> Result<Option<SessionEvent>> {
    let mut before = i64::MAX;
    loop {
        let lines = rows
            .lines_before(agent, name, before, CHUNK_BATCH_LINES, true)
            .await?;
        let fetched = lines.len() as i64;
        for (seq, line) in lines {
            before = seq;
            let mut read = TranscriptRead::default();
            read_line(
                &mut read,
                seq as usize + 1,
                Offset(seq as u64),
                line.as_bytes(),
            );
            if let Some(event) = read
                .events
                .pop()
                .filter(|event| event.entry.kind == "compaction")
            {
                return Ok(Some(event));
            }
        }
        if fetched < CHUNK_BATCH_LINES {
            return Ok(None);
        }
    }
}

/// What reading a transcript that does not exist from `from` gives.
pub(crate) fn nothing_at(from: Offset) -> TranscriptRead {
    TranscriptRead {
        next: from,
        ..TranscriptRead::default()
    }
}

/// An empty read of transcript `name` (at `location`) of `count` lines, from `from`;
/// an error if `from` is past its end.
pub(crate) fn read_from(
    count: i64,
    from: Offset,
    location: &Path,
    name: &str,
) -> Result<TranscriptRead> {
    let count = count as u64;
    if from.0 > count {
        return Err(Error::InvalidOffset {
            path: location.join(name),
            offset: from.0,
            len: count,
        });
    }
    Ok(TranscriptRead {
        next: Offset(count),
        ..TranscriptRead::default()
    })
}

/// Renames the transcript to its archived name (a free one); `None` if there is none.
pub(crate) async fn archive(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
    reason: ArchiveReason,
    at: DateTime<Utc>,
) -> Result<Option<PathBuf>> {
    if rows.row(agent, name).await?.is_none() {
        return Ok(None);
    }
    let base = archived_name(name, reason, at);
    let mut target = base.clone();
    let mut attempt = 1;
    while rows.row(agent, &target).await?.is_some() {
        target = format!("{base}-{attempt}");
        attempt += 1;
    }
    rows.rename(agent, name, &target).await?;
    Ok(Some(PathBuf::from(target)))
}

/// Every line of the transcript; `None` if there is none.
pub(crate) async fn export(
    rows: &mut impl TranscriptRows,
    (agent, name): (&str, &str),
) -> Result<Option<Vec<String>>> {
    if rows.row(agent, name).await?.is_none() {
        return Ok(None);
    }
    Ok(Some(
        rows.lines_from(agent, name, 0, None, None)
            .await?
            .into_iter()
            .map(|(_, line)| line)
            .collect(),
    ))
}

/// Runs a future that never waits — the rows of a SQLite transaction, which run on the
/// calling thread — to its end.
#[cfg(feature = "sqlite")]
pub(crate) fn now<F: std::future::Future>(work: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    match std::pin::pin!(work).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("synchronous transcript rows never wait"),
    }
}

/// What an append tells other processes: which transcript, which lines, and which store
/// handle wrote them (a handle does not hear its own appends twice). PostgreSQL sends it
/// as a `NOTIFY` payload, SQLite keeps it as a row of its append feed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct AppendNotice {
    #[serde(rename = "w")]
    pub writer: String,
    #[serde(rename = "a")]
    pub agent: String,
    #[serde(rename = "n")]
    pub name: String,
    #[serde(rename = "s")]
    pub session_id: String,
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(rename = "f")]
    pub first: u64,
    #[serde(rename = "l")]
    pub last: u64,
}

impl AppendNotice {
    /// The notice of `events` appended to `transcript` by `writer`; `None` for no events.
    pub fn of(
        writer: &str,
        transcript: &TranscriptRef,
        name: &str,
        events: &[SessionEvent],
    ) -> Option<AppendNotice> {
        Some(AppendNotice {
            writer: writer.to_owned(),
            agent: transcript.agent.to_string(),
            name: name.to_owned(),
            session_id: transcript.session_id.clone(),
            topic: transcript.topic.clone(),
            first: events.first()?.offset.0,
            last: events.last()?.offset.0,
        })
    }

    /// The update it announces, its lines read with `rows` — under the transcript's
    /// archived name when it was archived since (a reset right after the append);
    /// `None` when they are gone (the transcript was removed since).
    pub async fn update(
        &self,
        rows: &mut impl TranscriptRows,
        location: &Path,
    ) -> Result<Option<TranscriptUpdate>> {
        let name = match rows.row(&self.agent, &self.name).await? {
            Some(_) => self.name.clone(),
            None => match rows.archived_as(&self.agent, &self.name).await? {
                Some(archived) => archived,
                None => return Ok(None),
            },
        };
        let read = read(
            rows,
            (&self.agent, &name),
            Offset(self.first),
            location,
            None,
        )
        .await?;
        let events: Vec<SessionEvent> = read
            .events
            .into_iter()
            .filter(|event| event.offset.0 <= self.last)
            .collect();
        if events.is_empty() {
            return Ok(None);
        }
        Ok(Some(TranscriptUpdate {
            transcript: TranscriptRef {
                agent: AgentId::new(&self.agent)?,
                session_id: self.session_id.clone(),
                topic: self.topic.clone(),
                session_file: None,
            },
            path: None,
            events,
            session_key: None,
            message: None,
        }))
    }
}
