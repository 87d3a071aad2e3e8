//! The session inspector: a small web page for operators, on the service's own port
//! (`/ui`), behind the service's secret.
//!
//! An operator logs in with the secret through a form; the answer is an `HttpOnly`,
//! `SameSite=Strict` cookie that names a login held in memory (the secret never
//! travels in a URL and never reaches the page's script). The pages are static files
//! compiled into the crate, with no inline script and a strict Content-Security-Policy;
//! everything they show comes from `/ui/api/…` as JSON and is put on the page as text,
//! so a message, a channel name or a session key renders as what it is. The actions
//! (`reset`, `close`) are `POST`s that need the login's CSRF token in a header and a
//! same-origin request.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use axum::extract::Form;
use axum::http::header::{CACHE_CONTROL, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::HeaderValue;

use super::*;
use crate::identity::key::SessionKey;
use crate::transcript::follow::{Position, Scope, Update};
use crate::transcript::search::{Search, SearchFilter, SearchQuery};
use crate::transcript::TranscriptStore;

mod activity;

/// The cookie that names an operator's login.
const COOKIE_NAME: &str = "agent_sessions_inspector";

/// The header the page's script sends the login's CSRF token in.
const CSRF_HEADER: &str = "x-csrf-token";

/// How long a login lasts: 12 hours.
const LOGIN_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// The most logins held at once; the one closest to expiring makes room for a new one.
const MAX_LOGINS: usize = 256;

/// How long a wrong secret waits before it is answered (guessing is slow).
const WRONG_SECRET_PAUSE: Duration = Duration::from_millis(500);

/// The most sessions a page of the list shows.
const PAGE: usize = 50;

/// The most events of a session's conversation one page sends: the last ones before
/// the page's end.
const MAX_CONVERSATION_EVENTS: usize = 500;

/// The most bytes of events one page of a conversation sends (and holds while it is
/// read): a page of big lines has fewer of them.
const MAX_CONVERSATION_BYTES: usize = 4 << 20;

/// The most closed sessions of a key the session page lists: the newest.
const MAX_PREDECESSORS: usize = 100;

/// What every inspector response carries: no script but the crate's own file, no
/// framing, no referrer to other sites, nothing cached.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

const LOGIN_PAGE: &str = include_str!("inspector/login.html");
const SESSIONS_PAGE: &str = include_str!("inspector/sessions.html");
const SESSION_PAGE: &str = include_str!("inspector/session.html");
const ACTIVITY_PAGE: &str = include_str!("inspector/activity.html");
const SCRIPT: &str = include_str!("inspector/inspector.js");
const STYLE: &str = include_str!("inspector/inspector.css");

/// The session inspector's settings: turned on with [`ServiceOptions::inspector`].
///
/// The inspector needs the service's secret ([`ServiceOptions::secret`]): it is the
/// password of its login form, and [`ServiceOptions::validate`] refuses an inspector
/// without one. Its search box searches message text with a [`Search`] when one is
/// given ([`Inspector::search`]); without one the box is not shown.
///
/// ```
/// use agent_sessions::http::{Inspector, Secret, ServiceOptions};
///
/// let options = ServiceOptions::default()
///     .secret(Secret::new("s3cret")?)
///     .inspector(Inspector::new());
/// assert!(options.validate().is_ok());
/// assert!(ServiceOptions::default().inspector(Inspector::new()).validate().is_err());
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Inspector {
    search: Option<(Arc<Search>, Arc<dyn TranscriptStore>)>,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("search", &self.search.is_some())
            .finish()
    }
}

impl Inspector {
    /// An inspector without text search.
    pub fn new() -> Self {
        Inspector::default()
    }

    /// Searches message text with `search`, brought up to date from `transcripts`'
    /// message log ([`Search::sync`]) before each query.
    pub fn search(mut self, search: Search, transcripts: Arc<dyn TranscriptStore>) -> Self {
        self.search = Some((Arc::new(search), transcripts));
        self
    }
}

/// One operator's login.
#[derive(Debug)]
struct Login {
    csrf: String,
    expires: Instant,
}

/// The inspector's state: the secret its form checks, the logins it gave, the manager.
struct Console {
    manager: Arc<SessionManager>,
    secret: Secret,
    logins: Mutex<HashMap<String, Login>>,
    search: Option<(Arc<Search>, Arc<dyn TranscriptStore>)>,
    streams_end: events::StreamsEnd,
    /// Failed logins allowed now, across the whole service (see [`FailedLogins`]).
    failures: Mutex<FailedLogins>,
}

/// A bucket of failed logins: [`MAX_FAILED_LOGINS`] at once, refilled at
/// [`FAILED_LOGINS_PER_SECOND`]. While it is empty a login is not checked at all (429),
/// so guesses are checked at that rate however many arrive at once, on however many
/// connections.
#[derive(Debug)]
struct FailedLogins {
    left: f64,
    at: Instant,
}

/// How many failed logins may come at once.
const MAX_FAILED_LOGINS: f64 = 10.0;

/// How many failed logins a second the service allows, across every client.
const FAILED_LOGINS_PER_SECOND: f64 = 2.0;

impl FailedLogins {
    /// Whether a login may be checked now.
    fn allows(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * FAILED_LOGINS_PER_SECOND;
        self.left = (self.left + refill).min(MAX_FAILED_LOGINS);
        self.at = now;
        self.left >= 1.0
    }

    /// A login failed.
    fn failed(&mut self) {
        self.left = (self.left - 1.0).max(0.0);
    }
}

type Shared = Arc<Console>;

/// A random token: 244 bits from the operating system's generator.
fn token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Console {
    fn logins(&self) -> std::sync::MutexGuard<'_, HashMap<String, Login>> {
        self.logins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new login: its cookie value.
    fn log_in(&self) -> String {
        let now = Instant::now();
        let mut logins = self.logins();
        logins.retain(|_, login| login.expires > now);
        if logins.len() >= MAX_LOGINS {
            if let Some(oldest) = logins
                .iter()
                .min_by_key(|(_, login)| login.expires)
                .map(|(id, _)| id.clone())
            {
                logins.remove(&oldest);
            }
        }
        let id = token();
        logins.insert(
            id.clone(),
            Login {
                csrf: token(),
                expires: now + LOGIN_LIFETIME,
            },
        );
        id
    }

    /// The login `headers`' cookie names, and its CSRF token, if it is live.
    fn login_of(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let id = cookie(headers)?;
        let logins = self.logins();
        let login = logins.get(&id)?;
        (login.expires > Instant::now()).then(|| (id, login.csrf.clone()))
    }
}

/// The value of the inspector's cookie in `headers`, if any.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.to_owned())
}

/// The inspector's routes, under `/ui`.
pub(super) fn routes(
    manager: Arc<SessionManager>,
    secret: Secret,
    inspector: Inspector,
    streams_end: events::StreamsEnd,
) -> Router {
    let state = Arc::new(Console {
        manager,
        secret,
        logins: Mutex::new(HashMap::new()),
        search: inspector.search,
        streams_end,
        failures: Mutex::new(FailedLogins {
            left: MAX_FAILED_LOGINS,
            at: Instant::now(),
        }),
    });
    let api = Router::new()
        .route("/ui/api/me", get(me))
        .route("/ui/api/sessions", get(sessions))
        .route("/ui/api/activity", get(activity_figures))
        .route("/ui/api/session", get(session))
        .route("/ui/api/conversation", get(conversation))
        .route("/ui/api/context", get(context))
        .route("/ui/api/keys/{key}/events", get(key_events))
        .route("/ui/api/reset", post(reset))
        .route("/ui/api/close", post(close))
        .route("/ui/logout", post(log_out))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_login));
    let pages = Router::new()
        .route("/ui/sessions", get(|| page(SESSIONS_PAGE)))
        .route("/ui/session", get(|| page(SESSION_PAGE)))
        .route("/ui/activity", get(|| page(ACTIVITY_PAGE)))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            login_page_first,
        ));
    Router::new()
        .route("/ui", get(|| async { see_other("/ui/sessions") }))
        .route("/ui/login", get(|| page(LOGIN_PAGE)).post(log_in))
        .route(
            "/ui/assets/inspector.js",
            get(|| asset("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/ui/assets/inspector.css",
            get(|| asset("text/css; charset=utf-8", STYLE)),
        )
        .merge(api)
        .merge(pages)
        .layer(middleware::map_response(protect))
        .with_state(state)
}

/// Adds the headers every inspector response carries.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "same-origin"),
        ("cross-origin-opener-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn page(html: &'static str) -> Response {
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn asset(kind: &'static str, text: &'static str) -> Response {
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "no-cache")], text).into_response()
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(LOCATION, to)]).into_response()
}

/// A page for a logged-in operator; the login form for anyone else.
async fn login_page_first(State(state): State<Shared>, request: Request, next: Next) -> Response {
    match state.login_of(request.headers()) {
        Some(_) => next.run(request).await,
        None => see_other("/ui/login"),
    }
}

/// The CSRF token of the request's login, for the handlers that need it.
#[derive(Debug, Clone)]
struct Csrf(String);

/// Lets in requests of a live login (401 otherwise). A request that changes something
/// must also come from the inspector's own page: same origin, and the login's CSRF
/// token in [`CSRF_HEADER`] (403 otherwise).
async fn require_login(State(state): State<Shared>, mut request: Request, next: Next) -> Response {
    let Some((_, csrf)) = state.login_of(request.headers()) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "log in to the inspector first (/ui/login)",
        )
        .into_response();
    };
    if request.method() != axum::http::Method::GET {
        let token_matches = request
            .headers()
            .get(CSRF_HEADER)
            .is_some_and(|given| constant_time_eq(given.as_bytes(), csrf.as_bytes()));
        if !token_matches || !same_origin(request.headers()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "access_denied",
                "this action must come from the inspector's own page",
            )
            .into_response();
        }
    }
    request.extensions_mut().insert(Csrf(csrf));
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Whether a state-changing request comes from a page of this service: a browser
/// names the page's origin in `Origin` and tells in `Sec-Fetch-Site` whether it is
/// this site. Requests that send neither (not a browser) pass; the CSRF token and the
/// `SameSite=Strict` cookie still hold them.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if site.as_bytes() != b"same-origin" {
            return false;
        }
    }
    match (headers.get(ORIGIN), headers.get(HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            let origin = origin.as_bytes();
            let host = host.as_bytes();
            [&b"http://"[..], &b"https://"[..]]
                .iter()
                .any(|scheme| origin.strip_prefix(*scheme) == Some(host))
        }
        (Some(_), None) => false,
    }
}

/// The login form's fields.
#[derive(Deserialize)]
struct LoginForm {
    secret: String,
}

/// `POST /ui/login`: the secret, from the form, for a login cookie.
async fn log_in(
    State(state): State<Shared>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let given = form.map(|Form(form)| form.secret).unwrap_or_default();
    let failures = || {
        state
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    if !failures().allows() {
        // Too many failures lately, from anyone: not checked, so guessing goes no
        // faster than the bucket refills.
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "too many failed logins; retry in a few seconds",
        )
        .into_response();
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from_static("1"),
        );
        return response;
    }
    if !same_origin(&headers) || !state.secret.matches(given.as_bytes()) {
        failures().failed();
        tokio::time::sleep(WRONG_SECRET_PAUSE).await;
        return see_other("/ui/login?failed");
    }
    let id = state.log_in();
    let cookie = format!(
        "{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={}",
        LOGIN_LIFETIME.as_secs()
    );
    let mut response = see_other("/ui/sessions");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

/// `POST /ui/logout`: ends the login.
async fn log_out(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers) {
        state.logins().remove(&id);
    }
    let expired = format!("{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0");
    let mut response = Json(json!({"ok": true})).into_response();
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

/// `GET /ui/api/me`: the login's CSRF token and what the page may offer.
async fn me(
    State(state): State<Shared>,
    axum::Extension(Csrf(csrf)): axum::Extension<Csrf>,
) -> ApiResult {
    Ok(Json(json!({
        "ok": true,
        "csrf": csrf,
        "agent": state.manager.default_agent().as_str(),
        "search": state.search.is_some(),
    })))
}

/// `GET /ui/api/sessions`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionsQuery {
    agent: Option<String>,
    channel: Option<String>,
    status: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
}

/// What `/ui/api/activity` is asked: an agent (the default one when absent) and how
/// many days, up to today (14 when absent; at most 90).
#[derive(Deserialize)]
struct ActivityQuery {
    agent: Option<String>,
    days: Option<u32>,
}

/// `GET /ui/api/activity`: an agent's figures per day, for the charts page.
async fn activity_figures(
    State(state): State<Shared>,
    query: Result<Query<ActivityQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let agent = match non_empty(query.agent) {
        Some(agent) => AgentId::new(&agent)?,
        None => state.manager.default_agent().clone(),
    };
    let days = query.days.unwrap_or(14);
    let now = state.manager.seams.clock.now();
    Ok(Json(
        activity::activity(&state.manager, &agent, days, now).await?,
    ))
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// A session as a row of the list.
fn row(session: &StoredSession) -> serde_json::Value {
    let entry = &session.entry;
    json!({
        "key": session.key.as_str(),
        "sessionId": entry.session_id,
        "channel": entry.channel_name(),
        "person": entry.person_id.clone()
            .or_else(|| entry.origin.as_ref().and_then(|o| o.from.clone())),
        "label": entry.label.clone().or_else(|| entry.display_name.clone()),
        "status": entry.status.as_ref().map(SessionStatus::as_str).unwrap_or("idle"),
        "updatedAt": timestamp(entry.updated_at),
        "turns": entry.turn_count,
        "tokens": entry.total_tokens,
        "startReason": entry.start_reason,
    })
}

/// `GET /ui/api/sessions`: a page of an agent's sessions, most recently active first,
/// or with `q` the sessions whose messages best match it.
async fn sessions(
    State(state): State<Shared>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let agent = match non_empty(query.agent) {
        Some(agent) => AgentId::new(&agent)?,
        None => state.manager.default_agent().clone(),
    };
    let mut filter = ListFilter::new().agent(agent.clone());
    filter.status = status_filter(query.status.as_deref())?;
    filter.channel = non_empty(query.channel);
    if let Some(text) = non_empty(query.q) {
        let rows = search_sessions(&state, &agent, &filter, &text).await?;
        return Ok(Json(
            json!({ "ok": true, "sessions": rows, "nextCursor": null }),
        ));
    }
    filter.limit = Some(PAGE + 1);
    if let Some(cursor) = non_empty(query.cursor) {
        filter.after = Some(cursor.parse().map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "cursor is not one a listing returned",
            )
        })?);
    }
    let mut sessions = state.manager.list(&filter).await?;
    let next = (sessions.len() > PAGE)
        .then(|| {
            sessions.truncate(PAGE);
            sessions
                .last()
                .map(|last| ListCursor::after(last).to_string())
        })
        .flatten();
    let rows: Vec<_> = sessions.iter().map(row).collect();
    Ok(Json(
        json!({ "ok": true, "sessions": rows, "nextCursor": next }),
    ))
}

/// The sessions of `agent` passing `filter` whose messages best match `text`, best
/// first (at most a page).
async fn search_sessions(
    state: &Console,
    agent: &AgentId,
    filter: &ListFilter,
    text: &str,
) -> Result<Vec<serde_json::Value>, ApiError> {
    let Some((search, transcripts)) = &state.search else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "this service has no search index: text search is off",
        ));
    };
    search.sync(&**transcripts).await?;
    let mut wanted = SearchFilter::new();
    wanted.channel = filter.channel.clone();
    let hits = search
        .search(&SearchQuery::text(text).filter(wanted).limit(PAGE * 4))
        .await?;
    let mut seen = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for hit in hits {
        let Some(key) = hit.message.session_key else {
            continue;
        };
        if hit.message.agent != agent.as_str() || !seen.insert(key.clone()) {
            continue;
        }
        let Ok(key) = SessionKey::parse(&key) else {
            continue;
        };
        let mut one = filter.clone();
        one.key_prefix = Some(key.as_str().to_owned());
        let found = state.manager.list(&one).await?;
        rows.extend(found.iter().filter(|s| s.key == key).map(row));
        if rows.len() >= PAGE {
            break;
        }
    }
    Ok(rows)
}

/// A query that names a session key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyQuery {
    key: String,
}

/// `GET /ui/api/session?key=`: the key's current session (its whole entry) and its
/// closed sessions, newest first.
async fn session(
    State(state): State<Shared>,
    query: Result<Query<KeyQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let key = SessionKey::parse(&query.key)?;
    let current = state.manager.session(&key).get().await?;
    let mut closed = ListFilter::all().key_prefix(key.as_str());
    closed.status = StatusFilter::Only(vec![SessionStatus::Closed]);
    let mut predecessors: Vec<StoredSession> = state
        .manager
        .list(&closed)
        .await?
        .into_iter()
        .filter(|s| s.key == key)
        .filter(|s| {
            current
                .as_ref()
                .is_none_or(|c| c.entry.session_id != s.entry.session_id)
        })
        .collect();
    let started = |s: &StoredSession| s.entry.session_started_at.unwrap_or(s.entry.updated_at);
    predecessors.sort_by_key(|s| std::cmp::Reverse(started(s)));
    predecessors.truncate(MAX_PREDECESSORS);
    if current.is_none() && predecessors.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!("no session is stored under {:?}", key.as_str()),
        ));
    }
    Ok(Json(json!({
        "ok": true,
        "key": key.as_str(),
        "session": current.as_ref().map(|s| &s.entry),
        "predecessors": predecessors.iter().map(row).collect::<Vec<_>>(),
    })))
}

/// `GET /ui/api/conversation`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConversationQuery {
    key: String,
    session: String,
    /// The page ends before this offset (default: the transcript's end); a page's
    /// `before` names the next, older page.
    before: Option<u64>,
}

/// `GET /ui/api/conversation?key=&session=[&before=]`: one page of one of the key's
/// sessions (closed ones included) — its last events before `before`, as the key's
/// event stream sends them, at most [`MAX_CONVERSATION_EVENTS`] and
/// [`MAX_CONVERSATION_BYTES`] — with `before`, where the next (older) page ends, when
/// there is one. What the request holds is one page, whatever the transcript's length.
async fn conversation(
    State(state): State<Shared>,
    query: Result<Query<ConversationQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let key = SessionKey::parse(&query.key)?;
    crate::store::json::paths::validate_session_id(&query.session)?;
    // The session must be this key's: its id is looked up nowhere else.
    let session = state
        .manager
        .find_session(&query.session, StatusFilter::Any)
        .await?
        .filter(|s| s.key == key)
        .ok_or_else(|| ApiError::unknown_session(&query.session))?;
    let end = query.before.unwrap_or(u64::MAX);
    let scope = Scope::Session(session.entry.session_id.clone());
    let mut follow = state.manager.follow(scope, Position::Start).await?;
    // The page's events, newest last, with where each starts; older ones are let go
    // as newer ones arrive, so the page stays within its bounds.
    let mut kept: std::collections::VecDeque<(u64, String)> = std::collections::VecDeque::new();
    let mut bytes = 0;
    let mut older = None;
    'read: loop {
        let (events, next) = match follow.try_next().await? {
            Some(Update::Events {
                events,
                next: Position::After { offset, .. },
                ..
            }) => (events, offset),
            // The store lost lines read (a failover): they leave the page.
            Some(Update::Rewound {
                next: Position::After { offset, .. },
                ..
            }) => {
                kept.retain(|(start, _)| *start < offset.0);
                bytes = kept.iter().map(|(_, data)| data.len()).sum();
                continue;
            }
            _ => break,
        };
        let starts: Vec<u64> = events.iter().map(|e| e.offset.0).collect();
        for (start, (data, _)) in starts.into_iter().zip(events::numbered(events, next, None)) {
            if start >= end {
                break 'read;
            }
            bytes += data.len();
            kept.push_back((start, data));
            while kept.len() > MAX_CONVERSATION_EVENTS
                || (bytes > MAX_CONVERSATION_BYTES && kept.len() > 1)
            {
                let (start, data) = kept.pop_front().expect("more than one kept");
                bytes -= data.len();
                older = Some(start);
            }
        }
    }
    // The page's JSON written from the events' text, not parsed again.
    let first = kept.front().map(|(start, _)| *start);
    let mut body = String::with_capacity(bytes + 64);
    body.push_str(r#"{"ok":true,"events":["#);
    for (n, (_, data)) in kept.iter().enumerate() {
        if n > 0 {
            body.push(',');
        }
        body.push_str(data);
    }
    body.push_str("],\"truncated\":");
    body.push_str(if older.is_some() { "true" } else { "false" });
    if let (Some(_), Some(first)) = (older, first) {
        body.push_str(&format!(",\"before\":{first}"));
    }
    body.push('}');
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `GET /ui/api/context?key=`: the conversation the model is given for the key's
/// current session, within its token budget.
async fn context(
    State(state): State<Shared>,
    query: Result<Query<KeyQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let key = SessionKey::parse(&query.key)?;
    let messages = state.manager.session(&key).messages().await?;
    Ok(Json(json!({ "ok": true, "messages": messages })))
}

/// `GET /ui/api/keys/{key}/events`: the key's stream, as `/kernel/keys/{key}/events`.
async fn key_events(
    State(state): State<Shared>,
    Path(key): Path<String>,
    headers: HeaderMap,
    query: Result<Query<events::KeyEventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    events::key_events(
        state.manager.clone(),
        state.streams_end.clone(),
        key,
        headers,
        query,
    )
    .await
}

/// An action's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    key: String,
}

/// `POST /ui/api/reset`: starts the key's session over (the next message begins a new
/// one, as after a reset phrase).
async fn reset(
    State(state): State<Shared>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body?;
    let key = SessionKey::parse(&body.key)?;
    let session = state.manager.session(&key).reset().await?;
    tracing::info!(key = %key, "the inspector reset a session");
    Ok(Json(json!({ "ok": true, "session": row(&session) })))
}

/// `POST /ui/api/close`: closes the key's session.
async fn close(
    State(state): State<Shared>,
    body: Result<Json<ActionBody>, JsonRejection>,
) -> ApiResult {
    let Json(body) = body?;
    let key = SessionKey::parse(&body.key)?;
    let session = state.manager.session(&key).close().await?;
    tracing::info!(key = %key, "the inspector closed a session");
    Ok(Json(json!({ "ok": true, "session": row(&session) })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_site_may_act() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert!(same_origin(&headers(&[("host", "127.0.0.1:8")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8"),
            ("origin", "http://127.0.0.1:8"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8"),
            ("origin", "http://evil.example"),
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:8"),
            ("sec-fetch-site", "cross-site"),
        ])));
        assert!(!same_origin(&headers(&[("origin", "http://127.0.0.1:8")])));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_static("a=1; agent_sessions_inspector=abc; b=2"),
        );
        assert_eq!(cookie(&headers).as_deref(), Some("abc"));
        headers.insert(
            COOKIE,
            HeaderValue::from_static("agent_sessions_inspectorx=abc"),
        );
        assert_eq!(cookie(&headers), None);
    }
}
