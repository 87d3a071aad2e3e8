//! Durable, correct conversation sessions for chat bots and AI-agent hosts.
//!
//! `agent-sessions` decides which session an inbound message belongs to and keeps each
//! session's record safe on disk, in the same files OpenClaw writes, so a bot built on
//! this crate can open an existing `~/.openclaw` tree and lose nothing.
//!
//! The three types you need first:
//!
//! * [`SessionKey`] — the validated name of a conversation (`agent:main:telegram:dm:42`),
//!   built from a [`Conversation`] by a [`KeyBuilder`] such as [`DefaultKeyBuilder`];
//! * [`SessionEntry`] — what is kept about a session, field for field as OpenClaw
//!   writes it, with unknown fields preserved;
//! * [`SessionStore`] — where entries live, with an atomic per-key read-modify-write:
//!   [`JsonFileStore`] (OpenClaw's `sessions.json`, the default) or [`MemoryStore`].
//!
//! ```
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
//! let store = JsonFileStore::new(dir.path()); // e.g. "~/.openclaw"
//!
//! let key = keys.build(&Conversation::direct("telegram", "123456789"))?;
//! let now_ms = 1_770_350_123_456;
//! store
//!     .update(&key, |slot| {
//!         let entry = slot.get_or_insert_with(|| SessionEntry::new_session(now_ms));
//!         entry.updated_at = now_ms;
//!         entry.last_channel = Some("telegram".into());
//!     })
//!     .await?;
//!
//! let session = store.get(&key).await?.expect("just written");
//! assert_eq!(session.entry.last_channel.as_deref(), Some("telegram"));
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//!
//! * `testing` — [`testing`]: the conformance suite every [`SessionStore`] must pass,
//!   and the [`store_conformance_tests!`] macro to run it against your own store.
//! * `sqlite` — [`SqliteStore`](store::SqliteStore): sessions, transcripts and the
//!   message log in one SQLite file (SQLite is compiled in).
//! * `postgres` — [`PostgresStore`](store::PostgresStore): the same on a PostgreSQL
//!   server, with a connection pool.
//! * `http` — [`http`]: the sessions HTTP service, an axum router serving the kernel
//!   API (`/kernel/sessions/…`) over any [`SessionManager`].
//!
//! The `agent-sessions` command-line tool (list, show, reset, prune, export, import,
//! migrate, doctor, serve) is the separate crate `agent-sessions-cli`.
//!
//! # Observability
//!
//! The crate logs through [`tracing`]: lock waits and who holds the lock, writes and
//! their durations, corrupt files, cache hits. Install any `tracing` subscriber to see
//! why a turn was slow.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod context;
pub mod entry;
mod error;
mod fsutil;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod identity;
mod json_text;
pub mod key;
pub mod lifecycle;
pub mod manager;
pub mod memory;
pub mod openclaw;
pub mod paths;
pub mod search;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod transcript;

pub use context::inbound::{InboundMessage, Sender};
pub use entry::{
    ChatType, DeliveryContext, SessionEntry, SessionOrigin, SessionSource, SessionStatus, ThreadId,
};
pub use error::{
    AccessDenial, CorruptProblem, DeleteRefusal, Error, IdKind, KeyProblem, LockHolder, Result,
};
pub use key::{
    AgentId, Conversation, DefaultKeyBuilder, DmScope, KeyBuilder, PeerKind, SessionKey,
};
pub use manager::{Decision, Reason, Resolution, SessionManager};
pub use store::{
    Durability, JsonFileOptions, JsonFileStore, ListFilter, LockOptions, MemoryStore, Revision,
    SessionStore, SessionStoreExt, StatusFilter, StoredSession, CLOSED_SESSIONS_PER_KEY,
};

/// The README's and the OpenClaw compatibility page's examples compile, and the identity
/// and search guides' examples run.
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/identity-and-access.md")]
    struct IdentityAndAccess;
    #[doc = include_str!("../docs/search-and-analytics.md")]
    struct SearchAndAnalytics;
    #[doc = include_str!("../docs/openclaw-compatibility.md")]
    struct OpenClawCompatibility;
    #[doc = include_str!("../docs/turns.md")]
    struct Turns;
}

/// The names most programs use, for `use agent_sessions::prelude::*`.
pub mod prelude {
    pub use crate::context::chat::{ChatMessage, ChatRole};
    pub use crate::context::inbound::InboundMessage;
    pub use crate::context::reply::ReplyPayload;
    pub use crate::entry::SessionEntry;
    pub use crate::key::{
        AgentId, Conversation, DefaultKeyBuilder, DmScope, KeyBuilder, PeerKind, SessionKey,
    };
    pub use crate::manager::{
        Decision, Reason, Resolution, SessionManager, Turn, TurnAction, TurnReply,
    };
    pub use crate::memory::usage::TurnUsage;
    pub use crate::store::{
        JsonFileStore, ListFilter, MemoryStore, SessionStore, SessionStoreExt, StoredSession,
    };
}
