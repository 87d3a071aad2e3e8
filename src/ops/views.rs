//! SQL views in RABS's and ClawOS's shapes (documented in `ops`).

#[cfg(any(feature = "postgres", test))]
use crate::error::{Error, Result};

/// Where the PostgreSQL views live: a schema for RABS's views and one for ClawOS's,
/// each other than the store's own (which has a table called `sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ViewSchemas {
    /// The schema of `type2_sessions` and `type2_messages` (default `brainframe`, as
    /// RABS's SQL names it).
    pub rabs: String,
    /// The schema of ClawOS's `sessions` (default `clawos`).
    pub clawos: String,
}

impl Default for ViewSchemas {
    fn default() -> Self {
        ViewSchemas {
            rabs: "brainframe".into(),
            clawos: "clawos".into(),
        }
    }
}

impl ViewSchemas {
    /// The views in `rabs` and `clawos`.
    ///
    /// ```
    /// use agent_sessions::ops::ViewSchemas;
    ///
    /// let schemas = ViewSchemas::new("analytics", "kernel");
    /// assert_eq!(schemas.rabs, "analytics");
    /// assert_eq!(ViewSchemas::default().rabs, "brainframe");
    /// ```
    pub fn new(rabs: impl Into<String>, clawos: impl Into<String>) -> Self {
        ViewSchemas {
            rabs: rabs.into(),
            clawos: clawos.into(),
        }
    }

    /// Refuses names that are not plain schema names, and the store's own schema.
    #[cfg(any(feature = "postgres", test))]
    pub(crate) fn check(&self, store_schema: &str) -> Result<()> {
        for name in [&self.rabs, &self.clawos] {
            if !plain_name(name) {
                return Err(Error::InvalidOption {
                    option: "view schema",
                    problem: "a schema name is 1-63 characters of [a-z0-9_] starting with a \
                              letter or _",
                });
            }
            if name == store_schema {
                return Err(Error::InvalidOption {
                    option: "view schema",
                    problem: "the views need a schema other than the store's (which has a \
                              table called `sessions`)",
                });
            }
        }
        Ok(())
    }
}

#[cfg(any(feature = "postgres", test))]
fn plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The current sessions and the closed ones a replacement kept, as one row set (`j`:
/// the entry as JSON, by `entry_json`): a closed session keeps its row in RABS's and
/// ClawOS's tables, and its messages keep their session.
fn sessions_and_closed(schema: &str, entry_json: &str) -> String {
    let columns =
        "session_id, session_key, agent_id, updated_at, channel, person_id, agent_identity";
    format!(
        "SELECT {columns}, {entry_json} AS j FROM {schema}sessions \
         UNION ALL SELECT {columns}, {entry_json} AS j FROM {schema}closed_sessions"
    )
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The current sessions, one per person and agent (RABS's `UNIQUE(person_id,
/// agent_name)`): of a person's current sessions with one agent, the most recently
/// active; every session without a person.
fn current_per_person(schema: &str, entry_json: &str) -> String {
    let columns =
        "session_id, session_key, agent_id, updated_at, channel, person_id, agent_identity";
    format!(
        "SELECT {columns}, j FROM (SELECT {columns}, {entry_json} AS j, \
         row_number() OVER (PARTITION BY person_id, agent_id \
         ORDER BY updated_at DESC, session_id) AS n FROM {schema}sessions) AS c \
         WHERE person_id IS NULL OR n = 1"
    )
}

/// The largest value a 12-hex-digit field of a message id holds.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const MAX_ID_FIELD: u64 = (1 << 48) - 1;

/// RABS's `type2_messages.id` of the message logged at `at` (epoch milliseconds) in
/// session `session_id` at `offset` — what the SQL views show, so a host can find the
/// row of a message it logged, or compare with `last_message_in_summary`.
///
/// Ids grow with the message log's order: by time, then session id (its first four
/// bytes), then offset; so RABS's incremental query (`id > last_message_in_summary`)
/// finds the messages logged after the last one a summary covers.
///
/// ```
/// use agent_sessions::store::LogCursor;
/// use agent_sessions::ops::type2_message_id;
///
/// let earlier = LogCursor { at: 1_770_000_000_000, session_id: "0b6c1f0e".into(), offset: 7 };
/// let later = LogCursor { at: 1_770_000_000_001, session_id: "0a00".into(), offset: 2 };
/// assert!(type2_message_id(&earlier) < type2_message_id(&later));
/// assert_eq!(type2_message_id(&earlier).to_string(), "019c1c38-a400-3062-3663-000000000007");
/// ```
pub fn type2_message_id(cursor: &crate::store::entry::LogCursor) -> uuid::Uuid {
    let prefix = cursor.session_id.as_bytes();
    let mut session = [0u8; 4];
    let len = prefix.len().min(4);
    session[..len].copy_from_slice(&prefix[..len]);
    let at = u128::from(cursor.at.min((1 << 48) - 1));
    let offset = u128::from(cursor.offset.min((1 << 48) - 1));
    uuid::Uuid::from_u128(at << 80 | u128::from(u32::from_be_bytes(session)) << 48 | offset)
}

/// The 32 hex digits of a message id in SQLite (see [`type2_message_id`]), as a UUID's
/// text.
#[cfg(feature = "sqlite")]
fn sqlite_message_id(at: &str, session_id: &str, offset: &str) -> String {
    let field = |value: &str| format!("printf('%012x', max(0, min(({value}), {MAX_ID_FIELD})))");
    let hex = format!(
        "({} || lower(substr(hex(substr(CAST(({session_id}) AS BLOB), 1, 4)) || '00000000', 1, 8)) || {})",
        field(at),
        field(offset)
    );
    format!(
        "(substr({hex}, 1, 8) || '-' || substr({hex}, 9, 4) || '-' || substr({hex}, 13, 4) \
         || '-' || substr({hex}, 17, 4) || '-' || substr({hex}, 21, 12))"
    )
}

/// A message id in PostgreSQL (see [`type2_message_id`]).
#[cfg(feature = "postgres")]
fn pg_message_id(at: &str, session_id: &str, offset: &str) -> String {
    let field = |value: &str| {
        format!("lpad(to_hex(GREATEST(0, LEAST(({value}), {MAX_ID_FIELD}))::bigint), 12, '0')")
    };
    format!(
        "({} || rpad(encode(substring(convert_to(({session_id}), 'UTF8') from 1 for 4), 'hex'), 8, '0') || {})::uuid",
        field(at),
        field(offset)
    )
}

/// The SQLite views, as one batch: each dropped if there and created.
#[cfg(feature = "sqlite")]
pub(crate) fn sqlite_create() -> String {
    let ts = |ms: &str| format!("strftime('%Y-%m-%dT%H:%M:%fZ', ({ms}) / 1000.0, 'unixepoch')");
    format!(
        r#"{drop}
CREATE VIEW type2_sessions AS
SELECT
    s.session_id AS id,
    json_extract(s.j, '$.personType') AS person_type,
    s.person_id AS person_id,
    s.agent_identity AS agent_identity,
    NULLIF(s.agent_id, '') AS agent_name,
    COALESCE((SELECT e.key FROM json_each(s.j, '$.engineSessionIds') AS e ORDER BY e.key LIMIT 1), 'openclaw') AS engine_type,
    (SELECT e.value FROM json_each(s.j, '$.engineSessionIds') AS e ORDER BY e.key LIMIT 1) AS engine_session_id,
    COALESCE(json_extract(s.j, '$.firstChannel'), json_extract(s.j, '$.origin.provider'), s.channel) AS channel,
    json_extract(s.j, '$.identitySummary.text') AS summary,
    {summary_at} AS summary_updated_at,
    CASE WHEN json_type(s.j, '$.identitySummary.watermark.at') = 'integer'
        AND json_type(s.j, '$.identitySummary.watermark.offset') = 'integer'
        AND json_type(s.j, '$.identitySummary.watermark.sessionId') = 'text'
        THEN {summarised} END AS last_message_in_summary,
    s.j AS metadata,
    {created_at} AS created_at,
    {updated_at} AS updated_at
FROM ({current_per_person}) AS s;

CREATE VIEW type2_sessions_history AS
SELECT
    s.session_id AS id,
    json_extract(s.j, '$.personType') AS person_type,
    s.person_id AS person_id,
    s.agent_identity AS agent_identity,
    NULLIF(s.agent_id, '') AS agent_name,
    COALESCE((SELECT e.key FROM json_each(s.j, '$.engineSessionIds') AS e ORDER BY e.key LIMIT 1), 'openclaw') AS engine_type,
    (SELECT e.value FROM json_each(s.j, '$.engineSessionIds') AS e ORDER BY e.key LIMIT 1) AS engine_session_id,
    COALESCE(json_extract(s.j, '$.firstChannel'), json_extract(s.j, '$.origin.provider'), s.channel) AS channel,
    json_extract(s.j, '$.identitySummary.text') AS summary,
    {summary_at} AS summary_updated_at,
    CASE WHEN json_type(s.j, '$.identitySummary.watermark.at') = 'integer'
        AND json_type(s.j, '$.identitySummary.watermark.offset') = 'integer'
        AND json_type(s.j, '$.identitySummary.watermark.sessionId') = 'text'
        THEN {summarised} END AS last_message_in_summary,
    s.j AS metadata,
    {created_at} AS created_at,
    {updated_at} AS updated_at
FROM ({sessions_and_closed}) AS s;

CREATE VIEW type2_messages AS
SELECT
    {message_id} AS id,
    t.session_id AS session_id,
    l.person_id AS person_id,
    COALESCE(json_extract(l.j, '$.log.agentName'), l.agent_id) AS agent_name,
    l.agent_identity AS agent_identity,
    json_extract(l.j, '$.log.direction') AS direction,
    json_extract(l.j, '$.log.channel') AS channel,
    CASE json_type(l.j, '$.message.content')
        WHEN 'text' THEN json_extract(l.j, '$.message.content')
        ELSE COALESCE((SELECT group_concat(b.text, char(10)) FROM (
            SELECT json_extract(c.value, '$.text') AS text FROM json_each(l.j, '$.message.content') AS c
            WHERE json_extract(c.value, '$.type') = 'text' ORDER BY c.key) AS b), '')
    END AS message,
    CAST(json_extract(l.j, '$.log.processingMs') AS INTEGER) AS processing_ms,
    CAST(COALESCE(json_extract(l.j, '$.log.toolCallsCount'), 0) AS INTEGER) AS tool_calls_count,
    json_extract(l.j, '$.log.correlationId') AS correlation_id,
    COALESCE(json_extract(l.j, '$.log.metadata'), '{{}}') AS metadata,
    m.embedding AS embedding,
    m.category AS category,
    {logged_at} AS created_at
FROM (SELECT transcript_lines.*, CASE WHEN json_valid(line) THEN line END AS j
      FROM transcript_lines WHERE log_at IS NOT NULL) AS l
JOIN transcripts AS t ON t.agent_id = l.agent_id AND t.name = l.name
LEFT JOIN search_messages AS m ON m.id = l.agent_id || '/' || t.session_id || '/' || l.seq;

CREATE VIEW clawos_sessions AS
SELECT
    s.session_id AS session_id,
    s.agent_id AS workspace_id,
    COALESCE(s.channel, '') AS channel,
    COALESCE(json_extract(s.j, '$.origin.from'),
        CASE WHEN s.session_key LIKE 'agent:%'
            THEN replace(s.session_key, rtrim(s.session_key, replace(s.session_key, ':', '')), '')
            ELSE '' END) AS remote_jid,
    CASE WHEN json_extract(s.j, '$.status') = 'closed' THEN 'closed' ELSE 'active' END AS status,
    CAST(COALESCE(json_extract(s.j, '$.turnCount'), 0) AS INTEGER) AS turn_count,
    COALESCE(json_extract(s.j, '$.contextSummary'), '') AS context_summary,
    {created_at} AS created_at,
    {updated_at} AS last_message_at
FROM ({sessions_and_closed}) AS s;
"#,
        drop = SQLITE_DROP,
        sessions_and_closed = sessions_and_closed("", "CASE WHEN json_valid(entry) THEN entry END"),
        current_per_person = current_per_person("", "CASE WHEN json_valid(entry) THEN entry END"),
        message_id = sqlite_message_id("l.log_at", "t.session_id", "l.seq"),
        summarised = sqlite_message_id(
            "json_extract(s.j, '$.identitySummary.watermark.at')",
            "json_extract(s.j, '$.identitySummary.watermark.sessionId')",
            "json_extract(s.j, '$.identitySummary.watermark.offset')"
        ),
        summary_at = ts("json_extract(s.j, '$.identitySummary.updatedAt')"),
        created_at = ts("COALESCE(json_extract(s.j, '$.sessionStartedAt'), s.updated_at)"),
        updated_at = ts("s.updated_at"),
        logged_at = ts("l.log_at"),
    )
}

/// Drops the SQLite views, those that are there.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_DROP: &str = "DROP VIEW IF EXISTS type2_sessions;
DROP VIEW IF EXISTS type2_sessions_history;
DROP VIEW IF EXISTS type2_messages;
DROP VIEW IF EXISTS clawos_sessions;";

/// A PostgreSQL expression: `text` as a UUID — itself when it is one, else the UUID of
/// its MD5 (so equal ids stay equal and joins hold); NULL stays NULL.
#[cfg(feature = "postgres")]
fn pg_uuid(text: &str) -> String {
    format!(
        "(CASE WHEN ({text}) ~* '^[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$' \
         THEN ({text})::uuid ELSE md5({text})::uuid END)"
    )
}

/// Epoch milliseconds as `timestamptz`.
#[cfg(feature = "postgres")]
fn pg_time(ms: &str) -> String {
    format!("to_timestamp(({ms})::double precision / 1000)")
}

/// Epoch milliseconds as ClawOS's text time (`2026-02-23T10:00:00.000Z`).
#[cfg(feature = "postgres")]
fn pg_text_time(ms: &str) -> String {
    format!(
        "to_char(to_timestamp(({ms})::double precision / 1000) AT TIME ZONE 'UTC', \
         'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
    )
}

/// The PostgreSQL views over the tables of `store` (a schema), as one batch.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_create(store: &str, schemas: &ViewSchemas) -> String {
    let (rabs, clawos) = (&schemas.rabs, &schemas.clawos);
    let jsonb = |column: &str| {
        format!("CASE WHEN strpos({column}, '\\u0000') = 0 THEN {column}::jsonb END")
    };
    format!(
        r#"{drop}
CREATE SCHEMA IF NOT EXISTS {rabs};
CREATE SCHEMA IF NOT EXISTS {clawos};

CREATE VIEW {rabs}.type2_sessions AS
SELECT
    {session_uuid} AS id,
    s.j ->> 'personType' AS person_type,
    s.person_id AS person_id,
    s.agent_identity AS agent_identity,
    NULLIF(s.agent_id, '') AS agent_name,
    COALESCE((SELECT e.key FROM jsonb_each_text(s.j -> 'engineSessionIds') AS e ORDER BY e.key LIMIT 1), 'openclaw') AS engine_type,
    (SELECT e.value FROM jsonb_each_text(s.j -> 'engineSessionIds') AS e ORDER BY e.key LIMIT 1) AS engine_session_id,
    COALESCE(s.j ->> 'firstChannel', s.j -> 'origin' ->> 'provider', s.channel) AS channel,
    s.j -> 'identitySummary' ->> 'text' AS summary,
    {summary_at} AS summary_updated_at,
    CASE WHEN jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'at') = 'number'
        AND jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'offset') = 'number'
        AND jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'sessionId') = 'string'
        THEN {summarised} END AS last_message_in_summary,
    s.j AS metadata,
    {created_at} AS created_at,
    {updated_at} AS updated_at
FROM ({current_per_person}) AS s;

CREATE VIEW {rabs}.type2_sessions_history AS
SELECT
    {session_uuid} AS id,
    s.j ->> 'personType' AS person_type,
    s.person_id AS person_id,
    s.agent_identity AS agent_identity,
    NULLIF(s.agent_id, '') AS agent_name,
    COALESCE((SELECT e.key FROM jsonb_each_text(s.j -> 'engineSessionIds') AS e ORDER BY e.key LIMIT 1), 'openclaw') AS engine_type,
    (SELECT e.value FROM jsonb_each_text(s.j -> 'engineSessionIds') AS e ORDER BY e.key LIMIT 1) AS engine_session_id,
    COALESCE(s.j ->> 'firstChannel', s.j -> 'origin' ->> 'provider', s.channel) AS channel,
    s.j -> 'identitySummary' ->> 'text' AS summary,
    {summary_at} AS summary_updated_at,
    CASE WHEN jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'at') = 'number'
        AND jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'offset') = 'number'
        AND jsonb_typeof(s.j -> 'identitySummary' -> 'watermark' -> 'sessionId') = 'string'
        THEN {summarised} END AS last_message_in_summary,
    s.j AS metadata,
    {created_at} AS created_at,
    {updated_at} AS updated_at
FROM ({sessions_and_closed}) AS s;

CREATE VIEW {rabs}.type2_messages AS
SELECT
    {message_id} AS id,
    {transcript_uuid} AS session_id,
    l.person_id AS person_id,
    COALESCE(l.j -> 'log' ->> 'agentName', l.agent_id) AS agent_name,
    l.agent_identity AS agent_identity,
    l.j -> 'log' ->> 'direction' AS direction,
    l.j -> 'log' ->> 'channel' AS channel,
    CASE jsonb_typeof(l.j -> 'message' -> 'content')
        WHEN 'string' THEN l.j -> 'message' ->> 'content'
        WHEN 'array' THEN COALESCE((SELECT string_agg(b.block ->> 'text', E'\n' ORDER BY b.n)
            FROM jsonb_array_elements(l.j -> 'message' -> 'content') WITH ORDINALITY AS b(block, n)
            WHERE b.block ->> 'type' = 'text'), '')
        ELSE ''
    END AS message,
    LEAST((l.j -> 'log' ->> 'processingMs')::numeric, 2147483647)::int AS processing_ms,
    COALESCE(LEAST((l.j -> 'log' ->> 'toolCallsCount')::numeric, 2147483647)::int, 0) AS tool_calls_count,
    {correlation_uuid} AS correlation_id,
    COALESCE(l.j -> 'log' -> 'metadata', '{{}}'::jsonb) AS metadata,
    m.embedding AS embedding,
    m.category AS category,
    {logged_at} AS created_at
FROM (SELECT transcript_lines.*, {line_json} AS j
      FROM {store}.transcript_lines WHERE log_at IS NOT NULL) AS l
JOIN {store}.transcripts AS t ON t.agent_id = l.agent_id AND t.name = l.name
LEFT JOIN {store}.search_messages AS m ON m.id = l.agent_id || '/' || t.session_id || '/' || l.seq;

CREATE VIEW {clawos}.sessions AS
SELECT
    s.session_id AS session_id,
    s.agent_id AS workspace_id,
    COALESCE(s.channel, '') AS channel,
    COALESCE(s.j -> 'origin' ->> 'from',
        CASE WHEN s.session_key LIKE 'agent:%' THEN regexp_replace(s.session_key, '^.*:', '') ELSE '' END
    ) AS remote_jid,
    CASE WHEN s.j ->> 'status' = 'closed' THEN 'closed' ELSE 'active' END AS status,
    COALESCE(LEAST((s.j ->> 'turnCount')::numeric, 2147483647)::int, 0) AS turn_count,
    COALESCE(s.j ->> 'contextSummary', '') AS context_summary,
    {created_text} AS created_at,
    {updated_text} AS last_message_at
FROM ({sessions_and_closed}) AS s;
"#,
        drop = postgres_drop(schemas),
        sessions_and_closed = sessions_and_closed(&format!("{store}."), &jsonb("entry")),
        line_json = jsonb("line"),
        session_uuid = pg_uuid("s.session_id"),
        transcript_uuid = pg_uuid("t.session_id"),
        current_per_person = current_per_person(&format!("{store}."), &jsonb("entry")),
        message_id = pg_message_id("l.log_at", "t.session_id", "l.seq"),
        summarised = pg_message_id(
            "(s.j -> 'identitySummary' -> 'watermark' ->> 'at')::numeric",
            "s.j -> 'identitySummary' -> 'watermark' ->> 'sessionId'",
            "(s.j -> 'identitySummary' -> 'watermark' ->> 'offset')::numeric"
        ),
        correlation_uuid = pg_uuid("l.j -> 'log' ->> 'correlationId'"),
        summary_at = pg_time("s.j -> 'identitySummary' ->> 'updatedAt'"),
        created_at = pg_time("COALESCE((s.j ->> 'sessionStartedAt')::bigint, s.updated_at)"),
        updated_at = pg_time("s.updated_at"),
        logged_at = pg_time("l.log_at"),
        created_text = pg_text_time("COALESCE((s.j ->> 'sessionStartedAt')::bigint, s.updated_at)"),
        updated_text = pg_text_time("s.updated_at"),
    )
}

/// Drops the PostgreSQL views, those that are there (their schemas are left: they may
/// hold other things).
#[cfg(feature = "postgres")]
pub(crate) fn postgres_drop(schemas: &ViewSchemas) -> String {
    format!(
        "DROP VIEW IF EXISTS {rabs}.type2_messages;
DROP VIEW IF EXISTS {rabs}.type2_sessions;
DROP VIEW IF EXISTS {rabs}.type2_sessions_history;
DROP VIEW IF EXISTS {clawos}.sessions;",
        rabs = schemas.rabs,
        clawos = schemas.clawos
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_schemas_must_be_plain_names_other_than_the_stores() {
        // (rabs, clawos, accepted)
        let cases = [
            ("brainframe", "clawos", true),
            ("same", "same", true),
            ("agent_sessions", "clawos", false),
            ("brainframe", "agent_sessions", false),
            ("Brainframe", "clawos", false),
            ("brain; DROP TABLE x", "clawos", false),
            ("", "clawos", false),
        ];
        for (rabs, clawos, accepted) in cases {
            let result = ViewSchemas::new(rabs, clawos).check("agent_sessions");
            assert_eq!(result.is_ok(), accepted, "{rabs:?}, {clawos:?}: {result:?}");
        }
    }
}
