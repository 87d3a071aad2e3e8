//! `GET /kernel/sessions/{id}/events`: a session's transcript as server-sent events;
//! `GET /kernel/keys/{key}/events`: a key's sessions in turn, the same way.
//!
//! A key's stream announces each session it moves to with an `event: session` message
//! and ids its lines `<sessionId>:<offset>`; otherwise it is a session's stream that
//! does not end at a reset.
//!
//! Each event of the transcript is one SSE message whose `data` is
//! `{"offset": …, "line": …, "entry": {…}}` (the entry as its transcript line has it)
//! and whose `id` is the offset to resume after it: a client that reconnects sends it
//! back as `Last-Event-ID` (browsers' `EventSource` does so by itself) and misses
//! nothing. Events appended by any process sharing the store are streamed. When the
//! transcript is archived (a reset), its last events are sent, then `event: end`; a
//! request for a session with nothing left to send is answered 204, which tells an
//! `EventSource` to stop reconnecting.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::*;
use crate::identity::key::SessionKey;
use crate::transcript::follow::{Follow, Position, Scope, Update};
use crate::transcript::{Offset, SessionEvent};

/// The header a reconnecting SSE client sends its last event id in.
const LAST_EVENT_ID: &str = "last-event-id";

/// The largest transcript line a stream sends whole, in bytes: a bigger line (a base64
/// image, a huge tool result) is sent as a stub that says so — `{"offset", "line",
/// "truncated": true, "bytes": <its size>, "entry": {"type", "id"}}` — so that what a
/// stream holds for a stalled client stays bounded. The transcript keeps the line
/// whole.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// The event streams of the routers built with one [`ServiceOptions`]: how many may be
/// open at once, and the signal that ends them all — [`serve`] fires it when it shuts
/// down, so open streams do not hold the shutdown.
#[derive(Debug, Clone)]
pub(super) struct StreamsEnd {
    end: Arc<watch::Sender<bool>>,
    slots: Arc<Semaphore>,
}

impl Default for StreamsEnd {
    fn default() -> Self {
        StreamsEnd {
            end: Arc::new(watch::channel(false).0),
            slots: Arc::new(Semaphore::new(DEFAULT_MAX_EVENT_STREAMS)),
        }
    }
}

impl StreamsEnd {
    pub(super) fn fire(&self) {
        self.end.send_replace(true);
    }

    fn subscribe(&self) -> watch::Receiver<bool> {
        self.end.subscribe()
    }

    /// Allows `streams` open at once.
    pub(super) fn limit(&mut self, streams: usize) {
        self.slots = Arc::new(Semaphore::new(streams.min(Semaphore::MAX_PERMITS)));
    }

    /// A slot for one more stream (each holds a chunk of a transcript in memory:
    /// their number is bounded), or 503 when none is free.
    fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "too many event streams are open; retry",
            )
        })
    }
}

/// `GET /kernel/sessions/{id}/events`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// The offset to start at (default 0: the whole transcript), or an event id;
    /// `Last-Event-ID` wins.
    from: Option<String>,
}

/// The session's events from the asked offset on, then live.
pub(super) async fn session_events(
    manager: Arc<SessionManager>,
    end: StreamsEnd,
    id: String,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let (from, line) = match last_event_id(&headers)?.or(query.from.as_deref()) {
        Some(value) => {
            let (offset, line) = split_line_check(value)?;
            (offset.parse::<u64>().map_err(|_| not_our_event_id())?, line)
        }
        None => (0, None),
    };
    check_id(&id)?;
    let slot = end.slot()?;
    if manager
        .find_session(&id, StatusFilter::Any)
        .await?
        .is_none()
    {
        return Err(ApiError::unknown_session(&id));
    }
    let from = Position::After {
        session_id: id.clone(),
        offset: Offset(from),
    };
    let mut follow = manager.follow(Scope::Session(id.clone()), from).await?;
    if let Some(line) = line {
        follow = follow.expecting(line);
    }
    // The first read answers now, so a bad offset is a 400 rather than a broken stream.
    let mut pending = VecDeque::new();
    let first = match follow.try_next().await {
        Ok(Some(Update::Events { events, .. })) => events,
        Ok(Some(Update::Rewound {
            key,
            session_id,
            next,
        })) => {
            let id = offset_of(&next).to_string();
            pending.push_back(Pending::rewound(&key, &session_id, &next, id));
            Vec::new()
        }
        Ok(Some(Update::Ended { .. })) => {
            // A closed session streamed to its end: 204 tells an EventSource not to
            // reconnect.
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        Ok(_) => Vec::new(),
        Err(Error::InvalidOffset { offset, .. }) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("offset {offset} is not where an event of session {id:?} starts"),
            ))
        }
        Err(error) => return Err(error.into()),
    };
    tracing::debug!(session_id = %id, from = %follow.position(), "streaming a session's events");
    pending.extend(Pending::lines(first, offset_of(&follow.position()), None));
    let stream = EventStream {
        pending,
        source: Source::Session(follow),
        end: end.subscribe(),
        _slot: slot,
    };
    Ok(Sse::new(stream.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /kernel/keys/{key}/events`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyEventsQuery {
    /// Where to resume, `<sessionId>:<offset>` (default: the start of the key's
    /// current session); `Last-Event-ID` wins.
    from: Option<String>,
}

/// A key's events across its sessions: a `session` event for each session it moves
/// to, then the session's lines, live; never ends by itself.
pub(super) async fn key_events(
    manager: Arc<SessionManager>,
    end: StreamsEnd,
    key: String,
    headers: HeaderMap,
    query: Result<Query<KeyEventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let key = crate::identity::key::SessionKey::parse(&key)?;
    let (from, line) = match last_event_id(&headers)? {
        Some(value) => {
            let (position, line) = split_line_check(value)?;
            let position = position
                .parse::<Position>()
                .ok()
                .filter(|position| matches!(position, Position::After { .. }))
                .ok_or_else(not_our_event_id)?;
            (Some(position), line)
        }
        None => match query.from.as_deref() {
            Some(from) => {
                let (position, line) = split_line_check(from)?;
                (Some(position.parse::<Position>()?), line)
            }
            None => (None, None),
        },
    };
    let slot = end.slot()?;
    let mut follow = manager
        .follow(Scope::Key(key.clone()), from.unwrap_or(Position::Start))
        .await?;
    if let Some(line) = line {
        follow = follow.expecting(line);
    }
    // The first read answers now, so an offset in none of the key's events is a 400
    // rather than a broken stream.
    let first = match follow.try_next().await {
        Ok(Some(update)) => key_messages(update).unwrap_or_default(),
        Ok(None) => VecDeque::new(),
        Err(Error::InvalidOffset { offset, .. }) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                format!("offset {offset} is not where an event of the key's session starts"),
            ))
        }
        // Anything else shows as the stream's `error` event at the next read.
        Err(_) => VecDeque::new(),
    };
    tracing::debug!(key = %key, "streaming a key's events");
    let stream = EventStream {
        pending: first,
        source: Source::Key(follow),
        end: end.subscribe(),
        _slot: slot,
    };
    Ok(Sse::new(stream.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /kernel/agents/{agent}/events`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentEventsQuery {
    /// Lines written since this time, epoch milliseconds (default: from now on);
    /// `Last-Event-ID` wins.
    since: Option<u64>,
}

/// Every session of an agent: `session` and `status` events and each session's
/// lines, live; never ends by itself.
pub(super) async fn agent_events(
    manager: Arc<SessionManager>,
    end: StreamsEnd,
    agent: String,
    headers: HeaderMap,
    query: Result<Query<AgentEventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let agent = AgentId::new(&agent)?;
    let since = match last_event_id(&headers)? {
        Some(value) => Some(value.parse::<u64>().map_err(|_| not_our_event_id())?),
        None => query.since,
    };
    let slot = end.slot()?;
    let from = since.map_or(Position::Now, Position::Since);
    let follow = manager.follow(Scope::Agent(agent.clone()), from).await?;
    tracing::debug!(agent = %agent, "streaming an agent's events");
    let stream = EventStream {
        pending: VecDeque::new(),
        source: Source::Agent(follow),
        end: end.subscribe(),
        _slot: slot,
    };
    Ok(Sse::new(stream.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The `Last-Event-ID` a reconnecting client sent, trimmed.
fn last_event_id(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    headers
        .get(LAST_EVENT_ID)
        .map(|value| {
            value
                .to_str()
                .map(str::trim)
                .map_err(|_| not_our_event_id())
        })
        .transpose()
}

/// What an event id adds after a line's offset: `~` and the line's id, when that id
/// can go in an event id as it is (letters, digits, `-`, `_`; at most 64).
fn line_check(line: Option<&str>) -> String {
    match line {
        Some(line) if is_plain_line_id(line) => format!("~{line}"),
        _ => String::new(),
    }
}

fn is_plain_line_id(line: &str) -> bool {
    !line.is_empty()
        && line.len() <= 64
        && line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// An event id (or `from`) split into the position and the id of the line before it,
/// if it names one.
fn split_line_check(id: &str) -> Result<(&str, Option<String>), ApiError> {
    match id.split_once('~') {
        Some((position, line)) if is_plain_line_id(line) => Ok((position, Some(line.to_owned()))),
        Some(_) => Err(not_our_event_id()),
        None => Ok((id, None)),
    }
}

fn not_our_event_id() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "Last-Event-ID (or from) is not an event id this service sent",
    )
}

/// The `data` of each event, paired with the offset that follows it. Events are
/// serialised as soon as they are read, and the parsed entries dropped: what waits for a
/// slow client is the text it will be sent, at most [`MAX_EVENT_BYTES`] an event.
pub(super) fn numbered(
    events: Vec<SessionEvent>,
    next: Offset,
    owner: Option<(&SessionKey, &str)>,
) -> VecDeque<(String, Offset)> {
    let after: Vec<Offset> = events
        .iter()
        .skip(1)
        .map(|event| event.offset)
        .chain([next])
        .collect();
    events
        .iter()
        .zip(after)
        .map(|(event, next)| (event_data(event, owner), next))
        .collect()
}

/// What an event's `data` says: the transcript line whole, or a stub when the entry is
/// more than [`MAX_EVENT_BYTES`] as JSON — counted, so a huge line is never serialised
/// again. On an agent's stream, the line's key and session (`owner`) come with it.
fn event_data(event: &SessionEvent, owner: Option<(&SessionKey, &str)>) -> String {
    let bytes = event.encoded_len();
    let mut data = if bytes > MAX_EVENT_BYTES as u64 {
        json!({
            "offset": event.offset,
            "line": event.line,
            "truncated": true,
            "bytes": bytes,
            "entry": {"type": event.entry.kind, "id": event.entry.id},
        })
    } else {
        json!({
            "offset": event.offset,
            "line": event.line,
            "entry": event.entry,
        })
    };
    if let Some((key, session_id)) = owner {
        data["key"] = json!(key.as_str());
        data["sessionId"] = json!(session_id);
    }
    data.to_string()
}

/// What a stream reads from: one session's transcript, a key's sessions in turn, or
/// an agent's sessions.
enum Source {
    Session(Follow),
    Key(Follow),
    Agent(Follow),
}

/// The offset a follower's position names in its session.
fn offset_of(position: &Position) -> Offset {
    match position {
        Position::After { offset, .. } => *offset,
        _ => Offset::START,
    }
}

/// One SSE message waiting for the client: its `event` name (none for a line), its
/// `data`, and its `id` (where to resume after it).
struct Pending {
    event: Option<&'static str>,
    data: String,
    id: String,
}

/// What a `session` or `status` message says of a session.
fn session_data(session: &StoredSession) -> serde_json::Value {
    let entry = &session.entry;
    json!({
        "key": session.key.as_str(),
        "sessionId": entry.session_id,
        "startReason": entry.start_reason,
        "startedAt": entry.session_started_at.map(timestamp),
        "status": entry.status.as_ref().map(SessionStatus::as_str),
    })
}

impl Pending {
    fn announce(event: &'static str, data: serde_json::Value, id: String) -> Self {
        Pending {
            event: Some(event),
            data: data.to_string(),
            id,
        }
    }

    /// A `rewound` message: the store lost the session's lines from `next` on (see
    /// [`Update::Rewound`]), and the lines from there come next.
    fn rewound(key: &SessionKey, session_id: &str, next: &Position, id: String) -> Self {
        let data = json!({
            "key": key.as_str(),
            "sessionId": session_id,
            "offset": offset_of(next).0,
        });
        Pending::announce("rewound", data, id)
    }

    /// A session's or key's lines: each id is where to resume after it, and the line's
    /// own id, which a stream resumed there checks the store still has.
    fn lines(events: Vec<SessionEvent>, next: Offset, session: Option<&str>) -> VecDeque<Self> {
        let checks: Vec<String> = events
            .iter()
            .map(|event| line_check(event.entry.id.as_deref()))
            .collect();
        numbered(events, next, None)
            .into_iter()
            .zip(checks)
            .map(|((data, next), check)| Pending {
                event: None,
                data,
                id: match session {
                    Some(session_id) => format!("{session_id}:{next}{check}"),
                    None => format!("{next}{check}"),
                },
            })
            .collect()
    }
}

struct EventStream {
    source: Source,
    /// One chunk of a transcript at most, as the text each event sends (the
    /// follower reads chunk by chunk, and the next chunk is read only when the client
    /// has taken this one).
    pending: VecDeque<Pending>,
    end: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
}

/// How long an event stream waits before reading again after a transient failure,
/// doubling up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(2);

impl EventStream {
    /// The next SSE message and whether it is the last (an `end` or `error` event), or
    /// `None` when the service shuts down.
    async fn next_event(&mut self) -> Option<(Event, bool)> {
        // A transient failure (the database away, failing over) is waited out with the
        // same follower, which remembers what it sent: what the store lost meanwhile is
        // told as `rewound`, which a client connecting again could not be told.
        let mut retry_in = FIRST_RETRY;
        while self.pending.is_empty() {
            let read = tokio::select! {
                read = self.source.read() => read,
                _ = self.end.wait_for(|ended| *ended) => return None,
            };
            match read {
                Ok(Some(pending)) => self.pending = pending,
                Err(error) if error.is_transient() => {
                    tracing::warn!(%error, "an event stream's read failed; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(retry_in) => {}
                        _ = self.end.wait_for(|ended| *ended) => return None,
                    }
                    retry_in = (retry_in * 2).min(MAX_RETRY);
                }
                Ok(None) => {
                    // The transcript was archived (a reset or a delete): nothing follows.
                    let event = Event::default()
                        .event("end")
                        .data(json!({"reason": "archived"}).to_string());
                    return Some((event, true));
                }
                Err(error) => {
                    tracing::warn!(%error, "an event stream failed");
                    let data = json!({
                        "code": "internal",
                        "message": "reading the session failed; reconnect to resume",
                    });
                    let event = Event::default().event("error").data(data.to_string());
                    return Some((event, true));
                }
            }
        }
        let pending = self.pending.pop_front()?;
        let mut event = Event::default().id(pending.id).data(pending.data);
        if let Some(name) = pending.event {
            event = event.event(name);
        }
        Some((event, false))
    }

    fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        futures_util::stream::unfold(Some(self), |state| async move {
            let mut stream = state?;
            let (event, last) = stream.next_event().await?;
            Some((Ok(event), (!last).then_some(stream)))
        })
    }
}

/// The messages of a key's stream for `update`: a `session` announcement, or lines
/// ided `<sessionId>:<offset>`; `None` for an update the stream does not send.
fn key_messages(update: Update) -> Option<VecDeque<Pending>> {
    match update {
        Update::Session {
            session, previous, ..
        } => {
            let mut data = session_data(&session);
            data["previous"] = json!(previous);
            let id = format!("{}:{}", session.entry.session_id, Offset::START);
            Some(VecDeque::from([Pending::announce("session", data, id)]))
        }
        Update::Events {
            session_id,
            events,
            next,
            ..
        } => Some(Pending::lines(events, offset_of(&next), Some(&session_id))),
        Update::Rewound {
            key,
            session_id,
            next,
        } => {
            let id = format!("{session_id}:{}", offset_of(&next));
            Some(VecDeque::from([Pending::rewound(
                &key,
                &session_id,
                &next,
                id,
            )]))
        }
        _ => None,
    }
}

impl Source {
    /// The next messages, waiting for them; `None` when a session's stream has
    /// nothing more to send.
    async fn read(&mut self) -> crate::Result<Option<VecDeque<Pending>>> {
        loop {
            let pending = match self {
                Source::Session(follow) => match follow.next().await? {
                    Update::Events { events, next, .. } => {
                        Pending::lines(events, offset_of(&next), None)
                    }
                    Update::Rewound {
                        key,
                        session_id,
                        next,
                    } => {
                        let id = offset_of(&next).to_string();
                        VecDeque::from([Pending::rewound(&key, &session_id, &next, id)])
                    }
                    Update::Ended { .. } => return Ok(None),
                    _ => continue,
                },
                Source::Key(follow) => match key_messages(follow.next().await?) {
                    Some(pending) => pending,
                    None => continue,
                },
                Source::Agent(follow) => {
                    let update = follow.next().await?;
                    // Every message's id is where a follower started again would begin.
                    let id = follow.position().to_string();
                    match update {
                        Update::Session { session, new, .. } => {
                            let mut data = session_data(&session);
                            data["new"] = json!(new);
                            VecDeque::from([Pending::announce("session", data, id)])
                        }
                        Update::Status { session } => {
                            let data = session_data(&session);
                            VecDeque::from([Pending::announce("status", data, id)])
                        }
                        Update::Unreadable {
                            key, session_id, ..
                        } => {
                            // The problem may name files: it is in the service's log.
                            let data = json!({
                                "key": key.as_str(),
                                "sessionId": session_id,
                                "message": "the session's transcript cannot be read; it is no longer streamed (see the service log)",
                            });
                            VecDeque::from([Pending::announce("unreadable", data, id)])
                        }
                        Update::Rewound {
                            key,
                            session_id,
                            next,
                        } => VecDeque::from([Pending::rewound(&key, &session_id, &next, id)]),
                        Update::Events {
                            key,
                            session_id,
                            events,
                            next,
                        } => numbered(events, offset_of(&next), Some((&key, &session_id)))
                            .into_iter()
                            .map(|(data, _)| Pending {
                                event: None,
                                data,
                                id: id.clone(),
                            })
                            .collect(),
                        _ => continue,
                    }
                }
            };
            return Ok(Some(pending));
        }
    }
}
