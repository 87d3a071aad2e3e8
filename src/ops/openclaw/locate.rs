//! Where OpenClaw keeps its configuration file and its state.

use std::path::{Path, PathBuf};

use super::env::OpenClawEnv;
use crate::store::json::paths;

/// OpenClaw's configuration file name.
pub(crate) const CONFIG_FILE_NAME: &str = "openclaw.json";

/// The names the configuration file had before OpenClaw was called OpenClaw, tried
/// after [`CONFIG_FILE_NAME`] in each directory.
pub(crate) const LEGACY_CONFIG_FILE_NAMES: &[&str] =
    &["clawdbot.json", "moldbot.json", "moltbot.json"];

/// The state directories of OpenClaw's earlier names, tried after `~/.openclaw`.
const LEGACY_STATE_DIRS: &[&str] = &[".clawdbot", ".moltbot", ".moldbot"];

/// Where an OpenClaw gateway keeps its files: its state directory (sessions under
/// `agents/`) and its configuration file (which need not exist).
///
/// ```
/// use std::path::Path;
/// use agent_sessions::ops::openclaw::{OpenClawEnv, OpenClawLocation};
///
/// let env = OpenClawEnv::from_vars([
///     ("HOME", "/home/u"),
///     ("OPENCLAW_STATE_DIR", "/srv/bot"),
///     ("OPENCLAW_CONFIG_PATH", "~/bot.json"),
/// ]);
/// let location = OpenClawLocation::discover(&env);
/// assert_eq!(location.state_dir, Path::new("/srv/bot"));
/// assert_eq!(location.config_file, Path::new("/home/u/bot.json"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenClawLocation {
    /// The state directory.
    pub state_dir: PathBuf,
    /// The configuration file.
    pub config_file: PathBuf,
}

impl OpenClawLocation {
    /// Where OpenClaw would look, given `env`.
    ///
    /// The state directory: `OPENCLAW_STATE_DIR`, else `CLAWDBOT_STATE_DIR`, else
    /// `~/.openclaw` if it exists, else the first existing of `~/.clawdbot`,
    /// `~/.moltbot`, `~/.moldbot`, else `~/.openclaw`.
    ///
    /// The configuration file: `OPENCLAW_CONFIG_PATH`, else `CLAWDBOT_CONFIG_PATH`
    /// (whether or not the file exists); else the first file that exists of
    /// `openclaw.json`, `clawdbot.json`, `moldbot.json`, `moltbot.json`, looked for in
    /// the state directory a variable names, then in `~/.openclaw` and the legacy
    /// directories; else `openclaw.json` in the state directory.
    pub fn discover(env: &OpenClawEnv) -> Self {
        Self::discover_in(env, |path| path.exists())
    }

    fn discover_in(env: &OpenClawEnv, exists: impl Fn(&Path) -> bool) -> Self {
        let home = env.home();
        let state_override = ["OPENCLAW_STATE_DIR", "CLAWDBOT_STATE_DIR"]
            .iter()
            .find_map(|name| env.var(name))
            .map(|dir| env.user_path(dir));
        let state_dir = match &state_override {
            Some(dir) => dir.clone(),
            None => paths::resolve_state_dir(|_| None, home.as_deref(), &exists),
        };
        let explicit = ["OPENCLAW_CONFIG_PATH", "CLAWDBOT_CONFIG_PATH"]
            .iter()
            .find_map(|name| env.var(name));
        let config_file = match explicit {
            Some(file) => env.user_path(file),
            None => {
                let home = home.unwrap_or_default();
                let dirs = state_override.into_iter().chain(
                    std::iter::once(".openclaw")
                        .chain(LEGACY_STATE_DIRS.iter().copied())
                        .map(|dir| home.join(dir)),
                );
                dirs.flat_map(|dir| config_candidates(&dir))
                    .find(|file| exists(file))
                    .unwrap_or_else(|| state_dir.join(CONFIG_FILE_NAME))
            }
        };
        OpenClawLocation {
            state_dir,
            config_file,
        }
    }
}

/// The configuration files OpenClaw looks for in `dir`, in order.
pub(super) fn config_candidates(dir: &Path) -> Vec<PathBuf> {
    std::iter::once(CONFIG_FILE_NAME)
        .chain(LEGACY_CONFIG_FILE_NAMES.iter().copied())
        .map(|name| dir.join(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_follows_openclaws_precedence() {
        // (variables, files that exist) → (state dir, config file)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str, &'a str);
        let cases: &[Case<'_>] = &[
            // Nothing exists: OpenClaw's defaults.
            (&[], &[], "/h/.openclaw", "/h/.openclaw/openclaw.json"),
            // An explicit file wins, existing or not.
            (
                &[("OPENCLAW_CONFIG_PATH", "/etc/oc.json")],
                &["/h/.openclaw/openclaw.json"],
                "/h/.openclaw",
                "/etc/oc.json",
            ),
            (
                &[("CLAWDBOT_CONFIG_PATH", "~/cb.json")],
                &[],
                "/h/.openclaw",
                "/h/cb.json",
            ),
            (
                &[
                    ("OPENCLAW_CONFIG_PATH", "/a.json"),
                    ("CLAWDBOT_CONFIG_PATH", "/b.json"),
                ],
                &[],
                "/h/.openclaw",
                "/a.json",
            ),
            // A blank variable is unset.
            (
                &[("OPENCLAW_CONFIG_PATH", "  ")],
                &[],
                "/h/.openclaw",
                "/h/.openclaw/openclaw.json",
            ),
            // The state directory a variable names, and the file in it.
            (
                &[("OPENCLAW_STATE_DIR", "/srv/s")],
                &["/srv/s/openclaw.json", "/h/.openclaw/openclaw.json"],
                "/srv/s",
                "/srv/s/openclaw.json",
            ),
            (
                &[("CLAWDBOT_STATE_DIR", "~/s")],
                &["/h/s/moltbot.json"],
                "/h/s",
                "/h/s/moltbot.json",
            ),
            (
                &[
                    ("OPENCLAW_STATE_DIR", "/srv/a"),
                    ("CLAWDBOT_STATE_DIR", "/srv/b"),
                ],
                &[],
                "/srv/a",
                "/srv/a/openclaw.json",
            ),
            // No file in the named state directory: the home's is used, the state
            // directory stays.
            (
                &[("OPENCLAW_STATE_DIR", "/srv/s")],
                &["/h/.openclaw/openclaw.json"],
                "/srv/s",
                "/h/.openclaw/openclaw.json",
            ),
            // Legacy names and directories, in order.
            (
                &[],
                &["/h/.openclaw", "/h/.openclaw/clawdbot.json"],
                "/h/.openclaw",
                "/h/.openclaw/clawdbot.json",
            ),
            (
                &[],
                &["/h/.moltbot", "/h/.moltbot/moltbot.json"],
                "/h/.moltbot",
                "/h/.moltbot/moltbot.json",
            ),
            (
                &[],
                &[
                    "/h/.clawdbot/openclaw.json",
                    "/h/.openclaw/moltbot.json",
                    "/h/.openclaw",
                ],
                "/h/.openclaw",
                "/h/.openclaw/moltbot.json",
            ),
            // OPENCLAW_HOME moves the home.
            (
                &[("OPENCLAW_HOME", "/oc")],
                &[],
                "/oc/.openclaw",
                "/oc/.openclaw/openclaw.json",
            ),
        ];
        for (vars, existing, state_dir, config_file) in cases {
            let env = OpenClawEnv::from_vars([("HOME", "/h")].iter().chain(vars.iter()).copied());
            let location = OpenClawLocation::discover_in(&env, |path| {
                existing.iter().any(|e| Path::new(e) == path)
            });
            assert_eq!(
                (location.state_dir.as_path(), location.config_file.as_path()),
                (Path::new(state_dir), Path::new(config_file)),
                "{vars:?} {existing:?}"
            );
        }
    }
}
