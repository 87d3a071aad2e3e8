//! teloxide dialogue state kept in the chat's session entry.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_sessions::store::SessionStoreExt;
use agent_sessions::{ListFilter, SessionEntry, SessionKey, SessionManager, SessionStatus};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use teloxide::dispatching::dialogue::{Dialogue, Storage};
use teloxide::dispatching::DpHandlerDescription;
use teloxide::dptree::{self, Handler};
use teloxide::types::{ChatId, Message};

use crate::TelegramAdapter;

/// The session-entry field that holds the dialogue states, one per chat id (a group's
/// members' as `<group id>/<user id>`).
pub const DIALOGUE_FIELD: &str = "telegramDialogues";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why a dialogue could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialogueError {
    /// The session store failed.
    #[error(transparent)]
    Sessions(#[from] agent_sessions::Error),
    /// The chat has no dialogue to remove.
    #[error("chat {chat_id} has no dialogue")]
    DialogueNotFound {
        /// The chat.
        chat_id: ChatId,
    },
    /// The dialogue state does not convert to or from JSON.
    #[error("the dialogue state of chat {chat_id} does not convert to or from JSON")]
    State {
        /// The chat.
        chat_id: ChatId,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

/// A teloxide dialogue [`Storage`] that keeps each chat's state in the session entry of
/// the chat's session, so the dialogue belongs to the conversation: a `/new` reset or a
/// close starts the next session in the state's `Default`. A dialogue in progress
/// follows the chat across an expiry (the daily reset, an idle expiry) unless the
/// storage [ends it there](Self::ends_on_expiry).
///
/// Use it as teloxide's own storages are used: `.enter_dialogue::<Message,
/// SessionDialogueStorage, State>()` in the handler tree, the storage in
/// `dptree::deps!`. A chat that has no session yet reads as the default state (so
/// `enter_dialogue` never fails on a new chat). A
/// dialogue is written into the chat's current session — started by the update when
/// the chat has none (a forum's General topic, whose topics have sessions of their
/// own) — so run the message's [`turn`](SessionManager::turn) before updating it: the
/// turn is what resets an expired session, and a state written before it would be
/// left in the session it replaces.
///
/// The state is stored as JSON under [`DIALOGUE_FIELD`] in the entry's unknown fields,
/// keyed by chat id and tagged with the session id it was written in; a state written in
/// an earlier session of the key is not returned. The entry lives in whatever store the
/// manager has (JSON files, SQLite, PostgreSQL), so dialogues survive restarts.
///
/// A chat's session is found from the chat id alone (teloxide's dialogues are per chat):
/// a private chat's direct session, a group's group session. So in a forum, whose topics
/// have sessions of their own (and their own group chatter), the one dialogue of the
/// chat lives in the group's session (its General topic), which topic messages neither
/// create nor reset; and a channel's posts go to its channel session, which the chat id
/// does not name, so channels have no dialogue here.
///
/// ```
/// use std::sync::Arc;
/// use agent_sessions::prelude::*;
/// use agent_sessions_teloxide::{send_replies, SessionDialogueStorage, TelegramAdapter};
/// use teloxide::dispatching::dialogue::Dialogue;
/// use teloxide::prelude::*;
/// use teloxide::types::Me;
///
/// #[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
/// enum State {
///     #[default]
///     Start,
///     AwaitingName,
/// }
/// type MyDialogue = Dialogue<State, SessionDialogueStorage>;
/// type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
///
/// async fn on_message(
///     bot: Bot,
///     me: Me,
///     msg: Message,
///     dialogue: MyDialogue,
///     state: State,
///     sessions: Arc<SessionManager>,
/// ) -> HandlerResult {
///     let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else { return Ok(()) };
///     let turn = sessions.turn(&inbound).await?; // first: the session the state lives in
///     if !turn.needs_model() {
///         // Chatter, a bare `/new`, an update delivered again: the dialogue stays put.
///         send_replies(&bot, &sessions, &msg, &turn.complete("").await?).await?;
///         return Ok(());
///     }
///     let reply = match state {
///         State::Start => {
///             dialogue.update(State::AwaitingName).await?;
///             "What is your name?".to_owned()
///         }
///         State::AwaitingName => {
///             dialogue.exit().await?;
///             format!("Hello, {}!", inbound.body.trim()) // the text, a command's @bot removed
///         }
///     };
///     send_replies(&bot, &sessions, &msg, &turn.complete(reply).await?).await?;
///     Ok(())
/// }
///
/// # async fn run(bot: Bot) -> Result<(), Box<dyn std::error::Error>> {
/// let sessions = Arc::new(SessionManager::connect("json:./bot-state").await?.build()?);
/// // Built as the handler's adapter is: from the bot's own `getMe`.
/// let me = bot.get_me().await?;
/// let storage = SessionDialogueStorage::new(sessions.clone(), TelegramAdapter::from(&me));
/// let handler = Update::filter_message()
///     .enter_dialogue::<Message, SessionDialogueStorage, State>()
///     .endpoint(on_message);
/// Dispatcher::builder(bot, handler)
///     .dependencies(dptree::deps![storage, sessions])
///     .build()
///     .dispatch()
///     .await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SessionDialogueStorage {
    manager: Arc<SessionManager>,
    adapter: TelegramAdapter,
    ends_on_expiry: bool,
    /// Whether a group keeps one dialogue per member ([`per_member`](Self::per_member)).
    per_member: bool,
    /// The group whose members this storage's dialogues are: the chat ids it is given
    /// are then user ids.
    group: Option<ChatId>,
}

impl SessionDialogueStorage {
    /// A storage over `manager`'s sessions; `adapter` builds each chat's session key as
    /// it does for the chat's messages (the same account and agent).
    pub fn new(manager: Arc<SessionManager>, adapter: TelegramAdapter) -> Arc<Self> {
        Arc::new(SessionDialogueStorage {
            manager,
            adapter,
            ends_on_expiry: false,
            per_member: false,
            group: None,
        })
    }

    /// Keeps one dialogue per member in a group (two people filling in two orders at
    /// once), instead of one per chat: each member's state lives in the group's
    /// session, ends with it on `/new` and follows it across expiries as a chat's
    /// does. teloxide's `enter_dialogue` knows only the chat: enter dialogues with this
    /// crate's [`enter_dialogue`](crate::enter_dialogue) (or build them with
    /// [`dialogue`](Self::dialogue)). Private chats are unchanged; a channel post or an
    /// anonymous admin's message, which names no member, uses the group's dialogue.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions_teloxide::{SessionDialogueStorage, TelegramAdapter};
    /// # use teloxide::types::UserId;
    /// # let manager = Arc::new(SessionManager::new(InMemoryStore::new()));
    /// let adapter = TelegramAdapter::new(UserId(777), "helper_bot");
    /// let storage = SessionDialogueStorage::new(manager, adapter).per_member();
    /// ```
    pub fn per_member(self: Arc<Self>) -> Arc<Self> {
        let mut storage = Arc::unwrap_or_clone(self);
        storage.per_member = true;
        Arc::new(storage)
    }

    /// The dialogue `message` belongs to: its chat's, or — with
    /// [`per_member`](Self::per_member), in a group — its sender's in that group.
    pub fn dialogue<D>(self: &Arc<Self>, message: &Message) -> Dialogue<D, SessionDialogueStorage>
    where
        D: Serialize + DeserializeOwned + Default + Send + 'static,
    {
        let member = message
            .from
            .as_ref()
            .filter(|_| self.per_member && !message.chat.is_private())
            .filter(|_| message.sender_chat.is_none() && !message.chat.is_channel());
        match member.and_then(|user| i64::try_from(user.id.0).ok()) {
            Some(user) => {
                let members = SessionDialogueStorage {
                    group: Some(message.chat.id),
                    ..(**self).clone()
                };
                Dialogue::new(Arc::new(members), ChatId(user))
            }
            None => Dialogue::new(self.clone(), message.chat.id),
        }
    }

    /// Ends a chat's dialogue when its session expires (the daily reset, an idle
    /// expiry), as it ends on `/new` and on a close. By default a dialogue in progress
    /// follows the chat across an expiry — a person answering a question at 04:00 is
    /// not sent back to the start — and only the person or the host ends it.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions_teloxide::{SessionDialogueStorage, TelegramAdapter};
    /// # use teloxide::types::UserId;
    /// # let manager = Arc::new(SessionManager::new(InMemoryStore::new()));
    /// let adapter = TelegramAdapter::new(UserId(777), "helper_bot");
    /// let storage = SessionDialogueStorage::new(manager, adapter).ends_on_expiry();
    /// ```
    pub fn ends_on_expiry(self: Arc<Self>) -> Arc<Self> {
        let mut storage = Arc::unwrap_or_clone(self);
        storage.ends_on_expiry = true;
        Arc::new(storage)
    }

    /// The chat whose session holds the dialogue `chat_id` names (a member's: the
    /// group's), and the dialogue's slot in it.
    fn place(&self, chat_id: ChatId) -> (ChatId, String) {
        match self.group {
            Some(group) => (group, format!("{group}/{chat_id}")),
            None => (chat_id, chat_id.to_string()),
        }
    }

    fn key(&self, chat: ChatId) -> Result<SessionKey, DialogueError> {
        Ok(self.manager.key_for(&self.adapter.chat(chat))?)
    }

    async fn get<D: DeserializeOwned>(&self, chat_id: ChatId) -> Result<Option<D>, DialogueError> {
        let (chat, slot) = self.place(chat_id);
        let key = self.key(chat)?;
        let Some(stored) = self.manager.session(&key).get().await? else {
            return Ok(None);
        };
        let entry = &stored.entry;
        if entry.status == Some(SessionStatus::Closed)
            || (self.ends_on_expiry && self.manager.is_expired(&self.adapter.chat(chat), entry)?)
        {
            return Ok(None);
        }
        let state = match current_state(entry, &slot) {
            Some(state) => state,
            None => match self.carried(&key, entry, &slot).await? {
                Some(state) => state,
                None => return Ok(None),
            },
        };
        serde_json::from_value(state.clone())
            .map(Some)
            .map_err(|source| DialogueError::State { chat_id, source })
    }

    async fn set(&self, chat_id: ChatId, state: Option<Value>) -> Result<(), DialogueError> {
        let (chat, slot) = self.place(chat_id);
        let key = self.key(chat)?;
        let removing = state.is_none();
        let mut started = false;
        loop {
            let outcome = self
                .manager
                .store()
                .update(&key, |stored| {
                    let entry = stored.as_mut().filter(|e| !e.session_id.is_empty())?;
                    Some(put_state(entry, &slot, state.clone()))
                })
                .await?;
            match outcome {
                Some(had_state) if had_state || !removing => return Ok(()),
                None if !removing && !started => {
                    // A chat with no session yet (a forum's General topic, a handler
                    // that updates before its turn): the dialogue starts it, as the
                    // chat's first message would (its status, start and origin).
                    self.manager
                        .record_inbound_meta(&self.adapter.chat(chat))
                        .await?;
                    started = true;
                }
                _ => return Err(DialogueError::DialogueNotFound { chat_id }),
            }
        }
    }
}

impl SessionDialogueStorage {
    /// The state the dialogue in `slot` had in the session an expiry replaced with
    /// `entry` (the key's last closed session), unless expiries end dialogues.
    async fn carried<'e>(
        &self,
        key: &SessionKey,
        entry: &'e SessionEntry,
        slot: &str,
    ) -> Result<Option<&'e Value>, DialogueError> {
        let expired = started_by_expiry(entry);
        let Some(slot) = entry
            .extra
            .get(DIALOGUE_FIELD)
            .and_then(|dialogues| dialogues.get(slot))
            .filter(|_| expired && !self.ends_on_expiry)
        else {
            return Ok(None);
        };
        // The sessions the key had before, newest first: the state is carried when it
        // was written in one of those that expiries replaced one after another.
        let closed = ListFilter::all()
            .key_prefix(key.as_str())
            .status(SessionStatus::Closed);
        let mut before: Vec<_> = self
            .manager
            .list(&closed)
            .await?
            .into_iter()
            .filter(|s| s.key == *key && s.entry.session_id != entry.session_id)
            .collect();
        before.sort_by_key(|s| std::cmp::Reverse((s.entry.closed_at, s.entry.session_started_at)));
        for earlier in before {
            if slot["sessionId"] == earlier.entry.session_id.as_str() {
                return Ok(slot.get("state"));
            }
            if !started_by_expiry(&earlier.entry) {
                break;
            }
        }
        Ok(None)
    }
}

/// Whether `entry`'s session was started by an expiry (the daily reset, an idle
/// expiry) rather than asked for (`/new`, a close).
fn started_by_expiry(entry: &SessionEntry) -> bool {
    matches!(entry.start_reason.as_deref(), Some("daily" | "idle"))
}

/// Puts `state` (`None`: removes it) as the state of the dialogue in `slot` in
/// `entry`; whether it had one.
fn put_state(entry: &mut SessionEntry, slot: &str, state: Option<Value>) -> bool {
    // A state of an earlier session counts: one carried across an expiry can be ended.
    let had_state = entry
        .extra
        .get(DIALOGUE_FIELD)
        .and_then(|dialogues| dialogues.get(slot))
        .is_some();
    let session_id = entry.session_id.clone();
    let expired = started_by_expiry(entry);
    let dialogues = entry
        .extra
        .entry(DIALOGUE_FIELD.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !dialogues.is_object() {
        *dialogues = Value::Object(Map::new());
    }
    let Value::Object(dialogues) = dialogues else {
        unreachable!("made an object above");
    };
    // States of earlier sessions are dead — unless an expiry started this one, which
    // other chats' dialogues may still be carried across: drop them while here.
    if !expired {
        dialogues.retain(|_, slot| slot["sessionId"] == session_id.as_str());
    }
    match state {
        Some(state) => {
            let kept = serde_json::json!({ "sessionId": session_id, "state": state });
            dialogues.insert(slot.to_owned(), kept);
        }
        None => {
            dialogues.shift_remove(slot);
        }
    }
    if dialogues.is_empty() {
        entry.extra.shift_remove(DIALOGUE_FIELD);
    }
    had_state
}

/// The state `entry` holds in `slot`, if it was written in this session.
fn current_state<'e>(entry: &'e SessionEntry, slot: &str) -> Option<&'e Value> {
    let slot = entry.extra.get(DIALOGUE_FIELD)?.get(slot)?;
    (slot.get("sessionId")?.as_str()? == entry.session_id).then(|| slot.get("state"))?
}

impl<D> Storage<D> for SessionDialogueStorage
where
    D: Serialize + DeserializeOwned + Default + Send + 'static,
{
    type Error = DialogueError;

    fn remove_dialogue(self: Arc<Self>, chat_id: ChatId) -> BoxFuture<Result<(), DialogueError>>
    where
        D: Send + 'static,
    {
        Box::pin(async move { self.set(chat_id, None).await })
    }

    fn update_dialogue(
        self: Arc<Self>,
        chat_id: ChatId,
        dialogue: D,
    ) -> BoxFuture<Result<(), DialogueError>>
    where
        D: Send + 'static,
    {
        Box::pin(async move {
            let state = serde_json::to_value(&dialogue)
                .map_err(|source| DialogueError::State { chat_id, source })?;
            self.set(chat_id, Some(state)).await
        })
    }

    fn get_dialogue(
        self: Arc<Self>,
        chat_id: ChatId,
    ) -> BoxFuture<Result<Option<D>, DialogueError>> {
        // No session, an expired one, or no state in it: the dialogue's start.
        Box::pin(async move { Ok(Some(self.get(chat_id).await?.unwrap_or_default())) })
    }
}

/// teloxide's `enter_dialogue` for a [`SessionDialogueStorage`]: hands the handler the
/// message's [`Dialogue`] and its state, per member in a group when the storage keeps
/// [one per member](SessionDialogueStorage::per_member) (teloxide's own knows only
/// chats). Needs the `Arc<SessionDialogueStorage>` and the `Message` in the handler's
/// dependencies; a state that cannot be read stops the update there, logged, as
/// teloxide's does by default.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use agent_sessions::prelude::*;
/// # use agent_sessions_teloxide::{enter_dialogue, SessionDialogueStorage, TelegramAdapter};
/// # use teloxide::dispatching::dialogue::Dialogue;
/// # use teloxide::prelude::*;
/// #[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
/// enum Order { #[default] Start, AwaitingSize }
///
/// async fn on_message(dialogue: Dialogue<Order, SessionDialogueStorage>, state: Order)
///     -> Result<(), Box<dyn std::error::Error + Send + Sync>> { Ok(()) }
///
/// # async fn run(bot: Bot, sessions: Arc<SessionManager>) -> Result<(), Box<dyn std::error::Error>> {
/// let me = bot.get_me().await?;
/// let storage = SessionDialogueStorage::new(sessions, TelegramAdapter::from(&me)).per_member();
/// let handler = Update::filter_message()
///     .chain(enter_dialogue::<Order, _>())
///     .endpoint(on_message);
/// Dispatcher::builder(bot, handler)
///     .dependencies(dptree::deps![storage])
///     .build()
///     .dispatch()
///     .await;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub fn enter_dialogue<D, Output>() -> Handler<'static, Output, DpHandlerDescription>
where
    D: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static,
    Output: Send + Sync + 'static,
{
    dptree::map(|storage: Arc<SessionDialogueStorage>, message: Message| {
        storage.dialogue::<D>(&message)
    })
    .filter_map_async(|dialogue: Dialogue<D, SessionDialogueStorage>| async move {
        match dialogue.get_or_default().await {
            Ok(state) => Some(state),
            Err(error) => {
                log::error!(
                    "reading the dialogue of chat {} failed: {error}",
                    dialogue.chat_id()
                );
                None
            }
        }
    })
}
