//! Group detection from a sender address (OpenClaw's `resolveGroupSessionKey`).

use super::normalize::{normalize_chat_type, KNOWN_CHANNELS};
use super::{Conversation, PeerKind};

/// A group or channel recognised in a message's sender address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupResolution {
    /// OpenClaw's raw group key `<channel>:<group|channel>:<id>` (not a session key).
    pub key: String,
    /// The channel the group lives on.
    pub channel: String,
    /// The group id, trimmed and lower-cased.
    pub id: String,
    /// [`PeerKind::Group`] or [`PeerKind::Channel`].
    pub kind: PeerKind,
}

impl GroupResolution {
    /// The conversation to build a session key from.
    pub fn conversation(&self) -> Conversation {
        Conversation::new(self.channel.clone(), self.kind, self.id.clone())
    }
}

/// Recognises a group message the way OpenClaw does.
///
/// A message is a group message when its chat type is `group` or `channel`, when its
/// sender address contains `:group:` or `:channel:`, or when the address is a WhatsApp
/// group JID (`…@g.us`). The channel comes from the address's first segment when that is
/// a known channel, else from `provider`, else `whatsapp` for a JID; without one, `None`.
pub(crate) fn resolve_group(
    from: &str,
    chat_type: Option<&str>,
    provider: Option<&str>,
) -> Option<GroupResolution> {
    let from = from.trim();
    let group_chat_type = chat_type
        .and_then(normalize_chat_type)
        .filter(|kind| kind.is_group());
    let is_whatsapp_group = from.to_lowercase().ends_with("@g.us");
    let looks_like_group = group_chat_type.is_some()
        || from.contains(":group:")
        || from.contains(":channel:")
        || is_whatsapp_group;
    if !looks_like_group {
        return None;
    }

    let parts: Vec<&str> = from.split(':').filter(|part| !part.is_empty()).collect();
    let head = parts.first().map(|h| h.to_lowercase()).unwrap_or_default();
    let head_is_channel = KNOWN_CHANNELS.contains(&head.as_str());
    let provider = provider
        .map(|p| p.trim().to_lowercase())
        .filter(|p| !p.is_empty());
    let channel = if head_is_channel {
        head
    } else if let Some(provider) = provider {
        provider
    } else if is_whatsapp_group {
        "whatsapp".to_owned()
    } else {
        return None;
    };

    let second = parts.get(1).map(|s| s.to_lowercase());
    let explicit_kind = match second.as_deref() {
        Some("group") => Some(PeerKind::Group),
        Some("channel") => Some(PeerKind::Channel),
        _ => None,
    };
    let kind = explicit_kind.unwrap_or(
        if from.contains(":channel:") || group_chat_type == Some(PeerKind::Channel) {
            PeerKind::Channel
        } else {
            PeerKind::Group
        },
    );
    let id = if head_is_channel {
        let skip = if explicit_kind.is_some() { 2 } else { 1 };
        parts.get(skip..).unwrap_or_default().join(":")
    } else {
        from.to_owned()
    };
    let id = id.trim().to_lowercase();
    if id.is_empty() {
        return None;
    }
    Some(GroupResolution {
        key: format!("{channel}:{kind}:{id}"),
        channel,
        id,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_groups_as_openclaw_does() {
        // (from, chat type, provider) → expected group key
        type Case<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (
                "whatsapp:group:120363@g.us",
                None,
                None,
                Some("whatsapp:group:120363@g.us"),
            ),
            (
                "120363@G.US",
                None,
                None,
                Some("whatsapp:group:120363@g.us"),
            ),
            ("slack:channel:C1", None, None, Some("slack:channel:c1")),
            (
                "discord:123",
                Some("channel"),
                None,
                Some("discord:channel:123"),
            ),
            (
                "discord:123",
                Some("group"),
                None,
                Some("discord:group:123"),
            ),
            (
                "room-7",
                Some("group"),
                Some("Matrix"),
                Some("matrix:group:room-7"),
            ),
            ("room-7", Some("group"), None, None),
            ("telegram:123456789", None, None, None),
            ("telegram:123456789", Some("direct"), None, None),
            ("telegram:group:", None, None, None),
            (
                "custom:group:abc",
                None,
                Some("custom"),
                Some("custom:group:custom:group:abc"),
            ),
        ];
        for (from, chat_type, provider, expected) in cases {
            let resolved = resolve_group(from, *chat_type, *provider);
            assert_eq!(
                resolved.as_ref().map(|g| g.key.as_str()),
                *expected,
                "{from:?} {chat_type:?} {provider:?}"
            );
        }
    }

    #[test]
    fn resolution_feeds_the_key_builder() {
        use crate::identity::key::{DefaultKeyBuilder, KeyBuilder};
        let group = resolve_group("whatsapp:group:120363@g.us", None, None).unwrap();
        let key = DefaultKeyBuilder::new()
            .build(&group.conversation())
            .unwrap();
        assert_eq!(key.as_str(), "agent:main:whatsapp:group:120363@g.us");
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn resolve_group() {
        use crate::identity::key::{resolve_group, PeerKind};

        let group = resolve_group("120363406150318674@g.us", None, None).unwrap();
        assert_eq!(group.key, "whatsapp:group:120363406150318674@g.us");

        let channel = resolve_group("slack:channel:C123", None, None).unwrap();
        assert_eq!(
            (channel.channel.as_str(), channel.kind),
            ("slack", PeerKind::Channel)
        );

        assert_eq!(
            resolve_group("telegram:123456789", Some("direct"), None),
            None
        );
    }
}
