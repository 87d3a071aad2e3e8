//! The lines of a transcript, in the shapes pi-coding-agent and OpenClaw write.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::freshness::clock::to_millis;

/// The transcript format version this crate writes (pi-coding-agent's
/// `CURRENT_SESSION_VERSION`).
pub(crate) const TRANSCRIPT_VERSION: u32 = 3;

/// The `customType` of status-change entries this crate writes.
pub(crate) const STATUS_CUSTOM_TYPE: &str = "agent-sessions.status";
/// The `customType` of checkpoint entries this crate writes.
pub(crate) const CHECKPOINT_CUSTOM_TYPE: &str = "agent-sessions.checkpoint";

/// `2026-02-06T10:00:01.000Z`, as JavaScript's `Date#toISOString` writes it.
pub(crate) fn iso_timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The first line of a transcript.
///
/// ```
/// use agent_sessions::transcript::SessionHeader;
///
/// let line = r#"{"type":"session","version":3,"id":"0f5d59ee","timestamp":"2026-02-06T10:00:00.000Z","cwd":"/srv/bot"}"#;
/// let header: SessionHeader = serde_json::from_str(line)?;
/// assert_eq!(header.id, "0f5d59ee");
/// assert_eq!(serde_json::to_string(&header)?, line);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Always `session`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The format version (3; older files may hold other values).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub version: Value,
    /// The session id.
    pub id: String,
    /// When the transcript was created (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// The working directory of the process that created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The transcript this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<String>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionHeader {
    /// A header for `session_id`, created `at`, in the current working directory.
    pub fn new(session_id: impl Into<String>, at: DateTime<Utc>) -> Self {
        SessionHeader {
            kind: "session".into(),
            version: Value::from(TRANSCRIPT_VERSION),
            id: session_id.into(),
            timestamp: Some(iso_timestamp(at)),
            cwd: std::env::current_dir()
                .ok()
                .map(|dir| dir.to_string_lossy().into_owned()),
            parent_session: None,
            extra: Map::new(),
        }
    }
}

/// Who wrote a message (`message.role`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    ToolResult,
    /// Any other role pi writes (`custom`, `bashExecution`, …), kept as written.
    Other(String),
}

impl Role {
    /// The role as written.
    pub fn as_str(&self) -> &str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::Other(other) => other,
        }
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match String::deserialize(deserializer)?.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "toolResult" => Role::ToolResult,
            other => Role::Other(other.to_owned()),
        })
    }
}

/// A message's content: a plain string, or content blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string (pi writes user messages this way).
    Text(String),
    /// Typed blocks: `text`, `image`, `thinking`, `toolCall`, …
    Blocks(Vec<ContentBlock>),
}

impl Content {
    /// The text of the content: the string, or the `text` blocks joined by newlines.
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(|block| block.text.as_deref().filter(|_| block.kind == "text"))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One content block. Known kinds are `text` (with `text`), `image` (`data`,
/// `mimeType`), `thinking` and `toolCall` (`id`, `name`, `arguments`); their other
/// fields are in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContentBlock {
    /// The block's kind.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The block's other fields, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock {
            kind: "text".into(),
            text: Some(text.into()),
            extra: Map::new(),
        }
    }

    /// An image block (base64 `data` of `mime_type`).
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        let mut extra = Map::new();
        extra.insert("data".into(), Value::String(data.into()));
        extra.insert("mimeType".into(), Value::String(mime_type.into()));
        ContentBlock {
            kind: "image".into(),
            text: None,
            extra,
        }
    }

    /// Whether this is a tool call.
    pub(crate) fn is_tool_call(&self) -> bool {
        self.kind == "toolCall"
    }
}

/// Writes a float as JavaScript's `JSON.stringify` does: without a fraction when it has
/// none (`0`, not `0.0`), so costs OpenClaw wrote round-trip unchanged.
fn js_number<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if value.fract() == 0.0 && value.abs() < EXACT {
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

/// Token cost in currency units.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Input cost.
    #[serde(default, serialize_with = "js_number")]
    pub input: f64,
    /// Output cost.
    #[serde(default, serialize_with = "js_number")]
    pub output: f64,
    /// Cache read cost.
    #[serde(default, serialize_with = "js_number")]
    pub cache_read: f64,
    /// Cache write cost.
    #[serde(default, serialize_with = "js_number")]
    pub cache_write: f64,
    /// Total.
    #[serde(default, serialize_with = "js_number")]
    pub total: f64,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token usage of an assistant message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub input: u64,
    /// Output tokens.
    #[serde(default)]
    pub output: u64,
    /// Cache read tokens.
    #[serde(default)]
    pub cache_read: u64,
    /// Cache write tokens.
    #[serde(default)]
    pub cache_write: u64,
    /// Total tokens as the provider reports them.
    #[serde(default)]
    pub total_tokens: u64,
    /// Cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    /// All zero, with a zero cost (what OpenClaw writes for delivery mirrors).
    pub(crate) fn zero() -> Self {
        Usage {
            cost: Some(Cost::default()),
            ..Usage::default()
        }
    }
}

/// The message of a `message` entry (pi's `AgentMessage`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMessage {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// The API used (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The provider (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Token usage (assistant messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why generation stopped (`stop`, `length`, `toolUse`, `error`, `aborted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// When, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// Other fields (`toolCallId`, `toolName`, `isError`, `errorMessage`, …), kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AgentMessage {
    fn new(role: Role, content: Content, at: DateTime<Utc>) -> Self {
        AgentMessage {
            role,
            content: Some(content),
            api: None,
            provider: None,
            model: None,
            usage: None,
            stop_reason: None,
            timestamp: Some(to_millis(at)),
            extra: Map::new(),
        }
    }

    /// The message's text (see [`Content::text`]).
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    /// How many tool calls the message makes.
    pub fn tool_calls(&self) -> usize {
        match &self.content {
            Some(Content::Blocks(blocks)) => blocks.iter().filter(|b| b.is_tool_call()).count(),
            _ => 0,
        }
    }
}

/// Whether a logged message came in or went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From a person to the agent.
    Inbound,
    /// From the agent to a person.
    Outbound,
}

/// The message-log fields this crate adds to a `message` entry: who, with which agent,
/// which way, on which channel, how long it took.
///
/// They sit in the entry's `log` object; pi-coding-agent and OpenClaw ignore it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogFields {
    /// The message's own id, a UUID given when it is logged (RABS keys its message rows
    /// by one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// In or out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// The session key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The canonical person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_id: Option<String>,
    /// The raw id the message came with, where the person is known by another (a
    /// canonical id the raw one is linked to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_person_id: Option<String>,
    /// The agent (variant) name, e.g. `reggie_oc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The agent identity its variants share, e.g. `reggie`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_identity: Option<String>,
    /// The channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Processing time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processing_ms: Option<u64>,
    /// Tool calls made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls_count: Option<u64>,
    /// Correlates an inbound message with its replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Which delivered message an inbound line is, across redeliveries: its channel,
    /// account, chat and message id (`telegram:default:direct:42:7`), written by
    /// [`SessionManager::turn`](crate::SessionManager::turn) for a message with a
    /// message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound_id: Option<String>,
    /// Delivered messages, as [`inbound_id`](Self::inbound_id) names them: on an
    /// inbound line, the messages it carries besides its own (those that waited during
    /// a run, which a follow-up turn answers together: [`crate::lane`]); on a reply,
    /// every message it answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collected: Vec<String>,
    /// Where each payload of a reply is in the line's text, by payload: its byte range
    /// `[start, end]`, or `null` for a payload with no text. Written by
    /// [`Turn::complete`](crate::manager::Turn::complete), so that a delivery report
    /// names exactly one payload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Option<[usize; 2]>>,
    /// Who wrote the group chatter an inbound line carries (the lines under
    /// `[Chat messages since your last reply - for context]`), one record per sender
    /// label: how a person's chatter in another person's line is found when they are
    /// erased.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chatter: Vec<ChatterSender>,
    /// The files an inbound line's messages came with, in order (its text carries
    /// their placeholders: [`Attachment`](crate::inbound::Attachment)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::inbound::Attachment>,
    /// Anything else the host wants kept.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One sender of the group chatter an inbound line carries: the label the lines show
/// and the id it stands for (see [`LogFields::chatter`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatterSender {
    /// The label the history lines show (`Alice`).
    pub sender: String,
    /// Who that is: a canonical person, an E.164 number or a channel sender id.
    pub sender_id: String,
}

impl LogFields {
    /// The text of payload `part` of the reply whose text is `text`: by the line's
    /// [`parts`](Self::parts), or — for a line written without them — the whole text
    /// as payload 0.
    pub(crate) fn part_of<'t>(&self, text: &'t str, part: usize) -> Option<&'t str> {
        if self.parts.is_empty() {
            return (part == 0).then_some(text);
        }
        let [start, end] = (*self.parts.get(part)?)?;
        text.get(start..end)
    }
}

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointReason {
    /// Asked for.
    Manual,
    /// A new session started.
    NewSession,
    /// A number of turns passed.
    TurnLimit,
    /// The session went quiet.
    Idle,
}

/// One line of a transcript after the header.
///
/// Every entry has a `type`; the ones pi writes also have an 8-hex-digit `id`, the
/// `parentId` of the entry before it (`null` for the first) and an ISO `timestamp`.
/// `message` entries carry an [`AgentMessage`]; `custom` entries a `customType` and
/// `data`. Everything else — unknown types and fields — is kept in `extra`.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptEntry {
    /// The entry type (`message`, `custom`, `compaction`, `model_change`, …).
    pub kind: String,
    /// The entry id; assigned on append when `None`.
    pub id: Option<String>,
    /// The previous entry's id; assigned on append together with `id`.
    pub parent_id: Option<String>,
    /// When (ISO 8601).
    pub timestamp: Option<String>,
    /// The message of a `message` entry.
    pub message: Option<AgentMessage>,
    /// The `customType` of `custom` and `custom_message` entries.
    pub custom_type: Option<String>,
    /// The `data` of a `custom` entry.
    pub data: Option<Value>,
    /// The message-log fields.
    pub log: Option<LogFields>,
    /// Every other field, kept as written.
    pub extra: Map<String, Value>,
}

/// An entry as a line holds it, borrowed, so writing one copies nothing (lines are
/// read field by field: `fields.rs`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryWireRef<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a AgentMessage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    custom_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log: Option<&'a LogFields>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl Serialize for TranscriptEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        EntryWireRef {
            kind: &self.kind,
            id: self.id.as_deref(),
            // Entries with an id are tree nodes: their parent is written, null or not.
            parent_id: self.id.as_ref().map(|_| self.parent_id.as_deref()),
            timestamp: self.timestamp.as_deref(),
            message: self.message.as_ref(),
            custom_type: self.custom_type.as_deref(),
            data: self.data.as_ref(),
            log: self.log.as_ref(),
            extra: &self.extra,
        }
        .serialize(serializer)
    }
}

impl TranscriptEntry {
    fn new(kind: &str, at: DateTime<Utc>) -> Self {
        TranscriptEntry {
            kind: kind.into(),
            id: None,
            parent_id: None,
            timestamp: Some(iso_timestamp(at)),
            message: None,
            custom_type: None,
            data: None,
            log: None,
            extra: Map::new(),
        }
    }

    /// A `message` entry.
    pub fn message(message: AgentMessage, at: DateTime<Utc>) -> Self {
        TranscriptEntry {
            message: Some(message),
            ..TranscriptEntry::new("message", at)
        }
    }

    /// A user message with plain-string content, as pi writes them.
    pub fn user_text(text: impl Into<String>, at: DateTime<Utc>) -> Self {
        TranscriptEntry::message(
            AgentMessage::new(Role::User, Content::Text(text.into()), at),
            at,
        )
    }

    /// An assistant message with one text block from `provider`/`model`.
    pub fn assistant_text(
        text: impl Into<String>,
        provider: impl Into<String>,
        model: impl Into<String>,
        at: DateTime<Utc>,
    ) -> Self {
        let mut message = AgentMessage::new(
            Role::Assistant,
            Content::Blocks(vec![ContentBlock::text(text)]),
            at,
        );
        message.provider = Some(provider.into());
        message.model = Some(model.into());
        message.stop_reason = Some("stop".into());
        TranscriptEntry::message(message, at)
    }

    /// A delivered message mirrored into the transcript, exactly as OpenClaw's
    /// `appendAssistantMessageToSessionTranscript` writes it: an assistant message from
    /// `openclaw`/`delivery-mirror` with zero usage. With media, the text is the media
    /// file names (OpenClaw's `resolveMirroredTranscriptText`) and the URLs are kept in
    /// the message's `mediaUrls`. `None` when there is nothing to mirror.
    pub(crate) fn delivery_mirror(
        text: &str,
        media_urls: &[String],
        at: DateTime<Utc>,
    ) -> Option<Self> {
        let text = mirrored_text(text, media_urls)?;
        let mut message = AgentMessage::new(
            Role::Assistant,
            Content::Blocks(vec![ContentBlock::text(text)]),
            at,
        );
        message.api = Some("openai-responses".into());
        message.provider = Some("openclaw".into());
        message.model = Some("delivery-mirror".into());
        message.usage = Some(Usage::zero());
        message.stop_reason = Some("stop".into());
        let urls: Vec<&String> = media_urls.iter().filter(|u| !u.trim().is_empty()).collect();
        if !urls.is_empty() {
            message
                .extra
                .insert("mediaUrls".into(), serde_json::json!(urls));
        }
        Some(TranscriptEntry::message(message, at))
    }

    /// A `custom` entry (kept out of the model's context by pi).
    pub fn custom(custom_type: impl Into<String>, data: Value, at: DateTime<Utc>) -> Self {
        TranscriptEntry {
            custom_type: Some(custom_type.into()),
            data: Some(data),
            ..TranscriptEntry::new("custom", at)
        }
    }

    /// A status change, as a `custom` entry of type `agent-sessions.status`.
    pub(crate) fn status_change(status: &str, at: DateTime<Utc>) -> Self {
        TranscriptEntry::custom(
            STATUS_CUSTOM_TYPE,
            serde_json::json!({ "status": status }),
            at,
        )
    }

    /// A checkpoint, as a `custom` entry of type `agent-sessions.checkpoint`.
    pub fn checkpoint(reason: CheckpointReason, at: DateTime<Utc>) -> Self {
        TranscriptEntry::custom(
            CHECKPOINT_CUSTOM_TYPE,
            serde_json::json!({ "reason": reason }),
            at,
        )
    }

    /// Adds message-log fields.
    pub(crate) fn with_log(mut self, log: LogFields) -> Self {
        self.log = Some(log);
        self
    }

    /// What kind of session event this entry is.
    pub(crate) fn event_kind(&self) -> EventKind {
        match (
            self.kind.as_str(),
            &self.message,
            self.custom_type.as_deref(),
        ) {
            ("message", Some(message), _) => match message.role {
                Role::User => EventKind::UserMessage,
                Role::Assistant if message.tool_calls() > 0 => EventKind::ToolCall,
                Role::Assistant => EventKind::AssistantMessage,
                Role::ToolResult => EventKind::ToolResult,
                Role::Other(_) => EventKind::Other,
            },
            ("custom", _, Some(STATUS_CUSTOM_TYPE)) => EventKind::StatusChange,
            ("custom", _, Some(CHECKPOINT_CUSTOM_TYPE)) => EventKind::Checkpoint,
            ("compaction", _, _) => EventKind::Compaction,
            _ => EventKind::Other,
        }
    }
}

/// What a transcript entry means as a session event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A user message.
    UserMessage,
    /// An assistant message.
    AssistantMessage,
    /// An assistant message calling tools.
    ToolCall,
    /// A tool's result.
    ToolResult,
    /// A status change.
    StatusChange,
    /// A checkpoint.
    Checkpoint,
    /// A context compaction.
    Compaction,
    /// Anything else.
    Other,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// OpenClaw's `resolveMirroredTranscriptText`: media file names when there is media
/// (`"media"` if none can be named), else the trimmed text, else nothing.
fn mirrored_text(text: &str, media_urls: &[String]) -> Option<String> {
    let urls: Vec<&str> = media_urls
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    if !urls.is_empty() {
        let names: Vec<String> = urls.iter().filter_map(|url| media_name(url)).collect();
        return Some(if names.is_empty() {
            "media".to_owned()
        } else {
            names.join(", ")
        });
    }
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

fn media_name(url: &str) -> Option<String> {
    let without_fragment = url.split('#').next().unwrap_or(url);
    let without_query = without_fragment
        .split('?')
        .next()
        .unwrap_or(without_fragment);
    let path = match without_query.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, path)| path),
        None => without_query,
    };
    let name = path.rsplit(['/', '\\']).next().unwrap_or("");
    let decoded =
        crate::store::json::paths::decode_file_component(name).unwrap_or_else(|_| name.to_owned());
    (!decoded.is_empty() && decoded != "." && decoded != "/").then_some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-02-06T10:00:02Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn openclaw_lines_round_trip() {
        let lines = [
            r#"{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-02-06T10:00:01.000Z","message":{"role":"user","content":"Hello","timestamp":1770372001000}}"#,
            r#"{"type":"message","id":"b2c3d4e5","parentId":"a1b2c3d4","timestamp":"2026-02-06T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Hello from delivery mirror!"}],"api":"openai-responses","provider":"openclaw","model":"delivery-mirror","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1770372002000}}"#,
            r#"{"type":"message","id":"c3d4e5f6","parentId":"b2c3d4e5","timestamp":"2024-12-03T14:00:03.000Z","message":{"role":"toolResult","content":[{"type":"text","text":"output"}],"toolCallId":"call_123","toolName":"bash","isError":false}}"#,
            r#"{"type":"custom","id":"h8i9j0k1","parentId":"g7h8i9j0","timestamp":"2024-12-03T14:20:00.000Z","customType":"my-extension","data":{"count":42}}"#,
            r#"{"type":"compaction","id":"f6a7b8c9","parentId":"e5f6a7b8","timestamp":"2024-12-03T14:10:00.000Z","summary":"User discussed X","firstKeptEntryId":"c3d4e5f6","tokensBefore":50000}"#,
            r#"{"type":"some_future_type","payload":[1,2,3]}"#,
        ];
        for line in lines {
            let entry: TranscriptEntry = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&entry).unwrap(), line);
        }
    }

    #[test]
    fn images_and_tool_calls_are_blocks() {
        let line = r#"{"type":"message","id":"00000001","parentId":null,"message":{"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"toolCall","id":"call_1","name":"bash","arguments":{"cmd":"ls"}},{"type":"image","data":"aGk=","mimeType":"image/png"}]}}"#;
        let entry: TranscriptEntry = serde_json::from_str(line).unwrap();
        assert_eq!(entry.event_kind(), EventKind::ToolCall);
        assert_eq!(entry.message.as_ref().unwrap().tool_calls(), 1);
        assert_eq!(serde_json::to_string(&entry).unwrap(), line);
        let image = ContentBlock::image("aGk=", "image/png");
        assert_eq!(
            serde_json::to_string(&image).unwrap(),
            r#"{"type":"image","data":"aGk=","mimeType":"image/png"}"#
        );
    }

    #[test]
    fn delivery_mirror_matches_openclaw() {
        let entry =
            TranscriptEntry::delivery_mirror("  Hello from delivery mirror! ", &[], at()).unwrap();
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(json["message"]["model"], "delivery-mirror");
        assert_eq!(json["message"]["provider"], "openclaw");
        assert_eq!(json["message"]["api"], "openai-responses");
        assert_eq!(
            json["message"]["content"][0]["text"],
            "Hello from delivery mirror!"
        );
        assert_eq!(json["message"]["usage"]["cost"]["total"], 0.0);
        assert!(TranscriptEntry::delivery_mirror("   ", &[], at()).is_none());

        let media = vec![
            "https://cdn.example.com/a/photo%201.jpg?sig=1#x".to_owned(),
            "/tmp/report.pdf".to_owned(),
        ];
        let entry = TranscriptEntry::delivery_mirror("caption", &media, at()).unwrap();
        let message = entry.message.unwrap();
        assert_eq!(message.text(), "photo 1.jpg, report.pdf");
        assert_eq!(message.extra["mediaUrls"][1], "/tmp/report.pdf");
        let nameless =
            TranscriptEntry::delivery_mirror("", &["https://example.com/".to_owned()], at())
                .unwrap();
        assert_eq!(nameless.message.unwrap().text(), "media");
    }

    #[test]
    fn events_are_classified() {
        assert_eq!(
            TranscriptEntry::user_text("hi", at()).event_kind(),
            EventKind::UserMessage
        );
        assert_eq!(
            TranscriptEntry::assistant_text("hello", "anthropic", "claude", at()).event_kind(),
            EventKind::AssistantMessage
        );
        assert_eq!(
            TranscriptEntry::status_change("running", at()).event_kind(),
            EventKind::StatusChange
        );
        assert_eq!(
            TranscriptEntry::checkpoint(CheckpointReason::TurnLimit, at()).event_kind(),
            EventKind::Checkpoint
        );
        let checkpoint = serde_json::to_value(TranscriptEntry::checkpoint(
            CheckpointReason::NewSession,
            at(),
        ))
        .unwrap();
        assert_eq!(checkpoint["data"]["reason"], "new_session");
    }
}
