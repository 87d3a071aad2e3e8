//! A message delivered twice is answered once.
//!
//! Channels deliver again: Telegram resends an update when the bot died before
//! confirming it, WhatsApp and Slack retry webhooks. A message that carries the
//! channel's message id is remembered for a window (OpenClaw drops duplicates within 20
//! minutes): an answered one in its session's entry, written in the same atomic update
//! that resolves it (so two workers racing the same update agree on which takes it); a
//! group message kept as chatter in the group's chatter, in the same step that keeps it.
//! A message seen again is a duplicate while the turn that took it may still log it,
//! and afterwards if its line is in the session's transcript; a message whose turn died
//! before logging it is taken again.

use std::time::Duration;

use super::holders::{self, Hold};
use crate::error::Result;
use crate::identity::key::{normalize_account_id, normalize_channel, SessionKey};
use crate::inbound::InboundMessage;
use crate::manager::SessionManager;
use crate::store::entry::{InboundRecord, SessionEntry};
use crate::transcript::{Direction, TranscriptRef};

/// How long a message id is remembered (OpenClaw's inbound dedupe window, 20 minutes).
pub const DEFAULT_DEDUPE_WINDOW: Duration = Duration::from_secs(20 * 60);

/// The most message ids one session remembers; the oldest are forgotten first.
pub(crate) const MAX_RECENT_INBOUND: usize = 100;

/// Which message `message` is, across deliveries: its channel, account, chat and
/// message id; `None` for a message without a message id (never deduplicated).
pub(crate) fn inbound_id(message: &InboundMessage) -> Option<String> {
    let id = message.message_id.as_deref()?.trim();
    if id.is_empty() {
        return None;
    }
    let channel = normalize_channel(&message.channel).unwrap_or_default();
    let account = normalize_account_id(message.account_id.as_deref().unwrap_or(""));
    let chat = match message.group_resolution() {
        Some(group) => format!("{}:{}", group.kind, group.id),
        None => format!(
            "direct:{}",
            message.conversation().peer_id.unwrap_or_default()
        ),
    };
    Some(format!("{channel}:{account}:{chat}:{id}"))
}

/// A turn taking a message with an id.
#[derive(Debug)]
pub(crate) struct Intake {
    pub(crate) id: String,
    pub(crate) hold: Hold,
    /// The holder of an earlier record of the message whose turn died before logging
    /// it: this turn takes the message over.
    pub(crate) take_over: Option<String>,
}

impl Intake {
    pub(crate) fn new(id: String) -> Self {
        Intake {
            id,
            hold: Hold::new(uuid::Uuid::new_v4().to_string()),
            take_over: None,
        }
    }
}

/// What a session's entry says of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not taken before (or taken by a turn this one takes over): record it.
    New,
    /// Taken by a turn that may still log it, or did.
    Duplicate,
    /// Taken by a turn that died: its transcript says whether it was logged.
    Unsure(InboundRecord),
}

/// What `entry` says of the message `intake` takes, at `now_ms`: a record older than
/// `window` says nothing.
pub(crate) fn check(
    entry: Option<&SessionEntry>,
    intake: &Intake,
    now_ms: u64,
    window: Duration,
) -> Seen {
    let since = now_ms.saturating_sub(window.as_millis() as u64);
    let Some(record) = entry.and_then(|e| {
        e.recent_inbound
            .iter()
            .find(|r| r.id == intake.id && r.at >= since)
    }) else {
        return Seen::New;
    };
    if intake.take_over.as_deref() == Some(record.holder.as_str()) {
        Seen::New
    } else if record.holder.is_empty() || holders::alive(&record.holder, record.at, now_ms) {
        // No holder: the update that recorded it also acted on it (a bare reset).
        Seen::Duplicate
    } else {
        Seen::Unsure(record.clone())
    }
}

/// Records the message `intake` takes in `entry` (its session), forgetting what is
/// older than `window` and beyond [`MAX_RECENT_INBOUND`]. `settled`: the update that
/// records it is all the message does (a bare reset), so it needs no holder — a
/// delivery again is a duplicate whoever looks, whenever within the window.
pub(crate) fn record(
    entry: &mut SessionEntry,
    intake: &Intake,
    now_ms: u64,
    window: Duration,
    settled: bool,
) {
    let since = now_ms.saturating_sub(window.as_millis() as u64);
    let records = &mut entry.recent_inbound;
    records.retain(|r| r.id != intake.id && r.at >= since);
    let excess = (records.len() + 1).saturating_sub(MAX_RECENT_INBOUND);
    records.drain(..excess);
    records.push(InboundRecord {
        id: intake.id.clone(),
        at: now_ms,
        session_id: entry.session_id.clone(),
        holder: if settled {
            String::new()
        } else {
            intake.hold.holder().to_owned()
        },
    });
}

impl SessionManager {
    /// Whether the message of `record` (a message of `key`'s sessions whose turn died)
    /// is in its session's transcript: the turn logged it before it died. Without a
    /// transcript store nothing says so, and the message is taken again.
    pub(crate) async fn logged_before(
        &self,
        key: &SessionKey,
        record: &InboundRecord,
        message_id: &str,
    ) -> Result<bool> {
        let Some(transcripts) = self.seams.transcripts.as_deref() else {
            return Ok(false);
        };
        let current = self.seams.store.get(key).await?;
        let entry = current
            .map(|s| s.entry)
            .filter(|entry| entry.session_id == record.session_id)
            .unwrap_or_else(|| SessionEntry::new(&record.session_id, 0));
        let transcript = TranscriptRef::of(key, &entry, &self.settings.default_agent);
        super::claims::has_line(transcripts, &transcript, |line| {
            line.log.as_ref().is_some_and(|log| {
                log.direction == Some(Direction::Inbound)
                    && (log.collected.contains(&record.id)
                        || match &log.inbound_id {
                            Some(id) => *id == record.id,
                            // A line of a version that did not write the whole id.
                            None => log.correlation_id.as_deref() == Some(message_id),
                        })
            })
        })
        .await
    }
}

impl SessionManager {
    /// Whether a reply to the message of `record` is in its session's transcript: a
    /// run answered it (and died, if it did, after logging the reply).
    pub(crate) async fn answered_before(
        &self,
        key: &SessionKey,
        record: &InboundRecord,
    ) -> Result<bool> {
        let Some(transcripts) = self.seams.transcripts.as_deref() else {
            return Ok(false);
        };
        let current = self.seams.store.get(key).await?;
        let entry = current
            .map(|s| s.entry)
            .filter(|entry| entry.session_id == record.session_id)
            .unwrap_or_else(|| SessionEntry::new(&record.session_id, 0));
        let transcript = TranscriptRef::of(key, &entry, &self.settings.default_agent);
        super::claims::has_line(transcripts, &transcript, |line| {
            line.log.as_ref().is_some_and(|log| {
                log.direction == Some(Direction::Outbound) && log.collected.contains(&record.id)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_known_by_its_channel_account_chat_and_id() {
        let dm = |peer: &str, id: &str| {
            InboundMessage::direct("Telegram", peer, "hi").with_message_id(id)
        };
        assert_eq!(
            inbound_id(&dm("42", "7")).as_deref(),
            Some("telegram:default:direct:42:7")
        );
        // The same id in another chat is another message (Telegram counts per chat).
        assert_ne!(inbound_id(&dm("42", "7")), inbound_id(&dm("43", "7")));
        let in_group = InboundMessage::group("telegram", "-100", "42", "hi").with_message_id("7");
        assert_eq!(
            inbound_id(&in_group).as_deref(),
            Some("telegram:default:group:-100:7")
        );
        let other_bot = in_group.clone().with_account("bot2");
        assert_ne!(inbound_id(&in_group), inbound_id(&other_bot));
        // No id, or a blank one: never deduplicated.
        assert_eq!(
            inbound_id(&InboundMessage::direct("telegram", "42", "hi")),
            None
        );
        assert_eq!(inbound_id(&dm("42", "  ")), None);
    }

    #[test]
    fn records_are_bounded_by_the_window_and_in_number() {
        let mut entry = SessionEntry::new("s1", 0);
        let window = Duration::from_secs(60);
        for n in 0..MAX_RECENT_INBOUND as u64 + 10 {
            let intake = Intake::new(format!("m{n}"));
            record(&mut entry, &intake, 1_000 + n, window, false);
        }
        assert_eq!(entry.recent_inbound.len(), MAX_RECENT_INBOUND);
        assert_eq!(
            entry.recent_inbound.last().unwrap().id,
            format!("m{}", MAX_RECENT_INBOUND + 9)
        );
        record(
            &mut entry,
            &Intake::new("late".into()),
            1_000_000,
            window,
            false,
        );
        assert_eq!(
            entry.recent_inbound.len(),
            1,
            "older than the window: forgotten"
        );
        assert_eq!(entry.recent_inbound[0].session_id, "s1");
    }

    /// Telegram counts message ids per chat: in a session two chats share, a dead
    /// turn's message is found by its whole id, not by another chat's line with the
    /// same message id.
    #[tokio::test]
    async fn a_dead_turns_message_is_not_mistaken_for_another_chats_line() {
        use crate::identity::key::{DefaultKeyBuilder, DmScope};
        use crate::manager::TurnAction;
        use crate::store::{InMemoryStore, SessionStoreExt};
        use crate::transcript::InMemoryTranscriptStore;

        let manager = SessionManager::builder(InMemoryStore::new())
            .transcripts(InMemoryTranscriptStore::new())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::Main))
            .build()
            .unwrap();
        let from = |peer: &str, text: &str| {
            InboundMessage::direct("telegram", peer, text).with_message_id("7")
        };
        let answered = manager.turn(&from("43", "from 43")).await.unwrap();
        answered.complete("ok").await.unwrap();
        // A turn took 42's message 7 and died before logging it.
        let dead = Intake::new(inbound_id(&from("42", "")).unwrap());
        let key = manager.key_for(&from("42", "")).unwrap();
        let now_ms = manager.clock().now_millis();
        manager
            .store()
            .update(&key, |slot| {
                let entry = slot.as_mut().unwrap();
                record(entry, &dead, now_ms, DEFAULT_DEDUPE_WINDOW, false);
            })
            .await
            .unwrap();
        drop(dead);
        let redelivered = manager.turn(&from("42", "from 42")).await.unwrap();
        assert_eq!(redelivered.action(), &TurnAction::Answer);
    }

    #[test]
    fn a_message_is_a_duplicate_while_its_turn_may_log_it() {
        let first = Intake::new("m1".into());
        let mut entry = SessionEntry::new("s1", 0);
        record(&mut entry, &first, 1_000, DEFAULT_DEDUPE_WINDOW, false);
        let again = Intake::new("m1".into());
        let window = DEFAULT_DEDUPE_WINDOW;
        assert_eq!(check(Some(&entry), &again, 1_001, window), Seen::Duplicate);
        assert_eq!(check(None, &again, 1_001, window), Seen::New);
        let after = 1_000 + window.as_millis() as u64 + 1;
        assert_eq!(
            check(Some(&entry), &again, after, window),
            Seen::New,
            "past the window"
        );
        let holder = first.hold.holder().to_owned();
        drop(first); // its turn ended without logging the message
        let Seen::Unsure(found) = check(Some(&entry), &again, 1_002, window) else {
            panic!("the turn died");
        };
        assert_eq!(found.holder, holder);
        let take_over = Intake {
            take_over: Some(holder),
            ..Intake::new("m1".into())
        };
        assert_eq!(check(Some(&entry), &take_over, 1_003, window), Seen::New);
        // A bare reset is done in the update that records it: a duplicate for good.
        let mut reset = SessionEntry::new("s2", 0);
        let first = Intake::new("m2".into());
        record(&mut reset, &first, 1_000, window, true);
        drop(first);
        assert_eq!(
            check(Some(&reset), &Intake::new("m2".into()), 1_001, window),
            Seen::Duplicate
        );
    }
}
