//! Objects reserved ahead of their contents (`Session::reserve`, `Transaction::fill`): a graph
//! with forward references written in one pass over several transactions survives reopening;
//! an aborted fill leaves nothing and can be done again; reserved pages are nobody else's
//! until released, and then free again; bad requests are refused; the same holds remotely.

mod common;

use lodestore::{Error, Oid, Options, Persistent, RawOid, Store};
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Node {
    value: u64,
    next: Oid<Node>,
}
impl Persistent for Node {
    const TYPE_ID: u32 = 41;
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Filler {
    bytes: [u64; 25],
}
impl Persistent for Filler {
    const TYPE_ID: u32 = 42;
}

fn pages_of<T>(oids: &[Oid<T>]) -> BTreeSet<u32> {
    oids.iter().map(|o| o.raw().page().0).collect()
}

/// A ring of `count` nodes, each naming the next before it exists, in transactions of
/// `batch`.
fn write_ring(session: &mut lodestore::Session, nodes: &[Oid<Node>], batch: usize) {
    for (first, chunk) in nodes.chunks(batch).enumerate() {
        let mut txn = session.begin().unwrap();
        for (i, &node) in chunk.iter().enumerate() {
            let index = first * batch + i;
            let next = nodes[(index + 1) % nodes.len()];
            txn.fill(
                node,
                &Node {
                    value: index as u64,
                    next,
                },
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
}

#[test]
fn a_ring_written_forward_in_one_pass_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring");
    let store = Store::create(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let nodes: Vec<Oid<Node>> = session.reserve(10_000).unwrap();
    assert_eq!(nodes.len(), 10_000);
    assert_eq!(
        nodes
            .iter()
            .map(|o| o.raw().0)
            .collect::<BTreeSet<_>>()
            .len(),
        nodes.len(),
        "distinct OIDs"
    );
    assert!(pages_of(&nodes).len() > 10, "spread over many pages");
    let log_before = store.log_stats().bytes_appended;
    write_ring(&mut session, &nodes, 1_500);
    // One pass: the log holds each page about once (a ring of 10,000 nodes of 16 bytes, about
    // 240 KB of pages), not the pages again for every link.
    let logged = store.log_stats().bytes_appended - log_before;
    let pages = pages_of(&nodes).len() as u64 * store.page_size() as u64;
    assert!(
        logged < pages * 2,
        "logged {logged} bytes for {pages} bytes of pages"
    );
    let mut txn = session.begin().unwrap();
    txn.set_root("ring", nodes[0]).unwrap();
    txn.commit().unwrap();
    drop(session);
    store.close().unwrap();

    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let first: Oid<Node> = txn.root_typed("ring").unwrap();
    let mut at = first;
    for expected in 0..10_000u64 {
        let node = *txn.get(at).unwrap();
        assert_eq!(node.value, expected);
        at = node.next;
    }
    assert_eq!(at, first, "the ring closes");
    drop(txn);
    drop(session);
    store.close().unwrap();
    let report = lodestore::check(&lodestore::RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{report:?}");
}

#[test]
fn an_aborted_fill_leaves_nothing_and_the_objects_can_be_filled_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let nodes: Vec<Oid<Node>> = session.reserve(3).unwrap();
    let mut txn = session.begin().unwrap();
    txn.fill(
        nodes[0],
        &Node {
            value: 7,
            next: nodes[1],
        },
    )
    .unwrap();
    // The page's other objects came into being with it, zero-filled.
    assert_eq!(txn.get(nodes[2]).unwrap().value, 0);
    txn.abort().unwrap();

    let mut other = store.session().unwrap();
    let mut txn = other.begin().unwrap();
    for node in &nodes {
        assert!(
            matches!(txn.get(*node), Err(Error::ObjectNotFound { .. })),
            "an aborted fill left {node:?}"
        );
    }
    txn.commit().unwrap();

    let mut txn = session.begin().unwrap();
    txn.fill(
        nodes[1],
        &Node {
            value: 8,
            next: nodes[0],
        },
    )
    .unwrap();
    txn.commit().unwrap();
    let mut txn = other.begin().unwrap();
    assert_eq!(txn.get(nodes[1]).unwrap().value, 8);
    assert_eq!(
        *txn.get(nodes[0]).unwrap(),
        Node {
            value: 0,
            next: Oid::NULL
        }
    );
    // Filling an object of a page already written is an ordinary write.
    drop(txn);
    let mut txn = session.begin().unwrap();
    txn.fill(
        nodes[0],
        &Node {
            value: 9,
            next: nodes[2],
        },
    )
    .unwrap();
    txn.commit().unwrap();
    let mut txn = other.begin().unwrap();
    assert_eq!(txn.get(nodes[0]).unwrap().value, 9);
}

#[test]
fn reserved_pages_are_nobody_elses_until_released_and_free_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, Options::new()).unwrap();
    let mut loader = store.session().unwrap();
    let nodes: Vec<Oid<Node>> = loader.reserve(5_000).unwrap();
    let reserved = pages_of(&nodes);

    // Another session allocates plenty meanwhile: never on a reserved page.
    let mut other = store.session().unwrap();
    let mut txn = other.begin().unwrap();
    let fillers: Vec<Oid<Filler>> = (0..2_000)
        .map(|_| txn.alloc(&Filler { bytes: [1; 25] }).unwrap())
        .collect();
    txn.commit().unwrap();
    assert!(pages_of(&fillers).is_disjoint(&reserved));

    // Half of the ring written, then the reservation released: the unwritten pages are
    // free for anyone, the written ones hold their objects.
    write_ring(&mut loader, &nodes[..2_500], 2_500);
    loader.release_reservations().unwrap();
    let mut txn = other.begin().unwrap();
    let more: Vec<Oid<Filler>> = (0..4_000)
        .map(|_| txn.alloc(&Filler { bytes: [2; 25] }).unwrap())
        .collect();
    txn.commit().unwrap();
    let unwritten = &pages_of(&nodes[2_500..]) - &pages_of(&nodes[..2_500]);
    assert!(
        !pages_of(&more).is_disjoint(&unwritten),
        "released pages were not reused"
    );
    let mut txn = other.begin().unwrap();
    assert_eq!(txn.get(nodes[2_499]).unwrap().value, 2_499);
    drop(txn);

    // A reservation the session never released ends with the session.
    let mut short: Vec<Oid<Node>> = loader.reserve(1_000).unwrap();
    short.truncate(1);
    drop(loader);
    let mut txn = other.begin().unwrap();
    let after: Vec<Oid<Filler>> = (0..2_000)
        .map(|_| txn.alloc(&Filler { bytes: [3; 25] }).unwrap())
        .collect();
    txn.commit().unwrap();
    assert!(pages_of(&after).contains(&short[0].raw().page().0));
    drop(other);
    store.close().unwrap();
    let report = lodestore::check(&lodestore::RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{report:?}");
}

#[test]
fn bad_requests_are_refused_with_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    assert!(session.reserve::<Node>(0).unwrap().is_empty());
    let too_large = session.reserve_zeroed(9, 100_000, 3).unwrap_err();
    assert!(
        too_large.to_string().contains("100000 bytes"),
        "{too_large}"
    );
    let lodestore_type = session.reserve_zeroed(0xFFFF_0001, 8, 3).unwrap_err();
    assert!(
        lodestore_type.to_string().contains("reserved"),
        "{lodestore_type}"
    );
    let too_many = session.reserve::<Node>(u64::MAX / 2).unwrap_err();
    assert!(matches!(too_many, Error::InvalidArgument(_)), "{too_many}");

    let raw: Vec<RawOid> = session.reserve_zeroed(9, 64, 2).unwrap();
    let mut txn = session.begin().unwrap();
    let short = txn.fill_bytes(raw[0], &[1; 10]).unwrap_err();
    assert!(matches!(short, Error::OutOfBounds { .. }), "{short}");
    txn.fill_bytes(raw[0], &[1; 64]).unwrap();
    txn.commit().unwrap();
    let mut txn = session.begin().unwrap();
    assert_eq!(txn.read_all(raw[0]).unwrap(), vec![1; 64]);
    assert_eq!(txn.read_all(raw[1]).unwrap(), vec![0; 64]);
}

#[test]
fn a_remote_session_reserves_and_its_reservation_ends_with_the_connection() {
    let served = common::Served::new(Options::new());
    let remote = Store::connect(&served.address, Options::new()).unwrap();
    let mut session = remote.session().unwrap();
    let nodes: Vec<Oid<Node>> = session.reserve(2_000).unwrap();
    write_ring(&mut session, &nodes[..1_000], 400);
    let mut txn = session.begin().unwrap();
    assert_eq!(txn.get(nodes[999]).unwrap().next, nodes[0]);
    drop(txn);
    let unwritten = &pages_of(&nodes[1_000..]) - &pages_of(&nodes[..1_000]);
    assert!(!unwritten.is_empty());
    // The connection goes without releasing: the server gives the pages back.
    drop(session);
    drop(remote);
    let mut local = served.store.session().unwrap();
    let mut taken = BTreeSet::new();
    for _ in 0..100 {
        if !taken.is_disjoint(&unwritten) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut txn = local.begin().unwrap();
        for _ in 0..500 {
            let oid = txn.alloc(&Filler { bytes: [4; 25] }).unwrap();
            taken.insert(oid.raw().page().0);
        }
        txn.commit().unwrap();
    }
    assert!(
        !taken.is_disjoint(&unwritten),
        "the reservation outlived its connection"
    );
}

#[test]
fn sessions_reserving_and_allocating_at_once_keep_apart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, Options::new()).unwrap();
    let rings: Vec<Vec<Oid<Node>>> = std::thread::scope(|scope| {
        let loaders: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut session = store.session().unwrap();
                    let nodes: Vec<Oid<Node>> = session.reserve(3_000).unwrap();
                    write_ring(&mut session, &nodes, 700);
                    nodes
                })
            })
            .collect();
        let allocator = scope.spawn(|| {
            let mut session = store.session().unwrap();
            let mut fillers = Vec::new();
            for round in 0..20u64 {
                let mut txn = session.begin().unwrap();
                for _ in 0..200 {
                    let oid = txn.alloc(&Filler { bytes: [round; 25] }).unwrap();
                    fillers.push((oid, round));
                }
                txn.commit().unwrap();
            }
            fillers
        });
        let rings: Vec<_> = loaders.into_iter().map(|l| l.join().unwrap()).collect();
        let fillers = allocator.join().unwrap();
        // A page a loader committed is an ordinary page (its room left may take new objects);
        // no object may be another's.
        let reserved: BTreeSet<u64> = rings.iter().flatten().map(|o| o.raw().0).collect();
        assert!(fillers.iter().all(|(f, _)| !reserved.contains(&f.raw().0)));
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        for (filler, round) in &fillers {
            assert_eq!(txn.get(*filler).unwrap().bytes, [*round; 25]);
        }
        rings
    });
    let all: BTreeSet<u64> = rings.iter().flatten().map(|o| o.raw().0).collect();
    assert_eq!(all.len(), 9_000, "the sessions' reservations overlap");
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for ring in &rings {
        for (i, &node) in ring.iter().enumerate() {
            let node = *txn.get(node).unwrap();
            assert_eq!(node.value, i as u64);
            assert_eq!(node.next, ring[(i + 1) % ring.len()]);
        }
    }
    drop(txn);
    drop(session);
    store.close().unwrap();
    let report = lodestore::check(&lodestore::RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{report:?}");
}

/// Pages whose objects all went by a committed transaction are free space again, for
/// reservations and large objects too: a store whose objects come and go by reservation
/// keeps to the same pages, under every recovery method.
#[test]
fn pages_emptied_by_a_commit_are_free_again_for_the_next_reservation() {
    for method in [
        lodestore::RecoveryMethodKind::Esm,
        lodestore::RecoveryMethodKind::Dl1p,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let store = Store::create(&path, Options::new().recovery_method(method)).unwrap();
        let mut session = store.session().unwrap();
        let mut first_pages = None;
        for round in 0..20u64 {
            let nodes: Vec<Oid<Node>> = session.reserve(500).unwrap();
            let mut txn = session.begin().unwrap();
            for &node in &nodes {
                txn.fill(
                    node,
                    &Node {
                        value: round,
                        next: node,
                    },
                )
                .unwrap();
            }
            txn.commit().unwrap();
            let mut txn = session.begin().unwrap();
            for &node in &nodes {
                txn.free(node).unwrap();
            }
            txn.commit().unwrap();
            session.release_reservations().unwrap();
            let pages = pages_of(&nodes);
            let first = first_pages.get_or_insert_with(|| pages.clone());
            assert_eq!(
                &pages, first,
                "{method:?} round {round}: a reservation took other pages than the emptied ones"
            );
        }
        drop(session);
        store.close().unwrap();
        let info = lodestore::info(&lodestore::RealFileSystem, &path).unwrap();
        assert_eq!(info.objects, 0, "{method:?}");
        assert_eq!(
            info.pages_by_kind.get("slotted").copied().unwrap_or(0),
            1,
            "{method:?}: only the directory page stays slotted: {info:?}"
        );
    }
}
