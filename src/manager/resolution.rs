//! What `resolve` decides, and why.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};

use std::time::Duration;

use crate::exactly_once::dedupe::{self, Intake};
use crate::freshness::policy::{
    Freshness, FreshnessInput, FreshnessPolicy, ResetType, StaleReason,
};
use crate::freshness::triggers::ModelRef;
use crate::identity::key::SessionKey;
use crate::inbound::record::{another_dm_sender, record_message, start_session, Inbound};
use crate::lane::{Arrival, Lane, QueueSettings};
use crate::store::entry::{SessionEntry, SessionStatus};
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

impl Reason {
    /// What a session started for this reason records in
    /// [`SessionEntry::start_reason`]: the reason's name, with a timeout named by what
    /// made the session stale (`daily` or `idle`).
    pub fn started_by(&self) -> &'static str {
        match self {
            Reason::Timeout(StaleReason::Daily) => "daily",
            Reason::Timeout(StaleReason::Idle) => "idle",
            other => other.as_str(),
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

/// The facts one message's resolution is decided from, gathered before the store's
/// atomic step: the message with its cleaned body and model hint, the policy, the time,
/// and what the drift gate and the dedupe check found.
pub(super) struct StepFacts<'a> {
    /// The message as it is recorded (its fork origin only on a new session).
    pub(super) inbound: Inbound<'a>,
    pub(super) policy: &'a Policy<'a>,
    pub(super) now: DateTime<Utc>,
    /// The session id the drift gate fired for, if it did.
    pub(super) drifted: Option<&'a str>,
    /// The turn that takes the message, when one does (not a plain resolution, not a
    /// bare reset): its lane is decided in this update ([`lane`](Self::lane)).
    pub(super) run: Option<RunFacts<'a>>,
    /// Record the message as taken: its intake, the dedupe window, and whether it is a
    /// bare reset (all done here).
    pub(super) dedupe: Option<(&'a Intake, Duration, bool)>,
}

/// What resolving a message decided, besides the entry it leaves under the key.
pub(super) struct Step {
    pub(super) decision: Decision,
    pub(super) reason: Reason,
    /// The entry a new session replaced.
    pub(super) previous: Option<SessionEntry>,
    /// The continued session's `systemSent` (false for a new session).
    pub(super) system_sent: bool,
    /// Whether the continued session's last run was aborted (false for a new session).
    pub(super) aborted_last_run: bool,
    /// When the session goes stale without further activity.
    pub(super) expires_at: Option<DateTime<Utc>>,
    /// How many people have written into a shared main DM session, when this message
    /// made it more than one.
    pub(super) shared_by: Option<usize>,
}

/// What the lane of a turn's message is decided from (see [`StepFacts::lane`]).
pub(super) struct RunFacts<'a> {
    /// The turn (a process and a token).
    pub(super) holder: &'a str,
    /// Its channel message id, as the dedupe records name it.
    pub(super) inbound_id: Option<&'a str>,
    /// A queued message it waits with instead of queuing its own (see
    /// [`Mode::Turn`](super::Mode::Turn)).
    pub(super) adopt: Option<&'a str>,
    /// The manager's queue settings.
    pub(super) queue: &'a QueueSettings,
}

impl StepFacts<'_> {
    /// The turn's lane in the session `entry` as it is about to be written: it takes the
    /// run now, waits in the queue, or is dropped (see [`crate::lane`]); `None` for a
    /// plain resolution or a bare reset, which start no run.
    pub(super) fn lane(&self, entry: &mut SessionEntry) -> Option<Lane> {
        let run = self.run.as_ref()?;
        let settings = crate::lane::effective(entry, run.queue, self.policy.channel);
        Some(crate::lane::arrive(
            entry,
            &Arrival {
                holder: run.holder,
                message: self.inbound.message,
                inbound_id: run.inbound_id,
                adopt: run.adopt,
                now_ms: self.inbound.now_ms,
            },
            &settings,
        ))
    }

    /// Decides, from the entry `current` under the key, the entry to leave there and
    /// what happened. No I/O and nothing else changes: the same entry and facts give the
    /// same decision (a new session gets a fresh id each time), so the store may run it
    /// again when its atomic step retries.
    pub(crate) fn step(&self, current: Option<SessionEntry>) -> (SessionEntry, Step) {
        let inbound = &self.inbound;
        let (decision, reason) =
            self.policy
                .decide(inbound.key, current.as_ref(), self.now, self.drifted);
        let (system_sent, aborted_last_run) = match (&current, decision) {
            (Some(entry), Decision::Continue) => (
                entry.system_sent.unwrap_or(false),
                entry.aborted_last_run.unwrap_or(false),
            ),
            _ => (false, false),
        };
        let (mut entry, previous) = match decision {
            Decision::Continue => (current.unwrap_or_default(), None),
            Decision::New => {
                let mut entry = start_session(current.clone(), inbound.now_ms);
                entry.start_reason = Some(reason.started_by().to_owned());
                (entry, current)
            }
        };
        let is_new = decision == Decision::New;
        let shared_by = another_dm_sender(inbound.key, inbound.message, &entry);
        record_message(
            &mut entry,
            &Inbound {
                fork: inbound.fork.filter(|_| is_new),
                ..*inbound
            },
        );
        if let Some((intake, window, bare_reset)) = self.dedupe {
            dedupe::record(&mut entry, intake, inbound.now_ms, window, bare_reset);
        }
        let expires_at = match self.policy.freshness(inbound.key, &entry, self.now) {
            Freshness::Fresh { expires_at } => expires_at,
            Freshness::Stale { .. } => None,
        };
        let step = Step {
            decision,
            reason,
            previous,
            system_sent,
            aborted_last_run,
            expires_at,
            shared_by,
        };
        (entry, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::freshness::policy::ResetConfig;
    use crate::inbound::InboundMessage;

    /// A step decided twice from the same entry — as a store whose atomic step retries
    /// runs it — decides the same, and a step from its own result continues.
    #[test]
    fn a_step_is_a_pure_decision_over_the_current_entry() {
        let key = SessionKey::parse("agent:main:telegram:dm:42").unwrap();
        let message = InboundMessage::direct("telegram", "42", "hi");
        let freshness = ResetConfig::default();
        let policy = Policy {
            freshness: &freshness,
            reset_type: ResetType::Direct,
            channel: Some("telegram"),
            reset_triggered: false,
        };
        let now = DateTime::parse_from_rfc3339("2026-01-13T07:47:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let facts = StepFacts {
            inbound: Inbound {
                key: &key,
                message: &message,
                group: None,
                body: "hi",
                model: None,
                fork: None,
                agent_identity: None,
                people: &crate::identity::key::DefaultKeyBuilder::new(),
                now_ms: now.timestamp_millis() as u64,
            },
            policy: &policy,
            now,
            drifted: None,
            run: None,
            dedupe: None,
        };

        let (first, step) = facts.step(None);
        let (again, step_again) = facts.step(None);
        assert_eq!(
            (step.decision, step.reason),
            (Decision::New, Reason::NoSession)
        );
        assert_eq!(
            (step_again.decision, step_again.reason),
            (step.decision, step.reason)
        );
        assert_eq!(
            first.status,
            Some(SessionStatus::Idle),
            "a run is taken by the lane"
        );
        assert_eq!(again.status, first.status);
        assert!(step.previous.is_none() && !step.system_sent);

        let (next, continued) = facts.step(Some(first.clone()));
        assert_eq!(continued.decision, Decision::Continue);
        assert_eq!(next.session_id, first.session_id);
        assert!(
            !continued.aborted_last_run,
            "the step takes no run: the lane does"
        );
    }
}
