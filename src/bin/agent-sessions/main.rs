//! `agent-sessions`: look after the sessions of a bot from the shell.
//!
//! Every command takes `--store <url>` (or `AGENT_SESSIONS_STORE`; default
//! `json:~/.openclaw`) and `--agent <id>` (default `main`). Output is for people by
//! default and JSON with `--json`. Exit codes: 0 success, 1 failure (store, I/O,
//! database), 2 bad usage, 3 a migration or import that did not verify, 4 no such
//! session, 5 `doctor` found problems it did not repair.

mod commands;
mod output;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    /// Show one session's entry.
    Show {
        /// The session key (`agent:main:telegram:dm:42`, or `telegram:dm:42` under --agent).
        key: String,
    },
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
    /// Counts by agent, kind of chat, channel and status; with --messages, message
    /// analytics too.
    Stats(commands::StatsArgs),
    /// Write every session and transcript as one JSON document.
    Export {
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
    },
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
    /// Serve the sessions HTTP API (ClawOS's kernel API) over --store until Ctrl-C.
    Serve(commands::ServeArgs),
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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match runtime.block_on(commands::run(cli.global, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("agent-sessions: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
