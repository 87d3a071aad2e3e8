//! An in-process store for tests and ephemeral bots.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::{
    entry_revision, run_many_mutator, run_mutator, ListFilter, ManyMutator, Mutator, Revision,
    SessionStore, Slots, StoredSession,
};
use crate::entry::SessionEntry;
use crate::error::{Error, Result};
use crate::key::SessionKey;

/// A [`SessionStore`] in memory: fast, atomic per key, gone when the process ends.
///
/// Cloning a `MemoryStore` is cheap and yields a handle to the same sessions.
///
/// ```
/// use agent_sessions::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let store = MemoryStore::new();
/// let key = SessionKey::parse("agent:main:main")?;
/// store.put(&key, SessionEntry::new_session(1)).await?;
/// assert!(store.get(&key).await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    sessions: std::sync::Arc<Mutex<HashMap<SessionKey, Slot>>>,
}

#[derive(Debug)]
struct Slot {
    entry: SessionEntry,
    revision: Revision,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<SessionKey, Slot>> {
        // A panicking mutator cannot leave a half-written slot (the map is only changed
        // after the mutator returns), so a poisoned lock still guards consistent data.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        Ok(self.sessions().get(key).map(|slot| StoredSession {
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
        let mut sessions = self.sessions();
        let (before, revision) = match sessions.get(key) {
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
        match after {
            None => {
                sessions.remove(key);
                Ok(None)
            }
            Some(entry) => {
                let revision = entry_revision(&entry).map_err(|source| Error::Serialize {
                    key: key.clone(),
                    source,
                })?;
                sessions.insert(
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
    }

    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut ManyMutator<'_>,
    ) -> Result<Slots> {
        let mut sessions = self.sessions();
        let before = Slots::new(keys, |key| {
            sessions
                .get(key)
                .map(|slot| (slot.entry.clone(), slot.revision))
        });
        let mut after = run_many_mutator(mutator, &before)?;
        // Every new revision first: a failure to serialise leaves the map untouched.
        let mut revisions = Vec::with_capacity(after.len());
        for (slot, old) in after.iter().zip(&before) {
            let revision = match &slot.entry {
                Some(entry) if slot.entry != old.entry => {
                    Some(entry_revision(entry).map_err(|source| Error::Serialize {
                        key: slot.key().clone(),
                        source,
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
            match (&slot.entry, revision) {
                (Some(entry), Some(revision)) => {
                    sessions.insert(
                        slot.key.clone(),
                        Slot {
                            entry: entry.clone(),
                            revision,
                        },
                    );
                }
                _ => {
                    sessions.remove(&slot.key);
                }
            }
        }
        Ok(after)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let matching = self
            .sessions()
            .iter()
            .filter(|(key, slot)| filter.matches(key, &slot.entry))
            .map(|(key, slot)| StoredSession {
                key: key.clone(),
                entry: slot.entry.clone(),
                revision: slot.revision,
            })
            .collect();
        Ok(filter.finish(matching))
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if filter.is_everything() {
            return Ok(self.sessions().len());
        }
        Ok(self.list(filter).await?.len())
    }
}
