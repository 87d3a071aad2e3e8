//! What the model is given for a message (group activation and history, system events,
//! the inbound pipeline) and what the bot sends back.

use std::time::Duration;

use crate::error::Result;
use crate::freshness::clock::{from_millis, to_millis};
use crate::identity::key::SessionKey;
use crate::inbound::activation::ActivationDecision;
use crate::inbound::chatter::{build_chatter_context, chatter_key, format_envelope, ChatterEntry};
use crate::inbound::events::{prepend_system_events, SystemEvent};
use crate::inbound::pipeline::{
    clean_text, enveloped_body, model_body, sender_label, PipelineOptions,
};
use crate::inbound::InboundMessage;
use crate::manager::{Resolution, SessionManager};
use crate::reply::payload::{build_reply_payloads, ReplyOptions, ReplyPayload};
use crate::store::entry::SendPolicy;

/// How a sender is named in group chatter and envelopes.
/// `message`'s own text as the model is given it, `body` its text: through the
/// inbound pipeline (sender lines, untrusted context, lines that look like the
/// system's quoted), and in a group in its envelope, which names the sender once.
pub(crate) fn message_text(
    message: &InboundMessage,
    body: &str,
    options: &PipelineOptions,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    match message.group_resolution() {
        Some(group) => {
            let sender = sender_label(&message.sender).unwrap_or_else(|| sender_name(message));
            let body = enveloped_body(message, body, options);
            format_envelope(&group.channel, &group.id, Some(now), &sender, &body)
        }
        None => model_body(message, body, options),
    }
}

fn sender_name(message: &InboundMessage) -> String {
    message
        .sender
        .name
        .clone()
        .or_else(|| message.sender.username.clone())
        .or_else(|| sender_label(&message.sender))
        .unwrap_or_else(|| "unknown".to_owned())
}

impl SessionManager {
    pub(crate) fn pipeline_options(&self, mark_owner_context: bool) -> PipelineOptions {
        PipelineOptions {
            mention_names: self.seams.triggers.mention_names.clone(),
            mark_owner_context,
        }
    }

    /// Who wrote `message`, as an id: the canonical person (by the key builder's links)
    /// when the message names one, else its E.164 number or sender id, as the message
    /// log records a sender.
    pub(crate) fn sender_id(&self, message: &InboundMessage) -> Option<String> {
        let raw = message
            .person_id
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .or(message.sender.e164.as_deref())
            .or(message.sender.id.as_deref())?;
        Some(
            self.seams
                .keys
                .canonical_person(raw)
                .unwrap_or_else(|| raw.to_owned()),
        )
    }

    /// Appends a group message the agent of `session` does not answer to its group's
    /// history — once within `dedupe` when given: whether it was appended.
    pub(crate) async fn keep_as_chatter(
        &self,
        session: &SessionKey,
        message: &InboundMessage,
        body: &str,
        dedupe: Option<Duration>,
    ) -> Result<bool> {
        let Some(key) = chatter_key(session, message) else {
            return Ok(true);
        };
        let entry = ChatterEntry {
            sender: sender_name(message),
            body: clean_text(message, body, &self.pipeline_options(false)),
            timestamp: Some(to_millis(self.seams.clock.now())),
            message_id: message.message_id.clone(),
            sender_id: self.sender_id(message),
        };
        // Acknowledged chatter is kept: a buffer that cannot keep the line (a full disk,
        // a database gone) fails the call, so the host can retry or drop it knowingly.
        match dedupe {
            Some(window) => self.seams.history.append_once(&key, entry, window).await,
            None => self.seams.history.append(&key, entry).await.map(|()| true),
        }
    }

    /// What the model sees for `message`, in the session `resolution` decided, when
    /// `activation` lets the agent answer and there is no transcript to log it in: the
    /// message through the inbound pipeline (the resolution's body: reset trigger and
    /// model hint removed), in a group preceded by the history since the agent was last
    /// addressed (which this clears: each message reaches the model once), and preceded
    /// by the session's queued system events (drained).
    pub(crate) async fn prepare_turn(
        &self,
        resolution: &Resolution,
        message: &InboundMessage,
        activation: &ActivationDecision,
    ) -> String {
        let history = match chatter_key(&resolution.key, message) {
            // The agent sees the history now: the next turn starts a new one. A buffer
            // that cannot be read leaves the history out, not the answer.
            Some(key) => self.seams.history.take(&key).await.unwrap_or_else(|error| {
                tracing::warn!(group = %key, %error, "could not read the group's chatter; answering without it");
                Vec::new()
            }),
            None => Vec::new(),
        };
        self.model_input(resolution, message, activation, &history)
            .await
            .0
    }

    /// The model's input for `message`, which `activation` lets run the agent: the
    /// message through the inbound pipeline (the resolution's body: reset trigger and
    /// model hint removed), in a group after the `history` lines, and after the
    /// session's queued system events (drained, and returned to be handed back if the
    /// turn fails).
    pub(crate) async fn model_input(
        &self,
        resolution: &Resolution,
        message: &InboundMessage,
        activation: &ActivationDecision,
        history: &[ChatterEntry],
    ) -> (String, Vec<SystemEvent>) {
        let now = self.seams.clock.now();
        let options = self.pipeline_options(activation.mark_for_context);
        let current = message_text(message, &resolution.body, &options, now);
        let text = match message.group_resolution() {
            // A model input logged before, answered again: as it was.
            _ if message.verbatim => resolution.body.clone(),
            Some(group) => {
                let lines: Vec<String> = history
                    .iter()
                    .map(|entry| {
                        format_envelope(
                            &group.channel,
                            &group.id,
                            entry.timestamp.map(from_millis),
                            &entry.sender,
                            &entry.body,
                        )
                    })
                    .collect();
                build_chatter_context(&lines, &current, false)
            }
            None => current,
        };
        // Queued events are context too: a queue that cannot be drained keeps them for
        // a later turn, and this one is answered without them.
        let events = self
            .system_events
            .drain(&resolution.key)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(key = %resolution.key, %error, "could not drain the session's system events; answering without them");
                Vec::new()
            });
        let text = prepend_system_events(&text, &events, &self.settings.event_zone);
        (text, events)
    }

    /// Queues `events`, drained by a turn that failed, again for `key`'s next turn.
    pub(crate) async fn requeue_system_events(&self, key: &SessionKey, events: Vec<SystemEvent>) {
        for event in events {
            if let Err(error) = self.system_events.enqueue(key, &event.text, event.at).await {
                tracing::warn!(%key, %error, "could not queue a system event again after a failed turn; it is lost");
            }
        }
    }

    /// What the bot sends for the model's `outputs` to `message`: the reply pipeline
    /// (heartbeat tokens, directives, silence, duplicates of `sent_by_tool`), then the
    /// send policy — a session that may not send gets nothing.
    pub(crate) async fn finish_turn(
        &self,
        resolution: &Resolution,
        message: &InboundMessage,
        outputs: Vec<ReplyPayload>,
        sent_by_tool: Vec<String>,
    ) -> Result<Vec<ReplyPayload>> {
        let payloads = build_reply_payloads(
            outputs,
            &ReplyOptions {
                heartbeat_run: false,
                current_message_id: message.message_id.clone(),
                sent_by_tool,
                silent_token: self.settings.silent_token.clone(),
            },
        );
        let policy = self.settings.send_policy.resolve(
            &resolution.key,
            Some(resolution.entry()),
            Some(&message.channel),
            Some(message.peer_kind()),
        );
        if policy == SendPolicy::Deny {
            tracing::debug!(key = %resolution.key, dropped = payloads.len(), "send policy denies replies in this session");
            return Ok(Vec::new());
        }
        Ok(payloads)
    }
}

/// What the model is given for `message`, a message that waited during a run
/// (arrived at `at_ms`), as for the current message but without group chatter or
/// system events: a group message in its envelope, a direct one through the
/// inbound pipeline.
pub(crate) fn queued_text(
    options: &PipelineOptions,
    message: &InboundMessage,
    at_ms: u64,
) -> String {
    match message.group_resolution() {
        Some(group) => {
            let sender = sender_label(&message.sender).unwrap_or_else(|| sender_name(message));
            let body = enveloped_body(message, &message.body, options);
            format_envelope(
                &group.channel,
                &group.id,
                Some(from_millis(at_ms)),
                &sender,
                &body,
            )
        }
        None => model_body(message, &message.body, options),
    }
}
