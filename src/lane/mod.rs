//! Turn lanes: one run per session on any number of workers, and what a message that
//! arrives during a run does.
//!
//! People do not wait for the bot: they write "I need to change my booking", then
//! "it's for Friday", then "actually make it Saturday" while the model still answers
//! the first. A session has at most one run at a time — across threads, processes and
//! hosts sharing the store. The run is taken in the same atomic update that resolves
//! the session (its holder, when it started, and a fencing token that only grows), and
//! given back by [`Turn::complete`](crate::manager::Turn::complete) or
//! [`Turn::fail`](crate::manager::Turn::fail). A message that arrives meanwhile follows
//! the session's queue mode ([`QueueMode`]):
//!
//! | mode | during the run | afterwards |
//! | --- | --- | --- |
//! | `collect` (the default) | queued | once the run ends and the debounce has passed with no new message, one follow-up turn answers every queued message together, in arrival order, and sees the finished run's reply |
//! | `followup` | queued | each queued message its own turn, in order |
//! | `steer` | handed to the running turn at its next tool boundary ([`Turn::steering`](crate::manager::Turn::steering)) | what the run did not take falls back to `followup` |
//! | `steer-backlog` | as `steer` | and also kept for a follow-up turn: a message the run took is answered twice, by the run and by its own turn |
//! | `interrupt` | the running turn is told ([`Turn::interrupted`](crate::manager::Turn::interrupted)) and its `complete` is refused; the newest message runs | — |
//!
//! A host changes nothing: every message still goes `turn` → `messages` →
//! `complete`. The `turn` of a queued message waits for its place and then either
//! becomes the follow-up turn ([`TurnAction::Answer`](crate::manager::TurnAction::Answer))
//! or says that its message was handled within another turn
//! ([`TurnAction::Queued`](crate::manager::TurnAction::Queued): nothing to send). A
//! queued message is kept in the session's entry, so it is acknowledged only once it is
//! durable; when the process waiting with it is killed, the next turn of the session
//! answers it (or [`SessionManager::take_queued`](crate::SessionManager::take_queued)
//! does, for a host that sweeps). A run whose holder died — its process killed, or,
//! on another host, silent past its lease — is taken over by the next turn, which
//! answers what the dead run was answering.
//!
//! The mode is the session's `queueMode` (set by `/queue <mode>` from a sender
//! allowed to reset, as in OpenClaw), else the manager's setting for the channel, else
//! the manager's default ([`QueueSettings`], from `openclaw.json`'s `messages.queue`
//! with [`SessionManager::connect_openclaw`](crate::SessionManager::connect_openclaw)).
//!
//! ```
//! use std::time::Duration;
//! use agent_sessions::lane::{QueueDrop, QueueMode, QueueSettings};
//!
//! let settings = QueueSettings::default();
//! assert_eq!(settings.mode, QueueMode::Collect);
//! assert_eq!(settings.debounce, Duration::from_millis(1_000));
//! assert_eq!((settings.cap, &settings.drop), (20, &QueueDrop::Summarize));
//!
//! // Telegram: each message its own turn, half a second apart at the least.
//! let settings = settings.by_channel(
//!     "telegram",
//!     QueueSettings::default().mode(QueueMode::Followup).debounce(Duration::from_millis(500)),
//! );
//! assert_eq!(settings.for_channel(Some("telegram")).mode, QueueMode::Followup);
//! ```

mod decide;
mod prompt;
mod run;
mod turn;
mod wait;

use std::time::Duration;

use indexmap::IndexMap;

pub use crate::store::entry::{QueueDrop, QueueMode};

#[cfg(feature = "http")]
pub(crate) use decide::live;
pub(crate) use decide::{
    answering, arrive, interrupted, queued_id, release, renew, steer, take, tracked_id, Arrival,
    Lane, Take,
};
pub(crate) use prompt::collected_input;
pub(crate) use run::{lane_channel, Lanes, Leases, Place, Resume, RunLease};
pub(crate) use wait::{wake, Waker};

/// The default quiet time before a follow-up turn starts (OpenClaw 2026.1.x:
/// `debounceMs` 1000).
pub const DEFAULT_QUEUE_DEBOUNCE: Duration = Duration::from_millis(1_000);

/// The default most messages queued per session (OpenClaw: `cap` 20).
pub const DEFAULT_QUEUE_CAP: usize = 20;

/// The highest cap a session's queue may have, whoever sets it (a `/queue cap:` from a
/// sender, the host's settings): the queue lives in the session's entry, which every
/// update of the session rewrites.
pub const MAX_QUEUE_CAP: usize = 100;

/// About the most bytes of messages one session's queue holds (the messages as stored):
/// past it, the oldest give way as the drop policy says, as past the cap. One message
/// is queued whatever its size.
pub const MAX_QUEUED_BYTES: usize = 256 * 1024;

/// How messages that arrive during a run are handled: the queue mode, the quiet time
/// before a follow-up turn, the most messages queued, and what overflows the cap —
/// with per-channel settings that win over these. `Default` is OpenClaw 2026.1.x's:
/// `collect`, 1,000 ms, 20, `summarize`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// What a message that arrives during a run does.
    pub mode: QueueMode,
    /// How long the queue must be quiet, once the run has ended, before a follow-up
    /// turn starts.
    pub debounce: Duration,
    /// The most messages queued per session (at least 1).
    pub cap: usize,
    /// What goes when the cap is reached: the oldest queued message (`old`), the new one
    /// (`new`), or the oldest, standing as one line in the follow-up's input
    /// (`summarize`).
    pub drop: QueueDrop,
    /// Settings for one channel (lower case), winning over these.
    pub by_channel: IndexMap<String, QueueSettings>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            mode: QueueMode::Collect,
            debounce: DEFAULT_QUEUE_DEBOUNCE,
            cap: DEFAULT_QUEUE_CAP,
            drop: QueueDrop::Summarize,
            by_channel: IndexMap::new(),
        }
    }
}

impl QueueSettings {
    /// These settings with `mode`.
    pub fn mode(mut self, mode: QueueMode) -> Self {
        self.mode = mode;
        self
    }

    /// These settings with a quiet time of `debounce` before a follow-up turn.
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// These settings with at most `cap` messages queued (at least 1, at most
    /// [`MAX_QUEUE_CAP`]).
    pub fn cap(mut self, cap: usize) -> Self {
        self.cap = cap.clamp(1, MAX_QUEUE_CAP);
        self
    }

    /// These settings with `drop` for what overflows the cap.
    pub fn drop_policy(mut self, drop: QueueDrop) -> Self {
        self.drop = drop;
        self
    }

    /// These settings, with `settings` for `channel`.
    pub fn by_channel(mut self, channel: impl AsRef<str>, settings: QueueSettings) -> Self {
        self.by_channel
            .insert(channel.as_ref().trim().to_lowercase(), settings);
        self
    }

    /// Refuses a mode or drop policy this version does not know
    /// ([`QueueMode::Other`], [`QueueDrop::Other`]), here or for a channel: the manager
    /// would otherwise follow `collect` or `summarize` without saying so.
    pub(crate) fn check(&self) -> crate::error::Result<()> {
        let problem = if matches!(self.mode, QueueMode::Other(_)) {
            "unknown queue mode: expected collect, followup, steer, steer-backlog or interrupt"
        } else if matches!(self.drop, QueueDrop::Other(_)) {
            "unknown drop policy: expected old, new or summarize"
        } else {
            return self.by_channel.values().try_for_each(QueueSettings::check);
        };
        Err(crate::Error::InvalidOption {
            option: "queue",
            problem,
        })
    }

    /// The settings for `channel`: its own, else these.
    pub fn for_channel(&self, channel: Option<&str>) -> &QueueSettings {
        channel
            .map(|c| c.trim().to_lowercase())
            .and_then(|c| self.by_channel.get(&c))
            .unwrap_or(self)
    }
}

/// What happened to a message that arrived during a run, when its turn did not answer
/// it ([`TurnAction::Queued`](crate::manager::TurnAction::Queued)): nothing to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueOutcome {
    /// Answered by another turn, together with other queued messages.
    Collected,
    /// Taken by the running turn at a tool boundary ([`QueueMode::Steer`]).
    Steered,
    /// Dropped by the queue's cap.
    Dropped,
}

impl QueueOutcome {
    /// Its name: `collected`, `steered` or `dropped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            QueueOutcome::Collected => "collected",
            QueueOutcome::Steered => "steered",
            QueueOutcome::Dropped => "dropped",
        }
    }
}

/// The queue settings a session follows: its own (`queueMode`, `queueDebounceMs`,
/// `queueCap`, `queueDrop`), else `settings` for its channel.
pub(crate) fn effective(
    entry: &crate::store::entry::SessionEntry,
    settings: &QueueSettings,
    channel: Option<&str>,
) -> Effective {
    let base = settings.for_channel(channel);
    Effective {
        mode: normalize(
            entry
                .queue_mode
                .clone()
                .unwrap_or_else(|| base.mode.clone()),
        ),
        debounce: entry
            .queue_debounce_ms
            .map_or(base.debounce, Duration::from_millis),
        cap: entry
            .queue_cap
            .map_or(base.cap, |cap| usize::try_from(cap).unwrap_or(usize::MAX))
            .clamp(1, MAX_QUEUE_CAP),
        drop: match entry
            .queue_drop
            .clone()
            .unwrap_or_else(|| base.drop.clone())
        {
            QueueDrop::Other(name) => {
                tracing::warn!(drop = %name, "unknown queue drop policy in a session entry: following summarize");
                QueueDrop::Summarize
            }
            drop => drop,
        },
    }
}

/// The modes OpenClaw names twice, as one: `steer+backlog` is `steer-backlog`, the
/// legacy `queue` is `steer`; a mode this version does not know (an entry written by a
/// newer OpenClaw, say) is `collect`, with a warning.
fn normalize(mode: QueueMode) -> QueueMode {
    match mode {
        QueueMode::SteerPlusBacklog => QueueMode::SteerBacklog,
        QueueMode::Queue => QueueMode::Steer,
        QueueMode::Other(name) => {
            tracing::warn!(mode = %name, "unknown queue mode in a session entry: following collect");
            QueueMode::Collect
        }
        other => other,
    }
}

/// The queue settings one session follows, resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Effective {
    pub(crate) mode: QueueMode,
    pub(crate) debounce: Duration,
    pub(crate) cap: usize,
    pub(crate) drop: QueueDrop,
}

/// The `/queue` command: `/queue <mode>` (and OpenClaw's options `debounce:<ms|2s>`,
/// `cap:<n>`, `drop:<old|new|summarize>`), parsed; `None` when `body` is no such
/// command. A mode or option that does not parse is `Some(Err(why))`.
pub(crate) fn queue_command(body: &str) -> Option<Result<QueueCommand, String>> {
    let mut words = body.split_whitespace();
    let command = words.next()?;
    if !command.eq_ignore_ascii_case("/queue") {
        return None;
    }
    let mut parsed = QueueCommand::default();
    for word in words {
        let lower = word.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("debounce:") {
            let ms = match value.strip_suffix("ms") {
                Some(ms) => ms.parse::<u64>().ok(),
                None => match value.strip_suffix('s') {
                    Some(s) => s.parse::<u64>().ok().map(|s| s * 1_000),
                    None => value.parse::<u64>().ok(),
                },
            };
            match ms {
                Some(ms) => parsed.debounce_ms = Some(ms),
                None => return Some(Err(format!("not a debounce: {word}"))),
            }
        } else if let Some(value) = lower.strip_prefix("cap:") {
            match value.parse::<u64>() {
                Ok(cap) if cap > 0 && cap <= MAX_QUEUE_CAP as u64 => parsed.cap = Some(cap),
                _ => return Some(Err(format!("not a cap: {word}"))),
            }
        } else if let Some(value) = lower.strip_prefix("drop:") {
            match QueueDrop::from(value) {
                QueueDrop::Other(_) => return Some(Err(format!("not a drop policy: {word}"))),
                drop => parsed.drop = Some(drop),
            }
        } else {
            match QueueMode::from(lower.as_str()) {
                QueueMode::Other(_) => return Some(Err(format!("not a queue mode: {word}"))),
                mode => parsed.mode = Some(mode),
            }
        }
    }
    Some(Ok(parsed))
}

/// What a `/queue` command sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct QueueCommand {
    pub(crate) mode: Option<QueueMode>,
    pub(crate) debounce_ms: Option<u64>,
    pub(crate) cap: Option<u64>,
    pub(crate) drop: Option<QueueDrop>,
}

impl QueueCommand {
    /// Sets it on `entry`, and says what the session follows now.
    pub(crate) fn apply(&self, entry: &mut crate::store::entry::SessionEntry) {
        if let Some(mode) = &self.mode {
            entry.queue_mode = Some(mode.clone());
        }
        if let Some(ms) = self.debounce_ms {
            entry.queue_debounce_ms = Some(ms);
        }
        if let Some(cap) = self.cap {
            entry.queue_cap = Some(cap);
        }
        if let Some(drop) = &self.drop {
            entry.queue_drop = Some(drop.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_command_sets_a_mode_and_openclaws_options() {
        let parsed = queue_command("/queue collect debounce:2s cap:25 drop:summarize")
            .unwrap()
            .unwrap();
        assert_eq!(parsed.mode, Some(QueueMode::Collect));
        assert_eq!(parsed.debounce_ms, Some(2_000));
        assert_eq!(parsed.cap, Some(25));
        assert_eq!(parsed.drop, Some(QueueDrop::Summarize));
        assert_eq!(
            queue_command("/QUEUE steer+backlog").unwrap().unwrap().mode,
            Some(QueueMode::SteerPlusBacklog)
        );
        assert_eq!(
            queue_command("/queue followup debounce:250ms")
                .unwrap()
                .unwrap()
                .debounce_ms,
            Some(250)
        );
        assert!(queue_command("/queue sideways").unwrap().is_err());
        assert!(queue_command("/queue cap:0").unwrap().is_err());
        assert!(
            queue_command("/queue cap:101").unwrap().is_err(),
            "over MAX_QUEUE_CAP"
        );
        assert!(queue_command("/queue cap:100").unwrap().is_ok());
        assert!(queue_command("hello /queue collect").is_none());
        assert!(queue_command("/queued").is_none());
    }

    #[test]
    fn a_sessions_own_settings_win_over_its_channels_and_the_default() {
        use crate::store::entry::SessionEntry;
        let settings = QueueSettings::default().by_channel(
            "Telegram",
            QueueSettings::default().mode(QueueMode::Followup).cap(5),
        );
        let mut entry = SessionEntry::new("s", 1);
        let on_sms = effective(&entry, &settings, Some("sms"));
        assert_eq!((on_sms.mode, on_sms.cap), (QueueMode::Collect, 20));
        let on_telegram = effective(&entry, &settings, Some("telegram"));
        assert_eq!(
            (on_telegram.mode, on_telegram.cap),
            (QueueMode::Followup, 5)
        );
        entry.queue_mode = Some(QueueMode::Queue);
        entry.queue_cap = Some(2);
        let own = effective(&entry, &settings, Some("telegram"));
        assert_eq!((own.mode, own.cap), (QueueMode::Steer, 2));
    }
}
