//! Persistent collections against `std::collections::BTreeMap`: random inserts, removes,
//! lookups and range scans in both directions, in transactions that commit or abort, across
//! a reopen, with `check` verifying order and balance after each transaction.

use lodestore::{BTreeMap, BTreeSet, Error, Oid, Options, Persistent, Store};
use proptest::prelude::*;
use std::collections::BTreeMap as StdMap;
use std::ops::Bound;

const PAGE_SIZE: usize = 4096;

fn options() -> Options {
    Options::new().page_size(PAGE_SIZE)
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u16),
    /// Keys from the first on, ascending (the way a load runs), each with the value.
    InsertRun(u16, u16, u16),
    Remove(u16),
    Get(u16),
    Range(Bound<u16>, Bound<u16>, bool),
}

fn bound() -> impl Strategy<Value = Bound<u16>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0u16..600).prop_map(Bound::Included),
        (0u16..600).prop_map(Bound::Excluded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u16..600, 0u16..300).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => (0u16..600, 1u16..80, 0u16..300).prop_map(|(k, n, v)| Op::InsertRun(k, n, v)),
        3 => (0u16..600).prop_map(Op::Remove),
        1 => (0u16..600).prop_map(Op::Get),
        1 => (bound(), bound(), any::<bool>()).prop_map(|(l, h, r)| Op::Range(l, h, r)),
    ]
}

/// A key long enough that a few hundred of them need many leaves of a 4 KiB page, and whose
/// bytes order as `k` does.
fn key_of(k: u16) -> Vec<u8> {
    let mut key = k.to_be_bytes().to_vec();
    key.resize(2 + (k as usize % 7) * 9, b'k');
    key
}

fn value_of(k: u16, v: u16) -> Vec<u8> {
    vec![(k ^ v) as u8; v as usize % 61]
}

fn valid_range(low: Bound<u16>, high: Bound<u16>) -> bool {
    // std panics on a range whose start is after its end; skip those.
    match (low, high) {
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => {
            l < h || (l == h && matches!((low, high), (Bound::Included(_), Bound::Included(_))))
        }
        _ => true,
    }
}

fn map_bound(bound: Bound<u16>) -> Bound<Vec<u8>> {
    bound.map(key_of)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_collection_holds_what_std_holds(
        txns in proptest::collection::vec((proptest::collection::vec(op(), 1..120), any::<bool>()), 1..8),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let mut model: StdMap<Vec<u8>, Vec<u8>> = StdMap::new();
        {
            let store = Store::create(&path, options()).unwrap();
            let mut session = store.session().unwrap();
            let mut txn = session.begin().unwrap();
            let map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::create(&mut txn).unwrap();
            txn.set_root("map", map.oid()).unwrap();
            txn.commit().unwrap();
            for (ops, commit) in txns {
                let mut txn = session.begin().unwrap();
                let mut scratch = model.clone();
                for op in ops {
                    match op {
                        Op::Insert(k, v) => {
                            let old = map.insert(&mut txn, &key_of(k), &value_of(k, v)).unwrap();
                            prop_assert_eq!(old, scratch.insert(key_of(k), value_of(k, v)));
                        }
                        Op::InsertRun(first, n, v) => {
                            for k in first..first.saturating_add(n).min(600) {
                                let old = map.insert(&mut txn, &key_of(k), &value_of(k, v)).unwrap();
                                prop_assert_eq!(old, scratch.insert(key_of(k), value_of(k, v)));
                            }
                        }
                        Op::Remove(k) => {
                            prop_assert_eq!(map.remove(&mut txn, &key_of(k)).unwrap(), scratch.remove(&key_of(k)));
                        }
                        Op::Get(k) => {
                            prop_assert_eq!(map.get(&mut txn, &key_of(k)).unwrap(), scratch.get(&key_of(k)).cloned());
                        }
                        Op::Range(low, high, reverse) if valid_range(low, high) => {
                            let range = (map_bound(low), map_bound(high));
                            let expected: Vec<_> = scratch.range(range.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
                            let scan = map.range(&mut txn, range);
                            let got: Vec<_> = if reverse {
                                let mut got: Vec<_> = scan.rev().collect::<Result<_, _>>().unwrap();
                                got.reverse();
                                got
                            } else {
                                scan.collect::<Result<_, _>>().unwrap()
                            };
                            prop_assert_eq!(got, expected);
                        }
                        Op::Range(..) => {}
                    }
                }
                let report = map.check(&mut txn).unwrap();
                prop_assert_eq!(report.entries, scratch.len() as u64);
                prop_assert_eq!(map.len(&mut txn).unwrap(), scratch.len() as u64);
                if commit {
                    txn.commit().unwrap();
                    model = scratch;
                } else {
                    txn.abort().unwrap();
                }
            }
        }
        let store = Store::open(&path, options()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let root = txn.root("map").unwrap().unwrap();
        let map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::open(&mut txn, root).unwrap();
        map.check(&mut txn).unwrap();
        let all: Vec<_> = map.iter(&mut txn).collect::<Result<_, _>>().unwrap();
        let expected: Vec<_> = model.into_iter().collect();
        prop_assert_eq!(all, expected);
    }
}

/// Both ends of one scan meet in the middle without yielding an entry twice.
#[test]
fn a_scan_from_both_ends_yields_each_entry_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let map: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
    // Shuffled, so that leaves are split at many places and the tree has inner levels.
    let mut keys: Vec<u64> = (0..30_000).collect();
    keys.sort_by_key(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for &k in &keys {
        map.insert(&mut txn, &(k * 3), &k).unwrap();
    }
    assert!(map.check(&mut txn).unwrap().height >= 2);
    let all: Vec<u64> = map.keys(&mut txn).collect::<Result<_, _>>().unwrap();
    assert_eq!(all, (0..30_000).map(|k| k * 3).collect::<Vec<_>>());
    let back: Vec<u64> = map.keys(&mut txn).rev().collect::<Result<_, _>>().unwrap();
    assert!(back.iter().rev().eq(all.iter()));
    let mut scan = map.range(&mut txn, 10..=50_000);
    let mut seen = Vec::new();
    loop {
        let front = scan.next().transpose().unwrap();
        let back = scan.next_back().transpose().unwrap();
        seen.extend(front.map(|(k, _)| k));
        seen.extend(back.map(|(k, _)| k));
        if front.is_none() && back.is_none() {
            break;
        }
    }
    seen.sort_unstable();
    let expected: Vec<u64> = all
        .into_iter()
        .filter(|k| (10..=50_000).contains(k))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(map.first(&mut txn).unwrap(), Some((0, 0)));
    assert_eq!(map.last(&mut txn).unwrap(), Some((89_997, 29_999)));
}

/// Inserting in descending order (each split leaves two half-full leaves, so 20,000 keys make
/// three levels) and removing everything leaves one empty leaf, and the pages are freed for
/// reuse.
#[test]
fn removing_every_key_shrinks_the_tree_to_one_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let map: BTreeMap<u32, u128> = BTreeMap::create(&mut txn).unwrap();
    for k in (0..20_000u32).rev() {
        map.insert(&mut txn, &k, &(k as u128)).unwrap();
    }
    let full = map.check(&mut txn).unwrap();
    assert_eq!(full.entries, 20_000);
    assert!(full.height >= 2, "{full:?}");
    txn.commit().unwrap();
    let mut txn = session.begin().unwrap();
    for k in (0..20_000u32).rev() {
        assert_eq!(map.remove(&mut txn, &k).unwrap(), Some(k as u128));
    }
    let empty = map.check(&mut txn).unwrap();
    assert_eq!((empty.entries, empty.nodes, empty.height), (0, 1, 0));
    assert!(map.is_empty(&mut txn).unwrap());
    txn.commit().unwrap();
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Part {
    weight: u64,
}
impl Persistent for Part {
    const TYPE_ID: u32 = 7;
}

/// A map from names to objects, and a set, embedded in an object of the application's.
#[test]
fn maps_of_objects_and_sets() {
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Catalog {
        by_name: BTreeMap<String, Oid<Part>>,
        heavy: BTreeSet<i64>,
    }
    impl Persistent for Catalog {
        const TYPE_ID: u32 = 8;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let catalog = Catalog {
        by_name: BTreeMap::create(&mut txn).unwrap(),
        heavy: BTreeSet::create(&mut txn).unwrap(),
    };
    let catalog = txn.alloc(&catalog).unwrap();
    txn.set_root("catalog", catalog).unwrap();
    for (name, weight) in [("bolt", 3i64), ("anvil", 50), ("nut", 1), ("beam", 400)] {
        let part = txn
            .alloc(&Part {
                weight: weight as u64,
            })
            .unwrap();
        let c = txn.read(catalog).unwrap();
        c.by_name.insert(&mut txn, name, &part).unwrap();
        if weight > 10 {
            assert!(c.heavy.insert(&mut txn, &-weight).unwrap());
        }
    }
    txn.commit().unwrap();

    let mut txn = session.begin().unwrap();
    let c = txn.read(catalog).unwrap();
    let anvil = c.by_name.get(&mut txn, "anvil").unwrap().unwrap();
    assert_eq!(txn.get(anvil).unwrap().weight, 50);
    let names: Vec<String> = c
        .by_name
        .range::<str, _>(&mut txn, (Bound::Included("b"), Bound::Excluded("c")))
        .map(|e| e.unwrap().0)
        .collect();
    assert_eq!(names, ["beam", "bolt"]);
    let heavy: Vec<i64> = c.heavy.iter(&mut txn).collect::<Result<_, _>>().unwrap();
    assert_eq!(heavy, [-400, -50]);
    assert!(!c.heavy.insert(&mut txn, &-50).unwrap());
    assert!(c.heavy.remove(&mut txn, &-400).unwrap());
    assert_eq!(c.heavy.first(&mut txn).unwrap(), Some(-50));
}

/// Bad input: keys over the limit, an OID that is not a collection, a collection opened with
/// the wrong types, a damaged node; each a named error, and the store still usable.
#[test]
fn bad_input_gives_named_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::create(&mut txn).unwrap();
    let key_max = map.key_max(&mut txn).unwrap();
    let value_max = map.value_max(&mut txn).unwrap();
    assert!(key_max >= 400 && value_max >= 400, "{key_max} {value_max}");
    let too_long = vec![1u8; key_max + 1];
    match map.insert(&mut txn, &too_long, &vec![]) {
        Err(Error::EntryTooLong {
            collection,
            what: "key",
            len,
            max,
        }) => {
            assert_eq!((collection, len, max), (map.oid(), key_max + 1, key_max));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        map.insert(&mut txn, &vec![1], &vec![0; value_max + 1]),
        Err(Error::EntryTooLong { what: "value", .. })
    ));
    assert_eq!(map.get(&mut txn, &too_long).unwrap(), None);
    map.insert(&mut txn, &vec![0; key_max], &vec![0; value_max])
        .unwrap();

    let part = txn.alloc(&Part { weight: 1 }).unwrap();
    let err = BTreeMap::<u64, u64>::open(&mut txn, part.raw()).unwrap_err();
    assert!(matches!(err, Error::NotACollection { .. }), "{err}");
    let err = BTreeMap::<u64, u64>::open(&mut txn, map.oid()).unwrap_err();
    assert!(matches!(err, Error::NotACollection { .. }), "{err}");
    assert!(err.to_string().contains("kinds"), "{err}");
    // The collection's objects are the library's: no direct writes or frees.
    assert!(txn.bytes_mut(map.oid()).is_err());
    assert!(txn.free(map.oid()).is_err());
    map.check(&mut txn).unwrap();
    txn.commit().unwrap();
}

/// A collection reads through a read-only transaction as of a snapshot exactly as it was
/// when the snapshot was taken, while the present has moved on, and `check` runs there too.
#[test]
fn a_collection_reads_as_of_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("store"), options().snapshots(true)).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let map: BTreeMap<u32, u64> = BTreeMap::create(&mut txn).unwrap();
    for k in 0..2_000u32 {
        map.insert(&mut txn, &k, &u64::from(k)).unwrap();
    }
    txn.commit().unwrap();
    let snapshot = store.snapshot().unwrap();
    let mut txn = session.begin().unwrap();
    for k in (0..2_000u32).step_by(2) {
        map.remove(&mut txn, &k).unwrap();
    }
    map.insert(&mut txn, &5_000, &1).unwrap();
    txn.commit().unwrap();

    let mut past = session
        .begin_as_of(lodestore::AsOf::Snapshot(snapshot.id))
        .unwrap();
    assert_eq!(map.len(&mut past).unwrap(), 2_000);
    assert_eq!(map.get(&mut past, &10).unwrap(), Some(10));
    assert_eq!(map.get(&mut past, &5_000).unwrap(), None);
    let last: Vec<u32> = map
        .range(&mut past, 1_995..)
        .rev()
        .map(|e| e.map(|(k, _)| k))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(last, [1_999, 1_998, 1_997, 1_996, 1_995]);
    assert_eq!(map.check(&mut past).unwrap().entries, 2_000);
    past.finish().unwrap();

    let mut now = session.begin().unwrap();
    assert_eq!(map.len(&mut now).unwrap(), 1_001);
    assert_eq!(map.get(&mut now, &10).unwrap(), None);
    assert_eq!(map.last(&mut now).unwrap(), Some((5_000, 1)));
    now.abort().unwrap();
}

/// `lodestore::check` walks every collection of a closed store: a sound one is counted in its
/// notes; a node damaged behind the page checksum's back (its bytes changed and the page
/// sealed again) is named with its collection and page.
#[test]
fn check_walks_the_collections_of_a_closed_store() {
    use lodestore::{RealFileSystem, TypeId};
    use lodestore_storage::{OpenMode, Volume};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::create(&path, options()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let map: BTreeMap<u32, u64> = BTreeMap::create(&mut txn).unwrap();
        for k in 0..2_000u32 {
            map.insert(&mut txn, &k, &u64::from(k)).unwrap();
        }
        txn.set_root("map", map.oid()).unwrap();
        txn.commit().unwrap();
    }
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n == "1 collections checked, 2000 entries"),
        "{:?}",
        report.notes
    );

    // A leaf made to claim level 1, its page sealed again so only the tree walk can tell.
    let (node, node_bytes) = {
        let volume = Volume::open(&RealFileSystem, &path, None, OpenMode::ReadOnly).unwrap();
        let mut found = None;
        lodestore_server::inspect::for_each_object(&volume, |object| {
            if object.type_id == TypeId::COLLECTION_NODE && object.bytes[3] == 0 && found.is_none()
            {
                found = Some((object.oid, object.bytes));
            }
            Ok(())
        })
        .unwrap();
        found.expect("a leaf")
    };
    let data = path.join("volume-0.data");
    let mut file = std::fs::read(&data).unwrap();
    let page = &mut file[node.page().0 as usize * PAGE_SIZE..][..PAGE_SIZE];
    let at = page
        .windows(16)
        .position(|w| w == &node_bytes[..16])
        .expect("the node's header on its page");
    page[at + 3] = 1;
    lodestore_storage::page::seal(page);
    std::fs::write(&data, &file).unwrap();
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(!report.is_sound());
    let message = &report.problems[0].message;
    assert!(
        message.contains("collection") && message.contains(&format!("page {}", node.page())),
        "{message}"
    );
}

/// Two maps used in turn in one transaction (each operation finds the other's header in the
/// transaction's copy, or not), one of them growing by root splits, then destroyed: the
/// reads after the destroy find no collection, and its pages are free again.
#[test]
fn maps_used_in_turn_and_destroyed_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let small: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
    let large: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
    for k in (0..30_000u64).rev() {
        large.insert(&mut txn, &k, &(k * 3)).unwrap();
        if k % 100 == 0 {
            small.insert(&mut txn, &k, &k).unwrap();
            assert_eq!(large.get(&mut txn, &k).unwrap(), Some(k * 3));
        }
    }
    assert!(large.check(&mut txn).unwrap().height >= 2);
    assert_eq!(small.len(&mut txn).unwrap(), 300);
    txn.commit().unwrap();

    let mut txn = session.begin().unwrap();
    assert_eq!(large.get(&mut txn, &29_999).unwrap(), Some(89_997));
    large.destroy(&mut txn).unwrap();
    let gone = large.get(&mut txn, &29_999);
    assert!(
        matches!(gone, Err(Error::ObjectNotFound { .. })),
        "a destroyed map read as {gone:?}"
    );
    assert_eq!(small.get(&mut txn, &200).unwrap(), Some(200));
    // The pages the large map had are reused by a new one of the same size.
    let again: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
    for k in 0..30_000u64 {
        again.insert(&mut txn, &k, &k).unwrap();
    }
    assert_eq!(again.get(&mut txn, &12_345).unwrap(), Some(12_345));
    txn.commit().unwrap();
    drop(session);
    drop(store);
    let report = lodestore::check(&lodestore::RealFileSystem, &dir.path().join("s")).unwrap();
    assert!(report.is_sound(), "{report:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any mix of steps from the front and from the back yields each entry of the range
    /// once: the front in ascending order, the back in descending, meeting without overlap.
    #[test]
    fn steps_from_both_ends_in_any_order_meet_exactly(
        keys in proptest::collection::btree_set(0u64..5_000, 0..1_500),
        low in 0u64..5_000,
        len in 0u64..5_000,
        steps in proptest::collection::vec(any::<bool>(), 0..3_000),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path().join("s"), options()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let map: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
        for &k in &keys {
            map.insert(&mut txn, &k, &(k + 1)).unwrap();
        }
        let high = low.saturating_add(len);
        let expected: Vec<u64> = keys.range(low..high).copied().collect();
        let mut scan = map.range(&mut txn, low..high);
        let (mut fronts, mut backs) = (Vec::new(), Vec::new());
        for from_front in steps.into_iter().chain(std::iter::repeat_n(true, expected.len() + 1)) {
            let item = if from_front { scan.next() } else { scan.next_back() };
            match item.transpose().unwrap() {
                Some((k, v)) => {
                    prop_assert_eq!(v, k + 1);
                    if from_front { fronts.push(k) } else { backs.push(k) }
                }
                None if from_front => break,
                None => {}
            }
        }
        prop_assert!(fronts.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(backs.windows(2).all(|w| w[0] > w[1]));
        fronts.extend(backs.into_iter().rev());
        prop_assert_eq!(fronts, expected);
    }
}
