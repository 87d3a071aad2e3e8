//! Reading a transcript line's objects field by field: the fields an entry, a message
//! and a content block know go straight into their places, and every other field into
//! the object's `extra` map, as written.
//!
//! serde's `#[serde(flatten)]` and `#[serde(untagged)]` give the same result by first
//! copying the whole object into a buffer and then reading it again from there, at each
//! level; a line's text was copied three or four times before it reached its
//! [`TranscriptEntry`]. Every read of a transcript parses its lines, so they are read
//! here once.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::entry::{AgentMessage, Content, ContentBlock, TranscriptEntry};

/// A field's name, borrowed from the line when it has no escapes.
struct FieldName<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for FieldName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = FieldName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Borrowed(name)))
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Owned(name.to_owned())))
            }
            fn visit_string<E: de::Error>(self, name: String) -> Result<Self::Value, E> {
                Ok(FieldName(Cow::Owned(name)))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The fields an object's type knows, each set at most once.
struct Known {
    names: &'static [&'static str],
    seen: u32,
}

impl Known {
    fn new(names: &'static [&'static str]) -> Self {
        debug_assert!(names.len() <= 32);
        Known { names, seen: 0 }
    }

    /// Which known field `name` is; an error when it was given before.
    fn field<E: de::Error>(&mut self, name: &str) -> Result<Option<usize>, E> {
        let Some(at) = self.names.iter().position(|known| *known == name) else {
            return Ok(None);
        };
        if self.seen & (1 << at) != 0 {
            return Err(E::duplicate_field(self.names[at]));
        }
        self.seen |= 1 << at;
        Ok(Some(at))
    }
}

/// Reads the rest of `map`: each field `names` knows is given to `read` with its
/// place in `names` (which reads its value), every other one goes to `extra`.
fn read_fields<'de, A: MapAccess<'de>>(
    map: &mut A,
    names: &'static [&'static str],
    extra: &mut Map<String, Value>,
    mut read: impl FnMut(usize, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let mut known = Known::new(names);
    while let Some(FieldName(name)) = map.next_key()? {
        match known.field(&name)? {
            Some(at) => read(at, map)?,
            None => {
                let value = map.next_value()?;
                extra.insert(name.into_owned(), value);
            }
        }
    }
    Ok(())
}

/// A visitor of one object kind, named for what it expects.
struct ObjectOf<T>(&'static str, std::marker::PhantomData<T>);

impl<T> ObjectOf<T> {
    fn new(expecting: &'static str) -> Self {
        ObjectOf(expecting, std::marker::PhantomData)
    }
}

impl<'de> Visitor<'de> for ObjectOf<TranscriptEntry> {
    type Value = TranscriptEntry;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const NAMES: &[&str] = &[
            "type",
            "id",
            "parentId",
            "timestamp",
            "message",
            "customType",
            "data",
            "log",
        ];
        let mut kind = None;
        let mut entry = TranscriptEntry {
            kind: String::new(),
            id: None,
            parent_id: None,
            timestamp: None,
            message: None,
            custom_type: None,
            data: None,
            log: None,
            extra: Map::new(),
        };
        let mut extra = Map::new();
        read_fields(&mut map, NAMES, &mut extra, |at, map| {
            match at {
                0 => kind = Some(map.next_value()?),
                1 => entry.id = map.next_value()?,
                2 => entry.parent_id = map.next_value()?,
                3 => entry.timestamp = map.next_value()?,
                4 => entry.message = map.next_value()?,
                5 => entry.custom_type = map.next_value()?,
                // `"data": null` is no data, as the field left out.
                6 => entry.data = map.next_value()?,
                _ => entry.log = map.next_value()?,
            }
            Ok(())
        })?;
        entry.kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        entry.extra = extra;
        Ok(entry)
    }
}

impl<'de> Visitor<'de> for ObjectOf<AgentMessage> {
    type Value = AgentMessage;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        const NAMES: &[&str] = &[
            "role",
            "content",
            "api",
            "provider",
            "model",
            "usage",
            "stopReason",
            "timestamp",
        ];
        let mut role = None;
        let mut message = AgentMessage {
            role: super::entry::Role::User,
            content: None,
            api: None,
            provider: None,
            model: None,
            usage: None,
            stop_reason: None,
            timestamp: None,
            extra: Map::new(),
        };
        let mut extra = Map::new();
        read_fields(&mut map, NAMES, &mut extra, |at, map| {
            match at {
                0 => role = Some(map.next_value()?),
                1 => message.content = map.next_value()?,
                2 => message.api = map.next_value()?,
                3 => message.provider = map.next_value()?,
                4 => message.model = map.next_value()?,
                5 => message.usage = map.next_value()?,
                6 => message.stop_reason = map.next_value()?,
                _ => message.timestamp = map.next_value()?,
            }
            Ok(())
        })?;
        message.role = role.ok_or_else(|| de::Error::missing_field("role"))?;
        message.extra = extra;
        Ok(message)
    }
}

impl<'de> Visitor<'de> for ObjectOf<ContentBlock> {
    type Value = ContentBlock;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut text, mut extra) = (None, None, Map::new());
        read_fields(&mut map, &["type", "text"], &mut extra, |at, map| {
            match at {
                0 => kind = Some(map.next_value()?),
                _ => text = map.next_value()?,
            }
            Ok(())
        })?;
        Ok(ContentBlock {
            kind: kind.ok_or_else(|| de::Error::missing_field("type"))?,
            text,
            extra,
        })
    }
}

impl<'de> Visitor<'de> for ObjectOf<Content> {
    type Value = Content;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Content::Text(text.to_owned()))
    }
    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(Content::Text(text))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(block) = seq.next_element()? {
            blocks.push(block);
        }
        Ok(Content::Blocks(blocks))
    }
}

impl<'de> Deserialize<'de> for TranscriptEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectOf::<Self>::new("a transcript entry (an object)"))
    }
}

impl<'de> Deserialize<'de> for AgentMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectOf::<Self>::new("a message (an object)"))
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectOf::<Self>::new("a content block (an object)"))
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjectOf::<Self>::new(
            "message content: a string or a list of content blocks",
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use crate::transcript::TranscriptEntry;

    /// The entry, message and content block as serde's derive read them before (with
    /// `flatten` and `untagged`), named as the real ones so their `Debug` texts compare.
    #[allow(dead_code)] // read through `Debug`
    mod derived {
        use serde::Deserialize;
        use serde_json::{Map, Value};

        use crate::transcript::{LogFields, Role, Usage};

        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct EntryWire {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            id: Option<String>,
            #[serde(default)]
            parent_id: Option<Option<String>>,
            #[serde(default)]
            timestamp: Option<String>,
            #[serde(default)]
            message: Option<AgentMessage>,
            #[serde(default)]
            custom_type: Option<String>,
            #[serde(default)]
            data: Option<Value>,
            #[serde(default)]
            log: Option<LogFields>,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }

        #[derive(Debug)]
        pub(super) struct TranscriptEntry {
            kind: String,
            id: Option<String>,
            parent_id: Option<String>,
            timestamp: Option<String>,
            message: Option<AgentMessage>,
            custom_type: Option<String>,
            data: Option<Value>,
            log: Option<LogFields>,
            extra: Map<String, Value>,
        }

        impl<'de> Deserialize<'de> for TranscriptEntry {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let wire = EntryWire::deserialize(d)?;
                Ok(TranscriptEntry {
                    kind: wire.kind,
                    id: wire.id,
                    parent_id: wire.parent_id.flatten(),
                    timestamp: wire.timestamp,
                    message: wire.message,
                    custom_type: wire.custom_type,
                    data: wire.data,
                    log: wire.log,
                    extra: wire.extra,
                })
            }
        }

        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct AgentMessage {
            role: Role,
            #[serde(default)]
            content: Option<Content>,
            #[serde(default)]
            api: Option<String>,
            #[serde(default)]
            provider: Option<String>,
            #[serde(default)]
            model: Option<String>,
            #[serde(default)]
            usage: Option<Usage>,
            #[serde(default)]
            stop_reason: Option<String>,
            #[serde(default)]
            timestamp: Option<u64>,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }

        #[derive(Debug, Deserialize)]
        #[serde(untagged)]
        enum Content {
            Text(String),
            Blocks(Vec<ContentBlock>),
        }

        #[derive(Debug, Deserialize)]
        struct ContentBlock {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            text: Option<String>,
            #[serde(flatten)]
            extra: Map<String, Value>,
        }
    }

    /// Field names of every level, known and unknown.
    const NAMES: &[&str] = &[
        "type",
        "id",
        "parentId",
        "timestamp",
        "message",
        "customType",
        "data",
        "log",
        "role",
        "content",
        "api",
        "usage",
        "stopReason",
        "text",
        "toolCallId",
        "direction",
        "x",
    ];

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0u64..3_000_000_000_000).prop_map(Value::from),
            (-5i64..5).prop_map(Value::from),
            Just(json!(1.5)),
            prop::sample::select(vec![
                "",
                "user",
                "assistant",
                "toolResult",
                "text",
                "hé \"x\"\n"
            ])
            .prop_map(Value::from),
        ]
    }

    /// Any JSON value, objects keyed by the names above.
    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(NAMES), inner), 0..6).prop_map(
                    |fields| Value::Object(
                        fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                    )
                ),
            ]
        })
    }

    /// A message much as written: a role, content as text or blocks, other fields.
    fn message() -> impl Strategy<Value = Value> {
        let block = (
            prop::sample::select(vec!["text", "toolCall", "image"]),
            prop::option::of(prop_oneof![3 => text(), 1 => leaf()]),
            prop::collection::vec((prop::sample::select(NAMES), value()), 0..3),
        )
            .prop_map(|(kind, text, extra)| {
                let mut block = serde_json::Map::new();
                block.insert("type".into(), kind.into());
                if let Some(text) = text {
                    block.insert("text".into(), text);
                }
                for (k, v) in extra {
                    block.insert(k.to_owned(), v);
                }
                Value::Object(block)
            });
        let content = prop_oneof![
            text(),
            prop::collection::vec(block, 0..3).prop_map(Value::Array),
            value(),
        ];
        let role = prop_oneof![
            4 => prop::sample::select(vec!["user", "assistant", "toolResult", "custom"])
                .prop_map(Value::from),
            1 => leaf(),
        ];
        let field = prop_oneof![
            3 => (
                prop::sample::select(vec!["api", "provider", "model", "stopReason"]),
                text()
            )
                .prop_map(|(k, v)| (k.to_owned(), v)),
            1 => (0u64..2_000_000_000_000).prop_map(|t| ("timestamp".to_owned(), t.into())),
            1 => Just((
                "usage".to_owned(),
                json!({"input": 3, "output": 4, "cost": {"total": 1.5, "x": 1}, "y": []})
            )),
            1 => (prop::sample::select(NAMES), value()).prop_map(|(k, v)| (k.to_owned(), v)),
        ];
        (
            prop::option::of(role),
            prop::option::of(content),
            prop::collection::vec(field, 0..4),
        )
            .prop_map(|(role, content, fields)| {
                let mut pairs: Vec<(String, Value)> = Vec::new();
                pairs.extend(role.map(|role| ("role".to_owned(), role)));
                pairs.extend(content.map(|content| ("content".to_owned(), content)));
                pairs.extend(fields);
                Value::String(object_text(&pairs))
            })
    }

    /// An object's text from its fields in order, a name possibly more than once.
    fn object_text(pairs: &[(String, Value)]) -> String {
        let fields: Vec<String> = pairs
            .iter()
            .map(|(k, v)| {
                // A message given as text already is an object's text.
                let value = match v {
                    Value::String(text) if text.starts_with('{') => text.clone(),
                    other => other.to_string(),
                };
                format!("{}:{value}", Value::from(k.as_str()))
            })
            .collect();
        format!("{{{}}}", fields.join(","))
    }

    fn text() -> impl Strategy<Value = Value> {
        prop::sample::select(vec![
            "",
            "a1b2c3d4",
            "2026-02-06T10:00:01.000Z",
            "hé \"x\"\n",
        ])
        .prop_map(Value::from)
    }

    /// A known field of an entry with a value of the kind written there.
    fn known_field() -> impl Strategy<Value = (String, Value)> {
        let log = prop::collection::vec(
            prop_oneof![
                prop::sample::select(vec!["inbound", "outbound", "sideways"])
                    .prop_map(|d| ("direction".to_owned(), Value::from(d))),
                text().prop_map(|t| ("channel".to_owned(), t)),
                Just(("parts".to_owned(), json!([[0, 2], null]))),
                (prop::sample::select(NAMES), value()).prop_map(|(k, v)| (k.to_owned(), v)),
            ],
            0..4,
        )
        .prop_map(|pairs| Value::String(object_text(&pairs)));
        prop_oneof![
            text().prop_map(|v| ("id".to_owned(), v)),
            prop_oneof![text(), Just(Value::Null)].prop_map(|v| ("parentId".to_owned(), v)),
            text().prop_map(|v| ("timestamp".to_owned(), v)),
            message().prop_map(|m| ("message".to_owned(), m)),
            text().prop_map(|v| ("customType".to_owned(), v)),
            value().prop_map(|v| ("data".to_owned(), v)),
            log.prop_map(|l| ("log".to_owned(), l)),
        ]
    }

    /// A line: its fields in order, a name possibly twice; mostly an entry much as
    /// written (a type, known fields with values of their kind, unknown ones), else
    /// any JSON.
    fn line() -> impl Strategy<Value = String> {
        let field = prop_oneof![
            4 => known_field(),
            1 => (prop::sample::select(NAMES), value()).prop_map(|(k, v)| (k.to_owned(), v)),
            1 => leaf().prop_map(|v| ("type".to_owned(), v)),
        ];
        let entry = (
            prop::option::of(prop::sample::select(vec![
                "message",
                "custom",
                "compaction",
            ])),
            prop::collection::vec(field, 0..7),
        )
            .prop_map(|(kind, fields)| {
                let mut pairs: Vec<(String, Value)> = Vec::new();
                pairs.extend(kind.map(|kind| ("type".to_owned(), Value::from(kind))));
                pairs.extend(fields);
                object_text(&pairs)
            });
        prop_oneof![4 => entry, 1 => value().prop_map(|v| v.to_string())]
    }

    fn read_both(text: &str) -> (Result<String, String>, Result<String, String>) {
        let new = serde_json::from_str::<TranscriptEntry>(text)
            .map(|e| format!("{e:?}"))
            .map_err(|e| e.to_string());
        let old = serde_json::from_str::<derived::TranscriptEntry>(text)
            .map(|e| format!("{e:?}"))
            .map_err(|e| e.to_string());
        (new, old)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Any line reads as the derived reading with `flatten` read it: the same entry,
        /// or an error where it gave one.
        #[test]
        fn a_line_reads_as_the_derived_reading_read_it(text in line()) {
            let (new, old) = read_both(&text);
            match (&new, &old) {
                (Ok(new), Ok(old)) => prop_assert_eq!(new, old, "{}", text),
                (Err(_), Err(_)) => {}
                _ => prop_assert!(false, "{text}\nnow: {new:?}\nbefore: {old:?}"),
            }
        }
    }

    #[test]
    fn lines_as_written_read_as_before() {
        for text in [
            r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-02-06T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1770372001000}}"#,
            r#"{"type":"message","id":"b","parentId":"a","message":{"role":"assistant","content":[{"type":"text","text":"Hello"},{"type":"toolCall","id":"c1","name":"f","arguments":{}}],"usage":{"input":1,"output":2,"cost":{"total":0.5}},"stopReason":"stop","api":"x"},"log":{"direction":"outbound","channel":"sms","parts":[[0,5]],"later":1}}"#,
            r#"{"type":"compaction","id":"c","summary":"s","firstKeptEntryId":"b","tokensBefore":9}"#,
            r#"{"type":"custom","customType":"agent-sessions.status","data":{"status":"closed"}}"#,
            r#"{"type":"message","message":{"role":"toolResult","toolCallId":"c1","content":[{"type":"text","text":"42"}],"isError":false}}"#,
            r#"{"type":"m\u0065ssage","i\u0064":"x","new\u0046ield":[1,2]}"#,
            r#"{"type":"message","id":"a","id":"b"}"#,
            r#"{"id":"a"}"#,
            r#"{"type":"message","message":{"content":"no role"}}"#,
            r#"{"type":"message","message":{"role":"user","content":7}}"#,
            r#"["type","message"]"#,
        ] {
            let (new, old) = read_both(text);
            assert_eq!(
                new.is_ok(),
                old.is_ok(),
                "{text}\nnow: {new:?}\nbefore: {old:?}"
            );
            if let (Ok(new), Ok(old)) = (new, old) {
                assert_eq!(new, old, "{text}");
            }
        }
    }
}
