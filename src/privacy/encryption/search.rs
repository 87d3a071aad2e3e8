//! Search over a sealed store: the index keeps each message's words as keyed hashes,
//! and its text is read from its transcript line when the message is returned.
//!
//! A row's text in the index is the hashes of its words (HMAC-SHA-256 under the
//! store's search key, 16 hex digits each, in the order of the words). The crate's
//! indexes tokenize it into those hashes, with the words' counts and the row's length
//! of the plain text, so exact-word search ranks (BM25) as on a plain store. The text
//! itself stays only where it was sealed, in its line, under its owner's data key: an
//! erase, a key rotation or a restored backup treats it as it treats the line.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{KeyInit, Mac};

use super::key::{DataKey, KeyOwner, KeyProvider};
use super::opened::Keys;
use super::sealed::{is_sealed_line, ERASED_TEXT};
use super::transcripts::Keyring;
use crate::error::{Error, Result};
use crate::transcript::search::{tokens, LoggedMessage, SearchFilter, SearchIndex, Work};
use crate::transcript::{LogQuery, TranscriptStore};
use crate::AgentId;

/// How many bytes of a word's keyed hash an index keeps (16 hex digits): two words of
/// a store's vocabulary share one with odds of about one in 10^7 at a million words.
const WORD_HASH_BYTES: usize = 8;

/// `index`, sealed: it is given the words of each message as keyed hashes, and the
/// messages it returns get their texts from their lines in `transcripts` (as stored),
/// opened. See the module's documentation.
pub(crate) struct SealedIndex {
    inner: Arc<dyn SearchIndex>,
    keys: Arc<Keys>,
    transcripts: Arc<dyn TranscriptStore>,
}

impl SealedIndex {
    pub(crate) fn new(
        inner: Arc<dyn SearchIndex>,
        keys: Arc<Keys>,
        transcripts: Arc<dyn TranscriptStore>,
    ) -> Self {
        SealedIndex {
            inner,
            keys,
            transcripts,
        }
    }

    /// The store's search key; made on first use when `create`.
    async fn word_key(&self, create: bool) -> Result<Option<DataKey>> {
        let key = self.keys.data_key(&KeyOwner::Search, create).await?;
        if create && key.is_none() {
            return Err(Error::Encryption {
                problem: "the key provider made no search key".into(),
            });
        }
        Ok(key)
    }

    /// `rows` of the inner index with their texts, read from their lines and opened.
    /// A row whose line is gone (its transcript removed), or does not open (altered:
    /// with a warning), reads [`ERASED_TEXT`]: it is still returned, so that an erase
    /// or a retention sweep finds it to remove it, and background work moves past it.
    async fn with_texts(&self, mut rows: Vec<LoggedMessage>) -> Result<Vec<LoggedMessage>> {
        // Each session's rows' first and last times.
        let mut sessions: BTreeMap<(&str, &str), Span> = BTreeMap::new();
        for row in &rows {
            let span = sessions
                .entry((&row.agent, &row.session_id))
                .or_insert((row.at, row.at));
            *span = (span.0.min(row.at), span.1.max(row.at));
        }
        let between = |mut query: LogQuery, (since, until): Span| {
            query.since = Some(since);
            query.until = Some(until + chrono::Duration::milliseconds(1));
            query
        };
        // A few sessions are read one by one, each between its rows' times; more, in
        // one pass over the log between the rows' times.
        let queries: Vec<LogQuery> = if sessions.len() <= SESSIONS_READ_ONE_BY_ONE {
            sessions
                .into_iter()
                .map(|((agent, session_id), span)| {
                    Ok(between(
                        LogQuery::session(AgentId::new(agent)?, session_id),
                        span,
                    ))
                })
                .collect::<Result<_>>()?
        } else {
            let since = sessions.values().map(|span| span.0).min();
            let until = sessions.values().map(|span| span.1).max();
            match since.zip(until) {
                Some(span) => vec![between(LogQuery::new(), span)],
                None => Vec::new(),
            }
        };
        let wanted: HashSet<&str> = rows.iter().map(|row| row.id.as_str()).collect();
        let mut keyring = Keyring::new(&self.keys, true);
        let mut texts: HashMap<String, String> = HashMap::new();
        for query in queries {
            for mut record in self.transcripts.query_log(&query).await? {
                let id = LoggedMessage::from_record(&record).id;
                if !wanted.contains(id.as_str()) {
                    continue;
                }
                match keyring.open_record(&mut record).await {
                    Ok(()) => {
                        texts.insert(id, record.text);
                    }
                    Err(Error::Encryption { problem }) => {
                        tracing::warn!(message = %id, %problem, "a search hit's line does not open");
                    }
                    Err(other) => return Err(other),
                }
            }
        }
        for row in &mut rows {
            row.text = texts
                .remove(&row.id)
                .unwrap_or_else(|| ERASED_TEXT.to_owned());
        }
        Ok(rows)
    }

    /// `messages` whose lines' keys were gone when they were read, read again with
    /// their keys asked anew: a rotation may have sealed them anew and retired the key
    /// they were read under. Those whose keys are still gone (an erase) are left out:
    /// nothing of them is indexed.
    async fn read_again(
        &self,
        messages: Vec<LoggedMessage>,
        word_key: &DataKey,
    ) -> Result<Vec<LoggedMessage>> {
        let mut keyring = Keyring::new(&self.keys, false);
        let mut again = Vec::new();
        let mut sessions: HashMap<(String, String), Vec<LoggedMessage>> = HashMap::new();
        for message in messages {
            let session = (message.agent.clone(), message.session_id.clone());
            sessions.entry(session).or_default().push(message);
        }
        for ((agent, session_id), messages) in sessions {
            let query = LogQuery::session(AgentId::new(&agent)?, session_id);
            let mut records: HashMap<String, _> = HashMap::new();
            for record in self.transcripts.query_log(&query).await? {
                records.insert(LoggedMessage::from_record(&record).id, record);
            }
            for mut message in messages {
                let Some(mut record) = records.remove(&message.id) else {
                    continue;
                };
                if !keyring.can_open(&record).await?
                    || keyring.open_record(&mut record).await.is_err()
                {
                    continue;
                }
                message.text = hashed_words(word_key, &record.text);
                again.push(message);
            }
        }
        Ok(again)
    }
}

/// The first and last times of a session's rows.
type Span = (DateTime<Utc>, DateTime<Utc>);

/// Up to how many sessions a read of rows' texts reads one by one; more are read in one
/// pass over the message log between the rows' times.
const SESSIONS_READ_ONE_BY_ONE: usize = 16;

/// The keyed hash of one word, in hex.
fn word_hash(key: &DataKey, word: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(b"agent-sessions word v1\0");
    mac.update(word.as_bytes());
    let digest = mac.finalize().into_bytes();
    super::key::hex(&digest[..WORD_HASH_BYTES])
}

/// The words of `text` ([`tokens`]), each as its keyed hash, one space apart.
fn hashed_words(key: &DataKey, text: &str) -> String {
    let words: Vec<String> = tokens(text)
        .iter()
        .map(|word| word_hash(key, word))
        .collect();
    words.join(" ")
}

#[async_trait]
impl SearchIndex for SealedIndex {
    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        let Some(word_key) = self.word_key(!messages.is_empty()).await? else {
            return Ok(0);
        };
        let mut keyring = Keyring::new(&self.keys, false);
        let mut hashed = Vec::with_capacity(messages.len());
        let mut key_gone = Vec::new();
        for mut message in messages {
            if is_sealed_line(&message.text) {
                let agent = AgentId::new(&message.agent)?;
                match keyring.open_logged(&message, &agent).await {
                    Ok(Some(text)) => message.text = text,
                    Ok(None) => {
                        key_gone.push(message);
                        continue;
                    }
                    Err(Error::Encryption { problem }) => {
                        // Left out, and left as it is in its transcript.
                        tracing::warn!(message = %message.id, %problem, "a sealed line was not indexed");
                        continue;
                    }
                    Err(other) => return Err(other),
                }
            }
            message.text = hashed_words(&word_key, &message.text);
            hashed.push(message);
        }
        hashed.extend(self.read_again(key_gone, &word_key).await?);
        self.inner.add(hashed).await
    }

    async fn full_text(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>> {
        let Some(word_key) = self.word_key(false).await? else {
            // Nothing was indexed yet.
            return Ok(Vec::new());
        };
        self.inner
            .full_text(&hashed_words(&word_key, query), filter, limit)
            .await
    }

    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>> {
        self.inner.nearest(vector, filter, limit).await
    }

    async fn messages_by_id(&self, ids: &[String]) -> Result<Vec<LoggedMessage>> {
        self.with_texts(self.inner.messages_by_id(ids).await?).await
    }

    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>> {
        self.with_texts(self.inner.messages(filter).await?).await
    }

    async fn pending(&self, work: Work, limit: usize) -> Result<Vec<LoggedMessage>> {
        self.with_texts(self.inner.pending(work, limit).await?)
            .await
    }

    async fn pending_count(&self, work: Work) -> Result<usize> {
        self.inner.pending_count(work).await
    }

    async fn set_embeddings(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<()> {
        self.inner.set_embeddings(vectors).await
    }

    async fn set_category(&self, ids: &[String], category: &str) -> Result<()> {
        self.inner.set_category(ids, category).await
    }

    async fn newest(&self) -> Result<Option<DateTime<Utc>>> {
        self.inner.newest().await
    }

    async fn message_count(&self) -> Result<usize> {
        self.inner.message_count().await
    }

    async fn remove(&self, ids: &[String]) -> Result<usize> {
        self.inner.remove(ids).await
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    fn reads_sealed_lines(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_hash_one_to_one_into_words_an_index_takes_as_they_are() {
        let key = DataKey::generate().expect("a key");
        let text = "Swap my ROSTERS, please: my roster!";
        let hashed = hashed_words(&key, text);
        // One word for each, equal words alike (plurals folded first), nothing plain.
        assert_eq!(tokens(&hashed), hashed.split(' ').collect::<Vec<_>>());
        let words: Vec<&str> = hashed.split(' ').collect();
        assert_eq!(words.len(), tokens(text).len());
        assert_eq!(words[2], words[5]);
        assert_eq!(words[1], words[4]);
        assert_ne!(words[0], words[1]);
        assert!(words.iter().all(|w| w.len() == 2 * WORD_HASH_BYTES));
        assert!(!hashed.contains("roster") && !hashed.contains("swap"));
        // Another key, other hashes.
        let other = DataKey::generate().expect("a key");
        assert_ne!(hashed_words(&other, text), hashed);
    }
}
