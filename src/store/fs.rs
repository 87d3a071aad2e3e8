//! Plumbing shared by the file-backed stores.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use crate::error::{is_out_of_descriptors, Error, Result};

/// Runs blocking file work off the async executor; a panic in it is re-raised here.
pub(crate) async fn blocking<T, F>(path: &Path, work: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    // The work's events and span records belong to the caller's span.
    let span = tracing::Span::current();
    match tokio::task::spawn_blocking(move || span.in_scope(work)).await {
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

/// Creates directory `dir` below `root`, and the missing ones between, owner-only
/// (0700 on Unix); refuses a symbolic link, or anything but a directory, at `dir` or
/// between `root` and it (`root` itself may be a link: where the user keeps the state is
/// theirs to choose). Every directory the crate creates files in or deletes files from
/// is made here, so a link planted in the tree is never followed.
pub(crate) fn create_checked_dir(root: &Path, dir: &Path) -> io::Result<()> {
    let inside = dir.join("-");
    refuse_linked_dirs(root, &inside)?;
    create_private_dir_all(dir)?;
    // A link planted while the directories were made is refused all the same.
    refuse_linked_dirs(root, &inside)
}

/// Whether anything is at `path`; a symbolic link counts and is not followed.
pub(crate) fn exists_no_follow(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
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
    // The directory written in is never a link planted where the crate's own belongs.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::io(
            "create",
            dir,
            Refused::NotRegular("a symbolic link").into_io_at(dir),
        ));
    }
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

/// Why the crate refuses to use a path before reading or writing it.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The path is not a regular file (a FIFO, socket, device, directory, or a symlink
    /// where none is followed).
    NotRegular(&'static str),
    /// The file is larger than the caller reads whole.
    TooLarge { size: u64, limit: u64 },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotRegular(found) => write!(f, "{found}, not a regular file"),
            Refused::TooLarge { size, limit } => {
                write!(f, "{size} bytes, over the limit of {limit} bytes")
            }
        }
    }
}

impl std::error::Error for Refused {}

impl Refused {
    fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, self)
    }

    /// The refusal of `path`, another path than the one the caller names.
    fn into_io_at(self, path: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            RefusedAt(path.to_owned(), self),
        )
    }
}

/// A refusal of a directory on the way to the path the caller names.
#[derive(Debug)]
pub(crate) struct RefusedAt(pub(crate) PathBuf, pub(crate) Refused);

impl std::fmt::Display for RefusedAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.display(), self.1)
    }
}

impl std::error::Error for RefusedAt {}

/// What kind of thing `file_type` is, for messages.
pub(crate) fn describe(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() || file_type.is_char_device() {
            return "a device";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_file() {
        "a regular file"
    } else {
        "something else"
    }
}

/// Options that refuse to open a symlink as the file itself (`O_NOFOLLOW` on Unix) and
/// never block in `open` (`O_NONBLOCK`: a FIFO planted where a file should be would
/// otherwise wait for a writer forever). Open through [`open_checked`], which also
/// refuses anything but a regular file.
pub(crate) fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW | libc::O_NONBLOCK);
    options
}

/// Opens `path` with `options` (see [`no_follow`]) if it is a regular file; anything
/// else — FIFO, socket, device, directory, symlink — is an error that
/// [`Error::io`] reports as [`Error::NotAFile`].
pub(crate) fn open_checked(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let file = match no_follow(options).open(path) {
        Ok(file) => file,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Refused::NotRegular("a symbolic link").into_io())
        }
        // A directory cannot be opened for writing.
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(Refused::NotRegular("a directory").into_io())
        }
        // A socket cannot be opened at all, nor a FIFO for writing with no reader.
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            let found = std::fs::symlink_metadata(path)
                .map(|m| describe(m.file_type()))
                .unwrap_or("a socket or device");
            return Err(Refused::NotRegular(found).into_io());
        }
        Err(e) => return Err(e),
    };
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(Refused::NotRegular(describe(file_type)).into_io());
    }
    Ok(file)
}

/// Which file something is — its device and inode — where the platform tells them.
pub(crate) type FileId = Option<(u64, u64)>;

/// What `path` names (a last symbolic link not followed): which file, and its length.
///
/// Asks for no timestamps. On Linux, reading a file's change time makes the next write
/// to it store a fine-grained one (multigrain timestamps), which dirties the inode — on
/// every append, were each append to check its file with a full `lstat`.
pub(crate) fn identify(path: &Path) -> io::Result<(FileId, u64)> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::{AtFlags, CWD};
        match rustix::fs::statx(CWD, path, AtFlags::SYMLINK_NOFOLLOW, IDENTITY) {
            Ok(statx) => return Ok(from_statx(&statx)),
            // A kernel before 4.11: what std reads.
            Err(rustix::io::Errno::NOSYS) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(from_metadata(&std::fs::symlink_metadata(path)?))
}

/// Which file `file` is, and its length, as [`identify`] tells them.
pub(crate) fn identify_file(file: &File) -> io::Result<(FileId, u64)> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::fs::AtFlags;
        match rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, IDENTITY) {
            Ok(statx) => return Ok(from_statx(&statx)),
            Err(rustix::io::Errno::NOSYS) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(from_metadata(&file.metadata()?))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
const IDENTITY: rustix::fs::StatxFlags =
    rustix::fs::StatxFlags::INO.union(rustix::fs::StatxFlags::SIZE);

#[cfg(any(target_os = "linux", target_os = "android"))]
fn from_statx(statx: &rustix::fs::Statx) -> (FileId, u64) {
    let dev = rustix::fs::makedev(statx.stx_dev_major, statx.stx_dev_minor);
    (Some((dev, statx.stx_ino)), statx.stx_size)
}

fn from_metadata(metadata: &std::fs::Metadata) -> (FileId, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (Some((metadata.dev(), metadata.ino())), metadata.len())
    }
    #[cfg(not(unix))]
    {
        (None, metadata.len())
    }
}

/// Refuses `path` if a directory between `root` and it is a symbolic link: the
/// crate's own directories (`agents/<id>`, `sessions`, `quarantine`) are never reached
/// through a link planted in the tree. `root` itself may be a link (`~/.openclaw`
/// pointing elsewhere is the user's choice). Missing directories are fine.
pub(crate) fn refuse_linked_dirs(root: &Path, path: &Path) -> io::Result<()> {
    let Ok(below) = path.strip_prefix(root) else {
        return Ok(());
    };
    let mut dir = root.to_path_buf();
    let mut components = below.components().peekable();
    while let Some(component) = components.next() {
        if components.peek().is_none() {
            break; // the file itself is checked when it is opened
        }
        dir.push(component);
        match std::fs::symlink_metadata(&dir) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                return Err(Refused::NotRegular("a symbolic link").into_io_at(&dir))
            }
            Ok(metadata) if !metadata.is_dir() => {
                return Err(Refused::NotRegular(describe(metadata.file_type())).into_io_at(&dir))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens `path` for reading if it is a regular file (see [`open_checked`]).
pub(crate) fn open_no_follow(path: &Path) -> io::Result<File> {
    open_checked(OpenOptions::new().read(true), path)
}

/// Reads the regular file at `path` whole if it holds at most `limit` bytes; `None` if
/// it does not exist. Too large a file is refused before it is read
/// ([`Error::FileTooLarge`] through [`Error::io`]).
pub(crate) fn read_limited(
    path: &Path,
    limit: u64,
) -> io::Result<Option<(Vec<u8>, std::fs::Metadata)>> {
    use std::io::Read;
    let file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let metadata = file.metadata()?;
    if metadata.len() > limit {
        return Err(Refused::TooLarge {
            size: metadata.len(),
            limit,
        }
        .into_io());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    // A file growing while it is read is still cut at the limit.
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge {
            size: bytes.len() as u64,
            limit,
        }
        .into_io());
    }
    Ok(Some((bytes, metadata)))
}

impl Error {
    /// An I/O failure of `op` on `path`: a file this module refused (not a regular file,
    /// too large) is told as such, at the path it was refused at; running out of file
    /// descriptors is counted.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if is_out_of_descriptors(&source) {
            crate::ops::telemetry::out_of_descriptors();
        }
        let mut path = path.into();
        let inner = source.get_ref();
        let refused = match inner.and_then(|e| e.downcast_ref::<RefusedAt>()) {
            Some(RefusedAt(at, refused)) => {
                path = at.clone();
                Some(refused)
            }
            None => inner.and_then(|e| e.downcast_ref::<Refused>()),
        };
        match refused {
            Some(Refused::NotRegular(found)) => Error::NotAFile { path, found },
            Some(Refused::TooLarge { size, limit }) => Error::FileTooLarge {
                path,
                size: *size,
                limit: *limit,
            },
            None => Error::Io { op, path, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_tells_which_file_a_path_names_and_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let (id, len) = identify(&path).unwrap();
        assert_eq!(len, 10);
        assert_eq!(identify_file(&file).unwrap(), (id, 10));
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let metadata = std::fs::metadata(&path).unwrap();
            assert_eq!(id, Some((metadata.dev(), metadata.ino())));

            // A link is itself, not what it points to.
            let link = dir.path().join("link.jsonl");
            std::os::unix::fs::symlink(&path, &link).unwrap();
            assert_ne!(identify(&link).unwrap().0, id);
            // Another file at the path is another file.
            std::fs::rename(&path, dir.path().join("archived")).unwrap();
            std::fs::write(&path, b"0123456789").unwrap();
            assert_ne!(identify(&path).unwrap().0, id);
        }
        assert_eq!(
            identify(&dir.path().join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
