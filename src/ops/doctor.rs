//! Checking and repairing an OpenClaw-layout state directory (documented in `ops`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::{ChatType, SessionEntry};
use crate::store::fs::{
    blocking, create_private_dir_all, describe, read_limited, write_private_atomically,
};
use crate::store::json::io::{backup_path, lock_path};
use crate::store::json::paths;
use crate::store::json::DEFAULT_MAX_FILE_BYTES;

/// What [`examine`] may change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorOptions {
    /// Fix what can be fixed without loss: restore a valid `.bak` over a corrupt store
    /// (the corrupt file is quarantined), quarantine orphaned temporary files, remove
    /// dead lock files.
    pub repair: bool,
    /// Also remove entries whose recorded transcript file is gone (they are saved to
    /// the quarantine first). Only with `repair`.
    pub prune_missing_transcripts: bool,
}

impl DoctorOptions {
    /// Report and repair.
    pub fn repair() -> Self {
        DoctorOptions {
            repair: true,
            prune_missing_transcripts: false,
        }
    }
}

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[non_exhaustive]
pub enum Finding {
    /// A store file that does not parse.
    CorruptStore {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
        /// Whether `sessions.json.bak` parses.
        backup_is_valid: bool,
    },
    /// An entry that cannot be read as a session entry (kept as written).
    InvalidEntry {
        /// The store file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A path the store reads that it cannot use: not a regular file (a FIFO, socket,
    /// device, directory or symlink), or a store larger than the crate reads whole.
    /// Reported, never repaired: look at what is there.
    UnusableFile {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// An entry the store does not serve under its key — a legacy spelling of a key
    /// (taken over by the canonical key when that session is next used), a key of
    /// another agent filed in this agent's store — or an agent directory whose name is
    /// not an agent id: kept as it is, not listed and not copied by a migration.
    /// Reported, never repaired: use the session, or rename or move it by hand.
    Unserved {
        /// The store file or directory.
        path: PathBuf,
        /// The key, exactly as written (empty for a directory).
        key: String,
        /// Why it is not served.
        problem: String,
    },
    /// A temporary file of an interrupted write.
    OrphanedTempFile {
        /// The file.
        path: PathBuf,
    },
    /// A lock file whose holder is gone: a dead process of this crate, or older than
    /// OpenClaw's 30 s stale age.
    DeadLock {
        /// The lock file.
        path: PathBuf,
    },
    /// An entry whose `sessionFile` the store would refuse (outside the agent's
    /// sessions directory, or not a path at all): reported, never repaired.
    UnusableSessionFile {
        /// The store file.
        path: PathBuf,
        /// The key, exactly as written in the file.
        key: String,
        /// The recorded file.
        session_file: String,
        /// Why the store refuses it.
        problem: String,
    },
    /// A main session that DMs from several people went into (OpenClaw's `dmScope`
    /// `main`, its fallback): each of them sees the others' messages. Reported, never
    /// repaired: set `session.dmScope` to `per-channel-peer` (the crate's
    /// [`DmScope`](crate::identity::key::DmScope) default) so that each person gets a session.
    SharedDmSession {
        /// The store file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The people who wrote into it.
        senders: Vec<String>,
    },
    /// An entry whose `sessionFile` does not exist.
    MissingTranscript {
        /// The store file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The missing file.
        session_file: String,
    },
}

/// What was done about a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repair {
    /// What was done.
    pub action: String,
    /// Where whatever was taken away now is (for restoring it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantined_to: Option<PathBuf>,
}

/// What [`examine`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// The store files looked at.
    pub stores: Vec<PathBuf>,
    /// Each finding, with its repair when one was made.
    pub findings: Vec<(Finding, Option<Repair>)>,
}

impl DoctorReport {
    /// Whether nothing was found.
    pub fn is_healthy(&self) -> bool {
        self.findings.is_empty()
    }

    /// Whether every finding was repaired.
    pub fn all_repaired(&self) -> bool {
        self.findings.iter().all(|(_, repair)| repair.is_some())
    }
}

/// Examines (and with `options.repair`, repairs) the state directory `root`.
pub async fn examine(root: &Path, options: &DoctorOptions) -> Result<DoctorReport> {
    let root = paths::state_root(root);
    let repair = options.repair;
    let options = options.clone();
    let doctor_root = root.clone();
    let (mut report, to_prune) =
        blocking(&root, move || Doctor::new(&doctor_root, options).run()).await?;
    // Pruned entries (already saved to the quarantine) leave through the store's own
    // write path — its lock, a fresh read, an atomic replace — by their exact raw key in
    // the file they were found in, and only if unchanged since.
    let store = crate::store::JsonFileStore::new(&root);
    for (path, entries) in to_prune {
        let removed = store.remove_exact(&path, &entries).await?;
        for (finding, repair) in &mut report.findings {
            if let Finding::MissingTranscript { path: at, key, .. } = finding {
                if *at == path && !removed.contains(key) {
                    // Changed or gone since it was examined: left as it is.
                    *repair = None;
                }
            }
        }
    }
    if repair {
        relocate_session_files(&store, &mut report).await?;
    }
    // What the store cannot serve, once the pruning is done.
    if report.findings.iter().all(|(f, _)| {
        !matches!(
            f,
            Finding::CorruptStore { .. } | Finding::UnusableFile { .. }
        )
    }) {
        for unreadable in crate::store::SessionStore::unreadable(&store).await? {
            let path = PathBuf::from(&unreadable.location);
            let reported = report.findings.iter().any(|(f, _)| {
                matches!(f, Finding::InvalidEntry { path: p, key, .. } if *p == path && *key == unreadable.key)
            });
            if !reported {
                let finding = Finding::Unserved {
                    path,
                    key: unreadable.key,
                    problem: unreadable.problem,
                };
                report.findings.push((finding, None));
            }
        }
    }
    Ok(report)
}

/// Repairs the entries whose `sessionFile` lies outside their sessions directory when
/// the transcript itself is inside it, under the same name — a state directory moved or
/// restored elsewhere leaves exactly that: the entry is pointed at the file inside,
/// through the store's write path, and only if it still records the old location.
async fn relocate_session_files(
    store: &crate::store::JsonFileStore,
    report: &mut DoctorReport,
) -> Result<()> {
    use crate::store::SessionStoreExt;
    for (finding, repair) in &mut report.findings {
        let Finding::UnusableSessionFile {
            path,
            key,
            session_file,
            ..
        } = finding
        else {
            continue;
        };
        let (Some(dir), Some(name)) = (path.parent(), Path::new(session_file.as_str()).file_name())
        else {
            continue;
        };
        let inside = dir.join(name);
        let is_file = fs::symlink_metadata(&inside).is_ok_and(|m| m.is_file());
        let Ok(parsed) = crate::identity::key::SessionKey::parse(key.as_str()) else {
            continue;
        };
        if !is_file || parsed.as_str() != key.as_str() {
            continue;
        }
        let (old, new) = (session_file.clone(), inside.to_string_lossy().into_owned());
        let name = name.to_string_lossy().into_owned();
        let mut moved = false;
        store
            .update(&parsed, |slot| {
                if let Some(entry) = slot.as_mut() {
                    // The transcript of this very session: named after its id.
                    let its_own =
                        !entry.session_id.is_empty() && name.starts_with(entry.session_id.as_str());
                    if entry.session_file.as_deref() == Some(old.as_str()) && its_own {
                        entry.session_file = Some(new.clone());
                        moved = true;
                    }
                }
            })
            .await?;
        if moved {
            *repair = Some(Repair {
                action: format!(
                    "sessionFile pointed at the transcript inside the sessions directory, {new}"
                ),
                quarantined_to: None,
            });
        }
    }
    Ok(())
}

struct Doctor {
    root: PathBuf,
    options: DoctorOptions,
    stamp: String,
    report: DoctorReport,
    /// Raw entries (key and text as written) to remove from each store file once the
    /// examination is over.
    to_prune: Vec<(PathBuf, Vec<(String, String)>)>,
}

impl Doctor {
    fn new(root: &Path, options: DoctorOptions) -> Self {
        Doctor {
            root: root.to_owned(),
            options,
            stamp: crate::transcript::iso_timestamp(chrono::Utc::now()).replace(':', "-"),
            report: DoctorReport::default(),
            to_prune: Vec::new(),
        }
    }

    #[allow(clippy::type_complexity)]
    fn run(mut self) -> Result<(DoctorReport, Vec<(PathBuf, Vec<(String, String)>)>)> {
        for agent in agents(&self.root)? {
            let dir = paths::sessions_dir(&self.root, &agent);
            if let Err(e) = crate::store::fs::refuse_linked_dirs(&self.root, &dir.join("-")) {
                let (path, problem) = match Error::io("examine", &dir, e) {
                    Error::NotAFile { path, found } => {
                        (path, format!("{found}: the store never reads through it"))
                    }
                    other => (dir, other.to_string()),
                };
                self.report
                    .findings
                    .push((Finding::UnusableFile { path, problem }, None));
                continue;
            }
            self.examine_agent(&agent)?;
        }
        let search_dir = Path::new(crate::store::backend::SEARCH_INDEX_FILE)
            .parent()
            .unwrap_or(Path::new("search"));
        for dir in [
            Path::new(crate::store::json::CHATTER_DIR),
            Path::new(crate::store::json::EVENTS_DIR),
            search_dir,
        ] {
            self.examine_shared_dir(&self.root.join(dir))?;
        }
        Ok((self.report, self.to_prune))
    }

    /// A directory of the state root the crate writes in (group chatter, system events,
    /// the search index): a link or a file there is reported (the crate refuses to
    /// write through it), orphaned temporary files in it are found.
    fn examine_shared_dir(&mut self, dir: &Path) -> Result<()> {
        match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("examine", dir, e)),
            Ok(metadata) if !metadata.is_dir() => {
                let problem = format!(
                    "{}: the crate never writes through it",
                    describe(metadata.file_type())
                );
                self.report.findings.push((
                    Finding::UnusableFile {
                        path: dir.to_owned(),
                        problem,
                    },
                    None,
                ));
                return Ok(());
            }
            Ok(_) => {}
        }
        for entry in fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name == "quarantine" {
                continue;
            }
            // The files the buffers read, their lock and temporary files: regular
            // files; a link or a FIFO is reported whatever its name.
            if self.usable(&path) && is_temp_name(&name) {
                self.orphaned_temp(&path)?;
            }
        }
        Ok(())
    }

    fn examine_agent(&mut self, agent: &AgentId) -> Result<()> {
        let dir = paths::sessions_dir(&self.root, agent);
        let store = paths::store_path(&self.root, agent);
        for entry in fs::read_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", &dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name == "quarantine" {
                // Where repairs go: a directory of the crate's own, never a link.
                if let Some(metadata) = fs::symlink_metadata(&path).ok().filter(|m| !m.is_dir()) {
                    let problem = format!(
                        "{} where the quarantine belongs: `doctor --repair` refuses to move anything into it",
                        describe(metadata.file_type())
                    );
                    self.report
                        .findings
                        .push((Finding::UnusableFile { path, problem }, None));
                }
                continue;
            }
            if path == store || path == lock_path(&store) {
                continue;
            }
            // Transcripts, the backup, temporary files, anything the store may open:
            // regular files; a link or a FIFO is reported whatever its name.
            if self.usable(&path) && is_temp_name(&name) {
                self.orphaned_temp(&path)?;
            }
        }
        let lock = lock_path(&store);
        if self.usable(&lock) {
            self.lock_file(&lock)?;
        }
        if fs::symlink_metadata(&store).is_ok() {
            self.report.stores.push(store.clone());
            if self.usable(&store) {
                self.store_file(agent, &store)?;
            }
        }
        Ok(())
    }

    /// Whether `path` is missing or a regular file; anything else is reported.
    fn usable(&mut self, path: &Path) -> bool {
        match fs::symlink_metadata(path) {
            Ok(metadata) if !metadata.is_file() => {
                self.report.findings.push((
                    Finding::UnusableFile {
                        path: path.to_owned(),
                        problem: format!("{}, not a regular file", describe(metadata.file_type())),
                    },
                    None,
                ));
                false
            }
            _ => true,
        }
    }

    fn quarantine(&self, dir: &Path) -> Result<PathBuf> {
        let quarantine = dir.join("quarantine").join(&self.stamp);
        // A `quarantine` planted as a link would carry what doctor removes elsewhere.
        crate::store::fs::refuse_linked_dirs(&self.root, &quarantine.join("-"))
            .map_err(|e| Error::io("quarantine", &quarantine, e))?;
        create_private_dir_all(&quarantine)
            .map_err(|e| Error::io("create directory", &quarantine, e))?;
        Ok(quarantine)
    }

    /// Moves `path` into the quarantine beside it.
    fn move_to_quarantine(&self, path: &Path) -> Result<PathBuf> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let target = self
            .quarantine(dir)?
            .join(path.file_name().unwrap_or_default());
        fs::rename(path, &target).map_err(|e| Error::io("quarantine", path, e))?;
        // Kept owner-only whatever mode it had (a rename keeps the mode).
        if fs::symlink_metadata(&target).is_ok_and(|m| m.is_file()) {
            set_owner_only(&target).map_err(|e| Error::io("protect", &target, e))?;
        }
        Ok(target)
    }

    fn orphaned_temp(&mut self, path: &Path) -> Result<()> {
        // A writer's temp file lives for milliseconds; anything older is an orphan.
        if age(path) < Duration::from_secs(60) {
            return Ok(());
        }
        let finding = Finding::OrphanedTempFile {
            path: path.to_owned(),
        };
        let repair = if self.options.repair {
            let target = self.move_to_quarantine(path)?;
            Some(Repair {
                action: "moved to the quarantine".into(),
                quarantined_to: Some(target),
            })
        } else {
            None
        };
        self.report.findings.push((finding, repair));
        Ok(())
    }

    fn lock_file(&mut self, path: &Path) -> Result<()> {
        if !path.exists() {
            return Ok(());
        }
        if !crate::store::json::lock::is_abandoned(
            path,
            crate::store::json::DEFAULT_LOCK_STALE_AFTER,
        ) {
            return Ok(());
        }
        let finding = Finding::DeadLock {
            path: path.to_owned(),
        };
        let repair = if self.options.repair {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("remove dead lock", path, e)),
            }
            Some(Repair {
                action: "removed (a lock file holds no data)".into(),
                quarantined_to: None,
            })
        } else {
            None
        };
        self.report.findings.push((finding, repair));
        Ok(())
    }

    fn store_file(&mut self, agent: &AgentId, store: &Path) -> Result<()> {
        let bytes = match read_limited(store, DEFAULT_MAX_FILE_BYTES) {
            Ok(Some((bytes, _))) => bytes,
            Ok(None) => return Ok(()),
            Err(e) => match Error::io("read", store, e) {
                error @ (Error::FileTooLarge { .. } | Error::NotAFile { .. }) => {
                    self.report.findings.push((
                        Finding::UnusableFile {
                            path: store.to_owned(),
                            problem: error.to_string(),
                        },
                        None,
                    ));
                    return Ok(());
                }
                error => return Err(error),
            },
        };
        let document = match crate::store::json::document::Document::from_bytes(bytes) {
            Ok(document) => document,
            Err(problem) => return self.corrupt_store(store, problem.to_string()),
        };
        let mut missing = Vec::new();
        for (key, raw) in document.iter() {
            let entry = crate::store::json::document::parse_entry(raw);
            if let Some(entry) = entry.as_ref().ok().filter(|e| shared_dm_session(key, e)) {
                self.report.findings.push((
                    Finding::SharedDmSession {
                        path: store.to_owned(),
                        key: key.to_owned(),
                        senders: entry.participants.clone().unwrap_or_default(),
                    },
                    None,
                ));
            }
            match entry {
                Ok(entry) => match self.transcript_of(agent, &entry) {
                    Transcript::Present => {}
                    Transcript::Missing(file) => missing.push((key.to_owned(), file)),
                    Transcript::Unusable(file, problem) => self.report.findings.push((
                        Finding::UnusableSessionFile {
                            path: store.to_owned(),
                            key: key.to_owned(),
                            session_file: file,
                            problem,
                        },
                        None,
                    )),
                },
                Err(error) => self.report.findings.push((
                    Finding::InvalidEntry {
                        path: store.to_owned(),
                        key: key.to_owned(),
                        problem: error.to_string(),
                    },
                    None,
                )),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let prune = self.options.repair && self.options.prune_missing_transcripts;
        let saved = if prune {
            Some(self.prune(store, &document, &missing)?)
        } else {
            None
        };
        for (key, session_file) in missing {
            let repair = saved.as_ref().map(|saved| Repair {
                action: "entry removed from the store".into(),
                quarantined_to: Some(saved.clone()),
            });
            self.report.findings.push((
                Finding::MissingTranscript {
                    path: store.to_owned(),
                    key,
                    session_file,
                },
                repair,
            ));
        }
        Ok(())
    }

    /// Saves the entries to prune — each exactly as written — into the quarantine, and
    /// schedules the removal of those exact entries from `store`.
    fn prune(
        &mut self,
        store: &Path,
        document: &crate::store::json::document::Document,
        missing: &[(String, String)],
    ) -> Result<PathBuf> {
        let dir = store.parent().unwrap_or(Path::new("."));
        let saved = self.quarantine(dir)?.join("pruned-sessions.json");
        let mut entries = Vec::new();
        let mut pruned = crate::store::json::document::Document::default();
        for (key, _) in missing {
            if let Some(raw) = document.get(key) {
                entries.push((key.clone(), raw.to_owned()));
                pruned.insert_raw(key, raw);
            }
        }
        write_private_atomically(&saved, &pruned.to_bytes())?;
        self.to_prune.push((store.to_owned(), entries));
        Ok(saved)
    }

    /// Where `entry`'s transcript is, judged as the transcript store judges it.
    fn transcript_of(&self, agent: &AgentId, entry: &SessionEntry) -> Transcript {
        let Some(file) = entry.session_file.as_deref().map(str::trim) else {
            return Transcript::Present;
        };
        if file.is_empty() {
            return Transcript::Present;
        }
        match paths::checked_session_file(&self.root, agent, file) {
            Ok(path) => match fs::symlink_metadata(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Transcript::Missing(file.to_owned())
                }
                Ok(metadata) if !metadata.is_file() => Transcript::Unusable(
                    file.to_owned(),
                    format!("{}, not a regular file", describe(metadata.file_type())),
                ),
                // Present, or not provably gone (permissions): never pruned.
                _ => Transcript::Present,
            },
            Err(error) => Transcript::Unusable(file.to_owned(), error.to_string()),
        }
    }

    fn corrupt_store(&mut self, store: &Path, problem: String) -> Result<()> {
        let backup = backup_path(store);
        let valid_backup = read_limited(&backup, DEFAULT_MAX_FILE_BYTES)
            .ok()
            .flatten()
            .map(|(bytes, _)| bytes)
            .filter(|bytes| crate::store::json::document::Document::parse(bytes).is_ok());
        let backup_is_valid = valid_backup.is_some();
        let finding = Finding::CorruptStore {
            path: store.to_owned(),
            problem,
            backup_is_valid,
        };
        let repair = if let (true, Some(bytes)) = (self.options.repair, valid_backup) {
            let target = self.move_to_quarantine(store)?;
            write_private_atomically(store, &bytes)?;
            Some(Repair {
                action: "restored sessions.json.bak; the corrupt file is in the quarantine".into(),
                quarantined_to: Some(target),
            })
        } else {
            None
        };
        self.report.findings.push((finding, repair));
        Ok(())
    }
}

fn set_owner_only(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// What became of an entry's recorded transcript.
enum Transcript {
    /// None recorded, or the file is there (or not provably gone).
    Present,
    /// The recorded file does not exist.
    Missing(String),
    /// The store would refuse the recorded file; why.
    Unusable(String, String),
}

/// Whether `name` is a temporary file of an atomic write: the store's
/// (`sessions.json.<…>.tmp`) or any other file's (`.tmp<random>`, beside the closed
/// sessions, group chatter, system events, the search index).
/// Whether `key` names a main session that more than one person sent DMs into.
fn shared_dm_session(key: &str, entry: &SessionEntry) -> bool {
    let main_session = SessionKey::parse(key)
        .ok()
        .and_then(|key| key.rest().map(|rest| !rest.contains(':')))
        .unwrap_or(false);
    let direct = matches!(entry.chat_type, None | Some(ChatType::Direct));
    main_session && direct && entry.participants.as_ref().is_some_and(|p| p.len() > 1)
}

fn is_temp_name(name: &str) -> bool {
    (name.starts_with("sessions.json.") && name.ends_with(".tmp")) || name.starts_with(".tmp")
}

fn age(path: &Path) -> Duration {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|modified| SystemTime::now().duration_since(modified).ok())
        .unwrap_or_default()
}

/// Agents with a sessions directory.
fn agents(root: &Path) -> Result<Vec<AgentId>> {
    let dir = root.join("agents");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut agents: Vec<AgentId> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| AgentId::new(entry.file_name().to_str()?).ok())
        .filter(|agent| paths::sessions_dir(root, agent).is_dir())
        .collect();
    agents.sort();
    Ok(agents)
}
