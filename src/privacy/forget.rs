//! Erasing one person from everything the crate keeps:
//! [`SessionManager::forget_person`].

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::redact::{
    direct_peer, others_chatter_in, without_chatter_of, LineFate, PersonIds, TranscriptRedaction,
};
use super::Privacy;
use crate::error::{DeleteRefusal, Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::identity::Identifier;
use crate::manager::SessionManager;
use crate::store::{ListFilter, SessionStoreExt, StatusFilter, StoredSession};
use crate::transcript::lines::session_id_of_name;
use crate::transcript::search::{LoggedMessage, SearchFilter, SearchIndex};
use crate::transcript::{Direction, LineEdit, TranscriptExport};
use crate::SessionStatus;

/// How long an erase waits for a turn running in one of the person's sessions.
const RUNNING_WAIT: Duration = Duration::from_secs(30);

/// Whom [`SessionManager::forget_person`] erases.
///
/// ```
/// use agent_sessions::privacy::PersonRef;
///
/// let by_id = PersonRef::person("jane");
/// let by_number = PersonRef::sender("sms", "+15550100");
/// assert_ne!(by_id, by_number);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PersonRef {
    /// A person id (`jane`, `staff:17`, `+15550100`): with the canonical person the
    /// key builder's identity links give and every id linked to it.
    Person(String),
    /// A sender on a channel (`telegram`, `123456789`): the id, its channel-scoped
    /// form (`telegram:123456789`), and the person the identity links make of it.
    Sender {
        /// The channel.
        channel: String,
        /// The sender's id or number on it.
        id: String,
    },
    /// What a channel knows of someone, resolved by the configured
    /// [`IdentityResolver`](crate::identity::IdentityResolver) to a person.
    Identified {
        /// The channel.
        channel: String,
        /// What it knows.
        identifier: Identifier,
    },
}

impl PersonRef {
    /// A person by id.
    pub fn person(id: impl Into<String>) -> Self {
        PersonRef::Person(id.into())
    }

    /// A sender on a channel.
    pub fn sender(channel: impl Into<String>, id: impl Into<String>) -> Self {
        PersonRef::Sender {
            channel: channel.into(),
            id: id.into(),
        }
    }
}

/// How [`SessionManager::forget_person_with`] erases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForgetOptions {
    /// Also rewrite the database, so deleted rows leave its files: SQLite `VACUUM`,
    /// PostgreSQL `VACUUM FULL` of the crate's tables (each table locked while it is
    /// rewritten). Without it, SQLite still zeroes what is deleted (`secure_delete`)
    /// and resets its write-ahead log; PostgreSQL keeps dead row versions until its
    /// next vacuum.
    pub vacuum: bool,
}

impl ForgetOptions {
    /// The defaults: no vacuum.
    pub fn new() -> Self {
        ForgetOptions::default()
    }

    /// With a vacuum (see [`vacuum`](Self::vacuum)).
    pub fn vacuum(mut self) -> Self {
        self.vacuum = true;
        self
    }
}

/// What an erase removed, by kind: counts only, never an id or a word of the data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ForgetReport {
    /// The person's current sessions removed.
    pub sessions: usize,
    /// Their closed sessions removed (sessions replaced under their keys).
    pub closed_sessions: usize,
    /// Transcripts removed, archived copies (`.reset.`, `.deleted.`) included.
    pub transcripts: usize,
    /// Lines overwritten in transcripts that stay (group sessions, others' sessions).
    pub redacted_lines: usize,
    /// Sessions of others (groups) that named them and were edited.
    pub edited_sessions: usize,
    /// Messages removed from the search index (or replaced by a masked copy).
    pub search_messages: usize,
    /// Group-history entries removed or masked.
    pub chatter_entries: usize,
    /// System events dropped from their sessions' queues.
    pub system_events: usize,
    /// Workspaces removed.
    pub workspaces: usize,
    /// Copies removed or rewritten (backups, orphaned and quarantined files, database
    /// pages and logs).
    pub copies: usize,
    /// Names in the place of a transcript or a workspace that are not a regular file or
    /// a directory (a link or a FIFO planted there): neither followed nor removed.
    /// `doctor` reports them; remove them and erase again.
    pub skipped: usize,
    /// Ids the key builder's identity links still tie to them. The links are the host's
    /// configuration (OpenClaw's `identityLinks`), which the crate does not write:
    /// remove them there.
    pub identity_links: usize,
    /// Data keys destroyed (feature `encryption`): the person's, and those of the
    /// sessions erased with them. What they sealed can no longer be read anywhere — a
    /// backup or any other copy the erase did not rewrite.
    pub data_keys: usize,
}

impl SessionManager {
    /// Erases `person` from everything this manager reaches (see
    /// [`forget_person_with`](Self::forget_person_with)), without a vacuum.
    pub async fn forget_person(&self, person: &PersonRef) -> Result<ForgetReport> {
        self.forget_person_with(person, ForgetOptions::default())
            .await
    }

    /// Erases `person` from everything this manager reaches, for an erasure request:
    ///
    /// - their sessions, current and closed, with every transcript of them (archived
    ///   `.reset.` and `.deleted.` copies too), their workspaces (summaries and files),
    ///   their queued system events;
    /// - in shared transcripts (groups), the lines they wrote become erased markers of
    ///   the same length, the chatter of theirs shown to the model in others' lines is
    ///   cut, their ids are masked in what others wrote, and a compaction summary
    ///   written after a line of theirs goes; others' lines that do not name them stay
    ///   byte for byte;
    /// - the group chatter they wrote, their messages in the search index (postings,
    ///   vectors), their ids in group sessions' participants;
    /// - the copies the store keeps (`sessions.json.bak`, orphaned temporary files,
    ///   corrupt and quarantined files; a database's freed pages and log).
    ///
    /// Safe to run again: killed midway, the next run finishes the job (the sessions,
    /// which point at everything else, go last). A turn running in one of their
    /// sessions is waited for (up to 30 seconds, then
    /// [`Error::DeleteRefused`] with [`DeleteRefusal::Running`]); a message of theirs
    /// after the erase starts a new, empty session. Reaches the transcripts and search
    /// index of the backend given to [`SessionManagerBuilder::backend`] (set by
    /// [`SessionManager::connect`]); a manager with transcripts but no backend is
    /// [`Error::NotConfigured`]. The report counts what went, and holds no personal
    /// data. What it cannot reach (the host's logs, a model provider, backups made
    /// outside the crate) is listed in the crate's `docs/personal-data.md`.
    ///
    /// ```
    /// use agent_sessions::privacy::PersonRef;
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("json:{}", dir.path().display());
    /// let manager = SessionManager::connect(&url).await?.build()?;
    /// manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// manager.resolve(&InboundMessage::direct("telegram", "43", "hello")).await?;
    ///
    /// let report = manager.forget_person(&PersonRef::sender("telegram", "42")).await?;
    /// assert_eq!(report.sessions, 1);
    /// assert_eq!(manager.list(&ListFilter::new()).await?.len(), 1, "the other stays");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`SessionManagerBuilder::backend`]: crate::manager::SessionManagerBuilder::backend
    pub async fn forget_person_with(
        &self,
        person: &PersonRef,
        options: ForgetOptions,
    ) -> Result<ForgetReport> {
        Privacy(self).forget(person, options).await
    }
}

impl Privacy<'_> {
    /// See [`SessionManager::forget_person_with`].
    async fn forget(&self, person: &PersonRef, options: ForgetOptions) -> Result<ForgetReport> {
        let transcripts = self.exportable_transcripts()?;
        let mut report = ForgetReport::default();
        let ids = self.person_ids(person).await?;
        let (current, closed) = self.sessions_of(&ids).await?;
        // Without the keys, an erase could not destroy theirs: what backups hold of
        // them would still open.
        self.refuse_sealed_without_keys(current.iter().chain(&closed), "erase")?;
        let ids = widen(ids, current.iter().chain(&closed));
        // From here on, a message of theirs starts afresh: nothing read before the erase
        // is written back into what it erases.
        let current = self.fence(current, &ids).await?;
        let erased: BTreeSet<String> = current
            .iter()
            .chain(&closed)
            .map(|s| s.entry.session_id.clone())
            .filter(|id| !id.is_empty())
            .collect();
        // Their sessions' keys go first: a run that dies after removing the sessions
        // and is run again no longer finds them, nor so their keys. Their own keys go
        // last: the lines of theirs that carry others' chatter are read to keep it.
        #[cfg(feature = "encryption")]
        if let Some(keys) = &self.seams.data_keys {
            report.data_keys += destroy_keys(&**keys, None, current.iter().chain(&closed)).await?;
        }

        // The shared transcripts are judged first and edited after the search index:
        // the records of whose chatter a line carries go with the edit, and a run that
        // dies in between must still find them to mask the index's copies.
        let plan = match &transcripts {
            Some(transcripts) => {
                self.plan_transcripts(&**transcripts, &ids, &erased, true)
                    .await?
            }
            None => TranscriptPlan::default(),
        };
        if let Some(index) = self.backend_index().await? {
            report.search_messages += self
                .erase_search(&*index, &ids, &erased, &plan.touched, &plan.labels)
                .await?;
            // Saved before the transcripts lose what the index's copies are masked by.
            index.flush().await?;
        }
        if let Some(transcripts) = &transcripts {
            let touched = plan.touched.clone();
            let edited = self.apply_plan(&**transcripts, plan, &mut report).await;
            // What this manager kept of the edited lines goes, whatever happened; other
            // managers learn it from the sessions' entries.
            self.histories.clear();
            edited?;
            self.count_edits(&touched).await?;
        }
        report.chatter_entries += self
            .seams
            .history
            .edit_entries(&|group, entry| ids.history_edit(group, entry))
            .await?;
        for session in &current {
            report.system_events += self.system_events.drain(&session.key).await?.len();
        }
        let mut skipped = ForgetReport::default();
        report.workspaces += self
            .erase_workspaces(current.iter().chain(&closed), &mut skipped)
            .await?;
        report.skipped += skipped.skipped;
        report.edited_sessions += self.redact_shared_sessions(&ids).await?;

        // The sessions point at everything above: they go last, so a run that dies
        // before this finds them again.
        let closed_ids: Vec<String> = closed.iter().map(|s| s.entry.session_id.clone()).collect();
        report.closed_sessions += match self.seams.store.as_erase() {
            Some(store) => store.remove_closed(&closed_ids).await?,
            None => 0,
        };
        for session in &current {
            if self.remove_fenced(session, &ids).await? {
                report.sessions += 1;
            }
        }
        // A fenced session a message of theirs replaced meanwhile was kept closed by the
        // store (the new session, a conversation after the erase, stays).
        let erased_ids: Vec<String> = erased.iter().cloned().collect();
        report.sessions += match self.seams.store.as_erase() {
            Some(store) => store.remove_closed(&erased_ids).await?,
            None => 0,
        };
        // A turn that slipped in before the sessions went appended to a transcript
        // already erased: erased again (a new session after this one starts afresh).
        if let Some(transcripts) = &transcripts {
            let plan = self
                .plan_transcripts(&**transcripts, &ids, &erased, false)
                .await?;
            let mut again = ForgetReport::default();
            let edited = self.apply_plan(&**transcripts, plan, &mut again).await;
            self.histories.clear();
            edited?;
        }
        if let Some(index) = self.backend_index().await? {
            self.erase_search(&*index, &ids, &erased, &BTreeSet::new(), &[])
                .await?;
            index.flush().await?;
        }
        report.identity_links = ids
            .all()
            .map(|id| self.seams.keys.linked_ids(id).len())
            .sum();
        let mut needles = ids.needles();
        needles.extend(erased.iter().cloned());
        report.copies += match self.seams.store.as_erase() {
            Some(store) => store.erase_copies(&needles, options.vacuum).await?,
            None => 0,
        };
        #[cfg(feature = "encryption")]
        if let Some(keys) = &self.seams.data_keys {
            report.data_keys +=
                destroy_keys(&**keys, Some(&ids), current.iter().chain(&closed)).await?;
        }
        tracing::info!(
            sessions = report.sessions,
            closed = report.closed_sessions,
            transcripts = report.transcripts,
            redacted_lines = report.redacted_lines,
            "a person was erased"
        );
        Ok(report)
    }

    /// The transcripts as a store that lists and edits them whole: the backend's, or
    /// none when the manager keeps no transcripts.
    pub(crate) fn exportable_transcripts(
        &self,
    ) -> Result<Option<std::sync::Arc<dyn TranscriptExport>>> {
        match (&self.seams.backend, &self.seams.transcripts) {
            (Some(backend), _) => {
                let transcripts = backend.transcripts().clone();
                #[cfg(feature = "encryption")]
                let transcripts = match &self.seams.data_keys {
                    Some(keys) => std::sync::Arc::new(
                        crate::privacy::encryption::EncryptedTranscripts::new(
                            transcripts,
                            keys.clone(),
                        ),
                    ),
                    None => transcripts,
                };
                Ok(Some(match &self.settings.isolated_to {
                    Some(agent) => std::sync::Arc::new(
                        crate::identity::isolation::AgentScoped::new(agent.clone(), transcripts),
                    ),
                    None => transcripts,
                }))
            }
            (None, None) => Ok(None),
            (None, Some(_)) => Err(Error::NotConfigured {
                what: "the backend the transcripts are in (SessionManagerBuilder::backend or SessionManager::connect)",
            }),
        }
    }

    /// The ids `person` is known by.
    pub(crate) async fn person_ids(&self, person: &PersonRef) -> Result<PersonIds> {
        let mut ids = PersonIds::default();
        let add_with_links = |ids: &mut PersonIds, id: &str| {
            ids.add(id);
            if let Some(canonical) = self.seams.keys.canonical_person(id) {
                ids.add(&canonical);
            }
        };
        let blank = || Error::InvalidOption {
            option: "PersonRef",
            problem: "the person id or sender id is blank",
        };
        match person {
            PersonRef::Person(id) => {
                if id.trim().is_empty() {
                    return Err(blank());
                }
                add_with_links(&mut ids, id);
            }
            PersonRef::Sender { channel, id } => {
                if id.trim().is_empty() {
                    return Err(blank());
                }
                // The id is theirs on this channel only (`42` on WhatsApp is someone
                // else); a person it is linked to is theirs everywhere.
                if let Some(canonical) = self.seams.keys.canonical_person(id) {
                    ids.add(&canonical);
                }
                add_with_links(
                    &mut ids,
                    &format!("{}:{}", channel.trim().to_lowercase(), id.trim()),
                );
            }
            PersonRef::Identified {
                channel,
                identifier,
            } => {
                let found = self.identify(channel, identifier).await?;
                add_with_links(&mut ids, &found.id);
                for id in [&found.phone, &found.email].into_iter().flatten() {
                    ids.add(id);
                }
            }
        }
        let canonical: Vec<String> = ids
            .all()
            .filter(|id| !self.seams.keys.linked_ids(id).is_empty())
            .map(str::to_owned)
            .collect();
        let linked: Vec<String> = ids
            .all()
            .flat_map(|id| self.seams.keys.linked_ids(id))
            .collect();
        for id in canonical {
            ids.add_linked(&id);
        }
        for id in linked {
            ids.add(&id);
        }
        Ok(ids)
    }

    /// The person's sessions: current ones and closed ones (replaced under their
    /// keys), across every agent this manager serves.
    pub(crate) async fn sessions_of(
        &self,
        ids: &PersonIds,
    ) -> Result<(Vec<StoredSession>, Vec<StoredSession>)> {
        let every = |status| ListFilter {
            status,
            ..ListFilter::new()
        };
        let current: Vec<StoredSession> = self
            .seams
            .store
            .list(&every(StatusFilter::Current))
            .await?
            .into_iter()
            .filter(|s| ids.owns(&s.key, &s.entry))
            .collect();
        let live: BTreeSet<&str> = current
            .iter()
            .map(|s| s.entry.session_id.as_str())
            .collect();
        let closed: Vec<StoredSession> = self
            .seams
            .store
            .list(&every(StatusFilter::Any))
            .await?
            .into_iter()
            .filter(|s| ids.owns(&s.key, &s.entry))
            .filter(|s| !live.contains(s.entry.session_id.as_str()))
            .collect();
        Ok((current, closed))
    }

    /// Fences the person's current sessions off: each, once no turn runs in it, is
    /// closed (as [`Session::close`](crate::Session::close) closes a session), so a
    /// message of theirs from now on starts a new session instead of writing into what
    /// is being erased. A turn running in one is waited for (up to [`RUNNING_WAIT`]).
    /// Closing adds no closed session to the key (a new session id would push the
    /// key's oldest closed session out, and with it what an interrupted erase must find
    /// again). Returns the sessions as fenced.
    async fn fence(
        &self,
        current: Vec<StoredSession>,
        ids: &PersonIds,
    ) -> Result<Vec<StoredSession>> {
        let started = std::time::Instant::now();
        let mut fenced = Vec::new();
        for session in current {
            let mut judged = Some(session);
            while let Some(session) = judged.take().filter(|s| ids.owns(&s.key, &s.entry)) {
                if session.entry.status == Some(SessionStatus::Closed) {
                    fenced.push(session);
                    break;
                }
                if crate::exactly_once::holders::runs(&session.entry, self.seams.clock.now_millis())
                {
                    if started.elapsed() > RUNNING_WAIT {
                        return Err(Error::DeleteRefused {
                            key: session.key,
                            reason: DeleteRefusal::Running,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    judged = self.seams.store.get(&session.key).await?;
                    continue;
                }
                let mut closed = session.entry.clone();
                closed.status = Some(SessionStatus::Closed);
                closed.closed_at = Some(self.seams.clock.now_millis());
                match self
                    .seams
                    .store
                    .compare_and_set(&session.key, Some(session.revision), Some(closed))
                    .await
                {
                    Ok(Some(stored)) => fenced.push(stored),
                    Ok(None) => {}
                    Err(Error::Conflict { .. }) => {
                        judged = self.seams.store.get(&session.key).await?;
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(fenced)
    }

    /// What to do to the transcripts: those of the sessions `erased` (live and
    /// archived) go, and (with `redact_shared`) the person is redacted from every other
    /// one.
    async fn plan_transcripts(
        &self,
        transcripts: &dyn TranscriptExport,
        ids: &PersonIds,
        erased: &BTreeSet<String>,
        redact_shared: bool,
    ) -> Result<TranscriptPlan> {
        let mut plan = TranscriptPlan::default();
        for (agent, name) in transcripts
            .transcript_names(self.settings.isolated_to.as_ref())
            .await?
        {
            if erased.contains(&session_id_of_name(&name)) {
                plan.remove.push((agent, name));
                continue;
            }
            if !redact_shared {
                continue;
            }
            let lines = match transcripts.export_lines(&agent, &name).await {
                Ok(Some(lines)) => lines,
                Ok(None) => continue,
                // Not a transcript (a link, a FIFO planted where one belongs): not
                // followed, left for `doctor`, and counted.
                Err(Error::NotAFile { path, .. }) => {
                    tracing::warn!(path = %path.display(), "not a regular file: left as it is");
                    plan.skipped += 1;
                    continue;
                }
                Err(error) => return Err(error),
            };
            // A transcript of a conversation of theirs the store no longer lists (a
            // deleted session's archive, one pushed out of its key's closed sessions)
            // is theirs whole, as their sessions' transcripts are.
            if theirs_whole(ids, &lines) {
                plan.remove.push((agent, name));
                continue;
            }
            let mut redaction = TranscriptRedaction::new(ids);
            let mut edits = Vec::new();
            for (index, line) in lines.into_iter().enumerate() {
                if let LineFate::Replace(new) = redaction.judge(index, &line) {
                    edits.push(LineEdit::new(index, line, new)?);
                }
            }
            plan.labels.extend(redaction.labels());
            if !edits.is_empty() {
                plan.touched.insert(session_id_of_name(&name));
                plan.edit.push((agent, name, edits));
            }
        }
        Ok(plan)
    }

    /// Carries out `plan`.
    async fn apply_plan(
        &self,
        transcripts: &dyn TranscriptExport,
        plan: TranscriptPlan,
        report: &mut ForgetReport,
    ) -> Result<()> {
        report.skipped += plan.skipped;
        for (agent, name) in plan.remove {
            match transcripts.remove_named(&agent, &name).await {
                Ok(removed) => report.transcripts += usize::from(removed),
                Err(Error::NotAFile { path, .. }) => {
                    tracing::warn!(path = %path.display(), "not a regular file: left as it is");
                    report.skipped += 1;
                }
                Err(error) => return Err(error),
            }
        }
        for (agent, name, edits) in plan.edit {
            report.redacted_lines += transcripts.overwrite_lines(&agent, &name, edits).await?;
        }
        Ok(())
    }

    /// Makes the search index say what the transcripts say after the erase: the
    /// messages of the sessions `erased` and the person's messages go, and with them the
    /// agent's replies to the person in the sessions they shared (`touched`); a message
    /// of theirs that carried others' chatter keeps that chatter; others' messages that
    /// name them (or carry their chatter, shown under `labels`) are replaced by masked
    /// copies.
    async fn erase_search(
        &self,
        index: &dyn SearchIndex,
        ids: &PersonIds,
        erased: &BTreeSet<String>,
        touched: &BTreeSet<String>,
        labels: &[String],
    ) -> Result<usize> {
        let agent = self.settings.isolated_to.as_ref().map(AgentId::to_string);
        let ours = |message: &LoggedMessage| agent.as_ref().is_none_or(|a| *a == message.agent);
        let theirs = |message: &LoggedMessage| {
            erased.contains(&message.session_id)
                || message.person_id.as_deref().is_some_and(|p| {
                    ids.wrote(
                        message.session_key.as_deref(),
                        message.channel.as_deref(),
                        p,
                    )
                })
        };
        let mut seen = BTreeSet::new();
        let mut gone = Vec::new();
        let mut masked = Vec::new();
        // Every other message: kept, or masked where it names them.
        let mut judge = |message: LoggedMessage, answering: &mut bool| {
            let inbound = message.direction == Some(Direction::Inbound);
            let reply = !inbound && *answering;
            if inbound {
                *answering = theirs(&message);
            }
            if theirs(&message) || reply {
                gone.push(message.id.clone());
                // Others' chatter shown with the person's message stays, as in its line.
                if let Some(text) = others_chatter_in(ids, &message.text, labels) {
                    if !erased.contains(&message.session_id) {
                        masked.push(LoggedMessage {
                            text,
                            person_id: None,
                            embedding: None,
                            category: None,
                            ..message
                        });
                    }
                }
                return;
            }
            let text = ids.mask(&without_chatter_of(&message.text, labels));
            if text != message.text {
                gone.push(message.id.clone());
                masked.push(LoggedMessage {
                    text,
                    embedding: None,
                    ..message
                });
            }
        };
        // The index is made from the transcripts: only the sessions erased, and those
        // whose transcripts name the person, can hold their messages (read one session
        // at a time, in the transcript's order, so a reply follows what it answers),
        // and messages filed under their ids.
        for session in erased.iter().chain(touched) {
            let mut messages: Vec<LoggedMessage> = index
                .messages(&SearchFilter::new().session(session))
                .await?
                .into_iter()
                .filter(|message| ours(message) && seen.insert(message.id.clone()))
                .collect();
            messages.sort_by_key(|message| offset_in_id(&message.id));
            let mut answering = false;
            for message in messages {
                judge(message, &mut answering);
            }
        }
        let people = ids.all().flat_map(|id| {
            // Messages file a sender by their bare id (`42`), on their channel.
            let bare = id.rsplit_once(':').map(|(_, bare)| bare.to_owned());
            std::iter::once(id.to_owned()).chain(bare)
        });
        for person in people {
            for message in index.messages(&SearchFilter::new().person(person)).await? {
                if ours(&message) && seen.insert(message.id.clone()) {
                    judge(message, &mut false);
                }
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        let removed = index.remove(&gone).await?;
        index.add(masked).await?;
        Ok(removed)
    }

    /// Removes the workspaces of `sessions`.
    async fn erase_workspaces<'s>(
        &self,
        sessions: impl Iterator<Item = &'s StoredSession>,
        report: &mut ForgetReport,
    ) -> Result<usize> {
        let Some(workspaces) = &self.seams.workspaces else {
            return Ok(0);
        };
        let ids: BTreeSet<uuid::Uuid> = sessions
            .filter_map(|s| s.entry.workspace_id.as_deref())
            .filter_map(|id| uuid::Uuid::parse_str(id).ok())
            .collect();
        let mut removed = 0;
        for id in ids {
            let workspaces = workspaces.clone();
            let root = workspaces.root().to_path_buf();
            match crate::store::fs::blocking(&root, move || workspaces.remove(id)).await {
                Ok(gone) => removed += usize::from(gone),
                // A link where the folder belongs: neither followed nor removed.
                Err(Error::NotAFile { path, .. }) => {
                    tracing::warn!(path = %path.display(), "not a directory: left as it is");
                    report.skipped += 1;
                }
                Err(error) => return Err(error),
            }
        }
        Ok(removed)
    }

    /// Takes the person out of the sessions of others that name them (a group's
    /// participants): how many were edited.
    async fn redact_shared_sessions(&self, ids: &PersonIds) -> Result<usize> {
        let all = ListFilter {
            status: StatusFilter::Current,
            ..ListFilter::new()
        };
        let current: Vec<StoredSession> = self.seams.store.list(&all).await?;
        let live: BTreeSet<&str> = current
            .iter()
            .map(|s| s.entry.session_id.as_str())
            .collect();
        // Closed sessions of others (a group's earlier sessions) are replaced whole.
        let every = ListFilter {
            status: StatusFilter::Any,
            ..ListFilter::new()
        };
        let closed: Vec<StoredSession> = self
            .seams
            .store
            .list(&every)
            .await?
            .into_iter()
            .filter(|s| !live.contains(s.entry.session_id.as_str()))
            .filter(|s| !ids.owns(&s.key, &s.entry))
            .filter_map(|s| {
                let entry = ids.redact_entry(&s.entry)?;
                Some(StoredSession { entry, ..s })
            })
            .collect();
        let mut edited = match self.seams.store.as_erase() {
            Some(store) => store.replace_closed(&closed).await?,
            None => 0,
        };
        for session in self.seams.store.list(&all).await? {
            if ids.owns(&session.key, &session.entry) || ids.redact_entry(&session.entry).is_none()
            {
                continue;
            }
            let changed = self
                .seams
                .store
                .update(&session.key, |slot| {
                    let Some(entry) = slot.as_mut() else {
                        return false;
                    };
                    match ids.redact_entry(entry) {
                        Some(redacted) => {
                            *entry = redacted;
                            true
                        }
                        None => false,
                    }
                })
                .await?;
            edited += usize::from(changed);
        }
        Ok(edited)
    }

    /// Counts an edit in place in the entry of each current session whose transcript
    /// is among `touched` (by session id): every manager that keeps its conversation
    /// between turns reads it again.
    async fn count_edits(&self, touched: &BTreeSet<String>) -> Result<()> {
        if touched.is_empty() {
            return Ok(());
        }
        let current = ListFilter {
            status: StatusFilter::Current,
            ..ListFilter::new()
        };
        for session in self.seams.store.list(&current).await? {
            if !touched.contains(&session.entry.session_id) {
                continue;
            }
            self.seams
                .store
                .update(&session.key, |slot| {
                    let Some(entry) = slot
                        .as_mut()
                        .filter(|entry| touched.contains(&entry.session_id))
                    else {
                        return false;
                    };
                    entry.transcript_edits = Some(entry.transcript_edits.unwrap_or(0) + 1);
                    true
                })
                .await?;
        }
        Ok(())
    }

    /// Removes the fenced session `session`, unless a new session took its key; one
    /// changed otherwise meanwhile is read again.
    async fn remove_fenced(&self, session: &StoredSession, ids: &PersonIds) -> Result<bool> {
        let mut revision = Some(session.revision);
        for _ in 0..5 {
            match self
                .seams
                .store
                .compare_and_set(&session.key, revision, None)
                .await
            {
                Ok(_) => return Ok(true),
                Err(Error::Conflict { .. }) => match self.seams.store.get(&session.key).await? {
                    Some(now)
                        if now.entry.session_id == session.entry.session_id
                            && ids.owns(&now.key, &now.entry) =>
                    {
                        revision = Some(now.revision);
                    }
                    _ => return Ok(false),
                },
                Err(error) => return Err(error),
            }
        }
        Err(Error::DeleteRefused {
            key: session.key.clone(),
            reason: DeleteRefusal::Running,
        })
    }
}

/// Whether a transcript, by its lines, is a conversation of the person's own: not a
/// group's or a channel's, and either under a direct key of theirs or with every
/// message someone wrote in it written by them.
fn theirs_whole(ids: &PersonIds, lines: &[String]) -> bool {
    let entries: Vec<serde_json::Map<String, serde_json::Value>> = lines
        .iter()
        .filter_map(|line| match serde_json::from_str(line) {
            Ok(serde_json::Value::Object(entry)) => Some(entry),
            _ => None,
        })
        .collect();
    let key = entries
        .iter()
        .find_map(|entry| SessionKey::parse(entry.get("log")?.get("sessionKey")?.as_str()?).ok());
    let Some(key) = key else {
        return false;
    };
    if key.peer_kind().is_some_and(|kind| kind.is_group()) {
        return false;
    }
    if ids.owns(&key, &crate::store::entry::SessionEntry::default()) {
        return true;
    }
    let mut writers = entries.iter().filter(|entry| {
        entry
            .get("log")
            .and_then(|log| log.get("personId").or_else(|| log.get("rawPersonId")))
            .is_some()
    });
    let mut any = false;
    writers.all(|entry| {
        any = true;
        crate::privacy::redact::written_by(ids, entry)
    }) && any
}

/// The transcripts an erase removes and edits, and the labels the person's chatter
/// was shown under in them.
#[derive(Default)]
struct TranscriptPlan {
    remove: Vec<(AgentId, String)>,
    edit: Vec<(AgentId, String, Vec<LineEdit>)>,
    labels: Vec<String>,
    /// The sessions of the transcripts edited.
    touched: BTreeSet<String>,
    /// Names that are not regular files, left alone.
    skipped: usize,
}

/// `ids` with the ids the person's sessions recorded for them.
fn widen<'s>(
    mut ids: PersonIds,
    sessions: impl Iterator<Item = &'s StoredSession> + Clone,
) -> PersonIds {
    let keys: Vec<SessionKey> = sessions.clone().map(|s| s.key.clone()).collect();
    let found: Vec<String> = sessions
        .flat_map(|s| {
            let mut found: Vec<String> = s
                .entry
                .person_id
                .iter()
                .chain(s.entry.raw_person_ids.iter().flatten())
                .cloned()
                .collect();
            // The peer a direct key names (`…:telegram:direct:<peer>`), on its channel.
            if let Some((channel, peer)) = direct_peer(&s.key) {
                found.push(match channel {
                    Some(channel) => format!("{channel}:{peer}"),
                    None => peer,
                });
            }
            found
        })
        .collect();
    for id in found {
        ids.add(&id);
    }
    for session in keys {
        ids.add_key(&session);
    }
    ids
}

/// Where in its transcript an index message starts: its id ends with the offset.
fn offset_in_id(id: &str) -> u64 {
    id.rsplit('/')
        .next()
        .and_then(|offset| offset.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Destroys the data keys of `sessions` (by session key and by session id) and of the
/// person known by `ids`; how many there were.
#[cfg(feature = "encryption")]
async fn destroy_keys(
    keys: &dyn crate::privacy::encryption::KeyProvider,
    ids: Option<&PersonIds>,
    sessions: impl Iterator<Item = &StoredSession>,
) -> Result<usize> {
    use crate::privacy::encryption::KeyOwner;
    let mut owners: Vec<KeyOwner> = ids
        .into_iter()
        .flat_map(|ids| ids.all())
        .map(|id| KeyOwner::Person(id.to_owned()))
        .collect();
    for session in sessions {
        owners.push(KeyOwner::SessionKey(session.key.as_str().to_owned()));
        if let (Some(agent), false) = (session.key.agent_id(), session.entry.session_id.is_empty())
        {
            owners.push(KeyOwner::Session {
                agent: AgentId::new(agent)?,
                session_id: session.entry.session_id.clone(),
            });
        }
    }
    let mut destroyed = 0;
    for owner in owners {
        if keys.destroy(&owner).await? {
            destroyed += 1;
        }
    }
    Ok(destroyed)
}
