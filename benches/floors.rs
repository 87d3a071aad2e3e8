//! The performance floors in a few minutes: each headline row of `docs/performance.md`
//! measured against its baseline in the same run, with shorter measurements than the
//! full benchmarks, and a table of the same-run ratios against their goals at the end.
//! Run it before and after a change that might cost speed.
//!
//! `cargo bench --bench floors --features sqlite,http` (PostgreSQL rows too with
//! `--features sqlite,http,postgres` and `AGENT_SESSIONS_TEST_POSTGRES_URL` set; they
//! need `pgbench`).
//!
//! The table reads criterion's median estimates from its output directory
//! (`CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else `target/criterion`).
//! A criterion filter runs only the matching rows; the others print as not measured.

mod common;

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;
use agent_sessions::store::{SqliteOptions, SqliteStore};
use agent_sessions::transcript::search::{InMemoryIndex, Search, SearchIndex, SearchQuery};
use agent_sessions::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
use agent_sessions::{Durability, JsonFileOptions};
use chrono::Utc;
use common::contention::{contend, Contention};
use common::search::{corpus, fill, naive, recall_at_10, Hashed, QUERY};
use common::turn_age::Aged;
use common::{entry, key, raw_sqlite_update, write_and_rename, write_store, RawChange};
use criterion::Criterion;

const GROUP: &str = "floors";

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// One update of one entry in a JSON store of 100 sessions, unsynced, against the
/// disk work of one store write (write a file of the same size, rename it).
fn json_update(c: &mut Criterion) {
    let runtime = runtime(1);
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_store(dir.path(), 100);
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("json_update_100/disk_work", |b| {
        b.iter(|| write_and_rename(dir.path(), black_box(&bytes), false))
    });
    let store = JsonFileStore::new_with(
        dir.path(),
        JsonFileOptions {
            durability: Durability::Unsynced,
            ..JsonFileOptions::default()
        },
    );
    let target = key(50);
    let mut counter = 0u64;
    group.bench_function("json_update_100/store", |b| {
        b.iter(|| {
            counter += 1;
            runtime
                .block_on(store.with_session(&target, |e| e.updated_at = counter))
                .unwrap()
        })
    });
    group.finish();
}

/// What a process that did not write the store last pays before its update: reading
/// and indexing the file another process wrote (`get_uncached`), against the disk work
/// of one write of that file — at 1,000 and 10,000 sessions. It bounds what several
/// processes sharing one file can reach against one process alone.
fn json_reread(c: &mut Criterion) {
    let runtime = runtime(1);
    let mut group = c.benchmark_group(GROUP);
    for sessions in [1_000, 10_000] {
        let dir = tempfile::tempdir().unwrap();
        let bytes = write_store(dir.path(), sessions);
        group.bench_function(format!("json_{sessions}/disk_work"), |b| {
            b.iter(|| write_and_rename(dir.path(), black_box(&bytes), false))
        });
        let store = JsonFileStore::new(dir.path());
        let target = key(sessions / 2);
        group.bench_function(format!("json_{sessions}/reread"), |b| {
            b.iter(|| runtime.block_on(store.get_uncached(&target)).unwrap())
        });
    }
    group.finish();
}

/// One read-modify-write in SQLite (WAL, `synchronous = NORMAL`), 10,000 sessions,
/// against rusqlite doing the same transaction directly.
fn sqlite(c: &mut Criterion) {
    const SESSIONS: usize = 10_000;
    let runtime = runtime(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("floors.db");
    let mut options = SqliteOptions::default();
    options.durability = Durability::SyncFile;
    let store = SqliteStore::open_with(&file, options).unwrap();
    runtime.block_on(async {
        for i in 0..SESSIONS {
            store.put(&key(i), entry(i)).await.unwrap();
        }
    });
    let target = key(SESSIONS / 2);
    let raw = rusqlite::Connection::open(&file).unwrap();
    raw.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
        .unwrap();
    let mut group = c.benchmark_group(GROUP);
    let mut counter = 0i64;
    group.bench_function("sqlite_update/rusqlite", |b| {
        b.iter(|| {
            counter += 1;
            raw_sqlite_update(&raw, target.as_str(), counter, RawChange::ParseAndChange)
        })
    });
    let mut count = 0u64;
    group.bench_function("sqlite_update/store", |b| {
        b.iter(|| {
            count += 1;
            runtime
                .block_on(store.with_session(&target, |e| {
                    e.message_count = Some(count);
                    e.updated_at = count;
                }))
                .unwrap()
        })
    });
    group.finish();
}

/// One transcript append, unsynced, against one `write` of the same line to a file
/// opened `O_APPEND`.
fn transcript_append(c: &mut Criterion) {
    const TEXT: &str = "Can you move my Thursday shift to Friday afternoon? I have a dentist appointment at 2pm and won't make it back in time.";
    let runtime = runtime(1);
    let dir = tempfile::tempdir().unwrap();
    let mut line = serde_json::to_vec(&TranscriptEntry::user_text(TEXT, Utc::now())).unwrap();
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("baseline.jsonl"))
        .unwrap();
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("transcript_append/o_append_write", |b| {
        b.iter(|| file.write_all(black_box(&line)).unwrap())
    });
    let store = FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let transcript = TranscriptRef::new(AgentId::main(), "floors");
    group.bench_function("transcript_append/store", |b| {
        b.iter(|| {
            runtime
                .block_on(store.append(
                    &transcript,
                    vec![TranscriptEntry::user_text(TEXT, Utc::now())],
                ))
                .unwrap()
        })
    });
    group.finish();
}

/// Whole turns after 10 and after 10,000 earlier turns, the model's window at 8,000
/// tokens, on each persistent backend.
fn turn_age(c: &mut Criterion) {
    let runtime = runtime(2);
    common::on_each_backend(&runtime, 0, |name, store, transcripts| {
        if name == "memory" {
            return;
        }
        let manager = SessionManager::builder(store)
            .transcripts(transcripts)
            .context_window(8_000)
            .build()
            .unwrap();
        // Both sessions made before either is measured: the writing of the old one
        // (and the work it leaves the disk and the server) does not fall on one alone.
        let mut sessions: Vec<(usize, Aged)> = [(10, 1_000_000), (10_000, 2_000_000)]
            .into_iter()
            .map(|(age, peer)| (age, Aged::new(&runtime, &manager, peer, age)))
            .collect();
        let mut group = c.benchmark_group(GROUP);
        for (age, aged) in &mut sessions {
            group.bench_function(format!("turn_age/{name}/{age}"), |b| {
                b.iter_custom(|turns| aged.measure(&runtime, &manager, turns))
            });
        }
        group.finish();
    });
}

/// Full-text and hybrid search over 100,000 messages on each index, against a naive
/// scan of the same messages.
fn search(c: &mut Criterion) -> Vec<(&'static str, f32)> {
    let runtime = runtime(2);
    let messages = corpus();
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("search/naive_scan", |b| {
        b.iter(|| naive(&messages, QUERY, 10))
    });
    let dir = tempfile::tempdir().unwrap();
    #[allow(unused_mut)] // PostgreSQL's index joins with its feature
    let mut indexes: Vec<(&str, Arc<dyn SearchIndex>)> = vec![
        ("memory", Arc::new(InMemoryIndex::new())),
        (
            "sqlite",
            Arc::new(SqliteStore::open(dir.path().join("search.db")).unwrap()),
        ),
    ];
    #[cfg(feature = "postgres")]
    let postgres = postgres_store(&runtime);
    #[cfg(feature = "postgres")]
    if let Some(store) = &postgres {
        indexes.push(("postgres", store.clone() as Arc<dyn SearchIndex>));
    }
    let mut recalls = Vec::new();
    for (name, index) in indexes {
        runtime.block_on(fill(&*index, &messages));
        recalls.push((name, recall_at_10(&*index, &messages, &runtime)));
        let text_only = Search::shared(index.clone());
        let hybrid = Search::shared(index.clone()).embedder(Hashed);
        let query = SearchQuery::text(QUERY);
        group.bench_function(format!("search/{name}"), |b| {
            b.iter(|| runtime.block_on(text_only.search(&query)).unwrap())
        });
        group.bench_function(format!("search_hybrid/{name}"), |b| {
            b.iter(|| runtime.block_on(hybrid.search(&query)).unwrap())
        });
    }
    group.finish();
    #[cfg(feature = "postgres")]
    if let Some(store) = postgres {
        runtime.block_on(store.drop_schema()).unwrap();
    }
    recalls
}

/// Resolve + record a turn over HTTP on the memory store, against a bare axum server
/// with the same routes, request bodies and response bodies.
fn http(c: &mut Criterion) {
    use agent_sessions::http::{router, ServiceOptions};
    use common::http::{bare_router, captured_replies, http_round, manager, spawn_server};
    let runtime = runtime(2);
    let client = reqwest::Client::new();
    let service = spawn_server(&runtime, router(manager(None), ServiceOptions::default()));
    let replies = runtime.block_on(captured_replies(&service, &client));
    let bare = spawn_server(&runtime, bare_router(Arc::new(replies)));
    let mut group = c.benchmark_group(GROUP);
    for (name, base) in [("bare_axum", &bare), ("service", &service)] {
        group.bench_function(format!("http/{name}"), |b| {
            b.iter(|| runtime.block_on(http_round(base, &client)))
        });
    }
    group.finish();
}

/// Opening a JSON store of 100,000 sessions cold and reading one session; the peak
/// memory of a fresh process doing that is measured separately.
fn cold_open(c: &mut Criterion, store: &Path) {
    let runtime = runtime(2);
    let target = key(COLD_SESSIONS / 2);
    let mut group = c.benchmark_group(GROUP);
    group.bench_function("cold_open_100000/json", |b| {
        b.iter(|| {
            runtime
                .block_on(JsonFileStore::new(store).get(&target))
                .unwrap()
                .unwrap()
        })
    });
    group.finish();
}

const COLD_SESSIONS: usize = 100_000;

#[cfg(feature = "postgres")]
fn postgres_store(
    runtime: &tokio::runtime::Runtime,
) -> Option<Arc<agent_sessions::store::PostgresStore>> {
    let url = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").ok()?;
    let options = agent_sessions::store::PostgresOptions::in_schema(format!(
        "floors_{}",
        uuid::Uuid::new_v4().simple()
    ));
    Some(Arc::new(
        runtime
            .block_on(agent_sessions::store::PostgresStore::connect_with(
                &url, options,
            ))
            .unwrap(),
    ))
}

/// PostgreSQL updates per second through the store and through pgbench, 3 s each, at
/// 1, 4 and 8 connections.
#[cfg(feature = "postgres")]
fn postgres() -> Vec<(usize, f64, f64)> {
    use common::postgres::{fill, pgbench, script, store_round};
    const SESSIONS: usize = 100_000;
    let runtime = runtime(2);
    let Some(store) = postgres_store(&runtime) else {
        return Vec::new();
    };
    let url = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").unwrap();
    runtime.block_on(fill(&store, SESSIONS));
    let schema = store.schema().to_owned();
    let script = script(&schema, SESSIONS);
    let mut rows = Vec::new();
    for clients in [1usize, 4, 8] {
        let baseline = pgbench(&url, &script, clients, 3);
        let started = std::time::Instant::now();
        let mut updates = 0;
        while started.elapsed() < Duration::from_secs(3) {
            runtime.block_on(store_round(&store, SESSIONS, clients, 50));
            updates += clients * 50;
        }
        rows.push((
            clients,
            baseline,
            updates as f64 / started.elapsed().as_secs_f64(),
        ));
    }
    runtime.block_on(store.drop_schema()).unwrap();
    rows
}

/// Four processes sharing one JSON store, against one process making as many updates
/// alone, at 1,000 and 10,000 sessions.
fn processes() -> Vec<(usize, Contention, Contention)> {
    [(1_000, 600), (10_000, 120)]
        .into_iter()
        .map(|(sessions, updates)| {
            let dir = tempfile::tempdir().unwrap();
            write_store(dir.path(), sessions);
            let one = contend(dir.path(), 1, updates);
            let four = contend(dir.path(), 4, updates / 4);
            (sessions, one, four)
        })
        .collect()
}

/// Criterion's median estimate for `id` in this run, in nanoseconds.
fn median_ns(output: &Path, id: &str) -> Option<f64> {
    // Criterion names a benchmark's directory after its id, `/` made `_`.
    let file = output
        .join(GROUP)
        .join(id.replace('/', "_"))
        .join("new/estimates.json");
    let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    estimates["median"]["point_estimate"].as_f64()
}

fn output_directory() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}

/// One line of the summary table.
struct Row {
    what: String,
    baseline: String,
    measured: String,
    ratio: String,
    goal: &'static str,
    met: Option<bool>,
}

impl Row {
    /// A row comparing rates (1 / median time): the store's rate as a share of the
    /// baseline's, against a goal of at least `floor`.
    fn rate(output: &Path, what: &str, baseline: &str, store: &str, floor: f64) -> Row {
        let goal = Box::leak(format!("≥ {:.0} %", floor * 100.0).into_boxed_str());
        match (median_ns(output, baseline), median_ns(output, store)) {
            (Some(b), Some(s)) => Row {
                what: what.into(),
                baseline: duration(b),
                measured: duration(s),
                ratio: format!("{:.0} %", b / s * 100.0),
                goal,
                met: Some(b / s >= floor),
            },
            _ => Row::not_measured(what, goal),
        }
    }

    fn not_measured(what: &str, goal: &'static str) -> Row {
        Row {
            what: what.into(),
            baseline: "—".into(),
            measured: "not measured".into(),
            ratio: "—".into(),
            goal,
            met: None,
        }
    }
}

fn duration(ns: f64) -> String {
    match ns {
        ns if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        ns if ns >= 1e3 => format!("{:.1} µs", ns / 1e3),
        ns => format!("{ns:.0} ns"),
    }
}

fn main() {
    if common::contention::run_child() || common::cold_open::run_child() {
        return;
    }
    let output = output_directory();
    let mut criterion = Criterion::default()
        .output_directory(&output)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let listing = std::env::args().any(|a| a == "--list");
    let cold = tempfile::tempdir().unwrap();
    let file_bytes = write_store(cold.path(), COLD_SESSIONS).len();

    json_update(&mut criterion);
    json_reread(&mut criterion);
    sqlite(&mut criterion);
    transcript_append(&mut criterion);
    let recalls = search(&mut criterion);
    http(&mut criterion);
    cold_open(&mut criterion, cold.path());
    turn_age(&mut criterion);
    criterion.final_summary();
    if listing {
        return;
    }
    let peak = common::cold_open::peak_memory("json", cold.path(), COLD_SESSIONS);
    let processes = processes();
    #[cfg(feature = "postgres")]
    let postgres = postgres();

    let mut rows = vec![Row::rate(
        &output,
        "JSON, one update, 100 sessions, unsynced",
        "json_update_100/disk_work",
        "json_update_100/store",
        0.8,
    )];
    for (sessions, one, four) in &processes {
        if let (Some(write), Some(read)) = (
            median_ns(&output, &format!("json_{sessions}/disk_work")),
            median_ns(&output, &format!("json_{sessions}/reread")),
        ) {
            rows.push(Row {
                what: format!(
                    "JSON, re-reading a store another process wrote, {sessions} sessions"
                ),
                baseline: format!("disk work {}", duration(write)),
                measured: duration(read),
                ratio: format!("{:.0} % of the disk work", read / write * 100.0),
                goal: "(bounds the row below)",
                met: None,
            });
        }
        let ratio = four.rate() / one.rate();
        let spread = four.max_us() as f64 / four.percentile_us(0.5) as f64;
        rows.push(Row {
            what: format!("JSON, 4 processes, {sessions} sessions"),
            baseline: format!("1 process {:.0}/s", one.rate()),
            measured: format!(
                "{:.0}/s, max wait {:.1}× median, {} timeouts",
                four.rate(),
                spread,
                four.timeouts
            ),
            ratio: format!("{:.0} %", ratio * 100.0),
            goal: "≥ 80 %, max ≤ 5× median",
            met: Some(ratio >= 0.8 && spread <= 5.0 && four.timeouts == 0),
        });
    }
    rows.push(Row::rate(
        &output,
        "SQLite, one update, 10,000 sessions, NORMAL",
        "sqlite_update/rusqlite",
        "sqlite_update/store",
        0.8,
    ));
    #[cfg(feature = "postgres")]
    for (clients, pgbench, store) in &postgres {
        rows.push(Row {
            what: format!("PostgreSQL, {clients} connection(s)"),
            baseline: format!("pgbench {pgbench:.0}/s"),
            measured: format!("{store:.0}/s"),
            ratio: format!("{:.0} %", store / pgbench * 100.0),
            goal: "≥ 100 %",
            met: Some(store >= pgbench),
        });
    }
    rows.push(Row::rate(
        &output,
        "transcript append, unsynced",
        "transcript_append/o_append_write",
        "transcript_append/store",
        0.3,
    ));
    let naive = median_ns(&output, "search/naive_scan");
    for index in ["memory", "sqlite", "postgres"] {
        let what = format!("full-text search, {index}");
        rows.push(
            match (naive, median_ns(&output, &format!("search/{index}"))) {
                (Some(naive), Some(index)) => Row {
                    what,
                    baseline: format!("naive scan {}", duration(naive)),
                    measured: duration(index),
                    ratio: format!("{:.1}×", naive / index),
                    goal: "≥ 10×",
                    met: Some(naive / index >= 10.0),
                },
                _ => Row::not_measured(&what, "≥ 10×"),
            },
        );
        if let Some((_, recall)) = recalls.iter().find(|(name, _)| *name == index) {
            rows.push(Row {
                what: format!("nearest vectors, {index}"),
                baseline: "exact scan".into(),
                measured: format!("recall@10 {recall:.3}"),
                ratio: "—".into(),
                goal: "(hybrid's accuracy)",
                met: None,
            });
        }
        let what = format!("hybrid search, {index}");
        rows.push(
            match median_ns(&output, &format!("search_hybrid/{index}")) {
                Some(ns) => Row {
                    what,
                    baseline: "—".into(),
                    measured: duration(ns),
                    ratio: "—".into(),
                    goal: "≤ 50 ms",
                    met: Some(ns <= 50e6),
                },
                None => Row::not_measured(&what, "≤ 50 ms"),
            },
        );
    }
    rows.push(Row::rate(
        &output,
        "HTTP, memory store",
        "http/bare_axum",
        "http/service",
        0.7,
    ));
    let mib = file_bytes as f64 / (1024.0 * 1024.0);
    rows.push(match median_ns(&output, "cold_open_100000/json") {
        Some(ns) => Row {
            what: format!("cold open, 100,000 sessions, JSON ({mib:.0} MiB)"),
            baseline: format!("file {mib:.0} MiB"),
            measured: format!("{}, peak {:.0} MiB", duration(ns), peak.1),
            ratio: format!("peak {:.2}× the file", peak.1 / mib),
            goal: "≤ 200 ms, peak ≤ 1.3×",
            met: Some(ns <= 200e6 && peak.1 / mib <= 1.3),
        },
        None => Row::not_measured("cold open, 100,000 sessions, JSON", "≤ 200 ms, peak ≤ 1.3×"),
    });

    for backend in ["json", "sqlite", "postgres"] {
        let what = format!("a turn after 10,000 turns, 8,000-token window, {backend}");
        let (young, old) = (
            median_ns(&output, &format!("turn_age/{backend}/10")),
            median_ns(&output, &format!("turn_age/{backend}/10000")),
        );
        rows.push(match (young, old) {
            (Some(young), Some(old)) => Row {
                what,
                baseline: format!("after 10 turns {}", duration(young)),
                measured: duration(old),
                ratio: format!("{:.2}×", old / young),
                goal: "≤ 1.3×",
                met: Some(old / young <= 1.3),
            },
            _ => Row::not_measured(&what, "≤ 1.3×"),
        });
    }

    println!("\n| row | baseline | measured | ratio | goal | met |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for row in rows {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "—",
        };
        println!(
            "| {} | {} | {} | {} | {} | {met} |",
            row.what, row.baseline, row.measured, row.ratio, row.goal
        );
    }
}
