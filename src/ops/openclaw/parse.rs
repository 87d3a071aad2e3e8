//! Reading `openclaw.json`: JSON5 text to settings, each value checked where it stands
//! so an error names its setting (`session.reset.mode`).

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::OpenClawConfig;
use crate::error::{Error, IdKind, Result};
use crate::freshness::policy::{
    normalize_at_hour, normalize_idle_minutes, ResetConfig, ResetMode, ResetSpec, ResetType, Zone,
};
use crate::freshness::triggers::DEFAULT_RESET_TRIGGERS;
use crate::identity::key::{
    key_segment, normalize_main_key, AgentId, DmScope, IdentityLinks, PeerKind, SessionScope,
};
use crate::lane::{QueueDrop, QueueMode, QueueSettings};
use crate::reply::send_policy::{SendMatch, SendPolicyConfig, SendRule};
use crate::store::entry::SendPolicy;
use crate::store::json::document::parse_json5;

/// The settings `text` holds, over `base`.
pub(super) fn parse(
    text: &str,
    file: Option<&Path>,
    base: OpenClawConfig,
) -> Result<OpenClawConfig> {
    let reader = Reader { file };
    let root: Value = parse_json5(text).map_err(|problem| Error::Config {
        path: file.map(Path::to_owned),
        field: None,
        message: format!("not valid JSON5: {problem}"),
    })?;
    let Value::Object(root) = &root else {
        return Err(Error::Config {
            path: file.map(Path::to_owned),
            field: None,
            message: format!(
                "the top level is {}, not an object of settings",
                kind(&root)
            ),
        });
    };
    if let Some((field, message)) = unsupported_feature("", &Value::Object(root.clone())) {
        return Err(reader.error(&field, message));
    }
    ignore_unknown("", root, &["session", "messages", "agents"]);
    let mut config = base;
    if let Some(session) = reader.object("session", root.get("session"))? {
        reader.session(session, &mut config)?;
    }
    if let Some(messages) = reader.object("messages", root.get("messages"))? {
        ignore_unknown("messages", messages, &["groupChat", "queue"]);
        if let Some(queue) = reader.object("messages.queue", messages.get("queue"))? {
            config.queue = reader.queue("messages.queue", queue, config.queue.clone())?;
            if let Some(channels) =
                reader.object("messages.queue.byChannel", queue.get("byChannel"))?
            {
                for (channel, value) in channels {
                    let field = format!("messages.queue.byChannel.{channel}");
                    let own = match value {
                        // OpenClaw's form: the channel's mode.
                        Value::String(_) => {
                            let mode = reader.queue_mode(&field, Some(value))?;
                            config
                                .queue
                                .clone()
                                .mode(mode.unwrap_or(config.queue.mode.clone()))
                        }
                        Value::Object(settings) => {
                            reader.queue(&field, settings, config.queue.clone())?
                        }
                        other => return Err(reader.expected(&field, "a queue mode", other)),
                    };
                    let own = QueueSettings {
                        by_channel: Default::default(),
                        ..own
                    };
                    config.queue = config.queue.clone().by_channel(channel, own);
                }
            }
        }
        if let Some(group_chat) = reader.object("messages.groupChat", messages.get("groupChat"))? {
            ignore_unknown("messages.groupChat", group_chat, &["historyLimit"]);
            if let Some(limit) = reader.number(
                "messages.groupChat.historyLimit",
                group_chat.get("historyLimit"),
            )? {
                // OpenClaw: max(0, limit); 0 keeps no history.
                config.group_history_limit = limit.floor().clamp(0.0, usize::MAX as f64) as usize;
            }
        }
    }
    if let Some(agents) = reader.object("agents", root.get("agents"))? {
        reader.agents(agents, &mut config)?;
    }
    Ok(config)
}

/// Logs the keys of `map` that are not `known`: settings this crate does not use.
fn ignore_unknown(path: &str, map: &Map<String, Value>, known: &[&str]) {
    for key in map.keys().filter(|key| !known.contains(&key.as_str())) {
        tracing::debug!(setting = %join(path, key), "OpenClaw setting not used by agent-sessions; ignored");
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads values and names the setting of any that is wrong.
struct Reader<'a> {
    file: Option<&'a Path>,
}

impl Reader<'_> {
    fn error(&self, field: &str, message: impl Into<String>) -> Error {
        Error::Config {
            path: self.file.map(Path::to_owned),
            field: Some(field.to_owned()),
            message: message.into(),
        }
    }

    fn expected(&self, field: &str, what: &str, found: &Value) -> Error {
        self.error(field, format!("expected {what}, found {}", kind(found)))
    }

    /// An object; `None` when absent or `null`.
    fn object<'v>(
        &self,
        field: &str,
        value: Option<&'v Value>,
    ) -> Result<Option<&'v Map<String, Value>>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.expected(field, "an object", other)),
        }
    }

    fn string<'v>(&self, field: &str, value: Option<&'v Value>) -> Result<Option<&'v str>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.expected(field, "a string", other)),
        }
    }

    fn number(&self, field: &str, value: Option<&Value>) -> Result<Option<f64>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => Ok(number.as_f64()),
            Some(other) => Err(self.expected(field, "a number", other)),
        }
    }

    fn boolean(&self, field: &str, value: Option<&Value>) -> Result<Option<bool>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(flag)) => Ok(Some(*flag)),
            Some(other) => Err(self.expected(field, "true or false", other)),
        }
    }

    fn array<'v>(&self, field: &str, value: Option<&'v Value>) -> Result<Option<&'v [Value]>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.expected(field, "an array", other)),
        }
    }

    fn strings(&self, field: &str, value: Option<&Value>) -> Result<Option<Vec<String>>> {
        let Some(items) = self.array(field, value)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(text) => Ok(text.clone()),
                other => Err(self.expected(&format!("{field}[{index}]"), "a string", other)),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// One of the `choices`, written exactly.
    fn one_of<T: Clone>(
        &self,
        field: &str,
        value: Option<&Value>,
        choices: &[(&str, T)],
    ) -> Result<Option<T>> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let found = value.as_str();
        choices
            .iter()
            .find(|(name, _)| Some(*name) == found)
            .map(|(_, choice)| Some(choice.clone()))
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                self.error(
                    field,
                    format!("expected one of {}, found {value}", names.join(", ")),
                )
            })
    }

    /// A queue mode, as `/queue` and OpenClaw's settings name it.
    fn queue_mode(&self, field: &str, value: Option<&Value>) -> Result<Option<QueueMode>> {
        let Some(name) = self.string(field, value)? else {
            return Ok(None);
        };
        match QueueMode::from(name.trim().to_lowercase().as_str()) {
            QueueMode::Other(_) => Err(self.error(
                field,
                format!(
                    "expected one of collect, followup, steer, steer-backlog, interrupt, \
                     queue, found {name:?}"
                ),
            )),
            mode => Ok(Some(mode)),
        }
    }

    /// `mode`, `debounceMs`, `cap` and `drop` of `queue` over `base`.
    fn queue(
        &self,
        path: &str,
        queue: &Map<String, Value>,
        base: QueueSettings,
    ) -> Result<QueueSettings> {
        ignore_unknown(
            path,
            queue,
            &["mode", "debounceMs", "cap", "drop", "byChannel"],
        );
        let mut settings = base;
        if let Some(mode) = self.queue_mode(&join(path, "mode"), queue.get("mode"))? {
            settings = settings.mode(mode);
        }
        let field = join(path, "debounceMs");
        if let Some(ms) = self.number(&field, queue.get("debounceMs"))? {
            if !(0.0..=86_400_000.0).contains(&ms) {
                return Err(self.error(&field, format!("expected 0 to 86400000 ms, found {ms}")));
            }
            settings = settings.debounce(Duration::from_millis(ms as u64));
        }
        let field = join(path, "cap");
        if let Some(cap) = self.number(&field, queue.get("cap"))? {
            if !(1.0..=10_000.0).contains(&cap) {
                return Err(self.error(&field, format!("expected 1 to 10000, found {cap}")));
            }
            settings = settings.cap(cap as usize);
        }
        let drop = self.one_of(
            &join(path, "drop"),
            queue.get("drop"),
            &[
                ("old", QueueDrop::Old),
                ("new", QueueDrop::New),
                ("summarize", QueueDrop::Summarize),
            ],
        )?;
        if let Some(drop) = drop {
            settings = settings.drop_policy(drop);
        }
        Ok(settings)
    }

    fn session(&self, session: &Map<String, Value>, config: &mut OpenClawConfig) -> Result<()> {
        ignore_unknown(
            "session",
            session,
            &[
                "scope",
                "dmScope",
                "mainKey",
                "identityLinks",
                "reset",
                "resetByType",
                "resetByChannel",
                "idleMinutes",
                "resetTriggers",
                "sendPolicy",
                "store",
            ],
        );
        let scopes = [
            ("per-sender", SessionScope::PerSender),
            ("global", SessionScope::Global),
        ];
        if let Some(scope) = self.one_of("session.scope", session.get("scope"), &scopes)? {
            config.scope = scope;
        }
        let dm_scopes = [
            ("main", DmScope::Main),
            ("per-peer", DmScope::PerPeer),
            ("per-channel-peer", DmScope::PerChannelPeer),
            ("per-account-channel-peer", DmScope::PerAccountChannelPeer),
        ];
        if let Some(dm_scope) =
            self.one_of("session.dmScope", session.get("dmScope"), &dm_scopes)?
        {
            config.dm_scope = dm_scope;
        }
        if let Some(main_key) = self.string("session.mainKey", session.get("mainKey"))? {
            let main_key = normalize_main_key(main_key);
            key_segment(IdKind::MainKey, &main_key)
                .map_err(|error| self.error("session.mainKey", error.to_string()))?;
            config.main_key = main_key;
        }
        if let Some(links) = self.object("session.identityLinks", session.get("identityLinks"))? {
            let mut identity_links = IdentityLinks::new();
            for (canonical, ids) in links {
                let field = format!("session.identityLinks.{canonical}");
                if let Some(ids) = self.strings(&field, Some(ids))? {
                    identity_links = identity_links.link(canonical.clone(), ids);
                }
            }
            config.identity_links = identity_links;
        }
        config.reset = self.reset_config(session, config.reset.time_zone)?;
        if let Some(triggers) =
            self.strings("session.resetTriggers", session.get("resetTriggers"))?
        {
            let triggers: Vec<String> = triggers
                .into_iter()
                .filter(|trigger| {
                    let blank = trigger.trim().is_empty();
                    if blank {
                        tracing::warn!("a blank reset trigger in session.resetTriggers is ignored");
                    }
                    !blank
                })
                .collect();
            // OpenClaw: the configured triggers if any, else its own.
            config.reset_triggers = if triggers.is_empty() {
                DEFAULT_RESET_TRIGGERS
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect()
            } else {
                triggers
            };
        }
        if let Some(policy) = self.object("session.sendPolicy", session.get("sendPolicy"))? {
            config.send_policy = self.send_policy(policy)?;
        }
        if let Some(store) = self.string("session.store", session.get("store"))? {
            config.store = Some(store.trim().to_owned()).filter(|store| !store.is_empty());
        }
        Ok(())
    }

    fn reset_config(&self, session: &Map<String, Value>, time_zone: Zone) -> Result<ResetConfig> {
        let mut reset = ResetConfig {
            time_zone,
            ..ResetConfig::default()
        };
        reset.reset = self.reset_spec("session.reset", session.get("reset"))?;
        if let Some(by_type) = self.object("session.resetByType", session.get("resetByType"))? {
            // OpenClaw counts a `resetByType`, even an empty one, as an explicit reset
            // setting, so the legacy idleMinutes no longer switches to idle mode: an
            // empty default setting says the same.
            reset.reset.get_or_insert_with(ResetSpec::default);
            ignore_unknown(
                "session.resetByType",
                by_type,
                &["direct", "dm", "group", "thread"],
            );
            // `direct` before the older `dm`.
            for (name, reset_type) in [
                ("dm", ResetType::Direct),
                ("direct", ResetType::Direct),
                ("group", ResetType::Group),
                ("thread", ResetType::Thread),
            ] {
                let field = format!("session.resetByType.{name}");
                if let Some(spec) = self.reset_spec(&field, by_type.get(name))? {
                    reset.reset_by_type.insert(reset_type, spec);
                }
            }
        }
        if let Some(by_channel) =
            self.object("session.resetByChannel", session.get("resetByChannel"))?
        {
            for (channel, spec) in by_channel {
                let field = format!("session.resetByChannel.{channel}");
                if let Some(spec) = self.reset_spec(&field, Some(spec))? {
                    reset = reset.by_channel(channel, spec);
                }
            }
        }
        reset.idle_minutes = session.get("idleMinutes").and_then(normalize_idle_minutes);
        Ok(reset)
    }

    fn reset_spec(&self, field: &str, value: Option<&Value>) -> Result<Option<ResetSpec>> {
        let Some(spec) = self.object(field, value)? else {
            return Ok(None);
        };
        ignore_unknown(field, spec, &["mode", "atHour", "idleMinutes"]);
        let modes = [("daily", ResetMode::Daily), ("idle", ResetMode::Idle)];
        Ok(Some(ResetSpec {
            mode: self.one_of(&join(field, "mode"), spec.get("mode"), &modes)?,
            at_hour: spec.get("atHour").and_then(normalize_at_hour),
            idle_minutes: spec.get("idleMinutes").and_then(normalize_idle_minutes),
        }))
    }

    fn send_policy(&self, policy: &Map<String, Value>) -> Result<SendPolicyConfig> {
        ignore_unknown("session.sendPolicy", policy, &["default", "rules"]);
        let actions = [("allow", SendPolicy::Allow), ("deny", SendPolicy::Deny)];
        let action = |field: &str, value: Option<&Value>| self.one_of(field, value, &actions);
        let mut config = SendPolicyConfig {
            default: action("session.sendPolicy.default", policy.get("default"))?,
            rules: Vec::new(),
            ..SendPolicyConfig::default()
        };
        let rules = self
            .array("session.sendPolicy.rules", policy.get("rules"))?
            .unwrap_or_default();
        for (index, rule) in rules.iter().enumerate() {
            let field = format!("session.sendPolicy.rules[{index}]");
            // OpenClaw skips empty rules.
            let Some(rule) = self.object(&field, Some(rule))? else {
                continue;
            };
            ignore_unknown(&field, rule, &["action", "match"]);
            let action =
                action(&join(&field, "action"), rule.get("action"))?.unwrap_or(SendPolicy::Allow);
            let match_field = join(&field, "match");
            let conditions = self.object(&match_field, rule.get("match"))?;
            let Some(matches) = self.send_match(&match_field, conditions)? else {
                tracing::debug!(rule = %field, "send-policy rule can never match (keyPrefix and rawKeyPrefix disagree); skipped");
                continue;
            };
            config.rules.push(SendRule { matches, action });
        }
        Ok(config)
    }

    /// A rule's conditions; `None` when they can never hold together. An unknown
    /// condition is an error rather than ignored: dropping it would widen the rule.
    fn send_match(
        &self,
        field: &str,
        conditions: Option<&Map<String, Value>>,
    ) -> Result<Option<SendMatch>> {
        let Some(conditions) = conditions else {
            return Ok(Some(SendMatch::default()));
        };
        const KNOWN: &[&str] = &["channel", "chatType", "keyPrefix", "rawKeyPrefix"];
        if let Some(unknown) = conditions.keys().find(|key| !KNOWN.contains(&key.as_str())) {
            return Err(self.error(
                &join(field, unknown),
                format!(
                    "unknown condition (known: {}); a rule is not used without one of its conditions, as that would widen it",
                    KNOWN.join(", ")
                ),
            ));
        }
        let present = |name: &str| -> Result<Option<String>> {
            Ok(self
                .string(&join(field, name), conditions.get(name))?
                .map(|value| value.trim().to_lowercase())
                .filter(|value| !value.is_empty()))
        };
        let chat_types = [
            ("direct", PeerKind::Direct),
            ("dm", PeerKind::Direct),
            ("group", PeerKind::Group),
            ("channel", PeerKind::Channel),
        ];
        // Keys are matched whole (`agent:<id>:…`), which is what both prefixes name: a
        // key starts with both exactly when it starts with the longer, if one extends
        // the other.
        let key_prefix = match (present("keyPrefix")?, present("rawKeyPrefix")?) {
            (Some(a), Some(b)) if a.starts_with(&b) => Some(a),
            (Some(a), Some(b)) if b.starts_with(&a) => Some(b),
            (Some(_), Some(_)) => return Ok(None),
            (a, b) => a.or(b),
        };
        Ok(Some(SendMatch {
            channel: present("channel")?,
            chat_type: self.one_of(
                &join(field, "chatType"),
                conditions.get("chatType"),
                &chat_types,
            )?,
            key_prefix,
        }))
    }

    fn agents(&self, agents: &Map<String, Value>, config: &mut OpenClawConfig) -> Result<()> {
        ignore_unknown("agents", agents, &["defaults", "list"]);
        if let Some(defaults) = self.object("agents.defaults", agents.get("defaults"))? {
            ignore_unknown(
                "agents.defaults",
                defaults,
                &["envelopeTimezone", "userTimezone"],
            );
            let envelope = self.string(
                "agents.defaults.envelopeTimezone",
                defaults.get("envelopeTimezone"),
            )?;
            let user = self.string("agents.defaults.userTimezone", defaults.get("userTimezone"))?;
            config.envelope_time_zone = envelope_zone(envelope, user);
        }
        let list = self
            .array("agents.list", agents.get("list"))?
            .unwrap_or_default();
        let mut first = None;
        let mut marked = None;
        for (index, agent) in list.iter().enumerate() {
            let field = format!("agents.list[{index}]");
            let Some(agent) = self.object(&field, Some(agent))? else {
                continue;
            };
            ignore_unknown(&field, agent, &["id", "default"]);
            let id = self
                .string(&join(&field, "id"), agent.get("id"))?
                .map(str::trim);
            let is_default = self
                .boolean(&join(&field, "default"), agent.get("default"))?
                .unwrap_or(false);
            if index == 0 {
                first = Some(id);
            }
            if is_default && marked.is_none() {
                marked = Some(id);
            }
        }
        // OpenClaw: the first agent marked default, else the first listed, else `main`.
        if let Some(chosen) = marked.or(first) {
            config.default_agent =
                AgentId::normalize(chosen.filter(|id| !id.is_empty()).unwrap_or("main"));
        }
        Ok(())
    }
}

/// The zone of envelope times, as OpenClaw reads `envelopeTimezone`: unset, `local` or
/// `host` → host time; `utc` or `gmt` → UTC; `user` → `userTimezone` (host time if that
/// is unset or invalid); an IANA name → that zone; anything else → host time, with a
/// warning.
fn envelope_zone(envelope: Option<&str>, user: Option<&str>) -> Zone {
    let parse = |raw: &str, setting: &str| match Zone::parse(raw) {
        Ok(zone) => zone,
        Err(_) => {
            tracing::warn!(
                setting,
                value = raw,
                "not a time zone; envelope times use host time"
            );
            Zone::Local
        }
    };
    let Some(raw) = envelope.map(str::trim).filter(|raw| !raw.is_empty()) else {
        return Zone::Local;
    };
    match raw.to_ascii_lowercase().as_str() {
        "local" | "host" => Zone::Local,
        "utc" | "gmt" => Zone::Utc,
        "user" => match user.map(str::trim).filter(|user| !user.is_empty()) {
            Some(user) => parse(user, "agents.defaults.userTimezone"),
            None => Zone::Local,
        },
        _ => parse(raw, "agents.defaults.envelopeTimezone"),
    }
}

/// The first use of a loader feature OpenClaw has and this reader does not — `$include`
/// of another file, `${VAR}` substitution in a string — with the setting it is in.
/// Reading such a file as if the feature were not there would key sessions or place the
/// store differently from the gateway, so it is refused instead.
fn unsupported_feature(path: &str, value: &Value) -> Option<(String, String)> {
    let join = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    match value {
        Value::Object(map) => map.iter().find_map(|(name, value)| {
            if name == "$include" {
                Some((
                    join(name),
                    "`$include` is not supported: copy the included settings into this file"
                        .to_owned(),
                ))
            } else {
                unsupported_feature(&join(name), value)
            }
        }),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(index, item)| unsupported_feature(&format!("{path}[{index}]"), item)),
        Value::String(text) if has_env_reference(text) => Some((
            path.to_owned(),
            "`${VAR}` substitution is not supported: write the value itself".to_owned(),
        )),
        _ => None,
    }
}

/// Whether `text` holds `${NAME}` with an upper-case variable name, as OpenClaw
/// substitutes (an escaped `$${NAME}` is literal text).
fn has_env_reference(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|at| {
        bytes[at..].starts_with(b"${")
            && (at == 0 || bytes[at - 1] != b'$')
            && bytes[at + 2..]
                .iter()
                .position(|&b| b == b'}')
                .is_some_and(|len| {
                    let name = &bytes[at + 2..at + 2 + len];
                    name.first()
                        .is_some_and(|b| b.is_ascii_uppercase() || *b == b'_')
                        && name
                            .iter()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
                })
    })
}
