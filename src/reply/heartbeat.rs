//! Heartbeats: the periodic turn in which the agent reads `HEARTBEAT.md` and either acts (documented in the parent module).

/// OpenClaw's default heartbeat prompt (`HEARTBEAT_PROMPT`), sent as the message of a
/// heartbeat run when the host configures none.
pub const HEARTBEAT_PROMPT: &str = "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK.";

/// Whether a `HEARTBEAT.md` holds no task, so the host can skip the heartbeat run and
/// its model call (OpenClaw's `isHeartbeatContentEffectivelyEmpty`).
///
/// Empty means every line is, once HTML comments (`<!-- … -->`, also across lines) are
/// removed and the line is trimmed, one of:
///
/// * blank;
/// * a Markdown heading: `#` characters followed by whitespace or nothing (`# Tasks`,
///   `##`; but `#TODO` and `#hashtag` are content);
/// * an empty list item: `-`, `*` or `+`, optionally with an empty or ticked checkbox
///   (`- `, `* [ ]`, `+ [x]`), and nothing after it.
///
/// A file that does not exist is not "empty": OpenClaw still runs the heartbeat then, so
/// the model can decide; only call this with the content of a file that exists, or
/// give the file to [`is_heartbeat_file_effectively_empty`], which says so.
///
/// ```
/// use agent_sessions::reply::is_heartbeat_content_effectively_empty;
///
/// assert!(is_heartbeat_content_effectively_empty("## Daily\n\n* [ ]\n"));
/// assert!(!is_heartbeat_content_effectively_empty("#TODO water the plants"));
/// assert!(!is_heartbeat_content_effectively_empty("<!-- never closed\ndo the thing"));
/// ```
pub fn is_heartbeat_content_effectively_empty(content: &str) -> bool {
    let mut in_comment = false;
    let lines_empty = content.split('\n').all(|line| {
        let visible = strip_html_comments(line, &mut in_comment);
        let line = visible.trim();
        line.is_empty() || is_heading(line) || is_empty_list_item(line)
    });
    // A `<!--` never closed is not a comment (OpenClaw removes only closed ones): what
    // follows it may be a task, so the heartbeat runs.
    lines_empty && !in_comment
}

/// The most of a `HEARTBEAT.md` [`is_heartbeat_file_effectively_empty`] reads (1 MiB).
pub const MAX_HEARTBEAT_FILE_BYTES: u64 = 1 << 20;

/// Whether the heartbeat file at `path` holds no task
/// ([`is_heartbeat_content_effectively_empty`] of its text), for a host that skips the
/// heartbeat run then. A file that does not exist is **not** empty: OpenClaw runs the
/// heartbeat when `HEARTBEAT.md` is absent, and so should the host (`Ok(false)`).
///
/// Only a regular file is read, and no link is followed; anything else (a directory, a
/// FIFO, a link) is [`Error::NotAFile`](crate::Error::NotAFile), a file over
/// [`MAX_HEARTBEAT_FILE_BYTES`] is [`Error::FileTooLarge`](crate::Error::FileTooLarge),
/// and other I/O failures are [`Error::Io`](crate::Error::Io) — the host decides
/// whether to run. Bytes that are not UTF-8 are read as replacement characters (they
/// are content).
///
/// ```
/// use agent_sessions::reply::is_heartbeat_file_effectively_empty;
///
/// let workspace = tempfile::tempdir()?;
/// let file = workspace.path().join("HEARTBEAT.md");
/// assert!(!is_heartbeat_file_effectively_empty(&file)?, "absent: run the heartbeat");
/// std::fs::write(&file, "# Heartbeat\n\n- [ ]\n")?;
/// assert!(is_heartbeat_file_effectively_empty(&file)?, "the template: skip it");
/// std::fs::write(&file, "- [ ] check the backups\n")?;
/// assert!(!is_heartbeat_file_effectively_empty(&file)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn is_heartbeat_file_effectively_empty(path: &std::path::Path) -> crate::Result<bool> {
    match crate::store::fs::read_limited(path, MAX_HEARTBEAT_FILE_BYTES) {
        Ok(Some((bytes, _))) => Ok(is_heartbeat_content_effectively_empty(
            &String::from_utf8_lossy(&bytes),
        )),
        Ok(None) => Ok(false),
        Err(error) => Err(crate::Error::io("read", path, error)),
    }
}

/// `line` without HTML comments; `in_comment` carries an open `<!--` to the next line.
fn strip_html_comments(line: &str, in_comment: &mut bool) -> String {
    let mut out = String::new();
    let mut rest = line;
    loop {
        if *in_comment {
            match rest.find("-->") {
                Some(end) => {
                    *in_comment = false;
                    rest = &rest[end + 3..];
                }
                None => return out,
            }
        }
        match rest.find("<!--") {
            Some(start) => {
                out.push_str(&rest[..start]);
                rest = &rest[start + 4..];
                *in_comment = true;
            }
            None => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// `#+` followed by whitespace or the end (an ATX heading).
fn is_heading(line: &str) -> bool {
    let after = line.trim_start_matches('#');
    after.len() < line.len() && (after.is_empty() || after.starts_with(char::is_whitespace))
}

/// `[-*+]`, optional whitespace, an optional `[ ]`, `[x]`, `[X]` or `[]`, and nothing else.
fn is_empty_list_item(line: &str) -> bool {
    let Some(after_marker) = line.strip_prefix(['-', '*', '+']) else {
        return false;
    };
    let rest = after_marker.trim_start();
    let Some(inside) = rest.strip_prefix('[') else {
        return rest.is_empty();
    };
    let mut chars = inside.chars();
    let after_box = match chars.next() {
        Some(']') => chars.as_str(),
        Some(c) if c.is_whitespace() || c == 'x' || c == 'X' => match chars.next() {
            Some(']') => chars.as_str(),
            _ => return false,
        },
        _ => return false,
    };
    after_box.trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effectively_empty_heartbeat_files() {
        let cases: &[(&str, bool)] = &[
            // Nothing to do: skip the run.
            ("", true),
            ("   \n\t\n", true),
            ("# HEARTBEAT.md", true),
            ("# only header\n\n## subheader\n", true),
            ("#", true),
            ("###\t", true),
            ("-", true),
            ("- ", true),
            ("* [ ]", true),
            ("- [x]\n- [X]\n+ []\n* [\t]", true),
            ("-[ ]", true),
            ("<!-- keep this file empty to skip heartbeats -->", true),
            ("# Tasks\n<!--\nmulti-line\ncomment\n-->\n- [ ]", true),
            ("<!-- a --> <!-- b -->", true),
            ("<!-- unclosed comment\nstill inside", false), // not a comment: may be a task
            ("\r\n# Tasks\r\n- [ ]\r\n", true),
            // Something to do: run.
            ("Check the build", false),
            ("#TODO water the plants", false),
            ("#hashtag", false),
            ("- [ ] Check email", false),
            ("* [x] done thing", false),
            ("- [y]", false),
            ("- [  ]", false),
            ("-- ", false),
            ("1. ", false),
            ("# Tasks\n<!-- note --> call Bob", false),
            ("<!-- a -->\nreal task\n<!-- b -->", false),
            ("--> stray closer", false),
        ];
        for (content, expected) in cases {
            assert_eq!(
                is_heartbeat_content_effectively_empty(content),
                *expected,
                "{content:?}"
            );
        }
    }
}
