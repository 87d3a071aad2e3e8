//! What the crate meets where its files should be: FIFOs, directories, symlinks,
//! sockets, files nested or sized to exhaust a parser. Each is a typed error (or a
//! doctor finding) at once — nothing blocks, nothing aborts, nothing is changed.

#![cfg(unix)]

mod common;

use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_sessions::ops::{examine, DoctorOptions, Finding};
use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::{Offset, TranscriptEntry, TranscriptRef, TranscriptStore};
use agent_sessions::{Durability, Error, JsonFileOptions};

use common::main_store_file;

fn mkfifo(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// `work` must finish within 5 s: a hang fails the test instead of stalling it.
async fn promptly<T>(work: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .expect("blocked on a special file")
}

fn key() -> SessionKey {
    SessionKey::parse("agent:main:telegram:dm:42").unwrap()
}

fn assert_not_a_file<T: std::fmt::Debug>(
    result: agent_sessions::Result<T>,
    path: &Path,
    found: &str,
) {
    match result {
        Err(Error::NotAFile { path: p, found: f }) => {
            assert_eq!(p, path);
            assert_eq!(f, found);
        }
        other => panic!(
            "expected NotAFile({found}) for {}, got {other:?}",
            path.display()
        ),
    }
}

/// The special things that can sit where a store file belongs.
fn plant(kind: &str, path: &Path) -> &'static str {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    match kind {
        "fifo" => {
            mkfifo(path);
            "a FIFO"
        }
        "directory" => {
            fs::create_dir(path).unwrap();
            "a directory"
        }
        "symlink" => {
            std::os::unix::fs::symlink("/etc/hostname", path).unwrap();
            "a symbolic link"
        }
        "socket" => {
            let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
            std::mem::forget(listener);
            "a socket"
        }
        other => unreachable!("{other}"),
    }
}

#[tokio::test]
async fn anything_but_a_regular_file_at_the_store_path_is_a_typed_error_at_once() {
    for kind in ["fifo", "directory", "symlink", "socket"] {
        let dir = tempfile::tempdir().unwrap();
        let path = main_store_file(dir.path());
        let found = plant(kind, &path);
        let store = common::store(dir.path());
        assert_not_a_file(promptly(store.get(&key())).await, &path, found);
        assert_not_a_file(promptly(store.list(&ListFilter::new())).await, &path, found);
        assert_not_a_file(
            promptly(store.put(&key(), SessionEntry::new("s-1", 1))).await,
            &path,
            found,
        );
        assert!(fs::symlink_metadata(&path).is_ok(), "{kind} left in place");
    }
}

#[tokio::test]
async fn a_heartbeat_file_that_is_not_a_regular_file_is_a_typed_error_at_once() {
    use agent_sessions::reply::is_heartbeat_file_effectively_empty;
    for kind in ["fifo", "directory", "symlink", "socket"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("HEARTBEAT.md");
        let found = plant(kind, &path);
        let file = path.clone();
        let checked = promptly(tokio::task::spawn_blocking(move || {
            is_heartbeat_file_effectively_empty(&file)
        }))
        .await
        .unwrap();
        assert_not_a_file(checked, &path, found);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("HEARTBEAT.md");
    // Past the bound, refused before it is read; not UTF-8, content.
    fs::write(&path, vec![b'\n'; (1 << 20) + 1]).unwrap();
    assert!(matches!(
        is_heartbeat_file_effectively_empty(&path),
        Err(Error::FileTooLarge { .. })
    ));
    fs::write(&path, b"# Tasks\n\xff\xfe\n").unwrap();
    assert!(!is_heartbeat_file_effectively_empty(&path).unwrap());
}

#[tokio::test]
async fn a_fifo_as_the_lock_file_fails_the_write_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let lock = main_store_file(dir.path()).with_extension("json.lock");
    mkfifo(&lock);
    let store = common::store(dir.path());
    let result = promptly(store.put(&key(), SessionEntry::new("s-1", 1))).await;
    assert_not_a_file(result, &lock, "a FIFO");
}

#[tokio::test]
async fn a_fifo_as_a_transcript_is_a_typed_error_for_reads_and_appends() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = FileTranscriptStore::new(dir.path());
    let transcript = TranscriptRef::new(AgentId::main(), "s-1");
    let path = transcripts.path(&transcript).unwrap();
    mkfifo(&path);
    assert_not_a_file(
        promptly(transcripts.read(&transcript, Offset::START)).await,
        &path,
        "a FIFO",
    );
    let entry = TranscriptEntry::user_text("hi", chrono::Utc::now());
    assert_not_a_file(
        promptly(transcripts.append(&transcript, vec![entry])).await,
        &path,
        "a FIFO",
    );
}

#[tokio::test]
async fn a_special_file_planted_where_a_transcript_was_appended_to_is_refused_at_once() {
    for durability in [Durability::Unsynced, Durability::SyncFile] {
        for kind in ["fifo", "directory", "symlink", "socket"] {
            let dir = tempfile::tempdir().unwrap();
            let transcripts = FileTranscriptStore::with_durability(dir.path(), durability);
            let transcript = TranscriptRef::new(AgentId::main(), "s-1");
            let entry = || vec![TranscriptEntry::user_text("hi", chrono::Utc::now())];
            transcripts.append(&transcript, entry()).await.unwrap();
            let path = transcripts.path(&transcript).unwrap();
            // Another process takes the file away and plants something else.
            fs::remove_file(&path).unwrap();
            let found = plant(kind, &path);
            assert_not_a_file(
                promptly(transcripts.append(&transcript, entry())).await,
                &path,
                found,
            );
        }
    }
}

#[tokio::test]
async fn doctor_reports_special_files_and_never_calls_them_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = main_store_file(dir.path());
    mkfifo(&store_path);
    mkfifo(&store_path.with_extension("json.lock"));
    let report = promptly(examine(dir.path(), &DoctorOptions::repair()))
        .await
        .unwrap();
    assert!(!report.is_healthy());
    assert!(!report.all_repaired(), "nothing is done to what is there");
    let unusable: Vec<&PathBuf> = report
        .findings
        .iter()
        .filter_map(|(finding, _)| match finding {
            Finding::UnusableFile { path, problem } => {
                assert!(problem.contains("FIFO"), "{problem}");
                Some(path)
            }
            _ => None,
        })
        .collect();
    assert_eq!(unusable.len(), 2, "{report:?}");
    assert!(fs::symlink_metadata(&store_path)
        .unwrap()
        .file_type()
        .is_fifo_like());
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[tokio::test]
async fn doctor_reports_a_transcript_that_is_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::store(dir.path());
    let transcript =
        agent_sessions::store::sessions_dir(dir.path(), &AgentId::main()).join("s-1.jsonl");
    let mut entry = SessionEntry::new("s-1", 1);
    entry.session_file = Some(transcript.display().to_string());
    store.put(&key(), entry).await.unwrap();
    mkfifo(&transcript);
    let mut options = DoctorOptions::repair();
    options.prune_missing_transcripts = true;
    let report = promptly(examine(dir.path(), &options)).await.unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|(f, r)| r.is_none() && matches!(f, Finding::UnusableSessionFile { .. })),
        "{report:?}"
    );
    assert!(store.get(&key()).await.unwrap().is_some(), "never pruned");
}

/// A store nested `depth` levels deep and cut off: not JSON, so the JSON5 fallback sees it.
fn deep_truncated(depth: usize) -> String {
    format!("{{\"agent:main:main\": {}", "[".repeat(depth))
}

#[tokio::test]
async fn a_deep_truncated_or_json5_store_is_corrupt_not_a_stack_overflow() {
    for text in [
        deep_truncated(10_000),
        deep_truncated(1_000_000),
        // JSON5 (a comment) nested deep and complete.
        format!(
            "// hand-edited\n{{\"k\": {}{}}}",
            "[".repeat(50_000),
            "]".repeat(50_000)
        ),
        format!("{{'k': {}", "{'a':".repeat(100_000)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = main_store_file(dir.path());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &text).unwrap();
        let store = common::store(dir.path());
        // On a 2 MiB thread stack, as a small worker would have.
        let result = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn({
                let store = store.clone();
                move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                        .block_on(store.list(&ListFilter::new()))
                }
            })
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(matches!(result, Err(Error::Corrupt { .. })), "{result:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text, "left untouched");
    }
}

#[tokio::test]
async fn doctor_restores_a_deep_corrupt_store_from_its_backup() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_one_session(dir.path()).await;
    store
        .put(&key(), SessionEntry::new("s-1", 2))
        .await
        .unwrap(); // a .bak exists
    let path = main_store_file(dir.path());
    fs::write(&path, deep_truncated(100_000)).unwrap();
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert!(report.all_repaired(), "{report:?}");
    let fresh = common::store(dir.path());
    assert!(fresh.get(&key()).await.unwrap().is_some());
}

#[tokio::test]
async fn a_store_over_the_size_limit_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = main_store_file(dir.path());
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // A sparse file of 1 GiB: takes no disk, and would take 1 GiB of memory to read.
    fs::File::create(&path).unwrap().set_len(1 << 30).unwrap();
    let store = common::store(dir.path());
    match store.list(&ListFilter::new()).await {
        Err(Error::FileTooLarge {
            path: p,
            size,
            limit,
        }) => {
            assert_eq!(p, path);
            assert_eq!(size, 1 << 30);
            assert_eq!(limit, agent_sessions::store::DEFAULT_MAX_FILE_BYTES);
        }
        other => panic!("expected FileTooLarge, got {other:?}"),
    }
    // The limit is the caller's to choose, and the error names it.
    fs::File::create(&path).unwrap().set_len(2048).unwrap();
    let small = JsonFileStore::new_with(
        dir.path(),
        JsonFileOptions {
            max_file_bytes: 1024,
            ..JsonFileOptions::default()
        },
    );
    let error = small.get(&key()).await.unwrap_err();
    assert!(error.to_string().contains("max_file_bytes"), "{error}");
    assert!(matches!(error, Error::FileTooLarge { limit: 1024, .. }));

    fs::File::create(&path).unwrap().set_len(1 << 30).unwrap();
    let report = examine(dir.path(), &DoctorOptions::repair()).await.unwrap();
    assert_reports_an_unusable_file(&report);
}

#[tokio::test]
async fn a_transcript_line_nested_a_million_deep_is_a_reported_issue() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = FileTranscriptStore::new(dir.path());
    let transcript = TranscriptRef::new(AgentId::main(), "s-1");
    let entry = TranscriptEntry::user_text("before", chrono::Utc::now());
    transcripts.append(&transcript, vec![entry]).await.unwrap();
    let path = transcripts.path(&transcript).unwrap();
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, format!("{}\n", "[".repeat(1_000_000)).as_bytes())
        .unwrap();
    let entry = TranscriptEntry::user_text("after", chrono::Utc::now());
    transcripts.append(&transcript, vec![entry]).await.unwrap();
    let read = transcripts.read(&transcript, Offset::START).await.unwrap();
    assert_eq!(read.events.len(), 2, "the good lines around it are read");
    assert_eq!(read.issues.len(), 1, "{:?}", read.issues);
}

#[tokio::test]
async fn a_planted_quarantine_link_carries_nothing_out_of_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let sessions = agent_sessions::store::sessions_dir(dir.path(), &AgentId::main());
    fs::create_dir_all(&sessions).unwrap();
    fs::write(
        sessions.join("sessions.json.bak"),
        r#"{"agent:main:telegram:dm:bob":{"sessionId":"b","updatedAt":1}}"#,
    )
    .unwrap();
    let corrupt = r#"{"agent:main:telegram:dm:bob":{"sessionId":"b","updatedAt":2,"secret":"newer"#;
    fs::write(sessions.join("sessions.json"), corrupt).unwrap();
    std::os::unix::fs::symlink(outside.path(), sessions.join("quarantine")).unwrap();

    // Looking is enough to see it: a read-only examination reports the link.
    let looked = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert!(
        looked.findings.iter().any(|(finding, _)| matches!(
            finding,
            Finding::UnusableFile { path, problem }
                if path.ends_with("quarantine") && problem.contains("symbolic link")
        )),
        "{:?}",
        looked.findings
    );
    let result = examine(dir.path(), &DoctorOptions::repair()).await;
    assert!(
        matches!(
            &result,
            Err(Error::NotAFile {
                found: "a symbolic link",
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(
        fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing left the tree"
    );
    assert_eq!(
        fs::read_to_string(sessions.join("sessions.json")).unwrap(),
        corrupt
    );
}

#[tokio::test]
async fn a_linked_agent_directory_is_neither_read_nor_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    fs::create_dir_all(elsewhere.path().join("sessions")).unwrap();
    fs::create_dir_all(dir.path().join("agents")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("agents/evil")).unwrap();
    let store = common::store(dir.path());
    let key = SessionKey::parse("agent:evil:telegram:dm:1").unwrap();
    let written = store.put(&key, SessionEntry::new("s-1", 1)).await;
    assert!(
        matches!(written, Err(Error::NotAFile { .. })),
        "{written:?}"
    );
    assert_eq!(
        fs::read_dir(elsewhere.path().join("sessions"))
            .unwrap()
            .count(),
        0,
        "nothing written through the link"
    );
    let transcripts = FileTranscriptStore::new(dir.path());
    let transcript = TranscriptRef::new(AgentId::new("evil").unwrap(), "s-1");
    let entry = TranscriptEntry::user_text("hi", chrono::Utc::now());
    assert!(matches!(
        transcripts.append(&transcript, vec![entry]).await,
        Err(Error::NotAFile { .. })
    ));
    let report = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    assert_reports_an_unusable_file(&report);
}

#[tokio::test]
async fn doctor_reports_every_special_file_in_a_sessions_directory() {
    let dir = tempfile::tempdir().unwrap();
    store_with_one_session(dir.path()).await;
    let sessions = agent_sessions::store::sessions_dir(dir.path(), &AgentId::main());
    mkfifo(&sessions.join("bbbb-1.jsonl")); // a transcript no entry names
    fs::create_dir(sessions.join("sessions.json.bak")).unwrap();
    let report = examine(dir.path(), &DoctorOptions::default())
        .await
        .unwrap();
    let unusable: Vec<String> = report
        .findings
        .iter()
        .filter_map(|(f, _)| match f {
            Finding::UnusableFile { path, .. } => {
                Some(path.file_name()?.to_string_lossy().into_owned())
            }
            _ => None,
        })
        .collect();
    assert_eq!(unusable.len(), 2, "{report:?}");
    assert!(unusable.contains(&"bbbb-1.jsonl".to_owned()));
    assert!(unusable.contains(&"sessions.json.bak".to_owned()));
}

#[tokio::test]
async fn archiving_leaves_a_special_file_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let transcripts = FileTranscriptStore::new(dir.path());
    let transcript = TranscriptRef::new(AgentId::main(), "s-1");
    let path = transcripts.path(&transcript).unwrap();
    mkfifo(&path);
    let archived = transcripts
        .archive(
            &transcript,
            agent_sessions::transcript::ArchiveReason::Reset,
            chrono::Utc::now(),
        )
        .await;
    assert!(
        matches!(archived, Err(Error::NotAFile { .. })),
        "{archived:?}"
    );
    assert!(fs::symlink_metadata(&path).is_ok(), "left in place");
}

fn assert_reports_an_unusable_file(report: &agent_sessions::ops::DoctorReport) {
    assert!(
        report
            .findings
            .iter()
            .any(|(f, _)| matches!(f, Finding::UnusableFile { .. })),
        "{report:?}"
    );
}

/// A JSON store under `root` holding one session.
async fn store_with_one_session(root: &Path) -> JsonFileStore {
    let store = common::store(root);
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    store
}

/// A thread id as long as a key segment may be (1,024 bytes) names a transcript file
/// that fits the file system, live and archived: every turn in the thread works.
#[tokio::test]
async fn a_thread_id_too_long_for_a_file_name_still_gets_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    for thread in ["t".repeat(1_024), "é".repeat(300)] {
        let message = |text: &str| {
            InboundMessage::group("slack", "c1", "ann", text)
                .mentioning_agent()
                .with_thread(thread.as_str())
        };
        for text in ["@bot first", "@bot second"] {
            let turn = manager.turn(&message(text)).await.unwrap();
            turn.complete("ok").await.unwrap();
        }
        let key = manager.key_for(&message("")).unwrap();
        let said: Vec<String> = manager
            .session(&key)
            .messages()
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(said.len(), 4, "{said:?}");
        // Archived by a reset, it keeps a name the file system takes.
        manager.session(&key).reset().await.unwrap();
    }
}
