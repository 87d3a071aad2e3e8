//! A manager built from OpenClaw's `openclaw.json` behaves as the gateway it configures:
//! every setting read, each checked through what the manager then does.

use std::path::Path;
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::freshness::{StaleReason, Zone};
use agent_sessions::ops::openclaw::{OpenClawConfig, OpenClawEnv};
use agent_sessions::prelude::*;
use agent_sessions::{Error, Reason};
use chrono::{DateTime, Utc};

fn utc(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

/// A state directory holding `openclaw.json` with `text`.
fn gateway(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("openclaw.json"), text).unwrap();
    dir
}

/// The gateway's configuration, read with no environment.
fn config_of(dir: &Path) -> OpenClawConfig {
    OpenClawConfig::load_with_env(dir, &OpenClawEnv::default()).unwrap()
}

#[tokio::test]
async fn session_and_agent_settings_decide_the_key() {
    let dm = || InboundMessage::direct("telegram", "42", "hi");
    // (openclaw.json, message) → key
    let cases: Vec<(&str, InboundMessage, &str)> = vec![
        ("{}", dm(), "agent:main:main"),
        ("{ session: { scope: 'global' } }", dm(), "global"),
        ("{ session: { scope: 'per-sender' } }", dm(), "agent:main:main"),
        ("{ session: { dmScope: 'main' } }", dm(), "agent:main:main"),
        ("{ session: { dmScope: 'per-peer' } }", dm(), "agent:main:dm:42"),
        (
            "{ session: { dmScope: 'per-channel-peer' } }",
            dm(),
            "agent:main:telegram:dm:42",
        ),
        (
            "{ session: { dmScope: 'per-account-channel-peer' } }",
            dm().with_account("Work"),
            "agent:main:telegram:work:dm:42",
        ),
        ("{ session: { mainKey: ' Home ' } }", dm(), "agent:main:home"),
        ("{ session: { mainKey: '' } }", dm(), "agent:main:main"),
        (
            "{ session: { dmScope: 'per-peer', identityLinks: { Alice: ['telegram:42', 'whatsapp:+1555'] } } }",
            dm(),
            "agent:main:dm:alice",
        ),
        (
            "{ session: { dmScope: 'per-peer', identityLinks: { alice: ['whatsapp:42'] } } }",
            dm(),
            "agent:main:dm:42",
        ),
        (
            "{ session: { dmScope: 'per-peer' } }",
            InboundMessage::group("whatsapp", "G1", "u1", "hi"),
            "agent:main:whatsapp:group:g1",
        ),
        ("{ agents: { list: [{ id: 'ops' }] } }", dm(), "agent:ops:main"),
        (
            "{ agents: { list: [{ id: 'ops' }, { id: 'Support Bot', default: true }, { id: 'x', default: true }] } }",
            dm(),
            "agent:support-bot:main",
        ),
        ("{ agents: { list: [] } }", dm(), "agent:main:main"),
        (
            "{ session: { scope: 'global' }, agents: { list: [{ id: 'ops' }] } }",
            InboundMessage::group("slack", "C1", "u1", "hi"),
            "global",
        ),
    ];
    for (text, message, expected) in cases {
        let dir = gateway(text);
        let manager = SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .build()
            .unwrap();
        let resolution = manager.resolve(&message).await.unwrap();
        assert_eq!(resolution.key.as_str(), expected, "{text}");
        assert_eq!(
            manager
                .store()
                .get(&resolution.key)
                .await
                .unwrap()
                .map(|s| s.entry.session_id),
            Some(resolution.session_id().to_owned()),
            "{text}: the session is stored"
        );
    }
}

#[tokio::test]
async fn reset_settings_decide_when_a_session_goes_stale() {
    let dm = |channel: &str| InboundMessage::direct(channel, "42", "hi");
    let group = InboundMessage::group("slack", "C1", "u1", "hi");
    let fresh = Reason::WithinTimeout;
    let daily = Reason::Timeout(StaleReason::Daily);
    let idle = Reason::Timeout(StaleReason::Idle);
    // (openclaw.json, message, first message at, next message at) → the next one's reason
    let cases: Vec<(&str, InboundMessage, &str, &str, Reason)> = vec![
        // OpenClaw's default: daily at 04:00.
        ("{}", dm("telegram"), "2026-03-10T03:00:00Z", "2026-03-10T03:59:59Z", fresh),
        ("{}", dm("telegram"), "2026-03-10T03:00:00Z", "2026-03-10T04:00:00Z", daily),
        (
            "{ session: { reset: { mode: 'daily', atHour: 6 } } }",
            dm("telegram"),
            "2026-03-10T05:00:00Z",
            "2026-03-10T05:59:00Z",
            fresh,
        ),
        (
            "{ session: { reset: { mode: 'daily', atHour: 6 } } }",
            dm("telegram"),
            "2026-03-10T05:00:00Z",
            "2026-03-10T06:00:00Z",
            daily,
        ),
        // atHour is clamped and floored, as OpenClaw applies it.
        (
            "{ session: { reset: { atHour: 30 } } }",
            dm("telegram"),
            "2026-03-10T22:00:00Z",
            "2026-03-10T22:59:00Z",
            fresh,
        ),
        (
            "{ session: { reset: { atHour: 30 } } }",
            dm("telegram"),
            "2026-03-10T22:00:00Z",
            "2026-03-10T23:00:00Z",
            daily,
        ),
        (
            "{ session: { reset: { atHour: 5.9 } } }",
            dm("telegram"),
            "2026-03-10T04:30:00Z",
            "2026-03-10T05:00:00Z",
            daily,
        ),
        (
            "{ session: { reset: { mode: 'idle', idleMinutes: 30 } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:30:00Z",
            fresh,
        ),
        (
            "{ session: { reset: { mode: 'idle', idleMinutes: 30.9 } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:30:01Z",
            idle,
        ),
        // Idle mode without minutes: OpenClaw's 60.
        (
            "{ session: { reset: { mode: 'idle' } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T11:00:01Z",
            idle,
        ),
        // The legacy idleMinutes alone means idle mode.
        (
            "{ session: { idleMinutes: 15 } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:16:00Z",
            idle,
        ),
        // With any resetByType (even empty), the legacy idleMinutes is an extra idle
        // window on the daily default, not idle mode.
        (
            "{ session: { idleMinutes: 15, resetByType: {} } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:14:00Z",
            fresh,
        ),
        (
            "{ session: { idleMinutes: 15, resetByType: {} } }",
            dm("telegram"),
            "2026-03-10T03:50:00Z",
            "2026-03-10T04:00:00Z",
            daily,
        ),
        (
            "{ session: { idleMinutes: 15, resetByType: {} } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:16:00Z",
            idle,
        ),
        // By type: groups idle after 10 minutes, DMs keep the daily default.
        (
            "{ session: { resetByType: { group: { mode: 'idle', idleMinutes: 10 } } } }",
            group.clone(),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:11:00Z",
            idle,
        ),
        (
            "{ session: { resetByType: { group: { mode: 'idle', idleMinutes: 10 } } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:11:00Z",
            fresh,
        ),
        // The older `dm` name, and `direct` winning over it.
        (
            "{ session: { resetByType: { dm: { mode: 'idle', idleMinutes: 5 } } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:06:00Z",
            idle,
        ),
        (
            "{ session: { resetByType: { dm: { mode: 'idle', idleMinutes: 5 }, direct: { mode: 'idle', idleMinutes: 50 } } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:06:00Z",
            fresh,
        ),
        // By channel, over type and default.
        (
            "{ session: { resetByType: { direct: { mode: 'idle', idleMinutes: 500 } }, resetByChannel: { WhatsApp: { mode: 'idle', idleMinutes: 5 } } } }",
            dm("whatsapp"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:06:00Z",
            idle,
        ),
        (
            "{ session: { resetByChannel: { whatsapp: { mode: 'idle', idleMinutes: 5 } } } }",
            dm("telegram"),
            "2026-03-10T10:00:00Z",
            "2026-03-10T10:06:00Z",
            fresh,
        ),
    ];
    for (text, message, first, next, expected) in cases {
        let dir = gateway(text);
        let mut config = config_of(dir.path());
        // Daily boundaries are in host time, as in OpenClaw; pin it for the test.
        config.reset.time_zone = Zone::Utc;
        let clock = ManualClock::new(utc(first));
        let manager = config
            .manager_builder()
            .clock(clock.clone())
            .build()
            .unwrap();
        manager.resolve(&message).await.unwrap();
        clock.set(utc(next));
        let resolution = manager.resolve(&message).await.unwrap();
        assert_eq!(resolution.reason, expected, "{text} {first} → {next}");
    }
}

#[tokio::test]
async fn reset_triggers_come_from_the_config() {
    // (openclaw.json, text) → resets?
    let cases = [
        ("{}", "/new", true),
        ("{}", "/reset plan", true),
        ("{ session: { resetTriggers: ['/fresh'] } }", "/fresh", true),
        (
            "{ session: { resetTriggers: ['/fresh'] } }",
            "/FRESH start",
            true,
        ),
        ("{ session: { resetTriggers: ['/fresh'] } }", "/new", false),
        ("{ session: { resetTriggers: [] } }", "/new", true),
        ("{ session: { resetTriggers: ['  '] } }", "/reset", true),
    ];
    for (text, body, resets) in cases {
        let dir = gateway(text);
        let manager = SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .build()
            .unwrap();
        manager
            .resolve(&InboundMessage::direct("telegram", "42", "hello"))
            .await
            .unwrap();
        let resolution = manager
            .resolve(&InboundMessage::direct("telegram", "42", body))
            .await
            .unwrap();
        assert_eq!(
            resolution.reason == Reason::ExplicitReset,
            resets,
            "{text} {body}"
        );
    }
}

#[tokio::test]
async fn the_send_policy_decides_whether_replies_go_out() {
    let policy = "{ session: { sendPolicy: { default: 'deny', rules: [
        { action: 'allow', match: { channel: 'telegram', chatType: 'direct' } },
        { action: 'deny', match: { keyPrefix: 'agent:main:slack:channel:secret' } },
        { action: 'allow', match: { channel: 'slack' } },
        { action: 'allow', match: { rawKeyPrefix: 'agent:main:discord:group:ok' } },
      ] } } }";
    // (openclaw.json, message) → replies sent?
    let cases = vec![
        ("{}", InboundMessage::direct("telegram", "42", "hi"), true),
        (policy, InboundMessage::direct("telegram", "42", "hi"), true),
        (policy, InboundMessage::direct("whatsapp", "42", "hi"), false),
        (
            policy,
            InboundMessage::group("slack", "C1", "u1", "hi").in_channel().mentioning_agent(),
            true,
        ),
        (
            policy,
            InboundMessage::group("slack", "secret", "u1", "hi").in_channel().mentioning_agent(),
            false,
        ),
        (
            policy,
            InboundMessage::group("discord", "ok1", "u1", "hi").mentioning_agent(),
            true,
        ),
        (
            policy,
            InboundMessage::group("discord", "other", "u1", "hi").mentioning_agent(),
            false,
        ),
        (
            "{ session: { sendPolicy: { rules: [{ action: 'deny', match: { chatType: 'group' } }] } } }",
            InboundMessage::group("telegram", "-1", "u1", "hi").mentioning_agent(),
            false,
        ),
        (
            "{ session: { sendPolicy: { rules: [{ action: 'deny', match: { keyPrefix: 'agent:main:a', rawKeyPrefix: 'agent:main:b' } }] } } }",
            InboundMessage::direct("telegram", "42", "hi"),
            true,
        ),
    ];
    for (text, message, sent) in cases {
        let dir = gateway(text);
        let manager = SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .build()
            .unwrap();
        let turn = manager.turn(&message).await.unwrap();
        let key = turn.key().clone();
        let replies = turn.complete("hello").await.unwrap();
        assert_eq!(!replies.is_empty(), sent, "{text} {key}");
    }
}

#[tokio::test]
async fn the_group_history_limit_bounds_the_context() {
    // (openclaw.json) → the earlier messages the model sees
    let cases: [(&str, &[&str]); 4] = [
        ("{}", &["one", "two", "three"]),
        (
            "{ messages: { groupChat: { historyLimit: 2 } } }",
            &["two", "three"],
        ),
        (
            "{ messages: { groupChat: { historyLimit: 2.7 } } }",
            &["two", "three"],
        ),
        ("{ messages: { groupChat: { historyLimit: 0 } } }", &[]),
    ];
    for (text, expected) in cases {
        let dir = gateway(text);
        let manager = SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .build()
            .unwrap();
        for body in ["one", "two", "three"] {
            let message = InboundMessage::group("telegram", "-100", "u1", body);
            let turn = manager.turn(&message).await.unwrap();
            assert!(turn.input().is_none(), "not addressed: kept as history");
            turn.complete("unused").await.unwrap();
        }
        let message = InboundMessage::group("telegram", "-100", "u1", "now").mentioning_agent();
        let turn = manager.turn(&message).await.unwrap();
        let text = turn.input().unwrap().to_owned();
        let seen: Vec<&str> = ["one", "two", "three"]
            .into_iter()
            .filter(|body| text.contains(&format!(": {body}\n")))
            .collect();
        assert_eq!(seen, expected, "{text}");
    }
}

#[tokio::test]
async fn the_envelope_time_zone_writes_event_times() {
    let at = utc("2026-01-10T05:00:00Z");
    let local = at
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string();
    // (openclaw.json) → the time written
    let cases = [
        ("{}", local.clone()),
        (
            "{ agents: { defaults: { envelopeTimezone: 'local' } } }",
            local.clone(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'UTC' } } }",
            "2026-01-10T05:00:00Z".into(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'gmt' } } }",
            "2026-01-10T05:00:00Z".into(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'Asia/Tokyo' } } }",
            "2026-01-10 14:00:00 JST".into(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'user', userTimezone: 'Europe/Berlin' } } }",
            "2026-01-10 06:00:00 CET".into(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'user' } } }",
            local.clone(),
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 'Mars/Olympus' } } }",
            local.clone(),
        ),
    ];
    for (text, time) in cases {
        let dir = gateway(text);
        let manager = SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .clock(ManualClock::new(at))
            .build()
            .unwrap();
        let message = InboundMessage::direct("telegram", "42", "hi");
        manager
            .session(&manager.key_for(&message).unwrap())
            .enqueue_system_event("Model switched.")
            .await
            .unwrap();
        let turn = manager.turn(&message).await.unwrap();
        let text_seen = turn.input().unwrap().to_owned();
        assert!(
            text_seen.starts_with(&format!("System: [{time}] Model switched.")),
            "{text}: {text_seen}"
        );
    }
}

#[tokio::test]
async fn the_store_setting_places_the_sessions_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display();
    // (session.store) → the file `agent:ops:…` is written to
    let cases = [
        (
            format!("{root}/custom/{{agentId}}/sessions.json"),
            "custom/ops/sessions.json",
        ),
        (
            format!("{root}/custom/sessions-{{agentId}}.json"),
            "custom/sessions-ops.json",
        ),
        (format!("{root}/shared.json"), "shared.json"),
        (String::new(), "state/agents/ops/sessions/sessions.json"),
    ];
    for (store, file) in cases {
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(
            state.join("openclaw.json"),
            format!("{{ session: {{ store: {store:?} }} }}"),
        )
        .unwrap();
        let manager = SessionManager::connect_openclaw(&state)
            .await
            .unwrap()
            .build()
            .unwrap();
        let resolution = manager
            .resolve(&InboundMessage::direct("telegram", "42", "hi").with_agent("ops"))
            .await
            .unwrap();
        assert_eq!(resolution.key.as_str(), "agent:ops:main");
        let written = std::fs::read_to_string(dir.path().join(file)).unwrap();
        assert!(written.contains(resolution.session_id()), "{store}");
        std::fs::remove_dir_all(dir.path().join("state")).unwrap();
        let _ = std::fs::remove_dir_all(dir.path().join("custom"));
        let _ = std::fs::remove_file(dir.path().join("shared.json"));
    }
}

#[test]
fn the_cache_time_to_live_comes_from_the_environment() {
    let dir = gateway("{}");
    // (OPENCLAW_SESSION_CACHE_TTL_MS) → the store's cache time to live
    let cases = [
        (None, Duration::from_secs(45)),
        (Some("0"), Duration::ZERO),
        (Some("2500"), Duration::from_millis(2500)),
        (Some("-1"), Duration::from_secs(45)),
        (Some("soon"), Duration::from_secs(45)),
    ];
    for (value, ttl) in cases {
        let env = OpenClawEnv::from_vars(value.map(|v| ("OPENCLAW_SESSION_CACHE_TTL_MS", v)));
        let config = OpenClawConfig::load_with_env(dir.path(), &env).unwrap();
        assert_eq!(config.cache_ttl, ttl, "{value:?}");
        assert_eq!(config.json_options().cache_ttl, ttl, "{value:?}");
    }
}

#[test]
fn json5_as_people_write_it_is_read() {
    // (openclaw.json) → it says per-peer
    let cases = [
        r#"{"session": {"dmScope": "per-peer"}}"#,
        "{ session: { dmScope: 'per-peer' } }",
        "// a comment\n{ session: { dmScope: \"per-peer\", }, }",
        "/* block\n comment */ { session /* here too */ : { dmScope: 'per-peer' } }",
        "{\n  session: {\n    dmScope: 'per-peer', // trailing comma and comment\n    idleMinutes: 0x3C,\n  },\n}",
        "\u{feff}{ session: { dmScope: 'per-peer' } }",
    ];
    for text in cases {
        let config = OpenClawConfig::from_json5_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(config.dm_scope, DmScope::PerPeer, "{text}");
    }
}

#[test]
fn dollar_signs_that_are_not_substitutions_are_text() {
    // (value of session.mainKey) — none of them is a `${VAR}` OpenClaw substitutes.
    for main_key in ["price-$5", "$${ESCAPED}", "${lower}", "${}", "${UNCLOSED"] {
        let text = format!("{{ session: {{ mainKey: '{main_key}' }} }}");
        let config = OpenClawConfig::from_json5_str(&text);
        assert!(
            !matches!(&config, Err(e) if e.to_string().contains("substitution")),
            "{main_key}: {config:?}"
        );
    }
}

#[test]
fn invalid_values_name_their_setting() {
    // (openclaw.json) → (the setting named, what the message says)
    let cases = [
        (
            "{ session: { dmScope: 'per-user' } }",
            "session.dmScope",
            "expected one of main, per-peer, per-channel-peer, per-account-channel-peer, found \"per-user\"",
        ),
        ("{ session: { scope: 'everyone' } }", "session.scope", "expected one of per-sender, global"),
        // Loader features OpenClaw has and this reader does not: refused, never misread.
        ("{ $include: './session.json5' }", "$include", "`$include` is not supported"),
        (
            "{ session: { store: '${STATE}/{agentId}.json' } }",
            "session.store",
            "`${VAR}` substitution is not supported",
        ),
        (
            "{ agents: { list: [{ id: 'a', prompt: '${HOME_DIR}' }] } }",
            "agents.list[0].prompt",
            "`${VAR}` substitution is not supported",
        ),
        ("{ session: { scope: 1 } }", "session.scope", "expected one of per-sender, global, found 1"),
        ("{ session: 'yes' }", "session", "expected an object, found a string"),
        ("{ session: { mainKey: 7 } }", "session.mainKey", "expected a string, found a number"),
        ("{ session: { mainKey: 'main:thread:1' } }", "session.mainKey", "structural key segment"),
        (
            "{ session: { identityLinks: { alice: 'telegram:1' } } }",
            "session.identityLinks.alice",
            "expected an array, found a string",
        ),
        (
            "{ session: { identityLinks: { alice: ['telegram:1', 2] } } }",
            "session.identityLinks.alice[1]",
            "expected a string, found a number",
        ),
        ("{ session: { reset: { mode: 'weekly' } } }", "session.reset.mode", "expected one of daily, idle"),
        ("{ session: { reset: [] } }", "session.reset", "expected an object, found an array"),
        (
            "{ session: { resetByType: { group: { mode: 'never' } } } }",
            "session.resetByType.group.mode",
            "expected one of daily, idle",
        ),
        (
            "{ session: { resetByChannel: { slack: { mode: 3 } } } }",
            "session.resetByChannel.slack.mode",
            "expected one of daily, idle",
        ),
        ("{ session: { resetTriggers: '/new' } }", "session.resetTriggers", "expected an array"),
        ("{ session: { resetTriggers: ['/new', null] } }", "session.resetTriggers[1]", "expected a string, found null"),
        ("{ session: { sendPolicy: { default: 'block' } } }", "session.sendPolicy.default", "expected one of allow, deny"),
        ("{ session: { sendPolicy: { rules: {} } } }", "session.sendPolicy.rules", "expected an array"),
        (
            "{ session: { sendPolicy: { rules: [{ action: 'drop' }] } } }",
            "session.sendPolicy.rules[0].action",
            "expected one of allow, deny",
        ),
        (
            "{ session: { sendPolicy: { rules: [{ match: { chatType: 'room' } }] } } }",
            "session.sendPolicy.rules[0].match.chatType",
            "expected one of direct, dm, group, channel",
        ),
        (
            "{ session: { sendPolicy: { rules: [{ action: 'deny', match: { sender: 'x' } }] } } }",
            "session.sendPolicy.rules[0].match.sender",
            "unknown condition",
        ),
        ("{ session: { store: false } }", "session.store", "expected a string, found a boolean"),
        (
            "{ messages: { groupChat: { historyLimit: 'all' } } }",
            "messages.groupChat.historyLimit",
            "expected a number, found a string",
        ),
        (
            "{ agents: { defaults: { envelopeTimezone: 9 } } }",
            "agents.defaults.envelopeTimezone",
            "expected a string, found a number",
        ),
        ("{ agents: { list: [{ id: 5 }] } }", "agents.list[0].id", "expected a string"),
        ("{ agents: { list: [{ id: 'a', default: 'yes' }] } }", "agents.list[0].default", "expected true or false"),
    ];
    for (text, field, message) in cases {
        let dir = gateway(text);
        let err = OpenClawConfig::load_with_env(dir.path(), &OpenClawEnv::default()).unwrap_err();
        let Error::Config {
            path,
            field: Some(named),
            message: said,
        } = &err
        else {
            panic!("{text}: {err:?}");
        };
        assert_eq!(named, field, "{text}");
        assert!(said.contains(message), "{text}: {said}");
        assert_eq!(
            path.as_deref(),
            Some(dir.path().join("openclaw.json").as_path()),
            "{text}"
        );
        let shown = err.to_string();
        assert!(shown.contains(&format!("{field}: {said}")), "{shown}");
        assert!(shown.contains("openclaw.json"), "{shown}");
    }
}

#[test]
fn settings_the_crate_does_not_use_are_ignored() {
    let cases = [
        "{ gateway: { port: 18789 }, channels: { telegram: { botToken: 'x' } }, models: {} }",
        "{ session: { typingMode: 'instant', maintenance: { mode: 'enforce' }, agentToAgent: {} } }",
        "{ session: { reset: { mode: 'daily', graceMinutes: 5 } } }",
        "{ session: { resetByType: { channel: { mode: 'weekly' } } } }",
        "{ session: { sendPolicy: { default: 'allow', audit: true, rules: [{ action: 'allow', note: 'x' }] } } }",
        "{ messages: { ackReaction: '👀', groupChat: { mentionPatterns: ['@bot'] } } }",
        "{ agents: { defaults: { model: 'x', workspace: '~/w' }, list: [{ id: 'main', tools: {} }] } }",
        "{ wizard: null, session: null, messages: null, agents: null }",
    ];
    let defaults = OpenClawConfig::default();
    for text in cases {
        let config = OpenClawConfig::from_json5_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let mut expected = defaults.clone();
        expected.reset = config.reset.clone();
        expected.send_policy = config.send_policy.clone();
        assert_eq!(config, expected, "{text}");
        assert_eq!(
            config
                .reset
                .policy(agent_sessions::freshness::ResetType::Group, None),
            defaults
                .reset
                .policy(agent_sessions::freshness::ResetType::Group, None),
            "{text}"
        );
    }
}

#[tokio::test]
async fn without_a_file_the_gateway_has_openclaws_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_of(dir.path());
    let mut expected = OpenClawConfig::default();
    expected.state_dir = dir.path().to_owned();
    assert_eq!(config, expected);
    assert_eq!(config.file, None);
    assert_eq!(config.reset_triggers, ["/new", "/reset"]);
    assert_eq!(config.group_history_limit, 50);

    let manager = SessionManager::connect_openclaw(dir.path())
        .await
        .unwrap()
        .build()
        .unwrap();
    let first = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    assert_eq!(first.key.as_str(), "agent:main:main");
    assert!(dir
        .path()
        .join("agents/main/sessions/sessions.json")
        .is_file());
    let reset = manager
        .resolve(&InboundMessage::direct("telegram", "42", "/new"))
        .await
        .unwrap();
    assert_eq!(reset.reason, Reason::ExplicitReset);
}

#[test]
fn older_file_names_are_read_in_openclaws_order() {
    // (files present) → the one read
    let cases: [(&[&str], &str); 4] = [
        (&["openclaw.json", "clawdbot.json"], "openclaw.json"),
        (&["clawdbot.json", "moltbot.json"], "clawdbot.json"),
        (&["moldbot.json", "moltbot.json"], "moldbot.json"),
        (&["moltbot.json"], "moltbot.json"),
    ];
    for (present, read) in cases {
        let dir = tempfile::tempdir().unwrap();
        for name in present {
            std::fs::write(
                dir.path().join(name),
                format!("{{ session: {{ mainKey: '{}' }} }}", &name[..4]),
            )
            .unwrap();
        }
        let config = config_of(dir.path());
        assert_eq!(config.file, Some(dir.path().join(read)), "{present:?}");
        assert_eq!(config.main_key, &read[..4], "{present:?}");
    }
}

#[test]
fn unreadable_or_corrupt_files_are_typed_errors() {
    // (the file's bytes) → the error says
    let cases: [(&[u8], &str); 6] = [
        (b"", "not valid JSON5"),
        (b"{ session: { dmScope: 'per-peer' }", "not valid JSON5"),
        (
            b"{ session: { dmScope: 'per-peer' } } trailing",
            "not valid JSON5",
        ),
        (
            b"[1, 2]",
            "the top level is an array, not an object of settings",
        ),
        (b"\"per-peer\"", "the top level is a string"),
        (b"{ session: { mainKey: '\xff' } }", "not UTF-8"),
    ];
    for (bytes, said) in cases {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("openclaw.json");
        std::fs::write(&file, bytes).unwrap();
        let err = OpenClawConfig::load_with_env(dir.path(), &OpenClawEnv::default()).unwrap_err();
        let Error::Config {
            path,
            field: None,
            message,
        } = &err
        else {
            panic!("{bytes:?}: {err:?}");
        };
        assert_eq!(path.as_deref(), Some(file.as_path()));
        assert!(message.contains(said), "{message}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            bytes,
            "the file is left as it was"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("openclaw.json")).unwrap();
    let err = OpenClawConfig::load_with_env(dir.path(), &OpenClawEnv::default()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotAFile {
                found: "a directory",
                ..
            }
        ),
        "{err:?}"
    );

    #[cfg(unix)]
    {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("openclaw.json"))
            .status()
            .unwrap();
        assert!(status.success());
        let err = OpenClawConfig::load_with_env(dir.path(), &OpenClawEnv::default()).unwrap_err();
        assert!(matches!(err, Error::NotAFile { .. }), "{err:?}");

        // A symlinked file (a dotfiles checkout) is read.
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("dotfiles.json5");
        std::fs::write(&real, "{ session: { dmScope: 'per-peer' } }").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("openclaw.json")).unwrap();
        assert_eq!(config_of(dir.path()).dm_scope, DmScope::PerPeer);
    }
}

#[test]
fn discovery_reads_the_file_openclaw_would() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let write = |path: &Path, main_key: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{{ session: {{ mainKey: '{main_key}' }} }}")).unwrap();
    };
    write(&h.join(".openclaw/openclaw.json"), "home");
    write(&h.join("state/openclaw.json"), "state");
    write(&h.join("elsewhere.json"), "explicit");
    let home_var = h.to_str().unwrap();
    // (variables) → (state dir, file read, its mainKey)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str, &'a str);
    let cases: [Case<'_>; 5] = [
        (&[], ".openclaw", ".openclaw/openclaw.json", "home"),
        (
            &[("OPENCLAW_STATE_DIR", "~/state")],
            "state",
            "state/openclaw.json",
            "state",
        ),
        (
            &[("OPENCLAW_CONFIG_PATH", "~/elsewhere.json")],
            ".openclaw",
            "elsewhere.json",
            "explicit",
        ),
        (
            &[
                ("OPENCLAW_CONFIG_PATH", "~/elsewhere.json"),
                ("OPENCLAW_STATE_DIR", "~/state"),
            ],
            "state",
            "elsewhere.json",
            "explicit",
        ),
        (
            &[("CLAWDBOT_STATE_DIR", "~/empty")],
            "empty",
            ".openclaw/openclaw.json",
            "home",
        ),
    ];
    for (vars, state_dir, file, main_key) in cases {
        let env = OpenClawEnv::from_vars([("HOME", home_var)].iter().chain(vars.iter()).copied());
        let config = OpenClawConfig::discover_with_env(&env).unwrap();
        assert_eq!(config.state_dir, h.join(state_dir), "{vars:?}");
        assert_eq!(config.file, Some(h.join(file)), "{vars:?}");
        assert_eq!(config.main_key, main_key, "{vars:?}");
    }
    // An explicit file that does not exist: OpenClaw's defaults, nothing read.
    let env = OpenClawEnv::from_vars([
        ("HOME", home_var),
        ("OPENCLAW_CONFIG_PATH", "~/missing.json"),
    ]);
    let config = OpenClawConfig::discover_with_env(&env).unwrap();
    assert_eq!((config.file, config.main_key.as_str()), (None, "main"));
}

/// `messages.queue` — mode, debounce, cap, drop policy, and per channel either
/// OpenClaw's bare mode or settings of its own — decides what a message that arrives
/// during a run does; a mode OpenClaw does not know is an error naming the setting.
#[tokio::test]
async fn messages_queue_decides_what_arrives_during_a_run() {
    use agent_sessions::lane::{QueueDrop, QueueMode, QueueOutcome};
    let dir = gateway(
        "{ messages: { queue: { mode: 'collect', debounceMs: 0, cap: 1, drop: 'new',
           byChannel: { telegram: 'followup', slack: { mode: 'steer', cap: 5 } } } } }",
    );
    let queue = config_of(dir.path()).queue;
    assert_eq!(queue.mode, QueueMode::Collect);
    assert_eq!(queue.debounce, Duration::ZERO);
    assert_eq!((queue.cap, queue.drop.clone()), (1, QueueDrop::New));
    let telegram = queue.for_channel(Some("telegram"));
    assert_eq!(telegram.mode, QueueMode::Followup);
    assert_eq!((telegram.cap, telegram.drop.clone()), (1, QueueDrop::New));
    let slack = queue.for_channel(Some("Slack"));
    assert_eq!((slack.mode.clone(), slack.cap), (QueueMode::Steer, 5));
    assert_eq!(queue.for_channel(Some("whatsapp")).mode, QueueMode::Collect);

    // On WhatsApp (the top-level settings): a cap of 1, and the newest message dropped.
    let manager = std::sync::Arc::new(
        SessionManager::connect_openclaw(dir.path())
            .await
            .unwrap()
            .build()
            .unwrap(),
    );
    let dm = |text: &str| InboundMessage::direct("whatsapp", "+15550001", text);
    let first = manager.turn(&dm("first")).await.unwrap();
    assert_eq!(first.action(), &TurnAction::Answer);
    let mut waiting = Vec::new();
    for text in ["second", "third"] {
        let manager = manager.clone();
        let message = dm(text);
        waiting.push(tokio::spawn(async move {
            let turn = manager.turn(&message).await.unwrap();
            let seen = (turn.action().clone(), turn.input().map(str::to_owned));
            turn.complete("ok").await.unwrap();
            seen
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.complete("done").await.unwrap();
    let second = waiting.remove(0).await.unwrap();
    let third = waiting.remove(0).await.unwrap();
    assert_eq!(second.0, TurnAction::Answer);
    assert!(second.1.unwrap().contains("second"));
    assert_eq!(third.0, TurnAction::Queued(QueueOutcome::Dropped));

    for (text, field) in [
        (
            "{ messages: { queue: { mode: 'shout' } } }",
            "messages.queue.mode",
        ),
        ("{ messages: { queue: { cap: 0 } } }", "messages.queue.cap"),
        (
            "{ messages: { queue: { drop: 'all' } } }",
            "messages.queue.drop",
        ),
        (
            "{ messages: { queue: { byChannel: { telegram: 'later' } } } }",
            "messages.queue.byChannel.telegram",
        ),
    ] {
        let dir = gateway(text);
        match OpenClawConfig::load_with_env(dir.path(), &OpenClawEnv::default()) {
            Err(Error::Config { field: Some(f), .. }) => assert_eq!(f, field, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}
