//! Files written whole or not at all: what `export --output` writes goes to a file
//! nobody can see until it is complete, then takes the destination's name in one
//! rename — so a reader never sees half a document, and an export killed midway leaves
//! nothing of what it read behind.
//!
//! On Linux the file has no name while it is written (`O_TMPFILE`): a process killed
//! then leaves nothing at all, the kernel frees the file. It gets a name beside the
//! destination (`.<name>.export-<pid>-<start>.tmp`) only to be renamed over it at once.
//! Elsewhere, or where the file system has no unnamed files, it is written under that
//! name from the start. Either way a later export to the same destination removes what
//! a writer that is gone left under such a name.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

/// A file being written for `destination`.
pub struct Staged {
    /// The file, until it is committed.
    file: Option<io::BufWriter<File>>,
    destination: PathBuf,
    /// The name it is written under, when it has one (no unnamed files here).
    named: Option<PathBuf>,
}

impl Staged {
    /// A file for `destination`, in its directory, owner-only (0600). Leftovers of
    /// writers that are gone, for the same destination, are removed first.
    pub fn new(destination: &Path) -> io::Result<Staged> {
        remove_leftovers(destination);
        let (file, named) = match unnamed_in(directory_of(destination)) {
            Some(file) => (file, None),
            None => {
                let name = staged_name(destination);
                let file = create_private(&name)?;
                (file, Some(name))
            }
        };
        Ok(Staged {
            file: Some(io::BufWriter::with_capacity(1 << 16, file)),
            destination: destination.to_owned(),
            named,
        })
    }

    /// Makes the file durable and gives it the destination's name.
    pub fn commit(mut self) -> io::Result<()> {
        let writer = self.file.take().expect("a staged file is committed once");
        let mut file = writer
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        let named = match self.named.take() {
            Some(named) => named,
            None => name_unnamed(&mut file, &self.destination)?,
        };
        if let Err(error) = std::fs::rename(&named, &self.destination) {
            let _ = std::fs::remove_file(&named);
            return Err(error);
        }
        // The rename itself is durable once the directory is.
        if let Ok(directory) = File::open(directory_of(&self.destination)) {
            let _ = directory.sync_all();
        }
        Ok(())
    }
}

impl Staged {
    fn writer(&mut self) -> io::Result<&mut io::BufWriter<File>> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("the file was committed"))
    }
}

impl Write for Staged {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.writer()?.write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer()?.flush()
    }
}

impl Drop for Staged {
    /// An export that failed leaves nothing behind (an unnamed file is freed anyway).
    fn drop(&mut self) {
        if let Some(named) = &self.named {
            let _ = std::fs::remove_file(named);
        }
    }
}

fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `.<name>.export-`: how the names of this command's staged files for `destination`
/// begin.
fn staged_prefix(destination: &Path) -> String {
    let name = destination
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.export-")
}

/// `.<name>.export-<pid>-<start>.tmp` beside `destination`: who wrote it, so a later
/// export can tell whether that writer is gone.
fn staged_name(destination: &Path) -> PathBuf {
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
    directory_of(destination).join(format!("{}{pid}-{start}.tmp", staged_prefix(destination)))
}

/// When process `pid` started (clock ticks since boot), if it runs and this is Linux.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields = stat.get(stat.rfind(')')? + 1..)?;
    fields.split_whitespace().nth(19)?.parse().ok()
}

/// Removes the staged files of `destination` whose writers are gone: another process
/// (or this one's earlier incarnation) killed while it exported.
fn remove_leftovers(destination: &Path) {
    let prefix = staged_prefix(destination);
    let Ok(listing) = std::fs::read_dir(directory_of(destination)) else {
        return;
    };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(writer) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
        else {
            continue;
        };
        let alive = writer.split_once('-').is_some_and(|(pid, start)| {
            pid.parse::<u32>()
                .ok()
                .and_then(start_time)
                .is_some_and(|now| now.to_string() == start)
        });
        // Only regular files this command named: never a link or a directory.
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if !alive && regular {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).read(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc_nofollow());
    }
    options.open(path)
}

#[cfg(unix)]
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// A file with no name in `dir` (Linux's `O_TMPFILE`), owner-only; `None` where there
/// is none (another system, a file system without them).
fn unnamed_in(dir: &Path) -> Option<File> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{Mode, OFlags, CWD};
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(CWD, dir, flags, Mode::RUSR | Mode::WUSR).ok()?;
        Some(File::from(fd))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}

/// Gives the unnamed `file` a staged name beside `destination` and returns it: linked
/// through `/proc/self/fd`, or — without it — copied into a named file.
fn name_unnamed(file: &mut File, destination: &Path) -> io::Result<PathBuf> {
    let named = staged_name(destination);
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{AtFlags, CWD};
        use std::os::fd::AsRawFd;
        let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        if rustix::fs::linkat(
            CWD,
            proc_path.as_str(),
            CWD,
            &named,
            AtFlags::SYMLINK_FOLLOW,
        )
        .is_ok()
        {
            return Ok(named);
        }
    }
    let mut copy = create_private(&named)?;
    let copied = (|| {
        file.rewind()?;
        io::copy(file, &mut copy)?;
        copy.sync_all()
    })();
    if let Err(error) = copied {
        let _ = std::fs::remove_file(&named);
        return Err(error);
    }
    Ok(named)
}
