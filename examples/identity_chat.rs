//! An identity adapter for SMS and web chat: Jane texts the bot, then opens the
//! web chat. Her phone number is looked up in the staff directory and her web login
//! carries her staff id, so both resolve to one person and continue one conversation.
//! An hour later the person's rolling summary is shared with the other engine variant
//! of the same agent identity, which picks up where she left off.
//!
//! ```text
//! cargo run --example identity_chat
//! ```
//!
//! The "model" is a deterministic stand-in that a real bot replaces with its LLM call.

use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::identity::{DefaultIdentityResolver, Identifier, PersonType, StaticDirectory};
use agent_sessions::memory::SummaryRefresh;
use agent_sessions::prelude::*;
use agent_sessions::transcript::InMemoryTranscriptStore;

const JANE_PHONE: &str = "+61 411 111 111";

/// The stand-in model: answers from the message and what it is given besides.
fn stand_in_model(body: &str, context: &str) -> String {
    let knows_riverside = context.contains("Riverside");
    match (body, knows_riverside) {
        (b, _) if b.contains("When is my shift") => "Thursday at 9am at Riverside.".into(),
        (b, true) if b.contains("go through") => {
            "Yes: your Riverside shift swap from Thursday to Friday is confirmed.".into()
        }
        (b, true) if b.contains("swap") => {
            "I've asked to swap your Thursday Riverside shift for Friday.".into()
        }
        _ => "Sorry, which shift do you mean?".into(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::at_millis(1_773_136_800_000); // 2026-03-10 10:00 UTC
    let staff = StaticDirectory::new(PersonType::Staff, "staff").with(
        JANE_PHONE,
        "17",
        "Jane Smith",
        Some("support_worker"),
    );
    let manager = SessionManager::builder(InMemoryStore::new())
        // One session per person per agent, whatever the channel.
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPerson))
        .identity_resolver(DefaultIdentityResolver::new().directory(staff))
        .transcripts(InMemoryTranscriptStore::new())
        // Two engine variants of one agent identity share rolling summaries.
        .agent_identity("reggie_oc", "reggie")
        .agent_identity("reggie_fd", "reggie")
        .clock(clock.clone())
        .build()?;

    // (channel, how the channel identifies her, agent, what she says, minutes later)
    let web_login = Identifier::Subject {
        sub: "staff:17".into(),
        first_name: Some("Jane".into()),
        last_name: Some("Smith".into()),
        role: None,
        email: None,
    };
    let script = [
        (
            "sms",
            Identifier::Phone(JANE_PHONE.into()),
            "reggie_oc",
            "When is my shift at Riverside?",
            0,
        ),
        (
            "web",
            web_login.clone(),
            "reggie_oc",
            "Can I swap it for Friday?",
            5,
        ),
        (
            "web",
            web_login,
            "reggie_fd",
            "Did the swap go through?",
            70,
        ),
    ];

    let mut refreshed = false;
    for (channel, identifier, agent, text, minutes) in script {
        clock.advance(Duration::from_secs(minutes * 60));
        if minutes >= 60 && !refreshed {
            // After an hour of quiet the host refreshes the person's rolling summary;
            // every session of the identity gets it.
            if let SummaryRefresh::Updated { summary, sessions } = manager
                .refresh_identity_summary("staff:17", "reggie")
                .await?
            {
                println!(
                    "[an hour later: the rolling summary for reggie, shared with {} session(s)]",
                    sessions.len()
                );
                for line in summary.text.lines() {
                    println!("  │ {line}");
                }
                println!();
            }
            refreshed = true;
        }

        let person = manager.identify(channel, &identifier).await?;
        let sender = match &identifier {
            Identifier::Phone(phone) => phone.clone(),
            _ => person.id.clone(),
        };
        let message = InboundMessage::direct(channel, sender, text)
            .with_agent(agent)
            .from_resolved(&person);
        // One call: the session (one per person and agent variant, whatever the
        // channel), the message logged under the canonical person.
        let turn = manager.turn(&message).await?;
        let resolution = turn.resolution().expect("a direct message opens a turn");
        println!(
            "{} on {channel} to {agent}: {text}\n  {} is {} ({}): {}, session {}",
            person.name.as_deref().unwrap_or("?"),
            person.id,
            resolution.key,
            if resolution.is_new() {
                "new"
            } else {
                "continues"
            },
            resolution.reason,
            resolution.session_id(),
        );

        // What the model is given: the person's rolling summary (shared by the
        // identity's sessions), then the conversation, this message last.
        let remembered = resolution
            .entry()
            .identity_summary
            .as_ref()
            .map(|s| s.text.clone());
        if let Some(remembered) = &remembered {
            println!("  the model is given what the identity remembers:");
            for line in remembered.lines() {
                println!("  │ {line}");
            }
        }
        let conversation: Vec<String> = turn
            .messages()
            .await?
            .into_iter()
            .map(|m| m.content)
            .collect();
        let context = remembered
            .into_iter()
            .chain(conversation)
            .collect::<Vec<_>>()
            .join("\n");
        let reply = stand_in_model(text, &context);
        for payload in turn.complete(reply).await? {
            println!("  bot: {}\n", payload.text.unwrap_or_default());
        }
    }
    Ok(())
}
