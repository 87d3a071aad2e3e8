//! Telegram messages as [`InboundMessage`]s: who wrote, where, whether the bot was
//! addressed.

use agent_sessions::inbound::{Attachment, AttachmentKind, Sender};
use agent_sessions::InboundMessage;
use teloxide::types::{
    Chat, ChatId, FileMeta, Me, Message, MessageEntityKind, MessageEntityRef, PhotoSize, Update,
    UpdateKind, User, UserId,
};

/// The channel name every mapped message carries.
pub const CHANNEL: &str = "telegram";

/// What the bot knows about itself, for mapping Telegram messages to
/// [`InboundMessage`]s: its user id and username (to recognise mentions and replies to
/// it), and optionally the account and agent the messages belong to.
///
/// Build it from the [`Me`] the dispatcher provides (`getMe`), or from the bot's id and
/// username.
///
/// ```
/// use agent_sessions_teloxide::TelegramAdapter;
/// use teloxide::types::UserId;
///
/// let adapter = TelegramAdapter::new(UserId(777), "helper_bot").with_account("main");
/// assert_eq!(adapter.bot_username(), Some("helper_bot"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelegramAdapter {
    bot_id: UserId,
    bot_username: Option<String>,
    account_id: Option<String>,
    agent_id: Option<String>,
    owners: Vec<UserId>,
}

impl From<&Me> for TelegramAdapter {
    fn from(me: &Me) -> Self {
        TelegramAdapter {
            bot_id: me.user.id,
            bot_username: me.user.username.clone(),
            account_id: None,
            agent_id: None,
            owners: Vec::new(),
        }
    }
}

impl TelegramAdapter {
    /// The adapter of the bot with user id `bot_id` and `@username` `bot_username`
    /// (with or without the `@`).
    pub fn new(bot_id: UserId, bot_username: impl Into<String>) -> Self {
        let username = bot_username.into();
        TelegramAdapter {
            bot_id,
            bot_username: Some(username.trim_start_matches('@').to_owned()),
            account_id: None,
            agent_id: None,
            owners: Vec::new(),
        }
    }

    /// Records `account_id` as the bot's account on every message (it becomes part of
    /// the session key when the key builder scopes by account).
    pub fn with_account(mut self, account_id: impl Into<String>) -> Self {
        self.account_id = Some(account_id.into());
        self
    }

    /// Routes every message to `agent_id` instead of the manager's default agent.
    pub fn with_agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Marks messages from these users as the owner's
    /// ([`InboundMessage::sender_is_owner`]): the owner may reset a group's session
    /// with `/new`, which other group members may not (unless the manager's
    /// `ResetTriggers::allow` lets them). In a group the bot still answers the owner
    /// only when addressed, like anyone else, unless the manager is built with
    /// `owner_chatter(OwnerChatter::Answer)`.
    pub fn with_owners(mut self, owners: impl IntoIterator<Item = UserId>) -> Self {
        self.owners.extend(owners);
        self
    }

    /// The bot's user id.
    pub fn bot_id(&self) -> UserId {
        self.bot_id
    }

    /// The bot's username, without the `@`.
    pub fn bot_username(&self) -> Option<&str> {
        self.bot_username.as_deref()
    }

    /// The [`InboundMessage`] for a message or channel post in `update`; `None` for
    /// other updates (edits, callbacks, member changes) and for messages with nothing
    /// to read (see [`inbound`](Self::inbound)).
    pub fn inbound_update(&self, update: &Update) -> Option<InboundMessage> {
        match &update.kind {
            UpdateKind::Message(message) | UpdateKind::ChannelPost(message) => {
                self.inbound(message)
            }
            _ => None,
        }
    }

    /// The [`InboundMessage`] for `message`, or `None` when it has nothing to read (a
    /// service message, a poll, a location).
    ///
    /// - A photo (its largest size), video, video note, animation, voice note, audio
    ///   file, document or sticker is an [`Attachment`] with its `file_id`, MIME type,
    ///   size and file name; the caption is the message's text. The model's text gets
    ///   OpenClaw's placeholder for it (`<media:image>`, `<media:video>`,
    ///   `<media:audio>`, `<media:document>`, `<media:sticker>`) after the caption, so a
    ///   caption never hides that something was sent; [`fetch_files`](crate::fetch_files)
    ///   turns the file ids into what a model can read.
    /// - A private chat is a direct message from the chat; a group or supergroup is a
    ///   group message from its sender, with the chat's title as the group subject; a
    ///   channel post is a channel message.
    /// - A message in a forum topic carries the topic (`with_forum_topic`), so each
    ///   topic has its own session. Reply threads in ordinary supergroups do not: they
    ///   stay in the group's session.
    /// - The message addresses the bot ([`InboundMessage::mentioned`]) when it mentions
    ///   the bot's `@username`, has a text mention of the bot, sends a command to it
    ///   (`/help@bot`), or replies to one of the bot's messages. A command addressed to
    ///   the bot loses its `@bot` suffix (`/new@bot` → `/new`) or the mention before it
    ///   (`@bot /new` → `/new`), so reset triggers work in groups.
    /// - A message from one of the [owners](Self::with_owners) is the owner's.
    /// - The sender's id, display name and username, the message id and time are
    ///   recorded; the message it replies to and where it was forwarded from go into
    ///   the untrusted context, for the model to read but not obey.
    pub fn inbound(&self, message: &Message) -> Option<InboundMessage> {
        let attachments = attachments_of(message);
        let (text, entities) = match (message.text(), message.caption()) {
            (Some(text), _) => (text, message.parse_entities().unwrap_or_default()),
            (None, Some(caption)) => (
                caption,
                message.parse_caption_entities().unwrap_or_default(),
            ),
            (None, None) if !attachments.is_empty() => ("", Vec::new()),
            (None, None) => return None,
        };
        let chat_id = message.chat.id.to_string();
        let sender = sender_of(message);
        let sender_id = sender.id.clone().unwrap_or_else(|| chat_id.clone());
        let body = self.strip_command_suffix(text, &entities);
        let mut inbound = if message.chat.is_private() {
            InboundMessage::direct(CHANNEL, chat_id, body)
        } else if message.chat.is_channel() {
            InboundMessage::group(CHANNEL, chat_id, sender_id, body).in_channel()
        } else {
            InboundMessage::group(CHANNEL, chat_id, sender_id, body)
        };
        inbound = inbound.with_sender(sender);
        inbound.attachments = attachments;
        if let Some(title) = message.chat.title() {
            inbound = inbound.with_group_subject(title);
        }
        if is_forum(&message.chat) && message.is_topic_message {
            if let Some(thread) = message.thread_id {
                inbound = inbound.with_forum_topic(i64::from(thread.0 .0));
            }
        }
        if self.addresses_bot(message, &entities) {
            inbound = inbound.mentioning_agent();
        }
        if let Some(replied) = replied_to(message) {
            inbound = inbound.with_untrusted_context(self.replied_context(replied));
        }
        if let Some(origin) = forwarded_from(message) {
            inbound = inbound.with_untrusted_context(format!("Forwarded from {origin}"));
        }
        if message.sender_chat.is_none()
            && message
                .from
                .as_ref()
                .is_some_and(|u| self.owners.contains(&u.id))
        {
            inbound = inbound.from_owner();
        }
        if let Some(account) = &self.account_id {
            inbound = inbound.with_account(account.clone());
        }
        if let Some(agent) = &self.agent_id {
            inbound = inbound.with_agent(agent.clone());
        }
        inbound = inbound.with_message_id(message.id.0.to_string());
        inbound.timestamp = u64::try_from(message.date.timestamp_millis()).ok();
        Some(inbound)
    }

    /// A message-less [`InboundMessage`] for the chat `chat_id`: the conversation the
    /// session key of that chat is built from (a positive id is a private chat, a
    /// negative one a group). [`SessionDialogueStorage`](crate::SessionDialogueStorage)
    /// uses it to find a chat's session from the chat id alone.
    pub fn chat(&self, chat_id: ChatId) -> InboundMessage {
        let id = chat_id.to_string();
        let mut inbound = if chat_id.is_user() {
            InboundMessage::direct(CHANNEL, id, "")
        } else {
            InboundMessage::group(CHANNEL, id.clone(), id, "")
        };
        if let Some(account) = &self.account_id {
            inbound = inbound.with_account(account.clone());
        }
        if let Some(agent) = &self.agent_id {
            inbound = inbound.with_agent(agent.clone());
        }
        inbound
    }

    fn is_bot(&self, user: &User) -> bool {
        user.id == self.bot_id
    }

    fn is_bot_handle(&self, handle: &str) -> bool {
        self.bot_username
            .as_deref()
            .is_some_and(|name| handle.trim_start_matches('@').eq_ignore_ascii_case(name))
    }

    fn addresses_bot(&self, message: &Message, entities: &[MessageEntityRef<'_>]) -> bool {
        let mentioned = entities.iter().any(|entity| match entity.kind() {
            MessageEntityKind::Mention => self.is_bot_handle(entity.text()),
            MessageEntityKind::TextMention { user } => self.is_bot(user),
            MessageEntityKind::BotCommand => entity
                .text()
                .split_once('@')
                .is_some_and(|(_, handle)| self.is_bot_handle(handle)),
            _ => false,
        });
        let replies_to_bot = replied_to(message)
            .and_then(|replied| replied.from.as_ref())
            .is_some_and(|author| self.is_bot(author));
        mentioned || replies_to_bot
    }

    /// `text` with the `@bot` suffix of a leading command to this bot removed, and a
    /// mention of the bot before a command (`@bot /new`) too.
    fn strip_command_suffix(&self, text: &str, entities: &[MessageEntityRef<'_>]) -> String {
        let leading_mention = entities.iter().find(|e| {
            e.start() == 0
                && matches!(e.kind(), MessageEntityKind::Mention)
                && self.is_bot_handle(e.text())
        });
        if let Some(mention) = leading_mention {
            let rest = text[mention.end()..].trim_start();
            if rest.starts_with('/') {
                return rest.to_owned();
            }
        }
        let leading_command = entities
            .iter()
            .find(|e| e.start() == 0 && matches!(e.kind(), MessageEntityKind::BotCommand));
        if let Some(command) = leading_command {
            if let Some((name, handle)) = command.text().split_once('@') {
                if self.is_bot_handle(handle) {
                    return format!("{name}{}", &text[command.end()..]);
                }
            }
        }
        text.to_owned()
    }

    fn replied_context(&self, replied: &Message) -> String {
        let author = if replied.from.as_ref().is_some_and(|u| self.is_bot(u)) {
            "the assistant".to_owned()
        } else {
            sender_of(replied)
                .name
                .unwrap_or_else(|| "someone".to_owned())
        };
        let text = replied.text().or(replied.caption()).unwrap_or("(no text)");
        format!("Replying to {author} (message {}): {text}", replied.id.0)
    }
}

/// The files `message` carries, as the channel describes them.
fn attachments_of(message: &Message) -> Vec<Attachment> {
    let file = |kind, meta: &FileMeta| {
        Attachment::new(kind)
            .with_file_id(meta.id.to_string())
            .with_size(u64::from(meta.size))
    };
    let named = |attachment: Attachment, mime: Option<&str>, name: Option<&String>| {
        let attachment = match mime {
            Some(mime) => attachment.with_mime_type(mime),
            None => attachment,
        };
        match name {
            Some(name) => attachment.with_file_name(name.clone()),
            None => attachment,
        }
    };
    let mut files = Vec::new();
    if let Some(photo) = message.photo().and_then(<[PhotoSize]>::last) {
        files.push(file(AttachmentKind::Image, &photo.file).with_mime_type("image/jpeg"));
    }
    if let Some(sticker) = message.sticker() {
        let mime = if sticker.is_video() {
            "video/webm"
        } else if sticker.is_animated() {
            "application/x-tgsticker"
        } else {
            "image/webp"
        };
        files.push(file(AttachmentKind::Sticker, &sticker.file).with_mime_type(mime));
    }
    if let Some(video) = message.video() {
        let video_file = file(AttachmentKind::Video, &video.file);
        files.push(named(
            video_file,
            video.mime_type.as_ref().map(|m| m.essence_str()),
            video.file_name.as_ref(),
        ));
    }
    if let Some(note) = message.video_note() {
        files.push(file(AttachmentKind::Video, &note.file).with_mime_type("video/mp4"));
    }
    if let Some(animation) = message.animation() {
        let animated = file(AttachmentKind::Video, &animation.file);
        files.push(named(
            animated,
            animation.mime_type.as_ref().map(|m| m.essence_str()),
            animation.file_name.as_ref(),
        ));
    } else if let Some(document) = message.document() {
        // An animation's message also carries it as a document.
        let document_file = file(AttachmentKind::Document, &document.file);
        files.push(named(
            document_file,
            document.mime_type.as_ref().map(|m| m.essence_str()),
            document.file_name.as_ref(),
        ));
    }
    if let Some(voice) = message.voice() {
        let voice_file = file(AttachmentKind::Audio, &voice.file);
        files.push(named(
            voice_file,
            voice.mime_type.as_ref().map(|m| m.essence_str()),
            None,
        ));
    }
    if let Some(audio) = message.audio() {
        let audio_file = file(AttachmentKind::Audio, &audio.file);
        files.push(named(
            audio_file,
            audio.mime_type.as_ref().map(|m| m.essence_str()),
            audio.file_name.as_ref(),
        ));
    }
    files
}

/// Who wrote `message`: the chat it was sent on behalf of (an anonymous admin, a
/// channel: its `from` is a placeholder user), else the user.
fn sender_of(message: &Message) -> Sender {
    let mut sender = Sender::default();
    if let Some(chat) = &message.sender_chat {
        sender.id = Some(chat.id.to_string());
        sender.name = chat.title().map(str::to_owned);
        sender.username = chat.username().map(str::to_owned);
    } else if let Some(user) = &message.from {
        sender.id = Some(user.id.to_string());
        sender.name = Some(user.full_name());
        sender.username = user.username.clone();
    }
    sender
}

/// The message `message` replies to, if the sender chose to reply: in a forum topic,
/// Telegram sets every message's `reply_to_message` to the topic's creation message,
/// which is not a reply.
fn replied_to(message: &Message) -> Option<&Message> {
    message
        .reply_to_message()
        .filter(|replied| replied.forum_topic_created().is_none())
}

fn is_forum(chat: &Chat) -> bool {
    use teloxide::types::{ChatKind, PublicChatKind};
    matches!(
        &chat.kind,
        ChatKind::Public(public) if matches!(&public.kind, PublicChatKind::Supergroup(s) if s.is_forum)
    )
}

fn forwarded_from(message: &Message) -> Option<String> {
    if let Some(user) = message.forward_from_user() {
        return Some(user.full_name());
    }
    if let Some(chat) = message.forward_from_chat() {
        return Some(chat.title().unwrap_or("a chat").to_owned());
    }
    message.forward_from_sender_name().map(str::to_owned)
}
