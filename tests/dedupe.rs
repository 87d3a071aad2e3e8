//! A message the channel delivers twice is answered once: the same message id within
//! the dedupe window runs nothing, logs nothing and takes no chatter — in one process,
//! after a restart, and while the first turn still runs in another process.
//!
//! Each test runs on every backend this build has: a JSON tree, SQLite (feature
//! `sqlite`) and PostgreSQL (feature `postgres`, with `AGENT_SESSIONS_TEST_POSTGRES_URL`).

mod common;

#[path = "common/flaky.rs"]
mod flaky;
#[path = "common/stores.rs"]
mod stores;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_sessions::exactly_once::DEFAULT_DEDUPE_WINDOW;
use agent_sessions::freshness::ManualClock;
use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::{InMemoryTranscriptStore, Offset};
use stores::Stores;

fn update(id: &str, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text).with_message_id(id)
}

fn in_group(id: &str, sender: &str, text: &str) -> InboundMessage {
    InboundMessage::group("telegram", "-100", sender, text)
        .with_sender_name(sender)
        .with_message_id(id)
}

/// How many lines of `key`'s session transcript say `text`.
async fn lines_saying(manager: &SessionManager, key: &SessionKey, text: &str) -> usize {
    manager
        .session(key)
        .replay(Offset::START)
        .await
        .unwrap()
        .events
        .iter()
        .filter_map(|event| event.entry.message.as_ref())
        .filter(|message| message.text().contains(text))
        .count()
}

#[tokio::test]
async fn a_message_delivered_again_is_answered_once_even_after_a_restart() {
    let stores = Stores::new("dedupe_again");
    for url in &stores.urls {
        let key = {
            let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
            let first = manager
                .turn(&update("1001", "When is my shift?"))
                .await
                .unwrap();
            assert_eq!(first.action(), &TurnAction::Answer, "{url}");
            let key = first.key().clone();
            first.complete("Thursday at 9.").await.unwrap();
            let again = manager
                .turn(&update("1001", "When is my shift?"))
                .await
                .unwrap();
            assert_eq!(again.action(), &TurnAction::Duplicate, "{url}");
            assert!(again.input().is_none() && again.messages().await.unwrap().is_empty());
            assert!(again.complete("Thursday at 9.").await.unwrap().is_empty());
            key
        };
        // The bot restarts and the channel delivers the update once more.
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let after_restart = manager
            .turn(&update("1001", "When is my shift?"))
            .await
            .unwrap();
        assert_eq!(after_restart.action(), &TurnAction::Duplicate, "{url}");
        drop(after_restart);
        assert_eq!(
            lines_saying(&manager, &key, "When is my shift?").await,
            1,
            "{url}"
        );
        assert_eq!(
            lines_saying(&manager, &key, "Thursday at 9.").await,
            1,
            "{url}"
        );
        // Another message, or the same id in another chat, is new.
        let next = manager.turn(&update("1002", "Thanks!")).await.unwrap();
        assert_eq!(next.action(), &TurnAction::Answer, "{url}");
        let elsewhere = InboundMessage::direct("telegram", "43", "hi").with_message_id("1001");
        let other_chat = manager.turn(&elsewhere).await.unwrap();
        assert_eq!(other_chat.action(), &TurnAction::Answer, "{url}");
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_reset_delivered_again_resets_once() {
    let stores = Stores::new("dedupe_reset");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        manager
            .turn(&update("1", "hi"))
            .await
            .unwrap()
            .complete("Hello.")
            .await
            .unwrap();
        let reset = manager.turn(&update("2", "/new")).await.unwrap();
        assert!(
            matches!(reset.action(), TurnAction::Acknowledge(_)),
            "{url}"
        );
        let session = reset.resolution().unwrap().session_id().to_owned();
        reset.complete("").await.unwrap();
        let again = manager.turn(&update("2", "/new")).await.unwrap();
        assert_eq!(again.action(), &TurnAction::Duplicate, "{url}");
        let key = again.key().clone();
        drop(again);
        let stored = manager.session(&key).get().await.unwrap().unwrap();
        assert_eq!(stored.entry.session_id, session, "{url}: one reset");
    }
    stores.finish().await;
}

#[tokio::test]
async fn chatter_delivered_again_is_kept_and_shown_once() {
    let stores = Stores::new("dedupe_chatter");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let chatter = || in_group("501", "Ann", "lunch at noon?");
        let first = manager.turn(&chatter()).await.unwrap();
        assert_eq!(first.action(), &TurnAction::StaySilent, "{url}");
        let again = manager.turn(&chatter()).await.unwrap();
        assert_eq!(again.action(), &TurnAction::Duplicate, "{url}");
        let asked = manager
            .turn(&in_group("502", "Bob", "@bot book it").mentioning_agent())
            .await
            .unwrap();
        let input = asked.input().unwrap().to_owned();
        assert_eq!(
            input.matches("Ann: lunch at noon?").count(),
            1,
            "{url}: {input}"
        );
        asked.complete("Booked.").await.unwrap();
        // Shown already: a delivery after that is still a duplicate.
        let late = manager.turn(&chatter()).await.unwrap();
        assert_eq!(late.action(), &TurnAction::Duplicate, "{url}");
        // The mention delivered again takes no chatter and runs nothing.
        let coffee = manager
            .turn(&in_group("503", "Cy", "and coffee?"))
            .await
            .unwrap();
        assert_eq!(coffee.action(), &TurnAction::StaySilent, "{url}");
        let mention_again = manager
            .turn(&in_group("502", "Bob", "@bot book it").mentioning_agent())
            .await
            .unwrap();
        assert_eq!(mention_again.action(), &TurnAction::Duplicate, "{url}");
        drop(mention_again);
        let next = manager
            .turn(&in_group("504", "Bob", "@bot and?").mentioning_agent())
            .await
            .unwrap();
        assert!(next.input().unwrap().contains("Cy: and coffee?"), "{url}");
    }
    stores.finish().await;
}

#[tokio::test]
async fn messages_without_an_id_are_never_deduplicated_and_the_window_ends() {
    let clock = ManualClock::at_millis(1_773_136_800_000);
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..2 {
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", "ping"))
            .await
            .unwrap();
        assert_eq!(turn.action(), &TurnAction::Answer);
        turn.complete("pong").await.unwrap();
    }
    manager
        .turn(&update("9", "hi"))
        .await
        .unwrap()
        .complete("Hello.")
        .await
        .unwrap();
    clock.advance(DEFAULT_DEDUPE_WINDOW - Duration::from_secs(1));
    let within = manager.turn(&update("9", "hi")).await.unwrap();
    assert_eq!(within.action(), &TurnAction::Duplicate);
    drop(within);
    clock.advance(Duration::from_secs(2));
    let after = manager.turn(&update("9", "hi")).await.unwrap();
    assert_eq!(after.action(), &TurnAction::Answer, "past the window: new");
    drop(after);
    // Turned off: every delivery runs.
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .dedupe_window(Duration::ZERO)
        .build()
        .unwrap();
    for _ in 0..2 {
        let turn = manager.turn(&update("9", "hi")).await.unwrap();
        assert_eq!(turn.action(), &TurnAction::Answer);
    }
}

#[tokio::test]
async fn a_turn_dropped_anywhere_leaves_its_message_answered_or_taken_again_once() {
    let stores = Stores::new("dedupe_drop");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let waits: Vec<u64> = (0..40).map(|n| n * n * 10).collect();
        let mut key = None;
        for wait in &waits {
            let message = update(&format!("m{wait}"), &format!("question {wait};"));
            // The host gives up on the turn after a while; the channel delivers the
            // message again, and the bot answers whatever that delivery asks.
            let _ =
                tokio::time::timeout(Duration::from_micros(*wait), manager.turn(&message)).await;
            let again = manager.turn(&message).await.unwrap();
            key = Some(again.key().clone());
            if again.needs_model() {
                again.complete("answer").await.unwrap();
            }
        }
        let key = key.unwrap();
        for wait in &waits {
            let said = format!("question {wait};");
            assert_eq!(
                lines_saying(&manager, &key, &said).await,
                1,
                "{url}: {said}"
            );
        }
    }
    stores.finish().await;
}

/// A write that went out cannot be called back: a turn the host gave up on while its
/// line was on its way still logs it. A delivery meanwhile is a duplicate rather than
/// a message taken again, so the message is logged once; and answered once, by the
/// delivery after the one whose `complete` the host gave up on (it sent nothing).
#[tokio::test]
async fn a_turn_given_up_while_its_line_is_written_logs_and_answers_once() {
    let stores = Stores::new("dedupe_late");
    for url in &stores.urls {
        let backend = Backend::open(url).await.unwrap();
        let (manager, late) = flaky::late_manager(&backend, Duration::from_millis(300));
        let message = update("2001", "Can you move my booking?");
        // The host gives up once the inbound line is on its way; the channel delivers
        // the message again at once.
        tokio::select! {
            biased;
            () = late.next_append() => {}
            _ = manager.turn(&message) => panic!("{url}: the line lands later"),
        }
        let again = manager.turn(&message).await.unwrap();
        assert_eq!(
            again.action(),
            &TurnAction::Duplicate,
            "{url}: its line is on its way"
        );
        drop(again);
        late.landed().await;
        // Delivered again once the line is there: the turn that logged it never
        // answered, so this delivery does, from that line.
        let after = manager.turn(&message).await.unwrap();
        assert_eq!(after.action(), &TurnAction::Answer, "{url}");
        assert!(after.input().unwrap().contains("move my booking"), "{url}");
        let key = after.key().clone();
        // The host gives up on `complete` once the reply is on its way: it sent
        // nothing, so the message is not answered yet, and a delivery again answers it.
        tokio::select! {
            biased;
            () = late.next_append() => {}
            _ = after.complete("Moved to Friday.") => panic!("{url}: the reply lands later"),
        }
        let again = manager.turn(&message).await.unwrap();
        assert_eq!(
            again.action(),
            &TurnAction::Answer,
            "{url}: not answered yet"
        );
        again.complete("Moved to Friday.").await.unwrap();
        let again = manager.turn(&message).await.unwrap();
        assert_eq!(again.action(), &TurnAction::Duplicate, "{url}: answered");
        drop(again);
        late.landed().await;
        let asked = lines_saying(&manager, &key, "Can you move my booking?").await;
        assert_eq!(asked, 1, "{url}");
        let answered = lines_saying(&manager, &key, "Moved to Friday.").await;
        assert_eq!(answered, 1, "{url}");
    }
    stores.finish().await;
}

// ---------------------------------------------------------------------------------
// Two processes
// ---------------------------------------------------------------------------------

const CHILD_URL: &str = "AGENT_SESSIONS_DEDUPE_CHILD_STORE";
const CHILD_UPDATE: &str = "AGENT_SESSIONS_DEDUPE_CHILD_UPDATE";

/// Takes the update `1001` (or the `<id>|<text>` its environment names) in a turn,
/// prints its action, and completes the turn when stdin says so (or is killed before).
#[test]
#[ignore = "a child process of the two-process dedupe tests"]
fn dedupe_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        panic!("run by the two-process dedupe tests, not directly");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let manager = SessionManager::connect(&url)
            .await
            .unwrap()
            .build()
            .unwrap();
        let named = std::env::var(CHILD_UPDATE).unwrap_or_default();
        let (id, text) = named
            .split_once('|')
            .unwrap_or(("1001", "When is my shift?"));
        let turn = manager.turn(&update(id, text)).await.unwrap();
        println!("@action {}", turn.action().as_str());
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        turn.complete("Thursday at 9.").await.unwrap();
        println!("@completed");
    });
}

struct Child2 {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Child2 {
    fn start(url: &str) -> Child2 {
        Child2::start_with(url, "")
    }

    /// A child taking the update `<id>|<text>`.
    fn start_with(url: &str, update: &str) -> Child2 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "dedupe_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_URL, url)
            .env(CHILD_UPDATE, update)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Child2 { child, out }
    }

    /// The child's next `@` line.
    fn said(&mut self) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "the child exited"
            );
            if let Some((_, said)) = line.trim_end().split_once('@') {
                return said.to_owned();
            }
        }
    }

    fn complete(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
        assert_eq!(self.said(), "completed");
        self.child.wait().unwrap();
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_racing_the_same_update_answer_it_once() {
    let stores = Stores::new("dedupe_race");
    for url in &stores.urls {
        // The store exists before the racers start.
        drop(SessionManager::connect(url).await.unwrap().build().unwrap());
        let mut racers = [Child2::start(url), Child2::start(url)];
        let mut actions: Vec<String> = racers.iter_mut().map(Child2::said).collect();
        actions.sort();
        assert_eq!(actions, ["action answer", "action duplicate"], "{url}");
        for racer in &mut racers {
            racer.complete();
        }
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let key = manager.key_for(&update("1001", "")).unwrap();
        assert_eq!(
            lines_saying(&manager, &key, "When is my shift?").await,
            1,
            "{url}"
        );
        assert_eq!(
            lines_saying(&manager, &key, "Thursday at 9.").await,
            1,
            "{url}"
        );
    }
    stores.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_taken_by_a_running_or_killed_process_is_not_answered_again() {
    let stores = Stores::new("dedupe_kill");
    for url in &stores.urls {
        let mut first = Child2::start(url);
        assert_eq!(first.said(), "action answer", "{url}");
        // The first turn still runs in the other process.
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let while_running = manager
            .turn(&update("1001", "When is my shift?"))
            .await
            .unwrap();
        assert_eq!(while_running.action(), &TurnAction::Duplicate, "{url}");
        drop(while_running);
        // Killed between its turn and its `complete`: the message was logged but never
        // answered, so a delivery after the kill takes the dead run over and answers it
        // — from the logged line, not logging it again — and a delivery after that is a
        // duplicate.
        first.kill();
        let after_kill = manager
            .turn(&update("1001", "When is my shift?"))
            .await
            .unwrap();
        assert_eq!(after_kill.action(), &TurnAction::Answer, "{url}");
        assert_eq!(after_kill.input(), Some("When is my shift?"), "{url}");
        let key = after_kill.key().clone();
        after_kill.complete("Thursday at 9.").await.unwrap();
        assert_eq!(
            lines_saying(&manager, &key, "When is my shift?").await,
            1,
            "{url}"
        );
        assert_eq!(
            lines_saying(&manager, &key, "Thursday at 9.").await,
            1,
            "{url}"
        );
        let again = manager
            .turn(&update("1001", "When is my shift?"))
            .await
            .unwrap();
        assert_eq!(again.action(), &TurnAction::Duplicate, "{url}");
        drop(again);
    }
    stores.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_delivered_again_after_the_process_that_took_it_exited_resets_once() {
    let stores = Stores::new("dedupe_reset_restart");
    for url in &stores.urls {
        let mut first = Child2::start_with(url, "2|/new");
        assert_eq!(first.said(), "action acknowledge", "{url}");
        first.complete();
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let key = manager.key_for(&update("2", "/new")).unwrap();
        let session = manager
            .session(&key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry
            .session_id;
        for _ in 0..2 {
            let again = manager.turn(&update("2", "/new")).await.unwrap();
            assert_eq!(again.action(), &TurnAction::Duplicate, "{url}");
        }
        let now = manager
            .session(&key)
            .get()
            .await
            .unwrap()
            .unwrap()
            .entry
            .session_id;
        assert_eq!(now, session, "{url}: one reset");
    }
    stores.finish().await;
}
