//! The whole bot against a fake Telegram Bot API on loopback: teloxide's dispatcher
//! polls scripted updates, each message goes through `turn` → a stand-in model →
//! `complete` → `sendMessage`; the sent messages, the sessions and transcripts on disk,
//! and — after a restart on the same directory — the conversation's continuation are
//! checked. Every wait is bounded.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions_teloxide::{send_replies, TelegramAdapter};
use common::{FakeTelegram, TOKEN};
use serde_json::{json, Value};
use teloxide::dispatching::ShutdownToken;
use teloxide::prelude::*;
use teloxide::types::{Me, UserId};
use tokio::time::timeout;

// ---------------------------------------------------------------------------------
// The bot: the example's handler, recording what the model saw.

type Seen = Arc<Mutex<Vec<(ChatId, Vec<ChatMessage>)>>>;
type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

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
    } else if last.contains("when is dinner") && last.contains("dinner at 7") {
        "Dinner is at 7, as Eve said.".into()
    } else {
        format!("({} messages in this session) noted", said.len())
    }
}

async fn on_message(
    bot: Bot,
    me: Me,
    msg: Message,
    sessions: Arc<SessionManager>,
    seen: Seen,
) -> HandlerResult {
    // Ada owns the bot: she may reset group sessions.
    let adapter = TelegramAdapter::from(&me).with_owners([UserId(42)]);
    let Some(inbound) = adapter.inbound(&msg) else {
        return Ok(());
    };
    let turn = sessions.turn(&inbound).await?;
    let reply = if turn.needs_model() {
        let conversation = turn.messages().await?;
        seen.lock()
            .unwrap()
            .push((msg.chat.id, conversation.clone()));
        stand_in_model(&conversation)
    } else {
        String::new()
    };
    send_replies(&bot, &sessions, &msg, &turn.complete(reply).await?).await?;
    Ok(())
}

/// A running bot: a dispatcher over a manager on the JSON store in `dir`.
struct RunningBot {
    shutdown: ShutdownToken,
    task: tokio::task::JoinHandle<()>,
    seen: Seen,
}

async fn start_bot(api_url: &str, dir: &Path) -> RunningBot {
    // The defaults: a session per private chat, the model only when addressed.
    let sessions = SessionManager::connect(&format!("json:{}", dir.display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bot = Bot::with_client(TOKEN, client).set_api_url(api_url.parse().unwrap());
    let seen = Seen::default();
    let handler = Update::filter_message().endpoint(on_message);
    let mut dispatcher = Dispatcher::builder(bot, handler)
        .dependencies(dptree::deps![Arc::new(sessions), seen.clone()])
        .build();
    let shutdown = dispatcher.shutdown_token();
    let task = tokio::spawn(async move { dispatcher.dispatch().await });
    RunningBot {
        shutdown,
        task,
        seen,
    }
}

impl RunningBot {
    /// Stops polling and waits for the handlers in flight.
    async fn stop(self) {
        common::stop_dispatcher(self.shutdown, self.task).await;
    }
}

// ---------------------------------------------------------------------------------
// Scripted chats.

fn ada() -> Value {
    json!({"id": 42, "is_bot": false, "first_name": "Ada", "username": "ada"})
}

fn eve() -> Value {
    json!({"id": 43, "is_bot": false, "first_name": "Eve"})
}

fn private(text: &str) -> Value {
    json!({"chat": {"id": 42, "type": "private", "first_name": "Ada"}, "from": ada(), "text": text})
}

fn family(from: Value, text: &str, entities: Value) -> Value {
    json!({"chat": {"id": -100, "type": "supergroup", "title": "Family"}, "from": from,
        "text": text, "entities": entities})
}

fn mention() -> Value {
    json!([{"type": "mention", "offset": 0, "length": 11}])
}

fn sessions_file(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("agents/main/sessions/sessions.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn transcript(dir: &Path, entry: &Value) -> String {
    let file = entry["sessionFile"].as_str().expect("a transcript file");
    let path = Path::new(file);
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        dir.join("agents/main/sessions").join(path)
    };
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn texts_to(sent: &[Value], chat: i64) -> Vec<&str> {
    sent.iter()
        .filter(|m| m["chat_id"] == chat)
        .map(|m| m["text"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_keeps_its_conversations_across_a_restart() {
    timeout(Duration::from_secs(30), conversation_across_a_restart())
        .await
        .expect("the whole test finishes within 30 s");
}

async fn conversation_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::default();
    let api = telegram.serve().await;

    // First run: a private chat, group chatter, a mention, a forum topic.
    let bot = start_bot(&api, dir.path()).await;
    telegram.push(private("hi, my name is Ada"));
    telegram.push(family(eve(), "dinner at 7 on Sunday", json!([])));
    // The owner's chatter is chatter too: the bot answers her only when addressed.
    telegram.push(family(ada(), "I'll bring dessert", json!([])));
    telegram.push(family(ada(), "@helper_bot when is dinner?", mention()));
    telegram.push(
        json!({"chat": {"id": -1001, "type": "supergroup", "title": "Team", "is_forum": true},
        "from": ada(), "text": "@helper_bot status?", "entities": mention(),
        "message_thread_id": 7, "is_topic_message": true}),
    );
    let sent = telegram.wait_for_sent(3).await;
    bot.stop().await;

    assert_eq!(texts_to(&sent, 42), ["Nice to meet you, Ada."]);
    // The chatter was not answered, but the model saw it when the bot was asked.
    assert_eq!(texts_to(&sent, -100), ["Dinner is at 7, as Eve said."]);
    assert_eq!(
        texts_to(&sent, -1001),
        ["(1 messages in this session) noted"]
    );
    let topic_reply = sent.iter().find(|m| m["chat_id"] == -1001).unwrap();
    assert_eq!(
        topic_reply["message_thread_id"], 7,
        "the reply goes to the topic"
    );
    assert_eq!(telegram.pending(), 0, "every update was confirmed");

    let sessions = sessions_file(dir.path());
    let mut keys: Vec<&str> = sessions
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "agent:main:telegram:dm:42",
            "agent:main:telegram:group:-100",
            "agent:main:telegram:group:-1001:topic:7",
        ]
    );
    let dm = &sessions["agent:main:telegram:dm:42"];
    assert_eq!(dm["turnCount"], 1);
    assert_eq!(dm["status"], "idle", "the turn completed");
    let dm_transcript = transcript(dir.path(), dm);
    assert!(
        dm_transcript.contains("hi, my name is Ada"),
        "{dm_transcript}"
    );
    assert!(
        dm_transcript.contains("Nice to meet you, Ada."),
        "{dm_transcript}"
    );
    let group = &sessions["agent:main:telegram:group:-100"];
    assert_eq!(group["subject"], "Family");
    assert!(transcript(dir.path(), group).contains("Dinner is at 7, as Eve said."));

    // Restart: a new manager and dispatcher on the same directory and server.
    let bot = start_bot(&api, dir.path()).await;
    telegram.push(private("what is my name?"));
    telegram.push(family(
        ada(),
        "/new@helper_bot",
        json!([{"type": "bot_command", "offset": 0, "length": 15}]),
    ));
    let sent = telegram.wait_for_sent(5).await;
    let seen = bot.seen.clone();
    bot.stop().await;

    assert_eq!(
        texts_to(&sent, 42),
        ["Nice to meet you, Ada.", "Your name is Ada."],
        "the conversation continues after the restart"
    );
    let seen = seen.lock().unwrap();
    let (_, conversation) = seen.iter().find(|(chat, _)| *chat == ChatId(42)).unwrap();
    let roles: Vec<ChatRole> = conversation.iter().map(|m| m.role).collect();
    assert_eq!(roles, [ChatRole::User, ChatRole::Assistant, ChatRole::User]);
    assert_eq!(conversation[1].content, "Nice to meet you, Ada.");

    assert_eq!(
        texts_to(&sent, -100),
        ["Dinner is at 7, as Eve said.", "New session started."],
        "/new@bot in a group resets its session"
    );
    assert_eq!(sent.len(), 5, "no update was handled twice: {sent:?}");

    let sessions = sessions_file(dir.path());
    assert_eq!(sessions["agent:main:telegram:dm:42"]["turnCount"], 2);
    assert_eq!(
        sessions["agent:main:telegram:dm:42"]["sessionId"], dm["sessionId"],
        "the same session"
    );
    assert_ne!(
        sessions["agent:main:telegram:group:-100"]["sessionId"], group["sessionId"],
        "a new group session"
    );
    let calls = telegram.calls();
    assert!(calls.contains(&"getme".to_owned()), "{calls:?}");
}
