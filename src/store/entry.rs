//! The session entry: what a store keeps about one session.
//!
//! [`SessionEntry`] has the full field list OpenClaw and its Claude Code variant write
//! to `sessions.json` (including the SDK-session fields `sdkSessionId` and
//! `cliSessionIds`), serialised in camelCase exactly as they write it. Fields this crate
//! does not know land in [`SessionEntry::extra`] and are written back unchanged, so a
//! store written by OpenClaw, or by a newer version of this crate, loses nothing.
//!
//! ```
//! use agent_sessions::SessionEntry;
//!
//! let json = r#"{"sessionId":"0f5d59ee","updatedAt":1770350123456,"chatType":"direct","futureField":{"x":1}}"#;
//! let entry: SessionEntry = serde_json::from_str(json)?;
//! assert_eq!(entry.session_id, "0f5d59ee");
//! assert_eq!(entry.extra["futureField"]["x"], 1);
//! assert_eq!(serde_json::to_string(&entry)?, json);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::identity::key::PeerKind;

/// Declares a string-valued enum whose unknown values are kept as written, so a value a
/// newer OpenClaw writes never makes an entry unreadable.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as written.
            Other(String),
        }

        impl $name {
            /// The value as written on disk.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $text, )+
                    $name::Other(other) => other,
                }
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $( $text => $name::$variant, )+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Ok($name::from(value.as_str()))
            }
        }
    };
}

string_enum! {
    /// The chat type recorded in an entry (`chatType`).
    pub enum ChatType {
        /// A direct message.
        Direct => "direct",
        /// A group chat.
        Group => "group",
        /// A channel.
        Channel => "channel",
    }
}

impl ChatType {
    /// The kind of peer, accepting the legacy spelling `dm`.
    pub fn peer_kind(&self) -> Option<PeerKind> {
        match self {
            ChatType::Direct => Some(PeerKind::Direct),
            ChatType::Group => Some(PeerKind::Group),
            ChatType::Channel => Some(PeerKind::Channel),
            ChatType::Other(other) => crate::identity::key::normalize_chat_type(other),
        }
    }
}

impl From<PeerKind> for ChatType {
    fn from(kind: PeerKind) -> Self {
        match kind {
            PeerKind::Direct => ChatType::Direct,
            PeerKind::Group => ChatType::Group,
            PeerKind::Channel => ChatType::Channel,
        }
    }
}

string_enum! {
    /// Whether the agent may send in this session (`sendPolicy`).
    pub enum SendPolicy {
        /// Replies are sent.
        Allow => "allow",
        /// Replies are suppressed.
        Deny => "deny",
    }
}

string_enum! {
    /// When the agent answers in a group (`groupActivation`).
    pub enum GroupActivation {
        /// Only when mentioned.
        Mention => "mention",
        /// To every message.
        Always => "always",
    }
}

string_enum! {
    /// Who set the auth-profile override (`authProfileOverrideSource`).
    pub enum AuthProfileSource {
        /// Chosen automatically.
        Auto => "auto",
        /// Chosen by the user.
        User => "user",
    }
}

string_enum! {
    /// How usage is shown after replies (`responseUsage`).
    pub enum ResponseUsage {
        /// Shown.
        On => "on",
        /// Hidden.
        Off => "off",
        /// Token counts only.
        Tokens => "tokens",
        /// Everything.
        Full => "full",
    }
}

string_enum! {
    /// How messages arriving during a run are queued (`queueMode`).
    pub enum QueueMode {
        /// Steer the running turn.
        Steer => "steer",
        /// Run a follow-up turn.
        Followup => "followup",
        /// Collect into one turn.
        Collect => "collect",
        /// Steer, keeping a backlog.
        SteerBacklog => "steer-backlog",
        /// Steer plus backlog.
        SteerPlusBacklog => "steer+backlog",
        /// Plain queue.
        Queue => "queue",
        /// Interrupt the running turn.
        Interrupt => "interrupt",
    }
}

string_enum! {
    /// What to drop when the queue is full (`queueDrop`).
    pub enum QueueDrop {
        /// The oldest messages.
        Old => "old",
        /// The newest messages.
        New => "new",
        /// Summarise the overflow.
        Summarize => "summarize",
    }
}

/// A thread or topic id: OpenClaw writes numbers (Telegram) or strings (Slack, Discord).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ThreadId {
    /// A numeric id, written as a JSON number.
    Number(i64),
    /// A textual id, written as a JSON string.
    Text(String),
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadId::Number(n) => write!(f, "{n}"),
            ThreadId::Text(s) => f.write_str(s),
        }
    }
}

impl From<i64> for ThreadId {
    fn from(n: i64) -> Self {
        ThreadId::Number(n)
    }
}

impl From<&str> for ThreadId {
    fn from(s: &str) -> Self {
        ThreadId::Text(s.to_owned())
    }
}

impl From<String> for ThreadId {
    fn from(s: String) -> Self {
        ThreadId::Text(s)
    }
}

/// Where a reply to this session is delivered (`deliveryContext`), or a change to that
/// route: the fields given replace the entry's
/// ([`Session::update_last_route`](crate::Session::update_last_route)).
///
/// ```
/// use agent_sessions::DeliveryContext;
///
/// let route = DeliveryContext::to("telegram", "42").with_thread(7);
/// assert_eq!(route.to.as_deref(), Some("42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryContext {
    /// The channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The recipient address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The bot account to send from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The thread or topic to reply in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DeliveryContext {
    /// Replies go to `to` on `channel`.
    pub fn to(channel: impl Into<String>, to: impl Into<String>) -> Self {
        DeliveryContext {
            channel: Some(channel.into()),
            to: Some(to.into()),
            ..DeliveryContext::default()
        }
    }

    /// Sends from this bot account.
    pub fn with_account(mut self, account_id: impl Into<String>) -> Self {
        self.account_id = Some(account_id.into());
        self
    }

    /// Replies in this thread.
    pub fn with_thread(mut self, thread_id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }
}

/// Where the conversation came from (`origin`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionOrigin {
    /// A human-readable conversation label (`Family id:123@g.us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The originating channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The UI surface (web, mobile, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<String>,
    /// The chat type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<ChatType>,
    /// The sender address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The recipient address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The bot account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// The thread or topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One session's record in a store, as OpenClaw writes it in `sessions.json`.
///
/// Every field but `sessionId` and `updatedAt` is optional and omitted when unset. An
/// absent `sessionId` reads as `""` and an absent `updatedAt` as `0` (OpenClaw has
/// written such entries, see its issue #65659); both are omitted again when written.
///
/// ```
/// use agent_sessions::{ChatType, SessionEntry};
///
/// let mut entry = SessionEntry::new_session(1_770_350_123_456);
/// entry.chat_type = Some(ChatType::Group);
/// entry.channel = Some("whatsapp".into());
/// let json = serde_json::to_value(&entry)?;
/// assert_eq!(json["chatType"], "group");
/// assert_eq!(json["updatedAt"], 1_770_350_123_456u64);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionEntry {
    /// The current transcript's id (a UUID v4 for sessions this crate starts).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    /// Last activity, epoch milliseconds; drives idle and daily resets.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub updated_at: u64,
    /// Transcript path override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// The session that spawned this one (subagents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<String>,
    /// Whether the first-turn system prompt has been sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_sent: Option<bool>,
    /// Whether the last agent run was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_last_run: Option<bool>,
    /// Direct, group or channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<ChatType>,

    /// Agent SDK session id, for resuming the engine's own session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk_session_id: Option<String>,
    /// CLI engine session ids, by provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_session_ids: Option<IndexMap<String, String>>,
    /// Legacy Claude CLI session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_cli_session_id: Option<String>,

    /// Thinking display level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Verbose output level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbose_level: Option<String>,
    /// Reasoning display level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_level: Option<String>,
    /// Elevated mode level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elevated_level: Option<String>,
    /// Text-to-speech mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tts_auto: Option<String>,
    /// Execution host preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_host: Option<String>,
    /// Execution security level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_security: Option<String>,
    /// Ask mode for commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_ask: Option<String>,
    /// Execution node preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_node: Option<String>,
    /// Usage display after replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_usage: Option<ResponseUsage>,

    /// Provider override for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<String>,
    /// Model override for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override: Option<String>,
    /// Auth profile override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override: Option<String>,
    /// Who chose the auth profile override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override_source: Option<AuthProfileSource>,
    /// Compaction count when the auth profile override was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override_compaction_count: Option<u64>,

    /// When the agent answers in a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_activation: Option<GroupActivation>,
    /// Whether the next group activation sends the system intro.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_activation_needs_system_intro: Option<bool>,
    /// Send policy override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_policy: Option<SendPolicy>,
    /// Queue mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
    /// Queue debounce, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_debounce_ms: Option<u64>,
    /// Most queued messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_cap: Option<u64>,
    /// Queue overflow strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_drop: Option<QueueDrop>,

    /// Input tokens of the last turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of the last turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt size of the last turn (input + cache read + cache write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// The model's context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The provider last used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// The model last used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,

    /// How many times the context was compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_count: Option<u64>,
    /// When the last memory flush ran, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_flush_at: Option<u64>,
    /// The compaction count at the last memory flush.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_flush_compaction_count: Option<u64>,

    /// A user label (at most 64 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// A computed display name (`whatsapp:g-family`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The originating channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// The group subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The channel name inside a workspace (`#general`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_channel: Option<String>,
    /// The workspace or space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Where the conversation came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,

    /// Where replies go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_context: Option<DeliveryContext>,
    /// Last delivery channel (mirrors `deliveryContext.channel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_channel: Option<String>,
    /// Last recipient (mirrors `deliveryContext.to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_to: Option<String>,
    /// Last bot account (mirrors `deliveryContext.accountId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_account_id: Option<String>,
    /// Last thread (mirrors `deliveryContext.threadId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_thread_id: Option<ThreadId>,

    /// The last heartbeat message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_text: Option<String>,
    /// When the last heartbeat was sent, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_sent_at: Option<u64>,

    /// The skills snapshot (kept as written; often tens of KB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_snapshot: Option<Value>,
    /// The system prompt report (kept as written; often several KB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_report: Option<Value>,

    /// Lifecycle status (see [`SessionStatus`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SessionStatus>,
    /// When the current session started, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_started_at: Option<u64>,
    /// When the session was closed, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<u64>,
    /// Why the current session started in place of the key's previous one, as
    /// [`Reason::started_by`](crate::manager::Reason::started_by) names it:
    /// `no_session` (the key's first), `explicit_reset` (`/new`, a reset phrase, a reset
    /// call), `session_closed`, `daily`, `idle` or `topic_drift`. Written by this crate
    /// (OpenClaw records no reason); absent on a fork (its
    /// [`forked_from`](Self::forked_from) says where it came from) and on sessions
    /// this crate did not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_reason: Option<String>,
    /// The `updatedAt` of the quiet period whose `idle` checkpoint was taken: the idle
    /// sweep ([`SessionManager::spawn_idle_checkpoints`](crate::SessionManager::spawn_idle_checkpoints))
    /// checkpoints a session once per quiet period, and the next message (which moves
    /// `updatedAt`) makes it due again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_checkpoint_at: Option<u64>,
    /// Inbound messages in the current session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_count: Option<u64>,
    /// Completed turns (replies) in the current session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_count: Option<u64>,
    /// The beginning of the last inbound message (at most
    /// 120 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_preview: Option<String>,
    /// What the session is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Who wrote the description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_source: Option<DescriptionSource>,
    /// Where the session came from (CLI, web, API, channel, schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SessionSource>,
    /// The session this thread session was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// Engine runtime session ids, by engine type (e.g. `openclaw`, `droid`): the id each
    /// engine gave this conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_session_ids: Option<IndexMap<String, String>>,
    /// The canonical person this session is with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_id: Option<String>,
    /// That person's type (`user`, `staff`, `participant`, `external`, `system`), as the
    /// person was first resolved: the same person writing from another channel (a web
    /// login that resolves as `user`, say) does not change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_type: Option<String>,
    /// The raw ids the person came with where they differ from [`person_id`]
    /// (`staff:17` by SMS and `42` on the admin chat, both linked to one person), in the
    /// order first seen, at most 16.
    ///
    /// [`person_id`]: SessionEntry::person_id
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_person_ids: Option<Vec<String>>,
    /// The channel of the session's first message (`sms`, `web`, …); [`SessionEntry::channel_name`]
    /// names the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_channel: Option<String>,
    /// Everyone who took part (person ids, else `<channel>:<sender id>`): who, besides
    /// the owner, may open the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participants: Option<Vec<String>>,
    /// The agent identity the session's agent belongs to (`reggie` for `reggie_oc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_identity: Option<String>,
    /// This session's context summary, at most 1,000 characters (see
    /// [`Summarizer`](crate::memory::Summarizer)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_summary: Option<String>,
    /// The rolling summary shared by every session of this person with this agent
    /// identity, across channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_summary: Option<IdentitySummary>,
    /// What the session is working on, as the last checkpoint's introspection left it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_memory: Option<String>,
    /// The session workspace's UUID (its folder name), once it has one; kept across
    /// resets, so a person's files outlive their sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    /// The inbound messages with a channel message id this session took within the
    /// manager's dedupe window, newest last: a message the channel delivers again is
    /// recognised and answered once (see
    /// [`SessionManagerBuilder::dedupe_window`](crate::manager::SessionManagerBuilder::dedupe_window)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_inbound: Vec<InboundRecord>,
    /// The turn running in the session — one at a time, on any number of workers — while
    /// [`status`](Self::status) is `running`: who runs it, since when, and its fencing
    /// token. A run whose holder is gone (its process killed) holds nothing up: the next
    /// turn takes it over, and an erase, a delete or a prune goes ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<SessionRun>,
    /// The fencing token the session's last run took; each run takes the next, so the
    /// number only grows (`runFence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_fence: Option<u64>,
    /// Messages that arrived during a run, oldest first, waiting for it to end
    /// (`queued`; see [`lane`](crate::lane)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<QueuedMessage>,
    /// The messages the queue's cap dropped since the last follow-up turn, which stands
    /// for them with one line (`queueDropped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_dropped: Option<QueueDropped>,
    /// Where the history in this session's model input starts since its last cut, and
    /// the summary that stands for what the cut left out (`windowStart`; see
    /// [`HistoryWindow`](crate::inbound::HistoryWindow)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start: Option<WindowStart>,
    /// How many times lines of this session's transcript were edited in place — an
    /// erase redacting a person from a conversation they shared (`transcriptEdits`): a
    /// manager that keeps the conversation between turns reads it again when this
    /// changes, whichever process edited it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_edits: Option<u64>,

    /// Fields this version does not know, kept as written, in order.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where a session's model input starts its history since the last cut, as
/// [`SessionEntry::window_start`] records it: the model input stays the same from turn
/// to turn up to the new messages until the next cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WindowStart {
    /// The id of the transcript line the history starts at (a person's message).
    pub line: String,
    /// The summary standing for what the window's cuts left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The line the summary covers the conversation up to, when that is not `line`: a
    /// cut whose summary is still being written (or was never written, its process
    /// gone) keeps the earlier summary, which covers less.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_until: Option<String>,
}

impl WindowStart {
    /// Where the conversation that no summary stands for starts: after the line the
    /// summary covers up to (`None`: the conversation's start, no summary covering
    /// any of it).
    pub(crate) fn covered(window: Option<&WindowStart>) -> Option<String> {
        let window = window?;
        window.summary.as_ref()?;
        Some(
            window
                .summary_until
                .clone()
                .unwrap_or_else(|| window.line.clone()),
        )
    }
}

/// An inbound message a session took, as [`SessionEntry::recent_inbound`] remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InboundRecord {
    /// The message: `<channel>:<accountId>:<chat>:<message id>`.
    pub id: String,
    /// When it was taken, epoch milliseconds.
    pub at: u64,
    /// The session it went to.
    pub session_id: String,
    /// The turn that took it (a process and a token): while that turn may still log the
    /// message, a delivery again is a duplicate; after, the transcript says.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub holder: String,
}

/// The turn running in a session, as [`SessionEntry::run`] records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionRun {
    /// The turn (a process and a token), as [`InboundRecord::holder`] names one.
    pub holder: String,
    /// When it started, epoch milliseconds.
    pub started_at: u64,
    /// When its holder last said it still runs, epoch milliseconds: a holder on another
    /// host is taken for gone once its lease has run out since.
    #[serde(default)]
    pub renewed_at: u64,
    /// Its fencing token ([`SessionEntry::run_fence`] when it was taken): a turn whose
    /// token is no longer the run's cannot complete.
    #[serde(default)]
    pub fence: u64,
    /// The messages it answers (their channel message ids, as
    /// [`InboundRecord::id`] names them): a run taken over answers them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answering: Vec<String>,
    /// The queued messages it took to answer with its own, or by steering while it
    /// ran, kept until it ends: a run that takes it over answers those it died before
    /// answering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taken: Vec<QueuedMessage>,
}

/// A message that arrived during a run and waits for it to end, as
/// [`SessionEntry::queued`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct QueuedMessage {
    /// Its place in the queue: unique.
    pub id: String,
    /// When it arrived, epoch milliseconds.
    pub at: u64,
    /// The turn waiting with it (a process and a token).
    pub waiter: String,
    /// Its channel message id, as [`InboundRecord::id`] names it, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound_id: Option<String>,
    /// The message, as the crate's `InboundMessage` serialises.
    pub message: Value,
    /// The fencing token of the run that took it while it ran (steering), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steered: Option<u64>,
}

/// What the queue's cap dropped, as [`SessionEntry::queue_dropped`] keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct QueueDropped {
    /// How many messages, since the last follow-up turn.
    #[serde(default)]
    pub count: u64,
    /// The beginning of each (at most 160 characters), oldest first, when the queue
    /// summarises what it drops.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// The queue ids of the last 100 dropped, so the turns waiting with them learn so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
}

/// The longest session label, in characters (OpenClaw's `SESSION_LABEL_MAX_LENGTH`).
pub(crate) const SESSION_LABEL_MAX_CHARS: usize = 64;

/// Validates a session label as OpenClaw's `parseSessionLabel` does: trimmed, not
/// empty, at most `64` characters.
///
/// ```
/// use agent_sessions::store::parse_session_label;
///
/// assert_eq!(parse_session_label("  trip planning ")?, "trip planning");
/// assert!(parse_session_label("   ").is_err());
/// assert!(parse_session_label(&"x".repeat(65)).is_err());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
pub fn parse_session_label(raw: &str) -> crate::Result<String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(crate::Error::invalid_label(raw, "invalid label: empty"));
    }
    if trimmed.chars().count() > SESSION_LABEL_MAX_CHARS {
        return Err(crate::Error::invalid_label(
            raw,
            "invalid label: too long (max 64)",
        ));
    }
    Ok(trimmed.to_owned())
}

/// Validates a session label given as any JSON value, as OpenClaw's `parseSessionLabel`
/// receives it from a request: a string is checked as [`parse_session_label`] checks
/// it; anything else (a number, `null`, an array) is refused with OpenClaw's error,
/// `invalid label: must be a string`.
///
/// ```
/// use agent_sessions::store::parse_session_label_value;
/// use serde_json::json;
///
/// assert_eq!(parse_session_label_value(&json!(" standup "))?, "standup");
/// let refused = parse_session_label_value(&json!(42)).unwrap_err();
/// assert!(refused.to_string().contains("invalid label: must be a string"));
/// assert!(parse_session_label_value(&json!(null)).is_err());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
pub fn parse_session_label_value(raw: &serde_json::Value) -> crate::Result<String> {
    match raw {
        serde_json::Value::String(text) => parse_session_label(text),
        other => Err(crate::Error::invalid_label(
            &other.to_string(),
            "invalid label: must be a string",
        )),
    }
}

/// The longest [`SessionEntry::last_message_preview`], in characters.
pub(crate) const MESSAGE_PREVIEW_MAX_CHARS: usize = 120;

string_enum! {
    /// Where a session is in its life.
    ///
    /// One model for the kernel HTTP API's two states (`active` / `closed`, see
    /// [`clawos`](SessionStatus::clawos)) and the finer states of a durable session
    /// (`idle`, `running`, `awaiting_approval`, `inactive`):
    ///
    /// | status | kernel API | durable session | next message |
    /// | --- | --- | --- | --- |
    /// | `Idle` | active | idle | continues (if fresh) |
    /// | `Running` | active | running | continues (if fresh) |
    /// | `AwaitingApproval` | active | awaiting_approval | continues (if fresh) |
    /// | `Inactive` | active | inactive | reopens it (if fresh) |
    /// | `Closed` | closed | — | starts a new session (`session_closed`) |
    pub enum SessionStatus {
        /// Open and ready.
        Idle => "idle",
        /// A turn is executing.
        Running => "running",
        /// A tool call waits for the user's approval.
        AwaitingApproval => "awaiting_approval",
        /// Hidden from normal lists; reopened by the next message.
        Inactive => "inactive",
        /// Over: the next message starts a new session.
        Closed => "closed",
    }
}

impl SessionStatus {
    /// Whether the next message must start a new session (the kernel API's `closed`).
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self, SessionStatus::Closed)
    }

    /// The status as the kernel HTTP API (the `http` module) reports it: `closed` or
    /// `active`.
    pub fn clawos(&self) -> &'static str {
        if self.is_closed() {
            "closed"
        } else {
            "active"
        }
    }
}

string_enum! {
    /// Who wrote a session's description.
    pub enum DescriptionSource {
        /// The user.
        User => "user",
        /// The agent.
        Agent => "agent",
        /// The introspection (checkpoint) run.
        Introspection => "introspection",
    }
}

string_enum! {
    /// The kind of [`SessionSource`].
    pub enum SourceKind {
        /// A command-line session.
        Cli => "cli",
        /// A web client.
        Web => "web",
        /// An API client.
        Api => "api",
        /// A chat channel (Telegram, Slack, …).
        Channel => "channel",
        /// A scheduled job.
        Schedule => "schedule",
    }
}

/// Where a session came from: a CLI, the web, an API client, a channel or a schedule.
///
/// ```
/// use agent_sessions::SessionSource;
/// use agent_sessions::AgentId;
///
/// let nightly = SessionSource::schedule("nightly-report");
/// assert_eq!(nightly.key(&AgentId::main())?.as_str(), "agent:main:schedule:nightly-report");
/// assert!(!nightly.interactive);
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSource {
    /// CLI, web, API, channel or schedule.
    pub kind: SourceKind,
    /// Whether a person is on the other end.
    #[serde(default)]
    pub interactive: bool,
    /// The channel platform (`telegram`, …) for channel sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// The CLI session name, web device or API client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The schedule or trigger that started the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    /// Direct or group, for channel sources.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<ChatType>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionSource {
    fn new(kind: SourceKind, interactive: bool) -> Self {
        SessionSource {
            kind,
            interactive,
            platform: None,
            name: None,
            trigger_id: None,
            chat_type: None,
            extra: Map::new(),
        }
    }

    /// A named command-line session (`cli:{name}`).
    pub fn cli(name: impl Into<String>) -> Self {
        SessionSource {
            name: Some(name.into()),
            ..SessionSource::new(SourceKind::Cli, true)
        }
    }

    /// A web client session (`web:{deviceOrSession}`).
    pub fn web(device: impl Into<String>) -> Self {
        SessionSource {
            name: Some(device.into()),
            ..SessionSource::new(SourceKind::Web, true)
        }
    }

    /// An API client session (`api:{client}`).
    pub(crate) fn api(client: impl Into<String>) -> Self {
        SessionSource {
            name: Some(client.into()),
            ..SessionSource::new(SourceKind::Api, false)
        }
    }

    /// A scheduled job's session (`schedule:{scheduleId}`).
    pub fn schedule(schedule_id: impl Into<String>) -> Self {
        SessionSource {
            trigger_id: Some(schedule_id.into()),
            ..SessionSource::new(SourceKind::Schedule, false)
        }
    }

    /// A chat channel session.
    pub fn channel(platform: impl Into<String>, chat_type: ChatType) -> Self {
        SessionSource {
            platform: Some(platform.into()),
            chat_type: Some(chat_type),
            ..SessionSource::new(SourceKind::Channel, true)
        }
    }

    /// The session key of a CLI, web, API or schedule source under `agent`:
    /// `agent:<agentId>:cli:<name>`, `…:web:<device>`, `…:api:<client>`,
    /// `…:schedule:<scheduleId>` (each source's id form, as the rest of the key).
    ///
    /// Channel sessions are keyed from their conversation by a
    /// [`KeyBuilder`](crate::KeyBuilder); asking here is an [`Error::InvalidId`](crate::Error::InvalidId).
    pub fn key(&self, agent: &crate::AgentId) -> crate::Result<crate::SessionKey> {
        use crate::error::{Error, IdKind};
        let (prefix, id) = match &self.kind {
            SourceKind::Cli => ("cli", self.name.as_deref()),
            SourceKind::Web => ("web", self.name.as_deref()),
            SourceKind::Api => ("api", self.name.as_deref()),
            SourceKind::Schedule => ("schedule", self.trigger_id.as_deref()),
            SourceKind::Channel | SourceKind::Other(_) => {
                return Err(Error::invalid_id(
                    IdKind::Peer,
                    self.kind.as_str(),
                    "channel sessions are keyed from their conversation by a KeyBuilder",
                ))
            }
        };
        let id = crate::identity::key::key_segment(IdKind::Peer, id.unwrap_or(""))?;
        crate::SessionKey::parse(&format!("agent:{agent}:{prefix}:{id}"))
    }
}

/// A rolling summary of everything one person said with one agent identity, across
/// sessions, channels and engine variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IdentitySummary {
    /// The summary.
    pub text: String,
    /// When it was written, epoch milliseconds.
    pub updated_at: u64,
    /// The last message it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<LogCursor>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A position in the message log: messages are ordered by time, then session id, then
/// offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogCursor {
    /// When the message was logged, epoch milliseconds.
    pub at: u64,
    /// Its session id.
    pub session_id: String,
    /// Its offset in that session's transcript.
    pub offset: u64,
}

impl LogCursor {
    /// Where `record` stands in the message log.
    pub fn of(record: &crate::transcript::LogRecord) -> Self {
        LogCursor {
            at: crate::freshness::clock::to_millis(record.at),
            session_id: record.session_id.clone(),
            offset: record.offset.0,
        }
    }

    /// Where `event`, a message logged in session `session_id` (what
    /// [`Session::log_message`](crate::Session::log_message) returns), stands in the
    /// message log; `None` for an event that is not a logged message.
    pub fn of_event(session_id: &str, event: &crate::transcript::SessionEvent) -> Option<Self> {
        crate::transcript::lines::log_record(&crate::AgentId::main(), session_id, event)
            .map(|record| LogCursor::of(&record))
    }
}

/// The parent of a forked thread session: what its context starts from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkOrigin {
    /// The parent session's key.
    pub session_key: String,
    /// The parent's session id at the time of the fork.
    pub session_id: String,
    /// The parent's transcript, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// Fields this version does not know, kept as written.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionEntry {
    /// Records `participant` (once).
    pub(crate) fn add_participant(&mut self, participant: &str) {
        let participant = participant.trim();
        if participant.is_empty() {
            return;
        }
        let participants = self.participants.get_or_insert_with(Vec::new);
        if !participants.iter().any(|p| p == participant) {
            participants.push(participant.to_owned());
        }
    }

    /// Whether `participant` took part.
    pub fn has_participant(&self, participant: &str) -> bool {
        self.participants
            .as_ref()
            .is_some_and(|all| all.iter().any(|p| p == participant))
    }

    /// An entry for `session_id`, last active at `updated_at` (epoch milliseconds).
    pub fn new(session_id: impl Into<String>, updated_at: u64) -> Self {
        SessionEntry {
            session_id: session_id.into(),
            updated_at,
            ..SessionEntry::default()
        }
    }

    /// An entry for a brand-new session with a fresh UUID v4 id.
    pub fn new_session(updated_at: u64) -> Self {
        SessionEntry::new(uuid::Uuid::new_v4().to_string(), updated_at)
    }

    /// Parses an entry from JSON, applying OpenClaw's legacy-field migrations
    /// (`provider` → `channel`, `lastProvider` → `lastChannel`, `room` → `groupChannel`).
    pub(crate) fn from_json(json: &str) -> serde_json::Result<Self> {
        let mut entry: SessionEntry = crate::store::json_text::from_slice(json.as_bytes())?;
        entry.migrate_legacy_fields();
        Ok(entry)
    }

    fn migrate_legacy_fields(&mut self) {
        fn take_string(extra: &mut Map<String, Value>, field: &str) -> Option<Option<String>> {
            extra.shift_remove(field).map(|value| match value {
                Value::String(s) => Some(s),
                _ => None,
            })
        }
        if let Some(provider) = take_string(&mut self.extra, "provider") {
            self.channel = self.channel.take().or(provider);
        }
        if let Some(provider) = take_string(&mut self.extra, "lastProvider") {
            self.last_channel = self.last_channel.take().or(provider);
        }
        if let Some(room) = take_string(&mut self.extra, "room") {
            self.group_channel = self.group_channel.take().or(room);
        }
    }

    /// The channel this session lives on: `channel`, else `lastChannel`, else the
    /// delivery context's, else the origin's provider.
    pub fn channel_name(&self) -> Option<&str> {
        self.channel
            .as_deref()
            .or(self.last_channel.as_deref())
            .or(self
                .delivery_context
                .as_ref()
                .and_then(|d| d.channel.as_deref()))
            .or(self.origin.as_ref().and_then(|o| o.provider.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openclaw_example_round_trips_exactly() {
        let json = r#"{
  "sessionId": "0f5d59ee-034e-47d9-ac97-d383e6c022b8",
  "updatedAt": 1770350123456,
  "systemSent": true,
  "abortedLastRun": false,
  "chatType": "direct",
  "thinkingLevel": "low",
  "inputTokens": 1200,
  "outputTokens": 340,
  "totalTokens": 15320,
  "contextTokens": 200000,
  "modelProvider": "anthropic",
  "model": "claude-opus-4-6",
  "compactionCount": 0,
  "origin": {
    "label": "Alice",
    "provider": "telegram",
    "surface": "telegram",
    "chatType": "direct",
    "from": "telegram:123456789",
    "to": "telegram:123456789",
    "accountId": "default"
  },
  "deliveryContext": {
    "channel": "telegram",
    "to": "telegram:123456789",
    "accountId": "default"
  },
  "lastChannel": "telegram",
  "lastTo": "telegram:123456789",
  "lastAccountId": "default"
}"#;
        let entry = SessionEntry::from_json(json).unwrap();
        assert_eq!(entry.system_sent, Some(true));
        assert_eq!(
            entry.origin.as_ref().unwrap().label.as_deref(),
            Some("Alice")
        );
        assert_eq!(serde_json::to_string_pretty(&entry).unwrap(), json);
    }

    #[test]
    fn unknown_values_and_fields_survive() {
        let json = r#"{"sessionId":"s","updatedAt":1,"chatType":"dm","queueMode":"future-mode","deliveryContext":{"channel":"slack","threadId":"1700.1","newThing":[1,2.5,"x"]},"lastThreadId":42,"runState":"running"}"#;
        let entry = SessionEntry::from_json(json).unwrap();
        assert_eq!(entry.chat_type, Some(ChatType::Other("dm".into())));
        assert_eq!(
            entry.chat_type.as_ref().unwrap().peer_kind(),
            Some(PeerKind::Direct)
        );
        assert_eq!(
            entry.queue_mode,
            Some(QueueMode::Other("future-mode".into()))
        );
        assert_eq!(entry.last_thread_id, Some(ThreadId::Number(42)));
        assert_eq!(entry.extra["runState"], "running");
        assert_eq!(serde_json::to_string(&entry).unwrap(), json);
    }

    #[test]
    fn missing_id_and_timestamp_read_as_empty_and_stay_absent() {
        let entry = SessionEntry::from_json(r#"{"label":"orphan"}"#).unwrap();
        assert_eq!(entry.session_id, "");
        assert_eq!(entry.updated_at, 0);
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            r#"{"label":"orphan"}"#
        );
    }

    #[test]
    fn legacy_fields_migrate_on_read() {
        let entry = SessionEntry::from_json(
            r#"{"sessionId":"s","updatedAt":1,"provider":"whatsapp","lastProvider":"telegram","room":"ops"}"#,
        )
        .unwrap();
        assert_eq!(entry.channel.as_deref(), Some("whatsapp"));
        assert_eq!(entry.last_channel.as_deref(), Some("telegram"));
        assert_eq!(entry.group_channel.as_deref(), Some("ops"));
        assert!(entry.extra.is_empty());

        let kept = SessionEntry::from_json(
            r#"{"sessionId":"s","updatedAt":1,"channel":"slack","provider":"whatsapp"}"#,
        )
        .unwrap();
        assert_eq!(kept.channel.as_deref(), Some("slack"));
    }

    #[test]
    fn channel_name_falls_back_through_the_route() {
        let mut entry = SessionEntry::new("s", 1);
        assert_eq!(entry.channel_name(), None);
        entry.origin = Some(SessionOrigin {
            provider: Some("signal".into()),
            ..Default::default()
        });
        assert_eq!(entry.channel_name(), Some("signal"));
        entry.last_channel = Some("telegram".into());
        assert_eq!(entry.channel_name(), Some("telegram"));
    }
}
