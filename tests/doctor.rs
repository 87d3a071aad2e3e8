//! `doctor`: what it finds in a damaged state directory, and what it repairs without
//! losing anything.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use agent_sessions::ops::{examine, DoctorOptions, Finding};
use agent_sessions::prelude::*;

fn sessions_dir(root: &Path) -> PathBuf {
    agent_sessions::store::sessions_dir(root, &AgentId::main())
}

/// Makes `path` look `age` old.
fn age(path: &Path, age: Duration) {
    let file = fs::OpenOptions::new().append(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

fn kinds(report: &agent_sessions::ops::DoctorReport) -> Vec<&'static str> {
    report
        .findings
        .iter()
        .map(|(finding, _)| match finding {
            Finding::CorruptStore { .. } => "corrupt store",
            Finding::InvalidEntry { .. } => "invalid entry",
            Finding::OrphanedTempFile { .. } => "orphaned temp",
            Finding::DeadLock { .. } => "dead lock",
            Finding::MissingTranscript { .. } => "missing transcript",
            _ => "other",
        })
        .collect()
}

#[tokio::test]
async fn a_healthy_tree_is_healthy() {
    let tree = common::openclaw_fixture();
    // The fixture's sessionFile paths point at /home/u; put them where they are.
    let store = JsonFileStore::new(tree.path());
    for session in store.list(&ListFilter::new()).await.unwrap() {
        store
            .update(&session.key, |slot| {
                let entry = slot.as_mut().unwrap();
                entry.session_file = None;
            })
            .await
            .unwrap();
    }
    let report = examine(tree.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!(report.stores.len(), 1);
}

#[tokio::test]
async fn a_corrupt_store_is_restored_from_its_backup_and_kept_in_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new(dir.path());
    let key = SessionKey::parse("agent:main:main").unwrap();
    store.put(&key, SessionEntry::new("v1", 1)).await.unwrap();
    store.put(&key, SessionEntry::new("v2", 2)).await.unwrap();
    let file = sessions_dir(dir.path()).join("sessions.json");
    fs::write(&file, b"{\"agent:main:main\": {\"sessionId\": \"v3").unwrap();

    let report = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert_eq!(kinds(&report), ["corrupt store"]);
    assert!(matches!(
        &report.findings[0].0,
        Finding::CorruptStore {
            backup_is_valid: true,
            ..
        }
    ));
    assert!(!report.all_repaired());
    assert!(
        fs::read(&file).unwrap().ends_with(b"v3"),
        "without --repair nothing changes"
    );

    let repaired = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert!(repaired.all_repaired());
    let moved = repaired.findings[0]
        .1
        .as_ref()
        .unwrap()
        .quarantined_to
        .clone()
        .unwrap();
    assert!(
        fs::read(&moved).unwrap().ends_with(b"v3"),
        "the corrupt file is kept"
    );
    let fresh = JsonFileStore::new(dir.path());
    assert_eq!(
        fresh.get(&key).await.unwrap().unwrap().entry.session_id,
        "v1",
        "the backup (the version before the last write) is back"
    );
}

#[tokio::test]
async fn a_corrupt_store_without_a_backup_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let file = sessions_dir(dir.path()).join("sessions.json");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, b"").unwrap();
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert_eq!(kinds(&report), ["corrupt store"]);
    assert!(!report.all_repaired());
    assert_eq!(fs::read(&file).unwrap(), b"");
}

#[tokio::test]
async fn orphans_and_dead_locks_are_cleared_and_fresh_ones_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new(dir.path());
    let key = SessionKey::parse("agent:main:main").unwrap();
    store.put(&key, SessionEntry::new("v1", 1)).await.unwrap();
    let sessions = sessions_dir(dir.path());
    let old_temp = sessions.join("sessions.json.4242.0000.tmp");
    fs::write(&old_temp, b"{\"half").unwrap();
    age(&old_temp, Duration::from_secs(3600));
    let fresh_temp = sessions.join("sessions.json.4243.0000.tmp");
    fs::write(&fresh_temp, b"{").unwrap();
    let lock = sessions.join("sessions.json.lock");
    fs::write(
        &lock,
        r#"{"pid":999999,"startedAt":1770350000000,"lockedBy":"agent-sessions"}"#,
    )
    .unwrap();

    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    let mut found = kinds(&report);
    found.sort();
    assert_eq!(found, ["dead lock", "orphaned temp"]);
    assert!(report.all_repaired());
    assert!(!lock.exists() && !old_temp.exists());
    assert!(
        fresh_temp.exists(),
        "a writer may still be using a fresh temp file"
    );
    let quarantined: Vec<_> = report
        .findings
        .iter()
        .filter_map(|(_, repair)| repair.as_ref()?.quarantined_to.clone())
        .collect();
    assert_eq!(fs::read(&quarantined[0]).unwrap(), b"{\"half");

    // A fresh lock of another program is someone's live lock: not touched.
    fs::write(&lock, r#"{"pid":4242,"startedAt":1770350000000}"#).unwrap();
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert!(report.is_healthy(), "{report:?}");
    assert!(lock.exists());
}

#[tokio::test]
async fn orphans_of_every_atomic_write_are_found_and_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    // Every directory the crate replaces files in atomically, used once.
    let group = InboundMessage::group("telegram", "-100", "7", "lunch?");
    let chatter = manager.turn(&group).await.unwrap();
    assert_eq!(chatter.action(), &TurnAction::StaySilent);
    let key = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap()
        .key;
    manager
        .session(&key)
        .enqueue_system_event("Reminder.")
        .await
        .unwrap();
    manager.session(&key).close().await.unwrap();
    // What writes killed before their rename leave behind: `.tmp` + random.
    let orphans: Vec<PathBuf> = [
        "agents/main/sessions",
        "group-history",
        "system-events",
        "search",
    ]
    .iter()
    .map(|at| {
        let at = dir.path().join(at);
        fs::create_dir_all(&at).unwrap();
        let orphan = at.join(".tmpAb12Cd");
        fs::write(&orphan, b"half a file").unwrap();
        age(&orphan, Duration::from_secs(3600));
        orphan
    })
    .collect();
    let report = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert_eq!(kinds(&report), ["orphaned temp"; 4], "{report:?}");
    assert!(
        orphans.iter().all(|orphan| orphan.exists()),
        "only reported"
    );

    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert!(report.all_repaired());
    for ((_, repair), orphan) in report.findings.iter().zip(&orphans) {
        assert!(!orphan.exists());
        let kept = repair.as_ref().unwrap().quarantined_to.as_ref().unwrap();
        assert_eq!(fs::read(kept).unwrap(), b"half a file");
    }
    assert!(examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap()
        .is_healthy());
    // The buffers go on past the quarantine folders in their directories.
    let asked = manager
        .turn(&InboundMessage::group("telegram", "-100", "8", "@bot hi").mentioning_agent())
        .await
        .unwrap();
    assert!(asked.input().unwrap().contains("lunch?"));
}

#[cfg(unix)]
#[tokio::test]
async fn links_planted_where_the_crate_writes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    for name in ["group-history", "system-events", "search"] {
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(name)).unwrap();
    }
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    let unusable: Vec<&Path> = report
        .findings
        .iter()
        .filter_map(|(finding, repair)| match finding {
            Finding::UnusableFile { path, problem } => {
                assert!(problem.contains("symbolic link"), "{problem}");
                assert!(repair.is_none(), "reported, never repaired");
                Some(path.as_path())
            }
            _ => None,
        })
        .collect();
    assert_eq!(unusable.len(), 3, "{report:?}");
    assert!(dir.path().join("search").is_symlink(), "left as it is");

    // Inside them: a FIFO or a link where a group's file or the lock belongs.
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("group-history");
    let events = dir.path().join("system-events");
    fs::create_dir_all(&history).unwrap();
    fs::create_dir_all(&events).unwrap();
    let fifo = |path: &Path| {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(made.success());
    };
    fifo(&history.join(".lock"));
    fifo(&events.join("agent%3Amain%3Amain.json"));
    std::os::unix::fs::symlink("/etc/passwd", history.join("g.json")).unwrap();
    // …and under the names of temporary files, which are not read but moved away.
    let sessions = dir.path().join("agents/main/sessions");
    fs::create_dir_all(&sessions).unwrap();
    let target = elsewhere.path().join("kept.txt");
    fs::write(&target, "not the crate's").unwrap();
    fifo(&history.join(".tmpFIFOab"));
    std::os::unix::fs::symlink(&target, events.join(".tmpLINKcd")).unwrap();
    fifo(&sessions.join("sessions.json.998.0b1e.tmp"));
    std::os::unix::fs::symlink(&target, sessions.join("sessions.json.997.0b1e.tmp")).unwrap();
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    let found: Vec<String> = report
        .findings
        .iter()
        .filter_map(|(finding, _)| match finding {
            Finding::UnusableFile { path, .. } => {
                Some(path.file_name().unwrap().to_string_lossy().into_owned())
            }
            _ => None,
        })
        .collect();
    assert_eq!(found.len(), 7, "{report:?}");
    assert!(!report.is_healthy());
    assert!(!report.all_repaired(), "reported, never moved");
    assert!(sessions.join("sessions.json.997.0b1e.tmp").is_symlink());
    assert_eq!(fs::read_to_string(&target).unwrap(), "not the crate's");
}

#[tokio::test]
async fn entries_whose_transcript_is_gone_are_pruned_only_on_request_and_saved() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new(dir.path());
    let gone = SessionKey::parse("agent:main:dm:gone").unwrap();
    let kept = SessionKey::parse("agent:main:dm:kept").unwrap();
    let mut entry = SessionEntry::new("s-gone", 1);
    entry.session_file = Some(
        sessions_dir(dir.path())
            .join("s-gone.jsonl")
            .to_string_lossy()
            .into_owned(),
    );
    store.put(&gone, entry).await.unwrap();
    store
        .put(&kept, SessionEntry::new("s-kept", 2))
        .await
        .unwrap();

    let repair_only = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert_eq!(kinds(&repair_only), ["missing transcript"]);
    assert!(!repair_only.all_repaired(), "pruning needs its own flag");
    assert!(store.get(&gone).await.unwrap().is_some());

    let mut options = DoctorOptions::repair();
    options.prune_missing_transcripts = true;
    let pruned = examine(dir.path(), &options).await.unwrap();
    assert!(pruned.all_repaired());
    let fresh = JsonFileStore::new(dir.path());
    assert!(fresh.get(&gone).await.unwrap().is_none());
    assert!(fresh.get(&kept).await.unwrap().is_some());
    let saved = pruned.findings[0]
        .1
        .as_ref()
        .unwrap()
        .quarantined_to
        .clone()
        .unwrap();
    let saved: serde_json::Value = serde_json::from_slice(&fs::read(saved).unwrap()).unwrap();
    assert_eq!(saved["agent:main:dm:gone"]["sessionId"], "s-gone");
}

#[tokio::test]
async fn a_deeply_nested_entry_is_a_typed_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let file = sessions_dir(dir.path()).join("sessions.json");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let depth = 100_000;
    let nested = format!(
        r#"{{"agent:main:main":{{"sessionId":"s","updatedAt":1,"x":{}{}}},"agent:main:dm:ok":{{"sessionId":"ok","updatedAt":2}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    fs::write(&file, &nested).unwrap();
    let store = JsonFileStore::new(dir.path());
    let key = SessionKey::parse("agent:main:main").unwrap();
    let result = store.get(&key).await;
    assert!(
        matches!(result, Err(agent_sessions::Error::InvalidEntry { .. })),
        "{result:?}"
    );
    // The rest of the store is usable, and nothing was rewritten.
    let ok = SessionKey::parse("agent:main:dm:ok").unwrap();
    assert!(store.get(&ok).await.unwrap().is_some());
    assert_eq!(fs::read_to_string(&file).unwrap(), nested, "untouched");
    let report = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert_eq!(kinds(&report), ["invalid entry"]);
}

#[tokio::test]
async fn a_huge_entry_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonFileStore::new(dir.path());
    let key = SessionKey::parse("agent:main:main").unwrap();
    let mut entry = SessionEntry::new("s", 1);
    entry.last_message_preview = Some("x".repeat(20 * 1024 * 1024));
    store.put(&key, entry.clone()).await.unwrap();
    let fresh = JsonFileStore::new(dir.path());
    assert_eq!(fresh.get(&key).await.unwrap().unwrap().entry, entry);
}

/// Writes `entries` (raw key → raw entry) as the sessions.json of `agent`.
fn write_store(root: &Path, agent: &str, entries: &[(&str, serde_json::Value)]) -> PathBuf {
    let dir = agent_sessions::store::sessions_dir(root, &AgentId::new(agent).unwrap());
    fs::create_dir_all(&dir).unwrap();
    let map: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let path = dir.join("sessions.json");
    fs::write(&path, serde_json::to_vec_pretty(&map).unwrap()).unwrap();
    path
}

fn raw_store(path: &Path) -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn pruning_removes_only_the_exact_raw_entry_diagnosed_in_its_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let main_dir = sessions_dir(dir.path());
    fs::create_dir_all(&main_dir).unwrap();
    let live = main_dir.join("s-live.jsonl");
    fs::write(&live, "{\"type\":\"session\"}\n").unwrap();
    let gone = |id: &str| main_dir.join(format!("{id}.jsonl")).display().to_string();
    let main_store = write_store(
        dir.path(),
        "main",
        &[
            // The live session, and a legacy mixed-case twin whose transcript is gone:
            // both normalise to the same key.
            (
                "agent:main:telegram:dm:alice",
                serde_json::json!({"sessionId": "s-live", "updatedAt": 2, "sessionFile": live.display().to_string()}),
            ),
            (
                "agent:main:telegram:dm:Alice",
                serde_json::json!({"sessionId": "s-old", "updatedAt": 1, "sessionFile": gone("s-old")}),
            ),
            // Filed in main's store under another agent's key, transcript gone.
            (
                "agent:work:telegram:dm:bob",
                serde_json::json!({"sessionId": "s-stray", "updatedAt": 1, "sessionFile": gone("s-stray")}),
            ),
            // Relative: the store would refuse it, so doctor judges it the same way
            // (whatever its own working directory holds), and never prunes it.
            (
                "agent:main:telegram:dm:carol",
                serde_json::json!({"sessionId": "s-rel", "updatedAt": 1, "sessionFile": "s-rel.jsonl"}),
            ),
        ],
    );
    // work's own, healthy entry for bob.
    let work_store = write_store(
        dir.path(),
        "work",
        &[(
            "agent:work:telegram:dm:bob",
            serde_json::json!({"sessionId": "s-bob", "updatedAt": 5}),
        )],
    );
    let work_before = fs::read(&work_store).unwrap();

    let mut options = DoctorOptions::repair();
    options.prune_missing_transcripts = true;
    let report = examine(dir.path(), &options).await.unwrap();

    let main_after = raw_store(&main_store);
    assert!(
        main_after.contains_key("agent:main:telegram:dm:alice"),
        "the live entry stays"
    );
    assert_eq!(
        main_after["agent:main:telegram:dm:alice"]["sessionId"],
        "s-live"
    );
    assert!(main_after.contains_key("agent:main:telegram:dm:carol"));
    assert!(!main_after.contains_key("agent:main:telegram:dm:Alice"));
    assert!(!main_after.contains_key("agent:work:telegram:dm:bob"));
    assert_eq!(
        fs::read(&work_store).unwrap(),
        work_before,
        "another agent's store is untouched"
    );

    // Everything removed is in the quarantine, exactly as written.
    let saved = report
        .findings
        .iter()
        .find_map(|(f, r)| match f {
            Finding::MissingTranscript { .. } => r.as_ref()?.quarantined_to.clone(),
            _ => None,
        })
        .unwrap();
    let saved = raw_store(&saved);
    assert_eq!(saved.len(), 2);
    assert_eq!(saved["agent:main:telegram:dm:Alice"]["sessionId"], "s-old");
    assert_eq!(saved["agent:work:telegram:dm:bob"]["sessionId"], "s-stray");
    assert!(report.findings.iter().any(|(f, r)| r.is_none()
        && matches!(f, Finding::UnusableSessionFile { key, .. } if key == "agent:main:telegram:dm:carol")));
}

/// A state directory moved (or restored from a backup) elsewhere: every entry records
/// its transcript at the old place, `<old>/agents/<agent>/sessions/<file>`, which names
/// the moved tree's file of that name: the conversations go on, and `doctor` finds
/// nothing to repair. (Before, every conversation was refused until `--repair`.)
#[tokio::test]
async fn a_moved_state_directory_goes_on_where_it_was() {
    let parent = tempfile::tempdir().unwrap();
    let (before, after) = (parent.path().join("before"), parent.path().join("after"));
    let dm = || InboundMessage::direct("telegram", "42", "When is my shift?");
    {
        let manager = SessionManager::connect(&format!("json:{}", before.display()))
            .await
            .unwrap()
            .build()
            .unwrap();
        let turn = manager.turn(&dm()).await.unwrap();
        turn.complete("Thursday at 9.").await.unwrap();
    }
    fs::rename(&before, &after).unwrap();
    let manager = SessionManager::connect(&format!("json:{}", after.display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    assert!(examine(&after, &DoctorOptions::default())
        .await
        .unwrap()
        .is_healthy());

    let turn = manager.turn(&dm()).await.unwrap();
    let seen: Vec<String> = turn
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(
        seen,
        ["When is my shift?", "Thursday at 9.", "When is my shift?"]
    );
}
