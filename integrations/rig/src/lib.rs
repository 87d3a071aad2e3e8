//! Durable, correct conversation memory for [rig] agents, backed by [`agent_sessions`].
//!
//! Two ways in, both keeping the conversation in the session's transcript (OpenClaw's
//! JSONL files, SQLite or PostgreSQL — whatever store the manager has):
//!
//! - [`SessionMemory`] is rig's [`ConversationMemory`]: give it to
//!   `AgentBuilder::memory` and run the agent with any conversation id (`"user-77"`;
//!   each is a session of its own). `load` runs the session's lifecycle (daily reset, idle expiry,
//!   close) and is the conversation as the model should see it
//!   ([`Session::messages`](agent_sessions::manager::Session::messages): within the context window, tool calls included,
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
//! let manager = Arc::new(SessionManager::connect("json:./state").await?.build()?);
//! let model = OpenAIConfig::new("sk-your-key").client().chat("gpt-4o-mini");
//! let agent = AgentBuilder::new(model)
//!     .preamble("You are the rota assistant.")
//!     .memory(SessionMemory::new(manager.clone()))
//!     .build();
//!
//! // Any conversation id is a session (resets and expiry included).
//! let reply = agent.prompt("When is my shift?").conversation("user-77").await?;
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

use agent_sessions::exactly_once::TurnFailure;
use agent_sessions::identity::DEFAULT_AGENT_ID;
use agent_sessions::inbound::{Attachment, ChatMessage, ChatRole, ToolCall};
use agent_sessions::manager::{LogMessage, TurnOutcome, TurnReply};
use agent_sessions::memory::TurnUsage;
use agent_sessions::reply::ReplyPayload;
use agent_sessions::{InboundMessage, SessionKey, SessionManager};
use futures_util::StreamExt;
use rig_agent::agent::MultiTurnStreamItem;
use rig_agent::Agent;
use rig_core::completion::{Message, Usage};
use rig_core::id::ConversationId;
use rig_core::memory::{ConversationMemory, MemoryError};
use rig_core::message::{
    AssistantContent, AssistantMessage, CallId, DocumentMediaType, ImageMediaType, MimeType,
    ToolName, ToolResult, ToolResultContent, UserContent,
};
use rig_core::streaming::{Item, StreamEvent};
use rig_core::wasm_compat::WasmBoxedFuture;
use serde_json::Value;

/// What can go wrong in a turn: the session layer or the agent's run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session layer failed (the store, the transcript, the budget).
    #[error(transparent)]
    Sessions(#[from] agent_sessions::Error),
    /// A streamed run ended without its final response (the connection dropped); the
    /// turn failed, its input kept.
    #[error("the agent's streamed run ended without a final response")]
    Incomplete,
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

/// rig's [`ConversationMemory`] over a [`SessionManager`]: each conversation id is a
/// session.
///
/// Any id works: each (`"user-77"`) is a session of its own ([`conversation_key`]),
/// whoever chose it. A host that resolves messages itself and runs the agent with the
/// session key it got turns on [`with_session_keys`](Self::with_session_keys). Each
/// `load` runs the session's lifecycle first — a conversation idle past its reset
/// (the daily reset at 04:00 by default, an idle expiry if the manager has one) or
/// closed starts a new session, its transcript archived — so a bot needs no
/// [`SessionManager::resolve`] of its own; a conversation with no session yet loads
/// empty, and its first append starts the session.
///
/// The manager needs a transcript store (`SessionManager::connect` has one; a builder
/// gets one from `SessionManagerBuilder::transcripts`). `/new` and group chatter are
/// message-level, and a memory sees no message before the model does (`prompt("/new")`
/// is sent to the model as a message): run whole turns with [`answer`] to have them.
///
/// ```
/// use std::sync::Arc;
/// use agent_sessions::prelude::*;
/// use agent_sessions_rig::SessionMemory;
/// use rig_core::id::ConversationId;
/// use rig_core::memory::ConversationMemory;
/// use rig_core::message::Message;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let url = format!("json:{}", dir.path().display());
/// let manager = Arc::new(SessionManager::connect(&url).await?.build()?);
/// let memory = SessionMemory::new(manager.clone());
/// let id = ConversationId::from("user-77");
/// memory
///     .append(&id, vec![Message::user("When is my shift?"), Message::assistant("Thursday at 9.")])
///     .await?;
/// assert_eq!(memory.load(&id).await?.len(), 2);
/// let key = agent_sessions_rig::conversation_key("user-77")?;
/// assert_eq!(key.as_str(), "agent:main:rig:conversation:user-77");
/// assert!(manager.session(&key).get().await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SessionMemory {
    manager: Arc<SessionManager>,
    session_keys: bool,
}

impl SessionMemory {
    /// A memory over `manager`'s sessions, each conversation id a session of its own
    /// ([`conversation_key`]): no id, whoever chose it, reaches another session.
    pub fn new(manager: Arc<SessionManager>) -> Self {
        SessionMemory {
            manager,
            session_keys: false,
        }
    }

    /// Also takes an id that is a session key (`agent:main:telegram:dm:42`) as that
    /// session: for a host that resolves each message itself
    /// ([`SessionManager::resolve`]) and runs the agent with the key it returns. Never
    /// give such a memory an id a user chose: a user who sends a session key as their
    /// conversation id would read and write that conversation.
    pub fn with_session_keys(mut self) -> Self {
        self.session_keys = true;
        self
    }

    /// The manager the memory keeps its conversations in.
    pub fn manager(&self) -> &Arc<SessionManager> {
        &self.manager
    }

    /// The session of conversation `id`.
    fn session_key(&self, id: &ConversationId) -> Result<SessionKey, MemoryError> {
        let id = id.as_str();
        if self.session_keys {
            if let Some(key) = SessionKey::parse(id).ok().filter(|key| key.as_str() == id) {
                return Ok(key);
            }
        }
        conversation_key(id).map_err(backend)
    }

    async fn load_messages(&self, id: &ConversationId) -> Result<Vec<Message>, MemoryError> {
        let key = self.session_key(id)?;
        let Some(stored) = self.manager.session(&key).get().await.map_err(backend)? else {
            return Ok(Vec::new());
        };
        // The lifecycle a resolve would run: a stale or closed session is replaced.
        let probe = InboundMessage::new(RIG_CHANNEL, "").with_session_key(key.as_str());
        if self
            .manager
            .is_expired(&probe, &stored.entry)
            .map_err(backend)?
        {
            self.manager.session(&key).reset().await.map_err(backend)?;
            return Ok(Vec::new());
        }
        let messages = self
            .manager
            .session(&key)
            .messages()
            .await
            .map_err(backend)?;
        Ok(rig_messages(&messages))
    }

    async fn append_messages(
        &self,
        id: &ConversationId,
        messages: Vec<Message>,
    ) -> Result<(), MemoryError> {
        let key = self.session_key(id)?;
        let manager = &self.manager;
        // The session's bookkeeping, as for any message a bot takes: the person's
        // message is resolved (a new session started with its status and start time,
        // the message counted, its preview, origin and channel recorded); a run that
        // adds no message of the person's only makes sure the session is there.
        let prompt = chat_messages(&messages).into_iter().find(|m| {
            m.role == ChatRole::User && m.tool_call_id.is_none() && !m.content.trim().is_empty()
        });
        let probe = InboundMessage::new(RIG_CHANNEL, prompt.map(|m| m.content).unwrap_or_default())
            .with_session_key(key.as_str());
        if probe.body.is_empty() {
            manager.record_inbound_meta(&probe).await.map_err(backend)?;
        } else {
            manager.resolve(&probe).await.map_err(backend)?;
        }
        let (mut asked, mut answered) = (None, None);
        for message in &messages {
            let chat = chat_messages(std::slice::from_ref(message));
            let text = chat
                .iter()
                .find(|m| m.role == ChatRole::User && !m.content.trim().is_empty());
            let reply = chat.iter().find(|m| {
                m.role == ChatRole::Assistant
                    && m.tool_calls.is_empty()
                    && !m.content.trim().is_empty()
            });
            // Tool calls and results as they are; the prompt and the reply in the log.
            let steps: Vec<ChatMessage> = chat
                .iter()
                .filter(|m| m.role == ChatRole::Tool || !m.tool_calls.is_empty())
                .cloned()
                .collect();
            manager
                .session(&key)
                .append_chat(&steps)
                .await
                .map_err(backend)?;
            if let Some(text) = text {
                manager
                    .session(&key)
                    .log_message(LogMessage::inbound(text.content.clone()))
                    .await
                    .map_err(backend)?;
                asked = Some(text.content.clone());
            }
            if let Some(reply) = reply {
                manager
                    .session(&key)
                    .log_message(LogMessage::outbound(reply.content.clone()))
                    .await
                    .map_err(backend)?;
                answered = Some(reply.content.clone());
            }
        }
        let mut outcome = TurnOutcome::completed();
        if let (Some(asked), Some(answered)) = (asked, answered) {
            outcome.exchange = Some((asked, answered));
        }
        manager
            .session(&key)
            .record_turn(outcome)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn clear_session(&self, id: &ConversationId) -> Result<(), MemoryError> {
        let key = self.session_key(id)?;
        match self.manager.session(&key).reset().await {
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

/// rig messages as the crate's [`ChatMessage`]s (the inverse of [`rig_messages`]): user
/// text, assistant text with its tool calls, and each tool result as a tool message
/// naming its call. System messages are kept; images and other media are left out.
///
/// ```
/// use agent_sessions::inbound::{ChatMessage, ChatRole};
/// use rig_core::completion::Message;
///
/// let chat = agent_sessions_rig::chat_messages(&[Message::user("hi"), Message::assistant("hello")]);
/// assert_eq!(chat, [ChatMessage::user("hi"), ChatMessage::assistant("hello")]);
/// ```
pub fn chat_messages(messages: &[Message]) -> Vec<ChatMessage> {
    let mut out = Vec::new();
    for message in messages {
        match message {
            Message::System { content } => out.push(ChatMessage::system(content.clone())),
            Message::User { content } => {
                let text = user_text(content);
                if !text.trim().is_empty() {
                    out.push(ChatMessage::user(text));
                }
                for part in content.iter() {
                    if let UserContent::ToolResult(result) = part {
                        out.push(ChatMessage::tool(
                            result.call.wire().into_owned(),
                            tool_result_text(result),
                        ));
                    }
                }
            }
            Message::Assistant(assistant) => {
                let mut chat = ChatMessage::assistant(assistant_text(assistant));
                chat.tool_calls = assistant
                    .tool_calls()
                    .map(|call| ToolCall {
                        id: call.id.wire().into_owned(),
                        name: call.function.name.to_string(),
                        arguments: Value::Object(call.function.arguments.clone()),
                    })
                    .collect();
                out.push(chat);
            }
        }
    }
    out
}

/// A tool result's text: its text parts and JSON values, one after another.
fn tool_result_text(result: &ToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|part| match part {
            ToolResultContent::Text(text) => Some(text.text.clone()),
            ToolResultContent::Json { value } => Some(value.to_string()),
            ToolResultContent::Image(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The channel name a conversation of [`SessionMemory`] is checked under (for resets
/// configured per channel).
pub const RIG_CHANNEL: &str = "rig";

/// The session key of rig conversation id `id`: `agent:main:rig:conversation:<id>`,
/// the id percent-encoded (every byte but `a`–`z`, `0`–`9`, `-`, `_` and `.` as `%xx`).
///
/// The mapping is stable and injective: two different ids never share a session
/// (`"User-77"` and `"user-77"` are two conversations), and no id — not even one
/// shaped like a session key — reaches another conversation's session. An id too long
/// for a key (over 4,096 bytes encoded) is an error.
///
/// ```
/// use agent_sessions_rig::conversation_key;
///
/// assert_eq!(conversation_key("user-77")?.as_str(), "agent:main:rig:conversation:user-77");
/// assert_eq!(
///     conversation_key("Ops Team/#3")?.as_str(),
///     "agent:main:rig:conversation:%4fps%20%54eam%2f%233"
/// );
/// // A session key as an id is a conversation of its own, not that session.
/// assert_eq!(
///     conversation_key("agent:main:telegram:dm:42")?.as_str(),
///     "agent:main:rig:conversation:agent%3amain%3atelegram%3adm%3a42"
/// );
/// # Ok::<(), agent_sessions::Error>(())
/// ```
pub fn conversation_key(id: &str) -> Result<SessionKey, agent_sessions::Error> {
    let mut encoded = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-_.".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02x}"));
        }
    }
    SessionKey::parse(&format!(
        "agent:{DEFAULT_AGENT_ID}:{RIG_CHANNEL}:conversation:{encoded}"
    ))
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
/// tool calls, and tool results (as the user messages rig carries them in). A user
/// message's [attachments](ChatMessage::attachments) with a URL follow its text: a
/// picture (an image, or an image sent as a file) as an image (by `http(s)://` URL, or
/// the bytes of a `data:` URL), another file with a `data:` URL as a document; the
/// others — and URLs of other schemes — are the placeholders in its text.
///
/// ```
/// use agent_sessions::inbound::ChatMessage;
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
            ChatRole::User => {
                let mut content = vec![UserContent::text(message.content.clone())];
                content.extend(message.attachments.iter().filter_map(file_content));
                out.push(Message::User { content });
            }
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

/// The input of a file the model can read: a picture by its URL or the bytes of its
/// `data:` URL, another file by the bytes of its `data:` URL.
fn file_content(attachment: &Attachment) -> Option<UserContent> {
    let url = attachment.input_url()?;
    let data = attachment.data();
    let mime = attachment
        .mime_type
        .as_deref()
        .or(data.map(|(mime, _)| mime))
        .unwrap_or_default();
    if attachment.is_picture() {
        let media = ImageMediaType::from_mime_type(mime);
        return Some(match data {
            Some((_, bytes)) => UserContent::image_base64(bytes, media, None),
            None => UserContent::image_url(url, media, None),
        });
    }
    let (_, bytes) = data?;
    Some(UserContent::document_base64(
        bytes,
        DocumentMediaType::from_mime_type(mime),
    ))
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
/// and returns the error. The tool calls and results of the steps it took are logged
/// first, so the next turn's model knows what was done and no tool runs twice. An input
/// that would fail the same way again ([`failure_of`]: a 4xx answer such as a content
/// filter or a context too long, or the run's turn limit) is dropped from the
/// conversation, so it does not block the session until `/new`; after any other
/// failure it is kept, and set aside with a note once it has been part of the
/// manager's [`max_answer_attempts`](agent_sessions::manager::SessionManagerBuilder::max_answer_attempts)
/// failed turns (3 by default).
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
    let (steering, mut asks) = Steering::new(history.len());
    let taken = steering.steps.clone();
    // Boxed: rig's run is a large future, and so is the turn's completion; on the
    // stack together they overflow a 2 MiB thread in a debug build.
    let run = Box::pin(async {
        agent
            .prompt(prompt)
            .history(history)
            .add_hook(steering)
            .await
    });
    let Some(ran) = Box::pin(drive(&turn, run, &mut asks)).await? else {
        // The run is another turn's now: refused, nothing to send.
        return Ok(turn.complete("").await?);
    };
    match ran {
        Ok(response) => Box::pin(finish(manager, turn, response)).await,
        Err(error) => Err(Box::pin(failed(manager, turn, &taken, error)).await),
    }
}

/// Fails `turn`, whose run ended with `error`: the steps the run took (its tool calls
/// and their results, from the error's history or else from what the [`Steering`] hook
/// saw) are logged first, so the next turn knows what was done and runs no tool again;
/// then the input is kept or dropped as [`failure_of`] says. Returns the error to hand
/// back.
async fn failed(
    manager: &SessionManager,
    turn: agent_sessions::manager::Turn<'_>,
    taken: &RunSteps,
    error: rig_agent::completion::PromptError,
) -> Error {
    let steps = match run_history(&error) {
        Some(history) => history.get(taken.skip..).unwrap_or_default().to_vec(),
        None => taken.so_far(),
    };
    let failure = failure_of(&error);
    let logged = match log_steps(manager, &turn, &steps).await {
        Ok(()) => turn.fail(failure).await,
        Err(logging) => Err(logging),
    };
    match logged {
        Ok(()) => error.into(),
        Err(sessions) => sessions.into(),
    }
}

/// The whole history a failed run carries (what it was given, its prompt, the steps it
/// took), when its error has one.
fn run_history(error: &rig_agent::completion::PromptError) -> Option<&[Message]> {
    use rig_agent::completion::PromptError;
    match error {
        PromptError::MaxTurns { chat_history, .. }
        | PromptError::Cancelled { chat_history, .. }
        | PromptError::UnknownToolCall { chat_history, .. } => Some(chat_history),
        _ => None,
    }
}

/// Logs the tool calls and results among a run's `messages` in `turn`'s session.
async fn log_steps(
    manager: &SessionManager,
    turn: &agent_sessions::manager::Turn<'_>,
    messages: &[Message],
) -> Result<(), agent_sessions::Error> {
    let steps: Vec<ChatMessage> = chat_messages(messages)
        .into_iter()
        .filter(|m| m.role == ChatRole::Tool || !m.tool_calls.is_empty())
        .collect();
    if !steps.is_empty() {
        manager.session(turn.key()).append_chat(&steps).await?;
    }
    Ok(())
}

/// A request for the messages that arrived for the session since the last one, at a
/// tool boundary of the agent's run.
type SteeringAsk = tokio::sync::oneshot::Sender<Vec<String>>;

/// The hook that hands the agent, before each model call after the first (a tool
/// boundary), what the person added meanwhile in a `steer` mode
/// ([`Turn::steering`](agent_sessions::manager::Turn::steering)): as context the rest of
/// the run keeps.
///
/// It also keeps the steps the run has taken so far (its messages after the prompt, as
/// each model call after the first sees them), for a run that fails before it returns
/// them.
struct Steering {
    asks: tokio::sync::mpsc::UnboundedSender<SteeringAsk>,
    taken: std::sync::Mutex<Vec<String>>,
    steps: RunSteps,
}

impl Steering {
    /// A hook for a run given `history` messages before its prompt.
    fn new(history: usize) -> (Steering, tokio::sync::mpsc::UnboundedReceiver<SteeringAsk>) {
        let (asks, received) = tokio::sync::mpsc::unbounded_channel();
        let steering = Steering {
            asks,
            taken: std::sync::Mutex::new(Vec::new()),
            steps: RunSteps {
                skip: history + 1,
                seen: Arc::default(),
            },
        };
        (steering, received)
    }
}

/// The steps a run has taken so far, as its last model call saw them.
#[derive(Clone)]
struct RunSteps {
    /// How many messages of a run's whole history come before its steps: those it was
    /// given and its prompt.
    skip: usize,
    seen: Arc<std::sync::Mutex<Vec<Message>>>,
}

impl RunSteps {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Message>> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The steps seen so far.
    fn so_far(&self) -> Vec<Message> {
        self.lock().clone()
    }
}

impl rig_agent::agent::AgentHook for Steering {
    async fn on_completion_call(
        &self,
        _context: &rig_agent::agent::HookContext,
        event: rig_agent::agent::CompletionCallEvent<'_>,
    ) -> rig_agent::agent::CompletionCallAction {
        use rig_agent::agent::{CompletionCallAction, RequestPatch};
        if event.turn > 1 {
            // The run's steps: its history past what it was given and its prompt, and
            // this call's prompt (the tools' results).
            let mut steps = event
                .history
                .get(self.steps.skip..)
                .unwrap_or_default()
                .to_vec();
            steps.push(event.prompt.clone());
            *self.steps.lock() = steps;
            let (answer, answered) = tokio::sync::oneshot::channel();
            if self.asks.send(answer).is_ok() {
                if let Ok(added) = answered.await {
                    self.taken
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .extend(added);
                }
            }
        }
        let taken = self
            .taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        if taken.is_empty() {
            return CompletionCallAction::Continue;
        }
        let added = taken
            .into_iter()
            .enumerate()
            .map(|(n, text)| rig_core::completion::Document {
                id: format!("user-added-{}", n + 1),
                text: format!("The user added while you were working: {text}"),
                additional_props: HashMap::new(),
            });
        CompletionCallAction::patch(RequestPatch::new().extra_context(added))
    }
}

/// Drives the agent's `run` for `turn`: answers the [`Steering`] hook's asks with the
/// messages steered to the turn, and gives up on the run when the turn loses its
/// session's run (`None`: interrupted by a newer message, or taken over).
async fn drive<T>(
    turn: &agent_sessions::manager::Turn<'_>,
    run: impl std::future::Future<Output = T>,
    asks: &mut tokio::sync::mpsc::UnboundedReceiver<SteeringAsk>,
) -> Result<Option<T>, Error> {
    let mut run = std::pin::pin!(run);
    let mut interruption = std::pin::pin!(turn.interruption());
    loop {
        tokio::select! {
            done = &mut run => return Ok(Some(done)),
            () = &mut interruption => return Ok(None),
            Some(ask) = asks.recv() => {
                let added = turn.steering().await?;
                let _ = ask.send(added.into_iter().map(|message| message.body).collect());
            }
        }
    }
}

/// [`answer`] with the agent's run streamed: `on_text` is called with each piece of the
/// model's text as it arrives (to show it growing); when the run ends, its tool calls
/// and results, its reply, usage, model and provider complete the turn — the reply
/// logged once, whole — and what to send is returned.
///
/// A run that fails fails the turn as [`answer`] does; the pieces already given to
/// `on_text` are not logged. A model turn that calls tools streams its text too, before
/// the tools run.
///
/// ```no_run
/// # async fn run(manager: &agent_sessions::SessionManager, agent: &rig_agent::Agent) -> Result<(), agent_sessions_rig::Error> {
/// use agent_sessions::InboundMessage;
///
/// let message = InboundMessage::direct("telegram", "42", "Tell me a story");
/// let payloads = agent_sessions_rig::answer_streamed(manager, &message, agent, |piece| {
///     print!("{piece}"); // as it arrives
/// })
/// .await?;
/// # drop(payloads);
/// # Ok(())
/// # }
/// ```
pub async fn answer_streamed(
    manager: &SessionManager,
    message: &InboundMessage,
    agent: &Agent,
    mut on_text: impl FnMut(&str),
) -> Result<Vec<ReplyPayload>, Error> {
    let turn = manager.turn(message).await?;
    if !turn.needs_model() {
        return Ok(turn.complete("").await?);
    }
    let mut history = rig_messages(&turn.messages().await?);
    let Some(prompt) = history.pop() else {
        return Ok(turn.complete("").await?);
    };
    let (steering, mut asks) = Steering::new(history.len());
    let taken = steering.steps.clone();
    let mut stream = agent
        .prompt(prompt)
        .history(history)
        .add_hook(steering)
        .stream();
    let mut response = None;
    loop {
        let Some(next) = Box::pin(drive(&turn, stream.next(), &mut asks)).await? else {
            return Ok(turn.complete("").await?);
        };
        let Some(item) = next else { break };
        match item {
            Ok(MultiTurnStreamItem::StreamAssistantItem(Item::Event(StreamEvent::Text {
                text,
                ..
            }))) => on_text(&text),
            Ok(MultiTurnStreamItem::FinalResponse(last)) => response = Some(last),
            Ok(_) => {}
            Err(error) => return Err(Box::pin(failed(manager, turn, &taken, error)).await),
        }
    }
    let Some(response) = response else {
        let steps = taken.so_far();
        log_steps(manager, &turn, &steps).await?;
        turn.fail(TurnFailure::KeepInput).await?;
        return Err(Error::Incomplete);
    };
    Box::pin(finish(manager, turn, response)).await
}

/// Completes `turn` with the agent's run `response`: the tool steps logged, then the
/// reply with its usage, model and provider.
async fn finish(
    manager: &SessionManager,
    turn: agent_sessions::manager::Turn<'_>,
    response: rig_agent::agent::PromptResponse,
) -> Result<Vec<ReplyPayload>, Error> {
    // What the model and its tools did between the prompt (which the turn logged) and
    // the reply (which `complete` logs).
    log_steps(manager, &turn, &response.messages).await?;
    let mut usage = turn_usage(&response.usage);
    if let Some(call) = response.completion_calls.last() {
        (usage.provider, usage.model) = model_of(&call.raw);
    }
    let reply = TurnReply::from(response.output()).with_usage(usage);
    Ok(turn.complete(reply).await?)
}

/// The provider and model a completion's raw response names: the model as the response
/// says it, and the provider by the response's shape (`openai` for an OpenAI-style chat
/// completion, its compatible servers included; `anthropic` for a Messages response).
/// rig's agent does not know its model's name, so the response is what says it.
///
/// ```
/// let raw = serde_json::json!({"object": "chat.completion", "model": "gpt-4o-mini"});
/// let (provider, model) = agent_sessions_rig::model_of(&raw);
/// assert_eq!((provider.as_deref(), model.as_deref()), (Some("openai"), Some("gpt-4o-mini")));
/// ```
pub fn model_of(raw: &Value) -> (Option<String>, Option<String>) {
    let model = raw.get("model").and_then(Value::as_str).map(str::to_owned);
    let provider = match (
        raw.get("object").and_then(Value::as_str),
        raw.get("type").and_then(Value::as_str),
    ) {
        (Some(object), _) if object.starts_with("chat.completion") => Some("openai"),
        (_, Some("message")) => Some("anthropic"),
        _ => None,
    };
    (provider.map(str::to_owned), model)
}

/// What to do with the input of a turn whose run failed with `error`: drop it when the
/// same input would fail the same way again — the provider refused the request itself (a
/// 4xx answer other than a timeout, a conflict or a rate limit), or the run used up its
/// turn limit (`PromptError::MaxTurns`: rig allows one model call per run unless the
/// agent says otherwise) — else keep it, for the next turn to try again (up to the
/// manager's [`max_answer_attempts`](agent_sessions::manager::SessionManagerBuilder::max_answer_attempts)).
///
/// ```
/// use agent_sessions::exactly_once::TurnFailure;
/// use rig_agent::completion::PromptError;
/// use rig_core::completion::Message;
///
/// let limit = PromptError::MaxTurns { max_turns: 1, chat_history: vec![], prompt: Message::user("…") };
/// assert_eq!(agent_sessions_rig::failure_of(&limit), TurnFailure::DropInput);
/// let cancelled = PromptError::cancelled(vec![], "the host stopped it");
/// assert_eq!(agent_sessions_rig::failure_of(&cancelled), TurnFailure::KeepInput);
/// ```
pub fn failure_of(error: &rig_agent::completion::PromptError) -> TurnFailure {
    if matches!(error, rig_agent::completion::PromptError::MaxTurns { .. }) {
        return TurnFailure::DropInput;
    }
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
