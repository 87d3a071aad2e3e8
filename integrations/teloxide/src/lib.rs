//! Durable sessions for [teloxide](https://docs.rs/teloxide) Telegram bots, with
//! [agent-sessions](https://docs.rs/agent-sessions).
//!
//! Three pieces:
//!
//! - [`TelegramAdapter`] maps a teloxide [`Message`] to an
//!   [`InboundMessage`](agent_sessions::InboundMessage): private chats, groups,
//!   supergroups and their forum topics, mentions of the bot and replies to it, the
//!   sender and the message id.
//! - [`send_replies`] sends what [`Turn::complete`](agent_sessions::manager::Turn::complete)
//!   returns into the chat (and forum topic) the message came from.
//! - [`SessionDialogueStorage`] is a teloxide dialogue storage that keeps the dialogue
//!   state in the chat's session, so `/new` and idle expiry reset the dialogue too.
//!
//! One message, from the dispatcher to the reply:
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_sessions::prelude::*;
//! use agent_sessions_teloxide::{send_replies, TelegramAdapter};
//! use teloxide::prelude::*;
//! use teloxide::types::Me;
//!
//! async fn on_message(bot: Bot, me: Me, msg: Message, sessions: Arc<SessionManager>)
//!     -> Result<(), Box<dyn std::error::Error + Send + Sync>>
//! {
//!     let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else { return Ok(()) };
//!     let turn = sessions.turn(&inbound).await?;
//!     let reply = if turn.needs_model() {
//!         let conversation = turn.messages().await?; // the whole conversation so far
//!         format!("{} messages so far", conversation.len()) // your model here
//!     } else {
//!         String::new()
//!     };
//!     send_replies(&bot, &msg, &turn.complete(reply).await?).await?;
//!     Ok(())
//! }
//!
//! # #[tokio::main] async fn main() {
//! let sessions = Arc::new(SessionManager::new(JsonFileStore::new("./bot-state")));
//! let handler = Update::filter_message().endpoint(on_message);
//! Dispatcher::builder(Bot::from_env(), handler)
//!     .dependencies(dptree::deps![sessions])
//!     .build()
//!     .dispatch()
//!     .await;
//! # }
//! ```
//!
//! `examples/bot.rs` is a whole bot (transcripts on disk, a stand-in model); talking to
//! api.telegram.org needs TLS: turn on teloxide's `rustls` (or `native-tls`) feature in
//! the bot's `Cargo.toml`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod inbound;
mod storage;

pub use inbound::{TelegramAdapter, CHANNEL};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
pub use storage::{DialogueError, SessionDialogueStorage, DIALOGUE_FIELD};

use agent_sessions::prelude::ReplyPayload;
use teloxide::payloads::SendMessageSetters;
use teloxide::prelude::Requester;
use teloxide::types::{Message, MessageId, ReplyParameters};
use teloxide::{Bot, RequestError};

/// Sends `payloads` (what [`Turn::complete`](agent_sessions::manager::Turn::complete)
/// returned for `message`) into `message`'s chat, in its forum topic or reply thread,
/// one Telegram message per payload; returns the messages sent.
///
/// A payload that asks to reply to the current message (`[[reply_to_current]]`) is
/// sent as a reply to `message`, one with a `reply_to_id` as a reply to that message.
/// Media URLs are sent as lines after the text. Payloads with nothing to send are
/// skipped.
///
/// ```
/// # use std::sync::Arc;
/// # use agent_sessions::prelude::*;
/// # use teloxide::prelude::*;
/// # use teloxide::types::Me;
/// # type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
/// # async fn your_model(_: Vec<ChatMessage>) -> String { String::new() }
/// use agent_sessions_teloxide::{send_replies, TelegramAdapter};
///
/// async fn on_message(bot: Bot, me: Me, msg: Message, sessions: Arc<SessionManager>) -> HandlerResult {
///     let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else { return Ok(()) };
///     let turn = sessions.turn(&inbound).await?; // the chat's session: resets, expiry, group history
///     let reply = if turn.needs_model() { your_model(turn.messages().await?).await } else { String::new() };
///     send_replies(&bot, &msg, &turn.complete(reply).await?).await?; // into the chat or forum topic
///     Ok(())
/// }
/// # let _ = Update::filter_message().endpoint(on_message);
/// ```
pub async fn send_replies(
    bot: &Bot,
    message: &Message,
    payloads: &[ReplyPayload],
) -> Result<Vec<Message>, RequestError> {
    let mut sent = Vec::new();
    for payload in payloads {
        let text = payload
            .text
            .iter()
            .chain(&payload.media_urls)
            .map(String::as_str)
            .filter(|part| !part.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        if text.is_empty() {
            continue;
        }
        let mut request = bot.send_message(message.chat.id, text);
        if let Some(thread) = message.thread_id.filter(|_| message.is_topic_message) {
            request = request.message_thread_id(thread);
        }
        let reply_to = if payload.reply_to_current {
            Some(message.id)
        } else {
            payload
                .reply_to_id
                .as_deref()
                .and_then(|id| id.parse().ok())
                .map(MessageId)
        };
        if let Some(id) = reply_to {
            request = request.reply_parameters(ReplyParameters::new(id));
        }
        sent.push(request.await?);
    }
    Ok(sent)
}
