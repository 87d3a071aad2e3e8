//! Where replies go: OpenClaw's delivery context, normalised and merged (documented in the parent module).

use crate::identity::key::normalize_channel;
use crate::store::entry::{DeliveryContext, SessionEntry, ThreadId};

/// The entry's current route: the `last*` fields (with `channel` as a fallback for
/// `lastChannel`) over `deliveryContext`, field by field, as OpenClaw's
/// `normalizeSessionDeliveryFields` merges them.
pub(crate) fn current_route(entry: &SessionEntry) -> DeliveryContext {
    let context = entry.delivery_context.as_ref();
    DeliveryContext {
        extra: Default::default(),
        channel: entry
            .last_channel
            .clone()
            .or_else(|| entry.channel.clone())
            .or_else(|| context.and_then(|c| c.channel.clone())),
        to: entry
            .last_to
            .clone()
            .or_else(|| context.and_then(|c| c.to.clone())),
        account_id: entry
            .last_account_id
            .clone()
            .or_else(|| context.and_then(|c| c.account_id.clone())),
        thread_id: entry
            .last_thread_id
            .clone()
            .or_else(|| context.and_then(|c| c.thread_id.clone())),
    }
}

/// Changes the entry's reply route: the fields of `route` replace the current ones; a
/// route naming a recipient but no thread drops the current thread (OpenClaw 3.x, so a
/// reply does not land in a stale thread). The result is normalised (channel
/// lower-cased and de-aliased, ids trimmed, empty values removed) and written to both
/// `deliveryContext` and the `last*` fields. `updatedAt` is not touched.
pub(crate) fn apply_route(entry: &mut SessionEntry, route: &DeliveryContext) {
    let current = current_route(entry);
    let thread_id = match (&route.thread_id, &route.to) {
        (Some(thread), _) => Some(thread.clone()),
        (None, Some(_)) => None,
        (None, None) => current.thread_id,
    };
    let merged = DeliveryContext {
        extra: Default::default(),
        channel: route.channel.clone().or(current.channel),
        to: route.to.clone().or(current.to),
        account_id: route.account_id.clone().or(current.account_id),
        thread_id,
    };
    write_route(entry, normalize_route(merged));
}

/// Brings an entry's delivery fields into the shape OpenClaw saves them in; every store
/// runs it on each entry it writes.
///
/// As OpenClaw's `normalizeSessionDeliveryFields` on save: the `last*` fields (with
/// `channel` standing in for `lastChannel`, and the thread falling back to the delivery
/// context's, then the origin's) win over `deliveryContext` field by field; the merged
/// route is normalised ([`normalize_route`]) and written to both. An entry whose fields
/// already agree is left exactly as it is. Unknown fields inside `deliveryContext` are
/// kept; `channel` itself is not changed.
pub(crate) fn normalize_delivery_fields(entry: &mut SessionEntry) {
    let context = entry.delivery_context.as_ref();
    let primary = normalize_route(DeliveryContext {
        extra: Default::default(),
        channel: entry.last_channel.clone().or_else(|| entry.channel.clone()),
        to: entry.last_to.clone(),
        account_id: entry.last_account_id.clone(),
        thread_id: entry
            .last_thread_id
            .clone()
            .or_else(|| context.and_then(|c| c.thread_id.clone()))
            .or_else(|| entry.origin.as_ref().and_then(|o| o.thread_id.clone())),
    });
    let fallback = normalize_route(DeliveryContext {
        extra: Default::default(),
        channel: context.and_then(|c| c.channel.clone()),
        to: context.and_then(|c| c.to.clone()),
        account_id: context.and_then(|c| c.account_id.clone()),
        thread_id: context.and_then(|c| c.thread_id.clone()),
    });
    let merged = DeliveryContext {
        extra: Default::default(),
        channel: primary.channel.or(fallback.channel),
        to: primary.to.or(fallback.to),
        account_id: primary.account_id.or(fallback.account_id),
        thread_id: primary.thread_id.or(fallback.thread_id),
    };
    let same_context = context.map_or(merged == DeliveryContext::default(), |c| {
        c.channel == merged.channel
            && c.to == merged.to
            && c.account_id == merged.account_id
            && c.thread_id == merged.thread_id
    });
    let same_last = entry.last_channel == merged.channel
        && entry.last_to == merged.to
        && entry.last_account_id == merged.account_id
        && entry.last_thread_id == merged.thread_id;
    if same_context && same_last {
        return;
    }
    write_route(entry, merged);
}

/// Writes a normalised route to `deliveryContext` (keeping its unknown fields) and the
/// `last*` fields.
fn write_route(entry: &mut SessionEntry, route: DeliveryContext) {
    entry.last_channel = route.channel.clone();
    entry.last_to = route.to.clone();
    entry.last_account_id = route.account_id.clone();
    entry.last_thread_id = route.thread_id.clone();
    let extra = entry
        .delivery_context
        .take()
        .map(|context| context.extra)
        .unwrap_or_default();
    let empty = route == DeliveryContext::default();
    entry.delivery_context = (!empty || !extra.is_empty()).then(|| DeliveryContext {
        channel: route.channel,
        to: route.to,
        account_id: route.account_id,
        thread_id: route.thread_id,
        extra,
    });
}

/// OpenClaw's `normalizeDeliveryContext`: the channel normalised, the recipient and
/// account trimmed (not lower-cased), a textual thread id trimmed, empty values dropped.
pub(crate) fn normalize_route(route: DeliveryContext) -> DeliveryContext {
    let trimmed =
        |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    DeliveryContext {
        extra: Default::default(),
        channel: route.channel.as_deref().and_then(normalize_channel),
        to: trimmed(route.to),
        account_id: trimmed(route.account_id),
        thread_id: match route.thread_id {
            Some(ThreadId::Text(text)) => trimmed(Some(text)).map(ThreadId::Text),
            other => other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_merge_and_mirror() {
        let mut entry = SessionEntry::new("s", 1);
        entry.channel = Some("discord".into());
        apply_route(&mut entry, &DeliveryContext::default());
        assert_eq!(entry.last_channel.as_deref(), Some("discord"));
        assert_eq!(
            entry.delivery_context.as_ref().unwrap().channel.as_deref(),
            Some("discord")
        );

        apply_route(
            &mut entry,
            &DeliveryContext {
                to: Some("  chan-1 ".into()),
                account_id: Some(" Work ".into()),
                ..DeliveryContext::default()
            },
        );
        let context = entry.delivery_context.clone().unwrap();
        assert_eq!(context.channel.as_deref(), Some("discord"));
        assert_eq!(context.to.as_deref(), Some("chan-1"));
        assert_eq!(
            context.account_id.as_deref(),
            Some("Work"),
            "account ids keep their case"
        );
        assert_eq!(entry.last_account_id.as_deref(), Some("Work"));
    }

    #[test]
    fn thread_is_kept_without_a_new_recipient_and_dropped_with_one() {
        let mut entry = SessionEntry::new("s", 1);
        apply_route(
            &mut entry,
            &DeliveryContext::to("telegram", "42").with_thread(7),
        );
        apply_route(
            &mut entry,
            &DeliveryContext {
                account_id: Some("a".into()),
                ..Default::default()
            },
        );
        assert_eq!(entry.last_thread_id, Some(ThreadId::Number(7)));
        apply_route(&mut entry, &DeliveryContext::to("telegram", "42"));
        assert_eq!(entry.last_thread_id, None);
    }

    #[test]
    fn blank_values_are_dropped_and_unknown_context_fields_kept() {
        let mut entry = SessionEntry::new("s", 1);
        let mut context = DeliveryContext::default();
        context
            .extra
            .insert("replyMarkup".into(), serde_json::json!({"inline": true}));
        entry.delivery_context = Some(context);
        apply_route(&mut entry, &DeliveryContext::to(" ", " ").with_thread(" "));
        let context = entry.delivery_context.unwrap();
        assert_eq!(
            (context.channel, context.to, context.thread_id),
            (None, None, None)
        );
        assert_eq!(context.extra["replyMarkup"]["inline"], true);
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn normalize_delivery_fields() {
        use crate::reply::delivery::normalize_delivery_fields;
        use crate::SessionEntry;

        let mut entry = SessionEntry::new("s", 1);
        entry.channel = Some(" WhatsApp ".into());
        entry.last_to = Some(" +15550001 ".into());
        normalize_delivery_fields(&mut entry);
        assert_eq!(entry.last_channel.as_deref(), Some("whatsapp"));
        assert_eq!(entry.last_to.as_deref(), Some("+15550001"));
        let context = entry.delivery_context.as_ref().unwrap();
        assert_eq!(context.channel.as_deref(), Some("whatsapp"));
        assert_eq!(entry.channel.as_deref(), Some(" WhatsApp "));
    }

    #[test]
    fn routes_keep_both_copies_in_step() {
        use crate::reply::delivery::apply_route;
        use crate::store::entry::DeliveryContext;
        use crate::{SessionEntry, ThreadId};

        let mut entry = SessionEntry::new("s", 1);
        apply_route(
            &mut entry,
            &DeliveryContext::to(" Slack ", "C1").with_thread("1700.1"),
        );
        assert_eq!(entry.last_channel.as_deref(), Some("slack"));
        assert_eq!(entry.last_thread_id, Some(ThreadId::Text("1700.1".into())));

        // A new recipient without a thread drops the old thread.
        apply_route(&mut entry, &DeliveryContext::to("slack", "C2"));
        assert_eq!(entry.delivery_context.as_ref().unwrap().thread_id, None);
        assert_eq!(entry.last_thread_id, None);
    }
}
