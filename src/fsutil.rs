//! Plumbing shared by the file-backed stores.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use crate::error::{Error, Result};

/// Runs blocking file work off the async executor; a panic in it is re-raised here.
pub(crate) async fn blocking<T, F>(path: &Path, work: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(Error::io(
            "finish file work (the runtime is shutting down)",
            path,
            std::io::Error::other(error),
        )),
    }
}

/// The in-process queue for one file: one async mutex per path, shared by every store
/// of the process, so writers of one process never race each other on the file.
pub(crate) fn process_mutex(path: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static MUTEXES: LazyLock<Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Mutex::default);
    let mut mutexes = MUTEXES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(mutex) = mutexes.get(path).and_then(Weak::upgrade) {
        return mutex;
    }
    mutexes.retain(|_, weak| weak.strong_count() > 0);
    let mutex = Arc::new(tokio::sync::Mutex::new(()));
    mutexes.insert(path.to_owned(), Arc::downgrade(&mutex));
    mutex
}

/// Creates `dir` and its missing parents, owner-only (mode 0700 on Unix).
pub(crate) fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Creates a new file readable and writable by its owner only (mode 0600 on Unix).
///
/// `create_new` (`O_EXCL`) refuses an existing path, a planted symlink included. Every
/// file the crate creates goes through here or [`write_private_atomically`].
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Replaces `path` with `bytes`: an owner-only temporary file in the same directory
/// (created owner-only if missing), fsynced, then renamed over `path` — a symlink at
/// `path` is replaced, never followed, and a crash leaves the old file or the new one.
pub(crate) fn write_private_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_private_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
    // NamedTempFile creates its file 0600 with O_EXCL and removes it if dropped.
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create", dir, e))?;
    temp.write_all(bytes)
        .map_err(|e| Error::io("write", temp.path(), e))?;
    temp.as_file()
        .sync_all()
        .map_err(|e| Error::io("fsync", temp.path(), e))?;
    temp.persist(path)
        .map_err(|e| Error::io("rename", path, e.error))?;
    Ok(())
}

/// Options that refuse to open a symlink as the file itself (`O_NOFOLLOW` on Unix):
/// a symlink planted where a transcript should be is an error, not a way out of the
/// sessions directory.
pub(crate) fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW);
    options
}

/// Opens `path` for reading without following a final symlink.
pub(crate) fn open_no_follow(path: &Path) -> io::Result<File> {
    no_follow(OpenOptions::new().read(true)).open(path)
}
