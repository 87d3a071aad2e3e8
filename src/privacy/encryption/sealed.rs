//! A transcript entry sealed: what a person or the model wrote, in one sealed field.

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::key::{seal_bytes, Cipher, DataKey, KeyOwner};
use super::opened::Opened;
use crate::error::{Error, Result};
use crate::inbound::Attachment;
use crate::transcript::{ChatterSender, Content, TranscriptEntry};
use crate::AgentId;

/// The field of a sealed entry that holds the sealed text.
pub(crate) const SEALED_FIELD: &str = crate::privacy::SEALED_LINE;
/// What a line shows for text whose key was destroyed (its owner was erased).
pub const ERASED_TEXT: &str = "[erased]";

/// What an entry carries that a person or the model wrote: sealed together. Ids,
/// times, roles, token counts and the message-log ids stay clear, so the stores still
/// find, order and count lines.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Secret {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content: Option<Content>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    message_extra: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    collected: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    chatter: Vec<ChatterSender>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    attachments: Vec<Attachment>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    metadata: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    log_extra: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    extra: Map<String, Value>,
}

impl Secret {
    /// Takes the secret parts out of `entry`.
    fn take(entry: &mut TranscriptEntry) -> Secret {
        let mut secret = Secret {
            data: entry.data.take(),
            extra: std::mem::take(&mut entry.extra),
            ..Secret::default()
        };
        if let Some(message) = &mut entry.message {
            secret.content = message.content.take();
            secret.message_extra = std::mem::take(&mut message.extra);
        }
        if let Some(log) = &mut entry.log {
            secret.collected = std::mem::take(&mut log.collected);
            secret.chatter = std::mem::take(&mut log.chatter);
            secret.attachments = std::mem::take(&mut log.attachments);
            secret.metadata = std::mem::take(&mut log.metadata);
            secret.log_extra = std::mem::take(&mut log.extra);
            // Whose key sealed the line stays clear.
            if let Some(on_channel) = secret.log_extra.remove(PERSON_ON_CHANNEL) {
                log.extra.insert(PERSON_ON_CHANNEL.to_owned(), on_channel);
            }
        }
        secret
    }

    /// Puts the secret parts back into `entry`.
    fn restore(self, entry: &mut TranscriptEntry) {
        entry.data = self.data;
        entry.extra = self.extra;
        if let Some(message) = &mut entry.message {
            message.content = self.content;
            message.extra = self.message_extra;
        }
        if let Some(log) = &mut entry.log {
            log.collected = self.collected;
            log.chatter = self.chatter;
            log.attachments = self.attachments;
            log.metadata = self.metadata;
            let on_channel = log.extra.remove(PERSON_ON_CHANNEL);
            log.extra = self.log_extra;
            if let Some(on_channel) = on_channel {
                log.extra.insert(PERSON_ON_CHANNEL.to_owned(), on_channel);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.content.is_none()
            && self.message_extra.is_empty()
            && self.data.is_none()
            && self.collected.is_empty()
            && self.chatter.is_empty()
            && self.attachments.is_empty()
            && self.metadata.is_empty()
            && self.log_extra.is_empty()
            && self.extra.is_empty()
    }
}

/// The message-log field that says a line's person id is its sender's id on the line's
/// channel (the message named no person): such a line is sealed under a key of that
/// sender on that channel (`telegram:77`), since `77` on another channel is someone
/// else. It stays clear, so a reader knows whose key to ask for.
pub(crate) const PERSON_ON_CHANNEL: &str = "personOnChannel";

/// Whose key seals `entry`: the person its message-log fields name (a sender known by
/// their id alone, on their channel: [`PERSON_ON_CHANNEL`]), by their id as erasing
/// them names it ([`KeyOwner::person`]), else the session.
pub(crate) fn owner_of(entry: &TranscriptEntry, agent: &AgentId, session_id: &str) -> KeyOwner {
    match person_of(entry) {
        Some(person) => KeyOwner::person(&person),
        None => KeyOwner::Session {
            agent: agent.clone(),
            session_id: session_id.to_owned(),
        },
    }
}

/// The person `entry` names, as its fields spell it (on its channel when known by
/// their id alone).
fn person_of(entry: &TranscriptEntry) -> Option<String> {
    let log = entry.log.as_ref()?;
    let person = log.person_id.as_deref().filter(|p| !p.trim().is_empty())?;
    let on_channel = Some(log)
        .filter(|log| log.extra.get(PERSON_ON_CHANNEL) == Some(&Value::Bool(true)))
        .and_then(|log| log.channel.as_deref());
    Some(match on_channel {
        Some(channel) => format!("{channel}:{person}"),
        None => person.to_owned(),
    })
}

/// The owners a line may also be sealed under, after [`owner_of`]'s: its person's id on
/// its channel when its fields do not say ([`PERSON_ON_CHANNEL`]: a search index's row
/// keeps the person and channel alone), and each as earlier builds spelled it (the id's
/// case as written).
pub(crate) fn other_owners(entry: &TranscriptEntry) -> Vec<KeyOwner> {
    let on_channel = entry.log.as_ref().and_then(|log| {
        let person = log.person_id.as_deref().filter(|p| !p.trim().is_empty())?;
        let channel = log.channel.as_deref()?;
        (!log.extra.contains_key(PERSON_ON_CHANNEL)).then(|| format!("{channel}:{person}"))
    });
    let spelled: Vec<String> = on_channel.into_iter().chain(person_of(entry)).collect();
    let first = person_of(entry).map(|person| KeyOwner::person(&person));
    let mut owners: Vec<KeyOwner> = Vec::new();
    let candidates = spelled.iter().map(|id| KeyOwner::person(id));
    for owner in candidates.chain(spelled.iter().map(|id| KeyOwner::Person(id.clone()))) {
        if Some(&owner) != first.as_ref() && !owners.contains(&owner) {
            owners.push(owner);
        }
    }
    owners
}

/// What a sealed value is bound to: its agent, session and line (the entry's id).
fn bound_to(agent: &AgentId, session_id: &str, entry_id: &str) -> Vec<u8> {
    format!("agent-sessions line v1\0{agent}\0{session_id}\0{entry_id}").into_bytes()
}

/// The session a sealed value is bound to, as [`Opened`] keeps it (its line is in the
/// sealed text).
pub(crate) fn session_place(agent: &AgentId, session_id: &str) -> String {
    format!("{agent}\0{session_id}")
}

/// Where an entry keeps its sealed value: with its message-log fields when it has them
/// (so a message-log record carries it too), else among the entry's own fields.
fn slot(entry: &mut TranscriptEntry) -> &mut Map<String, Value> {
    match &mut entry.log {
        Some(log) => &mut log.extra,
        None => &mut entry.extra,
    }
}

/// Seals `entry` (which has its id) under `key`, bound to its place. An entry with
/// nothing secret is left as it is.
pub(crate) fn seal(
    entry: &mut TranscriptEntry,
    key: &DataKey,
    (agent, session_id): (&AgentId, &str),
    opened: &Opened<Secret>,
) -> Result<()> {
    let id = entry.id.clone().ok_or_else(|| Error::Encryption {
        problem: "an entry is sealed once it has its id".into(),
    })?;
    let secret = Secret::take(entry);
    if secret.is_empty() {
        return Ok(());
    }
    let plain = serde_json::to_vec(&secret).map_err(|e| Error::encode("a sealed entry", e))?;
    let sealed = seal_bytes(key.as_bytes(), &bound_to(agent, session_id, &id), &plain)?;
    let mut text = String::with_capacity(
        Cipher::VALUES.prefix().len()
            + key.id().len()
            + id.len()
            + 2
            + sealed.len().div_ceil(3) * 4,
    );
    for part in [Cipher::VALUES.prefix(), key.id(), ":", &id, ":"] {
        text.push_str(part);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(sealed, &mut text);
    opened.put(
        &text,
        &session_place(agent, session_id),
        secret,
        plain.len(),
    );
    slot(entry).insert(SEALED_FIELD.to_owned(), Value::String(text));
    Ok(())
}

/// A sealed value's parts: the cipher and key it was sealed with, the line it was
/// sealed for, and the sealed bytes in base64.
pub(crate) struct SealedValue<'a> {
    cipher: Cipher,
    key_id: &'a str,
    line: &'a str,
    sealed: &'a str,
}

impl SealedValue<'_> {
    /// The id of the key it was sealed under.
    pub(crate) fn key_id(&self) -> &str {
        self.key_id
    }
}

/// The sealed value of `entry`, if it is sealed.
pub(crate) fn sealed_value(entry: &TranscriptEntry) -> Option<SealedValue<'_>> {
    parts(sealed_text(entry)?)
}

/// The sealed text of `entry`, whole.
fn sealed_text(entry: &TranscriptEntry) -> Option<&str> {
    let slot = match &entry.log {
        Some(log) => &log.extra,
        None => &entry.extra,
    };
    slot.get(SEALED_FIELD)?.as_str()
}

/// Whether `text` is a line's sealed value (as a message-log record of a sealed line
/// carries it as its text, for the search index).
pub(crate) fn is_sealed_line(text: &str) -> bool {
    !text.contains(char::is_whitespace) && parts(text).is_some()
}

/// A sealed text's parts.
fn parts(text: &str) -> Option<SealedValue<'_>> {
    let (cipher, rest) = Cipher::of(text)?;
    let (key_id, rest) = rest.split_once(':')?;
    let (line, sealed) = rest.split_once(':')?;
    Some(SealedValue {
        cipher,
        key_id,
        line,
        sealed,
    })
}

/// Opens a sealed `entry` with `key` — `None`, or a key made after the one it was
/// sealed under, when its owner's key was destroyed: its text then reads
/// [`ERASED_TEXT`]. [`Error::Encryption`] when the key does not open
/// it (another master key, or the line was altered or moved). `line` is the entry's
/// id where the reader knows it (a message-log record does not).
pub(crate) fn open(
    entry: &mut TranscriptEntry,
    key: Option<&DataKey>,
    (agent, session_id): (&AgentId, &str),
    (opened, remember): (&Opened<Secret>, bool),
) -> Result<()> {
    let Some(text) = sealed_text(entry).map(str::to_owned) else {
        return Ok(());
    };
    let Some(SealedValue {
        cipher,
        key_id,
        line: sealed_for,
        sealed: b64,
    }) = parts(&text)
    else {
        return Ok(());
    };
    let damaged = || {
        Error::Encryption {
        problem: format!(
            "line {sealed_for} of session {session_id} ({agent}) does not open: it was altered, moved from another line or session, or sealed under another master key"
        ),
    }
    };
    if entry.id.as_deref().is_some_and(|id| id != sealed_for) {
        return Err(damaged());
    }
    let place = session_place(agent, session_id);
    let secret = match key.filter(|key| key.id() == key_id) {
        // The key that sealed it was destroyed (its owner may have a new one since).
        None => None,
        Some(key) => match opened.get(&text, &place) {
            Some(secret) => Some(secret),
            None => {
                let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(b64)
                    .map_err(|_| damaged())?;
                let plain = cipher
                    .open(
                        key.as_bytes(),
                        &bound_to(agent, session_id, sealed_for),
                        &sealed,
                    )
                    .ok_or_else(damaged)?;
                let secret = serde_json::from_slice::<Secret>(&plain).map_err(|_| damaged())?;
                if remember {
                    opened.put(&text, &place, secret.clone(), plain.len());
                }
                Some(secret)
            }
        },
    };
    slot(entry).remove(SEALED_FIELD);
    match secret {
        Some(secret) => secret.restore(entry),
        None => {
            if let Some(message) = &mut entry.message {
                message.content = Some(Content::Text(ERASED_TEXT.to_owned()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn a_line_sealed_by_an_earlier_build_still_opens_and_a_new_one_is_sealed_with_aes_gcm() {
        let key = DataKey::generate().unwrap();
        let agent = AgentId::new("main").unwrap();
        let place = (&agent, "session-1");
        let cache = Opened::new();
        let mut entry = TranscriptEntry::user_text("my pin is 4321", Utc::now());
        entry.id = Some("a1b2c3d4".into());
        let plain = entry.clone();

        // As builds before AES-256-GCM sealed it.
        let mut earlier = entry.clone();
        let secret = serde_json::to_vec(&Secret::take(&mut earlier)).unwrap();
        let sealed = Cipher::XChaCha20Poly1305
            .seal(
                key.as_bytes(),
                &bound_to(&agent, "session-1", "a1b2c3d4"),
                &secret,
            )
            .unwrap();
        let text = format!(
            "enc1:{}:a1b2c3d4:{}",
            key.id(),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
        );
        slot(&mut earlier).insert(SEALED_FIELD.into(), Value::String(text));
        assert_eq!(sealed_value(&earlier).unwrap().key_id(), key.id());
        open(&mut earlier, Some(&key), place, (&cache, false)).unwrap();
        assert_eq!(earlier.message, plain.message);

        seal(&mut entry, &key, place, &cache).unwrap();
        let text = sealed_text(&entry).unwrap().to_owned();
        assert!(text.starts_with("enc2:"), "{text}");
        assert!(!text.contains("4321"));
        // Opened without the cache that remembers what it sealed.
        open(&mut entry, Some(&key), place, (&Opened::new(), false)).unwrap();
        assert_eq!(entry.message, plain.message);
        // Moved to another session, it does not open.
        let mut moved = TranscriptEntry {
            id: Some("a1b2c3d4".into()),
            ..plain.clone()
        };
        Secret::take(&mut moved);
        slot(&mut moved).insert(SEALED_FIELD.into(), Value::String(text));
        let other = (&agent, "session-2");
        assert!(open(&mut moved, Some(&key), other, (&Opened::new(), false)).is_err());
    }
}
