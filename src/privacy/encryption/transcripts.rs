//! Transcripts sealed at rest: a transcript store that seals every entry it is given
//! and opens every entry it reads, over any other.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::key::{key_with_id, DataKey, KeyOwner, KeyProvider};
use super::opened::Keys;
use super::rotation::DataKeyRotation;
use super::sealed::{open, other_owners, owner_of, seal, sealed_value};
use crate::error::{Error, Result};
use crate::transcript::lines::{new_entry_id, session_id_of_name, PARENT_ON_APPEND};
use crate::transcript::{
    ArchiveReason, LineEdit, LogQuery, LogRecord, Offset, SessionEvent, SessionHeader,
    TranscriptEntry, TranscriptExport, TranscriptRead, TranscriptRef, TranscriptStore,
    TranscriptSubscription, TranscriptUpdate,
};
use crate::AgentId;

/// `inner`, sealed: what it keeps of a person or the model is sealed under the data
/// key of its owner ([`owner_of`]), bound to its agent, session and line.
pub(crate) struct EncryptedTranscripts<T: ?Sized> {
    inner: Arc<T>,
    keys: Arc<Keys>,
}

impl<T: ?Sized> EncryptedTranscripts<T> {
    pub(crate) fn new(inner: Arc<T>, keys: Arc<Keys>) -> Self {
        EncryptedTranscripts { inner, keys }
    }

    fn keyring(&self) -> Keyring<'_> {
        Keyring::new(&self.keys, true)
    }
}

/// The data keys one call uses, each asked of the provider once.
pub(crate) struct Keyring<'a> {
    provider: &'a Keys,
    known: HashMap<KeyOwner, Option<DataKey>>,
    /// Every key of an owner that opens something, asked once.
    all: HashMap<KeyOwner, Vec<DataKey>>,
    /// Whether the lines it opens are kept opened (not for a read of a conversation's
    /// end, which a manager reads once and then follows).
    remember: bool,
}

impl<'a> Keyring<'a> {
    /// A keyring over `provider`'s keys; `remember`: whether what it opens is kept
    /// opened.
    pub(crate) fn new(provider: &'a Keys, remember: bool) -> Self {
        Keyring {
            provider,
            known: HashMap::new(),
            all: HashMap::new(),
            remember,
        }
    }

    pub(crate) async fn key(&mut self, owner: KeyOwner, create: bool) -> Result<Option<&DataKey>> {
        // Not asked yet, or asked only whether it exists and now to be made.
        if self
            .known
            .get(&owner)
            .is_none_or(|key| create && key.is_none())
        {
            let key = self.provider.data_key(&owner, create).await?;
            if let (Some(key), Some(all)) = (&key, self.all.get_mut(&owner)) {
                if !all.contains(key) {
                    all.insert(0, key.clone());
                }
            }
            self.known.insert(owner.clone(), key);
        }
        Ok(self.known.get(&owner).and_then(Option::as_ref))
    }

    /// Seals `entry`, giving it an id first (its place is part of what it is sealed
    /// with); its parent is then set where it is appended.
    async fn seal(&mut self, entry: &mut TranscriptEntry, place: (&AgentId, &str)) -> Result<()> {
        if entry.id.is_none() {
            entry.id = Some(new_entry_id());
            entry.parent_id = Some(PARENT_ON_APPEND.to_owned());
        }
        let owner = owner_of(entry, place.0, place.1);
        let provider = self.provider;
        let key = self
            .key(owner, true)
            .await?
            .ok_or_else(|| Error::Encryption {
                problem: "the key provider made no data key".into(),
            })?;
        seal(entry, key, place, &provider.lines)
    }

    /// `owner`'s key whose id is `id`, if it is left.
    pub(crate) async fn key_with_id(
        &mut self,
        owner: KeyOwner,
        id: &str,
    ) -> Result<Option<DataKey>> {
        if !self.all.contains_key(&owner) {
            let keys = self.provider.data_keys(&owner).await?;
            self.all.insert(owner.clone(), keys);
        }
        Ok(self
            .all
            .get(&owner)
            .and_then(|keys| key_with_id(keys, id))
            .cloned())
    }

    async fn open(&mut self, entry: &mut TranscriptEntry, place: (&AgentId, &str)) -> Result<()> {
        let Some(id) = sealed_value(entry).map(|value| value.key_id().to_owned()) else {
            return Ok(());
        };
        let key = self.sealed_under(entry, place, &id).await?;
        open(
            entry,
            key.as_ref(),
            place,
            (&self.provider.lines, self.remember),
        )
    }

    /// Opens a message-log record of a sealed line: its text and log fields as they
    /// were written ([`ERASED_TEXT`](super::ERASED_TEXT) when its key was destroyed).
    pub(crate) async fn open_record(&mut self, record: &mut LogRecord) -> Result<()> {
        let mut entry = TranscriptEntry {
            log: Some(std::mem::take(&mut record.log)),
            ..TranscriptEntry::user_text(String::new(), record.at)
        };
        let mut opened = Ok(());
        if sealed_value(&entry).is_some() {
            opened = self
                .open(&mut entry, (&record.agent, &record.session_id))
                .await;
            if let (Ok(()), Some(message)) = (&opened, &entry.message) {
                record.text = message.text();
            }
        }
        record.log = entry.log.unwrap_or_default();
        opened
    }

    /// Whether the key a sealed record was sealed under is left (not destroyed by an
    /// erase, nor retired after a rotation sealed the line anew); `true` for a record
    /// that is not sealed.
    pub(crate) async fn can_open(&mut self, record: &LogRecord) -> Result<bool> {
        let entry = TranscriptEntry {
            log: Some(record.log.clone()),
            ..TranscriptEntry::user_text(String::new(), record.at)
        };
        let Some(id) = sealed_value(&entry).map(|value| value.key_id().to_owned()) else {
            return Ok(true);
        };
        let place = (&record.agent, record.session_id.as_str());
        Ok(self.sealed_under(&entry, place, &id).await?.is_some())
    }

    /// The key with id `id` that sealed `entry`, if it is left: its owner's
    /// ([`owner_of`]), else one of the owners it may also be sealed under
    /// ([`other_owners`]: for a record that does not say whose, its person's on its
    /// channel; for a line an earlier build sealed, its person's id as written).
    async fn sealed_under(
        &mut self,
        entry: &TranscriptEntry,
        place: (&AgentId, &str),
        id: &str,
    ) -> Result<Option<DataKey>> {
        let found = self
            .key_with_id(owner_of(entry, place.0, place.1), id)
            .await?;
        if found.is_some() {
            return Ok(found);
        }
        for other in other_owners(entry) {
            if let Some(found) = self.key_with_id(other, id).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The text of a logged message whose text is its line's sealed value (what
    /// [`LoggedMessage::from_record`](crate::transcript::search::LoggedMessage) makes
    /// of a sealed line's record); `None` when its key is gone ([`can_open`](Self::can_open)).
    pub(crate) async fn open_logged(
        &mut self,
        message: &crate::transcript::search::LoggedMessage,
        agent: &AgentId,
    ) -> Result<Option<String>> {
        let mut record = LogRecord {
            agent: agent.clone(),
            session_id: message.session_id.clone(),
            at: message.at,
            text: String::new(),
            log: crate::transcript::LogFields {
                person_id: message.person_id.clone(),
                channel: message.channel.clone(),
                extra: [(
                    crate::privacy::SEALED_LINE.to_owned(),
                    message.text.clone().into(),
                )]
                .into_iter()
                .collect(),
                ..Default::default()
            },
            offset: Offset(0),
        };
        if !self.can_open(&record).await? {
            return Ok(None);
        }
        self.open_record(&mut record).await?;
        Ok(Some(record.text))
    }

    async fn open_events(
        &mut self,
        events: &mut [SessionEvent],
        place: (&AgentId, &str),
    ) -> Result<()> {
        for event in events {
            self.open(&mut event.entry, place).await?;
        }
        Ok(())
    }

    /// The line as it reads opened, for a pass over whole transcripts (an erase, a
    /// person's export): sealed lines re-written with their text, every other line (the
    /// header, a damaged line) as it is. A sealed line whose key is at hand but which
    /// does not open with it (altered on disk) is given as stored too, with a warning,
    /// rather than stop the pass for every person; a key provider's failure is an error.
    async fn open_line_or_as_stored(
        &mut self,
        line: String,
        (agent, name): (&AgentId, &str),
        index: usize,
    ) -> Result<String> {
        let session_id = session_id_of_name(name);
        let place = (agent, session_id.as_str());
        let Ok(mut entry) = crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes())
        else {
            return Ok(line);
        };
        let Some(id) = sealed_value(&entry).map(|value| value.key_id().to_owned()) else {
            return Ok(line);
        };
        let key = self.sealed_under(&entry, place, &id).await?;
        match open(
            &mut entry,
            key.as_ref(),
            place,
            (&self.provider.lines, self.remember),
        ) {
            Ok(()) => serde_json::to_string(&entry)
                .map_err(|e| Error::encode("an opened transcript line", e)),
            Err(Error::Encryption { problem }) => {
                tracing::warn!(%agent, transcript = name, line = index, %problem, "a sealed line does not open: passed over as stored");
                Ok(line)
            }
            Err(other) => Err(other),
        }
    }

    /// The line sealed: an entry line not sealed yet is sealed, the header and a
    /// blank or sealed line kept. [`Error::Encryption`] for a line that is not an
    /// entry, or an entry without an id (what it binds a sealed value to): kept, it
    /// would keep its text plain.
    async fn seal_line(&mut self, line: String, place: (&AgentId, &str)) -> Result<String> {
        if line.trim().is_empty() {
            return Ok(line);
        }
        let unsealable = |why: &str| {
            Error::Encryption {
            problem: format!(
                "a line of transcript {} ({}) {why}: sealed as it is, its text would stay plain; repair or remove it first (agent-sessions doctor --repair)",
                place.1, place.0
            ),
        }
        };
        let Ok(mut entry) = crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes())
        else {
            return Err(unsealable("is not a transcript entry (torn, or not JSON)"));
        };
        if entry.kind == "session" || sealed_value(&entry).is_some() {
            return Ok(line);
        }
        if entry.id.is_none() {
            return Err(unsealable("has no id"));
        }
        self.seal(&mut entry, place).await?;
        serde_json::to_string(&entry).map_err(|e| Error::encode("a sealed transcript line", e))
    }
}

/// `line` as a sealed store reads it back once it sealed it: an entry it seals is
/// written again by this crate's encoder (the same fields, perhaps in another order).
pub(crate) fn read_back_as(line: String) -> String {
    let Ok(entry) = crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes()) else {
        return line;
    };
    if entry.kind == "session" || sealed_value(&entry).is_some() || entry.id.is_none() {
        return line;
    }
    serde_json::to_string(&entry).unwrap_or(line)
}

fn place(transcript: &TranscriptRef) -> (&AgentId, &str) {
    (&transcript.agent, &transcript.session_id)
}

#[async_trait]
impl<T: TranscriptStore + ?Sized> TranscriptStore for EncryptedTranscripts<T> {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        self.inner.create(transcript, header).await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        // Each line is bound to its session: the child's copies are sealed anew.
        if !self.inner.create(child, header).await? {
            return Ok(false);
        }
        let read = self.read(parent, Offset::START).await?;
        let entries: Vec<TranscriptEntry> = read.events.into_iter().map(|e| e.entry).collect();
        if !entries.is_empty() {
            self.append(child, entries).await?;
        }
        Ok(true)
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let mut keyring = self.keyring();
        let mut plain = entries;
        let mut sealed = Vec::with_capacity(plain.len());
        for entry in &mut plain {
            let mut copy = entry.clone();
            keyring.seal(&mut copy, place(transcript)).await?;
            entry.id.clone_from(&copy.id);
            sealed.push(copy);
        }
        let mut events = self.inner.append(transcript, sealed).await?;
        for (event, plain) in events.iter_mut().zip(plain) {
            let stored = std::mem::replace(&mut event.entry, plain);
            event.entry.id = stored.id;
            event.entry.parent_id = stored.parent_id;
            event.entry.timestamp = stored.timestamp;
        }
        Ok(events)
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let mut read = self.inner.read(transcript, from).await?;
        self.keyring()
            .open_events(&mut read.events, place(transcript))
            .await?;
        Ok(read)
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let mut read = self.inner.read_chunk(transcript, from, max_bytes).await?;
        self.keyring()
            .open_events(&mut read.events, place(transcript))
            .await?;
        Ok(read)
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        // Sealed lines are longer than the lines they stand for (the sealed text in
        // base64 beside the clear fields): about as much conversation as asked for.
        let max_bytes = max_bytes.saturating_mul(3) / 2;
        let mut read = self.inner.read_back(transcript, before, max_bytes).await?;
        let mut keyring = self.keyring();
        keyring.remember = false;
        keyring
            .open_events(&mut read.events, place(transcript))
            .await?;
        Ok(read)
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let mut found = self.inner.last_compaction(transcript).await?;
        if let Some(event) = &mut found {
            self.keyring()
                .open(&mut event.entry, place(transcript))
                .await?;
        }
        Ok(found)
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        self.inner.archive(transcript, reason, at).await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        self.inner.remove(transcript).await
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let mut records = self.inner.query_log(query).await?;
        let mut keyring = self.keyring();
        for record in &mut records {
            keyring.open_record(record).await?;
        }
        Ok(records)
    }

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.subscribe()
    }

    fn follow_interval(&self) -> Duration {
        self.inner.follow_interval()
    }

    fn announce(&self, update: TranscriptUpdate) -> bool {
        self.inner.announce(update)
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        self.inner.archived(transcript).await
    }

    fn location(&self, transcript: &TranscriptRef) -> Option<String> {
        self.inner.location(transcript)
    }

    async fn identity(&self, transcript: &TranscriptRef) -> Result<Option<u64>> {
        self.inner.identity(transcript).await
    }
}

impl<T: TranscriptExport + ?Sized> EncryptedTranscripts<T> {
    /// Seals anew, under its owner's current key, each line of transcript `name` that
    /// an earlier key of its owner sealed; first gives each owner found there and not
    /// yet in `rotated` a new key (a rotation). How many lines it sealed anew, how many
    /// it left under an earlier key (a line changed meanwhile, which the next pass
    /// seals), and how many did not open (damaged: left as they are). Each line keeps
    /// its length and place, so readers following the transcript are not disturbed.
    pub(crate) async fn reseal(
        &self,
        agent: &AgentId,
        name: &str,
        rotated: &mut super::rotation::Rotated,
    ) -> Result<DataKeyRotation> {
        let Some(lines) = self.inner.export_lines(agent, name).await? else {
            return Ok(DataKeyRotation::default());
        };
        let session_id = session_id_of_name(name);
        let place = (agent, session_id.as_str());
        let mut sealed = Vec::new();
        for (index, line) in lines.into_iter().enumerate() {
            let Ok(entry) = crate::store::json_text::from_slice::<TranscriptEntry>(line.as_bytes())
            else {
                continue;
            };
            if sealed_value(&entry).is_some() {
                rotated
                    .rotate(&*self.keys, owner_of(&entry, agent, &session_id))
                    .await?;
                sealed.push((index, line, entry));
            }
        }
        let mut keyring = self.keyring();
        keyring.remember = false;
        let (mut edits, mut left, mut damaged) = (Vec::new(), 0, 0);
        for (index, line, mut entry) in sealed {
            let owner = owner_of(&entry, agent, &session_id);
            let Some(sealed_under) = sealed_value(&entry).map(|v| v.key_id().to_owned()) else {
                continue;
            };
            let current = keyring
                .key(owner.clone(), true)
                .await?
                .map(|k| k.id().to_owned());
            if current.as_deref() == Some(sealed_under.as_str())
                || keyring.key_with_id(owner, &sealed_under).await?.is_none()
            {
                // Under the current key already, or under a destroyed one (erased).
                continue;
            }
            // Its key was found above: a line that does not open under it was altered
            // or moved, and is left for the reader to report rather than stop the pass.
            match keyring.open(&mut entry, place).await {
                Err(Error::Encryption { .. }) => {
                    damaged += 1;
                    continue;
                }
                opened => opened?,
            }
            keyring.seal(&mut entry, place).await?;
            let new = serde_json::to_string(&entry)
                .map_err(|e| Error::encode("a sealed transcript line", e))?;
            match new.len() <= line.len() {
                true => {
                    let new = format!("{new:width$}", width = line.len());
                    edits.push(LineEdit::new(index, line, new)?);
                }
                false => left += 1,
            }
        }
        let asked = edits.len();
        let done = match asked {
            0 => 0,
            _ => self.inner.overwrite_lines(agent, name, edits).await?,
        };
        Ok(DataKeyRotation {
            lines: done,
            left: left + asked - done,
            damaged,
            ..DataKeyRotation::default()
        })
    }
}

/// Whole transcripts as they read opened: what erasing and exporting a person edit
/// and copy. A line edited is sealed again, as long as it was.
#[async_trait]
impl<T: TranscriptExport + ?Sized> TranscriptExport for EncryptedTranscripts<T> {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        self.inner.transcript_names(agent).await
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        let Some(lines) = self.inner.export_lines(agent, name).await? else {
            return Ok(None);
        };
        let mut keyring = self.keyring();
        let mut opened = Vec::with_capacity(lines.len());
        for (index, line) in lines.into_iter().enumerate() {
            opened.push(
                keyring
                    .open_line_or_as_stored(line, (agent, name), index)
                    .await?,
            );
        }
        Ok(Some(opened))
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        let session_id = session_id_of_name(name);
        let mut keyring = self.keyring();
        let mut sealed = Vec::with_capacity(lines.len());
        for line in lines {
            sealed.push(keyring.seal_line(line, (agent, &session_id)).await?);
        }
        self.inner.import_lines(agent, name, sealed).await
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<LineEdit>,
    ) -> Result<usize> {
        let Some(stored) = self.inner.export_lines(agent, name).await? else {
            return Ok(0);
        };
        let session_id = session_id_of_name(name);
        let mut keyring = self.keyring();
        let mut sealed_edits = Vec::with_capacity(edits.len());
        for edit in edits {
            let Some(old) = stored.get(edit.index) else {
                continue;
            };
            let opened = keyring
                .open_line_or_as_stored(old.clone(), (agent, name), edit.index)
                .await?;
            if opened != edit.old {
                // The line changed since it was judged: left alone, as the store does.
                continue;
            }
            if opened == *old {
                // Never sealed (the header, an entry with nothing secret): as it is.
                sealed_edits.push(LineEdit::new(edit.index, old.clone(), edit.new)?);
                continue;
            }
            let mut entry =
                crate::store::json_text::from_slice::<TranscriptEntry>(edit.new.as_bytes())
                    .map_err(|_| Error::Encryption {
                        problem: format!(
                            "an edit of line {} of {name} is not an entry",
                            edit.index
                        ),
                    })?;
            keyring.seal(&mut entry, (agent, &session_id)).await?;
            let new = serde_json::to_string(&entry)
                .map_err(|e| Error::encode("a sealed transcript line", e))?;
            // An edit is at most as long as its line (padded with spaces), and so is
            // its sealed value; one that still does not fit is the erased marker.
            let new = match new.len() <= old.len() {
                true => format!("{new:width$}", width = old.len()),
                false => match serde_json::to_value(&entry) {
                    Ok(serde_json::Value::Object(map)) => {
                        crate::privacy::redact::erased_line(&map, old.len())
                    }
                    _ => " ".repeat(old.len()),
                },
            };
            sealed_edits.push(LineEdit::new(edit.index, old.clone(), new)?);
        }
        self.inner.overwrite_lines(agent, name, sealed_edits).await
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        self.inner.remove_named(agent, name).await
    }
}
