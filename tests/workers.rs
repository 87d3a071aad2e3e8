//! Many workers, one bot: a scripted day of traffic (direct chats, a busy group with
//! chatter and mentions, resets, system events, an idle expiry), fed once to one worker
//! and once to four worker processes (messages dealt round-robin and at random, with a
//! worker SIGKILLed and restarted in the middle), on PostgreSQL and on SQLite: the
//! sessions, the transcripts, what the model saw at every turn, and the events a
//! subscriber received are the same in both runs.
//!
//! A worker is this test binary re-executed: the ignored test `worker_process` reads one
//! command per line on stdin, runs it on a manager over the store URL it finds in the
//! environment (with a manual clock the command sets), and writes one report per line on
//! stdout. The parent sends the next command only after the report of the last one, so
//! which worker runs a step is the only difference between the runs.
#![cfg(any(feature = "sqlite", feature = "postgres"))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_sessions::freshness::{from_millis, ManualClock};
use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::prelude::*;
use agent_sessions::store::Backend;
use agent_sessions::transcript::{Offset, TranscriptRef, TranscriptUpdate};
use agent_sessions::SessionStatus;
use serde::{Deserialize, Serialize};

const URL_VAR: &str = "AGENT_SESSIONS_WORKER_STORE";
/// Marks the worker's protocol lines among whatever else the test harness prints.
const LINE_MARK: &str = "@worker ";
/// 2026-03-10 08:00 UTC, the start of the scripted day.
const DAY_START_MS: u64 = 1_773_129_600_000;
/// Minutes between two steps of the script.
const STEP_MINUTES: u64 = 5;
/// Sessions go stale after this long without a message.
const IDLE_MINUTES: u32 = 120;
const STEPS: usize = 80;
const WORKERS: usize = 4;
/// The step before which run B kills one of its workers and starts a replacement.
const KILL_BEFORE_STEP: usize = 40;

// ---------------------------------------------------------------------------------
// The script
// ---------------------------------------------------------------------------------

/// A message as the parent describes it to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Message {
    channel: String,
    /// The person in a direct chat, the sender in the group.
    from: String,
    /// The group, for a group message.
    group: Option<String>,
    text: String,
    mentions_agent: bool,
}

impl Message {
    fn inbound(&self) -> InboundMessage {
        match &self.group {
            Some(group) => {
                let message = InboundMessage::group(&self.channel, group, &self.from, &self.text)
                    .with_sender_name(&self.from);
                if self.mentions_agent {
                    message.mentioning_agent()
                } else {
                    message
                }
            }
            None => InboundMessage::direct(&self.channel, &self.from, &self.text),
        }
    }
}

fn direct(channel: &str, from: &str, text: &str) -> Message {
    Message {
        channel: channel.into(),
        from: from.into(),
        group: None,
        text: text.into(),
        mentions_agent: false,
    }
}

const GROUP: &str = "-100200";

fn chatter(from: &str, text: &str) -> Message {
    Message {
        group: Some(GROUP.into()),
        ..direct("telegram", from, text)
    }
}

fn mention(from: &str, text: &str) -> Message {
    Message {
        mentions_agent: true,
        ..chatter(from, text)
    }
}

/// What a step does.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Action {
    /// A message arrives: one turn.
    Receive(Message),
    /// A system event is queued for the session `to` belongs to.
    Enqueue { to: Message, text: String },
}

/// One command to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    index: usize,
    at_ms: u64,
    action: Action,
    /// Waits this long after reading the conversation, before completing the turn (and
    /// says so first), so the parent can kill the worker mid-turn.
    hold_ms: Option<u64>,
}

/// The scripted day: a step every five minutes from 08:00, in cycles of ten.
///
/// Alice writes on Telegram and Discord, Bob on Telegram, Carol on Discord; Dana and Eve
/// chat in a Telegram group where Bob addresses the bot once a cycle. Every other cycle
/// a reminder is queued for Alice's Telegram chat, which her next message there sees.
/// Carol writes in the first two cycles and again from the seventh: a gap of more than
/// the idle window. Bob starts over with a bare `/new`, Alice with `/new` and a question.
fn script() -> Vec<Step> {
    (0..STEPS)
        .map(|index| {
            let cycle = index / 10;
            let action = match (index, index % 10) {
                (33, _) => Action::Receive(direct("telegram", "bob", "/new")),
                (52, _) => {
                    Action::Receive(direct("telegram", "alice", "/new what is on my calendar?"))
                }
                (_, 0) | (_, 9) => Action::Receive(direct(
                    "telegram",
                    "alice",
                    &format!("alice on telegram, step {index}"),
                )),
                (_, 1) | (_, 8) => {
                    Action::Receive(chatter("dana", &format!("dana chats at step {index}.")))
                }
                (_, 2) => Action::Receive(direct(
                    "telegram",
                    "bob",
                    &format!("bob on telegram, step {index}"),
                )),
                (_, 3) => Action::Receive(chatter("eve", &format!("eve chats at step {index}."))),
                (_, 4) => {
                    Action::Receive(mention("bob", &format!("@bot bob asks at step {index}")))
                }
                (_, 5) if !(2..6).contains(&cycle) => Action::Receive(direct(
                    "discord",
                    "carol",
                    &format!("carol on discord, step {index}"),
                )),
                (_, 6) if cycle % 2 == 0 => Action::Enqueue {
                    to: direct("telegram", "alice", ""),
                    text: format!("Reminder {index}: stand-up moved."),
                },
                (_, 6) => Action::Receive(chatter("eve", &format!("eve chats at step {index}."))),
                _ => Action::Receive(direct(
                    "discord",
                    "alice",
                    &format!("alice on discord, step {index}"),
                )),
            };
            Step {
                index,
                at_ms: DAY_START_MS + index as u64 * STEP_MINUTES * 60_000,
                action,
                hold_ms: None,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// The worker
// ---------------------------------------------------------------------------------

/// What a worker says about one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Said {
    /// The conversation was read; the worker now waits `hold_ms` before completing.
    Holding { index: usize },
    /// The step is done.
    Done(Report),
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Report {
    index: usize,
    key: String,
    /// `answer`, `stay_silent`, `acknowledge` or `enqueue`.
    action: String,
    /// Why the message went to its session (`None` for chatter and events).
    reason: Option<String>,
    aborted_last_run: Option<bool>,
    /// What the model saw, as (role, text).
    seen: Vec<(String, String)>,
    /// What was sent.
    sent: Vec<String>,
    /// The session id under the key after the step.
    session_id: Option<String>,
}

/// The stand-in model: its reply depends only on what it was shown.
fn stand_in_model(seen: &[(String, String)]) -> String {
    let last = seen.last().map(|(_, text)| text.as_str()).unwrap_or("");
    let last_line = last.lines().last().unwrap_or("");
    format!("reply to «{last_line}» after {} messages", seen.len())
}

/// A manager on `url` as every worker builds it.
async fn worker_manager(url: &str, clock: &ManualClock) -> SessionManager {
    SessionManager::connect(url)
        .await
        .expect("the store opens")
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .freshness(ResetConfig::default().reset(ResetSpec::idle(IDLE_MINUTES)))
        .clock(clock.clone())
        .build()
        .unwrap()
}

async fn run_step(manager: &SessionManager, clock: &ManualClock, step: Step) -> Report {
    clock.set(from_millis(step.at_ms));
    let mut report = Report {
        index: step.index,
        key: String::new(),
        action: String::new(),
        reason: None,
        aborted_last_run: None,
        seen: Vec::new(),
        sent: Vec::new(),
        session_id: None,
    };
    let key = match &step.action {
        Action::Enqueue { to, text } => {
            let key = manager.key_for(&to.inbound()).unwrap();
            assert!(manager
                .session(&key)
                .enqueue_system_event(text)
                .await
                .unwrap());
            report.action = "enqueue".into();
            key
        }
        Action::Receive(message) => {
            let turn = manager.turn(&message.inbound()).await.unwrap();
            let key = turn.key().clone();
            report.action = match turn.action() {
                TurnAction::Answer => "answer",
                TurnAction::StaySilent => "stay_silent",
                TurnAction::Acknowledge(_) => "acknowledge",
                other => panic!("an action this test does not know: {other:?}"),
            }
            .into();
            if let Some(resolution) = turn.resolution() {
                report.reason = Some(resolution.reason.as_str().into());
                report.aborted_last_run = Some(resolution.aborted_last_run);
            }
            report.seen = turn
                .messages()
                .await
                .unwrap()
                .into_iter()
                .map(|m| (format!("{:?}", m.role).to_lowercase(), m.content))
                .collect();
            if let Some(hold) = step.hold_ms {
                say(&Said::Holding { index: step.index });
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            let reply = stand_in_model(&report.seen);
            report.sent = turn
                .complete(reply)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|p| p.text)
                .collect();
            key
        }
    };
    report.key = key.to_string();
    report.session_id = manager
        .store()
        .get(&key)
        .await
        .unwrap()
        .map(|stored| stored.entry.session_id);
    report
}

fn say(said: &Said) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{LINE_MARK}{}", serde_json::to_string(said).unwrap()).unwrap();
    out.flush().unwrap();
}

#[test]
#[ignore = "a worker process of the many-workers tests"]
fn worker_process() {
    let Ok(url) = std::env::var(URL_VAR) else {
        panic!("run by the many-workers tests, not directly");
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let clock = ManualClock::at_millis(DAY_START_MS);
        let manager = worker_manager(&url, &clock).await;
        // Reading stdin blocks this thread; the runtime's worker thread keeps the
        // store's connections alive meanwhile.
        for line in std::io::stdin().lines() {
            let step: Step = serde_json::from_str(&line.unwrap()).unwrap();
            let report = run_step(&manager, &clock, step).await;
            say(&Said::Done(report));
        }
    });
}

/// A running worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(url: &str) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "worker_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(URL_VAR, url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Worker {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, step: &Step) {
        writeln!(self.stdin, "{}", serde_json::to_string(step).unwrap()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// The worker's next protocol line.
    fn hear(&mut self) -> Said {
        loop {
            let mut line = String::new();
            let read = self.stdout.read_line(&mut line).unwrap();
            assert!(read > 0, "the worker exited: {:?}", self.child.try_wait());
            // The harness's own `test worker_process ... ` may begin the line.
            if let Some((_, json)) = line.trim_end().split_once(LINE_MARK) {
                return serde_json::from_str(json).unwrap();
            }
        }
    }

    /// Runs `step` to its end.
    fn run(&mut self, step: &Step) -> Report {
        self.send(step);
        match self.hear() {
            Said::Done(report) => report,
            other => panic!("expected the step's report, got {other:?}"),
        }
    }

    /// SIGKILL, and waits for the process to be gone.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(self) {
        let Worker {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success(), "the worker failed: {status}");
    }
}

// ---------------------------------------------------------------------------------
// The parent: runs, subscriber, comparison
// ---------------------------------------------------------------------------------

/// Which worker runs which step.
enum Dealing {
    /// One worker runs everything.
    One,
    /// Four workers: round-robin for the first half, a pseudo-random choice (from the
    /// fixed start `dice`) for the second, and one worker SIGKILLed and replaced before
    /// `KILL_BEFORE_STEP`.
    Four { dice: u64 },
}

/// A small deterministic pseudo-random sequence (xorshift64).
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % sides as u64) as usize
    }
}

/// Everything one run left behind, with session ids replaced by the ordinal of their
/// first appearance in the run's reports.
#[derive(Debug)]
struct Outcome {
    reports: Vec<Report>,
    /// Every session (current, inactive, closed) as its stored JSON.
    sessions: Vec<String>,
    /// Every transcript, live or archived, by name, as (role, text).
    transcripts: BTreeMap<String, Vec<(String, String)>>,
    /// What the subscriber heard, per transcript, as (role, text).
    heard: BTreeMap<String, Vec<(String, String)>>,
    /// Which worker ran each step (not compared).
    dealt: Vec<usize>,
}

fn role_and_text(entry: &agent_sessions::transcript::TranscriptEntry) -> (String, String) {
    match &entry.message {
        Some(message) => (message.role.as_str().to_owned(), message.text()),
        None => (entry.kind.clone(), String::new()),
    }
}

/// Replaces session ids by `s<n>`, numbered in order of first appearance in `reports`.
struct Ordinals(Vec<String>);

impl Ordinals {
    fn of(reports: &[Report]) -> Ordinals {
        let mut ids = Vec::new();
        for id in reports.iter().filter_map(|r| r.session_id.clone()) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ordinals(ids)
    }

    fn name(&self, id: &str) -> String {
        match self.0.iter().position(|known| known == id) {
            Some(n) => format!("s{n}"),
            None => panic!("session {id} never appeared in a report"),
        }
    }

    fn replace_in(&self, text: &str) -> String {
        self.0
            .iter()
            .enumerate()
            .fold(text.to_owned(), |text, (n, id)| {
                text.replace(id, &format!("s{n}"))
            })
    }
}

/// How many user and assistant lines the updates in `heard` carry.
fn messages_in(heard: &Mutex<Vec<TranscriptUpdate>>) -> usize {
    heard
        .lock()
        .unwrap()
        .iter()
        .flat_map(|update| &update.events)
        .filter(|event| {
            let (role, _) = role_and_text(&event.entry);
            role == "user" || role == "assistant"
        })
        .count()
}

/// How many user and assistant lines step `report` logged.
fn messages_logged(report: &Report) -> usize {
    match report.action.as_str() {
        "answer" => 1 + usize::from(!report.sent.is_empty()),
        "acknowledge" => 1,
        _ => 0,
    }
}

/// Waits until the subscriber has heard `expected` user and assistant lines, or 20 s
/// (a loaded machine reads slowly); what it missed, the comparison with the
/// transcripts then names line by line.
fn until_heard(heard: &Mutex<Vec<TranscriptUpdate>>, expected: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while messages_in(heard) < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `steps` on the fresh store `url` as `dealing` says, with a subscriber on its
/// own handle listening throughout, and collects the outcome.
fn run(url: &str, steps: &[Step], dealing: Dealing) -> Outcome {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime.block_on(Backend::open(url)).unwrap();
    let heard = Arc::new(Mutex::new(Vec::new()));
    // Subscribed on the runtime, which reads other processes' appends for it.
    let mut feed = runtime.block_on(async { backend.transcripts().subscribe() });
    let listener = {
        let heard = heard.clone();
        runtime.spawn(async move {
            loop {
                match feed.recv().await {
                    Ok(update) => heard.lock().unwrap().push(update),
                    Err(error) => panic!("the subscriber missed updates: {error:?}"),
                }
            }
        })
    };
    // The reader of other processes' appends starts with the first subscription, from
    // the feed's end as it reads it then: give it time to have read it, also on a
    // loaded machine (300 ms was once not enough in CI, and the first line was missed).
    std::thread::sleep(Duration::from_secs(2));

    let mut reports = Vec::new();
    let mut dealt = Vec::new();
    match dealing {
        Dealing::One => {
            let mut worker = Worker::start(url);
            for step in steps {
                reports.push(worker.run(step));
                dealt.push(0);
            }
            worker.finish();
        }
        Dealing::Four { dice } => {
            let mut workers: Vec<_> = (0..WORKERS).map(|_| Worker::start(url)).collect();
            let mut dice = Dice(dice);
            for step in steps {
                if step.index == KILL_BEFORE_STEP {
                    let killed = std::mem::replace(&mut workers[1], Worker::start(url));
                    killed.kill();
                }
                let n = if step.index < STEPS / 2 {
                    step.index % WORKERS
                } else {
                    dice.roll(WORKERS)
                };
                reports.push(workers[n].run(step));
                dealt.push(n);
            }
            for worker in workers {
                worker.finish();
            }
        }
    }

    let ordinals = Ordinals::of(&reports);
    until_heard(&heard, reports.iter().map(messages_logged).sum());
    // A little longer, to hear anything heard twice.
    std::thread::sleep(Duration::from_millis(500));
    listener.abort();
    let mut by_transcript: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for update in heard.lock().unwrap().iter() {
        let seen = by_transcript
            .entry(ordinals.name(&update.transcript.session_id))
            .or_default();
        seen.extend(update.events.iter().map(|e| role_and_text(&e.entry)));
    }

    let (sessions, transcripts) = runtime.block_on(async {
        let listed = backend
            .sessions()
            .list(&ListFilter::new().any_status())
            .await
            .unwrap();
        let mut sessions: Vec<String> = listed
            .iter()
            .map(|stored| {
                let json = serde_json::to_string(&stored.entry).unwrap();
                format!("{} {}", stored.key, ordinals.replace_in(&json))
            })
            .collect();
        // Listed most recently updated first, then by key, then by session id: the
        // random ids order sessions updated at the same time, so sort by the text.
        sessions.sort();
        // Every transcript, the archived ones of replaced sessions too.
        let mut transcripts = BTreeMap::new();
        let store = backend.transcripts();
        for (agent, name) in store.transcript_names(None).await.unwrap() {
            let lines = store.export_lines(&agent, &name).await.unwrap().unwrap();
            let entries = lines
                .iter()
                .map(|line| role_and_text(&serde_json::from_str(line).unwrap()))
                .collect();
            transcripts.insert(ordinals.replace_in(&name), entries);
        }
        (sessions, transcripts)
    });

    let reports = reports
        .into_iter()
        .map(|mut report| {
            report.session_id = report.session_id.map(|id| ordinals.name(&id));
            report
        })
        .collect();
    Outcome {
        reports,
        sessions,
        transcripts,
        heard: by_transcript,
        dealt,
    }
}

/// The texts the model saw as this turn's input (the last message), per step.
fn inputs(outcome: &Outcome) -> BTreeMap<usize, &str> {
    outcome
        .reports
        .iter()
        .filter_map(|r| Some((r.index, r.seen.last()?.1.as_str())))
        .collect()
}

/// The day really had what the equivalence is claimed over: group chatter reaching a
/// mention, a reminder seen once, resets and an idle expiry starting new sessions, and
/// a subscriber hearing every line of every transcript.
fn assert_the_day_happened(outcome: &Outcome) {
    let reports = &outcome.reports;
    let inputs = inputs(outcome);
    // Chatter stays silent and reaches the next mention's input.
    assert_eq!(reports[1].action, "stay_silent");
    assert!(reports[1].seen.is_empty());
    assert_eq!(reports[4].action, "answer");
    assert!(
        inputs[&4].contains("dana chats at step 1."),
        "{}",
        inputs[&4]
    );
    assert!(
        inputs[&4].contains("eve chats at step 3."),
        "{}",
        inputs[&4]
    );
    assert!(
        inputs[&14].contains("dana chats at step 11."),
        "{}",
        inputs[&14]
    );
    assert!(
        !inputs[&14].contains("dana chats at step 1."),
        "chatter reaches one turn"
    );
    // The reminder queued at step 6 reaches Alice's next Telegram message, once.
    let reminded: Vec<usize> = inputs
        .iter()
        .filter(|(_, input)| input.contains("Reminder 6:"))
        .map(|(index, _)| *index)
        .collect();
    assert_eq!(reminded, [9]);
    // Steps 10 onward see the step-9 turn as history, not as new input.
    assert!(reports[10]
        .seen
        .iter()
        .any(|(_, t)| t.contains("Reminder 6:")));
    // Bob's bare `/new` is acknowledged in a new session.
    assert_eq!(reports[33].action, "acknowledge");
    assert_eq!(reports[33].reason.as_deref(), Some("explicit_reset"));
    assert_ne!(reports[32].session_id, reports[33].session_id);
    assert_eq!(reports[33].sent, ["New session started."]);
    // Alice's `/new` with a question is answered in a new session that starts there.
    assert_eq!(reports[52].reason.as_deref(), Some("explicit_reset"));
    assert_eq!(reports[52].seen.len(), 1, "{:?}", reports[52].seen);
    // Carol's return after the idle window starts a new session; nobody else idled out.
    let timeouts: Vec<usize> = reports
        .iter()
        .filter(|r| r.reason.as_deref() == Some("timeout"))
        .map(|r| r.index)
        .collect();
    assert_eq!(timeouts, [65]);
    assert_ne!(reports[15].session_id, reports[65].session_id);
    // The replaced sessions are listed as closed.
    let closed = outcome
        .sessions
        .iter()
        .filter(|s| s.contains("\"status\":\"closed\""))
        .count();
    assert_eq!(closed, 3, "{:#?}", outcome.sessions);
    // Every answered turn was replied to by the stand-in model.
    assert!(reports
        .iter()
        .filter(|r| r.action == "answer")
        .all(|r| r.sent.len() == 1 && r.sent[0].starts_with("reply to «")));
    // The subscriber heard every line of every transcript, once, in order.
    let logged: BTreeMap<_, _> = outcome
        .transcripts
        .iter()
        .map(|(name, lines)| {
            let messages: Vec<_> = lines
                .iter()
                .filter(|(role, _)| role == "user" || role == "assistant")
                .cloned()
                .collect();
            // `s3.jsonl`, or `s3.jsonl.reset.<time>` once replaced.
            let session = name.split(".jsonl").next().unwrap();
            (session.to_owned(), messages)
        })
        .collect();
    let heard: BTreeMap<_, _> = outcome
        .heard
        .iter()
        .map(|(id, lines)| {
            let messages: Vec<_> = lines
                .iter()
                .filter(|(role, _)| role == "user" || role == "assistant")
                .cloned()
                .collect();
            (id.clone(), messages)
        })
        .collect();
    assert_eq!(heard, logged);
    let lines: usize = logged.values().map(Vec::len).sum();
    assert_eq!(lines, reports.iter().map(messages_logged).sum::<usize>());
    assert!(lines > 90, "{lines} lines");
}

/// Runs the day once on one worker and once on four, each on a fresh store from
/// `fresh_store`, and checks the two outcomes are the same.
fn one_worker_and_four_agree(mut fresh_store: impl FnMut() -> String) {
    let steps = script();
    let started = Instant::now();
    let one = run(&fresh_store(), &steps, Dealing::One);
    let one_took = started.elapsed();
    assert_the_day_happened(&one);
    let started = Instant::now();
    let four = run(&fresh_store(), &steps, Dealing::Four { dice: 0x2026_0310 });
    let four_took = started.elapsed();
    eprintln!("one worker: {one_took:?}; four workers: {four_took:?}");
    // The dealing really spread the day, after the replacement too.
    for n in 0..WORKERS {
        assert!(
            four.dealt[KILL_BEFORE_STEP..].contains(&n),
            "{:?}",
            four.dealt
        );
    }
    assert_eq!(one.reports, four.reports);
    assert_eq!(one.transcripts, four.transcripts);
    assert_eq!(one.sessions, four.sessions);
    assert_eq!(one.heard, four.heard);
}

#[cfg(feature = "sqlite")]
#[test]
fn one_sqlite_worker_and_four_see_the_same_day() {
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut next = dirs.iter();
    one_worker_and_four_agree(|| {
        let dir = next.next().unwrap();
        format!("sqlite:{}", dir.path().join("sessions.db").display())
    });
}

#[cfg(feature = "postgres")]
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn one_postgres_worker_and_four_see_the_same_day() {
    let schemas = vec![
        common::TestSchema::new("workers"),
        common::TestSchema::new("workers"),
    ];
    let mut next = schemas.iter();
    one_worker_and_four_agree(|| next.next().unwrap().url());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for schema in schemas {
        runtime.block_on(schema.drop());
    }
}

// ---------------------------------------------------------------------------------
// A worker killed mid-turn
// ---------------------------------------------------------------------------------

fn step_at(index: usize, minute: u64, action: Action) -> Step {
    Step {
        index,
        at_ms: DAY_START_MS + minute * 60_000,
        action,
        hold_ms: None,
    }
}

/// How many times `needle` occurs in everything `report`'s model saw.
fn times_seen(report: &Report, needle: &str) -> usize {
    report
        .seen
        .iter()
        .map(|(_, text)| text.matches(needle).count())
        .sum()
}

/// A worker SIGKILLed after reading the conversation and before completing its turn:
/// the next worker's turn on that session goes through at once (no lock is left), and
/// sees the killed turn's input once, as history, unanswered. The chatter and the
/// system events the killed turn drained are in that input and nowhere else: drained
/// events are gone with the turn that took them, never delivered twice.
fn a_worker_killed_mid_turn_leaves_nothing_half_done(url: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = runtime.block_on(Backend::open(url)).unwrap();
    let mut doomed = Worker::start(url);
    let mut survivor = Worker::start(url);
    doomed.run(&step_at(
        0,
        0,
        Action::Receive(chatter("dana", "lunch at noon")),
    ));
    survivor.run(&step_at(
        1,
        1,
        Action::Receive(chatter("eve", "I'll be late")),
    ));
    for (index, text) in [
        (2, "Reminder: stand-up moved."),
        (3, "Reminder: lunch booked."),
    ] {
        let enqueue = Action::Enqueue {
            to: mention("bob", ""),
            text: text.into(),
        };
        doomed.run(&step_at(index, index as u64, enqueue));
    }
    let mut held = step_at(
        4,
        4,
        Action::Receive(mention("bob", "@bot where is lunch?")),
    );
    held.hold_ms = Some(60_000);
    doomed.send(&held);
    assert_eq!(doomed.hear(), Said::Holding { index: 4 });
    doomed.kill();

    let started = Instant::now();
    let next = survivor.run(&step_at(
        5,
        5,
        Action::Receive(mention("eve", "@bot are you there?")),
    ));
    let took = started.elapsed();
    survivor.finish();
    eprintln!("the turn after the killed one took {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");

    assert_eq!(next.action, "answer");
    assert_eq!(
        next.aborted_last_run,
        Some(true),
        "the killed run is reported"
    );
    let roles: Vec<&str> = next.seen.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "user"],
        "the killed turn is unanswered history"
    );
    let killed_input = &next.seen[0].1;
    assert!(killed_input.contains("where is lunch?"), "{killed_input}");
    for once in [
        "lunch at noon",
        "I'll be late",
        "Reminder: stand-up moved.",
        "Reminder: lunch booked.",
    ] {
        assert!(killed_input.contains(once), "{once} in {killed_input}");
        assert_eq!(times_seen(&next, once), 1, "{once}: {:#?}", next.seen);
    }
    assert!(next.seen[1].1.contains("are you there?"));

    let (transcript, status) = runtime.block_on(async {
        let key = SessionKey::parse(&next.key).unwrap();
        let stored = backend.sessions().get(&key).await.unwrap().unwrap();
        let read = backend
            .transcripts()
            .read(
                &TranscriptRef::of(&key, &stored.entry, &AgentId::main()),
                Offset::START,
            )
            .await
            .unwrap();
        let lines: Vec<_> = read
            .events
            .iter()
            .map(|e| role_and_text(&e.entry))
            .filter(|(role, _)| role == "user" || role == "assistant")
            .map(|(role, _)| role)
            .collect();
        (lines, stored.entry.status)
    });
    assert_eq!(transcript, ["user", "user", "assistant"]);
    assert_eq!(status, Some(SessionStatus::Idle));
}

#[cfg(feature = "sqlite")]
#[test]
fn a_sqlite_worker_killed_mid_turn_leaves_nothing_half_done() {
    let dir = tempfile::tempdir().unwrap();
    a_worker_killed_mid_turn_leaves_nothing_half_done(&format!(
        "sqlite:{}",
        dir.path().join("sessions.db").display()
    ));
}

#[cfg(feature = "postgres")]
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn a_postgres_worker_killed_mid_turn_leaves_nothing_half_done() {
    let schema = common::TestSchema::new("workers");
    a_worker_killed_mid_turn_leaves_nothing_half_done(&schema.url());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(schema.drop());
}
