//! A Telegram bot whose conversations are durable sessions: each message goes through
//! the teloxide dispatcher to `SessionManager::turn`, a stand-in model answers from the
//! whole conversation, and `Turn::complete` says what to send.
//!
//! ```text
//! TELOXIDE_TOKEN=123:abc cargo run -p agent-sessions-teloxide --features teloxide/rustls --example bot -- ./bot-state
//! ```
//!
//! Sessions, transcripts and the message log are OpenClaw's files under `./bot-state`;
//! stop the bot and start it again, and every chat continues where it stopped. Each
//! private chat is a session of its own. In a group the bot answers only a message that
//! addresses it — one that mentions `@yourbot`, a command sent to it (`/help@yourbot`),
//! or a reply to one of its messages — and reads the chatter in between (a bare `/help`
//! is chatter too: in a group it may be meant for another bot); `/new` starts a new
//! session; each forum topic is a conversation of its own. A session resets daily at
//! 04:00 and does not expire when idle; the manager's builder changes either.
//!
//! Talking to api.telegram.org needs TLS (`--features teloxide/rustls`); without it, point
//! `TELOXIDE_API_URL` at a Bot API server reachable over plain HTTP.

use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions_teloxide::{send_replies, TelegramAdapter};
use teloxide::prelude::*;
use teloxide::types::Me;

type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The stand-in model: answers from what the session shows it. A real bot calls its
/// LLM with `conversation` here.
fn stand_in_model(conversation: &[ChatMessage]) -> String {
    let said: Vec<&str> = conversation
        .iter()
        .filter(|m| m.role == ChatRole::User)
        .map(|m| m.content.as_str())
        .collect();
    let last = said.last().copied().unwrap_or_default();
    let name = said
        .iter()
        .find_map(|text| text.split_once("my name is ").map(|(_, name)| name.trim()));
    if last.contains("what is my name") {
        match name {
            Some(name) => format!("Your name is {name}."),
            None => "You have not told me your name.".into(),
        }
    } else if last.contains("my name is ") {
        format!("Nice to meet you, {}.", name.unwrap_or("stranger"))
    } else {
        format!("({} messages in this session) You said: {last}", said.len())
    }
}

/// One message: the session turn, the model, what to send.
async fn on_message(
    bot: Bot,
    me: Me,
    msg: Message,
    sessions: Arc<SessionManager>,
) -> HandlerResult {
    let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else {
        return Ok(()); // a service message: nothing to answer
    };
    let turn = sessions.turn(&inbound).await?;
    let reply = if turn.needs_model() {
        stand_in_model(&turn.messages().await?)
    } else {
        String::new() // chatter (kept for later), a bare `/new` (acknowledged), a redelivery
    };
    let payloads = turn.complete(reply).await?;
    // Split at Telegram's limit; each payload's delivery is recorded in the session.
    send_replies(&bot, &sessions, &msg, &payloads).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "./bot-state".into());
    let sessions = SessionManager::connect(&format!("json:{root}"))
        .await?
        .build()?;

    let handler = Update::filter_message().endpoint(on_message);
    Dispatcher::builder(Bot::from_env(), handler)
        .dependencies(dptree::deps![Arc::new(sessions)])
        .enable_ctrlc_handler() // Ctrl-C stops after the turns in flight complete
        .build()
        .dispatch()
        .await;
    Ok(())
}
