//! Personal data: erasing a person, retention, and a person's own copy.
//!
//! - [`SessionManager::forget_person`] erases one person from every session,
//!   transcript (archives too), shared group line, search index, group chatter,
//!   workspace and backup copy the manager reaches ([`PersonRef`], [`ForgetReport`]).
//! - [`SessionManager::apply_retention`] and [`SessionManager::spawn_retention`] keep
//!   conversations, group chatter and closed sessions only as long as a
//!   [`RetentionPolicy`] says, per agent and channel.
//! - [`SessionManager::prune`] removes the sessions idle past a cutoff, or beyond the
//!   newest so many ([`PruneOptions`]).
//! - [`SessionManager::export_person`] writes what the crate keeps of a person as one
//!   JSON document ([`PersonExportSummary`]).
//!
//! Where personal data lives on each backend, and what none of these can reach, is in
//! the crate's `docs/personal-data.md`. The stores take part through their
//! [`Erase`](crate::store::Erase) capability.

#[cfg(feature = "encryption")]
pub mod encryption;
mod export;
mod forget;
mod prune;
pub(crate) mod redact;
mod retention;

use crate::manager::SessionManager;

pub use export::PersonExportSummary;
pub use forget::{ForgetOptions, ForgetReport, PersonRef};
pub use prune::PruneOptions;
pub use retention::{RetentionPolicy, RetentionReport, RetentionRule, RetentionSweep};

/// The field of a session entry that says its text fields are sealed (feature
/// `encryption`).
pub(crate) const SEALED_ENTRY: &str = "sealed";

/// The field of a transcript line's message-log fields (else of the line itself) that
/// holds its sealed value (feature `encryption`).
pub(crate) const SEALED_LINE: &str = "sealed";

/// Whether a session's entry was sealed (feature `encryption`).
pub(crate) fn is_sealed(entry: &crate::store::entry::SessionEntry) -> bool {
    entry.extra.get(SEALED_ENTRY) == Some(&true.into())
}

/// Refuses a session whose entry was sealed, to a manager without its keys, and a
/// session written in plain text, to a manager with keys, before anything is written:
/// either would leave the session half sealed.
pub(crate) fn refuse_sealed(
    key: &crate::SessionKey,
    entry: Option<&crate::store::entry::SessionEntry>,
    has_keys: bool,
) -> crate::Result<()> {
    let Some(entry) = entry else {
        return Ok(());
    };
    let problem = match (is_sealed(entry), has_keys) {
        (true, false) => "is sealed: build the manager with encryption and its keys (SessionManagerBuilder::encryption)",
        (false, true) => "was written without encryption: seal the store first, by copying it into a new one with privacy::encryption::migrate_sealed",
        _ => return Ok(()),
    };
    Err(crate::Error::Encryption {
        problem: format!("session {key} {problem}"),
    })
}

impl SessionManager {
    /// Refuses a turn when the store's sessions are sealed and this manager has no
    /// keys, or are plain and it has: a new session would otherwise be written the
    /// other way, and the store be half sealed. One session tells (a store is sealed
    /// whole or not at all); once one agrees, the store is not asked again.
    pub(crate) async fn refuse_other_sealing(&self) -> crate::Result<()> {
        use std::sync::atomic::Ordering;
        if self.settings.sealing_agrees.load(Ordering::Relaxed) {
            return Ok(());
        }
        let one = crate::store::ListFilter {
            limit: Some(1),
            ..crate::store::ListFilter::new()
        };
        let listed = match self.seams.store.list(&one).await {
            // A sealed field that does not open (altered in the store) is a sealed
            // session's: the store is sealed, as this manager seals, and that session
            // refuses its own turns, not everyone's.
            Err(crate::Error::Encryption { .. }) if self.seals() => {
                self.settings.sealing_agrees.store(true, Ordering::Relaxed);
                return Ok(());
            }
            listed => listed?,
        };
        let Some(session) = listed.into_iter().next() else {
            // An empty store: the first session decides.
            return Ok(());
        };
        let key = &session.key;
        let problem = match (is_sealed(&session.entry), self.seals()) {
            (true, false) => format!(
                "this store is sealed (as session {key} is): build the manager with encryption and its keys (SessionManagerBuilder::encryption); a session written in plain text would leave it half sealed"
            ),
            (false, true) => format!(
                "this store was written without encryption (as session {key} was): seal it first, by copying it into a new one with privacy::encryption::migrate_sealed; a sealed session would leave it half sealed"
            ),
            _ => {
                self.settings.sealing_agrees.store(true, Ordering::Relaxed);
                return Ok(());
            }
        };
        Err(crate::Error::Encryption { problem })
    }

    /// Whether this manager seals what it keeps (built with encryption).
    pub(crate) fn seals(&self) -> bool {
        #[cfg(feature = "encryption")]
        return self.seams.data_keys.is_some();
        #[cfg(not(feature = "encryption"))]
        false
    }
}

impl crate::manager::SessionManagerBuilder {
    /// Marks the builder as serving an OpenClaw state directory.
    pub(crate) fn openclaw_tree(mut self) -> Self {
        self.openclaw_tree = true;
        self
    }
}

/// The manager as the privacy jobs see it: the steps of an erase and what the export
/// and retention share with it.
pub(crate) struct Privacy<'m>(pub(crate) &'m SessionManager);

impl Privacy<'_> {
    /// Refuses to `job` (erase, export) a person one of whose sessions is sealed, on a
    /// manager without the keys: it could neither destroy their keys nor read their
    /// words. Before anything is changed.
    pub(crate) fn refuse_sealed_without_keys<'s>(
        &self,
        mut sessions: impl Iterator<Item = &'s crate::store::StoredSession>,
        job: &str,
    ) -> crate::Result<()> {
        if self.0.seals() {
            return Ok(());
        }
        match sessions.find(|s| is_sealed(&s.entry)) {
            Some(sealed) => Err(crate::Error::Encryption {
                problem: format!(
                    "session {} is sealed: {job} through a manager built with encryption and its keys (on the command line: --keys), so the person's words are read and their data keys destroyed with them",
                    sealed.key
                ),
            }),
            None => Ok(()),
        }
    }
}

impl std::ops::Deref for Privacy<'_> {
    type Target = SessionManager;

    fn deref(&self) -> &SessionManager {
        self.0
    }
}
