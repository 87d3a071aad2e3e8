//! Encryption at rest: transcripts sealed under a data key per person, erased by
//! destroying the key.
//!
//! Turn it on with [`SessionManagerBuilder::encryption`](crate::manager::SessionManagerBuilder::encryption)
//! and a [`KeyProvider`] — the crate's [`KeyFiles`] keeps each data key in its own file,
//! sealed by a [`MasterKey`] the host keeps out of the store (an environment variable, a
//! file). What a person or the model wrote — message text, tool calls and results, the
//! chatter a mention carries, attachments' names and captions, custom data, summaries —
//! is sealed with XChaCha20-Poly1305 under the data key of the person the line names
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
mod transcripts;

pub use key::{DataKey, KeyFiles, KeyOwner, KeyProvider, MasterKey};
pub use rotation::DataKeyRotation;
pub use sealed::ERASED_TEXT;

pub(crate) use opened::Keys;
pub(crate) use transcripts::EncryptedTranscripts;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::manager::{Seams, SessionManager, SessionManagerBuilder};
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
