//! The `agent-sessions` command line, run as a user would.

// The library's test helpers (fixtures, PostgreSQL schemas), shared with this crate.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn run(store: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The binary with `args` only (no `--store`), for `migrate`.
fn run_bare(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

/// The OpenClaw fixture imported into a fresh SQLite database.
fn imported() -> (tempfile::TempDir, tempfile::TempDir, String) {
    let tree = common::openclaw_fixture();
    let work = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", work.path().join("sessions.db").display());
    let agents = tree.path().join("agents");
    let report = json(&run(
        &store,
        &["--json", "import", "--openclaw", agents.to_str().unwrap()],
    ));
    assert_eq!(report["verified"], true);
    assert_eq!(report["sessionsCopied"], 3);
    assert_eq!(report["transcriptsCopied"], 1);
    (tree, work, store)
}

#[test]
fn import_then_list_show_and_stats() {
    let (_tree, _work, store) = imported();
    let listed = json(&run(&store, &["--json", "list"]));
    let keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "agent:main:main",
            "agent:main:whatsapp:group:120363406150318674@g.us",
            "agent:main:subagent:9b2f6c1e-5d4a-4c3b-8a7e-1f0e2d3c4b5a"
        ]
    );
    let groups = json(&run(&store, &["--json", "list", "--chat-type", "group"]));
    assert_eq!(groups.as_array().unwrap().len(), 1);
    let human = run(&store, &["list", "--limit", "1"]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.contains("agent:main:main") && text.contains("\n1 session\n"),
        "{text}"
    );
    // Page by page: each page names the cursor of the next on standard error.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = vec!["--json", "list", "--limit", "2"];
        if let Some(cursor) = &cursor {
            args.extend(["--cursor", cursor.as_str()]);
        }
        let output = run(&store, &args);
        let page = json(&output);
        paged.extend(
            page.as_array()
                .unwrap()
                .iter()
                .map(|s| s["key"].as_str().unwrap().to_owned()),
        );
        let stderr = String::from_utf8(output.stderr).unwrap();
        match stderr.split("--cursor ").nth(1) {
            Some(rest) => cursor = Some(rest.split_whitespace().next().unwrap().to_owned()),
            None => break,
        }
        assert!(paged.len() <= keys.len(), "pages never end: {paged:?}");
    }
    assert_eq!(paged, keys);
    // A full last page names no next one; a limit past any integer is no limit.
    for limit in ["3", "18446744073709551615"] {
        let output = run(&store, &["--json", "list", "--limit", limit]);
        assert_eq!(
            json(&output).as_array().unwrap().len(),
            3,
            "--limit {limit}"
        );
        assert!(
            !String::from_utf8_lossy(&output.stderr).contains("--cursor"),
            "--limit {limit}"
        );
    }
    let forged = run(&store, &["--json", "list", "--cursor", "1.zz.00"]);
    assert_eq!(code(&forged), 2, "a usage error");
    assert!(
        String::from_utf8_lossy(&forged.stderr).contains("not a cursor"),
        "{}",
        String::from_utf8_lossy(&forged.stderr)
    );

    let shown = json(&run(&store, &["--json", "show", "main"]));
    assert_eq!(
        shown["entry"]["sessionId"],
        "0f5d59ee-034e-47d9-ac97-d383e6c022b8"
    );
    // Fields this crate does not know came through the import.
    assert_eq!(
        shown["entry"]["deliveryContext"]["replyMarkup"]["inline"],
        true
    );
    // The text names each token figure: the prompt holds the input, it is not a sum.
    let text = String::from_utf8(run(&store, &["show", "main"]).stdout).unwrap();
    assert!(
        text.lines().any(|line| line
            == "last turn   prompt 15320 tokens (1200 input + 14120 cache), reply 340 tokens"),
        "{text}"
    );

    let stats = json(&run(&store, &["--json", "stats"]));
    assert_eq!(stats["sessions"], 3);
    assert_eq!(stats["byAgent"]["main"], 3);
    assert_eq!(stats["transcripts"], 1);
}

#[test]
fn reset_close_delete_and_prune() {
    let (_tree, _work, store) = imported();
    let before = json(&run(&store, &["--json", "show", "main"]));
    let reset = json(&run(&store, &["--json", "reset", "main"]));
    assert_ne!(reset["sessionId"], before["entry"]["sessionId"]);
    let stats = json(&run(&store, &["--json", "stats"]));
    assert_eq!(
        stats["archivedTranscripts"], 1,
        "the old transcript is archived"
    );

    let closed = json(&run(&store, &["--json", "close", "main"]));
    assert_eq!(closed["action"], "closed");
    let shown = json(&run(&store, &["--json", "show", "agent:main:main"]));
    assert_eq!(shown["entry"]["status"], "closed");

    // A group session is shared history: deleting it needs --force.
    let group = "agent:main:whatsapp:group:120363406150318674@g.us";
    let refused = run(&store, &["delete", group]);
    assert_eq!(code(&refused), 1);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not deleted"));
    json(&run(&store, &["--json", "delete", group, "--force"]));
    assert_eq!(code(&run(&store, &["show", group])), 4);

    // The session the reset replaced is kept, closed, and shows by its id.
    let old_id = before["entry"]["sessionId"].as_str().unwrap();
    let old = json(&run(&store, &["--json", "show", old_id]));
    assert_eq!(old["entry"]["status"], "closed");
    let listed = json(&run(&store, &["--json", "list", "--status", "closed"]));
    let closed_ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["entry"]["sessionId"].as_str().unwrap())
        .collect();
    assert!(closed_ids.contains(&old_id), "{listed}");

    // Left: the reset main session (active now), the old subagent session, and the
    // closed session the reset replaced (last active long ago).
    let dry = json(&run(
        &store,
        &["--json", "prune", "--older-than", "30d", "--dry-run"],
    ));
    let mut removed: Vec<&str> = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    removed.sort();
    assert_eq!(
        removed,
        [
            "agent:main:main",
            "agent:main:subagent:9b2f6c1e-5d4a-4c3b-8a7e-1f0e2d3c4b5a"
        ]
    );
    assert!(
        dry["sessionIds"]
            .as_array()
            .unwrap()
            .contains(&Value::from(old_id)),
        "{dry}"
    );
    assert_eq!(json(&run(&store, &["--json", "stats"]))["sessions"], 2);
    let kept = json(&run(
        &store,
        &["--json", "prune", "--older-than", "1s", "--keep", "1"],
    ));
    assert_eq!(
        kept["removed"].as_array().unwrap().len(),
        2,
        "the newest is kept; the closed session goes with the other"
    );
    let stats = json(&run(&store, &["--json", "stats"]));
    assert_eq!(stats["sessions"], 1);
    assert_eq!(
        stats["byStatus"]["closed"], 1,
        "main, closed above, is the one kept"
    );
}

/// `list` hides inactive sessions unless `--include-inactive` or a `--status` asks for
/// them; an unknown status is refused.
#[test]
fn list_hides_inactive_sessions_unless_asked() {
    let (_tree, _work, store) = imported();
    let all = json(&run(&store, &["--json", "list"]));
    let total = all.as_array().unwrap().len();
    let hidden = all[0]["key"].as_str().unwrap().to_owned();
    let db = store.strip_prefix("sqlite:").unwrap().to_owned();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let manager = agent_sessions::SessionManager::connect(&format!("sqlite:{db}"))
            .await
            .unwrap()
            .build()
            .unwrap();
        let key = agent_sessions::SessionKey::parse(&hidden).unwrap();
        manager
            .session(&key)
            .set_status(agent_sessions::SessionStatus::Inactive)
            .await
            .unwrap();
    });
    let keys = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["--json", "list"];
        full.extend_from_slice(args);
        json(&run(&store, &full))
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let cases: [(&[&str], usize, bool); 4] = [
        (&[], total - 1, false),
        (&["--include-inactive"], total, true),
        (&["--status", "inactive"], 1, true),
        (&["--status", "idle", "--status", "inactive"], total, true),
    ];
    for (args, count, shows_hidden) in cases {
        let listed = keys(args);
        assert_eq!(listed.len(), count, "{args:?}: {listed:?}");
        assert_eq!(listed.contains(&hidden), shows_hidden, "{args:?}");
    }
    let refused = run(&store, &["list", "--status", "sleeping"]);
    assert_eq!(code(&refused), 2, "a usage error");
    assert!(
        stderr(&refused).contains("unknown status"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn export_and_migrate_back_to_files() {
    let (_tree, work, store) = imported();
    let exported = work.path().join("export.json");
    let output = run(&store, &["export", "--output", exported.to_str().unwrap()]);
    assert!(output.status.success());
    let document: Value = serde_json::from_slice(&std::fs::read(&exported).unwrap()).unwrap();
    assert_eq!(document["format"], "agent-sessions-export");
    assert_eq!(document["sessions"].as_array().unwrap().len(), 3);
    assert_eq!(
        document["transcripts"][0]["lines"]
            .as_array()
            .unwrap()
            .len(),
        15
    );

    let back = work.path().join("back");
    let to = format!("json:{}", back.display());
    let report = json(&run_bare(&[
        "--json", "migrate", "--from", &store, "--to", &to,
    ]));
    assert_eq!(report["verified"], true);
    assert!(Path::new(&back)
        .join("agents/main/sessions/sessions.json")
        .is_file());
    assert!(back
        .join("agents/main/sessions/0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl")
        .is_file());
    // Running it again copies nothing and still verifies.
    let again = json(&run_bare(&[
        "--json", "migrate", "--from", &store, "--to", &to,
    ]));
    assert_eq!(
        (
            again["sessionsCopied"].as_u64(),
            again["verified"].as_bool()
        ),
        (Some(0), Some(true))
    );
}

#[test]
fn exit_codes() {
    let (_tree, work, store) = imported();
    assert_eq!(code(&run(&store, &["show", "nobody"])), 4);
    assert_eq!(code(&run(&store, &["reset", "nobody"])), 4);
    assert_eq!(code(&run("ftp://nope", &["list"])), 1);
    assert_eq!(code(&run(&store, &["frobnicate"])), 2);
    assert_eq!(code(&run(&store, &["prune", "--older-than", "soon"])), 2);
    assert_eq!(code(&run(&store, &["show", "agent:main:dm:a\u{7}b"])), 1);

    // A target whose transcript differs: the migration does not verify.
    let target = format!("sqlite:{}", work.path().join("other.db").display());
    let transcript = "0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl";
    let tree = tempfile::tempdir().unwrap();
    let sessions = tree.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(
        sessions.join(transcript),
        "{\"type\":\"session\",\"id\":\"x\"}\n",
    )
    .unwrap();
    let seeded = run(
        &target,
        &["import", "--openclaw", tree.path().to_str().unwrap()],
    );
    assert!(
        seeded.status.success(),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    let conflicted = run_bare(&["migrate", "--from", &store, "--to", &target]);
    assert_eq!(code(&conflicted), 3);
    assert!(String::from_utf8_lossy(&conflicted.stdout).contains("conflict"));
}

#[test]
fn doctor_reports_then_repairs() {
    let tree = common::openclaw_fixture();
    let store = format!("json:{}", tree.path().display());
    let lock = tree.path().join("agents/main/sessions/sessions.json.lock");
    std::fs::write(
        &lock,
        r#"{"pid":999999,"startedAt":1770350000000,"lockedBy":"agent-sessions"}"#,
    )
    .unwrap();
    // Point the fixture's transcript paths (at /home/u) into this tree, where the
    // files are missing.
    let store_file = tree.path().join("agents/main/sessions/sessions.json");
    let text = std::fs::read_to_string(&store_file).unwrap();
    let moved = text.replace("/home/u/.openclaw", &tree.path().display().to_string());
    std::fs::write(&store_file, moved).unwrap();
    let found = run(&store, &["--json", "doctor"]);
    assert_eq!(code(&found), 5);
    let report: Value = serde_json::from_slice(&found.stdout).unwrap();
    let kinds: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f[0]["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"deadLock") && kinds.contains(&"missingTranscript"),
        "{kinds:?}"
    );
    let repaired = run(
        &store,
        &["doctor", "--repair", "--prune-missing-transcripts"],
    );
    assert_eq!(
        code(&repaired),
        0,
        "{}",
        String::from_utf8_lossy(&repaired.stdout)
    );
    assert!(!lock.exists());
    assert_eq!(code(&run(&store, &["doctor"])), 0);
    assert_eq!(
        code(&run(&store, &["doctor", "--prune-missing-transcripts"])),
        2
    );
    let sqlite = format!("sqlite:{}", tree.path().join("s.db").display());
    assert_eq!(code(&run(&sqlite, &["doctor"])), 1);
}

#[tokio::test]
async fn serve_answers_the_kernel_api_on_the_address_it_prints() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--secret", "s3cret", "--idle-minutes", "5"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();

    let client = reqwest::Client::new();
    let resolve = |sender: &'static str| {
        client
            .post(format!("{base}/kernel/sessions/resolve"))
            .header("x-kernel-secret", "s3cret")
            .json(&serde_json::json!({
                "workspace_id": "ws_abc", "channel": "sms",
                "remote_jid": sender, "user_message": "hello",
            }))
            .send()
    };
    let first: Value = resolve("+1555").await.unwrap().json().await.unwrap();
    let again: Value = resolve("+1555").await.unwrap().json().await.unwrap();
    let other: Value = resolve("+1666").await.unwrap().json().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(first["decision"], "new");
    assert_eq!(again["decision"], "continue");
    assert_eq!(again["session_id"], first["session_id"]);
    assert_eq!(other["decision"], "new", "one session per sender");
    assert_eq!(other["session"]["session_key"], "agent:ws_abc:sms:dm:+1666");
    let written =
        std::fs::read_to_string(dir.path().join("agents/ws_abc/sessions/sessions.json")).unwrap();
    assert!(written.contains("agent:ws_abc:sms:dm:+1555"), "{written}");
}

#[tokio::test]
async fn serve_with_metrics_exposes_them_in_the_prometheus_format_behind_the_secret() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--secret", "s3cret", "--metrics"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    let client = reqwest::Client::new();
    let resolved = client
        .post(format!("{base}/kernel/sessions/resolve"))
        .header("x-kernel-secret", "s3cret")
        .json(&serde_json::json!({
            "workspace_id": "ws_abc", "channel": "sms",
            "remote_jid": "+1555", "user_message": "hello",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    let anonymous = client.get(format!("{base}/metrics")).send().await.unwrap();
    let scraped = client
        .get(format!("{base}/metrics"))
        .header("x-kernel-secret", "s3cret")
        .send()
        .await
        .unwrap();
    let status = scraped.status();
    let content_type = scraped.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = scraped.text().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    assert_eq!(anonymous.status(), 401, "metrics need the secret");
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(
        text.contains(r#"agent_sessions_turns_total{decision="new",reason="no_session"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("agent_sessions_store_update_seconds"),
        "{text}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn serve_logs_store_failures_and_stops_gracefully_on_sigterm() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("agents/ws_abc/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(sessions.join("sessions.json"), "{ not json").unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut banner = String::new();
    while !banner.contains("http://") {
        banner.clear();
        assert!(
            stderr.read_line(&mut banner).unwrap() > 0,
            "serve printed no address"
        );
    }
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap()
        .to_owned();
    let failed = reqwest::Client::new()
        .post(format!("{base}/kernel/sessions/resolve"))
        .json(&serde_json::json!({
            "workspace_id": "ws_abc", "channel": "sms",
            "remote_jid": "+1555", "user_message": "my secret words",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);

    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM stops serve gracefully: {status:?}\n{rest}"
    );
    assert!(rest.contains("ERROR"), "the failure is logged: {rest}");
    assert!(rest.contains("corrupt"), "the log says what failed: {rest}");
    assert!(
        !rest.contains("my secret words"),
        "no message text in the log: {rest}"
    );
}

#[tokio::test]
async fn stats_with_messages_categorises_the_log_and_counts_it() {
    use agent_sessions::manager::LogMessage;
    use agent_sessions::prelude::*;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&store)
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build()
        .unwrap();
    for (sender, question, answer) in [
        ("+15550100", "When is my shift on Thursday?", "9am."),
        ("+15550100", "Can I swap my roster?", "Swap requested."),
        ("+15550101", "My payslip is wrong", "Raised with payroll."),
    ] {
        let message = InboundMessage::direct("sms", sender, question);
        let resolution = manager.resolve(&message).await.unwrap();
        manager
            .session(&resolution.key)
            .log_message(LogMessage::from_inbound(&message))
            .await
            .unwrap();
        manager
            .session(&resolution.key)
            .log_message(LogMessage::outbound(answer).on_channel("sms"))
            .await
            .unwrap();
    }

    let summary = json(&run(&store, &["stats", "--messages", "--json"]));
    let messages = &summary["messages"];
    assert_eq!(messages["total"], 6);
    assert_eq!(
        (messages["inbound"].as_u64(), messages["outbound"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(messages["by_category"]["roster_query"], 4, "{messages}");
    assert_eq!(messages["by_category"]["hr_request"], 2, "{messages}");
    assert_eq!(messages["by_channel"]["sms"], 6);
    assert_eq!(messages["newlyCategorized"], 6);
    // A read command writes nothing into the store tree...
    assert!(!dir.path().join("search").exists());
    // ...unless asked: with --save-index the categories are kept beside the tree, and
    // a second run has nothing new.
    let saved = json(&run(
        &store,
        &["stats", "--messages", "--save-index", "--json"],
    ));
    assert_eq!(saved["messages"]["newlyCategorized"], 6);
    assert!(dir.path().join("search/messages.json").exists());
    let again = json(&run(
        &store,
        &["stats", "--messages", "--save-index", "--json"],
    ));
    assert_eq!(again["messages"]["newlyCategorized"], 0);
    assert_eq!(again["messages"]["by_category"], messages["by_category"]);

    let text = run(&store, &["stats", "--messages"]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("messages by category:"), "{text}");
    assert!(text.contains("  roster_query"), "{text}");
    assert!(
        text.contains("trends (last 7 days against the 7 before):"),
        "{text}"
    );
    // The trends table lines up: every row as wide as its header.
    let table: Vec<&str> = text
        .lines()
        .skip_while(|line| !line.starts_with("trends "))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert!(table.len() >= 2, "{text}");
    assert!(
        table.iter().all(|row| row.len() == table[0].len()),
        "misaligned:\n{}",
        table.join("\n")
    );
    // --window-days and --save-index need --messages.
    assert_eq!(code(&run(&store, &["stats", "--window-days", "3"])), 2);
    assert_eq!(code(&run(&store, &["stats", "--save-index"])), 2);
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn read_commands_on_a_missing_store_say_so_and_create_nothing() {
    let work = tempfile::tempdir().unwrap();
    let sqlite_file = work.path().join("nonexistent/dir/x.db");
    let json_dir = work.path().join("typo");
    let sqlite = format!("sqlite:{}", sqlite_file.display());
    let json_store = format!("json:{}", json_dir.display());
    let elsewhere = format!("json:{}", work.path().join("target").display());
    for (store, named) in [
        (&sqlite, sqlite_file.display().to_string()),
        (&json_store, json_dir.display().to_string()),
    ] {
        for args in [
            &["list"][..],
            &["list", "--json"],
            &["show", "main"],
            &["stats"],
            &["stats", "--messages"],
            &["export"],
        ] {
            let output = run(store, args);
            assert_eq!(code(&output), 4, "{args:?} on {store}: {}", stderr(&output));
            assert!(
                stderr(&output).contains(&named),
                "{args:?}: the message names the store: {}",
                stderr(&output)
            );
            assert!(output.stdout.is_empty(), "{args:?} printed a result");
        }
        // The source of a migration is only read.
        let output = run_bare(&["migrate", "--from", store, "--to", &elsewhere]);
        assert_eq!(code(&output), 4, "{}", stderr(&output));
    }
    // Commands that change sessions need them to exist: they create no store either.
    for args in [
        &["reset", "main"][..],
        &["close", "main"],
        &["delete", "main"],
        &["prune", "--older-than", "1d"],
    ] {
        let output = run(&sqlite, args);
        assert_eq!(code(&output), 4, "{args:?}: {}", stderr(&output));
    }
    for args in [&["doctor"][..], &["doctor", "--repair"]] {
        let doctor = run(&json_store, args);
        assert_eq!(code(&doctor), 4, "{args:?}: {}", stderr(&doctor));
    }
    let import = run(
        &sqlite,
        &["import", "--openclaw", json_dir.to_str().unwrap()],
    );
    assert_ne!(code(&import), 0);
    assert_eq!(
        common::file_names(work.path()),
        Vec::<String>::new(),
        "nothing was created"
    );

    // A JSON store given as its agents/ directory (or any directory without agents/)
    // is not taken for an empty store.
    let tree = common::openclaw_fixture();
    let agents = format!("json:{}", tree.path().join("agents").display());
    let output = run(&agents, &["list"]);
    assert_eq!(code(&output), 4);
    assert!(stderr(&output).contains("agents/"), "{}", stderr(&output));
}

/// A `--store` that names another program's SQLite database (a typo, a wrong path) is
/// not a store: the commands that change sessions refuse it and write nothing into it.
#[test]
fn commands_that_change_sessions_leave_another_programs_database_alone() {
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("other.db");
    {
        let db = rusqlite::Connection::open(&file).unwrap();
        db.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
            .unwrap();
    }
    let before = std::fs::read(&file).unwrap();
    let store = format!("sqlite:{}", file.display());
    for args in [
        &["reset", "telegram:dm:1"][..],
        &["close", "telegram:dm:1"],
        &["delete", "telegram:dm:1"],
        &["prune", "--older-than", "1d"],
        &["forget", "--person", "telegram:1"],
        &["list"],
    ] {
        let output = run(&store, args);
        assert_eq!(code(&output), 4, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("holds no agent-sessions tables"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the database is as it was"
    );
}

/// `log` says on standard error what it skipped — a line that is not a transcript
/// entry, a torn last line — and still prints the rest, leaving the file as it was.
#[test]
fn log_says_which_lines_it_skipped() {
    let tree = common::openclaw_fixture();
    // The fixture's entries name their files under OpenClaw's home: here, this tree.
    let entries = tree.path().join("agents/main/sessions/sessions.json");
    let text = std::fs::read_to_string(&entries).unwrap();
    let home = tree.path().display().to_string();
    std::fs::write(&entries, text.replace("/home/u/.openclaw", &home)).unwrap();
    let file = tree
        .path()
        .join("agents/main/sessions/0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl");
    let mut lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.insert(2, "this is not json \u{1b}[31m".to_owned());
    let damaged = format!("{}\n{{\"type\":\"mess", lines.join("\n"));
    std::fs::write(&file, &damaged).unwrap();
    let store = format!("json:{}", tree.path().display());
    let output = run(&store, &["log", "main", "--no-pager"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("Hello"),
        "the rest is printed"
    );
    let warnings = stderr(&output);
    assert!(warnings.contains("is not a transcript entry"), "{warnings}");
    assert!(warnings.contains("is torn"), "{warnings}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        damaged,
        "left as it was"
    );
}

/// An empty key (a script's unset variable) names no session: refused, not taken for
/// the main session.
#[test]
fn an_empty_key_is_refused_not_taken_for_main() {
    let (_tree, _work, store) = imported();
    let before = json(&run(&store, &["--json", "show", "main"]));
    for args in [
        &["show", ""][..],
        &["log", "  ", "--no-pager"],
        &["reset", ""],
        &["close", ""],
        &["delete", "", "--force"],
    ] {
        let output = run(&store, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("the key is empty"), "{args:?}");
    }
    let after = json(&run(&store, &["--json", "show", "main"]));
    assert_eq!(before, after, "the main session is as it was");
}

#[tokio::test]
async fn read_commands_leave_an_existing_sqlite_store_unwritten() {
    let (_tree, work, store) = imported();
    let file = work.path().join("sessions.db");
    let before = std::fs::read(&file).unwrap();
    for args in [
        &["list"][..],
        &["show", "main"],
        &["stats", "--messages"],
        &["export"],
    ] {
        let output = run(&store, args);
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
    }
    assert!(
        std::fs::read(&file).unwrap() == before,
        "the database file is unchanged"
    );
    let backend = agent_sessions::store::Backend::open(&store).await.unwrap();
    let index = backend.search_index().await.unwrap();
    assert_eq!(
        index.message_count().await.unwrap(),
        0,
        "stats --messages indexed nothing into the database"
    );
}

/// The fixture with a transcript long enough to fill a pipe several times over.
fn tree_with_a_long_transcript() -> tempfile::TempDir {
    let tree = common::openclaw_fixture();
    let transcript = tree
        .path()
        .join("agents/main/sessions/0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl");
    let text = std::fs::read_to_string(&transcript).unwrap();
    let line = text.lines().nth(1).unwrap().to_owned() + "\n";
    std::fs::write(&transcript, text + &line.repeat(4000)).unwrap();
    tree
}

#[test]
fn export_into_a_closed_pipe_exits_quietly() {
    use std::io::Read;
    use std::process::Stdio;

    let tree = tree_with_a_long_transcript();
    let store = format!("json:{}", tree.path().display());
    for args in [
        &["export"][..],
        &["export", "--all-agents"],
        &["list", "--json"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
            .env_remove("AGENT_SESSIONS_STORE")
            .args(["--store", &store])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 10];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The reader is gone (like `| head -c 10`).
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    }
}

#[cfg(unix)]
#[test]
fn export_to_a_file_is_owner_only_and_never_replaces_a_link_a_device_or_the_store() {
    use std::os::unix::fs::PermissionsExt;

    let tree = tree_with_a_long_transcript();
    let store = format!("json:{}", tree.path().display());
    let work = tempfile::tempdir().unwrap();
    let victim = work.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = work.path().join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = work.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let store_file = tree.path().join("agents/main/sessions/sessions.json");
    let store_before = std::fs::read(&store_file).unwrap();
    let refused_paths = [
        link.clone(),
        fifo.clone(),
        work.path().to_path_buf(),
        store_file.clone(),
        tree.path().join("agents/main/sessions/new.json"),
    ];
    for refused in &refused_paths {
        let output = run(&store, &["export", "--output", refused.to_str().unwrap()]);
        assert_eq!(
            code(&output),
            2,
            "{}: {}",
            refused.display(),
            stderr(&output)
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&store_file).unwrap(), store_before);
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&fifo).unwrap();

    let path = work.path().join("export.json");
    std::fs::write(&path, "an older export").unwrap();
    let output = run(&store, &["export", "--output", path.to_str().unwrap()]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let document: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(document["format"], "agent-sessions-export");
    assert_eq!(document["version"], 1);
    assert_eq!(document["sessions"].as_array().unwrap().len(), 3);
    assert_eq!(
        document["transcripts"][0]["lines"]
            .as_array()
            .unwrap()
            .len(),
        4015
    );
    // Nothing else is left beside it.
    assert_eq!(common::file_names(work.path()), ["export.json", "victim"]);
    // Standard output gets the same document.
    let printed = run(&store, &["export"]);
    let streamed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(streamed, document);
}

/// A tree whose main agent has two sessions with ids starting `abcd`, one counted.
fn tree_with_similar_ids() -> tempfile::TempDir {
    let tree = tempfile::tempdir().unwrap();
    let sessions = tree.path().join("agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    std::fs::write(
        sessions.join("sessions.json"),
        r#"{
  "agent:main:telegram:dm:1": {"sessionId": "abcd1234-0000-4000-8000-000000000001",
    "updatedAt": 1770350000000, "messageCount": 1, "turnCount": 1, "label": "one"},
  "agent:main:telegram:dm:2": {"sessionId": "abcd5678-0000-4000-8000-000000000002",
    "updatedAt": 1770340000000, "messageCount": 2, "turnCount": 2}
}"#,
    )
    .unwrap();
    tree
}

#[test]
fn show_takes_the_short_id_list_prints_a_full_id_or_a_key() {
    let tree = tree_with_similar_ids();
    let store = format!("json:{}", tree.path().display());
    let listed = String::from_utf8(run(&store, &["list"]).stdout).unwrap();
    assert!(listed.contains("abcd1234 "), "{listed}");
    for name in [
        "abcd1234",
        "abcd1234-0000-4000-8000-000000000001",
        "telegram:dm:1",
        "agent:main:telegram:dm:1",
    ] {
        let shown = json(&run(&store, &["--json", "show", name]));
        assert_eq!(shown["key"], "agent:main:telegram:dm:1", "{name}");
        assert_eq!(shown["entry"]["label"], "one", "the raw entry");
    }

    let ambiguous = run(&store, &["show", "abcd"]);
    assert_eq!(code(&ambiguous), 2);
    let message = stderr(&ambiguous);
    assert!(
        message.contains("ambiguous")
            && message.contains("agent:main:telegram:dm:1")
            && message.contains("agent:main:telegram:dm:2"),
        "{message}"
    );
    assert_eq!(code(&run(&store, &["show", "ffff"])), 4);

    // For people: a table of the main fields, dates rather than epoch milliseconds,
    // counts in words that agree with their number.
    let text = String::from_utf8(run(&store, &["show", "abcd1234"]).stdout).unwrap();
    assert!(
        text.contains("abcd1234-0000-4000-8000-000000000001"),
        "{text}"
    );
    assert!(!text.contains("1770350000000"), "{text}");
    assert!(!text.contains("\"sessionId\""), "not the raw JSON: {text}");
    let local = chrono::TimeZone::timestamp_millis_opt(&chrono::Local, 1770350000000)
        .unwrap()
        .format("%Y-%m-%d %H:%M")
        .to_string();
    assert!(text.contains(&local), "{text}");
    assert!(text.contains("1 message, 1 turn\n"), "{text}");
    let two = String::from_utf8(run(&store, &["show", "abcd5678"]).stdout).unwrap();
    assert!(two.contains("2 messages, 2 turns\n"), "{two}");
}

/// The fixture with a second agent, `ops`, holding copies of main's sessions.
fn tree_with_two_agents() -> tempfile::TempDir {
    let tree = common::openclaw_fixture();
    let main = tree.path().join("agents/main/sessions");
    let ops = tree.path().join("agents/ops/sessions");
    std::fs::create_dir_all(&ops).unwrap();
    let sessions = std::fs::read_to_string(main.join("sessions.json")).unwrap();
    std::fs::write(
        ops.join("sessions.json"),
        sessions.replace("agent:main:", "agent:ops:"),
    )
    .unwrap();
    let transcript = "0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl";
    std::fs::copy(main.join(transcript), ops.join(transcript)).unwrap();
    tree
}

#[test]
fn every_command_over_many_sessions_keeps_to_the_agent_unless_all_agents() {
    let tree = tree_with_two_agents();
    let store = format!("json:{}", tree.path().display());
    let agents_of = |keys: Vec<String>| {
        let mut agents: Vec<String> = keys
            .iter()
            .map(|key| key.split(':').nth(1).unwrap().to_owned())
            .collect();
        agents.sort();
        agents.dedup();
        agents
    };
    for (flags, expected) in [
        (&[][..], vec!["main"]),
        (&["--agent", "ops"][..], vec!["ops"]),
        (&["--all-agents"][..], vec!["main", "ops"]),
    ] {
        let with = |args: &[&str]| {
            let mut all: Vec<&str> = args.to_vec();
            all.extend_from_slice(flags);
            json(&run(&store, &all))
        };
        let keys = |value: &Value, field: &str| {
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s[field].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        let mut listed = keys(&with(&["--json", "list"]), "key");
        listed.sort();
        assert_eq!(agents_of(listed), expected, "list {flags:?}");

        let stats = with(&["--json", "stats"]);
        let by_agent: Vec<&String> = stats["byAgent"].as_object().unwrap().keys().collect();
        assert_eq!(
            by_agent,
            expected.iter().collect::<Vec<_>>(),
            "stats {flags:?}"
        );
        assert_eq!(stats["sessions"], 3 * expected.len(), "stats {flags:?}");
        assert_eq!(stats["transcripts"], expected.len(), "stats {flags:?}");

        let exported = with(&["export"]);
        let mut sessions = keys(&exported["sessions"], "key");
        sessions.sort();
        assert_eq!(agents_of(sessions), expected, "export {flags:?}");
        assert_eq!(
            keys(&exported["transcripts"], "agent"),
            expected,
            "export {flags:?}"
        );

        let pruned = with(&["--json", "prune", "--older-than", "1s", "--dry-run"]);
        let removed = pruned["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect::<Vec<_>>();
        assert_eq!(agents_of(removed), expected, "prune {flags:?}");
    }
}

#[test]
fn postgres_connection_errors_name_the_server_and_the_cause_but_not_the_password() {
    let output = run("postgres://bot:hunter2@127.0.0.1:1/sessions", &["list"]);
    assert_eq!(code(&output), 1);
    let message = stderr(&output);
    for part in ["127.0.0.1", "port 1", "sessions", "bot", "refused"] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert!(!message.contains("hunter2"), "{message}");
}

#[test]
fn options_a_command_would_ignore_are_refused() {
    let (_tree, work, store) = imported();
    let other = format!("json:{}", work.path().join("copy").display());
    for args in [
        &["--json", "export"][..],
        &[
            "migrate", "--store", &store, "--from", &store, "--to", &other,
        ],
        &[
            "--agent", "ops", "migrate", "--from", &store, "--to", &other,
        ],
        &["--agent", "ops", "import", "--openclaw", "/nowhere"],
        &["--agent", "ops", "doctor"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
            .env_remove("AGENT_SESSIONS_STORE")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("not used by"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(!work.path().join("copy").exists());
    // The store from the environment is not an option given to migrate.
    let output = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env("AGENT_SESSIONS_STORE", &store)
        .args(["--json", "migrate", "--from", &store, "--to", &other])
        .output()
        .unwrap();
    assert_eq!(json(&output)["verified"], true);
}

#[cfg(unix)]
#[test]
fn a_store_is_never_copied_onto_itself() {
    let (tree, work, store) = imported();
    let file = work.path().join("sessions.db");
    let before = std::fs::read(&file).unwrap();
    let same_file = format!("sqlite:{}/./sessions.db", work.path().display());
    let refused = run_bare(&["migrate", "--from", &store, "--to", &same_file]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("same store"),
        "{}",
        stderr(&refused)
    );
    assert!(std::fs::read(&file).unwrap() == before);
    // Nor through a hard link to its file.
    let hard = work.path().join("hard.db");
    std::fs::hard_link(&file, &hard).unwrap();
    let hard_link = format!("sqlite:{}", hard.display());
    let refused = run_bare(&["migrate", "--from", &store, "--to", &hard_link]);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(std::fs::read(&file).unwrap() == before);
    assert!(!work.path().join("hard.db-wal").exists(), "nothing opened");

    // An OpenClaw tree imported into itself, named through a symlink.
    let link = work.path().join("link");
    std::os::unix::fs::symlink(tree.path(), &link).unwrap();
    let json_store = format!("json:{}", link.display());
    let sessions = tree.path().join("agents/main/sessions/sessions.json");
    let before = std::fs::read(&sessions).unwrap();
    let refused = run(
        &json_store,
        &[
            "import",
            "--openclaw",
            tree.path().join("agents").to_str().unwrap(),
        ],
    );
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("same store"),
        "{}",
        stderr(&refused)
    );
    assert!(std::fs::read(&sessions).unwrap() == before);
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn read_commands_on_postgres_create_no_schema_and_write_nothing() {
    let schema = common::TestSchema::new("cli_read_only");
    let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let schema_exists = || async {
        client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)",
                &[&schema.name],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
    };
    let url = schema.url();
    for args in [&["list"][..], &["show", "main"], &["stats"], &["export"]] {
        let output = run(&url, args);
        assert_eq!(code(&output), 4, "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(&schema.name),
            "{}",
            stderr(&output)
        );
    }
    assert!(!schema_exists().await, "no schema was created");

    // An existing store is read without a write: the message log is not indexed in it.
    let tree = common::openclaw_fixture();
    let imported = run(
        &url,
        &["import", "--openclaw", tree.path().to_str().unwrap()],
    );
    assert_eq!(code(&imported), 0, "{}", stderr(&imported));
    assert_eq!(
        json(&run(&url, &["--json", "stats", "--messages"]))["sessions"],
        3
    );
    let indexed: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {}.search_messages", schema.name),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(indexed, 0);
    schema.drop().await;
}

/// Runs `serve` with `args` and `env` (and neither `AGENT_SESSIONS_SECRET` nor
/// `AGENT_SESSIONS_STORE` from the caller), waiting at most five seconds for it to
/// exit: its exit code, `None` if it was still serving and had to be stopped, and what
/// it printed on stderr.
fn serve_briefly(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_SECRET")
        .env_remove("AGENT_SESSIONS_STORE")
        .envs(env.iter().copied())
        .args(["serve", "--store", &store])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut code = None;
    while started.elapsed() < Duration::from_secs(5) {
        if let Some(status) = child.try_wait().unwrap() {
            code = status.code();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if code.is_none() {
        child.kill().unwrap();
    }
    let output = child.wait_with_output().unwrap();
    (code, String::from_utf8_lossy(&output.stderr).into_owned())
}

/// An empty or blank secret, on the command line or in the environment, would turn
/// authentication off: `serve` refuses to start and says why.
#[test]
fn serve_refuses_an_empty_secret() {
    for (args, env) in [
        (&["--secret", ""][..], &[][..]),
        (&["--secret", " \t "][..], &[][..]),
        (&[][..], &[("AGENT_SESSIONS_SECRET", "")][..]),
        (&[][..], &[("AGENT_SESSIONS_SECRET", "   ")][..]),
    ] {
        let (code, stderr) = serve_briefly(&[&["--listen", "127.0.0.1:0"], args].concat(), env);
        refused_to_start(code, &stderr, "secret");
    }
}

/// Without a secret, every caller can read and change every session: `serve` refuses an
/// address other callers can reach unless told `--insecure-no-auth`.
#[test]
fn serve_without_a_secret_refuses_a_non_loopback_address() {
    let (code, stderr) = serve_briefly(&["--listen", "0.0.0.0:0"], &[]);
    refused_to_start(code, &stderr, "--insecure-no-auth");
}

/// `serve` exited with a failure, naming `why`, without ever serving.
fn refused_to_start(code: Option<i32>, stderr: &str, why: &str) {
    assert!(
        code.is_some_and(|code| code != 0),
        "exit {code:?}, {stderr}"
    );
    assert!(stderr.contains(why), "{stderr}");
    assert!(!stderr.contains("serving"), "{stderr}");
}

/// On loopback without a secret, `serve` starts but warns on stderr before its banner.
#[test]
fn serve_without_a_secret_on_loopback_warns() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_SECRET")
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut before_banner = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("http://") {
            break;
        }
        before_banner.push(line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let warning = before_banner
        .iter()
        .find(|line| line.contains("warning") && line.contains("secret"))
        .unwrap_or_else(|| panic!("no warning: {before_banner:?}"));
    // The port really served, not the 0 that was asked for.
    assert!(!warning.contains("127.0.0.1:0 "), "{warning}");
    assert!(warning.contains("127.0.0.1:"), "{warning}");
}

#[test]
fn the_global_session_is_addressed_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use agent_sessions::prelude::*;
        let sessions = JsonFileStore::new(dir.path());
        let global = SessionKey::parse("global").unwrap();
        sessions
            .put(&global, SessionEntry::new("g-1", 1))
            .await
            .unwrap();
    });
    let shown = run(&store, &["--json", "show", "global"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    let closed = run(&store, &["close", "global"]);
    assert_eq!(code(&closed), 0, "{}", stderr(&closed));
}

/// A connection limit of zero or a zero timeout would refuse every request: `serve`
/// refuses to start with one and names it.
#[test]
fn serve_refuses_limits_it_cannot_serve_with() {
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--header-read-timeout", "0s"),
        ("--body-read-timeout", "0s"),
        ("--request-timeout", "0s"),
    ] {
        let (code, stderr) = serve_briefly(
            &["--listen", "127.0.0.1:0", "--secret", "s3cret", flag, value],
            &[],
        );
        assert!(
            code.is_some_and(|code| code != 0),
            "{flag}: exit {code:?}, {stderr}"
        );
        let option = flag.trim_start_matches("--").replace('-', "_");
        assert!(stderr.contains(&option), "{flag}: {stderr}");
    }
}

/// `serve` closes a connection that sends half a request header once its
/// `--header-read-timeout` passes, and still answers real requests.
#[tokio::test]
async fn serve_closes_half_sent_connections_after_its_header_timeout() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--secret", "s3cret", "--header-read-timeout", "300ms"])
        .args(["--max-connections", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    let address = base.trim_start_matches("http://").to_owned();

    let mut half_sent = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream
            .write_all(b"GET /kernel/health HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .unwrap();
        half_sent.push(stream);
    }
    let health = tokio::time::timeout(
        Duration::from_secs(5),
        reqwest::get(format!("{base}/kernel/health")),
    )
    .await;
    let mut closed = Vec::new();
    for stream in &mut half_sent {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest));
        closed.push(read.await.is_ok());
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let health = health.expect("answered within five seconds").unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    assert_eq!(closed, [true; 4], "half-sent connections closed");
}

/// Starts `serve` on a free loopback port with `args` and `env` (and none of the
/// caller's `serve` variables) over `store`: the child and the base URL it printed.
fn serving(store: &str, args: &[&str], env: &[(&str, &str)]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sessions"));
    for var in SERVE_VARIABLES {
        command.env_remove(var);
    }
    let mut child = command
        .envs(env.iter().copied())
        .args(["serve", "--store", store, "--listen", "127.0.0.1:0"])
        .args(["--secret", "s3cret"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?} ({args:?}, {env:?})"))
        .to_owned();
    (child, base)
}

/// One run of `serve`: its flags, its environment, what it should do.
type ServeCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// The variables `serve` reads.
const SERVE_VARIABLES: [&str; 4] = [
    "AGENT_SESSIONS_STORE",
    "AGENT_SESSIONS_SECRET",
    "SESSION_TIMEOUT_MINUTES",
    "ENABLE_SESSION_DRIFT_CLASSIFIER",
];

/// `serve` takes the idle timeout from `SESSION_TIMEOUT_MINUTES` and the drift switch
/// from `ENABLE_SESSION_DRIFT_CLASSIFIER`, as ClawOS's session kernel does; a flag wins
/// over its variable, even over an invalid one. Each case resolves a message for a
/// sender whose session was last active 45 minutes ago.
#[tokio::test]
async fn serve_reads_its_settings_from_the_environment_and_flags_win() {
    let cases: &[ServeCase] = &[
        (&[], &[], "new"), // the default: 30 minutes
        (&[], &[("SESSION_TIMEOUT_MINUTES", "60")], "continue"),
        (&[], &[("SESSION_TIMEOUT_MINUTES", "40")], "new"),
        (&[], &[("SESSION_TIMEOUT_MINUTES", "0")], "continue"), // no timeout
        (
            &["--idle-minutes", "60"],
            &[("SESSION_TIMEOUT_MINUTES", "5")],
            "continue",
        ),
        (
            &["--idle-minutes", "5"],
            &[("SESSION_TIMEOUT_MINUTES", "60")],
            "new",
        ),
        (
            &["--idle-minutes", "60"],
            &[("SESSION_TIMEOUT_MINUTES", "abc")],
            "continue",
        ),
        (
            &[],
            &[
                ("SESSION_TIMEOUT_MINUTES", "60"),
                ("ENABLE_SESSION_DRIFT_CLASSIFIER", "false"),
            ],
            "continue",
        ),
        (
            &["--drift-classifier=false"],
            &[
                ("SESSION_TIMEOUT_MINUTES", "60"),
                ("ENABLE_SESSION_DRIFT_CLASSIFIER", "true"),
            ],
            "continue",
        ),
    ];
    for (args, env, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("json:{}", dir.path().display());
        {
            use agent_sessions::prelude::*;
            let key = SessionKey::parse("agent:ws_abc:sms:dm:+1555").unwrap();
            let now = chrono::Utc::now().timestamp_millis() as u64;
            JsonFileStore::new(dir.path())
                .put(&key, SessionEntry::new("old-1", now - 45 * 60 * 1000))
                .await
                .unwrap();
        }
        let (mut child, base) = serving(&store, args, env);
        let resolved: Result<Value, _> = async {
            reqwest::Client::new()
                .post(format!("{base}/kernel/sessions/resolve"))
                .header("x-kernel-secret", "s3cret")
                .json(&serde_json::json!({
                    "workspace_id": "ws_abc", "channel": "sms",
                    "remote_jid": "+1555", "user_message": "hello again",
                }))
                .send()
                .await?
                .json()
                .await
        }
        .await;
        child.kill().unwrap();
        child.wait().unwrap();
        let resolved = resolved.unwrap();
        assert_eq!(
            resolved["decision"], *expected,
            "{args:?} {env:?}: {resolved}"
        );
        let kept = resolved["session_id"] == "old-1";
        assert_eq!(
            kept,
            *expected == "continue",
            "{args:?} {env:?}: {resolved}"
        );
    }
}

/// An invalid setting stops `serve` before it opens anything, as bad usage (exit 2),
/// naming where the value came from: the variable, or the flag that replaced it.
#[test]
fn serve_refuses_invalid_settings_naming_their_source() {
    let cases: &[ServeCase] = &[
        (
            &[],
            &[("SESSION_TIMEOUT_MINUTES", "abc")],
            "SESSION_TIMEOUT_MINUTES",
        ),
        (
            &[],
            &[("SESSION_TIMEOUT_MINUTES", "-5")],
            "SESSION_TIMEOUT_MINUTES",
        ),
        (
            &[],
            &[("SESSION_TIMEOUT_MINUTES", "1.5")],
            "SESSION_TIMEOUT_MINUTES",
        ),
        (
            &[],
            &[("SESSION_TIMEOUT_MINUTES", "")],
            "SESSION_TIMEOUT_MINUTES",
        ),
        (
            &[],
            &[("ENABLE_SESSION_DRIFT_CLASSIFIER", "yes")],
            "ENABLE_SESSION_DRIFT_CLASSIFIER",
        ),
        (
            &[],
            &[("ENABLE_SESSION_DRIFT_CLASSIFIER", "TRUE")],
            "ENABLE_SESSION_DRIFT_CLASSIFIER",
        ),
        (
            &[],
            &[("ENABLE_SESSION_DRIFT_CLASSIFIER", "1")],
            "ENABLE_SESSION_DRIFT_CLASSIFIER",
        ),
        (
            &["--idle-minutes", "ten"],
            &[("SESSION_TIMEOUT_MINUTES", "5")],
            "--idle-minutes",
        ),
        (&["--drift-classifier", "maybe"], &[], "--drift-classifier"),
    ];
    for (args, env, named) in cases {
        let (code, stderr) = serve_briefly(&[&["--listen", "127.0.0.1:0"], *args].concat(), env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(&format!("invalid {named} ")), "{stderr}");
        assert!(!stderr.contains("serving"), "{stderr}");
        if named.starts_with("--") {
            assert!(
                !stderr.contains("SESSION"),
                "the flag, not the variable: {stderr}"
            );
        }
    }
}

/// The command has no model to classify topic drift: with the gate switched on it
/// refuses to start (exit 2) and says why, rather than serving without the gate.
#[test]
fn serve_refuses_the_drift_gate_it_has_no_classifier_for() {
    let cases: &[ServeCase] = &[
        (
            &[],
            &[("ENABLE_SESSION_DRIFT_CLASSIFIER", "true")],
            "ENABLE_SESSION_DRIFT_CLASSIFIER",
        ),
        (&["--drift-classifier"], &[], "--drift-classifier"),
        (
            &["--drift-classifier=true"],
            &[("ENABLE_SESSION_DRIFT_CLASSIFIER", "false")],
            "--drift-classifier",
        ),
    ];
    for (args, env, source) in cases {
        let (code, stderr) = serve_briefly(&[&["--listen", "127.0.0.1:0"], *args].concat(), env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        for part in [*source, "topic-drift gate", "DriftClassifier"] {
            assert!(stderr.contains(part), "{part}: {stderr}");
        }
        assert!(!stderr.contains("serving"), "{stderr}");
    }
}

/// `serve --help` names each setting's flag and the variable read without it.
#[test]
fn serve_help_names_each_flag_and_its_variable() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sessions"));
    for var in SERVE_VARIABLES {
        command.env_remove(var);
    }
    let help = command.args(["serve", "--help"]).output().unwrap();
    assert_eq!(code(&help), 0);
    let help = String::from_utf8_lossy(&help.stdout);
    for (flag, variable) in [
        ("--store", "AGENT_SESSIONS_STORE"),
        ("--secret", "AGENT_SESSIONS_SECRET"),
        ("--idle-minutes", "SESSION_TIMEOUT_MINUTES"),
        ("--drift-classifier", "ENABLE_SESSION_DRIFT_CLASSIFIER"),
    ] {
        // An option's block: its line and the description lines under it.
        let block: String = help
            .lines()
            .skip_while(|line| !line.trim_start().starts_with(flag))
            .enumerate()
            .take_while(|(i, line)| *i == 0 || !line.trim_start().starts_with('-'))
            .map(|(_, line)| line)
            .collect();
        assert!(block.starts_with("      "), "no {flag} in {help}");
        assert!(
            block.contains(&format!("[env: {variable}")),
            "{flag}: {block}"
        );
    }
}

/// `views create` and `views drop` on a SQLite store, again and again; a JSON tree, a
/// missing database and `--agent` are refused.
#[test]
fn views_are_created_and_dropped_on_a_sqlite_store() {
    let (tree, work, store) = imported();
    // (arguments, exit code, what standard output or error says)
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["views", "create"],
            0,
            "created type2_sessions, type2_sessions_history, type2_messages, clawos_sessions in sqlite:",
        ),
        (&["views", "create"], 0, "created type2_sessions"),
        (&["views", "drop"], 0, "dropped type2_sessions"),
        (&["views", "drop"], 0, "dropped type2_sessions"),
        (
            &["--agent", "ops", "views", "create"],
            2,
            "--agent is not used by views",
        ),
        (&["views", "rename"], 2, "invalid value 'rename'"),
    ];
    for (args, expected, says) in cases {
        let output = run(&store, args);
        assert_eq!(code(&output), expected, "{args:?}: {}", stderr(&output));
        let text = if expected == 0 {
            String::from_utf8_lossy(&output.stdout).into_owned()
        } else {
            stderr(&output)
        };
        assert!(text.contains(says), "{args:?}: {text}");
    }
    let created = json(&run(&store, &["--json", "views", "create"]));
    assert_eq!(created["action"], "created");
    assert_eq!(created["views"][3], "clawos_sessions");

    let json_tree = run(
        &format!("json:{}", tree.path().display()),
        &["views", "create"],
    );
    assert_eq!(code(&json_tree), 2, "{}", stderr(&json_tree));
    assert!(stderr(&json_tree).contains("views need a SQLite or PostgreSQL store"));
    let missing = work.path().join("missing.db");
    let output = run(
        &format!("sqlite:{}", missing.display()),
        &["views", "create"],
    );
    assert_eq!(code(&output), 4, "{}", stderr(&output));
    assert!(!missing.exists(), "nothing was created");
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn views_are_created_and_dropped_on_a_postgres_store() {
    let schema = common::TestSchema::new("cli_views");
    let tree = common::openclaw_fixture();
    let url = schema.url();
    let imported = run(
        &url,
        &["import", "--openclaw", tree.path().to_str().unwrap()],
    );
    assert_eq!(code(&imported), 0, "{}", stderr(&imported));
    let (rabs, clawos) = (
        format!("{}_rabs", schema.name),
        format!("{}_os", schema.name),
    );
    let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let flags = ["--rabs-schema", &rabs, "--clawos-schema", &clawos];
    let created = run(&url, &[&["views", "create"][..], &flags].concat());
    assert_eq!(code(&created), 0, "{}", stderr(&created));
    let sessions: i64 = client
        .query_one(&format!("SELECT count(*) FROM {clawos}.sessions"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(sessions, 3, "ClawOS's view shows the imported sessions");
    let dropped = run(&url, &[&["views", "drop"][..], &flags].concat());
    assert_eq!(code(&dropped), 0, "{}", stderr(&dropped));
    let views: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_views WHERE schemaname IN ($1, $2)",
            &[&rabs, &clawos],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(views, 0);
    client
        .batch_execute(&format!("DROP SCHEMA {rabs}; DROP SCHEMA {clawos}"))
        .await
        .unwrap();
    schema.drop().await;
}

/// Under a low open-files limit, strangers holding idle, half-sent connections cannot
/// keep callers with the secret out, nor make the store fail for want of descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_under_a_low_open_files_limit_keeps_serving_callers_past_idle_strangers() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;

    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no prlimit to lower the open-files limit");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    /// Kills the service however the test ends.
    struct Service(std::process::Child);
    impl Drop for Service {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Command::new("prlimit")
        .args(["--nofile=256:256", "--"])
        .arg(env!("CARGO_BIN_EXE_agent-sessions"))
        .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
        .args(["--secret", "s3cret"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _service = Service(child);
    let mut banner = String::new();
    let mut stderr = BufReader::new(stderr);
    stderr.read_line(&mut banner).unwrap();
    let base = banner
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    let address = base.trim_start_matches("http://").to_owned();

    // 300 strangers: more than the process could hold, each half a request and silent.
    let mut strangers = Vec::new();
    for _ in 0..300 {
        if let Ok(Ok(mut stream)) = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            tokio::net::TcpStream::connect(&address),
        )
        .await
        {
            let _ = stream
                .write_all(b"GET /kernel/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await;
            strangers.push(stream);
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;

    // Callers with the secret are served, within seconds, never with a 500.
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(8))
        .build()
        .unwrap();
    for n in 0..20 {
        let response = client
            .post(format!("{base}/kernel/sessions/resolve"))
            .header("x-kernel-secret", "s3cret")
            .json(&serde_json::json!({
                "workspace_id": "ws", "channel": "sms",
                "remote_jid": format!("+1555{n:04}"), "user_message": "hello",
            }))
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {n} past {} strangers: {e}", strangers.len()));
        assert_eq!(response.status(), 200, "request {n}");
    }
    drop(strangers);
}

/// A closed-sessions file with a record that does not decode and a record written
/// twice: the listing serves the rest (each once) and says what it skipped; the next
/// write keeps the record it cannot read.
#[test]
fn a_bad_closed_record_hides_only_itself() {
    let tree = common::openclaw_fixture();
    let store = format!("json:{}", tree.path().display());
    let before = json(&run(&store, &["--json", "show", "main"]));
    let old_id = before["entry"]["sessionId"].as_str().unwrap().to_owned();
    json(&run(&store, &["--json", "reset", "main"]));
    let closed_file = tree
        .path()
        .join("agents/main/sessions/sessions.closed.json");
    let mut file: Value = serde_json::from_slice(&std::fs::read(&closed_file).unwrap()).unwrap();
    let good = file["sessions"][0].clone();
    let bad = serde_json::json!({"sessionKey": "agent:main:x", "entry": {"sessionId": ["no"]}});
    file["sessions"] = serde_json::json!([bad.clone(), good.clone(), good]);
    std::fs::write(&closed_file, serde_json::to_vec(&file).unwrap()).unwrap();

    let output = run(&store, &["--json", "list", "--status", "closed"]);
    let listed = json(&output);
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["entry"]["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [old_id.as_str()], "{listed}");
    let warnings = String::from_utf8_lossy(&output.stderr);
    assert!(
        warnings.contains("sessions.closed.json") && warnings.contains("agent:main:x"),
        "{warnings}"
    );
    let paged = json(&run(
        &store,
        &["--json", "list", "--status", "closed", "--limit", "1"],
    ));
    assert_eq!(paged.as_array().unwrap().len(), 1, "{paged}");

    // Another reset rewrites the file: the record it cannot read is still there.
    json(&run(&store, &["--json", "reset", "main"]));
    let after: Value = serde_json::from_slice(&std::fs::read(&closed_file).unwrap()).unwrap();
    assert!(
        after["sessions"].as_array().unwrap().contains(&bad),
        "{after}"
    );
}

/// A JSON store with direct chats of Telegram 42 and 420 and a retention policy file.
fn people() -> (tempfile::TempDir, String) {
    let work = tempfile::tempdir().unwrap();
    let store = format!("json:{}", work.path().join("tree").display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use agent_sessions::prelude::*;
        let manager = SessionManager::connect(&store)
            .await
            .unwrap()
            .build()
            .unwrap();
        for (id, text) in [("42", "fortytwo secret"), ("420", "fourtwenty keeps this")] {
            let turn = manager
                .turn(&InboundMessage::direct("telegram", id, text))
                .await
                .unwrap();
            turn.complete("ok").await.unwrap();
        }
    });
    (work, store)
}

fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            bytes.extend(all_bytes(&entry.path()));
        } else if kind.is_file() {
            bytes.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    bytes
}

#[test]
fn forget_erases_one_person_and_reports_counts_only() {
    let (work, store) = people();
    let tree = work.path().join("tree");
    // Their copy first: one JSON document, and reading it writes nothing.
    let before = all_bytes(&tree);
    let copy = run(&store, &["export", "--person", "telegram:42"]);
    assert_eq!(code(&copy), 0, "{}", stderr(&copy));
    let document: Value = serde_json::from_slice(&copy.stdout).unwrap();
    assert_eq!(document["sessions"].as_array().unwrap().len(), 1);
    assert!(String::from_utf8_lossy(&copy.stdout).contains("fortytwo secret"));
    assert!(!String::from_utf8_lossy(&copy.stdout).contains("fourtwenty"));
    assert_eq!(all_bytes(&tree), before, "export --person writes nothing");

    let report = json(&run(
        &store,
        &["--json", "forget", "--person", "telegram:42"],
    ));
    assert_eq!(report["sessions"], 1);
    assert!(
        !report.to_string().contains("42\""),
        "counts only: {report}"
    );
    let left = String::from_utf8_lossy(&all_bytes(&tree)).into_owned();
    assert!(!left.contains("fortytwo"), "nothing of theirs is left");
    assert!(left.contains("fourtwenty keeps this"), "420 stays");

    // Refused with exit code 2, nothing erased: a channel alone, no id, not an id, a
    // control character, --agent (an erase reaches every agent), a workspace folder
    // that is not there.
    let before = all_bytes(&tree);
    for args in [
        vec!["forget", "--person", "telegram"],
        vec!["forget", "--person", "telegram:"],
        vec!["forget", "--person", ":42"],
        vec!["forget", "--person", "a\u{7}b"],
        vec!["--agent", "main", "forget", "--person", "telegram:420"],
        vec![
            "forget",
            "--person",
            "telegram:420",
            "--workspaces",
            "/nonexistent",
        ],
    ] {
        let output = run(&store, &args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
    }
    assert_eq!(all_bytes(&tree), before);
}

#[test]
fn prune_retention_reads_a_policy_file_and_refuses_a_bad_one() {
    let (work, store) = people();
    let policy = |name: &str, text: &str| {
        let path = work.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let nothing_yet = policy(
        "ok.json",
        r#"{"rules":[{"channel":"telegram","transcripts":"30d"}]}"#,
    );
    let report = json(&run(
        &store,
        &["--json", "prune", "--retention", &nothing_yet],
    ));
    assert_eq!(report["sessions"], 0, "nothing is a month old");
    for (name, text) in [
        ("zero.json", r#"{"rules":[{"transcripts":"0d"}]}"#),
        ("seconds.json", r#"{"rules":[{"transcripts":"30s"}]}"#),
        ("typo.json", r#"{"rules":[{"chanel":"sms"}]}"#),
        (
            "agent.json",
            r#"{"rules":[{"agent":"../x","transcripts":"1d"}]}"#,
        ),
    ] {
        let output = run(&store, &["prune", "--retention", &policy(name, text)]);
        assert_eq!(code(&output), 2, "{name}: {}", stderr(&output));
    }
    let missing = work.path().join("missing.json");
    let output = run(&store, &["prune", "--retention", missing.to_str().unwrap()]);
    assert_eq!(code(&output), 2);
    let sessions = json(&run(&store, &["--json", "list"]));
    assert_eq!(
        sessions.as_array().map(Vec::len),
        Some(2),
        "nothing was removed"
    );
}

/// An `export --person --output` killed midway leaves nothing of the person behind:
/// the document is written to a file without a name until it is whole, so a SIGKILL
/// at any point leaves the destination's directory as it was (or holding the finished
/// copy). A leftover under the staged name from a writer that is gone (an older
/// version, a system without unnamed files) is removed by the next export there.
#[test]
fn a_killed_export_leaves_no_copy_of_the_person_behind() {
    let (work, store) = people();
    // A long conversation, so the export takes a while.
    {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            use agent_sessions::prelude::*;
            let manager = SessionManager::connect(&store)
                .await
                .unwrap()
                .build()
                .unwrap();
            let long = "fortytwo secret ".repeat(4_000);
            for _ in 0..200 {
                let turn = manager
                    .turn(&InboundMessage::direct("telegram", "42", &long))
                    .await
                    .unwrap();
                turn.complete("ok").await.unwrap();
            }
        });
    }
    let out_dir = work.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let destination = out_dir.join("jane.json");
    let leftover = out_dir.join(".jane.json.export-999999999-1.tmp");
    std::fs::write(&leftover, "fortytwo secret from a killed export").unwrap();
    for delay in [5u64, 20, 60, 150] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
            .env_remove("AGENT_SESSIONS_STORE")
            .args(["--store", &store, "export", "--person", "telegram:42"])
            .arg("--output")
            .arg(&destination)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();
        let names: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != "jane.json" && !leftover.ends_with(name))
            .collect();
        assert!(names.is_empty(), "killed after {delay} ms, left {names:?}");
        if destination.exists() {
            // Whole, or not there at all.
            let copy: Value = serde_json::from_slice(&std::fs::read(&destination).unwrap())
                .expect("the destination is a whole document");
            assert!(copy["sessions"].is_array());
        }
    }
    let done = run(
        &store,
        &[
            "export",
            "--person",
            "telegram:42",
            "--output",
            destination.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&done), 0, "{}", stderr(&done));
    assert!(serde_json::from_slice::<Value>(&std::fs::read(&destination).unwrap()).is_ok());
    assert!(!leftover.exists(), "a dead writer's leftover is removed");
    let names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["jane.json"]);
}

/// `migrate` and `import --openclaw` open their source read-only, and still carry its
/// pending group chatter, remembered message ids and queued system events — where the
/// command used to copy none of them and say "verified".
#[test]
fn migrate_carries_pending_chatter_and_system_events() {
    let work = tempfile::tempdir().unwrap();
    let source = format!("json:{}", work.path().join("tree").display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use agent_sessions::prelude::*;
        let manager = SessionManager::connect(&source)
            .await
            .unwrap()
            .build()
            .unwrap();
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", "hi"))
            .await
            .unwrap();
        let key = turn.key().clone();
        turn.complete("hello").await.unwrap();
        manager
            .session(&key)
            .enqueue_system_event("Model switched.")
            .await
            .unwrap();
        for (n, sender) in ["+15550001", "+15550002"].iter().enumerate() {
            let chatter = InboundMessage::group("whatsapp", "1203@g.us", *sender, "lunch?")
                .with_message_id(format!("g{n}"));
            let turn = manager.turn(&chatter).await.unwrap();
            assert_eq!(turn.action(), &TurnAction::StaySilent);
        }
    });
    for (verb, from) in [("migrate", source.clone()), ("import", source.clone())] {
        let target = format!(
            "sqlite:{}",
            work.path().join(format!("{verb}.db")).display()
        );
        let output = if verb == "migrate" {
            run_bare(&["--json", "migrate", "--from", &from, "--to", &target])
        } else {
            let tree = work.path().join("tree");
            run(
                &target,
                &["--json", "import", "--openclaw", tree.to_str().unwrap()],
            )
        };
        let report = json(&output);
        assert_eq!(report["verified"], true, "{verb}: {report}");
        assert_eq!(report["chatterGroupsCopied"], 1, "{verb}: {report}");
        assert_eq!(report["systemEventQueuesCopied"], 1, "{verb}: {report}");
        assert_eq!(report["source"]["chatterGroups"], 1, "{verb}: {report}");
        runtime.block_on(async {
            use agent_sessions::prelude::*;
            let copy = SessionManager::connect(&target)
                .await
                .unwrap()
                .build()
                .unwrap();
            let again = InboundMessage::group("whatsapp", "1203@g.us", "+15550001", "lunch?")
                .with_message_id("g0");
            assert_eq!(
                copy.turn(&again).await.unwrap().action(),
                &TurnAction::Duplicate,
                "{verb}: chatter delivered again to the copy is a duplicate there"
            );
        });
    }
}

/// A session whose id cannot name a file (`../../../../etc/x`, planted in an OpenClaw
/// tree) is named as refused and the migration goes on with the rest — where it used to
/// stop after the first session with nothing but the error.
#[test]
fn migrate_names_a_hostile_session_id_and_copies_the_rest() {
    let work = tempfile::tempdir().unwrap();
    let sessions = work.path().join("tree/agents/main/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let mut store = serde_json::Map::new();
    store.insert(
        "agent:main:main".into(),
        serde_json::json!({"sessionId": "../../../../etc/x", "updatedAt": 1_700_000_000_000u64}),
    );
    for n in 0..5 {
        store.insert(
            format!("agent:main:telegram:direct:4{n}"),
            serde_json::json!({
                "sessionId": format!("6f9619ff-8b86-d011-b42d-00c04fc964f{n}"),
                "updatedAt": 1_700_000_000_001u64 + n,
            }),
        );
    }
    std::fs::write(
        sessions.join("sessions.json"),
        serde_json::to_vec(&store).unwrap(),
    )
    .unwrap();
    let from = format!("json:{}", work.path().join("tree").display());
    let to = format!("sqlite:{}", work.path().join("copy.db").display());
    let output = run_bare(&["--json", "migrate", "--from", &from, "--to", &to]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    assert_eq!(code(&output), 3, "{report}");
    assert_eq!(report["verified"], false, "{report}");
    assert_eq!(report["sessionsCopied"], 5, "{report}");
    let refused = report["unreadable"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{report}");
    assert_eq!(refused[0]["key"], "agent:main:main", "{report}");
    assert!(stderr(&output).contains("refused"), "{}", stderr(&output));
    assert!(!std::path::Path::new("/etc/x.jsonl").exists());
}

/// `keys` over a sealed store: a master key generated, the directory's status, the
/// master key replaced, the data keys replaced and the replaced ones retired — the bot
/// still reading every line afterwards.
#[tokio::test]
async fn keys_generate_show_and_replace_the_master_key_and_the_data_keys() {
    use agent_sessions::prelude::*;
    use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};

    let work = tempfile::tempdir().unwrap();
    let store = format!("json:{}", work.path().join("state").display());
    let dir = work.path().join("keys");
    let dir_arg = dir.to_str().unwrap();
    let keys_cmd = |store: Option<&str>, env: &[(&str, &str)], args: &[&str]| -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sessions"));
        command
            .env_remove("AGENT_SESSIONS_STORE")
            .env_remove("AGENT_SESSIONS_KEYS")
            .env_remove("AGENT_SESSIONS_MASTER_KEY")
            .env_remove("AGENT_SESSIONS_PREVIOUS_MASTER_KEY")
            .envs(env.iter().copied());
        if let Some(store) = store {
            command.args(["--store", store]);
        }
        command.args(args).output().expect("the binary runs")
    };

    let generated = json(&keys_cmd(None, &[], &["--json", "keys", "generate"]));
    let old = generated["masterKey"].as_str().unwrap().to_owned();
    let master = MasterKey::parse(&old).unwrap();

    // The bot writes a sealed store.
    let open = |master: MasterKey| async {
        let keys = KeyFiles::open(&dir, master).unwrap();
        SessionManager::connect(&store)
            .await
            .unwrap()
            .encryption(keys)
            .build()
            .unwrap()
    };
    let manager = open(master.clone()).await;
    for peer in ["42", "43"] {
        let said = format!("my PIN is 47{peer}");
        let turn = manager
            .turn(&InboundMessage::direct("telegram", peer, &said))
            .await
            .unwrap();
        turn.complete("Noted.").await.unwrap();
    }

    let with_old = [("AGENT_SESSIONS_MASTER_KEY", old.as_str())];
    let status = json(&keys_cmd(
        None,
        &with_old,
        &["--json", "keys", "status", "--dir", dir_arg],
    ));
    assert_eq!(status["masterKey"], master.fingerprint());
    let data_keys = status["dataKeys"].as_u64().unwrap();
    assert!(data_keys >= 4, "a key per person and per session: {status}");
    assert_eq!(status["underMasterKey"], data_keys);

    // The data keys replaced: every owner gets one more, its lines sealed anew.
    let rotated = json(&keys_cmd(
        Some(&store),
        &with_old,
        &["--json", "keys", "rotate-data", "--dir", dir_arg],
    ));
    assert_eq!(rotated["done"], "rotated");
    assert!(rotated["keys"].as_u64().unwrap() >= 4, "{rotated}");
    assert!(rotated["lines"].as_u64().unwrap() >= 4, "{rotated}");
    assert_eq!(rotated["left"], 0);
    let retired = json(&keys_cmd(
        Some(&store),
        &with_old,
        &["--json", "keys", "retire", "--dir", dir_arg],
    ));
    assert_eq!(retired["done"], "retired");
    assert_eq!(retired["keys"], rotated["keys"], "each replaced key let go");
    assert_eq!(retired["left"], 0);

    // The master key replaced.
    let new = json(&keys_cmd(None, &[], &["--json", "keys", "generate"]));
    let new = new["masterKey"].as_str().unwrap().to_owned();
    let both = [
        ("AGENT_SESSIONS_MASTER_KEY", new.as_str()),
        ("AGENT_SESSIONS_PREVIOUS_MASTER_KEY", old.as_str()),
    ];
    let replaced = json(&keys_cmd(
        None,
        &both,
        &["--json", "keys", "rotate", "--dir", dir_arg],
    ));
    assert_eq!(replaced["underMasterKey"], replaced["dataKeys"]);
    assert_eq!(replaced["sealedAnew"], replaced["dataKeys"], "{replaced}");
    let status = json(&keys_cmd(
        None,
        &[("AGENT_SESSIONS_MASTER_KEY", new.as_str())],
        &["--json", "keys", "status", "--dir", dir_arg],
    ));
    assert_eq!(status["underMasterKey"], status["dataKeys"]);
    // The old master key no longer opens the directory.
    let refused = keys_cmd(None, &with_old, &["keys", "status", "--dir", dir_arg]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));

    // The bot, with the new master key, still reads what it was told.
    let manager = open(MasterKey::parse(&new).unwrap()).await;
    let turn = manager
        .turn(&InboundMessage::direct("telegram", "42", "what was it?"))
        .await
        .unwrap();
    let seen = turn.messages().await.unwrap();
    assert!(seen.iter().any(|m| m.content.contains("4742")), "{seen:?}");
    turn.complete("It was 4742.").await.unwrap();
    drop(manager);

    // Refusals: no directory, --agent, and a plain store's data to rotate.
    let with_new = [("AGENT_SESSIONS_MASTER_KEY", new.as_str())];
    let missing = keys_cmd(None, &with_new, &["keys", "status"]);
    assert_eq!(code(&missing), 2, "{}", stderr(&missing));
    let agent = keys_cmd(
        Some(&store),
        &with_new,
        &["--agent", "ops", "keys", "retire", "--dir", dir_arg],
    );
    assert_eq!(code(&agent), 2, "{}", stderr(&agent));
    assert!(stderr(&agent).contains("--agent"), "{}", stderr(&agent));
    let nowhere = format!("json:{}", work.path().join("none").display());
    let no_store = keys_cmd(
        Some(&nowhere),
        &with_new,
        &["keys", "rotate-data", "--dir", dir_arg],
    );
    assert_eq!(code(&no_store), 4, "{}", stderr(&no_store));
    assert!(!work.path().join("none").exists(), "nothing created");
    // Nor is an empty key directory made a key directory by it.
    let empty = work.path().join("empty-keys");
    std::fs::create_dir(&empty).unwrap();
    let no_store = keys_cmd(
        Some(&nowhere),
        &with_new,
        &["keys", "retire", "--dir", empty.to_str().unwrap()],
    );
    assert_eq!(code(&no_store), 4, "{}", stderr(&no_store));
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    // A directory that is not a key directory is not made one by a look at it.
    let other = work.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("readme.txt"), "hi").unwrap();
    let looked = keys_cmd(
        None,
        &with_new,
        &["keys", "status", "--dir", other.to_str().unwrap()],
    );
    assert_eq!(code(&looked), 4, "{}", stderr(&looked));
    assert!(
        stderr(&looked).contains("not a key directory"),
        "{}",
        stderr(&looked)
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);

    // A person's copy of a sealed store: refused without its keys (it would show none
    // of their words), written with them.
    let export = |extra: &[&str]| {
        let mut args = vec!["export", "--person", "telegram:43"];
        args.extend_from_slice(extra);
        keys_cmd(Some(&store), &with_new, &args)
    };
    let refused = export(&[]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--keys"), "{}", stderr(&refused));
    let copy = export(&["--keys", dir_arg]);
    assert!(copy.status.success(), "{}", stderr(&copy));
    assert!(String::from_utf8_lossy(&copy.stdout).contains("my PIN is 4743"));
    let whole = keys_cmd(Some(&store), &with_new, &["export", "--keys", dir_arg]);
    assert_eq!(code(&whole), 2, "{}", stderr(&whole));

    // Erasing a person of a sealed store: refused without its keys (her backups would
    // still open), done with them, her keys destroyed.
    let forget = |env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec!["--json", "forget", "--person", "telegram:42"];
        args.extend_from_slice(extra);
        keys_cmd(Some(&store), env, &args)
    };
    let refused = forget(&with_new, &[]);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--keys"), "{}", stderr(&refused));
    let erased = json(&forget(&with_new, &["--keys", dir_arg]));
    assert!(erased["dataKeys"].as_u64().unwrap() >= 1, "{erased}");
    let manager = open(MasterKey::parse(&new).unwrap()).await;
    for (peer, kept) in [("42", false), ("43", true)] {
        let turn = manager
            .turn(&InboundMessage::direct("telegram", peer, "and my PIN?"))
            .await
            .unwrap();
        let seen: Vec<String> = turn
            .messages()
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect();
        let pin = format!("my PIN is 47{peer}");
        assert_eq!(
            seen.iter().any(|m| m.contains(&pin)),
            kept,
            "{peer}: {seen:?}"
        );
        turn.complete("ok").await.unwrap();
    }
}

/// `migrate --seal`: a plain store's copy is sealed under a new key directory — none of
/// what people wrote is left plain in the copy's files, the bot reads it with the keys,
/// and the source is left as it was. A folder of other files is not made a key
/// directory, and a sealed store is not sealed again.
#[tokio::test]
async fn migrate_seal_copies_a_plain_store_sealed_and_the_bot_reads_it_with_its_keys() {
    use agent_sessions::prelude::*;
    use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};

    let work = tempfile::tempdir().unwrap();
    let plain = format!("json:{}", work.path().join("plain").display());
    let sealed_db = work.path().join("sealed.db");
    let sealed = format!("sqlite:{}", sealed_db.display());
    let dir = work.path().join("keys");
    let manager = SessionManager::connect(&plain)
        .await
        .unwrap()
        .build()
        .unwrap();
    for peer in ["42", "43"] {
        let said = format!("my PIN is 58{peer}");
        let turn = manager
            .turn(&InboundMessage::direct("telegram", peer, &said))
            .await
            .unwrap();
        turn.complete(format!("Noted, 58{peer}-reply."))
            .await
            .unwrap();
    }
    drop(manager);
    let master = MasterKey::generate().unwrap();
    let with_key = [("AGENT_SESSIONS_MASTER_KEY", master.to_base64())];
    let migrate = |to: &str, seal: &Path, env: &[(&str, String)]| {
        Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
            .env_remove("AGENT_SESSIONS_STORE")
            .env_remove("AGENT_SESSIONS_MASTER_KEY")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .args(["--json", "migrate", "--from", &plain, "--to", to, "--seal"])
            .arg(seal)
            .output()
            .expect("the binary runs")
    };

    let report = json(&migrate(&sealed, &dir, &with_key));
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["sessionsCopied"], 2, "{report}");
    // Nothing either person or the bot wrote is plain in the copy's files.
    for file in std::fs::read_dir(work.path()).unwrap() {
        let path = file.unwrap().path();
        if !path.to_string_lossy().contains("sealed.db") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        for plain_text in ["my PIN is", "5842", "5843-reply"] {
            assert!(
                !text.contains(plain_text),
                "{plain_text} in {}",
                path.display()
            );
        }
    }
    // The bot, given the keys, reads her conversation; the source is as it was.
    let manager = SessionManager::connect(&sealed)
        .await
        .unwrap()
        .encryption(KeyFiles::open(&dir, master.clone()).unwrap())
        .build()
        .unwrap();
    let turn = manager
        .turn(&InboundMessage::direct("telegram", "42", "what was it?"))
        .await
        .unwrap();
    let seen = turn.messages().await.unwrap();
    assert!(
        seen.iter().any(|m| m.content.contains("my PIN is 5842")),
        "{seen:?}"
    );
    let key = turn.key().to_string();
    turn.complete("5842.").await.unwrap();
    drop(manager);
    // An operator reads it with the keys, and sees sealed values without them.
    let read = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
            .env_remove("AGENT_SESSIONS_STORE")
            .env("AGENT_SESSIONS_MASTER_KEY", master.to_base64())
            .args(["--store", &sealed])
            .args(args)
            .output()
            .expect("the binary runs")
    };
    let keys_arg = ["--keys", dir.to_str().unwrap()];
    let log = read(&[&["log", &key, "--no-pager"][..], &keys_arg].concat());
    assert!(log.status.success(), "{}", stderr(&log));
    let printed = String::from_utf8_lossy(&log.stdout);
    assert!(printed.contains("my PIN is 5842"), "{printed}");
    assert!(printed.contains("5842-reply"), "{printed}");
    let sealed_log = read(&["log", &key, "--no-pager"]);
    assert!(!String::from_utf8_lossy(&sealed_log.stdout).contains("my PIN is"));
    let shown = json(&read(&[&["--json", "show", &key][..], &keys_arg].concat()));
    let unopened = json(&read(&["--json", "show", &key]));
    assert_ne!(shown, unopened, "the entry's sealed fields are opened");
    assert!(!unopened.to_string().contains("5842"), "{unopened}");
    let source = run(&plain, &["export"]);
    assert!(
        String::from_utf8_lossy(&source.stdout).contains("my PIN is 5842"),
        "{} {}",
        String::from_utf8_lossy(&source.stdout),
        stderr(&source)
    );

    // Refused: a folder of other files as the key directory (left as it was), no
    // master key, and a sealed store as the source.
    let notes = work.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "hi").unwrap();
    let elsewhere = format!("sqlite:{}", work.path().join("other.db").display());
    let refused = migrate(&elsewhere, &notes, &with_key);
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("not a key directory"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read_dir(&notes).unwrap().count(), 1);
    let no_key = migrate(&elsewhere, &work.path().join("keys2"), &[]);
    assert_eq!(code(&no_key), 1, "{}", stderr(&no_key));
    assert!(
        stderr(&no_key).contains("AGENT_SESSIONS_MASTER_KEY"),
        "{}",
        stderr(&no_key)
    );
    let again = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .env("AGENT_SESSIONS_MASTER_KEY", master.to_base64())
        .args(["migrate", "--from", &sealed, "--to", &elsewhere, "--seal"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    assert!(
        stderr(&again).contains("sealed already"),
        "{}",
        stderr(&again)
    );
}

/// `serve --keys` serves a sealed store: a turn recorded over HTTP is sealed with the
/// bot's keys (none of its words in the store's files) and reads back with them;
/// without the keys, a sealed session's turn is refused and nothing is written.
#[tokio::test]
async fn serve_with_keys_seals_the_turns_it_records_and_without_them_refuses_a_sealed_session() {
    use agent_sessions::prelude::*;
    use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let master = MasterKey::generate().unwrap();
    // A sealed store, as the bot wrote it.
    let bot = SessionManager::connect(&store)
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .encryption(KeyFiles::open(keys.path(), master.clone()).unwrap())
        .build()
        .unwrap();
    let message = InboundMessage::direct("sms", "+1555", "my locker is 4471").with_agent("ws_abc");
    let turn = bot.turn(&message).await.unwrap();
    turn.complete("Noted.").await.unwrap();
    drop(bot);

    let serve = |with_keys: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sessions"));
        command
            .env_remove("AGENT_SESSIONS_MASTER_KEY")
            .args(["serve", "--store", &store, "--listen", "127.0.0.1:0"])
            .args(["--secret", "s3cret"])
            .stderr(Stdio::piped());
        if with_keys {
            command
                .arg("--keys")
                .arg(keys.path())
                .env("AGENT_SESSIONS_MASTER_KEY", master.to_base64());
        }
        let mut child = command.spawn().unwrap();
        let mut banner = String::new();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        while !banner.contains("http://") {
            banner.clear();
            assert!(
                stderr.read_line(&mut banner).unwrap() > 0,
                "serve printed no address"
            );
        }
        let base = banner
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap()
            .to_owned();
        (child, base)
    };
    let client = reqwest::Client::new();
    let resolve = |base: &str, said: &str| {
        client
            .post(format!("{base}/kernel/sessions/resolve"))
            .header("x-kernel-secret", "s3cret")
            .json(&serde_json::json!({
                "workspace_id": "ws_abc", "channel": "sms",
                "remote_jid": "+1555", "user_message": said,
            }))
            .send()
    };

    let (mut child, base) = serve(true);
    let resolved = resolve(&base, "and my pin is 9031").await.unwrap();
    assert_eq!(resolved.status(), 200);
    let resolved: Value = resolved.json().await.unwrap();
    assert_eq!(resolved["decision"], "continue", "{resolved}");
    let id = resolved["session_id"].as_str().unwrap().to_owned();
    let recorded = client
        .patch(format!("{base}/kernel/sessions/{id}"))
        .header("x-kernel-secret", "s3cret")
        .json(&serde_json::json!({
            "user_message": "and my pin is 9031",
            "assistant_response": "Kept safe, 9031-reply.",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(recorded.status(), 200, "{}", recorded.text().await.unwrap());
    child.kill().unwrap();
    child.wait().unwrap();

    let files = || {
        let mut all = Vec::new();
        let mut dirs = vec![dir.path().to_path_buf()];
        while let Some(next) = dirs.pop() {
            for found in std::fs::read_dir(next).unwrap() {
                let path = found.unwrap().path();
                match path.is_dir() {
                    true => dirs.push(path),
                    false => all.push((path.clone(), std::fs::read(&path).unwrap())),
                }
            }
        }
        all
    };
    for (path, bytes) in files() {
        let text = String::from_utf8_lossy(&bytes);
        for word in ["4471", "9031", "Kept safe"] {
            assert!(!text.contains(word), "{word} in {}", path.display());
        }
    }
    // The bot reads what `serve` recorded (the exchange goes into the session's
    // context summary, a sealed field).
    let show = |with_keys: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-sessions"));
        command.env_remove("AGENT_SESSIONS_MASTER_KEY").args([
            "--store",
            &store,
            "--agent",
            "ws_abc",
            "--json",
            "show",
            "sms:dm:+1555",
        ]);
        if with_keys {
            command
                .arg("--keys")
                .arg(keys.path())
                .env("AGENT_SESSIONS_MASTER_KEY", master.to_base64());
        }
        json(&command.output().unwrap()).to_string()
    };
    let opened = show(true);
    assert!(opened.contains("and my pin is 9031"), "{opened}");
    assert!(!show(false).contains("9031"));

    // Without the keys: refused, nothing written.
    let before = files();
    let (mut child, base) = serve(false);
    let refused = resolve(&base, "a plain word 7777").await.unwrap();
    let status = refused.status();
    let body = refused.text().await.unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!status.is_success(), "{status}: {body}");
    assert_eq!(files(), before, "nothing written without the keys");
}
