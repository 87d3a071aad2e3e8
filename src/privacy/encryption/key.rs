//! Keys: the master key, the data keys it wraps, and where data keys are kept.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use aes_gcm::Aes256Gcm;
use async_trait::async_trait;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::Digest;

use crate::error::{Error, Result};
use crate::AgentId;

const KEY_LEN: usize = 32;
/// The longest nonce of a [`Cipher`].
const MAX_NONCE_LEN: usize = 24;
/// The length of the tag that authenticates a sealed value.
const TAG_LEN: usize = 16;
/// What a key file holds before its sealed key.
const KEY_FILE_PREFIX: &str = "agent-sessions-data-key-v1:";
/// Key files are a few dozen bytes; anything larger is not one.
const KEY_FILE_LIMIT: u64 = 4096;

fn problem(problem: impl Into<String>) -> Error {
    Error::Encryption {
        problem: problem.into(),
    }
}

/// `bytes` in lowercase hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        text.push(DIGITS[usize::from(b >> 4)].into());
        text.push(DIGITS[usize::from(b & 15)].into());
    }
    text
}

/// Fills a buffer from the operating system's random source.
pub(crate) fn random<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| problem(format!("the system's random source failed: {e}")))?;
    Ok(bytes)
}

/// The authenticated ciphers a sealed value may be sealed with: AES-256-GCM for every
/// value sealed now (AES-NI and carry-less multiply where the processor has them);
/// XChaCha20-Poly1305 for the values sealed by earlier builds, which still open, and
/// for data key files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cipher {
    /// XChaCha20-Poly1305, a 24-byte nonce: values that start `enc1:`, and key files.
    XChaCha20Poly1305,
    /// AES-256-GCM, a 12-byte nonce: values that start `enc2:`.
    Aes256Gcm,
}

impl Cipher {
    /// The cipher values are sealed with now.
    pub(crate) const VALUES: Cipher = Cipher::Aes256Gcm;

    const fn nonce_len(self) -> usize {
        match self {
            Cipher::XChaCha20Poly1305 => 24,
            Cipher::Aes256Gcm => 12,
        }
    }

    /// How a sealed value sealed with this cipher starts: the format's version.
    pub(crate) const fn prefix(self) -> &'static str {
        match self {
            Cipher::XChaCha20Poly1305 => "enc1:",
            Cipher::Aes256Gcm => "enc2:",
        }
    }

    /// The cipher a sealed value was sealed with, and the value after its prefix.
    pub(crate) fn of(sealed: &str) -> Option<(Cipher, &str)> {
        [Cipher::Aes256Gcm, Cipher::XChaCha20Poly1305]
            .into_iter()
            .find_map(|cipher| Some((cipher, sealed.strip_prefix(cipher.prefix())?)))
    }

    /// `body` sealed in place with `nonce`, `aad` bound: its tag.
    fn seal_in_place(
        self,
        key: &[u8; KEY_LEN],
        nonce: &[u8],
        aad: &[u8],
        body: &mut [u8],
    ) -> Option<[u8; TAG_LEN]> {
        let tag = match self {
            Cipher::XChaCha20Poly1305 => XChaCha20Poly1305::new(key.into())
                .encrypt_in_place_detached(XNonce::from_slice(nonce), aad, body),
            Cipher::Aes256Gcm => Aes256Gcm::new(key.into()).encrypt_in_place_detached(
                aes_gcm::Nonce::from_slice(nonce),
                aad,
                body,
            ),
        };
        tag.ok().map(Into::into)
    }

    /// `sealed` (a nonce, the text, its tag) opened; `None` when it does not open.
    pub(crate) fn open(self, key: &[u8; KEY_LEN], aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < self.nonce_len() + TAG_LEN {
            return None;
        }
        let (nonce, body) = sealed.split_at(self.nonce_len());
        let msg = Payload { msg: body, aad };
        match self {
            Cipher::XChaCha20Poly1305 => {
                XChaCha20Poly1305::new(key.into()).decrypt(XNonce::from_slice(nonce), msg)
            }
            Cipher::Aes256Gcm => {
                Aes256Gcm::new(key.into()).decrypt(aes_gcm::Nonce::from_slice(nonce), msg)
            }
        }
        .ok()
    }

    /// `plain` sealed under `key` with `nonce`, `aad` bound: the nonce, then the
    /// ciphertext with its tag.
    fn seal_with_nonce(
        self,
        key: &[u8; KEY_LEN],
        nonce: &[u8],
        aad: &[u8],
        plain: &[u8],
    ) -> Result<Vec<u8>> {
        let nonce = &nonce[..self.nonce_len()];
        let mut out = Vec::with_capacity(nonce.len() + plain.len() + TAG_LEN);
        out.extend_from_slice(nonce);
        out.extend_from_slice(plain);
        let tag = self
            .seal_in_place(key, nonce, aad, &mut out[nonce.len()..])
            .ok_or_else(|| problem("a value could not be sealed"))?;
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// `plain` sealed under `key` with a fresh random nonce, `aad` bound.
    pub(crate) fn seal(self, key: &[u8; KEY_LEN], aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let nonce: [u8; MAX_NONCE_LEN] = random()?;
        self.seal_with_nonce(key, &nonce, aad, plain)
    }
}

/// Seals `plain` under `key` with [`Cipher::VALUES`] and a fresh nonce, `aad` bound:
/// the nonce, then the ciphertext with its tag.
pub(crate) fn seal_bytes(key: &[u8; KEY_LEN], aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
    Cipher::VALUES.seal(key, aad, plain)
}

/// Whether `text` is a sealed text ([`seal_text`]).
pub(crate) fn is_sealed_text(text: &str) -> bool {
    Cipher::of(text).is_some()
}

/// `plain` sealed under `key`, bound to `place` (what it is and where it is kept):
/// `enc2:<key id>:<nonce and ciphertext in base64>`.
pub(crate) fn seal_text(key: &DataKey, place: &str, plain: &str) -> Result<String> {
    let aad = format!("agent-sessions text v1\0{place}");
    let sealed = seal_bytes(&key.bytes, aad.as_bytes(), plain.as_bytes())?;
    Ok(text_of(key, &sealed))
}

/// A sealed text: its prefix, the key's id, the sealed bytes in base64.
fn text_of(key: &DataKey, sealed: &[u8]) -> String {
    format!(
        "{}{}:{}",
        Cipher::VALUES.prefix(),
        key.id(),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
    )
}

/// [`seal_text`] with a nonce drawn from the key, the place and the text instead of at
/// random: the same text in the same place seals the same, so a store that skips a
/// repeat of the last text (system events) still sees the repeat. It reveals only that
/// two texts in one place are equal.
pub(crate) fn seal_text_repeatable(key: &DataKey, place: &str, plain: &str) -> Result<String> {
    let aad = format!("agent-sessions text v1\0{place}");
    let mut hasher = sha2::Sha256::new();
    for part in [
        b"agent-sessions nonce v1".as_slice(),
        &key.bytes,
        aad.as_bytes(),
        b"\0",
        plain.as_bytes(),
    ] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let sealed = Cipher::VALUES.seal_with_nonce(
        &key.bytes,
        &digest[..MAX_NONCE_LEN],
        aad.as_bytes(),
        plain.as_bytes(),
    )?;
    Ok(text_of(key, &sealed))
}

/// The id of the key `sealed` was sealed under, if it is a sealed text.
pub(crate) fn sealed_text_key(sealed: &str) -> Option<&str> {
    Some(Cipher::of(sealed)?.1.split_once(':')?.0)
}

/// What [`seal_text`] sealed: `Some(None)` when `key` is not the key it was sealed
/// under (that one was destroyed: the text is erased), `None` when `key` is that key
/// and it does not open (altered, or moved from another place).
pub(crate) fn open_text(key: &DataKey, place: &str, sealed: &str) -> Option<Option<String>> {
    let (cipher, rest) = Cipher::of(sealed)?;
    let (key_id, b64) = rest.split_once(':')?;
    if key_id != key.id() {
        return Some(None);
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64)
        .ok()?;
    let aad = format!("agent-sessions text v1\0{place}");
    let plain = cipher.open(&key.bytes, aad.as_bytes(), &bytes)?;
    String::from_utf8(plain).ok().map(Some)
}

/// The key that wraps every data key: 32 random bytes the host keeps out of the store
/// (an environment variable, a file readable by the bot alone, a KMS).
///
/// Written as 64 hexadecimal digits or as base64 (standard or URL-safe, padded or
/// not); [`MasterKey::generate`] makes one.
///
/// ```
/// use agent_sessions::privacy::encryption::MasterKey;
///
/// let key = MasterKey::generate()?;
/// let again = MasterKey::parse(&key.to_base64())?;
/// assert_eq!(key.fingerprint(), again.fingerprint());
/// assert!(MasterKey::parse("too short").is_err());
/// // Its Debug form never shows the key.
/// assert!(!format!("{key:?}").contains(&key.to_base64()));
/// # Ok::<(), agent_sessions::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct MasterKey([u8; KEY_LEN]);

impl MasterKey {
    /// A new random key.
    pub fn generate() -> Result<Self> {
        random().map(MasterKey)
    }

    /// The key written in `text` (64 hex digits or base64 of 32 bytes, surrounding
    /// whitespace ignored); [`Error::Encryption`] otherwise (all zeros too), without
    /// repeating the text.
    pub fn parse(text: &str) -> Result<Self> {
        let text = text.trim();
        let bytes = if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..KEY_LEN)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<std::result::Result<Vec<u8>, _>>()
                .ok()
        } else {
            use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
            let unpadded = text.trim_end_matches('=');
            STANDARD
                .decode(text)
                .or_else(|_| URL_SAFE.decode(text))
                .or_else(|_| URL_SAFE_NO_PAD.decode(unpadded))
                .ok()
        };
        bytes
            .and_then(|bytes| <[u8; KEY_LEN]>::try_from(bytes).ok())
            // All zeros is a placeholder, not a key.
            .filter(|bytes| bytes.iter().any(|b| *b != 0))
            .map(MasterKey)
            .ok_or_else(|| {
                problem("a master key is 32 bytes written as 64 hex digits or as base64")
            })
    }

    /// The key in environment variable `var`; [`Error::Encryption`] when it is unset or
    /// not a key.
    pub fn from_env(var: &str) -> Result<Self> {
        let text = std::env::var(var)
            .map_err(|_| problem(format!("the master key variable {var} is not set")))?;
        Self::parse(&text).map_err(|_| {
            problem(format!(
                "{var} does not hold a master key (64 hex digits or base64 of 32 bytes)"
            ))
        })
    }

    /// The key in the file at `path` (not followed if it is a symbolic link).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (bytes, _) = crate::store::fs::read_limited(path, KEY_FILE_LIMIT)
            .map_err(|e| Error::io("read", path, e))?
            .ok_or_else(|| problem(format!("there is no master key file at {}", path.display())))?;
        let text = String::from_utf8(bytes).unwrap_or_default();
        Self::parse(&text).map_err(|_| {
            problem(format!(
                "{} does not hold a master key (64 hex digits or base64 of 32 bytes)",
                path.display()
            ))
        })
    }

    /// The key as base64, to keep it somewhere.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0)
    }

    /// A short name for the key that does not reveal it: the first 8 hex digits of its
    /// SHA-256. Which key a store was sealed under, in messages and `keys status`.
    pub fn fingerprint(&self) -> String {
        hex(&sha2::Sha256::digest(self.0)[..4])
    }

    /// `key` sealed under this key, bound to `name` (its file's name).
    fn wrap(&self, name: &str, key: &[u8]) -> Result<Vec<u8>> {
        Cipher::XChaCha20Poly1305.seal(&self.0, wrap_aad(name).as_bytes(), key)
    }

    fn unwrap_key(&self, name: &str, wrapped: &[u8]) -> Option<Vec<u8>> {
        Cipher::XChaCha20Poly1305.open(&self.0, wrap_aad(name).as_bytes(), wrapped)
    }
}

fn wrap_aad(name: &str) -> String {
    format!("agent-sessions data key v1\0{name}")
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterKey({})", self.fingerprint())
    }
}

/// Whose data a data key seals: a person (by canonical id), else a session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KeyOwner {
    /// A person, by the id transcripts record for them (`log.personId`): what they
    /// wrote, and what was written to them.
    Person(String),
    /// One session of an agent: lines that name no person (summaries, system events,
    /// group lines of unknown senders).
    Session {
        /// The agent.
        agent: AgentId,
        /// The session id.
        session_id: String,
    },
    /// A session key (`agent:main:telegram:dm:42`): its entry's text fields
    /// (previews, names), its waiting system events and group chatter.
    SessionKey(String),
    /// The store's search index: the one key its words are hashed under, so that a
    /// search finds them without the index keeping them in plain text. Not a
    /// person's: erasing one does not destroy it.
    Search,
}

impl KeyOwner {
    /// A person's owner, by their id as erasing them names it (trimmed, lower-cased):
    /// `Jane` and `jane`, `slack:U024BE7LH` and `slack:u024be7lh` are one owner, one key.
    pub(crate) fn person(id: &str) -> KeyOwner {
        KeyOwner::Person(id.trim().to_lowercase())
    }

    /// The owner as one string, bound to its key when the key is wrapped.
    fn tag(&self) -> String {
        match self {
            KeyOwner::Person(id) => format!("agent-sessions data key\0person\0{id}"),
            KeyOwner::Session { agent, session_id } => {
                format!("agent-sessions data key\0session\0{agent}\0{session_id}")
            }
            KeyOwner::SessionKey(key) => format!("agent-sessions data key\0key\0{key}"),
            KeyOwner::Search => "agent-sessions data key\0search".to_owned(),
        }
    }
}

/// A data key: 32 random bytes that seal one owner's data. Its `Debug` form never
/// shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey {
    bytes: [u8; KEY_LEN],
    /// Its short name (see [`DataKey::id`]) in hexadecimal digits, worked out once.
    id: [u8; KEY_ID_LEN],
}

/// How many hexadecimal digits a data key's id has.
const KEY_ID_LEN: usize = 8;

impl DataKey {
    /// A new random key.
    pub fn generate() -> Result<Self> {
        random().map(DataKey::from_bytes)
    }

    /// The key made of `bytes` (a key management service's plaintext data key).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(hex(&sha2::Sha256::digest(bytes)[..KEY_ID_LEN / 2]).as_bytes());
        DataKey { bytes, id }
    }

    /// The key's bytes (to wrap it in a key management service).
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }

    /// A short name of the key that does not reveal it (8 hex digits of its SHA-256),
    /// kept with what it seals: a value sealed under a key since destroyed — even if
    /// its owner has a new key now — reads as erased.
    pub(crate) fn id(&self) -> &str {
        std::str::from_utf8(&self.id).unwrap_or_default()
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// Where data keys are kept and destroyed: the seam a key management service plugs
/// into. The crate's own is [`KeyFiles`].
///
/// A key, once made, must be the one every later call returns for its owner, in every
/// process, until it is destroyed; two processes asking at once for a key not yet made
/// must both get the same one.
#[async_trait]
pub trait KeyProvider: Send + Sync + fmt::Debug {
    /// `owner`'s data key; made on first use when `create`. `None` when the owner has
    /// none (never made, or destroyed): what it sealed can no longer be read.
    async fn data_key(&self, owner: &KeyOwner, create: bool) -> Result<Option<DataKey>>;

    /// Destroys `owner`'s data keys; whether there were any.
    async fn destroy(&self, owner: &KeyOwner) -> Result<bool>;

    /// Every key of `owner` that still opens what it sealed: the current one (what
    /// [`data_key`](Self::data_key) returns) first, then those
    /// [`rotate_key`](Self::rotate_key) replaced, until they are retired. The default: the
    /// current one alone.
    async fn data_keys(&self, owner: &KeyOwner) -> Result<Vec<DataKey>> {
        Ok(self.data_key(owner, false).await?.into_iter().collect())
    }

    /// Gives `owner` a new current key, keeping the ones before it to open what they
    /// sealed; whether it had one (an owner without a key gets a new one on first
    /// use anyway). The default refuses: a provider that keeps one key per owner
    /// cannot rotate.
    async fn rotate_key(&self, owner: &KeyOwner) -> Result<bool> {
        let _ = owner;
        Err(problem(
            "this key provider keeps one key per owner and cannot rotate data keys",
        ))
    }

    /// Lets go of `owner`'s keys other than the current one and those in `keep`; how
    /// many. The default keeps everything.
    async fn retire_keys(&self, owner: &KeyOwner, keep: &[DataKey]) -> Result<usize> {
        let _ = (owner, keep);
        Ok(0)
    }
}

/// The key among `keys` whose id is `id`: the one that sealed a value, if it is left.
pub(crate) fn key_with_id<'k>(keys: &'k [DataKey], id: &str) -> Option<&'k DataKey> {
    keys.iter().find(|key| key.id() == id)
}

/// Data keys in a directory, each in its own file sealed by the master key (so a copy
/// of the directory is useless without it), named by a hash of its owner.
///
/// Keep the directory apart from the store and out of its backups: a backup holds the
/// store's sealed lines, and a person's lines in it can be read only while her key file
/// exists. Every process of one bot opens the same directory with the same master key.
/// The directory remembers which master key it was made with (`master.check`): opened
/// with another, it is refused before anything is read or written.
///
/// Keys read are remembered, and used while the directory's change count
/// (`keys.changes`, which every rotation, retirement or erase through `KeyFiles` moves
/// on, in any process) stands still: a key rotated or destroyed by another process is
/// seen by the next use, at the cost of one read of 8 bytes. A key file changed by other
/// means (removed by hand, a copy of the directory put back) is seen within a second,
/// and so is the count's file itself removed or replaced. A change the other processes
/// cannot be told of (the count's file cannot be written) is refused, with nothing
/// changed.
///
/// ```
/// use agent_sessions::privacy::encryption::{KeyFiles, KeyOwner, KeyProvider, MasterKey};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> agent_sessions::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let master = MasterKey::generate()?;
/// let keys = KeyFiles::open(dir.path().join("keys"), master.clone())?;
/// let ana = KeyOwner::Person("ana".into());
/// let key = keys.data_key(&ana, true).await?.expect("made");
/// assert_eq!(keys.data_key(&ana, false).await?, Some(key.clone()));
///
/// // Another master key is refused.
/// assert!(KeyFiles::open(dir.path().join("keys"), MasterKey::generate()?).is_err());
///
/// // Rotating the master key: the new one, the old one beside it until every file
/// // is sealed under the new one (turns go on meanwhile; a killed rotation resumes).
/// let new = MasterKey::generate()?;
/// let keys = KeyFiles::rotating(dir.path().join("keys"), new.clone(), master)?;
/// assert_eq!(keys.rotate()?, 1);
/// let keys = KeyFiles::open(dir.path().join("keys"), new)?;
/// assert_eq!(keys.data_key(&ana, false).await?, Some(key));
///
/// assert!(keys.destroy(&ana).await?);
/// assert_eq!(keys.data_key(&ana, false).await?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct KeyFiles {
    dir: PathBuf,
    master: MasterKey,
    previous: Option<MasterKey>,
    /// The keys read, by owner, with the name of their file and which file they were
    /// read from: used while that file is still the one there (a key destroyed, or
    /// made again, by another process is a file gone, or another file).
    read: std::sync::Mutex<HashMap<KeyOwner, Remembered>>,
    /// The directory's change count, which every change to a key file made through
    /// [`KeyFiles`] (in any process) moves on: while it stands still, a remembered key
    /// is used without looking at its file.
    changes: Changes,
}

/// Which file a key was read from: its device, inode and change time.
type FileStamp = (u64, u64, i64, i64);

/// An owner's keys as read: its file's name, which file it was, the keys, and when
/// the file was last seen to be that one (the change count then, and the time).
type Remembered = (String, FileStamp, Vec<DataKey>, Seen);

/// The key directory's change count, and when it was read.
type Seen = (u64, std::time::Instant);

/// How long a remembered key is used on the change count alone before its file is
/// looked at again: a key file changed by other means than [`KeyFiles`] (by hand, a
/// restored copy of the directory) is seen within this time.
const LOOK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The name of the file holding the key directory's change count.
const CHANGES_FILE: &str = "keys.changes";

/// The most keys [`KeyFiles`] remembers; past it, it starts afresh.
const KEYS_REMEMBERED: usize = 4096;

/// The most keys one owner's file holds: the current one and those rotations replaced
/// that were not retired yet.
const KEYS_PER_OWNER: usize = 16;

/// The file every change to a key file is made under (an exclusive lock on it), so
/// that a rotation never brings back a key destroyed meanwhile.
const LOCK_FILE: &str = "keys.lock";

/// Which file is at `path` now; `None` when there is none, or the platform cannot tell
/// (then no key is remembered).
fn stamp_of(path: &Path) -> std::io::Result<Option<FileStamp>> {
    match std::fs::symlink_metadata(path) {
        #[cfg(unix)]
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            Ok(Some((m.dev(), m.ino(), m.ctime(), m.ctime_nsec())))
        }
        #[cfg(not(unix))]
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// How old a temporary file in the key directory is before it counts as left by a
/// process killed while writing it.
const STALE_COPY_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The name of the file that tells which master key a key directory was made with.
const CHECK_FILE: &str = "master.check";
/// What the check file seals.
const CHECK_TEXT: &[u8] = b"agent-sessions master key check";

impl KeyFiles {
    /// The key files in `dir` (made owner-only if missing), sealed by `master`;
    /// [`Error::Encryption`] when the directory was made with another master key.
    pub fn open(dir: impl Into<PathBuf>, master: MasterKey) -> Result<Self> {
        Self::open_with(dir.into(), master, None)
    }

    /// The key files in `dir` while its master key is replaced: sealed under `master`
    /// (new files, and each file [`rotate`](Self::rotate) seals anew), read under
    /// `master` or `previous`. Every process of the bot opens the directory this way
    /// before the rotation starts and goes on doing so until it ends; then `previous`
    /// can be dropped.
    pub fn rotating(
        dir: impl Into<PathBuf>,
        master: MasterKey,
        previous: MasterKey,
    ) -> Result<Self> {
        Self::open_with(dir.into(), master, Some(previous))
    }

    fn open_with(dir: PathBuf, master: MasterKey, previous: Option<MasterKey>) -> Result<Self> {
        // `keys/` and `keys/.` name `keys` itself, a link too (which is refused below).
        let dir: PathBuf = dir.components().collect();
        // `link/sub/..` would name the directory a link leads to without naming the link.
        if dir
            .components()
            .any(|part| part == std::path::Component::ParentDir)
        {
            return Err(problem(format!(
                "the key directory {} is named through `..`: name it by its own path",
                dir.display()
            )));
        }
        let not_a_dir = || {
            let is_link = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink());
            problem(match is_link {
                true => format!(
                    "the key directory {} is a symbolic link, which is not followed: name the directory itself",
                    dir.display()
                ),
                false => format!(
                    "the key directory {} is a file, not a directory",
                    dir.display()
                ),
            })
        };
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
            return Err(not_a_dir());
        }
        crate::store::fs::create_private_dir_all(&dir)
            .map_err(|e| Error::io("create directory", &dir, e))?;
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
            return Err(not_a_dir());
        }
        #[cfg(unix)]
        {
            // Another user who may write in it could remove a key (erasing its owner's
            // data) or put one of their own in.
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::symlink_metadata(&dir)
                .map_err(|e| Error::io("read", &dir, e))?
                .permissions()
                .mode();
            if mode & 0o022 != 0 {
                return Err(problem(format!(
                    "the key directory {} may be written by other users (mode {:o}): make it the bot's alone (chmod 700)",
                    dir.display(),
                    mode & 0o7777
                )));
            }
        }
        let changes = Changes::new(dir.join(CHANGES_FILE));
        let keys = KeyFiles {
            dir,
            master,
            previous,
            read: std::sync::Mutex::default(),
            changes,
        };
        if keys.check()?.is_none() {
            keys.check_key_files()?;
            // Made a key directory now: the bot's alone, as one this call creates.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&keys.dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| Error::io("chmod", &keys.dir, e))?;
            }
            keys.write_new(CHECK_FILE, CHECK_TEXT)?;
        }
        // A killed write's copy is swept by a rotation or an erase, not here: opening
        // does not list a directory of a key per person.
        // Once the master key is known to be the directory's.
        keys.changes.open()?;
        Ok(keys)
    }

    /// For a directory without its check file: [`Error::Encryption`] when it holds key
    /// files and none opens with the master key (nor the previous one) — the directory
    /// is not tied to a key that cannot read it.
    fn check_key_files(&self) -> Result<()> {
        let listing = std::fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        let mut unopened = None;
        for entry in listing.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".key") {
                continue;
            }
            let Ok(Some(wrapped)) = self.read_wrapped(&entry.path()) else {
                continue;
            };
            if self.open_wrapped(&name, &wrapped).is_some() {
                return Ok(());
            }
            unopened.get_or_insert(entry.path());
        }
        match unopened {
            None => Ok(()),
            Some(path) => Err(problem(format!(
                "the key directory {} has no {CHECK_FILE} and its key files do not open with master key {} (the first: {}): give the master key they were made with",
                self.dir.display(),
                self.master.fingerprint(),
                path.display()
            ))),
        }
    }

    /// Removes the temporary files a process killed while writing a key file left
    /// (`.tmp…`, older than a minute): each holds a sealed copy of a key, which would
    /// outlive the key's destruction.
    fn remove_stale_copies(&self) -> Result<()> {
        let listing = std::fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))?;
        for entry in listing.flatten() {
            let stale = entry.file_name().to_string_lossy().starts_with(".tmp")
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|at| at.elapsed().ok())
                    .is_some_and(|age| age > STALE_COPY_AGE);
            if stale {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("remove", entry.path(), e)),
                }
            }
        }
        Ok(())
    }

    /// Seals every key file still sealed under the previous master key
    /// ([`rotating`](Self::rotating)) under the new one, each replaced whole; how many it sealed anew. Resumable:
    /// a file already sealed under the new key is left as it is, so a rotation killed
    /// at any point is finished by running it again. [`Error::Encryption`] for a file
    /// neither key opens (nothing after it is rotated; the files before it are).
    pub fn rotate(&self) -> Result<usize> {
        self.remove_stale_copies()?;
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .map_err(|e| Error::io("list", &self.dir, e))?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".key"))
            .collect();
        names.sort();
        // The check file last: until it is rotated, the old key still opens the
        // directory.
        names.push(CHECK_FILE.to_owned());
        let mut rotated = 0;
        for name in names {
            let path = self.dir.join(&name);
            let sealed_anew = self.locked(|| {
                let Some(wrapped) = self.read_wrapped(&path)? else {
                    return Ok(false);
                };
                if self.master.unwrap_key(&name, &wrapped).is_some() {
                    return Ok(false);
                }
                let plain = self
                    .previous
                    .as_ref()
                    .and_then(|previous| previous.unwrap_key(&name, &wrapped))
                    .ok_or_else(|| self.not_opened(&path))?;
                let text = self.file_text(&name, &plain)?;
                crate::store::fs::write_private_atomically(&path, text.as_bytes())?;
                sync_dir(&self.dir)?;
                Ok(true)
            })?;
            if sealed_anew && name != CHECK_FILE {
                rotated += 1;
            }
        }
        Ok(rotated)
    }

    /// How many key files there are, and how many are sealed under the master key
    /// (the rest under the previous one, while a rotation is under way).
    pub fn status(&self) -> Result<(usize, usize)> {
        let mut keys = 0;
        let mut current = 0;
        for entry in std::fs::read_dir(&self.dir).map_err(|e| Error::io("list", &self.dir, e))? {
            let name = entry
                .map_err(|e| Error::io("list", &self.dir, e))?
                .file_name()
                .into_string()
                .unwrap_or_default();
            if !name.ends_with(".key") {
                continue;
            }
            keys += 1;
            let wrapped = self.read_wrapped(&self.dir.join(&name))?;
            if wrapped.is_some_and(|w| self.master.unwrap_key(&name, &w).is_some()) {
                current += 1;
            }
        }
        Ok((keys, current))
    }

    /// `owner`'s keys as remembered, if no change to the key directory was made
    /// since they were last seen in their file, and that was lately.
    fn remembered(&self, owner: &KeyOwner) -> Option<Vec<DataKey>> {
        let changes = self.changes.count()?;
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let (_, _, keys, (seen, at)) = read.get(owner)?;
        (*seen == changes && at.elapsed() < LOOK_AGAIN_AFTER).then(|| keys.clone())
    }

    /// `owner`'s file name and path, and its keys (the current one first) as
    /// remembered while its file is the one read, else read; `None` when it has none.
    fn keys_of(&self, owner: &KeyOwner) -> Result<(String, PathBuf, Option<Vec<DataKey>>)> {
        self.changes.look_again();
        // Read before the file is looked at: a change made after it moves the count on.
        let seen = (
            self.changes.count().unwrap_or(u64::MAX),
            std::time::Instant::now(),
        );
        let (name, remembered) = match self
            .read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(owner)
        {
            Some((name, stamp, keys, _)) => (name.clone(), Some((*stamp, keys.clone()))),
            None => (Self::name(owner), None),
        };
        let path = self.dir.join(&name);
        let stamp = stamp_of(&path).map_err(|e| Error::io("read", &path, e))?;
        if let Some((stamp, keys)) = remembered.filter(|(seen, _)| Some(*seen) == stamp) {
            self.remember(owner, (name.clone(), stamp, keys.clone(), seen));
            return Ok((name, path, Some(keys)));
        }
        let Some(wrapped) = self.read_wrapped(&path)? else {
            // Destroyed: its bytes are let go of here too.
            self.forget_remembered(owner);
            return Ok((name, path, None));
        };
        let plain = self
            .open_wrapped(&name, &wrapped)
            .ok_or_else(|| self.not_opened(&path))?;
        let keys = data_keys(&plain, &path)?;
        // Remembered with the stamp taken before the read: if the file was replaced in
        // between, the next call sees another stamp and reads again.
        if let Some(stamp) = stamp {
            self.remember(owner, (name.clone(), stamp, keys.clone(), seen));
        }
        Ok((name, path, Some(keys)))
    }

    fn remember(&self, owner: &KeyOwner, remembered: Remembered) {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if read.len() >= KEYS_REMEMBERED && !read.contains_key(owner) {
            read.clear();
        }
        read.insert(owner.clone(), remembered);
    }

    fn forget_remembered(&self, owner: &KeyOwner) {
        self.read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(owner);
    }

    /// Runs `change` holding the key directory's lock (every process's changes to key
    /// files wait for one another).
    fn locked<R>(&self, change: impl FnOnce() -> Result<R>) -> Result<R> {
        let path = self.dir.join(LOCK_FILE);
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let lock = crate::store::fs::open_checked(&mut options, &path)
            .map_err(|e| Error::io("open", &path, e))?;
        lock.lock().map_err(|e| Error::io("lock", &path, e))?;
        // Before the change, so that no process goes on using a key while its file
        // changes; refused, with nothing changed, when the others cannot be told.
        self.changes.count_one()?;
        let result = change();
        // After it, whatever it did (even a failed one may have replaced a file): every
        // process looks at its remembered keys' files again. Should this fail, they do
        // within a second.
        if let Err(e) = self.changes.count_one() {
            tracing::warn!(error = %e, "the key directory's change count did not move on after a change");
        }
        drop(lock);
        result
    }

    /// Replaces file `name` with `keys`, the current one first.
    fn write_keys(&self, name: &str, path: &Path, keys: &[DataKey]) -> Result<()> {
        let plain: Vec<u8> = keys.iter().flat_map(|key| key.bytes).collect();
        let text = self.file_text(name, &plain)?;
        crate::store::fs::write_private_atomically(path, text.as_bytes())?;
        sync_dir(&self.dir)
    }

    fn name(owner: &KeyOwner) -> String {
        format!("{}.key", hex(&sha2::Sha256::digest(owner.tag().as_bytes())))
    }

    /// Whether the check file opens (`None`: there is none yet).
    fn check(&self) -> Result<Option<()>> {
        let path = self.dir.join(CHECK_FILE);
        match self.read_wrapped(&path)? {
            None => Ok(None),
            Some(wrapped) => self
                .open_wrapped(CHECK_FILE, &wrapped)
                .map(|_| Some(()))
                .ok_or_else(|| {
                    problem(match &self.previous {
                        None => format!(
                            "master key {} is not the one the key directory {} was made with",
                            self.master.fingerprint(),
                            self.dir.display()
                        ),
                        Some(previous) => format!(
                            "neither the new master key {} nor the previous one {} is the one the key directory {} was made with: give the key it was made with as the previous one",
                            self.master.fingerprint(),
                            previous.fingerprint(),
                            self.dir.display()
                        ),
                    })
                }),
        }
    }

    fn open_wrapped(&self, name: &str, wrapped: &[u8]) -> Option<Vec<u8>> {
        self.master.unwrap_key(name, wrapped).or_else(|| {
            self.previous
                .as_ref()
                .and_then(|previous| previous.unwrap_key(name, wrapped))
        })
    }

    fn not_opened(&self, path: &Path) -> Error {
        problem(format!(
            "the key file {} does not open with master key {}{}",
            path.display(),
            self.master.fingerprint(),
            match &self.previous {
                Some(previous) => format!(" nor {}", previous.fingerprint()),
                None => String::new(),
            }
        ))
    }

    /// The sealed bytes of the file at `path`; `None` if there is none.
    fn read_wrapped(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        let Some((bytes, _)) = crate::store::fs::read_limited(path, KEY_FILE_LIMIT)
            .map_err(|e| Error::io("read", path, e))?
        else {
            return Ok(None);
        };
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.trim().strip_prefix(KEY_FILE_PREFIX))
            .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
            .map(Some)
            .ok_or_else(|| {
                problem(format!(
                    "{} is not a key file of this crate; it was left as it is",
                    path.display()
                ))
            })
    }

    fn file_text(&self, name: &str, plain: &[u8]) -> Result<String> {
        let wrapped = self.master.wrap(name, plain)?;
        Ok(format!(
            "{KEY_FILE_PREFIX}{}\n",
            base64::engine::general_purpose::STANDARD.encode(wrapped)
        ))
    }

    /// Writes file `name` holding `plain` sealed, unless it exists: then its content
    /// is what another process wrote first, which is returned.
    fn write_new(&self, name: &str, plain: &[u8]) -> Result<Vec<u8>> {
        let path = self.dir.join(name);
        let text = self.file_text(name, plain)?;
        let mut temp = tempfile::NamedTempFile::new_in(&self.dir)
            .map_err(|e| Error::io("create", &self.dir, e))?;
        temp.write_all(text.as_bytes())
            .and_then(|()| temp.as_file().sync_all())
            .map_err(|e| Error::io("write", temp.path(), e))?;
        match temp.persist_noclobber(&path) {
            Ok(_) => {
                sync_dir(&self.dir)?;
                Ok(plain.to_vec())
            }
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                let wrapped = self.read_wrapped(&path)?.ok_or_else(|| {
                    problem(format!("{} vanished as it was made", path.display()))
                })?;
                self.open_wrapped(name, &wrapped)
                    .ok_or_else(|| self.not_opened(&path))
            }
            Err(e) => Err(Error::io("create", &path, e.error)),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync", dir, e))
}

/// The keys a key file holds, the current one first.
fn data_keys(bytes: &[u8], path: &Path) -> Result<Vec<DataKey>> {
    let keys: Option<Vec<DataKey>> = bytes
        .chunks(KEY_LEN)
        .map(|chunk| {
            <[u8; KEY_LEN]>::try_from(chunk)
                .ok()
                .map(DataKey::from_bytes)
        })
        .collect();
    keys.filter(|keys| !keys.is_empty())
        .ok_or_else(|| problem(format!("{} does not hold data keys", path.display())))
}

#[async_trait]
impl KeyProvider for KeyFiles {
    async fn data_key(&self, owner: &KeyOwner, create: bool) -> Result<Option<DataKey>> {
        if let Some(keys) = self.remembered(owner) {
            return Ok(keys.into_iter().next());
        }
        let (name, path, keys) = self.keys_of(owner)?;
        match keys {
            Some(keys) => Ok(keys.into_iter().next()),
            None if create => {
                let fresh = DataKey::generate()?;
                let made = self.write_new(&name, &fresh.bytes)?;
                Ok(data_keys(&made, &path)?.into_iter().next())
            }
            None => Ok(None),
        }
    }

    async fn destroy(&self, owner: &KeyOwner) -> Result<bool> {
        self.locked(|| {
            self.forget_remembered(owner);
            let path = self.dir.join(Self::name(owner));
            self.remove_stale_copies()?;
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    sync_dir(&self.dir)?;
                    Ok(true)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(Error::io("remove", &path, e)),
            }
        })
    }

    async fn data_keys(&self, owner: &KeyOwner) -> Result<Vec<DataKey>> {
        if let Some(keys) = self.remembered(owner) {
            return Ok(keys);
        }
        Ok(self.keys_of(owner)?.2.unwrap_or_default())
    }

    async fn rotate_key(&self, owner: &KeyOwner) -> Result<bool> {
        self.locked(|| {
            self.forget_remembered(owner);
            let (name, path, Some(keys)) = self.keys_of(owner)? else {
                return Ok(false);
            };
            if keys.len() >= KEYS_PER_OWNER {
                return Err(problem(format!(
                    "{} holds {KEYS_PER_OWNER} keys: retire the replaced ones (SessionManager::retire_data_keys) before rotating again",
                    path.display()
                )));
            }
            let mut rotated = vec![DataKey::generate()?];
            rotated.extend(keys);
            self.write_keys(&name, &path, &rotated)?;
            Ok(true)
        })
    }

    async fn retire_keys(&self, owner: &KeyOwner, keep: &[DataKey]) -> Result<usize> {
        self.locked(|| {
            self.forget_remembered(owner);
            let (name, path, Some(keys)) = self.keys_of(owner)? else {
                return Ok(0);
            };
            let before = keys.len();
            let kept: Vec<DataKey> = keys
                .into_iter()
                .enumerate()
                .filter(|(n, key)| *n == 0 || keep.contains(key))
                .map(|(_, key)| key)
                .collect();
            if kept.len() < before {
                self.write_keys(&name, &path, &kept)?;
            }
            Ok(before - kept.len())
        })
    }
}

/// The key directory's change count, kept in a file of its own that every process
/// opens: reading it is one read of 8 bytes from a file held open, where looking at a
/// key file is a walk of its path. Where it cannot be read (another platform, a file
/// this process cannot open), every key file is looked at on every use.
#[derive(Debug)]
struct Changes {
    path: PathBuf,
    /// The file as opened, and whether for writing too.
    file: std::sync::RwLock<Option<(std::fs::File, bool)>>,
}

impl Changes {
    fn new(path: PathBuf) -> Self {
        Changes {
            path,
            file: std::sync::RwLock::new(None),
        }
    }

    /// Opens the file (made owner-only if missing): for reading alone in a directory
    /// this process may only read. An error for a link, anything but a file, or a file
    /// with another name too (a hard link), in its place.
    fn open(&self) -> Result<()> {
        let opened = self.open_file()?;
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = opened;
        Ok(())
    }

    #[cfg(unix)]
    fn open_file(&self) -> Result<Option<(std::fs::File, bool)>> {
        use std::os::unix::fs::MetadataExt;
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let (file, writable) = match crate::store::fs::open_checked(&mut options, &self.path) {
            Ok(file) => (file, true),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
            {
                let mut options = std::fs::OpenOptions::new();
                options.read(true);
                match crate::store::fs::open_checked(&mut options, &self.path) {
                    Ok(file) => (file, false),
                    Err(_) => return Ok(None),
                }
            }
            Err(e) => return Err(Error::io("open", &self.path, e)),
        };
        let links = file
            .metadata()
            .map_err(|e| Error::io("read", &self.path, e))?
            .nlink();
        if links != 1 {
            return Err(Error::io(
                "open",
                &self.path,
                std::io::Error::other(format!(
                    "it has {links} names (a hard link): the change count is the key directory's alone"
                )),
            ));
        }
        Ok(Some((file, writable)))
    }

    #[cfg(not(unix))]
    fn open_file(&self) -> Result<Option<(std::fs::File, bool)>> {
        Ok(None)
    }

    /// Opens the file again if the one held is no longer the one in the directory
    /// (removed, or replaced by a copy put back): the count every other process moves
    /// on is the file's there.
    fn look_again(&self) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let held = {
                let file = self.file.read().unwrap_or_else(|e| e.into_inner());
                file.as_ref()
                    .and_then(|(file, _)| file.metadata().ok())
                    .filter(|held| held.nlink() > 0)
                    .map(|held| (held.dev(), held.ino()))
            };
            let there = std::fs::symlink_metadata(&self.path)
                .ok()
                .map(|there| (there.dev(), there.ino()));
            if held.is_none() || held != there {
                // A file this process cannot open leaves every key looked at on every use.
                let opened = self.open_file().ok().flatten();
                *self.file.write().unwrap_or_else(|e| e.into_inner()) = opened;
            }
        }
    }

    /// The count now; `None` when it cannot be read.
    fn count(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let mut bytes = [0u8; 8];
            let file = self.file.read().unwrap_or_else(|e| e.into_inner());
            let read = file.as_ref()?.0.read_at(&mut bytes, 0).ok()?;
            // A file not written yet counts 0.
            (read == 8 || read == 0).then(|| u64::from_le_bytes(bytes))
        }
        #[cfg(not(unix))]
        None
    }

    /// Moves the count on by one; called holding the key directory's lock. An error
    /// when the file cannot be written (then the other processes could not be told).
    fn count_one(&self) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.look_again();
            let file = self.file.read().unwrap_or_else(|e| e.into_inner());
            let Some((file, true)) = file.as_ref() else {
                return Err(Error::io(
                    "write",
                    &self.path,
                    std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        "the key directory's change count cannot be written, so the bot's other processes could not be told of a change to a key: nothing was changed",
                    ),
                ));
            };
            let mut bytes = [0u8; 8];
            let now = match file.read_at(&mut bytes, 0) {
                Ok(8) => u64::from_le_bytes(bytes),
                _ => 0,
            };
            file.write_all_at(&now.wrapping_add(1).to_le_bytes(), 0)
                .map_err(|e| Error::io("write", &self.path, e))?;
        }
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_text_sealed_by_an_earlier_build_still_opens_and_a_new_one_is_sealed_with_aes_gcm() {
        let key = DataKey::generate().unwrap();
        let place = "main\0session-1\0body";
        let aad = format!("agent-sessions text v1\0{place}");
        // As builds before AES-256-GCM sealed it.
        let earlier = Cipher::XChaCha20Poly1305
            .seal(&key.bytes, aad.as_bytes(), b"my pin is 4321")
            .unwrap();
        let earlier = format!(
            "enc1:{}:{}",
            key.id(),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(earlier)
        );
        assert!(is_sealed_text(&earlier));
        assert_eq!(sealed_text_key(&earlier), Some(key.id()));
        assert_eq!(
            open_text(&key, place, &earlier),
            Some(Some("my pin is 4321".into()))
        );
        assert_eq!(
            open_text(&key, "elsewhere", &earlier),
            None,
            "bound to its place"
        );

        let now = seal_text(&key, place, "my pin is 4321").unwrap();
        assert!(now.starts_with(&format!("enc2:{}:", key.id())), "{now}");
        assert_eq!(
            open_text(&key, place, &now),
            Some(Some("my pin is 4321".into()))
        );
        // Read as the other cipher's value, it does not open.
        let relabelled = now.replacen("enc2:", "enc1:", 1);
        assert_eq!(open_text(&key, place, &relabelled), None);
        let repeatable = seal_text_repeatable(&key, place, "joined").unwrap();
        assert!(repeatable.starts_with("enc2:"), "{repeatable}");
        assert_eq!(
            seal_text_repeatable(&key, place, "joined").unwrap(),
            repeatable
        );
        assert_eq!(
            open_text(&key, place, &repeatable),
            Some(Some("joined".into()))
        );
    }

    #[test]
    fn a_directory_made_a_key_directory_is_the_bots_alone_and_a_wrong_path_says_what_it_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o755)).unwrap();
        let master = MasterKey::generate().unwrap();
        KeyFiles::open(&empty, master.clone()).unwrap();
        let mode = std::fs::metadata(&empty).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);

        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&empty, &link).unwrap();
        for (path, says) in [(&file, "is a file"), (&link, "is a symbolic link")] {
            let refused = KeyFiles::open(path, master.clone())
                .unwrap_err()
                .to_string();
            assert!(refused.contains(says), "{refused}");
        }
        let (other, another) = (
            MasterKey::generate().unwrap(),
            MasterKey::generate().unwrap(),
        );
        let refused = KeyFiles::rotating(&empty, other, another)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("neither the new master key"), "{refused}");
    }

    #[tokio::test]
    async fn a_change_the_other_processes_cannot_be_told_of_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyFiles::open(dir.path(), MasterKey::generate().unwrap()).unwrap();
        let ana = KeyOwner::Person("person-ana".into());
        let key = keys.data_key(&ana, true).await.unwrap().unwrap();
        // The count held for reading alone, as in a directory this process may only read.
        let read_only = std::fs::File::open(dir.path().join(CHANGES_FILE)).unwrap();
        *keys.changes.file.write().unwrap() = Some((read_only, false));

        let refused = keys.destroy(&ana).await.unwrap_err();
        assert!(refused.to_string().contains(CHANGES_FILE), "{refused}");
        assert!(keys.rotate_key(&ana).await.is_err());
        let other = KeyFiles::open(dir.path(), keys.master.clone()).unwrap();
        assert_eq!(other.data_keys(&ana).await.unwrap(), vec![key]);
    }
}
