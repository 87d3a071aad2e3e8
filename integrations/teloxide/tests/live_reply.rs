//! A reply shown while the model writes it: "typing…", one message edited as the text
//! grows, and the finished reply split at 4,096 characters and logged once — over real
//! HTTP against a fake Bot API server on loopback, through `Throttle<Bot>`.

mod common;

use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions_teloxide::{split_message, LiveReply, TelegramAdapter, MAX_MESSAGE_LEN};
use common::{FakeTelegram, TOKEN};
use serde_json::json;
use teloxide::adaptors::throttle::Limits;
use teloxide::prelude::*;
use teloxide::types::UserId;

/// Ada's message `id`, as teloxide reads it from the Bot API.
fn ada_says(id: i32, text: &str) -> Message {
    let json = json!({
        "message_id": id, "date": 1_771_840_800, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
    });
    serde_json::from_str(&json.to_string()).unwrap()
}

/// Waits until `done` says so (10 s at most: then the test fails with `what`).
async fn until(what: &str, done: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    waited
        .await
        .unwrap_or_else(|_| panic!("waited 10 s for {what}"));
}

async fn setup() -> (FakeTelegram, Bot, SessionManager, tempfile::TempDir) {
    let fake = FakeTelegram::default();
    let url = fake.serve().await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bot = Bot::with_client(TOKEN, client).set_api_url(url.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let sessions = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    (fake, bot, sessions, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reply_types_then_grows_one_message_and_ends_as_the_logged_reply() {
    let (fake, bot, sessions, _dir) = setup().await;
    let bot = bot.throttle(Limits::default());
    let adapter = TelegramAdapter::new(UserId(common::BOT_ID as u64), "helper_bot");
    let asked = ada_says(10, "Tell me a long story");
    let turn = sessions
        .turn(&adapter.inbound(&asked).unwrap())
        .await
        .unwrap();

    let live = LiveReply::with_interval(bot.clone(), &asked, Duration::from_millis(100));
    until("typing…", || {
        fake.calls().contains(&"sendchataction".to_owned())
    })
    .await;
    assert!(fake.sent().is_empty(), "no text yet, no message");
    // The model writes: three paragraphs of about 3,000 characters, in pieces.
    let paragraphs: Vec<String> = (1..=3)
        .map(|n| format!("Part {n}. {}", "x".repeat(3_000)))
        .collect();
    let story = paragraphs.join("\n\n");
    for piece in story.as_bytes().chunks(1_000) {
        live.push(std::str::from_utf8(piece).unwrap());
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    until("an edit to the whole first piece", || {
        let edits = fake.state.lock().unwrap().edits.clone();
        edits
            .last()
            .is_some_and(|e| e["text"] == paragraphs[0].as_str())
    })
    .await;
    // One message, edited as it grew, never past Telegram's limit.
    assert_eq!(fake.sent().len(), 1, "one message while it streams");
    let state = fake.state.lock().unwrap().edits.clone();
    assert!(!state.is_empty(), "edited as the text grew");
    for edit in &state {
        let text = edit["text"].as_str().unwrap();
        assert!(text.encode_utf16().count() <= MAX_MESSAGE_LEN);
    }

    let payloads = turn.complete(story.as_str()).await.unwrap();
    let sent = live.finish(&sessions, &payloads).await.unwrap();
    // Done: the first message holds the first piece, the rest follow as messages.
    let pieces = split_message(&story, MAX_MESSAGE_LEN);
    assert_eq!(sent.len(), pieces.len());
    let texts: Vec<String> = sent.iter().map(|m| m.text().unwrap().to_owned()).collect();
    assert_eq!(texts, pieces);
    assert_eq!(
        fake.sent().len(),
        pieces.len(),
        "the streamed message was reused"
    );
    // Logged once, whole; believed read.
    let next = sessions
        .turn(&adapter.inbound(&ada_says(11, "And then?")).unwrap())
        .await
        .unwrap();
    let seen = next.messages().await.unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[1].content, story);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reply_that_ends_silent_leaves_nothing_in_the_chat() {
    let (fake, bot, sessions, _dir) = setup().await;
    let adapter = TelegramAdapter::new(UserId(common::BOT_ID as u64), "helper_bot");
    let asked = ada_says(10, "ok");
    let turn = sessions
        .turn(&adapter.inbound(&asked).unwrap())
        .await
        .unwrap();
    let live = LiveReply::with_interval(bot, &asked, Duration::from_millis(50));
    live.push("NO_REPLY");
    until("the text shown", || fake.sent().len() == 1).await;
    let payloads = turn.complete("NO_REPLY").await.unwrap();
    assert!(payloads.is_empty(), "a silent reply");
    let sent = live.finish(&sessions, &payloads).await.unwrap();
    assert!(sent.is_empty());
    assert!(
        fake.calls().contains(&"deletemessage".to_owned()),
        "{:?}",
        fake.calls()
    );
}

/// Found by an outside test: a live reply dropped without `finish` (the turn failed)
/// stops — no "typing…" forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reply_dropped_without_finish_stops() {
    let (fake, bot, _sessions, _dir) = setup().await;
    let asked = ada_says(10, "hello");
    let live = LiveReply::with_interval(bot, &asked, Duration::from_millis(20));
    let typing = || {
        fake.calls()
            .iter()
            .filter(|c| *c == "sendchataction")
            .count()
    };
    until("typing…", || typing() == 1).await;
    drop(live);
    // "typing…" lasts 4 s: a live reply still running would say it again by now.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert_eq!(typing(), 1, "no typing after the drop: {:?}", fake.calls());
}
