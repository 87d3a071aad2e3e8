//! Explicit resets: `/new`, `/reset`, the kernel HTTP API's reset phrases, and model (documented in the parent module).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::inbound::pipeline::{strip_mentions, strip_structural_prefixes};
use crate::inbound::InboundMessage;

/// OpenClaw's reset triggers.
pub(crate) const DEFAULT_RESET_TRIGGERS: &[&str] = &["/new", "/reset"];

/// The reset phrases of the kernel HTTP API (`new task`, `start over`, `reset`, …): what
/// its callers treat as "start a new session".
pub(crate) const CLAWOS_RESET_PHRASES: &[&str] = &[
    "new task",
    "start over",
    "reset",
    "forget that",
    "new project",
    "clear history",
    "start fresh",
    "new conversation",
];

/// Which texts reset a session, and who may use them.
///
/// Matching is case-insensitive, on the message with structural prefixes removed (and,
/// in groups, mentions): the whole text equal to a trigger, or a trigger followed by
/// whitespace and more text, which becomes the new session's first message.
///
/// Only authorised senders reset: the owner always, anyone on `allow_from`, and — unless
/// `direct_peers_may_reset` is off — the other person of a direct chat. Anyone else's
/// trigger text is an ordinary message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResetTriggers {
    /// The trigger texts.
    pub triggers: Vec<String>,
    /// Sender ids (bare, `<channel>:<id>`, E.164 or username) allowed to reset anywhere;
    /// `*` allows everyone.
    pub allow_from: Vec<String>,
    /// Whether the other person of a direct chat may reset it.
    pub direct_peers_may_reset: bool,
    /// How the agent is mentioned in groups (`@bot`), removed before matching.
    pub mention_names: Vec<String>,
}

impl Default for ResetTriggers {
    fn default() -> Self {
        ResetTriggers::new(DEFAULT_RESET_TRIGGERS.iter().copied())
    }
}

/// A reset found in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerMatch {
    /// The trigger, as configured.
    pub trigger: String,
    /// The text after the trigger (original case), empty when the message was only the
    /// trigger.
    pub body: String,
}

impl ResetTriggers {
    /// These triggers, with OpenClaw's authorisation defaults.
    pub fn new<I, S>(triggers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ResetTriggers {
            triggers: triggers.into_iter().map(Into::into).collect(),
            allow_from: Vec::new(),
            direct_peers_may_reset: true,
            mention_names: Vec::new(),
        }
    }

    /// The reset phrases of the kernel HTTP API (`reset`,
    /// `start over`, …) plus OpenClaw's commands.
    pub fn clawos() -> Self {
        ResetTriggers::new(
            DEFAULT_RESET_TRIGGERS
                .iter()
                .chain(CLAWOS_RESET_PHRASES)
                .copied(),
        )
    }

    /// Allows these senders to reset anywhere.
    pub fn allow<I, S>(mut self, senders: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow_from.extend(senders.into_iter().map(Into::into));
        self
    }

    /// Whether the other person of a direct chat may reset it.
    pub fn direct_peers_may_reset(mut self, allowed: bool) -> Self {
        self.direct_peers_may_reset = allowed;
        self
    }

    /// How the agent is mentioned in groups.
    pub fn mention_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.mention_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Whether the sender of `message` may reset its session.
    pub(crate) fn is_authorized(&self, message: &InboundMessage) -> bool {
        if message.sender_is_owner {
            return true;
        }
        if !message.is_group() && self.direct_peers_may_reset {
            return true;
        }
        let channel = message.channel.trim().to_lowercase();
        let sender = &message.sender;
        let identities: Vec<String> = [&sender.id, &sender.e164, &sender.username]
            .into_iter()
            .flatten()
            .map(|id| id.trim().to_lowercase())
            .filter(|id| !id.is_empty())
            .collect();
        self.allow_from.iter().any(|allowed| {
            let allowed = allowed.trim().to_lowercase();
            allowed == "*"
                || identities
                    .iter()
                    .any(|id| *id == allowed || format!("{channel}:{id}") == allowed)
        })
    }

    /// The reset in `message`, if it has one and its sender may reset.
    pub fn detect(&self, message: &InboundMessage) -> Option<TriggerMatch> {
        if self.triggers.is_empty() || !self.is_authorized(message) {
            return None;
        }
        let normalized = strip_structural_prefixes(&message.body);
        let candidate = if message.is_group() {
            strip_mentions(&normalized, &self.mention_names)
        } else {
            normalized
        };
        let raw = message.body.trim();
        self.triggers.iter().find_map(|trigger| {
            let wanted = trigger.trim();
            if wanted.is_empty() {
                return None;
            }
            if eq_ignore_case(raw, wanted) || eq_ignore_case(&candidate, wanted) {
                return Some(TriggerMatch {
                    trigger: trigger.clone(),
                    body: String::new(),
                });
            }
            let rest = strip_prefix_ignore_case(&candidate, wanted)?;
            rest.starts_with(char::is_whitespace).then(|| TriggerMatch {
                trigger: trigger.clone(),
                body: rest.trim_start().to_owned(),
            })
        })
    }
}

pub(crate) fn eq_ignore_case(a: &str, b: &str) -> bool {
    a.to_lowercase() == b.to_lowercase()
}

/// `text` without `prefix` (compared case-insensitively), or `None`.
fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let count = prefix.chars().count();
    let end = text
        .char_indices()
        .nth(count)
        .map_or(text.len(), |(index, _)| index);
    (text.chars().count() >= count && eq_ignore_case(&text[..end], prefix)).then(|| &text[end..])
}

/// A model, as `provider/model`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelRef {
    /// The provider (`anthropic`, `openai`, …).
    pub provider: String,
    /// The model id.
    pub model: String,
}

impl ModelRef {
    /// `provider/model`.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        ModelRef {
            provider: provider.into(),
            model: model.into(),
        }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// The models a host offers, for model hints after a reset (`/new opus plan the trip`).
pub trait ModelCatalog: Send + Sync + fmt::Debug {
    /// Whether `name` is a provider.
    fn is_provider(&self, name: &str) -> bool;
    /// The model `name` (a `provider/model` ref, a model id, or an alias), within
    /// `provider` when given.
    fn lookup(&self, provider: Option<&str>, name: &str) -> Option<ModelRef>;
    /// A model matched loosely by `fragment`, when exactly one matches.
    fn fuzzy(&self, provider: Option<&str>, fragment: &str) -> Option<ModelRef> {
        let _ = (provider, fragment);
        None
    }
}

/// A fixed list of models and aliases.
///
/// ```
/// use agent_sessions::freshness::{ModelCatalog, ModelRef, StaticModelCatalog};
///
/// let catalog = StaticModelCatalog::new([("anthropic", "claude-opus-4-6"), ("openai", "gpt-5")])
///     .alias("opus", "anthropic", "claude-opus-4-6");
/// assert_eq!(catalog.lookup(None, "opus"), Some(ModelRef::new("anthropic", "claude-opus-4-6")));
/// assert_eq!(catalog.lookup(Some("openai"), "GPT-5"), Some(ModelRef::new("openai", "gpt-5")));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticModelCatalog {
    models: Vec<ModelRef>,
    aliases: BTreeMap<String, ModelRef>,
}

impl StaticModelCatalog {
    /// A catalog of `(provider, model)` pairs.
    pub fn new<I, P, M>(models: I) -> Self
    where
        I: IntoIterator<Item = (P, M)>,
        P: Into<String>,
        M: Into<String>,
    {
        StaticModelCatalog {
            models: models
                .into_iter()
                .map(|(p, m)| ModelRef::new(p, m))
                .collect(),
            aliases: BTreeMap::new(),
        }
    }

    /// Adds an alias.
    pub fn alias(mut self, alias: &str, provider: &str, model: &str) -> Self {
        self.aliases
            .insert(alias.to_lowercase(), ModelRef::new(provider, model));
        self
    }
}

impl ModelCatalog for StaticModelCatalog {
    fn is_provider(&self, name: &str) -> bool {
        self.models
            .iter()
            .any(|m| eq_ignore_case(&m.provider, name))
    }

    fn lookup(&self, provider: Option<&str>, name: &str) -> Option<ModelRef> {
        let in_provider = |m: &&ModelRef| provider.is_none_or(|p| eq_ignore_case(&m.provider, p));
        if provider.is_none() {
            if let Some(model) = self.aliases.get(&name.to_lowercase()) {
                return Some(model.clone());
            }
        }
        self.models
            .iter()
            .filter(in_provider)
            .find(|m| eq_ignore_case(&m.model, name) || eq_ignore_case(&m.to_string(), name))
            .cloned()
    }

    fn fuzzy(&self, provider: Option<&str>, fragment: &str) -> Option<ModelRef> {
        let fragment = fragment.to_lowercase();
        let mut matches = self
            .models
            .iter()
            .filter(|m| provider.is_none_or(|p| eq_ignore_case(&m.provider, p)))
            .filter(|m| m.to_string().to_lowercase().contains(&fragment));
        let first = matches.next()?;
        matches.next().is_none().then(|| first.clone())
    }
}

/// A model named at the start of a reset's text, and the text after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelHint {
    /// The model.
    pub model: ModelRef,
    /// The rest of the text, tokens joined by single spaces.
    pub body: String,
}

/// Reads a model hint at the start of `body`, as OpenClaw's `applyResetModelOverride`
/// does: `<provider> <model>`, else one `provider/model`, model id or alias, else a
/// loose match (only when the first word is a provider or at least six characters long).
pub(crate) fn parse_model_hint(catalog: &dyn ModelCatalog, body: &str) -> Option<ModelHint> {
    let tokens: Vec<&str> = body.split_whitespace().collect();
    let first = *tokens.first()?;
    let provider = catalog.is_provider(first).then_some(first);
    let found = provider
        .zip(tokens.get(1))
        .and_then(|(provider, second)| catalog.lookup(Some(provider), second))
        .map(|model| (model, 2))
        .or_else(|| catalog.lookup(None, first).map(|model| (model, 1)))
        .or_else(|| {
            let allowed = provider.is_some() || first.chars().count() >= 6;
            if !allowed {
                return None;
            }
            provider
                .zip(tokens.get(1))
                .and_then(|(provider, second)| catalog.fuzzy(Some(provider), second))
                .map(|model| (model, 2))
                .or_else(|| catalog.fuzzy(None, first).map(|model| (model, 1)))
        });
    found.map(|(model, consumed)| ModelHint {
        model,
        body: tokens[consumed..].join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(triggers: &ResetTriggers, message: &InboundMessage) -> Option<(String, String)> {
        triggers.detect(message).map(|m| (m.trigger, m.body))
    }

    #[test]
    fn triggers_match_case_insensitively_with_trailing_text() {
        let triggers = ResetTriggers::default();
        let dm = |body: &str| InboundMessage::direct("telegram", "42", body);
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            ("/new", Some(("/new", ""))),
            ("  /RESET  ", Some(("/reset", ""))),
            ("/new Summarize THIS", Some(("/new", "Summarize THIS"))),
            ("/newer things", None),
            ("please /new", None),
            ("[Dec 4 17:35] Alice: /new plan", Some(("/new", "plan"))),
            ("/new\\nline", Some(("/new", "line"))),
        ];
        for (body, expected) in cases {
            let expected = expected.map(|(t, b)| (t.to_owned(), b.to_owned()));
            assert_eq!(detect(&triggers, &dm(body)), expected, "{body:?}");
        }
    }

    #[test]
    fn clawos_phrases() {
        let triggers = ResetTriggers::clawos();
        let dm = |body: &str| InboundMessage::direct("whatsapp", "+1555", body);
        for phrase in CLAWOS_RESET_PHRASES {
            assert!(
                triggers.detect(&dm(&phrase.to_uppercase())).is_some(),
                "{phrase}"
            );
        }
        assert_eq!(
            detect(&triggers, &dm("Start over with the budget")),
            Some(("start over".into(), "with the budget".into()))
        );
        assert!(triggers.detect(&dm("let's reset expectations")).is_none());
    }

    #[test]
    fn only_authorised_senders_reset_in_groups() {
        let triggers = ResetTriggers::default().allow(["slack:U1", "+15550100"]);
        let group = |sender: &str| InboundMessage::group("slack", "C1", sender, "/new");
        assert!(
            triggers.detect(&group("U1")).is_some(),
            "allow-listed as channel:id"
        );
        assert!(triggers.detect(&group("U2")).is_none(), "not allowed");
        assert!(
            triggers.detect(&group("U2").from_owner()).is_some(),
            "owner always"
        );
        let mut by_phone = group("U3");
        by_phone.sender.e164 = Some("+15550100".into());
        assert!(
            triggers.detect(&by_phone).is_some(),
            "allow-listed by phone"
        );
        let everyone = ResetTriggers::default().allow(["*"]);
        assert!(everyone.detect(&group("U9")).is_some());
    }

    #[test]
    fn direct_peers_may_be_denied() {
        let owner_only = ResetTriggers::default().direct_peers_may_reset(false);
        let dm = InboundMessage::direct("telegram", "42", "/new");
        assert!(owner_only.detect(&dm).is_none());
        assert!(owner_only.detect(&dm.from_owner()).is_some());
    }

    #[test]
    fn group_mentions_are_removed_before_matching() {
        let triggers = ResetTriggers::default().mention_names(["@bot"]);
        for body in ["@Bot /new", "<@U0BOT> /new", "@1234567 /new plan"] {
            let message = InboundMessage::group("slack", "C1", "U1", body).from_owner();
            assert!(triggers.detect(&message).is_some(), "{body}");
        }
    }

    #[test]
    fn model_hints_follow_openclaw() {
        let catalog = StaticModelCatalog::new([
            ("anthropic", "claude-opus-4-6"),
            ("anthropic", "claude-sonnet-4-5"),
            ("openai", "gpt-5"),
        ])
        .alias("opus", "anthropic", "claude-opus-4-6");
        let cases: &[(&str, Option<(&str, &str)>)] = &[
            (
                "anthropic claude-sonnet-4-5 go",
                Some(("anthropic/claude-sonnet-4-5", "go")),
            ),
            (
                "openai/gpt-5 write a poem",
                Some(("openai/gpt-5", "write a poem")),
            ),
            (
                "opus   plan it",
                Some(("anthropic/claude-opus-4-6", "plan it")),
            ),
            ("gpt-5", Some(("openai/gpt-5", ""))),
            (
                "anthropic sonnet now",
                Some(("anthropic/claude-sonnet-4-5", "now")),
            ),
            ("sonnet now", Some(("anthropic/claude-sonnet-4-5", "now"))),
            ("sonn now", None),
            ("claude now", None),
            ("hello there", None),
        ];
        for (body, expected) in cases {
            let got = parse_model_hint(&catalog, body).map(|h| (h.model.to_string(), h.body));
            let expected = expected.map(|(m, b)| (m.to_owned(), b.to_owned()));
            assert_eq!(got, expected, "{body:?}");
        }
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn parse_model_hint() {
        use crate::freshness::triggers::{parse_model_hint, ModelRef, StaticModelCatalog};

        let catalog = StaticModelCatalog::new([("anthropic", "claude-opus-4-6")]);
        let hint = parse_model_hint(&catalog, "anthropic claude-opus-4-6 plan the trip").unwrap();
        assert_eq!(hint.model, ModelRef::new("anthropic", "claude-opus-4-6"));
        assert_eq!(hint.body, "plan the trip");
        assert!(parse_model_hint(&catalog, "plan the trip").is_none());
    }
}
