//! teloxide dialogues kept in the chat's session: the state follows the session through
//! resets, expiry and restarts.

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::identity::{DefaultKeyBuilder, DmScope};
use agent_sessions::prelude::*;
use agent_sessions_teloxide::{
    DialogueError, SessionDialogueStorage, TelegramAdapter, DIALOGUE_FIELD,
};
use serde::{Deserialize, Serialize};
use teloxide::dispatching::dialogue::Dialogue;
use teloxide::types::{ChatId, UserId};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
enum Order {
    #[default]
    Start,
    AwaitingSize {
        item: String,
    },
}

type OrderDialogue = Dialogue<Order, SessionDialogueStorage>;

const ADA: ChatId = ChatId(42);
const BOB: ChatId = ChatId(43);
const FAMILY: ChatId = ChatId(-100);

struct Bot {
    manager: Arc<SessionManager>,
    storage: Arc<SessionDialogueStorage>,
    clock: ManualClock,
}

/// A bot on a JSON store in `dir`: sessions expire after 30 idle minutes.
fn bot(dir: &std::path::Path, dm_scope: DmScope) -> Bot {
    let clock = ManualClock::at_millis(1_771_840_800_000);
    let manager = Arc::new(
        SessionManager::builder(JsonFileStore::new(dir))
            .key_builder(DefaultKeyBuilder::new().dm_scope(dm_scope))
            .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let adapter = TelegramAdapter::new(UserId(777), "helper_bot");
    Bot {
        storage: SessionDialogueStorage::new(manager.clone(), adapter),
        manager,
        clock,
    }
}

impl Bot {
    fn dialogue(&self, chat: ChatId) -> OrderDialogue {
        Dialogue::new(self.storage.clone(), chat)
    }

    /// One whole turn of `text` in the private chat `chat`; returns what was sent.
    async fn say(&self, chat: ChatId, text: &str) -> Vec<String> {
        let message = InboundMessage::direct("telegram", chat.to_string(), text);
        let turn = self.manager.turn(&message).await.unwrap();
        let reply = if turn.needs_model() { "ok" } else { "" };
        turn.complete(reply)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|p| p.text)
            .collect()
    }
}

fn awaiting(item: &str) -> Order {
    Order::AwaitingSize { item: item.into() }
}

#[tokio::test]
async fn the_dialogue_lives_in_the_session_entry() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.say(ADA, "a coffee please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();

    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    let key = SessionKey::parse("agent:main:telegram:dm:42").unwrap();
    let entry = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(
        entry.extra[DIALOGUE_FIELD]["42"],
        serde_json::json!({
            "sessionId": entry.session_id,
            "state": {"AwaitingSize": {"item": "coffee"}},
        })
    );
    // Writing the dialogue is not activity: the idle clock is not restarted.
    bot.clock.advance(Duration::from_secs(60));
    bot.dialogue(ADA).update(Order::Start).await.unwrap();
    let after = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(after.updated_at, entry.updated_at);
}

#[tokio::test]
async fn new_resets_the_dialogue() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.say(ADA, "a coffee please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();

    assert_eq!(bot.say(ADA, "/new").await, ["New session started."]);
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
    // An expiry after the reset does not bring the ended dialogue back.
    bot.say(ADA, "hi").await;
    bot.clock.advance(Duration::from_secs(31 * 60));
    bot.say(ADA, "back").await;
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));

    // The next state belongs to the new session.
    bot.dialogue(ADA).update(awaiting("tea")).await.unwrap();
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("tea"))
    );
}

/// A dialogue in progress follows the chat across an expiry (the 04:00 reset, an idle
/// expiry): the person is not sent back to the start by the clock. Only `/new`, a
/// close — or a storage told to — ends it.
#[tokio::test]
async fn a_dialogue_in_progress_follows_the_chat_across_an_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.say(ADA, "a coffee please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();

    bot.clock.advance(Duration::from_secs(31 * 60));
    // Expired: the handler of the next message still has the dialogue…
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    let key = SessionKey::parse("agent:main:telegram:dm:42").unwrap();
    let before = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_id;
    bot.say(ADA, "large").await;
    let after = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_ne!(
        after.session_id, before,
        "the message started a new session"
    );
    assert_eq!(after.start_reason.as_deref(), Some("idle"));
    // …and so do the messages after it, in the new session, until it ends.
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    bot.dialogue(ADA).exit().await.unwrap();
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
}

#[tokio::test]
async fn a_storage_told_to_ends_the_dialogue_on_an_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let mut bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.storage = bot.storage.clone().ends_on_expiry();
    bot.say(ADA, "a coffee please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();

    bot.clock.advance(Duration::from_secs(29 * 60));
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    bot.clock.advance(Duration::from_secs(2 * 60));
    // Expired: the handler of the next message already starts from the default state.
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
    bot.say(ADA, "hello again").await;
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
}

#[tokio::test]
async fn a_closed_session_has_no_dialogue() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.say(ADA, "a coffee please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();
    let key = SessionKey::parse("agent:main:telegram:dm:42").unwrap();
    bot.manager.session(&key).close().await.unwrap();
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
}

#[tokio::test]
async fn the_dialogue_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let bot = bot(dir.path(), DmScope::PerChannelPeer);
        bot.say(ADA, "a coffee please").await;
        bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();
    }
    let restarted = bot(dir.path(), DmScope::PerChannelPeer);
    assert_eq!(
        restarted.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
}

#[tokio::test]
async fn chats_sharing_one_session_keep_their_own_dialogues() {
    let dir = tempfile::tempdir().unwrap();
    // The default DM scope: every private chat is the agent's main session.
    let bot = bot(dir.path(), DmScope::Main);
    bot.say(ADA, "a coffee please").await;
    bot.say(BOB, "a tea please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();
    bot.dialogue(BOB).update(awaiting("tea")).await.unwrap();

    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    assert_eq!(
        bot.dialogue(BOB).get().await.unwrap(),
        Some(awaiting("tea"))
    );
    bot.dialogue(ADA).exit().await.unwrap();
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
    assert_eq!(
        bot.dialogue(BOB).get().await.unwrap(),
        Some(awaiting("tea"))
    );
}

#[tokio::test]
async fn a_group_dialogue_lives_in_the_group_session() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    let message =
        InboundMessage::group("telegram", "-100", "42", "@helper_bot order").mentioning_agent();
    let turn = bot.manager.turn(&message).await.unwrap();
    turn.complete("What would you like?").await.unwrap();
    bot.dialogue(FAMILY)
        .update(awaiting("pizza"))
        .await
        .unwrap();

    let key = SessionKey::parse("agent:main:telegram:group:-100").unwrap();
    let entry = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(
        entry.extra[DIALOGUE_FIELD]["-100"]["state"]["AwaitingSize"]["item"],
        "pizza"
    );
    assert_eq!(
        bot.dialogue(FAMILY).get().await.unwrap(),
        Some(awaiting("pizza"))
    );
}

#[tokio::test]
async fn a_chat_without_a_session_reads_as_the_start_and_an_update_starts_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    assert_eq!(bot.dialogue(ADA).get().await.unwrap(), Some(Order::Start));
    assert!(matches!(
        bot.dialogue(ADA).exit().await,
        Err(DialogueError::DialogueNotFound { chat_id: ADA })
    ));
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    // The session it started keeps the bookkeeping of any other: its status, when and
    // why it started, where it came from (what operators see of it).
    let key = bot
        .manager
        .key_for(&InboundMessage::direct("telegram", ADA.to_string(), ""))
        .unwrap();
    let entry = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(entry.status, Some(agent_sessions::SessionStatus::Idle));
    assert!(entry.session_started_at.is_some());
    assert_eq!(entry.start_reason.as_deref(), Some("no_session"));
    assert_eq!(entry.message_count, Some(0));
    assert_eq!(
        entry.origin.and_then(|o| o.provider).as_deref(),
        Some("telegram")
    );
    // The turn that follows continues the session the dialogue started.
    bot.say(ADA, "large").await;
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("coffee"))
    );
    bot.dialogue(ADA).exit().await.unwrap();
    assert!(matches!(
        bot.dialogue(ADA).exit().await,
        Err(DialogueError::DialogueNotFound { chat_id: ADA })
    ));
}

#[tokio::test]
async fn a_state_that_no_longer_parses_is_an_error_not_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    bot.say(ADA, "hi").await;
    Dialogue::<String, SessionDialogueStorage>::new(bot.storage.clone(), ADA)
        .update("not an order".to_owned())
        .await
        .unwrap();
    assert!(matches!(
        bot.dialogue(ADA).get().await,
        Err(DialogueError::State { chat_id: ADA, .. })
    ));
}

/// teloxide's `enter_dialogue` hands the handler the state kept in the chat's session,
/// and a `/new` in between starts the next message from the default state.
#[tokio::test]
async fn enter_dialogue_reads_the_state_from_the_session() {
    use std::ops::ControlFlow;
    use teloxide::dispatching::{HandlerExt, UpdateFilterExt};
    use teloxide::types::{Message, Update};

    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    // The endpoint returns the state it was given and moves the dialogue on.
    let handler = Update::filter_message()
        .enter_dialogue::<Message, SessionDialogueStorage, Order>()
        .endpoint(|dialogue: OrderDialogue, state: Order| async move {
            let next = match &state {
                Order::Start => awaiting("coffee"),
                Order::AwaitingSize { .. } => Order::Start,
            };
            dialogue.update(next).await.unwrap();
            state
        });
    let update: Update = serde_json::from_str(
        r#"{"update_id": 1, "message": {"message_id": 1, "date": 1771840800,
            "chat": {"id": 42, "type": "private", "first_name": "Ada"},
            "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": "coffee"}}"#,
    )
    .unwrap();
    let run = || async {
        match handler
            .dispatch(teloxide::dptree::deps![update.clone(), bot.storage.clone()])
            .await
        {
            ControlFlow::Break(state) => state,
            ControlFlow::Continue(_) => panic!("the handler did not run"),
        }
    };

    bot.say(ADA, "coffee").await;
    assert_eq!(run().await, Order::Start);
    assert_eq!(run().await, awaiting("coffee"));
    assert_eq!(run().await, Order::Start);
    assert_eq!(run().await, awaiting("coffee"));
    bot.say(ADA, "/new").await;
    assert_eq!(run().await, Order::Start, "the reset dropped the dialogue");
}

/// A chat the bot has never seen gets through `enter_dialogue` in its default state
/// (teloxide's `get_or_default` writes nothing when the storage reads a default).
#[tokio::test]
async fn enter_dialogue_lets_a_new_chats_first_message_through() {
    use std::ops::ControlFlow;
    use teloxide::dispatching::{HandlerExt, UpdateFilterExt};
    use teloxide::types::{Message, Update};

    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    let handler = Update::filter_message()
        .enter_dialogue::<Message, SessionDialogueStorage, Order>()
        .endpoint(|state: Order| async move { state });
    let update: Update = serde_json::from_str(
        r#"{"update_id": 1, "message": {"message_id": 1, "date": 1771840800,
            "chat": {"id": 43, "type": "private", "first_name": "Bob"},
            "from": {"id": 43, "is_bot": false, "first_name": "Bob"}, "text": "hi"}}"#,
    )
    .unwrap();
    let ran = handler
        .dispatch(teloxide::dptree::deps![update, bot.storage.clone()])
        .await;
    assert!(
        matches!(ran, ControlFlow::Break(Order::Start)),
        "the handler ran in the default state"
    );
    assert!(
        bot.manager
            .session(
                &bot.manager
                    .key_for(&TelegramAdapter::new(UserId(777), "helper_bot").chat(BOB))
                    .unwrap()
            )
            .get()
            .await
            .unwrap()
            .is_none(),
        "reading the dialogue created no session"
    );
}

/// Found by an outside test: a dialogue written once survives expiries one after
/// another, and in a session chats share, one chat's write after an expiry leaves the
/// others' dialogues carried.
#[tokio::test]
async fn a_dialogue_survives_expiries_in_a_row_and_beside_other_chats() {
    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::Main);
    bot.say(ADA, "a coffee please").await;
    bot.say(BOB, "a tea please").await;
    bot.dialogue(ADA).update(awaiting("coffee")).await.unwrap();
    bot.dialogue(BOB).update(awaiting("tea")).await.unwrap();
    for _ in 0..3 {
        bot.clock.advance(Duration::from_secs(31 * 60));
        bot.say(ADA, "still here").await;
        assert_eq!(
            bot.dialogue(ADA).get().await.unwrap(),
            Some(awaiting("coffee"))
        );
    }
    // ADA's dialogue moves on in the new session; BOB's is still carried.
    bot.dialogue(ADA).update(awaiting("milk")).await.unwrap();
    assert_eq!(
        bot.dialogue(BOB).get().await.unwrap(),
        Some(awaiting("tea"))
    );
    assert_eq!(
        bot.dialogue(ADA).get().await.unwrap(),
        Some(awaiting("milk"))
    );
}

/// With `per_member`, two people in one group fill in their own orders at once: each
/// member's state is their own, kept in the group's session, and a reset of the group's
/// session ends them all; a private chat keeps its one dialogue.
#[tokio::test]
async fn a_group_can_keep_one_dialogue_per_member() {
    use std::ops::ControlFlow;
    use teloxide::dispatching::UpdateFilterExt;
    use teloxide::types::Update;

    let dir = tempfile::tempdir().unwrap();
    let bot = bot(dir.path(), DmScope::PerChannelPeer);
    let storage = bot.storage.clone().per_member();
    // The endpoint returns the state it was given and moves the dialogue on.
    let handler = Update::filter_message()
        .chain(agent_sessions_teloxide::enter_dialogue::<Order, _>())
        .endpoint(|dialogue: OrderDialogue, state: Order| async move {
            let next = match &state {
                Order::Start => awaiting("tea"),
                Order::AwaitingSize { .. } => Order::Start,
            };
            dialogue.update(next).await.unwrap();
            state
        });
    let message = |chat: serde_json::Value, from: i64, sender_chat: Option<serde_json::Value>| {
        let mut message = serde_json::json!({"message_id": 1, "date": 1771840800,
            "chat": chat, "from": {"id": from, "is_bot": false, "first_name": "Someone"},
            "text": "tea"});
        if let Some(sender_chat) = sender_chat {
            message["sender_chat"] = sender_chat;
        }
        // teloxide reads updates from text (from a `Value` it reads an error update).
        let update = serde_json::json!({"update_id": 1, "message": message});
        serde_json::from_str::<Update>(&update.to_string()).unwrap()
    };
    let family = serde_json::json!({"id": -100, "type": "group", "title": "Family"});
    let run = |update: Update| {
        let handler = handler.clone();
        let storage = storage.clone();
        async move {
            match handler
                .dispatch(teloxide::dptree::deps![update, storage])
                .await
            {
                ControlFlow::Break(state) => state,
                ControlFlow::Continue(_) => panic!("the handler did not run"),
            }
        }
    };
    let ada = message(family.clone(), 42, None);
    let bob = message(family.clone(), 43, None);
    assert_eq!(run(ada.clone()).await, Order::Start);
    assert_eq!(run(bob.clone()).await, Order::Start, "Bob's is not Ada's");
    assert_eq!(run(ada.clone()).await, awaiting("tea"));
    assert_eq!(run(bob.clone()).await, awaiting("tea"));
    // An anonymous admin names no member: the group's own dialogue.
    let anonymous = message(family.clone(), 1087968824, Some(family.clone()));
    assert_eq!(run(anonymous.clone()).await, Order::Start);
    assert_eq!(run(anonymous).await, awaiting("tea"));
    // Ada's private chat has its dialogue as before.
    let private = serde_json::json!({"id": 42, "type": "private", "first_name": "Ada"});
    assert_eq!(run(message(private, 42, None)).await, Order::Start);

    // They live in the group's session, which a reset ends for everyone.
    let key = bot
        .manager
        .key_for(&TelegramAdapter::new(UserId(777), "helper_bot").chat(FAMILY))
        .unwrap();
    let entry = bot
        .manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry;
    let mut slots: Vec<&String> = entry.extra[DIALOGUE_FIELD]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    slots.sort();
    assert_eq!(slots, ["-100", "-100/42", "-100/43"]);
    bot.manager.session(&key).reset().await.unwrap();
    assert_eq!(run(ada).await, Order::Start, "the reset ended Ada's order");
    assert_eq!(run(bob).await, Order::Start, "and Bob's");
}
