//! The `agent-sessions` command line, run as a user would.

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
        text.contains("agent:main:main") && text.contains("1 session(s)"),
        "{text}"
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

    // Left: the reset main session (active now) and the old subagent session.
    let dry = json(&run(
        &store,
        &["--json", "prune", "--older-than", "30d", "--dry-run"],
    ));
    assert_eq!(
        dry["removed"],
        serde_json::json!(["agent:main:subagent:9b2f6c1e-5d4a-4c3b-8a7e-1f0e2d3c4b5a"])
    );
    assert_eq!(json(&run(&store, &["--json", "stats"]))["sessions"], 2);
    let kept = json(&run(
        &store,
        &["--json", "prune", "--older-than", "1s", "--keep", "1"],
    ));
    assert_eq!(
        kept["removed"].as_array().unwrap().len(),
        1,
        "the newest is kept"
    );
    let stats = json(&run(&store, &["--json", "stats"]));
    assert_eq!(stats["sessions"], 1);
    assert_eq!(
        stats["byStatus"]["closed"], 1,
        "main, closed above, is the one kept"
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
    let report = json(&run(
        &store,
        &["--json", "migrate", "--from", &store, "--to", &to],
    ));
    assert_eq!(report["verified"], true);
    assert!(Path::new(&back)
        .join("agents/main/sessions/sessions.json")
        .is_file());
    assert!(back
        .join("agents/main/sessions/0f5d59ee-034e-47d9-ac97-d383e6c022b8.jsonl")
        .is_file());
    // Running it again copies nothing and still verifies.
    let again = json(&run(
        &store,
        &["--json", "migrate", "--from", &store, "--to", &to],
    ));
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
    let conflicted = run(&target, &["migrate", "--from", &store, "--to", &target]);
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
    // The fixture's transcript paths point at /home/u: reported as missing.
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
async fn stats_with_messages_categorises_the_log_and_counts_it() {
    use agent_sessions::manager::LogMessage;
    use agent_sessions::prelude::*;

    let dir = tempfile::tempdir().unwrap();
    let store = format!("json:{}", dir.path().display());
    let manager = SessionManager::connect(&store)
        .await
        .unwrap()
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .build();
    for (sender, question, answer) in [
        ("+15550100", "When is my shift on Thursday?", "9am."),
        ("+15550100", "Can I swap my roster?", "Swap requested."),
        ("+15550101", "My payslip is wrong", "Raised with payroll."),
    ] {
        let message = InboundMessage::direct("sms", sender, question);
        let resolution = manager.resolve(&message).await.unwrap();
        manager
            .log_message(&resolution.key, LogMessage::from_inbound(&message))
            .await
            .unwrap();
        manager
            .log_message(
                &resolution.key,
                LogMessage::outbound(answer).on_channel("sms"),
            )
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
    // The categories are kept (for a JSON tree, beside it): a second run has nothing new.
    assert!(dir.path().join("search/messages.json").exists());
    let again = json(&run(&store, &["stats", "--messages", "--json"]));
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
    // --window-days needs --messages.
    assert_eq!(code(&run(&store, &["stats", "--window-days", "3"])), 2);
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
        assert!(
            code.is_some_and(|code| code != 0),
            "{args:?} {env:?}: exit {code:?}, {stderr}"
        );
        assert!(stderr.contains("secret"), "{args:?} {env:?}: {stderr}");
        assert!(!stderr.contains("serving"), "{args:?} {env:?}: {stderr}");
    }
}

/// Without a secret, every caller can read and change every session: `serve` refuses an
/// address other callers can reach unless told `--insecure-no-auth`.
#[test]
fn serve_without_a_secret_refuses_a_non_loopback_address() {
    let (code, stderr) = serve_briefly(&["--listen", "0.0.0.0:0"], &[]);
    assert!(
        code.is_some_and(|code| code != 0),
        "exit {code:?}, {stderr}"
    );
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
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
    assert!(
        before_banner
            .iter()
            .any(|line| line.contains("warning") && line.contains("secret")),
        "{before_banner:?}"
    );
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
