//! Exactly once at the edges: a message the channel delivers again is answered once,
//! each line of group chatter reaches one model input, a failed model call keeps or
//! drops its input, and a reply the channel refused is not believed read.
//!
//! - **Redelivered messages** (`dedupe`): a message with a message id is recorded in
//!   its session's entry, inside the same atomic update that resolves the session, and
//!   a delivery again within the [dedupe window](crate::manager::SessionManagerBuilder::dedupe_window)
//!   ([`DEFAULT_DEDUPE_WINDOW`]) is [`TurnAction::Duplicate`](crate::manager::TurnAction::Duplicate)
//!   — on any worker, and after a restart. A message whose turn was killed before its
//!   line was logged is taken over by the next delivery.
//! - **Group chatter shown once** (`claims`): a turn claims the group's chatter, and
//!   the inbound line that shows it settles the claim; a claim whose turn died is taken
//!   back.
//! - **Whether a turn still runs** (`holders`): what a claim or a message record names
//!   as its holder, so a live worker's is waited for and a dead process's is not.
//! - **Failed turns and deliveries** (`outcome`): [`Turn::fail`](crate::manager::Turn::fail)
//!   with a [`TurnFailure`] keeps or drops the turn's input;
//!   [`SessionManager::report_delivery`](crate::SessionManager::report_delivery) records
//!   a [`DeliveryReceipt`] ([`Delivery`]) as a `custom` transcript line
//!   ([`DELIVERY_CUSTOM_TYPE`]), so a reply the channel refused is not shown to the
//!   model as read.

pub(crate) mod claims;
pub(crate) mod dedupe;
pub(crate) mod finishing;
pub(crate) mod holders;
pub(crate) mod outcome;

pub use dedupe::DEFAULT_DEDUPE_WINDOW;
pub use outcome::{Delivery, DeliveryReceipt, TurnFailure, DELIVERY_CUSTOM_TYPE};
