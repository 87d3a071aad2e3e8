//! What every [`ChatterBuffer`] must do, as [`InMemoryChatter`](crate::inbound::InMemoryChatter) does: run on every
//! buffer of the crate by [`chatter_conformance_tests!`](crate::chatter_conformance_tests)
//! (and on a host's own), and here on `InMemoryChatter` itself, so the suite is known to
//! describe the in-memory semantics.

use std::collections::HashSet;
use std::future::Future;

use crate::inbound::chatter::{ChatterBuffer, ChatterClaim, ChatterEntry};

/// One step of [`bounded_per_group_and_over_groups`].
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub enum Step {
    Append(&'static str, &'static str),
    Take(&'static str),
    Clear(&'static str),
}

fn said(body: &str) -> ChatterEntry {
    ChatterEntry {
        sender: "Ann".into(),
        body: body.into(),
        timestamp: None,
        message_id: None,
        sender_id: None,
    }
}

fn bodies(entries: Vec<ChatterEntry>) -> Vec<String> {
    entries.into_iter().map(|e| e.body).collect()
}

/// At most `limit` newest entries a group, at most `max_keys` groups, the group
/// appended to least recently dropped first; `take` and `clear` empty a group.
/// `make(case, limit, max_keys)` gives an empty buffer with those bounds.
#[doc(hidden)]
pub async fn bounded_per_group_and_over_groups<H, F, Fut>(make: F)
where
    H: ChatterBuffer,
    F: Fn(usize, usize, usize) -> Fut,
    Fut: Future<Output = H>,
{
    use Step::{Append, Clear, Take};
    // (limit, max groups, steps, what each group keeps afterwards)
    type Case = (
        usize,
        usize,
        &'static [Step],
        &'static [(&'static str, &'static [&'static str])],
    );
    let cases: &[Case] = &[
        // The newest `limit` entries, in append order.
        (
            2,
            10,
            &[Append("g1", "a"), Append("g1", "b"), Append("g1", "c")],
            &[("g1", &["b", "c"])],
        ),
        (
            50,
            10,
            &[Append("g1", "a"), Append("g2", "x"), Append("g1", "b")],
            &[("g1", &["a", "b"]), ("g2", &["x"])],
        ),
        // 0 keeps nothing.
        (0, 10, &[Append("g1", "a")], &[("g1", &[])]),
        // A third group drops the first.
        (
            5,
            2,
            &[Append("g1", "a"), Append("g2", "b"), Append("g3", "c")],
            &[("g1", &[]), ("g2", &["b"]), ("g3", &["c"])],
        ),
        // Least recently appended, not least recently created: g1 was appended to
        // after g2, so g2 goes.
        (
            5,
            2,
            &[
                Append("g1", "a"),
                Append("g2", "b"),
                Append("g1", "c"),
                Append("g3", "d"),
            ],
            &[("g1", &["a", "c"]), ("g2", &[]), ("g3", &["d"])],
        ),
        // Reading a group does not make it recent; taking it frees its place.
        (
            5,
            2,
            &[
                Append("g1", "a"),
                Append("g2", "b"),
                Take("g1"),
                Append("g3", "c"),
            ],
            &[("g1", &[]), ("g2", &["b"]), ("g3", &["c"])],
        ),
        // Clearing empties a group. (Whether its empty slot still counts toward the
        // bound differs: the in-memory buffer keeps it, as OpenClaw's map does; the
        // buffers in files and databases free it.)
        (
            5,
            2,
            &[Append("g1", "a"), Append("g2", "b"), Clear("g2")],
            &[("g1", &["a"]), ("g2", &[])],
        ),
        // A taken group starts over, and counts as new.
        (
            2,
            10,
            &[
                Append("g1", "a"),
                Append("g1", "b"),
                Take("g1"),
                Append("g1", "c"),
            ],
            &[("g1", &["c"])],
        ),
    ];
    for (n, (limit, max_keys, steps, expected)) in cases.iter().enumerate() {
        let history = make(n, *limit, *max_keys).await;
        for step in *steps {
            match *step {
                Append(group, body) => history.append(group, said(body)).await.unwrap(),
                Take(group) => drop(history.take(group).await.unwrap()),
                Clear(group) => history.clear(group).await.unwrap(),
            }
        }
        for (group, kept) in *expected {
            assert_eq!(
                bodies(history.entries(group).await.unwrap()),
                *kept,
                "case {n} (limit {limit}, max {max_keys}, {steps:?}): {group}"
            );
        }
    }
}

/// With history off (`off`: a limit of 0), clearing a group leaves what a buffer with
/// history on (`on`, over the same storage) kept, as OpenClaw's
/// `clearHistoryEntriesIfEnabled` does.
#[doc(hidden)]
pub async fn clearing_with_history_off_leaves_the_group<H: ChatterBuffer>(on: H, off: H) {
    for body in ["a", "b"] {
        on.append("g1", said(body)).await.unwrap();
    }
    off.clear("g1").await.unwrap();
    assert_eq!(bodies(on.entries("g1").await.unwrap()), ["a", "b"]);
    on.clear("g1").await.unwrap();
    assert!(on.entries("g1").await.unwrap().is_empty());
}

/// Every field comes back as it was appended, whatever its value, and `take` returns
/// what `entries` showed, then leaves the group empty.
#[doc(hidden)]
pub async fn entries_keep_every_field<H: ChatterBuffer>(history: H) {
    let entries = [
        ChatterEntry {
            sender: "Ann (+15550001)".into(),
            body: "lunch at noon?\nsecond line, 'quoted', \"double\", ünïcödé 🍕".into(),
            timestamp: Some(1_773_136_800_000),
            message_id: Some("wamid.HBgL".into()),
            sender_id: None,
        },
        ChatterEntry {
            sender: String::new(),
            body: String::new(),
            timestamp: None,
            message_id: None,
            sender_id: None,
        },
        ChatterEntry {
            sender: "Bob".into(),
            body: "%_\\ LIKE wildcards and a NUL-free \t tab".into(),
            timestamp: Some(u64::MAX),
            message_id: Some(String::new()),
            sender_id: None,
        },
        ChatterEntry {
            sender: "Cy".into(),
            body: "zero".into(),
            timestamp: Some(0),
            message_id: None,
            sender_id: None,
        },
    ];
    let group = "telegram:default:group:-100'; DROP TABLE group_history; --";
    for entry in &entries {
        history.append(group, entry.clone()).await.unwrap();
    }
    assert_eq!(
        history
            .entries("telegram:default:group:-100")
            .await
            .unwrap(),
        []
    );
    assert_eq!(history.entries(group).await.unwrap(), entries);
    assert_eq!(history.take(group).await.unwrap(), entries);
    assert_eq!(history.take(group).await.unwrap(), []);
    assert_eq!(history.entries(group).await.unwrap(), []);
}

/// Two writers append to one group while a third handle takes it, over and over: every
/// entry is returned by exactly one `take` or kept, each writer's entries in the order
/// it appended them. The handles may be one buffer or three (processes, hosts); their
/// per-group limit must hold every entry (`2 * per_writer`).
#[doc(hidden)]
pub async fn take_is_atomic_beside_concurrent_appends<H>(
    writers: [H; 2],
    taker: H,
    per_writer: usize,
) where
    H: ChatterBuffer + 'static,
{
    const GROUP: &str = "slack:default:channel:c1";
    // The writers append half, then all three meet: the taker's takes start while the
    // second halves are being appended, however the scheduler runs the tasks.
    let halfway = std::sync::Arc::new(tokio::sync::Barrier::new(3));
    let mut tasks = tokio::task::JoinSet::new();
    for (w, history) in writers.into_iter().enumerate() {
        let halfway = halfway.clone();
        tasks.spawn(async move {
            for i in 0..per_writer {
                if i == per_writer / 2 {
                    halfway.wait().await;
                }
                history
                    .append(GROUP, said(&format!("{w}-{i}")))
                    .await
                    .unwrap();
            }
        });
    }
    halfway.wait().await;
    let mut seen: Vec<String> = Vec::new();
    while !tasks.is_empty() {
        seen.extend(bodies(taker.take(GROUP).await.unwrap()));
        while let Some(done) = tasks.try_join_next() {
            done.unwrap();
        }
        tokio::task::yield_now().await;
    }
    let kept = bodies(taker.entries(GROUP).await.unwrap());
    seen.extend(kept);
    assert_eq!(seen.len(), 2 * per_writer, "returned + kept == appended");
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "nothing returned twice");
    for w in 0..2 {
        let order: Vec<usize> = seen
            .iter()
            .filter_map(|body| body.strip_prefix(&format!("{w}-")))
            .map(|i| i.parse().unwrap())
            .collect();
        assert_eq!(order, (0..per_writer).collect::<Vec<_>>(), "writer {w}");
    }
}

fn claim(id: &str) -> ChatterClaim {
    ChatterClaim {
        id: id.into(),
        holder: format!("holder of {id}"),
        witness: format!("{{\"where\": \"{id}\"}}"),
        at: 1_773_136_800_000,
    }
}

/// Claims: a claim takes the unclaimed entries (and those of the claims it takes over)
/// and keeps them out of `entries` until it is settled (gone) or released (back before
/// the unclaimed ones); every claim comes back from `claims` as it was made; the limit
/// counts unclaimed entries only; `clear` forgets claims too. `history` starts empty
/// and keeps at least 2 entries a group.
#[doc(hidden)]
pub async fn claims_hand_entries_over_exactly_once<H: ChatterBuffer>(history: H, limit: usize) {
    const G: &str = "agent:main:telegram:default:group:-100";
    let append = |body: &'static str| history.append(G, said(body));
    let ids =
        |claims: Vec<ChatterClaim>| -> Vec<String> { claims.into_iter().map(|c| c.id).collect() };
    append("a").await.unwrap();
    append("b").await.unwrap();
    assert_eq!(
        bodies(history.claim(G, &claim("c1"), &[]).await.unwrap()),
        ["a", "b"]
    );
    assert_eq!(history.entries(G).await.unwrap(), []);
    assert_eq!(history.claims(G).await.unwrap(), [claim("c1")]);
    // Nothing to claim: no claim is recorded.
    assert_eq!(history.claim(G, &claim("empty"), &[]).await.unwrap(), []);
    assert_eq!(ids(history.claims(G).await.unwrap()), ["c1"]);

    append("c").await.unwrap();
    assert_eq!(
        bodies(history.claim(G, &claim("c2"), &[]).await.unwrap()),
        ["c"]
    );
    assert_eq!(ids(history.claims(G).await.unwrap()), ["c1", "c2"]);
    append("d").await.unwrap();
    // Released: back before what was appended since.
    history.release(G, "c1", Vec::new()).await.unwrap();
    assert_eq!(bodies(history.entries(G).await.unwrap()), ["a", "b", "d"]);
    assert_eq!(ids(history.claims(G).await.unwrap()), ["c2"]);
    // Settled: gone; settling again, or an unknown claim, changes nothing.
    history.settle(G, "c2").await.unwrap();
    history.settle(G, "c2").await.unwrap();
    history.release(G, "unknown", Vec::new()).await.unwrap();
    assert_eq!(history.claims(G).await.unwrap(), []);
    assert_eq!(bodies(history.entries(G).await.unwrap()), ["a", "b", "d"]);

    // Taken over: the new claim holds the old one's entries and the unclaimed ones.
    assert_eq!(
        bodies(history.claim(G, &claim("c3"), &[]).await.unwrap()),
        ["a", "b", "d"]
    );
    append("e").await.unwrap();
    let taken = history
        .claim(G, &claim("c4"), &["c3".to_owned(), "never".to_owned()])
        .await
        .unwrap();
    assert_eq!(bodies(taken), ["a", "b", "d", "e"]);
    assert_eq!(ids(history.claims(G).await.unwrap()), ["c4"]);
    history.settle(G, "c3").await.unwrap();
    assert_eq!(
        ids(history.claims(G).await.unwrap()),
        ["c4"],
        "c3 holds nothing now"
    );
    history.settle(G, "c4").await.unwrap();
    assert_eq!(history.entries(G).await.unwrap(), []);
    assert_eq!(history.claims(G).await.unwrap(), []);

    // The limit counts unclaimed entries: a claim is never trimmed away.
    history.append(G, said("x")).await.unwrap();
    history.claim(G, &claim("c5"), &[]).await.unwrap();
    for n in 0..limit + 2 {
        history.append(G, said(&format!("n{n}"))).await.unwrap();
    }
    assert_eq!(history.entries(G).await.unwrap().len(), limit);
    history.release(G, "c5", Vec::new()).await.unwrap();
    let back = bodies(history.entries(G).await.unwrap());
    assert_eq!(back.first().map(String::as_str), Some("x"), "{back:?}");
    assert_eq!(back.len(), limit + 1);

    // `take` leaves claims alone; `clear` forgets them.
    history.claim(G, &claim("c6"), &[]).await.unwrap();
    history.append(G, said("y")).await.unwrap();
    assert_eq!(bodies(history.take(G).await.unwrap()), ["y"]);
    assert_eq!(ids(history.claims(G).await.unwrap()), ["c6"]);
    history.clear(G).await.unwrap();
    assert_eq!(history.claims(G).await.unwrap(), []);
    history.release(G, "c6", Vec::new()).await.unwrap();
    assert_eq!(history.entries(G).await.unwrap(), []);
}

/// A group exported whole — unclaimed entries, a claim with its entries, remembered
/// message ids — and imported into another buffer (empty) reads back the same there:
/// the same entries, the same claim, and a message delivered again is a duplicate. A
/// group the target already holds something of is left alone.
#[doc(hidden)]
pub async fn groups_travel_whole<H: ChatterBuffer>(source: H, target: H) {
    let group = "agent:main:whatsapp:default:group:120363@g.us";
    let window = std::time::Duration::from_secs(20 * 60);
    let with_id = |body: &str, id: &str, at: u64| ChatterEntry {
        message_id: Some(id.into()),
        timestamp: Some(at),
        sender_id: Some("+15550001".into()),
        ..said(body)
    };
    assert!(source
        .append_once(group, with_id("held", "m1", 1_770_000_000_000), window)
        .await
        .unwrap());
    source.claim(group, &claim("c1"), &[]).await.unwrap();
    assert!(source
        .append_once(group, with_id("waiting", "m2", 1_770_000_001_000), window)
        .await
        .unwrap());
    let exported = source.export_groups().await.unwrap();
    assert_eq!(exported.len(), 1, "{exported:?}");
    let (key, whole) = exported.into_iter().next().unwrap();
    assert_eq!(key, group);
    assert_eq!(bodies(whole.entries.iter().cloned().collect()), ["waiting"]);
    assert_eq!(whole.claimed.len(), 1);
    assert_eq!(whole.claimed[0].claim, claim("c1"));
    assert_eq!(bodies(whole.claimed[0].entries.clone()), ["held"]);
    assert_eq!(whole.seen.len(), 2);

    assert!(target.import_group(&key, whole.clone()).await.unwrap());
    assert_eq!(
        target.export_groups().await.unwrap(),
        [(key.clone(), whole.clone())]
    );
    assert_eq!(bodies(target.entries(group).await.unwrap()), ["waiting"]);
    assert_eq!(target.claims(group).await.unwrap(), [claim("c1")]);
    assert!(
        !target
            .append_once(group, with_id("held", "m1", 1_770_000_002_000), window)
            .await
            .unwrap(),
        "a message the source remembered is a duplicate in the copy"
    );
    assert!(
        !target.import_group(&key, whole).await.unwrap(),
        "a group the buffer holds is left alone"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::chatter::InMemoryChatter;

    #[tokio::test]
    async fn memory_history_is_what_the_suite_describes() {
        bounded_per_group_and_over_groups(|_, limit, max_keys| async move {
            InMemoryChatter::new(limit, max_keys)
        })
        .await;
        entries_keep_every_field(InMemoryChatter::default()).await;
        claims_hand_entries_over_exactly_once(InMemoryChatter::new(3, 10), 3).await;
    }

    /// `InMemoryChatter` forgets every group when its limit becomes 0 (see
    /// [`InMemoryChatter::set_limit`](crate::inbound::InMemoryChatter::set_limit)); a clear while it is 0 changes nothing either.
    #[tokio::test]
    async fn memory_history_forgets_every_group_when_history_is_turned_off() {
        let history = InMemoryChatter::new(3, 10);
        history.append("g1", said("a")).await.unwrap();
        history.set_limit(Some(0));
        history.clear("g1").await.unwrap();
        history.set_limit(Some(3));
        history.append("g1", said("b")).await.unwrap();
        assert_eq!(bodies(history.entries("g1").await.unwrap()), ["b"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_history_takes_atomically() {
        let history = std::sync::Arc::new(InMemoryChatter::new(1000, 10));
        take_is_atomic_beside_concurrent_appends([history.clone(), history.clone()], history, 200)
            .await;
    }
}
