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

use crate::error::{CorruptProblem, Error, Result};
use crate::store::entry::SessionEntry;
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

/// The file as written: each record is read on its own, so one that does not decode
/// hides only itself.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ClosedFile {
    version: u32,
    sessions: Vec<serde_json::Value>,
}

/// One record of the file.
#[derive(Debug, Clone)]
enum Record {
    Closed(Box<ClosedSession>),
    /// A record that does not decode as a closed session: not served, reported by
    /// [`unreadable`], and written back as it was.
    Unreadable {
        raw: serde_json::Value,
        problem: String,
    },
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

/// Every record in `path`, oldest first (none when there is no file); an error only
/// when the file as a whole is not a closed-sessions file.
fn records(path: &Path, limit: u64) -> Result<Vec<Record>> {
    let Some((bytes, _)) =
        crate::store::fs::read_limited(path, limit).map_err(|e| Error::io("read", path, e))?
    else {
        return Ok(Vec::new());
    };
    let file: ClosedFile = serde_json::from_slice(&bytes).map_err(|source| Error::Corrupt {
        path: path.to_owned(),
        problem: CorruptProblem::Syntax(source),
        valid_backup: None,
    })?;
    Ok(file
        .sessions
        .into_iter()
        .map(
            |raw| match serde_json::from_value::<ClosedSession>(raw.clone()) {
                Ok(closed) => Record::Closed(Box::new(closed)),
                Err(error) => Record::Unreadable {
                    raw,
                    problem: format!("the closed session does not decode: {error}"),
                },
            },
        )
        .collect())
}

/// The closed sessions in `path`, oldest first (none when there is no file). A record
/// that does not decode is left out (see [`unreadable`]); of two records of one session
/// id, the later is the one kept.
pub(crate) fn read(path: &Path, limit: u64) -> Result<Vec<ClosedSession>> {
    let mut sessions: Vec<ClosedSession> = Vec::new();
    for record in records(path, limit)? {
        if let Record::Closed(closed) = record {
            sessions.retain(|s| s.entry.session_id != closed.entry.session_id);
            sessions.push(*closed);
        }
    }
    Ok(sessions)
}

/// The records of `path` that are not served, as `(key as written, problem)`: those
/// that do not decode, and those a later, different record of the same session id
/// hides.
pub(crate) fn unreadable(path: &Path, limit: u64) -> Result<Vec<(String, String)>> {
    let records = records(path, limit)?;
    let mut found = Vec::new();
    for (at, record) in records.iter().enumerate() {
        match record {
            Record::Unreadable { raw, problem } => {
                let key = raw.get("sessionKey").and_then(|k| k.as_str());
                found.push((key.unwrap_or_default().to_owned(), problem.clone()));
            }
            Record::Closed(closed) => {
                // A repeat with the same content hides nothing.
                let hidden = records[at + 1..].iter().any(|later| {
                    matches!(later, Record::Closed(l)
                        if l.entry.session_id == closed.entry.session_id && l != closed)
                });
                if hidden {
                    found.push((
                        closed.session_key.clone(),
                        format!(
                            "closed session {} is recorded again later in the file; the \
                             later record is the one served",
                            closed.entry.session_id
                        ),
                    ));
                }
            }
        }
    }
    Ok(found)
}

/// Applies `changes` to the file at `path` (under the store file's lock). Returns how
/// many sessions were forgotten. A file that is not a closed-sessions file is an error
/// and is left untouched; a record in it that does not decode is written back as it
/// was.
pub(crate) fn write(path: &Path, limit: u64, changes: &ClosedChanges) -> Result<usize> {
    let mut records = records(path, limit)?;
    let id_of = |record: &Record| match record {
        Record::Closed(closed) => Some(closed.entry.session_id.clone()),
        Record::Unreadable { .. } => None,
    };
    let before = records.len();
    records.retain(|r| id_of(r).is_none_or(|id| !changes.forget.contains(&id)));
    let forgotten = before - records.len();
    for kept in &changes.keep {
        records.retain(|r| id_of(r).as_ref() != Some(&kept.entry.session_id));
        records.push(Record::Closed(Box::new(kept.clone())));
        let of_key =
            |r: &Record| matches!(r, Record::Closed(c) if c.session_key == kept.session_key);
        let mut surplus = records
            .iter()
            .filter(|r| of_key(r))
            .count()
            .saturating_sub(CLOSED_SESSIONS_PER_KEY);
        records.retain(|r| {
            let drop = surplus > 0 && of_key(r);
            surplus -= usize::from(drop);
            !drop
        });
    }
    let sessions = records
        .into_iter()
        .map(|record| match record {
            Record::Closed(closed) => serde_json::to_value(*closed),
            Record::Unreadable { raw, .. } => Ok(raw),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|source| Error::io("encode", path, std::io::Error::other(source)))?;
    let bytes = serde_json::to_vec(&ClosedFile {
        version: 1,
        sessions,
    })
    .map_err(|source| Error::io("encode", path, std::io::Error::other(source)))?;
    crate::store::fs::write_private_atomically(path, &bytes)?;
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
    fn a_record_that_does_not_decode_hides_only_itself_and_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.closed.json");
        let good = serde_json::to_value(ClosedSession {
            session_key: "agent:main:a".into(),
            entry: SessionEntry::new("s-good", 1),
        })
        .unwrap();
        let bad = serde_json::json!({"sessionKey": "agent:main:b", "entry": {"sessionId": 7}});
        let mut changed = good.clone();
        changed["entry"]["label"] = "renamed".into();
        let file = serde_json::json!({"version": 1, "sessions": [bad.clone(), good.clone(), good, changed]});
        std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();

        let ids: Vec<String> = read(&path, 1 << 20)
            .unwrap()
            .into_iter()
            .map(|s| s.entry.session_id)
            .collect();
        assert_eq!(
            ids,
            ["s-good"],
            "the bad record is skipped, the repeat read once"
        );
        let problems = unreadable(&path, 1 << 20).unwrap();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0].0, "agent:main:b");
        assert!(problems[0].1.contains("does not decode"), "{problems:?}");
        assert!(
            problems[1].1.contains("recorded again later"),
            "{problems:?}"
        );

        // Rewriting the file keeps the record it cannot read, as it was.
        let changes = ClosedChanges {
            keep: vec![],
            forget: vec!["s-good".into()],
        };
        assert_eq!(write(&path, 1 << 20, &changes).unwrap(), 3);
        let after: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(after["sessions"], serde_json::json!([bad]));
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
