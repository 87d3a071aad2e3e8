//! What a session remembers beyond its transcript.
//!
//! * [`TurnUsage`] and [`EngineSession`] — what each turn used (tokens, model) and the
//!   engine session it ran in.
//! * [`MemoryFlushGuard`] — the memory flush that runs once per compaction cycle.
//! * [`Summarizer`] — context summaries, from a deterministic template
//!   ([`TemplateSummarizer`]) or your model.
//! * [`Introspector`] — checkpoints: a look at a session before its snapshot is
//!   refreshed.

pub(crate) mod checkpoint;
pub(crate) mod flush;
pub(crate) mod summary;
pub(crate) mod usage;

pub use checkpoint::{IntrospectionInput, IntrospectionOutcome, Introspector};
pub use flush::{FlushPlan, MemoryFlushGuard, MemoryFlushSettings};
pub use summary::{
    template_summary, Summarizer, SummaryInput, SummaryTurn, TemplateSummarizer, MAX_SUMMARY_CHARS,
};
pub use usage::{EngineKind, EngineSession, TurnUsage};
