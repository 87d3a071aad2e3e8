//! What the SQL stores share: the row a session becomes, list filters as `WHERE`
//! clauses, and the message-log columns of a transcript line.

use std::path::Path;

use crate::error::{Error, Result};
use crate::identity::key::{normalize_channel, SessionKey};
use crate::store::entry::{SessionEntry, SessionStatus};
use crate::store::{status_name, ListFilter, Revision, StatusFilter, StoredSession};
use crate::transcript::{LogQuery, TranscriptEntry};

/// A session as a row: the entry's JSON, exactly as this crate writes it, and the
/// columns list filters and lookups use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionRow {
    pub(crate) session_key: String,
    /// The key's agent (`""` for `global`).
    pub(crate) agent_id: String,
    pub(crate) session_id: String,
    pub(crate) updated_at: i64,
    pub(crate) channel: Option<String>,
    pub(crate) chat_type: Option<String>,
    pub(crate) person_id: Option<String>,
    pub(crate) agent_identity: Option<String>,
    /// The entry's status (`idle` when it has none).
    pub(crate) status: String,
    pub(crate) revision: i64,
    pub(crate) entry: String,
}

impl SessionRow {
    /// The row of `entry` under `key`.
    pub(crate) fn new(key: &SessionKey, entry: &SessionEntry) -> Result<SessionRow> {
        let json = serde_json::to_string(entry)
            .map_err(|source| Error::encode(format!("session entry {key}"), source))?;
        // The revision is the hash of exactly this text (what `entry_revision` hashes).
        let revision = Revision::of_bytes(json.as_bytes());
        let chat_type = entry
            .chat_type
            .as_ref()
            .and_then(|t| t.peer_kind())
            .or_else(|| key.peer_kind());
        Ok(SessionRow {
            session_key: key.to_string(),
            agent_id: key.agent_id().unwrap_or("").to_owned(),
            session_id: entry.session_id.clone(),
            updated_at: to_i64(entry.updated_at),
            channel: entry.channel_name().and_then(normalize_channel),
            chat_type: chat_type.map(|k| k.as_str().to_owned()),
            person_id: entry.person_id.clone(),
            agent_identity: entry.agent_identity.clone(),
            status: status_name(entry).to_owned(),
            revision: revision_to_i64(revision),
            entry: json,
        })
    }

    /// The columns besides `revision` and `entry` whose values differ from `before`'s
    /// (the same key's row as it is stored): all an update of an existing row needs to
    /// write. SQLite rewrites an index whenever one of its columns is assigned, whether
    /// or not the value changed, so assigning only these keeps a commit to the pages
    /// that really change.
    #[cfg(feature = "sqlite")]
    pub(crate) fn changed_columns(&self, before: &SessionRow) -> Vec<Column> {
        Column::ALL
            .into_iter()
            .filter(|column| match column {
                Column::AgentId => self.agent_id != before.agent_id,
                Column::SessionId => self.session_id != before.session_id,
                Column::UpdatedAt => self.updated_at != before.updated_at,
                Column::Channel => self.channel != before.channel,
                Column::ChatType => self.chat_type != before.chat_type,
                Column::PersonId => self.person_id != before.person_id,
                Column::AgentIdentity => self.agent_identity != before.agent_identity,
                Column::Status => self.status != before.status,
            })
            .collect()
    }
}

/// A column of the sessions table derived from the entry (besides `revision` and
/// `entry` themselves).
#[cfg(feature = "sqlite")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    AgentId,
    SessionId,
    UpdatedAt,
    Channel,
    ChatType,
    PersonId,
    AgentIdentity,
    Status,
}

#[cfg(feature = "sqlite")]
impl Column {
    pub(crate) const ALL: [Column; 8] = [
        Column::AgentId,
        Column::SessionId,
        Column::UpdatedAt,
        Column::Channel,
        Column::ChatType,
        Column::PersonId,
        Column::AgentIdentity,
        Column::Status,
    ];

    /// The column's name in the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Column::AgentId => "agent_id",
            Column::SessionId => "session_id",
            Column::UpdatedAt => "updated_at",
            Column::Channel => "channel",
            Column::ChatType => "chat_type",
            Column::PersonId => "person_id",
            Column::AgentIdentity => "agent_identity",
            Column::Status => "status",
        }
    }
}

/// The query that lists `filter`'s sessions (key, revision and entry first) with the
/// conditions of `clause`: the table `sessions` and, when the filter asks for closed
/// sessions, the table `closed` too (the same placeholders serve both halves). Keys
/// are ordered as `key_order` (a column expression, e.g. with a collation).
pub(crate) fn list_query(
    filter: &ListFilter,
    clause: &Where,
    sessions: &str,
    closed: &str,
    key_order: &str,
) -> String {
    let columns = "session_key, revision, entry, updated_at, session_id";
    let mut query = format!("SELECT {columns} FROM {sessions}{}", clause.sql);
    if filter.status.includes_replaced() {
        query = format!(
            "SELECT * FROM ({query} UNION ALL SELECT {columns} FROM {closed}{}) AS listed",
            clause.sql
        );
    }
    query.push_str(&format!(
        " ORDER BY updated_at DESC, {key_order} ASC, session_id ASC{}",
        Where::limit(filter.limit)
    ));
    query
}

/// Deletes all but the [`CLOSED_SESSIONS_PER_KEY`](crate::store::CLOSED_SESSIONS_PER_KEY)
/// most recently closed sessions in the table `closed` of the key bound to
/// `placeholder`.
pub(crate) fn trim_closed_sql(closed: &str, placeholder: &str) -> String {
    format!(
        "DELETE FROM {closed} WHERE session_key = {placeholder} AND session_id NOT IN \
         (SELECT session_id FROM {closed} WHERE session_key = {placeholder} \
         ORDER BY closed_at DESC, session_id DESC LIMIT {})",
        crate::store::CLOSED_SESSIONS_PER_KEY
    )
}

/// Reads a stored row back; a row whose JSON is not an entry is
/// [`Error::InvalidEntry`] (naming `location`), never silently dropped.
pub(crate) fn decode(
    location: &Path,
    session_key: &str,
    revision: i64,
    json: &str,
) -> Result<StoredSession> {
    let key = SessionKey::parse(session_key)?;
    let entry: SessionEntry = serde_json::from_str(json).map_err(|source| Error::InvalidEntry {
        key: session_key.to_owned(),
        path: location.to_owned(),
        source,
    })?;
    Ok(StoredSession {
        key,
        entry,
        revision: revision_from_i64(revision),
    })
}

/// The rows of a listing as sessions: a row that cannot be decoded is skipped and
/// logged, never fails the listing (the contract of `SessionStore::list`); `get` on its
/// key reports it.
pub(crate) fn decode_listed<'a>(
    location: &Path,
    rows: impl IntoIterator<Item = (&'a str, i64, &'a str)>,
) -> Vec<StoredSession> {
    rows.into_iter()
        .filter_map(
            |(key, revision, json)| match decode(location, key, revision, json) {
                Ok(session) => Some(session),
                Err(error) => {
                    tracing::warn!(%error, "skipped an undecodable session in a listing");
                    None
                }
            },
        )
        .collect()
}

/// The rows that do not decode, for `SessionStore::unreadable`.
pub(crate) fn undecodable<'a>(
    location: &Path,
    rows: impl IntoIterator<Item = (&'a str, i64, &'a str)>,
) -> Vec<crate::store::UnreadableEntry> {
    rows.into_iter()
        .filter_map(|(key, revision, json)| {
            let error = decode(location, key, revision, json).err()?;
            Some(crate::store::UnreadableEntry {
                location: location.display().to_string(),
                key: key.to_owned(),
                problem: error.to_string(),
            })
        })
        .collect()
}

/// What an update of several sessions writes: each changed key with its new row
/// (`None`: delete the row).
pub(crate) type ManyWrites = Vec<ManyWrite>;

/// One row an [`change_many`] call writes: the key, its new row (`None`: delete), and
/// the session it replaced, to keep closed.
#[derive(Debug, Clone)]
pub(crate) struct ManyWrite {
    pub(crate) key: SessionKey,
    pub(crate) row: Option<SessionRow>,
    pub(crate) replaced: Option<crate::store::entry::SessionEntry>,
}

/// Runs a multi-key mutator on the rows read for `keys` (`None`: no row): the sessions
/// as the mutator left them, with their new revisions, and the writes that make them
/// so. A row that does not decode is [`Error::InvalidEntry`] before the mutator runs.
pub(crate) fn change_many(
    location: &Path,
    keys: Vec<SessionKey>,
    rows: Vec<Option<(i64, String)>>,
    mutator: &mut crate::store::ManyMutator<'_>,
) -> Result<(crate::store::Slots, ManyWrites)> {
    let mut read = Vec::with_capacity(rows.len());
    for (key, row) in keys.iter().zip(rows) {
        read.push(
            row.map(|(revision, json)| decode(location, key.as_str(), revision, &json))
                .transpose()?,
        );
    }
    let before = crate::store::Slots::from_stored(keys, read);
    let mut after = crate::store::run_many_mutator(mutator, &before)?;
    let mut writes = Vec::new();
    for (slot, old) in after.slots.iter_mut().zip(&before.slots) {
        if slot.entry == old.entry {
            continue;
        }
        let row = slot
            .entry
            .as_ref()
            .map(|entry| SessionRow::new(&slot.key, entry))
            .transpose()?;
        slot.revision = row.as_ref().map(|row| revision_from_i64(row.revision));
        writes.push(ManyWrite {
            key: slot.key.clone(),
            row,
            replaced: crate::store::replaced_session(old.entry.as_ref(), slot.entry.as_ref()),
        });
    }
    Ok((after, writes))
}

/// Revisions are 64-bit hashes; SQL integers are signed. The bits are kept.
pub(crate) fn revision_to_i64(revision: Revision) -> i64 {
    i64::from_ne_bytes(revision.as_u64().to_ne_bytes())
}

pub(crate) fn revision_from_i64(value: i64) -> Revision {
    Revision::from_u64(u64::from_ne_bytes(value.to_ne_bytes()))
}

/// A group-history timestamp as a SQL integer, bit for bit: any `u64` is kept as it
/// was given (SQL integers are signed).
pub(crate) fn history_time_to_i64(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

/// The inverse of [`history_time_to_i64`].
pub(crate) fn history_time_from_i64(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

/// A group-history bound (entries per group, groups) as a SQL integer.
pub(crate) fn history_bound(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// When `entry` was kept, and the start of the dedupe `window` before it, as the SQL
/// stores keep message ids (epoch milliseconds).
pub(crate) fn seen_window(
    entry: &crate::inbound::chatter::ChatterEntry,
    window: std::time::Duration,
) -> (i64, i64) {
    let now = i64::try_from(entry.timestamp.unwrap_or(0)).unwrap_or(i64::MAX);
    let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    (now, now.saturating_sub(window))
}

/// The claims of group chatter as a SQL store keeps them: each claim's id and its
/// JSON text. A text that does not parse is a claim with no holder, which the next
/// turn takes over (or settles, if its line was logged).
pub(crate) fn parse_claims(
    records: Vec<(String, Option<String>)>,
) -> Vec<crate::inbound::chatter::ChatterClaim> {
    records
        .into_iter()
        .map(|(id, record)| {
            record
                .and_then(|record| serde_json::from_str(&record).ok())
                .filter(|claim: &crate::inbound::chatter::ChatterClaim| claim.id == id)
                .unwrap_or(crate::inbound::chatter::ChatterClaim {
                    id,
                    holder: String::new(),
                    witness: String::new(),
                    at: 0,
                })
        })
        .collect()
}

/// One row of group chatter as the SQL stores keep it: its group, the entry, and the
/// claim it is under (the claim's id and JSON text).
pub(crate) type ChatterRow = (
    String,
    crate::inbound::chatter::ChatterEntry,
    Option<String>,
    Option<String>,
);

/// The groups a SQL store's chatter rows (in id order) and remembered message ids
/// (`group_key`, `message_id`, `at`) make, in the order groups first appear.
pub(crate) fn chatter_groups(
    rows: Vec<ChatterRow>,
    seen: Vec<(String, String, i64)>,
) -> Vec<(String, crate::inbound::chatter::GroupChatter)> {
    use crate::inbound::chatter::{ClaimedChatter, GroupChatter, SeenMessage};
    let mut groups: indexmap::IndexMap<String, GroupChatter> = indexmap::IndexMap::new();
    for (key, entry, claim_id, claim) in rows {
        let group = groups.entry(key).or_default();
        let Some(claim_id) = claim_id else {
            group.entries.push_back(entry);
            continue;
        };
        match group.claimed.iter_mut().find(|c| c.claim.id == claim_id) {
            Some(claimed) => claimed.entries.push(entry),
            None => {
                let claim = parse_claims(vec![(claim_id, claim)]).remove(0);
                group.claimed.push(ClaimedChatter::new(claim, vec![entry]));
            }
        }
    }
    for (key, id, at) in seen {
        let at = u64::try_from(at).unwrap_or(0);
        groups
            .entry(key)
            .or_default()
            .seen
            .push_back(SeenMessage::new(id, at));
    }
    for group in groups.values_mut() {
        group.seen.make_contiguous().sort_by_key(|seen| seen.at);
    }
    groups.into_iter().collect()
}

/// The rows group `key` is stored as (claimed entries first, by claim, then the
/// unclaimed ones), for a copy to insert in this order.
pub(crate) fn chatter_rows(
    key: &str,
    group: crate::inbound::chatter::GroupChatter,
) -> crate::error::Result<Vec<ChatterRow>> {
    let mut rows = Vec::new();
    for claimed in group.claimed {
        let record = serde_json::to_string(&claimed.claim)
            .map_err(|e| crate::Error::encode("a claim of group chatter", e))?;
        for entry in claimed.entries {
            rows.push((
                key.to_owned(),
                entry,
                Some(claimed.claim.id.clone()),
                Some(record.clone()),
            ));
        }
    }
    rows.extend(
        group
            .entries
            .into_iter()
            .map(|e| (key.to_owned(), e, None, None)),
    );
    Ok(rows)
}

/// The queues a SQL store's system-event rows (`session_key`, `text`, `at`, in id
/// order) make, the least recently touched session first; a row whose key does not
/// parse is an error naming it.
pub(crate) fn queues_of(
    rows: Vec<(String, String, i64)>,
) -> crate::error::Result<Vec<(SessionKey, Vec<crate::inbound::SystemEvent>)>> {
    let mut queues: indexmap::IndexMap<String, Vec<crate::inbound::SystemEvent>> =
        indexmap::IndexMap::new();
    for (key, text, at) in rows {
        // Keys in order of their newest event: a key moves to the end as it appears.
        let mut events = queues.shift_remove(&key).unwrap_or_default();
        events.push(crate::inbound::SystemEvent {
            text,
            at: event_time_from_i64(at),
        });
        queues.insert(key, events);
    }
    queues
        .into_iter()
        .map(|(key, events)| Ok((SessionKey::parse(&key)?, events)))
        .collect()
}

/// A system event's time as a SQL integer: microseconds since the epoch.
pub(crate) fn event_time_to_i64(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_micros()
}

/// The inverse of [`event_time_to_i64`] (the epoch for a value out of range, which
/// this crate never writes).
pub(crate) fn event_time_from_i64(value: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_micros(value).unwrap_or_default()
}

/// Epoch milliseconds as a SQL integer (saturating: no real time is near the edge).
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SqlValue {
    Text(String),
    Int(i64),
}

/// A `WHERE` clause (possibly empty) with its values, placeholders numbered from 1 by
/// `placeholder` (`?1` for SQLite, `$1` for PostgreSQL).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Where {
    pub(crate) sql: String,
    pub(crate) values: Vec<SqlValue>,
}

impl Where {
    pub(crate) fn push(
        &mut self,
        placeholder: &dyn Fn(usize) -> String,
        condition: &str,
        value: SqlValue,
    ) {
        self.values.push(value);
        let mark = placeholder(self.values.len());
        let condition = condition.replace('?', &mark);
        self.sql.push_str(if self.sql.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.sql.push_str(&condition);
    }

    /// `condition`, whose `?`s stand for `values` in order.
    pub(crate) fn push_all(
        &mut self,
        placeholder: &dyn Fn(usize) -> String,
        condition: &str,
        values: Vec<SqlValue>,
    ) {
        let mut pieces = condition.split('?');
        let mut sql = pieces.next().unwrap_or_default().to_owned();
        for (piece, value) in pieces.zip(values) {
            self.values.push(value);
            sql.push_str(&placeholder(self.values.len()));
            sql.push_str(piece);
        }
        self.sql.push_str(if self.sql.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.sql.push_str(&sql);
    }

    /// `column IN (?, ?, …)` over `values` (never empty: an empty set is `1 = 0`).
    pub(crate) fn push_in(
        &mut self,
        placeholder: &dyn Fn(usize) -> String,
        column: &str,
        values: Vec<SqlValue>,
    ) {
        let condition = if values.is_empty() {
            "1 = 0".to_owned()
        } else {
            let marks: Vec<String> = values
                .into_iter()
                .map(|value| {
                    self.values.push(value);
                    placeholder(self.values.len())
                })
                .collect();
            format!("{column} IN ({})", marks.join(", "))
        };
        self.sql.push_str(if self.sql.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        self.sql.push_str(&condition);
    }

    /// `LIMIT n`, if any.
    pub(crate) fn limit(limit: Option<usize>) -> String {
        // A larger limit than the SQL integer holds is no limit at all.
        limit.map_or_else(String::new, |n| {
            format!(" LIMIT {}", n.min(i64::MAX as usize))
        })
    }
}

/// `filter` as a `WHERE` clause over the sessions table (and the closed-sessions
/// table, which has the same columns), whose keys order as `key_order` sorts them. The
/// limit is left to the caller (ordering comes first).
pub(crate) fn session_filter(
    filter: &ListFilter,
    placeholder: &dyn Fn(usize) -> String,
    key_order: &str,
) -> Where {
    let mut clause = Where::default();
    if let Some(agent) = &filter.agent {
        clause.push(
            placeholder,
            "agent_id = ?",
            SqlValue::Text(agent.to_string()),
        );
    }
    if let Some(prefix) = &filter.key_prefix {
        // `substr` rather than LIKE: nothing in a prefix needs escaping.
        clause.push(
            placeholder,
            &format!("substr(session_key, 1, {}) = ?", prefix.chars().count()),
            SqlValue::Text(prefix.clone()),
        );
    }
    if let Some(channel) = &filter.channel {
        clause.push(placeholder, "channel = ?", SqlValue::Text(channel.clone()));
    }
    if let Some(kind) = filter.chat_type {
        clause.push(
            placeholder,
            "chat_type = ?",
            SqlValue::Text(kind.as_str().to_owned()),
        );
    }
    if let Some(person) = &filter.person_id {
        clause.push(placeholder, "person_id = ?", SqlValue::Text(person.clone()));
    }
    if let Some(identity) = &filter.agent_identity {
        clause.push(
            placeholder,
            "agent_identity = ?",
            SqlValue::Text(identity.clone()),
        );
    }
    if let Some(session_id) = &filter.session_id {
        clause.push(
            placeholder,
            "session_id = ?",
            SqlValue::Text(session_id.clone()),
        );
    }
    match &filter.status {
        StatusFilter::Listed => {
            clause.push(
                placeholder,
                "status <> ?",
                SqlValue::Text(SessionStatus::Inactive.as_str().to_owned()),
            );
        }
        StatusFilter::Current | StatusFilter::Any => {}
        StatusFilter::Only(wanted) => {
            let values = wanted
                .iter()
                .map(|status| SqlValue::Text(status.as_str().to_owned()))
                .collect();
            clause.push_in(placeholder, "status", values);
        }
    }
    if let Some(before) = filter.updated_before {
        clause.push(placeholder, "updated_at < ?", SqlValue::Int(to_i64(before)));
    }
    if let Some(after) = filter.updated_after {
        clause.push(placeholder, "updated_at > ?", SqlValue::Int(to_i64(after)));
    }
    if let Some(cursor) = &filter.after {
        // Listed after the cursor, in listing order; the first bound lets the
        // `updated_at` index start the scan there.
        let at = SqlValue::Int(to_i64(cursor.updated_at()));
        let key = SqlValue::Text(cursor.key().to_owned());
        let session_id = SqlValue::Text(cursor.session_id().to_owned());
        clause.push_all(
            placeholder,
            &format!(
                "updated_at <= ? AND (updated_at < ? OR {key_order} > ? \
                 OR ({key_order} = ? AND session_id > ?))"
            ),
            vec![at.clone(), at, key.clone(), key, session_id],
        );
    }
    clause
}

/// The message-log columns of a transcript line: when, who, with which identity, in
/// which session — `None` for lines that are not logged messages.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LogColumns {
    pub(crate) at: i64,
    pub(crate) person_id: Option<String>,
    pub(crate) agent_identity: Option<String>,
    pub(crate) session_key: Option<String>,
}

impl LogColumns {
    /// The columns of `line`, if it is a logged message.
    pub(crate) fn of_line(line: &str) -> Option<LogColumns> {
        let entry: TranscriptEntry = crate::store::json_text::from_slice(line.as_bytes()).ok()?;
        let event = crate::transcript::SessionEvent {
            offset: crate::transcript::Offset::START,
            line: 0,
            entry,
        };
        let record = crate::transcript::lines::log_record(&crate::AgentId::main(), "", &event)?;
        Some(LogColumns {
            at: record.at.timestamp_millis(),
            person_id: record.log.person_id,
            agent_identity: record.log.agent_identity,
            session_key: record.log.session_key,
        })
    }
}

/// `query`'s conditions on the log columns of the lines table (joined with the
/// transcripts table as `t`); the limit is left to the caller.
pub(crate) fn log_filter(query: &LogQuery, placeholder: &dyn Fn(usize) -> String) -> Where {
    let mut clause = Where::default();
    clause.sql.push_str(" WHERE l.log_at IS NOT NULL");
    let mut and = |condition: &str, value: SqlValue| {
        clause.values.push(value);
        let mark = placeholder(clause.values.len());
        clause.sql.push_str(" AND ");
        clause.sql.push_str(&condition.replace('?', &mark));
    };
    if let Some(agent) = &query.agent {
        and("l.agent_id = ?", SqlValue::Text(agent.to_string()));
    }
    if let Some(session_id) = &query.session_id {
        and("t.session_id = ?", SqlValue::Text(session_id.clone()));
    }
    if let Some(key) = &query.session_key {
        and("l.session_key = ?", SqlValue::Text(key.clone()));
    }
    if let Some(person) = &query.person_id {
        and("l.person_id = ?", SqlValue::Text(person.clone()));
    }
    if let Some(identity) = &query.agent_identity {
        and("l.agent_identity = ?", SqlValue::Text(identity.clone()));
    }
    if let Some(since) = query.since {
        and("l.log_at >= ?", SqlValue::Int(since.timestamp_millis()));
    }
    if let Some(until) = query.until {
        and("l.log_at < ?", SqlValue::Int(until.timestamp_millis()));
    }
    clause
}

/// Message-log records of `(agent, session id, seq, line)` rows, in the rows' order.
pub(crate) fn log_records(
    rows: Vec<(String, String, i64, String)>,
) -> Vec<crate::transcript::LogRecord> {
    rows.into_iter()
        .filter_map(|(agent, session_id, seq, line)| {
            let agent = crate::AgentId::new(&agent).ok()?;
            let entry = serde_json::from_str(&line).ok()?;
            let event = crate::transcript::SessionEvent {
                offset: crate::transcript::Offset(seq as u64),
                line: seq as usize + 1,
                entry,
            };
            crate::transcript::lines::log_record(&agent, &session_id, &event)
        })
        .collect()
}

/// A 64-bit hash of `text` as a signed integer (PostgreSQL advisory-lock ids).
#[cfg(feature = "postgres")]
pub(crate) fn lock_id(text: &str) -> i64 {
    revision_to_i64(Revision::of_bytes(text.as_bytes()))
}

/// The columns of a search message, from `search_messages` aliased `m`, in the order
/// [`message_from_columns`] reads them.
pub(crate) const MESSAGE_COLUMNS: &str = "m.id, m.agent_id, m.session_id, m.session_key, \
     m.person_id, m.agent_identity, m.channel, m.direction, m.correlation_id, m.at, m.text, \
     m.category";

/// A search message from its columns (without its vector).
#[allow(clippy::too_many_arguments)]
pub(crate) fn message_from_columns(
    id: String,
    agent: String,
    session_id: String,
    session_key: Option<String>,
    person_id: Option<String>,
    agent_identity: Option<String>,
    channel: Option<String>,
    direction: Option<String>,
    correlation_id: Option<String>,
    at_ms: i64,
    text: String,
    category: Option<String>,
) -> crate::transcript::search::LoggedMessage {
    use crate::transcript::Direction;
    crate::transcript::search::LoggedMessage {
        id,
        agent,
        session_id,
        session_key,
        person_id,
        agent_identity,
        channel,
        direction: match direction.as_deref() {
            Some("inbound") => Some(Direction::Inbound),
            Some("outbound") => Some(Direction::Outbound),
            _ => None,
        },
        correlation_id,
        at: chrono::DateTime::from_timestamp_millis(at_ms).unwrap_or_default(),
        text,
        category,
        embedding: None,
    }
}

/// A direction as its column value.
pub(crate) fn direction_column(
    direction: Option<crate::transcript::Direction>,
) -> Option<&'static str> {
    direction.map(|d| match d {
        crate::transcript::Direction::Inbound => "inbound",
        crate::transcript::Direction::Outbound => "outbound",
    })
}

/// Adds `filter`'s conditions on `search_messages` (aliased `m`) to `clause`.
pub(crate) fn message_filter(
    clause: &mut Where,
    filter: &crate::transcript::search::SearchFilter,
    placeholder: &dyn Fn(usize) -> String,
) {
    let text = |value: &Option<String>| value.clone().map(SqlValue::Text);
    for (condition, value) in [
        ("m.person_id = ?", text(&filter.person_id)),
        ("m.agent_identity = ?", text(&filter.agent_identity)),
        ("m.channel = ?", text(&filter.channel)),
        ("m.session_id = ?", text(&filter.session_id)),
        ("m.category = ?", text(&filter.category)),
        (
            "m.at >= ?",
            filter.since.map(|t| SqlValue::Int(t.timestamp_millis())),
        ),
        (
            "m.at < ?",
            filter.until.map(|t| SqlValue::Int(t.timestamp_millis())),
        ),
    ] {
        if let Some(value) = value {
            clause.push(placeholder, condition, value);
        }
    }
}

/// The condition on `search_messages m` of messages waiting for `work`.
pub(crate) fn waiting(work: crate::transcript::search::Work) -> &'static str {
    match work {
        crate::transcript::search::Work::Categorize => "m.category IS NULL",
        crate::transcript::search::Work::Embed => "m.embedding IS NULL",
    }
}

/// Full-text words of `query` for a database's query language: the crate's tokens,
/// each unique (letters and digits only, so nothing needs escaping).
pub(crate) fn query_words(query: &str) -> Vec<String> {
    let mut words = crate::transcript::search::tokens(query);
    let mut seen = std::collections::HashSet::new();
    words.retain(|w| seen.insert(w.clone()));
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::key::{AgentId, PeerKind};

    #[test]
    fn filters_become_numbered_conditions() {
        let filter = ListFilter::new()
            .agent(AgentId::new("ops").unwrap())
            .key_prefix("agent:ops:slack")
            .chat_type(PeerKind::Group)
            .updated_after(5);
        let clause = session_filter(&filter, &|n| format!("${n}"), "session_key");
        assert_eq!(
            clause.sql,
            " WHERE agent_id = $1 AND substr(session_key, 1, 15) = $2 AND chat_type = $3 \
             AND status <> $4 AND updated_at > $5"
        );
        assert_eq!(clause.values.len(), 5);
        assert_eq!(
            session_filter(&ListFilter::all(), &|n| format!("?{n}"), "session_key").sql,
            ""
        );
        let statuses = ListFilter::all()
            .status(crate::store::entry::SessionStatus::Running)
            .status(crate::store::entry::SessionStatus::Closed);
        assert_eq!(
            session_filter(&statuses, &|n| format!("?{n}"), "session_key").sql,
            " WHERE status IN (?1, ?2)"
        );
    }

    #[test]
    fn rows_keep_the_entry_and_its_revision() {
        let key = SessionKey::parse("agent:main:slack:channel:c1").unwrap();
        let mut entry = SessionEntry::new("s-1", 42);
        entry
            .extra
            .insert("zFuture".into(), serde_json::json!([1, 2]));
        let row = SessionRow::new(&key, &entry).unwrap();
        assert_eq!(row.chat_type.as_deref(), Some("channel"));
        assert_eq!(row.agent_id, "main");
        let back = decode(Path::new("db"), &row.session_key, row.revision, &row.entry).unwrap();
        assert_eq!(back.entry, entry);
        assert_eq!(back.revision, crate::store::entry_revision(&entry).unwrap());
    }
}
