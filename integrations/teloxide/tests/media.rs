//! A bot that is sent photos and documents: each file reaches the session as an
//! attachment with its Telegram file id, `fetch_files` downloads what a model can read
//! (bounded in bytes, whatever Telegram announces), and the model is sent the photo as
//! an image input — over real HTTP against a fake Bot API and a fake OpenAI server on
//! loopback.

mod common;

#[path = "../../openai/tests/common/mod.rs"]
mod openai;

use agent_sessions::inbound::{files_to_answer, AttachmentKind};
use agent_sessions::prelude::*;
use agent_sessions_teloxide::{fetch_files, TelegramAdapter};
use async_openai::config::OpenAIConfig;
use common::{FakeTelegram, BOT_ID, TOKEN};
use openai::FakeOpenAi;
use serde_json::{json, Value};
use teloxide::adaptors::throttle::Limits;
use teloxide::prelude::*;
use teloxide::types::UserId;

const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F'];

/// Ada's message `id` with `fields` (a photo, a caption), as teloxide reads it.
fn ada_sends(id: i32, fields: Value) -> Message {
    let mut json = json!({
        "message_id": id, "date": 1_771_840_800,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
    });
    json.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    serde_json::from_str(&json.to_string()).unwrap()
}

fn photo(file_id: &str, size: usize) -> Value {
    json!([{"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
        "width": 800, "height": 600, "file_size": size}])
}

async fn telegram() -> (FakeTelegram, Bot) {
    let fake = FakeTelegram::default();
    let url = fake.serve().await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let bot = Bot::with_client(TOKEN, client).set_api_url(url.parse().unwrap());
    (fake, bot)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captioned_photo_is_shown_to_the_model_as_an_image_and_kept_as_a_placeholder() {
    let (telegram, bot) = telegram().await;
    let bot = bot.throttle(Limits::default());
    telegram.add_file("AgAC-plant", JPEG.to_vec(), JPEG.len());
    let model = FakeOpenAi::start().await;
    let client = async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_key("test-key")
            .with_api_base(&model.base),
    );
    let dir = tempfile::tempdir().unwrap();
    let sessions = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let adapter = TelegramAdapter::new(UserId(BOT_ID as u64), "helper_bot");

    let sent = ada_sends(
        10,
        json!({"caption": "what plant is this?", "photo": photo("AgAC-plant", JPEG.len())}),
    );
    let inbound = adapter.inbound(&sent).unwrap();
    let turn = sessions.turn(&inbound).await.unwrap();
    let mut messages = turn.messages().await.unwrap();
    let fetched = fetch_files(&bot, files_to_answer(&mut messages), 1024 * 1024).await;
    assert_eq!(
        (fetched.fetched, fetched.skipped.len()),
        (1, 0),
        "{fetched:?}"
    );
    let data_url = "data:image/jpeg;base64,/9j/4AAQSkZJRg==";
    assert_eq!(
        messages.last().unwrap().attachments[0].url.as_deref(),
        Some(data_url)
    );

    // The host's model call, as the async-openai integration makes it.
    let request = async_openai::types::chat::CreateChatCompletionRequest {
        model: "gpt-test".into(),
        messages: agent_sessions_openai::request_messages(&messages),
        ..Default::default()
    };
    let response = client.chat().create(request).await.unwrap();
    turn.complete(agent_sessions_openai::turn_reply(&response))
        .await
        .unwrap();

    let body = model.last_request();
    let content = &body["messages"][0]["content"];
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "what plant is this?\n<media:image>"})
    );
    assert_eq!(
        content[1],
        json!({"type": "image_url", "image_url": {"url": data_url}})
    );

    // The transcript keeps the file's id, never its bytes or a URL with the bot's token.
    let stored = std::fs::read_to_string(
        walk(dir.path())
            .into_iter()
            .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .unwrap(),
    )
    .unwrap();
    assert!(stored.contains("\"fileId\":\"AgAC-plant\""), "{stored}");
    assert!(
        !stored.contains("base64") && !stored.contains(TOKEN),
        "{stored}"
    );

    // The next turn shows the photo as its placeholder and fields: nothing downloaded
    // again, no bytes sent again.
    let next = ada_sends(11, json!({"text": "and how often do I water it?"}));
    let turn = sessions
        .turn(&adapter.inbound(&next).unwrap())
        .await
        .unwrap();
    let mut messages = turn.messages().await.unwrap();
    let again = fetch_files(&bot, files_to_answer(&mut messages), 1024 * 1024).await;
    assert_eq!(
        again,
        Default::default(),
        "the photo was answered: not fetched again"
    );
    assert_eq!(messages[0].content, "what plant is this?\n<media:image>");
    assert_eq!(
        messages[0].attachments[0].file_id.as_deref(),
        Some("AgAC-plant")
    );
    assert_eq!(messages[0].attachments[0].url, None);
    assert_eq!(telegram.state.lock().unwrap().downloads.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_too_large_gone_or_lying_about_their_size_stay_placeholders() {
    let (telegram, bot) = telegram().await;
    // Announced as 100 bytes; the download is 10,000.
    telegram.add_file("AgAC-liar", vec![7; 10_000], 100);
    telegram.add_file("AgAC-ok", JPEG.to_vec(), JPEG.len());
    let sessions = SessionManager::builder(InMemoryStore::new())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .build()
        .unwrap();
    let adapter = TelegramAdapter::new(UserId(BOT_ID as u64), "helper_bot");
    let mut seen = Vec::new();
    for (id, fields) in [
        (10, json!({"photo": photo("AgAC-big", 5_000_000)})),
        (11, json!({"photo": photo("AgAC-gone", 500)})),
        (12, json!({"photo": photo("AgAC-liar", 100)})),
        (
            13,
            json!({"voice": {"file_id": "AwAC-voice", "file_unique_id": "v", "duration": 2,
            "mime_type": "audio/ogg", "file_size": 300}}),
        ),
        (14, json!({"photo": photo("AgAC-ok", JPEG.len())})),
    ] {
        let inbound = adapter.inbound(&ada_sends(id, fields)).unwrap();
        let turn = sessions.turn(&inbound).await.unwrap();
        seen = turn.messages().await.unwrap();
        turn.complete("Got it.").await.unwrap();
    }
    let files = seen.iter_mut().flat_map(|m| &mut m.attachments);
    let fetched = fetch_files(&bot, files, 1_000).await;
    assert_eq!(
        fetched.fetched, 1,
        "only the honest small photo: {fetched:?}"
    );
    let skipped: Vec<&str> = fetched.skipped.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        skipped,
        ["AgAC-big", "AgAC-gone", "AgAC-liar"],
        "{fetched:?}"
    );
    assert!(
        fetched.skipped[0].1.contains("5000000 bytes"),
        "{fetched:?}"
    );
    assert!(
        fetched.skipped[1].1.contains("getFile failed"),
        "{fetched:?}"
    );
    assert!(fetched.skipped[2].1.contains("more than"), "{fetched:?}");
    let downloads = telegram.state.lock().unwrap().downloads.clone();
    assert!(
        !downloads.iter().any(|d| d.ends_with("AgAC-big")),
        "a file announced too large is never downloaded: {downloads:?}"
    );
    let files: Vec<(AttachmentKind, bool)> = seen
        .iter()
        .flat_map(|m| &m.attachments)
        .map(|file| (file.kind, file.url.is_some()))
        .collect();
    assert_eq!(
        files,
        [
            (AttachmentKind::Image, false),
            (AttachmentKind::Image, false),
            (AttachmentKind::Image, false),
            (AttachmentKind::Audio, false),
            (AttachmentKind::Image, true),
        ],
        "a voice note is left to the host"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// Found by an outside test: photos sent while the model answered, and a photo whose
/// model call failed, reached the turn that answered them without their bytes (a
/// session keeps none): `files_to_answer` gives them to `fetch_files` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photos_a_turn_answers_together_or_again_are_all_fetched_for_it() {
    use agent_sessions::exactly_once::TurnFailure;
    use std::sync::Arc;
    use std::time::Duration;

    let (telegram, bot) = telegram().await;
    for id in ["AgAC-a", "AgAC-b", "AgAC-c"] {
        // `usize::MAX`: getFile answers without a size, which the Bot API allows.
        telegram.add_file(id, JPEG.to_vec(), usize::MAX);
    }
    let sessions = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
            .queue(
                agent_sessions::lane::QueueSettings::default().debounce(Duration::from_millis(150)),
            )
            .build()
            .unwrap(),
    );
    let adapter = TelegramAdapter::new(UserId(BOT_ID as u64), "helper_bot");
    let said = |id: i32, fields: Value| adapter.inbound(&ada_sends(id, fields)).unwrap();

    // Two photos arrive while the model answers a text; one turn answers both.
    let first = sessions
        .turn(&said(10, json!({"text": "hi"})))
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for (id, file) in [(11, "AgAC-a"), (12, "AgAC-b")] {
        let (sessions, bot) = (sessions.clone(), bot.clone());
        let inbound = said(id, json!({"photo": photo(file, JPEG.len())}));
        waiting.push(tokio::spawn(async move {
            let turn = sessions.turn(&inbound).await.unwrap();
            if !turn.needs_model() {
                turn.complete("").await.unwrap();
                return None;
            }
            let mut messages = turn.messages().await.unwrap();
            let fetched = fetch_files(&bot, files_to_answer(&mut messages), 1 << 20).await;
            turn.complete("Two photos.").await.unwrap();
            Some((fetched, messages))
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.complete("Hello.").await.unwrap();
    let mut answered = Vec::new();
    for handler in waiting {
        answered.extend(handler.await.unwrap());
    }
    assert_eq!(answered.len(), 1, "one turn answers both photos");
    let (fetched, messages) = &answered[0];
    assert_eq!(fetched.fetched, 2, "{fetched:?}");
    let files: Vec<_> = messages
        .last()
        .unwrap()
        .attachments
        .iter()
        .map(|f| (f.file_id.clone().unwrap(), f.url.is_some()))
        .collect();
    assert_eq!(
        files,
        [("AgAC-a".to_owned(), true), ("AgAC-b".to_owned(), true)],
        "both photos, each with its bytes"
    );

    // A photo whose model call fails is kept, and the next turn fetches it again.
    let failing = sessions
        .turn(&said(13, json!({"photo": photo("AgAC-c", JPEG.len())})))
        .await
        .unwrap();
    failing.fail(TurnFailure::KeepInput).await.unwrap();
    let retry = sessions
        .turn(&said(14, json!({"text": "well?"})))
        .await
        .unwrap();
    let mut messages = retry.messages().await.unwrap();
    let fetched = fetch_files(&bot, files_to_answer(&mut messages), 1 << 20).await;
    assert_eq!(fetched.fetched, 1, "the kept photo: {fetched:?}");
    let kept = &messages[messages.len() - 2];
    assert_eq!(kept.attachments[0].file_id.as_deref(), Some("AgAC-c"));
    assert!(kept.attachments[0].url.is_some());
}
