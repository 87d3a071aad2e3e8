//! The inspector's charts: an agent's turns, tokens, failed turns, refused deliveries
//! and reply latency per day, counted from its sessions' transcripts.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration as Days, NaiveDate, Utc};
use serde_json::{json, Value};

use crate::error::Result;
use crate::exactly_once::outcome::{DELIVERY_CUSTOM_TYPE, TURN_FAILED_CUSTOM_TYPE};
use crate::identity::AgentId;
use crate::store::{ListFilter, StatusFilter};
use crate::transcript::follow::{Position, Scope, Update};
use crate::transcript::{Direction, Role, TranscriptEntry};
use crate::SessionManager;

/// The most days a chart spans.
pub(super) const MAX_DAYS: u32 = 90;

/// The most sessions one request reads (the most recently active): the charts say
/// when there were more.
const MAX_SESSIONS: usize = 2_000;

/// The most reply latencies kept per day for its percentiles (a day with more takes
/// the first ones).
const MAX_LATENCIES_PER_DAY: usize = 10_000;

/// One day's figures.
#[derive(Debug, Default)]
struct Day {
    /// Messages from people the agent answered or was asked (inbound lines).
    turns: u64,
    /// Prompt tokens of the model's replies: uncached input, cache reads and writes.
    tokens_in: u64,
    /// Output tokens of the model's replies.
    tokens_out: u64,
    failed_turns: u64,
    /// Reply payloads the channel refused, wholly or in part.
    refused_deliveries: u64,
    /// Milliseconds from a message to its reply, for the replies that say.
    latencies: Vec<u64>,
}

/// `agent`'s figures for the `days` days up to `now` (UTC days), from the transcripts
/// of its sessions active in that time; memory is the figures and one page of lines.
pub(super) async fn activity(
    manager: &SessionManager,
    agent: &AgentId,
    days: u32,
    now: DateTime<Utc>,
) -> Result<Value> {
    let days = days.clamp(1, MAX_DAYS);
    let last = now.date_naive();
    let first = last - Days::days(i64::from(days) - 1);
    let since = first
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_millis())
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    let mut filter = ListFilter::new().agent(agent.clone());
    filter.status = StatusFilter::Any;
    filter.updated_after = Some(since.saturating_sub(1));
    // Listed most recently updated first: one more than the page reads says there
    // were more, and a request never holds more entries than that.
    filter.limit = Some(MAX_SESSIONS + 1);
    let mut sessions = manager.list(&filter).await?;
    let truncated = sessions.len() > MAX_SESSIONS;
    sessions.truncate(MAX_SESSIONS);

    let mut figures: BTreeMap<NaiveDate, Day> = BTreeMap::new();
    // A session whose transcript cannot be read (a refused location, a damaged store)
    // is counted as unreadable, not a failure of the whole page: its lines read before
    // the error stay counted.
    let mut unreadable = 0usize;
    for session in &sessions {
        let scope = Scope::Session(session.entry.session_id.clone());
        let read = async {
            let mut follow = manager.follow(scope, Position::Start).await?;
            while let Some(Update::Events { events, .. }) = follow.try_next().await? {
                for event in &events {
                    let day = day_of(&event.entry).filter(|d| (first..=last).contains(d));
                    if let Some(day) = day {
                        count(figures.entry(day).or_default(), &event.entry);
                    }
                }
            }
            Ok::<_, crate::Error>(())
        };
        if let Err(error) = read.await {
            let session = &session.entry.session_id;
            tracing::warn!(%session, %error, "the activity page skips a transcript it cannot read");
            unreadable += 1;
        }
    }

    let days: Vec<Value> = first
        .iter_days()
        .take_while(|day| *day <= last)
        .map(|day| {
            let mut figures = figures.remove(&day).unwrap_or_default();
            figures.latencies.sort_unstable();
            json!({
                "day": day.to_string(),
                "turns": figures.turns,
                "tokensIn": figures.tokens_in,
                "tokensOut": figures.tokens_out,
                "failedTurns": figures.failed_turns,
                "refusedDeliveries": figures.refused_deliveries,
                "replies": figures.latencies.len(),
                "latencyMedianMs": percentile(&figures.latencies, 50),
                "latencyP90Ms": percentile(&figures.latencies, 90),
            })
        })
        .collect();
    Ok(json!({
        "ok": true,
        "agent": agent.as_str(),
        "days": days,
        "sessions": sessions.len(),
        "unreadable": unreadable,
        "truncated": truncated,
    }))
}

/// Adds what `entry` says to `day`.
fn count(day: &mut Day, entry: &TranscriptEntry) {
    match (entry.kind.as_str(), entry.custom_type.as_deref()) {
        ("custom", Some(TURN_FAILED_CUSTOM_TYPE)) => day.failed_turns += 1,
        ("custom", Some(DELIVERY_CUSTOM_TYPE)) => {
            let status = entry
                .data
                .as_ref()
                .and_then(|data| data.get("status"))
                .and_then(Value::as_str);
            if matches!(status, Some("failed" | "partly")) {
                day.refused_deliveries += 1;
            }
        }
        ("message", _) => {
            let Some(message) = &entry.message else {
                return;
            };
            let direction = entry.log.as_ref().and_then(|log| log.direction);
            match message.role {
                Role::User if direction != Some(Direction::Outbound) => day.turns += 1,
                Role::Assistant => {
                    if let Some(usage) = &message.usage {
                        day.tokens_in = day
                            .tokens_in
                            .saturating_add(usage.input)
                            .saturating_add(usage.cache_read)
                            .saturating_add(usage.cache_write);
                        day.tokens_out = day.tokens_out.saturating_add(usage.output);
                    }
                    let took = entry.log.as_ref().and_then(|log| log.processing_ms);
                    if let Some(ms) = took.filter(|_| day.latencies.len() < MAX_LATENCIES_PER_DAY) {
                        day.latencies.push(ms);
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

/// The UTC day of `entry`, from its timestamp.
fn day_of(entry: &TranscriptEntry) -> Option<NaiveDate> {
    let at = DateTime::parse_from_rfc3339(entry.timestamp.as_deref()?).ok()?;
    Some(at.with_timezone(&Utc).date_naive())
}

/// The `p`th percentile of `sorted` (nearest rank); `None` when it is empty.
fn percentile(sorted: &[u64], p: usize) -> Option<u64> {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&[7], 90), Some(7));
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&ten, 50), Some(5));
        assert_eq!(percentile(&ten, 90), Some(9));
    }
}
