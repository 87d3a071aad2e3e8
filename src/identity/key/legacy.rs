//! OpenClaw's legacy request keys: how sessions were named before keys were scoped to
//! an agent, for tools that migrate old stores.

use super::builder::SessionScope;
use super::group::resolve_group;
use super::normalize::normalize_e164;
use super::GLOBAL_KEY;

/// The request key OpenClaw derived for a message under its legacy `per-sender` scope
/// (`deriveSessionKey`), not agent-scoped: what old stores were keyed by.
///
/// * `global` in [`SessionScope::Global`];
/// * else the group key `<channel>:<group|channel>:<id>` when the message is a group
///   message (`chat_type`, a `:group:`/`:channel:` address, or a
///   WhatsApp `…@g.us` JID; `provider` names the channel when the address does not);
/// * else the sender `from` as an E.164 number (a `whatsapp:`
///   prefix dropped, only digits and `+` kept, a leading `+`);
/// * else, for an empty `from`, `unknown`.
///
/// OpenClaw applies the E.164 step to every other sender, so `telegram:123456789`
/// becomes `+123456789` and a sender without digits `+`; this function does the same,
/// so the keys it returns are the ones old stores hold.
///
/// ```
/// use agent_sessions::identity::{legacy_request_key, SessionScope};
///
/// let key = |from| legacy_request_key(SessionScope::PerSender, from, None, None);
/// assert_eq!(key("whatsapp:+1 555 0100"), "+15550100");
/// assert_eq!(key("120363406150318674@g.us"), "whatsapp:group:120363406150318674@g.us");
/// assert_eq!(key(""), "unknown");
/// assert_eq!(legacy_request_key(SessionScope::Global, "+1555", None, None), "global");
/// ```
pub fn legacy_request_key(
    scope: SessionScope,
    from: &str,
    chat_type: Option<&str>,
    provider: Option<&str>,
) -> String {
    if scope == SessionScope::Global {
        return GLOBAL_KEY.to_owned();
    }
    if let Some(group) = resolve_group(from, chat_type, provider) {
        return group.key;
    }
    if from.is_empty() {
        return "unknown".to_owned();
    }
    normalize_e164(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_sender_request_keys_follow_derive_session_key() {
        use SessionScope::{Global, PerSender};
        // (scope, from, chat type, provider) → request key
        type Case<'a> = (
            SessionScope,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
        );
        let cases: &[Case<'_>] = &[
            // Global scope: one key for everyone.
            (Global, "+15550100", None, None, "global"),
            (Global, "whatsapp:group:120363@g.us", None, None, "global"),
            (Global, "", None, None, "global"),
            // Groups: the raw group key.
            (
                PerSender,
                "120363406150318674@g.us",
                None,
                None,
                "whatsapp:group:120363406150318674@g.us",
            ),
            (
                PerSender,
                "120363@G.US",
                None,
                None,
                "whatsapp:group:120363@g.us",
            ),
            (
                PerSender,
                "whatsapp:group:120363@g.us",
                None,
                None,
                "whatsapp:group:120363@g.us",
            ),
            (
                PerSender,
                "telegram:group:123",
                None,
                None,
                "telegram:group:123",
            ),
            (
                PerSender,
                "telegram:group:-1001234",
                Some("group"),
                None,
                "telegram:group:-1001234",
            ),
            (
                PerSender,
                "slack:channel:C123",
                None,
                None,
                "slack:channel:c123",
            ),
            (
                PerSender,
                "discord:987",
                Some("channel"),
                None,
                "discord:channel:987",
            ),
            (
                PerSender,
                "room-7",
                Some("group"),
                Some("Matrix"),
                "matrix:group:room-7",
            ),
            // Everyone else: the sender as an E.164 number.
            (PerSender, "whatsapp:+1 555", None, None, "+1555"),
            (
                PerSender,
                "whatsapp:+1 (555) 010-0",
                None,
                None,
                "+15550100",
            ),
            (PerSender, "+15550100", None, None, "+15550100"),
            (PerSender, "15550100", None, None, "+15550100"),
            (PerSender, "telegram:123456789", None, None, "+123456789"),
            (
                PerSender,
                "telegram:123456789",
                Some("direct"),
                None,
                "+123456789",
            ),
            (PerSender, "room-7", Some("group"), None, "+7"),
            (PerSender, "alice", None, None, "+"),
            (PerSender, "   ", None, None, "+"),
            // No sender at all.
            (PerSender, "", None, None, "unknown"),
            (PerSender, "", Some("group"), Some("whatsapp"), "unknown"),
        ];
        for (scope, from, chat_type, provider, expected) in cases {
            assert_eq!(
                legacy_request_key(*scope, from, *chat_type, *provider),
                *expected,
                "{scope:?} {from:?} {chat_type:?} {provider:?}"
            );
        }
    }
}
