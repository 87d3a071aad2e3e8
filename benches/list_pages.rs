//! A page of sessions as the store grows: the first page of 50 and a page deep in the
//! listing (after a cursor halfway down) from 1,000 and 100,000 sessions on every
//! backend — the page from 1,000 sessions is the baseline the page from 100,000 is
//! compared with. Then, on a JSON tree, opening the store read-only and listing a page
//! against opening it and reading one session (what listing may cost at most); what
//! `agent-sessions list` does (which also looks for entries it could not list); and
//! that on an OpenClaw tree of 1,000 sessions whose transcripts hold 112 MB (listing
//! reads no transcript).
//!
//! `cargo bench --bench list_pages --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` names a server; each run uses a schema of its own
//! and drops it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_sessions::prelude::*;
use agent_sessions::store::{Backend, OpenMode};
use agent_sessions::ListCursor;
use common::key;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::runtime::Runtime;

const SIZES: [usize; 2] = [1_000, 100_000];
const PAGE: usize = 50;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn pages(
    c: &mut Criterion,
    runtime: &Runtime,
    name: &str,
    sessions: usize,
    store: Arc<dyn SessionStore>,
) {
    let first = ListFilter::new().limit(PAGE);
    // Halfway down the listing (newest first): the session written halfway.
    let middle = runtime
        .block_on(store.get(&key(sessions / 2)))
        .unwrap()
        .expect("the fixture holds it");
    let deep = first.clone().after(ListCursor::after(&middle));
    let mut group = c.benchmark_group(format!("list_pages/{name}"));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(2));
    for (page, filter) in [("first", &first), ("deep", &deep)] {
        group.bench_with_input(BenchmarkId::new(page, sessions), filter, |b, filter| {
            b.iter(|| {
                let listed = runtime.block_on(store.list(filter)).unwrap();
                assert_eq!(listed.len(), PAGE);
            })
        });
    }
    group.finish();
}

/// Opens the store read-only and lists a page; with `check`, also looks for what it
/// could not list, as `agent-sessions list` does (which reads every entry whole).
async fn open_and_list(url: &str, check: bool) -> usize {
    let backend = Backend::open_with(url, OpenMode::ReadOnly).await.unwrap();
    let page = backend
        .sessions()
        .list(&ListFilter::new().limit(PAGE))
        .await
        .unwrap();
    if check {
        backend.sessions().unreadable().await.unwrap();
    }
    page.len()
}

/// Opening the store read-only and reading one session: what a listing may cost.
async fn cli_show(url: &str, key: &SessionKey) {
    let backend = Backend::open_with(url, OpenMode::ReadOnly).await.unwrap();
    backend.sessions().get(key).await.unwrap().unwrap();
}

/// An OpenClaw tree of `sessions` entries, each with a transcript of `transcript_bytes`.
fn openclaw_tree(root: &std::path::Path, sessions: usize, transcript_bytes: usize) {
    common::write_store(root, sessions);
    let dir = root.join("agents/main/sessions");
    let line = format!(
        "{{\"type\":\"message\",\"id\":\"0000abcd\",\"message\":{{\"role\":\"user\",\"content\":\"{}\"}}}}\n",
        "x".repeat(400)
    );
    let transcript = line.repeat(transcript_bytes / line.len());
    for i in 0..sessions {
        let id = common::entry(i).session_id;
        std::fs::write(dir.join(format!("{id}.jsonl")), &transcript).unwrap();
    }
}

fn cli(c: &mut Criterion, runtime: &Runtime) {
    let mut group = c.benchmark_group("list_pages/json_cli");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for sessions in SIZES {
        let dir = tempfile::tempdir().unwrap();
        common::write_store(dir.path(), sessions);
        let url = format!("json:{}", dir.path().display());
        let target = key(sessions / 2);
        group.bench_function(BenchmarkId::new("open_and_get", sessions), |b| {
            b.iter(|| runtime.block_on(cli_show(&url, &target)))
        });
        group.bench_function(BenchmarkId::new("open_and_list", sessions), |b| {
            b.iter(|| assert_eq!(runtime.block_on(open_and_list(&url, false)), PAGE))
        });
        group.bench_function(BenchmarkId::new("cli_list", sessions), |b| {
            b.iter(|| assert_eq!(runtime.block_on(open_and_list(&url, true)), PAGE))
        });
    }
    // 1,000 sessions, 112 MB of transcripts.
    let dir = tempfile::tempdir().unwrap();
    openclaw_tree(dir.path(), 1_000, 112 * 1024);
    let url = format!("json:{}", dir.path().display());
    group.bench_function("openclaw_tree_1000_sessions_112MB/cli_list", |b| {
        b.iter(|| assert_eq!(runtime.block_on(open_and_list(&url, true)), PAGE))
    });
    group.finish();
}

fn list_pages(c: &mut Criterion) {
    let runtime = runtime();
    for sessions in SIZES {
        common::on_each_backend(&runtime, sessions, |name, store, _| {
            pages(c, &runtime, name, sessions, store)
        });
    }
    cli(c, &runtime);
}

criterion_group!(benches, list_pages);
criterion_main!(benches);
