//! [`SqliteStore`] as a [`TranscriptStore`]: transcripts as rows of lines.

use super::*;

/// A transcript's row: how many lines it has and its last entry's id.
fn transcript_row(
    c: &Connection,
    agent: &str,
    name: &str,
) -> Result<Option<(i64, Option<String>)>> {
    c.query_row(
        "SELECT line_count, leaf FROM transcripts WHERE agent_id = ?1 AND name = ?2",
        [agent, name],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .optional()
    .map_err(db_error("read a transcript"))
}

/// Inserts lines `first..` of a transcript, with their message-log columns.
fn insert_lines(
    c: &Connection,
    agent: &str,
    name: &str,
    first: i64,
    lines: &[String],
) -> Result<()> {
    let mut statement = c
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

/// Creates a transcript of `lines` unless it exists; whether it did.
fn create_transcript(c: &Connection, agent: &str, name: &str, lines: &[String]) -> Result<bool> {
    if transcript_row(c, agent, name)?.is_some() {
        return Ok(false);
    }
    c.execute(
        "INSERT INTO transcripts (agent_id, name, session_id, line_count, leaf)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            agent,
            name,
            session_id_of_name(name),
            lines.len() as i64,
            leaf_of(lines.iter().map(String::as_str))
        ],
    )
    .map_err(db_error("create a transcript"))?;
    insert_lines(c, agent, name, 0, lines)?;
    Ok(true)
}

fn transcript_lines(
    c: &Connection,
    agent: &str,
    name: &str,
    from: i64,
) -> Result<Vec<(i64, String)>> {
    let mut statement = c
        .prepare_cached(
            "SELECT seq, line FROM transcript_lines
             WHERE agent_id = ?1 AND name = ?2 AND seq >= ?3 ORDER BY seq",
        )
        .map_err(db_error("read a transcript"))?;
    let rows = statement
        .query_map(params![agent, name, from], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .map_err(db_error("read a transcript"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db_error("read a transcript"))?;
    Ok(rows)
}

#[async_trait]
impl TranscriptStore for SqliteStore {
    async fn create(&self, transcript: &TranscriptRef, header: &SessionHeader) -> Result<bool> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let line = header_line(header);
        self.write(move |tx| create_transcript(tx, &agent, &name, &[line]))
            .await
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
        self.write(move |tx| {
            if transcript_row(tx, &agent, &child_name)?.is_some() {
                return Ok(false);
            }
            // The parent's entries, verbatim: the same ids, so the fork's context is
            // the parent's.
            let mut lines = vec![header];
            lines.extend(
                transcript_lines(tx, &parent_agent, &parent_name, 1)?
                    .into_iter()
                    .map(|(_, line)| line)
                    .filter(|line| serde_json::from_str::<TranscriptEntry>(line).is_ok()),
            );
            create_transcript(tx, &agent, &child_name, &lines)
        })
        .await
    }

    async fn append(
        &self,
        transcript: &TranscriptRef,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Vec<SessionEvent>> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let session_id = transcript.session_id.clone();
        let location = self.inner.path.clone();
        let events = self
            .write(move |tx| {
                let mut entries = entries;
                let (count, leaf) = match transcript_row(tx, &agent, &name)? {
                    Some(row) => row,
                    None => {
                        let header = header_line(&SessionHeader::new(&session_id, Utc::now()));
                        create_transcript(tx, &agent, &name, &[header])?;
                        (1, None)
                    }
                };
                let (lines, leaf) = stamp_entries(&mut entries, leaf, Utc::now())
                    .map_err(|e| Error::encode(format!("a transcript entry for {}", location.display()), e))?;
                insert_lines(tx, &agent, &name, count, &lines)?;
                tx.execute(
                    "UPDATE transcripts SET line_count = ?3, leaf = ?4 WHERE agent_id = ?1 AND name = ?2",
                    params![agent, name, count + lines.len() as i64, leaf],
                )
                .map_err(db_error("append to a transcript"))?;
                Ok(entries
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
                    .collect::<Vec<_>>())
            })
            .await?;
        self.inner.hub.publish(TranscriptUpdate {
            transcript: transcript.clone(),
            path: None,
            events: events.clone(),
        });
        Ok(events)
    }

    async fn read(&self, transcript: &TranscriptRef, from: Offset) -> Result<TranscriptRead> {
        let (agent, name) = (transcript.agent.to_string(), transcript.file_name()?);
        let location = self.inner.path.clone();
        self.read(move |c| {
            let Some((count, _)) = transcript_row(c, &agent, &name)? else {
                return Ok(TranscriptRead {
                    next: from,
                    ..TranscriptRead::default()
                });
            };
            let count = count as u64;
            if from.0 > count {
                return Err(Error::InvalidOffset {
                    path: location.join(&name),
                    offset: from.0,
                    len: count,
                });
            }
            let mut read = TranscriptRead {
                next: Offset(count),
                ..TranscriptRead::default()
            };
            for (seq, line) in transcript_lines(c, &agent, &name, from.0 as i64)? {
                read_line(
                    &mut read,
                    seq as usize + 1,
                    Offset(seq as u64),
                    line.as_bytes(),
                );
            }
            Ok(read)
        })
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
            if transcript_row(tx, &agent, &name)?.is_none() {
                return Ok(None);
            }
            let base = archived_name(&name, reason, at);
            let mut target = base.clone();
            let mut attempt = 1;
            while transcript_row(tx, &agent, &target)?.is_some() {
                target = format!("{base}-{attempt}");
                attempt += 1;
            }
            for table in ["transcripts", "transcript_lines"] {
                tx.execute(
                    &format!("UPDATE {table} SET name = ?3 WHERE agent_id = ?1 AND name = ?2"),
                    params![agent, name, target],
                )
                .map_err(db_error("archive a transcript"))?;
            }
            Ok(Some(PathBuf::from(target)))
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
        let clause = sql::log_filter(query, &|n| format!("?{n}"));
        let statement = format!(
            "SELECT l.agent_id, t.session_id, l.seq, l.line
             FROM transcript_lines l JOIN transcripts t ON t.agent_id = l.agent_id AND t.name = l.name
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

    fn subscribe(&self) -> TranscriptSubscription {
        self.inner.hub.subscribe()
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
        self.read(move |c| {
            if transcript_row(c, &agent, &name)?.is_none() {
                return Ok(None);
            }
            Ok(Some(
                transcript_lines(c, &agent, &name, 0)?
                    .into_iter()
                    .map(|(_, line)| line)
                    .collect(),
            ))
        })
        .await
    }

    async fn import_lines(&self, agent: &AgentId, name: &str, lines: Vec<String>) -> Result<bool> {
        validate_transcript_name(name)?;
        let (agent, name) = (agent.to_string(), name.to_owned());
        self.write(move |tx| create_transcript(tx, &agent, &name, &lines))
            .await
    }
}
