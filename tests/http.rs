//! The sessions HTTP service over real HTTP: the service on 127.0.0.1 with an ephemeral
//! port, driven by a real client through the kernel API's smoke sequence and its errors, on
//! the JSON store and on PostgreSQL.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::freshness::ResetTriggers;
use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::http::{router, serve, Secret, ServiceOptions, SECRET_HEADER};
use agent_sessions::manager::LogMessage;
use agent_sessions::prelude::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "kernel-secret";

fn secret() -> Secret {
    Secret::new(SECRET).unwrap()
}

/// A running service and a client for it.
struct Service {
    addr: SocketAddr,
    base: String,
    client: reqwest::Client,
    clock: ManualClock,
}

impl Service {
    /// Serves the kernel API's usual configuration (a session per sender and channel, its
    /// reset phrases, 30 minutes idle) over `store`.
    async fn start(store: &str) -> Service {
        Service::start_with(store, ServiceOptions::default().secret(secret())).await
    }

    async fn start_with(store: &str, options: ServiceOptions) -> Service {
        let clock = ManualClock::at_millis(1_771_840_800_000);
        let manager = SessionManager::connect(store)
            .await
            .unwrap()
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .reset_triggers(ResetTriggers::clawos())
            .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
            .clock(clock.clone())
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let base = format!("http://{addr}");
        tokio::spawn(async move {
            let app = router(Arc::new(manager), options.clone());
            serve(listener, app, &options, std::future::pending())
                .await
                .unwrap();
        });
        Service {
            addr,
            base,
            client: reqwest::Client::new(),
            clock,
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .header(SECRET_HEADER, SECRET)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    /// `GET path`.
    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// `POST /kernel/sessions/resolve` with `body`.
    async fn post_resolve(&self, body: Value) -> (StatusCode, Value) {
        self.call(
            reqwest::Method::POST,
            "/kernel/sessions/resolve",
            Some(body),
        )
        .await
    }

    /// `POST /kernel/sessions/resolve` for the sender `+1555` in workspace `ws_abc`.
    async fn resolve(&self, text: &str) -> Value {
        let (status, body) = self
            .post_resolve(json!({
                "workspace_id": "ws_abc",
                "channel": "whatsapp",
                "remote_jid": "+1555",
                "user_message": text,
            }))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn patch(&self, id: &str, user: &str, assistant: &str) -> Value {
        let (status, body) = self
            .call(
                reqwest::Method::PATCH,
                &format!("/kernel/sessions/{id}"),
                Some(json!({
                    "workspace_id": "ws_abc",
                    "user_message": user,
                    "assistant_response": assistant,
                    "action_type": "answer",
                })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }
}

fn id(body: &Value) -> String {
    body["session_id"].as_str().unwrap().to_owned()
}

/// The smoke sequence: the first turn creates, the second continues with the context
/// summary, `reset` starts fresh; then close, idle timeout and listing.
async fn smoke_sequence(store: &str) {
    let service = Service::start(store).await;
    let health = service
        .client
        .get(format!("{}/kernel/health", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(health.json::<Value>().await.unwrap()["ok"], true);

    // Turn 1 creates a session.
    let first = service.resolve("what is the capital of France?").await;
    assert_eq!(first["ok"], true);
    assert_eq!(first["decision"], "new");
    assert_eq!(first["reason"], "no_session");
    let session = &first["session"];
    assert_eq!(session["session_id"], first["session_id"]);
    assert_eq!(session["workspace_id"], "ws_abc");
    assert_eq!(session["channel"], "whatsapp");
    assert_eq!(session["remote_jid"], "+1555");
    assert_eq!(session["status"], "active");
    assert_eq!(session["turn_count"], 0);
    assert_eq!(session["created_at"], "2026-02-23T10:00:00.000Z");
    let first_id = id(&first);

    // The bridge records the turn: the count advances, the summary is written.
    let patched = service
        .patch(
            &first_id,
            "what is the capital of France?",
            "Paris is the capital of France.",
        )
        .await;
    assert_eq!(patched["session"]["turn_count"], 1);
    let summary = patched["session"]["context_summary"].as_str().unwrap();
    assert!(
        summary.contains("GOAL: what is the capital of France?"),
        "{summary}"
    );
    assert!(summary.ends_with("TURNS: 1"), "{summary}");

    // Turn 2 continues, and the context summary flows back to the bridge.
    service.clock.advance(Duration::from_secs(60));
    let second = service.resolve("and what is its population?").await;
    assert_eq!(second["decision"], "continue");
    assert_eq!(second["reason"], "within_timeout");
    assert_eq!(id(&second), first_id);
    assert_eq!(second["session"]["context_summary"], summary);
    assert_eq!(
        second["session"]["last_message_at"],
        "2026-02-23T10:01:00.000Z"
    );

    let (status, fetched) = service.get(&format!("/kernel/sessions/{first_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fetched["session"]["turn_count"], 1);

    // `reset` starts fresh; the old session reads back closed, and takes no turn.
    let reset = service.resolve("reset").await;
    assert_eq!(reset["decision"], "new");
    assert_eq!(reset["reason"], "explicit_reset");
    let reset_id = id(&reset);
    assert_ne!(reset_id, first_id);
    assert_eq!(reset["session"]["turn_count"], 0);
    assert_eq!(reset["session"]["context_summary"], "");
    let (status, old) = service.get(&format!("/kernel/sessions/{first_id}")).await;
    assert_eq!(status, StatusCode::OK, "{old}");
    assert_eq!(old["session"]["status"], "closed");
    assert_eq!(old["session"]["turn_count"], 1);
    assert_eq!(old["session"]["context_summary"], summary);
    let (status, refused) = service
        .call(
            reqwest::Method::PATCH,
            &format!("/kernel/sessions/{first_id}"),
            Some(json!({"user_message": "late", "assistant_response": "too late"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(refused["error"]["code"], "unknown_session");

    // Close: the next message starts a new session.
    let (status, closed) = service
        .call(
            reqwest::Method::POST,
            &format!("/kernel/sessions/{reset_id}/close"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{closed}");
    assert_eq!(closed["session"]["status"], "closed");
    let after_close = service.resolve("hello again").await;
    assert_eq!(after_close["decision"], "new");
    assert_eq!(after_close["reason"], "session_closed");

    // Thirty-one idle minutes later: a timeout.
    service.clock.advance(Duration::from_secs(31 * 60));
    let after_idle = service.resolve("are you there?").await;
    assert_eq!(after_idle["decision"], "new");
    assert_eq!(after_idle["reason"], "timeout");

    // The workspace's sessions by status; another workspace has none.
    // (Sorted: these sessions were all last active in the same minute.)
    let listed_ids = |listed: &Value| -> Vec<String> {
        let mut ids: Vec<String> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let (after_close_id, after_idle_id) = (id(&after_close), id(&after_idle));
    let cases = [
        ("", vec![after_idle_id.clone()]),
        ("&status=active", vec![after_idle_id.clone()]),
        (
            "&status=closed",
            vec![after_close_id.clone(), reset_id.clone(), first_id.clone()],
        ),
        (
            "&status=all",
            vec![after_idle_id.clone(), after_close_id, reset_id, first_id],
        ),
    ];
    for (query, mut expected) in cases {
        expected.sort();
        let (status, listed) = service
            .get(&format!("/kernel/sessions?workspace_id=ws_abc{query}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{query}: {listed}");
        assert_eq!(listed_ids(&listed), expected, "{query}");
        for session in listed["sessions"].as_array().unwrap() {
            let closed = session["session_id"] != json!(after_idle_id);
            assert_eq!(
                session["status"],
                if closed { "closed" } else { "active" },
                "{query}"
            );
        }
    }
    let (_, one) = service
        .get("/kernel/sessions?workspace_id=ws_abc&status=closed&limit=1")
        .await;
    assert_eq!(one["sessions"].as_array().unwrap().len(), 1, "{one}");
    // Pages of one, each after the cursor of the one before, list them all once.
    let mut paged = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = service
            .get(&format!(
                "/kernel/sessions?workspace_id=ws_abc&status=all&limit=1&cursor={cursor}"
            ))
            .await;
        assert_eq!(status, StatusCode::OK, "{page}");
        paged.extend(listed_ids(&page));
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
        assert!(paged.len() <= 4, "pages never end: {paged:?}");
    }
    paged.sort();
    let (_, all) = service
        .get("/kernel/sessions?workspace_id=ws_abc&status=all")
        .await;
    assert_eq!(paged, listed_ids(&all));
    assert_eq!(all["nextCursor"], json!(null), "one page holds them all");
    let (_, exact) = service
        .get("/kernel/sessions?workspace_id=ws_abc&status=all&limit=4")
        .await;
    assert_eq!(exact["sessions"].as_array().unwrap().len(), 4);
    assert_eq!(
        exact["nextCursor"],
        json!(null),
        "a full last page: {exact}"
    );
    for forged in ["nope", "1.2.3.4", "zz.61.62", "%00"] {
        let (status, refused) = service
            .get(&format!(
                "/kernel/sessions?workspace_id=ws_abc&cursor={forged}"
            ))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{forged}: {refused}");
        assert_eq!(refused["error"]["code"], "invalid_request");
    }
    let (status, refused) = service
        .get("/kernel/sessions?workspace_id=ws_abc&status=open")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_request");
    let (_, other) = service
        .get("/kernel/sessions?workspace_id=ws_other&status=all")
        .await;
    assert_eq!(other["sessions"], json!([]));
}

#[tokio::test]
async fn smoke_sequence_on_the_json_store() {
    let dir = tempfile::tempdir().unwrap();
    smoke_sequence(&format!("json:{}", dir.path().display())).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn smoke_sequence_on_postgres() {
    let schema = common::TestSchema::new("http");
    smoke_sequence(&schema.url()).await;
    schema.drop().await;
}

#[tokio::test]
async fn errors_are_json_with_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_with(
        &format!("json:{}", dir.path().display()),
        ServiceOptions::default().secret(secret()).body_limit(4096),
    )
    .await;
    let url = |path: &str| format!("{}{path}", service.base);
    let resolve_body = json!({
        "workspace_id": "ws_abc", "channel": "sms", "remote_jid": "+1555", "user_message": "hi",
    });

    let expect = |response: reqwest::Response, status: StatusCode, code: &'static str| async move {
        assert_eq!(response.status(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["ok"], false, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    };

    // No secret, a wrong one: 401, and nothing was created.
    let client = &service.client;
    let missing = client
        .post(url("/kernel/sessions/resolve"))
        .json(&resolve_body)
        .send()
        .await
        .unwrap();
    expect(missing, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let wrong = client
        .post(url("/kernel/sessions/resolve"))
        .header(SECRET_HEADER, "kernel-secreT")
        .json(&resolve_body)
        .send()
        .await
        .unwrap();
    expect(wrong, StatusCode::UNAUTHORIZED, "unauthorized").await;
    // Two secrets, the right one among them: refused, whichever comes first.
    for (first, second) in [(SECRET, "wrong"), ("wrong", SECRET), (SECRET, SECRET)] {
        let twice = client
            .post(url("/kernel/sessions/resolve"))
            .header(SECRET_HEADER, first)
            .header(SECRET_HEADER, second)
            .json(&resolve_body)
            .send()
            .await
            .unwrap();
        expect(twice, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let (_, listed) = service.get("/kernel/sessions?workspace_id=ws_abc").await;
    assert_eq!(
        listed["sessions"],
        json!([]),
        "a refused call wrote nothing"
    );
    // Health needs no secret.
    let health = client.get(url("/kernel/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    // Malformed JSON, a body of the wrong shape, no content type.
    let post = |body: &'static str| {
        service
            .request(reqwest::Method::POST, "/kernel/sessions/resolve")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect(
        post("{\"workspace_id\": ").await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_json",
    )
    .await;
    expect(
        post("{\"workspace_id\": 7}").await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_json",
    )
    .await;
    let untyped = service
        .request(reqwest::Method::POST, "/kernel/sessions/resolve")
        .body(resolve_body.to_string())
        .send()
        .await
        .unwrap();
    expect(
        untyped,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;

    // A workspace id that is not an agent id, and empty senders.
    let (status, body) = service
        .post_resolve(json!({
            "workspace_id": "../etc", "channel": "sms", "remote_jid": "+1555", "user_message": "hi",
        }))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_request"))
    );
    let (status, _) = service
        .post_resolve(json!({
            "workspace_id": "ws_abc", "channel": "sms", "remote_jid": " ", "user_message": "hi",
        }))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // An oversized body: 413 before anything is parsed.
    let huge = json!({
        "workspace_id": "ws_abc", "channel": "sms", "remote_jid": "+1555",
        "user_message": "x".repeat(10_000),
    });
    let response = service
        .request(reqwest::Method::POST, "/kernel/sessions/resolve")
        .json(&huge)
        .send()
        .await
        .unwrap();
    expect(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;

    // Unknown sessions, for every call that takes an id.
    for (method, path, body) in [
        (reqwest::Method::GET, "/kernel/sessions/no-such-id", None),
        (
            reqwest::Method::PATCH,
            "/kernel/sessions/no-such-id",
            Some(json!({"user_message": "a", "assistant_response": "b"})),
        ),
        (
            reqwest::Method::POST,
            "/kernel/sessions/no-such-id/close",
            None,
        ),
    ] {
        let (status, body) = service.call(method, path, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"]["code"], "unknown_session");
    }
    // A turn recorded for the wrong workspace is an unknown session there.
    let created = service.resolve("hello").await;
    let (status, _) = service
        .call(
            reqwest::Method::PATCH,
            &format!("/kernel/sessions/{}", id(&created)),
            Some(
                json!({"workspace_id": "ws_other", "user_message": "a", "assistant_response": "b"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Listing needs a workspace; unknown routes are JSON 404s too.
    let (status, body) = service.get("/kernel/sessions").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_request"))
    );
    let (status, body) = service.get("/kernel/nothing").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
}

/// Several clients resolving and recording turns at once, on their own sessions and on
/// one shared session: every turn is counted (no lost update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_lose_no_update() {
    const CLIENTS: usize = 8;
    const TURNS: usize = 15;
    let dir = tempfile::tempdir().unwrap();
    let service = Arc::new(Service::start(&format!("json:{}", dir.path().display())).await);
    let shared = id(&service.resolve("the shared conversation").await);
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let service = service.clone();
        let shared = shared.clone();
        tasks.spawn(async move {
            let mut own = String::new();
            for turn in 0..TURNS {
                let (status, body) = service
                    .post_resolve(json!({
                        "workspace_id": "ws_abc", "channel": "sms",
                        "remote_jid": format!("+1666{client}"),
                        "user_message": format!("message {turn}"),
                    }))
                    .await;
                assert_eq!(status, StatusCode::OK, "{body}");
                own = id(&body);
                service.patch(&own, "q", "a").await;
                service.patch(&shared, "q", "a").await;
            }
            own
        });
    }
    let mut own_ids = Vec::new();
    while let Some(done) = tasks.join_next().await {
        own_ids.push(done.unwrap());
    }
    for own in &own_ids {
        let (_, body) = service.get(&format!("/kernel/sessions/{own}")).await;
        assert_eq!(body["session"]["turn_count"], TURNS, "{body}");
    }
    let (_, body) = service.get(&format!("/kernel/sessions/{shared}")).await;
    assert_eq!(
        body["session"]["turn_count"],
        CLIENTS * TURNS,
        "lost updates on the shared session"
    );
}

/// `docs/openapi.json` describes what the service really answers: the documented
/// paths are the served ones, and real bodies have exactly the documented fields.
#[tokio::test]
async fn the_openapi_description_matches_the_service() {
    let spec: Value =
        serde_json::from_str(include_str!("../docs/openapi.json")).expect("valid JSON");
    let mut paths: Vec<&str> = spec["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/kernel/agents/{agent}/events",
            "/kernel/health",
            "/kernel/keys/{key}/events",
            "/kernel/sessions",
            "/kernel/sessions/resolve",
            "/kernel/sessions/{id}",
            "/kernel/sessions/{id}/close",
            "/kernel/sessions/{id}/events",
        ]
    );
    let schema = |name: &str| spec["components"]["schemas"][name].clone();
    let conforms = |body: &Value, name: &str| {
        let schema = schema(name);
        let properties = schema["properties"].as_object().unwrap();
        for required in schema["required"].as_array().unwrap() {
            let field = required.as_str().unwrap();
            assert!(
                body.get(field).is_some(),
                "{name}: {field} missing in {body}"
            );
        }
        for field in body.as_object().unwrap().keys() {
            assert!(
                properties.contains_key(field),
                "{name}: {field} undocumented"
            );
        }
    };

    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(&format!("json:{}", dir.path().display())).await;
    let resolved = service.resolve("hello").await;
    conforms(&resolved, "ResolveResponse");
    conforms(&resolved["session"], "Session");
    let patched = service.patch(&id(&resolved), "hello", "hi").await;
    conforms(&patched, "SessionResponse");
    let (_, listed) = service.get("/kernel/sessions?workspace_id=ws_abc").await;
    conforms(&listed, "SessionList");
    let (_, error) = service.get("/kernel/sessions/nope").await;
    conforms(&error, "Error");
    let codes = &schema("Error")["properties"]["error"]["properties"]["code"]["enum"];
    assert!(codes.as_array().unwrap().contains(&error["error"]["code"]));
    let health: Value = service
        .client
        .get(format!("{}/kernel/health", service.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    conforms(&health, "Health");
}

/// A response read off the wire by [`raw_exchange`].
#[derive(Debug)]
struct RawResponse {
    status: u16,
    /// Header names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Parses one response from the start of `bytes` once all of it has arrived.
    fn parse(bytes: &[u8]) -> Option<RawResponse> {
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = std::str::from_utf8(&bytes[..end]).ok()?;
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(Some(0), |(_, v)| v.parse().ok())?;
        let body = bytes.get(end + 4..end + 4 + length)?.to_vec();
        Some(RawResponse {
            status,
            headers,
            body,
        })
    }
}

/// Sends `request` byte for byte over a fresh connection to `addr` (so it can be
/// malformed in ways a client library refuses to send) and reads one response; an
/// error when none arrives within five seconds.
async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Result<RawResponse, String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The server may answer (and close) before it has read all of a body it refuses.
        let _ = stream.write_all(request).await;
        let mut received = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(response) = RawResponse::parse(&received) {
                return Ok(response);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
        RawResponse::parse(&received).ok_or_else(|| {
            format!(
                "no complete response, got {:?}",
                String::from_utf8_lossy(&received)
            )
        })
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .unwrap_or_else(|_| Err("no response within five seconds".to_owned()))
}

/// A request as raw bytes: `Host`, `Connection: close` and the secret are added, and a
/// `Content-Length` for `body` unless `headers` sets framing itself.
fn raw_request(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n{SECRET_HEADER}: {SECRET}\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    let framed = headers.iter().any(|(name, _)| {
        name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
    });
    if !framed {
        request.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Every error the router can produce is `{"ok": false, "error": {"code", "message"}}`
/// with a documented code and a 4xx status, whatever the request: wrong methods on
/// every route, bad percent-encoding, bad queries, wrong content types, oversized and
/// malformed bodies, deeply nested JSON. Never a 5xx, never a plain-text body.
#[tokio::test]
async fn hostile_requests_get_json_errors_with_a_4xx_status() {
    const LIMIT: usize = 256 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_with(
        &format!("json:{}", dir.path().display()),
        ServiceOptions::default().secret(secret()).body_limit(LIMIT),
    )
    .await;
    let spec: Value = serde_json::from_str(include_str!("../docs/openapi.json")).unwrap();
    let codes = spec["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]
        ["enum"]
        .as_array()
        .unwrap()
        .clone();

    let json = [("content-type", "application/json")];
    let resolve_body = json!({
        "workspace_id": "ws_abc", "channel": "sms", "remote_jid": "+1555", "user_message": "hi",
    })
    .to_string();
    let trailing = format!("{resolve_body} x");
    let deep_arrays = "[".repeat(100_000);
    let deep_objects = "{\"a\":".repeat(20_000);
    let in_a_field = format!(
        "{{\"workspace_id\":\"ws_abc\",\"channel\":\"sms\",\"remote_jid\":\"+1555\",\"user_message\":{}}}",
        "[".repeat(50_000)
    );
    let oversized = json!({
        "workspace_id": "ws_abc", "channel": "sms", "remote_jid": "+1555",
        "user_message": "x".repeat(LIMIT + 1),
    })
    .to_string();

    let mut table: Vec<(String, u16, Vec<u8>)> = Vec::new();
    // Every route, every method it does not serve: 405.
    let routes: [(&str, &[&str]); 5] = [
        ("/kernel/health", &["GET", "HEAD"]),
        ("/kernel/sessions?workspace_id=ws_abc", &["GET", "HEAD"]),
        ("/kernel/sessions/resolve", &["POST"]),
        ("/kernel/sessions/some-id", &["GET", "HEAD", "PATCH"]),
        ("/kernel/sessions/some-id/close", &["POST"]),
    ];
    for (path, allowed) in routes {
        for method in [
            "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW",
        ] {
            if !allowed.contains(&method) {
                table.push((
                    format!("{method} {path}"),
                    405,
                    raw_request(method, path, &json, b"{}"),
                ));
            }
        }
    }
    // Bad percent-encoding and ids no session can have.
    // (NUL and other control characters would reach the store: PostgreSQL refuses NUL.)
    for path in [
        "/kernel/sessions/%FF",
        "/kernel/sessions/%C3%28",
        "/kernel/sessions/%ED%A0%80",
        "/kernel/sessions/%00",
        "/kernel/sessions/a%0Ab",
    ] {
        table.push((
            format!("GET {path}"),
            400,
            raw_request("GET", path, &[], b""),
        ));
        table.push((
            format!("POST {path}/close"),
            400,
            raw_request("POST", &format!("{path}/close"), &[], b""),
        ));
        let turn = br#"{"user_message":"a","assistant_response":"b"}"#;
        table.push((
            format!("PATCH {path}"),
            400,
            raw_request("PATCH", path, &json, turn),
        ));
    }
    table.push((
        "an unknown route".into(),
        404,
        raw_request("GET", "/kernel/%FF/nothing", &[], b""),
    ));
    // Bad query strings.
    for query in [
        "",
        "?workspace_id=%FF",
        "?workspace_id=ws_abc&limit=-1",
        // An empty page would read as the last one.
        "?workspace_id=ws_abc&limit=0",
        "?workspace_id=ws_abc&limit=lots",
        "?workspace_id=ws_abc&limit=99999999999999999999999",
        "?workspace_id=../etc",
        "?workspace_id=%",
        "?=&&=&workspace_id",
    ] {
        let target = format!("/kernel/sessions{query}");
        table.push((
            format!("GET {target}"),
            400,
            raw_request("GET", &target, &[], b""),
        ));
    }
    // Wrong content types.
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|t| ("content-type", t))
            .into_iter()
            .collect();
        table.push((
            format!("content type {content_type:?}"),
            415,
            raw_request(
                "POST",
                "/kernel/sessions/resolve",
                &headers,
                resolve_body.as_bytes(),
            ),
        ));
    }
    // Oversized bodies: a real one, and one that only claims its size.
    table.push((
        "an oversized body".into(),
        413,
        raw_request(
            "POST",
            "/kernel/sessions/resolve",
            &json,
            oversized.as_bytes(),
        ),
    ));
    table.push((
        "a content-length over the limit".into(),
        413,
        raw_request(
            "POST",
            "/kernel/sessions/resolve",
            &[
                ("content-type", "application/json"),
                ("content-length", "999999999"),
            ],
            b"{",
        ),
    ));
    // Malformed JSON.
    for (what, status, body) in [
        ("truncated", 400, &b"{\"workspace_id\": "[..]),
        ("a bare word", 400, b"nul"),
        ("invalid UTF-8", 400, b"{\"workspace_id\": \"\xff\xfe\"}"),
        ("a lone surrogate", 400, br#"{"workspace_id": "\ud800"}"#),
        ("trailing garbage", 400, trailing.as_bytes()),
        ("an empty body", 400, b""),
        ("an array", 422, b"[]"),
        ("an empty object", 422, b"{}"),
        (
            "a number out of range",
            400,
            b"{\"workspace_id\": 1e999999}",
        ),
        ("deep arrays", 422, deep_arrays.as_bytes()),
        ("deep objects", 422, deep_objects.as_bytes()),
        ("deep arrays in a field", 422, in_a_field.as_bytes()),
    ] {
        table.push((
            format!("malformed JSON: {what}"),
            status,
            raw_request("POST", "/kernel/sessions/resolve", &json, body),
        ));
    }
    // A chunked body that breaks its own framing.
    table.push((
        "broken chunked framing".into(),
        400,
        raw_request(
            "POST",
            "/kernel/sessions/resolve",
            &[
                ("content-type", "application/json"),
                ("transfer-encoding", "chunked"),
            ],
            b"zz\r\n{}\r\n0\r\n\r\n",
        ),
    ));

    let mut failures = Vec::new();
    for (what, status, request) in &table {
        let response = match raw_exchange(service.addr, request).await {
            Ok(response) => response,
            Err(problem) => {
                failures.push(format!("{what}: {problem}"));
                continue;
            }
        };
        let body: Option<Value> = serde_json::from_slice(&response.body).ok();
        let shaped = body.as_ref().is_some_and(|body| {
            body["ok"] == false
                && body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
                && codes.contains(&body["error"]["code"])
        });
        let json_typed = response
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"));
        if response.status != *status || !shaped || !json_typed {
            failures.push(format!(
                "{what}: expected {status}, got {} {:?} {}",
                response.status,
                response.header("content-type"),
                String::from_utf8_lossy(&response.body[..response.body.len().min(200)])
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} requests:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}

/// A service with short timeouts, for the slow-client tests.
async fn start_short(options: ServiceOptions) -> (Service, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start_with(
        &format!("json:{}", dir.path().display()),
        options.secret(secret()),
    )
    .await;
    (service, dir)
}

/// Whether the server closes `stream` within `within` (reads until end of stream,
/// discarding whatever it sends first).
async fn closed_by_server(stream: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let drained = async {
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, drained).await.is_ok()
}

/// More idle and half-sent connections than the connection limit: a real request is
/// still answered within seconds, and every one of them is closed once its header
/// timeout passes (they do not hold a connection slot, or a file descriptor, forever).
#[tokio::test]
async fn idle_and_half_sent_connections_are_closed_and_block_no_one() {
    const LIMIT: usize = 4;
    const SLOW_CLIENTS: usize = 12;
    let (service, _dir) = start_short(
        ServiceOptions::default()
            .header_read_timeout(Duration::from_millis(400))
            .max_connections(LIMIT),
    )
    .await;
    let mut slow = Vec::new();
    for n in 0..SLOW_CLIENTS {
        let mut stream = tokio::net::TcpStream::connect(service.addr).await.unwrap();
        if n % 2 == 0 {
            // Half a request header, and then nothing.
            stream
                .write_all(b"POST /kernel/sessions/resolve HTTP/1.1\r\nhost: 127.0.0.1\r\n")
                .await
                .unwrap();
        }
        slow.push(stream);
    }

    let health = tokio::time::timeout(
        Duration::from_secs(5),
        reqwest::get(format!("{}/kernel/health", service.base)),
    )
    .await
    .expect("a real request is answered within five seconds")
    .unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    for (n, stream) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(stream, Duration::from_secs(5)).await,
            "slow connection {n} is still open"
        );
    }
}

/// At the connection limit, a new client waits for a free slot rather than being
/// served past the limit, and is served as soon as one frees.
#[tokio::test]
async fn connections_over_the_limit_wait_for_a_free_slot() {
    let (service, _dir) = start_short(ServiceOptions::default().max_connections(2)).await;
    let first = tokio::net::TcpStream::connect(service.addr).await.unwrap();
    let _second = tokio::net::TcpStream::connect(service.addr).await.unwrap();
    // Both held (their header timeout is the default 10 s): the next client waits.
    let url = format!("{}/kernel/health", service.base);
    let mut waiting = tokio::spawn(async move { reqwest::get(url).await.unwrap().status() });
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut waiting)
            .await
            .is_err(),
        "a third connection was served with the limit at two"
    );
    drop(first);
    let status = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once a slot frees")
        .unwrap();
    assert_eq!(status, StatusCode::OK);
}

/// The JSON error the slow-body tests expect: 408 `request_timeout`.
fn assert_request_timeout(response: &RawResponse) {
    assert_eq!(response.status, 408, "{response:?}");
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["error"]["code"], "request_timeout", "{body}");
}

/// A body that stops arriving gets a JSON 408 once the body timeout passes.
#[tokio::test]
async fn a_body_sent_too_slowly_gets_a_json_408() {
    let (service, _dir) =
        start_short(ServiceOptions::default().body_read_timeout(Duration::from_millis(400))).await;
    let request = raw_request(
        "POST",
        "/kernel/sessions/resolve",
        &[
            ("content-type", "application/json"),
            ("content-length", "100"),
        ],
        b"{\"workspace_id\"",
    );
    let response = raw_exchange(service.addr, &request).await.unwrap();
    assert_request_timeout(&response);
}

/// A request not answered within the whole-request timeout gets a JSON 408, even
/// while the (longer) body timeout has not passed.
#[tokio::test]
async fn a_request_over_the_request_timeout_gets_a_json_408() {
    let (service, _dir) = start_short(
        ServiceOptions::default()
            .body_read_timeout(Duration::from_secs(60))
            .request_timeout(Duration::from_millis(400)),
    )
    .await;
    let request = raw_request(
        "POST",
        "/kernel/sessions/resolve",
        &[
            ("content-type", "application/json"),
            ("content-length", "100"),
        ],
        b"{\"workspace_id\"",
    );
    let response = raw_exchange(service.addr, &request).await.unwrap();
    assert_request_timeout(&response);
}

/// `serve` refuses options it cannot serve with, and returns once shut down.
#[tokio::test]
async fn serve_checks_its_options_and_stops_on_shutdown() {
    for (options, option) in [
        (
            ServiceOptions::default().max_connections(0),
            "max_connections",
        ),
        (
            ServiceOptions::default().header_read_timeout(Duration::ZERO),
            "header_read_timeout",
        ),
        (
            ServiceOptions::default().body_read_timeout(Duration::ZERO),
            "body_read_timeout",
        ),
        (
            ServiceOptions::default().request_timeout(Duration::ZERO),
            "request_timeout",
        ),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let manager = Arc::new(
            SessionManager::builder(InMemoryStore::new())
                .build()
                .unwrap(),
        );
        let served = tokio::time::timeout(
            Duration::from_secs(5),
            serve(
                listener,
                router(manager, options.clone()),
                &options,
                std::future::pending(),
            ),
        )
        .await
        .expect("refused at once");
        assert!(
            matches!(&served, Err(agent_sessions::Error::InvalidOption { option: o, .. }) if *o == option),
            "{option}: {served:?}"
        );
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let manager = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .build()
            .unwrap(),
    );
    let options = ServiceOptions::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        serve(
            listener,
            router(manager, options.clone()),
            &options,
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("stops within five seconds of the shutdown signal")
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
}

/// One server-sent event: its id and its data.
#[derive(Debug, Clone, PartialEq)]
struct SentEvent {
    id: Option<String>,
    kind: Option<String>,
    data: Value,
}

/// Reads server-sent events from a streaming response.
struct EventReader {
    response: reqwest::Response,
    buffer: String,
}

impl EventReader {
    /// The next event (keep-alive comments skipped); `None` when the stream ends.
    async fn next(&mut self, within: Duration) -> Option<SentEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SentEvent {
                    id: None,
                    kind: None,
                    data: Value::Null,
                };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id: ") {
                        event.id = Some(id.to_owned());
                    } else if let Some(kind) = line.strip_prefix("event: ") {
                        event.kind = Some(kind.to_owned());
                    } else if let Some(chunk) = line.strip_prefix("data: ") {
                        data.push_str(chunk);
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                event.data = serde_json::from_str(&data).unwrap();
                return Some(event);
            }
            let chunk = tokio::time::timeout(within, self.response.chunk())
                .await
                .expect("an event within the time allowed")
                .unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The texts of the next `n` events' messages, with the id of the last.
    async fn texts(&mut self, n: usize) -> (Vec<String>, String) {
        let mut texts = Vec::new();
        let mut last = String::new();
        while texts.len() < n {
            let event = self
                .next(Duration::from_secs(10))
                .await
                .expect("more events");
            if let Some(text) = message_text(&event.data["entry"]) {
                texts.push(text);
            }
            last = event.id.expect("every transcript event has an id");
        }
        (texts, last)
    }
}

/// The text of a transcript entry's message, if it is a message.
fn message_text(entry: &Value) -> Option<String> {
    let content = &entry["message"]["content"];
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|block| block["text"].as_str())
                .collect(),
        ),
        _ => None,
    }
}

impl Service {
    /// `GET /kernel/sessions/{id}/events` with `headers`.
    async fn events(&self, id: &str, query: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.request(
            reqwest::Method::GET,
            &format!("/kernel/sessions/{id}/events{query}"),
        );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    async fn stream(&self, id: &str, headers: &[(&str, &str)]) -> EventReader {
        let response = self.events(id, "", headers).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "a server-sent event stream"
        );
        EventReader {
            response,
            buffer: String::new(),
        }
    }
}

/// A worker process of the bot: its own manager on the store the service serves.
struct Worker {
    manager: SessionManager,
    key: SessionKey,
}

impl Worker {
    async fn of(store: &str, session_id: &str) -> Worker {
        let manager = SessionManager::connect(store)
            .await
            .unwrap()
            .build()
            .unwrap();
        let key = manager
            .find_session(session_id, agent_sessions::StatusFilter::Current)
            .await
            .unwrap()
            .unwrap()
            .key;
        Worker { manager, key }
    }

    /// Logs an exchange, as a worker handling a turn does.
    async fn exchange(&self, question: &str, answer: &str) {
        for message in [LogMessage::inbound(question), LogMessage::outbound(answer)] {
            self.manager
                .session(&self.key)
                .log_message(message)
                .await
                .unwrap();
        }
    }
}

/// A transcript line too big to hold for a slow client (a base64 image) is streamed as
/// a stub that says so, and the events around it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_the_event_limit_is_streamed_as_a_stub() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let service = Service::start(&store).await;
    let session = id(&service.resolve("hello").await);
    let worker = Worker::of(&store, &session).await;
    let image = "A".repeat(agent_sessions::http::MAX_EVENT_BYTES + 1);
    worker.exchange("before", &image).await;
    worker.exchange("after", "done").await;

    let mut stream = service.stream(&session, &[]).await;
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = stream.next(Duration::from_secs(10)).await.expect("events");
        seen.push(event.data);
    }
    assert_eq!(message_text(&seen[0]["entry"]).as_deref(), Some("before"));
    assert_eq!(seen[1]["truncated"], true);
    assert!(seen[1]["bytes"].as_u64().unwrap() > image.len() as u64);
    assert_eq!(seen[1]["entry"]["type"], "message");
    assert!(seen[1]["entry"]["id"].is_string());
    assert_eq!(message_text(&seen[2]["entry"]).as_deref(), Some("after"));
    assert_eq!(message_text(&seen[3]["entry"]).as_deref(), Some("done"));
    // The transcript keeps the line whole.
    let events = worker
        .manager
        .session(&worker.key)
        .replay(agent_sessions::transcript::Offset::START)
        .await
        .unwrap()
        .events;
    assert!(events
        .iter()
        .any(|e| e.entry.message.as_ref().is_some_and(|m| m.text() == image)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_events_stream_live_from_every_process_and_resume_after_the_last_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let service = Service::start(&store).await;
    let session = id(&service.resolve("hello").await);
    // Two workers on the store the service serves stand for two other processes.
    let (one, two) = (
        Worker::of(&store, &session).await,
        Worker::of(&store, &session).await,
    );
    one.exchange("first question", "first answer").await;

    let mut stream = service.stream(&session, &[]).await;
    let (texts, _) = stream.texts(2).await;
    assert_eq!(texts, ["first question", "first answer"], "the past first");

    // Turns handled by other processes reach the open stream, in order.
    two.exchange("second question", "second answer").await;
    let (texts, after_second_question) = stream.texts(1).await;
    assert_eq!(texts, ["second question"]);
    let (texts, _) = stream.texts(1).await;
    assert_eq!(texts, ["second answer"]);
    drop(stream);

    // The client lost its connection after "second question": it resumes after it.
    one.exchange("third question", "third answer").await;
    let mut resumed = service
        .stream(&session, &[("last-event-id", &after_second_question)])
        .await;
    let (texts, _) = resumed.texts(3).await;
    assert_eq!(texts, ["second answer", "third question", "third answer"]);
    // `?from=` does the same for clients that keep the offset themselves.
    let response = service
        .events(&session, &format!("?from={after_second_question}"), &[])
        .await;
    let mut from_query = EventReader {
        response,
        buffer: String::new(),
    };
    assert_eq!(from_query.texts(1).await.0, ["second answer"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_events_refuse_bad_requests_with_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let service = Service::start(&store).await;
    let session = id(&service.resolve("hello").await);
    Worker::of(&store, &session)
        .await
        .exchange("question", "answer")
        .await;
    type Case<'a> = (&'a str, String, &'a [(&'a str, &'a str)], StatusCode);
    let cases: [Case; 6] = [
        (
            "unknown session",
            "/nope/events".into(),
            &[],
            StatusCode::NOT_FOUND,
        ),
        (
            "not a number",
            format!("/{session}/events"),
            &[("last-event-id", "abc")],
            StatusCode::BAD_REQUEST,
        ),
        (
            "negative",
            format!("/{session}/events?from=-1"),
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "mid-line",
            format!("/{session}/events?from=3"),
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "past the end",
            format!("/{session}/events?from=99999999"),
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown parameter",
            format!("/{session}/events?since=0"),
            &[],
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (case, path, headers, status) in cases {
        let mut request = service.request(reqwest::Method::GET, &format!("/kernel/sessions{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{case}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["ok"], false, "{case}: {body}");
        assert!(
            !body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(dir.path().to_str().unwrap()),
            "{case}: no path in {body}"
        );
    }
    let without_secret = reqwest::Client::new()
        .get(format!("{}/kernel/sessions/{session}/events", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(without_secret.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_ends_open_event_streams() {
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(
        SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .build()
            .unwrap(),
    );
    let session = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let options = ServiceOptions::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        serve(
            listener,
            router(manager, options.clone()),
            &options,
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    let mut stream = EventReader {
        response: reqwest::get(format!(
            "{base}/kernel/sessions/{}/events",
            session.entry().session_id
        ))
        .await
        .unwrap(),
        buffer: String::new(),
    };
    assert_eq!(stream.response.status(), StatusCode::OK);
    stop.send(()).unwrap();
    let served = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("an open stream does not hold the shutdown")
        .unwrap();
    assert!(served.is_ok(), "{served:?}");
    assert_eq!(
        stream.next(Duration::from_secs(5)).await,
        None,
        "the stream ended"
    );
}

/// A page on an attacker's domain that resolves to the service's address (DNS
/// rebinding) reaches `serve` with its own `Host`: refused with 421 before anything
/// runs, even without a secret. IP addresses and loopback names are answered, and so
/// is a name allowed by `ServiceOptions::allow_host`.
#[tokio::test]
async fn serve_answers_only_its_own_host_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let service = Service::start_with(
        &store,
        ServiceOptions::default().allow_host("Sessions.Internal."),
    )
    .await;
    let exchange = |host: &str| {
        let request =
            format!("GET /kernel/health HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
        let addr = service.addr;
        async move { raw_exchange(addr, request.as_bytes()).await.unwrap() }
    };
    let port = service.addr.port();
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{port}"),
        "LOCALHOST".to_owned(),
        format!("[::1]:{port}"),
        "sessions.internal".to_owned(),
        format!("sessions.internal:{port}"),
    ] {
        let response = exchange(&host).await;
        assert_eq!(
            response.status,
            200,
            "{host}: {}",
            String::from_utf8_lossy(&response.body)
        );
    }
    for host in [
        format!("rebind.attacker.example:{port}"),
        "attacker.example".to_owned(),
        "localhost.attacker.example".to_owned(),
        "127.0.0.1.nip.io".to_owned(),
        "".to_owned(),
        "localhost..".to_owned(),
        "sessions.internal..".to_owned(),
        "*.internal".to_owned(),
    ] {
        let response = exchange(&host).await;
        assert_eq!(
            response.status,
            421,
            "{host}: {}",
            String::from_utf8_lossy(&response.body)
        );
        let body: Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body["error"]["code"], "misdirected_request", "{host}");
    }
    // A second Host header (a proxy and a client that disagree) is refused, and a
    // request in absolute form is judged by the host it names too.
    let send = |request: String| {
        let addr = service.addr;
        async move { raw_exchange(addr, request.as_bytes()).await.unwrap() }
    };
    let twice = send(
        "GET /kernel/health HTTP/1.1\r\nhost: localhost\r\nhost: attacker.example\r\n\
         connection: close\r\n\r\n"
            .to_owned(),
    )
    .await;
    assert_eq!(
        twice.status,
        400,
        "{}",
        String::from_utf8_lossy(&twice.body)
    );
    // With a code the description documents.
    let body: Value = serde_json::from_slice(&twice.body).unwrap();
    let spec: Value = serde_json::from_str(include_str!("../docs/openapi.json")).unwrap();
    let codes = &spec["components"]["schemas"]["Error"]["properties"]["error"]["properties"]
        ["code"]["enum"];
    assert_eq!(body["error"]["code"], "invalid_request");
    assert!(
        codes.as_array().unwrap().contains(&body["error"]["code"]),
        "{body}"
    );
    let absolute = send(
        "GET http://attacker.example/kernel/health HTTP/1.1\r\nhost: localhost\r\n\
         connection: close\r\n\r\n"
            .to_owned(),
    )
    .await;
    assert_ne!(
        absolute.status,
        200,
        "{}",
        String::from_utf8_lossy(&absolute.body)
    );
    let own = send(format!(
        "GET http://127.0.0.1:{port}/kernel/health HTTP/1.1\r\nhost: localhost\r\n\
         connection: close\r\n\r\n"
    ))
    .await;
    assert_eq!(own.status, 200, "{}", String::from_utf8_lossy(&own.body));
}

/// A name `allow_host` cannot match as written — empty, a wildcard, a port — is refused
/// when the service starts, not silently never matched.
#[test]
fn allow_host_refuses_names_that_are_not_host_names() {
    for name in [
        "",
        "  ",
        "*.internal",
        "sessions.internal:8080",
        "a..b",
        "bad name",
    ] {
        let options = ServiceOptions::default().allow_host(name);
        assert!(
            matches!(
                options.validate(),
                Err(agent_sessions::Error::InvalidOption {
                    option: "allow_host",
                    ..
                })
            ),
            "{name:?}"
        );
    }
    assert!(ServiceOptions::default()
        .allow_host("Sessions.Internal.")
        .validate()
        .is_ok());
}

/// A session's view says whether a model run holds it, how many messages that run
/// answers, and how many wait for it — as workers of the same store see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_view_reports_its_run_and_queued_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let service = Service::start(&store).await;
    let worker = Arc::new(
        SessionManager::connect(&store)
            .await
            .unwrap()
            .build()
            .unwrap(),
    );
    let dm = |text: &str| InboundMessage::direct("telegram", "42", text);
    let first = worker
        .turn(&dm("I need to change my booking"))
        .await
        .unwrap();
    let id = first.resolution().unwrap().session_id().to_owned();
    let (status, view) = service.get(&format!("/kernel/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert!(view["session"]["run_started_at"].is_string(), "{view}");
    assert_eq!(view["session"]["queued_messages"], 0, "{view}");

    let waiting = {
        let worker = worker.clone();
        let message = dm("it's for Friday");
        tokio::spawn(async move {
            let turn = worker.turn(&message).await.unwrap();
            let input = turn.input().map(str::to_owned);
            turn.complete("Friday it is.").await.unwrap();
            input
        })
    };
    let mut queued = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        queued = service.get(&format!("/kernel/sessions/{id}")).await.1;
        if queued["session"]["queued_messages"] == 1 {
            break;
        }
    }
    assert_eq!(queued["session"]["queued_messages"], 1, "{queued}");

    first.complete("Which day?").await.unwrap();
    let input = waiting.await.unwrap().unwrap();
    assert!(input.contains("it's for Friday"), "{input}");
    let (_, after) = service.get(&format!("/kernel/sessions/{id}")).await;
    assert!(after["session"].get("run_started_at").is_none(), "{after}");
    assert_eq!(after["session"]["queued_messages"], 0, "{after}");
}
