//! The conversation as the model should see it: role-tagged messages within a token (documented in the parent module).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use std::collections::VecDeque;

use crate::exactly_once::outcome::Marks;
use crate::inbound::attachment::Attachment;
use crate::store::entry::WindowStart;
use crate::transcript::{
    AgentMessage, Content, ContentBlock, LogFields, Offset, Role, TranscriptEntry,
};

/// Who speaks in a [`ChatMessage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions and context for the model.
    System,
    /// The person (or, in a group, the conversation addressed to the agent).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which its result names.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments, as the model gave them.
    pub arguments: Value,
}

/// One message of the conversation, as a chat-completion API takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatMessage {
    /// Who speaks.
    pub role: ChatRole,
    /// What they say.
    pub content: String,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The files a user message came with; its content carries their placeholders.
    /// The model integrations send those with a URL as image or file inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

impl ChatMessage {
    fn new(role: ChatRole, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            attachments: Vec::new(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage::new(ChatRole::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage::new(ChatRole::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        ChatMessage::new(ChatRole::Assistant, content)
    }

    /// A tool's result for the call `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..ChatMessage::new(ChatRole::Tool, content)
        }
    }
}

/// Counts tokens the way the host's model does.
///
/// [`EstimatedTokens`] is the default; a host with the model's tokenizer implements this
/// with it.
pub trait TokenCounter: Send + Sync + std::fmt::Debug {
    /// How many tokens `text` is.
    fn count(&self, text: &str) -> usize;
}

/// A tokenizer-free estimate: one token per four characters, rounded up (OpenClaw's
/// estimate).
///
/// ```
/// use agent_sessions::inbound::{EstimatedTokens, TokenCounter};
///
/// assert_eq!(EstimatedTokens.count(""), 0);
/// assert_eq!(EstimatedTokens.count("hello"), 2);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EstimatedTokens;

impl TokenCounter for EstimatedTokens {
    fn count(&self, text: &str) -> usize {
        text.chars().count().div_ceil(4)
    }
}

/// The tokens each message costs besides its content (role and framing).
pub(crate) const MESSAGE_OVERHEAD_TOKENS: usize = 4;

/// What `message` costs in a prompt: its content, its tool calls and
/// 4 tokens of message overhead (saturating: a counter's huge values never overflow).
pub fn message_tokens(message: &ChatMessage, counter: &dyn TokenCounter) -> usize {
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|call| {
            counter
                .count(&call.name)
                .saturating_add(counter.count(&call.arguments.to_string()))
        })
        .fold(0, usize::saturating_add);
    MESSAGE_OVERHEAD_TOKENS
        .saturating_add(counter.count(&message.content))
        .saturating_add(calls)
}

/// The messages of a transcript, and the summary of its last compaction.
///
/// Only what follows the last compaction is returned (from the entry it names as the
/// first kept, else from the compaction itself); user, assistant and tool-result
/// messages become [`ChatMessage`]s, tool-call blocks become [`ToolCall`]s, and an
/// assistant message with neither text nor tool calls (an aborted run) is left out.
/// Status changes, checkpoints and other custom lines are not conversation. An input
/// dropped by a failed turn ([`TurnFailure::DropInput`](crate::exactly_once::TurnFailure))
/// is left out, and so are the reply parts reported undelivered
/// ([`Delivery::Failed`](crate::exactly_once::Delivery)).
pub fn transcript_messages(entries: &[TranscriptEntry]) -> (Vec<ChatMessage>, Option<String>) {
    let conversation = History::whole(entries, |entry| (Offset::START, entry), &EstimatedTokens);
    (conversation.messages(), conversation.summary)
}

fn compaction_summary(compaction: &TranscriptEntry) -> Option<String> {
    compaction
        .extra
        .get("summary")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn first_kept(compaction: &TranscriptEntry) -> Option<&str> {
    compaction
        .extra
        .get("firstKeptEntryId")
        .and_then(Value::as_str)
}

/// The conversation of a transcript, taken in a line at a time: the summary of its
/// last compaction, the message lines since (or their newest part), and the marks that
/// hide some of them. What [`transcript_messages`] returns for the whole transcript,
/// kept up to date as lines are appended.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    /// The summary of the last compaction.
    pub(crate) summary: Option<String>,
    /// The message lines since the last compaction (its first kept entry on), oldest
    /// first, as chat messages before the marks apply.
    lines: VecDeque<MessageLine>,
    /// The marks among the lines taken in.
    marks: Marks,
    /// Whether message lines since the last compaction were let go from the front.
    trimmed: bool,
    /// What `lines` cost, by [`message_tokens`], marks aside.
    tokens: usize,
}

/// A message of the conversation, with the id of the transcript line it comes from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistoryMessage {
    pub(crate) id: Option<String>,
    pub(crate) message: ChatMessage,
}

/// One message line of a [`History`].
#[derive(Debug, Clone)]
struct MessageLine {
    offset: Offset,
    id: Option<String>,
    /// The message-log fields of a reply, whose parts a delivery report names: only its
    /// [`parts`](LogFields::parts) are kept.
    log: Option<LogFields>,
    message: ChatMessage,
    tokens: usize,
}

/// What a turn asks of a [`History`]: its newest messages, back to the first
/// that makes those before the current one cost more than `tokens` or number `count`
/// (else all of them), without the line at `skip`. Those are enough for
/// [`fit_to_budget`] within `tokens` (and for a window of `count` messages) to give
/// what it gives for all of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    pub(crate) skip: Option<Offset>,
    pub(crate) tokens: usize,
    pub(crate) count: Option<usize>,
    /// Whether the newest message is the current one (not history).
    pub(crate) newest_is_current: bool,
    /// After how many failed turns an input waiting for a reply is set aside.
    pub(crate) max_attempts: u32,
}

/// A compaction that names a first kept entry the conversation no longer holds: only
/// the whole transcript says where its conversation starts.
#[derive(Debug)]
pub(crate) struct NeedsWholeTranscript;

impl History {
    /// The conversation of a whole transcript, each of whose `lines` is an entry at
    /// its offset.
    pub(crate) fn whole<T>(
        lines: &[T],
        line: impl Fn(&T) -> (Offset, &TranscriptEntry),
        counter: &dyn TokenCounter,
    ) -> History {
        let mut conversation = History::default();
        let mut start = 0;
        if let Some(at) = lines.iter().rposition(|l| line(l).1.kind == "compaction") {
            let compaction = line(&lines[at]).1;
            conversation.summary = compaction_summary(compaction);
            start = first_kept(compaction)
                .and_then(|id| {
                    lines[..at]
                        .iter()
                        .position(|l| line(l).1.id.as_deref() == Some(id))
                })
                .unwrap_or(at + 1);
        }
        for l in &lines[start..] {
            let (offset, entry) = line(l);
            conversation.add_line(offset, entry, counter);
        }
        conversation
    }

    /// Says that message lines before those taken in were not read: asked for more
    /// than it holds, [`newest`](Self::newest) answers `None`.
    pub(crate) fn read_from_the_end(&mut self) {
        self.trimmed = true;
    }

    /// Whether the conversation of `lines` (the end of a transcript) starts within
    /// them: they hold the last compaction and the entry it keeps from.
    pub(crate) fn starts_within<T>(
        lines: &[T],
        line: impl Fn(&T) -> (Offset, &TranscriptEntry),
    ) -> bool {
        let Some(at) = lines.iter().rposition(|l| line(l).1.kind == "compaction") else {
            return false;
        };
        first_kept(line(&lines[at]).1).is_none_or(|id| {
            lines[..at]
                .iter()
                .any(|l| line(l).1.id.as_deref() == Some(id))
        })
    }

    /// Takes in the line at `offset`, appended after the lines taken in so far.
    pub(crate) fn add(
        &mut self,
        offset: Offset,
        entry: &TranscriptEntry,
        counter: &dyn TokenCounter,
    ) -> std::result::Result<(), NeedsWholeTranscript> {
        if entry.kind != "compaction" {
            self.add_line(offset, entry, counter);
            return Ok(());
        }
        self.summary = compaction_summary(entry);
        let kept = match first_kept(entry) {
            None => self.lines.len(),
            Some(id) => self
                .lines
                .iter()
                .position(|line| line.id.as_deref() == Some(id))
                .ok_or(NeedsWholeTranscript)?,
        };
        for line in self.lines.drain(..kept) {
            self.tokens -= line.tokens;
        }
        self.trimmed = false;
        let lines = &self.lines;
        self.marks
            .retain(|id| lines.iter().any(|line| line.id.as_deref() == Some(id)));
        Ok(())
    }

    /// Takes in a line that is not a compaction.
    fn add_line(&mut self, offset: Offset, entry: &TranscriptEntry, counter: &dyn TokenCounter) {
        if Marks::is_failure(entry) {
            self.count_attempt();
        }
        if self.marks.add(entry) || entry.kind != "message" {
            return;
        }
        let Some(message) = &entry.message else {
            return;
        };
        let text = message.text();
        let message = match &message.role {
            Role::User => ChatMessage {
                attachments: entry
                    .log
                    .as_ref()
                    .map(|log| log.attachments.clone())
                    .unwrap_or_default(),
                ..ChatMessage::user(text)
            },
            Role::Assistant => ChatMessage {
                tool_calls: tool_calls(message.content.as_ref()),
                ..ChatMessage::assistant(text)
            },
            Role::ToolResult => match message.extra.get("toolCallId").and_then(Value::as_str) {
                Some(call) => ChatMessage::tool(call, text),
                None => return,
            },
            Role::Other(_) => return,
        };
        let tokens = message_tokens(&message, counter);
        self.tokens = self.tokens.saturating_add(tokens);
        self.lines.push_back(MessageLine {
            offset,
            id: entry.id.clone(),
            log: entry
                .log
                .as_ref()
                .filter(|_| message.role == ChatRole::Assistant)
                .map(|log| LogFields {
                    parts: log.parts.clone(),
                    ..LogFields::default()
                }),
            message,
            tokens,
        });
    }

    /// Counts a failed turn as one more attempt at each input still waiting for a
    /// reply: the failed turn's own and those before it, back to the model's last reply
    /// (a kept input is part of every later turn's input until one is answered).
    fn count_attempt(&mut self) {
        for line in self.lines.iter().rev() {
            match (line.message.role, &line.id) {
                // A reply the person got (some of it): what came before was answered.
                (ChatRole::Assistant, id)
                    if self
                        .marks
                        .delivered_text(
                            id.as_deref(),
                            line.log.as_ref(),
                            line.message.content.clone(),
                        )
                        .is_some_and(|text| !text.trim().is_empty()) =>
                {
                    break
                }
                (ChatRole::User, Some(id)) => {
                    *self.marks.attempts.entry(id.clone()).or_default() += 1;
                }
                _ => {}
            }
        }
    }

    /// Lets go of the oldest message lines while the rest cost more than `keep`
    /// tokens.
    pub(crate) fn trim(&mut self, keep: usize) {
        while let Some(front) = self.lines.front() {
            if self.tokens - front.tokens <= keep {
                break;
            }
            self.tokens -= front.tokens;
            self.lines.pop_front();
            self.trimmed = true;
        }
    }

    /// What the conversation holds, in bytes of text (about).
    pub(crate) fn size(&self) -> usize {
        self.lines
            .iter()
            .map(|line| line.message.content.len() + 64)
            .sum()
    }

    /// The messages, oldest first.
    fn messages(&self) -> Vec<ChatMessage> {
        let mut messages: Vec<ChatMessage> = Vec::new();
        for line in self.lines.iter().rev() {
            let message = self
                .message(line, DEFAULT_MAX_ANSWER_ATTEMPTS)
                .or_else(|| self.left_out_before(line, messages.last()));
            messages.extend(message);
        }
        messages.reverse();
        messages
    }

    /// What the model sees of `line`, a dropped input, when `after` (the message the
    /// model sees next) is a step its run took (a tool call): a note that a message
    /// was left out, so the steps follow a person's message as providers require and
    /// the model knows what they were for — never the input itself.
    fn left_out_before(
        &self,
        line: &MessageLine,
        after: Option<&ChatMessage>,
    ) -> Option<ChatMessage> {
        let dropped = line
            .id
            .as_deref()
            .is_some_and(|id| self.marks.dropped.contains(id));
        let steps_follow = after
            .is_some_and(|after| after.role == ChatRole::Assistant && !after.tool_calls.is_empty());
        (line.message.role == ChatRole::User && dropped && steps_follow)
            .then(|| ChatMessage::user(LEFT_OUT_NOTE))
    }

    /// The newest messages `want` asks for, oldest first; `None` when they take lines
    /// this conversation let go of.
    pub(crate) fn newest(
        &self,
        want: Want,
        counter: &dyn TokenCounter,
    ) -> Option<Vec<HistoryMessage>> {
        let mut newest = Vec::new();
        // What the messages before the current one cost, and how many they are.
        let (mut cost, mut before) = (0usize, 0usize);
        let enough = |cost: usize, before: usize| {
            cost > want.tokens || want.count.is_some_and(|count| before >= count)
        };
        for line in self.lines.iter().rev() {
            if enough(cost, before) {
                break;
            }
            if Some(line.offset) == want.skip {
                continue;
            }
            let after = newest.last().map(|kept: &HistoryMessage| &kept.message);
            let message = self
                .message(line, want.max_attempts)
                .or_else(|| self.left_out_before(line, after));
            if let Some(message) = message {
                if !(want.newest_is_current && newest.is_empty()) {
                    cost = cost.saturating_add(message_tokens(&message, counter));
                    before += 1;
                }
                newest.push(HistoryMessage {
                    id: line.id.clone(),
                    message,
                });
            }
        }
        if self.trimmed && !enough(cost, before) {
            return None;
        }
        newest.reverse();
        Some(newest)
    }

    /// `line` as the model sees it, once the marks apply: nothing for a dropped input,
    /// a note for an input set aside after `max_attempts` failed turns, a reply without
    /// its undelivered parts (nothing when none was delivered and it calls no tool).
    fn message(&self, line: &MessageLine, max_attempts: u32) -> Option<ChatMessage> {
        let id = line.id.as_deref();
        if id.is_some_and(|id| self.marks.dropped.contains(id)) {
            return None;
        }
        let message = &line.message;
        if message.role == ChatRole::User {
            let text = id
                .and_then(|id| self.marks.edited.get(id))
                .unwrap_or(&message.content);
            let attempts = id.and_then(|id| self.marks.attempts.get(id)).copied();
            return Some(match attempts.filter(|n| *n >= max_attempts.max(1)) {
                Some(attempts) => ChatMessage::user(set_aside_note(text, attempts)),
                None => ChatMessage {
                    attachments: message.attachments.clone(),
                    ..ChatMessage::user(text)
                },
            });
        }
        if message.role != ChatRole::Assistant {
            return Some(message.clone());
        }
        let text = match self
            .marks
            .delivered_text(id, line.log.as_ref(), message.content.clone())
        {
            Some(text) => text,
            None if message.tool_calls.is_empty() => return None,
            None => String::new(),
        };
        (!text.trim().is_empty() || !message.tool_calls.is_empty()).then(|| ChatMessage {
            content: text,
            tool_calls: message.tool_calls.clone(),
            ..ChatMessage::assistant("")
        })
    }
}

/// What the model sees in place of a dropped input that its run's steps follow.
const LEFT_OUT_NOTE: &str =
    "[An earlier message was left out of this conversation; the steps taken for it follow.]";

/// How many failed turns an input waiting for a reply survives before it is set aside,
/// unless the manager says otherwise.
pub(crate) const DEFAULT_MAX_ANSWER_ATTEMPTS: u32 = 3;

/// The most of a set-aside input its note quotes, in characters.
const SET_ASIDE_QUOTE_CHARS: usize = 200;

/// What the model sees in place of an input set aside after `attempts` failed turns:
/// that it was not answered, and its beginning, so the model can say so.
fn set_aside_note(input: &str, attempts: u32) -> String {
    let mut quote: String = input.chars().take(SET_ASIDE_QUOTE_CHARS).collect();
    if quote.len() < input.len() {
        quote.push('…');
    }
    let attempts = match attempts {
        1 => "1 failed attempt".to_owned(),
        n => format!("{n} failed attempts"),
    };
    format!("[This earlier message was set aside unanswered after {attempts} to answer it: \"{quote}\"]")
}

fn tool_calls(content: Option<&Content>) -> Vec<ToolCall> {
    let Some(Content::Blocks(blocks)) = content else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|block| block.is_tool_call())
        .map(|block| {
            let text = |field: &str| {
                block
                    .extra
                    .get(field)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            ToolCall {
                id: text("id"),
                name: text("name"),
                arguments: block.extra.get("arguments").cloned().unwrap_or(Value::Null),
            }
        })
        .collect()
}

/// `messages` as the transcript lines that [`transcript_messages`] reads back as them,
/// dated `at`: user and assistant messages (an assistant's tool calls as `toolCall`
/// blocks, OpenClaw's shape), and tools' results (`toolResult` lines naming their call,
/// and the tool when a call among `messages` names it). System messages are
/// configuration, not conversation: they have no line.
///
/// [`Session::append_chat`](crate::manager::Session::append_chat)
/// appends them to a session; this is the conversion alone.
pub(crate) fn transcript_lines(
    messages: &[ChatMessage],
    at: DateTime<Utc>,
) -> Vec<TranscriptEntry> {
    let tool_names: std::collections::HashMap<&str, &str> = messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .map(|call| (call.id.as_str(), call.name.as_str()))
        .collect();
    let timestamp = u64::try_from(at.timestamp_millis()).ok();
    let line = |role: Role, blocks: Vec<ContentBlock>, extra: Map<String, Value>| {
        let message = AgentMessage {
            role,
            content: Some(Content::Blocks(blocks)),
            api: None,
            provider: None,
            model: None,
            usage: None,
            stop_reason: None,
            timestamp,
            extra,
        };
        TranscriptEntry::message(message, at)
    };
    messages
        .iter()
        .filter_map(|message| match message.role {
            ChatRole::System => None,
            ChatRole::User => Some(TranscriptEntry::user_text(message.content.clone(), at)),
            ChatRole::Assistant => {
                let mut blocks = Vec::new();
                if !message.content.is_empty() {
                    blocks.push(ContentBlock::text(message.content.clone()));
                }
                for call in &message.tool_calls {
                    let mut extra = Map::new();
                    extra.insert("id".into(), Value::String(call.id.clone()));
                    extra.insert("name".into(), Value::String(call.name.clone()));
                    extra.insert("arguments".into(), call.arguments.clone());
                    blocks.push(ContentBlock {
                        kind: "toolCall".into(),
                        text: None,
                        extra,
                    });
                }
                let mut entry = line(Role::Assistant, blocks, Map::new());
                if let Some(agent) = entry
                    .message
                    .as_mut()
                    .filter(|_| !message.tool_calls.is_empty())
                {
                    agent.stop_reason = Some("toolUse".into());
                }
                Some(entry)
            }
            ChatRole::Tool => {
                let call = message.tool_call_id.clone().unwrap_or_default();
                let mut extra = Map::new();
                if let Some(name) = tool_names.get(call.as_str()) {
                    extra.insert("toolName".into(), Value::String((*name).to_owned()));
                }
                extra.insert("toolCallId".into(), Value::String(call));
                let blocks = vec![ContentBlock::text(message.content.clone())];
                Some(line(Role::ToolResult, blocks, extra))
            }
        })
        .collect()
}

/// The system message that stands for history cut from the prompt.
pub(crate) fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::system(format!(
        "Summary of the conversation so far:\n{}",
        summary.trim()
    ))
}

/// The prompt for one turn within `budget` tokens: `system`, then the summary when
/// history was cut (or compacted), then the newest `history` that fits, then `current`
/// — always last, and cut short (ending in `…`) only when it alone does not fit.
///
/// History is kept from a user message on, so no tool result or reply is left without
/// what it answers. Every message is counted by [`message_tokens`]. A budget too small
/// for the system messages and a few tokens of the current message is refused
/// ([`Error::InvalidOption`]).
pub fn fit_to_budget(
    system: &[ChatMessage],
    summary: Option<&str>,
    history: Vec<ChatMessage>,
    current: ChatMessage,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Result<Vec<ChatMessage>> {
    fit_sliding(system, summary, history, current, budget, counter).map(|(messages, _)| messages)
}

/// [`fit_to_budget`], and the `history` messages it cut (the oldest).
pub(crate) fn fit_sliding(
    system: &[ChatMessage],
    summary: Option<&str>,
    mut history: Vec<ChatMessage>,
    current: ChatMessage,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Result<(Vec<ChatMessage>, Vec<ChatMessage>)> {
    let (current, mut left) = fit_current(system, current, budget, counter)?;
    let summary = summary
        .filter(|s| !s.trim().is_empty())
        .map(summary_message);
    let history_tokens: Vec<usize> = history.iter().map(|m| message_tokens(m, counter)).collect();
    let all = history_tokens
        .iter()
        .copied()
        .fold(0, usize::saturating_add);
    let mut kept_from = 0;
    let mut summary_kept = None;
    if all > left {
        // History is cut: the summary (when it fits) goes first, then the newest turns.
        if let Some(summary) = summary {
            let cost = message_tokens(&summary, counter);
            if cost <= left {
                left -= cost;
                summary_kept = Some(summary);
            }
        }
        kept_from = history.len();
        let mut used: usize = 0;
        while kept_from > 0 && used.saturating_add(history_tokens[kept_from - 1]) <= left {
            kept_from -= 1;
            used += history_tokens[kept_from];
        }
    }
    // Whatever is kept starts at a user message: no reply (a reset's acknowledgement, a
    // reply whose question was compacted away) or tool result without what it answers.
    while kept_from < history.len() && history[kept_from].role != ChatRole::User {
        kept_from += 1;
    }
    let cut: Vec<ChatMessage> = history.drain(..kept_from).collect();
    let mut messages = system.to_vec();
    messages.extend(summary_kept);
    messages.extend(history);
    messages.push(current);
    Ok((messages, cut))
}

/// How the history in a turn's model input gives way once the conversation outgrows the
/// token budget.
///
/// ```
/// use agent_sessions::inbound::HistoryWindow;
/// use agent_sessions::prelude::*;
///
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .history_window(HistoryWindow::Stable { keep_percent: 60 })
///     .build()?;
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryWindow {
    /// The default (`keep_percent: 50`): when the conversation no longer fits, its older
    /// part is cut in one block, so that the history kept fills at most `keep_percent`
    /// of the room for history (only the last exchange when not one fits there); the
    /// context summary as it is at the cut stands for what was cut. The next turns append to that history until it fills the budget, then
    /// it is cut again. Between two cuts each turn's input begins with the whole of the
    /// previous turn's input (the system messages, the summary and the history stay the
    /// same), so a provider's prompt cache can reuse it.
    Stable {
        /// The share of the room for history kept after a cut, in percent (1–99; other
        /// values are taken as the nearest).
        keep_percent: u8,
    },
    /// Every turn keeps the newest history that fits, with the context summary as it is
    /// now standing for the rest: the most history each turn, but once the budget is
    /// reached the input's first messages change every turn and no provider can reuse
    /// a prefix of it.
    Sliding,
}

impl Default for HistoryWindow {
    fn default() -> Self {
        HistoryWindow::Stable { keep_percent: 50 }
    }
}

/// [`fit_to_budget`] for a [`HistoryWindow::Stable`] window that starts at `start`
/// (as the session's entry records its last cut): the history from that line on, with
/// the summary recorded at the cut, while they fit with `current`; all of the history
/// while it fits and nothing was cut; else a new cut, back to `keep_percent` of the
/// room (or, when not one exchange fits there, the last exchange), with `summary` (the
/// context summary now) standing for what goes. `current_line` is the id of the
/// current message's line, where a window that keeps no history starts. Returns the
/// messages, where the window they use starts (`None`: uncut), and the history
/// messages before that start.
#[allow(clippy::too_many_arguments)] // the inputs of fit_to_budget, and the window
pub(crate) fn fit_stable(
    system: &[ChatMessage],
    start: Option<&WindowStart>,
    summary: Option<&str>,
    mut history: Vec<HistoryMessage>,
    (current, current_line): (ChatMessage, Option<&str>),
    budget: usize,
    keep_percent: u8,
    counter: &dyn TokenCounter,
) -> Result<(Vec<ChatMessage>, Option<WindowStart>, Vec<HistoryMessage>)> {
    let (current, left) = fit_current(system, current, budget, counter)?;
    let tokens: Vec<usize> = history
        .iter()
        .map(|m| message_tokens(&m.message, counter))
        .collect();
    let tail = |from: usize| {
        tokens[from..]
            .iter()
            .copied()
            .fold(0, usize::saturating_add)
    };
    let summary_of = |text: Option<&str>| {
        text.filter(|s| !s.trim().is_empty())
            .map(|s| (summary_message(s), s.to_owned()))
    };
    let cost = |summary: &Option<(ChatMessage, String)>| {
        summary
            .as_ref()
            .map_or(0, |(message, _)| message_tokens(message, counter))
    };
    // The window as the last cut left it, while it fits.
    let kept = start.and_then(|start| {
        let from = history
            .iter()
            .position(|m| m.id.as_deref() == Some(start.line.as_str()))?;
        let summary = summary_of(start.summary.as_deref());
        (cost(&summary).saturating_add(tail(from)) <= left).then_some((from, summary))
    });
    let was_kept = kept.is_some();
    let (mut from, summary) = match kept {
        Some(kept) => kept,
        None if tail(0) <= left => (0, None),
        None => {
            // A cut: back to the mark, from a person's message on.
            let mut summary = summary_of(summary);
            if cost(&summary) > left {
                summary = None;
            }
            let room = left - cost(&summary);
            let mark = room / 100 * usize::from(keep_percent.clamp(1, 99));
            let newest_within = |limit: usize| {
                let (mut from, mut used) = (history.len(), 0usize);
                while from > 0 && used.saturating_add(tokens[from - 1]) <= limit {
                    from -= 1;
                    used += tokens[from];
                }
                while from < history.len() && history[from].message.role != ChatRole::User {
                    from += 1;
                }
                from
            };
            let mut from = newest_within(mark);
            if from == history.len() {
                // Not one exchange within the mark: the last one, if it fits the room
                // (what was just said is kept; the room left lets the window grow).
                from = history
                    .iter()
                    .rposition(|m| m.message.role == ChatRole::User)
                    .filter(|&last| tail(last) <= room)
                    .unwrap_or(history.len());
            }
            (from, summary)
        }
    };
    // Whatever is kept starts at a user message (as in `fit_to_budget`).
    while from < history.len() && history[from].message.role != ChatRole::User {
        from += 1;
    }
    let uncut = !was_kept && tail(0) <= left;
    let window = if uncut {
        None
    } else {
        // A cut that keeps no history starts the window at the current message's line.
        let line = match history.get(from) {
            Some(first) => first.id.clone(),
            None => current_line.map(str::to_owned),
        };
        line.map(|line| WindowStart {
            line,
            summary: summary.as_ref().map(|(_, text)| text.clone()),
            summary_until: None,
        })
    };
    let before: Vec<HistoryMessage> = history.drain(..from).collect();
    let mut messages = system.to_vec();
    messages.extend(summary.map(|(message, _)| message));
    messages.extend(history.into_iter().map(|m| m.message));
    messages.push(current);
    Ok((messages, window, before))
}

/// `current` within what `budget` leaves after `system`, and the tokens left for the
/// rest; a budget too small for both is refused.
fn fit_current(
    system: &[ChatMessage],
    current: ChatMessage,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Result<(ChatMessage, usize)> {
    let too_small = || Error::InvalidOption {
        option: "token budget",
        problem: "too small for the system prompt and the current message",
    };
    let system_tokens = system
        .iter()
        .map(|m| message_tokens(m, counter))
        .fold(0, usize::saturating_add);
    let available = budget.checked_sub(system_tokens).ok_or_else(too_small)?;
    let current = fit_message(current, available, counter).ok_or_else(too_small)?;
    let left = available - message_tokens(&current, counter);
    Ok((current, left))
}

/// `message` cut short to fit `budget` tokens, or `None` when not even its first
/// character does.
fn fit_message(
    mut message: ChatMessage,
    budget: usize,
    counter: &dyn TokenCounter,
) -> Option<ChatMessage> {
    if message_tokens(&message, counter) <= budget {
        return Some(message);
    }
    let chars: Vec<char> = message.content.chars().collect();
    let cut = |n: usize| -> String {
        let mut text: String = chars[..n].iter().collect();
        text.push('…');
        text
    };
    // The longest prefix that fits, if token counts grow with the text; whatever the
    // counter does, `lo` is always a length that was seen to fit.
    let fits = |n: usize, message: &mut ChatMessage| {
        message.content = cut(n);
        message_tokens(message, counter) <= budget
    };
    let shortest = 1.min(chars.len());
    if !fits(shortest, &mut message) {
        return None;
    }
    let (mut lo, mut hi) = (shortest, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid, &mut message) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    message.content = cut(lo);
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::TranscriptEntry;

    fn line(json: &str) -> TranscriptEntry {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_transcript_becomes_chat_messages_after_its_last_compaction() {
        let entries = [
            line(
                r#"{"type":"message","id":"a1","parentId":null,"message":{"role":"user","content":"old question"}}"#,
            ),
            line(
                r#"{"type":"message","id":"a2","parentId":"a1","message":{"role":"assistant","content":[{"type":"text","text":"old answer"}]}}"#,
            ),
            line(
                r#"{"type":"message","id":"a3","parentId":"a2","message":{"role":"user","content":"kept question"}}"#,
            ),
            line(
                r#"{"type":"compaction","id":"a4","parentId":"a3","summary":"Talked about old things","firstKeptEntryId":"a3","tokensBefore":500}"#,
            ),
            line(
                r#"{"type":"message","id":"a5","parentId":"a4","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"shifts","arguments":{"day":"thu"}}]}}"#,
            ),
            line(
                r#"{"type":"message","id":"a6","parentId":"a5","message":{"role":"toolResult","toolCallId":"c1","toolName":"shifts","content":[{"type":"text","text":"9am"}]}}"#,
            ),
            line(
                r#"{"type":"custom","id":"a7","parentId":"a6","customType":"agent-sessions.status","data":{"status":"idle"}}"#,
            ),
            line(
                r#"{"type":"message","id":"a8","parentId":"a7","message":{"role":"assistant","content":[],"stopReason":"aborted"}}"#,
            ),
            line(
                r#"{"type":"message","id":"a9","parentId":"a8","message":{"role":"assistant","content":[{"type":"text","text":"Thursday, 9am."}]}}"#,
            ),
        ];
        let (messages, summary) = transcript_messages(&entries);
        assert_eq!(summary.as_deref(), Some("Talked about old things"));
        assert_eq!(
            messages,
            vec![
                ChatMessage::user("kept question"),
                ChatMessage {
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "shifts".into(),
                        arguments: serde_json::json!({"day": "thu"}),
                    }],
                    ..ChatMessage::assistant("")
                },
                ChatMessage::tool("c1", "9am"),
                ChatMessage::assistant("Thursday, 9am."),
            ]
        );
    }

    #[test]
    fn budgets_at_and_around_the_limit() {
        let counter = EstimatedTokens;
        // Each of these costs 4 + 2 = 6 tokens ("abcdefgh" is 8 characters).
        let turn = |role: ChatRole| ChatMessage::new(role, "abcdefgh");
        let history = vec![
            turn(ChatRole::User),
            turn(ChatRole::Assistant),
            turn(ChatRole::User),
            turn(ChatRole::Assistant),
        ];
        let current = ChatMessage::user("abcdefgh");
        let system = [ChatMessage::system("abcd")]; // 5 tokens
        let summary = "abcd"; // the summary message costs 4 + 10 = 14 tokens
                              // (budget, messages kept: system, summary?, history count, current cut?)
        type Kept = Option<(bool, usize, bool)>;
        let cases: [(usize, Kept); 8] = [
            (35, Some((false, 4, false))), // 5 + 24 + 6: everything, exactly
            (34, Some((true, 0, false))), // cut: 5 + 14 + 6 leaves 9, one turn of two is not a start
            (36, Some((false, 4, false))),
            (25, Some((true, 0, false))), // the summary and the current message only
            (24, Some((false, 2, false))), // no room for the summary: the newest two turns
            (11, Some((false, 0, false))), // system + current
            (10, Some((false, 0, true))), // the current message cut short
            (9, None),                    // not even one character of it
        ];
        for (budget, expected) in cases {
            let got = fit_to_budget(
                &system,
                Some(summary),
                history.clone(),
                current.clone(),
                budget,
                &counter,
            );
            let Some((with_summary, kept, cut)) = expected else {
                assert!(
                    matches!(got, Err(Error::InvalidOption { .. })),
                    "budget {budget}: {got:?}"
                );
                continue;
            };
            let got = got.unwrap();
            let total: usize = got.iter().map(|m| message_tokens(m, &counter)).sum();
            assert!(total <= budget, "budget {budget}: {total} tokens");
            assert_eq!(got[0], system[0], "budget {budget}");
            assert_eq!(
                got.get(1) == Some(&summary_message(summary)),
                with_summary,
                "budget {budget}: {got:?}"
            );
            let history_kept = got.len() - 2 - usize::from(with_summary);
            assert_eq!(history_kept, kept, "budget {budget}: {got:?}");
            let last = got.last().unwrap();
            assert_eq!(last.role, ChatRole::User);
            assert_eq!(
                last.content != current.content,
                cut,
                "budget {budget}: {last:?}"
            );
        }
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn transcript_lines() {
        use crate::inbound::chat::{transcript_lines, transcript_messages, ChatMessage, ToolCall};

        let mut call = ChatMessage::assistant("");
        call.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "shifts".into(),
            arguments: serde_json::json!({"day": "thu"}),
        });
        let run = [call, ChatMessage::tool("call_1", "Thursday 9-17")];
        let lines = transcript_lines(&run, chrono::Utc::now());
        assert_eq!(lines.len(), 2);
        assert_eq!(transcript_messages(&lines).0, run);
    }
}
