//! Search, categorisation and analytics over the message log, as specifications: a
//! seeded corpus on every transcript store, a fake embedder for the vector path and
//! hybrid ranking, background processing that resumes after a kill, and analytics over
//! a generated month of traffic.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::manager::LogMessage;
use agent_sessions::prelude::*;
use agent_sessions::transcript::search::{
    Categorizer, Embedder, Exchange, InMemoryIndex, KeywordCategorizer, LoggedMessage, Search,
    SearchFilter, SearchIndex, SearchQuery, Work,
};
use agent_sessions::transcript::{Direction, InMemoryTranscriptStore, TranscriptStore};
use agent_sessions::{Error, Result};
use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap()
}

/// (minutes after the start, person, agent, channel, direction, text)
type Line = (
    i64,
    &'static str,
    &'static str,
    &'static str,
    Direction,
    &'static str,
);

const CORPUS: &[Line] = &[
    (
        0,
        "staff:17",
        "reggie_oc",
        "sms",
        Direction::Inbound,
        "When is my shift at Riverside on Thursday?",
    ),
    (
        1,
        "staff:17",
        "reggie_oc",
        "sms",
        Direction::Outbound,
        "Thursday at 9am at Riverside.",
    ),
    (
        10,
        "staff:22",
        "reggie_oc",
        "whatsapp",
        Direction::Inbound,
        "How do I apply for annual leave in December?",
    ),
    (
        11,
        "staff:22",
        "reggie_oc",
        "whatsapp",
        Direction::Outbound,
        "Apply in the HR portal under Leave.",
    ),
    (
        20,
        "staff:31",
        "helpdesk",
        "web",
        Direction::Inbound,
        "The rostering app shows a login error",
    ),
    (
        21,
        "staff:31",
        "helpdesk",
        "web",
        Direction::Outbound,
        "Reset your password from the sign-in page.",
    ),
    (
        30,
        "staff:17",
        "reggie_fd",
        "web",
        Direction::Inbound,
        "Can I swap my Riverside shift for Friday?",
    ),
    (
        31,
        "staff:17",
        "reggie_fd",
        "web",
        Direction::Outbound,
        "Swap requested for Friday.",
    ),
    (
        40,
        "staff:22",
        "reggie_oc",
        "whatsapp",
        Direction::Inbound,
        "My payslip shows the wrong hours",
    ),
    (
        41,
        "staff:22",
        "reggie_oc",
        "whatsapp",
        Direction::Outbound,
        "I've raised it with payroll.",
    ),
    (
        50,
        "staff:40",
        "reggie_oc",
        "sms",
        Direction::Inbound,
        "Mrs Lee refused her medication this morning",
    ),
    (
        51,
        "staff:40",
        "reggie_oc",
        "sms",
        Direction::Outbound,
        "Noted in her care plan; the nurse will call.",
    ),
    (
        60,
        "staff:40",
        "reggie_oc",
        "sms",
        Direction::Inbound,
        "Thanks, have a good weekend!",
    ),
    (
        61,
        "staff:40",
        "reggie_oc",
        "sms",
        Direction::Outbound,
        "You too!",
    ),
];

/// Logs the corpus through a manager over `transcripts`, one session per person and
/// agent, at the corpus's times.
async fn log_corpus(transcripts: Arc<dyn TranscriptStore>, sessions: Arc<dyn SessionStore>) {
    let clock = ManualClock::new(start());
    let manager = SessionManager::builder(sessions)
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
        .transcripts(transcripts)
        .agent_identity("reggie_oc", "reggie")
        .agent_identity("reggie_fd", "reggie")
        .clock(clock.clone())
        .build()
        .unwrap();
    for &(minutes, person, agent, channel, direction, text) in CORPUS {
        clock.set(start() + chrono::Duration::minutes(minutes));
        let message = InboundMessage::direct(channel, person, text)
            .with_agent(agent)
            .from_person(person);
        let key = match direction {
            Direction::Inbound => manager.resolve(&message).await.unwrap().key,
            Direction::Outbound => manager.key_for(&message).unwrap(),
        };
        let identity = manager.agent_identity_of(agent);
        let log = match direction {
            Direction::Inbound => LogMessage::inbound(text),
            Direction::Outbound => LogMessage::outbound(text),
        };
        manager
            .session(&key)
            .log_message(
                log.from_person(person)
                    .with_agent(agent, identity)
                    .on_channel(channel),
            )
            .await
            .unwrap();
    }
}

fn texts(hits: &[agent_sessions::transcript::search::SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| h.message.text.as_str()).collect()
}

/// The texts of the first `n` hits, sorted (for hits whose scores tie).
fn sorted_top(hits: &[agent_sessions::transcript::search::SearchHit], n: usize) -> Vec<&str> {
    let mut top = texts(hits)[..n].to_vec();
    top.sort();
    top
}

/// The corpus, searched: known hits first, every filter honoured.
async fn known_hits_rank_first(
    transcripts: Arc<dyn TranscriptStore>,
    sessions: Arc<dyn SessionStore>,
    index: impl SearchIndex + 'static,
) {
    log_corpus(transcripts.clone(), sessions).await;
    let search = Search::new(index);
    assert_eq!(search.sync(&*transcripts).await.unwrap(), CORPUS.len());
    assert_eq!(
        search.sync(&*transcripts).await.unwrap(),
        0,
        "a second sync adds nothing"
    );

    let hits = search
        .search(&SearchQuery::text("Riverside shift"))
        .await
        .unwrap();
    assert_eq!(
        sorted_top(&hits, 2),
        [
            "Can I swap my Riverside shift for Friday?",
            "When is my shift at Riverside on Thursday?",
        ],
        "both words beat one"
    );
    assert_eq!(hits[2].message.text, "Thursday at 9am at Riverside.");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    let first = hits
        .iter()
        .find(|h| h.message.text.starts_with("When is my shift"))
        .unwrap();
    assert_eq!(first.message.person_id.as_deref(), Some("staff:17"));
    assert_eq!(first.message.channel.as_deref(), Some("sms"));
    assert_eq!(
        first.message.session_key.as_deref(),
        Some("agent:reggie_oc:person:staff:17")
    );
    assert_eq!(first.snippet, "When is my shift at Riverside on Thursday?");

    let filtered = |filter: SearchFilter, text: &str| {
        let search = search.clone();
        let query = SearchQuery::text(text).filter(filter);
        async move { search.search(&query).await.unwrap() }
    };
    let web = filtered(SearchFilter::new().channel("web"), "Riverside").await;
    assert_eq!(texts(&web), ["Can I swap my Riverside shift for Friday?"]);
    let bob = filtered(
        SearchFilter::new().person("staff:22"),
        "hours payslip leave",
    )
    .await;
    assert_eq!(texts(&bob)[0], "My payslip shows the wrong hours");
    assert!(bob
        .iter()
        .all(|h| h.message.person_id.as_deref() == Some("staff:22")));
    let later = filtered(
        SearchFilter::new().between(
            start() + chrono::Duration::minutes(5),
            start() + chrono::Duration::days(1),
        ),
        "Riverside",
    )
    .await;
    assert_eq!(texts(&later), ["Can I swap my Riverside shift for Friday?"]);
    let reggie = filtered(
        SearchFilter::new().agent_identity("helpdesk"),
        "password error",
    )
    .await;
    assert_eq!(reggie.len(), 2, "{:?}", texts(&reggie));
    let session = first.message.session_id.clone();
    let in_session = filtered(SearchFilter::new().session(session), "Thursday").await;
    assert_eq!(in_session.len(), 2);
    assert!(filtered(SearchFilter::new(), "zebra").await.is_empty());
    assert!(search
        .search(&SearchQuery::text("shift").limit(0))
        .await
        .unwrap()
        .is_empty());

    // Categories, once processed, filter too; a question and its reply share one.
    let progress = search.process_pending().await.unwrap();
    assert_eq!(progress.categorized, CORPUS.len());
    assert_eq!(progress.pending_categories, 0);
    let rosters = filtered(SearchFilter::new().category("roster_query"), "Riverside").await;
    assert_eq!(rosters.len(), 3, "{:?}", texts(&rosters));
    let all = search.index().messages(&SearchFilter::new()).await.unwrap();
    let category_of = |text: &str| {
        all.iter()
            .find(|m| m.text == text)
            .and_then(|m| m.category.clone())
            .unwrap()
    };
    assert_eq!(category_of("Thursday at 9am at Riverside."), "roster_query");
    assert_eq!(category_of("I've raised it with payroll."), "hr_request");
    assert_eq!(
        category_of("Reset your password from the sign-in page."),
        "technical_support"
    );
    assert_eq!(
        category_of("Noted in her care plan; the nurse will call."),
        "participant_care"
    );
    assert_eq!(category_of("You too!"), "casual_chat");
}

#[tokio::test]
async fn known_hits_rank_first_on_the_memory_stores() {
    known_hits_rank_first(
        Arc::new(InMemoryTranscriptStore::new()),
        Arc::new(InMemoryStore::new()),
        InMemoryIndex::new(),
    )
    .await;
}

#[tokio::test]
async fn known_hits_rank_first_on_the_json_store() {
    let dir = tempfile::tempdir().unwrap();
    let backend = agent_sessions::store::Backend::open(&format!("json:{}", dir.path().display()))
        .await
        .unwrap();
    let index = InMemoryIndex::open(dir.path().join("search.json")).unwrap();
    known_hits_rank_first(
        backend.transcripts().clone(),
        backend.sessions().clone(),
        index,
    )
    .await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_hits_rank_first_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.db");
    let backend = agent_sessions::store::Backend::open(&format!("sqlite:{}", file.display()))
        .await
        .unwrap();
    // The database's own index: FTS5 beside the sessions and transcripts.
    let index = agent_sessions::store::SqliteStore::open(&file).unwrap();
    known_hits_rank_first(
        backend.transcripts().clone(),
        backend.sessions().clone(),
        index,
    )
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn known_hits_rank_first_on_postgres() {
    let schema = common::TestSchema::new("search");
    let backend = agent_sessions::store::Backend::open(&schema.url())
        .await
        .unwrap();
    // The server's own index: a tsvector with a GIN index beside the sessions.
    let index = schema.store().await;
    known_hits_rank_first(
        backend.transcripts().clone(),
        backend.sessions().clone(),
        index,
    )
    .await;
    schema.drop().await;
}

/// A fake embedding model: each dimension is a concept, and a text's vector counts the
/// words of each concept it uses — so "timetable" is near "shift" without sharing a
/// word. It counts its calls and can be told to fail.
#[derive(Default)]
struct ConceptEmbedder {
    calls: AtomicUsize,
    texts: AtomicUsize,
    fail: bool,
}

const CONCEPTS: &[&[&str]] = &[
    &[
        "shift",
        "roster",
        "swap",
        "timetable",
        "thursday",
        "friday",
        "work",
    ],
    &["leave", "payslip", "payroll", "hour", "holiday", "pay"],
    &["password", "login", "error", "app", "sign"],
    &["medication", "care", "nurse", "refused"],
];

#[async_trait]
impl Embedder for ConceptEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        if self.fail {
            return Err(Error::component("embedder", "the model is down"));
        }
        Ok(texts
            .iter()
            .map(|text| {
                let words = agent_sessions::transcript::search::tokens(text);
                CONCEPTS
                    .iter()
                    .map(|concept| {
                        words
                            .iter()
                            .filter(|w| concept.contains(&w.as_str()))
                            .count() as f32
                    })
                    .collect()
            })
            .collect())
    }
}

async fn vectors_and_hybrid_ranking(index: impl SearchIndex + 'static) {
    let transcripts: Arc<dyn TranscriptStore> = Arc::new(InMemoryTranscriptStore::new());
    log_corpus(transcripts.clone(), Arc::new(InMemoryStore::new())).await;
    let embedder = Arc::new(ConceptEmbedder::default());
    let search = Search::new(index).embedder(embedder.clone());
    let progress = search.process_all(&*transcripts).await.unwrap();
    assert_eq!(progress.embedded, CORPUS.len());
    assert_eq!(progress.pending_embeddings, 0);
    assert_eq!(
        embedder.calls.load(Ordering::SeqCst),
        1,
        "the 14 messages went to the model in one batch"
    );

    // No word in common with any message: only the vectors can find these — the four
    // messages about shifts.
    let hits = search
        .search(&SearchQuery::text("work timetable"))
        .await
        .unwrap();
    assert_eq!(
        sorted_top(&hits, 4),
        [
            "Can I swap my Riverside shift for Friday?",
            "Swap requested for Friday.",
            "Thursday at 9am at Riverside.",
            "When is my shift at Riverside on Thursday?",
        ]
    );
    assert!(hits[..4]
        .iter()
        .all(|h| h.text_score == 0.0 && h.semantic_score > 0.99));

    // Hybrid: words and meaning beat fewer words and the meaning, which beat the
    // meaning alone.
    let hits = search
        .search(&SearchQuery::text("Riverside shift"))
        .await
        .unwrap();
    assert_eq!(
        sorted_top(&hits, 2),
        [
            "Can I swap my Riverside shift for Friday?",
            "When is my shift at Riverside on Thursday?",
        ]
    );
    assert_eq!(
        texts(&hits)[2..4],
        [
            "Thursday at 9am at Riverside.",
            "Swap requested for Friday."
        ]
    );
    assert_eq!(hits[3].text_score, 0.0, "found by meaning alone");
    assert!(hits.iter().all(|h| (0.0..=1.0).contains(&h.score)));

    // Without a working embedder, search is full text only — never an error.
    let broken = Search::new(InMemoryIndex::new()).embedder(ConceptEmbedder {
        fail: true,
        ..ConceptEmbedder::default()
    });
    broken.sync(&*transcripts).await.unwrap();
    let hits = broken
        .search(&SearchQuery::text("Riverside shift"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 3, "the three messages with the words");
    assert!(hits.iter().all(|h| h.semantic_score == 0.0));
    assert!(matches!(
        broken.process_pending().await,
        Err(Error::Component {
            component: "embedder",
            ..
        })
    ));
    assert_eq!(
        broken
            .index()
            .pending(Work::Embed, 100)
            .await
            .unwrap()
            .len(),
        CORPUS.len(),
        "a failed batch is left pending"
    );
}

#[tokio::test]
async fn a_fake_embedder_proves_the_vector_path_and_hybrid_ranking() {
    vectors_and_hybrid_ranking(InMemoryIndex::new()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_are_kept_beside_the_messages_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    vectors_and_hybrid_ranking(
        agent_sessions::store::SqliteStore::open(dir.path().join("s.db")).unwrap(),
    )
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn vectors_are_kept_beside_the_messages_in_postgres() {
    let schema = common::TestSchema::new("vectors");
    vectors_and_hybrid_ranking(schema.store().await).await;
    schema.drop().await;
}

/// A categorizer that waits until it is released: the reply path must not wait for it.
struct Gate(tokio::sync::Semaphore, AtomicUsize);

#[async_trait]
impl Categorizer for Gate {
    async fn categorize(&self, exchange: &Exchange) -> Result<String> {
        let _permit = self.0.acquire().await.unwrap();
        self.1.fetch_add(1, Ordering::SeqCst);
        KeywordCategorizer::default().categorize(exchange).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_work_never_delays_a_reply_and_reports_progress() {
    let transcripts: Arc<dyn TranscriptStore> = Arc::new(InMemoryTranscriptStore::new());
    let sessions: Arc<dyn SessionStore> = Arc::new(InMemoryStore::new());
    log_corpus(transcripts.clone(), sessions.clone()).await;
    let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0), AtomicUsize::new(0)));
    let search = Search::new(InMemoryIndex::new()).categorizer(gate.clone());
    let mut background = search.spawn_background(transcripts.clone(), Duration::from_millis(20));

    // The categorizer is stuck; the bot still answers at once.
    let manager = SessionManager::builder(sessions)
        .transcripts(transcripts)
        .build()
        .unwrap();
    let message = InboundMessage::direct("sms", "+15550100", "another question about my roster");
    tokio::time::timeout(Duration::from_secs(2), async {
        let resolution = manager.resolve(&message).await.unwrap();
        manager
            .session(&resolution.key)
            .log_message(LogMessage::from_inbound(&message))
            .await
            .unwrap();
    })
    .await
    .expect("the reply path does not wait for background work");
    assert_eq!(gate.1.load(Ordering::SeqCst), 0);

    gate.0.add_permits(1_000);
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            background.progress.changed().await.unwrap();
            let progress = *background.progress.borrow();
            if progress.indexed == CORPUS.len() + 1 && progress.pending_categories == 0 {
                return progress;
            }
        }
    })
    .await
    .expect("background work finishes once released");
    assert_eq!(done.categorized, CORPUS.len() + 1);
    assert_eq!(
        search.index().pending(Work::Categorize, 10).await.unwrap(),
        vec![]
    );
}

#[tokio::test]
async fn an_index_saved_to_a_file_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("search.json");
    let transcripts: Arc<dyn TranscriptStore> = Arc::new(InMemoryTranscriptStore::new());
    log_corpus(transcripts.clone(), Arc::new(InMemoryStore::new())).await;

    let counting = Arc::new(Gate(
        tokio::sync::Semaphore::new(1_000),
        AtomicUsize::new(0),
    ));
    {
        let search = Search::new(InMemoryIndex::open(&file).unwrap()).categorizer(counting.clone());
        search.sync(&*transcripts).await.unwrap();
        // Categorise only the first exchange, then "stop".
        let first = search.index().pending(Work::Categorize, 1).await.unwrap();
        let session = search
            .index()
            .messages(&SearchFilter::new().session(first[0].session_id.clone()))
            .await
            .unwrap();
        let exchange = Exchange::around(&session, &first[0].id);
        search
            .index()
            .set_category(&exchange.uncategorized_ids(), "roster_query")
            .await
            .unwrap();
        search.index().flush().await.unwrap();
    }
    let reopened = Search::new(InMemoryIndex::open(&file).unwrap()).categorizer(counting.clone());
    assert_eq!(
        reopened.index().message_count().await.unwrap(),
        CORPUS.len()
    );
    let left = reopened
        .index()
        .pending(Work::Categorize, 100)
        .await
        .unwrap();
    assert_eq!(
        left.len(),
        CORPUS.len() - 2,
        "the categorised exchange is remembered"
    );
    let progress = reopened.process_all(&*transcripts).await.unwrap();
    assert_eq!(progress.categorized, CORPUS.len() - 2);
    assert_eq!(
        counting.1.load(Ordering::SeqCst),
        6,
        "one call per remaining exchange"
    );

    // A damaged index file is an error naming it, and is left as it was.
    std::fs::write(&file, b"{ not an index").unwrap();
    assert!(matches!(
        InMemoryIndex::open(&file),
        Err(Error::Component {
            component: "search index",
            ..
        })
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"{ not an index");
}

// ---------------------------------------------------------------------------------
// Background processing survives a kill (Unix: SIGKILL)

const KILL_CHILD: &str = "AGENT_SESSIONS_SEARCH_CHILD";

/// `messages` logged messages in JSON transcripts under `root`, all inbound, one
/// session each, spread over a day.
async fn many_messages(root: &std::path::Path, messages: usize) -> Arc<dyn TranscriptStore> {
    let backend = agent_sessions::store::Backend::open(&format!("json:{}", root.display()))
        .await
        .unwrap();
    let clock = ManualClock::new(start());
    let manager = SessionManager::builder(backend.sessions().clone())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .transcripts(backend.transcripts().clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    for n in 0..messages {
        clock.advance(Duration::from_secs(60));
        let text = if n % 2 == 0 {
            "when is my shift"
        } else {
            "my payslip is wrong"
        };
        let message = InboundMessage::direct("sms", format!("+1555{:04}", n % 7), text)
            .from_person(format!("p{}", n % 7));
        let resolution = manager.resolve(&message).await.unwrap();
        manager
            .session(&resolution.key)
            .log_message(LogMessage::from_inbound(&message))
            .await
            .unwrap();
    }
    backend.transcripts().clone()
}

/// A categorizer slow enough to be killed in the middle of its work.
struct Slow;

#[async_trait]
impl Categorizer for Slow {
    async fn categorize(&self, exchange: &Exchange) -> Result<String> {
        tokio::time::sleep(Duration::from_millis(15)).await;
        KeywordCategorizer::default().categorize(exchange).await
    }
}

#[tokio::test]
#[ignore = "a child process of background_processing_resumes_after_a_kill"]
async fn search_child_worker() {
    let Ok(root) = std::env::var(KILL_CHILD) else {
        return;
    };
    let root = std::path::PathBuf::from(root);
    let transcripts = agent_sessions::store::Backend::open(&format!("json:{}", root.display()))
        .await
        .unwrap()
        .transcripts()
        .clone();
    let search =
        Search::new(InMemoryIndex::open(root.join("search.json")).unwrap()).categorizer(Slow);
    search.sync(&*transcripts).await.unwrap();
    loop {
        let progress = search.process_pending().await.unwrap();
        println!("progress {}", progress.pending_categories);
        if progress.pending_categories == 0 {
            break;
        }
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processing_resumes_after_a_kill() {
    use std::io::BufRead;
    const MESSAGES: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let transcripts = many_messages(dir.path(), MESSAGES).await;

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "search_child_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(KILL_CHILD, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill it after its second saved batch: mid-way through its work.
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut saved = 0;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some((_, pending)) = line.split_once("progress ") {
            saved += 1;
            assert!(
                pending.trim().parse::<usize>().unwrap() > 0,
                "killed too late"
            );
            if saved == 2 {
                break;
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // The index file is whole (written by rename) and remembers the work done.
    let index = InMemoryIndex::open(dir.path().join("search.json")).unwrap();
    let done_before = MESSAGES
        - index
            .pending(Work::Categorize, usize::MAX)
            .await
            .unwrap()
            .len();
    assert!((128..MESSAGES).contains(&done_before), "{done_before}");
    let search = Search::new(index);
    let progress = search.process_all(&*transcripts).await.unwrap();
    assert_eq!(
        progress.categorized,
        MESSAGES - done_before,
        "only what was left"
    );
    assert_eq!(progress.pending_categories, 0);
    let all = search.index().messages(&SearchFilter::new()).await.unwrap();
    assert_eq!(all.len(), MESSAGES);
    for message in &all {
        let expected = if message.text.contains("shift") {
            "roster_query"
        } else {
            "hr_request"
        };
        assert_eq!(message.category.as_deref(), Some(expected), "{message:?}");
    }
}

// ---------------------------------------------------------------------------------
// Analytics over a generated month

/// A month of traffic: every day of March 2026, person `p<d % 5>` asks one question
/// per category index `d % 4` at 09:00 and gets a reply, on channel `sms` on even days
/// and `web` on odd ones.
fn month() -> Vec<LoggedMessage> {
    let categories = [
        "roster_query",
        "hr_request",
        "technical_support",
        "casual_chat",
    ];
    let mut messages = Vec::new();
    for day in 1..=31u32 {
        let at = Utc.with_ymd_and_hms(2026, 3, day, 9, 0, 0).unwrap();
        let person = format!("p{}", day % 5);
        let category = categories[(day % 4) as usize];
        let channel = if day % 2 == 0 { "sms" } else { "web" };
        for (n, direction) in [Direction::Inbound, Direction::Outbound]
            .into_iter()
            .enumerate()
        {
            messages.push(LoggedMessage {
                id: format!("main/s{day}/{n}"),
                agent: "main".into(),
                session_id: format!("s{day}"),
                session_key: None,
                person_id: Some(person.clone()),
                agent_identity: Some("reggie".into()),
                channel: Some(channel.into()),
                direction: Some(direction),
                correlation_id: None,
                at: at + chrono::Duration::minutes(n as i64),
                text: "…".into(),
                category: Some(category.into()),
                embedding: None,
            });
        }
    }
    messages
}

#[test]
fn analytics_count_a_generated_month() {
    let messages = month();
    let end = Utc.with_ymd_and_hms(2026, 3, 31, 23, 59, 0).unwrap();
    let stats =
        agent_sessions::transcript::search::analytics(&messages, end, chrono::Duration::days(7));
    assert_eq!(stats.total, 62);
    assert_eq!((stats.inbound, stats.outbound), (31, 31));
    // Days 1..=31 by day % 4: 0 → 7 days (4, 8, …, 28), 1 → 8, 2 → 8, 3 → 8.
    assert_eq!(stats.by_category["roster_query"], 14);
    assert_eq!(stats.by_category["hr_request"], 16);
    assert_eq!(stats.by_category["technical_support"], 16);
    assert_eq!(stats.by_category["casual_chat"], 16);
    assert_eq!(stats.by_channel["sms"], 30);
    assert_eq!(stats.by_channel["web"], 32);
    assert_eq!(stats.by_agent_identity["reggie"], 62);
    assert_eq!(stats.by_day.len(), 31);
    assert!(stats.by_day.values().all(|&n| n == 2));
    // ISO weeks: 1 March 2026 is a Sunday (week 9), 30–31 March are week 14.
    assert_eq!(stats.by_week["2026-W09"], 2);
    assert_eq!(stats.by_week["2026-W10"], 14);
    assert_eq!(stats.by_week["2026-W14"], 4);
    assert_eq!(stats.by_week.values().sum::<usize>(), 62);
    // The last 7 days (25–31) against the 7 before (18–24).
    let roster = stats
        .trends
        .iter()
        .find(|t| t.category == "roster_query")
        .unwrap();
    assert_eq!((roster.current, roster.previous), (2, 4)); // day 28 | days 20, 24
    let hr = stats
        .trends
        .iter()
        .find(|t| t.category == "hr_request")
        .unwrap();
    assert_eq!((hr.current, hr.previous), (4, 2)); // days 25, 29 | day 21
    assert_eq!(hr.ratio, Some(2.0));
}

#[test]
fn a_person_who_keeps_asking_has_a_recurring_topic() {
    let mut messages = month();
    let end = Utc.with_ymd_and_hms(2026, 3, 31, 23, 59, 0).unwrap();
    assert_eq!(
        agent_sessions::transcript::search::recurring_topic(&messages, "p1", end),
        None
    );
    // p1 asks about rosters three times this week.
    for (n, day) in [27u32, 29, 30].into_iter().enumerate() {
        messages.push(LoggedMessage {
            id: format!("extra/{n}"),
            person_id: Some("p1".into()),
            category: Some("roster_query".into()),
            direction: Some(Direction::Inbound),
            at: Utc.with_ymd_and_hms(2026, 3, day, 12, 0, 0).unwrap(),
            ..messages[0].clone()
        });
    }
    let topic = agent_sessions::transcript::search::recurring_topic(&messages, "p1", end).unwrap();
    assert_eq!((topic.category.as_str(), topic.count), ("roster_query", 3));
    assert_eq!(
        topic.sentence(),
        "You've asked about rosters 3 times this week."
    );
    // A week later it is no longer recurring.
    let later = end + chrono::Duration::days(7);
    assert_eq!(
        agent_sessions::transcript::search::recurring_topic(&messages, "p1", later),
        None
    );
}

#[tokio::test]
async fn a_damaged_json_search_index_fails_only_search() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(agent_sessions::store::SEARCH_INDEX_FILE);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, b"garbage").unwrap();
    let backend = agent_sessions::store::Backend::open(&format!("json:{}", dir.path().display()))
        .await
        .expect("the sessions open");
    assert_eq!(
        backend.sessions().count(&ListFilter::new()).await.unwrap(),
        0
    );
    assert!(matches!(
        backend.search_index().await,
        Err(Error::Component {
            component: "search index",
            ..
        })
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"garbage");
}

/// 12,000 generated messages: ten words each from 400 plain words and six common
/// topic words (so a topic word has thousands of postings), 40 people, two channels,
/// one a minute.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn generated_corpus() -> Vec<LoggedMessage> {
    let topics = ["roster", "shift", "swap", "thursday", "leave", "payslip"];
    let mut state = 7u64;
    let mut next = |below: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % below
    };
    (0..12_000)
        .map(|n| {
            let words: Vec<String> = (0..4 + next(10))
                .map(|_| {
                    if next(5) == 0 {
                        topics[next(6) as usize].to_owned()
                    } else {
                        format!("w{}", next(400))
                    }
                })
                .collect();
            LoggedMessage {
                id: format!("main/s{}/{n}", n / 10),
                agent: "main".into(),
                session_id: format!("s{}", n / 10),
                session_key: None,
                person_id: Some(format!("p{}", next(40))),
                agent_identity: Some("reggie".into()),
                channel: Some(["sms", "web"][n % 2].into()),
                direction: Some(Direction::Inbound),
                correlation_id: None,
                at: start() + chrono::Duration::minutes(n as i64),
                text: words.join(" "),
                category: None,
                embedding: None,
            }
        })
        .collect()
}

/// Every index ranks alike: on a generated corpus, added in several batches, `index`
/// answers full-text searches — without a filter, with a selective one (a person),
/// broad ones (a channel, a time range passing most messages) — with the memory
/// index's hits, in its order, with its BM25 scores (to rounding).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
async fn ranks_like_the_memory_index(index: &dyn SearchIndex) {
    let corpus = generated_corpus();
    let memory = InMemoryIndex::new();
    for batch in corpus.chunks(2_500) {
        assert_eq!(index.add(batch.to_vec()).await.unwrap(), batch.len());
        memory.add(batch.to_vec()).await.unwrap();
    }
    assert_eq!(index.add(corpus[..10].to_vec()).await.unwrap(), 0);
    let filters = [
        SearchFilter::new(),
        SearchFilter::new().person("p7"),
        SearchFilter::new().channel("web"),
        SearchFilter::new().between(
            start() + chrono::Duration::minutes(1_000),
            start() + chrono::Duration::minutes(11_000),
        ),
        SearchFilter::new().person("p7").channel("sms"),
        SearchFilter::new().person("nobody"),
    ];
    for query in ["swap my thursday roster", "Rosters", "w17 leave", "absent"] {
        for filter in &filters {
            for limit in [1, 10, 40] {
                let expected = memory.full_text(query, filter, limit).await.unwrap();
                let found = index.full_text(query, filter, limit).await.unwrap();
                let ids = |hits: &[(String, f32)]| hits.iter().map(|h| h.0.clone()).collect();
                let (expected_ids, found_ids): (Vec<String>, Vec<String>) =
                    (ids(&expected), ids(&found));
                assert_eq!(found_ids, expected_ids, "{query:?} {filter:?} {limit}");
                for ((_, want), (id, got)) in expected.iter().zip(&found) {
                    assert!((want - got).abs() <= want * 1e-5, "{id}: {got} for {want}");
                }
                if query == "absent" || filter.person_id.as_deref() == Some("nobody") {
                    assert!(found.is_empty());
                } else if filter.person_id.is_none() {
                    assert_eq!(found.len(), limit, "{query:?} {filter:?}");
                }
            }
        }
    }

    // The newest messages removed (an erase, a retention sweep) and others added after
    // them: the new ones are found, ranked alike, and the removed ones are not.
    let newest: Vec<String> = corpus[11_500..].iter().map(|m| m.id.clone()).collect();
    assert_eq!(index.remove(&newest).await.unwrap(), 500);
    memory.remove(&newest).await.unwrap();
    let later: Vec<LoggedMessage> = corpus[11_500..]
        .iter()
        .map(|m| LoggedMessage {
            id: format!("{}-later", m.id),
            text: format!("{} later", m.text),
            ..m.clone()
        })
        .collect();
    assert_eq!(index.add(later.clone()).await.unwrap(), 500);
    memory.add(later).await.unwrap();
    for query in ["later", "later roster", "swap"] {
        let expected = memory.full_text(query, &SearchFilter::new(), 40).await;
        let found = index.full_text(query, &SearchFilter::new(), 40).await;
        let (expected, found) = (expected.unwrap(), found.unwrap());
        assert_eq!(found.len(), 40, "{query:?}");
        let ids = |hits: &[(String, f32)]| hits.iter().map(|h| h.0.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&found), ids(&expected), "{query:?}");
        assert!(
            ids(&found).iter().all(|id| !newest.contains(id)),
            "{query:?}"
        );
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_ranks_like_the_memory_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = agent_sessions::store::SqliteStore::open(dir.path().join("s.db")).unwrap();
    ranks_like_the_memory_index(&store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_ranks_like_the_memory_index() {
    let schema = common::TestSchema::new("search_bm25");
    ranks_like_the_memory_index(&schema.store().await).await;
    schema.drop().await;
}

/// A message holding a NUL character (which a PostgreSQL `TEXT` cannot) is indexed,
/// with U+FFFD in its place, and the messages after it too: it does not stop every
/// later sync.
#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_indexes_a_message_holding_a_nul_character() {
    let schema = common::TestSchema::new("search_nul");
    let store = schema.store().await;
    let corpus = generated_corpus();
    let with_nul = LoggedMessage {
        text: "bad \u{0} roster".into(),
        person_id: Some("p\u{0}1".into()),
        ..corpus[0].clone()
    };
    assert_eq!(store.add(vec![with_nul]).await.unwrap(), 1);
    assert_eq!(store.add(corpus[1..3].to_vec()).await.unwrap(), 2);
    let hits = store
        .full_text("bad roster", &SearchFilter::new(), 5)
        .await
        .unwrap();
    assert_eq!(hits[0].0, corpus[0].id);
    let kept = store.messages_by_id(&[corpus[0].id.clone()]).await.unwrap();
    assert_eq!(kept[0].text, "bad \u{FFFD} roster");
    assert_eq!(store.message_count().await.unwrap(), 3);
    schema.drop().await;
}

/// A stand-in embedding: the words of a text hashed into 32 buckets.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn hashed(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0; 32];
    for word in agent_sessions::transcript::search::tokens(text) {
        let bucket = word
            .bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        vector[(bucket % 32) as usize] += 1.0;
    }
    vector
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

/// `index`'s nearest messages against the memory index's exact ones on the generated
/// corpus: the same cosines for what both return, and at least `recall` of the
/// memory index's 10 — with no filter, a broad filter (a channel) and a selective one
/// (a person, always exact). A vector set again replaces the old one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
async fn nearest_like_the_memory_index(index: &dyn SearchIndex, recall: f32) {
    let corpus = generated_corpus();
    let memory = InMemoryIndex::new();
    for batch in corpus.chunks(4_000) {
        index.add(batch.to_vec()).await.unwrap();
        memory.add(batch.to_vec()).await.unwrap();
    }
    let mut vectors: Vec<(String, Vec<f32>)> = corpus
        .iter()
        .map(|m| (m.id.clone(), hashed(&m.text)))
        .collect();
    vectors[5].1 = vec![0.0; 32];
    for batch in vectors.chunks(5_000) {
        index.set_embeddings(batch.to_vec()).await.unwrap();
        memory.set_embeddings(batch.to_vec()).await.unwrap();
    }
    let moved = vec![(corpus[77].id.clone(), hashed("swap swap thursday"))];
    index.set_embeddings(moved.clone()).await.unwrap();
    memory.set_embeddings(moved).await.unwrap();
    let filters = [
        (SearchFilter::new(), recall),
        (SearchFilter::new().channel("web"), recall),
        (SearchFilter::new().person("p7"), 1.0),
    ];
    // Many messages tie (32 buckets): a hit counts when its true cosine reaches the
    // exact 10th best.
    let mut latest: std::collections::HashMap<String, Vec<f32>> = vectors.into_iter().collect();
    latest.insert(corpus[77].id.clone(), hashed("swap swap thursday"));
    let (mut found, mut wanted) = (0, 0);
    for query in [
        "swap my thursday roster",
        "swap swap thursday",
        "w17 leave payslip",
    ] {
        let vector = hashed(query);
        for (filter, floor) in &filters {
            let expected = memory.nearest(&vector, filter, 10).await.unwrap();
            let got = index.nearest(&vector, filter, 10).await.unwrap();
            assert_eq!(got.len(), 10, "{query:?} {filter:?}");
            let passing: std::collections::HashSet<String> = memory
                .messages(filter)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.id)
                .collect();
            let tenth = expected[9].1;
            let mut same = 0;
            for (id, similarity) in &got {
                assert!(passing.contains(id), "{id} passes {filter:?}");
                let real = cosine(&latest[id], &vector);
                assert!(
                    (real - similarity).abs() < 1e-5,
                    "{id}: {similarity} for {real}"
                );
                same += usize::from(real >= tenth - 1e-6);
            }
            if *floor >= 1.0 {
                for ((_, want), (id, got)) in expected.iter().zip(&got) {
                    assert!((want - got).abs() < 1e-5, "{query:?} {filter:?} {id}");
                }
            }
            found += same;
            wanted += 10;
        }
    }
    let measured = found as f32 / wanted as f32;
    assert!(measured >= recall, "recall@10 {measured}");
    let swap = index
        .nearest(&hashed("swap swap thursday"), &SearchFilter::new(), 1)
        .await
        .unwrap();
    assert!(swap[0].1 > 0.99, "{swap:?}");
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_nearest_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = agent_sessions::store::SqliteStore::open(dir.path().join("s.db")).unwrap();
    nearest_like_the_memory_index(&store, 1.0).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn postgres_nearest_recalls_the_exact_nearest() {
    let schema = common::TestSchema::new("search_vectors");
    nearest_like_the_memory_index(&schema.store().await, 0.9).await;
    schema.drop().await;
}
