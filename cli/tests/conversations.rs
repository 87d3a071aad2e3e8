//! `log` and `follow`: an operator reads what the user wrote and what was answered, and
//! why a session started, on every backend — including lines another process writes
//! while `follow` runs, across a reset.

// The library's test helpers (PostgreSQL schemas), shared with this crate.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use agent_sessions::prelude::*;
use serde_json::Value;

fn run(store: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .env_remove("PAGER")
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("each --json line is JSON"))
        .collect()
}

async fn manager(url: &str) -> SessionManager {
    SessionManager::connect(url).await.unwrap().build().unwrap()
}

fn dm(text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text)
}

/// A conversation of two sessions — the second started by `/new` — and a stranger's.
async fn two_sessions(url: &str) -> SessionKey {
    let manager = manager(url).await;
    for (text, reply) in [
        ("when is my shift?", "Thursday at 9."),
        // A message crafted to clear the operator's screen and recolour it.
        ("\u{1b}[2J\u{1b}[31mgotcha", "I can't help with that."),
        ("/new", "(not sent: the reset answers itself)"),
        ("and tomorrow?", "Friday off."),
    ] {
        let turn = manager.turn(&dm(text)).await.unwrap();
        turn.complete(reply).await.unwrap();
    }
    let stranger = manager
        .turn(&InboundMessage::direct(
            "telegram",
            "77",
            "a stranger's secret",
        ))
        .await
        .unwrap();
    stranger.complete("noted").await.unwrap();
    manager.key_for(&dm("x")).unwrap()
}

async fn log_reads_a_conversation_and_why_each_session_started(url: &str) {
    let key = two_sessions(url).await;
    let key = key.as_str();

    // The current session: its heading says it began with a reset.
    let current = stdout(&run(url, &["log", key]));
    assert!(current.contains("reset: /new"), "{current}");
    assert!(current.contains("and tomorrow?"), "{current}");
    assert!(current.contains("Friday off."), "{current}");
    assert!(!current.contains("when is my shift?"), "{current}");

    // --all: both sessions, oldest first, each line once; no escape sequence reaches
    // the terminal, and nothing of the stranger's.
    let all = stdout(&run(url, &["log", key, "--all"]));
    let order = [
        "the key's first session",
        "when is my shift?",
        "Thursday at 9.",
        "I can't help with that.",
        "reset: /new",
        "and tomorrow?",
        "Friday off.",
    ];
    let mut from = 0;
    for text in order {
        let at = all[from..]
            .find(text)
            .unwrap_or_else(|| panic!("{text:?} after byte {from} in:\n{all}"));
        from += at + text.len();
    }
    assert!(!all.contains('\u{1b}'), "{all:?}");
    assert!(all.contains("\\u{1b}[2J\\u{1b}[31mgotcha"), "{all}");
    assert!(!all.contains("a stranger's secret"));

    // --json: one object a line, sessions then their lines.
    let lines = json_lines(&stdout(&run(url, &["--json", "log", key, "--all"])));
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "session").count(), 2);
    let reasons: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "session")
        .map(|l| l["startReason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["no_session", "explicit_reset"]);
    let said: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["type"] == "line")
        .map(|l| (l["who"].as_str().unwrap(), l["text"].as_str().unwrap()))
        .collect();
    assert_eq!(
        said,
        [
            ("user", "when is my shift?"),
            ("assistant", "Thursday at 9."),
            ("user", "\u{1b}[2J\u{1b}[31mgotcha"),
            ("assistant", "I can't help with that."),
            // A bare `/new` is answered by the reset's acknowledgement in the new
            // session, not sent to the model.
            ("assistant", "New session started."),
            ("user", "and tomorrow?"),
            ("assistant", "Friday off."),
        ],
        "JSON keeps the text as written"
    );

    // A session id (or its beginning) names the same conversation; an unknown one is
    // exit code 4.
    let first = lines[0]["session"].as_str().unwrap();
    let by_id = stdout(&run(url, &["log", &first[..8]]));
    assert!(by_id.contains("when is my shift?"), "{by_id}");
    let missing = run(url, &["log", "telegram:dm:nobody"]);
    assert_eq!(missing.status.code(), Some(4));
}

async fn follow_continues_across_a_reset_made_by_another_process(url: &str) {
    let manager = manager(url).await;
    let key = {
        let turn = manager.turn(&dm("before following")).await.unwrap();
        let key = turn.key().clone();
        turn.complete("ok").await.unwrap();
        key
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .args(["--store", url, "--json", "follow", key.as_str(), "-n", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> Value {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("follow prints the next line");
        serde_json::from_str(&line).unwrap()
    };
    // What is there: the session, and its last line only.
    assert_eq!(next()["type"], "session");
    assert_eq!(next()["text"], "ok");

    for (text, reply) in [("one", "1"), ("/new", "(acknowledged)"), ("two", "2")] {
        let turn = manager.turn(&dm(text)).await.unwrap();
        turn.complete(reply).await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.last().map(String::as_str) != Some("line:2") {
        let line = next();
        seen.push(match line["type"].as_str().unwrap() {
            "session" => format!("session:{}", line["startReason"].as_str().unwrap()),
            _ => format!("line:{}", line["text"].as_str().unwrap()),
        });
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        seen,
        [
            "line:one",
            "line:1",
            "session:explicit_reset",
            "line:New session started.",
            "line:two",
            "line:2"
        ]
    );
}

async fn export_takes_one_session_or_a_time_range(url: &str) {
    let key = two_sessions(url).await;
    let export = |args: &[&str]| -> Value {
        let mut all = vec!["export"];
        all.extend_from_slice(args);
        serde_json::from_str(&stdout(&run(url, &all))).unwrap()
    };
    let everything = export(&[]);
    assert_eq!(everything["sessions"].as_array().unwrap().len(), 2);

    let one = export(&["--session", key.as_str()]);
    let sessions = one["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["key"], key.as_str());
    let id = sessions[0]["entry"]["sessionId"].as_str().unwrap();
    let transcripts = one["transcripts"].as_array().unwrap();
    assert_eq!(transcripts.len(), 1, "{transcripts:?}");
    assert!(transcripts[0]["name"].as_str().unwrap().starts_with(id));
    let text = one.to_string();
    assert!(text.contains("and tomorrow?"));
    assert!(!text.contains("a stranger's secret"));
    assert!(
        !text.contains("when is my shift?"),
        "the session before the reset is another"
    );

    // Since an hour ago: both keys, with the session closed by the reset too.
    let recent = export(&["--since", "1h"]);
    assert_eq!(recent["sessions"].as_array().unwrap().len(), 2);
    let recent_text = recent.to_string();
    assert!(recent_text.contains("a stranger's secret"));
    assert!(recent_text.contains("when is my shift?"));
    let later = export(&["--since", "2999-01-01"]);
    assert_eq!(later["sessions"], serde_json::json!([]));
    assert_eq!(later["transcripts"], serde_json::json!([]));

    let bad = run(url, &["export", "--since", "last tuesday"]);
    assert_eq!(bad.status.code(), Some(2));
    let missing = run(url, &["export", "--session", "telegram:dm:nobody"]);
    assert_eq!(missing.status.code(), Some(4));
}

async fn follow_store_wide_tells_of_every_session(url: &str) {
    let manager = manager(url).await;
    let old = manager
        .turn(&InboundMessage::direct("telegram", "5", "said before"))
        .await
        .unwrap();
    old.complete("answered before").await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-sessions"))
        .env_remove("AGENT_SESSIONS_STORE")
        .args(["--store", url, "--json", "follow", "--store-wide"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It says when it follows: what is written from then on reaches it.
    let mut notice = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut notice)
        .unwrap();
    assert!(
        notice.contains("following every session of agent main"),
        "{notice}"
    );
    let (sender, lines) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    for (peer, text) in [("77", "from 77"), ("42", "from 42")] {
        let turn = manager
            .turn(&InboundMessage::direct("telegram", peer, text))
            .await
            .unwrap();
        turn.complete(format!("re {text}")).await.unwrap();
    }
    let mut said = std::collections::BTreeSet::new();
    let mut sessions = std::collections::BTreeSet::new();
    while said.len() < 4 {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("follow prints the next line");
        let value: Value = serde_json::from_str(&line).unwrap();
        match value["type"].as_str().unwrap() {
            "session" => {
                sessions.insert(value["key"].as_str().unwrap().to_owned());
            }
            _ => {
                said.insert((
                    value["key"].as_str().unwrap().to_owned(),
                    value["text"].as_str().unwrap().to_owned(),
                ));
            }
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let key = |peer: &str| format!("agent:main:telegram:dm:{peer}");
    assert_eq!(
        said.into_iter().collect::<Vec<_>>(),
        [
            (key("42"), "from 42".to_owned()),
            (key("42"), "re from 42".to_owned()),
            (key("77"), "from 77".to_owned()),
            (key("77"), "re from 77".to_owned()),
        ],
        "nothing written before it started"
    );
    assert_eq!(
        sessions.into_iter().collect::<Vec<_>>(),
        [key("42"), key("77")]
    );
}

macro_rules! per_backend {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            async fn json() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&format!("json:{}", dir.path().display())).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&format!("sqlite:{}", dir.path().join("s.db").display())).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            #[cfg_attr(
                not(postgres_tests),
                ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
            )]
            async fn postgres() {
                let schema = super::common::TestSchema::new("cli_conversation");
                super::$name(&schema.url()).await;
                schema.drop().await;
            }
        }
    };
}

per_backend!(log_reads_a_conversation_and_why_each_session_started);
per_backend!(follow_continues_across_a_reset_made_by_another_process);
per_backend!(export_takes_one_session_or_a_time_range);
per_backend!(follow_store_wide_tells_of_every_session);

/// One agent of a hand-written store: its id, its `sessions.json`, and its transcripts
/// as `(file name, text)`.
type HandWrittenAgent<'a> = (&'a str, Value, &'a [(&'a str, &'a str)]);

/// A store written by hand, as an attacker who can write an agent's files would.
fn hand_written(dir: &std::path::Path, agents: &[HandWrittenAgent<'_>]) {
    for (agent, sessions, transcripts) in agents {
        let sessions_dir = dir.join("agents").join(agent).join("sessions");
        std::fs::create_dir_all(&sessions_dir).unwrap();
        std::fs::write(sessions_dir.join("sessions.json"), sessions.to_string()).unwrap();
        for (name, text) in *transcripts {
            std::fs::write(sessions_dir.join(name), text).unwrap();
        }
    }
}

/// Whatever a hostile store holds — an escape sequence or a bidirectional override in a
/// session id, a status, a start reason, a label or a preview — `list`, `show` and
/// `log` print it as text; and `log` reads a session's own transcript, never another
/// agent's of the same id.
#[test]
fn hostile_entries_print_as_text_and_log_stays_in_its_agent() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "x\u{1b}[2J\u{1b}]52;c;aGFja2Vk\u{7}\u{9b}31m\u{202e}evil\nfake line";
    let b1 = "{\"type\":\"session\",\"version\":3,\"id\":\"b1\",\"timestamp\":\"2026-02-06T10:00:00.000Z\"}\n{\"type\":\"message\",\"id\":\"m1\",\"parentId\":null,\"timestamp\":\"2026-02-06T10:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"agent b's secret\"}}\n";
    hand_written(
        dir.path(),
        &[
            (
                "a",
                serde_json::json!({
                    "agent:a:esc": {
                        "sessionId": evil, "updatedAt": 1770372001000u64,
                        "status": "id\u{1b}[2Jle", "startReason": "expl\u{1b}]52;c;aGk=\u{7}icit",
                        "label": "\u{1b}[31mred", "lastMessagePreview": "\u{202e}gpj.exe"
                    },
                    "agent:a:borrow": {"sessionId": "b1", "updatedAt": 1770372002000u64}
                }),
                &[],
            ),
            (
                "b",
                serde_json::json!({"agent:b:mine": {"sessionId": "b1", "updatedAt": 1770372003000u64}}),
                &[("b1.jsonl", b1)],
            ),
        ],
    );
    let url = format!("json:{}", dir.path().display());
    for args in [
        &["--agent", "a", "list"][..],
        &["--agent", "a", "show", "esc"],
        &["--agent", "a", "log", "esc", "--no-pager"],
    ] {
        let output = run(&url, args);
        let printed = [output.stdout.as_slice(), output.stderr.as_slice()].concat();
        let printed = String::from_utf8_lossy(&printed);
        for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
            assert!(
                !printed.contains(raw),
                "{args:?} printed {raw:?}: {printed:?}"
            );
        }
        assert!(!printed.contains("\nfake line"), "{args:?}: {printed:?}");
    }
    let borrowed = run(&url, &["--agent", "a", "log", "borrow", "--no-pager"]);
    let printed = String::from_utf8_lossy(&borrowed.stdout);
    assert!(!printed.contains("agent b's secret"), "{printed}");
    let own = stdout(&run(&url, &["--agent", "b", "log", "mine", "--no-pager"]));
    assert!(own.contains("agent b's secret"), "{own}");
}
