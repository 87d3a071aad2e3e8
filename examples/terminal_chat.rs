//! A terminal chat adapter: each line you type is an inbound message, the bot answers,
//! and the conversation lives in OpenClaw's files, so it survives restarts.
//!
//! ```text
//! cargo run --example terminal_chat -- ./chat-state              # chat; Ctrl-D or /quit ends
//! cargo run --example terminal_chat -- ./chat-state --idle 20    # sessions expire after 20 quiet seconds
//! ```
//!
//! `/new` (or `/reset`) starts a new session; the old transcript is archived. Run it
//! again with the same directory and the conversation continues where it stopped.
//! The "model" is a deterministic stand-in that a real bot replaces with its LLM call.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use agent_sessions::freshness::from_millis;
use agent_sessions::freshness::{Freshness, FreshnessInput, FreshnessPolicy, ResetPolicy, Zone};
use agent_sessions::prelude::*;
use chrono::{DateTime, Utc};

/// Sessions go stale after a number of quiet seconds (OpenClaw's idle reset counts in
/// minutes; a terminal demo wants seconds). Any `FreshnessPolicy` plugs in like this.
#[derive(Debug)]
struct IdleSeconds(u64);

impl FreshnessPolicy for IdleSeconds {
    fn evaluate(&self, session: &FreshnessInput<'_>, now: DateTime<Utc>) -> Freshness {
        let policy = ResetPolicy {
            daily_at_hour: None,
            idle: Some(Duration::from_secs(self.0)),
        };
        policy.evaluate(session.entry.updated_at, now, &Zone::Local)
    }
}

/// The stand-in model: answers from the message and what the session remembers.
fn stand_in_model(messages: &[ChatMessage]) -> String {
    let said: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == ChatRole::User)
        .map(|m| m.content.as_str())
        .collect();
    match said.as_slice() {
        [] => "Hello?".into(),
        [only] => format!("You said {only:?}. This is the start of our conversation."),
        [first, .., last] => format!(
            "(turn {}) You said {last:?}. Earlier you said: {first:?}",
            said.len()
        ),
    }
}

struct Options {
    root: PathBuf,
    idle_seconds: u64,
}

fn options() -> Result<Options, String> {
    let mut root = None;
    let mut idle_seconds = 300;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--idle" => {
                let value = args.next().ok_or("--idle needs a number of seconds")?;
                idle_seconds = value
                    .parse()
                    .map_err(|_| format!("--idle: not a number of seconds: {value}"))?;
            }
            _ if root.is_none() => root = Some(PathBuf::from(arg)),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let root = root.ok_or("usage: terminal_chat <state-dir> [--idle <seconds>]")?;
    Ok(Options { root, idle_seconds })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    let manager = SessionManager::connect(&format!("json:{}", options.root.display()))
        .await?
        .freshness(IdleSeconds(options.idle_seconds))
        .build()?;
    let user = std::env::var("USER").unwrap_or_else(|_| "you".into());
    println!(
        "chatting as {user}; state in {} (sessions expire after {} quiet seconds; /new resets, /quit ends)",
        options.root.display(),
        options.idle_seconds
    );

    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text == "/quit" {
            break;
        }
        let message =
            InboundMessage::direct("terminal", user.as_str(), text).with_sender_name(&user);
        // One call: the session (new after /new or the idle timeout), the input.
        let turn = manager.turn(&message).await?;
        if let Some(resolution) = turn.resolution().filter(|r| r.is_new()) {
            println!(
                "[new session {} — {}]",
                resolution.session_id(),
                resolution.reason
            );
        }
        let reply = if turn.needs_model() {
            // The whole conversation so far, as the model should see it.
            stand_in_model(&turn.messages().await?)
        } else {
            String::new() // a bare `/new`: `complete` sends its acknowledgement
        };
        for payload in turn.complete(reply).await? {
            println!("bot: {}", payload.text.unwrap_or_default());
        }
        std::io::stdout().flush()?;
    }

    let key = manager.key_for(&InboundMessage::direct("terminal", user.as_str(), ""))?;
    if let Some(session) = manager.session(&key).get().await? {
        let last = from_millis(session.entry.updated_at);
        println!(
            "session {} kept: {} turns, last message {}; transcript {}",
            session.entry.session_id,
            session.entry.turn_count.unwrap_or(0),
            last.format("%H:%M:%S"),
            session.entry.session_file.as_deref().unwrap_or("(none)")
        );
    }
    Ok(())
}
