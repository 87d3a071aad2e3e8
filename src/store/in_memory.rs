//! An in-process store for tests and ephemeral bots.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::{
    entry_revision, replaced_session, run_many_mutator, run_mutator, ListFilter, ManyMutator,
    Mutator, Revision, SessionStore, Slots, StoredSession, CLOSED_SESSIONS_PER_KEY,
};
use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::store::entry::SessionEntry;

/// A [`SessionStore`] in memory: fast, atomic per key, gone when the process ends.
///
/// Cloning a `InMemoryStore` is cheap and yields a handle to the same sessions.
///
/// ```
/// use agent_sessions::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let store = InMemoryStore::new();
/// let key = SessionKey::parse("agent:main:main")?;
/// store.put(&key, SessionEntry::new_session(1)).await?;
/// assert!(store.get(&key).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    sessions: std::sync::Arc<Mutex<Sessions>>,
}

/// The current session of each key, and the closed sessions they replaced (oldest
/// first), under one lock so a replacement is one step.
#[derive(Debug, Default)]
struct Sessions {
    live: HashMap<SessionKey, Slot>,
    closed: Vec<StoredSession>,
}

#[derive(Debug)]
struct Slot {
    entry: SessionEntry,
    revision: Revision,
}

impl Sessions {
    /// Keeps `closed`, the session `key` had before it was replaced, within
    /// [`CLOSED_SESSIONS_PER_KEY`].
    fn keep_closed(&mut self, key: &SessionKey, closed: SessionEntry) -> Result<()> {
        let revision = entry_revision(&closed)
            .map_err(|source| Error::encode(format!("session entry {key}"), source))?;
        let closed_log = &mut self.closed;
        closed_log.retain(|c| c.entry.session_id != closed.session_id);
        closed_log.push(StoredSession {
            key: key.clone(),
            entry: closed,
            revision,
        });
        let of_key = closed_log.iter().filter(|c| c.key == *key).count();
        if of_key > CLOSED_SESSIONS_PER_KEY {
            let mut surplus = of_key - CLOSED_SESSIONS_PER_KEY;
            closed_log.retain(|c| {
                let drop = surplus > 0 && c.key == *key;
                surplus -= usize::from(drop);
                !drop
            });
        }
        Ok(())
    }
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryStore::default()
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        // A panicking mutator cannot leave a half-written slot (the map is only changed
        // after the mutator returns), so a poisoned lock still guards consistent data.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SessionStore for InMemoryStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        Ok(self.sessions().live.get(key).map(|slot| StoredSession {
            key: key.clone(),
            entry: slot.entry.clone(),
            revision: slot.revision,
        }))
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        crate::ops::telemetry::update("memory", std::slice::from_ref(key), async move {
            let mut sessions = self.sessions();
            let (before, revision) = match sessions.live.get(key) {
                Some(slot) => (Some(slot.entry.clone()), Some(slot.revision)),
                None => (None, None),
            };
            let after = run_mutator(mutator, before.as_ref(), revision)?;
            if after == before {
                return Ok(after.map(|entry| StoredSession {
                    key: key.clone(),
                    entry,
                    revision: revision.expect("an existing entry has a revision"),
                }));
            }
            let serialize_error = |source| Error::encode(format!("session entry {key}"), source);
            if let Some(closed) = replaced_session(before.as_ref(), after.as_ref()) {
                sessions.keep_closed(key, closed)?;
            }
            match after {
                None => {
                    sessions.live.remove(key);
                    Ok(None)
                }
                Some(entry) => {
                    let revision = entry_revision(&entry).map_err(serialize_error)?;
                    sessions.live.insert(
                        key.clone(),
                        Slot {
                            entry: entry.clone(),
                            revision,
                        },
                    );
                    Ok(Some(StoredSession {
                        key: key.clone(),
                        entry,
                        revision,
                    }))
                }
            }
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let sessions = self.sessions();
        // Ordered and cut to the page by reference: only the page is copied.
        let mut matching: Vec<(&SessionKey, &SessionEntry, Revision)> = sessions
            .live
            .iter()
            .filter(|(key, slot)| filter.matches(key, &slot.entry))
            .map(|(key, slot)| (key, &slot.entry, slot.revision))
            .collect();
        if filter.status.includes_replaced() {
            matching.extend(
                sessions
                    .closed
                    .iter()
                    .filter(|c| filter.matches(&c.key, &c.entry))
                    .map(|c| (&c.key, &c.entry, c.revision)),
            );
        }
        matching.sort_by(|a, b| {
            (Reverse(a.1.updated_at), a.0, &a.1.session_id).cmp(&(
                Reverse(b.1.updated_at),
                b.0,
                &b.1.session_id,
            ))
        });
        matching.truncate(filter.limit.unwrap_or(usize::MAX));
        Ok(matching
            .into_iter()
            .map(|(key, entry, revision)| StoredSession {
                key: key.clone(),
                entry: entry.clone(),
                revision,
            })
            .collect())
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if filter.is_everything() {
            return Ok(self.sessions().live.len());
        }
        Ok(self.list(filter).await?.len())
    }

    fn as_erase(&self) -> Option<&dyn crate::store::Erase> {
        Some(self)
    }
}

#[async_trait]
impl crate::store::Erase for InMemoryStore {
    /// An in-memory store keeps no copies.
    async fn erase_copies(&self, _needles: &[String], _vacuum: bool) -> Result<usize> {
        Ok(0)
    }

    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        let mut sessions = self.sessions();
        let before = sessions.closed.len();
        sessions
            .closed
            .retain(|c| !session_ids.contains(&c.entry.session_id));
        Ok(before - sessions.closed.len())
    }
    async fn add_closed(&self, closed: &[StoredSession]) -> Result<usize> {
        let mut sessions = self.sessions();
        let mut added = 0;
        for session in closed {
            let id = &session.entry.session_id;
            let held = sessions.live.values().any(|s| s.entry.session_id == *id)
                || sessions.closed.iter().any(|c| c.entry.session_id == *id);
            if !held {
                sessions.keep_closed(&session.key, session.entry.clone())?;
                added += 1;
            }
        }
        Ok(added)
    }
    async fn replace_closed(&self, replacements: &[StoredSession]) -> Result<usize> {
        let mut sessions = self.sessions();
        let mut replaced = 0;
        for closed in sessions.closed.iter_mut() {
            if let Some(new) = replacements
                .iter()
                .find(|r| r.entry.session_id == closed.entry.session_id)
            {
                closed.entry = new.entry.clone();
                closed.revision = crate::store::entry_revision(&new.entry)
                    .map_err(|e| crate::Error::encode("a closed session", e))?;
                replaced += 1;
            }
        }
        Ok(replaced)
    }
}

#[async_trait]
impl crate::store::MultiKeyStore for InMemoryStore {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut ManyMutator<'_>,
    ) -> Result<Slots> {
        crate::ops::telemetry::update("memory", keys, async move {
            let mut sessions = self.sessions();
            let before = Slots::new(keys, |key| {
                sessions
                    .live
                    .get(key)
                    .map(|slot| (slot.entry.clone(), slot.revision))
            });
            let mut after = run_many_mutator(mutator, &before)?;
            // Every new revision first: a failure to serialise leaves the map untouched.
            let mut revisions = Vec::with_capacity(after.len());
            for (slot, old) in after.iter().zip(&before) {
                let revision = match &slot.entry {
                    Some(entry) if slot.entry != old.entry => {
                        Some(entry_revision(entry).map_err(|source| {
                            Error::encode(format!("session entry {}", slot.key()), source)
                        })?)
                    }
                    Some(_) => old.revision(),
                    None => None,
                };
                revisions.push(revision);
            }
            for ((slot, old), revision) in after.slots.iter_mut().zip(&before).zip(revisions) {
                slot.revision = revision;
                if slot.entry == old.entry {
                    continue;
                }
                if let Some(closed) = replaced_session(old.entry.as_ref(), slot.entry.as_ref()) {
                    sessions.keep_closed(&slot.key, closed)?;
                }
                match (&slot.entry, revision) {
                    (Some(entry), Some(revision)) => {
                        sessions.live.insert(
                            slot.key.clone(),
                            Slot {
                                entry: entry.clone(),
                                revision,
                            },
                        );
                    }
                    _ => {
                        sessions.live.remove(&slot.key);
                    }
                }
            }
            Ok(after)
        })
        .await
    }
}
