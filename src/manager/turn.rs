//! One call per turn: [`SessionManager::turn`] takes an inbound message and says what to
//! do; [`Turn::complete`] takes the model's reply and says what to send.

use crate::error::Result;
use crate::identity::key::SessionKey;
use crate::inbound::activation::ActivationDecision;
use crate::inbound::attachment::current_message;
use crate::inbound::chat::ChatMessage;
use crate::inbound::chatter::chatter_key;
use crate::inbound::InboundMessage;
use crate::memory::cuts::Cut;
use crate::memory::flush::FlushPlan;
use crate::memory::usage::{EngineSession, TurnUsage};
use crate::reply::payload::ReplyPayload;
use crate::store::entry::SessionEntry;
use crate::transcript::{ChatterSender, SessionEvent, TranscriptRef};

use super::transcripts::record_location;
use super::{LogMessage, Resolution, Resolved, SessionManager};
use crate::exactly_once::claims::LineHolds;
use crate::exactly_once::dedupe::{self, Intake, Seen};
use crate::exactly_once::holders::Hold;
use crate::exactly_once::outcome::{DeliveryReceipt, TurnFailure};
use crate::lane::{Lane, Lanes, Place, QueueOutcome, Resume, RunLease};

/// What the session layer sends after a bare reset (`/new` with nothing after it), in
/// place of a model reply.
pub const DEFAULT_RESET_ACKNOWLEDGEMENT: &str = "New session started.";

/// What a [`Turn`] asks the host to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnAction {
    /// Call the model with [`Turn::messages`] (after the memory flush, when
    /// [`Turn::memory_flush`] has one), then [`Turn::complete`] with its reply.
    Answer,
    /// Group chatter not addressed to the agent: kept as the group's chatter for the
    /// next turn. No model call; [`Turn::complete`] sends nothing.
    StaySilent,
    /// A reset with nothing after it: the new session is ready. No model call;
    /// [`Turn::complete`] sends this acknowledgement.
    Acknowledge(String),
    /// The channel delivered this message again (same message id, within the
    /// manager's [dedupe window](super::SessionManagerBuilder::dedupe_window)): it was
    /// taken by an earlier turn — answered, being answered by another worker, or kept
    /// as chatter. Nothing ran, nothing was logged and no chatter was taken;
    /// [`Turn::complete`] sends nothing.
    Duplicate,
    /// The message arrived during a run of its session and was handled without a turn
    /// of its own (see [`crate::lane`]): answered together with others by another turn,
    /// taken by the running turn at a tool boundary, or dropped by the queue's cap. No
    /// model call; [`Turn::complete`] sends nothing.
    Queued(QueueOutcome),
}

impl TurnAction {
    /// The action's name: `answer`, `stay_silent`, `acknowledge`, `duplicate` or
    /// `queued`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TurnAction::Answer => "answer",
            TurnAction::StaySilent => "stay_silent",
            TurnAction::Acknowledge(_) => "acknowledge",
            TurnAction::Duplicate => "duplicate",
            TurnAction::Queued(_) => "queued",
        }
    }
}

/// The model's reply to a turn, for [`Turn::complete`]: its text (or payloads), and
/// what the host knows about the run.
///
/// ```
/// use agent_sessions::manager::TurnReply;
/// use agent_sessions::memory::TurnUsage;
///
/// let reply = TurnReply::from("Thursday at 9.")
///     .with_usage(TurnUsage::new().input(1_200).output(40).by("openai", "gpt-5"));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct TurnReply {
    /// What the model produced.
    pub payloads: Vec<ReplyPayload>,
    /// Texts a tool already sent during the run (not sent again).
    pub sent_by_tool: Vec<String>,
    /// What the run used.
    pub usage: Option<TurnUsage>,
    /// The engine session it ran in, to resume next time.
    pub engine: Option<EngineSession>,
}

impl TurnReply {
    /// A reply of `payloads`.
    pub fn payloads(payloads: Vec<ReplyPayload>) -> Self {
        TurnReply {
            payloads,
            ..TurnReply::default()
        }
    }

    /// Records the run's usage.
    pub fn with_usage(mut self, usage: TurnUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Records the engine session to resume.
    pub fn with_engine(mut self, engine: EngineSession) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Texts a tool already sent during the run.
    pub fn with_sent_by_tool(mut self, texts: Vec<String>) -> Self {
        self.sent_by_tool = texts;
        self
    }
}

impl From<&str> for TurnReply {
    fn from(text: &str) -> Self {
        TurnReply::payloads(vec![ReplyPayload::text(text)])
    }
}

impl From<String> for TurnReply {
    fn from(text: String) -> Self {
        TurnReply::payloads(vec![ReplyPayload::text(text)])
    }
}

/// How a turn ended, for [`Session::record_turn`](crate::manager::Session::record_turn): the one call after each turn.
///
/// ```
/// use agent_sessions::manager::TurnOutcome;
/// use agent_sessions::memory::{EngineSession, TurnUsage};
///
/// let outcome = TurnOutcome::completed()
///     .with_usage(TurnUsage::tokens(1_200, 340, 14_000, 120).by("anthropic", "claude-opus-4-6"))
///     .with_engine(EngineSession::Sdk { id: "sdk-7".into() })
///     .with_exchange("When is my shift?", "Tomorrow at 9.");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The run was aborted.
    pub aborted: bool,
    /// What the turn used.
    pub usage: Option<TurnUsage>,
    /// The engine session it ran in, to resume next time.
    pub engine: Option<EngineSession>,
    /// The user's message and the reply, for the context summary
    /// ([`Session::record_turn`](super::Session::record_turn); a turn completed with
    /// [`Turn::complete`] leaves the summary to the cuts of its context window).
    pub exchange: Option<(String, String)>,
}

impl TurnOutcome {
    /// A turn that completed.
    pub fn completed() -> Self {
        TurnOutcome::default()
    }

    /// A turn that was aborted.
    pub fn aborted() -> Self {
        TurnOutcome {
            aborted: true,
            ..TurnOutcome::default()
        }
    }

    /// Records the turn's usage.
    pub fn with_usage(mut self, usage: TurnUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Records the engine session to resume.
    pub fn with_engine(mut self, engine: EngineSession) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Updates the context summary with this exchange.
    pub fn with_exchange(mut self, user: impl Into<String>, reply: impl Into<String>) -> Self {
        self.exchange = Some((user.into(), reply.into()));
        self
    }
}

/// One inbound message on its way through the session layer: what to do with it, the
/// conversation for the model, and — once the model has replied — what to send.
///
/// Made by [`SessionManager::turn`]. A turn that is dropped without
/// [`complete`](Turn::complete) (the host gave up, timed out or crashed) leaves its
/// session marked as an aborted run (`abortedLastRun`) and `running`, which the next
/// completed turn clears; nothing else is half done.
///
/// ```
/// use agent_sessions::prelude::*;
/// use agent_sessions::transcript::InMemoryTranscriptStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// let manager = SessionManager::builder(InMemoryStore::new())
///     .transcripts(InMemoryTranscriptStore::new())
///     .build()?;
///
/// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "When is my shift?")).await?;
/// assert_eq!(turn.action(), &TurnAction::Answer);
/// let messages = turn.messages().await?; // what the model sees
/// assert_eq!(messages.last().unwrap().content, "When is my shift?");
/// let sent = turn.complete("Thursday at 9.").await?;
/// assert_eq!(sent[0].text.as_deref(), Some("Thursday at 9."));
///
/// let next = manager.turn(&InboundMessage::direct("telegram", "42", "Thanks!")).await?;
/// let roles: Vec<ChatRole> = next.messages().await?.iter().map(|m| m.role).collect();
/// assert_eq!(roles, [ChatRole::User, ChatRole::Assistant, ChatRole::User]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "a turn does nothing until its reply is completed"]
pub struct Turn<'m> {
    pub(crate) manager: &'m SessionManager,
    pub(crate) message: InboundMessage,
    pub(crate) key: SessionKey,
    action: TurnAction,
    /// Boxed, as the entry: a turn moves through several calls, and stays small.
    resolution: Option<Box<Resolution>>,
    input: Option<String>,
    inbound: Option<SessionEvent>,
    pub(crate) transcript: Option<TranscriptRef>,
    entry: Option<Box<SessionEntry>>,
    flush: Option<FlushPlan>,
    started: std::time::Instant,
    /// The run this turn holds while the model answers: recorded in the session
    /// ([`SessionEntry::run`]), live until the turn ends or is dropped.
    run: Option<Hold>,
    /// The run's fencing token, while this turn holds the session's run.
    pub(crate) fence: Option<u64>,
    /// Renews the run's lease while the turn lives.
    lease: Option<RunLease>,
    /// Whether a message may interrupt its run (the session's queue mode was
    /// `interrupt` when it started).
    pub(crate) interruptible: bool,
    /// When it started, by the manager's clock (epoch milliseconds).
    started_ms: u64,
    /// The delivered messages its reply answers (as the dedupe records name them).
    pub(crate) answering: Vec<String>,
    /// The queued messages it took by steering, which its reply answers too.
    pub(crate) steered: std::sync::Mutex<Vec<String>>,
    /// What its model input cut that no summary stands for yet: summarised once the
    /// reply is returned.
    cut: std::sync::Mutex<Option<Cut>>,
}

impl SessionManager {
    /// Takes `message` through everything that comes before the model — the session it
    /// belongs to (with resets and expiry), group activation and history, queued system
    /// events, the inbound pipeline, the message log and the memory-flush decision — and
    /// returns a [`Turn`] that says what to do.
    ///
    /// With a transcript store, the message is logged as the model sees it, so
    /// [`Turn::messages`] and later turns read the conversation back as it was.
    pub async fn turn(&self, message: &InboundMessage) -> Result<Turn<'_>> {
        self.turn_as(message, &super::anyone).await
    }

    /// [`turn`](Self::turn), when `admit` allows the session (see
    /// [`Mode::Turn`](super::Mode::Turn)).
    #[tracing::instrument(
        name = "turn",
        target = "agent_sessions",
        level = "info",
        skip_all,
        fields(
            channel = %message.channel,
            key = tracing::field::Empty,
            session_id = tracing::field::Empty,
            action = tracing::field::Empty,
        )
    )]
    pub(crate) async fn turn_as(
        &self,
        message: &InboundMessage,
        admit: &super::Admission<'_>,
    ) -> Result<Turn<'_>> {
        self.turn_adopting(message, admit, None).await
    }

    /// [`turn_as`](Self::turn_as), waiting with the queued message `adopt` (whose
    /// waiter is gone) in its own arrival's place.
    pub(crate) async fn turn_adopting(
        &self,
        message: &InboundMessage,
        admit: &super::Admission<'_>,
        adopt: Option<&str>,
    ) -> Result<Turn<'_>> {
        let turn: Result<Turn<'_>> = Box::pin(async {
            let started = std::time::Instant::now();
            let key = self.key_for(message)?;
            // The session as the summary of its last cut left it, when this process is
            // still writing that summary.
            self.cuts.settled(&key).await;
            let mut turn = Turn {
                manager: self,
                message: message.clone(),
                key,
                action: TurnAction::StaySilent,
                resolution: None,
                input: None,
                inbound: None,
                transcript: None,
                entry: None,
                flush: None,
                started,
                run: None,
                fence: None,
                lease: None,
                interruptible: false,
                started_ms: self.seams.clock.now_millis(),
                answering: Vec::new(),
                steered: std::sync::Mutex::default(),
                cut: std::sync::Mutex::default(),
            };
            let run = Hold::new(uuid::Uuid::new_v4().to_string());
            let window = self.settings.dedupe_window;
            let dedupe = (!window.is_zero()).then_some(window);
            let mut intake = dedupe
                .and_then(|_| dedupe::inbound_id(message))
                .map(Intake::new);
            if let Some(command) = crate::lane::queue_command(&message.body) {
                if self.seams.triggers.is_authorized(message) {
                    return Lanes(self).set_queue(turn, command).await;
                }
            }
            // The message's session, unless it was taken before (a duplicate). A message
            // whose earlier turn died is taken over when its line is not in that turn's
            // transcript — or when it is, but the run that logged it died before it
            // answered: this turn takes that run over.
            let resolved = loop {
                let mode = super::Mode::Turn {
                    admit,
                    intake: intake.as_ref(),
                    run: &run,
                    adopt,
                };
                let resolved = self.resolve_in(message, mode).await?;
                let Resolved::Seen(Seen::Unsure(record)) = &resolved else {
                    break resolved;
                };
                let (Some(taking), Some(id)) = (intake.as_mut(), &message.message_id) else {
                    break resolved;
                };
                if taking.take_over.is_some() {
                    break resolved;
                }
                let logged = self
                    .logged_before(&self.key_for(message)?, record, id)
                    .await?;
                // Logged: a duplicate, unless the run that logged it died before it
                // answered.
                let unanswered = logged
                    && Lanes(self)
                        .run_died_answering(&turn.key, &record.id)
                        .await?
                    && !self.answered_before(&turn.key, record).await?;
                if logged && !unanswered {
                    break resolved;
                }
                // Its turn died before logging it, or its run before answering it: this
                // turn takes it.
                taking.take_over = Some(record.holder.clone());
            };
            let (resolution, activation, lane) = match resolved {
                Resolved::Session(resolution, activation, lane) => (*resolution, activation, lane),
                Resolved::Chatter => {
                    // Kept as the group's chatter for the next turn that answers — once
                    // within the window, so a delivery again is a duplicate.
                    if !self
                        .keep_as_chatter(&turn.key, message, &message.body, dedupe)
                        .await?
                    {
                        crate::ops::telemetry::duplicate();
                        turn.action = TurnAction::Duplicate;
                    }
                    return Ok(turn);
                }
                Resolved::Seen(_) => {
                    crate::ops::telemetry::duplicate();
                    turn.action = TurnAction::Duplicate;
                    return Ok(turn);
                }
            };
            let now_ms = self.seams.clock.now_millis();
            // The message was acted on: a delivery again within the window is a duplicate.
            let taken = |intake: Option<Intake>| {
                if let Some(intake) = intake {
                    intake.hold.done(now_ms, window);
                }
            };
            turn.key = resolution.key.clone();
            if resolution.reset_triggered {
                // An explicit reset is a clean start: the group's chatter from before it is
                // not carried into the new session.
                if let Some(history) = chatter_key(&resolution.key, message) {
                    self.seams.history.clear(&history).await?;
                }
            }
            let bare = resolution.body.trim().is_empty() && message.attachments.is_empty();
            if resolution.reset_triggered && bare {
                taken(intake);
                turn.action = TurnAction::Acknowledge(self.settings.reset_acknowledgement.clone());
                turn.entry = Some(Box::new(resolution.entry().clone()));
                turn.resolution = Some(Box::new(resolution));
                return Ok(turn);
            }
            // One run at a time: a message that arrived during a run waits for its place.
            let place = match lane.unwrap_or(Lane::Gone(QueueOutcome::Dropped)) {
                Lane::Run {
                    fence,
                    collected,
                    dropped,
                    resumed,
                    inherited,
                    before,
                } => Place {
                    fence,
                    own_at: collected.len(),
                    // A sweep answering a message without a channel id that a dead run
                    // took: its line names it by its queue id.
                    queued_as: adopt
                        .filter(|_| dedupe::inbound_id(message).is_none())
                        .map(crate::lane::queued_id),
                    collected,
                    dropped,
                    resumed,
                    answering: crate::lane::answering(resolution.entry()),
                    inherited,
                    before,
                },
                Lane::Queued { id } => {
                    crate::ops::telemetry::queued();
                    match Lanes(self)
                        .wait_for_place(&turn.key, message, &id, &run)
                        .await?
                    {
                        Ok(place) => place,
                        Err(outcome) => {
                            taken(intake);
                            turn.action = TurnAction::Queued(outcome);
                            turn.entry = Some(Box::new(resolution.entry().clone()));
                            turn.resolution = Some(Box::new(resolution));
                            return Ok(turn);
                        }
                    }
                }
                Lane::Answering => {
                    crate::ops::telemetry::duplicate();
                    turn.action = TurnAction::Duplicate;
                    return Ok(turn);
                }
                Lane::Gone(outcome) => {
                    taken(intake);
                    if outcome == QueueOutcome::Dropped {
                        crate::ops::telemetry::dropped(1);
                    }
                    turn.action = TurnAction::Queued(outcome);
                    turn.resolution = Some(Box::new(resolution));
                    return Ok(turn);
                }
            };
            turn.fence = Some(place.fence);
            turn.answering = place.answering.clone();
            turn.interruptible = crate::lane::effective(
                resolution.entry(),
                &self.settings.queue,
                crate::lane::lane_channel(message).as_deref(),
            )
            .mode
                == crate::lane::QueueMode::Interrupt;
            // Decided in the same atomic update as the session (a direct message always runs).
            let activation = activation.unwrap_or_else(|| {
                crate::inbound::activation::decide(
                    message,
                    resolution.entry().group_activation.as_ref(),
                    self.settings.owner_chatter,
                )
            });
            let entry = resolution.entry().clone();
            // A run that died after logging this message: its line is this turn's input.
            let resumed = if place.resumed {
                match Lanes(self)
                    .resume_input(&mut turn, &entry, place.queued_as.as_deref())
                    .await?
                {
                    Resume::Input(text) => Some(text),
                    Resume::NotLogged => None,
                    Resume::Answered => {
                        // The dead run answered it before it died: nothing to do.
                        Lanes(self).give_back(&turn.key, place.fence).await?;
                        taken(intake);
                        crate::ops::telemetry::duplicate();
                        turn.action = TurnAction::Duplicate;
                        return Ok(turn);
                    }
                }
            } else {
                None
            };
            let resumed_line = resumed.is_some();
            let mut place = place;
            Lanes(self)
                .settle_takeover(&mut turn, &entry, &mut place, resumed_line)
                .await?;
            let (text, entry) = if let Some(text) = resumed {
                taken(intake);
                (text, entry)
            } else if self.seams.transcripts.is_some() {
                let holds = LineHolds {
                    message: intake.map(|intake| (intake.hold, now_ms, window)),
                    run: run.writing(),
                };
                self.log_input(&mut turn, &resolution, &activation, entry, &place, holds)
                    .await?
            } else {
                let text = self.prepare_turn(&resolution, message, &activation).await;
                let text = Lanes(self).with_collected(text, &place, &activation);
                taken(intake);
                (text, entry)
            };
            turn.flush = self.seams.flush_guard.plan(&entry);
            turn.entry = Some(Box::new(entry));
            turn.action = TurnAction::Answer;
            turn.lease = Some(Lanes(self).hold_run(&turn.key, place.fence));
            turn.run = Some(run);
            turn.input = Some(text);
            turn.resolution = Some(Box::new(resolution));
            Ok(turn)
        })
        .await;
        let span = tracing::Span::current();
        match &turn {
            Ok(turn) => {
                span.record("key", tracing::field::display(&turn.key));
                if let Some(entry) = &turn.entry {
                    span.record("session_id", entry.session_id.as_str());
                }
                span.record("action", turn.action.as_str());
            }
            Err(error) => crate::ops::telemetry::failed(error),
        }
        turn
    }

    /// Builds the model's input for `turn` (the session `entry` that `resolution`
    /// chose) and logs it in the session's transcript, which is created on first use:
    /// the group's chatter claimed and settled by that line, the system events drained
    /// (and queued again if the line cannot be logged), and the message marked taken
    /// once it is logged (`holds`). Returns the input and the entry as it is now.
    async fn log_input(
        &self,
        turn: &mut Turn<'_>,
        resolution: &Resolution,
        activation: &ActivationDecision,
        entry: SessionEntry,
        place: &Place,
        holds: LineHolds,
    ) -> Result<(String, SessionEntry)> {
        let message = &turn.message;
        let (transcript, mut entry, location) =
            self.prepare_transcript_for(&turn.key, entry).await?;
        if let Some(location) = location {
            // A new transcript: its location goes in the entry before anything is
            // written to it (the first message of a session).
            let session_id = entry.session_id.clone();
            entry = self
                .change(&turn.key, |current| {
                    record_location(current, &session_id, &location)
                })
                .await?
                .entry;
        }
        // The group's chatter is claimed, shown, and settled by the inbound line that
        // carries it: each line reaches exactly one model input.
        let claimed = match chatter_key(&turn.key, message) {
            Some(group) => match self.claim_chatter(&group, &transcript).await {
                Ok(claimed) => Some(claimed),
                Err(error) => {
                    tracing::warn!(%group, %error, "could not claim the group's chatter; answering without it");
                    None
                }
            },
            None => None,
        };
        let history = claimed.as_ref().map(|c| c.entries.as_slice());
        let (text, drained) = self
            .model_input(resolution, message, activation, history.unwrap_or_default())
            .await;
        let text = Lanes(self).with_collected(text, place, activation);
        let log = LogMessage::from_inbound(message).with_text(text.clone());
        let mut line = self.log_line(&turn.key, &entry, log);
        if let Some(log) = line.log.as_mut() {
            if let Some(claimed) = &claimed {
                log.message_id = Some(claimed.claim.id().to_owned());
                for entry in &claimed.entries {
                    let Some(id) = &entry.sender_id else { continue };
                    if !log
                        .chatter
                        .iter()
                        .any(|c| c.sender == entry.sender && &c.sender_id == id)
                    {
                        log.chatter.push(ChatterSender {
                            sender: entry.sender.clone(),
                            sender_id: id.clone(),
                        });
                    }
                }
            }
            // What a redelivery of the message finds, whatever chat it came from — and of
            // the messages it answers with its own.
            log.inbound_id = dedupe::inbound_id(message);
            log.collected = place
                .collected
                .iter()
                .map(crate::lane::tracked_id)
                .chain(place.queued_as.clone())
                .collect();
            log.attachments = Lanes(self).collected_attachments(&message.attachments, place);
        }
        match self.log_claimed(&transcript, line, claimed, holds).await {
            Ok(mut logged) => turn.inbound = logged.pop(),
            Err(error) => {
                // The events this turn drained are for the turn that answers.
                self.requeue_system_events(&turn.key, drained).await;
                return Err(error);
            }
        }
        turn.transcript = Some(transcript);
        Ok((text, entry))
    }
}

impl<'m> Turn<'m> {
    /// What to do.
    pub fn action(&self) -> &TurnAction {
        &self.action
    }

    /// The message the turn took.
    pub(crate) fn message(&self) -> &InboundMessage {
        &self.message
    }

    /// Says what the turn does (`/queue`: an acknowledgement).
    pub(crate) fn set_action(&mut self, action: TurnAction) {
        self.action = action;
    }

    /// Makes the turn answer its message as a run that died logged it: `event` in
    /// `transcript` is its input line.
    pub(crate) fn resume(&mut self, event: SessionEvent, transcript: TranscriptRef) {
        self.inbound = Some(event);
        self.transcript = Some(transcript);
    }

    /// Whether the model is to be called.
    pub fn needs_model(&self) -> bool {
        self.action == TurnAction::Answer
    }

    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.key
    }

    /// Which session the message went to, and why (`None` for group chatter, which
    /// does not open a session turn).
    pub fn resolution(&self) -> Option<&Resolution> {
        self.resolution.as_deref()
    }

    /// The model's input for this message: the message after the inbound pipeline, with
    /// group chatter and system events (`None` unless the action is
    /// [`TurnAction::Answer`]).
    pub fn input(&self) -> Option<&str> {
        self.input.as_deref()
    }

    /// The memory flush to run before the model answers, if one is due: run its prompt,
    /// send nothing of its reply, then call [`complete_memory_flush`](Self::complete_memory_flush).
    pub fn memory_flush(&self) -> Option<&FlushPlan> {
        self.flush.as_ref()
    }

    /// Records that the memory flush ran (its reply is never sent), so it does not run
    /// again until the next compaction.
    pub async fn complete_memory_flush(&mut self) -> Result<()> {
        if self.flush.take().is_some() {
            let stored = self
                .manager
                .session(&self.key)
                .record_memory_flush()
                .await?;
            self.entry = Some(Box::new(stored.entry));
        }
        Ok(())
    }

    /// The conversation as the model should see it: the session's earlier turns as
    /// they were sent to the model and answered (tool calls and results included) from
    /// the last compaction on (its summary first, as a system message), the newest that
    /// fit the session's token budget, with the context summary standing for older turns
    /// the budget cut, and this turn's input last, once.
    ///
    /// The budget is the context window the session records (from the model's usage),
    /// else [`SessionManagerBuilder::context_window`](super::SessionManagerBuilder::context_window);
    /// tokens are counted by the manager's
    /// [`TokenCounter`](crate::inbound::chat::TokenCounter). Empty unless the action is
    /// [`TurnAction::Answer`]. Needs a transcript store
    /// ([`Error::NotConfigured`](crate::Error::NotConfigured) otherwise), which keeps
    /// the conversation: without one every turn would look like the first.
    pub async fn messages(&self) -> Result<Vec<ChatMessage>> {
        self.messages_with(Vec::new()).await
    }

    /// [`messages`](Self::messages) after the host's own `system` messages (its system
    /// prompt, tool descriptions), which come first and count against the budget.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # use agent_sessions::transcript::InMemoryTranscriptStore;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let manager = SessionManager::builder(InMemoryStore::new()).transcripts(InMemoryTranscriptStore::new()).build()?;
    /// let turn = manager.turn(&InboundMessage::direct("telegram", "42", "hi")).await?;
    /// let messages = turn.messages_with(vec![ChatMessage::system("You are a helpful assistant.")]).await?;
    /// assert_eq!(messages[0].role, ChatRole::System);
    /// assert_eq!(messages[1].content, "hi");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn messages_with(&self, system: Vec<ChatMessage>) -> Result<Vec<ChatMessage>> {
        let (Some(input), Some(entry)) = (&self.input, &self.entry) else {
            return Ok(Vec::new());
        };
        // The summary of the last cut, when this process is still writing it, then the
        // window it gave.
        let summarised;
        let entry = match self.manager.cuts.settled(&self.key).await {
            false => entry,
            true => {
                summarised = self.manager.existing(&self.key).await?.entry;
                match summarised.session_id == entry.session_id {
                    true => &summarised,
                    false => entry,
                }
            }
        };
        let skip = self.inbound.as_ref().map(|event| event.offset);
        let history = self
            .manager
            .history_messages(&self.key, entry, skip)
            .await?;
        let logged = self.inbound.as_ref().map(|event| &event.entry);
        let line = logged.and_then(|entry| entry.id.as_deref());
        let current = (
            current_message(input, logged, &self.message.attachments),
            line,
        );
        let (messages, window, cut) = self.manager.fit_messages(entry, system, history, current)?;
        let cut = match cut {
            Some(cut) => Some(self.manager.reach_back(&self.key, entry, skip, cut).await?),
            None => None,
        };
        // A cut: the next turns start where this one does, with the same summary.
        if window != entry.window_start {
            crate::inbound::window::record_window(
                &*self.manager.seams.store,
                &self.key,
                entry,
                self.fence,
                window,
            )
            .await?;
        }
        *self
            .cut
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = cut;
        Ok(messages)
    }

    /// Ends a turn whose model call failed, keeping or dropping its input (see
    /// [`TurnFailure`]): a mark in the transcript names the inbound line, the run ends
    /// as aborted (`abortedLastRun`, status `idle`), and the failure is counted
    /// (`agent_sessions_turns_failed_total`). With [`TurnFailure::DropInput`] the input
    /// stays in the transcript and is never sent to the model again; with
    /// [`TurnFailure::KeepInput`] the next turn's model sees it, before its own message.
    /// A turn that asked for no model call has nothing to fail: `Ok(())`.
    ///
    /// A turn dropped without `complete` or `fail` (the host gave up, crashed) stays an
    /// aborted run whose input is kept.
    pub async fn fail(self, failure: TurnFailure) -> Result<()> {
        let (TurnAction::Answer, Some(entry)) = (&self.action, &self.entry) else {
            return Ok(());
        };
        let inbound = self
            .inbound
            .as_ref()
            .and_then(|event| event.entry.id.as_deref());
        let failed = self
            .manager
            .record_failure(
                &self.key,
                self.transcript.as_ref(),
                inbound,
                failure,
                entry,
                self.fence,
            )
            .await;
        crate::lane::wake(&self.manager.waker, &self.key);
        failed
    }

    /// Finishes the turn with the model's `reply` and returns what to send.
    ///
    /// For an answered turn the reply goes through the reply pipeline (silence markers,
    /// heartbeat tokens, reply directives, texts a tool already sent) and the send
    /// policy; what is sent is logged; then the turn count, usage, engine session and
    /// the end of the run are recorded in one store update. When the turn's
    /// [`messages`](Self::messages) cut the conversation, the summary of what they left
    /// out is written afterwards, in the background (the manager's
    /// [`Summarizer`](crate::memory::Summarizer)): the reply does not wait for it, and
    /// the session's next turn in this process starts from it. An acknowledged reset
    /// returns (and logs) the acknowledgement whatever `reply` is; group chatter and a
    /// duplicate return nothing.
    ///
    /// Each logged payload carries its [receipt](ReplyPayload::receipt): once the host
    /// has sent it, [`SessionManager::report_delivery`] records whether the channel
    /// took it, and a reply the channel refused is left out of what the model sees.
    #[tracing::instrument(
        name = "turn.complete",
        target = "agent_sessions",
        level = "info",
        skip_all,
        fields(
            key = %self.key,
            session_id = self.entry.as_ref().map(|entry| entry.session_id.as_str()),
            payloads = tracing::field::Empty,
        )
    )]
    pub async fn complete(self, reply: impl Into<TurnReply>) -> Result<Vec<ReplyPayload>> {
        let reply = reply.into();
        // Boxed: the completion holds store updates; callers' futures stay small.
        let sent: Result<Vec<ReplyPayload>> = Box::pin(async move {
            let manager = self.manager;
            match (&self.action, &self.resolution) {
                (TurnAction::Answer, Some(resolution)) => {
                    // A run can be lost only to a message that interrupts it, or to a
                    // take-over once its lease looks run out: in those cases the session
                    // is asked first, so a lost run logs nothing. Otherwise the update
                    // that ends the run checks its token, with no extra round trip.
                    let half_lease = crate::exactly_once::holders::LEASE / 2;
                    let ran_ms = manager
                        .seams
                        .clock
                        .now_millis()
                        .saturating_sub(self.started_ms);
                    let at_risk = self.interruptible
                        || self.started.elapsed() >= half_lease
                        || u128::from(ran_ms) >= half_lease.as_millis();
                    if at_risk && self.interrupted().await? {
                        crate::ops::telemetry::run_lost();
                        return Err(crate::Error::RunLost {
                            key: self.key.clone(),
                        });
                    }
                    let mut payloads = manager
                        .finish_turn(
                            resolution,
                            &self.message,
                            reply.payloads,
                            reply.sent_by_tool,
                        )
                        .await?;
                    let (sent, parts) = ReplyPayload::sent_text(&payloads);
                    if let (Some(transcript), Some(entry), false) =
                        (&self.transcript, &self.entry, sent.is_empty())
                    {
                        let mut log = LogMessage::outbound(sent.clone())
                            .took(self.started.elapsed().as_millis() as u64);
                        log.log.correlation_id = self.message.message_id.clone();
                        log.log.collected = self.answering.clone();
                        log.log.collected.extend(
                            self.steered
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .iter()
                                .cloned(),
                        );
                        log.log.parts = parts;
                        log.usage = reply.usage.as_ref().map(TurnUsage::to_transcript_usage);
                        let line = manager.log_line(&self.key, entry, log);
                        // A host that drops `complete` before it returns sent nothing:
                        // the reply is not held to its end, and a delivery of the
                        // message again is answered unless its line landed.
                        let line = manager.append_line(&self.key, transcript, line).await?;
                        DeliveryReceipt::give(&mut payloads, &self.key, entry, &line);
                    }
                    let mut outcome = TurnOutcome::completed();
                    outcome.usage = reply.usage;
                    outcome.engine = reply.engine;
                    let ended = manager
                        .session(&self.key)
                        .end_run(outcome, self.fence, self.entry.as_deref())
                        .await;
                    crate::lane::wake(&manager.waker, &self.key);
                    // What the input cut is summarised now, off the reply's path.
                    let cut = self
                        .cut
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .take();
                    if let (Ok(_), Some(cut)) = (&ended, cut) {
                        manager.cuts.write(
                            self.key.clone(),
                            cut,
                            manager.seams.summarizer.clone(),
                            manager.seams.store.clone(),
                        );
                    }
                    if let Err(crate::Error::RunLost { .. }) = &ended {
                        // Lost after its reply was logged (a reset, a take-over): the
                        // line stays, for operators, and is marked not sent, so the
                        // model never believes it said it.
                        let lost = crate::exactly_once::Delivery::Failed {
                            reason: "not sent: the run was lost".into(),
                        };
                        for payload in &payloads {
                            if let Err(error) =
                                manager.report_delivery(payload, lost.clone()).await
                            {
                                tracing::warn!(%error, "a lost run's reply could not be marked not sent");
                            }
                        }
                    }
                    ended?;
                    Ok(payloads)
                }
                (TurnAction::Acknowledge(text), _) => {
                    let mut payloads = vec![ReplyPayload::text(text.clone())];
                    if manager.seams.transcripts.is_some() {
                        let logged = manager
                            .session(&self.key)
                            .log_message(LogMessage::outbound(text.clone()))
                            .await;
                        match (logged, &self.entry) {
                            (Ok(line), Some(entry)) => {
                                DeliveryReceipt::give(&mut payloads, &self.key, entry, &line)
                            }
                            // A command refused before the key had a session: there
                            // is no conversation to log the answer in.
                            (Ok(_), None) | (Err(crate::Error::NotFound { .. }), _) => {}
                            (Err(error), _) => return Err(error),
                        }
                    }
                    Ok(payloads)
                }
                _ => Ok(Vec::new()),
            }
        })
        .await;
        match &sent {
            Ok(payloads) => {
                tracing::Span::current().record("payloads", payloads.len() as u64);
            }
            Err(error) => crate::ops::telemetry::failed(error),
        }
        sent
    }
}
