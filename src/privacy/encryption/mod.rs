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
mod sealed;
mod transcripts;

pub use key::{DataKey, KeyFiles, KeyOwner, KeyProvider, MasterKey};
pub use sealed::ERASED_TEXT;

pub(crate) use chatter::{EncryptedChatter, EncryptedEvents};
pub(crate) use entries::EncryptedSessions;
pub(crate) use transcripts::EncryptedTranscripts;
