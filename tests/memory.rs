//! Memory: usage, the memory flush, compaction, summaries, engine sessions, checkpoints.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::identity::IdentityLinks;
use agent_sessions::manager::{LogMessage, TurnOutcome};
use agent_sessions::memory::{CompactionEvent, SummaryRefresh};
use agent_sessions::memory::{EngineKind, EngineSession, TurnUsage};
use agent_sessions::memory::{IntrospectionInput, IntrospectionOutcome, Introspector};
use agent_sessions::memory::{MemoryFlushSettings, MemoryOptions};
use agent_sessions::memory::{Summarizer, SummaryInput};
use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::{CheckpointReason, EventKind};
use agent_sessions::{Durability, Error};
use chrono::{DateTime, Utc};

const MINUTE: Duration = Duration::from_secs(60);

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn dm(body: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", body)
}

#[tokio::test]
async fn one_call_after_each_turn_records_usage_engine_and_summary() {
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = SessionManager::builder(InMemoryStore::new())
        .clock(clock.clone())
        .build()
        .unwrap();
    let resolution = manager
        .resolve(&dm("Book Luigi's for Sunday?"))
        .await
        .unwrap();
    clock.advance(MINUTE);
    let after = manager
        .session(&resolution.key)
        .record_turn(
            TurnOutcome::completed()
                .with_usage(
                    TurnUsage::tokens(1_200, 340, 14_000, 120)
                        .by("anthropic", "claude-opus-4-6")
                        .with_context_tokens(200_000),
                )
                .with_engine(EngineSession::Sdk { id: "sdk-7".into() })
                .with_exchange(
                    "Book Luigi's for Sunday?",
                    "Booked Luigi's for Sunday at 7pm.",
                ),
        )
        .await
        .unwrap()
        .entry;
    assert_eq!(
        (after.input_tokens, after.output_tokens, after.total_tokens),
        (Some(1_200), Some(340), Some(15_320))
    );
    assert_eq!(
        (after.model_provider.as_deref(), after.model.as_deref()),
        (Some("anthropic"), Some("claude-opus-4-6"))
    );
    assert_eq!(after.context_tokens, Some(200_000));
    assert_eq!(after.sdk_session_id.as_deref(), Some("sdk-7"));
    assert_eq!((after.turn_count, after.system_sent), (Some(1), Some(true)));
    assert_eq!(
        after.updated_at,
        resolution.session.entry.updated_at + 60_000,
        "a turn is activity"
    );
    let summary = after.context_summary.unwrap();
    assert!(
        summary.starts_with("GOAL: Book Luigi's for Sunday?"),
        "{summary}"
    );
    assert!(summary.ends_with("TURNS: 1"), "{summary}");
}

#[tokio::test]
async fn exactly_one_flush_per_compaction_cycle() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .memory(MemoryOptions::new().flush_guard(MemoryFlushSettings {
            reserve_tokens_floor: 5_000,
            ..MemoryFlushSettings::default()
        }))
        .build()
        .unwrap();
    let key = manager.resolve(&dm("hi")).await.unwrap().key;
    let mut flushes = 0;
    // A context window of 100k: the flush threshold is 100k − 5k − 4k = 91k.
    let mut tokens = 80_000;
    for turn in 0..40 {
        tokens += 1_000;
        manager
            .session(&key)
            .record_turn(
                TurnOutcome::completed()
                    .with_usage(TurnUsage::tokens(tokens, 100, 0, 0).with_context_tokens(100_000)),
            )
            .await
            .unwrap();
        if let Some(plan) = manager.session(&key).memory_flush_plan().await.unwrap() {
            assert_eq!(plan.threshold, 91_000);
            assert!(plan.total_tokens >= 91_000);
            manager.session(&key).record_memory_flush().await.unwrap();
            flushes += 1;
        }
        if turn == 19 {
            assert_eq!(
                flushes, 1,
                "one flush in the first cycle despite 10 turns above the threshold"
            );
            // The engine compacts down to 40k tokens: a new cycle.
            manager
                .session(&key)
                .on_compaction_event(CompactionEvent::End {
                    will_retry: false,
                    tokens_after: Some(40_000),
                })
                .await
                .unwrap();
            tokens = 75_000; // grows past 91k again within the remaining turns
        }
    }
    assert_eq!(flushes, 2, "one flush per cycle");
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(
        (entry.compaction_count, entry.memory_flush_compaction_count),
        (Some(1), Some(1))
    );
    assert!(entry.memory_flush_at.is_some());
}

#[tokio::test]
async fn a_retried_compaction_counts_once() {
    let manager = SessionManager::new(InMemoryStore::new());
    let key = manager.resolve(&dm("hi")).await.unwrap().key;
    manager
        .session(&key)
        .record_turn(TurnOutcome::completed().with_usage(TurnUsage::tokens(150_000, 500, 0, 0)))
        .await
        .unwrap();
    for event in [
        CompactionEvent::Start,
        CompactionEvent::End {
            will_retry: true,
            tokens_after: None,
        },
        CompactionEvent::Start,
        CompactionEvent::End {
            will_retry: true,
            tokens_after: None,
        },
    ] {
        assert!(manager
            .session(&key)
            .on_compaction_event(event)
            .await
            .unwrap()
            .is_none());
    }
    let done = manager
        .session(&key)
        .on_compaction_event(CompactionEvent::End {
            will_retry: false,
            tokens_after: Some(30_000),
        })
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(done.compaction_count, Some(1));
    assert_eq!(
        (done.total_tokens, done.input_tokens, done.output_tokens),
        (Some(30_000), None, None)
    );
    let plain = manager
        .session(&key)
        .record_compaction(None)
        .await
        .unwrap()
        .entry;
    assert_eq!(
        (plain.compaction_count, plain.total_tokens),
        (Some(2), Some(30_000)),
        "no token count: kept"
    );
}

#[tokio::test]
async fn engine_sessions_are_kept_for_resume_and_cleared_on_reset() {
    let manager = SessionManager::new(InMemoryStore::new());
    let key = manager.resolve(&dm("hi")).await.unwrap().key;
    for engine in [
        EngineSession::Sdk { id: "sdk-1".into() },
        EngineSession::Cli {
            provider: "claude-cli".into(),
            id: "cli-1".into(),
        },
        EngineSession::Engine {
            engine: "droid".into(),
            id: "droid-1".into(),
        },
    ] {
        manager
            .session(&key)
            .record_turn(TurnOutcome::completed().with_engine(engine))
            .await
            .unwrap();
    }
    let kinds = [
        EngineKind::Sdk,
        EngineKind::Cli("claude-cli".into()),
        EngineKind::Engine("droid".into()),
    ];
    let ids: Vec<Option<String>> = futures_ids(&manager, &key, &kinds).await;
    assert_eq!(
        ids,
        [
            Some("sdk-1".into()),
            Some("cli-1".into()),
            Some("droid-1".into())
        ]
    );
    manager.resolve(&dm("/new")).await.unwrap();
    let cleared = futures_ids(&manager, &key, &kinds).await;
    assert_eq!(
        cleared,
        [None, None, None],
        "a new session starts a new engine session"
    );
}

async fn futures_ids(
    manager: &SessionManager,
    key: &SessionKey,
    kinds: &[EngineKind],
) -> Vec<Option<String>> {
    let mut ids = Vec::new();
    for kind in kinds {
        ids.push(manager.session(key).engine_session(kind).await.unwrap());
    }
    ids
}

#[tokio::test]
async fn identity_summaries_are_time_gated_and_shared_across_engine_variants() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = SessionManager::builder(common::store(dir.path()))
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(FileTranscriptStore::with_durability(
            dir.path(),
            Durability::SyncFile,
        ))
        .agent_identity("reggie_oc", "reggie")
        .agent_identity("reggie_fd", "reggie")
        .clock(clock.clone())
        .build()
        .unwrap();
    let talk = |agent: &str, channel: &str, text: &str| {
        InboundMessage::direct(channel, "+15550100", text)
            .with_agent(agent)
            .from_person("staff:17")
    };
    let exchange =
        |key: SessionKey, agent: &'static str, question: &'static str, answer: &'static str| {
            let manager = &manager;
            async move {
                manager
                    .session(&key)
                    .log_message(
                        LogMessage::inbound(question)
                            .from_person("staff:17")
                            .with_agent(agent, "reggie"),
                    )
                    .await
                    .unwrap();
                manager
                    .session(&key)
                    .log_message(
                        LogMessage::outbound(answer)
                            .from_person("staff:17")
                            .with_agent(agent, "reggie"),
                    )
                    .await
                    .unwrap();
            }
        };

    let sms = manager
        .resolve(&talk("reggie_oc", "sms", "When is my shift at Riverside?"))
        .await
        .unwrap();
    assert_eq!(sms.entry().person_id.as_deref(), Some("staff:17"));
    assert_eq!(sms.entry().agent_identity.as_deref(), Some("reggie"));
    exchange(
        sms.key.clone(),
        "reggie_oc",
        "When is my shift at Riverside?",
        "Thursday at 9am.",
    )
    .await;

    clock.advance(10 * MINUTE);
    assert!(
        matches!(
            manager
                .refresh_identity_summary("staff:17", "reggie")
                .await
                .unwrap(),
            SummaryRefresh::NotQuiet { .. }
        ),
        "the conversation is still going"
    );

    clock.advance(51 * MINUTE); // an hour and a minute after the last message
    let SummaryRefresh::Updated { summary, sessions } = manager
        .refresh_identity_summary("staff:17", "reggie")
        .await
        .unwrap()
    else {
        panic!("expected an update")
    };
    assert_eq!(sessions, std::slice::from_ref(&sms.key));
    assert!(summary.text.contains("Riverside"), "{}", summary.text);
    assert!(matches!(
        manager
            .refresh_identity_summary("staff:17", "reggie")
            .await
            .unwrap(),
        SummaryRefresh::NothingNew
    ));

    // The person's first session with the other engine variant starts with the summary.
    let web = manager
        .resolve(&talk("reggie_fd", "webchat", "Can I swap it for Friday?"))
        .await
        .unwrap();
    assert_ne!(web.key, sms.key);
    let seeded = manager
        .session(&web.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .identity_summary
        .unwrap();
    assert_eq!(seeded.text, summary.text, "inherited from the sibling");
    assert_eq!(
        web.entry().identity_summary.as_ref(),
        Some(&seeded),
        "the resolution of the first message already carries it"
    );
    exchange(
        web.key.clone(),
        "reggie_fd",
        "Can I swap it for Friday?",
        "Swap requested.",
    )
    .await;

    clock.advance(61 * MINUTE);
    let SummaryRefresh::Updated {
        summary: merged,
        sessions,
    } = manager
        .refresh_identity_summary("staff:17", "reggie")
        .await
        .unwrap()
    else {
        panic!("expected an update")
    };
    assert_eq!(sessions.len(), 2, "shared by both engine variants");
    assert!(merged.text.contains("Friday"), "{}", merged.text);
    assert!(
        merged.text.contains("Riverside"),
        "merged with the previous summary: {}",
        merged.text
    );
    assert!(merged.watermark > summary.watermark);
    for key in [&sms.key, &web.key] {
        let text = manager
            .session(key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry
            .identity_summary
            .unwrap()
            .text;
        assert_eq!(text, merged.text);
    }
    // Another identity's messages are not mixed in.
    assert!(matches!(
        manager
            .refresh_identity_summary("staff:17", "henry")
            .await
            .unwrap(),
        SummaryRefresh::NothingNew
    ));
}

#[derive(Clone, Default)]
struct RecordingIntrospector {
    seen: Arc<Mutex<Vec<(CheckpointReason, usize, String)>>>,
}

#[async_trait::async_trait]
impl Introspector for RecordingIntrospector {
    async fn introspect(
        &self,
        input: &IntrospectionInput,
    ) -> agent_sessions::Result<IntrospectionOutcome> {
        let users = input
            .events
            .iter()
            .filter(|e| e.kind() == EventKind::UserMessage)
            .count();
        self.seen
            .lock()
            .unwrap()
            .push((input.reason, users, input.entry.session_id.clone()));
        Ok(IntrospectionOutcome {
            working_memory: Some(format!("{users} user messages reviewed")),
            description: Some(format!("{:?} review", input.reason)),
        })
    }
}

#[tokio::test]
async fn checkpoints_introspect_the_events_since_the_last_one() {
    let dir = tempfile::tempdir().unwrap();
    let introspector = RecordingIntrospector::default();
    let manager = SessionManager::builder(common::store(dir.path()))
        .transcripts(FileTranscriptStore::with_durability(
            dir.path(),
            Durability::SyncFile,
        ))
        .memory(
            MemoryOptions::new()
                .introspector(introspector.clone())
                .checkpoint_every_turns(3),
        )
        .build()
        .unwrap();
    let first = manager.resolve(&dm("hi")).await.unwrap();
    let key = first.key.clone();
    for text in ["one", "two"] {
        manager
            .session(&key)
            .log_message(LogMessage::inbound(text))
            .await
            .unwrap();
    }
    let event = manager
        .session(&key)
        .checkpoint(CheckpointReason::Manual)
        .await
        .unwrap();
    assert_eq!(event.kind(), EventKind::Checkpoint);
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(
        entry.working_memory.as_deref(),
        Some("2 user messages reviewed")
    );
    assert_eq!(entry.description.as_deref(), Some("Manual review"));

    manager
        .session(&key)
        .log_message(LogMessage::inbound("three"))
        .await
        .unwrap();
    for _ in 0..3 {
        manager
            .session(&key)
            .record_turn(TurnOutcome::completed())
            .await
            .unwrap();
    }
    manager.resolve(&dm("/new")).await.unwrap();
    let seen = introspector.seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter().map(|(r, n, _)| (*r, *n)).collect::<Vec<_>>(),
        [
            (CheckpointReason::Manual, 2),
            (CheckpointReason::TurnLimit, 1),
            (CheckpointReason::NewSession, 0)
        ],
        "each looks only at events since the previous checkpoint"
    );
    assert_eq!(
        seen[2].2,
        first.session_id(),
        "new_session looks at the session that ended"
    );
    let fresh = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(
        fresh.working_memory.as_deref(),
        Some("0 user messages reviewed"),
        "working memory carries over"
    );
    assert_eq!(
        fresh.description, None,
        "the old session's description does not"
    );
}

#[tokio::test]
async fn the_skills_snapshot_is_rebuilt_on_first_turns_and_new_versions() {
    let manager = SessionManager::new(InMemoryStore::new());
    let key = manager.resolve(&dm("hi")).await.unwrap().key;
    let builds = Mutex::new(0);
    let build = || {
        *builds.lock().unwrap() += 1;
        serde_json::json!({"prompt": "You can use: weather.", "skills": [{"name": "weather"}]})
    };
    assert!(manager
        .session(&key)
        .ensure_skills_snapshot(1, build)
        .await
        .unwrap());
    assert!(
        !manager
            .session(&key)
            .ensure_skills_snapshot(1, build)
            .await
            .unwrap(),
        "built for this session"
    );
    manager
        .session(&key)
        .record_turn(TurnOutcome::completed())
        .await
        .unwrap();
    assert!(!manager
        .session(&key)
        .ensure_skills_snapshot(1, build)
        .await
        .unwrap());
    assert!(
        manager
            .session(&key)
            .ensure_skills_snapshot(2, build)
            .await
            .unwrap(),
        "a newer version"
    );
    manager.resolve(&dm("/new")).await.unwrap();
    assert!(
        manager
            .session(&key)
            .ensure_skills_snapshot(2, build)
            .await
            .unwrap(),
        "a new session's first turn"
    );
    assert_eq!(*builds.lock().unwrap(), 3);
    let snapshot = manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .skills_snapshot
        .unwrap();
    assert_eq!(snapshot["version"], 2);
}

struct FailingSummarizer;

#[async_trait::async_trait]
impl Summarizer for FailingSummarizer {
    async fn summarize(&self, _: &SummaryInput) -> agent_sessions::Result<String> {
        Err(Error::NotConfigured { what: "a model" })
    }
}

#[tokio::test]
async fn a_failing_summarizer_leaves_the_turn_recorded() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .memory(MemoryOptions::new().summarizer(FailingSummarizer))
        .build()
        .unwrap();
    let key = manager.resolve(&dm("hi")).await.unwrap().key;
    let entry = manager
        .session(&key)
        .record_turn(TurnOutcome::completed().with_exchange("hi", "hello"))
        .await
        .unwrap()
        .entry;
    assert_eq!((entry.turn_count, entry.context_summary), (Some(1), None));
}

/// The checkpoint of a session that ends (a reset or an expiry) runs on every backend:
/// the replaced session is introspected and its working memory carries over.
#[tokio::test]
async fn the_new_session_checkpoint_runs_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::new(dir.path(), "new_session_checkpoint").await;
    for (backend, builder) in std::mem::take(&mut backends.builders) {
        let introspector = RecordingIntrospector::default();
        let manager = builder
            .memory(MemoryOptions::new().introspector(introspector.clone()))
            .build()
            .unwrap();
        let first = manager.resolve(&dm("hi")).await.unwrap();
        for text in ["one", "two"] {
            manager
                .session(&first.key)
                .log_message(LogMessage::inbound(text))
                .await
                .unwrap();
        }
        let next = manager.resolve(&dm("/new")).await.unwrap();
        assert!(next.is_new(), "{backend}");
        let seen = introspector.seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [(
                CheckpointReason::NewSession,
                2,
                first.session_id().to_owned()
            )],
            "{backend}: the session that ended is introspected once"
        );
        let fresh = manager
            .session(&next.key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry;
        assert_eq!(
            fresh.working_memory.as_deref(),
            Some("2 user messages reviewed"),
            "{backend}: working memory carries over"
        );
    }
    backends.finish().await;
}

/// The message log names the canonical person and the agent's identity the session
/// knows, not the raw identifier an adapter saw, and gives every message its own UUID —
/// on every backend.
#[tokio::test]
async fn the_message_log_names_the_person_and_identity_the_session_knows() {
    use agent_sessions::transcript::Offset;
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::new(dir.path(), "message_log_person").await;
    for (backend, builder) in std::mem::take(&mut backends.builders) {
        let manager = builder
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
            .agent_identity("reggie_oc", "reggie")
            .build()
            .unwrap();
        let raw = InboundMessage::direct("sms", "+15550001", "hi").with_agent("reggie_oc");
        let resolved = manager
            .resolve(&raw.clone().from_person("staff:17"))
            .await
            .unwrap();
        let key = &resolved.key;
        // (what is logged) → the person and identity its line must name
        let logged = [
            LogMessage::from_inbound(&raw),
            LogMessage::inbound("no sender given"),
            LogMessage::outbound("hello Jane"),
        ];
        for message in logged {
            manager.session(key).log_message(message).await.unwrap();
        }
        let read = manager.session(key).replay(Offset::START).await.unwrap();
        let logs: Vec<_> = read
            .events
            .iter()
            .filter_map(|e| e.entry.log.clone())
            .collect();
        assert_eq!(logs.len(), 3, "{backend}");
        let mut ids = std::collections::BTreeSet::new();
        for log in &logs {
            assert_eq!(
                log.person_id.as_deref(),
                Some("staff:17"),
                "{backend}: {log:?}"
            );
            assert_eq!(
                log.agent_identity.as_deref(),
                Some("reggie"),
                "{backend}: {log:?}"
            );
            let id = log.message_id.as_deref().expect("every line has an id");
            assert!(uuid::Uuid::parse_str(id).is_ok(), "{backend}: {id}");
            ids.insert(id.to_owned());
        }
        assert_eq!(ids.len(), 3, "{backend}: ids are distinct");
    }
    backends.finish().await;
}

/// A manager builder on each backend: memory, JSON and SQLite under `dir`, and — with a
/// test server — PostgreSQL in a schema of its own, dropped by [`Backends::finish`].
struct Backends {
    builders: Vec<(&'static str, agent_sessions::manager::SessionManagerBuilder)>,
    #[cfg(postgres_tests)]
    schema: common::TestSchema,
}

impl Backends {
    async fn new(dir: &std::path::Path, schema_prefix: &str) -> Self {
        #[allow(unused_mut)] // PostgreSQL is added only with a test server
        let mut builders = vec![
            (
                "memory",
                SessionManager::builder(InMemoryStore::new())
                    .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new()),
            ),
            (
                "json",
                SessionManager::connect(&format!("json:{}", dir.join("json").display()))
                    .await
                    .unwrap(),
            ),
            (
                "sqlite",
                SessionManager::connect(&format!("sqlite:{}", dir.join("s.db").display()))
                    .await
                    .unwrap(),
            ),
        ];
        #[cfg(postgres_tests)]
        let schema = common::TestSchema::new(schema_prefix);
        #[cfg(postgres_tests)]
        builders.push((
            "postgres",
            SessionManager::connect(&schema.url()).await.unwrap(),
        ));
        #[cfg(not(postgres_tests))]
        let _ = schema_prefix;
        Backends {
            builders,
            #[cfg(postgres_tests)]
            schema,
        }
    }

    /// Drops what the backends left on the test server.
    async fn finish(self) {
        #[cfg(postgres_tests)]
        self.schema.drop().await;
    }
}

/// One person known by two raw ids — `staff:17` by SMS, `42` on the admin chat, linked
/// to one canonical person — is one person everywhere: each session, each log line and
/// the rolling summary name her canonical id, the raw id kept beside it; and a session
/// that recorded a raw id before the link is corrected on its next message.
#[tokio::test]
async fn a_linked_person_has_one_id_across_her_sessions_lines_and_summary() {
    use agent_sessions::transcript::{LogQuery, TranscriptStore};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let transcripts = FileTranscriptStore::new(dir.path());
    let build = |links: IdentityLinks| {
        SessionManager::builder(common::store(dir.path()))
            .key_builder(
                DefaultKeyBuilder::new()
                    .dm_scope(DmScope::PerChannelPeer)
                    .identity_links(links),
            )
            .transcripts(transcripts.clone())
            .agent_identity("reggie_oc", "reggie")
            .agent_identity("reggie_fd", "reggie")
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let sms = InboundMessage::direct("sms", "+61412345678", "When is my shift?")
        .with_agent("reggie_oc")
        .from_person("staff:17");
    let admin = InboundMessage::direct("admin_chat", "42", "Swap it for Friday?")
        .with_agent("reggie_fd")
        .from_person("42");

    // Before the link: her SMS session records the raw id it saw.
    let unlinked = build(IdentityLinks::new());
    let turn = unlinked.turn(&sms).await.unwrap();
    let sms_key = turn.key().clone();
    turn.complete("Thursday at 9.").await.unwrap();
    assert_eq!(
        unlinked
            .session(&sms_key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry
            .person_id
            .as_deref(),
        Some("staff:17")
    );

    let manager = build(IdentityLinks::new().link("jane", ["staff:17", "42"]));
    let mut keys = Vec::new();
    for (message, reply) in [(&sms, "Still Thursday."), (&admin, "Swap requested.")] {
        clock.advance(Duration::from_secs(60));
        let turn = manager.turn(message).await.unwrap();
        keys.push(turn.key().clone());
        turn.complete(reply).await.unwrap();
    }
    assert_eq!(keys[0], sms_key);
    for (key, raw) in keys.iter().zip(["staff:17", "42"]) {
        let entry = manager.session(key).get().await.unwrap().unwrap().entry;
        assert_eq!(entry.person_id.as_deref(), Some("jane"), "{key}");
        assert_eq!(entry.raw_person_ids, Some(vec![raw.to_owned()]), "{key}");
    }

    // Her lines since the link, by her one id; her messages keep the raw id they came
    // with (the bot's replies came with none).
    let lines = transcripts
        .query_log(&LogQuery::person_with("jane", "reggie"))
        .await
        .unwrap();
    assert_eq!(
        lines.len(),
        4,
        "two messages and two replies since the link"
    );
    let raw: Vec<Option<&str>> = lines
        .iter()
        .map(|line| line.log.raw_person_id.as_deref())
        .collect();
    assert_eq!(raw, [Some("staff:17"), None, Some("42"), None]);

    // Her rolling summary, asked for by either raw id, reaches both sessions.
    clock.advance(Duration::from_secs(2 * 3600));
    let SummaryRefresh::Updated { sessions, .. } = manager
        .refresh_identity_summary("42", "reggie")
        .await
        .unwrap()
    else {
        panic!("expected an update")
    };
    assert_eq!(sessions.len(), 2, "{sessions:?}");
}

/// Sessions that recorded a raw id before the link are corrected without waiting for
/// their next message: every session of the linked person, once (a second run finds
/// nothing), and a person with no link is left as she was.
#[tokio::test]
async fn linking_a_person_later_corrects_her_waiting_sessions_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let build = |links: IdentityLinks| {
        SessionManager::builder(common::store(dir.path()))
            .key_builder(DefaultKeyBuilder::new().identity_links(links))
            .build()
            .unwrap()
    };
    let unlinked = build(IdentityLinks::new());
    for (channel, peer, person) in [
        ("sms", "+61412345678", "staff:17"),
        ("admin_chat", "42", "42"),
        ("sms", "+61499999999", "staff:99"),
    ] {
        let message = InboundMessage::direct(channel, peer, "hello").from_person(person);
        unlinked.resolve(&message).await.unwrap();
    }

    let manager = build(IdentityLinks::new().link("jane", ["staff:17", "42"]));
    let corrected = manager
        .canonicalize_people(&ListFilter::new())
        .await
        .unwrap();
    let mut raw: Vec<_> = corrected
        .iter()
        .map(|s| {
            assert_eq!(s.entry.person_id.as_deref(), Some("jane"), "{}", s.key);
            s.entry.raw_person_ids.clone().unwrap().join(",")
        })
        .collect();
    raw.sort();
    assert_eq!(raw, ["42", "staff:17"]);

    let people: Vec<Option<String>> = manager
        .list(&ListFilter::new().person("jane"))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.entry.person_id)
        .collect();
    assert_eq!(
        people.len(),
        2,
        "both of her sessions are found by her one id"
    );
    let other = manager
        .list(&ListFilter::new().person("staff:99"))
        .await
        .unwrap();
    assert_eq!(other.len(), 1, "an unlinked person keeps her id");
    assert!(other[0].entry.raw_person_ids.is_none());

    let again = manager
        .canonicalize_people(&ListFilter::new())
        .await
        .unwrap();
    assert!(again.is_empty(), "nothing is left to correct: {again:?}");
}
