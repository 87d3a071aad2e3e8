//! A directory of small JSON files, one per key, shared by every process on the machine
//! under one OS lock: what [`JsonFileChatter`](super::JsonFileChatter) and
//! [`JsonFileSystemEvents`](super::JsonFileSystemEvents) are built on.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::store::fs::{blocking, create_checked_dir, read_limited, write_private_atomically};
use crate::store::json::paths::file_name_for;

/// The largest file read: far more than any bounded list of chat messages.
const MAX_FILE: u64 = 16 * 1024 * 1024;

/// `<dir>/<key>.json` files (names by [`file_name_for`]), with `<dir>/.lock` (0600)
/// taken for every call.
#[derive(Debug, Clone)]
pub(super) struct KeyedFiles {
    /// The state root the directory is in: no link between them is followed.
    root: PathBuf,
    dir: PathBuf,
    /// What the files hold, for errors and the log (`group chatter`).
    what: &'static str,
}

impl KeyedFiles {
    /// The files in directory `name` of the state root `root`, holding `what`.
    pub(super) fn new(root: &Path, name: &str, what: &'static str) -> Self {
        let root = crate::store::json::paths::state_root(root);
        KeyedFiles {
            dir: root.join(name),
            root,
            what,
        }
    }

    /// Whether the directory is there (nothing was ever kept when it is not).
    pub(super) fn exists(&self) -> bool {
        crate::store::fs::exists_no_follow(&self.dir)
    }

    /// The file of `key`.
    pub(super) fn file_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.json", file_name_for(key)))
    }

    /// Runs `f` with the directory's lock held, on the blocking pool.
    pub(super) async fn locked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&KeyedFiles) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let files = self.clone();
        blocking(&self.dir, move || {
            create_checked_dir(&files.root, &files.dir)
                .map_err(|e| Error::io("create directory", &files.dir, e))?;
            let lock_path = files.dir.join(".lock");
            let mut options = OpenOptions::new();
            options.create(true).truncate(false).write(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let lock = crate::store::fs::open_checked(&mut options, &lock_path)
                .map_err(|e| Error::io("open lock file", &lock_path, e))?;
            lock.lock().map_err(|e| Error::io("lock", &lock_path, e))?;
            let result = f(&files);
            drop(lock);
            result
        })
        .await
    }

    /// Runs `f` on the blocking pool without the directory's lock and writing nothing
    /// (no directory, no lock file): for readers of a tree that must not be written.
    /// Each file is replaced whole by its writers, so each read sees one version of it.
    pub(super) async fn unlocked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&KeyedFiles) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let files = self.clone();
        blocking(&self.dir, move || f(&files)).await
    }

    /// What `path` holds (the default when it does not exist); a file that does not
    /// parse is moved aside as `<name>.json.corrupt`, kept and logged, and counts as
    /// empty.
    pub(super) fn read<T: DeserializeOwned + Default>(&self, path: &Path) -> Result<T> {
        let bytes = match read_limited(path, MAX_FILE) {
            Ok(Some((bytes, _))) => bytes,
            Ok(None) => return Ok(T::default()),
            Err(e) => return Err(Error::io("read", path, e)),
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(value),
            Err(error) => {
                let aside = path.with_extension("json.corrupt");
                fs::rename(path, &aside)
                    .map_err(|e| Error::io("move a corrupt file aside", path, e))?;
                tracing::warn!(what = self.what, path = %path.display(), kept_as = %aside.display(), %error, "a file does not parse; kept aside, starting over");
                Ok(T::default())
            }
        }
    }

    /// What `path` holds, or `None` (logged) when it does not parse: left as it is,
    /// for callers that must not write.
    pub(super) fn read_as_is<T: DeserializeOwned + Default>(
        &self,
        path: &Path,
    ) -> Result<Option<T>> {
        let bytes = match read_limited(path, MAX_FILE) {
            Ok(Some((bytes, _))) => bytes,
            Ok(None) => return Ok(Some(T::default())),
            Err(e) => return Err(Error::io("read", path, e)),
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Ok(Some(value)),
            Err(error) => {
                tracing::warn!(what = self.what, path = %path.display(), %error, "a file does not parse; skipped");
                Ok(None)
            }
        }
    }

    /// Replaces `path` with `value`, atomically and owner-only.
    pub(super) fn write<T: Serialize>(&self, path: &Path, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| Error::encode(format!("{} for {}", self.what, path.display()), e))?;
        write_private_atomically(path, &bytes)
    }

    /// Removes `path`, if it is there.
    pub(super) fn remove(&self, path: &Path) -> Result<()> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("remove", path, e)),
        }
    }

    /// Every key's file (`*.json`), in name order.
    pub(super) fn all_files(&self) -> Result<Vec<PathBuf>> {
        let listing = match fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list", &self.dir, e)),
        };
        let mut files: Vec<PathBuf> = listing
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".json"))
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .map(|entry| entry.path())
            .collect();
        files.sort();
        Ok(files)
    }

    /// [`read`](Self::read) and [`remove`](Self::remove) in one step.
    pub(super) fn take<T: DeserializeOwned + Default>(&self, path: &Path) -> Result<T> {
        let value = self.read(path)?;
        self.remove(path)?;
        Ok(value)
    }

    /// Drops the least recently written files beyond `max`.
    pub(super) fn evict(&self, max: usize) -> Result<()> {
        let listing = fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = listing
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|entry| {
                let modified = entry.metadata().ok()?.modified().ok()?;
                Some((modified, entry.path()))
            })
            .collect();
        if files.len() <= max {
            return Ok(());
        }
        files.sort();
        let excess = files.len() - max;
        for (_, path) in files.into_iter().take(excess) {
            self.remove(&path)?;
        }
        Ok(())
    }
}
