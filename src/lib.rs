//! Durable, correct conversation sessions for chat bots and AI-agent hosts.
//!
//! `agent-sessions` decides which session each inbound message belongs to, what the
//! model sees of it, and what is sent back — and keeps every session's record safe on
//! disk, in the same files OpenClaw writes, so a bot built on this crate can open an
//! existing `~/.openclaw` tree and lose nothing.
//!
//! A bot calls one [`SessionManager`], once per inbound message:
//!
//! ```
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = format!("json:{}", dir.path().display());
//! // OpenClaw's files ("json:~/.openclaw"), "sqlite:sessions.db" or "postgres://…".
//! let manager = SessionManager::connect(&url).await?.build()?;
//!
//! let message = InboundMessage::direct("telegram", "42", "When is my shift?");
//! let turn = manager.turn(&message).await?; // the session: new, continued or reset
//! if turn.needs_model() {
//!     let conversation: Vec<ChatMessage> = turn.messages().await?; // within the budget
//!     let reply = format!("({} messages in)", conversation.len()); // your model here
//!     for payload in turn.complete(reply).await? {
//!         println!("send: {}", payload.text.unwrap_or_default()); // your channel here
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The defaults suit a bot many people write to: each DM sender gets a session of their
//! own ([`DmScope::PerChannelPeer`]), sessions reset daily at 04:00 local time and do
//! not expire when idle, in groups the model runs only when the bot is addressed, and a
//! message delivered again is answered once. The README's "Defaults you inherit" lists
//! them with the call that changes each.
//!
//! Underneath, each step is its own part: [`SessionKey`]s built by a [`KeyBuilder`],
//! [`SessionEntry`]s kept by a [`SessionStore`] ([`JsonFileStore`], [`InMemoryStore`],
//! SQLite, PostgreSQL) with an atomic per-key read-modify-write, the lifecycle in
//! [`freshness`], what comes in and what the model sees in [`inbound`], what goes out in [`reply`], transcripts in [`transcript`].
//!
//! # Feature flags
//!
//! * `sqlite` — [`SqliteStore`](store::SqliteStore): sessions, transcripts and the
//!   message log in one SQLite file (SQLite is compiled in).
//! * `postgres` — [`PostgresStore`](store::PostgresStore): the same on a PostgreSQL
//!   server, with a connection pool.
//! * `http` — [`http`]: the sessions HTTP service, an axum router serving the kernel
//!   API (`/kernel/sessions/…`) over any [`SessionManager`].
//! * `inspector` — the session inspector, a web page for operators at `/ui` of the
//!   HTTP service (`http::Inspector`; implies `http`).
//! * `metrics` — counters and histograms through the [`metrics`](https://docs.rs/metrics)
//!   facade, to whatever recorder the host installs (see [`ops::telemetry`]).
//! * `testing` — [`store::testing`]: the conformance suites every [`SessionStore`] and
//!   transcript store must pass, and the macros that run them against your own.
//!
//! The `agent-sessions` command-line tool (list, show, reset, prune, export, import,
//! migrate, doctor, serve) is the separate crate `agent-sessions-cli`; the teloxide,
//! rig and async-openai integrations are crates of their own too.
//!
//! # Observability
//!
//! The crate logs through [`tracing`]: lock waits and who holds the lock, writes and
//! their durations, corrupt files, cache hits. Install any `tracing` subscriber to see
//! why a turn was slow; [`ops::telemetry`] lists the spans and metrics.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod exactly_once;
pub mod freshness;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod identity;
pub mod inbound;
pub mod lane;
pub mod manager;
pub mod memory;
pub mod ops;
pub mod privacy;
pub mod reply;
pub mod store;
pub mod transcript;

pub use error::{
    AccessDenial, CorruptProblem, DeleteRefusal, Error, IdKind, KeyProblem, LockHolder, Result,
};
pub use identity::{
    AgentId, Conversation, DefaultKeyBuilder, DmScope, KeyBuilder, PeerKind, SessionKey,
};
pub use inbound::{InboundMessage, Sender};
pub use manager::{Decision, Reason, Resolution, Session, SessionManager};
pub use store::entry::{
    ChatType, DeliveryContext, SessionEntry, SessionOrigin, SessionSource, SessionStatus, ThreadId,
};
pub use store::{
    Durability, InMemoryStore, JsonFileOptions, JsonFileStore, ListCursor, ListFilter, LockOptions,
    MultiKeyStore, Revision, SessionStore, SessionStoreExt, StatusFilter, StoredSession,
    CLOSED_SESSIONS_PER_KEY,
};

/// Every Rust example in the README and in `docs/` is compiled, and run unless marked
/// `no_run` or `ignore`, as a doctest.
#[cfg(doctest)]
mod doc_pages {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/architecture.md")]
    struct Architecture;
    #[doc = include_str!("../docs/backends.md")]
    struct Backends;
    #[doc = include_str!("../docs/context.md")]
    struct Context;
    #[cfg(feature = "encryption")]
    #[doc = include_str!("../docs/encryption.md")]
    struct Encryption;
    #[doc = include_str!("../docs/http-api.md")]
    struct HttpApi;
    #[doc = include_str!("../docs/identity-and-access.md")]
    struct IdentityAndAccess;
    #[doc = include_str!("../docs/lifecycle.md")]
    struct Lifecycle;
    #[doc = include_str!("../docs/memory.md")]
    struct Memory;
    #[doc = include_str!("../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../docs/on-disk-format.md")]
    struct OnDiskFormat;
    #[doc = include_str!("../docs/openclaw-compatibility.md")]
    struct OpenClawCompatibility;
    #[doc = include_str!("../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/personal-data.md")]
    struct PersonalData;
    #[doc = include_str!("../docs/scaling.md")]
    struct Scaling;
    #[doc = include_str!("../docs/search-and-analytics.md")]
    struct SearchAndAnalytics;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/transcripts.md")]
    struct Transcripts;
    #[doc = include_str!("../docs/turns.md")]
    struct Turns;
}

pub mod prelude;
