//! Erasing a person: their data written through every path the crate has, then
//! `forget_person`, then every byte the backend keeps searched for their ids and for
//! words only they wrote — on a JSON tree, SQLite and PostgreSQL, once with the erase
//! killed at random points and run again.
//!
//! The killed processes are this test binary run again: the ignored tests
//! `erase_child` and `turn_child` do the work the parent kills.
#![cfg(unix)]

mod common;

#[path = "common/stores.rs"]
mod stores;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use agent_sessions::identity::{Area, Workspaces};
use agent_sessions::inbound::{Attachment, AttachmentKind};
use agent_sessions::prelude::*;
use agent_sessions::privacy::{ForgetOptions, PersonRef};
use agent_sessions::store::Backend;
use agent_sessions::transcript::TranscriptEntry;
use agent_sessions::Sender;

/// Jane's person id, her Telegram id and her phone number.
const JANE: &str = "person-jq7";
const JANE_TELEGRAM: &str = "48151623";
const JANE_PHONE: &str = "+15550100777";
/// Bob, who stays.
const BOB_PHONE: &str = "+15550200888";
const GROUP: &str = "120363777@g.us";

/// Words only Jane wrote (or that only her sessions hold), one per path.
const JANE_WORDS: &[&str] = &[
    "jqalphadm",        // her Telegram DM
    "jqbravosms",       // her SMS DM
    "jqcharliereset",   // before a reset (the archived transcript)
    "jqdeltacompacted", // a compaction summary of her DM
    "jqechoworkspace",  // a file in her workspace
    "jqfoxtrotchatter", // group chatter shown to the model in Bob's line
    "jqgolfgroup",      // her own message in the group
    "jqhotelpending",   // chatter still waiting in the group's chatter
    "jqindiaclosed",    // a session she closed
    "jqjulietevent",    // a system event queued for her
    "jqkilokilled",     // the turn killed mid-way
    "jqlimafile",       // the name of a file she sent in her DM
    "jqmikecaption",    // that file's own caption
    "jqnovemberphoto",  // a photo she sent the agent in the group, beside Bob's chatter
];

/// Words of Bob's that must stay.
const BOB_WORDS: &[&str] = &["bobdmkeepsake", "bobgroupkeepsake"];

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

async fn manager(url: &str, workspaces: &Path) -> SessionManager {
    SessionManager::connect(url)
        .await
        .unwrap()
        .workspaces(Workspaces::new(workspaces))
        .build()
        .unwrap()
}

fn telegram(text: &str, id: &str) -> InboundMessage {
    InboundMessage::direct("telegram", JANE_TELEGRAM, text)
        .from_person(JANE)
        .with_sender_name("Quillfeather")
        .with_message_id(id)
}

fn sms(text: &str, id: &str) -> InboundMessage {
    InboundMessage::direct("sms", JANE_PHONE, text)
        .from_person(JANE)
        .with_message_id(id)
}

fn in_group(name: &str, phone: &str, person: &str, text: &str, id: &str) -> InboundMessage {
    InboundMessage::group("whatsapp", GROUP, phone, text)
        .with_sender(Sender {
            id: Some(phone.into()),
            name: Some(name.into()),
            e164: Some(phone.into()),
            ..Sender::default()
        })
        .from_person(person)
        .with_message_id(id)
}

async fn answer(manager: &SessionManager, message: &InboundMessage, reply: &str) {
    let turn = manager.turn(message).await.unwrap();
    turn.complete(reply).await.unwrap();
}

/// Writes Jane's data through every path, and Bob's beside it.
async fn write_everything(url: &str, workspaces: &Path) {
    let manager = manager(url, workspaces).await;
    // Direct messages on two channels.
    answer(&manager, &telegram("hello jqalphadm", "t1"), "noted").await;
    answer(&manager, &sms("text jqbravosms", "s1"), "noted").await;
    // A reset: the first Telegram session is archived and closed.
    answer(&manager, &telegram("remember jqcharliereset", "t2"), "ok").await;
    answer(&manager, &telegram("/new", "t3"), "fresh").await;
    answer(&manager, &telegram("back again", "t4"), "hi").await;
    // A file in her DM: its name and caption are hers.
    let file = Attachment::new(AttachmentKind::Document)
        .with_file_name("jqlimafile.pdf")
        .with_caption("jqmikecaption")
        .with_file_id("BQACAgIAAxkB");
    answer(
        &manager,
        &telegram("", "t5").with_attachment(file),
        "got it",
    )
    .await;
    let tg = manager.key_for(&telegram("x", "x")).unwrap();
    // A compaction summary in her DM.
    let compaction: TranscriptEntry = serde_json::from_value(serde_json::json!({
        "type": "compaction", "id": "c0ffee01", "parentId": null,
        "timestamp": "2026-02-06T10:00:00.000Z",
        "summary": "she mentioned jqdeltacompacted", "firstKeptEntryId": "c0ffee01",
        "tokensBefore": 1000
    }))
    .unwrap();
    manager.session(&tg).append(vec![compaction]).await.unwrap();
    manager
        .session(&tg)
        .record_compaction(Some(100))
        .await
        .unwrap();
    // A workspace with a file, and the rolling summary of what she said.
    let workspace = manager.session(&tg).workspace().await.unwrap();
    workspace
        .write(Area::Exports, "notes.txt", b"jqechoworkspace")
        .unwrap();
    manager
        .refresh_identity_summary(JANE, "main")
        .await
        .unwrap();
    // A system event waiting for her next turn.
    manager
        .session(&tg)
        .enqueue_system_event("reminder jqjulietevent")
        .await
        .unwrap();
    // A closed session: closed, then a new one on the next message.
    let sms_key = manager.key_for(&sms("x", "x")).unwrap();
    answer(&manager, &sms("one more jqindiaclosed", "s2"), "ok").await;
    manager.session(&sms_key).close().await.unwrap();
    answer(&manager, &sms("after closing", "s3"), "ok").await;
    // Bob's own conversation.
    let bob_dm = InboundMessage::direct("whatsapp", BOB_PHONE, "my bobdmkeepsake")
        .from_person("bob")
        .with_message_id("b1");
    answer(&manager, &bob_dm, "fine").await;
    // The group: Jane chatters (kept as history), Bob asks the agent (her chatter is
    // in his line) and names her number, Jane asks the agent, Jane chatters again
    // (still waiting), Bob chatters.
    let jane_says = |text: &str, id: &str| in_group("Quillfeather", JANE_PHONE, JANE, text, id);
    let bob_says = |text: &str, id: &str| in_group("Bob", BOB_PHONE, "bob", text, id);
    answer(
        &manager,
        &jane_says("lunch at jqfoxtrotchatter?", "g1"),
        "-",
    )
    .await;
    answer(
        &manager,
        &bob_says(
            &format!("@bot call {JANE_PHONE} about bobgroupkeepsake"),
            "g2",
        )
        .mentioning_agent(),
        "will do",
    )
    .await;
    answer(
        &manager,
        &jane_says("@bot jqgolfgroup please", "g3").mentioning_agent(),
        "sure",
    )
    .await;
    // Bob chatters; Jane sends the agent a photo: her line carries his chatter.
    answer(&manager, &bob_says("nice weather", "g8"), "-").await;
    let photo = Attachment::new(AttachmentKind::Image).with_file_name("jqnovemberphoto.jpg");
    answer(
        &manager,
        &jane_says("@bot look", "g7")
            .mentioning_agent()
            .with_attachment(photo),
        "lovely",
    )
    .await;
    // The group's session is reset: the one Jane wrote in is kept closed, its
    // transcript archived.
    let group = manager.key_for(&bob_says("x", "x")).unwrap();
    manager.session(&group).reset().await.unwrap();
    answer(
        &manager,
        &bob_says("@bot a new topic", "g6").mentioning_agent(),
        "ok",
    )
    .await;
    answer(&manager, &jane_says("and jqhotelpending", "g4"), "-").await;
    answer(&manager, &bob_says("just chatting", "g5"), "-").await;
    // The search index of the message log.
    let backend = Backend::open(url).await.unwrap();
    let search =
        agent_sessions::transcript::search::Search::shared(backend.search_index().await.unwrap());
    search.sync(&**backend.transcripts()).await.unwrap();
}

/// Runs this binary's ignored test `name` with `vars`.
fn child(name: &str, vars: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in vars {
        command.env(name, value);
    }
    command.spawn().unwrap()
}

/// A turn of Jane's killed after its message was logged, before the reply.
fn kill_a_turn(url: &str, workspaces: &Path) {
    kill_a_turn_of(url, workspaces, "t9");
}

/// A turn of Jane's on a message with channel message id `id` (none if empty), killed
/// after its message was logged, before the reply.
fn kill_a_turn_of(url: &str, workspaces: &Path, id: &str) {
    let mut turn = child(
        "turn_child",
        &[
            ("PERSONAL_DATA_URL", url.to_owned()),
            ("PERSONAL_DATA_WORKSPACES", workspaces.display().to_string()),
            ("PERSONAL_DATA_MESSAGE_ID", id.to_owned()),
        ],
    );
    let mut lines = BufReader::new(turn.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|line| line.unwrap().contains("TURN-STARTED")),
        "the child started its turn"
    );
    turn.kill().unwrap();
    turn.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the erase tests in a child process"]
async fn turn_child() {
    let (Some(url), Some(workspaces)) = (
        env_var("PERSONAL_DATA_URL"),
        env_var("PERSONAL_DATA_WORKSPACES"),
    ) else {
        return;
    };
    let manager = manager(&url, Path::new(&workspaces)).await;
    let mut message = telegram("this is jqkilokilled", "t9");
    message.message_id = env_var("PERSONAL_DATA_MESSAGE_ID");
    let turn = manager.turn(&message).await.unwrap();
    println!("TURN-STARTED");
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(turn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the kill test in a child process"]
async fn erase_child() {
    let (Some(url), Some(workspaces)) = (
        env_var("PERSONAL_DATA_URL"),
        env_var("PERSONAL_DATA_WORKSPACES"),
    ) else {
        return;
    };
    let manager = manager(&url, Path::new(&workspaces)).await;
    println!("ERASE-STARTED");
    manager
        .forget_person(&PersonRef::person(JANE))
        .await
        .unwrap();
    println!("ERASE-DONE");
}

/// Every file under `dir` (links not followed), with its bytes.
fn files_under(dir: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&entry.path(), into);
        } else if kind.is_file() {
            into.insert(
                entry.path(),
                std::fs::read(entry.path()).unwrap_or_default(),
            );
        }
    }
}

fn needles() -> Vec<String> {
    let mut needles: Vec<String> = JANE_WORDS.iter().map(|w| w.to_string()).collect();
    needles.extend([
        JANE.into(),
        JANE_TELEGRAM.into(),
        JANE_PHONE.into(),
        "15550100777".into(),
        "Quillfeather".into(),
    ]);
    needles
}

fn hits(bytes: &[u8], needles: &[String]) -> Vec<String> {
    needles
        .iter()
        .filter(|n| bytes.windows(n.len()).any(|w| w == n.as_bytes()))
        .cloned()
        .collect()
}

/// Every row of every table of the crate's schema, as text.
#[cfg(feature = "postgres")]
async fn postgres_rows(url: &str) -> Vec<String> {
    let (server, schema) = url.split_once("?schema=").unwrap();
    let (client, connection) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let tables = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1",
            &[&schema],
        )
        .await
        .unwrap();
    let mut rows = Vec::new();
    for table in tables {
        let table: String = table.get(0);
        for row in client
            .query(&format!("SELECT t::text FROM {schema}.{table} t"), &[])
            .await
            .unwrap()
        {
            rows.push(format!("{table}: {}", row.get::<_, String>(0)));
        }
    }
    rows
}

/// What the backend keeps, for scanning: every file of the state directory (JSON),
/// the database's files (SQLite, with its log), every row (PostgreSQL), and the
/// workspaces.
async fn everything(url: &str, state: &Path, workspaces: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    files_under(state, &mut all);
    files_under(workspaces, &mut all);
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres") {
        for (n, row) in postgres_rows(url).await.into_iter().enumerate() {
            all.insert(PathBuf::from(format!("row {n}")), row.into_bytes());
        }
    }
    let _ = url;
    all
}

/// Bob's DM transcript and entry, and the group's transcript.
async fn bobs_data(url: &str) -> (Vec<String>, String, Vec<String>) {
    let backend = Backend::open(url).await.unwrap();
    let sessions = backend.sessions().list(&ListFilter::new()).await.unwrap();
    let bob = sessions
        .iter()
        .find(|s| s.entry.person_id.as_deref() == Some("bob") && !s.key.as_str().contains("group"))
        .expect("Bob's session");
    let group = sessions
        .iter()
        .find(|s| s.key.as_str().contains("group"))
        .expect("the group's session");
    let lines = |session_id: String| {
        let transcripts = backend.transcripts().clone();
        async move {
            transcripts
                .export_lines(&AgentId::main(), &format!("{session_id}.jsonl"))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let bob_lines = lines(bob.entry.session_id.clone()).await;
    let group_lines = lines(group.entry.session_id.clone()).await;
    (
        bob_lines,
        serde_json::to_string(&bob.entry).unwrap(),
        group_lines,
    )
}

/// Jane's copy of her data, as text.
async fn export(url: &str, workspaces: &Path) -> String {
    let mut copy = Vec::new();
    manager(url, workspaces)
        .await
        .export_person(&PersonRef::person(JANE), &mut copy)
        .await
        .unwrap();
    let text = String::from_utf8(copy).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).expect("the copy is one JSON document");
    text
}

/// Writes, kills a turn, erases (`kills` times killed first), and checks.
async fn erase_and_scan(url: &str, state: &Path, workspaces: &Path, kills: usize) {
    write_everything(url, workspaces).await;
    kill_a_turn(url, workspaces);
    let before = everything(url, state, workspaces).await;
    let found: Vec<String> = before
        .values()
        .flat_map(|bytes| hits(bytes, &needles()))
        .collect();
    for word in JANE_WORDS {
        assert!(
            found.iter().any(|f| f == word),
            "{word} was written somewhere before the erase"
        );
    }
    let bob_before = bobs_data(url).await;
    // Her copy holds what she said, wherever it is.
    let copy = export(url, workspaces).await;
    for word in JANE_WORDS {
        let elsewhere = ["jqechoworkspace", "jqjulietevent"];
        assert!(
            copy.contains(word) || elsewhere.contains(word),
            "her copy holds {word}"
        );
    }
    assert!(
        copy.contains("notes.txt"),
        "her workspace's files are listed"
    );
    assert!(!copy.contains("bobdmkeepsake"), "not Bob's conversation");

    // A new seed each run (printed, so a failure can be replayed with
    // PERSONAL_DATA_SEED).
    let mut seed = env_var("PERSONAL_DATA_SEED")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    if kills > 0 {
        eprintln!("PERSONAL_DATA_SEED={seed}");
    }
    for _ in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut erase = child(
            "erase_child",
            &[
                ("PERSONAL_DATA_URL", url.to_owned()),
                ("PERSONAL_DATA_WORKSPACES", workspaces.display().to_string()),
            ],
        );
        let mut lines = BufReader::new(erase.stdout.take().unwrap()).lines();
        assert!(lines.any(|l| l.unwrap().contains("ERASE-STARTED")));
        std::thread::sleep(Duration::from_micros(seed % 90_000));
        erase.kill().unwrap();
        erase.wait().unwrap();
    }

    let manager = manager(url, workspaces).await;
    let report = manager
        .forget_person_with(&PersonRef::person(JANE), ForgetOptions::new().vacuum())
        .await
        .unwrap();
    let report_text = serde_json::to_string(&report).unwrap();
    assert!(
        hits(report_text.as_bytes(), &needles()).is_empty(),
        "the report holds no personal data"
    );
    if kills == 0 {
        assert_eq!(
            report.sessions, 2,
            "her Telegram and SMS sessions: {report:?}"
        );
        assert!(
            report.closed_sessions >= 2,
            "the reset and the closed session: {report:?}"
        );
        assert!(
            report.redacted_lines >= 2,
            "her group line and Bob's: {report:?}"
        );
        assert!(
            report.chatter_entries >= 1,
            "the chatter still waiting: {report:?}"
        );
        assert_eq!(report.workspaces, 1, "{report:?}");
        assert!(report.search_messages > 0, "{report:?}");
    }
    // Nothing of hers anywhere.
    for (path, bytes) in everything(url, state, workspaces).await {
        let found = hits(&bytes, &needles());
        let lines: Vec<String> = String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| !hits(line.as_bytes(), &found).is_empty())
            .take(3)
            .map(|line| line.chars().take(600).collect())
            .collect();
        assert!(
            found.is_empty(),
            "{} still holds {found:?}: {lines:#?}",
            path.display()
        );
    }
    // A migration after the erase has nothing of hers to bring back.
    #[cfg(feature = "sqlite")]
    {
        let copy_dir = tempfile::tempdir().unwrap();
        let target = format!("sqlite:{}", copy_dir.path().join("copy.db").display());
        agent_sessions::ops::migrate(
            &Backend::open(url).await.unwrap(),
            &Backend::open(&target).await.unwrap(),
            &agent_sessions::ops::NoProgress,
        )
        .await
        .unwrap();
        let mut copied = BTreeMap::new();
        files_under(copy_dir.path(), &mut copied);
        for (path, bytes) in copied {
            let found = hits(&bytes, &needles());
            assert!(
                found.is_empty(),
                "the migrated {} holds {found:?}",
                path.display()
            );
        }
    }
    // Running it again finds nothing more.
    let again = manager
        .forget_person(&PersonRef::person(JANE))
        .await
        .unwrap();
    assert_eq!(
        (again.sessions, again.transcripts, again.redacted_lines),
        (0, 0, 0)
    );
    // Bob's data is as it was, byte for byte, where it did not name her.
    let bob_after = bobs_data(url).await;
    assert_eq!((&bob_after.0, &bob_after.1), (&bob_before.0, &bob_before.1));
    assert_eq!(
        bob_after.2.len(),
        bob_before.2.len(),
        "no line of the group's moved"
    );
    for (before, after) in bob_before.2.iter().zip(&bob_after.2) {
        if hits(before.as_bytes(), &needles()).is_empty() {
            assert_eq!(before, after, "a line that did not name her stays");
        } else {
            assert_eq!(before.len(), after.len(), "an edited line keeps its length");
        }
    }
    // The search index knows Bob's words and none of hers.
    let backend = Backend::open(url).await.unwrap();
    let search =
        agent_sessions::transcript::search::Search::shared(backend.search_index().await.unwrap());
    for word in BOB_WORDS {
        let hits = search
            .search(&agent_sessions::transcript::search::SearchQuery::text(
                *word,
            ))
            .await
            .unwrap();
        assert!(!hits.is_empty(), "Bob's {word} is still found");
    }
    for word in JANE_WORDS {
        let hits = search
            .search(&agent_sessions::transcript::search::SearchQuery::text(
                *word,
            ))
            .await
            .unwrap();
        assert!(hits.is_empty(), "{word} is not found");
    }
    // Her copy is now empty.
    let copy: serde_json::Value = serde_json::from_str(&export(url, workspaces).await).unwrap();
    assert_eq!(copy["sessions"], serde_json::json!([]));
    assert_eq!(copy["sharedMessages"], serde_json::json!([]));
    assert_eq!(copy["groupHistory"], serde_json::json!([]));
    // She can come back: a new message starts a new, empty session.
    let fresh = manager
        .resolve(&telegram("hello again", "t10"))
        .await
        .unwrap();
    assert!(fresh.is_new());
    let listed = manager.list(&ListFilter::new().any_status()).await.unwrap();
    assert!(
        listed
            .iter()
            .filter(|s| s.entry.person_id.as_deref() == Some(JANE))
            .count()
            == 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_person_leaves_nothing_of_them_in_a_json_tree() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = format!("json:{}", state.display());
    erase_and_scan(&url, &state, &dir.path().join("workspaces"), 0).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_person_leaves_nothing_of_them_in_a_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("db");
    std::fs::create_dir(&state).unwrap();
    let url = format!("sqlite:{}", state.join("sessions.db").display());
    erase_and_scan(&url, &state, &dir.path().join("workspaces"), 0).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_a_person_leaves_nothing_of_them_in_postgres() {
    if env_var("AGENT_SESSIONS_TEST_POSTGRES_URL").is_none() {
        eprintln!("skipped: AGENT_SESSIONS_TEST_POSTGRES_URL is not set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schema = common::TestSchema::new("erase");
    erase_and_scan(&schema.url(), dir.path(), &dir.path().join("workspaces"), 0).await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erase_killed_at_random_points_finishes_when_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let url = format!("json:{}", state.display());
    erase_and_scan(&url, &state, &dir.path().join("workspaces"), 12).await;
}

#[tokio::test]
async fn only_the_owner_erases_and_a_person_may_take_their_own_copy() {
    use agent_sessions::identity::Caller;
    use agent_sessions::{AccessDenial, Error};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().join("state").display());
    let workspaces = dir.path().join("workspaces");
    let manager = manager(&url, &workspaces).await;
    answer(&manager, &telegram("hello jqalphadm", "t1"), "noted").await;
    let jane = PersonRef::person(JANE);
    fn owner_only<T>(result: agent_sessions::Result<T>) -> bool {
        matches!(
            result,
            Err(Error::AccessDenied {
                reason: AccessDenial::OwnerOnly,
                ..
            })
        )
    }
    // Not Bob, not Jane herself, not an owner limited to a namespace.
    for caller in [
        Caller::person("bob"),
        Caller::person(JANE),
        Caller::owner()
            .within_namespace("agent:main:telegram")
            .unwrap(),
    ] {
        let scoped = manager.scoped(caller.clone());
        assert!(
            owner_only(scoped.forget_person(&jane).await),
            "{caller:?} may not erase"
        );
    }
    let mut copy = Vec::new();
    let bob = manager.scoped(Caller::person("bob"));
    assert!(owner_only(bob.export_person(&jane, &mut copy).await));
    assert!(copy.is_empty(), "nothing was written for Bob");
    // Jane may take her own copy; the owner may erase her.
    let herself = manager.scoped(Caller::person(JANE));
    herself.export_person(&jane, &mut copy).await.unwrap();
    assert!(String::from_utf8_lossy(&copy).contains("jqalphadm"));
    assert!(
        manager.list(&ListFilter::new()).await.unwrap().len() == 1,
        "nothing erased yet"
    );
    let report = manager
        .scoped(Caller::owner())
        .forget_person(&jane)
        .await
        .unwrap();
    assert_eq!(report.sessions, 1);
}

/// Every session's entry and transcript lines, by key.
async fn snapshot(url: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let backend = Backend::open(url).await.unwrap();
    let mut all = BTreeMap::new();
    for session in backend
        .sessions()
        .list(&ListFilter::new().any_status())
        .await
        .unwrap()
    {
        let lines = backend
            .transcripts()
            .export_lines(
                &AgentId::main(),
                &format!("{}.jsonl", session.entry.session_id),
            )
            .await
            .unwrap()
            .unwrap_or_default();
        all.insert(
            format!("{} {}", session.key, session.entry.session_id),
            (serde_json::to_string(&session.entry).unwrap(), lines),
        );
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_one_person_leaves_people_with_overlapping_ids_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![format!("json:{}", dir.path().join("tree").display())];
    #[cfg(feature = "sqlite")]
    urls.push(format!("sqlite:{}", dir.path().join("s.db").display()));
    for url in &urls {
        let manager = manager(url, &dir.path().join("ws")).await;
        // 42's neighbours: 420, 4242424 and 42 on another channel, a group whose id
        // contains 42, and times that contain numbers.
        let dm = |channel: &str, id: &str, text: &str| InboundMessage::direct(channel, id, text);
        for (channel, id) in [
            ("telegram", "420"),
            ("telegram", "4242424"),
            ("whatsapp", "42"),
        ] {
            let text = format!("I am {id}, call telegram:420 or 42 at 20:42 on 2026-04-20");
            answer(&manager, &dm(channel, id, &text), "ok").await;
        }
        let group = |who: &str, text: &str| {
            InboundMessage::group("telegram", "-1004200042", who, text).with_sender_name(who)
        };
        answer(
            &manager,
            &group("420", "@bot hi from 420").mentioning_agent(),
            "hi",
        )
        .await;
        let before = snapshot(url).await;
        // Someone with no data at all: nothing changes.
        for nobody in ["telegram:2026", "telegram:main", "telegram:agent"] {
            let (channel, id) = nobody.split_once(':').unwrap();
            let report = manager
                .forget_person(&PersonRef::sender(channel, id))
                .await
                .unwrap();
            assert_eq!(
                (
                    report.sessions,
                    report.redacted_lines,
                    report.edited_sessions
                ),
                (0, 0, 0),
                "{url}: {nobody}"
            );
            assert_eq!(
                snapshot(url).await,
                before,
                "{url}: erasing {nobody} changed others' data"
            );
        }
        // A person whose id is `42` is not the WhatsApp sender 42.
        let report = manager
            .forget_person(&PersonRef::person("42"))
            .await
            .unwrap();
        assert_eq!(report.sessions, 0, "{url}: {report:?}");
        assert_eq!(snapshot(url).await, before, "{url}: erasing person 42");
        // 42 on Telegram: only their session goes.
        answer(&manager, &dm("telegram", "42", "I am 42"), "ok").await;
        let report = manager
            .forget_person(&PersonRef::sender("telegram", "42"))
            .await
            .unwrap();
        assert_eq!(report.sessions, 1, "{url}: {report:?}");
        assert_eq!(snapshot(url).await, before, "{url}: others' data changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_running_during_an_erase_completes_first_and_a_later_message_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().join("state").display());
    let manager = std::sync::Arc::new(manager(&url, &dir.path().join("ws")).await);
    answer(&manager, &telegram("hello jqalphadm", "t1"), "noted").await;
    // A turn of hers is running when the erase starts: the erase waits for it.
    let turn = manager
        .turn(&telegram("still typing jqbravosms", "t2"))
        .await
        .unwrap();
    let erase = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.forget_person(&PersonRef::person(JANE)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!erase.is_finished(), "the erase waits for the running turn");
    turn.complete("reply jqcharliereset").await.unwrap();
    let report = erase.await.unwrap().unwrap();
    assert_eq!(report.sessions, 1, "{report:?}");
    // Nothing of that conversation is left, the reply included.
    let mut all = BTreeMap::new();
    files_under(&dir.path().join("state"), &mut all);
    for (path, bytes) in &all {
        let found = hits(bytes, &needles());
        assert!(found.is_empty(), "{} holds {found:?}", path.display());
    }
    // Her next message starts a new, empty session.
    let next = manager.resolve(&telegram("hi again", "t3")).await.unwrap();
    assert!(next.is_new());
    let key = manager.key_for(&telegram("x", "x")).unwrap();
    assert!(manager.session(&key).messages().await.unwrap().len() <= 1);
}

/// A worker killed between `turn` and `complete` on a message without a channel message
/// id (the README's quickstart sends none) leaves the session `running`; its holder is
/// dead, so an erase goes ahead at once instead of waiting 30 s and failing — and so do
/// a delete and a prune.
async fn a_killed_turn_holds_nothing_up(url: &str, workspaces: &Path) {
    let manager = manager(url, workspaces).await;
    let mut hello = telegram("hello jqalphadm", "");
    hello.message_id = None;
    answer(&manager, &hello, "noted").await;
    let key = manager.key_for(&hello).unwrap();
    let bob = InboundMessage::direct("telegram", "777001", "hi bobdmkeepsake");
    answer(&manager, &bob, "hello Bob").await;
    let bob_key = manager.key_for(&bob).unwrap();

    kill_a_turn_of(url, workspaces, "");
    let entry = manager.session(&key).get().await.unwrap().unwrap();
    assert_eq!(
        entry.entry.status,
        Some(agent_sessions::SessionStatus::Running),
        "the kill left it running"
    );
    let report = tokio::time::timeout(
        Duration::from_secs(10),
        manager.forget_person(&PersonRef::person(JANE)),
    )
    .await
    .expect("the erase does not wait for a dead turn")
    .unwrap();
    assert_eq!(report.sessions, 1, "{report:?}");

    // Bob's turn killed the same way: his session can be deleted, and pruned.
    let killed_bob = |id: &str| {
        let mut turn = child(
            "bob_turn_child",
            &[
                ("PERSONAL_DATA_URL", url.to_owned()),
                ("PERSONAL_DATA_WORKSPACES", workspaces.display().to_string()),
                ("PERSONAL_DATA_MESSAGE_ID", id.to_owned()),
            ],
        );
        let mut lines = BufReader::new(turn.stdout.take().unwrap()).lines();
        assert!(lines.any(|line| line.unwrap().contains("TURN-STARTED")));
        turn.kill().unwrap();
        turn.wait().unwrap();
    };
    killed_bob("");
    let session = manager.session(&bob_key);
    assert_eq!(
        session.get().await.unwrap().unwrap().entry.status,
        Some(agent_sessions::SessionStatus::Running)
    );
    let deleted = session
        .delete(agent_sessions::manager::DeleteOptions::default())
        .await
        .unwrap();
    assert!(deleted.is_some(), "a dead turn does not refuse the delete");
    answer(&manager, &bob, "hello again").await;
    killed_bob("");
    let pruned = manager
        .prune(&agent_sessions::privacy::PruneOptions::older_than(
            Duration::ZERO,
        ))
        .await
        .unwrap();
    assert!(
        pruned.iter().any(|s| s.key == bob_key),
        "a dead turn does not keep a session from a prune: {pruned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the kill tests in a child process"]
async fn bob_turn_child() {
    let (Some(url), Some(workspaces)) = (
        env_var("PERSONAL_DATA_URL"),
        env_var("PERSONAL_DATA_WORKSPACES"),
    ) else {
        return;
    };
    let manager = manager(&url, Path::new(&workspaces)).await;
    let mut message = InboundMessage::direct("telegram", "777001", "a long question");
    message.message_id = env_var("PERSONAL_DATA_MESSAGE_ID");
    let turn = manager.turn(&message).await.unwrap();
    println!("TURN-STARTED");
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(turn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_turn_holds_nothing_up_in_a_json_tree() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().join("state").display());
    a_killed_turn_holds_nothing_up(&url, &dir.path().join("ws")).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_turn_holds_nothing_up_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("sessions.db").display());
    a_killed_turn_holds_nothing_up(&url, &dir.path().join("ws")).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_turn_holds_nothing_up_in_postgres() {
    if env_var("AGENT_SESSIONS_TEST_POSTGRES_URL").is_none() {
        eprintln!("skipped: AGENT_SESSIONS_TEST_POSTGRES_URL is not set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let schema = common::TestSchema::new("killed_turn");
    a_killed_turn_holds_nothing_up(&schema.url(), &dir.path().join("ws")).await;
    schema.drop().await;
}

#[tokio::test]
async fn ids_linked_to_a_person_are_erased_with_them_and_the_links_are_reported() {
    use agent_sessions::identity::{DefaultKeyBuilder, IdentityLinks};
    let links = IdentityLinks::new().link("jane", ["telegram:4242", "sms:+15550100777"]);
    let manager = SessionManager::builder(InMemoryStore::new())
        .key_builder(DefaultKeyBuilder::new().identity_links(links))
        .build()
        .unwrap();
    manager
        .resolve(&InboundMessage::direct("telegram", "4242", "hi"))
        .await
        .unwrap();
    manager
        .resolve(&InboundMessage::direct("telegram", "4243", "someone else"))
        .await
        .unwrap();
    let report = manager
        .forget_person(&PersonRef::person("jane"))
        .await
        .unwrap();
    assert_eq!(report.sessions, 1, "{report:?}");
    assert_eq!(
        report.identity_links, 2,
        "the host removes them from its configuration"
    );
    let left = manager.list(&ListFilter::new()).await.unwrap();
    assert_eq!(left.len(), 1);
    assert!(left[0].key.as_str().ends_with("4243"));
}

/// Erasing Jane keeps what others wrote: Bob's chatter, shown to the model only inside
/// Jane's group mention line (its one record), stays in that line with her words gone;
/// the agent's reply to her goes with her; Bob's own exchange afterwards stays whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erase_keeps_what_others_wrote_inside_the_persons_lines() {
    let stores = stores::Stores::new("others_words");
    for url in &stores.urls {
        let dir = tempfile::tempdir().unwrap();
        let manager = manager(url, dir.path()).await;
        let bob_chatter = in_group(
            "Bob",
            BOB_PHONE,
            "bob",
            "bobgroupkeepsake boat at nine",
            "b1",
        );
        let turn = manager.turn(&bob_chatter).await.unwrap();
        assert_eq!(turn.action(), &TurnAction::StaySilent, "{url}");
        let mention = in_group(
            "Jane",
            JANE_PHONE,
            JANE,
            "@bot jqgolfgroup taxi please",
            "j1",
        )
        .mentioning_agent();
        let turn = manager.turn(&mention).await.unwrap();
        assert_eq!(turn.action(), &TurnAction::Answer, "{url}");
        assert!(turn.input().unwrap().contains("bobgroupkeepsake"), "{url}");
        let key = turn.key().clone();
        turn.complete("jqhotelpending taxi booked").await.unwrap();
        let bob_mention =
            in_group("Bob", BOB_PHONE, "bob", "@bot bobdmkeepsake me too", "b2").mentioning_agent();
        answer(&manager, &bob_mention, "yes Bob, bobdmkeepsake").await;
        // The message log indexed before the erase.
        let backend = Backend::open(url).await.unwrap();
        let search = agent_sessions::transcript::search::Search::shared(
            backend.search_index().await.unwrap(),
        );
        search.sync(&**backend.transcripts()).await.unwrap();
        async fn found(search: &agent_sessions::transcript::search::Search, word: &str) -> usize {
            let query = agent_sessions::transcript::search::SearchQuery::text(word);
            search.search(&query).await.unwrap().len()
        }
        assert!(found(&search, "jqhotelpending").await > 0, "{url}: indexed");

        manager
            .forget_person(&PersonRef::person(JANE))
            .await
            .unwrap();

        // The index follows the transcripts: what stays in them is found, what left
        // them is not.
        drop(search);
        let backend = Backend::open(url).await.unwrap();
        let search = agent_sessions::transcript::search::Search::shared(
            backend.search_index().await.unwrap(),
        );
        for word in ["bobgroupkeepsake", "bobdmkeepsake"] {
            assert!(
                found(&search, word).await > 0,
                "{url}: {word} is still found"
            );
        }
        for word in ["jqgolfgroup", "jqhotelpending", "taxi"] {
            assert_eq!(found(&search, word).await, 0, "{url}: {word} is found");
        }
        let mut text = String::new();
        for (agent, name) in backend.transcripts().transcript_names(None).await.unwrap() {
            for line in backend
                .transcripts()
                .export_lines(&agent, &name)
                .await
                .unwrap()
                .unwrap()
            {
                text.push_str(&line);
                text.push('\n');
            }
        }
        assert!(
            text.contains("bobgroupkeepsake boat at nine"),
            "{url}: Bob's chatter stays: {text}"
        );
        assert_eq!(
            text.matches("bobdmkeepsake").count(),
            2,
            "{url}: Bob's own exchange stays whole: {text}"
        );
        for gone in ["jqgolfgroup", "jqhotelpending", "taxi", JANE_PHONE] {
            assert!(!text.contains(gone), "{url}: {gone} is left: {text}");
        }
        let _ = key;
    }
    stores.finish().await;
}

/// Her own session deleted (its transcript archived as `….deleted.<time>`) before she
/// asks to be forgotten: the archive is hers, and goes whole — not kept as a file of
/// erased markers — on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erase_removes_the_archive_of_her_deleted_session() {
    let stores = stores::Stores::new("erase_deleted");
    for url in &stores.urls {
        let dir = tempfile::tempdir().unwrap();
        let manager = manager(url, dir.path()).await;
        let hello = telegram("hello jqalphadm", "t1");
        answer(&manager, &hello, "noted").await;
        let key = manager.key_for(&hello).unwrap();
        manager
            .session(&key)
            .delete(agent_sessions::manager::DeleteOptions::default())
            .await
            .unwrap();
        let bob = InboundMessage::direct("telegram", "777002", "hi bobdmkeepsake");
        answer(&manager, &bob, "hello Bob").await;
        manager
            .forget_person(&PersonRef::person(JANE))
            .await
            .unwrap();
        let backend = Backend::open(url).await.unwrap();
        let names: Vec<String> = backend
            .transcripts()
            .transcript_names(None)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, name)| name)
            .collect();
        assert_eq!(
            names.len(),
            1,
            "{url}: only Bob's transcript is left: {names:?}"
        );
        assert!(!names[0].contains(".deleted."), "{url}: {names:?}");
    }
    stores.finish().await;
}

/// The manager that erases a person lets go of the conversations it keeps between
/// turns: its next turn in a group they wrote in does not give the model their
/// chatter as it read it before the erase.
#[tokio::test]
async fn the_erasing_manager_forgets_what_it_kept_of_a_shared_group() {
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let group = |sender: &str, text: &str| InboundMessage::group("telegram", "-100", sender, text);
    for n in 0..3 {
        let chatter = manager
            .turn(&group("bob", &format!("bob says bobsecret{n}")))
            .await
            .unwrap();
        chatter.complete("").await.unwrap();
    }
    let asked = manager
        .turn(&group("alice", "what did bob say?").mentioning_agent())
        .await
        .unwrap();
    let seen = asked.messages().await.unwrap();
    assert!(
        seen.iter().any(|m| m.content.contains("bobsecret")),
        "{seen:?}"
    );
    asked.complete("He said a few things.").await.unwrap();

    manager
        .forget_person(&PersonRef::sender("telegram", "bob"))
        .await
        .unwrap();
    let next = manager
        .turn(&group("alice", "and now?").mentioning_agent())
        .await
        .unwrap();
    let seen = next.messages().await.unwrap();
    assert!(
        !seen.iter().any(|m| m.content.contains("bobsecret")),
        "{seen:?}"
    );
}

/// So does every other worker on the same store: the next turn of a manager that kept
/// the group's conversation between turns, in another process, reads it again after
/// the erase instead of giving the model the person's chatter as it kept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_worker_forgets_what_it_kept_of_a_shared_group() {
    let stores = stores::Stores::new("erase_other_worker");
    for url in &stores.urls {
        let connect = || async { SessionManager::connect(url).await.unwrap().build().unwrap() };
        let (eraser, worker) = (connect().await, connect().await);
        let group =
            |sender: &str, text: &str| InboundMessage::group("telegram", "-100", sender, text);
        for n in 0..3 {
            let chatter = worker
                .turn(&group("bob", &format!("bob says bobsecret{n}")))
                .await
                .unwrap();
            chatter.complete("").await.unwrap();
        }
        let asked = worker
            .turn(&group("alice", "what did bob say?").mentioning_agent())
            .await
            .unwrap();
        let seen = asked.messages().await.unwrap();
        assert!(
            seen.iter().any(|m| m.content.contains("bobsecret")),
            "{url}: {seen:?}"
        );
        asked.complete("He said a few things.").await.unwrap();

        eraser
            .forget_person(&PersonRef::sender("telegram", "bob"))
            .await
            .unwrap();
        let next = worker
            .turn(&group("alice", "and now?").mentioning_agent())
            .await
            .unwrap();
        let seen = next.messages().await.unwrap();
        assert!(
            !seen.iter().any(|m| m.content.contains("bobsecret")),
            "{url}: {seen:?}"
        );
        next.complete("Nothing I can repeat.").await.unwrap();
    }
    stores.finish().await;
}

/// A follower of a group whose lines an erase overwrote goes on where it was: the
/// overwritten lines keep their places, ids and times, so it is not told that the store
/// lost what it read, and it reads what is said next.
#[tokio::test]
async fn a_follower_goes_on_undisturbed_across_an_erase() {
    use agent_sessions::transcript::follow::{Position, Scope, Update};
    let stores = stores::Stores::new("follow_erase");
    for url in &stores.urls {
        let dir = tempfile::tempdir().unwrap();
        let manager = manager(url, dir.path()).await;
        let jane = in_group(
            "Jane",
            JANE_PHONE,
            JANE,
            "@bot jqgolfgroup taxi please",
            "j1",
        )
        .mentioning_agent();
        answer(&manager, &jane, "jqhotelpending taxi booked").await;
        let key = manager.key_for(&jane).unwrap();
        let mut follow = manager
            .follow(Scope::Key(key), Position::Start)
            .await
            .unwrap();
        let mut read = Vec::new();
        while let Some(update) = follow.try_next().await.unwrap() {
            read.push(update);
        }
        manager
            .forget_person(&PersonRef::person(JANE))
            .await
            .unwrap();
        let bob = in_group("Bob", BOB_PHONE, "bob", "@bot bobgroupkeepsake boat", "b1")
            .mentioning_agent();
        answer(&manager, &bob, "yes Bob").await;
        // Past the follower's idle check, too.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let mut after = Vec::new();
        while let Some(update) = follow.try_next().await.unwrap() {
            after.push(update);
        }
        assert!(
            !after.iter().any(|u| matches!(u, Update::Rewound { .. })),
            "{url}: {after:?}"
        );
        let texts: Vec<String> = after
            .iter()
            .filter_map(|u| match u {
                Update::Events { events, .. } => Some(events),
                _ => None,
            })
            .flatten()
            .filter_map(|e| e.entry.message.as_ref().map(|m| m.text()))
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("bobgroupkeepsake")),
            "{url}: {texts:?}"
        );
        assert!(texts.iter().any(|t| t == "yes Bob"), "{url}: {texts:?}");
        assert!(
            !texts.iter().any(|t| t.contains("jq")),
            "{url}: nothing of hers again"
        );
        assert!(!read.is_empty());
    }
}
