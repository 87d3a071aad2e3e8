//! What a fresh process pays for a session's first turn: the benchmark binary runs
//! itself again as a child, and that child connects to a JSON store (and a SQLite one,
//! with feature `sqlite`), answers one direct message (`turn`, `Turn::messages`,
//! `Turn::complete`, an 8,000-token window) on a session 10, 1,000 or 10,000 turns old,
//! and exits. Nothing is shared with the
//! process that wrote the session (`turn_age`'s `first/<age>` runs a new manager in the
//! process that wrote the session, so whatever a process remembers of a file it wrote
//! is still there). The figure is the CPU time (user and system) of the whole child —
//! starting it, connecting, the turn, exiting — which other load on the machine does
//! not stretch as it does wall time; the session of 10 turns is the baseline the older
//! ones are compared with. Each child's turn makes its session two lines older.
//!
//! `cargo bench --bench first_process --features sqlite`

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent_sessions::prelude::*;
use criterion::{criterion_group, BenchmarkId, Criterion};

/// Earlier turns in the session before the child's.
const AGES: [usize; 3] = [10, 1_000, 10_000];
/// The environment variable that makes the benchmark binary a child: the store's
/// directory.
const CHILD: &str = "AGENT_SESSIONS_FIRST_PROCESS_CHILD";
const WINDOW: u64 = 8_000;

fn message(text: String) -> InboundMessage {
    InboundMessage::direct("telegram", "4242", text)
}

/// The store URLs this bench measures, for a directory of the session's own: JSON, and
/// SQLite with feature `sqlite`.
fn stores(dir: &Path) -> Vec<(&'static str, String)> {
    let mut stores = vec![("json", format!("json:{}", dir.join("json").display()))];
    if cfg!(feature = "sqlite") {
        stores.push(("sqlite", format!("sqlite:{}", dir.join("s.db").display())));
    }
    stores
}

async fn manager(url: &str) -> SessionManager {
    SessionManager::connect(url)
        .await
        .unwrap()
        .context_window(WINDOW)
        .build()
        .unwrap()
}

/// The child: one turn on the session, in a process of its own.
fn run_child() -> bool {
    let Ok(url) = std::env::var(CHILD) else {
        return false;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let manager = manager(&url).await;
        let turn = manager
            .turn(&message("Is my Friday shift still on?".into()))
            .await
            .unwrap();
        let seen = turn.messages().await.unwrap();
        assert!(seen.len() > 1, "the child sees the conversation");
        turn.complete("Yes, Friday afternoon as agreed.")
            .await
            .unwrap();
    });
    true
}

fn first_process(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for (backend, _) in stores(dir.path()) {
        let mut group = c.benchmark_group(format!("first_process/{backend}/window_8k"));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(5));
        let urls: Vec<_> = AGES
            .into_iter()
            .map(|age| {
                let (_, url) = stores(&dir.path().join(age.to_string()))
                    .into_iter()
                    .find(|(name, _)| *name == backend)
                    .unwrap();
                runtime.block_on(async {
                    let manager = manager(&url).await;
                    for i in 0..age {
                        let turn = manager
                            .turn(&message(format!(
                                "Can you move my Thursday shift to Friday afternoon? ({i})"
                            )))
                            .await
                            .unwrap();
                        turn.complete("Done: Friday afternoon. Anything else?")
                            .await
                            .unwrap();
                    }
                });
                (age, url)
            })
            .collect();
        for (age, url) in &urls {
            group.bench_function(BenchmarkId::from_parameter(age), |b| {
                b.iter_custom(|children| {
                    let before = children_cpu();
                    for _ in 0..children {
                        let status = Command::new(&exe).env(CHILD, url).status().unwrap();
                        assert!(status.success());
                    }
                    children_cpu() - before
                })
            });
        }
        group.finish();
    }
}

/// The CPU time (user and system) of this process's children that have ended.
fn children_cpu() -> Duration {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

criterion_group!(benches, first_process);

fn main() {
    if run_child() {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
