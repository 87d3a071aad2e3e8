//! What one inbound message changes in an entry (OpenClaw's `initSessionState` steps
//! 9–14 and `deriveSessionMetaPatch`).

use crate::freshness::triggers::ModelRef;
use crate::identity::key::{
    group_display_name, normalize_channel, GroupNameParts, GroupResolution, KeyBuilder, PeerKind,
    SessionKey,
};
use crate::identity::PersonType;
use crate::inbound::attachment::with_placeholders;
use crate::inbound::InboundMessage;
use crate::reply::delivery::apply_route;
use crate::store::entry::DeliveryContext;
use crate::store::entry::{
    ChatType, ForkOrigin, SessionEntry, SessionOrigin, SessionSource, SessionStatus,
    MESSAGE_PREVIEW_MAX_CHARS,
};

/// Everything about the message that the entry records.
#[derive(Clone, Copy)]
pub(crate) struct Inbound<'a> {
    pub(crate) key: &'a SessionKey,
    pub(crate) message: &'a InboundMessage,
    pub(crate) group: Option<&'a GroupResolution>,
    pub(crate) body: &'a str,
    pub(crate) model: Option<&'a ModelRef>,
    pub(crate) fork: Option<&'a ForkOrigin>,
    pub(crate) agent_identity: Option<&'a str>,
    /// The canonical person of a person id (see [`KeyBuilder::canonical_person`]).
    ///
    /// [`KeyBuilder::canonical_person`]: crate::identity::key::KeyBuilder::canonical_person
    pub(crate) people: &'a dyn KeyBuilder,
    pub(crate) now_ms: u64,
}

/// A new session over `base` (the key's previous entry, if any), as OpenClaw starts one:
/// a fresh id, per-session settings and counters cleared, everything else kept — the
/// label, the auth profile, exec settings, skills, heartbeat and unknown fields survive a
/// reset, as they do in OpenClaw. Engine session ids (SDK, CLI) are cleared: they belong
/// to the old conversation (OpenClaw's Claude Code variant clears them on reset too).
pub(crate) fn start_session(base: Option<SessionEntry>, now_ms: u64) -> SessionEntry {
    let first = base.is_none();
    let mut entry = base.unwrap_or_default();
    entry.session_id = uuid::Uuid::new_v4().to_string();
    entry.session_file = None;
    entry.system_sent = Some(false);
    entry.aborted_last_run = Some(false);
    // Settings OpenClaw keeps only while a session continues.
    entry.thinking_level = None;
    entry.verbose_level = None;
    entry.reasoning_level = None;
    entry.tts_auto = None;
    entry.model_override = None;
    entry.provider_override = None;
    entry.response_usage = None;
    entry.send_policy = None;
    entry.queue_mode = None;
    entry.queue_debounce_ms = None;
    entry.queue_cap = None;
    entry.queue_drop = None;
    // Group metadata is re-derived from the message.
    entry.display_name = None;
    entry.chat_type = None;
    entry.channel = None;
    entry.group_id = None;
    entry.subject = None;
    entry.group_channel = None;
    entry.space = None;
    // Counters of the old session.
    entry.compaction_count = Some(0);
    entry.memory_flush_at = None;
    entry.memory_flush_compaction_count = None;
    entry.input_tokens = None;
    entry.output_tokens = None;
    entry.total_tokens = None;
    entry.context_tokens = None;
    entry.sdk_session_id = None;
    entry.cli_session_ids = None;
    entry.claude_cli_session_id = None;
    entry.engine_session_ids = None;
    entry.context_summary = None;
    entry.window_start = None;
    entry.working_memory = None;
    // This crate's lifecycle.
    entry.status = Some(SessionStatus::Idle);
    entry.session_started_at = Some(now_ms);
    entry.closed_at = None;
    entry.run = None;
    // A replacement's reason is the caller's to give.
    entry.start_reason = first.then(|| "no_session".to_owned());
    entry.idle_checkpoint_at = None;
    entry.message_count = Some(0);
    entry.turn_count = Some(0);
    entry.last_message_preview = None;
    entry.description = None;
    entry.description_source = None;
    entry.forked_from = None;
    entry.first_channel = None;
    // The identity summary, person and agent identity stay: they outlive sessions.
    entry.updated_at = now_ms;
    entry
}

/// Records the message in `entry`: activity time, counts, preview, status, source,
/// participants, reply route, origin, group metadata and a model hint.
pub(crate) fn record_message(entry: &mut SessionEntry, inbound: &Inbound<'_>) {
    let message = inbound.message;
    entry.updated_at = inbound.now_ms;
    entry.message_count = Some(entry.message_count.unwrap_or(0) + 1);
    let preview_source = if inbound.body.trim().is_empty() {
        &message.body
    } else {
        inbound.body
    };
    entry.last_message_preview = preview(&with_placeholders(
        preview_source.to_owned(),
        &message.attachments,
    ));
    if matches!(entry.status, None | Some(SessionStatus::Inactive)) {
        entry.status = Some(SessionStatus::Idle);
    }
    let kind = inbound.group.map_or(message.peer_kind(), |g| g.kind);
    if entry.source.is_none() {
        entry.source = Some(SessionSource::channel(
            normalize_channel(&message.channel).unwrap_or_default(),
            kind.into(),
        ));
    }
    if inbound.fork.is_some() {
        entry.forked_from = inbound.fork.cloned();
    }
    if let Some(person) = present(message.person_id.as_deref()) {
        record_person(entry, person, message.person_type, inbound.people);
        if let Some(identity) = inbound.agent_identity {
            entry.agent_identity = Some(identity.to_owned());
        }
    }
    if entry.first_channel.is_none() {
        entry.first_channel = normalize_channel(&message.channel);
    }
    if let Some(participant) = message.participant_id() {
        entry.add_participant(&participant);
    }
    // An answered message moves the reply route (OpenClaw's `initSessionState`);
    // chatter records only its metadata.
    apply_route(entry, &inbound_route(message));
    record_meta(entry, message, inbound.group, inbound.key);
    if let Some(label) = present(message.thread_label.as_deref()) {
        entry.display_name = Some(label.to_owned());
    }
    if let Some(model) = inbound.model {
        entry.provider_override = Some(model.provider.clone());
        entry.model_override = Some(model.model.clone());
        entry.auth_profile_override = None;
        entry.auth_profile_override_source = None;
        entry.auth_profile_override_compaction_count = None;
    }
}

/// How many people have written into `key`'s session once `message` is recorded, when
/// `message` is a DM from a new person and `key` is a main session every DM shares
/// ([`DmScope::Main`](crate::identity::key::DmScope::Main)): one user's conversation is being read
/// by another.
pub(crate) fn another_dm_sender(
    key: &SessionKey,
    message: &InboundMessage,
    entry: &SessionEntry,
) -> Option<usize> {
    let main_session = key.rest().is_some_and(|rest| !rest.contains(':'));
    if !main_session || message.is_group() {
        return None;
    }
    let sender = message.participant_id()?;
    let known = entry.participants.as_deref().unwrap_or_default();
    (!known.is_empty() && !entry.has_participant(&sender)).then_some(known.len() + 1)
}

/// Records where the message came from without counting it: the origin, group
/// metadata and the chat type (OpenClaw's `deriveSessionMetaPatch`). Neither the reply
/// route nor `updatedAt` is touched: the route moves with an answered message or an
/// explicit route update only.
pub(crate) fn record_meta(
    entry: &mut SessionEntry,
    message: &InboundMessage,
    group: Option<&GroupResolution>,
    key: &SessionKey,
) {
    let kind = group.map_or(message.peer_kind(), |g| g.kind);
    merge_origin(entry, message, group, kind);
    if let Some(group) = group {
        apply_group(entry, message, group, key);
    }
    if entry.chat_type.is_none() {
        entry.chat_type = Some(kind.into());
    }
}

/// Where a reply to `message` goes: its channel, chat, account and thread.
fn inbound_route(message: &InboundMessage) -> DeliveryContext {
    DeliveryContext {
        channel: Some(message.channel.clone()),
        to: message.reply_to(),
        account_id: message.account_id.clone(),
        thread_id: message.thread_id.clone(),
        extra: Default::default(),
    }
}

/// The first [`MESSAGE_PREVIEW_MAX_CHARS`] characters of `text`, whitespace collapsed.
pub(crate) fn preview(text: &str) -> Option<String> {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    if collapsed.chars().count() <= MESSAGE_PREVIEW_MAX_CHARS {
        return Some(collapsed);
    }
    let mut cut: String = collapsed
        .chars()
        .take(MESSAGE_PREVIEW_MAX_CHARS - 1)
        .collect();
    cut.push('…');
    Some(cut)
}

/// Records that `person` (of `person_type`, if known) wrote in the session.
///
/// The session keeps the person it is with: once it has one, the same person writing
/// from another channel changes neither id nor type, and another person's message does
/// not take it over. The one exception is a placeholder: a person of type `external`
/// (an identifier no directory knew) gives way to the person that identifier was later
/// linked to.
///
/// The person is recorded by the canonical id `people` links the raw id to, the raw id
/// kept in [`SessionEntry::raw_person_ids`]; a session that recorded another id of the
/// same person (before the link, or from another channel) is corrected to the canonical
/// one.
fn record_person(
    entry: &mut SessionEntry,
    raw: &str,
    person_type: Option<PersonType>,
    people: &dyn KeyBuilder,
) {
    let canonical = people.canonical_person(raw);
    let person = canonical.as_deref().unwrap_or(raw);
    if canonical.is_some() {
        remember_raw_person_id(entry, raw);
    }
    if let Some(known) = entry.person_id.clone().filter(|known| known != person) {
        if people.canonical_person(&known).as_deref() == Some(person) {
            remember_raw_person_id(entry, &known);
            entry.person_id = Some(person.to_owned());
        }
    }
    let placeholder = entry.person_type.as_deref() == Some(PersonType::External.as_str())
        && person_type.is_some_and(|t| t != PersonType::External);
    match entry.person_id.as_deref() {
        Some(known) if known != person && !placeholder => {}
        Some(known) if known == person => {
            // A type learned later fills a gap, and a known type replaces the
            // placeholder of the same person reached first from an unknown number.
            if entry.person_type.is_none() || placeholder {
                entry.person_type = person_type.map(|t| t.as_str().to_owned());
            }
        }
        _ => {
            entry.person_id = Some(person.to_owned());
            entry.person_type = person_type.map(|t| t.as_str().to_owned());
        }
    }
}

/// Gives `entry`'s person the canonical id `people` links it to, keeping the raw id in
/// [`SessionEntry::raw_person_ids`]; `false` (and nothing changed) when the person has
/// no other id.
pub(crate) fn canonicalize_person(entry: &mut SessionEntry, people: &dyn KeyBuilder) -> bool {
    let Some(raw) = entry.person_id.clone() else {
        return false;
    };
    let Some(canonical) = people.canonical_person(&raw) else {
        return false;
    };
    remember_raw_person_id(entry, &raw);
    entry.person_id = Some(canonical);
    true
}

/// The most raw ids a session remembers for its person.
const MAX_RAW_PERSON_IDS: usize = 16;

fn remember_raw_person_id(entry: &mut SessionEntry, raw: &str) {
    let ids = entry.raw_person_ids.get_or_insert_with(Vec::new);
    if !ids.iter().any(|id| id == raw) && ids.len() < MAX_RAW_PERSON_IDS {
        ids.push(raw.to_owned());
    }
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// New non-empty origin fields overwrite the old ones (OpenClaw's origin merge).
fn merge_origin(
    entry: &mut SessionEntry,
    message: &InboundMessage,
    group: Option<&GroupResolution>,
    kind: PeerKind,
) {
    let origin = entry.origin.get_or_insert_with(SessionOrigin::default);
    let set = |field: &mut Option<String>, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
            *field = Some(value);
        }
    };
    set(&mut origin.label, conversation_label(message, group));
    set(&mut origin.provider, normalize_channel(&message.channel));
    set(
        &mut origin.surface,
        message.surface.as_deref().map(str::to_lowercase),
    );
    set(&mut origin.from, message.from.clone());
    set(&mut origin.to, message.reply_to());
    set(&mut origin.account_id, message.account_id.clone());
    origin.chat_type = Some(ChatType::from(kind));
    // Unlike the other origin fields, the thread follows the latest message even when
    // it has none: OpenClaw falls back to the origin's thread when it saves the reply
    // route, which would bring a stale thread back after a message outside it.
    origin.thread_id = message.thread_id.clone();
}

/// OpenClaw's `resolveConversationLabel`.
fn conversation_label(message: &InboundMessage, group: Option<&GroupResolution>) -> Option<String> {
    if let Some(label) =
        present(message.conversation_label.as_deref()).or(present(message.thread_label.as_deref()))
    {
        return Some(label.to_owned());
    }
    let from = present(message.from.as_deref());
    if group.is_none() {
        return present(message.sender.name.as_deref())
            .or(from)
            .map(str::to_owned);
    }
    let base = present(message.group_channel.as_deref())
        .or(present(message.group_subject.as_deref()))
        .or(present(message.group_space.as_deref()))
        .or(from)?;
    let id = from.and_then(|f| f.rsplit(':').next()).unwrap_or("");
    let id_worth_adding = !id.is_empty()
        && (id.bytes().all(|b| b.is_ascii_digit()) || id.contains("@g.us"))
        && !base.contains(id)
        && !base.contains(" id:")
        && !base.starts_with(['#', '@']);
    Some(if id_worth_adding {
        format!("{base} id:{id}")
    } else {
        base.to_owned()
    })
}

/// OpenClaw's group patch: chat type, channel, group id, subject or channel name,
/// space and display name.
fn apply_group(
    entry: &mut SessionEntry,
    message: &InboundMessage,
    group: &GroupResolution,
    key: &SessionKey,
) {
    entry.chat_type = Some(group.kind.into());
    entry.channel = Some(group.channel.clone());
    entry.group_id = Some(group.id.clone());
    if let Some(subject) = present(message.group_subject.as_deref()) {
        if group.kind == PeerKind::Channel && subject.starts_with('#') {
            entry.group_channel = Some(subject.to_owned());
        } else {
            entry.subject = Some(subject.to_owned());
        }
    }
    if let Some(channel) = present(message.group_channel.as_deref()) {
        entry.group_channel = Some(channel.to_owned());
    }
    if let Some(space) = present(message.group_space.as_deref()) {
        entry.space = Some(space.to_owned());
    }
    entry.display_name = Some(group_display_name(&GroupNameParts {
        provider: Some(&group.channel),
        subject: entry.subject.as_deref(),
        group_channel: entry.group_channel.as_deref(),
        space: entry.space.as_deref(),
        id: Some(&group.id),
        key: Some(key.as_str()),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_collapsed_and_bounded() {
        assert_eq!(
            preview("  hello \n  world ").as_deref(),
            Some("hello world")
        );
        assert_eq!(preview("   "), None);
        let long = preview(&"x".repeat(500)).unwrap();
        assert_eq!(long.chars().count(), MESSAGE_PREVIEW_MAX_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn conversation_labels_follow_openclaw() {
        let group =
            |from: &str| crate::identity::key::resolve_group(from, Some("group"), Some("whatsapp"));
        let message = InboundMessage::group("whatsapp", "120363@g.us", "+1", "hi")
            .with_group_subject("Family");
        assert_eq!(
            conversation_label(&message, group("120363@g.us").as_ref()).as_deref(),
            Some("Family id:120363@g.us")
        );
        let dm = InboundMessage::direct("telegram", "42", "hi").with_sender_name("Alice");
        assert_eq!(conversation_label(&dm, None).as_deref(), Some("Alice"));
        let channel =
            InboundMessage::group("slack", "C1", "U1", "hi").with_group_subject("#general");
        assert_eq!(
            conversation_label(&channel, group("C1").as_ref()).as_deref(),
            Some("#general")
        );
    }

    #[test]
    fn a_new_session_keeps_what_openclaw_keeps() {
        let mut old = SessionEntry::new("old", 1);
        old.label = Some("trip".into());
        old.thinking_level = Some("high".into());
        old.compaction_count = Some(3);
        old.total_tokens = Some(90_000);
        old.sdk_session_id = Some("sdk-1".into());
        old.elevated_level = Some("on".into());
        old.extra.insert("custom".into(), serde_json::json!(1));
        let new = start_session(Some(old), 5);
        assert_ne!(new.session_id, "old");
        assert_eq!(new.label.as_deref(), Some("trip"));
        assert_eq!(new.elevated_level.as_deref(), Some("on"));
        assert_eq!(new.extra["custom"], 1);
        assert_eq!(new.thinking_level, None);
        assert_eq!(new.compaction_count, Some(0));
        assert_eq!(new.total_tokens, None);
        assert_eq!(new.sdk_session_id, None);
        assert_eq!(
            (new.message_count, new.session_started_at),
            (Some(0), Some(5))
        );
    }
}
