//! What a session remembers beyond its transcript.
//!
//! * [`TurnUsage`] and [`EngineSession`] — what each turn used (tokens, model) and the
//!   engine session it ran in.
//! * [`MemoryFlushGuard`] — the memory flush that runs once per compaction cycle.
//! * [`Summarizer`] — context summaries, from a deterministic template
//!   ([`TemplateSummarizer`]) or your model.
//! * [`Introspector`] — checkpoints: a look at a session before its snapshot is
//!   refreshed.
//!
//! # Summaries
//!
//! Summaries: what a conversation is about, in at most 1,000 characters.
//!
//! A [`Summarizer`] merges a previous summary with new turns. The host plugs in its LLM;
//! [`TemplateSummarizer`] is the deterministic default, writing this format:
//!
//! ```text
//! GOAL: <current user objective>
//! ENTITIES: <key names, files, URLs — comma separated>
//! DECISIONS: <choices made this session — comma separated>
//! PENDING: <unanswered questions or pending items>
//! TURNS: <N>
//! ```
//!
//! ```
//! use agent_sessions::memory::{Summarizer, SummaryInput, SummaryTurn, TemplateSummarizer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let input = SummaryInput::new(vec![
//!     SummaryTurn::user("Can you book a table at Luigi's for Sunday?"),
//!     SummaryTurn::assistant("Booked Luigi's for Sunday at 7pm. We decided on the patio."),
//! ]);
//! let summary = TemplateSummarizer::default().summarize(&input).await?;
//! assert!(summary.starts_with("GOAL: Can you book a table at Luigi's for Sunday?"));
//! assert!(summary.contains("ENTITIES: Luigi's, Sunday"));
//! assert!(summary.ends_with("TURNS: 1"));
//! # Ok(())
//! # }
//! ```
//!
//! # Checkpoints
//!
//! Checkpoints: moments when an introspection pass looks back over a session's recent
//! events and updates its working memory and description; and the versioned snapshot a
//! session keeps of slowly changing context (OpenClaw's skills).

pub(crate) mod checkpoint;
pub(crate) mod cuts;
pub(crate) mod flush;
mod idle;
pub(crate) mod jobs;
mod options;
pub(crate) mod summary;
pub(crate) mod usage;

pub use checkpoint::{IntrospectionInput, IntrospectionOutcome, Introspector};
pub use flush::{FlushPlan, MemoryFlushGuard, MemoryFlushSettings};
pub use idle::{IdleCheckpointOptions, IdleCheckpoints};
pub use jobs::{CompactionEvent, SummaryRefresh};
pub use options::MemoryOptions;
pub(crate) use options::DEFAULT_SUMMARY_QUIET_GAP;
pub use summary::{
    template_summary, Summarizer, SummaryInput, SummaryTurn, TemplateSummarizer, MAX_SUMMARY_CHARS,
};
pub use usage::{EngineKind, EngineSession, TurnUsage};
