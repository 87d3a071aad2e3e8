//! A first tour of `agent-sessions`: messages from a Telegram DM, a WhatsApp group and a
//! Slack thread are keyed, stored and updated in OpenClaw's file layout.
//!
//! ```text
//! cargo run --example quickstart            # a fresh temporary directory, kept
//! cargo run --example quickstart -- ./state # or a directory of your choice
//! ```
//!
//! Afterwards, look at the files it prints: they are exactly what OpenClaw would read.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use agent_sessions::entry::{ChatType, DeliveryContext, SessionOrigin};
use agent_sessions::key::{group_display_name, resolve_group, GroupNameParts};
use agent_sessions::prelude::*;

/// What a channel adapter hands over for one inbound message.
struct Inbound<'a> {
    channel: &'a str,
    /// The sender address as the channel writes it (a WhatsApp group JID for groups).
    from: &'a str,
    sender_name: &'a str,
    chat_type: &'a str,
    group_subject: Option<&'a str>,
    agent: &'a str,
    thread: Option<&'a str>,
    text: &'a str,
}

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

    // One session per person per channel for DMs; groups and threads get their own.
    let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
    let store = JsonFileStore::new(&root);

    let conversation = [
        Inbound {
            channel: "telegram",
            from: "123456789",
            sender_name: "Alice",
            chat_type: "direct",
            group_subject: None,
            agent: "main",
            thread: None,
            text: "Hi! Can you remind me what we decided yesterday?",
        },
        Inbound {
            channel: "whatsapp",
            from: "120363406150318674@g.us",
            sender_name: "Bob",
            chat_type: "group",
            group_subject: Some("Family"),
            agent: "main",
            thread: None,
            text: "@bot what time is dinner on Sunday?",
        },
        Inbound {
            channel: "telegram",
            from: "123456789",
            sender_name: "Alice",
            chat_type: "direct",
            group_subject: None,
            agent: "main",
            thread: None,
            text: "And add milk to the list, please.",
        },
        Inbound {
            channel: "slack",
            from: "slack:channel:C0HELPDESK",
            sender_name: "Carol",
            chat_type: "channel",
            group_subject: Some("#helpdesk"),
            agent: "support",
            thread: Some("1770350000.000100"),
            text: "The VPN is down again.",
        },
        Inbound {
            channel: "whatsapp",
            from: "120363406150318674@g.us",
            sender_name: "Dana",
            chat_type: "group",
            group_subject: Some("Family"),
            agent: "main",
            thread: None,
            text: "I'll bring dessert.",
        },
    ];

    for message in &conversation {
        let key = keys.build(&conversation_of(message))?;
        let (session_id, is_new, messages) = record_inbound(&store, &key, message).await?;
        println!(
            "{:>5} on {:<8} → {key}\n        {} session {session_id}, message {messages}: {:?}",
            message.sender_name,
            message.channel,
            if is_new { "new" } else { "same" },
            message.text,
        );
    }

    println!("\nsessions, most recent first:");
    for session in store.list(&ListFilter::new()).await? {
        let entry = &session.entry;
        println!(
            "  {:<52} {:<8} {:<22} {}",
            session.key.as_str(),
            entry
                .chat_type
                .as_ref()
                .map(ChatType::as_str)
                .unwrap_or("-"),
            entry.display_name.as_deref().unwrap_or("-"),
            entry.session_id,
        );
    }

    println!("\nsessions.json files written (open them: this is OpenClaw's format):");
    for agent in store.agents().await? {
        println!("  {}", store.store_path(&agent).display());
    }
    Ok(())
}

/// Which conversation a message belongs to: its group or channel, else the DM peer.
fn conversation_of(message: &Inbound<'_>) -> Conversation {
    let conversation =
        match resolve_group(message.from, Some(message.chat_type), Some(message.channel)) {
            Some(group) => group.conversation(),
            None => Conversation::direct(message.channel, message.from),
        };
    let conversation = conversation.with_agent(message.agent);
    match message.thread {
        Some(thread) => conversation.with_thread(thread),
        None => conversation,
    }
}

/// Records one inbound message: creates the session on first contact, refreshes its
/// activity time, origin and reply route, and counts messages. One atomic update.
async fn record_inbound(
    store: &JsonFileStore,
    key: &SessionKey,
    message: &Inbound<'_>,
) -> agent_sessions::Result<(String, bool, u64)> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let is_group = key.peer_kind().is_some_and(PeerKind::is_group);
    store
        .update(key, |slot| {
            let is_new = slot.is_none();
            let entry = slot.get_or_insert_with(|| SessionEntry::new_session(now));
            entry.updated_at = now;
            entry.chat_type = key.peer_kind().map(ChatType::from);
            entry.channel = Some(message.channel.to_owned());
            entry.origin = Some(SessionOrigin {
                label: Some(
                    message
                        .group_subject
                        .unwrap_or(message.sender_name)
                        .to_owned(),
                ),
                provider: Some(message.channel.to_owned()),
                chat_type: entry.chat_type.clone(),
                from: Some(message.from.to_owned()),
                ..SessionOrigin::default()
            });
            entry.delivery_context = Some(DeliveryContext {
                channel: Some(message.channel.to_owned()),
                to: Some(message.from.to_owned()),
                thread_id: message.thread.map(Into::into),
                ..DeliveryContext::default()
            });
            entry.last_channel = Some(message.channel.to_owned());
            entry.last_to = Some(message.from.to_owned());
            if is_group {
                // As OpenClaw does: a `#name` subject of a channel is its channel name.
                let (subject, group_channel) = match message.group_subject {
                    Some(name) if name.starts_with('#') => (None, Some(name)),
                    other => (other, None),
                };
                entry.subject = subject.map(str::to_owned);
                entry.group_channel = group_channel.map(str::to_owned);
                entry.display_name = Some(group_display_name(&GroupNameParts {
                    provider: Some(message.channel),
                    subject,
                    group_channel,
                    id: Some(message.from),
                    ..GroupNameParts::default()
                }));
            }
            // A field OpenClaw does not know: kept in `extra`, and OpenClaw keeps it too.
            let messages = entry
                .extra
                .get("quickstartMessages")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                + 1;
            entry
                .extra
                .insert("quickstartMessages".into(), messages.into());
            (entry.session_id.clone(), is_new, messages)
        })
        .await
}
