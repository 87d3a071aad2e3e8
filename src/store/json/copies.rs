//! The copies a JSON tree keeps beside its live files, and erasing a person from them:
//! `sessions.json.bak`, orphaned temporary files, files set aside as `*.corrupt` (and
//! group-history or system-event files that no longer parse), and what `doctor
//! --repair` moved into `quarantine/` directories.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::chatter::CHATTER_DIR;
use super::io::backup_path;
use super::system_events::EVENTS_DIR;
use crate::error::{Error, Result};
use crate::store::fs::{open_no_follow, write_private_atomically};

/// A temporary file older than this is a crashed writer's, whatever the lock says
/// (a live writer renames its file within milliseconds).
const ORPHAN_AGE: Duration = Duration::from_secs(30);

/// The largest copy searched; a larger one is reported, not guessed about.
const MAX_COPY: u64 = 1 << 30;

/// Rewrites every backup (`*.bak`) under `root` from its live file and removes dead
/// writers' temporary files; removes the quarantined, corrupt and unparsable copies
/// that hold one of `needles`. Returns how many it removed or rewrote. The live files
/// themselves are the caller's business.
pub(super) fn erase_copies(root: &Path, needles: &[String]) -> Result<usize> {
    let needles: Vec<&[u8]> = needles
        .iter()
        .map(|n| n.as_bytes())
        .filter(|n| !n.is_empty())
        .collect();
    let mut dirs: Vec<PathBuf> = vec![
        root.join(CHATTER_DIR),
        root.join(EVENTS_DIR),
        root.join("search"),
    ];
    if let Ok(agents) = fs::read_dir(root.join("agents")) {
        for agent in agents.filter_map(|entry| entry.ok()) {
            if agent.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(agent.path().join("sessions"));
            }
        }
    }
    let mut erased = 0;
    for dir in dirs {
        erased += erase_in(&dir, &needles, false)?;
    }
    Ok(erased)
}

/// The copies in `dir` (everything in it when `quarantined`).
fn erase_in(dir: &Path, needles: &[&[u8]], quarantined: bool) -> Result<usize> {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut erased = 0;
    for entry in listing.filter_map(|entry| entry.ok()) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        // Never followed: a link is neither searched nor removed.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if quarantined || name == "quarantine" {
                erased += erase_in(&path, needles, true)?;
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        // A backup becomes its live file as it is now (already erased), and a dead
        // writer's temporary file goes, whatever they hold: an erase killed after its
        // last write left them holding what it erased, which a rerun can no longer
        // name. Other copies go when they name the person.
        if let Some(live) = name.strip_suffix(".bak").filter(|_| !quarantined) {
            debug_assert_eq!(backup_path(&dir.join(live)), path);
            let live_bytes = read_all(&dir.join(live))?;
            if live_bytes.as_deref() == read_all(&path)?.as_deref() {
                continue;
            }
            match live_bytes {
                Some(bytes) => write_private_atomically(&path, &bytes)?,
                None => remove(&path)?,
            }
            erased += 1;
            continue;
        }
        if !quarantined && (name.ends_with(".tmp") || name.starts_with(".tmp")) {
            if orphaned(&path, dir) {
                remove(&path)?;
                erased += 1;
            }
            continue;
        }
        let unparsable = (dir.ends_with(CHATTER_DIR) || dir.ends_with(EVENTS_DIR))
            && name.ends_with(".json")
            && read_all(&path)?
                .is_some_and(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).is_err());
        if !(quarantined || name.ends_with(".corrupt") || unparsable) || !holds_any(&path, needles)?
        {
            continue;
        }
        remove(&path)?;
        erased += 1;
    }
    Ok(erased)
}

/// Whether the temporary file `path` is a dead writer's: old, or in a directory whose
/// store lock file is gone.
fn orphaned(path: &Path, dir: &Path) -> bool {
    let old = fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .is_some_and(|age| age > ORPHAN_AGE);
    let unlocked = !crate::store::fs::exists_no_follow(&dir.join("sessions.json.lock"))
        && !crate::store::fs::exists_no_follow(&dir.join(".lock"));
    old || unlocked
}

fn read_all(path: &Path) -> Result<Option<Vec<u8>>> {
    let mut file = match open_no_follow(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", path, e)),
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_COPY {
        return Err(Error::io(
            "read",
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a copy larger than 1 GiB: search it and remove it by hand",
            ),
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    Ok(Some(bytes))
}

fn holds_any(path: &Path, needles: &[&[u8]]) -> Result<bool> {
    Ok(read_all(path)?.is_some_and(|bytes| contains_any(&bytes, needles)))
}

/// Whether `haystack` contains one of `needles` whole: not inside a longer word or
/// number (`42` is not in `420`), without regard to ASCII case.
pub(crate) fn contains_any(haystack: &[u8], needles: &[&[u8]]) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    needles.iter().any(|needle| {
        let Some((&first, &last)) = needle.first().zip(needle.last()) else {
            return false;
        };
        haystack
            .windows(needle.len())
            .enumerate()
            .any(|(at, window)| {
                window.eq_ignore_ascii_case(needle)
                    && (!word(first) || at == 0 || !word(haystack[at - 1]))
                    && (!word(last)
                        || haystack
                            .get(at + needle.len())
                            .is_none_or(|&after| !word(after)))
            })
    })
}

fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::contains_any;

    #[test]
    fn ids_are_found_whole_only() {
        let text = br#"{"agent:main:telegram:dm:420":{"lastTo":"telegram:1234567890"}}"#;
        assert!(!contains_any(text, &[b"agent:main:telegram:dm:42"]));
        assert!(!contains_any(text, &[b"telegram:42"]));
        assert!(!contains_any(text, &[b"123456789"]));
        assert!(contains_any(text, &[b"telegram:1234567890"]));
        assert!(contains_any(text, &[b"AGENT:main:telegram:dm:420"]));
    }
}
