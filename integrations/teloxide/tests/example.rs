//! The README's example bot, `examples/bot.rs`, run as a user runs it — its token and
//! API URL from the environment — against the fake Bot API on loopback: it answers a
//! private chat, keeps the group's chatter until it is addressed, and continues the
//! conversation after it is killed and started again.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{FakeTelegram, TOKEN};
use serde_json::{json, Value};

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

/// The example bot on `state`, talking to the fake server at `api`.
struct BotProcess(Child);

impl BotProcess {
    fn start(api: &str, state: &Path) -> BotProcess {
        let child = Command::new(example("bot"))
            .arg(state)
            .env("TELOXIDE_TOKEN", TOKEN)
            .env("TELOXIDE_API_URL", api)
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        BotProcess(child)
    }
}

impl Drop for BotProcess {
    fn drop(&mut self) {
        let _ = self.0.kill(); // SIGKILL: nothing is flushed on the way out
        let _ = self.0.wait();
    }
}

fn private(text: &str) -> Value {
    json!({"chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"}, "text": text})
}

fn group(text: &str, mention: bool) -> Value {
    let mut message = json!({"chat": {"id": -100, "type": "supergroup", "title": "Family"},
        "from": {"id": 43, "is_bot": false, "first_name": "Eve"}, "text": text});
    if mention {
        message["entities"] = json!([{"type": "mention", "offset": 0, "length": 11}]);
    }
    message
}

fn texts_to(sent: &[Value], chat: i64) -> Vec<String> {
    sent.iter()
        .filter(|m| m["chat_id"] == chat)
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_bot_answers_and_remembers_across_a_kill() {
    let telegram = FakeTelegram::default();
    let api = telegram.serve().await;
    let state = tempfile::tempdir().unwrap();

    let bot = BotProcess::start(&api, state.path());
    telegram.push(private("hi, my name is Ada"));
    telegram.push(group("dinner at 7", false));
    telegram.push(group("@helper_bot when is dinner?", true));
    let sent = telegram.wait_for_sent(2).await;
    assert_eq!(texts_to(&sent, 42), ["Nice to meet you, Ada."]);
    let group_reply = texts_to(&sent, -100);
    assert_eq!(
        group_reply.len(),
        1,
        "the chatter was not answered: {sent:?}"
    );
    assert!(
        group_reply[0].contains("dinner at 7"),
        "the model saw the chatter: {group_reply:?}"
    );
    drop(bot); // killed

    let _bot = BotProcess::start(&api, state.path());
    telegram.push(private("what is my name?"));
    let sent = telegram.wait_for_sent(3).await;
    assert_eq!(
        texts_to(&sent, 42),
        ["Nice to meet you, Ada.", "Your name is Ada."]
    );
}
