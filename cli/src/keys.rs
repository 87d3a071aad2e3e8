//! `keys`: the data keys of a sealed store (the library's `encryption` feature) — a new
//! master key, the key directory's status, replacing its master key, and replacing the
//! data keys.

use std::path::PathBuf;

use agent_sessions::privacy::encryption::{DataKeyRotation, KeyFiles, MasterKey};
use agent_sessions::store::{Backend, OpenMode};
use agent_sessions::SessionManager;
use clap::Args;

use crate::commands::{failure, Outcome, EXIT_NOT_FOUND, EXIT_USAGE};

/// What `keys` does, and with which keys.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// `generate` a master key (printed once, as base64), show the key directory's
    /// `status`, `rotate` it to a new master key, or give the --store's data a new data
    /// key per owner (`rotate-data`) and let go of the replaced ones (`retire`).
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

/// `keys generate`, `status`, `rotate`, `rotate-data` or `retire`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeysAction {
    /// Print a new random master key.
    Generate,
    /// The master key's fingerprint, how many data keys there are and how many are
    /// sealed under it.
    Status,
    /// Seal every data key under the master key (from the previous one); resumable.
    Rotate,
    /// Give every owner of sealed data in --store a new data key and seal anew under
    /// it what the earlier one sealed, with the bot running; resumable.
    RotateData,
    /// Let go of each data key `rotate-data` replaced once nothing in --store is
    /// sealed under it.
    Retire,
}

impl KeysAction {
    /// Whether it works on the store's data (`--store`), not on the key directory
    /// alone.
    pub fn uses_store(self) -> bool {
        matches!(self, KeysAction::RotateData | KeysAction::Retire)
    }
}

impl KeysArgs {
    /// Whether it works on the store's data (`--store`).
    pub fn uses_store(&self) -> bool {
        self.action.uses_store()
    }
}

/// A sealed store's key directory, for a command that reads or erases a person.
#[derive(Debug, Args)]
pub struct KeyDirArgs {
    /// A sealed store's key directory (the bot's `KeyFiles`), with the master key in
    /// --master-key-env: a person of a sealed store is refused without it.
    #[arg(long)]
    keys: Option<PathBuf>,
    /// The environment variable holding the master key, with --keys.
    #[arg(long, default_value = "AGENT_SESSIONS_MASTER_KEY", requires = "keys")]
    master_key_env: String,
}

impl KeyDirArgs {
    /// The key files, when a directory was named.
    pub fn open(&self) -> Result<Option<KeyFiles>, crate::commands::Failure> {
        let Some(dir) = &self.keys else {
            return Ok(None);
        };
        key_directory(dir)?;
        let master = MasterKey::from_env(&self.master_key_env)?;
        Ok(Some(KeyFiles::open(dir, master)?))
    }

    /// Whether a directory was named.
    pub fn given(&self) -> bool {
        self.keys.is_some()
    }
}

/// The key directory `migrate --seal` seals the copy under, with the master key in the
/// environment variable `master_key_env`: made when it does not exist (turning
/// encryption on is where a store's keys begin), else a key directory already (its
/// master key must open it) or an empty directory — never a folder of other files.
pub fn sealing_keys(
    dir: &std::path::Path,
    master_key_env: &str,
) -> Result<KeyFiles, crate::commands::Failure> {
    let holds_files = std::fs::read_dir(dir).is_ok_and(|mut listing| listing.next().is_some());
    if holds_files && std::fs::symlink_metadata(dir.join("master.check")).is_err() {
        return Err(failure(
            EXIT_USAGE,
            format!(
                "{} holds other files and is not a key directory (it has no master.check): name a new directory, or the bot's",
                dir.display()
            ),
        ));
    }
    let master = MasterKey::from_env(master_key_env)?;
    Ok(KeyFiles::open(dir, master)?)
}

/// Refuses `dir` unless it is a key directory a bot made: the commands work on one and
/// never make one.
pub fn key_directory(dir: &std::path::Path) -> Outcome {
    if !dir.exists() {
        return Err(failure(
            EXIT_NOT_FOUND,
            format!("there is no key directory at {}", dir.display()),
        ));
    }
    // A bot's first run makes its key directory.
    if std::fs::symlink_metadata(dir.join("master.check")).is_err() {
        return Err(failure(
            EXIT_NOT_FOUND,
            format!(
                "{} is not a key directory (it has no master.check): name the directory the bot's KeyFiles opens",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// `keys`; `store` is the store `rotate-data` and `retire` work on.
pub async fn keys(store: &str, json: bool, args: KeysArgs) -> Outcome {
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
    key_directory(&dir)?;
    let master = MasterKey::from_env(&args.master_key_env)?;
    let fingerprint = master.fingerprint();
    if args.action.uses_store() {
        // The store first: a missing one leaves the key directory as it was.
        let backend = Backend::open_with(store, OpenMode::Existing).await?;
        let keys = KeyFiles::open(&dir, master)?;
        let manager = SessionManager::builder(backend.sessions().clone())
            .backend(backend)
            .encryption(keys)
            .build()?;
        let (done, report) = match args.action {
            KeysAction::Retire => ("retired", manager.retire_data_keys().await?),
            _ => ("rotated", manager.rotate_data_keys().await?),
        };
        print_rotation(json, done, &report);
        return Ok(());
    }
    let (keys, rotated) = match args.action {
        KeysAction::Rotate => {
            let previous = MasterKey::from_env(&args.previous_key_env)?;
            let keys = KeyFiles::rotating(&dir, master, previous)?;
            let rotated = keys.rotate()?;
            if !json {
                println!("sealed {rotated} data keys anew under master key {fingerprint}");
            }
            (keys, Some(rotated))
        }
        _ => (KeyFiles::open(&dir, master)?, None),
    };
    let (all, current) = keys.status()?;
    if json {
        let mut status = serde_json::json!({
            "dir": dir.display().to_string(),
            "masterKey": fingerprint,
            "dataKeys": all,
            "underMasterKey": current,
        });
        if let Some(rotated) = rotated {
            status["sealedAnew"] = rotated.into();
        }
        println!("{status}");
    } else {
        println!(
            "{}: master key {fingerprint}, {all} data keys, {current} sealed under it",
            dir.display()
        );
    }
    Ok(())
}

/// What a data-key rotation or retirement did.
fn print_rotation(json: bool, done: &str, report: &DataKeyRotation) {
    if json {
        let report = serde_json::json!({
            "done": done,
            "keys": report.keys,
            "lines": report.lines,
            "sessions": report.sessions,
            "chatter": report.chatter,
            "left": report.left,
            "damaged": report.damaged,
        });
        println!("{report}");
    } else if done == "retired" {
        println!(
            "retired {} replaced data keys; {} kept, still sealing something",
            report.keys, report.left
        );
    } else {
        println!(
            "rotated {} data keys: sealed anew {} transcript lines, {} sessions, {} chatter entries; {} left under an earlier key",
            report.keys, report.lines, report.sessions, report.chatter, report.left
        );
        if report.damaged > 0 {
            println!(
                "{} transcript lines did not open under the key they name (altered or moved): left as they are (reading them is an error)",
                report.damaged
            );
        }
    }
}
