//! The peak memory of opening a store cold, shared by the `cold_open` and `floors`
//! benchmarks: the benchmark binary runs itself again with [`CHILD`] set, and that
//! fresh process opens the store, reads one session and reports its peak resident
//! memory, so the memory of building the store is not counted.

use std::path::Path;

use agent_sessions::prelude::*;

/// The environment variable that makes the benchmark binary a child:
/// `<kind>|<path>|<sessions>`.
pub const CHILD: &str = "AGENT_SESSIONS_COLD_OPEN_CHILD";

/// The process's peak resident memory (Linux `VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Peak resident memory of a fresh process, in MiB: bare, and after opening the store
/// of `kind` (`json` or `sqlite`) at `path` cold and reading one of its `sessions`.
pub fn peak_memory(kind: &str, path: &Path, sessions: usize) -> (f64, f64) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD, format!("{kind}|{}|{sessions}", path.display()))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let (before, after) = text.trim().split_once(' ').expect("two figures");
    (before.parse().unwrap(), after.parse().unwrap())
}

/// Runs as a child if [`CHILD`] is set (and returns `true`).
pub fn run_child() -> bool {
    let Ok(spec) = std::env::var(CHILD) else {
        return false;
    };
    let mut parts = spec.split('|');
    let (kind, path, sessions): (&str, &str, usize) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = peak_rss_mib().unwrap_or(f64::NAN);
    let target = super::key(sessions / 2);
    let entry = match kind {
        "json" => runtime.block_on(JsonFileStore::new(path).get(&target)),
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let store = agent_sessions::store::SqliteStore::open(path).unwrap();
            runtime.block_on(store.get(&target))
        }
        _ => unreachable!("unknown store kind {kind}"),
    };
    assert!(entry.unwrap().is_some());
    let after = peak_rss_mib().unwrap_or(f64::NAN);
    println!("{before} {after}");
    true
}
