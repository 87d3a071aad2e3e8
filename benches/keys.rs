//! Building and parsing session keys.

use std::hint::black_box;

use agent_sessions::identity::{
    Conversation, DefaultKeyBuilder, DmScope, IdentityLinks, KeyBuilder,
};
use agent_sessions::SessionKey;
use criterion::{criterion_group, criterion_main, Criterion};

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("key_build");
    let plain = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
    let linked = DefaultKeyBuilder::new()
        .dm_scope(DmScope::PerAccountChannelPeer)
        .identity_links((0..50).fold(IdentityLinks::new(), |links, i| {
            links.link(
                format!("person{i}"),
                [format!("telegram:{i}"), format!("+1555{i:04}")],
            )
        }));
    let dm = Conversation::direct("Telegram", "123456789");
    let thread = Conversation::channel("slack", "C0HELPDESK")
        .with_agent("support")
        .with_thread("1770350000.000100");
    let topic = Conversation::group("telegram", "-1001234567890").with_forum_topic(42);
    group.bench_function("dm_per_channel_peer", |b| {
        b.iter(|| plain.build(black_box(&dm)))
    });
    group.bench_function("slack_thread", |b| {
        b.iter(|| plain.build(black_box(&thread)))
    });
    group.bench_function("telegram_topic", |b| {
        b.iter(|| plain.build(black_box(&topic)))
    });
    group.bench_function("dm_with_50_identity_links", |b| {
        b.iter(|| linked.build(black_box(&dm)))
    });
    group.finish();
}

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("key_parse");
    for (name, key) in [
        ("main", "agent:main:main"),
        ("group", "agent:main:whatsapp:group:120363406150318674@g.us"),
        (
            "thread_mixed_case",
            "AGENT:Support:Slack:Channel:C0HELPDESK:thread:1770350000.000100",
        ),
    ] {
        group.bench_function(name, |b| b.iter(|| SessionKey::parse(black_box(key))));
    }
    let parsed = SessionKey::parse("agent:main:slack:channel:c1:thread:t1").unwrap();
    group.bench_function("classify_thread_parent", |b| {
        b.iter(|| black_box(&parsed).thread_parent())
    });
    group.finish();
}

criterion_group!(benches, build, parse);
criterion_main!(benches);
