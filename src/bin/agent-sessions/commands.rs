//! What each command does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_sessions::manager::{DeleteOptions, PruneOptions};
use agent_sessions::store::migrate::{migrate, MigrationReport};
use agent_sessions::store::Backend;
use agent_sessions::{AgentId, Error, ListFilter, PeerKind, SessionKey, SessionManager};
use clap::Args;
use serde_json::{json, Value};

use crate::output::{self, Bar};
use crate::{Command, Global};

/// Something went wrong (`1`).
pub const EXIT_FAILURE: u8 = 1;
/// A migration or import did not verify (`3`).
pub const EXIT_UNVERIFIED: u8 = 3;
/// No such session (`4`).
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
        let code = match error {
            Error::NotFound { .. } => EXIT_NOT_FOUND,
            _ => EXIT_FAILURE,
        };
        Failure {
            code,
            message: error.to_string(),
        }
    }
}

fn failure(code: u8, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

type Outcome = Result<(), Failure>;

/// What `stats` adds.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Also index and categorise the message log (keyword rules) and print message
    /// analytics: volumes by category, channel, agent identity and week, and trends.
    #[arg(long)]
    messages: bool,
    /// The trend window in days (the latest window against the one before it).
    #[arg(long, default_value_t = 7, requires = "messages")]
    window_days: u32,
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
    /// Minutes of inactivity after which a sender's next message starts a new session.
    #[arg(long, default_value_t = 30)]
    idle_minutes: u32,
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
    /// How many connections are held open at once; more clients wait until one closes.
    #[arg(long, default_value_t = agent_sessions::http::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
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
    /// At most this many.
    #[arg(long)]
    limit: Option<usize>,
    /// Every agent's sessions, not only --agent's.
    #[arg(long)]
    all_agents: bool,
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
    #[arg(long, value_parser = parse_duration)]
    older_than: Duration,
    /// Keep at least this many of the most recent sessions.
    #[arg(long)]
    keep: Option<usize>,
    /// Only say what would be removed.
    #[arg(long)]
    dry_run: bool,
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

/// Runs one command.
pub async fn run(global: Global, command: Command) -> Outcome {
    let agent = AgentId::new(&global.agent)?;
    let json = global.json;
    match command {
        Command::List(args) => list(&global.store, &agent, json, args).await,
        Command::Show { key } => show(&global.store, &agent, json, &key).await,
        Command::Reset { key } => {
            let (manager, key) = manager_for(&global.store, &agent, &key).await?;
            let session = manager.reset(&key).await?;
            output::done(json, "reset", &key, &session.entry.session_id);
            Ok(())
        }
        Command::Close { key } => {
            let (manager, key) = manager_for(&global.store, &agent, &key).await?;
            let session = manager.close(&key).await?;
            output::done(json, "closed", &key, &session.entry.session_id);
            Ok(())
        }
        Command::Delete(args) => {
            let (manager, key) = manager_for(&global.store, &agent, &args.key).await?;
            let options = DeleteOptions {
                force: args.force,
                erase_transcript: args.erase_transcript,
            };
            match manager.delete(&key, options).await? {
                Some(entry) => {
                    output::done(json, "deleted", &key, &entry.session_id);
                    Ok(())
                }
                None => Err(failure(EXIT_NOT_FOUND, format!("no session {key}"))),
            }
        }
        Command::Prune(args) => prune(&global.store, &agent, json, args).await,
        Command::Stats(args) => stats(&global.store, json, args).await,
        Command::Export { output } => export(&global.store, output.as_deref()).await,
        Command::Import { openclaw } => {
            let root = openclaw_root(&openclaw)?;
            let from = format!("json:{}", root.display());
            copy(&from, &global.store, json).await
        }
        Command::Migrate { from, to } => copy(&from, &to, json).await,
        Command::Serve(args) => serve(&global.store, args).await,
        Command::Doctor {
            repair,
            prune_missing_transcripts,
        } => doctor(&global.store, json, repair, prune_missing_transcripts).await,
    }
}

/// The session key `raw` names under `agent`.
fn key_of(agent: &AgentId, raw: &str) -> Result<SessionKey, Failure> {
    Ok(SessionKey::for_agent(agent, raw)?)
}

async fn manager_for(
    store: &str,
    agent: &AgentId,
    raw: &str,
) -> Result<(SessionManager, SessionKey), Failure> {
    let key = key_of(agent, raw)?;
    let manager = SessionManager::connect(store)
        .await?
        .default_agent(agent.clone())
        .build();
    Ok((manager, key))
}

async fn list(store: &str, agent: &AgentId, json: bool, args: ListArgs) -> Outcome {
    let backend = Backend::open(store).await?;
    let mut filter = ListFilter::new();
    if !args.all_agents {
        filter = filter.agent(agent.clone());
    }
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
    if let Some(limit) = args.limit {
        filter = filter.limit(limit);
    }
    let sessions = backend.sessions().list(&filter).await?;
    output::sessions(json, &sessions);
    Ok(())
}

async fn show(store: &str, agent: &AgentId, json: bool, raw: &str) -> Outcome {
    let key = key_of(agent, raw)?;
    let backend = Backend::open(store).await?;
    match backend.sessions().get(&key).await? {
        Some(session) => {
            output::session(json, &session);
            Ok(())
        }
        None => Err(failure(EXIT_NOT_FOUND, format!("no session {key}"))),
    }
}

async fn prune(store: &str, agent: &AgentId, json: bool, args: PruneArgs) -> Outcome {
    let manager = SessionManager::connect(store)
        .await?
        .default_agent(agent.clone())
        .build();
    let mut options =
        PruneOptions::older_than(args.older_than).filter(ListFilter::new().agent(agent.clone()));
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

async fn stats(store: &str, json: bool, args: StatsArgs) -> Outcome {
    let backend = Backend::open(store).await?;
    let sessions = backend.sessions().list(&ListFilter::new()).await?;
    let transcripts = backend.transcripts().transcript_names(None).await?;
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
        "store": store,
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
        let search = agent_sessions::search::Search::shared(backend.search_index().await?);
        let progress = search.process_all(&**backend.transcripts()).await?;
        let window = chrono::Duration::days(i64::from(args.window_days.max(1)));
        let analytics = search
            .analytics(
                &agent_sessions::search::SearchFilter::new(),
                chrono::Utc::now(),
                window,
            )
            .await?;
        summary["messages"] = serde_json::to_value(&analytics).unwrap_or_default();
        summary["messages"]["newlyCategorized"] = json!(progress.categorized);
        summary["messages"]["windowDays"] = json!(args.window_days.max(1));
    }
    output::stats(json, &summary);
    Ok(())
}

async fn export(store: &str, to: Option<&Path>) -> Outcome {
    let backend = Backend::open(store).await?;
    let sessions = backend.sessions().list(&ListFilter::new()).await?;
    let mut transcripts = Vec::new();
    for (agent, name) in backend.transcripts().transcript_names(None).await? {
        if let Some(lines) = backend.transcripts().export_lines(&agent, &name).await? {
            transcripts.push(json!({"agent": agent.as_str(), "name": name, "lines": lines}));
        }
    }
    let document = json!({
        "format": "agent-sessions-export",
        "version": 1,
        "sessions": sessions.iter().map(|s| json!({"key": s.key.as_str(), "entry": s.entry})).collect::<Vec<Value>>(),
        "transcripts": transcripts,
    });
    let text = serde_json::to_string_pretty(&document).expect("JSON values serialise");
    match to {
        Some(path) => std::fs::write(path, text + "\n").map_err(|e| {
            failure(
                EXIT_FAILURE,
                format!("cannot write {}: {e}", path.display()),
            )
        }),
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// The state directory of an OpenClaw tree given as `~/.openclaw` or its `agents`.
fn openclaw_root(dir: &Path) -> Result<PathBuf, Failure> {
    let dir = agent_sessions::paths::expand_home(dir);
    let root = if dir.file_name().is_some_and(|n| n == "agents") {
        dir.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        dir
    };
    if root.join("agents").is_dir() {
        Ok(root)
    } else {
        Err(failure(
            EXIT_FAILURE,
            format!(
                "{} has no agents/ directory: not an OpenClaw tree",
                root.display()
            ),
        ))
    }
}

async fn doctor(store: &str, json: bool, repair: bool, prune: bool) -> Outcome {
    use agent_sessions::store::doctor::{examine, DoctorOptions};
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

/// Copies `from` into `to` and verifies.
async fn copy(from: &str, to: &str, json: bool) -> Outcome {
    let source = Backend::open(from).await?;
    let target = Backend::open(to).await?;
    let bar = Bar::new(!json);
    let report: MigrationReport = migrate(&source, &target, &bar).await?;
    output::migrated(json, from, to, &report);
    if report.verified() {
        Ok(())
    } else {
        Err(failure(
            EXIT_UNVERIFIED,
            "the copy does not match its source (see the report)",
        ))
    }
}

/// Serves the kernel API with ClawOS's defaults (a session per sender and channel, its
/// reset phrases, an idle timeout) and `agent_sessions::http::serve`'s protections
/// (timeouts, a connection limit) until Ctrl-C, then finishes the calls in flight.
async fn serve(store: &str, args: ServeArgs) -> Outcome {
    use agent_sessions::freshness::{ResetConfig, ResetSpec};
    use agent_sessions::http::{router, serve, Secret, ServiceOptions};
    use agent_sessions::reset::ResetTriggers;
    use agent_sessions::{DefaultKeyBuilder, DmScope};

    // Nothing is opened before the options are known to be safe to serve with.
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
        eprintln!(
            "agent-sessions: warning: no secret set: every caller that can reach {} can \
             read and change every session",
            args.listen
        );
    }
    let mut options = ServiceOptions::default()
        .body_limit(args.body_limit)
        .header_read_timeout(args.header_read_timeout)
        .body_read_timeout(args.body_read_timeout)
        .request_timeout(args.request_timeout)
        .max_connections(args.max_connections);
    options.secret = secret;
    options
        .validate()
        .map_err(|e| failure(EXIT_FAILURE, format!("refusing to start: {e}")))?;
    let manager = SessionManager::connect(store)
        .await?
        .key_builder(DefaultKeyBuilder::new().dm_scope(DmScope::PerChannelPeer))
        .reset_triggers(ResetTriggers::clawos())
        .freshness(ResetConfig::default().reset(ResetSpec::idle(args.idle_minutes)))
        .build();
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
    eprintln!("agent-sessions: serving {store} on http://{address}");
    let app = router(std::sync::Arc::new(manager), options.clone());
    serve(listener, app, &options, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
