//! The JSON store and OpenClaw writing one `sessions.json` at the same time.
//!
//! OpenClaw's side is `common/openclaw_writer.rs`, a writer following OpenClaw's
//! store protocol step for step (`O_EXCL` lock file, 25 ms poll, 10 s timeout, full
//! read and rewrite of the store, lock re-taken at once for the next update).
//!
//! The process-level test re-executes this test binary: each child runs the ignored
//! test `cowrite_child`, which finds its instructions in the environment.

#[path = "common/openclaw_writer.rs"]
mod openclaw_writer;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions, LockOptions};

use openclaw_writer::{session_of, Outcome};

const SPEC_VAR: &str = "AGENT_SESSIONS_COWRITE_SPEC";

/// The tests here measure lock waits: they run one at a time, never beside another's
/// processes and threads on a small machine.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `test` on a Tokio runtime with two worker threads.
fn on_two_workers(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test);
}

/// A store of this crate with OpenClaw's lock timing and no fsync (OpenClaw's).
fn crate_store(root: &Path, timeout: Duration) -> JsonFileStore {
    JsonFileStore::new_with(
        root,
        JsonFileOptions {
            durability: Durability::Unsynced,
            lock: LockOptions {
                timeout,
                ..LockOptions::default()
            },
            ..JsonFileOptions::default()
        },
    )
}

fn store_file(root: &Path) -> PathBuf {
    agent_sessions::store::store_path(root, &AgentId::main())
}

/// Adds one to session `i`'s crate counter.
async fn crate_update(store: &JsonFileStore, i: usize) -> agent_sessions::Result<()> {
    let key = SessionKey::parse(&openclaw_writer::key(i)).unwrap();
    store
        .with_session(&key, |entry| {
            entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
        })
        .await
}

/// What the writers of one kind reported.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    updated: u64,
    timeouts: u64,
}

/// Runs `openclaw` OpenClaw-protocol processes and `ours` processes of this crate,
/// each making `updates` updates spread over a store of `sessions` sessions; returns
/// what each kind reported and the tally of the store afterwards.
fn co_write(
    openclaw: usize,
    ours: usize,
    updates: usize,
    sessions: usize,
) -> (Counts, Counts, openclaw_writer::Tally) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    openclaw_writer::seed(&store_file(&root), sessions);
    let exe = std::env::current_exe().unwrap();
    let roles = (0..openclaw.max(ours)).flat_map(|i| {
        let theirs = (i < openclaw).then_some("openclaw");
        let mine = (i < ours).then_some("crate");
        [theirs, mine].into_iter().flatten()
    });
    let children: Vec<_> = roles
        .enumerate()
        .map(|(writer, role)| {
            let spec = format!("{role}|{}|{writer}|{updates}|{sessions}", root.display());
            let child = Command::new(&exe)
                .args(["cowrite_child", "--exact", "--ignored", "--test-threads=1"])
                .env(SPEC_VAR, spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (role, writer, child)
        })
        .collect();
    let (mut theirs, mut mine) = (Counts::default(), Counts::default());
    for (role, writer, child) in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The child must really have run the worker, not an empty filter.
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result = std::fs::read_to_string(root.join(format!("result-{writer}"))).unwrap();
        let (updated, timeouts) = result.trim().split_once(' ').unwrap();
        let counts = if role == "openclaw" {
            &mut theirs
        } else {
            &mut mine
        };
        counts.updated += updated.parse::<u64>().unwrap();
        counts.timeouts += timeouts.parse::<u64>().unwrap();
    }
    (
        theirs,
        mine,
        openclaw_writer::tally(&store_file(&root), sessions),
    )
}

#[test]
fn the_crate_and_openclaw_share_a_store_without_losing_updates_or_timing_out() {
    let _alone = one_at_a_time();
    // (OpenClaw-protocol processes, crate processes, updates each, sessions)
    let cases = [(1, 1, 60, 100), (2, 2, 40, 200), (1, 3, 30, 100)];
    for (openclaw, ours, updates, sessions) in cases {
        let case = format!("{openclaw} OpenClaw + {ours} crate processes x {updates} updates");
        let (theirs, mine, tally) = co_write(openclaw, ours, updates, sessions);
        assert_eq!(
            mine,
            Counts {
                updated: (ours * updates) as u64,
                timeouts: 0
            },
            "{case}: the crate's updates"
        );
        assert_eq!(
            theirs.updated + theirs.timeouts,
            (openclaw * updates) as u64,
            "{case}"
        );
        // No update lost: the counters in the file add up to the updates made.
        assert_eq!(tally.crate_writes, mine.updated, "{case}: crate counter");
        assert_eq!(
            tally.openclaw_writes, theirs.updated,
            "{case}: OpenClaw counter"
        );
        // Every entry kept the field neither writer knows.
        assert_eq!(tally.entries, sessions, "{case}");
        assert_eq!(tally.damaged, Vec::<String>::new(), "{case}");
    }
}

#[test]
#[ignore = "a child process of the co-writing test"]
fn cowrite_child() {
    let spec = std::env::var(SPEC_VAR).expect("run by the co-writing test, not directly");
    let parts: Vec<&str> = spec.split('|').collect();
    let [role, root, writer, updates, sessions] = parts[..] else {
        panic!("bad spec {spec}");
    };
    let root = Path::new(root);
    let (writer, updates, sessions): (usize, usize, usize) = (
        writer.parse().unwrap(),
        updates.parse().unwrap(),
        sessions.parse().unwrap(),
    );
    let mut counts = Counts::default();
    if role == "openclaw" {
        for n in 0..updates {
            let key = openclaw_writer::key(session_of(writer, n, sessions));
            match openclaw_writer::update(&store_file(root), &key).unwrap() {
                Outcome::Updated { .. } => counts.updated += 1,
                Outcome::TimedOut(_) => counts.timeouts += 1,
            }
        }
    } else {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = crate_store(root, openclaw_writer::TIMEOUT);
        runtime.block_on(async {
            for n in 0..updates {
                match crate_update(&store, session_of(writer, n, sessions)).await {
                    Ok(()) => counts.updated += 1,
                    Err(agent_sessions::Error::LockTimeout { .. }) => counts.timeouts += 1,
                    Err(error) => panic!("{error}"),
                }
            }
        });
    }
    let result = format!("{} {}\n", counts.updated, counts.timeouts);
    std::fs::write(root.join(format!("result-{writer}")), result).unwrap();
}

/// A thread holding OpenClaw's lock on the store at `store` for `hold` at a time and
/// taking it again `gap` after releasing it (polling every 25 ms, as OpenClaw does,
/// while someone else holds it), until `stop`. Returns how often it took the lock.
fn lock_hog(
    store: PathBuf,
    hold: Duration,
    gap: Duration,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let lock = openclaw_writer::lock_path(&store);
        let mut taken = 0;
        while !stop.load(Ordering::SeqCst) {
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock);
            let Ok(mut file) = created else {
                thread::sleep(openclaw_writer::POLL);
                continue;
            };
            use std::io::Write;
            let _ = file.write_all(br#"{"pid":4242,"startedAt":1770350000000}"#);
            taken += 1;
            thread::sleep(hold);
            std::fs::remove_file(&lock).unwrap();
            let released = Instant::now();
            while released.elapsed() < gap {
                std::hint::spin_loop();
            }
        }
        taken
    })
}

#[test]
fn a_foreign_holder_that_retakes_the_lock_at_once_does_not_keep_the_crate_out() {
    let _alone = one_at_a_time();
    on_two_workers(
        a_foreign_holder_that_retakes_the_lock_at_once_does_not_keep_the_crate_out_run(),
    );
}

async fn a_foreign_holder_that_retakes_the_lock_at_once_does_not_keep_the_crate_out_run() {
    // (how long the foreign holder keeps the lock, how soon it takes it again): a
    // waiter looking every 25 ms finds such a lock free about once in a hundred looks
    // (gap ÷ (hold + gap)), so its median wait is about two seconds. The timeout is
    // OpenClaw's own: typical waits here are tens of milliseconds, but on a small
    // machine short of processor time a sleeping waiter runs only when the scheduler
    // lets it, and single waits of seconds have been seen.
    const UPDATES: usize = 7;
    let cases = [
        (Duration::from_millis(10), Duration::from_micros(100)),
        (Duration::from_millis(5), Duration::from_micros(50)),
        (Duration::from_millis(20), Duration::from_micros(200)),
    ];
    for (hold, gap) in cases {
        let dir = tempfile::tempdir().unwrap();
        openclaw_writer::seed(&store_file(dir.path()), 10);
        let stop = Arc::new(AtomicBool::new(false));
        let hog = lock_hog(store_file(dir.path()), hold, gap, stop.clone());
        let store = crate_store(dir.path(), agent_sessions::store::DEFAULT_LOCK_TIMEOUT);
        let mut waits = Vec::new();
        let mut failures = Vec::new();
        for i in 0..UPDATES {
            let started = Instant::now();
            match crate_update(&store, i).await {
                Ok(()) => waits.push(started.elapsed()),
                Err(error) => failures.push(error.to_string()),
            }
            // Let the holder take the lock back.
            tokio::time::sleep(hold * 3).await;
        }
        stop.store(true, Ordering::SeqCst);
        let taken = hog.join().unwrap();
        // One update starved of processor time may wait out the timeout; the rest get
        // the lock, the typical one within a second (a 25 ms poller's median wait here
        // is about two seconds).
        assert!(
            failures.len() <= 1,
            "holding {hold:?}, re-taking after {gap:?}: {failures:?}"
        );
        waits.sort();
        let median = waits[waits.len() / 2];
        assert!(
            median < Duration::from_secs(1),
            "holding {hold:?}, re-taking after {gap:?}: waits {waits:?}"
        );
        assert!(
            taken >= UPDATES as u64,
            "the holder held the lock between the updates"
        );
    }
}

#[test]
fn busy_crate_writers_leave_the_lock_to_a_waiting_openclaw_now_and_then() {
    let _alone = one_at_a_time();
    on_two_workers(busy_crate_writers_leave_the_lock_to_a_waiting_openclaw_now_and_then_run());
}

async fn busy_crate_writers_leave_the_lock_to_a_waiting_openclaw_now_and_then_run() {
    // (tasks of this crate updating the store without pause, how long each update
    // holds the lock): an OpenClaw-protocol writer arriving meanwhile gets the lock
    // within 0.6 s each time. Without the courtesy it would find the lock free only
    // in the instants between two of the crate's updates (or batches of updates).
    let cases = [
        (1, Duration::from_millis(20)),
        (1, Duration::from_millis(50)),
        (3, Duration::from_millis(10)),
    ];
    for (tasks, hold) in cases {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let file = store_file(&root);
        openclaw_writer::seed(&file, 100);
        let store = crate_store(&root, Duration::from_secs(10));
        // The crate first meets OpenClaw's lock, so it knows OpenClaw is about.
        let lock = openclaw_writer::lock_path(&file);
        std::fs::write(&lock, r#"{"pid":4242,"startedAt":1770350000000}"#).unwrap();
        let first = tokio::spawn({
            let store = store.clone();
            async move { crate_update(&store, 0).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::remove_file(&lock).unwrap();
        first.await.unwrap().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..tasks)
            .map(|task| {
                let (store, stop) = (store.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = SessionKey::parse(&openclaw_writer::key(task)).unwrap();
                        store
                            .with_session(&key, |entry| {
                                thread::sleep(hold);
                                entry.compaction_count = Some(n);
                            })
                            .await
                            .unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let waits = tokio::task::spawn_blocking(move || {
            (0..5)
                .map(|n| {
                    thread::sleep(Duration::from_millis(100));
                    match openclaw_writer::update(&file, &openclaw_writer::key(50 + n)).unwrap() {
                        Outcome::Updated { waited, .. } => waited,
                        Outcome::TimedOut(took) => panic!("OpenClaw timed out after {took:?}"),
                    }
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        stop.store(true, Ordering::SeqCst);
        let mut made = 0;
        for writer in writers {
            made += writer.await.unwrap();
        }
        assert!(
            made > 10,
            "{tasks} tasks, {hold:?}: the crate kept writing ({made})"
        );
        for waited in waits {
            assert!(
                waited < Duration::from_millis(600),
                "{tasks} tasks, {hold:?}: OpenClaw waited {waited:?}"
            );
        }
    }
}
