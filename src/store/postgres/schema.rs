//! The PostgreSQL schema: one migration per version, applied in order on open.

/// The schema, one migration per version, `{schema}` standing for the store's schema.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE {schema}.sessions (
    session_key    TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    updated_at     BIGINT NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    revision       BIGINT NOT NULL,
    entry          TEXT NOT NULL
);
CREATE INDEX sessions_by_agent_activity ON {schema}.sessions (agent_id, updated_at DESC);
CREATE INDEX sessions_by_activity ON {schema}.sessions (updated_at DESC);
CREATE INDEX sessions_by_person ON {schema}.sessions (person_id, agent_identity) WHERE person_id IS NOT NULL;
CREATE INDEX sessions_by_session_id ON {schema}.sessions (session_id);

CREATE TABLE {schema}.transcripts (
    agent_id   TEXT NOT NULL,
    name       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    line_count BIGINT NOT NULL,
    leaf       TEXT,
    PRIMARY KEY (agent_id, name)
);
CREATE INDEX transcripts_by_session ON {schema}.transcripts (agent_id, session_id);

CREATE TABLE {schema}.transcript_lines (
    agent_id       TEXT NOT NULL,
    name           TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    line           TEXT NOT NULL,
    log_at         BIGINT,
    person_id      TEXT,
    agent_identity TEXT,
    session_key    TEXT,
    PRIMARY KEY (agent_id, name, seq)
);
CREATE INDEX log_by_person ON {schema}.transcript_lines (person_id, agent_identity, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_agent ON {schema}.transcript_lines (agent_id, log_at) WHERE log_at IS NOT NULL;
CREATE INDEX log_by_session_key ON {schema}.transcript_lines (session_key, log_at) WHERE log_at IS NOT NULL;
"#,
    r#"
CREATE TABLE {schema}.search_messages (
    id             TEXT PRIMARY KEY,
    agent_id       TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    session_key    TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    channel        TEXT,
    direction      TEXT,
    correlation_id TEXT,
    at             BIGINT NOT NULL,
    text           TEXT NOT NULL,
    category       TEXT,
    embedding      REAL[],
    words          TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX search_messages_words ON {schema}.search_messages USING GIN (words);
CREATE INDEX search_messages_by_time ON {schema}.search_messages (at);
CREATE INDEX search_messages_by_session ON {schema}.search_messages (session_id, at);
CREATE INDEX search_messages_by_person ON {schema}.search_messages (person_id, at);
CREATE INDEX search_messages_uncategorized ON {schema}.search_messages (at) WHERE category IS NULL;
CREATE INDEX search_messages_unembedded ON {schema}.search_messages (at) WHERE embedding IS NULL;
"#,
    r#"
ALTER TABLE {schema}.sessions ADD COLUMN status TEXT NOT NULL DEFAULT 'idle';
CREATE FUNCTION pg_temp.agent_sessions_status(entry TEXT) RETURNS TEXT LANGUAGE plpgsql AS $$
DECLARE parsed JSONB;
BEGIN
    parsed := entry::jsonb;
    IF jsonb_typeof(parsed -> 'status') = 'string' THEN
        RETURN parsed ->> 'status';
    END IF;
    RETURN NULL;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;
UPDATE {schema}.sessions SET status = COALESCE(pg_temp.agent_sessions_status(entry), 'idle');
CREATE INDEX sessions_by_status ON {schema}.sessions (status, updated_at DESC);
CREATE TABLE {schema}.closed_sessions (
    session_id     TEXT PRIMARY KEY,
    session_key    TEXT NOT NULL,
    agent_id       TEXT NOT NULL,
    updated_at     BIGINT NOT NULL,
    channel        TEXT,
    chat_type      TEXT,
    person_id      TEXT,
    agent_identity TEXT,
    status         TEXT NOT NULL,
    revision       BIGINT NOT NULL,
    entry          TEXT NOT NULL,
    closed_at      BIGINT NOT NULL
);
CREATE INDEX closed_sessions_by_key ON {schema}.closed_sessions (session_key, closed_at DESC);
CREATE INDEX closed_sessions_by_activity ON {schema}.closed_sessions (updated_at DESC);
"#,
    r#"
CREATE TABLE {schema}.group_history (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_key  TEXT NOT NULL,
    sender     TEXT NOT NULL,
    body       TEXT NOT NULL,
    at         BIGINT,
    message_id TEXT
);
CREATE INDEX group_history_by_group ON {schema}.group_history (group_key, id);
"#,
    r#"
CREATE TABLE {schema}.system_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_key TEXT NOT NULL,
    text        TEXT NOT NULL,
    at          BIGINT NOT NULL
);
CREATE INDEX system_events_by_session ON {schema}.system_events (session_key, id);
"#,
    r#"
ALTER TABLE {schema}.search_messages ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX search_messages_by_seq ON {schema}.search_messages (seq);
CREATE TABLE {schema}.search_postings (
    term     TEXT NOT NULL,
    block    BIGINT NOT NULL,
    postings INTEGER NOT NULL,
    data     BYTEA NOT NULL,
    PRIMARY KEY (term, block)
);
CREATE TABLE {schema}.search_postings_state (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_through BIGINT NOT NULL,
    messages        BIGINT NOT NULL,
    words           BIGINT NOT NULL
);
INSERT INTO {schema}.search_postings_state VALUES (1, 0, 0, 0);
CREATE TABLE {schema}.search_vector_blocks (
    block BIGINT PRIMARY KEY,
    data  BYTEA NOT NULL
);
ALTER TABLE {schema}.search_vector_blocks ALTER COLUMN data SET STORAGE EXTERNAL;
"#,
    r#"
ALTER TABLE {schema}.group_history ADD COLUMN claim_id TEXT;
ALTER TABLE {schema}.group_history ADD COLUMN claim TEXT;
CREATE TABLE {schema}.group_history_seen (
    group_key  TEXT NOT NULL,
    message_id TEXT NOT NULL,
    at         BIGINT NOT NULL,
    PRIMARY KEY (group_key, message_id)
);
CREATE INDEX group_history_seen_by_time ON {schema}.group_history_seen (at);
"#,
    // Who wrote a line of group chatter, so a person's chatter can be erased.
    r#"
ALTER TABLE {schema}.group_history ADD COLUMN sender_id TEXT;
"#,
    // The lines that may be compactions, so a transcript's last compaction is found
    // without reading the lines after it.
    r#"
CREATE INDEX transcript_compactions ON {schema}.transcript_lines (agent_id, name, seq)
    WHERE strpos(line, 'compaction') > 0;
"#,
];

/// The migration that adds `search_postings` and `search_vector_blocks`: messages and
/// vectors stored before it are indexed when it is applied.
pub(super) const POSTINGS_MIGRATION: i64 = 6;
