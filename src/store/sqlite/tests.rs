use super::*;
use crate::store::SessionStoreExt;
use crate::SessionEntry;

fn key() -> SessionKey {
    SessionKey::parse("agent:main:main").unwrap()
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        MIGRATIONS.len() as i64
    );
    drop(store);
    Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 0)",
            [],
        )
        .unwrap();
    assert!(matches!(
        SqliteStore::open(&path),
        Err(Error::UnsupportedSchema {
            found: 99,
            supported,
            ..
        }) if supported == MIGRATIONS.len() as i64
    ));
}

#[tokio::test]
async fn a_version_1_database_gains_the_search_tables_and_keeps_its_sessions() {
    use crate::transcript::search::{LoggedMessage, SearchIndex};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    {
        let old = Connection::open(&path).unwrap();
        old.execute_batch(MIGRATIONS[0]).unwrap();
        old.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO schema_migrations VALUES (1, 0);",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        MIGRATIONS.len() as i64
    );
    assert_eq!(
        store.get(&key()).await.unwrap().unwrap().entry.session_id,
        "s-1"
    );
    let message = LoggedMessage {
        id: "main/s-1/1".into(),
        agent: "main".into(),
        session_id: "s-1".into(),
        session_key: None,
        person_id: None,
        agent_identity: None,
        channel: None,
        direction: None,
        correlation_id: None,
        at: Utc::now(),
        text: "the roster for Thursday".into(),
        category: None,
        embedding: None,
    };
    assert_eq!(store.add(vec![message.clone(), message]).await.unwrap(), 1);
    let hits = store
        .full_text("rosters", &Default::default(), 5)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
}

/// Message `n` of session `s-1`, by person `p0` or `p1` by turns, saying `text`.
fn logged(n: usize, text: &str) -> crate::transcript::search::LoggedMessage {
    crate::transcript::search::LoggedMessage {
        id: format!("main/s-1/{n}"),
        agent: "main".into(),
        session_id: "s-1".into(),
        session_key: None,
        person_id: Some(format!("p{}", n % 2)),
        agent_identity: None,
        channel: None,
        direction: None,
        correlation_id: None,
        at: Utc::now(),
        text: text.into(),
        category: None,
        embedding: None,
    }
}

/// A database whose messages were indexed before `search_postings` existed (schema
/// version 6) has them all in the new index once opened: they are found, ranked as the
/// messages added after.
#[tokio::test]
async fn messages_indexed_before_the_postings_are_found_after_the_migration() {
    use crate::transcript::search::SearchIndex;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    {
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO schema_migrations VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0);",
        )
        .unwrap();
        for migration in &MIGRATIONS[..6] {
            old.execute_batch(migration).unwrap();
        }
        for (n, text) in ["the roster for Thursday", "swap my shift", "rosters again"]
            .iter()
            .enumerate()
        {
            let m = logged(n, text);
            old.execute(
                "INSERT INTO search_messages (id, agent_id, session_id, person_id, at, text)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![m.id, m.agent, m.session_id, m.person_id, 0, m.text],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        MIGRATIONS.len() as i64
    );
    let ids = |hits: Vec<(String, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    let roster = store
        .full_text("roster", &Default::default(), 5)
        .await
        .unwrap();
    assert_eq!(ids(roster), ["main/s-1/2", "main/s-1/0"]);
    assert_eq!(
        store.add(vec![logged(3, "roster roster")]).await.unwrap(),
        1
    );
    let hits = store
        .full_text(
            "roster",
            &crate::transcript::search::SearchFilter::new().person("p0"),
            5,
        )
        .await
        .unwrap();
    assert_eq!(ids(hits), ["main/s-1/2", "main/s-1/0"]);
    let hits = store
        .full_text("roster", &Default::default(), 5)
        .await
        .unwrap();
    assert_eq!(ids(hits), ["main/s-1/3", "main/s-1/2", "main/s-1/0"]);
}

/// A database where schema version 11 reused the numbers of the newest messages
/// removed, and left the messages added after them out of the postings, has every
/// message found once opened by this version.
#[tokio::test]
async fn messages_left_out_of_the_postings_after_a_removal_are_found_after_the_migration() {
    use crate::transcript::search::{SearchFilter, SearchIndex};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        let texts = ["the roster for Thursday", "swap my shift", "a roster"];
        let first = texts.iter().enumerate().map(|(n, t)| logged(n, t));
        store.add(first.collect()).await.unwrap();
        SearchIndex::remove(&store, &["main/s-1/2".to_owned()])
            .await
            .unwrap();
    }
    // What version 11 left: the removed message's number given to the next one, and
    // the postings' mark past it.
    let old = Connection::open(&path).unwrap();
    old.execute_batch(
        "DELETE FROM schema_migrations WHERE version = 12;
         INSERT INTO search_messages (rowid, id, agent_id, session_id, at, text)
             VALUES (3, 'main/s-1/3', 'main', 's-1', 0, 'roster after the erase');
         UPDATE search_postings_state SET indexed_through = 3;",
    )
    .unwrap();
    drop(old);
    let store = SqliteStore::open(&path).unwrap();
    let mut found: Vec<String> = store
        .full_text("roster", &SearchFilter::new(), 5)
        .await
        .unwrap()
        .into_iter()
        .map(|hit| hit.0)
        .collect();
    found.sort();
    assert_eq!(found, ["main/s-1/0", "main/s-1/3"]);
    assert_eq!(store.message_count().await.unwrap(), 3);
}

#[tokio::test]
async fn a_row_that_is_not_an_entry_is_reported_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(&path).unwrap();
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE sessions SET entry = '{not json'", [])
        .unwrap();
    assert!(matches!(
        store.get(&key()).await,
        Err(Error::InvalidEntry { .. })
    ));
    assert!(matches!(
        store.update(&key(), |_| ()).await,
        Err(Error::InvalidEntry { .. })
    ));
    // Nothing was written over it.
    let raw: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT entry FROM sessions", [], |row| row.get(0))
        .unwrap();
    assert_eq!(raw, "{not json");
}

#[tokio::test]
async fn a_busy_database_is_a_transient_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open_with(
        &path,
        SqliteOptions {
            busy_timeout: Duration::from_millis(50),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    // Another process holds the write lock.
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let error = store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    other.execute_batch("ROLLBACK").unwrap();
    // The next call goes through.
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn the_database_and_its_journal_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/sessions.db");
    let store = SqliteStore::open(&path).unwrap();
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let wal = path.with_file_name("sessions.db-wal");
    assert!(wal.exists(), "WAL mode");
    assert_eq!(mode(&wal), 0o600);
}

#[tokio::test]
async fn a_version_2_database_gains_statuses_and_closed_sessions_and_keeps_its_sessions() {
    use crate::store::entry::SessionStatus;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let hidden = SessionKey::parse("agent:main:cli:hidden").unwrap();
    {
        let old = Connection::open(&path).unwrap();
        old.execute_batch(MIGRATIONS[0]).unwrap();
        old.execute_batch(MIGRATIONS[1]).unwrap();
        old.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
             INSERT INTO schema_migrations VALUES (1, 0), (2, 0);",
        )
        .unwrap();
        // Rows as version 2 wrote them: no status column, the status in the JSON only.
        let rows = [
            (key(), r#"{"sessionId":"s-1","updatedAt":2}"#),
            (
                hidden.clone(),
                r#"{"sessionId":"s-2","updatedAt":1,"status":"inactive"}"#,
            ),
        ];
        for (k, json) in rows {
            let entry: SessionEntry = serde_json::from_str(json).unwrap();
            let mut row = SessionRow::new(&k, &entry).unwrap();
            row.entry = json.to_owned();
            old.execute(
                "INSERT INTO sessions (session_key, agent_id, session_id, updated_at, channel,
                     chat_type, person_id, agent_identity, revision, entry)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    row.session_key,
                    row.agent_id,
                    row.session_id,
                    row.updated_at,
                    row.channel,
                    row.chat_type,
                    row.person_id,
                    row.agent_identity,
                    row.revision,
                    row.entry
                ],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    let listed = |filter: ListFilter| {
        let store = store.clone();
        async move {
            store
                .list(&filter)
                .await
                .unwrap()
                .into_iter()
                .map(|s| s.entry.session_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed(ListFilter::new()).await,
        ["s-1"],
        "inactive is hidden"
    );
    assert_eq!(listed(ListFilter::all()).await, ["s-1", "s-2"]);
    assert_eq!(
        listed(ListFilter::new().status(SessionStatus::Inactive)).await,
        ["s-2"]
    );
    store
        .put(&key(), SessionEntry::new("s-3", 3))
        .await
        .unwrap();
    assert_eq!(
        listed(ListFilter::new().status(SessionStatus::Closed)).await,
        ["s-1"],
        "the replaced session is kept closed"
    );
}

mod group_history {
    use super::*;
    use crate::inbound::chatter::{ChatterBuffer, ChatterEntry};
    use crate::inbound::events::SystemEvents;
    use crate::store::testing::chatter as chatter_suite;

    fn said(body: &str) -> ChatterEntry {
        ChatterEntry {
            sender: "Ann".into(),
            body: body.into(),
            timestamp: Some(1_773_136_800_000),
            message_id: Some(format!("m-{body}")),
            sender_id: None,
        }
    }

    #[tokio::test]
    async fn is_bounded_per_group_and_over_groups() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        chatter_suite::bounded_per_group_and_over_groups(|case, limit, max_keys| {
            let file = root.join(format!("case-{case}.db"));
            async move { SqliteChatter::with_limits(&SqliteStore::open(file).unwrap(), limit, max_keys) }
        })
        .await;
    }

    #[tokio::test]
    async fn keeps_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("sessions.db")).unwrap();
        chatter_suite::entries_keep_every_field(SqliteChatter::new(&store)).await;
    }

    #[tokio::test]
    async fn clearing_with_history_off_leaves_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("sessions.db")).unwrap();
        chatter_suite::clearing_with_history_off_leaves_the_group(
            SqliteChatter::with_limits(&store, 3, 10),
            SqliteChatter::with_limits(&store, 0, 10),
        )
        .await;
    }

    #[tokio::test]
    async fn hands_claimed_entries_over_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("sessions.db")).unwrap();
        chatter_suite::claims_hand_entries_over_exactly_once(
            SqliteChatter::with_limits(&store, 3, 10),
            3,
        )
        .await;
    }

    /// Three stores on one file, as three processes would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn take_is_atomic_beside_other_processes_appending() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sessions.db");
        let handle = || SqliteChatter::with_limits(&SqliteStore::open(&file).unwrap(), 1000, 10);
        chatter_suite::take_is_atomic_beside_concurrent_appends(
            [handle(), handle()],
            handle(),
            150,
        )
        .await;
    }

    #[tokio::test]
    async fn survives_reopening_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sessions.db");
        {
            let history = SqliteChatter::new(&SqliteStore::open(&file).unwrap());
            for body in ["a", "b"] {
                history.append("g", said(body)).await.unwrap();
            }
        }
        let history = SqliteChatter::with_limits(&SqliteStore::open(&file).unwrap(), 2, 10);
        history.append("g", said("c")).await.unwrap();
        assert_eq!(
            history.take("g").await.unwrap(),
            [said("b"), said("c")],
            "the reopened store trims what the first one wrote"
        );
        drop(history);
        let history = SqliteChatter::new(&SqliteStore::open(&file).unwrap());
        assert!(history.entries("g").await.unwrap().is_empty(), "taken once");
    }

    #[tokio::test]
    async fn a_read_only_store_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sessions.db");
        SqliteChatter::new(&SqliteStore::open(&file).unwrap())
            .append("g", said("a"))
            .await
            .unwrap();
        let history = SqliteChatter::new(&SqliteStore::open_read_only(&file).unwrap());
        assert_eq!(history.entries("g").await.unwrap(), [said("a")]);
        assert!(matches!(
            history.append("g", said("b")).await,
            Err(Error::Database { .. })
        ));
        assert!(matches!(
            history.take("g").await,
            Err(Error::Database { .. })
        ));
        assert_eq!(
            history.entries("g").await.unwrap(),
            [said("a")],
            "nothing lost"
        );
    }

    /// A version-3 database, with RABS's and ClawOS's views over its tables, gains the
    /// history and system-event tables on its next open; its sessions and views are
    /// kept.
    #[tokio::test]
    async fn a_version_3_database_with_views_gains_group_history_and_system_events_and_keeps_its_sessions(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        {
            let old = Connection::open(&path).unwrap();
            for migration in &MIGRATIONS[..3] {
                old.execute_batch(migration).unwrap();
            }
            old.execute_batch(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL);
                 INSERT INTO schema_migrations VALUES (1, 0), (2, 0), (3, 0);",
            )
            .unwrap();
            old.execute_batch(&crate::ops::views::sqlite_create())
                .unwrap();
            let entry = SessionEntry::new("s-1", 2);
            let row = SessionRow::new(&key(), &entry).unwrap();
            write_row(&old, &row).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.schema_version().await.unwrap(),
            MIGRATIONS.len() as i64
        );
        assert_eq!(
            store.get(&key()).await.unwrap().unwrap().entry.session_id,
            "s-1"
        );
        let through_view: String = Connection::open(&path)
            .unwrap()
            .query_row("SELECT session_id FROM clawos_sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(through_view, "s-1");
        let history = SqliteChatter::new(&store);
        history.append("g", said("a")).await.unwrap();
        assert_eq!(history.take("g").await.unwrap(), [said("a")]);
        let events = crate::store::SqliteSystemEvents::new(&store);
        let now = chrono::Utc::now();
        assert!(events
            .enqueue(&key(), "Model switched.", now)
            .await
            .unwrap());
        assert_eq!(events.drain(&key()).await.unwrap().len(), 1);
    }
}

mod system_events {
    use std::time::Duration;

    use super::*;
    use crate::inbound::events::SystemEvents;
    use crate::store::testing::system_events::{self as system_events_suite, session};
    use crate::store::SqliteSystemEvents;

    #[tokio::test]
    async fn are_bounded_and_skip_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        system_events_suite::bounded_and_skipping_repeats(
            |case, max_events, max_sessions| {
                let file = root.join(format!("case-{case}.db"));
                async move {
                    SqliteSystemEvents::with_limits(
                        &SqliteStore::open(file).unwrap(),
                        max_events,
                        max_sessions,
                    )
                }
            },
            Duration::ZERO,
        )
        .await;
    }

    #[tokio::test]
    async fn keep_text_and_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("sessions.db")).unwrap();
        system_events_suite::events_keep_text_and_time(SqliteSystemEvents::new(&store)).await;
    }

    /// Four stores on one file, as four processes would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drain_once_beside_other_processes_enqueuing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sessions.db");
        let handle =
            || SqliteSystemEvents::with_limits(&SqliteStore::open(&file).unwrap(), 1000, 10);
        system_events_suite::drain_once_beside_concurrent_enqueues(
            [handle(), handle()],
            [handle(), handle()],
            150,
        )
        .await;
    }

    #[tokio::test]
    async fn a_read_only_store_refuses_writes_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sessions.db");
        let at = chrono::Utc::now();
        SqliteSystemEvents::new(&SqliteStore::open(&file).unwrap())
            .enqueue(&session("a"), "x", at)
            .await
            .unwrap();
        let read_only = SqliteSystemEvents::new(&SqliteStore::open_read_only(&file).unwrap());
        for refused in [
            read_only.enqueue(&session("a"), "y", at).await.map(drop),
            read_only.drain(&session("a")).await.map(drop),
        ] {
            assert!(
                matches!(refused, Err(Error::Database { .. })),
                "{refused:?}"
            );
        }
        let events = SqliteSystemEvents::new(&SqliteStore::open(&file).unwrap());
        assert_eq!(events.drain(&session("a")).await.unwrap().len(), 1);
    }
}

/// Every column of a session's row, as stored.
fn stored_row(path: &Path, key: &SessionKey) -> SessionRow {
    read_whole_row(&Connection::open(path).unwrap(), key.as_str())
        .unwrap()
        .expect("the row is stored")
}

/// An update assigns only the columns that change; whichever changes, the stored row is
/// the row of the entry, also when a column was stale (written by another program).
#[tokio::test]
async fn every_column_follows_the_entry_whichever_fields_an_update_changes() {
    type Change = fn(&mut SessionEntry);
    let changes: [(&str, Change); 8] = [
        ("nothing indexed", |e| e.message_count = Some(7)),
        ("update time", |e| e.updated_at += 1),
        ("session id", |e| e.session_id = "s-2".into()),
        ("channel", |e| e.channel = Some("signal".into())),
        ("chat type", |e| {
            e.chat_type = Some(crate::store::entry::ChatType::Group)
        }),
        ("person", |e| e.person_id = Some("p-9".into())),
        ("agent identity", |e| {
            e.agent_identity = Some("reggie".into())
        }),
        ("status and time together", |e| {
            e.status = Some(crate::store::entry::SessionStatus::Running);
            e.updated_at += 5;
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(&path).unwrap();
    let mut entry = SessionEntry::new("s-1", 1_000);
    entry.channel = Some("telegram".into());
    store.put(&key(), entry).await.unwrap();
    for (what, change) in changes {
        store.with_session(&key(), change).await.unwrap();
        let entry = store.get(&key()).await.unwrap().unwrap().entry;
        assert_eq!(
            stored_row(&path, &key()),
            SessionRow::new(&key(), &entry).unwrap(),
            "after changing {what}"
        );
    }
    // A stale column is corrected by the next update, even one that leaves the field
    // it derives from alone.
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE sessions SET channel = 'stale', updated_at = 0, status = 'closed'",
            [],
        )
        .unwrap();
    store
        .with_session(&key(), |e| e.message_count = Some(8))
        .await
        .unwrap();
    let entry = store.get(&key()).await.unwrap().unwrap().entry;
    assert_eq!(
        stored_row(&path, &key()),
        SessionRow::new(&key(), &entry).unwrap()
    );
}

/// Stores opening one new database at the same moment all open it: switching it to
/// WAL answers "busy" at once to all but one, and they try again.
#[test]
fn threads_opening_one_new_database_at_once_all_open_it() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
    }
}
