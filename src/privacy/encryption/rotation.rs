//! Rotating data keys: each owner gets a new key, what an earlier key sealed is sealed
//! anew under it, and the earlier keys are let go once nothing sealed under them is
//! left.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::chatter;
use super::entries::{owner as entry_owner, sealed_key_ids};
use super::key::{sealed_text_key, KeyOwner, KeyProvider};
use super::sealed::{owner_of, sealed_value};
use super::{EncryptedTranscripts, Keys};
use crate::error::{Error, Result};
use crate::inbound::chatter::ChatterEdit;
use crate::manager::SessionManager;
use crate::store::entry::SessionStatus;
use crate::store::{Backend, ListFilter, StatusFilter};
use crate::transcript::lines::session_id_of_name;
use crate::transcript::TranscriptEntry;

/// What [`SessionManager::rotate_data_keys`] or [`SessionManager::retire_data_keys`]
/// did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataKeyRotation {
    /// Owners given a new key (a rotation), or earlier keys let go (retiring).
    pub keys: usize,
    /// Transcript lines sealed anew under their owner's new key.
    pub lines: usize,
    /// Session entries, current and closed, sealed anew.
    pub sessions: usize,
    /// Group chatter entries sealed anew.
    pub chatter: usize,
    /// Rotating: values left under an earlier key (changed while the pass ran, or
    /// waiting system events, which are sealed once); the next pass seals them.
    /// Retiring: earlier keys kept because something is still sealed under them.
    pub left: usize,
    /// Rotating: transcript lines that did not open under the key they name (altered
    /// on disk, or moved from another line or session), left as they are and under
    /// that key; the pass seals the others. Reading them is an error, as before.
    pub damaged: usize,
}

/// The owners a rotation pass gave a new key, each once.
#[derive(Default)]
pub(crate) struct Rotated {
    owners: HashSet<KeyOwner>,
    /// How many of them had a key to replace.
    keys: usize,
}

impl Rotated {
    /// Gives `owner` a new key, unless this pass did.
    pub(crate) async fn rotate(&mut self, keys: &dyn KeyProvider, owner: KeyOwner) -> Result<()> {
        if !self.owners.contains(&owner) {
            self.keys += usize::from(keys.rotate_key(&owner).await?);
            self.owners.insert(owner);
        }
        Ok(())
    }
}

/// Whose keys are asked for which values: every sealed value the store holds, by its
/// owner, with the ids of the keys they were sealed under.
type KeysInUse = HashMap<KeyOwner, HashSet<String>>;

/// Refuses keys that hold none of those the store's sealed values were sealed under:
/// another key directory (a staging copy's, another bot's) made with the same master
/// key. A pass with it would take every sealed value for erased.
async fn check_directory(keys: &Keys, in_use: &KeysInUse) -> Result<()> {
    if in_use.is_empty() {
        return Ok(());
    }
    for (owner, ids) in in_use {
        if keys
            .data_keys(owner)
            .await?
            .iter()
            .any(|key| ids.contains(key.id()))
        {
            return Ok(());
        }
    }
    Err(Error::Encryption {
        problem: "none of the keys the store's sealed values were sealed under is among these keys: this is not the key directory the store was sealed with (or every key it named was destroyed); nothing was changed".into(),
    })
}

impl SessionManager {
    /// Gives every owner of sealed data in the store (a person, a session, a session
    /// key) a new data key, and seals anew under it what its earlier keys sealed:
    /// transcript lines, in place and at their length, session entries (current and
    /// closed) and group chatter (feature `encryption`).
    ///
    /// Turns go on meanwhile: what they write is sealed under the new keys, and what
    /// they read opens under the new key or an earlier one. The pass is bounded by one
    /// transcript at a time. A pass stopped at any point (a killed process) loses
    /// nothing — the earlier keys stay until [`retire_data_keys`](Self::retire_data_keys)
    /// finds nothing sealed under them — and running it again finishes it (each owner
    /// it meets gets one more key; [`KeyFiles`](super::KeyFiles) keeps 16 per owner
    /// until the earlier ones are retired). A transcript line that does not open under
    /// the key it names (altered or moved) is left as it is and counted in
    /// [`DataKeyRotation::damaged`]; the pass goes on.
    ///
    /// [`Error::NotConfigured`] without encryption or without a backend (one the
    /// manager connected to); [`Error::Encryption`] when the key provider cannot rotate.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let keys = KeyFiles::open(dir.path().join("keys"), MasterKey::generate()?)?;
    /// let url = format!("json:{}", dir.path().join("state").display());
    /// let manager = SessionManager::connect(&url).await?.encryption(keys).build()?;
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "my PIN is 4711")).await?;
    /// turn.complete("Noted.").await?;
    ///
    /// let rotation = manager.rotate_data_keys().await?;
    /// assert!(rotation.keys >= 1 && rotation.lines >= 2);
    /// let retired = manager.retire_data_keys().await?;
    /// assert_eq!(retired.left, 0);
    ///
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "what was it?")).await?;
    /// let seen = turn.messages().await?;
    /// assert!(seen.iter().any(|m| m.content.contains("4711")));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rotate_data_keys(&self) -> Result<DataKeyRotation> {
        let sealed = SealedData::of(self)?;
        let SealedData { keys, backend, .. } = &sealed;
        check_directory(keys, &sealed.keys_in_use().await?).await?;
        let mut rotated = Rotated::default();
        let mut report = DataKeyRotation::default();
        let agent = sealed.agent.as_ref();

        let transcripts = EncryptedTranscripts::new(backend.transcripts().clone(), keys.clone());
        for (agent, name) in backend.transcripts().transcript_names(agent).await? {
            let resealed = transcripts.reseal(&agent, &name, &mut rotated).await?;
            report.lines += resealed.lines;
            report.left += resealed.left;
            report.damaged += resealed.damaged;
        }

        let current = sealed.sessions_under(StatusFilter::Current).await?;
        let closed_filter = StatusFilter::Only(vec![SessionStatus::Closed]);
        let closed = sealed.sessions_under(closed_filter.clone()).await?;
        let mut closed_ids = HashSet::new();
        for (session, ids) in current.iter().chain(&closed) {
            let owner = entry_owner(&session.key);
            rotated.rotate(&**keys, owner.clone()).await?;
            let Some(now) = keys.data_key(&owner, false).await? else {
                continue;
            };
            if ids.iter().all(|id| id == now.id()) {
                continue;
            }
            if session.entry.status == Some(SessionStatus::Closed) {
                closed_ids.insert(session.entry.session_id.clone());
            } else {
                // Opened and sealed again by the manager's store: under the new key.
                self.seams
                    .store
                    .apply(&session.key, &mut |_, _| Ok(()))
                    .await?;
                report.sessions += 1;
            }
        }
        if !closed_ids.is_empty() {
            let opened: Vec<_> = self
                .seams
                .store
                .list(&sealed.filter(closed_filter))
                .await?
                .into_iter()
                .filter(|s| closed_ids.contains(&s.entry.session_id))
                .collect();
            if let Some(erase) = self.seams.store.as_erase() {
                report.sessions += erase.replace_closed(&opened).await?;
            }
        }

        let mut sealed_chatter = false;
        for (group, held) in backend.chatter().export_groups().await? {
            for entry in held.all_entries() {
                let owner = chatter::owner(&group, entry);
                rotated.rotate(&**keys, owner).await?;
                sealed_chatter |= sealed_text_key(&entry.body).is_some();
            }
        }
        if sealed_chatter {
            report.chatter += self
                .seams
                .history
                .edit_entries(&|_, entry| ChatterEdit::Replace(entry.clone()))
                .await?;
        }
        // System events are sealed once, under the key they were queued with, and
        // wait for their session's next turn under it.
        for (key, events) in backend.system_events().export_queues().await? {
            let owner = entry_owner(&key);
            let now = keys.data_key(&owner, false).await?;
            let now = now.as_ref().map(|key| key.id());
            report.left += events
                .iter()
                .filter(|e| sealed_text_key(&e.text).is_some_and(|id| Some(id) != now))
                .count();
        }
        report.keys = rotated.keys;
        Ok(report)
    }

    /// Lets go of the data keys [`rotate_data_keys`](Self::rotate_data_keys) replaced,
    /// each once nothing the store holds is sealed under it (feature `encryption`):
    /// it reads every sealed value first. Run it once a rotation pass has finished;
    /// keys still needed are kept and counted in [`DataKeyRotation::left`].
    ///
    /// A backup taken before the rotation opens only while the earlier keys exist:
    /// retiring them makes it unreadable, like an erase.
    pub async fn retire_data_keys(&self) -> Result<DataKeyRotation> {
        let sealed = SealedData::of(self)?;
        let in_use = sealed.keys_in_use().await?;
        let keys = &sealed.keys;
        check_directory(keys, &in_use).await?;
        let mut report = DataKeyRotation::default();
        for (owner, ids) in in_use {
            let all = keys.data_keys(&owner).await?;
            let keep: Vec<_> = all
                .iter()
                .skip(1)
                .filter(|key| ids.contains(key.id()))
                .cloned()
                .collect();
            report.left += keep.len();
            if all.len() > 1 + keep.len() {
                report.keys += keys.retire_keys(&owner, &keep).await?;
            }
        }
        Ok(report)
    }
}

/// What a rotation walks: the manager's keys, its backend, and the agent it is isolated
/// to.
struct SealedData {
    keys: Arc<Keys>,
    backend: Backend,
    agent: Option<crate::AgentId>,
}

impl SealedData {
    /// `manager`'s sealed data; [`Error::NotConfigured`] without encryption or backend.
    fn of(manager: &SessionManager) -> Result<Self> {
        let keys = manager
            .seams
            .data_keys
            .clone()
            .ok_or(Error::NotConfigured {
                what: "encryption (SessionManagerBuilder::encryption)",
            })?;
        let backend = manager.seams.backend.clone().ok_or(Error::NotConfigured {
            what: "the backend the sealed data is in (SessionManager::connect or SessionManagerBuilder::backend)",
        })?;
        let agent = manager.settings.isolated_to.clone();
        Ok(Self {
            keys,
            backend,
            agent,
        })
    }

    fn filter(&self, status: StatusFilter) -> ListFilter {
        ListFilter {
            agent: self.agent.clone(),
            status,
            ..ListFilter::default()
        }
    }

    /// The stored sessions of `status`, as stored, with the ids of the keys their
    /// sealed fields were sealed under.
    async fn sessions_under(
        &self,
        status: StatusFilter,
    ) -> Result<Vec<(crate::store::StoredSession, Vec<String>)>> {
        let mut found = Vec::new();
        for session in self.backend.sessions().list(&self.filter(status)).await? {
            let ids = sealed_key_ids(&session.entry);
            if !ids.is_empty() {
                found.push((session, ids));
            }
        }
        Ok(found)
    }

    /// Every sealed value's owner, and the keys they were sealed under.
    async fn keys_in_use(&self) -> Result<KeysInUse> {
        let backend = &self.backend;
        let mut in_use = KeysInUse::new();
        let mut add = |owner: KeyOwner, id: &str| {
            in_use.entry(owner).or_default().insert(id.to_owned());
        };
        let agent = self.agent.as_ref();
        let transcripts = backend.transcripts();
        for (agent, name) in transcripts.transcript_names(agent).await? {
            let session_id = session_id_of_name(&name);
            let lines = transcripts.export_lines(&agent, &name).await?;
            for line in lines.into_iter().flatten() {
                let Ok(entry) =
                    crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes())
                else {
                    continue;
                };
                if let Some(value) = sealed_value(&entry) {
                    add(owner_of(&entry, &agent, &session_id), value.key_id());
                }
            }
        }
        for (session, ids) in self.sessions_under(StatusFilter::Any).await? {
            for id in ids {
                add(entry_owner(&session.key), &id);
            }
        }
        for (group, held) in backend.chatter().export_groups().await? {
            for entry in held.all_entries() {
                for text in [&entry.sender, &entry.body] {
                    if let Some(id) = sealed_text_key(text) {
                        add(chatter::owner(&group, entry), id);
                    }
                }
            }
        }
        for (key, events) in backend.system_events().export_queues().await? {
            for event in events {
                if let Some(id) = sealed_text_key(&event.text) {
                    add(entry_owner(&key), id);
                }
            }
        }
        Ok(in_use)
    }
}
