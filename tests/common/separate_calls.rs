//! One turn made of the separate calls a host made before `SessionManager::turn`:
//! `resolve`, `log_message`, `prepare_turn`, `memory_flush_plan`, `finish_turn`,
//! `log_message`, `record_turn`. Shared by the turn tests and the turn benchmark.

use agent_sessions::context::reply::ReplyPayload;
use agent_sessions::manager::{LogMessage, TurnOutcome};
use agent_sessions::{InboundMessage, SessionManager};

/// Takes `message` through the separate calls, answering `reply`.
pub async fn separate_calls(manager: &SessionManager, message: &InboundMessage, reply: &str) {
    let resolution = manager.resolve(message).await.unwrap();
    manager
        .transcripts()
        .log_message(&resolution.key, LogMessage::from_inbound(message))
        .await
        .unwrap();
    let input = manager.prepare_turn(&resolution, message).await.unwrap();
    manager
        .memory()
        .memory_flush_plan(&resolution.key)
        .await
        .unwrap();
    let sent = manager
        .finish_turn(
            &resolution,
            message,
            vec![ReplyPayload::text(reply)],
            vec![],
        )
        .await
        .unwrap();
    manager
        .transcripts()
        .log_message(
            &resolution.key,
            LogMessage::outbound(sent[0].text.clone().unwrap()),
        )
        .await
        .unwrap();
    manager
        .record_turn(
            &resolution.key,
            TurnOutcome::completed().with_exchange(input.text.unwrap(), reply),
        )
        .await
        .unwrap();
}
