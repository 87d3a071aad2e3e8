//! Following a session key: its current session's transcript, and the next session's
//! when the key moves on (a reset, a close, an expiry).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::SessionManager;
use crate::entry::SessionStatus;
use crate::error::{Error, IdKind, Result};
use crate::key::{AgentId, SessionKey};
use crate::store::{ListFilter, SessionStore, StatusFilter, StoredSession};
use crate::transcript::{
    Offset, SessionEvent, SubscriptionError, TranscriptFollow, TranscriptRef, TranscriptStore,
    TranscriptSubscription,
};

/// A place in a key's history of sessions: a session and an offset in its transcript.
///
/// Written `<sessionId>:<offset>` — what a key stream sends as each event's id and
/// takes back to resume.
///
/// ```
/// use agent_sessions::manager::KeyPosition;
/// use agent_sessions::transcript::Offset;
///
/// let position: KeyPosition = "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11:2048".parse()?;
/// assert_eq!(position.offset, Offset(2048));
/// assert_eq!(position.to_string(), "0f5d59ee-1c2b-4e0f-9a57-2b1f7f0e6a11:2048");
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyPosition {
    /// The session.
    pub session_id: String,
    /// Where the next read of its transcript starts.
    pub offset: Offset,
}

impl fmt::Display for KeyPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.session_id, self.offset)
    }
}

impl FromStr for KeyPosition {
    type Err = Error;

    fn from_str(raw: &str) -> Result<Self> {
        let refused = |problem| Error::invalid_id(IdKind::SessionId, raw, problem);
        let (session_id, offset) = raw
            .trim()
            .rsplit_once(':')
            .ok_or_else(|| refused("a key position is <sessionId>:<offset>"))?;
        let offset = offset
            .parse::<u64>()
            .map_err(|_| refused("the offset after the colon is not a number"))?;
        crate::paths::validate_session_id(session_id)?;
        Ok(KeyPosition {
            session_id: session_id.to_owned(),
            offset: Offset(offset),
        })
    }
}

/// What a [`KeyFollow`] returns: the session it now follows, or what was appended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum KeyUpdate {
    /// The follower moved to this session of the key: the first it follows, or the
    /// next one after the session it followed was replaced (see the entry's
    /// [`start_reason`](crate::SessionEntry::start_reason) for why). Its events follow.
    Session {
        /// The session, as the store has it now.
        session: Box<StoredSession>,
        /// The session followed before, if any.
        previous: Option<String>,
    },
    /// Events appended to a session's transcript, in order.
    Events {
        /// Their session.
        session_id: String,
        /// The events.
        events: Vec<SessionEvent>,
        /// Where the next read starts: resume here to get only what follows.
        next: KeyPosition,
    },
}

/// A live feed of everything a session key's conversations hold, across resets: the
/// key's session, then the next one when the key moves on, from any process.
///
/// Made by [`SessionManager::follow_key`]. Where a [`TranscriptFollow`] ends with its
/// session, this one continues into the session that replaced it, announcing it with
/// [`KeyUpdate::Session`]; sessions the key went through while nobody followed (two
/// resets in a row) are each visited in the order they started. It never ends by
/// itself: drop it to stop.
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::manager::KeyUpdate;
/// use agent_sessions::transcript::MemoryTranscriptStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let manager = SessionManager::builder(MemoryStore::new())
///     .transcripts(MemoryTranscriptStore::new())
///     .build()?;
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "hi")).await?;
/// let key = turn.key().clone();
/// turn.complete("hello!").await?;
///
/// let mut follow = manager.follow_key(&key, None).await?;
/// let KeyUpdate::Session { session, .. } = follow.next().await? else { unreachable!() };
/// let first = session.entry.session_id.clone();
/// let KeyUpdate::Events { events, .. } = follow.next().await? else { unreachable!() };
/// assert_eq!(events.len(), 2, "the message and the reply");
///
/// // `/new` replaces the session: the follower moves on with the key.
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "/new")).await?;
/// turn.complete("fresh start").await?;
/// let KeyUpdate::Session { session, previous } = follow.next().await? else { unreachable!() };
/// assert_eq!(previous.as_deref(), Some(first.as_str()));
/// assert_eq!(session.entry.start_reason.as_deref(), Some("explicit_reset"));
/// # Ok(())
/// # }
/// ```
pub struct KeyFollow {
    sessions: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
    default_agent: AgentId,
    key: SessionKey,
    /// The session followed, when it started (milliseconds), and its follower.
    current: Option<(String, u64, TranscriptFollow)>,
    /// The session followed before the current one, until it is announced.
    previous: Option<String>,
    wake: TranscriptSubscription,
    poll_interval: Duration,
}

impl fmt::Debug for KeyFollow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFollow")
            .field("key", &self.key)
            .field("position", &self.position())
            .finish_non_exhaustive()
    }
}

impl KeyFollow {
    /// The key followed.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// Where the next read starts, once a session is followed: a follower made from
    /// it later returns only what came after.
    pub fn position(&self) -> Option<KeyPosition> {
        self.current
            .as_ref()
            .map(|(session_id, _, follow)| KeyPosition {
                session_id: session_id.clone(),
                offset: follow.position(),
            })
    }

    /// Looks again this often when no live update wakes the follower (default: the
    /// transcript store's [`follow_interval`](TranscriptStore::follow_interval)).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The next update, waiting until there is one: the events appended to the
    /// followed session, or the session the key moved on to.
    pub async fn next(&mut self) -> Result<KeyUpdate> {
        loop {
            if let Some(update) = self.try_next().await? {
                return Ok(update);
            }
            // A wake-up is a hint only: what is new is read from the stores.
            let woken = tokio::time::timeout(self.poll_interval, self.wake.recv()).await;
            if let Ok(Err(SubscriptionError::Closed)) = woken {
                tokio::time::sleep(self.poll_interval).await;
            }
        }
    }

    /// The next update if there is one now, without waiting.
    pub async fn try_next(&mut self) -> Result<Option<KeyUpdate>> {
        if let Some((session_id, _, follow)) = &mut self.current {
            if let Some(events) = follow.try_next().await? {
                let next = KeyPosition {
                    session_id: session_id.clone(),
                    offset: follow.position(),
                };
                return Ok(Some(KeyUpdate::Events {
                    session_id: session_id.clone(),
                    events,
                    next,
                }));
            }
        }
        // Everything of the followed session is read: has the key moved on?
        let Some(next) = self.successor().await? else {
            return Ok(None);
        };
        self.start(&next, Offset::START)?;
        let previous = self.previous.take();
        Ok(Some(KeyUpdate::Session {
            session: Box::new(next),
            previous,
        }))
    }

    /// Follows `session` from `from`; a session id that cannot name a transcript is
    /// [`Error::InvalidId`], and the follower stays where it was.
    fn start(&mut self, session: &StoredSession, from: Offset) -> Result<()> {
        crate::paths::validate_session_id(&session.entry.session_id)?;
        let transcript = TranscriptRef::of(&self.key, &session.entry, &self.default_agent);
        let follow = TranscriptFollow::new(self.transcripts.clone(), transcript, from)
            .poll_interval(self.poll_interval);
        let started = started_at(session);
        let replaced = self
            .current
            .replace((session.entry.session_id.clone(), started, follow));
        self.previous = replaced.map(|(id, _, _)| id);
        Ok(())
    }

    /// The session to follow after the current one: the first of the key's sessions
    /// that started after it, or the key's session when none is followed yet.
    async fn successor(&self) -> Result<Option<StoredSession>> {
        let current = self.sessions.get(&self.key).await?;
        let Some((followed, started, _)) = &self.current else {
            return Ok(current);
        };
        if current
            .as_ref()
            .is_some_and(|c| &c.entry.session_id == followed)
        {
            // Still the key's session (or closed in place, not yet replaced).
            return Ok(None);
        }
        let after = (*started, followed.as_str());
        let mut closed = self.closed_sessions().await?;
        closed.extend(current);
        Ok(closed
            .into_iter()
            .filter(|s| (started_at(s), s.entry.session_id.as_str()) > after)
            .min_by(|a, b| {
                (started_at(a), &a.entry.session_id).cmp(&(started_at(b), &b.entry.session_id))
            }))
    }

    /// The key's closed sessions replaced under it.
    async fn closed_sessions(&self) -> Result<Vec<StoredSession>> {
        let mut filter = ListFilter::all().key_prefix(self.key.as_str());
        filter.status = StatusFilter::Only(vec![SessionStatus::Closed]);
        let mut closed = self.sessions.list(&filter).await?;
        closed.retain(|s| s.key == self.key);
        Ok(closed)
    }
}

fn started_at(session: &StoredSession) -> u64 {
    session
        .entry
        .session_started_at
        .unwrap_or(session.entry.updated_at)
}

impl SessionManager {
    /// Follows `key` across its sessions (see [`KeyFollow`]): from `from` — a position
    /// a follower of this key gave — or, without one, from the start of the key's
    /// current session (waiting for one if the key has none yet).
    ///
    /// A position in none of the key's sessions (current or closed) is
    /// [`Error::InvalidId`]; an offset that is not where an event starts is
    /// [`Error::InvalidOffset`] at the first read. Resumed at a position, the follower
    /// returns that session's events without announcing it again. Needs a transcript store
    /// ([`Error::NotConfigured`] otherwise).
    pub async fn follow_key(
        &self,
        key: &SessionKey,
        from: Option<KeyPosition>,
    ) -> Result<KeyFollow> {
        let transcripts = self.seams.transcripts.clone().ok_or(Error::NotConfigured {
            what: "a transcript store (SessionManagerBuilder::transcripts)",
        })?;
        let agent = key
            .agent_id()
            .map(str::to_owned)
            .unwrap_or_else(|| self.settings.default_agent.as_str().to_owned());
        // Subscribed before the first read, so nothing falls between the two.
        let wake = transcripts
            .subscribe()
            .only(move |update| update.transcript.agent.as_str() == agent);
        let poll_interval = transcripts.follow_interval();
        let mut follow = KeyFollow {
            sessions: self.seams.store.clone(),
            transcripts,
            default_agent: self.settings.default_agent.clone(),
            key: key.clone(),
            current: None,
            previous: None,
            wake,
            poll_interval,
        };
        if let Some(position) = from {
            let session = match follow.sessions.get(key).await? {
                Some(current) if current.entry.session_id == position.session_id => Some(current),
                _ => follow
                    .closed_sessions()
                    .await?
                    .into_iter()
                    .find(|s| s.entry.session_id == position.session_id),
            };
            let session = session.ok_or_else(|| {
                Error::invalid_id(
                    IdKind::SessionId,
                    &position.session_id,
                    "the position's session is none of the key's sessions",
                )
            })?;
            follow.start(&session, position.offset)?;
            follow.previous = None;
        }
        Ok(follow)
    }
}
