//! The OO1 generator builds what the benchmark specifies; the index finds every part; the
//! operations count what the benchmark predicts.

use indicatif::ProgressBar;
use lodestore::{Oid, Options, Persistent, RealFileSystem, Store};
use lodestore_bench::lists::{read_oid_list, typed};
use lodestore_bench::oo1::schema::{Part, Text};
use lodestore_bench::oo1::{self, index, ops};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::HashMap;

const PARTS: u64 = 2000;

fn build(path: &std::path::Path, seed: u64) -> Store {
    let store = Store::create(path, Options::new()).unwrap();
    oo1::generate(&store, PARTS, seed, &ProgressBar::hidden()).unwrap();
    store
}

#[test]
fn structure_counts_locality_and_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = build(&path, 1);
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let root = ops::root(&mut txn).unwrap();
    assert_eq!(root.parts, PARTS);
    let window = PARTS / 100;
    let (mut close, mut total) = (0u64, 0u64);
    let mut incoming_expected: HashMap<u64, Vec<u64>> = HashMap::new();
    for number in 1..=PARTS {
        let oid = ops::part_by_number(&mut txn, root.index, number).unwrap();
        let part = *txn.get(oid).unwrap();
        assert_eq!(part.id, number);
        for target in part.to {
            let target_part = *txn.get(target).unwrap();
            if target_part.id.abs_diff(number) <= window {
                close += 1;
            }
            total += 1;
            incoming_expected
                .entry(target.raw().0)
                .or_default()
                .push(oid.raw().0);
        }
        for kind in part.connection_kind {
            assert!(txn.get(kind).unwrap().bytes.starts_with(b"conn-type"));
        }
    }
    assert_eq!(total, 3 * PARTS);
    // 90% go to the closest 1%; random ones land there now and then too.
    let share = close as f64 / total as f64;
    assert!((0.88..0.93).contains(&share), "close share {share}");
    for (target, mut sources) in incoming_expected {
        let part = *txn.get(typed::<Part>(target)).unwrap();
        let mut listed = Vec::new();
        read_oid_list(&mut txn, part.incoming, &mut listed).unwrap();
        listed.sort_unstable();
        sources.sort_unstable();
        assert_eq!(listed, sources);
    }
    for missing in [0, PARTS + 1, u64::MAX] {
        assert!(index::lookup(&mut txn, root.index, missing)
            .unwrap()
            .is_none());
    }
    // The index is a sound tree holding one entry per part.
    let tree = root.index.check(&mut txn).unwrap();
    assert_eq!(tree.entries, PARTS);
    assert!(tree.height >= 1, "{tree:?}");
    txn.commit().unwrap();
    drop(session);
    drop(store);

    let mut counts: HashMap<u32, u64> = HashMap::new();
    lodestore::objects(&RealFileSystem, &path, |object| {
        *counts.entry(object.type_id.0).or_default() += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(counts[&Part::TYPE_ID], PARTS);
    assert_eq!(counts[&Text::TYPE_ID], 4 * PARTS);
}

#[test]
fn operations_count_what_the_benchmark_predicts() {
    let dir = tempfile::tempdir().unwrap();
    let store = build(&dir.path().join("store"), 2);
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let root = ops::root(&mut txn).unwrap();
    let numbers: Vec<u64> = (1..=ops::LOOKUP_PARTS as u64)
        .map(|i| i * 7 % PARTS + 1)
        .collect();
    assert_eq!(
        ops::lookup(&mut txn, root.index, &numbers)
            .unwrap()
            .parts_visited,
        1000
    );
    let start = ops::part_by_number(&mut txn, root.index, 77).unwrap();
    let mut rng = StdRng::seed_from_u64(4);
    let read = ops::traverse(&mut txn, start, 0.0, &mut rng).unwrap();
    assert_eq!(read.parts_visited, 3280);
    assert_eq!((read.updates, read.distinct_objects_modified), (0, 0));
    let sum_x = |txn: &mut lodestore::Transaction<'_>| -> i64 {
        (1..=PARTS)
            .map(|n| {
                let oid = ops::part_by_number(txn, root.index, n).unwrap();
                txn.get(oid).unwrap().x as i64
            })
            .sum()
    };
    let x_before = sum_x(&mut txn);
    let all = ops::traverse(&mut txn, start, 1.0, &mut rng).unwrap();
    assert_eq!(all.updates, 3280);
    assert!(all.distinct_objects_modified > 100 && all.distinct_objects_modified < 3280);
    let some = ops::traverse(&mut txn, start, 0.1, &mut StdRng::seed_from_u64(5)).unwrap();
    assert!(some.updates > 200 && some.updates < 500, "{}", some.updates);
    let again = ops::traverse(&mut txn, start, 0.1, &mut StdRng::seed_from_u64(5)).unwrap();
    // The same choices; the checksum differs, as the parts read hold the first one's updates.
    let choices = |c: ops::OpCounts| (c.parts_visited, c.updates, c.distinct_objects_modified);
    assert_eq!(choices(some), choices(again));
    assert_ne!(some.checksum, again.checksum);
    txn.commit().unwrap();
    let mut txn = session.begin().unwrap();
    // Every update committed: x grew by one per update, over all parts.
    let x_after = sum_x(&mut txn);
    assert_eq!(x_after - x_before, (all.updates + 2 * some.updates) as i64);
}

#[test]
fn generation_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let dump = |name: &str, seed: u64| {
        let path = dir.path().join(name);
        drop(build(&path, seed));
        let mut objects = Vec::new();
        lodestore::objects(&RealFileSystem, &path, |object| {
            objects.push((object.oid.0, object.bytes));
            Ok(())
        })
        .unwrap();
        objects
    };
    let first = dump("a", 8);
    assert_eq!(first, dump("b", 8));
    assert_ne!(first, dump("c", 9));
}

#[test]
fn too_small_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let err = oo1::generate(&store, 3, 1, &ProgressBar::hidden()).unwrap_err();
    assert!(err.to_string().contains("at least 10 parts"), "{err}");
    let _: Oid<Part> = Oid::NULL;
}
