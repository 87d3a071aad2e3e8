//! Any bytes as a session entry: rejected, or read into an entry that writes back and
//! reads again to the same entry (unknown fields included).
#![no_main]

use agent_sessions::SessionEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(entry) = serde_json::from_slice::<SessionEntry>(bytes) {
        let written = serde_json::to_vec(&entry).expect("entries serialise");
        let again: SessionEntry = serde_json::from_slice(&written).expect("written entries read");
        assert_eq!(again, entry);
    }
});
