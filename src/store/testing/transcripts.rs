//! The conformance suite every [`TranscriptStore`] must pass.
//!
//! Two behaviours (archive names, export and import) go through the
//! [`TranscriptExport`] capability, so the suite runs on stores that have it, as every
//! store of this crate does. Run it with [`transcript_conformance_tests!`](crate::transcript_conformance_tests),
//! as the session suite runs with `store_conformance_tests!`.

use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use tokio::task::JoinSet;

use crate::error::Error;
use crate::identity::key::AgentId;
use crate::transcript::follow::transcript::{Read, TranscriptFollow};
use crate::transcript::{
    ArchiveReason, LogFields, LogQuery, Offset, SessionHeader, TranscriptEntry, TranscriptExport,
    TranscriptRef, TranscriptStore,
};

fn at(minute: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 10, 9, 0, 0).unwrap() + Duration::minutes(minute)
}

fn transcript(agent: &str, session_id: &str) -> TranscriptRef {
    TranscriptRef::new(
        AgentId::new(agent).expect("test agents are valid"),
        session_id,
    )
}

fn said(text: &str, minute: i64) -> TranscriptEntry {
    TranscriptEntry::user_text(text, at(minute))
}

fn logged(text: &str, minute: i64, person: &str, identity: &str) -> TranscriptEntry {
    said(text, minute).with_log(LogFields {
        person_id: Some(person.into()),
        agent_identity: Some(identity.into()),
        session_key: Some(format!("agent:main:person:{person}")),
        ..LogFields::default()
    })
}

fn texts(events: &[crate::transcript::SessionEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            e.entry
                .message
                .as_ref()
                .map(|m| m.text())
                .unwrap_or_default()
        })
        .collect()
}

/// Appends get ids chained by parent, offsets that replay from where they point, and
/// a header created on first use.
#[doc(hidden)]
pub async fn appends_chain_ids_and_replay_from_offsets<T: TranscriptStore + ?Sized>(store: &T) {
    let t = transcript("main", "s-1");
    let first = store
        .append(&t, vec![said("one", 0), said("two", 1)])
        .await
        .unwrap();
    let second = store.append(&t, vec![said("three", 2)]).await.unwrap();
    let events: Vec<_> = first.iter().chain(&second).collect();
    assert!(events.iter().all(|e| e.entry.id.is_some()), "ids assigned");
    assert_eq!(
        events[0].entry.parent_id, None,
        "the first entry has no parent"
    );
    for pair in events.windows(2) {
        assert_eq!(pair[1].entry.parent_id, pair[0].entry.id, "parent chain");
        assert!(pair[1].offset > pair[0].offset, "offsets grow");
    }

    let all = store.read(&t, Offset::START).await.unwrap();
    assert_eq!(
        all.header.as_ref().map(|h| h.id.as_str()),
        Some("s-1"),
        "header"
    );
    assert_eq!(texts(&all.events), ["one", "two", "three"]);
    assert!(all.issues.is_empty(), "{:?}", all.issues);
    assert_eq!(
        all.events.iter().map(|e| e.offset).collect::<Vec<_>>(),
        events.iter().map(|e| e.offset).collect::<Vec<_>>(),
        "reads report the offsets appends returned"
    );

    let tail = store.read(&t, events[1].offset).await.unwrap();
    assert_eq!(texts(&tail.events), ["two", "three"]);
    assert_eq!(tail.next, all.next);
    let nothing_new = store.read(&t, all.next).await.unwrap();
    assert!(nothing_new.events.is_empty());
    assert!(matches!(
        store.read(&t, Offset(all.next.0 + 1_000_000)).await,
        Err(Error::InvalidOffset { .. })
    ));
    let missing = store
        .read(&transcript("main", "nobody"), Offset::START)
        .await
        .unwrap();
    assert!(missing.events.is_empty() && missing.header.is_none());
}

/// Reading in chunks returns what one read returns, chunk after chunk: each chunk
/// holds about the bytes asked (at least one event, however long), and continues where
/// the last stopped.
#[doc(hidden)]
pub async fn chunked_reads_return_everything_once<T: TranscriptStore + ?Sized>(store: &T) {
    let t = transcript("main", "s-chunks");
    let long = "y".repeat(5_000);
    let mut entries: Vec<TranscriptEntry> =
        (0..40).map(|n| said(&format!("line {n}"), n)).collect();
    entries.insert(20, said(&long, 20));
    store.append(&t, entries).await.unwrap();
    let whole = store.read(&t, Offset::START).await.unwrap();
    for max_bytes in [1, 300, 1_000, 4_096, 1 << 20] {
        let mut from = Offset::START;
        let mut events = Vec::new();
        loop {
            let chunk = store.read_chunk(&t, from, max_bytes).await.unwrap();
            if chunk.events.is_empty() {
                assert_eq!(
                    chunk.next, whole.next,
                    "{max_bytes}: ends where a read ends"
                );
                break;
            }
            let size: usize = chunk
                .events
                .iter()
                .map(|e| serde_json::to_vec(&e.entry).unwrap().len())
                .sum();
            assert!(
                chunk.events.len() == 1 || size <= max_bytes + max_bytes / 2 + 600,
                "{max_bytes}: a chunk of {size} bytes"
            );
            assert!(chunk.next > from, "{max_bytes}: moves on");
            from = chunk.next;
            events.extend(chunk.events);
        }
        assert_eq!(texts(&events), texts(&whole.events), "{max_bytes}");
        assert_eq!(
            events
                .iter()
                .map(|e| (e.offset, e.line))
                .collect::<Vec<_>>(),
            whole
                .events
                .iter()
                .map(|e| (e.offset, e.line))
                .collect::<Vec<_>>(),
            "{max_bytes}: the same offsets and line numbers"
        );
    }
}

/// Reading back from the end returns what one read returns, newest chunk first: each
/// chunk holds about the bytes asked (at least one event, however long), oldest first,
/// and ends where the one after it starts; the header comes with the chunk that reaches
/// the start. A read back from a place that is no line's start is refused.
#[doc(hidden)]
pub async fn reads_back_return_everything_once<T: TranscriptStore + ?Sized>(store: &T) {
    let t = transcript("main", "s-back");
    let empty = store.read_back(&t, None, 1_000).await.unwrap();
    assert!(
        empty.events.is_empty() && empty.next == Offset::START,
        "no transcript"
    );
    let long = "y".repeat(5_000);
    let mut entries: Vec<TranscriptEntry> =
        (0..40).map(|n| said(&format!("line {n}"), n)).collect();
    entries.insert(20, said(&long, 20));
    entries.push(said(&long, 41));
    store.append(&t, entries).await.unwrap();
    let whole = store.read(&t, Offset::START).await.unwrap();
    for max_bytes in [1, 300, 1_000, 4_096, 1 << 20] {
        let mut before = None;
        let mut chunks: Vec<Vec<crate::transcript::SessionEvent>> = Vec::new();
        loop {
            let chunk = store.read_back(&t, before, max_bytes).await.unwrap();
            let size: usize = chunk
                .events
                .iter()
                .map(|e| serde_json::to_vec(&e.entry).unwrap().len())
                .sum();
            assert!(
                chunk.events.len() <= 1 || size <= max_bytes + max_bytes / 2 + 600,
                "{max_bytes}: a chunk of {size} bytes"
            );
            let at_start = chunk.next == Offset::START;
            if let (Some(first), false) = (chunk.events.first(), at_start) {
                assert_eq!(chunk.next, first.offset, "{max_bytes}: starts at its first");
            }
            assert_eq!(
                chunk.header.as_ref().map(|h| h.id.clone()),
                at_start.then(|| "s-back".to_owned()),
                "{max_bytes}: the header with the chunk at the start"
            );
            assert!(
                !chunk.events.is_empty() || at_start,
                "{max_bytes}: moves back"
            );
            before = Some(chunk.next);
            chunks.push(chunk.events);
            if at_start {
                break;
            }
        }
        let events: Vec<_> = chunks.into_iter().rev().flatten().collect();
        assert_eq!(texts(&events), texts(&whole.events), "{max_bytes}");
        assert_eq!(
            events.iter().map(|e| e.offset).collect::<Vec<_>>(),
            whole.events.iter().map(|e| e.offset).collect::<Vec<_>>(),
            "{max_bytes}: the same offsets"
        );
        for (back, read) in events.iter().zip(&whole.events) {
            assert!(
                back.line == 0 || back.line == read.line,
                "{max_bytes}: a line number is right or 0"
            );
        }
    }
    // From the middle: what is before that place.
    let middle = whole.events[10].offset;
    let before_middle = store.read_back(&t, Some(middle), 1 << 20).await.unwrap();
    assert_eq!(texts(&before_middle.events), texts(&whole.events[..10]));
    assert!(matches!(
        store
            .read_back(&t, Some(Offset(whole.next.0 + 1_000_000)), 100)
            .await,
        Err(Error::InvalidOffset { .. })
    ));
}

/// The last compaction is the last line of that type, whatever other lines say of the
/// word; none before there is one.
#[doc(hidden)]
pub async fn the_last_compaction_is_found<T: TranscriptStore + ?Sized>(store: &T) {
    let t = transcript("main", "s-compacted");
    assert!(
        store.last_compaction(&t).await.unwrap().is_none(),
        "no transcript"
    );
    store
        .append(&t, vec![said("we talked about compaction", 0)])
        .await
        .unwrap();
    assert!(
        store.last_compaction(&t).await.unwrap().is_none(),
        "only the word"
    );
    let compaction = |summary: &str| -> TranscriptEntry {
        serde_json::from_value(serde_json::json!({
            "type": "compaction", "summary": summary, "tokensBefore": 900
        }))
        .unwrap()
    };
    let mut lines = vec![compaction("first")];
    lines.extend((0..300).map(|n| said(&format!("line {n}"), n)));
    lines.push(compaction("second"));
    lines.extend((0..300).map(|n| {
        said(
            &format!("compaction {n}? {}", "z".repeat(40 * n as usize)),
            n,
        )
    }));
    let appended = store.append(&t, lines).await.unwrap();
    let found = store
        .last_compaction(&t)
        .await
        .unwrap()
        .expect("a compaction");
    let second = &appended[301];
    assert_eq!(found.offset, second.offset);
    assert_eq!(found.entry.id, second.entry.id);
    assert_eq!(
        found.entry.extra.get("summary"),
        Some(&serde_json::json!("second"))
    );
    // Found again once more lines follow it, and a newer one once one is appended:
    // whatever a store remembers of where its last search ended.
    let more = (0..300).map(|n| {
        said(
            &format!("compaction again {n}? {}", "y".repeat(40 * n as usize)),
            n,
        )
    });
    store.append(&t, more.collect()).await.unwrap();
    let again = store
        .last_compaction(&t)
        .await
        .unwrap()
        .expect("a compaction");
    assert_eq!(
        (again.offset, again.entry.id),
        (second.offset, second.entry.id.clone())
    );
    let mut lines = vec![compaction("third")];
    lines.extend((0..3).map(|n| said(&format!("compaction {n}"), n)));
    let appended = store.append(&t, lines).await.unwrap();
    let third = store
        .last_compaction(&t)
        .await
        .unwrap()
        .expect("a compaction");
    assert_eq!(third.offset, appended[0].offset);
    assert_eq!(
        third.entry.extra.get("summary"),
        Some(&serde_json::json!("third"))
    );
}

/// `create` creates once; topics are transcripts of their own.
#[doc(hidden)]
pub async fn create_once_and_topics_apart<T: TranscriptStore + ?Sized>(store: &T) {
    let t = transcript("main", "s-2");
    let header = SessionHeader::new("s-2", at(0));
    assert!(store.create(&t, &header).await.unwrap());
    assert!(!store.create(&t, &header).await.unwrap());
    let mut topic = t.clone();
    topic.topic = Some("7/8".into());
    store
        .append(&topic, vec![said("in topic", 1)])
        .await
        .unwrap();
    assert!(store
        .read(&t, Offset::START)
        .await
        .unwrap()
        .events
        .is_empty());
    assert_eq!(
        texts(&store.read(&topic, Offset::START).await.unwrap().events),
        ["in topic"]
    );
}

/// A fork starts with its parent's entries, the same ids, and names its parent.
#[doc(hidden)]
pub async fn forks_start_from_the_parent<T: TranscriptStore + ?Sized>(store: &T) {
    let parent = transcript("main", "parent");
    let appended = store
        .append(&parent, vec![said("a", 0), said("b", 1)])
        .await
        .unwrap();
    let child = transcript("main", "child");
    let header = SessionHeader::new("child", at(2));
    assert!(store.fork(&parent, &child, &header).await.unwrap());
    assert!(!store.fork(&parent, &child, &header).await.unwrap());
    let read = store.read(&child, Offset::START).await.unwrap();
    assert_eq!(texts(&read.events), ["a", "b"]);
    assert_eq!(read.events[1].entry.id, appended[1].entry.id);
    assert!(read.header.unwrap().parent_session.is_some());
    let next = store.append(&child, vec![said("c", 3)]).await.unwrap();
    assert_eq!(next[0].entry.parent_id, appended[1].entry.id);
    assert_eq!(
        texts(&store.read(&parent, Offset::START).await.unwrap().events),
        ["a", "b"],
        "the parent is unchanged"
    );
}

/// Archiving renames (the live name is free again), removing erases.
#[doc(hidden)]
pub async fn archive_renames_and_remove_erases<T: TranscriptExport + ?Sized>(store: &T) {
    let agent = AgentId::new("archivist").unwrap();
    let t = TranscriptRef::new(agent.clone(), "s-3");
    store.append(&t, vec![said("old", 0)]).await.unwrap();
    let archived = store
        .archive(&t, ArchiveReason::Reset, at(5))
        .await
        .unwrap()
        .expect("there was a transcript");
    let archived_name = archived
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap()
        .to_owned();
    assert!(
        archived_name.starts_with("s-3.jsonl.reset."),
        "{archived_name}"
    );
    assert!(store
        .read(&t, Offset::START)
        .await
        .unwrap()
        .events
        .is_empty());
    assert_eq!(
        store
            .archive(&t, ArchiveReason::Reset, at(6))
            .await
            .unwrap(),
        None
    );
    store.append(&t, vec![said("new", 7)]).await.unwrap();
    let names: Vec<String> = store
        .transcript_names(Some(&agent))
        .await
        .unwrap()
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_eq!(names, ["s-3.jsonl".to_owned(), archived_name.clone()]);
    let old = store.export_lines(&agent, &archived_name).await.unwrap();
    assert_eq!(old.map(|lines| lines.len()), Some(2), "header and one line");

    assert!(store.remove(&t).await.unwrap());
    assert!(!store.remove(&t).await.unwrap());
    assert!(store
        .read(&t, Offset::START)
        .await
        .unwrap()
        .events
        .is_empty());
}

/// The message log is queried by person and identity, agent, session, time and limit,
/// in time order.
#[doc(hidden)]
pub async fn message_log_queries<T: TranscriptStore + ?Sized>(store: &T) {
    let oc = transcript("reggie_oc", "s-oc");
    let fd = transcript("reggie_fd", "s-fd");
    store
        .append(
            &oc,
            vec![
                logged("jane 1", 1, "staff:17", "reggie"),
                said("not logged", 2),
                logged("sam 1", 3, "participant:5", "reggie"),
            ],
        )
        .await
        .unwrap();
    store
        .append(
            &fd,
            vec![
                logged("jane 2", 4, "staff:17", "reggie"),
                logged("jane henry", 5, "staff:17", "henry"),
            ],
        )
        .await
        .unwrap();
    let text = |records: Vec<crate::transcript::LogRecord>| {
        records.into_iter().map(|r| r.text).collect::<Vec<_>>()
    };
    let jane = store
        .query_log(&LogQuery::person_with("staff:17", "reggie"))
        .await
        .unwrap();
    assert_eq!(text(jane.clone()), ["jane 1", "jane 2"]);
    assert_eq!(jane[0].agent.as_str(), "reggie_oc");
    assert_eq!(jane[1].session_id, "s-fd");
    assert_eq!(jane[0].at, at(1));
    assert_eq!(
        text(
            store
                .query_log(&LogQuery::session(
                    AgentId::new("reggie_oc").unwrap(),
                    "s-oc"
                ))
                .await
                .unwrap()
        ),
        ["jane 1", "sam 1"]
    );
    assert_eq!(
        text(
            store
                .query_log(&LogQuery::new().since(at(3)).until(at(5)))
                .await
                .unwrap()
        ),
        ["sam 1", "jane 2"]
    );
    assert_eq!(
        text(store.query_log(&LogQuery::new().limit(2)).await.unwrap()),
        ["jane 1", "sam 1"]
    );
}

/// Subscribers see appends as they happen.
#[doc(hidden)]
pub async fn subscribers_see_appends<T: TranscriptStore + ?Sized>(store: &T) {
    let mut feed = store.subscribe();
    let t = transcript("main", "s-live");
    store.append(&t, vec![said("live", 0)]).await.unwrap();
    let update = feed.recv().await.unwrap();
    assert_eq!(update.transcript, t);
    assert_eq!(texts(&update.events), ["live"]);
}

/// Exported lines import elsewhere byte for byte; importing over an existing
/// transcript does nothing.
#[doc(hidden)]
pub async fn exported_lines_import_byte_for_byte<T: TranscriptExport + ?Sized>(store: &T) {
    let from = transcript("main", "s-export");
    store
        .append(
            &from,
            vec![said("ünïcode ✓", 0), logged("logged", 1, "p", "i")],
        )
        .await
        .unwrap();
    let agent = AgentId::main();
    let mut lines = store
        .export_lines(&agent, "s-export.jsonl")
        .await
        .unwrap()
        .unwrap();
    // A line this crate does not know is kept too.
    lines.push(r#"{"type":"futureThing","id":"ffff0000","zeta":[1,2.50,"x"],"alpha":null}"#.into());
    let other = AgentId::new("copy").unwrap();
    assert!(store
        .import_lines(&other, "s-export.jsonl", lines.clone())
        .await
        .unwrap());
    assert!(!store
        .import_lines(&other, "s-export.jsonl", vec![])
        .await
        .unwrap());
    assert_eq!(
        store
            .export_lines(&other, "s-export.jsonl")
            .await
            .unwrap()
            .unwrap(),
        lines
    );
    let read = store
        .read(
            &TranscriptRef::new(other.clone(), "s-export"),
            Offset::START,
        )
        .await
        .unwrap();
    assert_eq!(read.events.len(), 3);
    assert_eq!(
        store
            .query_log(&LogQuery::person_with("p", "i"))
            .await
            .unwrap()
            .len(),
        2,
        "imported lines are in the message log"
    );
    assert!(matches!(
        store.import_lines(&other, "../escape.jsonl", vec![]).await,
        Err(Error::InvalidId { .. })
    ));
    assert_eq!(
        store.export_lines(&other, "none.jsonl").await.unwrap(),
        None
    );
}

/// Concurrent appends to one transcript lose nothing and keep one parent chain.
#[doc(hidden)]
pub async fn concurrent_appends_keep_one_chain<T: TranscriptStore + ?Sized + 'static>(
    store: Arc<T>,
) {
    let t = transcript("main", "s-busy");
    let mut tasks = JoinSet::new();
    for task in 0..8 {
        let (store, t) = (store.clone(), t.clone());
        tasks.spawn(async move {
            for n in 0..20 {
                store
                    .append(&t, vec![said(&format!("{task}-{n}"), 0)])
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let read = store.read(&t, Offset::START).await.unwrap();
    assert_eq!(read.events.len(), 160);
    for pair in read.events.windows(2) {
        assert_eq!(pair[1].entry.parent_id, pair[0].entry.id, "one chain");
    }
}

/// A follower sees every append once and in order, from a transcript that did not
/// exist yet; one started at its position sees only what came after.
#[doc(hidden)]
pub async fn followers_see_every_append_once_in_order<T: TranscriptStore + 'static>(store: Arc<T>) {
    let t = transcript("main", "s-followed");
    let store: Arc<dyn TranscriptStore> = store;
    let mut follow = TranscriptFollow::new(store.clone(), t.clone(), Offset::START)
        .poll_interval(std::time::Duration::from_millis(20));
    assert!(follow.try_next().await.unwrap().is_none(), "nothing yet");
    let writer = {
        let (store, t) = (store.clone(), t.clone());
        tokio::spawn(async move {
            for batch in 0..10 {
                let entries = (0..3)
                    .map(|n| said(&format!("{}", batch * 3 + n), 0))
                    .collect();
                store.append(&t, entries).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 30 {
        let events = tokio::time::timeout(std::time::Duration::from_secs(10), follow.next())
            .await
            .expect("the follower keeps up")
            .unwrap()
            .expect("the transcript is live");
        let Read::Events(events) = events else {
            panic!("nothing was lost: {events:?}")
        };
        seen.extend(texts(&events));
    }
    writer.await.unwrap();
    let expected: Vec<String> = (0..30).map(|n| n.to_string()).collect();
    assert_eq!(seen, expected, "every append once, in order");
    assert!(follow.try_next().await.unwrap().is_none());

    let mut resumed = TranscriptFollow::new(store.clone(), t.clone(), follow.position());
    store.append(&t, vec![said("after", 1)]).await.unwrap();
    let Some(Read::Events(after)) = resumed.next().await.unwrap() else {
        panic!("the line after")
    };
    assert_eq!(texts(&after), ["after"]);
}

/// Runs the transcript conformance suite: one `#[tokio::test]` per behaviour, each on a
/// fresh store from `$make` (an async expression giving `(store, guard)`).
#[macro_export]
macro_rules! transcript_conformance_tests {
    ($make:expr $(; $(#[$attr:meta])*)?) => {
        $crate::transcript_conformance_tests!(@each $make; [$($(#[$attr])*)?];
            appends_chain_ids_and_replay_from_offsets,
            chunked_reads_return_everything_once,
            reads_back_return_everything_once,
            the_last_compaction_is_found,
            create_once_and_topics_apart,
            forks_start_from_the_parent,
            archive_renames_and_remove_erases,
            message_log_queries,
            subscribers_see_appends,
            exported_lines_import_byte_for_byte,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($(#[$attr])*)?
        async fn concurrent_appends_keep_one_chain() {
            let (store, _guard) = $make.await;
            $crate::store::testing::transcripts::concurrent_appends_keep_one_chain(
                ::std::sync::Arc::new(store),
            )
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $($(#[$attr])*)?
        async fn followers_see_every_append_once_in_order() {
            let (store, _guard) = $make.await;
            $crate::store::testing::transcripts::followers_see_every_append_once_in_order(
                ::std::sync::Arc::new(store),
            )
            .await;
        }
    };
    (@each $make:expr; $attrs:tt; $($name:ident),+ $(,)?) => {
        $( $crate::transcript_conformance_tests!(@one $make; $attrs; $name); )+
    };
    (@one $make:expr; [$(#[$attr:meta])*]; $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        $(#[$attr])*
        async fn $name() {
            let (store, _guard) = $make.await;
            $crate::store::testing::transcripts::$name(&store).await;
        }
    };
}
