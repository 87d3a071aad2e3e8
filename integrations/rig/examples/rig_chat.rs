//! A terminal chat with a rig agent whose conversation memory is a session in OpenClaw's
//! files: it survives restarts, and `/new` starts over. The model is any
//! OpenAI-compatible server (OpenAI through a proxy, Ollama, llama.cpp, vLLM).
//!
//! ```text
//! # Ollama on this machine, state in ./chat-state:
//! cargo run -p agent-sessions-rig --example rig_chat -- ./chat-state
//! # another server and model:
//! OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=my-model OPENAI_API_KEY=… \
//!     cargo run -p agent-sessions-rig --example rig_chat -- ./chat-state
//! ```
//!
//! Each line is resolved to its session first (`/new`, idle and daily resets), then the
//! agent runs with the session key as its conversation id: `SessionMemory` loads the
//! conversation and appends the run. The crate enables no TLS: for an `https://`
//! server, depend on rig-core with its `rustls` feature (here:
//! `--features rig-core/rustls`).

use std::io::{BufRead, Write};
use std::sync::Arc;

use agent_sessions::prelude::*;
use agent_sessions_rig::SessionMemory;
use rig_agent::AgentBuilder;
use rig_core::providers::openai::OpenAIConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let state = std::env::args()
        .nth(1)
        .ok_or("usage: rig_chat <state-dir>")?;
    let base = std::env::var("OPENAI_BASE_URL").unwrap_or("http://127.0.0.1:11434/v1".into());
    let model = std::env::var("OPENAI_MODEL").unwrap_or("llama3.2".into());
    let key = std::env::var("OPENAI_API_KEY").unwrap_or("none".into());

    let manager = Arc::new(
        SessionManager::connect(&format!("json:{state}"))
            .await?
            .build()?,
    );
    let agent = AgentBuilder::new(
        OpenAIConfig::new(key)
            .with_base_url(&base)
            .client()
            .chat(&model),
    )
    .preamble("You are a helpful, concise assistant.")
    .memory(SessionMemory::new(manager.clone()).with_session_keys()) // the ids are our resolved keys
    .build();
    let user = std::env::var("USER").unwrap_or_else(|_| "you".into());
    println!("chatting with {model} at {base}; state in {state} (/new resets, Ctrl-D ends)");

    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let session = manager
            .resolve(&InboundMessage::direct(
                "terminal",
                user.as_str(),
                line.trim(),
            ))
            .await?;
        if session.reset_triggered && session.body.trim().is_empty() {
            println!("bot: New session started.");
            continue;
        }
        let reply = agent
            .prompt(session.body.as_str())
            .conversation(session.key.as_str())
            .await?;
        println!("bot: {}", reply.output());
        std::io::stdout().flush()?;
    }
    Ok(())
}
