//! The revision of a stored entry, as data: what an error can name without depending on
//! the stores.

use std::fmt;

/// An opaque token that changes whenever an entry changes.
///
/// Read one with [`SessionStore::get`](crate::SessionStore::get), hand it back to
/// [`SessionStoreExt::compare_and_set`](crate::SessionStoreExt::compare_and_set) to update only if nobody else did in between.
/// Revisions are only comparable within one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Revision(u64);

impl Revision {
    /// A revision from a raw number (for store implementations).
    pub const fn from_u64(value: u64) -> Self {
        Revision(value)
    }

    /// The raw number.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The revision of a serialised entry: a 64-bit FNV-1a hash of its bytes.
    pub(crate) fn of_bytes(bytes: &[u8]) -> Self {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        Revision(bytes.iter().fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
        }))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
