//! The model's window on a session's conversation: the newest history read, fitted to
//! the token budget as the manager's [`HistoryWindow`] cuts it, and where the window
//! starts recorded in the session (documented in the parent module).

use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::inbound::chat::{
    fit_sliding, fit_stable, summary_message, ChatMessage, ChatRole, HistoryMessage, HistoryWindow,
    Want,
};
use crate::manager::SessionManager;
use crate::memory::cuts::Cut;
use crate::store::entry::{SessionEntry, WindowStart};
use crate::store::SessionStore;
use crate::transcript::{Offset, TranscriptRef};

impl SessionManager {
    /// The newest of the session's chat messages that [`fit_messages`](Self::fit_messages)
    /// may keep (all of them, or enough to fill the budget and the message window),
    /// without the line at `skip` (the current message, which is not history; with
    /// none, the newest message is the current one); and the summary that stands for
    /// what the last compaction removed. Read from the session's conversation as the
    /// last turn left it, so a turn reads only the lines appended since.
    pub(crate) async fn history_messages(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        skip: Option<Offset>,
    ) -> Result<(Vec<HistoryMessage>, Option<String>)> {
        self.history_within(key, entry, skip, self.settings.budget(entry))
            .await
    }

    /// [`history_messages`](Self::history_messages) reaching back `tokens` (rather
    /// than the budget).
    async fn history_within(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        skip: Option<Offset>,
        tokens: usize,
    ) -> Result<(Vec<HistoryMessage>, Option<String>)> {
        let transcripts = self.transcript_store()?;
        let transcript = TranscriptRef::of(key, entry, &self.settings.default_agent);
        let want = Want {
            skip,
            tokens,
            count: self.settings.message_window,
            newest_is_current: skip.is_none(),
            max_attempts: self.settings.max_answer_attempts,
        };
        let edits = entry.transcript_edits.unwrap_or(0);
        self.histories
            .newest(transcripts, &transcript, want, &*self.seams.tokens, edits)
            .await
    }

    /// `cut` with the messages its summary must take in reaching back to where the
    /// summary's cover ends, when that is before the window it replaces (an earlier
    /// cut's summary was never written: its process died, its summarizer failed) — read
    /// again, back at most four times the budget; else `cut` as it is.
    pub(crate) async fn reach_back(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        skip: Option<Offset>,
        mut cut: Cut,
    ) -> Result<Cut> {
        let covered = WindowStart::covered(entry.window_start.as_ref());
        if entry.window_start.is_none() || covered == cut.window {
            return Ok(cut);
        }
        let reach = self.settings.budget(entry).saturating_mul(4);
        let (history, _) = self.history_within(key, entry, skip, reach).await?;
        let until = history
            .iter()
            .position(|m| m.id.as_ref() == Some(&cut.until))
            .unwrap_or(history.len());
        let from = covered
            .as_ref()
            .and_then(|line| {
                history[..until]
                    .iter()
                    .position(|m| m.id.as_ref() == Some(line))
            })
            .unwrap_or(0);
        if until - from > cut.messages.len() {
            cut.messages = history[from..until]
                .iter()
                .map(|m| m.message.clone())
                .collect();
        }
        Ok(cut)
    }

    /// `history` then `current`, within the budget for `entry` (see
    /// [`Settings::budget`](crate::manager::Settings::budget)): the summary of the transcript's last compaction
    /// first (it stands for what the compaction removed), and the context summary
    /// standing for what the budget cuts, as the manager's [`HistoryWindow`] cuts it.
    /// Also where the window starts now, for the entry to record, and what it cut that
    /// no summary stands for yet.
    pub(crate) fn fit_messages(
        &self,
        entry: &SessionEntry,
        mut system: Vec<ChatMessage>,
        (mut history, compacted): (Vec<HistoryMessage>, Option<String>),
        (current, current_line): (ChatMessage, Option<&str>),
    ) -> Result<(Vec<ChatMessage>, Option<WindowStart>, Option<Cut>)> {
        system.extend(compacted.as_deref().map(summary_message));
        let summary = entry.context_summary.as_deref();
        let (budget, counter) = (self.settings.budget(entry), &*self.seams.tokens);
        // Where the summary's cover ends, and the summary that stands for what is before.
        let covered = WindowStart::covered(entry.window_start.as_ref());
        let window_line = entry.window_start.as_ref().map(|w| w.line.clone());
        let previous = match &entry.window_start {
            Some(window) => window.summary.clone(),
            None => entry.context_summary.clone(),
        };
        let cut = |before: Vec<HistoryMessage>, until: Option<String>| {
            let start = covered
                .as_ref()
                .and_then(|line| before.iter().position(|m| m.id.as_ref() == Some(line)))
                .unwrap_or(0);
            let messages: Vec<ChatMessage> =
                before.into_iter().skip(start).map(|m| m.message).collect();
            // Only a new cut: a window kept is summarised already, or waits for the
            // next cut (a summary that failed is not asked for again every turn).
            let until = until.filter(|until| Some(until) != window_line.as_ref())?;
            (!messages.is_empty()).then(|| Cut {
                session_id: entry.session_id.clone(),
                window: window_line.clone(),
                previous: previous.clone(),
                messages,
                until,
                turns: entry.turn_count.unwrap_or(0),
            })
        };
        if let (HistoryWindow::Stable { keep_percent }, None) =
            (self.settings.history_window, self.settings.message_window)
        {
            let start = entry.window_start.as_ref();
            let (messages, window, before) = fit_stable(
                &system,
                start,
                summary,
                history,
                (current, current_line),
                budget,
                keep_percent,
                counter,
            )?;
            let mut window = window;
            if let Some(new) = window.as_mut() {
                new.summary_until = match Some(&new.line) == window_line.as_ref() {
                    // The window kept: its summary covers what it covered.
                    true => entry
                        .window_start
                        .as_ref()
                        .and_then(|w| w.summary_until.clone()),
                    // A new cut starts with the summary there is, which covers less.
                    false => covered.clone().filter(|_| new.summary.is_some()),
                };
            }
            let cut = cut(before, window.as_ref().map(|w| w.line.clone()));
            return Ok((messages, window, cut));
        }
        let mut cut_from_window = Vec::new();
        if let Some(window) = self.settings.message_window {
            let mut from = history.len().saturating_sub(window);
            while from < history.len() && history[from].message.role != ChatRole::User {
                from += 1;
            }
            cut_from_window = history.drain(..from).collect();
        }
        let ids: Vec<Option<String>> = history.iter().map(|m| m.id.clone()).collect();
        let history = history.into_iter().map(|m| m.message).collect();
        let (messages, dropped) = fit_sliding(&system, summary, history, current, budget, counter)?;
        // The first line the input keeps (the current message's when it keeps no
        // history).
        let until = match ids.get(dropped.len()) {
            Some(id) => id.clone(),
            None => current_line.map(str::to_owned),
        };
        let before = cut_from_window
            .into_iter()
            .chain(
                dropped
                    .into_iter()
                    .zip(ids)
                    .map(|(message, id)| HistoryMessage { id, message }),
            )
            .collect();
        Ok((messages, entry.window_start.clone(), cut(before, until)))
    }
}

/// Records in `entry`'s session in `store` (unless it has been replaced since, or the
/// run `fence` lost it) that its model input's history starts at `window` now.
pub(crate) async fn record_window(
    store: &dyn SessionStore,
    key: &SessionKey,
    entry: &SessionEntry,
    fence: Option<u64>,
    window: Option<WindowStart>,
) -> Result<()> {
    store
        .apply(key, &mut |slot, _| {
            if let Some(current) = slot.as_mut().filter(|current| {
                current.session_id == entry.session_id
                    && fence.is_none_or(|fence| !crate::lane::interrupted(current, fence))
            }) {
                current.window_start.clone_from(&window);
            }
            Ok(())
        })
        .await?;
    Ok(())
}
