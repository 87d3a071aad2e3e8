//! A keyed bounded log: rows filed under a key, at most so many a key and so many keys.
//! Group chatter (per group) and system events (per session) are both one.

use rusqlite::{params, Connection};

use super::db_error;
use crate::error::Result;

/// One table holding a keyed bounded log.
pub(super) struct KeyedLog {
    /// The table.
    pub(super) table: &'static str,
    /// The column rows are filed under.
    pub(super) key_column: &'static str,
    /// Which of a key's rows its bound counts, as an SQL condition (`TRUE` for all).
    pub(super) counted: &'static str,
    /// What the rows are, for errors: "trim group chatter", …
    pub(super) trim_op: &'static str,
    /// What the rows are, for errors: "evict group chatter", …
    pub(super) evict_op: &'static str,
}

impl KeyedLog {
    /// Whether `key` has any row.
    pub(super) fn has(&self, tx: &Connection, key: &str, op: &'static str) -> Result<bool> {
        let (table, column) = (self.table, self.key_column);
        tx.prepare_cached(&format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE {column} = ?1)"
        ))
        .and_then(|mut statement| statement.query_row([key], |row| row.get(0)))
        .map_err(db_error(op))
    }

    /// After a row was added under `key`: keeps the key's `per_key` newest counted rows
    /// and, when the key is `new`, the `keys` keys written to most recently.
    pub(super) fn bound(
        &self,
        tx: &Connection,
        key: &str,
        per_key: i64,
        keys: i64,
        new: bool,
    ) -> Result<()> {
        let (table, column, counted) = (self.table, self.key_column, self.counted);
        tx.prepare_cached(&format!(
            "DELETE FROM {table} WHERE {column} = ?1 AND {counted} AND id <= (
                 SELECT id FROM {table} WHERE {column} = ?1 AND {counted}
                 ORDER BY id DESC LIMIT 1 OFFSET ?2)"
        ))
        .and_then(|mut statement| statement.execute(params![key, per_key]))
        .map_err(db_error(self.trim_op))?;
        if new {
            tx.prepare_cached(&format!(
                "DELETE FROM {table} WHERE {column} IN (
                     SELECT {column} FROM {table} GROUP BY {column}
                     ORDER BY MAX(id) DESC LIMIT -1 OFFSET ?1)"
            ))
            .and_then(|mut statement| statement.execute([keys]))
            .map_err(db_error(self.evict_op))?;
        }
        Ok(())
    }
}
