//! Any text: a key either parses to a canonical key that parses to itself, or is a
//! typed error; a key built from any peer id stays inside its agent.
#![no_main]

use agent_sessions::{AgentId, Conversation, DefaultKeyBuilder, KeyBuilder, SessionKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(key) = SessionKey::parse(text) {
        let again = SessionKey::parse(key.as_str()).expect("a canonical key parses");
        assert_eq!(again, key);
        assert!(!key.as_str().chars().any(char::is_control));
    }
    if let Ok(key) = SessionKey::for_agent(&AgentId::main(), text) {
        assert_eq!(SessionKey::parse(key.as_str()).unwrap(), key);
    }
    let built = DefaultKeyBuilder::new().build(&Conversation::direct("telegram", text));
    if let Ok(key) = built {
        assert_eq!(key.agent_id(), Some("main"));
        assert_eq!(SessionKey::parse(key.as_str()).unwrap(), key);
    }
});
