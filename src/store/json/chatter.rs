//! [`JsonFileChatter`]: group chatter in files beside the sessions, so it survives a
//! restart and is shared by every process on the machine.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;

use super::keyed_files::KeyedFiles;
use crate::error::Result;
use crate::inbound::chatter::{
    legacy_chatter_key, ChatterBuffer, ChatterClaim, ChatterEdit, ChatterEntry, EntryEditor,
    GroupChatter, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS,
};

/// The directory under the state root that holds group chatter.
pub(crate) const CHATTER_DIR: &str = "group-history";

/// Group chatter kept in files: `<root>/group-history/<group>.json`, one per group, with
/// the same bounds as [`InMemoryChatter`](crate::inbound::chatter::InMemoryChatter) (50
/// entries a group, 1,000 groups, the least recently used dropped first).
///
/// Every call takes an OS lock on `<root>/group-history/.lock`, so several processes
/// on one machine share one history without losing an entry; each group file is
/// replaced by an atomic rename, owner-only (0600): an array of entries, or, while
/// turns hold claims on the group, an object of the unclaimed entries and the claimed
/// ones. The directory is made owner-only (0700) and never reached through a symbolic
/// link. A file that does not parse is moved aside as `<group>.json.corrupt` (kept,
/// reported in the log) and the group starts over. This is what
/// [`SessionManager::connect`](crate::SessionManager::connect) uses for a `json:` store.
///
/// ```
/// use agent_sessions::inbound::{ChatterBuffer, ChatterEntry};
/// use agent_sessions::store::JsonFileChatter;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let history = JsonFileChatter::new(dir.path());
/// let entry = ChatterEntry { sender: "Ann".into(), body: "lunch?".into(), timestamp: None, message_id: None, sender_id: None };
/// history.append("whatsapp:default:group:120363@g.us", entry).await?;
///
/// // Another process, or this one after a restart, sees it.
/// let again = JsonFileChatter::new(dir.path());
/// assert_eq!(again.take("whatsapp:default:group:120363@g.us").await?.len(), 1);
/// assert!(again.entries("whatsapp:default:group:120363@g.us").await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JsonFileChatter {
    files: KeyedFiles,
    limit: usize,
    max_keys: usize,
}

impl JsonFileChatter {
    /// Group chatter under the state root `root` (the directory a [`JsonFileStore`]
    /// was made with), with OpenClaw's bounds.
    ///
    /// [`JsonFileStore`]: crate::JsonFileStore
    pub fn new(root: impl AsRef<Path>) -> Self {
        JsonFileChatter::with_limits(root, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }

    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups.
    pub fn with_limits(root: impl AsRef<Path>, limit: usize, max_keys: usize) -> Self {
        JsonFileChatter {
            files: KeyedFiles::new(root.as_ref(), CHATTER_DIR, "group chatter"),
            limit,
            max_keys: max_keys.max(1),
        }
    }
}

/// The group key a file is named after (its beginning, for a shortened name).
fn group_of(path: &Path) -> String {
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .trim_end_matches(".json");
    let stem = stem.split("%~").next().unwrap_or(stem);
    crate::store::json::paths::decode_file_component(stem).unwrap_or_else(|_| stem.to_owned())
}

/// A group's file: the entries as an array (how every version writes a group without
/// claims), or the entries and the claims as an object.
#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum GroupFile {
    #[default]
    Empty,
    Entries(VecDeque<ChatterEntry>),
    Group(GroupChatter),
}

impl From<GroupFile> for GroupChatter {
    fn from(file: GroupFile) -> Self {
        match file {
            GroupFile::Empty => GroupChatter::default(),
            GroupFile::Entries(entries) => GroupChatter {
                entries,
                ..GroupChatter::default()
            },
            GroupFile::Group(group) => group,
        }
    }
}

/// One group, read under the directory's lock.
struct Group<'f> {
    files: &'f KeyedFiles,
    path: PathBuf,
    history: GroupChatter,
    /// Whether the group had a file (a new one may push others out).
    existed: bool,
}

impl<'f> Group<'f> {
    /// Group `key`, with what was kept for it under its key from before history was
    /// per agent (that file is merged in, oldest first, and removed when the group is
    /// next written).
    fn load(files: &'f KeyedFiles, key: &str) -> Result<(Self, Option<PathBuf>)> {
        let path = files.file_of(key);
        let existed = crate::store::fs::exists_no_follow(&path);
        let mut history: GroupChatter = files.read::<GroupFile>(&path)?.into();
        let legacy = legacy_chatter_key(key)
            .map(|legacy| files.file_of(legacy))
            .filter(|legacy| crate::store::fs::exists_no_follow(legacy));
        if let Some(legacy) = &legacy {
            let mut older: GroupChatter = files.read::<GroupFile>(legacy)?.into();
            older.entries.append(&mut history.entries);
            older.claimed.append(&mut history.claimed);
            older.seen.append(&mut history.seen);
            history = older;
        }
        let group = Group {
            files,
            path,
            history,
            existed: existed || legacy.is_some(),
        };
        Ok((group, legacy))
    }

    /// Writes the group (removing its file when it is empty), then removes the legacy
    /// file it adopted.
    fn save(&self, legacy: Option<PathBuf>) -> Result<()> {
        if self.history.is_empty() {
            self.files.remove(&self.path)?;
        } else if self.history.claimed.is_empty() && self.history.seen.is_empty() {
            self.files.write(&self.path, &self.history.entries)?;
        } else {
            self.files.write(&self.path, &self.history)?;
        }
        match legacy {
            Some(legacy) => self.files.remove(&legacy),
            None => Ok(()),
        }
    }
}

impl JsonFileChatter {
    /// Runs `f` on group `key` under the directory's lock, writing the group back when
    /// `f` says it changed it.
    async fn with_group<T: Send + 'static>(
        &self,
        key: &str,
        f: impl FnOnce(&mut GroupChatter) -> (T, bool) + Send + 'static,
    ) -> Result<T> {
        let key = key.to_owned();
        let max_keys = self.max_keys;
        self.files
            .locked(move |files| {
                let (mut group, legacy) = Group::load(files, &key)?;
                let (value, changed) = f(&mut group.history);
                if changed || legacy.is_some() {
                    group.save(legacy)?;
                    if !group.existed && !group.history.is_empty() {
                        files.evict(max_keys)?;
                    }
                }
                Ok(value)
            })
            .await
    }
}

#[async_trait]
impl ChatterBuffer for JsonFileChatter {
    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let limit = self.limit;
        self.with_group(key, move |group| {
            group.append(entry, limit);
            ((), true)
        })
        .await
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        if self.limit == 0 {
            return Ok(true);
        }
        let limit = self.limit;
        self.with_group(key, move |group| {
            let appended = group.append_once(entry, limit, window);
            (appended, appended)
        })
        .await
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        self.with_group(key, |group| (Vec::from(group.entries.clone()), false))
            .await
    }

    async fn clear(&self, key: &str) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        self.with_group(key, |group| {
            *group = GroupChatter::default();
            ((), true)
        })
        .await
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        self.with_group(key, |group| {
            let taken = group.take();
            let changed = !taken.is_empty();
            (taken, changed)
        })
        .await
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        let (claim, take_over) = (claim.clone(), take_over.to_vec());
        self.with_group(key, move |group| {
            let claimed = group.claim(&claim, &take_over);
            let changed = !claimed.is_empty();
            (claimed, changed)
        })
        .await
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        self.with_group(key, |group| (group.claims(), false)).await
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        let claim_id = claim_id.to_owned();
        self.with_group(key, move |group| ((), group.settle(&claim_id)))
            .await
    }

    async fn release(&self, key: &str, claim_id: &str, _: Vec<ChatterEntry>) -> Result<()> {
        let claim_id = claim_id.to_owned();
        self.with_group(key, move |group| ((), group.release(&claim_id)))
            .await
    }

    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        if !self.files.exists() {
            return Ok(Vec::new());
        }
        // Read without the lock, writing nothing: a copy may read a tree opened
        // read-only.
        self.files
            .unlocked(|files| {
                let mut groups = Vec::new();
                for path in files.all_files()? {
                    let key = group_of(&path);
                    if files.file_of(&key) != path {
                        // A name shortened to fit the file system: the group's key is
                        // not in it, and a copy under another key would be lost.
                        let problem = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the group key is too long to recover from the file name",
                        );
                        return Err(crate::Error::io("copy group chatter", &path, problem));
                    }
                    let Some(file) = files.read_as_is::<GroupFile>(&path)? else {
                        let problem = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "the group's chatter does not parse",
                        );
                        return Err(crate::Error::io("copy group chatter", &path, problem));
                    };
                    let group: GroupChatter = file.into();
                    if !group.is_empty() {
                        groups.push((key, group));
                    }
                }
                Ok(groups)
            })
            .await
    }

    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        self.with_group(key, move |held| {
            if !held.is_empty() {
                return (false, false);
            }
            *held = group;
            (true, true)
        })
        .await
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        if !self.files.exists() {
            return Ok(0);
        }
        // The files are edited under the lock on the blocking pool, which needs owned
        // data: the entries are read, judged here, and the decisions applied to each
        // file as it is then (an entry appended meanwhile is kept).
        let groups = self
            .files
            .locked(|files| {
                // A file that does not parse is skipped and left as it is (an erase
                // removes it if it names the person).
                let mut groups = Vec::new();
                for path in files.all_files()? {
                    if let Some(file) = files.read_as_is::<GroupFile>(&path)? {
                        groups.push((path, GroupChatter::from(file)));
                    }
                }
                Ok(groups)
            })
            .await?;
        let mut decisions: Vec<(PathBuf, Vec<(ChatterEntry, ChatterEdit)>)> = Vec::new();
        for (path, history) in groups {
            let judged: Vec<(ChatterEntry, ChatterEdit)> = history
                .all_entries()
                .map(|entry| (entry.clone(), edit(&group_of(&path), entry)))
                .filter(|(_, decision)| *decision != ChatterEdit::Keep)
                .collect();
            if !judged.is_empty() {
                decisions.push((path, judged));
            }
        }
        if decisions.is_empty() {
            return Ok(0);
        }
        self.files
            .locked(move |files| {
                let mut changed = 0;
                for (path, judged) in decisions {
                    let Some(file) = files.read_as_is::<GroupFile>(&path)? else {
                        continue;
                    };
                    let history = GroupChatter::from(file);
                    let mut group = Group {
                        files,
                        path,
                        history,
                        existed: true,
                    };
                    let decide = |_: &str, entry: &ChatterEntry| {
                        judged
                            .iter()
                            .find(|(judged, _)| judged == entry)
                            .map_or(ChatterEdit::Keep, |(_, decision)| decision.clone())
                    };
                    let key = group_of(&group.path);
                    let count = group.history.edit(&key, &decide);
                    if count > 0 {
                        group.save(None)?;
                        changed += count;
                    }
                }
                Ok(changed)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn said(body: &str) -> ChatterEntry {
        ChatterEntry {
            sender: "Ann".into(),
            body: body.into(),
            timestamp: None,
            message_id: None,
            sender_id: None,
        }
    }

    async fn bodies(history: &JsonFileChatter, key: &str) -> Vec<String> {
        history
            .entries(key)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.body)
            .collect()
    }

    #[tokio::test]
    async fn bounded_per_group_and_over_groups() {
        // (limit, max groups, appends as (group, body), what each group keeps)
        type Case = (
            usize,
            usize,
            &'static [(&'static str, &'static str)],
            &'static [(&'static str, &'static [&'static str])],
        );
        let cases: [Case; 4] = [
            (
                2,
                10,
                &[("g1", "a"), ("g1", "b"), ("g1", "c")],
                &[("g1", &["b", "c"])],
            ),
            (0, 10, &[("g1", "a")], &[("g1", &[])]),
            (
                5,
                2,
                &[("g1", "a"), ("g2", "b"), ("g3", "c")],
                &[("g1", &[]), ("g2", &["b"]), ("g3", &["c"])],
            ),
            (
                5,
                10,
                &[
                    ("telegram:default:group:-100/../x", "a"),
                    ("telegram:default:group:-100", "b"),
                ],
                &[
                    ("telegram:default:group:-100/../x", &["a"]),
                    ("telegram:default:group:-100", &["b"]),
                ],
            ),
        ];
        for (limit, max_keys, appends, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            let history = JsonFileChatter::with_limits(dir.path(), limit, max_keys);
            for (group, body) in appends {
                history.append(group, said(body)).await.unwrap();
                // Distinct modification times, so eviction order is the append order.
                std::thread::sleep(std::time::Duration::from_millis(15));
            }
            for (group, kept) in expected {
                assert_eq!(
                    bodies(&history, group).await,
                    *kept,
                    "limit {limit}, max {max_keys}, {group}"
                );
            }
            // Every file stays inside the history directory.
            for entry in fs::read_dir(dir.path().join(CHATTER_DIR)).unwrap() {
                assert!(entry
                    .unwrap()
                    .path()
                    .starts_with(dir.path().join(CHATTER_DIR)));
            }
        }
    }

    #[tokio::test]
    async fn groups_with_ids_too_long_for_a_file_name_keep_their_own_history() {
        let long = |unit: &str, n: usize| format!("whatsapp:default:group:{}", unit.repeat(n));
        let keys = [
            long("é", 60),
            long("中", 64),
            long("x", 300),
            // The same first 600 characters: told apart by the whole key.
            format!("{}a", long("y", 600)),
            format!("{}b", long("y", 600)),
        ];
        let dir = tempfile::tempdir().unwrap();
        let history = JsonFileChatter::new(dir.path());
        for (i, key) in keys.iter().enumerate() {
            history.append(key, said(&i.to_string())).await.unwrap();
        }
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(bodies(&history, key).await, [i.to_string()], "{key}");
            let name = history.files.file_of(key);
            assert!(name.file_name().unwrap().len() <= 255 - ".corrupt".len());
            assert!(name.starts_with(dir.path().join(CHATTER_DIR)));
        }
    }

    #[tokio::test]
    async fn a_corrupt_group_file_is_kept_aside_and_the_group_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let history = JsonFileChatter::new(dir.path());
        history.append("g", said("a")).await.unwrap();
        let path = history.files.file_of("g");
        fs::write(&path, b"{not json").unwrap();
        assert!(bodies(&history, "g").await.is_empty());
        assert_eq!(
            fs::read(path.with_extension("json.corrupt")).unwrap(),
            b"{not json"
        );
        history.append("g", said("b")).await.unwrap();
        assert_eq!(bodies(&history, "g").await, ["b"]);
    }

    #[tokio::test]
    async fn clearing_with_history_off_leaves_the_group() {
        let dir = tempfile::tempdir().unwrap();
        crate::store::testing::chatter::clearing_with_history_off_leaves_the_group(
            JsonFileChatter::with_limits(dir.path(), 3, 10),
            JsonFileChatter::with_limits(dir.path(), 0, 10),
        )
        .await;
    }

    #[tokio::test]
    async fn hands_claimed_entries_over_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        crate::store::testing::chatter::claims_hand_entries_over_exactly_once(
            JsonFileChatter::with_limits(dir.path(), 3, 10),
            3,
        )
        .await;
        // Each group's file is an array again once it has no claims (what earlier
        // versions read).
        let history = JsonFileChatter::new(dir.path());
        history.append("g", said("a")).await.unwrap();
        let text = fs::read_to_string(history.files.file_of("g")).unwrap();
        assert!(text.starts_with('['), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_handles_appending_at_once_lose_nothing_and_files_are_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for writer in 0..2 {
            let history = JsonFileChatter::new(dir.path());
            tasks.spawn(async move {
                for i in 0..20 {
                    history
                        .append("g", said(&format!("{writer}-{i}")))
                        .await
                        .unwrap();
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        let history = JsonFileChatter::new(dir.path());
        assert_eq!(history.entries("g").await.unwrap().len(), 40);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for file in [
                history.files.file_of("g"),
                dir.path().join(CHATTER_DIR).join(".lock"),
            ] {
                let mode = fs::metadata(&file).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o600, "{}", file.display());
            }
        }
        assert_eq!(history.take("g").await.unwrap().len(), 40);
        assert!(history.entries("g").await.unwrap().is_empty());
    }
}
