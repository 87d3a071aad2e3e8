//! Values opened lately, kept by their sealed text: what a manager reads again — the
//! conversation's end at every turn, an entry at every update — is not opened again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::key::{DataKey, KeyOwner, KeyProvider};
use super::sealed::Secret;
use crate::error::Result;

/// The most bytes of sealed and opened text one [`Opened`] keeps; past it, it starts
/// afresh.
const MAX_BYTES: usize = 8 << 20;

/// Opened values by their sealed text, each with the place it was opened for (a sealed
/// text copied to another place is opened there, and fails). Bounded in bytes.
///
/// Found by the sealed text's last bytes (its authentication tag, which a fresh nonce
/// makes different for every value sealed) and then compared whole: a lookup hashes
/// a few bytes, not the whole text.
///
/// A value is looked up only once the caller holds the key its sealed text names: one
/// sealed under a key since destroyed is never found here.
pub(crate) struct Opened<V> {
    values: Mutex<Values<V>>,
}

struct Values<V> {
    /// Boxed: a table of small slots grows and is written without moving the values.
    by_tag: HashMap<u64, Box<Kept<V>>>,
    bytes: usize,
}

/// A value with the sealed text it opened from and the place it was opened for.
struct Kept<V> {
    sealed: Box<str>,
    place: Box<str>,
    value: V,
    /// About the bytes it holds, as counted.
    size: usize,
}

/// The last bytes of a sealed text, folded: where [`Opened`] files it.
fn tag(sealed: &str) -> u64 {
    let bytes = sealed.as_bytes();
    let tail = &bytes[bytes.len().saturating_sub(16)..];
    tail.chunks(8).fold(0, |folded, chunk| {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        folded ^ u64::from_le_bytes(word).rotate_left(29)
    })
}

impl<V: Clone> Opened<V> {
    pub(crate) fn new() -> Self {
        Opened {
            values: Mutex::new(Values {
                by_tag: HashMap::new(),
                bytes: 0,
            }),
        }
    }

    /// The value `sealed` opened to at `place`, if it was opened (or sealed) lately.
    pub(crate) fn get(&self, sealed: &str, place: &str) -> Option<V> {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = values.by_tag.get(&tag(sealed))?;
        (*kept.sealed == *sealed && *kept.place == *place).then(|| kept.value.clone())
    }

    /// Keeps `value` as what `sealed` opens to at `place`; `size` is about what the
    /// value holds, in bytes.
    pub(crate) fn put(&self, sealed: &str, place: &str, value: V, size: usize) {
        let size = size + sealed.len() + place.len() + std::mem::size_of::<Kept<V>>();
        if size > MAX_BYTES / 16 {
            return;
        }
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if values.bytes + size > MAX_BYTES {
            values.by_tag.clear();
            values.bytes = 0;
        }
        let kept = Box::new(Kept {
            sealed: sealed.into(),
            place: place.into(),
            value,
            size,
        });
        // A value filed under the same tag (another text: a collision) gives way, and
        // its bytes are counted no more.
        if let Some(earlier) = values.by_tag.insert(tag(sealed), kept) {
            values.bytes -= earlier.size;
        }
        values.bytes += size;
    }

    fn clear(&self) {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        values.by_tag.clear();
        values.bytes = 0;
    }
}

/// A manager's key provider with what its keys opened lately: transcript lines'
/// sealed parts and sealed texts. Destroying a key through it lets go of everything
/// kept, so no opened copy of an erased person's words stays in memory.
pub(crate) struct Keys {
    provider: Arc<dyn KeyProvider>,
    /// Transcript lines' sealed parts, opened.
    pub(crate) lines: Opened<Secret>,
    /// Sealed texts (entry fields, chatter, events), opened.
    pub(crate) texts: Opened<String>,
}

impl Keys {
    pub(crate) fn new(provider: Arc<dyn KeyProvider>) -> Self {
        Keys {
            provider,
            lines: Opened::new(),
            texts: Opened::new(),
        }
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.provider.fmt(f)
    }
}

#[async_trait]
impl KeyProvider for Keys {
    async fn data_key(&self, owner: &KeyOwner, create: bool) -> Result<Option<DataKey>> {
        self.provider.data_key(owner, create).await
    }

    async fn destroy(&self, owner: &KeyOwner) -> Result<bool> {
        self.lines.clear();
        self.texts.clear();
        self.provider.destroy(owner).await
    }

    async fn data_keys(&self, owner: &KeyOwner) -> Result<Vec<DataKey>> {
        self.provider.data_keys(owner).await
    }

    async fn rotate_key(&self, owner: &KeyOwner) -> Result<bool> {
        self.provider.rotate_key(owner).await
    }

    async fn retire_keys(&self, owner: &KeyOwner, keep: &[DataKey]) -> Result<usize> {
        self.provider.retire_keys(owner, keep).await
    }
}

impl Keys {
    /// [`open_text`](super::key::open_text), remembered.
    pub(crate) fn open_text(
        &self,
        key: &DataKey,
        place: &str,
        sealed: &str,
    ) -> Option<Option<String>> {
        if super::key::sealed_text_key(sealed) == Some(key.id()) {
            if let Some(opened) = self.texts.get(sealed, place) {
                return Some(Some(opened));
            }
        }
        let opened = super::key::open_text(key, place, sealed)?;
        if let Some(text) = &opened {
            self.texts.put(sealed, place, text.clone(), text.len());
        }
        Some(opened)
    }

    /// [`seal_text`](super::key::seal_text), remembered.
    pub(crate) fn seal_text(&self, key: &DataKey, place: &str, plain: &str) -> Result<String> {
        let sealed = super::key::seal_text(key, place, plain)?;
        self.texts
            .put(&sealed, place, plain.to_owned(), plain.len());
        Ok(sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_found_by_its_whole_sealed_text_and_place_alone() {
        let opened = Opened::new();
        // Two texts with the same last bytes: filed in one place, told apart whole.
        let (first, second) = (
            "enc1:a:aaaa-same-tail-16-bytes",
            "enc1:b:bbbb-same-tail-16-bytes",
        );
        assert_eq!(tag(first), tag(second));
        opened.put(first, "session 1", "first".to_owned(), 5);
        assert_eq!(opened.get(first, "session 1").as_deref(), Some("first"));
        assert_eq!(opened.get(second, "session 1"), None);
        assert_eq!(opened.get(first, "session 2"), None, "another place");
        opened.put(second, "session 1", "second".to_owned(), 6);
        assert_eq!(opened.get(first, "session 1"), None, "it gave way");
        assert_eq!(opened.get(second, "session 1").as_deref(), Some("second"));
        let bytes = opened.values.lock().unwrap().bytes;
        let slot = std::mem::size_of::<Kept<String>>();
        assert_eq!(bytes, 6 + second.len() + "session 1".len() + slot);
        // Short texts are filed too.
        opened.put("x", "p", "short".to_owned(), 5);
        assert_eq!(opened.get("x", "p").as_deref(), Some("short"));
    }
}
