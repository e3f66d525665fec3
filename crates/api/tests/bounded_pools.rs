//! A store much larger than both buffer pools: every page passes through eviction on both sides,
//! and one transaction dirties far more pages than the client cache holds.

use lodestore::{Options, RawOid, RealFileSystem, Store};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

const PAGE_SIZE: usize = 4096;
const POOL_PAGES: usize = 8;
const OBJECTS: usize = 1000;
const OBJECT_BYTES: usize = 700;

fn content(index: usize, round: u8) -> Vec<u8> {
    (0..OBJECT_BYTES)
        .map(|i| (i as u8).wrapping_mul(3) ^ (index as u8) ^ round)
        .collect()
}

fn options() -> Options {
    Options::new()
        .page_size(PAGE_SIZE)
        .client_cache_bytes(POOL_PAGES * PAGE_SIZE)
        .server_pool_bytes(POOL_PAGES * PAGE_SIZE)
}

fn verify_all(store: &Store, oids: &[RawOid], round: u8, seed: u64) {
    let mut order: Vec<usize> = (0..oids.len()).collect();
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for i in order {
        assert_eq!(
            txn.bytes(oids[i]).unwrap(),
            &content(i, round)[..],
            "object {i}"
        );
    }
    txn.commit().unwrap();
    assert!(session.stats().evictions > 0, "client cache never evicted");
}

#[test]
fn store_four_times_larger_than_both_pools() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, options()).unwrap();
    let mut session = store.session().unwrap();
    let mut oids = Vec::with_capacity(OBJECTS);
    for chunk in 0..10 {
        let mut txn = session.begin().unwrap();
        for i in chunk * 100..(chunk + 1) * 100 {
            oids.push(txn.alloc_bytes(5, &content(i, 0)).unwrap());
        }
        txn.commit().unwrap();
    }
    let data_pages = store.info().unwrap().pages_by_kind["slotted"] as usize;
    assert!(
        data_pages >= 4 * POOL_PAGES * 4,
        "{data_pages} data pages is not 4x the pools"
    );
    verify_all(&store, &oids, 0, 1);

    // One transaction rewrites every object: it dirties ~20x the client cache, so dirty pages
    // leave the cache mid-transaction and come back from the server with the changes intact.
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        txn.bytes_mut(oid).unwrap().copy_from_slice(&content(i, 1));
    }
    for (i, &oid) in oids.iter().enumerate().step_by(7) {
        assert_eq!(txn.bytes(oid).unwrap(), &content(i, 1)[..], "own write {i}");
    }
    txn.commit().unwrap();
    assert!(session.stats().pages_shipped as usize > data_pages);
    verify_all(&store, &oids, 1, 2);
    assert!(
        store.server_stats().pool_evictions > 0,
        "server pool never evicted"
    );

    // The same again, aborted: nothing of it may remain.
    let mut txn = session.begin().unwrap();
    for &oid in &oids {
        txn.bytes_mut(oid).unwrap().fill(0xEE);
    }
    txn.abort().unwrap();
    verify_all(&store, &oids, 1, 3);

    drop(session);
    drop(store);
    let store = Store::open(&path, options()).unwrap();
    verify_all(&store, &oids, 1, 4);
    drop(store);
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
}

/// Sessions that miss the server pool read the data file without the server's lock, side by
/// side. Transfers between counters spread over many more pages than the pool holds, from
/// several threads under each recovery method, with every page read again and again: a
/// reader that installed a stale copy (one the page's writer had changed meanwhile) would make
/// the total drift. Each thread also checks the total inside its own transactions now and
/// then.
#[test]
fn concurrent_misses_read_side_by_side_and_install_no_stale_page() {
    use lodestore::RecoveryMethodKind;
    use rand::Rng;
    const COUNTERS: usize = 400;
    const START: i64 = 1_000;
    for method in [RecoveryMethodKind::Esm, RecoveryMethodKind::Wpl] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path().join("s"), options().recovery_method(method)).unwrap();
        // One counter of 300 bytes: about 13 to a page, 30 pages against a pool of 8.
        let oids: Vec<RawOid> = store
            .session()
            .unwrap()
            .transact(|txn| {
                (0..COUNTERS)
                    .map(|_| {
                        let oid = txn.alloc_zeroed(5, 300)?;
                        txn.write_at(oid, 0, &START.to_le_bytes())?;
                        Ok(oid)
                    })
                    .collect()
            })
            .unwrap();
        let read = |txn: &mut lodestore::Transaction<'_>, oid: RawOid| -> lodestore::Result<i64> {
            let mut b = [0u8; 8];
            txn.read_at(oid, 0, &mut b)?;
            Ok(i64::from_le_bytes(b))
        };
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (store, oids) = (&store, &oids);
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    let mut session = store.session().unwrap();
                    let mut done = 0;
                    while done < 150 {
                        let outcome = session.transact(|txn| {
                            if rng.random_range(0..10) == 0 {
                                let mut total = 0;
                                for &oid in oids {
                                    total += read(txn, oid)?;
                                }
                                assert_eq!(total, START * COUNTERS as i64);
                                return Ok(());
                            }
                            let (a, b) =
                                (rng.random_range(0..COUNTERS), rng.random_range(0..COUNTERS));
                            let (x, y) = (read(txn, oids[a])?, read(txn, oids[b])?);
                            if a != b {
                                txn.write_at(oids[a], 0, &(x - 3).to_le_bytes())?;
                                txn.write_at(oids[b], 0, &(y + 3).to_le_bytes())?;
                            }
                            Ok(())
                        });
                        match outcome {
                            Ok(()) => done += 1,
                            Err(e) if e.is_retryable() => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
        });
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let total: i64 = oids.iter().map(|&oid| read(&mut txn, oid).unwrap()).sum();
        assert_eq!(total, START * COUNTERS as i64, "{method:?}");
        txn.commit().unwrap();
        assert!(
            store.server_stats().pool_evictions > 0,
            "the pool never evicted"
        );
    }
}
