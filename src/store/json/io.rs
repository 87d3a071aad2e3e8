//! The JSON store's file I/O, behind a small trait so tests can stop the write path
//! between any two steps and inspect what a crash would leave (the redb pattern).

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, Result};

/// How hard a write works to survive a power loss.
///
/// Every mode writes a temporary file and renames it over the store, so a crashed
/// process never leaves a torn `sessions.json`; the modes differ in what survives the
/// machine losing power.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// No fsync (what OpenClaw does). Fastest; after a power loss the file may be an
    /// older version, or on some file systems empty.
    Unsynced,
    /// fsync the new file before the rename: after a power loss the store is the old or
    /// the new version, never empty or torn.
    SyncFile,
    /// Also fsync the directory after the rename, so an acknowledged update survives a
    /// power loss. The default.
    #[default]
    SyncFileAndDir,
}

/// What identifies one version of a file: if the stamp is unchanged, so is the file
/// (every writer of this crate replaces the file by rename, giving it a new inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    inode: (u64, u64),
}

impl FileStamp {
    pub(crate) fn of(metadata: &fs::Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            len: metadata.len(),
            modified: metadata.modified().ok(),
            #[cfg(unix)]
            inode: (metadata.dev(), metadata.ino()),
        }
    }
}

/// The steps of the store's write path, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteStep {
    /// Create the temporary file and write the new contents.
    WriteTemp,
    /// fsync the temporary file.
    SyncTemp,
    /// Hard-link (or copy) the current file to a temporary backup name.
    LinkBackup,
    /// Rename the temporary backup over `sessions.json.bak`.
    RenameBackup,
    /// Rename the temporary file over `sessions.json`.
    Rename,
    /// fsync the directory.
    SyncDir,
}

/// File operations the JSON store performs. [`RealIo`] is the only production
/// implementation; tests wrap it to inject crashes.
pub(crate) trait StoreIo: Send + Sync + fmt::Debug {
    /// Reads a whole file of at most `limit` bytes with the stamp of what was read;
    /// `None` if it does not exist.
    fn read(&self, path: &Path, limit: u64) -> io::Result<Option<(Vec<u8>, FileStamp)>>;
    /// The file's stamp; `None` if it does not exist.
    fn stat(&self, path: &Path) -> io::Result<Option<FileStamp>>;
    /// Runs one step of the write path.
    fn step(&self, step: WriteStep, op: StepArgs<'_>) -> io::Result<Option<FileStamp>>;
}

/// The arguments of a [`WriteStep`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum StepArgs<'a> {
    /// Create `path` exclusively (mode 0600) with `bytes`.
    Create { path: &'a Path, bytes: &'a [u8] },
    /// fsync a file or directory.
    Sync { path: &'a Path },
    /// Link or copy `from` to `to`.
    Link { from: &'a Path, to: &'a Path },
    /// Rename `from` over `to`.
    Rename { from: &'a Path, to: &'a Path },
}

/// The real file system.
#[derive(Debug, Default)]
pub(crate) struct RealIo;

impl StoreIo for RealIo {
    fn read(&self, path: &Path, limit: u64) -> io::Result<Option<(Vec<u8>, FileStamp)>> {
        Ok(crate::store::fs::read_limited(path, limit)?
            .map(|(bytes, metadata)| (bytes, FileStamp::of(&metadata))))
    }

    fn stat(&self, path: &Path) -> io::Result<Option<FileStamp>> {
        match fs::symlink_metadata(path) {
            Ok(metadata) => Ok(Some(FileStamp::of(&metadata))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn step(&self, _step: WriteStep, args: StepArgs<'_>) -> io::Result<Option<FileStamp>> {
        match args {
            StepArgs::Create { path, bytes } => {
                let mut file = create_private(path)?;
                file.write_all(bytes)?;
                Ok(Some(FileStamp::of(&file.metadata()?)))
            }
            StepArgs::Sync { path } => {
                File::open(path)?.sync_all()?;
                Ok(None)
            }
            StepArgs::Link { from, to } => {
                if fs::hard_link(from, to).is_err() {
                    fs::copy(from, to)?;
                }
                // The backup is owner-only like every file of the store, even when the
                // file it keeps was written wider (by OpenClaw, say).
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(to, fs::Permissions::from_mode(0o600))?;
                }
                Ok(None)
            }
            StepArgs::Rename { from, to } => {
                fs::rename(from, to)?;
                Ok(None)
            }
        }
    }
}

pub(crate) use crate::store::fs::create_private;

/// A sibling of `path` named `<name>.<pid>.<uuid>.tmp`: unique, and recognisable as an
/// orphan if a crash leaves it behind.
pub(crate) fn temp_sibling(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    path.with_file_name(name)
}

/// `<path>.bak`.
pub(crate) fn backup_path(path: &Path) -> PathBuf {
    with_suffix(path, ".bak")
}

/// `<path>.lock`.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    with_suffix(path, ".lock")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Replaces `path` with `bytes` atomically: temp file, fsync, backup, rename, directory
/// fsync. On failure the temporary files are removed and `path` is untouched (or, if
/// only the directory fsync failed, already replaced but maybe not durable).
pub(crate) fn write_atomically(
    io: &dyn StoreIo,
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> Result<FileStamp> {
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::store::fs::create_private_dir_all(dir)
        .map_err(|e| Error::io("create directory", dir, e))?;
    let temp = temp_sibling(path);
    let backup = backup_path(path);
    let backup_temp = temp_sibling(&backup);

    let result = (|| {
        let stamp = io
            .step(
                WriteStep::WriteTemp,
                StepArgs::Create { path: &temp, bytes },
            )
            .map_err(|e| Error::io("write", &temp, e))?
            .expect("creating a file yields its stamp");
        if durability != Durability::Unsynced {
            io.step(WriteStep::SyncTemp, StepArgs::Sync { path: &temp })
                .map_err(|e| Error::io("fsync", &temp, e))?;
        }
        if io
            .stat(path)
            .map_err(|e| Error::io("stat", path, e))?
            .is_some()
        {
            io.step(
                WriteStep::LinkBackup,
                StepArgs::Link {
                    from: path,
                    to: &backup_temp,
                },
            )
            .map_err(|e| Error::io("back up", path, e))?;
            io.step(
                WriteStep::RenameBackup,
                StepArgs::Rename {
                    from: &backup_temp,
                    to: &backup,
                },
            )
            .map_err(|e| Error::io("rename", &backup_temp, e))?;
        }
        io.step(
            WriteStep::Rename,
            StepArgs::Rename {
                from: &temp,
                to: path,
            },
        )
        .map_err(|e| Error::io("rename", &temp, e))?;
        if durability == Durability::SyncFileAndDir {
            io.step(WriteStep::SyncDir, StepArgs::Sync { path: dir })
                .map_err(|e| Error::io("fsync", dir, e))?;
        }
        Ok(stamp)
    })();

    if result.is_err() {
        // Best effort: a real crash would leave these for `doctor`; a failed step should not.
        let _ = fs::remove_file(&temp);
        let _ = fs::remove_file(&backup_temp);
    }
    result
}
