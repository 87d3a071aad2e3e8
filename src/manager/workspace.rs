//! The manager's side of session workspaces.

use uuid::Uuid;

use super::SessionManager;
use crate::error::{Error, IdKind, Result};
use crate::identity::key::SessionKey;
use crate::store::fs::blocking;

impl SessionManager {
    /// Writes the rolling (identity) summary `text` to `summary.md` in the workspace of
    /// each session in `keys` — once per folder, as siblings may share one — giving a
    /// session its workspace first if it has none yet. Nothing without workspaces. The
    /// first failure is returned (the summary stays in the sessions' entries).
    pub(crate) async fn write_summary_files(&self, keys: &[SessionKey], text: &str) -> Result<()> {
        let Some(workspaces) = &self.seams.workspaces else {
            return Ok(());
        };
        let mut written = std::collections::HashSet::new();
        for key in keys {
            let workspace = self.session(key).workspace().await?;
            if written.insert(workspace.dir().to_path_buf()) {
                let text = text.to_owned();
                blocking(workspaces.root(), move || workspace.write_summary(&text)).await?;
            }
        }
        Ok(())
    }
}

/// A recorded workspace id: only a UUID ever names a folder.
pub(crate) fn parse_workspace_id(id: &str) -> Result<Uuid> {
    Uuid::parse_str(id.trim())
        .map_err(|_| Error::invalid_id(IdKind::WorkspaceId, id, "a workspace id is a UUID"))
}
