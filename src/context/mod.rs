//! What the model sees of a conversation, and what the bot sends back.
//!
//! * [`inbound`] — the inbound message and the pipeline that turns its body into what
//!   the model reads (sender lines, untrusted context, system events).
//! * [`activation`] — in groups, which messages the agent answers.
//! * [`history`] — the bounded history of group chatter the agent did not answer.
//! * [`prompt`] — a system prompt from sections (the person, the summary, the workspace).
//! * [`reply`] — reply directives and silence markers in what the model wrote.
//! * [`heartbeat`] — the decisions around a heartbeat run (is `HEARTBEAT.md` empty?).
//! * [`send_policy`] — whether a reply may be sent on a session at all.
//! * [`delivery`] — where replies go: the session's delivery route.

pub mod activation;
pub mod chat;
pub mod delivery;
pub mod heartbeat;
pub mod history;
pub mod inbound;
pub mod prompt;
pub mod reply;
pub mod send_policy;
