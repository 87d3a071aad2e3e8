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
/// Call it on the files a turn answers ([`files_to_answer`] of its messages), before
/// the model call: the turn's own message, those that waited during a run and are
/// answered with it, and an input kept after a failed turn. A session keeps the files
/// without their bytes (their placeholder, file id, type and size), so earlier turns'
/// files are their placeholders and nothing is downloaded for them again. Messages
/// handed to a running turn by steering (`Turn::steering`) are fetched the same way:
/// `fetch_files(&bot, &mut message.attachments, max_bytes)`.
///
/// A file that is larger, gone from Telegram's servers, or fails to download keeps its
/// placeholder (the model reads that something was sent) and is named in
/// [`FetchedFiles::skipped`]; the turn goes on. Memory is bounded: a download stops
/// at `max_bytes`, whatever size Telegram announced (or when it announces none). Audio,
/// video and animated stickers are left to the host (a transcription, a description).
///
/// [`files_to_answer`]: agent_sessions::inbound::files_to_answer
///
/// ```no_run
/// # async fn run(
/// #     bot: teloxide::Bot,
/// #     message: teloxide::types::Message,
/// #     adapter: agent_sessions_teloxide::TelegramAdapter,
/// #     sessions: agent_sessions::SessionManager,
/// # ) -> agent_sessions::Result<()> {
/// use agent_sessions::inbound::files_to_answer;
///
/// let Some(inbound) = adapter.inbound(&message) else { return Ok(()) };
/// let turn = sessions.turn(&inbound).await?;
/// let mut messages = turn.messages().await?;
/// let fetched = agent_sessions_teloxide::fetch_files(&bot, files_to_answer(&mut messages), 5 << 20).await;
/// for (file_id, reason) in &fetched.skipped {
///     eprintln!("{file_id} stays a placeholder: {reason}");
/// }
/// // … the model call with `messages`: the photo as an image input.
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
    // teloxide reads a `getFile` answer without `file_size` (optional in the Bot API)
    // as `u32::MAX`: an unknown size, which the download's own bound then holds.
    let announced = Some(found.meta.size).filter(|size| *size != u32::MAX);
    if let Some(size) = announced.map(u64::from).filter(|size| *size > max_bytes) {
        return Err(too_large(size));
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
