//! Where a page of a session listing ends, so the next page starts after it.

use std::cmp::Reverse;
use std::fmt;
use std::str::FromStr;

use super::StoredSession;
use crate::error::{Error, Result};

/// Where a page of [`SessionStore::list`](super::SessionStore::list) ended: the next
/// page is the sessions listed after it.
///
/// Sessions are listed most recently updated first, then by key, then by session id,
/// and a cursor names the last session of a page by those three. A page that starts
/// after it is therefore stable while sessions change: nothing is listed twice or
/// skipped for sessions being added or updated meanwhile (a session updated since
/// moves to the front, before the page, and the next listing from the top shows it).
///
/// As text (for a URL or a command line) a cursor is an opaque token of hex digits
/// and dots; [`FromStr`] reads it back, and refuses text that is not a cursor. A cursor
/// is a position in the listing order, not a session: one that names no session (made
/// up, or of a session deleted since) lists what comes after that position.
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::ListCursor;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let store = InMemoryStore::new();
/// for peer in 0..5 {
///     let key = SessionKey::parse(&format!("agent:main:telegram:dm:{peer}"))?;
///     store.put(&key, SessionEntry::new(format!("s{peer}"), 1_000 + peer)).await?;
/// }
/// let mut filter = ListFilter::new().limit(2);
/// let mut listed = Vec::new();
/// loop {
///     let page = store.list(&filter).await?;
///     listed.extend(page.iter().map(|s| s.entry.session_id.clone()));
///     match filter.next_page(&page) {
///         // A cursor travels as text: through a URL, a command line, a form.
///         Some(cursor) => filter = filter.after(cursor.to_string().parse::<ListCursor>()?),
///         None => break,
///     }
/// }
/// assert_eq!(listed, ["s4", "s3", "s2", "s1", "s0"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListCursor {
    updated_at: u64,
    key: String,
    session_id: String,
}

impl ListCursor {
    /// The cursor after `session`: the next page starts with the session listed after
    /// it.
    pub fn after(session: &StoredSession) -> Self {
        ListCursor {
            updated_at: session.entry.updated_at,
            key: session.key.as_str().to_owned(),
            session_id: session.entry.session_id.clone(),
        }
    }

    /// Whether the session of `updated_at`, `key` and `session_id` is listed after
    /// the cursor.
    pub(crate) fn precedes(&self, updated_at: u64, key: &str, session_id: &str) -> bool {
        (
            Reverse(self.updated_at),
            self.key.as_str(),
            self.session_id.as_str(),
        ) < (Reverse(updated_at), key, session_id)
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    /// The `updatedAt` of the session the cursor names (epoch ms).
    pub(crate) fn updated_at(&self) -> u64 {
        self.updated_at
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    /// The key of the session the cursor names.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    /// The session id of the session the cursor names.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

impl fmt::Display for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:x}.{}.{}",
            self.updated_at,
            hex(&self.key),
            hex(&self.session_id)
        )
    }
}

impl FromStr for ListCursor {
    type Err = Error;

    fn from_str(token: &str) -> Result<Self> {
        let invalid = || Error::InvalidOption {
            option: "list cursor",
            problem: "not a cursor a listing returned",
        };
        let mut parts = token.split('.');
        let (Some(updated_at), Some(key), Some(session_id), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_hexdigit());
        if !digits(updated_at) || !digits(key) {
            return Err(invalid());
        }
        Ok(ListCursor {
            updated_at: u64::from_str_radix(updated_at, 16).map_err(|_| invalid())?,
            key: unhex(key).ok_or_else(invalid)?,
            session_id: unhex(session_id).ok_or_else(invalid)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_from_its_text_and_nothing_else_does() {
        let cursor = ListCursor {
            updated_at: 1_770_000_000_123,
            key: "agent:main:telegram:group:-100.5:topic:a/b ü".into(),
            session_id: "0f5d59ee-034e".into(),
        };
        let token = cursor.to_string();
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit() || b == b'.'));
        assert_eq!(token.parse::<ListCursor>().unwrap(), cursor);
        for bad in [
            "",
            ".",
            "..",
            "1.2",
            "1.61.62.63",
            "x.61.62",
            "1..62",
            "1.6.62",
            "1.ff.62",
            "+1.61.62",
            "10000000000000000.61.62",
        ] {
            assert!(
                matches!(
                    bad.parse::<ListCursor>(),
                    Err(Error::InvalidOption {
                        option: "list cursor",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_next_page_is_what_comes_after_in_listing_order() {
        let cursor = ListCursor {
            updated_at: 100,
            key: "b".into(),
            session_id: "2".into(),
        };
        assert!(cursor.precedes(99, "a", "1"), "older comes after");
        assert!(cursor.precedes(100, "c", "0"), "same time, later key");
        assert!(cursor.precedes(100, "b", "3"), "same key, later session id");
        assert!(!cursor.precedes(100, "b", "2"), "not itself");
        assert!(!cursor.precedes(100, "a", "9"));
        assert!(!cursor.precedes(101, "z", "z"), "newer comes before");
    }
}
