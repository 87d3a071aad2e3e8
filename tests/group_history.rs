//! Group chatter, exactly once: acknowledged chatter is kept or the call fails; chatter
//! a turn takes reaches exactly one model input, whatever fails; each agent and each
//! forum topic keeps its own history; a reset starts without the chatter from before
//! it; nothing is written through a planted link.
//!
//! Each test runs on every backend this build has: a JSON tree, SQLite (feature
//! `sqlite`) and PostgreSQL (feature `postgres`, with `AGENT_SESSIONS_TEST_POSTGRES_URL`).

mod common;

#[path = "common/stores.rs"]
mod stores;

#[path = "common/flaky.rs"]
mod flaky;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::Offset;
use agent_sessions::{AgentId, Error};
use flaky::flaky_manager;
use stores::Stores;

fn in_group(sender: &str, text: &str) -> InboundMessage {
    InboundMessage::group("telegram", "-100", sender, text).with_sender_name(sender)
}

fn mention(sender: &str, text: &str) -> InboundMessage {
    in_group(sender, text).mentioning_agent()
}

/// Says `message` in its group, where it is kept as chatter.
async fn keep_chatter(manager: &SessionManager, message: &InboundMessage) {
    let turn = manager.turn(message).await.unwrap();
    assert_eq!(turn.action(), &TurnAction::StaySilent, "{message:?}");
}

/// How many of the session's inbound lines (what the model was given) contain `text`.
async fn times_shown(manager: &SessionManager, key: &SessionKey, text: &str) -> usize {
    let read = manager.session(key).replay(Offset::START).await.unwrap();
    read.events
        .iter()
        .filter_map(|event| event.entry.message.as_ref())
        .filter(|message| message.text().contains(text))
        .count()
}

#[tokio::test]
async fn chatter_taken_by_a_turn_that_fails_is_shown_to_the_next_turn_once() {
    let stores = Stores::new("claim_fail");
    for url in &stores.urls {
        let backend = Backend::open(url).await.unwrap();
        let failing = Arc::new(AtomicBool::new(false));
        let manager = flaky_manager(&backend, &failing, false);
        // A first answered turn: the group's session and transcript exist.
        let first = manager.turn(&mention("Bob", "@bot hi")).await.unwrap();
        let key = first.key().clone();
        first.complete("Hello.").await.unwrap();
        for text in ["lunch at noon?", "or one?"] {
            let chatter = manager.turn(&in_group("Ann", text)).await.unwrap();
            assert_eq!(chatter.action(), &TurnAction::StaySilent, "{url}");
        }
        manager
            .session(&key)
            .enqueue_system_event("Reminder: the room is booked until 2.")
            .await
            .unwrap();
        // The mention's inbound line cannot be logged: the turn fails ...
        failing.store(true, Ordering::SeqCst);
        let failed = manager.turn(&mention("Bob", "@bot book it")).await;
        assert!(failed.is_err(), "{url}: the turn reports the failure");
        failing.store(false, Ordering::SeqCst);
        // ... and the chatter it had claimed, and the event it had drained, are there
        // for the next one, once.
        let next = manager.turn(&mention("Bob", "@bot book it")).await.unwrap();
        let input = next.input().unwrap().to_owned();
        assert!(
            input.contains("Reminder: the room is booked"),
            "{url}: {input}"
        );
        assert!(input.contains("Ann: lunch at noon?"), "{url}: {input}");
        assert!(input.contains("Ann: or one?"), "{url}: {input}");
        next.complete("Booked.").await.unwrap();
        let after = manager.turn(&mention("Bob", "@bot thanks")).await.unwrap();
        assert!(!after.input().unwrap().contains("lunch"), "{url}");
        drop(after);
        assert_eq!(
            times_shown(&manager, &key, "lunch at noon?").await,
            1,
            "{url}"
        );
        assert!(backend
            .chatter()
            .entries("agent:main:telegram:default:group:-100")
            .await
            .unwrap()
            .is_empty());
    }
    stores.finish().await;
}

#[tokio::test]
async fn an_append_that_reports_an_error_after_writing_its_line_counts_as_done() {
    let stores = Stores::new("claim_written");
    for url in &stores.urls {
        let backend = Backend::open(url).await.unwrap();
        let failing = Arc::new(AtomicBool::new(false));
        let manager = flaky_manager(&backend, &failing, true);
        let first = manager.turn(&mention("Bob", "@bot hi")).await.unwrap();
        let key = first.key().clone();
        first.complete("Hello.").await.unwrap();
        keep_chatter(&manager, &in_group("Ann", "lunch at noon?")).await;
        failing.store(true, Ordering::SeqCst);
        let asked = manager.turn(&mention("Bob", "@bot book it")).await.unwrap();
        assert!(
            asked.input().unwrap().contains("Ann: lunch at noon?"),
            "{url}"
        );
        drop(asked);
        failing.store(false, Ordering::SeqCst);
        let next = manager.turn(&mention("Bob", "@bot and?")).await.unwrap();
        assert!(
            !next.input().unwrap().contains("lunch"),
            "{url}: shown once"
        );
        drop(next);
        assert_eq!(
            times_shown(&manager, &key, "lunch at noon?").await,
            1,
            "{url}"
        );
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_turn_dropped_anywhere_leaves_its_chatter_in_exactly_one_model_input() {
    let stores = Stores::new("claim_drop");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        // The host gives up on a mention after a while, from at once to after the turn
        // is done: whatever the turn had reached, the chatter before it reaches exactly
        // one model input, this turn's or a later one's.
        let waits: Vec<u64> = (0..40).map(|n| n * n * 10).collect();
        for wait in &waits {
            keep_chatter(&manager, &in_group("Ann", &format!("line {wait};"))).await;
            let _ = tokio::time::timeout(
                Duration::from_micros(*wait),
                manager.turn(&mention("Bob", "@bot where?")),
            )
            .await;
        }
        let last = manager.turn(&mention("Bob", "@bot done?")).await.unwrap();
        let key = last.key().clone();
        drop(last);
        for wait in &waits {
            let line = format!("Ann: line {wait};");
            assert_eq!(times_shown(&manager, &key, &line).await, 1, "{url}: {line}");
        }
    }
    stores.finish().await;
}

#[tokio::test]
async fn chatter_that_cannot_be_kept_fails_the_call_and_a_mention_is_still_answered() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    // Something planted where the group's chatter file belongs.
    let planted = dir
        .path()
        .join("group-history/agent%3Amain%3Atelegram%3Adefault%3Agroup%3A-100.json");
    std::fs::create_dir_all(&planted).unwrap();
    let chatter = manager.turn(&in_group("Ann", "lunch?")).await;
    assert!(
        matches!(chatter, Err(Error::NotAFile { .. } | Error::Io { .. })),
        "not acknowledged: {chatter:?}"
    );
    assert!(manager.turn(&in_group("Ann", "lunch?")).await.is_err());
    // A read that fails while answering costs only the history.
    let asked = manager.turn(&mention("Bob", "@bot book it")).await.unwrap();
    assert_eq!(asked.action(), &TurnAction::Answer);
    assert_eq!(asked.complete("Booked.").await.unwrap().len(), 1);
    assert!(planted.is_dir(), "what was planted is left alone");
    // Once the path is free, chatter is kept again.
    std::fs::remove_dir(&planted).unwrap();
    keep_chatter(&manager, &in_group("Ann", "lunch?")).await;
    let asked = manager.turn(&mention("Bob", "@bot book it")).await.unwrap();
    assert!(asked.input().unwrap().contains("Ann: lunch?"));
}

#[tokio::test]
async fn each_agent_keeps_its_own_history_of_a_group() {
    let stores = Stores::new("agent_history");
    for url in &stores.urls {
        let isolated = |agent: &str| {
            let url = url.clone();
            let agent = AgentId::new(agent).unwrap();
            async move {
                SessionManager::connect(&url)
                    .await
                    .unwrap()
                    .isolate_to_agent(agent)
                    .build()
                    .unwrap()
            }
        };
        let alpha = isolated("alpha").await;
        let beta = isolated("beta").await;
        // Messages name their agent, or not: an isolated manager answers as its own.
        let to = |agent: &str, message: InboundMessage| match agent {
            "alpha" => message.with_agent(agent),
            _ => message,
        };
        keep_chatter(&alpha, &to("alpha", in_group("Ann", "alpha's secret"))).await;
        keep_chatter(&beta, &to("beta", in_group("Cy", "beta's chatter"))).await;
        let to_beta = beta
            .turn(&to("beta", mention("Bob", "@bot hi")))
            .await
            .unwrap();
        let seen = to_beta.input().unwrap().to_owned();
        assert!(!seen.contains("alpha's secret"), "{url}: {seen}");
        assert!(seen.contains("beta's chatter"), "{url}: {seen}");
        let to_alpha = alpha
            .turn(&to("alpha", mention("Bob", "@bot hi")))
            .await
            .unwrap();
        let seen = to_alpha.input().unwrap().to_owned();
        assert!(seen.contains("alpha's secret"), "{url}: {seen}");
        assert!(!seen.contains("beta's chatter"), "{url}: {seen}");
    }
    stores.finish().await;
}

#[tokio::test]
async fn each_forum_topic_keeps_its_own_history_when_sessions_are_per_topic() {
    let stores = Stores::new("topic_history");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let in_topic =
            |topic: i64, sender: &str, text: &str| in_group(sender, text).with_forum_topic(topic);
        keep_chatter(&manager, &in_topic(43, "Ann", "topic 43 chatter")).await;
        keep_chatter(&manager, &in_topic(42, "Cy", "topic 42 chatter")).await;
        let asked = manager
            .turn(&in_topic(42, "Bob", "@bot hi").mentioning_agent())
            .await
            .unwrap();
        assert!(
            asked.key().to_string().ends_with(":topic:42"),
            "{}",
            asked.key()
        );
        let seen = asked.input().unwrap();
        assert!(seen.contains("topic 42 chatter"), "{url}: {seen}");
        assert!(!seen.contains("topic 43 chatter"), "{url}: {seen}");
    }
    stores.finish().await;
}

#[tokio::test]
async fn a_reset_in_a_group_starts_without_the_chatter_from_before_it() {
    let stores = Stores::new("reset_history");
    for url in &stores.urls {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let owner = |text: &str| mention("Olivia", text).from_owner();

        keep_chatter(&manager, &in_group("Ann", "before the bare reset")).await;
        let reset = manager.turn(&owner("/new")).await.unwrap();
        assert!(
            matches!(reset.action(), TurnAction::Acknowledge(_)),
            "{url}"
        );
        reset.complete(TurnReply::default()).await.unwrap();
        keep_chatter(&manager, &in_group("Cy", "after the bare reset")).await;
        let asked = manager.turn(&mention("Bob", "@bot hi")).await.unwrap();
        let seen = asked.input().unwrap().to_owned();
        assert!(seen.contains("after the bare reset"), "{url}: {seen}");
        assert!(!seen.contains("before the bare reset"), "{url}: {seen}");
        asked.complete("Hi.").await.unwrap();

        // A reset with a first message: that message, and nothing from before it.
        keep_chatter(&manager, &in_group("Ann", "before the reset with text")).await;
        let asked = manager
            .turn(&owner("/new what is on today?"))
            .await
            .unwrap();
        let seen = asked.input().unwrap().to_owned();
        assert!(seen.contains("what is on today?"), "{url}: {seen}");
        assert!(
            !seen.contains("before the reset with text"),
            "{url}: {seen}"
        );
    }
    stores.finish().await;
}

#[tokio::test]
async fn history_kept_before_it_was_per_agent_reaches_the_next_turn() {
    let stores = Stores::new("legacy_history");
    for url in &stores.urls {
        let backend = Backend::open(url).await.unwrap();
        // What an earlier version kept, under the group's key without the agent.
        let said = agent_sessions::inbound::ChatterEntry {
            sender: "Ann".into(),
            body: "kept before the upgrade".into(),
            timestamp: None,
            message_id: None,
            sender_id: None,
        };
        backend
            .chatter()
            .append("telegram:default:group:-100", said)
            .await
            .unwrap();
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        keep_chatter(&manager, &in_group("Cy", "after the upgrade")).await;
        let asked = manager.turn(&mention("Bob", "@bot hi")).await.unwrap();
        let seen = asked.input().unwrap().to_owned();
        let before = seen.find("Ann: kept before the upgrade").expect(&seen);
        let after = seen.find("Cy: after the upgrade").expect(&seen);
        assert!(before < after, "{url}: oldest first");
        asked.complete("ok").await.unwrap();
        assert!(backend
            .chatter()
            .entries("telegram:default:group:-100")
            .await
            .unwrap()
            .is_empty());
    }
    stores.finish().await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_planted_group_history_link_is_refused_and_its_target_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = tempfile::tempdir().unwrap();
    for n in 0..1_003 {
        std::fs::write(foreign.path().join(format!("{n:04}.json")), b"[]").unwrap();
    }
    std::os::unix::fs::symlink(foreign.path(), dir.path().join("group-history")).unwrap();
    let manager = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let chatter = manager.turn(&in_group("Ann", "lunch?")).await;
    assert!(
        matches!(chatter, Err(Error::NotAFile { .. })),
        "{chatter:?}"
    );
    assert_eq!(
        std::fs::read_dir(foreign.path()).unwrap().count(),
        1_003,
        "nothing written or evicted in the link's target"
    );
}

// ---------------------------------------------------------------------------------
// Workers SIGKILLed anywhere inside `turn()`
// ---------------------------------------------------------------------------------

const CHILD_URL: &str = "AGENT_SESSIONS_CHATTER_CHILD_STORE";
const CHILD_FIRST: &str = "AGENT_SESSIONS_CHATTER_CHILD_FIRST";

/// The chatter line `n` as the model sees it.
fn chatter_line(n: usize) -> String {
    format!("Ann: c{n};")
}

/// A worker that says chatter `n`, `n + 1`, … in the group, a mention after every
/// third, and prints `ack n` once the turn of chatter `n` has returned; until killed.
#[test]
#[ignore = "a child process of the killed-worker test"]
fn chatter_child() {
    let (Ok(url), Ok(first)) = (std::env::var(CHILD_URL), std::env::var(CHILD_FIRST)) else {
        panic!("run by the killed-worker test, not directly");
    };
    let first: usize = first.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let manager = SessionManager::connect(&url)
            .await
            .unwrap()
            .build()
            .unwrap();
        for n in first.. {
            keep_chatter(&manager, &in_group("Ann", &format!("c{n};"))).await;
            println!("ack {n}");
            if n % 3 == 2 {
                let turn = manager.turn(&mention("Bob", "@bot so?")).await.unwrap();
                turn.complete("Noted.").await.unwrap();
            }
        }
    });
}

/// Kills a chatter worker `kills` times at random moments, restarting it after each,
/// then answers one last mention in this process: every acknowledged chatter line is in
/// exactly one model input, and no line is in two.
async fn killed_workers_show_each_chatter_line_once(url: &str, kills: usize) {
    use std::io::BufRead;
    // Each worker's first line, and its last acknowledged one.
    let mut runs: Vec<(usize, Option<usize>)> = Vec::new();
    let mut seed = 0x9e37_79b9_u64;
    for run in 0..kills {
        let first = run * 1_000;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "chatter_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_URL, url)
            .env(CHILD_FIRST, first.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let acks = std::thread::spawn(move || {
            std::io::BufReader::new(stdout)
                .lines()
                .map_while(|line| line.ok())
                .filter_map(|line| line.strip_prefix("ack ")?.trim().parse::<usize>().ok())
                .last()
        });
        // A random moment after the worker has started its turns.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(150 + seed % 150)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        runs.push((first, acks.join().unwrap()));
    }
    let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
    let last = manager.turn(&mention("Bob", "@bot done?")).await.unwrap();
    let key = last.key().clone();
    last.complete("Done.").await.unwrap();
    let read = manager.session(&key).replay(Offset::START).await.unwrap();
    let inputs: Vec<String> = read
        .events
        .iter()
        .filter_map(|event| event.entry.message.as_ref())
        .filter(|message| message.role == agent_sessions::transcript::Role::User)
        .map(|message| message.text())
        .collect();
    let mut shown = std::collections::BTreeMap::<usize, usize>::new();
    for input in &inputs {
        for line in input.lines() {
            let Some(n) = line
                .split("Ann: c")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(';'))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            *shown.entry(n).or_default() += 1;
        }
    }
    let twice: Vec<_> = shown.iter().filter(|(_, times)| **times > 1).collect();
    assert!(twice.is_empty(), "{url}: shown twice: {twice:?}");
    // Every acknowledged line was shown; one a worker was killed while keeping may be.
    let mut acknowledged = 0;
    for (first, last) in runs {
        for n in first..=last.unwrap_or(first) {
            if last.is_some() {
                assert!(
                    shown.contains_key(&n),
                    "{url}: {} never shown",
                    chatter_line(n)
                );
                acknowledged += 1;
            }
        }
    }
    assert!(
        acknowledged > kills,
        "{url}: the workers made progress: {acknowledged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_inside_turns_show_each_chatter_line_once() {
    let stores = Stores::new("claim_kill");
    for url in &stores.urls {
        killed_workers_show_each_chatter_line_once(url, 25).await;
    }
    stores.finish().await;
}
