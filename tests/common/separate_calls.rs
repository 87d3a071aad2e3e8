//! One turn made of the low-level calls a host with its own loop makes instead of
//! `SessionManager::turn`: `resolve`, `log_message`, `memory_flush_plan`, `log_message`,
//! `record_turn`. Shared by the turn tests and the turn benchmark.

use agent_sessions::manager::{LogMessage, TurnOutcome};
use agent_sessions::{InboundMessage, SessionManager};

/// Takes `message` through the separate calls, answering `reply`.
pub async fn separate_calls(manager: &SessionManager, message: &InboundMessage, reply: &str) {
    let resolution = manager.resolve(message).await.unwrap();
    manager
        .session(&resolution.key)
        .log_message(LogMessage::from_inbound(message))
        .await
        .unwrap();
    manager
        .session(&resolution.key)
        .memory_flush_plan()
        .await
        .unwrap();
    manager
        .session(&resolution.key)
        .log_message(LogMessage::outbound(reply))
        .await
        .unwrap();
    manager
        .session(&resolution.key)
        .record_turn(TurnOutcome::completed().with_exchange(resolution.body.clone(), reply))
        .await
        .unwrap();
}
