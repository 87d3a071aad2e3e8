//! The SQL views with RABS's and ClawOS's shapes (`ops::ViewSchemas`): the systems' own
//! queries run against them on data the crate wrote through its public API.
#![cfg(any(feature = "sqlite", feature = "postgres"))]

mod common;

use agent_sessions::manager::LogMessage;
use agent_sessions::ops::type2_message_id;
use agent_sessions::prelude::*;
use agent_sessions::store::{IdentitySummary, LogCursor};

const PERSON: &str = "person-7";
const CORRELATION: &str = "5b0f3c3e-8d4c-4d55-9a55-0d1f0c1e2a3b";

/// What the crate wrote: one WhatsApp session of `reggie_oc` with a person, an
/// identity, a summary and two turns, and one inbound and one outbound message.
struct Written {
    key: SessionKey,
    session_id: String,
    /// The logged messages' ids in `type2_messages`: inbound, outbound.
    message_ids: [String; 2],
}

fn droid_key() -> SessionKey {
    SessionKey::parse("agent:reggie_fd:telegram:dm:99").unwrap()
}

/// Writes the data through the manager, the way a host does.
async fn write_through_the_api(manager: &SessionManager) -> Written {
    let resolution = manager
        .resolve(&InboundMessage::direct("whatsapp", "+15550001", "hello"))
        .await
        .unwrap();
    let key = resolution.key.clone();
    let store = manager.store();
    store
        .with_session(&key, |entry| {
            entry.person_id = Some(PERSON.into());
            entry.person_type = Some("staff".into());
            entry.agent_identity = Some("reggie".into());
            entry.turn_count = Some(2);
            entry.context_summary = Some("GOAL: weather\nTURNS: 2".into());
            entry.identity_summary = Some(IdentitySummary {
                text: "Asked about the weather.".into(),
                updated_at: 1_770_000_000_000,
                watermark: None,
                extra: Default::default(),
            });
        })
        .await
        .unwrap();
    let inbound = manager
        .session(&key)
        .log_message(
            LogMessage::inbound("what's the weather like?")
                .from_person(PERSON)
                .with_agent("reggie_oc", "reggie")
                .correlated(CORRELATION),
        )
        .await
        .unwrap();
    let outbound = manager
        .session(&key)
        .log_message(
            LogMessage::outbound("Sunny, 24°C.")
                .with_agent("reggie_oc", "reggie")
                .took(840)
                .with_tool_calls(1)
                .correlated(CORRELATION),
        )
        .await
        .unwrap();
    // The same conversation goes on over SMS: RABS's `channel` stays the first one.
    let again = manager
        .resolve(&InboundMessage::direct("sms", "+15550001", "still there?"))
        .await
        .unwrap();
    assert_eq!(again.key, key);
    assert_eq!(again.entry().channel_name(), Some("sms"));
    // Where they stand in the message log: what RABS's message ids are made of.
    let id = |event: &agent_sessions::transcript::SessionEvent| {
        let cursor = LogCursor::of_event(resolution.session_id(), event)
            .expect("a logged message has its place in the log");
        type2_message_id(&cursor).to_string()
    };
    // A session of another engine variant, whose id is not a UUID.
    let mut droid = SessionEntry::new("sess_xyz", 1_770_000_000_000);
    droid.person_id = Some(PERSON.into());
    droid.engine_session_ids = Some(
        [("droid".to_owned(), "d-1".to_owned())]
            .into_iter()
            .collect(),
    );
    store.put(&droid_key(), droid).await.unwrap();
    Written {
        session_id: store.get(&key).await.unwrap().unwrap().entry.session_id,
        key,
        message_ids: [id(&inbound), id(&outbound)],
    }
}

/// A conversation reset once: a message logged in the first session, then `/new` and a
/// message in the second. Returns (first session id, second session id).
async fn reset_once(manager: &SessionManager) -> (String, String) {
    let first = manager
        .turn(&InboundMessage::direct("telegram", "77", "hello"))
        .await
        .unwrap();
    let first_id = first.resolution().unwrap().session_id().to_owned();
    first.complete("hi").await.unwrap();
    let second = manager
        .turn(&InboundMessage::direct("telegram", "77", "/new again"))
        .await
        .unwrap();
    let second_id = second.resolution().unwrap().session_id().to_owned();
    second.complete("ok").await.unwrap();
    assert_ne!(first_id, second_id);
    (first_id, second_id)
}

/// RABS's person-and-agent conversation as the crate keeps it: two current sessions of
/// one person with one agent (WhatsApp, then SMS later), two messages summarised into
/// her rolling summary once the conversation went quiet, and one message after it.
/// Returns the SMS session's id (the most recent) and the text of the message the
/// summary does not cover.
async fn summarised_then_one_more(
    manager: &SessionManager,
    clock: &agent_sessions::freshness::ManualClock,
) -> (String, &'static str) {
    let mut latest = String::new();
    for (channel, text) in [
        ("whatsapp", "Can I swap Thursday's shift?"),
        ("sms", "Friday works too."),
    ] {
        let key = manager
            .resolve(&InboundMessage::direct(channel, "+15550001", text))
            .await
            .unwrap()
            .key;
        manager
            .store()
            .with_session(&key, |entry| {
                entry.person_id = Some(PERSON.into());
                entry.agent_identity = Some("reggie".into());
            })
            .await
            .unwrap();
        let logged = manager
            .session(&key)
            .log_message(
                LogMessage::inbound(text)
                    .from_person(PERSON)
                    .with_agent("reggie_oc", "reggie"),
            )
            .await
            .unwrap();
        latest = LogCursor::of_event(
            &manager
                .session(&key)
                .get()
                .await
                .unwrap()
                .unwrap()
                .entry
                .session_id,
            &logged,
        )
        .unwrap()
        .session_id;
        clock.advance(std::time::Duration::from_secs(60));
    }
    clock.advance(std::time::Duration::from_secs(2 * 3600));
    let refreshed = manager
        .refresh_identity_summary(PERSON, "reggie")
        .await
        .unwrap();
    assert!(
        matches!(
            refreshed,
            agent_sessions::memory::SummaryRefresh::Updated { .. }
        ),
        "{refreshed:?}"
    );
    clock.advance(std::time::Duration::from_secs(60));
    let after = "And Saturday?";
    let key = manager
        .resolve(&InboundMessage::direct("sms", "+15550001", after))
        .await
        .unwrap()
        .key;
    manager
        .session(&key)
        .log_message(
            LogMessage::inbound(after)
                .from_person(PERSON)
                .with_agent("reggie_oc", "reggie"),
        )
        .await
        .unwrap();
    (latest, after)
}

/// A manager for [`summarised_then_one_more`]: a session per channel and peer, on a
/// clock the test moves.
fn per_channel_manager<S>(store: S) -> (SessionManager, agent_sessions::freshness::ManualClock)
where
    S: SessionStore + agent_sessions::transcript::TranscriptStore + Clone + 'static,
{
    let clock = agent_sessions::freshness::ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-03-10T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    );
    let manager = SessionManager::builder(store.clone())
        .transcripts(store)
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .clock(clock.clone())
        .build()
        .unwrap();
    (manager, clock)
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use agent_sessions::store::SqliteStore;
    use rusqlite::{params, Connection};

    /// A connection as RABS's or ClawOS's own tools would open the file: the database
    /// attached a second time as `brainframe` (RABS's SQL names its schema), and
    /// `sessions` as a temporary name for ClawOS's view.
    fn dashboard(path: &std::path::Path) -> Connection {
        let c = Connection::open(path).unwrap();
        c.execute("ATTACH DATABASE ?1 AS brainframe", [path.to_str().unwrap()])
            .unwrap();
        c.execute_batch("CREATE TEMP VIEW sessions AS SELECT * FROM main.clawos_sessions")
            .unwrap();
        c
    }

    #[tokio::test]
    async fn rabs_and_clawos_queries_run_on_the_sqlite_views() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let db = SqliteStore::open(&path).unwrap();
        let manager = SessionManager::builder(db.clone())
            .transcripts(db.clone())
            // One session per person across channels, so WhatsApp and SMS share it.
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPeer))
            .build()
            .unwrap();
        let written = write_through_the_api(&manager).await;
        db.create_views().await.unwrap();
        db.create_views()
            .await
            .expect("creating them again replaces them");
        let c = dashboard(&path);

        // RABS, starting a conversation: SELECT FROM type2_sessions WHERE person_id = $1 AND agent_name = $2
        let (id, person_type, identity, engine_type, engine_id, channel): (
            String,
            String,
            String,
            String,
            Option<String>,
            String,
        ) = c
            .query_row(
                "SELECT id, person_type, agent_identity, engine_type, engine_session_id, channel \
                 FROM brainframe.type2_sessions WHERE person_id = $1 AND agent_name = $2",
                params![PERSON, "main"],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            (
                id.as_str(),
                person_type.as_str(),
                identity.as_str(),
                engine_type.as_str(),
                engine_id.as_deref(),
                channel.as_str()
            ),
            (
                written.session_id.as_str(),
                "staff",
                "reggie",
                "openclaw",
                // The engine has not replied: RABS starts it without --session-id.
                None,
                "whatsapp"
            )
        );

        // The other engine variant: its engine and the engine's own session id.
        let droid: (String, String, String) = c
            .query_row(
                "SELECT id, engine_type, engine_session_id \
                 FROM brainframe.type2_sessions WHERE person_id = $1 AND agent_name = $2",
                params![PERSON, "reggie_fd"],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            droid,
            ("sess_xyz".to_owned(), "droid".to_owned(), "d-1".to_owned())
        );

        // RABS, switching engine types: SELECT summary FROM type2_sessions WHERE person_id AND agent_identity
        let (summary, summary_at): (String, String) = c
            .query_row(
                "SELECT summary, summary_updated_at FROM brainframe.type2_sessions \
                 WHERE person_id = $1 AND agent_identity = $2",
                params![PERSON, "reggie"],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(summary, "Asked about the weather.");
        assert_eq!(summary_at, "2026-02-02T02:40:00.000Z");

        // RABS, maybeSummarise: the last message of a session.
        let last: String = c
            .query_row(
                "SELECT created_at FROM brainframe.type2_messages
WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1",
                [&id],
                |r| r.get(0),
            )
            .unwrap();
        assert!(last.ends_with('Z') && last.len() == 24, "{last}");

        // RABS, embedType2Message: SELECT id, message FROM type2_messages WHERE id = $1
        for (message_id, text) in written
            .message_ids
            .iter()
            .zip(["what's the weather like?", "Sunny, 24°C."])
        {
            let (got_id, message): (String, String) = c
                .query_row(
                    "SELECT id, message FROM brainframe.type2_messages WHERE id = $1",
                    [message_id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            assert_eq!((&got_id, message.as_str()), (message_id, text));
        }

        // Every column of the message log, in order.
        /// direction, person, agent name, identity, channel, text, ms, tool calls,
        /// correlation
        type Row = (
            String,
            String,
            String,
            String,
            String,
            String,
            Option<i64>,
            i64,
            String,
        );
        let rows: Vec<Row> = c
            .prepare(
                "SELECT direction, person_id, agent_name, agent_identity, channel, message,
                        processing_ms, tool_calls_count, correlation_id
                 FROM brainframe.type2_messages WHERE session_id = $1 ORDER BY created_at, direction",
            )
            .unwrap()
            .query_map([&id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let row = |direction: &str, text: &str, ms: Option<i64>, tools: i64| {
            (
                direction.to_owned(),
                PERSON.to_owned(),
                "reggie_oc".to_owned(),
                "reggie".to_owned(),
                "whatsapp".to_owned(),
                text.to_owned(),
                ms,
                tools,
                CORRELATION.to_owned(),
            )
        };
        assert_eq!(
            rows,
            vec![
                row("inbound", "what's the weather like?", None, 0),
                row("outbound", "Sunny, 24°C.", Some(840), 1),
            ]
        );

        // A dashboard's join: messages per agent variant.
        let per_agent: (String, i64) = c
            .query_row(
                "SELECT s.agent_name, count(m.id) FROM brainframe.type2_sessions s
                 JOIN brainframe.type2_messages m ON m.session_id = s.id GROUP BY s.agent_name",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(per_agent, ("main".to_owned(), 2));

        // ClawOS's kernel: the active session of a sender on the channel it writes on
        // now (what idx_sessions_lookup serves), and a workspace's sessions.
        let clawos: (String, String, String, i64, String) = c
            .query_row(
                "SELECT session_id, remote_jid, status, turn_count, context_summary FROM sessions
                 WHERE workspace_id = ? AND channel = ? AND remote_jid = ? AND status = 'active'
                 ORDER BY last_message_at DESC LIMIT 1",
                params!["main", "sms", "+15550001"],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!(
            clawos,
            (
                written.session_id.clone(),
                "+15550001".to_owned(),
                "active".to_owned(),
                2,
                "GOAL: weather\nTURNS: 2".to_owned()
            )
        );
        let listed: i64 = c
            .query_row(
                "SELECT count(*) FROM sessions WHERE workspace_id = ?",
                ["main"],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(listed, 1);
        drop(c);

        // Closing the session shows in the ClawOS view.
        manager
            .store()
            .with_session(&written.key, |e| {
                e.status = Some(agent_sessions::SessionStatus::Closed);
            })
            .await
            .unwrap();
        let status: String = dashboard(&path)
            .query_row("SELECT status FROM sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(status, "closed");

        db.drop_views().await.unwrap();
        db.drop_views()
            .await
            .expect("dropping them again is no error");
        let views: i64 = Connection::open(&path)
            .unwrap()
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'view'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(views, 0);
        assert!(
            db.get(&written.key).await.unwrap().is_some(),
            "tables untouched"
        );
    }

    #[tokio::test]
    async fn rabs_finds_one_current_session_and_the_messages_its_summary_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let db = SqliteStore::open(&path).unwrap();
        let (manager, clock) = per_channel_manager(db.clone());
        let (latest, unsummarised) = summarised_then_one_more(&manager, &clock).await;
        db.create_views().await.unwrap();
        let c = dashboard(&path);
        // UNIQUE(person_id, agent_name): her most recent session; both in the history.
        let count = |view: &str| -> i64 {
            c.query_row(
                &format!("SELECT count(*) FROM brainframe.{view} WHERE person_id = $1 AND agent_name = $2"),
                params![PERSON, "main"],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            (count("type2_sessions"), count("type2_sessions_history")),
            (1, 2)
        );
        let (id, last): (String, Option<String>) = c
            .query_row(
                "SELECT id, last_message_in_summary FROM brainframe.type2_sessions \
                 WHERE person_id = $1 AND agent_name = $2",
                params![PERSON, "main"],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(id, latest);
        let last = last.expect("the rolling summary names the last message it covers");
        // RABS's maybeSummarise query, its uuid cast left out (SQLite has none).
        let messages: Vec<String> = c
            .prepare(
                "SELECT message FROM brainframe.type2_messages
                 WHERE person_id = $1 AND agent_identity = $2
                 AND ($3 IS NULL OR id > $3)
                 ORDER BY created_at",
            )
            .unwrap()
            .query_map(params![PERSON, "reggie", last], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(messages, [unsummarised]);
    }

    #[tokio::test]
    async fn a_replaced_session_keeps_its_rows_in_the_sqlite_views() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let db = SqliteStore::open(&path).unwrap();
        let manager = SessionManager::builder(db.clone())
            .transcripts(db.clone())
            .build()
            .unwrap();
        let (old, new) = reset_once(&manager).await;
        db.create_views().await.unwrap();
        let c = Connection::open(&path).unwrap();
        let status = |id: &str| -> String {
            c.query_row(
                "SELECT status FROM clawos_sessions WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            (status(&old), status(&new)),
            ("closed".into(), "active".into())
        );
        let joined = |sessions: &str| -> i64 {
            c.query_row(
                &format!("SELECT count(*) FROM type2_messages m JOIN {sessions} s ON m.session_id = s.id"),
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            joined("type2_sessions_history"),
            4,
            "every message finds its session in the history, the closed one too"
        );
        assert_eq!(
            joined("type2_sessions"),
            2,
            "the registry holds the current session only"
        );
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use agent_sessions::ops::ViewSchemas;
    use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, ToSql, Type};

    /// A UUID as PostgreSQL sends and takes it (16 bytes).
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct PgUuid(uuid::Uuid);

    impl ToSql for PgUuid {
        fn to_sql(
            &self,
            _: &Type,
            out: &mut tokio_postgres::types::private::BytesMut,
        ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
            out.extend_from_slice(self.0.as_bytes());
            Ok(IsNull::No)
        }
        fn accepts(ty: &Type) -> bool {
            *ty == Type::UUID
        }
        to_sql_checked!();
    }

    impl<'a> FromSql<'a> for PgUuid {
        fn from_sql(
            _: &Type,
            raw: &'a [u8],
        ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
            Ok(PgUuid(uuid::Uuid::from_slice(raw)?))
        }
        fn accepts(ty: &Type) -> bool {
            *ty == Type::UUID
        }
    }

    /// A `timestamptz`: microseconds since 2000-01-01 UTC.
    #[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
    struct PgTime(i64);

    impl<'a> FromSql<'a> for PgTime {
        fn from_sql(
            _: &Type,
            raw: &'a [u8],
        ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
            Ok(PgTime(i64::from_be_bytes(raw.try_into()?)))
        }
        fn accepts(ty: &Type) -> bool {
            *ty == Type::TIMESTAMPTZ
        }
    }

    impl PgTime {
        fn epoch_ms(self) -> i64 {
            self.0 / 1000 + 946_684_800_000
        }
    }

    fn uuid(text: &str) -> PgUuid {
        PgUuid(text.parse().unwrap())
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn rabs_and_clawos_queries_run_on_the_postgres_views() {
        let schema = common::TestSchema::new("views_store");
        let store = schema.store().await;
        let manager = SessionManager::builder(store.clone())
            .transcripts(store.clone())
            // One session per person across channels, so WhatsApp and SMS share it.
            .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerPeer))
            .build()
            .unwrap();
        let written = write_through_the_api(&manager).await;
        // Schemas of this test's own; RABS's SQL below names `brainframe`, replaced by
        // the test's schema and nothing else.
        let rabs = format!("{}_brainframe", schema.name);
        let clawos = format!("{}_clawos", schema.name);
        let views = ViewSchemas::new(&rabs, &clawos);
        assert!(matches!(
            store
                .create_views(&ViewSchemas::new(&schema.name, &clawos))
                .await,
            Err(agent_sessions::Error::InvalidOption { .. })
        ));
        store.create_views(&views).await.unwrap();
        store.create_views(&views).await.expect("again: replaced");
        let rabs_sql = |sql: &str| sql.replace("brainframe.", &format!("{rabs}."));

        let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);

        // RABS, starting a conversation: SELECT FROM type2_sessions WHERE person_id = $1 AND agent_name = $2
        let session = client
            .query_one(
                &rabs_sql("SELECT * FROM brainframe.type2_sessions WHERE person_id = $1 AND agent_name = $2"),
                &[&PERSON, &"main"],
            )
            .await
            .unwrap();
        let id: PgUuid = session.get("id");
        assert_eq!(id, uuid(&written.session_id), "a UUID session id is the id");
        assert_eq!(
            session.get::<_, Option<String>>("person_type").as_deref(),
            Some("staff")
        );
        assert_eq!(
            session
                .get::<_, Option<String>>("agent_identity")
                .as_deref(),
            Some("reggie")
        );
        assert_eq!(session.get::<_, String>("engine_type"), "openclaw");
        assert_eq!(
            session.get::<_, Option<String>>("engine_session_id"),
            None,
            "the engine has not replied: RABS starts it without --session-id"
        );
        assert_eq!(session.get::<_, String>("channel"), "whatsapp");
        assert_eq!(
            session.get::<_, Option<PgUuid>>("last_message_in_summary"),
            None
        );
        assert_eq!(
            session.get::<_, PgTime>("summary_updated_at").epoch_ms(),
            1_770_000_000_000
        );
        let columns: Vec<(&str, Type)> = session
            .columns()
            .iter()
            .map(|c| (c.name(), c.type_().clone()))
            .collect();
        assert_eq!(
            columns,
            vec![
                ("id", Type::UUID),
                ("person_type", Type::TEXT),
                ("person_id", Type::TEXT),
                ("agent_identity", Type::TEXT),
                ("agent_name", Type::TEXT),
                ("engine_type", Type::TEXT),
                ("engine_session_id", Type::TEXT),
                ("channel", Type::TEXT),
                ("summary", Type::TEXT),
                ("summary_updated_at", Type::TIMESTAMPTZ),
                ("last_message_in_summary", Type::UUID),
                ("metadata", Type::JSONB),
                ("created_at", Type::TIMESTAMPTZ),
                ("updated_at", Type::TIMESTAMPTZ),
            ],
            "RABS's type2_sessions columns and types"
        );

        // The other engine variant: an id that is not a UUID becomes one (the same
        // every time), and the engine's own session id.
        let droid_sql = rabs_sql(
            "SELECT id, engine_type, engine_session_id FROM brainframe.type2_sessions \
             WHERE person_id = $1 AND agent_name = $2",
        );
        let droid = client
            .query_one(&droid_sql, &[&PERSON, &"reggie_fd"])
            .await
            .unwrap();
        let again = client
            .query_one(&droid_sql, &[&PERSON, &"reggie_fd"])
            .await
            .unwrap();
        assert_eq!(droid.get::<_, PgUuid>(0), again.get::<_, PgUuid>(0));
        assert_eq!(
            (droid.get::<_, String>(1), droid.get::<_, String>(2)),
            ("droid".to_owned(), "d-1".to_owned())
        );

        // RABS, switching engine types: SELECT summary FROM type2_sessions WHERE person_id AND agent_identity
        let summary: String = client
            .query_one(
                &rabs_sql("SELECT summary FROM brainframe.type2_sessions WHERE person_id = $1 AND agent_identity = $2"),
                &[&PERSON, &"reggie"],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(summary, "Asked about the weather.");

        // RABS, maybeSummarise, both queries as written.
        let last: PgTime = client
            .query_one(
                &rabs_sql(
                    "SELECT created_at FROM brainframe.type2_messages
WHERE session_id = $1 ORDER BY created_at DESC LIMIT 1",
                ),
                &[&id],
            )
            .await
            .unwrap()
            .get(0);
        let new_messages = client
            .query(
                &rabs_sql(
                    "SELECT direction, message, agent_name, channel, created_at
FROM brainframe.type2_messages
WHERE person_id = $1 AND agent_identity = $2
AND ($3::uuid IS NULL OR id > $3)
ORDER BY created_at",
                ),
                &[&PERSON, &"reggie", &None::<PgUuid>],
            )
            .await
            .unwrap();
        let lines: Vec<String> = new_messages
            .iter()
            .map(|m| {
                format!(
                    "[{}/{}/{}] {}",
                    m.get::<_, String>(0),
                    m.get::<_, String>(2),
                    m.get::<_, String>(3),
                    m.get::<_, String>(1)
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                "[inbound/reggie_oc/whatsapp] what's the weather like?",
                "[outbound/reggie_oc/whatsapp] Sunny, 24°C."
            ]
        );
        assert_eq!(new_messages[1].get::<_, PgTime>(4), last);

        // RABS, embedType2Message and categoriseType2Exchange.
        let [inbound, outbound] =
            [&written.message_ids[0], &written.message_ids[1]].map(|m| uuid(m));
        let one = client
            .query_one(
                &rabs_sql("SELECT id, message FROM brainframe.type2_messages WHERE id = $1"),
                &[&inbound],
            )
            .await
            .unwrap();
        assert_eq!(one.get::<_, PgUuid>(0), inbound);
        let exchange = client
            .query(
                &rabs_sql("SELECT direction, message FROM brainframe.type2_messages WHERE id = ANY($1) ORDER BY created_at"),
                &[&vec![inbound, outbound]],
            )
            .await
            .unwrap();
        let transcript: Vec<String> = exchange
            .iter()
            .map(|m| format!("{}: {}", m.get::<_, String>(0), m.get::<_, String>(1)))
            .collect();
        assert_eq!(
            transcript.join("\n"),
            "inbound: what's the weather like?\noutbound: Sunny, 24°C."
        );

        // The message log's other columns and their types.
        let row = client
            .query_one(
                &rabs_sql(
                    "SELECT processing_ms, tool_calls_count, correlation_id, metadata, embedding, category
                     FROM brainframe.type2_messages WHERE id = $1",
                ),
                &[&outbound],
            )
            .await
            .unwrap();
        let types: Vec<Type> = row.columns().iter().map(|c| c.type_().clone()).collect();
        assert_eq!(
            types,
            [
                Type::INT4,
                Type::INT4,
                Type::UUID,
                Type::JSONB,
                Type::FLOAT4_ARRAY,
                Type::TEXT
            ]
        );
        assert_eq!(row.get::<_, Option<i32>>(0), Some(840));
        assert_eq!(row.get::<_, i32>(1), 1);
        assert_eq!(row.get::<_, Option<PgUuid>>(2), Some(uuid(CORRELATION)));
        assert_eq!(row.get::<_, Option<String>>(5), None, "not categorised yet");

        // A dashboard's join: messages per agent variant.
        let per_agent = client
            .query_one(
                &rabs_sql(
                    "SELECT s.agent_name, count(m.id) FROM brainframe.type2_sessions s
                     JOIN brainframe.type2_messages m ON m.session_id = s.id GROUP BY s.agent_name",
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            (per_agent.get::<_, String>(0), per_agent.get::<_, i64>(1)),
            ("main".to_owned(), 2)
        );

        // ClawOS's kernel, its unqualified `sessions` found through the search path.
        client
            .batch_execute(&format!("SET search_path = {clawos}"))
            .await
            .unwrap();
        let kernel = client
            .query_one(
                "SELECT session_id, remote_jid, status, turn_count, context_summary, created_at, last_message_at
                 FROM sessions
                 WHERE workspace_id = $1 AND channel = $2 AND remote_jid = $3 AND status = 'active'
                 ORDER BY last_message_at DESC LIMIT 1",
                &[&"main", &"sms", &"+15550001"],
            )
            .await
            .unwrap();
        assert_eq!(kernel.get::<_, String>(0), written.session_id);
        assert_eq!(kernel.get::<_, String>(1), "+15550001");
        assert_eq!(kernel.get::<_, String>(2), "active");
        assert_eq!(kernel.get::<_, i32>(3), 2);
        assert_eq!(kernel.get::<_, String>(4), "GOAL: weather\nTURNS: 2");
        let last_message_at: String = kernel.get(6);
        assert!(
            last_message_at.ends_with('Z') && last_message_at.len() == 24,
            "{last_message_at}"
        );

        store.drop_views(&views).await.unwrap();
        store.drop_views(&views).await.expect("again: no error");
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_views WHERE schemaname = $1 OR schemaname = $2",
                &[&rabs, &clawos],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
        client
            .batch_execute(&format!(
                "DROP SCHEMA {rabs} CASCADE; DROP SCHEMA {clawos} CASCADE"
            ))
            .await
            .unwrap();
        schema.drop().await;
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn rabs_finds_one_current_session_and_the_messages_its_summary_lacks() {
        let schema = common::TestSchema::new("views_summary");
        let store = schema.store().await;
        let (manager, clock) = per_channel_manager(store.clone());
        let (latest, unsummarised) = summarised_then_one_more(&manager, &clock).await;
        let (rabs, clawos) = (format!("{}_r", schema.name), format!("{}_c", schema.name));
        let views = ViewSchemas::new(&rabs, &clawos);
        store.create_views(&views).await.unwrap();
        let rabs_sql = |sql: &str| sql.replace("brainframe.", &format!("{rabs}."));
        let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // RABS's lookup, as written: one row, her most recent session.
        let session = client
            .query_one(
                &rabs_sql("SELECT * FROM brainframe.type2_sessions WHERE person_id = $1 AND agent_name = $2"),
                &[&PERSON, &"main"],
            )
            .await
            .unwrap();
        assert_eq!(session.get::<_, PgUuid>("id"), uuid(&latest));
        let history: i64 = client
            .query_one(
                &rabs_sql("SELECT count(*) FROM brainframe.type2_sessions_history WHERE person_id = $1 AND agent_name = $2"),
                &[&PERSON, &"main"],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(history, 2);
        let last: Option<PgUuid> = session.get("last_message_in_summary");
        assert!(
            last.is_some(),
            "the rolling summary names the last message it covers"
        );
        // RABS's maybeSummarise query, as written.
        let messages = client
            .query(
                &rabs_sql(
                    "SELECT direction, message, agent_name, channel, created_at
FROM brainframe.type2_messages
WHERE person_id = $1 AND agent_identity = $2
AND ($3::uuid IS NULL OR id > $3)
ORDER BY created_at",
                ),
                &[&PERSON, &"reggie", &last],
            )
            .await
            .unwrap();
        let texts: Vec<String> = messages.iter().map(|m| m.get(1)).collect();
        assert_eq!(texts, [unsummarised]);
        store.drop_views(&views).await.unwrap();
        client
            .batch_execute(&format!(
                "DROP SCHEMA {rabs} CASCADE; DROP SCHEMA {clawos} CASCADE"
            ))
            .await
            .unwrap();
        schema.drop().await;
    }

    #[tokio::test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
    )]
    async fn a_replaced_session_keeps_its_rows_in_the_postgres_views() {
        let schema = common::TestSchema::new("views_closed");
        let store = schema.store().await;
        let manager = SessionManager::builder(store.clone())
            .transcripts(store.clone())
            .build()
            .unwrap();
        let (old, new) = reset_once(&manager).await;
        let (rabs, clawos) = (format!("{}_r", schema.name), format!("{}_c", schema.name));
        let views = ViewSchemas::new(&rabs, &clawos);
        store.create_views(&views).await.unwrap();
        let (client, connection) = tokio_postgres::connect(&schema.server, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut statuses = Vec::new();
        for id in [&old, &new] {
            let row = client
                .query_one(
                    &format!("SELECT status FROM {clawos}.sessions WHERE session_id = $1"),
                    &[id],
                )
                .await
                .unwrap();
            statuses.push(row.get::<_, String>(0));
        }
        assert_eq!(statuses, ["closed", "active"]);
        let mut joined = Vec::new();
        for sessions in ["type2_sessions_history", "type2_sessions"] {
            let count: i64 = client
                .query_one(
                    &format!(
                        "SELECT count(*) FROM {rabs}.type2_messages m JOIN {rabs}.{sessions} s ON m.session_id = s.id"
                    ),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            joined.push(count);
        }
        assert_eq!(
            joined,
            [4, 2],
            "every message finds its session in the history, the closed one too; the \
             registry holds the current session only"
        );
        store.drop_views(&views).await.unwrap();
        client
            .batch_execute(&format!(
                "DROP SCHEMA {rabs} CASCADE; DROP SCHEMA {clawos} CASCADE"
            ))
            .await
            .unwrap();
        schema.drop().await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_server_error_says_what_the_server_said() {
    use agent_sessions::ops::ViewSchemas;
    let schema = common::TestSchema::new("views_refused");
    let store = schema.store().await;
    // The server refuses views in its own catalog.
    let error = store
        .create_views(&ViewSchemas::new(
            "pg_catalog",
            format!("{}_c", schema.name),
        ))
        .await
        .unwrap_err();
    let said = error.to_string();
    assert!(said.contains("SQLSTATE"), "{said}");
    assert!(!said.ends_with("db error"), "{said}");
    schema.drop().await;
}
