//! Send policy (OpenClaw's rules): whether the agent may send in a session.

use serde::{Deserialize, Serialize};

use crate::identity::key::{is_legacy_discord_channel, normalize_channel, PeerKind, SessionKey};
use crate::store::entry::{SendPolicy, SessionEntry};

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
    /// A session-key prefix, matched against the whole key and against its rest after
    /// `agent:<agentId>:`: `cron:` matches `agent:main:cron:job1`, as does
    /// `agent:main:cron:`.
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
/// and when no rule matches, the default, else allow. With
/// [`order`](Self::order) set to [`RuleOrder::FirstMatch`] (`"order": "firstMatch"` in
/// JSON), the first matching rule decides instead. A `keyPrefix` matches the key or
/// its rest after `agent:<agentId>:` (a bare `cron:` matches `agent:main:cron:job1`);
/// the channel and chat type a rule asks for come from the message, then the entry,
/// then the key.
///
/// ```
/// use agent_sessions::reply::{SendPolicyConfig, SendMatch, SendRule};
/// use agent_sessions::store::SendPolicy;
/// use agent_sessions::{PeerKind, SessionEntry, SessionKey};
///
/// let config = SendPolicyConfig {
///     default: Some(SendPolicy::Allow),
///     rules: vec![SendRule {
///         matches: SendMatch { channel: Some("discord".into()), chat_type: Some(PeerKind::Group), key_prefix: None },
///         action: SendPolicy::Deny,
///     }],
///     ..SendPolicyConfig::default()
/// };
/// let key = SessionKey::parse("agent:main:discord:group:g1")?;
/// assert_eq!(config.resolve(&key, None, None, None), SendPolicy::Deny);
/// let dm = SessionKey::parse("agent:main:discord:dm:u1")?;
/// assert_eq!(config.resolve(&dm, None, None, None), SendPolicy::Allow);
///
/// let quiet_cron = SendPolicyConfig {
///     default: None,
///     rules: vec![SendRule {
///         matches: SendMatch { channel: None, chat_type: None, key_prefix: Some("cron:".into()) },
///         action: SendPolicy::Deny,
///     }],
///     ..SendPolicyConfig::default()
/// };
/// let job = SessionKey::parse("agent:main:cron:nightly")?;
/// assert_eq!(quiet_cron.resolve(&job, None, None, None), SendPolicy::Deny);
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
    /// How matching rules decide (OpenClaw's: any matching deny wins).
    #[serde(default, skip_serializing_if = "RuleOrder::is_any_deny_wins")]
    pub order: RuleOrder,
}

/// How the rules of a [`SendPolicyConfig`] that match a session decide.
///
/// ```
/// use agent_sessions::reply::{RuleOrder, SendMatch, SendPolicyConfig, SendRule};
/// use agent_sessions::store::SendPolicy;
/// use agent_sessions::SessionKey;
///
/// // Allow the support channel, deny every other Slack channel.
/// let rules = vec![
///     SendRule {
///         matches: SendMatch { key_prefix: Some("slack:channel:support".into()), ..SendMatch::default() },
///         action: SendPolicy::Allow,
///     },
///     SendRule {
///         matches: SendMatch { channel: Some("slack".into()), ..SendMatch::default() },
///         action: SendPolicy::Deny,
///     },
/// ];
/// let support = SessionKey::parse("agent:main:slack:channel:support")?;
/// let openclaw = SendPolicyConfig { rules: rules.clone(), ..SendPolicyConfig::default() };
/// assert_eq!(openclaw.resolve(&support, None, None, None), SendPolicy::Deny);
/// let first_match = SendPolicyConfig { rules, order: RuleOrder::FirstMatch, ..SendPolicyConfig::default() };
/// assert_eq!(first_match.resolve(&support, None, None, None), SendPolicy::Allow);
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RuleOrder {
    /// OpenClaw's evaluation, the default: a matching deny wins wherever it stands; a
    /// matching allow allows when no rule denies.
    #[default]
    AnyDenyWins,
    /// The first rule that matches decides (ClawCode's design): an allow before a deny
    /// that also matches allows.
    FirstMatch,
}

impl RuleOrder {
    fn is_any_deny_wins(&self) -> bool {
        *self == RuleOrder::AnyDenyWins
    }
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
                .is_none_or(|prefix| key_has_prefix(key, prefix));
            if !(channel_ok && type_ok && prefix_ok) {
                continue;
            }
            match (rule.action.clone(), self.order) {
                (SendPolicy::Deny, _) => return SendPolicy::Deny,
                (SendPolicy::Allow, RuleOrder::FirstMatch) => return SendPolicy::Allow,
                (SendPolicy::Allow, RuleOrder::AnyDenyWins) => allowed = true,
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

/// Whether a rule's `keyPrefix` (trimmed, lower-cased; blank matches every key) starts
/// the key, or the key's rest after `agent:<agentId>:`. Configs written for OpenClaw use
/// bare prefixes (`cron:`, `discord:group:`) for the agent-scoped keys it stores
/// (`agent:main:cron:job1`), as OpenClaw 3.x matches them; 2.4 compared the raw key only.
fn key_has_prefix(key: &SessionKey, prefix: &str) -> bool {
    let prefix = prefix.trim().to_lowercase();
    key.as_str().starts_with(&prefix) || key.rest().is_some_and(|rest| rest.starts_with(&prefix))
}

/// The channel named in a key's rest (after `agent:<agentId>:`): its first segment when
/// the second or third is the peer kind (`<channel>:group:<id>`,
/// `<channel>:<account>:dm:<peer>`), `discord` for the legacy
/// `discord:[<account>:]guild-<g>:channel-<c>` shape, else none (`dm:<peer>`, `main`,
/// `cron:<job>`).
///
/// OpenClaw 2.4 reads `parts[0]` of the whole key when `parts[1]` is `group` or
/// `channel`, so for its own agent-scoped keys it reads `agent` beside the agent id and
/// never finds a channel; later versions read past the prefix, as this does.
fn channel_from_key(key: &SessionKey) -> Option<String> {
    let rest = key.rest()?;
    if is_legacy_discord_channel(rest) {
        return normalize_channel("discord");
    }
    let segments: Vec<&str> = rest.split(':').collect();
    let is_kind = |segment: Option<&&str>| {
        segment.is_some_and(|s| matches!(*s, "group" | "channel" | "dm" | "direct"))
    };
    let first = *segments.first()?;
    if matches!(first, "dm" | "direct") {
        return None;
    }
    (is_kind(segments.get(1)) || is_kind(segments.get(2)))
        .then(|| normalize_channel(first))
        .flatten()
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
            ..SendPolicyConfig::default()
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
    fn bare_key_prefixes_match_agent_scoped_keys() {
        use SendPolicy::{Allow, Deny};
        let config = SendPolicyConfig {
            default: Some(Allow),
            rules: vec![
                rule(None, None, Some("cron:"), Deny),
                rule(None, None, Some(" Discord:Group: "), Deny),
                rule(None, None, Some("agent:ops:"), Deny),
                rule(None, None, Some("hook:"), Allow),
                rule(None, None, Some("   "), Allow),
            ],
            ..SendPolicyConfig::default()
        };
        // key → policy
        let cases: &[(&str, SendPolicy)] = &[
            ("agent:main:cron:job1", Deny),
            ("agent:main:cron:job1:run:r1", Deny),
            ("agent:support:cron:nightly", Deny),
            ("agent:main:discord:group:123", Deny),
            ("agent:main:discord:group:123:thread:9", Deny),
            ("agent:ops:main", Deny),
            ("agent:ops:telegram:dm:42", Deny),
            ("agent:main:discord:channel:123", Allow),
            ("agent:main:discordx:group:1", Allow),
            ("agent:main:main", Allow),
            ("agent:main:cronjob:1", Allow),
            ("agent:main:hook:deploy", Allow),
            ("global", Allow),
        ];
        for (raw, expected) in cases {
            let key = SessionKey::parse(raw).unwrap();
            assert_eq!(config.resolve(&key, None, None, None), *expected, "{raw}");
        }
        let raw_prefix = SendPolicyConfig {
            default: Some(Deny),
            rules: vec![rule(None, None, Some("agent:main:cron:"), Allow)],
            ..SendPolicyConfig::default()
        };
        let policy =
            |raw: &str| raw_prefix.resolve(&SessionKey::parse(raw).unwrap(), None, None, None);
        assert_eq!(
            policy("agent:main:cron:job1"),
            Allow,
            "a full prefix still matches"
        );
        assert_eq!(policy("agent:ops:cron:job1"), Deny, "only its own agent");
    }

    #[test]
    fn channels_are_read_from_the_key_past_the_agent() {
        // key → channel
        let cases: &[(&str, Option<&str>)] = &[
            ("agent:main:discord:group:123", Some("discord")),
            ("agent:main:slack:channel:c1:thread:t1", Some("slack")),
            ("agent:main:telegram:dm:42", Some("telegram")),
            ("agent:main:telegram:direct:42", Some("telegram")),
            ("agent:main:whatsapp:work:dm:+1555", Some("whatsapp")),
            ("agent:main:imsg:group:g1", Some("imessage")),
            (
                "agent:main:discord:default:guild-1:channel-2",
                Some("discord"),
            ),
            ("agent:main:discord:guild-1:channel-2", Some("discord")),
            ("agent:main:dm:42", None),
            ("agent:main:direct:42", None),
            ("agent:main:main", None),
            ("agent:main:cron:job1", None),
            ("agent:main:subagent:abc", None),
            ("global", None),
        ];
        for (raw, expected) in cases {
            let key = SessionKey::parse(raw).unwrap();
            assert_eq!(channel_from_key(&key).as_deref(), *expected, "{raw}");
        }
        // Through a rule: the key's channel and kind decide when the message says nothing.
        let config = SendPolicyConfig {
            default: None,
            rules: vec![rule(
                Some("discord"),
                Some(PeerKind::Channel),
                None,
                SendPolicy::Deny,
            )],
            ..SendPolicyConfig::default()
        };
        let legacy = SessionKey::parse("agent:main:discord:default:guild-1:channel-2").unwrap();
        assert_eq!(config.resolve(&legacy, None, None, None), SendPolicy::Deny);
    }

    #[test]
    fn the_two_rule_orders_decide_the_same_rules_differently() {
        use SendPolicy::{Allow, Deny};
        let rules = vec![
            rule(None, None, Some("slack:channel:support"), Allow),
            rule(Some("slack"), None, None, Deny),
            rule(Some("discord"), None, None, Allow),
            rule(Some("discord"), Some(PeerKind::Group), None, Deny),
        ];
        let config = |order| SendPolicyConfig {
            default: Some(Deny),
            rules: rules.clone(),
            order,
        };
        let (any_deny, first) = (
            config(RuleOrder::AnyDenyWins),
            config(RuleOrder::FirstMatch),
        );
        // key → (any matching deny wins, the first match decides)
        let cases = [
            // An allow before a matching deny.
            ("agent:main:slack:channel:support", Deny, Allow),
            ("agent:main:discord:group:g1", Deny, Allow),
            // Only a deny matches.
            ("agent:main:slack:channel:random", Deny, Deny),
            // Only an allow matches.
            ("agent:main:discord:dm:u1", Allow, Allow),
            // Nothing matches: the default.
            ("agent:main:telegram:dm:u1", Deny, Deny),
        ];
        for (raw, by_any_deny, by_first) in cases {
            let key = SessionKey::parse(raw).unwrap();
            assert_eq!(
                any_deny.resolve(&key, None, None, None),
                by_any_deny,
                "{raw}"
            );
            assert_eq!(first.resolve(&key, None, None, None), by_first, "{raw}");
        }
        // The session's own override wins under both.
        let mut entry = SessionEntry::new("s", 1);
        entry.send_policy = Some(Deny);
        let key = SessionKey::parse("agent:main:discord:dm:u1").unwrap();
        assert_eq!(first.resolve(&key, Some(&entry), None, None), Deny);
    }

    #[test]
    fn the_rule_order_reads_and_writes_as_json() {
        let config: SendPolicyConfig =
            serde_json::from_str(r#"{"rules":[],"order":"firstMatch"}"#).unwrap();
        assert_eq!(config.order, RuleOrder::FirstMatch);
        assert_eq!(
            serde_json::to_value(&config).unwrap()["order"],
            "firstMatch"
        );
        // OpenClaw's evaluation is the default and is not written.
        let openclaw: SendPolicyConfig = serde_json::from_str(r#"{"rules":[]}"#).unwrap();
        assert_eq!(openclaw.order, RuleOrder::AnyDenyWins);
        assert!(serde_json::to_value(&openclaw)
            .unwrap()
            .get("order")
            .is_none());
        assert!(serde_json::from_str::<SendPolicyConfig>(r#"{"order":"lastMatch"}"#).is_err());
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
