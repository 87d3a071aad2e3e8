//! [`PostgresChatter`]: group chatter in the `group_history` table of a
//! [`PostgresStore`], shared by every host using the schema.

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::Row;

use super::keyed_log::KeyedLog;
use super::{pg_error, OpenTransaction, PostgresStore, Prepared};
use crate::error::Result;
use crate::inbound::chatter::{
    entry_message_id, legacy_chatter_key, ChatterBuffer, ChatterClaim, ChatterEdit, ChatterEntry,
    EntryEditor, GroupChatter, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS,
};
use crate::store::sql::{
    chatter_groups, chatter_rows, history_bound, history_time_from_i64, history_time_to_i64,
    parse_claims, seen_window,
};

/// Group chatter kept in the schema of a [`PostgresStore`], with the same bounds as
/// [`InMemoryChatter`](crate::inbound::chatter::InMemoryChatter): at most 50 entries a
/// group (the oldest dropped first) and 1,000 groups (the group appended to least
/// recently dropped first).
///
/// Appends to one group, its [`take`](ChatterBuffer::take) and its
/// [`clear`](ChatterBuffer::clear) take turns on a transaction-scoped advisory lock of
/// the group, from any number of hosts; different groups do not wait for each other.
/// `take` is one `DELETE … RETURNING`, ordered by append, so an entry another worker
/// appends meanwhile is either returned or kept, never lost and never returned twice.
/// Entries keep their sender, body, timestamp and message id, in the order they were
/// appended. This is what [`SessionManager::connect`](crate::SessionManager::connect)
/// uses for a `postgres://` store.
///
/// ```no_run
/// use agent_sessions::inbound::{ChatterBuffer, ChatterEntry};
/// use agent_sessions::store::{PostgresChatter, PostgresStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let db = PostgresStore::connect("postgres://bot@db.internal/sessions").await?;
/// let history = PostgresChatter::new(&db);
/// let entry = ChatterEntry { sender: "Ann".into(), body: "lunch?".into(), timestamp: None, message_id: None, sender_id: None };
/// history.append("whatsapp:default:group:120363@g.us", entry).await?;
/// // Any host, before or after a restart, sees it once.
/// assert_eq!(history.take("whatsapp:default:group:120363@g.us").await?.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresChatter {
    store: PostgresStore,
    limit: usize,
    max_keys: usize,
}

impl PostgresChatter {
    /// Group chatter in `store`'s schema, with OpenClaw's bounds.
    pub fn new(store: &PostgresStore) -> Self {
        PostgresChatter::with_limits(store, DEFAULT_GROUP_HISTORY_LIMIT, MAX_HISTORY_KEYS)
    }

    /// At most `limit` entries per group (0 keeps nothing) and `max_keys` groups (at
    /// least 1).
    pub fn with_limits(store: &PostgresStore, limit: usize, max_keys: usize) -> Self {
        PostgresChatter {
            store: store.clone(),
            limit,
            max_keys: max_keys.max(1),
        }
    }

    fn table(&self) -> String {
        self.store.table("group_history")
    }

    /// What a group's advisory lock is named after, without the group: the lock of
    /// group `g` is `hashtextextended(prefix || g, 0)`, computed by the server so that
    /// eviction can try the locks of the groups it picks in SQL.
    fn lock_prefix(&self) -> String {
        format!("{}/group-history/", self.store.schema)
    }

    /// A transaction holding the lock of group `key`.
    async fn begin(&self, key: &str) -> Result<OpenTransaction> {
        let lock = format!("{}{key}", self.lock_prefix());
        self.store.begin_locked(&lock, "lock group chatter").await
    }

    /// Runs one statement on group `key` in a transaction holding its lock, after
    /// filing what was kept under the group's key from before history was per agent
    /// under its key.
    async fn locked_query(
        &self,
        key: &str,
        what: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let open = self.begin(key).await?;
        let result = async {
            let c = open.client();
            adopt_legacy(c, &self.table(), key).await?;
            c.query_prepared(sql, params).await.map_err(pg_error(what))
        }
        .await;
        open.end(result).await
    }
}

/// Files the rows kept under group `key`'s key from before history was per agent under
/// its key.
async fn adopt_legacy(c: &deadpool_postgres::Object, table: &str, key: &str) -> Result<()> {
    if let Some(legacy) = legacy_chatter_key(key) {
        c.execute_prepared(
            &format!("UPDATE {table} SET group_key = $1 WHERE group_key = $2"),
            &[&key, &legacy],
        )
        .await
        .map_err(pg_error("adopt group chatter"))?;
    }
    Ok(())
}

fn entry_of(row: &Row) -> ChatterEntry {
    ChatterEntry {
        sender: row.get(0),
        body: row.get(1),
        timestamp: row.get::<_, Option<i64>>(2).map(history_time_from_i64),
        message_id: row.get(3),
        sender_id: row.get(4),
    }
}

impl PostgresChatter {
    /// Appends `entry` to group `key` in the open transaction `c` (after adopting its
    /// legacy rows), keeping the group's `limit` newest unclaimed entries and at most
    /// `max_keys` groups.
    async fn append_in(
        &self,
        c: &deadpool_postgres::Object,
        key: &str,
        entry: &ChatterEntry,
    ) -> Result<()> {
        let table = self.table();
        let existed: bool = c
            .query_one_prepared(
                &format!("SELECT EXISTS (SELECT 1 FROM {table} WHERE group_key = $1)"),
                &[&key],
            )
            .await
            .map_err(pg_error("read group chatter"))?
            .get(0);
        c.execute_prepared(
            &format!(
                "INSERT INTO {table} (group_key, sender, body, at, message_id, sender_id)
                 VALUES ($1, $2, $3, $4, $5, $6)"
            ),
            &[
                &key,
                &entry.sender,
                &entry.body,
                &entry.timestamp.map(history_time_to_i64),
                &entry.message_id,
                &entry.sender_id,
            ],
        )
        .await
        .map_err(pg_error("append group chatter"))?;
        // The group keeps its `limit` newest unclaimed entries; a new group may push
        // the least recently appended ones out.
        let (eviction_lock, lock_prefix) = (
            format!("{}/group-history", self.store.schema),
            self.lock_prefix(),
        );
        KeyedLog {
            table: &table,
            key_column: "group_key",
            counted: "claim_id IS NULL",
            eviction_lock: &eviction_lock,
            lock_prefix: &lock_prefix,
            trim_op: "trim group chatter",
            evict_op: "evict group chatter",
        }
        .bound(
            c,
            key,
            history_bound(self.limit),
            history_bound(self.max_keys),
            !existed,
        )
        .await
    }
}

#[async_trait]
impl ChatterBuffer for PostgresChatter {
    async fn export_groups(&self) -> Result<Vec<(String, GroupChatter)>> {
        let client = self.store.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT sender, body, at, message_id, sender_id, group_key, claim_id, claim
                     FROM {} ORDER BY id",
                    self.table()
                ),
                &[],
            )
            .await
            .map_err(pg_error("read group chatter"))?
            .iter()
            .map(|row| (row.get(5), entry_of(row), row.get(6), row.get(7)))
            .collect();
        let seen = client
            .query(
                &format!(
                    "SELECT group_key, message_id, at FROM {}",
                    self.store.table("group_history_seen")
                ),
                &[],
            )
            .await
            .map_err(pg_error("read group chatter"))?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        Ok(chatter_groups(rows, seen))
    }

    async fn import_group(&self, key: &str, group: GroupChatter) -> Result<bool> {
        let (table, seen_table) = (self.table(), self.store.table("group_history_seen"));
        let seen: Vec<(String, i64)> = group
            .seen
            .iter()
            .map(|s| (s.id.clone(), i64::try_from(s.at).unwrap_or(i64::MAX)))
            .collect();
        let rows = chatter_rows(key, group)?;
        let open = self.begin(key).await?;
        let result = async {
            let c = open.client();
            let held: bool = c
                .query_one_prepared(
                    &format!(
                        "SELECT EXISTS (SELECT 1 FROM {table} WHERE group_key = $1)
                             OR EXISTS (SELECT 1 FROM {seen_table} WHERE group_key = $1)"
                    ),
                    &[&key],
                )
                .await
                .map_err(pg_error("copy group chatter"))?
                .get(0);
            if held {
                return Ok(false);
            }
            for (key, entry, claim_id, claim) in &rows {
                c.execute_prepared(
                    &format!(
                        "INSERT INTO {table}
                             (group_key, sender, body, at, message_id, sender_id, claim_id, claim)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                    ),
                    &[
                        key,
                        &entry.sender,
                        &entry.body,
                        &entry.timestamp.map(history_time_to_i64),
                        &entry.message_id,
                        &entry.sender_id,
                        claim_id,
                        claim,
                    ],
                )
                .await
                .map_err(pg_error("copy group chatter"))?;
            }
            for (id, at) in &seen {
                c.execute_prepared(
                    &format!(
                        "INSERT INTO {seen_table} (group_key, message_id, at) VALUES ($1, $2, $3)
                         ON CONFLICT DO NOTHING"
                    ),
                    &[&key, id, at],
                )
                .await
                .map_err(pg_error("copy group chatter"))?;
            }
            Ok(true)
        }
        .await;
        open.end(result).await
    }

    async fn edit_entries(&self, edit: EntryEditor<'_>) -> Result<usize> {
        let client = self.store.client().await?;
        let rows = client
            .query_prepared(
                &format!(
                    "SELECT sender, body, at, message_id, sender_id, id, group_key FROM {}",
                    self.table()
                ),
                &[],
            )
            .await
            .map_err(pg_error("read group chatter"))?;
        drop(client);
        let mut changed = 0;
        for row in &rows {
            let before = entry_of(row);
            let (id, group): (i64, String) = (row.get(5), row.get(6));
            // Only the row as it was judged (a claim may have taken it meanwhile).
            let done = match edit(&group, &before) {
                ChatterEdit::Keep => continue,
                ChatterEdit::Remove => {
                    let sql = format!("DELETE FROM {} WHERE id = $1 AND body = $2", self.table());
                    self.locked_query(
                        &group,
                        "erase from group chatter",
                        &format!("{sql} RETURNING id"),
                        &[&id, &before.body],
                    )
                    .await?
                }
                ChatterEdit::Replace(after) => {
                    let sql = format!(
                        "UPDATE {} SET sender = $3, body = $4, sender_id = $5
                         WHERE id = $1 AND body = $2 RETURNING id",
                        self.table()
                    );
                    self.locked_query(
                        &group,
                        "erase from group chatter",
                        &sql,
                        &[
                            &id,
                            &before.body,
                            &after.sender,
                            &after.body,
                            &after.sender_id,
                        ],
                    )
                    .await?
                }
            };
            changed += done.len();
        }
        Ok(changed)
    }

    async fn append(&self, key: &str, entry: ChatterEntry) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let open = self.begin(key).await?;
        let result = async {
            let c = open.client();
            adopt_legacy(c, &self.table(), key).await?;
            self.append_in(c, key, &entry).await
        }
        .await;
        open.end(result).await
    }

    async fn append_once(&self, key: &str, entry: ChatterEntry, window: Duration) -> Result<bool> {
        if self.limit == 0 {
            return Ok(true);
        }
        let seen = self.store.table("group_history_seen");
        let open = self.begin(key).await?;
        let result = async {
            let c = open.client();
            adopt_legacy(c, &self.table(), key).await?;
            if let Some(id) = entry_message_id(&entry) {
                let (now, since) = seen_window(&entry, window);
                c.execute_prepared(&format!("DELETE FROM {seen} WHERE at < $1"), &[&since])
                    .await
                    .map_err(pg_error("forget group chatter message ids"))?;
                let new = c
                    .execute_prepared(
                        &format!(
                            "INSERT INTO {seen} (group_key, message_id, at) VALUES ($1, $2, $3)
                             ON CONFLICT DO NOTHING"
                        ),
                        &[&key, &id, &now],
                    )
                    .await
                    .map_err(pg_error("remember a group chatter message id"))?;
                if new == 0 {
                    return Ok(false);
                }
            }
            self.append_in(c, key, &entry).await?;
            Ok(true)
        }
        .await;
        open.end(result).await
    }

    async fn entries(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let client = self.store.client().await?;
        let rows = client
            .query_prepared(
                &format!(
                    "SELECT sender, body, at, message_id, sender_id FROM {}
                     WHERE group_key = $1 AND claim_id IS NULL ORDER BY id",
                    self.table()
                ),
                &[&key],
            )
            .await
            .map_err(pg_error("read group chatter"))?;
        Ok(rows.iter().map(entry_of).collect())
    }

    async fn clear(&self, key: &str) -> Result<()> {
        if self.limit == 0 {
            return Ok(());
        }
        let sql = format!("DELETE FROM {} WHERE group_key = $1", self.table());
        self.locked_query(key, "clear group chatter", &sql, &[&key])
            .await
            .map(drop)
    }

    async fn take(&self, key: &str) -> Result<Vec<ChatterEntry>> {
        let sql = format!(
            "WITH taken AS (
                 DELETE FROM {} WHERE group_key = $1 AND claim_id IS NULL
                 RETURNING id, sender, body, at, message_id, sender_id)
             SELECT sender, body, at, message_id, sender_id FROM taken ORDER BY id",
            self.table()
        );
        let rows = self
            .locked_query(key, "take group chatter", &sql, &[&key])
            .await?;
        Ok(rows.iter().map(entry_of).collect())
    }

    async fn claim(
        &self,
        key: &str,
        claim: &ChatterClaim,
        take_over: &[String],
    ) -> Result<Vec<ChatterEntry>> {
        let record = serde_json::to_string(claim)
            .map_err(|e| crate::Error::encode("a claim of group chatter", e))?;
        let sql = format!(
            "WITH claimed AS (
                 UPDATE {} SET claim_id = $1, claim = $2
                 WHERE group_key = $3 AND (claim_id IS NULL OR claim_id = ANY($4))
                 RETURNING id, sender, body, at, message_id, sender_id)
             SELECT sender, body, at, message_id, sender_id FROM claimed ORDER BY id",
            self.table()
        );
        let rows = self
            .locked_query(
                key,
                "claim group chatter",
                &sql,
                &[&claim.id, &record, &key, &take_over],
            )
            .await?;
        Ok(rows.iter().map(entry_of).collect())
    }

    async fn claims(&self, key: &str) -> Result<Vec<ChatterClaim>> {
        let client = self.store.client().await?;
        let rows = client
            .query_prepared(
                &format!(
                    "SELECT claim_id, MIN(claim) FROM {}
                     WHERE group_key = $1 AND claim_id IS NOT NULL
                     GROUP BY claim_id ORDER BY MIN(id)",
                    self.table()
                ),
                &[&key],
            )
            .await
            .map_err(pg_error("read group chatter claims"))?;
        Ok(parse_claims(
            rows.iter().map(|row| (row.get(0), row.get(1))).collect(),
        ))
    }

    async fn settle(&self, key: &str, claim_id: &str) -> Result<()> {
        let sql = format!(
            "DELETE FROM {} WHERE group_key = $1 AND claim_id = $2",
            self.table()
        );
        self.locked_query(key, "settle group chatter", &sql, &[&key, &claim_id])
            .await
            .map(drop)
    }

    async fn release(&self, key: &str, claim_id: &str, _: Vec<ChatterEntry>) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET claim_id = NULL, claim = NULL WHERE group_key = $1 AND claim_id = $2",
            self.table()
        );
        self.locked_query(key, "release group chatter", &sql, &[&key, &claim_id])
            .await
            .map(drop)
    }
}
