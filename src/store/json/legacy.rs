//! Legacy spellings of a session key in OpenClaw's files, and how a session filed under
//! one is taken over by its canonical key.
//!
//! Older OpenClaw versions wrote keys this crate (and OpenClaw 3.x) spell differently:
//! mixed case (`agent:main:webchat:dm:MiXeD`), without the agent scope
//! (`discord:group:123`), or — for group and channel sessions — under agent `main` in
//! another agent's file (its legacy group keys always named `main`). OpenClaw migrates such an entry to the canonical key
//! when the session is next used: the freshest of the spellings becomes the canonical
//! entry and the others are removed. The store does the same, under its lock, in the
//! write that uses the session.

use super::document::{parse_entry, Document};
use crate::identity::key::{PeerKind, SessionKey};

/// What using `key` takes over: the raw key whose entry the session continues from
/// (`key` itself when it is the freshest) and the legacy spellings to remove.
#[derive(Debug)]
pub(crate) struct Adoption {
    pub(crate) source: String,
    pub(crate) legacy: Vec<String>,
}

/// The legacy spellings of `key` in `document` that decode, and which entry wins:
/// `None` when there are none. `main_elsewhere` says that agent `main`'s sessions live
/// in another file, so `agent:main:<rest>` in this one is a legacy spelling too.
///
/// An entry that does not decode is never taken over or removed: it stays where it is
/// for the store's report of what it cannot read.
pub(crate) fn adoption(
    document: &Document,
    key: &SessionKey,
    main_elsewhere: bool,
) -> Option<Adoption> {
    let legacy = spellings(document, key, main_elsewhere);
    if legacy.is_empty() {
        return None;
    }
    let updated_at = |raw_key: &str| {
        document
            .get(raw_key)
            .and_then(|raw| parse_entry(raw).ok())
            .map(|entry| entry.updated_at)
    };
    let legacy: Vec<(String, u64)> = legacy
        .into_iter()
        .filter_map(|raw_key| updated_at(&raw_key).map(|at| (raw_key, at)))
        .collect();
    if legacy.is_empty() {
        return None;
    }
    // The canonical entry wins ties; among legacy spellings, the first in the file.
    let mut source = (key.as_str().to_owned(), updated_at(key.as_str()));
    for (raw_key, at) in &legacy {
        if source.1.is_none_or(|best| *at > best) {
            source = (raw_key.clone(), Some(*at));
        }
    }
    Some(Adoption {
        source: source.0,
        legacy: legacy.into_iter().map(|(raw_key, _)| raw_key).collect(),
    })
}

/// The raw keys in `document` other than `key` that OpenClaw would migrate to it.
fn spellings(document: &Document, key: &SessionKey, main_elsewhere: bool) -> Vec<String> {
    let canonical = key.as_str();
    let rest = key.rest();
    // Only group and channel sessions: older OpenClaw filed those under `main` in
    // every agent's file. A direct chat under `main` is main's own conversation.
    let is_shared = key.peer_kind().is_some_and(PeerKind::is_group);
    let filed_under_main = rest
        .filter(|_| main_elsewhere && is_shared && key.agent_id() != Some("main"))
        .map(|rest| format!("agent:main:{rest}"));
    let matches = |lowered: &str| {
        lowered == canonical
            || rest == Some(lowered)
            || filed_under_main.as_deref() == Some(lowered)
    };
    let mut found: Vec<String> = document
        .irregular_keys()
        .iter()
        .filter(|raw| raw.as_str() != canonical && matches(&raw.to_lowercase()))
        .cloned()
        .collect();
    // Lower-case, agent-scoped spellings are not irregular: look them up directly.
    if let Some(under_main) = filed_under_main {
        if document.get(&under_main).is_some() {
            found.push(under_main);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(entries: &[(&str, u64)]) -> Document {
        let body: Vec<String> = entries
            .iter()
            .map(|(key, at)| format!("\"{key}\":{{\"sessionId\":\"{key}\",\"updatedAt\":{at}}}"))
            .collect();
        Document::parse(format!("{{{}}}", body.join(",")).as_bytes()).unwrap()
    }

    #[test]
    fn legacy_spellings_and_the_winner() {
        let work_group = "agent:work:discord:group:123";
        // (file, key used, main elsewhere, expected source, expected legacy keys)
        type Case<'a> = (
            &'a [(&'a str, u64)],
            &'a str,
            bool,
            Option<&'a str>,
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            (
                &[("agent:main:dm:bob", 1)],
                "agent:main:dm:bob",
                true,
                None,
                &[],
            ),
            (
                &[("agent:main:dm:Bob", 5)],
                "agent:main:dm:bob",
                true,
                Some("agent:main:dm:Bob"),
                &["agent:main:dm:Bob"],
            ),
            (
                &[
                    ("Agent:Main:WebChat:DM:MiXeD", 5),
                    ("agent:main:webchat:dm:mixed", 9),
                ],
                "agent:main:webchat:dm:mixed",
                true,
                Some("agent:main:webchat:dm:mixed"),
                &["Agent:Main:WebChat:DM:MiXeD"],
            ),
            (
                &[("discord:group:123", 3)],
                "agent:main:discord:group:123",
                true,
                Some("discord:group:123"),
                &["discord:group:123"],
            ),
            (
                &[
                    ("agent:main:discord:group:123", 3),
                    ("Discord:Group:123", 8),
                ],
                work_group,
                true,
                Some("Discord:Group:123"),
                &["Discord:Group:123", "agent:main:discord:group:123"],
            ),
            // One file for every agent: main's key is main's own session.
            (
                &[("agent:main:discord:group:123", 3)],
                work_group,
                false,
                None,
                &[],
            ),
            // A direct chat under `main` is main's own, even in another agent's file.
            (
                &[("agent:main:telegram:dm:bob", 3)],
                "agent:ops:telegram:dm:bob",
                true,
                None,
                &[],
            ),
            // Other agents' keys are never taken over.
            (
                &[("agent:ops:discord:group:123", 3)],
                work_group,
                true,
                None,
                &[],
            ),
            // A different conversation that only shares a prefix.
            (
                &[("agent:main:dm:Bobby", 3)],
                "agent:main:dm:bob",
                true,
                None,
                &[],
            ),
        ];
        for (file, key, main_elsewhere, source, legacy) in cases {
            let doc = document(file);
            let found = adoption(&doc, &SessionKey::parse(key).unwrap(), *main_elsewhere);
            assert_eq!(
                found.as_ref().map(|a| a.source.as_str()),
                *source,
                "{key} in {file:?}"
            );
            let found_legacy: Vec<&str> = found
                .iter()
                .flat_map(|a| a.legacy.iter().map(String::as_str))
                .collect();
            assert_eq!(found_legacy, *legacy, "{key} in {file:?}");
        }
    }

    #[test]
    fn an_entry_that_does_not_decode_is_left_alone() {
        let doc = Document::parse(br#"{"agent:main:dm:Bob": {"sessionId": 5}}"#).unwrap();
        assert!(adoption(&doc, &SessionKey::parse("agent:main:dm:bob").unwrap(), true).is_none());
    }
}
