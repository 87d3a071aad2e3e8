//! A terminal chat with a model behind any OpenAI-compatible server (OpenAI through a
//! proxy, Ollama, llama.cpp, vLLM), whose conversation lives in OpenClaw's files: it
//! survives restarts, and `/new` starts over.
//!
//! ```text
//! # Ollama on this machine, state in ./chat-state:
//! cargo run -p agent-sessions-openai --example openai_chat -- ./chat-state
//! # another server and model:
//! OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_MODEL=my-model OPENAI_API_KEY=… \
//!     cargo run -p agent-sessions-openai --example openai_chat -- ./chat-state
//! ```
//!
//! The crate enables no TLS: for an `https://` server, depend on async-openai with its
//! `rustls` feature (here: `--features async-openai/rustls`).

use std::io::{BufRead, Write};

use agent_sessions::prelude::*;
use async_openai::config::OpenAIConfig;
use async_openai::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let state = std::env::args()
        .nth(1)
        .ok_or("usage: openai_chat <state-dir>")?;
    let base = std::env::var("OPENAI_BASE_URL").unwrap_or("http://127.0.0.1:11434/v1".into());
    let model = std::env::var("OPENAI_MODEL").unwrap_or("llama3.2".into());
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();

    let manager = SessionManager::connect(&format!("json:{state}"))
        .await?
        .build()?;
    let client = Client::with_config(OpenAIConfig::new().with_api_base(&base).with_api_key(key));
    let user = std::env::var("USER").unwrap_or_else(|_| "you".into());
    println!("chatting with {model} at {base}; state in {state} (/new resets, Ctrl-D ends)");

    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let message = InboundMessage::direct("terminal", user.as_str(), line.trim());
        let turn = manager.turn(&message).await?;
        let system = vec![ChatMessage::system("You are a helpful, concise assistant.")];
        for payload in agent_sessions_openai::answer(turn, &client, &model, system).await? {
            println!("bot: {}", payload.text.unwrap_or_default());
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}
