//! The session lifecycle as a specification: sequences of messages and clock moves, and
//! the decision and reason each message gets — on the memory store and the JSON store.

mod common;

#[path = "common/stores.rs"]
mod stores;

#[path = "common/flaky.rs"]
mod flaky;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::freshness::{Clock, ManualClock};
use agent_sessions::freshness::{DriftClassifier, DriftVerdict};
use agent_sessions::freshness::{ModelRef, ResetTriggers, StaticModelCatalog};
use agent_sessions::freshness::{ResetConfig, ResetSpec, ResetType, StaleReason, Zone};
use agent_sessions::manager::{DeleteOptions, OverrideKind, SessionOverride, TurnOutcome};
use agent_sessions::prelude::*;
use agent_sessions::privacy::PruneOptions;
use agent_sessions::store::{DescriptionSource, SendPolicy};
use agent_sessions::DeliveryContext;
use agent_sessions::{DeleteRefusal, Error, SessionManager, ThreadId};
use agent_sessions::{SessionSource, SessionStatus};
use chrono::{DateTime, Utc};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// Daily at 04:00 UTC by default; groups reset after 2 idle hours; WhatsApp after 30.
fn reset_config() -> ResetConfig {
    ResetConfig::default()
        .time_zone(Zone::Utc)
        .by_type(ResetType::Group, ResetSpec::idle(120))
        .by_channel("whatsapp", ResetSpec::idle(30))
}

/// A manager on each kind of store, with a manual clock at 2026-03-10 10:00 UTC.
struct Harness {
    name: &'static str,
    manager: SessionManager,
    clock: ManualClock,
    _dir: Option<tempfile::TempDir>,
}

fn harnesses() -> Vec<Harness> {
    harnesses_with(|builder| builder)
}

fn harnesses_with(
    configure: impl Fn(
        agent_sessions::manager::SessionManagerBuilder,
    ) -> agent_sessions::manager::SessionManagerBuilder,
) -> Vec<Harness> {
    let make = |store: Arc<dyn SessionStore>| {
        let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
        let builder = SessionManager::builder(store)
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .freshness(reset_config())
            .clock(clock.clone());
        (configure(builder).build().unwrap(), clock)
    };
    let (memory, memory_clock) = make(Arc::new(InMemoryStore::new()));
    let dir = tempfile::tempdir().unwrap();
    let (json, json_clock) = make(Arc::new(common::store(dir.path())));
    vec![
        Harness {
            name: "memory",
            manager: memory,
            clock: memory_clock,
            _dir: None,
        },
        Harness {
            name: "json",
            manager: json,
            clock: json_clock,
            _dir: Some(dir),
        },
    ]
}

fn dm(body: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", body).with_sender_name("Alice")
}

fn whatsapp_group(sender: &str, body: &str) -> InboundMessage {
    InboundMessage::group("whatsapp", "120363@g.us", sender, body).with_group_subject("Family")
}

fn slack_channel(sender: &str, body: &str) -> InboundMessage {
    InboundMessage::group("slack", "C1", sender, body).in_channel()
}

fn key(raw: &str) -> SessionKey {
    SessionKey::parse(raw).unwrap()
}

#[tokio::test]
async fn decision_table() {
    use Decision::{Continue, New};
    // (clock move before the message, message, decision, reason)
    let steps: Vec<(Duration, InboundMessage, Decision, Reason)> = vec![
        (Duration::ZERO, dm("hi"), New, Reason::NoSession),
        (5 * MINUTE, dm("again"), Continue, Reason::WithinTimeout),
        // 10:05 → next day 10:05: the 04:00 boundary passed.
        (
            24 * HOUR,
            dm("morning"),
            New,
            Reason::Timeout(StaleReason::Daily),
        ),
        (MINUTE, dm("/new plan a trip"), New, Reason::ExplicitReset),
        (MINUTE, dm("where to?"), Continue, Reason::WithinTimeout),
        // WhatsApp's channel setting (30 idle minutes) beats the group type's 120.
        (
            Duration::ZERO,
            whatsapp_group("+1", "hi all"),
            New,
            Reason::NoSession,
        ),
        (
            29 * MINUTE,
            whatsapp_group("+2", "hello"),
            Continue,
            Reason::WithinTimeout,
        ),
        (
            31 * MINUTE,
            whatsapp_group("+1", "anyone?"),
            New,
            Reason::Timeout(StaleReason::Idle),
        ),
        // Slack has no channel setting: the group type's 120 idle minutes apply, not the
        // daily default.
        (
            Duration::ZERO,
            slack_channel("U1", "deploy?"),
            New,
            Reason::NoSession,
        ),
        (
            100 * MINUTE,
            slack_channel("U2", "done"),
            Continue,
            Reason::WithinTimeout,
        ),
        (
            121 * MINUTE,
            slack_channel("U1", "again"),
            New,
            Reason::Timeout(StaleReason::Idle),
        ),
        // Others' trigger text in a group is an ordinary message.
        (
            MINUTE,
            slack_channel("U2", "/new"),
            Continue,
            Reason::WithinTimeout,
        ),
        // The owner may reset a group.
        (
            MINUTE,
            slack_channel("U9", "/reset").from_owner(),
            New,
            Reason::ExplicitReset,
        ),
    ];
    for harness in harnesses() {
        for (index, (advance, message, decision, reason)) in steps.iter().enumerate() {
            harness.clock.advance(*advance);
            let resolution = harness.manager.resolve(message).await.unwrap();
            assert_eq!(
                (resolution.decision, resolution.reason),
                (*decision, *reason),
                "{} step {index}: {:?}",
                harness.name,
                message.body
            );
            // The session says why it started, as long as it lasts.
            let started = match decision {
                Decision::New => reason.started_by(),
                Decision::Continue => steps[..index]
                    .iter()
                    .rev()
                    .find(|(_, earlier, decided, _)| {
                        *decided == Decision::New
                            && harness.manager.key_for(earlier).unwrap() == resolution.key
                    })
                    .map(|(_, _, _, reason)| reason.started_by())
                    .unwrap(),
            };
            assert_eq!(
                resolution.entry().start_reason.as_deref(),
                Some(started),
                "{} step {index}",
                harness.name
            );
        }
    }
    assert_eq!(Reason::Timeout(StaleReason::Daily).started_by(), "daily");
    assert_eq!(Reason::Timeout(StaleReason::Idle).started_by(), "idle");
    assert_eq!(Reason::ExplicitReset.started_by(), "explicit_reset");
}

#[tokio::test]
async fn closed_sessions_start_over() {
    for harness in harnesses() {
        let first = harness.manager.resolve(&dm("hi")).await.unwrap();
        let closed = harness.manager.session(&first.key).close().await.unwrap();
        assert_eq!(closed.entry.status, Some(SessionStatus::Closed));
        assert_eq!(closed.entry.status.as_ref().unwrap().clawos(), "closed");
        let next = harness.manager.resolve(&dm("back")).await.unwrap();
        assert_eq!(
            (next.decision, next.reason),
            (Decision::New, Reason::SessionClosed)
        );
        assert_ne!(next.session_id(), first.session_id());
        assert_eq!(next.previous.unwrap().session_id, first.session_id());
        assert_eq!(next.session.entry.status, Some(SessionStatus::Idle));
        assert_eq!(
            next.session.entry.start_reason.as_deref(),
            Some("session_closed")
        );
        // A reset by call says so too.
        let reset = harness.manager.session(&next.key).reset().await.unwrap();
        assert_eq!(reset.entry.start_reason.as_deref(), Some("explicit_reset"));
    }
}

#[tokio::test]
async fn the_daily_boundary_follows_the_configured_zone() {
    for harness in harnesses_with(|builder| {
        builder
            .freshness(ResetConfig::default().time_zone(Zone::parse("America/New_York").unwrap()))
    }) {
        // 04:00 in New York on 2026-01-15 is 09:00 UTC.
        harness.clock.set(at("2026-01-15T08:00:00Z"));
        harness.manager.resolve(&dm("late night")).await.unwrap();
        harness.clock.set(at("2026-01-15T08:59:59Z"));
        let before = harness.manager.resolve(&dm("still up")).await.unwrap();
        assert_eq!(before.reason, Reason::WithinTimeout, "{}", harness.name);
        harness.clock.set(at("2026-01-15T09:00:00Z"));
        let at_boundary = harness.manager.resolve(&dm("good morning")).await.unwrap();
        assert_eq!(
            at_boundary.reason,
            Reason::Timeout(StaleReason::Daily),
            "{}",
            harness.name
        );
        assert_eq!(at_boundary.expires_at, Some(at("2026-01-16T09:00:00Z")));
    }
}

#[tokio::test]
async fn racing_messages_for_a_new_key_create_one_session() {
    for harness in harnesses() {
        let manager = Arc::new(harness.manager);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let manager = manager.clone();
            tasks
                .spawn(async move { manager.resolve(&dm(&format!("message {i}"))).await.unwrap() });
        }
        let mut resolutions = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            resolutions.push(joined.unwrap());
        }
        let new: Vec<_> = resolutions.iter().filter(|r| r.is_new()).collect();
        assert_eq!(new.len(), 1, "{}: exactly one creator", harness.name);
        assert!(resolutions
            .iter()
            .all(|r| r.session_id() == new[0].session_id()));
        let stored = manager.session(&new[0].key).get().await.unwrap().unwrap();
        assert_eq!(stored.entry.message_count, Some(8), "{}", harness.name);
    }
}

#[tokio::test]
async fn resolve_on_a_corrupt_store_reports_it_and_leaves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::main_store_file(dir.path());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"{\"agent:main:telegram:dm:42\": {\"sessionId\": ").unwrap();
    let manager = SessionManager::builder(common::store(dir.path()))
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    let error = manager.resolve(&dm("hi")).await.unwrap_err();
    assert!(matches!(error, Error::Corrupt { .. }), "{error:?}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"{\"agent:main:telegram:dm:42\": {\"sessionId\": "
    );
}

#[tokio::test]
async fn a_route_update_creates_a_missing_session_as_openclaw_does() {
    for harness in harnesses() {
        let manager = &harness.manager;
        // (key, route, expected lastChannel, lastTo, lastThreadId)
        let cases = [
            (
                "agent:main:telegram:dm:42",
                DeliveryContext::to(" Telegram ", " 42 "),
                Some("telegram"),
                Some("42"),
                None,
            ),
            (
                "agent:main:slack:channel:c1",
                DeliveryContext::to("slack", "C1").with_thread("1700.1"),
                Some("slack"),
                Some("C1"),
                Some(ThreadId::Text("1700.1".into())),
            ),
            (
                "agent:main:main",
                DeliveryContext::default(),
                None,
                None,
                None,
            ),
        ];
        for (raw, route, channel, to, thread) in cases {
            let key = key(raw);
            assert!(manager.session(&key).get().await.unwrap().is_none());
            let created = manager
                .session(&key)
                .update_last_route(&route)
                .await
                .unwrap();
            let entry = &created.entry;
            assert_eq!(
                (
                    entry.last_channel.as_deref(),
                    entry.last_to.as_deref(),
                    &entry.last_thread_id
                ),
                (channel, to, &thread),
                "{}: {raw}",
                harness.name
            );
            assert_eq!(
                entry.updated_at,
                harness.clock.now_millis(),
                "{raw}: updatedAt is now"
            );
            assert!(!entry.session_id.is_empty());
            assert_eq!(
                manager.session(&key).get().await.unwrap().unwrap().entry,
                *entry
            );
            // The next message continues the session the route created.
            let id = entry.session_id.clone();
            let again = manager
                .session(&key)
                .update_last_route(&DeliveryContext::to("slack", "C9"))
                .await
                .unwrap();
            assert_eq!(
                again.entry.session_id, id,
                "{raw}: an existing session is updated"
            );
        }
    }
}

#[tokio::test]
async fn chatter_records_metadata_without_activity() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let group = |sender: &str, body: &str| {
            InboundMessage::group("whatsapp", "120363@g.us", sender, body)
                .with_group_subject("Family")
        };
        // Chatter on a group without a session: the session is created with the metadata.
        let first = manager
            .record_inbound_meta(&group("+1555", "lunch?"))
            .await
            .unwrap();
        let created_at = first.entry.updated_at;
        // Chatter is not a route: a session it created has none yet.
        assert_eq!(first.entry.last_to, None, "{}", harness.name);
        // (what arrives, expected subject, expected lastTo)
        let cases = [
            (group("+1556", "pizza"), Some("Family"), None),
            (
                InboundMessage::group("whatsapp", "120363@g.us", "+1557", "ok")
                    .with_group_subject("Family 2026"),
                Some("Family 2026"),
                None,
            ),
        ];
        for (message, subject, to) in cases {
            harness.clock.advance(10 * MINUTE);
            let stored = manager.record_inbound_meta(&message).await.unwrap();
            let entry = &stored.entry;
            assert_eq!(entry.session_id, first.entry.session_id, "{}", harness.name);
            assert_eq!(entry.updated_at, created_at, "chatter is not activity");
            assert_eq!(
                entry.message_count,
                Some(0),
                "chatter is not a message of the session"
            );
            assert_eq!(entry.turn_count, Some(0));
            assert_eq!(
                (entry.subject.as_deref(), entry.last_to.as_deref()),
                (subject, to)
            );
            assert_eq!(entry.chat_type, Some(agent_sessions::ChatType::Group));
            assert_eq!(
                entry.origin.as_ref().unwrap().provider.as_deref(),
                Some("whatsapp")
            );
        }
        // An addressed message is a real one: counted, and it moves updatedAt.
        let answered = manager
            .resolve(&group("+1555", "@bot plan dinner").mentioning_agent())
            .await
            .unwrap();
        assert_eq!(answered.session.entry.session_id, first.entry.session_id);
        assert_eq!(answered.session.entry.message_count, Some(1));
        assert!(answered.session.entry.updated_at > created_at);
        // ... and it sets where replies go; later chatter that names another reply
        // target and account does not move it.
        assert_eq!(
            answered.session.entry.last_to.as_deref(),
            Some("120363@g.us")
        );
        let elsewhere = manager
            .record_inbound_meta(
                &group("+1558", "off topic")
                    .with_reply_to("120363@g.us/announcements")
                    .with_account("work"),
            )
            .await
            .unwrap();
        assert_eq!(elsewhere.entry.session_id, first.entry.session_id);
        assert_eq!(
            (
                elsewhere.entry.last_to.as_deref(),
                elsewhere.entry.last_account_id.as_deref()
            ),
            (Some("120363@g.us"), None),
            "{}: chatter moved the reply route",
            harness.name
        );
        assert_eq!(
            elsewhere.entry.delivery_context,
            answered.session.entry.delivery_context
        );
    }
}

#[tokio::test]
async fn only_real_turns_refresh_activity() {
    // A regression OpenClaw shipped (#49515): metadata updates refreshed updatedAt, so
    // idle resets never fired.
    for harness in harnesses() {
        let manager = &harness.manager;
        let first = manager.resolve(&slack_channel("U1", "hi")).await.unwrap();
        let key = first.key.clone();
        let since = first.session.entry.updated_at;
        harness.clock.advance(HOUR);
        manager
            .session(&key)
            .set_label(Some("deploys"))
            .await
            .unwrap();
        manager
            .session(&key)
            .update_last_route(&DeliveryContext::to("slack", "C2"))
            .await
            .unwrap();
        manager
            .session(&key)
            .set_override(SessionOverride::SendPolicy(SendPolicy::Deny))
            .await
            .unwrap();
        manager
            .session(&key)
            .set_description(Some("release chatter"), DescriptionSource::User)
            .await
            .unwrap();
        manager
            .session(&key)
            .set_status(SessionStatus::AwaitingApproval)
            .await
            .unwrap();
        let after = manager.session(&key).get().await.unwrap().unwrap().entry;
        assert_eq!(
            after.updated_at, since,
            "{}: metadata is not activity",
            harness.name
        );
        assert_eq!(after.last_to.as_deref(), Some("C2"));

        harness.clock.advance(61 * MINUTE); // 121 idle minutes in all
        let next = manager
            .resolve(&slack_channel("U1", "still there?"))
            .await
            .unwrap();
        assert_eq!(
            next.reason,
            Reason::Timeout(StaleReason::Idle),
            "{}",
            harness.name
        );

        harness.clock.advance(HOUR);
        let turn = manager
            .session(&next.key)
            .record_turn(TurnOutcome::completed())
            .await
            .unwrap();
        assert_eq!(
            turn.entry.updated_at,
            next.session.entry.updated_at + 3_600_000
        );
        assert_eq!(
            (turn.entry.turn_count, turn.entry.system_sent),
            (Some(1), Some(true))
        );
    }
}

#[tokio::test]
async fn a_new_session_zeroes_its_state_and_keeps_openclaws_settings() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let first = manager.resolve(&dm("hi")).await.unwrap();
        let key = first.key.clone();
        manager
            .session(&key)
            .set_label(Some("travel"))
            .await
            .unwrap();
        manager
            .session(&key)
            .set_override(SessionOverride::ThinkingLevel("high".into()))
            .await
            .unwrap();
        manager
            .store()
            .apply(&key, &mut |slot, _| {
                let entry = slot.as_mut().unwrap();
                entry.compaction_count = Some(4);
                entry.memory_flush_compaction_count = Some(4);
                entry.total_tokens = Some(150_000);
                entry.elevated_level = Some("on".into());
                entry
                    .extra
                    .insert("hostField".into(), serde_json::json!("kept"));
                Ok(())
            })
            .await
            .unwrap();
        manager
            .session(&key)
            .record_turn(TurnOutcome::aborted())
            .await
            .unwrap();

        let continued = manager.resolve(&dm("more")).await.unwrap();
        assert!(
            continued.system_sent && continued.aborted_last_run,
            "{}",
            harness.name
        );

        let reset = manager.resolve(&dm("/reset")).await.unwrap();
        let entry = &reset.session.entry;
        assert_eq!(reset.reason, Reason::ExplicitReset);
        assert!(!reset.system_sent && !reset.aborted_last_run);
        assert_ne!(entry.session_id, first.session_id());
        assert!(uuid::Uuid::parse_str(&entry.session_id).is_ok());
        assert_eq!(entry.compaction_count, Some(0));
        assert_eq!(entry.memory_flush_compaction_count, None);
        assert_eq!(entry.total_tokens, None);
        assert_eq!(entry.thinking_level, None);
        assert_eq!((entry.message_count, entry.turn_count), (Some(1), Some(0)));
        assert_eq!(
            entry.label.as_deref(),
            Some("travel"),
            "labels survive a reset"
        );
        assert_eq!(entry.elevated_level.as_deref(), Some("on"));
        assert_eq!(entry.extra["hostField"], "kept");
        assert_eq!(reset.previous.as_ref().unwrap().compaction_count, Some(4));
    }
}

#[tokio::test]
async fn a_model_hint_after_a_reset_sets_the_override() {
    let catalog = StaticModelCatalog::new([("anthropic", "claude-opus-4-6"), ("openai", "gpt-5")])
        .alias("opus", "anthropic", "claude-opus-4-6");
    for harness in harnesses_with(|builder| builder.model_catalog(catalog.clone())) {
        let manager = &harness.manager;
        let first = manager.resolve(&dm("hi")).await.unwrap();
        manager
            .session(&first.key)
            .set_override(SessionOverride::AuthProfile {
                profile: "work".into(),
                source: agent_sessions::store::AuthProfileSource::User,
            })
            .await
            .unwrap();
        let reset = manager
            .resolve(&dm("/new openai gpt-5 write a haiku"))
            .await
            .unwrap();
        assert_eq!(reset.body, "write a haiku");
        assert_eq!(reset.model_override, Some(ModelRef::new("openai", "gpt-5")));
        let entry = &reset.session.entry;
        assert_eq!(entry.provider_override.as_deref(), Some("openai"));
        assert_eq!(entry.model_override.as_deref(), Some("gpt-5"));
        assert_eq!(entry.auth_profile_override, None, "auth profile cleared");
        // Without a known model, the text is the body.
        let plain = manager.resolve(&dm("/new summarize")).await.unwrap();
        assert_eq!(
            (plain.body.as_str(), plain.model_override.as_ref()),
            ("summarize", None)
        );
        assert_eq!(plain.session.entry.model_override, None);
        // Overrides are cleared through the manager too.
        manager
            .session(&plain.key)
            .set_override(SessionOverride::Model(ModelRef::new(
                "anthropic",
                "claude-opus-4-6",
            )))
            .await
            .unwrap();
        let cleared = manager
            .session(&plain.key)
            .clear_override(OverrideKind::Model)
            .await
            .unwrap();
        assert_eq!(cleared.entry.model_override, None);
    }
}

#[derive(Debug)]
struct ScriptedDrift;

#[async_trait::async_trait]
impl DriftClassifier for ScriptedDrift {
    async fn classify(
        &self,
        _: &agent_sessions::StoredSession,
        message: &InboundMessage,
    ) -> agent_sessions::Result<DriftVerdict> {
        match message.body.as_str() {
            "sure: new topic" => Ok(DriftVerdict {
                drifted: true,
                confidence: 0.85,
            }),
            "unsure: new topic" => Ok(DriftVerdict {
                drifted: true,
                confidence: 0.79,
            }),
            "classifier down" => Err(Error::NotFound {
                key: SessionKey::parse("agent:main:main").unwrap(),
            }),
            _ => Ok(DriftVerdict {
                drifted: false,
                confidence: 0.99,
            }),
        }
    }
}

#[tokio::test]
async fn the_drift_gate_fires_at_its_threshold() {
    for harness in harnesses_with(|builder| builder.drift_classifier(ScriptedDrift, 0.8)) {
        let manager = &harness.manager;
        manager.resolve(&dm("weather?")).await.unwrap();
        for (body, reason) in [
            ("and tomorrow?", Reason::WithinTimeout),
            ("unsure: new topic", Reason::WithinTimeout),
            ("classifier down", Reason::WithinTimeout),
            ("sure: new topic", Reason::TopicDrift),
        ] {
            let resolution = manager.resolve(&dm(body)).await.unwrap();
            assert_eq!(resolution.reason, reason, "{}: {body}", harness.name);
        }
    }
}

#[tokio::test]
async fn the_drift_gate_is_off_by_default() {
    for harness in harnesses() {
        harness.manager.resolve(&dm("weather?")).await.unwrap();
        let next = harness
            .manager
            .resolve(&dm("sure: new topic"))
            .await
            .unwrap();
        assert_eq!(next.reason, Reason::WithinTimeout);
    }
}

#[tokio::test]
async fn the_entry_records_origin_group_metadata_and_route() {
    for harness in harnesses() {
        let message = whatsapp_group("+15550100", "@bot dinner?").mentioning_agent();
        let resolution = harness.manager.resolve(&message).await.unwrap();
        let entry = &resolution.session.entry;
        assert_eq!(
            resolution.key.as_str(),
            "agent:main:whatsapp:group:120363@g.us"
        );
        assert_eq!(entry.chat_type, Some(agent_sessions::ChatType::Group));
        assert_eq!(entry.channel.as_deref(), Some("whatsapp"));
        assert_eq!(entry.group_id.as_deref(), Some("120363@g.us"));
        assert_eq!(entry.subject.as_deref(), Some("Family"));
        assert_eq!(entry.display_name.as_deref(), Some("whatsapp:g-family"));
        let origin = entry.origin.as_ref().unwrap();
        assert_eq!(origin.label.as_deref(), Some("Family id:120363@g.us"));
        assert_eq!(origin.provider.as_deref(), Some("whatsapp"));
        assert_eq!(origin.from.as_deref(), Some("120363@g.us"));
        let route = entry.delivery_context.as_ref().unwrap();
        assert_eq!(
            (route.channel.as_deref(), route.to.as_deref()),
            (Some("whatsapp"), Some("120363@g.us"))
        );
        assert_eq!(entry.last_to.as_deref(), Some("120363@g.us"));
        assert_eq!(entry.last_message_preview.as_deref(), Some("@bot dinner?"));
        assert_eq!(entry.message_count, Some(1));
        assert_eq!(entry.source.as_ref().unwrap().kind.as_str(), "channel");
        assert!(entry.session_started_at.is_some());

        // A DM in a thread, then one outside it: the stale thread is dropped.
        let threaded = InboundMessage::direct("telegram", "7", "in a thread").with_thread(99);
        harness.manager.resolve(&threaded).await.unwrap();
        let plain = harness
            .manager
            .resolve(&InboundMessage::direct("telegram", "7", "plain"))
            .await
            .unwrap();
        assert_eq!(plain.session.entry.last_thread_id, None, "{}", harness.name);
    }
}

#[tokio::test]
async fn deletion_follows_seed_003() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let direct = manager.resolve(&dm("hi")).await.unwrap().key;
        let group = manager
            .resolve(&slack_channel("U1", "hi"))
            .await
            .unwrap()
            .key;

        manager
            .session(&direct)
            .set_status(SessionStatus::Running)
            .await
            .unwrap();
        assert!(matches!(
            manager
                .session(&direct)
                .delete(DeleteOptions::default())
                .await,
            Err(Error::DeleteRefused {
                reason: DeleteRefusal::Running,
                ..
            })
        ));
        manager
            .session(&direct)
            .set_status(SessionStatus::Idle)
            .await
            .unwrap();
        assert!(manager
            .session(&direct)
            .delete(DeleteOptions::default())
            .await
            .unwrap()
            .is_some());
        assert!(manager.session(&direct).get().await.unwrap().is_none());

        assert!(matches!(
            manager
                .session(&group)
                .delete(DeleteOptions::default())
                .await,
            Err(Error::DeleteRefused {
                reason: DeleteRefusal::SharedHistory,
                ..
            })
        ));
        assert!(
            manager.session(&group).get().await.unwrap().is_some(),
            "kept"
        );
        assert!(manager
            .session(&group)
            .delete(DeleteOptions {
                force: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            manager
                .session(&group)
                .delete(DeleteOptions::default())
                .await
                .unwrap(),
            None
        );
    }
}

#[tokio::test]
async fn prune_removes_old_sessions_and_reports_them() {
    for harness in harnesses() {
        let manager = &harness.manager;
        for peer in ["1", "2", "3", "4"] {
            manager
                .resolve(&InboundMessage::direct("telegram", peer, "hi"))
                .await
                .unwrap();
            harness.clock.advance(24 * HOUR);
        }
        // Activity at days 0, 1, 2, 3; now is day 4. Peer 1 is running.
        let running = key("agent:main:telegram:dm:1");
        manager
            .session(&running)
            .set_status(SessionStatus::Running)
            .await
            .unwrap();

        let old = PruneOptions::older_than(36 * HOUR);
        let dry = manager.prune(&old.clone().dry_run()).await.unwrap();
        let names = |sessions: &[StoredSession]| {
            sessions
                .iter()
                .map(|s| s.key.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&dry),
            ["agent:main:telegram:dm:3", "agent:main:telegram:dm:2"],
            "{}: idle over 36 hours, newest first",
            harness.name
        );
        assert_eq!(
            manager.list(&ListFilter::new()).await.unwrap().len(),
            4,
            "dry run removes nothing"
        );

        let kept_newest = manager
            .prune(&PruneOptions::default().keep_newest(2).dry_run())
            .await
            .unwrap();
        assert_eq!(
            names(&kept_newest),
            ["agent:main:telegram:dm:2"],
            "running sessions are never pruned"
        );

        let removed = manager.prune(&old).await.unwrap();
        assert_eq!(
            names(&removed),
            ["agent:main:telegram:dm:3", "agent:main:telegram:dm:2"]
        );
        let left = manager.list(&ListFilter::new()).await.unwrap();
        assert_eq!(
            names(&left),
            ["agent:main:telegram:dm:4", "agent:main:telegram:dm:1"]
        );
    }
}

#[tokio::test]
async fn labels_are_validated() {
    for harness in harnesses() {
        let session = harness.manager.resolve(&dm("hi")).await.unwrap().key;
        for bad in ["", "   ", &"x".repeat(65)] {
            assert!(matches!(
                harness.manager.session(&session).set_label(Some(bad)).await,
                Err(Error::InvalidLabel { .. })
            ));
        }
        let ok = harness
            .manager
            .session(&session)
            .set_label(Some("  Trip to Rome  "))
            .await
            .unwrap();
        assert_eq!(ok.entry.label.as_deref(), Some("Trip to Rome"));
        let cleared = harness
            .manager
            .session(&session)
            .set_label(None)
            .await
            .unwrap();
        assert_eq!(cleared.entry.label, None);
        assert!(matches!(
            harness
                .manager
                .session(&key("agent:main:nobody"))
                .set_label(Some("x"))
                .await,
            Err(Error::NotFound { .. })
        ));
    }
}

#[tokio::test]
async fn threads_fork_from_their_parent() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let parent = manager
            .resolve(&slack_channel("U1", "release plan"))
            .await
            .unwrap();
        let thread = manager
            .session(&parent.key)
            .fork_thread("1700.42")
            .await
            .unwrap();
        assert_eq!(
            thread.key.as_str(),
            "agent:main:slack:channel:c1:thread:1700.42"
        );
        let origin = thread.entry.forked_from.as_ref().unwrap();
        assert_eq!(origin.session_key, parent.key.as_str());
        assert_eq!(origin.session_id, parent.session_id());
        assert_eq!(thread.entry.last_to.as_deref(), Some("C1"));
        assert_eq!(thread.entry.message_count, Some(0));

        let first = manager
            .resolve(&slack_channel("U1", "in the thread").with_thread("1700.42"))
            .await
            .unwrap();
        assert_eq!(
            (first.decision, first.reason),
            (Decision::Continue, Reason::FirstMessage)
        );
        assert_eq!(first.session_id(), thread.entry.session_id);

        // A thread message naming its parent forks when its session is new.
        let forked = manager
            .resolve(
                &slack_channel("U2", "other thread")
                    .with_thread("1800.1")
                    .with_parent_session(parent.key.as_str()),
            )
            .await
            .unwrap();
        assert!(forked.is_new());
        assert_eq!(
            forked
                .session
                .entry
                .forked_from
                .as_ref()
                .unwrap()
                .session_id,
            parent.session_id()
        );
    }
}

#[tokio::test]
async fn subagents_record_who_spawned_them() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let parent = manager.resolve(&dm("research this")).await.unwrap();
        let child = manager
            .session(&parent.key)
            .spawn_subagent(&AgentId::new("researcher").unwrap(), Some("web search"))
            .await
            .unwrap();
        assert!(child.key.is_subagent());
        assert_eq!(child.key.agent_id(), Some("researcher"));
        assert_eq!(child.entry.spawned_by.as_deref(), Some(parent.key.as_str()));
        assert_eq!(child.entry.label.as_deref(), Some("web search"));

        let nested = manager
            .session(&child.key)
            .spawn_subagent(&AgentId::new("researcher").unwrap(), None)
            .await
            .unwrap();
        assert_eq!(nested.key.subagent_depth(), 2);

        let task =
            InboundMessage::new("internal", "find sources").with_session_key(child.key.as_str());
        let first = manager.resolve(&task).await.unwrap();
        assert_eq!(
            (first.key.clone(), first.reason),
            (child.key.clone(), Reason::FirstMessage)
        );
    }
}

#[tokio::test]
async fn sources_open_and_reopen_sessions() {
    for harness in harnesses() {
        let manager = &harness.manager;
        let source = SessionSource::cli("laptop");
        let opened = manager.open(&source, None).await.unwrap();
        assert_eq!(opened.key.as_str(), "agent:main:cli:laptop");
        assert_eq!(
            (opened.decision, opened.reason),
            (Decision::New, Reason::NoSession)
        );
        let again = manager.open(&source, None).await.unwrap();
        assert_eq!(
            (again.decision, again.reason),
            (Decision::Continue, Reason::FirstMessage)
        );
        assert_eq!(again.session_id(), opened.session_id());

        manager
            .session(&opened.key)
            .set_status(SessionStatus::Inactive)
            .await
            .unwrap();
        let reopened = manager.open(&source, None).await.unwrap();
        assert_eq!(reopened.session.entry.status, Some(SessionStatus::Idle));
        assert_eq!(reopened.session_id(), opened.session_id());

        manager.session(&opened.key).close().await.unwrap();
        let fresh = manager.open(&source, None).await.unwrap();
        assert_eq!(
            (fresh.decision, fresh.reason),
            (Decision::New, Reason::SessionClosed)
        );
        assert_eq!(
            fresh.session.entry.source.as_ref().unwrap().name.as_deref(),
            Some("laptop")
        );

        assert!(manager
            .open(
                &SessionSource::channel("telegram", agent_sessions::ChatType::Direct),
                None
            )
            .await
            .is_err());
    }
}

/// Reopening a session keeps its original source and merges the metadata the new
/// opening brings (a chat id, a thread): new keys are added, newer values win, and
/// nothing the session had is lost.
#[tokio::test]
async fn reopening_merges_the_new_metadata_into_the_original_source() {
    let with_meta = |source: SessionSource, meta: serde_json::Value| {
        let mut source = source;
        source.extra = meta.as_object().unwrap().clone();
        source
    };
    for harness in harnesses() {
        let manager = &harness.manager;
        let first = with_meta(
            SessionSource::web("tablet"),
            serde_json::json!({"deviceName": "kitchen", "theme": "dark"}),
        );
        let opened = manager.open(&first, None).await.unwrap();
        manager
            .session(&opened.key)
            .set_status(SessionStatus::Inactive)
            .await
            .unwrap();
        let mut second = with_meta(
            SessionSource::web("tablet"),
            serde_json::json!({"theme": "light", "locale": "de-DE"}),
        );
        second.interactive = false;
        let reopened = manager.open(&second, None).await.unwrap();
        assert_eq!(
            reopened.session_id(),
            opened.session_id(),
            "{}",
            harness.name
        );
        let source = reopened.session.entry.source.clone().unwrap();
        assert!(
            source.interactive,
            "{}: the original source stays",
            harness.name
        );
        assert_eq!(source.name.as_deref(), Some("tablet"), "{}", harness.name);
        assert_eq!(
            serde_json::Value::Object(source.extra),
            serde_json::json!({"deviceName": "kitchen", "theme": "light", "locale": "de-DE"}),
            "{}: metadata merged",
            harness.name
        );
        let stored = manager.session(&opened.key).get().await.unwrap().unwrap();
        assert_eq!(
            stored.entry.source, reopened.session.entry.source,
            "{}",
            harness.name
        );
    }
}

#[tokio::test]
async fn an_inactive_session_is_reopened_by_a_message() {
    for harness in harnesses() {
        let first = harness.manager.resolve(&dm("hi")).await.unwrap();
        harness
            .manager
            .session(&first.key)
            .set_status(SessionStatus::Inactive)
            .await
            .unwrap();
        let next = harness.manager.resolve(&dm("back")).await.unwrap();
        assert_eq!(next.reason, Reason::WithinTimeout);
        assert_eq!(next.session.entry.status, Some(SessionStatus::Idle));
    }
}

#[tokio::test]
async fn reset_phrases_and_authorisation_are_configurable() {
    let triggers = ResetTriggers::clawos()
        .direct_peers_may_reset(false)
        .allow(["telegram:42"]);
    for harness in harnesses_with(|builder| builder.reset_triggers(triggers.clone())) {
        harness.manager.resolve(&dm("hi")).await.unwrap();
        let reset = harness.manager.resolve(&dm("Start over")).await.unwrap();
        assert_eq!(reset.reason, Reason::ExplicitReset, "allow-listed sender");
        let stranger = InboundMessage::direct("telegram", "77", "hi");
        harness.manager.resolve(&stranger).await.unwrap();
        let ignored = harness
            .manager
            .resolve(&InboundMessage::direct("telegram", "77", "start over"))
            .await
            .unwrap();
        assert_eq!(
            ignored.reason,
            Reason::WithinTimeout,
            "not allowed: an ordinary message"
        );
        assert_eq!(ignored.body, "start over");
        assert!(!ignored.reset_triggered);
    }
}

#[tokio::test]
async fn explicit_keys_are_used_as_given() {
    for harness in harnesses() {
        let message = InboundMessage::new("webchat", "hi").with_session_key("Hook:Deploy-42");
        let resolution = harness.manager.resolve(&message).await.unwrap();
        assert_eq!(resolution.key.as_str(), "agent:main:hook:deploy-42");
        let bad = InboundMessage::new("webchat", "hi").with_session_key("agent:main:a::b");
        assert!(matches!(
            harness.manager.resolve(&bad).await,
            Err(Error::InvalidKey { .. })
        ));
    }
}

#[tokio::test]
async fn reset_starts_a_new_session_and_archives_the_old_transcript() {
    use agent_sessions::manager::LogMessage;
    use agent_sessions::transcript::{InMemoryTranscriptStore, TranscriptExport};
    let transcripts = InMemoryTranscriptStore::new();
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(transcripts.clone())
        .build()
        .unwrap();
    let first = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    manager
        .session(&first.key)
        .log_message(LogMessage::inbound("hi"))
        .await
        .unwrap();
    manager
        .session(&first.key)
        .set_label(Some("Trip"))
        .await
        .unwrap();

    let reset = manager.session(&first.key).reset().await.unwrap();
    assert_ne!(reset.entry.session_id, first.session_id());
    assert_eq!(reset.entry.label.as_deref(), Some("Trip"));
    assert_eq!(reset.entry.message_count, Some(0));
    let names: Vec<String> = transcripts
        .transcript_names(None)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_eq!(names.len(), 1);
    assert!(
        names[0].starts_with(&format!("{}.jsonl.reset.", first.session_id())),
        "{names:?}"
    );
    let next = manager
        .resolve(&InboundMessage::direct("telegram", "42", "again"))
        .await
        .unwrap();
    assert_eq!(next.session_id(), reset.entry.session_id);
    assert_eq!(next.reason, Reason::FirstMessage);

    let missing = SessionKey::parse("agent:main:telegram:dm:nobody").unwrap();
    assert!(matches!(
        manager.session(&missing).reset().await,
        Err(Error::NotFound { .. })
    ));
}

/// A status change is one write of the store, even when it creates the session's
/// transcript: the backup then holds the state from before the call.
#[tokio::test]
async fn closing_a_session_writes_its_store_once_so_the_backup_is_the_state_before() {
    use agent_sessions::store::FileTranscriptStore;
    use agent_sessions::transcript::{Offset, TranscriptRef, TranscriptStore};
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::builder(JsonFileStore::new(dir.path()))
        .transcripts(FileTranscriptStore::new(dir.path()))
        .build()
        .unwrap();
    let key = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap()
        .key;
    let store_file = agent_sessions::store::store_path(dir.path(), &AgentId::main());
    let before = std::fs::read(&store_file).unwrap();
    assert!(manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .is_none());

    let closed = manager.session(&key).close().await.unwrap();
    assert_eq!(
        std::fs::read(store_file.with_extension("json.bak")).unwrap(),
        before,
        "the backup is the store as it was before the call"
    );
    // The transcript was created and recorded in that same write, with the event.
    let file = closed
        .entry
        .session_file
        .clone()
        .expect("the transcript is recorded");
    let transcript = TranscriptRef::of(&key, &closed.entry, &AgentId::main());
    assert_eq!(transcript.session_file.as_deref(), Some(file.as_str()));
    let read = FileTranscriptStore::new(dir.path())
        .read(&transcript, Offset::START)
        .await
        .unwrap();
    assert_eq!(
        read.events.len(),
        1,
        "the status change is in the event log"
    );
}

/// A state directory named by a relative path: every location the store records is
/// absolute, so the store, the transcripts and `doctor` accept their own files from
/// any working directory.
#[tokio::test]
async fn a_relative_state_directory_records_absolute_transcript_paths() {
    use agent_sessions::manager::LogMessage;
    use agent_sessions::ops::{examine, DoctorOptions};
    use agent_sessions::store::FileTranscriptStore;
    let dir = tempfile::tempdir_in(".").unwrap();
    // A directory in the working directory, named by its bare name.
    let relative = std::path::PathBuf::from(dir.path().file_name().unwrap());
    assert!(relative.is_relative(), "{}", relative.display());
    let manager = SessionManager::builder(JsonFileStore::new(&relative))
        .transcripts(FileTranscriptStore::new(&relative))
        .build()
        .unwrap();
    let key = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap()
        .key;
    manager
        .session(&key)
        .log_message(LogMessage::inbound("hi"))
        .await
        .unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    let file = entry.session_file.clone().unwrap();
    assert!(std::path::Path::new(&file).is_absolute(), "{file}");
    manager.session(&key).close().await.unwrap();
    manager.session(&key).reset().await.unwrap();
    assert!(
        !std::path::Path::new(&file).exists(),
        "the old transcript was archived"
    );
    let report = examine(&relative, &DoctorOptions::default()).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
}

#[tokio::test]
async fn is_expired_says_whether_the_next_message_starts_a_new_session() {
    for h in harnesses() {
        let group = InboundMessage::group("telegram", "-100", "42", "hi").mentioning_agent();
        let entry = h.manager.resolve(&group).await.unwrap().entry().clone();
        assert!(!h.manager.is_expired(&group, &entry).unwrap(), "{}", h.name);
        // Groups reset after 2 idle hours.
        h.clock.advance(2 * HOUR + MINUTE);
        assert!(h.manager.is_expired(&group, &entry).unwrap(), "{}", h.name);
        let next = h.manager.resolve(&group).await.unwrap();
        assert_eq!(next.decision, Decision::New, "{}", h.name);
        assert!(
            !h.manager.is_expired(&group, next.entry()).unwrap(),
            "{}",
            h.name
        );

        let key = next.key.clone();
        let closed = h.manager.session(&key).close().await.unwrap();
        assert!(
            h.manager.is_expired(&group, &closed.entry).unwrap(),
            "{}",
            h.name
        );
    }
}

/// A close whose status line cannot be logged (a full disk, a lost database) fails and
/// leaves the session as it was; closing again does it whole, line and all.
#[tokio::test]
async fn a_close_whose_log_line_fails_changes_nothing() {
    use agent_sessions::store::Backend;
    use agent_sessions::transcript::{Offset, TranscriptRef};
    use std::sync::atomic::{AtomicBool, Ordering};

    let stores = stores::Stores::new("close_fail");
    for url in &stores.urls {
        let backend = Backend::open(url).await.unwrap();
        let failing = Arc::new(AtomicBool::new(false));
        let manager = flaky::flaky_manager(&backend, &failing, false);
        let turn = manager
            .turn(&InboundMessage::direct("sms", "+100", "hello"))
            .await
            .unwrap();
        let key = turn.key().clone();
        turn.complete("Hi.").await.unwrap();
        let session = manager.session(&key);
        let before = session.get().await.unwrap().unwrap().entry;
        let transcript = TranscriptRef::of(&key, &before, &agent_sessions::AgentId::main());
        let lines = || async {
            backend
                .transcripts()
                .read(&transcript, Offset::START)
                .await
                .unwrap()
                .events
                .len()
        };
        let logged = lines().await;

        failing.store(true, Ordering::SeqCst);
        assert!(session.close().await.is_err(), "{url}");
        failing.store(false, Ordering::SeqCst);
        let after = session.get().await.unwrap().unwrap().entry;
        assert_eq!(after.status, before.status, "{url}: still open");
        assert_eq!(after.closed_at, None, "{url}");
        assert_eq!(lines().await, logged, "{url}");

        let closed = session.close().await.unwrap();
        assert_eq!(closed.entry.status, Some(SessionStatus::Closed), "{url}");
        assert_eq!(lines().await, logged + 1, "{url}: its status line");
    }
    stores.finish().await;
}
