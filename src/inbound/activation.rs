//! Group routing: which group messages the agent answers.

use serde::Serialize;

use crate::inbound::InboundMessage;
use crate::store::entry::GroupActivation;

/// Why a message was routed as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ActivationReason {
    /// A direct message: always answered.
    DirectMessage,
    /// The owner addressed the agent.
    Owner,
    /// The owner wrote without addressing the agent: answered, marked for context so
    /// the model can choose to stay quiet.
    OwnerNotAddressed,
    /// Someone mentioned (or replied to) the agent.
    Mentioned,
    /// The group's activation is `always`.
    ActivationAlways,
    /// Nobody addressed the agent: kept as history only.
    NotAddressed,
}

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationDecision {
    /// Run the agent on it.
    pub trigger: bool,
    /// Keep it as group chatter for the next triggered message.
    pub keep_as_chatter: bool,
    /// Prefix it with the owner-context marker.
    pub mark_for_context: bool,
    /// Why.
    pub reason: ActivationReason,
}

/// What an owner's group message that does not address the agent does.
///
/// The default keeps it as history, like anyone's: in a group the agent answers only
/// when it is addressed (or the group's activation is `always`). OpenClaw answers every
/// owner message ([`OwnerChatter::Answer`]); a manager configured from `openclaw.json`
/// does the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OwnerChatter {
    /// Kept as group chatter, shown with the next message that addresses the agent.
    #[default]
    KeepAsChatter,
    /// Answered, marked for context so that the model can choose to stay quiet.
    Answer,
}

/// Routes a message by its kind, its sender and the group's activation (`groupActivation`):
/// direct messages always trigger the agent; group messages trigger it when they address
/// it (a mention, a reply to it) or the group's activation is `always`; the rest are kept
/// as history — an owner's too, unless `owner_chatter` is [`OwnerChatter::Answer`], which
/// answers them marked for context.
///
/// ```
/// use agent_sessions::inbound::{decide, ActivationReason, OwnerChatter};
/// use agent_sessions::InboundMessage;
///
/// let chatter = InboundMessage::group("slack", "C1", "U2", "lunch?");
/// let decision = decide(&chatter, None, OwnerChatter::default());
/// assert!(!decision.trigger && decision.keep_as_chatter);
/// assert_eq!(decision.reason, ActivationReason::NotAddressed);
///
/// let asked = chatter.clone().mentioning_agent();
/// assert_eq!(decide(&asked, None, OwnerChatter::default()).reason, ActivationReason::Mentioned);
///
/// let owner = chatter.from_owner();
/// assert!(!decide(&owner, None, OwnerChatter::KeepAsChatter).trigger);
/// let answered = decide(&owner, None, OwnerChatter::Answer);
/// assert_eq!(answered.reason, ActivationReason::OwnerNotAddressed);
/// ```
pub fn decide(
    message: &InboundMessage,
    activation: Option<&GroupActivation>,
    owner_chatter: OwnerChatter,
) -> ActivationDecision {
    let decision = |trigger, keep_as_chatter, mark_for_context, reason| ActivationDecision {
        trigger,
        keep_as_chatter,
        mark_for_context,
        reason,
    };
    if !message.is_group() {
        return decision(true, false, false, ActivationReason::DirectMessage);
    }
    let always = activation == Some(&GroupActivation::Always);
    match (message.sender_is_owner, message.mentioned, always) {
        (true, true, _) | (true, _, true) => decision(true, false, false, ActivationReason::Owner),
        (true, false, false) if owner_chatter == OwnerChatter::Answer => {
            decision(true, false, true, ActivationReason::OwnerNotAddressed)
        }
        (true, false, false) => decision(false, true, false, ActivationReason::NotAddressed),
        (false, true, _) => decision(true, false, false, ActivationReason::Mentioned),
        (false, false, true) => decision(true, false, false, ActivationReason::ActivationAlways),
        (false, false, false) => decision(false, true, false, ActivationReason::NotAddressed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_table() {
        use ActivationReason::*;
        use OwnerChatter::{Answer, KeepAsChatter};
        let group = || InboundMessage::group("telegram", "-100", "u1", "text");
        // (message, activation, owner chatter) → (trigger, history, mark, reason)
        let cases = [
            (
                InboundMessage::direct("telegram", "u1", "hi"),
                None,
                KeepAsChatter,
                (true, false, false, DirectMessage),
            ),
            (
                group().from_owner().mentioning_agent(),
                None,
                KeepAsChatter,
                (true, false, false, Owner),
            ),
            (
                group().from_owner(),
                None,
                KeepAsChatter,
                (false, true, false, NotAddressed),
            ),
            (
                group().from_owner(),
                None,
                Answer,
                (true, false, true, OwnerNotAddressed),
            ),
            (
                group().from_owner(),
                Some(GroupActivation::Always),
                KeepAsChatter,
                (true, false, false, Owner),
            ),
            (
                group().mentioning_agent(),
                None,
                KeepAsChatter,
                (true, false, false, Mentioned),
            ),
            (
                group().mentioning_agent(),
                Some(GroupActivation::Mention),
                Answer,
                (true, false, false, Mentioned),
            ),
            (
                group(),
                Some(GroupActivation::Always),
                KeepAsChatter,
                (true, false, false, ActivationAlways),
            ),
            (
                group(),
                Some(GroupActivation::Mention),
                Answer,
                (false, true, false, NotAddressed),
            ),
            (group(), None, Answer, (false, true, false, NotAddressed)),
        ];
        for (message, activation, owner_chatter, (trigger, history, mark, reason)) in cases {
            let decision = decide(&message, activation.as_ref(), owner_chatter);
            assert_eq!(
                (
                    decision.trigger,
                    decision.keep_as_chatter,
                    decision.mark_for_context,
                    decision.reason
                ),
                (trigger, history, mark, reason),
                "{:?} owner={} mentioned={} {activation:?} {owner_chatter:?}",
                message.chat_type,
                message.sender_is_owner,
                message.mentioned
            );
        }
    }
}
