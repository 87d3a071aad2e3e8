//! From OpenClaw's settings to the parts of a manager that behaves as its gateway.

use std::path::Path;

use super::OpenClawConfig;
use crate::error::Result;
use crate::freshness::triggers::ResetTriggers;
use crate::identity::key::DefaultKeyBuilder;
use crate::inbound::activation::OwnerChatter;
use crate::inbound::chatter::{InMemoryChatter, MAX_HISTORY_KEYS};
use crate::manager::{SessionManager, SessionManagerBuilder};
use crate::store::FileTranscriptStore;
use crate::store::{JsonFileOptions, JsonFileStore};

impl OpenClawConfig {
    /// The key builder of these settings: scope, DM scope, main key, identity links and
    /// default agent.
    pub fn key_builder(&self) -> DefaultKeyBuilder {
        DefaultKeyBuilder::new()
            .default_agent(self.default_agent.clone())
            .main_key(&self.main_key)
            .scope(self.scope)
            .dm_scope(self.dm_scope)
            .identity_links(self.identity_links.clone())
    }

    /// The reset triggers of these settings, with OpenClaw's authorisation defaults.
    pub(crate) fn triggers(&self) -> ResetTriggers {
        ResetTriggers::new(self.reset_triggers.iter().cloned())
    }

    /// The group chatter of these settings: `group_history_limit` messages per group,
    /// for at most 1,000 groups.
    pub fn chatter(&self) -> InMemoryChatter {
        InMemoryChatter::new(self.group_history_limit, MAX_HISTORY_KEYS)
    }

    /// The JSON store's options: the cache time to live, the store-file template, and
    /// the `global` session in the default agent's file.
    pub fn json_options(&self) -> JsonFileOptions {
        JsonFileOptions {
            cache_ttl: self.cache_ttl,
            global_agent: self.default_agent.clone(),
            store_path: self.store.clone(),
            ..JsonFileOptions::default()
        }
    }

    /// A manager builder over the gateway's files (sessions as `store` says, transcripts
    /// in the state directory) with every part these settings decide. Anything can
    /// still be overridden on the builder.
    pub fn manager_builder(&self) -> SessionManagerBuilder {
        SessionManager::builder(JsonFileStore::new_with(
            &self.state_dir,
            self.json_options(),
        ))
        .transcripts(FileTranscriptStore::new(&self.state_dir))
        .openclaw_tree()
        .key_builder(self.key_builder())
        .default_agent(self.default_agent.clone())
        .freshness(self.reset.clone())
        .reset_triggers(self.triggers())
        .send_policy(self.send_policy.clone())
        .chatter(self.chatter())
        .queue(self.queue.clone())
        .event_time_zone(self.envelope_time_zone)
        // OpenClaw answers every owner message in a group, addressed or not.
        .owner_chatter(OwnerChatter::Answer)
    }
}

impl SessionManager {
    /// A builder that behaves as the OpenClaw gateway whose state directory is
    /// `state_dir` (`~/.openclaw`): its `openclaw.json` is read
    /// ([`OpenClawConfig::load`]; no file means OpenClaw's defaults) and the manager
    /// keys, resets, allows replies and keeps group chatter as its settings say, over
    /// its own session and transcript files. The builder can still override any part.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # std::fs::write(dir.path().join("openclaw.json"), "{ session: { scope: 'global' } }").unwrap();
    /// // ~/.openclaw/openclaw.json says: { session: { scope: 'global' } }
    /// let manager = SessionManager::connect_openclaw(dir.path()).await?.build()?;
    /// let resolution = manager.resolve(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// assert_eq!(resolution.key.as_str(), "global");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_openclaw(state_dir: impl AsRef<Path>) -> Result<SessionManagerBuilder> {
        let state_dir = state_dir.as_ref().to_owned();
        let config = crate::store::fs::blocking(&state_dir.clone(), move || {
            OpenClawConfig::load(&state_dir)
        })
        .await?;
        Ok(config.manager_builder())
    }
}
