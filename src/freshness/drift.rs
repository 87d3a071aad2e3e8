//! The optional topic-drift gate: ask a model whether a message starts a new topic, and
//! start a new session when it is confident enough.

use async_trait::async_trait;

use crate::error::Result;
use crate::inbound::InboundMessage;
use crate::store::StoredSession;

/// A classifier's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriftVerdict {
    /// Whether the message changes the topic.
    pub drifted: bool,
    /// How sure the classifier is, 0–1.
    pub confidence: f32,
}

/// Decides whether a message drifts away from its session's topic.
///
/// The crate calls no model itself: a host implements this with its LLM. The manager
/// asks only when a session would otherwise continue, outside any store lock; a
/// classifier error is logged and the session continues.
///
/// ```
/// use agent_sessions::freshness::{DriftClassifier, DriftVerdict};
/// use agent_sessions::{InboundMessage, StoredSession};
///
/// #[derive(Debug)]
/// struct KeywordDrift;
///
/// #[async_trait::async_trait]
/// impl DriftClassifier for KeywordDrift {
///     async fn classify(&self, _: &StoredSession, message: &InboundMessage) -> agent_sessions::Result<DriftVerdict> {
///         let drifted = message.body.to_lowercase().contains("different question");
///         Ok(DriftVerdict { drifted, confidence: if drifted { 0.9 } else { 0.1 } })
///     }
/// }
/// ```
#[async_trait]
pub trait DriftClassifier: Send + Sync + std::fmt::Debug {
    /// Whether `message` leaves the topic of `session`.
    async fn classify(
        &self,
        session: &StoredSession,
        message: &InboundMessage,
    ) -> Result<DriftVerdict>;
}
