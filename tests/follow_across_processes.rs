//! Following a session from outside the writing process, as an operator runs it: a
//! writer in another OS process (this test binary run again) appends messages, the
//! follower here reads them by offset, and the writer is killed with SIGKILL mid-stream.

use std::process::{Child, Command};
use std::time::Duration;

use agent_sessions::manager::LogMessage;
use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::follow::{Follow, Position, Scope, Update};
use agent_sessions::transcript::{Offset, SessionEvent, TranscriptStore, TranscriptSubscription};

const URL_VAR: &str = "OUTSIDE_WRITER_URL";
const BYTES_VAR: &str = "OUTSIDE_WRITER_BYTES";
const RESETS_VAR: &str = "OUTSIDE_WRITER_RESETS";
const AGENT_VAR: &str = "OUTSIDE_WRITER_AGENT";

fn inbound() -> InboundMessage {
    InboundMessage::direct("telegram", "4242", "hello")
}

async fn manager(url: &str) -> SessionManager {
    SessionManager::connect(url).await.unwrap().build().unwrap()
}

/// A manager of the backend at `url`, and a subscription to its transcripts' live
/// updates.
async fn manager_and_updates(url: &str) -> (SessionManager, TranscriptSubscription) {
    let backend = Backend::open(url).await.unwrap();
    let updates = backend.transcripts().subscribe();
    let manager = SessionManager::builder(backend.sessions().clone())
        .backend(backend)
        .build()
        .unwrap();
    (manager, updates)
}

/// The lines of the next update that brings lines (a key's follower first tells of
/// the session it comes to); none once a session's follower ended.
async fn next_lines(follow: &mut Follow) -> Vec<SessionEvent> {
    loop {
        match follow.next().await.unwrap() {
            Update::Events { events, .. } => return events,
            Update::Ended { .. } => return Vec::new(),
            _ => {}
        }
    }
}

/// Every line there is now.
async fn lines_now(follow: &mut Follow) -> Vec<SessionEvent> {
    let mut lines = Vec::new();
    while let Some(update) = follow.try_next().await.unwrap() {
        match update {
            Update::Events { events, .. } => lines.extend(events),
            Update::Ended { .. } => break,
            _ => {}
        }
    }
    lines
}

fn texts(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e.entry.message.as_ref().map(|m| m.text()))
        .collect()
}

/// The writer: appends `m0`, `m1`, … to the session until it is killed, or one message
/// of `OUTSIDE_WRITER_BYTES` bytes and exits. Does nothing when not started as a writer.
#[test]
fn writer_process() {
    let Ok(url) = std::env::var(URL_VAR) else {
        return;
    };
    let big = std::env::var(BYTES_VAR)
        .ok()
        .map(|b| b.parse::<usize>().unwrap());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let manager = manager(&url).await;
        let key = manager.resolve(&inbound()).await.unwrap().key;
        if std::env::var(AGENT_VAR).is_ok() {
            // Three people talk; one resets and talks on, one's session is closed.
            let say = |peer: &'static str, text: String| {
                let manager = &manager;
                async move {
                    let turn = manager
                        .turn(&InboundMessage::direct("telegram", peer, text.clone()))
                        .await
                        .unwrap();
                    let key = turn.key().clone();
                    turn.complete(format!("re {text}")).await.unwrap();
                    key
                }
            };
            for peer in ["a", "b", "c"] {
                say(peer, format!("{peer}: hello")).await;
            }
            say("a", "/new".into()).await;
            let b = say("b", "b: bye".into()).await;
            manager.session(&b).close().await.unwrap();
            say("a", "a: again".into()).await;
            say("c", "c: end".into()).await;
            return;
        }
        if std::env::var(RESETS_VAR).is_ok() {
            // Three sessions of three messages, each ended by a reset, then `end`.
            for session in 0..3 {
                for n in 0..3 {
                    manager
                        .session(&key)
                        .log_message(LogMessage::inbound(format!("s{session}m{n}")))
                        .await
                        .unwrap();
                }
                manager.session(&key).reset().await.unwrap();
            }
            manager
                .session(&key)
                .log_message(LogMessage::inbound("end"))
                .await
                .unwrap();
            return;
        }
        if let Some(bytes) = big {
            manager
                .session(&key)
                .log_message(LogMessage::inbound("x".repeat(bytes)))
                .await
                .unwrap();
            return;
        }
        for n in 0.. {
            manager
                .session(&key)
                .log_message(LogMessage::inbound(format!("m{n}")))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
}

fn start_writer_with(url: &str, mode: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, url)
        .env(mode, "1")
        .spawn()
        .unwrap()
}

fn start_writer(url: &str, bytes: Option<usize>) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "writer_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(URL_VAR, url);
    if let Some(bytes) = bytes {
        command.env(BYTES_VAR, bytes.to_string());
    }
    command.spawn().unwrap()
}

/// A follower started before a writer process appends sees the writer's messages in
/// order, each once; after the writer is killed, a follower resumed from the saved
/// position reads exactly the rest, and the two together are the whole transcript.
async fn a_killed_writer_is_followed_without_gaps_or_repeats(url: &str) {
    let manager = manager(url).await;
    let key = manager.resolve(&inbound()).await.unwrap().key;
    let mut follow = manager.session(&key).follow(Position::Start).await.unwrap();
    let mut writer = start_writer(url, None);
    let mut seen = Vec::new();
    while seen.len() < 100 {
        let events = tokio::time::timeout(Duration::from_secs(20), next_lines(&mut follow))
            .await
            .expect("the writer's messages arrive");
        seen.extend(texts(&events));
    }
    let saved = follow.position();
    drop(follow);
    writer.kill().unwrap();
    writer.wait().unwrap();

    let mut resumed = manager.session(&key).follow(saved).await.unwrap();
    seen.extend(texts(&lines_now(&mut resumed).await));
    let whole = texts(
        &manager
            .session(&key)
            .replay(Offset::START)
            .await
            .unwrap()
            .events,
    );
    let expected: Vec<String> = (0..whole.len()).map(|n| format!("m{n}")).collect();
    assert_eq!(
        whole, expected,
        "the writer's messages are stored once each, in order"
    );
    assert_eq!(
        seen, expected,
        "the follower saw every message once, in order"
    );
}

/// What a key follower reads until `end`: the texts, and for each session it moved to,
/// the session's id and why it started.
async fn follow_to_the_end(follow: &mut Follow) -> (Vec<String>, Vec<(String, String)>) {
    let (mut seen, mut sessions) = (Vec::new(), Vec::new());
    while seen.last().map(String::as_str) != Some("end") {
        let update = tokio::time::timeout(Duration::from_secs(20), follow.next())
            .await
            .expect("the writer's messages and sessions arrive")
            .unwrap();
        match update {
            Update::Session { session, .. } => sessions.push((
                session.entry.session_id.clone(),
                session.entry.start_reason.clone().unwrap_or_default(),
            )),
            Update::Events { events, .. } => seen.extend(texts(&events)),
            other => panic!("unexpected {other:?}"),
        }
    }
    (seen, sessions)
}

/// A follower of a session key reads, from another process's writes, every message of
/// the key's session and of each session that replaced it after a reset — in order,
/// each once — and one that resumes from the first session after the writer finished
/// visits every session the key went through meanwhile.
async fn a_key_is_followed_across_resets_made_by_another_process(url: &str) {
    let manager = manager(url).await;
    let key = manager.resolve(&inbound()).await.unwrap().key;
    let first = manager.session(&key).get().await.unwrap().unwrap();
    let mut follow = manager
        .follow(Scope::Key(key.clone()), Position::Start)
        .await
        .unwrap();
    let mut writer = start_writer_with(url, RESETS_VAR);
    let (seen, sessions) = follow_to_the_end(&mut follow).await;
    assert!(writer.wait().unwrap().success());
    let expected: Vec<String> = (0..3)
        .flat_map(|s| (0..3).map(move |n| format!("s{s}m{n}")))
        .chain(["end".to_owned()])
        .collect();
    assert_eq!(
        seen, expected,
        "every message once, in order, across resets"
    );
    let reasons: Vec<&str> = sessions.iter().map(|(_, why)| why.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "no_session",
            "explicit_reset",
            "explicit_reset",
            "explicit_reset"
        ]
    );
    assert_eq!(sessions[0].0, first.entry.session_id);

    let position = Position::After {
        session_id: first.entry.session_id.clone(),
        offset: Offset::START,
    };
    let mut resumed = manager
        .follow(Scope::Key(key.clone()), position)
        .await
        .unwrap();
    let (again, later) = follow_to_the_end(&mut resumed).await;
    assert_eq!(again, expected, "a late follower misses no session");
    assert_eq!(
        later,
        sessions[1..],
        "the sessions after the resumed one, in order"
    );

    let stranger = Position::After {
        session_id: "not-a-session-of-this-key".into(),
        offset: Offset::START,
    };
    let refused = manager
        .follow(Scope::Key(key.clone()), stranger)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, agent_sessions::Error::InvalidId { .. }),
        "{refused}"
    );
}

/// The lines the writer's sessions hold, each session's in order, by peer.
type Said = std::collections::BTreeMap<String, Vec<Vec<String>>>;

/// What an agent follower reads until it has the writer's 13 lines and knows `b`'s
/// session is closed: each session's lines by peer (sessions sorted by their first
/// line), and the sessions it was told of (peer, why it started, whether new).
async fn follow_agent_to_the_end(follow: &mut Follow) -> (Said, Vec<(String, String, bool)>) {
    let mut by_session = std::collections::BTreeMap::<String, (String, Vec<String>)>::new();
    let mut b_status = String::new();
    let mut sessions = Vec::new();
    let peer = |key: &SessionKey| key.as_str().rsplit(':').next().unwrap().to_owned();
    let lines = |by_session: &std::collections::BTreeMap<String, (String, Vec<String>)>| {
        by_session
            .values()
            .map(|(_, said)| said.len())
            .sum::<usize>()
    };
    while lines(&by_session) < 13 || b_status != "closed" {
        let update = tokio::time::timeout(Duration::from_secs(20), follow.next())
            .await
            .expect("the writer's sessions and lines arrive")
            .unwrap();
        let mut note_status = |session: &StoredSession| {
            if peer(&session.key) == "b" {
                b_status = session.entry.status.as_ref().unwrap().as_str().to_owned();
            }
        };
        match update {
            Update::Session { session, new, .. } => {
                note_status(&session);
                sessions.push((
                    peer(&session.key),
                    session.entry.start_reason.clone().unwrap_or_default(),
                    new,
                ));
            }
            Update::Status { session } => note_status(&session),
            Update::Events {
                key,
                session_id,
                events,
                ..
            } => by_session
                .entry(session_id)
                .or_insert_with(|| (peer(&key), Vec::new()))
                .1
                .extend(texts(&events)),
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut said = Said::new();
    for (peer, lines) in by_session.into_values() {
        said.entry(peer).or_default().push(lines);
    }
    for sessions in said.values_mut() {
        sessions.sort();
    }
    (said, sessions)
}

/// A follower of an agent sees, from another process's turns, each session as it
/// starts (a reset's new session too), a close, and every line of each — and nothing
/// of a session last active before it started; one started again at an earlier
/// position delivers the same lines.
async fn an_agents_sessions_are_followed_from_another_process(url: &str) {
    let manager = manager(url).await;
    let old = manager
        .turn(&InboundMessage::direct("telegram", "z", "z: before"))
        .await
        .unwrap();
    old.complete("re z: before").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut follow = manager
        .follow(Scope::Agent(AgentId::main()), Position::Now)
        .await
        .unwrap();
    let start = follow.position();
    let mut writer = start_writer_with(url, AGENT_VAR);
    let (said, sessions) = follow_agent_to_the_end(&mut follow).await;
    assert!(writer.wait().unwrap().success());
    let session = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let expected: Said = [
        (
            "a",
            vec![
                session(&["New session started.", "a: again", "re a: again"]),
                session(&["a: hello", "re a: hello"]),
            ],
        ),
        (
            "b",
            vec![session(&["b: hello", "re b: hello", "b: bye", "re b: bye"])],
        ),
        (
            "c",
            vec![session(&["c: hello", "re c: hello", "c: end", "re c: end"])],
        ),
    ]
    .into_iter()
    .map(|(peer, sessions)| (peer.to_owned(), sessions))
    .collect();
    assert_eq!(
        said, expected,
        "every line of every session, nothing from before"
    );
    let mut told: Vec<_> = sessions.clone();
    told.sort();
    assert_eq!(
        told,
        [
            // The writer's own first session, which it resolved and never wrote to.
            ("4242".to_owned(), "no_session".to_owned(), true),
            ("a".to_owned(), "explicit_reset".to_owned(), true),
            ("a".to_owned(), "no_session".to_owned(), true),
            ("b".to_owned(), "no_session".to_owned(), true),
            ("c".to_owned(), "no_session".to_owned(), true),
        ],
        "each session once; none from before the follower started: {sessions:?}"
    );

    let mut again = manager
        .follow(Scope::Agent(AgentId::main()), start)
        .await
        .unwrap();
    let (said_again, _) = follow_agent_to_the_end(&mut again).await;
    assert_eq!(
        said_again, expected,
        "started again, it delivers the same lines"
    );
}

/// Events appended before a reset reach a follower of the session that was reset,
/// even when it reads them only after the reset archived the transcript.
async fn events_before_a_reset_reach_the_follower(url: &str) {
    let manager = manager(url).await;
    let key = manager.resolve(&inbound()).await.unwrap().key;
    let log = |text: &'static str| {
        let manager = &manager;
        let key = &key;
        async move {
            manager
                .session(key)
                .log_message(LogMessage::inbound(text))
                .await
                .unwrap()
        }
    };
    log("before").await;
    let id = manager
        .session(&key)
        .get()
        .await
        .unwrap()
        .unwrap()
        .entry
        .session_id;
    let mut follow = manager
        .follow(Scope::Session(id), Position::Start)
        .await
        .unwrap();
    assert_eq!(texts(&next_lines(&mut follow).await), ["before"]);
    log("last words").await;
    manager.session(&key).reset().await.unwrap();
    let after = tokio::time::timeout(Duration::from_secs(5), next_lines(&mut follow))
        .await
        .expect("the follower is not left waiting on an archived transcript");
    assert_eq!(texts(&after), ["last words"]);
}

/// Following a session replaced by a reset, by its id, reads its (archived) transcript.
async fn a_reset_session_can_be_followed_by_id(url: &str) {
    let manager = manager(url).await;
    let resolution = manager.resolve(&inbound()).await.unwrap();
    let old_id = resolution.entry().session_id.clone();
    manager
        .session(&resolution.key)
        .log_message(LogMessage::inbound("old session"))
        .await
        .unwrap();
    manager.session(&resolution.key).reset().await.unwrap();
    let mut follow = manager
        .follow(Scope::Session(old_id), Position::Start)
        .await
        .expect("a closed session is found by its id");
    let events = tokio::time::timeout(Duration::from_secs(5), next_lines(&mut follow))
        .await
        .expect("the closed session's messages are read");
    assert_eq!(texts(&events), ["old session"]);
}

/// A 4 MiB message appended by another process reaches a follower here whole.
async fn a_huge_append_from_another_process_is_followed(url: &str) {
    const BYTES: usize = 4 << 20;
    let (manager, mut subscription) = manager_and_updates(url).await;
    let key = manager.resolve(&inbound()).await.unwrap().key;
    let mut follow = manager.session(&key).follow(Position::Start).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = start_writer(url, Some(BYTES)).wait().unwrap();
    assert!(status.success());
    let events = tokio::time::timeout(Duration::from_secs(20), next_lines(&mut follow))
        .await
        .expect("the huge message arrives");
    assert_eq!(texts(&events).concat().len(), BYTES);
    if !url.starts_with("json:") {
        let update = tokio::time::timeout(Duration::from_secs(20), subscription.recv())
            .await
            .expect("the subscriber hears the other process")
            .unwrap();
        assert_eq!(texts(&update.events).concat().len(), BYTES);
    }
}

/// A subscriber that never reads while thousands of appends happen costs a bounded
/// amount and is then told how many it missed.
async fn a_subscriber_that_never_reads_is_told_it_lagged(url: &str) {
    let (manager, mut sleeping) = manager_and_updates(url).await;
    let key = manager.resolve(&inbound()).await.unwrap().key;
    for n in 0..1_500 {
        manager
            .session(&key)
            .log_message(LogMessage::inbound(format!("m{n}")))
            .await
            .unwrap();
    }
    let first = tokio::time::timeout(Duration::from_secs(5), sleeping.recv())
        .await
        .expect("the subscriber is answered");
    assert!(
        matches!(
            first,
            Err(agent_sessions::transcript::SubscriptionError::Lagged(_))
        ),
        "told it lagged, got {first:?}"
    );
}

fn json_url(dir: &tempfile::TempDir) -> String {
    format!("json:{}", dir.path().display())
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("sessions.db").display())
}

#[cfg(postgres_tests)]
fn postgres_url() -> String {
    let base = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").unwrap();
    let schema = format!("outside_{}_{}", std::process::id(), rand_suffix());
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}schema={schema}")
}

#[cfg(postgres_tests)]
fn rand_suffix() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos() as usize
}

macro_rules! per_backend {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread")]
            async fn json() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&json_url(&dir)).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&sqlite_url(&dir)).await;
            }

            #[cfg(postgres_tests)]
            #[tokio::test(flavor = "multi_thread")]
            async fn postgres() {
                super::$name(&postgres_url()).await;
            }
        }
    };
}

per_backend!(a_killed_writer_is_followed_without_gaps_or_repeats);
per_backend!(events_before_a_reset_reach_the_follower);
per_backend!(a_key_is_followed_across_resets_made_by_another_process);
per_backend!(an_agents_sessions_are_followed_from_another_process);
per_backend!(a_reset_session_can_be_followed_by_id);
per_backend!(a_huge_append_from_another_process_is_followed);
per_backend!(a_subscriber_that_never_reads_is_told_it_lagged);

const SUBSCRIBER_VAR: &str = "OUTSIDE_SUBSCRIBER_URL";

/// The subscriber: prints `ready`, then counts the events it hears and the updates it
/// is told it missed until nothing arrives for 5 s, and prints `heard <n> missed <m>`.
/// Does nothing when not started as a subscriber.
#[test]
fn subscriber_process() {
    let Ok(url) = std::env::var(SUBSCRIBER_VAR) else {
        return;
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let backend = agent_sessions::store::Backend::open(&url).await.unwrap();
        let mut feed = backend.transcripts().subscribe();
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!("ready");
        let patience: u32 =
            std::env::var("OUTSIDE_QUIET_ROUNDS").map_or(3, |rounds| rounds.parse().unwrap());
        let (mut heard, mut missed, mut quiet) = (0u64, 0u64, 0);
        // A wait that ran out while the process was stopped does not count as quiet.
        while quiet < patience {
            match tokio::time::timeout(Duration::from_secs(5), feed.recv()).await {
                Ok(Ok(update)) => heard += update.events.len() as u64,
                Ok(Err(agent_sessions::transcript::SubscriptionError::Lagged(n))) => missed += n,
                Ok(Err(_)) => break,
                Err(_) if heard + missed > 0 => break,
                Err(_) => quiet += 1,
            }
        }
        println!("heard {heard} missed {missed} after {} quiet waits", quiet);
    });
}

/// A subscribing process that is paused (SIGSTOP) while another process appends more
/// than the SQLite feed keeps either hears every append or is told how many it missed:
/// appends are never lost silently.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
#[ignore = "about 5 minutes: 12,000 fsynced appends, then a slow catch-up"]
async fn a_paused_sqlite_subscriber_is_told_what_it_missed() {
    paused_sqlite_subscriber(12_000).await;
}

/// The same with fewer appends than the feed keeps: the paused subscriber hears them all.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_sqlite_subscriber_hears_a_few_appends() {
    paused_sqlite_subscriber(200).await;
}

#[cfg(unix)]
async fn paused_sqlite_subscriber(appends: u64) {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    let backend = agent_sessions::store::Backend::open(&url).await.unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "subscriber_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SUBSCRIBER_VAR, &url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines.next().unwrap().unwrap().ends_with("ready") {}
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let transcript = agent_sessions::transcript::TranscriptRef::new(AgentId::main(), "paused");
    for n in 0..appends {
        let entry = agent_sessions::transcript::TranscriptEntry::user_text(
            format!("m{n}"),
            chrono::Utc::now(),
        );
        backend
            .transcripts()
            .append(&transcript, vec![entry])
            .await
            .unwrap();
    }
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let report = lines
        .find_map(|line| line.ok().filter(|l| l.contains("heard ")))
        .expect("the subscriber reports");
    child.wait().unwrap();
    let numbers: Vec<u64> = report
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (heard, missed) = (numbers[0], numbers[1]);
    assert!(
        heard + missed >= appends,
        "{appends} appends, {report}: the rest were lost without a word"
    );
}
