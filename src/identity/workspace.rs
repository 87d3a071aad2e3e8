//! Session workspaces: a folder per conversation for files (documented in the parent module).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::error::{Error, IdKind, Result};
use crate::identity::key::SessionKey;
use crate::store::fs::{create_checked_dir, open_no_follow, write_private_atomically};

/// The longest workspace file name, in bytes (a common file-system limit).
pub(crate) const MAX_FILE_NAME_LEN: usize = 255;

/// Whether engine variants of one agent identity share a person's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkspaceSharing {
    /// One folder per person per agent identity (the default): files the `reggie_oc` agent
    /// saves are visible to `reggie_fd`.
    #[default]
    PerIdentity,
    /// One folder per session key.
    PerSession,
}

/// Where workspaces live, and whether they are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspaces {
    root: PathBuf,
    sharing: WorkspaceSharing,
}

impl Workspaces {
    /// Workspaces under `root`, shared per identity.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Workspaces {
            root: root.into(),
            sharing: WorkspaceSharing::default(),
        }
    }

    /// How workspaces are shared.
    pub fn sharing(mut self, sharing: WorkspaceSharing) -> Self {
        self.sharing = sharing;
        self
    }

    /// The configured sharing.
    pub(crate) fn sharing_mode(&self) -> WorkspaceSharing {
        self.sharing
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace `id`, created (with its areas) if missing.
    ///
    /// A symlink, or anything but a directory, where the workspace or an area should be
    /// is refused ([`Error::NotAFile`]), not followed; the root itself may be a link.
    pub fn open(&self, id: Uuid) -> Result<Workspace> {
        let workspace = self.locate(id);
        for area in [Area::Attachments, Area::Exports, Area::Context] {
            let dir = workspace.dir.join(area.dir_name());
            create_checked_dir(&self.root, &dir)
                .map_err(|e| Error::io("open workspace", &dir, e))?;
        }
        Ok(workspace)
    }

    /// Removes the workspace `id` with everything in it; whether it was there. A link
    /// where the workspace should be is refused ([`Error::NotAFile`]), not followed;
    /// links inside it are removed, not followed.
    pub fn remove(&self, id: Uuid) -> Result<bool> {
        let dir = self.locate(id).dir;
        match fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("inspect", &dir, e)),
            Ok(metadata) if !metadata.is_dir() => Err(Error::NotAFile {
                path: dir,
                found: crate::store::fs::describe(metadata.file_type()),
            }),
            Ok(_) => {
                fs::remove_dir_all(&dir).map_err(|e| Error::io("remove", &dir, e))?;
                Ok(true)
            }
        }
    }

    /// Where the workspace `id` is, without touching the file system.
    pub fn locate(&self, id: Uuid) -> Workspace {
        Workspace {
            id,
            dir: self.root.join(id.hyphenated().to_string()),
        }
    }
}

/// A part of a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Area {
    /// The workspace folder itself (where `summary.md` lives).
    Root,
    /// Images, documents, audio and video received or generated.
    Attachments,
    /// Reports, CSVs, generated documents.
    Exports,
    /// The agent's working files and scratch notes.
    Context,
}

impl Area {
    fn dir_name(self) -> &'static str {
        match self {
            Area::Root => "",
            Area::Attachments => "attachments",
            Area::Exports => "exports",
            Area::Context => "context",
        }
    }
}

/// One session's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    id: Uuid,
    dir: PathBuf,
}

impl Workspace {
    /// The workspace's UUID (its folder name).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `name` in `area`, after validating `name`: one plain file-name
    /// component of at most `255` bytes — not empty, `.` or `..`, no
    /// `/`, `\`, NUL or control characters. Anything else is [`Error::InvalidId`].
    pub fn path(&self, area: Area, name: &str) -> Result<PathBuf> {
        validate_file_name(name)?;
        Ok(self.dir.join(area.dir_name()).join(name))
    }

    /// Writes `bytes` to `name` in `area`, replacing it atomically (a temporary file,
    /// owner-only, renamed over it — a symlink at `name` is replaced, not followed).
    pub fn write(&self, area: Area, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.path(area, name)?;
        write_private_atomically(&path, bytes)?;
        Ok(path)
    }

    /// Reads `name` in `area`; a symlink there is an error, not followed.
    pub fn read(&self, area: Area, name: &str) -> Result<Vec<u8>> {
        let path = self.path(area, name)?;
        let mut bytes = Vec::new();
        open_no_follow(&path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .map_err(|e| Error::io("read", &path, e))?;
        Ok(bytes)
    }

    /// Writes the rolling summary to `summary.md`.
    pub fn write_summary(&self, summary: &str) -> Result<PathBuf> {
        self.write(Area::Root, "summary.md", summary.as_bytes())
    }

    /// The names of the files in `area`, sorted.
    pub fn files(&self, area: Area) -> Result<Vec<String>> {
        let dir = self.dir.join(area.dir_name());
        let mut names = Vec::new();
        for item in fs::read_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
            let item = item.map_err(|e| Error::io("list", &dir, e))?;
            let is_file = item
                .file_type()
                .map_err(|e| Error::io("list", item.path(), e))?
                .is_file();
            if let (true, Some(name)) = (is_file, item.file_name().to_str()) {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }
}

fn validate_file_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        Some("the file name is empty")
    } else if name == "." || name == ".." {
        Some("the file name is `.` or `..`")
    } else if name.len() > MAX_FILE_NAME_LEN {
        Some("the file name is longer than 255 bytes")
    } else if name.contains(['/', '\\']) {
        Some("the file name contains a path separator")
    } else if name.chars().any(char::is_control) {
        Some("the file name contains a control character")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::invalid_id(IdKind::WorkspaceFile, name, problem)),
        None => Ok(()),
    }
}

/// The manager's side of session workspaces.
impl crate::manager::SessionManager {
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
                crate::store::fs::blocking(workspaces.root(), move || {
                    workspace.write_summary(&text)
                })
                .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_one_plain_component() {
        let ok = ["summary.md", "a b.csv", ".hidden", "…unicode ✓.txt", "..."];
        for name in ok {
            assert!(validate_file_name(name).is_ok(), "{name:?}");
        }
        let long = "x".repeat(256);
        let bad = [
            "", ".", "..", "a/b", "../x", "a\\b", "nul\0", "tab\t", &long,
        ];
        for name in bad {
            assert!(
                matches!(
                    validate_file_name(name),
                    Err(Error::InvalidId {
                        kind: IdKind::WorkspaceFile,
                        ..
                    })
                ),
                "{name:?}"
            );
        }
    }
}
