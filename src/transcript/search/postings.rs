//! The full-text index of the SQL stores: an inverted index kept in a table of packed
//! blocks, ranked by BM25 in the client — the tokens and the formula of
//! [`InMemoryIndex`](crate::transcript::search::InMemoryIndex), so every index of the crate ranks alike.
//!
//! `search_postings` holds, for each word, its postings — (message, occurrences, the
//! message's length in words) — in blocks of up to [`BLOCK`] postings, each block
//! varint-packed with message numbers as deltas (messages are numbered in insertion
//! order: SQLite's `rowid`, PostgreSQL's `seq`). `search_postings_state` holds how far
//! the index goes (the last message number indexed), how many messages and how many
//! words it holds (BM25's collection statistics). A query reads the blocks of its
//! words only — a few hundred kilobytes for the commonest words of 100,000 messages —
//! where ranking inside FTS5 or `ts_rank` scores every matching row.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::transcript::search::{bm25, bm25_idf, tokens};

/// Postings per block: small enough that appending to a word's last block rewrites
/// little (and a PostgreSQL block stays under its TOAST threshold), large enough that
/// a common word is a few hundred rows.
pub(crate) const BLOCK: usize = 256;

/// One message containing a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posting {
    /// The message's number (insertion order).
    pub(crate) doc: i64,
    /// How often the word occurs in it.
    pub(crate) tf: u32,
    /// How many words it has.
    pub(crate) length: u32,
}

/// One stored block: its number within its word, how many postings, the packed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) number: i64,
    pub(crate) count: usize,
    pub(crate) data: Vec<u8>,
}

/// The collection statistics BM25 needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// The last message number indexed.
    pub(crate) through: i64,
    /// Messages indexed.
    pub(crate) messages: i64,
    /// Words in them.
    pub(crate) words: i64,
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn get_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = *data.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Packs postings (in message order): the first message number whole, then deltas.
pub(crate) fn encode(postings: &[Posting]) -> Vec<u8> {
    let mut out = Vec::with_capacity(postings.len() * 4);
    let mut previous = 0i64;
    for posting in postings {
        put_varint(&mut out, posting.doc.wrapping_sub(previous) as u64);
        put_varint(&mut out, u64::from(posting.tf));
        put_varint(&mut out, u64::from(posting.length));
        previous = posting.doc;
    }
    out
}

/// Unpacks a block into `into`; a damaged block yields what precedes the damage.
pub(crate) fn decode(data: &[u8], into: &mut Vec<Posting>) {
    let mut at = 0;
    let mut previous = 0i64;
    while at < data.len() {
        let (Some(delta), Some(tf), Some(length)) = (
            get_varint(data, &mut at),
            get_varint(data, &mut at),
            get_varint(data, &mut at),
        ) else {
            return;
        };
        previous = previous.wrapping_add(delta as i64);
        into.push(Posting {
            doc: previous,
            tf: tf as u32,
            length: length as u32,
        });
    }
}

/// The postings of new messages `(number, text)`, by word (words in order, postings in
/// message order), and how many words the messages have.
pub(crate) fn postings_of(messages: &[(i64, String)]) -> (BTreeMap<String, Vec<Posting>>, i64) {
    let mut by_word: BTreeMap<String, Vec<Posting>> = BTreeMap::new();
    let mut words = 0i64;
    let mut ordered: Vec<&(i64, String)> = messages.iter().collect();
    ordered.sort_by_key(|(doc, _)| *doc);
    for (doc, text) in ordered {
        let tokens = tokens(text);
        let length = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        words += i64::from(length);
        let mut counts: HashMap<String, u32> = HashMap::new();
        for token in tokens {
            *counts.entry(token).or_default() += 1;
        }
        for (word, tf) in counts {
            by_word.entry(word).or_default().push(Posting {
                doc: *doc,
                tf,
                length,
            });
        }
    }
    (by_word, words)
}

/// The blocks to write when `new` postings join a word whose last block is `last`:
/// the last block filled up (replacing it), then new blocks numbered after it.
pub(crate) fn append(last: Option<Block>, new: &[Posting]) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut rest = new;
    let mut number = 0;
    if let Some(last) = last {
        number = last.number + 1;
        if last.count < BLOCK {
            let mut postings = Vec::with_capacity(BLOCK);
            decode(&last.data, &mut postings);
            let take = (BLOCK - postings.len().min(BLOCK)).min(rest.len());
            postings.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            blocks.push(Block {
                number: last.number,
                count: postings.len(),
                data: encode(&postings),
            });
        }
    }
    for chunk in rest.chunks(BLOCK) {
        blocks.push(Block {
            number,
            count: chunk.len(),
            data: encode(chunk),
        });
        number += 1;
    }
    blocks
}

/// The blocks of one word that change when the messages `docs` leave the index,
/// re-packed without them (a block left with no posting has `count` 0: delete it).
pub(crate) fn without(blocks: Vec<Block>, docs: &HashSet<i64>) -> Vec<Block> {
    let mut changed = Vec::new();
    for block in blocks {
        let mut postings = Vec::with_capacity(block.count);
        decode(&block.data, &mut postings);
        let before = postings.len();
        postings.retain(|p| !docs.contains(&p.doc));
        if postings.len() != before {
            changed.push(Block {
                number: block.number,
                count: postings.len(),
                data: encode(&postings),
            });
        }
    }
    changed
}

/// BM25 scores of every message containing one of the words, whose blocks are given
/// per word (the number of postings in all of a word's blocks is its document
/// frequency). With `only`, messages outside it are skipped (their words still count
/// in the statistics). Unordered.
pub(crate) fn score(
    stats: &Stats,
    words: &[Vec<Block>],
    only: Option<&HashSet<i64>>,
) -> Vec<(i64, f32)> {
    if stats.messages <= 0 {
        return Vec::new();
    }
    let count = stats.messages as f32;
    let average = (stats.words as f32 / count).max(f32::MIN_POSITIVE);
    let mut merged: Vec<(i64, f32)> = Vec::new();
    let mut postings = Vec::new();
    for blocks in words {
        let df: usize = blocks.iter().map(|b| b.count).sum();
        if df == 0 {
            continue;
        }
        let idf = bm25_idf(count, df as f32);
        postings.clear();
        for block in blocks {
            decode(&block.data, &mut postings);
        }
        let mut scored: Vec<(i64, f32)> = postings
            .iter()
            .filter(|p| only.is_none_or(|only| only.contains(&p.doc)))
            .map(|p| (p.doc, bm25(idf, p.tf as f32, p.length as f32, average)))
            .collect();
        if !scored.is_sorted_by_key(|(doc, _)| *doc) {
            scored.sort_by_key(|(doc, _)| *doc);
        }
        merged = merge(merged, scored);
    }
    merged
}

/// Two lists in message order, summed where both hold a message.
fn merge(a: Vec<(i64, f32)>, b: Vec<(i64, f32)>) -> Vec<(i64, f32)> {
    if a.is_empty() {
        return b;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push((a[i].0, a[i].1 + b[j].1));
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Orders scores best first, ties by message number.
fn by_score(a: &(i64, f32), b: &(i64, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The best `limit` of `scored`, best first (ties by message number).
pub(crate) fn best(mut scored: Vec<(i64, f32)>, limit: usize) -> Vec<(i64, f32)> {
    if limit == 0 {
        return Vec::new();
    }
    if scored.len() > limit {
        scored.select_nth_unstable_by(limit - 1, by_score);
        scored.truncate(limit);
    }
    scored.sort_by(by_score);
    scored
}

/// All of `scored`, best first (ties by message number).
pub(crate) fn ranked(mut scored: Vec<(i64, f32)>) -> Vec<(i64, f32)> {
    scored.sort_by(by_score);
    scored
}

/// The messages a full-text search returns, picked from every scored match: each
/// store looks up the ids of the batches this hands out (under the search's filter when
/// [`checks_filter`](Self::checks_filter)), and this keeps the best `limit` that pass.
///
/// Unfiltered, or with a selective filter already applied while scoring, one batch
/// holds the best `limit`. With a broad filter the matches go best first in doubling
/// batches until `limit` pass.
pub(crate) struct Picking {
    ranked: Vec<(i64, f32)>,
    checks_filter: bool,
    limit: usize,
    from: usize,
    to: usize,
    batch: usize,
    found: Vec<(String, f32)>,
}

impl Picking {
    /// Picks from `scored`; `filtered_later` when the search's filter has not been
    /// applied while scoring (a broad filter).
    pub(crate) fn new(scored: Vec<(i64, f32)>, limit: usize, filtered_later: bool) -> Self {
        let ranked = if filtered_later {
            ranked(scored)
        } else {
            best(scored, limit)
        };
        Picking {
            batch: if filtered_later {
                (limit * 4).max(256)
            } else {
                ranked.len()
            },
            ranked,
            checks_filter: filtered_later,
            limit,
            from: 0,
            to: 0,
            found: Vec::with_capacity(limit),
        }
    }

    /// Whether the ids of the next batch must be looked up under the search's filter.
    pub(crate) fn checks_filter(&self) -> bool {
        self.checks_filter
    }

    /// The message numbers whose ids to look up next; `None` when the search is done.
    pub(crate) fn next_batch(&mut self) -> Option<Vec<i64>> {
        if self.from >= self.ranked.len() || self.found.len() >= self.limit {
            return None;
        }
        self.to = (self.from + self.batch.max(1)).min(self.ranked.len());
        Some(
            self.ranked[self.from..self.to]
                .iter()
                .map(|(doc, _)| *doc)
                .collect(),
        )
    }

    /// Takes the ids found for the batch [`next_batch`](Self::next_batch) handed out:
    /// a message without one did not pass the filter.
    pub(crate) fn take(&mut self, ids: &HashMap<i64, String>) {
        for (doc, score) in &self.ranked[self.from..self.to] {
            if self.found.len() == self.limit {
                break;
            }
            if let Some(id) = ids.get(doc) {
                self.found.push((id.clone(), *score));
            }
        }
        self.from = self.to;
        self.batch = self.batch.saturating_mul(2);
    }

    /// The ids and scores found, best first.
    pub(crate) fn found(self) -> Vec<(String, f32)> {
        self.found
    }
}

/// How many messages a filter may pass for a search to score only those: above it, the
/// search scores every match and checks the filter on the best, batch by batch.
pub(crate) const SELECTIVE: usize = 5_000;

#[cfg(feature = "sqlite")]
/// The cosine similarity of a vector stored as little-endian `f32` bytes and `query`
/// whose norm is `query_norm` — [`cosine`](crate::transcript::search::cosine)'s result, computed
/// without copying the stored vector.
pub(crate) fn cosine_of_bytes(stored: &[u8], query: &[f32], query_norm: f32) -> Option<f32> {
    if stored.len() != query.len() * 4 {
        return None;
    }
    let (mut dot, mut squares) = (0.0f32, 0.0f32);
    for (bytes, y) in stored.chunks_exact(4).zip(query) {
        let x = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        dot += x * y;
        squares += x * x;
    }
    let norms = squares.sqrt() * query_norm;
    (norms > 0.0).then(|| dot / norms)
}

#[cfg(feature = "sqlite")]
/// The entries of `scored` at least as good as its `limit`-th best (ties at the cut
/// included, for the caller to break by id).
pub(crate) fn best_with_ties(mut scored: Vec<(i64, f32)>, limit: usize) -> Vec<(i64, f32)> {
    if limit == 0 {
        return Vec::new();
    }
    if scored.len() > limit {
        scored.select_nth_unstable_by(limit - 1, |a, b| b.1.total_cmp(&a.1));
        let cut = scored[limit - 1].1;
        let (mut best, rest) = (scored[..limit].to_vec(), &scored[limit..]);
        best.extend(rest.iter().filter(|(_, score)| *score >= cut));
        return best;
    }
    scored
}

#[cfg(feature = "postgres")]
/// Messages per block of quantized vectors (PostgreSQL's `search_vector_blocks`).
pub(crate) const VECTOR_BLOCK: i64 = 1024;

#[cfg(feature = "postgres")]
/// How many candidates an approximate vector scan keeps for exact re-ranking, for
/// `limit` results.
pub(crate) fn rerank_pool(limit: usize) -> usize {
    limit.saturating_mul(10).max(200)
}

#[cfg(feature = "postgres")]
/// A vector as the approximate scan keeps it: scaled to unit length, each component
/// rounded to a signed byte (`None` for a zero, non-finite or over-long vector).
pub(crate) fn quantize(vector: &[f32]) -> Option<Vec<i8>> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !(norm.is_finite() && norm > 0.0) || vector.len() > usize::from(u16::MAX) {
        return None;
    }
    Some(
        vector
            .iter()
            .map(|x| (x / norm * 127.0).round().clamp(-127.0, 127.0) as i8)
            .collect(),
    )
}

#[cfg(feature = "postgres")]
/// The quantized vectors of a block by message number: `[number i64][length u16]
/// [length × i8]`, little-endian, repeated.
pub(crate) fn decode_vectors(data: &[u8]) -> BTreeMap<i64, Vec<i8>> {
    vector_records(data)
        .map(|(doc, values)| (doc, values.iter().map(|b| *b as i8).collect()))
        .collect()
}

#[cfg(feature = "postgres")]
/// The records of a packed block (see [`decode_vectors`]): message number and raw
/// values; a truncated record ends the block.
fn vector_records(data: &[u8]) -> impl Iterator<Item = (i64, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let header = data.get(at..at + 10)?;
        let doc = i64::from_le_bytes(header[..8].try_into().unwrap_or_default());
        let length = usize::from(u16::from_le_bytes([header[8], header[9]]));
        let values = data.get(at + 10..at + 10 + length)?;
        at += 10 + length;
        Some((doc, values))
    })
}

#[cfg(feature = "postgres")]
/// Packs a block of quantized vectors (see [`decode_vectors`]).
pub(crate) fn encode_vectors(vectors: &BTreeMap<i64, Vec<i8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (doc, values) in vectors {
        out.extend_from_slice(&doc.to_le_bytes());
        out.extend_from_slice(&(values.len() as u16).to_le_bytes());
        out.extend(values.iter().map(|v| *v as u8));
    }
    out
}

#[cfg(feature = "postgres")]
/// Approximate cosines of `query` (unit length) with every vector of a packed block of
/// the same length, appended to `into` by message number.
pub(crate) fn scan_vectors(data: &[u8], unit_query: &[f32], into: &mut Vec<(i64, f32)>) {
    for (doc, values) in vector_records(data) {
        if values.len() == unit_query.len() {
            let dot: f32 = values
                .iter()
                .zip(unit_query)
                .map(|(v, q)| f32::from(*v as i8) * q)
                .sum();
            into.push((doc, dot / 127.0));
        }
    }
}

#[cfg(feature = "postgres")]
/// The query scaled to unit length (`None` for a zero vector: it is similar to nothing).
pub(crate) fn unit(vector: &[f32]) -> Option<Vec<f32>> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norm.is_finite() && norm > 0.0).then(|| vector.iter().map(|x| x / norm).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broad filter: matches are looked up best first in doubling batches, and only
    /// those the filter passes count, up to the limit. Unfiltered: one batch, the best.
    #[test]
    fn picking_keeps_the_best_matches_that_pass() {
        let scored: Vec<(i64, f32)> = (0..1_000).map(|doc| (doc, doc as f32)).collect();
        let passes = |doc: i64| doc % 7 == 0;
        let mut picking = Picking::new(scored.clone(), 300, true);
        let mut batches = Vec::new();
        while let Some(docs) = picking.next_batch() {
            assert!(picking.checks_filter());
            batches.push(docs.len());
            let ids = docs
                .iter()
                .filter(|doc| passes(**doc))
                .map(|doc| (*doc, doc.to_string()))
                .collect();
            picking.take(&ids);
        }
        let found = picking.found();
        let expected: Vec<String> = (0..1_000)
            .rev()
            .filter(|doc| passes(*doc))
            .map(|doc| doc.to_string())
            .collect();
        assert_eq!(
            found.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
            expected
        );
        assert_eq!(batches, [1_000], "a batch of at least 4 × the limit");

        let mut picking = Picking::new(scored, 3, false);
        let docs = picking.next_batch().unwrap();
        assert!(!picking.checks_filter());
        assert_eq!(docs, [999, 998, 997]);
        picking.take(&docs.iter().map(|d| (*d, d.to_string())).collect());
        assert!(picking.next_batch().is_none());
        assert_eq!(picking.found().len(), 3);

        let mut picking = Picking::new((0..2_000).map(|d| (d, d as f32)).collect(), 10, true);
        let mut sizes = Vec::new();
        while let Some(docs) = picking.next_batch() {
            sizes.push(docs.len());
            picking.take(&HashMap::new()); // nothing passes
        }
        assert_eq!(
            sizes,
            [256, 512, 1_024, 208],
            "batches double until every match is seen"
        );
    }

    fn posting(doc: i64, tf: u32, length: u32) -> Posting {
        Posting { doc, tf, length }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn cosines_of_stored_bytes_are_the_crates_cosines() {
        let query = [0.5f32, -1.0, 2.0, 0.0];
        let norm = query.iter().map(|x| x * x).sum::<f32>().sqrt();
        for stored in [
            vec![1.0f32, 2.0, 3.0, 4.0],
            vec![0.0; 4],
            vec![-0.25, 0.0, 7.5, 1e-3],
            vec![1.0, 2.0],
        ] {
            let bytes: Vec<u8> = stored.iter().flat_map(|x| x.to_le_bytes()).collect();
            assert_eq!(
                cosine_of_bytes(&bytes, &query, norm),
                crate::transcript::search::cosine(&stored, &query)
            );
        }
        let ties = best_with_ties(vec![(1, 0.5), (2, 0.9), (3, 0.5), (4, 0.1)], 2);
        let mut docs: Vec<i64> = ties.iter().map(|(doc, _)| *doc).collect();
        docs.sort();
        assert_eq!(docs, [1, 2, 3]);
    }

    #[test]
    fn blocks_round_trip_and_fill_before_growing() {
        let postings: Vec<Posting> = (0..600)
            .map(|n| posting(n * 3 + 1, (n % 4) as u32 + 1, 10 + (n % 7) as u32))
            .collect();
        let blocks = append(None, &postings[..300]);
        assert_eq!(
            blocks
                .iter()
                .map(|b| (b.number, b.count))
                .collect::<Vec<_>>(),
            [(0, 256), (1, 44)]
        );
        let grown = append(Some(blocks[1].clone()), &postings[300..]);
        assert_eq!(
            grown
                .iter()
                .map(|b| (b.number, b.count))
                .collect::<Vec<_>>(),
            [(1, 256), (2, 88)]
        );
        let mut back = Vec::new();
        for block in [&blocks[0]].into_iter().chain(&grown) {
            decode(&block.data, &mut back);
        }
        assert_eq!(back, postings);
    }

    #[test]
    fn scores_are_memory_index_bm25_summed_per_message() {
        let (by_word, words) = postings_of(&[
            (1, "swap my shift".into()),
            (2, "shift shifts".into()),
            (5, "nothing here".into()),
        ]);
        assert_eq!(words, 7);
        let stats = Stats {
            through: 5,
            messages: 3,
            words,
        };
        let blocks = |word: &str| append(None, &by_word[word]);
        let scored = best(score(&stats, &[blocks("swap"), blocks("shift")], None), 10);
        let average = 7.0 / 3.0;
        let swap = bm25(bm25_idf(3.0, 1.0), 1.0, 3.0, average);
        let shift = |tf, length| bm25(bm25_idf(3.0, 2.0), tf, length, average);
        assert_eq!(scored.len(), 2);
        assert_eq!(scored[0], (1, swap + shift(1.0, 3.0)));
        assert_eq!(scored[1], (2, shift(2.0, 2.0)));
        let only: HashSet<i64> = [2].into();
        assert_eq!(
            score(&stats, &[blocks("swap"), blocks("shift")], Some(&only)),
            [(2, shift(2.0, 2.0))]
        );
    }

    #[cfg(feature = "postgres")]
    /// The benchmark's corpus (`benches/search.rs`), its first `messages` messages:
    /// 8–20 words from 3,000 plain words and 12 topic words, embedded by hashing words
    /// into 64 buckets; and 25 query vectors (the benchmark's query, and the first
    /// words of messages spread over the corpus).
    fn benchmark_like_vectors(messages: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let topics = [
            "roster",
            "shift",
            "swap",
            "thursday",
            "leave",
            "payslip",
            "incident",
            "medication",
            "password",
            "policy",
            "client",
            "urgent",
        ];
        let mut state = 42u64;
        let mut next = |below: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) as usize) % below
        };
        let embed = |text: &str| {
            let mut vector = vec![0.0f32; 64];
            for word in tokens(text) {
                let bucket = word
                    .bytes()
                    .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
                vector[(bucket % 64) as usize] += 1.0;
            }
            vector
        };
        let mut texts = Vec::new();
        for _ in 0..messages {
            let words: Vec<String> = (0..8 + next(13))
                .map(|_| {
                    if next(6) == 0 {
                        topics[next(topics.len())].to_owned()
                    } else {
                        format!("w{}", next(3_000))
                    }
                })
                .collect();
            next(500);
            texts.push(words.join(" "));
        }
        let mut queries = vec![embed("swap my thursday roster")];
        for n in 0..24 {
            let words: Vec<&str> = texts[n * (messages / 24)]
                .split(' ')
                .take(2 + n % 4)
                .collect();
            queries.push(embed(&words.join(" ")));
        }
        (texts.iter().map(|t| embed(t)).collect(), queries)
    }

    #[cfg(feature = "postgres")]
    /// The approximate vector scan (signed-byte vectors, the best
    /// [`rerank_pool`] re-ranked by exact cosine) finds at least 90 % of the exact 10
    /// nearest on the benchmark's kind of corpus.
    #[test]
    fn the_quantized_scan_recalls_the_exact_nearest() {
        let (vectors, queries) = benchmark_like_vectors(30_000);
        let mut block: BTreeMap<i64, Vec<i8>> = BTreeMap::new();
        for (doc, vector) in vectors.iter().enumerate() {
            block.insert(doc as i64, quantize(vector).unwrap());
        }
        let packed = encode_vectors(&block);
        assert_eq!(decode_vectors(&packed), block);
        let exact_best = |query: &[f32]| {
            let scored: Vec<(i64, f32)> = vectors
                .iter()
                .enumerate()
                .filter_map(|(doc, v)| {
                    Some((doc as i64, crate::transcript::search::cosine(v, query)?))
                })
                .collect();
            best(scored, 10)
        };
        let mut found = 0;
        for query in &queries {
            let mut approximate = Vec::new();
            scan_vectors(&packed, &unit(query).unwrap(), &mut approximate);
            let candidates = best(approximate, rerank_pool(10));
            let reranked: Vec<(i64, f32)> = candidates
                .iter()
                .filter_map(|(doc, _)| {
                    Some((
                        *doc,
                        crate::transcript::search::cosine(&vectors[*doc as usize], query)?,
                    ))
                })
                .collect();
            let approximate: HashSet<i64> = best(reranked, 10).iter().map(|h| h.0).collect();
            found += exact_best(query)
                .iter()
                .filter(|(doc, _)| approximate.contains(doc))
                .count();
        }
        let recall = found as f32 / (10 * queries.len()) as f32;
        eprintln!("recall@10 of the quantized scan: {recall}");
        assert!(recall >= 0.9, "recall@10 {recall}");
    }
}
