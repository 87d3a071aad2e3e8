//! Taking back what the model sees of earlier messages: undoing the last turn,
//! answering its message again, and a message the person edited (documented in the
//! parent module).
//!
//! Each is a mark in the session's transcript — a `custom` line naming the lines it is
//! about — so the transcript keeps everything that was said, and the conversation the
//! model sees applies the marks.

use serde_json::json;

use crate::error::{Error, Result};
use crate::exactly_once::claims::find_own_line;
use crate::exactly_once::dedupe;
use crate::identity::key::SessionKey;
use crate::inbound::chat::{ChatMessage, ChatRole};
use crate::inbound::InboundMessage;
use crate::manager::{SessionManager, Turn};
use crate::store::entry::SessionEntry;
use crate::transcript::{Direction, TranscriptEntry};

/// The `customType` of the line that takes turns back from what the model sees.
pub(crate) const UNDO_CUSTOM_TYPE: &str = "agent-sessions.undo";
/// The `customType` of the line that gives a message's edited text.
pub(crate) const EDIT_CUSTOM_TYPE: &str = "agent-sessions.edit";

/// [`Session::undo_last_turn`](crate::manager::Session::undo_last_turn) of `key`'s
/// session in `manager`.
pub(crate) async fn undo_last_turn(
    manager: &SessionManager,
    key: &SessionKey,
) -> Result<Vec<ChatMessage>> {
    let entry = manager.existing(key).await?.entry;
    refuse_while_running(manager, key, &entry)?;
    let (history, _) = manager.history_messages(key, &entry, None).await?;
    let Some(from) = history
        .iter()
        .rposition(|m| m.message.role == ChatRole::User)
    else {
        return Ok(Vec::new());
    };
    let undone = &history[from..];
    let lines: Vec<&str> = undone.iter().filter_map(|m| m.id.as_deref()).collect();
    if lines.is_empty() {
        return Ok(Vec::new());
    }
    let mark = TranscriptEntry::custom(
        UNDO_CUSTOM_TYPE,
        json!({ "lines": lines }),
        manager.clock().now(),
    );
    manager.session(key).append(vec![mark]).await?;
    Ok(undone.iter().map(|m| m.message.clone()).collect())
}

/// [`Error::TurnRunning`] while a turn runs in `key`'s session `entry`: what it logs
/// would land after the mark, without what it answers.
fn refuse_while_running(
    manager: &SessionManager,
    key: &SessionKey,
    entry: &SessionEntry,
) -> Result<()> {
    match crate::exactly_once::holders::runs(entry, manager.clock().now_millis()) {
        true => Err(Error::TurnRunning { key: key.clone() }),
        false => Ok(()),
    }
}

impl SessionManager {
    /// Answers the last turn of `message`'s session again: takes it back from what the
    /// model sees ([`undo_last_turn`](crate::manager::Session::undo_last_turn)) and
    /// starts a [`Turn`] for its message — as the model was given it, addressed to the
    /// agent — with `message`'s channel and sender: the person's "regenerate" (a button,
    /// a command), whose own text is not used. `None` when the session has no turn to
    /// answer again; [`Error::TurnRunning`] while a turn runs in it. A request the
    /// channel delivers again (or one with the id of the message it would answer) is
    /// the duplicate turn it is, and undoes nothing.
    ///
    /// The transcript keeps the first answer, marked undone, and logs the message
    /// again with the new one.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let say = |text: &str| InboundMessage::direct("telegram", "42", text);
    /// let turn = manager.turn(&say("Name a colour")).await?;
    /// turn.complete("Red.").await?;
    ///
    /// // The person taps "regenerate".
    /// let again = manager.regenerate(&say("")).await?.expect("a turn to answer again");
    /// let seen: Vec<String> = again.messages().await?.into_iter().map(|m| m.content).collect();
    /// assert_eq!(seen, ["Name a colour"], "the first answer is no longer seen");
    /// again.complete("Blue.").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn regenerate(&self, message: &InboundMessage) -> Result<Option<Turn<'_>>> {
        let key = self.key_for(message)?;
        // A request the channel delivered again is the duplicate it is: nothing is
        // undone for it.
        if let Some(id) = dedupe::inbound_id(message) {
            let stored = self.seams.store.get(&key).await?;
            if stored.is_some_and(|s| s.entry.recent_inbound.iter().any(|r| r.id == id)) {
                return self.turn(message).await.map(Some);
            }
        }
        let undone = match undo_last_turn(self, &key).await {
            Err(Error::NotFound { .. }) => return Ok(None),
            undone => undone?,
        };
        let Some(input) = undone.into_iter().find(|m| m.role == ChatRole::User) else {
            return Ok(None);
        };
        // The message as the model was given it, answered again as it was: addressed
        // to the agent, not through the inbound pipeline a second time.
        let mut again = message.clone().mentioning_agent();
        again.body = input.content;
        again.attachments = input.attachments;
        again.untrusted_context.clear();
        again.verbatim = true;
        self.turn(&again).await.map(Some)
    }

    /// Shows the model `edited`'s new text in place of the message it edits (a
    /// channel's edited message: Telegram's `edited_message`, which keeps the message's
    /// id): a mark in the session's transcript names the message's line and gives the
    /// text, and the original stays in the transcript. Whether the message's line was
    /// found in the session's current transcript (an edit of a message of an earlier
    /// session, or of one never taken, changes nothing; one that was undone stays
    /// unseen).
    ///
    /// The edited message must carry its id ([`InboundMessage::with_message_id`]), the
    /// id of the message it edits; without one it is refused ([`Error::InvalidOption`]).
    /// The new text goes through the inbound pipeline as any message's does (a line
    /// that looks like the system's is quoted, the untrusted context is marked), and in
    /// a group it is put in an envelope naming the edit's sender; it replaces the
    /// line's whole text — in a group, the chatter that line carried too.
    ///
    /// ```
    /// use agent_sessions::prelude::*;
    /// use agent_sessions::transcript::InMemoryTranscriptStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> agent_sessions::Result<()> {
    /// let manager = SessionManager::builder(InMemoryStore::new())
    ///     .transcripts(InMemoryTranscriptStore::new())
    ///     .build()?;
    /// let said = InboundMessage::direct("telegram", "42", "Book for 3 people").with_message_id("501");
    /// manager.turn(&said).await?.complete("Booked for 3.").await?;
    ///
    /// let edited = InboundMessage::direct("telegram", "42", "Book for 4 people").with_message_id("501");
    /// assert!(manager.edit_message(&edited).await?);
    ///
    /// let next = manager.turn(&InboundMessage::direct("telegram", "42", "Thanks")).await?;
    /// let seen: Vec<String> = next.messages().await?.into_iter().map(|m| m.content).collect();
    /// assert_eq!(seen, ["Book for 4 people", "Booked for 3.", "Thanks"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn edit_message(&self, edited: &InboundMessage) -> Result<bool> {
        let Some(id) = dedupe::inbound_id(edited) else {
            return Err(Error::InvalidOption {
                option: "edited message",
                problem: "it carries no message id (InboundMessage::with_message_id)",
            });
        };
        let key = self.key_for(edited)?;
        let transcripts = self.transcript_store()?;
        let transcript = match self.transcript_of(&key).await {
            Ok((transcript, _)) => transcript,
            Err(Error::NotFound { .. }) => return Ok(false),
            Err(error) => return Err(error),
        };
        // The message's own line (a message answered with others, in one line of
        // several, is not one the edit can replace).
        let line = find_own_line(transcripts, &transcript, |line| {
            line.log.as_ref().is_some_and(|log| {
                log.direction == Some(Direction::Inbound)
                    && log.inbound_id.as_deref() == Some(id.as_str())
            })
        })
        .await?;
        let Some(line) = line.and_then(|event| event.entry.id) else {
            return Ok(false);
        };
        // The new text as a message's text is given to the model: through the inbound
        // pipeline, in a group in an envelope that names its real sender.
        let now = self.seams.clock.now();
        let options = self.pipeline_options(false);
        let text = crate::inbound::model_input::message_text(edited, &edited.body, &options, now);
        let mark =
            TranscriptEntry::custom(EDIT_CUSTOM_TYPE, json!({ "line": line, "text": text }), now);
        transcripts.append(&transcript, vec![mark]).await?;
        Ok(true)
    }
}
