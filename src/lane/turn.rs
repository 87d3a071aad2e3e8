//! A running turn's side of the lane: the messages steered to it at a tool boundary,
//! and whether it lost its run.

use crate::inbound::model_input::queued_text;
use std::time::Duration;

use crate::error::Result;
use crate::exactly_once::dedupe;
use crate::inbound::InboundMessage;
use crate::manager::{LogMessage, Turn};

impl Turn<'_> {
    /// The messages that arrived for this session while this turn runs, for the model
    /// at its next tool boundary — when the session's queue mode steers
    /// ([`QueueMode::Steer`](crate::lane::QueueMode::Steer) or `steer-backlog`), else
    /// none. Each is handed over once: the turns that wait with them learn that they
    /// were taken ([`QueueOutcome::Steered`](crate::lane::QueueOutcome::Steered)), and in `steer-backlog` they get a
    /// follow-up turn too. Each is logged in the session's transcript as a user
    /// message, so the conversation keeps it and a delivery again of it is a
    /// duplicate; give them to the model as user messages before its next call (and
    /// answer the tool calls not yet run in the batch as skipped, as OpenClaw does).
    /// None once the turn lost its run.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let manager = SessionManager::builder(InMemoryStore::new()).build()?;
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "book me a table")).await?;
    /// // … the model calls a tool; at the boundary:
    /// for message in turn.steering().await? {
    ///     println!("the user added: {}", message.body);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn steering(&self) -> Result<Vec<InboundMessage>> {
        let Some(fence) = self.fence else {
            return Ok(Vec::new());
        };
        let channel = crate::lane::lane_channel(&self.message);
        let queue = &self.manager.settings.queue;
        let mut taken = Vec::new();
        let session = self
            .manager
            .seams
            .store
            .apply(&self.key, &mut |slot, _| {
                taken = match slot.as_mut() {
                    Some(entry) => {
                        let settings = crate::lane::effective(entry, queue, channel.as_deref());
                        crate::lane::steer(entry, fence, &settings)
                    }
                    None => Vec::new(),
                };
                Ok(())
            })
            .await?;
        crate::ops::telemetry::steered(taken.len());
        // Its reply answers them (a run that takes this one over can tell).
        self.steered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(taken.iter().map(crate::lane::tracked_id));
        let messages: Vec<(InboundMessage, u64, String)> = taken
            .into_iter()
            .filter_map(|queued| {
                let tracked = crate::lane::tracked_id(&queued);
                Some((
                    serde_json::from_value(queued.message).ok()?,
                    queued.at,
                    tracked,
                ))
            })
            .collect();
        // The conversation keeps what the model is given: each message as a user line,
        // which a delivery again of it then finds.
        if let (Some(transcript), Some(session)) = (&self.transcript, &session) {
            let entry = &session.entry;
            let lines = messages
                .iter()
                .map(|(message, at, tracked)| {
                    let activation = crate::inbound::activation::decide(
                        message,
                        entry.group_activation.as_ref(),
                        self.manager.settings.owner_chatter,
                    );
                    let options = self.manager.pipeline_options(activation.mark_for_context);
                    let text = queued_text(&options, message, *at);
                    let log = LogMessage::from_inbound(message).with_text(text);
                    let mut line = self.manager.log_line(&self.key, entry, log);
                    if let Some(log) = line.log.as_mut() {
                        log.inbound_id = dedupe::inbound_id(message);
                        // One without a channel id, by the id it was queued as.
                        if log.inbound_id.is_none() {
                            log.collected = vec![tracked.clone()];
                        }
                    }
                    line
                })
                .collect::<Vec<_>>();
            if !lines.is_empty() {
                self.manager
                    .transcript_store()?
                    .append(transcript, lines)
                    .await?;
            }
        }
        Ok(messages.into_iter().map(|(message, ..)| message).collect())
    }

    /// Whether this turn lost its session's run: a message interrupted it
    /// ([`QueueMode::Interrupt`](crate::lane::QueueMode::Interrupt)), or another turn
    /// took the run over while this one was thought gone. Its
    /// [`complete`](Self::complete) is then refused ([`Error::RunLost`](crate::Error::RunLost)):
    /// stop the model and send nothing. `false` for a turn that holds no run.
    pub async fn interrupted(&self) -> Result<bool> {
        let Some(fence) = self.fence else {
            return Ok(false);
        };
        Ok(self
            .manager
            .seams
            .store
            .get(&self.key)
            .await?
            .is_none_or(|session| crate::lane::interrupted(&session.entry, fence)))
    }

    /// Resolves once this turn has lost its run (see [`interrupted`](Self::interrupted)):
    /// race it against the model call to stop a run that was interrupted. It looks
    /// every 50 ms in `interrupt` mode, every 15 s otherwise (where only a turn paused
    /// past its lease loses its run); never resolves for a turn that holds no run.
    pub async fn interruption(&self) {
        if self.fence.is_none() {
            return std::future::pending().await;
        }
        // In `interrupt` mode a newer message takes the run at any moment; otherwise
        // only a turn paused past its lease loses it, so a look now and then will do.
        let every = if self.interruptible {
            Duration::from_millis(50)
        } else {
            crate::exactly_once::holders::LEASE / 8
        };
        loop {
            if self.interrupted().await.unwrap_or(false) {
                return;
            }
            tokio::time::sleep(every).await;
        }
    }
}
