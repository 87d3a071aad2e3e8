//! [`PostgresStore`] as a [`TranscriptStore`]: transcripts as rows of lines.

use super::*;

impl PostgresStore {
    async fn transcript_row(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
    ) -> Result<Option<(i64, Option<String>)>> {
        Ok(tx
            .query_opt(
                &format!(
                    "SELECT line_count, leaf FROM {} WHERE agent_id = $1 AND name = $2",
                    self.table("transcripts")
                ),
                &[&agent, &name],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .map(|row| (row.get(0), row.get(1))))
    }

    async fn insert_lines(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        first: i64,
        lines: &[String],
    ) -> Result<()> {
        let statement = tx
            .prepare(&format!(
                "INSERT INTO {} (agent_id, name, seq, line, log_at, person_id, agent_identity,
                     session_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                self.table("transcript_lines")
            ))
            .await
            .map_err(pg_error("append to a transcript"))?;
        for (index, line) in lines.iter().enumerate() {
            let log = LogColumns::of_line(line);
            tx.execute(
                &statement,
                &[
                    &agent,
                    &name,
                    &(first + index as i64),
                    line,
                    &log.as_ref().map(|l| l.at),
                    &log.as_ref().and_then(|l| l.person_id.clone()),
                    &log.as_ref().and_then(|l| l.agent_identity.clone()),
                    &log.as_ref().and_then(|l| l.session_key.clone()),
                ],
            )
            .await
            .map_err(pg_error("append to a transcript"))?;
        }
        Ok(())
    }

    /// Creates a transcript of `lines` unless it exists (the caller holds its lock).
    async fn create_transcript(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        lines: &[String],
    ) -> Result<bool> {
        if self.transcript_row(tx, agent, name).await?.is_some() {
            return Ok(false);
        }
        tx.execute(
            &format!(
                "INSERT INTO {} (agent_id, name, session_id, line_count, leaf)
                 VALUES ($1, $2, $3, $4, $5)",
                self.table("transcripts")
            ),
            &[
                &agent,
                &name,
                &session_id_of_name(name),
                &(lines.len() as i64),
                &leaf_of(lines.iter().map(String::as_str)),
            ],
        )
        .await
        .map_err(pg_error("create a transcript"))?;
        self.insert_lines(tx, agent, name, 0, lines).await?;
        Ok(true)
    }

    async fn lines_from(
        &self,
        tx: &Transaction<'_>,
        agent: &str,
        name: &str,
        from: i64,
    ) -> Result<Vec<(i64, String)>> {
        Ok(tx
            .query(
                &format!(
                    "SELECT seq, line FROM {} WHERE agent_id = $1 AND name = $2 AND seq >= $3
                     ORDER BY seq",
                    self.table("transcript_lines")
                ),
                &[&agent, &name, &from],
            )
            .await
            .map_err(pg_error("read a transcript"))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
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
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let value = self.create_transcript(&txn, &agent, &name, &[line]).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
    }

    async fn fork(
        &self,
        parent: &TranscriptRef,
        child: &TranscriptRef,
        header: &SessionHeader,
    ) -> Result<bool> {
        let agent = child.agent.to_string();
        let (parent_agent, parent_name) = (parent.agent.to_string(), parent.file_name()?);
        let child_name = child.file_name()?;
        let mut header = header.clone();
        if header.parent_session.is_none() {
            header.parent_session = Some(parent_name.clone());
        }
        let header = header_line(&header);
        let mut client = self.client().await?;
        let txn = self
            .begin_transcript(&mut client, &agent, &child_name)
            .await?;
        let tx = &txn;
        if self
            .transcript_row(tx, &agent, &child_name)
            .await?
            .is_some()
        {
            return Ok(false);
        }
        let mut lines = vec![header];
        lines.extend(
            self.lines_from(tx, &parent_agent, &parent_name, 1)
                .await?
                .into_iter()
                .map(|(_, line)| line)
                .filter(|line| serde_json::from_str::<TranscriptEntry>(line).is_ok()),
        );
        let value = self
            .create_transcript(tx, &agent, &child_name, &lines)
            .await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let session_id = transcript.session_id.clone();
        let location = self.location.clone();
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let tx = &txn;
        let mut entries = entries;
        let (count, leaf) = match self.transcript_row(tx, &agent, &name).await? {
            Some(row) => row,
            None => {
                let header = header_line(&SessionHeader::new(&session_id, Utc::now()));
                self.create_transcript(tx, &agent, &name, &[header]).await?;
                (1, None)
            }
        };
        let (lines, leaf) = stamp_entries(&mut entries, leaf, Utc::now()).map_err(|e| {
            Error::encode(format!("a transcript entry for {}", location.display()), e)
        })?;
        self.insert_lines(tx, &agent, &name, count, &lines).await?;
        tx.execute(
            &format!(
                "UPDATE {} SET line_count = $3, leaf = $4
                     WHERE agent_id = $1 AND name = $2",
                self.table("transcripts")
            ),
            &[&agent, &name, &(count + lines.len() as i64), &leaf],
        )
        .await
        .map_err(pg_error("append to a transcript"))?;
        let events: Vec<SessionEvent> = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| {
                let seq = count + index as i64;
                SessionEvent {
                    offset: Offset(seq as u64),
                    line: seq as usize + 1,
                    entry,
                }
            })
            .collect();
        txn.commit().await.map_err(pg_error("commit"))?;
        self.hub.publish(TranscriptUpdate {
            transcript: transcript.clone(),
            path: None,
            events: events.clone(),
        });
        Ok(events)
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let mut client = self.client().await?;
        // One snapshot for the count and the lines.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("begin a transaction"))?;
        let Some((count, _)) = self.transcript_row(&tx, &agent, &name).await? else {
            return Ok(TranscriptRead {
                next: from,
                ..TranscriptRead::default()
            });
        };
        let count = count as u64;
        if from.0 > count {
            return Err(Error::InvalidOffset {
                path: self.location.join(&name),
                offset: from.0,
                len: count,
            });
        }
        let mut read = TranscriptRead {
            next: Offset(count),
            ..TranscriptRead::default()
        };
        for (seq, line) in self.lines_from(&tx, &agent, &name, from.0 as i64).await? {
            read_line(
                &mut read,
                seq as usize + 1,
                Offset(seq as u64),
                line.as_bytes(),
            );
        }
        Ok(read)
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
        let tx = &txn;
        if self.transcript_row(tx, &agent, &name).await?.is_none() {
            return Ok(None);
        }
        let base = archived_name(&name, reason, at);
        let mut target = base.clone();
        let mut attempt = 1;
        while self.transcript_row(tx, &agent, &target).await?.is_some() {
            target = format!("{base}-{attempt}");
            attempt += 1;
        }
        for table in ["transcripts", "transcript_lines"] {
            tx.execute(
                &format!(
                    "UPDATE {} SET name = $3 WHERE agent_id = $1 AND name = $2",
                    self.table(table)
                ),
                &[&agent, &name, &target],
            )
            .await
            .map_err(pg_error("archive a transcript"))?;
        }
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(Some(PathBuf::from(target)))
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

    fn subscribe(&self) -> TranscriptSubscription {
        self.hub.subscribe()
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
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_error("begin a transaction"))?;
        if self.transcript_row(&tx, &agent, &name).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            self.lines_from(&tx, &agent, &name, 0)
                .await?
                .into_iter()
                .map(|(_, line)| line)
                .collect(),
        ))
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        let mut client = self.client().await?;
        let txn = self.begin_transcript(&mut client, &agent, &name).await?;
        let value = self.create_transcript(&txn, &agent, &name, &lines).await?;
        txn.commit().await.map_err(pg_error("commit"))?;
        Ok(value)
    }
}
