//! [`SqliteStore`] as a [`SessionStore`]: one transaction per update.

use super::*;

#[async_trait]
impl SessionStore for SqliteStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let raw = key.to_string();
        let row = self.read(move |c| read_row(c, &raw)).await?;
        row.map(|(revision, json)| decode(&self.inner.path, key.as_str(), revision, &json))
            .transpose()
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        crate::ops::telemetry::update(BACKEND, std::slice::from_ref(key), async move {
            let location = self.inner.path.clone();
            // Take the write lock first, then read: no other process can change the row
            // between the read and the write.
            let guard = self.lock().await;
            if tokio::runtime::Handle::current().runtime_flavor()
                == tokio::runtime::RuntimeFlavor::MultiThread
            {
                // The whole transaction on this worker, which tokio replaces meanwhile: one
                // hand-over instead of two trips to the blocking pool.
                let mut connection = guard;
                return tokio::task::block_in_place(|| {
                    let row = begin_update(&mut connection, key)?;
                    let change = change(&location, key, row, mutator);
                    finish_update(&mut connection, key, &change_summary(&change))?;
                    change.map(Change::into_stored)
                });
            }
            let raw = key.clone();
            let (guard, row) = self.run(guard, move |c| begin_update(c, &raw)).await?;
            let change = change(&location, key, row, mutator);
            let (outcome, raw) = (change_summary(&change), key.clone());
            self.run(guard, move |c| finish_update(c, &raw, &outcome))
                .await?;
            change.map(Change::into_stored)
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let clause = sql::session_filter(filter, &|n| format!("?{n}"), "session_key");
        let query = sql::list_query(
            filter,
            &clause,
            "sessions",
            "closed_sessions",
            "session_key",
        );
        let rows: Vec<(String, i64, String)> = self
            .read(move |c| {
                let mut statement = c.prepare(&query).map_err(db_error("list sessions"))?;
                let rows = statement
                    .query_map(params_from_iter(clause.values.iter().map(to_sql)), |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .map_err(db_error("list sessions"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("list sessions"))?;
                Ok(rows)
            })
            .await?;
        Ok(sql::decode_listed(
            &self.inner.path,
            rows.iter()
                .map(|(key, revision, json)| (key.as_str(), *revision, json.as_str())),
        ))
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if !filter.is_everything() {
            return Ok(self.list(filter).await?.len());
        }
        let count: i64 = self
            .read(|c| {
                c.query_row("SELECT COUNT(*) FROM sessions", [], |row| row.get(0))
                    .map_err(db_error("count sessions"))
            })
            .await?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        let rows: Vec<(String, i64, String)> = self
            .read(|c| {
                let mut statement = c
                    .prepare(
                        "SELECT session_key, revision, entry FROM sessions ORDER BY session_key",
                    )
                    .map_err(db_error("read sessions"))?;
                let rows = statement
                    .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                    .map_err(db_error("read sessions"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(db_error("read sessions"));
                rows
            })
            .await?;
        Ok(sql::undecodable(
            &self.inner.path,
            rows.iter().map(|(k, r, j)| (k.as_str(), *r, j.as_str())),
        ))
    }

    fn as_erase(&self) -> Option<&dyn crate::store::Erase> {
        Some(self)
    }
}

#[async_trait]
impl crate::store::Erase for SqliteStore {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        let ids = session_ids.to_vec();
        let guard = self.lock().await;
        let (_guard, removed) = self
            .run(guard, move |c| {
                let mut removed = 0;
                for id in &ids {
                    removed += c
                        .execute("DELETE FROM closed_sessions WHERE session_id = ?1", [id])
                        .map_err(db_error("remove a closed session"))?;
                }
                Ok(removed)
            })
            .await?;
        Ok(removed)
    }
    async fn add_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        let rows = sessions
            .iter()
            .map(|s| {
                let closed_at = s.entry.closed_at.unwrap_or(s.entry.updated_at);
                Ok((
                    crate::store::sql::SessionRow::new(&s.key, &s.entry)?,
                    closed_at,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        self.write(move |tx| {
            let mut added = 0;
            for (row, closed_at) in &rows {
                let held: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1)
                             OR EXISTS (SELECT 1 FROM closed_sessions WHERE session_id = ?1)",
                        [&row.session_id],
                        |r| r.get(0),
                    )
                    .map_err(db_error("read closed sessions"))?;
                if !held {
                    super::write_closed_row(tx, row, crate::store::sql::to_i64(*closed_at))?;
                    added += 1;
                }
            }
            Ok(added)
        })
        .await
    }
    async fn replace_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        let rows = sessions
            .iter()
            .map(|s| crate::store::sql::SessionRow::new(&s.key, &s.entry))
            .collect::<Result<Vec<_>>>()?;
        self.write(move |tx| {
            let mut replaced = 0;
            for row in &rows {
                replaced += tx
                    .execute(
                        "UPDATE closed_sessions SET updated_at = ?2, channel = ?3, chat_type = ?4,
                             person_id = ?5, agent_identity = ?6, status = ?7, revision = ?8,
                             entry = ?9
                         WHERE session_id = ?1",
                        params![
                            row.session_id,
                            row.updated_at,
                            row.channel,
                            row.chat_type,
                            row.person_id,
                            row.agent_identity,
                            row.status,
                            row.revision,
                            row.entry
                        ],
                    )
                    .map_err(db_error("replace a closed session"))?;
            }
            Ok(replaced)
        })
        .await
    }
    async fn erase_copies(&self, needles: &[String], vacuum: bool) -> Result<usize> {
        let needles = needles.to_vec();
        self.read(move |c| {
            let failed = || db_error("erase copies");
            let mut erased = 0;
            // Append notices name transcripts; one naming an erased session goes.
            for needle in needles.iter().filter(|n| !n.is_empty()) {
                erased += c
                    .execute(
                        "DELETE FROM transcript_feed WHERE instr(notice, ?1) > 0",
                        [needle],
                    )
                    .map_err(failed())?;
            }
            // Deleted rows' words leave the full-text segments only when they merge.
            c.execute_batch("INSERT INTO search_text (search_text) VALUES ('optimize');")
                .map_err(failed())?;
            if vacuum {
                c.execute_batch("VACUUM;").map_err(failed())?;
            }
            // Deleted content is zeroed in the pages (`secure_delete`); the write-ahead
            // log still holds the pages as they were until it is checkpointed and reset.
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(failed())?;
            Ok(erased)
        })
        .await
    }
}

#[async_trait]
impl crate::store::MultiKeyStore for SqliteStore {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut crate::store::ManyMutator<'_>,
    ) -> Result<crate::store::Slots> {
        crate::ops::telemetry::update(BACKEND, keys, async move {
            let keys = crate::store::distinct_keys(keys);
            let raw: Vec<String> = keys.iter().map(ToString::to_string).collect();
            // One `BEGIN IMMEDIATE` transaction: the write lock is taken before any row is
            // read, so no other writer can change one of them before the write.
            let guard = self.lock().await;
            let (guard, rows) = self.run(guard, move |c| begin_many(c, &raw)).await?;
            let changed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                sql::change_many(&self.inner.path, keys, rows, mutator)
            }));
            let changed = match changed {
                Ok(changed) => changed,
                Err(panic) => {
                    // Roll back at once: the transaction holds the database's write lock,
                    // which other processes would otherwise wait for until this store's
                    // next call.
                    let _ = self.run(guard, |c| finish_many(c, None)).await;
                    std::panic::resume_unwind(panic);
                }
            };
            let writes = match &changed {
                Ok((_, writes)) if !writes.is_empty() => Some(writes.clone()),
                _ => None,
            };
            self.run(guard, move |c| finish_many(c, writes.as_deref()))
                .await?;
            changed.map(|(slots, _)| slots)
        })
        .await
    }
}

/// Begins the write transaction and reads the rows of `keys`.
fn begin_many(c: &mut Connection, keys: &[String]) -> Result<Vec<Option<(i64, String)>>> {
    abandon_stale_transaction(c);
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(db_error("begin a transaction"))?;
    let rows: Result<Vec<_>> = keys.iter().map(|key| read_row(c, key)).collect();
    if rows.is_err() {
        let _ = c.execute_batch("ROLLBACK");
    }
    rows
}

/// Writes every row and commits, or (with nothing to write, or on a failure) rolls
/// back: all of them or none.
fn finish_many(c: &mut Connection, writes: Option<&[sql::ManyWrite]>) -> Result<()> {
    let Some(writes) = writes else {
        return c.execute_batch("ROLLBACK").map_err(db_error("roll back"));
    };
    let written = writes.iter().try_for_each(|write| {
        if let Some(replaced) = &write.replaced {
            let closed_at = sql::to_i64(replaced.closed_at.unwrap_or(replaced.updated_at));
            write_closed_row(c, &SessionRow::new(&write.key, replaced)?, closed_at)?;
        }
        match &write.row {
            Some(row) => write_row(c, row),
            None => c
                .execute(
                    "DELETE FROM sessions WHERE session_key = ?1",
                    [write.key.as_str()],
                )
                .map(drop)
                .map_err(db_error("delete a session")),
        }
    });
    match written.and_then(|()| c.execute_batch("COMMIT").map_err(db_error("commit"))) {
        Ok(()) => Ok(()),
        Err(error) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

/// What an update does to one row.
struct Change {
    /// The session as it was.
    current: Option<StoredSession>,
    /// The session as the mutator left it, if it changed.
    after: Option<(SessionKey, Option<crate::store::entry::SessionEntry>)>,
    /// The row to write (`None` with a change: delete).
    row: Option<SessionRow>,
    /// The row as it was stored, if there was one.
    before: Option<SessionRow>,
    /// The session the change replaced, kept closed, and when it closed.
    closed: Option<(SessionRow, i64)>,
}

impl Change {
    fn into_stored(self) -> Option<StoredSession> {
        match self.after {
            None => self.current,
            Some((key, entry)) => {
                let revision = self
                    .row
                    .as_ref()
                    .map(|row| sql::revision_from_i64(row.revision));
                entry.zip(revision).map(|(entry, revision)| StoredSession {
                    key,
                    entry,
                    revision,
                })
            }
        }
    }
}

/// Begins the write transaction and reads the row, every column.
fn begin_update(c: &mut Connection, key: &SessionKey) -> Result<Option<SessionRow>> {
    abandon_stale_transaction(c);
    c.execute_batch("BEGIN IMMEDIATE")
        .map_err(db_error("begin a transaction"))?;
    let row = read_whole_row(c, key.as_str());
    if row.is_err() {
        let _ = c.execute_batch("ROLLBACK");
    }
    row
}

/// Runs the mutator on the row read.
fn change(
    location: &Path,
    key: &SessionKey,
    before: Option<SessionRow>,
    mutator: &mut Mutator<'_>,
) -> Result<Change> {
    let current = before
        .as_ref()
        .map(|row| decode(location, key.as_str(), row.revision, &row.entry))
        .transpose()?;
    let slot = run_mutator(
        mutator,
        current.as_ref().map(|s| &s.entry),
        current.as_ref().map(|s| s.revision),
    )?;
    if slot.as_ref() == current.as_ref().map(|s| &s.entry) {
        return Ok(Change {
            current,
            after: None,
            row: None,
            before: None,
            closed: None,
        });
    }
    let row = slot
        .as_ref()
        .map(|entry| SessionRow::new(key, entry))
        .transpose()?;
    let closed = replaced_session(current.as_ref().map(|s| &s.entry), slot.as_ref())
        .map(|entry| {
            let closed_at = sql::to_i64(entry.closed_at.unwrap_or(entry.updated_at));
            SessionRow::new(key, &entry).map(|row| (row, closed_at))
        })
        .transpose()?;
    Ok(Change {
        current,
        after: Some((key.clone(), slot)),
        row,
        before,
        closed,
    })
}

/// What the finishing step needs of a change: write this row, delete, or roll back.
enum Finish {
    /// Write the row (over the row as it was stored, if any), and keep the replaced
    /// session closed.
    Write {
        row: Box<SessionRow>,
        before: Option<Box<SessionRow>>,
        closed: Option<Box<(SessionRow, i64)>>,
    },
    Delete,
    RollBack,
}

fn change_summary(change: &Result<Change>) -> Finish {
    match change {
        Ok(Change {
            after: Some(_),
            row: Some(row),
            before,
            closed,
            ..
        }) => Finish::Write {
            row: Box::new(row.clone()),
            before: before.clone().map(Box::new),
            closed: closed.clone().map(Box::new),
        },
        Ok(Change { after: Some(_), .. }) => Finish::Delete,
        _ => Finish::RollBack,
    }
}

/// Writes (and commits) or rolls back.
fn finish_update(c: &mut Connection, key: &SessionKey, finish: &Finish) -> Result<()> {
    let written = match finish {
        Finish::RollBack => {
            return c.execute_batch("ROLLBACK").map_err(db_error("roll back"));
        }
        Finish::Write {
            row,
            before,
            closed,
        } => match before {
            Some(before) => update_row(c, row, before),
            None => write_row(c, row),
        }
        .and_then(|()| match closed {
            Some(closed) => write_closed_row(c, &closed.0, closed.1),
            None => Ok(()),
        }),
        Finish::Delete => c
            .execute(
                "DELETE FROM sessions WHERE session_key = ?1",
                [key.as_str()],
            )
            .map(drop)
            .map_err(db_error("delete a session")),
    };
    match written {
        Ok(()) => c.execute_batch("COMMIT").map_err(db_error("commit")),
        Err(error) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(error)
        }
    }
}

// ---------------------------------------------------------------------------------
// Transcripts
