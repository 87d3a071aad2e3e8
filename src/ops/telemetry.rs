//! What the crate tells an operator: tracing spans, and metrics with feature `metrics`.
//! `docs/observability.md` says the same with examples of installing a subscriber.
//!
//! # Spans
//!
//! Every span has the target `agent_sessions` and level `INFO`; the names and fields
//! below are a stable interface (fields may be added, none renamed or removed in a minor
//! release). No span or event at `INFO` or above carries message text.
//!
//! | span | opened by | fields |
//! | --- | --- | --- |
//! | `resolve` | [`SessionManager::resolve`](crate::SessionManager::resolve) and [`turn`](crate::SessionManager::turn) | `channel`, `key`, `agent`, `session_id`, `decision`, `reason` |
//! | `turn` | [`SessionManager::turn`](crate::SessionManager::turn) | `channel`, `key`, `session_id`, `action` |
//! | `turn.complete` | [`Turn::complete`](crate::manager::Turn::complete) | `key`, `session_id`, `payloads` |
//! | `store.update` | every session update of this crate's stores (`apply`, `apply_many`) | `backend`, `key` (the first, for several), `keys`, `lock_wait_us`, `bytes` (JSON: the file written) |
//! | `transcript.append` | every transcript append of this crate's stores | `backend`, `agent`, `session_id`, `events`, `bytes` |
//! | `http.request` | the HTTP service's router (feature `http`) | `method`, `route`, `status` |
//!
//! A field is empty until known: `session_id`, `decision` and `reason` are recorded when
//! the session is resolved, `lock_wait_us` when the lock is taken.
//!
//! # Metrics
//!
//! With feature `metrics`, the crate records through the [`metrics`] facade — to whatever
//! recorder the host installs (`agent-sessions serve --metrics` installs a Prometheus
//! one and serves `/metrics`):
//!
//! | metric | kind | labels |
//! | --- | --- | --- |
//! | `agent_sessions_turns_total` | counter: resolutions | `decision`, `reason` |
//! | `agent_sessions_store_update_seconds` | histogram: a whole update, lock wait included | `backend` |
//! | `agent_sessions_store_lock_wait_seconds` | histogram: waiting for the store's lock | `backend` |
//! | `agent_sessions_store_lock_timeouts_total` | counter | `backend` |
//! | `agent_sessions_transcript_bytes_total` | counter: bytes appended to transcripts | |
//! | `agent_sessions_errors_total` | counter: failed updates, appends and resolutions | `kind` ([`Error::kind`]) |
//! | `agent_sessions_duplicates_total` | counter: messages a channel delivered again | |
//! | `agent_sessions_turns_failed_total` | counter: turns ended by [`Turn::fail`](crate::manager::Turn::fail) | `input` (`kept`, `dropped`) |
//! | `agent_sessions_deliveries_total` | counter: reported deliveries | `status` (`delivered`, `failed`, `partly`) |
//! | `agent_sessions_queue_total` | counter: messages that arrived during a run, by what became of them | `event` (`queued`, `collected`, `steered`, `dropped`) |
//! | `agent_sessions_queue_wait_seconds` | histogram: how long a queued message's turn waited for its run | |
//! | `agent_sessions_runs_total` | counter: runs that lost their session, runs taken over from a holder that is gone | `event` (`lost`, `taken_over`) |
//! | `agent_sessions_shared_dm_senders_total` | counter: new senders in a DM session every sender shares ([`DmScope::Main`](crate::identity::key::DmScope::Main)) | |
//! | `agent_sessions_out_of_descriptors_total` | counter: files not opened for want of a descriptor | |
//! | `agent_sessions_http_connections_shed_total` | counter: idle unauthenticated connections `serve` closed | |

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::{Error, Result};
use crate::identity::key::SessionKey;
use crate::transcript::{SessionEvent, TranscriptRef};

/// The metrics facade, or nothing without feature `metrics`.
#[cfg(feature = "metrics")]
mod record {
    pub(super) fn histogram(
        name: &'static str,
        labels: &[(&'static str, &'static str)],
        value: f64,
    ) {
        metrics::histogram!(name, labels_of(labels)).record(value);
    }

    pub(super) fn counter(name: &'static str, labels: &[(&'static str, &'static str)], value: u64) {
        metrics::counter!(name, labels_of(labels)).increment(value);
    }

    fn labels_of(labels: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
        labels
            .iter()
            .map(|(key, value)| metrics::Label::from_static_parts(key, value))
            .collect()
    }
}

#[cfg(not(feature = "metrics"))]
mod record {
    pub(super) fn histogram(_: &'static str, _: &[(&'static str, &'static str)], _: f64) {}

    pub(super) fn counter(_: &'static str, _: &[(&'static str, &'static str)], _: u64) {}
}

/// Runs one session update of `backend` on `keys` inside its `store.update` span, and
/// records its duration and failure.
pub(crate) async fn update<T>(
    backend: &'static str,
    keys: &[SessionKey],
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    let span = tracing::info_span!(
        target: "agent_sessions",
        "store.update",
        backend,
        key = keys.first().map(tracing::field::display),
        keys = keys.len(),
        lock_wait_us = Empty,
        bytes = Empty,
    );
    let started = Instant::now();
    // Boxed: the span wrapper would otherwise grow every caller's future (and, in
    // debug builds, the stack of whoever blocks on it).
    let result = Box::pin(work).instrument(span).await;
    record::histogram(
        "agent_sessions_store_update_seconds",
        &[("backend", backend)],
        started.elapsed().as_secs_f64(),
    );
    if let Err(error) = &result {
        failed(error);
    }
    result
}

/// The current update took its lock after `waited`.
pub(crate) fn lock_taken(backend: &'static str, waited: Duration) {
    Span::current().record("lock_wait_us", waited.as_micros() as u64);
    record::histogram(
        "agent_sessions_store_lock_wait_seconds",
        &[("backend", backend)],
        waited.as_secs_f64(),
    );
}

/// The current update gave up waiting for its lock.
pub(crate) fn lock_timed_out(backend: &'static str) {
    record::counter(
        "agent_sessions_store_lock_timeouts_total",
        &[("backend", backend)],
        1,
    );
}

/// The current update wrote `bytes`.
pub(crate) fn wrote(bytes: usize) {
    Span::current().record("bytes", bytes as u64);
}

/// Runs one transcript append of `backend` inside its `transcript.append` span, and
/// counts its failure.
pub(crate) async fn append(
    backend: &'static str,
    transcript: &TranscriptRef,
    work: impl Future<Output = Result<Vec<SessionEvent>>>,
) -> Result<Vec<SessionEvent>> {
    let span = tracing::info_span!(
        target: "agent_sessions",
        "transcript.append",
        backend,
        agent = transcript.agent.as_str(),
        session_id = transcript.session_id.as_str(),
        events = Empty,
        bytes = Empty,
    );
    let result = Box::pin(work).instrument(span.clone()).await;
    match &result {
        Ok(events) => {
            span.record("events", events.len() as u64);
        }
        Err(error) => failed(error),
    }
    result
}

/// The current transcript append wrote `bytes`.
pub(crate) fn appended(bytes: usize) {
    Span::current().record("bytes", bytes as u64);
    record::counter("agent_sessions_transcript_bytes_total", &[], bytes as u64);
}

/// The current resolution was decided.
pub(crate) fn decided(decision: &'static str, reason: &'static str) {
    let span = Span::current();
    span.record("decision", decision);
    span.record("reason", reason);
    record::counter(
        "agent_sessions_turns_total",
        &[("decision", decision), ("reason", reason)],
        1,
    );
}

/// Counts a turn whose model call failed, by what became of its input (`kept`,
/// `dropped`).
pub(crate) fn turn_failed(input: &'static str) {
    record::counter("agent_sessions_turns_failed_total", &[("input", input)], 1);
}

/// Counts a reported delivery, by its status (`delivered`, `failed`).
pub(crate) fn delivered(status: &'static str) {
    record::counter("agent_sessions_deliveries_total", &[("status", status)], 1);
}

/// Counts a new sender in a DM session every sender shares.
pub(crate) fn shared_dm_sender() {
    record::counter("agent_sessions_shared_dm_senders_total", &[], 1);
}

/// Counts a message a channel delivered again.
pub(crate) fn duplicate() {
    record::counter("agent_sessions_duplicates_total", &[], 1);
}

/// Counts a message that arrived during a run and waits in the session's queue.
pub(crate) fn queued() {
    record::counter("agent_sessions_queue_total", &[("event", "queued")], 1);
}

/// Counts messages the queue's cap dropped.
pub(crate) fn dropped(count: u64) {
    record::counter("agent_sessions_queue_total", &[("event", "dropped")], count);
}

/// Records how long a queued message's turn waited before it ran, and counts the other
/// queued messages it answers with its own (each collected message is counted here,
/// once).
pub(crate) fn queue_waited(waited: Duration, collected: usize) {
    record::histogram(
        "agent_sessions_queue_wait_seconds",
        &[],
        waited.as_secs_f64(),
    );
    record::counter(
        "agent_sessions_queue_total",
        &[("event", "collected")],
        collected as u64,
    );
    tracing::debug!(target: "agent_sessions", waited_ms = waited.as_millis() as u64, collected, "a queued message's turn runs");
}

/// Counts messages a running turn took at a tool boundary.
pub(crate) fn steered(count: usize) {
    record::counter(
        "agent_sessions_queue_total",
        &[("event", "steered")],
        count as u64,
    );
}

/// Counts a run that lost its session (interrupted, or taken over).
pub(crate) fn run_lost() {
    record::counter("agent_sessions_runs_total", &[("event", "lost")], 1);
}

/// Counts a run taken over from a holder that is gone.
pub(crate) fn run_taken_over() {
    record::counter("agent_sessions_runs_total", &[("event", "taken_over")], 1);
}

/// Counts connections `serve` closed to make room (idle, no secret shown).
#[cfg(feature = "http")]
pub(crate) fn connections_shed(count: usize) {
    record::counter(
        "agent_sessions_http_connections_shed_total",
        &[],
        count as u64,
    );
}

/// Counts a file the process could not open for want of a file descriptor.
pub(crate) fn out_of_descriptors() {
    record::counter("agent_sessions_out_of_descriptors_total", &[], 1);
}

/// Counts a failure by its kind.
pub(crate) fn failed(error: &Error) {
    record::counter("agent_sessions_errors_total", &[("kind", error.kind())], 1);
}
