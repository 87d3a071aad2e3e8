//! PostgreSQL failing over under load: a primary and a standby on loopback (started
//! here, in temporary directories, with the server binaries `pg_config --bindir`
//! names), workers taking whole turns through a URL that names both hosts
//! (`target_session_attrs=read-write`), the primary SIGKILLed mid-load and the standby
//! promoted, several times. With a synchronous standby every acknowledged message is
//! answered exactly once on the promoted server; with an asynchronous one, what the
//! primary acknowledged in its last moments may be missing (the run measures it). In
//! both, nothing is answered twice and the workers carry on, and a follower of every
//! session in a manager of its own reads through the failovers (with a synchronous
//! standby, every line once).
//!
//! The servers refuse to run as root: as root, their commands run as the `postgres`
//! user. Without the binaries the test fails, unless `AGENT_SESSIONS_SKIP_FAILOVER` is
//! set.

#![cfg(all(feature = "postgres", feature = "http"))]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_sessions::prelude::*;
use agent_sessions::transcript::follow::{Position, Scope, Update};
use agent_sessions::transcript::Role;

/// Failovers in one run.
const FAILOVERS: usize = 3;
/// Workers, each with its own manager (its own pool of connections), as processes have.
const WORKERS: u64 = 3;
/// Questions a session of a worker is asked before the worker moves to a new one (below
/// the 100 message ids a session remembers).
const PER_SESSION: u64 = 40;

/// The folder of the PostgreSQL server binaries, if this machine has them.
fn bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    dir.join("pg_ctl").exists().then_some(dir)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

/// `program` of the server binaries, run as `postgres` when this process is root.
fn server_command(bin: &Path, program: &str) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(bin.join(program));
        command
    } else {
        Command::new(bin.join(program))
    }
}

fn run(mut command: Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free port on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One server: its data directory and port.
struct Node {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Node {
    /// A new primary in `dir`, started: synchronous commit to any one standby, or
    /// to none (asynchronous replication).
    fn primary(bin: &Path, dir: PathBuf, replication: Replication) -> Node {
        let node = Node {
            bin: bin.to_owned(),
            dir,
            port: free_port(),
        };
        let mut initdb = server_command(bin, "initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&node.dir);
        run(initdb, "initdb");
        append(
            &node.dir.join("postgresql.conf"),
            "listen_addresses = '127.0.0.1'\n\
                 # TCP only: a killed server's socket lock file would keep its port\n\
                 unix_socket_directories = ''\n\
                 wal_level = replica\nmax_wal_senders = 8\nwal_keep_size = 256MB\n\
                 synchronous_commit = on\n\
                 max_connections = 100\n\
                 checkpoint_timeout = 30s\ncheckpoint_completion_target = 0.1\n",
        );
        append(
            &node.dir.join("postgresql.conf"),
            &format!("synchronous_standby_names = '{}'\n", replication.standbys()),
        );
        append(
            &node.dir.join("pg_hba.conf"),
            "host replication all 127.0.0.1/32 trust\n",
        );
        node.start();
        node
    }

    /// A streaming standby of `primary` in `dir`, started on `port`.
    fn standby_of(primary: &Node, dir: PathBuf, port: u16) -> Node {
        let node = Node {
            bin: primary.bin.clone(),
            dir,
            port,
        };
        let mut backup = server_command(&node.bin, "pg_basebackup");
        backup
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ])
            .args(["-p", &primary.port.to_string()])
            .args(["-d", "application_name=standby", "-D"])
            .arg(&node.dir);
        run(backup, "pg_basebackup");
        node.start();
        node
    }

    fn start(&self) {
        let log = self.dir.with_extension("log");
        let mut start = server_command(&self.bin, "pg_ctl");
        start
            .args(["-w", "-D"])
            .arg(&self.dir)
            .arg("-l")
            .arg(&log)
            .args(["-o", &format!("-p {}", self.port)])
            .arg("start");
        let out = start.output().unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            last_lines(&std::fs::read_to_string(&log).unwrap_or_default(), 20)
        );
    }

    /// SIGKILL of the server and every process of it at once, as when its machine
    /// is lost: no shutdown, no last WAL sent, no backend finishing a commit. (The
    /// main process alone would leave its backends and WAL sender running until they
    /// noticed.)
    fn kill(&self) {
        let pid = std::fs::read_to_string(self.dir.join("postmaster.pid")).unwrap();
        let pid = pid.lines().next().unwrap().trim().to_owned();
        // Stopped first, so that it starts no process while they are listed.
        signal(&pid, "-STOP");
        let children = Command::new("pgrep")
            .args(["-P", &pid])
            .output()
            .unwrap()
            .stdout;
        let mut kill = Command::new("kill");
        kill.arg("-KILL").arg(&pid);
        kill.args(String::from_utf8(children).unwrap().split_whitespace());
        run(kill, "kill the primary");
    }

    fn promote(&self) {
        let mut promote = server_command(&self.bin, "pg_ctl");
        promote.args(["-w", "-D"]).arg(&self.dir).arg("promote");
        run(promote, "pg_ctl promote");
    }

    fn stop(&self) {
        let mut stop = server_command(&self.bin, "pg_ctl");
        stop.args(["-m", "immediate", "-D"])
            .arg(&self.dir)
            .arg("stop");
        let _ = stop.output();
    }

    /// Sets `synchronous_standby_names` and has the server read it.
    async fn set_synchronous(&self, standbys: &str) {
        let client = self.admin().await;
        client
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{standbys}'"
            ))
            .await
            .unwrap();
        client
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
    }

    /// A connection to the server, for the test's own queries.
    async fn admin(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

/// The last `count` lines of `text` (a node's log holds its earlier lives too).
fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The servers of the test, stopped when it ends, however it ends.
struct Cluster(Vec<Node>);

impl Drop for Cluster {
    fn drop(&mut self) {
        self.0.iter().for_each(Node::stop);
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// How the primary replicates to its standby.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Replication {
    /// A commit returns once the standby has it (`synchronous_standby_names = '*'`).
    Synchronous,
    /// A commit returns at once; the standby follows (`synchronous_standby_names = ''`).
    Asynchronous,
}

impl Replication {
    /// `synchronous_standby_names` with a standby streaming.
    fn standbys(self) -> &'static str {
        match self {
            Replication::Synchronous => "*",
            Replication::Asynchronous => "",
        }
    }

    /// `sync_state` of the standby in `pg_stat_replication`.
    fn sync_state(self) -> &'static str {
        match self {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        }
    }
}

/// Waits until `primary` has a standby streaming, replicated to as `replication` says.
async fn wait_for_standby(primary: &Node, replication: Replication) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok((client, connection)) =
            tokio_postgres::connect(&primary.url(), tokio_postgres::NoTls).await
        {
            tokio::spawn(connection);
            if let Ok(rows) = client
                .query(
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = $1 \
                     AND state = 'streaming'",
                    &[&replication.sync_state()],
                )
                .await
            {
                if !rows.is_empty() {
                    return;
                }
            }
        }
        assert!(Instant::now() < deadline, "no {replication:?} standby");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How much of `primary`'s WAL its standby has not written yet, in bytes.
async fn unreceived(primary: &Node) -> i64 {
    let row = primary
        .admin()
        .await
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), write_lsn)::bigint \
             FROM pg_stat_replication",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

/// The process of `primary` that sends its WAL to the standby.
async fn wal_sender(primary: &Node) -> String {
    let row = primary
        .admin()
        .await
        .query_one("SELECT pid FROM pg_stat_replication", &[])
        .await
        .unwrap();
    row.get::<_, i32>(0).to_string()
}

fn signal(pid: &str, signal: &str) {
    let mut kill = Command::new("kill");
    kill.args([signal, pid]);
    run(kill, "signal a server process");
}

/// What the workers saw.
#[derive(Default)]
struct Seen {
    /// When each question was acknowledged (its turn completed, or was answered before),
    /// whether that took more than one delivery, and when the delivery that was
    /// acknowledged began.
    acknowledged: Vec<(u64, Instant, bool, Instant)>,
    /// Calls that failed and were tried again.
    retries: usize,
    /// What they failed with, and how often.
    errors: std::collections::BTreeMap<String, usize>,
}

/// Asks question `q` of the session `peer` through `manager` until a call succeeds:
/// the question (message id `f<q>`) is delivered again after every failure, as a
/// channel does; the worker answers every question the model sees pending.
async fn ask(manager: &SessionManager, peer: &str, q: u64, seen: &Mutex<Seen>) {
    let message =
        InboundMessage::direct("telegram", peer, format!("q{q}")).with_message_id(format!("f{q}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut again = false;
    loop {
        let began = Instant::now();
        match answer(manager, &message).await {
            Ok(()) => {
                seen.lock()
                    .unwrap()
                    .acknowledged
                    .push((q, Instant::now(), again, began));
                return;
            }
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "question {q} not answered in 120 s: {error}"
                );
                {
                    let mut seen = seen.lock().unwrap();
                    seen.retries += 1;
                    let kind: String = error.to_string().chars().take(300).collect();
                    *seen.errors.entry(kind).or_default() += 1;
                }
                again = true;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn answer(manager: &SessionManager, message: &InboundMessage) -> agent_sessions::Result<()> {
    let turn = manager.turn(message).await?;
    if !turn.needs_model() {
        turn.complete("").await?;
        return Ok(());
    }
    let messages = turn.messages().await?;
    let last_reply = messages
        .iter()
        .rposition(|m| m.role == ChatRole::Assistant)
        .map_or(0, |at| at + 1);
    let answers: Vec<String> = messages[last_reply..]
        .iter()
        .filter(|m| m.role == ChatRole::User)
        .flat_map(|m| questions_in(&m.content))
        .map(|q| format!("a{q}"))
        .collect();
    turn.complete(answers.join(" ")).await?;
    Ok(())
}

/// The session worker `w` asks its `n`th question in.
fn session_of(w: u64, n: u64) -> String {
    format!("w{w}-{}", n / PER_SESSION)
}

fn questions_in(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|word| word.strip_prefix('q')?.parse().ok())
        .collect()
}

fn answers_in(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|word| word.strip_prefix('a')?.parse().ok())
        .collect()
}

/// What a run of failovers found (printed whole at the end of the run).
#[derive(Debug)]
#[allow(dead_code)] // read by printing it
struct Report {
    /// Questions asked (each acknowledged once).
    questions: usize,
    /// Acknowledged questions the promoted server has neither logged nor answered.
    lost: Vec<u64>,
    /// Acknowledged questions it logged but whose answer it lost.
    answer_lost: Vec<u64>,
    /// For each failover, how much of the primary's WAL the standby had not received
    /// just before the primary was killed, in bytes.
    lag_at_kill: Vec<i64>,
    /// For each failover, from the kill until `pg_ctl promote` returned.
    promoted_after: Vec<Duration>,
    /// For each failover, from the kill until a question was answered at its first
    /// delivery on the promoted server.
    carried_on: Vec<Duration>,
    /// Calls that failed and were tried again.
    retries: usize,
    /// What they failed with, and how often.
    errors: std::collections::BTreeMap<String, usize>,
    /// Questions and answers the promoted server has that the follower did not read.
    followed_missed: usize,
    /// Questions and answers the follower read more than once (their lines read on
    /// the old primary, lost there, and written again on the new one).
    followed_again: usize,
    /// Questions and answers the follower read that the promoted server does not have.
    followed_but_lost: usize,
    /// Calls of the follower that failed (it went on with the same follower).
    follower_errors: usize,
    /// Times the follower was told the promoted server lacks lines it had read.
    followed_rewound: usize,
    /// Questions and answers the promoted server has that the HTTP event stream did
    /// not deliver.
    streamed_missed: usize,
    /// Times the event stream's reader connected again.
    stream_reconnects: usize,
}

/// What a follower in a process of its own read: every question and answer, with
/// the session and offset of its line.
#[derive(Default)]
struct Followed {
    questions: Vec<(String, u64, u64)>,
    answers: Vec<(String, u64, u64)>,
    errors: usize,
    /// Times it was told the store lost lines it had read.
    rewound: usize,
}

impl Followed {
    /// Takes the questions or answers in a line of `session` at `offset`.
    fn read(&mut self, session: &str, offset: u64, role: Option<&str>, text: &str) {
        let (into, numbers) = match role {
            Some("user") => (&mut self.questions, questions_in(text)),
            Some("assistant") => (&mut self.answers, answers_in(text)),
            _ => return,
        };
        into.extend(numbers.into_iter().map(|n| (session.to_owned(), offset, n)));
    }

    /// Forgets what it read of `session` at or after `offset`: the store lost it.
    fn rewind(&mut self, session: &str, offset: u64) {
        self.rewound += 1;
        for lines in [&mut self.questions, &mut self.answers] {
            lines.retain(|(s, at, _)| s != session || *at < offset);
        }
    }

    fn numbers(lines: &[(String, u64, u64)]) -> Vec<u64> {
        lines.iter().map(|(_, _, n)| *n).collect()
    }
}

/// Follows every session from the start until `stop` is set and it has read
/// everything, going on with the same follower after a failed call.
async fn follow(url: String, followed: Arc<Mutex<Followed>>, stop: Arc<AtomicBool>) {
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let mut follower = manager
        .follow(Scope::Agent(AgentId::main()), Position::Start)
        .await
        .unwrap()
        .poll_interval(Duration::from_millis(50));
    let mut idle_after_stop = 0;
    // Until it found nothing for 2 s after the load stopped: long enough to check the
    // last line it read of each session (every second when there is nothing new).
    while idle_after_stop < 40 {
        match follower.try_next().await {
            Ok(Some(Update::Events {
                events, session_id, ..
            })) => {
                let mut followed = followed.lock().unwrap();
                for event in &events {
                    let Some(message) = &event.entry.message else {
                        continue;
                    };
                    let role = match message.role {
                        Role::User => Some("user"),
                        Role::Assistant => Some("assistant"),
                        _ => None,
                    };
                    followed.read(&session_id, event.offset.0, role, &message.text());
                }
            }
            Ok(Some(Update::Rewound {
                session_id,
                next: Position::After { offset, .. },
                ..
            })) => followed.lock().unwrap().rewind(&session_id, offset.0),
            Ok(Some(_)) => {}
            Ok(None) => {
                if stop.load(Ordering::SeqCst) {
                    idle_after_stop += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => {
                followed.lock().unwrap().errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads the HTTP event stream of every session (`GET /kernel/agents/main/events`,
/// served over `url` by a manager of its own, as a dashboard reads it), reconnecting
/// with the last event id after the stream fails or ends, until `stop` is set and no
/// event came for 2 s.
async fn stream_events(url: String, streamed: Arc<Mutex<Followed>>, stop: Arc<AtomicBool>) {
    use agent_sessions::http::{router, serve, Secret, ServiceOptions, SECRET_HEADER};
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .build()
        .unwrap();
    let options = ServiceOptions::default().secret(Secret::new("failover").unwrap());
    let app = router(Arc::new(manager), options.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { serve(listener, app, &options, std::future::pending()).await });
    let client = reqwest::Client::new();
    let mut last_id: Option<String> = None;
    'connect: loop {
        let mut request = client
            .get(format!("{base}/kernel/agents/main/events?since=0"))
            .header(SECRET_HEADER, "failover");
        if let Some(id) = &last_id {
            request = request.header("last-event-id", id);
        }
        let mut response = match request.send().await {
            Ok(response) if response.status().is_success() => response,
            _ => {
                streamed.lock().unwrap().errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut buffer = String::new();
        loop {
            let chunk = match tokio::time::timeout(Duration::from_secs(2), response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(_) => {
                    // Ended (after an `error` event) or cut: connect again.
                    streamed.lock().unwrap().errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'connect;
                }
                Err(_) if stop.load(Ordering::SeqCst) => return,
                Err(_) => continue,
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let (mut id, mut data) = (None, String::new());
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&data) else {
                    continue;
                };
                let session = event["sessionId"].as_str().unwrap_or_default();
                let offset = event["offset"].as_u64().unwrap_or_default();
                if block.lines().any(|line| line == "event: rewound") {
                    streamed.lock().unwrap().rewind(session, offset);
                    last_id = id.or(last_id);
                    continue;
                }
                let message = &event["entry"]["message"];
                let text = match &message["content"] {
                    serde_json::Value::String(text) => text.clone(),
                    blocks => blocks
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|b| b["text"].as_str())
                        .collect(),
                };
                streamed
                    .lock()
                    .unwrap()
                    .read(session, offset, message["role"].as_str(), &text);
                if id.is_some() {
                    last_id = id;
                }
            }
        }
    }
}

/// A primary and its standby, replicated to as `replication` says, in a new temporary
/// directory (returned first, to be dropped after the servers); `None` when this machine
/// has no server binaries and the test may be skipped.
fn start_cluster(replication: Replication) -> Option<(tempfile::TempDir, Cluster)> {
    let Some(bin) = bindir() else {
        if std::env::var_os("AGENT_SESSIONS_SKIP_FAILOVER").is_some() {
            eprintln!("skipped: no PostgreSQL server binaries (AGENT_SESSIONS_SKIP_FAILOVER)");
            return None;
        }
        panic!(
            "the failover test needs PostgreSQL's server binaries (`pg_config --bindir`), \
             or AGENT_SESSIONS_SKIP_FAILOVER=1 to skip it"
        );
    };
    let root = tempfile::tempdir().unwrap();
    if is_root() {
        run(
            {
                let mut chown = Command::new("chown");
                chown.arg("postgres").arg(root.path());
                chown
            },
            "chown the test directory",
        );
    }
    let mut cluster = Cluster(vec![Node::primary(
        &bin,
        root.path().join("n0"),
        replication,
    )]);
    let standby = Node::standby_of(&cluster.0[0], root.path().join("n1"), free_port());
    cluster.0.push(standby);
    Some((root, cluster))
}

/// Runs the workers through [`FAILOVERS`] failovers with `replication`; checks that
/// no question was logged or answered twice and that every question is accounted for;
/// `None` when this machine has no server binaries and the test may be skipped.
fn fail_over(replication: Replication) -> Option<Report> {
    // The directory goes after the servers (bindings drop in reverse order).
    let (_root, mut cluster) = start_cluster(replication)?;
    let nodes = &mut cluster.0;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(wait_for_standby(&nodes[0], replication));
    // Both hosts, whichever is primary: the URL a bot gives for a managed database.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        nodes[0].port, nodes[1].port
    );
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // Each worker asks until told to stop, and says how many it asked.
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (url, seen, stop) = (url.clone(), seen.clone(), stop.clone());
            runtime.spawn(async move {
                let manager = SessionManager::connect(&url)
                    .await
                    .unwrap()
                    .build()
                    .unwrap();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let q = w * 1_000_000 + n;
                    ask(&manager, &session_of(w, n), q, &seen).await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    // A follower of every session, and a reader of the HTTP event stream of every
    // session, as dashboards in other processes have.
    let (followed, streamed, stop_following) = (
        Arc::<Mutex<Followed>>::default(),
        Arc::<Mutex<Followed>>::default(),
        Arc::new(AtomicBool::new(false)),
    );
    let follower = runtime.spawn(follow(
        url.clone(),
        followed.clone(),
        stop_following.clone(),
    ));
    let streamer = runtime.spawn(stream_events(
        url.clone(),
        streamed.clone(),
        stop_following.clone(),
    ));

    // Load, then the primary killed and the standby promoted. The promoted server
    // commits alone (as a managed service does until it has a standby again) while the
    // killed one comes back as its standby — a new copy: its WAL may hold what was never
    // acknowledged — and commits wait for that standby again (when synchronous) before
    // the next failover, which goes the other way.
    let (mut carried_on, mut promoted_after) = (Vec::new(), Vec::new());
    let (mut lag_at_kill, mut kills) = (Vec::new(), Vec::new());
    for failover in 0..FAILOVERS {
        std::thread::sleep(Duration::from_millis(1500));
        let (old, new) = (failover % 2, (failover + 1) % 2);
        // Asynchronous: the standby falls behind for a moment (the primary's WAL
        // sender paused), as one does under load or across a slow link, and the
        // primary dies then.
        if replication == Replication::Asynchronous {
            signal(&runtime.block_on(wal_sender(&nodes[old])), "-STOP");
            std::thread::sleep(Duration::from_millis(300));
        }
        lag_at_kill.push(runtime.block_on(unreceived(&nodes[old])));
        nodes[old].kill();
        let killed = Instant::now();
        kills.push(killed);
        nodes[new].promote();
        let promoted = Instant::now();
        promoted_after.push(promoted - killed);
        if replication == Replication::Synchronous {
            runtime.block_on(nodes[new].set_synchronous(""));
        }
        // The workers carry on once a question is answered at its first delivery, all
        // of it on the promoted server. (Until it is promoted, the killed server's
        // connections may still commit what the standby received.)
        let resumed = loop {
            let acknowledged = seen.lock().unwrap().acknowledged.clone();
            if let Some((_, at, _, _)) = acknowledged
                .iter()
                .find(|(_, at, again, _)| *at > promoted && !again)
            {
                break *at - killed;
            }
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "failover {failover}: no question answered in 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        carried_on.push(resumed);
        let (dir, port) = (nodes[old].dir.clone(), nodes[old].port);
        std::fs::remove_dir_all(&dir).unwrap();
        nodes[old] = Node::standby_of(&nodes[new], dir, port);
        runtime.block_on(nodes[new].set_synchronous(replication.standbys()));
        runtime.block_on(wait_for_standby(&nodes[new], replication));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let mut asked_by = Vec::new();
    for worker in workers {
        match runtime.block_on(worker) {
            Ok(count) => asked_by.push(count),
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
    stop_following.store(true, Ordering::SeqCst);
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), follower).await })
        .expect("the follower reads everything within 60 s")
        .unwrap();
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), streamer).await })
        .expect("the event stream's reader reads everything within 60 s")
        .unwrap();

    // On the server that is primary now: each question reached the model in exactly
    // one logged line and was answered exactly once.
    let primary = nodes[FAILOVERS % 2].url();
    let (asked, answered) = runtime.block_on(async {
        let manager = SessionManager::connect(&primary)
            .await
            .unwrap()
            .build()
            .unwrap();
        let (mut asked, mut answered) = (Vec::new(), Vec::new());
        for (w, count) in asked_by.iter().enumerate() {
            for s in 0..count.div_ceil(PER_SESSION) {
                let peer = session_of(w as u64, s * PER_SESSION);
                let key = manager
                    .key_for(&InboundMessage::direct("telegram", &peer, "x"))
                    .unwrap();
                for message in manager.session(&key).messages().await.unwrap() {
                    match message.role {
                        ChatRole::User => asked.extend(questions_in(&message.content)),
                        ChatRole::Assistant => answered.extend(answers_in(&message.content)),
                        _ => {}
                    }
                }
            }
        }
        (asked, answered)
    });
    drop(cluster);
    let seen = seen.lock().unwrap();
    let questions: Vec<u64> = asked_by
        .iter()
        .enumerate()
        .flat_map(|(w, count)| (0..*count).map(move |n| w as u64 * 1_000_000 + n))
        .collect();
    assert_eq!(seen.acknowledged.len(), questions.len());
    let (mut lost, mut answer_lost) = (Vec::new(), Vec::new());
    for &q in &questions {
        let times = |all: &[u64]| all.iter().filter(|a| **a == q).count();
        match (times(&asked), times(&answered)) {
            (1, 1) => {}
            (0, 0) => lost.push(q),
            (1, 0) => answer_lost.push(q),
            (logged, answers) => {
                panic!("question {q} logged {logged} times and answered {answers} times")
            }
        }
    }
    assert_eq!(
        asked.len(),
        questions.len() - lost.len(),
        "no other question was logged"
    );
    // What the promoted server lacks was acknowledged in the moments before a kill
    // (its call began before the kill; the acknowledgment may be noted just after).
    for &q in lost.iter().chain(&answer_lost) {
        let (_, at, _, began) = seen.acknowledged.iter().find(|(a, ..)| *a == q).unwrap();
        assert!(
            kills.iter().any(|kill| *began <= *kill
                && kill.saturating_duration_since(*at) < Duration::from_secs(5)),
            "question {q}, lost, was acknowledged long before any kill (ms from each kill: {:?})",
            kills
                .iter()
                .map(|kill| kill.duration_since(*at).as_millis() as i128
                    - at.duration_since(*kill).as_millis() as i128)
                .collect::<Vec<_>>()
        );
    }
    // What the follower read, against what the promoted server has: lines it has
    // that the follower did not read, or read again (a line read on the old primary,
    // lost there and written again on the new one), and lines it lost.
    let followed = followed.lock().unwrap();
    let (mut followed_missed, mut followed_again, mut followed_but_lost) = (0, 0, 0);
    for (kept, read) in [
        (&asked, Followed::numbers(&followed.questions)),
        (&answered, Followed::numbers(&followed.answers)),
    ] {
        for q in kept {
            match read.iter().filter(|r| *r == q).count() {
                0 => followed_missed += 1,
                times => followed_again += times - 1,
            }
        }
        for q in read.iter().filter(|q| !kept.contains(q)) {
            assert!(
                lost.contains(q) || answer_lost.contains(q),
                "the follower read {q}, which was never acknowledged"
            );
            followed_but_lost += 1;
        }
    }
    // The event stream delivers every line at least once (its event ids are times: a
    // client that reconnects may get the last moments again).
    let streamed = streamed.lock().unwrap();
    let streamed_missed = [
        (&asked, Followed::numbers(&streamed.questions)),
        (&answered, Followed::numbers(&streamed.answers)),
    ]
    .iter()
    .map(|(kept, read)| kept.iter().filter(|q| !read.contains(q)).count())
    .sum();
    let report = Report {
        questions: questions.len(),
        lost,
        answer_lost,
        lag_at_kill,
        promoted_after,
        carried_on,
        retries: seen.retries,
        errors: seen.errors.clone(),
        followed_missed,
        followed_again,
        followed_but_lost,
        follower_errors: followed.errors,
        followed_rewound: followed.rewound,
        streamed_missed,
        stream_reconnects: streamed.errors,
    };
    eprintln!("{replication:?} replication, {FAILOVERS} failovers: {report:#?}");
    Some(report)
}

#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn acknowledged_turns_survive_failovers_and_none_is_answered_twice() {
    if let Some(report) = fail_over(Replication::Synchronous) {
        assert_eq!(report.lost, [] as [u64; 0], "acknowledged, then lost");
        assert_eq!(report.answer_lost, [] as [u64; 0], "answered, then lost");
        assert_eq!(report.followed_missed, 0, "the follower missed lines");
        assert_eq!(report.followed_again, 0, "the follower read lines again");
        assert_eq!(report.followed_but_lost, 0);
        assert_eq!(
            report.followed_rewound, 0,
            "nothing lost: nothing to take back"
        );
        assert_eq!(report.streamed_missed, 0, "the event stream missed lines");
    }
}

/// With asynchronous replication the promoted server lacks what the primary
/// acknowledged in its last moments — the replication lag, which this run measures,
/// made 300 ms long by pausing the primary's WAL sender — and answers nothing twice.
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn with_asynchronous_replication_only_the_last_moments_can_be_lost_and_none_is_answered_twice() {
    if let Some(report) = fail_over(Replication::Asynchronous) {
        // A follower that read lines the promoted server lacks is told so, forgets
        // them, and reads what the promoted server wrote in their places.
        assert_eq!(report.followed_missed, 0, "the follower missed lines");
        assert_eq!(report.followed_again, 0, "the follower read lines again");
        assert_eq!(
            report.followed_but_lost, 0,
            "the follower kept lines it was not told were lost"
        );
        assert_eq!(report.streamed_missed, 0, "the event stream missed lines");
    }
}

/// A store opened read-only on the standby — the replica URL for what tolerates
/// staleness: listing, reading, searching, exporting — shows what the primary wrote a
/// moment later, and refuses to write, so a turn can only go to the primary.
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "set AGENT_SESSIONS_TEST_POSTGRES_URL to run"
)]
fn a_read_only_store_on_the_standby_shows_what_the_primary_wrote_and_writes_nothing() {
    use agent_sessions::store::{Backend, OpenMode};
    let Some((_root, cluster)) = start_cluster(Replication::Synchronous) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (primary, standby) = (&cluster.0[0], &cluster.0[1]);
        wait_for_standby(primary, Replication::Synchronous).await;
        let writer = SessionManager::connect(&primary.url())
            .await
            .unwrap()
            .build()
            .unwrap();
        // The standby has the tables the writer created once it has applied them.
        let opened = Instant::now();
        let replica = loop {
            match Backend::open_with(&standby.url(), OpenMode::ReadOnly).await {
                Ok(replica) => break replica,
                Err(agent_sessions::Error::StoreNotFound { .. })
                    if opened.elapsed() < Duration::from_secs(10) =>
                {
                    tokio::time::sleep(Duration::from_millis(5)).await
                }
                Err(error) => panic!("{error}"),
            }
        };
        let reader = SessionManager::builder(replica.sessions().clone())
            .backend(replica)
            .build()
            .unwrap();
        let mut stale_for = Vec::new();
        for n in 0..20 {
            let message = InboundMessage::direct("telegram", format!("p{n}"), format!("q{n}"));
            let turn = writer.turn(&message).await.unwrap();
            turn.complete(format!("a{n}")).await.unwrap();
            let written = Instant::now();
            let key = writer.key_for(&message).unwrap();
            // Until the standby has applied it, the reader may not see it yet.
            loop {
                let said = reader.session(&key).messages().await.unwrap_or_default();
                if said.iter().any(|m| m.content == format!("a{n}")) {
                    stale_for.push(written.elapsed());
                    break;
                }
                assert!(written.elapsed() < Duration::from_secs(10), "never shown");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let listed = reader.store().list(&ListFilter::new()).await.unwrap();
        assert_eq!(listed.len(), 20);
        // Search: the primary's process indexes the message log; the replica's searches
        // that index as the standby has it.
        use agent_sessions::transcript::search::{Search, SearchQuery};
        let primary_backend = Backend::open(&primary.url()).await.unwrap();
        let indexer = Search::shared(primary_backend.search_index().await.unwrap());
        assert!(
            indexer
                .sync(&**primary_backend.transcripts())
                .await
                .unwrap()
                >= 40
        );
        let replica_backend = Backend::open_with(&standby.url(), OpenMode::ReadOnly)
            .await
            .unwrap();
        let searcher = Search::shared(replica_backend.search_index().await.unwrap());
        let indexed = Instant::now();
        loop {
            let hits = searcher.search(&SearchQuery::text("a7")).await.unwrap();
            if hits.iter().any(|hit| hit.message.text == "a7") {
                eprintln!("searched on the standby after {:?}", indexed.elapsed());
                break;
            }
            assert!(indexed.elapsed() < Duration::from_secs(10), "never found");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Indexing is a write: the replica refuses it.
        let refused = searcher.sync(&**replica_backend.transcripts()).await;
        assert!(refused.is_err(), "the replica indexes nothing");
        // A turn on the reader is refused: nothing is written on a replica.
        let refused = reader
            .turn(&InboundMessage::direct("telegram", "p0", "again?"))
            .await;
        let Err(error) = refused else {
            panic!("a turn on the replica is refused")
        };
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("read-only"), "{error}");
        stale_for.sort();
        eprintln!("shown on the standby after {stale_for:?}; a turn there: {error}");
    });
}
