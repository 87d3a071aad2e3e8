//! Idle checkpoints without the host timing them: a bounded background sweep.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::manager::SessionManager;
use crate::store::entry::SessionStatus;
use crate::store::{ListFilter, SessionStoreExt};
use crate::transcript::CheckpointReason;

/// How the idle sweep runs ([`SessionManager::spawn_idle_checkpoints`]).
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::memory::IdleCheckpointOptions;
///
/// // Sessions quiet for 20 minutes, looked for every minute, at most 50 per pass.
/// let options = IdleCheckpointOptions::after(Duration::from_secs(20 * 60))
///     .every(Duration::from_secs(60))
///     .at_most(50);
/// assert_eq!(options.max_per_pass, 50);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdleCheckpointOptions {
    /// How long a session must be quiet (since its `updatedAt`) to be checkpointed.
    pub idle_after: Duration,
    /// How often the sweep looks (default: one minute).
    pub interval: Duration,
    /// At most this many checkpoints per pass (default: 100); the rest wait for the
    /// next pass.
    pub max_per_pass: usize,
}

impl IdleCheckpointOptions {
    /// Checkpoints sessions quiet for `idle_after`, every minute, at most 100 a pass.
    pub fn after(idle_after: Duration) -> Self {
        IdleCheckpointOptions {
            idle_after,
            interval: Duration::from_secs(60),
            max_per_pass: 100,
        }
    }

    /// Looks every `interval`.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// At most `max` checkpoints per pass.
    pub fn at_most(mut self, max: usize) -> Self {
        self.max_per_pass = max;
        self
    }
}

/// The idle sweep's task ([`SessionManager::spawn_idle_checkpoints`]); dropping it (or
/// [`stop`](IdleCheckpoints::stop)) stops the sweep.
#[derive(Debug)]
pub struct IdleCheckpoints {
    task: tokio::task::JoinHandle<()>,
}

impl IdleCheckpoints {
    /// Stops the sweep (a checkpoint under way is abandoned; its session stays due).
    pub fn stop(self) {}
}

impl Drop for IdleCheckpoints {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SessionManager {
    /// One pass of the idle sweep: takes the `idle` checkpoint
    /// ([`Session::checkpoint`](crate::manager::Session::checkpoint)) of up
    /// to `max` sessions quiet for `idle_after` or longer, most recently active first,
    /// and returns their keys.
    ///
    /// Each quiet period is checkpointed once: the session records it
    /// ([`SessionEntry::idle_checkpoint_at`](crate::SessionEntry::idle_checkpoint_at),
    /// claimed with a compare-and-set before the checkpoint runs, so two sweeps never
    /// take it twice), and only a new message makes the session due again. Running,
    /// inactive and closed sessions are left alone. A checkpoint that fails is logged
    /// and its claim released, so the next pass tries again. Needs a transcript store
    /// ([`Error::NotConfigured`] otherwise).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::freshness::ManualClock;
    /// # use agent_sessions::transcript::InMemoryTranscriptStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let clock = ManualClock::at_millis(1_770_000_000_000);
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// let quiet = Duration::from_secs(20 * 60);
    /// assert!(manager.checkpoint_idle_sessions(quiet, 10).await?.is_empty());
    /// clock.advance(quiet);
    /// assert_eq!(manager.checkpoint_idle_sessions(quiet, 10).await?.len(), 1);
    /// assert!(manager.checkpoint_idle_sessions(quiet, 10).await?.is_empty(), "once");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn checkpoint_idle_sessions(
        &self,
        idle_after: Duration,
        max: usize,
    ) -> Result<Vec<SessionKey>> {
        if self.seams.transcripts.is_none() {
            return Err(Error::NotConfigured {
                what: "a transcript store (SessionManagerBuilder::transcripts)",
            });
        }
        let now_ms = self.seams.clock.now_millis();
        let idle_ms = u64::try_from(idle_after.as_millis()).unwrap_or(u64::MAX);
        let Some(cutoff) = now_ms.checked_sub(idle_ms) else {
            return Ok(Vec::new());
        };
        let due: Vec<_> = self
            .seams
            .store
            .list(&ListFilter::new().updated_before(cutoff.saturating_add(1)))
            .await?
            .into_iter()
            .filter(|s| {
                !matches!(
                    s.entry.status,
                    Some(SessionStatus::Running | SessionStatus::Closed)
                ) && s.entry.idle_checkpoint_at != Some(s.entry.updated_at)
            })
            .collect();
        let mut taken = Vec::new();
        for session in due {
            if taken.len() >= max {
                break;
            }
            let quiet_since = session.entry.updated_at;
            // Claim the quiet period: only if the session did not change since it was read.
            let mut claimed = session.entry.clone();
            claimed.idle_checkpoint_at = Some(quiet_since);
            match self
                .seams
                .store
                .compare_and_set(&session.key, Some(session.revision), Some(claimed))
                .await
            {
                Ok(_) => {}
                Err(Error::Conflict { .. }) => continue,
                Err(error) => return Err(error),
            }
            match self
                .session(&session.key)
                .checkpoint(CheckpointReason::Idle)
                .await
            {
                Ok(_) => taken.push(session.key),
                Err(error) => {
                    tracing::warn!(key = %session.key, %error, "idle checkpoint failed; it is retried on the next pass");
                    self.seams
                        .store
                        .apply(&session.key, &mut |slot, _| {
                            if let Some(entry) = slot.as_mut() {
                                if entry.session_id == session.entry.session_id
                                    && entry.idle_checkpoint_at == Some(quiet_since)
                                {
                                    entry.idle_checkpoint_at = None;
                                }
                            }
                            Ok(())
                        })
                        .await?;
                }
            }
        }
        if !taken.is_empty() {
            tracing::info!(checkpointed = taken.len(), "idle checkpoints taken");
        }
        Ok(taken)
    }

    /// Starts the idle sweep on a tokio task: every `options.interval` it runs
    /// [`checkpoint_idle_sessions`](Self::checkpoint_idle_sessions) with
    /// `options.idle_after` and `options.max_per_pass`, so the host need not time idle
    /// checkpoints itself. Errors are logged and the next pass tries again. The sweep
    /// stops when the returned handle is dropped or stopped.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::memory::IdleCheckpointOptions;
    /// # async fn run(manager: Arc<SessionManager>) {
    /// let sweep = manager.spawn_idle_checkpoints(IdleCheckpointOptions::after(
    ///     Duration::from_secs(20 * 60),
    /// ));
    /// // … serve messages; dropping `sweep` stops it.
    /// # drop(sweep);
    /// # }
    /// ```
    pub fn spawn_idle_checkpoints(
        self: &Arc<Self>,
        options: IdleCheckpointOptions,
    ) -> IdleCheckpoints {
        let manager = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(options.interval.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = manager
                    .checkpoint_idle_sessions(options.idle_after, options.max_per_pass)
                    .await
                {
                    tracing::warn!(%error, "idle checkpoint pass failed; retrying at the next");
                }
            }
        });
        IdleCheckpoints { task }
    }
}
