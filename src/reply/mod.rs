//! What goes out: the bot's reply, whether it may be sent, and where it goes.
//!
//! * [`ReplyPayload`] — what to send: reply directives and silence markers taken out.
//! * [`is_heartbeat_content_effectively_empty`] and [`strip_heartbeat_token`] — the
//!   decisions around a heartbeat run.
//! * [`SendPolicyConfig`] — whether a reply may be sent on a session at all.
//! * [`DeliveryContext`](crate::DeliveryContext) — where replies go.
//!
//! What comes in and what the model sees is in [`inbound`](crate::inbound).
//!
//! # Replies
//!
//! What the bot sends back: reply payloads from the model's output.
//!
//! [`Turn::complete`](crate::manager::Turn::complete) turns the model's outputs into
//! [`ReplyPayload`]s as OpenClaw does: `[[reply_to_current]]` and `[[reply_to:<id>]]`
//! directives, `MEDIA:` lines, silence (`NO_REPLY`, `<NO_REPLY>`, `<EMPTY_RESPONSE>`),
//! heartbeat acknowledgements and texts a messaging tool already sent; the session's
//! send policy has the last word.
//!
//! # Heartbeats
//!
//! Heartbeats: the periodic turn in which the agent reads `HEARTBEAT.md` and either acts
//! or answers `HEARTBEAT_OK`.
//!
//! The host schedules heartbeat runs; this module holds the decisions around them that
//! OpenClaw makes. Before a run: [`is_heartbeat_content_effectively_empty`] — a
//! `HEARTBEAT.md` with no tasks in it means no model call at all. After it: the reply
//! goes through [`strip_heartbeat_token`]
//! in [`HeartbeatMode::Heartbeat`],
//! where a short acknowledgement is nothing to send.
//!
//! ```
//! use agent_sessions::reply::{is_heartbeat_content_effectively_empty, HEARTBEAT_PROMPT};
//!
//! let template = "# HEARTBEAT.md\n\n<!-- Add tasks below. -->\n- [ ]\n";
//! assert!(is_heartbeat_content_effectively_empty(template), "skip the run");
//! let tasks = "# HEARTBEAT.md\n- [ ] Check the build every morning\n";
//! assert!(!is_heartbeat_content_effectively_empty(tasks), "run with HEARTBEAT_PROMPT");
//! assert!(HEARTBEAT_PROMPT.contains("HEARTBEAT_OK"));
//! ```
//!
//! # Where replies go
//!
//! Where replies go: OpenClaw's delivery context, normalised and merged.
//!
//! An entry keeps its reply route twice, as OpenClaw writes it: in `deliveryContext` and
//! mirrored in `lastChannel`, `lastTo`, `lastAccountId` and `lastThreadId`. Every change
//! goes through one function that keeps the two in step.

pub(crate) mod delivery;
pub(crate) mod heartbeat;
pub(crate) mod payload;
pub(crate) mod send_policy;

pub use heartbeat::{
    is_heartbeat_content_effectively_empty, is_heartbeat_file_effectively_empty, HEARTBEAT_PROMPT,
    MAX_HEARTBEAT_FILE_BYTES,
};
pub use payload::{strip_heartbeat_token, HeartbeatMode, HeartbeatStrip, ReplyPayload};
pub use send_policy::{RuleOrder, SendMatch, SendPolicyConfig, SendRule};
