//! A real rig agent whose OpenAI-compatible provider points at a fake completion server
//! on loopback: what the model is sent across turns, resets and a restart, with the
//! conversation kept by `SessionMemory` or by `answer`.

// The fake server the async-openai integration's tests use too.
#[path = "../../openai/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions_rig::SessionMemory;
use common::{said, FakeOpenAi, COMPLETION_TOKENS, PROMPT_TOKENS, REFUSED};
use rig_agent::{Agent, AgentBuilder};
use rig_core::id::ConversationId;
use rig_core::memory::ConversationMemory;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::PortableTool;

const SYSTEM: &str = "You are the rota assistant.";

async fn open(dir: &Path) -> Arc<SessionManager> {
    let builder = SessionManager::connect(&format!("json:{}", dir.display()))
        .await
        .unwrap();
    Arc::new(builder.build().unwrap())
}

/// An agent on the fake server; with `memory`, its conversations live in the sessions.
fn agent(server: &FakeOpenAi, memory: Option<SessionMemory>) -> Agent {
    let model = OpenAIConfig::new("test-key")
        .with_base_url(&server.base)
        .client()
        .chat("gpt-test");
    let builder = AgentBuilder::new(model).preamble(SYSTEM);
    match memory {
        Some(memory) => builder.memory(memory).build(),
        None => builder.build(),
    }
}

fn dm(text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text)
}

/// One message from Jane, as a bot on `SessionMemory` handles it: resolve the session
/// (resets, expiry), acknowledge a bare `/new`, else run the agent in the session.
async fn say(manager: &SessionManager, agent: &Agent, text: &str) -> String {
    let session = manager.resolve(&dm(text)).await.unwrap();
    if session.reset_triggered && session.body.trim().is_empty() {
        return "New session started.".into();
    }
    let response = agent
        .prompt(session.body.as_str())
        .conversation(session.key.as_str())
        .max_turns(3) // room for a tool call and the answer after it
        .await
        .unwrap();
    response.output()
}

fn archived_transcripts(dir: &Path) -> usize {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().contains(".jsonl.reset.") {
                count += 1;
            }
        }
    }
    count
}

#[tokio::test]
async fn session_memory_gives_the_agent_its_conversation_across_turns_resets_and_a_restart() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let memory = SessionMemory::new(manager.clone()).with_session_keys();
    let bot = agent(&server, Some(memory.clone()));
    let key = manager.key_for(&dm("")).unwrap();

    assert_eq!(say(&manager, &bot, "My name is Jane.").await, "reply 1");
    assert_eq!(
        server.last_messages(),
        said(&[("system", SYSTEM), ("user", "My name is Jane.")])
    );
    assert_eq!(say(&manager, &bot, "What is my name?").await, "reply 2");
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "My name is Jane."),
            ("assistant", "reply 1"),
            ("user", "What is my name?"),
        ])
    );
    // The turns are the session's: counted and in its transcript.
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(entry.turn_count, Some(2));
    let kept: Vec<String> = manager
        .session(&key)
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(
        kept,
        ["My name is Jane.", "reply 1", "What is my name?", "reply 2"]
    );

    // `/new` resets the session the memory reads: the old transcript is archived.
    assert_eq!(say(&manager, &bot, "/new").await, "New session started.");
    assert_eq!(server.count(), 2);
    assert_eq!(archived_transcripts(dir.path()), 1);
    assert_eq!(say(&manager, &bot, "Hello again.").await, "reply 3");
    assert_eq!(
        server.last_messages(),
        said(&[("system", SYSTEM), ("user", "Hello again.")])
    );

    // rig's `clear` is a reset too.
    let id = ConversationId::new(key.as_str());
    memory.clear(&id).await.unwrap();
    assert_eq!(archived_transcripts(dir.path()), 2);
    assert!(memory.load(&id).await.unwrap().is_empty());
    assert_eq!(say(&manager, &bot, "Cleared?").await, "reply 4");
    assert_eq!(
        server.last_messages(),
        said(&[("system", SYSTEM), ("user", "Cleared?")])
    );

    // And so is an operator's `manager.reset`.
    manager.session(&key).reset().await.unwrap();
    assert_eq!(say(&manager, &bot, "Fresh start.").await, "reply 5");
    assert_eq!(
        server.last_messages(),
        said(&[("system", SYSTEM), ("user", "Fresh start.")])
    );

    // A restart: a new manager, memory and agent on the same directory.
    drop((bot, memory, manager));
    let manager = open(dir.path()).await;
    let bot = agent(
        &server,
        Some(SessionMemory::new(manager.clone()).with_session_keys()),
    );
    assert_eq!(say(&manager, &bot, "Still there?").await, "reply 6");
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "Fresh start."),
            ("assistant", "reply 5"),
            ("user", "Still there?"),
        ])
    );
}

#[tokio::test]
async fn a_runs_tool_calls_and_results_are_kept_and_sent_with_the_next_turn() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let model = OpenAIConfig::new("test-key")
        .with_base_url(&server.base)
        .client()
        .chat("gpt-test");
    let bot = AgentBuilder::new(model)
        .preamble(SYSTEM)
        .memory(SessionMemory::new(manager.clone()).with_session_keys())
        .tool(CountedShifts::default())
        .build();

    // The model calls the tool, the agent runs it, the model answers: two requests.
    assert_eq!(say(&manager, &bot, "When is my shift?").await, "reply 2");
    assert_eq!(server.count(), 2);

    // The next turn carries the whole exchange, the call and its result included.
    assert_eq!(say(&manager, &bot, "Thanks!").await, "reply 3");
    let request = server.last_request();
    let messages = request["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    let called = &messages[2]["tool_calls"][0];
    assert_eq!(called["id"], "call_1");
    assert_eq!(called["function"]["name"], "shifts");
    let arguments: serde_json::Value =
        serde_json::from_str(called["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, serde_json::json!({"day": "thu"}));
    assert_eq!(messages[3]["tool_call_id"], "call_1");
    let contents: Vec<String> = server.last_messages().into_iter().map(|(_, c)| c).collect();
    assert_eq!(contents[3], "9am");
    assert_eq!(contents[4], "reply 2");

    // The session's conversation has them too, as tool calls and tool messages.
    let key = manager.key_for(&dm("")).unwrap();
    let kept = manager.session(&key).messages().await.unwrap();
    assert_eq!(kept[1].tool_calls[0].name, "shifts");
    assert_eq!(kept[2].role, ChatRole::Tool);
    assert_eq!(kept[2].tool_call_id.as_deref(), Some("call_1"));
}

#[tokio::test]
async fn answer_runs_whole_turns_across_resets_and_a_restart() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, None);
    let send = |manager: Arc<SessionManager>, bot: Agent, text: &'static str| async move {
        agent_sessions_rig::answer(&manager, &dm(text), &bot)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|payload| payload.text)
            .collect::<Vec<_>>()
    };

    assert_eq!(
        send(manager.clone(), bot.clone(), "My name is Jane.").await,
        ["reply 1"]
    );
    assert_eq!(
        send(manager.clone(), bot.clone(), "What is my name?").await,
        ["reply 2"]
    );
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "My name is Jane."),
            ("assistant", "reply 1"),
            ("user", "What is my name?"),
        ])
    );
    // The run's usage is the session's.
    let key = manager.key_for(&dm("")).unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(entry.input_tokens, Some(PROMPT_TOKENS));
    assert_eq!(entry.output_tokens, Some(COMPLETION_TOKENS));
    // …with the model and provider the response named.
    assert_eq!(entry.model.as_deref(), Some("gpt-test"));
    assert_eq!(entry.model_provider.as_deref(), Some("openai"));

    assert_eq!(
        send(manager.clone(), bot.clone(), "/new").await,
        ["New session started."]
    );
    assert_eq!(server.count(), 2);
    assert_eq!(
        send(manager.clone(), bot.clone(), "Hello again.").await,
        ["reply 3"]
    );
    assert_eq!(
        server.last_messages(),
        said(&[("system", SYSTEM), ("user", "Hello again.")])
    );

    drop(manager);
    let manager = open(dir.path()).await;
    assert_eq!(
        send(manager.clone(), bot.clone(), "Still there?").await,
        ["reply 4"]
    );
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "Hello again."),
            ("assistant", "reply 3"),
            ("user", "Still there?"),
        ])
    );

    // A run that calls a tool: the call and its result are kept between the question
    // and the answer.
    let model = OpenAIConfig::new("test-key")
        .with_base_url(&server.base)
        .client()
        .chat("gpt-test");
    let with_tool = AgentBuilder::new(model)
        .preamble(SYSTEM)
        .default_max_turns(3)
        .tool(CountedShifts::default())
        .build();
    assert_eq!(
        send(manager.clone(), with_tool.clone(), "And my shift?").await,
        ["reply 6"]
    );
    assert_eq!(
        send(manager.clone(), with_tool, "Thanks!").await,
        ["reply 7"]
    );
    let roles: Vec<String> = server.last_messages().into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ]
    );
}

/// rig's conversation ids are free-form: each is a session of its own, whatever it
/// looks like, and none reaches a path or another conversation.
#[tokio::test]
async fn any_conversation_id_is_a_session_of_its_own() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let agent = agent(&server, Some(SessionMemory::new(manager.clone())));
    for id in ["user-77", "User-77", "../../etc/passwd", "a:b:dm:c"] {
        agent
            .prompt(format!("I am {id}"))
            .conversation(id)
            .await
            .unwrap();
    }
    agent
        .prompt("who am I?")
        .conversation("user-77")
        .await
        .unwrap();
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "I am user-77"),
            ("assistant", "reply 1"),
            ("user", "who am I?"),
        ]),
        "only user-77's conversation"
    );
    let keys: Vec<String> = manager
        .list(&ListFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.key.to_string())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(keys
        .iter()
        .all(|k| k.starts_with("agent:main:rig:conversation:")));
    assert!(!dir.path().join("etc").exists());
}

/// `load` runs the lifecycle: a conversation idle past its expiry starts a new session,
/// with no `resolve` by the bot.
#[tokio::test]
async fn a_conversation_past_its_expiry_starts_a_new_session_on_load() {
    use agent_sessions::freshness::ManualClock;
    use agent_sessions::freshness::{ResetConfig, ResetSpec};

    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_millis(1_771_840_800_000);
    let manager = Arc::new(
        SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .clock(clock.clone())
            .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
            .build()
            .unwrap(),
    );
    let memory = SessionMemory::new(manager.clone()).with_session_keys();
    let id = ConversationId::from("user-77");
    let exchange = vec![
        rig_core::completion::Message::user("my PIN is 1234"),
        rig_core::completion::Message::assistant("Noted."),
    ];
    memory.append(&id, exchange).await.unwrap();
    clock.advance(std::time::Duration::from_secs(20 * 60));
    assert_eq!(memory.load(&id).await.unwrap().len(), 2, "still fresh");
    clock.advance(std::time::Duration::from_secs(31 * 60));
    assert!(memory.load(&id).await.unwrap().is_empty(), "expired");
    assert_eq!(archived_transcripts(dir.path()), 1, "the old one archived");
}

#[tokio::test]
async fn answer_drops_an_input_the_provider_refuses_so_the_session_goes_on() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, None);
    agent_sessions_rig::answer(&manager, &dm("Hi."), &bot)
        .await
        .unwrap();
    let refused =
        agent_sessions_rig::answer(&manager, &dm(&format!("{REFUSED} please")), &bot).await;
    let Err(agent_sessions_rig::Error::Agent(error)) = refused else {
        panic!("the provider refused it: {refused:?}");
    };
    assert_eq!(
        agent_sessions_rig::failure_of(&error),
        agent_sessions::exactly_once::TurnFailure::DropInput
    );
    // Not merged into the next message, not sent again.
    let sent = agent_sessions_rig::answer(&manager, &dm("Hello?"), &bot)
        .await
        .unwrap();
    assert_eq!(sent[0].text.as_deref(), Some("reply 3"));
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "Hi."),
            ("assistant", "reply 1"),
            ("user", "Hello?"),
        ])
    );
}

/// A streamed run: each piece of the model's text reaches the host as it arrives, and
/// the whole reply, with its usage, model and provider, is the turn's — logged once and
/// sent with the next request.
#[tokio::test]
async fn answer_streamed_shows_the_reply_as_it_arrives_and_logs_it_once() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, None);
    let mut pieces = Vec::new();
    let payloads =
        agent_sessions_rig::answer_streamed(&manager, &dm("Tell me a story"), &bot, |piece| {
            pieces.push(piece.to_owned())
        })
        .await
        .unwrap();
    assert_eq!(pieces.concat(), "reply 1");
    assert!(pieces.len() > 1, "in pieces: {pieces:?}");
    assert_eq!(payloads.len(), 1);
    assert_eq!(payloads[0].text.as_deref(), Some("reply 1"));
    assert_eq!(server.last_request()["stream"], true);
    let key = manager.key_for(&dm("")).unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(
        (entry.input_tokens, entry.output_tokens),
        (Some(PROMPT_TOKENS), Some(COMPLETION_TOKENS))
    );
    assert_eq!(entry.model.as_deref(), Some("gpt-test"));
    assert_eq!(entry.model_provider.as_deref(), Some("openai"));

    let next = agent_sessions_rig::answer(&manager, &dm("And then?"), &bot)
        .await
        .unwrap();
    assert_eq!(next[0].text.as_deref(), Some("reply 2"));
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", SYSTEM),
            ("user", "Tell me a story"),
            ("assistant", "reply 1"),
            ("user", "And then?"),
        ])
    );
}

/// The rota tool, slow: the person writes again while it runs.
struct SlowShifts;

impl PortableTool for SlowShifts {
    const NAME: &'static str = "shifts";
    type Args = serde_json::Value;
    type Output = String;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "The user's shifts on a day.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"day": {"type": "string"}}})
    }

    async fn call(&self, _day: serde_json::Value) -> Result<String, Self::Error> {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        Ok("9am".into())
    }
}

/// `steer`: a message that arrives while the agent's tool runs is handed to the agent
/// before its next model call — one run, one reply, and the message's own `answer`
/// sends nothing. In `interrupt` mode a newer message abandons the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_hands_a_message_sent_during_a_tool_call_to_the_running_agent() {
    use agent_sessions::lane::{QueueMode, QueueSettings};
    use std::time::Duration;

    let server = Arc::new(FakeOpenAi::start().await);
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(
        SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .queue(QueueSettings::default().mode(QueueMode::Steer))
            .build()
            .unwrap(),
    );
    let model = OpenAIConfig::new("test-key")
        .with_base_url(&server.base)
        .client()
        .chat("gpt-test");
    let bot = Arc::new(
        AgentBuilder::new(model)
            .preamble(SYSTEM)
            .tool(SlowShifts)
            .default_max_turns(3)
            .build(),
    );
    let send = |text: &'static str| {
        let (manager, bot) = (manager.clone(), bot.clone());
        tokio::spawn(async move {
            agent_sessions_rig::answer(&manager, &dm(text), &bot)
                .await
                .map(|payloads| {
                    payloads
                        .into_iter()
                        .filter_map(|p| p.text)
                        .collect::<Vec<_>>()
                })
        })
    };
    let asking = send("When is my shift?");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let adding = send("and is Friday free?");
    assert_eq!(asking.await.unwrap().unwrap(), ["reply 2"]);
    assert_eq!(adding.await.unwrap().unwrap(), Vec::<String>::new());
    assert_eq!(server.count(), 2, "one run: the call, then the answer");
    assert!(
        server
            .last_request()
            .to_string()
            .contains("and is Friday free?"),
        "the model's second call sees the message: {}",
        server.last_request()
    );

    // Interrupt: a newer message abandons the slow run; only the newer one is answered.
    let dir = tempfile::tempdir().unwrap();
    let manager = Arc::new(
        SessionManager::connect(&format!("json:{}", dir.path().display()))
            .await
            .unwrap()
            .queue(QueueSettings::default().mode(QueueMode::Interrupt))
            .build()
            .unwrap(),
    );
    let (slow_manager, slow_bot) = (manager.clone(), bot.clone());
    let slow = tokio::spawn(async move {
        agent_sessions_rig::answer(&slow_manager, &dm(common::SLOW), &slow_bot).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (newer_manager, newer_bot) = (manager.clone(), bot.clone());
    let newer = tokio::spawn(async move {
        agent_sessions_rig::answer(&newer_manager, &dm("never mind"), &newer_bot).await
    });
    let abandoned = tokio::time::timeout(Duration::from_secs(3), slow)
        .await
        .expect("the interrupted run is abandoned")
        .unwrap();
    assert!(
        matches!(
            abandoned,
            Err(agent_sessions_rig::Error::Sessions(
                agent_sessions::Error::RunLost { .. }
            ))
        ),
        "{abandoned:?}"
    );
    assert_eq!(newer.await.unwrap().unwrap().len(), 1);
}

/// The rota tool the agent calls when Jane asks about her shift, counting its calls.
#[derive(Default)]
struct CountedShifts(Arc<std::sync::atomic::AtomicUsize>);

impl PortableTool for CountedShifts {
    const NAME: &'static str = "shifts";
    type Args = serde_json::Value;
    type Output = String;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "The user's shifts on a day.".into()
    }

    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {"day": {"type": "string"}}})
    }

    async fn call(&self, _day: serde_json::Value) -> Result<String, Self::Error> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok("9am".into())
    }
}

/// An agent with the counting rota tool; `max_turns` model calls per run (rig's
/// default is 1).
fn agent_with_tool(
    server: &FakeOpenAi,
    max_turns: Option<usize>,
) -> (Agent, Arc<std::sync::atomic::AtomicUsize>) {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let model = OpenAIConfig::new("test-key")
        .with_base_url(&server.base)
        .client()
        .chat("gpt-test");
    let mut builder = AgentBuilder::new(model)
        .preamble(SYSTEM)
        .tool(CountedShifts(calls.clone()));
    if let Some(max_turns) = max_turns {
        builder = builder.default_max_turns(max_turns);
    }
    (builder.build(), calls)
}

fn roles(server: &FakeOpenAi) -> Vec<String> {
    server
        .last_messages()
        .into_iter()
        .map(|(role, _)| role)
        .collect()
}

/// rig's default turn limit (one model call) ends a run that called a tool with
/// `MaxTurns`: a failure that would repeat. Its input is dropped — not merged into the
/// next message, its tool loop not run again — and the steps it took are logged.
#[tokio::test]
async fn a_run_that_hits_its_turn_limit_drops_its_input_and_keeps_its_steps() {
    use std::sync::atomic::Ordering;
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let (bot, calls) = agent_with_tool(&server, None);
    agent_sessions_rig::answer(&manager, &dm("Hi."), &bot)
        .await
        .unwrap();

    let limited = agent_sessions_rig::answer(&manager, &dm("When is my shift?"), &bot).await;
    let Err(agent_sessions_rig::Error::Agent(error)) = limited else {
        panic!("the run hit its limit: {limited:?}");
    };
    assert!(
        matches!(*error, rig_agent::completion::PromptError::MaxTurns { .. }),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the tool ran once");

    let sent = agent_sessions_rig::answer(&manager, &dm("Thanks, bye"), &bot)
        .await
        .unwrap();
    assert_eq!(sent[0].text.as_deref(), Some("reply 3"));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no tool ran again");
    // The next model call knows what the failed run did, and is not asked it again: a
    // note stands where the input was, so the steps follow a person's message.
    assert_eq!(
        roles(&server),
        [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "user"
        ]
    );
    let contents: Vec<String> = server.last_messages().into_iter().map(|(_, c)| c).collect();
    assert!(contents[3].contains("left out"), "{}", contents[3]);
    assert_eq!(contents[5], "9am");
    assert_eq!(contents[6], "Thanks, bye");
    assert!(!contents.iter().any(|c| c.contains("When is my shift?")));
    // Nothing is lost: the transcript keeps the dropped input, marked.
    let key = manager.key_for(&dm("")).unwrap();
    let read = manager
        .session(&key)
        .replay(agent_sessions::transcript::Offset::START)
        .await
        .unwrap();
    let texts: Vec<String> = read
        .events
        .iter()
        .filter_map(|e| e.entry.message.as_ref().map(|m| m.text()))
        .collect();
    assert!(texts.contains(&"When is my shift?".to_owned()), "{texts:?}");
}

/// Found by an outside test: when the dropped input was the session's first message,
/// the steps its run took led the conversation, which must start with a person's
/// message, and were cut from it: the next model call did not know the tool had run.
#[tokio::test]
async fn the_steps_of_a_first_message_that_hit_the_turn_limit_are_still_seen() {
    use std::sync::atomic::Ordering;
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let (bot, calls) = agent_with_tool(&server, None);
    let limited = agent_sessions_rig::answer(&manager, &dm("When is my shift?"), &bot).await;
    assert!(limited.is_err(), "the run hit its limit: {limited:?}");
    agent_sessions_rig::answer(&manager, &dm("ok then"), &bot)
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no tool ran again");
    assert_eq!(
        roles(&server),
        ["system", "user", "assistant", "tool", "user"]
    );
    let contents: Vec<String> = server.last_messages().into_iter().map(|(_, c)| c).collect();
    assert!(contents[1].contains("left out"), "{}", contents[1]);
    assert!(!contents.iter().any(|c| c.contains("When is my shift?")));
    assert_eq!(contents[3], "9am");
}

/// A provider that fails after a tool ran (a 500): the input is kept, and the steps the
/// run took are logged, so the next turn's model carries on from the tool's result
/// instead of calling the tool again.
#[tokio::test]
async fn a_run_that_fails_after_a_tool_ran_keeps_its_input_and_runs_no_tool_twice() {
    use common::Failing;
    use std::sync::atomic::Ordering;
    for streamed in [false, true] {
        let server = FakeOpenAi::start().await;
        let dir = tempfile::tempdir().unwrap();
        let manager = open(dir.path()).await;
        let (bot, calls) = agent_with_tool(&server, Some(3));
        server.fail_next(1, Failing::AfterTool);
        let failed = if streamed {
            agent_sessions_rig::answer_streamed(&manager, &dm("When is my shift?"), &bot, |_| {})
                .await
        } else {
            agent_sessions_rig::answer(&manager, &dm("When is my shift?"), &bot).await
        };
        let Err(agent_sessions_rig::Error::Agent(error)) = failed else {
            panic!("the provider failed: {failed:?}");
        };
        assert_eq!(
            agent_sessions_rig::failure_of(&error),
            agent_sessions::exactly_once::TurnFailure::KeepInput
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{error:?}");

        let sent = agent_sessions_rig::answer(&manager, &dm("Thanks"), &bot)
            .await
            .unwrap();
        assert!(sent[0].text.as_deref().unwrap().starts_with("reply"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "streamed {streamed}: no tool ran again"
        );
        assert_eq!(
            roles(&server),
            ["system", "user", "assistant", "tool", "user"],
            "streamed {streamed}"
        );
        let contents: Vec<String> = server.last_messages().into_iter().map(|(_, c)| c).collect();
        assert_eq!(contents[1], "When is my shift?");
        assert_eq!(contents[3], "9am");
        assert_eq!(contents[4], "Thanks");
    }
}

/// A provider that stays down: each message's input is kept for the next turn, but
/// not forever — after three failed turns it is set aside, and the model sees a note.
#[tokio::test]
async fn an_input_the_provider_keeps_failing_on_is_set_aside_after_three_attempts() {
    use common::Failing;
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, None);
    server.fail_next(3, Failing::Any);
    for text in ["Book a table", "for 4", "at 8?"] {
        let failed = agent_sessions_rig::answer(&manager, &dm(text), &bot).await;
        assert!(failed.is_err(), "{text}: {failed:?}");
    }
    let sent = agent_sessions_rig::answer(&manager, &dm("hello?"), &bot)
        .await
        .unwrap();
    assert_eq!(sent[0].text.as_deref(), Some("reply 4"));
    let contents: Vec<String> = server.last_messages().into_iter().map(|(_, c)| c).collect();
    // rig sends the user messages in a row as one message of several parts.
    assert_eq!(roles(&server), ["system", "user"]);
    assert_eq!(
        contents[1],
        "[This earlier message was set aside unanswered after 3 failed attempts to answer \
         it: \"Book a table\"]for 4at 8?hello?"
    );
}

/// A session that rig's memory writes keeps the bookkeeping of any other: its status,
/// when and why it started, its messages counted, the last one's preview and its
/// channel — what the inspector and the command line show of it.
#[tokio::test]
async fn a_session_written_through_rigs_memory_keeps_its_bookkeeping() {
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, Some(SessionMemory::new(manager.clone())));
    for text in ["When is my shift?", "And the one after?"] {
        bot.prompt(text).conversation("user-77").await.unwrap();
    }
    let key = agent_sessions_rig::conversation_key("user-77").unwrap();
    let entry = manager.session(&key).get().await.unwrap().unwrap().entry;
    assert_eq!(entry.status, Some(agent_sessions::SessionStatus::Idle));
    assert!(entry.session_started_at.is_some());
    assert_eq!(entry.start_reason.as_deref(), Some("no_session"));
    assert_eq!((entry.message_count, entry.turn_count), (Some(2), Some(2)));
    assert_eq!(
        entry.last_message_preview.as_deref(),
        Some("And the one after?")
    );
    let origin = entry.origin.expect("where the session came from");
    assert_eq!(origin.provider.as_deref(), Some("rig"), "{origin:?}");
    // The conversation is as before: both exchanges, once.
    let kept = manager.session(&key).messages().await.unwrap();
    let texts: Vec<&str> = kept.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        [
            "When is my shift?",
            "reply 1",
            "And the one after?",
            "reply 2"
        ]
    );
}

#[tokio::test]
async fn a_photo_with_a_url_reaches_the_rig_agent_as_an_image() {
    use agent_sessions::inbound::{Attachment, AttachmentKind};
    let server = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let manager = open(dir.path()).await;
    let bot = agent(&server, None);
    let message = dm("what plant is this?").with_attachment(
        Attachment::new(AttachmentKind::Image)
            .with_mime_type("image/png")
            .with_url("https://files.example/plant.png"),
    );
    agent_sessions_rig::answer(&manager, &message, &bot)
        .await
        .unwrap();
    let body = server.last_request();
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    let parts = user["content"].as_array().expect("content parts");
    assert_eq!(parts[0]["text"], "what plant is this?\n<media:image>");
    assert_eq!(parts[1]["type"], "image_url");
    assert_eq!(
        parts[1]["image_url"]["url"],
        "https://files.example/plant.png"
    );
}
