//! The conformance suite every [`SessionStore`] must pass.
//!
//! Each case is one behaviour, written as a test: it panics with a message when the
//! store under test behaves differently. The cases are hidden functions the macros
//! call; run them all against your store with [`store_conformance_tests!`](crate::store_conformance_tests), giving it an
//! async expression that makes a fresh, empty store (and a guard that keeps whatever
//! the store needs alive, such as a temporary directory):
//!
//! ```ignore
//! // tests/conformance.rs of a crate with its own store
//! async fn fresh_store() -> (MyStore, tempfile::TempDir) { /* … */ }
//!
//! mod my_store {
//!     agent_sessions::store_conformance_tests!(super::fresh_store());
//! }
//! ```
//!
//! The generated tests use `#[tokio::test]`, so the calling crate needs `tokio` (with
//! the `macros` and `rt-multi-thread` features) among its dev-dependencies.
//!
//! A store that also updates several sessions at once ([`MultiKeyStore`]) runs
//! [`multi_key_conformance_tests!`](crate::multi_key_conformance_tests) as well.
//!
//! A [`TranscriptStore`](crate::transcript::TranscriptStore) has its own suite,
//! [`transcript_conformance_tests!`](crate::transcript_conformance_tests), run the same
//! way; two of its cases (archive names, export and import) need the store to implement
//! [`TranscriptExport`](crate::transcript::TranscriptExport) as well. A buffer of group
//! chatter ([`ChatterBuffer`](crate::inbound::ChatterBuffer)) and a queue of system
//! events ([`SystemEvents`](crate::inbound::SystemEvents)) have theirs too:
//! [`chatter_conformance_tests!`](crate::chatter_conformance_tests) and
//! [`system_events_conformance_tests!`](crate::system_events_conformance_tests), whose
//! `$make` takes the two bounds and yields a fresh, empty buffer or queue.

#[doc(hidden)]
pub mod chatter;
#[doc(hidden)]
pub mod system_events;
#[doc(hidden)]
pub mod transcripts;

use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinSet;

use crate::error::Error;
use crate::identity::key::{AgentId, PeerKind, SessionKey};
use crate::store::entry::{
    ChatType, DeliveryContext, SessionEntry, SessionOrigin, SessionStatus, ThreadId,
};
use crate::store::{
    ListFilter, MultiKeyStore, Revision, SessionStore, SessionStoreExt, Slots, StoredSession,
};

fn key(raw: &str) -> SessionKey {
    SessionKey::parse(raw).expect("test keys are valid")
}

/// An entry with most kinds of field set, including fields this crate does not know.
#[doc(hidden)]
pub fn rich_entry(session_id: &str, updated_at: u64) -> SessionEntry {
    let mut entry = SessionEntry::new(session_id, updated_at);
    entry.chat_type = Some(ChatType::Group);
    entry.channel = Some("whatsapp".into());
    entry.subject = Some("Family".into());
    entry.total_tokens = Some(15_320);
    entry.last_channel = Some("whatsapp".into());
    entry.last_to = Some("120363@g.us".into());
    entry.last_thread_id = Some(ThreadId::Number(42));
    entry.origin = Some(SessionOrigin {
        label: Some("Family id:120363@g.us".into()),
        provider: Some("whatsapp".into()),
        ..SessionOrigin::default()
    });
    entry.delivery_context = Some(DeliveryContext {
        channel: Some("whatsapp".into()),
        to: Some("120363@g.us".into()),
        thread_id: Some(ThreadId::Number(42)),
        ..DeliveryContext::default()
    });
    entry.skills_snapshot = Some(json!({"prompt": "…", "skills": [{"name": "web"}]}));
    entry.extra.insert(
        "zFutureField".into(),
        json!({"nested": [1, 2.5, "three", null], "flag": true}),
    );
    entry.extra.insert("aFutureCounter".into(), json!(7));
    entry
}

/// A missing key reads as nothing, and an empty store is empty.
#[doc(hidden)]
pub async fn get_of_missing_key_is_none<S: SessionStore + ?Sized>(store: &S) {
    let missing = key("agent:main:dm:nobody");
    assert!(
        store.get(&missing).await.unwrap().is_none(),
        "get of a missing key"
    );
    assert_eq!(
        store.count(&ListFilter::new()).await.unwrap(),
        0,
        "len of an empty store"
    );
    assert!(
        store.is_empty().await.unwrap(),
        "is_empty of an empty store"
    );
    assert!(
        store.list(&ListFilter::new()).await.unwrap().is_empty(),
        "list of an empty store"
    );
    assert_eq!(
        store.delete(&missing).await.unwrap(),
        None,
        "delete of a missing key"
    );
}

/// What is put is what is got, and what is got is a copy.
#[doc(hidden)]
pub async fn put_then_get_returns_the_entry<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:whatsapp:group:120363@g.us");
    let entry = rich_entry("s-1", 1_000);
    let stored = store.put(&k, entry.clone()).await.unwrap();
    assert_eq!(stored.key, k);
    assert_eq!(stored.entry, entry);
    let mut got = store.get(&k).await.unwrap().expect("entry was put");
    assert_eq!(got.entry, entry, "entry read back");
    assert_eq!(got.revision, stored.revision, "revision read back");
    got.entry.label = Some("changed locally".into());
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().entry,
        entry,
        "changing a returned entry must not change the store"
    );
}

/// Every entry a store writes has OpenClaw's saved delivery fields: the `last*` fields
/// and `deliveryContext` derived from each other, the channel normalised, ids trimmed.
#[doc(hidden)]
pub async fn written_entries_have_openclaw_delivery_fields<S: SessionStore + ?Sized>(store: &S) {
    fn context(
        channel: Option<&str>,
        to: Option<&str>,
        thread: Option<ThreadId>,
    ) -> DeliveryContext {
        DeliveryContext {
            channel: channel.map(Into::into),
            to: to.map(Into::into),
            thread_id: thread,
            ..DeliveryContext::default()
        }
    }
    type Case = (&'static str, fn(&mut SessionEntry), Option<DeliveryContext>);
    let cases: [Case; 6] = [
        ("nothing to route", |_| {}, None),
        (
            "only a channel",
            |e| e.channel = Some("discord".into()),
            Some(context(Some("discord"), None, None)),
        ),
        (
            "an untrimmed, capitalised channel and recipient",
            |e| {
                e.last_channel = Some(" WhatsApp ".into());
                e.last_to = Some(" +15550001 ".into());
                e.last_account_id = Some(" Biz ".into());
            },
            Some(DeliveryContext {
                account_id: Some("Biz".into()),
                ..context(Some("whatsapp"), Some("+15550001"), None)
            }),
        ),
        (
            "only a delivery context",
            |e| e.delivery_context = Some(context(Some("Slack"), Some("C1"), Some("17.5".into()))),
            Some(context(Some("slack"), Some("C1"), Some("17.5".into()))),
        ),
        (
            "last fields win over the context, field by field",
            |e| {
                e.last_to = Some("new".into());
                e.delivery_context = Some(context(Some("telegram"), Some("old"), None));
            },
            Some(context(Some("telegram"), Some("new"), None)),
        ),
        (
            "the thread falls back to the origin's",
            |e| {
                e.last_channel = Some("telegram".into());
                e.origin = Some(SessionOrigin {
                    thread_id: Some(ThreadId::Number(7)),
                    ..SessionOrigin::default()
                });
            },
            Some(context(Some("telegram"), None, Some(ThreadId::Number(7)))),
        ),
    ];
    for (index, (name, shape, expected)) in cases.into_iter().enumerate() {
        let k = key(&format!("agent:main:dm:delivery-{index}"));
        let mut entry = SessionEntry::new("s", 1);
        shape(&mut entry);
        let stored = store.put(&k, entry).await.unwrap().entry;
        let got = store.get(&k).await.unwrap().expect("written").entry;
        assert_eq!(got, stored, "{name}: what put returns is what is stored");
        assert_eq!(got.delivery_context, expected, "{name}: deliveryContext");
        let expected = expected.unwrap_or_default();
        assert_eq!(
            (
                got.last_channel,
                got.last_to,
                got.last_account_id,
                got.last_thread_id
            ),
            (
                expected.channel,
                expected.to,
                expected.account_id,
                expected.thread_id
            ),
            "{name}: last* fields mirror deliveryContext"
        );
    }
}

/// `update` sees the current entry, and can create, change and delete it.
#[doc(hidden)]
pub async fn update_creates_changes_and_deletes<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:telegram:dm:42");
    let seen = store
        .update(&k, |slot| {
            let was = slot.clone();
            *slot = Some(SessionEntry::new("s-1", 1));
            was
        })
        .await
        .unwrap();
    assert_eq!(seen, None, "update of a missing key sees None");

    let seen = store
        .update(&k, |slot| {
            let entry = slot.as_mut().expect("entry exists");
            entry.label = Some("inbox".into());
            entry.session_id.clone()
        })
        .await
        .unwrap();
    assert_eq!(seen, "s-1");
    let got = store.get(&k).await.unwrap().unwrap();
    assert_eq!(got.entry.label.as_deref(), Some("inbox"));
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 1);

    store.update(&k, |slot| *slot = None).await.unwrap();
    assert!(
        store.get(&k).await.unwrap().is_none(),
        "set to None deletes"
    );
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 0);
}

/// `delete` returns the removed entry.
#[doc(hidden)]
pub async fn delete_returns_the_removed_entry<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:main");
    let entry = SessionEntry::new("s-1", 5);
    store.put(&k, entry.clone()).await.unwrap();
    assert_eq!(store.delete(&k).await.unwrap(), Some(entry));
    assert!(store.get(&k).await.unwrap().is_none());
    assert_eq!(store.delete(&k).await.unwrap(), None);
}

/// Revisions change with content and stay when nothing changes.
#[doc(hidden)]
pub async fn revisions_track_changes<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:main");
    let first = store
        .put(&k, SessionEntry::new("s-1", 1))
        .await
        .unwrap()
        .revision;
    let unchanged = store
        .apply(&k, &mut |_, _| Ok(()))
        .await
        .unwrap()
        .expect("entry exists")
        .revision;
    assert_eq!(first, unchanged, "a no-op update keeps the revision");
    let same_again = store
        .put(&k, SessionEntry::new("s-1", 1))
        .await
        .unwrap()
        .revision;
    assert_eq!(
        first, same_again,
        "putting an equal entry keeps the revision"
    );
    let changed = store
        .put(&k, SessionEntry::new("s-1", 2))
        .await
        .unwrap()
        .revision;
    assert_ne!(first, changed, "a change gives a new revision");
    assert_eq!(store.get(&k).await.unwrap().unwrap().revision, changed);
}

/// A mutator that fails writes nothing and its error reaches the caller unchanged.
#[doc(hidden)]
pub async fn failed_mutator_writes_nothing<S: SessionStore + ?Sized>(store: &S) {
    let existing = key("agent:main:main");
    let missing = key("agent:main:dm:ghost");
    store
        .put(&existing, SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    for k in [&existing, &missing] {
        let result = store
            .apply(k, &mut |slot, _| {
                *slot = Some(SessionEntry::new("should-not-be-written", 9));
                Err(Error::NotFound { key: k.clone() })
            })
            .await;
        assert!(
            matches!(result, Err(Error::NotFound { .. })),
            "mutator error returned: {result:?}"
        );
    }
    assert_eq!(
        store
            .get(&existing)
            .await
            .unwrap()
            .unwrap()
            .entry
            .session_id,
        "s-1"
    );
    assert!(store.get(&missing).await.unwrap().is_none());
}

/// `with_session` works on existing sessions and reports missing ones.
#[doc(hidden)]
pub async fn with_session_requires_an_entry<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:main");
    let result = store.with_session(&k, |_| ()).await;
    assert!(matches!(result, Err(Error::NotFound { .. })), "{result:?}");
    assert!(
        store.get(&k).await.unwrap().is_none(),
        "with_session creates nothing"
    );
    store.put(&k, SessionEntry::new("s-1", 1)).await.unwrap();
    let id = store
        .with_session(&k, |entry| {
            entry.compaction_count = Some(3);
            entry.session_id.clone()
        })
        .await
        .unwrap();
    assert_eq!(id, "s-1");
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().entry.compaction_count,
        Some(3)
    );
}

/// Compare-and-set succeeds on the expected revision and reports a conflict otherwise.
#[doc(hidden)]
pub async fn compare_and_set_detects_conflicts<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:main");
    let created = store
        .compare_and_set(&k, None, Some(SessionEntry::new("a", 1)))
        .await
        .unwrap()
        .expect("created");
    let again = store
        .compare_and_set(&k, None, Some(SessionEntry::new("b", 2)))
        .await;
    assert!(
        matches!(
            again,
            Err(Error::Conflict {
                expected: None,
                actual: Some(_),
                ..
            })
        ),
        "expected no entry but one exists: {again:?}"
    );
    let updated = store
        .compare_and_set(&k, Some(created.revision), Some(SessionEntry::new("c", 3)))
        .await
        .unwrap()
        .expect("updated");
    let stale = store
        .compare_and_set(&k, Some(created.revision), Some(SessionEntry::new("d", 4)))
        .await;
    assert!(
        matches!(stale, Err(Error::Conflict { .. })),
        "stale revision: {stale:?}"
    );
    assert_eq!(store.get(&k).await.unwrap().unwrap().entry.session_id, "c");
    store
        .compare_and_set(&k, Some(updated.revision), None)
        .await
        .unwrap();
    assert!(
        store.get(&k).await.unwrap().is_none(),
        "compare-and-set to None deletes"
    );
}

/// Fields the crate does not know survive a read-modify-write of other fields.
#[doc(hidden)]
pub async fn unknown_fields_survive_updates<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:whatsapp:group:120363@g.us");
    let entry = rich_entry("s-1", 1);
    store.put(&k, entry.clone()).await.unwrap();
    store
        .with_session(&k, |e| e.label = Some("family".into()))
        .await
        .unwrap();
    let got = store.get(&k).await.unwrap().unwrap().entry;
    assert_eq!(got.extra, entry.extra, "unknown fields and their order");
    assert_eq!(got.skills_snapshot, entry.skills_snapshot);
    assert_eq!(got.label.as_deref(), Some("family"));
}

/// Sessions of different agents never mix.
#[doc(hidden)]
pub async fn agents_are_isolated<S: SessionStore + ?Sized>(store: &S) {
    let main = key("agent:main:telegram:dm:42");
    let support = key("agent:support:telegram:dm:42");
    store
        .put(&main, SessionEntry::new("main-session", 1))
        .await
        .unwrap();
    store
        .put(&support, SessionEntry::new("support-session", 2))
        .await
        .unwrap();
    assert_eq!(
        store.get(&main).await.unwrap().unwrap().entry.session_id,
        "main-session"
    );
    assert_eq!(
        store.get(&support).await.unwrap().unwrap().entry.session_id,
        "support-session"
    );
    let support_only = store
        .list(&ListFilter::new().agent(AgentId::new("support").unwrap()))
        .await
        .unwrap();
    let keys: Vec<_> = support_only.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["agent:support:telegram:dm:42"]);
    store.delete(&main).await.unwrap();
    assert!(store.get(&support).await.unwrap().is_some());
}

/// `list` applies every filter, orders by `updatedAt` descending then key, and limits;
/// `count` agrees with it for every filter.
#[doc(hidden)]
pub async fn list_filters_and_orders<S: SessionStore + ?Sized>(store: &S) {
    let sessions = [
        (
            "agent:main:telegram:dm:alice",
            "telegram",
            ChatType::Direct,
            300,
        ),
        (
            "agent:main:whatsapp:group:family",
            "whatsapp",
            ChatType::Group,
            200,
        ),
        (
            "agent:main:slack:channel:c1",
            "slack",
            ChatType::Channel,
            200,
        ),
        (
            "agent:ops:telegram:dm:bob",
            "telegram",
            ChatType::Direct,
            100,
        ),
        ("global", "webchat", ChatType::Direct, 50),
    ];
    for (raw, channel, chat_type, updated_at) in sessions.clone() {
        let mut entry = SessionEntry::new(format!("id-{updated_at}"), updated_at);
        entry.channel = Some(channel.into());
        entry.chat_type = Some(chat_type);
        store.put(&key(raw), entry).await.unwrap();
    }
    let keys = |sessions: Vec<crate::store::StoredSession>| -> Vec<String> {
        sessions.into_iter().map(|s| s.key.to_string()).collect()
    };
    let all = keys(store.list(&ListFilter::new()).await.unwrap());
    assert_eq!(
        all,
        [
            "agent:main:telegram:dm:alice",
            "agent:main:slack:channel:c1",
            "agent:main:whatsapp:group:family",
            "agent:ops:telegram:dm:bob",
            "global",
        ],
        "newest first, ties by key"
    );
    let cases: Vec<(ListFilter, Vec<&str>)> = vec![
        (
            ListFilter::new().agent(AgentId::new("ops").unwrap()),
            vec!["agent:ops:telegram:dm:bob"],
        ),
        (
            ListFilter::new().key_prefix("agent:main:whatsapp"),
            vec!["agent:main:whatsapp:group:family"],
        ),
        (
            ListFilter::new().channel("Telegram"),
            vec!["agent:main:telegram:dm:alice", "agent:ops:telegram:dm:bob"],
        ),
        (
            ListFilter::new().chat_type(PeerKind::Group),
            vec!["agent:main:whatsapp:group:family"],
        ),
        (
            ListFilter::new().updated_before(200),
            vec!["agent:ops:telegram:dm:bob", "global"],
        ),
        (
            ListFilter::new().updated_after(100),
            vec![
                "agent:main:telegram:dm:alice",
                "agent:main:slack:channel:c1",
                "agent:main:whatsapp:group:family",
            ],
        ),
        (
            ListFilter::new().session_id("id-100"),
            vec!["agent:ops:telegram:dm:bob"],
        ),
        (ListFilter::new().session_id("id-1"), vec![]),
        (
            ListFilter::new().chat_type(PeerKind::Direct).limit(2),
            vec!["agent:main:telegram:dm:alice", "agent:ops:telegram:dm:bob"],
        ),
    ];
    for (filter, expected) in cases {
        assert_eq!(
            store.count(&filter).await.unwrap(),
            expected.len(),
            "count {filter:?}"
        );
        assert_eq!(
            keys(store.list(&filter).await.unwrap()),
            expected,
            "{filter:?}"
        );
    }
    assert_eq!(
        store.count(&ListFilter::new()).await.unwrap(),
        sessions.len()
    );
}

/// The status condition of a filter: by default listings hide `inactive` sessions;
/// [`ListFilter::all`], [`ListFilter::include_inactive`] and [`ListFilter::status`]
/// choose otherwise, and `count` agrees with `list` for each.
#[doc(hidden)]
pub async fn list_filters_by_status<S: SessionStore + ?Sized>(store: &S) {
    let sessions = [
        ("agent:main:cli:idle", None, 500),
        ("agent:main:cli:running", Some(SessionStatus::Running), 400),
        ("agent:main:cli:hidden", Some(SessionStatus::Inactive), 300),
        ("agent:main:cli:closed", Some(SessionStatus::Closed), 200),
        (
            "agent:main:cli:approval",
            Some(SessionStatus::AwaitingApproval),
            100,
        ),
    ];
    for (raw, status, updated_at) in sessions.clone() {
        let mut entry = SessionEntry::new(format!("id-{updated_at}"), updated_at);
        entry.status = status;
        store.put(&key(raw), entry).await.unwrap();
    }
    let keys = |sessions: Vec<crate::store::StoredSession>| -> Vec<String> {
        sessions.into_iter().map(|s| s.key.to_string()).collect()
    };
    let cases: Vec<(ListFilter, Vec<&str>)> = vec![
        (
            ListFilter::new(),
            vec![
                "agent:main:cli:idle",
                "agent:main:cli:running",
                "agent:main:cli:closed",
                "agent:main:cli:approval",
            ],
        ),
        (
            ListFilter::new().include_inactive(),
            vec![
                "agent:main:cli:idle",
                "agent:main:cli:running",
                "agent:main:cli:hidden",
                "agent:main:cli:closed",
                "agent:main:cli:approval",
            ],
        ),
        (
            ListFilter::all().limit(2),
            vec!["agent:main:cli:idle", "agent:main:cli:running"],
        ),
        (
            ListFilter::new().status(SessionStatus::Idle),
            vec!["agent:main:cli:idle"],
        ),
        (
            ListFilter::new().status(SessionStatus::Inactive),
            vec!["agent:main:cli:hidden"],
        ),
        (
            ListFilter::new()
                .status(SessionStatus::Running)
                .status(SessionStatus::AwaitingApproval),
            vec!["agent:main:cli:running", "agent:main:cli:approval"],
        ),
        (
            ListFilter::new().status(SessionStatus::Closed),
            vec!["agent:main:cli:closed"],
        ),
        (
            ListFilter::new().any_status().updated_before(350),
            vec![
                "agent:main:cli:hidden",
                "agent:main:cli:closed",
                "agent:main:cli:approval",
            ],
        ),
    ];
    for (filter, expected) in cases {
        assert_eq!(
            keys(store.list(&filter).await.unwrap()),
            expected,
            "{filter:?}"
        );
        assert_eq!(
            store.count(&filter).await.unwrap(),
            expected.len(),
            "count {filter:?}"
        );
    }
    assert_eq!(
        store.count(&ListFilter::all()).await.unwrap(),
        sessions.len()
    );
}

/// A session replaced under its key by one with another session id is kept, closed:
/// found by its id when closed sessions are asked for, never in a default listing, and
/// counted as listed. Deleting the key keeps it; [`Erase::remove_closed`](crate::store::Erase::remove_closed)
/// forgets it.
#[doc(hidden)]
pub async fn replaced_sessions_are_kept_closed<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:telegram:dm:42");
    let mut first = SessionEntry::new("first", 100);
    first.label = Some("trip".into());
    store.put(&k, first.clone()).await.unwrap();
    store
        .put(&k, SessionEntry::new("second", 200))
        .await
        .unwrap();
    store
        .put(&k, SessionEntry::new("third", 300))
        .await
        .unwrap();
    // A change that keeps the session id replaces nothing.
    store
        .with_session(&k, |e| e.label = Some("still third".into()))
        .await
        .unwrap();

    let ids = |sessions: Vec<crate::store::StoredSession>| -> Vec<String> {
        sessions.into_iter().map(|s| s.entry.session_id).collect()
    };
    let closed = ListFilter::new().status(SessionStatus::Closed);
    let cases: Vec<(ListFilter, Vec<&str>)> = vec![
        (ListFilter::new(), vec!["third"]),
        (ListFilter::all(), vec!["third"]),
        (closed.clone(), vec!["second", "first"]),
        (closed.clone().session_id("first"), vec!["first"]),
        (ListFilter::new().session_id("first"), vec![]),
        (
            ListFilter::new().any_status(),
            vec!["third", "second", "first"],
        ),
        (
            ListFilter::new().any_status().limit(2),
            vec!["third", "second"],
        ),
        (closed.clone().updated_after(150), vec!["second"]),
        (closed.clone().agent(AgentId::new("ops").unwrap()), vec![]),
        (ListFilter::new().status(SessionStatus::Idle), vec!["third"]),
    ];
    for (filter, expected) in cases {
        assert_eq!(
            ids(store.list(&filter).await.unwrap()),
            expected,
            "{filter:?}"
        );
        assert_eq!(
            store.count(&filter).await.unwrap(),
            expected.len(),
            "count {filter:?}"
        );
    }
    let kept = store
        .list(&closed.clone().session_id("first"))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(kept.key, k, "a closed session keeps its key");
    assert_eq!(kept.entry.status, Some(SessionStatus::Closed));
    assert_eq!(
        kept.entry.closed_at,
        Some(200),
        "closed when its successor began"
    );
    assert_eq!(kept.entry.label.as_deref(), Some("trip"), "kept as it was");
    assert_eq!(
        store.count(&ListFilter::all()).await.unwrap(),
        1,
        "the store's size"
    );

    store.delete(&k).await.unwrap();
    assert_eq!(
        ids(store.list(&closed).await.unwrap()),
        ["second", "first"],
        "deleting is no replacement: the deleted session goes, the closed ones stay"
    );
    // A store that keeps closed sessions can forget them.
    let erase = store
        .as_erase()
        .expect("a store that keeps closed sessions erases them (SessionStore::as_erase)");
    let removed = erase
        .remove_closed(&["first".to_owned(), "unknown".to_owned()])
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(ids(store.list(&closed).await.unwrap()), ["second"]);
}

/// Pages of a listing, each after the cursor of the one before, list every session
/// once, in listing order — ties of `updatedAt` and closed sessions of one key
/// included — and stay so while sessions change between pages: a session updated
/// since moves to the front (the next listing from the top shows it), the others are
/// neither repeated nor skipped.
pub async fn pages_list_every_session_once<S: SessionStore + ?Sized>(store: &S) {
    // Twelve sessions, three to each `updatedAt`, and two closed ones.
    for n in 0..12u64 {
        let k = key(&format!("agent:main:cli:p{:02}", (n * 7) % 12));
        store
            .put(&k, SessionEntry::new(format!("s{n}"), 1_000 + n / 3))
            .await
            .unwrap();
    }
    let replaced = key("agent:main:cli:p05");
    for (id, at) in [("r1", 1_001), ("r2", 1_002)] {
        store
            .put(&replaced, SessionEntry::new(id, at))
            .await
            .unwrap();
    }
    for filter in [ListFilter::new(), ListFilter::new().any_status()] {
        let whole = store.list(&filter).await.unwrap();
        for limit in [1, 2, 5, whole.len(), whole.len() + 1] {
            let mut paged = Vec::new();
            let mut page_filter = filter.clone().limit(limit);
            loop {
                let page = store.list(&page_filter).await.unwrap();
                assert!(page.len() <= limit);
                assert_eq!(
                    store.count(&page_filter).await.unwrap(),
                    page.len(),
                    "count {page_filter:?}"
                );
                paged.extend(page.iter().map(|s| s.entry.session_id.clone()));
                match page_filter.next_page(&page) {
                    Some(cursor) => page_filter = page_filter.after(cursor),
                    None => break,
                }
                assert!(paged.len() <= whole.len(), "pages never end: {paged:?}");
            }
            let expected: Vec<String> = whole.iter().map(|s| s.entry.session_id.clone()).collect();
            assert_eq!(paged, expected, "pages of {limit}, {filter:?}");
        }
    }

    // Sessions change between pages: the first page is read, then the newest session
    // of the next page is updated and a session is created.
    let filter = ListFilter::new().limit(4);
    let first = store.list(&filter).await.unwrap();
    let before: Vec<String> = store
        .list(&ListFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.entry.session_id)
        .collect();
    let next = filter.clone().after(filter.next_page(&first).unwrap());
    let moved = store.list(&next).await.unwrap()[0].clone();
    store
        .with_session(&moved.key, |e| e.updated_at = 5_000)
        .await
        .unwrap();
    store
        .put(&key("agent:main:cli:new"), SessionEntry::new("new", 6_000))
        .await
        .unwrap();
    let mut rest = Vec::new();
    let mut page_filter = next;
    loop {
        let page = store.list(&page_filter).await.unwrap();
        rest.extend(page.iter().map(|s| s.entry.session_id.clone()));
        match page_filter.next_page(&page) {
            Some(cursor) => page_filter = page_filter.after(cursor),
            None => break,
        }
    }
    let expected: Vec<String> = before[4..]
        .iter()
        .filter(|id| **id != moved.entry.session_id)
        .cloned()
        .collect();
    assert_eq!(
        rest, expected,
        "the pages after the first, while sessions change"
    );
}

/// At most [`CLOSED_SESSIONS_PER_KEY`](crate::store::CLOSED_SESSIONS_PER_KEY) closed
/// sessions are kept per key: the oldest go first, other keys keep theirs.
#[doc(hidden)]
pub async fn closed_sessions_are_bounded_per_key<S: SessionStore + ?Sized>(store: &S) {
    let busy = key("agent:main:cli:busy");
    let quiet = key("agent:main:cli:quiet");
    store.put(&quiet, SessionEntry::new("q0", 1)).await.unwrap();
    store.put(&quiet, SessionEntry::new("q1", 2)).await.unwrap();
    let bound = crate::store::CLOSED_SESSIONS_PER_KEY as u64;
    for n in 0..=bound + 2 {
        store
            .put(&busy, SessionEntry::new(format!("b{n}"), 10 + n))
            .await
            .unwrap();
    }
    let closed = ListFilter::new().status(SessionStatus::Closed);
    let busy_closed: Vec<String> = store
        .list(&closed.clone().key_prefix(busy.as_str()))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.entry.session_id)
        .collect();
    let expected: Vec<String> = (2..=bound + 1).rev().map(|n| format!("b{n}")).collect();
    assert_eq!(
        busy_closed, expected,
        "the newest closed sessions of the key"
    );
    let quiet_closed = store
        .count(&closed.key_prefix(quiet.as_str()))
        .await
        .unwrap();
    assert_eq!(quiet_closed, 1, "another key keeps its closed session");
}

/// Closed sessions a copy carries are added once each, under their keys, never over a
/// session the store holds (current or closed).
#[doc(hidden)]
pub async fn closed_sessions_are_added_once<S: SessionStore + ?Sized>(store: &S) {
    let Some(erase) = store.as_erase() else {
        return;
    };
    let moved = key("agent:main:cli:moved");
    store
        .put(&moved, SessionEntry::new("m-now", 100))
        .await
        .unwrap();
    let mut closed = SessionEntry::new("m-old", 50);
    closed.status = Some(SessionStatus::Closed);
    closed.closed_at = Some(60);
    let copies = [
        StoredSession {
            key: moved.clone(),
            entry: closed.clone(),
            revision: Revision::of_bytes(b""),
        },
        // The current session's id: never added as closed.
        StoredSession {
            key: moved.clone(),
            entry: SessionEntry::new("m-now", 90),
            revision: Revision::of_bytes(b""),
        },
    ];
    assert_eq!(erase.add_closed(&copies).await.unwrap(), 1);
    assert_eq!(erase.add_closed(&copies).await.unwrap(), 0, "added once");
    let listed: Vec<(String, Option<SessionStatus>)> = store
        .list(&ListFilter::new().any_status().key_prefix(moved.as_str()))
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.entry.session_id, s.entry.status))
        .collect();
    assert_eq!(
        listed,
        [
            ("m-now".to_owned(), None),
            ("m-old".to_owned(), Some(SessionStatus::Closed))
        ]
    );
    assert_eq!(
        store.get(&moved).await.unwrap().unwrap().entry.session_id,
        "m-now",
        "the current session is untouched"
    );
}

/// Adds one to the entry's `compactionCount`, creating the entry if needed.
async fn increment<S: SessionStore + ?Sized>(store: &S, k: &SessionKey) {
    store
        .update(k, |slot| {
            let entry = slot.get_or_insert_with(|| SessionEntry::new("counter", 1));
            entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
        })
        .await
        .unwrap();
}

/// Concurrent read-modify-writes of one key lose no update.
#[doc(hidden)]
pub async fn concurrent_updates_to_one_key_lose_nothing<S>(store: &S)
where
    S: SessionStore + Clone + 'static,
{
    const TASKS: u64 = 8;
    const UPDATES: u64 = 25;
    let k = Arc::new(key("agent:main:main"));
    let mut tasks = JoinSet::new();
    for _ in 0..TASKS {
        let (store, k) = (store.clone(), k.clone());
        tasks.spawn(async move {
            for _ in 0..UPDATES {
                increment(&store, &k).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    let count = store.get(&k).await.unwrap().unwrap().entry.compaction_count;
    assert_eq!(count, Some(TASKS * UPDATES), "every increment is kept");
}

/// Concurrent updates of distinct keys lose no key and no update.
#[doc(hidden)]
pub async fn concurrent_updates_to_distinct_keys_lose_nothing<S>(store: &S)
where
    S: SessionStore + Clone + 'static,
{
    const TASKS: u64 = 12;
    const UPDATES: u64 = 5;
    let mut tasks = JoinSet::new();
    for task in 0..TASKS {
        let store = store.clone();
        tasks.spawn(async move {
            let k = key(&format!("agent:main:telegram:dm:user{task}"));
            for _ in 0..UPDATES {
                increment(&store, &k).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    assert_eq!(
        store.count(&ListFilter::new()).await.unwrap() as u64,
        TASKS,
        "every key is kept"
    );
    for task in 0..TASKS {
        let k = key(&format!("agent:main:telegram:dm:user{task}"));
        let count = store.get(&k).await.unwrap().unwrap().entry.compaction_count;
        assert_eq!(count, Some(UPDATES), "{k}");
    }
}

/// Racing to create one session creates exactly one.
#[doc(hidden)]
pub async fn racing_creators_create_one_session<S>(store: &S)
where
    S: SessionStore + Clone + 'static,
{
    let k = Arc::new(key("agent:main:telegram:dm:new"));
    let mut tasks = JoinSet::new();
    for _ in 0..8 {
        let (store, k) = (store.clone(), k.clone());
        tasks.spawn(async move {
            store
                .update(&k, |slot| {
                    slot.get_or_insert_with(|| SessionEntry::new_session(1))
                        .session_id
                        .clone()
                })
                .await
                .unwrap()
        });
    }
    let mut ids = std::collections::HashSet::new();
    while let Some(joined) = tasks.join_next().await {
        ids.insert(joined.unwrap());
    }
    assert_eq!(ids.len(), 1, "every racer sees the one session: {ids:?}");
}

/// The session id and revision of each slot, in order.
fn seen(slots: &Slots) -> Vec<(String, Option<String>, Option<Revision>)> {
    slots
        .iter()
        .map(|slot| {
            (
                slot.key().to_string(),
                slot.entry.as_ref().map(|e| e.session_id.clone()),
                slot.revision(),
            )
        })
        .collect()
}

/// `apply_many` shows the mutator every requested session with its revision, and
/// writes what it did to each — create, change, delete, leave alone — in one call; it
/// returns the sessions as stored afterwards.
#[doc(hidden)]
pub async fn update_many_creates_changes_and_deletes<S: MultiKeyStore + ?Sized>(store: &S) {
    let changed = key("agent:main:telegram:dm:changed");
    let deleted = key("agent:main:telegram:dm:deleted");
    let created = key("agent:main:telegram:dm:created");
    let untouched = key("agent:main:telegram:dm:untouched");
    let mut revisions = std::collections::HashMap::new();
    for (k, id) in [
        (&changed, "s-changed"),
        (&deleted, "s-deleted"),
        (&untouched, "s-untouched"),
    ] {
        let stored = store.put(k, SessionEntry::new(id, 1)).await.unwrap();
        revisions.insert(k.clone(), stored.revision);
    }
    let keys = [
        changed.clone(),
        deleted.clone(),
        created.clone(),
        untouched.clone(),
    ];
    let mut before = None;
    let after = store
        .apply_many(&keys, &mut |slots| {
            before = Some(seen(slots));
            for slot in slots.iter_mut() {
                match slot.key().as_str() {
                    "agent:main:telegram:dm:changed" => {
                        slot.entry.as_mut().expect("exists").label = Some("inbox".into());
                    }
                    "agent:main:telegram:dm:deleted" => slot.entry = None,
                    "agent:main:telegram:dm:created" => {
                        slot.entry = Some(SessionEntry::new("s-created", 2));
                    }
                    _ => {}
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    let revision = |k: &SessionKey| revisions.get(k).copied();
    assert_eq!(
        before.expect("the mutator ran"),
        vec![
            (
                changed.to_string(),
                Some("s-changed".into()),
                revision(&changed)
            ),
            (
                deleted.to_string(),
                Some("s-deleted".into()),
                revision(&deleted)
            ),
            (created.to_string(), None, None),
            (
                untouched.to_string(),
                Some("s-untouched".into()),
                revision(&untouched)
            ),
        ],
        "the mutator sees every session as stored, in the order given"
    );
    // (key, session id after, whether its revision is the one read)
    let expected = [
        (&changed, Some("s-changed"), false),
        (&deleted, None, false),
        (&created, Some("s-created"), false),
        (&untouched, Some("s-untouched"), true),
    ];
    assert_eq!(after.len(), expected.len());
    for ((k, id, same_revision), slot) in expected.into_iter().zip(after.iter()) {
        assert_eq!(
            slot.key(),
            k,
            "what apply_many returns is in the order given"
        );
        let stored = store.get(k).await.unwrap();
        assert_eq!(
            stored.as_ref().map(|s| s.entry.session_id.as_str()),
            id,
            "{k}: as written"
        );
        assert_eq!(
            stored.as_ref().map(|s| &s.entry),
            slot.entry.as_ref(),
            "{k}: returned as stored"
        );
        assert_eq!(
            stored.as_ref().map(|s| s.revision),
            slot.revision(),
            "{k}: the returned revision is the stored one"
        );
        if id.is_some() {
            assert_eq!(
                slot.revision() == revision(k),
                same_revision,
                "{k}: a revision changes exactly when the entry does"
            );
        }
    }
    assert_eq!(
        store
            .get(&changed)
            .await
            .unwrap()
            .unwrap()
            .entry
            .label
            .as_deref(),
        Some("inbox")
    );
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 3);
}

/// An entry whose session id could not name a transcript file (`a/b`, `../x`, `.hidden`,
/// empty) is refused before anything is written.
#[doc(hidden)]
pub async fn unusable_session_ids_are_refused<S: SessionStore + ?Sized>(store: &S) {
    let k = key("agent:main:telegram:dm:ids");
    for bad in UNUSABLE_SESSION_IDS {
        let put = store.put(&k, SessionEntry::new(bad, 1)).await;
        assert!(
            matches!(put, Err(crate::Error::InvalidId { .. })),
            "{bad:?}: {put:?}"
        );
        assert!(store.get(&k).await.unwrap().is_none(), "{bad:?}");
    }
    // A usable id is written; changing other fields keeps it.
    store
        .put(&k, SessionEntry::new("s-1.ok_id", 1))
        .await
        .unwrap();
    store
        .with_session(&k, |e| e.label = Some("fine".into()))
        .await
        .unwrap();
}

const UNUSABLE_SESSION_IDS: [&str; 5] = ["a/b", "../../../pwned", ".hidden", "", "with space"];

/// A multi-key update refuses an unusable session id as a single-key one does, writing
/// nothing.
#[doc(hidden)]
pub async fn update_many_refuses_unusable_session_ids<S: MultiKeyStore + ?Sized>(store: &S) {
    let k = key("agent:main:telegram:dm:many-ids");
    for bad in UNUSABLE_SESSION_IDS {
        let many = store
            .apply_many(std::slice::from_ref(&k), &mut |slots| {
                for slot in slots.iter_mut() {
                    slot.entry = Some(SessionEntry::new(bad, 1));
                }
                Ok(())
            })
            .await;
        assert!(
            matches!(many, Err(crate::Error::InvalidId { .. })),
            "{bad:?}: {many:?}"
        );
        assert!(store.get(&k).await.unwrap().is_none(), "{bad:?}");
    }
}

/// A session a multi-key update replaces (a new session id under its key) is kept
/// closed, as a single-key update keeps it.
#[doc(hidden)]
pub async fn update_many_keeps_replaced_sessions_closed<S: MultiKeyStore + ?Sized>(store: &S) {
    let a = key("agent:main:telegram:dm:a");
    let b = key("agent:main:telegram:dm:b");
    store
        .put(&a, SessionEntry::new("a-old", 100))
        .await
        .unwrap();
    store
        .put(&b, SessionEntry::new("b-same", 100))
        .await
        .unwrap();
    store
        .apply_many(&[a.clone(), b.clone()], &mut |slots| {
            for slot in slots.iter_mut() {
                match slot.key().as_str() {
                    "agent:main:telegram:dm:a" => {
                        slot.entry = Some(SessionEntry::new("a-new", 200))
                    }
                    _ => slot.entry.as_mut().expect("exists").label = Some("kept".into()),
                }
            }
            Ok(())
        })
        .await
        .unwrap();
    let closed: Vec<String> = store
        .list(&ListFilter::new().status(SessionStatus::Closed))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.entry.session_id)
        .collect();
    assert_eq!(closed, ["a-old"]);
}

/// A key given twice is one slot (where it first appeared); no keys is no slot, and
/// the mutator still runs once.
#[doc(hidden)]
pub async fn update_many_merges_duplicate_keys<S: MultiKeyStore + ?Sized>(store: &S) {
    let a = key("agent:main:telegram:dm:a");
    let b = key("agent:main:telegram:dm:b");
    let cases: [(&str, Vec<SessionKey>, Vec<&SessionKey>); 4] = [
        ("no keys", vec![], vec![]),
        ("one key twice", vec![a.clone(), a.clone()], vec![&a]),
        (
            "two keys, each twice",
            vec![b.clone(), a.clone(), b.clone(), a.clone()],
            vec![&b, &a],
        ),
        (
            "two distinct keys",
            vec![a.clone(), b.clone()],
            vec![&a, &b],
        ),
    ];
    for (name, keys, distinct) in cases {
        let mut runs = 0;
        let slot_keys = store
            .update_many(&keys, |slots| {
                runs += 1;
                for slot in slots.iter_mut() {
                    let entry = slot
                        .entry
                        .get_or_insert_with(|| SessionEntry::new("counter", 1));
                    entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
                }
                slots.keys().cloned().collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(runs, 1, "{name}: the mutator runs once");
        let distinct: Vec<SessionKey> = distinct.into_iter().cloned().collect();
        assert_eq!(slot_keys, distinct, "{name}: one slot per distinct key");
    }
    // a: once in each of the three cases naming it; b: once in each of two.
    for (k, count) in [(&a, 3), (&b, 2)] {
        let stored = store.get(k).await.unwrap().unwrap().entry.compaction_count;
        assert_eq!(
            stored,
            Some(count),
            "{k}: one increment per call, not per mention"
        );
    }
}

/// A multi-key mutator that fails writes nothing, whatever it changed first, and its
/// error reaches the caller unchanged.
#[doc(hidden)]
pub async fn failed_many_mutator_writes_nothing<S: MultiKeyStore + ?Sized>(store: &S) {
    let existing = key("agent:main:telegram:dm:existing");
    let missing = key("agent:main:telegram:dm:missing");
    let original = store
        .put(&existing, SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    type Change = fn(&mut Slots);
    let cases: [(&str, Change); 3] = [
        ("changes nothing", |_| {}),
        ("changes every session", |slots| {
            for slot in slots.iter_mut() {
                slot.entry = Some(SessionEntry::new("should-not-be-written", 9));
            }
        }),
        ("deletes every session", |slots| {
            for slot in slots.iter_mut() {
                slot.entry = None;
            }
        }),
    ];
    for (name, change) in cases {
        let result = store
            .apply_many(&[existing.clone(), missing.clone()], &mut |slots| {
                change(slots);
                Err(Error::NotFound {
                    key: missing.clone(),
                })
            })
            .await;
        assert!(
            matches!(&result, Err(Error::NotFound { key }) if *key == missing),
            "{name}: the mutator's error is returned: {result:?}"
        );
        assert_eq!(
            store.get(&existing).await.unwrap(),
            Some(original.clone()),
            "{name}: the existing session is untouched"
        );
        assert!(
            store.get(&missing).await.unwrap().is_none(),
            "{name}: nothing is created"
        );
    }
}

/// A multi-key mutator that panics writes nothing, and the store keeps serving
/// (no lock or transaction is left behind).
#[doc(hidden)]
pub async fn panicking_many_mutator_writes_nothing<S>(store: &S)
where
    S: MultiKeyStore + Clone + 'static,
{
    let existing = key("agent:main:telegram:dm:existing");
    let missing = key("agent:main:telegram:dm:missing");
    let original = store
        .put(&existing, SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    let keys = vec![existing.clone(), missing.clone()];
    let (panicking, task_keys) = (store.clone(), keys.clone());
    let joined = tokio::spawn(async move {
        panicking
            .update_many(&task_keys, |slots| {
                for slot in slots.iter_mut() {
                    slot.entry = Some(SessionEntry::new("should-not-be-written", 9));
                }
                panic!("the mutator panics (this panic is expected by the test)");
            })
            .await
    })
    .await;
    assert!(
        joined.as_ref().is_err_and(|e| e.is_panic()),
        "the panic reaches the task"
    );
    assert_eq!(store.get(&existing).await.unwrap(), Some(original));
    assert!(store.get(&missing).await.unwrap().is_none());
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        store.update_many(&keys, |slots| {
            for slot in slots.iter_mut() {
                slot.entry
                    .get_or_insert_with(|| SessionEntry::new("s-2", 2))
                    .label = Some("after".into());
            }
        }),
    )
    .await
    .expect("the store is not left locked")
    .unwrap();
    for k in &keys {
        let label = store.get(k).await.unwrap().unwrap().entry.label;
        assert_eq!(label.as_deref(), Some("after"), "{k}");
    }
}

/// Every entry a multi-key update changes is written with OpenClaw's saved delivery
/// fields, as a single-key update writes it; an entry it leaves alone is not
/// rewritten.
#[doc(hidden)]
pub async fn update_many_normalises_changed_entries<S: MultiKeyStore + ?Sized>(store: &S) {
    let untouched = key("agent:main:telegram:dm:untouched");
    let kept = store
        .put(&untouched, SessionEntry::new("s-0", 1))
        .await
        .unwrap();
    let keys = [
        key("agent:main:telegram:dm:one"),
        key("agent:main:telegram:dm:two"),
        untouched.clone(),
    ];
    store
        .update_many(&keys, |slots| {
            for slot in slots.iter_mut() {
                if slot.entry.is_none() {
                    let mut entry = SessionEntry::new("s", 1);
                    entry.last_channel = Some(" Telegram ".into());
                    entry.last_to = Some(" 42 ".into());
                    slot.entry = Some(entry);
                }
            }
        })
        .await
        .unwrap();
    for k in &keys[..2] {
        let entry = store.get(k).await.unwrap().unwrap().entry;
        assert_eq!(entry.last_channel.as_deref(), Some("telegram"), "{k}");
        assert_eq!(entry.last_to.as_deref(), Some("42"), "{k}");
        assert_eq!(
            entry.delivery_context,
            Some(DeliveryContext {
                channel: Some("telegram".into()),
                to: Some("42".into()),
                ..DeliveryContext::default()
            }),
            "{k}"
        );
    }
    assert_eq!(
        store.get(&untouched).await.unwrap().unwrap().revision,
        kept.revision,
        "an entry left alone keeps its revision"
    );
}

/// Keys of different agents are either updated together or refused with
/// [`Error::NotAtomic`], and then nothing is written.
#[doc(hidden)]
pub async fn update_many_across_agents_is_atomic_or_refused<S: MultiKeyStore + ?Sized>(store: &S) {
    let keys = [
        key("agent:main:telegram:dm:42"),
        key("agent:ops:telegram:dm:42"),
    ];
    let result = store
        .update_many(&keys, |slots| {
            for slot in slots.iter_mut() {
                slot.entry = Some(SessionEntry::new("s", 1));
            }
        })
        .await;
    let stored = store.count(&ListFilter::new()).await.unwrap();
    match result {
        Ok(()) => assert_eq!(stored, 2, "both sessions written"),
        Err(Error::NotAtomic { .. }) => assert_eq!(stored, 0, "refused: nothing written"),
        Err(other) => panic!("neither written nor refused: {other:?}"),
    }
}

/// Concurrent multi-key updates over overlapping keys, in different orders, lose no
/// increment and never deadlock.
#[doc(hidden)]
pub async fn concurrent_many_updates_over_overlapping_keys_lose_nothing<S>(store: &S)
where
    S: MultiKeyStore + Clone + 'static,
{
    const UPDATES: u64 = 10;
    let [a, b, c] = [
        key("agent:main:telegram:dm:a"),
        key("agent:main:telegram:dm:b"),
        key("agent:main:telegram:dm:c"),
    ];
    // Each task increments every session of its keys, UPDATES times.
    let tasks_keys = [
        vec![a.clone(), b.clone()],
        vec![b.clone(), c.clone()],
        vec![c.clone(), a.clone()],
        vec![c.clone(), b.clone(), a.clone()],
        vec![a.clone(), b.clone()],
        vec![b.clone()],
    ];
    let mut tasks = JoinSet::new();
    // And single-key updates of one of them meanwhile.
    let single = store.clone();
    let single_key = b.clone();
    tasks.spawn(async move {
        for _ in 0..UPDATES {
            increment(&single, &single_key).await;
        }
    });
    for keys in tasks_keys.clone() {
        let store = store.clone();
        tasks.spawn(async move {
            for _ in 0..UPDATES {
                store
                    .update_many(&keys, |slots| {
                        for slot in slots.iter_mut() {
                            let entry = slot
                                .entry
                                .get_or_insert_with(|| SessionEntry::new("counter", 1));
                            entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
                        }
                    })
                    .await
                    .unwrap();
            }
        });
    }
    let all = async {
        while let Some(joined) = tasks.join_next().await {
            joined.unwrap();
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect("no deadlock");
    for k in [&a, &b, &c] {
        let mut calls = tasks_keys.iter().filter(|keys| keys.contains(k)).count() as u64;
        if *k == b {
            calls += 1;
        }
        let count = store.get(k).await.unwrap().unwrap().entry.compaction_count;
        assert_eq!(count, Some(calls * UPDATES), "{k}: every increment is kept");
    }
}

/// Runs the conformance suite of a [`SessionStore`] against a store made by `$make`, one
/// `#[tokio::test]` per behaviour.
///
/// `$make` is an expression evaluated afresh in every test; awaited, it yields
/// `(store, guard)`, where the guard lives as long as the test (a temporary directory,
/// say, or `()`). The store must be `Clone + 'static` (handles to one store).
///
/// ```ignore
/// async fn memory() -> (agent_sessions::InMemoryStore, ()) {
///     (agent_sessions::InMemoryStore::new(), ())
/// }
/// agent_sessions::store_conformance_tests!(memory());
/// ```
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr $(; $(#[$attr:meta])*)?) => {
        $crate::store_conformance_tests!(@each $make; [$($(#[$attr])*)?];
            get_of_missing_key_is_none,
            put_then_get_returns_the_entry,
            written_entries_have_openclaw_delivery_fields,
            update_creates_changes_and_deletes,
            delete_returns_the_removed_entry,
            revisions_track_changes,
            failed_mutator_writes_nothing,
            with_session_requires_an_entry,
            compare_and_set_detects_conflicts,
            unknown_fields_survive_updates,
            agents_are_isolated,
            list_filters_and_orders,
            list_filters_by_status,
            replaced_sessions_are_kept_closed,
            pages_list_every_session_once,
            closed_sessions_are_bounded_per_key,
            closed_sessions_are_added_once,
            concurrent_updates_to_one_key_lose_nothing,
            concurrent_updates_to_distinct_keys_lose_nothing,
            racing_creators_create_one_session,
            unusable_session_ids_are_refused,
        );
    };
    (@each $make:expr; $attrs:tt; $($name:ident),+ $(,)?) => {
        $( $crate::store_conformance_tests!(@one $make; $attrs; $name); )+
    };
    (@one $make:expr; [$(#[$attr:meta])*]; $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $(#[$attr])*
        async fn $name() {
            let (store, _guard) = $make.await;
            $crate::store::testing::$name(&store).await;
        }
    };
}

/// Runs the conformance cases of a [`MultiKeyStore`] — updates of several sessions at
/// once — against a store made by `$make`, as
/// [`store_conformance_tests!`](crate::store_conformance_tests) runs the rest (call both
/// for a store that has the capability).
///
/// ```ignore
/// async fn memory() -> (agent_sessions::InMemoryStore, ()) {
///     (agent_sessions::InMemoryStore::new(), ())
/// }
/// agent_sessions::multi_key_conformance_tests!(memory());
/// ```
#[macro_export]
macro_rules! multi_key_conformance_tests {
    ($make:expr $(; $(#[$attr:meta])*)?) => {
        $crate::store_conformance_tests!(@each $make; [$($(#[$attr])*)?];
            update_many_creates_changes_and_deletes,
            update_many_merges_duplicate_keys,
            update_many_keeps_replaced_sessions_closed,
            update_many_refuses_unusable_session_ids,
            failed_many_mutator_writes_nothing,
            panicking_many_mutator_writes_nothing,
            update_many_normalises_changed_entries,
            update_many_across_agents_is_atomic_or_refused,
            concurrent_many_updates_over_overlapping_keys_lose_nothing,
        );
    };
}

/// Runs the conformance suite of a [`ChatterBuffer`](crate::inbound::ChatterBuffer)
/// against buffers made by `$make`, one `#[tokio::test]` per behaviour.
///
/// `$make` is called as `$make(limit, max_keys)` — the entries kept per group and the
/// groups kept — afresh for every buffer a test needs; awaited, it yields
/// `(buffer, guard)` over empty storage, the guard living as long as the test. The
/// tests run on several threads, so a guard that tidies up as it drops (a database
/// schema, say) may block one while the buffer's connections are served by another.
///
/// ```ignore
/// async fn fresh(limit: usize, max_keys: usize) -> (agent_sessions::inbound::InMemoryChatter, ()) {
///     (agent_sessions::inbound::InMemoryChatter::new(limit, max_keys), ())
/// }
/// agent_sessions::chatter_conformance_tests!(fresh);
/// ```
#[macro_export]
macro_rules! chatter_conformance_tests {
    ($make:expr $(; $(#[$attr:meta])*)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn chatter_is_bounded_per_group_and_over_groups() {
            let guards = ::std::sync::Mutex::new(::std::vec::Vec::new());
            $crate::store::testing::chatter::bounded_per_group_and_over_groups(|_, limit, max_keys| {
                let guards = &guards;
                async move {
                    let (buffer, guard) = ($make)(limit, max_keys).await;
                    guards.lock().unwrap().push(guard);
                    buffer
                }
            })
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn chatter_entries_keep_every_field() {
            let (buffer, _guard) = ($make)(50, 1000).await;
            $crate::store::testing::chatter::entries_keep_every_field(buffer).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn chatter_claims_hand_entries_over_exactly_once() {
            let (buffer, _guard) = ($make)(3, 10).await;
            $crate::store::testing::chatter::claims_hand_entries_over_exactly_once(buffer, 3).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn chatter_groups_travel_whole() {
            let (source, _source) = ($make)(50, 1000).await;
            let (target, _target) = ($make)(50, 1000).await;
            $crate::store::testing::chatter::groups_travel_whole(source, target).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn chatter_take_is_atomic_beside_concurrent_appends() {
            let (buffer, _guard) = ($make)(1000, 10).await;
            let buffer = ::std::sync::Arc::new(buffer);
            $crate::store::testing::chatter::take_is_atomic_beside_concurrent_appends(
                [buffer.clone(), buffer.clone()],
                buffer,
                200,
            )
            .await;
        }
    };
}

/// Runs the conformance suite of a [`SystemEvents`](crate::inbound::SystemEvents) queue
/// against queues made by `$make`, one `#[tokio::test]` per behaviour.
///
/// `$make` is called as `$make(max_events, max_sessions)` — the events kept per session
/// and the sessions kept — afresh for every queue a test needs; awaited, it yields
/// `(queue, guard)` over empty storage, the guard living as long as the test (the tests
/// run on several threads, as for [`chatter_conformance_tests!`]).
///
/// ```ignore
/// async fn fresh(events: usize, sessions: usize) -> (agent_sessions::inbound::SystemEventQueue, ()) {
///     (agent_sessions::inbound::SystemEventQueue::with_limits(events, sessions), ())
/// }
/// agent_sessions::system_events_conformance_tests!(fresh);
/// ```
#[macro_export]
macro_rules! system_events_conformance_tests {
    ($make:expr $(; $(#[$attr:meta])*)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn system_events_are_bounded_and_skip_repeats() {
            let guards = ::std::sync::Mutex::new(::std::vec::Vec::new());
            $crate::store::testing::system_events::bounded_and_skipping_repeats(
                |_, max_events, max_sessions| {
                    let guards = &guards;
                    async move {
                        let (queue, guard) = ($make)(max_events, max_sessions).await;
                        guards.lock().unwrap().push(guard);
                        queue
                    }
                },
                // Stores that order sessions by a file's time need their writes apart.
                ::std::time::Duration::from_millis(20),
            )
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn system_events_keep_text_and_time() {
            let (queue, _guard) = ($make)(20, 1000).await;
            $crate::store::testing::system_events::events_keep_text_and_time(queue).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn system_events_travel_whole() {
            let (source, _source) = ($make)(20, 1000).await;
            let (target, _target) = ($make)(20, 1000).await;
            $crate::store::testing::system_events::queues_travel_whole(source, target).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($(#[$attr])*)?
        async fn system_events_drain_once_beside_concurrent_enqueues() {
            let (queue, _guard) = ($make)(1000, 10).await;
            let queue = ::std::sync::Arc::new(queue);
            $crate::store::testing::system_events::drain_once_beside_concurrent_enqueues(
                [queue.clone(), queue.clone()],
                [queue.clone(), queue],
                200,
            )
            .await;
        }
    };
}
