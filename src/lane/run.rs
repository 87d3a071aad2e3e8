//! The manager's side of the lane: a queued message's turn waiting for its place, a
//! running turn holding (and renewing) the run, `/queue`, and a run taken over.

use crate::inbound::model_input::queued_text;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::wait::POLL;
use super::{effective, take, tracked_id, QueueCommand, QueueOutcome, Take};
use crate::error::Result;
use crate::exactly_once::holders::{Hold, LEASE};
use crate::identity::key::{normalize_channel, SessionKey};
use crate::inbound::activation::ActivationDecision;
use crate::inbound::InboundMessage;
use crate::manager::{SessionManager, Turn, TurnAction};
use crate::store::entry::{QueueDropped, QueuedMessage, SessionEntry};
use crate::store::SessionStore;
use crate::transcript::{Direction, TranscriptRef};

/// Where a turn runs: the run's fencing token, and what it answers besides its own
/// message.
#[derive(Debug)]
pub(crate) struct Place {
    pub(crate) fence: u64,
    /// The messages that waited with it, oldest first (its own not among them).
    pub(crate) collected: Vec<QueuedMessage>,
    /// Where its own message is among them, by arrival.
    pub(crate) own_at: usize,
    /// Its own message's id as the run answers it, when the message waited in the
    /// queue with no channel id (`queued:<id>`): its line names it, so that a run that
    /// takes this one over can tell it was logged.
    pub(crate) queued_as: Option<String>,
    /// What the queue's cap dropped, for one line of its input.
    pub(crate) dropped: Option<QueueDropped>,
    /// Its own message was answered by a run that died before it replied (it may
    /// have logged it): the turn resumes that line, or logs its own.
    pub(crate) resumed: bool,
    /// Every delivered message the run answers, as the session's run records them
    /// (those of a dead run it took over too).
    pub(crate) answering: Vec<String>,
    /// The queued messages the run it took over had taken: those that run never logged
    /// this one answers.
    pub(crate) inherited: Vec<QueuedMessage>,
    /// The holder of the run it took over, if it took one over.
    pub(crate) before: Option<String>,
}

/// What a turn that took over a dead run finds of the line it was to resume.
pub(crate) enum Resume {
    /// The line, whose text is the turn's input.
    Input(String),
    /// A reply to it: nothing is left to answer.
    Answered,
    /// No line: the turn logs its own.
    NotLogged,
}

/// The runs this manager's turns hold, by session: one task renews all their leases
/// (so a holder on another host is not taken for gone), started with the first.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Arc<Mutex<HashMap<SessionKey, u64>>>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// A running turn's hold on its session's run (`fence`): renewed with the manager's
/// other runs until it is dropped.
#[derive(Debug)]
pub(crate) struct RunLease {
    held: Arc<Mutex<HashMap<SessionKey, u64>>>,
    key: SessionKey,
    fence: u64,
}

impl Drop for RunLease {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.get(&self.key) == Some(&self.fence) {
            held.remove(&self.key);
        }
    }
}

/// The channel a message's queue settings are chosen by: its group's, else its own.
pub(crate) fn lane_channel(message: &InboundMessage) -> Option<String> {
    message
        .group_resolution()
        .map(|group| group.channel)
        .or_else(|| normalize_channel(&message.channel))
}

/// The manager's side of the lane, for the turn pipeline: `/queue`, a queued message's
/// turn waiting for its place, a dead run taken over, collected input, run leases.
pub(crate) struct Lanes<'m>(pub(crate) &'m SessionManager);

impl<'m> Lanes<'m> {
    /// `/queue <mode> [debounce:…] [cap:…] [drop:…]` from a sender allowed to reset:
    /// sets the session's queue settings and acknowledges them (or says what did not
    /// parse). No model call.
    pub(crate) async fn set_queue(
        &self,
        mut turn: Turn<'m>,
        command: std::result::Result<QueueCommand, String>,
    ) -> Result<Turn<'m>> {
        let text = match command {
            Ok(command) => {
                let now_ms = self.0.seams.clock.now_millis();
                let stored = self
                    .0
                    .seams
                    .store
                    .apply(turn.key(), &mut |slot, _| {
                        let entry = slot.get_or_insert_with(|| {
                            crate::inbound::record::start_session(None, now_ms)
                        });
                        command.apply(entry);
                        Ok(())
                    })
                    .await?;
                let settings = stored.as_ref().map(|s| {
                    effective(
                        &s.entry,
                        &self.0.settings.queue,
                        lane_channel(turn.message()).as_deref(),
                    )
                });
                match settings {
                    Some(s) => format!(
                        "Queue mode set to {} (debounce {} ms, cap {}, drop {}).",
                        s.mode,
                        s.debounce.as_millis(),
                        s.cap,
                        s.drop
                    ),
                    None => "Queue settings unchanged.".to_owned(),
                }
            }
            Err(problem) => format!(
                "Queue settings unchanged: {problem}. Modes: collect, followup, steer, \
                 steer-backlog, interrupt; options: debounce:<ms|Ns>, cap:<n>, \
                 drop:<old|new|summarize>."
            ),
        };
        turn.set_action(TurnAction::Acknowledge(text));
        Ok(turn)
    }

    /// Whether the session under `key` has a run whose holder is gone, which was
    /// answering the message `inbound_id` (it was logged, never answered).
    pub(crate) async fn run_died_answering(
        &self,
        key: &SessionKey,
        inbound_id: &str,
    ) -> Result<bool> {
        let now_ms = self.0.seams.clock.now_millis();
        Ok(self.0.seams.store.get(key).await?.is_some_and(|session| {
            !super::decide::live(&session.entry, now_ms)
                && session
                    .entry
                    .run
                    .as_ref()
                    .is_some_and(|run| run.answering.iter().any(|id| id == inbound_id))
        }))
    }

    /// Waits, for `message` queued under `queued_id` by the turn `run`, until it runs
    /// (its place) or was handled without it (how).
    pub(crate) async fn wait_for_place(
        &self,
        key: &SessionKey,
        message: &InboundMessage,
        queued_id: &str,
        run: &Hold,
    ) -> Result<std::result::Result<Place, QueueOutcome>> {
        let channel = lane_channel(message);
        let notify = self.0.waker.waiting_on(key);
        let waited = std::time::Instant::now();
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now_ms = self.0.seams.clock.now_millis();
            let mut found = None;
            self.0
                .seams
                .store
                .apply(key, &mut |slot, _| {
                    found = Some(match slot {
                        None => Take::Gone(QueueOutcome::Collected),
                        Some(entry) => {
                            let settings =
                                effective(entry, &self.0.settings.queue, channel.as_deref());
                            take(entry, queued_id, run.holder(), &settings, now_ms)
                        }
                    });
                    Ok(())
                })
                .await?;
            match found.expect("the store ran the update") {
                Take::Run {
                    fence,
                    mut taken,
                    own_at,
                    dropped,
                    answering,
                    inherited,
                    before,
                    resumed,
                } => {
                    let own = taken.remove(own_at);
                    crate::ops::telemetry::queue_waited(waited.elapsed(), taken.len());
                    return Ok(Ok(Place {
                        fence,
                        collected: taken,
                        own_at,
                        queued_as: own.inbound_id.is_none().then(|| tracked_id(&own)),
                        dropped,
                        resumed,
                        answering,
                        inherited,
                        before,
                    }));
                }
                Take::Gone(outcome) => {
                    // Collected and steered messages were counted by the run that took
                    // them (once, even when no turn waits with them any more).
                    if outcome == QueueOutcome::Dropped {
                        crate::ops::telemetry::dropped(1);
                    }
                    return Ok(Err(outcome));
                }
                Take::Wait { until } => {
                    let pause = until
                        .map(|until| Duration::from_millis(until.saturating_sub(now_ms)))
                        .unwrap_or(POLL)
                        .clamp(Duration::from_millis(1), POLL);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    /// The input of a turn that took over the run that logged its message and died:
    /// the logged line is its input (it is not logged again). A message without a
    /// channel id is found under the id it was queued as (`queued_as`). [`Resume::NotLogged`]
    /// when the line is not there after all (the run died before logging it), and
    /// [`Resume::Answered`] when a reply to it is (the run died after answering, before
    /// it gave the run back).
    pub(crate) async fn resume_input(
        &self,
        turn: &mut Turn<'_>,
        entry: &SessionEntry,
        queued_as: Option<&str>,
    ) -> Result<Resume> {
        let inbound_id = crate::exactly_once::dedupe::inbound_id(turn.message())
            .or_else(|| queued_as.map(str::to_owned));
        if let (Some(transcripts), Some(inbound_id)) =
            (self.0.seams.transcripts.as_deref(), inbound_id)
        {
            let transcript = TranscriptRef::of(turn.key(), entry, &self.0.settings.default_agent);
            let logged = crate::exactly_once::claims::find_line(transcripts, &transcript, |line| {
                line.log.as_ref().is_some_and(|log| {
                    log.direction == Some(Direction::Inbound)
                        && (log.inbound_id.as_deref() == Some(inbound_id.as_str())
                            || log.collected.contains(&inbound_id))
                })
            })
            .await?;
            if let Some(event) = logged {
                crate::ops::telemetry::run_taken_over();
                let answered =
                    crate::exactly_once::claims::has_line(transcripts, &transcript, |line| {
                        line.log.as_ref().is_some_and(|log| {
                            log.direction == Some(Direction::Outbound)
                                && log.collected.contains(&inbound_id)
                        })
                    })
                    .await?;
                if answered {
                    return Ok(Resume::Answered);
                }
                // The reply answers what the line asked, no more: messages the dead run
                // took but never logged are not claimed as answered (a delivery again
                // of one is taken over once this run ends).
                if let Some(log) = &event.entry.log {
                    turn.answering.retain(|id| {
                        log.inbound_id.as_deref() == Some(id.as_str()) || log.collected.contains(id)
                    });
                }
                let text = event
                    .entry
                    .message
                    .as_ref()
                    .map(|m| m.text())
                    .unwrap_or_default();
                turn.resume(event, transcript);
                return Ok(Resume::Input(text));
            }
        }
        Ok(Resume::NotLogged)
    }

    /// Gives back the run `fence` of `key`'s session, held by a turn that has nothing
    /// to answer.
    pub(crate) async fn give_back(&self, key: &SessionKey, fence: u64) -> Result<()> {
        self.0
            .seams
            .store
            .apply(key, &mut |slot, _| {
                if let Some(entry) = slot.as_mut() {
                    super::release(entry, fence);
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Settles what a turn that took over a dead run answers, before it logs its
    /// input: its own message and the queued ones it took, the logged line it resumes
    /// (`resumed_line`: what that line asked is already all `turn` answers of it), and
    /// — of the other messages the dead run was answering — those logged before (the
    /// model sees them in the conversation). Of those never logged, the queued messages
    /// the dead run had taken are answered by this turn with its own (`place` gains
    /// them), or, when it resumes a line, go back to the queue for the next turn; the
    /// rest are let go from the run: a delivery again of one is answered by a turn of
    /// its own, not taken for a duplicate of a reply that never saw it. Costs nothing
    /// unless a dead run was taken over.
    pub(crate) async fn settle_takeover(
        &self,
        turn: &mut Turn<'_>,
        entry: &SessionEntry,
        place: &mut Place,
        resumed_line: bool,
    ) -> Result<()> {
        // A turn that was to resume a line the dead run never wrote logs its own.
        if !resumed_line {
            let own = crate::exactly_once::dedupe::inbound_id(turn.message());
            turn.answering.retain(|id| {
                own.as_deref() == Some(id.as_str())
                    || place.queued_as.as_deref() == Some(id.as_str())
                    || place.collected.iter().any(|q| tracked_id(q) == *id)
            });
        }
        let others: Vec<String> = place
            .answering
            .iter()
            .filter(|id| !turn.answering.contains(id))
            .cloned()
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let (logged, answered) = self.found(turn.key(), entry, &others).await?;
        let mut unlogged: Vec<String> = others
            .into_iter()
            .filter(|id| !logged.contains(id))
            .collect();
        // Logged and not yet answered: the model sees them in the conversation, and this
        // turn's reply answers them. A reply the dead run logged answered the others.
        turn.answering
            .extend(logged.into_iter().filter(|id| !answered.contains(id)));
        let mut back: Vec<QueuedMessage> = place
            .inherited
            .iter()
            .filter(|q| unlogged.contains(&tracked_id(q)))
            .cloned()
            .collect();
        if !resumed_line && !back.is_empty() {
            // Queued before everything this turn took: they come first.
            turn.answering.extend(back.iter().map(tracked_id));
            unlogged.retain(|id| !turn.answering.contains(id));
            place.own_at += back.len();
            place.collected.splice(0..0, std::mem::take(&mut back));
        }
        if unlogged.is_empty() {
            return Ok(());
        }
        self.0
            .seams
            .store
            .apply(turn.key(), &mut |slot, _| {
                let Some(entry) = slot.as_mut() else {
                    return Ok(());
                };
                // A run that lost the session meanwhile left all of it to the next.
                let Some(run) = entry.run.as_mut().filter(|run| run.fence == place.fence) else {
                    return Ok(());
                };
                run.answering.retain(|id| !unlogged.contains(id));
                run.taken.retain(|q| !unlogged.contains(&tracked_id(q)));
                entry.queued.splice(0..0, back.iter().cloned());
                // This run does not answer them: a delivery again of one is not its
                // duplicate (the run that died holds it, as before).
                if let Some(before) = &place.before {
                    for record in entry
                        .recent_inbound
                        .iter_mut()
                        .filter(|record| unlogged.contains(&record.id))
                    {
                        record.holder.clone_from(before);
                    }
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// A sweep of a session whose queue is empty but whose run died holding queued
    /// messages it took (their own turns had ended, answered within it): those it never
    /// logged go back to the queue and a turn answers them; when it logged them and no
    /// reply answered them, a turn takes the run over as a delivery again of one of them
    /// would, and answers its line. `None` when nothing is left to answer.
    async fn sweep_dead_run(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
    ) -> Result<Option<Turn<'m>>> {
        let Some(dead) = entry.run.as_ref().filter(|run| !run.taken.is_empty()) else {
            return Ok(None);
        };
        let ids: Vec<String> = dead.taken.iter().map(tracked_id).collect();
        let (logged, answered) = self.found(key, entry, &ids).await?;
        let unlogged: Vec<QueuedMessage> = dead
            .taken
            .iter()
            .filter(|q| !logged.contains(&tracked_id(q)))
            .cloned()
            .collect();
        if unlogged.is_empty() {
            let Some(unanswered) = dead
                .taken
                .iter()
                .find(|q| !answered.contains(&tracked_id(q)))
            else {
                return Ok(None);
            };
            let Ok(message) = serde_json::from_value::<InboundMessage>(unanswered.message.clone())
            else {
                return Ok(None);
            };
            // A message with a channel id is taken as its delivery again would be; one
            // without, by the queue id the run took it under.
            let adopt = unanswered
                .inbound_id
                .is_none()
                .then_some(unanswered.id.as_str());
            let turn = self
                .0
                .turn_adopting(&message, &crate::manager::anyone, adopt)
                .await?;
            return Ok((turn.action() == &TurnAction::Answer).then_some(turn));
        }
        let gone: Vec<String> = unlogged.iter().map(tracked_id).collect();
        let fence = dead.fence;
        let mut moved = false;
        let now_ms = self.0.seams.clock.now_millis();
        self.0
            .seams
            .store
            .apply(key, &mut |slot, _| {
                moved = false;
                let Some(entry) = slot.as_mut() else {
                    return Ok(());
                };
                if super::decide::live(entry, now_ms) {
                    return Ok(());
                }
                let Some(run) = entry.run.as_mut().filter(|run| run.fence == fence) else {
                    return Ok(());
                };
                run.answering.retain(|id| !gone.contains(id));
                run.taken.retain(|q| !gone.contains(&tracked_id(q)));
                entry.queued.splice(0..0, unlogged.iter().cloned());
                moved = true;
                Ok(())
            })
            .await?;
        if !moved {
            return Ok(None);
        }
        // Orphans in the queue now: answered as any.
        Box::pin(self.0.take_queued(key)).await
    }

    /// Of the messages `ids` (as a run answers them), those a line of the session's
    /// transcript carries (logged), and those a reply claims (answered). Reads the
    /// whole transcript once: the rare path of a run that died.
    async fn found(
        &self,
        key: &SessionKey,
        entry: &SessionEntry,
        ids: &[String],
    ) -> Result<(Vec<String>, Vec<String>)> {
        let found = Mutex::new((Vec::new(), Vec::new()));
        if let Some(transcripts) = self.0.seams.transcripts.as_deref() {
            let transcript = TranscriptRef::of(key, entry, &self.0.settings.default_agent);
            crate::exactly_once::claims::find_line(transcripts, &transcript, |line| {
                let Some(log) = line.log.as_ref() else {
                    return false;
                };
                let mut found = found.lock().unwrap_or_else(PoisonError::into_inner);
                let (logged, answered) = &mut *found;
                for id in ids {
                    let carried = log.inbound_id.as_deref() == Some(id.as_str())
                        || log.collected.contains(id);
                    match log.direction {
                        Some(Direction::Inbound) if carried => logged.push(id.clone()),
                        Some(Direction::Outbound) if log.collected.contains(id) => {
                            answered.push(id.clone());
                        }
                        _ => {}
                    }
                }
                false
            })
            .await?;
        }
        Ok(found.into_inner().unwrap_or_else(PoisonError::into_inner))
    }

    /// `text` (the turn's own input) after the messages that waited before it and the
    /// line for what the cap dropped, as one input.
    pub(crate) fn with_collected(
        &self,
        text: String,
        place: &Place,
        activation: &ActivationDecision,
    ) -> String {
        if place.collected.is_empty() && place.dropped.is_none() {
            return text;
        }
        let mut inputs: Vec<String> = place
            .collected
            .iter()
            .filter_map(|queued| {
                let message: InboundMessage =
                    serde_json::from_value(queued.message.clone()).ok()?;
                Some(queued_text(
                    &self.0.pipeline_options(activation.mark_for_context),
                    &message,
                    queued.at,
                ))
            })
            .collect();
        inputs.insert(place.own_at.min(inputs.len()), text);
        super::collected_input(&inputs, place.dropped.as_ref())
    }

    /// The files of the messages a turn answers together (see
    /// [`with_collected`](Self::with_collected)), in the order their text has them:
    /// the waiting messages', with `own` at the turn's own place — as a session keeps
    /// them (without file bytes).
    pub(crate) fn collected_attachments(
        &self,
        own: &[crate::inbound::Attachment],
        place: &Place,
    ) -> Vec<crate::inbound::Attachment> {
        let mut files: Vec<Vec<crate::inbound::Attachment>> = place
            .collected
            .iter()
            .filter_map(|queued| {
                let message: InboundMessage =
                    serde_json::from_value(queued.message.clone()).ok()?;
                Some(message.attachments)
            })
            .collect();
        files.insert(place.own_at.min(files.len()), own.to_vec());
        crate::inbound::attachment::kept(&files.concat())
    }

    /// Holds the run `fence` of `key`'s session for a running turn: its lease is
    /// renewed every quarter of [`LEASE`] until the turn ends (or the run is lost).
    pub(crate) fn hold_run(&self, key: &SessionKey, fence: u64) -> RunLease {
        let leases = &self.0.leases;
        leases
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), fence);
        let mut renewer = leases
            .renewer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // One renewer a manager; again when its runtime has gone (a test's, say).
        if renewer
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            let held = Arc::downgrade(&leases.held);
            let store = Arc::downgrade(&self.0.seams.store);
            let clock = self.0.seams.clock.clone();
            *renewer = Some(tokio::spawn(renew_leases(held, store, clock)));
        }
        RunLease {
            held: leases.held.clone(),
            key: key.clone(),
            fence,
        }
    }
}

impl SessionManager {
    /// A turn for what waits in `key`'s session with no one waiting for it — messages
    /// queued during a run whose waiting processes were killed, or taken by a follow-up
    /// run that was killed before it answered them — once no live run holds the
    /// session: answer it as any turn (`messages`, then `complete`). `None` when nothing
    /// is orphaned (a live turn waits with each queued message, or a run is live: it or
    /// they will answer), or when another turn answered them first. The next message of
    /// the session answers orphans too; this is for a host that sweeps its sessions
    /// rather than wait for one.
    ///
    /// ```
    /// # use agent_sessions::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// # let manager = SessionManager::builder(InMemoryStore::new()).build()?;
    /// # let key = SessionKey::parse("agent:main:telegram:dm:42")?;
    /// if let Some(turn) = manager.take_queued(&key).await? {
    ///     let _messages = turn.messages().await?;
    ///     turn.complete("Sorry for the wait: …").await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take_queued(&self, key: &SessionKey) -> Result<Option<Turn<'_>>> {
        let now_ms = self.seams.clock.now_millis();
        let Some(session) = self.seams.store.get(key).await? else {
            return Ok(None);
        };
        let entry = &session.entry;
        if super::decide::live(entry, now_ms)
            || entry
                .queued
                .iter()
                .any(|q| crate::exactly_once::holders::alive(&q.waiter, q.at, now_ms))
        {
            return Ok(None);
        }
        let Some(last) = entry.queued.last() else {
            return Lanes(self).sweep_dead_run(key, entry).await;
        };
        let Ok(message) = serde_json::from_value::<InboundMessage>(last.message.clone()) else {
            return Ok(None);
        };
        let turn = self
            .turn_adopting(&message, &crate::manager::anyone, Some(&last.id))
            .await?;
        // Another turn may have taken them since: then nothing is left to answer.
        Ok((turn.action() == &TurnAction::Answer).then_some(turn))
    }
}

/// Renews the lease of every run in `held`, every quarter of [`LEASE`], until the
/// manager is gone; a run found lost is let go.
async fn renew_leases(
    held: Weak<Mutex<HashMap<SessionKey, u64>>>,
    store: Weak<dyn SessionStore>,
    clock: Arc<dyn crate::freshness::Clock>,
) {
    loop {
        tokio::time::sleep(LEASE / 4).await;
        let (Some(runs), Some(store)) = (held.upgrade(), store.upgrade()) else {
            return;
        };
        let snapshot: Vec<(SessionKey, u64)> = runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(key, fence)| (key.clone(), *fence))
            .collect();
        for (key, fence) in snapshot {
            let now_ms = clock.now_millis();
            let mut still = false;
            let renewed = store
                .apply(&key, &mut |slot, _| {
                    still = slot
                        .as_mut()
                        .is_some_and(|entry| super::renew(entry, fence, now_ms));
                    Ok(())
                })
                .await;
            // A store away for now: the next round tries again.
            if renewed.is_ok() && !still {
                let mut runs = runs.lock().unwrap_or_else(PoisonError::into_inner);
                if runs.get(&key) == Some(&fence) {
                    runs.remove(&key);
                }
            }
        }
    }
}
