//! Group chatter and system events sealed at rest: what waits for a session's next
//! turn, sealed under its sender's data key, else its session key's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::key::{
    is_sealed_text, key_with_id, open_text, seal_text, seal_text_repeatable, sealed_text_key,
    DataKey, KeyOwner, KeyProvider,
};
use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::inbound::chatter::{
    ChatterBuffer, ChatterClaim, ChatterEdit, ChatterEntry, EntryEditor, GroupChatter,
};
use crate::inbound::events::{SystemEvent, SystemEvents};

/// Whose key seals a chatter entry: its sender's, by the id erasing them names
/// ([`KeyOwner::person`]); else its group's.
pub(crate) fn owner(group: &str, entry: &ChatterEntry) -> KeyOwner {
    match sender_of(entry) {
        Some(id) => KeyOwner::person(id),
        None => KeyOwner::SessionKey(group.to_owned()),
    }
}

/// The owner an earlier build sealed a sender's entry under: their id as written,
/// when that differs.
fn earlier_owner(group: &str, entry: &ChatterEntry) -> Option<KeyOwner> {
    let earlier = KeyOwner::Person(sender_of(entry)?.to_owned());
    (earlier != owner(group, entry)).then_some(earlier)
}

/// The entry's sender id (the person's, when the message named one).
fn sender_of(entry: &ChatterEntry) -> Option<&str> {
    entry
        .sender_id
        .as_deref()
        .filter(|id| !id.trim().is_empty())
}

/// Every key that may have sealed `entry`: its owner's, then its earlier owner's.
async fn keys_of(
    keys: &dyn KeyProvider,
    group: &str,
    entry: &ChatterEntry,
) -> Result<Vec<DataKey>> {
    let mut all = keys.data_keys(&owner(group, entry)).await?;
    if let Some(earlier) = earlier_owner(group, entry) {
        all.extend(keys.data_keys(&earlier).await?);
    }
    Ok(all)
}

fn place(group: &str, field: &str) -> String {
    format!("chatter\0{group}\0{field}")
}

fn damaged(what: &str) -> Error {
    Error::Encryption {
        problem: format!(
            "{what} does not open: it was altered, moved from another group or session, or sealed under another master key"
        ),
    }
}

/// `inner`, each entry's sender label and text sealed.
pub(crate) struct EncryptedChatter<C: ?Sized> {
    inner: Arc<C>,
    keys: Arc<dyn KeyProvider>,
}

impl<C: ?Sized> EncryptedChatter<C> {
    pub(crate) fn new(inner: Arc<C>, keys: Arc<dyn KeyProvider>) -> Self {
        EncryptedChatter { inner, keys }
    }

    async fn key(&self, owner: &KeyOwner, create: bool) -> Result<Option<DataKey>> {
        self.keys.data_key(owner, create).await
    }

    async fn seal(&self, group: &str, mut entry: ChatterEntry) -> Result<ChatterEntry> {
        let key = self
            .key(&owner(group, &entry), true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no data key".into(),
            })?;
        seal_entry(&key, group, &mut entry)?;
        Ok(entry)
    }

    /// The entries opened; one whose key was destroyed is left out (its sender was
    /// erased).
    async fn open(&self, group: &str, entries: Vec<ChatterEntry>) -> Result<Vec<ChatterEntry>> {
        let mut keys = HashMap::new();
        let mut opened = Vec::with_capacity(entries.len());
        for mut entry in entries {
            let owner = (owner(group, &entry), earlier_owner(group, &entry));
            if !keys.contains_key(&owner) {
                let all = keys_of(&*self.keys, group, &entry).await?;
                keys.insert(owner.clone(), all);
            }
            if open_entry(&keys[&owner], group, &mut entry)? {
                opened.push(entry);
            }
        }
        Ok(opened)
    }
}

fn seal_entry(key: &DataKey, group: &str, entry: &mut ChatterEntry) -> Result<()> {
    entry.sender = seal_text(key, &place(group, "sender"), &entry.sender)?;
    entry.body = seal_text(key, &place(group, "body"), &entry.body)?;
    Ok(())
}

/// Opens `entry` with the one of `keys` that sealed it; `false` when that key was
/// destroyed.
fn open_entry(keys: &[DataKey], group: &str, entry: &mut ChatterEntry) -> Result<bool> {
    for (field, value) in [("sender", &mut entry.sender), ("body", &mut entry.body)] {
        if !is_sealed_text(value) {
            continue;
        }
        let Some(key) = sealed_text_key(value).and_then(|id| key_with_id(keys, id)) else {
            return Ok(false);
        };
        match open_text(key, &place(group, field), value) {
            Some(Some(text)) => *value = text,
            Some(None) => return Ok(false),
            None => return Err(damaged(&format!("group chatter of {group}"))),
        }
    }
    Ok(true)
}

#[async_trait]
impl<C: ChatterBuffer + ?Sized> ChatterBuffer for EncryptedChatter<C> {
    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        let entry = self.seal(key, entry).await?;
        self.inner.append(key, entry).await
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let entries = self.inner.entries(key).await?;
        self.open(key, entries).await
    }

    async fn clear(&self, key: &str) -> Result<()> {
        self.inner.clear(key).await
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let entries = self.inner.take(key).await?;
        self.open(key, entries).await
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        let entry = self.seal(key, entry).await?;
        self.inner.append_once(key, entry, window).await
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        let entries = self.inner.claim(key, claim, take_over).await?;
        self.open(key, entries).await
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        self.inner.claims(key).await
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        self.inner.settle(key, claim_id).await
    }

    async fn release(&self, key: &str, claim_id: &str, entries: Vec<ChatterEntry>) -> Result<()> {
        let mut sealed = Vec::with_capacity(entries.len());
        for entry in entries {
            sealed.push(self.seal(key, entry).await?);
        }
        self.inner.release(key, claim_id, sealed).await
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        // The editor runs inside the store's update, where no key can be asked for:
        // the keys of every entry kept are fetched first.
        type Owners = (KeyOwner, Option<KeyOwner>);
        let mut keys: HashMap<Owners, (Option<DataKey>, Vec<DataKey>)> = HashMap::new();
        for (group, chatter) in self.inner.export_groups().await? {
            for entry in chatter.all_entries() {
                let owners = (owner(&group, entry), earlier_owner(&group, entry));
                if let std::collections::hash_map::Entry::Vacant(slot) = keys.entry(owners) {
                    let current = self.key(&slot.key().0, false).await?;
                    let all = keys_of(&*self.keys, &group, entry).await?;
                    slot.insert((current, all));
                }
            }
        }
        let sealed_edit = |group: &str, stored: &ChatterEntry| -> ChatterEdit {
            let mut entry = stored.clone();
            let owners = (owner(group, &entry), earlier_owner(group, &entry));
            // Written since the keys were asked (a new sender): left as it is.
            let Some((key, all)) = keys.get(&owners).cloned() else {
                return ChatterEdit::Keep;
            };
            match open_entry(&all, group, &mut entry) {
                // Its key is not among its owner's: destroyed with its owner (nothing of
                // it can be read), made since the keys were asked (a rotation on another
                // worker), or in another key directory. Left as it is: an edit never
                // drops what it could not read.
                Ok(false) => ChatterEdit::Keep,
                Err(_) => ChatterEdit::Keep,
                Ok(true) => match edit(group, &entry) {
                    ChatterEdit::Replace(mut new) => {
                        let sealed = key
                            .as_ref()
                            .filter(|_| owner(group, &new) == owner(group, stored))
                            .map(|key| seal_entry(key, group, &mut new));
                        match sealed {
                            Some(Ok(())) => ChatterEdit::Replace(new),
                            // A replacement under another owner, whose key is not at
                            // hand: removed rather than kept in plain text.
                            _ => ChatterEdit::Remove,
                        }
                    }
                    other => other,
                },
            }
        };
        self.inner.edit_entries(&sealed_edit).await
    }

    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        let mut groups = self.inner.export_groups().await?;
        for (key, group) in &mut groups {
            let entries = std::mem::take(&mut group.entries).into_iter().collect();
            group.entries = self.open(key, entries).await?.into();
            for claimed in &mut group.claimed {
                let entries = std::mem::take(&mut claimed.entries);
                claimed.entries = self.open(key, entries).await?;
            }
        }
        Ok(groups)
    }

    async fn import_group(&self, key: &str, mut group: GroupChatter) -> Result<bool> {
        let mut sealed = std::collections::VecDeque::with_capacity(group.entries.len());
        for entry in std::mem::take(&mut group.entries) {
            sealed.push_back(match is_sealed_text(&entry.body) {
                true => entry,
                false => self.seal(key, entry).await?,
            });
        }
        group.entries = sealed;
        for claimed in &mut group.claimed {
            let mut sealed = Vec::with_capacity(claimed.entries.len());
            for entry in std::mem::take(&mut claimed.entries) {
                sealed.push(match is_sealed_text(&entry.body) {
                    true => entry,
                    false => self.seal(key, entry).await?,
                });
            }
            claimed.entries = sealed;
        }
        self.inner.import_group(key, group).await
    }
}

fn event_place(key: &SessionKey) -> String {
    format!("event\0{key}")
}

/// `inner`, each event's text sealed under its session key's data key — repeatably,
/// so a repeat of the last event is still skipped.
pub(crate) struct EncryptedEvents<E: ?Sized> {
    inner: Arc<E>,
    keys: Arc<dyn KeyProvider>,
}

impl<E: ?Sized> EncryptedEvents<E> {
    pub(crate) fn new(inner: Arc<E>, keys: Arc<dyn KeyProvider>) -> Self {
        EncryptedEvents { inner, keys }
    }

    async fn open(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<Vec<SystemEvent>> {
        if !events.iter().any(|e| is_sealed_text(&e.text)) {
            return Ok(events);
        }
        let data_keys = self
            .keys
            .data_keys(&KeyOwner::SessionKey(key.as_str().to_owned()))
            .await?;
        let mut opened = Vec::with_capacity(events.len());
        for mut event in events {
            if is_sealed_text(&event.text) {
                let sealed_under =
                    sealed_text_key(&event.text).and_then(|id| key_with_id(&data_keys, id));
                let Some(data_key) = sealed_under else {
                    continue;
                };
                match open_text(data_key, &event_place(key), &event.text) {
                    Some(Some(text)) => event.text = text,
                    Some(None) => continue,
                    None => return Err(damaged(&format!("a system event of session {key}"))),
                }
            }
            opened.push(event);
        }
        Ok(opened)
    }

    async fn seal(&self, key: &SessionKey, text: &str) -> Result<String> {
        let data_key = self
            .keys
            .data_key(&KeyOwner::SessionKey(key.as_str().to_owned()), true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no data key".into(),
            })?;
        seal_text_repeatable(&data_key, &event_place(key), text)
    }
}

#[async_trait]
impl<E: SystemEvents + ?Sized> SystemEvents for EncryptedEvents<E> {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        let text = text.trim();
        if text.is_empty() {
            return self.inner.enqueue(key, text, at).await;
        }
        let sealed = self.seal(key, text).await?;
        self.inner.enqueue(key, &sealed, at).await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        let events = self.inner.drain(key).await?;
        self.open(key, events).await
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        let mut queues = self.inner.export_queues().await?;
        for (key, events) in &mut queues {
            *events = self.open(key, std::mem::take(events)).await?;
        }
        Ok(queues)
    }

    async fn import_queue(&self, key: &SessionKey, mut events: Vec<SystemEvent>) -> Result<bool> {
        for event in &mut events {
            if !is_sealed_text(&event.text) {
                event.text = self.seal(key, &event.text).await?;
            }
        }
        self.inner.import_queue(key, events).await
    }
}
