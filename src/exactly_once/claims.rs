//! Group chatter shown exactly once: a turn claims the lines, its inbound transcript
//! line carries them, and that line settles the claim (see [`ChatterClaim`]).
//!
//! A claim names its holder (the turn, see [`holders`]) and its witness, the transcript
//! its line goes to. A later turn that finds the claim outstanding and its holder gone
//! settles it if its line is in the witness, else takes its lines over.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::holders::{self, Hold, Writing};
use crate::error::Result;
use crate::freshness::clock::to_millis;
use crate::identity::key::AgentId;
use crate::inbound::chatter::{ChatterClaim, ChatterEntry};
use crate::manager::SessionManager;
use crate::transcript::{Offset, SessionEvent, TranscriptEntry, TranscriptRef, TranscriptStore};

/// A claim of this process, live until dropped.
#[derive(Debug)]
pub(crate) struct LiveClaim {
    claim: ChatterClaim,
    _hold: Hold,
}

impl LiveClaim {
    fn new(witness: &TranscriptRef, at: u64) -> Self {
        let id = uuid::Uuid::new_v4().to_string();
        let hold = Hold::new(id.clone());
        LiveClaim {
            claim: ChatterClaim {
                id,
                holder: hold.holder().to_owned(),
                witness: Witness::of(witness),
                at,
            },
            _hold: hold,
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.claim.id
    }
}

/// Where a claim's line goes, as a claim stores it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Witness {
    agent: String,
    session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session_file: Option<String>,
}

impl Witness {
    fn of(transcript: &TranscriptRef) -> String {
        serde_json::to_string(&Witness {
            agent: transcript.agent.to_string(),
            session_id: transcript.session_id.clone(),
            topic: transcript.topic.clone(),
            session_file: transcript.session_file.clone(),
        })
        .unwrap_or_default()
    }

    fn parse(text: &str) -> Option<TranscriptRef> {
        let witness: Witness = serde_json::from_str(text).ok()?;
        Some(TranscriptRef {
            agent: AgentId::new(&witness.agent).ok()?,
            session_id: witness.session_id,
            topic: witness.topic,
            session_file: witness.session_file,
        })
    }
}

/// Whether `transcript` holds the line `line_id` (a claim's id is its line's
/// message-log id). A witness that cannot be read says no.
async fn logged(transcripts: &dyn TranscriptStore, witness: &str, line_id: &str) -> Result<bool> {
    let Some(transcript) = Witness::parse(witness) else {
        return Ok(false);
    };
    has_line(transcripts, &transcript, |entry| {
        entry.log.as_ref().and_then(|log| log.message_id.as_deref()) == Some(line_id)
    })
    .await
}

/// Whether `transcript` — or its archive, when its session was reset or deleted since
/// — has a line that `is_it`.
pub(crate) async fn has_line(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    is_it: impl Fn(&TranscriptEntry) -> bool,
) -> Result<bool> {
    Ok(find_line(transcripts, transcript, is_it).await?.is_some())
}

/// The first line of `transcript` — or of its archive, when its session was reset or
/// deleted since — that `is_it`, read a chunk at a time.
pub(crate) async fn find_line(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    is_it: impl Fn(&TranscriptEntry) -> bool,
) -> Result<Option<SessionEvent>> {
    scan(transcripts, transcript, true, is_it).await
}

/// The first line of `transcript` itself (never of an archive) that `is_it`, read a
/// chunk at a time.
pub(crate) async fn find_own_line(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    is_it: impl Fn(&TranscriptEntry) -> bool,
) -> Result<Option<SessionEvent>> {
    scan(transcripts, transcript, false, is_it).await
}

async fn scan(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    archives: bool,
    is_it: impl Fn(&TranscriptEntry) -> bool,
) -> Result<Option<SessionEvent>> {
    let mut transcript = transcript.clone();
    let mut from = Offset::START;
    loop {
        let read = transcripts
            .read_chunk(&transcript, from, crate::transcript::DEFAULT_CHUNK_BYTES)
            .await?;
        if archives && from == Offset::START && read.header.is_none() && read.events.is_empty() {
            match transcripts.archived(&transcript).await? {
                Some(archived) if archived != transcript => {
                    transcript = archived;
                    continue;
                }
                _ => return Ok(None),
            }
        }
        if read.events.is_empty() || read.next <= from {
            return Ok(None);
        }
        if let Some(event) = read.events.into_iter().find(|event| is_it(&event.entry)) {
            return Ok(Some(event));
        }
        from = read.next;
    }
}

/// `transcripts.append(transcript, [line])`, where an append that reports an error
/// although its line was written (a connection lost after the commit) counts as done:
/// the line is looked for by its message-log id.
async fn append_once(
    transcripts: &dyn TranscriptStore,
    transcript: &TranscriptRef,
    line: TranscriptEntry,
) -> Result<Vec<SessionEvent>> {
    let id = line.log.as_ref().and_then(|log| log.message_id.clone());
    let error = match transcripts.append(transcript, vec![line]).await {
        Ok(events) => return Ok(events),
        Err(error) => error,
    };
    let Some(id) = id else {
        return Err(error);
    };
    let written = find_line(transcripts, transcript, |entry| {
        entry.log.as_ref().and_then(|log| log.message_id.as_deref()) == Some(id.as_str())
    })
    .await;
    match written {
        Ok(Some(event)) => {
            tracing::warn!(%error, "an append reported an error but its line is there; it counts as done");
            Ok(vec![event])
        }
        _ => Err(error),
    }
}

/// What a turn holds while its inbound line is written.
#[derive(Debug)]
pub(crate) struct LineHolds {
    /// The turn's hold on its message (one with a message id), marked done at its time
    /// once the line is logged and kept for as long as the duration says.
    pub(crate) message: Option<(Hold, u64, Duration)>,
    /// The turn's run, kept live until the append has landed or failed: a delivery
    /// again meanwhile must not be taken for a message its dropped turn never logged.
    pub(crate) run: Writing,
}

/// A claim of a group's chatter for one turn, and the lines it holds.
#[derive(Debug)]
pub(crate) struct ClaimedChatter {
    pub(crate) group: String,
    pub(crate) claim: LiveClaim,
    pub(crate) entries: Vec<ChatterEntry>,
}

impl SessionManager {
    /// Claims group `group`'s history for a turn whose inbound line goes to
    /// `transcript`: first settling or taking over the claims whose holders are gone.
    pub(crate) async fn claim_chatter(
        &self,
        group: &str,
        transcript: &TranscriptRef,
    ) -> Result<ClaimedChatter> {
        let history = &*self.seams.history;
        let now = to_millis(self.seams.clock.now());
        let mut take_over = Vec::new();
        for claim in history.claims(group).await? {
            if holders::alive(&claim.holder, claim.at, now) {
                continue;
            }
            if logged(self.transcript_store()?, &claim.witness, &claim.id).await? {
                history.settle(group, &claim.id).await?;
            } else {
                take_over.push(claim.id);
            }
        }
        let claim = LiveClaim::new(transcript, now);
        let entries = history.claim(group, &claim.claim, &take_over).await?;
        Ok(ClaimedChatter {
            group: group.to_owned(),
            claim,
            entries,
        })
    }

    /// Appends `line` (the inbound message carrying `claimed`'s lines, its message-log
    /// id the claim's) to `transcript`, then settles the claim — or, when the append
    /// fails, releases it and returns the error. Runs to the end even when the caller
    /// stops waiting: a turn dropped half-way leaves no claim it cannot account for.
    /// `holds` are what the turn holds while the line is written.
    pub(crate) async fn log_claimed(
        &self,
        transcript: &TranscriptRef,
        line: TranscriptEntry,
        claimed: Option<ClaimedChatter>,
        holds: LineHolds,
    ) -> Result<Vec<SessionEvent>> {
        let transcripts = std::sync::Arc::clone(self.shared_transcripts()?);
        let history = std::sync::Arc::clone(&self.seams.history);
        let transcript = transcript.clone();
        let work = async move {
            let appended = append_once(&*transcripts, &transcript, line).await;
            let LineHolds { message, run } = holds;
            if let (Ok(_), Some((hold, at, keep))) = (&appended, message) {
                hold.done(at, keep);
            }
            drop(run);
            if let Some(ClaimedChatter {
                group,
                claim,
                entries,
            }) = claimed
            {
                // Either way the outcome is durable: a claim left outstanding by a failed
                // settle or release is resolved by the next turn from the transcript.
                let outcome = match &appended {
                    Ok(_) => history.settle(&group, claim.id()).await,
                    Err(_) => history.release(&group, claim.id(), entries).await,
                };
                if let Err(error) = outcome {
                    tracing::warn!(%group, claim = claim.id(), %error, "could not settle a claim of group chatter; the next turn of the group does");
                }
                drop(claim);
            }
            appended
        };
        super::finishing::finishing(work).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_witness_names_its_transcript() {
        let mut transcript = TranscriptRef::new(AgentId::new("ops").unwrap(), "s1");
        transcript.topic = Some("42".into());
        let parsed = Witness::parse(&Witness::of(&transcript)).unwrap();
        assert_eq!(parsed, transcript);
        assert!(Witness::parse("not json").is_none());
    }
}
