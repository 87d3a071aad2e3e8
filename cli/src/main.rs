//! `agent-sessions`: look after the sessions of a bot from the shell.
//!
//! Commands take `--store <url>` (or `AGENT_SESSIONS_STORE`; default
//! `json:~/.openclaw`) and `--agent <id>` (default `main`). Output is for people by
//! default (times in the local time zone) and JSON with `--json`. A global option a
//! command would ignore (`--store` for `migrate`, which takes `--from` and `--to`;
//! `--agent` for `migrate`, `import`, `doctor` and `serve`; `--json` for `export`,
//! which always writes JSON, and `serve`) is refused rather than silently dropped.
//!
//! **Agent scope.** Commands over many sessions (`list`, `stats`, `export`, `prune`)
//! work on `--agent`'s sessions only, unless `--all-agents` is given. `show` finds a
//! session by key (under `--agent`), by session id or by the short id `list` prints,
//! in any agent.
//!
//! **Read commands write nothing.** `list`, `show`, `stats`, `export`, `doctor`
//! without `--repair`, and the source of `import` and `migrate` open the store
//! read-only and never create it: a missing directory, database file or schema is
//! reported (exit code 4) with the store it looked for. `reset`, `close`, `delete`
//! and `prune` need an existing store too; only `serve` and the target of `import`
//! and `migrate` create one. `stats --messages` indexes the message log in memory;
//! `--save-index` keeps the index in the store.
//!
//! Output ends quietly with status 0 when its reader goes away (`export | head`).
//!
//! `serve` also reads its idle timeout and topic-drift switch from ClawOS's variables
//! (`SESSION_TIMEOUT_MINUTES`, `ENABLE_SESSION_DRIFT_CLASSIFIER`); a flag wins.
//!
//! Exit codes: 0 success, 1 failure (store, I/O, database), 2 bad usage (including
//! an ambiguous short id, an ignored option, a copy of a store onto itself, an invalid
//! `serve` setting from a flag or the environment), 3 a
//! migration or import that did not verify, 4 no such session or no such store,
//! 5 `doctor` found problems it did not repair.
//!
//! ```text
//! agent-sessions --store sqlite:~/bots/sessions.db list --all-agents
//! agent-sessions show 0f5d59ee
//! agent-sessions export --output backup.json
//! ```

mod commands;
mod conversation;
mod keys;
mod output;
mod settings;
mod staged;

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// Sessions of chat bots and AI agents: OpenClaw files, SQLite or PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "agent-sessions", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Global {
    /// Where the sessions are: json:<dir> (a directory holding agents/<agentId>/sessions/),
    /// sqlite:<file> or postgres://user@host/db[?schema=name].
    #[arg(
        long,
        global = true,
        env = "AGENT_SESSIONS_STORE",
        default_value = "json:~/.openclaw"
    )]
    store: String,
    /// The agent whose sessions a command works on.
    #[arg(long, global = true, default_value = "main")]
    agent: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List sessions, most recently active first.
    List(commands::ListArgs),
    /// Show one session: its main fields, or with --json its whole entry.
    Show {
        /// The session key (`agent:main:telegram:dm:42`, or `telegram:dm:42` under
        /// --agent), its session id, or the beginning of the id (the short id `list`
        /// prints).
        key: String,
        /// On a sealed store: its fields are opened with these keys (shown as
        /// stored without them).
        #[command(flatten)]
        keys: keys::KeyDirArgs,
    },
    /// Print a session's conversation: when, who (user, assistant, tool, status,
    /// compaction, …) and what, each session headed by when and why it started.
    Log(commands::LogArgs),
    /// Print a key's new transcript lines as they are written (tail -f), continuing
    /// into the next session after a reset, from any process, until Ctrl-C.
    Follow(commands::FollowArgs),
    /// Start a new session for a key; the old transcript is archived.
    Reset {
        /// The session key.
        key: String,
    },
    /// Close a session: its next message starts a new one.
    Close {
        /// The session key.
        key: String,
    },
    /// Delete a session; its transcript is archived (or erased).
    Delete(commands::DeleteArgs),
    /// Remove sessions inactive for longer than a duration.
    Prune(commands::PruneArgs),
    /// Erase one person from everything the store keeps: their sessions (current and
    /// closed) and transcripts (archived copies too), their lines in group transcripts,
    /// the search index, group chatter, system events, workspaces and the store's
    /// backups; prints what was removed, by kind (never the content).
    Forget(commands::ForgetArgs),
    /// Counts by agent, kind of chat, channel and status; with --messages, message
    /// analytics too.
    Stats(commands::StatsArgs),
    /// Write the sessions and transcripts (of --agent, or --all-agents) as one JSON
    /// document.
    Export(commands::ExportArgs),
    /// Copy an OpenClaw tree (stores and transcripts) into --store.
    Import {
        /// The OpenClaw state directory (`~/.openclaw`) or its `agents` directory.
        #[arg(long)]
        openclaw: std::path::PathBuf,
        /// Replace a session the store already has with another entry by the imported
        /// one (by default such conflicts are reported and left alone).
        #[arg(long)]
        overwrite_conflicts: bool,
    },
    /// Check a JSON store tree (and with --repair, fix it without losing anything).
    Doctor {
        /// Restore a valid backup over a corrupt store, quarantine orphaned temporary
        /// files, remove dead lock files.
        #[arg(long)]
        repair: bool,
        /// With --repair, also remove entries whose transcript file is gone (saved to
        /// the quarantine first).
        #[arg(long, requires = "repair")]
        prune_missing_transcripts: bool,
    },
    /// Serve the sessions HTTP API (the session-kernel API) over --store until Ctrl-C or
    /// SIGTERM.
    Serve(commands::ServeArgs),
    /// Create or drop SQL views with the shapes RABS (type2_sessions, type2_messages)
    /// and ClawOS (sessions) document, over a SQLite or PostgreSQL --store.
    Views(commands::ViewsArgs),
    /// Encryption at rest: print a new master key (`generate`), show a key
    /// directory's `status`, `rotate` it to a new master key (read from
    /// AGENT_SESSIONS_MASTER_KEY; the old one from AGENT_SESSIONS_PREVIOUS_MASTER_KEY),
    /// or replace --store's data keys (`rotate-data`, then `retire`).
    Keys(keys::KeysArgs),
    /// Copy everything from one store to another, resumably, and verify the copy.
    Migrate {
        /// The store to copy from.
        #[arg(long)]
        from: String,
        /// The store to copy to.
        #[arg(long)]
        to: String,
        /// Replace a session the target already has with another entry by the
        /// source's (by default such conflicts are reported and left alone).
        #[arg(long)]
        overwrite_conflicts: bool,
        /// Seal the copy (encryption at rest): what people and the model wrote is
        /// sealed under data keys kept in this key directory, made if it does not
        /// exist. The source stays as it is; the bot then opens --to with `KeyFiles`
        /// over this directory and the same master key.
        #[arg(long, value_name = "KEY_DIR")]
        seal: Option<std::path::PathBuf>,
        /// The environment variable holding the master key, with --seal (64 hex
        /// digits or base64; `keys generate` prints one).
        #[arg(long, default_value = "AGENT_SESSIONS_MASTER_KEY", requires = "seal")]
        master_key_env: String,
    },
}

/// Which options were given on the command line (not by default or from the
/// environment): global ones, and `serve`'s that it also reads from the environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Given {
    /// `--store`.
    pub store: bool,
    /// `--agent`.
    pub agent: bool,
    /// `--json`.
    pub json: bool,
    /// `serve --idle-minutes`.
    pub idle_minutes: bool,
    /// `serve --drift-classifier`.
    pub drift_classifier: bool,
}

impl Given {
    fn of(matches: &ArgMatches) -> Self {
        // Global options given after the subcommand are in its matches.
        let mut levels = vec![matches];
        if let Some((_, sub)) = matches.subcommand() {
            levels.push(sub);
        }
        // Only a level that knows `id` is asked: clap panics on an unknown one.
        let given = |id: &str| {
            levels.iter().any(|m| {
                m.ids().any(|known| known == id)
                    && m.value_source(id) == Some(ValueSource::CommandLine)
            })
        };
        Given {
            store: given("store"),
            agent: given("agent"),
            json: given("json"),
            idle_minutes: given("idle_minutes"),
            drift_classifier: given("drift_classifier"),
        }
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let given = Given::of(&matches);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("agent-sessions: cannot start: {error}");
            return ExitCode::from(commands::EXIT_FAILURE);
        }
    };
    match runtime.block_on(commands::run(cli.global, given, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "agent-sessions: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
