//! The lane's decisions: pure functions of a session's entry, made inside the store's
//! atomic update of it — so two workers that take messages for one session at once see
//! one decision.

use super::{Effective, QueueOutcome, MAX_QUEUED_BYTES};
use crate::exactly_once::holders::alive;
use crate::inbound::InboundMessage;
use crate::store::entry::{
    QueueDrop, QueueDropped, QueueMode, QueuedMessage, SessionEntry, SessionRun, SessionStatus,
};

/// The most queue ids of dropped messages an entry remembers.
const MAX_DROPPED_IDS: usize = 100;

/// The most characters of a dropped message its summary line keeps.
const DROPPED_LINE_CHARS: usize = 160;
/// The most dropped messages summarised in a follow-up's input (the newest; the count
/// says how many there were).
const MAX_DROPPED_LINES: usize = 20;

/// A message a turn takes, as the lane sees it.
pub(crate) struct Arrival<'a> {
    /// The turn (a process and a token).
    pub(crate) holder: &'a str,
    pub(crate) message: &'a InboundMessage,
    /// Its channel message id, as the dedupe records name it.
    pub(crate) inbound_id: Option<&'a str>,
    /// A queued message (its queue id) to wait with instead of queuing this one, or to
    /// answer by taking over the dead run that took it.
    pub(crate) adopt: Option<&'a str>,
    pub(crate) now_ms: u64,
}

/// What a turn's message does, decided as it arrives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lane {
    /// The turn runs now, holding the run (`fence`), and answers the `collected`
    /// messages (oldest first) before its own; `resumed` when its own message was
    /// answered by a run that died (and maybe logged), which it takes over.
    Run {
        fence: u64,
        collected: Vec<QueuedMessage>,
        dropped: Option<QueueDropped>,
        resumed: bool,
        /// What the run it took over had taken from the queue.
        inherited: Vec<QueuedMessage>,
        /// The holder of the run it took over, if it took one over.
        before: Option<String>,
    },
    /// The message waits in the queue, under this id.
    Queued { id: String },
    /// The message was handled without a turn: it did not fit the queue (`drop: new`),
    /// or the queued message this turn came to adopt was taken by another turn.
    Gone(QueueOutcome),
    /// A delivery again of a message the live run answers (it took over the run that
    /// had it): nothing to do.
    Answering,
}

/// What a waiting turn finds when it asks for its place.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Take {
    /// It runs now (as [`Lane::Run`]), answering the `taken` messages in arrival order,
    /// its own at `own_at` among them.
    Run {
        fence: u64,
        taken: Vec<QueuedMessage>,
        own_at: usize,
        dropped: Option<QueueDropped>,
        /// Every message the run answers (those of a dead run it took over too).
        answering: Vec<String>,
        /// What the run it took over had taken from the queue.
        inherited: Vec<QueuedMessage>,
        /// The holder of the run it took over, if it took one over.
        before: Option<String>,
        /// Its own message was taken by steering into the run it took over, which
        /// died before it answered (`taken` is its message alone).
        resumed: bool,
    },
    /// Not yet: the run still holds the session, or the queue is not quiet until this
    /// time (epoch milliseconds).
    Wait { until: Option<u64> },
    /// Its message was handled without it.
    Gone(QueueOutcome),
}

/// Whether a live turn holds the session's run at `now_ms`.
pub(crate) fn live(entry: &SessionEntry, now_ms: u64) -> bool {
    entry
        .run
        .as_ref()
        .is_some_and(|run| alive(&run.holder, run.renewed_at.max(run.started_at), now_ms))
}

/// The id a queued message is answered under: its channel message id, or for a
/// message with none, its queue id (`queued:<id>`, which no channel message id
/// matches). Logged lines and the run name it, so a run that takes over can tell
/// whether the one that died logged it.
pub(crate) fn tracked_id(queued: &QueuedMessage) -> String {
    queued
        .inbound_id
        .clone()
        .unwrap_or_else(|| queued_id(&queued.id))
}

/// The id a queued message without a channel id is answered under (`queued:<id>`).
pub(crate) fn queued_id(id: &str) -> String {
    format!("queued:{id}")
}

/// Every message the session's run answers (none without a run).
pub(crate) fn answering(entry: &SessionEntry) -> Vec<String> {
    entry
        .run
        .as_ref()
        .map(|run| run.answering.clone())
        .unwrap_or_default()
}

/// Gives the run to `holder`, with the next fencing token: it answers `answering`
/// (the queued messages it `taken` among them), and what a run before it — dead, or
/// interrupted — was answering. The messages it answers are its own now: a delivery
/// again of one finds this run holding it (a duplicate while it lives), not the turn
/// that queued it or the run that died. Returns the token, the queued messages the run
/// before it had taken (inherited: they stay in this run's record until it has
/// answered them), and that run's holder.
fn take_run(
    entry: &mut SessionEntry,
    holder: &str,
    now_ms: u64,
    answering: Vec<String>,
    taken: Vec<QueuedMessage>,
) -> (u64, Vec<QueuedMessage>, Option<String>) {
    let fence = entry.run_fence.unwrap_or(0).saturating_add(1);
    entry.run_fence = Some(fence);
    let (mut all, inherited, before) = match entry.run.take() {
        Some(before) => (before.answering, before.taken, Some(before.holder)),
        None => Default::default(),
    };
    for id in answering {
        if !all.contains(&id) {
            all.push(id);
        }
    }
    for record in entry
        .recent_inbound
        .iter_mut()
        .filter(|record| all.contains(&record.id))
    {
        record.holder = holder.to_owned();
    }
    entry.run = Some(SessionRun {
        holder: holder.to_owned(),
        started_at: now_ms,
        renewed_at: now_ms,
        fence,
        answering: all,
        taken: inherited.iter().cloned().chain(taken).collect(),
    });
    entry.status = Some(SessionStatus::Running);
    entry.aborted_last_run = Some(true);
    (fence, inherited, before)
}

/// Decides what `arrival` does in the session `entry` (as its update is about to write
/// it): run now, wait in the queue, or be dropped.
pub(crate) fn arrive(
    entry: &mut SessionEntry,
    arrival: &Arrival<'_>,
    settings: &Effective,
) -> Lane {
    let now = arrival.now_ms;
    if let Some(adopt) = arrival.adopt {
        // A sweep for an orphaned message: wait with it, unless another turn took it
        // since (then its message must not be answered again).
        if let Some(item) = entry.queued.iter_mut().find(|q| q.id == adopt) {
            item.waiter = arrival.holder.to_owned();
            return Lane::Queued {
                id: item.id.clone(),
            };
        }
        // A sweep for a message a run took from the queue and died with: this turn
        // takes that run over and answers it (its line, if the run logged one).
        let dead_took = if live(entry, now) {
            None
        } else {
            entry.run.as_mut().and_then(|dead| {
                let at = dead.taken.iter().position(|q| q.id == adopt)?;
                Some(dead.taken.remove(at))
            })
        };
        let Some(own) = dead_took else {
            return Lane::Gone(gone_outcome(entry, adopt));
        };
        let (fence, inherited, before) = take_run(
            entry,
            arrival.holder,
            now,
            vec![tracked_id(&own)],
            vec![own],
        );
        return Lane::Run {
            fence,
            collected: Vec::new(),
            dropped: None,
            resumed: true,
            inherited,
            before,
        };
    }
    if let Some(id) = arrival.inbound_id {
        // A delivery again of a message still queued, whose waiter died: this turn
        // waits with it.
        if let Some(item) = entry
            .queued
            .iter_mut()
            .find(|q| q.inbound_id.as_deref() == Some(id))
        {
            item.waiter = arrival.holder.to_owned();
            return Lane::Queued {
                id: item.id.clone(),
            };
        }
    }
    let live = live(entry, now);
    if live
        && arrival.inbound_id.is_some_and(|id| {
            entry
                .run
                .as_ref()
                .is_some_and(|run| run.answering.iter().any(|a| a == id))
        })
    {
        return Lane::Answering;
    }
    let own: Vec<String> = arrival.inbound_id.map(str::to_owned).into_iter().collect();
    if !live {
        let resumed = arrival.inbound_id.is_some_and(|id| {
            entry
                .run
                .as_ref()
                .is_some_and(|dead| dead.answering.iter().any(|a| a == id))
        });
        if resumed || entry.queued.iter().all(|q| steered_into_run(entry, q)) {
            unqueue_steered(entry);
            let (fence, inherited, before) = take_run(entry, arrival.holder, now, own, Vec::new());
            return Lane::Run {
                fence,
                collected: Vec::new(),
                dropped: None,
                resumed,
                inherited,
                before,
            };
        }
    } else if settings.mode == QueueMode::Interrupt {
        // The running turn is told (its token is no longer the run's); the newest
        // message runs now, with what waited (what the run took by steering it
        // inherits from the run).
        unqueue_steered(entry);
        let collected = std::mem::take(&mut entry.queued);
        let mut answering: Vec<String> = collected.iter().map(tracked_id).collect();
        answering.extend(own);
        let (fence, inherited, before) =
            take_run(entry, arrival.holder, now, answering, collected.clone());
        return Lane::Run {
            fence,
            collected,
            dropped: take_dropped(entry),
            resumed: false,
            inherited,
            before,
        };
    }
    enqueue(entry, arrival, settings)
}

/// Queues `arrival`, making room as the cap, the queue's byte bound
/// ([`MAX_QUEUED_BYTES`]) and the drop policy say.
fn enqueue(entry: &mut SessionEntry, arrival: &Arrival<'_>, settings: &Effective) -> Lane {
    // Kept without file bytes (a `data:` URL is for the model call that has it).
    let mut message = serde_json::to_value(arrival.message).unwrap_or_default();
    if !arrival.message.attachments.is_empty() {
        let kept = crate::inbound::attachment::kept(&arrival.message.attachments);
        message["attachments"] = serde_json::to_value(kept).unwrap_or_default();
    }
    let size = |message: &serde_json::Value| message.to_string().len();
    let mut bytes = size(&message) + entry.queued.iter().map(|q| size(&q.message)).sum::<usize>();
    let full = |queued: usize, bytes: usize| {
        queued >= settings.cap || (queued > 0 && bytes > MAX_QUEUED_BYTES)
    };
    if full(entry.queued.len(), bytes) {
        let summarize = match settings.drop {
            QueueDrop::New => return Lane::Gone(QueueOutcome::Dropped),
            QueueDrop::Old => false,
            _ => true,
        };
        while full(entry.queued.len(), bytes) {
            let gone = entry.queued.remove(0);
            bytes -= size(&gone.message);
            remember_dropped(entry, &gone, summarize);
        }
    }
    let id = uuid::Uuid::new_v4().to_string();
    entry.queued.push(QueuedMessage {
        id: id.clone(),
        at: arrival.now_ms,
        waiter: arrival.holder.to_owned(),
        inbound_id: arrival.inbound_id.map(str::to_owned),
        message,
        steered: None,
    });
    Lane::Queued { id }
}

fn remember_dropped(entry: &mut SessionEntry, gone: &QueuedMessage, summarize: bool) {
    let dropped = entry
        .queue_dropped
        .get_or_insert_with(QueueDropped::default);
    if summarize {
        dropped.count += 1;
        let body = gone
            .message
            .get("body")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
        dropped
            .lines
            .push(line.chars().take(DROPPED_LINE_CHARS).collect());
        let excess = dropped.lines.len().saturating_sub(MAX_DROPPED_LINES);
        dropped.lines.drain(..excess);
    }
    dropped.ids.push(gone.id.clone());
    let excess = dropped.ids.len().saturating_sub(MAX_DROPPED_IDS);
    dropped.ids.drain(..excess);
}

/// The summary of what the cap dropped since the last follow-up, taken (the ids stay
/// for the turns that wait with them).
fn take_dropped(entry: &mut SessionEntry) -> Option<QueueDropped> {
    let dropped = entry.queue_dropped.as_mut()?;
    if dropped.count == 0 {
        return None;
    }
    let taken = QueueDropped {
        count: std::mem::take(&mut dropped.count),
        lines: std::mem::take(&mut dropped.lines),
        ids: Vec::new(),
    };
    Some(taken)
}

/// What became of the queued message `queued_id`, no longer in the queue: dropped by
/// the cap (as the entry remembers), else answered by another turn.
fn gone_outcome(entry: &SessionEntry, queued_id: &str) -> QueueOutcome {
    let dropped = entry
        .queue_dropped
        .as_ref()
        .is_some_and(|d| d.ids.iter().any(|id| id == queued_id));
    if dropped {
        QueueOutcome::Dropped
    } else {
        QueueOutcome::Collected
    }
}

/// Asks, for the turn `holder` waiting with queued message `queued_id`, whether it runs
/// now.
pub(crate) fn take(
    entry: &mut SessionEntry,
    queued_id: &str,
    holder: &str,
    settings: &Effective,
    now_ms: u64,
) -> Take {
    let Some(position) = entry.queued.iter().position(|q| q.id == queued_id) else {
        return Take::Gone(gone_outcome(entry, queued_id));
    };
    // This turn waits with it (a delivery again may have adopted it).
    entry.queued[position].waiter = holder.to_owned();
    let live = live(entry, now_ms);
    let running = entry.run.as_ref().map(|run| run.fence);
    if let Some(fence) = entry.queued[position].steered {
        if live && running == Some(fence) {
            return Take::Wait { until: None };
        }
        if steered_into_run(entry, &entry.queued[position]) {
            // Steered into a run that died before it answered: this turn takes that
            // run over and answers its message (the line the run logged for it, if it
            // did).
            let mut own = entry.queued.remove(position);
            own.steered = None;
            if let Some(dead) = entry.run.as_mut() {
                dead.taken.retain(|q| q.id != own.id);
            }
            unqueue_steered(entry);
            let (fence, inherited, before) = take_run(
                entry,
                holder,
                now_ms,
                vec![tracked_id(&own)],
                vec![own.clone()],
            );
            return Take::Run {
                fence,
                taken: vec![own],
                own_at: 0,
                dropped: None,
                answering: answering(entry),
                inherited,
                before,
                resumed: true,
            };
        }
        if settings.mode == QueueMode::Steer {
            // Taken by the run that ended: nothing left to answer.
            entry.queued.remove(position);
            return Take::Gone(QueueOutcome::Steered);
        }
    }
    if live {
        return Take::Wait { until: None };
    }
    let newest = entry.queued.iter().map(|q| q.at).max().unwrap_or(now_ms);
    let due =
        newest.saturating_add(u64::try_from(settings.debounce.as_millis()).unwrap_or(u64::MAX));
    if now_ms < due {
        return Take::Wait { until: Some(due) };
    }
    // What the dead run took by steering, this run inherits from it; in steer mode,
    // what a run that ended took by steering was answered by it.
    unqueue_steered(entry);
    if settings.mode == QueueMode::Steer {
        entry
            .queued
            .retain(|q| q.id == queued_id || q.steered.is_none());
    }
    let position = entry
        .queued
        .iter()
        .position(|q| q.id == queued_id)
        .expect("kept");
    let upto = match settings.mode {
        QueueMode::Collect => entry.queued.len(),
        // One at a time, in order: what waits before it goes first, unless its waiter is
        // gone — then it is answered with this one.
        _ => {
            let orphans_before = entry.queued[..position]
                .iter()
                .all(|q| !alive(&q.waiter, q.at, now_ms));
            if !orphans_before {
                return Take::Wait { until: None };
            }
            position + 1
        }
    };
    let taken: Vec<QueuedMessage> = entry.queued.drain(..upto).collect();
    let own_at = taken.iter().position(|q| q.id == queued_id).expect("taken");
    let ids = taken.iter().map(tracked_id).collect();
    let (fence, inherited, before) = take_run(entry, holder, now_ms, ids, taken.clone());
    Take::Run {
        fence,
        taken,
        own_at,
        inherited,
        before,
        resumed: false,
        dropped: take_dropped(entry),
        answering: answering(entry),
    }
}

/// The queued messages the run `fence` takes at a tool boundary (steering), marked
/// taken by it; none when the run is no longer `fence` or the mode does not steer.
pub(crate) fn steer(
    entry: &mut SessionEntry,
    fence: u64,
    settings: &Effective,
) -> Vec<QueuedMessage> {
    let steers = matches!(settings.mode, QueueMode::Steer | QueueMode::SteerBacklog);
    if !steers || entry.run.as_ref().map(|run| run.fence) != Some(fence) {
        return Vec::new();
    }
    let mut taken = Vec::new();
    for item in entry.queued.iter_mut().filter(|q| q.steered.is_none()) {
        item.steered = Some(fence);
        taken.push(item.clone());
    }
    // The run answers them now: if it dies before it has, the run that takes it over
    // inherits them, as it does the queued messages a follow-up took.
    if let Some(run) = entry.run.as_mut() {
        for item in &taken {
            let id = tracked_id(item);
            if !run.answering.contains(&id) {
                run.answering.push(id);
            }
            run.taken.push(QueuedMessage {
                steered: None,
                ..item.clone()
            });
        }
    }
    taken
}

/// Whether `queued` waits in the queue only for its turn to learn that the session's
/// run took it by steering: that run holds it (in [`SessionRun::taken`]), and a run
/// that takes that one over inherits it from there.
fn steered_into_run(entry: &SessionEntry, queued: &QueuedMessage) -> bool {
    entry.run.as_ref().is_some_and(|run| {
        queued.steered == Some(run.fence) && run.taken.iter().any(|t| t.id == queued.id)
    })
}

/// Takes out of the queue what the session's run took by steering, as another run
/// takes that one over (it inherits them from the run).
fn unqueue_steered(entry: &mut SessionEntry) {
    let steered: Vec<String> = entry
        .queued
        .iter()
        .filter(|q| steered_into_run(entry, q))
        .map(|q| q.id.clone())
        .collect();
    entry.queued.retain(|q| !steered.contains(&q.id));
}

/// Whether the run `fence` lost the session: another run holds it (an interrupt, a
/// take-over) or none does.
pub(crate) fn interrupted(entry: &SessionEntry, fence: u64) -> bool {
    entry.run.as_ref().map(|run| run.fence) != Some(fence)
}

/// Ends the run `fence`: `false` (nothing changed) when it is no longer the run.
pub(crate) fn release(entry: &mut SessionEntry, fence: u64) -> bool {
    if interrupted(entry, fence) {
        return false;
    }
    entry.run = None;
    if matches!(
        entry.status,
        Some(SessionStatus::Running | SessionStatus::AwaitingApproval)
    ) {
        entry.status = Some(SessionStatus::Idle);
    }
    true
}

/// Renews the run `fence`'s lease at `now_ms`: `false` when it is no longer the run.
pub(crate) fn renew(entry: &mut SessionEntry, fence: u64, now_ms: u64) -> bool {
    match entry.run.as_mut() {
        Some(run) if run.fence == fence => {
            run.renewed_at = now_ms;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::exactly_once::holders::Hold;

    fn settings(mode: QueueMode, cap: usize, drop: QueueDrop) -> Effective {
        Effective {
            mode,
            debounce: Duration::from_millis(1_000),
            cap,
            drop,
        }
    }

    fn message(body: &str) -> InboundMessage {
        InboundMessage::direct("telegram", "42", body)
    }

    fn arrive_as(
        entry: &mut SessionEntry,
        hold: &Hold,
        body: &str,
        at: u64,
        s: &Effective,
    ) -> Lane {
        let message = message(body);
        arrive(
            entry,
            &Arrival {
                holder: hold.holder(),
                message: &message,
                inbound_id: None,
                adopt: None,
                now_ms: at,
            },
            s,
        )
    }

    fn bodies(items: &[QueuedMessage]) -> Vec<String> {
        items
            .iter()
            .map(|q| q.message["body"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The lane, mode by mode: who runs, what waits, what a follow-up answers.
    #[test]
    fn each_mode_decides_what_a_message_during_a_run_does() {
        // (mode, what the second and third turns get, what the follow-up answers)
        let cases = [
            (QueueMode::Collect, vec!["b", "c"], 1),
            (QueueMode::Followup, vec!["b"], 2),
            (QueueMode::Steer, vec!["b"], 2),
            (QueueMode::SteerBacklog, vec!["b"], 2),
        ];
        for (mode, first_follow_up, follow_ups) in cases {
            let s = settings(mode.clone(), 20, QueueDrop::Summarize);
            let (a, b, c) = (
                Hold::new("a".into()),
                Hold::new("b".into()),
                Hold::new("c".into()),
            );
            let mut entry = SessionEntry::new("s", 0);
            let Lane::Run { fence, .. } = arrive_as(&mut entry, &a, "a", 0, &s) else {
                panic!("{mode:?}: the first message runs")
            };
            let Lane::Queued { id: qb } = arrive_as(&mut entry, &b, "b", 60, &s) else {
                panic!("{mode:?}: the second waits")
            };
            let Lane::Queued { id: qc } = arrive_as(&mut entry, &c, "c", 120, &s) else {
                panic!("{mode:?}: the third waits")
            };
            assert_eq!(
                take(&mut entry, &qb, b.holder(), &s, 200),
                Take::Wait { until: None }
            );
            assert!(release(&mut entry, fence));
            assert_eq!(
                take(&mut entry, &qb, b.holder(), &s, 500),
                Take::Wait { until: Some(1_120) },
                "{mode:?}: the queue must be quiet for the debounce"
            );
            let Take::Run {
                fence: second,
                taken,
                own_at,
                ..
            } = take(&mut entry, &qb, b.holder(), &s, 1_200)
            else {
                panic!("{mode:?}: the second's turn runs")
            };
            assert!(second > fence, "tokens only grow");
            assert_eq!(
                bodies(&taken),
                first_follow_up,
                "{mode:?}: in arrival order"
            );
            assert_eq!(taken[own_at].id, qb);
            let third = take(&mut entry, &qc, c.holder(), &s, 1_300);
            if follow_ups == 1 {
                assert_eq!(third, Take::Gone(QueueOutcome::Collected), "{mode:?}");
            } else {
                assert_eq!(
                    third,
                    Take::Wait { until: None },
                    "{mode:?}: its own turn, later"
                );
                assert!(release(&mut entry, second));
                assert!(matches!(
                    take(&mut entry, &qc, c.holder(), &s, 2_300),
                    Take::Run { .. }
                ));
            }
        }
    }

    #[test]
    fn an_interrupt_runs_the_newest_message_and_fences_the_old_run() {
        let s = settings(QueueMode::Interrupt, 20, QueueDrop::Summarize);
        let (a, b) = (Hold::new("ia".into()), Hold::new("ib".into()));
        let mut entry = SessionEntry::new("s", 0);
        let Lane::Run { fence: old, .. } = arrive_as(&mut entry, &a, "a", 0, &s) else {
            panic!()
        };
        let Lane::Run { fence: new, .. } = arrive_as(&mut entry, &b, "b", 60, &s) else {
            panic!("the newest message runs at once")
        };
        assert!(interrupted(&entry, old));
        assert!(
            !release(&mut entry, old),
            "the interrupted run cannot end the new one"
        );
        assert!(release(&mut entry, new));
    }

    #[test]
    fn steering_hands_queued_messages_to_the_running_turn_once() {
        let s = settings(QueueMode::Steer, 20, QueueDrop::Summarize);
        let (a, b) = (Hold::new("sa".into()), Hold::new("sb".into()));
        let mut entry = SessionEntry::new("s", 0);
        let Lane::Run { fence, .. } = arrive_as(&mut entry, &a, "a", 0, &s) else {
            panic!()
        };
        let Lane::Queued { id } = arrive_as(&mut entry, &b, "b", 10, &s) else {
            panic!()
        };
        assert_eq!(bodies(&steer(&mut entry, fence, &s)), ["b"]);
        assert!(steer(&mut entry, fence, &s).is_empty(), "taken once");
        assert_eq!(
            take(&mut entry, &id, b.holder(), &s, 20),
            Take::Wait { until: None }
        );
        assert!(release(&mut entry, fence));
        assert_eq!(
            take(&mut entry, &id, b.holder(), &s, 30),
            Take::Gone(QueueOutcome::Steered)
        );
        // Collect does not steer.
        let c = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
        assert!(steer(&mut entry, fence, &c).is_empty());
    }

    #[test]
    fn what_a_dead_run_took_by_steering_passes_to_the_run_that_takes_it_over() {
        let s = settings(QueueMode::Steer, 20, QueueDrop::Summarize);
        let later = crate::exactly_once::holders::LEASE.as_millis() as u64 + 1;
        let (a, b, c) = (
            Hold::new("da".into()),
            Hold::new("db".into()),
            Hold::new("dc".into()),
        );
        for own_turn_takes_over in [true, false] {
            let mut entry = SessionEntry::new("s", 0);
            let Lane::Run { fence, .. } = arrive_as(&mut entry, &a, "a", 0, &s) else {
                panic!()
            };
            let Lane::Queued { id } = arrive_as(&mut entry, &b, "b", 10, &s) else {
                panic!()
            };
            assert_eq!(bodies(&steer(&mut entry, fence, &s)), ["b"]);
            // The run's process dies before it answers.
            entry.run.as_mut().unwrap().holder = "gone-boot/1/1#dead".into();
            if own_turn_takes_over {
                let Take::Run {
                    taken,
                    inherited,
                    resumed,
                    ..
                } = take(&mut entry, &id, b.holder(), &s, later)
                else {
                    panic!("its own turn takes the dead run over")
                };
                assert!(resumed);
                assert_eq!(bodies(&taken), ["b"]);
                assert!(inherited.is_empty(), "its own message is not inherited too");
            } else {
                let Lane::Run { inherited, .. } = arrive_as(&mut entry, &c, "c", later, &s) else {
                    panic!("nothing else waits: the new message takes the dead run over")
                };
                assert_eq!(bodies(&inherited), ["b"]);
                assert_eq!(inherited[0].steered, None);
                assert_eq!(
                    take(&mut entry, &id, b.holder(), &s, later + 1),
                    Take::Gone(QueueOutcome::Collected),
                    "answered by the run that took it over"
                );
            }
            assert!(entry.queued.is_empty());
        }
    }

    #[test]
    fn the_cap_drops_as_the_policy_says() {
        for (drop, outcome_of_first, count) in [
            (QueueDrop::Old, Some(QueueOutcome::Dropped), 0),
            (QueueDrop::Summarize, Some(QueueOutcome::Dropped), 1),
            (QueueDrop::New, None, 0),
        ] {
            let s = settings(QueueMode::Collect, 2, drop.clone());
            let holds: Vec<Hold> = (0..4)
                .map(|n| Hold::new(format!("cap{n}{drop:?}")))
                .collect();
            let mut entry = SessionEntry::new("s", 0);
            arrive_as(&mut entry, &holds[0], "run", 0, &s);
            let Lane::Queued { id: first } = arrive_as(&mut entry, &holds[1], "one", 1, &s) else {
                panic!()
            };
            arrive_as(&mut entry, &holds[2], "two", 2, &s);
            let third = arrive_as(&mut entry, &holds[3], "three", 3, &s);
            match outcome_of_first {
                Some(outcome) => {
                    assert!(matches!(third, Lane::Queued { .. }), "{drop:?}");
                    assert_eq!(
                        take(&mut entry, &first, holds[1].holder(), &s, 4),
                        Take::Gone(outcome)
                    );
                }
                None => assert_eq!(
                    third,
                    Lane::Gone(QueueOutcome::Dropped),
                    "{drop:?}: the new one goes"
                ),
            }
            assert_eq!(entry.queued.len(), 2, "{drop:?}");
            assert_eq!(
                entry.queue_dropped.as_ref().map_or(0, |d| d.count),
                count,
                "{drop:?}"
            );
        }
    }

    #[test]
    fn a_run_whose_holder_died_is_taken_over_with_what_it_answered() {
        let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
        let mut entry = SessionEntry::new("s", 0);
        entry.run = Some(SessionRun {
            holder: "gone-boot/1/1#dead".into(),
            started_at: 0,
            renewed_at: 0,
            fence: 4,
            answering: vec!["telegram:default:direct:42:7".into()],
            taken: Vec::new(),
        });
        entry.run_fence = Some(4);
        let b = Hold::new("takeover".into());
        let later = crate::exactly_once::holders::LEASE.as_millis() as u64 + 1;
        let message = message("again");
        let lane = arrive(
            &mut entry,
            &Arrival {
                holder: b.holder(),
                message: &message,
                inbound_id: Some("telegram:default:direct:42:7"),
                adopt: None,
                now_ms: later,
            },
            &s,
        );
        assert_eq!(
            lane,
            Lane::Run {
                fence: 5,
                collected: Vec::new(),
                dropped: None,
                resumed: true,
                inherited: Vec::new(),
                before: Some("gone-boot/1/1#dead".into()),
            }
        );
    }

    /// A run that took queued messages keeps them in its record until it ends: when
    /// its holder dies, the run that takes it over inherits them (whatever the dead
    /// run did not log, it answers), and so does the next if that one dies too.
    #[test]
    fn the_queued_messages_a_dead_run_took_pass_to_the_run_that_takes_it_over() {
        let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
        let (a, b, c) = (
            Hold::new("ta".into()),
            Hold::new("tb".into()),
            Hold::new("tc".into()),
        );
        let mut entry = SessionEntry::new("s", 0);
        let Lane::Run { fence, .. } = arrive_as(&mut entry, &a, "a", 0, &s) else {
            panic!()
        };
        arrive_as(&mut entry, &b, "b", 60, &s);
        let Lane::Queued { id: qc } = arrive_as(&mut entry, &c, "c", 120, &s) else {
            panic!()
        };
        assert!(release(&mut entry, fence));
        let Take::Run {
            taken, inherited, ..
        } = take(&mut entry, &qc, c.holder(), &s, 2_000)
        else {
            panic!("the follow-up runs")
        };
        assert!(inherited.is_empty(), "the run before it ended well");
        assert_eq!(bodies(&taken), ["b", "c"]);
        let record = entry.run.as_ref().unwrap();
        assert_eq!(
            bodies(&record.taken),
            ["b", "c"],
            "kept in the run's record"
        );
        assert_eq!(
            record.answering,
            taken.iter().map(tracked_id).collect::<Vec<_>>(),
            "a message with no channel id is answered under its queue id"
        );
        assert!(record.answering[0].starts_with("queued:"));
        // The follow-up's process dies before logging what it took.
        drop(c);
        let later = 2_000 + crate::exactly_once::holders::LEASE.as_millis() as u64;
        let d = Hold::new("td".into());
        let Lane::Run {
            inherited, resumed, ..
        } = arrive_as(&mut entry, &d, "d", later, &s)
        else {
            panic!("a new message takes the dead run over")
        };
        assert!(!resumed);
        assert_eq!(bodies(&inherited), ["b", "c"]);
        assert_eq!(bodies(&entry.run.as_ref().unwrap().taken), ["b", "c"]);
        assert!(entry.queued.is_empty());
        // And if that run dies too, the next inherits them again.
        drop(d);
        let e = Hold::new("te".into());
        let Lane::Run { inherited, .. } = arrive_as(&mut entry, &e, "e", later * 2, &s) else {
            panic!()
        };
        assert_eq!(bodies(&inherited), ["b", "c"]);
        // A run that ends lets them go.
        let fence = entry.run.as_ref().unwrap().fence;
        assert!(release(&mut entry, fence));
        assert!(entry.run.is_none());
    }

    /// A sweep that comes to answer an orphaned message another turn took meanwhile
    /// finds it gone: it must not run the message again (it may carry no channel id to
    /// catch a duplicate by).
    #[test]
    fn a_sweep_for_a_message_another_turn_took_does_not_run_it_again() {
        let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
        let mut entry = SessionEntry::new("s", 0);
        let sweep = Hold::new("sweep".into());
        let message = message("orphaned question");
        let lane = arrive(
            &mut entry,
            &Arrival {
                holder: sweep.holder(),
                message: &message,
                inbound_id: None,
                adopt: Some("taken-by-another-turn"),
                now_ms: 10,
            },
            &s,
        );
        assert_eq!(lane, Lane::Gone(QueueOutcome::Collected));
        assert!(entry.run.is_none(), "no run was taken");
    }
}
