//! Identity: which conversation a message belongs to, who wrote it, and who may open it.
//!
//! # Session keys
//!
//! A [`SessionKey`] is the canonical, validated name of one conversation, in OpenClaw's
//! format `agent:<agentId>:<rest>` (or `global`). Keys are built from a [`Conversation`]
//! by a [`KeyBuilder`]; [`DefaultKeyBuilder`] implements OpenClaw's rules (dm scopes,
//! groups, channels, threads, Telegram forum topics, identity links).
//!
//! ```
//! use agent_sessions::identity::{Conversation, DefaultKeyBuilder, DmScope, KeyBuilder, PeerKind};
//!
//! let keys = DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer);
//! let dm = keys.build(&Conversation::direct("telegram", "123456789"))?;
//! assert_eq!(dm.as_str(), "agent:main:telegram:dm:123456789");
//!
//! let group = keys.build(&Conversation::group("whatsapp", "120363@g.us"))?;
//! assert_eq!(group.as_str(), "agent:main:whatsapp:group:120363@g.us");
//! assert_eq!(group.peer_kind(), Some(PeerKind::Group));
//! # Ok::<(), agent_sessions::Error>(())
//! ```
//!
//! # Safety of keys and ids
//!
//! Keys never become file paths; only the agent id does (as a directory name), and it is
//! restricted to `[a-z0-9_-]`. Ids placed inside a key may not contain control
//! characters, empty `:` segments, or a segment that is one of the structural markers
//! (`dm`, `direct`, `group`, `channel`, `thread`, `topic`, `subagent`), so a remote user
//! cannot forge a key that reads as someone else's thread or group.
//!
//! # People
//!
//! Every channel resolves to one canonical person. A person who texts from their phone
//! and later opens the web chat is one person; a session keyed by person (see
//! [`DmScope::PerPerson`]) is then one conversation across transports.
//!
//! ```
//! use agent_sessions::identity::{DefaultIdentityResolver, Identifier, IdentityResolver, PersonType, StaticDirectory};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let staff = StaticDirectory::new(PersonType::Staff, "staff")
//!     .with("+61412345678", "17", "Jane Smith", Some("support_worker"));
//! let resolver = DefaultIdentityResolver::new().directory(staff);
//!
//! let jane = resolver.resolve("sms", &Identifier::Phone("+61 412 345 678".into())).await?;
//! assert_eq!(jane.id, "staff:17");
//! let stranger = resolver.resolve("sms", &Identifier::Phone("+61 400 000 000".into())).await?;
//! assert_eq!((stranger.id.as_str(), stranger.person_type), ("phone:+61400000000", PersonType::External));
//! # Ok(())
//! # }
//! ```
//!
//! # Who may open a session
//!
//! Who may read and change a session.
//!
//! A [`Caller`] is the owner — who may open every session — or a participant, who may
//! open only the sessions they take part in ([`SessionEntry::participants`](crate::SessionEntry::participants)). Either
//! may be limited to a key namespace, as a channel's token is limited to its channel's
//! keys. One rule decides; the manager applies it on every
//! path through [`SessionManager::scoped`](crate::SessionManager::scoped).
//!
//! # One agent's data
//!
//! Per-agent isolation: no agent reads or writes another agent's sessions.
//!
//! [`AgentScoped`] wraps a [`SessionStore`](crate::SessionStore) or a [`TranscriptStore`](crate::transcript::TranscriptStore) shared by several
//! agents and lets one agent through: its keys and transcripts, nothing else. Another
//! agent's session is [`AccessDenial::OtherAgent`](crate::AccessDenial::OtherAgent); listings, log queries and live
//! updates show only the agent's own. A manager built with
//! [`isolate_to_agent`](crate::manager::SessionManagerBuilder::isolate_to_agent) wraps
//! its store and transcripts so.
//!
//! ```
//! use agent_sessions::identity::AgentScoped;
//! use agent_sessions::prelude::*;
//! use agent_sessions::{AccessDenial, Error};
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! let shared = Arc::new(InMemoryStore::new());
//! let ops = AgentScoped::new(AgentId::new("ops")?, shared.clone());
//!
//! let theirs = SessionKey::parse("agent:main:main")?;
//! shared.put(&theirs, SessionEntry::new("s-1", 0)).await?;
//! let denied = ops.get(&theirs).await;
//! assert!(matches!(denied, Err(Error::AccessDenied { reason: AccessDenial::OtherAgent, .. })));
//! assert!(ops.list(&ListFilter::new()).await?.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! The `global` key has no agent, so an isolated store refuses it: a global session
//! is shared by definition.
//!
//! # Workspaces
//!
//! Session workspaces: a folder per conversation for files.
//!
//! Each workspace is `<root>/<uuid>/` with `summary.md`, `attachments/`, `exports/` and
//! `context/`. The UUID is the crate's own (the session's first id), never an engine's
//! session id, so every engine finds the same folder. With
//! [`WorkspaceSharing::PerIdentity`] a person's sessions with every variant of one agent
//! identity (`reggie_oc`, `reggie_fd`) share one folder; with
//! [`WorkspaceSharing::PerSession`] each has its own.
//!
//! Folders are created owner-only (0700) and files owner-only (0600); file names are
//! validated (one plain component: no separators, no `..`); a symlink planted in a
//! workspace is neither followed nor written through.
//!
//! ```
//! use agent_sessions::identity::{Area, Workspaces};
//!
//! # fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let workspaces = Workspaces::new(dir.path());
//! let workspace = workspaces.open(uuid::Uuid::new_v4())?;
//! workspace.write(Area::Exports, "roster.csv", b"name,shift\n")?;
//! assert_eq!(workspace.read(Area::Exports, "roster.csv")?, b"name,shift\n");
//! assert!(workspace.write(Area::Exports, "../escape.csv", b"").is_err());
//! # Ok(())
//! # }
//! ```

pub(crate) mod access;
pub(crate) mod isolation;
pub(crate) mod key;
pub(crate) mod scoped;
pub(crate) mod workspace;

pub use key::{
    legacy_request_key, AgentId, Conversation, DefaultKeyBuilder, DmMarker, DmScope, IdentityLinks,
    KeyBuilder, PeerKind, SessionKey, SessionScope, DEFAULT_AGENT_ID,
};

pub use access::{Caller, Principal};
pub use isolation::AgentScoped;
pub use workspace::{Area, Workspace, WorkspaceSharing, Workspaces};

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::identity::key::normalize_e164;

/// What kind of person someone is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PersonType {
    /// An authenticated user of the host's own application (admin staff).
    User,
    /// Field staff, found in the staff directory.
    Staff,
    /// A participant (client), found in the participant directory.
    Participant,
    /// Someone not in any directory.
    External,
    /// A system integration (API key).
    System,
}

impl PersonType {
    /// The word used in prompts and ids.
    pub fn as_str(self) -> &'static str {
        match self {
            PersonType::User => "user",
            PersonType::Staff => "staff",
            PersonType::Participant => "participant",
            PersonType::External => "external",
            PersonType::System => "system",
        }
    }

    /// The authority this type of person has.
    pub fn authority(self) -> Authority {
        match self {
            PersonType::User => Authority::Full,
            PersonType::Staff | PersonType::System => Authority::Standard,
            PersonType::Participant => Authority::Limited,
            PersonType::External => Authority::Minimal,
        }
    }
}

impl fmt::Display for PersonType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much an agent may do for a person. It is told to the agent in the prompt, not
/// enforced by the crate: the agents are trusted runtimes.
///
/// `System` integrations get `Standard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Authority {
    /// Any data, reports, every tool.
    Full,
    /// Their own roster, shifts, leave, policies, training.
    Standard,
    /// Their own care plan, schedules, support contacts.
    Limited,
    /// General information; direct them to the right contact.
    Minimal,
}

impl Authority {
    /// `full`, `standard`, `limited` or `minimal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Authority::Full => "full",
            Authority::Standard => "standard",
            Authority::Limited => "limited",
            Authority::Minimal => "minimal",
        }
    }

    /// What the agent should do at this level, for prompts.
    pub(crate) fn guidance(self) -> &'static str {
        match self {
            Authority::Full => "Can query any data, run reports, access all tools",
            Authority::Standard => "Own roster, shifts, leave, policies, training",
            Authority::Limited => "Own care plan, schedules, support contacts",
            Authority::Minimal => "General information, direct to appropriate contact",
        }
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A canonical person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Person {
    /// What kind of person.
    pub person_type: PersonType,
    /// The canonical id (`42`, `staff:17`, `phone:+61412345678`, `api:key_abc123`).
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Role (`support_worker`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// E-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Phone, E.164.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    /// Anything else the host keeps.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Person {
    /// A person of `person_type` with `id`.
    pub fn new(person_type: PersonType, id: impl Into<String>) -> Self {
        Person {
            person_type,
            id: id.into(),
            name: None,
            role: None,
            email: None,
            phone: None,
            metadata: Map::new(),
        }
    }

    /// This person's authority.
    pub fn authority(&self) -> Authority {
        self.person_type.authority()
    }
}

/// What a channel knows about who is on the other end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
#[non_exhaustive]
pub enum Identifier {
    /// An authenticated subject (a decoded JWT's claims).
    Subject {
        /// The subject (`sub`).
        sub: String,
        /// First name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_name: Option<String>,
        /// Last name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_name: Option<String>,
        /// Role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        role: Option<String>,
        /// E-mail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        email: Option<String>,
    },
    /// A phone number, in any spelling.
    Phone(String),
    /// The id of an API key.
    ApiKey(String),
}

/// Maps a channel and what it knows of the sender to a canonical [`Person`].
#[async_trait]
pub trait IdentityResolver: Send + Sync {
    /// The person `identifier` is on `channel`; [`Error::UnknownChannel`] for a channel
    /// this resolver does not know.
    async fn resolve(&self, channel: &str, identifier: &Identifier) -> Result<Person>;
}

/// Someone found in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// Their id in the directory (without prefix).
    pub id: String,
    /// Their name.
    pub name: Option<String>,
    /// Their role.
    pub role: Option<String>,
}

/// A host-supplied directory of people reachable by phone (staff, participants).
#[async_trait]
pub trait Directory: Send + Sync {
    /// The type of the people in it.
    fn person_type(&self) -> PersonType;
    /// The prefix of their person ids (`staff` gives `staff:17`).
    fn prefix(&self) -> &str;
    /// The person with this phone number (E.164), if any.
    async fn lookup_phone(&self, e164: &str) -> Result<Option<DirectoryEntry>>;
}

/// A directory held in memory.
#[derive(Debug, Clone)]
pub struct StaticDirectory {
    person_type: PersonType,
    prefix: String,
    by_phone: HashMap<String, DirectoryEntry>,
}

impl StaticDirectory {
    /// An empty directory of `person_type`, ids prefixed with `prefix`.
    pub fn new(person_type: PersonType, prefix: &str) -> Self {
        StaticDirectory {
            person_type,
            prefix: prefix.to_owned(),
            by_phone: HashMap::new(),
        }
    }

    /// Adds someone; the phone number is normalised.
    pub fn with(mut self, phone: &str, id: &str, name: &str, role: Option<&str>) -> Self {
        self.by_phone.insert(
            normalize_e164(phone),
            DirectoryEntry {
                id: id.to_owned(),
                name: Some(name.to_owned()),
                role: role.map(str::to_owned),
            },
        );
        self
    }
}

#[async_trait]
impl Directory for StaticDirectory {
    fn person_type(&self) -> PersonType {
        self.person_type
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    async fn lookup_phone(&self, e164: &str) -> Result<Option<DirectoryEntry>> {
        Ok(self.by_phone.get(e164).cloned())
    }
}

/// The default resolver, configurable:
///
/// | channel | identifier | person |
/// | --- | --- | --- |
/// | `admin_chat`, `header_widget` (subject channels) | JWT subject | `user`, id = `sub`, name, role, e-mail from the claims |
/// | `sms`, `whatsapp` (phone channels) | phone number | the first directory that knows the normalised number (`staff:<id>`, `participant:<id>`), else `external`, `phone:<E.164>` |
/// | `api` (API channels) | API key id | `system`, `api:<id>` |
/// | anything else | — | [`Error::UnknownChannel`] |
#[derive(Clone)]
pub struct DefaultIdentityResolver {
    subject_channels: Vec<String>,
    phone_channels: Vec<String>,
    api_channels: Vec<String>,
    directories: Vec<Arc<dyn Directory>>,
}

impl fmt::Debug for DefaultIdentityResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefaultIdentityResolver")
            .field("subject_channels", &self.subject_channels)
            .field("phone_channels", &self.phone_channels)
            .field("api_channels", &self.api_channels)
            .field("directories", &self.directories.len())
            .finish()
    }
}

impl Default for DefaultIdentityResolver {
    fn default() -> Self {
        DefaultIdentityResolver::new()
    }
}

impl DefaultIdentityResolver {
    /// The default channels (`admin_chat`, `header_widget`, `web`; `sms`, `whatsapp`,
    /// `signal`; `api`), no directories yet.
    pub fn new() -> Self {
        let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        DefaultIdentityResolver {
            subject_channels: owned(&["admin_chat", "header_widget", "web"]),
            phone_channels: owned(&["sms", "whatsapp", "signal"]),
            api_channels: owned(&["api"]),
            directories: Vec::new(),
        }
    }

    /// Adds a directory; directories are searched in the order they were added.
    pub fn directory(mut self, directory: impl Directory + 'static) -> Self {
        self.directories.push(Arc::new(directory));
        self
    }

    /// Resolves `channel` by phone number.
    pub fn phone_channel(mut self, channel: &str) -> Self {
        self.phone_channels.push(channel.trim().to_lowercase());
        self
    }

    async fn by_phone(&self, raw: &str) -> Result<Person> {
        let phone = normalize_e164(raw);
        for directory in &self.directories {
            if let Some(found) = directory.lookup_phone(&phone).await? {
                return Ok(Person {
                    name: found.name,
                    role: found.role,
                    phone: Some(phone),
                    ..Person::new(
                        directory.person_type(),
                        format!("{}:{}", directory.prefix(), found.id),
                    )
                });
            }
        }
        Ok(Person {
            phone: Some(phone.clone()),
            ..Person::new(PersonType::External, format!("phone:{phone}"))
        })
    }
}

#[async_trait]
impl IdentityResolver for DefaultIdentityResolver {
    async fn resolve(&self, channel: &str, identifier: &Identifier) -> Result<Person> {
        let channel = channel.trim().to_lowercase();
        let is = |list: &[String]| list.contains(&channel);
        let mismatch = || Error::UnknownChannel {
            channel: channel.clone(),
        };
        if is(&self.subject_channels) {
            let Identifier::Subject {
                sub,
                first_name,
                last_name,
                role,
                email,
            } = identifier
            else {
                return Err(mismatch());
            };
            let name = [first_name.as_deref(), last_name.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
            return Ok(Person {
                name: (!name.trim().is_empty()).then(|| name.trim().to_owned()),
                role: role.clone(),
                email: email.clone(),
                ..Person::new(PersonType::User, sub.trim())
            });
        }
        if is(&self.phone_channels) {
            let Identifier::Phone(phone) = identifier else {
                return Err(mismatch());
            };
            return self.by_phone(phone).await;
        }
        if is(&self.api_channels) {
            let Identifier::ApiKey(key) = identifier else {
                return Err(mismatch());
            };
            return Ok(Person::new(
                PersonType::System,
                format!("api:{}", key.trim()),
            ));
        }
        Err(mismatch())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_resolution_matrix_of_seed_000() {
        let resolver = DefaultIdentityResolver::new()
            .directory(StaticDirectory::new(PersonType::Staff, "staff").with(
                "+61411111111",
                "17",
                "Jane Smith",
                Some("support_worker"),
            ))
            .directory(
                StaticDirectory::new(PersonType::Participant, "participant")
                    .with("+61422222222", "5", "Sam Lee", None)
                    // Also staff: the staff directory is asked first.
                    .with("+61411111111", "99", "Jane as participant", None),
            );
        let subject = Identifier::Subject {
            sub: "42".into(),
            first_name: Some("Ada".into()),
            last_name: Some("Admin".into()),
            role: Some("manager".into()),
            email: Some("ada@example.com".into()),
        };
        // (channel, identifier) → (type, id)
        let cases = [
            ("admin_chat", subject.clone(), PersonType::User, "42"),
            ("header_widget", subject.clone(), PersonType::User, "42"),
            (
                "sms",
                Identifier::Phone("+61 411 111 111".into()),
                PersonType::Staff,
                "staff:17",
            ),
            (
                "SMS",
                Identifier::Phone("61422222222".into()),
                PersonType::Participant,
                "participant:5",
            ),
            (
                "sms",
                Identifier::Phone("+61412345678".into()),
                PersonType::External,
                "phone:+61412345678",
            ),
            (
                "api",
                Identifier::ApiKey("key_abc123".into()),
                PersonType::System,
                "api:key_abc123",
            ),
        ];
        for (channel, identifier, person_type, id) in cases {
            let person = resolver.resolve(channel, &identifier).await.unwrap();
            assert_eq!(
                (person.person_type, person.id.as_str()),
                (person_type, id),
                "{channel} {identifier:?}"
            );
        }
        let ada = resolver.resolve("admin_chat", &subject).await.unwrap();
        assert_eq!(
            (
                ada.name.as_deref(),
                ada.role.as_deref(),
                ada.email.as_deref()
            ),
            (Some("Ada Admin"), Some("manager"), Some("ada@example.com"))
        );
        let jane = resolver
            .resolve("sms", &Identifier::Phone("+61411111111".into()))
            .await
            .unwrap();
        assert_eq!(
            (jane.name.as_deref(), jane.role.as_deref()),
            (Some("Jane Smith"), Some("support_worker"))
        );
        for (channel, identifier) in [
            ("webhook", Identifier::Phone("+1".into())),
            ("telegram", Identifier::Phone("+1".into())),
            ("sms", Identifier::ApiKey("x".into())),
        ] {
            assert!(
                matches!(
                    resolver.resolve(channel, &identifier).await,
                    Err(Error::UnknownChannel { .. })
                ),
                "{channel}"
            );
        }
    }

    #[test]
    fn authority_levels() {
        assert_eq!(PersonType::User.authority(), Authority::Full);
        assert_eq!(PersonType::Staff.authority(), Authority::Standard);
        assert_eq!(PersonType::Participant.authority(), Authority::Limited);
        assert_eq!(PersonType::External.authority(), Authority::Minimal);
        assert_eq!(PersonType::System.authority(), Authority::Standard);
    }
}
