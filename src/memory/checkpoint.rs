//! Checkpoints: moments when an introspection pass looks back over a session's recent (documented in the parent module).

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::store::entry::SessionEntry;
use crate::transcript::{CheckpointReason, SessionEvent};

/// What an [`Introspector`] sees.
#[derive(Debug, Clone, PartialEq)]
pub struct IntrospectionInput {
    /// The session.
    pub key: SessionKey,
    /// Its entry (for `new_session`, the session that just ended).
    pub entry: SessionEntry,
    /// Why the checkpoint was taken.
    pub reason: CheckpointReason,
    /// The session's events since its last checkpoint.
    pub events: Vec<SessionEvent>,
}

/// What an [`Introspector`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntrospectionOutcome {
    /// New working memory for the session.
    pub working_memory: Option<String>,
    /// A new description of the session.
    pub description: Option<String>,
}

/// Looks back over a session at a checkpoint (an introspection agent). The host implements
/// it, usually with a model; the manager stores what it returns.
///
/// The manager calls it on `Session::checkpoint` (manual or idle, as the host
/// decides), every N turns (`turn_limit`, when configured), and when a session is
/// replaced by a new one (`new_session`, over the old session's events; only the
/// working memory carries over to the new session).
#[async_trait]
pub trait Introspector: Send + Sync {
    /// Looks at `input`.
    async fn introspect(&self, input: &IntrospectionInput) -> Result<IntrospectionOutcome>;
}

/// Whether a versioned snapshot must be rebuilt (OpenClaw's skills snapshot): when there
/// is none, on the session's first turn, or when `version` is newer than the stored
/// snapshot's `version` field.
pub(crate) fn snapshot_needs_refresh(
    stored: Option<&Value>,
    first_turn: bool,
    version: u64,
) -> bool {
    let stored_version = stored
        .and_then(|s| s.get("version"))
        .and_then(Value::as_u64);
    stored.is_none() || first_turn || stored_version.is_none_or(|v| v < version)
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn snapshot_needs_refresh() {
        use crate::memory::checkpoint::snapshot_needs_refresh;
        use serde_json::json;

        let stored = json!({"prompt": "…", "version": 3});
        assert!(!snapshot_needs_refresh(Some(&stored), false, 3));
        assert!(snapshot_needs_refresh(Some(&stored), false, 4));
        assert!(snapshot_needs_refresh(Some(&stored), true, 3));
        assert!(snapshot_needs_refresh(None, false, 1));
    }
}
