//! [`SqliteHistory`]: group history in the `group_history` table of a [`SqliteStore`],
//! so it survives a restart and is shared by every process using the file.

use async_trait::async_trait;
use rusqlite::{params, Connection};

use super::{db_error, SqliteStore};
use crate::context::history::{
    HistoryBuffer, HistoryEntry, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS,
};
use crate::error::Result;
use crate::store::sql::{history_bound, history_time_from_i64, history_time_to_i64};

/// Group history kept in the database of a [`SqliteStore`], with the same bounds as
/// [`MemoryHistory`](crate::context::history::MemoryHistory): at most 50 entries a
/// group (the oldest dropped first) and 1,000 groups (the group appended to least
/// recently dropped first).
///
/// Each call is one transaction: an append writes the entry, trims the group and, when
/// the group is new, drops the groups beyond the bound, all under the database's write
/// lock; [`take`](HistoryBuffer::take) reads and deletes the group's entries in one
/// transaction, so an entry another process appends meanwhile is either returned or
/// kept, never lost and never returned twice. Entries keep their sender, body,
/// timestamp and message id, in the order they were appended. This is what
/// [`SessionManager::connect`](crate::SessionManager::connect) uses for a `sqlite:`
/// store.
///
/// ```
/// use agent_sessions::context::history::{HistoryBuffer, HistoryEntry};
/// use agent_sessions::store::{SqliteHistory, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("sessions.db");
/// let history = SqliteHistory::new(&SqliteStore::open(&file)?);
/// let entry = HistoryEntry { sender: "Ann".into(), body: "lunch?".into(), timestamp: Some(1_770_000_000_000), message_id: Some("m1".into()) };
/// history.append("whatsapp:default:group:120363@g.us", entry.clone()).await?;
///
/// // Another process, or this one after a restart, sees it.
/// let again = SqliteHistory::new(&SqliteStore::open(&file)?);
/// assert_eq!(again.take("whatsapp:default:group:120363@g.us").await?, [entry]);
/// assert!(again.entries("whatsapp:default:group:120363@g.us").await?.is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteHistory {
    store: SqliteStore,
    limit: usize,
    max_keys: usize,
}

impl SqliteHistory {
    /// Group history in `store`'s database, with OpenClaw's bounds.
    pub fn new(store: &SqliteStore) -> Self {
        SqliteHistory::with_limits(store, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }

    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups (at
    /// least 1).
    pub fn with_limits(store: &SqliteStore, limit: usize, max_keys: usize) -> Self {
        SqliteHistory {
            store: store.clone(),
            limit,
            max_keys: max_keys.max(1),
        }
    }
}

/// The group's entries, oldest first.
fn read_group(c: &Connection, key: &str) -> Result<Vec<HistoryEntry>> {
    let mut statement = c
        .prepare_cached(
            "SELECT sender, body, at, message_id FROM group_history
             WHERE group_key = ?1 ORDER BY id",
        )
        .map_err(db_error("read group history"))?;
    let rows = statement
        .query_map([key], |row| {
            Ok(HistoryEntry {
                sender: row.get(0)?,
                body: row.get(1)?,
                timestamp: row.get::<_, Option<i64>>(2)?.map(history_time_from_i64),
                message_id: row.get(3)?,
            })
        })
        .map_err(db_error("read group history"))?;
    rows.collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_error("read group history"))
}

fn delete_group(c: &Connection, key: &str) -> Result<()> {
    c.prepare_cached("DELETE FROM group_history WHERE group_key = ?1")
        .and_then(|mut statement| statement.execute([key]))
        .map_err(db_error("clear group history"))?;
    Ok(())
}

#[async_trait]
impl HistoryBuffer for SqliteHistory {
    async fn append(&self, key: &str, entry: HistoryEntry) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let key = key.to_owned();
        let (limit, max_keys) = (history_bound(self.limit), history_bound(self.max_keys));
        self.store
            .write(move |tx| {
                let existed: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM group_history WHERE group_key = ?1)",
                        [&key],
                        |row| row.get(0),
                    )
                    .map_err(db_error("read group history"))?;
                tx.prepare_cached(
                    "INSERT INTO group_history (group_key, sender, body, at, message_id)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut statement| {
                    statement.execute(params![
                        key,
                        entry.sender,
                        entry.body,
                        entry.timestamp.map(history_time_to_i64),
                        entry.message_id
                    ])
                })
                .map_err(db_error("append group history"))?;
                // The group keeps its `limit` newest entries.
                tx.prepare_cached(
                    "DELETE FROM group_history WHERE group_key = ?1 AND id <= (
                         SELECT id FROM group_history WHERE group_key = ?1
                         ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                )
                .and_then(|mut statement| statement.execute(params![key, limit]))
                .map_err(db_error("trim group history"))?;
                // A new group may push the least recently appended ones out.
                if !existed {
                    tx.prepare_cached(
                        "DELETE FROM group_history WHERE group_key IN (
                             SELECT group_key FROM group_history GROUP BY group_key
                             ORDER BY MAX(id) DESC LIMIT -1 OFFSET ?1)",
                    )
                    .and_then(|mut statement| statement.execute([max_keys]))
                    .map_err(db_error("evict group history"))?;
                }
                Ok(())
            })
            .await
    }

    async fn entries(&self, key: &str) -> Result<Vec<HistoryEntry>> {
        let key = key.to_owned();
        self.store.read(move |c| read_group(c, &key)).await
    }

    async fn clear(&self, key: &str) -> Result<()> {
        let key = key.to_owned();
        self.store.write(move |tx| delete_group(tx, &key)).await
    }

    async fn take(&self, key: &str) -> Result<Vec<HistoryEntry>> {
        let key = key.to_owned();
        self.store
            .write(move |tx| {
                let entries = read_group(tx, &key)?;
                if !entries.is_empty() {
                    delete_group(tx, &key)?;
                }
                Ok(entries)
            })
            .await
    }
}
