//! Following every session of an agent, or of the whole store: sessions as they start,
//! change status and grow, from any process.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::transcript::{Read, TranscriptFollow};
use super::{Position, Sources, Update};
use crate::error::Result;
use crate::freshness::Clock;
use crate::identity::key::{AgentId, SessionKey};
use crate::store::entry::SessionStatus;
use crate::store::{ListFilter, SessionStore, StatusFilter, StoredSession};
use crate::transcript::{
    EventKind, Offset, SessionEvent, SubscriptionError, TranscriptRef, TranscriptStore,
    TranscriptSubscription,
};

/// The most sessions an agent's or the store's follower ([`Scope::Agent`](super::Scope::Agent), [`Scope::Store`](super::Scope::Store)) watches at once: past it, the least recently
/// active is dropped, and watched again when it is active again — from the follower's
/// start, so its lines since then may come again (with the same session id and
/// offset).
pub const MAX_WATCHED_SESSIONS: usize = 1024;

/// How far back a follower looks, before the time it last looked, for activity it
/// may not have seen yet: writes whose clocks lag a little, entries written just as it
/// listed them.
const LOOK_BACK_MS: u64 = 2_000;

/// About how many lines a follower reads ahead of its reader.
const MAX_PENDING_EVENTS: usize = 1024;

/// About how many bytes of transcript a follower reads ahead of its reader: one chunk,
/// as a session's follower reads (a line is read whole, so one line bigger than this is
/// held alone) — what a reader that stops reading holds, whatever the size of the lines.
const MAX_PENDING_BYTES: u64 = crate::transcript::DEFAULT_CHUNK_BYTES as u64;

/// A follower of everything an agent's sessions do (or every agent's), from any process: sessions as
/// they start, status changes, and the lines each one's transcript gains.
///
/// A session is noticed when its entry
/// records activity (every turn does, and a reset's new session) or when the store
/// announces an append (this process's appends; other processes' on SQLite and
/// PostgreSQL); lines are then read from its transcript in order, and a status line
/// among them (a close, a status set) is told as [`Update::Status`]. On a JSON
/// tree, a session another process only closes or appends to without a turn is
/// noticed once it is followed. Memory is bounded:
/// it watches at most [`MAX_WATCHED_SESSIONS`] sessions and reads each a chunk at a
/// time.
///
/// In a session that was already there when the follower started, its lines are told
/// apart by their timestamps: one written with a clock behind the follower's start is
/// not delivered (a session started since delivers every line).
///
/// `position` is a time: a follower started there again delivers
/// every line written since, at least once — lines delivered just before may come
/// again, each with the same session id and offset, by which a client that needs
/// exactly once tells them apart.
///
pub(super) struct AgentsFollow {
    sessions: Arc<dyn SessionStore>,
    transcripts: Arc<dyn TranscriptStore>,
    clock: Arc<dyn Clock>,
    default_agent: AgentId,
    /// The agent followed; every agent with `None`.
    agent: Option<AgentId>,
    /// Lines written before this time (epoch milliseconds) are not delivered.
    since: u64,
    /// When the store was last listed for activity.
    listed_at: u64,
    /// Everything delivered was written before this, or after it and delivered too:
    /// where a follower would start again.
    position: u64,
    /// Where the position moves once what the last complete look found is delivered.
    complete: Option<u64>,
    watched: HashMap<String, Watched>,
    /// Sessions found unreadable, not followed again (at most
    /// [`MAX_WATCHED_SESSIONS`] remembered).
    unreadable: VecDeque<String>,
    pending: VecDeque<Update>,
    /// Sessions whose lines set a status the entry is still to be asked for (at most
    /// one each).
    status_unread: Vec<SessionKey>,
    wake: TranscriptSubscription,
    poll_interval: Duration,
}

struct Watched {
    key: SessionKey,
    /// For a session that was there before the follower started: lines written
    /// before this time (epoch milliseconds) are skipped. A newer session's lines
    /// are all new, whatever their timestamps say.
    skip_before: Option<u64>,
    status: Option<SessionStatus>,
    follow: TranscriptFollow,
    /// When it was last active, for choosing which to drop.
    active_at: u64,
}

impl AgentsFollow {
    /// Follows every session of `agent` (of every agent with `None`): the lines
    /// written since `since` (epoch milliseconds).
    pub(super) fn new(sources: Sources, agent: Option<AgentId>, since: u64) -> Self {
        let watched_agent = agent.clone();
        // Subscribed before the first look, so nothing falls between the two.
        let wake = sources.transcripts.subscribe().only(move |update| {
            watched_agent
                .as_ref()
                .is_none_or(|agent| update.transcript.agent == *agent)
        });
        let poll_interval = sources.transcripts.follow_interval();
        AgentsFollow {
            sessions: sources.sessions,
            transcripts: sources.transcripts,
            clock: sources.clock,
            default_agent: sources.default_agent,
            agent,
            since,
            listed_at: since,
            position: since,
            complete: None,
            watched: HashMap::new(),
            unreadable: VecDeque::new(),
            pending: VecDeque::new(),
            status_unread: Vec::new(),
            wake,
            poll_interval,
        }
    }

    /// Where a follower started later would pick up (epoch milliseconds): every line
    /// written since then is delivered by it, some perhaps again.
    pub(super) fn position(&self) -> u64 {
        self.position
    }

    pub(super) fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// The next update, waiting until there is one.
    pub(super) async fn next(&mut self) -> Result<Update> {
        loop {
            if let Some(update) = self.try_next().await? {
                return Ok(update);
            }
            let woken = tokio::time::timeout(self.poll_interval, self.wake.recv()).await;
            match woken {
                Ok(Ok(update)) => self.noticed(update.transcript).await?,
                Ok(Err(SubscriptionError::Closed)) => tokio::time::sleep(self.poll_interval).await,
                Ok(Err(SubscriptionError::Lagged(_))) | Err(_) => {}
            }
        }
    }

    /// The next update if there is one now, without waiting.
    pub(super) async fn try_next(&mut self) -> Result<Option<Update>> {
        if let Some(update) = self.pending.pop_front() {
            return Ok(Some(update));
        }
        // What the last complete look found is delivered: a follower started again
        // need not look before it.
        if let Some(done) = self.complete.take() {
            self.position = self.position.max(done);
        }
        let started = self.clock.now_millis();
        self.look().await?;
        if self.read().await? {
            // Every line written before this look began is read (its clock allowing).
            self.complete = Some(started.saturating_sub(LOOK_BACK_MS));
        }
        Ok(self.pending.pop_front())
    }

    /// Watches the sessions whose entries recorded activity since the last look, and
    /// tells of status changes.
    async fn look(&mut self) -> Result<()> {
        let now = self.clock.now_millis();
        let after = self.listed_at.saturating_sub(LOOK_BACK_MS);
        let mut current = ListFilter::new().include_inactive().updated_after(after);
        if let Some(agent) = &self.agent {
            current = current.agent(agent.clone());
        }
        let mut closed = current.clone();
        closed.status = StatusFilter::Only(vec![SessionStatus::Closed]);
        let mut active = self.sessions.list(&closed).await?;
        active.extend(self.sessions.list(&current).await?);
        // Oldest first, so sessions are told of in the order they were active.
        active.sort_by_key(|s| s.entry.updated_at);
        for session in active {
            // Last active before the follower's start: nothing of it to tell.
            if session.entry.updated_at >= self.since {
                self.watch(session);
            }
        }
        self.listed_at = now;
        Ok(())
    }

    /// Starts watching `session`, or tells of its new status if it is watched.
    fn watch(&mut self, session: StoredSession) {
        let id = session.entry.session_id.clone();
        if self.unreadable.contains(&id) {
            return;
        }
        if let Some(watched) = self.watched.get_mut(&id) {
            watched.active_at = watched.active_at.max(session.entry.updated_at);
            if watched.status != session.entry.status {
                watched.status = session.entry.status.clone();
                self.pending.push_back(Update::Status {
                    session: Box::new(session),
                });
            }
            return;
        }
        let started = session
            .entry
            .session_started_at
            .unwrap_or(session.entry.updated_at);
        let transcript = TranscriptRef::of(&session.key, &session.entry, &self.default_agent);
        let follow = TranscriptFollow::new(self.transcripts.clone(), transcript, Offset::START)
            .poll_interval(self.poll_interval);
        let new = started >= self.since;
        self.watched.insert(
            id,
            Watched {
                key: session.key.clone(),
                skip_before: (!new).then_some(self.since),
                status: session.entry.status.clone(),
                follow,
                active_at: session.entry.updated_at,
            },
        );
        self.pending.push_back(Update::Session {
            new,
            previous: None,
            session: Box::new(session),
        });
        self.drop_least_active();
    }

    /// A transcript the store announced an append to: watched, if it is this agent's.
    async fn noticed(&mut self, transcript: TranscriptRef) -> Result<()> {
        if self
            .agent
            .as_ref()
            .is_some_and(|agent| transcript.agent != *agent)
            || self.watched.contains_key(&transcript.session_id)
        {
            return Ok(());
        }
        let filter = ListFilter::new()
            .agent(transcript.agent.clone())
            .session_id(transcript.session_id.clone())
            .limit(1);
        let mut found = self.sessions.list(&filter).await?;
        if found.is_empty() {
            let mut closed = filter.clone();
            closed.status = StatusFilter::Only(vec![SessionStatus::Closed]);
            found = self.sessions.list(&closed).await?;
        }
        if let Some(session) = found.pop() {
            self.watch(session);
        }
        Ok(())
    }

    /// The watched sessions' new lines, those written since the follower's start,
    /// until about [`MAX_PENDING_EVENTS`] or [`MAX_PENDING_BYTES`] wait; whether every
    /// session was read to its end.
    async fn read(&mut self) -> Result<bool> {
        let mut waiting = 0;
        let mut waiting_bytes = 0;
        let mut complete = true;
        let mut refused = Vec::new();
        // A transient failure ends the read; it is returned after what was read before
        // it, which is pending.
        let mut failed = None;
        for (session_id, watched) in &mut self.watched {
            // The session's lines go on one update, made as they are read: a read
            // dropped part way (a failure, a caller's timeout) loses nothing its
            // follower has moved past.
            let mut open = false;
            loop {
                if waiting >= MAX_PENDING_EVENTS || waiting_bytes >= MAX_PENDING_BYTES {
                    // The rest is read at the next look.
                    complete = false;
                    break;
                }
                let events = match watched.follow.try_next().await {
                    Ok(Some(Read::Events(events))) => events,
                    Ok(Some(Read::Rewound(offset))) => {
                        // After what is pending: the caller forgets what it lost.
                        self.pending.push_back(Update::Rewound {
                            key: watched.key.clone(),
                            session_id: session_id.clone(),
                            next: Position::After {
                                session_id: session_id.clone(),
                                offset,
                            },
                        });
                        open = false;
                        continue;
                    }
                    Ok(None) => break,
                    Err(error) if error.is_transient() => {
                        failed = Some(error);
                        break;
                    }
                    Err(error) => {
                        refused.push((session_id.clone(), error.to_string()));
                        break;
                    }
                };
                // What was read, skipped lines too (a chunk is held while it is parsed).
                waiting_bytes += events.iter().map(SessionEvent::encoded_len).sum::<u64>();
                // Lines from before the start are skipped, a chunk at a time.
                let skip_before = watched.skip_before;
                let new: Vec<SessionEvent> = events
                    .into_iter()
                    .filter(|event| {
                        skip_before
                            .is_none_or(|since| written_at(event).is_none_or(|at| at >= since))
                    })
                    .collect();
                waiting += new.len();
                if let Some(at) = new.iter().filter_map(written_at).max() {
                    watched.active_at = watched.active_at.max(at);
                }
                // A status line (a close, a status set) does not move the entry's
                // `updatedAt`: the entry is asked for its new status.
                if new.iter().any(|e| e.kind() == EventKind::StatusChange)
                    && !self.status_unread.contains(&watched.key)
                {
                    self.status_unread.push(watched.key.clone());
                }
                let next = Position::After {
                    session_id: session_id.clone(),
                    offset: watched.follow.position(),
                };
                match self.pending.back_mut() {
                    Some(Update::Events {
                        events, next: at, ..
                    }) if open => {
                        events.extend(new);
                        *at = next;
                    }
                    _ if new.is_empty() => {}
                    _ => {
                        self.pending.push_back(Update::Events {
                            key: watched.key.clone(),
                            session_id: session_id.clone(),
                            events: new,
                            next,
                        });
                        open = true;
                    }
                }
            }
            if !complete || failed.is_some() {
                break;
            }
        }
        for (session_id, problem) in refused {
            let Some(watched) = self.watched.remove(&session_id) else {
                continue;
            };
            tracing::warn!(key = %watched.key, %session_id, %problem, "a followed session's transcript cannot be read; no longer followed");
            if self.unreadable.len() >= MAX_WATCHED_SESSIONS {
                self.unreadable.pop_front();
            }
            self.unreadable.push_back(session_id.clone());
            self.pending.push_back(Update::Unreadable {
                key: watched.key,
                session_id,
                problem,
            });
        }
        if let Some(error) = failed {
            return Err(error);
        }
        // Each asked until it answers: a failure leaves the rest for the next read.
        while let Some(key) = self.status_unread.first() {
            if let Some(session) = self.sessions.get(key).await? {
                if self.watched.contains_key(&session.entry.session_id) {
                    self.watch(session);
                }
            }
            self.status_unread.remove(0);
        }
        Ok(complete)
    }

    fn drop_least_active(&mut self) {
        while self.watched.len() > MAX_WATCHED_SESSIONS {
            let Some(oldest) = self
                .watched
                .iter()
                .min_by_key(|(_, w)| w.active_at)
                .map(|(id, _)| id.clone())
            else {
                return;
            };
            self.watched.remove(&oldest);
        }
    }
}

/// When a line was written, from its timestamp (epoch milliseconds).
fn written_at(event: &SessionEvent) -> Option<u64> {
    let at = chrono::DateTime::parse_from_rfc3339(event.entry.timestamp.as_deref()?).ok()?;
    u64::try_from(at.timestamp_millis()).ok()
}
