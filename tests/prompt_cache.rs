//! What a provider's prompt cache can reuse: the share of each turn's model input that
//! repeats the previous turn's input as a prefix of whole messages.
//!
//! Providers bill the part of an input that repeats the previous request's prefix at a
//! fraction of the price. A window that slides by one exchange every turn changes the
//! input's first messages every turn once the budget is reached, and nothing repeats;
//! the stable window (the default) cuts in blocks and keeps the input's beginning the
//! same between cuts.

use agent_sessions::inbound::HistoryWindow;
use agent_sessions::prelude::*;
use agent_sessions::transcript::InMemoryTranscriptStore;

const TURNS: usize = 300;

/// A person's message and the bot's reply of turn `n`: a few hundred characters each,
/// never twice the same.
fn exchange(n: usize) -> (String, String) {
    let ask = format!(
        "Message {n}: I would like to move my booking for {} people to another day, \
         if the restaurant has a table by the window; my reference is R-{:05}.",
        2 + n % 6,
        n * 7919 % 100_000
    );
    let reply = format!(
        "Reply {n}: Of course. For {} people I can offer Thursday at 19:30 or Friday at \
         20:00, both by the window. Shall I move reference R-{:05} to one of them? \
         The deposit stays as it is.",
        2 + n % 6,
        n * 7919 % 100_000
    );
    (ask, reply)
}

/// The characters of `now` that repeat `before` as a prefix of whole messages.
fn repeated_prefix(before: &[ChatMessage], now: &[ChatMessage]) -> usize {
    before
        .iter()
        .zip(now)
        .take_while(|(a, b)| a == b)
        .map(|(_, b)| b.content.len())
        .sum()
}

fn size(input: &[ChatMessage]) -> usize {
    input.iter().map(|m| m.content.len()).sum()
}

/// Runs `TURNS` turns on one DM with an 8,000-token window and gives, for the second
/// half, the share of input characters that repeat the previous input as a prefix,
/// and the most tokens (estimated) any input held.
async fn reused_share(window: HistoryWindow) -> (f64, usize) {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(8_000)
        .history_window(window)
        .build()
        .unwrap();
    let system = vec![ChatMessage::system(
        "You are the booking assistant of a restaurant.",
    )];
    let (mut previous, mut repeated, mut total, mut largest) = (Vec::new(), 0, 0, 0);
    for n in 0..TURNS {
        let (ask, reply) = exchange(n);
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", ask))
            .await
            .unwrap();
        let input = turn.messages_with(system.clone()).await.unwrap();
        largest = largest.max(size(&input) / 4);
        if n >= TURNS / 2 {
            repeated += repeated_prefix(&previous, &input);
            total += size(&input);
        }
        turn.complete(reply).await.unwrap();
        previous = input;
    }
    (repeated as f64 / total as f64, largest)
}

/// The goal: with an 8,000-token window, at least 80 % of the input characters of the
/// second half of a 300-turn conversation repeat the previous turn's input as a prefix
/// — against none with a window that slides every turn. Both stay within the window.
#[tokio::test]
async fn the_stable_window_lets_a_prompt_cache_reuse_most_of_each_input() {
    let (stable, stable_largest) = reused_share(HistoryWindow::default()).await;
    let (sliding, sliding_largest) = reused_share(HistoryWindow::Sliding).await;
    println!(
        "repeated prefix, second half: stable {:.1} %, sliding {:.1} %",
        stable * 100.0,
        sliding * 100.0
    );
    assert!(stable >= 0.80, "stable window: {:.1} %", stable * 100.0);
    assert!(sliding < 0.10, "sliding window: {:.1} %", sliding * 100.0);
    assert!(stable_largest <= 8_000 && sliding_largest <= 8_000);
    // The stable window gives up some history for it, never more than half the room.
    assert!(
        stable_largest * 2 >= sliding_largest,
        "{stable_largest} vs {sliding_largest}"
    );
}

/// Between cuts the input only grows at its end. At a cut the history starts at a
/// person's message, after the summary of the cuts before it; what this cut leaves out
/// is summarised once its reply is returned, and the next turn begins with that summary
/// — the same on every turn until the next cut.
#[tokio::test]
async fn between_cuts_the_summary_and_history_stay_the_same() {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(2_000)
        .build()
        .unwrap();
    let is_summary = |m: &ChatMessage| {
        m.role == ChatRole::System && m.content.starts_with("Summary of the conversation so far")
    };
    let (mut previous, mut cuts, mut summaries) = (Vec::<ChatMessage>::new(), 0, Vec::new());
    let mut after_cut = false;
    for n in 0..120 {
        let (ask, reply) = exchange(n);
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", ask))
            .await
            .unwrap();
        let key = turn.key().clone();
        let before = window_line(&manager, &key).await;
        let input = turn.messages().await.unwrap();
        let cut = window_line(&manager, &key).await != before;
        let history = input.iter().position(|m| !is_summary(m)).unwrap();
        if cut {
            cuts += 1;
            assert_eq!(
                input[history].role,
                ChatRole::User,
                "turn {n}: from a person's message"
            );
        } else if after_cut {
            // The summary of what the cut left out, then the same history.
            assert!(is_summary(&input[0]), "turn {n}: the new summary first");
            summaries.push(input[0].content.clone());
            let kept = &previous[history_start(&previous)..previous.len() - 1];
            assert_eq!(input[1..=kept.len()], *kept, "turn {n}");
        } else if !previous.is_empty() {
            let grown = previous.len() - 1;
            assert_eq!(
                input[..grown],
                previous[..grown],
                "turn {n}: only grows at its end"
            );
        }
        after_cut = cut;
        turn.complete(reply).await.unwrap();
        previous = input;
    }
    // 2,000 tokens hold about 25 exchanges; cut back to half, every dozen or so turns.
    assert!((4..=15).contains(&cuts), "{cuts} cuts");
    // Each cut's summary takes in the one before it: no two are the same (the last
    // cut's may fall after the last turn).
    let written = summaries.len();
    summaries.dedup();
    assert_eq!(summaries.len(), written);
    assert!(written + 1 >= cuts, "{written} summaries, {cuts} cuts");
}

/// The line the session's window starts at.
async fn window_line(manager: &SessionManager, key: &SessionKey) -> Option<String> {
    let stored = manager.session(key).get().await.unwrap().unwrap();
    stored.entry.window_start.map(|w| w.line)
}

/// Where the history of a model input starts: after its summary, if any.
fn history_start(input: &[ChatMessage]) -> usize {
    usize::from(input.first().is_some_and(|m| m.role == ChatRole::System))
}

/// The turns, of a conversation of `messages` (each answered `reply`), whose model
/// input does not begin with the whole of the previous turn's input: the cuts.
async fn cuts(manager: &SessionManager, messages: &[String], reply: &str) -> Vec<usize> {
    let (mut previous, mut cuts) = (Vec::<ChatMessage>::new(), Vec::new());
    for (n, text) in messages.iter().enumerate() {
        let turn = manager
            .turn(&InboundMessage::direct("telegram", "42", text.as_str()))
            .await
            .unwrap();
        let input = turn.messages().await.unwrap();
        if !previous.is_empty() && repeated_prefix(&previous, &input) < size(&previous) {
            cuts.push(n);
        }
        turn.complete(reply).await.unwrap();
        previous = input;
    }
    cuts
}

fn stable_manager(window: u64, keep_percent: u8) -> SessionManager {
    SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(window)
        .history_window(HistoryWindow::Stable { keep_percent })
        .build()
        .unwrap()
}

/// A share so small that not one exchange fits in it still cuts in blocks: the cut
/// keeps the last exchange, and the turns after it grow the window again.
#[tokio::test]
async fn a_tiny_share_still_cuts_in_blocks() {
    let messages: Vec<String> = (0..60)
        .map(|n| format!("{n:03} {}", "x".repeat(190)))
        .collect();
    for keep_percent in [0, 1, 2] {
        let manager = stable_manager(1_000, keep_percent);
        let cuts = cuts(&manager, &messages, &"y".repeat(190)).await;
        assert!(
            !cuts.is_empty() && cuts.len() <= messages.len() / 3,
            "keep {keep_percent} %: cuts at {cuts:?}"
        );
    }
}

/// A message bigger than the whole window is cut short in its own turn's input, and
/// the turn after cannot keep it either (the transcript holds it whole): both cut. The
/// window then starts at that next message; the turn after it begins with the summary
/// of what that cut left out (written once the cut's reply was returned), and the turns
/// after that only grow.
#[tokio::test]
async fn after_a_message_bigger_than_the_window_the_window_grows_again() {
    let manager = stable_manager(1_000, 50);
    let short = |n: usize| format!("{n} {}", "s".repeat(100));
    let messages = vec![
        short(0),
        short(1),
        "d".repeat(10_000),
        short(3),
        short(4),
        short(5),
    ];
    let cuts = cuts(&manager, &messages, "ok").await;
    assert_eq!(cuts, vec![2, 3, 4]);
}
