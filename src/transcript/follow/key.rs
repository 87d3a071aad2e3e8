//! Following a session key: its current session's transcript, and the next session's
//! when the key moves on (a reset, a close, an expiry).

use std::sync::Arc;
use std::time::Duration;

use super::transcript::TranscriptFollow;
use super::{Position, Sources, Update};
use crate::error::{Error, IdKind, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionStatus;
use crate::store::{ListFilter, SessionStore, StatusFilter, StoredSession};
use crate::transcript::{
    Offset, SubscriptionError, TranscriptRef, TranscriptStore, TranscriptSubscription,
};

/// A key's follower: the key's session, then the next one when the key moves on.
/// Sessions the key went through while nobody followed (two resets in a row) are each
/// visited in the order they started.
pub(super) struct KeyFollow {
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

impl KeyFollow {
    /// Follows `key` from `from` (a session of the key and an offset in it), or from
    /// the start of the key's current session (waiting for one if the key has none).
    ///
    /// A position in none of the key's sessions (current or closed) is
    /// [`Error::InvalidId`]; an offset that is not where an event starts is
    /// [`Error::InvalidOffset`] at the first read. Resumed at a position, the follower
    /// returns that session's events without announcing it again.
    pub(super) async fn new(
        sources: Sources,
        key: &SessionKey,
        from: Option<(String, Offset)>,
    ) -> Result<Self> {
        let transcripts = sources.transcripts;
        let agent = key
            .agent_id()
            .map(str::to_owned)
            .unwrap_or_else(|| sources.default_agent.as_str().to_owned());
        // Subscribed before the first read, so nothing falls between the two.
        let wake = transcripts
            .subscribe()
            .only(move |update| update.transcript.agent.as_str() == agent);
        let poll_interval = transcripts.follow_interval();
        let mut follow = KeyFollow {
            sessions: sources.sessions,
            transcripts,
            default_agent: sources.default_agent,
            key: key.clone(),
            current: None,
            previous: None,
            wake,
            poll_interval,
        };
        if let Some((session_id, offset)) = from {
            let session = match follow.sessions.get(key).await? {
                Some(current) if current.entry.session_id == session_id => Some(current),
                _ => follow
                    .closed_sessions()
                    .await?
                    .into_iter()
                    .find(|s| s.entry.session_id == session_id),
            };
            let session = session.ok_or_else(|| {
                Error::invalid_id(
                    IdKind::SessionId,
                    &session_id,
                    "the position's session is none of the key's sessions",
                )
            })?;
            follow.start(&session, offset)?;
            follow.previous = None;
        }
        Ok(follow)
    }

    /// Where the next read starts, once a session is followed.
    pub(super) fn position(&self) -> Option<Position> {
        self.current
            .as_ref()
            .map(|(session_id, _, follow)| Position::After {
                session_id: session_id.clone(),
                offset: follow.position(),
            })
    }

    /// The session followed resumed just after the line with id `line` (see
    /// [`TranscriptFollow::expecting`]).
    #[cfg(feature = "http")]
    pub(super) fn expecting(mut self, line: String) -> Self {
        self.current = self
            .current
            .map(|(id, started, follow)| (id, started, follow.expecting(line)));
        self
    }

    pub(super) fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// The next update, waiting until there is one: the events appended to the
    /// followed session, or the session the key moved on to.
    pub(super) async fn next(&mut self) -> Result<Update> {
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
    pub(super) async fn try_next(&mut self) -> Result<Option<Update>> {
        if let Some((_, _, follow)) = &mut self.current {
            if let Some(read) = follow.try_next().await? {
                return Ok(Some(super::session_update(&self.key, follow, read)));
            }
        }
        // Everything of the followed session is read: has the key moved on?
        let Some(next) = self.successor().await? else {
            return Ok(None);
        };
        self.start(&next, Offset::START)?;
        let previous = self.previous.take();
        Ok(Some(Update::Session {
            session: Box::new(next),
            previous,
            new: true,
        }))
    }

    /// Follows `session` from `from`; a session id that cannot name a transcript is
    /// [`Error::InvalidId`], and the follower stays where it was.
    fn start(&mut self, session: &StoredSession, from: Offset) -> Result<()> {
        crate::store::json::paths::validate_session_id(&session.entry.session_id)?;
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
