//! Send policy (OpenClaw's rules): whether the agent may send in a session.

use serde::{Deserialize, Serialize};

use crate::entry::{SendPolicy, SessionEntry};
use crate::key::{normalize_channel, PeerKind, SessionKey};

/// What a [`SendRule`] matches; absent conditions match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMatch {
    /// The channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The chat type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<PeerKind>,
    /// A session-key prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
}

/// One rule: when it matches, allow or deny.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendRule {
    /// The conditions.
    #[serde(rename = "match", default)]
    pub matches: SendMatch,
    /// Allow or deny (OpenClaw's default: allow).
    #[serde(default = "allow")]
    pub action: SendPolicy,
}

fn allow() -> SendPolicy {
    SendPolicy::Allow
}

/// OpenClaw's `session.sendPolicy`: ordered rules and a default.
///
/// Evaluation (`resolveSendPolicy`): the session's own `sendPolicy` override wins; with
/// no rules and no default, allow; otherwise every matching rule is considered — a
/// matching **deny** wins at once, a matching allow allows unless a later rule denies —
/// and when no rule matches, the default, else allow.
///
/// ```
/// use agent_sessions::context::send_policy::{SendPolicyConfig, SendMatch, SendRule};
/// use agent_sessions::entry::SendPolicy;
/// use agent_sessions::{PeerKind, SessionEntry, SessionKey};
///
/// let config = SendPolicyConfig {
///     default: Some(SendPolicy::Allow),
///     rules: vec![SendRule {
///         matches: SendMatch { channel: Some("discord".into()), chat_type: Some(PeerKind::Group), key_prefix: None },
///         action: SendPolicy::Deny,
///     }],
/// };
/// let key = SessionKey::parse("agent:main:discord:group:g1")?;
/// assert_eq!(config.resolve(&key, None, None, None), SendPolicy::Deny);
/// let dm = SessionKey::parse("agent:main:discord:dm:u1")?;
/// assert_eq!(config.resolve(&dm, None, None, None), SendPolicy::Allow);
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendPolicyConfig {
    /// When no rule matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<SendPolicy>,
    /// The rules, in order.
    #[serde(default)]
    pub rules: Vec<SendRule>,
}

impl SendPolicyConfig {
    /// Whether the agent may send in `key`'s session. `channel` and `chat_type` describe
    /// the message; when absent they come from the entry, then from the key.
    pub fn resolve(
        &self,
        key: &SessionKey,
        entry: Option<&SessionEntry>,
        channel: Option<&str>,
        chat_type: Option<PeerKind>,
    ) -> SendPolicy {
        if let Some(policy) = entry.and_then(|e| e.send_policy.clone()).filter(is_known) {
            return policy;
        }
        if self.rules.is_empty() && self.default.is_none() {
            return SendPolicy::Allow;
        }
        let channel = channel
            .and_then(normalize_channel)
            .or_else(|| {
                entry
                    .and_then(|e| e.channel_name())
                    .and_then(normalize_channel)
            })
            .or_else(|| channel_from_key(key));
        let chat_type = chat_type
            .or_else(|| {
                entry
                    .and_then(|e| e.chat_type.as_ref())
                    .and_then(|t| t.peer_kind())
            })
            .or_else(|| key.peer_kind());
        let mut allowed = false;
        for rule in &self.rules {
            let m = &rule.matches;
            let channel_ok = m
                .channel
                .as_deref()
                .is_none_or(|wanted| normalize_channel(wanted) == channel);
            let type_ok = m.chat_type.is_none_or(|wanted| Some(wanted) == chat_type);
            let prefix_ok = m
                .key_prefix
                .as_deref()
                .is_none_or(|prefix| key.as_str().starts_with(&prefix.trim().to_lowercase()));
            if !(channel_ok && type_ok && prefix_ok) {
                continue;
            }
            match rule.action {
                SendPolicy::Deny => return SendPolicy::Deny,
                SendPolicy::Allow => allowed = true,
                _ => {}
            }
        }
        if allowed {
            return SendPolicy::Allow;
        }
        self.default
            .clone()
            .filter(is_known)
            .unwrap_or(SendPolicy::Allow)
    }
}

fn is_known(policy: &SendPolicy) -> bool {
    matches!(policy, SendPolicy::Allow | SendPolicy::Deny)
}

/// The channel named in a key: the segment before its `group`/`channel`/`dm`/`direct`
/// marker. (OpenClaw reads the key's first segment, `agent`; this reads past the
/// `agent:<id>:` prefix.)
fn channel_from_key(key: &SessionKey) -> Option<String> {
    let segments: Vec<&str> = key.rest()?.split(':').collect();
    let marker = segments
        .iter()
        .position(|s| matches!(*s, "group" | "channel" | "dm" | "direct"))?;
    match marker {
        0 => None,
        1 => normalize_channel(segments[0]),
        // <channel>:<account>:dm:<peer>
        _ => normalize_channel(segments[marker - 2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        channel: Option<&str>,
        chat_type: Option<PeerKind>,
        prefix: Option<&str>,
        action: SendPolicy,
    ) -> SendRule {
        SendRule {
            matches: SendMatch {
                channel: channel.map(Into::into),
                chat_type,
                key_prefix: prefix.map(Into::into),
            },
            action,
        }
    }

    #[test]
    fn decision_table() {
        use SendPolicy::{Allow, Deny};
        let key = |raw: &str| SessionKey::parse(raw).unwrap();
        let config = SendPolicyConfig {
            default: Some(Deny),
            rules: vec![
                rule(None, None, Some("agent:main:slack"), Allow),
                rule(Some("Discord"), Some(PeerKind::Group), None, Deny),
                rule(Some("discord"), None, None, Allow),
                rule(
                    None,
                    Some(PeerKind::Channel),
                    Some("agent:main:slack:channel:secret"),
                    Deny,
                ),
            ],
        };
        let mut denied_entry = SessionEntry::new("s", 1);
        denied_entry.send_policy = Some(Deny);
        let mut allowed_entry = SessionEntry::new("s", 1);
        allowed_entry.send_policy = Some(Allow);
        // (key, entry, channel, chat type) → policy
        type Case<'a> = (
            &'a str,
            Option<&'a SessionEntry>,
            Option<&'a str>,
            Option<PeerKind>,
            SendPolicy,
        );
        let cases: Vec<Case<'_>> = vec![
            ("agent:main:slack:channel:c1", None, None, None, Allow),
            ("agent:main:slack:channel:secret", None, None, None, Deny),
            ("agent:main:discord:group:g1", None, None, None, Deny),
            ("agent:main:discord:dm:u1", None, None, None, Allow),
            ("agent:main:discord:default:dm:u1", None, None, None, Allow),
            ("agent:main:telegram:dm:u1", None, None, None, Deny),
            (
                "agent:main:telegram:dm:u1",
                Some(&allowed_entry),
                None,
                None,
                Allow,
            ),
            (
                "agent:main:slack:channel:c1",
                Some(&denied_entry),
                None,
                None,
                Deny,
            ),
            (
                "agent:main:main",
                None,
                Some("discord"),
                Some(PeerKind::Direct),
                Allow,
            ),
        ];
        for (raw, entry, channel, chat_type, expected) in cases {
            assert_eq!(
                config.resolve(&key(raw), entry, channel, chat_type),
                expected,
                "{raw} {channel:?}"
            );
        }
        assert_eq!(
            SendPolicyConfig::default().resolve(&key("agent:main:main"), None, None, None),
            Allow
        );
    }

    #[test]
    fn reads_openclaw_json() {
        let config: SendPolicyConfig = serde_json::from_str(
            r#"{"default":"allow","rules":[{"match":{"channel":"discord","chatType":"group"},"action":"deny"},{"match":{"keyPrefix":"agent:main:slack"}}]}"#,
        )
        .unwrap();
        assert_eq!(config.rules.len(), 2);
        assert_eq!(config.rules[1].action, SendPolicy::Allow);
    }
}
