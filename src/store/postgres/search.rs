//! [`PostgresStore`] as a [`SearchIndex`]: messages beside the sessions, full text by
//! a generated `tsvector` with a GIN index (`ts_rank`, English stemming), vectors as
//! `real[]` compared in the client (pgvector is not required).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{params, pg_error, refs, PostgresStore};
use crate::error::Result;
use crate::search::{best, cosine, LoggedMessage, SearchFilter, SearchIndex, Work};
use crate::store::sql::{
    self, direction_column, message_filter, query_words, SqlValue, Where, MESSAGE_COLUMNS,
};

fn placeholder(n: usize) -> String {
    format!("${n}")
}

fn message(row: &Row) -> LoggedMessage {
    sql::message_from_columns(
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
        row.get(7),
        row.get(8),
        row.get(9),
        row.get(10),
        row.get(11),
    )
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl PostgresStore {
    async fn search_rows(
        &self,
        statement: &str,
        values: &[SqlValue],
        op: &'static str,
    ) -> Result<Vec<Row>> {
        let values = params(values);
        let client = self.client().await?;
        client
            .query(statement, &refs(&values))
            .await
            .map_err(pg_error(op))
    }
}

#[async_trait]
impl SearchIndex for PostgresStore {
    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        let insert = tx
            .prepare_cached(&format!(
                "INSERT INTO {} (id, agent_id, session_id, session_key, person_id, agent_identity,
                 channel, direction, correlation_id, at, text)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                 ON CONFLICT (id) DO NOTHING",
                self.table("search_messages")
            ))
            .await
            .map_err(pg_error("index messages"))?;
        let mut added = 0;
        for m in &messages {
            let direction = direction_column(m.direction);
            let at = m.at.timestamp_millis();
            let values: [&(dyn ToSql + Sync); 11] = [
                &m.id,
                &m.agent,
                &m.session_id,
                &m.session_key,
                &m.person_id,
                &m.agent_identity,
                &m.channel,
                &direction,
                &m.correlation_id,
                &at,
                &m.text,
            ];
            added += tx
                .execute(&insert, &values)
                .await
                .map_err(pg_error("index messages"))? as usize;
        }
        tx.commit().await.map_err(pg_error("commit"))?;
        Ok(added)
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
        let mut clause = Where::default();
        clause.push(
            &placeholder,
            "m.words @@ to_tsquery('english', ?)",
            SqlValue::Text(words.join(" | ")),
        );
        message_filter(&mut clause, filter, &placeholder);
        let statement = format!(
            "SELECT m.id, ts_rank(m.words, to_tsquery('english', $1))::REAL AS score
             FROM {} m{} ORDER BY score DESC, m.id LIMIT {}",
            self.table("search_messages"),
            clause.sql,
            limit(limit_to)
        );
        let rows = self
            .search_rows(&statement, &clause.values, "search")
            .await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }

    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit_to: usize,
    ) -> Result<Vec<(String, f32)>> {
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        let statement = format!(
            "SELECT m.id, m.embedding FROM {} m{}{} m.embedding IS NOT NULL",
            self.table("search_messages"),
            clause.sql,
            if clause.sql.is_empty() {
                " WHERE"
            } else {
                " AND"
            }
        );
        let rows = self
            .search_rows(&statement, &clause.values, "search")
            .await?;
        let scored = rows
            .iter()
            .filter_map(|row| {
                let other: Vec<f32> = row.get(1);
                Some((row.get(0), cosine(&other, vector)?))
            })
            .collect();
        Ok(best(scored, limit_to))
    }

    async fn messages_by_id(&self, ids: &[String]) -> Result<Vec<LoggedMessage>> {
        let statement = format!(
            "SELECT {MESSAGE_COLUMNS} FROM {} m WHERE m.id = ANY($1)",
            self.table("search_messages")
        );
        let client = self.client().await?;
        let rows = client
            .query(&statement, &[&ids])
            .await
            .map_err(pg_error("read messages"))?;
        Ok(rows.iter().map(message).collect())
    }

    async fn messages(&self, filter: &SearchFilter) -> Result<Vec<LoggedMessage>> {
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        let statement = format!(
            "SELECT {MESSAGE_COLUMNS} FROM {} m{} ORDER BY m.at, m.id",
            self.table("search_messages"),
            clause.sql
        );
        let rows = self
            .search_rows(&statement, &clause.values, "read messages")
            .await?;
        Ok(rows.iter().map(message).collect())
    }

    async fn pending(&self, work: Work, limit_to: usize) -> Result<Vec<LoggedMessage>> {
        let condition = sql::waiting(work);
        let statement = format!(
            "SELECT {MESSAGE_COLUMNS} FROM {} m WHERE {condition} ORDER BY m.at, m.id LIMIT $1",
            self.table("search_messages")
        );
        let rows = self
            .search_rows(
                &statement,
                &[SqlValue::Int(limit(limit_to))],
                "read messages",
            )
            .await?;
        Ok(rows.iter().map(message).collect())
    }

    async fn pending_count(&self, work: Work) -> Result<usize> {
        let client = self.client().await?;
        let count: i64 = client
            .query_one(
                &format!(
                    "SELECT COUNT(*) FROM {} m WHERE {}",
                    self.table("search_messages"),
                    sql::waiting(work)
                ),
                &[],
            )
            .await
            .map_err(pg_error("count messages"))?
            .get(0);
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn set_embeddings(&self, vectors: Vec<(String, Vec<f32>)>) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        let update = tx
            .prepare_cached(&format!(
                "UPDATE {} SET embedding = $2 WHERE id = $1",
                self.table("search_messages")
            ))
            .await
            .map_err(pg_error("store vectors"))?;
        for (id, vector) in &vectors {
            tx.execute(&update, &[id, vector])
                .await
                .map_err(pg_error("store vectors"))?;
        }
        tx.commit().await.map_err(pg_error("commit"))
    }

    async fn set_category(&self, ids: &[String], category: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                &format!(
                    "UPDATE {} SET category = $2 WHERE id = ANY($1)",
                    self.table("search_messages")
                ),
                &[&ids, &category],
            )
            .await
            .map_err(pg_error("set categories"))?;
        Ok(())
    }

    async fn newest(&self) -> Result<Option<DateTime<Utc>>> {
        let client = self.client().await?;
        let newest: Option<i64> = client
            .query_one(
                &format!("SELECT MAX(at) FROM {}", self.table("search_messages")),
                &[],
            )
            .await
            .map_err(pg_error("read messages"))?
            .get(0);
        Ok(newest.and_then(DateTime::from_timestamp_millis))
    }

    async fn message_count(&self) -> Result<usize> {
        let client = self.client().await?;
        let count: i64 = client
            .query_one(
                &format!("SELECT COUNT(*) FROM {}", self.table("search_messages")),
                &[],
            )
            .await
            .map_err(pg_error("count messages"))?
            .get(0);
        Ok(usize::try_from(count).unwrap_or(0))
    }
}
