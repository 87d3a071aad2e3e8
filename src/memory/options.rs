//! How a manager keeps a long conversation: [`MemoryOptions`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::checkpoint::Introspector;
use super::flush::MemoryFlushGuard;
use super::summary::{Summarizer, TemplateSummarizer};

/// How long a conversation must be quiet before a person's identity summary is merged,
/// by default.
pub(crate) const DEFAULT_SUMMARY_QUIET_GAP: Duration = Duration::from_secs(60 * 60);

/// How a manager keeps a long conversation: who writes summaries, what decides the
/// memory flush before a compaction, and what looks back over a session at checkpoints.
/// Given to [`SessionManagerBuilder::memory`](crate::manager::SessionManagerBuilder::memory).
///
/// The defaults: the [`TemplateSummarizer`]; the memory flush of
/// [`MemoryFlushSettings`](super::MemoryFlushSettings), at the manager's
/// [`context_window`](crate::manager::SessionManagerBuilder::context_window); no
/// introspector, so checkpoints record only that they happened; identity summaries
/// merged after an hour of quiet.
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::memory::{MemoryFlushSettings, MemoryOptions};
/// use agent_sessions::prelude::*;
///
/// # fn main() -> agent_sessions::Result<()> {
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .memory(
///         MemoryOptions::new()
///             .flush_guard(MemoryFlushSettings { reserve_tokens_floor: 30_000, ..Default::default() })
///             .summary_quiet_gap(Duration::from_secs(15 * 60)),
///     )
///     .build()?;
/// # let _ = manager;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MemoryOptions {
    pub(crate) summarizer: Arc<dyn Summarizer>,
    pub(crate) flush_guard: Option<Arc<dyn MemoryFlushGuard>>,
    pub(crate) introspector: Option<Arc<dyn Introspector>>,
    pub(crate) checkpoint_every_turns: Option<u64>,
    pub(crate) summary_quiet_gap: Duration,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            summarizer: Arc::new(TemplateSummarizer),
            flush_guard: None,
            introspector: None,
            checkpoint_every_turns: None,
            summary_quiet_gap: DEFAULT_SUMMARY_QUIET_GAP,
        }
    }
}

impl fmt::Debug for MemoryOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryOptions")
            .field("custom_flush_guard", &self.flush_guard.is_some())
            .field("introspector", &self.introspector.is_some())
            .field("checkpoint_every_turns", &self.checkpoint_every_turns)
            .field("summary_quiet_gap", &self.summary_quiet_gap)
            .finish_non_exhaustive()
    }
}

impl MemoryOptions {
    /// The defaults (see the type's documentation).
    pub fn new() -> Self {
        MemoryOptions::default()
    }

    /// Writes context and identity summaries (default: [`TemplateSummarizer`]).
    pub fn summarizer(mut self, summarizer: impl Summarizer + 'static) -> Self {
        self.summarizer = Arc::new(summarizer);
        self
    }

    /// Decides memory flushes. A guard of your own decides with its own settings: the
    /// manager's [`context_window`](crate::manager::SessionManagerBuilder::context_window)
    /// sets only the default guard's window.
    pub fn flush_guard(mut self, guard: impl MemoryFlushGuard + 'static) -> Self {
        self.flush_guard = Some(Arc::new(guard));
        self
    }

    /// Looks back over a session at its checkpoints and updates its working memory and
    /// description from what it finds (default: none). Checkpoints read the session's
    /// transcript: the manager needs a transcript store.
    pub fn introspector(mut self, introspector: impl Introspector + 'static) -> Self {
        self.introspector = Some(Arc::new(introspector));
        self
    }

    /// Takes a `turn_limit` checkpoint every `turns` turns (default: never). Needs an
    /// [`introspector`](Self::introspector) and a transcript store, or
    /// [`build`](crate::manager::SessionManagerBuilder::build) refuses.
    pub fn checkpoint_every_turns(mut self, turns: u64) -> Self {
        self.checkpoint_every_turns = Some(turns);
        self
    }

    /// How long a conversation must be quiet before a person's identity summary is
    /// merged (default: one hour).
    pub fn summary_quiet_gap(mut self, gap: Duration) -> Self {
        self.summary_quiet_gap = gap;
        self
    }
}
