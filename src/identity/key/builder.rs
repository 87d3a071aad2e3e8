//! Building keys from conversations: the [`KeyBuilder`] seam and OpenClaw's rules.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::normalize::{
    normalize_account_id, normalize_agent_id, normalize_channel, normalize_main_key,
    normalize_peer_id, DEFAULT_MAIN_KEY,
};
use super::{AgentId, PeerKind, SessionKey, RESERVED_SEGMENTS};
use crate::error::{Error, IdKind, Result};

/// The longest id accepted inside a key, in bytes.
const MAX_SEGMENT_LEN: usize = 1024;

/// What a channel adapter knows about where a message was said: the facts a session key
/// is derived from.
///
/// ```
/// use agent_sessions::identity::{Conversation, PeerKind};
///
/// let topic = Conversation::group("telegram", "-1001234567890")
///     .with_agent("support")
///     .with_forum_topic(42);
/// assert_eq!(topic.kind, PeerKind::Group);
/// assert_eq!(topic.thread_id.as_deref(), Some("42"));
/// assert!(topic.forum);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Conversation {
    /// The agent that answers; `None` uses the builder's default agent.
    pub agent_id: Option<String>,
    /// The channel (`telegram`, `whatsapp`, `slack`, …).
    pub channel: String,
    /// The bot's account on the channel, for bots with several numbers or workspaces.
    pub account_id: Option<String>,
    /// Direct message, group or channel.
    pub kind: PeerKind,
    /// The DM peer, or the group or channel id.
    pub peer_id: Option<String>,
    /// The thread or topic inside the conversation.
    pub thread_id: Option<String>,
    /// Whether the group is a Telegram forum (only forum topics get their own session).
    pub forum: bool,
    /// The canonical person on the other end of a DM, for [`DmScope::PerPerson`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_id: Option<String>,
}

impl Conversation {
    /// A conversation of `kind` with `peer_id` on `channel`.
    pub fn new(channel: impl Into<String>, kind: PeerKind, peer_id: impl Into<String>) -> Self {
        Conversation {
            agent_id: None,
            channel: channel.into(),
            account_id: None,
            kind,
            peer_id: Some(peer_id.into()),
            thread_id: None,
            forum: false,
            person_id: None,
        }
    }

    /// A direct message from `peer_id`.
    pub fn direct(channel: impl Into<String>, peer_id: impl Into<String>) -> Self {
        Conversation::new(channel, PeerKind::Direct, peer_id)
    }

    /// A group chat `group_id`.
    pub fn group(channel: impl Into<String>, group_id: impl Into<String>) -> Self {
        Conversation::new(channel, PeerKind::Group, group_id)
    }

    /// A channel `channel_id` (Slack, Discord, …).
    pub fn channel(channel: impl Into<String>, channel_id: impl Into<String>) -> Self {
        Conversation::new(channel, PeerKind::Channel, channel_id)
    }

    /// Routes the conversation to `agent_id`.
    pub fn with_agent(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Sets the bot's account on the channel.
    pub fn with_account(mut self, account_id: impl Into<String>) -> Self {
        self.account_id = Some(account_id.into());
        self
    }

    /// Places the message in a thread.
    pub fn with_thread(mut self, thread_id: impl ToString) -> Self {
        self.thread_id = Some(thread_id.to_string());
        self
    }

    /// Names the canonical person of a DM.
    pub fn with_person(mut self, person_id: impl Into<String>) -> Self {
        self.person_id = Some(person_id.into());
        self
    }

    /// Places the message in a Telegram forum topic.
    pub fn with_forum_topic(mut self, topic_id: impl ToString) -> Self {
        self.thread_id = Some(topic_id.to_string());
        self.forum = true;
        self
    }
}

/// Turns a [`Conversation`] into a [`SessionKey`].
///
/// The seam for hosts with their own keying rules (one session per person, per ticket,
/// …). [`DefaultKeyBuilder`] implements OpenClaw's.
pub trait KeyBuilder: Send + Sync {
    /// The key of the session `conversation` belongs to.
    fn build(&self, conversation: &Conversation) -> Result<SessionKey>;

    /// The canonical person a person id (`42`, `staff:17`) is linked to, if another:
    /// the manager records that id in sessions, log lines and summaries, and the raw id
    /// beside it. The default links nothing.
    fn canonical_person(&self, person_id: &str) -> Option<String> {
        let _ = person_id;
        None
    }

    /// Every id linked to the canonical person `canonical` (the reverse of
    /// [`canonical_person`](Self::canonical_person)), so that erasing a person reaches
    /// each of their ids. The default links none.
    fn linked_ids(&self, canonical: &str) -> Vec<String> {
        let _ = canonical;
        Vec::new()
    }
}

/// How direct messages are grouped into sessions (OpenClaw's `session.dmScope`).
///
/// The default is [`DmScope::PerChannelPeer`]: each person gets their own session, so
/// one user never sees another's conversation. OpenClaw itself falls back to
/// [`DmScope::Main`] (one session shared by every DM sender, right only for a personal
/// assistant with one owner); a manager configured from `openclaw.json` keeps that
/// fallback and warns when a second sender writes into the shared session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// Every DM shares the agent's main session: `agent:<id>:main`. Everyone who writes
    /// to the bot reads and writes the same conversation: use it only for a bot with one
    /// user.
    Main,
    /// One session per peer across channels: `agent:<id>:dm:<peer>`.
    PerPeer,
    /// One session per peer per channel: `agent:<id>:<channel>:dm:<peer>` (the default).
    #[default]
    PerChannelPeer,
    /// One per peer, channel and bot account: `agent:<id>:<channel>:<account>:dm:<peer>`.
    PerAccountChannelPeer,
    /// One per canonical person, whatever the channel (one session per person across
    /// channels, per agent variant): `agent:<id>:person:<personId>`, where identity links
    /// map person ids (`42`, `staff:17`) to one name. A DM without a known person falls
    /// back to `per-channel-peer`.
    PerPerson,
}

/// Whether sessions are per sender or one for everyone (OpenClaw's `session.scope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionScope {
    /// Sessions follow the key rules.
    #[default]
    PerSender,
    /// Every message goes to the `global` session.
    Global,
}

/// The word that marks a DM peer in keys.
///
/// OpenClaw 2026.2 wrote `dm`; 3.x writes `direct`. Both parse; this picks what is built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmMarker {
    /// `…:dm:<peer>` (this crate's default, and OpenClaw 2026.2).
    #[default]
    Dm,
    /// `…:direct:<peer>` (OpenClaw 3.x).
    Direct,
}

impl DmMarker {
    fn as_str(self) -> &'static str {
        match self {
            DmMarker::Dm => "dm",
            DmMarker::Direct => "direct",
        }
    }
}

/// Links one person's ids on several channels to one canonical name, so their DMs share
/// a session (OpenClaw's `session.identityLinks`).
///
/// Ids are matched case-insensitively as `<peerId>` or `<channel>:<peerId>`; canonical
/// names are tried in the order they were added.
///
/// ```
/// use agent_sessions::identity::{Conversation, DefaultKeyBuilder, DmScope, IdentityLinks, KeyBuilder};
///
/// let links = IdentityLinks::new().link("alice", ["telegram:123", "whatsapp:+15550100"]);
/// let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerPeer).identity_links(links);
/// let on_telegram = keys.build(&Conversation::direct("telegram", "123"))?;
/// let on_whatsapp = keys.build(&Conversation::direct("whatsapp", "+15550100"))?;
/// assert_eq!(on_telegram, on_whatsapp);
/// assert_eq!(on_telegram.as_str(), "agent:main:dm:alice");
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IdentityLinks(IndexMap<String, Vec<String>>);

impl IdentityLinks {
    /// No links.
    pub fn new() -> Self {
        IdentityLinks::default()
    }

    /// Links `ids` to `canonical`.
    pub fn link<I, S>(mut self, canonical: impl Into<String>, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.0
            .entry(canonical.into())
            .or_default()
            .extend(ids.into_iter().map(Into::into));
        self
    }

    /// The canonical name `peer_id` on `channel` is linked to, if any.
    pub fn resolve(&self, channel: &str, peer_id: &str) -> Option<&str> {
        let scoped = format!("{}:{}", channel.trim(), peer_id.trim());
        self.find(&[peer_id, &scoped])
    }

    /// The canonical name a person id (`42`, `staff:17`) is linked to, if any: for
    /// [`DmScope::PerPerson`], where one human has a different id per directory.
    pub(crate) fn canonical(&self, person_id: &str) -> Option<&str> {
        self.find(&[person_id])
    }

    /// The ids linked to `canonical` (compared without regard to case).
    pub(crate) fn linked(&self, canonical: &str) -> Vec<String> {
        let wanted = canonical.trim().to_lowercase();
        self.0
            .iter()
            .filter(|(name, _)| name.trim().to_lowercase() == wanted)
            .flat_map(|(_, ids)| ids.iter().cloned())
            .collect()
    }

    fn find(&self, candidates: &[&str]) -> Option<&str> {
        let candidates: Vec<String> = candidates.iter().map(|c| c.trim().to_lowercase()).collect();
        self.0.iter().find_map(|(canonical, ids)| {
            let canonical = canonical.trim();
            let linked = ids
                .iter()
                .any(|id| candidates.contains(&id.trim().to_lowercase()));
            (!canonical.is_empty() && linked).then_some(canonical)
        })
    }
}

/// OpenClaw's keying rules.
///
/// | conversation | key |
/// | --- | --- |
/// | DM, [`DmScope::Main`] | `agent:<agentId>:main` |
/// | DM, [`DmScope::PerPeer`] | `agent:<agentId>:dm:<peer>` |
/// | DM, [`DmScope::PerChannelPeer`] (default) | `agent:<agentId>:<channel>:dm:<peer>` |
/// | DM, [`DmScope::PerAccountChannelPeer`] | `agent:<agentId>:<channel>:<account>:dm:<peer>` |
/// | group / channel | `agent:<agentId>:<channel>:group:<id>` / `…:channel:<id>` |
/// | thread | `<key>:thread:<threadId>` |
/// | Telegram forum topic | `agent:<agentId>:telegram:group:<chatId>:topic:<topicId>` |
/// | [`SessionScope::Global`] | `global` |
///
/// Ids are trimmed and lower-cased; an empty group id is `unknown`; a DM without its
/// sender's id is refused ([`Error::InvalidId`](crate::Error::InvalidId)) unless DMs share
/// the main session ([`DmScope::Main`]) — OpenClaw would put it in the main session, which
/// every sender without an id would then share. Telegram thread ids only become topic keys in forum
/// groups (in other chats they are reply chains, not conversations).
///
/// ```
/// use agent_sessions::identity::{Conversation, DefaultKeyBuilder, DmScope, KeyBuilder};
///
/// let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerAccountChannelPeer);
/// let key = keys.build(&Conversation::direct("Telegram", "User123").with_account("Work"))?;
/// assert_eq!(key.as_str(), "agent:main:telegram:work:dm:user123");
///
/// let thread = keys.build(&Conversation::channel("slack", "C1").with_thread("1700.42"))?;
/// assert_eq!(thread.as_str(), "agent:main:slack:channel:c1:thread:1700.42");
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct DefaultKeyBuilder {
    default_agent: AgentId,
    main_key: Option<String>,
    dm_scope: DmScope,
    scope: SessionScope,
    identity_links: IdentityLinks,
    dm_marker: DmMarker,
}

impl DefaultKeyBuilder {
    /// Agent `main`, main key `main`, per-sender sessions, and DMs per channel and peer
    /// ([`DmScope::PerChannelPeer`]; OpenClaw's own fallback is the shared `main`).
    pub fn new() -> Self {
        DefaultKeyBuilder::default()
    }

    /// The agent for conversations that do not name one.
    pub fn default_agent(mut self, agent: AgentId) -> Self {
        self.default_agent = agent;
        self
    }

    /// The name of the main session (`session.mainKey`), normalised.
    pub fn main_key(mut self, name: &str) -> Self {
        self.main_key = Some(normalize_main_key(name));
        self
    }

    /// How DMs are grouped.
    pub fn dm_scope(mut self, scope: DmScope) -> Self {
        self.dm_scope = scope;
        self
    }

    /// Per-sender sessions or one global session.
    pub fn scope(mut self, scope: SessionScope) -> Self {
        self.scope = scope;
        self
    }

    /// Links a person's ids across channels.
    pub fn identity_links(mut self, links: IdentityLinks) -> Self {
        self.identity_links = links;
        self
    }

    /// `dm` (default) or `direct` in DM keys.
    pub fn dm_marker(mut self, marker: DmMarker) -> Self {
        self.dm_marker = marker;
        self
    }

    fn main_session_key(&self, agent: &str) -> Result<String> {
        let main = key_segment(
            IdKind::MainKey,
            self.main_key.as_deref().unwrap_or(DEFAULT_MAIN_KEY),
        )?;
        Ok(format!("agent:{agent}:{main}"))
    }

    fn dm_key(&self, agent: &str, channel: &str, conversation: &Conversation) -> Result<String> {
        if self.dm_scope == DmScope::PerPerson {
            if let Some(person) = conversation
                .person_id
                .as_deref()
                .filter(|p| !p.trim().is_empty())
            {
                let person = self.identity_links.canonical(person).unwrap_or(person);
                let person = key_segment(IdKind::Peer, person)?;
                return Ok(format!("agent:{agent}:person:{person}"));
            }
        }
        if self.dm_scope == DmScope::Main {
            return self.main_session_key(agent);
        }
        let peer = conversation.peer_id.as_deref().unwrap_or("").trim();
        if peer.is_empty() {
            // OpenClaw puts such a message in the main session, which every sender
            // without an id would then share: refused instead.
            return Err(Error::invalid_id(
                IdKind::Peer,
                peer,
                "a direct message needs its sender's id (DmScope::Main shares one session)",
            ));
        }
        let peer = self.identity_links.resolve(channel, peer).unwrap_or(peer);
        let peer = key_segment(IdKind::Peer, peer)?;
        let marker = self.dm_marker.as_str();
        Ok(match self.dm_scope {
            DmScope::Main => unreachable!("handled above"),
            DmScope::PerPeer => format!("agent:{agent}:{marker}:{peer}"),
            DmScope::PerChannelPeer | DmScope::PerPerson => {
                format!("agent:{agent}:{channel}:{marker}:{peer}")
            }
            DmScope::PerAccountChannelPeer => {
                let account =
                    normalize_account_id(conversation.account_id.as_deref().unwrap_or(""));
                format!("agent:{agent}:{channel}:{account}:{marker}:{peer}")
            }
        })
    }
}

impl KeyBuilder for DefaultKeyBuilder {
    fn build(&self, conversation: &Conversation) -> Result<SessionKey> {
        if self.scope == SessionScope::Global {
            return Ok(SessionKey::global());
        }
        let agent = match &conversation.agent_id {
            Some(raw) => normalize_agent_id(raw),
            None => self.default_agent.as_str().to_owned(),
        };
        let channel = match normalize_channel(&conversation.channel) {
            Some(channel) => key_segment(IdKind::Channel, &channel)?,
            None => "unknown".to_owned(),
        };
        let base = match conversation.kind {
            PeerKind::Direct => self.dm_key(&agent, &channel, conversation)?,
            kind => {
                let id = match conversation.peer_id.as_deref().and_then(normalize_peer_id) {
                    Some(id) => key_segment(IdKind::Peer, &id)?,
                    None => "unknown".to_owned(),
                };
                format!("agent:{agent}:{channel}:{kind}:{id}")
            }
        };
        let thread = match conversation
            .thread_id
            .as_deref()
            .and_then(normalize_peer_id)
        {
            Some(id) => Some(key_segment(IdKind::Thread, &id)?),
            None => None,
        };
        let key = match thread {
            // Telegram's message_thread_id is a forum topic only in forum groups.
            Some(id) if channel == "telegram" => {
                if conversation.forum && conversation.kind.is_group() {
                    format!("{base}:topic:{id}")
                } else {
                    base
                }
            }
            Some(id) => format!("{base}:thread:{id}"),
            None => base,
        };
        SessionKey::parse(&key)
    }

    fn linked_ids(&self, canonical: &str) -> Vec<String> {
        self.identity_links.linked(canonical)
    }

    fn canonical_person(&self, person_id: &str) -> Option<String> {
        self.identity_links
            .canonical(person_id)
            .filter(|canonical| *canonical != person_id.trim())
            .map(str::to_owned)
    }
}

/// Normalises an id (trim, lower-case) and checks it can sit inside a key without
/// changing the key's structure.
pub(crate) fn key_segment(kind: IdKind, raw: &str) -> Result<String> {
    let Some(id) = normalize_peer_id(raw) else {
        return Err(Error::invalid_id(kind, raw, "the id is empty"));
    };
    if id.len() > MAX_SEGMENT_LEN {
        return Err(Error::invalid_id(
            kind,
            raw,
            "the id is longer than 1024 bytes",
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::invalid_id(
            kind,
            raw,
            "the id contains a control character",
        ));
    }
    for segment in id.split(':') {
        if segment.is_empty() {
            return Err(Error::invalid_id(
                kind,
                raw,
                "the id has an empty `:` segment",
            ));
        }
        if RESERVED_SEGMENTS.contains(&segment) {
            return Err(Error::invalid_id(
                kind,
                raw,
                "the id contains a structural key segment (dm, direct, group, channel, thread, topic, subagent)",
            ));
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(builder: &DefaultKeyBuilder, conversation: Conversation) -> String {
        builder.build(&conversation).unwrap().as_str().to_owned()
    }

    #[test]
    fn dm_keys_follow_every_scope() {
        let conversation = || Conversation::direct("Telegram", " User123 ").with_account("Work");
        let cases = [
            (DmScope::Main, "agent:main:main"),
            (DmScope::PerPeer, "agent:main:dm:user123"),
            (DmScope::PerChannelPeer, "agent:main:telegram:dm:user123"),
            (
                DmScope::PerAccountChannelPeer,
                "agent:main:telegram:work:dm:user123",
            ),
        ];
        for (scope, expected) in cases {
            let builder = DefaultKeyBuilder::new().dm_scope(scope);
            assert_eq!(build(&builder, conversation()), expected, "{scope:?}");
        }
    }

    #[test]
    fn account_defaults_and_direct_marker() {
        let builder = DefaultKeyBuilder::new()
            .dm_scope(DmScope::PerAccountChannelPeer)
            .dm_marker(DmMarker::Direct);
        assert_eq!(
            build(&builder, Conversation::direct("discord", "42")),
            "agent:main:discord:default:direct:42"
        );
    }

    #[test]
    fn a_dm_without_its_senders_id_is_refused_unless_dms_share_the_main_key() {
        for scope in [
            DmScope::PerPeer,
            DmScope::PerChannelPeer,
            DmScope::PerAccountChannelPeer,
            DmScope::PerPerson,
        ] {
            let builder = DefaultKeyBuilder::new().dm_scope(scope);
            assert!(
                matches!(
                    builder.build(&Conversation::direct("telegram", "  ")),
                    Err(Error::InvalidId {
                        kind: IdKind::Peer,
                        ..
                    })
                ),
                "{scope:?}"
            );
        }
        let shared = DefaultKeyBuilder::new()
            .dm_scope(DmScope::Main)
            .main_key("Home");
        assert_eq!(
            build(&shared, Conversation::direct("telegram", "  ")),
            "agent:main:home"
        );
    }

    #[test]
    fn group_and_channel_keys() {
        let builder = DefaultKeyBuilder::new();
        assert_eq!(
            build(&builder, Conversation::group("WhatsApp", "120363@G.US")),
            "agent:main:whatsapp:group:120363@g.us"
        );
        assert_eq!(
            build(
                &builder,
                Conversation::channel("slack", "C1").with_agent("Ops Bot")
            ),
            "agent:ops-bot:slack:channel:c1"
        );
        assert_eq!(
            build(&builder, Conversation::group("", "")),
            "agent:main:unknown:group:unknown"
        );
        assert_eq!(
            build(&builder, Conversation::group("matrix", "!room:example.org")),
            "agent:main:matrix:group:!room:example.org"
        );
    }

    #[test]
    fn telegram_threads_are_topics_only_in_forums() {
        let builder = DefaultKeyBuilder::new();
        assert_eq!(
            build(
                &builder,
                Conversation::group("telegram", "-1001").with_forum_topic(42)
            ),
            "agent:main:telegram:group:-1001:topic:42"
        );
        assert_eq!(
            build(
                &builder,
                Conversation::group("telegram", "-1001").with_thread(42)
            ),
            "agent:main:telegram:group:-1001"
        );
        assert_eq!(
            build(
                &builder,
                Conversation::group("discord", "g1").with_thread("T9")
            ),
            "agent:main:discord:group:g1:thread:t9"
        );
    }

    #[test]
    fn blank_thread_ids_give_the_base_key() {
        let builder = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
        // (conversation, thread id) → key
        let cases = [
            (
                Conversation::channel("slack", "C1"),
                "",
                "agent:main:slack:channel:c1",
            ),
            (
                Conversation::channel("slack", "C1"),
                "  ",
                "agent:main:slack:channel:c1",
            ),
            (
                Conversation::group("discord", "g1"),
                "\t",
                "agent:main:discord:group:g1",
            ),
            (
                Conversation::direct("signal", "+1555"),
                " ",
                "agent:main:signal:dm:+1555",
            ),
            (
                Conversation::channel("slack", "C1"),
                " T1 ",
                "agent:main:slack:channel:c1:thread:t1",
            ),
        ];
        for (conversation, thread, expected) in cases {
            let conversation = conversation.with_thread(thread);
            assert_eq!(build(&builder, conversation), expected, "{thread:?}");
        }
        let topic = Conversation::group("telegram", "-1001").with_forum_topic(" ");
        assert_eq!(build(&builder, topic), "agent:main:telegram:group:-1001");
    }

    #[test]
    fn global_scope_ignores_everything() {
        let builder = DefaultKeyBuilder::new().scope(SessionScope::Global);
        assert_eq!(
            build(&builder, Conversation::group("slack", "c1")),
            "global"
        );
    }

    #[test]
    fn identity_links_take_the_first_matching_canonical() {
        let links = IdentityLinks::new()
            .link("  ", ["123"])
            .link("Alice", ["TELEGRAM:123"])
            .link("bob", ["123"]);
        let builder = DefaultKeyBuilder::new()
            .dm_scope(DmScope::PerChannelPeer)
            .identity_links(links);
        assert_eq!(
            build(&builder, Conversation::direct("telegram", "123")),
            "agent:main:telegram:dm:alice"
        );
        assert_eq!(
            build(&builder, Conversation::direct("sms", "123")),
            "agent:main:sms:dm:bob"
        );
    }

    #[test]
    fn the_default_scope_gives_each_dm_sender_a_session() {
        let builder = DefaultKeyBuilder::new();
        assert_eq!(
            build(&builder, Conversation::direct("telegram", "42")),
            "agent:main:telegram:dm:42"
        );
        assert_eq!(
            build(&builder, Conversation::direct("telegram", "43")),
            "agent:main:telegram:dm:43"
        );
    }

    #[test]
    fn identity_links_do_not_apply_to_the_main_scope() {
        let links = IdentityLinks::new().link("alice", ["123"]);
        let builder = DefaultKeyBuilder::new()
            .dm_scope(DmScope::Main)
            .identity_links(links);
        assert_eq!(
            build(&builder, Conversation::direct("telegram", "123")),
            "agent:main:main"
        );
    }

    #[test]
    fn remote_ids_cannot_forge_key_structure() {
        let builder = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
        let forged = [
            Conversation::direct("webchat", "victim:thread:1"),
            Conversation::direct("webchat", "x:group:family"),
            Conversation::direct("webchat", "a::b"),
            Conversation::direct("webchat", "line\nbreak"),
            Conversation::group("whatsapp", "g:subagent:1"),
            Conversation::group("telegram", "-1").with_forum_topic("1:topic:2"),
            Conversation::direct("evil:dm", "x"),
        ];
        for conversation in forged {
            assert!(
                matches!(builder.build(&conversation), Err(Error::InvalidId { .. })),
                "{conversation:?}"
            );
        }
    }

    #[test]
    fn hostile_agent_ids_are_normalised_into_safe_directory_names() {
        let builder = DefaultKeyBuilder::new();
        let key = builder
            .build(&Conversation::group("slack", "c1").with_agent("../../etc/passwd"))
            .unwrap();
        assert_eq!(key.agent_id(), Some("etc-passwd"));
    }
}
