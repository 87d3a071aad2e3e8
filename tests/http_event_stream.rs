//! The HTTP event stream as a bot author meets it: a session reset by its sender, and a
//! `from` offset into a transcript that does not exist yet.

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::http::{router, serve, Secret, ServiceOptions, SECRET_HEADER};
use agent_sessions::manager::LogMessage;
use agent_sessions::prelude::*;
use reqwest::StatusCode;

const SECRET: &str = "kernel-secret";

async fn manager(url: &str) -> SessionManager {
    SessionManager::connect(url)
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap()
}

/// Serves the kernel API over `url` and returns its base address.
async fn start(url: &str) -> String {
    let options = ServiceOptions::default().secret(Secret::new(SECRET).unwrap());
    let app = router(Arc::new(manager(url).await), options.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        serve(listener, app, &options, std::future::pending())
            .await
            .unwrap()
    });
    base
}

/// What the stream at `path` sends within `wait`, and its status.
async fn stream(base: &str, path: &str, wait: Duration) -> (StatusCode, String) {
    let mut response = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header(SECRET_HEADER, SECRET)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let mut body = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        body.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// "A current or a closed session may be followed": the session a reset replaced
/// streams the messages it had.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_replaced_by_a_reset_streams_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let base = start(&url).await;
    let writer = manager(&url).await;
    let message = InboundMessage::direct("whatsapp", "+15550001", "hello");
    let resolution = writer.resolve(&message).await.unwrap();
    let old_id = resolution.entry().session_id.clone();
    writer
        .session(&resolution.key)
        .log_message(LogMessage::inbound("before the reset"))
        .await
        .unwrap();
    let (status, before) = stream(
        &base,
        &format!("/kernel/sessions/{old_id}/events"),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(before.contains("before the reset"), "streamed: {before}");

    writer.session(&resolution.key).reset().await.unwrap();
    let (status, after) = stream(
        &base,
        &format!("/kernel/sessions/{old_id}/events"),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        after.contains("before the reset"),
        "the closed session streams its messages, streamed: {after:?}"
    );
}

/// "A `from` that is not where an event starts is 400": also when the session has no
/// transcript yet, rather than a 200 that later ends in an `internal` error.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "known: an offset into a transcript that does not exist yet is accepted, and the stream ends with an error event once it does"]
async fn a_from_past_the_end_of_an_empty_transcript_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let base = start(&url).await;
    let writer = manager(&url).await;
    let message = InboundMessage::direct("whatsapp", "+15550002", "hello");
    let resolution = writer.resolve(&message).await.unwrap();
    let id = resolution.entry().session_id.clone();
    let path = format!("/kernel/sessions/{id}/events?from=500");
    let streaming = tokio::spawn({
        let base = base.clone();
        async move { stream(&base, &path, Duration::from_secs(2)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer
        .session(&resolution.key)
        .log_message(LogMessage::inbound("first"))
        .await
        .unwrap();
    let (status, body) = streaming.await.unwrap();
    assert_eq!(
        (status, body.contains("\"internal\"")),
        (StatusCode::BAD_REQUEST, false),
        "streamed: {body:?}"
    );
}
