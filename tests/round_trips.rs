//! What a turn asks of its database: of a PostgreSQL server, counted on the wire by a
//! proxy between the crate and the server (round trips — requests sent together before
//! the first answer count once — and transactions); of a SQLite database, the
//! transactions that wrote, counted in its write-ahead log.

#[cfg(feature = "postgres")]
mod common;
#[cfg(feature = "postgres")]
#[path = "common/wire.rs"]
mod wire;

use agent_sessions::prelude::*;
#[cfg(feature = "postgres")]
use wire::{WireCount, WireCounter};

#[cfg(feature = "postgres")]
/// The store URL of `schema` through `counter`.
fn through(counter: &WireCounter, schema: &common::TestSchema) -> String {
    let (user, rest) = schema
        .server
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .expect("a test server URL names its user: postgres://user@host:port/database");
    let (_, database) = rest.split_once('/').expect("the URL names a database");
    let database = database.split('?').next().unwrap_or(database);
    format!(
        "postgres://{user}@127.0.0.1:{}/{database}?sslmode=disable&schema={}",
        counter.port(),
        schema.name
    )
}

#[cfg(feature = "postgres")]
/// The server's `host:port`, from the test server's URL.
fn upstream(server: &str) -> String {
    let rest = server.split_once('@').map_or(server, |(_, rest)| rest);
    let host = rest.split(['/', '?']).next().unwrap_or(rest);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

#[cfg(feature = "postgres")]
fn check(what: &str, count: &WireCount, round_trips: usize, transactions: usize) {
    assert!(
        count.round_trips <= round_trips && count.transactions <= transactions,
        "{what}: {} round trips (at most {round_trips}), {} transactions (at most \
         {transactions}):\n{}",
        count.round_trips,
        count.transactions,
        count.statements.join("\n")
    );
}

#[cfg(feature = "postgres")]
/// A steady-state turn of a direct chat — `turn()`, `messages()`, `complete()` — takes
/// 8 round trips in all (11 when each append read the transcript's tail first and the
/// end of the turn read the session for its summary; 47 when every statement was
/// prepared anew and every transaction began and committed in round trips of their
/// own), in 6 transactions: 4 that write — the session's update, the inbound line, the
/// reply line, the turn's bookkeeping — a system-event drain, and 1 read.
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_turn_takes_eight_round_trips_on_postgres() {
    let schema = common::TestSchema::new("round_trips");
    let counter = WireCounter::start(&upstream(&schema.server));
    let manager = SessionManager::connect(&through(&counter, &schema))
        .await
        .unwrap()
        .build()
        .unwrap();
    let message = InboundMessage::direct("telegram", "42", "When is my shift?");
    // The pool's connections have prepared what a turn runs.
    for _ in 0..6 {
        let turn = manager.turn(&message).await.unwrap();
        turn.messages().await.unwrap();
        turn.complete("Thursday at 9.").await.unwrap();
    }
    for _ in 0..3 {
        counter.take();
        let turn = manager.turn(&message).await.unwrap();
        // The session's update (2), its system events drained (1), the inbound line
        // after the tail this worker wrote last (1).
        check("turn()", &counter.take(), 4, 3);
        let messages = turn.messages().await.unwrap();
        assert!(!messages.is_empty());
        // The conversation, kept from the last turn: the lines since, in one statement.
        check("messages()", &counter.take(), 1, 1);
        turn.complete("Thursday at 9.").await.unwrap();
        // The reply line (1), the bookkeeping (2).
        check("complete()", &counter.take(), 3, 2);
    }
    schema.drop().await;
}

/// The transactions that wrote to a SQLite database in WAL mode, counted from its
/// write-ahead log: each frame that ends a transaction carries the database's size
/// (other frames carry 0), and frames of the log's current generation carry its salt.
#[cfg(feature = "sqlite")]
fn commits_in_wal(wal: &std::path::Path) -> (u64, usize) {
    let Ok(bytes) = std::fs::read(wal) else {
        return (0, 0);
    };
    if bytes.len() < 32 {
        return (0, 0);
    }
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let page_size = word(8) as usize;
    let salts = (word(16), word(20));
    let generation = u64::from(word(12)) << 32 | u64::from(salts.0);
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page_size <= bytes.len() {
        if (word(at + 8), word(at + 12)) != salts {
            break;
        }
        if word(at + 4) != 0 {
            commits += 1;
        }
        at += 24 + page_size;
    }
    (generation, commits)
}

/// A steady-state turn of a direct chat on SQLite writes in 4 transactions: the
/// session's update and the inbound line in `turn()`, the reply line and the turn's
/// bookkeeping in `complete()`; `messages()` writes nothing.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_turn_writes_in_four_transactions_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("sessions.db");
    let manager = SessionManager::connect(&format!("sqlite:{}", database.display()))
        .await
        .unwrap()
        .build()
        .unwrap();
    let wal = dir.path().join("sessions.db-wal");
    let message = InboundMessage::direct("telegram", "42", "When is my shift?");
    for _ in 0..3 {
        let turn = manager.turn(&message).await.unwrap();
        turn.messages().await.unwrap();
        turn.complete("Thursday at 9.").await.unwrap();
    }
    let (mut measured, mut tries) = (0, 0);
    while measured < 3 {
        tries += 1;
        assert!(
            tries < 20,
            "the log was begun again during every measurement"
        );
        let start = commits_in_wal(&wal);
        let turn = manager.turn(&message).await.unwrap();
        let opened = commits_in_wal(&wal);
        turn.messages().await.unwrap();
        let read = commits_in_wal(&wal);
        turn.complete("Thursday at 9.").await.unwrap();
        let completed = commits_in_wal(&wal);
        if start.0 != completed.0 {
            // The log was checkpointed and begun again meanwhile: measured again.
            continue;
        }
        assert_eq!(opened.1 - start.1, 2, "turn()");
        assert_eq!(read.1 - opened.1, 0, "messages()");
        assert_eq!(completed.1 - read.1, 2, "complete()");
        measured += 1;
    }
}
