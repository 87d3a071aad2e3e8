//! The session key as data: what an error can name without depending on how keys are
//! built or parsed (that is in the parent module).

use std::fmt;

use serde::Serialize;

/// A validated, canonical session key: `global` or `agent:<agentId>:<rest>`.
///
/// Parsing lower-cases the key (as OpenClaw 3.x does), rejects control characters, empty
/// `:` segments, keys over `4096` bytes and invalid agent ids. A `SessionKey`
/// is therefore always safe to log, store and compare.
///
/// ```
/// use agent_sessions::{PeerKind, SessionKey};
///
/// let key = SessionKey::parse("AGENT:Main:Slack:Channel:C1:thread:1700.1")?;
/// assert_eq!(key.as_str(), "agent:main:slack:channel:c1:thread:1700.1");
/// assert_eq!(key.agent_id(), Some("main"));
/// assert_eq!(key.rest(), Some("slack:channel:c1:thread:1700.1"));
/// assert_eq!(key.peer_kind(), Some(PeerKind::Channel));
/// assert_eq!(key.thread_parent().unwrap().as_str(), "agent:main:slack:channel:c1");
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionKey(pub(super) String);

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionKey({:?})", self.0)
    }
}

impl AsRef<str> for SessionKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}
