//! [`PostgresStore`] as a [`SearchIndex`]: messages beside the sessions, full text by
//! the crate's packed postings (BM25 over the crate's tokens, see
//! [`postings`](crate::store::postings)), vectors as `real[]` compared in the client
//! (pgvector is not required). The generated `tsvector` column `words` and its GIN
//! index are still kept for SQL written against them.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use std::collections::{BTreeMap, HashMap, HashSet};

use deadpool_postgres::{GenericClient, Transaction};

use super::{params, pg_error, refs, PostgresStore};
use crate::error::Result;
use crate::store::sql::{
    self, direction_column, message_filter, query_words, SqlValue, Where, MESSAGE_COLUMNS,
};
use crate::transcript::search::postings::{self, Block, Picking, Stats};
use crate::transcript::search::{best, cosine, LoggedMessage, SearchFilter, SearchIndex, Work};

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

/// A message's new quantized vector (`None`: it has none).
type Change = (i64, Option<Vec<i8>>);

/// Runs `sql` as a statement prepared once per connection.
async fn query_cached(
    client: &impl GenericClient,
    sql: &str,
    values: &[&(dyn ToSql + Sync)],
    op: &'static str,
) -> Result<Vec<Row>> {
    let statement = client.prepare_cached(sql).await.map_err(pg_error(op))?;
    client.query(&statement, values).await.map_err(pg_error(op))
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

impl PostgresStore {
    /// Indexes the messages added since the last call (`search_postings`), in the
    /// caller's transaction, which holds the index's lock.
    pub(super) async fn index_new_messages(&self, tx: &Transaction<'_>) -> Result<()> {
        let failed = || pg_error("index messages");
        let stats = self.postings_stats(tx).await?;
        let rows = tx
            .query(
                &format!(
                    "SELECT seq, text FROM {} WHERE seq > $1 ORDER BY seq",
                    self.table("search_messages")
                ),
                &[&stats.through],
            )
            .await
            .map_err(failed())?;
        let new: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let Some(through) = new.iter().map(|(doc, _)| *doc).max() else {
            return Ok(());
        };
        let (by_word, words) = postings::postings_of(&new);
        let terms: Vec<&String> = by_word.keys().collect();
        let last: HashMap<String, Block> = tx
            .query(
                &format!(
                    "SELECT DISTINCT ON (term) term, block, postings, data FROM {}
                     WHERE term = ANY($1) ORDER BY term, block DESC",
                    self.table("search_postings")
                ),
                &[&terms],
            )
            .await
            .map_err(failed())?
            .iter()
            .map(|row| {
                (
                    row.get(0),
                    Block {
                        number: row.get(1),
                        count: row.get::<_, i32>(2) as usize,
                        data: row.get(3),
                    },
                )
            })
            .collect();
        let mut last = last;
        let (mut term, mut number, mut count, mut data) = (vec![], vec![], vec![], vec![]);
        for (word, postings) in &by_word {
            for block in postings::append(last.remove(word), postings) {
                term.push(word.as_str());
                number.push(block.number);
                count.push(block.count as i32);
                data.push(block.data);
            }
        }
        tx.execute(
            &format!(
                "INSERT INTO {} (term, block, postings, data)
                 SELECT * FROM unnest($1::TEXT[], $2::BIGINT[], $3::INTEGER[], $4::BYTEA[])
                 ON CONFLICT (term, block) DO UPDATE
                 SET postings = EXCLUDED.postings, data = EXCLUDED.data",
                self.table("search_postings")
            ),
            &[&term, &number, &count, &data],
        )
        .await
        .map_err(failed())?;
        tx.execute(
            &format!(
                "UPDATE {} SET indexed_through = $1, messages = messages + $2,
                 words = words + $3 WHERE id = 1",
                self.table("search_postings_state")
            ),
            &[&through, &(new.len() as i64), &words],
        )
        .await
        .map_err(failed())?;
        Ok(())
    }

    /// Brings `search_vector_blocks` up to date with the vectors of the messages `ids`
    /// (every message when `None`), in the caller's transaction, which holds the
    /// index's lock.
    pub(super) async fn index_vectors(
        &self,
        tx: &Transaction<'_>,
        ids: Option<&[&String]>,
    ) -> Result<()> {
        let failed = || pg_error("index vectors");
        let table = self.table("search_messages");
        let rows = match ids {
            Some(ids) => {
                tx.query(
                    &format!("SELECT seq, embedding FROM {table} WHERE id = ANY($1)"),
                    &[&ids],
                )
                .await
            }
            None => {
                tx.query(
                    &format!("SELECT seq, embedding FROM {table} WHERE embedding IS NOT NULL"),
                    &[],
                )
                .await
            }
        }
        .map_err(failed())?;
        let mut by_block: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
        for row in &rows {
            let seq: i64 = row.get(0);
            let vector: Option<Vec<f32>> = row.get(1);
            by_block
                .entry(seq.div_euclid(postings::VECTOR_BLOCK))
                .or_default()
                .push((seq, vector.as_deref().and_then(postings::quantize)));
        }
        if by_block.is_empty() {
            return Ok(());
        }
        let numbers: Vec<i64> = by_block.keys().copied().collect();
        let mut stored: HashMap<i64, Vec<u8>> = tx
            .query(
                &format!(
                    "SELECT block, data FROM {} WHERE block = ANY($1)",
                    self.table("search_vector_blocks")
                ),
                &[&numbers],
            )
            .await
            .map_err(failed())?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let mut data = Vec::with_capacity(numbers.len());
        for (number, changes) in &by_block {
            let mut vectors = stored
                .remove(number)
                .map(|bytes| postings::decode_vectors(&bytes))
                .unwrap_or_default();
            for (seq, vector) in changes {
                match vector {
                    Some(vector) => vectors.insert(*seq, vector.clone()),
                    None => vectors.remove(seq),
                };
            }
            data.push(postings::encode_vectors(&vectors));
        }
        tx.execute(
            &format!(
                "INSERT INTO {} (block, data) SELECT * FROM unnest($1::BIGINT[], $2::BYTEA[])
                 ON CONFLICT (block) DO UPDATE SET data = EXCLUDED.data",
                self.table("search_vector_blocks")
            ),
            &[&numbers, &data],
        )
        .await
        .map_err(failed())?;
        Ok(())
    }

    async fn postings_stats(&self, client: &impl GenericClient) -> Result<Stats> {
        let rows = query_cached(
            client,
            &format!(
                "SELECT indexed_through, messages, words FROM {} WHERE id = 1",
                self.table("search_postings_state")
            ),
            &[],
            "read the search index",
        )
        .await?;
        let row = rows.first().ok_or_else(|| {
            crate::Error::component("search index", "search_postings_state has no row")
        })?;
        Ok(Stats {
            through: row.get(0),
            messages: row.get(1),
            words: row.get(2),
        })
    }

    /// The ids of messages by number, only those passing `clause` when given.
    async fn ids_of(
        &self,
        client: &impl GenericClient,
        docs: &[i64],
        clause: Option<&Where>,
    ) -> Result<HashMap<i64, String>> {
        let (condition, mut values) = match clause {
            Some(clause) => (format!("{} AND", clause.sql), params(&clause.values)),
            None => (" WHERE".to_owned(), Vec::new()),
        };
        let mark = values.len() + 1;
        values.push(Box::new(docs.to_vec()));
        let rows = query_cached(
            client,
            &format!(
                "SELECT m.seq, m.id FROM {} m{condition} m.seq = ANY(${mark})",
                self.table("search_messages")
            ),
            &refs(&values),
            "search",
        )
        .await?;
        Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
    }
}

/// `text` as a PostgreSQL `TEXT` value holds it: a NUL character (which it cannot
/// hold, and would refuse the whole batch for) becomes U+FFFD.
fn without_nul(text: &str) -> std::borrow::Cow<'_, str> {
    match text.contains('\0') {
        true => text.replace('\0', "\u{FFFD}").into(),
        false => text.into(),
    }
}

#[async_trait]
impl SearchIndex for PostgresStore {
    async fn remove(&self, ids: &[String]) -> Result<usize> {
        let failed = || pg_error("remove messages from the search index");
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        self.lock(&tx, "search index").await?;
        let found: Vec<(i64, String)> = tx
            .query(
                &format!(
                    "SELECT seq, text FROM {} WHERE id = ANY($1)",
                    self.table("search_messages")
                ),
                &[&ids],
            )
            .await
            .map_err(failed())?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        if found.is_empty() {
            return Ok(0);
        }
        let stats = self.postings_stats(&tx).await?;
        let indexed: Vec<(i64, String)> = found
            .iter()
            .filter(|(doc, _)| *doc <= stats.through)
            .cloned()
            .collect();
        let (by_word, words) = postings::postings_of(&indexed);
        let docs: HashSet<i64> = indexed.iter().map(|(doc, _)| *doc).collect();
        let terms: Vec<&String> = by_word.keys().collect();
        let mut blocks: BTreeMap<String, Vec<Block>> = BTreeMap::new();
        for row in tx
            .query(
                &format!(
                    "SELECT term, block, postings, data FROM {} WHERE term = ANY($1)",
                    self.table("search_postings")
                ),
                &[&terms],
            )
            .await
            .map_err(failed())?
        {
            blocks.entry(row.get(0)).or_default().push(Block {
                number: row.get(1),
                count: row.get::<_, i32>(2) as usize,
                data: row.get(3),
            });
        }
        for (term, current) in blocks {
            for block in postings::without(current, &docs) {
                if block.count == 0 {
                    tx.execute(
                        &format!(
                            "DELETE FROM {} WHERE term = $1 AND block = $2",
                            self.table("search_postings")
                        ),
                        &[&term, &block.number],
                    )
                    .await
                } else {
                    tx.execute(
                        &format!(
                            "UPDATE {} SET postings = $3, data = $4 WHERE term = $1 AND block = $2",
                            self.table("search_postings")
                        ),
                        &[&term, &block.number, &(block.count as i32), &block.data],
                    )
                    .await
                }
                .map_err(failed())?;
            }
        }
        // Their vectors leave the packed vector blocks.
        let mut by_block: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (seq, _) in &found {
            by_block
                .entry(seq.div_euclid(postings::VECTOR_BLOCK))
                .or_default()
                .push(*seq);
        }
        let numbers: Vec<i64> = by_block.keys().copied().collect();
        for row in tx
            .query(
                &format!(
                    "SELECT block, data FROM {} WHERE block = ANY($1)",
                    self.table("search_vector_blocks")
                ),
                &[&numbers],
            )
            .await
            .map_err(failed())?
        {
            let number: i64 = row.get(0);
            let mut vectors = postings::decode_vectors(row.get(1));
            let before = vectors.len();
            for seq in by_block.get(&number).into_iter().flatten() {
                vectors.remove(seq);
            }
            if vectors.len() != before {
                tx.execute(
                    &format!(
                        "UPDATE {} SET data = $2 WHERE block = $1",
                        self.table("search_vector_blocks")
                    ),
                    &[&number, &postings::encode_vectors(&vectors)],
                )
                .await
                .map_err(failed())?;
            }
        }
        tx.execute(
            &format!(
                "UPDATE {} SET messages = GREATEST(messages - $1, 0),
                 words = GREATEST(words - $2, 0) WHERE id = 1",
                self.table("search_postings_state")
            ),
            &[&(indexed.len() as i64), &words],
        )
        .await
        .map_err(failed())?;
        let seqs: Vec<i64> = found.iter().map(|(seq, _)| *seq).collect();
        tx.execute(
            &format!(
                "DELETE FROM {} WHERE seq = ANY($1)",
                self.table("search_messages")
            ),
            &[&seqs],
        )
        .await
        .map_err(failed())?;
        tx.commit().await.map_err(pg_error("commit"))?;
        Ok(found.len())
    }

    async fn add(&self, messages: Vec<LoggedMessage>) -> Result<usize> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        // One writer of the index at a time: messages are numbered, and their postings
        // appended, in commit order.
        self.lock(&tx, "search index").await?;
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
            let (session_key, person_id) = (m.session_key.as_deref(), m.person_id.as_deref());
            let (identity, channel) = (m.agent_identity.as_deref(), m.channel.as_deref());
            let correlation_id = m.correlation_id.as_deref();
            let values: [&(dyn ToSql + Sync); 11] = [
                &m.id,
                &m.agent,
                &m.session_id,
                &session_key.map(without_nul),
                &person_id.map(without_nul),
                &identity.map(without_nul),
                &channel.map(without_nul),
                &direction,
                &correlation_id.map(without_nul),
                &at,
                &without_nul(&m.text),
            ];
            added += tx
                .execute(&insert, &values)
                .await
                .map_err(pg_error("index messages"))? as usize;
        }
        if added > 0 {
            self.index_new_messages(&tx).await?;
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
        let client = self.client().await?;
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        // A selective filter: score only the messages it passes.
        let only: Option<HashSet<i64>> = if clause.sql.is_empty() {
            None
        } else {
            let values = params(&clause.values);
            let rows = query_cached(
                &client,
                &format!(
                    "SELECT m.seq FROM {} m{} LIMIT {}",
                    self.table("search_messages"),
                    clause.sql,
                    postings::SELECTIVE + 1
                ),
                &refs(&values),
                "search",
            )
            .await?;
            (rows.len() <= postings::SELECTIVE).then(|| rows.iter().map(|r| r.get(0)).collect())
        };
        // The statistics and the words' blocks in one round trip.
        let rows = query_cached(
            &client,
            &format!(
                "SELECT s.messages, s.words, p.term, p.postings, p.data FROM {} s
                 LEFT JOIN {} p ON p.term = ANY($1) WHERE s.id = 1 ORDER BY p.term, p.block",
                self.table("search_postings_state"),
                self.table("search_postings")
            ),
            &[&words],
            "search",
        )
        .await?;
        let stats = rows.first().map_or(Stats::default(), |row| Stats {
            through: 0,
            messages: row.get(0),
            words: row.get(1),
        });
        let mut by_word: HashMap<String, Vec<Block>> = HashMap::new();
        for row in &rows {
            let Some(term) = row.get::<_, Option<String>>(2) else {
                continue;
            };
            by_word.entry(term).or_default().push(Block {
                number: 0,
                count: row.get::<_, i32>(3) as usize,
                data: row.get(4),
            });
        }
        let per_word: Vec<Vec<Block>> = words
            .iter()
            .filter_map(|word| by_word.remove(word))
            .collect();
        let scored = postings::score(&stats, &per_word, only.as_ref());
        let filtered_later = !clause.sql.is_empty() && only.is_none();
        let mut picking = Picking::new(scored, limit_to, filtered_later);
        while let Some(docs) = picking.next_batch() {
            let filter = picking.checks_filter().then_some(&clause);
            picking.take(&self.ids_of(&client, &docs, filter).await?);
        }
        Ok(picking.found())
    }

    async fn nearest(
        &self,
        vector: &[f32],
        filter: &SearchFilter,
        limit_to: usize,
    ) -> Result<Vec<(String, f32)>> {
        if limit_to == 0 {
            return Ok(Vec::new());
        }
        let mut clause = Where::default();
        message_filter(&mut clause, filter, &placeholder);
        let client = self.client().await?;
        let exact = |rows: &[Row]| -> Vec<(String, f32)> {
            rows.iter()
                .filter_map(|row| {
                    let other: Vec<f32> = row.get(1);
                    Some((row.get(0), cosine(&other, vector)?))
                })
                .collect()
        };
        let and = if clause.sql.is_empty() {
            " WHERE"
        } else {
            " AND"
        };
        if !clause.sql.is_empty() {
            // A selective filter: its messages' vectors, compared exactly.
            let values = params(&clause.values);
            let rows = query_cached(
                &client,
                &format!(
                    "SELECT m.id, m.embedding FROM {} m{}{and} m.embedding IS NOT NULL LIMIT {}",
                    self.table("search_messages"),
                    clause.sql,
                    postings::SELECTIVE + 1
                ),
                &refs(&values),
                "search",
            )
            .await?;
            if rows.len() <= postings::SELECTIVE {
                return Ok(best(exact(&rows), limit_to));
            }
        }
        // Every quantized vector, compared approximately; the best re-ranked exactly.
        let Some(unit) = postings::unit(vector) else {
            return Ok(Vec::new());
        };
        let blocks = query_cached(
            &client,
            &format!("SELECT data FROM {}", self.table("search_vector_blocks")),
            &[],
            "search",
        )
        .await?;
        let mut approximate = Vec::new();
        for block in &blocks {
            postings::scan_vectors(block.get(0), &unit, &mut approximate);
        }
        let ranked = postings::ranked(approximate);
        let pool = postings::rerank_pool(limit_to);
        let mut candidates: Vec<(String, f32)> = Vec::new();
        let mut from = 0;
        let mut batch = pool;
        while from < ranked.len() && candidates.len() < pool {
            let to = (from + batch).min(ranked.len());
            let docs: Vec<i64> = ranked[from..to].iter().map(|(doc, _)| *doc).collect();
            let mut values = params(&clause.values);
            let mark = values.len() + 1;
            values.push(Box::new(docs));
            let rows = query_cached(
                &client,
                &format!(
                    "SELECT m.id, m.embedding FROM {} m{}{and} m.embedding IS NOT NULL
                     AND m.seq = ANY(${mark})",
                    self.table("search_messages"),
                    clause.sql,
                ),
                &refs(&values),
                "search",
            )
            .await?;
            candidates.extend(exact(&rows));
            from = to;
            batch *= 2;
        }
        Ok(best(candidates, limit_to))
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
        // The index's lock first, as `add` takes it: vectors join their blocks in order.
        self.lock(&tx, "search index").await?;
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
        let ids: Vec<&String> = vectors.iter().map(|(id, _)| id).collect();
        self.index_vectors(&tx, Some(&ids)).await?;
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
