//! What each command does.

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_sessions::manager::DeleteOptions;
use agent_sessions::ops::{migrate_with, MigrateOptions, MigrationProgress, MigrationReport};
use agent_sessions::privacy::encryption::{migrate_sealed, KeyFiles};
use agent_sessions::privacy::PruneOptions;
use agent_sessions::privacy::{ForgetOptions, PersonRef, RetentionPolicy, RetentionRule};
use agent_sessions::store::{Backend, OpenMode, SessionStore, StoreUrl};
use agent_sessions::transcript::follow::{self, Position, Update};
use agent_sessions::transcript::{Offset, ReadIssue, SessionEvent, TranscriptRef, TranscriptStore};
use agent_sessions::{
    AgentId, Error, ListCursor, ListFilter, PeerKind, SessionKey, SessionManager, SessionStatus,
    StoredSession,
};
use clap::Args;
use serde_json::{json, Value};

use crate::conversation;
use crate::output::{self, Bar};
use crate::settings::{self, Setting};
use crate::staged::Staged;
use crate::{Command, Given, Global};

/// Something went wrong (`1`).
pub const EXIT_FAILURE: u8 = 1;
/// A migration or import did not verify (`3`).
pub const EXIT_UNVERIFIED: u8 = 3;
/// Bad usage (`2`): what clap reports, and an ambiguous short id, an option the
/// command would ignore, a copy of a store onto itself, an invalid `serve` setting.
pub const EXIT_USAGE: u8 = 2;
/// No such session, or no such store (`4`).
pub const EXIT_NOT_FOUND: u8 = 4;
/// `doctor` found problems it did not repair (`5`).
pub const EXIT_UNHEALTHY: u8 = 5;

/// Why a command failed, and with which exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        let (code, hint) = match error {
            Error::NotFound { .. } => (EXIT_NOT_FOUND, ""),
            Error::StoreNotFound { .. } => (
                EXIT_NOT_FOUND,
                "\n(name the store with --store or AGENT_SESSIONS_STORE: json:<dir>, sqlite:<file>, postgres://…)",
            ),
            _ => (EXIT_FAILURE, ""),
        };
        Failure {
            code,
            message: format!("{error}{hint}"),
        }
    }
}

pub(crate) fn failure(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

pub(crate) type Outcome = Result<(), Failure>;

/// Which agents' sessions a command over many sessions works on.
#[derive(Debug, Args)]
pub struct Scope {
    /// Every agent's sessions, not only --agent's.
    #[arg(long)]
    all_agents: bool,
}

impl Scope {
    /// `Some(agent)` unless `--all-agents`.
    fn agent<'a>(&self, agent: &'a AgentId) -> Option<&'a AgentId> {
        (!self.all_agents).then_some(agent)
    }

    /// A filter for the sessions in scope.
    fn filter(&self, agent: &AgentId) -> ListFilter {
        match self.agent(agent) {
            Some(agent) => ListFilter::new().agent(agent.clone()),
            None => ListFilter::new(),
        }
    }
}

/// What `stats` adds.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Also index and categorise the message log (keyword rules) and print message
    /// analytics: volumes by category, channel, agent identity and week, and trends.
    /// The index is built in memory; the store is not written.
    #[arg(long)]
    messages: bool,
    /// The trend window in days (the latest window against the one before it).
    #[arg(long, default_value_t = 7, requires = "messages")]
    window_days: u32,
    /// Keep the message index in the store (a JSON tree's `search/messages.json`, a
    /// database's own tables), so the next run only indexes what is new.
    #[arg(long, requires = "messages")]
    save_index: bool,
    #[command(flatten)]
    scope: Scope,
}

/// Where `export` writes, and whose sessions.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Write to this file instead of standard output: it is written owner-only (0600)
    /// beside the path and renamed into place, so a symlink there is replaced, never
    /// followed.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Only this session: a key (under --agent), a session id or its beginning; with
    /// its transcript (live or archived).
    #[arg(long, conflicts_with = "all_agents")]
    session: Option<String>,
    /// Only sessions active since then: a duration back from now (`7d`, `12h`) or a
    /// time (`2026-02-06`, `2026-02-06T10:00:00Z`); with their transcripts and those of
    /// the key's sessions closed since.
    #[arg(long, value_parser = parse_since)]
    since: Option<u64>,
    /// Instead, everything held about one person, for their access request: a person
    /// id (`jane`, `staff:17`) or a channel sender (`telegram:42`, `sms:+15550100`).
    #[arg(long, conflicts_with_all = ["session", "since", "all_agents"])]
    person: Option<String>,
    /// With --person: the folder holding the bot's session workspaces, whose files
    /// are listed in the copy.
    #[arg(long, requires = "person")]
    workspaces: Option<PathBuf>,
    /// With --person, on a sealed store: their words are opened with these keys.
    #[command(flatten)]
    keys: crate::keys::KeyDirArgs,
    #[command(flatten)]
    scope: Scope,
}

/// `forget`'s arguments.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Who: a person id (`jane`, `staff:17`) or a channel sender (`telegram:42`,
    /// `sms:+15550100`); ids linked to them are erased too.
    #[arg(long)]
    person: String,
    /// Also rewrite the database so deleted rows leave its files (SQLite `VACUUM`,
    /// PostgreSQL `VACUUM FULL`, which locks each table while it runs).
    #[arg(long)]
    vacuum: bool,
    /// The folder holding the bot's session workspaces: the person's are removed.
    #[arg(long)]
    workspaces: Option<PathBuf>,
    /// On a sealed store, the person's data keys are destroyed too, so what backups
    /// hold of them no longer opens.
    #[command(flatten)]
    keys: crate::keys::KeyDirArgs,
}

/// A retention policy file, as `prune --retention` reads it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    rules: Vec<RuleFile>,
    #[serde(default)]
    max_per_pass: Option<usize>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RuleFile {
    agent: Option<String>,
    channel: Option<String>,
    transcripts: Option<String>,
    group_chatter: Option<String>,
    closed_sessions: Option<String>,
    #[serde(default)]
    keep_summary: bool,
}

fn retention_policy(file: &Path) -> Result<RetentionPolicy, Failure> {
    let bad = |problem: String| failure(EXIT_USAGE, format!("{}: {problem}", file.display()));
    // Only a regular file is read (a FIFO would wait forever).
    match std::fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => {}
        Ok(_) => return Err(bad("not a regular file".into())),
        Err(e) => return Err(bad(e.to_string())),
    }
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    let parsed: PolicyFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let duration = |raw: &Option<String>| -> Result<Option<Duration>, Failure> {
        let Some(raw) = raw.as_deref() else {
            return Ok(None);
        };
        let keep = parse_duration(raw).map_err(bad)?;
        if keep < Duration::from_secs(60) {
            return Err(bad(format!(
                "{raw:?} keeps (almost) nothing: give at least a minute (a policy removes what is older)"
            )));
        }
        Ok(Some(keep))
    };
    let mut policy = RetentionPolicy::new();
    if let Some(max) = parsed.max_per_pass {
        policy = policy.at_most(max);
    }
    for rule in &parsed.rules {
        let mut built = match &rule.agent {
            Some(agent) => {
                RetentionRule::for_agent(AgentId::new(agent).map_err(|e| bad(e.to_string()))?)
            }
            None => RetentionRule::all(),
        };
        if let Some(channel) = &rule.channel {
            built = built.channel(channel);
        }
        if let Some(keep) = duration(&rule.transcripts)? {
            built = built.transcripts(keep);
        }
        if let Some(keep) = duration(&rule.group_chatter)? {
            built = built.group_chatter(keep);
        }
        if let Some(keep) = duration(&rule.closed_sessions)? {
            built = built.closed_sessions(keep);
        }
        if rule.keep_summary {
            built = built.keep_summary();
        }
        policy = policy.rule(built);
    }
    Ok(policy)
}

/// `--person`: a channel sender when it names a channel (`telegram:42`), else a
/// person id (`jane`, and `staff:17`, whose prefix is not a channel).
fn person_ref(raw: &str) -> Result<PersonRef, Failure> {
    let raw = raw.trim();
    let usage = |problem: &str| failure(EXIT_USAGE, format!("--person {raw:?}: {problem}"));
    if raw.is_empty() {
        return Err(failure(EXIT_USAGE, "--person is empty".to_owned()));
    }
    if raw.chars().any(char::is_control) {
        return Err(usage("holds a control character"));
    }
    if !raw.chars().any(char::is_alphanumeric) || raw.starts_with(':') {
        return Err(usage("is not an id"));
    }
    const CHANNELS: &[&str] = &[
        "telegram",
        "whatsapp",
        "sms",
        "signal",
        "slack",
        "discord",
        "imessage",
        "imsg",
        "matrix",
        "msteams",
        "googlechat",
        "web",
        "webchat",
        "cli",
        "email",
        "line",
    ];
    if CHANNELS.contains(&raw.to_lowercase().as_str()) {
        return Err(usage("is a channel: give the sender on it (telegram:42)"));
    }
    Ok(match raw.split_once(':') {
        Some((channel, id)) if CHANNELS.contains(&channel.to_lowercase().as_str()) => {
            if id.trim().is_empty() {
                return Err(usage("names no sender id after the channel"));
            }
            PersonRef::sender(channel, id)
        }
        _ => PersonRef::person(raw),
    })
}

/// A manager over the existing backend `store` that reaches all of it: for erasing and
/// exporting a person.
async fn backend_manager(
    store: &str,
    agent: &AgentId,
    workspaces: Option<&Path>,
    isolated: bool,
    keys: Option<KeyFiles>,
) -> Result<SessionManager, Failure> {
    if let Some(dir) = workspaces {
        if !std::fs::metadata(dir).is_ok_and(|m| m.is_dir()) {
            return Err(failure(
                EXIT_USAGE,
                format!("--workspaces {}: not a directory", dir.display()),
            ));
        }
    }
    let backend = Backend::open_with(store, OpenMode::Existing).await?;
    let mut builder = SessionManager::builder(backend.sessions().clone())
        .backend(backend)
        .default_agent(agent.clone());
    if isolated {
        builder = builder.isolate_to_agent(agent.clone());
    }
    if let Some(dir) = workspaces {
        builder = builder.workspaces(agent_sessions::identity::Workspaces::new(dir));
    }
    if let Some(keys) = keys {
        builder = builder.encryption(keys);
    }
    Ok(builder.build()?)
}

async fn forget(store: &str, agent: &AgentId, json: bool, args: ForgetArgs) -> Outcome {
    let person = person_ref(&args.person)?;
    let keys = args.keys.open()?;
    // An erase reaches every agent: a person's data is not left in one of them.
    let manager = backend_manager(store, agent, args.workspaces.as_deref(), false, keys).await?;
    let mut options = ForgetOptions::new();
    if args.vacuum {
        options = options.vacuum();
    }
    let report = manager.forget_person_with(&person, options).await?;
    output::counts(json, "erased", &report);
    Ok(())
}

/// `--since`: epoch milliseconds from a duration back from now, a date or a time.
fn parse_since(raw: &str) -> Result<u64, String> {
    let now = chrono::Utc::now();
    let at = if let Ok(back) = humantime::parse_duration(raw) {
        chrono::Duration::from_std(back)
            .ok()
            .and_then(|back| now.checked_sub_signed(back))
            .ok_or_else(|| format!("{raw:?} reaches back too far"))?
    } else if let Ok(at) = chrono::DateTime::parse_from_rfc3339(raw) {
        at.with_timezone(&chrono::Utc)
    } else if let Ok(day) = chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        day.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc()
    } else {
        return Err(format!(
            "{raw:?} is neither a duration (7d, 12h) nor a date (2026-02-06) or time (2026-02-06T10:00:00Z)"
        ));
    };
    Ok(at.timestamp_millis().max(0) as u64)
}

/// What `views` does, and (PostgreSQL) where the views go.
#[derive(Debug, Args)]
pub struct ViewsArgs {
    /// `create` (or re-create: idempotent) or `drop` the views.
    action: ViewsAction,
    /// PostgreSQL: the schema of type2_sessions, type2_sessions_history and type2_messages.
    #[arg(long, default_value = "brainframe")]
    rabs_schema: String,
    /// PostgreSQL: the schema of ClawOS's sessions view.
    #[arg(long, default_value = "clawos")]
    clawos_schema: String,
}

/// `views create` or `views drop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewsAction {
    /// Create the views, replacing those there.
    Create,
    /// Drop the views (the tables are untouched).
    Drop,
}

/// `views`: creates or drops the SQL views over an existing database store.
async fn views(store: &str, json: bool, args: ViewsArgs) -> Outcome {
    // The store must exist (and is migrated): views over missing tables are no use.
    let backend = Backend::open_with(store, OpenMode::Existing).await?;
    let shown = without_password(store);
    let names = match backend.url() {
        StoreUrl::Sqlite(file) => {
            let db = agent_sessions::store::SqliteStore::open(file)?;
            match args.action {
                ViewsAction::Create => db.create_views().await?,
                ViewsAction::Drop => db.drop_views().await?,
            }
            vec![
                "type2_sessions",
                "type2_sessions_history",
                "type2_messages",
                "clawos_sessions",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
        }
        StoreUrl::Postgres { url, schema } => {
            let options = match schema {
                Some(schema) => agent_sessions::store::PostgresOptions::in_schema(schema),
                None => agent_sessions::store::PostgresOptions::default(),
            };
            let db = agent_sessions::store::PostgresStore::connect_with(url, options).await?;
            let schemas =
                agent_sessions::ops::ViewSchemas::new(&args.rabs_schema, &args.clawos_schema);
            match args.action {
                ViewsAction::Create => db.create_views(&schemas).await?,
                ViewsAction::Drop => db.drop_views(&schemas).await?,
            }
            vec![
                format!("{}.type2_sessions", args.rabs_schema),
                format!("{}.type2_sessions_history", args.rabs_schema),
                format!("{}.type2_messages", args.rabs_schema),
                format!("{}.sessions", args.clawos_schema),
            ]
        }
        _ => {
            return Err(failure(
                EXIT_USAGE,
                format!("views need a SQLite or PostgreSQL store, not {shown}"),
            ))
        }
    };
    let action = match args.action {
        ViewsAction::Create => "created",
        ViewsAction::Drop => "dropped",
    };
    if json {
        output::emit(format_args!(
            "{}\n",
            json!({"action": action, "store": shown, "views": names})
        ));
    } else {
        output::emit(format_args!("{action} {} in {shown}\n", names.join(", ")));
    }
    Ok(())
}

/// How `serve` listens and whom it lets in.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (port 0 picks a free one; the address is printed).
    #[arg(long, default_value = "127.0.0.1:18888")]
    listen: std::net::SocketAddr,
    /// The shared secret callers must send in the `x-kernel-secret` header (never empty
    /// or blank: that would let every caller in).
    #[arg(long, env = "AGENT_SESSIONS_SECRET", hide_env_values = true)]
    // Checked in `serve`, not by clap, whose error would echo the value.
    secret: Option<String>,
    /// Serve without a secret on an address other than loopback, where every caller
    /// that can reach it can read and change every session.
    #[arg(long, conflicts_with = "secret")]
    insecure_no_auth: bool,
    /// Serve the service's metrics at `/metrics` in the Prometheus text format (behind
    /// the secret, like every call but `/kernel/health`).
    #[arg(long)]
    metrics: bool,
    /// Minutes of inactivity after which a sender's next message starts a new session
    /// (0: never).
    #[arg(
        long,
        env = "SESSION_TIMEOUT_MINUTES",
        default_value = "30",
        value_name = "MINUTES"
    )]
    // Parsed in `serve`, which names the variable when its value is invalid.
    idle_minutes: String,
    /// Turn on the topic-drift gate (`true` or `false`; the flag alone is `true`). It
    /// needs a model to classify messages, which this command does not have: with
    /// `true` it refuses to start. A host that wants the gate embeds the library and
    /// gives its manager a `DriftClassifier`.
    #[arg(
        long,
        env = "ENABLE_SESSION_DRIFT_CLASSIFIER",
        default_value = "false",
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    drift_classifier: String,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = agent_sessions::http::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    // The defaults below are those of `agent_sessions::http::ServiceOptions`.
    /// How long a client has to send a request's headers before its connection is
    /// closed (`10s`, `500ms`); idle connections are closed after it too.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    header_read_timeout: Duration,
    /// How long a client has to send a request's body (408 after it).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    body_read_timeout: Duration,
    /// How long a request may take from its headers to its response (408 after it).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    request_timeout: Duration,
    /// How many connections are held open at once; more clients wait until one closes,
    /// and idle connections that never showed the secret are closed to make room
    /// (default: 1,024, or fewer under a low open-files limit: a quarter of it, at least
    /// 64 files, is left to the stores).
    #[arg(long)]
    max_connections: Option<usize>,
    /// How many event streams are served at once (503 beyond).
    #[arg(long, default_value_t = agent_sessions::http::DEFAULT_MAX_EVENT_STREAMS)]
    max_event_streams: usize,
    /// Also serve the session inspector, a web page for operators, at `/ui` on the
    /// same port: sign in with the secret (so it needs --secret).
    #[arg(long)]
    ui: bool,
    /// Also answer requests addressed to this host name (repeatable). By default only
    /// IP addresses and `localhost` are answered, so a web page on another domain that
    /// resolves to this address (DNS rebinding) is refused.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
    /// On a sealed store: turns are sealed and read with these keys (without them a
    /// sealed session's turns are refused).
    #[command(flatten)]
    keys: crate::keys::KeyDirArgs,
}

/// Filters of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only sessions on this channel.
    #[arg(long)]
    channel: Option<String>,
    /// Only this kind of chat: direct, group or channel.
    #[arg(long, value_parser = parse_kind)]
    chat_type: Option<PeerKind>,
    /// Only sessions with this person.
    #[arg(long)]
    person: Option<String>,
    /// Only keys starting with this.
    #[arg(long)]
    key_prefix: Option<String>,
    /// Only sessions active within this long (`2h`, `7d`).
    #[arg(long, value_parser = parse_duration)]
    active_within: Option<Duration>,
    /// Also list inactive sessions (hidden by default).
    #[arg(long)]
    include_inactive: bool,
    /// Only sessions with this status (repeatable): idle, running, awaiting_approval,
    /// inactive or closed. Closed includes the sessions a reset or a timeout replaced.
    #[arg(long = "status", value_name = "STATUS", value_parser = parse_status)]
    statuses: Vec<SessionStatus>,
    /// At most this many: a page (default on a terminal: 50; otherwise all). When more
    /// follow, the command ends by printing, on standard error, the `--cursor` that
    /// lists the next page.
    #[arg(long)]
    limit: Option<usize>,
    /// List the page after this cursor (printed at the end of the page before).
    #[arg(long, value_parser = parse_cursor)]
    cursor: Option<ListCursor>,
    #[command(flatten)]
    scope: Scope,
}

/// The sessions `list` prints on a terminal when given no `--limit`.
const TERMINAL_PAGE: usize = 50;

/// A cursor as `list --cursor` takes it.
fn parse_cursor(raw: &str) -> Result<ListCursor, String> {
    raw.trim()
        .parse()
        .map_err(|_| "not a cursor a listing printed".to_owned())
}

/// A status name as `list --status` takes it.
fn parse_status(raw: &str) -> Result<SessionStatus, String> {
    match SessionStatus::from(raw.trim().to_lowercase().as_str()) {
        SessionStatus::Other(other) => Err(format!(
            "unknown status {other:?}: idle, running, awaiting_approval, inactive or closed"
        )),
        status => Ok(status),
    }
}

/// Options of `delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The session key.
    key: String,
    /// Also delete group and channel sessions (shared history).
    #[arg(long)]
    force: bool,
    /// Erase the transcript instead of archiving it.
    #[arg(long)]
    erase_transcript: bool,
}

/// Options of `prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove sessions inactive for longer than this (`30d`, `12h`).
    #[arg(long, value_parser = parse_duration, required_unless_present = "retention")]
    older_than: Option<Duration>,
    /// Instead, apply the retention policy in this JSON file once (what the bot's
    /// background sweep does): `{"rules": [{"channel": "sms", "transcripts": "30d",
    /// "groupChatter": "7d", "closedSessions": "90d", "keepSummary": true}]}`; a rule
    /// may name an `agent`; the first rule that selects a session applies. Prints
    /// what was removed, by kind.
    #[arg(long, conflicts_with_all = ["older_than", "keep", "dry_run"])]
    retention: Option<PathBuf>,
    /// Keep at least this many of the most recent sessions.
    #[arg(long)]
    keep: Option<usize>,
    /// Only say what would be removed.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    scope: Scope,
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    humantime::parse_duration(raw).map_err(|e| format!("{e} (try 30d, 12h, 90m)"))
}

fn parse_kind(raw: &str) -> Result<PeerKind, String> {
    match raw.trim().to_lowercase().as_str() {
        "direct" | "dm" => Ok(PeerKind::Direct),
        "group" => Ok(PeerKind::Group),
        "channel" => Ok(PeerKind::Channel),
        other => Err(format!("{other:?} is not direct, group or channel")),
    }
}

/// Refuses a global option given on the command line that `command` would ignore.
fn refuse_ignored(given: Given, command: &Command) -> Outcome {
    let (name, ignored): (&str, &[(&str, bool, &str)]) = match command {
        Command::Export(args) if args.person.is_some() => (
            "export --person",
            &[
                ("--json", given.json, "it always writes JSON"),
                ("--agent", given.agent, "a person's copy covers every agent"),
            ],
        ),
        Command::Export(_) => ("export", &[("--json", given.json, "it always writes JSON")]),
        Command::Forget(_) => (
            "forget",
            &[("--agent", given.agent, "an erase reaches every agent")],
        ),
        Command::Migrate { .. } => (
            "migrate",
            &[
                ("--store", given.store, "give the stores as --from and --to"),
                ("--agent", given.agent, "it copies every agent"),
            ],
        ),
        Command::Import { .. } => (
            "import",
            &[("--agent", given.agent, "it copies every agent")],
        ),
        Command::Doctor { .. } => (
            "doctor",
            &[("--agent", given.agent, "it examines every agent")],
        ),
        Command::Keys(args) if args.uses_store() => (
            "keys",
            &[("--agent", given.agent, "the keys serve every agent")],
        ),
        Command::Keys(_) => (
            "keys",
            &[
                (
                    "--store",
                    given.store,
                    "the keys are in --dir, apart from the store",
                ),
                ("--agent", given.agent, "the keys serve every agent"),
            ],
        ),
        Command::Views(_) => (
            "views",
            &[("--agent", given.agent, "the views show every agent")],
        ),
        Command::Serve(_) => (
            "serve",
            &[
                ("--agent", given.agent, "requests name their agent"),
                ("--json", given.json, "it answers over HTTP"),
            ],
        ),
        _ => ("", &[]),
    };
    match ignored.iter().find(|(_, given, _)| *given) {
        Some((option, _, why)) => Err(failure(
            EXIT_USAGE,
            format!("{option} is not used by {name} ({why})"),
        )),
        None => Ok(()),
    }
}

/// Runs one command.
pub async fn run(global: Global, given: Given, command: Command) -> Outcome {
    refuse_ignored(given, &command)?;
    let agent = AgentId::new(&global.agent)?;
    let json = global.json;
    match command {
        Command::List(args) => list(&global.store, &agent, json, args).await,
        Command::Show { key, keys } => show(&global.store, &agent, json, &key, &keys).await,
        Command::Log(args) => log(&global.store, &agent, json, args).await,
        Command::Follow(args) => follow(&global.store, &agent, json, args).await,
        Command::Reset { key } => {
            let (manager, key) = manager_for(&global.store, &agent, &key).await?;
            let session = manager.session(&key).reset().await?;
            output::done(json, "reset", &key, &session.entry.session_id);
            Ok(())
        }
        Command::Close { key } => {
            let (manager, key) = manager_for(&global.store, &agent, &key).await?;
            let session = manager.session(&key).close().await?;
            output::done(json, "closed", &key, &session.entry.session_id);
            Ok(())
        }
        Command::Delete(args) => {
            let (manager, key) = manager_for(&global.store, &agent, &args.key).await?;
            let options = DeleteOptions {
                force: args.force,
                erase_transcript: args.erase_transcript,
            };
            match manager.session(&key).delete(options).await? {
                Some(entry) => {
                    output::done(json, "deleted", &key, &entry.session_id);
                    Ok(())
                }
                None => Err(failure(EXIT_NOT_FOUND, format!("no session {key}"))),
            }
        }
        Command::Prune(args) => prune(&global.store, &agent, json, args).await,
        Command::Forget(args) => forget(&global.store, &agent, json, args).await,
        Command::Stats(args) => stats(&global.store, &agent, json, args).await,
        Command::Export(args) => export(&global.store, &agent, args).await,
        Command::Import {
            openclaw,
            overwrite_conflicts,
        } => {
            let root = openclaw_root(&openclaw)?;
            let from = format!("json:{}", root.display());
            copy(&from, &global.store, json, overwrite_conflicts, None).await
        }
        Command::Migrate {
            from,
            to,
            overwrite_conflicts,
            seal,
            master_key_env,
        } => {
            let sealing = seal.as_deref().map(|dir| (dir, master_key_env.as_str()));
            copy(&from, &to, json, overwrite_conflicts, sealing).await
        }
        Command::Serve(args) => serve(&global.store, given, args).await,
        Command::Views(args) => views(&global.store, json, args).await,
        Command::Keys(args) => crate::keys::keys(&global.store, json, args).await,
        Command::Doctor {
            repair,
            prune_missing_transcripts,
        } => doctor(&global.store, json, repair, prune_missing_transcripts).await,
    }
}

/// `store` with the password of a `postgres://user:password@host/…` URL masked, for
/// printing.
fn without_password(store: &str) -> String {
    let Some((scheme, rest)) = store.split_once("://") else {
        return store.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return store.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => store.to_owned(),
    }
}

/// The session key `raw` names under `agent`. An empty argument is refused (usage):
/// the library reads it as `main`, and `reset "$KEY"` with `KEY` unset must not reset
/// the main session.
fn key_of(agent: &AgentId, raw: &str) -> Result<SessionKey, Failure> {
    if raw.trim().is_empty() {
        return Err(failure(
            EXIT_USAGE,
            "the key is empty: name a session (`telegram:dm:42`, `main`, a session id)",
        ));
    }
    // `global` is the one key outside every agent (OpenClaw's global scope).
    if raw.trim().eq_ignore_ascii_case("global") {
        return Ok(SessionKey::parse("global")?);
    }
    Ok(SessionKey::for_agent(agent, raw)?)
}

async fn manager_for(
    store: &str,
    agent: &AgentId,
    raw: &str,
) -> Result<(SessionManager, SessionKey), Failure> {
    let key = key_of(agent, raw)?;
    Ok((existing_manager(store, agent).await?, key))
}

/// A manager over the existing store `store` (never created here).
async fn existing_manager(store: &str, agent: &AgentId) -> Result<SessionManager, Failure> {
    let backend = Backend::open_with(store, OpenMode::Existing).await?;
    Ok(SessionManager::builder(backend.sessions().clone())
        .transcripts(backend.transcripts().clone())
        .default_agent(agent.clone())
        .build()?)
}

async fn list(store: &str, agent: &AgentId, json: bool, args: ListArgs) -> Outcome {
    let backend = Backend::open_with(store, OpenMode::ReadOnly).await?;
    let mut filter = args.scope.filter(agent);
    if let Some(channel) = &args.channel {
        filter = filter.channel(channel);
    }
    if let Some(kind) = args.chat_type {
        filter = filter.chat_type(kind);
    }
    if let Some(person) = args.person {
        filter = filter.person(person);
    }
    if let Some(prefix) = &args.key_prefix {
        filter = filter.key_prefix(prefix);
    }
    if let Some(within) = args.active_within {
        let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
        filter = filter.updated_after(now.saturating_sub(within.as_millis() as u64));
    }
    for status in args.statuses {
        filter = filter.status(status);
    }
    if args.include_inactive {
        filter = filter.include_inactive();
    }
    let page = args
        .limit
        .or_else(|| io::stdout().is_terminal().then_some(TERMINAL_PAGE));
    if let Some(limit) = page {
        // One more than the page, to know whether another page follows.
        filter = filter.limit(limit.saturating_add(1));
    }
    if let Some(cursor) = args.cursor {
        filter = filter.after(cursor);
    }
    let mut sessions = backend.sessions().list(&filter).await?;
    let more = page.is_some_and(|limit| sessions.len() > limit);
    if let Some(limit) = page {
        sessions.truncate(limit);
    }
    output::sessions(json, &sessions);
    if let (true, Some(last)) = (more, sessions.last()) {
        let next = ListCursor::after(last);
        eprintln!("agent-sessions: more sessions follow: add --cursor {next} for the next page");
    }
    warn_unreadable(&backend).await
}

/// Says on standard error what the store holds but could not list. A problem
/// elsewhere in the store (another agent's directory) is a warning too, never the
/// command's failure: the listing was printed.
async fn warn_unreadable(backend: &Backend) -> Outcome {
    let unreadable = match backend.sessions().unreadable().await {
        Ok(unreadable) => unreadable,
        Err(error) => {
            eprintln!("agent-sessions: warning: could not examine the whole store: {error}");
            return Ok(());
        }
    };
    for entry in &unreadable {
        eprintln!(
            "agent-sessions: warning: skipped {:?} in {}: {}",
            entry.key, entry.location, entry.problem
        );
    }
    if !unreadable.is_empty() {
        eprintln!("agent-sessions: warning: `doctor` examines a JSON tree's unreadable entries");
    }
    Ok(())
}

async fn show(
    store: &str,
    agent: &AgentId,
    json: bool,
    raw: &str,
    keys: &crate::keys::KeyDirArgs,
) -> Outcome {
    let backend = Backend::open_with(store, OpenMode::ReadOnly).await?;
    let manager = reader(&backend, agent, keys.open()?)?;
    let session = find(manager.store(), agent, raw).await?;
    output::session(json, &session);
    Ok(())
}

/// The session `raw` names: a key (under `agent`), a session id or its beginning.
async fn find(
    sessions: &dyn SessionStore,
    agent: &AgentId,
    raw: &str,
) -> Result<StoredSession, Failure> {
    let key = key_of(agent, raw)?;
    match sessions.get(&key).await? {
        Some(session) => Ok(session),
        None => by_session_id(sessions, raw).await?.ok_or_else(|| {
            failure(
                EXIT_NOT_FOUND,
                format!("no session {key} (no key or session id {raw:?})"),
            )
        }),
    }
}

/// A manager that only reads `backend`, for the commands that print conversations:
/// with `keys`, what a sealed store holds is read opened.
fn reader(
    backend: &Backend,
    agent: &AgentId,
    keys: Option<KeyFiles>,
) -> Result<SessionManager, Failure> {
    let builder = SessionManager::builder(backend.sessions().clone())
        .transcripts(backend.transcripts().clone())
        .default_agent(agent.clone());
    Ok(match keys {
        Some(keys) => builder.encryption(keys),
        None => builder,
    }
    .build()?)
}

/// What `log` prints.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// The session key (`agent:main:telegram:dm:42`, or `telegram:dm:42` under
    /// --agent), its session id, or the beginning of the id.
    key: String,
    /// Every session the key has had, oldest first: those a reset, a close or an
    /// expiry ended, then the current one.
    #[arg(long)]
    all: bool,
    /// Write to standard output even on a terminal (by default a terminal gets
    /// `$PAGER`, or `less -FRX`).
    #[arg(long)]
    no_pager: bool,
    /// On a sealed store: its lines are opened with these keys (without them a sealed
    /// line's text prints empty).
    #[command(flatten)]
    keys: crate::keys::KeyDirArgs,
}

async fn log(store: &str, agent: &AgentId, json: bool, args: LogArgs) -> Outcome {
    let backend = Backend::open_with(store, OpenMode::ReadOnly).await?;
    let manager = reader(&backend, agent, args.keys.open()?)?;
    let session = find(manager.store(), agent, &args.key).await?;
    let transcripts = manager
        .transcripts()
        .expect("a reader has the backend's transcripts");
    let sessions = if args.all {
        key_sessions(manager.store(), &session.key).await?
    } else {
        vec![session]
    };
    let mut output = conversation::Output::open(!json && !args.no_pager);
    for session in &sessions {
        let out = output.writer();
        conversation::write_heading(out, session, json)
            .unwrap_or_else(|e| output::stdout_failed(&e));
        // The stored session's own transcript: a session id is looked up nowhere else.
        // Read a chunk at a time, and on into the archived copy once the transcript was
        // archived (a reset, a delete) under the reader.
        let mut transcript = TranscriptRef::of(&session.key, &session.entry, agent);
        let (mut from, mut archived) = (Offset::START, false);
        loop {
            let read = transcripts
                .read_chunk(&transcript, from, LOG_CHUNK_BYTES)
                .await?;
            if read.events.is_empty() {
                match transcripts.archived(&transcript).await? {
                    Some(copy) if !archived => (transcript, archived) = (copy, true),
                    _ => break,
                }
                continue;
            }
            from = read.next;
            write_items(
                out,
                &session.key,
                &session.entry.session_id,
                &read.events,
                json,
            )
            .unwrap_or_else(|e| output::stdout_failed(&e));
            // What was skipped is said, on standard error: the conversation printed is
            // not the whole transcript.
            for issue in &read.issues {
                eprintln!(
                    "agent-sessions: warning: the transcript of session {} ({}): {}",
                    session.entry.session_id,
                    session.key,
                    read_issue(issue)
                );
            }
        }
    }
    output
        .finish()
        .unwrap_or_else(|e| output::stdout_failed(&e));
    Ok(())
}

/// `issue` in words that hold in a read from any place in the transcript.
fn read_issue(issue: &ReadIssue) -> String {
    match issue {
        ReadIssue::InvalidLine {
            offset, message, ..
        } => format!(
            "the line at byte {} is not a transcript entry ({message}); it was skipped",
            offset.0
        ),
        ReadIssue::TornLastLine { offset, bytes, .. } => format!(
            "the last line (at byte {}, {bytes} bytes) is torn, a writer stopped mid-line; \
             it was skipped",
            offset.0
        ),
        other => other.to_string(),
    }
}

/// How much of a transcript `log` reads at a time.
const LOG_CHUNK_BYTES: usize = 256 * 1024;

/// The offset of a follower's position in a session (0 for any other position).
fn offset_in(position: &Position) -> u64 {
    match position {
        Position::After { offset, .. } => offset.0,
        _ => 0,
    }
}

/// `follow --store-wide`: every session of `agent`, from now on, until Ctrl-C.
async fn follow_agent(manager: &SessionManager, json: bool) -> Outcome {
    let agent = manager.default_agent();
    let mut follow = manager
        .follow(follow::Scope::Agent(agent.clone()), Position::Now)
        .await?;
    eprintln!("agent-sessions: following every session of agent {agent} from now on");
    let mut out = io::stdout().lock();
    // The session whose lines were printed last: another one's get their heading.
    let mut shown: Option<String> = None;
    let mut sessions: BTreeMap<String, StoredSession> = BTreeMap::new();
    loop {
        let update = tokio::select! {
            update = follow.next() => update?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let written = match update {
            Update::Session { session, .. } | Update::Status { session } => {
                shown = Some(session.entry.session_id.clone());
                let written = conversation::write_heading(&mut out, &session, json);
                sessions.insert(session.entry.session_id.clone(), *session);
                written
            }
            Update::Unreadable {
                key,
                session_id,
                problem,
                ..
            } => {
                eprintln!(
                    "agent-sessions: warning: no longer following {key} (session {session_id}): {}",
                    conversation::escaped(&problem)
                );
                Ok(())
            }
            Update::Events {
                key,
                session_id,
                events,
                ..
            } => {
                let mut written = Ok(());
                if shown.as_deref() != Some(session_id.as_str()) && !json {
                    if let Some(session) = sessions.get(&session_id) {
                        written = conversation::write_heading(&mut out, session, json);
                    }
                    shown = Some(session_id.clone());
                }
                written.and_then(|()| write_items(&mut out, &key, &session_id, &events, json))
            }
            Update::Rewound {
                key,
                session_id,
                next,
            } => conversation::write_rewound(&mut out, &key, &session_id, offset_in(&next), json),
            _ => Ok(()),
        };
        written
            .and_then(|()| out.flush())
            .unwrap_or_else(|e| output::stdout_failed(&e));
        // Only the sessions still followed are remembered.
        if sessions.len() > agent_sessions::transcript::follow::MAX_WATCHED_SESSIONS {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.entry.updated_at)
                .map(|(id, _)| id.clone())
            {
                sessions.remove(&oldest);
            }
        }
    }
}

/// Every session `key` has had, oldest first: its closed sessions, then its current one.
async fn key_sessions(
    store: &dyn SessionStore,
    key: &SessionKey,
) -> Result<Vec<StoredSession>, Failure> {
    let mut filter = ListFilter::all().key_prefix(key.as_str());
    filter.status = agent_sessions::store::StatusFilter::Only(vec![SessionStatus::Closed]);
    let mut sessions: Vec<StoredSession> = store
        .list(&filter)
        .await?
        .into_iter()
        .filter(|s| &s.key == key)
        .collect();
    if let Some(current) = store.get(key).await? {
        sessions.retain(|s| s.entry.session_id != current.entry.session_id);
        sessions.push(current);
    }
    let started = |s: &StoredSession| s.entry.session_started_at.unwrap_or(s.entry.updated_at);
    sessions
        .sort_by(|a, b| (started(a), &a.entry.session_id).cmp(&(started(b), &b.entry.session_id)));
    Ok(sessions)
}

fn write_items(
    out: &mut dyn Write,
    key: &SessionKey,
    session_id: &str,
    events: &[SessionEvent],
    json: bool,
) -> io::Result<()> {
    for event in events {
        let item = conversation::Item::of(event);
        if json {
            writeln!(out, "{}", item.json(key, session_id))?;
        } else {
            item.write(out)?;
        }
    }
    Ok(())
}

/// What `follow` follows.
#[derive(Debug, Args)]
pub struct FollowArgs {
    /// The session key (`agent:main:telegram:dm:42`, or `telegram:dm:42` under
    /// --agent), or a session id of the key (or its beginning). A key with no session
    /// yet is waited for.
    #[arg(required_unless_present = "store_wide", conflicts_with = "store_wide")]
    key: Option<String>,
    /// Every session of --agent instead of one key: sessions as they start, status
    /// changes, and every new line, from now on.
    #[arg(long)]
    store_wide: bool,
    /// How many of the current session's last lines to print before the new ones.
    #[arg(long, short = 'n', default_value_t = 10)]
    lines: usize,
    /// On a sealed store: its lines are opened with these keys.
    #[command(flatten)]
    keys: crate::keys::KeyDirArgs,
}

async fn follow(store: &str, agent: &AgentId, json: bool, args: FollowArgs) -> Outcome {
    let backend = Backend::open_with(store, OpenMode::ReadOnly).await?;
    let manager = reader(&backend, agent, args.keys.open()?)?;
    let Some(raw) = args.key.as_deref() else {
        return follow_agent(&manager, json).await;
    };
    let key = match find(manager.store(), agent, raw).await {
        Ok(session) => session.key,
        Err(failure) if failure.code == EXIT_NOT_FOUND => {
            let key = key_of(agent, raw)?;
            eprintln!("agent-sessions: waiting for the first session of {key}");
            key
        }
        Err(failure) => return Err(failure),
    };
    let mut follow = manager
        .follow(follow::Scope::Key(key.clone()), Position::Start)
        .await?;
    let mut out = io::stdout().lock();
    // What the key holds now: its session's last lines only.
    let mut heading = None;
    let mut last = std::collections::VecDeque::with_capacity(args.lines.min(1024));
    while let Some(update) = follow.try_next().await? {
        match update {
            Update::Session { session, .. } => {
                heading = Some(session);
                last.clear();
            }
            Update::Events {
                session_id, events, ..
            } => {
                for event in events {
                    last.push_back((session_id.clone(), event));
                    if last.len() > args.lines {
                        last.pop_front();
                    }
                }
            }
            Update::Rewound {
                session_id, next, ..
            } => {
                let from = offset_in(&next);
                last.retain(|(s, event)| *s != session_id || event.offset.0 < from);
            }
            _ => {}
        }
    }
    let shown = (|| -> io::Result<()> {
        if let Some(session) = &heading {
            conversation::write_heading(&mut out, session, json)?;
        }
        for (session_id, event) in &last {
            write_items(
                &mut out,
                &key,
                session_id,
                std::slice::from_ref(event),
                json,
            )?;
        }
        out.flush()
    })();
    shown.unwrap_or_else(|e| output::stdout_failed(&e));
    loop {
        let update = tokio::select! {
            update = follow.next() => update?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let written = match &update {
            Update::Session { session, .. } => conversation::write_heading(&mut out, session, json),
            Update::Events {
                session_id, events, ..
            } => write_items(&mut out, &key, session_id, events, json),
            Update::Rewound {
                key,
                session_id,
                next,
            } => conversation::write_rewound(&mut out, key, session_id, offset_in(next), json),
            _ => Ok(()),
        };
        written
            .and_then(|()| out.flush())
            .unwrap_or_else(|e| output::stdout_failed(&e));
    }
}

/// The session, of any agent, whose session id is `raw` or starts with it (the short
/// id `list` prints) — current, inactive or closed. An id that begins several is an
/// error naming them.
async fn by_session_id(
    sessions: &dyn SessionStore,
    raw: &str,
) -> Result<Option<StoredSession>, Failure> {
    let wanted = raw.trim().to_lowercase();
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut found: Vec<StoredSession> = sessions
        .list(&ListFilter::new().any_status())
        .await?
        .into_iter()
        .filter(|s| s.entry.session_id.to_lowercase().starts_with(&wanted))
        .collect();
    if let Some(exact) = found
        .iter()
        .position(|s| s.entry.session_id.to_lowercase() == wanted)
    {
        return Ok(Some(found.swap_remove(exact)));
    }
    if found.len() > 1 {
        let candidates: Vec<String> = found
            .iter()
            .map(|s| format!("  {} (session {})", s.key, s.entry.session_id))
            .collect();
        return Err(failure(
            EXIT_USAGE,
            format!(
                "session id {raw:?} is ambiguous: the ids of {} begin with it:\n{}",
                output::count(found.len() as u64, "session", "sessions"),
                candidates.join("\n")
            ),
        ));
    }
    Ok(found.pop())
}

async fn prune(store: &str, agent: &AgentId, json: bool, args: PruneArgs) -> Outcome {
    if let Some(file) = &args.retention {
        let policy = retention_policy(file)?;
        let isolated = args.scope.agent(agent).is_some();
        let manager = backend_manager(store, agent, None, isolated, None).await?;
        let report = manager.apply_retention(&policy).await?;
        output::counts(json, "removed", &report);
        return Ok(());
    }
    let manager = existing_manager(store, agent).await?;
    let older_than = args.older_than.unwrap_or_default();
    let mut options = PruneOptions::older_than(older_than).filter(args.scope.filter(agent));
    if let Some(keep) = args.keep {
        options = options.keep_newest(keep);
    }
    if args.dry_run {
        options = options.dry_run();
    }
    let removed = manager.prune(&options).await?;
    output::pruned(json, args.dry_run, &removed);
    Ok(())
}

async fn stats(store: &str, agent: &AgentId, json: bool, args: StatsArgs) -> Outcome {
    let mode = if args.save_index {
        OpenMode::Existing
    } else {
        OpenMode::ReadOnly
    };
    let backend = Backend::open_with(store, mode).await?;
    let scope = args.scope.agent(agent);
    let sessions = backend
        .sessions()
        .list(&args.scope.filter(agent).include_inactive())
        .await?;
    let transcripts = backend.transcripts().transcript_names(scope).await?;
    let by = |pick: &dyn Fn(&agent_sessions::StoredSession) -> String| {
        let mut counts = BTreeMap::<String, u64>::new();
        for session in &sessions {
            *counts.entry(pick(session)).or_default() += 1;
        }
        counts
    };
    let agents = by(&|s| s.key.agent_id().unwrap_or("(global)").to_owned());
    let kinds = by(&|s| {
        s.entry
            .chat_type
            .as_ref()
            .and_then(|t| t.peer_kind())
            .or_else(|| s.key.peer_kind())
            .map_or("unknown", |k| k.as_str())
            .to_owned()
    });
    let channels = by(&|s| s.entry.channel_name().unwrap_or("(none)").to_owned());
    let statuses = by(&|s| {
        s.entry
            .status
            .as_ref()
            .map_or("(none)", |status| status.as_str())
            .to_owned()
    });
    let archived = transcripts
        .iter()
        .filter(|(_, name)| !name.ends_with(".jsonl"))
        .count();
    let summary = json!({
        "store": without_password(&backend.url().to_string()),
        "sessions": sessions.len(),
        "byAgent": agents,
        "byChatType": kinds,
        "byChannel": channels,
        "byStatus": statuses,
        "transcripts": transcripts.len(),
        "archivedTranscripts": archived,
        "oldestActivity": sessions.iter().map(|s| s.entry.updated_at).min(),
        "newestActivity": sessions.iter().map(|s| s.entry.updated_at).max(),
    });
    let mut summary = summary;
    if args.messages {
        use agent_sessions::transcript::search::{
            self, InMemoryIndex, Search, SearchFilter, SearchIndex,
        };
        // Built in memory unless the index is to be kept in the store.
        let index: std::sync::Arc<dyn SearchIndex> = if args.save_index {
            backend.search_index().await?
        } else {
            std::sync::Arc::new(InMemoryIndex::new())
        };
        let search = Search::shared(index.clone());
        let progress = search.process_all(&**backend.transcripts()).await?;
        let window = chrono::Duration::days(i64::from(args.window_days.max(1)));
        let mut messages = index.messages(&SearchFilter::new()).await?;
        if let Some(agent) = scope {
            messages.retain(|m| m.agent == agent.as_str());
        }
        let analytics = search::analytics(&messages, chrono::Utc::now(), window);
        summary["messages"] = serde_json::to_value(&analytics).unwrap_or_default();
        summary["messages"]["newlyCategorized"] = json!(progress.categorized);
        summary["messages"]["windowDays"] = json!(args.window_days.max(1));
    }
    output::stats(json, &summary);
    Ok(())
}

async fn export(store: &str, agent: &AgentId, args: ExportArgs) -> Outcome {
    if let Some(path) = &args.output {
        export_destination_is_safe(store, path)?;
    }
    if let Some(person) = &args.person {
        return export_person(store, agent, person, &args).await;
    }
    if args.keys.given() {
        return Err(failure(
            EXIT_USAGE,
            "--keys is used with --person: a store's export is written as stored",
        ));
    }
    let backend = Backend::open_with(store, OpenMode::ReadOnly).await?;
    let (sessions, names) = exported(&backend, agent, &args).await?;
    let Some(path) = args.output else {
        let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout());
        let written = write_export(&backend, &sessions, &names, &mut out).await?;
        return written
            .and_then(|()| out.flush())
            .map_err(|error| output::stdout_failed(&error));
    };
    let mut out = beside(&path)?;
    write_export(&backend, &sessions, &names, &mut out)
        .await?
        .map_err(cannot_write(&path))?;
    persist(out, &path)
}

/// The error of a write to `path` that failed.
fn cannot_write(path: &Path) -> impl Fn(io::Error) -> Failure + '_ {
    move |error| {
        failure(
            EXIT_FAILURE,
            format!("cannot write {}: {error}", path.display()),
        )
    }
}

/// A file for what goes to `path`, written whole or not at all (see [`Staged`]).
fn beside(path: &Path) -> Result<Staged, Failure> {
    Staged::new(path).map_err(cannot_write(path))
}

/// Makes what [`beside`] wrote durable and gives it `path`'s name.
fn persist(out: Staged, path: &Path) -> Outcome {
    out.commit().map_err(cannot_write(path))
}

/// `export --person`: the person's copy, to standard output or written whole to
/// `--output` (owner-only, renamed into place).
async fn export_person(store: &str, agent: &AgentId, raw: &str, args: &ExportArgs) -> Outcome {
    let person = person_ref(raw)?;
    // A person's copy holds what every agent keeps of them.
    let keys = args.keys.open()?;
    let manager = backend_manager(store, agent, args.workspaces.as_deref(), false, keys).await?;
    let Some(path) = &args.output else {
        let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout());
        manager.export_person(&person, &mut out).await?;
        return out.flush().map_err(|error| output::stdout_failed(&error));
    };
    let mut out = beside(path)?;
    manager.export_person(&person, &mut out).await?;
    persist(out, path)
}

/// The sessions and transcripts `export` writes: all of the agent's (or every
/// agent's), or those `--session` and `--since` select.
async fn exported(
    backend: &Backend,
    agent: &AgentId,
    args: &ExportArgs,
) -> Result<(Vec<StoredSession>, Vec<(AgentId, String)>), Failure> {
    let mut filter = args.scope.filter(agent).include_inactive();
    if let Some(since) = args.since {
        filter = filter.updated_after(since);
    }
    let sessions = match &args.session {
        Some(raw) => {
            let session = find(&**backend.sessions(), agent, raw).await?;
            let active = args
                .since
                .is_none_or(|since| session.entry.updated_at >= since);
            active.then_some(session).into_iter().collect()
        }
        None => backend.sessions().list(&filter).await?,
    };
    let scope = match &args.session {
        Some(_) => sessions
            .first()
            .and_then(|s| s.key.agent_id().map(AgentId::new)),
        None => args.scope.agent(agent).map(|a| Ok(a.clone())),
    }
    .transpose()?;
    let names = backend
        .transcripts()
        .transcript_names(scope.as_ref())
        .await?;
    if args.session.is_none() && args.since.is_none() {
        return Ok((sessions, names));
    }
    // The selected sessions' transcripts, and with --since those of sessions closed
    // since (replaced under their keys, so not listed as current).
    let mut ids: Vec<String> = sessions
        .iter()
        .map(|s| s.entry.session_id.clone())
        .collect();
    if args.session.is_none() {
        let mut closed = filter.clone();
        closed.status = agent_sessions::store::StatusFilter::Only(vec![SessionStatus::Closed]);
        ids.extend(
            backend
                .sessions()
                .list(&closed)
                .await?
                .into_iter()
                .map(|s| s.entry.session_id),
        );
    }
    let of_selected = |name: &str| {
        ids.iter().any(|id| {
            name.strip_prefix(id.as_str())
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("-topic-"))
        })
    };
    let names = names
        .into_iter()
        .filter(|(_, name)| of_selected(name))
        .collect();
    Ok((sessions, names))
}

/// Refuses an export destination that is anything but a new or regular file (a
/// symlink, a device such as `/dev/null`, a directory), or that lies inside the store
/// being exported: an export replaces its destination, so it must never replace those.
fn export_destination_is_safe(store: &str, path: &Path) -> Outcome {
    let refuse = |why: String| {
        failure(
            EXIT_USAGE,
            format!("will not write {}: {why}", path.display()),
        )
    };
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            return Err(refuse(
                "it is a symbolic link (give the path it points to)".into(),
            ))
        }
        Ok(metadata) if !metadata.is_file() => {
            return Err(refuse("it exists and is not a regular file".into()))
        }
        _ => {}
    }
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let Ok(dir) = dir.canonicalize() else {
        return Ok(()); // The write reports a missing directory.
    };
    let destination = dir.join(path.file_name().unwrap_or_default());
    let inside = match store.parse::<StoreUrl>()? {
        // The directories the crate keeps its files in.
        StoreUrl::Json(root) => agent_sessions::store::expand_home(&root)
            .canonicalize()
            .is_ok_and(|root| destination.starts_with(root)),
        StoreUrl::Sqlite(file) => {
            let file = agent_sessions::store::expand_home(&file);
            file.canonicalize().is_ok_and(|db| {
                let name = db
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                destination.parent() == db.parent()
                    && destination
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&name))
            })
        }
        _ => false,
    };
    if inside {
        return Err(refuse("it is inside the store being exported".into()));
    }
    Ok(())
}

/// Streams the export document into `out`: the sessions, then each transcript as it
/// is read, so no more than one transcript is in memory. The text is what
/// `serde_json::to_string_pretty` would give for the whole document. Failures to read
/// the store are the outer error; failures to write, the inner one.
async fn write_export(
    backend: &Backend,
    sessions: &[StoredSession],
    names: &[(AgentId, String)],
    out: &mut impl Write,
) -> Result<io::Result<()>, Failure> {
    /// Writes one array element, indented as the second level of the document.
    fn element(out: &mut impl Write, first: bool, value: &Value) -> io::Result<()> {
        let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
        // Newlines inside JSON strings are escaped: every newline here is layout.
        let text = text.replace('\n', "\n    ");
        write!(out, "{}\n    {text}", if first { "" } else { "," })
    }
    fn close(out: &mut impl Write, empty: bool, last: bool) -> io::Result<()> {
        let end = if last { "" } else { "," };
        if empty {
            writeln!(out, "]{end}")
        } else {
            writeln!(out, "\n  ]{end}")
        }
    }
    let head = |out: &mut dyn Write| -> io::Result<()> {
        write!(
            out,
            "{{\n  \"format\": \"agent-sessions-export\",\n  \"version\": 1,\n  \"sessions\": ["
        )
    };
    let mut written = head(out);
    for (i, session) in sessions.iter().enumerate() {
        let value = json!({"key": session.key.as_str(), "entry": session.entry});
        written = written.and_then(|()| element(out, i == 0, &value));
    }
    written = written.and_then(|()| close(out, sessions.is_empty(), false));
    written = written.and_then(|()| write!(out, "  \"transcripts\": ["));
    let bar = Bar::new(io::stderr().is_terminal());
    bar.begin("export", names.len() as u64);
    let mut first = true;
    for (agent, name) in names {
        if written.is_err() {
            break;
        }
        if let Some(lines) = backend.transcripts().export_lines(agent, name).await? {
            let value = json!({"agent": agent.as_str(), "name": name, "lines": lines});
            written = element(out, first, &value);
            first = false;
        }
        bar.advance(1);
    }
    bar.finish();
    written = written.and_then(|()| close(out, first, true));
    written = written.and_then(|()| writeln!(out, "}}"));
    Ok(written)
}

/// The state directory of an OpenClaw tree given as `~/.openclaw` or its `agents`.
fn openclaw_root(dir: &Path) -> Result<PathBuf, Failure> {
    let dir = agent_sessions::store::expand_home(dir);
    let root = if dir.file_name().is_some_and(|n| n == "agents") {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        dir
    };
    if root.join("agents").is_dir() {
        Ok(root)
    } else {
        Err(failure(
            EXIT_NOT_FOUND,
            format!(
                "{} has no agents/ directory: not an OpenClaw tree",
                root.display()
            ),
        ))
    }
}

async fn doctor(store: &str, json: bool, repair: bool, prune: bool) -> Outcome {
    use agent_sessions::ops::{examine, DoctorOptions};
    use agent_sessions::store::StoreUrl;
    let StoreUrl::Json(root) = store.parse::<StoreUrl>()? else {
        return Err(failure(
            EXIT_FAILURE,
            "doctor examines JSON store trees (json:<dir>); databases check themselves",
        ));
    };
    let mut options = if repair {
        DoctorOptions::repair()
    } else {
        DoctorOptions::default()
    };
    options.prune_missing_transcripts = prune;
    // Refuses a tree that is not there, with or without --repair (nothing is created).
    Backend::open_with(store, OpenMode::ReadOnly).await?;
    let report = examine(&root, &options).await?;
    output::doctor(json, &report);
    if report.all_repaired() {
        Ok(())
    } else {
        Err(failure(
            EXIT_UNHEALTHY,
            "problems found (run with --repair to fix what can be fixed without loss)",
        ))
    }
}

/// Copies `from` into `to` — sealing the copy under the key directory `sealing` names
/// (with the environment variable holding its master key), when given — and verifies.
async fn copy(
    from: &str,
    to: &str,
    json: bool,
    overwrite_conflicts: bool,
    sealing: Option<(&Path, &str)>,
) -> Outcome {
    if from.parse::<StoreUrl>()?.same_store(&to.parse()?) {
        return Err(failure(
            EXIT_USAGE,
            format!("{from} and {to} are the same store: nothing to copy"),
        ));
    }
    let source = Backend::open_with(from, OpenMode::ReadOnly).await?;
    let sealing = match sealing {
        Some((dir, master_key_env)) => Some(crate::keys::sealing_keys(dir, master_key_env)?),
        None => None,
    };
    let target = Backend::open(to).await?;
    let bar = Bar::new(!json);
    let options = if overwrite_conflicts {
        MigrateOptions::overwriting_conflicts()
    } else {
        MigrateOptions::default()
    };
    let report: MigrationReport = match sealing {
        Some(keys) => migrate_sealed(&source, &target, keys, &options, &bar).await?,
        None => migrate_with(&source, &target, &options, &bar).await?,
    };
    output::migrated(json, from, to, &report);
    if report.verified() {
        Ok(())
    } else if !report.unreadable.is_empty() {
        Err(failure(
            EXIT_UNVERIFIED,
            format!(
                "{} entr{} of the source could not be read, or the target refused {}, and \
                 {} not copied (see the report; `doctor` examines a JSON tree)",
                report.unreadable.len(),
                if report.unreadable.len() == 1 {
                    "y"
                } else {
                    "ies"
                },
                if report.unreadable.len() == 1 {
                    "it"
                } else {
                    "them"
                },
                if report.unreadable.len() == 1 {
                    "was"
                } else {
                    "were"
                },
            ),
        ))
    } else if !report.source_changed.is_empty() {
        Err(failure(
            EXIT_UNVERIFIED,
            "the source changed while it was copied: stop its writers and run again",
        ))
    } else if !report.session_conflicts.is_empty() && !overwrite_conflicts {
        Err(failure(
            EXIT_UNVERIFIED,
            "the target has sessions that differ from the source: left as they are \
             (see the report; --overwrite-conflicts replaces them)",
        ))
    } else {
        Err(failure(
            EXIT_UNVERIFIED,
            "the copy does not match its source (see the report)",
        ))
    }
}

/// Serves the kernel API with its usual defaults (a session per sender and channel, its
/// reset phrases, an idle timeout) and `agent_sessions::http::serve`'s protections
/// (timeouts, a connection limit) until Ctrl-C, then finishes the calls in flight.
async fn serve(store: &str, given: Given, args: ServeArgs) -> Outcome {
    use agent_sessions::freshness::ResetTriggers;
    use agent_sessions::freshness::{ResetConfig, ResetSpec};
    use agent_sessions::http::{router, serve, Inspector, Secret, ServiceOptions};
    use agent_sessions::{DefaultKeyBuilder, DmScope};

    log_to_stderr();
    // Nothing is opened before the options are known to be valid and safe to serve with.
    let idle_minutes = Setting {
        text: &args.idle_minutes,
        flag: "--idle-minutes",
        var: settings::SESSION_TIMEOUT_MINUTES,
        from_flag: given.idle_minutes,
    }
    .minutes()
    .map_err(|message| failure(EXIT_USAGE, message))?;
    let drift = Setting {
        text: &args.drift_classifier,
        flag: "--drift-classifier",
        var: settings::ENABLE_SESSION_DRIFT_CLASSIFIER,
        from_flag: given.drift_classifier,
    };
    if drift
        .switch()
        .map_err(|message| failure(EXIT_USAGE, message))?
    {
        return Err(failure(
            EXIT_USAGE,
            format!(
                "refusing to start: {} turns on the topic-drift gate, which needs a model \
                 to classify messages, and this command has none (a host embeds the \
                 library and gives its SessionManager a DriftClassifier)",
                drift.source()
            ),
        ));
    }
    let secret = args
        .secret
        .map(Secret::new)
        .transpose()
        .map_err(|e| failure(EXIT_FAILURE, format!("refusing to start: {e}")))?;
    if secret.is_none() {
        let loopback = args.listen.ip().to_canonical().is_loopback();
        if !loopback && !args.insecure_no_auth {
            return Err(failure(
                EXIT_FAILURE,
                format!(
                    "refusing to serve {} without a secret: every caller that can reach it \
                     could read and change every session; set --secret (or \
                     AGENT_SESSIONS_SECRET), listen on loopback, or pass --insecure-no-auth",
                    args.listen
                ),
            ));
        }
    }
    let mut options = ServiceOptions::default()
        .body_limit(args.body_limit)
        .header_read_timeout(args.header_read_timeout)
        .body_read_timeout(args.body_read_timeout)
        .request_timeout(args.request_timeout)
        .max_connections(
            args.max_connections
                .unwrap_or_else(agent_sessions::http::default_max_connections),
        )
        .max_event_streams(args.max_event_streams);
    for host in &args.allow_hosts {
        options = options.allow_host(host);
    }
    options.secret = secret;
    if args.metrics {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| failure(EXIT_FAILURE, format!("cannot record metrics: {e}")))?;
        let upkeep = recorder.clone();
        // Histograms are summarised as they are rendered; upkeep keeps them bounded
        // between scrapes.
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        options = options.metrics_endpoint(move || recorder.render());
    }
    if args.ui && options.secret.is_none() {
        return Err(failure(
            EXIT_USAGE,
            "refusing to start: --ui needs --secret (or AGENT_SESSIONS_SECRET): the \
             inspector's login form asks for it",
        ));
    }
    options
        .validate()
        .map_err(|e| failure(EXIT_FAILURE, format!("refusing to start: {e}")))?;
    let keys = args.keys.open()?;
    let backend = agent_sessions::store::Backend::open(store).await?;
    let builder = SessionManager::builder(backend.sessions().clone())
        .backend(backend.clone())
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .reset_triggers(ResetTriggers::clawos())
        .freshness(ResetConfig::default().reset(ResetSpec::idle(idle_minutes)));
    let manager = match keys {
        Some(keys) => builder.encryption(keys),
        None => builder,
    }
    .build()?;
    if args.ui {
        let transcripts: std::sync::Arc<dyn TranscriptStore> = backend.transcripts().clone();
        // A sealed manager's index keeps words as keyed hashes and reads hits opened.
        let search =
            agent_sessions::transcript::search::Search::shared(manager.search_index().await?);
        options = options.inspector(Inspector::new().search(search, transcripts));
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            failure(
                EXIT_FAILURE,
                format!("cannot listen on {}: {e}", args.listen),
            )
        })?;
    let address = listener
        .local_addr()
        .map_err(|e| failure(EXIT_FAILURE, e.to_string()))?;
    if options.secret.is_none() {
        // Named after binding, so port 0 shows the port really served.
        eprintln!(
            "agent-sessions: warning: no secret set: every caller that can reach {address} \
             can read and change every session"
        );
    }
    eprintln!(
        "agent-sessions: serving {} on http://{address}",
        without_password(store)
    );
    if args.ui {
        eprintln!("agent-sessions: the session inspector is at http://{address}/ui");
    }
    let app = router(std::sync::Arc::new(manager), options.clone());
    serve(listener, app, &options, shutdown_signal()).await?;
    Ok(())
}

/// Ctrl-C, or SIGTERM (what service managers and container runtimes send to stop).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Logs the service's events to stderr: `RUST_LOG` (targets and levels, such as
/// `agent_sessions=debug`) picks which, `info` by default.
fn log_to_stderr() {
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::prelude::*;

    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            Targets::new().with_default(tracing_subscriber::filter::LevelFilter::INFO)
        });
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .with(filter)
        .try_init();
}
