//! A reply longer than Telegram's limit goes out as several messages; when Telegram
//! refuses one of them, the rest still go out, `send_replies` says which did not, and
//! the model sees exactly the pieces the user got — over real HTTP against a fake Bot
//! API server on loopback.

mod common;

use agent_sessions::manager::TurnReply;
use agent_sessions::prelude::*;
use agent_sessions_teloxide::{
    send_replies, split_message, SendError, TelegramAdapter, MAX_MESSAGE_LEN,
};
use common::{FakeTelegram, REFUSED, TOKEN};
use serde_json::json;
use teloxide::prelude::*;
use teloxide::types::UserId;

/// The fake Bot API, and a bot that talks to it.
async fn telegram() -> (FakeTelegram, Bot) {
    let fake = FakeTelegram::default();
    let url = fake.serve().await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bot = Bot::with_client(TOKEN, client).set_api_url(url.parse().unwrap());
    (fake, bot)
}

async fn open(dir: &std::path::Path) -> SessionManager {
    SessionManager::connect(&format!("json:{}", dir.display()))
        .await
        .unwrap()
        .build()
        .unwrap()
}

/// Ada's message, as teloxide reads it from the Bot API (each with an id of its own).
fn ada_says(text: &str) -> Message {
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(10);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let json = json!({
        "message_id": id, "date": 1_771_840_800, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
    });
    serde_json::from_str(&json.to_string()).unwrap()
}

/// Five paragraphs of about 4,000 characters: five messages; the third says what the
/// fake server refuses.
fn long_reply() -> String {
    (1..=5)
        .map(|n| {
            let word = if n == 3 {
                REFUSED.to_owned()
            } else {
                format!("p{n}")
            };
            format!("{word} {}", "x".repeat(4_000))
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[tokio::test]
async fn a_split_reply_telegram_refuses_in_part_is_believed_read_as_far_as_it_was() {
    let (fake, bot) = telegram().await;
    let dir = tempfile::tempdir().unwrap();
    let sessions = open(dir.path()).await;
    let adapter = TelegramAdapter::new(UserId(common::BOT_ID as u64), "helper_bot");

    let asked = ada_says("Tell me the whole story");
    let turn = sessions
        .turn(&adapter.inbound(&asked).unwrap())
        .await
        .unwrap();
    let reply = long_reply();
    let pieces = split_message(&reply, MAX_MESSAGE_LEN);
    assert_eq!(pieces.len(), 5);
    let payloads = turn.complete(reply.as_str()).await.unwrap();

    let Err(SendError::Telegram { sent, unsent }) =
        send_replies(&bot, &sessions, &asked, &payloads).await
    else {
        panic!("Telegram refused the third message");
    };
    // Pieces 4 and 5 went out after the refused one; the error says what did not.
    assert_eq!(sent.len(), 4);
    assert_eq!(fake.sent().len(), 4);
    assert_eq!(unsent.len(), 1);
    assert_eq!((unsent[0].payload, unsent[0].piece), (0, 2));
    assert_eq!(unsent[0].text, pieces[2]);
    assert!(unsent[0].error.to_string().contains("refused by the test"));

    // The model sees the four pieces the user read, not the refused one.
    let next = sessions
        .turn(&adapter.inbound(&ada_says("And then?")).unwrap())
        .await
        .unwrap();
    let messages = next.messages().await.unwrap();
    assert_eq!(messages.len(), 3);
    let believed = &messages[1].content;
    assert_eq!(messages[1].role, ChatRole::Assistant);
    for (n, piece) in pieces.iter().enumerate() {
        assert_eq!(believed.contains(piece), n != 2, "piece {n}");
    }
    assert!(!believed.contains(REFUSED));
    next.complete("The end.").await.unwrap();
}

#[tokio::test]
async fn a_reply_telegram_refuses_whole_is_not_believed_read_and_the_next_payload_still_goes() {
    let (fake, bot) = telegram().await;
    let dir = tempfile::tempdir().unwrap();
    let sessions = open(dir.path()).await;
    let adapter = TelegramAdapter::new(UserId(common::BOT_ID as u64), "helper_bot");

    let asked = ada_says("Two things?");
    let turn = sessions
        .turn(&adapter.inbound(&asked).unwrap())
        .await
        .unwrap();
    // Two payloads: the first refused whole, the second sent.
    let reply = TurnReply::payloads(vec![
        ReplyPayload::text(format!("{REFUSED} one")),
        ReplyPayload::text("two"),
    ]);
    let payloads = turn.complete(reply).await.unwrap();
    assert_eq!(payloads.len(), 2);
    let result = send_replies(&bot, &sessions, &asked, &payloads).await;
    let error = result.expect_err("the first payload was refused");
    assert!(
        error
            .to_string()
            .starts_with("Telegram did not take 1 of the reply's"),
        "{error}"
    );
    assert!(std::error::Error::source(&error).is_some());
    let sent: Vec<String> = fake
        .sent()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sent, ["two"]);
    // The model believes only the second read.
    let next = sessions
        .turn(&adapter.inbound(&ada_says("Hm?")).unwrap())
        .await
        .unwrap();
    let said: Vec<String> = next
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(said, ["Two things?", "two", "Hm?"]);
}

/// Found by an outside test: the reply target goes with the first message delivered,
/// not with one Telegram refused.
#[tokio::test]
async fn the_reply_target_goes_with_the_first_message_delivered() {
    let (fake, bot) = telegram().await;
    let dir = tempfile::tempdir().unwrap();
    let sessions = open(dir.path()).await;
    let adapter = TelegramAdapter::new(UserId(common::BOT_ID as u64), "helper_bot");
    let asked = ada_says("Two parts please");
    let turn = sessions
        .turn(&adapter.inbound(&asked).unwrap())
        .await
        .unwrap();
    let reply = format!(
        "[[reply_to_current]] {REFUSED} {}\n\n{}",
        "a".repeat(4_000),
        "b".repeat(100)
    );
    let payloads = turn.complete(reply.as_str()).await.unwrap();
    assert!(payloads[0].reply_to_current);
    let sent = send_replies(&bot, &sessions, &asked, &payloads).await;
    assert!(matches!(sent, Err(SendError::Telegram { .. })));
    let delivered = fake.sent();
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        delivered[0]["reply_parameters"]["message_id"], asked.id.0,
        "{}",
        delivered[0]
    );
}
