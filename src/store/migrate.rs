//! Moving sessions and transcripts between backends, resumably and verifiably.
//!
//! [`migrate`] copies every session and every transcript (live and archived) of one
//! [`Backend`] into another. It only adds: a session already present and identical is
//! skipped, so an interrupted migration is resumed by running it again; a transcript
//! present with other lines is reported as a conflict and left alone. At the end it
//! compares counts and checksums of what the source holds with the same sessions and
//! transcripts in the target.
//!
//! The one field that changes is `sessionFile`, a location: it is pointed at the
//! transcript's place in the target when the target has places (the file backend), and
//! compared by file name only.
//!
//! ```
//! use agent_sessions::store::migrate::{migrate, NoProgress};
//! use agent_sessions::store::Backend;
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
//! let from = Backend::open(&format!("json:{}", a.path().display())).await?;
//! let to = Backend::open(&format!("json:{}", b.path().display())).await?;
//! let key = SessionKey::parse("agent:main:main")?;
//! from.sessions().put(&key, SessionEntry::new("s-1", 1)).await?;
//!
//! let report = migrate(&from, &to, &NoProgress).await?;
//! assert!(report.verified());
//! assert_eq!(report.sessions_copied, 1);
//! assert!(to.sessions().get(&key).await?.is_some());
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{Backend, ListFilter, Revision, SessionStoreExt, StoredSession};
use crate::entry::SessionEntry;
use crate::error::{Error, Result};
use crate::key::{AgentId, SessionKey};
use crate::transcript::TranscriptRef;

/// How many copies run at once (a database target overlaps its round trips).
const PARALLEL_COPIES: usize = 8;

/// Told how a migration advances: a CLI draws a progress bar with it.
pub trait Progress: Send + Sync {
    /// A phase (`sessions`, `transcripts`, `verify`) starts with `total` items.
    fn begin(&self, phase: &'static str, total: u64);
    /// `done` more items of the phase are done.
    fn advance(&self, done: u64);
    /// The phase is over.
    fn finish(&self);
}

/// Progress nobody watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _: &'static str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// What one side holds: counts and order-independent checksums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Checksums {
    /// How many sessions.
    pub sessions: u64,
    /// A checksum of every session's key and entry (`sessionFile` by file name).
    pub session_checksum: u64,
    /// How many transcripts.
    pub transcripts: u64,
    /// A checksum of every transcript's agent, name and lines.
    pub transcript_checksum: u64,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationReport {
    /// Sessions written to the target.
    pub sessions_copied: u64,
    /// Sessions the target already had, identical.
    pub sessions_skipped: u64,
    /// Transcripts written to the target.
    pub transcripts_copied: u64,
    /// Transcripts the target already had, identical.
    pub transcripts_skipped: u64,
    /// Transcripts the target had with other lines: left alone, and the verification
    /// fails.
    pub transcript_conflicts: Vec<String>,
    /// What the source holds.
    pub source: Checksums,
    /// The same sessions and transcripts, read back from the target.
    pub target: Checksums,
}

impl MigrationReport {
    /// Whether the target holds everything the source holds, identically.
    pub fn verified(&self) -> bool {
        self.source == self.target && self.transcript_conflicts.is_empty()
    }
}

/// Copies every session and transcript of `from` into `to`, then verifies (see the
/// [module](self)).
pub async fn migrate(
    from: &Backend,
    to: &Backend,
    progress: &dyn Progress,
) -> Result<MigrationReport> {
    let mut report = MigrationReport::default();

    let sessions = from.sessions().list(&ListFilter::new()).await?;
    progress.begin("sessions", sessions.len() as u64);
    let copied = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    let permits = Arc::new(Semaphore::new(PARALLEL_COPIES));
    for session in sessions.iter().cloned() {
        let (to, copied) = (to.clone(), copied.clone());
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        tasks.spawn(async move {
            let _permit = permit;
            let entry = relocate(&session.key, session.entry, &to);
            let current = to.sessions().get(&session.key).await?;
            if current.is_some_and(|c| c.entry == entry) {
                return Ok::<_, Error>(());
            }
            to.sessions().put(&session.key, entry).await?;
            copied.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        while let Some(done) = tasks.try_join_next() {
            joined(done)?;
            progress.advance(1);
        }
    }
    while let Some(done) = tasks.join_next().await {
        joined(done)?;
        progress.advance(1);
    }
    progress.finish();
    report.sessions_copied = copied.load(Ordering::Relaxed);
    report.sessions_skipped = sessions.len() as u64 - report.sessions_copied;

    let names = from.transcripts().transcript_names(None).await?;
    progress.begin("transcripts", names.len() as u64);
    for (agent, name) in &names {
        let Some(lines) = from.transcripts().export_lines(agent, name).await? else {
            continue;
        };
        match to.transcripts().export_lines(agent, name).await? {
            Some(existing) if existing == lines => report.transcripts_skipped += 1,
            Some(_) => report.transcript_conflicts.push(format!("{agent}/{name}")),
            None => {
                to.transcripts().import_lines(agent, name, lines).await?;
                report.transcripts_copied += 1;
            }
        }
        progress.advance(1);
    }
    progress.finish();

    progress.begin("verify", (sessions.len() + names.len()) as u64);
    report.source = checksums(from, &sessions, &names, progress).await?;
    let in_target = read_back(to, &sessions).await?;
    report.target = checksums(to, &in_target, &names, progress).await?;
    progress.finish();
    Ok(report)
}

fn joined(done: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    match done {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(Error::Database {
            backend: "migration",
            op: "finish a copy",
            transient: true,
            source: Box::new(error),
        }),
    }
}

/// The target's copies of `sessions` (those it has).
async fn read_back(to: &Backend, sessions: &[StoredSession]) -> Result<Vec<StoredSession>> {
    let mut found = Vec::with_capacity(sessions.len());
    for session in sessions {
        if let Some(stored) = to.sessions().get(&session.key).await? {
            found.push(stored);
        }
    }
    Ok(found)
}

/// Counts and checksums of `sessions` and of the transcripts `names` in `backend`.
async fn checksums(
    backend: &Backend,
    sessions: &[StoredSession],
    names: &[(AgentId, String)],
    progress: &dyn Progress,
) -> Result<Checksums> {
    let by_key: BTreeMap<&SessionKey, &SessionEntry> =
        sessions.iter().map(|s| (&s.key, &s.entry)).collect();
    let mut session_bytes = Vec::new();
    for (key, entry) in &by_key {
        session_bytes.extend_from_slice(key.as_str().as_bytes());
        session_bytes.push(0);
        let comparable = comparable(entry);
        serde_json::to_writer(&mut session_bytes, &comparable).map_err(|source| {
            Error::Serialize {
                key: (*key).clone(),
                source,
            }
        })?;
        session_bytes.push(b'\n');
    }
    let mut transcript_bytes = Vec::new();
    let mut transcripts = 0;
    for (agent, name) in names {
        if let Some(lines) = backend.transcripts().export_lines(agent, name).await? {
            transcripts += 1;
            transcript_bytes.extend_from_slice(format!("{agent}\0{name}\0").as_bytes());
            for line in lines {
                transcript_bytes.extend_from_slice(line.as_bytes());
                transcript_bytes.push(b'\n');
            }
        }
        progress.advance(1);
    }
    progress.advance(sessions.len() as u64);
    Ok(Checksums {
        sessions: by_key.len() as u64,
        session_checksum: Revision::of_bytes(&session_bytes).as_u64(),
        transcripts,
        transcript_checksum: Revision::of_bytes(&transcript_bytes).as_u64(),
    })
}

/// `entry` with `sessionFile` reduced to its file name: what must be equal across
/// backends.
fn comparable(entry: &SessionEntry) -> SessionEntry {
    let mut entry = entry.clone();
    entry.session_file = entry.session_file.as_deref().map(file_name);
    entry
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
        .to_owned()
}

/// `entry` as the target should hold it: a `sessionFile` points into the target's
/// sessions directory when the target has one.
fn relocate(key: &SessionKey, mut entry: SessionEntry, to: &Backend) -> SessionEntry {
    let Some(file) = entry.session_file.clone() else {
        return entry;
    };
    let agent = key
        .agent_id()
        .and_then(|a| AgentId::new(a).ok())
        .unwrap_or_default();
    let probe = TranscriptRef::new(agent, entry.session_id.clone());
    if let Some(location) = to.transcripts().location(&probe) {
        entry.session_file = Some(
            Path::new(&location)
                .with_file_name(file_name(&file))
                .to_string_lossy()
                .into_owned(),
        );
    }
    entry
}
