//! One call per turn: `SessionManager::turn`, `Turn::messages` and `Turn::complete`.

mod common;

use agent_sessions::freshness::ManualClock;
use agent_sessions::manager::DEFAULT_RESET_ACKNOWLEDGEMENT;
use agent_sessions::memory::MemoryOptions;
use agent_sessions::prelude::*;
use agent_sessions::reply::SendPolicyConfig;
use agent_sessions::store::SendPolicy;
use agent_sessions::transcript::InMemoryTranscriptStore;
use agent_sessions::SessionStatus;

#[path = "common/separate_calls.rs"]
mod separate_calls;

use separate_calls::separate_calls;

const START_MS: u64 = 1_773_136_800_000; // 2026-03-10 10:00 UTC

fn manager() -> SessionManager {
    SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .clock(ManualClock::at_millis(START_MS))
        .build()
        .unwrap()
}

fn dm(text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text)
}

fn in_group(sender: &str, text: &str) -> InboundMessage {
    InboundMessage::group("telegram", "-100", sender, text).with_sender_name(sender)
}

/// What one step of a conversation did: the action, what the model saw last, and what
/// was sent.
#[derive(Debug, PartialEq)]
struct Step {
    action: TurnAction,
    input: Option<String>,
    sent: Vec<String>,
}

/// Runs `script` through `manager`: every turn that asks for the model gets `reply`.
async fn run(manager: &SessionManager, script: &[(InboundMessage, &str)]) -> Vec<Step> {
    let mut steps = Vec::new();
    for (message, reply) in script {
        let turn = manager.turn(message).await.unwrap();
        let action = turn.action().clone();
        let input = turn.input().map(str::to_owned);
        if turn.needs_model() {
            let messages = turn.messages().await.unwrap();
            assert_eq!(
                messages.last().map(|m| m.content.as_str()),
                input.as_deref()
            );
        } else {
            assert!(turn.messages().await.unwrap().is_empty());
        }
        let sent = turn
            .complete(*reply)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|p| p.text)
            .collect();
        steps.push(Step {
            action,
            input,
            sent,
        });
    }
    steps
}

fn answer(input: &str, sent: &[&str]) -> Step {
    Step {
        action: TurnAction::Answer,
        input: Some(input.to_owned()),
        sent: sent.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test]
async fn every_turn_outcome() {
    let ack = || Step {
        action: TurnAction::Acknowledge(DEFAULT_RESET_ACKNOWLEDGEMENT.to_owned()),
        input: None,
        sent: vec![DEFAULT_RESET_ACKNOWLEDGEMENT.to_owned()],
    };
    let silent = || Step {
        action: TurnAction::StaySilent,
        input: None,
        sent: vec![],
    };
    // (what happens, the script, what each step does)
    type Script = Vec<(InboundMessage, &'static str)>;
    let cases: Vec<(&str, Script, Vec<Step>)> = vec![
        (
            "a direct message is answered",
            vec![(dm("When is my shift?"), "Thursday.")],
            vec![answer("When is my shift?", &["Thursday."])],
        ),
        (
            "a bare reset is acknowledged without the model, whatever the host passes",
            vec![(dm("/new"), "ignored")],
            vec![ack()],
        ),
        (
            "a reset with a message answers the message, trigger removed",
            vec![(dm("/new plan a trip"), "Where to?")],
            vec![answer("plan a trip", &["Where to?"])],
        ),
        (
            "a silent reply sends nothing",
            vec![(dm("ok thanks"), "NO_REPLY")],
            vec![answer("ok thanks", &[])],
        ),
        (
            "group chatter stays silent and reaches the model once, with the next mention",
            vec![
                (in_group("Ann", "lunch at noon?"), "never asked"),
                (
                    in_group("Bob", "@bot book it").mentioning_agent(),
                    "Booked.",
                ),
                (
                    in_group("Ann", "@bot thanks").mentioning_agent(),
                    "NO_REPLY",
                ),
            ],
            vec![
                silent(),
                answer(
                    "[Chat messages since your last reply - for context]\n\
                     [Telegram -100 2026-03-10T10:00Z] Ann: lunch at noon?\n\n\
                     [Current message - respond to this]\n\
                     [Telegram -100 2026-03-10T10:00Z] Bob: @bot book it",
                    &["Booked."],
                ),
                answer("[Telegram -100 2026-03-10T10:00Z] Ann: @bot thanks", &[]),
            ],
        ),
    ];
    for (name, script, expected) in cases {
        let manager = manager();
        let steps = run(&manager, &script).await;
        assert_eq!(steps, expected, "{name}");
    }
}

#[tokio::test]
async fn the_model_sees_the_conversation_as_it_was_sent_across_turns_and_a_reset() {
    let manager = manager();
    run(
        &manager,
        &[
            (dm("When is my shift?"), "Thursday at 9."),
            (dm("ok NO_REPLY"), "NO_REPLY"),
            (dm("Can I swap it?"), "Yes, for Friday."),
        ],
    )
    .await;
    let turn = manager.turn(&dm("Thanks!")).await.unwrap();
    let seen: Vec<(ChatRole, String)> = turn
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.role, m.content))
        .collect();
    let expected = [
        (ChatRole::User, "When is my shift?"),
        (ChatRole::Assistant, "Thursday at 9."),
        (ChatRole::User, "ok NO_REPLY"),
        (ChatRole::User, "Can I swap it?"),
        (ChatRole::Assistant, "Yes, for Friday."),
        (ChatRole::User, "Thanks!"),
    ]
    .map(|(role, text)| (role, text.to_owned()));
    assert_eq!(seen, expected);
    turn.complete("You're welcome.").await.unwrap();

    // After a reset the model starts over: only the new message.
    let turn = manager.turn(&dm("/reset what's new?")).await.unwrap();
    let seen = turn.messages().await.unwrap();
    assert_eq!(seen, vec![ChatMessage::user("what's new?")]);
    // The manager's own view of any session ends with its last logged message.
    turn.complete("Not much.").await.unwrap();
    let key = manager.key_for(&dm("x")).unwrap();
    let all = manager.session(&key).messages().await.unwrap();
    assert_eq!(
        all,
        vec![
            ChatMessage::user("what's new?"),
            ChatMessage::assistant("Not much.")
        ]
    );
}

#[tokio::test]
async fn a_completed_turn_records_usage_count_and_the_end_of_the_run_in_the_session() {
    let manager = manager();
    let turn = manager.turn(&dm("When is my shift?")).await.unwrap();
    let key = turn.key().clone();
    let running = manager.store().get(&key).await.unwrap().unwrap().entry;
    assert_eq!(running.status, Some(SessionStatus::Running));
    assert_eq!(running.aborted_last_run, Some(true));
    turn.complete(
        TurnReply::from("Thursday.").with_usage(
            TurnUsage::new()
                .input(1_200)
                .output(40)
                .by("openai", "gpt-5"),
        ),
    )
    .await
    .unwrap();
    let entry = manager.store().get(&key).await.unwrap().unwrap().entry;
    assert_eq!(entry.status, Some(SessionStatus::Idle));
    assert_eq!(entry.aborted_last_run, Some(false));
    assert_eq!(entry.turn_count, Some(1));
    assert_eq!(entry.input_tokens, Some(1_200));
    assert_eq!(entry.model.as_deref(), Some("gpt-5"));
    // Nothing was cut from the model's input: no summary is written (a summarizer runs
    // only for what a cut leaves out, after the reply).
    assert_eq!(entry.context_summary, None);
}

#[tokio::test]
async fn a_turn_dropped_without_completing_is_an_aborted_run() {
    let manager = manager();
    {
        let _abandoned = manager.turn(&dm("When is my shift?")).await.unwrap();
        // The host times out and drops the turn.
    }
    let next = manager.turn(&dm("hello?")).await.unwrap();
    assert!(next.resolution().unwrap().aborted_last_run);
    // The dropped turn's message is still part of the conversation.
    let seen: Vec<String> = next
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(seen, ["When is my shift?", "hello?"]);
    next.complete("Thursday.").await.unwrap();
    let key = manager.key_for(&dm("x")).unwrap();
    let entry = manager.store().get(&key).await.unwrap().unwrap().entry;
    assert_eq!(entry.aborted_last_run, Some(false));
    assert_eq!(entry.status, Some(SessionStatus::Idle));
}

#[tokio::test]
async fn the_memory_flush_follows_the_configured_context_window() {
    // (context window, prompt tokens of the first turn, whether the second turn flushes)
    // The flush fires at window − 20,000 reserved − 4,000 (OpenClaw's rule).
    let cases = [
        (40_000, 15_999, false),
        (40_000, 16_000, true),
        (200_000, 16_000, false),
        (200_000, 176_000, true),
    ];
    for (window, prompt, flushes) in cases {
        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(InMemoryTranscriptStore::new())
            .context_window(window)
            .build()
            .unwrap();
        let first = manager.turn(&dm("hi")).await.unwrap();
        first
            .complete(TurnReply::from("hello").with_usage(TurnUsage::new().input(prompt)))
            .await
            .unwrap();
        let mut second = manager.turn(&dm("more")).await.unwrap();
        assert_eq!(
            second.memory_flush().is_some(),
            flushes,
            "window {window}, prompt {prompt}"
        );
        if flushes {
            second.complete_memory_flush().await.unwrap();
            assert!(second.memory_flush().is_none());
            second.complete("ok").await.unwrap();
            let third = manager.turn(&dm("again")).await.unwrap();
            assert!(third.memory_flush().is_none(), "once per compaction cycle");
        }
    }
}

#[tokio::test]
async fn a_session_that_may_not_send_gets_nothing_to_send_but_keeps_the_turn() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .send_policy(SendPolicyConfig {
            default: Some(SendPolicy::Deny),
            rules: vec![],
            ..SendPolicyConfig::default()
        })
        .build()
        .unwrap();
    let turn = manager.turn(&dm("hi")).await.unwrap();
    let key = turn.key().clone();
    assert!(turn.complete("hello").await.unwrap().is_empty());
    let entry = manager.store().get(&key).await.unwrap().unwrap().entry;
    assert_eq!(entry.turn_count, Some(1));
}

#[tokio::test]
async fn the_token_budget_keeps_the_newest_turns_and_the_summary_of_what_was_cut() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(120)
        .build()
        .unwrap();
    for i in 0..12 {
        let turn = manager
            .turn(&dm(&format!("question number {i} about the roster")))
            .await
            .unwrap();
        // The model's input: once the conversation outgrows the budget it is cut, and
        // what was cut is summarised after the reply.
        turn.messages().await.unwrap();
        turn.complete(format!("answer number {i}")).await.unwrap();
    }
    let turn = manager.turn(&dm("and now?")).await.unwrap();
    let messages = turn.messages().await.unwrap();
    let counter = agent_sessions::inbound::EstimatedTokens;
    let total: usize = messages
        .iter()
        .map(|m| agent_sessions::inbound::message_tokens(m, &counter))
        .sum();
    assert!(total <= 120, "{total}");
    assert_eq!(messages[0].role, ChatRole::System);
    assert!(messages[0]
        .content
        .starts_with("Summary of the conversation so far:"));
    assert_eq!(messages[1].role, ChatRole::User);
    assert_eq!(messages.last().unwrap().content, "and now?");
    assert!(messages.iter().any(|m| m.content == "answer number 11"));
    assert!(!messages
        .iter()
        .any(|m| m.content == "question number 0 about the roster"));
}

/// A store that counts the calls that reach it.
#[derive(Debug, Default)]
struct CountingStore {
    inner: InMemoryStore,
    reads: std::sync::atomic::AtomicUsize,
    writes: std::sync::atomic::AtomicUsize,
}

impl CountingStore {
    fn take(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.reads.swap(0, SeqCst), self.writes.swap(0, SeqCst))
    }
}

#[async_trait::async_trait]
impl SessionStore for CountingStore {
    async fn get(&self, key: &SessionKey) -> agent_sessions::Result<Option<StoredSession>> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.get(key).await
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut agent_sessions::store::Mutator<'_>,
    ) -> agent_sessions::Result<Option<StoredSession>> {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.apply(key, mutator).await
    }

    async fn list(&self, filter: &ListFilter) -> agent_sessions::Result<Vec<StoredSession>> {
        self.inner.list(filter).await
    }

    async fn count(&self, filter: &ListFilter) -> agent_sessions::Result<usize> {
        self.inner.count(filter).await
    }
}

#[tokio::test]
async fn a_turn_costs_fewer_store_round_trips_than_the_separate_calls() {
    use std::sync::Arc;

    async fn one_turn(manager: &SessionManager, text: &str) {
        let turn = manager.turn(&dm(text)).await.unwrap();
        turn.complete("ok").await.unwrap();
    }

    // (reads, writes) of the first message of a session and of a continuing one.
    let mut costs = Vec::new();
    for turn_path in [false, true] {
        let store = Arc::new(CountingStore::default());
        let manager = SessionManager::builder(store.clone())
            .transcripts(InMemoryTranscriptStore::new())
            .build()
            .unwrap();
        for text in ["first", "second"] {
            if turn_path {
                one_turn(&manager, text).await;
            } else {
                separate_calls(&manager, &dm(text), "ok").await;
            }
            costs.push(store.take());
        }
    }
    assert_eq!(
        costs,
        [
            // The separate calls: first message, continuing message.
            (4, 2),
            (4, 2),
            // One turn, which also records the run as started in its first write, and
            // builds the context summary on the session as the turn began: no read.
            (0, 2),
            (0, 2),
        ]
    );
}

#[tokio::test]
async fn a_group_message_is_routed_in_the_same_store_update_that_resolves_it() {
    use std::sync::Arc;

    let store = Arc::new(CountingStore::default());
    let manager = SessionManager::builder(store.clone())
        .transcripts(InMemoryTranscriptStore::new())
        .build()
        .unwrap();
    // (reads, writes) of chatter, of a mention, and of chatter again.
    let mut costs = Vec::new();
    let chatter = manager
        .turn(&in_group("Ann", "lunch at noon?"))
        .await
        .unwrap();
    assert_eq!(chatter.action(), &TurnAction::StaySilent);
    costs.push(store.take());
    let mention = manager
        .turn(&in_group("Bob", "@bot book it").mentioning_agent())
        .await
        .unwrap();
    assert_eq!(mention.action(), &TurnAction::Answer);
    mention.complete("Booked.").await.unwrap();
    costs.push(store.take());
    let chatter = manager.turn(&in_group("Ann", "thanks")).await.unwrap();
    assert_eq!(chatter.action(), &TurnAction::StaySilent);
    costs.push(store.take());
    assert_eq!(
        costs,
        [
            // Chatter: the group's activation is read and the chatter recorded in one
            // update, with no read before it.
            (0, 1),
            // A mention costs what a direct message costs.
            (0, 2),
            (0, 1),
        ]
    );
}

#[tokio::test]
async fn a_route_update_with_its_message_is_one_store_write() {
    use agent_sessions::DeliveryContext;
    use std::sync::Arc;

    let store = Arc::new(CountingStore::default());
    let manager = SessionManager::builder(store.clone()).build().unwrap();
    let message = in_group("Ann", "lunch at noon?").with_group_subject("Lunch crew");
    let key = manager.key_for(&message).unwrap();
    let route = DeliveryContext::to("telegram", "-100").with_thread("t-1");
    let stored = manager
        .session(&key)
        .update_last_route_from(&route, &message)
        .await
        .unwrap();
    assert_eq!(store.take(), (0, 1), "one write, no read");
    let entry = &stored.entry;
    assert_eq!(
        (entry.last_to.as_deref(), entry.subject.as_deref()),
        (Some("-100"), Some("Lunch crew")),
        "the route and the message's metadata together"
    );
    assert_eq!(
        entry.origin.as_ref().unwrap().provider.as_deref(),
        Some("telegram")
    );
    assert_eq!(
        entry.message_count,
        Some(0),
        "a route update is not a message"
    );
}

/// A group conversation through the store `url`: chatter, a restart, then a mention
/// that sees the chatter once.
async fn a_restart_keeps_group_history(url: &str) {
    {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let turn = manager
            .turn(&in_group("Ann", "lunch at noon?"))
            .await
            .unwrap();
        assert_eq!(turn.action(), &TurnAction::StaySilent, "{url}");
    }
    // The bot restarts.
    let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
    let turn = manager
        .turn(&in_group("Bob", "@bot book it").mentioning_agent())
        .await
        .unwrap();
    let input = turn.input().unwrap().to_owned();
    assert!(input.contains("Ann: lunch at noon?"), "{url}: {input}");
    turn.complete("Booked.").await.unwrap();
    // Seen once: the next mention starts a new history.
    let next = manager
        .turn(&in_group("Bob", "@bot thanks").mentioning_agent())
        .await
        .unwrap();
    assert!(!next.input().unwrap().contains("lunch"), "{url}");
}

/// A JSON tree, and a SQLite file when built with it, in `dir`.
fn file_store_urls(dir: &tempfile::TempDir) -> Vec<String> {
    #[allow(unused_mut)]
    let mut urls = vec![format!("json:{}", dir.path().join("tree").display())];
    #[cfg(feature = "sqlite")]
    urls.push(format!(
        "sqlite:{}",
        dir.path().join("sessions.db").display()
    ));
    urls
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_group_conversation_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    for url in file_store_urls(&dir) {
        a_restart_keeps_group_history(&url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_restart_in_the_middle_of_a_group_conversation_keeps_its_history_on_postgres() {
    let schema = common::TestSchema::new("turns_restart");
    a_restart_keeps_group_history(&schema.url()).await;
    schema.drop().await;
}

/// Two workers on the store `url`: a system event queued through one reaches the next
/// turn of its session on the other, once, and no later turn on either.
async fn a_system_event_crosses_workers(url: &str) {
    let first = SessionManager::connect(url).await.unwrap().build().unwrap();
    let second = SessionManager::connect(url).await.unwrap().build().unwrap();
    let key = first.key_for(&dm("hi")).unwrap();
    assert!(
        first
            .session(&key)
            .enqueue_system_event("Model switched.")
            .await
            .unwrap(),
        "{url}"
    );
    assert!(
        !second
            .session(&key)
            .enqueue_system_event("Model switched.")
            .await
            .unwrap(),
        "{url}: a repeat is skipped whichever worker queues it"
    );
    let turn = second.turn(&dm("hi")).await.unwrap();
    let input = turn.input().unwrap().to_owned();
    assert_eq!(
        input.matches("Model switched.").count(),
        1,
        "{url}: {input}"
    );
    assert!(input.starts_with("System: ["), "{url}: {input}");
    turn.complete("Hello.").await.unwrap();
    for manager in [&first, &second] {
        let turn = manager.turn(&dm("again")).await.unwrap();
        let input = turn.input().unwrap().to_owned();
        assert!(!input.contains("Model switched."), "{url}: {input}");
        turn.complete("Yes.").await.unwrap();
    }
}

#[tokio::test]
async fn a_system_event_queued_on_one_worker_reaches_the_next_turn_on_another_once() {
    let dir = tempfile::tempdir().unwrap();
    for url in file_store_urls(&dir) {
        a_system_event_crosses_workers(&url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_system_event_queued_on_one_worker_reaches_the_next_turn_on_another_once_on_postgres() {
    let schema = common::TestSchema::new("turns_system_events");
    a_system_event_crosses_workers(&schema.url()).await;
    schema.drop().await;
}

#[tokio::test]
async fn the_conversation_needs_a_transcript_store_and_says_so() {
    let manager = SessionManager::new(InMemoryStore::new());
    let turn = manager.turn(&dm("hi")).await.unwrap();
    assert_eq!(turn.action(), &TurnAction::Answer);
    assert!(matches!(
        turn.messages().await,
        Err(agent_sessions::Error::NotConfigured { .. })
    ));
    // The rest of the turn works without one.
    assert_eq!(turn.complete("hello").await.unwrap().len(), 1);
}

#[tokio::test]
async fn what_the_model_sees_after_a_compaction_byte_for_byte() {
    use agent_sessions::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
    use std::sync::Arc;

    let transcripts = Arc::new(InMemoryTranscriptStore::new());
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(transcripts.clone())
        .clock(ManualClock::at_millis(START_MS))
        .build()
        .unwrap();
    for (question, answer) in [("q1", "a1"), ("q2", "a2"), ("q3", "a3")] {
        let turn = manager.turn(&dm(question)).await.unwrap();
        turn.complete(answer).await.unwrap();
    }
    // The engine compacts the session, keeping the conversation from q3 on.
    let key = manager.key_for(&dm("x")).unwrap();
    let entry = manager.store().get(&key).await.unwrap().unwrap().entry;
    let transcript = TranscriptRef::of(&key, &entry, &AgentId::main());
    let read = transcripts
        .read(&transcript, agent_sessions::transcript::Offset::START)
        .await
        .unwrap();
    let q3 = read
        .events
        .iter()
        .find(|e| e.entry.message.as_ref().is_some_and(|m| m.text() == "q3"))
        .and_then(|e| e.entry.id.clone())
        .unwrap();
    let compaction: TranscriptEntry = serde_json::from_value(serde_json::json!({
        "type": "compaction",
        "summary": "The user asked q1 and q2.",
        "firstKeptEntryId": q3,
        "tokensBefore": 900
    }))
    .unwrap();
    transcripts
        .append(&transcript, vec![compaction])
        .await
        .unwrap();

    let turn = manager.turn(&dm("q4")).await.unwrap();
    let seen = serde_json::to_string(&turn.messages().await.unwrap()).unwrap();
    assert_eq!(
        seen,
        r#"[{"role":"system","content":"Summary of the conversation so far:\nThe user asked q1 and q2."},{"role":"user","content":"q3"},{"role":"assistant","content":"a3"},{"role":"user","content":"q4"}]"#
    );
}

#[tokio::test]
async fn a_manager_that_needs_transcripts_is_not_built_without_them() {
    use agent_sessions::memory::{IntrospectionInput, IntrospectionOutcome, Introspector};

    struct Quiet;
    #[async_trait::async_trait]
    impl Introspector for Quiet {
        async fn introspect(
            &self,
            _: &IntrospectionInput,
        ) -> agent_sessions::Result<IntrospectionOutcome> {
            Ok(IntrospectionOutcome::default())
        }
    }
    // (introspector, transcripts, checkpoint every N turns, built)
    let cases = [
        (false, false, false, true),
        (true, true, true, true),
        (true, true, false, true),
        (false, true, false, true),
        (true, false, false, false),
        (false, true, true, false),
        (true, false, true, false),
    ];
    for (introspector, transcripts, every, built) in cases {
        let mut builder = SessionManager::builder(InMemoryStore::new());
        let mut memory = MemoryOptions::new();
        if introspector {
            memory = memory.introspector(Quiet);
        }
        if transcripts {
            builder = builder.transcripts(InMemoryTranscriptStore::new());
        }
        if every {
            memory = memory.checkpoint_every_turns(5);
        }
        let builder = builder.memory(memory);
        let result = builder.build();
        assert_eq!(
            result.is_ok(),
            built,
            "introspector {introspector}, transcripts {transcripts}, every {every}"
        );
        if !built {
            assert!(matches!(
                result,
                Err(agent_sessions::Error::NotConfigured { .. })
            ));
        }
    }
}

#[tokio::test]
async fn turns_run_in_spawned_tasks() {
    // A host spawns a task per message: the turn and its futures are `Send`.
    let manager = std::sync::Arc::new(manager());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let manager = manager.clone();
        tasks.spawn(async move {
            let message = InboundMessage::direct("telegram", format!("{i}"), "hi");
            let turn = manager.turn(&message).await.unwrap();
            let messages = turn.messages().await.unwrap();
            turn.complete(format!("{} message(s)", messages.len()))
                .await
                .unwrap()
        });
    }
    let mut sent = 0;
    while let Some(done) = tasks.join_next().await {
        sent += done.unwrap().len();
    }
    assert_eq!(sent, 4);
}

#[tokio::test]
async fn after_a_bare_reset_the_conversation_starts_with_the_user() {
    let manager = manager();
    run(&manager, &[(dm("old talk"), "old reply"), (dm("/new"), "")]).await;
    let turn = manager.turn(&dm("hello")).await.unwrap();
    assert_eq!(
        turn.messages().await.unwrap(),
        vec![ChatMessage::user("hello")]
    );
}

#[tokio::test]
async fn a_token_counter_with_wild_values_never_panics() {
    use agent_sessions::inbound::TokenCounter;

    #[derive(Debug)]
    struct Fixed(usize);
    impl TokenCounter for Fixed {
        fn count(&self, _: &str) -> usize {
            self.0
        }
    }
    // (what every text costs, the context window, whether the prompt can be built)
    let cases = [
        (usize::MAX, 1_000, false),
        (usize::MAX / 2, u64::MAX, true),
        (0, 1_000, true),
        (0, 4, true),
        (1, u64::MAX, true),
    ];
    for (cost, window, built) in cases {
        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(InMemoryTranscriptStore::new())
            .context_window(window)
            .token_counter(Fixed(cost))
            .build()
            .unwrap();
        let earlier = manager.turn(&dm("earlier")).await.unwrap();
        earlier.complete("reply").await.unwrap();
        let turn = manager.turn(&dm("now")).await.unwrap();
        let messages = turn.messages().await;
        assert_eq!(
            messages.is_ok(),
            built,
            "cost {cost}, window {window}: {messages:?}"
        );
        if let Ok(messages) = messages {
            assert_eq!(messages.last().unwrap().content, "now");
        }
    }
}

#[tokio::test]
async fn a_group_with_a_long_id_keeps_its_history_in_a_json_tree() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let group = "é".repeat(60);
    let message = |sender: &str, text: &str| {
        InboundMessage::group("whatsapp", group.clone(), sender, text).with_sender_name(sender)
    };
    let chatter = manager.turn(&message("Ann", "lunch?")).await.unwrap();
    assert_eq!(chatter.action(), &TurnAction::StaySilent);
    let asked = manager
        .turn(&message("Bob", "@bot where?").mentioning_agent())
        .await
        .unwrap();
    assert!(asked.input().unwrap().contains("Ann: lunch?"));
}

#[tokio::test]
async fn tool_calls_appended_to_the_transcript_reach_the_next_turns_messages() {
    let manager = manager();
    let turn = manager.turn(&dm("When is my shift?")).await.unwrap();
    let key = turn.key().clone();
    // The model called a tool before it answered: the host appends the call and result.
    let line = |json: serde_json::Value| -> agent_sessions::transcript::TranscriptEntry {
        serde_json::from_value(json).unwrap()
    };
    let events = manager
        .session(&key)
        .append(vec![
                line(serde_json::json!({"type": "message", "message": {"role": "assistant",
                    "content": [{"type": "toolCall", "id": "c1", "name": "shifts", "arguments": {"day": "thu"}}]}})),
                line(serde_json::json!({"type": "message", "message": {"role": "toolResult",
                    "toolCallId": "c1", "toolName": "shifts", "content": [{"type": "text", "text": "9am"}]}})),
            ],
        )
        .await
        .unwrap();
    assert_eq!(events.len(), 2);
    assert!(events[0].offset < events[1].offset);
    turn.complete("Thursday at 9.").await.unwrap();

    let next = manager.turn(&dm("Thanks!")).await.unwrap();
    let messages = next.messages().await.unwrap();
    let roles: Vec<ChatRole> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            ChatRole::User,
            ChatRole::Assistant,
            ChatRole::Tool,
            ChatRole::Assistant,
            ChatRole::User
        ]
    );
    assert_eq!(messages[1].tool_calls[0].name, "shifts");
    assert_eq!(
        messages[1].tool_calls[0].arguments,
        serde_json::json!({"day": "thu"})
    );
    assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(messages[2].content, "9am");
}
