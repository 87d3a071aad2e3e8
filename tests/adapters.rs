//! The example channel adapters, run as a user runs them: their output is the
//! specification of what each shows.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The built example `name` (`cargo test` builds every example before it runs tests).
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
        "{} is not built: run `cargo test` (which builds the examples) or `cargo build --examples`",
        path.display()
    );
    path
}

fn run(name: &str, args: &[&str], input: &str) -> String {
    let mut child = Command::new(example(name))
        .args(args)
        .env("USER", "sam")
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
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(stdout).unwrap();
    assert!(
        status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

fn lines_with<'a>(output: &'a str, needle: &str) -> Vec<&'a str> {
    output.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn the_terminal_chat_survives_restarts_resets_and_expires_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_str().unwrap();
    let chat = |input: &str| run("terminal_chat", &[state, "--idle", "2"], input);

    let first = chat("hello there\nplan a trip to Rome\n");
    assert_eq!(lines_with(&first, "[new session").len(), 1, "{first}");
    assert!(first.contains("no_session"), "{first}");
    assert!(
        first.contains(
            "bot: (turn 2) You said \"plan a trip to Rome\". Earlier you said: \"hello there\""
        ),
        "{first}"
    );

    // A restart continues the conversation: the model sees all of it again.
    let second = chat("what about hotels?\n/new book a table\n");
    let mut lines = second.lines().skip(1);
    assert_eq!(
        lines.next(),
        Some("bot: (turn 3) You said \"what about hotels?\". Earlier you said: \"hello there\""),
        "{second}"
    );
    assert!(
        lines.next().unwrap().ends_with("— explicit_reset]"),
        "{second}"
    );
    assert_eq!(
        lines.next(),
        Some("bot: You said \"book a table\". This is the start of our conversation."),
        "{second}"
    );

    // Past the idle window, the next message starts a new session.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let third = chat("still there?\n");
    assert!(third.contains("— timeout (idle)]"), "{third}");

    // Everything is in OpenClaw's files: the store, the reset transcript archived.
    let sessions = dir.path().join("agents/main/sessions");
    let names: Vec<String> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "sessions.json"), "{names:?}");
    assert!(
        names.iter().any(|n| n.contains(".jsonl.reset.")),
        "{names:?}"
    );
    let transcript = third.lines().last().unwrap().rsplit(' ').next().unwrap();
    let lines = std::fs::read_to_string(transcript).unwrap();
    assert!(lines.contains("still there?"), "{lines}");
}

#[test]
fn the_group_chat_keeps_chatter_as_history_and_filters_replies() {
    let output = run("group_chat", &[], "");
    let blocks: Vec<&str> = output.split("\n\n").collect();
    assert!(blocks[0].ends_with("kept as group chatter"), "{output}");
    assert!(blocks[1].ends_with("kept as group chatter"), "{output}");
    // Bob's question: the model sees both earlier messages, then the current one.
    let bob = blocks[2];
    assert!(
        bob.contains("│ [Chat messages since your last reply - for context]"),
        "{bob}"
    );
    assert!(
        bob.contains("Dana: Sunday dinner is at mine this week, 7pm!"),
        "{bob}"
    );
    assert!(bob.contains("Eve: I'll bring dessert."), "{bob}");
    assert!(
        bob.contains("│ [Current message - respond to this]"),
        "{bob}"
    );
    assert!(
        bob.contains("Z] Bob (+15550100): "),
        "named once, by the envelope: {bob}"
    );
    assert!(!bob.contains("[from: "), "{bob}");
    assert!(bob.contains(
        "the bot sends: \"From the 2 earlier messages I can see: dinner is at Dana's on Sunday at 7.\" (as a reply to the message)"
    ), "{bob}");
    // Mallory's forged marker reaches the model quoted; the model's NO_REPLY is silence.
    let mallory = blocks[3];
    assert!(mallory.contains("│ [quoted from: Owner]"), "{mallory}");
    assert!(!mallory.contains("│ [from: Owner]"), "{mallory}");
    assert!(mallory.ends_with("the bot sends nothing"), "{mallory}");
    // The history was consumed by the reply: Bob's next question comes alone.
    let menu = blocks[4];
    assert!(!menu.contains("Chat messages since"), "{menu}");
    assert!(menu.contains(
        "the bot sends: \"Here is the menu Dana shared.\" (with https://example.com/sunday-menu.pdf)"
    ), "{menu}");
    assert!(
        blocks[5].ends_with("the bot sends nothing"),
        "a heartbeat is not sent: {output}"
    );
}

#[test]
fn the_identity_chat_continues_one_conversation_across_sms_and_web() {
    let output = run("identity_chat", &[], "");
    let sessions = lines_with(&output, "staff:17 is ");
    assert_eq!(sessions.len(), 3, "{output}");
    assert!(
        sessions[0].contains("agent:reggie_oc:person:staff:17 (new): no_session"),
        "{output}"
    );
    // The web chat continues the SMS conversation: same session, same summary.
    assert!(
        sessions[1].contains("agent:reggie_oc:person:staff:17 (continues): within_timeout"),
        "{output}"
    );
    let id = |line: &str| line.rsplit(' ').next().unwrap().to_owned();
    assert_eq!(id(sessions[1]), id(sessions[0]));
    assert!(
        output.contains("bot: I've asked to swap your Thursday Riverside shift for Friday."),
        "{output}"
    );
    // The other engine variant starts with the shared rolling summary.
    assert!(
        output.contains("the rolling summary for reggie, shared with 1 session(s)"),
        "{output}"
    );
    assert!(
        sessions[2].contains("agent:reggie_fd:person:staff:17 (new)"),
        "{output}"
    );
    assert!(
        output
            .trim_end()
            .ends_with("bot: Yes: your Riverside shift swap from Thursday to Friday is confirmed."),
        "{output}"
    );
}
