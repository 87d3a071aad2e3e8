//! The sessions HTTP service under load, shared by the `http` and `floors` benchmarks:
//! client tasks each sending resolve + PATCH (record a turn) for their own sender over
//! loopback HTTP/1.1, the same calls made directly on a `SessionManager`, and a bare
//! axum server with the same two routes and bodies (no session manager).

use std::sync::Arc;

use agent_sessions::manager::TurnOutcome;
use agent_sessions::prelude::*;
use axum::routing::{patch, post};
use axum::Json;
use serde_json::{json, Value};

pub const CLIENTS: usize = 8;
pub const ROUNDS: usize = 10;

/// A manager over the memory store (`None`) or a JSON store in `dir`.
pub fn manager(dir: Option<std::path::PathBuf>) -> Arc<SessionManager> {
    let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
    let manager = match dir {
        None => SessionManager::builder(InMemoryStore::new()).key_builder(keys),
        Some(dir) => SessionManager::builder(JsonFileStore::new(dir)).key_builder(keys),
    };
    Arc::new(manager.build().unwrap())
}

pub fn message(client: usize) -> InboundMessage {
    InboundMessage::direct("sms", format!("+1555000{client:04}"), "what is on today?")
        .with_agent("ws_bench")
}

/// One round per client, directly on the manager.
pub async fn direct_round(manager: &Arc<SessionManager>) {
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let manager = manager.clone();
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                let resolution = manager.resolve(&message(client)).await.unwrap();
                let outcome =
                    TurnOutcome::completed().with_exchange("what is on today?", "A meeting.");
                manager
                    .session(&resolution.key)
                    .record_turn(outcome)
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// The same over HTTP.
pub async fn http_round(base: &str, client: &reqwest::Client) {
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CLIENTS {
        let base = base.to_owned();
        let client = client.clone();
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                exchange(&base, &client, &format!("+1555000{n:04}")).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// A bare axum server with the service's two routes: each parses its request body as
/// the service does (into the same fields) and answers `replies` — a response the
/// service gave to the same request — serialised again. No session manager.
pub fn bare_router(replies: Arc<(Value, Value)>) -> axum::Router {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)] // parsed, as the service parses it, and not used
    struct Resolve {
        workspace_id: String,
        channel: String,
        remote_jid: String,
        user_message: String,
    }
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Turn {
        user_message: String,
        assistant_response: String,
    }
    let for_patch = replies.clone();
    axum::Router::new()
        .route(
            "/kernel/sessions/resolve",
            post(move |Json(_): Json<Resolve>| {
                let reply = replies.0.clone();
                async move { Json(reply) }
            }),
        )
        .route(
            "/kernel/sessions/{id}",
            patch(
                move |axum::extract::Path(_id): axum::extract::Path<String>,
                      Json(_): Json<Turn>| {
                    let reply = for_patch.1.clone();
                    async move { Json(reply) }
                },
            ),
        )
}

/// One resolve and one PATCH (record a turn) for `sender` over HTTP: the resolve's
/// reply and the PATCH's response (its body unread).
pub async fn exchange(
    base: &str,
    client: &reqwest::Client,
    sender: &str,
) -> (Value, reqwest::Response) {
    let resolved: Value = client
        .post(format!("{base}/kernel/sessions/resolve"))
        .json(&json!({
            "workspace_id": "ws_bench", "channel": "sms",
            "remote_jid": sender, "user_message": "what is on today?",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = resolved["session_id"].as_str().unwrap();
    let response = client
        .patch(format!("{base}/kernel/sessions/{id}"))
        .json(&json!({"user_message": "what is on today?", "assistant_response": "A meeting."}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
    (resolved, response)
}

/// The service's answers to one resolve and one PATCH, for the bare server to repeat.
pub async fn captured_replies(base: &str, client: &reqwest::Client) -> (Value, Value) {
    let (resolved, patched) = exchange(base, client, "+15559999999").await;
    (resolved, patched.json().await.unwrap())
}

/// Serves `app` on a new loopback port; returns its base URL.
pub fn spawn_server(runtime: &tokio::runtime::Runtime, app: axum::Router) -> String {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// Every client's session has exactly the turns sent to it.
pub fn assert_no_lost_update(
    manager: &SessionManager,
    runtime: &tokio::runtime::Runtime,
    turns: u64,
) {
    if turns == 0 {
        // Not measured in this run (a filter left it out).
        return;
    }
    for client in 0..CLIENTS {
        let key = manager.key_for(&message(client)).unwrap();
        let entry = runtime
            .block_on(manager.session(&key).get())
            .unwrap()
            .unwrap()
            .entry;
        assert_eq!(
            entry.turn_count,
            Some(turns),
            "lost updates for client {client}"
        );
    }
}
