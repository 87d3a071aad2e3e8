//! What became of a turn after the model: a model call that failed, and replies the
//! channel delivered or refused.
//!
//! Both are recorded as marks in the session's transcript — a `custom` line that names
//! the line it is about — so the transcript keeps everything that happened, and the
//! conversation the model sees ([`transcript_messages`](crate::inbound::chat::transcript_messages))
//! leaves out an input the host dropped and a reply the user never received.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::inbound::edits::{EDIT_CUSTOM_TYPE, UNDO_CUSTOM_TYPE};
use crate::manager::SessionManager;
use crate::reply::payload::ReplyPayload;
use crate::store::entry::SessionEntry;
use crate::transcript::{Direction, LogFields, Offset, TranscriptEntry, TranscriptRef};

/// The `customType` of the line that marks a failed turn.
pub(crate) const TURN_FAILED_CUSTOM_TYPE: &str = "agent-sessions.turn-failed";
/// The `customType` of the line that records a reply's delivery.
pub const DELIVERY_CUSTOM_TYPE: &str = "agent-sessions.delivery";

/// What to do with the input of a turn whose model call failed
/// ([`Turn::fail`](crate::manager::Turn::fail)).
///
/// ```
/// use agent_sessions::exactly_once::TurnFailure;
/// use agent_sessions::prelude::*;
/// use agent_sessions::transcript::InMemoryTranscriptStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .transcripts(InMemoryTranscriptStore::new())
///     .build()?;
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "(a text the provider refuses)")).await?;
/// // The provider answered 400 (content filter): it would refuse this input again.
/// turn.fail(TurnFailure::DropInput).await?;
///
/// let next = manager.turn(&InboundMessage::direct("telegram", "42", "When is my shift?")).await?;
/// let messages = next.messages().await?;
/// assert_eq!(messages.len(), 1, "the refused input is not sent again");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TurnFailure {
    /// Keep the input in the conversation: the next turn's model sees it again, before
    /// the next message (for a failure that may pass: a timeout, a provider down).
    KeepInput,
    /// Leave the input out of the conversation the model sees from now on; it stays in
    /// the transcript, marked (for a failure that would repeat: a content filter, an
    /// input too long).
    DropInput,
}

impl TurnFailure {
    fn as_str(self) -> &'static str {
        match self {
            TurnFailure::KeepInput => "kept",
            TurnFailure::DropInput => "dropped",
        }
    }
}

/// Where a payload [`Turn::complete`](crate::manager::Turn::complete) returned was logged: what
/// [`SessionManager::report_delivery`] needs to record its delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryReceipt {
    /// The session's key.
    pub key: SessionKey,
    /// The session the reply was logged in.
    pub session_id: String,
    /// The id of the transcript line that logged the reply.
    pub line: String,
    /// Where that line is.
    pub offset: Offset,
    /// Which payload of the reply (from 0).
    pub part: usize,
}

/// What became of a payload the host sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// The channel accepted it.
    Delivered,
    /// The channel refused it, or it could not be sent; `reason` says why (the
    /// channel's error).
    Failed {
        /// Why.
        reason: String,
    },
    /// The channel took some pieces of it and refused the others: a host that sends a
    /// long text as several messages (Telegram's limit is 4,096 characters) says which
    /// pieces the user got. The model then sees only those.
    Partly {
        /// The pieces the user got, as byte ranges of the payload's text (in any order;
        /// each within the text, on character boundaries).
        shown: Vec<std::ops::Range<usize>>,
        /// Why the others were not sent (the channel's error).
        reason: String,
    },
}

impl Delivery {
    fn status(&self) -> &'static str {
        match self {
            Delivery::Delivered => "delivered",
            Delivery::Failed { .. } => "failed",
            Delivery::Partly { .. } => "partly",
        }
    }

    /// The same outcome for a payload of `text`, in its simplest form: the pieces
    /// shown sorted and joined where they touch; none shown a failure, all of it a
    /// delivery. A piece outside `text` or off a character boundary is an error.
    fn normalized(self, text: &str) -> Result<Delivery> {
        let Delivery::Partly { mut shown, reason } = self else {
            return Ok(self);
        };
        if shown
            .iter()
            .any(|range| range.start > range.end || text.get(range.clone()).is_none())
        {
            return Err(Error::InvalidOption {
                option: "delivery",
                problem:
                    "a piece shown is not a range of the payload's text on character boundaries",
            });
        }
        shown.retain(|range| !range.is_empty());
        shown.sort_by_key(|range| range.start);
        let mut joined: Vec<std::ops::Range<usize>> = Vec::with_capacity(shown.len());
        for range in shown {
            match joined.last_mut() {
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => joined.push(range),
            }
        }
        Ok(match joined.as_slice() {
            [] => Delivery::Failed { reason },
            [all] if *all == (0..text.len()) => Delivery::Delivered,
            _ => Delivery::Partly {
                shown: joined,
                reason,
            },
        })
    }

    /// The pieces shown, as a mark records them: `[start, end]` pairs.
    fn shown(&self) -> Option<Value> {
        let Delivery::Partly { shown, .. } = self else {
            return None;
        };
        Some(shown.iter().map(|range| [range.start, range.end]).collect())
    }
}

/// The inputs a host dropped and the reply parts the user never received, by line id,
/// as the marks of a transcript say.
#[derive(Debug, Default, Clone)]
pub(crate) struct Marks {
    /// Ids of inbound lines whose input was dropped.
    pub(crate) dropped: std::collections::HashSet<String>,
    /// Per reply line, its parts whose last report is not a delivery.
    pub(crate) undelivered: std::collections::HashMap<String, Vec<Undelivered>>,
    /// Per inbound line, how many turns failed while it waited for a reply (its own
    /// and those of the messages after it, whose input it was part of).
    pub(crate) attempts: std::collections::HashMap<String, u32>,
    /// Per inbound line, the text of its last edit.
    pub(crate) edited: std::collections::HashMap<String, String>,
}

/// A reply part whose last report is not a delivery: its index, and the pieces of it
/// the user got as byte ranges of its text (none: it failed).
pub(crate) type Undelivered = (usize, Vec<[usize; 2]>);

impl Marks {
    /// Takes in `entry` if it is a mark (a later report on a reply part replaces an
    /// earlier one); whether it was one.
    pub(crate) fn add(&mut self, entry: &TranscriptEntry) -> bool {
        let (true, Some(kind), Some(data)) = (
            entry.kind == "custom",
            entry.custom_type.as_deref(),
            &entry.data,
        ) else {
            return false;
        };
        let text = |field: &str| data.get(field).and_then(Value::as_str).map(str::to_owned);
        match kind {
            TURN_FAILED_CUSTOM_TYPE => {
                if text("input").as_deref() == Some("dropped") {
                    self.dropped.extend(text("inbound"));
                }
                true
            }
            UNDO_CUSTOM_TYPE => {
                let lines = data.get("lines").and_then(Value::as_array);
                let ids = lines.into_iter().flatten().filter_map(Value::as_str);
                self.dropped.extend(ids.map(str::to_owned));
                true
            }
            EDIT_CUSTOM_TYPE => {
                if let (Some(line), Some(edit)) = (text("line"), text("text")) {
                    self.edited.insert(line, edit);
                }
                true
            }
            DELIVERY_CUSTOM_TYPE => {
                let (Some(line), Some(part)) =
                    (text("line"), data.get("part").and_then(Value::as_u64))
                else {
                    return true;
                };
                let part = part as usize;
                let shown = match text("status").as_deref() {
                    Some("failed") => Some(Vec::new()),
                    Some("partly") => Some(
                        serde_json::from_value(data.get("shown").cloned().unwrap_or_default())
                            .unwrap_or_default(),
                    ),
                    _ => None,
                };
                let parts = self.undelivered.entry(line.clone()).or_default();
                parts.retain(|(p, _)| *p != part);
                match shown {
                    Some(shown) => parts.push((part, shown)),
                    None if parts.is_empty() => {
                        self.undelivered.remove(&line);
                    }
                    None => {}
                }
                true
            }
            _ => false,
        }
    }

    /// Whether `entry` marks a failed turn.
    pub(crate) fn is_failure(entry: &TranscriptEntry) -> bool {
        entry.kind == "custom" && entry.custom_type.as_deref() == Some(TURN_FAILED_CUSTOM_TYPE)
    }

    /// Forgets the marks about lines that `keep` says no to.
    pub(crate) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.dropped.retain(|id| keep(id));
        self.undelivered.retain(|id, _| keep(id));
        self.attempts.retain(|id, _| keep(id));
        self.edited.retain(|id, _| keep(id));
    }

    /// The text of reply line `line` (its `text` and `log`) as the user got it:
    /// without its undelivered parts, and of a part delivered in pieces only those
    /// pieces; `None` when nothing of it was delivered.
    pub(crate) fn delivered_text(
        &self,
        line: Option<&str>,
        log: Option<&LogFields>,
        text: String,
    ) -> Option<String> {
        let Some(undelivered) = line.and_then(|line| self.undelivered.get(line)) else {
            return Some(text);
        };
        let parts = log.map(|log| log.parts.len()).unwrap_or_default().max(1);
        let mut left = Vec::new();
        for part in 0..parts {
            let Some(whole) = (match log {
                Some(log) => log.part_of(&text, part),
                None => (part == 0).then_some(text.as_str()),
            }) else {
                continue;
            };
            match undelivered.iter().find(|(p, _)| *p == part) {
                None => left.push(whole),
                Some((_, shown)) => left.extend(
                    shown
                        .iter()
                        .filter_map(|[start, end]| whole.get(*start..*end)),
                ),
            }
        }
        let left = left
            .into_iter()
            .filter(|piece| !piece.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        (!left.trim().is_empty()).then_some(left)
    }
}

impl SessionManager {
    /// Marks the turn whose inbound line is `inbound` (in `transcript`, of `key`'s
    /// session `entry`) failed, keeping or dropping its input, and ends its run.
    pub(crate) async fn record_failure(
        &self,
        key: &SessionKey,
        transcript: Option<&TranscriptRef>,
        inbound: Option<&str>,
        failure: TurnFailure,
        entry: &SessionEntry,
        fence: Option<u64>,
    ) -> Result<()> {
        if let (Some(transcript), Some(inbound)) = (transcript, inbound) {
            let mark = TranscriptEntry::custom(
                TURN_FAILED_CUSTOM_TYPE,
                serde_json::json!({ "inbound": inbound, "input": failure.as_str() }),
                self.seams.clock.now(),
            );
            self.transcript_store()?
                .append(transcript, vec![mark])
                .await?;
        }
        let session_id = entry.session_id.clone();
        self.change(key, |current| {
            // A reset meanwhile made it another session: its run is not this one; nor is
            // a run another turn took since (an interrupt, a take-over).
            if current.session_id != session_id {
                return;
            }
            let ended = match fence {
                Some(fence) => crate::lane::release(current, fence),
                None => {
                    current.run = None;
                    true
                }
            };
            if ended {
                current.status = Some(crate::store::entry::SessionStatus::Idle);
                current.aborted_last_run = Some(true);
            }
        })
        .await?;
        crate::ops::telemetry::turn_failed(failure.as_str());
        Ok(())
    }

    /// Records what became of `payload`, one of the payloads
    /// [`Turn::complete`](crate::manager::Turn::complete) returned: a line in the session's
    /// transcript. A failed payload is left out of the conversation the model sees
    /// from then on (the model does not believe the user read it), and of a payload
    /// delivered [`Partly`](Delivery::Partly) the model sees only the pieces the user
    /// got; a later report of the same payload replaces the earlier (a retry that got
    /// through). Reporting the same outcome again changes nothing. Deliveries and failures are counted in the
    /// metrics (`agent_sessions_deliveries_total`, by status).
    ///
    /// A payload without a receipt (none is logged without a transcript store) has
    /// nothing to record: `Ok(())`.
    ///
    /// ```
    /// use agent_sessions::exactly_once::Delivery;
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "Tell me everything")).await?;
    /// for payload in turn.complete("(a reply too long for the channel)").await? {
    ///     // The channel answered 400: the user never saw it.
    ///     let refused = Delivery::Failed { reason: "message is too long".into() };
    ///     manager.report_delivery(&payload, refused).await?;
    /// }
    /// let next = manager.turn(&InboundMessage::direct("telegram", "42", "Hello?")).await?;
    /// let roles: Vec<ChatRole> = next.messages().await?.iter().map(|m| m.role).collect();
    /// assert_eq!(roles, [ChatRole::User, ChatRole::User], "the refused reply is left out");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn report_delivery(&self, payload: &ReplyPayload, delivery: Delivery) -> Result<()> {
        let Some(receipt) = &payload.receipt else {
            return Ok(());
        };
        let transcripts = self.transcript_store()?;
        // The session's transcript, or its archive when a reset replaced the session.
        let current = self
            .seams
            .store
            .get(&receipt.key)
            .await?
            .filter(|s| s.entry.session_id == receipt.session_id);
        let transcript = match current {
            Some(session) => {
                TranscriptRef::of(&receipt.key, &session.entry, &self.settings.default_agent)
            }
            None => {
                let entry = SessionEntry::new(&receipt.session_id, 0);
                let live = TranscriptRef::of(&receipt.key, &entry, &self.settings.default_agent);
                transcripts.archived(&live).await?.unwrap_or(live)
            }
        };
        let since = transcripts.read(&transcript, receipt.offset).await?;
        // The receipt must name a reply logged in this key's session, and a payload of
        // that reply: a forged receipt marks nothing (least of all a line of another
        // session, whose transcript its session id could name).
        let reply = since
            .events
            .first()
            .map(|event| &event.entry)
            .filter(|line| {
                line.id.as_deref() == Some(receipt.line.as_str())
                    && line.log.as_ref().is_some_and(|log| {
                        log.direction == Some(Direction::Outbound)
                            && log.session_key.as_deref() == Some(receipt.key.as_str())
                    })
            });
        let Some(reply) = reply else {
            return Err(Error::InvalidOption {
                option: "delivery receipt",
                problem: "it names no reply line of its session",
            });
        };
        // …and exactly the payload it was given with: its part, with its text.
        let reply_text = reply.message.as_ref().map(|m| m.text()).unwrap_or_default();
        let part = reply
            .log
            .as_ref()
            .and_then(|log| log.part_of(&reply_text, receipt.part));
        let text = payload.text.as_deref().unwrap_or_default();
        if part.is_none_or(|part| part != text) {
            return Err(Error::InvalidOption {
                option: "delivery receipt",
                problem: "the payload is not the part of the reply its receipt names",
            });
        }
        let delivery = delivery.normalized(text)?;
        // The same report again changes nothing: the last report of the part decides.
        let last = since
            .events
            .iter()
            .rev()
            .filter(|event| event.entry.custom_type.as_deref() == Some(DELIVERY_CUSTOM_TYPE))
            .filter_map(|event| event.entry.data.as_ref())
            .find(|data| {
                data.get("line").and_then(Value::as_str) == Some(receipt.line.as_str())
                    && data.get("part").and_then(Value::as_u64) == Some(receipt.part as u64)
            })
            .map(|data| (data.get("status").cloned(), data.get("shown").cloned()));
        if last == Some((Some(delivery.status().into()), delivery.shown())) {
            return Ok(());
        }
        let mut data = serde_json::json!({
            "line": receipt.line,
            "part": receipt.part,
            "status": delivery.status(),
        });
        if let Some(shown) = delivery.shown() {
            data["shown"] = shown;
        }
        if let Delivery::Failed { reason } | Delivery::Partly { reason, .. } = &delivery {
            data["reason"] = Value::from(reason.as_str());
        }
        let mark = TranscriptEntry::custom(DELIVERY_CUSTOM_TYPE, data, self.seams.clock.now());
        transcripts.append(&transcript, vec![mark]).await?;
        crate::ops::telemetry::delivered(delivery.status());
        Ok(())
    }
}

impl DeliveryReceipt {
    /// Gives each payload the receipt of its part of `line`, the reply logged in
    /// `key`'s session `entry`.
    pub(crate) fn give(
        payloads: &mut [crate::reply::payload::ReplyPayload],
        key: &crate::identity::key::SessionKey,
        entry: &crate::store::entry::SessionEntry,
        line: &crate::transcript::SessionEvent,
    ) {
        let Some(id) = &line.entry.id else {
            return;
        };
        for (part, payload) in payloads.iter_mut().enumerate() {
            payload.receipt = Some(DeliveryReceipt {
                key: key.clone(),
                session_id: entry.session_id.clone(),
                line: id.clone(),
                offset: line.offset,
                part,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks_of(entries: &[TranscriptEntry]) -> Marks {
        let mut marks = Marks::default();
        for entry in entries {
            marks.add(entry);
        }
        marks
    }

    fn mark(kind: &str, data: Value) -> TranscriptEntry {
        TranscriptEntry::custom(kind, data, chrono::Utc::now())
    }

    #[test]
    fn the_last_report_of_a_part_decides() {
        let entries = [
            mark(
                TURN_FAILED_CUSTOM_TYPE,
                serde_json::json!({"inbound": "u1", "input": "dropped"}),
            ),
            mark(
                TURN_FAILED_CUSTOM_TYPE,
                serde_json::json!({"inbound": "u2", "input": "kept"}),
            ),
            mark(
                DELIVERY_CUSTOM_TYPE,
                serde_json::json!({"line": "a1", "part": 0, "status": "failed", "text": "one"}),
            ),
            mark(
                DELIVERY_CUSTOM_TYPE,
                serde_json::json!({"line": "a1", "part": 1, "status": "failed", "text": "two"}),
            ),
            mark(
                DELIVERY_CUSTOM_TYPE,
                serde_json::json!({"line": "a1", "part": 1, "status": "delivered"}),
            ),
            mark(
                DELIVERY_CUSTOM_TYPE,
                serde_json::json!({"line": "a2", "status": "failed"}),
            ),
        ];
        let marks = marks_of(&entries);
        assert!(marks.dropped.contains("u1") && !marks.dropped.contains("u2"));
        // "one" and "two" as payloads 0 and 1, a payload without text as 2.
        let log = LogFields {
            parts: vec![Some([0, 3]), Some([5, 8]), None],
            ..LogFields::default()
        };
        assert_eq!(
            marks
                .delivered_text(Some("a1"), Some(&log), "one\n\ntwo".into())
                .as_deref(),
            Some("two"),
            "part 0 failed; part 1 failed, then delivered"
        );
        let only_one = LogFields {
            parts: vec![Some([0, 3])],
            ..LogFields::default()
        };
        assert_eq!(
            marks.delivered_text(Some("a1"), Some(&only_one), "one".into()),
            None
        );
        assert_eq!(
            marks
                .delivered_text(Some("a2"), Some(&log), "x".into())
                .as_deref(),
            Some("x"),
            "no part: ignored"
        );
        assert_eq!(
            marks.delivered_text(None, None, "y".into()).as_deref(),
            Some("y")
        );
    }

    #[test]
    fn of_a_part_delivered_in_pieces_only_those_pieces_are_seen() {
        let text = "aaa bbb ccc ddd";
        let log = LogFields {
            parts: vec![Some([0, 15]), None],
            ..LogFields::default()
        };
        let partly = |shown: Value| {
            mark(
                DELIVERY_CUSTOM_TYPE,
                serde_json::json!({"line": "a1", "part": 0, "status": "partly", "shown": shown}),
            )
        };
        let seen = |marks: &Marks| marks.delivered_text(Some("a1"), Some(&log), text.into());
        let marks = marks_of(&[partly(serde_json::json!([[0, 3], [8, 15]]))]);
        assert_eq!(seen(&marks).as_deref(), Some("aaa\n\nccc ddd"));
        // A later delivery of the whole part replaces it.
        let mut marks = marks;
        marks.add(&mark(
            DELIVERY_CUSTOM_TYPE,
            serde_json::json!({"line": "a1", "part": 0, "status": "delivered"}),
        ));
        assert_eq!(seen(&marks).as_deref(), Some(text));
        // Ranges a mark got wrong (outside the part, not a pair) show nothing of it.
        let marks = marks_of(&[partly(serde_json::json!([[10, 99]]))]);
        assert_eq!(seen(&marks), None);
        let marks = marks_of(&[partly(serde_json::json!("0-3"))]);
        assert_eq!(seen(&marks), None);
    }

    #[test]
    fn a_partial_delivery_is_kept_in_its_simplest_form() {
        let partly = |shown: Vec<std::ops::Range<usize>>| Delivery::Partly {
            shown,
            reason: "refused".into(),
        };
        let text = "héllo world";
        assert_eq!(
            partly(vec![6..12, 0..3, 3..6, 1..3])
                .normalized(text)
                .unwrap(),
            Delivery::Delivered
        );
        assert_eq!(
            partly(vec![7..12, 0..1, 1..3, 4..4])
                .normalized(text)
                .unwrap(),
            partly(vec![0..3, 7..12])
        );
        assert!(matches!(
            partly(vec![]).normalized(text).unwrap(),
            Delivery::Failed { .. }
        ));
        #[allow(clippy::reversed_empty_ranges)] // a host's mistake, on purpose
        let reversed = 5..4;
        for wrong in [0..2, 3..13, reversed] {
            assert!(
                partly(vec![wrong.clone()]).normalized(text).is_err(),
                "{wrong:?}"
            );
        }
    }

    /// A refused part is removed by where it is, never by what it says: the delivered
    /// part may contain the same words.
    #[test]
    fn a_refused_part_is_removed_where_it_is_not_where_its_words_first_appear() {
        let marks = marks_of(&[mark(
            DELIVERY_CUSTOM_TYPE,
            serde_json::json!({"line": "a1", "part": 1, "status": "failed"}),
        )]);
        let text = "Yes, I booked Thursday.\n\nYes";
        let log = LogFields {
            parts: vec![Some([0, 23]), Some([25, 28])],
            ..LogFields::default()
        };
        assert_eq!(
            marks
                .delivered_text(Some("a1"), Some(&log), text.into())
                .as_deref(),
            Some("Yes, I booked Thursday.")
        );
    }
}
