//! Live updates across processes: two handles on one store stand for two processes
//! (each handle has its own subscribers and hears the other's appends only through the
//! store). A subscriber hears the other handle's appends once; a follower sees them in
//! order, woken by the store's announcement where it has one.

mod common;
#[path = "common/fails_over.rs"]
mod fails_over;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::transcript::follow::{Position, Scope, Update};
use agent_sessions::transcript::{
    SessionEvent, TranscriptEntry, TranscriptRef, TranscriptStore, TranscriptSubscription,
};

fn transcript(id: &str) -> TranscriptRef {
    TranscriptRef::new(AgentId::main(), id)
}

fn said(text: &str) -> TranscriptEntry {
    TranscriptEntry::user_text(text, chrono::Utc::now())
}

fn texts(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.entry.message.as_ref().unwrap().text())
        .collect()
}

/// Everything `feed` delivers within `quiet` of the previous update.
async fn drain(feed: &mut TranscriptSubscription, quiet: Duration) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(Ok(update)) = tokio::time::timeout(quiet, feed.recv()).await {
        seen.extend(texts(&update.events));
    }
    seen
}

/// `here` hears the appends made through `there` once each, in order per transcript,
/// and its own appends once.
async fn subscribers_hear_the_other_handle(
    here: &dyn TranscriptStore,
    there: &dyn TranscriptStore,
) {
    let mut feed = here.subscribe();
    // The reader of the other handle's appends starts with the first subscription.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = transcript("s-remote");
    for n in 0..5 {
        there
            .append(&t, vec![said(&format!("there {n}"))])
            .await
            .unwrap();
    }
    here.append(&transcript("s-local"), vec![said("here")])
        .await
        .unwrap();
    let mut seen = drain(&mut feed, Duration::from_secs(3)).await;
    seen.sort();
    assert_eq!(
        seen,
        ["here", "there 0", "there 1", "there 2", "there 3", "there 4"],
        "each append once"
    );
}

/// A first subscription made where there is no runtime to read other processes'
/// appends on does not keep later subscriptions on the same handle from hearing them.
async fn a_subscription_outside_a_runtime_does_not_deafen_later_ones(
    here: &dyn TranscriptStore,
    there: &dyn TranscriptStore,
) {
    let outside = std::thread::scope(|scope| scope.spawn(|| here.subscribe()).join().unwrap());
    drop(outside);
    subscribers_hear_the_other_handle(here, there).await;
}

/// A handle whose first subscriber's runtime shut down (taking the reader of other
/// processes' appends with it) starts another reader for the next subscriber, on
/// `main`.
fn subscribers_hear_the_other_handle_after_a_runtime_shut_down(
    main: &tokio::runtime::Runtime,
    here: &dyn TranscriptStore,
    there: &dyn TranscriptStore,
) {
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        drop(here.subscribe());
        tokio::time::sleep(Duration::from_millis(100)).await;
    });
    drop(first);
    main.block_on(subscribers_hear_the_other_handle(here, there));
}

/// An append whose transcript is archived right after it (a reset) still reaches a
/// subscriber on `here`.
async fn subscribers_hear_appends_archived_right_after(
    here: &dyn TranscriptStore,
    there: &dyn TranscriptStore,
) {
    use agent_sessions::transcript::ArchiveReason;
    let mut feed = here.subscribe();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = transcript("s-reset");
    there.append(&t, vec![said("last words")]).await.unwrap();
    there
        .archive(&t, ArchiveReason::Reset, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(
        drain(&mut feed, Duration::from_secs(3)).await,
        ["last words"]
    );
}

/// A follower on `here` of a transcript appended through `there` sees every event in
/// order, and is woken by the announcement well before its own next look.
async fn followers_are_woken_by_the_other_handle(
    here: Arc<dyn TranscriptStore>,
    there: &dyn TranscriptStore,
    poll: Duration,
) {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(here)
        .build()
        .unwrap();
    let message = InboundMessage::direct("telegram", "42", "hi");
    let key = manager.resolve(&message).await.unwrap().key;
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    let t = TranscriptRef::of(&key, &entry, &AgentId::main());
    let mut follow = manager
        .follow(Scope::Session(entry.session_id.clone()), Position::Start)
        .await
        .unwrap()
        .poll_interval(poll);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = Vec::new();
    for n in 0..5 {
        there.append(&t, vec![said(&format!("{n}"))]).await.unwrap();
        while seen.len() <= n {
            let update = tokio::time::timeout(Duration::from_secs(5), follow.next())
                .await
                .expect("woken within 5 s")
                .unwrap();
            let Update::Events { events, .. } = update else {
                panic!("the transcript is live: {update:?}")
            };
            seen.extend(texts(&events));
        }
    }
    assert_eq!(seen, ["0", "1", "2", "3", "4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_transcripts_follow_across_handles_by_looking_again() {
    use agent_sessions::store::FileTranscriptStore;
    let dir = tempfile::tempdir().unwrap();
    let there = FileTranscriptStore::new(dir.path());
    let here: Arc<dyn TranscriptStore> = Arc::new(FileTranscriptStore::new(dir.path()));
    // Files announce nothing: the follower's own look every 20 ms finds the appends.
    followers_are_woken_by_the_other_handle(here, &there, Duration::from_millis(20)).await;
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use agent_sessions::store::SqliteStore;

    fn two_handles() -> (SqliteStore, SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        (
            SqliteStore::open(&path).unwrap(),
            SqliteStore::open(&path).unwrap(),
            dir,
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn subscribers_hear_another_process() {
        let (here, there, _dir) = two_handles();
        subscribers_hear_the_other_handle(&here, &there).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscription_outside_a_runtime_does_not_deafen_later_ones() {
        let (here, there, _dir) = two_handles();
        super::a_subscription_outside_a_runtime_does_not_deafen_later_ones(&here, &there).await;
    }

    #[test]
    fn subscribers_hear_another_process_after_a_runtime_shut_down() {
        let main = tokio::runtime::Runtime::new().unwrap();
        let (here, there, _dir) = two_handles();
        subscribers_hear_the_other_handle_after_a_runtime_shut_down(&main, &here, &there);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscriber_hears_appends_to_a_transcript_archived_right_after() {
        let (here, there, _dir) = two_handles();
        subscribers_hear_appends_archived_right_after(&here, &there).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn followers_are_woken_by_another_process() {
        let (here, there, _dir) = two_handles();
        // An hour between looks: only the feed can wake the follower in time.
        followers_are_woken_by_the_other_handle(Arc::new(here), &there, Duration::from_secs(3600))
            .await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::common::TestSchema;
    use agent_sessions::store::PostgresStore;

    /// A fresh schema and two store values on it, standing for two hosts.
    async fn two_hosts() -> (TestSchema, PostgresStore, PostgresStore) {
        let schema = TestSchema::new("live");
        let (here, there) = (schema.store().await, schema.store().await);
        (schema, here, there)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn subscribers_hear_another_host() {
        let (schema, here, there) = two_hosts().await;
        subscribers_hear_the_other_handle(&here, &there).await;
        drop((here, there));
        schema.drop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_subscription_outside_a_runtime_does_not_deafen_later_ones() {
        let (schema, here, there) = two_hosts().await;
        super::a_subscription_outside_a_runtime_does_not_deafen_later_ones(&here, &there).await;
        drop((here, there));
        schema.drop().await;
    }

    #[test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    fn subscribers_hear_another_host_after_a_runtime_shut_down() {
        let main = tokio::runtime::Runtime::new().unwrap();
        let schema = TestSchema::new("live");
        let (here, there) = main.block_on(async { (schema.store().await, schema.store().await) });
        subscribers_hear_the_other_handle_after_a_runtime_shut_down(&main, &here, &there);
        drop((here, there));
        main.block_on(schema.drop());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_subscriber_hears_appends_to_a_transcript_archived_right_after() {
        let (schema, here, there) = two_hosts().await;
        subscribers_hear_appends_archived_right_after(&here, &there).await;
        drop((here, there));
        schema.drop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn followers_are_woken_by_notify() {
        let (schema, here, there) = two_hosts().await;
        // An hour between looks: only NOTIFY can wake the follower in time.
        followers_are_woken_by_the_other_handle(Arc::new(here), &there, Duration::from_secs(3600))
            .await;
        drop(there);
        schema.drop().await;
    }
}

/// A transcript store whose chunk reads fail (a lost connection, a transient error)
/// every other time once `failing` is set, and take `slow` each.
struct FailingReads {
    inner: agent_sessions::transcript::InMemoryTranscriptStore,
    failing: std::sync::atomic::AtomicBool,
    reads: std::sync::atomic::AtomicUsize,
    slow: Duration,
}

#[async_trait::async_trait]
impl TranscriptStore for FailingReads {
    async fn create(
        &self,
        transcript: &TranscriptRef,
        header: &agent_sessions::transcript::SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &agent_sessions::transcript::SessionHeader,
    ) -> agent_sessions::Result<bool> {
        self.inner.fork(parent, child, header).await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> agent_sessions::Result<Vec<SessionEvent>> {
        self.inner.append(transcript, entries).await
    }

    async fn read(
        &self,
        transcript: &TranscriptRef,
        from: agent_sessions::transcript::Offset,
    ) -> agent_sessions::Result<agent_sessions::transcript::TranscriptRead> {
        self.inner.read(transcript, from).await
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: agent_sessions::transcript::Offset,
        max_bytes: usize,
    ) -> agent_sessions::Result<agent_sessions::transcript::TranscriptRead> {
        use std::sync::atomic::Ordering::SeqCst;
        tokio::time::sleep(self.slow).await;
        if self.failing.load(SeqCst) && self.reads.fetch_add(1, SeqCst) % 2 == 1 {
            return Err(agent_sessions::Error::LockTimeout {
                path: "transcripts".into(),
                holder: None,
                waited: Duration::from_secs(1),
            });
        }
        self.inner.read_chunk(transcript, from, max_bytes).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: agent_sessions::transcript::ArchiveReason,
        at: chrono::DateTime<chrono::Utc>,
    ) -> agent_sessions::Result<Option<std::path::PathBuf>> {
        self.inner.archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> agent_sessions::Result<bool> {
        self.inner.remove(transcript).await
    }

    async fn query_log(
        &self,
        query: &agent_sessions::transcript::LogQuery,
    ) -> agent_sessions::Result<Vec<agent_sessions::transcript::LogRecord>> {
        self.inner.query_log(query).await
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.subscribe()
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.inner.location(transcript)
    }
}

/// Three turns of lines of 100 KB on a manager over a [`FailingReads`] store whose reads
/// take `slow` (a session's new lines take several chunks to read): the store, the
/// lines said in order, and a follower of every session from the start.
async fn three_turns_of_long_lines(
    slow: Duration,
) -> (
    Arc<FailingReads>,
    Vec<String>,
    agent_sessions::transcript::follow::Follow,
) {
    let transcripts = Arc::new(FailingReads {
        inner: agent_sessions::transcript::InMemoryTranscriptStore::new(),
        failing: false.into(),
        reads: 0.into(),
        slow,
    });
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(transcripts.clone())
        .build()
        .unwrap();
    // Lines of 100 KB: a session's new lines take several chunks to read.
    let said: Vec<String> = (0..6)
        .map(|n| format!("{n}{}", "x".repeat(100_000)))
        .collect();
    for pair in said.chunks(2) {
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", &pair[0]))
            .await
            .unwrap();
        turn.complete(pair[1].as_str()).await.unwrap();
    }
    let follow = manager
        .follow(Scope::Agent(AgentId::main()), Position::Start)
        .await
        .unwrap();
    (transcripts, said, follow)
}

/// Each line's first character and length: long lines compared without printing them.
fn shapes(texts: &[String]) -> Vec<(char, usize)> {
    texts
        .iter()
        .map(|t| (t.chars().next().unwrap(), t.len()))
        .collect()
}

/// A follower of every session whose reads fail now and then — the database went away
/// for a moment — and that is asked again after each failure reads every line once, in
/// order: what it read before a failure is not dropped with it.
#[tokio::test]
async fn a_follower_asked_again_after_failed_reads_misses_no_line() {
    let (transcripts, said, mut follow) = three_turns_of_long_lines(Duration::ZERO).await;
    transcripts
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut read, mut failures) = (Vec::new(), 0);
    for _ in 0..100 {
        match follow.try_next().await {
            Ok(Some(Update::Events { events, .. })) => read.extend(
                events
                    .iter()
                    .filter_map(|e| e.entry.message.as_ref())
                    .map(|m| m.text()),
            ),
            Ok(_) => {}
            Err(error) => {
                assert!(error.is_transient(), "{error}");
                failures += 1;
            }
        }
    }
    assert!(failures > 0, "the reads failed now and then");
    assert_eq!(shapes(&read), shapes(&said), "every line once, in order");
}

/// A follower whose `next` is given up on part way — a caller's timeout while a
/// session's lines take several slow reads — and called again delivers every line once,
/// in order.
#[tokio::test]
async fn a_follower_whose_calls_time_out_misses_no_line() {
    let (_transcripts, said, mut follow) =
        three_turns_of_long_lines(Duration::from_millis(20)).await;
    let (mut read, mut timeouts) = (Vec::new(), 0);
    for _ in 0..200 {
        match tokio::time::timeout(Duration::from_millis(30), follow.next()).await {
            Ok(Ok(Update::Events { events, .. })) => read.extend(
                events
                    .iter()
                    .filter_map(|e| e.entry.message.as_ref())
                    .map(|m| m.text()),
            ),
            Ok(Ok(_)) => {}
            Ok(Err(error)) => panic!("{error}"),
            Err(_) => timeouts += 1,
        }
        if read.len() >= said.len() {
            break;
        }
    }
    assert!(timeouts > 0, "calls were given up on part way");
    assert_eq!(shapes(&read), shapes(&said), "every line once, in order");
}

/// What a follower holds once it has taken every update there is: the lines it read,
/// less those it was told the store lost, and how often it was told so.
async fn taken(follow: &mut agent_sessions::transcript::follow::Follow) -> (Vec<String>, usize) {
    let (mut lines, mut rewound) = (Vec::<(u64, String)>::new(), 0);
    while let Some(update) = follow.try_next().await.unwrap() {
        match update {
            Update::Events { events, .. } => lines.extend(
                events
                    .iter()
                    .map(|e| (e.offset.0, texts(std::slice::from_ref(e)).remove(0))),
            ),
            Update::Rewound {
                next: Position::After { offset, .. },
                ..
            } => {
                rewound += 1;
                lines.retain(|(at, _)| *at < offset.0);
            }
            _ => {}
        }
    }
    (lines.into_iter().map(|(_, text)| text).collect(), rewound)
}

/// A follower that read lines the store then lost — a database failed over to a
/// standby that had not received them — is told so and reads what the promoted store
/// has in their places: it misses no line, and keeps none the store lost. Whether it
/// looks while the transcript is shorter than where it was, or once lines were written
/// in the lost ones' places; following the key or the agent.
#[tokio::test]
async fn a_follower_of_a_store_that_lost_lines_it_read_is_told_and_misses_none() {
    for (scope, looks_between) in [
        ("key", true),
        ("key", false),
        ("agent", true),
        ("agent", false),
    ] {
        let transcripts = Arc::new(fails_over::FailsOver::new());
        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(transcripts.clone())
            .build()
            .unwrap();
        let exchange = |question: &'static str, answer: &'static str| {
            let manager = &manager;
            async move {
                let message = InboundMessage::direct("telegram", "42", question);
                let turn = manager.turn(&message).await.unwrap();
                turn.complete(answer).await.unwrap();
            }
        };
        exchange("q1", "a1").await;
        let key = manager
            .key_for(&InboundMessage::direct("telegram", "42", "x"))
            .unwrap();
        let mut follow = match scope {
            "key" => manager.follow(Scope::Key(key), Position::Start).await,
            _ => {
                manager
                    .follow(Scope::Agent(AgentId::main()), Position::Start)
                    .await
            }
        }
        .unwrap();
        assert_eq!(
            taken(&mut follow).await,
            (vec!["q1".into(), "a1".into()], 0)
        );

        // The standby stops receiving: what follows is read, then lost.
        transcripts.pause_replication();
        exchange("q2", "a2").await;
        exchange("q3", "a3").await;
        let (read, _) = taken(&mut follow).await;
        assert_eq!(
            read,
            ["q2", "a2", "q3", "a3"],
            "{scope}: read on the primary"
        );

        transcripts.fail_over();
        if looks_between {
            let (read, rewound) = taken(&mut follow).await;
            assert_eq!((read.len(), rewound), (0, 1), "{scope}: told at once");
        }
        exchange("q4", "a4").await;
        exchange("q5", "a5").await;
        exchange("q6", "a6").await;
        let (read, rewound) = taken(&mut follow).await;
        assert_eq!(
            read,
            ["q4", "a4", "q5", "a5", "q6", "a6"],
            "{scope}, looking between: {looks_between}: what the promoted store has"
        );
        assert_eq!(rewound, usize::from(!looks_between), "{scope}: told once");
    }
}

/// A follower reads past lines that are no events — here 600 KB of them, more than two
/// chunks, as a crashed writer or a stray program may leave — and on to the lines after.
#[tokio::test]
async fn a_follower_reads_past_a_long_run_of_lines_that_are_no_events() {
    use agent_sessions::store::FileTranscriptStore;
    let dir = tempfile::tempdir().unwrap();
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(FileTranscriptStore::new(dir.path()))
        .build()
        .unwrap();
    let message = |text: &str| InboundMessage::direct("telegram", "42", text);
    let turn = manager.turn(&message("before")).await.unwrap();
    turn.complete("one").await.unwrap();
    let key = manager.key_for(&message("x")).unwrap();
    let mut follow = manager
        .follow(Scope::Key(key), Position::Start)
        .await
        .unwrap()
        .poll_interval(Duration::from_millis(10));
    let (read, _) = taken(&mut follow).await;
    assert_eq!(read, ["before", "one"]);

    let file = walkdir(dir.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let mut garbage = String::new();
    for n in 0..600 {
        garbage.push_str(&format!("not json {n} {}\n", "x".repeat(1_000)));
    }
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&garbage);
    std::fs::write(&file, text).unwrap();
    let turn = manager.turn(&message("after")).await.unwrap();
    turn.complete("two").await.unwrap();

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.len() < 2 && tokio::time::Instant::now() < deadline {
        let (read, rewound) = taken(&mut follow).await;
        assert_eq!(rewound, 0);
        seen.extend(read);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, ["after", "two"]);
}

/// Every file under `dir`.
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walkdir(&path));
        } else {
            found.push(path);
        }
    }
    found
}
