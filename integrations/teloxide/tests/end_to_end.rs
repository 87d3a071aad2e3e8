//! The whole bot against a fake Telegram Bot API on loopback: teloxide's dispatcher
//! polls scripted updates, each message goes through `turn` → a stand-in model →
//! `complete` → `sendMessage`; the sent messages, the sessions and transcripts on disk,
//! and — after a restart on the same directory — the conversation's continuation are
//! checked. Every wait is bounded.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sessions::key::{DefaultKeyBuilder, DmScope};
use agent_sessions::prelude::*;
use agent_sessions_teloxide::{send_replies, TelegramAdapter};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde_json::{json, Value};
use teloxide::dispatching::ShutdownToken;
use teloxide::prelude::*;
use teloxide::types::{Me, UserId};
use tokio::sync::Notify;
use tokio::time::timeout;

const BOT_ID: i64 = 777;
const TOKEN: &str = "123456:TEST";
/// The longest a test waits for anything; the whole test stays well under 30 s.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------
// The fake Bot API.

/// What the fake server holds: updates not yet confirmed, and every call it answered.
#[derive(Default)]
struct Telegram {
    pending: VecDeque<Value>,
    next_update_id: i64,
    next_message_id: i64,
    /// `sendMessage` requests, in order.
    sent: Vec<Value>,
    /// Every method called, in order (lower case).
    calls: Vec<String>,
}

#[derive(Clone, Default)]
struct FakeTelegram {
    state: Arc<Mutex<Telegram>>,
    changed: Arc<Notify>,
}

impl FakeTelegram {
    /// Queues an update carrying `message` (its id and date filled in).
    fn push(&self, mut message: Value) {
        let mut state = self.state.lock().unwrap();
        state.next_update_id += 1;
        state.next_message_id += 1;
        let fields = message.as_object_mut().unwrap();
        fields.insert("message_id".into(), json!(state.next_message_id));
        fields.insert("date".into(), json!(1_771_840_800));
        let update = json!({"update_id": state.next_update_id, "message": message});
        state.pending.push_back(update);
        drop(state);
        self.changed.notify_waiters();
    }

    fn sent(&self) -> Vec<Value> {
        self.state.lock().unwrap().sent.clone()
    }

    fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    fn pending(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }

    /// Waits until `sendMessage` has been called `count` times in all.
    async fn wait_for_sent(&self, count: usize) -> Vec<Value> {
        let waited = timeout(WAIT, async {
            loop {
                let notified = self.changed.notified();
                let sent = self.sent();
                if sent.len() >= count {
                    return sent;
                }
                notified.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!(
                "waited {WAIT:?} for {count} sent messages; got {:?}",
                self.sent()
            )
        })
    }

    /// Serves the Bot API on a loopback port; returns its URL.
    async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }
}

/// One Bot API call: `/bot<token>/<method>` with a JSON body.
async fn answer(State(fake): State<FakeTelegram>, uri: Uri, body: Bytes) -> Json<Value> {
    let method = uri.path().rsplit('/').next().unwrap_or("").to_lowercase();
    let params: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    fake.state.lock().unwrap().calls.push(method.clone());
    let result = match method.as_str() {
        "getme" => bot_user(),
        "getupdates" => get_updates(&fake, &params).await,
        "sendmessage" => {
            let mut state = fake.state.lock().unwrap();
            state.sent.push(params.clone());
            state.next_message_id += 1;
            let chat_id = params["chat_id"].as_i64().unwrap();
            let chat = if chat_id > 0 {
                json!({"id": chat_id, "type": "private", "first_name": "User"})
            } else {
                json!({"id": chat_id, "type": "supergroup", "title": "Group"})
            };
            let mut message = json!({"message_id": state.next_message_id, "date": 1_771_840_801,
                "chat": chat, "from": bot_user(), "text": params["text"]});
            if let Some(thread) = params.get("message_thread_id") {
                message["message_thread_id"] = thread.clone();
                message["is_topic_message"] = json!(true);
            }
            drop(state);
            fake.changed.notify_waiters();
            message
        }
        _ => json!(true), // deleteWebhook and anything else: done
    };
    Json(json!({"ok": true, "result": result}))
}

/// Telegram's `getUpdates`: forgets updates below `offset`, returns the rest, or waits
/// a little (a short long poll) when there are none.
async fn get_updates(fake: &FakeTelegram, params: &Value) -> Value {
    let offset = params["offset"].as_i64().unwrap_or(0);
    let long_poll = params["timeout"].as_u64().unwrap_or(0) > 0;
    for attempt in 0..2 {
        let notified = fake.changed.notified();
        {
            let mut state = fake.state.lock().unwrap();
            while state
                .pending
                .front()
                .is_some_and(|u| u["update_id"].as_i64().unwrap() < offset)
            {
                state.pending.pop_front();
            }
            if !state.pending.is_empty() || !long_poll || attempt == 1 {
                return Value::Array(state.pending.iter().cloned().collect());
            }
        }
        let _ = timeout(Duration::from_millis(200), notified).await;
    }
    unreachable!("the second attempt returns")
}

fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Helper", "username": "helper_bot",
        "can_join_groups": true, "can_read_all_group_messages": false,
        "supports_inline_queries": false, "can_connect_to_business": false,
        "has_main_web_app": false})
}

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
    send_replies(&bot, &msg, &turn.complete(reply).await?).await?;
    Ok(())
}

/// A running bot: a dispatcher over a manager on the JSON store in `dir`.
struct RunningBot {
    shutdown: ShutdownToken,
    task: tokio::task::JoinHandle<()>,
    seen: Seen,
}

async fn start_bot(api_url: &str, dir: &Path) -> RunningBot {
    let sessions = SessionManager::connect(&format!("json:{}", dir.display()))
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build();
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
        let stopping = loop {
            // `shutdown` refuses until the dispatcher has started.
            match self.shutdown.shutdown() {
                Ok(stopping) => break stopping,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        timeout(WAIT, stopping).await.expect("the dispatcher stops");
        timeout(WAIT, self.task)
            .await
            .expect("dispatch returns")
            .unwrap();
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
