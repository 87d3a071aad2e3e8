//! `keys`: the data keys of a sealed store (the library's `encryption` feature) — a new
//! master key, the key directory's status, and replacing its master key.

use std::path::PathBuf;

use agent_sessions::privacy::encryption::{KeyFiles, MasterKey};
use clap::Args;

use crate::commands::{failure, Outcome, EXIT_NOT_FOUND, EXIT_USAGE};

/// What `keys` does, and with which keys.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// `generate` a master key (printed once, as base64), show the key directory's
    /// `status`, or `rotate` it to a new master key.
    action: KeysAction,
    /// The key directory (the bot's `KeyFiles`): apart from the store and its backups.
    #[arg(long, env = "AGENT_SESSIONS_KEYS")]
    dir: Option<PathBuf>,
    /// The environment variable holding the master key (64 hex digits or base64).
    #[arg(long, default_value = "AGENT_SESSIONS_MASTER_KEY")]
    master_key_env: String,
    /// `rotate`: the environment variable holding the master key being replaced.
    #[arg(long, default_value = "AGENT_SESSIONS_PREVIOUS_MASTER_KEY")]
    previous_key_env: String,
}

/// `keys generate`, `keys status` or `keys rotate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysAction {
    /// Print a new random master key.
    Generate,
    /// The master key's fingerprint, how many data keys there are and how many are
    /// sealed under it.
    Status,
    /// Seal every data key under the master key (from the previous one); resumable.
    Rotate,
}

/// `keys`.
pub fn keys(json: bool, args: KeysArgs) -> Outcome {
    if args.action == KeysAction::Generate {
        let key = MasterKey::generate()?;
        match json {
            true => println!("{}", serde_json::json!({ "masterKey": key.to_base64() })),
            false => println!("{}", key.to_base64()),
        }
        return Ok(());
    }
    let dir = args.dir.ok_or_else(|| {
        failure(
            EXIT_USAGE,
            "name the key directory with --dir or AGENT_SESSIONS_KEYS".to_owned(),
        )
    })?;
    if !dir.exists() {
        return Err(failure(
            EXIT_NOT_FOUND,
            format!("there is no key directory at {}", dir.display()),
        ));
    }
    let master = MasterKey::from_env(&args.master_key_env)?;
    let fingerprint = master.fingerprint();
    let keys = match args.action {
        KeysAction::Rotate => {
            let previous = MasterKey::from_env(&args.previous_key_env)?;
            let keys = KeyFiles::rotating(&dir, master, previous)?;
            let rotated = keys.rotate()?;
            if !json {
                println!("sealed {rotated} data keys anew under master key {fingerprint}");
            }
            keys
        }
        _ => KeyFiles::open(&dir, master)?,
    };
    let (all, current) = keys.status()?;
    if json {
        let status = serde_json::json!({
            "dir": dir.display().to_string(),
            "masterKey": fingerprint,
            "dataKeys": all,
            "underMasterKey": current,
        });
        println!("{status}");
    } else {
        println!(
            "{}: master key {fingerprint}, {all} data keys, {current} sealed under it",
            dir.display()
        );
    }
    Ok(())
}
