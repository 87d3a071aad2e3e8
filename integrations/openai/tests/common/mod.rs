//! A fake OpenAI-compatible chat-completions server on loopback: it keeps every request
//! body it receives and answers each with a numbered reply and fixed usage — or, when
//! the request declares tools and ends with a user message that mentions a shift, with a
//! call of the `shifts` tool; one that says [`SLOW`] is answered after 5 seconds,
//! [`A_MOMENT`] after 400 ms; [`FakeOpenAi::fail_next`] makes it answer the next
//! requests with `500`. The rig integration's tests use it too.
#![allow(dead_code)] // each test crate uses part of it

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// The usage every fake completion reports.
pub const PROMPT_TOKENS: u64 = 120;
/// The output tokens of every fake completion.
pub const COMPLETION_TOKENS: u64 = 7;

/// A running fake server.
pub struct FakeOpenAi {
    /// `http://127.0.0.1:<port>/v1`.
    pub base: String,
    requests: Arc<Mutex<Vec<Value>>>,
    down: Arc<Mutex<Down>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the server's handler shares with the test: the requests received, and the
/// ones to fail.
type Shared = (Arc<Mutex<Vec<Value>>>, Arc<Mutex<Down>>);

/// The requests the server answers with `500`: the next `times` that `when` picks.
#[derive(Default)]
struct Down {
    times: usize,
    when: Option<Failing>,
}

/// Which requests a [`FakeOpenAi::fail_next`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failing {
    /// Any request.
    Any,
    /// A request that carries a tool's result last (the model call after a tool ran).
    AfterTool,
}

impl FakeOpenAi {
    /// Starts a server on an ephemeral loopback port.
    pub async fn start() -> FakeOpenAi {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let down = Arc::new(Mutex::new(Down::default()));
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state((requests.clone(), down.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeOpenAi {
            base,
            requests,
            down,
            task,
        }
    }

    /// Answers the next `times` requests that `when` picks with `500` (a provider
    /// that is down).
    pub fn fail_next(&self, times: usize, when: Failing) {
        *self.down.lock().unwrap() = Down {
            times,
            when: Some(when),
        };
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// The body of the last request.
    pub fn last_request(&self) -> Value {
        self.requests
            .lock()
            .unwrap()
            .last()
            .expect("no request arrived")
            .clone()
    }

    /// The `(role, content)` of each message of the last request.
    pub fn last_messages(&self) -> Vec<(String, String)> {
        let requests = self.requests.lock().unwrap();
        let last = requests.last().expect("no request arrived");
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let content = match &m["content"] {
                    Value::String(text) => text.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(""),
                    _ => String::new(),
                };
                (m["role"].as_str().unwrap().to_owned(), content)
            })
            .collect()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a user message says to have the fake refuse the request as OpenAI's content
/// filter does: `400` with an `invalid_request_error`.
pub const REFUSED: &str = "FILTER_ME";

/// What the last message of a request says to have the fake take 5 seconds to answer
/// (a slow model).
pub const SLOW: &str = "TAKE_YOUR_TIME";
/// What the last message of a request says to have the fake take 400 ms (a model that
/// is still answering when the person writes again).
pub const A_MOMENT: &str = "TAKE_A_MOMENT";

/// Answers request number `n` (from 1) with `reply n`.
async fn complete(
    State((requests, down)): State<Shared>,
    Json(body): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let n = {
        let mut requests = requests.lock().unwrap();
        requests.push(body.clone());
        requests.len()
    };
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    {
        let mut down = down.lock().unwrap();
        let picked = match down.when {
            Some(Failing::Any) => true,
            Some(Failing::AfterTool) => last["role"] == "tool",
            None => false,
        };
        if picked && down.times > 0 {
            down.times -= 1;
            let error =
                json!({"error": {"message": "The server had an error.", "type": "server_error"}});
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, Json(error)).into_response();
        }
    }
    if last["content"].to_string().contains(SLOW) {
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    } else if last["content"].to_string().contains(A_MOMENT) {
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    if body["messages"].to_string().contains(REFUSED) {
        let refusal = json!({"error": {
            "message": "The response was filtered due to the prompt triggering the content management policy.",
            "type": "invalid_request_error", "param": "prompt", "code": "content_filter"
        }});
        return (axum::http::StatusCode::BAD_REQUEST, Json(refusal)).into_response();
    }
    let calls_tool = body["tools"]
        .as_array()
        .is_some_and(|tools| !tools.is_empty())
        && last["role"] == "user"
        && last["content"].to_string().contains("shift");
    if body["stream"] == true {
        return streamed(n, &body, calls_tool);
    }
    let message = if calls_tool {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "shifts", "arguments": "{\"day\":\"thu\"}"}
        }]})
    } else {
        json!({"role": "assistant", "content": format!("reply {n}")})
    };
    Json(json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "created": 1_700_000_000u32,
        "model": body["model"],
        "choices": [{
            "index": 0,
            "finish_reason": if calls_tool { "tool_calls" } else { "stop" },
            "message": message
        }],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS
        }
    }))
    .into_response()
}

/// The reply to request `n` as a stream of server-sent chunks: its text in three
/// pieces (or, with `calls_tool`, the call of the `shifts` tool), the finish, the usage
/// (when asked for), then `[DONE]`.
fn streamed(n: usize, body: &Value, calls_tool: bool) -> axum::response::Response {
    use axum::response::IntoResponse;
    let chunk = |choices: Value, usage: Value| {
        let chunk = json!({
            "id": format!("chatcmpl-{n}"),
            "object": "chat.completion.chunk",
            "created": 1_700_000_000u32,
            "model": body["model"],
            "choices": choices,
            "usage": usage,
        });
        format!("data: {chunk}\n\n")
    };
    let text = format!("reply {n}");
    let (head, tail) = text.split_at(3);
    let deltas = if calls_tool {
        vec![json!({"role": "assistant", "tool_calls": [{
            "index": 0, "id": "call_1", "type": "function",
            "function": {"name": "shifts", "arguments": "{\"day\":\"thu\"}"}
        }]})]
    } else {
        ["", head, tail]
            .iter()
            .map(|piece| match piece.is_empty() {
                true => json!({"role": "assistant", "content": ""}),
                false => json!({"content": piece}),
            })
            .collect()
    };
    let mut events: Vec<String> = deltas
        .into_iter()
        .map(|delta| {
            chunk(
                json!([{"index": 0, "delta": delta, "finish_reason": null}]),
                Value::Null,
            )
        })
        .collect();
    let finish = if calls_tool { "tool_calls" } else { "stop" };
    events.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
        Value::Null,
    ));
    if body["stream_options"]["include_usage"] == true {
        events.push(chunk(
            json!([]),
            json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}),
        ));
    }
    events.push("data: [DONE]\n\n".to_owned());
    (
        [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
        events.concat(),
    )
        .into_response()
}

/// `(role, content)` pairs, for comparing with [`FakeOpenAi::last_messages`].
pub fn said(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(role, content)| ((*role).to_owned(), (*content).to_owned()))
        .collect()
}

/// The built example (`cargo test` builds the package's examples before its tests).
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is not built: run `cargo test`",
        path.display()
    );
    path
}

/// Runs the terminal-chat example `name` on `state` against `server`, with `input`
/// typed in; returns what it printed.
pub async fn chat(name: &str, server: &FakeOpenAi, state: &Path, input: &str) -> String {
    let mut child = Command::new(example(name))
        .arg(state)
        .env("OPENAI_BASE_URL", &server.base)
        .env("OPENAI_MODEL", "gpt-test")
        .env("USER", "sam")
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}
