//! The closed sessions of one store file: sessions replaced under their key, kept in a
//! sibling file so that `sessions.json` stays exactly OpenClaw's.
//!
//! `<dir>/sessions.closed.json` (for a store file `sessions.json`) holds
//! `{"version":1,"sessions":[{"sessionKey":…,"entry":{…}}, …]}`, oldest first, at most
//! [`CLOSED_SESSIONS_PER_KEY`] per key. It is read whole (refused past the store's size
//! limit), and written only under the store file's lock: owner-only, to a temporary
//! file that is fsynced and renamed over it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::entry::SessionEntry;
use crate::error::{CorruptProblem, Error, Result};
use crate::store::CLOSED_SESSIONS_PER_KEY;

/// The closed-sessions file of the store file `store_path`: `<stem>.closed.json` in
/// the same directory.
pub(crate) fn closed_path(store_path: &Path) -> PathBuf {
    let stem = store_path
        .file_stem()
        .map_or_else(|| "sessions".into(), |s| s.to_string_lossy().into_owned());
    store_path.with_file_name(format!("{stem}.closed.json"))
}

/// One closed session as the file keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClosedSession {
    /// The key it was the session of, as written.
    pub(crate) session_key: String,
    /// The entry, status `closed`.
    pub(crate) entry: SessionEntry,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ClosedFile {
    version: u32,
    sessions: Vec<ClosedSession>,
}

/// What one commit changes in the closed-sessions file.
#[derive(Debug, Default)]
pub(crate) struct ClosedChanges {
    /// Sessions to keep (replaced in this batch), oldest first.
    pub(crate) keep: Vec<ClosedSession>,
    /// Session ids to forget.
    pub(crate) forget: Vec<String>,
}

impl ClosedChanges {
    pub(crate) fn is_empty(&self) -> bool {
        self.keep.is_empty() && self.forget.is_empty()
    }
}

/// The closed sessions in `path`, oldest first (none when there is no file).
pub(crate) fn read(path: &Path, limit: u64) -> Result<Vec<ClosedSession>> {
    let Some((bytes, _)) =
        crate::fsutil::read_limited(path, limit).map_err(|e| Error::io("read", path, e))?
    else {
        return Ok(Vec::new());
    };
    let file: ClosedFile = serde_json::from_slice(&bytes).map_err(|source| Error::Corrupt {
        path: path.to_owned(),
        problem: CorruptProblem::Syntax(source),
        valid_backup: None,
    })?;
    Ok(file.sessions)
}

/// Applies `changes` to the file at `path` (under the store file's lock). Returns how
/// many sessions were forgotten. An unreadable file is an error and is left untouched.
pub(crate) fn write(path: &Path, limit: u64, changes: &ClosedChanges) -> Result<usize> {
    let mut sessions = read(path, limit)?;
    let before = sessions.len();
    sessions.retain(|s| !changes.forget.contains(&s.entry.session_id));
    let forgotten = before - sessions.len();
    for kept in &changes.keep {
        sessions.retain(|s| s.entry.session_id != kept.entry.session_id);
        sessions.push(kept.clone());
        let of_key = sessions
            .iter()
            .filter(|s| s.session_key == kept.session_key)
            .count();
        let mut surplus = of_key.saturating_sub(CLOSED_SESSIONS_PER_KEY);
        sessions.retain(|s| {
            let drop = surplus > 0 && s.session_key == kept.session_key;
            surplus -= usize::from(drop);
            !drop
        });
    }
    let bytes = serde_json::to_vec(&ClosedFile {
        version: 1,
        sessions,
    })
    .map_err(|source| Error::io("encode", path, std::io::Error::other(source)))?;
    crate::fsutil::write_private_atomically(path, &bytes)?;
    Ok(forgotten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_file_sits_beside_the_store_file() {
        let cases = [
            (
                "/s/agents/main/sessions/sessions.json",
                "/s/agents/main/sessions/sessions.closed.json",
            ),
            ("/srv/bot/ops.json", "/srv/bot/ops.closed.json"),
        ];
        for (store, closed) in cases {
            assert_eq!(closed_path(Path::new(store)), Path::new(closed), "{store}");
        }
    }

    #[test]
    fn writes_keep_the_newest_per_key_and_forget_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.closed.json");
        let closed = |key: &str, id: &str| ClosedSession {
            session_key: key.into(),
            entry: SessionEntry::new(id, 1),
        };
        for n in 0..CLOSED_SESSIONS_PER_KEY + 2 {
            let changes = ClosedChanges {
                keep: vec![closed("agent:main:main", &format!("s{n}"))],
                forget: Vec::new(),
            };
            write(&path, 1 << 20, &changes).unwrap();
        }
        write(
            &path,
            1 << 20,
            &ClosedChanges {
                keep: vec![closed("agent:main:other", "o1")],
                forget: vec!["s2".into()],
            },
        )
        .unwrap();
        let ids: Vec<String> = read(&path, 1 << 20)
            .unwrap()
            .into_iter()
            .map(|s| s.entry.session_id)
            .collect();
        let mut expected: Vec<String> = (3..CLOSED_SESSIONS_PER_KEY + 2)
            .map(|n| format!("s{n}"))
            .collect();
        expected.push("o1".into());
        assert_eq!(ids, expected);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn an_unreadable_file_is_an_error_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.closed.json");
        std::fs::write(&path, b"{not json").unwrap();
        let changes = ClosedChanges {
            keep: vec![],
            forget: vec!["x".into()],
        };
        assert!(matches!(
            write(&path, 1 << 20, &changes),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"{not json");
    }
}
