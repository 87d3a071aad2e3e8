//! A session of a given age, and one whole turn on it: what `turn_age` and `floors`
//! measure.

use std::time::{Duration, Instant};

use agent_sessions::manager::DeleteOptions;
use agent_sessions::prelude::*;
use agent_sessions::transcript::TranscriptEntry;

/// A model's answer of about 1,000 characters (250 tokens), as chat answers run.
const ANSWER: &str = "Thursday from 9 to 5, at the front desk. ";
/// Earlier turns written per append.
const BATCH: usize = 1_000;
/// Ages up to this are measured on a new session each turn (made before the clock
/// starts), so measuring does not age them.
pub const YOUNG: usize = 100;

/// A message from `peer`, whose session is the one measured.
fn message(peer: usize, text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", format!("{}", 100_000 + peer), text)
}

/// Gives the session of `peer` `age` earlier turns: a question of about 100 characters
/// and an answer of about 1,000 each (an 8,000-token window holds the last 25 or so),
/// appended as transcript lines in batches.
pub async fn age_session(manager: &SessionManager, peer: usize, age: usize) {
    let key = manager.resolve(&message(peer, "hello")).await.unwrap().key;
    let session = manager.session(&key);
    let now = chrono::Utc::now();
    for start in (0..age).step_by(BATCH) {
        let lines = (start..age.min(start + BATCH))
            .flat_map(|n| {
                [
                    TranscriptEntry::user_text(
                        format!(
                            "question {n}: when is my next shift, and is it at the front desk \
                             or in the back office this time?"
                        ),
                        now,
                    ),
                    TranscriptEntry::assistant_text(
                        format!("answer {n}: {}", ANSWER.repeat(24)),
                        "",
                        "",
                        now,
                    ),
                ]
            })
            .collect();
        session.append(lines).await.unwrap();
    }
}

/// One whole turn of `peer`: `turn`, `messages`, `complete`; how many messages the
/// model got.
async fn one_turn(manager: &SessionManager, peer: usize) -> usize {
    let turn = manager
        .turn(&message(peer, "and the one after?"))
        .await
        .unwrap();
    let seen = turn.messages().await.unwrap().len();
    turn.complete("Saturday from 10.").await.unwrap();
    seen
}

/// Sessions of one age, measured a turn at a time: the young on a new session each
/// turn (deleted after it, so the store does not grow), the old on one session made
/// once (old enough not to notice the turns added).
pub struct Aged {
    age: usize,
    peer: usize,
    fresh: usize,
    /// An old session's first turn in this process, which reads its whole transcript.
    pub first_turn: Option<Duration>,
}

impl Aged {
    /// Sessions of `age` earlier turns; `peer` (with room for a million young sessions
    /// after it) keeps them apart from other `Aged`s on the same manager.
    pub fn new(
        runtime: &tokio::runtime::Runtime,
        manager: &SessionManager,
        peer: usize,
        age: usize,
    ) -> Self {
        let mut first_turn = None;
        if age > YOUNG {
            runtime.block_on(age_session(manager, peer, age));
            let start = Instant::now();
            runtime.block_on(one_turn(manager, peer));
            first_turn = Some(start.elapsed());
        }
        Aged {
            age,
            peer,
            fresh: peer,
            first_turn,
        }
    }

    /// The time `turns` whole turns take, each the first of its session on a manager
    /// made for it by `fresh` (what a restarted process, a new worker or a manager that
    /// let the conversation go pays): the young on a new session each turn, made on
    /// `manager` before the clock starts, as [`measure`](Self::measure) does.
    pub fn measure_first(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        manager: &SessionManager,
        fresh: impl Fn() -> SessionManager,
        turns: u64,
    ) -> Duration {
        self.turns(runtime, manager, Some(&fresh), turns)
    }

    /// The time `turns` whole turns take (what criterion's `iter_custom` asks).
    pub fn measure(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        manager: &SessionManager,
        turns: u64,
    ) -> Duration {
        self.turns(runtime, manager, None, turns)
    }

    /// `turns` whole turns, each on `manager` or on a manager `fresh` makes for it
    /// before the clock starts.
    fn turns(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        manager: &SessionManager,
        fresh: Option<&dyn Fn() -> SessionManager>,
        turns: u64,
    ) -> Duration {
        let mut spent = Duration::ZERO;
        for _ in 0..turns {
            let peer = if self.age > YOUNG {
                self.peer
            } else {
                self.fresh += 1;
                runtime.block_on(age_session(manager, self.fresh, self.age));
                self.fresh
            };
            let made = fresh.map(|fresh| fresh());
            let on = made.as_ref().unwrap_or(manager);
            let start = Instant::now();
            std::hint::black_box(runtime.block_on(one_turn(on, peer)));
            spent += start.elapsed();
            if self.age <= YOUNG {
                // Gone again, so the store holds as many sessions for every age.
                let key = manager.key_for(&message(peer, "")).unwrap();
                let erase = DeleteOptions {
                    erase_transcript: true,
                    ..DeleteOptions::default()
                };
                runtime
                    .block_on(manager.session(&key).delete(erase))
                    .unwrap();
            }
        }
        spent
    }
}
