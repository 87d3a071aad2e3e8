//! Encryption at rest: a person's words written through every path, sealed on every
//! backend while the bot still reads them; an erase that reaches a backup restored
//! after it by destroying her keys; and what a wrong key or a moved line does.
#![cfg(all(unix, feature = "encryption"))]

mod common;

#[path = "common/stores.rs"]
mod stores;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agent_sessions::inbound::{Attachment, AttachmentKind};
use agent_sessions::memory::MemoryOptions;
use agent_sessions::prelude::*;
use agent_sessions::privacy::encryption::{
    KeyFiles, KeyOwner, KeyProvider, MasterKey, ERASED_TEXT,
};
use agent_sessions::privacy::PersonRef;
use agent_sessions::store::{Backend, DescriptionSource};
use agent_sessions::transcript::search::{
    InMemoryIndex, Search, SearchFilter, SearchIndex, SearchQuery,
};
use agent_sessions::transcript::{TranscriptEntry, TranscriptRef};
use agent_sessions::{Error, Sender};

const JANE: &str = "person-jq7";
const JANE_TELEGRAM: &str = "48151623";
const JANE_PHONE: &str = "+15550100777";
const BOB_PHONE: &str = "+15550200888";
const GROUP: &str = "120363777@g.us";

/// Words of Jane's own lines, one per path.
const JANE_OWN: &[&str] = &[
    "jqcharliereset",   // before a reset (the archived transcript)
    "jqalphadm",        // her direct message
    "jqreplydm",        // the bot's reply to her
    "jqlimafile",       // the name of a file she sent
    "jqmikecaption",    // its caption
    "jqdeltacompacted", // a compaction summary of her conversation
    "jqjulietevent",    // a system event waiting for her next turn
    "jqgolfgroup",      // her message to the bot in the group
    "jqhotelpending",   // her group chatter still waiting
];
/// Words that reach the entry's other fields: a context summary, a message waiting
/// for a run, an identity summary, a description.
const JANE_ENTRY_WORDS: &[&str] = &[
    "jqsierrasummary",
    "jqoscarqueued",
    "jqquebecdescription",
    "jqtangomail@example.com",
];

/// Her group chatter and the name it was shown under, in Bob's line to the model: his
/// line, sealed under his key.
const JANE_IN_BOBS_LINE: &[&str] = &["jqfoxtrotchatter", "Quillfeather"];
/// Bob's words, which stay.
const BOB_WORDS: &[&str] = &["bobdmkeepsake", "bobgroupkeepsake"];

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

fn bob_dm(text: &str, id: &str) -> InboundMessage {
    InboundMessage::direct("whatsapp", BOB_PHONE, text)
        .from_person("bob")
        .with_message_id(id)
}

/// A store URL with its key directory and master key, kept apart from the store.
struct Sealed {
    url: String,
    keys: PathBuf,
    master: MasterKey,
}

impl Sealed {
    async fn manager(&self) -> SessionManager {
        SessionManager::connect(&self.url)
            .await
            .unwrap()
            .encryption(KeyFiles::open(&self.keys, self.master.clone()).unwrap())
            .build()
            .unwrap()
    }
}

/// Answers `message` with `reply`; what the model was given.
async fn answer(manager: &SessionManager, message: &InboundMessage, reply: &str) -> String {
    let turn = manager.turn(message).await.unwrap();
    let seen: Vec<String> = turn
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    turn.complete(reply).await.unwrap();
    seen.join("\n")
}

/// Writes Jane's words through every path, Bob's beside them, checking on the way
/// that the bot reads back what was sealed.
async fn write_everything(manager: &SessionManager) {
    answer(manager, &telegram("remember jqcharliereset", "t1"), "ok").await;
    answer(manager, &telegram("/new", "t2"), "fresh").await;
    answer(
        manager,
        &telegram("my pin is jqalphadm", "t3"),
        "noted jqreplydm",
    )
    .await;
    let file = Attachment::new(AttachmentKind::Document)
        .with_file_name("jqlimafile.pdf")
        .with_caption("jqmikecaption")
        .with_file_id("BQACAgIAAxkB");
    let seen = answer(manager, &telegram("", "t4").with_attachment(file), "got it").await;
    assert!(
        seen.contains("jqalphadm") && seen.contains("jqreplydm"),
        "{seen}"
    );
    let dm = manager.key_for(&telegram("x", "x")).unwrap();
    let compaction: TranscriptEntry = serde_json::from_value(serde_json::json!({
        "type": "compaction", "id": "c0ffee01", "parentId": null,
        "timestamp": "2026-02-06T10:00:00.000Z",
        "summary": "she mentioned jqdeltacompacted", "firstKeptEntryId": "c0ffee01",
        "tokensBefore": 1000
    }))
    .unwrap();
    manager.session(&dm).append(vec![compaction]).await.unwrap();
    manager
        .session(&dm)
        .enqueue_system_event("jqzuluevent happened")
        .await
        .unwrap();
    let seen = answer(manager, &telegram("and now?", "t5"), "ok").await;
    assert!(
        seen.contains("jqdeltacompacted"),
        "the summary is read back: {seen}"
    );
    assert!(
        seen.contains("jqzuluevent"),
        "the system event is read back: {seen}"
    );
    manager
        .session(&dm)
        .enqueue_system_event("reminder jqjulietevent")
        .await
        .unwrap();

    answer(manager, &bob_dm("my bobdmkeepsake", "b1"), "fine").await;
    let jane_says = |text: &str, id: &str| in_group("Quillfeather", JANE_PHONE, JANE, text, id);
    let bob_says = |text: &str, id: &str| in_group("Bob", BOB_PHONE, "bob", text, id);
    answer(manager, &jane_says("lunch at jqfoxtrotchatter?", "g1"), "-").await;
    let seen = answer(
        manager,
        &bob_says("@bot about bobgroupkeepsake", "g2").mentioning_agent(),
        "will do",
    )
    .await;
    assert!(
        seen.contains("jqfoxtrotchatter"),
        "the chatter is read back: {seen}"
    );
    answer(
        manager,
        &jane_says("@bot jqgolfgroup please", "g3").mentioning_agent(),
        "sure",
    )
    .await;
    answer(manager, &jane_says("and jqhotelpending", "g4"), "-").await;
}

/// Writes what reaches the entry's fields beyond its previews: a context summary (a
/// small window), the identity summary, a description, and a message waiting while a
/// run goes on — the run is returned, still open, and the message waits until it ends.
async fn write_summaries_and_a_queue(store: &Sealed) -> (SessionManager, SessionKey) {
    let manager = SessionManager::connect(&store.url)
        .await
        .unwrap()
        .encryption(KeyFiles::open(&store.keys, store.master.clone()).unwrap())
        .context_window(400)
        .memory(MemoryOptions::default().summary_quiet_gap(std::time::Duration::ZERO))
        .build()
        .unwrap();
    for i in 0..12 {
        let text = format!(
            "jqsierrasummary {i}: write to jqtangomail@example.com, ask Alice Smith about the \
             booking on Friday, the table by the window, and whether the deposit arrived"
        );
        answer(&manager, &sms(&text, &format!("s{i}")), "ok").await;
    }
    let dm = manager.key_for(&sms("x", "x")).unwrap();
    manager
        .session(&dm)
        .set_description(
            Some("jqquebecdescription"),
            DescriptionSource::Introspection,
        )
        .await
        .unwrap();
    manager
        .refresh_identity_summary(JANE, "main")
        .await
        .unwrap();
    (manager, dm)
}

fn files_under(dir: &Path, into: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            files_under(&entry.path(), into);
        } else if kind.is_file() {
            into.insert(
                entry.path().display().to_string(),
                std::fs::read(entry.path()).unwrap_or_default(),
            );
        }
    }
}

/// Every byte the backend keeps: the JSON tree's files, the SQLite database with its
/// log, every row of the PostgreSQL schema (as `pg_dump` writes it).
fn everything(url: &str) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    if let Some(dir) = url.strip_prefix("json:") {
        files_under(Path::new(dir), &mut all);
    } else if let Some(file) = url.strip_prefix("sqlite:") {
        for suffix in ["", "-wal", "-journal", "-shm"] {
            if let Ok(bytes) = std::fs::read(format!("{file}{suffix}")) {
                all.insert(format!("{file}{suffix}"), bytes);
            }
        }
    } else {
        all.insert(url.to_owned(), pg_dump(url));
    }
    all
}

fn pg_parts(url: &str) -> (&str, &str) {
    url.split_once("?schema=").unwrap()
}

fn pg_dump(url: &str) -> Vec<u8> {
    let (server, schema) = pg_parts(url);
    let out = std::process::Command::new("pg_dump")
        .args(["--dbname", server, "--schema", schema])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn hits<'w>(all: &BTreeMap<String, Vec<u8>>, words: &[&'w str]) -> Vec<(String, &'w str)> {
    let mut found = Vec::new();
    for (place, bytes) in all {
        for word in words {
            if bytes.windows(word.len()).any(|w| w == word.as_bytes()) {
                found.push((place.clone(), *word));
            }
        }
    }
    found
}

fn sealed_stores(stores: &stores::Stores, keys: &Path) -> Vec<Sealed> {
    let master = MasterKey::generate().unwrap();
    stores
        .urls
        .iter()
        .enumerate()
        .map(|(n, url)| Sealed {
            url: url.clone(),
            keys: keys.join(format!("keys-{n}")),
            master: master.clone(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_store_keeps_no_word_of_anyone_in_plain_text_and_the_bot_still_reads_them() {
    let stores = stores::Stores::new("sealed_words");
    let keys = tempfile::tempdir().unwrap();
    for store in sealed_stores(&stores, keys.path()) {
        let manager = store.manager().await;
        write_everything(&manager).await;
        drop(manager);
        let (manager, dm) = write_summaries_and_a_queue(&store).await;
        let mut words: Vec<&str> = JANE_OWN.to_vec();
        words.extend(JANE_IN_BOBS_LINE);
        words.extend(BOB_WORDS);
        words.extend(JANE_ENTRY_WORDS);
        // A message that waits while a run goes on: the store is scanned while it waits.
        let running = manager.turn(&sms("jqrunning", "q1")).await.unwrap();
        let queued = sms("jqoscarqueued", "q2");
        let waiting = manager.turn(&queued);
        let scan = async {
            loop {
                let entry = manager.session(&dm).get().await.unwrap().unwrap().entry;
                if !entry.queued.is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(hits(&everything(&store.url), &words), [], "{}", store.url);
            running.complete("done").await.unwrap();
        };
        let (waited, ()) = tokio::join!(waiting, scan);
        let waited = waited.unwrap();
        if *waited.action() == TurnAction::Answer {
            waited.complete("and that").await.unwrap();
        }
        // The context summary is written off the reply path: once it is there, the
        // store is scanned again.
        let summarized = |entry: SessionEntry| {
            entry.context_summary.is_some()
                || entry.window_start.is_some_and(|w| w.summary.is_some())
        };
        for _ in 0..500 {
            let entry = manager.session(&dm).get().await.unwrap().unwrap().entry;
            if summarized(entry) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let entry = manager.session(&dm).get().await.unwrap().unwrap().entry;
        assert!(
            summarized(entry.clone()),
            "{}: no summary: {entry:?}",
            store.url
        );
        assert_eq!(hits(&everything(&store.url), &words), [], "{}", store.url);
        drop(manager);
        // A process that starts afresh reads it all back.
        let manager = store.manager().await;
        let seen = answer(&manager, &bob_dm("what did I say?", "b2"), "that").await;
        assert!(seen.contains("bobdmkeepsake"), "{}: {seen}", store.url);
        let seen = answer(&manager, &telegram("remind me", "t6"), "sure").await;
        assert!(seen.contains("jqjulietevent"), "{}: {seen}", store.url);
    }
    stores.finish().await;
}

/// A copy of the store as a backup takes it.
fn backup(url: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    if let Some(dir) = url.strip_prefix("json:") {
        let status = std::process::Command::new("cp")
            .args(["-a", dir, &to.join("tree").display().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    } else if let Some(file) = url.strip_prefix("sqlite:") {
        for suffix in ["", "-wal"] {
            let _ = std::fs::copy(format!("{file}{suffix}"), to.join(format!("db{suffix}")));
        }
    } else {
        std::fs::write(to.join("dump.sql"), pg_dump(url)).unwrap();
    }
}

/// Puts the backup in `to` back in place of the store.
fn restore(url: &str, from: &Path) {
    if let Some(dir) = url.strip_prefix("json:") {
        std::fs::remove_dir_all(dir).unwrap();
        let status = std::process::Command::new("cp")
            .args(["-a", &from.join("tree").display().to_string(), dir])
            .status()
            .unwrap();
        assert!(status.success());
    } else if let Some(file) = url.strip_prefix("sqlite:") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{file}{suffix}"));
        }
        for suffix in ["", "-wal"] {
            let _ = std::fs::copy(from.join(format!("db{suffix}")), format!("{file}{suffix}"));
        }
    } else {
        let (server, schema) = pg_parts(url);
        let psql = |sql: &str| {
            let out = std::process::Command::new("psql")
                .args(["--dbname", server, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        psql(&format!("DROP SCHEMA {schema} CASCADE"));
        let out = std::process::Command::new("psql")
            .args(["--dbname", server, "-v", "ON_ERROR_STOP=1", "-q", "-f"])
            .arg(from.join("dump.sql"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// What the manager shows of a person: their copy of everything kept of them.
async fn export(manager: &SessionManager, person: &PersonRef) -> String {
    let mut copy = Vec::new();
    manager.export_person(person, &mut copy).await.unwrap();
    String::from_utf8(copy).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restored_after_an_erase_shows_none_of_her_lines_and_all_of_everyone_elses() {
    let stores = stores::Stores::new("sealed_backup");
    let keys = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        let manager = store.manager().await;
        write_everything(&manager).await;
        drop(write_summaries_and_a_queue(&store).await);
        let before = export(&manager, &PersonRef::person(JANE)).await;
        let listed = JANE_OWN.iter().chain(JANE_ENTRY_WORDS);
        for word in listed.filter(|w| !w.contains("event") && !w.contains("queued")) {
            assert!(
                before.contains(word),
                "{}: her copy before has {word}",
                store.url
            );
        }
        drop(manager);
        let backup_dir = backups.path().join(n.to_string());
        backup(&store.url, &backup_dir);

        let report = store
            .manager()
            .await
            .forget_person(&PersonRef::person(JANE))
            .await
            .unwrap();
        assert!(report.data_keys >= 2, "{}: {report:?}", store.url);
        restore(&store.url, &backup_dir);

        // The restored store, opened as the bot opens it.
        let manager = store.manager().await;
        let after = export(&manager, &PersonRef::person(JANE)).await;
        for word in JANE_OWN.iter().chain(JANE_ENTRY_WORDS) {
            assert!(
                !after.contains(word),
                "{}: the restored copy shows {word}: {after}",
                store.url
            );
        }
        assert!(after.contains(ERASED_TEXT), "{}: {after}", store.url);
        let bob = export(&manager, &PersonRef::person("bob")).await;
        for word in BOB_WORDS {
            assert!(
                bob.contains(word),
                "{}: Bob's {word} is intact: {bob}",
                store.url
            );
        }
        // In the group, her own line is erased; her chatter in Bob's line is his line,
        // and is still there (the docs say so).
        let seen = answer(
            &manager,
            &in_group("Bob", BOB_PHONE, "bob", "@bot and?", "g9").mentioning_agent(),
            "ok",
        )
        .await;
        assert!(seen.contains("bobgroupkeepsake"), "{}: {seen}", store.url);
        assert!(!seen.contains("jqgolfgroup"), "{}: {seen}", store.url);
        for word in JANE_IN_BOBS_LINE {
            assert!(seen.contains(word), "{}: {seen}", store.url);
        }
        // The bot goes on with both, from the restored store.
        let seen = answer(&manager, &bob_dm("again?", "b3"), "yes").await;
        assert!(seen.contains("bobdmkeepsake"), "{}: {seen}", store.url);
        let seen = answer(&manager, &telegram("hello again", "t7"), "hi").await;
        for word in JANE_OWN {
            assert!(
                !seen.contains(word),
                "{}: the model is shown {word}: {seen}",
                store.url
            );
        }
    }
    stores.finish().await;
}

/// Someone known by their sender id alone (no person named), and someone else with the
/// same id on another channel.
fn by_id_alone(channel: &str, text: &str) -> InboundMessage {
    InboundMessage::direct(channel, "15550001", text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_known_by_an_id_alone_is_erased_from_a_restored_backup_and_the_same_id_elsewhere_is_not(
) {
    let stores = stores::Stores::new("sealed_sender_alone");
    let keys = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        let manager = store.manager().await;
        answer(
            &manager,
            &by_id_alone("telegram", "my pin is tgpinnovember"),
            "noted",
        )
        .await;
        answer(
            &manager,
            &by_id_alone("whatsapp", "my pin is wapinoscar"),
            "noted",
        )
        .await;
        drop(manager);
        let backup_dir = backups.path().join(n.to_string());
        backup(&store.url, &backup_dir);

        // A person id that is nobody's: the two senders' keys are theirs on their
        // channels, and stay.
        let report = store
            .manager()
            .await
            .forget_person(&PersonRef::person("15550001"))
            .await
            .unwrap();
        assert_eq!(report.data_keys, 0, "{}: {report:?}", store.url);
        let manager = store.manager().await;
        let seen = answer(&manager, &by_id_alone("whatsapp", "still there?"), "yes").await;
        assert!(seen.contains("wapinoscar"), "{}: {seen}", store.url);
        drop(manager);

        let report = store
            .manager()
            .await
            .forget_person(&PersonRef::sender("telegram", "15550001"))
            .await
            .unwrap();
        assert!(report.data_keys >= 1, "{}: {report:?}", store.url);
        restore(&store.url, &backup_dir);

        // The restored backup, opened as the bot opens it: none of her words, all of his.
        let manager = store.manager().await;
        let seen = answer(&manager, &by_id_alone("telegram", "what was it?"), "?").await;
        assert!(!seen.contains("tgpinnovember"), "{}: {seen}", store.url);
        assert!(seen.contains(ERASED_TEXT), "{}: {seen}", store.url);
        let seen = answer(&manager, &by_id_alone("whatsapp", "and mine?"), "ok").await;
        assert!(seen.contains("wapinoscar"), "{}: {seen}", store.url);
        let all = everything(&store.url);
        assert!(hits(&all, &["tgpinnovember", "wapinoscar"]).is_empty());
    }
    stores.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_read_her_lines_before_the_erase_cannot_show_them_from_a_restored_backup() {
    let stores = stores::Stores::new("sealed_other_worker");
    let keys = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        // Two workers of one bot: the second reads (and so keeps opened) her lines.
        let first = store.manager().await;
        let second = store.manager().await;
        write_everything(&first).await;
        let before = export(&second, &PersonRef::person(JANE)).await;
        assert!(before.contains("jqcharliereset"), "{}: {before}", store.url);
        let backup_dir = backups.path().join(n.to_string());
        backup(&store.url, &backup_dir);

        first.forget_person(&PersonRef::person(JANE)).await.unwrap();
        restore(&store.url, &backup_dir);

        // The second worker, still running, reads the restored store.
        let after = export(&second, &PersonRef::person(JANE)).await;
        for word in JANE_OWN {
            assert!(
                !after.contains(word),
                "{}: the other worker still shows {word}: {after}",
                store.url
            );
        }
        let seen = answer(&second, &telegram("hello again", "t8"), "hi").await;
        for word in JANE_OWN {
            assert!(!seen.contains(word), "{}: {word}: {seen}", store.url);
        }
    }
    stores.finish().await;
}

/// The JSON tree's transcript lines of `dir`, by file.
fn transcript_files(dir: &Path) -> Vec<PathBuf> {
    let sessions = dir.join("agents/main/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn another_master_key_is_refused_before_anything_is_read_or_written() {
    let dir = tempfile::tempdir().unwrap();
    let master = MasterKey::generate().unwrap();
    let store = Sealed {
        url: format!("json:{}", dir.path().join("state").display()),
        keys: dir.path().join("keys"),
        master: master.clone(),
    };
    let manager = store.manager().await;
    answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
    let before = everything(&store.url);

    let wrong = KeyFiles::open(&store.keys, MasterKey::generate().unwrap()).unwrap_err();
    assert_eq!(wrong.kind(), "encryption", "{wrong}");
    assert!(wrong.to_string().contains("not the one"), "{wrong}");
    // A key file altered on disk: the turn fails with the same kind, and writes nothing.
    for file in std::fs::read_dir(&store.keys).unwrap().flatten() {
        if file.path().extension().is_some_and(|x| x == "key") {
            let text = std::fs::read_to_string(file.path()).unwrap();
            let flipped = text.replacen('A', "B", 1).replacen('a', "b", 1);
            std::fs::write(file.path(), flipped).unwrap();
        }
    }
    let manager = store.manager().await;
    let error = manager.turn(&telegram("and now?", "t2")).await.unwrap_err();
    assert_eq!(error.kind(), "encryption", "{error}");
    assert_eq!(everything(&store.url), before, "nothing was written");
}

#[tokio::test]
async fn a_sealed_line_moved_to_another_line_or_session_does_not_open() {
    for move_to in ["another line", "another session"] {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = Sealed {
            url: format!("json:{}", state.display()),
            keys: dir.path().join("keys"),
            master: MasterKey::generate().unwrap(),
        };
        let manager = store.manager().await;
        answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
        answer(&manager, &bob_dm("my bobdmkeepsake", "b1"), "fine").await;
        drop(manager);
        let files = transcript_files(&state);
        let sealed_of = |line: &str| -> String {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            value["log"]["sealed"].as_str().unwrap().to_owned()
        };
        // Jane's first line takes the sealed value of another line: her own reply,
        // or Bob's first message in his session.
        let jane_file = files
            .iter()
            .find(|f| std::fs::read_to_string(f).unwrap().contains(JANE))
            .unwrap()
            .clone();
        let text = std::fs::read_to_string(&jane_file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Sealed lines hang from one another as plain ones do.
        let entries: Vec<serde_json::Value> = lines[1..]
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(entries[0]["parentId"].is_null());
        for pair in entries.windows(2) {
            assert_eq!(pair[1]["parentId"], pair[0]["id"], "{pair:?}");
        }
        let donor = match move_to {
            "another line" => sealed_of(lines[2]),
            _ => {
                let bob_file = files.iter().find(|f| **f != jane_file).unwrap();
                let bob = std::fs::read_to_string(bob_file).unwrap();
                sealed_of(bob.lines().nth(1).unwrap())
            }
        };
        let moved = text.replacen(&sealed_of(lines[1]), &donor, 1);
        assert_ne!(moved, text);
        std::fs::write(&jane_file, moved).unwrap();

        let manager = store.manager().await;
        let turn = manager.turn(&telegram("what was it?", "t2")).await.unwrap();
        let error = turn.messages().await.unwrap_err();
        assert_eq!(error.kind(), "encryption", "{move_to}: {error}");
        assert!(error.to_string().contains("moved"), "{error}");
    }
}

#[tokio::test]
async fn an_openclaw_state_directory_refuses_encryption() {
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyFiles::open(dir.path().join("keys"), MasterKey::generate().unwrap()).unwrap();
    let refused = SessionManager::connect_openclaw(dir.path().join("openclaw"))
        .await
        .unwrap()
        .encryption(keys)
        .build()
        .unwrap_err();
    assert_eq!(refused.kind(), "invalid_option");
    assert!(refused.to_string().contains("OpenClaw"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_the_master_key_while_turns_run_and_after_a_stop_midway_loses_nothing() {
    let stores = stores::Stores::new("sealed_rotation");
    let dir = tempfile::tempdir().unwrap();
    for (n, url) in stores.urls.iter().enumerate() {
        let keys_dir = dir.path().join(format!("keys-{n}"));
        let (old, new) = (
            MasterKey::generate().unwrap(),
            MasterKey::generate().unwrap(),
        );
        let open = |keys: KeyFiles| async move {
            SessionManager::connect(url)
                .await
                .unwrap()
                .encryption(keys)
                .build()
                .unwrap()
        };
        let manager = open(KeyFiles::open(&keys_dir, old.clone()).unwrap()).await;
        let people: Vec<String> = (0..12).map(|i| format!("7000{i:02}")).collect();
        let say = |peer: &str, text: &str, id: &str| {
            InboundMessage::direct("sms", peer, text)
                .from_person(format!("p{peer}"))
                .with_message_id(id)
        };
        for peer in &people {
            answer(&manager, &say(peer, &format!("first {peer}"), "1"), "ok").await;
        }
        // Every process now opens the directory with both keys; a rotation runs while
        // turns go on, and stops midway at a file it cannot open.
        let rotating = || KeyFiles::rotating(&keys_dir, new.clone(), old.clone()).unwrap();
        let manager = open(rotating()).await;
        // A file it cannot open, in the middle of the directory's order.
        let garbage = keys_dir.join("8000-not-a-key.key");
        std::fs::write(&garbage, "garbage\n").unwrap();
        let rotation = tokio::task::spawn_blocking({
            let keys = rotating();
            move || keys.rotate()
        });
        for peer in &people {
            answer(&manager, &say(peer, &format!("second {peer}"), "2"), "ok").await;
        }
        assert_eq!(rotation.await.unwrap().unwrap_err().kind(), "encryption");
        std::fs::remove_file(&garbage).unwrap();
        let (all, under_new) = rotating().status().unwrap();
        assert!(
            0 < under_new && under_new < all,
            "{url}: stopped midway ({under_new} of {all})"
        );
        // Run again, it finishes.
        rotating().rotate().unwrap();
        assert_eq!(rotating().status().unwrap(), (all, all));
        // The old key alone no longer opens the directory; the new one reads everything.
        assert_eq!(
            KeyFiles::open(&keys_dir, old.clone()).unwrap_err().kind(),
            "encryption"
        );
        let manager = open(KeyFiles::open(&keys_dir, new.clone()).unwrap()).await;
        for peer in &people {
            let seen = answer(&manager, &say(peer, "third", "3"), "ok").await;
            assert!(
                seen.contains(&format!("first {peer}")) && seen.contains(&format!("second {peer}")),
                "{url}: {seen}"
            );
        }
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_manager_without_the_keys_refuses_a_sealed_session_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Sealed {
        url: format!("json:{}", dir.path().join("state").display()),
        keys: dir.path().join("keys"),
        master: MasterKey::generate().unwrap(),
    };
    answer(
        &store.manager().await,
        &telegram("my pin is jqalphadm", "t1"),
        "noted",
    )
    .await;
    let before = everything(&store.url);
    // Restarted without its keys, by mistake.
    let plain = SessionManager::connect(&store.url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let refused = plain
        .turn(&telegram("what was it?", "t2"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(refused.to_string().contains("encryption"), "{refused}");
    // Nor does someone new start a session in plain text in it.
    let refused = plain
        .turn(&InboundMessage::direct(
            "telegram",
            "5550123",
            "my pin is 9999",
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(refused.to_string().contains("half sealed"), "{refused}");
    assert_eq!(everything(&store.url), before, "nothing was written");
    // Nor does it erase her: it could not destroy her keys, and her backups would
    // still open.
    let refused = plain
        .forget_person(&PersonRef::person(JANE))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(refused.to_string().contains("--keys"), "{refused}");
    assert_eq!(everything(&store.url), before, "nothing was changed");
}

/// The ids of the data keys the store's sealed values name (`enc2:<key id>:`, or `enc1:` from earlier builds).
fn key_ids(all: &BTreeMap<String, Vec<u8>>) -> std::collections::BTreeSet<String> {
    let mut ids = std::collections::BTreeSet::new();
    for bytes in all.values() {
        let text = String::from_utf8_lossy(bytes);
        for (at, _) in text
            .match_indices("enc2:")
            .chain(text.match_indices("enc1:"))
        {
            let id = &text[at + 5..(at + 13).min(text.len())];
            if id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                ids.insert(id.to_owned());
            }
        }
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_data_keys_while_turns_run_and_after_stops_midway_loses_nothing() {
    let stores = stores::Stores::new("sealed_data_rotation");
    let keys = tempfile::tempdir().unwrap();
    for store in sealed_stores(&stores, keys.path()) {
        let manager = store.manager().await;
        write_everything(&manager).await;
        let jane_before = export(&manager, &PersonRef::person(JANE)).await;
        let kept: Vec<&str> = JANE_OWN
            .iter()
            .chain(JANE_ENTRY_WORDS)
            .copied()
            .filter(|word| jane_before.contains(word))
            .collect();
        assert!(kept.len() >= 8, "{}: {kept:?}", store.url);
        let ids_before = key_ids(&everything(&store.url));

        // Passes stopped midway (a killed process), by a worker of their own, while
        // another worker's turns go on.
        let turns = tokio::spawn({
            let worker = store.manager().await;
            async move {
                for i in 0..12 {
                    let text = format!("bobrotation{i}");
                    answer(&worker, &bob_dm(&text, &format!("r{i}")), "ok").await;
                }
            }
        });
        for stop_after in [0, 2, 5, 9] {
            let stopped = store.manager().await;
            let pass = stopped.rotate_data_keys();
            let _ = tokio::time::timeout(std::time::Duration::from_millis(stop_after), pass).await;
        }
        turns.await.unwrap();

        // A pass run to its end, then the replaced keys let go. A stopped pass's
        // write still in flight in this process (a database call runs on to its end
        // on a thread of its own) may land after it: running again finishes that too.
        let rotation = manager.rotate_data_keys().await.unwrap();
        assert!(rotation.keys >= 3, "{}: {rotation:?}", store.url);
        assert!(rotation.lines >= 10, "{}: {rotation:?}", store.url);
        let mut retired = manager.retire_data_keys().await.unwrap();
        assert!(retired.keys >= 3, "{}: {retired:?}", store.url);
        for _ in 0..3 {
            if retired.left <= 1 {
                break;
            }
            manager.rotate_data_keys().await.unwrap();
            retired = manager.retire_data_keys().await.unwrap();
        }

        // Nothing lost: every worker reads everything, old and new.
        let reader = store.manager().await;
        let jane_after = export(&reader, &PersonRef::person(JANE)).await;
        for word in &kept {
            assert!(
                jane_after.contains(word),
                "{}: {word} lost: {jane_after}",
                store.url
            );
        }
        assert!(
            !jane_after.contains(ERASED_TEXT),
            "{}: {jane_after}",
            store.url
        );
        let bob = export(&reader, &PersonRef::person("bob")).await;
        for word in BOB_WORDS
            .iter()
            .copied()
            .map(String::from)
            .chain((0..12).map(|i| format!("bobrotation{i}")))
        {
            assert!(bob.contains(&word), "{}: {word} lost: {bob}", store.url);
        }
        let seen = answer(&reader, &telegram("and now?", "t9"), "ok").await;
        assert!(seen.contains("jqdeltacompacted"), "{}: {seen}", store.url);

        // The waiting system event was sealed once, under its old key, kept until
        // its turn took it; now that key goes too.
        assert_eq!(retired.left, 1, "{}: {retired:?}", store.url);
        let again = manager.retire_data_keys().await.unwrap();
        assert_eq!((again.keys, again.left), (1, 0), "{}: {again:?}", store.url);

        // What the store holds is sealed under new keys only (the JSON tree is
        // rewritten in place; a database keeps old pages until it reuses them).
        if store.url.starts_with("json:") {
            let ids_after = key_ids(&everything(&store.url));
            let still: Vec<_> = ids_before.intersection(&ids_after).collect();
            assert!(
                still.is_empty(),
                "{}: still sealed under {still:?}",
                store.url
            );
        }
    }
    stores.finish().await;
}

/// An export without its `sessionFile` paths (which name the store they are in) and
/// the sealed store's mark.
fn without_files(export: &str) -> serde_json::Value {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("sessionFile");
                // The sealed store's mark on its entries.
                if map.get("sealed") == Some(&serde_json::Value::Bool(true)) {
                    map.remove("sealed");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::from_str(export).unwrap();
    strip(&mut value);
    value
}

/// `from` copied into `to`, sealed under `keys`, with the default options.
async fn seal(
    from: &agent_sessions::store::Backend,
    to: &agent_sessions::store::Backend,
    keys: KeyFiles,
) -> agent_sessions::Result<agent_sessions::ops::MigrationReport> {
    use agent_sessions::ops::{MigrateOptions, NoProgress};
    let options = MigrateOptions::default();
    agent_sessions::privacy::encryption::migrate_sealed(from, to, keys, &options, &NoProgress).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_store_sealed_by_a_migration_keeps_everything_and_shows_no_word() {
    use agent_sessions::store::Backend;

    let plain = stores::Stores::new("plain_to_seal");
    let sealed = stores::Stores::new("sealed_by_migration");
    let keys = tempfile::tempdir().unwrap();
    let targets = sealed_stores(&sealed, keys.path());
    for (from, store) in plain.urls.iter().zip(&targets) {
        let manager = SessionManager::connect(from)
            .await
            .unwrap()
            .build()
            .unwrap();
        write_everything(&manager).await;
        let jane_before = export(&manager, &PersonRef::person(JANE)).await;
        let bob_before = export(&manager, &PersonRef::person("bob")).await;
        drop(manager);

        let keys = || KeyFiles::open(&store.keys, store.master.clone()).unwrap();
        let (source, target) = (
            Backend::open(from).await.unwrap(),
            Backend::open(&store.url).await.unwrap(),
        );
        let report = seal(&source, &target, keys()).await.unwrap();
        assert!(report.verified(), "{} -> {}: {report:?}", from, store.url);
        assert!(report.transcripts_copied >= 2, "{report:?}");
        // Again: everything is there already, identical.
        let again = seal(&source, &target, keys()).await.unwrap();
        assert!(again.verified(), "{again:?}");
        assert_eq!(again.transcripts_copied, 0, "{again:?}");

        let mut words: Vec<&str> = JANE_OWN.to_vec();
        words.extend(JANE_IN_BOBS_LINE);
        words.extend(BOB_WORDS);
        words.extend(JANE_ENTRY_WORDS);
        assert_eq!(hits(&everything(&store.url), &words), [], "{}", store.url);

        // The sealed copy, opened with the keys, holds everything the plain store held.
        let manager = store.manager().await;
        let jane_after = export(&manager, &PersonRef::person(JANE)).await;
        let bob_after = export(&manager, &PersonRef::person("bob")).await;
        assert_eq!(
            without_files(&jane_after),
            without_files(&jane_before),
            "{}",
            store.url
        );
        assert_eq!(
            without_files(&bob_after),
            without_files(&bob_before),
            "{}",
            store.url
        );
        let seen = answer(&manager, &telegram("remind me", "t6"), "sure").await;
        assert!(seen.contains("jqjulietevent"), "{}: {seen}", store.url);

        // A sealed store is not sealed twice, nor a store into itself.
        let twice = seal(&target, &source, keys()).await.unwrap_err();
        assert_eq!(twice.kind(), "encryption", "{twice}");
        let itself = seal(&source, &source, keys()).await.unwrap_err();
        assert_eq!(itself.kind(), "invalid_option", "{itself}");
    }
    plain.finish().await;
    sealed.finish().await;
}

#[tokio::test]
async fn a_manager_with_keys_refuses_a_session_written_in_plain_text_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Sealed {
        url: format!("json:{}", dir.path().join("state").display()),
        keys: dir.path().join("keys"),
        master: MasterKey::generate().unwrap(),
    };
    let plain = SessionManager::connect(&store.url)
        .await
        .unwrap()
        .build()
        .unwrap();
    answer(&plain, &telegram("my pin is jqalphadm", "t1"), "noted").await;
    let before = everything(&store.url);
    // Restarted with keys on a store that was never sealed.
    let sealed = store.manager().await;
    let refused = sealed
        .turn(&telegram("what was it?", "t2"))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(refused.to_string().contains("migrate_sealed"), "{refused}");
    // Nor does someone new start a sealed session in it.
    let refused = sealed
        .turn(&InboundMessage::direct(
            "telegram",
            "5550123",
            "hi, new here",
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    let after = everything(&store.url);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(path, bytes)| before.get(*path) != Some(*bytes) && !path.contains("keys"))
        .map(|(path, _)| path)
        .collect();
    assert!(
        changed.is_empty(),
        "nothing of the store was written: {changed:?}"
    );
    // Nor is the plain session half sealed: the manager without keys goes on with it.
    let seen = answer(&plain, &telegram("what was it?", "t3"), "that").await;
    assert!(seen.contains("jqalphadm"), "{seen}");
}

#[tokio::test]
async fn a_torn_line_stops_a_sealing_migration_rather_than_being_copied_plain() {
    use agent_sessions::store::Backend;

    let dir = tempfile::tempdir().unwrap();
    let from = format!("json:{}", dir.path().join("plain").display());
    let to = format!("json:{}", dir.path().join("sealed").display());
    let manager = SessionManager::connect(&from)
        .await
        .unwrap()
        .build()
        .unwrap();
    answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
    // A writer killed mid-line left half of a line behind.
    let file = transcript_files(&dir.path().join("plain"))[0].clone();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(
        r#"{"type":"message","id":"x1","message":{"role":"user","content":"jqtornsecret"#,
    );
    std::fs::write(&file, text).unwrap();

    let keys = KeyFiles::open(dir.path().join("keys"), MasterKey::generate().unwrap()).unwrap();
    let (source, target) = (
        Backend::open(&from).await.unwrap(),
        Backend::open(&to).await.unwrap(),
    );
    let refused = seal(&source, &target, keys).await.unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(refused.to_string().contains("repair"), "{refused}");
    let copied = everything(&to);
    assert_eq!(
        hits(&copied, &["jqtornsecret", "jqalphadm"]),
        [],
        "nothing of it plain"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_that_wait_for_a_run_survive_data_keys_rotated_by_another_worker() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let stores = stores::Stores::new("sealed_rotation_queue");
    let keys = tempfile::tempdir().unwrap();
    for store in sealed_stores(&stores, keys.path()) {
        let rotating = store.manager().await;
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        // Three workers send to one person at once: most of the messages wait in the
        // session's entry for the run under way, while the data keys are replaced.
        let mut workers = Vec::new();
        for worker in 0..4 {
            let manager = store.manager().await;
            let (sent, stop) = (sent.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 400 {
                    n += 1;
                    let word = format!("queueword{worker}x{n}");
                    let message = InboundMessage::direct("telegram", "555", &word)
                        .with_message_id(format!("w{worker}-{n}"));
                    let turn = manager.turn(&message).await.unwrap();
                    sent.lock().unwrap().push(word);
                    match turn.needs_model() {
                        true => drop(turn.complete("ok").await.unwrap()),
                        false => drop(turn.complete("").await.unwrap()),
                    }
                }
            }));
        }
        // Forty passes, the replaced keys retired after every tenth (a key file keeps
        // 16 keys until they are).
        for pass in 1..=40 {
            rotating.rotate_data_keys().await.unwrap();
            if pass % 10 == 0 {
                rotating.retire_data_keys().await.unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.await.unwrap();
        }
        // One more turn answers whatever still waits; then every word is kept.
        let last = rotating
            .turn(&InboundMessage::direct("telegram", "555", "last"))
            .await
            .unwrap();
        if last.needs_model() {
            last.complete("done").await.unwrap();
        }
        let mut copy = Vec::new();
        rotating
            .export_person(&PersonRef::sender("telegram", "555"), &mut copy)
            .await
            .unwrap();
        let copy = String::from_utf8(copy).unwrap();
        let sent = sent.lock().unwrap();
        let lost: Vec<&String> = sent.iter().filter(|w| !copy.contains(w.as_str())).collect();
        assert!(
            lost.is_empty(),
            "{}: {} of {} lost: {lost:?}",
            store.url,
            lost.len(),
            sent.len()
        );
        assert!(!copy.contains(ERASED_TEXT), "{}", store.url);
    }
    stores.finish().await;
}

/// A sealed manager over `store`, with the backend it serves (whose transcripts a
/// search is synced from).
async fn with_backend(store: &Sealed) -> (SessionManager, Backend) {
    let backend = Backend::open(&store.url).await.unwrap();
    let manager = SessionManager::builder(backend.sessions().clone())
        .backend(backend.clone())
        .encryption(KeyFiles::open(&store.keys, store.master.clone()).unwrap())
        .build()
        .unwrap();
    (manager, backend)
}

/// The same hits in the same order, with the same scores but for rounding (a query's
/// words are summed in another order).
fn assert_same_ranking(got: &[(String, f32)], want: &[(String, f32)], query: &str) {
    let ids = |hits: &[(String, f32)]| hits.iter().map(|h| h.0.clone()).collect::<Vec<_>>();
    assert_eq!(ids(got), ids(want), "{query}");
    for ((_, a), (_, b)) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "{query}: {a} against {b}");
    }
}

/// The texts of the hits for `words`.
async fn found(search: &Search, words: &str) -> Vec<String> {
    let hits = search.search(&SearchQuery::text(words)).await.unwrap();
    hits.into_iter().map(|hit| hit.message.text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_store_is_searched_by_words_it_keeps_only_as_keyed_hashes() {
    let stores = stores::Stores::new("sealed_search");
    let keys = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        let (manager, backend) = with_backend(&store).await;
        write_everything(&manager).await;
        let mention = format!("bobmention ask {JANE} tomorrow");
        answer(&manager, &bob_dm(&mention, "b9"), "sure").await;
        // The backend's own index cannot read sealed lines, and is refused them before
        // it keeps any (it would keep them unsearchable).
        let plain = Search::shared(backend.search_index().await.unwrap());
        let refused = plain.sync(&**backend.transcripts()).await;
        assert!(
            matches!(refused, Err(Error::Encryption { .. })),
            "{refused:?}"
        );
        assert_eq!(plain.index().message_count().await.unwrap(), 0);

        let index = manager.search_index().await.unwrap();
        let search = Search::shared(index.clone());
        assert!(search.sync(&**backend.transcripts()).await.unwrap() > 0);

        // Found by her words and his, each hit opened.
        for word in ["jqalphadm", "jqreplydm", "bobdmkeepsake"] {
            let texts = found(&search, word).await;
            assert!(
                texts.iter().any(|t| t.contains(word)),
                "{}: {word}: {texts:?}",
                store.url
            );
        }
        // Ranked as a plain index ranks the same messages.
        let plain = InMemoryIndex::new();
        plain
            .add(index.messages(&SearchFilter::new()).await.unwrap())
            .await
            .unwrap();
        for query in ["jqalphadm", "my pin is", "ok", "bobdmkeepsake please"] {
            let want = plain.full_text(query, &SearchFilter::new(), 10).await;
            let got = index.full_text(query, &SearchFilter::new(), 10).await;
            assert_same_ranking(&got.unwrap(), &want.unwrap(), query);
        }
        // Not a word of anyone's in plain text, the index included.
        let mut words: Vec<&str> = JANE_OWN.to_vec();
        words.extend(BOB_WORDS);
        assert_eq!(hits(&everything(&store.url), &words), [], "{}", store.url);

        // A backup with her rows in the index, restored after the erase: found by
        // their hashes, they open to nothing of hers.
        drop((search, index, manager));
        let backup_dir = backups.path().join(n.to_string());
        backup(&store.url, &backup_dir);
        let (manager, _) = with_backend(&store).await;
        let index = manager.search_index().await.unwrap();
        manager
            .forget_person(&PersonRef::person(JANE))
            .await
            .unwrap();
        let search = Search::shared(index);
        assert_eq!(found(&search, "jqalphadm").await, [] as [String; 0]);
        // Her id in Bob's message is masked in the index too, words and text.
        assert_eq!(found(&search, "jq7").await, [] as [String; 0]);
        let texts = found(&search, "bobmention").await;
        assert_eq!(texts.len(), 1, "{}: {texts:?}", store.url);
        assert!(!texts[0].contains(JANE), "{}: {texts:?}", store.url);
        drop(search);
        drop(manager);
        restore(&store.url, &backup_dir);
        let (manager, backend) = with_backend(&store).await;
        let search = Search::shared(manager.search_index().await.unwrap());
        let texts = found(&search, "jqalphadm").await;
        assert!(
            !texts.is_empty(),
            "{}: her rows are in the backup",
            store.url
        );
        for text in &texts {
            assert_eq!(text, ERASED_TEXT, "{}", store.url);
        }
        let texts = found(&search, "bobdmkeepsake").await;
        assert!(
            texts.iter().any(|t| t.contains("bobdmkeepsake")),
            "{}",
            store.url
        );

        // Data keys replaced and the earlier ones retired, over and over (past the 16
        // keys an owner holds): the index's rows still read their lines.
        for _ in 0..17 {
            manager.rotate_data_keys().await.unwrap();
            manager.retire_data_keys().await.unwrap();
        }
        search.sync(&**backend.transcripts()).await.unwrap();
        let texts = found(&search, "bobdmkeepsake").await;
        assert!(
            texts.iter().any(|t| t.contains("bobdmkeepsake")),
            "{}: {texts:?}",
            store.url
        );
    }
    stores.finish().await;
}

/// Changes one letter of the sealed value of Bob's lines in the JSON tree `tree`, at
/// most `most` of them; how many.
fn alter_bobs_lines(tree: &Path, most: usize) -> usize {
    let mut altered = 0;
    for path in transcript_files(tree) {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = Vec::new();
        for line in text.lines() {
            if line.contains("\"personId\":\"bob\"") && altered < most {
                altered += 1;
                let at = line.find("enc2:").unwrap() + 40;
                let flipped = if &line[at..=at] == "A" { "B" } else { "A" };
                lines.push(format!("{}{flipped}{}", &line[..at], &line[at + 1..]));
            } else {
                lines.push(line.to_owned());
            }
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
    altered
}

/// A sealed JSON store in `dir`, its keys beside it.
fn sealed_json(dir: &Path) -> Sealed {
    Sealed {
        url: format!("json:{}", dir.join("tree").display()),
        keys: dir.join("keys"),
        master: MasterKey::generate().unwrap(),
    }
}

#[tokio::test]
async fn a_search_hit_whose_line_was_altered_reads_as_erased_and_the_search_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_json(dir.path());
    let (manager, backend) = with_backend(&store).await;
    answer(&manager, &bob_dm("my bobdmkeepsake", "b1"), "fine").await;
    answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
    let search = Search::shared(manager.search_index().await.unwrap());
    assert_eq!(search.sync(&**backend.transcripts()).await.unwrap(), 4);
    assert_eq!(found(&search, "bobdmkeepsake").await, ["my bobdmkeepsake"]);

    // One letter of each of Bob's sealed lines changed on disk.
    assert_eq!(alter_bobs_lines(&dir.path().join("tree"), usize::MAX), 2);
    assert_eq!(found(&search, "bobdmkeepsake").await, [ERASED_TEXT]);
    assert_eq!(found(&search, "jqalphadm").await, ["my pin is jqalphadm"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_rows_whose_transcript_is_gone_read_as_erased_and_an_erase_still_removes_them() {
    let stores = stores::Stores::new("sealed_orphans");
    let keys = tempfile::tempdir().unwrap();
    for store in sealed_stores(&stores, keys.path()) {
        let (manager, backend) = with_backend(&store).await;
        for i in 0..3 {
            let text = format!("bobdmkeepsake {i}");
            answer(&manager, &bob_dm(&text, &format!("b{i}")), "fine").await;
        }
        answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
        let index = manager.search_index().await.unwrap();
        let search = Search::shared(index.clone());
        assert_eq!(search.sync(&**backend.transcripts()).await.unwrap(), 8);

        // Bob's transcript removed by hand: his rows stay in the index until erased.
        let key = manager.key_for(&bob_dm("x", "x")).unwrap();
        let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
        let transcript = TranscriptRef::of(&key, &entry, manager.default_agent());
        assert!(backend.transcripts().remove(&transcript).await.unwrap());

        // His hits still count, reading `[erased]`; hers are untouched; background
        // work moves past his rows.
        let texts = found(&search, "bobdmkeepsake").await;
        assert_eq!(texts, [ERASED_TEXT; 3], "{}", store.url);
        assert_eq!(found(&search, "jqalphadm").await, ["my pin is jqalphadm"]);
        let progress = search.process_all(&**backend.transcripts()).await.unwrap();
        assert_eq!(
            progress.pending_categories, 0,
            "{}: {progress:?}",
            store.url
        );

        // The erase finds his rows through the manager's index, and removes them.
        manager
            .forget_person(&PersonRef::person("bob"))
            .await
            .unwrap();
        let raw = backend.search_index().await.unwrap();
        let left = raw
            .messages(&SearchFilter::new().person("bob"))
            .await
            .unwrap();
        assert_eq!(left, [], "{}", store.url);
        assert_eq!(index.message_count().await.unwrap(), 2, "{}", store.url);
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_key_changed_through_another_process_keys_is_seen_by_the_next_use_and_one_changed_by_hand_within_a_second(
) {
    use agent_sessions::privacy::encryption::{KeyOwner, KeyProvider};
    let dir = tempfile::tempdir().unwrap();
    let master = MasterKey::generate().unwrap();
    // Two processes of one bot: each opens the key directory.
    let (one, other) = (
        KeyFiles::open(dir.path(), master.clone()).unwrap(),
        KeyFiles::open(dir.path(), master.clone()).unwrap(),
    );
    let jane = KeyOwner::Person(JANE.into());
    let first = one.data_key(&jane, true).await.unwrap().unwrap();
    assert_eq!(
        other.data_key(&jane, false).await.unwrap(),
        Some(first.clone())
    );

    // A rotation in one is the current key in the other at once.
    assert!(one.rotate_key(&jane).await.unwrap());
    let rotated = other.data_keys(&jane).await.unwrap();
    assert_eq!(rotated.len(), 2);
    assert_ne!(
        rotated[0], first,
        "the other process seals under the new key"
    );
    assert_eq!(rotated[1], first);

    // An erase in one leaves the other no key to open or seal with.
    assert!(one.destroy(&jane).await.unwrap());
    assert_eq!(other.data_key(&jane, false).await.unwrap(), None);
    assert!(other.data_keys(&jane).await.unwrap().is_empty());

    // A key file removed by hand (not through KeyFiles) is seen within a second.
    let again = other.data_key(&jane, true).await.unwrap().unwrap();
    assert_eq!(one.data_key(&jane, false).await.unwrap(), Some(again));
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "key"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::remove_file(&files[0]).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(one.data_key(&jane, false).await.unwrap(), None);

    // The change count is the owner's alone to read and write.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("keys.changes"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The count's file removed (or a copy put back): each process opens the one there
    // within a second, and changes are seen at once again.
    std::fs::remove_file(dir.path().join("keys.changes")).unwrap();
    let ana = KeyOwner::Person("person-ana".into());
    let hers = one.data_key(&ana, true).await.unwrap().unwrap();
    assert_eq!(other.data_key(&ana, false).await.unwrap(), Some(hers));
    assert!(dir.path().join("keys.changes").exists());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(other.data_key(&ana, false).await.unwrap().is_some());
    assert!(one.destroy(&ana).await.unwrap());
    assert_eq!(other.data_key(&ana, false).await.unwrap(), None);

    // A link put in its place is not followed: the directory is refused.
    drop((one, other));
    std::fs::remove_file(dir.path().join("keys.changes")).unwrap();
    let elsewhere = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("keys.changes")).unwrap();
    let refused = KeyFiles::open(dir.path(), master).unwrap_err();
    assert!(refused.to_string().contains("keys.changes"), "{refused}");
    assert_eq!(std::fs::read(elsewhere.path()).unwrap(), b"");
}

/// Hits in more sessions than are read one by one, and hits far apart in one session
/// with many lines between them: every hit reads its own text, on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_across_many_sessions_and_far_apart_in_one_read_their_own_texts() {
    let stores = stores::Stores::new("sealed_search_spread");
    let keys = tempfile::tempdir().unwrap();
    for store in sealed_stores(&stores, keys.path()) {
        let (manager, backend) = with_backend(&store).await;
        for n in 0..20 {
            let said = format!("note {n}: the wordspreadhit is here");
            let message = InboundMessage::direct("telegram", format!("7000{n}"), &said)
                .with_message_id(format!("many-{n}"));
            answer(&manager, &message, "ok").await;
        }
        // One session: a hit, 30 turns of other words, a hit.
        let dm = bob_dm;
        answer(&manager, &dm("first wordfarapart", "far-0"), "ok").await;
        for n in 0..30 {
            answer(
                &manager,
                &dm(&format!("filler {n}"), &format!("fill-{n}")),
                "ok",
            )
            .await;
        }
        answer(&manager, &dm("last wordfarapart", "far-1"), "ok").await;

        let search = Search::shared(manager.search_index().await.unwrap());
        search.sync(&**backend.transcripts()).await.unwrap();
        let hits = search
            .search(&SearchQuery::text("wordspreadhit").limit(50))
            .await
            .unwrap();
        let mut many: Vec<String> = hits.into_iter().map(|hit| hit.message.text).collect();
        many.sort();
        let mut want: Vec<String> = (0..20)
            .map(|n| format!("note {n}: the wordspreadhit is here"))
            .collect();
        want.sort();
        assert_eq!(many, want, "{}", store.url);
        let mut far = found(&search, "wordfarapart").await;
        far.sort();
        assert_eq!(
            far,
            ["first wordfarapart", "last wordfarapart"],
            "{}",
            store.url
        );
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_key_directory_is_not_taken_over_through_a_link_or_by_a_key_its_files_do_not_open_with() {
    use agent_sessions::privacy::encryption::{KeyOwner, KeyProvider};
    let dir = tempfile::tempdir().unwrap();
    let keys_dir = dir.path().join("keys");
    let (right, wrong) = (
        MasterKey::generate().unwrap(),
        MasterKey::generate().unwrap(),
    );
    let keys = KeyFiles::open(&keys_dir, right.clone()).unwrap();
    let jane = KeyOwner::Person(JANE.into());
    let key = keys.data_key(&jane, true).await.unwrap().unwrap();
    drop(keys);

    // A link to it, however it is spelled, is not followed.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&keys_dir, &link).unwrap();
    std::fs::create_dir(keys_dir.join("sub")).unwrap();
    for spelled in [
        "link",
        "link/",
        "link/.",
        "link//",
        "link/sub/..",
        "keys/sub/..",
    ] {
        let refused = KeyFiles::open(dir.path().join(spelled), right.clone()).unwrap_err();
        assert_eq!(refused.kind(), "encryption", "{spelled}: {refused}");
    }
    std::fs::remove_dir(keys_dir.join("sub")).unwrap();

    // A directory other users may write in is not taken for one.
    use std::os::unix::fs::PermissionsExt;
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let refused = KeyFiles::open(&shared, right.clone()).unwrap_err();
    assert!(refused.to_string().contains("chmod 700"), "{refused}");
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        0,
        "nothing made"
    );

    // Another master key leaves the directory as it is, even a killed write's copy.
    let stale = keys_dir.join(".tmp-killed");
    std::fs::write(&stale, b"a sealed copy").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let refused = KeyFiles::open(&keys_dir, wrong.clone()).unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    assert!(stale.exists(), "a look with the wrong key removes nothing");
    // An erase through the right key sweeps it with the key it destroys.
    let keys = KeyFiles::open(&keys_dir, right.clone()).unwrap();
    let bob = KeyOwner::Person("bob".into());
    keys.data_key(&bob, true).await.unwrap();
    assert!(keys.destroy(&bob).await.unwrap());
    assert!(!stale.exists(), "a killed write's copy goes with an erase");
    drop(keys);

    // Its check file lost: another master key does not tie the directory to itself.
    std::fs::remove_file(keys_dir.join("master.check")).unwrap();
    let refused = KeyFiles::open(&keys_dir, wrong).unwrap_err();
    assert!(refused.to_string().contains("do not open"), "{refused}");
    assert!(!keys_dir.join("master.check").exists());
    // The right one opens it, and the check file is made again.
    let keys = KeyFiles::open(&keys_dir, right).unwrap();
    assert_eq!(keys.data_key(&jane, false).await.unwrap(), Some(key));
    assert!(keys_dir.join("master.check").exists());
}

/// How many times `needle` is in the live files of a JSON store (its `sessions.json`
/// and transcripts).
fn in_live_files(root: &Path, needle: &str) -> usize {
    transcript_files(root)
        .into_iter()
        .chain([root.join("agents/main/sessions/sessions.json")])
        .map(|path| {
            std::fs::read_to_string(path)
                .unwrap()
                .matches(needle)
                .count()
        })
        .sum()
}

/// What the model is given for a new message of `peer`, as one text.
async fn seen_by(manager: &SessionManager, peer: &str) -> String {
    let message = InboundMessage::direct("telegram", peer, "what did I say?");
    answer(manager, &message, "here it is").await
}

/// `tests/fixtures/sealed-enc1`, copied: a JSON store (`store/`), its key directory
/// (`keys/`) and master key (`master`), as a build from before values were sealed with
/// AES-256-GCM wrote them.
fn sealed_enc1() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::fixture("sealed-enc1");
    let keys = dir.path().join("keys");
    // A checkout leaves the directory as the umask says; the key files are the bot's.
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    for file in std::fs::read_dir(&keys).unwrap() {
        let path = file.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    dir
}

/// A sealed manager over a copy of [`sealed_enc1`] at `dir`, keyed as the build that
/// wrote it keyed its sessions (one per person on each channel).
async fn sealed_enc1_manager(dir: &Path) -> SessionManager {
    let master = MasterKey::from_file(dir.join("master")).unwrap();
    SessionManager::connect(&format!("json:{}", dir.join("store").display()))
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .encryption(KeyFiles::open(dir.join("keys"), master).unwrap())
        .build()
        .unwrap()
}

/// A store sealed by a build from before values were sealed with AES-256-GCM — its
/// values `enc1:`, XChaCha20-Poly1305; `tests/fixtures/sealed-enc1` is what that build
/// wrote for two people on Telegram (77: "my pin is anaword0", 88: "bobword0 here",
/// three exchanges each) — is read by this build, and a data-key rotation seals every
/// live value anew as `enc2:`, both conversations still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_sealed_by_an_earlier_build_is_read_and_a_rotation_seals_it_anew() {
    let dir = sealed_enc1();
    let root = dir.path().join("store");
    let manager = sealed_enc1_manager(dir.path()).await;
    assert_eq!(in_live_files(&root, "enc2:"), 0);
    assert!(
        in_live_files(&root, "enc1:") >= 12,
        "the fixture is sealed the old way"
    );
    assert_eq!(in_live_files(&root, "anaword"), 0);

    let ana = seen_by(&manager, "77").await;
    for said in [
        "my pin is anaword0",
        "noted anareply1",
        "my pin is anaword2",
    ] {
        assert!(ana.contains(said), "{said} in {ana}");
    }
    assert!(!ana.contains("bobword"), "{ana}");

    let rotation = manager.rotate_data_keys().await.unwrap();
    assert_eq!(rotation.left, 0, "{rotation:?}");
    assert_eq!(
        in_live_files(&root, "enc1:"),
        0,
        "every live value sealed anew"
    );
    assert!(in_live_files(&root, "enc2:") >= 12);
    assert_eq!(in_live_files(&root, "anaword"), 0);
    let ana = seen_by(&manager, "77").await;
    assert!(ana.contains("my pin is anaword0"), "{ana}");
    let bob = seen_by(&manager, "88").await;
    for said in ["bobword0 here", "hi bobreply2"] {
        assert!(bob.contains(said), "{said} in {bob}");
    }
}

/// One line of a sealed store altered on disk does not stop a data-key rotation: the
/// pass seals every other value anew and reports the line, which stays as it was (and
/// reading it is still an error), under the key it names, which retiring keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_line_is_reported_by_a_rotation_and_does_not_stop_it() {
    let dir = sealed_enc1();
    let root = dir.path().join("store");
    // One letter of one of Bob's sealed lines changed.
    let bob_line = |line: &str| line.contains("\"sealed\"") && line.contains("telegram:dm:88");
    let mut altered = None;
    for path in transcript_files(&root) {
        let text = std::fs::read_to_string(&path).unwrap();
        if altered.is_some() || !text.lines().any(bob_line) {
            continue;
        }
        let lines: Vec<String> = text
            .lines()
            .map(|line| match altered.is_none() && bob_line(line) {
                true => {
                    let at = line.find("enc1:").unwrap() + 60;
                    let flipped = if &line[at..=at] == "A" { "B" } else { "A" };
                    altered = Some(format!("{}{flipped}{}", &line[..at], &line[at + 1..]));
                    altered.clone().unwrap()
                }
                false => line.to_owned(),
            })
            .collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
    let altered = altered.expect("a line of Bob's");
    let manager = sealed_enc1_manager(dir.path()).await;

    let rotation = manager.rotate_data_keys().await.unwrap();
    assert_eq!((rotation.damaged, rotation.left), (1, 0), "{rotation:?}");
    assert_eq!(
        in_live_files(&root, "enc1:"),
        1,
        "all but the altered line sealed anew"
    );
    let kept: Vec<String> = transcript_files(&root)
        .iter()
        .flat_map(|path| {
            std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(kept.contains(&altered), "the altered line is as it was");
    assert!(seen_by(&manager, "77").await.contains("my pin is anaword0"));
    let turn = manager
        .turn(&InboundMessage::direct("telegram", "88", "and mine?"))
        .await
        .unwrap();
    let refused = turn.messages().await.unwrap_err();
    assert_eq!(refused.kind(), "encryption", "{refused}");
    // The key the altered line names is kept: nothing is lost by retiring.
    let retired = manager.retire_data_keys().await.unwrap();
    assert!(retired.left >= 1, "{retired:?}");
}

/// One letter of a sealed field of Bob's entry changed in the store: what reads his
/// entry stops with an error naming his session and the field — a listing that takes
/// him in and an erase, changing nothing; a data-key rotation, once it reaches his
/// entry; his turns — and Ana's turns go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_entry_field_stops_what_reads_that_entry_and_no_one_elses_turn() {
    let dir = sealed_enc1();
    let root = dir.path().join("store");
    let file = root.join("agents/main/sessions/sessions.json");
    let mut store: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let preview = &mut store["agent:main:telegram:dm:88"]["lastMessagePreview"];
    let sealed = preview.as_str().unwrap().to_owned();
    let at = sealed.len() - 10;
    let flipped = if &sealed[at..=at] == "A" { "B" } else { "A" };
    *preview = format!("{}{flipped}{}", &sealed[..at], &sealed[at + 1..]).into();
    std::fs::write(&file, serde_json::to_string_pretty(&store).unwrap()).unwrap();
    let before = everything(&format!("json:{}", root.display()));
    let manager = sealed_enc1_manager(dir.path()).await;

    let named = |error: Error| {
        assert_eq!(error.kind(), "encryption", "{error}");
        let said = error.to_string();
        assert!(said.contains("telegram:dm:88"), "{said}");
        assert!(said.contains("lastMessagePreview"), "{said}");
    };
    named(manager.store().list(&ListFilter::new()).await.unwrap_err());
    let changed = |step: &str| {
        let now = everything(&format!("json:{}", root.display()));
        let differ: Vec<&String> = now
            .keys()
            .chain(before.keys())
            .filter(|file| now.get(*file) != before.get(*file))
            .collect();
        assert!(differ.is_empty(), "{step} changed {differ:?}");
    };
    changed("a listing");
    named(
        manager
            .forget_person(&PersonRef::sender("telegram", "88"))
            .await
            .unwrap_err(),
    );
    changed("an erase");
    // A rotation stops there too; what it sealed anew before still reads.
    named(manager.rotate_data_keys().await.unwrap_err());
    // His turns are refused; Ana's are not.
    let his = manager
        .turn(&InboundMessage::direct("telegram", "88", "hi"))
        .await;
    named(his.unwrap_err());
    assert!(seen_by(&manager, "77").await.contains("my pin is anaword0"));
}

/// An id with capitals — a Slack sender known by `U024BE7LH` alone, a person the host
/// calls `Ana-Lima` — is erased by the id however it is spelled: their lines, and
/// the person's group chatter still waiting, no longer open in a backup restored
/// after the erase; another sender's chatter beside theirs does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_with_capitals_is_erased_from_a_restored_backup_however_it_is_spelled() {
    let stores = stores::Stores::new("sealed_capitals");
    let keys = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        let manager = store.manager().await;
        let dm = |text: &str| InboundMessage::direct("slack", "U024BE7LH", text);
        let in_channel =
            |sender: &str, text: &str| InboundMessage::group("slack", "C0FFEE", sender, text);
        answer(&manager, &dm("my pin is slackpinpapa"), "noted").await;
        for message in [
            in_channel("U0ANA", "lunch at anachatterquebec?").from_person("Ana-Lima"),
            in_channel("W0KEEPME", "or keptchatterromeo"),
        ] {
            let turn = manager.turn(&message).await.unwrap();
            assert!(turn.messages().await.unwrap().is_empty(), "it waits");
        }
        drop(manager);
        let backup_dir = backups.path().join(n.to_string());
        backup(&store.url, &backup_dir);
        for person in [
            PersonRef::sender("slack", "u024be7lh"),
            PersonRef::person("ana-lima"),
        ] {
            let report = store.manager().await.forget_person(&person).await.unwrap();
            assert!(report.data_keys >= 1, "{}: {report:?}", store.url);
        }
        restore(&store.url, &backup_dir);

        let manager = store.manager().await;
        let seen = answer(&manager, &dm("what was it?"), "?").await;
        assert!(!seen.contains("slackpinpapa"), "{}: {seen}", store.url);
        assert!(seen.contains(ERASED_TEXT), "{}: {seen}", store.url);
        let seen = answer(
            &manager,
            &in_channel("W0KEEPME", "@bot what did we say?").mentioning_agent(),
            "lunch",
        )
        .await;
        assert!(!seen.contains("anachatterquebec"), "{}: {seen}", store.url);
        assert!(seen.contains("keptchatterromeo"), "{}: {seen}", store.url);
    }
    stores.finish().await;
}

/// Another key directory made with the same master key (a staging copy's) holds none of
/// the store's keys: a data-key rotation or retirement with it is refused before it
/// changes anything, and a turn through it keeps the entry's fields it cannot open as
/// they were stored, so the bot's own keys still read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_key_directory_is_refused_by_a_rotation_and_a_turn_through_it_drops_no_field() {
    let stores = stores::Stores::new("sealed_other_dir");
    let keys = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    for (n, store) in sealed_stores(&stores, keys.path()).into_iter().enumerate() {
        let dm = |text: &str| {
            InboundMessage::direct("telegram", "4242", text).with_sender_name("Quillfeather")
        };
        let manager = store.manager().await;
        answer(&manager, &dm("my pin is otherdirpin"), "noted").await;
        let key = manager.resolve(&dm("x")).await.unwrap().key;
        manager
            .session(&key)
            .set_description(Some("otherdirdescription"), DescriptionSource::User)
            .await
            .unwrap();
        let before = manager.store().get(&key).await.unwrap().unwrap();
        assert_eq!(
            before.entry.description.as_deref(),
            Some("otherdirdescription")
        );
        drop(manager);

        // The same people's keys, made in a directory of their own.
        let staging = Sealed {
            url: store.url.clone(),
            keys: other.path().join(n.to_string()),
            master: store.master.clone(),
        };
        // It holds a key of the session's own, as a copy sealed there would.
        KeyFiles::open(&staging.keys, staging.master.clone())
            .unwrap()
            .data_key(&KeyOwner::SessionKey(key.as_str().to_owned()), true)
            .await
            .unwrap();
        let wrong = staging.manager().await;
        for refused in [
            wrong.rotate_data_keys().await,
            wrong.retire_data_keys().await,
        ] {
            match refused {
                Err(Error::Encryption { problem }) => {
                    assert!(problem.contains("not the key directory"), "{problem}")
                }
                other => panic!("{}: {other:?}", store.url),
            }
        }
        let after = store
            .manager()
            .await
            .store()
            .get(&key)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.entry, before.entry, "{}: nothing changed", store.url);

        // A turn through the other directory: what it cannot open stays as stored.
        let turn = wrong.turn(&dm("hello again")).await.unwrap();
        turn.complete("hi").await.unwrap();
        drop(wrong);
        let after = store
            .manager()
            .await
            .store()
            .get(&key)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after.entry.description.as_deref(),
            Some("otherdirdescription"),
            "{}",
            store.url
        );
    }
    stores.finish().await;
}

/// One of Bob's sealed lines altered on disk does not stop anyone else's erase or
/// export: the pass gives it as stored and goes on. Jane is erased and exported whole;
/// Bob's own erase takes his altered line too.
#[tokio::test]
async fn an_altered_line_of_one_person_stops_no_one_elses_erase_or_export() {
    let dir = tempfile::tempdir().unwrap();
    let store = sealed_json(dir.path());
    let manager = store.manager().await;
    answer(&manager, &bob_dm("my bobdmkeepsake", "b1"), "fine").await;
    answer(&manager, &telegram("my pin is jqalphadm", "t1"), "noted").await;
    drop(manager);
    assert_eq!(alter_bobs_lines(&dir.path().join("tree"), 1), 1);

    let manager = store.manager().await;
    let exported = export(&manager, &PersonRef::person(JANE)).await;
    assert!(exported.contains("my pin is jqalphadm"), "{exported}");
    let report = manager
        .forget_person(&PersonRef::person(JANE))
        .await
        .unwrap();
    assert!(report.data_keys >= 1, "{report:?}");
    let report = manager
        .forget_person(&PersonRef::person("bob"))
        .await
        .unwrap();
    assert!(
        report.redacted_lines + report.transcripts >= 1,
        "{report:?}"
    );
    let all = everything(&store.url);
    assert!(hits(&all, &["jqalphadm", "bobdmkeepsake"]).is_empty());
}
