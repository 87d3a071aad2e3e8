//! A keyed bounded log: rows filed under a key, at most so many a key and so many keys.
//! Group chatter (per group) and system events (per session) are both one.

use std::time::Duration;

use deadpool_postgres::Object;

use super::{pg_error, Prepared};
use crate::error::Result;

/// One table holding a keyed bounded log, in a store's schema.
pub(super) struct KeyedLog<'a> {
    /// The table, qualified by its schema.
    pub(super) table: &'a str,
    /// The column rows are filed under.
    pub(super) key_column: &'static str,
    /// Which of a key's rows its bound counts, as an SQL condition (`TRUE` for all).
    pub(super) counted: &'static str,
    /// The advisory lock evictions take turns on.
    pub(super) eviction_lock: &'a str,
    /// What a key's advisory lock is named after, without the key.
    pub(super) lock_prefix: &'a str,
    /// For errors: "trim group chatter", …
    pub(super) trim_op: &'static str,
    /// For errors: "evict group chatter", …
    pub(super) evict_op: &'static str,
}

impl KeyedLog<'_> {
    /// After a row was added under `key`, in the caller's transaction holding the key's
    /// lock: keeps the key's `per_key` newest counted rows and, when the key is `new`,
    /// the `keys` keys written to most recently.
    pub(super) async fn bound(
        &self,
        c: &Object,
        key: &str,
        per_key: i64,
        keys: i64,
        new: bool,
    ) -> Result<()> {
        let (table, column, counted) = (self.table, self.key_column, self.counted);
        c.execute_prepared(
            &format!(
                "DELETE FROM {table} WHERE {column} = $1 AND {counted} AND id <= (
                     SELECT id FROM {table} WHERE {column} = $1 AND {counted}
                     ORDER BY id DESC OFFSET $2 LIMIT 1)"
            ),
            &[&key, &per_key],
        )
        .await
        .map_err(pg_error(self.trim_op))?;
        if new {
            evict_least_recent(c, table, column, self.eviction_lock, self.lock_prefix, keys)
                .await
                .map_err(pg_error(self.evict_op))?;
        }
        Ok(())
    }
}

/// Drops, in `table`, the rows of all but the `keep` most recently appended values of
/// `key_column` (a group, a session), in the caller's transaction. Evictions take turns
/// on the advisory lock `eviction_lock` (so two new keys cannot both stay under the
/// bound), and never delete a key whose own lock (`lock_prefix` + key) another
/// transaction holds: it is being written to now.
///
/// A writer that just committed can still hold its key's lock for a moment after its
/// rows became visible (the server releases a transaction's locks one by one), so a key
/// found locked is tried again, each time in a fresh snapshot, for up to
/// [`EVICTION_PATIENCE`]; only a key that stays locked longer (a write in progress,
/// which makes it the most recent anyway) is left for the next eviction.
async fn evict_least_recent(
    c: &Object,
    table: &str,
    key_column: &str,
    eviction_lock: &str,
    lock_prefix: &str,
    keep: i64,
) -> std::result::Result<(), tokio_postgres::Error> {
    c.execute_prepared(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&eviction_lock],
    )
    .await?;
    let evict = format!(
        "WITH old AS MATERIALIZED (
             SELECT {key_column} FROM {table} GROUP BY {key_column}
             ORDER BY MAX(id) DESC OFFSET $1),
         free AS MATERIALIZED (
             SELECT {key_column} FROM old
             WHERE pg_try_advisory_xact_lock(hashtextextended($2 || {key_column}, 0))),
         gone AS (DELETE FROM {table} WHERE {key_column} IN (SELECT {key_column} FROM free))
         SELECT (SELECT COUNT(*) FROM old) - (SELECT COUNT(*) FROM free)"
    );
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let busy: i64 = c
            .query_one_prepared(&evict, &[&keep, &lock_prefix])
            .await?
            .get(0);
        if busy == 0 || started.elapsed() >= EVICTION_PATIENCE {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// How long an eviction waits for a key that another transaction holds locked.
const EVICTION_PATIENCE: Duration = Duration::from_millis(200);
