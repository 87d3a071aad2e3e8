//! The in-crate search index: an inverted index with BM25 ranking and brute-force
//! cosine similarity, in memory, optionally saved to a file.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::text::tokens;
use super::{best, cosine, LoggedMessage, SearchFilter, SearchIndex, Work};
use crate::error::{Error, Result};

/// BM25's term-frequency saturation.
const K1: f32 = 1.2;
/// BM25's length normalisation.
const B: f32 = 0.75;

/// BM25's inverse document frequency of a word found in `df` of `count` messages
/// (always positive).
pub(crate) fn bm25_idf(count: f32, df: f32) -> f32 {
    ((count - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// BM25's score of a word with weight `idf` found `tf` times in a message of `length`
/// words, `average` being the mean length. Every index of the crate ranks with it.
pub(crate) fn bm25(idf: f32, tf: f32, length: f32, average: f32) -> f32 {
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average))
}

/// The search index for the memory and JSON stores: every message in memory with an
/// inverted index over its words (ranked by BM25) and its vector, if any (searched by
/// brute-force cosine similarity). With [`InMemoryIndex::open`], the index is saved to a
/// file on every [`flush`](SearchIndex::flush) (written whole to a temporary file and
/// renamed) and read back at the next start, so background work resumes where it
/// stopped.
///
/// ```
/// use agent_sessions::transcript::search::{InMemoryIndex, SearchIndex};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let index = InMemoryIndex::open(dir.path().join("search.json"))?;
/// assert_eq!(index.message_count().await?, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct InMemoryIndex {
    state: RwLock<State>,
    file: Option<PathBuf>,
}

#[derive(Debug, Default)]
struct State {
    messages: Vec<LoggedMessage>,
    by_id: HashMap<String, usize>,
    /// word → (message, occurrences)
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    total_length: u64,
    dirty: bool,
}

/// The saved form.
#[derive(Serialize, Deserialize)]
struct Saved {
    version: u32,
    messages: Vec<LoggedMessage>,
}

const SAVED_VERSION: u32 = 1;

impl State {
    fn insert(&mut self, message: LoggedMessage) -> bool {
        if self.by_id.contains_key(&message.id) {
            return false;
        }
        let position = self.messages.len() as u32;
        let words = tokens(&message.text);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for word in &words {
            *counts.entry(word.clone()).or_default() += 1;
        }
        for (word, count) in counts {
            self.postings
                .entry(word)
                .or_default()
                .push((position, count));
        }
        self.lengths.push(words.len() as u32);
        self.total_length += words.len() as u64;
        self.by_id.insert(message.id.clone(), position as usize);
        self.messages.push(message);
        true
    }

    fn without_vector(message: &LoggedMessage) -> LoggedMessage {
        LoggedMessage {
            embedding: None,
            ..message.clone()
        }
    }
}

/// Whether `message` still waits for `work`.
fn waits_for(message: &LoggedMessage, work: Work) -> bool {
    match work {
        Work::Categorize => message.category.is_none(),
        Work::Embed => message.embedding.is_none(),
    }
}

impl InMemoryIndex {
    /// An empty index kept in memory only.
    pub fn new() -> Self {
        InMemoryIndex::default()
    }

    /// The index saved at `file`, or an empty one that will be saved there. A file
    /// that cannot be read as an index is [`Error::Component`] and left as it is.
    pub fn open(file: impl Into<PathBuf>) -> Result<Self> {
        let file = file.into();
        let mut state = State::default();
        match std::fs::read(&file) {
            Ok(bytes) => {
                let unreadable = |problem: String| {
                    Error::component(
                        "search index",
                        format!(
                            "{} cannot be read ({problem}); it was left as it is",
                            file.display()
                        ),
                    )
                };
                let saved: Saved = serde_json::from_slice(&bytes)
                    .map_err(|error| unreadable(error.to_string()))?;
                if saved.version != SAVED_VERSION {
                    return Err(unreadable(format!(
                        "version {}, this crate reads {SAVED_VERSION}",
                        saved.version
                    )));
                }
                for message in saved.messages {
                    state.insert(message);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(Error::io("read", &file, error)),
        }
        Ok(InMemoryIndex {
            state: RwLock::new(state),
            file: Some(file),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn save(file: &Path, bytes: &[u8]) -> Result<()> {
        crate::store::fs::write_private_atomically(file, bytes)
    }
}

#[async_trait]
impl SearchIndex for InMemoryIndex {
    async fn remove(&self, ids: &[String]) -> Result<usize> {
        let mut state = self.write();
        let gone: HashSet<&str> = ids
            .iter()
            .map(String::as_str)
            .filter(|id| state.by_id.contains_key(*id))
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        // Rebuilt from what stays: no word or length of a removed message remains.
        let kept: Vec<LoggedMessage> = std::mem::take(&mut state.messages)
            .into_iter()
            .filter(|m| !gone.contains(m.id.as_str()))
            .collect();
        let removed = gone.len();
        *state = State::default();
        for message in kept {
            state.insert(message);
        }
        state.dirty = true;
        Ok(removed)
    }

    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        let mut state = self.write();
        let mut added = 0;
        for message in messages {
            added += usize::from(state.insert(message));
        }
        state.dirty |= added > 0;
        Ok(added)
    }

    async fn full_text(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>> {
        let state = self.read();
        let count = state.messages.len() as f32;
        if count == 0.0 || limit == 0 {
            return Ok(Vec::new());
        }
        let average = state.total_length as f32 / count;
        let words: HashSet<String> = tokens(query).into_iter().collect();
        let lists: Vec<(f32, &Vec<(u32, u32)>)> = words
            .iter()
            .filter_map(|word| state.postings.get(word))
            .map(|postings| (bm25_idf(count, postings.len() as f32), postings))
            .collect();
        // Scores accumulate in an array over every message when the words are common
        // (no hashing), in a map when they are rare (no array to clear) or filtered.
        let total: usize = lists.iter().map(|(_, postings)| postings.len()).sum();
        let mut touched: Vec<u32> = Vec::new();
        let mut dense: Vec<f32> = Vec::new();
        let mut sparse: HashMap<u32, f32> = HashMap::new();
        // The filter is checked once a posting, and only the messages it passes are
        // scored (in the map); without one, common words score into the array.
        let filtered = *filter != SearchFilter::default();
        let use_dense = !filtered && total >= state.messages.len() / 16;
        if use_dense {
            dense = vec![0.0; state.messages.len()];
        }
        for (idf, postings) in &lists {
            for &(position, tf) in postings.iter() {
                if filtered && !filter.matches(&state.messages[position as usize]) {
                    continue;
                }
                let length = state.lengths[position as usize] as f32;
                let score = bm25(*idf, tf as f32, length, average);
                if use_dense {
                    let slot = &mut dense[position as usize];
                    if *slot == 0.0 {
                        touched.push(position);
                    }
                    *slot += score;
                } else {
                    *sparse.entry(position).or_default() += score;
                }
            }
        }
        let mut ranked: Vec<(u32, f32)> = if use_dense {
            touched
                .into_iter()
                .map(|position| (position, dense[position as usize]))
                .collect()
        } else {
            sparse.into_iter().collect()
        };
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, order);
            ranked.truncate(limit);
        }
        ranked.sort_by(order);
        Ok(ranked
            .into_iter()
            .map(|(position, score)| (state.messages[position as usize].id.clone(), score))
            .collect())
    }

    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let state = self.read();
        let mut scored: Vec<(usize, f32)> = state
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| filter.matches(m))
            .filter_map(|(position, m)| Some((position, cosine(m.embedding.as_deref()?, vector)?)))
            .collect();
        // Only the best `limit` need their ids: select them before sorting.
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, |a, b| b.1.total_cmp(&a.1));
            scored.truncate(limit);
        }
        let ranked = scored
            .into_iter()
            .map(|(position, score)| (state.messages[position].id.clone(), score))
            .collect();
        Ok(best(ranked, limit))
    }

    async fn messages_by_id(&self, ids: &[String]) -> Result<Vec<LoggedMessage>> {
        let state = self.read();
        Ok(ids
            .iter()
            .filter_map(|id| state.by_id.get(id))
            .map(|&position| State::without_vector(&state.messages[position]))
            .collect())
    }

    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>> {
        let state = self.read();
        let mut found: Vec<LoggedMessage> = state
            .messages
            .iter()
            .filter(|m| filter.matches(m))
            .map(State::without_vector)
            .collect();
        found.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        Ok(found)
    }

    async fn pending(&self, work: Work, limit: usize) -> Result<Vec<LoggedMessage>> {
        let state = self.read();
        let mut found: Vec<LoggedMessage> = state
            .messages
            .iter()
            .filter(|m| waits_for(m, work))
            .map(State::without_vector)
            .collect();
        found.sort_by(|a, b| a.at.cmp(&b.at).then_with(|| a.id.cmp(&b.id)));
        found.truncate(limit);
        Ok(found)
    }

    async fn pending_count(&self, work: Work) -> Result<usize> {
        let state = self.read();
        Ok(state.messages.iter().filter(|m| waits_for(m, work)).count())
    }

    async fn set_embeddings(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<()> {
        let mut state = self.write();
        for (id, vector) in vectors {
            if let Some(&position) = state.by_id.get(&id) {
                state.messages[position].embedding = Some(vector);
                state.dirty = true;
            }
        }
        Ok(())
    }

    async fn set_category(&self, ids: &[String], category: &str) -> Result<()> {
        let mut state = self.write();
        for id in ids {
            if let Some(&position) = state.by_id.get(id) {
                state.messages[position].category = Some(category.to_owned());
                state.dirty = true;
            }
        }
        Ok(())
    }

    async fn newest(&self) -> Result<Option<DateTime<Utc>>> {
        Ok(self.read().messages.iter().map(|m| m.at).max())
    }

    async fn message_count(&self) -> Result<usize> {
        Ok(self.read().messages.len())
    }

    async fn flush(&self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let bytes = {
            let mut state = self.write();
            if !state.dirty {
                return Ok(());
            }
            let saved = Saved {
                version: SAVED_VERSION,
                messages: state.messages.clone(),
            };
            state.dirty = false;
            serde_json::to_vec(&saved).map_err(|source| {
                Error::encode(format!("the search index {}", file.display()), source)
            })?
        };
        let file = file.clone();
        let saved = tokio::task::spawn_blocking(move || InMemoryIndex::save(&file, &bytes))
            .await
            .map_err(|join| Error::component("search index", join))?;
        if saved.is_err() {
            self.write().dirty = true;
        }
        saved
    }
}
