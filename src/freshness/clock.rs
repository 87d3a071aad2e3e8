//! Time, behind a trait, so every time decision can be tested (documented in the parent module).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> DateTime<Utc>;

    /// Now, in epoch milliseconds (the unit of `updatedAt`).
    fn now_millis(&self) -> u64 {
        to_millis(self.now())
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(now)))
    }

    /// A clock showing `epoch_ms`.
    pub fn at_millis(epoch_ms: u64) -> Self {
        ManualClock::new(from_millis(epoch_ms))
    }

    /// Sets the time.
    pub fn set(&self, now: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = now;
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *now += chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Epoch milliseconds of `time` (0 before 1970).
pub(crate) fn to_millis(time: DateTime<Utc>) -> u64 {
    u64::try_from(time.timestamp_millis()).unwrap_or(0)
}

/// The instant `epoch_ms` milliseconds after 1970 (saturating far in the future).
pub fn from_millis(epoch_ms: u64) -> DateTime<Utc> {
    i64::try_from(epoch_ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
