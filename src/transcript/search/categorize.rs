//! Categorising exchanges: the `Categorizer` seam and a deterministic keyword-rule default.

use async_trait::async_trait;

use super::text::tokens;
use super::LoggedMessage;
use crate::error::Result;
use crate::transcript::Direction;

/// One inbound message and the replies to it (or a lone message), to be given one
/// category.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// The messages, oldest first.
    pub messages: Vec<LoggedMessage>,
}

impl Exchange {
    /// The exchange `id` belongs to within `session` (its messages oldest first): an
    /// inbound message with the outbound messages that follow it until the next
    /// inbound one — paired by `correlation_id` when the messages carry one.
    pub fn around(session: &[LoggedMessage], id: &str) -> Exchange {
        let Some(position) = session.iter().position(|m| m.id == id) else {
            return Exchange {
                messages: Vec::new(),
            };
        };
        let message = &session[position];
        if let Some(correlation) = &message.correlation_id {
            let messages = session
                .iter()
                .filter(|m| m.correlation_id.as_ref() == Some(correlation))
                .cloned()
                .collect();
            return Exchange { messages };
        }
        let inbound = |m: &LoggedMessage| m.direction != Some(Direction::Outbound);
        // The inbound message that opens the exchange: this one, or the last before it.
        let start = (0..=position)
            .rev()
            .find(|&i| inbound(&session[i]) && session[i].correlation_id.is_none())
            .unwrap_or(position);
        let end = (start + 1..session.len())
            .find(|&i| inbound(&session[i]) || session[i].correlation_id.is_some())
            .unwrap_or(session.len());
        Exchange {
            messages: session[start..end].to_vec(),
        }
    }

    /// The category one of its messages already has (a reply logged after its question
    /// was categorised joins the question's category).
    pub fn category(&self) -> Option<&str> {
        self.messages.iter().find_map(|m| m.category.as_deref())
    }

    /// The ids of its messages without a category.
    pub fn uncategorized_ids(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|m| m.category.is_none())
            .map(|m| m.id.clone())
            .collect()
    }

    /// The exchange as text for a model: `inbound: …` and `outbound: …` lines.
    pub fn transcript(&self) -> String {
        self.messages
            .iter()
            .map(|m| {
                let direction = match m.direction {
                    Some(Direction::Outbound) => "outbound",
                    _ => "inbound",
                };
                format!("{direction}: {}", m.text)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Gives an exchange one label (usually a call to a small, fast model). Runs in the
/// background, never on the reply path.
#[async_trait]
pub trait Categorizer: Send + Sync {
    /// The label for `exchange`, lower case.
    async fn categorize(&self, exchange: &Exchange) -> Result<String>;
}

#[async_trait]
impl<T: Categorizer + ?Sized> Categorizer for std::sync::Arc<T> {
    async fn categorize(&self, exchange: &Exchange) -> Result<String> {
        (**self).categorize(exchange).await
    }
}

/// Keyword rules: each label has words and phrases; the label whose rules match the
/// exchange's text most often wins (ties: the earlier rule), `fallback` when none match.
///
/// ```
/// use agent_sessions::transcript::search::KeywordCategorizer;
///
/// let rules = KeywordCategorizer::default();
/// assert_eq!(rules.label_for("Can I swap my Thursday shift?"), "roster_query");
/// assert_eq!(rules.label_for("The printer ate my lunch"), "other");
///
/// let custom = KeywordCategorizer::empty("misc").rule("billing", ["invoice", "refund"]);
/// assert_eq!(custom.label_for("Where is my refund?"), "billing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeywordCategorizer {
    rules: Vec<(String, Vec<Vec<String>>)>,
    fallback: String,
}

impl Default for KeywordCategorizer {
    /// The default labels with rules for a care-services workforce.
    fn default() -> Self {
        KeywordCategorizer::empty("other")
            .rule(
                "escalation",
                [
                    "urgent",
                    "emergency",
                    "complaint",
                    "escalate",
                    "unacceptable",
                    "speak to a manager",
                    "asap",
                ],
            )
            .rule(
                "incident_report",
                [
                    "incident", "injury", "injured", "fell", "fall", "accident", "hazard", "hurt",
                    "bruise",
                ],
            )
            .rule(
                "roster_query",
                [
                    "roster",
                    "shift",
                    "swap",
                    "schedule",
                    "rota",
                    "on call",
                    "start time",
                    "finish time",
                ],
            )
            .rule(
                "hr_request",
                [
                    "leave",
                    "payslip",
                    "pay",
                    "sick",
                    "holiday",
                    "contract",
                    "resign",
                    "timesheet",
                    "super",
                ],
            )
            .rule(
                "policy_question",
                [
                    "policy",
                    "procedure",
                    "allowed",
                    "guideline",
                    "rule",
                    "entitled",
                    "compliance",
                ],
            )
            .rule(
                "participant_care",
                [
                    "participant",
                    "client",
                    "care plan",
                    "medication",
                    "wellbeing",
                    "support plan",
                    "behaviour",
                ],
            )
            .rule(
                "technical_support",
                [
                    "password",
                    "login",
                    "log in",
                    "app",
                    "error",
                    "crash",
                    "wifi",
                    "laptop",
                    "phone not",
                ],
            )
            .rule(
                "casual_chat",
                [
                    "hello",
                    "hi",
                    "thanks",
                    "thank you",
                    "how are you",
                    "good morning",
                    "cheers",
                    "bye",
                ],
            )
    }
}

impl KeywordCategorizer {
    /// No rules: everything is `fallback` until rules are added.
    pub fn empty(fallback: impl Into<String>) -> Self {
        KeywordCategorizer {
            rules: Vec::new(),
            fallback: fallback.into(),
        }
    }

    /// Adds a rule: `label` for texts containing any of `keywords` (words or phrases,
    /// matched as whole words, plurals folded). A label given twice gains keywords.
    pub fn rule<I, S>(mut self, label: &str, keywords: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let label = label.trim().to_lowercase();
        let phrases: Vec<Vec<String>> = keywords
            .into_iter()
            .map(|k| tokens(k.as_ref()))
            .filter(|phrase| !phrase.is_empty())
            .collect();
        match self.rules.iter_mut().find(|(l, _)| *l == label) {
            Some((_, existing)) => existing.extend(phrases),
            None => self.rules.push((label, phrases)),
        }
        self
    }

    /// The labels, in rule order, then the fallback.
    pub fn labels(&self) -> Vec<&str> {
        self.rules
            .iter()
            .map(|(l, _)| l.as_str())
            .chain(std::iter::once(self.fallback.as_str()))
            .collect()
    }

    /// The label for `text`.
    pub fn label_for(&self, text: &str) -> &str {
        let words = tokens(text);
        let matches = |phrase: &Vec<String>| {
            words
                .windows(phrase.len())
                .filter(|window| *window == phrase.as_slice())
                .count()
        };
        let mut best: Option<(&str, usize)> = None;
        for (label, phrases) in &self.rules {
            let count: usize = phrases.iter().map(matches).sum();
            if count > 0 && best.is_none_or(|(_, top)| count > top) {
                best = Some((label, count));
            }
        }
        best.map_or(self.fallback.as_str(), |(label, _)| label)
    }
}

#[async_trait]
impl Categorizer for KeywordCategorizer {
    async fn categorize(&self, exchange: &Exchange) -> Result<String> {
        Ok(self.label_for(&exchange.transcript()).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The default labels, in the order the default rules try them (the first label with the
    /// most matching keywords wins; `other` when nothing matches).
    const DEFAULT_LABELS: &[&str] = &[
        "escalation",
        "incident_report",
        "roster_query",
        "hr_request",
        "policy_question",
        "participant_care",
        "technical_support",
        "casual_chat",
        "other",
    ];

    #[test]
    fn the_default_rules_label_the_seeds_examples() {
        let rules = KeywordCategorizer::default();
        let table = [
            ("When is my shift at Riverside on Thursday?", "roster_query"),
            ("Can I swap rosters with Sam next week?", "roster_query"),
            ("How do I apply for annual leave?", "hr_request"),
            ("My payslip is wrong", "hr_request"),
            (
                "What is the policy on gifts from clients' families?",
                "policy_question",
            ),
            (
                "Mrs Lee refused her medication this morning",
                "participant_care",
            ),
            (
                "A participant fell in the bathroom, she has a bruise",
                "incident_report",
            ),
            ("This is urgent, I need to speak to a manager", "escalation"),
            (
                "I can't log in to the app, password error",
                "technical_support",
            ),
            ("Thanks, have a good weekend!", "casual_chat"),
            ("What's the capital of France?", "other"),
            ("", "other"),
        ];
        for (text, label) in table {
            assert_eq!(rules.label_for(text), label, "{text}");
        }
        assert_eq!(rules.labels().len(), DEFAULT_LABELS.len());
        for label in DEFAULT_LABELS {
            assert!(rules.labels().contains(label), "{label}");
        }
    }

    #[test]
    fn more_matches_win_and_ties_go_to_the_earlier_rule() {
        let rules = KeywordCategorizer::empty("other")
            .rule("a", ["alpha"])
            .rule("b", ["beta", "gamma"]);
        assert_eq!(rules.label_for("alpha beta"), "a", "tie: earlier rule");
        assert_eq!(rules.label_for("alpha beta gamma"), "b");
        assert_eq!(
            rules.rule("a", ["delta"]).label_for("delta"),
            "a",
            "labels gain keywords"
        );
    }

    fn message(
        id: &str,
        direction: Direction,
        minute: u32,
        correlation: Option<&str>,
    ) -> LoggedMessage {
        LoggedMessage {
            id: id.into(),
            agent: "main".into(),
            session_id: "s".into(),
            session_key: None,
            person_id: None,
            agent_identity: None,
            channel: None,
            direction: Some(direction),
            correlation_id: correlation.map(str::to_owned),
            at: chrono::Utc
                .with_ymd_and_hms(2026, 3, 2, 9, minute, 0)
                .unwrap(),
            text: id.into(),
            category: None,
            embedding: None,
        }
    }

    #[test]
    fn exchanges_pair_a_question_with_its_replies() {
        use Direction::{Inbound, Outbound};
        let session = [
            message("q1", Inbound, 0, None),
            message("a1", Outbound, 1, None),
            message("a1b", Outbound, 2, None),
            message("q2", Inbound, 3, None),
            message("a2", Outbound, 4, None),
        ];
        let ids = |e: Exchange| e.messages.into_iter().map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(ids(Exchange::around(&session, "q1")), ["q1", "a1", "a1b"]);
        assert_eq!(ids(Exchange::around(&session, "a1b")), ["q1", "a1", "a1b"]);
        assert_eq!(ids(Exchange::around(&session, "a2")), ["q2", "a2"]);
        assert!(ids(Exchange::around(&session, "missing")).is_empty());
        let correlated = [
            message("q1", Inbound, 0, Some("c1")),
            message("q2", Inbound, 1, Some("c2")),
            message("a1", Outbound, 2, Some("c1")),
        ];
        assert_eq!(ids(Exchange::around(&correlated, "a1")), ["q1", "a1"]);
        assert_eq!(
            Exchange::around(&session, "q1").transcript(),
            "inbound: q1\noutbound: a1\noutbound: a1b"
        );
    }
}
