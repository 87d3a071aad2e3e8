use super::*;
use crate::store::SessionStoreExt;
use crate::SessionEntry;

fn server() -> String {
    std::env::var("AGENT_SESSIONS_TEST_POSTGRES_URL").expect("a test server")
}

/// A new schema holding the tables of the first `version` migrations, as a database
/// last opened by that version left it, and an admin connection to fill it.
async fn schema_at_version(prefix: &str, version: usize) -> (String, tokio_postgres::Client) {
    let schema = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    let (admin, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let versions: Vec<String> = (1..=version).map(|v| format!("({v}, 0)")).collect();
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.schema_migrations (
                 version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL);
             INSERT INTO {schema}.schema_migrations VALUES {};",
            versions.join(", ")
        ))
        .await
        .unwrap();
    for migration in &MIGRATIONS[..version] {
        admin
            .batch_execute(&migration.replace("{schema}", &schema))
            .await
            .unwrap();
    }
    (schema, admin)
}

fn key() -> SessionKey {
    SessionKey::parse("agent:main:main").unwrap()
}

async fn fresh(application: &str) -> PostgresStore {
    let schema = format!("unit_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{}?application_name={application}", server());
    PostgresStore::connect_with(&url, PostgresOptions::in_schema(schema))
        .await
        .unwrap()
}

#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_dropped_connection_fails_one_call_at_most_and_then_recovers() {
    let application = format!("as_{}", uuid::Uuid::new_v4().simple());
    let store = fresh(&application).await;
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();

    // The server (an admin, a restart, a failover) drops every connection of ours.
    let (admin, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )
        .await
        .unwrap();
    assert!(!killed.is_empty(), "the store had a pooled connection");
    tokio::time::sleep(Duration::from_millis(100)).await;

    match store.get(&key()).await {
        Ok(found) => assert!(found.is_some()),
        Err(error) => assert!(error.is_transient(), "{error}"),
    }
    let recovered = store.get(&key()).await.unwrap().unwrap();
    assert_eq!(recovered.entry.session_id, "s-1");
    store.drop_schema().await.unwrap();
}

/// A database that does not exist, or a role that does not, is not a failure that
/// passes: the error says so, and a host that retries transient errors does not retry
/// it forever.
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_missing_database_or_role_is_not_a_transient_error() {
    let config: tokio_postgres::Config = server().parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let missing = uuid::Uuid::new_v4().simple().to_string();
    for url in [
        format!("postgres://postgres@127.0.0.1:{port}/no_such_db_{missing}"),
        format!("postgres://no_such_role_{missing}@127.0.0.1:{port}/postgres"),
    ] {
        let error = PostgresStore::connect(&url).await.unwrap_err();
        assert!(matches!(error, Error::Database { .. }), "{error}");
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("does not exist"), "{error}");
    }
}

/// A loopback proxy to the test server that can go down: then it cuts the
/// connections it relayed and closes every new one at once, counting them.
struct Gate {
    port: u16,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    relayed: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Gate {
    fn open() -> Gate {
        use std::sync::atomic::Ordering::SeqCst;
        let config: tokio_postgres::Config = server().parse().unwrap();
        let upstream = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => {
                format!(
                    "{host}:{}",
                    config.get_ports().first().copied().unwrap_or(5432)
                )
            }
            other => panic!("the test server is not on TCP: {other:?}"),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gate = Gate {
            port: listener.local_addr().unwrap().port(),
            down: Default::default(),
            refused: Default::default(),
            relayed: Default::default(),
        };
        let (down, refused, relayed) = (
            gate.down.clone(),
            gate.refused.clone(),
            gate.relayed.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if down.load(SeqCst) {
                    refused.fetch_add(1, SeqCst);
                    continue; // dropped: closed at once
                }
                let server = std::net::TcpStream::connect(&upstream).unwrap();
                let mut open = relayed.lock().unwrap();
                open.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        gate
    }

    fn url(&self) -> String {
        let config: tokio_postgres::Config = server().parse().unwrap();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            config.get_user().unwrap_or("postgres"),
            self.port,
            config.get_dbname().unwrap_or("postgres")
        )
    }

    fn go_down(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.relayed.lock().unwrap().drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn come_back(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// While the server refuses connections, calls fail at once with a transient error and
/// the store connects a few times a second, not once per call; once the server is back,
/// a call connects again within the longest wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_store_backs_off_from_a_server_that_refuses_it_and_connects_once_it_is_back() {
    use std::sync::atomic::Ordering::SeqCst;
    let gate = Gate::open();
    let schema = format!("unit_{}", uuid::Uuid::new_v4().simple());
    let store = PostgresStore::connect_with(&gate.url(), PostgresOptions::in_schema(schema))
        .await
        .unwrap();
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();

    gate.go_down();
    let started = std::time::Instant::now();
    let mut calls = 0;
    while started.elapsed() < Duration::from_millis(700) {
        let error = store.get(&key()).await.unwrap_err();
        assert!(error.is_transient(), "{error}");
        calls += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let connects = gate.refused.load(SeqCst);
    // Waits of 25, 50, 100, 200 and 400 ms: six connects in 700 ms at most.
    assert!(calls >= 100, "{calls} calls");
    assert!(
        (1..=6).contains(&connects),
        "{connects} connects for {calls} calls"
    );

    gate.come_back();
    let back = std::time::Instant::now();
    let found = loop {
        match store.get(&key()).await {
            Ok(found) => break found,
            Err(error) => assert!(error.is_transient(), "{error}"),
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(found.unwrap().entry.session_id, "s-1");
    assert!(
        back.elapsed() <= backoff::MAX_DELAY + Duration::from_millis(200),
        "connected again {:?} after the server came back",
        back.elapsed()
    );
    store.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_cancelled_update_leaves_no_transaction_behind() {
    let application = format!("as_{}", uuid::Uuid::new_v4().simple());
    let store = std::sync::Arc::new(fresh(&application).await);
    store
        .put(&key(), SessionEntry::new("s-1", 1))
        .await
        .unwrap();
    // A holds the key's lock for a while; B waits for it and is cancelled.
    let (inside, entered) = std::sync::mpsc::channel();
    let holder = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .with_session(&key(), |e| {
                    let _ = inside.send(());
                    std::thread::sleep(Duration::from_millis(400));
                    e.updated_at += 1;
                })
                .await
        })
    };
    tokio::task::spawn_blocking(move || entered.recv().unwrap())
        .await
        .unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        store.with_session(&key(), |e| e.updated_at += 10),
    )
    .await;
    assert!(cancelled.is_err(), "B was still waiting for the lock");
    holder.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // B's connection was closed, not pooled in the middle of its transaction.
    let (admin, connection) = tokio_postgres::connect(&server(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let stale: i64 = admin
        .query_one(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
            &[&application],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stale, 0);
    tokio::time::timeout(
        Duration::from_secs(2),
        store.with_session(&key(), |e| e.updated_at += 100),
    )
    .await
    .expect("the key is not locked")
    .unwrap();
    let entry = store.get(&key()).await.unwrap().unwrap().entry;
    assert_eq!(entry.updated_at, 102, "A's and C's updates, not B's");
    store.drop_schema().await.unwrap();
}

/// A schema whose messages were indexed before `search_postings` existed (version 5)
/// numbers them and has them, and their vectors, in the new indexes once connected to.
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn messages_indexed_before_the_postings_are_found_after_the_migration() {
    use crate::transcript::search::{SearchFilter, SearchIndex};
    let (schema, admin) = schema_at_version("unit_v5_", 5).await;
    for (n, text) in ["the roster for Thursday", "swap my shift", "rosters again"]
        .iter()
        .enumerate()
    {
        admin
            .execute(
                &format!(
                    "INSERT INTO {schema}.search_messages (id, agent_id, session_id, person_id, at, text)
                     VALUES ($1, 'main', 's-1', $2, 0, $3)"
                ),
                &[&format!("main/s-1/{n}"), &format!("p{}", n % 2), text],
            )
            .await
            .unwrap();
    }
    admin
        .execute(
            &format!(
                "UPDATE {schema}.search_messages SET embedding = '{{0.5, 2}}' WHERE id = 'main/s-1/1'"
            ),
            &[],
        )
        .await
        .unwrap();
    let store = PostgresStore::connect_with(&server(), PostgresOptions::in_schema(&schema))
        .await
        .unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        MIGRATIONS.len() as i64
    );
    let ids = |hits: Vec<(String, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    let nearest = store
        .nearest(&[1.0, 4.0], &SearchFilter::new(), 5)
        .await
        .unwrap();
    assert_eq!(ids(nearest), ["main/s-1/1"]);
    let hits = store
        .full_text("roster", &SearchFilter::new(), 5)
        .await
        .unwrap();
    assert_eq!(ids(hits), ["main/s-1/2", "main/s-1/0"]);
    let hits = store
        .full_text("roster", &SearchFilter::new().person("p1"), 5)
        .await
        .unwrap();
    assert!(hits.is_empty());
    store.drop_schema().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_newer_schema_is_refused() {
    let store = fresh("as_unit").await;
    assert_eq!(
        store.schema_version().await.unwrap(),
        MIGRATIONS.len() as i64
    );
    store
        .client()
        .await
        .unwrap()
        .execute(
            &format!(
                "INSERT INTO {} VALUES (99, 0)",
                store.table("schema_migrations")
            ),
            &[],
        )
        .await
        .unwrap();
    let again =
        PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema())).await;
    assert!(matches!(
        again,
        Err(Error::UnsupportedSchema { found: 99, .. })
    ));
    store.drop_schema().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_server_is_a_transient_error() {
    let store = PostgresStore::connect_with(
        "postgres://nobody@127.0.0.1:1/none?connect_timeout=1",
        PostgresOptions::default(),
    )
    .await;
    assert!(matches!(store, Err(ref e) if e.is_transient()), "{store:?}");
}

#[test]
fn schemas_are_plain_identifiers() {
    assert!(valid_schema("agent_sessions"));
    assert!(valid_schema("_t1"));
    for bad in ["", "1x", "Public", "a-b", "a;drop", &"x".repeat(64)] {
        assert!(!valid_schema(bad), "{bad:?}");
    }
}

#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_version_2_schema_gains_statuses_and_closed_sessions_and_keeps_its_sessions() {
    use crate::store::entry::SessionStatus;
    let (schema, admin) = schema_at_version("unit_v2_", 2).await;
    // Rows as version 2 wrote them (no status column), and one that is not JSON.
    let rows = [
        (
            "agent:main:main",
            "s-1",
            2,
            r#"{"sessionId":"s-1","updatedAt":2}"#,
        ),
        (
            "agent:main:cli:hidden",
            "s-2",
            1,
            r#"{"sessionId":"s-2","updatedAt":1,"status":"inactive"}"#,
        ),
        ("agent:main:cli:broken", "s-x", 0, "{not json"),
    ];
    for (key, id, updated_at, json) in rows {
        admin
            .execute(
                &format!(
                    "INSERT INTO {schema}.sessions (session_key, agent_id, session_id, updated_at,
                         revision, entry) VALUES ($1, 'main', $2, $3, 0, $4)"
                ),
                &[&key, &id, &(updated_at as i64), &json],
            )
            .await
            .unwrap();
    }
    let store = PostgresStore::connect_with(&server(), PostgresOptions::in_schema(&schema))
        .await
        .unwrap();
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
    store.drop_schema().await.unwrap();
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
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn is_bounded_per_group_and_over_groups() {
        let store = fresh("as_history").await;
        chatter_suite::bounded_per_group_and_over_groups(|_, limit, max_keys| {
            let store = store.clone();
            async move {
                // Each case starts from an empty table.
                store
                    .client()
                    .await
                    .unwrap()
                    .batch_execute(&format!("DELETE FROM {}", store.table("group_history")))
                    .await
                    .unwrap();
                PostgresChatter::with_limits(&store, limit, max_keys)
            }
        })
        .await;
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn keeps_every_field() {
        let store = fresh("as_history").await;
        chatter_suite::entries_keep_every_field(PostgresChatter::new(&store)).await;
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn clearing_with_history_off_leaves_the_group() {
        let store = fresh("as_history").await;
        chatter_suite::clearing_with_history_off_leaves_the_group(
            PostgresChatter::with_limits(&store, 3, 10),
            PostgresChatter::with_limits(&store, 0, 10),
        )
        .await;
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn hands_claimed_entries_over_exactly_once() {
        let store = fresh("as_history").await;
        chatter_suite::claims_hand_entries_over_exactly_once(
            PostgresChatter::with_limits(&store, 3, 10),
            3,
        )
        .await;
        store.drop_schema().await.unwrap();
    }

    /// Three stores (three pools) on one schema, as three hosts would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn take_is_atomic_beside_other_hosts_appending() {
        let store = fresh("as_history").await;
        let mut handles = Vec::new();
        for _ in 0..3 {
            let host =
                PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema()))
                    .await
                    .unwrap();
            handles.push(PostgresChatter::with_limits(&host, 1000, 10));
        }
        let taker = handles.pop().unwrap();
        let writers = [handles.pop().unwrap(), handles.pop().unwrap()];
        chatter_suite::take_is_atomic_beside_concurrent_appends(writers, taker, 150).await;
        store.drop_schema().await.unwrap();
    }

    /// Writers on four hosts each creating a new group at the same moment, round after
    /// round, leave at most `max_keys` groups after every round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn concurrent_new_groups_stay_within_the_bound() {
        const WRITERS: usize = 4;
        let store = fresh("as_history").await;
        let mut hosts = Vec::new();
        for _ in 0..WRITERS {
            let host =
                PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema()))
                    .await
                    .unwrap();
            hosts.push(PostgresChatter::with_limits(&host, 5, 3));
        }
        let count_groups = || async {
            let groups: i64 = store
                .client()
                .await
                .unwrap()
                .query_one(
                    &format!(
                        "SELECT COUNT(DISTINCT group_key) FROM {}",
                        store.table("group_history")
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            groups
        };
        for round in 0..15 {
            let start = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
            let mut tasks = tokio::task::JoinSet::new();
            for (w, history) in hosts.iter().enumerate() {
                let (history, start) = (history.clone(), start.clone());
                tasks.spawn(async move {
                    start.wait().await;
                    history
                        .append(&format!("g{round}-{w}"), said("x"))
                        .await
                        .unwrap();
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
            assert_eq!(count_groups().await, 3, "after round {round}");
        }
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn survives_reconnecting() {
        let store = fresh("as_history").await;
        let history = PostgresChatter::new(&store);
        for body in ["a", "b"] {
            history.append("g", said(body)).await.unwrap();
        }
        drop(history);
        let again =
            PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema()))
                .await
                .unwrap();
        let history = PostgresChatter::with_limits(&again, 2, 10);
        history.append("g", said("c")).await.unwrap();
        assert_eq!(
            history.take("g").await.unwrap(),
            [said("b"), said("c")],
            "the new store trims what the first one wrote"
        );
        assert!(PostgresChatter::new(&store)
            .entries("g")
            .await
            .unwrap()
            .is_empty());
        store.drop_schema().await.unwrap();
    }

    /// A version-3 schema, with RABS's and ClawOS's views over its tables, gains the
    /// history and system-event tables on the next connect; its sessions and views are
    /// kept.
    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_version_3_schema_with_views_gains_group_history_and_system_events_and_keeps_its_sessions(
    ) {
        use crate::ops::ViewSchemas;
        let (schema, admin) = schema_at_version("unit_v3_", 3).await;
        let views = ViewSchemas::new(format!("{schema}_rabs"), format!("{schema}_clawos"));
        admin
            .batch_execute(&crate::ops::views::postgres_create(&schema, &views))
            .await
            .unwrap();
        admin
            .execute(
                &format!(
                    "INSERT INTO {schema}.sessions (session_key, agent_id, session_id, updated_at,
                         revision, entry, status) VALUES ($1, 'main', 's-1', 2, 0, $2, 'idle')"
                ),
                &[&"agent:main:main", &r#"{"sessionId":"s-1","updatedAt":2}"#],
            )
            .await
            .unwrap();
        let store = PostgresStore::connect_with(&server(), PostgresOptions::in_schema(&schema))
            .await
            .unwrap();
        assert_eq!(
            store.schema_version().await.unwrap(),
            MIGRATIONS.len() as i64
        );
        assert_eq!(
            store.get(&key()).await.unwrap().unwrap().entry.session_id,
            "s-1"
        );
        let through_view: i64 = admin
            .query_one(
                &format!("SELECT COUNT(*) FROM {}_clawos.sessions", schema),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(through_view, 1);
        let history = PostgresChatter::new(&store);
        history.append("g", said("a")).await.unwrap();
        assert_eq!(history.take("g").await.unwrap(), [said("a")]);
        let events = crate::store::PostgresSystemEvents::new(&store);
        let now = chrono::Utc::now();
        assert!(events
            .enqueue(&key(), "Model switched.", now)
            .await
            .unwrap());
        assert_eq!(events.drain(&key()).await.unwrap().len(), 1);
        store.drop_views(&views).await.unwrap();
        admin
            .batch_execute(&format!(
                "DROP SCHEMA {schema}_rabs; DROP SCHEMA {schema}_clawos;"
            ))
            .await
            .unwrap();
        store.drop_schema().await.unwrap();
    }
}

mod system_events {
    use std::time::Duration;

    use super::*;
    use crate::store::testing::system_events as system_events_suite;
    use crate::store::PostgresSystemEvents;

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn are_bounded_and_skip_repeats() {
        let store = fresh("as_system_events").await;
        system_events_suite::bounded_and_skipping_repeats(
            |_, max_events, max_sessions| {
                let store = store.clone();
                async move {
                    // Each case starts from an empty table.
                    store
                        .client()
                        .await
                        .unwrap()
                        .batch_execute(&format!("DELETE FROM {}", store.table("system_events")))
                        .await
                        .unwrap();
                    PostgresSystemEvents::with_limits(&store, max_events, max_sessions)
                }
            },
            Duration::ZERO,
        )
        .await;
        store.drop_schema().await.unwrap();
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn keep_text_and_time() {
        let store = fresh("as_system_events").await;
        system_events_suite::events_keep_text_and_time(PostgresSystemEvents::new(&store)).await;
        store.drop_schema().await.unwrap();
    }

    /// Four stores (four pools) on one schema, as four hosts would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn drain_once_beside_other_hosts_enqueuing() {
        let store = fresh("as_system_events").await;
        let mut handles = Vec::new();
        for _ in 0..4 {
            let host =
                PostgresStore::connect_with(&server(), PostgresOptions::in_schema(store.schema()))
                    .await
                    .unwrap();
            handles.push(PostgresSystemEvents::with_limits(&host, 1000, 10));
        }
        let mut next = || handles.pop().unwrap();
        let writers = [next(), next()];
        let drainers = [next(), next()];
        system_events_suite::drain_once_beside_concurrent_enqueues(writers, drainers, 150).await;
        store.drop_schema().await.unwrap();
    }
}

/// An append whose lines go out with its `COMMIT` and fails on the server (a text
/// PostgreSQL cannot store: a NUL in a message-log column) leaves the transcript as it
/// was; the next append continues it.
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_failed_append_leaves_the_transcript_as_it_was() {
    use crate::transcript::{LogFields, TranscriptEntry, TranscriptRef, TranscriptStore};
    let store = fresh("as_append").await;
    let transcript = TranscriptRef::new(crate::AgentId::main(), "s-append");
    let at = chrono::Utc::now();
    store
        .append(&transcript, vec![TranscriptEntry::user_text("first", at)])
        .await
        .unwrap();
    let before = store.read(&transcript, Offset::START).await.unwrap();

    let mut poisoned = TranscriptEntry::user_text("second", at);
    poisoned.log = Some(LogFields {
        person_id: Some("person\0with a NUL".into()),
        ..LogFields::default()
    });
    let failed = store
        .append(
            &transcript,
            vec![TranscriptEntry::user_text("ok", at), poisoned],
        )
        .await;
    let error = failed.unwrap_err().to_string();
    assert!(error.contains("append to a transcript"), "{error}");
    let after = store.read(&transcript, Offset::START).await.unwrap();
    assert_eq!(
        after.next, before.next,
        "no line of the failed append is in"
    );
    assert_eq!(after.events.len(), before.events.len());

    let next = store
        .append(&transcript, vec![TranscriptEntry::user_text("third", at)])
        .await
        .unwrap();
    assert_eq!(next[0].offset, before.next, "the next append continues it");
    store.drop_schema().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn appends_by_two_workers_continue_one_chain_announced_once_each() {
    use crate::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
    // Each handle appends after the tail it wrote last without reading it first; when
    // the other handle moved it since, that append writes and announces nothing and the
    // tail is read.
    let one = fresh("as_tails").await;
    let url = format!("{}?application_name=as_tails", server());
    let two = PostgresStore::connect_with(&url, PostgresOptions::in_schema(one.schema.clone()))
        .await
        .unwrap();
    let transcript = TranscriptRef::new(crate::AgentId::main(), "s-tails");
    let mut heard = TranscriptStore::subscribe(&one);
    // The listening connection is up once it hears the other handle append to another
    // transcript.
    let at = chrono::Utc::now();
    let ready = TranscriptRef::new(crate::AgentId::main(), "s-ready");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        two.append(&ready, vec![TranscriptEntry::user_text("ready?", at)])
            .await
            .unwrap();
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), heard.recv()).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener never heard"
        );
    }
    let mut heard = heard.only(|update| update.transcript.session_id == "s-tails");
    two.append(&transcript, vec![TranscriptEntry::user_text("w0", at)])
        .await
        .unwrap();

    // one, one, two, one, two, two, one: every append after the first of each handle
    // finds the tail it remembers moved or in place, in turn.
    let order = [&one, &one, &two, &one, &two, &two, &one];
    for (n, store) in order.iter().enumerate() {
        store
            .append(
                &transcript,
                vec![
                    TranscriptEntry::user_text(format!("q{n}"), at),
                    TranscriptEntry::assistant_text(format!("a{n}"), "test", "model", at),
                ],
            )
            .await
            .unwrap();
    }
    let read = two.read(&transcript, Offset::START).await.unwrap();
    let texts: Vec<String> = read
        .events
        .iter()
        .map(|e| e.entry.message.as_ref().unwrap().text())
        .collect();
    let mut expected = vec!["w0".to_owned()];
    for n in 0..order.len() {
        expected.extend([format!("q{n}"), format!("a{n}")]);
    }
    assert_eq!(texts, expected, "every line once, in order");
    for pair in read.events.windows(2) {
        assert_eq!(
            pair[1].entry.parent_id, pair[0].entry.id,
            "each line hangs from the one before"
        );
        assert_eq!(
            pair[1].offset.0,
            pair[0].offset.0 + 1,
            "numbered without a gap"
        );
    }

    // `one`'s subscribers hear each append once — its own, and the other handle's
    // through the listener — with the lines as stored.
    let mut questions = Vec::new();
    while questions.len() < order.len() {
        let update = tokio::time::timeout(Duration::from_secs(10), heard.recv())
            .await
            .expect("every append is heard")
            .unwrap();
        questions.extend(update.events.into_iter().filter_map(|event| {
            let text = event.entry.message.unwrap().text();
            text.starts_with('q').then_some((event.offset.0, text))
        }));
    }
    // The listener's are heard later than the handle's own.
    questions.sort();
    let expected: Vec<(u64, String)> = (0..order.len())
        .map(|n| (2 + 2 * n as u64, format!("q{n}")))
        .collect();
    assert_eq!(questions, expected);
    let more = tokio::time::timeout(Duration::from_millis(500), heard.recv()).await;
    assert!(more.is_err(), "no append is announced twice: {more:?}");
    one.drop_schema().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn concurrent_appends_by_four_workers_keep_one_chain() {
    use crate::transcript::{TranscriptEntry, TranscriptRef, TranscriptStore};
    let first = fresh("as_tails").await;
    let url = format!("{}?application_name=as_tails", server());
    let mut handles = vec![first.clone()];
    for _ in 0..3 {
        handles.push(
            PostgresStore::connect_with(&url, PostgresOptions::in_schema(first.schema.clone()))
                .await
                .unwrap(),
        );
    }
    let transcript = TranscriptRef::new(crate::AgentId::main(), "s-race");
    let at = chrono::Utc::now();
    let mut workers = tokio::task::JoinSet::new();
    for (worker, store) in handles.into_iter().enumerate() {
        let transcript = transcript.clone();
        workers.spawn(async move {
            for n in 0..40 {
                store
                    .append(
                        &transcript,
                        vec![TranscriptEntry::user_text(format!("w{worker}-{n}"), at)],
                    )
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    let read = first.read(&transcript, Offset::START).await.unwrap();
    assert_eq!(read.events.len(), 160, "every append once");
    let mut texts: Vec<String> = read
        .events
        .iter()
        .map(|e| e.entry.message.as_ref().unwrap().text())
        .collect();
    for pair in read.events.windows(2) {
        assert_eq!(pair[1].entry.parent_id, pair[0].entry.id, "one chain");
        assert_eq!(pair[1].offset.0, pair[0].offset.0 + 1, "no gap");
    }
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 160, "no line twice");
    first.drop_schema().await.unwrap();
}

#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn an_append_after_another_worker_archived_the_transcript_starts_it_again() {
    use crate::transcript::{ArchiveReason, TranscriptEntry, TranscriptRef, TranscriptStore};
    let one = fresh("as_tails").await;
    let url = format!("{}?application_name=as_tails", server());
    let two = PostgresStore::connect_with(&url, PostgresOptions::in_schema(one.schema.clone()))
        .await
        .unwrap();
    let transcript = TranscriptRef::new(crate::AgentId::main(), "s-archived");
    let at = chrono::Utc::now();
    one.append(&transcript, vec![TranscriptEntry::user_text("before", at)])
        .await
        .unwrap();
    two.archive(&transcript, ArchiveReason::Reset, at)
        .await
        .unwrap()
        .expect("archived");
    // Even an empty append creates the transcript again, as with no remembered tail.
    one.append(&transcript, Vec::new()).await.unwrap();
    let read = two.read(&transcript, Offset::START).await.unwrap();
    assert!(read.header.is_some(), "the transcript exists again");
    assert!(read.events.is_empty());
    let after = one
        .append(&transcript, vec![TranscriptEntry::user_text("after", at)])
        .await
        .unwrap();
    assert_eq!(
        after[0].offset,
        Offset(1),
        "the first line after the header"
    );
    assert_eq!(after[0].entry.parent_id, None, "a new chain");
    one.drop_schema().await.unwrap();
}
