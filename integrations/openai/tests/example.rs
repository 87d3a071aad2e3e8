//! The README's example, `examples/openai_chat.rs`, run as a user runs it — against a
//! fake OpenAI-compatible server on loopback: its conversation continues across lines
//! and across a restart, and `/new` starts over.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{said, FakeOpenAi};

/// The built example (`cargo test` builds the package's examples before its tests).
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is not built: run `cargo test`",
        path.display()
    );
    path
}

/// Runs the example on `state` with `input` typed in; returns what it printed.
async fn chat(server: &FakeOpenAi, state: &Path, input: &str) -> String {
    let mut child = Command::new(example("openai_chat"))
        .arg(state)
        .env("OPENAI_BASE_URL", &server.base)
        .env("OPENAI_MODEL", "gpt-test")
        .env("USER", "sam")
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_keeps_its_conversation_across_a_restart() {
    let server = FakeOpenAi::start().await;
    let state = tempfile::tempdir().unwrap();
    let first = chat(&server, state.path(), "My name is Sam.\n").await;
    assert!(first.contains("bot: reply 1"), "{first}");
    let second = chat(&server, state.path(), "What is my name?\n").await;
    assert!(second.contains("bot: reply 2"), "{second}");
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", "You are a helpful, concise assistant."),
            ("user", "My name is Sam."),
            ("assistant", "reply 1"),
            ("user", "What is my name?"),
        ]),
        "the conversation survived the restart"
    );
    let third = chat(&server, state.path(), "/new\nHello?\n").await;
    assert!(third.contains("bot: New session started."), "{third}");
    assert_eq!(
        server.last_messages(),
        said(&[
            ("system", "You are a helpful, concise assistant."),
            ("user", "Hello?"),
        ]),
        "after /new the model starts over"
    );
    assert_eq!(server.count(), 3);
}
