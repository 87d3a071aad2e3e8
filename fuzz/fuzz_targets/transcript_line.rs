//! Any bytes as a transcript line: rejected, or read into an entry that round-trips;
//! any session id and topic name a file inside the sessions directory or are rejected.
#![no_main]

use agent_sessions::transcript::{TranscriptEntry, TranscriptRef};
use agent_sessions::AgentId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(entry) = serde_json::from_slice::<TranscriptEntry>(bytes) {
        let written = serde_json::to_vec(&entry).expect("entries serialise");
        let again: TranscriptEntry = serde_json::from_slice(&written).expect("written lines read");
        assert_eq!(again, entry);
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        let middle = (0..=text.len() / 2)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        let (id, topic) = text.split_at(middle);
        let mut transcript = TranscriptRef::new(AgentId::main(), id);
        transcript.topic = Some(topic.to_owned());
        if let Ok(name) = transcript.file_name() {
            assert!(!name.contains('/') && !name.contains('\\') && name != "..");
        }
    }
});
