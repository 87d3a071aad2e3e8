//! Analytics over logged messages: volumes by category, channel, agent identity, day and
//! week; trends; a person's recurring topic.

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde::Serialize;

use super::LoggedMessage;
use crate::transcript::Direction;

/// How many questions on one topic within a week make it recurring ("3 times this
/// week").
pub(crate) const RECURRING_THRESHOLD: usize = 3;

/// Counts over a set of messages. Maps are sorted by key; uncategorised messages count
/// as `uncategorized`, messages without a channel or identity as `unknown`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Analytics {
    /// Messages counted.
    pub total: usize,
    /// Inbound messages.
    pub inbound: usize,
    /// Outbound messages.
    pub outbound: usize,
    /// By category.
    pub by_category: BTreeMap<String, usize>,
    /// By channel.
    pub by_channel: BTreeMap<String, usize>,
    /// By agent identity.
    pub by_agent_identity: BTreeMap<String, usize>,
    /// By day (UTC).
    pub by_day: BTreeMap<NaiveDate, usize>,
    /// By ISO week (`2026-W10`).
    pub by_week: BTreeMap<String, usize>,
    /// Per category: the last `window` against the `window` before it.
    pub trends: Vec<Trend>,
}

/// How one category moved between two equal windows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    /// The category.
    pub category: String,
    /// Messages in the latest window.
    pub current: usize,
    /// Messages in the window before.
    pub previous: usize,
    /// `current / previous` (`None` when `previous` is 0).
    pub ratio: Option<f64>,
}

/// Counts `messages` and their trends over the `window` ending at `now`, against the
/// window before it.
///
/// ```
/// use agent_sessions::transcript::search::analytics;
/// use chrono::{Duration, Utc};
///
/// let stats = analytics(&[], Utc::now(), Duration::days(7));
/// assert_eq!(stats.total, 0);
/// ```
pub fn analytics(messages: &[LoggedMessage], now: DateTime<Utc>, window: Duration) -> Analytics {
    let mut stats = Analytics::default();
    let mut windows: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for message in messages {
        stats.total += 1;
        match message.direction {
            Some(Direction::Outbound) => stats.outbound += 1,
            _ => stats.inbound += 1,
        }
        let category = message
            .category
            .clone()
            .unwrap_or_else(|| "uncategorized".into());
        *stats.by_category.entry(category.clone()).or_default() += 1;
        let or_unknown = |value: &Option<String>| value.clone().unwrap_or_else(|| "unknown".into());
        *stats
            .by_channel
            .entry(or_unknown(&message.channel))
            .or_default() += 1;
        *stats
            .by_agent_identity
            .entry(or_unknown(&message.agent_identity))
            .or_default() += 1;
        let day = message.at.date_naive();
        *stats.by_day.entry(day).or_default() += 1;
        let week = day.iso_week();
        *stats
            .by_week
            .entry(format!("{}-W{:02}", week.year(), week.week()))
            .or_default() += 1;
        let counts = windows.entry(category).or_default();
        if message.at <= now && message.at > now - window {
            counts.0 += 1;
        } else if message.at <= now - window && message.at > now - window - window {
            counts.1 += 1;
        }
    }
    stats.trends = windows
        .into_iter()
        .filter(|(_, (current, previous))| current + previous > 0)
        .map(|(category, (current, previous))| Trend {
            category,
            current,
            previous,
            ratio: (previous > 0).then(|| current as f64 / previous as f64),
        })
        .collect();
    stats
}

/// A topic a person keeps asking about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecurringTopic {
    /// The person.
    pub person_id: String,
    /// The category.
    pub category: String,
    /// How many of their questions had it in the last seven days.
    pub count: usize,
}

impl RecurringTopic {
    /// The sentence a prompt can carry: "You've asked about rosters 3 times this week."
    pub fn sentence(&self) -> String {
        format!(
            "You've asked about {} {} times this week.",
            topic_phrase(&self.category),
            self.count
        )
    }
}

/// How a category reads in a sentence (`roster_query` → `rosters`).
pub(crate) fn topic_phrase(category: &str) -> String {
    match category {
        "roster_query" => "rosters".into(),
        "policy_question" => "policies".into(),
        "hr_request" => "HR matters".into(),
        "participant_care" => "participant care".into(),
        "incident_report" => "incidents".into(),
        "technical_support" => "technical problems".into(),
        "escalation" => "escalations".into(),
        other => other.replace('_', " "),
    }
}

/// The topic `person` asked about most in the seven days up to `now`, if they asked
/// about it at least `3` times (their inbound messages; small talk
/// and `other` are not topics).
///
/// ```
/// use agent_sessions::transcript::search::recurring_topic;
/// use chrono::Utc;
///
/// assert_eq!(recurring_topic(&[], "staff:17", Utc::now()), None);
/// ```
pub fn recurring_topic(
    messages: &[LoggedMessage],
    person: &str,
    now: DateTime<Utc>,
) -> Option<RecurringTopic> {
    let since = now - Duration::days(7);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for message in messages {
        let asked = message.person_id.as_deref() == Some(person)
            && message.direction != Some(Direction::Outbound)
            && message.at > since
            && message.at <= now;
        if !asked {
            continue;
        }
        match message.category.as_deref() {
            Some("casual_chat" | "other") | None => {}
            Some(category) => *counts.entry(category).or_default() += 1,
        }
    }
    let (category, count) = counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))?;
    (count >= RECURRING_THRESHOLD).then(|| RecurringTopic {
        person_id: person.to_owned(),
        category: category.to_owned(),
        count,
    })
}
