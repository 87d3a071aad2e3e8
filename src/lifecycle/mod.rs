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

pub(crate) mod clock;
pub(crate) mod drift;
pub(crate) mod freshness;
pub(crate) mod triggers;

pub use clock::{from_millis, Clock, ManualClock, SystemClock};
pub use drift::{DriftClassifier, DriftVerdict};
pub use freshness::{
    Freshness, FreshnessInput, FreshnessPolicy, ResetConfig, ResetMode, ResetPolicy, ResetSpec,
    ResetType, StaleReason, Zone,
};
pub use triggers::{
    ModelCatalog, ModelHint, ModelRef, ResetTriggers, StaticModelCatalog, TriggerMatch,
};
