//! The HTTP event stream as a bot author meets it: a session reset by its sender, and a
//! `from` offset into a transcript that does not exist yet.

mod common;
#[path = "common/fails_over.rs"]
mod fails_over;

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

/// A key's stream resumed at an offset where no event of the key's session starts —
/// past its end (`u64::MAX`), inside a line — is refused with 400 `invalid_request`,
/// as a session's stream is, rather than a 200 that ends in an `internal` error event;
/// a session that is none of the key's is 400 too.
#[tokio::test(flavor = "multi_thread")]
async fn a_keys_stream_from_a_position_in_none_of_its_events_is_400() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let base = start(&url).await;
    let writer = manager(&url).await;
    let message = InboundMessage::direct("whatsapp", "+15550003", "hello");
    let turn = writer.turn(&message).await.unwrap();
    let key = turn.key().clone();
    let id = turn.resolution().unwrap().entry().session_id.clone();
    turn.complete("hi").await.unwrap();
    for from in [
        format!("{id}:18446744073709551615"),
        format!("{id}:3"),
        "00000000-0000-4000-8000-000000000000:0".to_owned(),
    ] {
        let (status, body) = stream(
            &base,
            &format!("/kernel/keys/{key}/events?from={from}"),
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{from}: {body}");
        assert!(body.contains("invalid_request"), "{from}: {body}");
    }
    // A good position still streams.
    let (status, body) = stream(
        &base,
        &format!("/kernel/keys/{key}/events?from={id}:0"),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("hello"), "{body}");
}

/// One server-sent event: its name (`message` when it has none), id and data.
#[derive(Debug)]
struct Sse {
    event: String,
    id: String,
    data: serde_json::Value,
}

/// Reads a stream's events as they arrive.
struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    async fn open(base: &str, path: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .header(SECRET_HEADER, SECRET);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        request.send().await.unwrap()
    }

    /// The next event (keep-alive comments skipped), waiting up to 20 s.
    async fn next(&mut self) -> Sse {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let (mut event, mut id, mut data) =
                    ("message".to_owned(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        event = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("id:") {
                        id = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Sse {
                    event,
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                };
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.response.chunk())
                .await
                .expect("the next event arrives")
                .unwrap()
                .unwrap_or_else(|| {
                    panic!("the stream stays open; it ended after {:?}", self.buffer)
                });
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The text of a line event's message, or `session:<startReason>`.
    fn said(event: &Sse) -> String {
        match event.event.as_str() {
            "session" => format!("session:{}", event.data["startReason"].as_str().unwrap()),
            _ => event.data["entry"]["message"]["content"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| {
                    event.data["entry"]["message"]["content"][0]["text"]
                        .as_str()
                        .map(str::to_owned)
                })
                .unwrap_or_default(),
        }
    }
}

/// `GET /kernel/keys/{key}/events` follows a key into the session that replaced its
/// session, whoever wrote it, with a `session` event that says why; a client that
/// reconnects with the last id it saw gets exactly what followed; bad ids, positions
/// and keys are 400s in the API's JSON, and the stream needs the secret.
async fn a_keys_stream_continues_across_a_reset_and_resumes(url: &str) {
    let base = start(url).await;
    let writer = manager(url).await;
    let say = |text: &'static str| {
        let writer = &writer;
        async move {
            let turn = writer
                .turn(&InboundMessage::direct("telegram", "42", text))
                .await
                .unwrap();
            let key = turn.key().clone();
            turn.complete(format!("re: {text}")).await.unwrap();
            key
        }
    };
    let key = say("first").await;
    let path = format!("/kernel/keys/{}/events", key.as_str());
    let mut reader = SseReader {
        response: SseReader::open(&base, &path, None).await,
        buffer: String::new(),
    };
    assert_eq!(reader.response.status(), StatusCode::OK);
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let event = reader.next().await;
        seen.push(SseReader::said(&event));
        ids.push(event.id);
    }
    assert_eq!(seen, ["session:no_session", "first", "re: first"]);

    say("/new").await;
    say("second").await;
    while seen.last().map(String::as_str) != Some("re: second") {
        let event = reader.next().await;
        if event.event == "session" {
            assert_eq!(event.data["previous"], ids[0].split(':').next().unwrap());
            assert_eq!(event.data["key"], key.as_str());
        }
        seen.push(SseReader::said(&event));
    }
    assert_eq!(
        seen[3..],
        [
            "session:explicit_reset",
            "New session started.",
            "second",
            "re: second"
        ]
    );

    // Reconnecting after "first": its reply, then the next session, nothing twice.
    let mut resumed = SseReader {
        response: SseReader::open(&base, &path, Some(&ids[1])).await,
        buffer: String::new(),
    };
    let mut again = Vec::new();
    while again.last().map(String::as_str) != Some("re: second") {
        again.push(SseReader::said(&resumed.next().await));
    }
    assert_eq!(again, seen[2..]);

    for (last_event_id, query, why) in [
        (Some("garbage"), "", "not an event id"),
        (None, "?from=nosuchsession:0", "none of the key's sessions"),
        (None, "?from=12", "<sessionId>:<offset>"),
    ] {
        let response = SseReader::open(&base, &format!("{path}{query}"), last_event_id).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{why}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["ok"], false);
        assert!(
            body["error"]["message"].as_str().unwrap().contains(why),
            "{body}"
        );
    }
    let bad_key = SseReader::open(&base, "/kernel/keys/agent:..:x/events", None).await;
    assert_eq!(bad_key.status(), StatusCode::BAD_REQUEST);
    let unauthenticated = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
}

/// `GET /kernel/agents/{agent}/events` tells of every session of the agent as it
/// starts and changes status, with each line's key and session; a client that
/// reconnects with the last id it saw gets every line since (some perhaps again); an
/// invalid agent id is 400 and the stream needs the secret. A manager isolated to
/// another agent refuses to follow this one.
async fn an_agents_stream_tells_of_every_session(url: &str) {
    let base = start(url).await;
    let writer = manager(url).await;
    let path = "/kernel/agents/main/events";
    let mut reader = SseReader {
        response: SseReader::open(&base, path, None).await,
        buffer: String::new(),
    };
    assert_eq!(reader.response.status(), StatusCode::OK);
    let mut keys = Vec::new();
    for peer in ["41", "42"] {
        let turn = writer
            .turn(&InboundMessage::direct(
                "telegram",
                peer,
                format!("hi from {peer}"),
            ))
            .await
            .unwrap();
        keys.push(turn.key().clone());
        turn.complete(format!("re {peer}")).await.unwrap();
    }
    writer.session(&keys[1]).close().await.unwrap();

    let mut lines = std::collections::BTreeSet::new();
    let mut new_sessions = std::collections::BTreeSet::new();
    let mut closed = false;
    let mut first_id = None;
    while lines.len() < 4 || !closed {
        let event = reader.next().await;
        first_id.get_or_insert(event.id.clone());
        assert!(
            event.id.parse::<u64>().is_ok(),
            "ids are times: {}",
            event.id
        );
        match event.event.as_str() {
            "session" => {
                assert_eq!(event.data["new"], true);
                new_sessions.insert(event.data["key"].as_str().unwrap().to_owned());
                closed |= event.data["status"] == "closed";
            }
            "status" => closed |= event.data["status"] == "closed",
            _ => {
                let key = event.data["key"].as_str().unwrap().to_owned();
                assert!(event.data["sessionId"].is_string());
                // Messages; the close's status line says nothing.
                let said = SseReader::said(&event);
                if !said.is_empty() {
                    lines.insert((key, said));
                }
            }
        }
    }
    let expected_keys: std::collections::BTreeSet<String> =
        keys.iter().map(|k| k.as_str().to_owned()).collect();
    assert_eq!(new_sessions, expected_keys);
    let said: Vec<String> = lines.iter().map(|(_, said)| said.clone()).collect();
    assert_eq!(said, ["hi from 41", "re 41", "hi from 42", "re 42"]);

    // From the first id: every line again.
    let mut resumed = SseReader {
        response: SseReader::open(&base, path, first_id.as_deref()).await,
        buffer: String::new(),
    };
    let mut again = std::collections::BTreeSet::new();
    while again.len() < 4 {
        let event = resumed.next().await;
        let said = SseReader::said(&event);
        if event.event == "message" && !said.is_empty() {
            let key = event.data["key"].as_str().unwrap().to_owned();
            again.insert((key, said));
        }
    }
    assert_eq!(again, lines);

    // Streams that have nothing to send yet answer at once.
    for idle in [
        "/kernel/agents/quiet/events",
        "/kernel/keys/agent:main:telegram:dm:nobody/events",
    ] {
        let response =
            tokio::time::timeout(Duration::from_secs(2), SseReader::open(&base, idle, None))
                .await
                .expect("the response comes before any event");
        assert_eq!(response.status(), StatusCode::OK, "{idle}");
    }

    let bad = SseReader::open(&base, "/kernel/agents/Not%20An%20Agent!/events", None).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let garbage = SseReader::open(&base, path, Some("yesterday")).await;
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);
    let unauthenticated = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);

    let isolated = SessionManager::connect(url)
        .await
        .unwrap()
        .isolate_to_agent(AgentId::new("ops").unwrap())
        .build()
        .unwrap();
    let refused = isolated
        .follow(
            agent_sessions::transcript::follow::Scope::Agent(AgentId::main()),
            agent_sessions::transcript::follow::Position::Now,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, agent_sessions::Error::AccessDenied { .. }),
        "{refused}"
    );
}

macro_rules! per_backend {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn json() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&format!("json:{}", dir.path().display())).await;
            }

            #[cfg(feature = "sqlite")]
            #[tokio::test(flavor = "multi_thread")]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&format!("sqlite:{}", dir.path().join("s.db").display())).await;
            }

            #[cfg(postgres_tests)]
            #[tokio::test(flavor = "multi_thread")]
            async fn postgres() {
                let schema = crate::common::TestSchema::new("http_keys");
                super::$name(&schema.url()).await;
                schema.drop().await;
            }
        }
    };
}

per_backend!(a_keys_stream_continues_across_a_reset_and_resumes);
per_backend!(an_agents_stream_tells_of_every_session);

/// An entry an attacker wrote by hand — a session id with a newline, a NUL, a path —
/// neither breaks a key's stream (an `error` event ends it cleanly, nothing injected)
/// nor stops an agent's stream: that session is reported `unreadable` and the healthy
/// ones go on.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_entries_neither_break_a_keys_stream_nor_stop_an_agents() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let base = start(&url).await;
    let writer = manager(&url).await;
    let turn = writer
        .turn(&InboundMessage::direct("telegram", "42", "healthy"))
        .await
        .unwrap();
    let healthy = turn.key().clone();
    turn.complete("fine").await.unwrap();
    let mut agent_stream = SseReader {
        response: SseReader::open(&base, "/kernel/agents/main/events", None).await,
        buffer: String::new(),
    };

    // Hostile entries beside the healthy one, active now.
    let store = dir.path().join("agents/main/sessions/sessions.json");
    let mut sessions: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    for (key, id) in [
        (
            "agent:main:inj",
            "x\ndata: {\"injected\":true}\n\nevent: pwn\ndata: 1\n\nid: y",
        ),
        ("agent:main:nul", "x\u{0}y"),
        ("agent:main:dots", "../x"),
    ] {
        sessions[key] = serde_json::json!({"sessionId": id, "updatedAt": now});
    }
    // Written as OpenClaw writes it: beside the file, then renamed over it.
    let staged = store.with_extension("json.tmp");
    std::fs::write(&staged, sessions.to_string()).unwrap();
    std::fs::rename(&staged, &store).unwrap();

    for key in ["agent:main:inj", "agent:main:nul", "agent:main:dots"] {
        let (status, body) = stream(
            &base,
            &format!("/kernel/keys/{key}/events"),
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{key}");
        assert!(body.contains("event: error"), "{key}: {body:?}");
        assert!(
            !body.contains("injected") && !body.contains("pwn"),
            "{body:?}"
        );
    }

    let mut unreadable = std::collections::BTreeSet::new();
    let mut said = Vec::new();
    let mut asked = false;
    while unreadable.len() < 3 || !said.contains(&"still fine".to_owned()) {
        let event = agent_stream.next().await;
        match event.event.as_str() {
            "unreadable" => {
                unreadable.insert(event.data["key"].as_str().unwrap().to_owned());
                assert!(!event
                    .data
                    .to_string()
                    .contains(dir.path().to_str().unwrap()));
            }
            "message" => said.push(SseReader::said(&event)),
            _ => {}
        }
        if unreadable.len() == 3 && !asked {
            asked = true;
            let turn = writer
                .turn(&InboundMessage::direct("telegram", "42", "again"))
                .await
                .unwrap();
            assert_eq!(turn.key(), &healthy);
            turn.complete("still fine").await.unwrap();
        }
    }
    assert_eq!(
        unreadable.into_iter().collect::<Vec<_>>(),
        ["agent:main:dots", "agent:main:inj", "agent:main:nul"]
    );
}

/// A manager whose transcripts fail over ([`fails_over::FailsOver`]), served over
/// HTTP, and the event stream of one DM's key.
struct FailingOver {
    transcripts: Arc<fails_over::FailsOver>,
    manager: Arc<SessionManager>,
    key: SessionKey,
    base: String,
    path: String,
}

impl FailingOver {
    async fn start() -> Self {
        let transcripts = Arc::new(fails_over::FailsOver::new());
        let manager = Arc::new(
            SessionManager::builder(InMemoryStore::new())
                .transcripts(transcripts.clone())
                .build()
                .unwrap(),
        );
        let key = manager.key_for(&Self::message("x")).unwrap();
        let options = ServiceOptions::default().secret(Secret::new(SECRET).unwrap());
        let app = router(manager.clone(), options.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { serve(listener, app, &options, std::future::pending()).await });
        let path = format!("/kernel/keys/{}/events", key.as_str().replace(':', "%3A"));
        FailingOver {
            transcripts,
            manager,
            key,
            base,
            path,
        }
    }

    fn message(text: &str) -> InboundMessage {
        InboundMessage::direct("telegram", "42", text)
    }

    /// A whole turn: `question`, answered `answer`.
    async fn exchange(&self, question: &str, answer: &str) {
        let turn = self.manager.turn(&Self::message(question)).await.unwrap();
        turn.complete(answer).await.unwrap();
    }
}

/// A key's stream whose store lost lines it had sent — a database away for a moment,
/// then failed over to a standby that had not received them — stays connected, says so
/// with `event: rewound` and the offset to forget from, then sends what the promoted
/// store has from there.
#[tokio::test(flavor = "multi_thread")]
async fn a_keys_stream_tells_of_lines_the_store_lost_and_sends_their_replacements() {
    let service = FailingOver::start().await;
    let (transcripts, manager, key) = (&service.transcripts, &service.manager, &service.key);
    let exchange = |question, answer| service.exchange(question, answer);
    exchange("q1", "a1").await;
    let (base, path) = (service.base.clone(), service.path.clone());
    let reader = tokio::spawn(async move { stream(&base, &path, Duration::from_secs(3)).await });

    tokio::time::sleep(Duration::from_millis(500)).await;
    transcripts.pause_replication();
    exchange("q2", "a2").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The database is away for a while, and comes back failed over: the stream waits
    // it out connected.
    transcripts.set_down(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    transcripts.fail_over();
    transcripts.set_down(false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    exchange("q3", "a3").await;

    let (status, body) = reader.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("event: error"), "{body}");
    // Each message in order: a line's offset and text, or the rewind's offset.
    let mut sent = Vec::new();
    for block in body.split("\n\n") {
        let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
            continue;
        };
        let data: serde_json::Value = serde_json::from_str(data).unwrap();
        if block.contains("event: rewound") {
            assert_eq!(data["key"], key.as_str());
            sent.push((data["offset"].as_u64().unwrap(), "rewound".to_owned()));
        } else if let Some(text) = {
            let content = &data["entry"]["message"]["content"];
            content.as_str().or(content[0]["text"].as_str())
        } {
            sent.push((data["offset"].as_u64().unwrap(), text.to_owned()));
        }
    }
    let texts: Vec<&str> = sent.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(
        texts,
        ["q1", "a1", "q2", "a2", "rewound", "q3", "a3"],
        "{body}"
    );
    let at = |text: &str| sent.iter().find(|(_, t)| t == text).unwrap().0;
    // Forget from just after the answer the store kept, which takes in the lost two.
    assert!(
        at("a1") < at("rewound") && at("rewound") <= at("q2"),
        "{sent:?}"
    );
    assert!(at("rewound") <= at("q3"), "{sent:?}");
    let kept = manager.session(key).messages().await.unwrap();
    let kept: Vec<&str> = kept.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(kept, ["q1", "a1", "q3", "a3"]);
}

/// A client that connects again with the last id it got — after the store lost the
/// line that id follows (a database failed over to a standby that had not received
/// it) — is told so, `event: rewound` at offset 0, and sent the session as the store
/// has it; a client that connects again when nothing was lost goes on exactly after.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_reconnects_after_the_store_lost_what_it_read_is_told() {
    let service = FailingOver::start().await;
    let transcripts = &service.transcripts;
    let exchange = |question, answer| service.exchange(question, answer);
    exchange("q1", "a1").await;
    transcripts.pause_replication();
    exchange("q2", "a2").await;
    let (base, path) = (&service.base, &service.path);
    let read = |last: Option<String>, count: usize| {
        let (base, path) = (base.clone(), path.clone());
        async move {
            let mut reader = SseReader {
                response: SseReader::open(&base, &path, last.as_deref()).await,
                buffer: String::new(),
            };
            let mut events = Vec::new();
            for _ in 0..count {
                events.push(reader.next().await);
            }
            events
        }
    };

    let first = read(None, 5).await;
    let said: Vec<String> = first.iter().map(SseReader::said).collect();
    assert_eq!(said, ["session:no_session", "q1", "a1", "q2", "a2"]);
    let last = first.last().unwrap().id.clone();
    assert!(last.contains('~'), "a line's id names the line: {last}");

    // Away: the primary is lost with what the standby had not received.
    transcripts.fail_over();
    exchange("q3", "a3").await;
    let again = read(Some(last), 5).await;
    assert_eq!(again[0].event, "rewound", "{:?}", again[0].data);
    assert_eq!(again[0].data["offset"], 0);
    let said: Vec<String> = again[1..].iter().map(SseReader::said).collect();
    assert_eq!(
        said,
        ["q1", "a1", "q3", "a3"],
        "the session as the store has it"
    );

    // Nothing lost since: the next client goes on exactly after.
    let last = again.last().unwrap().id.clone();
    exchange("q4", "a4").await;
    let after = read(Some(last), 2).await;
    let said: Vec<String> = after.iter().map(SseReader::said).collect();
    assert_eq!(said, ["q4", "a4"]);
}

/// A client that connects again with the id of a line followed by a line that is no
/// event (blank, or not JSON) gets exactly the lines after it: the line its id names is
/// found behind the one that is no event.
#[tokio::test(flavor = "multi_thread")]
async fn resuming_after_a_line_followed_by_one_that_is_no_event_sends_only_what_follows() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let id = "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11";
    let now = chrono::Utc::now().timestamp_millis();
    std::fs::write(
        sessions.join("sessions.json"),
        format!(r#"{{"agent:main:telegram:dm:42": {{"sessionId": "{id}", "updatedAt": {now}}}}}"#),
    )
    .unwrap();
    let line = |n: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{n}","parentId":"{parent}","timestamp":"2026-12-06T10:00:0{}.000Z","message":{{"role":"user","content":"{n}"}}}}"#,
            n.len()
        )
    };
    let text = [
        format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-12-06T10:00:00.000Z","cwd":"/"}}"#),
        line("t1", "t0"),
        "this is not json".to_owned(),
        String::new(),
        line("t2", "t1"),
    ]
    .join("\n")
        + "\n";
    std::fs::write(sessions.join(format!("{id}.jsonl")), text).unwrap();
    let base = start(&format!("json:{}", dir.path().display())).await;
    let path = format!("/kernel/sessions/{id}/events");

    let mut reader = SseReader {
        response: SseReader::open(&base, &path, None).await,
        buffer: String::new(),
    };
    let (t1, t2) = (reader.next().await, reader.next().await);
    assert_eq!(
        [SseReader::said(&t1), SseReader::said(&t2)],
        ["t1".to_owned(), "t2".to_owned()]
    );
    assert!(t1.id.ends_with("~t1"), "{}", t1.id);
    let mut resumed = SseReader {
        response: SseReader::open(&base, &path, Some(&t1.id)).await,
        buffer: String::new(),
    };
    let next = resumed.next().await;
    assert_eq!(next.event, "message", "{:?}", next.data);
    assert_eq!(SseReader::said(&next), "t2");
}
