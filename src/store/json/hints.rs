//! What a search of a transcript found, remembered on the transcript file itself (an
//! extended attribute each), so a process that never read the file does not search
//! every byte again: only what was appended since. Two hints: where the last
//! compaction is ([`CompactionHint`]), and how many lines there are up to a line's end
//! ([`LineCount`], what a read or an append numbers its lines from).
//!
//! The compaction hint names how far the file was searched — the end of a whole line, and that
//! line's id — and the last compaction before it (its offset and id). It is believed
//! only while both lines are still where it says, under the same ids: a file rewritten,
//! cut back or replaced by a copy reads as if it had no hint, and an edit of lines in
//! place (an erase, a key rotation) takes it off. The line count is believed only
//! while the line it ends with is still there under the same id. Hints hold offsets,
//! counts and line ids, never text. A file system without extended attributes, or a file this process
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
pub(super) struct CompactionHint {
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

impl CompactionHint {
    /// The hint `file` carries, if it still holds for the file as it is now (`len`
    /// bytes), with the compaction line it names, read again.
    pub(super) fn believed(
        file: &mut File,
        len: u64,
    ) -> Option<(CompactionHint, Option<TranscriptEntry>)> {
        let hint: CompactionHint = serde_json::from_slice(&read(file, COMPACTION)?).ok()?;
        if hint.searched_to > len || hint.searched_to == 0 {
            return None;
        }
        if id_of_line_ending_at(file, hint.searched_to)? != hint.line_id {
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
            write(file, COMPACTION, &bytes);
        }
    }
}

/// How many lines (newlines) a transcript has before `end`, the end of the line whose
/// id is `line_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LineCount {
    pub(super) end: u64,
    pub(super) line_id: String,
    pub(super) lines: usize,
}

impl LineCount {
    /// The count `file` carries, if its line is still where it says in the file as it
    /// is now (`len` bytes).
    pub(super) fn believed(file: &mut File, len: u64) -> Option<LineCount> {
        let count: LineCount = serde_json::from_slice(&read(file, LINES)?).ok()?;
        // More lines than bytes is no count (and would overflow the numbering).
        if count.end > len || count.end == 0 || count.lines as u64 > count.end {
            return None;
        }
        (id_of_line_ending_at(file, count.end)? == count.line_id).then_some(count)
    }

    /// Leaves on `file` that it has `lines` lines before `end` (a line's end), when
    /// that line has an id; a file system or file that cannot keep it is left as it is.
    pub(super) fn remember(file: &mut File, end: u64, lines: usize) {
        let Some(line_id) = id_of_line_ending_at(file, end) else {
            return;
        };
        let count = LineCount {
            end,
            line_id,
            lines,
        };
        if let Ok(bytes) = serde_json::to_vec(&count) {
            if bytes.len() <= MAX_HINT {
                write(file, LINES, &bytes);
            }
        }
    }
}

/// Takes the hints off `file`: its lines were edited in place.
pub(super) fn forget(file: &File) {
    remove(file, COMPACTION);
    remove(file, LINES);
}

/// The id of the line of `file` that ends just before `end` (after its newline).
fn id_of_line_ending_at(file: &mut File, end: u64) -> Option<String> {
    let line = line_ending_at(file, end)?;
    crate::store::json_text::from_slice::<IdOnly>(&line)
        .ok()?
        .id
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

/// The extended attributes the hints are kept in.
const COMPACTION: &str = "user.agent_sessions.compaction";
const LINES: &str = "user.agent_sessions.lines";

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read(file: &File, name: &str) -> Option<Vec<u8>> {
    let mut value = vec![0u8; MAX_HINT];
    let read = rustix::fs::fgetxattr(file, name, &mut value[..]).ok()?;
    value.truncate(read);
    Some(value)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn write(file: &File, name: &str, value: &[u8]) {
    let _ = rustix::fs::fsetxattr(file, name, value, rustix::fs::XattrFlags::empty());
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn remove(file: &File, name: &str) {
    let _ = rustix::fs::fremovexattr(file, name);
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn remove(_file: &File, _name: &str) {}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read(_file: &File, _name: &str) -> Option<Vec<u8>> {
    None
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn write(_file: &File, _name: &str, _value: &[u8]) {}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use crate::store::json::transcripts::{count_lines, find_last_compaction, line_marks};
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
        let kept = rustix::fs::fsetxattr(&file, COMPACTION, b"1", rustix::fs::XattrFlags::empty());
        std::fs::remove_file(&probe).unwrap();
        if kept.is_err() {
            eprintln!("skipped: {} keeps no extended attributes", dir.display());
        }
        kept.is_ok()
    }

    fn hint(path: &Path) -> Option<CompactionHint> {
        serde_json::from_slice(&read(&File::open(path).unwrap(), COMPACTION)?).ok()
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
        let bytes = read(&File::open(&other).unwrap(), COMPACTION).unwrap();
        write(&File::open(&path).unwrap(), COMPACTION, &bytes);
        assert_eq!(found(&path), found_whole(&path));

        // A hint that is not one.
        write(&File::open(&path).unwrap(), COMPACTION, b"{not json");
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
        let (hint, entry) = CompactionHint::believed(
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

    /// `path`'s lines as a process that never counted them counts them (this one's own
    /// marks forgotten), and as counted byte by byte.
    fn counted(path: &Path) -> (usize, usize) {
        let file = File::open(path).unwrap();
        line_marks().forget(&file);
        let len = file.metadata().unwrap().len();
        let naive = std::fs::read(path)
            .unwrap()
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        (count_lines(path, &file, len).unwrap(), naive)
    }

    fn line_count(path: &Path) -> Option<LineCount> {
        serde_json::from_slice(&read(&File::open(path).unwrap(), LINES)?).ok()
    }

    #[test]
    fn a_long_count_is_left_on_the_file_and_the_next_process_counts_from_it() {
        let dir = tempfile::tempdir().unwrap();
        if !keeps_hints(dir.path()) {
            return;
        }
        let path = dir.path().join("t.jsonl");
        append(&path, &talk(0, 200));
        let (lines, naive) = counted(&path);
        assert_eq!((lines, naive), (200, 200));
        let left = line_count(&path).expect("a count of 400 KB is left on the file");
        assert_eq!((left.line_id.as_str(), left.lines), ("m199", 200));

        // Appended since: counted from the hint (a count planted in it shows it is the
        // one used), and a count of the new lines too short to leave a new one.
        append(&path, &talk(200, 3));
        assert_eq!(counted(&path), (203, 203));
        write(
            &File::open(&path).unwrap(),
            LINES,
            &serde_json::to_vec(&LineCount {
                lines: 1000,
                ..left.clone()
            })
            .unwrap(),
        );
        assert_eq!(counted(&path).0, 1003, "the count starts from the hint");
        // A count that cannot be (more lines than bytes) is not believed.
        write(
            &File::open(&path).unwrap(),
            LINES,
            &serde_json::to_vec(&LineCount {
                lines: usize::MAX,
                ..left.clone()
            })
            .unwrap(),
        );
        assert_eq!(counted(&path), (203, 203));
        forget(&File::open(&path).unwrap());
        assert!(line_count(&path).is_none());
        assert_eq!(counted(&path), (203, 203));

        // A count of another file's lines, or of lines cut back and written again,
        // is not believed.
        assert_eq!(counted(&path), (203, 203));
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len / 2).unwrap();
        drop(file);
        let half = std::fs::read(&path).unwrap();
        let whole_lines = half.iter().rposition(|b| *b == b'\n').unwrap() + 1;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(whole_lines as u64)
            .unwrap();
        append(&path, &talk(5000, 150));
        let (lines, naive) = counted(&path);
        assert_eq!(lines, naive);
        // A torn last line: counted, no count left ending inside it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"type":"message","id":"torn""#)
            .unwrap();
        let (lines, naive) = counted(&path);
        assert_eq!(lines, naive);
        assert_eq!(line_count(&path).unwrap().line_id, "m5149");
    }

    /// A count built on what this process remembers of the file (which can be stale:
    /// another process cut the file back, or a removed file's inode was reused) is not
    /// left on the file; nor is a count that ends before the one the file holds.
    #[test]
    fn only_a_count_checked_against_the_file_is_left_on_it() {
        let dir = tempfile::tempdir().unwrap();
        if !keeps_hints(dir.path()) {
            return;
        }
        let path = dir.path().join("t.jsonl");
        append(&path, &talk(0, 150));
        let file = File::open(&path).unwrap();
        let early = file.metadata().unwrap().len();
        assert!(early >= WORTH_REMEMBERING);
        line_marks().forget(&file);
        line_marks().remember(&file, early, 7);
        append(&path, &talk(150, 200));
        let len = file.metadata().unwrap().len();
        assert_eq!(
            count_lines(&path, &file, len).unwrap(),
            207,
            "this process's mark"
        );
        assert!(
            line_count(&path).is_none(),
            "a stale mark stays in this process"
        );
        assert_eq!(counted(&path), (350, 350));
        assert_eq!(line_count(&path).unwrap().end, len);

        // A fresh count to an earlier line end leaves the later count in place.
        line_marks().forget(&file);
        assert_eq!(count_lines(&path, &file, early).unwrap(), 150);
        assert_eq!(line_count(&path).unwrap().end, len);
        assert_eq!(counted(&path), (350, 350));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(24))]
        /// Whatever is appended between counts, in any process, a count is the file's
        /// number of newlines.
        #[test]
        fn a_hinted_count_is_the_number_of_lines(
            steps in proptest::collection::vec((0usize..150, 0usize..3), 1..8)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.jsonl");
            let mut next = 0;
            for (lines, counts) in steps {
                append(&path, &talk(next, lines));
                next += lines;
                for _ in 0..counts {
                    let (lines, naive) = counted(&path);
                    proptest::prop_assert_eq!(lines, naive);
                }
            }
            let (lines, naive) = counted(&path);
            proptest::prop_assert_eq!(lines, naive);
        }
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
