//! A manager keeps each session's conversation between turns and reads only the lines
//! appended since; what the model sees must be exactly what reading the whole
//! transcript gives. Random sessions — turns, failed turns, refused deliveries,
//! compactions, tool runs, forks, resets, torn last lines, and turns taken by another
//! process — are checked after every step against a manager that reads each transcript
//! whole, and against a fresh manager, which reads only the end it needs.

mod common;

#[path = "common/stores.rs"]
mod stores;

use agent_sessions::exactly_once::{Delivery, TurnFailure};
use agent_sessions::inbound::ChatMessage;
use agent_sessions::prelude::*;
use agent_sessions::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptRead, TranscriptRef, TranscriptSubscription,
};
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

/// A manager over `url` that keeps no conversation between calls: it reads each
/// transcript from its end (or whole, with `whole`, as the crate did before it read
/// conversations from their end: what the model is to see).
async fn uncached(url: &str, seed: u64, whole: bool) -> SessionManager {
    let backend = agent_sessions::store::Backend::open(url).await.unwrap();
    let transcripts = Uncached {
        inner: backend.transcripts().clone(),
        whole,
        reads: std::sync::atomic::AtomicU64::new(0),
    };
    let mut builder = SessionManager::connect(url)
        .await
        .unwrap()
        .transcripts(transcripts)
        .context_window(600);
    if seed % 2 == 1 {
        builder = builder.message_window(7);
    }
    builder.build().unwrap()
}

/// What the managers give `key`: `warm` (which kept the conversation) and `fresh`
/// (which reads the transcript from its end) give what reading it whole gives.
async fn check(managers: &Managers, url: &str, seed: u64, key: &SessionKey, what: &str) {
    // The warm manager first: it waits for the summary its last turn's cut is
    // writing, which the others read from the store.
    let got = managers.warm.session(key).messages().await.unwrap();
    let expected = managers.whole.session(key).messages().await.unwrap();
    assert_eq!(got, expected, "{url}, seed {seed}: {what}");
    let got = managers.fresh.session(key).messages().await.unwrap();
    assert_eq!(
        got, expected,
        "{url}, seed {seed}: {what}, read from the end"
    );
}

struct Managers {
    warm: SessionManager,
    fresh: SessionManager,
    whole: SessionManager,
}

/// A transcript store that tells a manager every transcript is a new copy each time it
/// asks (so it keeps no conversation), and whose reads back from the end return the
/// whole transcript (the events before the place asked) with `whole`.
struct Uncached {
    inner: std::sync::Arc<dyn agent_sessions::transcript::TranscriptExport>,
    whole: bool,
    reads: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl agent_sessions::transcript::TranscriptStore for Uncached {
    async fn create(
        &self,
        transcript: &TranscriptRef,
        header: &SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> agent_sessions::Result<Vec<SessionEvent>> {
        self.inner.append(transcript, entries).await
    }

    async fn read(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
    ) -> agent_sessions::Result<TranscriptRead> {
        self.inner.read(transcript, from).await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> agent_sessions::Result<TranscriptRead> {
        if !self.whole {
            return self.inner.read_back(transcript, before, max_bytes).await;
        }
        let mut read = self.inner.read(transcript, Offset::START).await?;
        if let Some(before) = before {
            read.events.retain(|event| event.offset < before);
        }
        read.next = Offset::START;
        Ok(read)
    }

    async fn identity(&self, _: &TranscriptRef) -> agent_sessions::Result<Option<u64>> {
        Ok(Some(
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        ))
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: chrono::DateTime<chrono::Utc>,
    ) -> agent_sessions::Result<Option<std::path::PathBuf>> {
        self.inner.archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> agent_sessions::Result<bool> {
        self.inner.remove(transcript).await
    }

    async fn query_log(&self, query: &LogQuery) -> agent_sessions::Result<Vec<LogRecord>> {
        self.inner.query_log(query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.subscribe()
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.inner.location(transcript)
    }
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
    let managers = Managers {
        warm: manager(url, seed).await,
        fresh: uncached(url, seed, false).await,
        whole: uncached(url, seed, true).await,
    };
    let warm = &managers.warm;
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
                let expected = managers.whole.session(turn.key()).messages().await.unwrap();
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
                let ids = line_ids(warm, &key).await;
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
                let key = turn.key().clone();
                turn.complete(text(&mut rng, step)).await.unwrap();
                // …and is done with it (the summary of a cut it made is written).
                other.session(&key).messages().await.unwrap();
                "another process's turn"
            }
            9 => {
                let thread = warm
                    .session(&key)
                    .fork_thread(&format!("t{step}"))
                    .await
                    .unwrap();
                check(&managers, url, seed, &thread.key, "a fork").await;
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
            check(
                &managers,
                url,
                seed,
                key,
                &format!("step {step}, after {what}"),
            )
            .await;
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
