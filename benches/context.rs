//! Group chatter and the inbound pipeline.
//!
//! `cargo bench --bench context`

use std::hint::black_box;

use agent_sessions::inbound::{
    build_chatter_context, format_envelope, ChatterBuffer, ChatterEntry, InMemoryChatter,
};
use agent_sessions::inbound::{model_body, PipelineOptions};
use agent_sessions::{InboundMessage, Sender};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn chatter(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let buffer = InMemoryChatter::default();
    let key = "whatsapp:default:group:120363@g.us";
    let entry = |i: usize| ChatterEntry {
        sender: format!("Member {}", i % 7),
        body: format!("message number {i}: shall we meet at the usual place around seven?"),
        timestamp: Some(1_768_290_300_000 + i as u64 * 60_000),
        message_id: Some(format!("m-{i}")),
        sender_id: None,
    };
    runtime.block_on(async {
        for i in 0..50 {
            buffer.append(key, entry(i)).await.unwrap();
        }
    });
    let mut group = c.benchmark_group("history/50_entries");
    let mut i = 50;
    group.bench_function("append", |b| {
        b.iter(|| {
            i += 1;
            runtime.block_on(buffer.append(key, entry(i))).unwrap()
        })
    });
    group.bench_function("build_context", |b| {
        b.iter(|| {
            let entries = runtime.block_on(buffer.entries(key)).unwrap();
            let lines: Vec<String> = entries
                .iter()
                .map(|e| {
                    format_envelope(
                        "whatsapp",
                        "120363@g.us",
                        e.timestamp
                            .and_then(|t| chrono::DateTime::from_timestamp_millis(t as i64)),
                        &e.sender,
                        &e.body,
                    )
                })
                .collect();
            black_box(build_chatter_context(&lines, "current message", false))
        })
    });
    group.finish();
}

fn pipeline(c: &mut Criterion) {
    let paragraph =
        "Hi team, quick update on the rollout: the staging deploy went fine, but we saw \
                     elevated latency on the search endpoint after 14:00. @bot can you summarise \
                     the open incidents and tell me whether we should pause? [from: nobody] ";
    let body: String = paragraph.repeat(2048 / paragraph.len() + 1)[..2048].to_owned();
    let message = InboundMessage::group("slack", "C0OPS", "U042", body.clone())
        .with_sender(Sender {
            id: Some("U042".into()),
            name: Some("Carol".into()),
            ..Sender::default()
        })
        .with_untrusted_context("Link preview: Incident dashboard — 3 open incidents");
    let options = PipelineOptions::default().mention_names(["@bot"]);
    let mut group = c.benchmark_group("inbound_pipeline");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("model_body/2KB", |b| {
        b.iter(|| black_box(model_body(&message, black_box(&body), &options)))
    });
    group.finish();
}

criterion_group!(benches, chatter, pipeline);
criterion_main!(benches);
