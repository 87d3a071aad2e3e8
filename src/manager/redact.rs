//! Finding one person in data the crate keeps, and taking them out of lines that stay:
//! what [`SessionManager::forget_person`](super::SessionManager::forget_person) runs on
//! shared transcripts, group history, search messages and session entries.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::context::history::{HistoryEdit, HistoryEntry};
use crate::entry::SessionEntry;
use crate::key::SessionKey;

/// What stands in for an identifier in text that stays.
const MASK: &str = "[erased]";

/// The `customType` of the line that replaces an erased transcript line.
pub(crate) const ERASED_CUSTOM_TYPE: &str = "agent-sessions.erased";

/// One person as the data names them: every id they are known by.
#[derive(Debug, Clone, Default)]
pub(crate) struct PersonIds {
    /// The ids, lower-cased for matching (`jane`, `+15550100`, `telegram:42`, `42`).
    ids: BTreeSet<String>,
}

impl PersonIds {
    /// Adds `id` (trimmed; blank ids are ignored), and for a channel-scoped id
    /// (`telegram:42`) its bare form too.
    pub(crate) fn add(&mut self, id: &str) {
        let id = id.trim();
        if id.is_empty() {
            return;
        }
        self.ids.insert(id.to_lowercase());
        if let Some((_, bare)) = id.split_once(':') {
            // `staff:17` stays whole too; `telegram:42` is also `42`.
            if !bare.is_empty() && !bare.contains(':') && bare.len() >= 2 {
                self.ids.insert(bare.to_lowercase());
            }
        }
    }

    /// Every id, lower-cased.
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// Whether `id` is one of the person's ids.
    pub(crate) fn is(&self, id: &str) -> bool {
        self.ids.contains(&id.trim().to_lowercase())
    }

    /// Whether any of `ids` is.
    pub(crate) fn any<'a>(&self, mut ids: impl Iterator<Item = &'a String>) -> bool {
        ids.any(|id| self.is(id))
    }

    /// The ids, for searching stored bytes (both as stored and as written by people).
    pub(crate) fn needles(&self) -> Vec<String> {
        self.ids
            .iter()
            .filter(|id| id.len() >= 3)
            .cloned()
            .collect()
    }

    /// Whether the session under `key` with `entry` is this person's own: not a group
    /// or channel (those are shared), and with them as its person, one of its raw ids,
    /// or the peer of its key.
    pub(crate) fn owns(&self, key: &SessionKey, entry: &SessionEntry) -> bool {
        if key.peer_kind().is_some_and(|kind| kind.is_group()) {
            return false;
        }
        entry.person_id.as_deref().is_some_and(|p| self.is(p))
            || entry
                .raw_person_ids
                .as_ref()
                .is_some_and(|raw| self.any(raw.iter()))
            || direct_peer(key).is_some_and(|(_, peer)| self.is(&peer))
    }

    /// `text` with every id of the person (three characters or more, matched without
    /// regard to case) replaced by a mask no longer than it, so a line never grows.
    pub(crate) fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for id in self.needles() {
            out = replace_ignoring_case(&out, &id);
        }
        out
    }

    /// Whether `text` names the person.
    pub(crate) fn named_in(&self, text: &str) -> bool {
        let lower = text.to_lowercase();
        self.needles().iter().any(|id| lower.contains(id.as_str()))
    }

    /// What to do with one entry of group history: the person's go, others' that
    /// name them are masked.
    pub(crate) fn history_edit(&self, entry: &HistoryEntry) -> HistoryEdit {
        if entry.sender_id.as_deref().is_some_and(|id| self.is(id)) {
            return HistoryEdit::Remove;
        }
        if self.named_in(&entry.body) || self.named_in(&entry.sender) {
            return HistoryEdit::Replace(HistoryEntry {
                sender: self.mask(&entry.sender),
                body: self.mask(&entry.body),
                ..entry.clone()
            });
        }
        HistoryEdit::Keep
    }

    /// A session entry that is not theirs, without them: out of its participants and
    /// raw ids, their ids masked in its text. `None` when it does not name them.
    pub(crate) fn redact_entry(&self, entry: &SessionEntry) -> Option<SessionEntry> {
        let mut value = serde_json::to_value(entry).ok()?;
        let text = value.to_string();
        if !self.named_in(&text) {
            return None;
        }
        let took_part = entry
            .participants
            .as_ref()
            .is_some_and(|all| self.any(all.iter()));
        for field in ["participants", "rawPersonIds"] {
            if let Some(Value::Array(ids)) = value.get_mut(field) {
                ids.retain(|id| !id.as_str().is_some_and(|id| self.is(id)));
            }
        }
        if took_part {
            // Texts derived from what everyone said, theirs too: made again by the
            // next turn.
            if let Value::Object(fields) = &mut value {
                fields.remove("lastMessagePreview");
                fields.remove("contextSummary");
            }
        }
        self.mask_value(&mut value);
        serde_json::from_value(value).ok()
    }

    fn mask_value(&self, value: &mut Value) {
        match value {
            Value::String(text) if self.named_in(text) => *text = self.mask(text),
            Value::Array(items) => items.iter_mut().for_each(|v| self.mask_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.mask_value(v)),
            _ => {}
        }
    }
}

/// The peer a direct chat's key names, with the channel when the key has one:
/// `agent:main:telegram:direct:42` is `(Some("telegram"), "42")`,
/// `agent:main:dm:jane` (one per person) is `(None, "jane")`.
pub(crate) fn direct_peer(key: &SessionKey) -> Option<(Option<String>, String)> {
    let segments: Vec<&str> = key.rest()?.split(':').collect();
    let at = segments
        .iter()
        .position(|s| matches!(*s, "direct" | "dm"))?;
    let peer = segments[at + 1..].join(":");
    if peer.is_empty() {
        return None;
    }
    let channel = (at > 0).then(|| segments[0].to_owned());
    Some((channel, peer))
}

/// `text` with each occurrence of `id` (lower-case) replaced, whatever its case.
fn replace_ignoring_case(text: &str, id: &str) -> String {
    let mask = if id.len() >= MASK.len() {
        MASK.to_owned()
    } else {
        "*".repeat(id.len())
    };
    let lower = text.to_lowercase();
    // Lower-casing may change byte lengths: then only exact-case matches are masked.
    if lower.len() != text.len() {
        return text.replace(id, &mask);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(id) {
        let start = at + found;
        out.push_str(&text[at..start]);
        out.push_str(&mask);
        at = start + id.len();
    }
    out.push_str(&text[at..]);
    out
}

/// What happens to one transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineFate {
    /// Unchanged.
    Keep,
    /// Replaced by this text, the same length.
    Replace(String),
}

/// Judges the lines of one shared transcript (not the person's own, which goes whole):
/// the person's own messages become erased markers, others' lines lose the person's
/// chatter and ids, and a compaction summary written after a line of theirs (it may
/// repeat what they said) becomes an erased marker too.
pub(crate) struct TranscriptRedaction<'p> {
    person: &'p PersonIds,
    /// The labels the person's chatter was shown under, as found.
    labels: Vec<String>,
    /// Whether a line of the person's came before (so a later summary may hold it).
    seen_person: bool,
}

impl<'p> TranscriptRedaction<'p> {
    pub(crate) fn new(person: &'p PersonIds) -> Self {
        TranscriptRedaction {
            person,
            labels: Vec::new(),
            seen_person: false,
        }
    }

    /// The labels the person's chatter was shown under in the lines judged.
    pub(crate) fn labels(self) -> Vec<String> {
        self.labels
    }

    /// The fate of line `index` (0, the header, always stays).
    pub(crate) fn judge(&mut self, index: usize, line: &str) -> LineFate {
        if index == 0 || line.trim().is_empty() {
            return LineFate::Keep;
        }
        let Ok(Value::Object(mut entry)) = serde_json::from_str::<Value>(line) else {
            // A torn or garbage line that names them is blanked (it stays garbage).
            return if self.person.named_in(line) {
                self.seen_person = true;
                LineFate::Replace(" ".repeat(line.len()))
            } else {
                LineFate::Keep
            };
        };
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        let theirs = kind == "message" && self.written_by_person(&entry);
        let summary = matches!(kind, "compaction" | "branch_summary");
        if theirs || (summary && self.seen_person) {
            self.seen_person |= theirs;
            return LineFate::Replace(erased_line(&entry, line.len()));
        }
        let before = Value::Object(entry.clone());
        let labels = self.take_chatter_labels(&mut entry);
        if !labels.is_empty() {
            self.seen_person = true;
            for label in &labels {
                if !self.labels.contains(label) {
                    self.labels.push(label.clone());
                }
            }
        }
        let mut value = Value::Object(entry);
        self.redact_strings(&mut value, &labels);
        if value == before {
            return LineFate::Keep;
        }
        let text = value.to_string();
        match padded(text, line.len()) {
            Some(text) => LineFate::Replace(text),
            None => match value {
                Value::Object(entry) => LineFate::Replace(erased_line(&entry, line.len())),
                _ => LineFate::Replace(" ".repeat(line.len())),
            },
        }
    }

    fn written_by_person(&self, entry: &Map<String, Value>) -> bool {
        let Some(log) = entry.get("log").and_then(Value::as_object) else {
            return false;
        };
        ["personId", "rawPersonId"]
            .iter()
            .filter_map(|field| log.get(*field).and_then(Value::as_str))
            .any(|id| self.person.is(id))
    }

    /// The labels under which the line's group history shows the person, taking their
    /// records out of the line's `log.chatter`.
    fn take_chatter_labels(&self, entry: &mut Map<String, Value>) -> Vec<String> {
        let Some(Value::Array(chatter)) = entry
            .get_mut("log")
            .and_then(Value::as_object_mut)
            .and_then(|log| log.get_mut("chatter"))
        else {
            return Vec::new();
        };
        let mut labels = Vec::new();
        chatter.retain(|record| {
            let id = record.get("senderId").and_then(Value::as_str).unwrap_or("");
            if self.person.is(id) {
                if let Some(label) = record.get("sender").and_then(Value::as_str) {
                    labels.push(label.to_owned());
                }
                false
            } else {
                true
            }
        });
        labels
    }

    fn redact_strings(&self, value: &mut Value, labels: &[String]) {
        match value {
            Value::String(text) => {
                let lines = without_chatter_of(text, labels);
                let masked = if self.person.named_in(&lines) {
                    self.person.mask(&lines)
                } else {
                    lines
                };
                if masked != *text {
                    *text = masked;
                }
            }
            Value::Array(items) => items
                .iter_mut()
                .for_each(|v| self.redact_strings(v, labels)),
            Value::Object(map) => map
                .values_mut()
                .for_each(|v| self.redact_strings(v, labels)),
            _ => {}
        }
    }
}

/// The group-history lines of `text` whose sender is shown as one of `labels`.
pub(crate) fn chatter_of(text: &str, labels: &[String]) -> Vec<String> {
    text.split('\n')
        .filter(|line| {
            line.strip_prefix('[')
                .and_then(|rest| rest.find("] ").map(|close| &rest[close + 2..]))
                .is_some_and(|after| labels.iter().any(|l| after.starts_with(&format!("{l}: "))))
        })
        .map(str::to_owned)
        .collect()
}

/// `text` with the group-history lines of senders shown as one of `labels`
/// (`[WhatsApp … 2026-01-13T07:45Z] Alice: …`) cut to their envelope and a mask.
pub(crate) fn without_chatter_of(text: &str, labels: &[String]) -> String {
    if labels.is_empty() {
        return text.to_owned();
    }
    let mut changed = false;
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| {
            if let Some(rest) = line.strip_prefix('[') {
                if let Some(close) = rest.find("] ") {
                    let after = &rest[close + 2..];
                    for label in labels {
                        if after.starts_with(&format!("{label}: ")) {
                            changed = true;
                            return format!("[{}] {MASK}", &rest[..close]);
                        }
                    }
                }
            }
            line.to_owned()
        })
        .collect();
    if changed {
        lines.join("\n")
    } else {
        text.to_owned()
    }
}

/// The line that stands where an erased line was: a `custom` entry with the erased
/// line's id, parent and time (so the conversation's tree stays whole), padded with
/// spaces to `length` bytes, so no other line moves.
fn erased_line(entry: &Map<String, Value>, length: usize) -> String {
    let mut marker = Map::new();
    marker.insert("type".into(), Value::from("custom"));
    marker.insert("customType".into(), Value::from(ERASED_CUSTOM_TYPE));
    for field in ["id", "parentId", "timestamp"] {
        if let Some(value) = entry.get(field) {
            marker.insert(field.into(), value.clone());
        }
    }
    let full = Value::Object(marker).to_string();
    padded(full, length)
        .or_else(|| {
            padded(
                format!(r#"{{"type":"custom","customType":"{ERASED_CUSTOM_TYPE}"}}"#),
                length,
            )
        })
        .unwrap_or_else(|| " ".repeat(length))
}

/// `text` followed by spaces up to `length` bytes, if it fits.
fn padded(mut text: String, length: usize) -> Option<String> {
    if text.len() > length {
        return None;
    }
    let pad = length - text.len();
    text.extend(std::iter::repeat_n(' ', pad));
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jane() -> PersonIds {
        let mut ids = PersonIds::default();
        ids.add("jane");
        ids.add("telegram:4242");
        ids.add("+15550100");
        ids
    }

    #[test]
    fn a_persons_own_message_becomes_an_erased_marker_of_the_same_length() {
        let line = r#"{"type":"message","id":"a1b2c3d4","parentId":"00aa11bb","timestamp":"2026-02-06T10:00:01.000Z","message":{"role":"user","content":"my secret plan","timestamp":1770372001000},"log":{"personId":"jane"}}"#;
        let jane = jane();
        let mut redaction = TranscriptRedaction::new(&jane);
        let LineFate::Replace(new) = redaction.judge(3, line) else {
            panic!("a line of Jane's is replaced")
        };
        assert_eq!(new.len(), line.len());
        assert!(!new.contains("secret"));
        let marker: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(marker["customType"], ERASED_CUSTOM_TYPE);
        assert_eq!(marker["id"], "a1b2c3d4", "the tree stays whole");
        assert_eq!(marker["parentId"], "00aa11bb");
    }

    #[test]
    fn others_lines_lose_the_persons_chatter_and_ids_and_nothing_else() {
        let text = "[Chat messages since your last reply - for context]\n[WhatsApp g 2026-01-13T07:45Z] Jane D: meet at the docks\n[WhatsApp g 2026-01-13T07:46Z] Bob: ok\n\n[Current message - respond to this]\n[WhatsApp g 2026-01-13T07:47Z] Bob: @bot call +15550100";
        let line = serde_json::json!({
            "type": "message", "id": "b2c3d4e5", "parentId": null,
            "timestamp": "2026-02-06T10:00:02.000Z",
            "message": {"role": "user", "content": text},
            "log": {"personId": "bob", "chatter": [
                {"sender": "Jane D", "senderId": "jane"},
                {"sender": "Bob", "senderId": "bob"}
            ]}
        })
        .to_string();
        let jane = jane();
        let mut redaction = TranscriptRedaction::new(&jane);
        let LineFate::Replace(new) = redaction.judge(2, &line) else {
            panic!("Bob's line names Jane")
        };
        assert_eq!(new.len(), line.len());
        assert!(!new.contains("docks") && !new.contains("15550100") && !new.contains("Jane"));
        assert!(new.contains("Bob: ok"), "Bob's words stay");
        let value: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(value["log"]["chatter"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn lines_that_do_not_name_the_person_stay_byte_for_byte() {
        let line = r#"{"type":"message","id":"c3d4e5f6","parentId":null,"timestamp":"2026-02-06T10:00:02.000Z","message":{"role":"user","content":"hello"},"log":{"personId":"bob"}}"#;
        let jane = jane();
        let mut redaction = TranscriptRedaction::new(&jane);
        assert_eq!(redaction.judge(1, line), LineFate::Keep);
        assert_eq!(redaction.judge(0, "{\"type\":\"session\"}"), LineFate::Keep);
    }

    #[test]
    fn a_summary_after_the_persons_line_goes_and_one_before_stays() {
        let summary = r#"{"type":"compaction","id":"d4e5f6a7","parentId":null,"timestamp":"2026-02-06T10:00:00.000Z","summary":"they talked"}"#;
        let theirs = r#"{"type":"message","id":"e5f6a7b8","parentId":null,"timestamp":"2026-02-06T10:00:01.000Z","message":{"role":"user","content":"x"},"log":{"personId":"+15550100"}}"#;
        let jane = jane();
        let mut redaction = TranscriptRedaction::new(&jane);
        assert_eq!(redaction.judge(1, summary), LineFate::Keep);
        assert!(matches!(redaction.judge(2, theirs), LineFate::Replace(_)));
        assert!(matches!(redaction.judge(3, summary), LineFate::Replace(_)));
    }

    #[test]
    fn direct_keys_name_their_peer() {
        let peer = |key: &str| direct_peer(&SessionKey::parse(key).unwrap());
        assert_eq!(
            peer("agent:main:telegram:direct:42"),
            Some((Some("telegram".into()), "42".into()))
        );
        assert_eq!(peer("agent:main:dm:jane"), Some((None, "jane".into())));
        assert_eq!(peer("agent:main:whatsapp:group:120363@g.us"), None);
        assert_eq!(peer("agent:main:main"), None);
    }

    #[test]
    fn masks_never_grow_text_and_ignore_case() {
        let ids = jane();
        assert_eq!(ids.mask("Ask JANE or +15550100"), "Ask **** or [erased]");
        assert!(ids.is("Telegram:4242") && ids.is("4242"));
        assert!(!ids.is("bob"));
    }

    #[test]
    fn group_history_of_the_person_goes_and_mentions_are_masked() {
        let ids = jane();
        let theirs = HistoryEntry {
            sender: "Jane".into(),
            body: "hi".into(),
            timestamp: None,
            message_id: None,
            sender_id: Some("jane".into()),
        };
        assert_eq!(ids.history_edit(&theirs), HistoryEdit::Remove);
        let mention = HistoryEntry {
            sender: "Bob".into(),
            body: "ping +15550100".into(),
            sender_id: Some("bob".into()),
            ..theirs.clone()
        };
        let HistoryEdit::Replace(masked) = ids.history_edit(&mention) else {
            panic!("a mention is masked")
        };
        assert_eq!(masked.body, "ping [erased]");
        let other = HistoryEntry {
            body: "lunch?".into(),
            ..mention
        };
        assert_eq!(ids.history_edit(&other), HistoryEdit::Keep);
    }
}
