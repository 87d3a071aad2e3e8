//! What a channel adapter knows about an inbound message.

use serde::{Deserialize, Serialize};

use crate::identity::key::{
    normalize_channel, resolve_group, Conversation, GroupResolution, PeerKind,
};
use crate::identity::{Person, PersonType};
use crate::inbound::attachment::Attachment;
use crate::store::entry::ThreadId;

/// Who sent a message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sender {
    /// The sender's id on the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Username or handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A tag (Discord discriminator style).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Phone number in E.164.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e164: Option<String>,
}

/// One inbound message, as a channel adapter describes it: plain data, built with the
/// `with_*` methods.
///
/// `from` is the conversation's address as the channel writes it (OpenClaw's `From`):
/// the sender's address in a DM, the group's in a group (a WhatsApp JID such as
/// `120363…@g.us`, `slack:channel:C1`). The person who wrote is [`sender`](Self::sender).
///
/// ```
/// use agent_sessions::InboundMessage;
///
/// let dm = InboundMessage::direct("telegram", "123456789", "hi there").with_sender_name("Alice");
/// let group = InboundMessage::group("whatsapp", "120363@g.us", "+15550100", "@bot dinner?")
///     .with_group_subject("Family")
///     .mentioning_agent();
/// assert!(group.is_group() && !dm.is_group());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InboundMessage {
    /// The channel (`telegram`, `whatsapp`, `slack`, …).
    pub channel: String,
    /// The bot's account on the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Direct, group or channel; when absent, detected from `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<PeerKind>,
    /// Who wrote the message.
    #[serde(default)]
    pub sender: Sender,
    /// The conversation's address as the channel writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Where replies go; when absent, the group, else `from`, else the peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The DM peer; when absent, the sender's id, else `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_id: Option<String>,
    /// The group or channel id; when absent, detected from `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// The group's subject or title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_subject: Option<String>,
    /// The channel's name in its workspace (`#general`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_channel: Option<String>,
    /// The workspace or space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_space: Option<String>,
    /// The thread or topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<ThreadId>,
    /// The thread's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_label: Option<String>,
    /// Whether the group is a Telegram forum.
    #[serde(default)]
    pub forum: bool,
    /// The agent that answers; the manager's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// An explicit session key from the adapter, used instead of the key builder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The session a new thread session forks from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_key: Option<String>,
    /// The text.
    #[serde(default)]
    pub body: String,
    /// Whether the message addresses the agent (a mention, a reply to it).
    #[serde(default)]
    pub mentioned: bool,
    /// Whether the sender is the bot's owner.
    #[serde(default)]
    pub sender_is_owner: bool,
    /// The canonical person the sender is (from identity resolution), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_id: Option<String>,
    /// What kind of person the sender is (from identity resolution), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_type: Option<PersonType>,
    /// The channel's message id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// When the channel says the message was sent, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
    /// The UI surface (web, mobile, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surface: Option<String>,
    /// A label for the conversation that overrides the derived one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_label: Option<String>,
    /// Metadata about the message (link previews, forwarded-from, file names) that the
    /// model may read but must not obey: it goes into the untrusted-context block.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untrusted_context: Vec<String>,
    /// The files that came with the message; the model's text for it carries one
    /// placeholder per file (see [`Attachment`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// Whether `body` is a model input logged before (a turn answered again): the
    /// inbound pipeline takes it as it is.
    #[serde(skip)]
    pub(crate) verbatim: bool,
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

impl InboundMessage {
    /// A message on `channel` with `body`; say who and where with the `with_*` methods.
    pub fn new(channel: impl Into<String>, body: impl Into<String>) -> Self {
        InboundMessage {
            channel: channel.into(),
            body: body.into(),
            ..InboundMessage::default()
        }
    }

    /// A direct message from `sender_id`.
    pub fn direct(
        channel: impl Into<String>,
        sender_id: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        let sender_id = sender_id.into();
        InboundMessage {
            chat_type: Some(PeerKind::Direct),
            from: Some(sender_id.clone()),
            sender: Sender {
                id: Some(sender_id),
                ..Sender::default()
            },
            ..InboundMessage::new(channel, body)
        }
    }

    /// A message from `sender_id` in the group `group_id`.
    pub fn group(
        channel: impl Into<String>,
        group_id: impl Into<String>,
        sender_id: impl Into<String>,
        body: impl Into<String>,
    ) -> Self {
        let group_id = group_id.into();
        InboundMessage {
            chat_type: Some(PeerKind::Group),
            from: Some(group_id.clone()),
            group_id: Some(group_id),
            sender: Sender {
                id: Some(sender_id.into()),
                ..Sender::default()
            },
            ..InboundMessage::new(channel, body)
        }
    }

    /// Marks the conversation as a channel (Slack, Discord) rather than a group.
    pub fn in_channel(mut self) -> Self {
        self.chat_type = Some(PeerKind::Channel);
        self
    }

    /// Sets the bot's account.
    pub fn with_account(mut self, account_id: impl Into<String>) -> Self {
        self.account_id = Some(account_id.into());
        self
    }

    /// Sets the sender's display name.
    pub fn with_sender_name(mut self, name: impl Into<String>) -> Self {
        self.sender.name = Some(name.into());
        self
    }

    /// Sets the sender.
    pub fn with_sender(mut self, sender: Sender) -> Self {
        self.sender = sender;
        self
    }

    /// Sets the conversation address.
    pub fn with_from(mut self, from: impl Into<String>) -> Self {
        self.from = Some(from.into());
        self
    }

    /// Sets where replies go.
    pub fn with_reply_to(mut self, to: impl Into<String>) -> Self {
        self.to = Some(to.into());
        self
    }

    /// Sets the group's subject.
    pub fn with_group_subject(mut self, subject: impl Into<String>) -> Self {
        self.group_subject = Some(subject.into());
        self
    }

    /// Sets the channel name and workspace (Slack `#general` in `acme`).
    pub fn with_group_channel(mut self, channel: impl Into<String>, space: Option<String>) -> Self {
        self.group_channel = Some(channel.into());
        self.group_space = space;
        self
    }

    /// Places the message in a thread.
    pub fn with_thread(mut self, thread_id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Places the message in a Telegram forum topic.
    pub fn with_forum_topic(mut self, topic_id: i64) -> Self {
        self.thread_id = Some(ThreadId::Number(topic_id));
        self.forum = true;
        self
    }

    /// Routes the message to `agent_id`.
    pub fn with_agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Uses an explicit session key instead of the key builder.
    pub fn with_session_key(mut self, key: impl Into<String>) -> Self {
        self.session_key = Some(key.into());
        self
    }

    /// Names the session a new thread session forks from.
    pub fn with_parent_session(mut self, key: impl Into<String>) -> Self {
        self.parent_session_key = Some(key.into());
        self
    }

    /// Marks the message as addressed to the agent.
    pub fn mentioning_agent(mut self) -> Self {
        self.mentioned = true;
        self
    }

    /// Names the canonical person who sent the message.
    pub fn from_person(mut self, person_id: impl Into<String>) -> Self {
        self.person_id = Some(person_id.into());
        self
    }

    /// Names the resolved person who sent the message: their id and type.
    pub fn from_resolved(mut self, person: &Person) -> Self {
        self.person_id = Some(person.id.clone());
        self.person_type = Some(person.person_type);
        self
    }

    /// Who the sender is for access control: the canonical person, else
    /// `<channel>:<sender id>` (the sender's id, else `from` in a direct chat).
    ///
    /// ```
    /// use agent_sessions::InboundMessage;
    ///
    /// let anonymous = InboundMessage::direct("Telegram", "42", "hi");
    /// assert_eq!(anonymous.participant_id().as_deref(), Some("telegram:42"));
    /// let known = anonymous.from_person("staff:17");
    /// assert_eq!(known.participant_id().as_deref(), Some("staff:17"));
    /// ```
    pub fn participant_id(&self) -> Option<String> {
        if let Some(person) = present(self.person_id.as_deref()) {
            return Some(person.to_owned());
        }
        let direct_peer = (!self.is_group())
            .then(|| present(self.peer_id.as_deref()).or(present(self.from.as_deref())))
            .flatten();
        let id = present(self.sender.id.as_deref()).or(direct_peer)?;
        let channel = normalize_channel(&self.channel)?;
        Some(format!("{channel}:{id}"))
    }

    /// Marks the sender as the bot's owner.
    pub fn from_owner(mut self) -> Self {
        self.sender_is_owner = true;
        self
    }

    /// Adds an untrusted-context entry.
    pub fn with_untrusted_context(mut self, entry: impl Into<String>) -> Self {
        self.untrusted_context.push(entry.into());
        self
    }

    /// Adds a file that came with the message.
    pub fn with_attachment(mut self, attachment: Attachment) -> Self {
        self.attachments.push(attachment);
        self
    }

    /// Sets the channel's message id.
    pub fn with_message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// The group or channel the message was said in, if any: from `group_id` when the
    /// chat type says group or channel, else detected from `from` as OpenClaw does.
    pub(crate) fn group_resolution(&self) -> Option<GroupResolution> {
        let chat_type = self.chat_type.map(PeerKind::as_str);
        if let (Some(kind), Some(id)) = (
            self.chat_type.filter(|k| k.is_group()),
            present(self.group_id.as_deref()),
        ) {
            let channel = crate::identity::key::normalize_channel(&self.channel)
                .unwrap_or_else(|| "unknown".into());
            let id = id.to_lowercase();
            return Some(GroupResolution {
                key: format!("{channel}:{kind}:{id}"),
                channel,
                id,
                kind,
            });
        }
        let from = present(self.from.as_deref()).or(present(self.group_id.as_deref()))?;
        resolve_group(from, chat_type, Some(&self.channel))
    }

    /// Whether the message was said in a group or channel.
    pub fn is_group(&self) -> bool {
        self.chat_type.is_some_and(PeerKind::is_group) || self.group_resolution().is_some()
    }

    /// Whether the message belongs to a thread: it has a thread id, a thread label or a
    /// parent session (OpenClaw's `resolveThreadFlag`).
    pub fn is_thread(&self) -> bool {
        self.thread_id.is_some()
            || present(self.thread_label.as_deref()).is_some()
            || present(self.parent_session_key.as_deref()).is_some()
    }

    /// The conversation a key is built from.
    pub fn conversation(&self) -> Conversation {
        let mut conversation = match self.group_resolution() {
            Some(group) => group.conversation(),
            None => {
                let peer = present(self.peer_id.as_deref())
                    .or(present(self.sender.id.as_deref()))
                    .or(present(self.from.as_deref()))
                    .unwrap_or("");
                Conversation::direct(self.channel.clone(), peer)
            }
        };
        if let Some(agent) = present(self.agent_id.as_deref()) {
            conversation = conversation.with_agent(agent);
        }
        if let Some(account) = present(self.account_id.as_deref()) {
            conversation = conversation.with_account(account);
        }
        if let Some(person) = present(self.person_id.as_deref()) {
            conversation = conversation.with_person(person);
        }
        if let Some(thread) = &self.thread_id {
            conversation = if self.forum {
                conversation.with_forum_topic(thread)
            } else {
                conversation.with_thread(thread)
            };
        }
        conversation
    }

    /// Where a reply goes: `to`, else the group, else `from`, else the peer.
    pub fn reply_to(&self) -> Option<String> {
        present(self.to.as_deref())
            .map(str::to_owned)
            .or_else(|| {
                self.chat_type
                    .filter(|k| k.is_group())
                    .and(present(self.group_id.as_deref()).map(str::to_owned))
            })
            .or_else(|| present(self.from.as_deref()).map(str::to_owned))
            .or_else(|| {
                present(self.peer_id.as_deref())
                    .or(present(self.sender.id.as_deref()))
                    .map(str::to_owned)
            })
    }

    /// The chat type to record: the message's own, else what group detection found,
    /// else direct (as OpenClaw defaults it).
    pub fn peer_kind(&self) -> PeerKind {
        self.chat_type
            .or_else(|| self.group_resolution().map(|g| g.kind))
            .unwrap_or(PeerKind::Direct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::key::{DefaultKeyBuilder, DmScope, KeyBuilder};

    fn key(message: &InboundMessage) -> String {
        DefaultKeyBuilder::new()
            .dm_scope(DmScope::PerChannelPeer)
            .build(&message.conversation())
            .unwrap()
            .to_string()
    }

    #[test]
    fn messages_map_to_conversations() {
        let cases = [
            (
                InboundMessage::direct("telegram", "123", "hi"),
                "agent:main:telegram:dm:123",
            ),
            (
                InboundMessage::group("whatsapp", "120363@g.us", "+1555", "hi"),
                "agent:main:whatsapp:group:120363@g.us",
            ),
            (
                InboundMessage::new("whatsapp", "hi").with_from("120363@g.us"),
                "agent:main:whatsapp:group:120363@g.us",
            ),
            (
                InboundMessage::group("slack", "C1", "U1", "hi")
                    .in_channel()
                    .with_thread("1700.1")
                    .with_agent("support"),
                "agent:support:slack:channel:c1:thread:1700.1",
            ),
            (
                InboundMessage::group("telegram", "-1001", "42", "hi").with_forum_topic(7),
                "agent:main:telegram:group:-1001:topic:7",
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(key(&message), expected, "{message:?}");
        }
    }

    #[test]
    fn reply_route_defaults() {
        assert_eq!(
            InboundMessage::direct("telegram", "123", "hi")
                .reply_to()
                .as_deref(),
            Some("123")
        );
        assert_eq!(
            InboundMessage::group("whatsapp", "g@g.us", "+1", "hi")
                .reply_to()
                .as_deref(),
            Some("g@g.us")
        );
        assert_eq!(
            InboundMessage::direct("telegram", "123", "hi")
                .with_reply_to("telegram:123")
                .reply_to()
                .as_deref(),
            Some("telegram:123")
        );
    }

    #[test]
    fn serde_round_trip() {
        let message = InboundMessage::group("slack", "C1", "U1", "hello")
            .in_channel()
            .with_thread("1700.1")
            .mentioning_agent();
        let json = serde_json::to_string(&message).unwrap();
        assert!(json.contains("\"chatType\":\"channel\""), "{json}");
        assert_eq!(
            serde_json::from_str::<InboundMessage>(&json).unwrap(),
            message
        );
    }
}
