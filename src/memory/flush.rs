//! The memory flush: one turn, before the context is compacted, in which the agent
//! writes down what it must not forget (as OpenClaw does).

use serde::{Deserialize, Serialize};

use crate::reply::payload::SILENT_REPLY_TOKEN;
use crate::store::entry::SessionEntry;

/// How many tokens before the compaction point the flush runs (OpenClaw: 4,000).
pub(crate) const DEFAULT_SOFT_THRESHOLD_TOKENS: u64 = 4_000;
/// Tokens reserved for compaction itself (OpenClaw's `reserveTokensFloor`: 20,000).
pub(crate) const DEFAULT_RESERVE_TOKENS_FLOOR: u64 = 20_000;
/// The context window assumed when the session does not record one (OpenClaw: 200,000).
pub(crate) const DEFAULT_CONTEXT_TOKENS: u64 = 200_000;
/// OpenClaw's flush prompt.
pub(crate) const DEFAULT_FLUSH_PROMPT: &str = "Pre-compaction memory flush. Store durable memories now (use memory/YYYY-MM-DD.md; create memory/ if needed). If nothing to store, reply with NO_REPLY.";
/// OpenClaw's flush system prompt.
pub(crate) const DEFAULT_FLUSH_SYSTEM_PROMPT: &str = "Pre-compaction memory flush turn. The session is near auto-compaction; capture durable memories to disk. You may reply, but usually NO_REPLY is correct.";

/// A memory flush to run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushPlan {
    /// The user-side prompt of the flush turn.
    pub prompt: String,
    /// The system prompt of the flush turn.
    pub system_prompt: String,
    /// The token count at which it fires.
    pub threshold: u64,
    /// The session's prompt size now.
    pub total_tokens: u64,
}

/// Decides whether a session needs a memory flush now.
///
/// [`MemoryFlushSettings`] is OpenClaw's rule; implement this for others (flush by turn
/// count, by time).
pub trait MemoryFlushGuard: Send + Sync + std::fmt::Debug {
    /// The flush to run for `entry`, or `None`.
    fn plan(&self, entry: &SessionEntry) -> Option<FlushPlan>;
}

/// OpenClaw's memory-flush settings and rule (`shouldRunMemoryFlush`).
///
/// A flush fires when the session's prompt size (`totalTokens`) reaches
/// `context window − reserve floor − soft threshold`, at most once per compaction cycle:
/// after a flush, `memoryFlushCompactionCount` equals `compactionCount` until the next
/// compaction.
///
/// ```
/// use agent_sessions::memory::{MemoryFlushGuard, MemoryFlushSettings};
/// use agent_sessions::SessionEntry;
///
/// let guard = MemoryFlushSettings { reserve_tokens_floor: 5_000, ..MemoryFlushSettings::default() };
/// let mut entry = SessionEntry::new("s", 1);
/// entry.context_tokens = Some(100_000);
/// entry.total_tokens = Some(91_000); // 100k − 5k − 4k: the threshold itself fires
/// assert_eq!(guard.plan(&entry).unwrap().threshold, 91_000);
/// entry.memory_flush_compaction_count = Some(0); // flushed in this cycle
/// assert!(guard.plan(&entry).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MemoryFlushSettings {
    /// Whether flushes run at all.
    pub enabled: bool,
    /// Tokens before the compaction point.
    pub soft_threshold_tokens: u64,
    /// Tokens reserved for compaction.
    pub reserve_tokens_floor: u64,
    /// The context window when the entry records none.
    pub context_window_tokens: u64,
    /// The flush prompt.
    pub prompt: String,
    /// The flush system prompt.
    pub system_prompt: String,
}

impl Default for MemoryFlushSettings {
    fn default() -> Self {
        MemoryFlushSettings {
            enabled: true,
            soft_threshold_tokens: DEFAULT_SOFT_THRESHOLD_TOKENS,
            reserve_tokens_floor: DEFAULT_RESERVE_TOKENS_FLOOR,
            context_window_tokens: DEFAULT_CONTEXT_TOKENS,
            prompt: DEFAULT_FLUSH_PROMPT.to_owned(),
            system_prompt: DEFAULT_FLUSH_SYSTEM_PROMPT.to_owned(),
        }
    }
}

impl MemoryFlushSettings {
    /// The token count at which a session with `context_window` flushes (0: never).
    pub fn threshold(&self, context_window: u64) -> u64 {
        context_window
            .max(1)
            .saturating_sub(self.reserve_tokens_floor)
            .saturating_sub(self.soft_threshold_tokens)
    }
}

/// A prompt, with OpenClaw's hint appended when it does not mention the silent token.
fn with_silence_hint(prompt: &str) -> String {
    let prompt = prompt.trim();
    if prompt.contains(SILENT_REPLY_TOKEN) {
        prompt.to_owned()
    } else {
        format!("{prompt}\n\nIf no user-visible reply is needed, start with {SILENT_REPLY_TOKEN}.")
    }
}

impl MemoryFlushGuard for MemoryFlushSettings {
    fn plan(&self, entry: &SessionEntry) -> Option<FlushPlan> {
        if !self.enabled {
            return None;
        }
        let total = entry.total_tokens.filter(|t| *t > 0)?;
        let window = entry.context_tokens.unwrap_or(self.context_window_tokens);
        let threshold = self.threshold(window);
        if threshold == 0 || total < threshold {
            return None;
        }
        if entry.memory_flush_compaction_count == Some(entry.compaction_count.unwrap_or(0)) {
            return None;
        }
        Some(FlushPlan {
            prompt: with_silence_hint(&self.prompt),
            system_prompt: with_silence_hint(&self.system_prompt),
            threshold,
            total_tokens: total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        total: Option<u64>,
        window: Option<u64>,
        compactions: Option<u64>,
        flushed_at: Option<u64>,
    ) -> SessionEntry {
        let mut entry = SessionEntry::new("s", 1);
        entry.total_tokens = total;
        entry.context_tokens = window;
        entry.compaction_count = compactions;
        entry.memory_flush_compaction_count = flushed_at;
        entry
    }

    #[test]
    fn threshold_arithmetic_at_and_around_the_boundary() {
        let guard = MemoryFlushSettings::default(); // 200k − 20k − 4k = 176k
        let cases = [
            (entry(Some(175_999), None, None, None), false),
            (entry(Some(176_000), None, None, None), true),
            (entry(Some(176_001), None, None, None), true),
            (entry(None, None, None, None), false),
            (entry(Some(0), None, None, None), false),
            (entry(Some(20_000), Some(24_000), None, None), false), // threshold 0: never
            (entry(Some(999_999), Some(10_000), None, None), false),
            (entry(Some(176_000), None, Some(2), Some(2)), false),
            (entry(Some(176_000), None, Some(3), Some(2)), true),
            (entry(Some(176_000), None, None, Some(0)), false),
        ];
        for (index, (entry, fires)) in cases.into_iter().enumerate() {
            assert_eq!(guard.plan(&entry).is_some(), fires, "case {index}");
        }
        assert!(MemoryFlushSettings {
            enabled: false,
            ..guard.clone()
        }
        .plan(&entry(Some(190_000), None, None, None))
        .is_none());
    }

    #[test]
    fn prompts_get_the_silence_hint_once() {
        let guard = MemoryFlushSettings {
            prompt: "Save your notes.".into(),
            ..MemoryFlushSettings::default()
        };
        let plan = guard.plan(&entry(Some(190_000), None, None, None)).unwrap();
        assert_eq!(
            plan.prompt,
            "Save your notes.\n\nIf no user-visible reply is needed, start with NO_REPLY."
        );
        assert_eq!(
            plan.system_prompt, DEFAULT_FLUSH_SYSTEM_PROMPT,
            "already mentions NO_REPLY"
        );
    }
}
