//! Durable sessions for [teloxide](https://docs.rs/teloxide) Telegram bots, with
//! [agent-sessions](https://docs.rs/agent-sessions).
//!
//! Three pieces:
//!
//! - [`TelegramAdapter`] maps a teloxide [`Message`] to an
//!   [`InboundMessage`](agent_sessions::InboundMessage): private chats, groups,
//!   supergroups and their forum topics, mentions of the bot and replies to it, media,
//!   the sender and the message id (so an update Telegram delivers again is answered
//!   once).
//! - [`send_replies`] sends what [`Turn::complete`](agent_sessions::manager::Turn::complete)
//!   returns into the chat (and forum topic) the message came from, through any
//!   teloxide requester, split at Telegram's limit, and records each payload's delivery.
//! - [`SessionDialogueStorage`] is a teloxide dialogue storage that keeps the dialogue
//!   state in the chat's session, so `/new` and expiry reset the dialogue too.
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
//!         let conversation = turn.messages().await?; // the conversation since the last reset
//!         format!("{} messages so far", conversation.len()) // your model here
//!     } else {
//!         String::new()
//!     };
//!     send_replies(&bot, &sessions, &msg, &turn.complete(reply).await?).await?;
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Sessions, transcripts and group chatter in OpenClaw's files under ./bot-state.
//!     let sessions = Arc::new(SessionManager::connect("json:./bot-state").await?.build()?);
//!     let handler = Update::filter_message().endpoint(on_message);
//!     Dispatcher::builder(Bot::from_env(), handler)
//!         .dependencies(dptree::deps![sessions])
//!         .build()
//!         .dispatch()
//!         .await;
//!     Ok(())
//! }
//! ```
//!
//! The manager's defaults: a session per private chat, a daily reset at 04:00 and no
//! idle expiry, and in groups the model only for messages that address the bot; the
//! crate's README lists each with the builder call that changes it.
//!
//! `examples/bot.rs` is a whole bot (transcripts on disk, a stand-in model); talking to
//! api.telegram.org needs TLS: turn on teloxide's `rustls` (or `native-tls`) feature in
//! the bot's `Cargo.toml`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod files;
mod inbound;
mod live;
mod storage;

pub use files::{fetch_files, FetchedFiles};
pub use inbound::{TelegramAdapter, CHANNEL};
pub use live::{LiveReply, LIVE_EDIT_INTERVAL};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
pub use storage::{enter_dialogue, DialogueError, SessionDialogueStorage, DIALOGUE_FIELD};

use agent_sessions::exactly_once::Delivery;
use agent_sessions::prelude::ReplyPayload;
use agent_sessions::SessionManager;
use teloxide::payloads::SendMessageSetters;
use teloxide::requests::{Request, Requester};
use teloxide::types::{Message, MessageId, ReplyParameters};

/// The most a Telegram text message holds, in UTF-16 code units (Telegram counts
/// characters that way).
pub const MAX_MESSAGE_LEN: usize = 4096;

/// Why [`send_replies`] did not send everything.
#[derive(Debug)]
#[non_exhaustive]
pub enum SendError<E> {
    /// Telegram refused some of the reply's messages, or they could not be sent. The
    /// others were sent, and every payload's delivery was reported: the model sees
    /// what the user got.
    Telegram {
        /// The messages Telegram took.
        sent: Vec<Message>,
        /// The messages it did not take, in order (never empty).
        unsent: Vec<Unsent<E>>,
    },
    /// Recording a delivery failed (the transcript store); nothing after it was sent.
    Sessions(agent_sessions::Error),
}

/// A message [`send_replies`] did not get into the chat.
#[derive(Debug)]
#[non_exhaustive]
pub struct Unsent<E> {
    /// The payload it belongs to (from 0).
    pub payload: usize,
    /// Which of the payload's messages it is (from 0), when the text was split.
    pub piece: usize,
    /// Its text.
    pub text: String,
    /// Why Telegram did not take it.
    pub error: E,
}

impl<E: std::fmt::Display> std::fmt::Display for SendError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Telegram { sent, unsent } => {
                write!(
                    f,
                    "Telegram did not take {} of the reply's {} messages",
                    unsent.len(),
                    sent.len() + unsent.len()
                )?;
                match unsent.first() {
                    Some(first) => write!(f, ": {}", first.error),
                    None => Ok(()),
                }
            }
            SendError::Sessions(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for SendError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Telegram { unsent, .. } => unsent
                .first()
                .map(|first| &first.error as &(dyn std::error::Error + 'static)),
            SendError::Sessions(error) => error.source(),
        }
    }
}

impl<E> From<agent_sessions::Error> for SendError<E> {
    fn from(error: agent_sessions::Error) -> Self {
        SendError::Sessions(error)
    }
}

/// Sends `payloads` (what [`Turn::complete`](agent_sessions::manager::Turn::complete)
/// returned for `message`) into `message`'s chat, in its forum topic, and reports each
/// payload's delivery to `sessions` ([`SessionManager::report_delivery`]), so the model
/// believes read exactly what the user got; returns the messages sent.
///
/// `bot` is any teloxide [`Requester`] — `Bot`, or one wrapped in adaptors such as
/// `Throttle<Bot>`, `DefaultParseMode<Bot>` or `CacheMe<Bot>`. A text longer than
/// Telegram's limit is sent as several messages, split at paragraph, line, sentence or
/// word boundaries ([`split_message`]). A payload that asks to reply to the current
/// message (`[[reply_to_current]]`) is sent as a reply to `message`, one with a
/// `reply_to_id` as a reply to that message (the first part, when split). Media URLs
/// are sent as lines after the text. Payloads with nothing to send are skipped.
///
/// A message Telegram refuses does not stop the others: each is tried, a payload whose
/// messages all went out is reported [`Delivered`](Delivery::Delivered), one of which
/// none did [`Failed`](Delivery::Failed), and one split into messages of which some
/// went out [`Partly`](Delivery::Partly) — the model then sees those pieces only. What
/// was not sent comes back as [`SendError::Telegram`], message by message.
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
///     let turn = sessions.turn(&inbound).await?; // the chat's session: resets, expiry, group chatter
///     let reply = if turn.needs_model() { your_model(turn.messages().await?).await } else { String::new() };
///     let payloads = turn.complete(reply).await?;
///     send_replies(&bot, &sessions, &msg, &payloads).await?; // into the chat or forum topic
///     Ok(())
/// }
/// # let _ = Update::filter_message().endpoint(on_message);
/// ```
pub async fn send_replies<R>(
    bot: &R,
    sessions: &SessionManager,
    message: &Message,
    payloads: &[ReplyPayload],
) -> Result<Vec<Message>, SendError<R::Err>>
where
    R: Requester,
{
    deliver(bot, sessions, message, payloads, None).await
}

/// A message already in the chat that the reply's first piece takes over (a
/// [`LiveReply`]'s), with the text it shows.
pub(crate) struct Shown {
    message: Message,
    text: String,
}

/// [`send_replies`], the first piece going into `shown` (edited when its text differs)
/// instead of a new message; `shown` is deleted when the reply has nothing to send.
pub(crate) async fn deliver<R>(
    bot: &R,
    sessions: &SessionManager,
    message: &Message,
    payloads: &[ReplyPayload],
    mut shown: Option<Shown>,
) -> Result<Vec<Message>, SendError<R::Err>>
where
    R: Requester,
{
    let (mut sent, mut unsent) = (Vec::new(), Vec::new());
    for (index, payload) in payloads.iter().enumerate() {
        let own_text = payload
            .text
            .as_deref()
            .filter(|text| !text.trim().is_empty());
        let text = own_text
            .into_iter()
            .chain(payload.media_urls.iter().map(String::as_str))
            .filter(|part| !part.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        if text.is_empty() {
            continue;
        }
        let mut reply_to = if payload.reply_to_current {
            Some(message.id)
        } else {
            payload
                .reply_to_id
                .as_deref()
                .and_then(|id| id.parse().ok())
                .map(MessageId)
        };
        // The pieces the user got, as byte ranges of the payload's own text (the
        // joined text starts with it).
        let own_len = own_text.map_or(0, str::len);
        let (mut shown_pieces, mut refused) = (Vec::new(), None);
        for (piece, part) in split_message(&text, MAX_MESSAGE_LEN)
            .into_iter()
            .enumerate()
        {
            let send = || {
                let mut request = bot.send_message(message.chat.id, part);
                if let Some(thread) = message.thread_id.filter(|_| message.is_topic_message) {
                    request = request.message_thread_id(thread);
                }
                if let Some(id) = reply_to {
                    request = request.reply_parameters(ReplyParameters::new(id));
                }
                request.send()
            };
            let outcome = match shown.take() {
                Some(Shown {
                    message: live,
                    text,
                }) if text == part => Ok(live),
                // The message shown while the model wrote becomes the first piece — or,
                // when it cannot be edited (the person deleted it), a new one goes.
                Some(Shown { message: live, .. }) => {
                    match bot
                        .edit_message_text(live.chat.id, live.id, part)
                        .send()
                        .await
                    {
                        Ok(edited) => Ok(edited),
                        Err(_) => send().await,
                    }
                }
                None => send().await,
            };
            match outcome {
                Ok(delivered) => {
                    // The reply target goes with the first piece that is delivered.
                    reply_to = None;
                    sent.push(delivered);
                    let start = part.as_ptr() as usize - text.as_ptr() as usize;
                    shown_pieces.push(start.min(own_len)..(start + part.len()).min(own_len));
                }
                Err(error) => {
                    refused.get_or_insert_with(|| error.to_string());
                    unsent.push(Unsent {
                        payload: index,
                        piece,
                        text: part.to_owned(),
                        error,
                    });
                }
            }
        }
        let delivery = match refused {
            None => Delivery::Delivered,
            Some(reason) if shown_pieces.is_empty() => Delivery::Failed { reason },
            Some(reason) => Delivery::Partly {
                shown: shown_pieces,
                reason,
            },
        };
        sessions.report_delivery(payload, delivery).await?;
    }
    if let Some(Shown { message: live, .. }) = shown {
        // Text shown while the model wrote, and nothing to send after all (a silent
        // reply): the chat keeps none of it, as far as Telegram lets the bot delete.
        let _ = bot.delete_message(live.chat.id, live.id).send().await;
    }
    match unsent.is_empty() {
        true => Ok(sent),
        false => Err(SendError::Telegram { sent, unsent }),
    }
}

/// `text` in pieces of at most `limit` UTF-16 code units, each cut at the last
/// paragraph break that fits, else the last line break, else the last sentence end,
/// else the last space (preferring one in the second half of the piece), else between
/// two characters. Whitespace at a cut is dropped;
/// nothing else is.
///
/// ```
/// use agent_sessions_teloxide::split_message;
///
/// let text = format!("{}\n\n{}", "a".repeat(3000), "b".repeat(3000));
/// let parts = split_message(&text, 4096);
/// assert_eq!(parts, [&"a".repeat(3000), &"b".repeat(3000)]);
/// assert_eq!(split_message("short", 4096), ["short"]);
/// ```
pub fn split_message(text: &str, limit: usize) -> Vec<&str> {
    let limit = limit.max(2); // room for one character of any width
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while utf16_len(rest) > limit {
        // The longest prefix that fits, on a character boundary.
        let mut fits = 0;
        let mut units = 0;
        for (at, c) in rest.char_indices() {
            if units + c.len_utf16() > limit {
                break;
            }
            units += c.len_utf16();
            fits = at + c.len_utf8();
        }
        let window = &rest[..fits];
        let boundaries = [
            window.rfind("\n\n"),
            window.rfind('\n'),
            window.rfind(". ").map(|at| at + 1),
            window.rfind(char::is_whitespace),
        ];
        // The strongest boundary in the second half of the window (no tiny pieces),
        // else any, else a cut between characters.
        let cut = boundaries
            .iter()
            .flatten()
            .find(|&&at| at >= fits / 2)
            .or_else(|| boundaries.iter().flatten().find(|&&at| at > 0))
            .copied()
            .unwrap_or(fits);
        parts.push(rest[..cut].trim_end());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        parts.push(rest);
    }
    parts
}

fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fit_the_limit_and_lose_nothing_but_whitespace_at_cuts() {
        let cases = [
            // (text, limit, pieces)
            ("one two three", 100, vec!["one two three"]),
            ("one two three", 8, vec!["one two", "three"]),
            ("a.  b", 3, vec!["a.", "b"]),
            ("line one\nline two", 12, vec!["line one", "line two"]),
            (
                "para one.\n\nline\nthree",
                16,
                vec!["para one.", "line\nthree"],
            ),
            // One word longer than the limit: cut between characters.
            ("abcdefghij", 4, vec!["abcd", "efgh", "ij"]),
            // Characters outside the BMP count two UTF-16 units and are never split.
            ("😀😀😀", 4, vec!["😀😀", "😀"]),
            ("ééé", 2, vec!["éé", "é"]),
            ("   ", 10, vec![]),
        ];
        for (text, limit, expected) in cases {
            let parts = split_message(text, limit);
            assert_eq!(parts, expected, "{text:?} at {limit}");
            for part in &parts {
                assert!(utf16_len(part) <= limit, "{part:?}");
                assert!(!part.is_empty());
            }
        }
    }

    #[test]
    fn a_boundary_early_in_the_window_is_passed_over_for_a_later_one() {
        // A paragraph break after 3 characters would leave a tiny piece; the space
        // near the end of the window is taken instead.
        let text = format!("Hi!\n\n{} tail", "x".repeat(20));
        let parts = split_message(&text, 26);
        assert_eq!(parts, [format!("Hi!\n\n{}", "x".repeat(20)), "tail".into()]);
    }
}
