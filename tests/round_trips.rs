//! What a turn asks of a PostgreSQL server, counted on the wire by a proxy between the
//! crate and the server: round trips (requests sent together before the first answer
//! count once) and transactions.

#![cfg(feature = "postgres")]

mod common;
#[path = "common/wire.rs"]
mod wire;

use agent_sessions::prelude::*;
use wire::{WireCount, WireCounter};

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

/// A steady-state turn of a direct chat — `turn()`, `messages()`, `complete()` — takes
/// 11 round trips in all (it took 47 when every statement was prepared anew and every
/// transaction began and committed in round trips of their own), in 7 transactions
/// (8 before): 4 that write — the session's update, the inbound line, the reply line,
/// the turn's bookkeeping — a system-event drain, and 2 reads of one statement each.
#[tokio::test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
async fn a_turn_takes_eleven_round_trips_on_postgres() {
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
        // (2).
        check("turn()", &counter.take(), 5, 3);
        let messages = turn.messages().await.unwrap();
        assert!(!messages.is_empty());
        // The conversation, kept from the last turn: the lines since, in one statement.
        check("messages()", &counter.take(), 1, 1);
        turn.complete("Thursday at 9.").await.unwrap();
        // The reply line (2), the session for its summary (1), the bookkeeping (2).
        check("complete()", &counter.take(), 5, 3);
    }
    schema.drop().await;
}
