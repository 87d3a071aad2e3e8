//! What `resolve` decides, and why.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};

use crate::entry::{SessionEntry, SessionStatus};
use crate::key::SessionKey;
use crate::lifecycle::freshness::{
    Freshness, FreshnessInput, FreshnessPolicy, ResetType, StaleReason,
};
use crate::lifecycle::triggers::ModelRef;
use crate::store::StoredSession;

/// Whether a message starts a new session or continues one (the kernel HTTP API's
/// `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// A new session (new `sessionId`) starts with this message.
    New,
    /// The message continues the current session.
    Continue,
}

impl Decision {
    /// The decision's name: `new` or `continue`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Decision::New => "new",
            Decision::Continue => "continue",
        }
    }
}

/// Why [`Decision`] was taken (the kernel HTTP API's `reason`), in the order the policy
/// checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// An authorised sender asked for a reset (`/new`, `/reset`, a reset phrase).
    ExplicitReset,
    /// There is no session for this key yet.
    NoSession,
    /// The session was closed.
    SessionClosed,
    /// The session went stale: the daily boundary passed, or it idled too long.
    Timeout(StaleReason),
    /// The topic-drift gate judged the message a new topic.
    TopicDrift,
    /// The session was prepared (spawned, forked, opened) and this is its first message.
    FirstMessage,
    /// The session is fresh: the message continues it.
    WithinTimeout,
}

impl Reason {
    /// The reason's name: `explicit_reset`, `no_session`, `session_closed`, `timeout`,
    /// `topic_drift`, `first_message` or `within_timeout`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::ExplicitReset => "explicit_reset",
            Reason::NoSession => "no_session",
            Reason::SessionClosed => "session_closed",
            Reason::Timeout(_) => "timeout",
            Reason::TopicDrift => "topic_drift",
            Reason::FirstMessage => "first_message",
            Reason::WithinTimeout => "within_timeout",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Timeout(stale) => write!(f, "timeout ({stale})"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// The answer to [`SessionManager::resolve`](crate::SessionManager::resolve): which
/// session a message belongs to, whether it is new, and why.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Resolution {
    /// The session's key.
    pub key: SessionKey,
    /// The session after this message was recorded (entry and revision).
    pub session: StoredSession,
    /// The session this message replaced, when a new one started over an old one.
    pub previous: Option<SessionEntry>,
    /// New or continue.
    pub decision: Decision,
    /// Why.
    pub reason: Reason,
    /// Whether a reset trigger was used.
    pub reset_triggered: bool,
    /// The text for the model: the message without its reset trigger and model hint.
    pub body: String,
    /// Whether the system prompt was already sent in this session.
    pub system_sent: bool,
    /// Whether the session's last run was aborted.
    pub aborted_last_run: bool,
    /// The model a reset's hint switched the session to.
    pub model_override: Option<ModelRef>,
    /// When the session goes stale without further messages (`None`: never), under the
    /// freshness policy as it stood when the message arrived.
    pub expires_at: Option<DateTime<Utc>>,
}

impl Resolution {
    /// Whether this message started a new session.
    pub fn is_new(&self) -> bool {
        self.decision == Decision::New
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.session.entry.session_id
    }

    /// The entry after this message was recorded.
    pub fn entry(&self) -> &SessionEntry {
        &self.session.entry
    }
}

/// The decision policy (resets, closed sessions, timeouts, topic drift), over
/// OpenClaw's freshness rules.
pub(crate) struct Policy<'a> {
    pub(crate) freshness: &'a dyn FreshnessPolicy,
    pub(crate) reset_type: ResetType,
    pub(crate) channel: Option<&'a str>,
    pub(crate) reset_triggered: bool,
}

impl Policy<'_> {
    /// Decides for `current` at `now`; `drifted` names the session id the drift gate
    /// fired for, if it did.
    pub(crate) fn decide(
        &self,
        key: &SessionKey,
        current: Option<&SessionEntry>,
        now: DateTime<Utc>,
        drifted: Option<&str>,
    ) -> (Decision, Reason) {
        if self.reset_triggered {
            return (Decision::New, Reason::ExplicitReset);
        }
        // An entry without a session id holds metadata only (OpenClaw #65659).
        let Some(entry) = current.filter(|e| !e.session_id.is_empty()) else {
            return (Decision::New, Reason::NoSession);
        };
        if entry.status.as_ref().is_some_and(SessionStatus::is_closed) {
            return (Decision::New, Reason::SessionClosed);
        }
        if let Freshness::Stale { reason, .. } = self.freshness(key, entry, now) {
            return (Decision::New, Reason::Timeout(reason));
        }
        if drifted == Some(entry.session_id.as_str()) {
            return (Decision::New, Reason::TopicDrift);
        }
        if entry.message_count == Some(0) {
            (Decision::Continue, Reason::FirstMessage)
        } else {
            (Decision::Continue, Reason::WithinTimeout)
        }
    }

    pub(crate) fn freshness(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        now: DateTime<Utc>,
    ) -> Freshness {
        self.freshness.evaluate(
            &FreshnessInput {
                key,
                entry,
                reset_type: self.reset_type,
                channel: self.channel,
            },
            now,
        )
    }
}
