//! [`SqliteChatter`]: group chatter in the `group_history` table of a [`SqliteStore`],
//! so it survives a restart and is shared by every process using the file.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{params, Connection};

use super::keyed_log::KeyedLog;
use super::{db_error, SqliteStore};
use crate::error::Result;
use crate::inbound::chatter::{
    entry_message_id, legacy_chatter_key, ChatterBuffer, ChatterClaim, ChatterEdit, ChatterEntry,
    EntryEditor, GroupChatter, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS,
};
use crate::store::sql::{
    chatter_groups, chatter_rows, history_bound, history_time_from_i64, history_time_to_i64,
    parse_claims, seen_window, ChatterRow,
};

/// Group chatter kept in the database of a [`SqliteStore`], with the same bounds as
/// [`InMemoryChatter`](crate::inbound::chatter::InMemoryChatter): at most 50 entries a
/// group (the oldest dropped first) and 1,000 groups (the group appended to least
/// recently dropped first).
///
/// Each call is one transaction: an append writes the entry, trims the group and, when
/// the group is new, drops the groups beyond the bound, all under the database's write
/// lock; [`take`](ChatterBuffer::take) reads and deletes the group's entries in one
/// transaction, so an entry another process appends meanwhile is either returned or
/// kept, never lost and never returned twice. Entries keep their sender, body,
/// timestamp and message id, in the order they were appended. This is what
/// [`SessionManager::connect`](crate::SessionManager::connect) uses for a `sqlite:`
/// store.
///
/// ```
/// use agent_sessions::inbound::{ChatterBuffer, ChatterEntry};
/// use agent_sessions::store::{SqliteChatter, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("sessions.db");
/// let history = SqliteChatter::new(&SqliteStore::open(&file)?);
/// let entry = ChatterEntry { sender: "Ann".into(), body: "lunch?".into(), timestamp: Some(1_770_000_000_000), message_id: Some("m1".into()), sender_id: None };
/// history.append("whatsapp:default:group:120363@g.us", entry.clone()).await?;
///
/// // Another process, or this one after a restart, sees it.
/// let again = SqliteChatter::new(&SqliteStore::open(&file)?);
/// assert_eq!(again.take("whatsapp:default:group:120363@g.us").await?, [entry]);
/// assert!(again.entries("whatsapp:default:group:120363@g.us").await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteChatter {
    store: SqliteStore,
    limit: usize,
    max_keys: usize,
}

impl SqliteChatter {
    /// Group chatter in `store`'s database, with OpenClaw's bounds.
    pub fn new(store: &SqliteStore) -> Self {
        SqliteChatter::with_limits(store, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }

    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups (at
    /// least 1).
    pub fn with_limits(store: &SqliteStore, limit: usize, max_keys: usize) -> Self {
        SqliteChatter {
            store: store.clone(),
            limit,
            max_keys: max_keys.max(1),
        }
    }
}

/// Group chatter, a keyed bounded log: a group's bound counts the entries no turn has
/// claimed.
const GROUP_CHATTER: KeyedLog = KeyedLog {
    table: "group_history",
    key_column: "group_key",
    counted: "claim_id IS NULL",
    trim_op: "trim group chatter",
    evict_op: "evict group chatter",
};

/// The group's unclaimed entries, or those of claim `claim_id`, oldest first.
fn read_group(c: &Connection, key: &str, claim_id: Option<&str>) -> Result<Vec<ChatterEntry>> {
    let mut statement = c
        .prepare_cached(
            "SELECT sender, body, at, message_id, sender_id FROM group_history
             WHERE group_key = ?1 AND claim_id IS ?2 ORDER BY id",
        )
        .map_err(db_error("read group chatter"))?;
    let rows = statement
        .query_map(params![key, claim_id], |row| {
            Ok(ChatterEntry {
                sender: row.get(0)?,
                body: row.get(1)?,
                timestamp: row.get::<_, Option<i64>>(2)?.map(history_time_from_i64),
                message_id: row.get(3)?,
                sender_id: row.get(4)?,
            })
        })
        .map_err(db_error("read group chatter"))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_error("read group chatter"))
}

fn delete_group(c: &Connection, key: &str) -> Result<()> {
    c.prepare_cached("DELETE FROM group_history WHERE group_key = ?1")
        .and_then(|mut statement| statement.execute([key]))
        .map_err(db_error("clear group chatter"))?;
    Ok(())
}

/// Files what was kept under the group's key from before history was per agent under
/// its key.
fn adopt_legacy(tx: &Connection, key: &str) -> Result<()> {
    if let Some(legacy) = legacy_chatter_key(key) {
        tx.prepare_cached("UPDATE group_history SET group_key = ?1 WHERE group_key = ?2")
            .and_then(|mut statement| statement.execute([key, legacy]))
            .map_err(db_error("adopt group chatter"))?;
    }
    Ok(())
}

/// Appends `entry` to group `key` (after adopting its legacy rows), keeping the group's
/// `limit` newest unclaimed entries and at most `max_keys` groups.
fn append_in(
    tx: &Connection,
    key: &str,
    entry: &ChatterEntry,
    limit: i64,
    max_keys: i64,
) -> Result<()> {
    let existed = GROUP_CHATTER.has(tx, key, "read group chatter")?;
    tx.prepare_cached(
        "INSERT INTO group_history (group_key, sender, body, at, message_id, sender_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut statement| {
        statement.execute(params![
            key,
            entry.sender,
            entry.body,
            entry.timestamp.map(history_time_to_i64),
            entry.message_id,
            entry.sender_id
        ])
    })
    .map_err(db_error("append group chatter"))?;
    // The group keeps its `limit` newest unclaimed entries; a new group may push the
    // least recently appended ones out.
    GROUP_CHATTER.bound(tx, key, limit, max_keys, !existed)
}

#[async_trait]
impl ChatterBuffer for SqliteChatter {
    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        let (rows, seen) = self
            .store
            .read(|c| {
                let failed = || db_error("read group chatter");
                let mut statement = c
                    .prepare(
                        "SELECT group_key, sender, body, at, message_id, sender_id, claim_id, claim
                         FROM group_history ORDER BY id",
                    )
                    .map_err(failed())?;
                let rows = statement
                    .query_map([], |row| {
                        Ok((
                            row.get(0)?,
                            ChatterEntry {
                                sender: row.get(1)?,
                                body: row.get(2)?,
                                timestamp: row.get::<_, Option<i64>>(3)?.map(history_time_from_i64),
                                message_id: row.get(4)?,
                                sender_id: row.get(5)?,
                            },
                            row.get(6)?,
                            row.get(7)?,
                        ))
                    })
                    .map_err(failed())?
                    .collect::<rusqlite::Result<Vec<ChatterRow>>>()
                    .map_err(failed())?;
                let mut statement = c
                    .prepare("SELECT group_key, message_id, at FROM group_history_seen")
                    .map_err(failed())?;
                let seen = statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .map_err(failed())?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(failed())?;
                Ok((rows, seen))
            })
            .await?;
        Ok(chatter_groups(rows, seen))
    }

    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        let key = key.to_owned();
        let seen: Vec<(String, i64)> = group
            .seen
            .iter()
            .map(|s| (s.id.clone(), i64::try_from(s.at).unwrap_or(i64::MAX)))
            .collect();
        let rows = chatter_rows(&key, group)?;
        self.store
            .write(move |tx| {
                let failed = || db_error("copy group chatter");
                let held: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM group_history WHERE group_key = ?1)
                             OR EXISTS (SELECT 1 FROM group_history_seen WHERE group_key = ?1)",
                        [&key],
                        |row| row.get(0),
                    )
                    .map_err(failed())?;
                if held {
                    return Ok(false);
                }
                for (key, entry, claim_id, claim) in &rows {
                    tx.prepare_cached(
                        "INSERT INTO group_history
                             (group_key, sender, body, at, message_id, sender_id, claim_id, claim)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    )
                    .and_then(|mut statement| {
                        statement.execute(params![
                            key,
                            entry.sender,
                            entry.body,
                            entry.timestamp.map(history_time_to_i64),
                            entry.message_id,
                            entry.sender_id,
                            claim_id,
                            claim
                        ])
                    })
                    .map_err(failed())?;
                }
                for (id, at) in &seen {
                    tx.prepare_cached(
                        "INSERT OR IGNORE INTO group_history_seen (group_key, message_id, at)
                         VALUES (?1, ?2, ?3)",
                    )
                    .and_then(|mut statement| statement.execute(params![key, id, at]))
                    .map_err(failed())?;
                }
                Ok(true)
            })
            .await
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        let rows = self
            .store
            .read(|c| {
                let mut statement = c
                    .prepare(
                        "SELECT id, sender, body, at, message_id, sender_id, group_key FROM group_history",
                    )
                    .map_err(db_error("read group chatter"))?;
                let rows = statement
                    .query_map([], |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, String>(6)?,
                            ChatterEntry {
                                sender: row.get(1)?,
                                body: row.get(2)?,
                                timestamp: row.get::<_, Option<i64>>(3)?.map(history_time_from_i64),
                                message_id: row.get(4)?,
                                sender_id: row.get(5)?,
                            },
                        ))
                    })
                    .map_err(db_error("read group chatter"))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("read group chatter"))
            })
            .await?;
        let decisions: Vec<(i64, ChatterEntry, ChatterEdit)> = rows
            .into_iter()
            .filter_map(|(id, group, entry)| match edit(&group, &entry) {
                ChatterEdit::Keep => None,
                decision => Some((id, entry, decision)),
            })
            .collect();
        if decisions.is_empty() {
            return Ok(0);
        }
        self.store
            .write(move |tx| {
                let mut changed = 0;
                for (id, before, decision) in decisions {
                    // Only the row as it was judged (a row is never changed in place
                    // otherwise, but a claim may have taken it meanwhile).
                    changed += match decision {
                        ChatterEdit::Keep => Ok(0),
                        ChatterEdit::Remove => tx
                            .prepare_cached("DELETE FROM group_history WHERE id = ?1 AND body = ?2")
                            .and_then(|mut s| s.execute(params![id, before.body])),
                        ChatterEdit::Replace(after) => tx
                            .prepare_cached(
                                "UPDATE group_history SET sender = ?3, body = ?4, sender_id = ?5
                                 WHERE id = ?1 AND body = ?2",
                            )
                            .and_then(|mut s| {
                                s.execute(params![
                                    id,
                                    before.body,
                                    after.sender,
                                    after.body,
                                    after.sender_id
                                ])
                            }),
                    }
                    .map_err(db_error("erase from group chatter"))?;
                }
                Ok(changed)
            })
            .await
    }

    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let key = key.to_owned();
        let (limit, max_keys) = (history_bound(self.limit), history_bound(self.max_keys));
        self.store
            .write(move |tx| {
                adopt_legacy(tx, &key)?;
                append_in(tx, &key, &entry, limit, max_keys)
            })
            .await
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        if self.limit == 0 {
            return Ok(true);
        }
        let key = key.to_owned();
        let (limit, max_keys) = (history_bound(self.limit), history_bound(self.max_keys));
        self.store
            .write(move |tx| {
                adopt_legacy(tx, &key)?;
                if let Some(id) = entry_message_id(&entry) {
                    let (now, since) = seen_window(&entry, window);
                    tx.prepare_cached("DELETE FROM group_history_seen WHERE at < ?1")
                        .and_then(|mut statement| statement.execute([since]))
                        .map_err(db_error("forget group chatter message ids"))?;
                    let new = tx
                        .prepare_cached(
                            "INSERT OR IGNORE INTO group_history_seen (group_key, message_id, at)
                             VALUES (?1, ?2, ?3)",
                        )
                        .and_then(|mut statement| statement.execute(params![key, id, now]))
                        .map_err(db_error("remember a group chatter message id"))?;
                    if new == 0 {
                        return Ok(false);
                    }
                }
                append_in(tx, &key, &entry, limit, max_keys)?;
                Ok(true)
            })
            .await
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let key = key.to_owned();
        self.store.read(move |c| read_group(c, &key, None)).await
    }

    async fn clear(&self, key: &str) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let key = key.to_owned();
        self.store.write(move |tx| delete_group(tx, &key)).await
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let key = key.to_owned();
        self.store
            .write(move |tx| {
                adopt_legacy(tx, &key)?;
                let entries = read_group(tx, &key, None)?;
                if !entries.is_empty() {
                    tx.prepare_cached(
                        "DELETE FROM group_history WHERE group_key = ?1 AND claim_id IS NULL",
                    )
                    .and_then(|mut statement| statement.execute([&key]))
                    .map_err(db_error("take group chatter"))?;
                }
                Ok(entries)
            })
            .await
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        let key = key.to_owned();
        let record = serde_json::to_string(claim)
            .map_err(|e| crate::Error::encode("a claim of group chatter", e))?;
        let id = claim.id.clone();
        let take_over = serde_json::Value::from(take_over.to_vec()).to_string();
        self.store
            .write(move |tx| {
                adopt_legacy(tx, &key)?;
                tx.prepare_cached(
                    "UPDATE group_history SET claim_id = ?1, claim = ?2
                     WHERE group_key = ?3
                     AND (claim_id IS NULL OR claim_id IN (SELECT value FROM json_each(?4)))",
                )
                .and_then(|mut statement| statement.execute(params![id, record, key, take_over]))
                .map_err(db_error("claim group chatter"))?;
                read_group(tx, &key, Some(&id))
            })
            .await
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        let key = key.to_owned();
        let records = self
            .store
            .read(move |c| {
                let mut statement = c
                    .prepare_cached(
                        "SELECT claim_id, MIN(claim) FROM group_history
                         WHERE group_key = ?1 AND claim_id IS NOT NULL
                         GROUP BY claim_id ORDER BY MIN(id)",
                    )
                    .map_err(db_error("read group chatter claims"))?;
                let rows = statement
                    .query_map([&key], |row| Ok((row.get(0)?, row.get(1)?)))
                    .map_err(db_error("read group chatter claims"))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("read group chatter claims"))
            })
            .await?;
        Ok(parse_claims(records))
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        let (key, claim_id) = (key.to_owned(), claim_id.to_owned());
        self.store
            .write(move |tx| {
                tx.prepare_cached(
                    "DELETE FROM group_history WHERE group_key = ?1 AND claim_id = ?2",
                )
                .and_then(|mut statement| statement.execute([&key, &claim_id]))
                .map_err(db_error("settle group chatter"))?;
                Ok(())
            })
            .await
    }

    async fn release(&self, key: &str, claim_id: &str, _: Vec<ChatterEntry>) -> Result<()> {
        let (key, claim_id) = (key.to_owned(), claim_id.to_owned());
        self.store
            .write(move |tx| {
                tx.prepare_cached(
                    "UPDATE group_history SET claim_id = NULL, claim = NULL
                     WHERE group_key = ?1 AND claim_id = ?2",
                )
                .and_then(|mut statement| statement.execute([&key, &claim_id]))
                .map_err(db_error("release group chatter"))?;
                Ok(())
            })
            .await
    }
}
