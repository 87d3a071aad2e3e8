//! Handing a person a copy of their data: [`SessionManager::export_person`].

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::{json, Value};

use super::forget::PersonRef;
use super::redact::{self, chatter_of, PersonIds};
use super::Privacy;
use crate::error::{Error, Result};
use crate::inbound::chatter::ChatterEdit;
use crate::manager::SessionManager;
use crate::transcript::lines::session_id_of_name;

/// What [`SessionManager::export_person`] wrote: counts only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PersonExportSummary {
    /// Their sessions, current and closed.
    pub sessions: usize,
    /// Messages of their sessions, and their messages in shared ones.
    pub messages: usize,
    /// Their group chatter still waiting in group chatter.
    pub chatter_entries: usize,
}

impl SessionManager {
    /// Writes everything this manager holds about `person` to `out` as one JSON
    /// document, piece by piece (one session's messages in memory at a time): the ids
    /// they are known by, each of their sessions (current and closed) with its entry
    /// and its messages in order (archived transcripts too, compaction summaries as
    /// such), the messages they wrote in shared sessions (groups), their workspaces
    /// (each folder and the files in it, for the host to copy), and their chatter
    /// still waiting in group chatter. System events queued for their next turn are
    /// not in it (reading them would take them). Finds what
    /// [`forget_person`](Self::forget_person) would erase, by the same rules; reaches
    /// transcripts through the manager's backend (see
    /// [`SessionManagerBuilder::backend`](crate::manager::SessionManagerBuilder::backend)).
    ///
    /// ```text
    /// {"version":1,"ids":["+15550100","jane"],
    ///  "sessions":[{"key":"agent:main:sms:direct:+15550100","entry":{…},
    ///               "messages":[{"at":"…","role":"user","text":"hi", …}, …]}, …],
    ///  "sharedMessages":[{"sessionKey":"agent:main:whatsapp:group:…","at":"…","text":"…"}],
    ///  "workspaces":[{"dir":"/srv/bot/workspaces/…","files":["exports/report.csv","summary.md"]}],
    ///  "groupHistory":[{"sender":"Jane","body":"…","timestamp":1770000000000}]}
    /// ```
    ///
    /// ```
    /// use agent_sessions::privacy::PersonRef;
    /// use agent_sessions::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("json:{}", dir.path().display());
    /// let manager = SessionManager::connect(&url).await?.build()?;
    /// let turn = manager.turn(&InboundMessage::direct("sms", "+15550100", "hi")).await?;
    /// turn.complete("hello!").await?;
    ///
    /// let mut copy = Vec::new();
    /// let summary = manager.export_person(&PersonRef::sender("sms", "+15550100"), &mut copy).await?;
    /// assert_eq!((summary.sessions, summary.messages), (1, 2));
    /// let document: serde_json::Value = serde_json::from_slice(&copy).unwrap();
    /// assert_eq!(document["sessions"][0]["messages"][1]["text"], "hello!");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn export_person(
        &self,
        person: &PersonRef,
        out: &mut (dyn Write + Send),
    ) -> Result<PersonExportSummary> {
        let transcripts = Privacy(self).exportable_transcripts()?;
        let ids = Privacy(self).person_ids(person).await?;
        let (current, closed) = Privacy(self).sessions_of(&ids).await?;
        Privacy(self).refuse_sealed_without_keys(current.iter().chain(&closed), "export")?;
        let mut summary = PersonExportSummary::default();
        let write = |out: &mut (dyn Write + Send), bytes: &[u8]| {
            out.write_all(bytes)
                .map_err(|e| Error::io("write", std::path::Path::new("the export"), e))
        };
        let value = |out: &mut (dyn Write + Send), value: &Value| {
            serde_json::to_writer(&mut *out, value)
                .map_err(|e| Error::encode("a person's export", e))
        };
        let all_ids: Vec<&str> = ids.all().collect();
        write(out, b"{\"version\":1,\"ids\":")?;
        value(out, &json!(all_ids))?;
        write(out, b",\"sessions\":[")?;
        let names = match &transcripts {
            Some(transcripts) => {
                transcripts
                    .transcript_names(self.settings.isolated_to.as_ref())
                    .await?
            }
            None => Vec::new(),
        };
        let mut first = true;
        let mut theirs: BTreeSet<String> = BTreeSet::new();
        for session in current.iter().chain(&closed) {
            theirs.insert(session.entry.session_id.clone());
            let mut messages = Vec::new();
            if let Some(transcripts) = &transcripts {
                for (agent, name) in &names {
                    if session_id_of_name(name) != session.entry.session_id {
                        continue;
                    }
                    for line in transcripts
                        .export_lines(agent, name)
                        .await?
                        .unwrap_or_default()
                    {
                        if let Some(message) = exported_line(&line) {
                            messages.push(message);
                        }
                    }
                }
            }
            summary.sessions += 1;
            summary.messages += messages.len();
            if !first {
                write(out, b",")?;
            }
            first = false;
            value(
                out,
                &json!({
                    "key": session.key.as_str(),
                    "entry": session.entry,
                    "messages": messages,
                }),
            )?;
        }
        write(out, b"],\"sharedMessages\":[")?;
        let mut first = true;
        if let Some(transcripts) = &transcripts {
            for (agent, name) in &names {
                if theirs.contains(&session_id_of_name(name)) {
                    continue;
                }
                for line in transcripts
                    .export_lines(agent, name)
                    .await?
                    .unwrap_or_default()
                {
                    let found = if written_by(&ids, &line) {
                        // Their message, without the chatter of others shown with it.
                        exported_line(&line)
                            .map(|mut message| {
                                if let Some(text) = message["text"].as_str() {
                                    let own = own_part(text).to_owned();
                                    message["text"] = Value::from(own);
                                }
                                message
                            })
                            .into_iter()
                            .collect()
                    } else {
                        chatter_in(&ids, &line)
                    };
                    for message in found {
                        summary.messages += 1;
                        if !first {
                            write(out, b",")?;
                        }
                        first = false;
                        value(out, &message)?;
                    }
                }
            }
        }
        write(out, b"],\"workspaces\":")?;
        let mut workspaces = Vec::new();
        if let Some(root) = self
            .seams
            .workspaces
            .as_ref()
            .map(|w| w.root().to_path_buf())
        {
            let folders: BTreeSet<String> = current
                .iter()
                .chain(&closed)
                .filter_map(|s| s.entry.workspace_id.clone())
                .filter(|id| uuid::Uuid::parse_str(id).is_ok())
                .collect();
            for id in folders {
                let dir = root.join(&id);
                let listed = dir.clone();
                // A link where the folder should be is not followed.
                let files = crate::store::fs::blocking(&dir, move || {
                    let is_dir = std::fs::symlink_metadata(&listed).is_ok_and(|m| m.is_dir());
                    Ok(if is_dir {
                        files_in(&listed, &listed)
                    } else {
                        Vec::new()
                    })
                })
                .await?;
                workspaces.push(json!({"dir": dir.display().to_string(), "files": files}));
            }
        }
        value(out, &json!(workspaces))?;
        write(out, b",\"groupHistory\":")?;
        let chatter = Mutex::new(Vec::new());
        self.seams
            .history
            .edit_entries(&|group, entry| {
                let channel = group.split(':').nth(2);
                if entry
                    .sender_id
                    .as_deref()
                    .is_some_and(|id| ids.is_on(channel, id))
                {
                    chatter
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(entry.clone());
                }
                ChatterEdit::Keep
            })
            .await?;
        let chatter = chatter
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        summary.chatter_entries = chatter.len();
        value(out, &json!(chatter))?;
        write(out, b"}")?;
        out.flush()
            .map_err(|e| Error::io("write", std::path::Path::new("the export"), e))?;
        Ok(summary)
    }
}

/// The files under `dir`, as paths relative to `base` (links are not followed).
fn files_in(dir: &std::path::Path, base: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => files.extend(files_in(&path, base)),
            Ok(kind) if kind.is_file() => {
                if let Ok(relative) = path.strip_prefix(base) {
                    files.push(relative.display().to_string());
                }
            }
            _ => {}
        }
    }
    files.sort();
    files
}

/// The person's group chatter that another's line showed the model, one message per
/// history line (`role` `chatter`).
fn chatter_in(ids: &PersonIds, line: &str) -> Vec<Value> {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        return Vec::new();
    };
    let labels: Vec<String> = value["log"]["chatter"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|record| {
            record["senderId"]
                .as_str()
                .is_some_and(|id| ids.is_on(value["log"]["channel"].as_str(), id))
        })
        .filter_map(|record| record["sender"].as_str().map(str::to_owned))
        .collect();
    if labels.is_empty() {
        return Vec::new();
    }
    let Some(message) = exported_line(line) else {
        return Vec::new();
    };
    chatter_of(message["text"].as_str().unwrap_or(""), &labels)
        .into_iter()
        .map(|text| {
            json!({
                "at": message["at"],
                "role": "chatter",
                "text": text,
                "sessionKey": message["sessionKey"],
                "channel": message["channel"],
            })
        })
        .collect()
}

/// The part of a group line's text its sender wrote: after the group's chatter
/// block, the current message.
fn own_part(text: &str) -> &str {
    match text.split_once(crate::inbound::pipeline::CURRENT_MESSAGE_MARKER) {
        Some((_, own)) => own.trim_start_matches('\n'),
        None => text,
    }
}

/// Whether `line` is a message the person wrote.
fn written_by(ids: &PersonIds, line: &str) -> bool {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(entry)) => entry["type"] == "message" && redact::written_by(ids, &entry),
        _ => false,
    }
}

/// A transcript line as the export shows it: a message (time, role, text, the files
/// it came with, and the session key, channel and direction the log recorded) or a
/// compaction summary;
/// `None` for other lines.
fn exported_line(line: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(line).ok()?;
    match value["type"].as_str()? {
        "message" => {
            let message = &value["message"];
            let text = match &message["content"] {
                Value::String(text) => text.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|block| block["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            let log = &value["log"];
            let mut exported = json!({
                "at": value["timestamp"],
                "role": message["role"],
                "text": text,
                "sessionKey": log["sessionKey"],
                "channel": log["channel"],
                "direction": log["direction"],
            });
            // The files the message came with (their names, captions, ids).
            if let Some(files) = log.get("attachments").filter(|files| !files.is_null()) {
                exported["attachments"] = files.clone();
            }
            Some(exported)
        }
        "compaction" | "branch_summary" => Some(json!({
            "at": value["timestamp"],
            "role": "summary",
            "text": value["summary"],
        })),
        _ => None,
    }
}
