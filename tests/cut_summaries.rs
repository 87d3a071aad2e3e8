//! The summary of what a context window cuts: written only when the window cuts, after
//! the turn's reply is returned, and taken in by the next turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_sessions::memory::{MemoryOptions, Summarizer, SummaryInput};
use agent_sessions::prelude::*;
use agent_sessions::transcript::InMemoryTranscriptStore;
use tokio::sync::Semaphore;

/// A summarizer that waits for a permit before each summary (a slow model the test
/// controls), and keeps what it was given.
#[derive(Clone)]
struct Gated {
    permits: Arc<Semaphore>,
    calls: Arc<AtomicUsize>,
    given: Arc<Mutex<Vec<SummaryInput>>>,
    fail: bool,
}

impl Default for Gated {
    fn default() -> Self {
        Gated {
            permits: Arc::new(Semaphore::new(0)),
            calls: Arc::default(),
            given: Arc::default(),
            fail: false,
        }
    }
}

#[async_trait::async_trait]
impl Summarizer for Gated {
    async fn summarize(&self, input: &SummaryInput) -> agent_sessions::Result<String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.given.lock().unwrap().push(input.clone());
        self.permits.acquire().await.unwrap().forget();
        if self.fail {
            return Err(agent_sessions::Error::component(
                "summarizer",
                std::io::Error::other("the model is down"),
            ));
        }
        let n = self.given.lock().unwrap().len();
        Ok(format!("summary {n}"))
    }
}

fn manager(summarizer: Gated) -> Arc<SessionManager> {
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(400)
        .memory(MemoryOptions::new().summarizer(summarizer))
        .build()
        .unwrap();
    Arc::new(manager)
}

fn dm(text: &str) -> InboundMessage {
    InboundMessage::direct("telegram", "42", text)
}

fn said(n: usize) -> String {
    format!("message {n} {}", "word ".repeat(30))
}

/// A whole turn: the input the model is given, and the reply sent back. `None` when
/// `complete` did not return within 10 s (it waited for the summarizer).
async fn turn(manager: &SessionManager, n: usize) -> Option<Vec<ChatMessage>> {
    let turn = manager.turn(&dm(&said(n))).await.unwrap();
    let input = turn.messages().await.unwrap();
    let completed =
        tokio::time::timeout(Duration::from_secs(10), turn.complete(format!("reply {n}")));
    completed.await.ok().map(|sent| {
        sent.unwrap();
        input
    })
}

fn window(input: &[ChatMessage]) -> (Option<&str>, &str) {
    let summary = input
        .first()
        .filter(|m| m.role == ChatRole::System)
        .map(|m| m.content.as_str());
    let first = input.iter().find(|m| m.role != ChatRole::System).unwrap();
    (summary, first.content.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summarizer_runs_only_for_what_a_cut_leaves_out_and_never_delays_a_reply() {
    let summarizer = Gated::default();
    let manager = manager(summarizer.clone());
    // Turns until the window cuts: no summarizer call before.
    let mut n = 0;
    let cut_input = loop {
        let input = turn(&manager, n).await.expect("a reply without a cut");
        n += 1;
        if !window(&input).1.starts_with("message 0 ") {
            break input;
        }
        assert_eq!(
            summarizer.calls.load(Ordering::SeqCst),
            0,
            "turn {n}: no cut, no call"
        );
    };
    // The turn that cut returned its reply; its summary is asked for afterwards, and
    // waits for the model.
    assert_eq!(window(&cut_input).0, None, "no summary of an earlier cut");
    let asked = async {
        while summarizer.calls.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the summary is asked for");
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), 1);
    let given = summarizer.given.lock().unwrap()[0].clone();
    assert_eq!(given.previous, None);
    let first_kept = window(&cut_input).1.to_owned();
    let texts: Vec<&str> = given.turns.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(
        texts.first(),
        Some(&said(0).as_str()),
        "from the conversation's start"
    );
    assert!(
        !texts.contains(&first_kept.as_str()),
        "up to the first message kept"
    );
    assert_eq!(texts.len() % 2, 0, "whole exchanges: {texts:?}");

    // The session's next turn waits for that summary, then begins with it.
    let next = tokio::spawn({
        let manager = manager.clone();
        async move { turn(&manager, 100).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !next.is_finished(),
        "the next turn waits for the summary being written"
    );
    summarizer.permits.add_permits(1);
    let input = next.await.unwrap().expect("a reply");
    assert_eq!(
        window(&input),
        (
            Some("Summary of the conversation so far:\nsummary 1"),
            first_kept.as_str()
        )
    );
    assert_eq!(
        summarizer.calls.load(Ordering::SeqCst),
        1,
        "no cut, no call"
    );
    let stored = manager
        .session(&manager.key_for(&dm("")).unwrap())
        .get()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.entry.context_summary.as_deref(), Some("summary 1"));
}

#[tokio::test]
async fn a_summarizer_that_fails_leaves_the_window_as_it_was_and_turns_go_on() {
    let summarizer = Gated {
        fail: true,
        ..Gated::default()
    };
    summarizer.permits.add_permits(1_000);
    let manager = manager(summarizer.clone());
    let mut cuts = 0;
    let mut last_first = String::new();
    for n in 0..40 {
        let input = turn(&manager, n).await.expect("a reply");
        let (summary, first) = window(&input);
        assert_eq!(summary, None, "turn {n}: no summary was ever written");
        if first != last_first {
            cuts += 1;
            last_first = first.to_owned();
        }
    }
    assert!(cuts >= 3, "{cuts}");
    // One call per cut (the first "cut" counted above is the conversation's start).
    assert_eq!(summarizer.calls.load(Ordering::SeqCst), cuts - 1);
}

/// A summary that was never written (the summarizer failed, or the process that was
/// writing it died) is made good at the next cut: that summary takes in what both cuts
/// left out.
#[tokio::test]
async fn a_summary_never_written_is_made_good_at_the_next_cut() {
    #[derive(Clone, Default)]
    struct FailsOnce {
        calls: Arc<AtomicUsize>,
        given: Arc<Mutex<Vec<SummaryInput>>>,
    }
    #[async_trait::async_trait]
    impl Summarizer for FailsOnce {
        async fn summarize(&self, input: &SummaryInput) -> agent_sessions::Result<String> {
            self.given.lock().unwrap().push(input.clone());
            match self.calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(agent_sessions::Error::component(
                    "summarizer",
                    std::io::Error::other("the process died"),
                )),
                n => Ok(format!("summary {n}")),
            }
        }
    }
    let summarizer = FailsOnce::default();
    let manager = SessionManager::builder(InMemoryStore::new())
        .transcripts(InMemoryTranscriptStore::new())
        .context_window(400)
        .memory(MemoryOptions::new().summarizer(summarizer.clone()))
        .build()
        .unwrap();
    let mut n = 0;
    while summarizer.calls.load(Ordering::SeqCst) < 2 {
        turn(&manager, n).await.expect("a reply");
        n += 1;
        assert!(n < 100, "two cuts within 100 turns");
    }
    // Settle the second summary, then look at what each call was given.
    let input = turn(&manager, n).await.expect("a reply");
    let given = summarizer.given.lock().unwrap().clone();
    let first: Vec<&str> = given[0].turns.iter().map(|t| t.text.as_str()).collect();
    let second: Vec<&str> = given[1].turns.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(first.first(), Some(&said(0).as_str()));
    assert_eq!(given[1].previous, None, "no summary was written before");
    // What the first cut left out is in the second summary (read back up to four
    // context windows).
    assert_eq!(
        second.first(),
        Some(&said(0).as_str()),
        "from the start again"
    );
    assert!(second.contains(first.last().unwrap()), "{second:?}");
    assert!(
        second.len() > first.len(),
        "both cuts: {} vs {}",
        second.len(),
        first.len()
    );
    assert_eq!(
        window(&input).0,
        Some("Summary of the conversation so far:\nsummary 1")
    );
}
