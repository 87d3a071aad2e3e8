//! Who holds a claim or a message a turn took, and whether that holder still runs.
//!
//! A holder is a turn: `<process>#<token>`, the process told apart from every other
//! process and host (Linux: `<boot id>/<pid>/<start time>`). A turn of this process is
//! live while it runs (the process keeps the tokens of its running turns) and, once
//! marked done, for as long as its records matter; a turn of another process on this
//! machine while that process runs (its id and start time, under the same boot); a
//! turn on another host for [`LEASE`] after it began.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::store::entry::{SessionEntry, SessionStatus};

/// How long a turn on another host counts as live without word from it: far longer
/// than a turn takes from its claim to its inbound line (one transcript append).
pub(crate) const LEASE: Duration = Duration::from_secs(120);

/// How many finished turns this process remembers (the oldest forgotten first).
const MAX_DONE: usize = 100_000;

#[derive(Default)]
struct Registry {
    /// The tokens of this process's running turns, each with how many keep it live: its
    /// [`Hold`] and the [`Writing`]s of writes it began.
    live: HashMap<String, usize>,
    /// The tokens of its finished turns.
    done: HashSet<String>,
    /// The same, oldest first, with when they finished (epoch ms) and how long they
    /// are kept.
    done_order: VecDeque<(String, u64, u64)>,
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// A turn of this process, live until dropped (or done, when marked so).
#[derive(Debug)]
pub(crate) struct Hold {
    token: String,
    holder: String,
}

impl Hold {
    /// A new live turn, with `token` (unique) as its token.
    pub(crate) fn new(token: String) -> Self {
        keep_live(&token);
        Hold {
            holder: format!("{}#{token}", this_process()),
            token,
        }
    }

    /// `<process>#<token>`, as records store it.
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// Keeps the turn live while a write it began is in flight, even once the turn is
    /// dropped: a write cannot be called back once it went out (a statement on its way
    /// to the server, a file write on a blocking thread), so whoever looks must not take
    /// the turn's message over before it landed or failed.
    pub(crate) fn writing(&self) -> Writing {
        keep_live(&self.token);
        Writing {
            token: self.token.clone(),
        }
    }

    /// Marks the turn done at `now_ms`: it stays live, for `keep`, to whoever looks.
    pub(crate) fn done(self, now_ms: u64, keep: Duration) {
        let mut registry = registry();
        let registry = &mut *registry;
        // The oldest go first: those kept long enough, and any beyond the bound.
        while let Some((token, at, kept)) = registry.done_order.front() {
            let expired = now_ms.saturating_sub(*at) >= *kept;
            if !expired && registry.done_order.len() < MAX_DONE {
                break;
            }
            registry.done.remove(token);
            registry.done_order.pop_front();
        }
        registry.done.insert(self.token.clone());
        registry
            .done_order
            .push_back((self.token.clone(), now_ms, keep.as_millis() as u64));
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let_go(&self.token);
    }
}

/// A write a turn began: the turn stays live until it is dropped ([`Hold::writing`]).
#[derive(Debug)]
pub(crate) struct Writing {
    token: String,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let_go(&self.token);
    }
}

fn keep_live(token: &str) {
    *registry().live.entry(token.to_owned()).or_default() += 1;
}

fn let_go(token: &str) {
    let mut registry = registry();
    if let Some(count) = registry.live.get_mut(token) {
        *count -= 1;
        if *count == 0 {
            registry.live.remove(token);
        }
    }
}

/// Which process this is: `<boot id>@<pid namespace>/<pid>/<start time>` on Linux, else
/// a random id (other processes then wait out the lease).
pub(crate) fn this_process() -> &'static str {
    static PROCESS: OnceLock<String> = OnceLock::new();
    PROCESS.get_or_init(|| {
        let pid = std::process::id();
        match (pid_space(), start_time(pid)) {
            (Some(space), Some(start)) => format!("{space}/{pid}/{start}"),
            _ => format!("{}/{pid}/0", uuid::Uuid::new_v4()),
        }
    })
}

/// Where this process's pid means something: the boot of the machine and the pid
/// namespace (`<boot id>@<namespace inode>`). Containers on one kernel share the boot id
/// but not their pids: a process in another namespace is judged by the lease.
fn pid_space() -> Option<&'static str> {
    static SPACE: OnceLock<Option<String>> = OnceLock::new();
    SPACE
        .get_or_init(|| {
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let boot = boot.trim();
            // `pid:[4026531836]`
            let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
            let namespace = namespace.to_str()?;
            let inode = namespace.strip_prefix("pid:[")?.strip_suffix(']')?;
            (!boot.is_empty() && !inode.is_empty()).then(|| format!("{boot}@{inode}"))
        })
        .as_deref()
}

/// When process `pid` started (clock ticks since boot), if it runs. A process that was
/// killed and not yet reaped by its parent (a zombie) runs no more.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = fields.split_whitespace();
    // Field 3 of the whole line is the state: `Z` (zombie) and `X` (dead) run no more.
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    // Field 22 of the whole line is the 19th after the state.
    fields.nth(18)?.parse().ok()
}

/// Whether `holder` (`<process>#<token>`, which took something at `at_ms`) may still
/// finish what it took, at `now_ms`.
pub(crate) fn alive(holder: &str, at_ms: u64, now_ms: u64) -> bool {
    let (process, token) = holder.split_once('#').unwrap_or((holder, ""));
    if process == this_process() {
        let registry = registry();
        return registry.live.contains_key(token) || registry.done.contains(token);
    }
    let mut parts = process.splitn(3, '/');
    let (Some(space), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return within_lease(at_ms, now_ms);
    };
    // Another machine, another container, or a holder from before pid namespaces were
    // told apart (`<boot id>` alone): the lease decides.
    if pid_space() == Some(space) {
        return match pid.parse() {
            Ok(pid) => start_time(pid).map(|s| s.to_string()).as_deref() == Some(start),
            Err(_) => false,
        };
    }
    within_lease(at_ms, now_ms)
}

/// Whether a turn may still run in the session of `entry` at `now_ms`: its status is
/// `running` and the run's holder is alive. A turn that died (its process killed, or its
/// `Turn` dropped) holds nothing up. An entry written before runs were recorded falls
/// back to the turn that took its last message, and without that, may run.
pub(crate) fn runs(entry: &SessionEntry, now_ms: u64) -> bool {
    if entry.status != Some(SessionStatus::Running) {
        return false;
    }
    if let Some(run) = &entry.run {
        return alive(&run.holder, run.started_at, now_ms);
    }
    entry
        .recent_inbound
        .iter()
        .rev()
        .find(|record| record.session_id == entry.session_id)
        .is_none_or(|record| record.holder.is_empty() || alive(&record.holder, record.at, now_ms))
}

fn within_lease(at_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(at_ms) < LEASE.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_alive_while_its_turn_or_process_runs() {
        let now = 1_000_000_000;
        let lease = LEASE.as_millis() as u64;
        // This process: while the turn runs, and once done.
        let hold = Hold::new("t1".into());
        let holder = hold.holder().to_owned();
        assert!(alive(&holder, now, now));
        drop(hold);
        assert!(!alive(&holder, now, now), "dropped before it was done");
        // Dropped while a write it began is in flight: live until the write ends.
        let hold = Hold::new("t3".into());
        let holder = hold.holder().to_owned();
        let writing = hold.writing();
        drop(hold);
        assert!(alive(&holder, now, now), "its write is in flight");
        drop(writing);
        assert!(!alive(&holder, now, now), "its write ended");
        let hold = Hold::new("t2".into());
        let holder = hold.holder().to_owned();
        hold.done(now, Duration::from_secs(60));
        assert!(alive(&holder, now, now), "done: remembered");
        #[cfg(unix)]
        if let Some(boot) = pid_space() {
            // Another process of this machine: while it runs.
            let parent = std::os::unix::process::parent_id();
            let start = start_time(parent).unwrap();
            assert!(alive(&format!("{boot}/{parent}/{start}#x"), 0, now));
            assert!(!alive(
                &format!("{boot}/{parent}/{}#x", start + 1),
                now,
                now
            ));
            assert!(!alive(&format!("{boot}/4194305/1#x"), now, now));
        }
        // Another host: the lease.
        let other = "00000000-0000-0000-0000-000000000000/1/1#x";
        assert!(alive(other, now - lease + 1, now));
        assert!(!alive(other, now - lease, now));
        #[cfg(target_os = "linux")]
        if let Some(space) = pid_space() {
            // A process in another pid namespace of this machine (a container): its pid
            // means nothing here, so the lease decides, even for a pid that is not ours.
            let boot = space.split('@').next().unwrap();
            let container = format!("{boot}@1/4194305/1#x");
            assert!(alive(&container, now - lease + 1, now));
            assert!(!alive(&container, now - lease, now));
            // A holder written before namespaces were told apart: the lease too.
            assert!(alive(&format!("{boot}/4194305/1#x"), now - 1, now));
        }
        assert!(!alive("garbage", now - lease, now));
    }
}
