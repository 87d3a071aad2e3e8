//! What every transcript store does with lines, whatever holds them: naming, stamping
//! appended entries, reading lines back into events, and extracting the message log.

use chrono::{DateTime, Utc};

use super::{
    LogRecord, Offset, ReadIssue, SessionEvent, SessionHeader, TranscriptEntry, TranscriptRead,
    TranscriptRef,
};
use crate::error::{Error, IdKind, Result};
use crate::identity::key::AgentId;
use crate::store::json::paths;

impl TranscriptRef {
    /// The transcript's file name, which every store keys it by:
    /// `<sessionId>.jsonl`, `<sessionId>-topic-<topic>.jsonl`, or the last component of
    /// an explicit `sessionFile`.
    pub fn file_name(&self) -> Result<String> {
        match self
            .session_file
            .as_deref()
            .map(str::trim)
            .filter(|f| !f.is_empty())
        {
            Some(file) => {
                let name = std::path::Path::new(file)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("");
                validate_transcript_name(name)?;
                Ok(name.to_owned())
            }
            None => paths::transcript_file_name(&self.session_id, self.topic.as_deref()),
        }
    }
}

/// Checks a transcript name (live `….jsonl` or archived `….jsonl.reset.<ts>`): one plain
/// file-name component that names a transcript.
pub(crate) fn validate_transcript_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() || name.len() > 255 {
        Some("a transcript name has 1 to 255 bytes")
    } else if name.contains(['/', '\\']) || name.chars().any(char::is_control) {
        Some("a transcript name is one file-name component")
    } else if name.starts_with('.') || !name.contains(".jsonl") {
        Some("a transcript name is `<sessionId>….jsonl`, possibly archived")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::invalid_id(IdKind::SessionFile, name, problem)),
        None => Ok(()),
    }
}

/// The name an archived transcript gets: `<name>.<reason>.<timestamp>`, colons made
/// file-safe, as OpenClaw renames them.
pub(crate) fn archived_name(name: &str, reason: super::ArchiveReason, at: DateTime<Utc>) -> String {
    let stamp = super::iso_timestamp(at).replace(':', "-");
    format!("{name}.{}.{stamp}", reason.as_str())
}

/// The newest archived copy of transcript `name` among `names` (`<name>.reset.<ts>`,
/// `<name>.deleted.<ts>`, with a `-n` suffix when two were archived at once).
pub(crate) fn newest_archive<'a>(
    name: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let prefix = format!("{name}.");
    names
        .into_iter()
        .filter(|candidate| {
            candidate
                .strip_prefix(&prefix)
                .is_some_and(|rest| rest.starts_with("reset.") || rest.starts_with("deleted."))
        })
        .max()
        .map(str::to_owned)
}

/// When the archived transcript `name` (`….jsonl.reset.<ts>`, `….jsonl.deleted.<ts>`,
/// maybe with a `-n` suffix) was archived, epoch milliseconds; `None` for a live
/// transcript or a name whose time does not parse.
pub(crate) fn archived_at(name: &str) -> Option<u64> {
    let (_, rest) = name.split_once(".jsonl.")?;
    let stamp = rest
        .strip_prefix("reset.")
        .or_else(|| rest.strip_prefix("deleted."))?;
    // `2026-11-27T21-51-55.123Z`, perhaps followed by `-2`.
    let stamp = stamp.get(..24)?;
    let at = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H-%M-%S%.3fZ").ok()?;
    u64::try_from(at.and_utc().timestamp_millis()).ok()
}

/// The session id a transcript name belongs to (`<id>.jsonl`, `<id>-topic-….jsonl`).
pub(crate) fn session_id_of_name(name: &str) -> String {
    let stem = name.split(".jsonl").next().unwrap_or(name);
    stem.split("-topic-").next().unwrap_or(stem).to_owned()
}

/// A header as its line.
pub(crate) fn header_line(header: &SessionHeader) -> String {
    serde_json::to_string(header).expect("a header serialises")
}

/// A random 8-hex-digit entry id, as pi-coding-agent writes them.
///
/// Drawn from `fastrand`'s generator per thread, seeded once from the OS's
/// randomness, so threads and processes draw unrelated ids without a system call per
/// id. The ids only need to differ from their neighbours; they are no secret.
pub(crate) fn new_entry_id() -> String {
    format!("{:08x}", fastrand::u32(..))
}

/// Readies entries for appending after `leaf`: an entry without an id gets a new one
/// and `leaf` as its parent, an entry without a timestamp gets `now`. Returns each
/// entry's line (without newline) and the new leaf.
pub(crate) fn stamp_entries(
    entries: &mut [TranscriptEntry],
    leaf: Option<String>,
    now: DateTime<Utc>,
) -> Result<(Vec<String>, Option<String>), serde_json::Error> {
    let mut stamp = Stamp::new(leaf, now);
    let mut lines = Vec::with_capacity(entries.len());
    for entry in entries.iter_mut() {
        stamp.stamp(entry);
        lines.push(serde_json::to_string(&*entry)?);
    }
    Ok((lines, stamp.leaf()))
}

/// Readies entries for appending one by one, as [`stamp_entries`] does.
pub(crate) struct Stamp {
    leaf: Option<String>,
    /// When the entries are appended (`None`: the clock, read once an entry needs it).
    now: Option<DateTime<Utc>>,
    /// `now` formatted, once an entry needs it.
    now_iso: Option<String>,
}

/// The parent an entry carries when it has its id already (a sealed entry's id is part
/// of what it is sealed with) and its parent is the transcript's leaf when it is
/// appended: [`Stamp::stamp`] puts the leaf in its place.
pub(crate) const PARENT_ON_APPEND: &str = "\u{0}leaf";

impl Stamp {
    /// Stamps entries appended after `leaf`, at `now`.
    pub(crate) fn new(leaf: Option<String>, now: DateTime<Utc>) -> Self {
        Stamp {
            leaf,
            now: Some(now),
            now_iso: None,
        }
    }

    /// Stamps entries appended after `leaf`, now.
    pub(crate) fn now(leaf: Option<String>) -> Self {
        Stamp {
            leaf,
            now: None,
            now_iso: None,
        }
    }

    /// Gives `entry` an id hanging from the leaf (unless it has one) and a timestamp
    /// (unless it has one); it becomes the leaf.
    pub(crate) fn stamp(&mut self, entry: &mut TranscriptEntry) {
        if entry.id.is_none() {
            entry.id = Some(new_entry_id());
            entry.parent_id = self.leaf.take();
        } else if entry.parent_id.as_deref() == Some(PARENT_ON_APPEND) {
            entry.parent_id = self.leaf.take();
        }
        if entry.timestamp.is_none() {
            let now = self.now;
            let iso = self
                .now_iso
                .get_or_insert_with(|| super::iso_timestamp(now.unwrap_or_else(Utc::now)));
            entry.timestamp = Some(iso.clone());
        }
        if let Some(id) = &entry.id {
            self.leaf = Some(id.clone());
        }
    }

    /// The leaf after the entries stamped.
    pub(crate) fn leaf(self) -> Option<String> {
        self.leaf
    }
}

/// The id of the last entry among `lines` (the leaf new entries hang from).
pub(crate) fn leaf_of<'a>(lines: impl DoubleEndedIterator<Item = &'a str>) -> Option<String> {
    lines
        .rev()
        .filter_map(|line| {
            crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes()).ok()
        })
        .filter(|entry| entry.kind != "session")
        .find_map(|entry| entry.id)
}

/// Adds one complete line to `read`: line 1 is the header, other lines are events;
/// anything else is reported and skipped.
pub(crate) fn read_line(read: &mut TranscriptRead, line: usize, offset: Offset, text: &[u8]) {
    if text.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    if line == 1 {
        match serde_json::from_slice::<SessionHeader>(text) {
            Ok(header) if header.kind == "session" => {
                read.header = Some(header);
                return;
            }
            _ => read.issues.push(ReadIssue::MissingHeader),
        }
    }
    match crate::store::json_text::from_slice::<TranscriptEntry>(text) {
        Ok(entry) => read.events.push(SessionEvent {
            offset,
            line,
            entry,
        }),
        Err(error) => {
            tracing::warn!(line, %error, "invalid transcript line; skipped");
            read.issues.push(ReadIssue::InvalidLine {
                line,
                offset,
                message: error.to_string(),
            });
        }
    }
}

/// The message-log record an event carries, if it is a logged message.
pub(crate) fn log_record(
    agent: &AgentId,
    session_id: &str,
    event: &SessionEvent,
) -> Option<LogRecord> {
    let log = event.entry.log.clone()?;
    let message = event.entry.message.as_ref()?;
    let at = event
        .entry
        .timestamp
        .as_deref()
        .and_then(|ts| DateTime::parse_from_rfc3339(ts).ok())
        .map(|ts| ts.with_timezone(&Utc))
        .or_else(|| message.timestamp.map(crate::freshness::clock::from_millis))
        .unwrap_or_default();
    Some(LogRecord {
        agent: agent.clone(),
        session_id: session_id.to_owned(),
        at,
        text: message.text(),
        log,
        offset: event.offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_are_8_hex_digits_different_in_every_thread() {
        let ids = || (0..8).map(|_| new_entry_id()).collect::<Vec<_>>();
        let here = ids();
        let there = std::thread::spawn(ids).join().unwrap();
        for id in here.iter().chain(&there) {
            assert!(
                id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
                "{id}"
            );
        }
        assert_ne!(here, there, "each thread draws its own ids");
        assert_ne!(here[0], here[1]);
    }

    #[test]
    fn transcript_names() {
        let agent = AgentId::main();
        let plain = TranscriptRef::new(agent.clone(), "abc");
        assert_eq!(plain.file_name().unwrap(), "abc.jsonl");
        let mut topic = plain.clone();
        topic.topic = Some("a/b".into());
        assert_eq!(topic.file_name().unwrap(), "abc-topic-a%2Fb.jsonl");
        let mut explicit = plain.clone();
        explicit.session_file = Some("/state/agents/main/sessions/2026_abc.jsonl".into());
        assert_eq!(explicit.file_name().unwrap(), "2026_abc.jsonl");
        explicit.session_file = Some("/state/agents/main/sessions/..".into());
        assert!(explicit.file_name().is_err());

        for ok in ["abc.jsonl", "abc.jsonl.reset.2026-01-01T00-00-00.000Z"] {
            assert!(validate_transcript_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../abc.jsonl",
            "a/b.jsonl",
            ".jsonl",
            "abc.txt",
            "a\0.jsonl",
        ] {
            assert!(validate_transcript_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(session_id_of_name("abc-topic-7.jsonl.reset.x"), "abc");
        assert_eq!(
            archived_at("abc.jsonl.deleted.2026-11-27T21-51-55.123Z-2"),
            Some(1_795_816_315_123)
        );
        assert_eq!(
            archived_at("abc.jsonl.reset.2026-11-27T21-51-55.123Z"),
            Some(1_795_816_315_123)
        );
        assert_eq!(archived_at("abc.jsonl"), None);
        assert_eq!(archived_at("abc.jsonl.reset.yesterday"), None);
    }
}
