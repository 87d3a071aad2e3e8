//! Group routing: which group messages the agent answers.

use serde::Serialize;

use crate::context::inbound::InboundMessage;
use crate::entry::GroupActivation;

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
    /// Keep it as group history for the next triggered message.
    pub keep_as_history: bool,
    /// Prefix it with the owner-context marker.
    pub mark_for_context: bool,
    /// Why.
    pub reason: ActivationReason,
}

/// Routes a message by its kind, its sender and the group's activation (`groupActivation`):
/// direct messages and owner messages always trigger the agent (an owner message that does
/// not address it is marked for context); others trigger only when they mention the agent
/// or the group's activation is `always`; the rest are kept as history.
///
/// ```
/// use agent_sessions::context::activation::{decide, ActivationReason};
/// use agent_sessions::InboundMessage;
///
/// let chatter = InboundMessage::group("slack", "C1", "U2", "lunch?");
/// let decision = decide(&chatter, None);
/// assert!(!decision.trigger && decision.keep_as_history);
/// assert_eq!(decision.reason, ActivationReason::NotAddressed);
///
/// let asked = chatter.clone().mentioning_agent();
/// assert_eq!(decide(&asked, None).reason, ActivationReason::Mentioned);
/// ```
pub fn decide(
    message: &InboundMessage,
    activation: Option<&GroupActivation>,
) -> ActivationDecision {
    let decision = |trigger, keep_as_history, mark_for_context, reason| ActivationDecision {
        trigger,
        keep_as_history,
        mark_for_context,
        reason,
    };
    if !message.is_group() {
        return decision(true, false, false, ActivationReason::DirectMessage);
    }
    let always = activation == Some(&GroupActivation::Always);
    match (message.sender_is_owner, message.mentioned, always) {
        (true, true, _) | (true, _, true) => decision(true, false, false, ActivationReason::Owner),
        (true, false, false) => decision(true, false, true, ActivationReason::OwnerNotAddressed),
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
        let group = || InboundMessage::group("telegram", "-100", "u1", "text");
        // (message, activation) → (trigger, history, mark, reason)
        let cases = [
            (
                InboundMessage::direct("telegram", "u1", "hi"),
                None,
                (true, false, false, DirectMessage),
            ),
            (
                group().from_owner().mentioning_agent(),
                None,
                (true, false, false, Owner),
            ),
            (
                group().from_owner(),
                None,
                (true, false, true, OwnerNotAddressed),
            ),
            (
                group().from_owner(),
                Some(GroupActivation::Always),
                (true, false, false, Owner),
            ),
            (
                group().mentioning_agent(),
                None,
                (true, false, false, Mentioned),
            ),
            (
                group().mentioning_agent(),
                Some(GroupActivation::Mention),
                (true, false, false, Mentioned),
            ),
            (
                group(),
                Some(GroupActivation::Always),
                (true, false, false, ActivationAlways),
            ),
            (
                group(),
                Some(GroupActivation::Mention),
                (false, true, false, NotAddressed),
            ),
            (group(), None, (false, true, false, NotAddressed)),
        ];
        for (message, activation, (trigger, history, mark, reason)) in cases {
            let decision = decide(&message, activation.as_ref());
            assert_eq!(
                (
                    decision.trigger,
                    decision.keep_as_history,
                    decision.mark_for_context,
                    decision.reason
                ),
                (trigger, history, mark, reason),
                "{:?} owner={} mentioned={} {activation:?}",
                message.chat_type,
                message.sender_is_owner,
                message.mentioned
            );
        }
    }
}
