//! How Telegram updates become inbound messages: real teloxide types, deserialised from
//! the JSON the Bot API sends, through `TelegramAdapter`, to the session key and the
//! fields the session layer reads.

use agent_sessions::prelude::*;
use agent_sessions_teloxide::TelegramAdapter;
use serde_json::{json, Value};
use teloxide::types::{ChatId, Update, UpdateKind, UserId};

const BOT_ID: u64 = 777;

fn adapter() -> TelegramAdapter {
    TelegramAdapter::new(UserId(BOT_ID), "helper_bot")
}

fn manager() -> SessionManager {
    SessionManager::builder(InMemoryStore::new())
        .build()
        .unwrap()
}

fn bot() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Helper", "username": "helper_bot"})
}

fn ada() -> Value {
    json!({"id": 42, "is_bot": false, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"})
}

fn eve() -> Value {
    json!({"id": 43, "is_bot": false, "first_name": "Eve"})
}

fn private_chat() -> Value {
    json!({"id": 42, "type": "private", "first_name": "Ada", "username": "ada"})
}

fn group() -> Value {
    json!({"id": -100, "type": "group", "title": "Family"})
}

fn forum() -> Value {
    json!({"id": -1001, "type": "supergroup", "title": "Team", "is_forum": true})
}

fn supergroup() -> Value {
    json!({"id": -1002, "type": "supergroup", "title": "Club"})
}

/// What the message says, as the model's text has it: its text, then a placeholder
/// for each file.
fn read_as(inbound: &InboundMessage) -> String {
    let text = (!inbound.body.is_empty()).then(|| inbound.body.clone());
    let files = inbound
        .attachments
        .iter()
        .map(|file| file.kind.placeholder().to_owned());
    text.into_iter().chain(files).collect::<Vec<_>>().join("\n")
}

/// A message update: `message` plus the fields every message has.
fn update(message: Value) -> Value {
    update_as("message", message)
}

fn update_as(kind: &str, mut message: Value) -> Value {
    let fields = message.as_object_mut().unwrap();
    fields.entry("message_id").or_insert(json!(10));
    fields.entry("date").or_insert(json!(1_771_840_800));
    json!({"update_id": 1, kind: message})
}

/// The update teloxide reads from `json`, as from a Bot API response. (teloxide reads
/// updates from text only: from a `serde_json::Value` every update is `UpdateKind::Error`.)
fn parse(json: &Value) -> Update {
    let update: Update = serde_json::from_str(&json.to_string()).unwrap();
    assert!(
        !matches!(update.kind, UpdateKind::Error(_)),
        "teloxide could not read {json}"
    );
    update
}

fn entity(kind: &str, offset: usize, length: usize) -> Value {
    json!({"type": kind, "offset": offset, "length": length})
}

struct Expect {
    key: &'static str,
    body: &'static str,
    mentioned: bool,
    sender: (&'static str, Option<&'static str>, Option<&'static str>),
    context: &'static [&'static str],
}

#[test]
fn telegram_updates_map_to_inbound_messages() {
    let bot_reply = json!({"message_id": 5, "date": 1_771_840_000, "chat": group(), "from": bot(), "text": "Thursday at 9."});
    let eve_said = json!({"message_id": 6, "date": 1_771_840_000, "chat": group(), "from": eve(), "text": "I'll bring dessert."});
    let ada_in_group = (("42"), Some("Ada Lovelace"), Some("ada"));
    let cases: Vec<(&str, Value, Option<Expect>)> = vec![
        (
            "a private chat is a direct message",
            update(json!({"chat": private_chat(), "from": ada(), "text": "hi"})),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "hi",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "group chatter does not address the bot",
            update(json!({"chat": group(), "from": eve(), "text": "dinner at 7?"})),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "dinner at 7?",
                mentioned: false,
                sender: ("43", Some("Eve"), None),
                context: &[],
            }),
        ),
        (
            "an @mention of the bot addresses it",
            update(
                json!({"chat": group(), "from": ada(), "text": "@helper_bot what time?",
                "entities": [entity("mention", 0, 11)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "@helper_bot what time?",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a mention is matched case-insensitively",
            update(
                json!({"chat": group(), "from": ada(), "text": "hey @Helper_Bot",
                "entities": [entity("mention", 4, 11)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "hey @Helper_Bot",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a mention of another bot does not",
            update(
                json!({"chat": group(), "from": ada(), "text": "@other_bot hi",
                "entities": [entity("mention", 0, 10)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "@other_bot hi",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "the bot's username in plain text (no entity) is not a mention",
            update(json!({"chat": group(), "from": ada(), "text": "helper_bot is slow"})),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "helper_bot is slow",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a text mention of the bot (no username) addresses it",
            update(
                json!({"chat": group(), "from": ada(), "text": "Helper, help",
                "entities": [{"type": "text_mention", "offset": 0, "length": 6, "user": bot()}]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "Helper, help",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a command to the bot addresses it and loses its @bot suffix",
            update(
                json!({"chat": group(), "from": ada(), "text": "/new@helper_bot let's plan",
                "entities": [entity("bot_command", 0, 15)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "/new let's plan",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a command after the bot's mention loses the mention",
            update(
                json!({"chat": group(), "from": ada(), "text": "@helper_bot /new let's plan",
                "entities": [entity("mention", 0, 11), entity("bot_command", 12, 4)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "/new let's plan",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a command to another bot is left alone",
            update(
                json!({"chat": group(), "from": ada(), "text": "/new@other_bot",
                "entities": [entity("bot_command", 0, 14)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "/new@other_bot",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a reply to the bot's message addresses it; the quoted message is context",
            update(
                json!({"chat": group(), "from": ada(), "text": "and on Friday?",
                "reply_to_message": bot_reply}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "and on Friday?",
                mentioned: true,
                sender: ada_in_group,
                context: &["Replying to the assistant (message 5): Thursday at 9."],
            }),
        ),
        (
            "a reply to someone else does not address the bot",
            update(json!({"chat": group(), "from": ada(), "text": "great",
                "reply_to_message": eve_said})),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "great",
                mentioned: false,
                sender: ada_in_group,
                context: &["Replying to Eve (message 6): I'll bring dessert."],
            }),
        ),
        (
            "a forum topic has its own session",
            update(
                json!({"chat": forum(), "from": ada(), "text": "@helper_bot status?",
                "message_thread_id": 7, "is_topic_message": true,
                "entities": [entity("mention", 0, 11)]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-1001:topic:7",
                body: "@helper_bot status?",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a topic's creation message, which Telegram sets as every topic message's reply, is not a reply",
            update(json!({"chat": forum(), "from": ada(), "text": "status, anyone?",
                "message_thread_id": 7, "is_topic_message": true,
                "reply_to_message": {"message_id": 7, "date": 1_771_800_000, "chat": forum(), "from": bot(),
                    "message_thread_id": 7, "is_topic_message": true,
                    "forum_topic_created": {"name": "Status", "icon_color": 7_322_096}}})),
            Some(Expect {
                key: "agent:main:telegram:group:-1001:topic:7",
                body: "status, anyone?",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "the forum's General topic is the group's session",
            update(json!({"chat": forum(), "from": ada(), "text": "hello all"})),
            Some(Expect {
                key: "agent:main:telegram:group:-1001",
                body: "hello all",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a reply thread in an ordinary supergroup stays in the group's session",
            update(
                json!({"chat": supergroup(), "from": ada(), "text": "agreed",
                "message_thread_id": 3}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-1002",
                body: "agreed",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "an anonymous admin writes as the group",
            update(json!({"chat": supergroup(), "sender_chat": supergroup(),
                "from": {"id": 1_087_968_824, "is_bot": true, "first_name": "Group", "username": "GroupAnonymousBot"},
                "text": "@helper_bot pin the rules", "entities": [entity("mention", 0, 11)]})),
            Some(Expect {
                key: "agent:main:telegram:group:-1002",
                body: "@helper_bot pin the rules",
                mentioned: true,
                sender: ("-1002", Some("Club"), None),
                context: &[],
            }),
        ),
        (
            "a photo's caption is the body, before the photo's placeholder; its caption entities the mentions",
            update(
                json!({"chat": group(), "from": ada(), "caption": "look @helper_bot",
                "caption_entities": [entity("mention", 5, 11)],
                "photo": [{"file_id": "AgAD", "file_unique_id": "AQAD", "width": 90, "height": 90, "file_size": 1200}]}),
            ),
            Some(Expect {
                key: "agent:main:telegram:group:-100",
                body: "look @helper_bot\n<media:image>",
                mentioned: true,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a forwarded message says where it came from",
            update(
                json!({"chat": private_chat(), "from": ada(), "text": "is this true?",
                "forward_origin": {"type": "user", "date": 1_771_800_000, "sender_user": eve()}}),
            ),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "is this true?",
                mentioned: false,
                sender: ada_in_group,
                context: &["Forwarded from Eve"],
            }),
        ),
        (
            "a channel post is a channel message",
            update_as(
                "channel_post",
                json!({"chat": {"id": -1003, "type": "channel", "title": "News"},
                "sender_chat": {"id": -1003, "type": "channel", "title": "News"}, "text": "release today"}),
            ),
            Some(Expect {
                key: "agent:main:telegram:channel:-1003",
                body: "release today",
                mentioned: false,
                sender: ("-1003", Some("News"), None),
                context: &[],
            }),
        ),
        (
            "a sticker is read as OpenClaw's sticker placeholder",
            update(json!({"chat": private_chat(), "from": ada(),
                "sticker": {"file_id": "CAAD", "file_unique_id": "AgAD", "type": "regular",
                    "width": 512, "height": 512, "is_animated": false, "is_video": false}})),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "<media:sticker>",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a photo without a caption is read as the image placeholder",
            update(json!({"chat": private_chat(), "from": ada(),
                "photo": [{"file_id": "AgAD", "file_unique_id": "AQAD", "width": 90, "height": 90}]})),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "<media:image>",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a voice note is read as the audio placeholder",
            update(json!({"chat": private_chat(), "from": ada(),
                "voice": {"file_id": "AwAD", "file_unique_id": "AgAD", "duration": 3,
                    "mime_type": "audio/ogg", "file_size": 4000}})),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "<media:audio>",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a document is read as the document placeholder",
            update(json!({"chat": private_chat(), "from": ada(),
                "document": {"file_id": "BQAD", "file_unique_id": "AgAD", "file_name": "rota.pdf",
                    "mime_type": "application/pdf", "file_size": 9000}})),
            Some(Expect {
                key: "agent:main:telegram:dm:42",
                body: "<media:document>",
                mentioned: false,
                sender: ada_in_group,
                context: &[],
            }),
        ),
        (
            "a service message has nothing to read",
            update(json!({"chat": group(), "from": ada(),
                "new_chat_members": [eve()]})),
            None,
        ),
        (
            "an edit is not a new message",
            update_as(
                "edited_message",
                json!({"chat": private_chat(), "from": ada(), "text": "hi!",
                "edit_date": 1_771_840_900}),
            ),
            None,
        ),
    ];

    let manager = manager();
    for (name, json, expected) in cases {
        let update = parse(&json);
        let inbound = adapter().inbound_update(&update);
        let Some(expected) = expected else {
            assert_eq!(inbound, None, "{name}");
            continue;
        };
        let inbound = inbound.unwrap_or_else(|| panic!("{name}: not mapped"));
        assert_eq!(
            manager.key_for(&inbound).unwrap().as_str(),
            expected.key,
            "{name}"
        );
        assert_eq!(inbound.channel, "telegram", "{name}");
        assert_eq!(read_as(&inbound), expected.body, "{name}");
        assert_eq!(inbound.mentioned, expected.mentioned, "{name}");
        let (id, display, username) = expected.sender;
        assert_eq!(inbound.sender.id.as_deref(), Some(id), "{name}");
        assert_eq!(inbound.sender.name.as_deref(), display, "{name}");
        assert_eq!(inbound.sender.username.as_deref(), username, "{name}");
        assert_eq!(inbound.untrusted_context, expected.context, "{name}");
        assert_eq!(inbound.message_id.as_deref(), Some("10"), "{name}");
        assert_eq!(inbound.timestamp, Some(1_771_840_800_000), "{name}");
    }
}

#[test]
fn group_title_is_the_subject_and_replies_go_to_the_chat() {
    let update = parse(&update(
        json!({"chat": forum(), "from": ada(), "text": "hi", "message_thread_id": 7, "is_topic_message": true}),
    ));
    let inbound = adapter().inbound_update(&update).unwrap();
    assert_eq!(inbound.group_subject.as_deref(), Some("Team"));
    assert!(inbound.forum && inbound.is_group() && inbound.is_thread());
    assert_eq!(inbound.reply_to().as_deref(), Some("-1001"));
}

#[test]
fn account_and_agent_scope_the_session() {
    let update = parse(&update(
        json!({"chat": group(), "from": ada(), "text": "hi"}),
    ));
    let inbound = adapter()
        .with_account("second")
        .with_agent("support")
        .inbound_update(&update)
        .unwrap();
    assert_eq!(inbound.account_id.as_deref(), Some("second"));
    assert_eq!(
        manager().key_for(&inbound).unwrap().as_str(),
        "agent:support:telegram:group:-100"
    );
}

/// The dialogue storage finds a chat's session from its id alone: that must be the
/// session the chat's messages go to.
#[test]
fn a_chat_id_maps_to_the_session_of_its_messages() {
    let manager = manager();
    for chat in [private_chat(), group(), supergroup(), forum()] {
        let id = chat["id"].as_i64().unwrap();
        let update = parse(&update(json!({"chat": chat, "from": ada(), "text": "hi"})));
        let from_message = adapter().inbound_update(&update).unwrap();
        assert_eq!(
            manager.key_for(&adapter().chat(ChatId(id))).unwrap(),
            manager.key_for(&from_message).unwrap(),
            "chat {id}"
        );
    }
}

#[test]
fn the_owner_is_recognised_by_user_id() {
    let from_ada = parse(&update(
        json!({"chat": group(), "from": ada(), "text": "/new"}),
    ));
    let from_eve = parse(&update(
        json!({"chat": group(), "from": eve(), "text": "/new"}),
    ));
    let adapter = adapter().with_owners([UserId(42)]);
    assert!(adapter.inbound_update(&from_ada).unwrap().sender_is_owner);
    assert!(!adapter.inbound_update(&from_eve).unwrap().sender_is_owner);
    assert!(
        !self::adapter()
            .inbound_update(&from_ada)
            .unwrap()
            .sender_is_owner
    );
}

#[test]
fn each_file_is_an_attachment_with_its_file_id_type_size_and_name() {
    use agent_sessions::inbound::{Attachment, AttachmentKind};
    let file = |kind, id: &str, mime: &str, size| {
        Attachment::new(kind)
            .with_file_id(id)
            .with_mime_type(mime)
            .with_size(size)
    };
    let cases = [
        (
            "a photo is its largest size",
            json!({"photo": [
                {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 1200},
                {"file_id": "large", "file_unique_id": "l", "width": 1280, "height": 960, "file_size": 98000}]}),
            file(AttachmentKind::Image, "large", "image/jpeg", 98_000),
        ),
        (
            "a document keeps its name and type",
            json!({"document": {"file_id": "BQAD", "file_unique_id": "d", "file_name": "rota.pdf",
                "mime_type": "application/pdf", "file_size": 9000}}),
            file(AttachmentKind::Document, "BQAD", "application/pdf", 9_000)
                .with_file_name("rota.pdf"),
        ),
        (
            "a voice note is audio",
            json!({"voice": {"file_id": "AwAD", "file_unique_id": "v", "duration": 3,
                "mime_type": "audio/ogg", "file_size": 4000}}),
            file(AttachmentKind::Audio, "AwAD", "audio/ogg", 4_000),
        ),
        (
            "a video keeps its name",
            json!({"video": {"file_id": "BAAD", "file_unique_id": "m", "width": 640, "height": 360,
                "duration": 12, "file_name": "clip.mp4", "mime_type": "video/mp4", "file_size": 700000}}),
            file(AttachmentKind::Video, "BAAD", "video/mp4", 700_000).with_file_name("clip.mp4"),
        ),
        (
            "an animated sticker is not a picture",
            json!({"sticker": {"file_id": "CAAD", "file_unique_id": "k", "type": "regular",
                "width": 512, "height": 512, "is_animated": true, "is_video": false, "file_size": 30000}}),
            file(
                AttachmentKind::Sticker,
                "CAAD",
                "application/x-tgsticker",
                30_000,
            ),
        ),
    ];
    for (name, media, expected) in cases {
        let mut message = json!({"chat": private_chat(), "from": ada()});
        message
            .as_object_mut()
            .unwrap()
            .extend(media.as_object().unwrap().clone());
        let inbound = adapter().inbound_update(&parse(&update(message))).unwrap();
        assert_eq!(inbound.attachments, [expected], "{name}");
        assert_eq!(inbound.body, "", "{name}: no caption, no text");
    }
    let animated =
        Attachment::new(AttachmentKind::Sticker).with_mime_type("application/x-tgsticker");
    assert!(!animated.is_picture());
}
