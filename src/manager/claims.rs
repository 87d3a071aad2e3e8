//! Group history shown exactly once: a turn claims the lines, its inbound transcript
//! line carries them, and that line settles the claim (see [`HistoryClaim`]).
//!
//! A claim names its holder — this process, told apart from every other process and
//! host — and its witness, the transcript its line goes to. A later turn that finds the
//! claim outstanding asks whether the holder still runs: a claim of this process is
//! live while its turn is (the process keeps a set of them); a claim of another process
//! on this machine while that process runs (Linux: the process id and its start time,
//! under the same boot); a claim from another host for [`CLAIM_LEASE`]. A claim whose
//! holder is gone is settled if its line is in the witness, else its lines are taken
//! over.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SessionManager;
use crate::context::history::{HistoryClaim, HistoryEntry};
use crate::error::Result;
use crate::key::AgentId;
use crate::lifecycle::clock::to_millis;
use crate::transcript::{Offset, SessionEvent, TranscriptEntry, TranscriptRef, TranscriptStore};

/// How long a claim made on another host counts as live without word from it: far
/// longer than a turn takes from its claim to its inbound line (one transcript append).
pub(crate) const CLAIM_LEASE: Duration = Duration::from_secs(120);

/// The claims of this process whose turns still run.
fn live_claims() -> std::sync::MutexGuard<'static, HashSet<String>> {
    static LIVE: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// A claim of this process, live until dropped.
#[derive(Debug)]
pub(super) struct LiveClaim(HistoryClaim);

impl LiveClaim {
    fn new(witness: &TranscriptRef, at: u64) -> Self {
        let id = uuid::Uuid::new_v4().to_string();
        live_claims().insert(id.clone());
        LiveClaim(HistoryClaim {
            id,
            holder: this_process().to_owned(),
            witness: Witness::of(witness),
            at,
        })
    }

    pub(super) fn id(&self) -> &str {
        &self.0.id
    }
}

impl Drop for LiveClaim {
    fn drop(&mut self) {
        live_claims().remove(&self.0.id);
    }
}

/// Which process this is: `<boot id>/<pid>/<start time>` on Linux, else a random id
/// (other processes then wait out the lease).
fn this_process() -> &'static str {
    static HOLDER: OnceLock<String> = OnceLock::new();
    HOLDER.get_or_init(|| {
        let pid = std::process::id();
        match (boot_id(), start_time(pid)) {
            (Some(boot), Some(start)) => format!("{boot}/{pid}/{start}"),
            _ => format!("{}/{pid}/0", uuid::Uuid::new_v4()),
        }
    })
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

/// When process `pid` started (clock ticks since boot), if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields = stat.get(stat.rfind(')')? + 1..)?;
    // Field 22 of the whole line is the 20th after the name.
    fields.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the holder of `claim` may still log its line.
fn holder_alive(claim: &HistoryClaim, now_ms: u64) -> bool {
    if claim.holder == this_process() {
        return live_claims().contains(&claim.id);
    }
    let mut parts = claim.holder.splitn(3, '/');
    let (Some(boot), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return lease_running(claim, now_ms);
    };
    if boot_id().as_deref() == Some(boot) {
        return match pid.parse() {
            Ok(pid) => start_time(pid).map(|s| s.to_string()).as_deref() == Some(start),
            Err(_) => false,
        };
    }
    lease_running(claim, now_ms)
}

fn lease_running(claim: &HistoryClaim, now_ms: u64) -> bool {
    now_ms.saturating_sub(claim.at) < CLAIM_LEASE.as_millis() as u64
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
    let read = transcripts.read(&transcript, Offset::START).await?;
    Ok(read.events.iter().any(|event| {
        event
            .entry
            .log
            .as_ref()
            .and_then(|log| log.message_id.as_deref())
            == Some(line_id)
    }))
}

/// A claim of a group's history for one turn, and the lines it holds.
#[derive(Debug)]
pub(super) struct ClaimedHistory {
    pub(super) group: String,
    pub(super) claim: LiveClaim,
    pub(super) entries: Vec<HistoryEntry>,
}

impl SessionManager {
    /// Claims group `group`'s history for a turn whose inbound line goes to
    /// `transcript`: first settling or taking over the claims whose holders are gone.
    pub(super) async fn claim_history(
        &self,
        group: &str,
        transcript: &TranscriptRef,
    ) -> Result<ClaimedHistory> {
        let history = &*self.seams.history;
        let now = to_millis(self.seams.clock.now());
        let mut take_over = Vec::new();
        for claim in history.claims(group).await? {
            if holder_alive(&claim, now) {
                continue;
            }
            if logged(self.transcript_store()?, &claim.witness, &claim.id).await? {
                history.settle(group, &claim.id).await?;
            } else {
                take_over.push(claim.id);
            }
        }
        let claim = LiveClaim::new(transcript, now);
        let entries = history.claim(group, &claim.0, &take_over).await?;
        Ok(ClaimedHistory {
            group: group.to_owned(),
            claim,
            entries,
        })
    }

    /// Appends `line` (the inbound message carrying `claimed`'s lines, its message-log
    /// id the claim's) to `transcript`, then settles the claim — or, when the append
    /// fails, releases it and returns the error. Runs to the end even when the caller
    /// stops waiting: a turn dropped half-way leaves no claim it cannot account for.
    pub(super) async fn log_claimed(
        &self,
        transcript: &TranscriptRef,
        line: TranscriptEntry,
        claimed: Option<ClaimedHistory>,
    ) -> Result<Vec<SessionEvent>> {
        let transcripts = self
            .seams
            .transcripts
            .clone()
            .ok_or(crate::Error::NotConfigured {
                what: "a transcript store (SessionManagerBuilder::transcripts)",
            })?;
        let history = std::sync::Arc::clone(&self.seams.history);
        let transcript = transcript.clone();
        let work = async move {
            let appended = transcripts.append(&transcript, vec![line]).await;
            if let Some(ClaimedHistory {
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
                    tracing::warn!(%group, claim = claim.id(), %error, "could not settle a claim of group history; the next turn of the group does");
                }
                drop(claim);
            }
            appended
        };
        match tokio::spawn(work).await {
            Ok(appended) => appended,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(holder: &str, at: u64) -> HistoryClaim {
        HistoryClaim {
            id: "c1".into(),
            holder: holder.into(),
            witness: String::new(),
            at,
        }
    }

    #[test]
    fn a_claim_is_live_while_its_holder_runs() {
        let now = 1_000_000_000;
        let lease = CLAIM_LEASE.as_millis() as u64;
        // This process: live only while the claim is registered.
        let live = LiveClaim::new(&TranscriptRef::new(AgentId::main(), "s"), now);
        assert!(holder_alive(&live.0, now));
        let dropped = live.0.clone();
        drop(live);
        assert!(!holder_alive(&dropped, now));
        if let Some(boot) = boot_id() {
            // Another process of this machine: live while it runs.
            let parent = std::os::unix::process::parent_id();
            let start = start_time(parent).unwrap();
            assert!(holder_alive(
                &claim(&format!("{boot}/{parent}/{start}"), 0),
                now
            ));
            assert!(!holder_alive(
                &claim(&format!("{boot}/{parent}/{}", start + 1), now),
                now
            ));
            assert!(!holder_alive(
                &claim(&format!("{boot}/4194305/1"), now),
                now
            ));
        }
        // Another host: the lease.
        let other = "00000000-0000-0000-0000-000000000000/1/1";
        assert!(holder_alive(&claim(other, now - lease + 1), now));
        assert!(!holder_alive(&claim(other, now - lease), now));
        assert!(!holder_alive(&claim("garbage", now - lease), now));
    }

    #[test]
    fn a_witness_names_its_transcript() {
        let mut transcript = TranscriptRef::new(AgentId::new("ops").unwrap(), "s1");
        transcript.topic = Some("42".into());
        let parsed = Witness::parse(&Witness::of(&transcript)).unwrap();
        assert_eq!(parsed, transcript);
        assert!(Witness::parse("not json").is_none());
    }
}
