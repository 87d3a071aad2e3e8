//! A manager keeps each session's conversation between turns and reads only the lines
//! appended since; what the model sees must be exactly what reading the whole
//! transcript gives. Random sessions — turns, failed turns, refused deliveries,
//! compactions, tool runs, forks, resets, torn last lines, and turns taken by another
//! process — are checked after every step against a manager that has never seen them.

mod common;

#[path = "common/stores.rs"]
mod stores;

use agent_sessions::exactly_once::{Delivery, TurnFailure};
use agent_sessions::inbound::ChatMessage;
use agent_sessions::prelude::*;
use agent_sessions::transcript::{Offset, TranscriptEntry};
use serde_json::json;
use stores::Stores;

const STEPS: usize = 60;
const SEEDS: u64 = 6;

/// A direct message from person `peer`.
fn dm(peer: u64, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", peer.to_string(), text)
}

/// A text of 1 to about 400 characters, with its step in it.
fn text(rng: &mut fastrand::Rng, step: usize) -> String {
    let words = rng.usize(1..60);
    let mut text = format!("s{step}");
    for _ in 0..words {
        text.push_str(" word");
    }
    text
}

/// A manager over `url`: a small token budget (so history is cut often), and a
/// message window every other seed.
async fn manager(url: &str, seed: u64) -> SessionManager {
    let mut builder = SessionManager::connect(url)
        .await
        .unwrap()
        .context_window(600);
    if seed % 2 == 1 {
        builder = builder.message_window(7);
    }
    builder.build().unwrap()
}

/// What a manager that never served `key` gives, and what `warm` gives.
async fn check(warm: &SessionManager, url: &str, seed: u64, key: &SessionKey, what: &str) {
    let cold = manager(url, seed).await;
    let expected = cold.session(key).messages().await.unwrap();
    let got = warm.session(key).messages().await.unwrap();
    assert_eq!(got, expected, "{url}, seed {seed}: {what}");
}

/// The ids of the lines of `key`'s transcript: messages and others.
async fn line_ids(manager: &SessionManager, key: &SessionKey) -> Vec<String> {
    let read = manager.session(key).replay(Offset::START).await.unwrap();
    read.events
        .into_iter()
        .filter_map(|event| event.entry.id)
        .collect()
}

fn compaction(first_kept: Option<String>, step: usize) -> TranscriptEntry {
    let mut line =
        json!({"type": "compaction", "summary": format!("summary at {step}"), "tokensBefore": 900});
    if let Some(id) = first_kept {
        line["firstKeptEntryId"] = json!(id);
    }
    serde_json::from_value(line).unwrap()
}

async fn run(url: &str, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let warm = manager(url, seed).await;
    let other = manager(url, seed).await;
    let first = warm.turn(&dm(seed, "hello")).await.unwrap();
    let mut key = first.key().clone();
    first.complete("hi").await.unwrap();
    let mut keys = vec![key.clone()];
    for step in 0..STEPS {
        let what = match rng.u8(0..12) {
            0..=3 => {
                let turn = warm.turn(&dm(seed, &text(&mut rng, step))).await.unwrap();
                // The turn's view: the history without its own line, then its input.
                let seen = turn.messages().await.unwrap();
                let cold = manager(url, seed).await;
                let expected = cold.session(turn.key()).messages().await.unwrap();
                assert_eq!(seen, expected, "{url}, seed {seed}, step {step}: a turn");
                turn.complete(text(&mut rng, step)).await.unwrap();
                "a turn"
            }
            4 => {
                let turn = warm.turn(&dm(seed, &text(&mut rng, step))).await.unwrap();
                let failure = if rng.bool() {
                    TurnFailure::DropInput
                } else {
                    TurnFailure::KeepInput
                };
                turn.fail(failure).await.unwrap();
                "a failed turn"
            }
            5 => {
                let turn = warm.turn(&dm(seed, &text(&mut rng, step))).await.unwrap();
                let reply = format!("{}\n\n{}", text(&mut rng, step), text(&mut rng, step));
                let payloads = turn.complete(reply).await.unwrap();
                for payload in &payloads {
                    if rng.bool() {
                        continue;
                    }
                    let delivery = if rng.bool() {
                        Delivery::Failed {
                            reason: "blocked".into(),
                        }
                    } else {
                        Delivery::Delivered
                    };
                    warm.report_delivery(payload, delivery).await.unwrap();
                }
                "a reply with delivery reports"
            }
            6 => {
                let ids = line_ids(&warm, &key).await;
                let first_kept = match rng.u8(0..4) {
                    0 => None,
                    1 => Some("not-a-line".to_owned()),
                    _ if ids.is_empty() => None,
                    _ => Some(ids[rng.usize(ids.len() / 2..ids.len())].clone()),
                };
                warm.session(&key)
                    .append(vec![compaction(first_kept, step)])
                    .await
                    .unwrap();
                "a compaction"
            }
            7 => {
                let mut call = ChatMessage::assistant("");
                call.tool_calls.push(agent_sessions::inbound::ToolCall {
                    id: format!("call_{step}"),
                    name: "shifts".into(),
                    arguments: json!({"day": "thu"}),
                });
                let run = [
                    call,
                    ChatMessage::tool(format!("call_{step}"), text(&mut rng, step)),
                ];
                warm.session(&key).append_chat(&run).await.unwrap();
                "a tool run"
            }
            8 => {
                // Another process takes a turn.
                let turn = other.turn(&dm(seed, &text(&mut rng, step))).await.unwrap();
                turn.complete(text(&mut rng, step)).await.unwrap();
                "another process's turn"
            }
            9 => {
                let thread = warm
                    .session(&key)
                    .fork_thread(&format!("t{step}"))
                    .await
                    .unwrap();
                check(&warm, url, seed, &thread.key, "a fork").await;
                keys.push(thread.key);
                "a fork"
            }
            10 if url.starts_with("json:") => {
                // A writer died halfway through a line.
                let entry = warm.session(&key).get().await.unwrap().unwrap().entry;
                let path = entry.session_file.expect("a JSON store records the file");
                let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                std::io::Write::write_all(&mut file, br#"{"type":"message","id":"torn","mess"#)
                    .unwrap();
                "a torn last line"
            }
            _ => {
                let turn = warm.turn(&dm(seed, "/new")).await.unwrap();
                turn.complete("ok").await.unwrap();
                key = warm.resolve(&dm(seed, "x")).await.unwrap().key;
                "a reset"
            }
        };
        for key in &keys {
            check(&warm, url, seed, key, &format!("step {step}, after {what}")).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_model_sees_is_what_the_whole_transcript_gives_after_any_history() {
    let stores = Stores::new("conversation_tail");
    for url in &stores.urls {
        for seed in 0..SEEDS {
            run(url, seed).await;
        }
    }
    stores.finish().await;
}

/// An operator rewrites a transcript (a redaction of the same length, say) and renames
/// the copy over it: every line where it was, the last one unchanged. The manager that
/// kept the conversation sees the new copy, not the one it read.
#[tokio::test]
async fn a_transcript_replaced_by_another_copy_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    for text in ["my card is 4111 1111 1111 1111", "and my name is Ada"] {
        let turn = manager.turn(&dm(7, text)).await.unwrap();
        turn.complete("noted").await.unwrap();
    }
    let key = manager.resolve(&dm(7, "x")).await.unwrap().key;
    let seen = manager.session(&key).messages().await.unwrap();
    assert!(seen.iter().any(|m| m.content.contains("4111")));

    let path = manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();
    let redacted = std::fs::read_to_string(&path)
        .unwrap()
        .replace("4111 1111 1111 1111", "XXXX XXXX XXXX XXXX");
    let copy = format!("{path}.tmp");
    std::fs::write(&copy, redacted).unwrap();
    std::fs::rename(&copy, &path).unwrap();

    let seen = manager.session(&key).messages().await.unwrap();
    assert!(
        seen.iter().all(|m| !m.content.contains("4111")),
        "the old copy is not served: {seen:?}"
    );
    assert!(seen.iter().any(|m| m.content.contains("XXXX XXXX")));
}
