//! The SQLite schema: one migration per version, applied in order on open.

use super::*;

/// The schema, one migration per version; applied in order on open.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    session_key    TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    updated_at     INTEGER NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    revision       INTEGER NOT NULL,
    entry          TEXT NOT NULL
);
CREATE INDEX sessions_by_agent_activity ON sessions (agent_id, updated_at DESC);
CREATE INDEX sessions_by_activity ON sessions (updated_at DESC);
CREATE INDEX sessions_by_person ON sessions (person_id, agent_identity) WHERE person_id IS NOT NULL;
CREATE INDEX sessions_by_session_id ON sessions (session_id);

CREATE TABLE transcripts (
    agent_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    line_count INTEGER NOT NULL,
    leaf       TEXT,
    PRIMARY KEY (agent_id, name)
);
CREATE INDEX transcripts_by_session ON transcripts (agent_id, session_id);

CREATE TABLE transcript_lines (
    agent_id       TEXT NOT NULL,
    name           TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    line           TEXT NOT NULL,
    log_at         INTEGER,
    person_id      TEXT,
    agent_identity TEXT,
    session_key    TEXT,
    PRIMARY KEY (agent_id, name, seq)
);
CREATE INDEX log_by_person ON transcript_lines (person_id, agent_identity, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_agent ON transcript_lines (agent_id, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_session_key ON transcript_lines (session_key, log_at) WHERE log_at IS NOT NULL;
"#,
    r#"
CREATE TABLE search_messages (
    id             TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    session_key    TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    channel        TEXT,
    direction      TEXT,
    correlation_id TEXT,
    at             INTEGER NOT NULL,
    text           TEXT NOT NULL,
    category       TEXT,
    embedding      BLOB
);
CREATE INDEX search_messages_by_time ON search_messages (at);
CREATE INDEX search_messages_by_session ON search_messages (session_id, at);
CREATE INDEX search_messages_by_person ON search_messages (person_id, at);
CREATE INDEX search_messages_uncategorized ON search_messages (at) WHERE category IS NULL;
CREATE INDEX search_messages_unembedded ON search_messages (at) WHERE embedding IS NULL;
CREATE VIRTUAL TABLE search_text USING fts5(
    text, content = 'search_messages', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER search_messages_indexed AFTER INSERT ON search_messages BEGIN
    INSERT INTO search_text (rowid, text) VALUES (new.rowid, new.text);
END;
"#,
    r#"
ALTER TABLE sessions ADD COLUMN status TEXT NOT NULL DEFAULT 'idle';
UPDATE sessions SET status = COALESCE(json_extract(entry, '$.status'), 'idle')
    WHERE json_valid(entry) AND json_type(entry, '$.status') = 'text';
CREATE INDEX sessions_by_status ON sessions (status, updated_at DESC);
CREATE TABLE closed_sessions (
    session_id     TEXT PRIMARY KEY,
    session_key    TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    updated_at     INTEGER NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    status         TEXT NOT NULL,
    revision       INTEGER NOT NULL,
    entry          TEXT NOT NULL,
    closed_at      INTEGER NOT NULL
);
CREATE INDEX closed_sessions_by_key ON closed_sessions (session_key, closed_at DESC);
CREATE INDEX closed_sessions_by_activity ON closed_sessions (updated_at DESC);
"#,
    r#"
CREATE TABLE group_history (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    group_key  TEXT NOT NULL,
    sender     TEXT NOT NULL,
    body       TEXT NOT NULL,
    at         INTEGER,
    message_id TEXT
);
CREATE INDEX group_history_by_group ON group_history (group_key, id);
"#,
    r#"
CREATE TABLE system_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    text        TEXT NOT NULL,
    at          INTEGER NOT NULL
);
CREATE INDEX system_events_by_session ON system_events (session_key, id);
"#,
    r#"
CREATE TABLE transcript_feed (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    notice TEXT NOT NULL
);
"#,
    r#"
CREATE TABLE search_postings (
    term     TEXT NOT NULL,
    block    INTEGER NOT NULL,
    postings INTEGER NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (term, block)
) WITHOUT ROWID;
CREATE TABLE search_postings_state (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_through INTEGER NOT NULL,
    messages        INTEGER NOT NULL,
    words           INTEGER NOT NULL
);
INSERT INTO search_postings_state VALUES (1, 0, 0, 0);
"#,
    r#"
ALTER TABLE group_history ADD COLUMN claim_id TEXT;
ALTER TABLE group_history ADD COLUMN claim TEXT;
CREATE TABLE group_history_seen (
    group_key  TEXT NOT NULL,
    message_id TEXT NOT NULL,
    at         INTEGER NOT NULL,
    PRIMARY KEY (group_key, message_id)
);
CREATE INDEX group_history_seen_by_time ON group_history_seen (at);
"#,
    // A listing's whole order, so a page is read from the index in order and the scan
    // stops when the page is full (with only `updated_at` indexed, SQLite sorted every
    // session to find the first page).
    r#"
CREATE INDEX sessions_by_listing ON sessions (updated_at DESC, session_key, session_id);
DROP INDEX sessions_by_activity;
"#,
    // Who wrote a line of group chatter, so a person's chatter can be erased.
    r#"
ALTER TABLE group_history ADD COLUMN sender_id TEXT;
"#,
    // The lines that may be compactions, so a transcript's last compaction is found
    // without reading the lines after it.
    r#"
CREATE INDEX transcript_compactions ON transcript_lines (agent_id, name, seq)
    WHERE instr(line, 'compaction') > 0;
"#,
    // The search postings made again: before, a message numbered as one removed from
    // the index's end had been (SQLite gives the number again) was never indexed.
    r#"
DELETE FROM search_postings;
UPDATE search_postings_state SET indexed_through = 0, messages = 0, words = 0 WHERE id = 1;
"#,
];

/// The last migration that leaves messages to index (it adds `search_postings`, or
/// empties it to be made again): they are indexed when it is applied.
const POSTINGS_MIGRATION: i64 = 12;

pub(super) fn schema_version(connection: &Connection) -> Result<i64> {
    connection
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            [],
            |row| row.get(0),
        )
        .map_err(db_error("read the schema version"))
}

/// Applies the migrations the database lacks, in one write transaction (two processes
/// opening a new database at once migrate it once).
pub(super) fn migrate(connection: &Connection) -> Result<()> {
    let latest = MIGRATIONS.len() as i64;
    connection
        .execute_batch("BEGIN IMMEDIATE")
        .map_err(db_error("begin a migration"))?;
    let result = (|| {
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                    version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
            )
            .map_err(db_error("create the migrations table"))?;
        let found = schema_version(connection)?;
        if found > latest {
            return Err(Error::UnsupportedSchema {
                backend: BACKEND,
                found,
                supported: latest,
            });
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            connection
                .execute_batch(migration)
                .map_err(db_error("migrate the schema"))?;
            connection
                .execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                    params![index as i64 + 1, Utc::now().timestamp_millis()],
                )
                .map_err(db_error("record a migration"))?;
            tracing::info!(version = index + 1, "sqlite schema migrated");
        }
        if found < POSTINGS_MIGRATION {
            super::search::index_new_messages(connection)?;
        }
        Ok(())
    })();
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    connection
        .execute_batch(end)
        .map_err(db_error("finish a migration"))?;
    result
}
