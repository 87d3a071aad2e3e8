//! How results are printed: text for people, JSON for scripts.

use std::sync::Mutex;

use agent_sessions::store::migrate::{MigrationReport, Progress};
use agent_sessions::{SessionKey, StoredSession};
use chrono::{TimeZone, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialise")
    );
}

fn when(epoch_ms: u64) -> String {
    i64::try_from(epoch_ms)
        .ok()
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
        .map_or_else(
            || epoch_ms.to_string(),
            |at| at.format("%Y-%m-%d %H:%M").to_string(),
        )
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
            session.key.as_str(),
            entry.session_id.chars().take(8).collect::<String>(),
            when(entry.updated_at),
            entry.status.as_ref().map_or("", |s| s.as_str()),
            entry
                .message_count
                .map_or_else(String::new, |n| n.to_string()),
            note.chars().take(60).collect::<String>(),
        );
    }
    println!("{} session(s)", sessions.len());
}

/// One session.
pub fn session(as_json: bool, session: &StoredSession) {
    if as_json {
        print_json(&session_json(session));
        return;
    }
    println!("{}", session.key);
    println!(
        "{}",
        serde_json::to_string_pretty(&session.entry).expect("entries serialise")
    );
}

/// A change to one session.
pub fn done(as_json: bool, what: &str, key: &SessionKey, session_id: &str) {
    if as_json {
        print_json(&json!({"action": what, "key": key.as_str(), "sessionId": session_id}));
    } else {
        println!("{what} {key} (session {session_id})");
    }
}

/// What `prune` removed.
pub fn pruned(as_json: bool, dry_run: bool, removed: &[StoredSession]) {
    if as_json {
        print_json(&json!({
            "dryRun": dry_run,
            "removed": removed.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(),
        }));
        return;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for session in removed {
        println!(
            "{verb} {} (active {})",
            session.key,
            when(session.entry.updated_at)
        );
    }
    println!("{verb} {} session(s)", removed.len());
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
            println!(
                "  {:<24} {:>8} {:>8} {:>8}",
                "category", "now", "before", "change"
            );
            for trend in trends {
                let change = trend["ratio"].as_f64().map_or_else(
                    || "new".to_owned(),
                    |r| format!("{:+.0}%", (r - 1.0) * 100.0),
                );
                println!(
                    "  {:<24} {:>8} {:>8} {:>8}",
                    trend["category"].as_str().unwrap_or(""),
                    trend["current"],
                    trend["previous"],
                    change
                );
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
    for key in &report.source_changed {
        println!("changed      {key}: changed in the source during the copy");
    }
    for conflict in &report.transcript_conflicts {
        println!("conflict     {conflict}: the target has other lines; left alone");
    }
    let side = |c: &agent_sessions::store::migrate::Checksums| {
        format!(
            "{} sessions {:016x}, {} transcripts {:016x}",
            c.sessions, c.session_checksum, c.transcripts, c.transcript_checksum
        )
    };
    println!("source       {}", side(&report.source));
    println!("target       {}", side(&report.target));
    println!(
        "{}",
        if report.verified() {
            "verified: the target holds everything the source holds"
        } else {
            "NOT verified"
        }
    );
}

/// What `doctor` found and did.
pub fn doctor(as_json: bool, report: &agent_sessions::store::doctor::DoctorReport) {
    if as_json {
        print_json(&serde_json::to_value(report).expect("reports serialise"));
        return;
    }
    println!("examined {} store(s)", report.stores.len());
    for (finding, repair) in &report.findings {
        let finding = serde_json::to_value(finding).expect("findings serialise");
        let kind = finding["kind"].as_str().unwrap_or("?");
        let path = finding["path"].as_str().unwrap_or("");
        let detail = ["problem", "key", "sessionFile"]
            .iter()
            .filter_map(|field| finding[field].as_str())
            .collect::<Vec<_>>()
            .join(", ");
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
    pub fn new(shown: bool) -> Self {
        Bar {
            bar: Mutex::new(None),
            shown,
        }
    }
}

impl Progress for Bar {
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
