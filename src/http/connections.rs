//! The connections [`serve`](super::serve) holds: how many by default, and which go
//! first when they run out.
//!
//! Each open connection is a file descriptor, and so is every store file a request
//! opens: the default limit leaves room for those under the process's descriptor limit.
//! When every slot is taken, connections that are idle and have not shown the secret —
//! an attacker's half-sent requests, a port scanner's open sockets — are closed first,
//! so that callers with the secret get in.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use axum::http::{Request, StatusCode};
use tokio::sync::Notify;

use super::{Secret, DEFAULT_MAX_CONNECTIONS, SECRET_HEADER};

/// File descriptors left to store files, logs and the listener when the default
/// connection limit is derived from the process's limit: a quarter of it, at least 64.
fn descriptor_headroom(limit: u64) -> u64 {
    (limit / 4).max(64)
}

/// The default connection limit: `1024`, or fewer when the
/// process may open fewer files (`RLIMIT_NOFILE`, the soft limit), so that open
/// connections never take the descriptors the stores need.
///
/// ```
/// let limit = agent_sessions::http::default_max_connections();
/// assert!((1..=1024).contains(&limit));
/// ```
pub fn default_max_connections() -> usize {
    match open_files_limit() {
        Some(limit) => {
            let usable = limit.saturating_sub(descriptor_headroom(limit)).max(1);
            usize::try_from(usable)
                .unwrap_or(usize::MAX)
                .min(DEFAULT_MAX_CONNECTIONS)
        }
        None => DEFAULT_MAX_CONNECTIONS,
    }
}

/// The soft limit of open files of this process, where the platform tells it.
fn open_files_limit() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// One connection, as its requests tell it.
#[derive(Debug)]
pub(super) struct Connection {
    opened: Instant,
    /// Requests running on it now.
    in_flight: AtomicUsize,
    /// Whether one of its requests carried the secret (or, without a secret, was
    /// answered): a caller of the service, not a stranger.
    trusted: AtomicBool,
    /// Closes it.
    shed: Notify,
}

impl Connection {
    /// Completes when the connection is to be closed.
    pub(super) async fn shed(&self) {
        self.shed.notified().await;
    }
}

/// The open connections of one [`serve`](super::serve).
#[derive(Debug, Default)]
pub(super) struct Connections(Mutex<Vec<Weak<Connection>>>);

impl Connections {
    /// A new connection, tracked until dropped.
    pub(super) fn open(&self) -> Arc<Connection> {
        let connection = Arc::new(Connection {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            trusted: AtomicBool::new(false),
            shed: Notify::new(),
        });
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|c| c.strong_count() > 0);
        all.push(Arc::downgrade(&connection));
        connection
    }

    /// Closes the connections that run no request, have not shown the secret and are
    /// older than `grace`; how many.
    pub(super) fn shed_strangers(&self, grace: Duration) -> usize {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut shed = 0;
        for connection in all.iter().filter_map(Weak::upgrade) {
            let stranger = !connection.trusted.load(Ordering::Acquire)
                && connection.in_flight.load(Ordering::Acquire) == 0
                && connection.opened.elapsed() >= grace;
            if stranger {
                connection.shed.notify_one();
                shed += 1;
            }
        }
        shed
    }
}

/// A connection's service: `inner`, keeping the connection's state.
#[derive(Debug, Clone)]
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) connection: Arc<Connection>,
    pub(super) secret: Arc<Option<Secret>>,
}

/// A request running: the connection is busy until it is dropped.
struct Running(Arc<Connection>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S, B, R> hyper::service::Service<Request<B>> for Tracked<S>
where
    S: hyper::service::Service<Request<B>, Response = axum::http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        self.connection.in_flight.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.connection.clone());
        let shows_secret = match self.secret.as_ref() {
            Some(secret) => request
                .headers()
                .get(SECRET_HEADER)
                .is_some_and(|given| secret.matches(given.as_bytes())),
            None => true,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if shows_secret
                && response
                    .as_ref()
                    .is_ok_and(|r| r.status() != StatusCode::UNAUTHORIZED)
            {
                running.0.trusted.store(true, Ordering::Release);
            }
            drop(running);
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_leaves_room_for_the_stores() {
        // (the process's limit, the connections) — a quarter of the limit, at least 64
        // descriptors, are kept for store files.
        for (limit, connections) in [
            (1_024, 768),
            (256, 192),
            (100, 36),
            (64, 1),
            (65_536, DEFAULT_MAX_CONNECTIONS as u64),
        ] {
            let usable = limit - descriptor_headroom(limit);
            assert_eq!(
                usable.clamp(1, DEFAULT_MAX_CONNECTIONS as u64),
                connections,
                "{limit}"
            );
        }
        assert!(default_max_connections() >= 1);
    }

    #[tokio::test]
    async fn strangers_are_shed_and_callers_kept() {
        let connections = Connections::default();
        let stranger = connections.open();
        let caller = connections.open();
        caller.trusted.store(true, Ordering::Release);
        let busy = connections.open();
        busy.in_flight.fetch_add(1, Ordering::AcqRel);
        assert_eq!(
            connections.shed_strangers(Duration::from_secs(3600)),
            0,
            "too young"
        );
        assert_eq!(connections.shed_strangers(Duration::ZERO), 1);
        tokio::time::timeout(Duration::from_secs(1), stranger.shed())
            .await
            .expect("the stranger is told to close");
        drop(stranger);
        assert_eq!(connections.shed_strangers(Duration::ZERO), 0, "gone");
    }
}
