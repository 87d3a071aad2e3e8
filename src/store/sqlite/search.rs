//! [`SqliteStore`] as a [`SearchIndex`]: messages beside the sessions, full text by
//! the crate's packed postings (BM25 over the crate's tokens, see
//! [`postings`](crate::store::postings)), vectors as little-endian `f32` blobs. The
//! FTS5 table `search_text` is still kept for SQL written against it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use super::{db_error, SqliteStore};
use crate::error::Result;
use std::collections::{HashMap, HashSet};

use crate::store::sql::{
    self, direction_column, message_filter, query_words, SqlValue, Where, MESSAGE_COLUMNS,
};
use crate::transcript::search::postings::{self, Block, Picking, Stats};
use crate::transcript::search::{best, LoggedMessage, SearchFilter, SearchIndex, Work};

/// Rows per `IN (…)` list.
const CHUNK: usize = 500;

fn placeholder(n: usize) -> String {
    format!("?{n}")
}

fn values(clause: &Where) -> Vec<rusqlite::types::Value> {
    clause
        .values
        .iter()
        .map(|value| match value {
            SqlValue::Text(text) => rusqlite::types::Value::Text(text.clone()),
            SqlValue::Int(int) => rusqlite::types::Value::Integer(*int),
        })
        .collect()
}

fn message(row: &Row<'_>) -> rusqlite::Result<LoggedMessage> {
    Ok(sql::message_from_columns(
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
    ))
}

fn to_blob(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Indexes the messages added since the last call (`search_postings`), in the caller's
/// transaction.
pub(super) fn index_new_messages(c: &rusqlite::Connection) -> Result<()> {
    let failed = db_error("index messages");
    let stats = postings_stats(c)?;
    let mut select = c
        .prepare_cached("SELECT rowid, text FROM search_messages WHERE rowid > ?1 ORDER BY rowid")
        .map_err(db_error("index messages"))?;
    let new: Vec<(i64, String)> = select
        .query_map([stats.through], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(db_error("index messages"))?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_error("index messages"))?;
    let Some(through) = new.iter().map(|(doc, _)| *doc).max() else {
        return Ok(());
    };
    let (by_word, words) = postings::postings_of(&new);
    let mut last = c
        .prepare_cached(
            "SELECT block, postings, data FROM search_postings WHERE term = ?1
             ORDER BY block DESC LIMIT 1",
        )
        .map_err(db_error("index messages"))?;
    let mut write = c
        .prepare_cached(
            "INSERT OR REPLACE INTO search_postings (term, block, postings, data)
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db_error("index messages"))?;
    for (word, postings) in &by_word {
        let block = last
            .query_row([word], |row| {
                Ok(Block {
                    number: row.get(0)?,
                    count: row.get::<_, i64>(1)? as usize,
                    data: row.get(2)?,
                })
            })
            .optional()
            .map_err(db_error("index messages"))?;
        for block in postings::append(block, postings) {
            write
                .execute(params![word, block.number, block.count as i64, block.data])
                .map_err(db_error("index messages"))?;
        }
    }
    c.execute(
        "UPDATE search_postings_state SET indexed_through = ?1, messages = messages + ?2,
         words = words + ?3 WHERE id = 1",
        params![through, new.len() as i64, words],
    )
    .map_err(failed)?;
    Ok(())
}

fn postings_stats(c: &rusqlite::Connection) -> Result<Stats> {
    c.query_row(
        "SELECT indexed_through, messages, words FROM search_postings_state WHERE id = 1",
        [],
        |row| {
            Ok(Stats {
                through: row.get(0)?,
                messages: row.get(1)?,
                words: row.get(2)?,
            })
        },
    )
    .map_err(db_error("read the search index"))
}

/// The best `limit` matches of `words` among messages passing `filter`, from
/// `search_postings` (see [`postings`]).
fn full_text(
    c: &rusqlite::Connection,
    words: &[String],
    filter: &SearchFilter,
    limit: usize,
) -> Result<Vec<(String, f32)>> {
    let failed = || db_error("search");
    let stats = postings_stats(c)?;
    let mut clause = Where::default();
    message_filter(&mut clause, filter, &placeholder);
    // A selective filter: score only the messages it passes.
    let only: Option<HashSet<i64>> = if clause.sql.is_empty() {
        None
    } else {
        let mut passing = c
            .prepare_cached(&format!(
                "SELECT m.rowid FROM search_messages m{} LIMIT {}",
                clause.sql,
                postings::SELECTIVE + 1
            ))
            .map_err(failed())?;
        let docs: HashSet<i64> = passing
            .query_map(params_from_iter(values(&clause)), |row| row.get(0))
            .map_err(failed())?
            .collect::<rusqlite::Result<_>>()
            .map_err(failed())?;
        (docs.len() <= postings::SELECTIVE).then_some(docs)
    };
    let mut blocks = c
        .prepare_cached(
            "SELECT block, postings, data FROM search_postings WHERE term = ?1 ORDER BY block",
        )
        .map_err(failed())?;
    let mut per_word = Vec::with_capacity(words.len());
    for word in words {
        let rows = blocks
            .query_map([word], |row| {
                Ok(Block {
                    number: row.get(0)?,
                    count: row.get::<_, i64>(1)? as usize,
                    data: row.get(2)?,
                })
            })
            .map_err(failed())?;
        per_word.push(
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(failed())?,
        );
    }
    let scored = postings::score(&stats, &per_word, only.as_ref());
    let mut picking = Picking::new(scored, limit, !clause.sql.is_empty() && only.is_none());
    while let Some(docs) = picking.next_batch() {
        let filter = picking.checks_filter().then_some(&clause);
        picking.take(&ids_of(c, &docs, filter)?);
    }
    Ok(picking.found())
}

/// The ids of messages by number, only those passing `clause` when given.
fn ids_of(
    c: &rusqlite::Connection,
    docs: &[i64],
    clause: Option<&Where>,
) -> Result<HashMap<i64, String>> {
    let mut ids = HashMap::with_capacity(docs.len());
    let extra = clause.map_or(0, |clause| clause.values.len());
    for chunk in docs.chunks(CHUNK) {
        let marks = (extra + 1..=extra + chunk.len())
            .map(placeholder)
            .collect::<Vec<_>>()
            .join(", ");
        let (condition, mut bound) = match clause {
            Some(clause) => (
                format!("{} AND m.rowid IN ({marks})", clause.sql),
                values(clause),
            ),
            None => (format!(" WHERE m.rowid IN ({marks})"), Vec::new()),
        };
        bound.extend(
            chunk
                .iter()
                .map(|doc| rusqlite::types::Value::Integer(*doc)),
        );
        let mut query = c
            .prepare_cached(&format!(
                "SELECT m.rowid, m.id FROM search_messages m{condition}"
            ))
            .map_err(db_error("search"))?;
        let rows = query
            .query_map(params_from_iter(bound), |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .map_err(db_error("search"))?;
        for row in rows {
            let (doc, id) = row.map_err(db_error("search"))?;
            ids.insert(doc, id);
        }
    }
    Ok(ids)
}

/// Removes the messages `ids` in `tx`: their rows (with their vectors), their words in
/// `search_postings` and the collection statistics, and their text in `search_text`.
pub(super) fn remove_messages(tx: &rusqlite::Connection, ids: &[String]) -> Result<usize> {
    let failed = || db_error("remove messages from the search index");
    let mut found: Vec<(i64, String)> = Vec::new();
    let mut select = tx
        .prepare_cached("SELECT rowid, text FROM search_messages WHERE id = ?1")
        .map_err(failed())?;
    for id in ids {
        if let Some(row) = select
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .map_err(failed())?
        {
            found.push(row);
        }
    }
    if found.is_empty() {
        return Ok(0);
    }
    let stats = postings_stats(tx)?;
    let indexed: Vec<(i64, String)> = found
        .iter()
        .filter(|(doc, _)| *doc <= stats.through)
        .cloned()
        .collect();
    let (by_word, words) = postings::postings_of(&indexed);
    let docs: HashSet<i64> = indexed.iter().map(|(doc, _)| *doc).collect();
    let mut blocks = tx
        .prepare_cached("SELECT block, postings, data FROM search_postings WHERE term = ?1")
        .map_err(failed())?;
    for word in by_word.keys() {
        let current = blocks
            .query_map([word], |row| {
                Ok(Block {
                    number: row.get(0)?,
                    count: row.get::<_, i64>(1)? as usize,
                    data: row.get(2)?,
                })
            })
            .map_err(failed())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(failed())?;
        for block in postings::without(current, &docs) {
            if block.count == 0 {
                tx.execute(
                    "DELETE FROM search_postings WHERE term = ?1 AND block = ?2",
                    params![word, block.number],
                )
            } else {
                tx.execute(
                    "UPDATE search_postings SET postings = ?3, data = ?4
                     WHERE term = ?1 AND block = ?2",
                    params![word, block.number, block.count as i64, block.data],
                )
            }
            .map_err(failed())?;
        }
    }
    tx.execute(
        "UPDATE search_postings_state SET messages = MAX(messages - ?1, 0),
         words = MAX(words - ?2, 0) WHERE id = 1",
        params![indexed.len() as i64, words],
    )
    .map_err(failed())?;
    for (doc, text) in &found {
        tx.execute(
            "INSERT INTO search_text (search_text, rowid, text) VALUES ('delete', ?1, ?2)",
            params![doc, text],
        )
        .map_err(failed())?;
        tx.execute("DELETE FROM search_messages WHERE rowid = ?1", [doc])
            .map_err(failed())?;
    }
    // SQLite numbers a new row one past the largest left: the newest rows removed,
    // their numbers come again, and must count as not yet indexed.
    tx.execute(
        "UPDATE search_postings_state SET indexed_through = MIN(indexed_through,
         (SELECT COALESCE(MAX(rowid), 0) FROM search_messages)) WHERE id = 1",
        [],
    )
    .map_err(failed())?;
    Ok(found.len())
}

#[async_trait]
impl SearchIndex for SqliteStore {
    async fn remove(&self, ids: &[String]) -> Result<usize> {
        let ids = ids.to_vec();
        self.write(move |tx| remove_messages(tx, &ids)).await
    }

    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        self.write(move |tx| {
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO search_messages (id, agent_id, session_id, session_key,
                     person_id, agent_identity, channel, direction, correlation_id, at, text)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(db_error("index messages"))?;
            let mut added = 0;
            for m in &messages {
                added += insert
                    .execute(params![
                        m.id,
                        m.agent,
                        m.session_id,
                        m.session_key,
                        m.person_id,
                        m.agent_identity,
                        m.channel,
                        direction_column(m.direction),
                        m.correlation_id,
                        m.at.timestamp_millis(),
                        m.text,
                    ])
                    .map_err(db_error("index messages"))?;
            }
            if added > 0 {
                index_new_messages(tx)?;
            }
            Ok(added)
        })
        .await
    }

    async fn full_text(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit_to: usize,
    ) -> Result<Vec<(String, f32)>> {
        let words = query_words(query);
        if words.is_empty() || limit_to == 0 {
            return Ok(Vec::new());
        }
        let filter = filter.clone();
        self.read(move |c| full_text(c, &words, &filter, limit_to))
            .await
    }

    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit_to: usize,
    ) -> Result<Vec<(String, f32)>> {
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        let vector = vector.to_vec();
        let statement = format!(
            "SELECT m.rowid, m.embedding FROM search_messages m{}{} m.embedding IS NOT NULL",
            clause.sql,
            if clause.sql.is_empty() {
                " WHERE"
            } else {
                " AND"
            }
        );
        self.read(move |c| {
            let failed = || db_error("search");
            let query_norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            let mut query = c.prepare_cached(&statement).map_err(failed())?;
            let mut rows = query
                .query(params_from_iter(values(&clause)))
                .map_err(failed())?;
            // Scored by message number straight from the row's bytes; ids only for the
            // best.
            let mut scored = Vec::new();
            while let Some(row) = rows.next().map_err(failed())? {
                let blob = row.get_ref(1).map_err(failed())?;
                let Ok(bytes) = blob.as_blob() else {
                    continue;
                };
                if let Some(similarity) = postings::cosine_of_bytes(bytes, &vector, query_norm) {
                    scored.push((row.get::<_, i64>(0).map_err(failed())?, similarity));
                }
            }
            let best_docs = postings::best_with_ties(scored, limit_to);
            let docs: Vec<i64> = best_docs.iter().map(|(doc, _)| *doc).collect();
            let ids = ids_of(c, &docs, None)?;
            let named = best_docs
                .into_iter()
                .filter_map(|(doc, score)| Some((ids.get(&doc)?.clone(), score)))
                .collect();
            Ok(best(named, limit_to))
        })
        .await
    }

    async fn messages_by_id(&self, ids: &[String]) -> Result<Vec<LoggedMessage>> {
        let ids = ids.to_vec();
        self.read(move |c| {
            let mut found = Vec::new();
            for chunk in ids.chunks(CHUNK) {
                let marks = (1..=chunk.len())
                    .map(placeholder)
                    .collect::<Vec<_>>()
                    .join(", ");
                let statement = format!(
                    "SELECT {MESSAGE_COLUMNS} FROM search_messages m WHERE m.id IN ({marks})"
                );
                let mut query = c.prepare(&statement).map_err(db_error("read messages"))?;
                let rows = query
                    .query_map(params_from_iter(chunk), message)
                    .map_err(db_error("read messages"))?;
                for row in rows {
                    found.push(row.map_err(db_error("read messages"))?);
                }
            }
            Ok(found)
        })
        .await
    }

    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>> {
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        let statement = format!(
            "SELECT {MESSAGE_COLUMNS} FROM search_messages m{} ORDER BY m.at, m.id",
            clause.sql
        );
        self.read(move |c| {
            let mut query = c
                .prepare_cached(&statement)
                .map_err(db_error("read messages"))?;
            let rows = query
                .query_map(params_from_iter(values(&clause)), message)
                .map_err(db_error("read messages"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db_error("read messages"))
        })
        .await
    }

    async fn pending(&self, work: Work, limit_to: usize) -> Result<Vec<LoggedMessage>> {
        let condition = sql::waiting(work);
        let statement = format!(
            "SELECT {MESSAGE_COLUMNS} FROM search_messages m WHERE {condition}
             ORDER BY m.at, m.id LIMIT ?1"
        );
        self.read(move |c| {
            let mut query = c
                .prepare_cached(&statement)
                .map_err(db_error("read messages"))?;
            let rows = query
                .query_map(params![limit(limit_to)], message)
                .map_err(db_error("read messages"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db_error("read messages"))
        })
        .await
    }

    async fn pending_count(&self, work: Work) -> Result<usize> {
        let statement = format!(
            "SELECT COUNT(*) FROM search_messages m WHERE {}",
            sql::waiting(work)
        );
        self.read(move |c| {
            let count: i64 = c
                .query_row(&statement, [], |row| row.get(0))
                .map_err(db_error("count messages"))?;
            Ok(usize::try_from(count).unwrap_or(0))
        })
        .await
    }

    async fn set_embeddings(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<()> {
        self.write(move |tx| {
            let mut update = tx
                .prepare_cached("UPDATE search_messages SET embedding = ?2 WHERE id = ?1")
                .map_err(db_error("store vectors"))?;
            for (id, vector) in &vectors {
                update
                    .execute(params![id, to_blob(vector)])
                    .map_err(db_error("store vectors"))?;
            }
            Ok(())
        })
        .await
    }

    async fn set_category(&self, ids: &[String], category: &str) -> Result<()> {
        let ids = ids.to_vec();
        let category = category.to_owned();
        self.write(move |tx| {
            let mut update = tx
                .prepare_cached("UPDATE search_messages SET category = ?2 WHERE id = ?1")
                .map_err(db_error("set categories"))?;
            for id in &ids {
                update
                    .execute(params![id, category])
                    .map_err(db_error("set categories"))?;
            }
            Ok(())
        })
        .await
    }

    async fn newest(&self) -> Result<Option<DateTime<Utc>>> {
        self.read(|c| {
            let newest: Option<i64> = c
                .query_row("SELECT MAX(at) FROM search_messages", [], |row| row.get(0))
                .optional()
                .map_err(db_error("read messages"))?
                .flatten();
            Ok(newest.and_then(DateTime::from_timestamp_millis))
        })
        .await
    }

    async fn message_count(&self) -> Result<usize> {
        self.read(|c| {
            let count: i64 = c
                .query_row("SELECT COUNT(*) FROM search_messages", [], |row| row.get(0))
                .map_err(db_error("count messages"))?;
            Ok(usize::try_from(count).unwrap_or(0))
        })
        .await
    }
}
