//! The sessions HTTP service (feature `http`): a session-kernel HTTP API
//! (`/kernel/sessions/…`) over any [`SessionManager`], for bots written in other
//! languages. The kernel API is the shape used by ClawOS-style agent hosts, where a
//! host asks a session "kernel" which session each message belongs to.
//!
//! [`router`] returns an axum [`Router`] a host can mount in its own server; [`serve`]
//! serves it with the protections only a server can give (a header read timeout, a
//! connection limit), and the CLI's `agent-sessions serve --store <url> --listen <addr>`
//! uses [`serve`]. The routes:
//!
//! | method | path | what it does |
//! | --- | --- | --- |
//! | `POST` | `/kernel/sessions/resolve` | which session a message belongs to (`decision`, `reason`, `session`) |
//! | `GET` | `/kernel/sessions/{id}` | one session by its id |
//! | `PATCH` | `/kernel/sessions/{id}` | records a turn: advances the turn count, regenerates the context summary |
//! | `POST` | `/kernel/sessions/{id}/close` | closes a session: its next message starts a new one |
//! | `GET` | `/kernel/sessions/{id}/events?from=` | the session's transcript events as server-sent events, then live; resumable with `Last-Event-ID` |
//! | `GET` | `/kernel/agents/{agent}/events?since=` | every session of an agent: `session` and `status` events and each session's lines, live; resumable with `Last-Event-ID` (at least once) |
//! | `GET` | `/kernel/keys/{key}/events?from=` | a session key's events across its sessions: a `session` event for each session it moves to (after a reset, a close, an expiry), then its lines, live; resumable with `Last-Event-ID` |
//! | `GET` | `/kernel/sessions?workspace_id=` | a workspace's sessions, most recently active first |
//! | `GET` | `/kernel/health` | liveness (needs no secret) |
//!
//! A workspace is an agent: `workspace_id` must be a valid agent id, and the message is
//! a direct message from `remote_jid` to that agent, keyed by the manager's key builder.
//! The default, `DmScope::PerChannelPeer`, is the kernel API's usual model: one session
//! per sender and channel (`agent:<workspace_id>:<channel>:dm:<remote_jid>`); under
//! `DmScope::Main` every direct message of a workspace shares its main session.
//!
//! With [`ServiceOptions::secret`] set (a [`Secret`], never empty), every call but
//! `health` needs the header `x-kernel-secret` with that value (401 otherwise). Bodies
//! over [`ServiceOptions::body_limit`] get 413; bodies slower than
//! [`ServiceOptions::body_read_timeout`] and requests slower than
//! [`ServiceOptions::request_timeout`] 408; malformed JSON 400 (422 for a well-formed
//! body with wrong fields); an unknown session 404. Every error response the router
//! produces — axum's own rejections included (a method a route does not serve, a path
//! that is not UTF-8) — is `{"ok": false, "error": {"code": …, "message": …}}`.
//! `docs/http-api.md` has the bodies and an OpenAPI description.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_sessions::http::{router, serve, Secret, ServiceOptions};
//! use agent_sessions::prelude::*;
//! use agent_sessions::freshness::ResetTriggers;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = SessionManager::builder(InMemoryStore::new())
//!     .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
//!     .reset_triggers(ResetTriggers::clawos())
//!     .build()?;
//! let options = ServiceOptions::default().secret(Secret::new("s3cret")?);
//! let app = router(Arc::new(manager), options.clone());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:18888").await?;
//! // Serves until the future completes: here never (a host passes its shutdown signal).
//! serve(listener, app, &options, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, SecondsFormat, Utc};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::Instrument;

use crate::error::Error;
use crate::freshness::{Clock, SystemClock};
use crate::identity::key::AgentId;
use crate::inbound::InboundMessage;
use crate::manager::{Resolution, SessionManager, TurnOutcome};
use crate::store::entry::{SessionEntry, SessionStatus};
use crate::store::{ListCursor, ListFilter, StatusFilter, StoredSession};

mod connections;
mod events;
#[cfg(feature = "inspector")]
mod inspector;
pub use events::MAX_EVENT_BYTES;
#[cfg(feature = "inspector")]
#[cfg_attr(docsrs, doc(cfg(feature = "inspector")))]
pub use inspector::Inspector;

pub use connections::default_max_connections;

/// The header that carries the shared secret.
pub const SECRET_HEADER: &str = "x-kernel-secret";

/// The default request body limit: 64 KiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// The default time a client has to send a request's headers, from the moment the
/// connection is ready for the next request: 10 s. A connection that sends nothing, or
/// half a header, is closed then.
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default time a client has to send a request's whole body: 30 s (408 then).
pub(crate) const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time a request may take from its headers to its response: 30 s (408
/// then).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The most connections [`serve`] holds open at once by default: 1,024, or fewer when
/// the process may open fewer files ([`default_max_connections`]). Further clients wait
/// in the listener's backlog until one closes.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The most event streams (`GET /kernel/sessions/{id}/events`) open at once by
/// default: 64. Each holds at most one chunk of its transcript
/// (256 KiB) in memory, read only
/// when its client has taken the last one; one more is answered 503.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 64;

/// How long [`serve`] waits for a free connection slot before it closes connections
/// that are idle and never showed the secret.
const SHED_CHECK: Duration = Duration::from_millis(250);

/// How old a connection must be before [`serve`] closes it to make room (one that just
/// opened has had no time to send its request).
const SHED_GRACE: Duration = Duration::from_secs(1);

/// A shared secret callers present in [`SECRET_HEADER`]; never empty or blank.
///
/// An empty secret would match a missing header and so let every caller in, so
/// [`Secret::new`] refuses it (and a secret no HTTP header can carry) with
/// [`Error::InvalidOption`]: a [`ServiceOptions`] either has a usable secret or none.
/// Its `Debug` output never shows the value.
///
/// ```
/// use agent_sessions::http::Secret;
/// use agent_sessions::Error;
///
/// assert!(Secret::new("s3cret").is_ok());
/// assert!(matches!(Secret::new("  "), Err(Error::InvalidOption { option: "secret", .. })));
/// let parsed: Secret = "s3cret".parse()?;
/// assert_eq!(format!("{parsed:?}"), "Secret(<redacted>)");
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// The secret `value`, or [`Error::InvalidOption`] if it is empty, only
    /// whitespace, or has a control character or leading or trailing whitespace (which
    /// an HTTP header cannot carry, so no caller could ever present it).
    pub fn new(value: impl Into<String>) -> Result<Secret, Error> {
        let value = value.into();
        let problem = if value.trim().is_empty() {
            "it is empty or only whitespace, which would let every caller in"
        } else if value.trim() != value || value.chars().any(char::is_control) {
            "it has leading or trailing whitespace or a control character, which an HTTP header cannot carry"
        } else {
            return Ok(Secret(value));
        };
        Err(Error::InvalidOption {
            option: "secret",
            problem,
        })
    }

    /// Whether `given` (a header's bytes) is this secret, compared in constant time.
    fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq(given, self.0.as_bytes())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = Error;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Secret::new(value)
    }
}

impl TryFrom<String> for Secret {
    type Error = Error;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Secret::new(value)
    }
}

impl TryFrom<&str> for Secret {
    type Error = Error;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Secret::new(value)
    }
}

/// How the service is protected: who may call it, and how much of the server one
/// client may hold and for how long.
///
/// [`router`] and [`serve`] take the same options; [`Default`] has no secret (bind to
/// loopback then) and the `DEFAULT_*` limits of this module.
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::http::{Secret, ServiceOptions};
///
/// let options = ServiceOptions::default()
///     .secret(Secret::new("s3cret")?)
///     .header_read_timeout(Duration::from_secs(5))
///     .max_connections(256);
/// assert!(options.validate().is_ok());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceOptions {
    /// The shared secret every call but `health` must present in [`SECRET_HEADER`];
    /// `None` (the default) requires none — bind to loopback then.
    pub secret: Option<Secret>,
    /// The largest request body accepted, in bytes (default [`DEFAULT_BODY_LIMIT`]).
    pub body_limit: usize,
    /// How long a client has to send a request's headers before [`serve`] closes the
    /// connection (default 10 seconds); idle keep-alive
    /// connections are closed after it too.
    pub header_read_timeout: Duration,
    /// How long a client has to send a request's body (default
    /// 30 seconds); 408 after it.
    pub body_read_timeout: Duration,
    /// How long a request may take from its headers to its response (default
    /// 30 seconds); 408 after it.
    pub request_timeout: Duration,
    /// How many connections [`serve`] holds open at once (default
    /// [`default_max_connections`]: 1,024, or fewer under a low limit of open files). A
    /// client following a session's events holds one for as long as it follows. When
    /// every one is taken, connections that are idle and never showed the secret are
    /// closed first.
    pub max_connections: usize,
    /// How many event streams are served at once (default
    /// [`DEFAULT_MAX_EVENT_STREAMS`]); set it with
    /// [`max_event_streams`](Self::max_event_streams).
    max_event_streams: usize,
    /// Ends the event streams of the routers built with these options.
    streams_end: events::StreamsEnd,
    /// What `GET /metrics` answers, if anything.
    metrics: Option<MetricsText>,
    /// The session inspector at `/ui`, if it is on.
    #[cfg(feature = "inspector")]
    inspector: Option<Inspector>,
    /// Host names [`serve`] answers besides loopback names and IP addresses (see
    /// [`allow_host`](Self::allow_host)).
    allowed_hosts: Vec<String>,
}

/// The text a `GET /metrics` answers with (see [`ServiceOptions::metrics_endpoint`]).
#[derive(Clone)]
struct MetricsText(Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for MetricsText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsText(..)")
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            secret: None,
            body_limit: DEFAULT_BODY_LIMIT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: default_max_connections(),
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            streams_end: events::StreamsEnd::default(),
            metrics: None,
            #[cfg(feature = "inspector")]
            inspector: None,
            allowed_hosts: Vec::new(),
        }
    }
}

impl ServiceOptions {
    /// Requires `secret` in [`SECRET_HEADER`] on every call but `health`.
    ///
    /// ```
    /// use agent_sessions::http::{Secret, ServiceOptions};
    ///
    /// let options = ServiceOptions::default().secret(Secret::new("s3cret")?);
    /// assert!(options.secret.is_some());
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn secret(mut self, secret: Secret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// Lets [`serve`] answer requests addressed to host `name` (say, `sessions.internal`
    /// behind a proxy). By default it answers only requests whose `Host` is an IP
    /// address or a loopback name (`localhost`): a web page whose domain an attacker
    /// points at the service's address (DNS rebinding) is refused with 421, so a
    /// browser on the same machine cannot be made to call a service without a secret.
    ///
    /// ```
    /// use agent_sessions::http::ServiceOptions;
    ///
    /// let options = ServiceOptions::default().allow_host("sessions.internal");
    /// assert!(options.validate().is_ok());
    /// ```
    pub fn allow_host(mut self, name: impl Into<String>) -> Self {
        let name = name.into().trim().to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
        self.allowed_hosts.push(name);
        self
    }

    /// Accepts request bodies of at most `bytes`.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Closes a connection whose next request's headers have not all arrived within
    /// `timeout`.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Answers 408 when a request's body has not all arrived within `timeout`.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// Answers 408 when a request has not been answered within `timeout` of its
    /// headers.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Holds at most `connections` connections open at once.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// Serves at most `streams` event streams at once (default
    /// [`DEFAULT_MAX_EVENT_STREAMS`]); one more is answered 503 with `Retry-After`.
    pub fn max_event_streams(mut self, streams: usize) -> Self {
        self.max_event_streams = streams;
        self.streams_end.limit(streams);
        self
    }

    #[cfg(feature = "inspector")]
    #[cfg_attr(docsrs, doc(cfg(feature = "inspector")))]
    /// Serves the session inspector, a web page for operators, at `/ui` (see
    /// [`Inspector`]); it needs a [`secret`](Self::secret), the password of its login
    /// form.
    pub fn inspector(mut self, inspector: Inspector) -> Self {
        self.inspector = Some(inspector);
        self
    }

    /// Serves `GET /metrics` with the text `render` returns, as
    /// `text/plain; version=0.0.4` (the Prometheus text format), behind the secret like
    /// every call but `health`. The CLI's `serve --metrics` passes a Prometheus
    /// recorder's rendering; a host passes its own.
    ///
    /// ```
    /// use agent_sessions::http::ServiceOptions;
    ///
    /// let options = ServiceOptions::default().metrics_endpoint(|| "turns_total 3\n".to_owned());
    /// # let _ = options;
    /// ```
    pub fn metrics_endpoint(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.metrics = Some(MetricsText(Arc::new(render)));
        self
    }

    /// Ends the open event streams (`GET /kernel/sessions/{id}/events`) of every router
    /// built with these options or a clone of them, and the streams opened later. [`serve`]
    /// does it when it shuts down; a host serving the router itself calls it before
    /// waiting for its connections to close.
    pub fn end_event_streams(&self) {
        self.streams_end.fire();
    }
}

impl ServiceOptions {
    /// Checks that a service can run with these options: a connection limit of at
    /// least one (and at most [`Semaphore::MAX_PERMITS`]) and timeouts above zero;
    /// [`Error::InvalidOption`] otherwise. [`serve`] calls it first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_sessions::http::ServiceOptions;
    ///
    /// assert!(ServiceOptions::default().validate().is_ok());
    /// assert!(ServiceOptions::default().max_connections(0).validate().is_err());
    /// assert!(ServiceOptions::default().request_timeout(Duration::ZERO).validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let refuse = |option, problem| Err(Error::InvalidOption { option, problem });
        if self.max_connections == 0 || self.max_connections > Semaphore::MAX_PERMITS {
            return refuse(
                "max_connections",
                "it must be at least 1 (and at most usize::MAX >> 3)",
            );
        }
        if self.max_event_streams == 0 || self.max_event_streams > Semaphore::MAX_PERMITS {
            return refuse(
                "max_event_streams",
                "it must be at least 1 (and at most usize::MAX >> 3)",
            );
        }
        #[cfg(feature = "inspector")]
        if self.inspector.is_some() && self.secret.is_none() {
            return refuse(
                "inspector",
                "the inspector needs a secret: it is the password of its login form",
            );
        }
        if !self.allowed_hosts.iter().all(|name| host_name(name)) {
            return refuse(
                "allow_host",
                "a host name is letters, digits, `-` and dots between non-empty labels \
                 (no wildcard, no port)",
            );
        }
        for (option, timeout) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if timeout.is_zero() {
                return refuse(option, "a timeout of zero would refuse every request");
            }
        }
        Ok(())
    }
}

/// Serves `app` (usually [`router`]'s, built with the same `options`) on `listener`
/// until `shutdown` completes, then finishes the requests in flight and returns.
///
/// It adds what only the server can enforce: a connection whose next request's
/// headers have not all arrived within [`ServiceOptions::header_read_timeout`] is
/// closed (an idle or half-sent connection holds nothing for long), and at most
/// [`ServiceOptions::max_connections`] connections are open at once — further clients
/// wait in the listener's backlog, using no file descriptor of the process, until one
/// closes. The body and whole-request timeouts are [`router`]'s, so a host that nests
/// the router in its own server keeps them. HTTP/1.1 only.
///
/// A failed `accept` (out of file descriptors, say) is logged and retried after a
/// short pause, never returned. The error is [`Error::InvalidOption`] when
/// [`ServiceOptions::validate`] refuses `options`.
///
/// ```no_run
/// use std::sync::Arc;
/// use agent_sessions::http::{router, serve, ServiceOptions};
/// use agent_sessions::prelude::*;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = Arc::new(SessionManager::builder(InMemoryStore::new()).build()?);
/// let options = ServiceOptions::default();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:18888").await?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # drop(stop);
/// serve(listener, router(manager, options.clone()), &options, async {
///     let _ = stopped.await; // `stop.send(())` elsewhere finishes the service
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn serve<F>(
    listener: TcpListener,
    app: Router,
    options: &ServiceOptions,
    shutdown: F,
) -> Result<(), Error>
where
    F: Future<Output = ()> + Send,
{
    options.validate()?;
    if options.secret.is_none() {
        if let Ok(address) = listener.local_addr() {
            if !address.ip().to_canonical().is_loopback() {
                tracing::warn!(%address, "serving the sessions API without a secret on an address others can reach");
            }
        }
    }
    let app = app.layer(axum::middleware::from_fn_with_state(
        Arc::new(options.allowed_hosts.clone()),
        require_known_host,
    ));
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let connections = GracefulShutdown::new();
    let open = connections::Connections::default();
    let secret = Arc::new(options.secret.clone());
    tokio::pin!(shutdown);
    loop {
        // A slot first, then a connection: over the limit, clients wait in the backlog,
        // and connections that are idle and never showed the secret make room.
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = tokio::time::sleep(SHED_CHECK) => {
                let shed = open.shed_strangers(SHED_GRACE);
                if shed > 0 {
                    tracing::info!(shed, "every connection taken: closed the idle ones that showed no secret");
                    crate::ops::telemetry::connections_shed(shed);
                }
                continue;
            }
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    pause_after_failed_accept(error).await;
                    continue;
                }
            },
        };
        // Best effort: a socket that refuses it still works, a little slower.
        let _ = stream.set_nodelay(true);
        let state = open.open();
        let service = connections::Tracked {
            inner: TowerToHyperService::new(app.clone()),
            connection: state.clone(),
            secret: secret.clone(),
        };
        let connection = connections.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            tokio::select! {
                ended = connection => {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "an HTTP connection ended with an error");
                    }
                }
                // Dropping the connection closes it.
                () = state.shed() => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    options.end_event_streams();
    connections.shutdown().await;
    Ok(())
}

/// Waits a little after `accept` failed for a reason other than the one connection
/// (out of file descriptors, say), so the loop does not spin while it lasts.
async fn pause_after_failed_accept(error: std::io::Error) {
    use std::io::ErrorKind;

    match error.kind() {
        ErrorKind::ConnectionAborted
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionRefused
        | ErrorKind::Interrupted => {}
        _ => {
            tracing::warn!(%error, "accepting a connection failed; retrying shortly");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The kernel API as a router over `manager`; serve it with [`serve`] or nest it in a
/// host's router.
///
/// The router itself enforces the secret, the body limit, the body and whole-request
/// timeouts, and the JSON shape of every error it answers; the header read timeout and
/// the connection limit need the server, which [`serve`] provides.
pub fn router(manager: Arc<SessionManager>, options: ServiceOptions) -> Router {
    #[cfg(feature = "inspector")]
    let inspector = match (options.inspector, &options.secret) {
        (Some(inspector), Some(secret)) => Some(inspector::routes(
            manager.clone(),
            secret.clone(),
            inspector,
            options.streams_end.clone(),
        )),
        (Some(_), None) => {
            tracing::error!("the inspector needs a secret (ServiceOptions::secret): it is off");
            None
        }
        (None, _) => None,
    };
    let secret: Arc<Option<Secret>> = Arc::new(options.secret);
    let streams_end = options.streams_end;
    let key_streams_end = streams_end.clone();
    let agent_streams_end = streams_end.clone();
    let mut sessions = Router::new()
        .route("/kernel/sessions", get(list_sessions))
        .route("/kernel/sessions/resolve", post(resolve))
        .route("/kernel/sessions/{id}", get(get_session).patch(record_turn))
        .route("/kernel/sessions/{id}/close", post(close_session))
        .route(
            "/kernel/sessions/{id}/events",
            get(
                move |State(manager): State<Arc<SessionManager>>,
                      Path(id): Path<String>,
                      headers: HeaderMap,
                      query: Result<Query<events::EventsQuery>, QueryRejection>| {
                    events::session_events(manager, streams_end.clone(), id, headers, query)
                },
            ),
        )
        .route(
            "/kernel/agents/{agent}/events",
            get(
                move |State(manager): State<Arc<SessionManager>>,
                      Path(agent): Path<String>,
                      headers: HeaderMap,
                      query: Result<Query<events::AgentEventsQuery>, QueryRejection>| {
                    events::agent_events(manager, agent_streams_end.clone(), agent, headers, query)
                },
            ),
        )
        .route(
            "/kernel/keys/{key}/events",
            get(
                move |State(manager): State<Arc<SessionManager>>,
                      Path(key): Path<String>,
                      headers: HeaderMap,
                      query: Result<Query<events::KeyEventsQuery>, QueryRejection>| {
                    events::key_events(manager, key_streams_end.clone(), key, headers, query)
                },
            ),
        );
    if let Some(MetricsText(render)) = options.metrics {
        sessions = sessions.route(
            "/metrics",
            get(move || {
                let text = render();
                async move {
                    (
                        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                        text,
                    )
                }
            }),
        );
    }
    let sessions = sessions
        // Layers added later run first: the secret is checked before a body is read.
        .route_layer(middleware::from_fn_with_state(
            BodyLimits {
                bytes: options.body_limit,
                time: options.body_read_timeout,
            },
            read_body,
        ))
        .route_layer(middleware::from_fn_with_state(secret, require_secret))
        .with_state(manager);
    let app = Router::new()
        .route("/kernel/health", get(health))
        .merge(sessions);
    #[cfg(feature = "inspector")]
    let app = match inspector {
        Some(inspector) => app.merge(inspector),
        None => app,
    };
    app.fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(DefaultBodyLimit::max(options.body_limit))
        .layer(middleware::from_fn_with_state(
            options.request_timeout,
            limit_request_time,
        ))
        .layer(middleware::map_response(json_errors))
        .layer(middleware::from_fn(trace_request))
}

/// Runs the request in its `http.request` span: method, route template, status.
async fn trace_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("(none)", |path| path.as_str())
        .to_owned();
    let span = tracing::info_span!(
        target: "agent_sessions",
        "http.request",
        method = %request.method(),
        route,
        status = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    span.record("status", response.status().as_u16());
    response
}

/// `POST /kernel/sessions/resolve`'s body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveRequest {
    /// The workspace (an agent id) the sender talks to.
    pub workspace_id: String,
    /// The channel (`whatsapp`, `sms`, `telegram`, …).
    pub channel: String,
    /// The sender on that channel (`+15550001234`, a chat id, …).
    pub remote_jid: String,
    /// The message text (reset phrases are recognised in it).
    pub user_message: String,
}

/// `PATCH /kernel/sessions/{id}`'s body: the exchange of the turn just finished.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnRequest {
    /// When given, the session must belong to this workspace (404 otherwise).
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// What the user said.
    pub user_message: String,
    /// What the assistant answered.
    pub assistant_response: String,
    /// What kind of action the turn was (`search`, `file_op`, …); logged, not stored.
    #[serde(default)]
    pub action_type: Option<String>,
}

/// A session as the kernel API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// The session's id (a new one after every reset).
    pub session_id: String,
    /// The session key it lives under.
    pub session_key: String,
    /// The workspace (agent id).
    pub workspace_id: String,
    /// The channel of its origin.
    pub channel: String,
    /// The sender it talks with.
    pub remote_jid: String,
    /// `active` or `closed`.
    pub status: String,
    /// Turns recorded.
    pub turn_count: u64,
    /// The context summary (≤ 1,000 characters): of the exchanges the bridge recorded
    /// (`PATCH`), or of what turns' context windows cut; empty before either.
    pub context_summary: String,
    /// When the session started (RFC 3339, UTC).
    pub created_at: String,
    /// When it last had a message (RFC 3339, UTC).
    pub last_message_at: String,
    /// Since when a model run holds the session (RFC 3339, UTC); absent between runs and
    /// when the run's holder is gone (the session's next message takes it over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_started_at: Option<String>,
    /// Messages that arrived during the run and wait for it to end.
    #[serde(default)]
    pub queued_messages: usize,
    /// Messages the queue's cap dropped since the last follow-up turn.
    #[serde(default)]
    pub dropped_messages: u64,
}

impl SessionView {
    /// The view of a stored session.
    pub fn of(session: &StoredSession) -> Self {
        let entry: &SessionEntry = &session.entry;
        let origin = entry.origin.as_ref();
        let remote_jid = origin
            .and_then(|o| o.from.clone())
            .or_else(|| {
                let rest = session.key.rest()?;
                rest.rsplit(':').next().map(str::to_owned)
            })
            .unwrap_or_default();
        SessionView {
            session_id: entry.session_id.clone(),
            session_key: session.key.to_string(),
            workspace_id: session.key.agent_id().unwrap_or_default().to_owned(),
            channel: entry.channel_name().unwrap_or_default().to_owned(),
            remote_jid,
            status: entry
                .status
                .as_ref()
                .map_or("active", |status| status.clawos())
                .to_owned(),
            turn_count: entry.turn_count.unwrap_or(0),
            context_summary: entry.context_summary.clone().unwrap_or_default(),
            created_at: timestamp(entry.session_started_at.unwrap_or(entry.updated_at)),
            last_message_at: timestamp(entry.updated_at),
            run_started_at: entry
                .run
                .as_ref()
                .filter(|_| crate::lane::live(entry, SystemClock.now_millis()))
                .map(|run| timestamp(run.started_at)),
            queued_messages: entry.queued.len(),
            dropped_messages: entry.queue_dropped.as_ref().map_or(0, |d| d.count),
        }
    }
}

/// Epoch milliseconds as RFC 3339 with milliseconds (`2026-02-23T10:00:00.000Z`).
fn timestamp(epoch_ms: u64) -> String {
    i64::try_from(epoch_ms)
        .ok()
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An error response: a status and `{"ok": false, "error": {"code", "message"}}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// No session, current or closed, has `id`.
    fn unknown_session(id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!("no session has the id {id:?}"),
        )
    }

    /// No current session has `id` (a closed one may: it cannot take turns).
    fn no_current_session(id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!("no current session has the id {id:?}"),
        )
    }
}

/// Marks a response already in the error shape, so [`json_errors`] leaves it alone.
#[derive(Debug, Clone, Copy)]
struct ErrorShaped;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "ok": false,
            "error": { "code": self.code, "message": self.message },
        });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // Busy for a moment (a lock, a database restarting, no file descriptor
            // left): a client may come back.
            response
                .headers_mut()
                .insert(RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        response.extensions_mut().insert(ErrorShaped);
        response
    }
}

/// The error code for a status that axum or hyper produced rather than a handler.
fn code_for(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "access_denied",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_json",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        status if status.is_server_error() => "internal",
        _ => "invalid_request",
    }
}

/// The longest plain-text rejection whose text becomes an error's message.
const MAX_REJECTION_TEXT: usize = 4096;

/// Puts every error response not already in the error shape into it: axum's own
/// rejections (a path that is not UTF-8, a method a route does not serve, …) answer in
/// plain text or with an empty body. The status and headers (such as `Allow`) are kept;
/// the plain text, when there is any, becomes the message.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_error = status.is_client_error() || status.is_server_error();
    if !is_error || response.extensions().get::<ErrorShaped>().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let message = match (text.is_empty(), parts.headers.get(ALLOW)) {
        (false, _) => text,
        (true, Some(allowed)) if status == StatusCode::METHOD_NOT_ALLOWED => format!(
            "this route does not serve that method; it serves {}",
            String::from_utf8_lossy(allowed.as_bytes())
        ),
        (true, _) => status
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_owned(),
    };
    let mut shaped = ApiError::new(status, code_for(status), message).into_response();
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            shaped.headers_mut().append(name.clone(), value.clone());
        }
    }
    shaped
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        match &error {
            // A stored transcript location the store refuses (a state directory moved
            // since, a hand-edited entry) is the service's problem, and names a path.
            Error::InvalidId {
                kind: crate::error::IdKind::SessionFile,
                ..
            } => {
                tracing::error!(%error, "a session's stored transcript location is refused; `doctor` reports it");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the session's stored transcript location is refused; see the service log",
                )
            }
            Error::InvalidKey { .. }
            | Error::InvalidId { .. }
            | Error::InvalidLabel { .. }
            | Error::UnknownChannel { .. } => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                error.to_string(),
            ),
            Error::AccessDenied { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "access_denied", error.to_string())
            }
            Error::NotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_session", error.to_string())
            }
            _ if error.is_transient() => {
                tracing::warn!(%error, "a sessions call failed; the client may retry");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the session store is busy; retry",
                )
            }
            _ => {
                // The error may name files or servers: logged here, not sent.
                tracing::error!(%error, "a sessions call failed");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the session store failed; see the service log",
                )
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "invalid_json",
        };
        ApiError::new(status, code, rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            rejection.body_text(),
        )
    }
}

type ApiResult = Result<Json<serde_json::Value>, ApiError>;

/// Refuses a request whose `Host` names neither an IP address, nor a loopback name,
/// nor a host allowed by [`ServiceOptions::allow_host`] (421): what a page served from
/// an attacker's domain, pointed at this address, sends.
async fn require_known_host(
    State(allowed): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let mut hosts = request.headers().get_all(axum::http::header::HOST).iter();
    let (header, again) = (hosts.next(), hosts.next());
    if again.is_some() {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "a request has one Host header",
        )
        .into_response();
    }
    let header = header.map(|value| value.to_str().ok());
    // A request in absolute form (`GET http://name/…`) names its host twice: both
    // must be known.
    let target = request
        .uri()
        .authority()
        .map(|authority| authority.as_str());
    let known = match (header, target) {
        (Some(None), _) | (None, None) => false,
        (Some(Some(host)), target) => {
            known_host(host, &allowed) && target.is_none_or(|t| known_host(t, &allowed))
        }
        (None, Some(target)) => known_host(target, &allowed),
    };
    if known {
        return next.run(request).await;
    }
    ApiError::new(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected_request",
        "this service answers requests to its address or a loopback name; \
         allow other host names with --allow-host",
    )
    .into_response()
}

/// Whether `host` (a `Host` header: a name or an address, with an optional port) is an
/// IP address, a loopback name, or one of `allowed`.
fn known_host(host: &str, allowed: &[String]) -> bool {
    let host = host.trim();
    // `[::1]:8080`, `[::1]`, `127.0.0.1:8080`, `name:8080`, `name`.
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((address, _)) => return address.parse::<std::net::Ipv6Addr>().is_ok(),
            None => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    // One trailing dot names the same host (`localhost.`); anything else odd is unknown.
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if !host_name(&name) {
        return false;
    }
    name == "localhost" || name.ends_with(".localhost") || allowed.contains(&name)
}

/// Whether `name` is a host name: dot-separated labels of letters, digits and `-`.
fn host_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Rejects calls without the configured secret (compared in constant time), or with
/// more than one: a proxy and a client that disagree are not judged by the first.
async fn require_secret(
    State(secret): State<Arc<Option<Secret>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(expected) = secret.as_ref() {
        let mut sent = request.headers().get_all(SECRET_HEADER).iter();
        let (first, again) = (sent.next(), sent.next());
        let given = first
            .filter(|_| again.is_none())
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if !expected.matches(given) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("missing or wrong {SECRET_HEADER} header"),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// How much of a request body [`read_body`] takes, and for how long it waits for it.
#[derive(Debug, Clone, Copy)]
struct BodyLimits {
    bytes: usize,
    time: Duration,
}

/// Reads the whole request body before the handler runs: at most `bytes` of it (a
/// `content-length` over that is refused before a byte of the body is read), within
/// `time` (408 after it).
async fn read_body(State(limits): State<BodyLimits>, request: Request, next: Next) -> Response {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the request body is over the limit of {} bytes",
                limits.bytes
            ),
        )
        .into_response()
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.bytes as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let read = tokio::time::timeout(limits.time, Limited::new(body, limits.bytes).collect());
    match read.await {
        Ok(Ok(collected)) => {
            let body = Body::from(collected.to_bytes());
            next.run(Request::from_parts(parts, body)).await
        }
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => too_large(),
        Ok(Err(error)) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the request body could not be read: {error}"),
        )
        .into_response(),
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} ms",
                limits.time.as_millis()
            ),
        )
        .into_response(),
    }
}

/// Answers 408 when the rest of the stack has not answered within `limit`.
///
/// The handler is dropped then, as it would be if the client hung up: every manager
/// call is safe to cancel at an await point.
async fn limit_request_time(
    State(limit): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request was not answered within {} ms",
                limit.as_millis()
            ),
        )
        .into_response(),
    }
}

/// Equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

fn workspace(raw: &str) -> Result<AgentId, ApiError> {
    AgentId::new(raw).map_err(|error| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("workspace_id: {error}"),
        )
    })
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({
        "ok": true,
        "service": "agent-sessions",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

async fn resolve(
    State(manager): State<Arc<SessionManager>>,
    body: Result<Json<ResolveRequest>, JsonRejection>,
) -> ApiResult {
    let Json(request) = body?;
    let agent = workspace(&request.workspace_id)?;
    if request.remote_jid.trim().is_empty() || request.channel.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "channel and remote_jid must not be empty",
        ));
    }
    let message = InboundMessage::direct(
        request.channel.trim(),
        request.remote_jid.trim(),
        request.user_message,
    )
    .with_agent(agent.as_str());
    let resolution: Resolution = manager.resolve(&message).await?;
    Ok(Json(json!({
        "ok": true,
        "session_id": resolution.session_id(),
        "decision": resolution.decision,
        "reason": resolution.reason,
        "session": SessionView::of(&resolution.session),
    })))
}

/// The current session with `id`, or 404; 400 for an id with a control character,
/// which no session has and which some stores refuse outright (PostgreSQL and NUL).
async fn find(manager: &SessionManager, id: &str) -> Result<StoredSession, ApiError> {
    check_id(id)?;
    manager
        .find_session(id, StatusFilter::Current)
        .await?
        .ok_or_else(|| ApiError::no_current_session(id))
}

/// The session with `id`, current or closed (replaced by a reset or a timeout), or 404.
async fn find_any(manager: &SessionManager, id: &str) -> Result<StoredSession, ApiError> {
    check_id(id)?;
    manager
        .find_session(id, StatusFilter::Any)
        .await?
        .ok_or_else(|| ApiError::unknown_session(id))
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if id.chars().any(char::is_control) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "a session id has no control characters",
        ));
    }
    Ok(())
}

fn session_body(session: &StoredSession) -> Json<serde_json::Value> {
    Json(json!({
        "ok": true,
        "session_id": session.entry.session_id,
        "session": SessionView::of(session),
    }))
}

async fn get_session(
    State(manager): State<Arc<SessionManager>>,
    Path(id): Path<String>,
) -> ApiResult {
    Ok(session_body(&find_any(&manager, &id).await?))
}

async fn record_turn(
    State(manager): State<Arc<SessionManager>>,
    Path(id): Path<String>,
    body: Result<Json<TurnRequest>, JsonRejection>,
) -> ApiResult {
    let Json(turn) = body?;
    let session = find(&manager, &id).await?;
    if let Some(raw) = &turn.workspace_id {
        if session.key.agent_id() != Some(workspace(raw)?.as_str()) {
            return Err(ApiError::no_current_session(&id));
        }
    }
    tracing::debug!(session_id = %id, action_type = ?turn.action_type, "turn recorded over HTTP");
    let outcome =
        TurnOutcome::completed().with_exchange(turn.user_message, turn.assistant_response);
    // Recorded only if the session is still the key's current one: a reset between
    // the lookup and the update leaves its successor as it was.
    let updated = manager
        .session(&session.key)
        .record_turn_of(Some(&id), outcome)
        .await
        .map_err(|error| match error {
            Error::NotFound { .. } => ApiError::no_current_session(&id),
            error => error.into(),
        })?;
    Ok(session_body(&updated))
}

async fn close_session(
    State(manager): State<Arc<SessionManager>>,
    Path(id): Path<String>,
) -> ApiResult {
    let session = find(&manager, &id).await?;
    // Closed only if it is still the key's current session (not its successor after
    // a reset meanwhile).
    let closed = manager
        .session(&session.key)
        .close_if_current(&id)
        .await
        .map_err(|error| match error {
            Error::NotFound { .. } => ApiError::no_current_session(&id),
            error => error.into(),
        })?;
    Ok(session_body(&closed))
}

/// The sessions a page of `GET /kernel/sessions` holds when the request names no
/// `limit`.
const DEFAULT_PAGE: usize = 100;
/// The most sessions a page holds, whatever the request's `limit`.
const MAX_PAGE: usize = 1_000;

/// `GET /kernel/sessions`'s query.
#[derive(Debug, Deserialize)]
struct ListQuery {
    workspace_id: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

/// The sessions a `status` query selects: none lists the current session of each key
/// (as before closed sessions were kept), `active` the sessions that are not closed,
/// `closed` the closed ones (sessions replaced by a reset or a timeout too), `all`
/// every one.
fn status_filter(status: Option<&str>) -> Result<StatusFilter, ApiError> {
    match status.map(str::trim) {
        None | Some("") => Ok(StatusFilter::Current),
        Some("active") => Ok(StatusFilter::Only(vec![
            SessionStatus::Idle,
            SessionStatus::Running,
            SessionStatus::AwaitingApproval,
            SessionStatus::Inactive,
        ])),
        Some("closed") => Ok(StatusFilter::Only(vec![SessionStatus::Closed])),
        Some("all") => Ok(StatusFilter::Any),
        Some(other) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("status must be active, closed or all, not {other:?}"),
        )),
    }
}

async fn list_sessions(
    State(manager): State<Arc<SessionManager>>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let mut filter = ListFilter::new().agent(workspace(&query.workspace_id)?);
    filter.status = status_filter(query.status.as_deref())?;
    // An empty page would read as the last one.
    if query.limit == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("limit must be 1 to {MAX_PAGE}"),
        ));
    }
    let page = query.limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE);
    // One more than the page, to know whether another page follows.
    filter.limit = Some(page + 1);
    if let Some(cursor) = query.cursor.as_deref().filter(|c| !c.is_empty()) {
        filter.after = Some(cursor.parse().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "cursor is not one a listing returned (pass nextCursor as it came)",
            )
        })?);
    }
    let mut sessions = manager.list(&filter).await?;
    let next = (sessions.len() > page)
        .then(|| {
            sessions.truncate(page);
            sessions
                .last()
                .map(|last| ListCursor::after(last).to_string())
        })
        .flatten();
    let views: Vec<SessionView> = sessions.iter().map(SessionView::of).collect();
    Ok(Json(
        json!({ "ok": true, "sessions": views, "nextCursor": next }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view says a run holds the session only while its holder lives: a killed
    /// turn's run is shown as none (the next message takes it over).
    #[test]
    fn a_dead_holders_run_is_not_shown_as_running() {
        let now = SystemClock.now_millis();
        let run = |holder: &str| crate::store::entry::SessionRun {
            holder: holder.to_owned(),
            started_at: now,
            renewed_at: now,
            fence: 1,
            answering: Vec::new(),
            taken: Vec::new(),
        };
        let key = crate::identity::key::SessionKey::parse("agent:main:telegram:dm:42").unwrap();
        let mut entry = SessionEntry::new("s", now);
        let live = crate::exactly_once::holders::Hold::new("live".into());
        entry.run = Some(run(live.holder()));
        let stored = |entry: &SessionEntry| StoredSession {
            key: key.clone(),
            entry: entry.clone(),
            revision: crate::store::Revision::from_u64(1),
        };
        let view = SessionView::of(&stored(&entry));
        assert!(view.run_started_at.is_some(), "a live turn's run is shown");
        // A turn of this process that ended without giving the run back.
        let gone = format!(
            "{}#a-turn-that-was-dropped",
            crate::exactly_once::holders::this_process()
        );
        entry.run = Some(run(&gone));
        let view = SessionView::of(&stored(&entry));
        assert_eq!(view.run_started_at, None);
    }

    #[test]
    fn secrets_that_would_let_everyone_in_or_no_one_are_refused() {
        for refused in [
            "", " ", "\t\n", " s3cret", "s3cret ", "s3\ncret", "s3\0cret",
        ] {
            assert!(
                matches!(
                    Secret::new(refused),
                    Err(Error::InvalidOption {
                        option: "secret",
                        ..
                    })
                ),
                "{refused:?}"
            );
        }
        let secret = Secret::new("s3 cret").unwrap();
        assert!(secret.matches(b"s3 cret"));
        assert!(!secret.matches(b""));
        assert!(!format!("{secret:?}").contains("s3"));
    }

    /// Errors answer with what a client can act on, never a path of the server.
    #[tokio::test]
    async fn errors_keep_server_paths_in_the_log_and_tell_transient_ones() {
        let answer = |error: Error| async move {
            let response = ApiError::from(error).into_response();
            let status = response.status();
            let retry = response.headers().get(RETRY_AFTER).cloned();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            (status, retry, String::from_utf8_lossy(&body).into_owned())
        };
        let moved = Error::InvalidId {
            kind: crate::error::IdKind::SessionFile,
            value: "/srv/old/agents/main/sessions/s.jsonl".into(),
            problem: "a session file must be inside the agent's sessions directory",
        };
        let (status, _, body) = answer(moved).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body.contains("/srv/old"), "{body}");
        let out_of_files = Error::Io {
            op: "open lock file",
            path: "/srv/state/agents/main/sessions/sessions.json.lock".into(),
            source: std::io::Error::from_raw_os_error(24),
        };
        let (status, retry, body) = answer(out_of_files).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.unwrap(), "1");
        assert!(!body.contains("/srv/state"), "{body}");
    }

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cre", b"s3cret"));
        assert!(!constant_time_eq(b"", b"s3cret"));
    }

    /// Request bodies are parsed by serde_json, whose recursion limit (128) must stay
    /// on: no dependency may enable its `unbounded_depth` feature.
    #[test]
    fn json_nested_past_the_recursion_limit_is_an_error_not_a_stack_overflow() {
        let shallow = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(serde_json::from_str::<serde_json::Value>(&shallow).is_ok());
        let deep = "[".repeat(100_000);
        let error = serde_json::from_str::<serde_json::Value>(&deep).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
    }

    #[test]
    fn timestamps_are_rfc3339_with_milliseconds() {
        assert_eq!(timestamp(1_771_840_800_000), "2026-02-23T10:00:00.000Z");
        assert_eq!(timestamp(u64::MAX), "1970-01-01T00:00:00.000Z");
    }
}
