//! OpenClaw's configuration (`openclaw.json`), and a manager that behaves as the
//! gateway it configures.
//!
//! An OpenClaw gateway reads its session rules from `~/.openclaw/openclaw.json` (JSON5:
//! comments, trailing commas and unquoted keys are fine). [`OpenClawConfig`] reads the
//! settings that decide sessions — `session.scope`, `dmScope`, `mainKey`,
//! `identityLinks`, `reset`, `resetByType`, `resetByChannel`, `idleMinutes`,
//! `resetTriggers`, `sendPolicy`, `store`; `messages.groupChat.historyLimit`;
//! `agents.defaults.envelopeTimezone` and the default agent of `agents.list` — plus the
//! `OPENCLAW_SESSION_CACHE_TTL_MS` variable, and
//! [`SessionManager::connect_openclaw`](crate::SessionManager::connect_openclaw) builds
//! a manager over the gateway's own files with them.
//!
//! ```
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! std::fs::write(
//!     dir.path().join("openclaw.json"),
//!     r#"{
//!       // one session per person per channel
//!       session: { dmScope: "per-channel-peer", resetTriggers: ["/fresh"] },
//!     }"#,
//! )
//! .expect("the configuration is written");
//! let manager = SessionManager::connect_openclaw(dir.path()).await?.build()?;
//! let resolution = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
//! assert_eq!(resolution.key.as_str(), "agent:main:telegram:dm:42");
//! # Ok(())
//! # }
//! ```
//!
//! Settings this crate does not use (channels, models, tools, …) are ignored and logged
//! at `debug`; a setting it uses with a value OpenClaw would refuse is an
//! [`Error::Config`] naming the setting. Where OpenClaw corrects a value as it applies
//! it (an `atHour` of 30, an `idleMinutes` of 2.5, an unknown envelope time zone), so
//! does this, with a warning.

mod apply;
mod env;
mod locate;
mod parse;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::freshness::policy::{ResetConfig, Zone};
use crate::freshness::triggers::DEFAULT_RESET_TRIGGERS;
use crate::identity::key::{AgentId, DmScope, IdentityLinks, SessionScope, DEFAULT_MAIN_KEY};
use crate::inbound::chatter::DEFAULT_GROUP_HISTORY_LIMIT;
use crate::reply::send_policy::SendPolicyConfig;
use crate::store::DEFAULT_CACHE_TTL;

pub use env::OpenClawEnv;
pub use locate::OpenClawLocation;
pub(crate) use locate::CONFIG_FILE_NAME;

/// The largest configuration file read (16 MiB); a larger one is [`Error::Config`].
pub(crate) const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// What an OpenClaw gateway's configuration says about sessions, and where its files are.
///
/// [`Default`] is OpenClaw's defaults (what a gateway without a configuration file
/// does): per-sender sessions, every DM in the agent's main session, a daily reset at
/// 04:00 host time, `/new` and `/reset`, replies always allowed, 50 messages of group
/// history, envelopes in host time, agent `main`, a 45 s store cache, state in
/// `~/.openclaw`.
///
/// ```
/// use agent_sessions::ops::openclaw::OpenClawConfig;
/// use agent_sessions::DmScope;
///
/// let config = OpenClawConfig::from_json5_str(r#"{
///   session: {
///     dmScope: 'per-peer',
///     identityLinks: { alice: ['telegram:123', 'whatsapp:+15550100'] },
///     reset: { mode: 'idle', idleMinutes: 90 },
///   },
///   messages: { groupChat: { historyLimit: 20 } },
///   channels: { telegram: { botToken: '…' } }, // not a session setting: ignored
/// }"#)?;
/// assert_eq!(config.dm_scope, DmScope::PerPeer);
/// assert_eq!(config.group_history_limit, 20);
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenClawConfig {
    /// The state directory: sessions under `agents/<agentId>/sessions/`, and
    /// transcripts there whatever `store` says.
    pub state_dir: PathBuf,
    /// The file the settings were read from; `None` when there was none.
    pub file: Option<PathBuf>,
    /// `session.scope`: per-sender sessions, or one `global` session.
    pub scope: SessionScope,
    /// `session.dmScope`: how direct messages are grouped into sessions.
    pub dm_scope: DmScope,
    /// `session.mainKey`, normalised (trimmed, lower-cased; `main` when blank).
    pub main_key: String,
    /// `session.identityLinks`: one person's ids on several channels.
    pub identity_links: IdentityLinks,
    /// `session.reset`, `resetByType`, `resetByChannel` and the legacy `idleMinutes`,
    /// resolved in host time as OpenClaw does.
    pub reset: ResetConfig,
    /// `session.resetTriggers`, or `/new` and `/reset` when none are set.
    pub reset_triggers: Vec<String>,
    /// `session.sendPolicy`.
    pub send_policy: SendPolicyConfig,
    /// `session.store`: the store-file template, if set (see
    /// [`JsonFileOptions::store_path`](crate::JsonFileOptions::store_path)).
    pub store: Option<String>,
    /// `messages.groupChat.historyLimit`: group messages kept for context per group
    /// (0 keeps none).
    pub group_history_limit: usize,
    /// `messages.queue` (`mode`, `debounceMs`, `cap`, `drop`, `byChannel`): what a
    /// message that arrives during a run does.
    pub queue: crate::lane::QueueSettings,
    /// `agents.defaults.envelopeTimezone`: the zone of the times written into the
    /// model's text (system events).
    pub envelope_time_zone: Zone,
    /// The default agent: the first of `agents.list` marked `default`, else the first
    /// listed, else `main`.
    pub default_agent: AgentId,
    /// The store cache's time to live, from `OPENCLAW_SESSION_CACHE_TTL_MS`.
    pub cache_ttl: Duration,
}

impl Default for OpenClawConfig {
    fn default() -> Self {
        OpenClawConfig {
            state_dir: PathBuf::from("~/.openclaw"),
            file: None,
            scope: SessionScope::default(),
            // OpenClaw's fallback when openclaw.json names no dmScope.
            dm_scope: DmScope::Main,
            main_key: DEFAULT_MAIN_KEY.to_owned(),
            identity_links: IdentityLinks::default(),
            reset: ResetConfig::default(),
            reset_triggers: DEFAULT_RESET_TRIGGERS
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
            send_policy: SendPolicyConfig::default(),
            store: None,
            group_history_limit: DEFAULT_GROUP_HISTORY_LIMIT,
            queue: crate::lane::QueueSettings::default(),
            envelope_time_zone: Zone::Local,
            default_agent: AgentId::main(),
            cache_ttl: DEFAULT_CACHE_TTL,
        }
    }
}

impl OpenClawConfig {
    /// The settings in `text` (JSON5), over OpenClaw's defaults. The state directory is
    /// `~/.openclaw` and the cache time to live the default; set the fields to change
    /// them. No file or variable is read.
    pub fn from_json5_str(text: &str) -> Result<Self> {
        parse::parse(text, None, OpenClawConfig::default())
    }

    /// The configuration of the gateway whose state directory is `state_dir`: the first
    /// of `openclaw.json`, `clawdbot.json`, `moldbot.json`, `moltbot.json` there (none:
    /// OpenClaw's defaults), with the cache time to live from the process's
    /// environment.
    ///
    /// A file that cannot be read is [`Error::Io`] ([`Error::NotAFile`] for a
    /// directory or a FIFO); one that is not JSON5, or holds an invalid setting, is
    /// [`Error::Config`].
    pub fn load(state_dir: impl AsRef<Path>) -> Result<Self> {
        Self::load_with_env(state_dir, &OpenClawEnv::process())
    }

    /// [`load`](Self::load) with the environment given.
    pub fn load_with_env(state_dir: impl AsRef<Path>, env: &OpenClawEnv) -> Result<Self> {
        let state_dir = crate::store::json::paths::state_root(state_dir.as_ref());
        let file = locate::config_candidates(&state_dir)
            .into_iter()
            .find(|file| file.exists())
            .unwrap_or_else(|| state_dir.join(CONFIG_FILE_NAME));
        Self::read(state_dir, &file, env)
    }

    /// The configuration OpenClaw itself would use, found as OpenClaw finds it (the
    /// process's `OPENCLAW_CONFIG_PATH`, `OPENCLAW_STATE_DIR`, …, then the home
    /// directory: see [`OpenClawLocation::discover`]). No file: OpenClaw's defaults.
    pub fn discover() -> Result<Self> {
        Self::discover_with_env(&OpenClawEnv::process())
    }

    /// [`discover`](Self::discover) with the environment given.
    pub fn discover_with_env(env: &OpenClawEnv) -> Result<Self> {
        let location = OpenClawLocation::discover(env);
        Self::read(location.state_dir, &location.config_file, env)
    }

    fn read(state_dir: PathBuf, file: &Path, env: &OpenClawEnv) -> Result<Self> {
        let base = OpenClawConfig {
            state_dir,
            cache_ttl: env.cache_ttl(),
            ..OpenClawConfig::default()
        };
        let Some(bytes) = read_config_file(file)? else {
            tracing::debug!(path = %file.display(), "no OpenClaw configuration file; using OpenClaw's defaults");
            return Ok(base);
        };
        let text = String::from_utf8(bytes).map_err(|e| Error::Config {
            path: Some(file.to_owned()),
            field: None,
            message: format!(
                "the file is not UTF-8 (after byte {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        let config = parse::parse(
            &text,
            Some(file),
            OpenClawConfig {
                file: Some(file.to_owned()),
                ..base
            },
        )?;
        tracing::debug!(path = %file.display(), "OpenClaw configuration read");
        Ok(config)
    }
}

/// The bytes of the configuration file, `None` if there is none. A symlink is followed
/// (configuration files are often linked from a dotfiles repository); anything but a
/// regular file is refused unread, so a FIFO never blocks the caller.
fn read_config_file(file: &Path) -> Result<Option<Vec<u8>>> {
    let metadata = match std::fs::metadata(file) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", file, e)),
    };
    if !metadata.is_file() {
        return Err(Error::NotAFile {
            path: file.to_owned(),
            found: if metadata.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            },
        });
    }
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(Error::Config {
            path: Some(file.to_owned()),
            field: None,
            message: format!(
                "the file is {} bytes, over the {MAX_CONFIG_BYTES} bytes a configuration may have",
                metadata.len()
            ),
        });
    }
    std::fs::read(file)
        .map(Some)
        .map_err(|e| Error::io("read", file, e))
}
