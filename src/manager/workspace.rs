//! The manager's side of session workspaces.

use uuid::Uuid;

use super::SessionManager;
use crate::entry::SessionEntry;
use crate::error::{Error, IdKind, Result};
use crate::fsutil::blocking;
use crate::identity::workspace::{Workspace, WorkspaceSharing};
use crate::key::SessionKey;
use crate::store::ListFilter;

impl SessionManager {
    /// See [`Session::workspace`](super::Session::workspace).
    pub(crate) async fn workspace(&self, key: &SessionKey) -> Result<Workspace> {
        let workspaces = self.seams.workspaces.clone().ok_or(Error::NotConfigured {
            what: "session workspaces (SessionManagerBuilder::workspaces)",
        })?;
        let entry = self.existing(key).await?.entry;
        let id = match &entry.workspace_id {
            Some(id) => parse_workspace_id(id)?,
            None => {
                let chosen = self.choose_workspace_id(key, &entry, &workspaces).await?;
                let recorded = self
                    .change(key, |e| {
                        e.workspace_id.get_or_insert_with(|| chosen.to_string());
                    })
                    .await?;
                // A racing call may have recorded another first; the store decides.
                parse_workspace_id(recorded.entry.workspace_id.as_deref().unwrap_or_default())?
            }
        };
        let root = workspaces.root().to_path_buf();
        blocking(&root, move || workspaces.open(id)).await
    }

    /// Writes the rolling (identity) summary `text` to `summary.md` in the workspace of
    /// each session in `keys` — once per folder, as siblings may share one — giving a
    /// session its workspace first if it has none yet. Nothing without workspaces. The
    /// first failure is returned (the summary stays in the sessions' entries).
    pub(super) async fn write_summary_files(&self, keys: &[SessionKey], text: &str) -> Result<()> {
        let Some(workspaces) = &self.seams.workspaces else {
            return Ok(());
        };
        let mut written = std::collections::HashSet::new();
        for key in keys {
            let workspace = self.workspace(key).await?;
            if written.insert(workspace.dir().to_path_buf()) {
                let text = text.to_owned();
                blocking(workspaces.root(), move || workspace.write_summary(&text)).await?;
            }
        }
        Ok(())
    }

    async fn choose_workspace_id(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        workspaces: &crate::identity::workspace::Workspaces,
    ) -> Result<Uuid> {
        if workspaces.sharing_mode() == WorkspaceSharing::PerIdentity {
            if let (Some(person), Some(identity)) = (&entry.person_id, &entry.agent_identity) {
                let siblings = self
                    .seams
                    .store
                    .list(
                        &ListFilter::new()
                            .include_inactive()
                            .person(person.clone())
                            .agent_identity(identity.clone()),
                    )
                    .await?;
                let shared = siblings
                    .iter()
                    .filter(|s| s.key != *key)
                    .find_map(|s| s.entry.workspace_id.as_deref());
                if let Some(id) = shared {
                    return parse_workspace_id(id);
                }
            }
        }
        Ok(Uuid::parse_str(&entry.session_id).unwrap_or_else(|_| Uuid::new_v4()))
    }
}

/// A recorded workspace id: only a UUID ever names a folder.
fn parse_workspace_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id.trim())
        .map_err(|_| Error::invalid_id(IdKind::WorkspaceId, id, "a workspace id is a UUID"))
}
