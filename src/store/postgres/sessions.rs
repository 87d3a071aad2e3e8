//! [`PostgresStore`] as a [`SessionStore`]: the key's advisory lock, one transaction
//! per update.

use super::*;

/// How keys are ordered in a listing: byte by byte, as the other stores order them.
const KEY_ORDER: &str = "session_key COLLATE \"C\"";

#[async_trait]
impl SessionStore for PostgresStore {
    async fn get(&self, key: &SessionKey) -> Result<Option<StoredSession>> {
        let client = self.client().await?;
        let row = client
            .query_opt_prepared(
                &format!(
                    "SELECT revision, entry FROM {} WHERE session_key = $1",
                    self.table("sessions")
                ),
                &[&key.as_str()],
            )
            .await
            .map_err(pg_error("read a session"))?;
        row.map(|row| decode(&self.location, key.as_str(), row.get(0), row.get(1)))
            .transpose()
    }

    async fn apply(
        &self,
        key: &SessionKey,
        mutator: &mut Mutator<'_>,
    ) -> Result<Option<StoredSession>> {
        crate::ops::telemetry::update(BACKEND, std::slice::from_ref(key), async move {
            let started = std::time::Instant::now();
            let client = self.client().await?;
            let lock = client
                .prepare_cached("SELECT pg_advisory_xact_lock($1)")
                .await
                .map_err(pg_error("lock a row"))?;
            let read = client
                .prepare_cached(&format!(
                    "SELECT revision, entry FROM {} WHERE session_key = $1",
                    self.table("sessions")
                ))
                .await
                .map_err(pg_error("read a session"))?;
            // Serialise updates of this key across every host, also while it does not
            // exist yet (a row lock needs a row). BEGIN, the lock and the read go out
            // together; the server runs the read once the lock is granted.
            let lock_id = lock_id(&format!("{}\0{}", self.schema, key.as_str()));
            let raw_key = key.as_str();
            let (lock_params, read_params): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
                (&[&lock_id], &[&raw_key]);
            let open = OpenTransaction(Some(client));
            let c = open.client();
            let (begun, locked, row) = tokio::join!(
                c.batch_execute("BEGIN"),
                c.execute(&lock, lock_params),
                c.query_opt(&read, read_params)
            );
            crate::ops::telemetry::lock_taken(BACKEND, started.elapsed());
            let current = match (begun, locked, row) {
                (Ok(()), Ok(_), Ok(row)) => row
                    .map(|row| decode(&self.location, key.as_str(), row.get(0), row.get(1)))
                    .transpose(),
                (Err(e), _, _) => return Err(pg_error("begin a transaction")(e)),
                (_, Err(e), _) => Err(pg_error("lock a row")(e)),
                (_, _, Err(e)) => Err(pg_error("read a session")(e)),
            };
            let current = match current {
                Ok(current) => current,
                Err(error) => return Err(open.abandon(error).await),
            };
            let slot = match run_mutator(
                mutator,
                current.as_ref().map(|s| &s.entry),
                current.as_ref().map(|s| s.revision),
            ) {
                Ok(slot) => slot,
                Err(error) => return Err(open.abandon(error).await),
            };
            if slot.as_ref() == current.as_ref().map(|s| &s.entry) {
                return match open.client().batch_execute("COMMIT").await {
                    Ok(()) => {
                        open.finish();
                        Ok(current)
                    }
                    Err(e) => Err(pg_error("commit")(e)),
                };
            }
            if let Some(closed) =
                replaced_session(current.as_ref().map(|s| &s.entry), slot.as_ref())
            {
                if let Err(error) = self.keep_closed(open.client(), key, &closed).await {
                    return Err(open.abandon(error).await);
                }
            }
            let (statement, row) = match &slot {
                Some(entry) => match SessionRow::new(key, entry) {
                    Ok(row) => (self.write_statement(current.is_some()), Some(row)),
                    Err(error) => return Err(open.abandon(error).await),
                },
                None => (
                    format!(
                        "DELETE FROM {} WHERE session_key = $1",
                        self.table("sessions")
                    ),
                    None,
                ),
            };
            let prepared = match open.client().prepare_cached(&statement).await {
                Ok(prepared) => prepared,
                Err(e) => return Err(open.abandon(pg_error("write a session")(e)).await),
            };
            let key_param: [&(dyn ToSql + Sync); 1] = [&raw_key];
            let values: &[&(dyn ToSql + Sync)] = match &row {
                Some(row) => &row_params(row),
                None => &key_param,
            };
            // The write and COMMIT go out together: if the write fails, COMMIT ends the
            // failed transaction as a rollback.
            let c = open.client();
            let (written, committed) =
                tokio::join!(c.execute(&prepared, values), c.batch_execute("COMMIT"));
            // Once COMMIT was answered the transaction is over either way.
            committed.map_err(pg_error("commit"))?;
            open.finish();
            written.map_err(pg_error("write a session"))?;
            Ok(slot.zip(row).map(|(entry, row)| StoredSession {
                key: key.clone(),
                entry,
                revision: sql::revision_from_i64(row.revision),
            }))
        })
        .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<StoredSession>> {
        let clause = sql::session_filter(filter, &|n| format!("${n}"), KEY_ORDER);
        let statement = sql::list_query(
            filter,
            &clause,
            &self.table("sessions"),
            &self.table("closed_sessions"),
            KEY_ORDER,
        );
        let values = params(&clause.values);
        let client = self.client().await?;
        let rows = client
            .query(&statement, &refs(&values))
            .await
            .map_err(pg_error("list sessions"))?;
        Ok(sql::decode_listed(
            &self.location,
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))),
        ))
    }

    async fn count(&self, filter: &ListFilter) -> Result<usize> {
        if !filter.is_everything() {
            return Ok(self.list(filter).await?.len());
        }
        let client = self.client().await?;
        let count: i64 = client
            .query_one(
                &format!("SELECT COUNT(*) FROM {}", self.table("sessions")),
                &[],
            )
            .await
            .map_err(pg_error("count sessions"))?
            .get(0);
        Ok(usize::try_from(count).unwrap_or(0))
    }

    async fn unreadable(&self) -> Result<Vec<crate::store::UnreadableEntry>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT session_key, revision, entry FROM {} ORDER BY session_key",
                    self.table("sessions")
                ),
                &[],
            )
            .await
            .map_err(pg_error("read sessions"))?;
        Ok(sql::undecodable(
            &self.location,
            rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))),
        ))
    }

    fn as_erase(&self) -> Option<&dyn crate::store::Erase> {
        Some(self)
    }
}

#[async_trait]
impl crate::store::Erase for PostgresStore {
    async fn remove_closed(&self, session_ids: &[String]) -> Result<usize> {
        let client = self.client().await?;
        let removed = client
            .execute(
                &format!(
                    "DELETE FROM {} WHERE session_id = ANY($1)",
                    self.table("closed_sessions")
                ),
                &[&session_ids],
            )
            .await
            .map_err(pg_error("remove closed sessions"))?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
    async fn add_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        let client = self.client().await?;
        let (table, current) = (self.table("closed_sessions"), self.table("sessions"));
        let insert = format!(
            "INSERT INTO {table} (session_id, session_key, agent_id, updated_at, channel,
                 chat_type, person_id, agent_identity, status, revision, entry, closed_at)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12
             WHERE NOT EXISTS (SELECT 1 FROM {current} WHERE session_id = $1)
             ON CONFLICT (session_id) DO NOTHING"
        );
        let mut added = 0;
        for session in sessions {
            let row = SessionRow::new(&session.key, &session.entry)?;
            let closed_at =
                sql::to_i64(session.entry.closed_at.unwrap_or(session.entry.updated_at));
            added += client
                .execute(
                    &insert,
                    &[
                        &row.session_id,
                        &row.session_key,
                        &row.agent_id,
                        &row.updated_at,
                        &row.channel,
                        &row.chat_type,
                        &row.person_id,
                        &row.agent_identity,
                        &row.status,
                        &row.revision,
                        &row.entry,
                        &closed_at,
                    ],
                )
                .await
                .map_err(pg_error("add a closed session"))?;
            client
                .execute(&sql::trim_closed_sql(&table, "$1"), &[&row.session_key])
                .await
                .map_err(pg_error("add a closed session"))?;
        }
        Ok(usize::try_from(added).unwrap_or(usize::MAX))
    }
    async fn replace_closed(&self, sessions: &[crate::store::StoredSession]) -> Result<usize> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE {} SET updated_at = $2, channel = $3, chat_type = $4, person_id = $5,
                 agent_identity = $6, status = $7, revision = $8, entry = $9
             WHERE session_id = $1",
            self.table("closed_sessions")
        );
        let mut replaced = 0;
        for session in sessions {
            let row = crate::store::sql::SessionRow::new(&session.key, &session.entry)?;
            replaced += client
                .execute(
                    &sql,
                    &[
                        &row.session_id,
                        &row.updated_at,
                        &row.channel,
                        &row.chat_type,
                        &row.person_id,
                        &row.agent_identity,
                        &row.status,
                        &row.revision,
                        &row.entry,
                    ],
                )
                .await
                .map_err(pg_error("replace a closed session"))?;
        }
        Ok(usize::try_from(replaced).unwrap_or(usize::MAX))
    }
    async fn erase_copies(&self, _needles: &[String], vacuum: bool) -> Result<usize> {
        if !vacuum {
            return Ok(0);
        }
        // Deleted and updated rows stay in the table files as dead row versions until
        // a vacuum; `VACUUM FULL` rewrites each table without them (holding its lock
        // while it runs).
        let client = self.client().await?;
        let tables = [
            "sessions",
            "closed_sessions",
            "transcripts",
            "transcript_lines",
            "search_messages",
            "search_postings",
            "search_postings_state",
            "search_vector_blocks",
            "group_history",
            "group_history_seen",
            "system_events",
        ];
        for table in tables {
            client
                .batch_execute(&format!("VACUUM FULL {}", self.table(table)))
                .await
                .map_err(pg_error("vacuum"))?;
        }
        Ok(tables.len())
    }
}

#[async_trait]
impl crate::store::MultiKeyStore for PostgresStore {
    async fn apply_many(
        &self,
        keys: &[SessionKey],
        mutator: &mut crate::store::ManyMutator<'_>,
    ) -> Result<crate::store::Slots> {
        crate::ops::telemetry::update(BACKEND, keys, async move {
            let started = std::time::Instant::now();
            let keys = crate::store::distinct_keys(keys);
            let raw: Vec<String> = keys.iter().map(ToString::to_string).collect();
            let open = OpenTransaction(Some(self.client().await?));
            if let Err(e) = open.client().batch_execute("BEGIN").await {
                return Err(pg_error("begin a transaction")(e));
            }
            // Each key's advisory lock (as `apply` takes it), in one fixed order: two
            // calls over overlapping keys wait for each other instead of deadlocking.
            let mut locks: Vec<i64> = raw
                .iter()
                .map(|key| lock_id(&format!("{}\0{key}", self.schema)))
                .collect();
            locks.sort_unstable();
            locks.dedup();
            for lock in &locks {
                if let Err(e) = open
                    .client()
                    .execute("SELECT pg_advisory_xact_lock($1)", &[lock])
                    .await
                {
                    return Err(open.abandon(pg_error("lock a row")(e)).await);
                }
            }
            crate::ops::telemetry::lock_taken(BACKEND, started.elapsed());
            let read = open
                .client()
                .query(
                    &format!(
                        "SELECT session_key, revision, entry FROM {} WHERE session_key = ANY($1)",
                        self.table("sessions")
                    ),
                    &[&raw],
                )
                .await;
            let mut found: std::collections::HashMap<String, (i64, String)> = match read {
                Ok(rows) => rows
                    .iter()
                    .map(|row| (row.get(0), (row.get(1), row.get(2))))
                    .collect(),
                Err(e) => return Err(open.abandon(pg_error("read a session")(e)).await),
            };
            let existing: std::collections::HashSet<String> = found.keys().cloned().collect();
            let rows = raw.iter().map(|key| found.remove(key)).collect();
            let (slots, writes) = match sql::change_many(&self.location, keys, rows, mutator) {
                Ok(changed) => changed,
                Err(error) => return Err(open.abandon(error).await),
            };
            for write in &writes {
                if let Some(replaced) = &write.replaced {
                    if let Err(error) = self.keep_closed(open.client(), &write.key, replaced).await
                    {
                        return Err(open.abandon(error).await);
                    }
                }
                let key = write.key.as_str();
                let written = match &write.row {
                    Some(row) => {
                        let statement = self.write_statement(existing.contains(key));
                        open.client().execute(&statement, &row_params(row)).await
                    }
                    None => {
                        open.client()
                            .execute(
                                &format!(
                                    "DELETE FROM {} WHERE session_key = $1",
                                    self.table("sessions")
                                ),
                                &[&key],
                            )
                            .await
                    }
                };
                if let Err(e) = written {
                    return Err(open.abandon(pg_error("write a session")(e)).await);
                }
            }
            match open.client().batch_execute("COMMIT").await {
                Ok(()) => {
                    open.finish();
                    Ok(slots)
                }
                Err(e) => Err(pg_error("commit")(e)),
            }
        })
        .await
    }
}

impl PostgresStore {
    /// Keeps `closed`, the session an update replaced under `key`, as a closed row (and
    /// drops the key's oldest closed rows beyond the bound), in the open transaction.
    async fn keep_closed(
        &self,
        client: &Object,
        key: &SessionKey,
        closed: &crate::store::entry::SessionEntry,
    ) -> Result<()> {
        let row = SessionRow::new(key, closed)?;
        let closed_at = sql::to_i64(closed.closed_at.unwrap_or(closed.updated_at));
        let table = self.table("closed_sessions");
        client
            .execute(
                &format!(
                    "INSERT INTO {table} (session_id, session_key, agent_id, updated_at, channel,
                         chat_type, person_id, agent_identity, status, revision, entry, closed_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT (session_id) DO UPDATE SET
                         session_key = excluded.session_key, agent_id = excluded.agent_id,
                         updated_at = excluded.updated_at, channel = excluded.channel,
                         chat_type = excluded.chat_type, person_id = excluded.person_id,
                         agent_identity = excluded.agent_identity, status = excluded.status,
                         revision = excluded.revision, entry = excluded.entry,
                         closed_at = excluded.closed_at"
                ),
                &[
                    &row.session_id,
                    &row.session_key,
                    &row.agent_id,
                    &row.updated_at,
                    &row.channel,
                    &row.chat_type,
                    &row.person_id,
                    &row.agent_identity,
                    &row.status,
                    &row.revision,
                    &row.entry,
                    &closed_at,
                ],
            )
            .await
            .map_err(pg_error("keep a closed session"))?;
        client
            .execute(&sql::trim_closed_sql(&table, "$1"), &[&row.session_key])
            .await
            .map_err(pg_error("keep a closed session"))?;
        Ok(())
    }
}
