//! A message the person edits in Telegram (an `edited_message` update, which keeps the
//! message's id): the model sees the new text in its place.

use agent_sessions::prelude::*;
use agent_sessions_teloxide::TelegramAdapter;
use serde_json::json;
use teloxide::types::{Message, UserId};

/// Ada's message `id`, as teloxide reads it from the Bot API; `edited` adds the time of
/// an edit.
fn ada(id: i32, text: &str, edited: bool) -> Message {
    let mut json = json!({
        "message_id": id, "date": 1_771_840_800, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
    });
    if edited {
        json["edit_date"] = json!(1_771_840_860);
    }
    serde_json::from_str(&json.to_string()).unwrap()
}

#[tokio::test]
async fn an_edited_message_replaces_what_the_model_sees_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = SessionManager::connect(&format!("json:{}", dir.path().display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let adapter = TelegramAdapter::new(UserId(777), "helper_bot");
    let turn = sessions
        .turn(
            &adapter
                .inbound(&ada(10, "Table for 3 at 8", false))
                .unwrap(),
        )
        .await
        .unwrap();
    turn.complete("Booked: 3 people at 8.").await.unwrap();

    // The handler of `Update::filter_edited_message()`.
    let edited = adapter.inbound(&ada(10, "Table for 4 at 8", true)).unwrap();
    assert!(sessions.edit_message(&edited).await.unwrap());

    let next = sessions
        .turn(&adapter.inbound(&ada(11, "Is that right?", false)).unwrap())
        .await
        .unwrap();
    let seen: Vec<String> = next
        .messages()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(
        seen,
        [
            "Table for 4 at 8",
            "Booked: 3 people at 8.",
            "Is that right?"
        ]
    );
}
