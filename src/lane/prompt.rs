//! What a follow-up turn's model is given for the messages it answers together, as
//! OpenClaw writes it.

use crate::store::entry::QueueDropped;

/// Heads the messages a follow-up turn answers together (OpenClaw's collect prompt).
const COLLECTED_HEADER: &str = "[Queued messages while agent was busy]";

/// The input of a turn that answers `inputs` (each already through the inbound
/// pipeline, oldest first), with the line that stands for what the cap `dropped`: one
/// input alone is itself; several are OpenClaw's collect prompt,
/// `[Queued messages while agent was busy]` then `---` / `Queued #n` / the message.
pub(crate) fn collected_input(inputs: &[String], dropped: Option<&QueueDropped>) -> String {
    let mut out = String::new();
    if let Some(dropped) = dropped.filter(|d| d.count > 0) {
        let noun = if dropped.count == 1 {
            "message"
        } else {
            "messages"
        };
        out.push_str(&format!(
            "[Queue overflow] Dropped {} {noun} due to cap.",
            dropped.count
        ));
        if !dropped.lines.is_empty() {
            out.push_str("\nSummary:");
            for line in &dropped.lines {
                out.push_str("\n- ");
                out.push_str(line);
            }
        }
        out.push_str("\n\n");
    }
    match inputs {
        [one] => out.push_str(one),
        _ => {
            out.push_str(COLLECTED_HEADER);
            for (n, input) in inputs.iter().enumerate() {
                out.push_str(&format!("\n\n---\nQueued #{}\n{input}", n + 1));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_messages_read_as_openclaws_collect_prompt() {
        let one = collected_input(&["hi".into()], None);
        assert_eq!(one, "hi");
        let two = collected_input(&["it's for Friday".into(), "make it Saturday".into()], None);
        assert_eq!(
            two,
            "[Queued messages while agent was busy]\n\n---\nQueued #1\nit's for Friday\n\n---\nQueued #2\nmake it Saturday"
        );
        let dropped = QueueDropped {
            count: 2,
            lines: vec!["first".into(), "second".into()],
            ids: Vec::new(),
        };
        let with = collected_input(&["third".into()], Some(&dropped));
        assert_eq!(
            with,
            "[Queue overflow] Dropped 2 messages due to cap.\nSummary:\n- first\n- second\n\nthird"
        );
    }
}
