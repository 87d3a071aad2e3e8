//! Personal data: erasing a person, retention, and a person's own copy.
//!
//! - [`SessionManager::forget_person`] erases one person from every session,
//!   transcript (archives too), shared group line, search index, group chatter,
//!   workspace and backup copy the manager reaches ([`PersonRef`], [`ForgetReport`]).
//! - [`SessionManager::apply_retention`] and [`SessionManager::spawn_retention`] keep
//!   conversations, group chatter and closed sessions only as long as a
//!   [`RetentionPolicy`] says, per agent and channel.
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
pub(crate) mod redact;
mod retention;

use crate::manager::SessionManager;

pub use export::PersonExportSummary;
pub use forget::{ForgetOptions, ForgetReport, PersonRef};
pub use retention::{RetentionPolicy, RetentionReport, RetentionRule, RetentionSweep};

/// The manager as the privacy jobs see it: the steps of an erase and what the export
/// and retention share with it.
pub(crate) struct Privacy<'m>(pub(crate) &'m SessionManager);

impl std::ops::Deref for Privacy<'_> {
    type Target = SessionManager;

    fn deref(&self) -> &SessionManager {
        self.0
    }
}
