//! Encryption at rest: transcripts sealed under a data key per person, erased by
//! destroying the key.
//!
//! Turn it on with [`SessionManagerBuilder::encryption`](crate::manager::SessionManagerBuilder::encryption)
//! and a [`KeyProvider`] — the crate's [`KeyFiles`] keeps each data key in its own file,
//! sealed by a [`MasterKey`] the host keeps out of the store (an environment variable, a
//! file). What a person or the model wrote — message text, tool calls and results, the
//! chatter a mention carries, attachments' names and captions, custom data, summaries —
//! is sealed with AES-256-GCM under the data key of the person the line names
//! (its `log.personId`), else of its session, with a fresh nonce, bound to its agent,
//! session and line: a sealed value copied to another line or session does not open.
//! Ids, times, roles and token counts stay clear, so the stores still find, order and
//! count lines.
//!
//! [`SessionManager::forget_person`](crate::SessionManager::forget_person) then also
//! destroys the person's keys and those of her sessions: her lines in every copy the
//! erase cannot rewrite (a backup, an archive, a replica's disk) no longer open, and read
//! as [`ERASED_TEXT`].
//!
//! ```
//! use agent_sessions::prelude::*;
//! use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # std::env::set_var("BOT_MASTER_KEY", MasterKey::generate()?.to_base64());
//! let master = MasterKey::from_env("BOT_MASTER_KEY")?;
//! let keys = KeyFiles::open(dir.path().join("keys"), master)?;
//! let url = format!("sqlite:{}", dir.path().join("sessions.db").display());
//! # let url = format!("json:{}", dir.path().join("state").display());
//! let manager = SessionManager::connect(&url).await?.encryption(keys).build()?;
//!
//! let turn = manager.turn(&InboundMessage::direct("telegram", "42", "my PIN is 4711")).await?;
//! turn.complete("Noted.").await?;
//! let turn = manager.turn(&InboundMessage::direct("telegram", "42", "what was it?")).await?;
//! let said: Vec<String> = turn.messages().await?.into_iter().map(|m| m.content).collect();
//! assert!(said.iter().any(|text| text.contains("4711")), "the bot still reads it");
//! # Ok(())
//! # }
//! ```

mod chatter;
mod entries;
mod key;
mod opened;
mod rotation;
mod sealed;
mod search;
mod transcripts;

pub use key::{DataKey, KeyFiles, KeyOwner, KeyProvider, MasterKey};
pub use rotation::DataKeyRotation;
pub use sealed::ERASED_TEXT;
pub(crate) use sealed::PERSON_ON_CHANNEL;

pub(crate) use opened::Keys;
pub(crate) use search::SealedIndex;
pub(crate) use transcripts::EncryptedTranscripts;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::manager::{Seams, SessionManager, SessionManagerBuilder};
use crate::ops::{MigrateOptions, MigrationProgress, MigrationReport};
use crate::store::Backend;
use crate::transcript::TranscriptStore;
use chatter::{EncryptedChatter, EncryptedEvents};
use entries::EncryptedSessions;

impl SessionManagerBuilder {
    /// Seals what the manager keeps, under data keys from `keys` (feature
    /// `encryption`; default: plain text): transcripts, the text fields of session
    /// entries, group chatter and system events, a data key per person, else per
    /// session; [`SessionManager::forget_person`] destroys the person's. See
    /// [`privacy::encryption`](crate::privacy::encryption);
    /// [`build`](SessionManagerBuilder::build) refuses it for an OpenClaw state
    /// directory ([`SessionManager::connect_openclaw`]), whose transcripts OpenClaw
    /// reads.
    pub fn encryption(mut self, keys: impl KeyProvider + 'static) -> Self {
        self.manager.seams.data_keys = Some(Arc::new(Keys::new(Arc::new(keys))));
        self
    }
}

/// Copies the plain store `from` into `to`, sealing on the way, under data keys from
/// `keys`, everything [`SessionManagerBuilder::encryption`] seals: how encryption is
/// turned on for a store that holds sessions already. Otherwise it is
/// [`ops::migrate_with`](crate::ops::migrate_with): what the target already holds is
/// left alone, and the report compares what the target reads back, opened, with the
/// source ([`MigrationReport::verified`]). Stop the bot first, then point it at `to`
/// with the same keys.
///
/// [`Error::Encryption`] when `from` is sealed already; [`Error::InvalidOption`] when
/// `from` and `to` are one store.
///
/// ```
/// use agent_sessions::ops::{MigrateOptions, NoProgress};
/// use agent_sessions::prelude::*;
/// use agent_sessions::privacy::encryption::{migrate_sealed, KeyFiles, MasterKey};
/// use agent_sessions::store::Backend;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let plain_url = format!("json:{}", dir.path().join("plain").display());
/// let manager = SessionManager::connect(&plain_url).await?.build()?;
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "my PIN is 4711")).await?;
/// turn.complete("Noted.").await?;
///
/// let master = MasterKey::generate()?;
/// let keys = || KeyFiles::open(dir.path().join("keys"), master.clone());
/// let sealed_url = format!("json:{}", dir.path().join("sealed").display());
/// let (from, to) = (Backend::open(&plain_url).await?, Backend::open(&sealed_url).await?);
/// let report = migrate_sealed(&from, &to, keys()?, &MigrateOptions::default(), &NoProgress).await?;
/// assert!(report.verified());
///
/// let manager = SessionManager::connect(&sealed_url).await?.encryption(keys()?).build()?;
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "what was it?")).await?;
/// assert!(turn.messages().await?.iter().any(|m| m.content.contains("4711")));
/// # Ok(())
/// # }
/// ```
pub async fn migrate_sealed(
    from: &Backend,
    to: &Backend,
    keys: impl KeyProvider + 'static,
    options: &MigrateOptions,
    progress: &dyn MigrationProgress,
) -> Result<MigrationReport> {
    if from.url().same_store(to.url()) {
        return Err(Error::InvalidOption {
            option: "to",
            problem: "sealing copies a store into another one: give a new store as the target",
        });
    }
    let sealed = from
        .sessions()
        .list(&crate::store::ListFilter::all())
        .await?
        .into_iter()
        .find(|s| s.entry.extra.get(crate::privacy::SEALED_ENTRY) == Some(&true.into()));
    if let Some(session) = sealed {
        return Err(Error::Encryption {
            problem: format!(
                "{} is sealed already (session {} is): copy it with ops::migrate, and open the copy with the same keys",
                from.url(),
                session.key
            ),
        });
    }
    let keys = Arc::new(Keys::new(Arc::new(keys)));
    let events_keys: Arc<dyn KeyProvider> = keys.clone();
    let target = to.through(
        Arc::new(EncryptedSessions::new(to.sessions().clone(), keys.clone())),
        Arc::new(EncryptedTranscripts::new(to.transcripts().clone(), keys)),
        Arc::new(EncryptedChatter::new(
            to.chatter().clone(),
            events_keys.clone(),
        )),
        Arc::new(EncryptedEvents::new(
            to.system_events().clone(),
            events_keys,
        )),
    );
    crate::ops::migrate::migrate_reading(
        from,
        &target,
        options,
        progress,
        transcripts::read_back_as,
    )
    .await
}

/// Refuses encryption where it cannot work: an OpenClaw state directory, or a manager
/// without transcripts.
pub(crate) fn check(seams: &Seams, openclaw_tree: bool) -> Result<()> {
    if seams.data_keys.is_none() {
        return Ok(());
    }
    if openclaw_tree {
        return Err(Error::InvalidOption {
            option: "encryption",
            problem: "an OpenClaw state directory is read by OpenClaw too, which cannot open sealed transcripts: connect to a json:, sqlite: or postgres:// store of the crate's own",
        });
    }
    if seams.transcripts.is_none() {
        return Err(Error::NotConfigured {
            what: "a transcript store to seal (SessionManagerBuilder::transcripts or ::backend)",
        });
    }
    Ok(())
}

/// Wraps the manager's stores so that what they keep is sealed, when it has keys.
pub(crate) fn seal(manager: &mut SessionManager) {
    let Some(keys) = manager.seams.data_keys.clone() else {
        return;
    };
    let seams = &mut manager.seams;
    seams.store = Arc::new(EncryptedSessions::new(seams.store.clone(), keys.clone()));
    seams.transcripts = seams
        .transcripts
        .take()
        .map(|t| Arc::new(EncryptedTranscripts::new(t, keys.clone())) as Arc<dyn TranscriptStore>);
    let keys: Arc<dyn KeyProvider> = keys;
    seams.history = Arc::new(EncryptedChatter::new(seams.history.clone(), keys.clone()));
    manager.system_events = Arc::new(EncryptedEvents::new(
        manager.system_events.clone(),
        keys.clone(),
    ));
}
