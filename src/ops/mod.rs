//! Tools for the people who run a bot: check a tree of OpenClaw stores and repair what
//! is safe to repair ([`examine`]), move sessions and transcripts between backends
//! ([`migrate`]), and read sessions from SQL through views ([`ViewSchemas`]).

pub(crate) mod doctor;
pub(crate) mod migrate;
pub(crate) mod views;

pub use doctor::{examine, DoctorOptions, DoctorReport, Finding, Repair};
pub use migrate::{
    migrate, migrate_with, Checksums, MigrateOptions, MigrationProgress, MigrationReport,
    NoProgress, SessionConflict,
};
pub use views::ViewSchemas;
