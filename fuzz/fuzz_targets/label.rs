//! Any text: a label is accepted trimmed and 1-64 characters, or rejected with a typed
//! error.
#![no_main]

use agent_sessions::entry::parse_session_label;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(label) = parse_session_label(text) {
        assert_eq!(label, label.trim());
        let chars = label.chars().count();
        assert!((1..=64).contains(&chars), "{chars} characters");
    }
});
