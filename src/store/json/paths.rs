//! Where OpenClaw keeps things, and safe file names for ids.
//!
//! ```text
//! <stateDir>/agents/<agentId>/sessions/sessions.json
//! <stateDir>/agents/<agentId>/sessions/<sessionId>.jsonl
//! <stateDir>/agents/<agentId>/sessions/<sessionId>-topic-<topicId>.jsonl
//! ```
//!
//! Nothing a remote user sends reaches a path unchecked: agent ids are restricted to
//! `[a-z0-9_-]` by [`AgentId`], session ids must be 1–128 bytes of `[A-Za-z0-9._-]` not starting with `.`, topic
//! ids are percent-encoded by [`encode_file_component`] (reversibly, so two ids never
//! share a file), and a stored `sessionFile` must lie inside the agent's sessions
//! directory.
//!
//! ```
//! use std::path::Path;
//! use agent_sessions::store::{store_path, transcript_path};
//! use agent_sessions::AgentId;
//!
//! let root = Path::new("/home/u/.openclaw");
//! let main = AgentId::main();
//! assert_eq!(
//!     store_path(root, &main),
//!     Path::new("/home/u/.openclaw/agents/main/sessions/sessions.json")
//! );
//! assert_eq!(
//!     transcript_path(root, &main, "0f5d59ee", Some("a/b"))?,
//!     Path::new("/home/u/.openclaw/agents/main/sessions/0f5d59ee-topic-a%2Fb.jsonl")
//! );
//! assert!(transcript_path(root, &main, "../../etc/passwd", None).is_err());
//! # Ok::<(), agent_sessions::Error>(())
//! ```

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, IdKind, Result};
use crate::identity::key::AgentId;
use crate::store::entry::SessionEntry;

/// The name of an agent's store file.
pub(crate) const STORE_FILE_NAME: &str = "sessions.json";

/// The longest session id accepted in a file name, in bytes.
pub(crate) const MAX_SESSION_ID_LEN: usize = 128;

/// The user's home directory (`$HOME`, or the platform's notion of it).
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
}

/// `path` as a state directory the stores keep: `~` expanded and made absolute
/// (against the working directory; symlinks are not resolved), so every location a
/// store records — an entry's `sessionFile` — is absolute whatever directory the
/// process runs in.
pub(crate) fn state_root(path: &Path) -> PathBuf {
    let expanded = expand_home(path);
    std::path::absolute(&expanded).unwrap_or(expanded)
}

/// Expands a leading `~` (alone, or followed by a separator) to the home directory.
///
/// ```
/// use std::path::Path;
/// use agent_sessions::store::expand_home;
///
/// assert_eq!(expand_home(Path::new("/srv/bot")), Path::new("/srv/bot"));
/// assert_eq!(expand_home(Path::new("~user/x")), Path::new("~user/x"));
/// ```
pub fn expand_home(path: &Path) -> PathBuf {
    expand_home_with(path, home_dir().as_deref())
}

fn expand_home_with(path: &Path, home: Option<&Path>) -> PathBuf {
    let Some(home) = home else {
        return path.to_owned();
    };
    let text = path.to_string_lossy();
    if text == "~" {
        return home.to_owned();
    }
    match text.strip_prefix("~/").or_else(|| text.strip_prefix("~\\")) {
        Some(rest) => home.join(rest),
        None => path.to_owned(),
    }
}

/// OpenClaw's state directory, resolved as OpenClaw resolves it.
///
/// `OPENCLAW_STATE_DIR`, else `CLAWDBOT_STATE_DIR` (trimmed, `~` expanded); else
/// `~/.openclaw` if it exists; else the first existing legacy directory of
/// `~/.clawdbot`, `~/.moltbot`, `~/.moldbot`; else `~/.openclaw`.
pub fn openclaw_state_dir() -> PathBuf {
    resolve_state_dir(
        |name| std::env::var(name).ok(),
        home_dir().as_deref(),
        |path| path.is_dir(),
    )
}

/// [`openclaw_state_dir`] with its environment, home and file system passed in.
pub(crate) fn resolve_state_dir(
    env: impl Fn(&str) -> Option<String>,
    home: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
) -> PathBuf {
    for name in ["OPENCLAW_STATE_DIR", "CLAWDBOT_STATE_DIR"] {
        if let Some(value) = env(name) {
            let trimmed = value.trim();
            if !trimmed.is_empty() {
                return expand_home_with(Path::new(trimmed), home);
            }
        }
    }
    let home = home.map(Path::to_owned).unwrap_or_default();
    let preferred = home.join(".openclaw");
    if exists(&preferred) {
        return preferred;
    }
    [".clawdbot", ".moltbot", ".moldbot"]
        .iter()
        .map(|legacy| home.join(legacy))
        .find(|legacy| exists(legacy))
        .unwrap_or(preferred)
}

/// `<stateDir>/agents/<agentId>/sessions`.
pub fn sessions_dir(state_dir: &Path, agent: &AgentId) -> PathBuf {
    state_dir
        .join("agents")
        .join(agent.as_str())
        .join("sessions")
}

/// `<stateDir>/agents/<agentId>/sessions/sessions.json`.
pub fn store_path(state_dir: &Path, agent: &AgentId) -> PathBuf {
    sessions_dir(state_dir, agent).join(STORE_FILE_NAME)
}

/// Checks that a session id can name a file: 1–128 bytes of `[A-Za-z0-9._-]`, not
/// starting with `.`.
pub(crate) fn validate_session_id(session_id: &str) -> Result<()> {
    let bytes = session_id.as_bytes();
    let problem = if bytes.is_empty() {
        Some("the session id is empty")
    } else if bytes.len() > MAX_SESSION_ID_LEN {
        Some("the session id is longer than 128 bytes")
    } else if bytes[0] == b'.' {
        Some("a session id may not start with `.`")
    } else if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("a session id is made of [A-Za-z0-9._-]")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::invalid_id(IdKind::SessionId, session_id, problem)),
        None => Ok(()),
    }
}

/// The longest live transcript name: archiving adds at most this much
/// (`.deleted.<timestamp>-nn`) and a name stays within 255 bytes.
const MAX_LIVE_TRANSCRIPT_NAME: usize = 255 - 36;

/// The transcript file name `<sessionId>.jsonl` or `<sessionId>-topic-<topicId>.jsonl`,
/// with the topic id percent-encoded as OpenClaw's `encodeURIComponent` does. A topic
/// too long for a file name (even once archived) is shortened as [`file_name_for`]
/// shortens ids: the first part of its encoding, `%~` and a name-based UUID of it.
pub(crate) fn transcript_file_name(session_id: &str, topic_id: Option<&str>) -> Result<String> {
    validate_session_id(session_id)?;
    Ok(match topic_id {
        Some(topic) => {
            let room = MAX_LIVE_TRANSCRIPT_NAME - "-topic-.jsonl".len() - session_id.len();
            let encoded = encode_file_component(topic);
            let topic = if encoded.len() <= room {
                encoded
            } else {
                shortened(topic, &encoded, room - SHORTENING_SUFFIX)
            };
            format!("{session_id}-topic-{topic}.jsonl")
        }
        None => format!("{session_id}.jsonl"),
    })
}

/// `<stateDir>/agents/<agentId>/sessions/<transcript_file_name>`.
pub fn transcript_path(
    state_dir: &Path,
    agent: &AgentId,
    session_id: &str,
    topic_id: Option<&str>,
) -> Result<PathBuf> {
    // One allocation: every append builds this path.
    let capacity = state_dir.as_os_str().len() + agent.as_str().len() + session_id.len() + 32;
    let mut path = PathBuf::with_capacity(capacity);
    path.push(state_dir);
    path.push("agents");
    path.push(agent.as_str());
    path.push("sessions");
    match topic_id {
        None => {
            validate_session_id(session_id)?;
            path.push(session_id);
            path.as_mut_os_string().push(".jsonl");
        }
        Some(_) => path.push(transcript_file_name(session_id, topic_id)?),
    }
    Ok(path)
}

/// The transcript of `entry`: its `sessionFile` if set, else the default transcript
/// path. A `sessionFile` must be an absolute path inside the agent's sessions directory
/// (following symlinks), or [`Error::InvalidId`] names it.
pub fn session_file(
    state_dir: &Path,
    agent: &AgentId,
    entry: &SessionEntry,
    topic_id: Option<&str>,
) -> Result<PathBuf> {
    match entry
        .session_file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        Some(file) => checked_session_file(state_dir, agent, file),
        None => transcript_path(state_dir, agent, &entry.session_id, topic_id),
    }
}

/// `file` as a path, if it is absolute and inside the agent's sessions directory
/// (following symlinks), else [`Error::InvalidId`].
pub(crate) fn checked_session_file(
    state_dir: &Path,
    agent: &AgentId,
    file: &str,
) -> Result<PathBuf> {
    let path = lexical_session_file(state_dir, agent, file)?;
    let dir = sessions_dir(state_dir, agent);
    let resolves_inside = match (path.canonicalize(), dir.canonicalize()) {
        (Ok(real), Ok(real_dir)) => real.starts_with(real_dir),
        // Not created yet: the lexical check is all there is to check.
        _ => true,
    };
    if resolves_inside {
        Ok(path)
    } else {
        Err(outside_sessions_dir(file))
    }
}

/// [`checked_session_file`] without resolving links: `file` as a path if it is
/// absolute and, as written, inside the agent's sessions directory — or, when it names
/// the file in the agent's sessions directory of a state directory that has moved
/// since (`<elsewhere>/agents/<agent>/sessions/<file>`), this tree's file of that name.
pub(crate) fn lexical_session_file(
    state_dir: &Path,
    agent: &AgentId,
    file: &str,
) -> Result<PathBuf> {
    let dir = sessions_dir(state_dir, agent);
    let path = Path::new(file);
    let lexically_inside = path.is_absolute()
        && path.starts_with(&dir)
        && !path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir));
    if lexically_inside {
        return Ok(path.to_owned());
    }
    // A state directory moved or copied elsewhere (a restore, a new disk): the entry
    // still names the file where the tree was, `<old root>/agents/<agent>/sessions/<file>`.
    // That file is this tree's file of the same name.
    let mut parts = path.components().rev();
    let moved = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (
            Some(Component::Normal(name)),
            Some(Component::Normal(sessions)),
            Some(Component::Normal(named_agent)),
            Some(Component::Normal(agents)),
        ) if path.is_absolute()
            && sessions == "sessions"
            && agents == "agents"
            && named_agent.to_str() == Some(agent.as_str())
            && !path
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir)) =>
        {
            Some(dir.join(name))
        }
        _ => None,
    };
    moved.ok_or_else(|| outside_sessions_dir(file))
}

fn outside_sessions_dir(file: &str) -> Error {
    Error::invalid_id(
        IdKind::SessionFile,
        file,
        "a session file must be inside the agent's sessions directory",
    )
}

/// Percent-encodes `id` as JavaScript's `encodeURIComponent` does: everything but
/// `A-Z a-z 0-9 - _ . ! ~ * ' ( )` becomes `%XX` (UTF-8 bytes, upper-case hex).
///
/// The encoding is injective (`%` itself is encoded), so distinct ids give distinct
/// names, and the result never contains a path separator.
pub fn encode_file_component(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The longest encoded id [`file_name_for`] uses as it is (with an extension and a
/// `.corrupt` suffix a name stays under 255 bytes, the usual file system limit).
const MAX_PLAIN_FILE_NAME: usize = 200;
/// How much of a longer encoded id [`file_name_for`] keeps, before its UUID.
const KEPT_FILE_NAME_PREFIX: usize = 120;

/// A file name (without extension) for `id`, distinct for distinct ids: the id
/// [encoded](encode_file_component) when that fits a file name, else the first part of
/// the encoding, `%~` and a name-based UUID of the whole id. An encoding has every `%`
/// followed by two hex digits, so no id's plain name is another id's shortened one.
pub(crate) fn file_name_for(id: &str) -> String {
    let encoded = encode_file_component(id);
    if encoded.len() <= MAX_PLAIN_FILE_NAME {
        return encoded;
    }
    shortened(id, &encoded, KEPT_FILE_NAME_PREFIX)
}

/// How much [`shortened`] adds to what it keeps: `%~` and a simple UUID.
const SHORTENING_SUFFIX: usize = 2 + 32;

/// The first `keep` bytes of `encoded` (the encoding of `id`), `%~` and a name-based
/// UUID of `id`.
fn shortened(id: &str, encoded: &str, keep: usize) -> String {
    let digest = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, id.as_bytes());
    // The encoding is ASCII: any byte is a character boundary.
    format!(
        "{}%~{}",
        &encoded[..keep.min(encoded.len())],
        digest.simple()
    )
}

/// Reverses [`encode_file_component`].
pub fn decode_file_component(encoded: &str) -> Result<String> {
    let bad = || Error::invalid_id(IdKind::FileComponent, encoded, "not a percent-encoded id");
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = encoded.get(index + 1..index + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_name_fits_a_file_name_whatever_the_topic() {
        let sid = "0d4f1c2e-2b9a-4c61-9e3f-8a8e4c1b7d20";
        assert_eq!(
            transcript_file_name(sid, Some("1700.42")).unwrap(),
            format!("{sid}-topic-1700.42.jsonl")
        );
        let longest_sid = "s".repeat(MAX_SESSION_ID_LEN);
        for topic in ["x".repeat(1_000), "é".repeat(500), "x".repeat(171)] {
            for session_id in [sid, longest_sid.as_str()] {
                let name = transcript_file_name(session_id, Some(&topic)).unwrap();
                assert!(name.len() <= MAX_LIVE_TRANSCRIPT_NAME, "{name}");
                let archived = format!("{name}.deleted.2026-11-27T21-51-55.123Z-99");
                assert!(archived.len() <= 255, "{archived}");
                crate::transcript::lines::validate_transcript_name(&archived).unwrap();
            }
        }
        // Two long topics that share their first part are two transcripts.
        let (a, b) = ("x".repeat(400) + "a", "x".repeat(400) + "b");
        assert_ne!(
            transcript_file_name(sid, Some(&a)).unwrap(),
            transcript_file_name(sid, Some(&b)).unwrap()
        );
    }

    #[test]
    fn ids_spelled_like_a_shortened_name_get_names_of_their_own() {
        let long = format!("whatsapp:default:group:{}", "x".repeat(300));
        let short = file_name_for(&long);
        assert!(short.contains("%~"), "{short}");
        // The id an attacker would pick: one whose plain name is the shortened name,
        // spelled with or without the marker (the first cannot be decoded at all).
        assert!(decode_file_component(&short).is_err());
        let spelled = decode_file_component(&short.replace("%~", "~")).unwrap();
        assert!(
            encode_file_component(&spelled).len() <= MAX_PLAIN_FILE_NAME,
            "kept plain"
        );
        assert_eq!(file_name_for(&spelled), short.replace("%~", "~"));
        assert_ne!(file_name_for(&spelled), short);
        // Cut inside a `%XX` escape, the shortened name is still no plain name.
        let escaped = "é".repeat(100);
        let short = file_name_for(&escaped);
        assert!(decode_file_component(&short).is_err(), "{short}");
    }

    #[test]
    fn home_expansion() {
        let home = Path::new("/home/u");
        for (input, expected) in [
            ("~", "/home/u"),
            ("~/x/y", "/home/u/x/y"),
            ("~\\x", "/home/u/x"),
            ("~user", "~user"),
            ("/abs", "/abs"),
            ("rel/~", "rel/~"),
        ] {
            assert_eq!(
                expand_home_with(Path::new(input), Some(home)),
                Path::new(expected),
                "{input}"
            );
        }
    }

    #[test]
    fn state_dir_resolution_order() {
        let home = Path::new("/h");
        let none = |_: &str| None;
        assert_eq!(
            resolve_state_dir(none, Some(home), |_| false),
            Path::new("/h/.openclaw")
        );
        assert_eq!(
            resolve_state_dir(none, Some(home), |p| p.ends_with(".moltbot")),
            Path::new("/h/.moltbot")
        );
        assert_eq!(
            resolve_state_dir(none, Some(home), |p| p.ends_with(".moltbot")
                || p.ends_with(".openclaw")),
            Path::new("/h/.openclaw")
        );
        let env = |name: &str| (name == "CLAWDBOT_STATE_DIR").then(|| " ~/state ".to_owned());
        assert_eq!(
            resolve_state_dir(env, Some(home), |_| true),
            Path::new("/h/state")
        );
    }

    #[test]
    fn unsafe_session_ids_are_rejected() {
        for bad in [
            "",
            "../x",
            "a/b",
            "a\\b",
            "/abs",
            ".hidden",
            "a b",
            "a\0b",
            &"x".repeat(129),
        ] {
            assert!(validate_session_id(bad).is_err(), "{bad:?}");
        }
        for good in [
            "0f5d59ee-034e-47d9-ac97-d383e6c022b8",
            "2026-02-06T10-00-00-000Z_0f5d59ee",
            "a.b",
        ] {
            assert!(validate_session_id(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn topic_encoding_is_reversible_and_separator_free() {
        let ids = [
            "42", "a/b", "..", "%2F", "a b", "ü", "x\\y", "(*)!~'", "1700.123",
        ];
        let mut names = std::collections::HashSet::new();
        for id in ids {
            let encoded = encode_file_component(id);
            assert!(
                !encoded.contains('/') && !encoded.contains('\\'),
                "{encoded}"
            );
            assert_eq!(decode_file_component(&encoded).unwrap(), id);
            assert!(names.insert(encoded), "collision for {id:?}");
        }
        assert_eq!(encode_file_component("a/b c"), "a%2Fb%20c");
        assert!(decode_file_component("%zz").is_err());
        assert!(decode_file_component("%4").is_err());
    }

    #[test]
    fn session_file_must_stay_inside_the_sessions_dir() {
        let dir = tempfile::tempdir().unwrap();
        let main = AgentId::main();
        let inside = sessions_dir(dir.path(), &main).join("abc.jsonl");
        let mut entry = SessionEntry::new("abc", 1);
        assert_eq!(
            session_file(dir.path(), &main, &entry, None).unwrap(),
            inside
        );

        entry.session_file = Some(inside.to_string_lossy().into_owned());
        assert_eq!(
            session_file(dir.path(), &main, &entry, None).unwrap(),
            inside
        );

        for outside in [
            "/etc/passwd".to_owned(),
            "relative.jsonl".to_owned(),
            format!(
                "{}/../../x.jsonl",
                sessions_dir(dir.path(), &main).display()
            ),
        ] {
            entry.session_file = Some(outside.clone());
            assert!(
                session_file(dir.path(), &main, &entry, None).is_err(),
                "{outside}"
            );
        }
    }

    /// Found by an outside test: a state directory copied elsewhere refused every
    /// conversation, its entries naming their files where the tree was.
    #[test]
    fn a_moved_state_directory_finds_its_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let main = AgentId::main();
        let mut entry = SessionEntry::new("abc", 1);
        entry.session_file = Some("/old/disk/state/agents/main/sessions/abc.jsonl".into());
        assert_eq!(
            session_file(dir.path(), &main, &entry, None).unwrap(),
            sessions_dir(dir.path(), &main).join("abc.jsonl")
        );
        for refused in [
            "/old/state/agents/other/sessions/abc.jsonl", // another agent's
            "/old/state/agents/main/sessions/../../../etc/passwd",
            "/old/state/agents/main/notes/abc.jsonl",
            "old/state/agents/main/sessions/abc.jsonl", // not absolute
        ] {
            entry.session_file = Some(refused.into());
            assert!(
                session_file(dir.path(), &main, &entry, None).is_err(),
                "{refused}"
            );
        }
    }

    #[cfg(unix)]
    #[test]
    fn session_file_symlink_escape_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let main = AgentId::main();
        let sessions = sessions_dir(dir.path(), &main);
        std::fs::create_dir_all(&sessions).unwrap();
        let target = dir.path().join("secret.jsonl");
        std::fs::write(&target, "x").unwrap();
        let link = sessions.join("link.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut entry = SessionEntry::new("abc", 1);
        entry.session_file = Some(link.to_string_lossy().into_owned());
        assert!(session_file(dir.path(), &main, &entry, None).is_err());
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn state_root() {
        use crate::store::json::paths::state_root;
        use std::path::Path;

        assert!(state_root(Path::new("state")).is_absolute());
        assert_eq!(state_root(Path::new("/srv/bot")), Path::new("/srv/bot"));
    }

    #[test]
    fn file_name_for() {
        use crate::store::json::paths::file_name_for;

        assert_eq!(
            file_name_for("slack:T1:channel:c1"),
            "slack%3AT1%3Achannel%3Ac1"
        );
        let long = "é".repeat(100);
        assert!(file_name_for(&long).len() < 200);
        assert_ne!(
            file_name_for(&format!("{long}a")),
            file_name_for(&format!("{long}b"))
        );
        // An id spelled like a long id's shortened name still gets its own.
        let short = file_name_for(&long);
        assert_ne!(file_name_for(&short.replace("%~", "~")), short);
    }
}
