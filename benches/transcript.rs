//! Transcript appends with and without fsync, against a bare `O_APPEND` write (and
//! fdatasync) of the same bytes (unsynced also to a transcript named by its
//! `sessionFile`, as `SessionManager` appends); and reading a 10,000-line transcript,
//! against reading the file and parsing each line as a `serde_json::Value` — all in the
//! same run.
//!
//! `cargo bench --bench transcript`

use std::fs::OpenOptions;
use std::hint::black_box;
use std::io::Write;

use agent_sessions::store::FileTranscriptStore;
use agent_sessions::transcript::{Offset, TranscriptEntry, TranscriptRef, TranscriptStore};
use agent_sessions::{AgentId, Durability};
use chrono::Utc;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const TEXT: &str = "Can you move my Thursday shift to Friday afternoon? I have a dentist appointment at 2pm and won't make it back in time.";

fn append(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("transcript_append");
    group.throughput(Throughput::Elements(1));
    for (label, durability) in [
        ("unsynced", Durability::Unsynced),
        ("fsync", Durability::SyncFile),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let sync = durability != Durability::Unsynced;
        let line = {
            let mut bytes =
                serde_json::to_vec(&TranscriptEntry::user_text(TEXT, Utc::now())).unwrap();
            bytes.push(b'\n');
            bytes
        };
        let baseline = dir.path().join("baseline.jsonl");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&baseline)
            .unwrap();
        group.bench_function(BenchmarkId::new("baseline_o_append_write", label), |b| {
            b.iter(|| {
                file.write_all(black_box(&line)).unwrap();
                if sync {
                    file.sync_data().unwrap();
                }
            })
        });
        let store = FileTranscriptStore::with_durability(dir.path(), durability);
        let transcript = TranscriptRef::new(AgentId::main(), "bench");
        group.bench_function(BenchmarkId::new("file_transcript_store", label), |b| {
            b.iter(|| {
                runtime
                    .block_on(store.append(
                        &transcript,
                        vec![TranscriptEntry::user_text(TEXT, Utc::now())],
                    ))
                    .unwrap()
            })
        });
        if !sync {
            // As `SessionManager` appends once a session's entry records its
            // `sessionFile`: the transcript named by its path.
            let named = TranscriptRef {
                session_file: Some(store.location(&transcript).unwrap()),
                ..TranscriptRef::new(AgentId::main(), "bench")
            };
            group.bench_function(
                BenchmarkId::new("file_transcript_store_session_file", label),
                |b| {
                    b.iter(|| {
                        runtime
                            .block_on(
                                store.append(
                                    &named,
                                    vec![TranscriptEntry::user_text(TEXT, Utc::now())],
                                ),
                            )
                            .unwrap()
                    })
                },
            );
        }
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    const LINES: usize = 10_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = FileTranscriptStore::with_durability(dir.path(), Durability::Unsynced);
    let transcript = TranscriptRef::new(AgentId::main(), "long");
    let now = Utc::now();
    runtime.block_on(async {
        for chunk in 0..LINES / 100 {
            let entries = (0..100)
                .map(|i| {
                    if (chunk * 100 + i) % 2 == 0 {
                        TranscriptEntry::user_text(TEXT, now)
                    } else {
                        TranscriptEntry::assistant_text(TEXT, "anthropic", "claude-opus-4-6", now)
                    }
                })
                .collect();
            store.append(&transcript, entries).await.unwrap();
        }
    });
    let path = store.path(&transcript).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!("transcript_read: {LINES} lines, {size} bytes");
    let mut group = c.benchmark_group(format!("transcript_read/{LINES}"));
    group.throughput(Throughput::Bytes(size));
    group.bench_function("baseline_read_and_parse_values", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&path).unwrap();
            let mut parsed = 0;
            for line in bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
                black_box(serde_json::from_slice::<serde_json::Value>(line).unwrap());
                parsed += 1;
            }
            assert_eq!(parsed, LINES + 1);
        })
    });
    group.bench_function("file_transcript_store", |b| {
        b.iter(|| {
            let read = runtime
                .block_on(store.read(&transcript, Offset::START))
                .unwrap();
            assert_eq!(read.events.len(), LINES);
        })
    });
    group.finish();
}

criterion_group!(benches, append, read);
criterion_main!(benches);
