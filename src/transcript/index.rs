//! Text extraction for indexers (OpenClaw's session-file indexing): the conversation
//! text of each transcript, redacted as the host wishes, with a content hash and mtime
//! so an indexer re-reads only what changed.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::{Offset, Role};
use crate::error::{Error, Result};
use crate::store::json::transcripts::read_transcript;
use crate::store::Revision;

/// One transcript's text for an indexer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedTranscript {
    /// `sessions/<file name>`, as OpenClaw's indexer names it.
    pub path: String,
    /// The file.
    pub abs_path: PathBuf,
    /// Its modification time, epoch milliseconds.
    pub mtime_ms: u64,
    /// Its size in bytes.
    pub size: u64,
    /// A hash of `content` (64-bit FNV-1a, hex): unchanged content, unchanged hash.
    pub hash: String,
    /// `User: …` and `Assistant: …` lines, redacted.
    pub content: String,
}

/// What changed in a directory since the previous scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexDelta {
    /// New transcripts and transcripts whose text changed.
    pub changed: Vec<IndexedTranscript>,
    /// Transcripts that are gone (deleted or archived).
    pub removed: Vec<PathBuf>,
}

type Redactor = Box<dyn Fn(&str) -> String + Send + Sync>;

/// Scans a sessions directory for transcripts whose text changed.
///
/// Files whose size and mtime are unchanged since the last scan are not read again;
/// files that were re-read are reported only when their text (by hash) changed.
///
/// ```
/// use agent_sessions::transcript::TranscriptIndexer;
///
/// let mut indexer = TranscriptIndexer::new()
///     .with_redaction(|text| text.replace("hunter2", "[redacted]"));
/// # let dir = tempfile::tempdir().unwrap();
/// let delta = indexer.scan(dir.path())?;
/// assert!(delta.changed.is_empty());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
pub struct TranscriptIndexer {
    redact: Redactor,
    seen: HashMap<PathBuf, Seen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    size: u64,
    mtime_ms: u64,
    hash: String,
}

impl fmt::Debug for TranscriptIndexer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TranscriptIndexer")
            .field("seen", &self.seen.len())
            .finish_non_exhaustive()
    }
}

impl Default for TranscriptIndexer {
    fn default() -> Self {
        TranscriptIndexer::new()
    }
}

impl TranscriptIndexer {
    /// An indexer that keeps text as written.
    pub fn new() -> Self {
        TranscriptIndexer {
            redact: Box::new(str::to_owned),
            seen: HashMap::new(),
        }
    }

    /// Redacts each message's text with `redact` before it is indexed.
    pub fn with_redaction(
        mut self,
        redact: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.redact = Box::new(redact);
        self
    }

    /// Scans `sessions_dir` (blocking file I/O; call it from a blocking context in an
    /// async program). Live transcripts (`*.jsonl`) are indexed; archived ones are not.
    pub fn scan(&mut self, sessions_dir: &Path) -> Result<IndexDelta> {
        let files: Vec<PathBuf> = crate::store::json::transcripts::transcript_files(sessions_dir)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        let mut delta = IndexDelta::default();
        for path in &files {
            let metadata = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
            let size = metadata.len();
            let mtime_ms = metadata
                .modified()
                .ok()
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            let previous = self.seen.get(path);
            if previous.is_some_and(|seen| seen.size == size && seen.mtime_ms == mtime_ms) {
                continue;
            }
            let content = self.extract(path)?;
            let hash = Revision::of_bytes(content.as_bytes()).to_string();
            let changed = previous.is_none_or(|seen| seen.hash != hash);
            self.seen.insert(
                path.clone(),
                Seen {
                    size,
                    mtime_ms,
                    hash: hash.clone(),
                },
            );
            if changed {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                delta.changed.push(IndexedTranscript {
                    path: format!("sessions/{name}"),
                    abs_path: path.clone(),
                    mtime_ms,
                    size,
                    hash,
                    content,
                });
            }
        }
        let gone: Vec<PathBuf> = self
            .seen
            .keys()
            .filter(|path| path.starts_with(sessions_dir) && !files.contains(path))
            .cloned()
            .collect();
        for path in gone {
            self.seen.remove(&path);
            delta.removed.push(path);
        }
        delta.removed.sort();
        Ok(delta)
    }

    fn extract(&self, path: &Path) -> Result<String> {
        let read = read_transcript(path, Offset::START)?;
        let lines: Vec<String> = read
            .events
            .iter()
            .filter_map(|event| {
                let message = event.entry.message.as_ref()?;
                let speaker = match message.role {
                    Role::User => "User",
                    Role::Assistant => "Assistant",
                    _ => return None,
                };
                let text = message.text();
                let text = text.trim();
                (!text.is_empty()).then(|| format!("{speaker}: {}", (self.redact)(text)))
            })
            .collect();
        Ok(lines.join("\n"))
    }
}
