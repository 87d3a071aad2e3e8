//! What the bot sends back: reply payloads from the model's output (documented in the parent module).

use serde::{Deserialize, Serialize};

/// The token a heartbeat run answers with when there is nothing to say.
pub(crate) const HEARTBEAT_TOKEN: &str = "HEARTBEAT_OK";
/// The token a model answers with to stay silent (OpenClaw's `SILENT_REPLY_TOKEN`).
pub(crate) const SILENT_REPLY_TOKEN: &str = "NO_REPLY";
/// Silence markers that suppress a reply wherever they appear.
pub(crate) const SILENCE_MARKERS: &[&str] = &["<NO_REPLY>", "<EMPTY_RESPONSE>"];
/// How long a heartbeat acknowledgement may be and still count as "nothing to say".
pub(crate) const DEFAULT_HEARTBEAT_ACK_MAX_CHARS: usize = 300;

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
    /// Where the payload was logged, for reporting its delivery
    /// ([`SessionManager::report_delivery`](crate::SessionManager::report_delivery));
    /// set on the payloads [`Turn::complete`](crate::manager::Turn::complete) returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<crate::exactly_once::DeliveryReceipt>,
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
    pub(crate) fn is_renderable(&self) -> bool {
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
/// (`**HEARTBEAT_OK**`, HTML tags, `&nbsp;`) is looked through, and the emphasis around
/// a stripped token goes with it (OpenClaw leaves a stray `**` in
/// `**HEARTBEAT_OK** all quiet`). In [`HeartbeatMode::Heartbeat`] a remainder of at most
/// `max_ack_chars` characters (Unicode scalar values; OpenClaw counts UTF-16 units) is
/// an acknowledgement, not a message.
///
/// ```
/// use agent_sessions::reply::{strip_heartbeat_token, HeartbeatMode};
///
/// let message = strip_heartbeat_token("All good. **HEARTBEAT_OK**", HeartbeatMode::Message, 300);
/// assert_eq!((message.text.as_str(), message.should_skip), ("All good.", false));
/// let ack = strip_heartbeat_token("HEARTBEAT_OK nothing new", HeartbeatMode::Heartbeat, 300);
/// assert!(ack.should_skip);
/// ```
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
    // A remainder that is only markup (`&nbsp;` of `&nbsp;HEARTBEAT_OK`) is nothing
    // either: then the markup-normalised text decides (OpenClaw sends the `&nbsp;`).
    if !stripped || normalize_markup(&remainder).is_empty() {
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
        // The emphasis glued to a stripped token is its other half (`**HEARTBEAT_OK**`
        // seen through the markup normalisation): it goes too, no stray `**` is sent.
        if let Some(after) = rest.strip_prefix(HEARTBEAT_TOKEN) {
            rest = after
                .trim_start_matches(is_emphasis)
                .trim_start()
                .to_owned();
            stripped = true;
        } else if let Some(before) = rest.strip_suffix(HEARTBEAT_TOKEN) {
            rest = before.trim_end_matches(is_emphasis).trim_end().to_owned();
            stripped = true;
        } else {
            return (rest, stripped);
        }
    }
}

/// Markdown emphasis characters, looked through around `HEARTBEAT_OK`.
fn is_emphasis(c: char) -> bool {
    matches!(c, '*' | '`' | '~' | '_')
}

/// HTML tags (`<…>`) and `&nbsp;` (any case) as spaces; leading and trailing `*`,
/// `` ` ``, `~`, `_` runs removed. A `<` without a closing `>` is text, not a tag.
fn normalize_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push(' ');
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    let out = replace_ignore_ascii_case(&out, "&nbsp;", " ");
    out.trim().trim_matches(is_emphasis).trim().to_owned()
}

/// `text` with every ASCII-case-insensitive occurrence of the ASCII `needle` replaced.
fn replace_ignore_ascii_case(text: &str, needle: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at + needle.len() <= text.len() {
        if text.as_bytes()[at..at + needle.len()].eq_ignore_ascii_case(needle.as_bytes()) {
            // `at` and `at + needle.len()` are char boundaries: the needle is ASCII.
            out.push_str(&text[copied..at]);
            out.push_str(with);
            at += needle.len();
            copied = at;
        } else {
            at += 1;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Removes silence: `<token>`, `<NO_REPLY>` and `<EMPTY_RESPONSE>` anywhere, and a bare
/// `token` word at the start or end. `None` when nothing is left to send (this crate's
/// choice between OpenClaw 2.4's edges and 3.x's exact match). A blank `token` means
/// `NO_REPLY` (OpenClaw lets a host configure its own).
///
/// A bare token is a whitespace-separated word of its own that is the token with at
/// most punctuation or Markdown emphasis around it; that whole word goes, markers
/// included: `**NO_REPLY**`, `_NO_REPLY_`, `` `NO_REPLY` ``, `NO_REPLY.`, `NO_REPLY:`.
/// Glued to other text (`see you.NO_REPLY`, `NO_REPLY.md`, `NO_REPLY_TOKEN`) it is
/// text; a token with a space is never found (bare tokens are found word by word).
pub(crate) fn strip_silence_token(text: &str, token: &str) -> Option<String> {
    let token = match token.trim() {
        "" => SILENT_REPLY_TOKEN,
        token => token,
    };
    let bracketed = format!("<{token}>");
    let mut rest = text.to_owned();
    for marker in SILENCE_MARKERS
        .iter()
        .copied()
        .chain(std::iter::once(bracketed.as_str()))
    {
        rest = remove_marker(&rest, marker);
    }
    let mut rest = rest.trim();
    loop {
        if let Some(after) = strip_leading_token(rest, token) {
            rest = after.trim_start();
        } else if let Some(before) = strip_trailing_token(rest, token) {
            rest = before.trim_end();
        } else {
            break;
        }
    }
    // What is left must say something: stray punctuation is not a reply.
    let meaningful = rest
        .chars()
        .any(|c| !c.is_whitespace() && !c.is_ascii_punctuation());
    meaningful.then(|| rest.to_owned())
}

/// `text` without every `marker`; where one stood between two words, one space stays
/// (`ok <NO_REPLY> then` → `ok then`), and line breaks around it are kept.
fn remove_marker(text: &str, marker: &str) -> String {
    let mut pieces = text.split(marker);
    let mut out = pieces.next().unwrap_or_default().to_owned();
    for piece in pieces {
        let left = out.trim_end_matches([' ', '\t']).len();
        out.truncate(left);
        let right = piece.trim_start_matches([' ', '\t']);
        let joined_by_break =
            out.is_empty() || out.ends_with('\n') || right.is_empty() || right.starts_with('\n');
        if !joined_by_break {
            out.push(' ');
        }
        out.push_str(right);
    }
    out
}

/// Whether `word` (a whitespace-free run) is `token` with nothing but punctuation or
/// emphasis around it: `NO_REPLY`, `**NO_REPLY**`, `_NO_REPLY_`, `NO_REPLY.`, but not
/// `you.NO_REPLY` or `NO_REPLY_TOKEN`.
fn is_bare_token(word: &str, token: &str) -> bool {
    word.match_indices(token).any(|(at, _)| {
        let (before, after) = (&word[..at], &word[at + token.len()..]);
        !before.chars().any(char::is_alphanumeric) && !after.chars().any(char::is_alphanumeric)
    })
}

/// `text` (trimmed) after its first word, when that word is a bare `token`.
fn strip_leading_token<'a>(text: &'a str, token: &str) -> Option<&'a str> {
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    is_bare_token(&text[..end], token).then(|| &text[end..])
}

/// `text` (trimmed) before its last word, when that word is a bare `token`.
fn strip_trailing_token<'a>(text: &'a str, token: &str) -> Option<&'a str> {
    let start = text
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map_or(0, |(at, c)| at + c.len_utf8());
    is_bare_token(&text[start..], token).then(|| &text[..start])
}

/// The reply directives (`[[reply_to_current]]`, `[[reply_to:<id>]]`, …) found in a
/// model's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReplyDirectives {
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
pub(crate) fn parse_reply_directives(
    raw: &str,
    current_message_id: Option<&str>,
) -> ReplyDirectives {
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

/// How a model's outputs become reply payloads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReplyOptions {
    /// This is a heartbeat run: `HEARTBEAT_OK` is left for the heartbeat runner.
    pub heartbeat_run: bool,
    /// The triggering message, for `[[reply_to_current]]`.
    pub current_message_id: Option<String>,
    /// Texts the agent already sent through a messaging tool this turn.
    pub sent_by_tool: Vec<String>,
    /// The host's silence token; `None` (or blank) is `NO_REPLY`.
    pub silent_token: Option<String>,
}

/// Turns the model's raw payloads into what is sent: `HEARTBEAT_OK`
/// stripped outside heartbeat runs, directives parsed, silence removed with
/// [`strip_silence_token`] (a payload with media still sends its media), empty payloads
/// dropped, and texts the agent already sent through a messaging tool dropped.
pub(crate) fn build_reply_payloads(
    raw: Vec<ReplyPayload>,
    options: &ReplyOptions,
) -> Vec<ReplyPayload> {
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
            payload.text = strip_silence_token(
                &directives.text,
                options
                    .silent_token
                    .as_deref()
                    .unwrap_or(SILENT_REPLY_TOKEN),
            );
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

impl ReplyPayload {
    /// The text of what is sent, payload by payload (a blank line between), and where
    /// each payload's text is in it.
    pub(crate) fn sent_text(payloads: &[ReplyPayload]) -> (String, Vec<Option<[usize; 2]>>) {
        let mut sent = String::new();
        let mut parts = Vec::with_capacity(payloads.len());
        for text in payloads
            .iter()
            .map(|p| p.text.as_deref().unwrap_or_default())
        {
            if text.trim().is_empty() {
                parts.push(None);
                continue;
            }
            if !sent.is_empty() {
                sent.push_str("\n\n");
            }
            parts.push(Some([sent.len(), sent.len() + text.len()]));
            sent.push_str(text);
        }
        (sent, parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How a reply is produced in a row of [`what_is_sent`].
    #[derive(Debug, Clone, Copy)]
    enum Run {
        /// An ordinary turn: [`build_reply_payloads`] with the default options.
        Message,
        /// A heartbeat run: [`strip_heartbeat_token`] in heartbeat mode (ack limit 300),
        /// then [`build_reply_payloads`] for a heartbeat run.
        Heartbeat,
        /// An ordinary turn with the host's silence token `SKIP`.
        Token(&'static str),
    }

    fn sent(run: Run, raw: &str) -> Option<String> {
        let (text, options) = match run {
            Run::Message => (raw.to_owned(), ReplyOptions::default()),
            Run::Token(token) => (
                raw.to_owned(),
                ReplyOptions {
                    silent_token: Some(token.into()),
                    ..ReplyOptions::default()
                },
            ),
            Run::Heartbeat => {
                let stripped = strip_heartbeat_token(
                    raw,
                    HeartbeatMode::Heartbeat,
                    DEFAULT_HEARTBEAT_ACK_MAX_CHARS,
                );
                if stripped.should_skip {
                    return None;
                }
                let options = ReplyOptions {
                    heartbeat_run: true,
                    ..ReplyOptions::default()
                };
                (stripped.text, options)
            }
        };
        let mut out = build_reply_payloads(vec![ReplyPayload::text(text)], &options);
        assert!(out.len() <= 1, "one payload in, at most one out");
        out.pop().and_then(|payload| payload.text)
    }

    /// The whole silence and heartbeat rule set: model output → the text sent, or
    /// `None` when nothing is sent.
    #[test]
    fn what_is_sent() {
        use Run::{Heartbeat, Message, Token};
        let long_ack = format!("HEARTBEAT_OK {}", "x".repeat(301));
        let ack_300 = format!("HEARTBEAT_OK {}", "é".repeat(300));
        let cases: Vec<(Run, &str, Option<&str>)> = vec![
            // Silence markers go wherever they are.
            (Message, "<NO_REPLY>", None),
            (Message, "<EMPTY_RESPONSE>", None),
            (Message, "<NO_REPLY> <EMPTY_RESPONSE>", None),
            (Message, "Done. <EMPTY_RESPONSE>", Some("Done.")),
            (Message, "ok <NO_REPLY> then", Some("ok then")),
            (Message, "ok<NO_REPLY>then", Some("ok then")),
            (
                Message,
                "first\n<NO_REPLY>\nsecond",
                Some("first\n\nsecond"),
            ),
            // A bare NO_REPLY at either end; the rest is sent.
            (Message, "NO_REPLY", None),
            (Message, "  NO_REPLY  ", None),
            (Message, "NO_REPLY.", None),
            (Message, "NO_REPLY NO_REPLY", None),
            (Message, "Done.\n\nNO_REPLY", Some("Done.")),
            (Message, "Done. NO_REPLY.", Some("Done.")),
            (Message, "NO_REPLY but here is why", Some("but here is why")),
            (Message, "NO_REPLY: only thanks", Some("only thanks")),
            (Message, "**NO_REPLY** Done. NO_REPLY", Some("Done.")),
            // Emphasis goes with the token, no stray markers.
            (Message, "**NO_REPLY**", None),
            (Message, "_NO_REPLY_", None),
            (Message, "`NO_REPLY`", None),
            (Message, "~~NO_REPLY~~", None),
            (Message, "***NO_REPLY***.", None),
            (Message, "**NO_REPLY", None),
            (Message, "Done. **NO_REPLY**", Some("Done.")),
            (Message, "Done. _NO_REPLY_", Some("Done.")),
            (Message, "Done.\n*NO_REPLY*", Some("Done.")),
            (
                Message,
                "**NO_REPLY** (nothing to add)",
                Some("(nothing to add)"),
            ),
            // Glued to other text, or inside it: text.
            (Message, "see you.NO_REPLY", Some("see you.NO_REPLY")),
            (Message, "see you,NO_REPLY", Some("see you,NO_REPLY")),
            (Message, "Done.**NO_REPLY**", Some("Done.**NO_REPLY**")),
            (
                Message,
                "NO_REPLY.md is the file",
                Some("NO_REPLY.md is the file"),
            ),
            (
                Message,
                "NO_REPLY_TOKEN is a word",
                Some("NO_REPLY_TOKEN is a word"),
            ),
            (
                Message,
                "Do not print NO_REPLY_TOKEN",
                Some("Do not print NO_REPLY_TOKEN"),
            ),
            (Message, "say NO_REPLY here", Some("say NO_REPLY here")),
            (Message, "hello", Some("hello")),
            (Message, "   ", None),
            // A host's own token: bare at the ends, or bracketed anywhere.
            (Token("SKIP"), "SKIP", None),
            (Token("SKIP"), "**SKIP**", None),
            (Token("SKIP"), "Done. SKIP", Some("Done.")),
            (Token("SKIP"), "ok <SKIP> then", Some("ok then")),
            (Token("SKIP"), "<NO_REPLY>", None),
            (Token("SKIP"), "NO_REPLY", Some("NO_REPLY")),
            (Token("SKIP"), "SKIPPED it", Some("SKIPPED it")),
            (Token("  "), "NO_REPLY", None),
            // HEARTBEAT_OK outside heartbeat runs: stripped from the edges only.
            (Message, "HEARTBEAT_OK", None),
            (Message, "HEARTBEAT_OK HEARTBEAT_OK", None),
            (Message, "All good. HEARTBEAT_OK", Some("All good.")),
            (Message, "HEARTBEAT_OK All good.", Some("All good.")),
            (Message, "HEARTBEAT_OK   two\n\nlines", Some("two lines")),
            (
                Message,
                "before HEARTBEAT_OK after",
                Some("before HEARTBEAT_OK after"),
            ),
            // Markup around it is looked through: Markdown, HTML, &nbsp;.
            (Message, "**HEARTBEAT_OK**", None),
            (Message, "`HEARTBEAT_OK`", None),
            (Message, "~HEARTBEAT_OK~", None),
            (Message, "<b>HEARTBEAT_OK</b>", None),
            (Message, "&nbsp;HEARTBEAT_OK&nbsp;", None),
            (Message, "&NBSP;HEARTBEAT_OK", None),
            (Message, "<br>HEARTBEAT_OK", None),
            (Message, "<p>HEARTBEAT_OK</p> all quiet", Some("all quiet")),
            (Message, "**HEARTBEAT_OK** 3 < 5", Some("3 < 5")),
            (Message, "**HEARTBEAT_OK** all quiet", Some("all quiet")),
            (Message, "all quiet **HEARTBEAT_OK**", Some("all quiet")),
            // Both tokens in one reply.
            (Message, "HEARTBEAT_OK NO_REPLY", None),
            (Message, "HEARTBEAT_OK Done. NO_REPLY", Some("Done.")),
            // Heartbeat runs: a short acknowledgement (≤ 300 characters) is nothing.
            (Heartbeat, "HEARTBEAT_OK", None),
            (Heartbeat, "HEARTBEAT_OK nothing new", None),
            (Heartbeat, "<b>HEARTBEAT_OK</b> nothing new", None),
            (Heartbeat, &ack_300, None),
            (
                Heartbeat,
                &long_ack,
                Some(&long_ack["HEARTBEAT_OK ".len()..]),
            ),
            (
                Heartbeat,
                "Reminder: call Bob at 5.",
                Some("Reminder: call Bob at 5."),
            ),
            (
                Heartbeat,
                "before HEARTBEAT_OK after",
                Some("before HEARTBEAT_OK after"),
            ),
            (Heartbeat, "NO_REPLY", None),
            (Heartbeat, "  ", None),
        ];
        for (run, raw, expected) in cases {
            assert_eq!(sent(run, raw).as_deref(), expected, "{run:?} {raw:?}");
        }
    }

    #[test]
    fn heartbeat_strip_reports_what_it_did() {
        let message = |raw: &str| strip_heartbeat_token(raw, HeartbeatMode::Message, 300);
        let cases: &[(&str, bool, &str, bool)] = &[
            // raw → (should_skip, text, did_strip)
            ("HEARTBEAT_OK", true, "", true),
            ("  ", true, "", false),
            ("hello", false, "hello", false),
            ("All good. HEARTBEAT_OK", false, "All good.", true),
            (
                "before HEARTBEAT_OK after",
                false,
                "before HEARTBEAT_OK after",
                false,
            ),
        ];
        for &(raw, should_skip, text, did_strip) in cases {
            assert_eq!(
                message(raw),
                HeartbeatStrip {
                    should_skip,
                    text: text.into(),
                    did_strip
                },
                "{raw:?}"
            );
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
            silent_token: None,
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

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn strip_silence() {
        use crate::reply::payload::{strip_silence_token, SILENT_REPLY_TOKEN};
        let strip_silence = |text| strip_silence_token(text, SILENT_REPLY_TOKEN);

        assert_eq!(strip_silence("<NO_REPLY>"), None);
        assert_eq!(strip_silence("**NO_REPLY**"), None);
        assert_eq!(
            strip_silence("Done. <EMPTY_RESPONSE>").as_deref(),
            Some("Done.")
        );
        assert_eq!(
            strip_silence("Done. **NO_REPLY**").as_deref(),
            Some("Done.")
        );
        assert_eq!(
            strip_silence("NO_REPLY but here is why").as_deref(),
            Some("but here is why")
        );
        assert_eq!(
            strip_silence("see you.NO_REPLY").as_deref(),
            Some("see you.NO_REPLY")
        );
        assert_eq!(
            strip_silence("Do not print NO_REPLY_TOKEN").as_deref(),
            Some("Do not print NO_REPLY_TOKEN")
        );
    }

    #[test]
    fn strip_silence_token() {
        use crate::reply::payload::strip_silence_token;

        assert_eq!(strip_silence_token("SKIP", "SKIP"), None);
        assert_eq!(
            strip_silence_token("ok <SKIP> then", "SKIP").as_deref(),
            Some("ok then")
        );
        assert_eq!(
            strip_silence_token("NO_REPLY", "SKIP").as_deref(),
            Some("NO_REPLY")
        );
        assert_eq!(strip_silence_token("<NO_REPLY>", "SKIP"), None);
    }

    #[test]
    fn reply_payloads_follow_directives_and_silence() {
        use crate::reply::payload::{build_reply_payloads, ReplyOptions, ReplyPayload};

        let raw = vec![ReplyPayload::text(
            "[[reply_to_current]] Done!\nMEDIA: https://cdn.example.com/report.pdf",
        )];
        let options = ReplyOptions {
            current_message_id: Some("m-42".into()),
            ..ReplyOptions::default()
        };
        let payloads = build_reply_payloads(raw, &options);
        assert_eq!(payloads[0].text.as_deref(), Some("Done!"));
        assert_eq!(payloads[0].reply_to_id.as_deref(), Some("m-42"));
        assert_eq!(
            payloads[0].media_urls,
            ["https://cdn.example.com/report.pdf"]
        );

        // Silence: nothing is sent.
        assert!(build_reply_payloads(vec![ReplyPayload::text("<NO_REPLY>")], &options).is_empty());
    }
}
