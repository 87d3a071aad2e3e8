//! The template summarizer on a 200-turn conversation.
//!
//! `cargo bench --bench summary`

use std::hint::black_box;

use agent_sessions::memory::{template_summary, SummaryInput, SummaryTurn};
use criterion::{criterion_group, criterion_main, Criterion};

fn conversation(turns: usize) -> Vec<SummaryTurn> {
    (0..turns)
        .flat_map(|i| {
            [
                SummaryTurn::user(format!(
                    "Turn {i}: can you check the roster for Riverside House next week? Maria asked about report-{i}.pdf and https://intranet.example.com/roster/{i}."
                )),
                SummaryTurn::assistant(format!(
                    "Checked. We decided to move Maria to Thursday. I'll remind Tom tomorrow about shift {i}."
                )),
            ]
        })
        .collect()
}

fn summary(c: &mut Criterion) {
    let input = SummaryInput::new(conversation(200));
    let previous = template_summary(&SummaryInput::new(conversation(50)));
    let merging = SummaryInput::new(conversation(200)).merging(Some(previous));
    let mut group = c.benchmark_group("template_summarizer/200_turns");
    group.bench_function("fresh", |b| {
        b.iter(|| black_box(template_summary(black_box(&input))))
    });
    group.bench_function("merging_previous", |b| {
        b.iter(|| black_box(template_summary(black_box(&merging))))
    });
    group.finish();
}

criterion_group!(benches, summary);
criterion_main!(benches);
