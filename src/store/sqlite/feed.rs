//! Hearing other processes' appends: the append feed.
//!
//! Each append adds a small [`AppendNotice`] row to `transcript_feed` in its own
//! transaction, so the row exists exactly when the append committed. A store handle
//! with subscribers reads the rows newer than the last it saw every
//! [`FEED_POLL_INTERVAL`], and for each notice from another handle reads the announced
//! lines and publishes them to its subscribers. The feed keeps the newest
//! [`FEED_KEPT`] notices.

use std::sync::Weak;

use super::transcripts::SqliteRows;
use super::*;
use crate::store::sql_transcripts::{now, AppendNotice};

/// How often a handle with subscribers looks for other processes' appends: the longest
/// a subscriber in another process waits to hear of an append.
pub(super) const FEED_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How many notices the feed keeps; a reader more than this many appends behind misses
/// the oldest (a [`Follow`](crate::transcript::follow::Follow) does not).
const FEED_KEPT: i64 = 10_000;

/// The feed reader of a store handle; it stops when the handle is dropped.
#[derive(Debug)]
pub(super) struct FeedReader(tokio::task::JoinHandle<()>);

impl Drop for FeedReader {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Adds the notice of `events` to the feed inside `tx`, and trims the feed now and then.
pub(super) fn announce(
    tx: &Connection,
    writer: &str,
    transcript: &TranscriptRef,
    name: &str,
    events: &[SessionEvent],
) -> Result<()> {
    let Some(notice) = AppendNotice::of(writer, transcript, name, events) else {
        return Ok(());
    };
    let notice = serde_json::to_string(&notice).expect("a notice serialises");
    tx.prepare_cached("INSERT INTO transcript_feed (notice) VALUES (?1)")
        .and_then(|mut statement| statement.execute([notice]))
        .map_err(db_error("announce an append"))?;
    let id = tx.last_insert_rowid();
    if id % 1_000 == 0 {
        tx.execute(
            "DELETE FROM transcript_feed WHERE id <= ?1",
            [id - FEED_KEPT],
        )
        .map_err(db_error("trim the append feed"))?;
    }
    Ok(())
}

impl SqliteStore {
    /// Starts reading the feed, once per handle, when there is a runtime to read on and
    /// no reader is running (a subscription made outside a runtime, or one whose
    /// runtime has shut down, leaves the start to a later one).
    pub(super) fn start_feed_reader(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut reader = self
            .inner
            .feed_reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reader
            .as_ref()
            .is_some_and(|running| !running.0.is_finished())
        {
            return;
        }
        let store = Arc::downgrade(&self.inner);
        *reader = Some(FeedReader(runtime.spawn(read_feed(store))));
    }

    /// The newest notice's id.
    async fn feed_end(&self) -> Result<i64> {
        self.read(|c| {
            c.query_row(
                "SELECT COALESCE(MAX(id), 0) FROM transcript_feed",
                [],
                |row| row.get(0),
            )
            .map_err(db_error("read the append feed"))
        })
        .await
    }

    /// The updates other handles announced after notice `after`, and the last id read.
    async fn feed_after(&self, after: i64) -> Result<(Vec<TranscriptUpdate>, i64)> {
        let (writer, location) = (self.inner.writer.clone(), self.inner.path.clone());
        self.read(move |c| {
            let notices: Vec<(i64, String)> = c
                .prepare_cached(
                    "SELECT id, notice FROM transcript_feed WHERE id > ?1 ORDER BY id LIMIT 1000",
                )
                .and_then(|mut statement| {
                    statement
                        .query_map([after], |row| Ok((row.get(0)?, row.get(1)?)))?
                        .collect()
                })
                .map_err(db_error("read the append feed"))?;
            let last = notices.last().map_or(after, |(id, _)| *id);
            let mut updates = Vec::new();
            for (_, notice) in notices {
                let Ok(notice) = serde_json::from_str::<AppendNotice>(&notice) else {
                    continue;
                };
                if notice.writer == writer {
                    continue;
                }
                if let Some(update) = now(notice.update(&mut SqliteRows(c), &location))? {
                    updates.push(update);
                }
            }
            Ok((updates, last))
        })
        .await
    }
}

/// Reads the feed while the store lives, from about when the first subscriber came.
async fn read_feed(store: Weak<Inner>) {
    let mut seen = None;
    loop {
        let Some(inner) = store.upgrade() else { return };
        let handle = SqliteStore { inner };
        let step = async {
            let after = match seen {
                Some(after) => after,
                None => handle.feed_end().await?,
            };
            if handle.inner.hub.subscribers() == 0 {
                // Nobody listens: what was announced meanwhile need not be read.
                return handle.feed_end().await;
            }
            let (updates, last) = handle.feed_after(after).await?;
            for update in updates {
                handle.inner.hub.publish(update);
            }
            Ok::<_, Error>(last)
        };
        match step.await {
            Ok(last) => seen = Some(last),
            Err(error) => tracing::warn!(%error, "reading the append feed failed"),
        }
        drop(handle);
        tokio::time::sleep(FEED_POLL_INTERVAL).await;
    }
}
