//! Group history: what was said in a group since the agent last replied.
//!
//! In a group the agent answers only some messages; the others are kept here, per
//! group, and shown to the model as context the next time it answers, in OpenClaw's
//! layout:
//!
//! ```text
//! [Chat messages since your last reply - for context]
//! [WhatsApp 120363@g.us 2026-01-13T07:45Z] Alice: hello
//! [WhatsApp 120363@g.us 2026-01-13T07:46Z] Bob: hi there
//!
//! [Current message - respond to this]
//! [WhatsApp 120363@g.us 2026-01-13T07:47Z] Alice: @bot what do you think?
//! [from: Alice (+1234567890)]
//! ```
//!
//! [`HistoryBuffer`] is the seam (a host can keep history in Redis); [`MemoryHistory`]
//! is the default: per group a FIFO of at most 50 entries, and at most 1,000 groups,
//! the least recently used dropped first — memory stays bounded whatever the traffic.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::context::inbound::pipeline::{CURRENT_MESSAGE_MARKER, HISTORY_CONTEXT_MARKER};
use crate::error::Result;
use crate::key::{normalize_account_id, normalize_channel, PeerKind};

/// Entries kept per group (OpenClaw's `DEFAULT_GROUP_HISTORY_LIMIT`).
pub const DEFAULT_GROUP_HISTORY_LIMIT: usize = 50;
/// Groups kept (OpenClaw's `MAX_HISTORY_KEYS`).
pub const MAX_HISTORY_KEYS: usize = 1000;

/// One message of group history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// Who said it (a display label).
    pub sender: String,
    /// What they said (already through the inbound pipeline).
    pub body: String,
    /// When, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// The channel's message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// Where group history is kept.
#[async_trait]
pub trait HistoryBuffer: Send + Sync {
    /// Adds `entry` to the group `key`, dropping the oldest entries beyond the buffer's
    /// limit.
    async fn append(&self, key: &str, entry: HistoryEntry) -> Result<()>;
    /// The group's entries, oldest first.
    async fn entries(&self, key: &str) -> Result<Vec<HistoryEntry>>;
    /// Forgets the group's entries (after the agent replied).
    async fn clear(&self, key: &str) -> Result<()>;
}

/// The in-memory [`HistoryBuffer`]: a FIFO per group, LRU over groups.
///
/// ```
/// use agent_sessions::context::history::{HistoryBuffer, HistoryEntry, MemoryHistory};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let history = MemoryHistory::new(2, 100);
/// for body in ["one", "two", "three"] {
///     let entry = HistoryEntry { sender: "Alice".into(), body: body.into(), timestamp: None, message_id: None };
///     history.append("whatsapp:default:group:120363@g.us", entry).await?;
/// }
/// let kept: Vec<String> = history.entries("whatsapp:default:group:120363@g.us").await?
///     .into_iter().map(|e| e.body).collect();
/// assert_eq!(kept, ["two", "three"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryHistory {
    limit: usize,
    max_keys: usize,
    groups: Mutex<IndexMap<String, VecDeque<HistoryEntry>>>,
}

impl Default for MemoryHistory {
    fn default() -> Self {
        MemoryHistory::new(DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }
}

impl MemoryHistory {
    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups.
    pub fn new(limit: usize, max_keys: usize) -> Self {
        MemoryHistory {
            limit,
            max_keys: max_keys.max(1),
            groups: Mutex::default(),
        }
    }

    /// How many groups have history.
    pub fn groups(&self) -> usize {
        self.groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Total entries held, over all groups.
    pub fn total_entries(&self) -> usize {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.values().map(VecDeque::len).sum()
    }
}

#[async_trait]
impl HistoryBuffer for MemoryHistory {
    async fn append(&self, key: &str, entry: HistoryEntry) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        // Re-insert at the end: the most recently used group is last.
        let mut entries = groups.shift_remove(key).unwrap_or_default();
        entries.push_back(entry);
        while entries.len() > self.limit {
            entries.pop_front();
        }
        groups.insert(key.to_owned(), entries);
        while groups.len() > self.max_keys {
            groups.shift_remove_index(0);
        }
        Ok(())
    }

    async fn entries(&self, key: &str) -> Result<Vec<HistoryEntry>> {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(groups
            .get(key)
            .map(|entries| entries.iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn clear(&self, key: &str) -> Result<()> {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.shift_remove(key);
        Ok(())
    }
}

/// The history key of a group, as OpenClaw's `buildGroupHistoryKey` makes it:
/// `<channel>:<accountId>:<group|channel>:<groupId>` (not a session key).
///
/// ```
/// use agent_sessions::context::history::group_history_key;
/// use agent_sessions::PeerKind;
///
/// assert_eq!(
///     group_history_key("WhatsApp", None, PeerKind::Group, "120363@G.US"),
///     "whatsapp:default:group:120363@g.us"
/// );
/// ```
pub fn group_history_key(
    channel: &str,
    account_id: Option<&str>,
    kind: PeerKind,
    group_id: &str,
) -> String {
    let channel = normalize_channel(channel).unwrap_or_else(|| "unknown".into());
    let account = normalize_account_id(account_id.unwrap_or(""));
    let group = crate::key::normalize_peer_id(group_id).unwrap_or_else(|| "unknown".into());
    format!("{channel}:{account}:{kind}:{group}")
}

/// How a channel is named in envelopes (`WhatsApp`, `Telegram`, …).
pub fn channel_display_name(channel: &str) -> String {
    let normalized = normalize_channel(channel).unwrap_or_default();
    let known = match normalized.as_str() {
        "whatsapp" => "WhatsApp",
        "telegram" => "Telegram",
        "discord" => "Discord",
        "slack" => "Slack",
        "signal" => "Signal",
        "imessage" => "iMessage",
        "googlechat" => "Google Chat",
        "webchat" => "WebChat",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    let mut chars = normalized.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// One line of group context: `[<Channel> <group> <time>] <sender>: <body>`, the time as
/// `YYYY-MM-DDTHH:MMZ` (as OpenClaw writes it).
///
/// ```
/// use agent_sessions::context::history::format_envelope;
///
/// let at = "2026-01-13T07:45:31Z".parse().unwrap();
/// assert_eq!(
///     format_envelope("whatsapp", "120363@g.us", Some(at), "Alice", "hello"),
///     "[WhatsApp 120363@g.us 2026-01-13T07:45Z] Alice: hello"
/// );
/// ```
pub fn format_envelope(
    channel: &str,
    group: &str,
    at: Option<DateTime<Utc>>,
    sender: &str,
    body: &str,
) -> String {
    let mut tag = channel_display_name(channel);
    for part in [
        group.trim().to_owned(),
        at.map(|t| t.format("%Y-%m-%dT%H:%MZ").to_string())
            .unwrap_or_default(),
    ] {
        if !part.is_empty() {
            tag.push(' ');
            tag.push_str(&part);
        }
    }
    format!("[{tag}] {sender}: {body}")
}

/// The context block (OpenClaw's `buildHistoryContextFromEntries`): the history lines
/// under [`HISTORY_CONTEXT_MARKER`], a blank line, and `current` under
/// [`CURRENT_MESSAGE_MARKER`]. With `exclude_last`, the last history line is left out
/// (it is the current message). No history: `current` alone.
pub fn build_history_context(history: &[String], current: &str, exclude_last: bool) -> String {
    let history = if exclude_last {
        &history[..history.len().saturating_sub(1)]
    } else {
        history
    };
    let text = history.join("\n");
    if text.trim().is_empty() {
        return current.to_owned();
    }
    [
        HISTORY_CONTEXT_MARKER,
        &text,
        "",
        CURRENT_MESSAGE_MARKER,
        current,
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str) -> HistoryEntry {
        HistoryEntry {
            sender: "Alice".into(),
            body: body.into(),
            timestamp: None,
            message_id: None,
        }
    }

    #[tokio::test]
    async fn keys_are_evicted_least_recently_used_first() {
        let history = MemoryHistory::new(5, 2);
        history.append("a", entry("1")).await.unwrap();
        history.append("b", entry("1")).await.unwrap();
        history.append("a", entry("2")).await.unwrap(); // a is now the most recent
        history.append("c", entry("1")).await.unwrap(); // evicts b
        assert!(history.entries("b").await.unwrap().is_empty());
        assert_eq!(history.entries("a").await.unwrap().len(), 2);
        assert_eq!(history.groups(), 2);
    }

    #[tokio::test]
    async fn limit_zero_keeps_nothing_and_clear_forgets() {
        let history = MemoryHistory::new(0, 10);
        history.append("a", entry("1")).await.unwrap();
        assert_eq!(history.groups(), 0);
        let history = MemoryHistory::default();
        history.append("a", entry("1")).await.unwrap();
        history.clear("a").await.unwrap();
        assert!(history.entries("a").await.unwrap().is_empty());
    }

    #[test]
    fn context_block_matches_openclaw() {
        let at = |m: u32| format!("2026-01-13T07:{m:02}:00Z").parse().ok();
        let lines = vec![
            format_envelope("whatsapp", "120363@g.us", at(45), "Alice", "hello"),
            format_envelope("whatsapp", "120363@g.us", at(46), "Bob", "hi there"),
        ];
        let current = format!(
            "{}\n[from: Alice (+1234567890)]",
            format_envelope(
                "whatsapp",
                "120363@g.us",
                at(47),
                "Alice",
                "@bot what do you think?"
            )
        );
        assert_eq!(
            build_history_context(&lines, &current, false),
            "[Chat messages since your last reply - for context]\n\
             [WhatsApp 120363@g.us 2026-01-13T07:45Z] Alice: hello\n\
             [WhatsApp 120363@g.us 2026-01-13T07:46Z] Bob: hi there\n\
             \n\
             [Current message - respond to this]\n\
             [WhatsApp 120363@g.us 2026-01-13T07:47Z] Alice: @bot what do you think?\n\
             [from: Alice (+1234567890)]"
        );
        assert_eq!(
            build_history_context(&lines[..1], "now", true),
            "now",
            "only the current one"
        );
        assert_eq!(build_history_context(&[], "now", false), "now");
    }

    #[test]
    fn channel_names() {
        assert_eq!(channel_display_name("imsg"), "iMessage");
        assert_eq!(channel_display_name("matrix"), "Matrix");
        assert_eq!(channel_display_name(""), "");
    }
}
