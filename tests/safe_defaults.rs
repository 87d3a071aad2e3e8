//! The defaults a bot author inherits are safe for a bot many people write to: one
//! person's DMs never reach another person's model input.

use agent_sessions::ops::{examine, DoctorOptions, Finding};
use agent_sessions::prelude::*;

/// What the model is given for `message`'s turn, after it is answered with `reply`.
async fn model_input(manager: &SessionManager, message: &InboundMessage) -> (String, String) {
    let turn = manager.turn(message).await.unwrap();
    let key = turn.key().to_string();
    let seen = format!("{:?}", turn.messages().await.unwrap());
    turn.complete("Noted.").await.unwrap();
    (key, seen)
}

/// User 42 tells the bot a secret, then user 43 writes: both keys, and what 43's model
/// was given.
async fn two_senders(manager: &SessionManager) -> (String, String, String) {
    let secret = InboundMessage::direct("telegram", "42", "my PIN is 1234");
    let (first, _) = model_input(manager, &secret).await;
    let question = InboundMessage::direct("telegram", "43", "what do you know?");
    let (second, seen) = model_input(manager, &question).await;
    (first, second, seen)
}

#[tokio::test]
async fn a_manager_the_crate_builds_gives_each_dm_sender_their_own_session() {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let (first, second, seen) = two_senders(&manager).await;
    assert_eq!(first, "agent:main:telegram:dm:42");
    assert_eq!(second, "agent:main:telegram:dm:43");
    assert!(!seen.contains("1234"), "43 saw 42's message: {seen}");
    assert!(seen.contains("what do you know?"));
}

#[tokio::test]
async fn the_builders_default_key_is_per_channel_and_peer() {
    let keys = DefaultKeyBuilder::new();
    let dm = keys
        .build(&Conversation::direct("whatsapp", "+15550001"))
        .unwrap();
    assert_eq!(dm.as_str(), "agent:main:whatsapp:dm:+15550001");
    assert_eq!(DmScope::default(), DmScope::PerChannelPeer);
}

#[tokio::test]
async fn an_openclaw_home_that_names_no_dm_scope_keeps_openclaws_shared_session_and_doctor_reports_it(
) {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("openclaw.json"), "{}").unwrap();
    let manager = SessionManager::connect_openclaw(home.path())
        .await
        .unwrap()
        .build()
        .unwrap();
    let (first, second, seen) = two_senders(&manager).await;
    assert_eq!(first, "agent:main:main");
    assert_eq!(second, first, "OpenClaw's fallback is kept as configured");
    assert!(seen.contains("1234"), "the shared session is shared");

    let report = examine(home.path(), &DoctorOptions::default())
        .await
        .unwrap();
    let shared: Vec<_> = report
        .findings
        .iter()
        .filter_map(|(finding, repair)| match finding {
            Finding::SharedDmSession { key, senders, .. } => Some((key, senders, repair)),
            _ => None,
        })
        .collect();
    assert_eq!(shared.len(), 1, "{:?}", report.findings);
    let (key, senders, repair) = shared[0];
    assert_eq!(key, "agent:main:main");
    assert_eq!(senders, &["telegram:42", "telegram:43"]);
    assert!(repair.is_none(), "reported, never repaired");
}

#[tokio::test]
async fn doctor_is_quiet_about_a_main_session_one_person_uses() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("openclaw.json"),
        r#"{ "session": { "dmScope": "main" } }"#,
    )
    .unwrap();
    let manager = SessionManager::connect_openclaw(home.path())
        .await
        .unwrap()
        .build()
        .unwrap();
    for text in ["hi", "again"] {
        model_input(&manager, &InboundMessage::direct("telegram", "42", text)).await;
    }
    model_input(
        &manager,
        &InboundMessage::group("telegram", "-100", "7", "@bot hi").mentioning_agent(),
    )
    .await;
    let report = examine(home.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert!(
        !report
            .findings
            .iter()
            .any(|(f, _)| matches!(f, Finding::SharedDmSession { .. })),
        "{:?}",
        report.findings
    );
}
