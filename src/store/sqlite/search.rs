//! [`SqliteStore`] as a [`SearchIndex`]: messages beside the sessions, full text by
//! FTS5 (BM25, Porter stemming), vectors as little-endian `f32` blobs.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use super::{db_error, SqliteStore};
use crate::error::Result;
use crate::search::{best, cosine, LoggedMessage, SearchFilter, SearchIndex, Work};
use crate::store::sql::{
    self, direction_column, message_filter, query_words, SqlValue, Where, MESSAGE_COLUMNS,
};

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

fn from_blob(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl SearchIndex for SqliteStore {
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
        let expression = words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR ");
        let mut clause = Where::default();
        clause.push(
            &placeholder,
            "search_text MATCH ?",
            SqlValue::Text(expression),
        );
        let statement = if *filter == SearchFilter::default() {
            // Rank in the FTS table alone; join only the best rows.
            format!(
                "SELECT m.id, -best.rank FROM (
                     SELECT rowid, rank FROM search_text{} ORDER BY rank LIMIT {}
                 ) best JOIN search_messages m ON m.rowid = best.rowid
                 ORDER BY best.rank, m.id",
                clause.sql,
                limit(limit_to)
            )
        } else {
            message_filter(&mut clause, filter, &placeholder);
            format!(
                "SELECT m.id, -bm25(search_text) FROM search_text
                 JOIN search_messages m ON m.rowid = search_text.rowid{}
                 ORDER BY bm25(search_text), m.id LIMIT {}",
                clause.sql,
                limit(limit_to)
            )
        };
        self.read(move |c| {
            let mut query = c.prepare_cached(&statement).map_err(db_error("search"))?;
            let rows = query
                .query_map(params_from_iter(values(&clause)), |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, f64>(1)? as f32))
                })
                .map_err(db_error("search"))?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map_err(db_error("search"))
        })
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
            "SELECT m.id, m.embedding FROM search_messages m{}{} m.embedding IS NOT NULL",
            clause.sql,
            if clause.sql.is_empty() {
                " WHERE"
            } else {
                " AND"
            }
        );
        self.read(move |c| {
            let mut query = c.prepare_cached(&statement).map_err(db_error("search"))?;
            let mut rows = query
                .query(params_from_iter(values(&clause)))
                .map_err(db_error("search"))?;
            let mut scored = Vec::new();
            while let Some(row) = rows.next().map_err(db_error("search"))? {
                let blob: Vec<u8> = row.get(1).map_err(db_error("search"))?;
                if let Some(similarity) = cosine(&from_blob(&blob), &vector) {
                    scored.push((row.get(0).map_err(db_error("search"))?, similarity));
                }
            }
            Ok(best(scored, limit_to))
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
