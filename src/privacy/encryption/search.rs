//! Search over a sealed store: each message's words kept as keyed hashes, its text
//! sealed beside them.
//!
//! An index row of a sealed store holds, in its text, the hashes of its words (HMAC-
//! SHA-256 under the store's search key, 16 hex digits each, in the order of the
//! words), then a line break and the text sealed under its owner's data key, written
//! in punctuation. The crate's indexes tokenize a row into words of letters and
//! digits: they see the hashes alone, with the words' counts and the row's length of
//! the plain text, so exact-word search ranks (BM25) as it does on a plain store.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hmac::{KeyInit, Mac};

use super::key::{is_sealed_text, sealed_text_key, DataKey, KeyOwner, KeyProvider};
use super::opened::Keys;
use super::sealed::ERASED_TEXT;
use super::transcripts::Keyring;
use crate::error::{Error, Result};
use crate::transcript::search::{tokens, LoggedMessage, SearchFilter, SearchIndex, Work};
use crate::AgentId;

/// How many bytes of a word's keyed hash an index keeps (16 hex digits): two words of
/// a store's vocabulary share one with odds of about one in 10^10 at a million words.
const WORD_HASH_BYTES: usize = 8;

/// The symbols a sealed text is written in, a hex digit each: none is a letter or a
/// digit, so no index takes them for words.
const SYMBOLS: &[u8; 16] = b"!#$%&()*+,-./:;?";

/// `index`, sealed: what it is given is kept as keyed hashes of its words and its text
/// sealed; what it returns is opened. See the module's documentation.
pub(crate) struct SealedIndex {
    inner: Arc<dyn SearchIndex>,
    keys: Arc<Keys>,
}

impl SealedIndex {
    pub(crate) fn new(inner: Arc<dyn SearchIndex>, keys: Arc<Keys>) -> Self {
        SealedIndex { inner, keys }
    }

    /// The store's search key, made on first use.
    async fn word_key(&self) -> Result<DataKey> {
        self.keys
            .data_key(&KeyOwner::Search, true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no search key".into(),
            })
    }

    /// `message` as the inner index keeps it; `None` for a line that does not open
    /// (altered or moved): left out of the index, and left as it is in its transcript.
    async fn seal(
        &self,
        mut message: LoggedMessage,
        word_key: &DataKey,
        keyring: &mut Keyring<'_>,
    ) -> Result<Option<LoggedMessage>> {
        let agent = AgentId::new(&message.agent)?;
        let owner = owner(&message, &agent);
        if is_sealed_line(&message.text) {
            match keyring.open_logged(&message, &agent).await {
                Ok(text) => message.text = text,
                Err(Error::Encryption { problem }) => {
                    tracing::warn!(message = %message.id, %problem, "a sealed line was not indexed");
                    return Ok(None);
                }
                Err(other) => return Err(other),
            }
        }
        let key = keyring
            .key(owner, true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no data key".into(),
            })?;
        let sealed = self.keys.seal_text(key, &place(&message), &message.text)?;
        message.text = format!(
            "{}\n{}",
            hashed_words(word_key, &message.text),
            to_symbols(sealed.as_bytes())
        );
        Ok(Some(message))
    }

    /// `messages` as the inner index kept them, opened: a text whose key was destroyed
    /// reads [`ERASED_TEXT`].
    async fn open(&self, mut messages: Vec<LoggedMessage>) -> Result<Vec<LoggedMessage>> {
        let mut keyring = Keyring::new(&self.keys, true);
        for message in &mut messages {
            let agent = AgentId::new(&message.agent)?;
            let Some(sealed) = sealed_part(&message.text) else {
                if is_sealed_line(&message.text) {
                    // Kept as its line is sealed (indexed by a plain index).
                    message.text = keyring.open_logged(message, &agent).await?;
                }
                continue;
            };
            let owner = owner(message, &agent);
            let key = match sealed_text_key(&sealed) {
                Some(id) => keyring.key_with_id(owner, id).await?,
                None => None,
            };
            let opened = match &key {
                Some(key) => self.keys.open_text(key, &place(message), &sealed),
                None => Some(None),
            };
            message.text = match opened {
                Some(Some(text)) => text,
                Some(None) => ERASED_TEXT.to_owned(),
                None => {
                    return Err(Error::Encryption {
                        problem: format!(
                            "search message {} does not open: it was altered, moved, or sealed under another master key",
                            message.id
                        ),
                    })
                }
            };
        }
        Ok(messages)
    }
}

/// The data keys the rows of `session_id` in a sealed store's `index` were sealed
/// under, by owner: what a key rotation must not let go of.
pub(crate) async fn keys_in_use(
    index: &dyn SearchIndex,
    session_id: &str,
) -> Result<Vec<(KeyOwner, String)>> {
    let rows = index
        .messages(&SearchFilter::new().session(session_id))
        .await?;
    let mut in_use = Vec::new();
    for row in rows {
        let Some(sealed) = sealed_part(&row.text) else {
            continue;
        };
        if let Some(id) = sealed_text_key(&sealed) {
            let agent = AgentId::new(&row.agent)?;
            in_use.push((owner(&row, &agent), id.to_owned()));
        }
    }
    Ok(in_use)
}

/// The sealed text of an index row of a sealed store.
fn sealed_part(row: &str) -> Option<String> {
    from_symbols(row.split_once('\n')?.1)
}

/// Whose key seals a message's text: its person, else its session (as for its line).
fn owner(message: &LoggedMessage, agent: &AgentId) -> KeyOwner {
    match message.person_id.as_deref() {
        Some(person) if !person.trim().is_empty() => KeyOwner::Person(person.to_owned()),
        _ => KeyOwner::Session {
            agent: agent.clone(),
            session_id: message.session_id.clone(),
        },
    }
}

/// What a message's sealed text is bound to: its row of the index.
fn place(message: &LoggedMessage) -> String {
    format!("search message\0{}", message.id)
}

/// Whether a message's text is its line's sealed value, as a record of a sealed
/// transcript carries it.
fn is_sealed_line(text: &str) -> bool {
    is_sealed_text(text) && !text.contains(char::is_whitespace)
}

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

/// `bytes` written in [`SYMBOLS`], two to a byte.
fn to_symbols(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        text.push(SYMBOLS[usize::from(b >> 4)].into());
        text.push(SYMBOLS[usize::from(b & 15)].into());
    }
    text
}

/// What [`to_symbols`] wrote, if it is that and a text.
fn from_symbols(text: &str) -> Option<String> {
    let digit = |c: u8| SYMBOLS.iter().position(|s| *s == c).map(|d| d as u8);
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for pair in bytes.chunks_exact(2) {
        out.push((digit(pair[0])? << 4) | digit(pair[1])?);
    }
    String::from_utf8(out).ok()
}

#[async_trait]
impl SearchIndex for SealedIndex {
    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        if messages.is_empty() {
            return Ok(0);
        }
        let word_key = self.word_key().await?;
        let mut keyring = Keyring::new(&self.keys, false);
        let mut sealed = Vec::with_capacity(messages.len());
        for message in messages {
            sealed.extend(self.seal(message, &word_key, &mut keyring).await?);
        }
        self.inner.add(sealed).await
    }

    async fn full_text(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<(String, f32)>> {
        let Some(word_key) = self.keys.data_key(&KeyOwner::Search, false).await? else {
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
        self.open(self.inner.messages_by_id(ids).await?).await
    }

    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>> {
        self.open(self.inner.messages(filter).await?).await
    }

    async fn pending(&self, work: Work, limit: usize) -> Result<Vec<LoggedMessage>> {
        self.open(self.inner.pending(work, limit).await?).await
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
}

/// The texts an index kept of a sealed store, in the order given: hashes and sealed
/// text apart, for a test's look at the raw rows.
#[cfg(test)]
fn parts(row: &str) -> Option<(&str, String)> {
    let (hashes, symbols) = row.split_once('\n')?;
    Some((hashes, from_symbols(symbols)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::search::{InMemoryIndex, Search, SearchQuery};

    fn message(n: usize, person: &str, text: &str) -> LoggedMessage {
        LoggedMessage {
            id: format!("main/s{n}/{n}"),
            agent: "main".into(),
            session_id: format!("s{n}"),
            session_key: None,
            person_id: Some(person.into()),
            agent_identity: None,
            channel: Some("sms".into()),
            direction: None,
            correlation_id: None,
            at: DateTime::from_timestamp(1_700_000_000 + n as i64, 0).expect("a time"),
            text: text.into(),
            category: None,
            embedding: None,
        }
    }

    fn keys() -> Arc<Keys> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let files = super::super::KeyFiles::open(
            dir.keep().join("keys"),
            super::super::MasterKey::generate().expect("a key"),
        )
        .expect("key files");
        Arc::new(Keys::new(Arc::new(files)))
    }

    #[test]
    fn a_sealed_text_written_in_symbols_reads_back_and_holds_no_word() {
        let text = "enc1:0a1b2c3d:SGVsbG8-_w";
        let written = to_symbols(text.as_bytes());
        assert!(tokens(&written).is_empty());
        assert_eq!(from_symbols(&written).as_deref(), Some(text));
        assert_eq!(from_symbols("!#a"), None);
        assert_eq!(from_symbols(""), None);
    }

    #[tokio::test]
    async fn a_sealed_index_ranks_like_a_plain_one_and_keeps_no_word_in_plain() {
        let texts = [
            "Can I swap my Thursday shift?",
            "My roster for next week, please",
            "Rosters rosters everywhere: swap the roster",
            "Booking a table for two",
        ];
        let messages: Vec<_> = texts
            .iter()
            .enumerate()
            .map(|(n, text)| message(n, if n % 2 == 0 { "ana" } else { "ben" }, text))
            .collect();
        let plain = Arc::new(InMemoryIndex::new());
        plain.add(messages.clone()).await.expect("added");
        let raw = Arc::new(InMemoryIndex::new());
        let sealed = SealedIndex::new(raw.clone(), keys());
        assert_eq!(sealed.add(messages).await.expect("added"), 4);

        for query in ["roster", "swap shift", "table", "nothing here"] {
            let want = plain.full_text(query, &SearchFilter::new(), 10).await;
            let got = sealed.full_text(query, &SearchFilter::new(), 10).await;
            let (got, want) = (got.expect("searched"), want.expect("searched"));
            // The same hits in the same order; the scores but for rounding (the
            // query's words are summed in another order).
            assert_eq!(got.len(), want.len(), "{query}");
            for ((id, score), (want_id, want_score)) in got.iter().zip(&want) {
                assert_eq!(id, want_id, "{query}");
                assert!((score - want_score).abs() <= 1e-5 * want_score, "{query}");
            }
        }
        let hits = Search::shared(Arc::new(sealed))
            .search(&SearchQuery::text("rosters"))
            .await
            .expect("searched");
        assert_eq!(hits[0].message.text, texts[2]);
        assert!(hits[0].snippet.contains("roster"));

        for row in raw.messages(&SearchFilter::new()).await.expect("rows") {
            let lower = row.text.to_lowercase();
            for word in ["swap", "roster", "thursday", "table", "booking"] {
                assert!(!lower.contains(word), "{word} in {:?}", row.text);
            }
            let (hashes, sealed) = parts(&row.text).expect("a sealed row");
            assert!(is_sealed_text(&sealed));
            assert!(hashes.split(' ').all(|h| h.len() == 16 || h.is_empty()));
        }
    }
}
