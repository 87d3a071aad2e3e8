//! Any message text, sender name and untrusted metadata go through the inbound
//! pipeline without a panic, and the crate's markers in them are always quoted.
#![no_main]

use agent_sessions::inbound::pipeline::{defang, model_body, PipelineOptions};
use agent_sessions::{InboundMessage, Sender};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|parts: (&str, &str, &str)| {
    let (body, name, context) = parts;
    let message = InboundMessage::group("whatsapp", "g1", "u1", body)
        .with_sender(Sender {
            id: Some("u1".into()),
            name: Some(name.into()),
            ..Sender::default()
        })
        .with_untrusted_context(context);
    let _ = model_body(&message, body, &PipelineOptions::default());
    let once = defang(body);
    assert_eq!(defang(&once), once, "quoting is idempotent");
});
