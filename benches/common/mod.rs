//! Fixtures shared by the benchmarks.

#![allow(dead_code)]

use std::path::Path;

use agent_sessions::entry::{ChatType, DeliveryContext, SessionOrigin};
use agent_sessions::prelude::*;
use indexmap::IndexMap;

/// A realistic entry of about 1.46 KB, the size OpenClaw's users report.
pub fn entry(i: usize) -> SessionEntry {
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

pub fn key(i: usize) -> SessionKey {
    SessionKey::parse(&format!("agent:main:telegram:dm:{}", 100_000_000 + i)).unwrap()
}

/// Writes a store of `sessions` entries the way OpenClaw does (JSON.stringify, 2 spaces).
pub fn write_store(root: &Path, sessions: usize) -> Vec<u8> {
    let store: IndexMap<String, SessionEntry> = (0..sessions)
        .map(|i| (key(i).to_string(), entry(i)))
        .collect();
    let bytes = serde_json::to_vec_pretty(&store).unwrap();
    let file = agent_sessions::paths::store_path(root, &AgentId::main());
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, &bytes).unwrap();
    bytes
}
