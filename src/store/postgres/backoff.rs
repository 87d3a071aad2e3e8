//! Backing off from a server that refuses connections: after a connect fails, the calls
//! that would connect again fail at once with that failure until a delay has passed,
//! the delay doubling from [`FIRST_DELAY`] to [`MAX_DELAY`] while the server goes on
//! refusing; the first connect that succeeds ends it. A failover or a restart is met
//! with a few attempts a second from each process, not one per call.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The wait after the first failed connect.
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(25);
/// The longest wait between two connects while the server refuses them.
pub(super) const MAX_DELAY: Duration = Duration::from_millis(400);

/// The connects of one store handle (and its clones) backing off.
#[derive(Debug, Default)]
pub(super) struct Backoff(Mutex<Option<Refusing>>);

#[derive(Debug)]
struct Refusing {
    /// No connect before this.
    until: Instant,
    delay: Duration,
    /// What the last connect failed with.
    failure: String,
    /// Whether that failure may pass by itself.
    transient: bool,
}

impl Backoff {
    /// What the last connect failed with and when to try again, while it is too early.
    pub(super) fn waiting(&self, now: Instant) -> Option<BackingOff> {
        let refusing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        refusing
            .as_ref()
            .filter(|refusing| now < refusing.until)
            .map(|refusing| BackingOff {
                failure: refusing.failure.clone(),
                transient: refusing.transient,
                retry_in: refusing.until - now,
            })
    }

    /// A connect failed with `failure` (`transient` when it may pass by itself): the
    /// next waits longer than the last.
    pub(super) fn failed(&self, now: Instant, failure: String, transient: bool) {
        let mut refusing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let delay = refusing
            .as_ref()
            .map_or(FIRST_DELAY, |last| (last.delay * 2).min(MAX_DELAY));
        *refusing = Some(Refusing {
            until: now + delay,
            delay,
            failure,
            transient,
        });
    }

    /// A connection was had: connects are tried at once again.
    pub(super) fn connected(&self) {
        let mut refusing = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if refusing.is_some() {
            *refusing = None;
        }
    }
}

/// A call refused without trying to connect, because the last connect failed moments
/// ago: the source of a transient [`Error::Database`](crate::Error::Database).
#[derive(Debug)]
pub(super) struct BackingOff {
    failure: String,
    transient: bool,
    retry_in: Duration,
}

impl BackingOff {
    /// Whether the failure it repeats may pass by itself.
    pub(super) fn transient(&self) -> bool {
        self.transient
    }
}

impl std::fmt::Display for BackingOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (not tried again for {} ms)",
            self.failure,
            self.retry_in.as_millis().max(1)
        )
    }
}

impl std::error::Error for BackingOff {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait doubles while connects fail, up to its bound, and a connection ends it.
    #[test]
    fn the_wait_doubles_to_its_bound_and_a_connection_ends_it() {
        let backoff = Backoff::default();
        let start = Instant::now();
        assert!(backoff.waiting(start).is_none(), "nothing failed yet");
        let mut waits = Vec::new();
        let mut now = start;
        for _ in 0..7 {
            backoff.failed(now, "refused".into(), true);
            let waiting = backoff.waiting(now).expect("too early");
            assert_eq!(
                waiting.to_string(),
                format!(
                    "refused (not tried again for {} ms)",
                    waiting.retry_in.as_millis()
                )
            );
            waits.push(waiting.retry_in);
            now += waiting.retry_in;
            assert!(backoff.waiting(now).is_none(), "time to try again");
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [25, 50, 100, 200, 400, 400, 400]);
        backoff.failed(now, "refused".into(), true);
        backoff.connected();
        assert!(backoff.waiting(now).is_none());
        backoff.failed(now, "refused".into(), true);
        assert_eq!(
            backoff.waiting(now).unwrap().retry_in,
            FIRST_DELAY,
            "from the start"
        );
    }
}
