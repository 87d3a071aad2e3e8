//! Plumbing shared by the file-backed stores.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use crate::error::{Error, Result};

/// Runs blocking file work off the async executor; a panic in it is re-raised here.
pub(crate) async fn blocking<T, F>(path: &Path, work: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(Error::io(
            "finish file work (the runtime is shutting down)",
            path,
            std::io::Error::other(error),
        )),
    }
}

/// The in-process queue for one file: one async mutex per path, shared by every store
/// of the process, so writers of one process never race each other on the file.
pub(crate) fn process_mutex(path: &Path) -> Arc<tokio::sync::Mutex<()>> {
    static MUTEXES: LazyLock<Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Mutex::default);
    let mut mutexes = MUTEXES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(mutex) = mutexes.get(path).and_then(Weak::upgrade) {
        return mutex;
    }
    mutexes.retain(|_, weak| weak.strong_count() > 0);
    let mutex = Arc::new(tokio::sync::Mutex::new(()));
    mutexes.insert(path.to_owned(), Arc::downgrade(&mutex));
    mutex
}
