//! Session entries sealed at rest: the fields that carry what people wrote or are
//! called, sealed under the data key of their session's key.

use std::sync::Arc;

use super::key::{is_sealed_text, key_with_id, sealed_text_key, DataKey, KeyOwner, KeyProvider};
use super::opened::Keys;
use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::store::entry::{
    IdentitySummary, QueueDropped, QueuedMessage, SessionEntry, WindowStart,
};
use crate::store::{Erase, ListFilter, Mutator, Revision, SessionStore, StoredSession};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Runs `f` on each of the entry's fields that carry text a person wrote or a name
/// they go by: the preview of the last message, the display name, the group's
/// subject, the origin's label and the last heartbeat's text. Ids, times, counts and
/// the host's own label stay clear, so the stores still find and list sessions.
fn each_field(
    entry: &mut SessionEntry,
    mut f: impl FnMut(&'static str, &mut Option<String>) -> Result<()>,
) -> Result<()> {
    f("lastMessagePreview", &mut entry.last_message_preview)?;
    f("displayName", &mut entry.display_name)?;
    f("subject", &mut entry.subject)?;
    f("lastHeartbeatText", &mut entry.last_heartbeat_text)?;
    f("description", &mut entry.description)?;
    f("contextSummary", &mut entry.context_summary)?;
    f("workingMemory", &mut entry.working_memory)?;
    if let Some(origin) = &mut entry.origin {
        f("origin.label", &mut origin.label)?;
    }
    // The fields that are not text — the identity summary, the messages waiting for
    // the session's run, the window's summary — are sealed together as JSON, in a
    // field of their own.
    let mut state = take_state(entry)?;
    f(STATE_FIELD, &mut state)?;
    restore_state(entry, state)
}

/// The entry's field holding its other fields that carry what people wrote.
const STATE_FIELD: &str = "sealedState";

/// The sealed texts among the fields [`each_field`] runs on, read where they are.
fn sealed_texts(entry: &SessionEntry) -> impl Iterator<Item = &str> {
    [
        &entry.last_message_preview,
        &entry.display_name,
        &entry.subject,
        &entry.last_heartbeat_text,
        &entry.description,
        &entry.context_summary,
        &entry.working_memory,
    ]
    .into_iter()
    .filter_map(Option::as_deref)
    .chain(entry.origin.as_ref().and_then(|o| o.label.as_deref()))
    .chain(entry.extra.get(STATE_FIELD).and_then(|v| v.as_str()))
    .filter(|text| is_sealed_text(text))
}

/// The entry's fields that are not text but carry what people wrote — the identity
/// summary, the queued messages and what the queue dropped, the window's start and
/// summary, the messages a run took — as one JSON text, sealed in a field of its own.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct State {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity_summary: Option<IdentitySummary>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    queued: Vec<QueuedMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_dropped: Option<QueueDropped>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window_start: Option<WindowStart>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    run_taken: Vec<QueuedMessage>,
}

/// The entry's [`State`] as JSON text (taken out of the entry); or the sealed text of
/// a stored entry.
fn take_state(entry: &mut SessionEntry) -> Result<Option<String>> {
    if let Some(serde_json::Value::String(sealed)) = entry.extra.remove(STATE_FIELD) {
        return Ok(Some(sealed));
    }
    let state = State {
        identity_summary: entry.identity_summary.take(),
        queued: std::mem::take(&mut entry.queued),
        queue_dropped: entry.queue_dropped.take(),
        window_start: entry.window_start.take(),
        run_taken: entry
            .run
            .as_mut()
            .map(|run| std::mem::take(&mut run.taken))
            .unwrap_or_default(),
    };
    let text =
        serde_json::to_string(&state).map_err(|e| Error::encode("a session's sealed state", e))?;
    Ok((text != "{}").then_some(text))
}

/// Puts what [`take_state`] took back: the fields from an opened JSON text, or the
/// sealed text as the entry's field.
fn restore_state(entry: &mut SessionEntry, state: Option<String>) -> Result<()> {
    let Some(text) = state else {
        return Ok(());
    };
    if is_sealed_text(&text) {
        entry
            .extra
            .insert(STATE_FIELD.to_owned(), serde_json::Value::String(text));
        return Ok(());
    }
    let state: State = serde_json::from_str(&text).map_err(|_| Error::Encryption {
        problem: "a session's sealed state does not read as what this version writes".into(),
    })?;
    entry.identity_summary = state.identity_summary;
    entry.queued = state.queued;
    entry.queue_dropped = state.queue_dropped;
    entry.window_start = state.window_start;
    if let Some(run) = entry.run.as_mut() {
        run.taken = state.run_taken;
    }
    Ok(())
}

/// Where an entry's field is sealed: the session key and the field's name, written
/// into one buffer for every field of the entry.
struct Place {
    text: String,
    base: usize,
}

impl Place {
    fn new(key: &SessionKey) -> Self {
        let text = format!("entry\0{key}\0");
        Place {
            base: text.len(),
            text,
        }
    }

    fn of(&mut self, field: &str) -> &str {
        self.text.truncate(self.base);
        self.text.push_str(field);
        &self.text
    }
}

fn damaged(key: &SessionKey, field: &str) -> Error {
    Error::Encryption {
        problem: format!(
            "field {field} of session {key} does not open: it was altered, moved from another session, or sealed under another master key"
        ),
    }
}

/// A sealed field of a stored entry: its name, its sealed text, and its text opened
/// (`None` when its key is not among those given: destroyed with its owner, or not in
/// this key directory).
type StoredField = (&'static str, String, Option<String>);

/// Opens the entry's sealed fields; a field whose key is not among `data_keys` is left
/// out. Returns the fields as they were stored, to seal unchanged fields back as they
/// were and keep those that did not open.
fn open_entry(
    keys: &Keys,
    entry: &mut SessionEntry,
    data_keys: &[DataKey],
    key: &SessionKey,
) -> Result<Vec<StoredField>> {
    let mut stored = Vec::new();
    let mut place = Place::new(key);
    each_field(entry, |field, value| {
        let Some(text) = value.as_deref().filter(|text| is_sealed_text(text)) else {
            return Ok(());
        };
        let sealed_under = sealed_text_key(text).and_then(|id| key_with_id(data_keys, id));
        let opened = match sealed_under {
            Some(data_key) => keys
                .open_text(data_key, place.of(field), text)
                .ok_or_else(|| damaged(key, field))?,
            None => None,
        };
        stored.push((field, text.to_owned(), opened.clone()));
        *value = opened;
        Ok(())
    })?;
    Ok(stored)
}

/// How many times an update runs when the entry names keys it was not given.
const UPDATE_ATTEMPTS: usize = 3;

/// Whether a sealed field of `entry` names a key not among `data_keys`.
fn names_another_key(entry: &SessionEntry, data_keys: &[DataKey]) -> bool {
    sealed_texts(entry)
        .filter_map(sealed_text_key)
        .any(|id| key_with_id(data_keys, id).is_none())
}

/// Seals the entry's fields; one unchanged since it was opened keeps its stored form,
/// so an update that changes nothing writes nothing new, and one that did not open
/// (its key not given) and was not set anew stays as stored: an update never drops what
/// it could not read.
fn seal_entry(
    keys: &Keys,
    entry: &mut SessionEntry,
    data_key: &DataKey,
    key: &SessionKey,
    stored: &[StoredField],
) -> Result<()> {
    entry
        .extra
        .insert(crate::privacy::SEALED_ENTRY.to_owned(), true.into());
    let mut place = Place::new(key);
    each_field(entry, |field, value| {
        let Some(plain) = value.as_deref() else {
            *value = stored
                .iter()
                .find(|(name, _, opened)| *name == field && opened.is_none())
                .map(|(_, sealed, _)| sealed.clone());
            return Ok(());
        };
        // Kept as stored only when sealed under the current key: an update seals anew
        // what an earlier key sealed.
        let kept = stored
            .iter()
            .find(|(name, sealed, opened)| {
                *name == field
                    && opened.as_deref() == Some(plain)
                    && sealed_text_key(sealed) == Some(data_key.id())
            })
            .map(|(_, sealed, _)| sealed.clone());
        *value = Some(match kept {
            Some(sealed) => sealed,
            None => keys.seal_text(data_key, place.of(field), plain)?,
        });
        Ok(())
    })
}

/// Whose key seals a session's entry: its session key's.
pub(crate) fn owner(key: &SessionKey) -> KeyOwner {
    KeyOwner::SessionKey(key.as_str().to_owned())
}

/// The ids of the keys a stored entry's sealed fields were sealed under.
pub(crate) fn sealed_key_ids(entry: &SessionEntry) -> Vec<String> {
    sealed_texts(entry)
        .filter_map(sealed_text_key)
        .map(str::to_owned)
        .collect()
}

/// `inner`, its entries' text fields sealed under the data key of each session's key.
pub(crate) struct EncryptedSessions<S: ?Sized> {
    inner: Arc<S>,
    keys: Arc<Keys>,
}

impl<S: ?Sized> EncryptedSessions<S> {
    pub(crate) fn new(inner: Arc<S>, keys: Arc<Keys>) -> Self {
        EncryptedSessions { inner, keys }
    }

    async fn open(&self, session: &mut StoredSession) -> Result<()> {
        if sealed_texts(&session.entry).next().is_some() {
            let data_keys = self.keys.data_keys(&owner(&session.key)).await?;
            open_entry(&self.keys, &mut session.entry, &data_keys, &session.key)?;
        }
        Ok(())
    }

    async fn sealed(&self, sessions: &[StoredSession]) -> Result<Vec<StoredSession>> {
        let mut out = Vec::with_capacity(sessions.len());
        for session in sessions {
            let mut session = session.clone();
            let data_key = self.data_key(&session.key).await?;
            seal_entry(&self.keys, &mut session.entry, &data_key, &session.key, &[])?;
            out.push(session);
        }
        Ok(out)
    }

    async fn data_key(&self, key: &SessionKey) -> Result<DataKey> {
        self.keys
            .data_key(&owner(key), true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no data key".into(),
            })
    }
}

#[async_trait]
impl<S: SessionStore + ?Sized> SessionStore for EncryptedSessions<S> {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let mut found = self.inner.get(key).await?;
        if let Some(session) = &mut found {
            self.open(session).await?;
        }
        Ok(found)
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        // The keys are asked before the entry is read: a field sealed meanwhile under a
        // key made after them (a rotation, another worker) is not taken for erased —
        // the update runs again with the keys asked anew. Once more than that, the key
        // is gone (its owner was erased).
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Every key of the session key, the current one first; made when it has none.
            let mut data_keys = self.keys.data_keys(&owner(key)).await?;
            if data_keys.is_empty() {
                data_keys.push(self.data_key(key).await?);
            }
            let data_key = data_keys[0].clone();
            let mut newer_key = false;
            let mut sealed = |slot: &mut Option<SessionEntry>, revision: Option<Revision>| {
                let stored = match slot {
                    Some(entry) => {
                        if attempt < UPDATE_ATTEMPTS && names_another_key(entry, &data_keys) {
                            newer_key = true;
                            return Err(Error::Encryption {
                                problem: format!("session {key} was sealed under a key made after its update began"),
                            });
                        }
                        open_entry(&self.keys, entry, &data_keys, key)?
                    }
                    None => Vec::new(),
                };
                mutator(slot, revision)?;
                if let Some(entry) = slot {
                    seal_entry(&self.keys, entry, &data_key, key, &stored)?;
                }
                Ok(())
            };
            let mut result = match self.inner.apply(key, &mut sealed).await {
                Err(_) if newer_key => continue,
                result => result?,
            };
            if let Some(session) = &mut result {
                open_entry(&self.keys, &mut session.entry, &data_keys, key)?;
            }
            return Ok(result);
        }
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let mut sessions = self.inner.list(filter).await?;
        for session in &mut sessions {
            self.open(session).await?;
        }
        Ok(sessions)
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        self.inner.count(filter).await
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        self.inner.unreadable().await
    }

    async fn is_empty(&self) -> Result<bool> {
        self.inner.is_empty().await
    }

    fn as_erase(&self) -> Option<&dyn Erase> {
        self.inner.as_erase().map(|_| self as &dyn Erase)
    }

    async fn delete(&self, key: &SessionKey) -> Result<Option<SessionEntry>> {
        let mut removed = self.inner.delete(key).await?;
        if let Some(entry) = &mut removed {
            let data_keys = self.keys.data_keys(&owner(key)).await?;
            open_entry(&self.keys, entry, &data_keys, key)?;
        }
        Ok(removed)
    }
}

#[async_trait]
impl<S: SessionStore + ?Sized> Erase for EncryptedSessions<S> {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        match self.inner.as_erase() {
            Some(inner) => inner.remove_closed(session_ids).await,
            None => Ok(0),
        }
    }

    async fn replace_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        let sessions = self.sealed(sessions).await?;
        match self.inner.as_erase() {
            Some(inner) => inner.replace_closed(&sessions).await,
            None => Ok(0),
        }
    }

    async fn add_closed(&self, sessions: &[StoredSession]) -> Result<usize> {
        let sessions = self.sealed(sessions).await?;
        match self.inner.as_erase() {
            Some(inner) => inner.add_closed(&sessions).await,
            None => Ok(0),
        }
    }

    async fn erase_copies(&self, needles: &[String], vacuum: bool) -> Result<usize> {
        match self.inner.as_erase() {
            Some(inner) => inner.erase_copies(needles, vacuum).await,
            None => Ok(0),
        }
    }
}
