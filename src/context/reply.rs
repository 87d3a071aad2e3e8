//! What the bot sends back: reply payloads from the model's output.
//!
//! ```
//! use agent_sessions::context::reply::{build_reply_payloads, ReplyOptions, ReplyPayload};
//!
//! let raw = vec![ReplyPayload::text("[[reply_to_current]] Done!\nMEDIA: https://cdn.example.com/report.pdf")];
//! let options = ReplyOptions { current_message_id: Some("m-42".into()), ..ReplyOptions::default() };
//! let payloads = build_reply_payloads(raw, &options);
//! assert_eq!(payloads[0].text.as_deref(), Some("Done!"));
//! assert_eq!(payloads[0].reply_to_id.as_deref(), Some("m-42"));
//! assert_eq!(payloads[0].media_urls, ["https://cdn.example.com/report.pdf"]);
//!
//! // Silence: nothing is sent.
//! assert!(build_reply_payloads(vec![ReplyPayload::text("<NO_REPLY>")], &options).is_empty());
//! ```

use serde::{Deserialize, Serialize};

/// The token a heartbeat run answers with when there is nothing to say.
pub const HEARTBEAT_TOKEN: &str = "HEARTBEAT_OK";
/// The token a model answers with to stay silent (OpenClaw's `SILENT_REPLY_TOKEN`).
pub const SILENT_REPLY_TOKEN: &str = "NO_REPLY";
/// Silence markers that suppress a reply wherever they appear.
pub const SILENCE_MARKERS: &[&str] = &["<NO_REPLY>", "<EMPTY_RESPONSE>"];
/// How long a heartbeat acknowledgement may be and still count as "nothing to say".
pub const DEFAULT_HEARTBEAT_ACK_MAX_CHARS: usize = 300;

/// One message to send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyPayload {
    /// The text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Media to attach (URLs or paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media_urls: Vec<String>,
    /// The message to reply to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_id: Option<String>,
    /// Whether the model asked to reply to the triggering message.
    #[serde(default)]
    pub reply_to_current: bool,
    /// Send audio as a voice note.
    #[serde(default)]
    pub audio_as_voice: bool,
    /// The payload reports an error.
    #[serde(default)]
    pub is_error: bool,
}

impl ReplyPayload {
    /// A text payload.
    pub fn text(text: impl Into<String>) -> Self {
        ReplyPayload {
            text: Some(text.into()),
            ..ReplyPayload::default()
        }
    }

    /// Whether there is anything to send.
    pub fn is_renderable(&self) -> bool {
        self.text.as_deref().is_some_and(|t| !t.trim().is_empty()) || !self.media_urls.is_empty()
    }
}

/// Whether [`strip_heartbeat_token`] runs for a heartbeat run or an ordinary message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatMode {
    /// An ordinary reply: only the token is removed.
    Message,
    /// A heartbeat run: a short remainder counts as nothing to say.
    Heartbeat,
}

/// What [`strip_heartbeat_token`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatStrip {
    /// Send nothing.
    pub should_skip: bool,
    /// The text to send.
    pub text: String,
    /// Whether a token was removed.
    pub did_strip: bool,
}

/// Removes `HEARTBEAT_OK` from the start and end of a reply (OpenClaw's
/// `stripHeartbeatToken`); a token in the middle is left alone. Markup around the token
/// (`**HEARTBEAT_OK**`, HTML tags, `&nbsp;`) is looked through.
pub fn strip_heartbeat_token(
    raw: &str,
    mode: HeartbeatMode,
    max_ack_chars: usize,
) -> HeartbeatStrip {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return HeartbeatStrip {
            should_skip: true,
            text: String::new(),
            did_strip: false,
        };
    }
    let normalized = normalize_markup(trimmed);
    if !trimmed.contains(HEARTBEAT_TOKEN) && !normalized.contains(HEARTBEAT_TOKEN) {
        return HeartbeatStrip {
            should_skip: false,
            text: trimmed.to_owned(),
            did_strip: false,
        };
    }
    let (mut remainder, mut stripped) = strip_token_edges(trimmed);
    if !stripped || remainder.is_empty() {
        let (alternative, did) = strip_token_edges(&normalized);
        if did {
            remainder = alternative;
            stripped = true;
        }
    }
    if !stripped {
        return HeartbeatStrip {
            should_skip: false,
            text: trimmed.to_owned(),
            did_strip: false,
        };
    }
    let remainder = remainder.split_whitespace().collect::<Vec<_>>().join(" ");
    if remainder.is_empty()
        || (mode == HeartbeatMode::Heartbeat && remainder.chars().count() <= max_ack_chars)
    {
        return HeartbeatStrip {
            should_skip: true,
            text: String::new(),
            did_strip: true,
        };
    }
    HeartbeatStrip {
        should_skip: false,
        text: remainder,
        did_strip: true,
    }
}

fn strip_token_edges(text: &str) -> (String, bool) {
    let mut rest = text.trim().to_owned();
    let mut stripped = false;
    loop {
        if let Some(after) = rest.strip_prefix(HEARTBEAT_TOKEN) {
            rest = after.trim_start().to_owned();
            stripped = true;
        } else if let Some(before) = rest.strip_suffix(HEARTBEAT_TOKEN) {
            rest = before.trim_end().to_owned();
            stripped = true;
        } else {
            return (rest, stripped);
        }
    }
}

/// HTML tags and `&nbsp;` as spaces; leading and trailing `*`, `` ` ``, `~`, `_` runs removed.
fn normalize_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.replace("&nbsp;", " ").chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if in_tag => {}
            c => out.push(c),
        }
    }
    out.trim()
        .trim_matches(|c| matches!(c, '*' | '`' | '~' | '_'))
        .trim()
        .to_owned()
}

/// Removes silence: `<NO_REPLY>` and `<EMPTY_RESPONSE>` anywhere, and a bare `NO_REPLY`
/// word at the start or end. `None` when nothing is left to send (this crate's choice
/// between OpenClaw 2.4's edges and 3.x's exact match).
///
/// ```
/// use agent_sessions::context::reply::strip_silence;
///
/// assert_eq!(strip_silence("<NO_REPLY>"), None);
/// assert_eq!(strip_silence("Done. <EMPTY_RESPONSE>").as_deref(), Some("Done."));
/// assert_eq!(strip_silence("NO_REPLY but here is why").as_deref(), Some("but here is why"));
/// assert_eq!(strip_silence("Do not print NO_REPLY_TOKEN").as_deref(), Some("Do not print NO_REPLY_TOKEN"));
/// ```
pub fn strip_silence(text: &str) -> Option<String> {
    let mut rest = text.to_owned();
    for marker in SILENCE_MARKERS {
        rest = rest.replace(marker, " ");
    }
    let mut rest = rest.trim().to_owned();
    loop {
        if let Some(after) = strip_word_prefix(&rest, SILENT_REPLY_TOKEN) {
            rest = after.trim_start().to_owned();
        } else if let Some(before) = strip_word_suffix(&rest, SILENT_REPLY_TOKEN) {
            rest = before.trim_end().to_owned();
        } else {
            break;
        }
    }
    // What is left must say something: stray punctuation (`NO_REPLY.`) is not a reply.
    let tidy = rest.trim();
    let meaningful = tidy
        .chars()
        .any(|c| !c.is_whitespace() && !c.is_ascii_punctuation());
    meaningful.then(|| tidy.to_owned())
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn strip_word_prefix<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(word)?;
    (!rest.starts_with(is_word_char)).then_some(rest)
}

fn strip_word_suffix<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let trimmed = text.trim_end_matches(|c: char| !is_word_char(c) && !c.is_whitespace());
    let before = trimmed.strip_suffix(word)?;
    (!before.ends_with(is_word_char)).then_some(before)
}

/// What [`parse_reply_directives`] found in a model's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyDirectives {
    /// The text without directives.
    pub text: String,
    /// Media from `MEDIA:` lines (outside code fences).
    pub media_urls: Vec<String>,
    /// The message to reply to: the last `[[reply_to: <id>]]`, else the current message
    /// for `[[reply_to_current]]`.
    pub reply_to_id: Option<String>,
    /// Whether `[[reply_to_current]]` was present.
    pub reply_to_current: bool,
    /// Whether `[[audio_as_voice]]` was present.
    pub audio_as_voice: bool,
}

/// Parses OpenClaw's reply directives (`parseReplyDirectives`): `MEDIA: <url-or-path>`
/// lines outside fenced code blocks become media; `[[reply_to_current]]`,
/// `[[reply_to: <id>]]` and `[[audio_as_voice]]` tags are removed and recorded.
pub fn parse_reply_directives(raw: &str, current_message_id: Option<&str>) -> ReplyDirectives {
    let (text, media_urls) = split_media(raw);
    let mut directives = ReplyDirectives {
        media_urls,
        ..ReplyDirectives::default()
    };
    let mut cleaned = String::with_capacity(text.len());
    let mut rest = text.as_str();
    let mut explicit: Option<String> = None;
    let mut had_tag = false;
    while let Some(open) = rest.find("[[") {
        let Some(close) = rest[open..].find("]]") else {
            break;
        };
        let inner = rest[open + 2..open + close].trim();
        let lower = inner.to_lowercase();
        let recognised = if lower == "reply_to_current" {
            directives.reply_to_current = true;
            true
        } else if lower == "audio_as_voice" {
            directives.audio_as_voice = true;
            true
        } else if let Some(id) = lower
            .strip_prefix("reply_to")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix(':'))
        {
            let id = inner[inner.len() - id.len()..].trim();
            if !id.is_empty() && !id.contains('\n') {
                explicit = Some(id.to_owned());
            }
            true
        } else {
            false
        };
        cleaned.push_str(&rest[..open]);
        if recognised {
            had_tag = true;
            cleaned.push(' ');
        } else {
            cleaned.push_str(&rest[open..open + close + 2]);
        }
        rest = &rest[open + close + 2..];
    }
    cleaned.push_str(rest);
    directives.text = if had_tag {
        // Keep line breaks, tidy spaces around them.
        cleaned
            .split('\n')
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_owned()
    } else {
        cleaned.trim().to_owned()
    };
    directives.reply_to_id = explicit.or_else(|| {
        directives
            .reply_to_current
            .then(|| {
                current_message_id
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned)
            })
            .flatten()
    });
    directives
}

/// `MEDIA:` lines (outside code fences) taken out of `raw`.
fn split_media(raw: &str) -> (String, Vec<String>) {
    let mut media = Vec::new();
    let mut kept = Vec::new();
    let mut in_fence = false;
    for line in raw.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            kept.push(line);
            continue;
        }
        let source = (!in_fence)
            .then(|| line.trim().strip_prefix("MEDIA:"))
            .flatten()
            .map(|rest| rest.trim().trim_matches(['`', '<', '>', '"', '\'']).trim())
            .filter(|source| is_media_source(source));
        match source {
            Some(source) => media.push(source.to_owned()),
            None => kept.push(line),
        }
    }
    (kept.join("\n").trim().to_owned(), media)
}

fn is_media_source(source: &str) -> bool {
    let lower = source.to_lowercase();
    !source.is_empty()
        && !source.chars().any(char::is_whitespace)
        && (lower.starts_with("https://")
            || lower.starts_with("http://")
            || ["/", "./", "../", "~"]
                .iter()
                .any(|p| source.starts_with(p)))
}

/// Settings of [`build_reply_payloads`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyOptions {
    /// This is a heartbeat run: `HEARTBEAT_OK` is left for the heartbeat runner.
    pub heartbeat_run: bool,
    /// The triggering message, for `[[reply_to_current]]`.
    pub current_message_id: Option<String>,
    /// Texts the agent already sent through a messaging tool this turn.
    pub sent_by_tool: Vec<String>,
}

/// Turns the model's raw payloads into what is sent: `HEARTBEAT_OK`
/// stripped outside heartbeat runs, directives parsed, silence removed (a payload with
/// media still sends its media), empty payloads dropped, and texts the agent already
/// sent through a messaging tool dropped.
pub fn build_reply_payloads(raw: Vec<ReplyPayload>, options: &ReplyOptions) -> Vec<ReplyPayload> {
    let sent: Vec<String> = options
        .sent_by_tool
        .iter()
        .map(|t| normalize_for_dedupe(t))
        .collect();
    raw.into_iter()
        .filter_map(|mut payload| {
            let mut text = payload.text.take().unwrap_or_default();
            if !options.heartbeat_run && text.contains(HEARTBEAT_TOKEN) {
                let stripped = strip_heartbeat_token(
                    &text,
                    HeartbeatMode::Message,
                    DEFAULT_HEARTBEAT_ACK_MAX_CHARS,
                );
                if stripped.should_skip && payload.media_urls.is_empty() {
                    return None;
                }
                text = stripped.text;
            }
            let directives = parse_reply_directives(&text, options.current_message_id.as_deref());
            payload.media_urls.extend(directives.media_urls);
            payload.reply_to_current |= directives.reply_to_current;
            payload.audio_as_voice |= directives.audio_as_voice;
            payload.reply_to_id = payload.reply_to_id.or(directives.reply_to_id);
            payload.text = strip_silence(&directives.text);
            if payload
                .text
                .as_deref()
                .is_some_and(|t| sent.contains(&normalize_for_dedupe(t)))
            {
                payload.text = None;
            }
            payload.is_renderable().then_some(payload)
        })
        .collect()
}

fn normalize_for_dedupe(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_tokens_follow_openclaw() {
        let message = |raw: &str| strip_heartbeat_token(raw, HeartbeatMode::Message, 300);
        assert_eq!(
            message("HEARTBEAT_OK"),
            HeartbeatStrip {
                should_skip: true,
                text: String::new(),
                did_strip: true
            }
        );
        assert_eq!(
            message("  "),
            HeartbeatStrip {
                should_skip: true,
                text: String::new(),
                did_strip: false
            }
        );
        assert_eq!(message("All good. HEARTBEAT_OK").text, "All good.");
        assert!(message("**HEARTBEAT_OK**").should_skip);
        assert!(message("<b>HEARTBEAT_OK</b>").should_skip);
        let middle = message("before HEARTBEAT_OK after");
        assert_eq!(
            (middle.text.as_str(), middle.did_strip),
            ("before HEARTBEAT_OK after", false)
        );
        let heartbeat =
            strip_heartbeat_token("HEARTBEAT_OK nothing new", HeartbeatMode::Heartbeat, 300);
        assert!(
            heartbeat.should_skip,
            "a short acknowledgement is nothing to say"
        );
        let long = format!("HEARTBEAT_OK {}", "x".repeat(301));
        assert!(!strip_heartbeat_token(&long, HeartbeatMode::Heartbeat, 300).should_skip);
    }

    #[test]
    fn silence_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("<NO_REPLY>", None),
            ("<EMPTY_RESPONSE>", None),
            ("  NO_REPLY  ", None),
            ("NO_REPLY.", None),
            ("Done.\n\nNO_REPLY", Some("Done.")),
            ("ok <NO_REPLY> then", Some("ok   then")),
            ("NO_REPLY_TOKEN is a word", Some("NO_REPLY_TOKEN is a word")),
            ("say NO_REPLY here", Some("say NO_REPLY here")),
            ("hello", Some("hello")),
        ];
        for (text, expected) in cases {
            assert_eq!(strip_silence(text).as_deref(), *expected, "{text:?}");
        }
    }

    #[test]
    fn directives_follow_openclaw() {
        let d = parse_reply_directives(
            "[[reply_to: 123]] Sure [[reply_to_current]]\nline two",
            Some("m-1"),
        );
        assert_eq!(d.reply_to_id.as_deref(), Some("123"), "an explicit id wins");
        assert!(d.reply_to_current);
        assert_eq!(d.text, "Sure\nline two");
        let d = parse_reply_directives(
            "Here:\nMEDIA: `./out/chart.png`\n```\nMEDIA: /not/this\n```\n[[audio_as_voice]]",
            None,
        );
        assert_eq!(d.media_urls, ["./out/chart.png"]);
        assert!(d.audio_as_voice);
        assert!(
            d.text.contains("MEDIA: /not/this"),
            "code fences are left alone"
        );
        let d = parse_reply_directives("[[unknown]] text   spaced", Some("m"));
        assert_eq!(
            (d.text.as_str(), d.reply_to_id),
            ("[[unknown]] text   spaced", None)
        );
        assert_eq!(
            parse_reply_directives("MEDIA: not a url", None).media_urls,
            Vec::<String>::new()
        );
    }

    #[test]
    fn payload_pipeline() {
        let options = ReplyOptions {
            heartbeat_run: false,
            current_message_id: Some("m-9".into()),
            sent_by_tool: vec!["Reminder set for 9am.".into()],
        };
        let raw = vec![
            ReplyPayload::text("HEARTBEAT_OK"),
            ReplyPayload::text("Reminder  set for 9am."),
            ReplyPayload {
                media_urls: vec!["/tmp/a.png".into()],
                ..ReplyPayload::text("NO_REPLY")
            },
            ReplyPayload::text("[[reply_to_current]] Done"),
            ReplyPayload::text("   "),
        ];
        let out = build_reply_payloads(raw, &options);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].text.as_deref(), out[0].media_urls.len()),
            (None, 1),
            "media still sent"
        );
        assert_eq!(out[1].text.as_deref(), Some("Done"));
        assert_eq!(out[1].reply_to_id.as_deref(), Some("m-9"));
        let heartbeat = ReplyOptions {
            heartbeat_run: true,
            ..ReplyOptions::default()
        };
        assert_eq!(
            build_reply_payloads(vec![ReplyPayload::text("HEARTBEAT_OK")], &heartbeat)[0]
                .text
                .as_deref(),
            Some("HEARTBEAT_OK"),
            "left for the heartbeat runner"
        );
    }
}
