//! A bot written the way teloxide's users write one, against a fake Bot API on loopback:
//! the standard dialogue pattern (`enter_dialogue`) over the sessions, a `Throttle<Bot>`
//! requester, forum topics with chatter of their own, replies longer than Telegram's
//! limit, a reply Telegram refuses, and an update Telegram delivers twice.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions_teloxide::{send_replies, SessionDialogueStorage, TelegramAdapter};
use common::{FakeTelegram, REFUSED, TOKEN};
use serde_json::{json, Value};
use teloxide::adaptors::throttle::Limits;
use teloxide::adaptors::Throttle;
use teloxide::dispatching::dialogue::Dialogue;
use teloxide::dispatching::ShutdownToken;
use teloxide::prelude::*;
use teloxide::types::Me;
use tokio::time::timeout;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
enum State {
    #[default]
    Start,
    AwaitingName,
}

type BotDialogue = Dialogue<State, SessionDialogueStorage>;
type HandlerResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
/// What the model was given, per chat.
type Seen = Arc<Mutex<Vec<(ChatId, Vec<ChatMessage>)>>>;

/// The stand-in model: asks for a name, greets by it, and answers "long" with a text
/// over Telegram's limit and "refuse" with a text the fake server refuses.
fn model(state: &State, conversation: &[ChatMessage]) -> (String, Option<State>) {
    let last = conversation
        .last()
        .map(|m| m.content.as_str())
        .unwrap_or("");
    if last.contains("long") {
        let paragraph = "word ".repeat(500);
        let text = [paragraph.trim(); 4].join("\n\n"); // 4 × 2,499 characters
        return (text, None);
    }
    if last.contains("refuse") {
        return (format!("{REFUSED} this reply"), None);
    }
    match state {
        State::Start => ("What is your name?".into(), Some(State::AwaitingName)),
        State::AwaitingName => {
            let name = last.rsplit(' ').next().unwrap_or("stranger");
            (format!("Hello, {name}!"), Some(State::Start))
        }
    }
}

#[allow(clippy::too_many_arguments)] // the handler's dependencies, as teloxide injects them
async fn on_message(
    bot: Throttle<Bot>,
    me: Me,
    msg: Message,
    dialogue: BotDialogue,
    state: State,
    sessions: Arc<SessionManager>,
    seen: Seen,
) -> HandlerResult {
    let Some(inbound) = TelegramAdapter::from(&me).inbound(&msg) else {
        return Ok(());
    };
    let turn = sessions.turn(&inbound).await?;
    let reply = if turn.needs_model() {
        let conversation = turn.messages().await?;
        seen.lock()
            .unwrap()
            .push((msg.chat.id, conversation.clone()));
        let (reply, next) = model(&state, &conversation);
        if let Some(next) = next {
            dialogue.update(next).await?;
        }
        reply
    } else {
        String::new()
    };
    let payloads = turn.complete(reply).await?;
    if let Err(error) = send_replies(&bot, &sessions, &msg, &payloads).await {
        // Refused: already reported to the session; the bot goes on.
        eprintln!("not delivered: {error}");
    }
    Ok(())
}

struct RunningBot {
    shutdown: ShutdownToken,
    task: tokio::task::JoinHandle<()>,
    seen: Seen,
}

async fn start_bot(api_url: &str, dir: &Path) -> RunningBot {
    let sessions = Arc::new(
        SessionManager::connect(&format!("json:{}", dir.display()))
            .await
            .unwrap()
            .build()
            .unwrap(),
    );
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bot = Bot::with_client(TOKEN, client)
        .set_api_url(api_url.parse().unwrap())
        .throttle(Limits::default());
    let me = bot.get_me().await.unwrap();
    let storage = SessionDialogueStorage::new(sessions.clone(), TelegramAdapter::from(&me));
    let seen = Seen::default();
    let handler = Update::filter_message()
        .enter_dialogue::<Message, SessionDialogueStorage, State>()
        .endpoint(on_message);
    let mut dispatcher = Dispatcher::builder(bot, handler)
        .dependencies(dptree::deps![storage, sessions, seen.clone()])
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
    async fn stop(self) {
        common::stop_dispatcher(self.shutdown, self.task).await;
    }

    /// What the model was given in `chat`, turn by turn.
    fn seen_in(&self, chat: i64) -> Vec<Vec<ChatMessage>> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| *id == ChatId(chat))
            .map(|(_, conversation)| conversation.clone())
            .collect()
    }
}

fn user(id: i64, name: &str) -> Value {
    json!({"id": id, "is_bot": false, "first_name": name})
}

fn private(id: i64, name: &str, text: &str) -> Value {
    json!({"chat": {"id": id, "type": "private", "first_name": name}, "from": user(id, name),
        "text": text})
}

fn texts_to(sent: &[Value], chat: i64) -> Vec<String> {
    sent.iter()
        .filter(|m| m["chat_id"] == chat)
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

async fn within_30s(test: impl std::future::Future<Output = ()>) {
    timeout(Duration::from_secs(30), test)
        .await
        .expect("the test finishes within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_dialogue_pattern_works_from_a_new_chats_first_message() {
    within_30s(async {
        let dir = tempfile::tempdir().unwrap();
        let telegram = FakeTelegram::default();
        let api = telegram.serve().await;
        let bot = start_bot(&api, dir.path()).await;
        // A chat the bot has never seen: no session, no dialogue yet.
        telegram.push(private(51, "Grace", "hi"));
        telegram.wait_for_sent(1).await;
        telegram.push(private(51, "Grace", "I am Grace"));
        let sent = telegram.wait_for_sent(2).await;
        assert_eq!(
            texts_to(&sent, 51),
            ["What is your name?", "Hello, Grace!"],
            "the dialogue moved on from its default state"
        );
        bot.stop().await;
        // The state lives in the session: after a restart the dialogue goes on.
        let bot = start_bot(&api, dir.path()).await;
        telegram.push(private(51, "Grace", "hi again"));
        let sent = telegram.wait_for_sent(3).await;
        assert_eq!(texts_to(&sent, 51)[2], "What is your name?");
        bot.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_forum_topic_has_its_own_chatter() {
    within_30s(async {
        let dir = tempfile::tempdir().unwrap();
        let telegram = FakeTelegram::default();
        let api = telegram.serve().await;
        let bot = start_bot(&api, dir.path()).await;
        let in_topic = |topic: i64, text: &str, mention: bool| {
            let mut message = json!({
                "chat": {"id": -1001, "type": "supergroup", "title": "Team", "is_forum": true},
                "from": user(61, "Linus"), "text": text,
                "message_thread_id": topic, "is_topic_message": true});
            if mention {
                message["entities"] = json!([{"type": "mention", "offset": 0, "length": 11}]);
            }
            message
        };
        telegram.push(in_topic(43, "the deploy is broken", false));
        telegram.push(in_topic(42, "lunch at noon", false));
        telegram.push(in_topic(42, "@helper_bot what's up?", true));
        let sent = telegram.wait_for_sent(1).await;
        assert_eq!(sent[0]["message_thread_id"], 42, "answered in its topic");
        let seen = bot.seen_in(-1001);
        let input = &seen[0].last().unwrap().content;
        assert!(input.contains("lunch at noon"), "{input}");
        assert!(
            !input.contains("deploy"),
            "topic 43's chatter reached topic 42: {input}"
        );
        bot.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_replies_are_split_and_refused_ones_are_not_believed_read() {
    within_30s(async {
        let dir = tempfile::tempdir().unwrap();
        let telegram = FakeTelegram::default();
        let api = telegram.serve().await;
        let bot = start_bot(&api, dir.path()).await;
        telegram.push(private(71, "Ken", "something long please"));
        let sent = telegram.wait_for_sent(4).await;
        let parts = texts_to(&sent, 71);
        // Four paragraphs of 2,499 characters: two do not fit in one message.
        assert_eq!(parts.len(), 4, "one message a paragraph");
        for part in &parts {
            assert!(part.encode_utf16().count() <= 4096, "{}", part.len());
            assert!(!part.starts_with(char::is_whitespace) && !part.ends_with(' '));
        }
        assert_eq!(
            parts.join("\n\n"),
            ["word ".repeat(500).trim(); 4].join("\n\n"),
            "split at paragraphs, nothing lost"
        );

        telegram.push(private(71, "Ken", "now refuse"));
        telegram.wait_for_refused(1).await;
        telegram.push(private(71, "Ken", "did you answer?"));
        telegram.wait_for_sent(5).await;
        let seen = bot.seen_in(71);
        let last = seen.last().unwrap();
        let said: Vec<&str> = last
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(
            said.len(),
            1,
            "the long reply, not the refused one: {said:?}"
        );
        assert!(!said.iter().any(|s| s.contains(REFUSED)));
        bot.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_delivered_again_is_answered_once() {
    within_30s(async {
        let dir = tempfile::tempdir().unwrap();
        let telegram = FakeTelegram::default();
        let api = telegram.serve().await;
        let bot = start_bot(&api, dir.path()).await;
        telegram.push(private(81, "Barbara", "hello"));
        telegram.wait_for_sent(1).await;
        bot.stop().await;
        // The bot died before confirming the update: Telegram sends it again.
        telegram.push_again();
        telegram.push(private(81, "Barbara", "are you there?"));
        let bot = start_bot(&api, dir.path()).await;
        let sent = telegram.wait_for_sent(2).await;
        // Both updates taken, and time for a wrong third reply to show.
        telegram.wait_until_confirmed().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            texts_to(&telegram.sent(), 81).len(),
            2,
            "hello once, then the next message: {sent:?}"
        );
        bot.stop().await;
    })
    .await;
}
