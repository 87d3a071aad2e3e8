//! Moving sessions and transcripts between backends, and importing OpenClaw trees.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use agent_sessions::manager::LogMessage;
use agent_sessions::ops::{migrate, NoProgress};
use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::{Offset, TranscriptRef};

/// Every session of `backend`, by key.
async fn sessions(backend: &Backend) -> BTreeMap<String, SessionEntry> {
    backend
        .sessions()
        .list(&ListFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.key.to_string(), s.entry))
        .collect()
}

/// Every transcript of `backend`, by agent and name, as its lines.
async fn transcripts(backend: &Backend) -> BTreeMap<String, Vec<String>> {
    let mut all = BTreeMap::new();
    for (agent, name) in backend.transcripts().transcript_names(None).await.unwrap() {
        let lines = backend
            .transcripts()
            .export_lines(&agent, &name)
            .await
            .unwrap()
            .unwrap();
        all.insert(format!("{agent}/{name}"), lines);
    }
    all
}

fn file_name(path: &str) -> &str {
    Path::new(path).file_name().unwrap().to_str().unwrap()
}

/// The OpenClaw fixture, plus live traffic: logged messages, a thread, a reset (an
/// archived transcript), a second agent.
async fn busy_openclaw_tree() -> tempfile::TempDir {
    let dir = common::openclaw_fixture();
    let url = format!("json:{}", dir.path().display());
    for agent in ["main", "ops"] {
        let manager = SessionManager::connect(&url)
            .await
            .unwrap()
            .default_agent(AgentId::new(agent).unwrap())
            .key_builder(
                DefaultKeyBuilder::new()
                    .default_agent(AgentId::new(agent).unwrap())
                    .dm_scope(DmScope::PerChannelPeer),
            )
            .build()
            .unwrap();
        for (peer, text) in [("42", "hi ✓"), ("43", "hello"), ("42", "and then?")] {
            let message = InboundMessage::direct("telegram", peer, text).from_person(peer);
            let resolution = manager.resolve(&message).await.unwrap();
            manager
                .session(&resolution.key)
                .log_message(LogMessage::from_inbound(&message))
                .await
                .unwrap();
            manager
                .session(&resolution.key)
                .log_message(LogMessage::outbound("ok").took(12))
                .await
                .unwrap();
        }
        let key = SessionKey::parse(&format!("agent:{agent}:telegram:dm:42")).unwrap();
        let thread = manager.session(&key).fork_thread("7").await.unwrap();
        manager
            .session(&thread.key)
            .log_message(LogMessage::inbound("in the thread"))
            .await
            .unwrap();
        manager.session(&key).reset().await.unwrap();
        manager
            .session(&key)
            .log_message(LogMessage::inbound("after the reset"))
            .await
            .unwrap();
    }
    dir
}

/// `to` holds what `from` holds: the same sessions (`sessionFile` by file name, and
/// inside `to`'s tree when it is a file tree) and the same transcript lines.
async fn assert_same_content(from: &Backend, to: &Backend, to_root: Option<&Path>) {
    let (a, b) = (sessions(from).await, sessions(to).await);
    assert_eq!(a.len(), b.len());
    for (key, original) in &a {
        let copy = &b[key];
        let mut expected = original.clone();
        expected.session_file = None;
        let mut actual = copy.clone();
        actual.session_file = None;
        assert_eq!(actual, expected, "{key}");
        match (&original.session_file, &copy.session_file) {
            (None, None) => {}
            (Some(before), Some(after)) => {
                assert_eq!(file_name(before), file_name(after), "{key}");
                if let Some(root) = to_root {
                    assert!(after.starts_with(&*root.to_string_lossy()), "{after}");
                }
            }
            other => panic!("{key}: sessionFile {other:?}"),
        }
    }
    assert_eq!(transcripts(from).await, transcripts(to).await);
}

#[tokio::test]
async fn json_to_sqlite_and_back_keeps_every_entry_and_transcript() {
    let ((source_dir, work), source, sqlite) = busy_source_and_empty_sqlite().await;
    let back_dir = work.path().join("back");
    let back = Backend::open(&format!("json:{}", back_dir.display()))
        .await
        .unwrap();

    let there = migrate(&source, &sqlite, &NoProgress).await.unwrap();
    assert!(there.verified(), "{there:?}");
    assert_eq!(there.sessions_copied, there.source.sessions);
    assert!(there.source.transcripts >= 8, "{there:?}");
    let home = migrate(&sqlite, &back, &NoProgress).await.unwrap();
    assert!(home.verified(), "{home:?}");
    assert_eq!(home.source, there.source, "checksums agree across backends");
    assert_same_content(&source, &back, Some(&back_dir)).await;

    // The transcript files are byte for byte the originals.
    for (agent, name) in source.transcripts().transcript_names(None).await.unwrap() {
        let relative = format!("agents/{agent}/sessions/{name}");
        assert_eq!(
            std::fs::read(source_dir.path().join(&relative)).unwrap(),
            std::fs::read(back_dir.join(&relative)).unwrap(),
            "{relative}"
        );
    }
}

#[tokio::test]
async fn a_migration_resumes_and_reports_conflicts() {
    let ((_source_dir, work), source, target) = busy_source_and_empty_sqlite().await;

    // A first run that got as far as one session.
    let first = source
        .sessions()
        .list(&ListFilter::new().limit(1))
        .await
        .unwrap()
        .remove(0);
    target
        .sessions()
        .put(&first.key, first.entry)
        .await
        .unwrap();
    let resumed = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(resumed.verified());
    assert_eq!(resumed.sessions_skipped, 1);
    let again = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(again.verified());
    assert_eq!((again.sessions_copied, again.transcripts_copied), (0, 0));

    // A target transcript that differs is not overwritten, and fails verification.
    let (agent, name) = source.transcripts().transcript_names(None).await.unwrap()[0].clone();
    let other = Backend::open(&format!("sqlite:{}", work.path().join("o.db").display()))
        .await
        .unwrap();
    other
        .transcripts()
        .import_lines(&agent, &name, vec!["{\"type\":\"session\"}".into()])
        .await
        .unwrap();
    let conflicted = migrate(&source, &other, &NoProgress).await.unwrap();
    assert!(!conflicted.verified());
    assert_eq!(conflicted.transcript_conflicts, [format!("{agent}/{name}")]);
}

#[tokio::test]
async fn an_imported_openclaw_tree_keeps_working_in_sqlite() {
    let fixture = common::openclaw_fixture();
    let source = Backend::open(&format!("json:{}", fixture.path().display()))
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", work.path().join("s.db").display());
    let target = Backend::open(&url).await.unwrap();
    let report = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(report.verified());
    assert_eq!(report.source.sessions, 3);
    assert_eq!(report.source.transcripts, 1);

    // The imported transcript reads as the original did, and the session continues.
    let main = SessionKey::parse("agent:main:main").unwrap();
    let entry = target.sessions().get(&main).await.unwrap().unwrap().entry;
    let transcript = TranscriptRef::of(&main, &entry, &AgentId::main());
    let read = target
        .transcripts()
        .read(&transcript, Offset::START)
        .await
        .unwrap();
    assert_eq!(read.events.len(), 14);
    assert!(read.issues.is_empty(), "{:?}", read.issues);
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let next = manager
        .session(&main)
        .log_message(LogMessage::inbound("continued in SQLite"))
        .await
        .unwrap();
    assert_eq!(
        next.entry.parent_id,
        read.events.last().unwrap().entry.id,
        "new lines hang from the imported leaf"
    );
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn json_to_sqlite_to_postgres_to_json_keeps_every_entry_and_transcript() {
    let ((_source_dir, work), source, sqlite) = busy_source_and_empty_sqlite().await;
    let schema = common::TestSchema::new("migration");
    let postgres = Backend::open(&schema.url()).await.unwrap();
    let back_dir = work.path().join("back");
    let back = Backend::open(&format!("json:{}", back_dir.display()))
        .await
        .unwrap();

    let mut checksums = Vec::new();
    for (from, to) in [(&source, &sqlite), (&sqlite, &postgres), (&postgres, &back)] {
        let report = migrate(from, to, &NoProgress).await.unwrap();
        assert!(report.verified(), "{report:?}");
        checksums.push(report.source);
    }
    assert!(checksums.windows(2).all(|pair| pair[0] == pair[1]));
    assert_same_content(&source, &back, Some(&back_dir)).await;
    assert_same_content(&source, &postgres, None).await;
    schema.drop().await;
}

/// Runs `work` on the current runtime from inside a synchronous callback.
fn block_on<F: std::future::Future>(work: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(work))
}

/// A progress callback that, when the session copy begins (after the source was
/// listed), lets another writer act: what a bot writing during a migration does.
/// A busy OpenClaw tree as the source and an empty SQLite store as the target (the
/// directories live as long as the first value).
async fn busy_source_and_empty_sqlite() -> ((tempfile::TempDir, tempfile::TempDir), Backend, Backend)
{
    let source_dir = busy_openclaw_tree().await;
    let source = Backend::open(&format!("json:{}", source_dir.path().display()))
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let target = Backend::open(&format!("sqlite:{}", work.path().join("s.db").display()))
        .await
        .unwrap();
    ((source_dir, work), source, target)
}

struct WriterDuringCopy<F: Fn() + Send + Sync>(F);

impl<F: Fn() + Send + Sync> agent_sessions::ops::MigrationProgress for WriterDuringCopy<F> {
    fn begin(&self, phase: &'static str, _: u64) {
        if phase == "sessions" {
            (self.0)();
        }
    }
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

async fn bump(backend: &Backend, key: &SessionKey, by: u64) {
    backend
        .sessions()
        .update(key, |slot| {
            let entry = slot.get_or_insert_with(|| SessionEntry::new("written-by-the-bot", 1));
            *entry.compaction_count.get_or_insert(0) += by;
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_migration_never_overwrites_a_target_that_moved_on() {
    let (_dirs, source, target) = busy_source_and_empty_sqlite().await;
    assert!(migrate(&source, &target, &NoProgress)
        .await
        .unwrap()
        .verified());

    // The bot now runs on the target: every session moves on there.
    let before = sessions(&target).await;
    for key in before.keys() {
        bump(&target, &SessionKey::parse(key).unwrap(), 100).await;
    }
    let moved_on = sessions(&target).await;

    let again = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(
        !again.verified(),
        "a target that moved on is not a verified copy"
    );
    assert_eq!(again.sessions_copied, 0);
    assert_eq!(again.session_conflicts.len(), before.len());
    assert!(again.session_conflicts.iter().all(|c| !c.overwritten));
    assert_eq!(
        sessions(&target).await,
        moved_on,
        "the target's entries are kept"
    );

    // Only when asked does the source win.
    let forced = agent_sessions::ops::migrate_with(
        &source,
        &target,
        &agent_sessions::ops::MigrateOptions::overwriting_conflicts(),
        &NoProgress,
    )
    .await
    .unwrap();
    assert!(forced.session_conflicts.iter().all(|c| c.overwritten));
    assert_eq!(sessions(&target).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_on_the_target_during_a_migration_loses_nothing() {
    let (_dirs, source, target) = busy_source_and_empty_sqlite().await;
    let keys: Vec<SessionKey> = sessions(&source)
        .await
        .keys()
        .map(|k| SessionKey::parse(k).unwrap())
        .collect();
    // Between the source's listing and the copy, a writer creates and updates every
    // key in the target (counting from the source's value, 0).
    let writer = WriterDuringCopy(|| {
        block_on(async {
            for key in &keys {
                bump(&target, key, 1).await;
            }
        })
    });
    let report = agent_sessions::ops::migrate_with(
        &source,
        &target,
        &agent_sessions::ops::MigrateOptions::default(),
        &writer,
    )
    .await
    .unwrap();
    assert_eq!(report.session_conflicts.len(), keys.len());
    assert!(!report.verified());
    for key in &keys {
        let entry = target.sessions().get(key).await.unwrap().unwrap().entry;
        assert_eq!(
            entry.compaction_count,
            Some(1),
            "{key}: the writer's update was lost"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_written_during_a_migration_fails_verification_by_name() {
    let (_dirs, source, target) = busy_source_and_empty_sqlite().await;
    let key = SessionKey::parse("agent:main:telegram:dm:42").unwrap();
    let writer = WriterDuringCopy(|| block_on(bump(&source, &key, 5)));
    let report = migrate(&source, &target, &writer).await.unwrap();
    assert!(!report.verified());
    assert_eq!(report.source_changed, std::slice::from_ref(&key));

    // With the writer stopped, running again reports the stale copy as a conflict
    // instead of silently keeping it; overwriting settles it.
    let again = migrate(&source, &target, &NoProgress).await.unwrap();
    assert_eq!(again.session_conflicts.len(), 1);
    assert_eq!(again.session_conflicts[0].key, key);
}

/// Lists `backend` after one entry (`bad`) was damaged behind its back: the listing
/// skips it and shows the rest, `get` reports it, nothing is rewritten.
async fn a_damaged_entry_is_skipped_by_list_and_reported_by_get(
    backend: &Backend,
    bad: &SessionKey,
) {
    let listed = backend.sessions().list(&ListFilter::new()).await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the good session is listed, the damaged one skipped"
    );
    assert_ne!(&listed[0].key, bad);
    assert!(matches!(
        backend.sessions().get(bad).await,
        Err(agent_sessions::Error::InvalidEntry { .. })
    ));
}

fn two_sessions() -> [(SessionKey, SessionEntry); 2] {
    [
        (
            SessionKey::parse("agent:main:telegram:dm:good").unwrap(),
            SessionEntry::new("s-good", 2),
        ),
        (
            SessionKey::parse("agent:main:telegram:dm:bad").unwrap(),
            SessionEntry::new("s-bad", 1),
        ),
    ]
}

#[tokio::test]
async fn every_store_lists_around_an_entry_it_cannot_decode() {
    let [good, bad] = two_sessions();
    // JSON: the entry's sessionId is a number.
    let json_dir = tempfile::tempdir().unwrap();
    let json = Backend::open(&format!("json:{}", json_dir.path().display()))
        .await
        .unwrap();
    for (key, entry) in [&good, &bad] {
        json.sessions().put(key, entry.clone()).await.unwrap();
    }
    let file = agent_sessions::store::store_path(json_dir.path(), &AgentId::main());
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("\"s-bad\"", "42")).unwrap();
    a_damaged_entry_is_skipped_by_list_and_reported_by_get(&json, &bad.0).await;

    // SQLite: the row's entry is not JSON.
    let db = json_dir.path().join("s.db");
    let sqlite = Backend::open(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    for (key, entry) in [&good, &bad] {
        sqlite.sessions().put(key, entry.clone()).await.unwrap();
    }
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE sessions SET entry = '{not json' WHERE session_key = ?1",
            [bad.0.as_str()],
        )
        .unwrap();
    a_damaged_entry_is_skipped_by_list_and_reported_by_get(&sqlite, &bad.0).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_lists_around_an_entry_it_cannot_decode() {
    let [good, bad] = two_sessions();
    let schema = common::TestSchema::new("damaged_entry");
    let postgres = Backend::open(&schema.url()).await.unwrap();
    for (key, entry) in [&good, &bad] {
        postgres.sessions().put(key, entry.clone()).await.unwrap();
    }
    let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .execute(
            &format!(
                "UPDATE {}.sessions SET entry = '{{\"sessionId\": 42}}' WHERE session_key = $1",
                schema.name
            ),
            &[&bad.0.as_str()],
        )
        .await
        .unwrap();
    a_damaged_entry_is_skipped_by_list_and_reported_by_get(&postgres, &bad.0).await;
    schema.drop().await;
}

#[tokio::test]
async fn a_migration_never_verifies_past_what_it_could_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = agent_sessions::store::sessions_dir(dir.path(), &AgentId::main());
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(
        sessions.join("sessions.json"),
        r#"{
  "agent:main:telegram:dm:alice": {"sessionId": "a-1", "updatedAt": 1795676613350},
  "agent:main:telegram:dm:Alice": {"sessionId": "a-2", "updatedAt": 1795676613351},
  "agent:other:telegram:dm:bob": {"sessionId": "b-3", "updatedAt": 1795676613352},
  "agent:main:telegram:dm:carol": {"sessionId": "c-4", "updatedAt": "yesterday"}
}"#,
    )
    .unwrap();
    // An archived transcript whose last line was torn by a crash.
    let torn = "{\"type\":\"session\",\"id\":\"a-1\"}\ngarbage line\n{\"partial\":";
    std::fs::write(
        sessions.join("a-1.jsonl.reset.2026-01-01T00-00-00.000Z"),
        torn,
    )
    .unwrap();
    // An agent directory whose name is not an agent id.
    let upper = dir.path().join("agents/Work/sessions");
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::write(
        upper.join("sessions.json"),
        r#"{"agent:work:main": {"sessionId": "w", "updatedAt": 1}}"#,
    )
    .unwrap();

    let source = Backend::open(&format!("json:{}", dir.path().display()))
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let target = Backend::open(&format!("sqlite:{}", work.path().join("s.db").display()))
        .await
        .unwrap();
    let report = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(!report.verified(), "what was not copied is never verified");
    let keys: Vec<&str> = report.unreadable.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "",
            "agent:main:telegram:dm:Alice",
            "agent:main:telegram:dm:carol",
            "agent:other:telegram:dm:bob",
        ],
        "{:#?}",
        report.unreadable
    );
    assert_eq!(report.sessions_copied, 1);
    // The torn last line travels as a line: nothing of the transcript is left behind.
    let copied = target
        .transcripts()
        .export_lines(&AgentId::main(), "a-1.jsonl.reset.2026-01-01T00-00-00.000Z")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(copied.join("\n"), torn);
}

#[cfg(unix)]
#[tokio::test]
async fn a_transcript_the_source_cannot_read_is_named_and_the_rest_is_copied() {
    let ((source_dir, _work), source, target) = busy_source_and_empty_sqlite().await;
    let sessions = agent_sessions::store::sessions_dir(source_dir.path(), &AgentId::main());
    let fifo = sessions.join("ffff-1.jsonl");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let report = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(!report.verified());
    assert!(
        report
            .unreadable
            .iter()
            .any(|u| u.location.ends_with("ffff-1.jsonl")),
        "{:#?}",
        report.unreadable
    );
    assert!(
        report.transcripts_copied > 0,
        "the other transcripts were copied"
    );
    assert_eq!(
        report.sessions_copied as usize,
        sessions_count(&source).await
    );
}

async fn sessions_count(backend: &Backend) -> usize {
    backend.sessions().count(&ListFilter::new()).await.unwrap()
}

/// `PostgresStore::connect` takes the same URLs as `SessionManager::connect` and the
/// command line: `?schema=` names the schema.
#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_connect_reads_the_schema_from_the_url() {
    use agent_sessions::store::{PostgresOptions, PostgresStore};
    let schema = common::TestSchema::new("url_schema");
    let by_url = PostgresStore::connect(&schema.url()).await.unwrap();
    let key = SessionKey::parse("agent:main:main").unwrap();
    by_url.put(&key, SessionEntry::new("s", 1)).await.unwrap();
    // (options, expected: Ok(session found) or the error's text)
    let cases: Vec<(PostgresOptions, Result<bool, &str>)> = vec![
        (PostgresOptions::default(), Ok(true)),
        (PostgresOptions::in_schema(&schema.name), Ok(true)),
        (PostgresOptions::in_schema("elsewhere"), Err("names schema")),
    ];
    for (options, expected) in cases {
        let described = format!("{options:?}");
        match (
            PostgresStore::connect_with(&schema.url(), options).await,
            expected,
        ) {
            (Ok(store), Ok(found)) => {
                assert_eq!(
                    store.get(&key).await.unwrap().is_some(),
                    found,
                    "{described}"
                )
            }
            (Err(error), Err(text)) => assert!(error.to_string().contains(text), "{error}"),
            (other, expected) => panic!("{described}: {:?} vs {expected:?}", other.err()),
        }
    }
    schema.drop().await;
}

/// A backend keeps group chatter where it keeps sessions, so a new `Backend` on the
/// same store sees it; one opened read-only keeps its own in memory and writes nothing.
#[tokio::test]
async fn group_history_lives_with_the_store_and_a_read_only_backend_writes_none() {
    use agent_sessions::inbound::ChatterEntry;
    use agent_sessions::store::OpenMode;
    let dir = tempfile::tempdir().unwrap();
    let said = |body: &str| ChatterEntry {
        sender: "Ann".into(),
        body: body.into(),
        timestamp: Some(1_773_136_800_000),
        message_id: None,
        sender_id: None,
    };
    const GROUP: &str = "telegram:default:group:-100";
    let urls = [
        format!("json:{}", dir.path().join("tree").display()),
        format!("sqlite:{}", dir.path().join("sessions.db").display()),
    ];
    for url in urls {
        let writer = Backend::open(&url).await.unwrap();
        // A session, so that the store exists for a read-only open.
        let key = SessionKey::parse("agent:main:main").unwrap();
        writer
            .sessions()
            .put(&key, SessionEntry::new("s", 1))
            .await
            .unwrap();
        writer.chatter().append(GROUP, said("a")).await.unwrap();
        let again = Backend::open(&url).await.unwrap();
        assert_eq!(
            again.chatter().entries(GROUP).await.unwrap(),
            [said("a")],
            "{url}"
        );
        {
            // A read-only backend reads the store's chatter (a copy carries it) and
            // writes nothing.
            let reader = Backend::open_with(&url, OpenMode::ReadOnly).await.unwrap();
            assert_eq!(reader.chatter().entries(GROUP).await.unwrap(), [said("a")]);
            assert_eq!(reader.chatter().export_groups().await.unwrap().len(), 1);
            assert!(matches!(
                reader.chatter().append(GROUP, said("b")).await,
                Err(agent_sessions::Error::NotConfigured { .. })
            ));
            assert!(reader.chatter().take(GROUP).await.is_err(), "{url}");
            assert!(reader.system_events().drain(&key).await.is_err(), "{url}");
        }
        assert_eq!(
            again.chatter().take(GROUP).await.unwrap(),
            [said("a")],
            "{url}: the store holds what the writer wrote, and only that"
        );
    }
}

/// An OpenClaw store whose delivery fields are not yet in the form every store saves
/// them (no `deliveryContext`, an untrimmed channel) migrates verified, and a second
/// run finds nothing to copy and no conflict.
#[tokio::test]
async fn entries_written_before_delivery_normalisation_migrate_verified_and_resume_cleanly() {
    let entries = [
        r#""agent:main:telegram:dm:1": {"sessionId": "aaaaaaaa-0000-4000-8000-000000000001", "updatedAt": 1770350123456, "lastChannel": "telegram", "lastTo": "telegram:1"}"#,
        r#""agent:main:telegram:dm:2": {"sessionId": "aaaaaaaa-0000-4000-8000-000000000002", "updatedAt": 1770350123457, "channel": "Telegram "}"#,
        r#""agent:main:whatsapp:dm:+15550100": {"sessionId": "aaaaaaaa-0000-4000-8000-000000000003", "updatedAt": 1770350123458, "deliveryContext": {"channel": " WhatsApp", "to": "+15550100"}}"#,
    ];
    let source_dir = tempfile::tempdir().unwrap();
    let file = agent_sessions::store::store_path(source_dir.path(), &AgentId::main());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, format!("{{\n  {}\n}}", entries.join(",\n  "))).unwrap();
    let target_dir = tempfile::tempdir().unwrap();
    let source = Backend::open(&format!("json:{}", source_dir.path().display()))
        .await
        .unwrap();
    let target = Backend::open(&format!(
        "sqlite:{}",
        target_dir.path().join("t.db").display()
    ))
    .await
    .unwrap();
    let first = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(first.verified(), "{first:?}");
    assert_eq!(first.sessions_copied, 3);
    let again = migrate(&source, &target, &NoProgress).await.unwrap();
    assert!(again.verified(), "{again:?}");
    assert!(again.session_conflicts.is_empty());
    assert_eq!((again.sessions_copied, again.sessions_skipped), (0, 3));
}

/// Everything of `backend` a copy must carry beside sessions and transcripts: the
/// closed sessions (by id, entry without its `sessionFile` path), pending group
/// chatter and queued system events.
async fn the_rest(
    backend: &Backend,
) -> (
    BTreeMap<String, (String, SessionEntry)>,
    Vec<(String, agent_sessions::inbound::GroupChatter)>,
    Vec<(SessionKey, Vec<(String, i64)>)>,
) {
    let current: Vec<String> = backend
        .sessions()
        .list(&ListFilter::all())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.entry.session_id)
        .collect();
    let any = ListFilter::new().any_status();
    let closed = backend
        .sessions()
        .list(&any)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| !current.contains(&s.entry.session_id))
        .map(|s| {
            let mut entry = s.entry;
            entry.session_file = entry
                .session_file
                .as_deref()
                .map(|f| file_name(f).to_owned());
            (entry.session_id.clone(), (s.key.to_string(), entry))
        })
        .collect();
    let mut chatter = backend.chatter().export_groups().await.unwrap();
    chatter.sort_by(|a, b| a.0.cmp(&b.0));
    let mut events: Vec<(SessionKey, Vec<(String, i64)>)> = backend
        .system_events()
        .export_queues()
        .await
        .unwrap()
        .into_iter()
        .map(|(k, q)| {
            let q = q
                .into_iter()
                .map(|e| (e.text, e.at.timestamp_micros()))
                .collect();
            (k, q)
        })
        .collect();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    (closed, chatter, events)
}

/// An OpenClaw tree in use: closed sessions under two keys (more than a copy used to
/// carry), group chatter waiting for the next turn with its message ids, chatter a
/// killed turn still holds claimed, a DM answered with its message id, and system
/// events queued.
async fn a_store_in_use() -> tempfile::TempDir {
    let dir = busy_openclaw_tree().await;
    let url = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    for (peer, resets) in [("501", 12), ("502", 9)] {
        let message = InboundMessage::direct("telegram", peer, "hello").from_person(peer);
        let key = manager.key_for(&message).unwrap();
        for n in 0..resets {
            let mut message = message.clone();
            message.body = format!("message {n}");
            manager
                .turn(&message)
                .await
                .unwrap()
                .complete("ok")
                .await
                .unwrap();
            manager.session(&key).reset().await.unwrap();
        }
    }
    let group = |sender: &str, text: &str, id: &str| {
        InboundMessage::group("whatsapp", "120363555@g.us", sender, text).with_message_id(id)
    };
    for (n, sender) in ["+15550001", "+15550002", "+15550003"].iter().enumerate() {
        let turn = manager
            .turn(&group(sender, &format!("chatter {n}"), &format!("g{n}")))
            .await
            .unwrap();
        assert_eq!(turn.action(), &TurnAction::StaySilent);
    }
    // A turn that claimed chatter of another group and was killed before logging it.
    let backend = Backend::open(&url).await.unwrap();
    let other = "agent:main:whatsapp:default:group:120363666@g.us";
    backend
        .chatter()
        .append_once(
            other,
            agent_sessions::inbound::ChatterEntry {
                sender: "Ann".into(),
                body: "held by a dead turn".into(),
                timestamp: Some(1_770_000_000_000),
                message_id: Some("c1".into()),
                sender_id: Some("+15550009".into()),
            },
            std::time::Duration::from_secs(1200),
        )
        .await
        .unwrap();
    let claim = agent_sessions::inbound::ChatterClaim {
        id: "line-1".into(),
        holder: "gone/1/1#t".into(),
        witness: "main/none.jsonl".into(),
        at: 1_770_000_000_000,
    };
    backend.chatter().claim(other, &claim, &[]).await.unwrap();
    let dm = InboundMessage::direct("telegram", "601", "answered once")
        .from_person("601")
        .with_message_id("d1");
    manager
        .turn(&dm)
        .await
        .unwrap()
        .complete("done")
        .await
        .unwrap();
    let key = manager.key_for(&dm).unwrap();
    manager
        .session(&key)
        .enqueue_system_event("Model switched.")
        .await
        .unwrap();
    manager
        .session(&key)
        .enqueue_system_event("Reminder fired.")
        .await
        .unwrap();
    dir
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn everything_a_store_holds_travels_from_openclaw_through_sqlite_and_postgres_and_back() {
    let source_dir = a_store_in_use().await;
    let source = Backend::open(&format!("json:{}", source_dir.path().display()))
        .await
        .unwrap();
    let (closed, chatter, events) = the_rest(&source).await;
    assert!(
        closed.len() > 20,
        "the source has many closed sessions: {}",
        closed.len()
    );
    assert_eq!(chatter.len(), 2, "{chatter:?}");
    assert!(chatter
        .iter()
        .any(|(_, g)| !g.claimed.is_empty() && !g.seen.is_empty()));
    assert_eq!(events.len(), 1);

    let work = tempfile::tempdir().unwrap();
    let sqlite = Backend::open(&format!("sqlite:{}", work.path().join("s.db").display()))
        .await
        .unwrap();
    let schema = common::TestSchema::new("everything");
    let postgres = Backend::open(&schema.url()).await.unwrap();
    let back_dir = work.path().join("back");
    let back = Backend::open(&format!("json:{}", back_dir.display()))
        .await
        .unwrap();
    for (from, to) in [(&source, &sqlite), (&sqlite, &postgres), (&postgres, &back)] {
        let report = migrate(from, to, &NoProgress).await.unwrap();
        assert!(report.verified(), "{report:#?}");
        assert_eq!(report.closed_sessions_copied as usize, closed.len());
        assert_eq!(report.source.closed_sessions as usize, closed.len());
        assert_eq!(report.chatter_groups_copied, 2);
        assert_eq!(report.system_event_queues_copied, 1);
        assert!(report.source.differing(&report.target).is_empty());
        let (their_closed, their_chatter, their_events) = the_rest(to).await;
        assert_eq!(their_closed, closed, "closed sessions in {}", to.url());
        assert_eq!(their_chatter, chatter, "chatter in {}", to.url());
        assert_eq!(their_events, events, "system events in {}", to.url());
    }
    assert_same_content(&source, &back, Some(&back_dir)).await;

    // On the last copy, a message delivered again is a duplicate, as on the source:
    // the group's chatter and the answered DM alike.
    let manager = SessionManager::connect(&format!("json:{}", back_dir.display()))
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    let again = InboundMessage::group("whatsapp", "120363555@g.us", "+15550001", "chatter 0")
        .with_message_id("g0");
    assert_eq!(
        manager.turn(&again).await.unwrap().action(),
        &TurnAction::Duplicate
    );
    let dm = InboundMessage::direct("telegram", "601", "answered once")
        .from_person("601")
        .with_message_id("d1");
    assert_eq!(
        manager.turn(&dm).await.unwrap().action(),
        &TurnAction::Duplicate
    );
    // The chatter waiting on the source reaches the next answered turn on the copy.
    let mention = InboundMessage::group("whatsapp", "120363555@g.us", "+15550004", "@bot hi")
        .with_message_id("g9")
        .mentioning_agent();
    let turn = manager.turn(&mention).await.unwrap();
    assert_eq!(turn.action(), &TurnAction::Answer);
    let input = turn.input().unwrap().to_owned();
    assert!(
        input.contains("chatter 0") && input.contains("chatter 2"),
        "{input}"
    );
    schema.drop().await;
}

/// A source that holds more closed sessions of one key than the target keeps (an
/// OpenClaw tree's file edited by hand, say): the migration says how many it copied
/// and how many the target did not keep, and does not verify.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_sessions_past_the_targets_cap_are_counted_as_not_kept() {
    let source_dir = a_store_in_use().await;
    let closed_file = source_dir
        .path()
        .join("agents/main/sessions/sessions.closed.json");
    let mut file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&closed_file).unwrap()).unwrap();
    let sessions = file["sessions"].as_array_mut().unwrap();
    let first = sessions[0].clone();
    let key = first["sessionKey"].as_str().unwrap().to_owned();
    let of_key = sessions.iter().filter(|s| s["sessionKey"] == key).count();
    let extra = agent_sessions::CLOSED_SESSIONS_PER_KEY + 3 - of_key;
    for n in 0..extra {
        let mut more = first.clone();
        more["entry"]["sessionId"] = format!("0000000{n}-extra").into();
        sessions.insert(0, more);
    }
    std::fs::write(&closed_file, serde_json::to_vec(&file).unwrap()).unwrap();
    let source = Backend::open(&format!("json:{}", source_dir.path().display()))
        .await
        .unwrap();
    let (closed, _, _) = the_rest(&source).await;

    let work = tempfile::tempdir().unwrap();
    let sqlite = Backend::open(&format!("sqlite:{}", work.path().join("s.db").display()))
        .await
        .unwrap();
    let report = migrate(&source, &sqlite, &NoProgress).await.unwrap();
    assert_eq!(report.closed_sessions_dropped, 3, "{report:#?}");
    assert_eq!(
        (report.closed_sessions_copied + report.closed_sessions_dropped) as usize,
        closed.len()
    );
    let (kept, _, _) = the_rest(&sqlite).await;
    assert_eq!(kept.len() as u64, report.closed_sessions_copied);
    assert!(!report.verified(), "{report:#?}");
    assert!(!report.source.differing(&report.target).is_empty());
}
