//! A reply shown in the chat while the model writes it (documented on [`LiveReply`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_sessions::prelude::ReplyPayload;
use agent_sessions::SessionManager;
use teloxide::payloads::{SendChatActionSetters, SendMessageSetters};
use teloxide::requests::{Request, Requester};
use teloxide::types::{ChatAction, Message};

use crate::{deliver, split_message, SendError, Shown, MAX_MESSAGE_LEN};

/// How often a [`LiveReply`] edits its message at most, by default: Telegram lets a bot
/// edit a chat's messages about once a second (less often in groups).
pub const LIVE_EDIT_INTERVAL: Duration = Duration::from_millis(1500);

/// How long Telegram shows "typing…" after one chat action.
const TYPING_LASTS: Duration = Duration::from_secs(4);

/// A reply shown in the chat while the model writes it: "typing…" until the first
/// text, then one message edited as the text grows (at most every
/// [`LIVE_EDIT_INTERVAL`]; the first 4,096 characters while it streams), and when the
/// turn completes, the reply as [`send_replies`](crate::send_replies) sends it — that
/// message edited to the reply's first piece, the rest split at 4,096 characters — with
/// each payload's delivery reported. The turn logs the reply once, whole, as always.
///
/// The message shown while the model writes is a plain message: a reply directive
/// (`[[reply_to_current]]`) cannot quote the person's message in it, since the reply's
/// directives are known only when the turn completes.
///
/// [`push`](Self::push) takes each piece as it arrives and never waits (so it fits a
/// callback such as rig's `answer_streamed`); the edits run in the background. Works
/// through any teloxide [`Requester`], `Throttle<Bot>` included, which keeps the edits
/// within Telegram's rate limits.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use agent_sessions::prelude::*;
/// # use teloxide::prelude::*;
/// # use teloxide::types::Me;
/// # async fn stream_model(_: Vec<ChatMessage>, mut on_text: impl FnMut(&str)) -> String { on_text("Hi"); "Hi".into() }
/// use agent_sessions_teloxide::{LiveReply, TelegramAdapter};
///
/// async fn on_message(bot: Bot, me: Me, msg: Message, sessions: Arc<SessionManager>)
///     -> Result<(), Box<dyn std::error::Error + Send + Sync>>
/// {
///     let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else { return Ok(()) };
///     let turn = sessions.turn(&inbound).await?;
///     if !turn.needs_model() {
///         agent_sessions_teloxide::send_replies(&bot, &sessions, &msg, &turn.complete("").await?).await?;
///         return Ok(());
///     }
///     let live = LiveReply::start(bot.clone(), &msg); // "typing…"
///     let reply = stream_model(turn.messages().await?, |piece| live.push(piece)).await;
///     let payloads = turn.complete(reply).await?;
///     live.finish(&sessions, &payloads).await?;
///     Ok(())
/// }
/// ```
pub struct LiveReply<R: Requester> {
    bot: R,
    message: Message,
    text: Arc<Mutex<String>>,
    done: Arc<tokio::sync::Notify>,
    shown: Option<tokio::task::JoinHandle<Option<Shown>>>,
}

impl<R> LiveReply<R>
where
    R: Requester + Clone + Send + Sync + 'static,
    R::Err: Send,
{
    /// Starts showing the reply to `message` in its chat (and forum topic): "typing…"
    /// now, the text once [`push`](Self::push) gives some. Needs a tokio runtime.
    pub fn start(bot: R, message: &Message) -> Self {
        Self::with_interval(bot, message, LIVE_EDIT_INTERVAL)
    }

    /// [`start`](Self::start), editing the message at most every `interval` (in a busy
    /// group, more than the default).
    pub fn with_interval(bot: R, message: &Message, interval: Duration) -> Self {
        let text = Arc::new(Mutex::new(String::new()));
        let done = Arc::new(tokio::sync::Notify::new());
        let shown = tokio::spawn(show(
            bot.clone(),
            message.clone(),
            text.clone(),
            done.clone(),
            interval,
        ));
        LiveReply {
            bot,
            message: message.clone(),
            text,
            done,
            shown: Some(shown),
        }
    }

    /// Adds `piece` to the text shown (at the next edit).
    pub fn push(&self, piece: &str) {
        self.text
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_str(piece);
    }

    /// Stops the edits and sends `payloads` (what
    /// [`Turn::complete`](agent_sessions::manager::Turn::complete) returned) as
    /// [`send_replies`](crate::send_replies) does, the message shown so far taking the
    /// first piece; when there is nothing to send (a silent reply), that message is
    /// deleted.
    pub async fn finish(
        mut self,
        sessions: &SessionManager,
        payloads: &[ReplyPayload],
    ) -> Result<Vec<Message>, SendError<R::Err>> {
        self.done.notify_one();
        let shown = match self.shown.take() {
            Some(task) => task.await.ok().flatten(),
            None => None,
        };
        deliver(&self.bot, sessions, &self.message, payloads, shown).await
    }
}

/// A live reply dropped without [`finish`](LiveReply::finish) (the turn failed, the
/// model's stream broke) stops: no more "typing…", no more edits. What it showed stays.
impl<R: Requester> Drop for LiveReply<R> {
    fn drop(&mut self) {
        self.done.notify_one();
    }
}

/// What a [`LiveReply`] shows until `done`: "typing…" while `text` is empty, then one
/// message edited to the text's first piece at most every `interval`. Returns that
/// message, if it was sent.
async fn show<R>(
    bot: R,
    message: Message,
    text: Arc<Mutex<String>>,
    done: Arc<tokio::sync::Notify>,
    interval: Duration,
) -> Option<Shown>
where
    R: Requester,
{
    let thread = message.thread_id.filter(|_| message.is_topic_message);
    let mut shown: Option<Shown> = None;
    let mut typed: Option<Instant> = None;
    loop {
        let now = text.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let first = split_message(&now, MAX_MESSAGE_LEN)
            .first()
            .map(|piece| (*piece).to_owned());
        match (first, &mut shown) {
            (None, None) if typed.is_none_or(|at| at.elapsed() >= TYPING_LASTS) => {
                // Built apart from the await: a request need not be `Send`, its sending
                // is.
                let sending = {
                    let mut typing = bot.send_chat_action(message.chat.id, ChatAction::Typing);
                    if let Some(thread) = thread {
                        typing = typing.message_thread_id(thread);
                    }
                    typing.send()
                };
                let _ = sending.await;
                typed = Some(Instant::now());
            }
            (Some(first), None) => {
                let sending = {
                    let mut request = bot.send_message(message.chat.id, first.clone());
                    if let Some(thread) = thread {
                        request = request.message_thread_id(thread);
                    }
                    request.send()
                };
                if let Ok(sent) = sending.await {
                    shown = Some(Shown {
                        message: sent,
                        text: first,
                    });
                }
            }
            (Some(first), Some(live)) if first != live.text => {
                let sending = bot
                    .edit_message_text(live.message.chat.id, live.message.id, first.clone())
                    .send();
                if let Ok(edited) = sending.await {
                    live.message = edited;
                    live.text = first;
                }
            }
            _ => {}
        }
        tokio::select! {
            () = done.notified() => return shown,
            () = tokio::time::sleep(interval) => {}
        }
    }
}
