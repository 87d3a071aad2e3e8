//! Durable, correct chat sessions for [async-openai]: each turn's conversation as a
//! chat-completion request, and the completion back as the turn's reply and usage.
//!
//! [`agent_sessions`] decides which session every inbound message belongs to (resets,
//! idle and daily expiry, `/new`), keeps its transcript, and gives the model the
//! conversation as [`ChatMessage`]s within the context window. This crate converts
//! between those and async-openai's chat types:
//!
//! - [`request_messages`]: a turn's [`ChatMessage`]s as [`ChatCompletionRequestMessage`]s
//!   (system, user, assistant with tool calls, tool results).
//! - [`turn_reply`]: a [`CreateChatCompletionResponse`] as the [`TurnReply`] that
//!   [`Turn::complete`] takes — its text and its usage ([`turn_usage`]).
//! - [`answer`]: one whole turn — the request, the call, the completion.
//!
//! ```no_run
//! use agent_sessions::prelude::*;
//! use agent_sessions::store::FileTranscriptStore;
//! use async_openai::{config::OpenAIConfig, Client};
//!
//! # async fn run() -> Result<(), agent_sessions_openai::Error> {
//! let manager = SessionManager::builder(JsonFileStore::new("./state"))
//!     .transcripts(FileTranscriptStore::new("./state"))
//!     .build()?;
//! let client = Client::with_config(OpenAIConfig::new().with_api_base("http://127.0.0.1:8080/v1"));
//!
//! let message = InboundMessage::direct("telegram", "42", "When is my shift?");
//! let turn = manager.turn(&message).await?;
//! let system = vec![ChatMessage::system("You are the staff rota assistant.")];
//! for payload in agent_sessions_openai::answer(turn, &client, "gpt-4o-mini", system).await? {
//!     println!("send: {}", payload.text.unwrap_or_default());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The crate enables no TLS backend of async-openai (plain HTTP, for a local or proxied
//! model server); for `https://` endpoints, turn on async-openai's own `rustls` feature
//! in the host's `Cargo.toml`.
//!
//! [async-openai]: https://docs.rs/async-openai

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use agent_sessions::exactly_once::TurnFailure;
use agent_sessions::inbound::{Attachment, ChatMessage, ChatRole, ToolCall};
use agent_sessions::manager::{Turn, TurnReply};
use agent_sessions::memory::TurnUsage;
use agent_sessions::reply::ReplyPayload;
use async_openai::config::Config;
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestMessage,
    ChatCompletionRequestMessageContentPartFile, ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestUserMessage,
    ChatCompletionRequestUserMessageContent, ChatCompletionRequestUserMessageContentPart,
    ChatCompletionStreamOptions, CompletionUsage, CreateChatCompletionRequest,
    CreateChatCompletionResponse, CreateChatCompletionStreamResponse, FileObject, FunctionCall,
    ImageUrl,
};
use async_openai::Client;
use futures_util::StreamExt;
use serde_json::Value;

/// A user message's content: its text alone, or its text and then its files' inputs.
fn user_content(
    text: String,
    attachments: &[Attachment],
) -> ChatCompletionRequestUserMessageContent {
    let files: Vec<ChatCompletionRequestUserMessageContentPart> =
        attachments.iter().filter_map(file_part).collect();
    if files.is_empty() {
        return text.into();
    }
    let mut parts = vec![ChatCompletionRequestUserMessageContentPart::Text(
        ChatCompletionRequestMessageContentPartText {
            text,
            ..Default::default()
        },
    )];
    parts.extend(files);
    ChatCompletionRequestUserMessageContent::Array(parts)
}

/// The input part of a file the model can read: a picture by its URL, another file by
/// its `data:` URL.
fn file_part(attachment: &Attachment) -> Option<ChatCompletionRequestUserMessageContentPart> {
    let url = attachment.input_url()?;
    if attachment.is_picture() {
        return Some(ChatCompletionRequestUserMessageContentPart::ImageUrl(
            ChatCompletionRequestMessageContentPartImage {
                image_url: ImageUrl {
                    url: url.to_owned(),
                    detail: None,
                },
                ..Default::default()
            },
        ));
    }
    attachment.data().map(|_| {
        ChatCompletionRequestUserMessageContentPart::File(
            ChatCompletionRequestMessageContentPartFile {
                file: FileObject {
                    file_data: Some(url.to_owned()),
                    file_id: None,
                    filename: attachment.safe_file_name(),
                },
                ..Default::default()
            },
        )
    })
}

/// The provider name recorded with the usage of a completion.
pub const PROVIDER: &str = "openai";

/// What can go wrong in a turn: the session layer or the model call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session layer failed (the store, the transcript, the budget).
    #[error(transparent)]
    Sessions(#[from] agent_sessions::Error),
    /// The chat-completion call failed.
    #[error("chat completion failed: {0}")]
    OpenAI(#[from] OpenAIError),
}

/// One message of the conversation as a chat-completion request message.
///
/// Tool calls keep their ids, names and arguments (as the JSON text the API takes);
/// a tool result names the call it answers. A user message's
/// [attachments](ChatMessage::attachments) with a URL follow its text as content
/// parts: a picture (an image, or an image sent as a file) as an image input (an
/// `http(s)://` or `data:` URL), another file with a `data:` URL as a file input under
/// its [safe name](agent_sessions::inbound::Attachment::safe_file_name); the others —
/// and URLs of other schemes — are the placeholders in its text.
///
/// ```
/// use agent_sessions::inbound::ChatMessage;
/// use async_openai::types::chat::ChatCompletionRequestMessage;
///
/// let request = agent_sessions_openai::request_message(&ChatMessage::user("hi"));
/// assert!(matches!(request, ChatCompletionRequestMessage::User(_)));
/// ```
pub fn request_message(message: &ChatMessage) -> ChatCompletionRequestMessage {
    let content = message.content.clone();
    match message.role {
        ChatRole::System => {
            ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
                content: content.into(),
                name: None,
            })
        }
        ChatRole::User => ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: user_content(content, &message.attachments),
            name: None,
        }),
        ChatRole::Assistant => {
            let tool_calls: Vec<ChatCompletionMessageToolCalls> = message
                .tool_calls
                .iter()
                .map(|call| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: call.id.clone(),
                        function: FunctionCall {
                            name: call.name.clone(),
                            arguments: arguments_text(&call.arguments),
                        },
                    })
                })
                .collect();
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                // The API takes an assistant message without content when it calls tools.
                content: (!content.is_empty() || tool_calls.is_empty()).then(|| content.into()),
                tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
                ..ChatCompletionRequestAssistantMessage::default()
            })
        }
        ChatRole::Tool => ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
            content: content.into(),
            tool_call_id: message.tool_call_id.clone().unwrap_or_default(),
        }),
    }
}

/// The conversation as chat-completion request messages, in order: what
/// [`Turn::messages`] or [`Turn::messages_with`] returned, ready for
/// [`CreateChatCompletionRequest::messages`].
///
/// ```
/// use agent_sessions::inbound::ChatMessage;
///
/// let history = [ChatMessage::system("Be brief."), ChatMessage::user("hi")];
/// let messages = agent_sessions_openai::request_messages(&history);
/// let json = serde_json::to_value(&messages).unwrap();
/// assert_eq!(json[0]["role"], "system");
/// assert_eq!(json[1]["content"], "hi");
/// ```
pub fn request_messages(messages: &[ChatMessage]) -> Vec<ChatCompletionRequestMessage> {
    messages.iter().map(request_message).collect()
}

/// A tool call's arguments as the JSON text the API carries (a string stays as it is).
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

/// The usage a completion reports, as the session records it: input tokens without the
/// cached ones (which are `cache_read`), output tokens, the provider's total, and the
/// model. `None` when the response carries no usage.
///
/// ```
/// use async_openai::types::chat::{CompletionUsage, CreateChatCompletionResponse};
///
/// let response = CreateChatCompletionResponse {
///     model: "gpt-4o-mini".into(),
///     usage: Some(CompletionUsage { prompt_tokens: 1_200, completion_tokens: 40, total_tokens: 1_240, ..Default::default() }),
///     ..Default::default()
/// };
/// let usage = agent_sessions_openai::turn_usage(&response).unwrap();
/// assert_eq!((usage.input, usage.output, usage.total), (Some(1_200), Some(40), Some(1_240)));
/// assert_eq!(usage.model.as_deref(), Some("gpt-4o-mini"));
/// ```
pub fn turn_usage(response: &CreateChatCompletionResponse) -> Option<TurnUsage> {
    Some(usage_by(response.usage.as_ref()?, &response.model))
}

/// `usage` of a completion by `model`, as the session records it.
fn usage_by(usage: &CompletionUsage, model: &str) -> TurnUsage {
    let cached = usage
        .prompt_tokens_details
        .as_ref()
        .and_then(|details| details.cached_tokens)
        .unwrap_or(0)
        .min(usage.prompt_tokens);
    let mut turn = TurnUsage::new()
        .input(u64::from(usage.prompt_tokens - cached))
        .output(u64::from(usage.completion_tokens))
        .total(u64::from(usage.total_tokens))
        .by(PROVIDER, model);
    if cached > 0 {
        turn = turn.cache_read(u64::from(cached));
    }
    turn
}

/// The model's message in a completion (its first choice) as a [`ChatMessage`]: its
/// text and its tool calls. `None` when the response has no choice.
///
/// A host that runs tools appends this and each tool's [`ChatMessage::tool`] result to
/// the conversation and calls the model again, until it answers in text.
pub fn response_message(response: &CreateChatCompletionResponse) -> Option<ChatMessage> {
    let message = &response.choices.first()?.message;
    let tool_calls = message
        .tool_calls
        .iter()
        .flatten()
        .map(|call| match call {
            ChatCompletionMessageToolCalls::Function(call) => ToolCall {
                id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: serde_json::from_str(&call.function.arguments)
                    .unwrap_or_else(|_| Value::String(call.function.arguments.clone())),
            },
            ChatCompletionMessageToolCalls::Custom(call) => ToolCall {
                id: call.id.clone(),
                name: call.custom_tool.name.clone(),
                arguments: Value::String(call.custom_tool.input.clone()),
            },
        })
        .collect();
    let mut reply = ChatMessage::assistant(message.content.clone().unwrap_or_default());
    reply.tool_calls = tool_calls;
    Some(reply)
}

/// A completion as the reply [`Turn::complete`] takes: the text of its first choice
/// (its refusal when it refused; nothing when it has no text), with its usage.
///
/// ```
/// use async_openai::types::chat::CreateChatCompletionResponse;
///
/// let response: CreateChatCompletionResponse = serde_json::from_value(serde_json::json!({
///     "id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
///     "choices": [{"index": 0, "finish_reason": "stop",
///                  "message": {"role": "assistant", "content": "Thursday at 9."}}],
///     "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
/// })).unwrap();
/// let reply = agent_sessions_openai::turn_reply(&response);
/// assert_eq!(reply.payloads[0].text.as_deref(), Some("Thursday at 9."));
/// assert_eq!(reply.usage.unwrap().input, Some(30));
/// ```
pub fn turn_reply(response: &CreateChatCompletionResponse) -> TurnReply {
    let message = response.choices.first().map(|choice| &choice.message);
    let text = message
        .and_then(|m| {
            m.content
                .clone()
                .filter(|t| !t.is_empty())
                .or_else(|| m.refusal.clone())
        })
        .unwrap_or_default();
    let payloads = if text.is_empty() {
        Vec::new()
    } else {
        vec![ReplyPayload::text(text)]
    };
    let reply = TurnReply::payloads(payloads);
    match turn_usage(response) {
        Some(usage) => reply.with_usage(usage),
        None => reply,
    }
}

/// Answers one turn with a chat completion and returns what to send.
///
/// For [`TurnAction::Answer`](agent_sessions::manager::TurnAction::Answer) the model is
/// called with `system` then the conversation ([`Turn::messages_with`]), and its reply
/// and usage complete the turn; group chatter and an acknowledged `/new` are completed
/// without a model call, as [`Turn::complete`] does for them.
///
/// A failed model call fails the turn ([`Turn::fail`]) and returns the error: an input
/// the provider refused ([`failure_of`]: a 4xx answer such as a content filter or a
/// context too long) is dropped from the conversation, so it does not block the session
/// until `/new`; after any other failure (a timeout, a rate limit, a server error) it
/// is kept, and the next turn's model sees it.
///
/// A turn that loses its session's run while the model runs — a newer message
/// interrupted it ([`QueueMode::Interrupt`](agent_sessions::lane::QueueMode::Interrupt)),
/// or another worker took the run over — stops waiting for the model and returns
/// [`agent_sessions::Error::RunLost`]: send nothing. Messages that arrive during the call
/// in a `steer` mode are answered by a follow-up turn (one call has no tool boundary to
/// hand them to; a host that runs tools between calls takes them with
/// [`Turn::steering`]).
pub async fn answer<C: Config>(
    turn: Turn<'_>,
    client: &Client<C>,
    model: &str,
    system: Vec<ChatMessage>,
) -> Result<Vec<ReplyPayload>, Error> {
    if !turn.needs_model() {
        return Ok(turn.complete("").await?);
    }
    let messages = turn.messages_with(system).await?;
    let request = CreateChatCompletionRequest {
        model: model.to_owned(),
        messages: request_messages(&messages),
        ..CreateChatCompletionRequest::default()
    };
    let Some(called) = unless_interrupted(&turn, client.chat().create(request)).await else {
        // Refused: the run is another turn's now.
        return Ok(turn.complete("").await?);
    };
    match called {
        Ok(response) => Ok(turn.complete(turn_reply(&response)).await?),
        Err(error) => {
            turn.fail(failure_of(&error)).await?;
            Err(error.into())
        }
    }
}

/// What `work` gives, unless `turn` loses its session's run first (`None`).
async fn unless_interrupted<T>(
    turn: &Turn<'_>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    let work = std::pin::pin!(work);
    let interruption = std::pin::pin!(turn.interruption());
    match futures_util::future::select(work, interruption).await {
        futures_util::future::Either::Left((done, _)) => Some(done),
        futures_util::future::Either::Right(((), _)) => None,
    }
}

/// [`answer`] with the completion streamed: `on_text` is called with each piece of the
/// reply as it arrives (to show it growing, or a typing indicator); when the stream
/// ends, the whole reply and its usage complete the turn — logged once, through the
/// reply filters — and what to send is returned.
///
/// The request asks for the usage in the stream (`stream_options.include_usage`). A
/// stream that fails, at the start or half way, fails the turn as [`answer`] does and
/// returns the error; the pieces already given to `on_text` are not logged (the user may
/// have seen them: say so if that matters). A turn that loses its run stops reading
/// the stream and returns [`agent_sessions::Error::RunLost`], as [`answer`] does.
///
/// ```no_run
/// use agent_sessions::prelude::*;
/// use async_openai::{config::OpenAIConfig, Client};
///
/// # async fn run(manager: &SessionManager, client: &Client<OpenAIConfig>) -> Result<(), agent_sessions_openai::Error> {
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "Tell me a story")).await?;
/// let system = vec![ChatMessage::system("You are a storyteller.")];
/// let payloads = agent_sessions_openai::answer_streamed(turn, client, "llama3.2", system, |piece| {
///     print!("{piece}"); // as it arrives
/// })
/// .await?;
/// # drop(payloads);
/// # Ok(())
/// # }
/// ```
pub async fn answer_streamed<C: Config>(
    turn: Turn<'_>,
    client: &Client<C>,
    model: &str,
    system: Vec<ChatMessage>,
    mut on_text: impl FnMut(&str),
) -> Result<Vec<ReplyPayload>, Error> {
    if !turn.needs_model() {
        return Ok(turn.complete("").await?);
    }
    let messages = turn.messages_with(system).await?;
    let request = CreateChatCompletionRequest {
        model: model.to_owned(),
        messages: request_messages(&messages),
        stream_options: Some(ChatCompletionStreamOptions {
            include_usage: Some(true),
            include_obfuscation: None,
        }),
        ..CreateChatCompletionRequest::default()
    };
    let Some(started) = unless_interrupted(&turn, client.chat().create_stream(request)).await
    else {
        return Ok(turn.complete("").await?);
    };
    let mut stream = match started {
        Ok(stream) => stream,
        Err(error) => {
            turn.fail(failure_of(&error)).await?;
            return Err(error.into());
        }
    };
    let mut reply = StreamedReply::new();
    loop {
        let Some(next) = unless_interrupted(&turn, stream.next()).await else {
            return Ok(turn.complete("").await?);
        };
        let Some(chunk) = next else { break };
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(error) => {
                turn.fail(failure_of(&error)).await?;
                return Err(error.into());
            }
        };
        if let Some(piece) = reply.push(&chunk) {
            on_text(piece);
        }
    }
    Ok(turn.complete(reply.finish()).await?)
}

/// A turn's reply gathered from a streamed chat completion, chunk by chunk: its text
/// (the first choice's) and the usage the stream reports — for a host that reads the
/// stream itself (`turn_reply` takes a whole response). Ask for the usage with
/// `stream_options.include_usage`.
///
/// ```
/// use async_openai::types::chat::CreateChatCompletionStreamResponse;
///
/// let chunk = |json: &str| -> CreateChatCompletionStreamResponse { serde_json::from_str(json).unwrap() };
/// let mut reply = agent_sessions_openai::StreamedReply::new();
/// let piece = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test",
///     "choices":[{"index":0,"delta":{"content":"Thursday"},"finish_reason":null}]}"#;
/// assert_eq!(reply.push(&chunk(piece)), Some("Thursday"));
/// let usage = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test",
///     "choices":[],"usage":{"prompt_tokens":120,"completion_tokens":7,"total_tokens":127}}"#;
/// assert_eq!(reply.push(&chunk(usage)), None);
/// let reply = reply.finish(); // for `turn.complete(reply)`
/// ```
#[derive(Debug, Default)]
pub struct StreamedReply {
    text: String,
    usage: Option<TurnUsage>,
}

impl StreamedReply {
    /// Nothing gathered yet.
    pub fn new() -> Self {
        StreamedReply::default()
    }

    /// Takes one chunk; returns the text it adds, to show as it arrives.
    pub fn push(&mut self, chunk: &CreateChatCompletionStreamResponse) -> Option<&str> {
        if let Some(reported) = &chunk.usage {
            self.usage = Some(usage_by(reported, &chunk.model));
        }
        let start = self.text.len();
        for choice in chunk.choices.iter().filter(|choice| choice.index == 0) {
            if let Some(piece) = choice.delta.content.as_deref() {
                self.text.push_str(piece);
            }
        }
        Some(&self.text[start..]).filter(|added| !added.is_empty())
    }

    /// The reply for [`Turn::complete`]: the whole text, with the usage if the stream
    /// reported it.
    pub fn finish(self) -> TurnReply {
        let reply = TurnReply::from(self.text);
        match self.usage {
            Some(usage) => reply.with_usage(usage),
            None => reply,
        }
    }
}

/// What to do with the input of a turn whose chat completion failed with `error`:
/// drop it when the provider refused the request itself (a 4xx answer other than a
/// timeout, a conflict or a rate limit: it would refuse it again), else keep it.
///
/// ```
/// use agent_sessions::exactly_once::TurnFailure;
/// use async_openai::error::OpenAIError;
///
/// let invalid = OpenAIError::InvalidArgument("no model".into());
/// assert_eq!(agent_sessions_openai::failure_of(&invalid), TurnFailure::KeepInput);
/// ```
pub fn failure_of(error: &OpenAIError) -> TurnFailure {
    let OpenAIError::ApiError(response) = error else {
        return TurnFailure::KeepInput;
    };
    let status = response.status_code.as_u16();
    let refused = response.status_code.is_client_error() && !matches!(status, 408 | 409 | 429);
    if refused {
        TurnFailure::DropInput
    } else {
        TurnFailure::KeepInput
    }
}

/// The README's examples compile.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
