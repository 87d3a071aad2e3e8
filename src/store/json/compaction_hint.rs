//! Where a transcript's last compaction is, remembered on the transcript file itself
//! (an extended attribute), so a process that never read the file finds it without
//! searching every byte: only what was appended since is searched.
//!
//! The hint names how far the file was searched — the end of a whole line, and that
//! line's id — and the last compaction before it (its offset and id). It is believed
//! only while both lines are still where it says, under the same ids: a file rewritten,
//! cut back or replaced by a copy reads as if it had no hint, and an edit of lines in
//! place (an erase, a key rotation) takes it off. It holds offsets and line ids, never
//! text. A file system without extended attributes, or a file this process
//! may not change, keeps no hint; the whole file is searched then, as without one.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};

use crate::transcript::TranscriptEntry;

/// Below this many bytes searched, no hint is written (the search was cheap).
pub(super) const WORTH_REMEMBERING: u64 = 256 * 1024;
/// The longest line the hint's lines are read back from; a longer one voids the hint.
const MAX_LINE: u64 = 1024 * 1024;
/// The largest hint written (ids are the file's, of any length).
const MAX_HINT: usize = 1024;

/// How far a transcript was searched for compactions, and the last one found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Hint {
    /// The end of the last whole line searched (just after its newline).
    pub(super) searched_to: u64,
    /// The id of the line that ends there.
    pub(super) line_id: String,
    /// The last compaction line before it: its offset and id.
    pub(super) compaction: Option<(u64, String)>,
}

#[derive(Deserialize)]
struct IdOnly {
    id: Option<String>,
}

impl Hint {
    /// The hint `file` carries, if it still holds for the file as it is now (`len`
    /// bytes), with the compaction line it names, read again.
    pub(super) fn believed(file: &mut File, len: u64) -> Option<(Hint, Option<TranscriptEntry>)> {
        let hint: Hint = serde_json::from_slice(&read(file)?).ok()?;
        if hint.searched_to > len || hint.searched_to == 0 {
            return None;
        }
        let line = line_ending_at(file, hint.searched_to)?;
        let id = crate::store::json_text::from_slice::<IdOnly>(&line)
            .ok()?
            .id;
        if id.as_deref() != Some(hint.line_id.as_str()) {
            return None;
        }
        let compaction = match &hint.compaction {
            None => None,
            Some((offset, id)) => {
                let line = line_at(file, *offset, hint.searched_to)?;
                let entry: TranscriptEntry = crate::store::json_text::from_slice(&line).ok()?;
                if entry.kind != "compaction" || entry.id.as_deref() != Some(id.as_str()) {
                    return None;
                }
                Some(entry)
            }
        };
        Some((hint, compaction))
    }

    /// Puts the hint on `file`; a file system or file that cannot keep it is left as it
    /// is.
    pub(super) fn remember(&self, file: &File) {
        let Ok(bytes) = serde_json::to_vec(self) else {
            return;
        };
        if bytes.len() <= MAX_HINT {
            write(file, &bytes);
        }
    }
}

/// Takes the hint off `file`: its lines were edited in place.
pub(super) fn forget(file: &File) {
    remove(file);
}

/// The id of the last line of `bytes` (whole lines, the last one ending with its
/// newline), if it has one.
pub(super) fn last_line_id(bytes: &[u8]) -> Option<String> {
    let body = bytes.strip_suffix(b"\n")?;
    let start = body
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    crate::store::json_text::from_slice::<IdOnly>(&body[start..])
        .ok()?
        .id
}

/// The line of `file` that ends just before `end` (which follows its newline): read
/// back a few KiB at a time, up to [`MAX_LINE`].
fn line_ending_at(file: &mut File, end: u64) -> Option<Vec<u8>> {
    let mut want = 4096u64;
    loop {
        let from = end.saturating_sub(want);
        let bytes = read_at(file, from, end - from)?;
        let body = bytes.strip_suffix(b"\n")?;
        match memchr::memrchr(b'\n', body) {
            Some(at) => return Some(body[at + 1..].to_vec()),
            None if from == 0 => return Some(body.to_vec()),
            None if want >= MAX_LINE => return None,
            None => want *= 4,
        }
    }
}

/// The line of `file` that starts at `offset`, ending before `limit`: read a few KiB at
/// a time, up to [`MAX_LINE`].
fn line_at(file: &mut File, offset: u64, limit: u64) -> Option<Vec<u8>> {
    if offset >= limit || (offset > 0 && read_at(file, offset - 1, 1)? != b"\n") {
        return None;
    }
    let mut want = 4096u64;
    loop {
        let mut bytes = read_at(file, offset, want.min(limit - offset))?;
        match memchr::memchr(b'\n', &bytes) {
            Some(end) => {
                bytes.truncate(end);
                return Some(bytes);
            }
            None if want >= MAX_LINE || offset + want >= limit => return None,
            None => want *= 4,
        }
    }
}

/// `len` bytes of `file` from `from`.
fn read_at(file: &mut File, from: u64, len: u64) -> Option<Vec<u8>> {
    let mut bytes = vec![0; usize::try_from(len).ok()?];
    file.seek(SeekFrom::Start(from)).ok()?;
    file.read_exact(&mut bytes).ok()?;
    Some(bytes)
}

/// The name of the extended attribute the hint is kept in.
#[cfg(any(target_os = "linux", target_os = "android"))]
const ATTRIBUTE: &str = "user.agent_sessions.compaction";

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read(file: &File) -> Option<Vec<u8>> {
    let mut value = vec![0u8; MAX_HINT];
    let read = rustix::fs::fgetxattr(file, ATTRIBUTE, &mut value[..]).ok()?;
    value.truncate(read);
    Some(value)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn write(file: &File, value: &[u8]) {
    let _ = rustix::fs::fsetxattr(file, ATTRIBUTE, value, rustix::fs::XattrFlags::empty());
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn remove(file: &File) {
    let _ = rustix::fs::fremovexattr(file, ATTRIBUTE);
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn remove(_file: &File) {}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read(_file: &File) -> Option<Vec<u8>> {
    None
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn write(_file: &File, _value: &[u8]) {}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use crate::store::json::transcripts::find_last_compaction;
    use std::io::Write;
    use std::path::Path;

    fn said(id: &str, text: &str) -> String {
        serde_json::json!({
            "type": "message", "id": id, "parentId": null,
            "timestamp": "2026-12-07T10:00:00.000Z",
            "message": { "role": "user", "content": text },
        })
        .to_string()
    }

    fn compaction(id: &str, summary: &str) -> String {
        serde_json::json!({
            "type": "compaction", "id": id, "parentId": null,
            "timestamp": "2026-12-07T10:00:00.000Z", "summary": summary, "tokensBefore": 900,
        })
        .to_string()
    }

    fn append(path: &Path, lines: &[String]) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        for line in lines {
            writeln!(file, "{line}").unwrap();
        }
    }

    /// What a search of every byte finds: the same bytes in a file with no hint.
    fn found_whole(path: &Path) -> Option<(u64, Option<String>)> {
        let copy = path.with_extension("copy");
        std::fs::write(&copy, std::fs::read(path).unwrap()).unwrap();
        let found = find_last_compaction(&copy).unwrap();
        std::fs::remove_file(&copy).unwrap();
        found.map(|event| (event.offset.0, event.entry.id))
    }

    fn found(path: &Path) -> Option<(u64, Option<String>)> {
        find_last_compaction(path)
            .unwrap()
            .map(|event| (event.offset.0, event.entry.id))
    }

    /// Whether files in `dir` keep extended attributes (the hint's tests need them;
    /// without them every search reads the whole file, which the other tests check).
    fn keeps_hints(dir: &Path) -> bool {
        let probe = dir.join("probe");
        std::fs::write(&probe, "").unwrap();
        let file = File::open(&probe).unwrap();
        let kept = rustix::fs::fsetxattr(&file, ATTRIBUTE, b"1", rustix::fs::XattrFlags::empty());
        std::fs::remove_file(&probe).unwrap();
        if kept.is_err() {
            eprintln!("skipped: {} keeps no extended attributes", dir.display());
        }
        kept.is_ok()
    }

    fn hint(path: &Path) -> Option<Hint> {
        serde_json::from_slice(&read(&File::open(path).unwrap())?).ok()
    }

    /// A transcript of a compaction (`c1`, at offset 0) and 200 lines of talk after
    /// it; `None` where files keep no extended attributes.
    fn compacted_then_talked() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
        let dir = tempfile::tempdir().unwrap();
        if !keeps_hints(dir.path()) {
            return None;
        }
        let path = dir.path().join("t.jsonl");
        append(&path, &[compaction("c1", "first")]);
        append(&path, &talk(0, 200));
        Some((dir, path))
    }

    /// Lines of about 2 KB: enough of them make a search worth remembering.
    fn talk(from: usize, lines: usize) -> Vec<String> {
        (from..from + lines)
            .map(|n| {
                said(
                    &format!("m{n}"),
                    &format!("compaction {n} {}", "z".repeat(2000)),
                )
            })
            .collect()
    }

    #[test]
    fn a_long_search_leaves_a_hint_and_the_next_search_finds_what_a_whole_search_finds() {
        let Some((_dir, path)) = compacted_then_talked() else {
            return;
        };
        assert_eq!(found(&path), Some((0, Some("c1".into()))));
        let left = hint(&path).expect("a hint after a search of 400 KB");
        assert_eq!(left.compaction, Some((0, "c1".into())));
        assert_eq!(left.line_id, "m199");
        assert_eq!(left.searched_to, std::fs::metadata(&path).unwrap().len());

        // Lines appended since: searched; the hinted compaction is still the last.
        append(&path, &talk(200, 200));
        assert_eq!(found(&path), found_whole(&path));
        assert_eq!(found(&path), Some((0, Some("c1".into()))));
        // A newer compaction appended since is found.
        append(&path, &[compaction("c2", "second")]);
        append(&path, &talk(400, 10));
        let newer = found(&path);
        assert_eq!(newer.as_ref().map(|f| f.1.clone()), Some(Some("c2".into())));
        assert_eq!(newer, found_whole(&path));
        // A torn last line is left out, and the hint does not end inside it.
        append(&path, &talk(410, 200));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"type":"compaction","id":"torn","summary":"half"#)
            .unwrap();
        assert_eq!(found(&path), newer);
        let left = hint(&path).unwrap();
        assert_eq!(left.line_id, "m609");
        assert_eq!(found(&path), newer);
    }

    #[test]
    fn a_hint_that_no_longer_holds_is_not_believed() {
        let Some((dir, path)) = compacted_then_talked() else {
            return;
        };
        assert!(found(&path).is_some());
        assert!(hint(&path).is_some());

        // Rewritten in place (the same file, the attribute kept): other lines, a
        // compaction where the hint says none is.
        let mut lines = talk(1000, 100);
        lines.push(compaction("c9", "rewritten"));
        lines.extend(talk(1100, 100));
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(0).unwrap();
        drop(file);
        append(&path, &lines);
        assert!(hint(&path).is_some(), "the attribute outlives a rewrite");
        assert_eq!(found(&path), found_whole(&path));
        assert_eq!(found(&path).unwrap().1, Some("c9".into()));

        // Cut back before where the hint says it searched to.
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len / 3).unwrap();
        drop(file);
        assert_eq!(found(&path), found_whole(&path));

        // A hint of another file's lines (copied with its attribute).
        let other = dir.path().join("other.jsonl");
        append(&other, &talk(5000, 300));
        assert_eq!(found(&other), None);
        let bytes = read(&File::open(&other).unwrap()).unwrap();
        write(&File::open(&path).unwrap(), &bytes);
        assert_eq!(found(&path), found_whole(&path));

        // A hint that is not one.
        write(&File::open(&path).unwrap(), b"{not json");
        assert_eq!(found(&path), found_whole(&path));
    }

    /// Only what was appended after the hint's line is searched: a compaction written
    /// by hand into the lines before it, in place, is not seen (the crate's own edits
    /// in place take the hint off).
    #[test]
    fn a_search_reads_only_what_was_appended_after_its_hint() {
        let dir = tempfile::tempdir().unwrap();
        if !keeps_hints(dir.path()) {
            return;
        }
        let path = dir.path().join("t.jsonl");
        append(&path, &talk(0, 200));
        assert_eq!(found(&path), None);
        assert!(hint(&path).is_some());
        let bytes = std::fs::read(&path).unwrap();
        let line = said("m100", &format!("compaction 100 {}", "z".repeat(2000)));
        let at = memchr::memmem::find(&bytes, line.as_bytes()).unwrap();
        let mut planted = compaction("c", "planted");
        planted.push_str(&" ".repeat(line.len() - planted.len()));
        {
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.write_all_at(planted.as_bytes(), at as u64).unwrap();
        }
        assert_eq!(found(&path), None, "the hint bounds the search");
        assert_eq!(found_whole(&path), Some((at as u64, Some("c".into()))));
        forget(&File::open(&path).unwrap());
        assert!(hint(&path).is_none());
        assert_eq!(found(&path), Some((at as u64, Some("c".into()))));
    }

    /// Lines far longer than what a hint's lines are first read back by.
    #[test]
    fn a_hint_holds_over_long_lines() {
        let dir = tempfile::tempdir().unwrap();
        if !keeps_hints(dir.path()) {
            return;
        }
        let path = dir.path().join("t.jsonl");
        let long = |n: usize| said(&format!("m{n}"), &"w".repeat(50_000 + n));
        append(&path, &[compaction("c1", &"s".repeat(60_000))]);
        append(&path, &(0..10).map(long).collect::<Vec<_>>());
        assert_eq!(found(&path), Some((0, Some("c1".into()))));
        assert_eq!(hint(&path).unwrap().line_id, "m9");
        let (hint, entry) = Hint::believed(
            &mut File::open(&path).unwrap(),
            std::fs::metadata(&path).unwrap().len(),
        )
        .expect("believed");
        assert_eq!(hint.compaction, Some((0, "c1".into())));
        assert_eq!(entry.unwrap().id.as_deref(), Some("c1"));
        append(&path, &(10..20).map(long).collect::<Vec<_>>());
        assert_eq!(found(&path), Some((0, Some("c1".into()))));
        assert_eq!(found(&path), found_whole(&path));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(24))]
        /// Whatever is appended between searches, and whatever the searches leave
        /// behind, a search finds what a search of every byte finds.
        #[test]
        fn a_hinted_search_finds_what_a_whole_search_finds(
            steps in proptest::collection::vec((0usize..150, proptest::bool::ANY, 0usize..3), 1..8)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.jsonl");
            let mut next = 0;
            for (lines, compacted, searches) in steps {
                let mut step = talk(next, lines);
                if compacted {
                    step.insert(lines / 2, compaction(&format!("c{next}"), "summary"));
                }
                next += lines + 1;
                append(&path, &step);
                for _ in 0..searches {
                    proptest::prop_assert_eq!(found(&path), found_whole(&path));
                }
            }
            proptest::prop_assert_eq!(found(&path), found_whole(&path));
        }
    }
}
