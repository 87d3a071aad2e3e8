//! Group commit: the writers of one process share the lock and the write of one store
//! file.
//!
//! Writers queue on an async mutex per file. The first takes the file lock and the
//! document (reusing the document this process last wrote when the file is provably
//! unchanged), applies its change and — if others are queued behind it — leaves the
//! batch open and waits. Each next writer applies its change to the open batch; the
//! last one (nobody queued, or the batch is full) writes the file once, releases the
//! lock and tells every member how the write went. Nobody's update is acknowledged
//! before the write that holds it has finished, with the configured fsyncs; updates
//! land in queue order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use tokio::sync::watch;

use super::closed::ClosedChanges;
use super::courtesy::ForeignActivity;
use super::document::Document;
use super::io::FileStamp;
use super::lock::FileLock;
use crate::error::Error;

/// At most this many updates share one write (a bound on how long the first waits).
pub(super) const MAX_BATCH: usize = 64;

/// The writers of one store file in this process.
#[derive(Debug, Default)]
pub(super) struct FileQueue {
    /// Writers waiting for [`state`](Self::state).
    pub(super) waiting: AtomicUsize,
    pub(super) state: Arc<tokio::sync::Mutex<QueueState>>,
}

/// What the writer holding the queue sees.
#[derive(Debug, Default)]
pub(super) struct QueueState {
    /// The document as this process last wrote it, and the stamp of the file it wrote.
    pub(super) last_written: Option<(Arc<Document>, FileStamp)>,
    /// The batch being built, if a writer left one open.
    pub(super) open: Option<Batch>,
    /// What this process saw of other programs taking the lock.
    pub(super) foreign: ForeignActivity,
}

/// An open batch: the file lock is held and the document carries its members' changes.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) lock: FileLock,
    pub(super) document: Arc<Document>,
    /// Members whose change is in the document, waiting for the write.
    pub(super) members: usize,
    pub(super) outcome: watch::Sender<Option<Result<(), Arc<Error>>>>,
    /// The stamp of the file the document was read from (`None`: no file).
    pub(super) read_stamp: Option<FileStamp>,
    /// What the batch changes in the closed-sessions file beside the store file.
    pub(super) closed: ClosedChanges,
}

impl Batch {
    pub(super) fn new(
        lock: FileLock,
        document: Arc<Document>,
        read_stamp: Option<FileStamp>,
    ) -> Self {
        Batch {
            lock,
            document,
            members: 0,
            outcome: watch::channel(None).0,
            read_stamp,
            closed: ClosedChanges::default(),
        }
    }
}

/// The queue of the store file at `path`, shared by every store of the process.
pub(super) fn file_queue(path: &Path) -> Arc<FileQueue> {
    static QUEUES: LazyLock<Mutex<HashMap<PathBuf, Weak<FileQueue>>>> =
        LazyLock::new(Mutex::default);
    let mut queues = QUEUES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(queue) = queues.get(path).and_then(Weak::upgrade) {
        return queue;
    }
    queues.retain(|_, weak| weak.strong_count() > 0);
    let queue = Arc::new(FileQueue::default());
    queues.insert(path.to_owned(), Arc::downgrade(&queue));
    queue
}

impl FileQueue {
    /// Whether another writer is queued.
    pub(super) fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// Counts a writer as queued until the returned guard is dropped (its caller got
    /// the queue, or stopped waiting).
    pub(super) fn waiting(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(&self.waiting)
    }
}

/// A writer counted as queued; see [`FileQueue::waiting`].
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
