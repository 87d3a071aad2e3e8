//! [`SqliteStore`] as a [`TranscriptStore`]: transcripts as rows of lines.

use super::*;
use crate::store::sql_transcripts::{self as rows, now, TranscriptRows};

/// A SQLite connection (in a transaction) as the rows of the transcript tables.
pub(super) struct SqliteRows<'c>(pub(super) &'c Connection);

impl TranscriptRows for SqliteRows<'_> {
    async fn row(&mut self, agent: &str, name: &str) -> Result<Option<(i64, Option<String>)>> {
        self.0
            .query_row(
                "SELECT line_count, leaf FROM transcripts WHERE agent_id = ?1 AND name = ?2",
                [agent, name],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(db_error("read a transcript"))
    }

    async fn insert_row(
        &mut self,
        agent: &str,
        name: &str,
        session_id: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()> {
        self.0
            .execute(
                "INSERT INTO transcripts (agent_id, name, session_id, line_count, leaf)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![agent, name, session_id, line_count, leaf],
            )
            .map_err(db_error("create a transcript"))?;
        Ok(())
    }

    async fn insert_lines(
        &mut self,
        agent: &str,
        name: &str,
        first: i64,
        lines: &[String],
    ) -> Result<()> {
        let mut statement = self
            .0
            .prepare_cached(
                "INSERT INTO transcript_lines (agent_id, name, seq, line, log_at, person_id,
                     agent_identity, session_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(db_error("append to a transcript"))?;
        for (index, line) in lines.iter().enumerate() {
            let log = LogColumns::of_line(line);
            statement
                .execute(params![
                    agent,
                    name,
                    first + index as i64,
                    line,
                    log.as_ref().map(|l| l.at),
                    log.as_ref().and_then(|l| l.person_id.clone()),
                    log.as_ref().and_then(|l| l.agent_identity.clone()),
                    log.as_ref().and_then(|l| l.session_key.clone()),
                ])
                .map_err(db_error("append to a transcript"))?;
        }
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
        // With `max_bytes`, the lines whose sizes before them (in bytes) add up to less
        // than it: the first always. Without, the plain query a turn's read runs.
        // SQLite reads a negative limit as none.
        let limit = limit.unwrap_or(-1);
        let read = |row: &rusqlite::Row<'_>| Ok((row.get(0)?, row.get(1)?));
        let rows = match max_bytes {
            Some(max_bytes) => self
                .0
                .prepare_cached(
                    "SELECT seq, line FROM (
                         SELECT seq, line,
                             SUM(length(CAST(line AS BLOB))) OVER (ORDER BY seq)
                                 - length(CAST(line AS BLOB)) AS before
                         FROM transcript_lines
                         WHERE agent_id = ?1 AND name = ?2 AND seq >= ?3 ORDER BY seq LIMIT ?4)
                     WHERE before < ?5 OR seq = ?3 ORDER BY seq",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map(params![agent, name, from, limit, max_bytes], read)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                }),
            None => self
                .0
                .prepare_cached(
                    "SELECT seq, line FROM transcript_lines
                     WHERE agent_id = ?1 AND name = ?2 AND seq >= ?3 ORDER BY seq LIMIT ?4",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map(params![agent, name, from, limit], read)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                }),
        };
        rows.map_err(db_error("read a transcript"))
    }

    async fn lines_before(
        &mut self,
        agent: &str,
        name: &str,
        before: i64,
        limit: i64,
        compactions: bool,
    ) -> Result<Vec<(i64, String)>> {
        let sql = if compactions {
            "SELECT seq, line FROM transcript_lines INDEXED BY transcript_compactions
             WHERE agent_id = ?1 AND name = ?2 AND seq < ?3 AND instr(line, 'compaction') > 0
             ORDER BY seq DESC LIMIT ?4"
        } else {
            "SELECT seq, line FROM transcript_lines
             WHERE agent_id = ?1 AND name = ?2 AND seq < ?3 ORDER BY seq DESC LIMIT ?4"
        };
        self.0
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement
                    .query_map(params![agent, name, before, limit], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(db_error("read a transcript"))
    }

    async fn set_tail(
        &mut self,
        agent: &str,
        name: &str,
        line_count: i64,
        leaf: Option<String>,
    ) -> Result<()> {
        self.0
            .execute(
                "UPDATE transcripts SET line_count = ?3, leaf = ?4 WHERE agent_id = ?1 AND name = ?2",
                params![agent, name, line_count, leaf],
            )
            .map_err(db_error("append to a transcript"))?;
        Ok(())
    }

    async fn rename(&mut self, agent: &str, from: &str, to: &str) -> Result<()> {
        for table in ["transcripts", "transcript_lines"] {
            self.0
                .execute(
                    &format!("UPDATE {table} SET name = ?3 WHERE agent_id = ?1 AND name = ?2"),
                    params![agent, from, to],
                )
                .map_err(db_error("archive a transcript"))?;
        }
        Ok(())
    }

    async fn archived_as(&mut self, agent: &str, name: &str) -> Result<Option<String>> {
        self.0
            .query_row(
                "SELECT name FROM transcripts
                 WHERE agent_id = ?1 AND substr(name, 1, length(?2) + 1) = ?2 || '.'
                 ORDER BY name DESC LIMIT 1",
                [agent, name],
                |row| row.get(0),
            )
            .optional()
            .map_err(db_error("find an archived transcript"))
    }
}

#[async_trait]
impl TranscriptStore for SqliteStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let line = header_line(header);
        // A transcript that exists stays (only an archive or a removal, which rename or
        // delete it, end it): seen without the write lock, it is not created.
        let (read_agent, read_name) = (agent.clone(), name.clone());
        let exists = self
            .read(move |c| {
                c.prepare_cached("SELECT 1 FROM transcripts WHERE agent_id = ?1 AND name = ?2")
                    .and_then(|mut statement| statement.exists([read_agent, read_name]))
                    .map_err(db_error("read a transcript"))
            })
            .await?;
        if exists {
            return Ok(false);
        }
        self.write(move |tx| now(rows::create(&mut SqliteRows(tx), &agent, &name, &[line])))
            .await
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let (parent_agent, parent_name) = (parent.agent.to_string(), parent.file_name()?);
        let (agent, child_name) = (child.agent.to_string(), child.file_name()?);
        let header = header.clone();
        self.write(move |tx| {
            now(rows::fork(
                &mut SqliteRows(tx),
                (&parent_agent, &parent_name),
                (&agent, &child_name),
                &header,
            ))
        })
        .await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        crate::ops::telemetry::append(BACKEND, transcript, async move {
            let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
            let session_id = transcript.session_id.clone();
            let location = self.inner.path.clone();
            let (writer, announced) = (self.inner.writer.clone(), transcript.clone());
            let events = self
                .write(move |tx| {
                    let events = now(rows::append(
                        &mut SqliteRows(tx),
                        (&agent, &name),
                        &session_id,
                        &location,
                        entries,
                    ))?;
                    feed::announce(tx, &writer, &announced, &name, &events)?;
                    Ok(events)
                })
                .await?;
            self.inner.hub.publish(TranscriptUpdate {
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
        let location = self.inner.path.clone();
        self.read(move |c| {
            now(rows::read(
                &mut SqliteRows(c),
                (&agent, &name),
                from,
                &location,
                None,
            ))
        })
        .await
    }

    async fn read_chunk(
        &self,
        transcript: &TranscriptRef,
        from: Offset,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let location = self.inner.path.clone();
        self.read(move |c| {
            now(rows::read(
                &mut SqliteRows(c),
                (&agent, &name),
                from,
                &location,
                Some(max_bytes),
            ))
        })
        .await
    }

    async fn read_back(
        &self,
        transcript: &TranscriptRef,
        before: Option<Offset>,
        max_bytes: usize,
    ) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let location = self.inner.path.clone();
        self.read(move |c| {
            now(rows::read_back(
                &mut SqliteRows(c),
                (&agent, &name),
                before,
                &location,
                max_bytes,
            ))
        })
        .await
    }

    async fn last_compaction(&self, transcript: &TranscriptRef) -> Result<Option<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        self.read(move |c| now(rows::last_compaction(&mut SqliteRows(c), (&agent, &name))))
            .await
    }

    async fn archive(
        &self,
        transcript: &TranscriptRef,
        reason: ArchiveReason,
        at: DateTime<Utc>,
    ) -> Result<Option<PathBuf>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        self.write(move |tx| {
            now(rows::archive(
                &mut SqliteRows(tx),
                (&agent, &name),
                reason,
                at,
            ))
        })
        .await
    }

    async fn remove(&self, transcript: &TranscriptRef) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM transcript_lines WHERE agent_id = ?1 AND name = ?2",
                [&agent, &name],
            )
            .map_err(db_error("remove a transcript"))?;
            tx.execute(
                "DELETE FROM transcripts WHERE agent_id = ?1 AND name = ?2",
                [&agent, &name],
            )
            .map(|removed| removed > 0)
            .map_err(db_error("remove a transcript"))
        })
        .await
    }

    async fn query_log(&self, query: &LogQuery) -> Result<Vec<LogRecord>> {
        let mut clause = sql::log_filter(query, &|n| format!("?{n}"));
        // One session's records: read from its transcripts' lines (by their key), not
        // from the agent's whole log in time order, which SQLite picks without
        // statistics (`CROSS JOIN` keeps the transcripts first; `+` keeps the log's
        // index out).
        let from = match query.session_id {
            Some(_) => {
                clause.sql = clause
                    .sql
                    .replacen("l.log_at IS NOT NULL", "+l.log_at IS NOT NULL", 1)
                    .replacen("l.agent_id = ", "t.agent_id = ", 1);
                "transcripts t CROSS JOIN transcript_lines l ON t.agent_id = l.agent_id AND t.name = l.name"
            }
            None => "transcript_lines l JOIN transcripts t ON t.agent_id = l.agent_id AND t.name = l.name",
        };
        let statement = format!(
            "SELECT l.agent_id, t.session_id, l.seq, l.line FROM {from}
             {} ORDER BY l.log_at, t.session_id, l.seq{}",
            clause.sql,
            sql::Where::limit(query.limit)
        );
        let rows: Vec<(String, String, i64, String)> = self
            .read(move |c| {
                let mut prepared = c
                    .prepare(&statement)
                    .map_err(db_error("query the message log"))?;
                let rows = prepared
                    .query_map(params_from_iter(clause.values.iter().map(to_sql)), |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })
                    .map_err(db_error("query the message log"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("query the message log"))?;
                Ok(rows)
            })
            .await?;
        Ok(log_records(rows))
    }

    async fn archived(&self, transcript: &TranscriptRef) -> Result<Option<TranscriptRef>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let archived = self
            .read(move |c| now(rows::archived(&mut SqliteRows(c), &agent, &name)))
            .await?;
        Ok(archived.map(|name| TranscriptRef {
            session_file: Some(name),
            ..transcript.clone()
        }))
    }

    fn subscribe(&self) -> TranscriptSubscription {
        let subscription = self.inner.hub.subscribe();
        self.start_feed_reader();
        subscription
    }
}

#[async_trait]
impl TranscriptExport for SqliteStore {
    async fn transcript_names(&self, agent: Option<&AgentId>) -> Result<Vec<(AgentId, String)>> {
        let agent = agent.map(ToString::to_string);
        let rows: Vec<(String, String)> = self
            .read(move |c| {
                let mut statement = c
                    .prepare(
                        "SELECT agent_id, name FROM transcripts
                         WHERE ?1 IS NULL OR agent_id = ?1 ORDER BY agent_id, name",
                    )
                    .map_err(db_error("list transcripts"))?;
                let rows = statement
                    .query_map([agent], |row| Ok((row.get(0)?, row.get(1)?)))
                    .map_err(db_error("list transcripts"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("list transcripts"))?;
                Ok(rows)
            })
            .await?;
        rows.into_iter()
            .map(|(agent, name)| Ok((AgentId::new(&agent)?, name)))
            .collect()
    }

    async fn export_lines(&self, agent: &AgentId, name: &str) -> Result<Option<Vec<String>>> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.read(move |c| now(rows::export(&mut SqliteRows(c), (&agent, &name))))
            .await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.write(move |tx| now(rows::create(&mut SqliteRows(tx), &agent, &name, &lines)))
            .await
    }

    async fn overwrite_lines(
        &self,
        agent: &AgentId,
        name: &str,
        edits: Vec<crate::transcript::LineEdit>,
    ) -> Result<usize> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.write(move |tx| {
            let mut statement = tx
                .prepare_cached(
                    "UPDATE transcript_lines SET line = ?5, log_at = ?6, person_id = ?7,
                         agent_identity = ?8, session_key = ?9
                     WHERE agent_id = ?1 AND name = ?2 AND seq = ?3 AND line = ?4",
                )
                .map_err(db_error("overwrite a transcript line"))?;
            let mut done = 0;
            for edit in &edits {
                let log = LogColumns::of_line(&edit.new);
                done += statement
                    .execute(params![
                        agent,
                        name,
                        edit.index as i64,
                        edit.old,
                        edit.new,
                        log.as_ref().map(|l| l.at),
                        log.as_ref().and_then(|l| l.person_id.clone()),
                        log.as_ref().and_then(|l| l.agent_identity.clone()),
                        log.as_ref().and_then(|l| l.session_key.clone()),
                    ])
                    .map_err(db_error("overwrite a transcript line"))?;
            }
            Ok(done)
        })
        .await
    }

    async fn remove_named(&self, agent: &AgentId, name: &str) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.write(move |tx| {
            tx.execute(
                "DELETE FROM transcript_lines WHERE agent_id = ?1 AND name = ?2",
                [&agent, &name],
            )
            .map_err(db_error("remove a transcript"))?;
            let removed = tx
                .execute(
                    "DELETE FROM transcripts WHERE agent_id = ?1 AND name = ?2",
                    [&agent, &name],
                )
                .map_err(db_error("remove a transcript"))?;
            Ok(removed > 0)
        })
        .await
    }
}
