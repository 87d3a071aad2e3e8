//! When a session starts, goes on and goes stale.
//!
//! * Daily and idle resets per chat type and channel: the [`FreshnessPolicy`] seam and
//!   its [`ResetConfig`].
//! * Explicit resets: `/new`, `/reset`, reset phrases and model hints
//!   ([`ResetTriggers`]).
//! * A change of topic as a reason for a new session (the [`DriftClassifier`] seam).
//! * The [`Clock`] every time decision goes through.
//!
//! [`SessionManager::resolve`](crate::SessionManager::resolve) puts them together.
//!
//! # Daily and idle resets
//!
//! When a session goes stale: OpenClaw's daily and idle resets.
//!
//! A [`ResetConfig`] holds OpenClaw's `session.reset`, `resetByType`, `resetByChannel`
//! and legacy `idleMinutes` settings plus a time zone, and resolves them into the
//! [`ResetPolicy`] for one session: a channel override wins over a chat-type setting,
//! which wins over the default. [`FreshnessPolicy`] is the seam: given a session and the
//! time, it answers fresh (and until when) or stale (why, and since when).
//!
//! ```
//! use std::time::Duration;
//! use agent_sessions::freshness::{ResetConfig, ResetSpec, ResetType, StaleReason, Zone};
//!
//! let config = ResetConfig::default()                 // daily at 04:00
//!     .time_zone(Zone::parse("Europe/Berlin")?)
//!     .by_type(ResetType::Group, ResetSpec::idle(120)) // groups: 2 idle hours
//!     .by_channel("whatsapp", ResetSpec::idle(30));    // WhatsApp: 30 idle minutes
//!
//! let policy = config.policy(ResetType::Group, Some("whatsapp"));
//! assert_eq!(policy.idle, Some(Duration::from_secs(30 * 60)));
//! assert_eq!(policy.daily_at_hour, None);
//! # Ok::<(), agent_sessions::Error>(())
//! ```
//!
//! # Reset triggers
//!
//! Explicit resets: `/new`, `/reset`, the kernel HTTP API's reset phrases, and model
//! hints.
//!
//! ```
//! use agent_sessions::freshness::ResetTriggers;
//! use agent_sessions::InboundMessage;
//!
//! let triggers = ResetTriggers::default(); // "/new", "/reset"
//! let message = InboundMessage::direct("telegram", "42", "/NEW summarize the design doc");
//! let matched = triggers.detect(&message).expect("a reset");
//! assert_eq!(matched.trigger, "/new");
//! assert_eq!(matched.body, "summarize the design doc");
//!
//! // In a group, only the owner and the allow-list may reset.
//! let group = InboundMessage::group("slack", "C1", "U7", "/new");
//! assert!(triggers.detect(&group).is_none());
//! assert!(triggers.detect(&group.clone().from_owner()).is_some());
//! ```
//!
//! # Clocks
//!
//! Time, behind a trait, so every time decision can be tested.
//!
//! The crate never reads the system clock directly: [`SessionManager`](crate::SessionManager)
//! asks its [`Clock`]. Tests use [`ManualClock`] and move time by hand.
//!
//! ```
//! use std::time::Duration;
//! use agent_sessions::freshness::{Clock, ManualClock};
//!
//! let clock = ManualClock::at_millis(1_770_350_000_000);
//! clock.advance(Duration::from_secs(61 * 60));
//! assert_eq!(clock.now_millis(), 1_770_350_000_000 + 61 * 60 * 1000);
//! ```

pub(crate) mod clock;
pub(crate) mod drift;
pub(crate) mod policy;
pub(crate) mod triggers;

pub use clock::{from_millis, Clock, ManualClock, SystemClock};
pub use drift::{DriftClassifier, DriftVerdict};
pub use policy::{
    Freshness, FreshnessInput, FreshnessPolicy, ResetConfig, ResetMode, ResetPolicy, ResetSpec,
    ResetType, StaleReason, Zone,
};
pub use triggers::{ModelCatalog, ModelRef, ResetTriggers, StaticModelCatalog, TriggerMatch};
