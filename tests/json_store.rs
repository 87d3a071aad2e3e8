//! The JSON file store: OpenClaw compatibility, bad inputs, locking and caching.

mod common;

use std::fs;
use std::time::{Duration, Instant, SystemTime};

use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::prelude::*;
use agent_sessions::{CorruptProblem, Error, JsonFileOptions};
use indexmap::IndexMap;
use serde_json::value::RawValue;

use common::{file_names, main_store_file, openclaw_fixture, store};

type RawObject = IndexMap<String, Box<RawValue>>;

fn raw_object(text: &str) -> RawObject {
    serde_json::from_str(text).expect("a JSON object")
}

fn key(raw: &str) -> SessionKey {
    SessionKey::parse(raw).unwrap()
}

/// Writes the main agent's lock file under `root` with `content`, as another process
/// holding (or having held) the lock would.
fn write_lock_file(root: &std::path::Path, content: &str) -> std::path::PathBuf {
    let lock = main_store_file(root).with_extension("json.lock");
    fs::create_dir_all(lock.parent().unwrap()).unwrap();
    fs::write(&lock, content).unwrap();
    lock
}

#[tokio::test]
async fn openclaw_store_round_trips_unknown_fields_byte_for_byte() {
    let dir = openclaw_fixture();
    let file = main_store_file(dir.path());
    let before = fs::read_to_string(&file).unwrap();
    let store = store(dir.path());

    let updated = key("agent:main:main");
    store
        .with_session(&updated, |entry| entry.label = Some("inbox".into()))
        .await
        .unwrap();

    let after = fs::read_to_string(&file).unwrap();
    let (old, new) = (raw_object(&before), raw_object(&after));
    assert_eq!(
        old.keys().collect::<Vec<_>>(),
        new.keys().collect::<Vec<_>>(),
        "entries keep their order"
    );
    for (k, old_raw) in &old {
        if k != updated.as_str() {
            assert_eq!(
                old_raw.get(),
                new[k].get(),
                "untouched entry {k} is byte-identical"
            );
        }
    }
    let (old_entry, new_entry) = (
        raw_object(old[updated.as_str()].get()),
        raw_object(new[updated.as_str()].get()),
    );
    let unknown = [
        "lastRunId",
        "startedAt",
        "costUsd",
        "tags",
        "notes",
        "emptyList",
        "emptyObject",
        "nothing",
    ];
    for field in unknown {
        assert_eq!(
            old_entry[field].get(),
            new_entry[field].get(),
            "unknown field {field} is byte-identical"
        );
    }
    for (object, field) in [("origin", "locale"), ("deliveryContext", "replyMarkup")] {
        let (old_nested, new_nested) = (
            raw_object(old_entry[object].get()),
            raw_object(new_entry[object].get()),
        );
        assert_eq!(
            old_nested[field].get(),
            new_nested[field].get(),
            "{object}.{field}"
        );
    }
    assert_eq!(new_entry["label"].get(), "\"inbox\"");
    assert!(after.starts_with("{\n  \"agent:main:main\": {\n    \""));
    assert!(
        !after.ends_with('\n'),
        "JSON.stringify writes no trailing newline"
    );
}

#[tokio::test]
async fn fixture_entries_read_with_their_fields() {
    let dir = openclaw_fixture();
    let store = store(dir.path());
    let group = store
        .get(&key("agent:main:whatsapp:group:120363406150318674@g.us"))
        .await
        .unwrap()
        .unwrap()
        .entry;
    assert_eq!(group.subject.as_deref(), Some("Family"));
    assert_eq!(group.display_name.as_deref(), Some("whatsapp:g-family"));
    assert_eq!(group.skills_snapshot.as_ref().unwrap()["version"], 3);
    let subagent = store
        .list(&ListFilter::new().key_prefix("agent:main:subagent:"))
        .await
        .unwrap();
    assert_eq!(subagent.len(), 1);
    assert_eq!(
        subagent[0].entry.spawned_by.as_deref(),
        Some("agent:main:main")
    );
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 3);
    assert_eq!(store.agents().await.unwrap(), [AgentId::main()]);
}

#[cfg(unix)]
#[tokio::test]
async fn writes_are_private_and_keep_the_previous_version() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let k = key("agent:main:main");
    store.put(&k, SessionEntry::new("first", 1)).await.unwrap();
    let file = main_store_file(dir.path());
    let first = fs::read(&file).unwrap();
    store.put(&k, SessionEntry::new("second", 2)).await.unwrap();

    let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "sessions.json is owner-only");
    let closed = file.with_file_name("sessions.closed.json");
    let mode = fs::metadata(&closed).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the replaced session is kept owner-only");
    assert_eq!(fs::read(file.with_extension("json.bak")).unwrap(), first);
    assert_eq!(
        file_names(file.parent().unwrap()),
        ["sessions.closed.json", "sessions.json", "sessions.json.bak"],
        "no lock or temporary file is left behind"
    );
}

#[tokio::test]
async fn a_missing_store_is_empty_and_reading_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir.path().join("state"));
    assert!(store.get(&key("agent:main:main")).await.unwrap().is_none());
    assert!(store.list(&ListFilter::new()).await.unwrap().is_empty());
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 0);
    assert!(store.agents().await.unwrap().is_empty());
    assert!(
        !dir.path().join("state").exists(),
        "reads create no directory"
    );
}

#[tokio::test]
async fn nothing_is_written_when_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let k = key("agent:main:main");
    store.put(&k, SessionEntry::new("s", 1)).await.unwrap();
    let file = main_store_file(dir.path());
    let before = fs::metadata(&file).unwrap();
    store.put(&k, SessionEntry::new("s", 1)).await.unwrap();
    store.update(&k, |_| ()).await.unwrap();
    let after = fs::metadata(&file).unwrap();
    assert_eq!(before.modified().unwrap(), after.modified().unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(before.ino(), after.ino(), "the file was not replaced");
    }
    assert!(
        !file.with_extension("json.bak").exists(),
        "no backup without a write"
    );
}

/// Every corrupt input is a typed error naming the file, and the file is left as found.
#[tokio::test]
async fn corrupt_stores_are_reported_and_left_untouched() {
    let truncated =
        &fs::read("tests/fixtures/openclaw/agents/main/sessions/sessions.json").unwrap()[..700];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", truncated.to_vec()),
        ("garbage", b"\x00\x01 not json at all".to_vec()),
        ("array", b"[]".to_vec()),
        ("string", b"\"sessions\"".to_vec()),
        (
            "invalid utf-8",
            b"{\"agent:main:main\": {\"label\": \"\xff\xfe\"}}".to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        let dir = tempfile::tempdir().unwrap();
        let file = main_store_file(dir.path());
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, &bytes).unwrap();
        let store = store(dir.path());
        let k = key("agent:main:main");

        let results = [
            store.get(&k).await.map(|_| ()),
            store.put(&k, SessionEntry::new("new", 1)).await.map(|_| ()),
            store.delete(&k).await.map(|_| ()),
            store.list(&ListFilter::new()).await.map(|_| ()),
            store.count(&ListFilter::new()).await.map(|_| ()),
        ];
        for result in results {
            match result {
                Err(Error::Corrupt {
                    path,
                    problem,
                    valid_backup,
                }) => {
                    assert_eq!(path, file, "{name}");
                    assert_eq!(valid_backup, None, "{name}");
                    let expected = match name {
                        "empty" => matches!(problem, CorruptProblem::Empty),
                        "truncated" | "garbage" => matches!(problem, CorruptProblem::Syntax(_)),
                        "array" | "string" => matches!(problem, CorruptProblem::NotAnObject { .. }),
                        _ => matches!(problem, CorruptProblem::InvalidUtf8 { .. }),
                    };
                    assert!(expected, "{name}: {problem:?}");
                }
                other => panic!("{name}: expected Error::Corrupt, got {other:?}"),
            }
        }
        assert_eq!(
            fs::read(&file).unwrap(),
            bytes,
            "{name}: the file is untouched"
        );
        assert_eq!(
            file_names(file.parent().unwrap()),
            ["sessions.json"],
            "{name}: nothing else was created"
        );
    }
}

#[tokio::test]
async fn a_corrupt_store_names_its_valid_backup() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let k = key("agent:main:main");
    store.put(&k, SessionEntry::new("one", 1)).await.unwrap();
    store.put(&k, SessionEntry::new("two", 2)).await.unwrap();
    let file = main_store_file(dir.path());
    fs::write(&file, b"").unwrap(); // what OpenClaw issue #77783 left behind

    let error = store.get(&k).await.unwrap_err();
    let backup = file.with_extension("json.bak");
    assert!(
        matches!(&error, Error::Corrupt { valid_backup: Some(b), .. } if *b == backup),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("a valid backup exists at"),
        "{error}"
    );
    assert_eq!(fs::read(&file).unwrap(), b"", "still untouched");
}

#[tokio::test]
async fn an_invalid_entry_is_reported_preserved_and_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let file = main_store_file(dir.path());
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let bad = "{\n    \"sessionId\": \"x\",\n    \"updatedAt\": \"yesterday\"\n  }";
    fs::write(
        &file,
        format!("{{\n  \"agent:main:bad\": {bad},\n  \"agent:main:good\": {{\n    \"sessionId\": \"g\",\n    \"updatedAt\": 1\n  }}\n}}"),
    )
    .unwrap();
    let store = store(dir.path());
    let (bad_key, good_key) = (key("agent:main:bad"), key("agent:main:good"));

    assert!(matches!(
        store.get(&bad_key).await,
        Err(Error::InvalidEntry { ref key, .. }) if key == "agent:main:bad"
    ));
    assert!(matches!(
        store.put(&bad_key, SessionEntry::new("y", 2)).await,
        Err(Error::InvalidEntry { .. })
    ));
    store
        .with_session(&good_key, |e| e.label = Some("still works".into()))
        .await
        .unwrap();
    let listed = store.list(&ListFilter::new()).await.unwrap();
    assert_eq!(listed.len(), 1, "list skips the invalid entry");
    let text = fs::read_to_string(&file).unwrap();
    assert_eq!(
        raw_object(&text)["agent:main:bad"].get(),
        bad,
        "preserved byte for byte"
    );
}

#[tokio::test]
async fn non_canonical_keys_are_kept_but_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let file = main_store_file(dir.path());
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(
        &file,
        r#"{"Agent:Main:Legacy": {"sessionId": "a", "updatedAt": 1}, "+15550100": {"sessionId": "b", "updatedAt": 2}, "agent:ops:misfiled": {"sessionId": "c", "updatedAt": 3}}"#,
    )
    .unwrap();
    let store = store(dir.path());
    assert!(store.list(&ListFilter::new()).await.unwrap().is_empty());
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 0);
    store
        .put(&key("agent:main:main"), SessionEntry::new("m", 4))
        .await
        .unwrap();
    let kept = raw_object(&fs::read_to_string(&file).unwrap());
    assert_eq!(
        kept.keys().collect::<Vec<_>>(),
        [
            "Agent:Main:Legacy",
            "+15550100",
            "agent:ops:misfiled",
            "agent:main:main"
        ]
    );
}

#[tokio::test]
async fn json5_stores_are_read_and_written_back_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = main_store_file(dir.path());
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(
        &file,
        "{\n  // edited by hand\n  'agent:main:main': { sessionId: 'abc', updatedAt: 5, },\n}",
    )
    .unwrap();
    let store = store(dir.path());
    let k = key("agent:main:main");
    assert_eq!(
        store.get(&k).await.unwrap().unwrap().entry.session_id,
        "abc"
    );
    store.with_session(&k, |e| e.updated_at = 6).await.unwrap();
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "{\n  \"agent:main:main\": {\n    \"sessionId\": \"abc\",\n    \"updatedAt\": 6\n  }\n}"
    );
}

#[tokio::test]
async fn a_foreign_lock_times_out_naming_its_holder() {
    let dir = tempfile::tempdir().unwrap();
    let file = main_store_file(dir.path());
    let lock = write_lock_file(dir.path(), r#"{"pid":4242,"startedAt":1770350000000}"#);
    let store = store(dir.path());

    let started = Instant::now();
    let error = store
        .put(&key("agent:main:main"), SessionEntry::new("s", 1))
        .await
        .unwrap_err();
    match &error {
        Error::LockTimeout {
            path,
            holder: Some(holder),
            waited,
        } => {
            assert_eq!(path, &lock);
            assert_eq!(holder.pid, Some(4242));
            assert!(!holder.agent_sessions);
            assert!(*waited >= Duration::from_millis(300));
        }
        other => panic!("expected LockTimeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.to_string().contains("pid 4242"), "{error}");
    assert!(!file.exists(), "nothing written");
    assert!(lock.exists(), "a live foreign lock is not removed");
}

#[tokio::test]
async fn a_stale_foreign_lock_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let lock = write_lock_file(dir.path(), r#"{"pid":4242,"startedAt":1770350000000}"#);
    let a_minute_ago = SystemTime::now() - Duration::from_secs(60);
    fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(a_minute_ago)
        .unwrap();
    store(dir.path())
        .put(&key("agent:main:main"), SessionEntry::new("s", 1))
        .await
        .unwrap();
    assert!(!lock.exists());
}

#[tokio::test]
async fn the_lock_of_a_dead_agent_sessions_process_is_taken_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // A fresh lock file marked as ours with no process holding its OS lock: the
    // writer was killed mid-update.
    write_lock_file(
        dir.path(),
        r#"{"pid":999999,"startedAt":1770350000000,"lockedBy":"agent-sessions"}"#,
    );
    let patient = agent_sessions::JsonFileStore::new_with(
        dir.path(),
        JsonFileOptions {
            lock: agent_sessions::LockOptions {
                timeout: Duration::ZERO,
                ..Default::default()
            },
            ..common::test_options()
        },
    );
    patient
        .put(&key("agent:main:main"), SessionEntry::new("s", 1))
        .await
        .expect("taken on the first attempt");
}

#[tokio::test]
async fn a_change_by_another_writer_is_seen_despite_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("agent:main:main");
    let reader = store(dir.path());
    let writer = store(dir.path());
    writer.put(&k, SessionEntry::new("one", 1)).await.unwrap();
    assert_eq!(
        reader.get(&k).await.unwrap().unwrap().entry.session_id,
        "one"
    );
    writer.put(&k, SessionEntry::new("two", 2)).await.unwrap();
    assert_eq!(
        reader.get(&k).await.unwrap().unwrap().entry.session_id,
        "two"
    );

    // A foreign program rewriting the file in place is seen too.
    let file = main_store_file(dir.path());
    let text = fs::read_to_string(&file)
        .unwrap()
        .replace("\"two\"", "\"three\"");
    fs::write(&file, text).unwrap();
    assert_eq!(
        reader.get(&k).await.unwrap().unwrap().entry.session_id,
        "three"
    );
}

#[tokio::test]
async fn writers_never_trust_the_read_cache() {
    // Regression test for OpenClaw #10331: an update based on a cached copy clobbered
    // another process's update. Here the second store's cache holds a stale copy.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (store(dir.path()), store(dir.path()));
    let (one, two) = (key("agent:main:dm:one"), key("agent:main:dm:two"));
    b.put(&one, SessionEntry::new("1", 1)).await.unwrap();
    assert_eq!(b.count(&ListFilter::new()).await.unwrap(), 1); // b has the file cached
    a.put(&two, SessionEntry::new("2", 2)).await.unwrap();
    b.with_session(&one, |e| e.label = Some("x".into()))
        .await
        .unwrap();
    let fresh = store(dir.path());
    assert!(
        fresh.get(&two).await.unwrap().is_some(),
        "a's update survived b's"
    );
}

#[tokio::test]
async fn each_agent_has_its_own_file_and_global_lives_with_the_global_agent() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    store
        .put(&key("agent:support:main"), SessionEntry::new("s", 1))
        .await
        .unwrap();
    store
        .put(&SessionKey::global(), SessionEntry::new("g", 2))
        .await
        .unwrap();
    let support = AgentId::new("support").unwrap();
    assert!(store.store_path(&support).is_file());
    assert_eq!(
        store.store_path_for(&SessionKey::global()),
        main_store_file(dir.path())
    );
    assert_eq!(store.agents().await.unwrap(), [AgentId::main(), support]);
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 2);
}

#[tokio::test]
async fn the_json_store_is_usable_as_a_trait_object() {
    let dir = tempfile::tempdir().unwrap();
    let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(store(dir.path()));
    let k = key("agent:main:main");
    store.put(&k, SessionEntry::new("s", 1)).await.unwrap();
    assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 1);
}

/// A session OpenClaw filed under a legacy spelling of its key is continued, not
/// restarted, when its next message arrives: the freshest spelling moves to the
/// canonical key with every field, and the other spellings go — in one write.
#[tokio::test]
async fn legacy_keys_are_taken_over_by_their_canonical_key_when_used() {
    // (agent, what the file holds as (key, sessionId, minutes since its last message),
    // the message, the canonical key, the sessionId expected)
    type Case<'a> = (
        &'a str,
        &'a [(&'a str, &'a str, u64)],
        InboundMessage,
        &'a str,
        &'a str,
    );
    let cases: &[Case] = &[
        (
            "main",
            &[("agent:main:telegram:dm:Bob", "legacy-bob", 5)],
            InboundMessage::direct("telegram", "Bob", "hi"),
            "agent:main:telegram:dm:bob",
            "legacy-bob",
        ),
        (
            "main",
            &[
                ("agent:main:telegram:dm:bob", "current", 5),
                ("Agent:Main:Telegram:DM:Bob", "older", 9),
            ],
            InboundMessage::direct("telegram", "bob", "hi"),
            "agent:main:telegram:dm:bob",
            "current",
        ),
        (
            "main",
            &[("discord:group:123", "unscoped", 5)],
            InboundMessage::group("discord", "123", "u1", "hi").mentioning_agent(),
            "agent:main:discord:group:123",
            "unscoped",
        ),
        (
            "work",
            &[("agent:main:discord:group:123", "filed-under-main", 5)],
            InboundMessage::group("discord", "123", "u1", "hi")
                .mentioning_agent()
                .with_agent("work"),
            "agent:work:discord:group:123",
            "filed-under-main",
        ),
    ];
    for (agent, file, message, canonical, expected_id) in cases {
        let dir = tempfile::tempdir().unwrap();
        let sessions = dir.path().join("agents").join(agent).join("sessions");
        fs::create_dir_all(&sessions).unwrap();
        let now = chrono::Utc::now().timestamp_millis() as u64;
        let body: Vec<String> = file
            .iter()
            .map(|(k, id, minutes_ago)| {
                format!(
                    "\"{k}\": {{\"futureField\": {{\"keep\": true}}, \"sessionId\": \"{id}\", \"updatedAt\": {}}}",
                    now - minutes_ago * 60_000
                )
            })
            .collect();
        let path = sessions.join("sessions.json");
        fs::write(&path, format!("{{{}}}", body.join(","))).unwrap();
        let manager = SessionManager::builder(store(dir.path()))
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .freshness(ResetConfig::default().reset(ResetSpec::idle(60)))
            .build()
            .unwrap();

        let resolution = manager.resolve(message).await.unwrap();
        assert_eq!(resolution.key.as_str(), *canonical);
        assert_eq!(
            resolution.session.entry.session_id, *expected_id,
            "{canonical}: continued"
        );
        assert_eq!(resolution.decision, Decision::Continue, "{canonical}");
        assert_eq!(
            resolution.session.entry.extra.get("futureField"),
            Some(&serde_json::json!({"keep": true})),
            "{canonical}: every field kept"
        );
        let written = raw_object(&fs::read_to_string(&path).unwrap());
        assert_eq!(
            written.keys().collect::<Vec<_>>(),
            [canonical],
            "{canonical}: the legacy spellings are gone"
        );
    }
}

/// Reading a canonical key finds a session still filed under a legacy spelling, and an
/// entry under a legacy spelling that does not decode is never touched.
#[tokio::test]
async fn reads_find_legacy_spellings_and_undecodable_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("agents/main/sessions");
    fs::create_dir_all(&sessions).unwrap();
    let path = sessions.join("sessions.json");
    fs::write(
        &path,
        r#"{"agent:main:dm:Ann": {"sessionId": "ann", "updatedAt": 1}, "agent:main:dm:Bob": {"sessionId": 5}}"#,
    )
    .unwrap();
    let store = store(dir.path());
    let ann = store.get(&key("agent:main:dm:ann")).await.unwrap().unwrap();
    assert_eq!(
        (ann.key.as_str(), ann.entry.session_id.as_str()),
        ("agent:main:dm:ann", "ann")
    );
    assert!(store
        .get(&key("agent:main:dm:bob"))
        .await
        .unwrap()
        .is_none());
    store
        .update(&key("agent:main:dm:bob"), |slot| {
            *slot = Some(SessionEntry::new("new-bob", 2))
        })
        .await
        .unwrap();
    let written = raw_object(&fs::read_to_string(&path).unwrap());
    assert_eq!(
        written["agent:main:dm:Bob"].get(),
        r#"{"sessionId": 5}"#,
        "left as it was"
    );
    assert_eq!(
        written["agent:main:dm:Ann"].get(),
        r#"{"sessionId": "ann", "updatedAt": 1}"#,
        "not used yet"
    );
}

/// `get_uncached` reads the file even when the cache would answer: here another
/// program rewrote the store in place with the same size and put the old mtime back,
/// so the cache cannot tell the file changed.
#[tokio::test]
async fn an_uncached_read_sees_what_the_cache_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let path = main_store_file(dir.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let store = JsonFileStore::new(dir.path()); // default options: a 45 s cache
    let key = key("agent:main:main");
    fs::write(
        &path,
        r#"{"agent:main:main": {"sessionId": "aaaa", "updatedAt": 1}}"#,
    )
    .unwrap();
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().entry.session_id,
        "aaaa"
    );
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::io::Write::write_all(
        &mut &file,
        br#"{"agent:main:main": {"sessionId": "bbbb", "updatedAt": 1}}"#,
    )
    .unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    // (read, the sessionId it sees): the cache still answers the old file.
    let cases = [("get", "aaaa"), ("get_uncached", "bbbb"), ("get", "aaaa")];
    for (read, expected) in cases {
        let got = match read {
            "get" => store.get(&key).await,
            _ => store.get_uncached(&key).await,
        };
        assert_eq!(got.unwrap().unwrap().entry.session_id, expected, "{read}");
    }
}

/// OpenClaw writes a string cut inside an emoji as a lone surrogate escape
/// (`"\ud83d"`), which JavaScript reads back: the crate serves the session too, with
/// the half character as U+FFFD, and keeps every other field.
#[tokio::test]
async fn an_entry_with_a_lone_surrogate_from_javascript_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let file = agent_sessions::store::store_path(dir.path(), &AgentId::main());
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(
        &file,
        r#"{
  "agent:main:telegram:dm:1": {
    "sessionId": "0f5d59ee-034e-47d9-ac97-d383e6c022b8",
    "updatedAt": 1770350123456,
    "label": "Party \ud83d",
    "displayName": "\udc00 and \ud83d\ude00"
  }
}"#,
    )
    .unwrap();
    let store = JsonFileStore::new(dir.path());
    let key = SessionKey::parse("agent:main:telegram:dm:1").unwrap();
    let entry = store.get(&key).await.unwrap().expect("served").entry;
    assert_eq!(entry.label.as_deref(), Some("Party \u{fffd}"));
    assert_eq!(
        store.list(&ListFilter::new()).await.unwrap().len(),
        1,
        "listed"
    );
    store
        .with_session(&key, |e| e.message_count = Some(1))
        .await
        .unwrap();
    let entry = store.get(&key).await.unwrap().unwrap().entry;
    assert_eq!(entry.message_count, Some(1));
    assert_eq!(entry.updated_at, 1_770_350_123_456);
}

/// A page is read from the two fields that order a listing and then whole entries in
/// that order: an entry that does not decode is skipped, and the page is still full.
#[tokio::test]
async fn a_page_skips_an_entry_that_does_not_decode_and_stays_full() {
    let dir = tempfile::tempdir().unwrap();
    let file = main_store_file(dir.path());
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(
        &file,
        r#"{
  "agent:main:cli:a": { "sessionId": "a", "updatedAt": 100 },
  "agent:main:cli:broken": { "sessionId": "broken", "updatedAt": 300, "chatType": 42 },
  "agent:main:cli:b": { "sessionId": "b", "updatedAt": 200 },
  "agent:main:cli:c": { "sessionId": "c", "updatedAt": 50 }
}"#,
    )
    .unwrap();
    let store = store(dir.path());
    let filter = ListFilter::new().limit(2);
    let first = store.list(&filter).await.unwrap();
    let ids = |page: &[StoredSession]| -> Vec<String> {
        page.iter().map(|s| s.entry.session_id.clone()).collect()
    };
    assert_eq!(ids(&first), ["b", "a"]);
    let next = filter.clone().after(filter.next_page(&first).unwrap());
    let second = store.list(&next).await.unwrap();
    assert_eq!(ids(&second), ["c"]);
    assert_eq!(filter.next_page(&second), None);
    // The entry is kept as it is, and reported.
    assert!(fs::read_to_string(&file)
        .unwrap()
        .contains("\"chatType\": 42"));
    assert_eq!(store.unreadable().await.unwrap().len(), 1);
}

/// Found by an outside test: a state directory copied elsewhere (a restore, a new
/// disk) refused every conversation — its entries name their transcripts where the
/// tree was. Moved, the tree's own files are found, closed sessions too.
#[tokio::test]
async fn a_state_directory_copied_elsewhere_goes_on_where_it_was() {
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let open = |dir: &std::path::Path| {
        SessionManager::builder(JsonFileStore::new(dir))
            .transcripts(agent_sessions::store::FileTranscriptStore::new(dir))
            .build()
            .unwrap()
    };
    let dm = |text: &str| InboundMessage::direct("telegram", "42", text);
    let old = tempfile::tempdir().unwrap();
    {
        let manager = open(old.path());
        for text in ["my name is Sam", "/new", "what is my name?"] {
            let turn = manager.turn(&dm(text)).await.unwrap();
            turn.complete("ok").await.unwrap();
        }
    }
    let moved = tempfile::tempdir().unwrap();
    copy(old.path(), moved.path());
    drop(old); // the old tree is gone

    let manager = open(moved.path());
    let turn = manager.turn(&dm("and now?")).await.unwrap();
    let seen: Vec<String> = turn
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(seen, ["what is my name?", "ok", "and now?"]);
    turn.complete("still here").await.unwrap();
    // The closed session before `/new` reads too.
    let key = manager.key_for(&dm("x")).unwrap();
    let closed = manager
        .list(&ListFilter::new().any_status())
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.key == key && s.entry.status == Some(agent_sessions::SessionStatus::Closed))
        .expect("the session `/new` closed");
    let scope = agent_sessions::transcript::follow::Scope::Session(closed.entry.session_id);
    let mut follow = manager
        .follow(scope, agent_sessions::transcript::follow::Position::Start)
        .await
        .unwrap();
    let mut texts = Vec::new();
    while let Some(agent_sessions::transcript::follow::Update::Events { events, .. }) =
        follow.try_next().await.unwrap()
    {
        texts.extend(
            events
                .iter()
                .filter_map(|e| e.entry.message.as_ref().map(|m| m.text())),
        );
    }
    assert_eq!(texts, ["my name is Sam", "ok"]);
}

/// A writer that gives up while queued behind another (a host's timeout) is not waited
/// for: the store's lock is released when the last call that is still there ends, not
/// held until the process's next write, and another process takes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gave_up_in_the_queue_leaves_no_lock_held() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("agent:main:main");
    let store = std::sync::Arc::new(store(dir.path()));
    store.put(&k, SessionEntry::new("s", 1)).await.unwrap();
    let lock = main_store_file(dir.path()).with_file_name("sessions.json.lock");
    for round in 0..3 {
        // A slow update holds the queue while another waits behind it and gives up.
        let slow = {
            let store = store.clone();
            let k = k.clone();
            tokio::spawn(async move {
                store
                    .apply(&k, &mut |slot, _| {
                        std::thread::sleep(Duration::from_millis(150));
                        if let Some(entry) = slot {
                            entry.updated_at += 1;
                        }
                        Ok(())
                    })
                    .await
                    .unwrap();
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        let mut nothing =
            |_: &mut Option<SessionEntry>, _: Option<agent_sessions::Revision>| Ok(());
        let gave_up =
            tokio::time::timeout(Duration::from_millis(20), store.apply(&k, &mut nothing)).await;
        assert!(gave_up.is_err(), "round {round}: the waiter gave up");
        slow.await.unwrap();
        // An update that changes nothing, then nothing more from this process.
        store.apply(&k, &mut |_, _| Ok(())).await.unwrap();
        assert!(!lock.exists(), "round {round}: the lock is released");
        let other = agent_sessions::JsonFileStore::new_with(
            dir.path(),
            JsonFileOptions {
                lock: agent_sessions::LockOptions {
                    timeout: Duration::from_millis(200),
                    ..Default::default()
                },
                ..common::test_options()
            },
        );
        other
            .put(&key("agent:main:other"), SessionEntry::new("o", 1))
            .await
            .expect("another process takes the lock");
    }
}
