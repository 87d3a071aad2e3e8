//! Summaries: what a conversation is about, in at most 1,000 characters (documented in the parent module).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::transcript::Direction;

/// The longest summary, in characters.
pub const MAX_SUMMARY_CHARS: usize = 1000;

/// One message for a summarizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryTurn {
    /// From the person (inbound) or the agent (outbound).
    pub direction: Direction,
    /// The text.
    pub text: String,
    /// The agent variant that took part.
    pub agent_name: Option<String>,
    /// The channel.
    pub channel: Option<String>,
    /// When.
    pub at: Option<DateTime<Utc>>,
}

impl SummaryTurn {
    /// A message from the person.
    pub fn user(text: impl Into<String>) -> Self {
        SummaryTurn {
            direction: Direction::Inbound,
            text: text.into(),
            agent_name: None,
            channel: None,
            at: None,
        }
    }

    /// A message from the agent.
    pub fn assistant(text: impl Into<String>) -> Self {
        SummaryTurn {
            direction: Direction::Outbound,
            ..SummaryTurn::user(text)
        }
    }
}

/// What to summarise: the previous summary, the new messages, and the number of turns
/// the summary will cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SummaryInput {
    /// The summary so far.
    pub previous: Option<String>,
    /// Messages since it was written, oldest first.
    pub turns: Vec<SummaryTurn>,
    /// Turns covered in all (default: the previous count plus the new user messages).
    pub turn_count: Option<u64>,
}

impl SummaryInput {
    /// New messages, no previous summary.
    pub fn new(turns: Vec<SummaryTurn>) -> Self {
        SummaryInput {
            previous: None,
            turns,
            turn_count: None,
        }
    }

    /// Merges into `previous`.
    pub fn merging(mut self, previous: Option<String>) -> Self {
        self.previous = previous.filter(|p| !p.trim().is_empty());
        self
    }

    /// Sets the turn count.
    pub(crate) fn with_turn_count(mut self, turns: u64) -> Self {
        self.turn_count = Some(turns);
        self
    }
}

/// Writes summaries. Implement it with an LLM (a small, fast model is enough); keep the
/// result at most [`MAX_SUMMARY_CHARS`] characters — the manager cuts longer ones.
///
/// The manager calls it when a turn's context window cuts the conversation, after that
/// turn's reply is returned (never on the reply's path), and for
/// [`record_turn`](crate::manager::Session::record_turn) with an exchange. It is an
/// `async_trait` trait: implement it with the async-trait crate.
///
/// ```
/// use agent_sessions::memory::{Summarizer, SummaryInput, MAX_SUMMARY_CHARS};
///
/// /// Your model client (an HTTP call in a real bot).
/// async fn ask_model(prompt: String) -> Result<String, std::io::Error> {
///     Ok(format!("A conversation of {} characters.", prompt.len()))
/// }
///
/// struct LlmSummarizer;
///
/// #[async_trait::async_trait]
/// impl Summarizer for LlmSummarizer {
///     async fn summarize(&self, input: &SummaryInput) -> agent_sessions::Result<String> {
///         let mut prompt = format!("Summarise in at most {MAX_SUMMARY_CHARS} characters.\n");
///         prompt.extend(input.previous.as_deref().map(|p| format!("So far: {p}\n")));
///         for turn in &input.turns {
///             prompt.push_str(&format!("{:?}: {}\n", turn.direction, turn.text));
///         }
///         ask_model(prompt)
///             .await
///             .map_err(|error| agent_sessions::Error::component("summarizer", error))
///     }
/// }
/// # let _ = agent_sessions::memory::MemoryOptions::new().summarizer(LlmSummarizer);
/// ```
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// The summary of `input`.
    async fn summarize(&self, input: &SummaryInput) -> Result<String>;
}

/// The deterministic summarizer (a template, for when no model is plugged in), in
/// `GOAL / ENTITIES / DECISIONS / PENDING / TURNS` form, always at most
/// [`MAX_SUMMARY_CHARS`] characters, the same output for the same input.
///
/// - GOAL: the first sentence of the latest user message (else the previous goal);
/// - ENTITIES: URLs, e-mail addresses, @handles, #tags, file names and capitalised
///   names, newest first, merged with the previous ones, at most 10;
/// - DECISIONS: sentences that record a decision ("decided", "let's", "we'll", "agreed",
///   "booked", "confirmed", …), newest first, merged, at most 4;
/// - PENDING: the latest user message's questions when no reply followed, and sentences
///   about things to do ("remind", "follow up", "todo", "pending", …), at most 3;
/// - TURNS: the turn count.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateSummarizer;

#[async_trait]
impl Summarizer for TemplateSummarizer {
    async fn summarize(&self, input: &SummaryInput) -> Result<String> {
        Ok(template_summary(input))
    }
}

const DECISION_CUES: &[&str] = &[
    "decided",
    "decide to",
    "let's",
    "lets ",
    "we'll",
    "we will",
    "agreed",
    "going with",
    "chose",
    "chosen",
    "booked",
    "confirmed",
    "settled on",
    "will use",
    "i'll",
];
const PENDING_CUES: &[&str] = &[
    "remind",
    "follow up",
    "follow-up",
    "todo",
    "to do",
    "pending",
    "later",
    "tomorrow",
    "next week",
];
const MAX_ENTITIES: usize = 10;
const MAX_DECISIONS: usize = 4;
const MAX_PENDING: usize = 3;
const MAX_ITEM_CHARS: usize = 120;

/// The template summary of `input` (what [`TemplateSummarizer`] returns).
pub fn template_summary(input: &SummaryInput) -> String {
    let previous = input
        .previous
        .as_deref()
        .map(parse_summary)
        .unwrap_or_default();
    let user_turns: Vec<&SummaryTurn> = input
        .turns
        .iter()
        .filter(|t| t.direction == Direction::Inbound)
        .collect();

    let goal = user_turns
        .last()
        .and_then(|t| first_sentence(&t.text))
        .map(|s| clip(&s, 200))
        .or(previous.goal.clone())
        .unwrap_or_default();

    // Newest first, so each list can stop as soon as it is full.
    let mut entities: Vec<String> = Vec::new();
    for turn in input.turns.iter().rev() {
        if entities.len() >= MAX_ENTITIES {
            break;
        }
        for entity in extract_entities(&turn.text) {
            push_unique(&mut entities, entity);
        }
    }
    for entity in previous.entities {
        push_unique(&mut entities, entity);
    }
    entities.truncate(MAX_ENTITIES);

    let mut decisions: Vec<String> = Vec::new();
    for turn in input.turns.iter().rev() {
        if decisions.len() >= MAX_DECISIONS {
            break;
        }
        for sentence in sentences(&turn.text).into_iter().rev() {
            let lower = sentence.to_lowercase();
            if DECISION_CUES.iter().any(|cue| lower.contains(cue)) {
                push_unique(&mut decisions, clip(&sentence, MAX_ITEM_CHARS));
            }
        }
    }
    for decision in previous.decisions {
        push_unique(&mut decisions, decision);
    }
    decisions.truncate(MAX_DECISIONS);

    let mut pending: Vec<String> = Vec::new();
    if let Some(last) = input
        .turns
        .last()
        .filter(|t| t.direction == Direction::Inbound)
    {
        for sentence in sentences(&last.text) {
            if sentence.ends_with('?') {
                push_unique(&mut pending, clip(&sentence, MAX_ITEM_CHARS));
            }
        }
    }
    for turn in input.turns.iter().rev() {
        if pending.len() >= MAX_PENDING {
            break;
        }
        for sentence in sentences(&turn.text) {
            let lower = sentence.to_lowercase();
            if PENDING_CUES.iter().any(|cue| lower.contains(cue)) {
                push_unique(&mut pending, clip(&sentence, MAX_ITEM_CHARS));
            }
        }
    }
    if input.turns.is_empty() {
        pending = previous.pending;
    }
    pending.truncate(MAX_PENDING);

    let turns = input
        .turn_count
        .unwrap_or(previous.turns + user_turns.len() as u64);
    fit(&goal, &entities, &decisions, &pending, turns)
}

/// Lays the fields out and shrinks them until the summary fits in
/// [`MAX_SUMMARY_CHARS`] characters: fewer list items first, then shorter items.
fn fit(
    goal: &str,
    entities: &[String],
    decisions: &[String],
    pending: &[String],
    turns: u64,
) -> String {
    let render = |goal: &str, e: &[String], d: &[String], p: &[String]| {
        format!(
            "GOAL: {goal}\nENTITIES: {}\nDECISIONS: {}\nPENDING: {}\nTURNS: {turns}",
            e.join(", "),
            d.join(", "),
            p.join(", ")
        )
    };
    let (mut e, mut d, mut p) = (entities.to_vec(), decisions.to_vec(), pending.to_vec());
    let mut goal = goal.to_owned();
    loop {
        let text = render(&goal, &e, &d, &p);
        if text.chars().count() <= MAX_SUMMARY_CHARS {
            return text;
        }
        // Drop the oldest item of the longest list; when lists are short, cut the goal.
        let longest = [e.len(), d.len(), p.len()].into_iter().max().unwrap_or(0);
        if longest > 1 {
            if d.len() == longest {
                d.pop();
            } else if p.len() == longest {
                p.pop();
            } else {
                e.pop();
            }
        } else if goal.chars().count() > 60 {
            goal = clip(&goal, goal.chars().count() / 2);
        } else {
            // Everything is short but still too long (very long single items): clip hard.
            let budget =
                MAX_SUMMARY_CHARS.saturating_sub(render("", &[], &[], &[]).chars().count());
            let share = budget / 4;
            goal = clip(&goal, share);
            e = e.iter().map(|x| clip(x, share)).collect();
            d = d.iter().map(|x| clip(x, share)).collect();
            p = p.iter().map(|x| clip(x, share)).collect();
            let text = render(&goal, &e, &d, &p);
            return clip(&text, MAX_SUMMARY_CHARS);
        }
    }
}

/// A summary in template form, read back for merging.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ParsedSummary {
    goal: Option<String>,
    entities: Vec<String>,
    decisions: Vec<String>,
    pending: Vec<String>,
    turns: u64,
}

fn parse_summary(text: &str) -> ParsedSummary {
    let mut parsed = ParsedSummary::default();
    let list = |value: &str| -> Vec<String> {
        value
            .split(", ")
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect()
    };
    for line in text.lines() {
        let Some((label, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match label.trim() {
            "GOAL" if !value.is_empty() => parsed.goal = Some(value.to_owned()),
            "ENTITIES" => parsed.entities = list(value),
            "DECISIONS" => parsed.decisions = list(value),
            "PENDING" => parsed.pending = list(value),
            "TURNS" => parsed.turns = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    parsed
}

fn push_unique(items: &mut Vec<String>, item: String) {
    if !item.is_empty()
        && !items
            .iter()
            .any(|existing| existing.eq_ignore_ascii_case(&item))
    {
        items.push(item);
    }
}

/// Cuts `text` to at most `max` characters, marking the cut with `…`.
fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Sentences of `text`: split after `.`, `!`, `?` and at newlines; whitespace collapsed;
/// commas replaced so list fields stay parseable.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let ends = matches!(c, '.' | '!' | '?') && chars.peek().is_none_or(|n| n.is_whitespace());
        if c == '\n' || ends {
            if c != '\n' {
                current.push(c);
            }
            push_sentence(&mut out, &current);
            current.clear();
        } else {
            current.push(c);
        }
    }
    push_sentence(&mut out, &current);
    out
}

fn push_sentence(out: &mut Vec<String>, sentence: &str) {
    let tidy = sentence
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(", ", "; ");
    if !tidy.is_empty() {
        out.push(tidy);
    }
}

fn first_sentence(text: &str) -> Option<String> {
    sentences(text).into_iter().next()
}

/// Names, files and addresses mentioned in `text`, in order.
fn extract_entities(text: &str) -> Vec<String> {
    let mut entities = Vec::new();
    let mut sentence_start = true;
    for raw in text.split_whitespace() {
        let token = raw.trim_matches(|c: char| {
            matches!(c, ',' | ';' | ':' | '(' | ')' | '"' | '!' | '?' | '[' | ']')
        });
        let word = token.trim_end_matches('.');
        let lower = word.to_lowercase();
        let is_url = lower.starts_with("http://") || lower.starts_with("https://");
        let is_email = word.contains('@') && word.contains('.') && !word.starts_with('@');
        let is_handle =
            (word.starts_with('@') || word.starts_with('#')) && word.chars().count() > 1;
        let is_file = !is_url
            && word.rsplit_once('.').is_some_and(|(stem, ext)| {
                !stem.is_empty()
                    && (1..=5).contains(&ext.len())
                    && ext.chars().all(|c| c.is_ascii_alphanumeric())
                    && ext.chars().any(|c| c.is_ascii_alphabetic())
            });
        let is_name = !sentence_start
            && word.chars().next().is_some_and(char::is_uppercase)
            && word.chars().count() > 1;
        if is_url || is_email || is_handle || is_file || is_name {
            push_unique(&mut entities, clip(word, 80));
        }
        sentence_start = raw.ends_with(['.', '!', '?']);
    }
    entities
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_fields() {
        let input = SummaryInput::new(vec![
            SummaryTurn::user("Please check report.pdf from https://example.com/q3 and email Bob."),
            SummaryTurn::assistant(
                "Done. We decided to use the Q3 numbers. I'll remind Alice tomorrow.",
            ),
            SummaryTurn::user("Great. What about the budget? And the #finance channel?"),
        ]);
        let summary = template_summary(&input);
        let lines: Vec<&str> = summary.lines().collect();
        assert_eq!(lines[0], "GOAL: Great.");
        assert!(lines[1].starts_with("ENTITIES: #finance"), "{summary}");
        for entity in ["report.pdf", "https://example.com/q3", "Bob", "Alice", "Q3"] {
            assert!(lines[1].contains(entity), "{entity} in {summary}");
        }
        assert!(
            lines[2].contains("We decided to use the Q3 numbers."),
            "{summary}"
        );
        assert!(lines[3].contains("What about the budget?"), "{summary}");
        assert!(
            lines[3].contains("I'll remind Alice tomorrow."),
            "{summary}"
        );
        assert_eq!(lines[4], "TURNS: 2");
    }

    #[test]
    fn merging_keeps_what_is_still_relevant() {
        let first = template_summary(&SummaryInput::new(vec![
            SummaryTurn::user("Plan the Rome trip with Maria."),
            SummaryTurn::assistant("Agreed: we'll fly on Friday."),
        ]));
        let second = template_summary(
            &SummaryInput::new(vec![SummaryTurn::user("Add a museum day")]).merging(Some(first)),
        );
        assert!(second.starts_with("GOAL: Add a museum day\n"), "{second}");
        assert!(
            second.contains("Rome") && second.contains("Maria"),
            "{second}"
        );
        assert!(second.contains("we'll fly on Friday"), "{second}");
        assert!(second.ends_with("TURNS: 2"), "{second}");
    }

    #[test]
    fn huge_inputs_fit() {
        let word = "Supercalifragilistic".repeat(40);
        let turns = (0..50)
            .map(|i| {
                SummaryTurn::user(format!(
                    "{word} {i}? We decided {word}. Remind {word} later."
                ))
            })
            .collect();
        let summary = template_summary(&SummaryInput::new(turns));
        assert!(
            summary.chars().count() <= MAX_SUMMARY_CHARS,
            "{}",
            summary.chars().count()
        );
        assert!(summary.starts_with("GOAL: "));
    }
}
