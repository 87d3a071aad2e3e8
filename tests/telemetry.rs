//! What an operator sees: the spans of a turn, a store update, a transcript append and
//! an HTTP request, with the fields the telemetry docs promise and never a message's
//! text; and, with feature `metrics`, the metrics they record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agent_sessions::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A message text that must never reach a span or an event at INFO or above.
const SECRET_TEXT: &str = "my card number is 4111-1111";

/// One span as recorded: its name, level and fields.
#[derive(Debug, Clone)]
struct SpanRecord {
    metadata: &'static Metadata<'static>,
    name: &'static str,
    target: String,
    level: Level,
    fields: BTreeMap<String, String>,
}

/// A subscriber that keeps every span and every INFO-or-above event's fields.
#[derive(Default)]
struct Capture {
    next_id: AtomicU64,
    spans: Mutex<BTreeMap<u64, SpanRecord>>,
    loud_events: Mutex<Vec<String>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = BTreeMap::new();
        attributes.record(&mut Fields(&mut fields));
        let metadata = attributes.metadata();
        self.spans.lock().unwrap().insert(
            id,
            SpanRecord {
                metadata,
                name: metadata.name(),
                target: metadata.target().to_owned(),
                level: *metadata.level(),
                fields,
            },
        );
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(record) = self.spans.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut record.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() <= Level::INFO {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.loud_events.lock().unwrap().push(format!("{fields:?}"));
        }
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }

    fn current_span(&self) -> tracing_core::span::Current {
        let Some(id) = ENTERED.with(|entered| entered.borrow().last().copied()) else {
            return tracing_core::span::Current::none();
        };
        match self.spans.lock().unwrap().get(&id) {
            Some(span) => tracing_core::span::Current::new(Id::from_u64(id), span.metadata),
            None => tracing_core::span::Current::none(),
        }
    }
}

thread_local! {
    /// The spans this thread is in, innermost last.
    static ENTERED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The process-wide capture (a global subscriber, so blocking threads report too).
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture: &'static Capture = Box::leak(Box::default());
        tracing::subscriber::set_global_default(CaptureRef(capture)).unwrap();
        capture
    })
}

struct CaptureRef(&'static Capture);

impl Subscriber for CaptureRef {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }
    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        self.0.new_span(attributes)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        self.0.record(span, values)
    }
    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.0.record_follows_from(span, follows)
    }
    fn event(&self, event: &Event<'_>) {
        self.0.event(event)
    }
    fn enter(&self, span: &Id) {
        self.0.enter(span)
    }
    fn exit(&self, span: &Id) {
        self.0.exit(span)
    }
    fn current_span(&self) -> tracing_core::span::Current {
        self.0.current_span()
    }
}

impl Capture {
    /// The spans named `name` whose `field` is `value`.
    fn spans(&self, name: &str, field: &str, value: &str) -> Vec<SpanRecord> {
        self.spans
            .lock()
            .unwrap()
            .values()
            .filter(|span| {
                span.name == name && span.fields.get(field).map(String::as_str) == Some(value)
            })
            .cloned()
            .collect()
    }
}

/// The tests of this file one at a time: the subscriber and the recorder are global.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn field<'a>(span: &'a SpanRecord, name: &str) -> &'a str {
    span.fields
        .get(name)
        .unwrap_or_else(|| panic!("{} has no {name}: {:?}", span.name, span.fields))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_opens_the_documented_spans_without_message_text() {
    let _serial = SERIAL.lock().await;
    let capture = capture();
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let message = InboundMessage::direct("telegram", "telemetry-1", SECRET_TEXT);
    let turn = manager.turn(&message).await.unwrap();
    let key = turn.key().to_string();
    let _ = turn.messages().await.unwrap();
    turn.complete("Noted.").await.unwrap();
    let session_id = manager
        .session(&SessionKey::parse(&key).unwrap())
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_id;

    let resolve = capture.spans("resolve", "key", &key);
    assert_eq!(
        resolve.len(),
        1,
        "one resolve span: {:?}",
        capture
            .spans
            .lock()
            .unwrap()
            .values()
            .filter(|s| s.name == "resolve")
            .collect::<Vec<_>>()
    );
    let resolve = &resolve[0];
    assert_eq!(
        (resolve.target.as_str(), resolve.level),
        ("agent_sessions", Level::INFO)
    );
    assert_eq!(field(resolve, "channel"), "telegram");
    assert_eq!(field(resolve, "agent"), "main");
    assert_eq!(field(resolve, "session_id"), session_id);
    assert_eq!(field(resolve, "decision"), "new");
    assert_eq!(field(resolve, "reason"), "no_session");

    let turn = &capture.spans("turn", "key", &key)[0];
    assert_eq!(field(turn, "action"), "answer");
    assert_eq!(field(turn, "session_id"), session_id);
    let complete = &capture.spans("turn.complete", "key", &key)[0];
    assert_eq!(field(complete, "payloads"), "1");

    let updates = capture.spans("store.update", "key", &key);
    assert!(
        updates.len() >= 2,
        "resolve and complete update the session: {updates:?}"
    );
    for update in &updates {
        assert_eq!(field(update, "backend"), "json");
        assert!(field(update, "lock_wait_us").parse::<u64>().is_ok());
    }
    assert!(
        updates.iter().any(|u| u
            .fields
            .get("bytes")
            .is_some_and(|b| b.parse::<u64>().unwrap() > 0)),
        "an update records the bytes it wrote: {updates:?}"
    );

    let appends = capture.spans("transcript.append", "session_id", &session_id);
    assert_eq!(appends.len(), 2, "the message and the reply");
    for append in &appends {
        assert_eq!(field(append, "backend"), "json");
        assert_eq!(field(append, "agent"), "main");
        assert_eq!(field(append, "events"), "1");
        assert!(field(append, "bytes").parse::<u64>().unwrap() > 20);
    }

    let spans = capture.spans.lock().unwrap();
    for span in spans.values() {
        assert!(
            !format!("{:?}", span.fields).contains("4111"),
            "{} carries message text: {:?}",
            span.name,
            span.fields
        );
    }
    for event in capture.loud_events.lock().unwrap().iter() {
        assert!(
            !event.contains("4111"),
            "an INFO event carries message text: {event}"
        );
    }
}

#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_request_opens_a_span_with_its_route_and_status() {
    use agent_sessions::http::{router, serve, ServiceOptions};
    let _serial = SERIAL.lock().await;
    let capture = capture();
    let manager = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .build()
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let options = ServiceOptions::default();
    tokio::spawn(async move {
        serve(
            listener,
            router(manager, options.clone()),
            &options,
            std::future::pending(),
        )
        .await
    });
    let unique = format!("telemetry-{}", std::process::id());
    let response = reqwest::get(format!("{base}/kernel/sessions/{unique}"))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // The span ends with the response; give the server a moment to record the status.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let spans = capture.spans("http.request", "route", "/kernel/sessions/{id}");
    assert!(
        spans.iter().any(
            |s| s.fields.get("status").map(String::as_str) == Some("404")
                && s.fields.get("method").map(String::as_str) == Some("GET")
        ),
        "{spans:?}"
    );
    assert!(
        !format!("{spans:?}").contains(&unique),
        "the route is the template, not the session id"
    );
}

#[cfg(feature = "metrics")]
mod metrics_recorded {
    use super::*;
    use agent_sessions::{JsonFileOptions, LockOptions};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use metrics_util::CompositeKey;

    fn snapshotter() -> &'static Snapshotter {
        static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
        SNAPSHOTTER.get_or_init(|| {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            recorder.install().unwrap();
            snapshotter
        })
    }

    /// Every metric recorded since the last call: name, labels, value (the debugging
    /// recorder's snapshot drains what it returns).
    /// One metric: its name, its labels, its value.
    type Metric = (String, Vec<(String, String)>, DebugValue);

    fn recorded() -> Vec<Metric> {
        snapshotter()
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value): (CompositeKey, _, _, DebugValue)| {
                let labels = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                (key.key().name().to_owned(), labels, value)
            })
            .collect()
    }

    /// The sum of the counters named `name` with `labels` (and maybe others).
    fn count(recorded: &[Metric], name: &str, labels: &[(&str, &str)]) -> u64 {
        recorded
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, value)| match value {
                DebugValue::Counter(count) => *count,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// How many samples the histograms named `name` of the JSON store hold.
    fn samples(recorded: &[Metric], name: &str) -> usize {
        recorded
            .iter()
            .filter(|(n, l, _)| n == name && l.iter().any(|(k, v)| k == "backend" && v == "json"))
            .map(|(_, _, value)| match value {
                DebugValue::Histogram(samples) => samples.len(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }

    /// A manager configured from an OpenClaw home that names no DM scope shares one
    /// session between every DM sender, as OpenClaw does; a second sender is counted
    /// each time and warned about once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_sender_in_a_shared_dm_session_is_counted_and_warned_once() {
        let _serial = SERIAL.lock().await;
        let capture = super::capture();
        recorded(); // what other tests recorded
        let warnings = || {
            capture
                .loud_events
                .lock()
                .unwrap()
                .iter()
                .filter(|event| event.contains("one shared session"))
                .count()
        };
        let warned_before = warnings();
        let home = tempfile::tempdir().unwrap();
        let manager = SessionManager::connect_openclaw(home.path())
            .await
            .unwrap()
            .build()
            .unwrap();
        for (peer, text) in [
            ("42", "hi"),
            ("42", "again"),
            ("43", "hello"),
            ("44", "hey"),
        ] {
            let turn = manager
                .turn(&InboundMessage::direct("telegram", peer, text))
                .await
                .unwrap();
            assert_eq!(turn.key().as_str(), "agent:main:main");
            turn.complete("ok").await.unwrap();
        }
        let counted = recorded();
        assert_eq!(
            count(&counted, "agent_sessions_shared_dm_senders_total", &[]),
            2,
            "43 and 44 each joined 42's session"
        );
        assert_eq!(warnings() - warned_before, 1, "warned once per manager");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn duplicates_failed_turns_and_deliveries_are_counted() {
        use agent_sessions::exactly_once::{Delivery, TurnFailure};
        let _serial = SERIAL.lock().await;
        recorded(); // what other tests recorded
        let dir = tempfile::tempdir().unwrap();
        let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .build()
            .unwrap();
        let update = InboundMessage::direct("telegram", "m-2", "hi").with_message_id("7");
        let payloads = manager
            .turn(&update)
            .await
            .unwrap()
            .complete("Hello.")
            .await
            .unwrap();
        drop(manager.turn(&update).await.unwrap()); // delivered again
        manager
            .report_delivery(
                &payloads[0],
                Delivery::Failed {
                    reason: "400".into(),
                },
            )
            .await
            .unwrap();
        let failed = manager
            .turn(&InboundMessage::direct("telegram", "m-2", "refused"))
            .await
            .unwrap();
        failed.fail(TurnFailure::DropInput).await.unwrap();
        let counted = recorded();
        assert_eq!(count(&counted, "agent_sessions_duplicates_total", &[]), 1);
        assert_eq!(
            count(
                &counted,
                "agent_sessions_deliveries_total",
                &[("status", "failed")]
            ),
            1
        );
        assert_eq!(
            count(
                &counted,
                "agent_sessions_turns_failed_total",
                &[("input", "dropped")]
            ),
            1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn turns_updates_appends_lock_timeouts_and_errors_are_counted() {
        let _serial = SERIAL.lock().await;
        recorded(); // what other tests recorded
        let dir = tempfile::tempdir().unwrap();
        let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .build()
            .unwrap();
        for text in ["hello", "again"] {
            let turn = manager
                .turn(&InboundMessage::direct("telegram", "m-1", text))
                .await
                .unwrap();
            turn.complete("hi").await.unwrap();
        }
        let turns = recorded();
        let new = [("decision", "new"), ("reason", "no_session")];
        let continued = [("decision", "continue"), ("reason", "within_timeout")];
        assert_eq!(count(&turns, "agent_sessions_turns_total", &new), 1);
        assert_eq!(count(&turns, "agent_sessions_turns_total", &continued), 1);
        assert!(count(&turns, "agent_sessions_transcript_bytes_total", &[]) > 100);
        assert!(
            samples(&turns, "agent_sessions_store_update_seconds") >= 4,
            "two updates a turn at least"
        );
        assert!(samples(&turns, "agent_sessions_store_lock_wait_seconds") >= 4);
        assert_eq!(count(&turns, "agent_sessions_errors_total", &[]), 0);

        // A lock another program holds, and a store that waits 50 ms for it.
        let locked = tempfile::tempdir().unwrap();
        let store = JsonFileStore::new_with(
            locked.path(),
            JsonFileOptions {
                lock: LockOptions {
                    timeout: Duration::from_millis(50),
                    ..LockOptions::default()
                },
                ..JsonFileOptions::default()
            },
        );
        let file = agent_sessions::store::sessions_dir(locked.path(), &AgentId::main())
            .join("sessions.json.lock");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(
            &file,
            format!(r#"{{"pid":{},"startedAt":0}}"#, std::process::id()),
        )
        .unwrap();
        let key = SessionKey::parse("agent:main:main").unwrap();
        let failed = store.put(&key, SessionEntry::new("s-1", 1)).await;
        assert!(
            matches!(failed, Err(agent_sessions::Error::LockTimeout { .. })),
            "{failed:?}"
        );
        let timeout = recorded();
        assert_eq!(
            count(
                &timeout,
                "agent_sessions_store_lock_timeouts_total",
                &[("backend", "json")]
            ),
            1
        );
        assert_eq!(
            count(
                &timeout,
                "agent_sessions_errors_total",
                &[("kind", "lock_timeout")]
            ),
            1
        );
    }

    /// Messages that arrive during a run are counted once for each thing that happens
    /// to them — queued, collected into another turn, steered to the running turn,
    /// dropped by the cap — and a run that lost its session is counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn messages_that_arrive_during_a_run_are_counted_once_each() {
        use agent_sessions::lane::{QueueDrop, QueueMode, QueueSettings};
        let _serial = SERIAL.lock().await;
        let quick = || QueueSettings::default().debounce(Duration::from_millis(100));
        // The first message takes the run; `later` arrive 20 ms apart while it runs;
        // `steer` lets the run look at its tool boundary before it completes.
        async fn run(settings: QueueSettings, later: &[&str], steer: bool) -> Vec<Metric> {
            let manager = Arc::new(
                SessionManager::builder(InMemoryStore::new())
                    .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
                    .queue(settings)
                    .build()
                    .unwrap(),
            );
            let dm = |text: &str| InboundMessage::direct("telegram", "q-1", text);
            recorded(); // what came before
            let first = manager.turn(&dm("first")).await.unwrap();
            let mut handlers = Vec::new();
            for text in later {
                let (manager, message) = (manager.clone(), dm(text));
                handlers.push(tokio::spawn(async move {
                    let turn = manager.turn(&message).await.unwrap();
                    let _ = turn.complete("ok").await;
                }));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if steer {
                assert_eq!(first.steering().await.unwrap().len(), later.len());
            }
            let _ = first.complete("done").await;
            for handler in handlers {
                handler.await.unwrap();
            }
            recorded()
        }
        let queue = |metrics: &[Metric], event: &str| {
            count(metrics, "agent_sessions_queue_total", &[("event", event)])
        };
        let waits = |metrics: &[Metric]| {
            metrics
                .iter()
                .filter(|(name, _, _)| name == "agent_sessions_queue_wait_seconds")
                .map(|(_, _, value)| match value {
                    DebugValue::Histogram(samples) => samples.len(),
                    other => panic!("not a histogram: {other:?}"),
                })
                .sum::<usize>()
        };

        let collect = run(quick(), &["second", "third"], false).await;
        assert_eq!(queue(&collect, "queued"), 2);
        assert_eq!(
            queue(&collect, "collected"),
            1,
            "the one answered with the other"
        );
        assert_eq!(waits(&collect), 1, "one follow-up turn ran");
        assert_eq!(queue(&collect, "dropped") + queue(&collect, "steered"), 0);

        let capped = quick().cap(1).drop_policy(QueueDrop::Old);
        let dropped = run(capped, &["second", "third"], false).await;
        assert_eq!(queue(&dropped, "queued"), 2);
        assert_eq!(queue(&dropped, "dropped"), 1);
        assert_eq!(queue(&dropped, "collected"), 0);

        let capped = quick().cap(1).drop_policy(QueueDrop::New);
        let refused = run(capped, &["second", "third"], false).await;
        assert_eq!(queue(&refused, "queued"), 1, "the third never waits");
        assert_eq!(queue(&refused, "dropped"), 1);

        let steered = run(quick().mode(QueueMode::Steer), &["second"], true).await;
        assert_eq!(queue(&steered, "queued"), 1);
        assert_eq!(queue(&steered, "steered"), 1);
        assert_eq!(queue(&steered, "collected"), 0);

        let interrupted = run(quick().mode(QueueMode::Interrupt), &["second"], false).await;
        assert_eq!(
            count(
                &interrupted,
                "agent_sessions_runs_total",
                &[("event", "lost")]
            ),
            1,
            "the first run lost the session to the newer message"
        );
    }
}
