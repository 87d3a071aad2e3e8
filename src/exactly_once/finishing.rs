//! A write that runs to its end even when its caller stops waiting.
//!
//! A host drops a turn's future when it gives up (a timeout, a cancelled handler), and
//! with it whatever the turn was writing. Some writes must not stop half-way: what went
//! out cannot be called back, and the turn's records must say how it ended. Such a write
//! is polled where it was awaited, at no extra cost, and handed to the runtime only if
//! its caller drops it unfinished.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// `work`, run to its end even when the returned future is dropped unfinished (then on
/// the current Tokio runtime, if there is one).
pub(crate) fn finishing<F>(work: F) -> Finishing<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    Finishing {
        work: Some(Box::pin(work)),
    }
}

/// See [`finishing`].
pub(crate) struct Finishing<F: Future + Send + 'static> {
    work: Option<Pin<Box<F>>>,
}

impl<F: Future + Send + 'static> Future for Finishing<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(work) = self.work.as_mut() else {
            panic!("a finished write polled again");
        };
        let done = work.as_mut().poll(cx);
        if done.is_ready() {
            self.work = None;
        }
        done
    }
}

impl<F: Future + Send + 'static> Drop for Finishing<F> {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    work.await;
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_dropped_unfinished_still_runs_to_its_end() {
        let landed = Arc::new(AtomicBool::new(false));
        let write = {
            let landed = landed.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                landed.store(true, Ordering::SeqCst);
            }
        };
        let gave_up = tokio::time::timeout(Duration::from_millis(5), finishing(write)).await;
        assert!(gave_up.is_err(), "the caller stopped waiting");
        assert!(!landed.load(Ordering::SeqCst));
        // On a busy machine the runtime may be slow to run it: wait up to 5 s.
        for _ in 0..100 {
            if landed.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(landed.load(Ordering::SeqCst), "it ran to its end");
        // Awaited, it is the write's own result.
        assert_eq!(finishing(async { 7 }).await, 7);
    }
}
