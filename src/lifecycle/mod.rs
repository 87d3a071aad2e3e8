//! When a session starts, goes on and goes stale.
//!
//! * [`freshness`] — daily and idle resets per chat type and channel: the
//!   [`FreshnessPolicy`](freshness::FreshnessPolicy) seam and its [`ResetConfig`](freshness::ResetConfig).
//! * [`triggers`] — explicit resets: `/new`, `/reset`, reset phrases and model hints
//!   ([`ResetTriggers`](triggers::ResetTriggers)).
//! * [`drift`] — a change of topic as a reason for a new session (the
//!   [`DriftClassifier`](drift::DriftClassifier) seam).
//! * [`clock`] — the [`Clock`](clock::Clock) every time decision goes through.
//!
//! [`SessionManager::resolve`](crate::SessionManager::resolve) puts them together.

pub mod clock;
pub mod drift;
pub mod freshness;
pub mod triggers;
