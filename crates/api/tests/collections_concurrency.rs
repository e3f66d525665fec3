//! Concurrent inserts into one collection: every insert lands once, the tree stays sound, and
//! the run says how many transactions had to be rerun (lock conflicts on leaves and splits),
//! next to the same work spread over one collection per thread.
//!
//! `cargo test --release -p lodestore --test collections_concurrency -- --nocapture` prints the
//! measurement (docs/BENCHMARKS.md).

use lodestore::{BTreeMap, Options, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const THREADS: u64 = 4;
const TXNS_PER_THREAD: u64 = 300;
const KEYS_PER_TXN: u64 = 4;

/// Runs the inserts; returns (seconds, attempts made) after checking every map.
fn run(shared: bool) -> (f64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let maps: Vec<BTreeMap<u64, u64>> = session
        .transact(|txn| {
            (0..if shared { 1 } else { THREADS })
                .map(|_| BTreeMap::create(txn))
                .collect()
        })
        .unwrap();
    let attempts = AtomicU64::new(0);
    // Most attempts one transaction needed: a rerun takes the tree whole, so two at most.
    let most = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (store, maps, attempts, most) = (&store, &maps, &attempts, &most);
            scope.spawn(move || {
                let map = maps[if shared { 0 } else { t as usize }];
                let mut session = store.session().unwrap();
                for n in 0..TXNS_PER_THREAD {
                    let mut mine = 0;
                    session
                        .transact(|txn| {
                            mine += 1;
                            attempts.fetch_add(1, Ordering::Relaxed);
                            for k in 0..KEYS_PER_TXN {
                                let i = (t * TXNS_PER_THREAD + n) * KEYS_PER_TXN + k;
                                // Spread over the key space, so threads share leaves rarely.
                                let key = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                                map.insert(txn, &key, &i)?;
                            }
                            Ok(())
                        })
                        .unwrap();
                    most.fetch_max(mine, Ordering::Relaxed);
                }
            });
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut txn = session.begin().unwrap();
    let mut total = 0;
    for map in &maps {
        total += map.check(&mut txn).unwrap().entries;
    }
    assert_eq!(total, THREADS * TXNS_PER_THREAD * KEYS_PER_TXN);
    assert!(
        most.load(Ordering::Relaxed) <= 2,
        "a transaction needed {} attempts, though a rerun has the tree to itself",
        most.load(Ordering::Relaxed)
    );
    (seconds, attempts.load(Ordering::Relaxed))
}

#[test]
fn concurrent_inserts_into_one_tree_all_land() {
    let txns = THREADS * TXNS_PER_THREAD;
    for shared in [true, false] {
        let (seconds, attempts) = run(shared);
        println!(
            "{} threads, {}: {txns} transactions of {KEYS_PER_TXN} inserts in {seconds:.2} s \
             ({:.0} commits/s), {} reruns ({:.1}%)",
            THREADS,
            if shared {
                "one shared map"
            } else {
                "a map each"
            },
            txns as f64 / seconds,
            attempts - txns,
            100.0 * (attempts - txns) as f64 / txns as f64
        );
        assert!(attempts >= txns);
    }
}
