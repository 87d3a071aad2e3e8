//! A transcript as a conversation a person reads: `log` and `follow` print it.
//!
//! Each transcript line becomes one item — when, who, what — and each session a
//! heading that says when and why it started. Text from the transcript is shown
//! with its control characters escaped, so a message cannot drive the reader's
//! terminal (no escape sequence in a message reaches it).

use std::io::{self, Write};

use agent_sessions::transcript::{Content, Role, SessionEvent};
use agent_sessions::{SessionKey, StoredSession};

pub use crate::output::escaped;
use chrono::{DateTime, Local};
use serde_json::{json, Value};

/// The longest a tool call's arguments or a tool result is shown, in characters.
const MAX_TOOL_TEXT: usize = 200;

/// One transcript line as the conversation shows it.
pub struct Item {
    /// When, as the line says (ISO 8601).
    at: Option<String>,
    /// Who: `user`, `assistant`, `tool`, `status`, `compaction`, `checkpoint`,
    /// `delivery`, `failed`, or the entry's own type.
    who: String,
    /// What was said or happened.
    text: String,
    /// The tool calls an assistant message makes: `name(arguments)`.
    tool_calls: Vec<String>,
    /// The person the log fields name, and the channel.
    person: Option<String>,
    channel: Option<String>,
    offset: u64,
}

impl Item {
    pub fn of(event: &SessionEvent) -> Item {
        let entry = &event.entry;
        let log = entry.log.as_ref();
        let mut item = Item {
            at: entry.timestamp.clone(),
            who: entry.kind.clone(),
            text: String::new(),
            tool_calls: Vec::new(),
            person: log.and_then(|l| l.person_id.clone()),
            channel: log.and_then(|l| l.channel.clone()),
            offset: event.offset.0,
        };
        if let Some(message) = &entry.message {
            item.text = message.text();
            item.who = match &message.role {
                Role::User => "user".into(),
                Role::Assistant => "assistant".into(),
                Role::ToolResult => {
                    let tool = message.extra.get("toolName").and_then(Value::as_str);
                    item.text = shortened(&item.text);
                    match tool {
                        Some(tool) => format!("tool {tool}"),
                        None => "tool".into(),
                    }
                }
                other => other.as_str().to_owned(),
            };
            if let Some(Content::Blocks(blocks)) = &message.content {
                item.tool_calls = blocks
                    .iter()
                    .filter(|block| block.kind == "toolCall")
                    .map(|block| {
                        let name = block.extra.get("name").and_then(Value::as_str);
                        let arguments = block.extra.get("arguments").map(Value::to_string);
                        format!(
                            "{}({})",
                            name.unwrap_or("?"),
                            shortened(&arguments.unwrap_or_default())
                        )
                    })
                    .collect();
            }
            return item;
        }
        let data = entry.data.as_ref();
        let field = |name: &str| {
            data.and_then(|d| d.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match (entry.kind.as_str(), entry.custom_type.as_deref()) {
            ("compaction", _) => {
                item.who = "compaction".into();
                item.text = entry
                    .extra
                    .get("summary")
                    .and_then(Value::as_str)
                    .map(shortened)
                    .unwrap_or_else(|| "the conversation before was summarised".into());
            }
            ("custom", Some("agent-sessions.status")) => {
                item.who = "status".into();
                item.text = field("status").unwrap_or_default();
            }
            ("custom", Some("agent-sessions.checkpoint")) => {
                item.who = "checkpoint".into();
                item.text = field("reason").unwrap_or_default();
            }
            ("custom", Some("agent-sessions.delivery")) => {
                item.who = "delivery".into();
                item.text = data
                    .map(Value::to_string)
                    .map(|d| shortened(&d))
                    .unwrap_or_default();
            }
            ("custom", Some("agent-sessions.turn-failed")) => {
                item.who = "failed".into();
                item.text = data
                    .map(Value::to_string)
                    .map(|d| shortened(&d))
                    .unwrap_or_default();
            }
            (_, custom) => {
                item.who = custom.unwrap_or(&entry.kind).to_owned();
                item.text = data
                    .map(Value::to_string)
                    .map(|d| shortened(&d))
                    .unwrap_or_default();
            }
        }
        item
    }

    /// The item for `--json`: one object a line.
    pub fn json(&self, key: &SessionKey, session_id: &str) -> Value {
        json!({
            "type": "line",
            "key": key.as_str(),
            "session": session_id,
            "offset": self.offset,
            "at": self.at,
            "who": self.who,
            "person": self.person,
            "channel": self.channel,
            "text": self.text,
            "toolCalls": self.tool_calls,
        })
    }

    /// The item for people: `2026-02-06 10:00:01  user       hi`, continued lines
    /// indented under the text.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let at = self.at.as_deref().map(local_time).unwrap_or_default();
        let mut who = self.who.clone();
        if let Some(person) = self.person.as_deref().filter(|_| self.who == "user") {
            who = format!("user {person}");
        }
        let who = escaped(&who);
        let indent = " ".repeat(19 + 2 + 18);
        let text = escaped(&self.text);
        let mut lines = text.lines();
        writeln!(
            out,
            "{at:19}  {who:17} {}",
            lines.next().unwrap_or_default()
        )?;
        for line in lines {
            writeln!(out, "{indent}{line}")?;
        }
        for call in &self.tool_calls {
            writeln!(out, "{indent}→ {}", escaped(call))?;
        }
        Ok(())
    }
}

/// The heading of a session: `── session 0f5d59ee… started 2026-02-06 10:00 (why) ──`.
/// Writes that the store lost a session's lines from `offset` on (a database failed
/// over to a standby that had not received them): what follows replaces them.
pub fn write_rewound(
    out: &mut dyn Write,
    key: &SessionKey,
    session_id: &str,
    offset: u64,
    as_json: bool,
) -> io::Result<()> {
    if as_json {
        let value = json!({
            "type": "rewound",
            "key": key.as_str(),
            "session": session_id,
            "offset": offset,
        });
        return writeln!(out, "{value}");
    }
    writeln!(
        out,
        "-- the store lost the lines above from offset {offset} of session {} (a database failover); what follows replaces them",
        escaped(session_id)
    )
}

pub fn write_heading(
    out: &mut dyn Write,
    session: &StoredSession,
    as_json: bool,
) -> io::Result<()> {
    let entry = &session.entry;
    if as_json {
        let value = json!({
            "type": "session",
            "key": session.key.as_str(),
            "session": entry.session_id,
            "startedAt": entry.session_started_at,
            "startReason": entry.start_reason,
            "status": entry.status.as_ref().map(|s| s.as_str()),
            "closedAt": entry.closed_at,
        });
        return writeln!(out, "{value}");
    }
    let started = entry
        .session_started_at
        .and_then(|ms| DateTime::from_timestamp_millis(ms as i64))
        .map(|at| {
            at.with_timezone(&Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| "at an unknown time".into());
    let why = crate::output::start_reason(entry)
        .map(|why| format!(" ({why})"))
        .unwrap_or_default();
    let status = entry
        .status
        .as_ref()
        .map(|s| format!(", {}", s.as_str()))
        .unwrap_or_default();
    let heading = format!(
        "── {} session {} started {started}{why}{status} ──",
        session.key.as_str(),
        entry.session_id
    );
    // Every part of it comes from the store: none may drive the terminal.
    writeln!(out, "{}", escaped(&heading).replace('\n', "\\n"))
}

fn shortened(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(MAX_TOOL_TEXT).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

fn local_time(iso: &str) -> String {
    DateTime::parse_from_rfc3339(iso)
        .map(|at| {
            at.with_timezone(&Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|_| escaped(iso))
}

/// Where `log` writes: `$PAGER` (default `less -FRX`) when standard output is a
/// terminal and paging is on, else standard output.
pub struct Output {
    pager: Option<std::process::Child>,
    out: Box<dyn Write>,
}

impl Output {
    pub fn open(page: bool) -> Output {
        use std::io::IsTerminal;
        use std::process::{Command, Stdio};
        let stdout = || Box::new(io::BufWriter::new(io::stdout())) as Box<dyn Write>;
        if !page || !io::stdout().is_terminal() {
            return Output {
                pager: None,
                out: stdout(),
            };
        }
        let command = std::env::var("PAGER").unwrap_or_else(|_| "less -FRX".into());
        if command.trim().is_empty() || command.trim() == "cat" {
            return Output {
                pager: None,
                out: stdout(),
            };
        }
        match Command::new("sh")
            .args(["-c", &command])
            .stdin(Stdio::piped())
            .spawn()
        {
            Ok(mut child) => {
                let stdin = child.stdin.take().expect("piped");
                Output {
                    pager: Some(child),
                    out: Box::new(io::BufWriter::new(stdin)),
                }
            }
            Err(_) => Output {
                pager: None,
                out: stdout(),
            },
        }
    }

    pub fn writer(&mut self) -> &mut dyn Write {
        &mut self.out
    }

    /// Flushes what is left and waits for the pager to be closed.
    pub fn finish(mut self) -> io::Result<()> {
        let flushed = self.out.flush();
        drop(self.out);
        if let Some(mut pager) = self.pager.take() {
            // The reader quit the pager early: that is not a failure.
            let _ = pager.wait();
            return Ok(());
        }
        flushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent_to_the_terminal() {
        assert_eq!(
            escaped("a\u{1b}[2Jb\nc\td\u{7}"),
            "a\\u{1b}[2Jb\nc\td\\u{7}"
        );
        assert_eq!(escaped("\u{9b}31m"), "\\u{9b}31m", "the 8-bit CSI too");
        assert_eq!(escaped("abc\u{202e}gpj.exe"), "abc\\u{202e}gpj.exe");
    }
}
