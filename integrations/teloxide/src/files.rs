//! Telegram's files made readable by a model: a file id downloaded into a `data:` URL.

use agent_sessions::inbound::{Attachment, AttachmentKind};
use base64::Engine as _;
use futures_util::StreamExt;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;

/// What [`fetch_files`] did: how many files it fetched, and which it left as their
/// placeholder and why.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchedFiles {
    /// Files now with a `data:` URL.
    pub fetched: usize,
    /// Files left without one: their file id and the reason (too large, not found, a
    /// failed or empty download).
    pub skipped: Vec<(String, String)>,
}

/// Downloads the pictures and documents among `files` that have a Telegram file id and
/// no URL yet, each of at most `max_bytes`, and gives each a `data:` URL: what the
/// model integrations send as image and file inputs.
///
/// Call it on a message's files before its turn: the turn of that message hands the
/// bytes to its model call, and the session keeps the files without them (their
/// placeholder, file id, type and size), so a later turn shows the file as a
/// placeholder and nothing is downloaded twice. (Called on a turn's
/// [`ChatMessage`](agent_sessions::inbound::ChatMessage)s instead, it downloads every
/// file of the window, on every turn.)
///
/// A file that is larger, gone from Telegram's servers, or fails to download keeps its
/// placeholder (the model reads that something was sent) and is named in
/// [`FetchedFiles::skipped`]; the turn goes on. Memory is bounded: a download stops
/// at `max_bytes`, whatever size Telegram announced. Audio, video and animated
/// stickers are left to the host (a transcription, a description).
///
/// ```no_run
/// # async fn run(
/// #     bot: teloxide::Bot,
/// #     message: teloxide::types::Message,
/// #     adapter: agent_sessions_teloxide::TelegramAdapter,
/// #     sessions: agent_sessions::SessionManager,
/// # ) -> agent_sessions::Result<()> {
/// let Some(mut inbound) = adapter.inbound(&message) else { return Ok(()) };
/// let fetched = agent_sessions_teloxide::fetch_files(&bot, &mut inbound.attachments, 5 << 20).await;
/// for (file_id, reason) in &fetched.skipped {
///     eprintln!("{file_id} stays a placeholder: {reason}");
/// }
/// let turn = sessions.turn(&inbound).await?;
/// let messages = turn.messages().await?; // the photo as an image input, this once
/// # Ok(())
/// # }
/// ```
pub async fn fetch_files<'a, B>(
    bot: &B,
    files: impl IntoIterator<Item = &'a mut Attachment>,
    max_bytes: u64,
) -> FetchedFiles
where
    B: Requester + Download,
    B::StreamErr: std::fmt::Display,
{
    let mut report = FetchedFiles::default();
    let wanted = files
        .into_iter()
        .filter(|file| file.url.is_none() && readable(file));
    for file in wanted {
        let Some(id) = file.file_id.clone() else {
            continue;
        };
        match fetch(bot, file, max_bytes).await {
            Ok(url) => {
                file.url = Some(url);
                report.fetched += 1;
            }
            Err(reason) => report.skipped.push((id, reason)),
        }
    }
    report
}

/// Whether a model integration sends the file as an input once it has bytes.
fn readable(file: &Attachment) -> bool {
    file.is_picture() || file.kind == AttachmentKind::Document
}

/// The `data:` URL of `file`'s bytes, or why there is none.
async fn fetch<B>(bot: &B, file: &Attachment, max_bytes: u64) -> Result<String, String>
where
    B: Requester + Download,
    B::StreamErr: std::fmt::Display,
{
    let too_large = |size: u64| format!("{size} bytes, more than the {max_bytes} allowed");
    if let Some(size) = file.size.filter(|size| *size > max_bytes) {
        return Err(too_large(size));
    }
    let id = file.file_id.clone().unwrap_or_default();
    let found = bot
        .get_file(FileId(id))
        .await
        .map_err(|error| format!("getFile failed: {error}"))?;
    if u64::from(found.meta.size) > max_bytes {
        return Err(too_large(u64::from(found.meta.size)));
    }
    let mut bytes: Vec<u8> = Vec::new();
    let mut stream = std::pin::pin!(bot.download_file_stream(&found.path));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| format!("download failed: {error}"))?;
        if (bytes.len() + chunk.len()) as u64 > max_bytes {
            return Err(format!("more than the {max_bytes} bytes allowed"));
        }
        bytes.extend_from_slice(&chunk);
    }
    if bytes.is_empty() {
        return Err("the download was empty".to_owned());
    }
    let mime = file
        .mime_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    Ok(format!("data:{mime};base64,{data}"))
}
