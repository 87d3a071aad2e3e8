//! The search corpus and its naive baseline, shared by the `search` and `floors`
//! benchmarks: 100,000 generated messages, a stand-in embedding model, and a naive scan.

use agent_sessions::transcript::search::{Embedder, LoggedMessage, SearchFilter, SearchIndex};
use agent_sessions::transcript::Direction;
use async_trait::async_trait;
use chrono::{TimeZone, Utc};

pub const MESSAGES: usize = 100_000;
pub const DIMENSIONS: usize = 64;
pub const QUERY: &str = "swap my thursday roster";

/// A deterministic pseudo-random sequence (64-bit LCG).
pub struct Sequence(u64);

impl Sequence {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below
    }
}

/// 100,000 messages of 8–20 words from a 3,000-word vocabulary plus topic words, over
/// 500 people and 30 days.
pub fn corpus() -> Vec<LoggedMessage> {
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
    let vocabulary: Vec<String> = (0..3_000).map(|n| format!("w{n}")).collect();
    let mut random = Sequence(42);
    let start = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
    (0..MESSAGES)
        .map(|n| {
            let words: Vec<&str> = (0..8 + random.next(13))
                .map(|_| {
                    if random.next(6) == 0 {
                        topics[random.next(topics.len())]
                    } else {
                        vocabulary[random.next(vocabulary.len())].as_str()
                    }
                })
                .collect();
            LoggedMessage {
                id: format!("main/s{}/{n}", n / 20),
                agent: "main".into(),
                session_id: format!("s{}", n / 20),
                session_key: None,
                person_id: Some(format!("p{}", random.next(500))),
                agent_identity: Some("reggie".into()),
                channel: Some(["sms", "web", "whatsapp"][n % 3].into()),
                direction: Some(if n % 2 == 0 {
                    Direction::Inbound
                } else {
                    Direction::Outbound
                }),
                correlation_id: None,
                at: start + chrono::Duration::seconds(n as i64 * 25),
                text: words.join(" "),
                category: None,
                embedding: None,
            }
        })
        .collect()
}

/// A stand-in embedding model: hashes words into 64 buckets.
pub struct Hashed;

pub fn embed(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0; DIMENSIONS];
    for word in agent_sessions::transcript::search::tokens(text) {
        let bucket = word
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        vector[(bucket % DIMENSIONS as u64) as usize] += 1.0;
    }
    vector
}

#[async_trait]
impl Embedder for Hashed {
    async fn embed(&self, texts: &[String]) -> agent_sessions::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| embed(t)).collect())
    }
}

/// The naive baseline: every text lower-cased and scanned for each query word.
pub fn naive(messages: &[LoggedMessage], query: &str, limit: usize) -> Vec<(usize, usize)> {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut scored: Vec<(usize, usize)> = messages
        .iter()
        .enumerate()
        .filter_map(|(n, m)| {
            let text = m.text.to_lowercase();
            let hits = words
                .iter()
                .map(|w| text.matches(w.as_str()).count())
                .sum::<usize>();
            (hits > 0).then_some((n, hits))
        })
        .collect();
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

pub async fn fill(index: &dyn SearchIndex, messages: &[LoggedMessage]) {
    for chunk in messages.chunks(5_000) {
        index.add(chunk.to_vec()).await.unwrap();
    }
    let vectors = messages
        .iter()
        .map(|m| (m.id.clone(), embed(&m.text)))
        .collect();
    index.set_embeddings(vectors).await.unwrap();
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let norms = norm(a) * norm(b);
    if norms > 0.0 {
        dot / norms
    } else {
        0.0
    }
}

/// Recall@10 of `index.nearest` against an exact scan, over 20 queries (the benchmark's
/// and the first words of messages spread over the corpus). Many messages tie, so a
/// hit counts when its exact cosine reaches the exact 10th best.
pub fn recall_at_10(
    index: &dyn SearchIndex,
    messages: &[LoggedMessage],
    runtime: &tokio::runtime::Runtime,
) -> f32 {
    let vectors: Vec<Vec<f32>> = messages.iter().map(|m| embed(&m.text)).collect();
    let mut queries = vec![QUERY.to_owned()];
    for n in 1..20 {
        let words: Vec<&str> = messages[n * 4_999]
            .text
            .split(' ')
            .take(2 + n % 4)
            .collect();
        queries.push(words.join(" "));
    }
    let mut found = 0;
    for query in &queries {
        let vector = embed(query);
        let mut exact: Vec<f32> = vectors.iter().map(|v| cosine(v, &vector)).collect();
        exact.sort_by(|a, b| b.total_cmp(a));
        let tenth = exact[9];
        let hits = runtime
            .block_on(index.nearest(&vector, &SearchFilter::new(), 10))
            .unwrap();
        for (id, _) in hits {
            let n: usize = id.rsplit('/').next().unwrap().parse().unwrap();
            found += usize::from(cosine(&vectors[n], &vector) >= tenth - 1e-6);
        }
    }
    found as f32 / (10 * queries.len()) as f32
}
