//! Transcripts, the message log and session events.

mod common;

use std::fs;
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::freshness::ModelRef;
use agent_sessions::manager::{DeleteOptions, LogMessage};
use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::follow::{Follow, Position, Scope, Update};
use agent_sessions::transcript::{
    CheckpointReason, Direction, EventKind, LogQuery, Offset, ReadIssue, SessionHeader,
    TranscriptEntry, TranscriptIndexer, TranscriptRef, TranscriptStore, Usage,
};
use agent_sessions::{Durability, Error, SessionStatus};
use chrono::{DateTime, Utc};

const FIXTURE_ID: &str = "0f5d59ee-034e-47d9-ac97-d383e6c022b8";

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn store(root: &std::path::Path) -> FileTranscriptStore {
    FileTranscriptStore::with_durability(root, Durability::SyncFile)
}

fn transcript(id: &str) -> TranscriptRef {
    TranscriptRef::new(AgentId::main(), id)
}

#[tokio::test]
async fn an_openclaw_transcript_reads_without_loss() {
    let dir = common::openclaw_fixture();
    let transcripts = store(dir.path());
    let read = transcripts
        .read(&transcript(FIXTURE_ID), Offset::START)
        .await
        .unwrap();
    let file = dir
        .path()
        .join(format!("agents/main/sessions/{FIXTURE_ID}.jsonl"));
    let lines: Vec<String> = fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();

    assert!(read.issues.is_empty(), "{:?}", read.issues);
    let header = read.header.expect("a header");
    assert_eq!(header.id, FIXTURE_ID);
    assert_eq!(serde_json::to_string(&header).unwrap(), lines[0]);
    assert_eq!(read.events.len(), lines.len() - 1);
    // Every field of every line survives (compared as JSON values: field order aside,
    // nothing is lost or changed).
    for (event, line) in read.events.iter().zip(&lines[1..]) {
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            serde_json::to_value(&event.entry).unwrap(),
            original,
            "line {}",
            event.line
        );
    }
    let kinds: Vec<EventKind> = read.events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        &kinds[..6],
        [
            EventKind::UserMessage,
            EventKind::Other,
            EventKind::Other,
            EventKind::ToolCall,
            EventKind::ToolResult,
            EventKind::AssistantMessage,
        ]
    );
    let usage = read.events[3]
        .entry
        .message
        .as_ref()
        .unwrap()
        .usage
        .clone()
        .unwrap();
    assert_eq!(
        (usage.input, usage.cache_read, usage.total_tokens),
        (1200, 14000, 15354)
    );
    assert_eq!(usage.cost.unwrap().total, 0.0438);
    assert_eq!(read.next.0, fs::metadata(&file).unwrap().len());
}

#[cfg(unix)]
#[tokio::test]
async fn appends_are_private_whole_lines_that_continue_the_tree() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let t = transcript("s-1");
    let now = at("2026-03-10T10:00:00Z");
    assert!(transcripts
        .create(&t, &SessionHeader::new("s-1", now))
        .await
        .unwrap());
    assert!(
        !transcripts
            .create(&t, &SessionHeader::new("s-1", now))
            .await
            .unwrap(),
        "exists"
    );
    let events = transcripts
        .append(
            &t,
            vec![
                TranscriptEntry::user_text("one", now),
                TranscriptEntry::assistant_text("two", "anthropic", "claude-opus-4-6", now),
            ],
        )
        .await
        .unwrap();
    let third = transcripts
        .append(&t, vec![TranscriptEntry::user_text("three", now)])
        .await
        .unwrap();
    let ids: Vec<String> = events
        .iter()
        .chain(&third)
        .map(|e| e.entry.id.clone().unwrap())
        .collect();
    assert!(ids
        .iter()
        .all(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    assert_eq!(events[0].entry.parent_id, None);
    assert_eq!(events[1].entry.parent_id.as_deref(), Some(ids[0].as_str()));
    assert_eq!(third[0].entry.parent_id.as_deref(), Some(ids[1].as_str()));
    assert_eq!(third[0].line, 4);

    let path = transcripts.path(&t).unwrap();
    assert_eq!(path, dir.path().join("agents/main/sessions/s-1.jsonl"));
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    assert!(text.lines().nth(1).unwrap().contains(r#""parentId":null"#));
    let read = transcripts.read(&t, Offset::START).await.unwrap();
    assert_eq!(read.events, [events, third].concat());
}

#[tokio::test]
async fn a_torn_last_line_is_reported_skipped_and_stepped_over() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let t = transcript("torn");
    let now = at("2026-03-10T10:00:00Z");
    let first = transcripts
        .append(&t, vec![TranscriptEntry::user_text("kept", now)])
        .await
        .unwrap();
    let path = transcripts.path(&t).unwrap();
    // A crash in the middle of an append.
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(br#"{"type":"message","id":"deadbeef","message":{"role":"us"#);
    fs::write(&path, &bytes).unwrap();

    // A fresh store, as after a restart.
    let transcripts = store(dir.path());
    let read = transcripts.read(&t, Offset::START).await.unwrap();
    assert_eq!(read.events.len(), 1);
    assert!(
        matches!(read.issues[..], [ReadIssue::TornLastLine { line: 3, .. }]),
        "{:?}",
        read.issues
    );

    let next = transcripts
        .append(&t, vec![TranscriptEntry::user_text("after", now)])
        .await
        .unwrap();
    assert_eq!(
        next[0].entry.parent_id, first[0].entry.id,
        "continues from the last whole entry"
    );
    assert_eq!(next[0].line, 4);
    let read = transcripts.read(&t, Offset::START).await.unwrap();
    let texts: Vec<String> = read
        .events
        .iter()
        .map(|e| e.entry.message.as_ref().unwrap().text())
        .collect();
    assert_eq!(texts, ["kept", "after"]);
    assert!(
        matches!(read.issues[..], [ReadIssue::InvalidLine { line: 3, .. }]),
        "{:?}",
        read.issues
    );
}

#[tokio::test]
async fn a_garbage_line_is_reported_with_its_number_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let t = transcript("garbage");
    let transcripts = store(dir.path());
    let path = transcripts.path(&t).unwrap();
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(
        &path,
        concat!(
            r#"{"type":"session","version":3,"id":"garbage"}"#,
            "\n",
            r#"{"type":"message","id":"00000001","parentId":null,"message":{"role":"user","content":"a"}}"#,
            "\n\u{1}\u{2} not json\n",
            r#"[1,2,3]"#,
            "\n",
            r#"{"type":"message","id":"00000002","parentId":"00000001","message":{"role":"user","content":"b"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let read = transcripts.read(&t, Offset::START).await.unwrap();
    let lines: Vec<usize> = read
        .issues
        .iter()
        .map(|issue| match issue {
            ReadIssue::InvalidLine { line, .. } => *line,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(lines, [3, 4]);
    assert_eq!(
        read.events.iter().map(|e| e.line).collect::<Vec<_>>(),
        [2, 5]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appenders_never_interleave() {
    const TASKS: usize = 16;
    const APPENDS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    // Two store handles on one directory: they share the per-file queue. (No fsync:
    // this is about byte order, not durability.)
    let unsynced = || FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let (a, b) = (unsynced(), unsynced());
    let t = transcript("busy");
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let (transcripts, t) = (if task % 2 == 0 { a.clone() } else { b.clone() }, t.clone());
        tasks.spawn(async move {
            for i in 0..APPENDS {
                let text = format!("task {task} append {i} ") + &"x".repeat(4096);
                transcripts
                    .append(&t, vec![TranscriptEntry::user_text(text, Utc::now())])
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    let read = a.read(&t, Offset::START).await.unwrap();
    assert!(
        read.issues.is_empty(),
        "{:?}",
        &read.issues[..read.issues.len().min(3)]
    );
    assert_eq!(read.events.len(), TASKS * APPENDS);
    let mut seen = std::collections::HashSet::new();
    for (index, event) in read.events.iter().enumerate() {
        let text = event.entry.message.as_ref().unwrap().text();
        assert!(text.ends_with(&"x".repeat(4096)), "intact");
        assert!(seen.insert(text.split(" x").next().unwrap().to_owned()));
        if index > 0 {
            assert_eq!(
                event.entry.parent_id,
                read.events[index - 1].entry.id,
                "one chain"
            );
        }
    }
}

#[tokio::test]
async fn replay_from_an_offset_returns_only_newer_events() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let t = transcript("replay");
    let now = at("2026-03-10T10:00:00Z");
    transcripts
        .append(&t, vec![TranscriptEntry::user_text("one", now)])
        .await
        .unwrap();
    let first = transcripts.read(&t, Offset::START).await.unwrap();
    transcripts
        .append(
            &t,
            vec![
                TranscriptEntry::user_text("two", now),
                TranscriptEntry::checkpoint(CheckpointReason::Manual, now),
            ],
        )
        .await
        .unwrap();
    let rest = transcripts.read(&t, first.next).await.unwrap();
    assert_eq!(rest.header, None);
    assert_eq!(
        rest.events.iter().map(|e| e.kind()).collect::<Vec<_>>(),
        [EventKind::UserMessage, EventKind::Checkpoint]
    );
    assert_eq!(rest.events[0].line, 3);
    assert!(
        rest.events[0].offset > first.events[0].offset,
        "offsets grow"
    );
    let again = transcripts.read(&t, rest.events[1].offset).await.unwrap();
    assert_eq!(again.events.len(), 1, "an event's own offset replays it");
    assert!(transcripts
        .read(&t, rest.next)
        .await
        .unwrap()
        .events
        .is_empty());

    for bad in [Offset(first.next.0 + 3), Offset(rest.next.0 + 1)] {
        assert!(
            matches!(
                transcripts.read(&t, bad).await,
                Err(Error::InvalidOffset { .. })
            ),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn subscribers_get_updates_and_dropping_unsubscribes() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let t = transcript("live");
    let mut first = transcripts.subscribe();
    let second = transcripts.subscribe();
    assert_eq!(transcripts.subscriber_count(), 2);
    transcripts
        .append(&t, vec![TranscriptEntry::user_text("hello", Utc::now())])
        .await
        .unwrap();
    let update = tokio::time::timeout(Duration::from_secs(5), first.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(update.transcript, t);
    assert_eq!(
        update.events[0].entry.message.as_ref().unwrap().text(),
        "hello"
    );
    drop(second);
    assert_eq!(
        transcripts.subscriber_count(),
        1,
        "a dropped subscription is gone"
    );
    drop(first);
    assert_eq!(transcripts.subscriber_count(), 0);
    transcripts
        .append(
            &t,
            vec![TranscriptEntry::user_text("nobody listens", Utc::now())],
        )
        .await
        .expect("appending without subscribers works");
}

#[tokio::test]
async fn forks_start_from_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let (parent, child) = (transcript("parent"), transcript("child"));
    let now = at("2026-03-10T10:00:00Z");
    let parent_events = transcripts
        .append(
            &parent,
            vec![
                TranscriptEntry::user_text("plan the release", now),
                TranscriptEntry::assistant_text("sure", "anthropic", "claude", now),
            ],
        )
        .await
        .unwrap();
    assert!(transcripts
        .fork(&parent, &child, &SessionHeader::new("child", now))
        .await
        .unwrap());
    let read = transcripts.read(&child, Offset::START).await.unwrap();
    let header = read.header.unwrap();
    assert_eq!(
        header.parent_session.as_deref(),
        Some(transcripts.path(&parent).unwrap().to_str().unwrap())
    );
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.entry.clone())
            .collect::<Vec<_>>(),
        parent_events
            .iter()
            .map(|e| e.entry.clone())
            .collect::<Vec<_>>()
    );
    let next = transcripts
        .append(
            &child,
            vec![TranscriptEntry::user_text("in the thread", now)],
        )
        .await
        .unwrap();
    assert_eq!(next[0].entry.parent_id, parent_events[1].entry.id);
    assert_eq!(
        transcripts
            .read(&parent, Offset::START)
            .await
            .unwrap()
            .events
            .len(),
        2,
        "parent unchanged"
    );
}

#[tokio::test]
async fn archives_rename_and_remove_erases() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let t = transcript("old");
    transcripts
        .append(&t, vec![TranscriptEntry::user_text("x", Utc::now())])
        .await
        .unwrap();
    let archived = transcripts
        .archive(
            &t,
            agent_sessions::transcript::ArchiveReason::Reset,
            at("2026-03-10T10:00:00Z"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        archived.file_name().unwrap(),
        "old.jsonl.reset.2026-03-10T10-00-00.000Z"
    );
    assert!(archived.exists());
    assert!(transcripts
        .read(&t, Offset::START)
        .await
        .unwrap()
        .events
        .is_empty());
    assert_eq!(
        transcripts
            .archive(
                &t,
                agent_sessions::transcript::ArchiveReason::Reset,
                Utc::now()
            )
            .await
            .unwrap(),
        None
    );
    transcripts
        .append(&t, vec![TranscriptEntry::user_text("y", Utc::now())])
        .await
        .unwrap();
    assert!(transcripts.remove(&t).await.unwrap());
    assert!(!transcripts.remove(&t).await.unwrap());
}

#[tokio::test]
async fn paths_outside_the_sessions_directory_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let mut escape = transcript("fine");
    escape.session_file = Some("/etc/passwd".into());
    for t in [escape, transcript("../../etc/passwd"), transcript("a/b")] {
        assert!(matches!(
            transcripts
                .append(&t, vec![TranscriptEntry::user_text("x", Utc::now())])
                .await,
            Err(Error::InvalidId { .. })
        ));
    }
    let mut topic = transcript("s");
    topic.topic = Some("../../x".into());
    assert_eq!(
        transcripts.path(&topic).unwrap().file_name().unwrap(),
        "s-topic-..%2F..%2Fx.jsonl"
    );
}

fn manager(dir: &std::path::Path, clock: &ManualClock) -> SessionManager {
    SessionManager::builder(common::store(dir))
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(store(dir))
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn closing_a_closed_session_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = manager(dir.path(), &clock);
    let inbound = InboundMessage::direct("sms", "+15550100", "cancel my order");
    let key = manager.resolve(&inbound).await.unwrap().key;
    let closed = manager.session(&key).close().await.unwrap();
    clock.advance(Duration::from_secs(60));
    let again = manager.session(&key).close().await.unwrap();
    assert_eq!(again.entry.session_id, closed.entry.session_id);
    assert_eq!(
        again.entry.closed_at, closed.entry.closed_at,
        "a second close keeps the time of the first"
    );
    let read = manager.session(&key).replay(Offset::START).await.unwrap();
    let changes = read
        .events
        .iter()
        .filter(|event| event.kind() == EventKind::StatusChange)
        .count();
    assert_eq!(changes, 1, "one close, one line");
}

#[tokio::test]
async fn the_manager_logs_messages_and_session_events() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = manager(dir.path(), &clock);
    let inbound =
        InboundMessage::direct("sms", "+15550100", "when is my shift?").with_message_id("m-1");
    let resolution = manager.resolve(&inbound).await.unwrap();
    let key = resolution.key.clone();

    let logged_in = manager
        .session(&key)
        .log_message(LogMessage::from_inbound(&inbound).with_agent("reggie_oc", "reggie"))
        .await
        .unwrap();
    manager
        .session(&key)
        .set_status(SessionStatus::Running)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(2));
    let logged_out = manager
        .session(&key)
        .log_message(
            LogMessage::outbound("9am tomorrow.")
                .with_agent("reggie_oc", "reggie")
                .from_person("+15550100")
                .took(1840)
                .with_tool_calls(2)
                .correlated("m-1")
                .by_model(
                    ModelRef::new("anthropic", "claude-opus-4-6"),
                    Some(Usage::default()),
                ),
        )
        .await
        .unwrap();
    manager
        .session(&key)
        .checkpoint(CheckpointReason::TurnLimit)
        .await
        .unwrap();

    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    let expected_file = dir.path().join(format!(
        "agents/main/sessions/{}.jsonl",
        resolution.session_id()
    ));
    assert_eq!(entry.session_file.as_deref(), expected_file.to_str());
    assert_eq!(
        entry.updated_at, resolution.session.entry.updated_at,
        "logging is not activity"
    );

    let read = manager.session(&key).replay(Offset::START).await.unwrap();
    let kinds: Vec<EventKind> = read.events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            EventKind::UserMessage,
            EventKind::StatusChange,
            EventKind::AssistantMessage,
            EventKind::Checkpoint
        ]
    );
    let log = logged_out.entry.log.as_ref().unwrap();
    assert_eq!(log.direction, Some(Direction::Outbound));
    assert_eq!(
        (log.processing_ms, log.tool_calls_count),
        (Some(1840), Some(2))
    );
    assert_eq!(log.correlation_id.as_deref(), Some("m-1"));
    assert_eq!(log.channel.as_deref(), Some("sms"));
    assert_eq!(log.session_key.as_deref(), Some(key.as_str()));
    assert_eq!(
        logged_in.entry.log.as_ref().unwrap().person_id.as_deref(),
        Some("+15550100")
    );
    assert_eq!(
        logged_out.entry.message.as_ref().unwrap().model.as_deref(),
        Some("claude-opus-4-6")
    );
    let replay = manager
        .session(&key)
        .replay(read.events[2].offset)
        .await
        .unwrap();
    assert_eq!(replay.events.len(), 2);

    let mirrored = manager
        .session(&key)
        .mirror_delivery("", &["https://cdn.example.com/roster.pdf".to_owned()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        mirrored.entry.message.as_ref().unwrap().text(),
        "roster.pdf"
    );
}

#[tokio::test]
async fn a_reset_archives_the_old_transcript_and_deletion_keeps_it_unless_erased() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = manager(dir.path(), &clock);
    let first = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    manager
        .session(&first.key)
        .log_message(LogMessage::inbound("hi"))
        .await
        .unwrap();
    let old_file = manager
        .session(&first.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();

    let reset = manager
        .resolve(&InboundMessage::direct("telegram", "42", "/new"))
        .await
        .unwrap();
    assert!(!std::path::Path::new(&old_file).exists(), "archived");
    assert!(std::path::Path::new(&format!("{old_file}.reset.2026-03-10T10-00-00.000Z")).exists());
    assert_eq!(
        reset.session.entry.session_file, None,
        "the new session gets a new transcript"
    );
    manager
        .session(&reset.key)
        .log_message(LogMessage::inbound("fresh start"))
        .await
        .unwrap();
    let new_file = manager
        .session(&reset.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();
    assert_ne!(new_file, old_file);

    manager
        .session(&reset.key)
        .delete(DeleteOptions::default())
        .await
        .unwrap();
    assert!(std::path::Path::new(&format!("{new_file}.deleted.2026-03-10T10-00-00.000Z")).exists());

    let again = manager
        .resolve(&InboundMessage::direct("telegram", "42", "hello again"))
        .await
        .unwrap();
    manager
        .session(&again.key)
        .log_message(LogMessage::inbound("hello again"))
        .await
        .unwrap();
    let file = manager
        .session(&again.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();
    manager
        .session(&again.key)
        .delete(DeleteOptions {
            erase_transcript: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!std::path::Path::new(&file).exists());
    let leftovers: Vec<String> = common::file_names(&dir.path().join("agents/main/sessions"))
        .into_iter()
        .filter(|name| name.contains(".jsonl") && name.starts_with(again.session_id()))
        .collect();
    assert!(leftovers.is_empty(), "erased, not archived: {leftovers:?}");
}

#[tokio::test]
async fn a_forked_thread_transcript_starts_from_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = manager(dir.path(), &clock);
    let channel = InboundMessage::group("slack", "C1", "U1", "release plan?").in_channel();
    let parent = manager.resolve(&channel).await.unwrap();
    manager
        .session(&parent.key)
        .log_message(LogMessage::inbound("release plan?"))
        .await
        .unwrap();
    let thread = manager
        .session(&parent.key)
        .fork_thread("1700.1")
        .await
        .unwrap();
    manager
        .session(&thread.key)
        .log_message(LogMessage::inbound("in the thread"))
        .await
        .unwrap();
    let read = manager
        .session(&thread.key)
        .replay(Offset::START)
        .await
        .unwrap();
    let header = read.header.unwrap();
    let parent_file = manager
        .session(&parent.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();
    assert_eq!(header.parent_session.as_deref(), Some(parent_file.as_str()));
    let texts: Vec<String> = read
        .events
        .iter()
        .map(|e| e.entry.message.as_ref().unwrap().text())
        .collect();
    assert_eq!(texts, ["release plan?", "in the thread"]);
    let thread_file = manager
        .session(&thread.key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_file
        .unwrap();
    assert!(
        thread_file.ends_with(&format!("{}-topic-1700.1.jsonl", thread.entry.session_id)),
        "{thread_file}"
    );
}

#[tokio::test]
async fn the_message_log_is_queryable_by_session_and_by_person_and_identity() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let manager = manager(dir.path(), &clock);
    // Person p1 texts reggie_oc by SMS, then uses reggie_fd on the web; p2 talks too.
    let steps = [
        ("reggie_oc", "sms", "p1", "+1555", "roster?"),
        ("reggie_fd", "webchat", "p1", "p1-web", "and leave?"),
        ("reggie_oc", "sms", "p2", "+1666", "hello"),
        ("henry", "sms", "p1", "+1555", "other agent"),
    ];
    let mut keys = Vec::new();
    for (agent, channel, person, peer, text) in steps {
        clock.advance(Duration::from_secs(60));
        let inbound = InboundMessage::direct(channel, peer, text).with_agent(agent);
        let resolution = manager.resolve(&inbound).await.unwrap();
        let identity = agent.split('_').next().unwrap();
        manager
            .session(&resolution.key)
            .log_message(
                LogMessage::inbound(text)
                    .from_person(person)
                    .with_agent(agent, identity),
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(1));
        manager
            .session(&resolution.key)
            .log_message(
                LogMessage::outbound(format!("re: {text}"))
                    .from_person(person)
                    .with_agent(agent, identity),
            )
            .await
            .unwrap();
        keys.push(resolution);
    }
    let transcripts = store(dir.path());
    let texts = |records: Vec<agent_sessions::transcript::LogRecord>| {
        records.into_iter().map(|r| r.text).collect::<Vec<_>>()
    };

    let p1_reggie = transcripts
        .query_log(&LogQuery::person_with("p1", "reggie"))
        .await
        .unwrap();
    assert_eq!(
        texts(p1_reggie),
        ["roster?", "re: roster?", "and leave?", "re: and leave?"]
    );

    let session = &keys[2];
    let by_session = transcripts
        .query_log(&LogQuery::session(
            AgentId::new("reggie_oc").unwrap(),
            session.session_id(),
        ))
        .await
        .unwrap();
    assert_eq!(texts(by_session), ["hello", "re: hello"]);

    let window = LogQuery::person_with("p1", "reggie")
        .since(at("2026-03-10T10:02:00Z"))
        .limit(1);
    assert_eq!(
        texts(transcripts.query_log(&window).await.unwrap()),
        ["and leave?"]
    );

    // Appending more is seen by the same store's next query (the extraction cache
    // reads only the new part).
    manager
        .session(&keys[0].key)
        .log_message(
            LogMessage::inbound("one more")
                .from_person("p1")
                .with_agent("reggie_oc", "reggie"),
        )
        .await
        .unwrap();
    assert_eq!(
        transcripts
            .query_log(&LogQuery::person_with("p1", "reggie"))
            .await
            .unwrap()
            .len(),
        5
    );
}

#[tokio::test]
async fn the_indexer_rereads_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = store(dir.path());
    let now = at("2026-03-10T10:00:00Z");
    for id in ["a", "b"] {
        transcripts
            .append(
                &transcript(id),
                vec![
                    TranscriptEntry::user_text(format!("my password is hunter2 ({id})"), now),
                    TranscriptEntry::assistant_text("noted", "anthropic", "claude", now),
                    TranscriptEntry::checkpoint(CheckpointReason::Manual, now),
                ],
            )
            .await
            .unwrap();
    }
    let sessions = dir.path().join("agents/main/sessions");
    let mut indexer =
        TranscriptIndexer::new().with_redaction(|text| text.replace("hunter2", "[redacted]"));
    let first = indexer.scan(&sessions).unwrap();
    assert_eq!(first.changed.len(), 2);
    assert_eq!(first.changed[0].path, "sessions/a.jsonl");
    assert_eq!(
        first.changed[0].content,
        "User: my password is [redacted] (a)\nAssistant: noted"
    );
    assert!(
        indexer.scan(&sessions).unwrap().changed.is_empty(),
        "nothing changed"
    );

    std::thread::sleep(Duration::from_millis(20));
    transcripts
        .append(
            &transcript("b"),
            vec![TranscriptEntry::user_text("more", now)],
        )
        .await
        .unwrap();
    let second = indexer.scan(&sessions).unwrap();
    assert_eq!(
        second
            .changed
            .iter()
            .map(|t| t.path.as_str())
            .collect::<Vec<_>>(),
        ["sessions/b.jsonl"]
    );
    assert_ne!(second.changed[0].hash, first.changed[1].hash);

    transcripts.remove(&transcript("a")).await.unwrap();
    let third = indexer.scan(&sessions).unwrap();
    assert_eq!(third.removed, [sessions.join("a.jsonl")]);
}

#[tokio::test]
async fn logging_without_a_transcript_store_is_a_typed_error() {
    let manager = SessionManager::new(InMemoryStore::new());
    let resolution = manager
        .resolve(&InboundMessage::direct("telegram", "1", "hi"))
        .await
        .unwrap();
    assert!(matches!(
        manager
            .session(&resolution.key)
            .log_message(LogMessage::inbound("hi"))
            .await,
        Err(Error::NotConfigured { .. })
    ));
}

/// Both ways an append goes: unsynced (the short path) and with an fsync.
const DURABILITIES: [Durability; 2] = [Durability::Unsynced, Durability::SyncFile];

fn user(text: &str) -> Vec<TranscriptEntry> {
    vec![TranscriptEntry::user_text(text, Utc::now())]
}

#[tokio::test]
async fn after_another_process_archives_or_removes_a_transcript_the_next_append_starts_a_new_file()
{
    for (durability, action, named) in DURABILITIES
        .into_iter()
        .flat_map(|d| [(d, "archives"), (d, "removes")])
        .flat_map(|(d, a)| [(d, a, false), (d, a, true)])
    {
        let dir = tempfile::tempdir().unwrap();
        let transcripts = FileTranscriptStore::with_durability(dir.path(), durability);
        let mut t = transcript("s-1");
        if named {
            // As `SessionManager` appends: by the `sessionFile` recorded.
            t.session_file = transcripts.location(&t);
        }
        transcripts.append(&t, user("one")).await.unwrap();
        transcripts.append(&t, user("two")).await.unwrap();
        let path = transcripts.path(&t).unwrap();
        // Another process: a plain rename or unlink, which this store never sees.
        let archived = path.with_file_name("s-1.jsonl.reset.2026-11-27T10-00-00.000Z");
        fs::rename(&path, &archived).unwrap();
        let archived_bytes = fs::read(&archived).unwrap();
        if action == "removes" {
            fs::remove_file(&archived).unwrap();
        }

        let events = transcripts.append(&t, user("three")).await.unwrap();
        let context = format!("{durability:?}, named {named}, another process {action}");
        if action == "archives" {
            assert_eq!(
                fs::read(&archived).unwrap(),
                archived_bytes,
                "{context}: the archive is left alone"
            );
        }
        let read = transcripts.read(&t, Offset::START).await.unwrap();
        assert_eq!(
            read.header.map(|h| h.id),
            Some("s-1".to_owned()),
            "{context}"
        );
        assert_eq!(read.events, events, "{context}");
        assert_eq!(events[0].entry.parent_id, None, "{context}: a new chain");
        assert_eq!(events[0].line, 2, "{context}");
    }
}

#[tokio::test]
async fn a_transcript_replaced_by_another_process_continues_the_new_files_chain_even_at_the_same_length(
) {
    for durability in DURABILITIES {
        let dir = tempfile::tempdir().unwrap();
        let transcripts = FileTranscriptStore::with_durability(dir.path(), durability);
        let t = transcript("s-1");
        let first = transcripts.append(&t, user("one")).await.unwrap();
        let path = transcripts.path(&t).unwrap();
        // Another process puts a transcript of exactly the same length in its place
        // (write a new file, rename it over), whose last entry has another id.
        let old_id = first[0].entry.id.clone().unwrap();
        let new_id = if old_id == "feedbeef" {
            "deadbeef"
        } else {
            "feedbeef"
        };
        let replaced = fs::read_to_string(&path).unwrap().replace(&old_id, new_id);
        let temporary = path.with_file_name("replacement.tmp");
        fs::write(&temporary, &replaced).unwrap();
        fs::rename(&temporary, &path).unwrap();

        let second = transcripts.append(&t, user("two")).await.unwrap();
        assert_eq!(
            second[0].entry.parent_id.as_deref(),
            Some(new_id),
            "{durability:?}: the new file's chain, not the one remembered of the old file"
        );
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn appending_to_many_transcripts_keeps_a_bounded_number_of_files_open() {
    fn open_files() -> usize {
        fs::read_dir("/proc/self/fd").unwrap().count()
    }
    const TRANSCRIPTS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let transcripts = FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let before = open_files();
    for round in ["one", "two"] {
        for n in 0..TRANSCRIPTS {
            transcripts
                .append(&transcript(&format!("s-{n}")), user(round))
                .await
                .unwrap();
        }
    }
    // Other tests of this binary open files meanwhile: a generous margin, far below
    // one file per transcript.
    let opened = open_files().saturating_sub(before);
    assert!(
        opened <= 100,
        "{opened} more files open after appending to {TRANSCRIPTS}"
    );
    for n in 0..TRANSCRIPTS {
        let read = transcripts
            .read(&transcript(&format!("s-{n}")), Offset::START)
            .await
            .unwrap();
        assert_eq!(read.events.len(), 2, "s-{n}");
        assert_eq!(
            read.events[1].entry.parent_id, read.events[0].entry.id,
            "s-{n}"
        );
    }
}

/// A line OpenClaw wrote with a lone surrogate escape (a message cut inside an emoji)
/// is read as an event, with U+FFFD for the half character, and the next append hangs
/// from it: the chain does not fork past it.
#[tokio::test]
async fn a_line_with_a_lone_surrogate_from_javascript_is_read_and_chained_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let transcript = TranscriptRef::new(AgentId::main(), "cut");
    store
        .append(
            &transcript,
            vec![TranscriptEntry::user_text("hi", Utc::now())],
        )
        .await
        .unwrap();
    let path = store.path(&transcript).unwrap();
    let first_id = store.read(&transcript, Offset::START).await.unwrap().events[0]
        .entry
        .id
        .clone()
        .unwrap();
    let line = format!(
        r#"{{"type":"message","id":"0badf00d","parentId":"{first_id}","timestamp":"2026-11-27T10:00:00.000Z","message":{{"role":"assistant","content":[{{"type":"text","text":"Party \ud83d"}}]}}}}"#
    );
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
    drop(file);
    // Another process's line: this one must not trust what it knew of the file's end.
    let other = FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let appended = other
        .append(
            &transcript,
            vec![TranscriptEntry::user_text("next", Utc::now())],
        )
        .await
        .unwrap();
    assert_eq!(appended[0].entry.parent_id.as_deref(), Some("0badf00d"));
    let read = store.read(&transcript, Offset::START).await.unwrap();
    assert!(read.issues.is_empty(), "{:?}", read.issues);
    assert_eq!(read.events.len(), 3);
    assert_eq!(read.events[1].entry.id.as_deref(), Some("0badf00d"));
}

const RESETTER_URL: &str = "AGENT_SESSIONS_RESETTER_STORE";

/// Resets the session of `telegram:42` over and over, until killed.
#[test]
#[ignore = "a child process of the reset-race test"]
fn resetter_child() {
    let Ok(url) = std::env::var(RESETTER_URL) else {
        panic!("run by the reset-race test, not directly");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let manager = SessionManager::connect(&url)
            .await
            .unwrap()
            .build()
            .unwrap();
        let reset = InboundMessage::direct("telegram", "42", "/new");
        loop {
            manager.resolve(&reset).await.unwrap();
        }
    });
}

/// Messages logged while another process resets the session over and over: every
/// append succeeds and every message is in one of the session's files, live or
/// archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_logged_while_another_process_resets_are_all_kept() {
    use agent_sessions::manager::LogMessage;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let writer = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let key = writer
        .resolve(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap()
        .key;
    let mut resetter = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["resetter_child", "--exact", "--ignored", "--test-threads=1"])
        .env(RESETTER_URL, &url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    const MESSAGES: usize = 1_000;
    let mut failures = Vec::new();
    for n in 0..MESSAGES {
        let logged = writer
            .session(&key)
            .log_message(LogMessage::inbound(format!("message {n};")))
            .await;
        if let Err(error) = logged {
            failures.push(format!("{n}: {error}"));
        }
    }
    resetter.kill().unwrap();
    resetter.wait().unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let sessions = agent_sessions::store::sessions_dir(dir.path(), &AgentId::main());
    let mut seen = vec![0usize; MESSAGES];
    let mut files = 0;
    for file in std::fs::read_dir(&sessions).unwrap() {
        let path = file.unwrap().path();
        if !path.to_string_lossy().contains(".jsonl") {
            continue;
        }
        files += 1;
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            if let Some(n) = line
                .split("message ")
                .nth(1)
                .and_then(|rest| rest.split(';').next())
                .and_then(|n| n.parse::<usize>().ok())
            {
                seen[n] += 1;
            }
        }
    }
    assert!(files > 10, "the resets ran: {files} files");
    let lost: Vec<usize> = (0..MESSAGES).filter(|n| seen[*n] != 1).collect();
    assert!(lost.is_empty(), "not kept exactly once: {lost:?}");
}

/// What an OpenClaw host does after it appends to a transcript file itself: it announces
/// the file (`emitSessionTranscriptUpdate`), and the crate's followers and subscribers
/// of that transcript hear of it at once.
#[tokio::test]
async fn an_announced_transcript_update_wakes_followers_and_subscribers() {
    use agent_sessions::transcript::TranscriptNotice;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(at("2026-03-10T10:00:00Z"));
    let transcripts = std::sync::Arc::new(store(dir.path()));
    let manager = SessionManager::builder(common::store(dir.path()))
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(transcripts.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    let turn = manager
        .turn(&InboundMessage::direct("sms", "+15550100", "hello"))
        .await
        .unwrap();
    let key = turn.key().clone();
    turn.complete("Hi.").await.unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    let file = entry.session_file.clone().unwrap();
    let transcript = TranscriptRef::of(&key, &entry, &AgentId::main());

    let mut follow = manager
        .session(&key)
        .follow(Position::Start)
        .await
        .unwrap()
        .poll_interval(Duration::from_secs(600));
    while follow.try_next().await.unwrap().is_some() {}
    let mut updates = transcripts.subscribe();

    // Another program appends (its own store: this process hears nothing of it).
    let other = store(dir.path());
    other
        .append(
            &transcript,
            vec![TranscriptEntry::assistant_text(
                "Sent from elsewhere.",
                "openclaw",
                "delivery-mirror",
                Utc::now(),
            )],
        )
        .await
        .unwrap();
    // ... and says so in OpenClaw's object form.
    let notice = TranscriptNotice::from_openclaw(&serde_json::json!({
        "sessionFile": format!("  {file} "),
        "sessionKey": key.as_str(),
        "message": {"role": "assistant"}
    }))
    .unwrap();
    let announced = manager.emit_transcript_update(&notice).await.unwrap();
    assert_eq!(announced.as_ref(), Some(&transcript));
    let update = tokio::time::timeout(Duration::from_secs(5), updates.recv())
        .await
        .expect("the subscriber heard the notice")
        .unwrap();
    assert_eq!(update.transcript, transcript);
    assert_eq!(update.path.as_deref(), Some(std::path::Path::new(&file)));
    // The object form's key and message reach the subscriber, as OpenClaw hands them on.
    assert_eq!(update.session_key.as_deref(), Some(key.as_str()));
    assert_eq!(
        update.message,
        Some(serde_json::json!({"role": "assistant"}))
    );
    let update = tokio::time::timeout(Duration::from_secs(5), follow.next())
        .await
        .expect("the follower was woken, not left to its ten-minute look")
        .unwrap();
    let Update::Events { events, .. } = update else {
        panic!("the appended line: {update:?}")
    };
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind(), EventKind::AssistantMessage);

    // The bare file path names the same transcript (by its name, not its entry).
    let by_path = TranscriptNotice::from_openclaw(&serde_json::json!(file)).unwrap();
    let named = manager
        .emit_transcript_update(&by_path)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (&named.agent, &named.session_id, &named.topic),
        (&transcript.agent, &transcript.session_id, &transcript.topic)
    );
    // A blank path is ignored; a file that is no transcript of this store is refused,
    // and nobody hears of either.
    assert_eq!(
        updates.recv().await.unwrap().transcript.session_id,
        entry.session_id
    );
    let blank = TranscriptNotice::from_openclaw(&serde_json::json!("   ")).unwrap();
    assert_eq!(manager.emit_transcript_update(&blank).await.unwrap(), None);
    for stranger in [
        "/etc/passwd".to_owned(),
        dir.path()
            .join("agents/main/sessions/../../../x.jsonl")
            .display()
            .to_string(),
        dir.path()
            .join("agents/main/notes/s.jsonl")
            .display()
            .to_string(),
        dir.path()
            .join("agents/main/sessions/s.json")
            .display()
            .to_string(),
    ] {
        let refused = manager
            .emit_transcript_update(&TranscriptNotice::file(&stranger))
            .await;
        assert!(
            matches!(refused, Err(Error::InvalidId { .. })),
            "{stranger}: {refused:?}"
        );
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), updates.recv())
            .await
            .is_err(),
        "nothing was announced"
    );
}

/// A follower of an agent hears a session closed an hour after its last turn — a close
/// does not move the entry's `updatedAt`, so the status line it writes is what tells.
#[tokio::test]
async fn an_agent_follower_hears_a_close_long_after_the_last_turn() {
    let clock = ManualClock::new("2026-03-10T10:00:00Z".parse::<DateTime<Utc>>().unwrap());
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut follow = manager
        .follow(Scope::Agent(AgentId::main()), Position::Now)
        .await
        .unwrap()
        .poll_interval(Duration::from_millis(5));
    let turn = manager
        .turn(&InboundMessage::direct("telegram", "42", "hi"))
        .await
        .unwrap();
    let key = turn.key().clone();
    turn.complete("hello").await.unwrap();
    async fn next(follow: &mut Follow) -> Update {
        tokio::time::timeout(Duration::from_secs(5), follow.next())
            .await
            .expect("an update")
            .unwrap()
    }
    assert!(matches!(
        next(&mut follow).await,
        Update::Session { new: true, .. }
    ));
    assert!(matches!(next(&mut follow).await, Update::Events { .. }));

    clock.advance(Duration::from_secs(3600));
    // An hour of looking, and nothing new.
    assert!(follow.try_next().await.unwrap().is_none());
    manager.session(&key).close().await.unwrap();
    let events = match next(&mut follow).await {
        Update::Events { events, .. } => events,
        other => panic!("the close's status line first: {other:?}"),
    };
    assert_eq!(events.len(), 1);
    let Update::Status { session } = next(&mut follow).await else {
        panic!("then the new status")
    };
    assert_eq!(session.key, key);
    assert_eq!(session.entry.status, Some(SessionStatus::Closed));
}
