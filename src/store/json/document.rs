//! The in-memory form of a `sessions.json` file.
//!
//! Entries are kept as the raw JSON text they were read as, in file order, and parsed
//! only when asked for: the text of the file is kept once, and each entry is a range of
//! it until this process changes the entry. Writing re-emits untouched entries byte for
//! byte, so a store written by OpenClaw keeps its exact bytes except where this crate
//! changed an entry, and a write costs one copy of the file rather than a
//! re-serialisation of every entry.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::CorruptProblem;
use crate::store::entry::SessionEntry;

/// The entries of one store file.
#[derive(Debug, Default, Clone)]
pub(crate) struct Document {
    /// The text of the file the document was read from.
    source: Arc<String>,
    entries: IndexMap<String, Raw>,
    /// The keys not written as this crate writes keys ([`is_irregular`]), found on first
    /// use and kept up to date after.
    irregular: OnceLock<Vec<String>>,
}

/// One entry's raw JSON text.
#[derive(Debug, Clone)]
enum Raw {
    /// As read: this range of the document's source.
    InSource(Range<usize>),
    /// Written (or reformatted) by this process.
    Owned(Box<str>),
}

/// Whether a raw key is not written the way this crate writes keys — with an upper-case
/// letter, or without an `agent:` scope — and so may be a legacy spelling of one.
fn is_irregular(key: &str) -> bool {
    !key.starts_with("agent:") || key.bytes().any(|b| b.is_ascii_uppercase())
}

impl Document {
    /// Parses a file's bytes (a copy of them; [`from_bytes`](Self::from_bytes) keeps
    /// the buffer it is given).
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, CorruptProblem> {
        Self::from_bytes(bytes.to_vec())
    }

    /// Parses a file's bytes, keeping them as the document's source: an entry is a
    /// range of them, not a copy.
    ///
    /// Plain JSON first; JSON5 (comments, trailing commas — OpenClaw reads JSON5) only
    /// when that fails. Anything else is a [`CorruptProblem`].
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Result<Self, CorruptProblem> {
        if bytes.is_empty() {
            return Err(CorruptProblem::Empty);
        }
        let text = String::from_utf8(bytes).map_err(|e| CorruptProblem::InvalidUtf8 {
            valid_up_to: e.utf8_error().valid_up_to(),
        })?;
        let entries = match serde_json::from_str::<IndexMap<String, &RawValue>>(&text) {
            Ok(borrowed) => {
                let start = text.as_ptr() as usize;
                borrowed
                    .into_iter()
                    .map(|(key, raw)| {
                        let raw = raw.get();
                        let offset = (raw.as_ptr() as usize).wrapping_sub(start);
                        // A borrowed value is a slice of the text it was parsed from.
                        let raw = if text.get(offset..offset + raw.len()) == Some(raw) {
                            Raw::InSource(offset..offset + raw.len())
                        } else {
                            Raw::Owned(raw.into())
                        };
                        (key, raw)
                    })
                    .collect()
            }
            // Any value is a valid RawValue, so a data error is about the top level.
            Err(error) if error.is_data() => {
                return Err(CorruptProblem::NotAnObject {
                    found: top_level_kind(&text),
                })
            }
            Err(error) => {
                return Self::parse_json5(&text).ok_or(CorruptProblem::Syntax(error));
            }
        };
        Ok(Document {
            source: Arc::new(text),
            entries,
            irregular: OnceLock::new(),
        })
    }

    fn parse_json5(text: &str) -> Option<Self> {
        let values: IndexMap<String, Value> = parse_json5(text).ok()?;
        let entries = values
            .into_iter()
            .map(|(key, value)| Some((key, Raw::Owned(format_nested(&value).ok()?))))
            .collect::<Option<_>>()?;
        Some(Document {
            source: Arc::default(),
            entries,
            irregular: OnceLock::new(),
        })
    }

    fn text<'a>(&'a self, raw: &'a Raw) -> &'a str {
        match raw {
            Raw::InSource(range) => &self.source[range.clone()],
            Raw::Owned(text) => text,
        }
    }

    /// The raw JSON text of the entry under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(|raw| self.text(raw))
    }

    /// Stores `entry` under `key` (in place if the key exists, else at the end) and
    /// returns its new text.
    ///
    /// An entry that was already there keeps the order of its fields, at every level:
    /// fields it had stay where they were and new ones are appended, as
    /// `JSON.stringify` writes an object after an assignment — so a user diffing a
    /// tracked `sessions.json` sees only the lines that changed.
    pub(crate) fn set(&mut self, key: &str, entry: &SessionEntry) -> serde_json::Result<&str> {
        let index = match self.entries.get_index_of(key) {
            Some(index) => {
                let mut value = serde_json::to_value(entry)?;
                if let Ok(old) = serde_json::from_str::<Value>(self.text(&self.entries[index])) {
                    keep_field_order(&old, &mut value);
                }
                self.entries[index] = Raw::Owned(format_nested(&value)?);
                index
            }
            None => {
                self.note_new_key(key);
                self.entries
                    .insert_full(key.to_owned(), Raw::Owned(format_nested(entry)?))
                    .0
            }
        };
        Ok(self.text(&self.entries[index]))
    }

    /// Stores `raw` (an entry's JSON text) under `key` as it is (in place if the key
    /// exists, else at the end).
    pub(crate) fn insert_raw(&mut self, key: &str, raw: &str) {
        if !self.entries.contains_key(key) {
            self.note_new_key(key);
        }
        self.entries.insert(key.to_owned(), Raw::Owned(raw.into()));
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if self.entries.shift_remove(key).is_some() {
            if let Some(irregular) = self.irregular.get_mut() {
                irregular.retain(|k| k != key);
            }
        }
    }

    /// The keys with an upper-case letter or without an `agent:` scope: the only ones
    /// that can be legacy spellings of a key this crate writes.
    pub(crate) fn irregular_keys(&self) -> &[String] {
        self.irregular.get_or_init(|| {
            self.entries
                .keys()
                .filter(|key| is_irregular(key))
                .cloned()
                .collect()
        })
    }

    fn note_new_key(&mut self, key: &str) {
        if let Some(irregular) = self.irregular.get_mut() {
            if is_irregular(key) {
                irregular.push(key.to_owned());
            }
        }
    }

    /// Every key with its entry's raw JSON text, in file order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|(key, raw)| (key.as_str(), self.text(raw)))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The file's bytes in OpenClaw's layout: `JSON.stringify(store, null, 2)`, two-space
    /// indentation, no trailing newline.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        if self.entries.is_empty() {
            return b"{}".to_vec();
        }
        let size: usize = self
            .entries
            .iter()
            .map(|(key, raw)| key.len() + self.text(raw).len() + 8)
            .sum();
        let mut out = Vec::with_capacity(size + 4);
        out.extend_from_slice(b"{\n");
        for (index, (key, raw)) in self.iter().enumerate() {
            if index > 0 {
                out.extend_from_slice(b",\n");
            }
            out.extend_from_slice(b"  ");
            serde_json::to_writer(&mut out, key).expect("writing a string to a Vec cannot fail");
            out.extend_from_slice(b": ");
            out.extend_from_slice(raw.as_bytes());
        }
        out.extend_from_slice(b"\n}");
        out
    }
}

/// Parses JSON5 (OpenClaw's hand-edited files: comments, trailing commas, unquoted keys,
/// single quotes) into `T`. The error says what is wrong and where.
pub(crate) fn parse_json5<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    // The JSON5 parser recurses once per level: a truncated or hostile file nested
    // thousands deep would overflow the stack. Deeper than plain JSON's limit is not a
    // hand-edited file.
    if nesting_exceeds(text, MAX_JSON5_DEPTH) {
        return Err(format!(
            "nested deeper than {MAX_JSON5_DEPTH} levels of arrays and objects"
        ));
    }
    json5::from_str(text).map_err(|error| error.to_string())
}

/// The deepest nesting the JSON5 fallback parses: serde_json's own recursion limit.
const MAX_JSON5_DEPTH: usize = 128;

/// Whether `text` nests arrays and objects deeper than `limit`, skipping JSON5 strings
/// (single or double quoted, with escapes) and comments. Iterative: any input is safe.
fn nesting_exceeds(text: &str, limit: usize) -> bool {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// Reorders the fields of `new`'s objects after `old`'s: fields `old` had first, in its
/// order, then the new ones in their own order; a field `old` had as `null` and `new`
/// leaves out (the same value, to an entry) is kept as `null`. Objects inside arrays are
/// matched by position.
fn keep_field_order(old: &Value, new: &mut Value) {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut reordered = serde_json::Map::with_capacity(new.len());
            for (name, old_value) in old {
                if let Some(mut value) = new.shift_remove(name) {
                    keep_field_order(old_value, &mut value);
                    reordered.insert(name.clone(), value);
                } else if old_value.is_null() {
                    // An explicit `null` reads as an absent field; it stays as written.
                    reordered.insert(name.clone(), Value::Null);
                }
            }
            reordered.append(new);
            *new = reordered;
        }
        (Value::Array(old), Value::Array(new)) => {
            for (old, new) in old.iter().zip(new.iter_mut()) {
                keep_field_order(old, new);
            }
        }
        _ => {}
    }
}

/// Parses one entry's raw text.
pub(crate) fn parse_entry(raw: &str) -> serde_json::Result<SessionEntry> {
    SessionEntry::from_json(raw)
}

/// Serialises a value as it appears one level inside a pretty-printed object: pretty,
/// with every line after the first indented by two more spaces. JSON strings cannot
/// contain a raw newline, so every `\n` in the output is a line break.
fn format_nested<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Box<str>> {
    let pretty = serde_json::to_string_pretty(value)?;
    Ok(pretty.replace('\n', "\n  ").into_boxed_str())
}

fn top_level_kind(text: &str) -> &'static str {
    match text.trim_start().bytes().next() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "a number",
        _ => "not an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A document read from a file holds the file's text once: every entry it has not
    /// changed is a range of that text, not a copy (what keeps a large store's memory
    /// close to its file size).
    #[test]
    fn untouched_entries_are_ranges_of_the_file_text_not_copies() {
        let mut doc = Document::from_bytes(OPENCLAW_FILE.as_bytes().to_vec()).unwrap();
        let source = doc.source.as_bytes().as_ptr_range();
        let in_source = |text: &str| source.contains(&text.as_ptr());
        assert!(doc.iter().all(|(_, raw)| in_source(raw)));
        let key = "agent:main:main";
        let mut entry = parse_entry(doc.get(key).unwrap()).unwrap();
        entry.updated_at += 1;
        doc.set(key, &entry).unwrap();
        assert!(!in_source(doc.get(key).unwrap()));
        let untouched = "agent:main:whatsapp:group:120363406150318674@g.us";
        assert!(in_source(doc.get(untouched).unwrap()));
    }

    const OPENCLAW_FILE: &str = r#"{
  "agent:main:main": {
    "sessionId": "0f5d59ee-034e-47d9-ac97-d383e6c022b8",
    "updatedAt": 1770350123456,
    "skillsSnapshot": {
      "prompt": "…",
      "skills": []
    },
    "futureField": 1.5e300
  },
  "agent:main:whatsapp:group:120363406150318674@g.us": {
    "sessionId": "3714f321-b3dd-4609-8fdd-1ca8b0607dd3",
    "updatedAt": 1770349000000,
    "chatType": "group"
  }
}"#;

    #[test]
    fn untouched_file_round_trips_byte_for_byte() {
        let doc = Document::parse(OPENCLAW_FILE.as_bytes()).unwrap();
        assert_eq!(doc.len(), 2);
        assert_eq!(String::from_utf8(doc.to_bytes()).unwrap(), OPENCLAW_FILE);
    }

    #[test]
    fn rewriting_an_entry_matches_json_stringify_layout() {
        let mut doc = Document::parse(OPENCLAW_FILE.as_bytes()).unwrap();
        let key = "agent:main:whatsapp:group:120363406150318674@g.us";
        let entry = parse_entry(doc.get(key).unwrap()).unwrap();
        doc.set(key, &entry).unwrap();
        assert_eq!(String::from_utf8(doc.to_bytes()).unwrap(), OPENCLAW_FILE);
    }

    #[test]
    fn a_changed_entry_keeps_its_field_order_at_every_level() {
        // Field orders OpenClaw writes that differ from this crate's struct order.
        let file = r#"{
  "agent:main:main": {
    "futureField": {
      "z": 1,
      "a": 2
    },
    "updatedAt": 1,
    "deliveryContext": {
      "to": "+1555",
      "channel": "whatsapp"
    },
    "sessionFile": "/tmp/s.jsonl",
    "spawnedBy": null,
    "sessionId": "s",
    "skillsSnapshot": [
      {
        "name": "x",
        "enabled": true
      }
    ]
  }
}"#;
        type Case<'a> = (&'a str, fn(&mut SessionEntry), &'a str);
        let cases: &[Case] = &[
            ("nothing changed", |_| {}, file),
            (
                "a known field changed in place",
                |e| e.updated_at = 2,
                &file.replace("\"updatedAt\": 1", "\"updatedAt\": 2"),
            ),
            (
                "a new field is appended",
                |e| e.label = Some("inbox".into()),
                &file.replace("\n  }\n}", ",\n    \"label\": \"inbox\"\n  }\n}"),
            ),
            (
                "an explicit null the entry reads as absent stays",
                |e| e.updated_at = 2,
                &file.replace("\"updatedAt\": 1", "\"updatedAt\": 2"),
            ),
            (
                "a removed field leaves the others in place",
                |e| e.session_file = None,
                &file.replace("\n    \"sessionFile\": \"/tmp/s.jsonl\",", ""),
            ),
        ];
        for (name, change, expected) in cases {
            let mut doc = Document::parse(file.as_bytes()).unwrap();
            let mut entry = parse_entry(doc.get("agent:main:main").unwrap()).unwrap();
            change(&mut entry);
            doc.set("agent:main:main", &entry).unwrap();
            assert_eq!(
                String::from_utf8(doc.to_bytes()).unwrap(),
                *expected,
                "{name}"
            );
        }
    }

    #[test]
    fn empty_store_is_braces() {
        assert_eq!(Document::default().to_bytes(), b"{}");
        assert_eq!(Document::parse(b"{}").unwrap().len(), 0);
    }

    #[test]
    fn new_keys_go_last_and_removal_keeps_order() {
        let mut doc = Document::parse(OPENCLAW_FILE.as_bytes()).unwrap();
        doc.set("agent:main:dm:new", &SessionEntry::new("n", 1))
            .unwrap();
        doc.remove("agent:main:main");
        let keys: Vec<&str> = doc.iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "agent:main:whatsapp:group:120363406150318674@g.us",
                "agent:main:dm:new"
            ]
        );
    }

    #[test]
    fn json5_is_a_read_fallback() {
        let doc = Document::parse(
            br#"{
  // written by hand
  "agent:main:main": { sessionId: 'abc', updatedAt: 5, },
}"#,
        )
        .unwrap();
        let entry = parse_entry(doc.get("agent:main:main").unwrap()).unwrap();
        assert_eq!((entry.session_id.as_str(), entry.updated_at), ("abc", 5));
        assert_eq!(
            String::from_utf8(doc.to_bytes()).unwrap(),
            "{\n  \"agent:main:main\": {\n    \"sessionId\": \"abc\",\n    \"updatedAt\": 5\n  }\n}"
        );
    }

    #[test]
    fn corrupt_inputs_are_classified() {
        assert!(matches!(Document::parse(b""), Err(CorruptProblem::Empty)));
        assert!(matches!(
            Document::parse(b"{\"a\": \xff}"),
            Err(CorruptProblem::InvalidUtf8 { valid_up_to: 6 })
        ));
        assert!(matches!(
            Document::parse(&OPENCLAW_FILE.as_bytes()[..100]),
            Err(CorruptProblem::Syntax(_))
        ));
        for (text, found) in [
            ("[]", "an array"),
            ("\"x\"", "a string"),
            ("null", "null"),
            ("42", "a number"),
            ("true", "a boolean"),
        ] {
            match Document::parse(text.as_bytes()) {
                Err(CorruptProblem::NotAnObject { found: got }) => assert_eq!(got, found),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
