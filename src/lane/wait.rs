//! Waiting for a place in a session's lane: a queued message's turn asks again when
//! this process ends a run of the session (it is woken at once) and every
//! [`POLL`] otherwise (a run in another process ends unannounced).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::identity::key::SessionKey;

/// How often a waiting turn asks the store again when nothing wakes it.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// The turns of this process waiting for a session's run, by key: woken when one of its
/// runs ends here.
#[derive(Debug, Default)]
pub(crate) struct Waker {
    waiting: Mutex<HashMap<SessionKey, Weak<Notify>>>,
}

impl Waker {
    /// What a turn waiting on `key` waits on.
    pub(crate) fn waiting_on(&self, key: &SessionKey) -> Arc<Notify> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(notify) = waiting.get(key).and_then(Weak::upgrade) {
            return notify;
        }
        // Keys nobody waits on any more go as new ones come.
        waiting.retain(|_, notify| notify.strong_count() > 0);
        let notify = Arc::new(Notify::new());
        waiting.insert(key.clone(), Arc::downgrade(&notify));
        notify
    }
}

/// Wakes the turns of this process waiting on `key`.
pub(crate) fn wake(waker: &Waker, key: &SessionKey) {
    let waiting = waker.waiting.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(notify) = waiting.get(key).and_then(Weak::upgrade) {
        notify.notify_waiters();
    }
}
