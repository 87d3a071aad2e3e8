//! Retention: conversations kept no longer than the policy says, per agent and channel,
//! on every backend; summaries kept where the policy says so; running sessions never
//! cut.

mod common;
#[path = "common/stores.rs"]
mod stores;

use std::time::Duration;

use agent_sessions::freshness::ManualClock;
use agent_sessions::prelude::*;
use agent_sessions::privacy::{RetentionPolicy, RetentionRule};
use agent_sessions::store::Backend;
use agent_sessions::transcript::search::{Search, SearchQuery};
use agent_sessions::Sender;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn policy() -> RetentionPolicy {
    RetentionPolicy::new()
        // SMS: 30 days, nothing kept after.
        .rule(
            RetentionRule::for_channel("sms")
                .transcripts(30 * DAY)
                .closed_sessions(90 * DAY),
        )
        // Everything else: 30 days, the summary kept; chatter 7 days; closed 90 days.
        .rule(
            RetentionRule::all()
                .transcripts(30 * DAY)
                .keep_summary()
                .group_chatter(7 * DAY)
                .closed_sessions(90 * DAY),
        )
}

async fn words_found(url: &str, word: &str) -> usize {
    let backend = Backend::open(url).await.unwrap();
    let search = Search::shared(backend.search_index().await.unwrap());
    search.sync(&**backend.transcripts()).await.unwrap();
    search.search(&SearchQuery::text(word)).await.unwrap().len()
}

async fn transcript_count(url: &str) -> usize {
    let backend = Backend::open(url).await.unwrap();
    backend
        .transcripts()
        .transcript_names(None)
        .await
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_kept_as_long_as_the_policy_says_on_every_backend() {
    let stores = stores::Stores::new("retention");
    for url in &stores.urls {
        let clock = ManualClock::at_millis(1_770_000_000_000);
        let manager = SessionManager::connect(url)
            .await
            .unwrap()
            .clock(clock.clone())
            .build()
            .unwrap();
        let sms = InboundMessage::direct("sms", "+15550100", "old sms retentionalpha");
        let telegram = InboundMessage::direct("telegram", "42", "old telegram retentionbravo");
        for message in [&sms, &telegram] {
            manager
                .turn(message)
                .await
                .unwrap()
                .complete("ok")
                .await
                .unwrap();
        }
        let chatter = InboundMessage::group("whatsapp", "120363@g.us", "+15550111", "lunch?")
            .with_sender(Sender {
                id: Some("+15550111".into()),
                name: Some("Ann".into()),
                ..Sender::default()
            });
        manager
            .turn(&chatter)
            .await
            .unwrap()
            .complete("-")
            .await
            .unwrap();
        assert!(
            words_found(url, "retentionalpha").await > 0,
            "{url}: indexed"
        );
        let applied = manager.apply_retention(&policy()).await.unwrap();
        assert_eq!(applied, Default::default(), "{url}: nothing is old yet");

        // A month later, one recent conversation and one running turn.
        clock.advance(31 * DAY);
        let recent = InboundMessage::direct("telegram", "43", "fresh retentioncharlie");
        manager
            .turn(&recent)
            .await
            .unwrap()
            .complete("ok")
            .await
            .unwrap();
        let running = manager
            .turn(&InboundMessage::direct("signal", "44", "still thinking"))
            .await
            .unwrap();
        clock.advance(31 * DAY);
        let before = transcript_count(url).await;
        let report = manager.apply_retention(&policy()).await.unwrap();
        // The old SMS session went whole; the old Telegram one kept its entry; the
        // recent one (31 days old now) is cut as well, the running one is not; the
        // group's chatter, never shown, is past its week.
        assert_eq!(report.sessions, 1, "{url}: {report:?}");
        assert_eq!(report.cut, 2, "{url}: telegram 42 and 43: {report:?}");
        assert_eq!(report.chatter_entries, 1, "{url}: {report:?}");
        assert_eq!(transcript_count(url).await, before - 3, "{url}");
        let sessions = manager.list(&ListFilter::new()).await.unwrap();
        assert!(
            !sessions.iter().any(|s| s.key.as_str().contains("sms")),
            "{url}"
        );
        assert!(
            sessions.iter().any(|s| s.key.as_str().ends_with(":42")),
            "{url}: kept"
        );
        assert_eq!(words_found(url, "retentionalpha").await, 0, "{url}");
        assert_eq!(words_found(url, "retentionbravo").await, 0, "{url}");
        // A cut session continues: its next message starts a new transcript.
        let again = InboundMessage::direct("telegram", "42", "back after two months");
        manager
            .turn(&again)
            .await
            .unwrap()
            .complete("welcome back")
            .await
            .unwrap();
        let key = manager.key_for(&again).unwrap();
        assert_eq!(
            manager.session(&key).messages().await.unwrap().len(),
            2,
            "{url}"
        );
        // The running turn was left alone and finishes.
        running.complete("done").await.unwrap();

        // Chatter older than a week goes, by its group's rule.
        let fresh_chatter =
            InboundMessage::group("whatsapp", "120363@g.us", "+15550111", "dinner?").with_sender(
                Sender {
                    id: Some("+15550111".into()),
                    name: Some("Ann".into()),
                    ..Sender::default()
                },
            );
        manager
            .turn(&fresh_chatter)
            .await
            .unwrap()
            .complete("-")
            .await
            .unwrap();
        clock.advance(8 * DAY);
        let report = manager.apply_retention(&policy()).await.unwrap();
        assert_eq!(report.chatter_entries, 1, "{url}: {report:?}");
    }
    stores.finish().await;
}

#[tokio::test]
async fn closed_sessions_go_after_their_own_period() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("json:{}", dir.path().display());
    let clock = ManualClock::at_millis(1_770_000_000_000);
    let manager = SessionManager::connect(&url)
        .await
        .unwrap()
        .clock(clock.clone())
        .build()
        .unwrap();
    let message = InboundMessage::direct("telegram", "42", "hi");
    manager
        .turn(&message)
        .await
        .unwrap()
        .complete("ok")
        .await
        .unwrap();
    let reset = InboundMessage::direct("telegram", "42", "/new");
    manager
        .turn(&reset)
        .await
        .unwrap()
        .complete("fresh")
        .await
        .unwrap();
    let closed_only = RetentionPolicy::new().rule(RetentionRule::all().closed_sessions(90 * DAY));
    clock.advance(89 * DAY);
    assert_eq!(
        manager
            .apply_retention(&closed_only)
            .await
            .unwrap()
            .closed_sessions,
        0
    );
    clock.advance(2 * DAY);
    let report = manager.apply_retention(&closed_only).await.unwrap();
    assert_eq!(report.closed_sessions, 1, "{report:?}");
    assert!(
        report.transcripts >= 1,
        "its archived transcript: {report:?}"
    );
    assert_eq!(report.sessions, 0, "the current session stays");
    assert_eq!(manager.list(&ListFilter::new()).await.unwrap().len(), 1);
}

/// A deleted session's archive (`….jsonl.deleted.<time>`) has no entry to age by: it
/// goes by its own time under the rule of its agent and channel, on every backend —
/// where retention used to keep it for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sessions_archive_goes_after_its_period() {
    let stores = stores::Stores::new("retention_archives");
    for url in &stores.urls {
        let clock = ManualClock::at_millis(1_770_000_000_000);
        let manager = SessionManager::connect(url)
            .await
            .unwrap()
            .clock(clock.clone())
            .build()
            .unwrap();
        let message = InboundMessage::direct("sms", "+15550100", "archivedword here");
        manager
            .turn(&message)
            .await
            .unwrap()
            .complete("ok")
            .await
            .unwrap();
        let key = manager.key_for(&message).unwrap();
        manager
            .session(&key)
            .delete(agent_sessions::manager::DeleteOptions::default())
            .await
            .unwrap();
        assert_eq!(
            transcript_count(url).await,
            1,
            "{url}: the deleted session's archive"
        );
        clock.advance(10 * DAY);
        let report = manager.apply_retention(&policy()).await.unwrap();
        assert_eq!(report.transcripts, 0, "{url}: too recent");
        clock.advance(21 * DAY);
        let report = manager.apply_retention(&policy()).await.unwrap();
        assert_eq!(report.transcripts, 1, "{url}");
        assert_eq!(transcript_count(url).await, 0, "{url}");
    }
    stores.finish().await;
}
