//! Transcripts as OpenClaw's JSONL files.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::identity::key::AgentId;
use crate::store::fs::{
    blocking, create_private_dir_all, identify, identify_file, open_checked, open_no_follow,
    process_mutex, FileId,
};
use crate::store::json::hints;
use crate::store::json::io::create_private;
use crate::store::json::paths;
use crate::store::Durability;
use crate::transcript::lines::{
    archived_name, log_record, newest_archive, read_line, session_id_of_name,
    validate_transcript_name, Stamp,
};
use crate::transcript::{
    ArchiveReason, LogQuery, LogRecord, Offset, ReadIssue, SessionEvent, SessionHeader,
    TranscriptEntry, TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore,
    TranscriptSubscription, TranscriptUpdate, UpdateHub,
};

/// Transcripts in OpenClaw's files, beside its `sessions.json`:
/// `<root>/agents/<agentId>/sessions/<sessionId>.jsonl` (or `-topic-<topicId>.jsonl`),
/// mode 0600.
///
/// Appends are whole lines written with one `write` on a file opened `O_APPEND`, queued
/// per file within the process and under an exclusive OS lock on the file across
/// processes, and fsynced per [`Durability`] (the default,
/// [`Durability::SyncFileAndDir`], also fsyncs the directory when a transcript is
/// created). A crash mid-append leaves at most a torn last line, which reads skip and
/// report and the next append steps over.
///
/// A process keeps the last 64 transcripts it appended to open, and appends to one
/// only while its path still names it (checked under the lock), so an archive or a
/// removal by any process sends the next append to a new file at the path. Unsynced
/// appends to a kept file are done on the calling task's thread (a few short system
/// calls); everything else goes through Tokio's blocking pool.
#[derive(Debug, Clone)]
pub struct FileTranscriptStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    durability: Durability,
    hub: UpdateHub,
    /// Message-log records already extracted from each file, and how far.
    logs: Mutex<HashMap<PathBuf, ExtractedLog>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Tail {
    file: FileId,
    len: u64,
    lines: usize,
    ends_with_newline: bool,
    leaf: Option<String>,
}

#[derive(Debug, Clone)]
struct ExtractedLog {
    len: u64,
    modified: Option<SystemTime>,
    next: Offset,
    session_id: Option<String>,
    records: Vec<LogRecord>,
}

impl FileTranscriptStore {
    /// Transcripts under the state directory `root` (a leading `~` is expanded), with
    /// the default durability.
    pub fn new(root: impl AsRef<Path>) -> Self {
        FileTranscriptStore::with_durability(root, Durability::default())
    }

    /// Transcripts under `root`, fsynced per `durability`.
    pub fn with_durability(root: impl AsRef<Path>, durability: Durability) -> Self {
        FileTranscriptStore {
            inner: Arc::new(Inner {
                root: paths::state_root(root.as_ref()),
                durability,
                hub: UpdateHub::default(),
                logs: Mutex::default(),
            }),
        }
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// How many live subscriptions this store has.
    pub fn subscriber_count(&self) -> usize {
        self.inner.hub.subscribers()
    }

    /// The file of `transcript`: its `session_file` (checked to be inside the agent's
    /// sessions directory), else `<sessionId>.jsonl` or `<sessionId>-topic-<topic>.jsonl`
    /// (session id checked, topic percent-encoded).
    pub fn path(&self, transcript: &TranscriptRef) -> Result<PathBuf> {
        let path = self.named_path(transcript)?;
        self.check_path(transcript, &path)?;
        Ok(path)
    }

    /// The file of `transcript` as named, checked without reading the file system: the
    /// session id, or the session file as written.
    fn named_path(&self, transcript: &TranscriptRef) -> Result<PathBuf> {
        match session_file(transcript) {
            Some(file) => paths::lexical_session_file(&self.inner.root, &transcript.agent, file),
            None => paths::transcript_path(
                &self.inner.root,
                &transcript.agent,
                &transcript.session_id,
                transcript.topic.as_deref(),
            ),
        }
    }

    /// The checks of [`path`](Self::path) that read the file system: a session file
    /// resolves (following links) inside the sessions directory, and no directory of the
    /// tree on the way is a link.
    fn check_path(&self, transcript: &TranscriptRef, path: &Path) -> Result<()> {
        if let Some(file) = session_file(transcript) {
            paths::checked_session_file(&self.inner.root, &transcript.agent, file)?;
        }
        crate::store::fs::refuse_linked_dirs(&self.inner.root, path)
            .map_err(|e| Error::io("open", path, e))
    }
}

/// The transcript's explicit session file, if it names one.
fn session_file(transcript: &TranscriptRef) -> Option<&str> {
    transcript
        .session_file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty())
}

/// How many transcripts a process keeps open for its next appends.
const KEPT_FILES: usize = 64;

/// What this process knows of the transcripts it appends to, by path, shared by every
/// store of the process (appends to one path are queued process-wide, so this stays
/// exact). An append takes its path's knowledge out and puts it back when done.
///
/// - Each transcript's end — which file, its length, line count, whether it ends with a
///   newline, and the id of its last entry — trusted only while the file at the path
///   is the same one (device and inode, where the platform tells them) of that length.
/// - Up to [`KEPT_FILES`] transcripts kept open, the least recently used closed beyond
///   that. A kept file is used only while the path still names it (device and inode,
///   read under the OS lock), so a transcript archived, removed or replaced by any
///   process is never appended to.
#[derive(Debug, Default)]
struct Known {
    // By the path's bytes, which hash faster than a `Path`'s components.
    open: HashMap<OsString, Open>,
    /// The ends of transcripts not kept open.
    tails: HashMap<OsString, Tail>,
    clock: u64,
}

/// A transcript kept open, which file it is, its end, and when it was last used.
#[derive(Debug)]
struct Open {
    file: File,
    id: (u64, u64),
    tail: Option<Tail>,
    used: u64,
}

/// One path's knowledge, taken out for an append (with its key, to put it back
/// without allocating).
struct Taken {
    key: Option<OsString>,
    file: Option<(File, (u64, u64))>,
    tail: Option<Tail>,
}

fn known() -> MutexGuard<'static, Known> {
    static KNOWN: LazyLock<Mutex<Known>> = LazyLock::new(Mutex::default);
    KNOWN.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Known {
    fn take(&mut self, path: &Path) -> Taken {
        let path = path.as_os_str();
        if let Some((key, open)) = self.open.remove_entry(path) {
            return Taken {
                key: Some(key),
                file: Some((open.file, open.id)),
                tail: open.tail,
            };
        }
        let (key, tail) = self.tails.remove_entry(path).unzip();
        Taken {
            key,
            file: None,
            tail,
        }
    }

    /// Puts a path's knowledge back; returns the file closed to stay within
    /// [`KEPT_FILES`], for the caller to drop outside the lock.
    fn put(
        &mut self,
        path: &Path,
        key: Option<OsString>,
        file: Option<(File, (u64, u64))>,
        tail: Option<Tail>,
    ) -> Option<File> {
        let key = key.unwrap_or_else(|| path.as_os_str().to_owned());
        let Some((file, id)) = file else {
            if let Some(tail) = tail {
                self.tails.insert(key, tail);
            }
            return None;
        };
        let mut closed = None;
        if self.open.len() >= KEPT_FILES {
            let oldest = self
                .open
                .iter()
                .min_by_key(|(_, open)| open.used)
                .map(|(path, _)| path.clone());
            if let Some((oldest, open)) = oldest.and_then(|p| self.open.remove_entry(&p)) {
                if let Some(tail) = open.tail {
                    self.tails.insert(oldest, tail);
                }
                closed = Some(open.file);
            }
        }
        self.clock += 1;
        let open = Open {
            file,
            id,
            tail,
            used: self.clock,
        };
        self.open.insert(key, open);
        closed
    }

    /// Forgets `path`; returns its kept file, for the caller to drop outside the lock.
    fn forget(&mut self, path: &Path) -> Option<File> {
        self.tails.remove(path.as_os_str());
        self.open.remove(path.as_os_str()).map(|open| open.file)
    }
}

/// Releases the OS lock on `file` and puts what is known of `path` back, the file kept
/// open for the next append.
fn release(path: &Path, key: Option<OsString>, file: File, id: FileId, tail: Option<Tail>) {
    let file = match file.unlock() {
        Ok(()) => id.map(|id| (file, id)),
        Err(e) => {
            // Closing the file releases the lock.
            tracing::debug!(path = %path.display(), error = %e, "could not unlock a transcript");
            None
        }
    };
    let closed = known().put(path, key, file, tail);
    drop(closed);
}

/// Takes the OS lock on a transcript, waiting for other processes' appends (a file
/// system without OS locks still gets this process's queue).
fn lock(path: &Path, file: &File) {
    if let Err(e) = file.lock() {
        tracing::debug!(path = %path.display(), error = %e, "no OS lock on this transcript");
    }
}

/// What [`Inner::append_now`] did.
enum Now {
    /// The append, done or failed.
    Done(Result<Vec<SessionEvent>>),
    /// Not done (no file kept for the path, the path names another file, the OS lock is
    /// taken, the end of the file unknown, or the durability fsyncs): the entries, for
    /// the blocking pool.
    Later(Vec<TranscriptEntry>),
}

impl Inner {
    /// The end of `file` (which is `id`, `len` bytes long, locked): `remembered` if that
    /// still holds, else read from the file.
    fn tail(
        &self,
        path: &Path,
        file: &mut File,
        id: FileId,
        len: u64,
        remembered: Option<Tail>,
    ) -> Result<Tail> {
        if let Some(tail) = remembered.filter(|tail| tail.file == id && tail.len == len) {
            return Ok(tail);
        }
        let (ends_with_newline, leaf) =
            read_tail(file, len).map_err(|e| Error::io("read", path, e))?;
        Ok(Tail {
            file: id,
            len,
            lines: count_lines(path, file, len)?,
            ends_with_newline,
            leaf,
        })
    }

    fn forget(&self, path: &Path) {
        let closed = known().forget(path);
        // Its inode may be given to another file: its line marks would not hold there.
        if let Some(file) = &closed {
            line_marks().forget(file);
        }
        drop(closed);
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
    }

    /// Creates `path` with `lines` (each ending in a newline) unless it exists.
    fn create_with(&self, path: &Path, lines: &[u8]) -> Result<bool> {
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        let mut file = match create_private(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(Error::io("create", path, e)),
        };
        file.write_all(lines)
            .map_err(|e| Error::io("write", path, e))?;
        if self.durability != Durability::Unsynced {
            file.sync_all().map_err(|e| Error::io("fsync", path, e))?;
        }
        if self.durability == Durability::SyncFileAndDir {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io("fsync", dir, e))?;
        }
        Ok(true)
    }

    /// Appends on the calling thread — the async one — if that takes only short system
    /// calls: an unsynced append to a file kept open, whose OS lock is free and whose end
    /// this process knows. That is a non-blocking `flock`, a `statx` of the path, one
    /// `write` of a few hundred bytes into the page cache and an unlock: no longer than
    /// the `lstat`s of the linked-directory check that ran on this thread before every
    /// append, and much shorter than a hop to the blocking pool and back. Anything that
    /// may wait (an open, creating a directory, reading the file's end, another
    /// process's lock, an fsync) is left to the blocking pool.
    fn append_now(
        &self,
        transcript: &TranscriptRef,
        path: &Path,
        entries: Vec<TranscriptEntry>,
    ) -> Now {
        if self.durability != Durability::Unsynced {
            return Now::Later(entries);
        }
        let Taken { key, file, tail } = known().take(path);
        let Some((mut file, id)) = file else {
            drop(known().put(path, key, None, tail));
            return Now::Later(entries);
        };
        if file.try_lock().is_err() {
            // Another process appends (or the file system has no OS locks).
            drop(known().put(path, key, Some((file, id)), tail));
            return Now::Later(entries);
        }
        let len = match identify(path) {
            Ok((at_path, len)) if at_path == Some(id) => len,
            // Archived, removed or replaced since: the file is closed (its lock with it),
            // what was known of it forgotten, and the blocking pool opens whatever is at
            // the path now, checking it.
            _ => return Now::Later(entries),
        };
        let Some(tail) = tail.filter(|tail| tail.file == Some(id) && tail.len == len) else {
            // Another process appended: the blocking pool reads the new end.
            release(path, key, file, Some(id), None);
            return Now::Later(entries);
        };
        let (appended, tail) = self.write_locked(transcript, path, &mut file, tail, entries);
        release(path, key, file, Some(id), tail);
        Now::Done(appended)
    }

    /// Appends through the blocking pool: to the kept file if the path still names it,
    /// else to the file at the path, opened (and created with its directory if missing).
    fn append(
        &self,
        transcript: &TranscriptRef,
        path: &Path,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let Taken { key, file, tail } = known().take(path);
        let (mut file, id, len) = self.open_locked(path, file)?;
        let (appended, tail) = match self.tail(path, &mut file, id, len, tail) {
            Ok(tail) => self.write_locked(transcript, path, &mut file, tail, entries),
            Err(error) => (Err(error), None),
        };
        release(path, key, file, id, tail);
        appended
    }

    /// The file at `path` for appending — `kept` if the path still names it — under an
    /// exclusive OS lock (other processes append too, so the end of the file, and
    /// whether it needs its header, is read under the lock, held until the lines are
    /// written), with which file it is and its length.
    fn open_locked(
        &self,
        path: &Path,
        kept: Option<(File, (u64, u64))>,
    ) -> Result<(File, FileId, u64)> {
        if let Some((file, id)) = kept {
            lock(path, &file);
            match identify(path) {
                Ok((at_path, len)) if at_path == Some(id) => return Ok((file, Some(id), len)),
                // Archived, removed or replaced since: closed, and the path opened.
                _ => drop(file),
            }
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let file = match open_append(path) {
            Ok(file) => file,
            // The first transcript of an agent: its directory is made first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_private_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
                open_append(path).map_err(|e| Error::io("open", path, e))?
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
        lock(path, &file);
        let (id, len) = identify_file(&file).map_err(|e| Error::io("stat", path, e))?;
        Ok((file, id, len))
    }

    /// Writes `entries` after `tail` to `file` (locked), with the header first if the
    /// file is empty; cuts a failed write back to where it began. Returns the events
    /// and the new end (`None` after a failure).
    fn write_locked(
        &self,
        transcript: &TranscriptRef,
        path: &Path,
        file: &mut File,
        mut tail: Tail,
        entries: Vec<TranscriptEntry>,
    ) -> (Result<Vec<SessionEvent>>, Option<Tail>) {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut buffer = Vec::with_capacity(512 * entries.len());
        let created = tail.len == 0;
        if created {
            let header = SessionHeader::new(&transcript.session_id, Utc::now());
            serde_json::to_writer(&mut buffer, &header).expect("a header serialises");
            buffer.push(b'\n');
        } else if !tail.ends_with_newline {
            // Step over a torn last line: our lines start fresh.
            buffer.push(b'\n');
        }
        let mut line_number = tail.lines + usize::from(!buffer.is_empty());
        let mut stamp = Stamp::now(tail.leaf.take());
        let mut events = Vec::with_capacity(entries.len());
        for mut entry in entries {
            stamp.stamp(&mut entry);
            let offset = Offset(tail.len + buffer.len() as u64);
            if let Err(source) = serde_json::to_writer(&mut buffer, &entry) {
                let what = format!("a transcript entry for {}", path.display());
                return (Err(Error::encode(what, source)), None);
            }
            buffer.push(b'\n');
            line_number += 1;
            events.push(SessionEvent {
                offset,
                line: line_number,
                entry,
            });
        }
        let leaf = stamp.leaf();
        let written = file
            .write_all(&buffer)
            .map_err(|e| Error::io("append to", path, e))
            .and_then(|()| {
                if self.durability == Durability::Unsynced {
                    return Ok(());
                }
                file.sync_data().map_err(|e| Error::io("fsync", path, e))?;
                if created && self.durability == Durability::SyncFileAndDir {
                    File::open(dir)
                        .and_then(|d| d.sync_all())
                        .map_err(|e| Error::io("fsync", dir, e))?;
                }
                Ok(())
            });
        if let Err(error) = written {
            // A failed append (a full disk) must not leave a partial line that reads
            // as garbage forever: cut the file back to where this append began.
            if let Err(e) = file.set_len(tail.len) {
                tracing::error!(path = %path.display(), error = %e, "could not cut a failed append back");
            }
            // A reader may have counted the lines that were cut.
            line_marks().forget(file);
            return (Err(error), None);
        }
        crate::ops::telemetry::appended(buffer.len());
        let tail = Tail {
            file: tail.file,
            len: tail.len + buffer.len() as u64,
            lines: line_number,
            ends_with_newline: true,
            leaf,
        };
        (Ok(events), Some(tail))
    }

    /// Message-log records of one file, extracting only what was appended since the
    /// last time.
    fn log_records(&self, agent: &AgentId, path: &Path) -> Result<Vec<LogRecord>> {
        let metadata = match fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("stat", path, e)),
        };
        let (len, modified) = (metadata.len(), metadata.modified().ok());
        let cached = self
            .logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .cloned();
        let mut extracted = match cached {
            Some(cached) if cached.len == len && cached.modified == modified => {
                return Ok(cached.records)
            }
            // Transcripts only grow: continue where the last extraction stopped.
            Some(cached) if cached.len < len => cached,
            _ => ExtractedLog {
                len: 0,
                modified: None,
                next: Offset::START,
                session_id: None,
                records: Vec::new(),
            },
        };
        let read = read_transcript(path, extracted.next)?;
        if let Some(header) = &read.header {
            extracted.session_id = Some(header.id.clone());
        }
        let session_id = extracted.session_id.clone().unwrap_or_else(|| {
            session_id_of_name(path.file_name().and_then(|n| n.to_str()).unwrap_or(""))
        });
        for event in read.events {
            let Some(record) = log_record(agent, &session_id, &event) else {
                continue;
            };
            extracted.records.push(record);
        }
        extracted.len = len;
        extracted.modified = modified;
        extracted.next = read.next;
        let records = extracted.records.clone();
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned(), extracted);
        Ok(records)
    }

    fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let agents = match &query.agent {
            Some(agent) => vec![agent.clone()],
            None => agent_dirs(&self.root)?,
        };
        let mut records = Vec::new();
        for agent in agents {
            let dir = paths::sessions_dir(&self.root, &agent);
            for path in transcript_files(&dir)? {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if query
                    .session_id
                    .as_deref()
                    .is_some_and(|id| !name.starts_with(id))
                {
                    continue;
                }
                records.extend(
                    self.log_records(&agent, &path)?
                        .into_iter()
                        .filter(|record| query.matches(record)),
                );
            }
        }
        records
            .sort_by(|a, b| (a.at, &a.session_id, a.offset).cmp(&(b.at, &b.session_id, b.offset)));
        if let Some(limit) = query.limit {
            records.truncate(limit);
        }
        Ok(records)
    }
}

/// Opens (creating it owner-only if missing) a transcript for appending.
fn open_append(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.append(true).read(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    open_checked(&mut options, path)
}

/// The end of a file: whether it ends with a newline, and the id of its last entry.
fn read_tail(file: &mut File, len: u64) -> io::Result<(bool, Option<String>)> {
    const CHUNK: u64 = 64 * 1024;
    let mut start = len;
    let mut buffer: Vec<u8> = Vec::new();
    let mut ends_with_newline = len == 0;
    loop {
        let from = start.saturating_sub(CHUNK);
        let mut chunk = vec![0; (start - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk)?;
        if start == len {
            ends_with_newline = chunk.last().is_none_or(|b| *b == b'\n');
        }
        chunk.extend_from_slice(&buffer);
        buffer = chunk;
        start = from;
        // Complete lines in the buffer, newest first (skip a partial first line unless
        // the buffer reaches the file's start).
        let complete_from = if start == 0 {
            0
        } else {
            buffer
                .iter()
                .position(|b| *b == b'\n')
                .map_or(buffer.len(), |p| p + 1)
        };
        let leaf = buffer[complete_from..]
            .split(|b| *b == b'\n')
            .rev()
            .filter_map(|line| crate::store::json_text::from_slice::<TranscriptEntry>(line).ok())
            .filter(|entry| entry.kind != "session")
            .find_map(|entry| entry.id);
        if leaf.is_some() || start == 0 {
            return Ok((ends_with_newline, leaf));
        }
    }
}

/// The number of newlines in the first `len` bytes of `file` (at `path`, for errors).
///
/// Counted from the nearest count known before `len` — one this process made, else the
/// file's [line count](hints::LineCount) when it still holds. A count of more than
/// [`WORTH_REMEMBERING`](hints::WORTH_REMEMBERING) bytes from the start or from the
/// file's own count is left on the file for the next process (unless the file holds a
/// count further on); one built on this process's marks is not, since a mark of a file
/// another process cut back, or of a removed file whose inode was reused, can be stale.
/// Counted through the handle the caller has open, never by opening `path` again: a
/// reset that archives the transcript meanwhile renames the path, not the file.
pub(super) fn count_lines(path: &Path, file: &File, len: u64) -> Result<usize> {
    if len == 0 {
        return Ok(0);
    }
    let mut file = file.try_clone().map_err(|e| Error::io("open", path, e))?;
    let (mut start, mut lines) = line_marks().before(&file, len).unwrap_or((0, 0));
    let mut checked = start == 0;
    let mut leave = true;
    if len - start >= hints::WORTH_REMEMBERING {
        let file_len = file
            .metadata()
            .map_err(|e| Error::io("stat", path, e))?
            .len();
        if let Some(count) = hints::LineCount::believed(&mut file, file_len) {
            if count.end <= len && count.end > start {
                (start, lines, checked) = (count.end, count.lines, true);
            }
            leave = count.end < len;
        }
    }
    file.seek(SeekFrom::Start(start))
        .map_err(|e| Error::io("seek", path, e))?;
    let mut reader = io::BufReader::with_capacity(256 * 1024, (&file).take(len - start));
    loop {
        let buffer = io::BufRead::fill_buf(&mut reader).map_err(|e| Error::io("read", path, e))?;
        if buffer.is_empty() {
            break;
        }
        lines += memchr::memchr_iter(b'\n', buffer).count();
        let consumed = buffer.len();
        io::BufRead::consume(&mut reader, consumed);
    }
    drop(reader);
    if len - start >= hints::WORTH_REMEMBERING {
        line_marks().remember(&file, len, lines);
        if checked && leave {
            hints::LineCount::remember(&mut file, len, lines);
        }
    }
    Ok(lines)
}

/// Reads `path` from `from`: complete lines only, damage reported.
pub(crate) fn read_transcript(path: &Path, from: Offset) -> Result<TranscriptRead> {
    read_transcript_chunk(path, from, None)
}

/// [`read_transcript`], reading about `max_bytes` at most when given (whole lines: at
/// least the first, however long).
pub(super) fn read_transcript_chunk(
    path: &Path,
    from: Offset,
    max_bytes: Option<usize>,
) -> Result<TranscriptRead> {
    let mut file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(TranscriptRead {
                next: from,
                ..TranscriptRead::default()
            })
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    let invalid_offset = || Error::InvalidOffset {
        path: path.to_owned(),
        offset: from.0,
        len,
    };
    if from.0 > len {
        return Err(invalid_offset());
    }
    if from.0 > 0 {
        let mut previous = [0u8];
        file.seek(SeekFrom::Start(from.0 - 1))
            .map_err(|e| Error::io("seek", path, e))?;
        file.read_exact(&mut previous)
            .map_err(|e| Error::io("read", path, e))?;
        if previous[0] != b'\n' {
            return Err(invalid_offset());
        }
    }
    let bytes = match max_bytes {
        // The header is not an event: a chunk from the start holds it and one more.
        Some(max) if (max as u64) < len - from.0 => {
            read_whole_lines(&mut file, max, if from.0 == 0 { 2 } else { 1 })
        }
        _ => {
            let mut bytes = Vec::with_capacity((len - from.0) as usize);
            file.read_to_end(&mut bytes).map(|_| bytes)
        }
    }
    .map_err(|e| Error::io("read", path, e))?;
    let mut read = TranscriptRead {
        next: Offset(from.0 + bytes.len() as u64),
        ..TranscriptRead::default()
    };
    let mut line = count_lines(path, &file, from.0)?;
    let mut position = 0usize;
    while position < bytes.len() {
        line += 1;
        let offset = Offset(from.0 + position as u64);
        let Some(end) = bytes[position..].iter().position(|b| *b == b'\n') else {
            read.issues.push(ReadIssue::TornLastLine {
                line,
                offset,
                bytes: bytes.len() - position,
            });
            tracing::warn!(path = %path.display(), line, "transcript ends with a torn line; skipped");
            read.next = offset;
            line -= 1;
            break;
        };
        let text = &bytes[position..position + end];
        position += end + 1;
        read_line(&mut read, line, offset, text);
    }
    line_marks().remember(&file, read.next.0, line);
    // The next read often starts at the last event (a reader that checks it is still
    // there): a mark there spares it counting the lines before.
    if let Some(last) = read.events.last() {
        line_marks().remember(&file, last.offset.0, last.line - 1);
    }
    Ok(read)
}

/// The newest events of the transcript at `path` before `before` (its end when `None`,
/// a torn last line left out) in about `max_bytes` of lines (at least one event), read
/// backwards from there a chunk at a time; oldest first, numbered 0 (the lines before
/// are not counted), the header with them when they reach the start.
pub(super) fn read_transcript_back(
    path: &Path,
    before: Option<Offset>,
    max_bytes: usize,
) -> Result<TranscriptRead> {
    let mut file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(TranscriptRead::default()),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    let invalid_offset = |offset: u64| Error::InvalidOffset {
        path: path.to_owned(),
        offset,
        len,
    };
    let read_at = |file: &mut File, from: u64, to: u64| -> Result<Vec<u8>> {
        let mut bytes = vec![0; (to - from) as usize];
        file.seek(SeekFrom::Start(from))
            .map_err(|e| Error::io("seek", path, e))?;
        file.read_exact(&mut bytes)
            .map_err(|e| Error::io("read", path, e))?;
        Ok(bytes)
    };
    // `bytes` holds the file from `start` to the end of the read; with no `before`, the
    // end is found once a newline is: what follows the last one is a torn line.
    let mut end_found = before.is_some();
    let mut start = match before {
        Some(Offset(offset)) if offset > len => return Err(invalid_offset(offset)),
        Some(Offset(offset)) if offset > 0 && read_at(&mut file, offset - 1, offset)? != b"\n" => {
            return Err(invalid_offset(offset))
        }
        Some(Offset(offset)) => offset,
        None => len,
    };
    let mut bytes: Vec<u8> = Vec::new();
    // Where the whole lines in `bytes` start: after its first newline, unless it
    // reaches the start of the file.
    let whole_from = |bytes: &[u8], start: u64| {
        if start == 0 {
            0
        } else {
            bytes
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |at| at + 1)
        }
    };
    while start > 0 {
        // A chunk, or as much again as is read so far (a long line in doubling steps).
        let step = (bytes.len() as u64).max(64 * 1024);
        let from = start.saturating_sub(step);
        let mut chunk = read_at(&mut file, from, start)?;
        chunk.extend_from_slice(&bytes);
        bytes = chunk;
        start = from;
        if !end_found {
            match bytes.iter().rposition(|b| *b == b'\n') {
                Some(last) => {
                    bytes.truncate(last + 1);
                    end_found = true;
                }
                None if start == 0 => bytes.clear(),
                None => continue,
            }
        }
        let whole = bytes.len() - whole_from(&bytes, start);
        if whole > 0 && whole >= max_bytes {
            break;
        }
    }
    // The newest whole lines that fit (at least one that is not the header).
    let from = whole_from(&bytes, start);
    let mut lines: Vec<(u64, &[u8])> = Vec::new();
    let (mut size, mut events) = (0usize, 0usize);
    let mut end = bytes.len();
    while end > from {
        let line_start = bytes[from..end - 1]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(from, |at| from + at + 1);
        let offset = start + line_start as u64;
        if offset > 0 && events > 0 && size + (end - line_start) > max_bytes {
            break;
        }
        size += end - line_start;
        events += usize::from(offset > 0);
        lines.push((offset, &bytes[line_start..end - 1]));
        end = line_start;
    }
    let mut read = TranscriptRead {
        next: Offset(lines.last().map_or(start, |(offset, _)| *offset)),
        ..TranscriptRead::default()
    };
    for (offset, text) in lines.into_iter().rev() {
        read_line(&mut read, usize::from(offset == 0), Offset(offset), text);
    }
    Ok(read)
}

/// The last compaction line of the transcript at `path` (a torn last line left out):
/// the file read backwards a chunk at a time, only the lines that hold the word
/// `compaction` parsed — back to where the file's [hint](hints::CompactionHint) says it was
/// searched before, when it still holds, else to the start. A search of more than
/// [`WORTH_REMEMBERING`](hints::WORTH_REMEMBERING) bytes leaves a hint for
/// the next.
pub(super) fn find_last_compaction(path: &Path) -> Result<Option<SessionEvent>> {
    const CHUNK: u64 = 1024 * 1024;
    let mut file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    let hinted = hints::CompactionHint::believed(&mut file, len);
    // Searched back to here: the hint's end (a line's end), or the start.
    let stop = hinted.as_ref().map_or(0, |(hint, _)| hint.searched_to);
    let finder = memchr::memmem::FinderRev::new(b"compaction");
    // `bytes` holds the file from `start` up to the end of the last whole line not yet
    // searched.
    let (mut start, mut bytes) = (len, Vec::new());
    // The end of the last whole line, and its id: where the next search may stop.
    let mut end: Option<(u64, Option<String>)> = None;
    let mut found = None;
    'search: while start > stop {
        let from = start
            .saturating_sub(CHUNK.max(bytes.len() as u64))
            .max(stop);
        let mut chunk = vec![0; (start - from) as usize];
        file.seek(SeekFrom::Start(from))
            .and_then(|_| file.read_exact(&mut chunk))
            .map_err(|e| Error::io("read", path, e))?;
        chunk.extend_from_slice(&bytes);
        bytes = chunk;
        start = from;
        if end.is_none() {
            match bytes.iter().rposition(|b| *b == b'\n') {
                Some(last) => bytes.truncate(last + 1),
                None if start == stop => break,
                None => continue,
            }
            // The last whole line's id, when the bytes read hold all of it.
            let body = &bytes[..bytes.len() - 1];
            let whole_line = start == stop || memchr::memrchr(b'\n', body).is_some();
            let id = whole_line.then(|| hints::last_line_id(&bytes)).flatten();
            end = Some((start + bytes.len() as u64, id));
        }
        // The whole lines: after the first newline, unless where the search stops.
        let whole = if start == stop {
            0
        } else {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(at) => at + 1,
                None => continue,
            }
        };
        let mut searched_to = bytes.len();
        while let Some(hit) = finder.rfind(&bytes[whole..searched_to]) {
            let hit = whole + hit;
            let line_start = bytes[..hit]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            let line_end = hit
                + bytes[hit..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .unwrap_or(bytes.len() - hit);
            if let Ok(entry) =
                crate::store::json_text::from_slice::<TranscriptEntry>(&bytes[line_start..line_end])
            {
                if entry.kind == "compaction" {
                    found = Some(SessionEvent {
                        offset: Offset(start + line_start as u64),
                        line: 0,
                        entry,
                    });
                    break 'search;
                }
            }
            searched_to = line_start;
        }
        // What is left to search: the partial line at the front.
        bytes.truncate(whole);
    }
    let found = found.or_else(|| {
        let (hint, entry) = hinted?;
        let (offset, _) = hint.compaction?;
        Some(SessionEvent {
            offset: Offset(offset),
            line: 0,
            entry: entry?,
        })
    });
    if let Some((end, Some(line_id))) = end {
        if end.saturating_sub(stop) >= hints::WORTH_REMEMBERING {
            hints::CompactionHint {
                searched_to: end,
                line_id,
                compaction: found
                    .as_ref()
                    .and_then(|event| Some((event.offset.0, event.entry.id.clone()?))),
            }
            .remember(&file);
        }
    }
    Ok(found)
}

/// About `max` bytes of `file` from where it is, ending after a newline: the whole
/// lines in the first `max` bytes, and at least the first `lines` lines however long
/// (or everything up to the end of the file, where a torn last line may be).
fn read_whole_lines(file: &mut File, max: usize, lines: usize) -> io::Result<Vec<u8>> {
    let lines = lines.max(1);
    let mut bytes = Vec::with_capacity(max);
    (&mut *file).take(max as u64).read_to_end(&mut bytes)?;
    // Where the first `lines` newlines are; each byte is looked at once, however long
    // the lines (a 64 MB line is read in doubling steps, not rescanned at each).
    let mut newlines = Vec::with_capacity(lines);
    let mut scanned = 0;
    loop {
        for (at, byte) in bytes[scanned..].iter().enumerate() {
            if *byte == b'\n' && newlines.len() < lines {
                newlines.push(scanned + at);
            }
        }
        scanned = bytes.len();
        if newlines.len() >= lines {
            let end = if bytes.len() <= max {
                // Enough lines within `max`: every whole line there.
                bytes.iter().rposition(|b| *b == b'\n')
            } else {
                // Read past `max` for the first lines: exactly those.
                newlines.get(lines - 1).copied()
            };
            if let Some(end) = end {
                bytes.truncate(end + 1);
                return Ok(bytes);
            }
        }
        // Too few whole lines yet: read on, as much again as is read so far.
        let step = bytes.len().max(64 * 1024) as u64;
        let before = bytes.len();
        (&mut *file).take(step).read_to_end(&mut bytes)?;
        if bytes.len() == before {
            return Ok(bytes);
        }
    }
}

/// Line counts at offsets of files read in chunks, so that reading the next chunk counts
/// only the lines after the last one (a follower reading a long transcript from the
/// start does not count it from the start at every chunk). Bounded.
pub(super) struct LineMarks(Mutex<HashMap<(u64, u64), BTreeMap<u64, usize>>>);

/// The most files, and marks per file, kept.
const MAX_MARKED_FILES: usize = 256;
const MAX_MARKS_PER_FILE: usize = 64;

pub(super) fn line_marks() -> &'static LineMarks {
    static MARKS: OnceLock<LineMarks> = OnceLock::new();
    MARKS.get_or_init(|| LineMarks(Mutex::new(HashMap::new())))
}

impl LineMarks {
    /// Records that `file` has `lines` newlines before `offset`.
    pub(super) fn remember(&self, file: &File, offset: u64, lines: usize) {
        let Ok((Some(id), _)) = identify_file(file) else {
            return;
        };
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if marks.len() >= MAX_MARKED_FILES && !marks.contains_key(&id) {
            marks.clear();
        }
        let of_file = marks.entry(id).or_default();
        if of_file.len() >= MAX_MARKS_PER_FILE {
            of_file.pop_first();
        }
        of_file.insert(offset, lines);
    }

    /// Forgets the marks of `file` (its end was cut back).
    pub(super) fn forget(&self, file: &File) {
        if let Ok((Some(id), _)) = identify_file(file) {
            let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            marks.remove(&id);
        }
    }

    /// The nearest mark of `file` at or before `offset`.
    fn before(&self, file: &File, offset: u64) -> Option<(u64, usize)> {
        let (Some(id), len) = identify_file(file).ok()? else {
            return None;
        };
        let marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        marks
            .get(&id)?
            .range(..=offset.min(len))
            .next_back()
            .map(|(at, lines)| (*at, *lines))
    }
}

/// Agents with a directory under `<root>/agents`, sorted.
fn agent_dirs(root: &Path) -> Result<Vec<AgentId>> {
    let agents_dir = root.join("agents");
    let entries = match fs::read_dir(&agents_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", agents_dir, e)),
    };
    let mut agents: Vec<AgentId> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|n| AgentId::new(n).ok())
        })
        .collect();
    agents.sort();
    Ok(agents)
}

/// Transcript files in `dir`, live and archived (`*.jsonl`, `*.jsonl.reset.*`,
/// `*.jsonl.deleted.*`), sorted by name.
pub(crate) fn transcript_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl")
                || name.contains(".jsonl.reset.")
                || name.contains(".jsonl.deleted.")
        })
        .collect();
    files.sort();
    Ok(files)
}

#[async_trait]
impl TranscriptStore for FileTranscriptStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let path = self.path(transcript)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let mut line = serde_json::to_vec(header).expect("a header serialises");
        line.push(b'\n');
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || inner.create_with(&file, &line)).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let parent_path = self.path(parent)?;
        let child_path = self.path(child)?;
        let _queue = process_mutex(&child_path).lock_owned().await;
        let mut header = header.clone();
        if header.parent_session.is_none() {
            header.parent_session = Some(parent_path.to_string_lossy().into_owned());
        }
        let inner = self.inner.clone();
        let file = child_path.clone();
        blocking(&child_path, move || {
            let mut lines = serde_json::to_vec(&header).expect("a header serialises");
            lines.push(b'\n');
            // The parent's entries, verbatim: the same ids, so the last entry is still
            // the leaf and the fork's context is the parent's.
            let parent_bytes = match open_no_follow(&parent_path).and_then(|mut f| {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).map(|_| bytes)
            }) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(Error::io("read", &parent_path, e)),
            };
            let mut complete = parent_bytes
                .split_inclusive(|b| *b == b'\n')
                .filter(|l| l.ends_with(b"\n"));
            for (index, line) in complete.by_ref().enumerate() {
                let is_header = index == 0
                    && serde_json::from_slice::<SessionHeader>(line)
                        .is_ok_and(|h| h.kind == "session");
                if !is_header
                    && crate::store::json_text::from_slice::<TranscriptEntry>(line).is_ok()
                {
                    lines.extend_from_slice(line);
                }
            }
            inner.create_with(&file, &lines)
        })
        .await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        crate::ops::telemetry::append("json", transcript, async move {
            let path = self.named_path(transcript)?;
            let _queue = process_mutex(&path).lock_owned().await;
            let events = match self.inner.append_now(transcript, &path, entries) {
                Now::Done(appended) => appended?,
                Now::Later(entries) => {
                    // The checks that read the file system guard every open; an append
                    // through a kept file needs none (the path was checked when the file
                    // was opened, and still names that very file).
                    self.check_path(transcript, &path)?;
                    let inner = self.inner.clone();
                    let (owned_ref, file) = (transcript.clone(), path.clone());
                    blocking(&path, move || inner.append(&owned_ref, &file, entries)).await?
                }
            };
            if self.inner.hub.subscribers() > 0 {
                self.inner.hub.publish(TranscriptUpdate {
                    transcript: transcript.clone(),
                    path: Some(path),
                    events: events.clone(),
                    session_key: None,
                    message: None,
                });
            }
            Ok(events)
        })
        .await
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let path = self.path(transcript)?;
        let file = path.clone();
        blocking(&path, move || read_transcript(&file, from)).await
    }

    /// The file's device and inode: a file renamed over the transcript is another.
    async fn identity(&self, transcript: &TranscriptRef) -> Result<Option<u64>> {
        let path = self.named_path(transcript)?;
        Ok(match crate::store::fs::identify(&path) {
            Ok((Some((device, inode)), _)) => Some(device.rotate_left(32) ^ inode),
            _ => None,
        })
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let path = self.path(transcript)?;
        let file = path.clone();
        blocking(&path, move || {
            read_transcript_chunk(&file, from, Some(max_bytes.max(1)))
        })
        .await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let path = self.path(transcript)?;
        let file = path.clone();
        blocking(&path, move || {
            read_transcript_back(&file, before, max_bytes)
        })
        .await
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let path = self.path(transcript)?;
        let file = path.clone();
        blocking(&path, move || find_last_compaction(&file)).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let path = self.path(transcript)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || {
            match fs::symlink_metadata(&file) {
                Err(_) => return Ok(None),
                // A FIFO, directory or link where the transcript belongs stays where it is.
                Ok(metadata) if !metadata.is_file() => {
                    return Err(Error::NotAFile {
                        path: file,
                        found: crate::store::fs::describe(metadata.file_type()),
                    })
                }
                Ok(_) => {}
            }
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let base = file.with_file_name(archived_name(name, reason, at));
            let base = base.to_string_lossy();
            let mut target = PathBuf::from(&*base);
            let mut attempt = 1;
            while target.exists() {
                target = PathBuf::from(format!("{base}-{attempt}"));
                attempt += 1;
            }
            fs::rename(&file, &target).map_err(|e| Error::io("archive", &file, e))?;
            inner.forget(&file);
            tracing::info!(from = %file.display(), to = %target.display(), "transcript archived");
            Ok(Some(target))
        })
        .await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let path = self.path(transcript)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || match fs::remove_file(&file) {
            Ok(()) => {
                inner.forget(&file);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("remove", &file, e)),
        })
        .await
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        let path = self.path(transcript)?;
        let file = path.clone();
        let archived = blocking(&path, move || {
            if fs::symlink_metadata(&file).is_ok() {
                return Ok(None);
            }
            let (Some(dir), Some(name)) =
                (file.parent(), file.file_name().and_then(|n| n.to_str()))
            else {
                return Ok(None);
            };
            let names: Vec<String> = match fs::read_dir(dir) {
                Ok(entries) => entries
                    .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                    .collect(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("list", dir, e)),
            };
            Ok(newest_archive(name, names.iter().map(String::as_str))
                .map(|archived| dir.join(archived)))
        })
        .await?;
        Ok(archived.map(|path| TranscriptRef {
            session_file: Some(path.to_string_lossy().into_owned()),
            ..transcript.clone()
        }))
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let inner = self.inner.clone();
        let query = query.clone();
        blocking(&self.inner.root, move || inner.query_log(&query)).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.hub.subscribe()
    }

    fn announce(&self, update: TranscriptUpdate) -> bool {
        let heard = self.inner.hub.subscribers() > 0;
        self.inner.hub.publish(update);
        heard
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.path(transcript)
            .ok()
            .map(|path| path.to_string_lossy().into_owned())
    }
}

#[async_trait]
impl TranscriptExport for FileTranscriptStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        let root = self.inner.root.clone();
        let agent = agent.cloned();
        blocking(&self.inner.root, move || {
            let agents = match agent {
                Some(agent) => vec![agent],
                None => agent_dirs(&root)?,
            };
            let mut names = Vec::new();
            for agent in agents {
                for path in transcript_files(&paths::sessions_dir(&root, &agent))? {
                    if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                        names.push((agent.clone(), name.to_owned()));
                    }
                }
            }
            Ok(names)
        })
        .await
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        let path = self.named_path_of(agent, name)?;
        let file = path.clone();
        blocking(&path, move || {
            let mut bytes = Vec::new();
            match open_no_follow(&file).and_then(|mut f| f.read_to_end(&mut bytes)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io("read", &file, e)),
            }
            let text = String::from_utf8(bytes).map_err(|e| {
                let at = e.utf8_error().valid_up_to();
                Error::io(
                    "export",
                    &file,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("not valid UTF-8 after byte {at}: copy this file by hand"),
                    ),
                )
            })?;
            // Every line, a torn last one too: an export leaves nothing behind.
            Ok(Some(
                text.split_inclusive('\n')
                    .map(|line| line.strip_suffix('\n').unwrap_or(line).to_owned())
                    .collect(),
            ))
        })
        .await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        let path = self.named_path_of(agent, name)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || {
            let mut bytes = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
            for line in &lines {
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
            }
            inner.create_with(&file, &bytes)
        })
        .await
    }
    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<crate::transcript::LineEdit>,
    ) -> Result<usize> {
        let path = self.named_path_of(agent, name)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || {
            use std::os::unix::fs::FileExt;
            let mut options = fs::OpenOptions::new();
            options.read(true).write(true);
            let mut handle = match crate::store::fs::open_checked(&mut options, &file) {
                Ok(handle) => handle,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
                Err(e) => return Err(Error::io("open", &file, e)),
            };
            // Appenders in every process take this lock: no line is half written.
            handle.lock().map_err(|e| Error::io("lock", &file, e))?;
            let mut bytes = Vec::new();
            handle
                .read_to_end(&mut bytes)
                .map_err(|e| Error::io("read", &file, e))?;
            let mut starts = vec![0usize];
            starts.extend(memchr_newlines(&bytes).map(|at| at + 1));
            let mut done = 0;
            for edit in &edits {
                let Some(&start) = starts.get(edit.index) else {
                    continue;
                };
                let end = start + edit.old.len();
                if bytes.get(start..end) != Some(edit.old.as_bytes())
                    || !matches!(bytes.get(end), None | Some(b'\n'))
                    || edit.new.len() != edit.old.len()
                {
                    continue;
                }
                handle
                    .write_all_at(edit.new.as_bytes(), start as u64)
                    .map_err(|e| Error::io("write", &file, e))?;
                done += 1;
            }
            if done > 0 {
                hints::forget(&handle);
                handle
                    .sync_all()
                    .map_err(|e| Error::io("fsync", &file, e))?;
            }
            drop(handle.unlock());
            inner.forget(&file);
            Ok(done)
        })
        .await
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        let path = self.named_path_of(agent, name)?;
        let _queue = process_mutex(&path).lock_owned().await;
        let inner = self.inner.clone();
        let file = path.clone();
        blocking(&path, move || {
            match fs::symlink_metadata(&file) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(Error::io("inspect", &file, e)),
                Ok(metadata) if !metadata.is_file() => {
                    return Err(Error::NotAFile {
                        path: file,
                        found: crate::store::fs::describe(metadata.file_type()),
                    })
                }
                Ok(_) => {}
            }
            match fs::remove_file(&file) {
                Ok(()) => {
                    inner.forget(&file);
                    if let Some(dir) = file.parent() {
                        File::open(dir)
                            .and_then(|d| d.sync_all())
                            .map_err(|e| Error::io("fsync", dir, e))?;
                    }
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(Error::io("remove", &file, e)),
            }
        })
        .await
    }
}

/// The positions of the line breaks in `bytes`.
fn memchr_newlines(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(at, _)| at)
}

impl FileTranscriptStore {
    /// The file of transcript `name` of `agent` (a transcript's name, live or
    /// archived), with no directory on the way a link.
    fn named_path_of(&self, agent: &AgentId, name: &str) -> Result<PathBuf> {
        validate_transcript_name(name)?;
        let path = paths::sessions_dir(&self.inner.root, agent).join(name);
        crate::store::fs::refuse_linked_dirs(&self.inner.root, &path)
            .map_err(|e| Error::io("open", &path, e))?;
        Ok(path)
    }
}
