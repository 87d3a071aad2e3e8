//! What a turn used, and which engine session it ran in.

use serde::{Deserialize, Serialize};

use crate::store::entry::SessionEntry;

/// Token usage and model of one turn, as the engine reports it.
///
/// ```
/// use agent_sessions::memory::TurnUsage;
///
/// let usage = TurnUsage::tokens(1_200, 340, 14_000, 120).by("anthropic", "claude-opus-4-6");
/// assert_eq!(usage.prompt_tokens(), 15_320); // input + cache read + cache write
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnUsage {
    /// Input tokens.
    pub input: Option<u64>,
    /// Output tokens.
    pub output: Option<u64>,
    /// Cache-read tokens.
    pub cache_read: Option<u64>,
    /// Cache-write tokens.
    pub cache_write: Option<u64>,
    /// The provider's own total.
    pub total: Option<u64>,
    /// The provider used.
    pub provider: Option<String>,
    /// The model used.
    pub model: Option<String>,
    /// The model's context window.
    pub context_tokens: Option<u64>,
}

impl TurnUsage {
    /// Token counts.
    pub fn tokens(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        TurnUsage {
            input: Some(input),
            output: Some(output),
            cache_read: Some(cache_read),
            cache_write: Some(cache_write),
            ..TurnUsage::default()
        }
    }

    /// No counts yet: add them by name.
    ///
    /// ```
    /// use agent_sessions::memory::TurnUsage;
    ///
    /// let usage = TurnUsage::new().input(1_200).output(340).cache_read(14_000);
    /// assert_eq!(usage.prompt_tokens(), 15_200);
    /// ```
    pub fn new() -> Self {
        TurnUsage::default()
    }

    /// Input tokens.
    pub fn input(mut self, tokens: u64) -> Self {
        self.input = Some(tokens);
        self
    }

    /// Output tokens.
    pub fn output(mut self, tokens: u64) -> Self {
        self.output = Some(tokens);
        self
    }

    /// Cache-read tokens.
    pub fn cache_read(mut self, tokens: u64) -> Self {
        self.cache_read = Some(tokens);
        self
    }

    /// Cache-write tokens.
    pub fn cache_write(mut self, tokens: u64) -> Self {
        self.cache_write = Some(tokens);
        self
    }

    /// The provider's own total.
    pub fn total(mut self, tokens: u64) -> Self {
        self.total = Some(tokens);
        self
    }

    /// This usage as a transcript's assistant message records it.
    pub(crate) fn to_transcript_usage(&self) -> crate::transcript::Usage {
        crate::transcript::Usage {
            input: self.input.unwrap_or(0),
            output: self.output.unwrap_or(0),
            cache_read: self.cache_read.unwrap_or(0),
            cache_write: self.cache_write.unwrap_or(0),
            total_tokens: self.total.unwrap_or_else(|| {
                self.prompt_tokens()
                    .saturating_add(self.output.unwrap_or(0))
            }),
            ..crate::transcript::Usage::default()
        }
    }

    /// The provider and model.
    pub fn by(mut self, provider: impl Into<String>, model: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self.model = Some(model.into());
        self
    }

    /// The model's context window.
    pub fn with_context_tokens(mut self, tokens: u64) -> Self {
        self.context_tokens = Some(tokens);
        self
    }

    /// The prompt size: input + cache read + cache write — what the memory flush and
    /// compaction watch (OpenClaw's `totalTokens`, which does not count output).
    pub fn prompt_tokens(&self) -> u64 {
        // Saturating: a provider's absurd counts never overflow.
        self.input
            .unwrap_or(0)
            .saturating_add(self.cache_read.unwrap_or(0))
            .saturating_add(self.cache_write.unwrap_or(0))
    }

    fn has_counts(&self) -> bool {
        [
            self.input,
            self.output,
            self.cache_read,
            self.cache_write,
            self.total,
        ]
        .iter()
        .any(|v| v.is_some_and(|v| v > 0))
    }

    /// Records this usage in `entry` as OpenClaw's `persistSessionUsageUpdate` does.
    /// Returns whether token counts were recorded (a real turn).
    pub(crate) fn apply(&self, entry: &mut SessionEntry) -> bool {
        if self.has_counts() {
            entry.input_tokens = Some(self.input.unwrap_or(0));
            entry.output_tokens = Some(self.output.unwrap_or(0));
            let prompt = self.prompt_tokens();
            entry.total_tokens = Some(if prompt > 0 {
                prompt
            } else {
                self.total.or(self.input).unwrap_or(0)
            });
        }
        if self.provider.is_some() {
            entry.model_provider = self.provider.clone();
        }
        if self.model.is_some() {
            entry.model = self.model.clone();
        }
        if self.context_tokens.is_some() {
            entry.context_tokens = self.context_tokens;
        }
        self.has_counts()
    }
}

/// The session an external engine keeps for this conversation, to resume it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[non_exhaustive]
pub enum EngineSession {
    /// An agent SDK session (`sdkSessionId`).
    Sdk {
        /// Its id.
        id: String,
    },
    /// A CLI engine's session, per provider (`cliSessionIds`; `claude-cli` also in the
    /// legacy `claudeCliSessionId`).
    Cli {
        /// The provider (`claude-cli`, `codex-cli`, …).
        provider: String,
        /// Its id.
        id: String,
    },
    /// An engine runtime's session, per engine type (the id the engine gave the
    /// conversation; engine types e.g. `openclaw`, `droid`).
    Engine {
        /// The engine type.
        engine: String,
        /// Its id.
        id: String,
    },
}

impl EngineSession {
    /// Records the id in `entry`.
    pub(crate) fn apply(&self, entry: &mut SessionEntry) {
        match self {
            EngineSession::Sdk { id } => entry.sdk_session_id = Some(id.clone()),
            EngineSession::Cli { provider, id } => {
                let provider = provider.trim().to_lowercase();
                if provider == "claude-cli" {
                    entry.claude_cli_session_id = Some(id.clone());
                }
                entry
                    .cli_session_ids
                    .get_or_insert_with(Default::default)
                    .insert(provider, id.clone());
            }
            EngineSession::Engine { engine, id } => {
                entry
                    .engine_session_ids
                    .get_or_insert_with(Default::default)
                    .insert(engine.trim().to_lowercase(), id.clone());
            }
        }
    }
}

/// Which engine session to look up with [`Session::engine_session`](crate::manager::Session::engine_session).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineKind {
    /// The agent SDK.
    Sdk,
    /// A CLI provider.
    Cli(String),
    /// An engine type.
    Engine(String),
}

impl EngineKind {
    /// The id `entry` holds for this engine.
    pub fn session_id(&self, entry: &SessionEntry) -> Option<String> {
        match self {
            EngineKind::Sdk => entry.sdk_session_id.clone(),
            EngineKind::Cli(provider) => {
                let provider = provider.trim().to_lowercase();
                entry
                    .cli_session_ids
                    .as_ref()
                    .and_then(|ids| ids.get(&provider).cloned())
                    .or_else(|| {
                        (provider == "claude-cli")
                            .then(|| entry.claude_cli_session_id.clone())
                            .flatten()
                    })
            }
            EngineKind::Engine(engine) => entry
                .engine_session_ids
                .as_ref()
                .and_then(|ids| ids.get(&engine.trim().to_lowercase()).cloned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_follows_openclaw() {
        let mut entry = SessionEntry::new("s", 1);
        entry.model = Some("old".into());
        assert!(TurnUsage::tokens(1200, 340, 14000, 120).apply(&mut entry));
        assert_eq!(
            (entry.input_tokens, entry.output_tokens, entry.total_tokens),
            (Some(1200), Some(340), Some(15320))
        );
        assert_eq!(
            entry.model.as_deref(),
            Some("old"),
            "falls back to the existing model"
        );

        let provider_total = TurnUsage {
            total: Some(900),
            ..TurnUsage::default()
        };
        provider_total.apply(&mut entry);
        assert_eq!(
            entry.total_tokens,
            Some(900),
            "no prompt breakdown: the provider's total"
        );

        let model_only = TurnUsage::default()
            .by("openai", "gpt-5")
            .with_context_tokens(400_000);
        assert!(!model_only.apply(&mut entry), "no counts: not a turn");
        assert_eq!(entry.total_tokens, Some(900));
        assert_eq!(
            (entry.model.as_deref(), entry.context_tokens),
            (Some("gpt-5"), Some(400_000))
        );
    }

    #[test]
    fn engine_sessions_are_kept_per_engine() {
        let mut entry = SessionEntry::new("s", 1);
        EngineSession::Sdk { id: "sdk-1".into() }.apply(&mut entry);
        EngineSession::Cli {
            provider: "Claude-CLI".into(),
            id: "c-1".into(),
        }
        .apply(&mut entry);
        EngineSession::Engine {
            engine: "droid".into(),
            id: "d-1".into(),
        }
        .apply(&mut entry);
        assert_eq!(EngineKind::Sdk.session_id(&entry).as_deref(), Some("sdk-1"));
        assert_eq!(
            EngineKind::Cli("claude-cli".into())
                .session_id(&entry)
                .as_deref(),
            Some("c-1")
        );
        assert_eq!(entry.claude_cli_session_id.as_deref(), Some("c-1"));
        assert_eq!(
            EngineKind::Engine("DROID".into())
                .session_id(&entry)
                .as_deref(),
            Some("d-1")
        );
        assert_eq!(
            EngineKind::Engine("openclaw".into()).session_id(&entry),
            None
        );
    }
}
