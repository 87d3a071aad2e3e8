//! Files that come with a message: a photo, a voice note, a document.

use serde::{Deserialize, Serialize};

/// What kind of file an [`Attachment`] is: OpenClaw's five media placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AttachmentKind {
    /// A photo or picture.
    Image,
    /// A video, a video note or an animation.
    Video,
    /// A voice note or an audio file.
    Audio,
    /// Any other file.
    Document,
    /// A sticker.
    Sticker,
    /// A kind this version does not know (read from a newer writer).
    #[serde(other)]
    Other,
}

impl AttachmentKind {
    /// The placeholder the model's text carries for a file of this kind, as OpenClaw
    /// writes it (`<media:image>`).
    pub fn placeholder(self) -> &'static str {
        match self {
            AttachmentKind::Image => "<media:image>",
            AttachmentKind::Video => "<media:video>",
            AttachmentKind::Audio => "<media:audio>",
            AttachmentKind::Document => "<media:document>",
            AttachmentKind::Sticker => "<media:sticker>",
            AttachmentKind::Other => "<media:attachment>",
        }
    }
}

/// A file that came with an inbound message: its kind and what the channel says of it.
///
/// The model's text for the message carries one placeholder per file after the
/// message's own text (`"look at this\n<media:image>"`), so a caption never hides that
/// something was attached; the transcript keeps that text as OpenClaw writes it and
/// the attachment's fields in the line's message-log fields; and
/// [`ChatMessage::attachments`](crate::inbound::ChatMessage::attachments) hands them to
/// the model integrations, which send a file with a [`url`](Self::url) as an image
/// or file input.
///
/// A channel's file id (Telegram's `file_id`) is not something a model can open: the
/// host gives the file a URL — an `https://` address the model provider may fetch, or
/// a `data:` URL with the bytes (the Telegram integration's `fetch_files` downloads
/// one) — on the message before its turn, or on the turn's messages before the model
/// call. A session never keeps a `data:` URL: the transcript and the queue keep the
/// file's other fields, and the turn of the message that carried the bytes hands them
/// to its model call; later turns show the file as its placeholder and fields again.
/// Do not give a file a URL that embeds a secret (a bot token): an `https://` URL is
/// kept.
///
/// ```
/// use agent_sessions::inbound::{Attachment, AttachmentKind};
/// use agent_sessions::InboundMessage;
///
/// let photo = Attachment::new(AttachmentKind::Image)
///     .with_file_id("AgACAgIAAxkBAAIB")
///     .with_mime_type("image/jpeg")
///     .with_size(48_213);
/// let message = InboundMessage::direct("telegram", "42", "what is this plant?").with_attachment(photo);
/// assert_eq!(message.attachments[0].kind.placeholder(), "<media:image>");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Attachment {
    /// What kind of file it is.
    pub kind: AttachmentKind,
    /// Its MIME type (`image/jpeg`), when the channel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The channel's id for the file (Telegram's `file_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<String>,
    /// Where the model can read it: an `https://` URL or a `data:` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Its size in bytes, when the channel says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its file name, when it has one (documents, audio files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// A caption of its own, on channels where each file of a message has one (the
    /// message's caption is its text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
}

impl Attachment {
    /// A file of `kind`; say what the channel knows of it with the `with_*` methods.
    pub fn new(kind: AttachmentKind) -> Self {
        Attachment {
            kind,
            mime_type: None,
            file_id: None,
            url: None,
            size: None,
            file_name: None,
            caption: None,
        }
    }

    /// Sets the MIME type.
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// Sets the channel's file id.
    pub fn with_file_id(mut self, file_id: impl Into<String>) -> Self {
        self.file_id = Some(file_id.into());
        self
    }

    /// Sets the URL the model reads the file from.
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Sets the size in bytes.
    pub fn with_size(mut self, bytes: u64) -> Self {
        self.size = Some(bytes);
        self
    }

    /// Sets the file name.
    pub fn with_file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name = Some(name.into());
        self
    }

    /// Sets the file's own caption.
    pub fn with_caption(mut self, caption: impl Into<String>) -> Self {
        self.caption = Some(caption.into());
        self
    }

    /// Whether a model reads it as a picture: an image, or a sticker in an image format.
    pub fn is_picture(&self) -> bool {
        match self.kind {
            AttachmentKind::Image => true,
            AttachmentKind::Sticker => self
                .mime_type
                .as_deref()
                .is_none_or(|mime| mime.starts_with("image/")),
            _ => false,
        }
    }
}

/// `files` as a session keeps them: without `data:` URLs, whose bytes are for the
/// model call that has them, never for a transcript or a queue.
pub(crate) fn kept(files: &[Attachment]) -> Vec<Attachment> {
    files
        .iter()
        .map(|file| match &file.url {
            Some(url) if is_data_url(url) => Attachment {
                url: None,
                ..file.clone()
            },
            _ => file.clone(),
        })
        .collect()
}

/// `logged` (files as the session kept them) with the URLs that `given` (the files
/// as the host gave them) had and the session did not keep.
pub(crate) fn with_given_urls(
    mut logged: Vec<Attachment>,
    given: &[Attachment],
) -> Vec<Attachment> {
    for file in logged.iter_mut().filter(|file| file.url.is_none()) {
        let same = given.iter().find(|given| {
            given.url.is_some()
                && Attachment {
                    url: None,
                    ..(*given).clone()
                } == *file
        });
        if let Some(given) = same {
            file.url = given.url.clone();
        }
    }
    logged
}

fn is_data_url(url: &str) -> bool {
    url.trim_start()
        .get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// `text` followed by one placeholder line per attachment (each with its own
/// caption, when it has one), as the model is given a message with files.
pub(crate) fn with_placeholders(text: String, attachments: &[Attachment]) -> String {
    if attachments.is_empty() {
        return text;
    }
    let mut lines: Vec<String> = Vec::with_capacity(attachments.len() + 1);
    if !text.trim().is_empty() {
        lines.push(text);
    }
    for attachment in attachments {
        let placeholder = attachment.kind.placeholder();
        match attachment.caption.as_deref().map(one_line) {
            Some(caption) if !caption.is_empty() => {
                lines.push(format!("{placeholder} {caption}"));
            }
            _ => lines.push(placeholder.to_owned()),
        }
    }
    lines.join("\n")
}

/// A caption on one line, as a placeholder's line carries it.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caption_comes_before_the_placeholder_and_never_hides_it() {
        let photo = Attachment::new(AttachmentKind::Image);
        assert_eq!(
            with_placeholders("look at this".into(), std::slice::from_ref(&photo)),
            "look at this\n<media:image>"
        );
        assert_eq!(with_placeholders(String::new(), &[photo]), "<media:image>");
        assert_eq!(with_placeholders("just text".into(), &[]), "just text");
    }

    #[test]
    fn each_file_has_its_line_with_its_own_caption() {
        let files = [
            Attachment::new(AttachmentKind::Document).with_caption("the\nreport"),
            Attachment::new(AttachmentKind::Audio),
        ];
        assert_eq!(
            with_placeholders("two files".into(), &files),
            "two files\n<media:document> the report\n<media:audio>"
        );
    }

    #[test]
    fn a_session_keeps_no_file_bytes_and_a_turn_gets_them_back_from_its_message() {
        let given = [
            Attachment::new(AttachmentKind::Image)
                .with_file_id("a")
                .with_url("DATA:image/png;base64,AAAA"),
            Attachment::new(AttachmentKind::Image).with_url("https://example.com/b.png"),
            Attachment::new(AttachmentKind::Document).with_file_id("c"),
        ];
        let logged = kept(&given);
        assert_eq!(logged[0].url, None, "no bytes in the session");
        assert_eq!(logged[1].url, given[1].url, "an address is kept");
        assert_eq!(logged[2], given[2]);
        assert_eq!(with_given_urls(logged.clone(), &given), given);
        let other = [Attachment::new(AttachmentKind::Image)
            .with_file_id("z")
            .with_url("data:image/png;base64,BBBB")];
        assert_eq!(
            with_given_urls(logged.clone(), &other),
            logged,
            "a URL goes only to its own file"
        );
    }

    #[test]
    fn a_kind_this_version_does_not_know_is_kept_as_other() {
        let read: Attachment =
            serde_json::from_str(r#"{"kind":"hologram","fileId":"f1"}"#).unwrap();
        assert_eq!(read.kind, AttachmentKind::Other);
        assert_eq!(read.file_id.as_deref(), Some("f1"));
        assert_eq!(read.kind.placeholder(), "<media:attachment>");
    }

    #[test]
    fn stickers_are_pictures_unless_they_are_animated() {
        let sticker = Attachment::new(AttachmentKind::Sticker);
        assert!(sticker.clone().with_mime_type("image/webp").is_picture());
        assert!(!sticker.with_mime_type("video/webm").is_picture());
        assert!(!Attachment::new(AttachmentKind::Document).is_picture());
    }
}
