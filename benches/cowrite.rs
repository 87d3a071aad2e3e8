//! Co-writing with OpenClaw: two processes following OpenClaw's store protocol and two
//! processes of this crate update one `sessions.json` of 1,000 sessions side by side.
//!
//! For each side it reports the lock timeouts and the update latency (lock wait
//! included), and it checks the store afterwards: every counter must equal the updates
//! that succeeded (no lost update) and every entry must keep its unknown field.
//!
//! `cargo bench --bench cowrite` (three runs, about a minute; prints a table). Each
//! child is this binary; the OpenClaw-protocol writer is `tests/common/openclaw_writer.rs`.

#[path = "../tests/common/openclaw_writer.rs"]
mod openclaw_writer;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonFileOptions};

use openclaw_writer::{percentile, session_of, Outcome};

const RUNS: usize = 3;
const SESSIONS: usize = 1_000;
/// Processes of each kind.
const PROCESSES: usize = 2;
const UPDATES: usize = 300;
const CHILD: &str = "AGENT_SESSIONS_COWRITE_CHILD";

/// A crate child: `UPDATES` updates with the default lock options, one at a time.
fn crate_child(store: &Path, root: &Path, writer: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sessions = JsonFileStore::new_with(
        root,
        JsonFileOptions {
            // OpenClaw does not fsync either.
            durability: Durability::Unsynced,
            ..JsonFileOptions::default()
        },
    );
    assert_eq!(sessions.store_path(&AgentId::main()), store);
    runtime.block_on(async {
        for n in 0..UPDATES {
            let key =
                SessionKey::parse(&openclaw_writer::key(session_of(writer, n, SESSIONS))).unwrap();
            let started = Instant::now();
            let result = sessions
                .with_session(&key, |entry| {
                    entry.compaction_count = Some(entry.compaction_count.unwrap_or(0) + 1);
                })
                .await;
            let us = started.elapsed().as_micros();
            match result {
                Ok(()) => println!("ok {us}"),
                Err(agent_sessions::Error::LockTimeout { .. }) => println!("timeout {us}"),
                Err(error) => panic!("{error}"),
            }
        }
    });
}

/// An OpenClaw-protocol child: `UPDATES` updates, each re-taking the lock at once.
fn openclaw_child(store: &Path, writer: usize) {
    for n in 0..UPDATES {
        let key = openclaw_writer::key(session_of(writer, n, SESSIONS));
        match openclaw_writer::update(store, &key).unwrap() {
            Outcome::Updated { took, .. } => println!("ok {}", took.as_micros()),
            Outcome::TimedOut(took) => println!("timeout {}", took.as_micros()),
        }
    }
}

/// What one side saw in one run.
#[derive(Default)]
struct Side {
    latencies: Vec<u64>,
    timeouts: usize,
}

impl Side {
    fn collect(&mut self, child: Child) {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "a child failed");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            match line.split_once(' ') {
                Some(("ok", us)) => self.latencies.push(us.parse().unwrap()),
                Some(("timeout", _)) => self.timeouts += 1,
                _ => {}
            }
        }
    }

    fn row(&mut self, run: usize, name: &str, counted: u64, kept: bool) -> String {
        self.latencies.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        let ok = self.latencies.len();
        format!(
            "| {run} | {name} | {ok} | {} | {:.1} ms | {:.0} ms | {:.0} ms | {} | {} |",
            self.timeouts,
            ms(percentile(&self.latencies, 0.50)),
            ms(percentile(&self.latencies, 0.99)),
            ms(self.latencies.last().copied().unwrap_or(0)),
            ok as i64 - counted as i64,
            if kept { "yes" } else { "NO" },
        )
    }
}

fn spawn(exe: &Path, spec: String) -> Child {
    Command::new(exe)
        .env(CHILD, spec)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        let mut parts = spec.split('|');
        let (role, root, writer) = (
            parts.next().unwrap(),
            Path::new(parts.next().unwrap()),
            parts.next().unwrap().parse().unwrap(),
        );
        let store = agent_sessions::store::store_path(root, &AgentId::main());
        match role {
            "crate" => crate_child(&store, root, writer),
            _ => openclaw_child(&store, writer),
        }
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    println!(
        "co-writing: {PROCESSES} OpenClaw-protocol + {PROCESSES} agent-sessions processes x \
         {UPDATES} updates, {SESSIONS} sessions (unsynced), lock timeout 10 s"
    );
    println!(
        "| run | writer | updates | timeouts | p50 | p99 | max | lost | unknown fields kept |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for run in 1..=RUNS {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let store = agent_sessions::store::store_path(&root, &AgentId::main());
        openclaw_writer::seed(&store, SESSIONS);
        let started = Instant::now();
        // Interleaved, so neither kind starts first.
        let children: Vec<(bool, Child)> = (0..PROCESSES)
            .flat_map(|writer| {
                let root = root.display();
                [
                    (true, spawn(&exe, format!("openclaw|{root}|{writer}"))),
                    (
                        false,
                        spawn(&exe, format!("crate|{root}|{}", writer + PROCESSES)),
                    ),
                ]
            })
            .collect();
        let (mut openclaw, mut ours) = (Side::default(), Side::default());
        for (is_openclaw, child) in children {
            if is_openclaw {
                openclaw.collect(child);
            } else {
                ours.collect(child);
            }
        }
        let elapsed = started.elapsed();
        let tally = openclaw_writer::tally(&store, SESSIONS);
        let kept = tally.damaged.is_empty() && tally.entries == SESSIONS;
        println!(
            "{}",
            openclaw.row(run, "OpenClaw protocol", tally.openclaw_writes, kept)
        );
        println!(
            "{}",
            ours.row(run, "agent-sessions", tally.crate_writes, kept)
        );
        eprintln!("run {run}: {:.1} s", elapsed.as_secs_f64());
    }
    println!("(lost: successful updates minus what the counters in the file add up to)");
}
