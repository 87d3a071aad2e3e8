//! A full disk: writes fail with a clear error and leave nothing behind — no lock
//! file that others must wait out, no partial transcript line.
//!
//! The disk is a small tmpfs mounted for the test, which needs root (CI runs as root);
//! elsewhere each test says it was skipped and passes.

#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::{Offset, TranscriptEntry, TranscriptRef, TranscriptStore};
use agent_sessions::{Durability, Error, JsonFileOptions, LockOptions};

/// A 1 MiB tmpfs, unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(test: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|output| output.status.success());
        if !mounted {
            eprintln!("{test}: SKIPPED — mounting a small tmpfs needs root");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk with a file, leaving `free` bytes (in whole pages).
    fn fill(&self, free: u64) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let len = fs::metadata(&filler).unwrap().len();
        file.set_len(len.saturating_sub(free)).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn options() -> JsonFileOptions {
    JsonFileOptions {
        lock: LockOptions {
            timeout: Duration::from_secs(1),
            ..LockOptions::default()
        },
        ..JsonFileOptions::default()
    }
}

fn key(n: u32) -> SessionKey {
    SessionKey::parse(&format!("agent:main:telegram:dm:{n}")).unwrap()
}

#[tokio::test]
async fn a_full_disk_fails_the_lock_cleanly_and_the_next_writer_proceeds_at_once() {
    let Some(disk) = SmallDisk::mount("a_full_disk_fails_the_lock_cleanly") else {
        return;
    };
    let root = disk.path().join("state");
    let store = JsonFileStore::new_with(&root, options());
    store
        .put(&key(1), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    let store_file = common::main_store_file(&root);
    let before = fs::read(&store_file).unwrap();
    let sessions = store_file.parent().unwrap().to_owned();
    let files_before = common::file_names(&sessions);

    let filler = disk.fill(0);
    let error = store
        .put(&key(2), SessionEntry::new("s-2", 2))
        .await
        .unwrap_err();
    // The lock is never published without its holder: the attempt itself fails.
    assert!(
        matches!(&error, Error::Io { op: "create lock file", source, .. } if source.raw_os_error() == Some(28)),
        "{error:?}"
    );
    assert_eq!(fs::read(&store_file).unwrap(), before);
    assert_eq!(
        common::file_names(&sessions),
        files_before,
        "nothing left behind"
    );

    fs::remove_file(filler).unwrap();
    // Within the 1 s lock timeout: no lock to wait out.
    store
        .put(&key(2), SessionEntry::new("s-2", 2))
        .await
        .unwrap();
    assert_eq!(store.list(&ListFilter::new()).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_failed_append_on_a_full_disk_leaves_no_partial_line() {
    // Unsynced appends take the short path; the others go through the blocking pool.
    for durability in [Durability::SyncFileAndDir, Durability::Unsynced] {
        let Some(disk) = SmallDisk::mount("a_failed_append_on_a_full_disk_leaves_no_partial_line")
        else {
            return;
        };
        let transcripts = FileTranscriptStore::with_durability(disk.path(), durability);
        let transcript = TranscriptRef::new(AgentId::main(), "s-1");
        let now = chrono::Utc::now();
        transcripts
            .append(&transcript, vec![TranscriptEntry::user_text("first", now)])
            .await
            .unwrap();
        let path = transcripts.path(&transcript).unwrap();
        let before = fs::read(&path).unwrap();

        // Room for part of the next line only.
        let filler = disk.fill(8192);
        let long = "x".repeat(256 * 1024);
        let failed = transcripts
            .append(&transcript, vec![TranscriptEntry::user_text(long, now)])
            .await;
        assert!(failed.is_err(), "{durability:?}: {failed:?}");
        assert_eq!(
            fs::read(&path).unwrap(),
            before,
            "{durability:?}: cut back to the last whole line"
        );

        fs::remove_file(filler).unwrap();
        transcripts
            .append(&transcript, vec![TranscriptEntry::user_text("after", now)])
            .await
            .unwrap();
        let read = transcripts.read(&transcript, Offset::START).await.unwrap();
        assert!(read.issues.is_empty(), "{:?}", read.issues);
        assert_eq!(read.events.len(), 2);
        assert_eq!(read.events[1].entry.parent_id, read.events[0].entry.id);
    }
}
