//! Tools for the people who run a bot: check a tree of OpenClaw stores and repair what
//! is safe to repair ([`examine`]), move sessions and transcripts between backends
//! ([`migrate`]), read sessions from SQL through views ([`ViewSchemas`]), run beside an
//! OpenClaw install from its `openclaw.json` ([`openclaw`]), and watch the crate at work
//! ([`telemetry`]: its spans and metrics).
//!
//! # Checking a state directory
//!
//! [`examine`] looks at every agent's `sessions/` directory and reports what is wrong:
//! a store that does not parse (and whether its `.bak` does), entries that cannot be
//! read, temporary files a crashed writer left, lock files nobody holds, entries whose
//! recorded transcript is gone. With [`DoctorOptions::repair`] it also fixes what it
//! can without losing anything: whatever it takes away is moved into the sessions
//! directory's `quarantine/<timestamp>/` (a corrupt store, orphaned temporary files,
//! pruned entries as a JSON file), never deleted — except dead lock files, which hold
//! no data.
//!
//! ```
//! use agent_sessions::ops::{examine, DoctorOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let report = examine(dir.path(), &DoctorOptions::default()).await?;
//! assert!(report.is_healthy());
//! # Ok(())
//! # }
//! ```
//!
//! # Moving sessions between backends
//!
//! [`migrate`] copies everything one [`Backend`](crate::store::Backend) holds into
//! another: every session, the closed sessions replaced under their keys, every
//! transcript (live and archived, `.reset.` and `.deleted.`), the group chatter waiting
//! for the next turn (with the claims of turns that died holding it and the message ids
//! remembered against a delivery again), and the system events queued for sessions.
//! A message a channel delivers again to the copy is a duplicate there, as it was on
//! the source. The search index is not copied: the target builds its own from the
//! transcripts when it is first searched. It only adds:
//!
//! * a session the target does not have is written (atomically: a session that appears
//!   in the target meanwhile is not overwritten);
//! * a session the target already has, identical, is skipped, so an interrupted
//!   migration is resumed by running it again;
//! * a session the target has with another entry is a *conflict*: the target's entry is
//!   left as it is and reported in [`MigrationReport::session_conflicts`] (it may have
//!   moved on since an earlier migration: a bot already writing to the target). Only
//!   [`MigrateOptions::overwrite_conflicts`] replaces it with the source's;
//! * a transcript the target has with other lines is a conflict too, left alone, and
//!   so are a group with other chatter and a session with other system events queued;
//!   a closed session the target holds under its id already is skipped;
//! * what the source holds but cannot serve — an entry that does not decode, a legacy
//!   or foreign key in OpenClaw's files — cannot be copied: it is listed in
//!   [`MigrationReport::unreadable`] and the migration does not verify.
//!
//! At the end it compares, for each kind — sessions, closed sessions, transcripts,
//! group chatter, system events — counts and checksums of what the source holds *then*
//! with the same items in the target, and [`Checksums::differing`] names the kinds that
//! differ; sessions that changed in the source
//! while it was being copied are listed in [`MigrationReport::source_changed`]. Any
//! conflict or change makes [`MigrationReport::verified`] false: stop the writers and
//! run the migration again.
//!
//! The one field that changes is `sessionFile`, a location: it is pointed at the
//! transcript's place in the target when the target has places (the file backend), and
//! compared by file name only.
//!
//! ```
//! use agent_sessions::ops::{migrate, NoProgress};
//! use agent_sessions::store::Backend;
//! use agent_sessions::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agent_sessions::Result<()> {
//! # let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
//! let from = Backend::open(&format!("json:{}", a.path().display())).await?;
//! let to = Backend::open(&format!("json:{}", b.path().display())).await?;
//! let key = SessionKey::parse("agent:main:main")?;
//! from.sessions().put(&key, SessionEntry::new("s-1", 1)).await?;
//!
//! let report = migrate(&from, &to, &NoProgress).await?;
//! assert!(report.verified());
//! assert_eq!(report.sessions_copied, 1);
//! assert!(to.sessions().get(&key).await?.is_some());
//! # Ok(())
//! # }
//! ```
//!
//! # SQL views
//!
//! SQL views with the shapes RABS and ClawOS document, over this crate's tables: their
//! existing SQL, joins and dashboards read the crate's sessions and message log.
//!
//! An optional step, never run on open: create them with
//! [`SqliteStore::create_views`](crate::store::SqliteStore::create_views) or
//! [`PostgresStore::create_views`](crate::store::PostgresStore::create_views) (or
//! `agent-sessions views create`), remove them with `drop_views`. Creating them again
//! replaces them (idempotent); dropping views that are not there is no error. The views
//! are read-only: sessions and messages are written through the crate. They depend on
//! the tables: drop them before an upgrade whose schema migration changes the tables,
//! and create them again after. (Schema versions 4 and 5 only add tables,
//! `group_history` and `system_events`: views made over a version-3 database stay
//! through their migrations.)
//!
//! | view | shape of | rows |
//! | --- | --- | --- |
//! | `type2_sessions` | RABS's session registry | RABS's `UNIQUE(person_id, agent_name)`: a person's most recently active current session with each agent (every current session without a person) |
//! | `type2_sessions_history` | the same columns | every session: the current ones and the closed ones a reset or timeout replaced, so every logged message finds its session |
//! | `type2_messages` | RABS's message log | one per logged message (`log_message`), in every transcript, archived ones included |
//! | `sessions` (PostgreSQL, in its own schema) / `clawos_sessions` (SQLite) | ClawOS's kernel table | one per session, as `type2_sessions_history`: a replaced session is a `closed` row, as ClawOS keeps it |
//!
//! **Names.** The crate's own table is already called `sessions`. On PostgreSQL every
//! view lives in a schema of its own, named by [`ViewSchemas`] (default `brainframe`
//! for RABS's views — the schema RABS's SQL names — and `clawos` for ClawOS's), never in
//! the store's schema; ClawOS's unqualified `sessions` finds the view with
//! `SET search_path = clawos`. On SQLite, views live in the database file itself:
//! RABS's are `type2_sessions` and `type2_messages`, ClawOS's is `clawos_sessions`; a
//! connection that runs `CREATE TEMP VIEW sessions AS SELECT * FROM main.clawos_sessions`
//! reads it as `sessions` (a temporary name is found before the file's own).
//!
//! **Columns** have the names and types the systems' schemas give (on SQLite: `TEXT`
//! for UUIDs, JSON and times, times as ISO 8601 UTC with milliseconds, which sort
//! chronologically). Where the crate keeps no such data, the column is a NULL of the
//! right type:
//!
//! * `type2_sessions`: `id` is the session's `sessionId` (a new one after every reset;
//!   on PostgreSQL a UUID, derived with `md5` from an id that is not one), `agent_name`
//!   the key's agent, `engine_type`/`engine_session_id` the first of the entry's
//!   `engineSessionIds` (else `openclaw` and NULL: the engine has not replied yet, so
//!   RABS starts it without `--session-id`), `channel` the entry's
//!   `firstChannel` (the channel the session began on; for entries older than that
//!   field, the origin's), `summary` and `summary_updated_at` the shared
//!   identity summary, `metadata` the whole entry, `created_at` when the session
//!   started; `last_message_in_summary` the `type2_messages.id` of the last message the
//!   rolling summary covers (its watermark), NULL before the first summary.
//! * `type2_messages`: `id` grows with the message log's order — time, then session,
//!   then place ([`type2_message_id`] computes it) — so RABS's incremental query
//!   `id > last_message_in_summary` finds what the summary lacks; `session_id` the
//!   transcript's session id (joins `type2_sessions_history.id`, and
//!   `type2_sessions.id` for current sessions), `message` the text, `category` and `embedding` what the
//!   search index holds for it (NULL until indexed); `embedding` is `REAL[]` on
//!   PostgreSQL (`vector(1536)` needs the pgvector extension: cast it where installed)
//!   and the index's `BLOB` on SQLite.
//! * ClawOS `sessions`: `workspace_id` is the key's agent, `remote_jid` the origin's
//!   sender (else the key's last part), `status` `closed` or `active`, `turn_count` and
//!   `context_summary` 0 and `''` when unset, as the kernel API shows them.
//!
//! A stored entry or line that is not JSON PostgreSQL can read (the `\u0000` escape)
//! gives NULL in the columns taken from it instead of failing the query.

pub(crate) mod doctor;
pub(crate) mod migrate;
pub mod openclaw;
pub mod telemetry;
pub(crate) mod views;

pub use doctor::{examine, DoctorOptions, DoctorReport, Finding, Repair};
pub use migrate::{
    migrate, migrate_with, Checksums, MigrateOptions, MigrationProgress, MigrationReport,
    NoProgress, SessionConflict,
};
pub use views::{type2_message_id, ViewSchemas};
