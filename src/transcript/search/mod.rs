//! Search, categorisation and analytics over the message log.
//!
//! The message log is what [`Session::log_message`](crate::manager::Session::log_message)
//! writes into transcripts. [`Search`] copies it, incrementally, into a
//! [`SearchIndex`] and answers [`Search::search`]: full text (BM25) always, plus
//! semantic similarity when the host gives it an [`Embedder`], ranked together. In the
//! background ([`Search::process_pending`], [`Search::spawn_background`]) each exchange
//! (an inbound message and its replies) gets a category from a [`Categorizer`] and each message a
//! vector; what is not yet processed is found again after a restart, because the
//! index itself records what is done. [`analytics()`] counts by category, channel,
//! agent identity, day and week, computes trends, and finds a person's recurring topic
//! ("You've asked about rosters 3 times this week").
//!
//! ```
//! use agent_sessions::transcript::search::{InMemoryIndex, Search, SearchQuery};
//! # use agent_sessions::prelude::*;
//! # use agent_sessions::manager::LogMessage;
//! # use agent_sessions::transcript::InMemoryTranscriptStore;
//! # use std::sync::Arc;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let transcripts = Arc::new(InMemoryTranscriptStore::new());
//! let manager = SessionManager::builder(InMemoryStore::new())
//!     .transcripts(transcripts.clone())
//!     .build()?;
//! let message = InboundMessage::direct("sms", "+15550100", "When is my next roster?");
//! let resolution = manager.resolve(&message).await?;
//! manager.session(&resolution.key).log_message(LogMessage::from_inbound(&message)).await?;
//!
//! let search = Search::new(InMemoryIndex::new());
//! search.sync(&*transcripts).await?;
//! let hits = search.search(&SearchQuery::text("rosters")).await?;
//! assert_eq!(hits[0].message.text, "When is my next roster?");
//! # Ok(())
//! # }
//! ```

mod analytics;
mod categorize;
mod in_memory;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod postings;
mod text;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub use analytics::{analytics, recurring_topic, Analytics, RecurringTopic, Trend};
pub use categorize::{Categorizer, Exchange, KeywordCategorizer};
pub use in_memory::InMemoryIndex;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use in_memory::{bm25, bm25_idf};
pub use text::{snippet, tokens};

use crate::error::Result;
use crate::transcript::{Direction, LogQuery, LogRecord, TranscriptStore};

/// One message of the log, as the index keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedMessage {
    /// `<agent>/<session id>/<offset>`: unique, stable across syncs.
    pub id: String,
    /// The agent whose transcript holds it.
    pub agent: String,
    /// The session instance.
    pub session_id: String,
    /// The session key, when the log recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The canonical person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_id: Option<String>,
    /// The agent identity (shared by its engine variants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_identity: Option<String>,
    /// The channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// In or out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Correlates an inbound message with its replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
    /// The text.
    pub text: String,
    /// Its exchange's category, once categorised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Its vector, once embedded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
}

impl LoggedMessage {
    /// The index's view of a log record.
    pub(crate) fn from_record(record: &LogRecord) -> Self {
        LoggedMessage {
            id: format!("{}/{}/{}", record.agent, record.session_id, record.offset.0),
            agent: record.agent.to_string(),
            session_id: record.session_id.clone(),
            session_key: record.log.session_key.clone(),
            person_id: record.log.person_id.clone(),
            agent_identity: record.log.agent_identity.clone(),
            channel: record.log.channel.clone(),
            direction: record.log.direction,
            correlation_id: record.log.correlation_id.clone(),
            at: record.at,
            text: match record.log.extra.get(crate::privacy::SEALED_LINE) {
                // A sealed line's record: its sealed value, which a sealed store's
                // index opens (`Search::sync` gives it no other).
                Some(serde_json::Value::String(sealed)) if record.text.is_empty() => sealed.clone(),
                _ => record.text.clone(),
            },
            category: None,
            embedding: None,
        }
    }
}

/// Which messages a search, a listing or an analysis looks at. Every condition is
/// optional; all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchFilter {
    /// Only this person's messages (both directions of their conversations).
    pub person_id: Option<String>,
    /// Only this agent identity (all its variants).
    pub agent_identity: Option<String>,
    /// Only this channel.
    pub channel: Option<String>,
    /// Only this session instance.
    pub session_id: Option<String>,
    /// Only this category.
    pub category: Option<String>,
    /// Only messages at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only messages before this time.
    pub until: Option<DateTime<Utc>>,
}

impl SearchFilter {
    /// Every message.
    pub fn new() -> Self {
        SearchFilter::default()
    }

    /// Only `person`'s messages.
    pub fn person(mut self, person: impl Into<String>) -> Self {
        self.person_id = Some(person.into());
        self
    }

    /// Only messages with `identity`.
    pub fn agent_identity(mut self, identity: impl Into<String>) -> Self {
        self.agent_identity = Some(identity.into());
        self
    }

    /// Only messages on `channel`.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = Some(channel.into());
        self
    }

    /// Only one session instance.
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Only messages of `category`.
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// Only messages in `[since, until)`.
    pub fn between(mut self, since: DateTime<Utc>, until: DateTime<Utc>) -> Self {
        self.since = Some(since);
        self.until = Some(until);
        self
    }

    /// Whether `message` passes.
    pub fn matches(&self, message: &LoggedMessage) -> bool {
        fn eq(wanted: &Option<String>, actual: &Option<String>) -> bool {
            wanted
                .as_deref()
                .is_none_or(|w| actual.as_deref() == Some(w))
        }
        eq(&self.person_id, &message.person_id)
            && eq(&self.agent_identity, &message.agent_identity)
            && eq(&self.channel, &message.channel)
            && eq(&self.category, &message.category)
            && self
                .session_id
                .as_deref()
                .is_none_or(|s| s == message.session_id)
            && self.since.is_none_or(|since| message.at >= since)
            && self.until.is_none_or(|until| message.at < until)
    }
}

/// A search: words to look for, which messages, how many hits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// The words (full text) and the meaning (semantic, with an embedder).
    pub text: String,
    /// Which messages.
    pub filter: SearchFilter,
    /// At most this many hits (default 10).
    pub limit: usize,
}

impl SearchQuery {
    /// A search for `text` over every message, 10 hits.
    pub fn text(text: impl Into<String>) -> Self {
        SearchQuery {
            text: text.into(),
            filter: SearchFilter::default(),
            limit: 10,
        }
    }

    /// Only messages passing `filter`.
    pub fn filter(mut self, filter: SearchFilter) -> Self {
        self.filter = filter;
        self
    }

    /// At most `limit` hits.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// The message (its session is `message.session_id` / `message.session_key`).
    pub message: LoggedMessage,
    /// The combined score, 0–1 (higher is better).
    pub score: f32,
    /// The full-text part of the score, normalised to the best hit (0 if none).
    pub text_score: f32,
    /// The cosine similarity to the query (0 without an embedder).
    pub semantic_score: f32,
    /// The passage around the first matched word.
    pub snippet: String,
}

/// Cosine similarity of two vectors of the same length (`None` otherwise or for a
/// zero vector).
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() {
        return None;
    }
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let norms = norm(a) * norm(b);
    (norms > 0.0).then(|| dot / norms)
}

/// The best `limit` of `(id, score)` pairs, best first (ties by id).
pub(crate) fn best(mut scored: Vec<(String, f32)>, limit: usize) -> Vec<(String, f32)> {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

/// Background work an index keeps track of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Work {
    /// Messages without a category.
    Categorize,
    /// Messages without a vector.
    Embed,
}

/// Where search data lives: messages, a full-text index, vectors and categories.
///
/// [`InMemoryIndex`] is the in-crate implementation (in memory, optionally saved to a
/// file). Every method is one atomic step; `add` ignores messages it already has.
#[async_trait]
pub trait SearchIndex: Send + Sync {
    /// Adds the messages not yet indexed (by id); returns how many were new.
    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize>;

    /// The best `limit` full-text matches of `query` among messages passing `filter`,
    /// as `(id, score)` best first; scores are positive and comparable within a call.
    async fn full_text(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>>;

    /// The `limit` messages passing `filter` whose vectors are most similar (cosine) to
    /// `vector`, best first, with their exact similarities. An index may find them
    /// approximately (PostgreSQL's quantized scan: which messages, not their scores,
    /// is approximate) if it measures and documents its recall.
    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>>;

    /// The messages with these ids (unknown ids are skipped), without vectors.
    async fn messages_by_id(&self, ids: &[String]) -> Result<Vec<LoggedMessage>>;

    /// Every message passing `filter`, oldest first, without vectors.
    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>>;

    /// Up to `limit` messages still waiting for `work`, oldest first.
    async fn pending(&self, work: Work, limit: usize) -> Result<Vec<LoggedMessage>>;

    /// How many messages are waiting for `work`.
    async fn pending_count(&self, work: Work) -> Result<usize>;

    /// Stores vectors.
    async fn set_embeddings(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<()>;

    /// Sets the category of these messages.
    async fn set_category(&self, ids: &[String], category: &str) -> Result<()>;

    /// The newest message time indexed (where the next sync starts).
    async fn newest(&self) -> Result<Option<DateTime<Utc>>>;

    /// How many messages are indexed.
    async fn message_count(&self) -> Result<usize>;

    /// Removes the messages with these ids, their words and their vectors, so that
    /// nothing of them is found or kept; returns how many were there. What
    /// [`SessionManager::forget_person`](crate::SessionManager::forget_person) erases
    /// the index with (then [`flush`](Self::flush)es it). The crate's indexes implement
    /// it; the default is [`Error::NotConfigured`](crate::Error::NotConfigured).
    async fn remove(&self, ids: &[String]) -> Result<usize> {
        let _ = ids;
        Err(crate::Error::NotConfigured {
            what: "removing messages from this search index (SearchIndex::remove)",
        })
    }

    /// Makes everything so far durable (a no-op for indexes that always are).
    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Whether it opens the sealed lines of a store with encryption, given as their
    /// sealed values: the index of
    /// [`SessionManager::search_index`](crate::SessionManager::search_index) on a
    /// manager with the store's keys does. [`Search::sync`] refuses sealed lines to
    /// any other index, which would keep them unsearchable. The default: `false`.
    fn reads_sealed_lines(&self) -> bool {
        false
    }
}

/// Turns texts into vectors: the host's embedding model, called in batches.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// One vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

#[async_trait]
impl<T: Embedder + ?Sized> Embedder for Arc<T> {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        (**self).embed(texts).await
    }
}

/// How much each kind of match counts in a hybrid ranking (both 0.5 by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridWeights {
    /// The weight of the normalised full-text score.
    pub text: f32,
    /// The weight of the cosine similarity.
    pub semantic: f32,
}

impl Default for HybridWeights {
    fn default() -> Self {
        HybridWeights {
            text: 0.5,
            semantic: 0.5,
        }
    }
}

/// What background processing has done and what is left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Messages indexed in total.
    pub indexed: usize,
    /// Messages categorised by this process.
    pub categorized: usize,
    /// Messages embedded by this process.
    pub embedded: usize,
    /// Messages still waiting for a category.
    pub pending_categories: usize,
    /// Messages still waiting for a vector (0 without an embedder).
    pub pending_embeddings: usize,
}

/// Search over the message log: an index, an optional embedder, a categorizer.
#[derive(Clone)]
pub struct Search {
    index: Arc<dyn SearchIndex>,
    embedder: Option<Arc<dyn Embedder>>,
    categorizer: Arc<dyn Categorizer>,
    weights: HybridWeights,
}

impl std::fmt::Debug for Search {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Search")
            .field("embedder", &self.embedder.is_some())
            .field("weights", &self.weights)
            .finish_non_exhaustive()
    }
}

/// How many messages one background step handles.
const BATCH: usize = 64;

/// How far back a sync looks behind the newest indexed message, for appends whose
/// clocks lag a little.
const SYNC_OVERLAP: chrono::Duration = chrono::Duration::minutes(5);

impl Search {
    /// Search over `index`, full text only, categorised by [`KeywordCategorizer`].
    pub fn new(index: impl SearchIndex + 'static) -> Self {
        Search::shared(Arc::new(index))
    }

    /// Search over an index shared with others (a [`Backend`](crate::store::Backend)'s
    /// [`search_index`](crate::store::Backend::search_index), for one).
    pub fn shared(index: Arc<dyn SearchIndex>) -> Self {
        Search {
            index,
            embedder: None,
            categorizer: Arc::new(KeywordCategorizer::default()),
            weights: HybridWeights::default(),
        }
    }

    /// Adds semantic search with `embedder`.
    pub fn embedder(mut self, embedder: impl Embedder + 'static) -> Self {
        self.embedder = Some(Arc::new(embedder));
        self
    }

    /// Categorises with `categorizer` (a call to a small, fast model, or rules).
    pub fn categorizer(mut self, categorizer: impl Categorizer + 'static) -> Self {
        self.categorizer = Arc::new(categorizer);
        self
    }

    /// Weighs full-text and semantic scores with `weights`.
    pub fn weights(mut self, weights: HybridWeights) -> Self {
        self.weights = weights;
        self
    }

    /// The index.
    pub fn index(&self) -> &dyn SearchIndex {
        &*self.index
    }

    /// Copies the log records written since the last sync into the index; returns how
    /// many were new. Idempotent: records already indexed are skipped.
    /// [`Error::Encryption`](crate::Error::Encryption) for sealed lines (a store with
    /// encryption) given to an index that cannot read them
    /// ([`SearchIndex::reads_sealed_lines`]).
    pub async fn sync(&self, transcripts: &dyn TranscriptStore) -> Result<usize> {
        let mut query = LogQuery::new();
        if let Some(newest) = self.index.newest().await? {
            query = query.since(newest - SYNC_OVERLAP);
        }
        let records = transcripts.query_log(&query).await?;
        let sealed =
            |record: &&LogRecord| record.log.extra.contains_key(crate::privacy::SEALED_LINE);
        if !self.index.reads_sealed_lines() {
            if let Some(record) = records.iter().find(sealed) {
                return Err(crate::Error::Encryption {
                    problem: format!(
                        "session {} of {} is sealed: search a sealed store through SessionManager::search_index, on a manager with its keys",
                        record.session_id, record.agent
                    ),
                });
            }
        }
        let messages = records.iter().map(LoggedMessage::from_record).collect();
        let added = self.index.add(messages).await?;
        if added > 0 {
            self.index.flush().await?;
        }
        Ok(added)
    }

    /// The best hits for `query`: full-text matches, and with an embedder also the
    /// semantically nearest messages, ranked by the weighted sum of the normalised
    /// full-text score and the cosine similarity. An embedder that fails is logged and
    /// the search is answered by full text alone.
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let pool = query.limit.saturating_mul(4).max(20);
        let text_hits = self
            .index
            .full_text(&query.text, &query.filter, pool)
            .await?;
        let semantic_hits = match &self.embedder {
            Some(embedder) if !query.text.trim().is_empty() => {
                match embedder.embed(std::slice::from_ref(&query.text)).await {
                    Ok(mut vectors) if vectors.len() == 1 => {
                        let vector = vectors.remove(0);
                        self.index.nearest(&vector, &query.filter, pool).await?
                    }
                    Ok(vectors) => {
                        tracing::warn!(
                            got = vectors.len(),
                            "the embedder returned the wrong number of vectors; full text only"
                        );
                        Vec::new()
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the embedder failed; full text only");
                        Vec::new()
                    }
                }
            }
            _ => Vec::new(),
        };
        let best_text = text_hits.first().map_or(0.0, |(_, s)| *s);
        let mut scores: HashMap<String, (f32, f32)> = HashMap::new();
        for (id, score) in &text_hits {
            scores.entry(id.clone()).or_default().0 = score / best_text;
        }
        for (id, similarity) in &semantic_hits {
            scores.entry(id.clone()).or_default().1 = similarity.clamp(0.0, 1.0);
        }
        let semantic = !semantic_hits.is_empty();
        let combine = |(text, sim): (f32, f32)| {
            if semantic {
                self.weights.text * text + self.weights.semantic * sim
            } else {
                text
            }
        };
        let mut ranked: Vec<(String, (f32, f32))> = scores.into_iter().collect();
        ranked.sort_by(|a, b| {
            combine(b.1)
                .total_cmp(&combine(a.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        ranked.truncate(query.limit);
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
        let mut messages: HashMap<String, LoggedMessage> = self
            .index
            .messages_by_id(&ids)
            .await?
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        Ok(ranked
            .into_iter()
            .filter_map(|(id, parts)| {
                let message = messages.remove(&id)?;
                Some(SearchHit {
                    snippet: snippet(&message.text, &query.text),
                    message,
                    score: combine(parts),
                    text_score: parts.0,
                    semantic_score: parts.1,
                })
            })
            .collect())
    }

    /// One step of background work: categorises up to one batch of exchanges and
    /// embeds up to one batch of messages. Returns the progress after the step.
    pub async fn process_pending(&self) -> Result<Progress> {
        let mut progress = Progress::default();
        let waiting = self.index.pending(Work::Categorize, BATCH).await?;
        let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
        for message in waiting {
            if done.contains(&message.id) {
                continue;
            }
            let session = self
                .index
                .messages(&SearchFilter::new().session(message.session_id.clone()))
                .await?;
            let exchange = Exchange::around(&session, &message.id);
            let category = match exchange.category() {
                Some(known) => known.to_owned(),
                None => self.categorizer.categorize(&exchange).await?,
            };
            let ids = exchange.uncategorized_ids();
            self.index.set_category(&ids, &category).await?;
            progress.categorized += ids.len();
            done.extend(ids);
        }
        if let Some(embedder) = &self.embedder {
            let waiting = self.index.pending(Work::Embed, BATCH).await?;
            if !waiting.is_empty() {
                let texts: Vec<String> = waiting.iter().map(|m| m.text.clone()).collect();
                let vectors = embedder.embed(&texts).await?;
                if vectors.len() != waiting.len() {
                    return Err(crate::Error::component(
                        "embedder",
                        format!(
                            "the embedder returned {} vectors for {} texts",
                            vectors.len(),
                            waiting.len()
                        ),
                    ));
                }
                progress.embedded = vectors.len();
                self.index
                    .set_embeddings(waiting.into_iter().map(|m| m.id).zip(vectors).collect())
                    .await?;
            }
        }
        self.index.flush().await?;
        progress.indexed = self.index.message_count().await?;
        progress.pending_categories = self.index.pending_count(Work::Categorize).await?;
        if self.embedder.is_some() {
            progress.pending_embeddings = self.index.pending_count(Work::Embed).await?;
        }
        Ok(progress)
    }

    /// Syncs and processes until nothing is pending; returns the totals.
    pub async fn process_all(&self, transcripts: &dyn TranscriptStore) -> Result<Progress> {
        self.sync(transcripts).await?;
        let mut total = Progress::default();
        loop {
            let step = self.process_pending().await?;
            total.categorized += step.categorized;
            total.embedded += step.embedded;
            total.indexed = step.indexed;
            total.pending_categories = step.pending_categories;
            total.pending_embeddings = step.pending_embeddings;
            if (step.categorized == 0 && step.embedded == 0)
                || (step.pending_categories == 0 && step.pending_embeddings == 0)
            {
                return Ok(total);
            }
        }
    }

    /// Counts over the messages passing `filter`, with trends over the `window` ending
    /// at `now` (see [`analytics()`]).
    pub async fn analytics(
        &self,
        filter: &SearchFilter,
        now: DateTime<Utc>,
        window: chrono::Duration,
    ) -> Result<Analytics> {
        Ok(analytics(&self.index.messages(filter).await?, now, window))
    }

    /// The topic `person` keeps asking about this week, if any (see
    /// [`recurring_topic()`]); its [`RecurringTopic::sentence`] is ready for a prompt
    /// section.
    pub async fn recurring_topic(
        &self,
        person: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RecurringTopic>> {
        let filter = SearchFilter::new().person(person).between(
            now - chrono::Duration::days(7),
            now + chrono::Duration::milliseconds(1),
        );
        Ok(recurring_topic(
            &self.index.messages(&filter).await?,
            person,
            now,
        ))
    }

    /// Runs sync and processing every `every` on a tokio task, off any reply path.
    /// Progress is published on the returned receiver; errors are logged and retried
    /// at the next tick. Dropping the [`Background`] stops the task.
    pub fn spawn_background(
        &self,
        transcripts: Arc<dyn TranscriptStore>,
        every: Duration,
    ) -> Background {
        let (sender, progress) = watch::channel(Progress::default());
        let search = self.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            let mut totals = Progress::default();
            loop {
                ticks.tick().await;
                match search.process_all(&*transcripts).await {
                    Ok(step) => {
                        totals.categorized += step.categorized;
                        totals.embedded += step.embedded;
                        totals.indexed = step.indexed;
                        totals.pending_categories = step.pending_categories;
                        totals.pending_embeddings = step.pending_embeddings;
                        let _ = sender.send(totals);
                    }
                    Err(error) => tracing::warn!(%error, "search background work failed; retrying"),
                }
            }
        });
        Background { task, progress }
    }
}

/// The background task of [`Search::spawn_background`]; stops when dropped.
#[derive(Debug)]
pub struct Background {
    task: tokio::task::JoinHandle<()>,
    /// Progress after each round.
    pub progress: watch::Receiver<Progress>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.task.abort();
    }
}
