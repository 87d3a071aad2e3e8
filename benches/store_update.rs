//! One-entry update in a JSON store of 100, 1,000 and 10,000 sessions, against the
//! cost of the disk work alone (writing and renaming a file of the same size), measured
//! in the same run; and in the memory store.
//!
//! `cargo bench --bench store_update`

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use agent_sessions::entry::{ChatType, DeliveryContext, SessionOrigin};
use agent_sessions::prelude::*;
use agent_sessions::{Durability, JsonStoreOptions};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use indexmap::IndexMap;

/// A realistic entry of about 1.46 KB, the size OpenClaw's users report.
fn entry(i: usize) -> SessionEntry {
    let mut entry = SessionEntry::new(
        format!("{:08x}-034e-47d9-ac97-d383e6c022b8", i),
        1_770_350_000_000 + i as u64,
    );
    entry.system_sent = Some(true);
    entry.aborted_last_run = Some(false);
    entry.chat_type = Some(ChatType::Direct);
    entry.channel = Some("telegram".into());
    entry.origin = Some(SessionOrigin {
        label: Some(format!("User {i}")),
        provider: Some("telegram".into()),
        surface: Some("telegram".into()),
        chat_type: Some(ChatType::Direct),
        from: Some(format!("telegram:{}", 100_000_000 + i)),
        to: Some(format!("telegram:{}", 100_000_000 + i)),
        account_id: Some("default".into()),
        ..SessionOrigin::default()
    });
    entry.delivery_context = Some(DeliveryContext {
        channel: Some("telegram".into()),
        to: Some(format!("telegram:{}", 100_000_000 + i)),
        account_id: Some("default".into()),
        ..DeliveryContext::default()
    });
    entry.last_channel = Some("telegram".into());
    entry.last_to = Some(format!("telegram:{}", 100_000_000 + i));
    entry.last_account_id = Some("default".into());
    entry.session_file = Some(format!(
        "/home/u/.openclaw/agents/main/sessions/{:08x}-034e-47d9-ac97-d383e6c022b8.jsonl",
        i
    ));
    entry.compaction_count = Some(2);
    entry.input_tokens = Some(1200);
    entry.output_tokens = Some(340);
    entry.total_tokens = Some(15_320);
    entry.context_tokens = Some(200_000);
    entry.model_provider = Some("anthropic".into());
    entry.model = Some("claude-opus-4-6".into());
    entry.thinking_level = Some("low".into());
    entry.system_prompt_report = Some(serde_json::json!({
        "source": "run",
        "generatedAt": 1_770_350_000_000u64,
        "systemPrompt": { "chars": 18_234, "projectContextChars": 4_120, "nonProjectContextChars": 14_114 },
        "injectedWorkspaceFiles": [
            { "name": "AGENTS.md", "path": "/home/u/work/AGENTS.md", "rawChars": 2_311, "injectedChars": 2_311 }
        ]
    }));
    entry
}

fn key(i: usize) -> SessionKey {
    SessionKey::parse(&format!("agent:main:telegram:dm:{}", 100_000_000 + i)).unwrap()
}

/// Writes a store of `sessions` entries the way OpenClaw does (JSON.stringify, 2 spaces).
fn write_store(root: &Path, sessions: usize) -> Vec<u8> {
    let store: IndexMap<String, SessionEntry> = (0..sessions)
        .map(|i| (key(i).to_string(), entry(i)))
        .collect();
    let bytes = serde_json::to_vec_pretty(&store).unwrap();
    let file = agent_sessions::paths::store_path(root, &AgentId::main());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    bytes
}

/// The disk work of one store write and nothing else: write a file of the same size,
/// optionally fsync it, rename it over the target, optionally fsync the directory.
fn write_and_rename(dir: &Path, bytes: &[u8], sync: bool) {
    let temp = dir.join("baseline.tmp");
    let mut file = std::fs::File::create(&temp).unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    if sync {
        file.sync_all().unwrap();
    }
    drop(file);
    std::fs::rename(&temp, dir.join("baseline.json")).unwrap();
    if sync {
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
    }
}

fn json_update(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    for sessions in [100, 1_000, 10_000] {
        let mut group = c.benchmark_group(format!("json_update/{sessions}"));
        if sessions >= 10_000 {
            group
                .sample_size(10)
                .measurement_time(Duration::from_secs(20));
        } else if sessions >= 1_000 {
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(10));
        }
        for (label, durability) in [
            ("unsynced", Durability::Unsynced),
            ("fsync", Durability::SyncFileAndDir),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let bytes = write_store(dir.path(), sessions);
            eprintln!(
                "json_update/{sessions}: file {} bytes, {} bytes per entry",
                bytes.len(),
                bytes.len() / sessions
            );
            let sync = durability != Durability::Unsynced;
            group.bench_function(BenchmarkId::new("baseline_write_rename", label), |b| {
                b.iter(|| write_and_rename(dir.path(), black_box(&bytes), sync))
            });
            let store = JsonFileStore::with_options(
                dir.path(),
                JsonStoreOptions {
                    durability,
                    ..JsonStoreOptions::default()
                },
            );
            let target = key(sessions / 2);
            let mut counter = 0u64;
            group.bench_function(BenchmarkId::new("json_store", label), |b| {
                b.iter(|| {
                    counter += 1;
                    runtime
                        .block_on(store.with_session(&target, |e| e.updated_at = counter))
                        .unwrap()
                })
            });
        }
        group.finish();
    }
}

fn memory_update(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::new();
    runtime.block_on(async {
        for i in 0..10_000 {
            store.put(&key(i), entry(i)).await.unwrap();
        }
    });
    let target = key(5_000);
    let mut counter = 0u64;
    c.bench_function("memory_update/10000", |b| {
        b.iter(|| {
            counter += 1;
            runtime
                .block_on(store.with_session(&target, |e| e.updated_at = counter))
                .unwrap()
        })
    });
}

criterion_group!(benches, json_update, memory_update);
criterion_main!(benches);
