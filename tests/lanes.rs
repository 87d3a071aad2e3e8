//! One run per session, whatever the number of handlers, workers and processes — and
//! what a message that arrives during a run does, mode by mode.
//!
//! The host code here is the README's: every message goes `turn` → `messages` →
//! `complete`, each in its own handler, with nothing else to coordinate them.
//! Each test runs on every backend this build has: a JSON tree, SQLite (feature
//! `sqlite`) and PostgreSQL (feature `postgres`, with `AGENT_SESSIONS_TEST_POSTGRES_URL`).

mod common;

#[path = "common/stores.rs"]
mod stores;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_sessions::lane::{QueueDrop, QueueMode, QueueOutcome, QueueSettings};
use agent_sessions::prelude::*;
use stores::Stores;

/// How long the stand-in model takes to answer.
const MODEL: Duration = Duration::from_millis(300);

fn dm(text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text)
}

async fn manager(url: &str, settings: QueueSettings) -> SessionManager {
    SessionManager::connect(url)
        .await
        .unwrap()
        .queue(settings)
        .build()
        .unwrap()
}

/// The quiet time of the tests' queues: OpenClaw's 1 s made shorter.
fn quick() -> QueueSettings {
    QueueSettings::default().debounce(Duration::from_millis(150))
}

/// A manager in memory, with transcripts, following `settings`.
fn in_memory(settings: QueueSettings) -> Arc<SessionManager> {
    Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
            .queue(settings)
            .build()
            .unwrap(),
    )
}

/// A direct message, with the channel message id `id` if it has one.
fn dm_with_id(text: &str, id: Option<&str>) -> InboundMessage {
    match id {
        Some(id) => dm(text).with_message_id(id),
        None => dm(text),
    }
}

/// What one handler saw.
#[derive(Debug, Clone)]
struct Handled {
    action: TurnAction,
    /// The model's input, when it ran.
    input: Option<String>,
    /// What the model was given, as `role: text` lines.
    messages: Vec<String>,
}

/// A handler as the README writes one: the model runs for [`MODEL`] while `running`
/// counts the runs in flight (`peak` keeps the most seen at once).
async fn handle(
    manager: &SessionManager,
    message: InboundMessage,
    running: &AtomicUsize,
    peak: &AtomicUsize,
) -> Handled {
    let turn = manager.turn(&message).await.unwrap();
    let action = turn.action().clone();
    if !turn.needs_model() {
        turn.complete("").await.unwrap();
        return Handled {
            action,
            input: None,
            messages: Vec::new(),
        };
    }
    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
    peak.fetch_max(now, Ordering::SeqCst);
    let messages: Vec<String> = turn
        .messages()
        .await
        .unwrap()
        .iter()
        .map(|m| format!("{:?}: {}", m.role, m.content))
        .collect();
    tokio::time::sleep(MODEL).await;
    let input = turn.input().map(str::to_owned);
    running.fetch_sub(1, Ordering::SeqCst);
    turn.complete(format!("reply {}", messages.len()))
        .await
        .unwrap();
    Handled {
        action,
        input,
        messages,
    }
}

/// Three DMs 60 ms apart while the model takes 300 ms: one run at a time, two runs and
/// two replies; the follow-up answers the second and third together and sees the first
/// reply. (Before: three runs at once, three replies, each blind to the others.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_quick_messages_make_one_run_at_a_time_and_two_replies() {
    let stores = Stores::new("lanes_three");
    for url in &stores.urls {
        let manager = Arc::new(manager(url, quick()).await);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let mut handlers = Vec::new();
        for text in [
            "I need to change my booking",
            "it's for Friday",
            "actually make it Saturday",
        ] {
            let (manager, running, peak) = (manager.clone(), running.clone(), peak.clone());
            handlers.push(tokio::spawn(async move {
                handle(&manager, dm(text), &running, &peak).await
            }));
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        let mut handled = Vec::new();
        for handler in handlers {
            handled.push(handler.await.unwrap());
        }
        assert_eq!(peak.load(Ordering::SeqCst), 1, "{url}: one run at a time");
        let answered: Vec<&Handled> = handled
            .iter()
            .filter(|h| h.action == TurnAction::Answer)
            .collect();
        assert_eq!(answered.len(), 2, "{url}: two runs: {handled:#?}");
        assert_eq!(
            handled
                .iter()
                .filter(|h| h.action == TurnAction::Queued(QueueOutcome::Collected))
                .count(),
            1,
            "{url}: {handled:#?}"
        );
        let follow_up = answered
            .iter()
            .find(|h| {
                h.input
                    .as_deref()
                    .is_some_and(|i| i.contains("it's for Friday"))
            })
            .expect("a follow-up answers the queued messages");
        let input = follow_up.input.as_deref().unwrap();
        assert!(
            input.starts_with("[Queued messages while agent was busy]")
                && input.find("it's for Friday") < input.find("make it Saturday"),
            "{url}: both, in arrival order: {input}"
        );
        assert!(
            follow_up
                .messages
                .iter()
                .any(|m| m.starts_with("Assistant: reply")),
            "{url}: the follow-up sees the first reply: {:#?}",
            follow_up.messages
        );
        // Two replies in the conversation.
        let key = manager.key_for(&dm("x")).unwrap();
        let said = manager.session(&key).messages().await.unwrap();
        let replies = said
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        assert_eq!(replies, 2, "{url}: {said:#?}");
        let session = manager.session(&key).get().await.unwrap().unwrap();
        assert!(session.entry.run.is_none() && session.entry.queued.is_empty());
    }
    stores.finish().await;
}

/// The same three messages, each handled in a process of its own — three webhook
/// workers — on one store: one run at a time across the processes, two replies.
#[test]
fn three_quick_messages_in_three_processes_make_one_run_at_a_time() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stores = Stores::new("lanes_processes");
    for url in &stores.urls {
        // The store exists before the workers start.
        runtime.block_on(async { drop(manager(url, quick()).await) });
        let mut workers = Vec::new();
        for text in [
            "I need to change my booking",
            "it's for Friday",
            "actually make it Saturday",
        ] {
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["worker_process", "--exact", "--ignored", "--nocapture"])
                .env("LANES_URL", url)
                .env("LANES_TEXT", text)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            workers.push(child);
            std::thread::sleep(Duration::from_millis(60));
        }
        // (action, model start, model end) of each worker, in ms since the epoch.
        let mut runs = Vec::new();
        let mut actions = Vec::new();
        for worker in &mut workers {
            let out = BufReader::new(worker.stdout.take().unwrap());
            for line in out.lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("WORKER ") {
                    let fields: Vec<&str> = rest.split(' ').collect();
                    actions.push(fields[0].to_owned());
                    if fields[0] == "answer" {
                        runs.push((
                            fields[1].parse::<u64>().unwrap(),
                            fields[2].parse::<u64>().unwrap(),
                        ));
                    }
                }
            }
            assert!(worker.wait().unwrap().success());
        }
        actions.sort();
        assert_eq!(actions, ["answer", "answer", "queued"], "{url}");
        runs.sort();
        assert!(
            runs[0].1 <= runs[1].0,
            "{url}: the runs do not overlap: {runs:?}"
        );
        runtime.block_on(async {
            let manager = manager(url, quick()).await;
            let key = manager.key_for(&dm("x")).unwrap();
            let said = manager.session(&key).messages().await.unwrap();
            let replies: Vec<&ChatMessage> = said
                .iter()
                .filter(|m| m.role == ChatRole::Assistant)
                .collect();
            assert_eq!(replies.len(), 2, "{url}: {said:#?}");
        });
    }
    runtime.block_on(stores.finish());
}

/// One worker of [`three_quick_messages_in_three_processes_make_one_run_at_a_time`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the multi-process test in a process of its own"]
async fn worker_process() {
    let (Ok(url), Ok(text)) = (std::env::var("LANES_URL"), std::env::var("LANES_TEXT")) else {
        return;
    };
    let manager = manager(&url, quick()).await;
    let turn = manager.turn(&dm(&text)).await.unwrap();
    if !turn.needs_model() {
        println!("WORKER {}", turn.action().as_str());
        turn.complete("").await.unwrap();
        return;
    }
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let started = now();
    let messages = turn.messages().await.unwrap();
    tokio::time::sleep(MODEL).await;
    let ended = now();
    turn.complete(format!("reply {}", messages.len()))
        .await
        .unwrap();
    println!("WORKER answer {started} {ended}");
}

/// Each queue mode, cap and drop policy, as a table: three messages a few ms apart while
/// the first runs; what each handler was told, and what each run answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_mode_handles_messages_that_arrive_during_a_run() {
    struct Case {
        name: &'static str,
        settings: QueueSettings,
        /// What the second and third handlers were told, in order.
        actions: [TurnAction; 2],
        /// The inputs of the runs after the first, in order (what each contains).
        follow_ups: &'static [&'static [&'static str]],
    }
    let collected = TurnAction::Queued(QueueOutcome::Collected);
    let cases = [
        Case {
            name: "collect",
            settings: quick(),
            actions: [TurnAction::Answer, collected.clone()],
            follow_ups: &[&["second", "third"]],
        },
        Case {
            name: "followup",
            settings: quick().mode(QueueMode::Followup),
            actions: [TurnAction::Answer, TurnAction::Answer],
            follow_ups: &[&["second"], &["third"]],
        },
        Case {
            name: "interrupt",
            settings: quick().mode(QueueMode::Interrupt),
            actions: [TurnAction::Answer, TurnAction::Answer],
            follow_ups: &[&["second"], &["third"]],
        },
        Case {
            name: "collect, cap 1, drop new",
            settings: quick().cap(1).drop_policy(QueueDrop::New),
            actions: [
                TurnAction::Answer,
                TurnAction::Queued(QueueOutcome::Dropped),
            ],
            follow_ups: &[&["second"]],
        },
        Case {
            name: "collect, cap 1, drop old",
            settings: quick().cap(1).drop_policy(QueueDrop::Old),
            actions: [
                TurnAction::Queued(QueueOutcome::Dropped),
                TurnAction::Answer,
            ],
            follow_ups: &[&["third"]],
        },
        Case {
            name: "collect, cap 1, summarize",
            settings: quick().cap(1).drop_policy(QueueDrop::Summarize),
            actions: [
                TurnAction::Queued(QueueOutcome::Dropped),
                TurnAction::Answer,
            ],
            follow_ups: &[&[
                "[Queue overflow] Dropped 1 message due to cap.",
                "- second",
                "third",
            ]],
        },
    ];
    for case in cases {
        let manager = Arc::new(
            SessionManager::builder(InMemoryStore::new())
                .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
                .queue(case.settings.clone())
                .build()
                .unwrap(),
        );
        let first = manager.turn(&dm("first")).await.unwrap();
        assert_eq!(first.action(), &TurnAction::Answer, "{}", case.name);
        let mut handlers = Vec::new();
        for text in ["second", "third"] {
            let manager = manager.clone();
            handlers.push(tokio::spawn(async move {
                let turn = manager.turn(&dm(text)).await.unwrap();
                let seen = (turn.action().clone(), turn.input().map(str::to_owned));
                let done = if turn.needs_model() {
                    turn.complete(format!("reply to {text}")).await.map(|_| ())
                } else {
                    turn.complete("").await.map(|_| ())
                };
                (seen, done.is_ok())
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let first_done = first.complete("reply to first").await;
        if case.name == "interrupt" {
            assert!(
                matches!(first_done, Err(agent_sessions::Error::RunLost { .. })),
                "{}: an interrupted run cannot complete: {first_done:?}",
                case.name
            );
        } else {
            first_done.unwrap();
        }
        let mut actions = Vec::new();
        let mut inputs = Vec::new();
        for handler in handlers {
            let ((action, input), _) = handler.await.unwrap();
            actions.push(action);
            if let Some(input) = input {
                inputs.push(input);
            }
        }
        if case.name == "collect" {
            // Either waiter may take the run for both.
            let mut got: Vec<String> = actions.iter().map(|a| format!("{a:?}")).collect();
            let mut wanted: Vec<String> = case.actions.iter().map(|a| format!("{a:?}")).collect();
            got.sort();
            wanted.sort();
            assert_eq!(got, wanted, "{}", case.name);
        } else {
            assert_eq!(actions, case.actions, "{}", case.name);
        }
        assert_eq!(
            inputs.len(),
            case.follow_ups.len(),
            "{}: {inputs:?}",
            case.name
        );
        for (input, wanted) in inputs.iter().zip(case.follow_ups) {
            for part in *wanted {
                assert!(
                    input.contains(part),
                    "{}: {part:?} not in {input:?}",
                    case.name
                );
            }
        }
    }
}

/// `steer`: a message that arrives during a run is handed to it at its next tool
/// boundary, once, and its own turn learns so; what the run does not take falls back
/// to a follow-up. `steer-backlog` hands it over and answers it in a follow-up too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn steering_hands_a_message_to_the_running_turn() {
    use agent_sessions::transcript::TranscriptExport;
    for (mode, second_action) in [
        (QueueMode::Steer, TurnAction::Queued(QueueOutcome::Steered)),
        (QueueMode::SteerBacklog, TurnAction::Answer),
    ] {
        let transcripts = agent_sessions::transcript::InMemoryTranscriptStore::new();
        let manager = Arc::new(
            SessionManager::builder(InMemoryStore::new())
                .transcripts(transcripts.clone())
                .queue(quick().mode(mode.clone()))
                .build()
                .unwrap(),
        );
        let first = manager.turn(&dm("book a table")).await.unwrap();
        let second = {
            let manager = manager.clone();
            tokio::spawn(async move {
                let message = dm("for four people").with_message_id("m2");
                let turn = manager.turn(&message).await.unwrap();
                let action = turn.action().clone();
                turn.complete("noted").await.unwrap();
                action
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The model called a tool; at the boundary the run takes what arrived.
        let steered = first.steering().await.unwrap();
        assert_eq!(steered.len(), 1, "{mode:?}");
        assert_eq!(steered[0].body, "for four people");
        assert!(first.steering().await.unwrap().is_empty(), "{mode:?}: once");
        let key = first.key().clone();
        first.complete("A table for four, booked.").await.unwrap();
        assert_eq!(second.await.unwrap(), second_action, "{mode:?}");
        if mode == QueueMode::Steer {
            // The conversation keeps what the run was given, in order.
            let said: Vec<String> = manager
                .session(&key)
                .messages()
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.content)
                .collect();
            let at = |text: &str| said.iter().position(|s| s.contains(text));
            assert!(
                at("book a table") < at("for four people")
                    && at("for four people") < at("A table for four"),
                "{said:?}"
            );
            assert!(at("for four people").is_some(), "{said:?}");
            // Its reply answers the steered message too: a run that took this one over
            // would not answer it again.
            let (agent, name) = transcripts.transcript_names(None).await.unwrap().remove(0);
            let claims: Vec<serde_json::Value> = transcripts
                .export_lines(&agent, &name)
                .await
                .unwrap()
                .unwrap()
                .iter()
                .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
                .filter(|line| line["log"]["direction"] == "outbound")
                .map(|line| line["log"]["collected"].clone())
                .collect();
            assert_eq!(
                claims,
                [serde_json::json!(["telegram:default:direct:42:m2"])],
                "{said:?}"
            );
            // A delivery again of the steered message is a duplicate.
            let again = manager
                .turn(&dm("for four people").with_message_id("m2"))
                .await
                .unwrap();
            assert_eq!(again.action(), &TurnAction::Duplicate);
        }
    }
}

/// A message handed to a running turn by steering is answered once even when that
/// run's process dies before its reply: the message's own turn, still waiting, takes
/// the dead run over and answers the line the run logged for it — with a channel
/// message id or without.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_steered_into_a_run_that_dies_is_answered_by_its_own_turn() {
    for message_id in [Some("m2"), None] {
        let manager = in_memory(quick().mode(QueueMode::Steer));
        let first = manager.turn(&dm("book a table")).await.unwrap();
        let key = first.key().clone();
        let second = {
            let manager = manager.clone();
            let message = dm_with_id("for four people", message_id);
            tokio::spawn(async move {
                let turn = manager.turn(&message).await.unwrap();
                let action = turn.action().clone();
                let input = turn.input().map(str::to_owned);
                if action == TurnAction::Answer {
                    turn.complete("Four people, booked.").await.unwrap();
                }
                (action, input)
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(first.steering().await.unwrap().len(), 1);
        drop(first); // killed at the tool boundary, before its reply
        let (action, input) = second.await.unwrap();
        assert_eq!(action, TurnAction::Answer, "{message_id:?}");
        assert!(input.unwrap().contains("for four people"), "{message_id:?}");
        let said: Vec<String> = manager
            .session(&key)
            .messages()
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        let count = |text: &str| said.iter().filter(|s| s.contains(text)).count();
        assert_eq!(count("for four people"), 1, "logged once: {said:?}");
        assert_eq!(count("Four people, booked."), 1, "answered once: {said:?}");
    }
}

/// Marks a message without a channel id, queued by a turn that is gone, as taken by
/// steering into the session's run — the state a process leaves that died between
/// taking it at a tool boundary and logging it.
async fn plant_steered(store: &InMemoryStore, key: &SessionKey, text: &str) {
    use agent_sessions::store::SessionStore;
    store
        .apply(key, &mut |slot, _| {
            let entry = slot.as_mut().unwrap();
            let mut record = serde_json::to_value(&*entry).unwrap();
            let queued = taken_message("s1", None, text);
            let fence = record["run"]["fence"].clone();
            let run = record["run"].as_object_mut().unwrap();
            run.entry("answering")
                .or_insert_with(|| serde_json::json!([]))
                .as_array_mut()
                .unwrap()
                .push("queued:s1".into());
            run.insert("taken".into(), serde_json::json!([queued.clone()]));
            let mut steered = queued;
            steered["steered"] = fence;
            record["queued"] = serde_json::json!([steered]);
            *entry = serde_json::from_value(record).unwrap();
            Ok(())
        })
        .await
        .unwrap();
}

/// A message steered into a run whose process died before it logged the message —
/// its own turn gone too — is answered by a sweep, or by the session's next message:
/// once, not lost as though the dead run had answered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_steered_into_a_run_killed_before_logging_it_is_answered() {
    for by_sweep in [true, false] {
        let store = InMemoryStore::new();
        let manager = SessionManager::builder(store.clone())
            .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
            .queue(quick().mode(QueueMode::Steer))
            .build()
            .unwrap();
        let first = manager.turn(&dm("book a table")).await.unwrap();
        let key = first.key().clone();
        plant_steered(&store, &key, "for four people").await;
        drop(first); // killed after taking the message, before logging it
        let turn = if by_sweep {
            manager.take_queued(&key).await.unwrap().expect("a turn")
        } else {
            let turn = manager.turn(&dm("and a high chair")).await.unwrap();
            assert_eq!(turn.action(), &TurnAction::Answer);
            assert!(turn.input().unwrap().contains("high chair"));
            turn
        };
        assert!(
            turn.input().unwrap().contains("for four people"),
            "sweep {by_sweep}: {:?}",
            turn.input()
        );
        turn.complete("Four people and a high chair.")
            .await
            .unwrap();
        assert!(manager.take_queued(&key).await.unwrap().is_none());
        let said: Vec<String> = manager
            .session(&key)
            .messages()
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        let count = |text: &str| said.iter().filter(|s| s.contains(text)).count();
        assert_eq!(count("for four people"), 1, "sweep {by_sweep}: {said:?}");
        let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
        assert!(entry.queued.is_empty() && entry.run.is_none(), "{entry:?}");
    }
}

/// `/queue <mode>` from a sender allowed to reset sets the session's mode (with
/// OpenClaw's options); a stranger's `/queue` is an ordinary message.
#[tokio::test]
async fn the_queue_command_sets_the_sessions_mode() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .build()
        .unwrap();
    let set = manager
        .turn(&dm("/queue followup debounce:2s cap:5 drop:old"))
        .await
        .unwrap();
    let TurnAction::Acknowledge(text) = set.action() else {
        panic!("acknowledged: {:?}", set.action())
    };
    assert!(
        text.contains("followup") && text.contains("cap 5"),
        "{text}"
    );
    let key = set.key().clone();
    set.complete("").await.unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(entry.queue_mode, Some(QueueMode::Followup));
    assert_eq!(
        (entry.queue_debounce_ms, entry.queue_cap, entry.queue_drop),
        (Some(2_000), Some(5), Some(QueueDrop::Old))
    );
    let wrong = manager.turn(&dm("/queue sideways")).await.unwrap();
    assert!(matches!(wrong.action(), TurnAction::Acknowledge(text) if text.contains("unchanged")));
    // In a group, a member who may not reset just talks.
    let group = InboundMessage::group("whatsapp", "1203@g.us", "+15550001", "/queue interrupt")
        .mentioning_agent();
    let talk = manager.turn(&group).await.unwrap();
    assert_eq!(talk.action(), &TurnAction::Answer);
}

/// A mode or drop policy the crate does not know is refused when the manager is built,
/// not followed as `collect` without a word.
#[test]
fn an_unknown_queue_mode_is_refused_when_the_manager_is_built() {
    let sideways = QueueSettings::default().mode(QueueMode::from("sideways"));
    let careless = QueueSettings::default().drop_policy(QueueDrop::from("newest"));
    for settings in [
        sideways.clone(),
        QueueSettings::default().by_channel("telegram", sideways),
        careless,
    ] {
        let built = SessionManager::builder(InMemoryStore::new())
            .queue(settings.clone())
            .build();
        assert!(
            matches!(
                built,
                Err(agent_sessions::Error::InvalidOption {
                    option: "queue",
                    ..
                })
            ),
            "{settings:?}"
        );
    }
}

/// A worker killed while its queued message waits: the message is in the session's
/// entry, so the next message of the session answers it too — or the host's sweep
/// (`take_queued`) does when no message comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_message_whose_waiter_died_is_answered_once() {
    let stores = Stores::new("lanes_orphan");
    for url in &stores.urls {
        let manager = manager(url, quick()).await;
        let first = manager.turn(&dm("first question")).await.unwrap();
        // A waiter that gives up (its process killed): its message stays queued.
        let waiting = tokio::time::timeout(
            Duration::from_millis(100),
            manager.turn(&dm("orphaned question")),
        )
        .await;
        assert!(waiting.is_err(), "{url}: it waits for the run");
        first.complete("first answer").await.unwrap();
        let key = manager.key_for(&dm("x")).unwrap();
        let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
        assert_eq!(entry.queued.len(), 1, "{url}: acknowledged, kept");
        // The dropped waiter's hold is gone once its future is dropped: a sweep takes it,
        // and of two sweeps at once (two workers, say) one answers it.
        let (a, b) = tokio::join!(manager.take_queued(&key), manager.take_queued(&key));
        let mut turns: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(turns.len(), 1, "{url}: one sweep answers the orphan");
        let turn = turns.pop().expect("the orphan is taken");
        assert_eq!(turn.action(), &TurnAction::Answer, "{url}");
        assert!(turn.input().unwrap().contains("orphaned question"), "{url}");
        turn.complete("orphan answered").await.unwrap();
        assert!(
            manager.take_queued(&key).await.unwrap().is_none(),
            "{url}: once"
        );
        let said = manager.session(&key).messages().await.unwrap();
        assert_eq!(
            said.iter()
                .filter(|m| m.content.contains("orphaned question"))
                .count(),
            1,
            "{url}"
        );
    }
    stores.finish().await;
}

/// Makes `key`'s session held by a run on another host, silent past its lease, that
/// was answering the messages `ids` of peer 42 (and, with `forget_taken`, as if this
/// process no longer remembered taking them).
async fn plant_dead_run(store: &InMemoryStore, key: &SessionKey, ids: &[&str], forget_taken: bool) {
    use agent_sessions::store::SessionStore;
    let answering: Vec<String> = ids
        .iter()
        .map(|id| format!("telegram:default:direct:42:{id}"))
        .collect();
    let dead: agent_sessions::store::SessionRun = serde_json::from_value(serde_json::json!({
        "holder": "another-host@1/77/1#gone",
        "startedAt": 0,
        "renewedAt": 0,
        "fence": 7,
        "answering": answering,
    }))
    .unwrap();
    store
        .apply(key, &mut |slot, _| {
            let entry = slot.as_mut().unwrap();
            entry.run = Some(dead.clone());
            entry.run_fence = Some(7);
            if forget_taken {
                entry.recent_inbound.clear();
            }
            Ok(())
        })
        .await
        .unwrap();
}

/// A turn that takes over a run that died after taking a message it never logged does
/// not claim that message: its reply never saw it. A delivery again of the message,
/// while the new run goes on, waits for its place and is answered — not taken for a
/// duplicate and lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_a_dead_run_took_but_never_logged_is_answered_when_delivered_again() {
    // The run is taken over by a new message, or by a delivery again of another message
    // the dead run had taken (it finds no line to resume, and logs its own).
    for (takes_over, text) in [("y", "a new question"), ("r", "the other lost question")] {
        let store = InMemoryStore::new();
        let manager = Arc::new(
            SessionManager::builder(store.clone())
                .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
                .queue(quick())
                .build()
                .unwrap(),
        );
        let hello = manager
            .turn(&dm("hello").with_message_id("h"))
            .await
            .unwrap();
        let key = hello.key().clone();
        hello.complete("hi").await.unwrap();
        // A run on another host, silent past its lease, that took messages `q` and `r`
        // and died before logging them.
        plant_dead_run(&store, &key, &["q", "r"], false).await;
        let next = manager
            .turn(&dm(text).with_message_id(takes_over))
            .await
            .unwrap();
        assert_eq!(next.action(), &TurnAction::Answer, "{takes_over}");
        // `q` comes again while that run goes on.
        let again = {
            let manager = manager.clone();
            tokio::spawn(async move {
                let turn = manager
                    .turn(&dm("the lost question").with_message_id("q"))
                    .await
                    .unwrap();
                let seen = (turn.action().clone(), turn.input().map(str::to_owned));
                turn.complete("answer to the lost question").await.unwrap();
                seen
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        next.complete("an answer").await.unwrap();
        let (action, input) = again.await.unwrap();
        assert_eq!(
            action,
            TurnAction::Answer,
            "{takes_over}: answered, not a duplicate"
        );
        assert!(input.unwrap().contains("the lost question"), "{takes_over}");
    }
}

/// A queued message as a run keeps it once it took it: `id` its queue id, `message_id`
/// its channel message id, if it has one.
fn taken_message(id: &str, message_id: Option<&str>, text: &str) -> serde_json::Value {
    let mut message = dm(text);
    if let Some(message_id) = message_id {
        message = message.with_message_id(message_id);
    }
    serde_json::json!({
        "id": id,
        "at": 1,
        "waiter": "another-host@1/77/1#gone-waiter",
        "inboundId": message_id.map(|m| format!("telegram:default:direct:42:{m}")),
        "message": serde_json::to_value(&message).unwrap(),
    })
}

/// Gives the session's run (dead or alive) the queued messages it took and answers,
/// each delivered once (the session remembers taking those with a channel id).
async fn plant_taken(store: &InMemoryStore, key: &SessionKey, taken: &[serde_json::Value]) {
    use agent_sessions::store::SessionStore;
    store
        .apply(key, &mut |slot, _| {
            let entry = slot.as_mut().unwrap();
            let holder = entry.run.as_ref().unwrap().holder.clone();
            for id in taken.iter().filter_map(|m| m["inboundId"].as_str()) {
                if !entry.recent_inbound.iter().any(|r| r.id == id) {
                    entry.recent_inbound.push(
                        serde_json::from_value(serde_json::json!({
                            "id": id,
                            "at": entry.updated_at,
                            "sessionId": entry.session_id,
                            "holder": holder,
                        }))
                        .unwrap(),
                    );
                }
            }
            let run = entry.run.as_mut().unwrap();
            let mut record = serde_json::to_value(&*run).unwrap();
            if record.get("answering").is_none() {
                record["answering"] = serde_json::json!([]);
            }
            for message in taken {
                let tracked = match message["inboundId"].as_str() {
                    Some(id) => id.to_owned(),
                    None => format!("queued:{}", message["id"].as_str().unwrap()),
                };
                record["answering"]
                    .as_array_mut()
                    .unwrap()
                    .push(tracked.into());
            }
            record["taken"] = taken.to_vec().into();
            *run = serde_json::from_value(record).unwrap();
            Ok(())
        })
        .await
        .unwrap();
}

/// Messages that waited during a run, which a follow-up turn took together and whose
/// process was killed before it logged them: their waiting turns had already returned
/// `Queued(Collected)` (nothing to send), so no delivery again will come. The turn that
/// takes the dead run over answers them with its own message — once: a delivery again
/// of one afterwards is a duplicate. A message with no channel id is answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_a_killed_follow_up_took_are_answered_by_the_run_that_takes_over() {
    let store = InMemoryStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .queue(quick())
        .build()
        .unwrap();
    let hello = manager
        .turn(&dm("hello").with_message_id("h"))
        .await
        .unwrap();
    let key = hello.key().clone();
    hello.complete("hi").await.unwrap();
    plant_dead_run(&store, &key, &[], false).await;
    plant_taken(
        &store,
        &key,
        &[
            taken_message("q1", Some("q"), "change my booking to Friday"),
            taken_message("p1", None, "actually make it Saturday"),
        ],
    )
    .await;
    let next = manager
        .turn(&dm("are you there?").with_message_id("y"))
        .await
        .unwrap();
    assert_eq!(next.action(), &TurnAction::Answer);
    let input = next.input().unwrap().to_owned();
    let friday = input.find("change my booking to Friday");
    let saturday = input.find("actually make it Saturday");
    let there = input.find("are you there?");
    assert!(
        friday < saturday && saturday < there && friday.is_some(),
        "in arrival order: {input}"
    );
    next.complete("Saturday it is.").await.unwrap();
    let again = manager
        .turn(&dm("change my booking to Friday").with_message_id("q"))
        .await
        .unwrap();
    assert_eq!(again.action(), &TurnAction::Duplicate, "answered once");
    again.complete("").await.unwrap();
    let entry = store.get(&key).await.unwrap().unwrap().entry;
    assert!(entry.run.is_none() && entry.queued.is_empty(), "{entry:?}");
    let asked = manager
        .session(&key)
        .messages()
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.content.contains("make it Saturday"))
        .count();
    assert_eq!(asked, 1, "logged once");
}

/// The same, when the run is taken over by a delivery again of a message the dead run
/// had logged: that line is the new turn's input, so the messages the dead run took and
/// never logged go back to the queue, where the next turn — or a sweep — answers them.
/// Those it did log are not answered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_a_killed_run_took_go_back_to_the_queue_when_it_is_resumed() {
    let store = InMemoryStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .queue(quick())
        .build()
        .unwrap();
    let question = dm("when do you open?").with_message_id("r");
    let killed = manager.turn(&question).await.unwrap();
    assert_eq!(killed.action(), &TurnAction::Answer);
    let key = killed.key().clone();
    // Its run had taken `q` (never logged) and its line shows it answers `s` (logged).
    plant_taken(
        &store,
        &key,
        &[
            taken_message("q1", Some("q"), "and on Sundays?"),
            taken_message("s1", Some("r"), "when do you open?"),
        ],
    )
    .await;
    drop(killed);
    let resumed = manager.turn(&question).await.unwrap();
    assert_eq!(resumed.action(), &TurnAction::Answer);
    let input = resumed.input().unwrap();
    assert!(
        input.contains("when do you open?") && !input.contains("Sundays"),
        "{input}"
    );
    resumed.complete("At nine.").await.unwrap();
    let entry = store.get(&key).await.unwrap().unwrap().entry;
    assert_eq!(entry.queued.len(), 1, "back in the queue: {entry:?}");
    let swept = manager
        .take_queued(&key)
        .await
        .unwrap()
        .expect("a turn for it");
    let input = swept.input().unwrap();
    assert!(
        input.contains("Sundays") && !input.contains("open?"),
        "{input}"
    );
    swept.complete("From ten.").await.unwrap();
    assert!(manager.take_queued(&key).await.unwrap().is_none());
    let again = manager
        .turn(&dm("and on Sundays?").with_message_id("q"))
        .await
        .unwrap();
    assert_eq!(again.action(), &TurnAction::Duplicate, "answered once");
}

/// A run that logged its reply and died before it gave the run back, taken over by the
/// next, different message: that turn's reply claims its own message, not again the
/// ones the dead run's reply already answered.
#[tokio::test]
async fn a_run_taken_over_after_its_reply_is_not_claimed_twice() {
    use agent_sessions::transcript::TranscriptExport;
    let store = InMemoryStore::new();
    let transcripts = agent_sessions::transcript::InMemoryTranscriptStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(transcripts.clone())
        .queue(quick())
        .build()
        .unwrap();
    let turn = manager
        .turn(&dm("when do you open?").with_message_id("q"))
        .await
        .unwrap();
    let key = turn.key().clone();
    turn.complete("At nine.").await.unwrap();
    plant_dead_run(&store, &key, &["q"], false).await;
    let next = manager
        .turn(&dm("and on Sundays?").with_message_id("s"))
        .await
        .unwrap();
    assert_eq!(next.action(), &TurnAction::Answer);
    next.complete("From ten.").await.unwrap();
    let mut claims = Vec::new();
    for (agent, name) in transcripts.transcript_names(None).await.unwrap() {
        for line in transcripts
            .export_lines(&agent, &name)
            .await
            .unwrap()
            .unwrap()
        {
            let line: serde_json::Value = serde_json::from_str(&line).unwrap();
            if line["log"]["direction"] == "outbound" {
                claims.push(line["log"]["collected"].clone());
            }
        }
    }
    assert_eq!(
        claims,
        [
            serde_json::json!(["telegram:default:direct:42:q"]),
            serde_json::json!(["telegram:default:direct:42:s"]),
        ]
    );
}

/// Messages with no channel id that waited during a run are named in the follow-up's
/// line by their queue ids — the follow-up's own message too — so a run that takes a
/// dead follow-up over can tell they were logged, and its reply claims each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_names_every_message_it_carries_even_without_channel_ids() {
    use agent_sessions::transcript::TranscriptExport;
    let transcripts = agent_sessions::transcript::InMemoryTranscriptStore::new();
    let manager = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .transcripts(transcripts.clone())
            .queue(quick())
            .build()
            .unwrap(),
    );
    let first = manager.turn(&dm("book a table")).await.unwrap();
    let mut waiting = Vec::new();
    for text in ["for Friday", "make it Saturday"] {
        let manager = manager.clone();
        waiting.push(tokio::spawn(async move {
            let turn = manager.turn(&dm(text)).await.unwrap();
            let action = turn.action().clone();
            turn.complete("Saturday, booked.").await.unwrap();
            action
        }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    first.complete("Which day?").await.unwrap();
    let mut actions = Vec::new();
    for waiter in waiting {
        actions.push(waiter.await.unwrap());
    }
    assert!(actions.contains(&TurnAction::Answer), "{actions:?}");
    let mut lines = Vec::new();
    for (agent, name) in transcripts.transcript_names(None).await.unwrap() {
        for line in transcripts
            .export_lines(&agent, &name)
            .await
            .unwrap()
            .unwrap()
        {
            lines.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        }
    }
    let follow_up = lines
        .iter()
        .rfind(|l| l["log"]["direction"] == "inbound")
        .unwrap();
    let reply = lines.last().unwrap();
    let named = |line: &serde_json::Value| -> Vec<String> {
        line["log"]["collected"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|id| id.as_str())
            .filter(|id| id.starts_with("queued:"))
            .map(str::to_owned)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    assert_eq!(named(follow_up).len(), 2, "{follow_up}");
    assert_eq!(named(reply), named(follow_up), "{reply}");
}

/// A host that sweeps rather than wait for the next message gets the messages a killed
/// follow-up had taken: those it never logged, and — when it logged them and died
/// before its reply — its line, answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_answers_what_a_killed_follow_up_had_taken() {
    // Never logged.
    let store = InMemoryStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .queue(quick())
        .build()
        .unwrap();
    let hello = manager
        .turn(&dm("hello").with_message_id("h"))
        .await
        .unwrap();
    let key = hello.key().clone();
    hello.complete("hi").await.unwrap();
    plant_dead_run(&store, &key, &[], false).await;
    plant_taken(
        &store,
        &key,
        &[
            taken_message("q1", Some("q"), "change my booking to Friday"),
            taken_message("p1", None, "actually make it Saturday"),
        ],
    )
    .await;
    let swept = manager.take_queued(&key).await.unwrap().expect("a turn");
    let input = swept.input().unwrap().to_owned();
    assert!(
        input.contains("to Friday") && input.contains("make it Saturday"),
        "{input}"
    );
    swept.complete("Saturday it is.").await.unwrap();
    assert!(manager.take_queued(&key).await.unwrap().is_none());
    let again = manager
        .turn(&dm("change my booking to Friday").with_message_id("q"))
        .await
        .unwrap();
    assert_eq!(again.action(), &TurnAction::Duplicate);

    // Logged, never answered: the follow-up is killed while the model runs — with a
    // channel message id, and without one (it is found by the id it was queued as).
    for message_id in [Some("f"), None] {
        let manager = in_memory(quick());
        let first = manager.turn(&dm("book a table")).await.unwrap();
        let key = first.key().clone();
        let follow_up = {
            let manager = manager.clone();
            let message = dm_with_id("for Friday", message_id);
            tokio::spawn(async move {
                let turn = manager.turn(&message).await.unwrap();
                assert_eq!(turn.action(), &TurnAction::Answer);
                drop(turn); // killed before its reply
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.complete("Which day?").await.unwrap();
        follow_up.await.unwrap();
        let swept = manager
            .take_queued(&key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a turn for the follow-up with id {message_id:?}"));
        assert!(swept.input().unwrap().contains("for Friday"));
        swept.complete("Friday, booked.").await.unwrap();
        assert!(manager.take_queued(&key).await.unwrap().is_none());
        let messages = manager.session(&key).messages().await.unwrap();
        let asked = messages
            .iter()
            .filter(|m| m.content.contains("for Friday"))
            .count();
        assert_eq!(
            asked, 1,
            "its line answered, not logged again ({message_id:?})"
        );
        let replies = messages
            .iter()
            .filter(|m| m.content == "Friday, booked.")
            .count();
        assert_eq!(replies, 1, "answered once ({message_id:?})");
    }
}

/// A run that logged its reply and died before it gave the run back: a delivery again
/// of its message finds the reply and answers nothing — once, not twice — and the
/// session goes on.
#[tokio::test]
async fn a_message_a_dead_run_answered_is_not_answered_again() {
    let store = InMemoryStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .queue(quick())
        .build()
        .unwrap();
    let question = dm("when do you open?").with_message_id("q");
    let turn = manager.turn(&question).await.unwrap();
    let key = turn.key().clone();
    turn.complete("At nine.").await.unwrap();
    // As if the run had died after logging its reply: it still holds the session, and
    // this process no longer remembers taking the message.
    plant_dead_run(&store, &key, &["q"], true).await;
    let again = manager.turn(&question).await.unwrap();
    assert_eq!(again.action(), &TurnAction::Duplicate);
    again.complete("").await.unwrap();
    let next = manager
        .turn(&dm("and on Sundays?").with_message_id("s"))
        .await
        .unwrap();
    assert_eq!(next.action(), &TurnAction::Answer, "the run was given back");
    next.complete("From ten.").await.unwrap();
    let replies = manager
        .session(&key)
        .messages()
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.content == "At nine.")
        .count();
    assert_eq!(replies, 1);
}

/// A run whose holder seems gone past its lease (a host that stopped) is taken over;
/// when the old holder comes back, its `complete` is refused and nothing it says is
/// logged.
#[tokio::test]
async fn a_holder_stopped_past_its_lease_cannot_complete() {
    use agent_sessions::freshness::ManualClock;
    let clock = ManualClock::at_millis(1_770_000_000_000);
    let store = InMemoryStore::new();
    let manager = SessionManager::builder(store.clone())
        .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
        .clock(clock.clone())
        .queue(QueueSettings::default().debounce(Duration::ZERO))
        .build()
        .unwrap();
    let stopped = manager.turn(&dm("slow question")).await.unwrap();
    let key = stopped.key().clone();
    // Its holder is on another host, as far as this store can tell, and silent.
    let mut entry = store.get(&key).await.unwrap().unwrap().entry;
    let run = entry.run.as_mut().unwrap();
    run.holder = format!(
        "another-host/1/1#{}",
        run.holder.rsplit('#').next().unwrap()
    );
    store.put(&key, entry).await.unwrap();
    clock.advance(Duration::from_secs(10 * 60));
    let next = manager.turn(&dm("anyone there?")).await.unwrap();
    assert_eq!(next.action(), &TurnAction::Answer, "the run is taken over");
    next.complete("yes").await.unwrap();
    let late = stopped.complete("an answer from the past").await;
    assert!(
        matches!(late, Err(agent_sessions::Error::RunLost { .. })),
        "{late:?}"
    );
    let said = manager.session(&key).messages().await.unwrap();
    assert!(!said.iter().any(|m| m.content.contains("from the past")));
}

/// Timing guard for the tests above: a queued turn that waits does not spin.
#[tokio::test]
async fn a_waiting_turn_waits_for_the_run_without_spinning() {
    let manager = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .queue(quick())
            .build()
            .unwrap(),
    );
    let first = manager.turn(&dm("first")).await.unwrap();
    let started = Instant::now();
    let waiter = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let turn = manager.turn(&dm("second")).await.unwrap();
            (turn.action().clone(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "it waits while the run runs");
    first.complete("done").await.unwrap();
    let (action, waited) = waiter.await.unwrap();
    assert_eq!(action, TurnAction::Answer);
    // The queue was quiet for longer than its debounce when the run ended: it runs then.
    assert!(
        waited >= Duration::from_millis(200),
        "{waited:?}: after the run"
    );
}

/// A small deterministic generator for the kill test (its seed is printed).
struct Dice(u64);

impl Dice {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

/// The question ids a reply line answers: `a<i>` for each `q<i>` it saw pending.
fn answered_ids(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|word| word.strip_prefix('a')?.parse().ok())
        .collect()
}

/// Workers SIGKILLed at random points — waiting in the queue, running the model,
/// steering, completing — hundreds of times, while the channel delivers every
/// unanswered message again: every message is answered exactly once, none lost, none
/// twice, in `collect` and in `steer` mode.
#[test]
fn runs_killed_at_random_answer_every_message_exactly_once() {
    // Below the 100 message ids a session remembers for its dedupe window.
    const MESSAGES: u64 = 90;
    const KILLS_PER_BACKEND: usize = 60;
    let seed = std::env::var("LANES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("LANES_SEED={seed}");
    let mut dice = Dice(seed);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stores = Stores::new("lanes_kills");
    let mut kills = 0;
    // Sessions (peers) on each backend until that backend has seen enough kills.
    let mut plan: Vec<(String, String)> = Vec::new();
    let mut kills_on: std::collections::BTreeMap<String, usize> = Default::default();
    let mut next = 0;
    while next < stores.urls.len() * 10 {
        let url = &stores.urls[next % stores.urls.len()];
        let peer = format!("{}", 42 + next / stores.urls.len());
        next += 1;
        let enough = kills_on.get(url).copied().unwrap_or(0) >= KILLS_PER_BACKEND
            && next > stores.urls.len() * 2;
        if enough {
            if stores
                .urls
                .iter()
                .all(|u| kills_on.get(u).copied().unwrap_or(0) >= KILLS_PER_BACKEND)
            {
                break;
            }
            continue;
        }
        plan.push((url.clone(), peer.clone()));
        let (url, peer) = (url.as_str(), peer.as_str());
        // Every other session steers: its runs take what arrives at a tool boundary.
        let mode = if peer.parse::<u64>().unwrap() % 2 == 1 {
            "steer"
        } else {
            "collect"
        };
        let before = kills;
        runtime.block_on(async { drop(manager(url, quick()).await) });
        let answered = |runtime: &tokio::runtime::Runtime| -> Vec<u64> {
            runtime.block_on(async {
                let manager = manager(url, quick()).await;
                let key = manager
                    .key_for(&InboundMessage::direct("telegram", peer, "x"))
                    .unwrap();
                let Some(session) = manager.session(&key).get().await.unwrap() else {
                    return Vec::new();
                };
                let backend = agent_sessions::store::Backend::open(url).await.unwrap();
                let agent = AgentId::main();
                let name =
                    std::path::Path::new(session.entry.session_file.as_deref().unwrap_or(""))
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| format!("{}.jsonl", session.entry.session_id));
                let lines = backend
                    .transcripts()
                    .export_lines(&agent, &name)
                    .await
                    .unwrap()
                    .unwrap_or_default();
                lines
                    .iter()
                    .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                    .filter(|line| line["message"]["role"] == "assistant")
                    .flat_map(|line| {
                        let text = line["message"]["content"][0]["text"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        answered_ids(&text)
                    })
                    .collect()
            })
        };
        let mut rounds = 0;
        loop {
            let done = answered(&runtime);
            let pending: Vec<u64> = (0..MESSAGES).filter(|i| !done.contains(i)).collect();
            if pending.is_empty() {
                break;
            }
            rounds += 1;
            if rounds == 200 {
                // What the session holds, to see why.
                runtime.block_on(async {
                    let manager = manager(url, quick()).await;
                    let key = manager
                        .key_for(&InboundMessage::direct("telegram", peer, "x"))
                        .unwrap();
                    if let Some(session) = manager.session(&key).get().await.unwrap() {
                        eprintln!(
                            "entry: {}",
                            serde_json::to_string_pretty(&session.entry).unwrap()
                        );
                    }
                });
            }
            assert!(
                rounds < 200,
                "{url}: still unanswered after 200 rounds: {pending:?} (seed {seed})"
            );
            // A burst of the pending messages, each in a worker of its own.
            let burst: Vec<u64> = pending
                .iter()
                .copied()
                .filter(|_| dice.next(3) > 0)
                .take(6)
                .collect();
            let burst = if burst.is_empty() {
                vec![pending[0]]
            } else {
                burst
            };
            let mut workers = Vec::new();
            for i in &burst {
                let child = Command::new(std::env::current_exe().unwrap())
                    .args(["kill_worker", "--exact", "--ignored"])
                    .env("LANES_URL", url)
                    .env("LANES_QUESTION", i.to_string())
                    .env("LANES_PEER", peer)
                    .env("LANES_MODE", mode)
                    .env("LANES_MODEL_MS", dice.next(80).to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                workers.push(child);
                std::thread::sleep(Duration::from_millis(dice.next(30)));
            }
            std::thread::sleep(Duration::from_millis(dice.next(120)));
            for worker in &mut workers {
                if dice.next(5) > 0 && worker.try_wait().unwrap().is_none() {
                    worker.kill().unwrap();
                    kills += 1;
                }
            }
            for mut worker in workers {
                let waited = Instant::now();
                while worker.try_wait().unwrap().is_none() {
                    assert!(
                        waited.elapsed() < Duration::from_secs(60),
                        "{url}: a worker that was not killed never finished"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let done = answered(&runtime);
        // Each question reached the model in exactly one logged line.
        let asked: Vec<u64> = runtime.block_on(async {
            let manager = manager(url, quick()).await;
            let key = manager
                .key_for(&InboundMessage::direct("telegram", peer, "x"))
                .unwrap();
            manager
                .session(&key)
                .messages()
                .await
                .unwrap()
                .iter()
                .filter(|m| m.role == ChatRole::User)
                .flat_map(|m| {
                    m.content
                        .split(|c: char| !c.is_ascii_alphanumeric())
                        .filter_map(|word| word.strip_prefix('q')?.parse::<u64>().ok())
                        .collect::<Vec<_>>()
                })
                .collect()
        });
        if (0..MESSAGES).any(|i| {
            done.iter().filter(|d| **d == i).count() != 1
                || asked.iter().filter(|a| **a == i).count() != 1
        }) {
            runtime.block_on(async {
                let backend = agent_sessions::store::Backend::open(url).await.unwrap();
                for (agent, name) in backend.transcripts().transcript_names(None).await.unwrap() {
                    eprintln!("== {name}");
                    for line in backend
                        .transcripts()
                        .export_lines(&agent, &name)
                        .await
                        .unwrap()
                        .unwrap_or_default()
                    {
                        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                        let content = match &v["message"]["content"] {
                            serde_json::Value::String(s) => s.clone(),
                            other => other[0]["text"].as_str().unwrap_or_default().to_owned(),
                        };
                        eprintln!(
                            "{} {} {} in={} col={} {}",
                            v["id"],
                            v["type"],
                            v["message"]["role"],
                            v["log"]["inboundId"],
                            v["log"]["collected"],
                            content.replace('\n', " | ")
                        );
                    }
                }
            });
        }
        for i in 0..MESSAGES {
            assert_eq!(
                asked.iter().filter(|a| **a == i).count(),
                1,
                "{url} ({peer}): question {i} logged {} times (seed {seed})",
                asked.iter().filter(|a| **a == i).count()
            );
            assert_eq!(
                done.iter().filter(|d| **d == i).count(),
                1,
                "{url} ({peer}): question {i} answered {} times (seed {seed})",
                done.iter().filter(|d| **d == i).count()
            );
        }
        eprintln!(
            "{url} ({peer}, {mode}): {rounds} rounds, {} kills",
            kills - before
        );
        *kills_on.entry(url.to_owned()).or_default() += kills - before;
    }
    eprintln!("sessions: {plan:?}");
    eprintln!("{kills} workers killed");
    for url in &stores.urls {
        assert!(kills_on[url] >= KILLS_PER_BACKEND, "{url}: {kills_on:?}");
    }
    runtime.block_on(stores.finish());
}

/// One worker of [`runs_killed_at_random_answer_every_message_exactly_once`]: takes
/// question `LANES_QUESTION` (its channel message id is fixed, so a delivery again is
/// known), and answers every question the model sees pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the kill test in a process of its own"]
async fn kill_worker() {
    let (Ok(url), Ok(question)) = (std::env::var("LANES_URL"), std::env::var("LANES_QUESTION"))
    else {
        return;
    };
    let model_ms: u64 = std::env::var("LANES_MODEL_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    let steers = std::env::var("LANES_MODE").is_ok_and(|mode| mode == "steer");
    let mut queue = QueueSettings::default().debounce(Duration::from_millis(20));
    if steers {
        queue = queue.mode(QueueMode::Steer);
    }
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .queue(queue)
        .build()
        .unwrap();
    let peer = std::env::var("LANES_PEER").unwrap_or_else(|_| "42".into());
    let message = InboundMessage::direct("telegram", &peer, format!("q{question}"))
        .with_message_id(format!("k{question}"));
    let turn = manager.turn(&message).await.unwrap();
    if !turn.needs_model() {
        turn.complete("").await.unwrap();
        return;
    }
    let messages = turn.messages().await.unwrap();
    // What the user asked since the last reply.
    let last_reply = messages
        .iter()
        .rposition(|m| m.role == ChatRole::Assistant)
        .map_or(0, |at| at + 1);
    let mut answers: Vec<String> = messages[last_reply..]
        .iter()
        .filter(|m| m.role == ChatRole::User)
        .flat_map(|m| {
            m.content
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter_map(|word| word.strip_prefix('q')?.parse::<u64>().ok())
                .map(|q| format!("a{q}"))
                .collect::<Vec<_>>()
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(model_ms / 2)).await;
    if steers {
        // A tool boundary: what arrived meanwhile is answered by this run too.
        for steered in turn.steering().await.unwrap() {
            answers.extend(
                steered
                    .body
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .filter_map(|word| word.strip_prefix('q')?.parse::<u64>().ok())
                    .map(|q| format!("a{q}")),
            );
        }
        tokio::time::sleep(Duration::from_millis(model_ms / 2)).await;
    }
    answers.dedup();
    turn.complete(answers.join(" ")).await.unwrap();
}

/// A run whose session was reset while the model ran cannot complete, and its reply —
/// logged before the reset was seen — stays in the old transcript marked not sent, so
/// no model ever takes it as said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_lost_to_a_reset_leaves_its_reply_marked_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let manager = manager(&format!("json:{}", dir.path().display()), quick()).await;
    let first = manager.turn(&dm("book a table")).await.unwrap();
    assert!(first.needs_model());
    let reset = manager.turn(&dm("/new")).await.unwrap();
    reset.complete("ok").await.unwrap();
    let lost = first.complete("A table for two, booked.").await;
    assert!(
        matches!(lost, Err(agent_sessions::Error::RunLost { .. })),
        "{lost:?}"
    );
    // Every transcript of the store, archives too: the reply's line, then its mark.
    let mut lines = Vec::new();
    for file in walk(dir.path()) {
        if file.to_string_lossy().contains(".jsonl") {
            let text = std::fs::read_to_string(&file).unwrap();
            lines.extend(
                text.lines()
                    .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()),
            );
        }
    }
    let reply = lines
        .iter()
        .find(|line| line.to_string().contains("A table for two, booked."));
    if let Some(reply) = reply {
        let id = reply["id"].as_str().unwrap();
        assert!(
            lines.iter().any(|line| {
                line["customType"] == "agent-sessions.delivery"
                    && line["data"]["line"] == id
                    && line["data"]["status"] == "failed"
            }),
            "the lost run's reply is marked not sent"
        );
    }
    // The session the key has now never saw it.
    let key = manager.key_for(&dm("x")).unwrap();
    let seen = manager.session(&key).messages().await.unwrap();
    assert!(
        seen.iter().all(|m| !m.content.contains("A table for two")),
        "{seen:?}"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// What one session's queue keeps is bounded in bytes whatever arrives and whatever a
/// sender asks: a cap over 100 is refused, big messages give way past 256 KiB, and a
/// follow-up summarises at most the 20 newest it dropped. Other sessions go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_big_messages_keeps_the_queue_bounded_in_bytes() {
    use agent_sessions::lane::MAX_QUEUED_BYTES;
    let manager = Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
            .queue(quick().cap(100_000))
            .build()
            .unwrap(),
    );
    let refused = manager
        .turn(&dm("/queue collect cap:100000"))
        .await
        .unwrap();
    assert!(
        matches!(refused.action(), TurnAction::Acknowledge(text) if text.contains("not a cap")),
        "{:?}",
        refused.action()
    );
    refused.complete("").await.unwrap();
    let first = manager.turn(&dm("hold the run")).await.unwrap();
    let key = first.key().clone();
    let mut waiting = Vec::new();
    for n in 0..60 {
        let manager = manager.clone();
        let body = format!("message {n} {}", "x".repeat(20_000));
        waiting.push(tokio::spawn(async move {
            let turn = manager.turn(&dm(&body)).await.unwrap();
            let action = turn.action().clone();
            turn.complete("ok").await.unwrap();
            action
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let entry = manager.store().get(&key).await.unwrap().unwrap().entry;
    let queued: usize = entry
        .queued
        .iter()
        .map(|q| q.message.to_string().len())
        .sum();
    assert!(entry.queued.len() <= 100, "the cap is at most 100");
    assert!(queued <= MAX_QUEUED_BYTES, "{queued} bytes queued");
    let dropped = entry.queue_dropped.clone().unwrap_or_default();
    assert!(
        dropped.lines.len() <= 20,
        "{} summary lines",
        dropped.lines.len()
    );
    assert!(dropped.count >= 40, "{} dropped", dropped.count);
    // Another person's session is not held up meanwhile.
    let other = InboundMessage::direct("telegram", "43", "hello");
    let started = Instant::now();
    manager
        .turn(&other)
        .await
        .unwrap()
        .complete("hi")
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    first.complete("done").await.unwrap();
    let mut answered = 0;
    for handle in waiting {
        if handle.await.unwrap() == TurnAction::Answer {
            answered += 1;
        }
    }
    assert_eq!(answered, 1, "one follow-up turn answers what stayed");
}
