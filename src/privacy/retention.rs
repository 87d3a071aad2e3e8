//! Keeping conversations no longer than a policy allows: [`SessionManager::apply_retention`]
//! and its bounded background sweep.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::Privacy;
use crate::error::{Error, Result};
use crate::identity::key::{normalize_channel, AgentId};
use crate::inbound::chatter::ChatterEdit;
use crate::manager::SessionManager;
use crate::store::{ListFilter, SessionStoreExt, StatusFilter, StoredSession};
use crate::transcript::lines::{archived_at, session_id_of_name};
use crate::transcript::search::SearchFilter;
use crate::transcript::TranscriptExport;

/// How long one part of the conversations may be kept, for the sessions one rule
/// selects (an agent, a channel, both, or every session).
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::privacy::RetentionRule;
///
/// let day = Duration::from_secs(24 * 3600);
/// // WhatsApp: conversations 30 days (summaries kept), chatter 7 days, closed sessions 90.
/// let whatsapp = RetentionRule::for_channel("whatsapp")
///     .transcripts(30 * day)
///     .keep_summary()
///     .group_chatter(7 * day)
///     .closed_sessions(90 * day);
/// assert_eq!(whatsapp.channel.as_deref(), Some("whatsapp"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionRule {
    /// Only this agent's sessions (every agent's when `None`).
    pub agent: Option<AgentId>,
    /// Only this channel's sessions (every channel's when `None`).
    pub channel: Option<String>,
    /// A session quiet for longer loses its conversation: its transcripts, archived
    /// copies too, and its messages in the search index. The session goes as well,
    /// unless [`keep_summary`](Self::keep_summary).
    pub transcripts: Option<Duration>,
    /// Group chatter not yet shown to the model, older than this, is dropped.
    pub group_chatter: Option<Duration>,
    /// A closed session (replaced under its key) last active longer ago goes, with its
    /// transcripts and search messages.
    pub closed_sessions: Option<Duration>,
    /// A session whose conversation was cut keeps its entry, with its summaries
    /// (`contextSummary`, the person's rolling summary): its next message continues it
    /// in a new transcript.
    pub keep_summary: bool,
}

impl RetentionRule {
    /// A rule for every session.
    pub fn all() -> Self {
        RetentionRule::default()
    }

    /// A rule for `agent`'s sessions.
    pub fn for_agent(agent: AgentId) -> Self {
        RetentionRule {
            agent: Some(agent),
            ..RetentionRule::default()
        }
    }

    /// A rule for `channel`'s sessions.
    pub fn for_channel(channel: impl Into<String>) -> Self {
        RetentionRule {
            channel: Some(channel.into()),
            ..RetentionRule::default()
        }
    }

    /// Also only `channel`'s sessions.
    pub fn channel(mut self, channel: impl Into<String>) -> Self {
        self.channel = Some(channel.into());
        self
    }

    /// Conversations kept this long after their last activity.
    pub fn transcripts(mut self, keep: Duration) -> Self {
        self.transcripts = Some(keep);
        self
    }

    /// Group chatter kept this long.
    pub fn group_chatter(mut self, keep: Duration) -> Self {
        self.group_chatter = Some(keep);
        self
    }

    /// Closed sessions kept this long after their last activity.
    pub fn closed_sessions(mut self, keep: Duration) -> Self {
        self.closed_sessions = Some(keep);
        self
    }

    /// A session whose conversation is cut keeps its entry and summaries.
    pub fn keep_summary(mut self) -> Self {
        self.keep_summary = true;
        self
    }

    /// Whether the rule selects sessions of `agent` on `channel`.
    fn selects(&self, agent: Option<&str>, channel: Option<&str>) -> bool {
        let agent_ok = self
            .agent
            .as_ref()
            .is_none_or(|wanted| agent == Some(wanted.as_str()));
        let channel_ok = self
            .channel
            .as_deref()
            .is_none_or(|wanted| channel.and_then(normalize_channel) == normalize_channel(wanted));
        agent_ok && channel_ok
    }
}

/// Rules, the first that selects a session applying to it.
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::privacy::{RetentionPolicy, RetentionRule};
///
/// let day = Duration::from_secs(24 * 3600);
/// let policy = RetentionPolicy::new()
///     .rule(RetentionRule::for_channel("sms").transcripts(7 * day))
///     .rule(RetentionRule::all().transcripts(30 * day).closed_sessions(90 * day));
/// assert_eq!(policy.rules.len(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionPolicy {
    /// The rules, in order.
    pub rules: Vec<RetentionRule>,
    /// At most this many sessions are cut or removed per pass (default 500): the rest
    /// wait for the next pass.
    pub max_per_pass: usize,
}

impl RetentionPolicy {
    /// No rules: nothing is removed.
    pub fn new() -> Self {
        RetentionPolicy {
            rules: Vec::new(),
            max_per_pass: 500,
        }
    }

    /// With `rule` after the others.
    pub fn rule(mut self, rule: RetentionRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// At most `max` sessions per pass.
    pub fn at_most(mut self, max: usize) -> Self {
        self.max_per_pass = max;
        self
    }

    /// The rule for sessions of `agent` on `channel`.
    fn rule_for(&self, agent: Option<&str>, channel: Option<&str>) -> Option<&RetentionRule> {
        self.rules.iter().find(|rule| rule.selects(agent, channel))
    }
}

/// What one pass of [`SessionManager::apply_retention`] removed: counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RetentionReport {
    /// Sessions removed with their conversations.
    pub sessions: usize,
    /// Sessions whose conversation was cut (a transcript of theirs removed), the entry
    /// and its summaries kept.
    pub cut: usize,
    /// Closed sessions removed.
    pub closed_sessions: usize,
    /// Transcripts removed (archived copies too).
    pub transcripts: usize,
    /// Messages removed from the search index.
    pub search_messages: usize,
    /// Group-history entries dropped.
    pub chatter_entries: usize,
}

/// The retention sweep's task ([`SessionManager::spawn_retention`]); dropping it (or
/// [`stop`](RetentionSweep::stop)) stops the sweep.
#[derive(Debug)]
pub struct RetentionSweep {
    task: tokio::task::JoinHandle<()>,
}

impl RetentionSweep {
    /// Stops the sweep (a pass under way is abandoned; what it did not reach waits).
    pub fn stop(self) {}
}

impl Drop for RetentionSweep {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The channel the lines of transcript `name` were logged on (the first line that
/// says), if any.
async fn transcript_channel(
    transcripts: &dyn TranscriptExport,
    agent: &AgentId,
    name: &str,
) -> Result<Option<String>> {
    let Some(lines) = transcripts.export_lines(agent, name).await? else {
        return Ok(None);
    };
    Ok(lines.iter().find_map(|line| {
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        value
            .get("log")?
            .get("channel")?
            .as_str()
            .map(str::to_owned)
    }))
}

impl SessionManager {
    /// One pass of `policy`: removes what it no longer allows, at most
    /// `policy.max_per_pass` sessions, oldest activity first. What goes follows the
    /// rules of [`forget_person`](Self::forget_person): a session's transcripts go
    /// with every archived copy and its messages in the search index. A running session
    /// is never cut, and a session changed while the pass ran is left for the next
    /// (each removal is a compare-and-set on what was judged). Reaches transcripts and
    /// the search index through the manager's backend
    /// ([`SessionManagerBuilder::backend`](crate::manager::SessionManagerBuilder::backend)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_sessions::freshness::ManualClock;
    /// use agent_sessions::privacy::{RetentionPolicy, RetentionRule};
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("json:{}", dir.path().display());
    /// let clock = ManualClock::at_millis(1_770_000_000_000);
    /// let manager = SessionManager::connect(&url).await?.clock(clock.clone()).build()?;
    /// manager.turn(&InboundMessage::direct("sms", "+15550100", "hi")).await?.complete("hello").await?;
    ///
    /// let day = Duration::from_secs(24 * 3600);
    /// let policy = RetentionPolicy::new().rule(RetentionRule::all().transcripts(30 * day));
    /// assert_eq!(manager.apply_retention(&policy).await?.sessions, 0, "too recent");
    /// clock.advance(31 * day);
    /// let report = manager.apply_retention(&policy).await?;
    /// assert_eq!((report.sessions, report.transcripts), (1, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn apply_retention(&self, policy: &RetentionPolicy) -> Result<RetentionReport> {
        let mut report = RetentionReport::default();
        if policy.rules.is_empty() {
            return Ok(report);
        }
        let transcripts = Privacy(self).exportable_transcripts()?;
        let now_ms = self.seams.clock.now_millis();
        let cutoff = |keep: Duration| {
            now_ms.saturating_sub(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX))
        };
        let everything = ListFilter {
            status: StatusFilter::Any,
            ..ListFilter::new()
        };
        let current_filter = ListFilter {
            status: StatusFilter::Current,
            ..ListFilter::new()
        };
        let current: BTreeSet<String> = self
            .seams
            .store
            .list(&current_filter)
            .await?
            .into_iter()
            .map(|s| s.entry.session_id)
            .collect();
        let mut sessions = self.seams.store.list(&everything).await?;
        sessions.sort_by_key(|s| s.entry.updated_at);
        // Every session the store still knows: an archive of none of them (a deleted
        // session's, or one pushed out of its key's closed sessions) is judged alone.
        let known: BTreeSet<String> = sessions
            .iter()
            .map(|s| s.entry.session_id.clone())
            .collect();

        // What each session's rule says: remove it, cut it, or leave it.
        let mut removed_closed = Vec::new();
        let mut gone_ids: BTreeSet<String> = BTreeSet::new();
        let mut to_remove: Vec<StoredSession> = Vec::new();
        let mut to_cut: Vec<StoredSession> = Vec::new();
        for session in sessions {
            if removed_closed.len() + to_remove.len() + to_cut.len() >= policy.max_per_pass {
                break;
            }
            let Some(rule) = policy.rule_for(session.key.agent_id(), session.entry.channel_name())
            else {
                continue;
            };
            let is_current = current.contains(&session.entry.session_id);
            if !is_current {
                if rule
                    .closed_sessions
                    .is_some_and(|keep| session.entry.updated_at < cutoff(keep))
                {
                    gone_ids.insert(session.entry.session_id.clone());
                    removed_closed.push(session.entry.session_id.clone());
                }
                continue;
            }
            let Some(keep) = rule.transcripts else {
                continue;
            };
            if session.entry.updated_at >= cutoff(keep)
                || crate::exactly_once::holders::runs(&session.entry, self.seams.clock.now_millis())
            {
                continue;
            }
            gone_ids.insert(session.entry.session_id.clone());
            if rule.keep_summary {
                to_cut.push(session);
            } else {
                to_remove.push(session);
            }
        }

        // Entries first (a compare-and-set: one that changed since is left alone, its
        // conversation too), then what they pointed at.
        for session in to_remove {
            match self
                .seams
                .store
                .compare_and_set(&session.key, Some(session.revision), None)
                .await
            {
                Ok(_) => report.sessions += 1,
                Err(Error::Conflict { .. }) => {
                    gone_ids.remove(&session.entry.session_id);
                }
                Err(error) => return Err(error),
            }
        }
        if !removed_closed.is_empty() {
            report.closed_sessions += match self.seams.store.as_erase() {
                Some(store) => store.remove_closed(&removed_closed).await?,
                None => 0,
            };
        }
        // A session cut keeps its entry as it is: its next message starts a new
        // transcript under the same session id.
        let cut: BTreeSet<String> = to_cut.iter().map(|s| s.entry.session_id.clone()).collect();
        let mut was_cut = BTreeSet::new();
        if let Some(transcripts) = &transcripts {
            for (agent, name) in transcripts
                .transcript_names(self.settings.isolated_to.as_ref())
                .await?
            {
                let session_id = session_id_of_name(&name);
                if gone_ids.contains(&session_id) && transcripts.remove_named(&agent, &name).await?
                {
                    report.transcripts += 1;
                    if cut.contains(&session_id) {
                        was_cut.insert(session_id);
                    }
                    continue;
                }
                // An archive whose session the store no longer knows goes by its own
                // time, under the rule of its agent and channel.
                let Some(archived) = archived_at(&name).filter(|_| !known.contains(&session_id))
                else {
                    continue;
                };
                if report.transcripts >= policy.max_per_pass {
                    continue;
                }
                let channel = transcript_channel(&**transcripts, &agent, &name).await?;
                let too_old = policy
                    .rule_for(Some(agent.as_str()), channel.as_deref())
                    .and_then(|rule| rule.transcripts)
                    .is_some_and(|keep| archived < cutoff(keep));
                if too_old && transcripts.remove_named(&agent, &name).await? {
                    report.transcripts += 1;
                    gone_ids.insert(session_id);
                }
            }
        }
        report.cut = was_cut.len();
        if let Some(index) = self.backend_index().await? {
            let mut ids = Vec::new();
            for session_id in &gone_ids {
                for message in index
                    .messages(&SearchFilter::new().session(session_id))
                    .await?
                {
                    ids.push(message.id);
                }
            }
            if !ids.is_empty() {
                report.search_messages += index.remove(&ids).await?;
                index.flush().await?;
            }
        }

        // Group chatter, by the rule of its group's agent and channel.
        let isolated = self.settings.isolated_to.as_ref().map(AgentId::as_str);
        if policy.rules.iter().any(|rule| rule.group_chatter.is_some()) {
            report.chatter_entries += self
                .seams
                .history
                .edit_entries(&|group, entry| {
                    let mut parts = group.split(':');
                    let agent = parts.nth(1).map(|a| a.split('/').next().unwrap_or(a));
                    let channel = parts.next();
                    // A manager isolated to an agent keeps to that agent's groups.
                    if isolated.is_some_and(|only| agent != Some(only)) {
                        return ChatterEdit::Keep;
                    }
                    let too_old = policy
                        .rule_for(agent, channel)
                        .and_then(|rule| rule.group_chatter)
                        .is_some_and(|keep| entry.timestamp.is_some_and(|at| at < cutoff(keep)));
                    if too_old {
                        ChatterEdit::Remove
                    } else {
                        ChatterEdit::Keep
                    }
                })
                .await?;
        }
        if report != RetentionReport::default() {
            tracing::info!(
                sessions = report.sessions,
                cut = report.cut,
                closed = report.closed_sessions,
                transcripts = report.transcripts,
                "retention applied"
            );
        }
        Ok(report)
    }

    /// Applies `policy` every `interval` in the background, at most
    /// `policy.max_per_pass` sessions a pass (see
    /// [`apply_retention`](Self::apply_retention)); a pass that fails is logged and
    /// the next one tries again. Needs a Tokio runtime and a shared manager.
    pub fn spawn_retention(
        self: &std::sync::Arc<Self>,
        policy: RetentionPolicy,
        interval: Duration,
    ) -> RetentionSweep {
        let manager = std::sync::Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(10)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = manager.apply_retention(&policy).await {
                    tracing::warn!(%error, "the retention sweep failed; trying again next time");
                }
            }
        });
        RetentionSweep { task }
    }
}
