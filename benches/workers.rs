//! Several worker processes of one bot over one PostgreSQL (and, with the `sqlite`
//! feature, over one SQLite file): turns per second with 1, 2,
//! 4 and 8 worker processes handling turns on distinct sessions; and the latency a
//! subscriber in another process sees from an append to its update, against a plain
//! `LISTEN`/`NOTIFY` round trip on the same server in the same run.
//!
//! `AGENT_SESSIONS_TEST_POSTGRES_URL=postgres://… cargo bench --bench workers --features postgres,sqlite`.
//! The workers are this binary, started again; a schema is created for the run and
//! dropped after.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::store::{PostgresOptions, PostgresStore};
use agent_sessions::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
use criterion::{BenchmarkId, Criterion, Throughput};
use tokio_postgres::{AsyncMessage, NoTls};

/// Set in a worker process: `<store url>|<worker number>`.
const WORKER: &str = "AGENT_SESSIONS_BENCH_WORKER";
/// The sessions each worker cycles through (its own: no two workers share one).
const SESSIONS_PER_WORKER: usize = 50;

fn server() -> String {
    std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL")
        .expect("AGENT_SESSIONS_TEST_POSTGRES_URL names the server to measure")
}

/// A worker: reads a count per line on stdin, handles that many turns on its own
/// sessions, and answers `done` — until stdin closes.
fn worker(spec: &str) {
    let (url, number) = spec.split_once('|').unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let manager = SessionManager::connect(url).await.unwrap().build().unwrap();
        let mut turn_number = 0usize;
        let stdin = std::io::stdin();
        let mut stdout = std::io::stdout();
        for line in stdin.lock().lines() {
            let count: usize = line.unwrap().trim().parse().unwrap();
            for _ in 0..count {
                let peer = format!("w{number}-{}", turn_number % SESSIONS_PER_WORKER);
                turn_number += 1;
                let message = InboundMessage::direct("bench", &peer, "When is my shift?");
                let turn = manager.turn(&message).await.unwrap();
                let messages = turn.messages().await.unwrap();
                assert!(!messages.is_empty());
                turn.complete("Thursday at 9.").await.unwrap();
            }
            writeln!(stdout, "done").unwrap();
            stdout.flush().unwrap();
        }
    });
}

/// A running worker process.
struct Worker {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Worker {
    fn start(url: &str, number: usize) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(WORKER, format!("{url}|{number}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Worker {
            child,
            input,
            output,
        }
    }

    fn order(&mut self, turns: u64) {
        writeln!(self.input, "{turns}").unwrap();
        self.input.flush().unwrap();
    }

    fn wait(&mut self) {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "done", "the worker failed");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scaling(c: &mut Criterion, name: &str, url: &str) {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for processes in [1usize, 2, 4, 8] {
        let mut workers: Vec<Worker> = (0..processes).map(|n| Worker::start(url, n)).collect();
        // Every session exists, every connection is open: the steady state.
        for worker in &mut workers {
            worker.order(SESSIONS_PER_WORKER as u64);
        }
        for worker in &mut workers {
            worker.wait();
        }
        // One iteration is one turn by every worker at once.
        group.throughput(Throughput::Elements(processes as u64));
        group.bench_function(BenchmarkId::new("processes", processes), |b| {
            b.iter_custom(|iterations| {
                let started = Instant::now();
                for worker in &mut workers {
                    worker.order(iterations);
                }
                for worker in &mut workers {
                    worker.wait();
                }
                started.elapsed()
            })
        });
    }
    group.finish();
}

fn notification_latency(c: &mut Criterion, runtime: &tokio::runtime::Runtime, url: &str) {
    let mut group = c.benchmark_group("workers/notify");
    group.sample_size(50);

    // The baseline: a plain NOTIFY on one connection heard by LISTEN on another.
    let (listening, mut notifications) = runtime.block_on(async {
        let (client, mut connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let AsyncMessage::Notification(n) = message {
                    let _ = sender.send(n.payload().to_owned());
                }
            }
        });
        client.batch_execute("LISTEN bench_baseline").await.unwrap();
        (client, receiver)
    });
    let notifier = runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
        tokio::spawn(connection);
        client
    });
    group.bench_function("listen_notify_round_trip", |b| {
        b.iter(|| {
            runtime.block_on(async {
                notifier
                    .batch_execute("NOTIFY bench_baseline, 'x'")
                    .await
                    .unwrap();
                notifications.recv().await.unwrap();
            })
        })
    });
    drop(listening);

    // The crate: an append through one store value (another process, as far as the
    // subscriber can tell) heard by a subscriber of another.
    let (writer, reader) = runtime.block_on(async {
        (
            PostgresStore::connect(url).await.unwrap(),
            PostgresStore::connect(url).await.unwrap(),
        )
    });
    let mut feed = runtime.block_on(async {
        let feed = reader.subscribe();
        // The listener connects in the background.
        tokio::time::sleep(Duration::from_millis(500)).await;
        feed
    });
    let transcript = TranscriptRef::new(AgentId::main(), "latency");
    group.bench_function("append_to_subscriber", |b| {
        b.iter(|| {
            runtime.block_on(async {
                writer
                    .append(
                        &transcript,
                        vec![TranscriptEntry::user_text("ping", chrono::Utc::now())],
                    )
                    .await
                    .unwrap();
                feed.recv().await.unwrap();
            })
        })
    });
    // The append alone, for the part of the latency that is the append's own.
    group.bench_function("append_alone", |b| {
        b.iter(|| {
            runtime.block_on(async {
                writer
                    .append(
                        &transcript,
                        vec![TranscriptEntry::user_text("ping", chrono::Utc::now())],
                    )
                    .await
                    .unwrap();
            })
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let schema = format!("bench_workers_{}", uuid::Uuid::new_v4().simple());
    let separator = if server().contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}schema={schema}", server());
    let store = runtime.block_on(PostgresStore::connect_with(
        &server(),
        PostgresOptions::in_schema(&schema),
    ));
    let store = store.unwrap();
    scaling(c, "workers/turns", &url);
    notification_latency(c, &runtime, &url);
    runtime.block_on(store.drop_schema()).unwrap();
    // The same workers on one SQLite file (with the `sqlite` feature).
    if cfg!(feature = "sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("sessions.db").display());
        scaling(c, "workers/turns/sqlite", &url);
    }
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER) {
        worker(&spec);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    benches(&mut criterion);
    criterion.final_summary();
}
