//! When this process leaves the store lock free for OpenClaw's waiters.
//!
//! OpenClaw's waiters look at the lock every 25 ms and nothing wakes them. This
//! crate's waiters are woken the moment one of its processes releases the lock (they
//! block on its OS lock), and a process's next writer takes it again at once, so
//! several busy processes of this crate could pass the lock among themselves for
//! longer than OpenClaw's 10 s timeout. To prevent that, a process that has seen
//! OpenClaw (any holder not of this crate) on the store recently gives a
//! *courtesy release* now and then: it removes the lock file but keeps this crate's
//! writers back — its own queue and, through the OS lock on the removed file, the other
//! processes' waiters — for a little longer than one OpenClaw poll interval, so every
//! waiting OpenClaw process looks at a free lock once.

use std::time::{Duration, Instant};

/// How long after it last saw another program's lock a process still gives courtesy
/// releases.
pub(super) const FOREIGN_ACTIVE: Duration = Duration::from_secs(60);

/// The longest stretch this process holds the lock, on and off, without another
/// program having it or being offered it.
pub(super) const COURTESY_EVERY: Duration = Duration::from_millis(250);

/// How long a courtesy release keeps this crate's writers back: one OpenClaw poll
/// interval (`poll_interval`) and a fifth more, so each of its waiters looks once.
pub(super) fn courtesy_window(poll_interval: Duration) -> Duration {
    poll_interval + poll_interval / 5
}

/// What this process knows of other programs writing one store file.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ForeignActivity {
    /// When another program last held the lock, as far as this process saw.
    seen_at: Option<Instant>,
    /// When this process last gave a courtesy release.
    courtesy_at: Option<Instant>,
}

impl ForeignActivity {
    /// Records that another program held the lock at `now`.
    pub(super) fn saw_foreign(&mut self, now: Instant) {
        self.seen_at = Some(now);
    }

    /// Whether the release at `now` is a courtesy release (and records it if so):
    /// another program was seen within [`FOREIGN_ACTIVE`], and neither did it hold the
    /// lock nor was it offered the lock within [`COURTESY_EVERY`].
    pub(super) fn courtesy_due(&mut self, now: Instant) -> bool {
        let Some(seen_at) = self.seen_at else {
            return false;
        };
        if now.saturating_duration_since(seen_at) > FOREIGN_ACTIVE {
            return false;
        }
        let last_turn = self.courtesy_at.map_or(seen_at, |at| at.max(seen_at));
        if now.saturating_duration_since(last_turn) < COURTESY_EVERY {
            return false;
        }
        self.courtesy_at = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_courtesy_release_comes_every_quarter_second_while_another_program_is_about() {
        // (when another program was seen, when the last courtesy was given, now — all in
        // ms from a common start; whether this release is a courtesy release)
        let cases: &[(Option<u64>, Option<u64>, u64, bool)] = &[
            (None, None, 10_000, false),
            (Some(0), None, 100, false),
            (Some(0), None, 249, false),
            (Some(0), None, 250, true),
            (Some(0), None, 60_000, true),
            (Some(0), None, 60_001, false),
            (Some(0), Some(1_000), 1_249, false),
            (Some(0), Some(1_000), 1_250, true),
            // Another program held the lock after the last courtesy: it had its turn.
            (Some(2_000), Some(1_000), 2_249, false),
            (Some(2_000), Some(1_000), 2_250, true),
            (Some(1_000), Some(58_000), 61_001, false),
        ];
        let start = Instant::now();
        for &(seen, courtesy, now, expected) in cases {
            let mut activity = ForeignActivity {
                seen_at: seen.map(|ms| start + Duration::from_millis(ms)),
                courtesy_at: courtesy.map(|ms| start + Duration::from_millis(ms)),
            };
            let now = start + Duration::from_millis(now);
            assert_eq!(
                activity.courtesy_due(now),
                expected,
                "seen {seen:?}, courtesy {courtesy:?}, now {now:?}"
            );
            if expected {
                assert_eq!(activity.courtesy_at, Some(now), "recorded");
                assert!(!activity.courtesy_due(now + MS), "not twice in a row");
            }
        }
    }

    #[test]
    fn the_window_lets_every_openclaw_waiter_look_once() {
        let cases = [(25, 30), (10, 12), (100, 120), (0, 0)];
        for (poll, window) in cases {
            assert_eq!(
                courtesy_window(Duration::from_millis(poll)),
                Duration::from_millis(window),
                "poll {poll} ms"
            );
        }
    }
}
