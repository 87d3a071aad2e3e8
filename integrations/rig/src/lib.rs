//! Durable, correct conversation memory for [rig] agents, backed by [`agent_sessions`].
//!
//! Two ways in, both keeping the conversation in the session's transcript (OpenClaw's
//! JSONL files, SQLite or PostgreSQL — whatever store the manager has):
//!
//! - [`SessionMemory`] is rig's [`ConversationMemory`]: give it to
//!   `AgentBuilder::memory` and run the agent with a session key as its conversation
//!   id. `load` is the conversation as the model should see it
//!   ([`SessionManager::messages`]: within the context window, tool calls included,
//!   the summary first after a compaction), `append` logs the run's messages in the
//!   transcript, `clear` resets the session (its transcript is archived).
//! - [`answer`] runs one inbound message through a whole turn with an agent: the
//!   session's lifecycle (idle and daily expiry, `/new`), group chatter, the reply
//!   filters and the usage, as [`SessionManager::turn`] and
//!   [`Turn::complete`](agent_sessions::manager::Turn::complete) do them.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use agent_sessions::prelude::*;
//! use agent_sessions_rig::SessionMemory;
//! use rig_agent::AgentBuilder;
//! use rig_core::providers::openai::OpenAIConfig;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Arc::new(SessionManager::connect("json:./state").await?.build());
//! let model = OpenAIConfig::new("sk-…").client().chat("gpt-4o-mini");
//! let agent = AgentBuilder::new(model)
//!     .preamble("You are the rota assistant.")
//!     .memory(SessionMemory::new(manager.clone()))
//!     .build();
//!
//! // The session this message belongs to (after resets and expiry) is the conversation.
//! let message = InboundMessage::direct("telegram", "42", "When is my shift?");
//! let session = manager.resolve(&message).await?;
//! let reply = agent.prompt(session.body.as_str()).conversation(session.key.as_str()).await?;
//! println!("{}", reply.output());
//! # Ok(())
//! # }
//! ```
//!
//! The crate enables no TLS backend of rig (plain HTTP, for a local or proxied model
//! server); for `https://` endpoints, turn on rig-core's own `rustls` feature in the
//! host's `Cargo.toml`.
//!
//! [rig]: https://docs.rs/rig-core

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;

use agent_sessions::context::chat::{ChatMessage, ChatRole};
use agent_sessions::context::reply::ReplyPayload;
use agent_sessions::entry::SessionEntry;
use agent_sessions::manager::{LogMessage, TurnFailure, TurnOutcome, TurnReply};
use agent_sessions::memory::usage::TurnUsage;
use agent_sessions::store::SessionStoreExt;
use agent_sessions::transcript::{AgentMessage, Content, ContentBlock, Role, TranscriptEntry};
use agent_sessions::{InboundMessage, SessionKey, SessionManager};
use chrono::{DateTime, Utc};
use rig_agent::Agent;
use rig_core::completion::{Message, Usage};
use rig_core::id::ConversationId;
use rig_core::memory::{ConversationMemory, MemoryError};
use rig_core::message::{
    AssistantContent, AssistantMessage, CallId, ToolName, ToolResult, ToolResultContent,
    UserContent,
};
use rig_core::wasm_compat::WasmBoxedFuture;
use serde_json::{Map, Value};

/// What can go wrong in a turn: the session layer or the agent's run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session layer failed (the store, the transcript, the budget).
    #[error(transparent)]
    Sessions(#[from] agent_sessions::Error),
    /// The agent's run failed (the model call, a tool). Boxed: rig's error carries the
    /// run's history.
    #[error("agent run failed: {0}")]
    Agent(#[source] Box<rig_agent::completion::PromptError>),
}

impl From<rig_agent::completion::PromptError> for Error {
    fn from(error: rig_agent::completion::PromptError) -> Self {
        Error::Agent(Box::new(error))
    }
}

/// rig's [`ConversationMemory`] over a [`SessionManager`]: the conversation id is a
/// session key (`agent:main:telegram:dm:42`).
///
/// The manager needs a transcript store (`SessionManager::connect` has one; a builder
/// gets one from `SessionManagerBuilder::transcripts`). A conversation with no session
/// yet loads empty, and its first append starts the session. The memory does not run
/// the session's lifecycle itself — rig does not hand it the inbound message — so a
/// bot resolves each message first ([`SessionManager::resolve`]: idle and daily resets,
/// `/new`) and runs the agent with the key it returns; or uses [`answer`].
#[derive(Debug, Clone)]
pub struct SessionMemory {
    manager: Arc<SessionManager>,
}

impl SessionMemory {
    /// A memory over `manager`'s sessions.
    pub fn new(manager: Arc<SessionManager>) -> Self {
        SessionMemory { manager }
    }

    /// The manager the memory keeps its conversations in.
    pub fn manager(&self) -> &Arc<SessionManager> {
        &self.manager
    }

    async fn load_messages(&self, id: &ConversationId) -> Result<Vec<Message>, MemoryError> {
        let key = session_key(id)?;
        if self.manager.get(&key).await.map_err(backend)?.is_none() {
            return Ok(Vec::new());
        }
        let messages = self.manager.messages(&key).await.map_err(backend)?;
        Ok(rig_messages(&messages))
    }

    async fn append_messages(
        &self,
        id: &ConversationId,
        messages: Vec<Message>,
    ) -> Result<(), MemoryError> {
        let key = session_key(id)?;
        let manager = &self.manager;
        let now = manager.clock().now();
        let now_ms = manager.clock().now_millis();
        manager
            .store()
            .update(&key, |slot| {
                slot.get_or_insert_with(|| SessionEntry::new_session(now_ms));
            })
            .await
            .map_err(backend)?;
        let (mut asked, mut answered) = (None, None);
        for message in &messages {
            match message {
                Message::User { content } => {
                    let text = user_text(content);
                    let results: Vec<TranscriptEntry> = content
                        .iter()
                        .filter_map(|part| match part {
                            UserContent::ToolResult(result) => Some(tool_result_line(result, now)),
                            _ => None,
                        })
                        .collect();
                    if !results.is_empty() {
                        manager
                            .transcripts()
                            .append(&key, results)
                            .await
                            .map_err(backend)?;
                    }
                    if !text.trim().is_empty() {
                        manager
                            .transcripts()
                            .log_message(&key, LogMessage::inbound(text.clone()))
                            .await
                            .map_err(backend)?;
                        asked = Some(text);
                    }
                }
                Message::Assistant(assistant) => {
                    let text = assistant_text(assistant);
                    if assistant.tool_calls().next().is_some() {
                        let line = tool_call_line(assistant, &text, now);
                        manager
                            .transcripts()
                            .append(&key, vec![line])
                            .await
                            .map_err(backend)?;
                    } else if !text.trim().is_empty() {
                        manager
                            .transcripts()
                            .log_message(&key, LogMessage::outbound(text.clone()))
                            .await
                            .map_err(backend)?;
                        answered = Some(text);
                    }
                }
                // The host's system prompt is configuration, not conversation.
                Message::System { .. } => {}
            }
        }
        let mut outcome = TurnOutcome::completed();
        if let (Some(asked), Some(answered)) = (asked, answered) {
            outcome.exchange = Some((asked, answered));
        }
        manager.record_turn(&key, outcome).await.map_err(backend)?;
        Ok(())
    }

    async fn clear_session(&self, id: &ConversationId) -> Result<(), MemoryError> {
        let key = session_key(id)?;
        match self.manager.reset(&key).await {
            Ok(_) | Err(agent_sessions::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(backend(error)),
        }
    }
}

impl ConversationMemory for SessionMemory {
    fn load<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> WasmBoxedFuture<'a, Result<Vec<Message>, MemoryError>> {
        Box::pin(self.load_messages(conversation_id))
    }

    fn append<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
        messages: Vec<Message>,
    ) -> WasmBoxedFuture<'a, Result<(), MemoryError>> {
        Box::pin(self.append_messages(conversation_id, messages))
    }

    fn clear<'a>(
        &'a self,
        conversation_id: &'a ConversationId,
    ) -> WasmBoxedFuture<'a, Result<(), MemoryError>> {
        Box::pin(self.clear_session(conversation_id))
    }
}

/// An assistant message that calls tools, as a transcript line.
fn tool_call_line(assistant: &AssistantMessage, text: &str, now: DateTime<Utc>) -> TranscriptEntry {
    let mut blocks = Vec::new();
    if !text.trim().is_empty() {
        blocks.push(ContentBlock::text(text));
    }
    for call in assistant.tool_calls() {
        let mut extra = Map::new();
        extra.insert("id".into(), Value::String(call.id.wire().into_owned()));
        extra.insert("name".into(), Value::String(call.function.name.to_string()));
        extra.insert(
            "arguments".into(),
            Value::Object(call.function.arguments.clone()),
        );
        blocks.push(ContentBlock {
            kind: "toolCall".into(),
            text: None,
            extra,
        });
    }
    let mut message = agent_message(Role::Assistant, Content::Blocks(blocks), now);
    message.stop_reason = Some("toolUse".into());
    TranscriptEntry::message(message, now)
}

/// A tool's result, as a transcript line.
fn tool_result_line(result: &ToolResult, now: DateTime<Utc>) -> TranscriptEntry {
    let blocks = result
        .content
        .iter()
        .filter_map(|part| match part {
            ToolResultContent::Text(text) => Some(ContentBlock::text(text.text.clone())),
            ToolResultContent::Json { value } => Some(ContentBlock::text(value.to_string())),
            ToolResultContent::Image(_) => None,
        })
        .collect();
    let mut message = agent_message(Role::ToolResult, Content::Blocks(blocks), now);
    message.extra.insert(
        "toolCallId".into(),
        Value::String(result.call.wire().into_owned()),
    );
    message
        .extra
        .insert("toolName".into(), Value::String(result.name.to_string()));
    if result.is_error {
        message.extra.insert("isError".into(), Value::Bool(true));
    }
    TranscriptEntry::message(message, now)
}

fn agent_message(role: Role, content: Content, now: DateTime<Utc>) -> AgentMessage {
    AgentMessage {
        role,
        content: Some(content),
        api: None,
        provider: None,
        model: None,
        usage: None,
        stop_reason: None,
        timestamp: u64::try_from(now.timestamp_millis()).ok(),
        extra: Map::new(),
    }
}

/// The tool calls and tool results among a run's messages, as transcript lines.
fn tool_lines(messages: &[Message], now: DateTime<Utc>) -> Vec<TranscriptEntry> {
    let mut lines = Vec::new();
    for message in messages {
        match message {
            Message::User { content } => {
                lines.extend(content.iter().filter_map(|part| match part {
                    UserContent::ToolResult(result) => Some(tool_result_line(result, now)),
                    _ => None,
                }))
            }
            Message::Assistant(assistant) if assistant.tool_calls().next().is_some() => {
                lines.push(tool_call_line(assistant, &assistant_text(assistant), now));
            }
            _ => {}
        }
    }
    lines
}

fn session_key(id: &ConversationId) -> Result<SessionKey, MemoryError> {
    SessionKey::parse(id.as_str()).map_err(backend)
}

fn backend(error: agent_sessions::Error) -> MemoryError {
    MemoryError::backend(error)
}

fn user_text(content: &[UserContent]) -> String {
    content
        .iter()
        .filter_map(|part| match part {
            UserContent::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn assistant_text(assistant: &AssistantMessage) -> String {
    assistant
        .content
        .iter()
        .filter_map(|part| match part {
            AssistantContent::Text(text) => Some(text.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The conversation as rig messages: system, user and assistant text, an assistant's
/// tool calls, and tool results (as the user messages rig carries them in).
///
/// ```
/// use agent_sessions::context::chat::ChatMessage;
/// use rig_core::completion::Message;
///
/// let messages = agent_sessions_rig::rig_messages(&[
///     ChatMessage::user("When is my shift?"),
///     ChatMessage::assistant("Thursday at 9."),
/// ]);
/// assert_eq!(messages, [Message::user("When is my shift?"), Message::assistant("Thursday at 9.")]);
/// ```
pub fn rig_messages(messages: &[ChatMessage]) -> Vec<Message> {
    // A tool result names its call; rig also wants the tool's name, which the call has.
    let mut tools: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        match message.role {
            ChatRole::System => out.push(Message::system(message.content.clone())),
            ChatRole::User => out.push(Message::user(message.content.clone())),
            ChatRole::Assistant => {
                let mut content = Vec::new();
                if !message.content.is_empty() {
                    content.push(AssistantContent::text(message.content.clone()));
                }
                for call in &message.tool_calls {
                    tools.insert(&call.id, &call.name);
                    if let Ok(name) = ToolName::new(call.name.clone()) {
                        content.push(AssistantContent::tool_call(
                            call.id.clone(),
                            name,
                            call.arguments.clone(),
                        ));
                    }
                }
                if content.is_empty() {
                    content.push(AssistantContent::text(""));
                }
                out.push(Message::Assistant(AssistantMessage::new(content)));
            }
            ChatRole::Tool => {
                let call = message.tool_call_id.clone().unwrap_or_default();
                let name = tools.get(call.as_str()).copied().unwrap_or("tool");
                let Ok(name) = ToolName::new(name) else {
                    continue;
                };
                out.push(Message::tool_result(
                    CallId::from_wire(call),
                    name,
                    message.content.clone(),
                ));
            }
        }
    }
    out
}

/// A run's usage as the session records it: input tokens without the cached ones
/// (which are `cache_read`, as cache writes are `cache_write`), output tokens and the
/// total.
///
/// ```
/// use rig_core::completion::Usage;
///
/// let mut usage = Usage::new();
/// usage.input_tokens = Some(1_200);
/// usage.cached_input_tokens = Some(1_000);
/// usage.output_tokens = Some(40);
/// let turn = agent_sessions_rig::turn_usage(&usage);
/// assert_eq!((turn.input, turn.cache_read, turn.output), (Some(200), Some(1_000), Some(40)));
/// ```
pub fn turn_usage(usage: &Usage) -> TurnUsage {
    let input = usage.input_tokens.unwrap_or(0);
    let cache_read = usage.cached_input_tokens.unwrap_or(0).min(input);
    let cache_write = usage
        .cache_creation_input_tokens
        .unwrap_or(0)
        .min(input - cache_read);
    let mut turn = TurnUsage::new()
        .input(input - cache_read - cache_write)
        .output(usage.output_tokens.unwrap_or(0));
    if cache_read > 0 {
        turn = turn.cache_read(cache_read);
    }
    if cache_write > 0 {
        turn = turn.cache_write(cache_write);
    }
    if let Some(total) = usage.total_tokens {
        turn = turn.total(total);
    }
    turn
}

/// Answers one inbound message with `agent` and returns what to send.
///
/// The message goes through [`SessionManager::turn`] (its session, with resets and
/// expiry; group activation; the inbound pipeline). When the model is to answer, the
/// agent runs on the turn's input with the conversation before it as history
/// ([`Turn::messages`](agent_sessions::manager::Turn::messages); the agent's own memory is bypassed), the tool calls and results
/// of its run are kept in the transcript, and its reply and usage complete the turn.
/// Group chatter and an acknowledged `/new` complete without a run.
///
/// A failed run fails the turn ([`Turn::fail`](agent_sessions::manager::Turn::fail))
/// and returns the error: an input the provider refused ([`failure_of`]: a 4xx answer
/// such as a content filter or a context too long) is dropped from the conversation, so
/// it does not block the session until `/new`; after any other failure it is kept.
pub async fn answer(
    manager: &SessionManager,
    message: &InboundMessage,
    agent: &Agent,
) -> Result<Vec<ReplyPayload>, Error> {
    let turn = manager.turn(message).await?;
    if !turn.needs_model() {
        return Ok(turn.complete("").await?);
    }
    let mut history = rig_messages(&turn.messages().await?);
    let Some(prompt) = history.pop() else {
        return Ok(turn.complete("").await?);
    };
    let response = match agent.prompt(prompt).history(history).await {
        Ok(response) => response,
        Err(error) => {
            turn.fail(failure_of(&error)).await?;
            return Err(error.into());
        }
    };
    // What the model and its tools did between the prompt (which the turn logged) and
    // the reply (which `complete` logs).
    let lines = tool_lines(&response.messages, manager.clock().now());
    if !lines.is_empty() {
        manager.transcripts().append(turn.key(), lines).await?;
    }
    let reply = TurnReply::from(response.output()).with_usage(turn_usage(&response.usage));
    Ok(turn.complete(reply).await?)
}

/// What to do with the input of a turn whose run failed with `error`: drop it when the
/// provider refused the request itself (a 4xx answer other than a timeout, a conflict or
/// a rate limit: it would refuse it again), else keep it.
pub fn failure_of(error: &rig_agent::completion::PromptError) -> TurnFailure {
    match error.provider_response_status() {
        Some(status) if status.is_client_error() && !matches!(status.as_u16(), 408 | 409 | 429) => {
            TurnFailure::DropInput
        }
        _ => TurnFailure::KeepInput,
    }
}

/// The README's examples compile.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
