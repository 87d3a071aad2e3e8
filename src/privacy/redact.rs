//! Finding one person in data the crate keeps, and taking them out of lines that stay:
//! what [`SessionManager::forget_person`](crate::SessionManager::forget_person) runs on
//! shared transcripts, group chatter, search messages and session entries.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::identity::key::SessionKey;
use crate::inbound::chatter::{ChatterEdit, ChatterEntry};
use crate::store::entry::SessionEntry;

/// What stands in for an identifier in text that stays.
const MASK: &str = "[erased]";

/// The shortest id searched for in free text: a shorter one (`42`) would match numbers
/// people write for other reasons. Ids are matched whole (not inside a longer word or
/// number) and only in what people wrote, never in keys, times or routing fields.
const MIN_TEXT_ID: usize = 6;

/// The `customType` of the line that replaces an erased transcript line.
pub(crate) const ERASED_CUSTOM_TYPE: &str = "agent-sessions.erased";

/// One person as the data names them: every id they are known by.
///
/// Ids are compared whole. An id with a channel (`telegram:42`) matches a sender only
/// on that channel: `42` on WhatsApp is someone else.
#[derive(Debug, Clone, Default)]
pub(crate) struct PersonIds {
    /// The ids, lower-cased (`jane`, `staff:17`, `telegram:42`, `sms:+15550100`).
    ids: BTreeSet<String>,
    /// Session keys of theirs, for finding copies of their entries.
    keys: BTreeSet<String>,
    /// Their canonical ids that identity links make of senders: what a direct key
    /// names as its peer, on any channel, once a sender is linked.
    linked: BTreeSet<String>,
}

impl PersonIds {
    /// Adds `id` (trimmed; blank ids are ignored).
    pub(crate) fn add(&mut self, id: &str) {
        let id = id.trim();
        if !id.is_empty() {
            self.ids.insert(id.to_lowercase());
        }
    }

    /// Records `id` as a canonical person the identity links make of senders.
    pub(crate) fn add_linked(&mut self, id: &str) {
        self.add(id);
        self.linked.insert(id.trim().to_lowercase());
    }

    /// Records `key` as one of their sessions' keys.
    pub(crate) fn add_key(&mut self, key: &SessionKey) {
        self.keys.insert(key.to_string());
    }

    /// Every id, lower-cased.
    pub(crate) fn all(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// Whether `id` is one of the person's ids.
    pub(crate) fn is(&self, id: &str) -> bool {
        self.ids.contains(&id.trim().to_lowercase())
    }

    /// Whether `id`, seen on `channel`, is one of theirs: the id itself, or the id
    /// scoped by the channel (`telegram` and `42` as `telegram:42`).
    pub(crate) fn is_on(&self, channel: Option<&str>, id: &str) -> bool {
        self.is(id)
            || channel.is_some_and(|channel| {
                self.is(&format!("{}:{}", channel.trim().to_lowercase(), id.trim()))
            })
    }

    /// Whether a message logged with `person` as its person, on `channel`, in the
    /// session `session_key`, is theirs. In a direct chat the logged person is the
    /// chat's peer when no person was named: then the peer must be theirs on that
    /// channel (the WhatsApp sender 42 is not the person `42`); a person named there is
    /// matched as an id. Elsewhere (groups) the logged person is matched as an id, or as
    /// a sender on the channel.
    pub(crate) fn wrote(
        &self,
        session_key: Option<&str>,
        channel: Option<&str>,
        person: &str,
    ) -> bool {
        let key = session_key.and_then(|key| SessionKey::parse(key).ok());
        match key.as_ref().and_then(direct_peer) {
            Some((peer_channel, peer)) if peer.eq_ignore_ascii_case(person.trim()) => {
                self.owns_peer(peer_channel.as_deref().or(channel), &peer)
            }
            Some(_) => self.is(person),
            None => self.is_on(channel, person),
        }
    }

    /// Whether the peer of a direct key, on `channel`, is them.
    fn owns_peer(&self, channel: Option<&str>, peer: &str) -> bool {
        match channel {
            // A peer on a channel is a sender there: a person id `42` is not the
            // Telegram sender 42, unless identity links made that sender them.
            Some(channel) => {
                self.is(&format!("{}:{peer}", channel.trim().to_lowercase()))
                    || self.linked.contains(&peer.to_lowercase())
            }
            None => self.is(peer),
        }
    }

    /// Whether any of `ids` is.
    pub(crate) fn any<'a>(&self, mut ids: impl Iterator<Item = &'a String>) -> bool {
        ids.any(|id| self.is(id))
    }

    /// The forms of their ids people write in text (`+15550100` of `sms:+15550100`),
    /// long enough to be searched for.
    fn text_ids(&self) -> Vec<String> {
        let mut found: Vec<String> = self
            .ids
            .iter()
            .flat_map(|id| {
                let bare = id.rsplit_once(':').map(|(_, bare)| bare.to_owned());
                std::iter::once(id.clone()).chain(bare)
            })
            .filter(|id| id.chars().count() >= MIN_TEXT_ID)
            .collect();
        found.sort();
        found.dedup();
        found
    }

    /// What finds a copy of their data in a file or row: their sessions' keys, and
    /// their ids as [`mask`](Self::mask) finds them.
    pub(crate) fn needles(&self) -> Vec<String> {
        let mut needles = self.text_ids();
        needles.extend(self.keys.iter().cloned());
        needles
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
            || direct_peer(key)
                .is_some_and(|(channel, peer)| self.owns_peer(channel.as_deref(), &peer))
    }

    /// `text` with every id of theirs people write (see [`MIN_TEXT_ID`]) replaced by a
    /// mask no longer than it, so a line never grows.
    pub(crate) fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for id in self.text_ids() {
            out = replace_whole(&out, &id);
        }
        out
    }

    /// Whether `text` names them (by an id [`mask`](Self::mask) would replace).
    pub(crate) fn named_in(&self, text: &str) -> bool {
        self.text_ids()
            .iter()
            .any(|id| !whole_matches(&text.to_lowercase(), id).is_empty())
    }

    /// What to do with one entry of the group chatter `group`: theirs go (by the id
    /// recorded with it, on the group's channel), others' that name them are masked.
    pub(crate) fn history_edit(&self, group: &str, entry: &ChatterEntry) -> ChatterEdit {
        let channel = group.split(':').nth(2);
        if entry
            .sender_id
            .as_deref()
            .is_some_and(|id| self.is_on(channel, id))
        {
            return ChatterEdit::Remove;
        }
        if self.named_in(&entry.body) {
            return ChatterEdit::Replace(ChatterEntry {
                body: self.mask(&entry.body),
                ..entry.clone()
            });
        }
        ChatterEdit::Keep
    }

    /// A session entry that is not theirs, without them: out of its participants and
    /// raw ids; where they took part (or its preview names them), without the texts
    /// derived from what everyone said (`lastMessagePreview`, `contextSummary`, made
    /// again by the next turn). Keys, routes and every other field stay. `None` when
    /// nothing changes.
    pub(crate) fn redact_entry(&self, entry: &SessionEntry) -> Option<SessionEntry> {
        let mut redacted = entry.clone();
        let channel = entry.channel_name().map(str::to_owned);
        let theirs = |id: &String| self.is_on(channel.as_deref(), id);
        let took_part = entry
            .participants
            .as_ref()
            .is_some_and(|all| all.iter().any(theirs));
        if let Some(all) = redacted.participants.as_mut() {
            all.retain(|id| !theirs(id));
        }
        if let Some(all) = redacted.raw_person_ids.as_mut() {
            all.retain(|id| !theirs(id));
        }
        let named = |text: &Option<String>| text.as_deref().is_some_and(|t| self.named_in(t));
        let window_summary = entry.window_start.as_ref().and_then(|w| w.summary.clone());
        if took_part
            || named(&entry.last_message_preview)
            || named(&entry.context_summary)
            || named(&window_summary)
        {
            redacted.last_message_preview = None;
            redacted.context_summary = None;
            redacted.window_start = None;
        }
        (redacted != *entry).then_some(redacted)
    }
}

/// The byte ranges where `id` (lower-case) occurs whole in `lower` (lower-cased
/// text): not inside a longer word or number.
fn whole_matches(lower: &str, id: &str) -> Vec<(usize, usize)> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = lower[from..].find(id) {
        let start = from + at;
        let end = start + id.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        // An id's own edge that is not a word character (`+1555…`) needs no boundary.
        let open = !id.starts_with(word) || before.is_none_or(|c| !word(c));
        let close = !id.ends_with(word) || after.is_none_or(|c| !word(c));
        if open && close {
            found.push((start, end));
        }
        from = start + id.len().max(1);
    }
    found
}

/// `text` with each whole occurrence of `id` (lower-case) replaced, whatever its case.
fn replace_whole(text: &str, id: &str) -> String {
    let mask = if id.len() >= MASK.len() {
        MASK.to_owned()
    } else {
        "*".repeat(id.len())
    };
    let lower = text.to_lowercase();
    // Lower-casing may change byte lengths: then only exact-case matches are masked.
    let haystack = if lower.len() == text.len() {
        lower
    } else {
        text.to_owned()
    };
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in whole_matches(&haystack, id) {
        out.push_str(&text[at..start]);
        out.push_str(&mask);
        at = end;
    }
    out.push_str(&text[at..]);
    out
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
    /// Whether the last message someone wrote was the person's: the agent's lines
    /// until the next one (its reply, its tool calls) answer only them.
    answering_person: bool,
}

impl<'p> TranscriptRedaction<'p> {
    pub(crate) fn new(person: &'p PersonIds) -> Self {
        TranscriptRedaction {
            person,
            labels: Vec::new(),
            seen_person: false,
            answering_person: false,
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
        let role = entry
            .get("message")
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let theirs = kind == "message" && self.written_by_person(&entry);
        let summary = matches!(kind, "compaction" | "branch_summary");
        let reply = kind == "message" && role != "user" && self.answering_person;
        if kind == "message" && role == "user" {
            self.answering_person = theirs;
        }
        if theirs {
            self.seen_person = true;
            // What others said, shown to the model with the person's message, is
            // theirs: it stays, the person's words go.
            if let Some(kept) = self.others_chatter_kept(&entry, line.len()) {
                return LineFate::Replace(kept);
            }
            return LineFate::Replace(erased_line(&entry, line.len()));
        }
        if reply || (summary && self.seen_person) {
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
        written_by(self.person, entry)
    }

    /// A line of the person's own that carries other people's chatter (the group's
    /// messages shown to the model with theirs), rewritten to `length` bytes with that
    /// chatter and nothing of the person: their message masked, their chatter cut, their
    /// ids out of the log. `None` when it carries no one else's chatter, or when the
    /// rewrite does not fit.
    fn others_chatter_kept(&self, entry: &Map<String, Value>, length: usize) -> Option<String> {
        let mut entry = entry.clone();
        let labels = self.take_chatter_labels(&mut entry);
        let others = entry
            .get("log")
            .and_then(|log| log.get("chatter"))
            .and_then(Value::as_array)
            .is_some_and(|records| !records.is_empty());
        if !others {
            return None;
        }
        let text = entry
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)?;
        let content = others_chatter_in(self.person, text, &labels)?;
        *entry.get_mut("message")?.get_mut("content")? = Value::from(content);
        if let Some(log) = entry.get_mut("log").and_then(Value::as_object_mut) {
            // Who they are, and the files they sent (names, captions, ids).
            for field in [
                "personId",
                "rawPersonId",
                "senderName",
                "senderId",
                "sender",
                "attachments",
            ] {
                log.remove(field);
            }
        }
        padded(Value::Object(entry).to_string(), length)
    }

    /// The labels under which the line's group chatter shows the person, taking their
    /// records out of the line's `log.chatter`.
    fn take_chatter_labels(&self, entry: &mut Map<String, Value>) -> Vec<String> {
        let channel = entry_channel(entry);
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
            if !id.is_empty() && self.person.is_on(channel.as_deref(), id) {
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

    /// Takes the person out of what people wrote in the line: the text of its
    /// message (a string, or the text of its blocks). Keys, times and every other field
    /// stay as they are.
    fn redact_strings(&self, value: &mut Value, labels: &[String]) {
        let redact = |text: &mut String| {
            let cut = without_chatter_of(text, labels);
            let masked = self.person.mask(&cut);
            if masked != *text {
                *text = masked;
            }
        };
        match value.pointer_mut("/message/content") {
            Some(Value::String(text)) => redact(text),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    if let Some(Value::String(text)) = block.get_mut("text") {
                        redact(text);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The channel a line's log names.
fn entry_channel(entry: &Map<String, Value>) -> Option<String> {
    entry
        .get("log")
        .and_then(|log| log.get("channel"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The text that stands for a message of the person's that carried others' chatter:
/// the chatter block without the person's lines and ids, their own message masked.
/// `None` when the text carries no chatter block, or only the person's (`labels`).
pub(crate) fn others_chatter_in(
    person: &PersonIds,
    text: &str,
    labels: &[String],
) -> Option<String> {
    use crate::inbound::pipeline::{CURRENT_MESSAGE_MARKER, HISTORY_CONTEXT_MARKER};
    let block = text
        .strip_prefix(HISTORY_CONTEXT_MARKER)?
        .split(&format!("\n\n{CURRENT_MESSAGE_MARKER}"))
        .next()?
        .trim_start_matches('\n');
    let others = block.split('\n').any(|line| {
        !line.is_empty() && labels.iter().all(|label| spoken_by(line, label).is_none())
    });
    if !others {
        return None;
    }
    let block = person.mask(&without_chatter_of(block, labels));
    Some(format!(
        "{HISTORY_CONTEXT_MARKER}\n{block}\n\n{CURRENT_MESSAGE_MARKER}\n{MASK}"
    ))
}

/// Whether the message line `entry` was written by the person (its log's person, on
/// its channel).
pub(crate) fn written_by(person: &PersonIds, entry: &Map<String, Value>) -> bool {
    let Some(log) = entry.get("log").and_then(Value::as_object) else {
        return false;
    };
    let channel = entry_channel(entry);
    let key = log.get("sessionKey").and_then(Value::as_str);
    ["personId", "rawPersonId"]
        .iter()
        .filter_map(|field| log.get(*field).and_then(Value::as_str))
        .any(|id| person.wrote(key, channel.as_deref(), id))
}

/// Where `label` starts speaking in `line` of a chatter block, if it does:
/// `[<envelope>] <label>: …`, or `<label>: …` without an envelope.
fn spoken_by(line: &str, label: &str) -> Option<usize> {
    let said = format!("{label}: ");
    if let Some(rest) = line.strip_prefix('[') {
        if let Some(close) = rest.find("] ") {
            if rest[close + 2..].starts_with(&said) {
                return Some(1 + close + 2);
            }
        }
    }
    line.starts_with(&said).then_some(0)
}

/// The group-history lines of `text` whose sender is shown as one of `labels`.
pub(crate) fn chatter_of(text: &str, labels: &[String]) -> Vec<String> {
    text.split('\n')
        .filter(|line| labels.iter().any(|label| spoken_by(line, label).is_some()))
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
        .map(
            |line| match labels.iter().find_map(|label| spoken_by(line, label)) {
                Some(at) => {
                    changed = true;
                    format!("{}{MASK}", &line[..at])
                }
                None => line.to_owned(),
            },
        )
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
pub(crate) fn erased_line(entry: &Map<String, Value>, length: usize) -> String {
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
    fn others_chatter_carried_by_the_persons_line_stays_and_her_words_go() {
        let text = "[Chat messages since your last reply - for context]\n[WhatsApp g 2026-01-13T07:45Z] Bob: the boat leaves at nine\n[WhatsApp g 2026-01-13T07:46Z] Jane D: my cabin is 14\n\n[Current message - respond to this]\n[WhatsApp g 2026-01-13T07:47Z] Jane D: @bot book me a taxi from +15550100";
        let line = serde_json::json!({
            "type": "message", "id": "f6a7b8c9", "parentId": null,
            "timestamp": "2026-02-06T10:00:03.000Z",
            "message": {"role": "user", "content": text},
            "log": {"personId": "jane", "direction": "inbound", "chatter": [
                {"sender": "Bob", "senderId": "bob"},
                {"sender": "Jane D", "senderId": "jane"}
            ]}
        })
        .to_string();
        let reply = r#"{"type":"message","id":"a7b8c9d0","parentId":"f6a7b8c9","timestamp":"2026-02-06T10:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Taxi booked to cabin 14."}]},"log":{"direction":"outbound"}}"#;
        let bobs = r#"{"type":"message","id":"b8c9d0e1","parentId":"a7b8c9d0","timestamp":"2026-02-06T10:00:05.000Z","message":{"role":"user","content":"and me?"},"log":{"personId":"bob"}}"#;
        let answer = r#"{"type":"message","id":"c9d0e1f2","parentId":"b8c9d0e1","timestamp":"2026-02-06T10:00:06.000Z","message":{"role":"assistant","content":"Yes, Bob."},"log":{"direction":"outbound"}}"#;
        let jane = jane();
        let mut redaction = TranscriptRedaction::new(&jane);
        let LineFate::Replace(new) = redaction.judge(1, &line) else {
            panic!("Jane's line is rewritten")
        };
        assert_eq!(new.len(), line.len());
        assert!(
            new.contains("Bob: the boat leaves at nine"),
            "Bob's chatter stays: {new}"
        );
        for gone in ["cabin", "taxi", "15550100", "jane", "Jane"] {
            assert!(!new.contains(gone), "{gone} in {new}");
        }
        let value: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(value["id"], "f6a7b8c9", "the tree stays whole");
        assert_eq!(value["log"]["chatter"].as_array().unwrap().len(), 1);
        // The agent's reply to her goes with her line; Bob's next exchange stays.
        let LineFate::Replace(erased) = redaction.judge(2, reply) else {
            panic!("the reply to Jane is erased")
        };
        assert!(!erased.contains("Taxi") && erased.len() == reply.len());
        assert_eq!(redaction.judge(3, bobs), LineFate::Keep);
        assert_eq!(redaction.judge(4, answer), LineFate::Keep);
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
    fn masks_never_grow_text_and_match_whole_ids_only() {
        let ids = jane();
        assert_eq!(
            ids.mask("Call +15550100 or +155501001"),
            "Call [erased] or +155501001"
        );
        assert_eq!(
            ids.mask("TELEGRAM:4242 wrote; telegram:42420 did not"),
            "[erased] wrote; telegram:42420 did not"
        );
        // Short ids are too common in text to be masked there.
        assert_eq!(ids.mask("jane is 4242 days old"), "jane is 4242 days old");
        assert!(ids.is("Telegram:4242") && ids.is_on(Some("telegram"), "4242"));
        assert!(!ids.is("4242"), "42 on another channel is someone else");
        assert!(!ids.is_on(Some("whatsapp"), "4242"));
        assert!(!ids.is("bob"));
    }

    #[test]
    fn keys_times_and_routes_of_others_lines_are_never_touched() {
        let mut ids = PersonIds::default();
        ids.add("telegram:2026");
        ids.add("sms:+15550100777");
        let line = serde_json::json!({
            "type": "message", "id": "a1b2c3d4", "parentId": null,
            "timestamp": "2026-02-06T10:00:01.000Z",
            "message": {"role": "user", "content": "meet in 2026, says +15550100777"},
            "log": {"personId": "bob", "channel": "sms", "sessionKey": "agent:main:sms:direct:+15550100777"}
        })
        .to_string();
        let mut redaction = TranscriptRedaction::new(&ids);
        let LineFate::Replace(new) = redaction.judge(1, &line) else {
            panic!("the number in the text is masked")
        };
        let value: Value = serde_json::from_str(&new).unwrap();
        assert_eq!(value["message"]["content"], "meet in 2026, says [erased]");
        assert_eq!(value["timestamp"], "2026-02-06T10:00:01.000Z");
        assert_eq!(
            value["log"]["sessionKey"],
            "agent:main:sms:direct:+15550100777"
        );
    }

    #[test]
    fn group_history_of_the_person_goes_and_mentions_are_masked() {
        let ids = jane();
        let theirs = ChatterEntry {
            sender: "Jane".into(),
            body: "hi".into(),
            timestamp: None,
            message_id: None,
            sender_id: Some("jane".into()),
        };
        assert_eq!(
            ids.history_edit("agent:main:whatsapp:default:group:g", &theirs),
            ChatterEdit::Remove
        );
        let mention = ChatterEntry {
            sender: "Bob".into(),
            body: "ping +15550100".into(),
            sender_id: Some("bob".into()),
            ..theirs.clone()
        };
        let ChatterEdit::Replace(masked) =
            ids.history_edit("agent:main:whatsapp:default:group:g", &mention)
        else {
            panic!("a mention is masked")
        };
        assert_eq!(masked.body, "ping [erased]");
        let other = ChatterEntry {
            body: "lunch?".into(),
            ..mention
        };
        assert_eq!(
            ids.history_edit("agent:main:whatsapp:default:group:g", &other),
            ChatterEdit::Keep
        );
    }
}
