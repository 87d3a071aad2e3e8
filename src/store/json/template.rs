//! Store files placed by a path template (OpenClaw's `session.store`): which agents
//! have one, and what in them is not served.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use super::document::parse_entry;
use super::Inner;
use crate::error::{Error, Result};
use crate::identity::key::{AgentId, SessionKey};
use crate::store::UnreadableEntry;

/// What stands for the agent id in a store path template.
pub(super) const AGENT_PLACEHOLDER: &str = "{agentId}";

impl Inner {
    /// The agents with a store file where `template` puts it. With `{agentId}`, the
    /// directory holding the first path component that names it is listed and each
    /// name read back as an agent id; without it, every agent shares one file and the
    /// agents are those its keys name.
    pub(super) fn templated_agents(&self, template: &str) -> Result<Vec<AgentId>> {
        let path = Path::new(template);
        let mut agents = BTreeSet::new();
        if !template.contains(AGENT_PLACEHOLDER) {
            if fs::symlink_metadata(path).is_err() {
                return Ok(Vec::new());
            }
            for (raw, _) in self.load(path)?.iter() {
                if let Ok(key) = SessionKey::parse(raw) {
                    if key.as_str() == raw {
                        agents.insert(self.agent_of(&key));
                    }
                }
            }
            return Ok(agents.into_iter().collect());
        }
        let components: Vec<Component<'_>> = path.components().collect();
        let Some(at) = components
            .iter()
            .position(|c| c.as_os_str().to_string_lossy().contains(AGENT_PLACEHOLDER))
        else {
            return Ok(Vec::new());
        };
        let dir: PathBuf = components[..at].iter().collect();
        let pattern = components[at].as_os_str().to_string_lossy().into_owned();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", dir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list", &dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            for agent in agents_named_by(&pattern, &name) {
                if fs::symlink_metadata(self.store_path(&agent)).is_ok() {
                    agents.insert(agent);
                }
            }
        }
        Ok(agents.into_iter().collect())
    }

    /// What the store files of a template hold but the store does not serve: keys that
    /// are not canonical, keys whose agent's file is another, entries that do not
    /// decode.
    pub(super) fn templated_unreadable(&self) -> Result<Vec<UnreadableEntry>> {
        let template = self.store_template.as_deref().unwrap_or_default();
        let files: BTreeSet<PathBuf> = self
            .templated_agents(template)?
            .iter()
            .map(|agent| self.store_path(agent))
            .chain((!template.contains(AGENT_PLACEHOLDER)).then(|| PathBuf::from(template)))
            .filter(|file| fs::symlink_metadata(file).is_ok())
            .collect();
        let mut found = Vec::new();
        for file in files {
            for (raw, entry) in self.load(&file)?.iter() {
                let served = SessionKey::parse(raw).ok().filter(|key| {
                    key.as_str() == raw && self.store_path(&self.agent_of(key)) == file
                });
                let problem = if served.is_none() {
                    "the key is not a canonical session key of an agent this file holds (a \
                     legacy mixed-case key, another agent's key, or not a key at all)"
                        .to_owned()
                } else if let Err(error) = parse_entry(entry) {
                    format!("the entry does not decode: {error}")
                } else {
                    continue;
                };
                found.push(UnreadableEntry {
                    location: file.display().to_string(),
                    key: raw.to_owned(),
                    problem,
                });
            }
        }
        Ok(found)
    }
}

/// The agent ids that, put in for `{agentId}` in `pattern`, give `name`.
fn agents_named_by(pattern: &str, name: &str) -> Vec<AgentId> {
    let (prefix, _) = pattern
        .split_once(AGENT_PLACEHOLDER)
        .unwrap_or((pattern, ""));
    let Some(rest) = name.strip_prefix(prefix) else {
        return Vec::new();
    };
    let run = rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    (1..=run)
        .filter_map(|len| AgentId::new(&rest[..len]).ok())
        .filter(|agent| pattern.replace(AGENT_PLACEHOLDER, agent.as_str()) == name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::entry::SessionEntry;
    use crate::store::{JsonFileOptions, JsonFileStore, ListFilter, SessionStore, SessionStoreExt};

    #[tokio::test]
    async fn sessions_live_where_the_template_puts_them() {
        // (template under the temp dir) → (the file of `main`, the file of `ops`)
        let cases = [
            (
                "data/{agentId}/sessions.json",
                "data/main/sessions.json",
                "data/ops/sessions.json",
            ),
            (
                "data/sessions-{agentId}.json",
                "data/sessions-main.json",
                "data/sessions-ops.json",
            ),
            ("data/all.json", "data/all.json", "data/all.json"),
        ];
        for (template, main_file, ops_file) in cases {
            let dir = tempfile::tempdir().unwrap();
            let options = JsonFileOptions {
                store_path: Some(format!("{}/{template}", dir.path().display())),
                ..JsonFileOptions::default()
            };
            let store = JsonFileStore::new_with(dir.path().join("state"), options.clone());
            let main = SessionKey::parse("agent:main:main").unwrap();
            let ops = SessionKey::parse("agent:ops:telegram:dm:42").unwrap();
            store.put(&main, SessionEntry::new("m", 1)).await.unwrap();
            store.put(&ops, SessionEntry::new("o", 2)).await.unwrap();

            assert_eq!(
                store.store_path_for(&main),
                dir.path().join(main_file),
                "{template}"
            );
            assert_eq!(
                store.store_path_for(&ops),
                dir.path().join(ops_file),
                "{template}"
            );
            assert!(dir.path().join(main_file).is_file(), "{template}");
            assert!(dir.path().join(ops_file).is_file(), "{template}");
            assert!(!dir.path().join("state/agents").exists(), "{template}");

            // A second store over the same files finds both agents and both sessions.
            let again = JsonFileStore::new_with(dir.path().join("state"), options);
            let agents: Vec<String> = again
                .agents()
                .await
                .unwrap()
                .iter()
                .map(|a| a.as_str().to_owned())
                .collect();
            assert_eq!(agents, ["main", "ops"], "{template}");
            assert_eq!(
                again.count(&ListFilter::new()).await.unwrap(),
                2,
                "{template}"
            );
            let ids: BTreeSet<String> = again
                .list(&ListFilter::new())
                .await
                .unwrap()
                .into_iter()
                .map(|s| s.entry.session_id)
                .collect();
            assert_eq!(
                ids,
                BTreeSet::from(["m".to_owned(), "o".to_owned()]),
                "{template}"
            );
            assert_eq!(
                again.get(&ops).await.unwrap().unwrap().entry.session_id,
                "o",
                "{template}"
            );
            assert!(again.unreadable().await.unwrap().is_empty(), "{template}");
        }
    }

    #[tokio::test]
    async fn a_key_in_another_agents_templated_file_is_reported_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let options = JsonFileOptions {
            store_path: Some(format!("{}/{{agentId}}.json", dir.path().display())),
            ..JsonFileOptions::default()
        };
        let store = JsonFileStore::new_with(dir.path(), options);
        std::fs::write(
            dir.path().join("ops.json"),
            r#"{"agent:main:main": {"sessionId": "x", "updatedAt": 1}, "Agent:Ops:Main": {"sessionId": "y", "updatedAt": 1}}"#,
        )
        .unwrap();
        let ops = AgentId::new("ops").unwrap();
        assert_eq!(store.agents().await.unwrap(), [ops]);
        assert_eq!(store.count(&ListFilter::new()).await.unwrap(), 0);
        let keys: Vec<String> = store
            .unreadable()
            .await
            .unwrap()
            .into_iter()
            .map(|u| u.key)
            .collect();
        assert_eq!(keys, ["agent:main:main", "Agent:Ops:Main"]);
    }

    #[test]
    fn agent_ids_are_read_back_from_names() {
        // (pattern, name) → agents
        let cases: &[(&str, &str, &[&str])] = &[
            ("{agentId}", "ops", &["ops"]),
            ("{agentId}", "Ops", &[]),
            ("{agentId}", ".hidden", &[]),
            ("sessions-{agentId}.json", "sessions-ops.json", &["ops"]),
            ("sessions-{agentId}.json", "sessions-a-b.json", &["a-b"]),
            ("sessions-{agentId}.json", "other-ops.json", &[]),
            ("sessions-{agentId}.json", "sessions-.json", &[]),
            ("{agentId}-{agentId}.json", "ops-ops.json", &["ops"]),
            ("{agentId}-x", "a-x-x", &["a-x"]),
        ];
        for (pattern, name, expected) in cases {
            let found: Vec<String> = agents_named_by(pattern, name)
                .iter()
                .map(|a| a.as_str().to_owned())
                .collect();
            assert_eq!(found, *expected, "{pattern} {name}");
        }
    }
}
