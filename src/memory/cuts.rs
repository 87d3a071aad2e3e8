//! The summary of what a turn's context window cut: written after the reply, off the
//! reply path, ready for the turns after the cut (documented in the parent module).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::identity::key::SessionKey;
use crate::inbound::chat::{ChatMessage, ChatRole};
use crate::memory::jobs::clip_summary;
use crate::memory::summary::{Summarizer, SummaryInput, SummaryTurn};
use crate::store::entry::WindowStart;
use crate::store::SessionStore;

/// What a turn's model input cut from the conversation that no summary stands for yet:
/// the messages from where the summary's cover ends up to where the input's history now
/// starts.
#[derive(Debug, Clone)]
pub(crate) struct Cut {
    /// The session the cut was made in.
    pub(crate) session_id: String,
    /// Where the session's window started before the cut.
    pub(crate) window: Option<String>,
    /// The summary that stood for what was before `from`.
    pub(crate) previous: Option<String>,
    /// The messages between `from` and `until`, oldest first.
    pub(crate) messages: Vec<ChatMessage>,
    /// The line the history starts at now: the new summary covers what is before it.
    pub(crate) until: String,
    /// The session's turn count at the cut.
    pub(crate) turns: u64,
}

impl Cut {
    /// What the summarizer is given: the previous summary and the messages cut (the
    /// person's and the agent's texts; tool calls and results are left out).
    fn input(&self) -> SummaryInput {
        let turns = self
            .messages
            .iter()
            .filter(|m| !m.content.trim().is_empty())
            .filter_map(|m| match m.role {
                ChatRole::User => Some(SummaryTurn::user(m.content.clone())),
                ChatRole::Assistant => Some(SummaryTurn::assistant(m.content.clone())),
                ChatRole::System | ChatRole::Tool => None,
            })
            .collect();
        SummaryInput::new(turns)
            .merging(self.previous.clone())
            .with_turn_count(self.turns)
    }
}

/// The summaries being written, one at a time per session: a turn that builds its model
/// input waits for its session's, so it starts from the summary of the last cut.
#[derive(Debug, Default)]
pub(crate) struct CutSummaries {
    running: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<()>>>>,
}

impl CutSummaries {
    /// Waits until no summary of `key`'s session is being written in this process;
    /// whether one was (the session changed since it was read).
    pub(crate) async fn settled(&self, key: &SessionKey) -> bool {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned();
        match running {
            Some(running) => {
                drop(running.lock().await);
                true
            }
            None => false,
        }
    }

    /// Writes the summary of `cut` in the background: the summarizer's text becomes
    /// the session's context summary and the summary of its window, unless the session
    /// was replaced or its window moved on meanwhile. A summarizer or store that fails
    /// is logged; the window keeps the summary it had, and the next cut's summary takes
    /// in what this one would have.
    pub(crate) fn write(
        self: &Arc<Self>,
        key: SessionKey,
        cut: Cut,
        summarizer: Arc<dyn Summarizer>,
        store: Arc<dyn SessionStore>,
    ) {
        let lock = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .clone();
        // Taken now when free, so a turn that starts once this returns waits for it.
        let held = lock.clone().try_lock_owned().ok();
        let jobs = Arc::clone(self);
        tokio::spawn(async move {
            let _held = match held {
                Some(held) => held,
                None => lock.clone().lock_owned().await,
            };
            if let Err(error) = write_summary(&key, &cut, &*summarizer, &*store).await {
                tracing::warn!(%key, %error, "the summary of a cut could not be written; the window keeps its summary");
            }
            let mut running = jobs.running.lock().unwrap_or_else(PoisonError::into_inner);
            if running.get(&key).is_some_and(|r| Arc::ptr_eq(r, &lock)) {
                running.remove(&key);
            }
        });
    }
}

async fn write_summary(
    key: &SessionKey,
    cut: &Cut,
    summarizer: &dyn Summarizer,
    store: &dyn SessionStore,
) -> crate::Result<()> {
    let summary = clip_summary(&summarizer.summarize(&cut.input()).await?);
    store
        .apply(key, &mut |slot, _| {
            let Some(current) = slot.as_mut() else {
                return Ok(());
            };
            let line = current.window_start.as_ref().map(|w| &w.line);
            // The same session, its window still starting where the cut left it (or,
            // for a sliding window, where it started before).
            if current.session_id == cut.session_id
                && (line == Some(&cut.until) || line == cut.window.as_ref())
            {
                current.window_start = Some(WindowStart {
                    line: cut.until.clone(),
                    summary: Some(summary.clone()),
                    summary_until: None,
                });
                current.context_summary = Some(summary.clone());
            }
            Ok(())
        })
        .await?;
    Ok(())
}
