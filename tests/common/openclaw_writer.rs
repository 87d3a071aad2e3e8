//! A writer that follows OpenClaw's session store protocol step for step, so the
//! crate can be run side by side with it on one `sessions.json`.
//!
//! One update is what OpenClaw's `updateSessionStore` does:
//!
//! 1. `mkdir -p` the store's directory, then loop on `open("<store>.lock", O_CREAT|O_EXCL)`:
//!    on success write `{"pid":…,"startedAt":…}` and go on; on `EEXIST` give up after
//!    10 s, remove the lock if its mtime is over 30 s old and retry at once, else sleep
//!    25 ms; on `ENOENT` create the directory and sleep 25 ms.
//! 2. Read `sessions.json` and parse all of it.
//! 3. Change one entry (add one to a counter field), keeping everything else.
//! 4. Serialise the whole store (`JSON.stringify(store, null, 2)`), write it to
//!    `<store>.<pid>.<uuid>.tmp` (mode 0600) and rename that over the store.
//! 5. Remove the lock file.
//!
//! A caller making several updates calls [`update`] again at once: the lock is
//! re-taken right after it is released, as a busy OpenClaw gateway does.
//!
//! Shared by `tests/openclaw_cowrite.rs` and `benches/cowrite.rs` (included by path).

#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

/// OpenClaw's lock timeout.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// OpenClaw's lock poll interval.
pub const POLL: Duration = Duration::from_millis(25);
/// OpenClaw's stale lock age (by the lock file's mtime).
pub const STALE: Duration = Duration::from_secs(30);

/// The counter this writer adds one to: a field the crate does not know.
pub const COUNTER: &str = "openclawWrites";
/// The counter the crate's side adds one to (`SessionEntry::compaction_count`).
pub const CRATE_COUNTER: &str = "compactionCount";
/// An unknown field every seeded entry carries, which both writers must keep.
pub const UNKNOWN: &str = "futureField";

/// What one update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The entry was changed.
    Updated {
        /// How long the lock took to get.
        waited: Duration,
        /// How long the whole update took, lock wait included.
        took: Duration,
    },
    /// The lock was not taken within [`TIMEOUT`]; nothing was changed.
    TimedOut(Duration),
}

/// `<store>.lock`.
pub fn lock_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// One update of `key` in the store at `store`, the OpenClaw way.
pub fn update(store: &Path, key: &str) -> io::Result<Outcome> {
    let started = Instant::now();
    let lock = lock_path(store);
    let dir = store.parent().expect("a store file in a directory");
    fs::create_dir_all(dir)?;
    loop {
        match OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(mut file) => {
                // Best effort, as OpenClaw's.
                let holder = json!({"pid": std::process::id(), "startedAt": epoch_ms()});
                let _ = file.write_all(holder.to_string().as_bytes());
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(dir)?;
                std::thread::sleep(POLL);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if started.elapsed() > TIMEOUT {
                    return Ok(Outcome::TimedOut(started.elapsed()));
                }
                let age = fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|mtime| SystemTime::now().duration_since(mtime).ok());
                if age.is_some_and(|age| age > STALE) {
                    let _ = fs::remove_file(&lock);
                    continue;
                }
                std::thread::sleep(POLL);
            }
            Err(e) => return Err(e),
        }
    }
    let waited = started.elapsed();
    let changed = change(store, key);
    let _ = fs::remove_file(&lock);
    changed.map(|()| Outcome::Updated {
        waited,
        took: started.elapsed(),
    })
}

/// Steps 2 to 4: read and parse the store, add one to `key`'s counter, write it back.
fn change(store: &Path, key: &str) -> io::Result<()> {
    let mut document: Map<String, Value> = serde_json::from_slice(&fs::read(store)?)?;
    let entry = document
        .get_mut(key)
        .and_then(Value::as_object_mut)
        .ok_or_else(|| io::Error::other(format!("no entry {key}")))?;
    let count = entry.get(COUNTER).and_then(Value::as_u64).unwrap_or(0);
    entry.insert(COUNTER.into(), json!(count + 1));
    let bytes = serde_json::to_vec_pretty(&document)?;
    let mut temp_name = store.as_os_str().to_os_string();
    temp_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    let temp = PathBuf::from(temp_name);
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options
        .open(&temp)
        .and_then(|mut file| file.write_all(&bytes))
        .and_then(|()| fs::rename(&temp, store));
    let _ = fs::remove_file(&temp);
    written
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The key of session `i`.
pub fn key(i: usize) -> String {
    format!("agent:main:telegram:dm:{}", 100_000_000 + i)
}

/// The unknown field's value in session `i`.
pub fn unknown_value(i: usize) -> Value {
    json!({"nested": [i, "kept", {"deep": true}], "float": 0.1})
}

/// Writes a store of `sessions` entries of about 1.4 KB each (OpenClaw's typical
/// entry) at `store`, as OpenClaw writes it; each entry carries [`UNKNOWN`] and a crate
/// counter at zero.
pub fn seed(store: &Path, sessions: usize) {
    let document: Map<String, Value> = (0..sessions)
        .map(|i| {
            let peer = format!("telegram:{}", 100_000_000 + i);
            let id = format!("{i:08x}-034e-47d9-ac97-d383e6c022b8");
            let entry = json!({
                "sessionId": id,
                "updatedAt": 1_770_350_000_000u64 + i as u64,
                "systemSent": true,
                "abortedLastRun": false,
                "chatType": "direct",
                "channel": "telegram",
                "origin": {
                    "label": format!("User {i}"), "provider": "telegram", "surface": "telegram",
                    "chatType": "direct", "from": peer, "to": peer, "accountId": "default"
                },
                "deliveryContext": {"channel": "telegram", "to": peer, "accountId": "default"},
                "lastChannel": "telegram",
                "lastTo": peer,
                "lastAccountId": "default",
                "sessionFile": format!("/home/u/.openclaw/agents/main/sessions/{id}.jsonl"),
                "compactionCount": 0,
                "inputTokens": 1200,
                "outputTokens": 340,
                "totalTokens": 15_320,
                "contextTokens": 200_000,
                "modelProvider": "anthropic",
                "model": "claude-opus-4-6",
                "thinkingLevel": "low",
                "systemPromptReport": {
                    "source": "run",
                    "generatedAt": 1_770_350_000_000u64,
                    "systemPrompt": {"chars": 18_234, "projectContextChars": 4_120, "nonProjectContextChars": 14_114},
                    "injectedWorkspaceFiles": [
                        {"name": "AGENTS.md", "path": "/home/u/work/AGENTS.md", "rawChars": 2_311, "injectedChars": 2_311}
                    ]
                },
                UNKNOWN: unknown_value(i),
            });
            (key(i), entry)
        })
        .collect();
    fs::create_dir_all(store.parent().unwrap()).unwrap();
    fs::write(store, serde_json::to_vec_pretty(&document).unwrap()).unwrap();
}

/// What the store holds after a run: the sums of both counters, and the entries that
/// lost their unknown field (or went missing).
#[derive(Debug, PartialEq, Eq)]
pub struct Tally {
    pub entries: usize,
    pub openclaw_writes: u64,
    pub crate_writes: u64,
    pub damaged: Vec<String>,
}

/// Reads the store at `store`, seeded with `sessions` entries, and tallies it.
pub fn tally(store: &Path, sessions: usize) -> Tally {
    let document: Map<String, Value> = serde_json::from_slice(&fs::read(store).unwrap()).unwrap();
    let counter = |entry: &Value, field: &str| entry.get(field).and_then(Value::as_u64);
    let mut tally = Tally {
        entries: document.len(),
        openclaw_writes: 0,
        crate_writes: 0,
        damaged: Vec::new(),
    };
    for i in 0..sessions {
        match document.get(&key(i)) {
            Some(entry) if entry.get(UNKNOWN) == Some(&unknown_value(i)) => {
                tally.openclaw_writes += counter(entry, COUNTER).unwrap_or(0);
                tally.crate_writes += counter(entry, CRATE_COUNTER).unwrap_or(0);
            }
            _ => tally.damaged.push(key(i)),
        }
    }
    tally
}

/// The session the `n`th update of writer `writer` changes: spread over the store, so
/// both kinds of writer change the same entries.
pub fn session_of(writer: usize, n: usize, sessions: usize) -> usize {
    (n * 7_919 + writer * 131) % sessions
}

/// Latency percentiles of a sorted list of microseconds.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
