//! Session keys: which conversation a message belongs to (see the module above).

mod builder;
pub(crate) mod session_key;
pub(crate) use builder::key_segment;
mod group;
mod legacy;
mod normalize;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IdKind, KeyProblem, Result};

pub use builder::{
    Conversation, DefaultKeyBuilder, DmMarker, DmScope, IdentityLinks, KeyBuilder, SessionScope,
};
pub(crate) use group::resolve_group;
pub(crate) use group::GroupResolution;
pub use legacy::legacy_request_key;
pub(crate) use normalize::GroupNameParts;
pub use normalize::DEFAULT_AGENT_ID;
pub(crate) use normalize::{
    group_display_name, normalize_account_id, normalize_agent_id, normalize_channel,
    normalize_chat_type, normalize_e164, normalize_main_key, normalize_peer_id, DEFAULT_MAIN_KEY,
    MAX_ID_LEN,
};
pub use session_key::SessionKey;

/// The longest session key, in bytes (OpenClaw's normalised-key cache bound).
pub(crate) const MAX_KEY_LEN: usize = 4096;

/// The key of OpenClaw's `global` scope: one session for everyone.
pub(crate) const GLOBAL_KEY: &str = "global";

/// Segments that give a key its structure; ids inside a key may not be one of them.
pub(crate) const RESERVED_SEGMENTS: &[&str] = &[
    "dm", "direct", "group", "channel", "thread", "topic", "subagent",
];

/// What kind of peer a conversation is with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerKind {
    /// A direct message with one person (`dm` is read as this too).
    #[serde(alias = "dm")]
    Direct,
    /// A group chat.
    Group,
    /// A channel (Slack, Discord, …).
    Channel,
}

impl PeerKind {
    /// The word OpenClaw writes for this kind in entries (`direct`, `group`, `channel`).
    pub fn as_str(self) -> &'static str {
        match self {
            PeerKind::Direct => "direct",
            PeerKind::Group => "group",
            PeerKind::Channel => "channel",
        }
    }

    /// Whether this is a group or a channel.
    pub fn is_group(self) -> bool {
        !matches!(self, PeerKind::Direct)
    }
}

impl fmt::Display for PeerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated agent id: 1–64 characters of `[a-z0-9_-]`, not starting with `-`.
///
/// Agent ids name directories (`agents/<agentId>/sessions`), so nothing else gets in.
///
/// ```
/// use agent_sessions::AgentId;
///
/// assert_eq!(AgentId::new("Support")?.as_str(), "support");
/// assert!(AgentId::new("../etc").is_err());
/// assert_eq!(AgentId::normalize("../etc").as_str(), "etc");
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct AgentId(String);

impl AgentId {
    /// Validates `raw` (trimmed, lower-cased) as an agent id.
    pub fn new(raw: &str) -> Result<Self> {
        let lowered = raw.trim().to_ascii_lowercase();
        if is_path_safe_id(&lowered) {
            Ok(AgentId(lowered))
        } else {
            Err(Error::invalid_id(
                IdKind::Agent,
                raw,
                "agent ids are 1-64 characters of [a-z0-9_-], not starting with `-`",
            ))
        }
    }

    /// Normalises any input into an agent id, as OpenClaw's `normalizeAgentId` does.
    pub fn normalize(raw: &str) -> Self {
        AgentId(normalize_agent_id(raw))
    }

    /// The default agent, `main`.
    pub fn main() -> Self {
        AgentId(DEFAULT_AGENT_ID.to_owned())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for AgentId {
    fn default() -> Self {
        AgentId::main()
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for AgentId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        AgentId::new(s)
    }
}

impl<'de> Deserialize<'de> for AgentId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        AgentId::new(&raw).map_err(serde::de::Error::custom)
    }
}

impl AsRef<str> for AgentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Whether a key's rest (or an unscoped key) has the legacy Discord channel shape
/// `discord:[<account>:]guild-<guildId>:channel-<channelId>`.
pub(crate) fn is_legacy_discord_channel(rest: &str) -> bool {
    let segments: Vec<&str> = rest.split(':').collect();
    let (guild, channel) = match segments.as_slice() {
        ["discord", guild, channel] => (*guild, *channel),
        ["discord", account, guild, channel] if !account.is_empty() => (*guild, *channel),
        _ => return false,
    };
    let named = |segment: &str, prefix: &str| {
        segment
            .strip_prefix(prefix)
            .is_some_and(|id| !id.is_empty())
    };
    named(guild, "guild-") && named(channel, "channel-")
}

/// `[a-z0-9_-]{1,64}` not starting with `-`: everything `normalize_agent_id` can return.
fn is_path_safe_id(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ID_LEN
        && bytes[0] != b'-'
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

impl SessionKey {
    /// Parses and canonicalises a key.
    ///
    /// The [`KeyProblem`] of a rejected key says why: among others,
    /// [`KeyProblem::NotAgentScoped`] for a key outside any agent (`cron:nightly`, a
    /// request key: see [`SessionKey::for_agent`]) and [`KeyProblem::MalformedAgentKey`]
    /// for an agent key cut short (`agent:main`).
    ///
    /// ```
    /// use agent_sessions::{Error, KeyProblem, SessionKey};
    ///
    /// let problem = |raw| match SessionKey::parse(raw) {
    ///     Err(Error::InvalidKey { problem, .. }) => Some(problem),
    ///     _ => None,
    /// };
    /// assert_eq!(problem("agent:main"), Some(KeyProblem::MalformedAgentKey));
    /// assert_eq!(problem("cron:nightly"), Some(KeyProblem::NotAgentScoped));
    /// assert_eq!(problem("agent:main:cron:nightly"), None);
    /// ```
    pub fn parse(raw: &str) -> Result<Self> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(Error::invalid_key(raw, KeyProblem::Empty));
        }
        if trimmed.len() > MAX_KEY_LEN {
            return Err(Error::invalid_key(raw, KeyProblem::TooLong));
        }
        if trimmed.chars().any(char::is_control) {
            return Err(Error::invalid_key(raw, KeyProblem::ControlCharacter));
        }
        let lowered = trimmed.to_lowercase();
        if lowered == GLOBAL_KEY {
            return Ok(SessionKey(lowered));
        }
        if let Some(after) = lowered.strip_prefix("agent:") {
            let (agent, rest) = after.split_once(':').unwrap_or((after, ""));
            if agent.is_empty() || rest.is_empty() {
                return Err(Error::invalid_key(raw, KeyProblem::MalformedAgentKey));
            }
        }
        if lowered.split(':').any(str::is_empty) {
            return Err(Error::invalid_key(raw, KeyProblem::EmptySegment));
        }
        let mut parts = lowered.splitn(3, ':');
        let (Some("agent"), Some(agent), Some(_rest)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::invalid_key(raw, KeyProblem::NotAgentScoped));
        };
        if !is_path_safe_id(agent) {
            return Err(Error::invalid_key(raw, KeyProblem::InvalidAgentId));
        }
        Ok(SessionKey(lowered))
    }

    /// The `global` key.
    pub fn global() -> Self {
        SessionKey(GLOBAL_KEY.to_owned())
    }

    /// The main session of an agent: `agent:<agentId>:main`.
    pub fn main(agent: &AgentId) -> Self {
        SessionKey(format!("agent:{agent}:{DEFAULT_MAIN_KEY}"))
    }

    /// Turns a request key into a store key the way OpenClaw's `toAgentStoreSessionKey`
    /// does: blank or `main` is the agent's main key, an `agent:` key is kept, anything
    /// else (`cron:nightly`, `hook:<uuid>`, …) is placed under the agent.
    ///
    /// ```
    /// use agent_sessions::{AgentId, SessionKey};
    ///
    /// let ops = AgentId::new("ops")?;
    /// assert_eq!(SessionKey::for_agent(&ops, "")?.as_str(), "agent:ops:main");
    /// assert_eq!(SessionKey::for_agent(&ops, "Cron:Nightly")?.as_str(), "agent:ops:cron:nightly");
    /// assert_eq!(SessionKey::for_agent(&ops, "agent:main:main")?.as_str(), "agent:main:main");
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn for_agent(agent: &AgentId, request_key: &str) -> Result<Self> {
        let trimmed = request_key.trim();
        if trimmed.is_empty() || trimmed.eq_ignore_ascii_case(DEFAULT_MAIN_KEY) {
            return Ok(SessionKey::main(agent));
        }
        let lowered = trimmed.to_lowercase();
        if lowered.starts_with("agent:") {
            return SessionKey::parse(&lowered);
        }
        SessionKey::parse(&format!("agent:{agent}:{lowered}"))
    }

    /// A new subagent session under `agent`, with a fresh UUID v4:
    /// `agent:<agentId>:subagent:<uuid>`.
    pub(crate) fn new_subagent(agent: &AgentId) -> Self {
        SessionKey(format!("agent:{agent}:subagent:{}", uuid::Uuid::new_v4()))
    }

    /// The subagent session `agent:<agentId>:subagent:<id>`.
    pub fn subagent(agent: &AgentId, id: &str) -> Result<Self> {
        let id = builder::key_segment(IdKind::Subagent, id)?;
        SessionKey::parse(&format!("agent:{agent}:subagent:{id}"))
    }

    /// A subagent spawned by this (subagent) session: this key plus `:subagent:<id>`.
    pub(crate) fn nested_subagent(&self, id: &str) -> Result<Self> {
        let id = builder::key_segment(IdKind::Subagent, id)?;
        SessionKey::parse(&format!("{}:subagent:{id}", self.0))
    }

    /// This key's thread `<key>:thread:<threadId>` (the id is trimmed and lower-cased).
    /// A blank thread id is no thread: the key itself, as OpenClaw's
    /// `resolveThreadSessionKeys` does.
    ///
    /// ```
    /// use agent_sessions::SessionKey;
    ///
    /// let base = SessionKey::parse("agent:main:slack:channel:c1")?;
    /// assert_eq!(base.thread(" 1700.42 ")?.as_str(), "agent:main:slack:channel:c1:thread:1700.42");
    /// assert_eq!(base.thread("  ")?, base);
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn thread(&self, thread_id: &str) -> Result<Self> {
        if thread_id.trim().is_empty() {
            return Ok(self.clone());
        }
        let id = builder::key_segment(IdKind::Thread, thread_id)?;
        SessionKey::parse(&format!("{}:thread:{id}", self.0))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the `global` key.
    pub fn is_global(&self) -> bool {
        self.0 == GLOBAL_KEY
    }

    /// The agent id (`None` for `global`).
    pub fn agent_id(&self) -> Option<&str> {
        self.agent_and_rest().map(|(agent, _)| agent)
    }

    /// Everything after `agent:<agentId>:` (`None` for `global`).
    pub fn rest(&self) -> Option<&str> {
        self.agent_and_rest().map(|(_, rest)| rest)
    }

    fn agent_and_rest(&self) -> Option<(&str, &str)> {
        self.0.strip_prefix("agent:")?.split_once(':')
    }

    fn rest_segments(&self) -> impl Iterator<Item = &str> {
        self.rest().unwrap_or("").split(':')
    }

    /// The kind of peer, read from the key's first `dm`/`direct`/`group`/`channel`
    /// segment; `None` for keys without one (the main key, subagents, cron, …).
    ///
    /// The legacy Discord shape `discord:[<account>:]guild-<g>:channel-<c>` (under
    /// `agent:<id>:`) is a channel too, as OpenClaw's `deriveSessionChatType` reads it.
    ///
    /// ```
    /// use agent_sessions::{PeerKind, SessionKey};
    ///
    /// let legacy = SessionKey::parse("agent:main:discord:default:guild-1:channel-2")?;
    /// assert_eq!(legacy.peer_kind(), Some(PeerKind::Channel));
    /// # Ok::<(), agent_sessions::Error>(())
    /// ```
    pub fn peer_kind(&self) -> Option<PeerKind> {
        self.rest_segments()
            .find_map(|segment| match segment {
                "dm" | "direct" => Some(PeerKind::Direct),
                "group" => Some(PeerKind::Group),
                "channel" => Some(PeerKind::Channel),
                _ => None,
            })
            .or_else(|| {
                self.rest()
                    .is_some_and(is_legacy_discord_channel)
                    .then_some(PeerKind::Channel)
            })
    }

    /// Whether the key names a thread or topic (has a `thread` or `topic` segment).
    pub fn is_thread(&self) -> bool {
        self.rest_segments().any(|s| s == "thread" || s == "topic")
    }

    /// The session a thread or topic key belongs to: everything before the last
    /// `:thread:` or `:topic:`.
    pub fn thread_parent(&self) -> Option<SessionKey> {
        let cut = [":thread:", ":topic:"]
            .iter()
            .filter_map(|marker| self.0.rfind(marker))
            .max()?;
        SessionKey::parse(&self.0[..cut]).ok()
    }

    /// The thread or topic id of a thread key: everything after its last `:thread:` or
    /// `:topic:`.
    pub fn thread_id(&self) -> Option<&str> {
        [":thread:", ":topic:"]
            .iter()
            .filter_map(|marker| self.0.rfind(marker).map(|at| at + marker.len()))
            .max()
            .map(|start| &self.0[start..])
    }

    /// Whether this is a subagent session (`agent:<id>:subagent:…`).
    pub fn is_subagent(&self) -> bool {
        self.rest()
            .is_some_and(|rest| rest.starts_with("subagent:"))
    }

    /// How deeply nested a subagent is: the number of `subagent` segments.
    pub fn subagent_depth(&self) -> usize {
        self.rest_segments().filter(|s| *s == "subagent").count()
    }

    /// Whether this is a cron session (`agent:<id>:cron:…`).
    pub fn is_cron(&self) -> bool {
        self.rest().is_some_and(|rest| rest.starts_with("cron:"))
    }
}

impl FromStr for SessionKey {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        SessionKey::parse(s)
    }
}

impl TryFrom<&str> for SessionKey {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        SessionKey::parse(s)
    }
}

impl<'de> Deserialize<'de> for SessionKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        SessionKey::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_canonicalises_case_and_whitespace() {
        let key = SessionKey::parse("  AGENT:Main:Hook:Webhook:42 ").unwrap();
        assert_eq!(key.as_str(), "agent:main:hook:webhook:42");
        assert_eq!(key.agent_id(), Some("main"));
        assert_eq!(key.rest(), Some("hook:webhook:42"));
    }

    #[test]
    fn parse_rejects_malformed_keys_with_the_reason() {
        let cases: &[(&str, KeyProblem)] = &[
            ("", KeyProblem::Empty),
            ("   ", KeyProblem::Empty),
            // Cut-short agent keys are malformed, not unscoped.
            ("agent:main", KeyProblem::MalformedAgentKey),
            ("AGENT:Main", KeyProblem::MalformedAgentKey),
            (" agent:main ", KeyProblem::MalformedAgentKey),
            ("agent:", KeyProblem::MalformedAgentKey),
            ("agent::main", KeyProblem::MalformedAgentKey),
            ("agent:main:", KeyProblem::MalformedAgentKey),
            // No agent scope at all.
            ("agent", KeyProblem::NotAgentScoped),
            ("agents:main:main", KeyProblem::NotAgentScoped),
            ("main", KeyProblem::NotAgentScoped),
            ("cron:nightly", KeyProblem::NotAgentScoped),
            ("discord:guild-1:channel-2", KeyProblem::NotAgentScoped),
            ("agent:main::x", KeyProblem::EmptySegment),
            ("agent:main:x:", KeyProblem::EmptySegment),
            ("agent:main:dm:a\nb", KeyProblem::ControlCharacter),
            ("agent:main:dm:a\0b", KeyProblem::ControlCharacter),
            ("agent:../etc:main", KeyProblem::InvalidAgentId),
            ("agent:a/b:main", KeyProblem::InvalidAgentId),
            ("agent:-x:main", KeyProblem::InvalidAgentId),
        ];
        for (raw, expected) in cases {
            match SessionKey::parse(raw) {
                Err(Error::InvalidKey { problem, .. }) => {
                    assert_eq!(&problem, expected, "{raw:?}")
                }
                other => panic!("{raw:?}: expected InvalidKey, got {other:?}"),
            }
        }
        let long = format!("agent:main:{}", "x".repeat(MAX_KEY_LEN));
        assert!(matches!(
            SessionKey::parse(&long),
            Err(Error::InvalidKey {
                problem: KeyProblem::TooLong,
                ..
            })
        ));
    }

    #[test]
    fn global_is_a_key_without_agent() {
        let key = SessionKey::parse("GLOBAL").unwrap();
        assert!(key.is_global());
        assert_eq!(key.agent_id(), None);
        assert_eq!(key.peer_kind(), None);
    }

    #[test]
    fn classifiers_read_the_structure() {
        let cases: &[(&str, Option<PeerKind>, bool, Option<&str>)] = &[
            ("agent:main:main", None, false, None),
            ("agent:main:dm:u1", Some(PeerKind::Direct), false, None),
            (
                "agent:main:discord:direct:u1",
                Some(PeerKind::Direct),
                false,
                None,
            ),
            (
                "agent:main:telegram:default:dm:u1",
                Some(PeerKind::Direct),
                false,
                None,
            ),
            (
                "agent:main:whatsapp:group:120363@g.us",
                Some(PeerKind::Group),
                false,
                None,
            ),
            (
                "agent:main:slack:channel:c1:thread:t1",
                Some(PeerKind::Channel),
                true,
                Some("agent:main:slack:channel:c1"),
            ),
            (
                "agent:main:telegram:group:-1001:topic:42",
                Some(PeerKind::Group),
                true,
                Some("agent:main:telegram:group:-1001"),
            ),
            (
                "agent:main:slack:channel:c1:thread:t1:thread:t2",
                Some(PeerKind::Channel),
                true,
                Some("agent:main:slack:channel:c1:thread:t1"),
            ),
            // The legacy Discord shape is a channel, with or without an account.
            (
                "agent:main:discord:default:guild-123:channel-456",
                Some(PeerKind::Channel),
                false,
                None,
            ),
            (
                "agent:ops:discord:guild-123:channel-456",
                Some(PeerKind::Channel),
                false,
                None,
            ),
            ("agent:main:discord:guild-123", None, false, None),
            ("agent:main:discord:guild-:channel-456", None, false, None),
            (
                "agent:main:discord:a:b:guild-1:channel-2",
                None,
                false,
                None,
            ),
            ("agent:main:slack:guild-1:channel-2", None, false, None),
            ("agent:main:discord:channel-1:guild-2", None, false, None),
        ];
        for (raw, kind, thread, parent) in cases {
            let key = SessionKey::parse(raw).unwrap();
            assert_eq!(key.peer_kind(), *kind, "{raw}");
            assert_eq!(key.is_thread(), *thread, "{raw}");
            assert_eq!(
                key.thread_parent().as_ref().map(SessionKey::as_str),
                *parent,
                "{raw}"
            );
            assert_eq!(key.thread_id().is_some(), *thread, "{raw}");
        }
    }

    #[test]
    fn thread_ids_are_the_last_thread_segment() {
        let key = SessionKey::parse("agent:main:slack:channel:c1:thread:t1:thread:1700.5").unwrap();
        assert_eq!(key.thread_id(), Some("1700.5"));
        let topic = SessionKey::parse("agent:main:telegram:group:-1:topic:42").unwrap();
        assert_eq!(topic.thread_id(), Some("42"));
    }

    #[test]
    fn subagents_nest() {
        let main = AgentId::main();
        let key = SessionKey::subagent(&main, "task1").unwrap();
        assert_eq!(key.as_str(), "agent:main:subagent:task1");
        assert!(key.is_subagent());
        assert_eq!(key.subagent_depth(), 1);
        let nested = key.nested_subagent("step2").unwrap();
        assert_eq!(nested.subagent_depth(), 2);
        let fresh = SessionKey::new_subagent(&main);
        assert!(fresh.is_subagent());
        assert!(
            uuid::Uuid::parse_str(fresh.rest().unwrap().strip_prefix("subagent:").unwrap()).is_ok()
        );
        assert!(!SessionKey::main(&main).is_subagent());
        assert!(SessionKey::parse("agent:main:cron:nightly")
            .unwrap()
            .is_cron());
    }

    #[test]
    fn subagent_and_thread_ids_cannot_forge_structure() {
        let main = AgentId::main();
        assert!(SessionKey::subagent(&main, "x:group:y").is_err());
        let base = SessionKey::main(&main);
        assert!(base.thread("a:b").is_ok());
        assert!(base.thread("topic").is_err());
    }

    #[test]
    fn thread_keys_follow_resolve_thread_session_keys() {
        let base = SessionKey::parse("agent:main:slack:channel:c1").unwrap();
        // thread id → the key, or the id's rejection
        let cases: &[(&str, Option<&str>)] = &[
            (
                "1700.42",
                Some("agent:main:slack:channel:c1:thread:1700.42"),
            ),
            ("  T9 ", Some("agent:main:slack:channel:c1:thread:t9")),
            ("", Some("agent:main:slack:channel:c1")),
            ("   ", Some("agent:main:slack:channel:c1")),
            ("\t\n", Some("agent:main:slack:channel:c1")),
            ("x:thread:y", None),
            ("a\0b", None),
            ("a::b", None),
        ];
        for (thread_id, expected) in cases {
            match (base.thread(thread_id), expected) {
                (Ok(key), Some(expected)) => assert_eq!(key.as_str(), *expected, "{thread_id:?}"),
                (Err(Error::InvalidId { kind, .. }), None) => {
                    assert_eq!(kind, IdKind::Thread, "{thread_id:?}")
                }
                (other, _) => panic!("{thread_id:?}: unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn agent_ids_are_path_safe() {
        for bad in ["", "..", ".", "a/b", "a\\b", "-x", "a b", &"a".repeat(65)] {
            assert!(AgentId::new(bad).is_err(), "{bad:?}");
        }
        for good in ["main", "Support", "_private", "a-", "reggie_oc"] {
            assert!(AgentId::new(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn keys_round_trip_through_serde() {
        let key = SessionKey::parse("agent:main:dm:alice").unwrap();
        let json = serde_json::to_string(&key).unwrap();
        assert_eq!(json, "\"agent:main:dm:alice\"");
        let back: SessionKey = serde_json::from_str(&json).unwrap();
        assert_eq!(back, key);
        assert!(serde_json::from_str::<SessionKey>("\"not a key\"").is_err());
    }
}
