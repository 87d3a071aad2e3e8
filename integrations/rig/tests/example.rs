//! The README's example, `examples/rig_chat.rs`, run as a user runs it — against a
//! fake OpenAI-compatible server on loopback: its conversation continues across lines
//! and across a restart, and `/new` starts over.

#[path = "../../openai/tests/common/mod.rs"]
mod common;

use common::{said, FakeOpenAi};

/// The example, as a user runs it.
async fn chat(server: &FakeOpenAi, state: &std::path::Path, input: &str) -> String {
    common::chat("rig_chat", server, state, input).await
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
