//! Following sessions live: one stream of [`Update`]s over a [`Scope`], from a
//! [`Position`], whichever process writes.
//!
//! [`SessionManager::follow`] takes a scope — one session, a key across its sessions, an
//! agent, or the whole store — and a position to start from, and returns a [`Follow`]:
//! every line each session's transcript gains, once and in order within a session, and
//! the sessions as the follower comes to them. [`Session::follow`] is the same for the
//! key a session handle names, checked against the handle's caller.
//!
//! A follower reads the transcripts themselves, so it misses nothing that was written
//! while it was not listening; a store's live announcements (appends in this process,
//! other processes' on SQLite and PostgreSQL) only wake it early. Its
//! [`position`](Follow::position) is where a follower started later picks up: keep it
//! to resume after a restart.
//!
//! | scope | starts at | moves on | [`position`](Follow::position) |
//! | --- | --- | --- | --- |
//! | [`Scope::Session`] | [`Position::Start`] or [`Position::After`] | ends ([`Update::Ended`]) when the session's transcript is archived | [`Position::After`], exactly once |
//! | [`Scope::Key`] | the current session's start, or [`Position::After`] | into each session that replaced the one followed ([`Update::Session`]) | [`Position::After`], exactly once |
//! | [`Scope::Agent`], [`Scope::Store`] | [`Position::Now`], [`Position::Since`] or [`Position::Start`] | watches each session as it becomes active, at most [`MAX_WATCHED_SESSIONS`] at once | [`Position::Since`], at least once |
//!
//! ```
//! use agent_sessions::transcript::follow::{Position, Scope, Update};
//! use agent_sessions::prelude::*;
//! use agent_sessions::transcript::InMemoryTranscriptStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let manager = SessionManager::builder(InMemoryStore::new())
//!     .transcripts(InMemoryTranscriptStore::new())
//!     .build()?;
//! let turn = manager.turn(&InboundMessage::direct("telegram", "42", "hi")).await?;
//! let key = turn.key().clone();
//! turn.complete("hello!").await?;
//!
//! let mut follow = manager.follow(Scope::Key(key), Position::Start).await?;
//! let Update::Session { session, .. } = follow.next().await? else { unreachable!() };
//! let first = session.entry.session_id.clone();
//! let Update::Events { events, .. } = follow.next().await? else { unreachable!() };
//! assert_eq!(events.len(), 2, "the message and the reply");
//!
//! // `/new` replaces the session: the follower moves on with the key.
//! let turn = manager.turn(&InboundMessage::direct("telegram", "42", "/new")).await?;
//! turn.complete("fresh start").await?;
//! let Update::Session { session, previous, .. } = follow.next().await? else { unreachable!() };
//! assert_eq!(previous.as_deref(), Some(first.as_str()));
//! assert_eq!(session.entry.start_reason.as_deref(), Some("explicit_reset"));
//! # Ok(())
//! # }
//! ```
//!
//! [`SessionManager::follow`]: crate::SessionManager::follow
//! [`Session::follow`]: crate::Session::follow

mod agents;
mod key;
mod notice;
pub(crate) mod transcript;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, IdKind, Result};
use crate::freshness::Clock;
use crate::identity::key::{AgentId, SessionKey};
use crate::store::{SessionStore, StoredSession};
use crate::transcript::{Offset, SessionEvent, TranscriptRef, TranscriptStore};

pub use agents::MAX_WATCHED_SESSIONS;

/// What a [`Follow`] follows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// One session, by id: its transcript until the session ends — when it is archived
    /// (a reset, a delete) the follower returns its last lines, then [`Update::Ended`].
    /// Following a closed session returns its lines and ends.
    Session(String),
    /// A session key across its sessions: the key's session, then the session that
    /// replaces it after a reset, a close or an expiry. Never ends by itself.
    Key(SessionKey),
    /// Every session of an agent: sessions as they become active, their status changes
    /// and their lines. Never ends by itself.
    Agent(AgentId),
    /// Every session of every agent of the store (a manager serving one agent follows
    /// that agent's). Never ends by itself.
    Store,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Session(id) => write!(f, "session {id}"),
            Scope::Key(key) => write!(f, "key {key}"),
            Scope::Agent(agent) => write!(f, "agent {agent}"),
            Scope::Store => f.write_str("the store"),
        }
    }
}

/// Where a [`Follow`] starts, and where one started later would pick up.
///
/// Written as text (what an event stream sends as event ids and takes back to resume):
/// `start`, `now`, `<sessionId>:<offset>` for [`Position::After`], and epoch
/// milliseconds for [`Position::Since`].
///
/// ```
/// use agent_sessions::transcript::follow::Position;
/// use agent_sessions::transcript::Offset;
///
/// let position: Position = "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11:2048".parse()?;
/// assert_eq!(
///     position,
///     Position::After { session_id: "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11".into(), offset: Offset(2048) }
/// );
/// assert_eq!(position.to_string(), "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11:2048");
/// assert_eq!("1770000000000".parse::<Position>()?, Position::Since(1_770_000_000_000));
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Position {
    /// From the first line: of the session, of the key's current session, or — for an
    /// agent or the store — of every session.
    Start,
    /// From now on: for an agent or the store, lines written from now on.
    Now,
    /// Just after what a follower returned: a session, and the offset in its transcript
    /// where the next read starts. A session or key follower resumes here exactly.
    After {
        /// The session.
        session_id: String,
        /// Where the next read of its transcript starts.
        offset: Offset,
    },
    /// Lines written since this time, epoch milliseconds: where an agent's or the
    /// store's follower resumes — every line written since, some perhaps again (with the
    /// same session id and offset, by which a client tells them apart).
    Since(u64),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Start => f.write_str("start"),
            Position::Now => f.write_str("now"),
            Position::After { session_id, offset } => write!(f, "{session_id}:{offset}"),
            Position::Since(ms) => write!(f, "{ms}"),
        }
    }
}

impl FromStr for Position {
    type Err = Error;

    fn from_str(raw: &str) -> Result<Self> {
        let refused = |problem| Error::invalid_id(IdKind::Position, raw, problem);
        let raw = raw.trim();
        match raw {
            "start" => return Ok(Position::Start),
            "now" => return Ok(Position::Now),
            _ => {}
        }
        let Some((session_id, offset)) = raw.rsplit_once(':') else {
            return raw.parse::<u64>().map(Position::Since).map_err(|_| {
                refused("a position is start, now, <sessionId>:<offset> or epoch milliseconds")
            });
        };
        let offset = offset
            .parse::<u64>()
            .map_err(|_| refused("the offset after the colon is not a number"))?;
        crate::store::json::paths::validate_session_id(session_id)?;
        Ok(Position::After {
            session_id: session_id.to_owned(),
            offset: Offset(offset),
        })
    }
}

/// What a [`Follow`] returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Update {
    /// The follower comes to a session: a key's first session or the one that replaced
    /// the session followed (see the entry's
    /// [`start_reason`](crate::SessionEntry::start_reason) for why), or a session an
    /// agent's follower now watches. Its lines follow.
    Session {
        /// The session, as the store has it now.
        session: Box<StoredSession>,
        /// The session a key's follower followed before, if any.
        previous: Option<String>,
        /// Whether it started at or after the follower's start (an agent's or the
        /// store's follower; always `true` for a key's).
        new: bool,
    },
    /// A watched session's status changed (closed, running, idle, inactive): an
    /// agent's or the store's follower.
    Status {
        /// The session, as the store has it now.
        session: Box<StoredSession>,
    },
    /// A session whose transcript cannot be read (a stored transcript location outside
    /// the store, a malformed session id): an agent's or the store's follower no longer
    /// follows it, and the others go on.
    Unreadable {
        /// The session's key.
        key: SessionKey,
        /// The session.
        session_id: String,
        /// Why, as the error says it.
        problem: String,
    },
    /// Lines appended to a session's transcript, in order.
    Events {
        /// The session's key.
        key: SessionKey,
        /// The session.
        session_id: String,
        /// The lines.
        events: Vec<SessionEvent>,
        /// Where the line after the last one starts ([`Position::After`]).
        next: Position,
    },
    /// The store no longer has lines this follower returned from a session: a database
    /// failed over to a standby that had not received them (asynchronous replication),
    /// and the promoted server may have written other lines in their places. Forget the
    /// session's lines at or after `next`; its lines from there come next. A follower
    /// notices it by the last line it returned, which it checks whenever the session's
    /// transcript turns out shorter than its position or gains lines, and every second
    /// while it finds nothing new (a follower resumed at a position checks from the
    /// first line it returns itself).
    Rewound {
        /// The session's key.
        key: SessionKey,
        /// The session.
        session_id: String,
        /// Where the lines that come next start ([`Position::After`]).
        next: Position,
    },
    /// A session's follower read the session to its end: its transcript was archived
    /// (or it was closed) and every line returned. Every later call returns this again.
    Ended {
        /// The session.
        session_id: String,
    },
}

/// A live feed of what sessions write, from any process: made by
/// [`SessionManager::follow`](crate::SessionManager::follow) and
/// [`Session::follow`](crate::Session::follow); see the [module](self) for what each
/// [`Scope`] returns. Memory is bounded: transcripts are read a chunk at a time, and an
/// agent's follower watches at most [`MAX_WATCHED_SESSIONS`] sessions. Drop it to stop.
pub struct Follow {
    scope: Scope,
    inner: Inner,
}

enum Inner {
    Session {
        key: SessionKey,
        follow: Box<transcript::TranscriptFollow>,
    },
    Key(Box<key::KeyFollow>),
    Agents(Box<agents::AgentsFollow>),
}

impl fmt::Debug for Follow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Follow")
            .field("scope", &self.scope)
            .field("position", &self.position())
            .finish_non_exhaustive()
    }
}

/// What a follower reads from: the manager's stores, its clock and default agent.
pub(crate) struct Sources {
    pub(crate) sessions: Arc<dyn SessionStore>,
    pub(crate) transcripts: Arc<dyn TranscriptStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) default_agent: AgentId,
}

impl Follow {
    /// A follower of one session, `session`, from `from`.
    pub(crate) fn session(
        sources: Sources,
        session: &StoredSession,
        from: Position,
    ) -> Result<Self> {
        let id = &session.entry.session_id;
        let offset = match from {
            Position::Start => Offset::START,
            Position::After { session_id, offset } if &session_id == id => offset,
            other => return Err(unsupported(&Scope::Session(id.clone()), &other)),
        };
        let transcript = TranscriptRef::of(&session.key, &session.entry, &sources.default_agent);
        Ok(Follow {
            scope: Scope::Session(id.clone()),
            inner: Inner::Session {
                key: session.key.clone(),
                follow: Box::new(transcript::TranscriptFollow::new(
                    sources.transcripts,
                    transcript,
                    offset,
                )),
            },
        })
    }

    /// A follower of `key` across its sessions, from `from`.
    pub(crate) async fn key(sources: Sources, key: &SessionKey, from: Position) -> Result<Self> {
        let from = match from {
            Position::Start => None,
            Position::After { session_id, offset } => Some((session_id, offset)),
            other => return Err(unsupported(&Scope::Key(key.clone()), &other)),
        };
        Ok(Follow {
            scope: Scope::Key(key.clone()),
            inner: Inner::Key(Box::new(key::KeyFollow::new(sources, key, from).await?)),
        })
    }

    /// A follower of every session of `agent` (every agent's, with `None`), from `from`.
    pub(crate) fn agents(sources: Sources, agent: Option<AgentId>, from: Position) -> Result<Self> {
        let scope = agent.clone().map_or(Scope::Store, Scope::Agent);
        let since = match from {
            Position::Now => sources.clock.now_millis(),
            Position::Since(ms) => ms,
            Position::Start => 0,
            other => return Err(unsupported(&scope, &other)),
        };
        Ok(Follow {
            scope,
            inner: Inner::Agents(Box::new(agents::AgentsFollow::new(sources, agent, since))),
        })
    }

    /// What is followed.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Where a follower started later would pick up: [`Position::After`] for a session
    /// or a key (once a session is followed; [`Position::Start`] before), and
    /// [`Position::Since`] for an agent or the store.
    pub fn position(&self) -> Position {
        match &self.inner {
            Inner::Session { follow, .. } => Position::After {
                session_id: follow.transcript().session_id.clone(),
                offset: follow.position(),
            },
            Inner::Key(follow) => follow.position().unwrap_or(Position::Start),
            Inner::Agents(follow) => Position::Since(follow.position()),
        }
    }

    /// A session's or key's follower resumed at a position, just after the line with id
    /// `line` as whoever kept the position read it (an event stream's id carries it):
    /// its first read checks the store still has that line there, and tells
    /// [`Update::Rewound`] to the session's start if it does not.
    #[cfg(feature = "http")]
    pub(crate) fn expecting(mut self, line: String) -> Self {
        self.inner = match self.inner {
            Inner::Session { key, follow } => Inner::Session {
                key,
                follow: Box::new(follow.expecting(line)),
            },
            Inner::Key(follow) => Inner::Key(Box::new(follow.expecting(line))),
            agents => agents,
        };
        self
    }

    /// Looks again this often when no live update wakes the follower (default: the
    /// transcript store's [`follow_interval`](TranscriptStore::follow_interval)).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        let every = every.max(Duration::from_millis(1));
        self.inner = match self.inner {
            Inner::Session { key, follow } => Inner::Session {
                key,
                follow: Box::new(follow.poll_interval(every)),
            },
            Inner::Key(follow) => Inner::Key(Box::new(follow.poll_interval(every))),
            Inner::Agents(follow) => Inner::Agents(Box::new(follow.poll_interval(every))),
        };
        self
    }

    /// The next update, waiting until there is one.
    ///
    /// A call that fails (a transient store error: a lost connection) or is given up
    /// on (a timeout, a `select!`) loses nothing: what it had read is returned by the
    /// next call, which goes on from there.
    pub async fn next(&mut self) -> Result<Update> {
        match &mut self.inner {
            Inner::Session { key, follow } => match follow.next().await? {
                Some(read) => Ok(session_update(key, follow, read)),
                None => Ok(Update::Ended {
                    session_id: follow.transcript().session_id.clone(),
                }),
            },
            Inner::Key(follow) => follow.next().await,
            Inner::Agents(follow) => follow.next().await,
        }
    }

    /// The next update if there is one now, without waiting.
    pub async fn try_next(&mut self) -> Result<Option<Update>> {
        match &mut self.inner {
            Inner::Session { key, follow } => match follow.try_next().await? {
                Some(read) => Ok(Some(session_update(key, follow, read))),
                None if follow.is_ended() => Ok(Some(Update::Ended {
                    session_id: follow.transcript().session_id.clone(),
                })),
                None => Ok(None),
            },
            Inner::Key(follow) => follow.try_next().await,
            Inner::Agents(follow) => follow.try_next().await,
        }
    }
}

/// What a read of a session's transcript tells its follower.
fn session_update(
    key: &SessionKey,
    follow: &transcript::TranscriptFollow,
    read: transcript::Read,
) -> Update {
    let session_id = follow.transcript().session_id.clone();
    let next = Position::After {
        session_id: session_id.clone(),
        offset: follow.position(),
    };
    let key = key.clone();
    match read {
        transcript::Read::Events(events) => Update::Events {
            key,
            session_id,
            events,
            next,
        },
        transcript::Read::Rewound(_) => Update::Rewound {
            key,
            session_id,
            next,
        },
    }
}

/// A position a scope does not start from.
fn unsupported(scope: &Scope, from: &Position) -> Error {
    Error::invalid_id(
        IdKind::Position,
        &from.to_string(),
        match scope {
            Scope::Session(_) => {
                "a session is followed from start or from <sessionId>:<offset> in it"
            }
            Scope::Key(_) => {
                "a key is followed from start or from <sessionId>:<offset> in one of its sessions"
            }
            Scope::Agent(_) | Scope::Store => {
                "an agent or the store is followed from start, now or a time (epoch milliseconds)"
            }
        },
    )
}
