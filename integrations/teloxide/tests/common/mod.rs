//! A fake Telegram Bot API on loopback for the end-to-end tests: it hands out scripted
//! updates through `getUpdates`, records every `sendMessage`, refuses (400) a message
//! whose text contains [`REFUSED`], and can deliver an update again.

#![allow(dead_code)] // each test file uses part of it

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::timeout;

pub const BOT_ID: i64 = 777;
pub const TOKEN: &str = "123456:TEST";
/// The longest a test waits for anything.
pub const WAIT: Duration = Duration::from_secs(10);
/// A text the fake server refuses to send.
pub const REFUSED: &str = "FILTER_ME";

/// What the fake server holds: updates not yet confirmed, and every call it answered.
#[derive(Default)]
pub struct Telegram {
    pub pending: VecDeque<Value>,
    pub next_update_id: i64,
    pub next_message_id: i64,
    /// `sendMessage` requests, in order.
    pub sent: Vec<Value>,
    /// Every method called, in order (lower case).
    pub calls: Vec<String>,
    /// `sendMessage` requests answered 400.
    pub refused: Vec<Value>,
    /// `editMessageText` requests, in order.
    pub edits: Vec<Value>,
    /// The message of the last update pushed.
    pub last: Option<Value>,
    /// Files `getFile` finds, by file id: the bytes the download serves, and the size
    /// `getFile` says (Telegram's word, which a download need not match).
    pub files: std::collections::HashMap<String, (Vec<u8>, usize)>,
    /// File paths downloaded, in order.
    pub downloads: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeTelegram {
    pub state: Arc<Mutex<Telegram>>,
    pub changed: Arc<Notify>,
}

impl FakeTelegram {
    /// Queues an update carrying `message` (its id and date filled in).
    pub fn push(&self, mut message: Value) {
        let mut state = self.state.lock().unwrap();
        state.next_update_id += 1;
        state.next_message_id += 1;
        let fields = message.as_object_mut().unwrap();
        fields.insert("message_id".into(), json!(state.next_message_id));
        fields.insert("date".into(), json!(1_771_840_800));
        state.last = Some(message.clone());
        let update = json!({"update_id": state.next_update_id, "message": message});
        state.pending.push_back(update);
        drop(state);
        self.changed.notify_waiters();
    }

    /// Queues the last update's message again under a new update id, as Telegram does
    /// when the bot died before confirming it.
    pub fn push_again(&self) {
        let mut state = self.state.lock().unwrap();
        let last = state.last.clone().expect("an update was pushed");
        state.next_update_id += 1;
        let update = json!({"update_id": state.next_update_id, "message": last});
        state.pending.push_back(update);
        drop(state);
        self.changed.notify_waiters();
    }

    pub fn sent(&self) -> Vec<Value> {
        self.state.lock().unwrap().sent.clone()
    }

    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn pending(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }

    /// Waits until the bot has confirmed every update (asked for updates past them).
    pub async fn wait_until_confirmed(&self) {
        let waited = timeout(WAIT, async {
            // getUpdates forgets confirmed updates without a notification: look often.
            while self.pending() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        waited
            .unwrap_or_else(|_| panic!("waited {WAIT:?}: {} updates unconfirmed", self.pending()));
    }

    /// Waits until `sendMessage` has been called `count` times in all.
    pub async fn wait_for_sent(&self, count: usize) -> Vec<Value> {
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

    /// Waits until `count` messages in all were refused.
    pub async fn wait_for_refused(&self, count: usize) -> Vec<Value> {
        let waited = timeout(WAIT, async {
            loop {
                let notified = self.changed.notified();
                let refused = self.state.lock().unwrap().refused.clone();
                if refused.len() >= count {
                    return refused;
                }
                notified.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("waited {WAIT:?} for {count} refused messages"))
    }

    /// Keeps `bytes` as the file `id`, which `getFile` says is `announced` bytes long.
    pub fn add_file(&self, id: &str, bytes: Vec<u8>, announced: usize) {
        let mut state = self.state.lock().unwrap();
        state.files.insert(id.to_owned(), (bytes, announced));
    }

    /// Serves the Bot API on a loopback port; returns its URL.
    pub async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/file/{*path}", axum::routing::get(download))
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
        "sendmessage" if params["text"].as_str().is_some_and(|t| t.contains(REFUSED)) => {
            fake.state.lock().unwrap().refused.push(params.clone());
            fake.changed.notify_waiters();
            return Json(json!({"ok": false, "error_code": 400,
                "description": "Bad Request: message is refused by the test"}));
        }
        "getfile" => {
            let id = params["file_id"].as_str().unwrap_or_default().to_owned();
            let state = fake.state.lock().unwrap();
            let Some((_, announced)) = state.files.get(&id) else {
                return Json(json!({"ok": false, "error_code": 400,
                    "description": "Bad Request: invalid file_id"}));
            };
            // `usize::MAX`: a `getFile` answer without `file_size` (it is optional).
            let mut file = json!({"file_id": id, "file_unique_id": format!("u-{id}"),
                "file_path": format!("files/{id}")});
            if *announced != usize::MAX {
                file["file_size"] = json!(announced);
            }
            file
        }
        "editmessagetext" => {
            let mut state = fake.state.lock().unwrap();
            state.edits.push(params.clone());
            let chat_id = params["chat_id"].as_i64().unwrap();
            drop(state);
            fake.changed.notify_waiters();
            json!({"message_id": params["message_id"], "date": 1_771_840_801,
                "edit_date": 1_771_840_802,
                "chat": {"id": chat_id, "type": "private", "first_name": "User"},
                "from": bot_user(), "text": params["text"]})
        }
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

/// A file download: `/file/bot<token>/files/<file id>` (teloxide sends the path's
/// slash encoded).
async fn download(State(fake): State<FakeTelegram>, uri: Uri) -> Vec<u8> {
    let path = uri.path().replace("%2F", "/");
    let id = path.rsplit('/').next().unwrap_or("").to_owned();
    let mut state = fake.state.lock().unwrap();
    state.downloads.push(uri.path().to_owned());
    state
        .files
        .get(&id)
        .map(|(bytes, _)| bytes.clone())
        .unwrap_or_default()
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

pub fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Helper", "username": "helper_bot",
        "can_join_groups": true, "can_read_all_group_messages": false,
        "supports_inline_queries": false, "can_connect_to_business": false,
        "has_main_web_app": false})
}

/// Stops a running dispatcher's polling and waits for its handlers in flight and for
/// `dispatch` to return.
///
/// The wait is on `dispatch` returning, not on the future `shutdown` returns: teloxide
/// 0.17 announces the end of a shutdown to the futures waiting at that moment only, so
/// that future never completes when the dispatcher finished before it was first polled
/// (seen here 1 stop in 30 with four test processes on two cores).
pub async fn stop_dispatcher(
    shutdown: teloxide::dispatching::ShutdownToken,
    task: tokio::task::JoinHandle<()>,
) {
    // `shutdown` refuses until the dispatcher has started; once it accepts, the
    // dispatcher is shutting down whether or not its future is awaited.
    while shutdown.shutdown().is_err() && !task.is_finished() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    timeout(WAIT, task)
        .await
        .expect("the dispatcher stops and dispatch returns")
        .unwrap();
}
