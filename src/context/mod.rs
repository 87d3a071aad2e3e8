//! What the model sees of a conversation, and what the bot sends back.
//!
//! * [`InboundMessage`] — what an adapter knows about a message; [`model_body`] and
//!   [`PipelineOptions`] — the pipeline that turns its body into what the model reads
//!   (sender lines, untrusted context), and [`SystemEvents`] queued before it.
//! * [`decide`] and [`OwnerChatter`] — in groups, which messages the agent answers.
//! * [`HistoryBuffer`] — the bounded history of group chatter the agent did not answer.
//! * [`ChatMessage`] and [`fit_to_budget`] — the conversation as a model reads it.
//! * [`PromptBuilder`] — a system prompt from sections (the person, the summary, the
//!   workspace).
//! * [`ReplyPayload`] — what to send: reply directives and silence markers taken out.
//! * [`is_heartbeat_content_effectively_empty`] and [`strip_heartbeat_token`] — the
//!   decisions around a heartbeat run.
//! * [`SendPolicyConfig`] — whether a reply may be sent on a session at all.
//! * [`DeliveryRoute`] — where replies go: the session's delivery route.

pub(crate) mod activation;
pub(crate) mod chat;
pub(crate) mod delivery;
pub(crate) mod heartbeat;
pub(crate) mod history;
pub(crate) mod inbound;
pub(crate) mod prompt;
pub(crate) mod reply;
pub(crate) mod send_policy;

pub use activation::{decide, ActivationDecision, ActivationReason, OwnerChatter};
pub use chat::{
    fit_to_budget, message_tokens, transcript_messages, ChatMessage, ChatRole, EstimatedTokens,
    TokenCounter, ToolCall,
};
pub use delivery::DeliveryRoute;
pub use heartbeat::{is_heartbeat_content_effectively_empty, HEARTBEAT_PROMPT};
pub use history::{
    build_history_context, format_envelope, HistoryBuffer, HistoryClaim, HistoryEntry,
    MemoryHistory,
};
pub use inbound::{
    defang, model_body, InboundMessage, PipelineOptions, Sender, SystemEvent, SystemEventQueue,
    SystemEvents, UNTRUSTED_CONTEXT_HEADER,
};
pub use prompt::PromptBuilder;
pub use reply::{
    strip_heartbeat_token, HeartbeatMode, HeartbeatStrip, ReplyDirectives, ReplyOptions,
    ReplyPayload,
};
pub use send_policy::{SendMatch, SendPolicyConfig, SendRule};
