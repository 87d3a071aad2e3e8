//! Identity, access control, agent isolation and path safety.

mod common;

#[path = "common/stores.rs"]
mod stores;

use std::path::Path;
use std::sync::Arc;

use agent_sessions::identity::AgentScoped;
use agent_sessions::identity::Caller;
use agent_sessions::identity::IdentityLinks;
use agent_sessions::identity::Workspaces;
use agent_sessions::identity::{
    DefaultIdentityResolver, Directory, DirectoryEntry, Identifier, PersonType, StaticDirectory,
};
use agent_sessions::manager::{
    DeleteOptions, LogMessage, OverrideKind, ScopedManager, SessionOverride, TurnOutcome,
};
use agent_sessions::memory::CompactionEvent;
use agent_sessions::memory::EngineKind;
use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::follow::{Position, Scope, Update};
use agent_sessions::transcript::{CheckpointReason, Offset, TranscriptEntry};
use agent_sessions::DeliveryContext;
use agent_sessions::{
    store::DescriptionSource, AccessDenial, Error, Result, SessionSource, SessionStatus,
};
use async_trait::async_trait;

const JANE_PHONE: &str = "+61411111111";

fn staff() -> StaticDirectory {
    StaticDirectory::new(PersonType::Staff, "staff").with(
        JANE_PHONE,
        "17",
        "Jane Smith",
        Some("support_worker"),
    )
}

fn jane_by_sms(body: &str) -> InboundMessage {
    InboundMessage::direct("sms", JANE_PHONE, body).from_person("staff:17")
}

fn web_subject(sub: &str) -> Identifier {
    Identifier::Subject {
        sub: sub.into(),
        first_name: None,
        last_name: None,
        role: None,
        email: None,
    }
}

// ---------------------------------------------------------------------------------
// Identity-scoped sessions

#[tokio::test]
async fn one_person_texting_then_opening_the_web_chat_continues_one_session() {
    // Jane is `staff:17` to the SMS directory and `42` to the web app's login; an
    // identity link says both are Jane.
    let manager = SessionManager::builder(InMemoryStore::new())
        .key_builder(
            DefaultKeyBuilder::new()
                .dm_scope(DmScope::PerPerson)
                .identity_links(IdentityLinks::new().link("jane", ["staff:17", "42"])),
        )
        .identity_resolver(DefaultIdentityResolver::new().directory(staff()))
        .build()
        .unwrap();

    let by_sms = manager
        .identify("sms", &Identifier::Phone("+61 411 111 111".into()))
        .await
        .unwrap();
    assert_eq!(by_sms.id, "staff:17");
    let first = manager
        .resolve(
            &InboundMessage::direct("sms", JANE_PHONE, "when is my shift?").from_resolved(&by_sms),
        )
        .await
        .unwrap();

    let by_web = manager.identify("web", &web_subject("42")).await.unwrap();
    let second = manager
        .resolve(&InboundMessage::direct("web", "42", "and tomorrow?").from_resolved(&by_web))
        .await
        .unwrap();

    assert_eq!(first.key.as_str(), "agent:main:person:jane");
    assert_eq!(second.key, first.key);
    assert_eq!(second.decision, Decision::Continue);
    assert_eq!(second.session_id(), first.session_id());
    let entry = second.entry();
    assert_eq!(entry.message_count, Some(2));
    assert_eq!(
        entry.participants.as_deref(),
        Some(&["staff:17".to_owned(), "42".to_owned()][..])
    );
    // The session keeps the person it is with, by the id her links give her, with the
    // raw ids she wrote from beside it, and the channel it began on beside the latest one.
    assert_eq!(entry.person_id.as_deref(), Some("jane"));
    assert_eq!(
        entry.raw_person_ids.as_deref(),
        Some(&["staff:17".to_owned(), "42".to_owned()][..])
    );
    assert_eq!(entry.person_type.as_deref(), Some("staff"));
    assert_eq!(entry.first_channel.as_deref(), Some("sms"));
    assert_eq!(entry.channel_name(), Some("web"));
}

#[tokio::test]
async fn a_session_keeps_its_person_across_channels_and_senders() {
    use PersonType::{External, Participant, Staff, User};
    // Each case: the people who write in turn (id, type, channel) to one session
    // (OpenClaw's shared direct session, so every sender lands in it), and the person
    // and channels the session then names.
    struct Case {
        name: &'static str,
        writers: &'static [(&'static str, Option<PersonType>, &'static str)],
        person: (&'static str, &'static str),
        first_channel: &'static str,
    }
    let cases = [
        Case {
            name: "one person, two channels: the later login's type does not win",
            writers: &[
                ("staff:17", Some(Staff), "sms"),
                ("staff:17", Some(User), "web"),
            ],
            person: ("staff:17", "staff"),
            first_channel: "sms",
        },
        Case {
            name: "a second person in the same session does not take it over",
            writers: &[("staff:17", Some(Staff), "sms"), ("42", Some(User), "web")],
            person: ("staff:17", "staff"),
            first_channel: "sms",
        },
        Case {
            name: "an unknown number gives way to the person it was linked to",
            writers: &[
                ("phone:+61400000000", Some(External), "sms"),
                ("participant:5", Some(Participant), "sms"),
            ],
            person: ("participant:5", "participant"),
            first_channel: "sms",
        },
        Case {
            name: "another unknown number does not replace the first",
            writers: &[
                ("phone:+61400000000", Some(External), "sms"),
                ("phone:+61400000001", Some(External), "whatsapp"),
            ],
            person: ("phone:+61400000000", "external"),
            first_channel: "sms",
        },
        Case {
            name: "a type learned later fills a gap",
            writers: &[
                ("staff:17", None, "telegram"),
                ("staff:17", Some(Staff), "sms"),
            ],
            person: ("staff:17", "staff"),
            first_channel: "telegram",
        },
    ];
    for case in cases {
        let manager = SessionManager::builder(InMemoryStore::new())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::Main))
            .build()
            .unwrap();
        let mut last = None;
        for (person, person_type, channel) in case.writers {
            let mut message =
                InboundMessage::direct(*channel, "+61400000000", "hi").from_person(*person);
            message.person_type = *person_type;
            last = Some(manager.resolve(&message).await.unwrap());
        }
        let entry = last.unwrap().entry().clone();
        assert_eq!(
            (entry.person_id.as_deref(), entry.person_type.as_deref()),
            (Some(case.person.0), Some(case.person.1)),
            "{}",
            case.name
        );
        assert_eq!(
            entry.first_channel.as_deref(),
            Some(case.first_channel),
            "{}",
            case.name
        );
        let latest = case.writers.last().unwrap().2;
        assert_eq!(entry.channel_name(), Some(latest), "{}", case.name);
    }
}

#[tokio::test]
async fn one_directory_id_across_phone_channels_is_one_session_without_links() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
        .identity_resolver(DefaultIdentityResolver::new().directory(staff()))
        .build()
        .unwrap();
    let mut sessions = Vec::new();
    for channel in ["sms", "whatsapp"] {
        let jane = manager
            .identify(channel, &Identifier::Phone(JANE_PHONE.into()))
            .await
            .unwrap();
        let message = InboundMessage::direct(channel, JANE_PHONE, "hi").from_resolved(&jane);
        sessions.push(manager.resolve(&message).await.unwrap());
    }
    assert_eq!(sessions[0].key.as_str(), "agent:main:person:staff:17");
    assert_eq!(sessions[1].session_id(), sessions[0].session_id());
}

#[tokio::test]
async fn identify_needs_a_resolver_and_a_known_channel() {
    let bare = SessionManager::new(InMemoryStore::new());
    assert!(matches!(
        bare.identify("sms", &Identifier::Phone(JANE_PHONE.into()))
            .await,
        Err(Error::NotConfigured { .. })
    ));
    let manager = SessionManager::builder(InMemoryStore::new())
        .identity_resolver(DefaultIdentityResolver::new())
        .build()
        .unwrap();
    assert!(matches!(
        manager.identify("fax", &Identifier::Phone(JANE_PHONE.into())).await,
        Err(Error::UnknownChannel { channel }) if channel == "fax"
    ));
}

// ---------------------------------------------------------------------------------
// Access control over every scoped entry point

/// A session of Jane's (`staff:17`, by SMS), with transcripts and a workspace root.
struct Fixture {
    _dir: tempfile::TempDir,
    manager: SessionManager,
    key: SessionKey,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::builder(InMemoryStore::new())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(FileTranscriptStore::new(dir.path()))
        .workspaces(Workspaces::new(dir.path().join("workspaces")))
        .build()
        .unwrap();
    let key = manager
        .resolve(&jane_by_sms("when is my shift?"))
        .await
        .unwrap()
        .key;
    manager
        .session(&key)
        .log_message(LogMessage::inbound("when is my shift?"))
        .await
        .unwrap();
    Fixture {
        _dir: dir,
        manager,
        key,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Owner,
    Participant,
    Stranger,
    SmsToken,
    TelegramToken,
}

const EVERYONE: [Who; 5] = [
    Who::Owner,
    Who::Participant,
    Who::Stranger,
    Who::SmsToken,
    Who::TelegramToken,
];

impl Who {
    fn caller(self) -> Caller {
        match self {
            Who::Owner => Caller::owner(),
            Who::Participant => Caller::person("staff:17"),
            Who::Stranger => Caller::person("staff:18"),
            Who::SmsToken => Caller::owner().within_namespace("agent:main:sms").unwrap(),
            Who::TelegramToken => Caller::owner()
                .within_namespace("agent:main:telegram")
                .unwrap(),
        }
    }
}

/// Every call of [`ScopedManager`] that names Jane's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Resolve,
    Get,
    Close,
    Reset,
    SetStatus,
    Delete,
    SetLabel,
    SetDescription,
    SetOverride,
    ClearOverride,
    UpdateLastRoute,
    ForkThread,
    SpawnSubagent,
    RecordTurn,
    MemoryFlushPlan,
    RecordMemoryFlush,
    RecordCompaction,
    OnCompactionEvent,
    EngineSession,
    LogMessage,
    MirrorDelivery,
    Checkpoint,
    Replay,
    Workspace,
    EnsureSkillsSnapshot,
    Turn,
    EnqueueSystemEvent,
    Messages,
    Append,
    AppendChat,
    Follow,
}

const EVERY_CALL: [Call; 31] = [
    Call::Resolve,
    Call::Get,
    Call::Close,
    Call::Reset,
    Call::SetStatus,
    Call::Delete,
    Call::SetLabel,
    Call::SetDescription,
    Call::SetOverride,
    Call::ClearOverride,
    Call::UpdateLastRoute,
    Call::ForkThread,
    Call::SpawnSubagent,
    Call::RecordTurn,
    Call::MemoryFlushPlan,
    Call::RecordMemoryFlush,
    Call::RecordCompaction,
    Call::OnCompactionEvent,
    Call::EngineSession,
    Call::LogMessage,
    Call::MirrorDelivery,
    Call::Checkpoint,
    Call::Replay,
    Call::Workspace,
    Call::EnsureSkillsSnapshot,
    Call::Turn,
    Call::EnqueueSystemEvent,
    Call::Messages,
    Call::Append,
    Call::AppendChat,
    Call::Follow,
];

async fn call(scoped: &ScopedManager<'_>, fixture: &Fixture, call: Call) -> Result<()> {
    let key = &fixture.key;
    let message = jane_by_sms("and tomorrow?");
    match call {
        Call::Resolve => scoped.resolve(&message).await.map(drop),
        Call::Turn => scoped.turn(&message).await.map(drop),
        Call::Get => scoped.session(key).get().await.map(drop),
        Call::Close => scoped.session(key).close().await.map(drop),
        Call::Reset => scoped.session(key).reset().await.map(drop),
        Call::SetStatus => scoped
            .session(key)
            .set_status(SessionStatus::AwaitingApproval)
            .await
            .map(drop),
        Call::Delete => scoped
            .session(key)
            .delete(DeleteOptions::default())
            .await
            .map(drop),
        Call::SetLabel => scoped
            .session(key)
            .set_label(Some("Rosters"))
            .await
            .map(drop),
        Call::SetDescription => scoped
            .session(key)
            .set_description(Some("shift questions"), DescriptionSource::User)
            .await
            .map(drop),
        Call::SetOverride => scoped
            .session(key)
            .set_override(SessionOverride::ThinkingLevel("high".into()))
            .await
            .map(drop),
        Call::ClearOverride => scoped
            .session(key)
            .clear_override(OverrideKind::ThinkingLevel)
            .await
            .map(drop),
        Call::UpdateLastRoute => scoped
            .session(key)
            .update_last_route(&DeliveryContext::default().with_thread("7"))
            .await
            .map(drop),
        Call::ForkThread => scoped.session(key).fork_thread("t1").await.map(drop),
        Call::SpawnSubagent => scoped
            .session(key)
            .spawn_subagent(&AgentId::main(), Some("lookup"))
            .await
            .map(drop),
        Call::RecordTurn => scoped
            .session(key)
            .record_turn(TurnOutcome::completed())
            .await
            .map(drop),
        Call::MemoryFlushPlan => scoped.session(key).memory_flush_plan().await.map(drop),
        Call::RecordMemoryFlush => scoped.session(key).record_memory_flush().await.map(drop),
        Call::RecordCompaction => scoped
            .session(key)
            .record_compaction(Some(900))
            .await
            .map(drop),
        Call::OnCompactionEvent => scoped
            .session(key)
            .on_compaction_event(CompactionEvent::Start)
            .await
            .map(drop),
        Call::EngineSession => scoped
            .session(key)
            .engine_session(&EngineKind::Sdk)
            .await
            .map(drop),
        Call::LogMessage => scoped
            .session(key)
            .log_message(LogMessage::outbound("Tomorrow at 9."))
            .await
            .map(drop),
        Call::MirrorDelivery => scoped
            .session(key)
            .mirror_delivery("Tomorrow at 9.", &[])
            .await
            .map(drop),
        Call::Checkpoint => scoped
            .session(key)
            .checkpoint(CheckpointReason::Manual)
            .await
            .map(drop),
        Call::Replay => scoped.session(key).replay(Offset::START).await.map(drop),
        Call::Workspace => scoped.session(key).workspace().await.map(drop),
        Call::EnsureSkillsSnapshot => scoped
            .session(key)
            .ensure_skills_snapshot(1, || serde_json::json!({"skills": []}))
            .await
            .map(drop),
        Call::EnqueueSystemEvent => scoped
            .session(key)
            .enqueue_system_event("Model switched.")
            .await
            .map(drop),
        Call::Messages => scoped.session(key).messages().await.map(drop),
        Call::Append => scoped
            .session(key)
            .append(vec![TranscriptEntry::custom(
                "note",
                serde_json::json!({}),
                chrono::Utc::now(),
            )])
            .await
            .map(drop),
        Call::AppendChat => scoped
            .session(key)
            .append_chat(&[ChatMessage::assistant("Tomorrow at 9.")])
            .await
            .map(drop),
        Call::Follow => scoped.session(key).follow(Position::Start).await.map(drop),
    }
}

/// The specification: who is turned away from which call, and why.
fn expected_denial(who: Who, call: Call) -> Option<AccessDenial> {
    match (who, call) {
        (Who::Owner | Who::Participant, _) => None,
        (Who::Stranger, _) => Some(AccessDenial::NotParticipant),
        (Who::TelegramToken, _) => Some(AccessDenial::OutsideTokenNamespace),
        // An SMS token reaches the SMS session, but a subagent lives outside `…:sms`.
        (Who::SmsToken, Call::SpawnSubagent) => Some(AccessDenial::OutsideTokenNamespace),
        (Who::SmsToken, _) => None,
    }
}

#[tokio::test]
async fn access_control_table_over_every_scoped_call() {
    for who in EVERYONE {
        for each in EVERY_CALL {
            let fixture = fixture().await;
            let before = fixture
                .manager
                .session(&fixture.key)
                .get()
                .await
                .unwrap()
                .unwrap();
            let log_before = fixture
                .manager
                .session(&fixture.key)
                .replay(Offset::START)
                .await
                .unwrap();
            let sessions_before = fixture.manager.list(&ListFilter::new()).await.unwrap();

            let scoped = fixture.manager.scoped(who.caller());
            let outcome = call(&scoped, &fixture, each).await;
            let denial = match outcome {
                Ok(()) => None,
                Err(Error::AccessDenied { reason, resource }) => {
                    // The session asked for (for a subagent: the one it would create).
                    let named = if (who, each) == (Who::SmsToken, Call::SpawnSubagent) {
                        "session agent:main:subagent:".to_owned()
                    } else {
                        format!("session {}", fixture.key)
                    };
                    assert!(resource.starts_with(&named), "{resource}");
                    Some(reason)
                }
                Err(other) => panic!("{who:?} {each:?}: unexpected error {other}"),
            };
            assert_eq!(denial, expected_denial(who, each), "{who:?} {each:?}");

            if denial.is_some() {
                // Turned away: nothing changed anywhere.
                let after = fixture
                    .manager
                    .session(&fixture.key)
                    .get()
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(after, before, "{who:?} {each:?} changed the session");
                let log_after = fixture
                    .manager
                    .session(&fixture.key)
                    .replay(Offset::START)
                    .await
                    .unwrap();
                assert_eq!(log_after.events, log_before.events, "{who:?} {each:?}");
                let sessions_after = fixture.manager.list(&ListFilter::new()).await.unwrap();
                assert_eq!(sessions_after, sessions_before, "{who:?} {each:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_participant_posts_only_as_themselves() {
    let fixture = fixture().await;
    let jane = fixture.manager.scoped(Caller::person("staff:17"));
    let as_someone_else =
        InboundMessage::direct("sms", "+61499999999", "hi").from_person("staff:18");
    assert!(matches!(
        jane.resolve(&as_someone_else).await,
        Err(Error::AccessDenied {
            reason: AccessDenial::NotParticipant,
            ..
        })
    ));
    assert_eq!(
        fixture
            .manager
            .store()
            .count(&ListFilter::new())
            .await
            .unwrap(),
        1
    );
}

/// A session replaced by a reset is listed, closed, only to whoever may open it: each
/// caller sees the closed sessions of exactly the keys it saw before.
#[tokio::test]
async fn closed_sessions_are_listed_only_to_who_may_open_them() {
    let fixture = fixture().await;
    let manager = &fixture.manager;
    manager
        .resolve(&InboundMessage::direct("telegram", "99", "hello").from_person("staff:18"))
        .await
        .unwrap();
    manager
        .resolve(&InboundMessage::direct("sms", "+61400000000", "hello"))
        .await
        .unwrap();
    let visible = |who: Who, filter: ListFilter| async move {
        let mut keys: Vec<String> = manager
            .scoped(who.caller())
            .list(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key.to_string())
            .collect();
        keys.sort();
        keys
    };
    let callers = [Who::Owner, Who::Participant, Who::Stranger, Who::SmsToken];
    let mut before = Vec::new();
    for who in callers {
        before.push(visible(who, ListFilter::new()).await);
    }
    for session in manager.list(&ListFilter::new()).await.unwrap() {
        manager.session(&session.key).reset().await.unwrap();
    }
    let closed = ListFilter::new().status(agent_sessions::SessionStatus::Closed);
    for (who, expected) in callers.into_iter().zip(before) {
        assert_eq!(visible(who, closed.clone()).await, expected, "{who:?}");
    }
}

#[tokio::test]
async fn listings_show_only_what_the_caller_may_open() {
    let fixture = fixture().await;
    let manager = &fixture.manager;
    manager
        .resolve(&InboundMessage::direct("telegram", "99", "hello").from_person("staff:18"))
        .await
        .unwrap();
    manager
        .resolve(&InboundMessage::direct("sms", "+61400000000", "hello"))
        .await
        .unwrap();
    let visible = |who: Who| async move {
        let mut keys: Vec<String> = manager
            .scoped(who.caller())
            .list(&ListFilter::new())
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key.to_string())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(visible(Who::Owner).await.len(), 3);
    assert_eq!(
        visible(Who::Participant).await,
        ["agent:main:sms:dm:+61411111111"]
    );
    assert_eq!(visible(Who::Stranger).await, ["agent:main:telegram:dm:99"]);
    assert_eq!(
        visible(Who::SmsToken).await,
        [
            "agent:main:sms:dm:+61400000000",
            "agent:main:sms:dm:+61411111111"
        ]
    );
    // The limit counts visible sessions only.
    let limited = manager
        .scoped(Caller::person("staff:18"))
        .list(&ListFilter::new().limit(1))
        .await
        .unwrap();
    assert_eq!(limited.len(), 1);
}

#[tokio::test]
async fn a_denial_does_not_reveal_whether_a_session_exists() {
    let fixture = fixture().await;
    let stranger = fixture.manager.scoped(Caller::person("staff:18"));
    let missing = SessionKey::parse("agent:main:sms:dm:+61400000000").unwrap();
    let denial = |result: Result<Option<StoredSession>>| match result {
        Err(Error::AccessDenied { reason, .. }) => reason,
        other => panic!("expected a denial, got {other:?}"),
    };
    assert_eq!(
        denial(stranger.session(&fixture.key).get().await),
        denial(stranger.session(&missing).get().await)
    );
    assert!(fixture
        .manager
        .scoped(Caller::owner())
        .session(&missing)
        .get()
        .await
        .unwrap()
        .is_none());
}

/// Bob, by web chat, in a thread that names `parent` as the session it forks from.
fn bob_forking(thread: &str, parent: &SessionKey) -> InboundMessage {
    InboundMessage::direct("web", "bob", "what did she say?")
        .from_person("staff:18")
        .with_thread(thread)
        .with_parent_session(parent.as_str())
}

#[tokio::test]
async fn a_session_cannot_be_read_by_forking_it_into_a_thread_of_ones_own() {
    let fixture = fixture().await;
    let bob = fixture.manager.scoped(Caller::person("staff:18"));
    let turn = bob.turn(&bob_forking("t1", &fixture.key)).await.unwrap();
    let seen: Vec<String> = turn
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert!(
        !seen.iter().any(|text| text.contains("shift")),
        "Jane's line reached Bob's model input: {seen:?}"
    );
    let forked = |key: &SessionKey| {
        let manager = &fixture.manager;
        let key = key.clone();
        async move {
            manager
                .session(&key)
                .get()
                .await
                .unwrap()
                .unwrap()
                .entry
                .forked_from
        }
    };
    assert_eq!(forked(turn.key()).await, None);
    // Whether the parent exists is not told either: a missing parent is the same.
    let missing = SessionKey::parse("agent:main:sms:dm:+61400000000").unwrap();
    let probe = bob.resolve(&bob_forking("t2", &missing)).await.unwrap();
    assert_eq!(forked(&probe.key).await, None);
    // The host, and Jane herself, still fork it.
    let jane_forking = InboundMessage::direct("sms", JANE_PHONE, "and next week?")
        .from_person("staff:17")
        .with_thread("t3")
        .with_parent_session(fixture.key.as_str());
    let jane = fixture.manager.scoped(Caller::person("staff:17"));
    let hers = jane.resolve(&jane_forking).await.unwrap();
    assert!(forked(&hers.key).await.is_some());
}

#[tokio::test]
async fn a_named_session_key_never_creates_a_session_for_someone_else() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
        .build()
        .unwrap();
    let janes = SessionKey::parse("agent:main:person:staff:17").unwrap();
    let bob = manager.scoped(Caller::person("staff:18"));
    let squat = InboundMessage::direct("web", "bob", "planted")
        .from_person("staff:18")
        .with_session_key(janes.as_str());
    assert!(matches!(
        bob.resolve(&squat).await,
        Err(Error::AccessDenied {
            reason: AccessDenial::NotParticipant,
            ..
        })
    ));
    assert!(manager.session(&janes).get().await.unwrap().is_none());
    // Jane's first message opens her session, as hers.
    let jane = manager.scoped(Caller::person("staff:17"));
    assert_eq!(jane.resolve(&jane_by_sms("hi")).await.unwrap().key, janes);
    // A participant naming their own key (the key builder's) still may.
    let bobs = SessionKey::parse("agent:main:person:staff:18").unwrap();
    let own = InboundMessage::direct("web", "bob", "hi")
        .from_person("staff:18")
        .with_session_key(bobs.as_str());
    assert_eq!(bob.resolve(&own).await.unwrap().key, bobs);
}

#[tokio::test]
async fn fork_thread_hands_an_existing_thread_only_to_who_may_open_it() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .build()
        .unwrap();
    let in_group = |sender: &str, person: &str| {
        InboundMessage::group("telegram", "-100", sender, "hello").from_person(person)
    };
    let group = manager
        .resolve(&in_group("jane", "staff:17"))
        .await
        .unwrap()
        .key;
    let jane = manager.scoped(Caller::person("staff:17"));
    let thread = jane.session(&group).fork_thread("salary").await.unwrap();
    // Bob joins the group after the thread was started without him.
    manager.resolve(&in_group("bob", "staff:18")).await.unwrap();
    let bob = manager.scoped(Caller::person("staff:18"));
    assert!(bob.session(&group).get().await.unwrap().is_some());
    assert!(matches!(
        bob.session(&group).fork_thread("salary").await,
        Err(Error::AccessDenied {
            reason: AccessDenial::NotParticipant,
            ..
        })
    ));
    // A new thread of the group starts with its participants, Bob among them.
    let new = bob.session(&group).fork_thread("lunch").await.unwrap();
    assert_ne!(new.key, thread.key);
}

// ---------------------------------------------------------------------------------
// Opening sessions: participants and re-resolved identity

/// A staff directory whose answers the test changes: Jane is promoted mid-test.
#[derive(Clone, Default)]
struct LiveDirectory(Arc<std::sync::Mutex<Option<String>>>);

#[async_trait]
impl Directory for LiveDirectory {
    fn person_type(&self) -> PersonType {
        PersonType::Staff
    }

    fn prefix(&self) -> &str {
        "staff"
    }

    async fn lookup_phone(&self, phone: &str) -> Result<Option<DirectoryEntry>> {
        Ok((phone == JANE_PHONE).then(|| DirectoryEntry {
            id: "17".into(),
            name: Some("Jane Smith".into()),
            role: self.0.lock().unwrap().clone(),
        }))
    }
}

#[tokio::test]
async fn opening_re_resolves_identity_and_admits_only_participants() {
    let directory = LiveDirectory::default();
    *directory.0.lock().unwrap() = Some("support_worker".into());
    let manager = SessionManager::builder(InMemoryStore::new())
        .identity_resolver(
            DefaultIdentityResolver::new()
                .phone_channel("portal")
                .directory(directory.clone()),
        )
        .build()
        .unwrap();
    let dashboard = SessionSource::web("dashboard");

    let mut jane = manager
        .scoped_as("portal", Identifier::Phone(JANE_PHONE.into()))
        .await
        .unwrap();
    let opened = jane.open(&dashboard, None).await.unwrap();
    assert_eq!(opened.decision, Decision::New);
    assert!(opened.entry().has_participant("staff:17"));
    assert_eq!(opened.entry().person_id.as_deref(), Some("staff:17"));
    assert_eq!(opened.entry().person_type.as_deref(), Some("staff"));

    // A role change applies on the next open.
    *directory.0.lock().unwrap() = Some("team_leader".into());
    let reopened = jane.open(&dashboard, None).await.unwrap();
    assert_eq!(reopened.decision, Decision::Continue);
    assert_eq!(jane.person().unwrap().role.as_deref(), Some("team_leader"));

    // Someone else may not open Jane's session; the owner may.
    let mut stranger = manager.scoped(Caller::person("staff:18"));
    assert!(matches!(
        stranger.open(&dashboard, None).await,
        Err(Error::AccessDenied {
            reason: AccessDenial::NotParticipant,
            ..
        })
    ));
    let mut owner = manager.scoped(Caller::owner());
    let by_owner = owner.open(&dashboard, None).await.unwrap();
    assert_eq!(by_owner.session_id(), opened.session_id());
    assert_eq!(
        by_owner.entry().participants.as_deref(),
        Some(&["staff:17".to_owned()][..]),
        "the owner is not recorded as a participant"
    );
}

// ---------------------------------------------------------------------------------
// Per-agent isolation

#[tokio::test]
async fn an_isolated_manager_never_reaches_another_agents_sessions_or_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(InMemoryStore::new());
    let transcripts = Arc::new(FileTranscriptStore::new(dir.path()));
    let main = SessionManager::builder(store.clone())
        .transcripts(transcripts.clone())
        .build()
        .unwrap();
    let ops_agent = AgentId::new("ops").unwrap();
    let ops = SessionManager::builder(store.clone())
        .key_builder(DefaultKeyBuilder::new().default_agent(ops_agent.clone()))
        .transcripts(transcripts.clone())
        .isolate_to_agent(ops_agent.clone())
        .build()
        .unwrap();

    let theirs = main
        .resolve(&InboundMessage::direct("telegram", "42", "main's secret"))
        .await
        .unwrap();
    main.session(&theirs.key)
        .log_message(LogMessage::inbound("main's secret"))
        .await
        .unwrap();
    let before = main.session(&theirs.key).get().await.unwrap().unwrap();
    let mine = ops
        .resolve(&InboundMessage::direct("telegram", "42", "ops question"))
        .await
        .unwrap();
    assert_eq!(mine.key.agent_id(), Some("ops"));

    let other_agent = |result: Result<()>| {
        matches!(
            result,
            Err(Error::AccessDenied {
                reason: AccessDenial::OtherAgent,
                ..
            })
        )
    };
    let key = &theirs.key;
    assert!(other_agent(ops.session(key).get().await.map(drop)));
    assert!(other_agent(
        ops.session(key).replay(Offset::START).await.map(drop)
    ));
    assert!(other_agent(
        ops.session(key)
            .log_message(LogMessage::inbound("x"))
            .await
            .map(drop)
    ));
    assert!(other_agent(ops.session(key).close().await.map(drop)));
    assert!(other_agent(
        ops.session(key).set_label(Some("mine")).await.map(drop)
    ));
    assert!(other_agent(
        ops.session(key)
            .delete(DeleteOptions::default())
            .await
            .map(drop)
    ));
    assert!(other_agent(
        ops.resolve(&InboundMessage::direct("telegram", "42", "hi").with_agent("main"))
            .await
            .map(drop)
    ));
    assert!(other_agent(
        ops.resolve(
            &InboundMessage::direct("telegram", "42", "hi").with_session_key("agent:main:main")
        )
        .await
        .map(drop)
    ));

    let listed: Vec<SessionKey> = ops
        .list(&ListFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.key)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&mine.key));
    assert!(ops
        .list(&ListFilter::new().agent(AgentId::main()))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(ops.store().count(&ListFilter::new()).await.unwrap(), 1);

    // Main's session is as main left it.
    assert_eq!(main.session(key).get().await.unwrap().unwrap(), before);

    // Following the whole store from ops follows ops's sessions alone: main's lines
    // never reach it.
    let mut feed = ops
        .follow(Scope::Store, Position::Now)
        .await
        .unwrap()
        .poll_interval(std::time::Duration::from_millis(5));
    main.session(key)
        .log_message(LogMessage::inbound("main again"))
        .await
        .unwrap();
    ops.session(&mine.key)
        .log_message(LogMessage::inbound("ops again"))
        .await
        .unwrap();
    loop {
        match feed.next().await.unwrap() {
            Update::Session { session, .. } => assert_eq!(session.key.agent_id(), Some("ops")),
            Update::Events { key, events, .. } => {
                assert_eq!(key.agent_id(), Some(ops_agent.as_str()));
                let said: Vec<String> = events
                    .iter()
                    .filter_map(|e| e.entry.message.as_ref().map(|m| m.text()))
                    .collect();
                assert_eq!(said.last().map(String::as_str), Some("ops again"));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        ops.follow(Scope::Agent(AgentId::main()), Position::Now)
            .await
            .is_err(),
        "ops may not follow main"
    );
}

#[tokio::test]
async fn agent_scoped_transcripts_refuse_other_agents_refs() {
    use agent_sessions::transcript::{TranscriptRef, TranscriptStore};
    let dir = tempfile::tempdir().unwrap();
    let scoped = AgentScoped::new(
        AgentId::new("ops").unwrap(),
        FileTranscriptStore::new(dir.path()),
    );
    let theirs = TranscriptRef::new(AgentId::main(), "s-1");
    let denied = scoped.read(&theirs, Offset::START).await;
    assert!(matches!(
        denied,
        Err(Error::AccessDenied { reason: AccessDenial::OtherAgent, ref resource }) if resource == "transcript main/s-1"
    ));
    assert_eq!(scoped.location(&theirs), None);
    assert!(!dir.path().join("agents/main").exists());
}

// ---------------------------------------------------------------------------------
// Workspaces

#[tokio::test]
async fn workspaces_are_keyed_by_our_uuid_and_shared_across_variants_by_choice() {
    use agent_sessions::identity::{Area, WorkspaceSharing};
    for sharing in [WorkspaceSharing::PerIdentity, WorkspaceSharing::PerSession] {
        let dir = tempfile::tempdir().unwrap();
        let manager = SessionManager::builder(InMemoryStore::new())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
            .agent_identity("reggie_oc", "reggie")
            .agent_identity("reggie_fd", "reggie")
            .workspaces(Workspaces::new(dir.path()).sharing(sharing))
            .build()
            .unwrap();
        let mut workspaces = Vec::new();
        for agent in ["reggie_oc", "reggie_fd"] {
            let resolution = manager
                .resolve(&jane_by_sms("hi").with_agent(agent))
                .await
                .unwrap();
            let workspace = manager.session(&resolution.key).workspace().await.unwrap();
            assert_eq!(workspace.dir(), dir.path().join(workspace.id().to_string()));
            workspaces.push((resolution, workspace));
        }
        let (first, oc) = &workspaces[0];
        let (_, fd) = &workspaces[1];
        assert_eq!(
            oc.id().to_string(),
            first.session_id(),
            "named by our session UUID"
        );
        assert_eq!(oc.id() == fd.id(), sharing == WorkspaceSharing::PerIdentity);
        oc.write(Area::Attachments, "photo.jpg", b"jpeg").unwrap();
        assert_eq!(
            fd.read(Area::Attachments, "photo.jpg").is_ok(),
            sharing == WorkspaceSharing::PerIdentity
        );

        // The workspace outlives a reset of the session.
        let reset = manager
            .resolve(&jane_by_sms("/new").with_agent("reggie_oc"))
            .await
            .unwrap();
        assert_ne!(reset.session_id(), first.session_id());
        assert_eq!(
            manager.session(&reset.key).workspace().await.unwrap().id(),
            oc.id()
        );
    }
}

#[tokio::test]
async fn a_hand_edited_workspace_id_is_rejected_not_used_as_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::builder(InMemoryStore::new())
        .workspaces(Workspaces::new(dir.path().join("ws")))
        .build()
        .unwrap();
    let key = manager.resolve(&jane_by_sms("hi")).await.unwrap().key;
    manager
        .store()
        .apply(&key, &mut |slot, _| {
            slot.as_mut().unwrap().workspace_id = Some("../../etc".into());
            Ok(())
        })
        .await
        .unwrap();
    assert!(matches!(
        manager.session(&key).workspace().await,
        Err(Error::InvalidId { .. })
    ));
    assert!(!dir.path().join("etc").exists());
}

// ---------------------------------------------------------------------------------
// File-system safety: permissions and symlinks

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[tokio::test]
async fn directories_are_owner_only_and_files_too() {
    use agent_sessions::identity::Area;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let agent = AgentId::main();
    let store = JsonFileStore::new(&state);
    let manager = SessionManager::builder(store)
        .transcripts(FileTranscriptStore::new(&state))
        .workspaces(Workspaces::new(dir.path().join("workspaces")))
        .build()
        .unwrap();
    let key = manager.resolve(&jane_by_sms("hi")).await.unwrap().key;
    manager
        .session(&key)
        .log_message(LogMessage::inbound("hi"))
        .await
        .unwrap();
    let workspace = manager.session(&key).workspace().await.unwrap();
    let export = workspace
        .write(Area::Exports, "report.csv", b"a,b\n")
        .unwrap();
    let summary = workspace.write_summary("GOAL: shifts").unwrap();

    let sessions = agent_sessions::store::sessions_dir(&state, &agent);
    for directory in [
        state.join("agents"),
        sessions.clone(),
        dir.path().join("workspaces"),
        workspace.dir().to_path_buf(),
        workspace.dir().join("exports"),
        workspace.dir().join("attachments"),
        workspace.dir().join("context"),
    ] {
        assert_eq!(mode(&directory), 0o700, "{}", directory.display());
    }
    let transcript = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    for file in [sessions.join("sessions.json"), transcript, export, summary] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_planted_in_a_workspace_is_not_followed() {
    use agent_sessions::identity::Area;
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "precious").unwrap();
    let workspaces = Workspaces::new(dir.path().join("ws"));
    let workspace = workspaces.open(uuid::Uuid::new_v4()).unwrap();
    let planted = workspace.dir().join("exports").join("report.csv");
    std::os::unix::fs::symlink(&outside, &planted).unwrap();

    assert!(matches!(
        workspace.read(Area::Exports, "report.csv"),
        Err(Error::NotAFile {
            found: "a symbolic link",
            ..
        })
    ));
    workspace
        .write(Area::Exports, "report.csv", b"new report")
        .unwrap();
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
    assert!(!std::fs::symlink_metadata(&planted)
        .unwrap()
        .file_type()
        .is_symlink());

    // A planted folder is refused outright.
    let elsewhere = tempfile::tempdir().unwrap();
    let id = uuid::Uuid::new_v4();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("ws").join(id.to_string()))
        .unwrap();
    assert!(matches!(
        workspaces.open(id),
        Err(Error::NotAFile {
            found: "a symbolic link",
            ..
        })
    ));
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_planted_in_the_sessions_directory_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "precious").unwrap();
    let manager = SessionManager::builder(JsonFileStore::new(&state))
        .transcripts(FileTranscriptStore::new(&state))
        .build()
        .unwrap();
    let resolution = manager.resolve(&jane_by_sms("hi")).await.unwrap();
    let sessions = agent_sessions::store::sessions_dir(&state, &AgentId::main());

    // Where this session's transcript will go, a link to a file outside.
    let transcript = sessions.join(format!("{}.jsonl", resolution.session_id()));
    std::os::unix::fs::symlink(&outside, &transcript).unwrap();
    let logged = manager
        .session(&resolution.key)
        .log_message(LogMessage::inbound("hi"))
        .await;
    // Refused: the path resolves outside (`InvalidId`), or the open does not follow
    // the link (`Io`, ELOOP).
    let refused = |result: &Result<()>| {
        matches!(
            result,
            Err(Error::NotAFile { .. } | Error::InvalidId { .. })
        )
    };
    assert!(refused(&logged.map(drop)));
    assert!(refused(
        &manager
            .session(&resolution.key)
            .replay(Offset::START)
            .await
            .map(drop)
    ));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");

    // A link to a file inside the directory is not followed either.
    let decoy = sessions.join("decoy.jsonl");
    std::fs::write(&decoy, "").unwrap();
    std::fs::remove_file(&transcript).unwrap();
    std::os::unix::fs::symlink(&decoy, &transcript).unwrap();
    let logged = manager
        .session(&resolution.key)
        .log_message(LogMessage::inbound("hi"))
        .await;
    assert!(
        matches!(
            logged,
            Err(Error::NotAFile {
                found: "a symbolic link",
                ..
            })
        ),
        "{logged:?}"
    );
    assert_eq!(std::fs::read_to_string(&decoy).unwrap(), "");

    // The store file itself, replaced by a link: reading refuses it, and the file it
    // points to is untouched.
    let store_file = sessions.join("sessions.json");
    std::fs::remove_file(&store_file).unwrap();
    std::os::unix::fs::symlink(&outside, &store_file).unwrap();
    let fresh = SessionManager::new(JsonFileStore::new(&state));
    assert!(fresh.session(&resolution.key).get().await.is_err());
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
}

/// Every directory and file below `root` (not `root` itself) whose permission bits are
/// not owner-only: 0700 for directories, 0600 for files.
#[cfg(unix)]
fn not_owner_only(root: &Path) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let metadata = std::fs::symlink_metadata(&path).unwrap();
            let expected = if metadata.is_dir() {
                pending.push(path.clone());
                0o700
            } else {
                0o600
            };
            if mode(&path) != expected {
                wrong.push(format!("{} is {:o}", path.display(), mode(&path)));
            }
        }
    }
    wrong
}

#[cfg(unix)]
#[tokio::test]
async fn everything_a_session_lifecycle_search_doctor_and_migration_write_is_owner_only() {
    use agent_sessions::ops::{examine, DoctorOptions};
    use agent_sessions::ops::{migrate, NoProgress};
    use agent_sessions::store::Backend;

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = format!("json:{}", state.display());
    let backend = Backend::open(&url).await.unwrap();
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    // A lifecycle: a session, its messages, a reset (the transcript archived), a thread.
    let resolution = manager.resolve(&jane_by_sms("hi")).await.unwrap();
    manager
        .session(&resolution.key)
        .log_message(LogMessage::inbound("hi about rosters"))
        .await
        .unwrap();
    manager.session(&resolution.key).reset().await.unwrap();
    manager
        .session(&resolution.key)
        .log_message(LogMessage::inbound("again"))
        .await
        .unwrap();
    manager
        .session(&resolution.key)
        .fork_thread("7")
        .await
        .unwrap();
    // Search: the index saved beside the tree.
    let search =
        agent_sessions::transcript::search::Search::shared(backend.search_index().await.unwrap());
    search.process_all(&**backend.transcripts()).await.unwrap();
    // Doctor: a corrupt store restored from its backup, the corrupt one quarantined.
    let store_file = agent_sessions::store::store_path(&state, &AgentId::main());
    std::fs::write(&store_file, "{ truncated").unwrap();
    std::fs::set_permissions(
        &store_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    assert!(examine(&state, &DoctorOptions::repair())
        .await
        .unwrap()
        .all_repaired());
    // A migration into a fresh tree and into SQLite.
    let copy = dir.path().join("copy");
    let target = Backend::open(&format!("json:{}", copy.display()))
        .await
        .unwrap();
    assert!(migrate(&backend, &target, &NoProgress)
        .await
        .unwrap()
        .verified());
    let db_dir = dir.path().join("db");
    #[cfg(feature = "sqlite")]
    {
        let db = db_dir.join("sessions.db");
        let sqlite = Backend::open(&format!("sqlite:{}", db.display()))
            .await
            .unwrap();
        assert!(migrate(&backend, &sqlite, &NoProgress)
            .await
            .unwrap()
            .verified());
    }
    #[cfg(not(feature = "sqlite"))]
    std::fs::create_dir(&db_dir).unwrap();

    assert!(
        state.join("search").exists(),
        "the search index was written"
    );
    for root in [&state, &copy, &db_dir] {
        assert_eq!(not_owner_only(root), Vec::<String>::new());
    }
}

/// `summary.md` in a session's workspace holds the person's rolling summary: written
/// whenever it changes — merged, or seeded into a new sibling — whether or not the host
/// opened the workspace; shared by the agent variants that share the folder, and not
/// overwritten by a turn's per-session context summary.
#[tokio::test]
async fn the_workspace_summary_holds_the_rolling_summary() {
    use agent_sessions::freshness::ManualClock;
    use agent_sessions::identity::WorkspaceSharing;
    use agent_sessions::manager::TurnOutcome;
    use agent_sessions::memory::SummaryRefresh;
    use agent_sessions::transcript::InMemoryTranscriptStore;
    for sharing in [WorkspaceSharing::PerIdentity, WorkspaceSharing::PerSession] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(
            chrono::DateTime::parse_from_rfc3339("2026-03-10T10:00:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        );
        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(InMemoryTranscriptStore::new())
            .workspaces(Workspaces::new(dir.path()).sharing(sharing))
            .agent_identity("reggie_oc", "reggie")
            .agent_identity("reggie_fd", "reggie")
            .agent_identity("reggie_web", "reggie")
            .clock(clock.clone())
            .build()
            .unwrap();
        let say = |agent: &str, text: &str| jane_by_sms(text).with_agent(agent);
        // Two variants of one agent; neither opened its workspace.
        let mut keys = Vec::new();
        for (agent, text, reply) in [
            ("reggie_oc", "When is my shift?", "Thursday at 9."),
            ("reggie_fd", "Can I swap it?", "Swap requested."),
        ] {
            let turn = manager.turn(&say(agent, text)).await.unwrap();
            keys.push(turn.key().clone());
            turn.complete(reply).await.unwrap();
            // A turn's context summary is the session's own: not in summary.md.
            manager
                .session(keys.last().unwrap())
                .record_turn(TurnOutcome::completed().with_exchange(text, reply))
                .await
                .unwrap();
        }
        let files = |dir: &Path| -> Vec<String> {
            let mut found: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| {
                    let summary = e.unwrap().path().join("summary.md");
                    std::fs::read_to_string(summary).ok()
                })
                .collect();
            found.sort();
            found
        };
        assert!(
            files(dir.path()).is_empty(),
            "{sharing:?}: no rolling summary yet"
        );

        clock.advance(std::time::Duration::from_secs(2 * 3600));
        let SummaryRefresh::Updated { summary, .. } = manager
            .refresh_identity_summary("staff:17", "reggie")
            .await
            .unwrap()
        else {
            panic!("expected an update")
        };
        let folders = match sharing {
            WorkspaceSharing::PerIdentity => 1,
            _ => 2,
        };
        assert_eq!(
            files(dir.path()),
            vec![summary.text.clone(); folders],
            "{sharing:?}: every folder holds her rolling summary"
        );
        // A third variant's first session starts with the summary, in its folder too.
        let web = manager
            .turn(&say("reggie_web", "Is Friday confirmed?"))
            .await
            .unwrap();
        keys.push(web.key().clone());
        for key in &keys {
            let workspace = manager.session(key).workspace().await.unwrap();
            assert_eq!(
                std::fs::read_to_string(workspace.dir().join("summary.md")).unwrap(),
                summary.text,
                "{sharing:?}: {key}"
            );
        }
    }
}

/// Ann first texts from a number nobody knows (an `external` placeholder), then writes
/// as the web login her identity links tie to that number: her session becomes hers,
/// known as a `user`, on every backend — the placeholder gives way even though the
/// session already bears her canonical id.
#[tokio::test]
async fn a_linked_external_person_becomes_known_when_she_writes_as_herself() {
    let stores = stores::Stores::new("linked_external");
    for url in &stores.urls {
        let links = IdentityLinks::new().link("ann", ["phone:+61499999999", "77"]);
        let manager = SessionManager::connect(url)
            .await
            .unwrap()
            .key_builder(
                DefaultKeyBuilder::new()
                    .dm_scope(DmScope::PerPerson)
                    .identity_links(links),
            )
            .build()
            .unwrap();
        let mut by_sms = InboundMessage::direct("sms", "+61499999999", "hi, it's Ann")
            .from_person("phone:+61499999999");
        by_sms.person_type = Some(PersonType::External);
        let first = manager.resolve(&by_sms).await.unwrap();
        assert_eq!(
            first.entry().person_type.as_deref(),
            Some("external"),
            "{url}"
        );
        let mut by_web = InboundMessage::direct("web", "77", "logged in now").from_person("77");
        by_web.person_type = Some(PersonType::User);
        let second = manager.resolve(&by_web).await.unwrap();
        assert_eq!(second.key, first.key, "{url}: one session for Ann");
        let entry = second.entry();
        assert_eq!(
            (entry.person_id.as_deref(), entry.person_type.as_deref()),
            (Some("ann"), Some("user")),
            "{url}"
        );
    }
    stores.finish().await;
}
