//! [`PostgresStore`] as a [`TranscriptStore`]: transcripts as rows of lines.

use super::notify::channel;
use super::*;
use crate::store::sql_transcripts::{self as rows, AppendNotice, TranscriptRows};
use std::collections::HashMap;

/// A PostgreSQL transaction (`C`: a [`Transaction`], or a connection inside
/// `BEGIN … COMMIT`) as the rows of the transcript tables.
pub(super) struct PgRows<'a, C> {
    store: &'a PostgresStore,
    tx: &'a C,
}

impl<C: deadpool_postgres::GenericClient> TranscriptRows for PgRows<'_, C> {
    async fn row(&mut self, agent: &str, name: &str) -> Result<Option<(i64, Option<String>)>> {
        Ok(self
            .tx
            .query_opt_prepared(
                &format!(
                    "SELECT line_count, leaf FROM {} WHERE agent_id = $1 AND name = $2",
                    self.store.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .map(|row| (row.get(0), row.get(1))))
    }

    async fn insert_row(
        &mut self,
        agent: &str,
        name: &str,
        session_id: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()> {
        self.tx
            .execute_prepared(
                &format!(
                    "INSERT INTO {} (agent_id, name, session_id, line_count, leaf)
                     VALUES ($1, $2, $3, $4, $5)",
                    self.store.table("transcripts")
                ),
                &[&agent, &name, &session_id, &line_count, &leaf],
            )
            .await
            .map_err(pg_error("create a transcript"))?;
        Ok(())
    }

    async fn insert_lines(
        &mut self,
        agent: &str,
        name: &str,
        first: i64,
        lines: &[String],
    ) -> Result<()> {
        let columns = LineColumns::of(first, lines);
        self.tx
            .execute_prepared(
                &self.store.insert_lines_sql(),
                &[
                    &agent,
                    &name,
                    &columns.seq,
                    &lines,
                    &columns.log_at,
                    &columns.person_id,
                    &columns.agent_identity,
                    &columns.session_key,
                ],
            )
            .await
            .map_err(pg_error("append to a transcript"))?;
        Ok(())
    }

    async fn lines_from(
        &mut self,
        agent: &str,
        name: &str,
        from: i64,
        limit: Option<i64>,
        max_bytes: Option<i64>,
    ) -> Result<Vec<(i64, String)>> {
        let table = self.store.table("transcript_lines");
        // With `max_bytes`, the lines whose sizes before them (in bytes) add up to less
        // than it: the first always. Without, the plain query a turn's read runs.
        let rows = match max_bytes {
            Some(max_bytes) => {
                let sql = format!(
                    "SELECT seq, line FROM (
                         SELECT seq, line,
                             SUM(octet_length(line)) OVER (ORDER BY seq)
                                 - octet_length(line) AS before
                         FROM {table} WHERE agent_id = $1 AND name = $2 AND seq >= $3
                         ORDER BY seq LIMIT $4) AS chunk
                     WHERE before < $5 OR seq = $3 ORDER BY seq"
                );
                self.tx
                    .query_prepared(&sql, &[&agent, &name, &from, &limit, &max_bytes])
                    .await
            }
            None => {
                let sql = format!(
                    "SELECT seq, line FROM {table}
                     WHERE agent_id = $1 AND name = $2 AND seq >= $3 ORDER BY seq LIMIT $4"
                );
                self.tx
                    .query_prepared(&sql, &[&agent, &name, &from, &limit])
                    .await
            }
        };
        Ok(rows
            .map_err(pg_error("read a transcript"))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    async fn lines_before(
        &mut self,
        agent: &str,
        name: &str,
        before: i64,
        limit: i64,
        compactions: bool,
    ) -> Result<Vec<(i64, String)>> {
        let table = self.store.table("transcript_lines");
        // The word, written as the index of such lines is, so the planner uses it.
        let only = if compactions {
            " AND strpos(line, 'compaction') > 0"
        } else {
            ""
        };
        let sql = format!(
            "SELECT seq, line FROM {table}
             WHERE agent_id = $1 AND name = $2 AND seq < $3{only} ORDER BY seq DESC LIMIT $4"
        );
        Ok(self
            .tx
            .query_prepared(&sql, &[&agent, &name, &before, &limit])
            .await
            .map_err(pg_error("read a transcript"))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    }

    #[cfg(feature = "sqlite")]
    async fn set_tail(
        &mut self,
        agent: &str,
        name: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()> {
        self.tx
            .execute_prepared(
                &format!(
                    "UPDATE {} SET line_count = $3, leaf = $4 WHERE agent_id = $1 AND name = $2",
                    self.store.table("transcripts")
                ),
                &[&agent, &name, &line_count, &leaf],
            )
            .await
            .map_err(pg_error("append to a transcript"))?;
        Ok(())
    }

    async fn rename(&mut self, agent: &str, from: &str, to: &str) -> Result<()> {
        for table in ["transcripts", "transcript_lines"] {
            self.tx
                .execute_prepared(
                    &format!(
                        "UPDATE {} SET name = $3 WHERE agent_id = $1 AND name = $2",
                        self.store.table(table)
                    ),
                    &[&agent, &from, &to],
                )
                .await
                .map_err(pg_error("archive a transcript"))?;
        }
        Ok(())
    }

    async fn archived_as(&mut self, agent: &str, name: &str) -> Result<Option<String>> {
        Ok(self
            .tx
            .query_opt_prepared(
                &format!(
                    "SELECT name FROM {} WHERE agent_id = $1 AND starts_with(name, $2 || '.')
                     ORDER BY name DESC LIMIT 1",
                    self.store.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("find an archived transcript"))?
            .map(|row| row.get(0)))
    }
}

impl PostgresStore {
    /// The statement that inserts lines numbered from `$3[1]` in one go, with their
    /// message-log columns (parameters: agent, name, then the arrays of
    /// [`LineColumns`] with the lines as the second).
    fn insert_lines_sql(&self) -> String {
        format!(
            "INSERT INTO {} (agent_id, name, seq, line, log_at, person_id, agent_identity,
                 session_key)
             SELECT $1, $2, * FROM UNNEST($3::BIGINT[], $4::TEXT[], $5::BIGINT[],
                 $6::TEXT[], $7::TEXT[], $8::TEXT[])",
            self.table("transcript_lines")
        )
    }

    /// Whether transcript `name` of `agent` is live, read in one statement.
    async fn transcript_exists(&self, client: &Object, agent: &str, name: &str) -> Result<bool> {
        Ok(client
            .query_opt_prepared(
                &format!(
                    "SELECT 1 FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .is_some())
    }

    pub(super) fn rows<'a, C>(&'a self, tx: &'a C) -> PgRows<'a, C> {
        PgRows { store: self, tx }
    }

    /// A read-only transaction seeing one snapshot (the count and the lines agree).
    pub(super) async fn snapshot<'c>(&self, client: &'c mut Object) -> Result<Transaction<'c>> {
        client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("begin a transaction"))
    }

    /// A transaction on `client` holding the lock of transcript `name` of `agent`.
    async fn begin_transcript<'c>(
        &self,
        client: &'c mut Object,
        agent: &str,
        name: &str,
    ) -> Result<Transaction<'c>> {
        let tx = client
            .transaction()
            .await
            .map_err(pg_error("begin a transaction"))?;
        self.lock(&tx, &format!("transcript\0{agent}\0{name}"))
            .await?;
        Ok(tx)
    }
}

#[async_trait]
impl TranscriptStore for PostgresStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let line = header_line(header);
        let mut client = self.client().await?;
        // A transcript that exists stays (only an archive or a removal, which rename or
        // delete it, end it): seen without a lock or a transaction, it is not created.
        if self.transcript_exists(&client, &agent, &name).await? {
            return Ok(false);
        }
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let created = rows::create(&mut self.rows(&txn), &agent, &name, &[line]).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(created)
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let (parent_agent, parent_name) = (parent.agent.to_string(), parent.file_name()?);
        let (agent, child_name) = (child.agent.to_string(), child.file_name()?);
        let mut client = self.client().await?;
        let txn = self
            .begin_transcript(&mut client, &agent, &child_name)
            .await?;
        let created = rows::fork(
            &mut self.rows(&txn),
            (&parent_agent, &parent_name),
            (&agent, &child_name),
            header,
        )
        .await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(created)
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        crate::ops::telemetry::append(BACKEND, transcript, async move {
            let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
            let appended = async {
                // With the tail this handle wrote last, one round trip; when another
                // writer moved it since, nothing is written and the tail is read.
                if let Some(tail) = self.tails.get(&agent, &name) {
                    let open = OpenTransaction(Some(self.client().await?));
                    let result = self
                        .append_after(
                            open.client(),
                            transcript,
                            (&agent, &name),
                            tail,
                            entries.clone(),
                        )
                        .await;
                    if let Some(appended) = open.end_pipelined(result).await? {
                        return Ok(appended);
                    }
                }
                let open = OpenTransaction(Some(self.client().await?));
                let result = self
                    .append_in(open.client(), transcript, (&agent, &name), entries)
                    .await;
                open.end_pipelined(result).await
            }
            .await;
            let (events, tail) = match appended {
                Ok(appended) => appended,
                Err(error) => {
                    self.tails.forget(&agent, &name);
                    return Err(error);
                }
            };
            self.tails.remember(agent, name, tail);
            self.hub.publish(TranscriptUpdate {
                transcript: transcript.clone(),
                path: None,
                events: events.clone(),
                session_key: None,
                message: None,
            });
            Ok(events)
        })
        .await
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let client = self.client().await?;
        // One statement, so one snapshot: the count and the lines agree.
        let rows = client
            .query_prepared(
                &format!(
                    "SELECT t.line_count, l.seq, l.line FROM {} t
                     LEFT JOIN {} l ON l.agent_id = t.agent_id AND l.name = t.name
                         AND l.seq >= $3 AND l.seq < t.line_count
                     WHERE t.agent_id = $1 AND t.name = $2 ORDER BY l.seq",
                    self.table("transcripts"),
                    self.table("transcript_lines")
                ),
                &[&agent, &name, &(from.0 as i64)],
            )
            .await
            .map_err(pg_error("read a transcript"))?;
        let Some(first) = rows.first() else {
            return Ok(rows::nothing_at(from));
        };
        let mut read = rows::read_from(first.get(0), from, &self.location, &name)?;
        for row in &rows {
            if let Some(seq) = row.get::<_, Option<i64>>(1) {
                let line: &str = row.get(2);
                read_line(
                    &mut read,
                    seq as usize + 1,
                    Offset(seq as u64),
                    line.as_bytes(),
                );
            }
        }
        Ok(read)
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let tx = self.snapshot(&mut client).await?;
        rows::read(
            &mut self.rows(&tx),
            (&agent, &name),
            from,
            &self.location,
            Some(max_bytes),
        )
        .await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let tx = self.snapshot(&mut client).await?;
        rows::read_back(
            &mut self.rows(&tx),
            (&agent, &name),
            before,
            &self.location,
            max_bytes,
        )
        .await
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let tx = self.snapshot(&mut client).await?;
        rows::last_compaction(&mut self.rows(&tx), (&agent, &name)).await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let archived = rows::archive(&mut self.rows(&txn), (&agent, &name), reason, at).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(archived)
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let tx = &txn;
        tx.execute(
            &format!(
                "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                self.table("transcript_lines")
            ),
            &[&agent, &name],
        )
        .await
        .map_err(pg_error("remove a transcript"))?;
        let removed = tx
            .execute(
                &format!(
                    "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("remove a transcript"))?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(removed > 0)
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let clause = sql::log_filter(query, &|n| format!("${n}"));
        let statement = format!(
            "SELECT l.agent_id, t.session_id, l.seq, l.line
             FROM {} l JOIN {} t ON t.agent_id = l.agent_id AND t.name = l.name
             {} ORDER BY l.log_at, t.session_id COLLATE \"C\", l.seq{}",
            self.table("transcript_lines"),
            self.table("transcripts"),
            clause.sql,
            sql::Where::limit(query.limit)
        );
        let values = params(&clause.values);
        let client = self.client().await?;
        let rows = client
            .query(&statement, &refs(&values))
            .await
            .map_err(pg_error("query the message log"))?;
        Ok(log_records(
            rows.iter()
                .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
                .collect(),
        ))
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        let tx = self.snapshot(&mut client).await?;
        let archived = rows::archived(&mut self.rows(&tx), &agent, &name).await?;
        Ok(archived.map(|name| TranscriptRef {
            session_file: Some(name),
            ..transcript.clone()
        }))
    }

    fn subscribe(&self) -> TranscriptSubscription {
        let subscription = self.hub.subscribe();
        self.start_listening();
        subscription
    }

    /// Other processes' appends are announced, so a follower looks again on its own
    /// only in case a notification was lost with the listening connection.
    fn follow_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

#[async_trait]
impl TranscriptExport for PostgresStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        let client = self.client().await?;
        let agent = agent.map(ToString::to_string);
        let rows = client
            .query(
                &format!(
                    "SELECT agent_id, name FROM {} WHERE $1::TEXT IS NULL OR agent_id = $1
                     ORDER BY agent_id COLLATE \"C\", name COLLATE \"C\"",
                    self.table("transcripts")
                ),
                &[&agent],
            )
            .await
            .map_err(pg_error("list transcripts"))?;
        rows.iter()
            .map(|row| Ok((AgentId::new(row.get::<_, &str>(0))?, row.get(1))))
            .collect()
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let tx = self.snapshot(&mut client).await?;
        rows::export(&mut self.rows(&tx), (&agent, &name)).await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let created = rows::create(&mut self.rows(&txn), &agent, &name, &lines).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(created)
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<crate::transcript::LineEdit>,
    ) -> Result<usize> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let sql = format!(
            "UPDATE {} SET line = $5, log_at = $6, person_id = $7, agent_identity = $8,
                 session_key = $9
             WHERE agent_id = $1 AND name = $2 AND seq = $3 AND line = $4",
            self.table("transcript_lines")
        );
        let mut done = 0;
        for edit in &edits {
            let log = crate::store::sql::LogColumns::of_line(&edit.new);
            done += txn
                .execute(
                    &sql,
                    &[
                        &agent,
                        &name,
                        &(edit.index as i64),
                        &edit.old,
                        &edit.new,
                        &log.as_ref().map(|l| l.at),
                        &log.as_ref().and_then(|l| l.person_id.clone()),
                        &log.as_ref().and_then(|l| l.agent_identity.clone()),
                        &log.as_ref().and_then(|l| l.session_key.clone()),
                    ],
                )
                .await
                .map_err(pg_error("overwrite a transcript line"))?;
        }
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(usize::try_from(done).unwrap_or(usize::MAX))
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        txn.execute(
            &format!(
                "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                self.table("transcript_lines")
            ),
            &[&agent, &name],
        )
        .await
        .map_err(pg_error("remove a transcript"))?;
        let removed = txn
            .execute(
                &format!(
                    "DELETE FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("remove a transcript"))?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(removed > 0)
    }
}

impl PostgresStore {
    /// Appends `entries` to transcript `name` of `agent` on `c`, in two round trips:
    /// `BEGIN`, its lock and its tail together; then the lines, the new tail, the notice
    /// and `COMMIT` together. An error before that is returned as it is, the
    /// transaction still open.
    async fn append_in(
        &self,
        c: &Object,
        transcript: &TranscriptRef,
        (agent, name): (&str, &str),
        entries: Vec<TranscriptEntry>,
    ) -> Result<Committed<(Vec<SessionEvent>, Tail)>> {
        let statements = [
            "SELECT pg_advisory_xact_lock($1)".to_owned(),
            format!(
                "SELECT line_count, leaf FROM {} WHERE agent_id = $1 AND name = $2",
                self.table("transcripts")
            ),
            self.insert_lines_sql(),
            format!(
                "UPDATE {} SET line_count = $3, leaf = $4 WHERE agent_id = $1 AND name = $2",
                self.table("transcripts")
            ),
            "SELECT pg_notify($1, $2)".to_owned(),
        ];
        let prepared = tokio::try_join!(
            c.prepare_cached(&statements[0]),
            c.prepare_cached(&statements[1]),
            c.prepare_cached(&statements[2]),
            c.prepare_cached(&statements[3]),
            c.prepare_cached(&statements[4]),
        )
        .map_err(pg_error("append to a transcript"));
        let (lock, read, insert, set_tail, notify) = prepared?;
        let lock_id = lock_id(&format!("{}\0transcript\0{agent}\0{name}", self.schema));
        let (lock_params, read_params): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
            (&[&lock_id], &[&agent, &name]);
        let (begun, locked, tail) = tokio::join!(
            biased;
            c.batch_execute("BEGIN"),
            c.execute(&lock, lock_params),
            c.query_opt(&read, read_params),
        );
        begun.map_err(pg_error("begin a transaction"))?;
        locked.map_err(pg_error("lock a row"))?;
        let tail = match tail.map_err(pg_error("read a transcript"))? {
            Some(row) => (row.get(0), row.get(1)),
            // A new transcript: created with its header first, in this transaction.
            None => {
                rows::tail_or_create(&mut self.rows(c), (agent, name), &transcript.session_id)
                    .await?
            }
        };
        let appended = rows::Appended::new(tail, &self.location, entries)?;
        let columns = LineColumns::of(appended.first, &appended.lines);
        let notice = AppendNotice::of(&self.writer, transcript, name, &appended.events)
            .map(|notice| serde_json::to_string(&notice).expect("a notice serialises"));
        let channel = channel(&self.schema);
        let line_count = appended.line_count();
        let insert_params: &[&(dyn ToSql + Sync)] = &[
            &agent,
            &name,
            &columns.seq,
            &appended.lines,
            &columns.log_at,
            &columns.person_id,
            &columns.agent_identity,
            &columns.session_key,
        ];
        let tail_params: &[&(dyn ToSql + Sync)] = &[&agent, &name, &line_count, &appended.leaf];
        let (inserted, tailed, announced, committed) = tokio::join!(
            biased;
            c.execute(&insert, insert_params),
            c.execute(&set_tail, tail_params),
            async {
                match &notice {
                    Some(payload) => c.execute(&notify, &[&channel, payload]).await.map(|_| ()),
                    None => Ok(()),
                }
            },
            c.batch_execute("COMMIT"),
        );
        let written = inserted
            .and(tailed)
            .map_err(pg_error("append to a transcript"))
            .and(announced.map_err(pg_error("announce an append")));
        Ok(Committed {
            committed: committed.map_err(pg_error("commit")),
            result: written.map(|_| {
                appended.count_bytes();
                (appended.events, (line_count, appended.leaf))
            }),
        })
    }

    /// [`append_in`](Self::append_in) after `tail`, the transcript's line count and
    /// leaf as this handle last wrote them, in one round trip: the tail moves, the
    /// lines are inserted and the append announced only where it is still `tail` (the
    /// transaction holds the transcript's lock); `None`, with nothing written, where
    /// another writer moved it.
    async fn append_after(
        &self,
        c: &Object,
        transcript: &TranscriptRef,
        (agent, name): (&str, &str),
        tail: Tail,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Committed<Option<(Vec<SessionEvent>, Tail)>>> {
        let (transcripts, lines) = (self.table("transcripts"), self.table("transcript_lines"));
        let appended = rows::Appended::new(tail.clone(), &self.location, entries)?;
        let notice = AppendNotice::of(&self.writer, transcript, name, &appended.events)
            .map(|notice| serde_json::to_string(&notice).expect("a notice serialises"));
        // One statement: the tail moves where it is still `tail`, the lines go in and
        // the notice out only where it moved (a row for each).
        let announce = match notice {
            Some(_) => "pg_notify($13, $14)",
            None => "1",
        };
        let statements = [
            "SELECT pg_advisory_xact_lock($1)".to_owned(),
            format!(
                "WITH tail AS (
                     UPDATE {transcripts} SET line_count = $9, leaf = $10
                      WHERE agent_id = $1 AND name = $2 AND line_count = $11
                        AND leaf IS NOT DISTINCT FROM $12
                     RETURNING 1),
                 inserted AS (
                     INSERT INTO {lines} (agent_id, name, seq, line, log_at, person_id,
                         agent_identity, session_key)
                     SELECT $1, $2, * FROM UNNEST($3::BIGINT[], $4::TEXT[], $5::BIGINT[],
                         $6::TEXT[], $7::TEXT[], $8::TEXT[])
                      WHERE EXISTS (SELECT 1 FROM tail))
                 SELECT {announce} FROM tail"
            ),
        ];
        let prepared = tokio::try_join!(
            c.prepare_cached(&statements[0]),
            c.prepare_cached(&statements[1]),
        )
        .map_err(pg_error("append to a transcript"));
        let (lock, append) = prepared?;
        let columns = LineColumns::of(appended.first, &appended.lines);
        let channel = channel(&self.schema);
        let line_count = appended.line_count();
        let lock_id = lock_id(&format!("{}\0transcript\0{agent}\0{name}", self.schema));
        let lock_params: &[&(dyn ToSql + Sync)] = &[&lock_id];
        let mut append_params: Vec<&(dyn ToSql + Sync)> = vec![
            &agent,
            &name,
            &columns.seq,
            &appended.lines,
            &columns.log_at,
            &columns.person_id,
            &columns.agent_identity,
            &columns.session_key,
            &line_count,
            &appended.leaf,
            &tail.0,
            &tail.1,
        ];
        if let Some(payload) = &notice {
            append_params.extend([&channel as &(dyn ToSql + Sync), payload]);
        }
        // BEGIN, the lock, the append and COMMIT go out together (a failed statement
        // makes the COMMIT a rollback).
        let (begun, locked, moved, committed) = tokio::join!(
            biased;
            c.batch_execute("BEGIN"),
            c.execute(&lock, lock_params),
            c.execute(&append, &append_params),
            c.batch_execute("COMMIT"),
        );
        let written = begun
            .map_err(pg_error("begin a transaction"))
            .and(locked.map_err(pg_error("lock a row")))
            .and(moved.map_err(pg_error("append to a transcript")));
        Ok(Committed {
            committed: committed.map_err(pg_error("commit")),
            result: written.map(|moved| {
                (moved == 1).then(|| {
                    appended.count_bytes();
                    (appended.events, (line_count, appended.leaf))
                })
            }),
        })
    }
}

/// A transcript's line count and leaf.
type Tail = (i64, Option<String>);

/// The tails of the transcripts a store handle appended to last, so that its next
/// append to one can write without reading the tail first; at most [`KnownTails::MAX`]
/// of them (all are let go past it).
#[derive(Debug, Default)]
pub(super) struct KnownTails(std::sync::Mutex<HashMap<(String, String), Tail>>);

impl KnownTails {
    const MAX: usize = 4096;

    fn get(&self, agent: &str, name: &str) -> Option<Tail> {
        self.lock()
            .get(&(agent.to_owned(), name.to_owned()))
            .cloned()
    }

    fn remember(&self, agent: String, name: String, tail: Tail) {
        let mut tails = self.lock();
        if tails.len() >= Self::MAX {
            tails.clear();
        }
        tails.insert((agent, name), tail);
    }

    fn forget(&self, agent: &str, name: &str) {
        self.lock().remove(&(agent.to_owned(), name.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Tail>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
