//! What every [`SystemEvents`] queue must do, as [`SystemEventQueue`](crate::inbound::SystemEventQueue) does: run on every
//! queue of the crate by
//! [`system_events_conformance_tests!`](crate::system_events_conformance_tests) (and on
//! a host's own), and here on `SystemEventQueue` itself, so the suite is known to
//! describe the in-memory semantics.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::identity::key::SessionKey;
use crate::inbound::events::{SystemEvent, SystemEvents};

/// One step of [`bounded_and_skipping_repeats`].
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub enum Step {
    /// Enqueue to a session, and whether it was queued.
    Enqueue(&'static str, &'static str, bool),
    /// Drain a session, and the texts returned.
    Drain(&'static str, &'static [&'static str]),
}

#[doc(hidden)]
pub fn session(name: &str) -> SessionKey {
    SessionKey::parse(&format!("agent:main:telegram:dm:{name}")).unwrap()
}

fn at() -> DateTime<Utc> {
    "2026-01-12T20:19:17Z".parse().unwrap()
}

fn texts(events: Vec<SystemEvent>) -> Vec<String> {
    events.into_iter().map(|e| e.text).collect()
}

/// Blank texts and repeats of the last queued text are skipped (a repeat still
/// touches its session), at most `max_events` newest events a session, at most
/// `max_sessions` sessions with the least recently touched dropped first, and a drain
/// empties a session and frees its place. `make(case, max_events, max_sessions)` gives
/// empty queues with those bounds; `pause` is slept between steps (for stores that
/// order sessions by file time).
#[doc(hidden)]
pub async fn bounded_and_skipping_repeats<E, F, Fut>(make: F, pause: Duration)
where
    E: SystemEvents,
    F: Fn(usize, usize, usize) -> Fut,
    Fut: Future<Output = E>,
{
    use Step::{Drain, Enqueue};
    // (max events, max sessions, steps, what each session drains afterwards)
    type Case = (
        usize,
        usize,
        &'static [Step],
        &'static [(&'static str, &'static [&'static str])],
    );
    let cases: &[Case] = &[
        // Text is trimmed; blank text and a repeat of the last one are skipped; an
        // earlier text may come again.
        (
            20,
            10,
            &[
                Enqueue("a", "  ", false),
                Enqueue("a", " x ", true),
                Enqueue("a", "x", false),
                Enqueue("a", "y", true),
                Enqueue("a", "x", true),
            ],
            &[("a", &["x", "y", "x"])],
        ),
        // The newest `max_events`, in enqueue order.
        (
            2,
            10,
            &[
                Enqueue("a", "1", true),
                Enqueue("a", "2", true),
                Enqueue("a", "3", true),
            ],
            &[("a", &["2", "3"])],
        ),
        // Drained once; after a drain the same text is new again.
        (
            20,
            10,
            &[
                Enqueue("a", "x", true),
                Enqueue("b", "y", true),
                Drain("a", &["x"]),
                Drain("a", &[]),
                Enqueue("a", "x", true),
            ],
            &[("a", &["x"]), ("b", &["y"])],
        ),
        // A third session drops the first.
        (
            20,
            2,
            &[
                Enqueue("a", "1", true),
                Enqueue("b", "2", true),
                Enqueue("c", "3", true),
            ],
            &[("a", &[]), ("b", &["2"]), ("c", &["3"])],
        ),
        // Least recently touched, not least recently created: a was touched after b.
        (
            20,
            2,
            &[
                Enqueue("a", "1", true),
                Enqueue("b", "2", true),
                Enqueue("a", "3", true),
                Enqueue("c", "4", true),
            ],
            &[("a", &["1", "3"]), ("b", &[]), ("c", &["4"])],
        ),
        // A skipped repeat touches its session too.
        (
            20,
            2,
            &[
                Enqueue("a", "1", true),
                Enqueue("b", "2", true),
                Enqueue("a", "1", false),
                Enqueue("c", "3", true),
            ],
            &[("a", &["1"]), ("b", &[]), ("c", &["3"])],
        ),
        // A drain frees the session's place.
        (
            20,
            2,
            &[
                Enqueue("a", "1", true),
                Enqueue("b", "2", true),
                Drain("a", &["1"]),
                Enqueue("c", "3", true),
            ],
            &[("a", &[]), ("b", &["2"]), ("c", &["3"])],
        ),
    ];
    for (n, (max_events, max_sessions, steps, expected)) in cases.iter().enumerate() {
        let events = make(n, *max_events, *max_sessions).await;
        let case = format!("case {n} (max {max_events} events, {max_sessions} sessions)");
        for step in *steps {
            match *step {
                Enqueue(name, text, queued) => assert_eq!(
                    events.enqueue(&session(name), text, at()).await.unwrap(),
                    queued,
                    "{case}: {step:?}"
                ),
                Drain(name, drained) => assert_eq!(
                    texts(events.drain(&session(name)).await.unwrap()),
                    drained,
                    "{case}: {step:?}"
                ),
            }
            tokio::time::sleep(pause).await;
        }
        for (name, drained) in *expected {
            assert_eq!(
                texts(events.drain(&session(name)).await.unwrap()),
                *drained,
                "{case}, {steps:?}: session {name}"
            );
        }
    }
}

/// Text and time come back as they were queued (times to the microsecond), oldest
/// first, and sessions do not see each other's events.
#[doc(hidden)]
pub async fn events_keep_text_and_time<E: SystemEvents>(events: E) {
    let queued = [
        SystemEvent {
            text: "Model switched to 'opus' — \"quoted\", ünïcödé 🍕\nsecond line".into(),
            at: "2026-01-12T20:19:17.123456Z".parse().unwrap(),
        },
        SystemEvent {
            text: "%_\\ LIKE wildcards'; DROP TABLE system_events; --".into(),
            at: "1970-01-01T00:00:00Z".parse().unwrap(),
        },
        SystemEvent {
            text: "Reminder fired.".into(),
            at: "2300-06-01T00:00:00.000001Z".parse().unwrap(),
        },
    ];
    let key = session("1'; --");
    for event in &queued {
        assert!(events.enqueue(&key, &event.text, event.at).await.unwrap());
    }
    assert_eq!(events.drain(&session("1")).await.unwrap(), []);
    assert_eq!(events.drain(&key).await.unwrap(), queued);
    assert_eq!(events.drain(&key).await.unwrap(), []);
}

/// Two writers enqueue to one session while two drainers drain it, over and over:
/// every event is returned by exactly one drain, each writer's events in the order it
/// queued them. The handles may be one queue or four (processes, hosts); their
/// per-session bound must hold every event (`2 * per_writer`).
#[doc(hidden)]
pub async fn drain_once_beside_concurrent_enqueues<E>(
    writers: [E; 2],
    drainers: [E; 2],
    per_writer: usize,
) where
    E: SystemEvents + 'static,
{
    let key = session("raced");
    // The writers enqueue half, then meet the drainers: drains start while the second
    // halves are being enqueued, however the scheduler runs the tasks.
    let halfway = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let mut writing = tokio::task::JoinSet::new();
    for (w, events) in writers.into_iter().enumerate() {
        let key = key.clone();
        let halfway = halfway.clone();
        writing.spawn(async move {
            for i in 0..per_writer {
                if i == per_writer / 2 {
                    halfway.wait().await;
                }
                assert!(events
                    .enqueue(&key, &format!("{w}-{i}"), Utc::now())
                    .await
                    .unwrap());
                tokio::task::yield_now().await;
            }
        });
    }
    let (done, _) = tokio::sync::watch::channel(false);
    let mut draining = tokio::task::JoinSet::new();
    for events in drainers {
        let key = key.clone();
        let done = done.subscribe();
        let halfway = halfway.clone();
        draining.spawn(async move {
            halfway.wait().await;
            let mut seen = Vec::new();
            loop {
                let finished = *done.borrow();
                seen.extend(texts(events.drain(&key).await.unwrap()));
                if finished {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        });
    }
    while let Some(written) = writing.join_next().await {
        written.unwrap();
    }
    done.send_replace(true);
    let mut seen: Vec<String> = Vec::new();
    while let Some(drained) = draining.join_next().await {
        let texts = drained.unwrap();
        // A drain takes everything queued so far, so what one drainer sees of a
        // writer is in the writer's order.
        for w in 0..2 {
            let order: Vec<usize> = texts
                .iter()
                .filter_map(|text| text.strip_prefix(&format!("{w}-")))
                .map(|i| i.parse().unwrap())
                .collect();
            assert!(
                order.windows(2).all(|p| p[0] < p[1]),
                "writer {w}: {order:?}"
            );
        }
        seen.extend(texts);
    }
    assert_eq!(seen.len(), 2 * per_writer, "every event returned");
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "nothing returned twice");
}

/// Queues exported — leaving them queued — and imported into other (empty) queues
/// drain the same there, in order with their times; a session with events queued
/// already is left alone.
#[doc(hidden)]
pub async fn queues_travel_whole<E: SystemEvents>(source: E, target: E) {
    let (one, two) = (session("one"), session("two"));
    source.enqueue(&one, "Model switched.", at()).await.unwrap();
    source
        .enqueue(&one, "Reminder fired.", at() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    source.enqueue(&two, "Node connected.", at()).await.unwrap();
    let mut exported = source.export_queues().await.unwrap();
    exported.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(exported.len(), 2);
    assert_eq!(
        texts(source.drain(&one).await.unwrap()),
        ["Model switched.", "Reminder fired."],
        "an export leaves the events queued"
    );
    for (key, events) in &exported {
        assert!(target.import_queue(key, events.clone()).await.unwrap());
    }
    let mut there = target.export_queues().await.unwrap();
    there.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(there, exported);
    assert!(
        !target
            .import_queue(&two, exported[1].1.clone())
            .await
            .unwrap(),
        "a session with events queued is left alone"
    );
    let drained = target.drain(&one).await.unwrap();
    assert_eq!(
        texts(drained.clone()),
        ["Model switched.", "Reminder fired."]
    );
    assert_eq!(drained[1].at, at() + chrono::Duration::seconds(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::events::SystemEventQueue;

    #[tokio::test]
    async fn the_in_memory_queue_is_what_the_suite_describes() {
        bounded_and_skipping_repeats(
            |_, max_events, max_sessions| async move {
                SystemEventQueue::with_limits(max_events, max_sessions)
            },
            Duration::ZERO,
        )
        .await;
        events_keep_text_and_time(SystemEventQueue::default()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_in_memory_queue_drains_once() {
        let events = std::sync::Arc::new(SystemEventQueue::with_limits(1000, 10));
        drain_once_beside_concurrent_enqueues(
            [events.clone(), events.clone()],
            [events.clone(), events],
            200,
        )
        .await;
    }
}
