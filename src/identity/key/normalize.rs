//! Id normalisation, exactly as OpenClaw does it (`routing/session-key.ts`,
//! `channels/chat-type.ts`, `config/sessions/group.ts`).
//!
//! These functions never fail: they turn whatever a channel adapter hands over into the
//! canonical spelling OpenClaw uses in keys and files. Validation — whether the result may
//! become part of a [`SessionKey`](super::SessionKey) — happens when a key is built.

use super::PeerKind;

/// The agent id used when none is configured (`DEFAULT_AGENT_ID` in OpenClaw).
pub const DEFAULT_AGENT_ID: &str = "main";
/// The name of an agent's main session (`DEFAULT_MAIN_KEY` in OpenClaw).
pub(crate) const DEFAULT_MAIN_KEY: &str = "main";
/// The channel account id used when none is given (`DEFAULT_ACCOUNT_ID` in OpenClaw).
pub(crate) const DEFAULT_ACCOUNT_ID: &str = "default";
/// The longest agent or account id, in characters (OpenClaw's valid-id regex allows 64).
pub(crate) const MAX_ID_LEN: usize = 64;

/// The channels OpenClaw ships, plus `webchat`; used to recognise a channel prefix in a
/// sender address during group detection.
pub(crate) const KNOWN_CHANNELS: &[&str] = &[
    "telegram",
    "whatsapp",
    "discord",
    "googlechat",
    "slack",
    "signal",
    "imessage",
    "webchat",
];

/// Whether `value` matches OpenClaw's valid-id regex `^[a-z0-9][a-z0-9_-]{0,63}$`
/// (case-insensitive).
pub(crate) fn is_valid_id(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_ID_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes[1..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

/// Normalises an agent id the way OpenClaw's `normalizeAgentId` does.
///
/// Valid ids are lower-cased; anything else has each run of characters outside
/// `[a-z0-9_-]` replaced by one `-`, dashes trimmed from both ends, and is cut to 64
/// characters. Blank input, or input with nothing usable, is `main`.
pub(crate) fn normalize_agent_id(raw: &str) -> String {
    normalize_id(raw, DEFAULT_AGENT_ID)
}

/// Normalises a channel account id the way OpenClaw's routing `normalizeAccountId` does:
/// the agent-id rules, with `default` as the fallback.
pub(crate) fn normalize_account_id(raw: &str) -> String {
    normalize_id(raw, DEFAULT_ACCOUNT_ID)
}

fn normalize_id(raw: &str, fallback: &str) -> String {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return fallback.to_owned();
    }
    if is_valid_id(trimmed) {
        return trimmed.to_ascii_lowercase();
    }
    let mut replaced = String::with_capacity(trimmed.len());
    let mut in_invalid_run = false;
    for c in trimmed.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            replaced.push(c);
            in_invalid_run = false;
        } else if !in_invalid_run {
            replaced.push('-');
            in_invalid_run = true;
        }
    }
    // OpenClaw trims dashes first and cuts to 64 afterwards, so a result may end in `-`.
    let trimmed = replaced.trim_start_matches('-').trim_end_matches('-');
    let cut: String = trimmed.chars().take(MAX_ID_LEN).collect();
    if cut.is_empty() {
        fallback.to_owned()
    } else {
        cut
    }
}

/// Normalises the main-session name: trimmed and lower-cased, `main` when blank.
pub(crate) fn normalize_main_key(raw: &str) -> String {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        DEFAULT_MAIN_KEY.to_owned()
    } else {
        trimmed.to_lowercase()
    }
}

/// Normalises a channel name the way OpenClaw's `normalizeMessageChannel` does: trimmed,
/// lower-cased, with the built-in aliases resolved (`imsg` → `imessage`, `google-chat` and
/// `gchat` → `googlechat`). Blank input is `None`; unknown channels pass through.
pub(crate) fn normalize_channel(raw: &str) -> Option<String> {
    let lowered = raw.trim().to_lowercase();
    match lowered.as_str() {
        "" => None,
        "imsg" => Some("imessage".to_owned()),
        "google-chat" | "gchat" => Some("googlechat".to_owned()),
        _ => Some(lowered),
    }
}

/// Normalises a chat type the way OpenClaw's `normalizeChatType` does: `direct` and `dm`
/// are [`PeerKind::Direct`], `group` and `channel` are themselves, anything else is `None`.
pub(crate) fn normalize_chat_type(raw: &str) -> Option<PeerKind> {
    match raw.trim().to_lowercase().as_str() {
        "direct" | "dm" => Some(PeerKind::Direct),
        "group" => Some(PeerKind::Group),
        "channel" => Some(PeerKind::Channel),
        _ => None,
    }
}

/// Normalises a peer, group or thread id for a key: trimmed and lower-cased; `None` when
/// blank.
pub(crate) fn normalize_peer_id(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_lowercase())
}

/// Normalises a phone number the way OpenClaw's `normalizeE164` does: a leading
/// `whatsapp:` is dropped, only digits and `+` are kept, and the result starts with `+`.
pub(crate) fn normalize_e164(raw: &str) -> String {
    let trimmed = raw.trim();
    let without_prefix = trimmed.strip_prefix("whatsapp:").unwrap_or(trimmed).trim();
    let kept: String = without_prefix
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '+')
        .collect();
    match kept.strip_prefix('+') {
        Some(rest) => format!("+{rest}"),
        None => format!("+{kept}"),
    }
}

/// Normalises a group label the way OpenClaw's `normalizeGroupLabel` does: lower-cased,
/// whitespace and characters outside `[a-z0-9#@._+-]` turned into single dashes, and
/// dashes and dots trimmed from both ends.
pub(crate) fn normalize_group_label(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.trim().to_lowercase().chars() {
        let keep = c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || matches!(c, '#' | '@' | '.' | '_' | '+' | '-');
        let c = if keep { c } else { '-' };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    out.trim_matches(|c| c == '-' || c == '.').to_owned()
}

/// The parts of a group that its display name is built from.
///
/// All fields are optional; blank strings count as absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupNameParts<'a> {
    /// The channel (`whatsapp`, `slack`, …).
    pub provider: Option<&'a str>,
    /// The group's subject or title.
    pub subject: Option<&'a str>,
    /// The channel name inside a workspace (`#general`).
    pub group_channel: Option<&'a str>,
    /// The workspace or space name.
    pub space: Option<&'a str>,
    /// The group id.
    pub id: Option<&'a str>,
    /// The session key, the last resort.
    pub key: Option<&'a str>,
}

/// Builds a group's display name the way OpenClaw's `buildGroupDisplayName` does, e.g.
/// `whatsapp:g-family` or `slack:#general`.
pub(crate) fn group_display_name(parts: &GroupNameParts<'_>) -> String {
    fn present(value: Option<&str>) -> Option<&str> {
        value.map(str::trim).filter(|v| !v.is_empty())
    }
    let provider_key = present(parts.provider)
        .map(str::to_lowercase)
        .unwrap_or_else(|| "group".to_owned());
    let group_channel = present(parts.group_channel);
    let space = present(parts.space);
    let detail = match (space, group_channel) {
        (Some(space), Some(channel)) => {
            let hash = if channel.starts_with('#') { "" } else { "#" };
            Some(format!("{space}{hash}{channel}"))
        }
        _ => group_channel
            .or(present(parts.subject))
            .or(space)
            .map(str::to_owned),
    };
    let id = present(parts.id);
    let raw_label = detail
        .as_deref()
        .or(id)
        .or(present(parts.key))
        .unwrap_or("");
    let mut token = normalize_group_label(raw_label);
    if token.is_empty() {
        if let Some(id) = id {
            token = normalize_group_label(&shorten_id(id));
        }
    }
    if group_channel.is_none() {
        token = token.trim_start_matches('#').to_owned();
    }
    let needs_prefix = !(token.starts_with('@')
        || token.starts_with('#')
        || token.starts_with("g-")
        || token.contains('#'));
    if needs_prefix && !token.is_empty() {
        token.insert_str(0, "g-");
    }
    if token.is_empty() {
        provider_key
    } else {
        format!("{provider_key}:{token}")
    }
}

/// OpenClaw's id shortening for display: over 14 characters, the first 6, `...`, and the
/// last 4.
fn shorten_id(id: &str) -> String {
    let chars: Vec<char> = id.chars().collect();
    if chars.len() <= 14 {
        return id.to_owned();
    }
    let head: String = chars[..6].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}...{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_normalise_as_openclaw_does() {
        let sixty_five = "a".repeat(65);
        let sixty_four = "a".repeat(64);
        let cases: &[(&str, &str)] = &[
            ("Main", "main"),
            ("My Agent!", "my-agent"),
            ("../../etc/passwd", "etc-passwd"),
            ("---", "main"),
            (&sixty_five, &sixty_four),
            ("  ", "main"),
            ("", "main"),
            ("_private", "_private"),
            ("a-!b", "a--b"),
            ("reggie_oc", "reggie_oc"),
            ("Ünïcode Agent", "n-code-agent"),
        ];
        for (raw, expected) in cases {
            assert_eq!(
                normalize_agent_id(raw),
                *expected,
                "normalize_agent_id({raw:?})"
            );
        }
    }

    #[test]
    fn normalised_id_may_end_in_dash_after_the_cut() {
        let raw = format!("{}!!b", "a".repeat(63));
        let normalized = normalize_agent_id(&raw);
        assert_eq!(normalized.len(), 64);
        assert!(normalized.ends_with('-'));
    }

    #[test]
    fn account_ids_fall_back_to_default() {
        assert_eq!(normalize_account_id(" "), "default");
        assert_eq!(normalize_account_id("Personal"), "personal");
        assert_eq!(normalize_account_id("+1 555"), "1-555");
    }

    #[test]
    fn channels_resolve_aliases() {
        for (raw, expected) in [
            ("imsg", Some("imessage")),
            ("Google-Chat", Some("googlechat")),
            ("gchat", Some("googlechat")),
            ("WebChat", Some("webchat")),
            ("matrix", Some("matrix")),
            ("", None),
        ] {
            assert_eq!(normalize_channel(raw).as_deref(), expected, "{raw:?}");
        }
    }

    #[test]
    fn chat_types_normalise() {
        assert_eq!(normalize_chat_type("DM"), Some(PeerKind::Direct));
        assert_eq!(normalize_chat_type("direct"), Some(PeerKind::Direct));
        assert_eq!(normalize_chat_type(" group "), Some(PeerKind::Group));
        assert_eq!(normalize_chat_type("channel"), Some(PeerKind::Channel));
        assert_eq!(normalize_chat_type("thread"), None);
    }

    #[test]
    fn group_labels_normalise() {
        assert_eq!(normalize_group_label("  Family Chat!! "), "family-chat");
        assert_eq!(normalize_group_label("#General"), "#general");
        assert_eq!(normalize_group_label("..dots.."), "dots");
        assert_eq!(normalize_group_label("a -- b"), "a-b");
    }

    #[test]
    fn group_display_names_follow_openclaw() {
        let cases: &[(GroupNameParts<'_>, &str)] = &[
            (
                GroupNameParts {
                    provider: Some("whatsapp"),
                    subject: Some("Family"),
                    ..Default::default()
                },
                "whatsapp:g-family",
            ),
            (
                GroupNameParts {
                    provider: Some("slack"),
                    group_channel: Some("#general"),
                    ..Default::default()
                },
                "slack:#general",
            ),
            (
                GroupNameParts {
                    provider: Some("discord"),
                    subject: Some("#ops"),
                    ..Default::default()
                },
                "discord:g-ops",
            ),
            (
                GroupNameParts {
                    provider: Some("telegram"),
                    subject: Some("g-already"),
                    ..Default::default()
                },
                "telegram:g-already",
            ),
            (
                GroupNameParts {
                    provider: Some("whatsapp"),
                    subject: Some("!!!"),
                    id: Some("120363406150318674@g.us"),
                    ..Default::default()
                },
                "whatsapp:g-120363...g.us",
            ),
            (GroupNameParts::default(), "group"),
        ];
        for (parts, expected) in cases {
            assert_eq!(group_display_name(parts), *expected, "{parts:?}");
        }
    }

    #[test]
    fn e164_keeps_digits_and_forces_plus() {
        assert_eq!(normalize_e164("+1-555-0100"), "+15550100");
        assert_eq!(normalize_e164("whatsapp:15550100"), "+15550100");
        assert_eq!(normalize_e164(""), "+");
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn normalize_agent_id() {
        use crate::identity::key::normalize_agent_id;

        assert_eq!(normalize_agent_id("Main"), "main");
        assert_eq!(normalize_agent_id("My Agent!"), "my-agent");
        assert_eq!(normalize_agent_id("../../etc/passwd"), "etc-passwd");
        assert_eq!(normalize_agent_id("---"), "main");
    }

    #[test]
    fn normalize_account_id() {
        use crate::identity::key::normalize_account_id;

        assert_eq!(normalize_account_id(""), "default");
        assert_eq!(normalize_account_id("Work Phone"), "work-phone");
    }

    #[test]
    fn normalize_channel() {
        use crate::identity::key::normalize_channel;

        assert_eq!(normalize_channel(" Telegram ").as_deref(), Some("telegram"));
        assert_eq!(normalize_channel("gchat").as_deref(), Some("googlechat"));
        assert_eq!(normalize_channel("  "), None);
    }

    #[test]
    fn normalize_e164() {
        use crate::identity::key::normalize_e164;

        assert_eq!(normalize_e164("whatsapp:+1 (555) 010-9999"), "+15550109999");
        assert_eq!(normalize_e164("44 20 7946 0000"), "+442079460000");
    }

    #[test]
    fn group_display_name() {
        use crate::identity::key::{group_display_name, GroupNameParts};

        let name = group_display_name(&GroupNameParts {
            provider: Some("WhatsApp"),
            subject: Some("Family"),
            id: Some("120363406150318674@g.us"),
            ..Default::default()
        });
        assert_eq!(name, "whatsapp:g-family");

        let name = group_display_name(&GroupNameParts {
            provider: Some("slack"),
            group_channel: Some("general"),
            space: Some("acme"),
            ..Default::default()
        });
        assert_eq!(name, "slack:acme#general");
    }
}
