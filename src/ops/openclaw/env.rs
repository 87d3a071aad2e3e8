//! The environment OpenClaw reads: its variables and the home directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::store::DEFAULT_CACHE_TTL;

/// The variable that sets the store cache's time to live, in milliseconds (OpenClaw's
/// `OPENCLAW_SESSION_CACHE_TTL_MS`; `0` turns the cache off).
pub(crate) const CACHE_TTL_VAR: &str = "OPENCLAW_SESSION_CACHE_TTL_MS";

/// The variables [`OpenClawEnv::process`] reads.
pub(crate) const ENV_VARS: &[&str] = &[
    "OPENCLAW_CONFIG_PATH",
    "CLAWDBOT_CONFIG_PATH",
    "OPENCLAW_STATE_DIR",
    "CLAWDBOT_STATE_DIR",
    "OPENCLAW_HOME",
    "HOME",
    "USERPROFILE",
    CACHE_TTL_VAR,
];

/// A snapshot of the environment OpenClaw's configuration depends on: the variables
/// (`OPENCLAW_CONFIG_PATH`, `OPENCLAW_STATE_DIR`, `OPENCLAW_SESSION_CACHE_TTL_MS`, …) and
/// the home directory.
///
/// [`OpenClawEnv::process`] reads the process's; [`OpenClawEnv::from_vars`] takes the
/// variables as given, so code (and tests) can ask "where would OpenClaw look with
/// these?" without touching the process environment.
///
/// ```
/// use std::path::Path;
/// use std::time::Duration;
/// use agent_sessions::ops::openclaw::OpenClawEnv;
///
/// let env = OpenClawEnv::from_vars([("HOME", "/home/u"), ("OPENCLAW_SESSION_CACHE_TTL_MS", "0")]);
/// assert_eq!(env.home().as_deref(), Some(Path::new("/home/u")));
/// assert_eq!(env.cache_ttl(), Duration::ZERO); // the cache is off
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenClawEnv {
    vars: HashMap<String, String>,
    /// The platform's home directory, for when no variable names one.
    platform_home: Option<PathBuf>,
}

impl OpenClawEnv {
    /// The process's environment: the variables this crate reads — `OPENCLAW_*`, the legacy `CLAWDBOT_*` and `HOME` (nothing else is copied, so
    /// no unrelated secret ends up in a `Debug` print).
    pub fn process() -> Self {
        OpenClawEnv {
            vars: ENV_VARS
                .iter()
                .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
                .collect(),
            platform_home: std::env::home_dir(),
        }
    }

    /// An environment of exactly these variables.
    pub fn from_vars<I, K, V>(vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        OpenClawEnv {
            vars: vars
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
            platform_home: None,
        }
    }

    /// A variable, trimmed; `None` when unset or blank (as OpenClaw reads them).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|value| value.trim())
            .filter(|value| !value.is_empty())
    }

    /// The home directory as OpenClaw resolves it: `OPENCLAW_HOME` (a leading `~` in it
    /// meaning the home below), else `HOME`, else `USERPROFILE`, else the platform's.
    pub fn home(&self) -> Option<PathBuf> {
        let fallback = || {
            self.var("HOME")
                .or_else(|| self.var("USERPROFILE"))
                .map(PathBuf::from)
                .or_else(|| self.platform_home.clone())
        };
        match self.var("OPENCLAW_HOME") {
            Some(explicit) => match strip_tilde(explicit) {
                Some(rest) => fallback().map(|home| join_rest(&home, rest)),
                None => Some(PathBuf::from(explicit)),
            },
            None => fallback(),
        }
    }

    /// `path` as OpenClaw's `resolveUserPath` reads a path from a variable: trimmed, a
    /// leading `~` expanded to [`home`](Self::home), made absolute.
    pub(crate) fn user_path(&self, path: &str) -> PathBuf {
        let trimmed = path.trim();
        let expanded = match (strip_tilde(trimmed), self.home()) {
            (Some(rest), Some(home)) => join_rest(&home, rest),
            _ => PathBuf::from(trimmed),
        };
        std::path::absolute(&expanded).unwrap_or(expanded)
    }

    /// The store cache's time to live: `OPENCLAW_SESSION_CACHE_TTL_MS` read as OpenClaw reads it
    /// (JavaScript's `parseInt`: leading digits, so `"500ms"` is 500), used when it is a
    /// number of at least 0; otherwise 45 seconds. `0` turns the
    /// cache off.
    pub fn cache_ttl(&self) -> Duration {
        match self.vars.get(CACHE_TTL_VAR).and_then(|raw| parse_int(raw)) {
            Some(ms) if ms >= 0 => Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)),
            _ => DEFAULT_CACHE_TTL,
        }
    }
}

/// The part of `path` after a leading `~` (alone, or followed by `/` or `\`).
fn strip_tilde(path: &str) -> Option<&str> {
    let rest = path.strip_prefix('~')?;
    (rest.is_empty() || rest.starts_with(['/', '\\'])).then_some(rest)
}

fn join_rest(home: &Path, rest: &str) -> PathBuf {
    let rest = rest.trim_start_matches(['/', '\\']);
    if rest.is_empty() {
        home.to_owned()
    } else {
        home.join(rest)
    }
}

/// JavaScript's `parseInt(text, 10)`: leading whitespace, an optional sign, then the
/// longest run of digits; `None` (NaN) when there are none. Saturates instead of
/// losing precision.
fn parse_int(text: &str) -> Option<i128> {
    let text = text.trim_start();
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let value = digits[..end].bytes().fold(0i128, |acc, d| {
        acc.saturating_mul(10).saturating_add(i128::from(d - b'0'))
    });
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_ttl_follows_openclaws_parse_int() {
        // (the variable, or none) → the time to live
        let cases: &[(Option<&str>, Duration)] = &[
            (None, DEFAULT_CACHE_TTL),
            (Some(""), DEFAULT_CACHE_TTL),
            (Some("0"), Duration::ZERO),
            (Some("1500"), Duration::from_millis(1500)),
            (Some("  250"), Duration::from_millis(250)),
            (Some("+7"), Duration::from_millis(7)),
            (Some("500ms"), Duration::from_millis(500)),
            (Some("1e3"), Duration::from_millis(1)),
            (Some("12.9"), Duration::from_millis(12)),
            (Some("-1"), DEFAULT_CACHE_TTL),
            (Some("-0"), Duration::ZERO),
            (Some("abc"), DEFAULT_CACHE_TTL),
            (Some("ms500"), DEFAULT_CACHE_TTL),
            (Some("-"), DEFAULT_CACHE_TTL),
            (
                Some("99999999999999999999999999"),
                Duration::from_millis(u64::MAX),
            ),
        ];
        for (value, expected) in cases {
            let env = match value {
                Some(value) => OpenClawEnv::from_vars([(CACHE_TTL_VAR, *value)]),
                None => OpenClawEnv::default(),
            };
            assert_eq!(env.cache_ttl(), *expected, "{value:?}");
        }
    }

    #[test]
    fn the_process_snapshot_holds_only_openclaws_variables() {
        // PATH (and whatever secrets the process has) is always set, never copied.
        assert!(std::env::var_os("PATH").is_some());
        let env = OpenClawEnv::process();
        let unexpected: Vec<&String> = env
            .vars
            .keys()
            .filter(|name| !ENV_VARS.contains(&name.as_str()))
            .collect();
        assert!(unexpected.is_empty(), "{unexpected:?}");
    }

    #[test]
    fn home_follows_openclaw_home_then_home_then_userprofile() {
        // (variables) → home
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (&[], None),
            (&[("HOME", "/h")], Some("/h")),
            (&[("HOME", "  "), ("USERPROFILE", "/p")], Some("/p")),
            (&[("USERPROFILE", "/p")], Some("/p")),
            (&[("HOME", "/h"), ("OPENCLAW_HOME", "/oc")], Some("/oc")),
            (&[("HOME", "/h"), ("OPENCLAW_HOME", "~/oc")], Some("/h/oc")),
            (&[("HOME", "/h"), ("OPENCLAW_HOME", "~")], Some("/h")),
            (&[("OPENCLAW_HOME", "~/oc")], None),
            (&[("HOME", "/h"), ("OPENCLAW_HOME", "~x")], Some("~x")),
        ];
        for (vars, expected) in cases {
            let env = OpenClawEnv::from_vars(vars.iter().copied());
            assert_eq!(env.home(), expected.map(PathBuf::from), "{vars:?}");
        }
    }

    #[test]
    fn user_paths_expand_the_home_and_are_absolute() {
        let env = OpenClawEnv::from_vars([("HOME", "/h")]);
        for (input, expected) in [
            ("~/x.json", "/h/x.json"),
            (" ~ ", "/h"),
            ("/abs/x.json", "/abs/x.json"),
        ] {
            assert_eq!(env.user_path(input), Path::new(expected), "{input}");
        }
        assert!(env.user_path("relative.json").is_absolute());
    }
}
