//! Removing the sessions nobody uses any more: [`SessionManager::prune`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::manager::SessionManager;
use crate::store::entry::SessionStatus;
use crate::store::{ListFilter, SessionStoreExt, StatusFilter, StoredSession};

/// Which sessions [`SessionManager::prune`] removes.
///
/// ```
/// use std::time::Duration;
/// use agent_sessions::privacy::PruneOptions;
///
/// // Sessions idle for 30 days, but always keep the 500 most recent; report only.
/// let options = PruneOptions::older_than(Duration::from_secs(30 * 24 * 3600))
///     .keep_newest(500)
///     .dry_run();
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneOptions {
    /// Only sessions whose last activity is older than this.
    pub older_than: Option<Duration>,
    /// Never the this-many most recently active sessions (of those `filter` selects).
    pub keep_newest: Option<usize>,
    /// Only sessions this filter selects (its `limit` is ignored).
    pub filter: ListFilter,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

impl PruneOptions {
    /// Sessions inactive for longer than `age`.
    pub fn older_than(age: Duration) -> Self {
        PruneOptions {
            older_than: Some(age),
            ..PruneOptions::default()
        }
    }

    /// Keeps the `count` most recent sessions whatever their age.
    pub fn keep_newest(mut self, count: usize) -> Self {
        self.keep_newest = Some(count);
        self
    }

    /// Only sessions `filter` selects.
    pub fn filter(mut self, filter: ListFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Removes nothing; returns what would be removed.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }
}

impl SessionManager {
    /// Removes inactive sessions: those `options.filter` selects, older than
    /// `options.older_than`, beyond the `options.keep_newest` most recent — never a
    /// running session, and never one that changed while pruning (each removal is a
    /// compare-and-set on the revision that was judged). Sessions with status
    /// `inactive` are candidates like any other (the filter's default status condition,
    /// which hides them from listings, is widened here). With `older_than`, the closed
    /// sessions replaced under their keys whose last activity is older go too (the
    /// filter's other conditions apply; `keep_newest` counts current sessions only).
    /// Returns what was (or, in a dry run, would be) removed, most recent first.
    pub async fn prune(&self, options: &PruneOptions) -> Result<Vec<StoredSession>> {
        if options.older_than.is_none() && options.keep_newest.is_none() {
            // No criterion: nothing is old enough.
            return Ok(Vec::new());
        }
        let now_ms = self.seams.clock.now_millis();
        let cutoff = options
            .older_than
            .map(|age| now_ms.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)));
        let mut filter = options.filter.clone();
        filter.limit = None;
        if filter.status == StatusFilter::Listed {
            filter.status = StatusFilter::Current;
        }
        let replaced = match cutoff {
            Some(cutoff) => self.replaced_before(&options.filter, cutoff).await?,
            None => Vec::new(),
        };
        let mut candidates: Vec<StoredSession> = self
            .seams
            .store
            .list(&filter)
            .await?
            .into_iter()
            .skip(options.keep_newest.unwrap_or(0))
            .filter(|s| cutoff.is_none_or(|cutoff| s.entry.updated_at < cutoff))
            .filter(|s| !crate::exactly_once::holders::runs(&s.entry, now_ms))
            .collect();
        if options.dry_run {
            candidates.extend(replaced);
            return Ok(filter.finish(candidates));
        }
        let mut removed = Vec::with_capacity(candidates.len() + replaced.len());
        for session in candidates {
            match self
                .seams
                .store
                .compare_and_set(&session.key, Some(session.revision), None)
                .await
            {
                Ok(_) => removed.push(session),
                Err(Error::Conflict { .. }) => {
                    tracing::debug!(key = %session.key, "not pruned: changed while pruning");
                }
                Err(error) => return Err(error),
            }
        }
        if !replaced.is_empty() {
            let ids: Vec<String> = replaced
                .iter()
                .map(|s| s.entry.session_id.clone())
                .collect();
            match self.seams.store.as_erase() {
                Some(store) => store.remove_closed(&ids).await?,
                None => 0,
            };
            removed.extend(replaced);
        }
        tracing::info!(removed = removed.len(), "sessions pruned");
        Ok(filter.finish(removed))
    }

    /// The closed sessions replaced under their keys that `filter` selects (whatever its
    /// status condition) and whose last activity is before `cutoff`.
    async fn replaced_before(
        &self,
        filter: &ListFilter,
        cutoff: u64,
    ) -> Result<Vec<StoredSession>> {
        let mut closed = filter.clone();
        closed.limit = None;
        closed.status = StatusFilter::Only(vec![SessionStatus::Closed]);
        let mut replaced = self.seams.store.list(&closed).await?;
        replaced.retain(|s| s.entry.updated_at < cutoff);
        let mut kept = Vec::with_capacity(replaced.len());
        for session in replaced {
            // A current session that was closed is pruned (or kept) as a current one.
            let current = self.seams.store.get(&session.key).await?;
            if current.is_none_or(|c| c.entry.session_id != session.entry.session_id) {
                kept.push(session);
            }
        }
        Ok(kept)
    }
}
