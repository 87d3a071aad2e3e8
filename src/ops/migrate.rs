//! Moving sessions and transcripts between backends (documented in `ops`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionEntry;
use crate::store::{Backend, ListFilter, Revision, StoredSession};
use crate::transcript::TranscriptRef;

/// How many copies run at once (a database target overlaps its round trips).
const PARALLEL_COPIES: usize = 8;

/// Told how a migration advances: a CLI draws a progress bar with it.
pub trait MigrationProgress: Send + Sync {
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

impl MigrationProgress for NoProgress {
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
    /// How many closed sessions (replaced under their keys).
    pub closed_sessions: u64,
    /// A checksum of every closed session's key and entry.
    pub closed_session_checksum: u64,
    /// How many groups with pending chatter (entries, claims or remembered message ids).
    pub chatter_groups: u64,
    /// A checksum of every group's key and chatter.
    pub chatter_checksum: u64,
    /// How many sessions with queued system events.
    pub system_event_queues: u64,
    /// A checksum of every session's key and queued events.
    pub system_event_checksum: u64,
}

impl Checksums {
    /// The kinds of data whose count or checksum differs between `self` and `other`:
    /// `sessions`, `transcripts`, `closed sessions`, `group chatter`, `system events`.
    pub fn differing(&self, other: &Checksums) -> Vec<&'static str> {
        [
            (
                "sessions",
                (self.sessions, self.session_checksum),
                (other.sessions, other.session_checksum),
            ),
            (
                "transcripts",
                (self.transcripts, self.transcript_checksum),
                (other.transcripts, other.transcript_checksum),
            ),
            (
                "closed sessions",
                (self.closed_sessions, self.closed_session_checksum),
                (other.closed_sessions, other.closed_session_checksum),
            ),
            (
                "group chatter",
                (self.chatter_groups, self.chatter_checksum),
                (other.chatter_groups, other.chatter_checksum),
            ),
            (
                "system events",
                (self.system_event_queues, self.system_event_checksum),
                (other.system_event_queues, other.system_event_checksum),
            ),
        ]
        .into_iter()
        .filter(|(_, mine, theirs)| mine != theirs)
        .map(|(kind, _, _)| kind)
        .collect()
    }
}

/// How [`migrate_with`] treats what the target already has.
///
/// ```
/// use agent_sessions::ops::MigrateOptions;
///
/// let options = MigrateOptions::default();
/// assert!(!options.overwrite_conflicts); // the target's own entries are kept
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MigrateOptions {
    /// Replace a target session whose entry differs from the source's with the
    /// source's (the target's entry is lost). Off by default: conflicts are reported
    /// and left alone.
    pub overwrite_conflicts: bool,
}

impl MigrateOptions {
    /// Options that replace conflicting target sessions with the source's.
    pub fn overwriting_conflicts() -> Self {
        MigrateOptions {
            overwrite_conflicts: true,
        }
    }
}

/// A session present in both stores with different entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionConflict {
    /// The session key.
    pub key: SessionKey,
    /// The source entry's `updatedAt` (ms since the Unix epoch).
    pub source_updated_at: u64,
    /// The target entry's `updatedAt`.
    pub target_updated_at: u64,
    /// Whether the target's entry was replaced ([`MigrateOptions::overwrite_conflicts`]).
    pub overwritten: bool,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationReport {
    /// Sessions written to the target.
    pub sessions_copied: u64,
    /// Sessions the target already had, identical.
    pub sessions_skipped: u64,
    /// Sessions the target had with another entry: left alone (unless overwritten), and
    /// the verification fails.
    pub session_conflicts: Vec<SessionConflict>,
    /// Sessions that changed in the source (added, updated or removed) while the
    /// migration ran: the copy may hold an older version, and the verification fails.
    pub source_changed: Vec<SessionKey>,
    /// What the source holds but cannot serve, so was not copied (entries that do not
    /// decode, legacy or foreign keys, unreadable agent directories — see
    /// [`SessionStore::unreadable`](crate::SessionStore::unreadable)): the verification
    /// fails until they are repaired or removed by hand.
    pub unreadable: Vec<crate::store::UnreadableEntry>,
    /// Transcripts written to the target.
    pub transcripts_copied: u64,
    /// Transcripts the target already had, identical.
    pub transcripts_skipped: u64,
    /// Transcripts the target had with other lines: left alone, and the verification
    /// fails.
    pub transcript_conflicts: Vec<String>,
    /// Closed sessions written to the target.
    pub closed_sessions_copied: u64,
    /// Closed sessions the target did not keep: more of one key than it keeps
    /// ([`CLOSED_SESSIONS_PER_KEY`](crate::store::CLOSED_SESSIONS_PER_KEY), the oldest
    /// go first). The verification fails.
    pub closed_sessions_dropped: u64,
    /// Groups of pending chatter written to the target.
    pub chatter_groups_copied: u64,
    /// Groups the target already had chatter of, other than the source's: left alone,
    /// and the verification fails.
    pub chatter_conflicts: Vec<String>,
    /// Sessions whose queued system events were written to the target.
    pub system_event_queues_copied: u64,
    /// Sessions the target already had other system events queued for: left alone, and
    /// the verification fails.
    pub system_event_conflicts: Vec<SessionKey>,
    /// What the source holds.
    pub source: Checksums,
    /// The same sessions and transcripts, read back from the target.
    pub target: Checksums,
}

impl MigrationReport {
    /// Whether the target holds everything the source holds, identically, with no
    /// conflict and no change in the source during the copy.
    pub fn verified(&self) -> bool {
        self.source == self.target
            && self.transcript_conflicts.is_empty()
            && self.chatter_conflicts.is_empty()
            && self.system_event_conflicts.is_empty()
            && self.session_conflicts.is_empty()
            && self.source_changed.is_empty()
            && self.unreadable.is_empty()
    }
}

/// Copies everything `from` holds into `to` — sessions, closed sessions, transcripts
/// (archives too), pending group chatter with its claims and remembered message ids,
/// queued system events — leaving conflicts alone, then verifies each kind (see
/// [`ops`](crate::ops)). The search index is not copied: the target builds its own from
/// the transcripts.
pub async fn migrate(
    from: &Backend,
    to: &Backend,
    progress: &dyn MigrationProgress,
) -> Result<MigrationReport> {
    migrate_with(from, to, &MigrateOptions::default(), progress).await
}

/// What copying one session did.
enum Copied {
    Written,
    Skipped,
    Conflict(SessionConflict),
    /// The target refuses the entry (a session id that cannot name a file, say).
    Refused(crate::store::UnreadableEntry),
}

/// [`migrate`] with options.
pub async fn migrate_with(
    from: &Backend,
    to: &Backend,
    options: &MigrateOptions,
    progress: &dyn MigrationProgress,
) -> Result<MigrationReport> {
    migrate_reading(from, to, options, progress, std::convert::identity).await
}

/// [`migrate_with`] into a target that reads a transcript line back as `read_back`
/// makes of the source's (a sealing target re-encodes the lines it seals).
pub(crate) async fn migrate_reading(
    from: &Backend,
    to: &Backend,
    options: &MigrateOptions,
    progress: &dyn MigrationProgress,
    read_back: fn(String) -> String,
) -> Result<MigrationReport> {
    let mut report = MigrationReport {
        unreadable: from.sessions().unreadable().await?,
        ..MigrationReport::default()
    };

    let sessions = from.sessions().list(&ListFilter::all()).await?;
    progress.begin("sessions", sessions.len() as u64);
    let mut tasks = JoinSet::new();
    let permits = Arc::new(Semaphore::new(PARALLEL_COPIES));
    let mut outcomes = Vec::with_capacity(sessions.len());
    for session in sessions.iter().cloned() {
        let (to, overwrite) = (to.clone(), options.overwrite_conflicts);
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        tasks.spawn(async move {
            let _permit = permit;
            let entry = relocate(&session.key, session.entry, &to);
            let key = session.key.to_string();
            match copy_session(&to, session.key, entry, overwrite).await {
                Err(error @ (Error::InvalidId { .. } | Error::InvalidKey { .. })) => {
                    Ok(Copied::Refused(crate::store::UnreadableEntry {
                        location: to.url().to_string(),
                        key,
                        problem: error.to_string(),
                    }))
                }
                copied => copied,
            }
        });
        while let Some(done) = tasks.try_join_next() {
            outcomes.push(joined(done)?);
            progress.advance(1);
        }
    }
    while let Some(done) = tasks.join_next().await {
        outcomes.push(joined(done)?);
        progress.advance(1);
    }
    progress.finish();
    for outcome in outcomes {
        match outcome {
            Copied::Written => report.sessions_copied += 1,
            Copied::Skipped => report.sessions_skipped += 1,
            Copied::Refused(refused) => report.unreadable.push(refused),
            Copied::Conflict(conflict) => {
                if conflict.overwritten {
                    report.sessions_copied += 1;
                }
                report.session_conflicts.push(conflict);
            }
        }
    }
    report.session_conflicts.sort_by(|a, b| a.key.cmp(&b.key));

    // Closed sessions, oldest first, as their keys replaced them.
    let closed = closed_sessions(from, &sessions).await?;
    if !closed.is_empty() {
        progress.begin("closed sessions", closed.len() as u64);
        let closed: Vec<StoredSession> = closed
            .into_iter()
            .map(|s| StoredSession {
                entry: relocate(&s.key, s.entry, to),
                ..s
            })
            .collect();
        match to.sessions().as_erase() {
            Some(erase) => {
                let held = |sessions: Vec<StoredSession>| -> BTreeSet<String> {
                    sessions.into_iter().map(|s| s.entry.session_id).collect()
                };
                let before = held(closed_sessions(to, &[]).await?);
                erase.add_closed(&closed).await?;
                let after = held(closed_sessions(to, &[]).await?);
                for session in &closed {
                    let id = &session.entry.session_id;
                    if !after.contains(id) {
                        report.closed_sessions_dropped += 1;
                    } else if !before.contains(id) {
                        report.closed_sessions_copied += 1;
                    }
                }
            }
            None => report.unreadable.push(crate::store::UnreadableEntry {
                location: to.url().to_string(),
                key: String::new(),
                problem: "the target keeps no closed sessions; they were not copied".into(),
            }),
        }
        progress.advance(closed.len() as u64);
        progress.finish();
    }

    let mut names = from.transcripts().transcript_names(None).await?;
    progress.begin("transcripts", names.len() as u64);
    let mut unreadable_names = Vec::new();
    for (agent, name) in &names {
        let lines = match from.transcripts().export_lines(agent, name).await {
            Ok(Some(lines)) => lines,
            Ok(None) => continue,
            // A special file, a link, bytes that are not text: named, not copied, and
            // the migration goes on with the rest (and does not verify).
            Err(
                error @ (Error::NotAFile { .. } | Error::FileTooLarge { .. } | Error::Io { .. }),
            ) => {
                report.unreadable.push(crate::store::UnreadableEntry {
                    location: format!("{agent}/{name}"),
                    key: String::new(),
                    problem: error.to_string(),
                });
                unreadable_names.push((agent.clone(), name.clone()));
                progress.advance(1);
                continue;
            }
            Err(error) => return Err(error),
        };
        match to.transcripts().export_lines(agent, name).await? {
            Some(existing)
                if existing.iter().eq(&lines
                    .iter()
                    .cloned()
                    .map(read_back)
                    .collect::<Vec<_>>()) =>
            {
                report.transcripts_skipped += 1
            }
            Some(_) => report.transcript_conflicts.push(format!("{agent}/{name}")),
            None => {
                to.transcripts().import_lines(agent, name, lines).await?;
                report.transcripts_copied += 1;
            }
        }
        progress.advance(1);
    }
    progress.finish();
    names.retain(|name| !unreadable_names.contains(name));

    // What waits for the next turns: group chatter and system events.
    let chatter = exported(
        &mut report,
        from.chatter().export_groups().await,
        "group chatter",
    );
    progress.begin("group chatter", chatter.len() as u64);
    for (key, group) in &chatter {
        if to.chatter().import_group(key, group.clone()).await? {
            report.chatter_groups_copied += 1;
        } else if !to
            .chatter()
            .export_groups()
            .await?
            .iter()
            .any(|(k, g)| k == key && g == group)
        {
            report.chatter_conflicts.push(key.clone());
        }
        progress.advance(1);
    }
    progress.finish();
    let events = exported(
        &mut report,
        from.system_events().export_queues().await,
        "system events",
    );
    progress.begin("system events", events.len() as u64);
    for (key, queue) in &events {
        if to.system_events().import_queue(key, queue.clone()).await? {
            report.system_event_queues_copied += 1;
        } else if !to
            .system_events()
            .export_queues()
            .await?
            .iter()
            .any(|(k, q)| k == key && q == queue)
        {
            report.system_event_conflicts.push(key.clone());
        }
        progress.advance(1);
    }
    progress.finish();

    // Verify against the source as it is now: what changed during the copy shows.
    let now = from.sessions().list(&ListFilter::all()).await?;
    report.source_changed = changed_keys(&sessions, &now);
    progress.begin("verify", (now.len() + names.len()) as u64);
    report.source = checksums(from, &now, &names, progress, read_back).await?;
    let in_target = read_back_sessions(to, &now).await?;
    report.target = checksums(to, &in_target, &names, progress, std::convert::identity).await?;
    let closed_now = closed_sessions(from, &now).await?;
    let ids: BTreeSet<&str> = closed_now
        .iter()
        .map(|s| s.entry.session_id.as_str())
        .collect();
    let closed_there: Vec<StoredSession> = closed_sessions(to, &in_target)
        .await?
        .into_iter()
        .filter(|s| ids.contains(s.entry.session_id.as_str()))
        .collect();
    (
        report.source.closed_sessions,
        report.source.closed_session_checksum,
    ) = closed_checksum(&closed_now)?;
    (
        report.target.closed_sessions,
        report.target.closed_session_checksum,
    ) = closed_checksum(&closed_there)?;
    let keys: BTreeSet<&String> = chatter.iter().map(|(k, _)| k).collect();
    let chatter_there = kept(to.chatter().export_groups().await, |(k, _)| {
        keys.contains(k)
    });
    (report.source.chatter_groups, report.source.chatter_checksum) = sum_of(&chatter)?;
    (report.target.chatter_groups, report.target.chatter_checksum) = sum_of(&chatter_there)?;
    let keys: BTreeSet<&SessionKey> = events.iter().map(|(k, _)| k).collect();
    let events_there = kept(to.system_events().export_queues().await, |(k, _)| {
        keys.contains(k)
    });
    let texts = |queues: &[(SessionKey, Vec<crate::inbound::SystemEvent>)]| {
        queues
            .iter()
            .map(|(k, q)| {
                let q: Vec<(String, i64)> = q
                    .iter()
                    .map(|e| (e.text.clone(), e.at.timestamp_micros()))
                    .collect();
                (k.to_string(), q)
            })
            .collect::<Vec<_>>()
    };
    (
        report.source.system_event_queues,
        report.source.system_event_checksum,
    ) = sum_of(&texts(&events))?;
    (
        report.target.system_event_queues,
        report.target.system_event_checksum,
    ) = sum_of(&texts(&events_there))?;
    progress.finish();
    Ok(report)
}

/// What an export gave; an export that failed is reported as unreadable (nothing of
/// that kind copied, and the verification fails).
fn exported<T>(report: &mut MigrationReport, export: Result<Vec<T>>, kind: &str) -> Vec<T> {
    match export {
        Ok(items) => items,
        Err(error) => {
            report.unreadable.push(crate::store::UnreadableEntry {
                location: kind.to_owned(),
                key: String::new(),
                problem: format!("not copied: {error}"),
            });
            Vec::new()
        }
    }
}

/// The items of an export that `keep` picks (none when the export failed: the
/// verification then shows the difference).
fn kept<T>(export: Result<Vec<T>>, keep: impl Fn(&T) -> bool) -> Vec<T> {
    export
        .map(|items| items.into_iter().filter(|item| keep(item)).collect())
        .unwrap_or_default()
}

/// How many `items`, and an order-independent checksum of them.
fn sum_of<T: Serialize>(items: &[(impl Serialize + Ord, T)]) -> Result<(u64, u64)> {
    let mut lines: Vec<Vec<u8>> = items
        .iter()
        .map(|item| serde_json::to_vec(item).map_err(|e| Error::encode("a copy's checksum", e)))
        .collect::<Result<_>>()?;
    lines.sort();
    Ok((
        items.len() as u64,
        Revision::of_bytes(&lines.concat()).as_u64(),
    ))
}

/// The closed sessions of `store` (replaced under their keys, not one of `current`),
/// oldest first.
async fn closed_sessions(store: &Backend, current: &[StoredSession]) -> Result<Vec<StoredSession>> {
    let current: BTreeSet<&str> = current
        .iter()
        .map(|s| s.entry.session_id.as_str())
        .collect();
    let filter = ListFilter {
        status: crate::store::StatusFilter::Any,
        ..ListFilter::default()
    };
    let mut closed: Vec<StoredSession> = store
        .sessions()
        .list(&filter)
        .await?
        .into_iter()
        .filter(|s| !current.contains(s.entry.session_id.as_str()))
        .collect();
    closed.sort_by_key(|s| {
        (
            s.entry.closed_at.unwrap_or(s.entry.updated_at),
            s.entry.updated_at,
        )
    });
    Ok(closed)
}

/// How many closed sessions, and a checksum of their keys and entries as every store
/// saves them.
fn closed_checksum(closed: &[StoredSession]) -> Result<(u64, u64)> {
    let items: Vec<(String, SessionEntry)> = closed
        .iter()
        .map(|s| (s.key.to_string(), comparable(&s.entry)))
        .collect();
    sum_of(&items)
}

/// Writes `entry` under `key` in `to` if the target has nothing there, in one atomic
/// step; an identical entry is skipped and another one is a conflict.
async fn copy_session(
    to: &Backend,
    key: SessionKey,
    entry: SessionEntry,
    overwrite: bool,
) -> Result<Copied> {
    let mut outcome = Copied::Skipped;
    to.sessions()
        .apply(&key, &mut |slot, _| {
            outcome = match slot {
                None => {
                    *slot = Some(entry.clone());
                    Copied::Written
                }
                Some(current) if comparable(current) == comparable(&entry) => Copied::Skipped,
                Some(current) => {
                    let conflict = SessionConflict {
                        key: key.clone(),
                        source_updated_at: entry.updated_at,
                        target_updated_at: current.updated_at,
                        overwritten: overwrite,
                    };
                    if overwrite {
                        *slot = Some(entry.clone());
                    }
                    Copied::Conflict(conflict)
                }
            };
            Ok(())
        })
        .await?;
    Ok(outcome)
}

/// Keys whose entry differs between two listings of one store.
fn changed_keys(before: &[StoredSession], after: &[StoredSession]) -> Vec<SessionKey> {
    let before: BTreeMap<&SessionKey, &SessionEntry> =
        before.iter().map(|s| (&s.key, &s.entry)).collect();
    let after: BTreeMap<&SessionKey, &SessionEntry> =
        after.iter().map(|s| (&s.key, &s.entry)).collect();
    let changed: BTreeSet<&SessionKey> = before
        .keys()
        .chain(after.keys())
        .filter(|key| before.get(*key) != after.get(*key))
        .copied()
        .collect();
    changed.into_iter().cloned().collect()
}

fn joined<T>(done: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
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
async fn read_back_sessions(
    to: &Backend,
    sessions: &[StoredSession],
) -> Result<Vec<StoredSession>> {
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
    progress: &dyn MigrationProgress,
    read_as: fn(String) -> String,
) -> Result<Checksums> {
    let by_key: BTreeMap<&SessionKey, &SessionEntry> =
        sessions.iter().map(|s| (&s.key, &s.entry)).collect();
    let mut session_bytes = Vec::new();
    for (key, entry) in &by_key {
        session_bytes.extend_from_slice(key.as_str().as_bytes());
        session_bytes.push(0);
        let comparable = comparable(entry);
        serde_json::to_writer(&mut session_bytes, &comparable)
            .map_err(|source| Error::encode(format!("session entry {key}"), source))?;
        session_bytes.push(b'\n');
    }
    let mut transcript_bytes = Vec::new();
    let mut transcripts = 0;
    for (agent, name) in names {
        if let Some(lines) = backend.transcripts().export_lines(agent, name).await? {
            transcripts += 1;
            transcript_bytes.extend_from_slice(format!("{agent}\0{name}\0").as_bytes());
            for line in lines.into_iter().map(read_as) {
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
        ..Checksums::default()
    })
}

/// `entry` as every store saves it (delivery fields normalised, as OpenClaw does on
/// save), with `sessionFile` reduced to its file name: what must be equal across
/// backends. An entry OpenClaw wrote before it normalised delivery fields is the same
/// session as the normalised copy a target store holds.
fn comparable(entry: &SessionEntry) -> SessionEntry {
    let mut entry = entry.clone();
    crate::reply::delivery::normalize_delivery_fields(&mut entry);
    // Whether a store seals its entries is the store's, not the session's.
    entry.extra.remove(crate::privacy::SEALED_ENTRY);
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
