//! Transcripts in memory: for tests, and for hosts that keep no history.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::lines::{
    archived_name, header_line, leaf_of, log_record, newest_archive, read_line, session_id_of_name,
    stamp_entries, validate_transcript_name,
};
use super::{
    ArchiveReason, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore, TranscriptSubscription,
    TranscriptUpdate, UpdateHub,
};
use crate::error::{Error, Result};
use crate::identity::key::AgentId;

/// Transcripts held in memory, with the same behaviour as the file and database
/// stores (offsets are line numbers). Cheap to clone: clones share the transcripts.
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::transcript::InMemoryTranscriptStore;
///
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .transcripts(InMemoryTranscriptStore::new())
///     .build().unwrap();
/// # let _ = manager;
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemoryTranscriptStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    transcripts: Mutex<BTreeMap<(AgentId, String), Vec<String>>>,
    hub: UpdateHub,
}

type Transcripts = BTreeMap<(AgentId, String), Vec<String>>;

impl InMemoryTranscriptStore {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryTranscriptStore::default()
    }

    fn with<T>(&self, work: impl FnOnce(&mut Transcripts) -> T) -> T {
        let mut transcripts = self
            .inner
            .transcripts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        work(&mut transcripts)
    }
}

fn id(transcript: &TranscriptRef) -> Result<(AgentId, String)> {
    Ok((transcript.agent.clone(), transcript.file_name()?))
}

#[async_trait]
impl TranscriptStore for InMemoryTranscriptStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let id = id(transcript)?;
        let line = header_line(header);
        Ok(self.with(|all| {
            let fresh = !all.contains_key(&id);
            all.entry(id).or_insert_with(|| vec![line]);
            fresh
        }))
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let (parent_id, child_id) = (id(parent)?, id(child)?);
        let mut header = header.clone();
        if header.parent_session.is_none() {
            header.parent_session = Some(parent_id.1.clone());
        }
        let header = header_line(&header);
        Ok(self.with(|all| {
            if all.contains_key(&child_id) {
                return false;
            }
            let mut lines = vec![header];
            if let Some(parent_lines) = all.get(&parent_id) {
                lines.extend(
                    parent_lines
                        .iter()
                        .skip(1)
                        .filter(|line| {
                            crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes())
                                .is_ok()
                        })
                        .cloned(),
                );
            }
            all.insert(child_id, lines);
            true
        }))
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        crate::ops::telemetry::append("memory", transcript, async move {
            let mut entries = entries;
            let id = id(transcript)?;
            let events = self.with(|all| {
                let lines = all.entry(id).or_insert_with(|| {
                    vec![header_line(&SessionHeader::new(
                        &transcript.session_id,
                        Utc::now(),
                    ))]
                });
                let leaf = leaf_of(lines.iter().map(String::as_str));
                let first = lines.len();
                let (new_lines, _) = stamp_entries(&mut entries, leaf, Utc::now())
                    .map_err(|e| Error::encode("a transcript entry", e))?;
                crate::ops::telemetry::appended(new_lines.iter().map(|line| line.len() + 1).sum());
                lines.extend(new_lines);
                Ok::<_, Error>(
                    entries
                        .into_iter()
                        .enumerate()
                        .map(|(index, entry)| SessionEvent {
                            offset: Offset((first + index) as u64),
                            line: first + index + 1,
                            entry,
                        })
                        .collect::<Vec<_>>(),
                )
            })?;
            self.inner.hub.publish(TranscriptUpdate {
                transcript: transcript.clone(),
                path: None,
                events: events.clone(),
                session_key: None,
                message: None,
            });
            Ok(events)
        })
        .await
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let id = id(transcript)?;
        self.with(|all| {
            let Some(lines) = all.get(&id) else {
                return Ok(TranscriptRead {
                    next: from,
                    ..TranscriptRead::default()
                });
            };
            let count = lines.len() as u64;
            if from.0 > count {
                return Err(Error::InvalidOffset {
                    path: PathBuf::from(&id.1),
                    offset: from.0,
                    len: count,
                });
            }
            let mut read = TranscriptRead {
                next: Offset(count),
                ..TranscriptRead::default()
            };
            for (seq, line) in lines.iter().enumerate().skip(from.0 as usize) {
                read_line(&mut read, seq + 1, Offset(seq as u64), line.as_bytes());
            }
            Ok(read)
        })
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let id = id(transcript)?;
        self.with(|all| {
            let Some(lines) = all.get(&id) else {
                return Ok(TranscriptRead::default());
            };
            let count = lines.len() as u64;
            let end = match before {
                Some(before) if before.0 > count => {
                    return Err(Error::InvalidOffset {
                        path: PathBuf::from(&id.1),
                        offset: before.0,
                        len: count,
                    })
                }
                Some(before) => before.0 as usize,
                None => lines.len(),
            };
            // The newest lines that fit, at least one that is not the header.
            let (mut start, mut size, mut events) = (end, 0usize, 0usize);
            while start > 0 {
                let (seq, line) = (start - 1, &lines[start - 1]);
                if seq > 0 && events > 0 && size + line.len() > max_bytes {
                    break;
                }
                size += line.len() + 1;
                events += usize::from(seq > 0);
                start = seq;
            }
            let mut read = TranscriptRead {
                next: Offset(start as u64),
                ..TranscriptRead::default()
            };
            for (seq, line) in lines.iter().enumerate().take(end).skip(start) {
                read_line(&mut read, seq + 1, Offset(seq as u64), line.as_bytes());
            }
            Ok(read)
        })
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let id = id(transcript)?;
        Ok(self.with(|all| {
            let lines = all.get(&id)?;
            lines
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, line)| line.contains("compaction"))
                .find_map(|(seq, line)| {
                    let mut read = TranscriptRead::default();
                    read_line(&mut read, seq + 1, Offset(seq as u64), line.as_bytes());
                    read.events
                        .pop()
                        .filter(|event| event.entry.kind == "compaction")
                })
        }))
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let (agent, name) = id(transcript)?;
        Ok(self.with(|all| {
            let lines = all.remove(&(agent.clone(), name.clone()))?;
            let base = archived_name(&name, reason, at);
            let mut target = base.clone();
            let mut attempt = 1;
            while all.contains_key(&(agent.clone(), target.clone())) {
                target = format!("{base}-{attempt}");
                attempt += 1;
            }
            all.insert((agent, target.clone()), lines);
            Some(PathBuf::from(target))
        }))
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let id = id(transcript)?;
        Ok(self.with(|all| all.remove(&id).is_some()))
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        let (agent, name) = id(transcript)?;
        Ok(self
            .with(|all| {
                if all.contains_key(&(agent.clone(), name.clone())) {
                    return None;
                }
                let names = all
                    .keys()
                    .filter(|(owner, _)| *owner == agent)
                    .map(|(_, name)| name.as_str());
                newest_archive(&name, names)
            })
            .map(|archived| TranscriptRef {
                session_file: Some(archived),
                ..transcript.clone()
            }))
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let mut records: Vec<LogRecord> = self.with(|all| {
            all.iter()
                .filter(|((agent, _), _)| query.agent.as_ref().is_none_or(|a| a == agent))
                .flat_map(|((agent, name), lines)| {
                    let session_id = session_id_of_name(name);
                    lines.iter().enumerate().filter_map(move |(seq, line)| {
                        let entry = serde_json::from_str(line).ok()?;
                        let event = SessionEvent {
                            offset: Offset(seq as u64),
                            line: seq + 1,
                            entry,
                        };
                        log_record(agent, &session_id, &event)
                    })
                })
                .filter(|record| query.matches(record))
                .collect()
        });
        records
            .sort_by(|a, b| (a.at, &a.session_id, a.offset).cmp(&(b.at, &b.session_id, b.offset)));
        if let Some(limit) = query.limit {
            records.truncate(limit);
        }
        Ok(records)
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.hub.subscribe()
    }

    fn announce(&self, update: TranscriptUpdate) -> bool {
        let heard = self.inner.hub.subscribers() > 0;
        self.inner.hub.publish(update);
        heard
    }
}

#[async_trait]
impl TranscriptExport for InMemoryTranscriptStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        Ok(self.with(|all| {
            all.keys()
                .filter(|(a, _)| agent.is_none_or(|wanted| wanted == a))
                .cloned()
                .collect()
        }))
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        validate_transcript_name(name)?;
        Ok(self.with(|all| all.get(&(agent.clone(), name.to_owned())).cloned()))
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        Ok(self.with(|all| {
            let id = (agent.clone(), name.to_owned());
            if all.contains_key(&id) {
                return false;
            }
            all.insert(id, lines);
            true
        }))
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<super::LineEdit>,
    ) -> Result<usize> {
        validate_transcript_name(name)?;
        Ok(self.with(|all| {
            let Some(lines) = all.get_mut(&(agent.clone(), name.to_owned())) else {
                return 0;
            };
            let mut done = 0;
            for edit in edits {
                if let Some(line) = lines.get_mut(edit.index).filter(|l| **l == edit.old) {
                    *line = edit.new;
                    done += 1;
                }
            }
            done
        }))
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        validate_transcript_name(name)?;
        Ok(self.with(|all| all.remove(&(agent.clone(), name.to_owned())).is_some()))
    }
}
