//! A first tour of `agent-sessions`: messages from a Telegram DM, a WhatsApp group and a
//! Slack thread go through one `SessionManager`, which decides for each whether it
//! continues a session or starts a new one, and keeps the sessions in OpenClaw's files.
//!
//! ```text
//! cargo run --example quickstart            # a fresh temporary directory, kept
//! cargo run --example quickstart -- ./state # or a directory of your choice
//! ```
//!
//! Afterwards, look at the files it prints: they are exactly what OpenClaw would read.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_sessions::freshness::ResetTriggers;
use agent_sessions::freshness::{Clock, ManualClock, SystemClock};
use agent_sessions::freshness::{ResetConfig, ResetSpec};
use agent_sessions::prelude::*;
use agent_sessions::store::FileTranscriptStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = match std::env::args_os().nth(1) {
        Some(dir) => PathBuf::from(dir),
        None => tempfile::Builder::new()
            .prefix("agent-sessions-quickstart-")
            .tempdir()?
            .keep(),
    };
    println!("state directory: {}\n", root.display());

    // The store: OpenClaw's layout under `root` (point it at ~/.openclaw to share
    // sessions with OpenClaw). Kept in an Arc so we can list it at the end.
    let store = Arc::new(JsonFileStore::new(&root));

    // A clock we can move, so the demo can show an idle session expiring without
    // waiting. A real bot leaves the default system clock in place.
    let clock = ManualClock::new(SystemClock.now());

    let manager = SessionManager::builder(store.clone())
        // One session per person per channel for DMs; groups and threads get their own.
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        // OpenClaw's default (a daily reset at 04:00) plus: WhatsApp groups go stale
        // after 30 quiet minutes.
        .freshness(ResetConfig::default().by_channel("whatsapp", ResetSpec::idle(30)))
        // Every message in and out goes to the session's JSONL transcript.
        .transcripts(FileTranscriptStore::new(&root))
        // `/new` and `/reset` as usual; in groups the agent is mentioned as "@bot".
        .reset_triggers(ResetTriggers::default().mention_names(["@bot"]))
        .clock(clock.clone())
        .build()?;

    let alice = |text: &str| {
        InboundMessage::direct("telegram", "123456789", text).with_sender_name("Alice")
    };
    let family = |sender: &str, name: &str, text: &str| {
        InboundMessage::group("whatsapp", "120363406150318674@g.us", sender, text)
            .with_sender_name(name)
            .with_group_subject("Family")
    };
    let helpdesk = |text: &str| {
        InboundMessage::group("slack", "C0HELPDESK", "U042", text)
            .in_channel()
            .with_group_subject("#helpdesk")
            .with_thread("1770350000.000100")
            .with_sender_name("Carol")
            .with_agent("support")
            .mentioning_agent()
    };

    let script: Vec<(Duration, InboundMessage)> = vec![
        (
            Duration::ZERO,
            alice("Hi! Can you remind me what we decided yesterday?"),
        ),
        (
            Duration::from_secs(60),
            family("+15550101", "Dana", "Sunday dinner is at mine this week!"),
        ),
        (
            Duration::from_secs(60),
            family("+15550100", "Bob", "@bot what time is dinner on Sunday?").mentioning_agent(),
        ),
        (
            Duration::from_secs(60),
            alice("And add milk to the list, please."),
        ),
        (Duration::from_secs(60), helpdesk("The VPN is down again.")),
        (
            Duration::from_secs(60),
            family(
                "+15550101",
                "Dana",
                "I'll bring dessert, don't tell the bot.",
            ),
        ),
        (
            Duration::from_secs(60),
            alice("/new plan a weekend in Rome"),
        ),
        (
            Duration::from_secs(45 * 60),
            family("+15550100", "Bob", "@bot did anyone book the table?").mentioning_agent(),
        ),
    ];

    for (pause, message) in &script {
        clock.advance(*pause);
        if *pause > Duration::from_secs(60) {
            println!("  … {} quiet minutes later …", pause.as_secs() / 60);
        }
        // 1. One call: which session, what the model sees, whether to answer at all.
        let turn = manager.turn(message).await?;
        let name = message.sender.name.as_deref().unwrap_or("?");
        let Some(resolution) = turn.resolution() else {
            println!(
                "{name:>5} on {:<8} → not addressed to the bot: kept as group chatter",
                message.channel
            );
            continue;
        };
        println!(
            "{name:>5} on {:<8} → {}\n        {:?} ({}), session {}",
            message.channel,
            resolution.key,
            resolution.decision,
            resolution.reason,
            resolution.session_id(),
        );
        // 2. The conversation so far, as chat messages, ready for the model.
        let messages = turn.messages().await?;
        println!(
            "        the model sees {} message(s), the last:",
            messages.len()
        );
        if let Some(last) = messages.last() {
            for line in last.content.lines() {
                println!("        │ {line}");
            }
        }
        // 3. The model answers (a real bot calls its LLM with `messages` here).
        let reply = format!("(stand-in reply to {:?})", resolution.body);
        // 4. What to send: filtered, logged and recorded in the session.
        for payload in turn.complete(reply).await? {
            println!("        bot: {}", payload.text.unwrap_or_default());
        }
    }

    println!("\nsessions, most recent first:");
    for session in store.list(&ListFilter::new()).await? {
        let entry = &session.entry;
        println!(
            "  {:<52} {:<8} {:<18} {} messages",
            session.key.as_str(),
            entry.chat_type.as_ref().map_or("-", |t| t.as_str()),
            entry.display_name.as_deref().unwrap_or("-"),
            entry.message_count.unwrap_or(0),
        );
    }

    println!("\nsessions.json files written (open them: this is OpenClaw's format):");
    for agent in store.agents().await? {
        println!("  {}", store.store_path(&agent).display());
    }
    println!("\ntranscripts (the reset one archived as *.reset.*):");
    for agent in store.agents().await? {
        let dir = store.store_path(&agent).with_file_name("");
        let mut names: Vec<String> = std::fs::read_dir(&dir)?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(".jsonl"))
            .collect();
        names.sort();
        for name in names {
            println!("  {}", dir.join(name).display());
        }
    }
    Ok(())
}
