//! System events: notes the host queues for a session (model switched, a reminder
//! fired) that are prepended to the next message the model sees, once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::Result;
use crate::freshness::policy::Zone;
use crate::identity::key::SessionKey;

/// The most events queued per session (OpenClaw: 20); the oldest are dropped.
pub(crate) const MAX_SYSTEM_EVENTS: usize = 20;
/// The most sessions with queued events; the least recently touched are dropped.
pub(crate) const MAX_SYSTEM_EVENT_SESSIONS: usize = 1000;

/// One queued event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemEvent {
    /// What happened.
    pub text: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// Where system events wait for a session's next turn: enqueue any time, drain once.
///
/// Every implementation keeps the same bounds and semantics as [`SystemEventQueue`]
/// (the in-memory default): text is trimmed, a blank text or a repeat of the last
/// queued text is skipped (`Ok(false)`) but still counts as touching the session, at
/// most `20` events a session (the oldest dropped first) and
/// `1000` sessions (the least recently touched dropped first).
/// [`drain`](SystemEvents::drain) takes a session's events and frees its place; an
/// event is returned by exactly one drain, even when several workers drain at once.
/// The shared implementations live beside the sessions:
/// [`SqliteSystemEvents`](crate::store::SqliteSystemEvents),
/// [`PostgresSystemEvents`](crate::store::PostgresSystemEvents) and
/// [`JsonFileSystemEvents`](crate::store::JsonFileSystemEvents).
///
/// ```
/// use agent_sessions::inbound::{SystemEventQueue, SystemEvents};
/// use agent_sessions::SessionKey;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let events: Box<dyn SystemEvents> = Box::new(SystemEventQueue::default());
/// let key = SessionKey::parse("agent:main:main")?;
/// let at = "2026-01-12T20:19:17Z".parse().unwrap();
/// assert!(events.enqueue(&key, "Model switched.", at).await?);
/// assert!(!events.enqueue(&key, "Model switched.", at).await?, "a repeat is skipped");
/// assert_eq!(events.drain(&key).await?.len(), 1);
/// assert!(events.drain(&key).await?.is_empty(), "drained once");
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait SystemEvents: Send + Sync {
    /// Queues `text` for `key`'s next turn. `Ok(false)` when it is blank or repeats the
    /// last queued text (nothing is queued).
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool>;
    /// Takes every event queued for `key`, oldest first.
    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>>;

    /// Every session's queued events, oldest first, by session key, leaving them
    /// queued: what a copy of the store carries ([`migrate`](crate::ops::migrate)). The
    /// crate's queues implement it; the default is
    /// [`Error::NotConfigured`](crate::Error::NotConfigured), so a copy says what it
    /// could not carry.
    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        Err(crate::Error::NotConfigured {
            what: "copying these system events (SystemEvents::export_queues)",
        })
    }

    /// Queues `events` for `key` as a copy carries them (see
    /// [`export_queues`](Self::export_queues)), when nothing is queued for `key`:
    /// `Ok(false)`, nothing written, when something is. The default is
    /// [`Error::NotConfigured`](crate::Error::NotConfigured).
    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        let _ = (key, events);
        Err(crate::Error::NotConfigured {
            what: "copying into these system events (SystemEvents::import_queue)",
        })
    }
}

/// An `Arc` of system events is system events: a host keeps one handle and gives the
/// manager another.
#[async_trait]
impl<T: SystemEvents + ?Sized> SystemEvents for Arc<T> {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        (**self).enqueue(key, text, at).await
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        (**self).drain(key).await
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        (**self).export_queues().await
    }

    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        (**self).import_queue(key, events).await
    }
}

/// Per-session queues of system events in this process's memory: enqueue any time,
/// drain once. The default [`SystemEvents`] of a
/// [`SessionManager`](crate::SessionManager).
#[derive(Debug)]
pub struct SystemEventQueue {
    queues: Mutex<HashMap<SessionKey, (u64, VecDeque<SystemEvent>)>>,
    clock: Mutex<u64>,
    max_events: usize,
    max_sessions: usize,
}

impl Default for SystemEventQueue {
    fn default() -> Self {
        SystemEventQueue::with_limits(MAX_SYSTEM_EVENTS, MAX_SYSTEM_EVENT_SESSIONS)
    }
}

impl SystemEventQueue {
    /// At most `max_events` events a session and `max_sessions` sessions (each at
    /// least 1).
    pub fn with_limits(max_events: usize, max_sessions: usize) -> Self {
        SystemEventQueue {
            queues: Mutex::default(),
            clock: Mutex::default(),
            max_events: max_events.max(1),
            max_sessions: max_sessions.max(1),
        }
    }

    /// Queues `text` for `key`'s next message. Blank text and a repeat of the last
    /// queued text are skipped (returns `false`).
    pub fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> bool {
        let text = text.trim();
        if text.is_empty() {
            return false;
        }
        let tick = {
            let mut clock = self.clock.lock().unwrap_or_else(PoisonError::into_inner);
            *clock += 1;
            *clock
        };
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if !queues.contains_key(key) && queues.len() >= self.max_sessions {
            if let Some(oldest) = queues
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            {
                queues.remove(&oldest);
            }
        }
        let (touched, queue) = queues.entry(key.clone()).or_default();
        *touched = tick;
        if queue.back().is_some_and(|last| last.text == text) {
            return false;
        }
        queue.push_back(SystemEvent {
            text: text.to_owned(),
            at,
        });
        while queue.len() > self.max_events {
            queue.pop_front();
        }
        true
    }

    /// Takes every event queued for `key`.
    pub fn drain(&self, key: &SessionKey) -> Vec<SystemEvent> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues
            .remove(key)
            .map(|(_, q)| q.into())
            .unwrap_or_default()
    }

    /// How many events are queued for `key`.
    pub fn len(&self, key: &SessionKey) -> usize {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(key).map_or(0, |(_, q)| q.len())
    }

    /// Whether no event is queued for `key`.
    pub fn is_empty(&self, key: &SessionKey) -> bool {
        self.len(key) == 0
    }
}

#[async_trait]
impl SystemEvents for SystemEventQueue {
    async fn enqueue(&self, key: &SessionKey, text: &str, at: DateTime<Utc>) -> Result<bool> {
        Ok(SystemEventQueue::enqueue(self, key, text, at))
    }

    async fn drain(&self, key: &SessionKey) -> Result<Vec<SystemEvent>> {
        Ok(SystemEventQueue::drain(self, key))
    }

    async fn export_queues(&self) -> Result<Vec<(SessionKey, Vec<SystemEvent>)>> {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut exported: Vec<(u64, SessionKey, Vec<SystemEvent>)> = queues
            .iter()
            .filter(|(_, (_, queue))| !queue.is_empty())
            .map(|(key, (touched, queue))| (*touched, key.clone(), queue.iter().cloned().collect()))
            .collect();
        // Least recently touched first, so a copy keeps the same order of eviction.
        exported.sort_by_key(|(touched, _, _)| *touched);
        Ok(exported.into_iter().map(|(_, k, q)| (k, q)).collect())
    }

    async fn import_queue(&self, key: &SessionKey, events: Vec<SystemEvent>) -> Result<bool> {
        if !self.is_empty(key) {
            return Ok(false);
        }
        for event in events {
            // Each event as it was queued (a repeat of the last one is skipped, as it
            // was when it was first queued).
            SystemEventQueue::enqueue(self, key, &event.text, event.at);
        }
        Ok(true)
    }
}

/// Prepends events to `body` as OpenClaw's `prependSystemEvents` does: each kept event
/// as `System: [<time>] <text>`, then a blank line, then the body. Heartbeat chatter
/// (`reason periodic`, `read heartbeat.md…`, `heartbeat poll`, `heartbeat wake`) is
/// dropped, and a `Node:` line loses its ` · last input …` part. Times are written in
/// `zone`: `YYYY-MM-DD HH:MM:SS <zone abbreviation>`, or `YYYY-MM-DDTHH:MM:SSZ` for UTC.
pub(crate) fn prepend_system_events(body: &str, events: &[SystemEvent], zone: &Zone) -> String {
    let lines: Vec<String> = events
        .iter()
        .filter_map(|event| {
            let text = clean_event_text(&event.text)?;
            Some(format!(
                "System: [{}] {text}",
                format_event_time(event.at, zone)
            ))
        })
        .collect();
    if lines.is_empty() {
        return body.to_owned();
    }
    format!("{}\n\n{body}", lines.join("\n"))
}

fn clean_event_text(text: &str) -> Option<String> {
    let trimmed = text.trim();
    let lower = trimmed.to_lowercase();
    let chatter = lower.is_empty()
        || lower.contains("reason periodic")
        || lower.starts_with("read heartbeat.md")
        || lower.contains("heartbeat poll")
        || lower.contains("heartbeat wake");
    if chatter {
        return None;
    }
    if trimmed.starts_with("Node:") {
        if let Some(at) = trimmed.find(" · last input") {
            let rest = &trimmed[at + " · last input".len()..];
            let tail = rest.find(" · ").map_or("", |next| &rest[next..]);
            return Some(format!("{}{tail}", &trimmed[..at]));
        }
    }
    Some(trimmed.to_owned())
}

fn format_event_time(at: DateTime<Utc>, zone: &Zone) -> String {
    const LOCAL: &str = "%Y-%m-%d %H:%M:%S %Z";
    match zone {
        Zone::Utc => at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Zone::Local => at.with_timezone(&chrono::Local).format(LOCAL).to_string(),
        Zone::Named(tz) => at.with_timezone(tz).format(LOCAL).to_string(),
        Zone::Fixed(offset) => at.with_timezone(offset).format(LOCAL).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SessionKey {
        SessionKey::parse("agent:main:main").unwrap()
    }

    fn at() -> DateTime<Utc> {
        "2026-01-12T20:19:17Z".parse().unwrap()
    }

    #[test]
    fn queues_are_bounded_and_skip_repeats() {
        let queue = SystemEventQueue::default();
        assert!(!queue.enqueue(&key(), "  ", at()));
        assert!(queue.enqueue(&key(), "a", at()));
        assert!(!queue.enqueue(&key(), "a", at()), "consecutive duplicate");
        for i in 0..30 {
            queue.enqueue(&key(), &format!("e{i}"), at());
        }
        let drained = queue.drain(&key());
        assert_eq!(drained.len(), MAX_SYSTEM_EVENTS);
        assert_eq!(drained[0].text, "e10");
        assert!(queue.is_empty(&key()));
    }

    #[test]
    fn heartbeat_chatter_is_dropped_and_node_lines_trimmed() {
        let events: Vec<SystemEvent> = [
            "Heartbeat poll",
            "reason periodic check",
            "Read HEARTBEAT.md please",
            "Node: laptop · last input 3m ago · online",
            "Model switched.",
        ]
        .iter()
        .map(|text| SystemEvent {
            text: (*text).to_owned(),
            at: at(),
        })
        .collect();
        assert_eq!(
            prepend_system_events("hi", &events, &Zone::Utc),
            "System: [2026-01-12T20:19:17Z] Node: laptop · online\nSystem: [2026-01-12T20:19:17Z] Model switched.\n\nhi"
        );
        assert_eq!(prepend_system_events("hi", &[], &Zone::Utc), "hi");
    }

    #[test]
    fn the_number_of_sessions_is_bounded() {
        let queue = SystemEventQueue::default();
        for i in 0..(MAX_SYSTEM_EVENT_SESSIONS + 5) {
            let key = SessionKey::parse(&format!("agent:main:dm:u{i}")).unwrap();
            queue.enqueue(&key, "x", at());
        }
        let first = SessionKey::parse("agent:main:dm:u0").unwrap();
        let last = SessionKey::parse(&format!("agent:main:dm:u{}", MAX_SYSTEM_EVENT_SESSIONS + 4))
            .unwrap();
        assert!(queue.is_empty(&first), "least recently touched dropped");
        assert_eq!(queue.len(&last), 1);
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn a_queue_drains_once() {
        (|| {
            use crate::freshness::policy::Zone;
            use crate::inbound::events::{prepend_system_events, SystemEventQueue};
            use crate::SessionKey;

            let queue = SystemEventQueue::default();
            let key = SessionKey::parse("agent:main:main")?;
            let at = "2026-01-12T20:19:17Z".parse().unwrap();
            queue.enqueue(&key, "Model switched.", at);
            let events = queue.drain(&key);
            assert!(queue.drain(&key).is_empty(), "drained once");
            assert_eq!(
                prepend_system_events("hello", &events, &Zone::parse("America/Los_Angeles")?),
                "System: [2026-01-12 12:19:17 PST] Model switched.\n\nhello"
            );
            Ok::<(), crate::Error>(())
        })()
        .unwrap();
    }
}
