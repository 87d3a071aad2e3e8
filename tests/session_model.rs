//! The session model on every backend: replaced sessions stay readable by id, closed;
//! listings hide inactive sessions unless asked; idle sessions are checkpointed once.

mod common;

use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::manager::SessionManagerBuilder;
use agent_sessions::prelude::*;
use agent_sessions::privacy::PruneOptions;
use agent_sessions::{SessionKey, SessionStatus, StatusFilter};

const START_MS: u64 = 1_770_000_000_000;

fn dm(body: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", body)
}

/// A manager builder on each backend: memory, JSON and SQLite under `dir`, and — with
/// a test server — PostgreSQL in a schema of its own, dropped by [`Backends::finish`].
struct Backends {
    builders: Vec<(&'static str, SessionManagerBuilder)>,
    #[cfg(postgres_tests)]
    schemas: Vec<common::TestSchema>,
}

impl Backends {
    async fn new(dir: &std::path::Path, name: &str) -> Self {
        #[allow(unused_mut)] // PostgreSQL is added only with a test server
        let mut builders = vec![
            (
                "memory",
                SessionManager::builder(InMemoryStore::new())
                    .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new()),
            ),
            (
                "json",
                SessionManager::connect(&format!("json:{}", dir.join(name).display()))
                    .await
                    .unwrap(),
            ),
            (
                "sqlite",
                SessionManager::connect(&format!(
                    "sqlite:{}",
                    dir.join(format!("{name}.db")).display()
                ))
                .await
                .unwrap(),
            ),
        ];
        #[cfg(postgres_tests)]
        let schema = common::TestSchema::new(&format!("closed_{name}"));
        #[cfg(postgres_tests)]
        builders.push((
            "postgres",
            SessionManager::connect(&schema.url()).await.unwrap(),
        ));
        Backends {
            builders,
            #[cfg(postgres_tests)]
            schemas: vec![schema],
        }
    }

    async fn finish(self) {
        #[cfg(postgres_tests)]
        for schema in self.schemas {
            schema.drop().await;
        }
    }
}

/// How a session gets replaced under its key.
#[derive(Debug, Clone, Copy)]
enum Replacement {
    ResetPhrase,
    ResetCall,
    IdleTimeout,
    MessageAfterClose,
}

/// After each kind of replacement the old session is no longer its key's session, but
/// reads back by its id as `closed`, keeps what it had, and lists only when closed
/// sessions are asked for.
#[tokio::test]
async fn replaced_sessions_stay_readable_by_id_as_closed_on_every_backend() {
    let replacements = [
        Replacement::ResetPhrase,
        Replacement::ResetCall,
        Replacement::IdleTimeout,
        Replacement::MessageAfterClose,
    ];
    for replacement in replacements {
        let dir = tempfile::tempdir().unwrap();
        let mut backends =
            Backends::new(dir.path(), &format!("{replacement:?}").to_lowercase()).await;
        for (backend, builder) in std::mem::take(&mut backends.builders) {
            let clock = ManualClock::at_millis(START_MS);
            let manager = builder
                .clock(clock.clone())
                .freshness(ResetConfig::default().reset(ResetSpec::idle(30)))
                .build()
                .unwrap();
            let first = manager.resolve(&dm("plan a trip")).await.unwrap();
            let old_id = first.session_id().to_owned();
            clock.advance(Duration::from_secs(60));
            let new_id = match replacement {
                Replacement::ResetPhrase => manager
                    .resolve(&dm("/new"))
                    .await
                    .unwrap()
                    .session_id()
                    .to_owned(),
                Replacement::ResetCall => {
                    manager
                        .session(&first.key)
                        .reset()
                        .await
                        .unwrap()
                        .entry
                        .session_id
                }
                Replacement::IdleTimeout => {
                    clock.advance(Duration::from_secs(31 * 60));
                    manager
                        .resolve(&dm("back again"))
                        .await
                        .unwrap()
                        .session_id()
                        .to_owned()
                }
                Replacement::MessageAfterClose => {
                    manager.session(&first.key).close().await.unwrap();
                    manager
                        .resolve(&dm("hello?"))
                        .await
                        .unwrap()
                        .session_id()
                        .to_owned()
                }
            };
            let case = format!("{backend}, {replacement:?}");
            assert_ne!(new_id, old_id, "{case}: a new session");
            assert!(
                manager
                    .find_session(&old_id, StatusFilter::Current)
                    .await
                    .unwrap()
                    .is_none(),
                "{case}: no longer the key's session"
            );
            let closed = manager
                .find_session(&old_id, StatusFilter::Any)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{case}: the old session reads back"));
            assert_eq!(closed.key, first.key, "{case}");
            assert_eq!(closed.entry.status, Some(SessionStatus::Closed), "{case}");
            assert_eq!(
                closed.entry.last_message_preview.as_deref(),
                Some("plan a trip"),
                "{case}: kept as it was"
            );
            assert!(closed.entry.closed_at.is_some(), "{case}: closedAt is set");

            let ids = |sessions: Vec<StoredSession>| -> Vec<String> {
                sessions.into_iter().map(|s| s.entry.session_id).collect()
            };
            let listed = ids(manager.list(&ListFilter::new()).await.unwrap());
            assert_eq!(
                listed,
                vec![new_id.clone()],
                "{case}: listings show the current one"
            );
            let closed_only = ListFilter::new().status(SessionStatus::Closed);
            assert_eq!(
                ids(manager.list(&closed_only).await.unwrap()),
                vec![old_id.clone()],
                "{case}: closed listing"
            );
            assert_eq!(
                manager.store().count(&closed_only).await.unwrap(),
                1,
                "{case}"
            );
        }
        backends.finish().await;
    }
}

/// Pruning by age removes closed sessions whose last activity is older, as it removes
/// old current ones; a dry run reports them and removes nothing.
#[tokio::test]
async fn prune_removes_closed_sessions_older_than_its_age_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::new(dir.path(), "prune").await;
    for (backend, builder) in std::mem::take(&mut backends.builders) {
        let clock = ManualClock::at_millis(START_MS);
        let manager = builder.clock(clock.clone()).build().unwrap();
        let old = manager.resolve(&dm("old")).await.unwrap();
        clock.advance(Duration::from_secs(3 * 24 * 3600));
        let recent = manager.resolve(&dm("/new recent")).await.unwrap();
        clock.advance(Duration::from_secs(3600));
        let current = manager.resolve(&dm("/new now")).await.unwrap();

        let options = PruneOptions::older_than(Duration::from_secs(24 * 3600));
        let reported = manager.prune(&options.clone().dry_run()).await.unwrap();
        let ids = |sessions: &[StoredSession]| -> Vec<String> {
            sessions
                .iter()
                .map(|s| s.entry.session_id.clone())
                .collect()
        };
        assert_eq!(ids(&reported), [old.session_id()], "{backend}: dry run");
        let closed = ListFilter::new().status(SessionStatus::Closed);
        assert_eq!(
            manager.store().count(&closed).await.unwrap(),
            2,
            "{backend}"
        );

        let removed = manager.prune(&options).await.unwrap();
        assert_eq!(ids(&removed), [old.session_id()], "{backend}");
        let left = manager.list(&closed).await.unwrap();
        assert_eq!(ids(&left), [recent.session_id()], "{backend}");
        assert!(
            manager
                .find_session(current.session_id(), StatusFilter::Current)
                .await
                .unwrap()
                .is_some(),
            "{backend}: the current session stays"
        );
    }
    backends.finish().await;
}

/// Listings hide `inactive` sessions unless asked; pruning still sees them.
#[tokio::test]
async fn inactive_sessions_are_hidden_from_listings_unless_asked_on_every_backend() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::new(dir.path(), "inactive").await;
    for (backend, builder) in std::mem::take(&mut backends.builders) {
        let clock = ManualClock::at_millis(START_MS);
        let manager = builder.clock(clock.clone()).build().unwrap();
        let hidden = manager
            .open(&agent_sessions::SessionSource::cli("old"), None)
            .await
            .unwrap();
        manager
            .session(&hidden.key)
            .set_status(SessionStatus::Inactive)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2 * 24 * 3600));
        let shown = manager.resolve(&dm("hi")).await.unwrap();
        let keys = |filter: ListFilter| {
            let manager = &manager;
            async move {
                manager
                    .list(&filter)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|s| s.key)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            keys(ListFilter::new()).await,
            vec![shown.key.clone()],
            "{backend}"
        );
        assert_eq!(
            keys(ListFilter::new().include_inactive()).await,
            [shown.key.clone(), hidden.key.clone()],
            "{backend}"
        );
        assert_eq!(
            keys(ListFilter::new().status(SessionStatus::Inactive)).await,
            vec![hidden.key.clone()],
            "{backend}"
        );
        assert_eq!(ListFilter::all().status, StatusFilter::Current);
        assert!(
            manager
                .find_session(hidden.session_id(), StatusFilter::Current)
                .await
                .unwrap()
                .is_some(),
            "{backend}: an inactive session is still found by id"
        );
        let pruned = manager
            .prune(&PruneOptions::older_than(Duration::from_secs(24 * 3600)))
            .await
            .unwrap();
        assert_eq!(
            pruned.into_iter().map(|s| s.key).collect::<Vec<_>>(),
            vec![hidden.key.clone()],
            "{backend}: pruning sees inactive sessions"
        );
    }
    backends.finish().await;
}

/// The `idle` checkpoint events in `key`'s current transcript.
async fn idle_checkpoints(manager: &SessionManager, key: &SessionKey) -> usize {
    use agent_sessions::transcript::{EventKind, Offset};
    manager
        .session(key)
        .replay(Offset::START)
        .await
        .unwrap()
        .events
        .iter()
        .filter(|e| e.kind() == EventKind::Checkpoint)
        .filter(|e| e.entry.data.as_ref().and_then(|d| d["reason"].as_str()) == Some("idle"))
        .count()
}

/// The sweep checkpoints each session once per quiet period, at most `max` a pass, and
/// a session is due again only after a new message — on every backend.
#[tokio::test]
async fn idle_sessions_are_checkpointed_once_per_quiet_period_on_every_backend() {
    let quiet = Duration::from_secs(20 * 60);
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Backends::new(dir.path(), "idle").await;
    for (backend, builder) in std::mem::take(&mut backends.builders) {
        let clock = ManualClock::at_millis(START_MS);
        let manager = builder
            .clock(clock.clone())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .build()
            .unwrap();
        let alice = manager
            .resolve(&InboundMessage::direct("telegram", "1", "hi"))
            .await
            .unwrap()
            .key;
        let bob = manager
            .resolve(&InboundMessage::direct("telegram", "2", "hi"))
            .await
            .unwrap()
            .key;
        let busy = manager
            .resolve(&InboundMessage::direct("telegram", "3", "hi"))
            .await
            .unwrap()
            .key;
        manager
            .session(&busy)
            .set_status(SessionStatus::Running)
            .await
            .unwrap();

        // (minutes to advance, message from alice first, how many checkpoints the pass
        // takes, alice's and bob's idle checkpoints after it)
        let steps: [(u64, bool, usize, usize, usize); 6] = [
            (19, false, 0, 0, 0), // not quiet long enough
            (1, false, 1, 1, 0),  // both due; one per pass
            (0, false, 1, 1, 1),  // the other
            (30, false, 0, 1, 1), // still the same quiet period: nothing again
            (1, true, 0, 1, 1),   // alice writes: a new period begins
            (20, false, 1, 2, 1), // alice is quiet again: a second checkpoint
        ];
        for (n, (minutes, alice_writes, taken, alice_count, bob_count)) in
            steps.into_iter().enumerate()
        {
            clock.advance(Duration::from_secs(minutes * 60));
            if alice_writes {
                manager
                    .resolve(&InboundMessage::direct("telegram", "1", "back"))
                    .await
                    .unwrap();
            }
            let pass = manager.checkpoint_idle_sessions(quiet, 1).await.unwrap();
            assert_eq!(pass.len(), taken, "{backend}, step {n}: {pass:?}");
            assert_eq!(
                idle_checkpoints(&manager, &alice).await,
                alice_count,
                "{backend}, step {n}"
            );
            assert_eq!(
                idle_checkpoints(&manager, &bob).await,
                bob_count,
                "{backend}, step {n}"
            );
            assert_eq!(
                idle_checkpoints(&manager, &busy).await,
                0,
                "{backend}: a running session is left alone"
            );
        }
    }
    backends.finish().await;
}

/// The spawned sweep runs a pass every interval without the host timing anything, and
/// stops when its handle is dropped.
#[tokio::test(start_paused = true)]
async fn the_spawned_idle_sweep_runs_on_its_interval_and_stops_when_dropped() {
    use agent_sessions::memory::IdleCheckpointOptions;
    let clock = ManualClock::at_millis(START_MS);
    let manager = std::sync::Arc::new(
        SessionManager::builder(InMemoryStore::new())
            .transcripts(agent_sessions::transcript::InMemoryTranscriptStore::new())
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let alice = manager
        .resolve(&InboundMessage::direct("telegram", "1", "hi"))
        .await
        .unwrap()
        .key;
    let bob = manager
        .resolve(&InboundMessage::direct("telegram", "2", "hi"))
        .await
        .unwrap()
        .key;
    let options = IdleCheckpointOptions::after(Duration::from_secs(20 * 60))
        .every(Duration::from_secs(60))
        .at_most(1);
    let sweep = manager.spawn_idle_checkpoints(options);
    let settle = || async {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    };
    settle().await;
    let total = || async {
        idle_checkpoints(&manager, &alice).await + idle_checkpoints(&manager, &bob).await
    };
    assert_eq!(total().await, 0, "nobody is quiet yet");
    clock.advance(Duration::from_secs(21 * 60));
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(total().await, 1, "one pass, one checkpoint at most");
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(total().await, 2, "the next pass takes the other");
    drop(sweep);
    manager
        .resolve(&InboundMessage::direct("telegram", "1", "back"))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(21 * 60));
    tokio::time::advance(Duration::from_secs(600)).await;
    settle().await;
    assert_eq!(
        total().await,
        2,
        "a dropped sweep takes no more checkpoints"
    );
}
