//! A closed session's cache goes to the next session of its store with its pages: the next
//! session finds them without fetching, and a page another session changed meanwhile is
//! fetched again, never read stale.

use bytemuck::{Pod, Zeroable};
use lodestore::{Oid, Options, Persistent, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Counter {
    id: u64,
    value: u64,
    padding: [u64; 30],
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 1;
}

const OBJECTS: u64 = 2_000;

fn counter(id: u64, value: u64) -> Counter {
    Counter {
        id,
        value,
        padding: [id; 30],
    }
}

/// A new store holding [`OBJECTS`] counters of value 1, and their OIDs.
fn store_with_counters() -> (tempfile::TempDir, Store, Vec<Oid<Counter>>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("store"), Options::new()).unwrap();
    let oids = create(&store);
    (dir, store, oids)
}

fn create(store: &Store) -> Vec<Oid<Counter>> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oids = (0..OBJECTS)
        .map(|id| txn.alloc(&counter(id, 1)).unwrap())
        .collect();
    txn.commit().unwrap();
    oids
}

fn read_all(session: &mut lodestore::Session, oids: &[Oid<Counter>]) -> Vec<u64> {
    let mut txn = session.begin().unwrap();
    let values = oids
        .iter()
        .map(|&oid| txn.get(oid).unwrap().value)
        .collect();
    txn.commit().unwrap();
    values
}

#[test]
fn the_next_session_reads_a_closed_sessions_pages_without_fetching_them() {
    // The session that creates the objects closes with every page of them cached, and the
    // locks of the pages it wrote kept: they go on with the pages.
    let (_dir, store, oids) = store_with_counters();
    let mut next = store.session().unwrap();
    assert!(read_all(&mut next, &oids).iter().all(|&v| v == 1));
    let stats = next.stats();
    assert_eq!(stats.pages_fetched, 0, "every page came with the cache");
    assert_eq!(stats.cache_revalidations, 0);
    let pages = OBJECTS * std::mem::size_of::<Counter>() as u64 / 8192;
    assert_eq!(
        stats.lock_requests, 0,
        "every page read under a handed-on lock"
    );
    assert!(stats.kept_lock_hits >= pages, "{stats:?}");
}

#[test]
fn without_kept_locks_the_next_session_validates_each_page_under_a_lock() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().keep_read_locks(false);
    let store = Store::create(dir.path().join("store"), options).unwrap();
    let oids = create(&store);
    let mut next = store.session().unwrap();
    assert!(read_all(&mut next, &oids).iter().all(|&v| v == 1));
    let stats = next.stats();
    assert_eq!(stats.pages_fetched, 0, "every page came with the cache");
    assert_eq!(stats.cache_revalidations, 0);
    assert_eq!(stats.kept_lock_hits, 0);
    let pages = OBJECTS * std::mem::size_of::<Counter>() as u64 / 8192;
    assert!(
        stats.lock_requests >= pages,
        "each validated under its lock"
    );
}

#[test]
fn a_kept_page_another_session_changed_is_fetched_again() {
    let (_dir, store, oids) = store_with_counters();
    // The reader caches every page, then a writer changes every object and both close: the
    // store keeps both caches, the reader's holding every page as it was before the writer.
    let mut reader = store.session().unwrap();
    assert!(read_all(&mut reader, &oids).iter().all(|&v| v == 1));
    let mut writer = store.session().unwrap();
    writer
        .transact(|txn| {
            for &oid in &oids {
                txn.get_mut(oid)?.value = 2;
            }
            Ok(())
        })
        .unwrap();
    drop(writer);
    drop(reader);
    // Two new sessions take both kept caches: each reads what the writer committed.
    let mut sessions = [store.session().unwrap(), store.session().unwrap()];
    let mut revalidated = 0;
    for session in &mut sessions {
        let values = read_all(session, &oids);
        assert!(values.iter().all(|&v| v == 2), "a stale page was read");
        assert_eq!(
            session.stats().pages_fetched,
            session.stats().cache_revalidations
        );
        revalidated += session.stats().cache_revalidations;
    }
    assert!(
        revalidated > 10,
        "the reader's stale pages were caught: {revalidated}"
    );
}

#[test]
fn a_session_ended_in_a_transaction_hands_on_no_pages_it_changed() {
    let (_dir, store, oids) = store_with_counters();
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        for &oid in &oids {
            txn.get_mut(oid).unwrap().value = 3;
        }
        // Dropped without a commit: rolled back as the session closes.
        drop(txn);
    }
    let mut next = store.session().unwrap();
    assert!(read_all(&mut next, &oids).iter().all(|&v| v == 1));
}

/// Sessions opened, used and closed in a seeded order, each transaction a batch of updates
/// (some rolled back) or a read of every object against a model of what was committed: kept
/// caches change hands all the time, and no session ever reads a page stale.
#[test]
fn sessions_that_come_and_go_read_what_was_committed() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    for seed in 0..4u64 {
        let (_dir, store, oids) = store_with_counters();
        let mut model = vec![1u64; oids.len()];
        let mut rng = StdRng::seed_from_u64(seed);
        let mut slots: Vec<Option<lodestore::Session>> = (0..3).map(|_| None).collect();
        let mut revalidated = 0;
        for step in 0..200u64 {
            let slot = rng.random_range(0..slots.len());
            let session = slots[slot].get_or_insert_with(|| store.session().unwrap());
            match rng.random_range(0..10) {
                0..=3 => {
                    let commit = rng.random_bool(0.8);
                    let mut txn = session.begin().unwrap();
                    let mut changed = Vec::new();
                    for _ in 0..rng.random_range(1..50) {
                        let i = rng.random_range(0..oids.len());
                        let value = step * 1_000 + i as u64;
                        txn.get_mut(oids[i]).unwrap().value = value;
                        changed.push((i, value));
                    }
                    if commit {
                        txn.commit().unwrap();
                        for (i, value) in changed {
                            model[i] = value;
                        }
                    } else {
                        txn.abort().unwrap();
                    }
                }
                4..=7 => {
                    let values = read_all(session, &oids);
                    assert_eq!(values, model, "seed {seed}, step {step}: a stale read");
                }
                _ => {
                    let session = slots[slot].take().expect("opened above");
                    revalidated += session.stats().cache_revalidations;
                }
            }
        }
        assert!(revalidated > 0, "seed {seed}: no kept page was ever stale");
    }
}
