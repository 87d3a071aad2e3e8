//! How results are printed: text for people, JSON for scripts.
//!
//! Times are shown as dates in the local time zone. Everything printed on standard
//! output goes through [`emit`], which treats a reader that went away (`| head`) as
//! the end of the command, not as a failure.

use std::io::{self, Write};
use std::sync::Mutex;

use agent_sessions::ops::{MigrationProgress, MigrationReport};
use agent_sessions::{SessionEntry, SessionKey, StoredSession};
use chrono::{Local, TimeZone};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

/// Prints a line on standard output through [`emit`]. It shadows the standard
/// `println!` in this module on purpose, so that no function here can panic on a
/// closed pipe.
macro_rules! println {
    () => {
        $crate::output::emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `text` on standard output. When the reader has gone (`agent-sessions list |
/// head -1`) the process ends at once, quietly and with status 0, as a filter killed
/// by `SIGPIPE` would; any other write error ends it with status 1 and a message.
pub fn emit(text: std::fmt::Arguments<'_>) {
    if let Err(error) = io::stdout().lock().write_fmt(text) {
        stdout_failed(&error);
    }
}

/// Ends the process after a failed write on standard output (see [`emit`]).
pub fn stdout_failed(error: &io::Error) -> ! {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(
        io::stderr(),
        "agent-sessions: cannot write to standard output: {error}"
    );
    std::process::exit(i32::from(crate::commands::EXIT_FAILURE));
}

/// `text` with every control character but newline and tab, and every character that
/// reorders or hides text (bidirectional controls, zero-width marks, line and paragraph
/// separators), written as `\u{…}`: stored text shown to a person can never drive
/// their terminal or read as something else.
pub fn escaped(text: &str) -> String {
    let hidden = |c: char| {
        matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{061c}'
                | '\u{feff}'
        )
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\n' && c != '\t') || hidden(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// One line of stored text: [`escaped`], with newlines and tabs escaped too.
fn one_line(text: &str) -> String {
    escaped(text).replace('\n', "\\n").replace('\t', "\\t")
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialise")
    );
}

/// `1 session`, `2 sessions`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn local(epoch_ms: u64, format: &str) -> String {
    i64::try_from(epoch_ms)
        .ok()
        .and_then(|ms| Local.timestamp_millis_opt(ms).single())
        .map_or_else(|| epoch_ms.to_string(), |at| at.format(format).to_string())
}

/// A local date and time to the minute: `2026-02-06 11:00`.
fn when(epoch_ms: u64) -> String {
    local(epoch_ms, "%Y-%m-%d %H:%M")
}

fn session_json(session: &StoredSession) -> Value {
    json!({
        "key": session.key.as_str(),
        "revision": format!("{:016x}", session.revision.as_u64()),
        "entry": session.entry,
    })
}

/// A list of sessions.
pub fn sessions(as_json: bool, sessions: &[StoredSession]) {
    if as_json {
        print_json(&Value::Array(sessions.iter().map(session_json).collect()));
        return;
    }
    if sessions.is_empty() {
        println!("no sessions");
        return;
    }
    let width = sessions
        .iter()
        .map(|s| s.key.as_str().len())
        .max()
        .unwrap_or(3);
    println!(
        "{:<width$}  {:<8}  {:<16}  {:<17}  {:>5}  LABEL / LAST MESSAGE",
        "KEY", "SESSION", "ACTIVE", "STATUS", "MSGS"
    );
    for session in sessions {
        let entry = &session.entry;
        let note = entry
            .label
            .as_deref()
            .or(entry.last_message_preview.as_deref())
            .unwrap_or("");
        println!(
            "{:<width$}  {:<8}  {:<16}  {:<17}  {:>5}  {}",
            one_line(session.key.as_str()),
            one_line(&entry.session_id.chars().take(8).collect::<String>()),
            when(entry.updated_at),
            one_line(entry.status.as_ref().map_or("", |s| s.as_str())),
            entry
                .message_count
                .map_or_else(String::new, |n| n.to_string()),
            one_line(&note.chars().take(60).collect::<String>()),
        );
    }
    println!("{}", count(sessions.len() as u64, "session", "sessions"));
}

/// One session: a table of its main fields, or with `as_json` the whole entry.
/// Why a session started, in words, from its `startReason`.
pub fn start_reason(entry: &SessionEntry) -> Option<String> {
    let why = match entry.start_reason.as_deref()? {
        "no_session" => "the key's first session",
        "explicit_reset" => "reset: /new, a reset phrase or a reset call",
        "session_closed" => "the previous session was closed",
        "daily" => "daily reset: the previous session passed the daily boundary",
        "idle" => "idle reset: the previous session was idle too long",
        "topic_drift" => "the message was judged a new topic",
        other => return Some(other.to_owned()),
    };
    Some(why.to_owned())
}

pub fn session(as_json: bool, session: &StoredSession) {
    if as_json {
        print_json(&session_json(session));
        return;
    }
    let entry = &session.entry;
    let exact = |ms: u64| local(ms, "%Y-%m-%d %H:%M:%S %:z");
    let mut rows: Vec<(&str, String)> = vec![
        ("key", session.key.to_string()),
        ("session", entry.session_id.clone()),
        (
            "agent",
            session.key.agent_id().unwrap_or("(global)").to_owned(),
        ),
    ];
    let mut add = |name: &'static str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            rows.push((name, value));
        }
    };
    add(
        "status",
        entry.status.as_ref().map(|s| s.as_str().to_owned()),
    );
    add(
        "chat",
        entry
            .chat_type
            .as_ref()
            .and_then(|t| t.peer_kind())
            .or_else(|| session.key.peer_kind())
            .map(|kind| kind.as_str().to_owned()),
    );
    add("channel", entry.channel_name().map(str::to_owned));
    add("label", entry.label.clone());
    add("name", entry.display_name.clone());
    add("subject", entry.subject.clone());
    add("description", entry.description.clone());
    add("person", entry.person_id.clone());
    add("spawned by", entry.spawned_by.clone());
    add(
        "started",
        entry
            .session_started_at
            .map(|at| match start_reason(entry) {
                Some(why) => format!("{} ({why})", exact(at)),
                None => exact(at),
            }),
    );
    add("active", Some(exact(entry.updated_at)));
    add("closed", entry.closed_at.map(exact));
    let activity = [
        entry.message_count.map(|n| count(n, "message", "messages")),
        entry.turn_count.map(|n| count(n, "turn", "turns")),
    ];
    add(
        "activity",
        Some(
            activity
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", "),
        ),
    );
    add(
        "model",
        match (&entry.model_provider, &entry.model) {
            (Some(provider), Some(model)) => Some(format!("{provider}/{model}")),
            (provider, model) => model.clone().or(provider.clone()),
        },
    );
    add("last turn", last_turn_tokens(entry));
    add(
        "last message",
        entry
            .last_message_preview
            .as_ref()
            .map(|text| text.chars().take(60).collect()),
    );
    add("transcript", entry.session_file.clone());
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    for (name, value) in &rows {
        println!("{name:<width$}  {}", one_line(value));
    }
    println!("(--json prints the whole entry)");
}

/// A change to one session.
pub fn done(as_json: bool, what: &str, key: &SessionKey, session_id: &str) {
    if as_json {
        print_json(&json!({"action": what, "key": key.as_str(), "sessionId": session_id}));
    } else {
        println!(
            "{what} {} (session {})",
            one_line(key.as_str()),
            one_line(session_id)
        );
    }
}

/// What `forget` erased or `prune --retention` removed (`verb`): counts by kind.
pub fn counts(as_json: bool, verb: &str, report: &impl serde::Serialize) {
    let value = json!(report);
    if as_json {
        print_json(&value);
        return;
    }
    let parts: Vec<String> = value
        .as_object()
        .into_iter()
        .flatten()
        .map(|(kind, count)| format!("{kind} {}", count.as_u64().unwrap_or(0)))
        .collect();
    println!("{verb}: {}", parts.join(", "));
}

/// What `prune` removed.
pub fn pruned(as_json: bool, dry_run: bool, removed: &[StoredSession]) {
    if as_json {
        print_json(&json!({
            "dryRun": dry_run,
            "removed": removed.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
            "sessionIds": removed.iter().map(|s| s.entry.session_id.as_str()).collect::<Vec<_>>(),
        }));
        return;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for session in removed {
        println!(
            "{verb} {} session {} (active {})",
            one_line(session.key.as_str()),
            one_line(&session.entry.session_id),
            when(session.entry.updated_at)
        );
    }
    println!(
        "{verb} {}",
        count(removed.len() as u64, "session", "sessions")
    );
}

/// Store statistics.
pub fn stats(as_json: bool, summary: &Value) {
    if as_json {
        print_json(summary);
        return;
    }
    println!("store        {}", summary["store"].as_str().unwrap_or(""));
    println!("sessions     {}", summary["sessions"]);
    println!(
        "transcripts  {} ({} archived)",
        summary["transcripts"], summary["archivedTranscripts"]
    );
    for (title, field) in [
        ("by agent", "byAgent"),
        ("by chat type", "byChatType"),
        ("by channel", "byChannel"),
        ("by status", "byStatus"),
    ] {
        if let Some(counts) = summary[field].as_object().filter(|c| !c.is_empty()) {
            println!("{title}:");
            for (name, count) in counts {
                println!("  {name:<24} {count}");
            }
        }
    }
    for (title, field) in [
        ("oldest activity", "oldestActivity"),
        ("newest activity", "newestActivity"),
    ] {
        if let Some(ms) = summary[field].as_u64() {
            println!("{title:<16} {}", when(ms));
        }
    }
    let messages = &summary["messages"];
    if messages.is_object() {
        println!(
            "messages     {} ({} in, {} out; {} newly categorised)",
            messages["total"],
            messages["inbound"],
            messages["outbound"],
            messages["newlyCategorized"]
        );
        for (title, field) in [
            ("messages by category", "by_category"),
            ("messages by channel", "by_channel"),
            ("messages by agent identity", "by_agent_identity"),
            ("messages by week", "by_week"),
        ] {
            if let Some(counts) = messages[field].as_object().filter(|c| !c.is_empty()) {
                println!("{title}:");
                for (name, count) in counts {
                    println!("  {name:<24} {count}");
                }
            }
        }
        if let Some(trends) = messages["trends"].as_array().filter(|t| !t.is_empty()) {
            println!(
                "trends (last {} days against the {} before):",
                messages["windowDays"], messages["windowDays"]
            );
            // Widths apply to strings, not to JSON values: format the cells first.
            let cell = |value: &Value| match value {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            let rows: Vec<[String; 4]> = trends
                .iter()
                .map(|trend| {
                    let change = trend["ratio"].as_f64().map_or_else(
                        || "new".to_owned(),
                        |r| format!("{:+.0}%", (r - 1.0) * 100.0),
                    );
                    [
                        cell(&trend["category"]),
                        cell(&trend["current"]),
                        cell(&trend["previous"]),
                        change,
                    ]
                })
                .collect();
            let first = rows
                .iter()
                .map(|row| row[0].chars().count())
                .max()
                .unwrap_or(0)
                .max(24);
            println!(
                "  {:<first$} {:>8} {:>8} {:>8}",
                "category", "now", "before", "change"
            );
            for [category, now, before, change] in &rows {
                println!("  {category:<first$} {now:>8} {before:>8} {change:>8}");
            }
        }
    }
}

/// A migration's report.
pub fn migrated(as_json: bool, from: &str, to: &str, report: &MigrationReport) {
    if as_json {
        let mut value = serde_json::to_value(report).expect("reports serialise");
        value["from"] = json!(from);
        value["to"] = json!(to);
        value["verified"] = json!(report.verified());
        value["differing"] = json!(report.source.differing(&report.target));
        print_json(&value);
        return;
    }
    println!("{from} → {to}");
    println!(
        "sessions     {} copied, {} already there",
        report.sessions_copied, report.sessions_skipped
    );
    println!(
        "transcripts  {} copied, {} already there",
        report.transcripts_copied, report.transcripts_skipped
    );
    println!(
        "closed       {} closed sessions copied",
        report.closed_sessions_copied
    );
    if report.closed_sessions_dropped > 0 {
        println!(
            "             {} not kept: the target keeps {} closed sessions a key",
            report.closed_sessions_dropped,
            agent_sessions::CLOSED_SESSIONS_PER_KEY
        );
    }
    println!(
        "chatter      {} groups of pending chatter copied",
        report.chatter_groups_copied
    );
    println!(
        "events       {} sessions' queued system events copied",
        report.system_event_queues_copied
    );
    println!("search index not copied: the target builds its own from the transcripts");
    for group in &report.chatter_conflicts {
        println!("conflict     group {group}: the target has other chatter; left alone");
    }
    for key in &report.system_event_conflicts {
        println!("conflict     {key}: the target has other system events queued; left alone");
    }
    for conflict in &report.session_conflicts {
        let what = if conflict.overwritten {
            "replaced by the source's"
        } else {
            "left alone"
        };
        println!(
            "conflict     {}: the target has another entry (updated {} vs the source's {}); {what}",
            conflict.key, conflict.target_updated_at, conflict.source_updated_at
        );
    }
    for unreadable in &report.unreadable {
        println!(
            "unreadable   {} {:?}: {}; not copied",
            unreadable.location, unreadable.key, unreadable.problem
        );
    }
    for key in &report.source_changed {
        println!("changed      {key}: changed in the source during the copy");
    }
    for conflict in &report.transcript_conflicts {
        println!("conflict     {conflict}: the target has other lines; left alone");
    }
    let side = |c: &agent_sessions::ops::Checksums| {
        format!(
            "{} sessions {:016x}, {} transcripts {:016x}, {} closed {:016x}, \
             {} chatter groups {:016x}, {} event queues {:016x}",
            c.sessions,
            c.session_checksum,
            c.transcripts,
            c.transcript_checksum,
            c.closed_sessions,
            c.closed_session_checksum,
            c.chatter_groups,
            c.chatter_checksum,
            c.system_event_queues,
            c.system_event_checksum
        )
    };
    println!("source       {}", side(&report.source));
    println!("target       {}", side(&report.target));
    let differing = report.source.differing(&report.target);
    if !differing.is_empty() {
        println!("differs      {}", differing.join(", "));
    }
    println!(
        "{}",
        if report.verified() {
            "verified: the target holds everything the source holds \
             (sessions, closed sessions, transcripts, group chatter, system events)"
        } else {
            "NOT verified"
        }
    );
}

/// What `doctor` found and did.
pub fn doctor(as_json: bool, report: &agent_sessions::ops::DoctorReport) {
    if as_json {
        print_json(&serde_json::to_value(report).expect("reports serialise"));
        return;
    }
    println!("examined {} store(s)", report.stores.len());
    for (finding, repair) in &report.findings {
        let finding = serde_json::to_value(finding).expect("findings serialise");
        let kind = finding["kind"].as_str().unwrap_or("?");
        let path = finding["path"].as_str().unwrap_or("");
        let mut detail = ["problem", "key", "sessionFile"]
            .iter()
            .filter_map(|field| finding[field].as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(senders) = finding["senders"].as_array() {
            detail.push_str(&format!(
                ": DMs from {} people share this session",
                senders.len()
            ));
        }
        println!("{kind:<18} {path} {detail}");
        match repair {
            Some(repair) => match &repair.quarantined_to {
                Some(to) => println!("  repaired: {} ({})", repair.action, to.display()),
                None => println!("  repaired: {}", repair.action),
            },
            None => println!("  not repaired"),
        }
    }
    if report.is_healthy() {
        println!("healthy");
    }
}

/// A progress bar on standard error (drawn only on a terminal).
pub struct Bar {
    bar: Mutex<Option<ProgressBar>>,
    shown: bool,
}

impl Bar {
    /// A bar drawn only if `shown` (and standard error is a terminal: indicatif draws
    /// nothing elsewhere).
    pub fn new(shown: bool) -> Self {
        Bar {
            bar: Mutex::new(None),
            shown,
        }
    }
}

impl MigrationProgress for Bar {
    fn begin(&self, phase: &'static str, total: u64) {
        if !self.shown {
            return;
        }
        let bar = ProgressBar::new(total).with_style(
            ProgressStyle::with_template("{msg:>11} [{bar:40}] {pos}/{len} ({eta})")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_message(phase);
        *self.bar.lock().unwrap() = Some(bar);
    }

    fn advance(&self, done: u64) {
        if let Some(bar) = &*self.bar.lock().unwrap() {
            bar.inc(done);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.lock().unwrap().take() {
            bar.finish_and_clear();
        }
    }
}

/// What the session's last turn cost in tokens, each figure named: the prompt (OpenClaw's
/// `totalTokens`: the input, with what came from the provider's cache) and the reply.
/// Not a sum: the prompt holds the input.
fn last_turn_tokens(entry: &SessionEntry) -> Option<String> {
    let prompt =
        entry.total_tokens.map(
            |total| match entry.input_tokens.filter(|input| *input <= total) {
                Some(input) if input < total => format!(
                    "prompt {total} tokens ({input} input + {} cache)",
                    total - input
                ),
                _ => format!("prompt {total} tokens"),
            },
        );
    let reply = entry.output_tokens.map(|n| format!("reply {n} tokens"));
    let parts: Vec<String> = [prompt, reply].into_iter().flatten().collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}
