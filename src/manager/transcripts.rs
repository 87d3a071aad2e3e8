//! The manager's side of transcripts: the one message-log call every channel makes, and
//! the session events that go with a session's life.

use serde_json::Value;
use std::sync::Arc;

use super::SessionManager;
use crate::error::{Error, Result};
use crate::freshness::triggers::ModelRef;
use crate::identity::key::{normalize_channel, PeerKind, SessionKey};
use crate::inbound::InboundMessage;
use crate::store::entry::SessionEntry;
use crate::store::SessionStoreExt;
use crate::transcript::{
    ArchiveReason, Direction, LogFields, SessionEvent, SessionHeader, TranscriptEntry,
    TranscriptRef, TranscriptStore, Usage,
};

/// Records `location` as the entry's `sessionFile` unless it has one, if the entry is
/// still the session `session_id` (a reset in between makes it another session).
pub(crate) fn record_location(entry: &mut SessionEntry, session_id: &str, location: &str) {
    if entry.session_id == session_id {
        entry
            .session_file
            .get_or_insert_with(|| location.to_owned());
    }
}

/// One message for the message log: in or out, its text, and what is known about it.
///
/// ```
/// use agent_sessions::manager::LogMessage;
///
/// let reply = LogMessage::outbound("Your shift starts at 9.")
///     .from_person("staff:17")
///     .with_agent("reggie_oc", "reggie")
///     .took(1_840)
///     .with_tool_calls(2)
///     .correlated("msg-8812");
/// ```
///
/// It holds the [`LogFields`] its line will carry; when it is logged, the message's own
/// id, the session key, and what the session knows (its person, agent identity and
/// channel) are filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage {
    text: String,
    direction: Direction,
    pub(super) log: LogFields,
    model: Option<ModelRef>,
    pub(super) usage: Option<Usage>,
    /// Whether the person id is the sender's id on the message's channel (the
    /// message named no person): the same id on another channel is someone else.
    sender_only: bool,
}

impl LogMessage {
    fn new(direction: Direction, text: impl Into<String>) -> Self {
        LogMessage {
            text: text.into(),
            direction,
            log: LogFields::default(),
            model: None,
            usage: None,
            sender_only: false,
        }
    }

    /// A message from a person to the agent.
    pub fn inbound(text: impl Into<String>) -> Self {
        LogMessage::new(Direction::Inbound, text)
    }

    /// A message from the agent to a person.
    pub fn outbound(text: impl Into<String>) -> Self {
        LogMessage::new(Direction::Outbound, text)
    }

    /// The same message with `text` as what is logged (the model's input for it).
    pub(crate) fn with_text(mut self, text: String) -> Self {
        self.text = text;
        self
    }

    /// An inbound message as an adapter described it: its text, channel, sender (the
    /// canonical person when the message names one, else E.164, else the sender id),
    /// message id as correlation id, and attachments.
    pub fn from_inbound(message: &InboundMessage) -> Self {
        let mut logged = LogMessage::inbound(message.body.clone());
        let log = &mut logged.log;
        log.channel = normalize_channel(&message.channel);
        log.person_id = message.person_id.clone().filter(|p| !p.trim().is_empty());
        if log.person_id.is_none() {
            log.person_id = message
                .sender
                .e164
                .clone()
                .or_else(|| message.sender.id.clone());
            logged.sender_only = log.person_id.is_some();
        }
        log.correlation_id = message.message_id.clone();
        log.attachments = crate::inbound::attachment::kept(&message.attachments);
        logged
    }

    /// Who the person is.
    pub fn from_person(mut self, person_id: impl Into<String>) -> Self {
        self.log.person_id = Some(person_id.into());
        self.sender_only = false;
        self
    }

    /// The agent variant and its identity (`reggie_oc`, `reggie`).
    pub fn with_agent(mut self, name: impl Into<String>, identity: impl Into<String>) -> Self {
        self.log.agent_name = Some(name.into());
        self.log.agent_identity = Some(identity.into());
        self
    }

    /// The channel.
    pub fn on_channel(mut self, channel: impl Into<String>) -> Self {
        self.log.channel = Some(channel.into());
        self
    }

    /// How long processing took.
    pub fn took(mut self, millis: u64) -> Self {
        self.log.processing_ms = Some(millis);
        self
    }

    /// How many tool calls were made.
    pub fn with_tool_calls(mut self, count: u64) -> Self {
        self.log.tool_calls_count = Some(count);
        self
    }

    /// The correlation id.
    pub fn correlated(mut self, id: impl Into<String>) -> Self {
        self.log.correlation_id = Some(id.into());
        self
    }

    /// One metadata field.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.log.metadata.insert(key.into(), value.into());
        self
    }

    /// The model that wrote an outbound message, and its usage.
    pub fn by_model(mut self, model: ModelRef, usage: Option<Usage>) -> Self {
        self.model = Some(model);
        self.usage = usage;
        self
    }
}

impl SessionManager {
    pub(crate) fn transcript_store(&self) -> Result<&dyn TranscriptStore> {
        self.shared_transcripts().map(|store| &**store)
    }

    /// The transcript store, to hand to a task that outlives the call.
    pub(crate) fn shared_transcripts(&self) -> Result<&Arc<dyn TranscriptStore>> {
        self.seams.transcripts.as_ref().ok_or(Error::NotConfigured {
            what: "a transcript store (SessionManagerBuilder::transcripts)",
        })
    }

    /// The transcript of `key`'s current session, created on first use — as a fork of
    /// its parent's when the session was forked — and recorded as the entry's
    /// `sessionFile`.
    pub(crate) async fn transcript_of(
        &self,
        key: &SessionKey,
    ) -> Result<(TranscriptRef, SessionEntry)> {
        let entry = self.existing(key).await?.entry;
        let (transcript, entry, unrecorded) = self.prepare_transcript_for(key, entry).await?;
        if let Some(location) = unrecorded {
            // Metadata only: `updatedAt` stays. Skipped if the session changed meanwhile.
            self.seams
                .store
                .update(key, |slot| {
                    if let Some(current) = slot.as_mut() {
                        record_location(current, &entry.session_id, &location);
                    }
                })
                .await?;
        }
        Ok((transcript, entry))
    }

    /// The transcript of `key`'s session `entry` (as the caller just read or wrote it),
    /// created on first use (as a fork of its parent's when the session was forked),
    /// with its location when the entry does not record it yet — for the caller to
    /// record, in its own write.
    pub(crate) async fn prepare_transcript_for(
        &self,
        key: &SessionKey,
        entry: SessionEntry,
    ) -> Result<(TranscriptRef, SessionEntry, Option<String>)> {
        let transcripts = self.transcript_store()?;
        let transcript = TranscriptRef::of(key, &entry, &self.settings.default_agent);
        if transcript.session_file.is_some() {
            return Ok((transcript, entry, None));
        }
        // A transcript this manager read for an earlier turn exists, and a store that
        // names no location for it has nothing to record: not created again (an append
        // creates one that was removed since, with its header).
        if entry.forked_from.is_none()
            && self.histories.holds(&transcript)
            && transcripts.location(&transcript).is_none()
        {
            return Ok((transcript, entry, None));
        }
        let header = SessionHeader::new(&entry.session_id, self.seams.clock.now());
        match &entry.forked_from {
            Some(origin) => {
                let parent_key = SessionKey::parse(&origin.session_key)?;
                let parent = TranscriptRef {
                    session_id: origin.session_id.clone(),
                    session_file: origin.session_file.clone(),
                    ..TranscriptRef::of(
                        &parent_key,
                        &SessionEntry::new(&origin.session_id, 0),
                        &self.settings.default_agent,
                    )
                };
                transcripts.fork(&parent, &transcript, &header).await?
            }
            None => transcripts.create(&transcript, &header).await?,
        };
        let location = transcripts.location(&transcript);
        let transcript = TranscriptRef {
            session_file: location.clone(),
            ..transcript
        };
        Ok((transcript, entry, location))
    }

    /// Archives (or erases) the transcript of a session that was reset or deleted.
    /// Failures are logged, not returned: the session change they follow has happened.
    pub(crate) async fn retire_transcript(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        reason: ArchiveReason,
        erase: bool,
    ) {
        let Some(transcripts) = self.seams.transcripts.as_deref() else {
            return;
        };
        if entry.session_id.is_empty() {
            return;
        }
        let transcript = TranscriptRef::of(key, entry, &self.settings.default_agent);
        let outcome = if erase {
            transcripts.remove(&transcript).await.map(|_| ())
        } else {
            transcripts
                .archive(&transcript, reason, self.seams.clock.now())
                .await
                .map(|_| ())
        };
        if let Err(error) = outcome {
            tracing::warn!(key = %key, %error, "could not retire the old transcript; it stays in place");
        }
    }
}

impl SessionManager {
    /// Appends `line` to `key`'s session `transcript`; returns it as appended.
    pub(crate) async fn append_line(
        &self,
        key: &SessionKey,
        transcript: &TranscriptRef,
        line: TranscriptEntry,
    ) -> Result<SessionEvent> {
        let mut events = self
            .transcript_store()?
            .append(transcript, vec![line])
            .await?;
        events
            .pop()
            .ok_or_else(|| Error::NotFound { key: key.clone() })
    }

    /// The transcript line of `message` in `key`'s session `entry`: a user message in,
    /// an assistant message out, with its message-log fields.
    pub(crate) fn log_line(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        message: LogMessage,
    ) -> TranscriptEntry {
        let now = self.seams.clock.now();
        let LogMessage {
            text,
            direction,
            mut log,
            model,
            usage,
            sender_only,
        } = message;
        log.message_id = Some(uuid::Uuid::new_v4().to_string());
        log.direction = Some(direction);
        log.session_key = Some(key.to_string());
        log.agent_name = log.agent_name.or_else(|| key.agent_id().map(str::to_owned));
        // A one-person session knows its canonical person: its log lines name that
        // person, not the raw identifier an adapter saw (in a group, each line keeps its
        // own sender). A line that does not name the agent's identity gets the session's.
        let one_person = !key.peer_kind().is_some_and(PeerKind::is_group);
        let raw = log.person_id.take();
        log.person_id = entry.person_id.clone().filter(|_| one_person).or_else(|| {
            let raw = raw.as_deref()?;
            Some(
                self.seams
                    .keys
                    .canonical_person(raw)
                    .unwrap_or_else(|| raw.to_owned()),
            )
        });
        // The sender's own id, not a person the session or the identity links know.
        let on_channel = sender_only && raw.is_some() && log.person_id == raw;
        log.raw_person_id = raw.filter(|raw| Some(raw) != log.person_id.as_ref());
        log.agent_identity = log
            .agent_identity
            .or_else(|| entry.agent_identity.clone())
            .or_else(|| log.agent_name.as_deref().map(|a| self.agent_identity_of(a)));
        log.channel = log
            .channel
            .or_else(|| entry.channel_name().map(str::to_owned));
        // On a sealed store, a line whose person is known only by the sender's id on
        // its channel is sealed under a key of that sender on that channel.
        #[cfg(feature = "encryption")]
        if on_channel && self.seams.data_keys.is_some() && log.channel.is_some() {
            log.extra.insert(
                crate::privacy::encryption::PERSON_ON_CHANNEL.to_owned(),
                true.into(),
            );
        }
        #[cfg(not(feature = "encryption"))]
        let _ = on_channel;
        let line = match direction {
            Direction::Inbound => TranscriptEntry::user_text(text, now),
            Direction::Outbound => {
                let mut line = TranscriptEntry::assistant_text(text, "", "", now);
                if let Some(assistant) = line.message.as_mut() {
                    assistant.provider = model.as_ref().map(|m| m.provider.clone());
                    assistant.model = model.map(|m| m.model);
                    assistant.usage = usage;
                }
                line
            }
        };
        line.with_log(log)
    }
}
