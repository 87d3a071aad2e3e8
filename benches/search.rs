//! Search latency over 100,000 logged messages on each index — the in-crate
//! `InMemoryIndex` (memory and JSON stores), SQLite's and PostgreSQL's packed postings —
//! against a naive scan of the same messages (lower-case every text, count the query's
//! words, sort) measured in the same run. Also hybrid search with 64-dimension vectors,
//! and each index's recall@10 of the nearest vectors against an exact scan (printed).
//!
//! `cargo bench --bench search --features sqlite,postgres` (PostgreSQL only when
//! `AGENT_SESSIONS_TEST_POSTGRES_URL` is set; the run's schema is dropped after).

use std::sync::Arc;
use std::time::Duration;

mod common;

use agent_sessions::transcript::search::{
    InMemoryIndex, Search, SearchFilter, SearchIndex, SearchQuery,
};
use common::search::{corpus, fill, naive, recall_at_10, Hashed, MESSAGES, QUERY};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn search(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let messages = corpus();
    let mut group = c.benchmark_group(format!("search/{MESSAGES}"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("naive_scan", |b| b.iter(|| naive(&messages, QUERY, 10)));

    let dir = tempfile::tempdir().unwrap();
    let mut indexes: Vec<(&str, Arc<dyn SearchIndex>)> =
        vec![("memory", Arc::new(InMemoryIndex::new()))];
    #[cfg(feature = "sqlite")]
    indexes.push((
        "sqlite",
        Arc::new(agent_sessions::store::SqliteStore::open(dir.path().join("search.db")).unwrap()),
    ));
    #[cfg(feature = "postgres")]
    let postgres = std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL")
        .ok()
        .map(|url| {
            let options = agent_sessions::store::PostgresOptions::in_schema(format!(
                "bench_{}",
                uuid::Uuid::new_v4().simple()
            ));
            runtime
                .block_on(agent_sessions::store::PostgresStore::connect_with(
                    &url, options,
                ))
                .unwrap()
        });
    #[cfg(feature = "postgres")]
    if let Some(store) = &postgres {
        indexes.push(("postgres", Arc::new(store.clone())));
    }

    for (name, index) in indexes {
        runtime.block_on(fill(&*index, &messages));
        let text_only = Search::shared(index.clone());
        let hybrid = Search::shared(index.clone()).embedder(Hashed);
        let query = SearchQuery::text(QUERY);
        let hits = runtime.block_on(text_only.search(&query)).unwrap();
        assert_eq!(hits.len(), 10, "{name}");
        println!(
            "search/{MESSAGES}/nearest/{name}: recall@10 {:.3} against an exact scan (20 queries)",
            recall_at_10(&*index, &messages, &runtime)
        );
        group.bench_function(BenchmarkId::new("full_text", name), |b| {
            b.iter(|| runtime.block_on(text_only.search(&query)).unwrap())
        });
        let one_person = SearchQuery::text(QUERY).filter(SearchFilter::new().person("p7"));
        group.bench_function(BenchmarkId::new("full_text_one_person", name), |b| {
            b.iter(|| runtime.block_on(text_only.search(&one_person)).unwrap())
        });
        group.bench_function(BenchmarkId::new("hybrid", name), |b| {
            b.iter(|| runtime.block_on(hybrid.search(&query)).unwrap())
        });
    }
    group.finish();
    #[cfg(feature = "postgres")]
    if let Some(store) = postgres {
        runtime.block_on(store.drop_schema()).unwrap();
    }
}

criterion_group!(benches, search);
criterion_main!(benches);
