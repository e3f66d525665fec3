//! Shared page locks a session keeps between its transactions: a page read before is read
//! again without a lock request, a writer in another session calls the lock back (at once when
//! the session is idle, at the end of its transaction when it is reading the page), and no
//! reader ever sees a page stale or a state no serial order of the transactions gives.

use bytemuck::{Pod, Zeroable};
use lodestore::{Error, Oid, Options, Persistent, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Counter {
    value: u64,
    padding: [u64; 64],
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 1;
}

/// Fifteen counters to a page of 8 KiB: several pages.
const COUNTERS: u64 = 64;
const START: u64 = 100;

fn store(options: Options) -> (tempfile::TempDir, Store, Vec<Oid<Counter>>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("store"), options).unwrap();
    let oids = {
        let mut session = store.session().unwrap();
        session
            .transact(|txn| {
                (0..COUNTERS)
                    .map(|_| {
                        txn.alloc(&Counter {
                            value: START,
                            padding: [0; 64],
                        })
                    })
                    .collect()
            })
            .unwrap()
    };
    (dir, store, oids)
}

fn values(session: &mut lodestore::Session, oids: &[Oid<Counter>]) -> Vec<u64> {
    session
        .transact(|txn| oids.iter().map(|&oid| Ok(txn.get(oid)?.value)).collect())
        .unwrap()
}

/// Sets `oid`'s value in a transaction of `session`.
fn set(session: &mut lodestore::Session, oid: Oid<Counter>, value: u64) {
    session
        .transact(|txn| {
            txn.get_mut(oid)?.value = value;
            Ok(())
        })
        .unwrap();
}

#[test]
fn pages_read_before_are_read_again_without_lock_requests() {
    for keep in [true, false] {
        let (_dir, store, oids) = store(Options::new().keep_read_locks(keep));
        let mut session = store.session().unwrap();
        values(&mut session, &oids);
        let first = session.stats();
        assert_eq!(session.kept_locks() > 0, keep);
        values(&mut session, &oids);
        let second = session.stats();
        let requests = second.lock_requests - first.lock_requests;
        let hits = second.kept_lock_hits - first.kept_lock_hits;
        if keep {
            assert_eq!(requests, 0, "every page was kept");
            assert!(hits >= 4, "{hits} pages read under kept locks");
        } else {
            assert!(requests >= 4, "{requests} lock requests");
            assert_eq!(hits, 0);
        }
    }
}

#[test]
fn pages_a_transaction_wrote_are_read_in_the_next_without_lock_requests() {
    let (_dir, store, oids) = store(Options::new());
    let mut writer = store.session().unwrap();
    writer
        .transact(|txn| {
            for &oid in &oids {
                txn.get_mut(oid)?.value += 1;
            }
            Ok(())
        })
        .unwrap();
    let before = writer.stats();
    assert!(values(&mut writer, &oids).iter().all(|&v| v == START + 1));
    let after = writer.stats();
    assert_eq!(
        after.lock_requests, before.lock_requests,
        "its commit kept the locks of the pages it wrote"
    );
    assert!(after.kept_lock_hits - before.kept_lock_hits >= 4);
    // Another session's write calls one back: the writer reads what that one committed.
    let mut other = store.session().unwrap();
    set(&mut other, oids[0], 7);
    let seen = values(&mut writer, &oids);
    assert_eq!(seen[0], 7, "a page written and kept was read stale");
    assert!(seen[1..].iter().all(|&v| v == START + 1));
    // A write rolled back keeps no lock: the page is locked and checked again.
    {
        let mut txn = writer.begin().unwrap();
        txn.get_mut(oids[1]).unwrap().value = 99;
    }
    let before = writer.stats();
    let seen = values(&mut writer, &oids);
    assert_eq!(seen[1], START + 1, "a rolled-back write was read");
    assert!(writer.stats().lock_requests > before.lock_requests);
}

#[test]
fn a_closed_sessions_kept_locks_go_to_its_next_session_and_writers_call_them_back() {
    let (_dir, store, oids) = store(Options::new());
    // The session that created the counters closed; its locks came with its pages.
    let mut first = store.session().unwrap();
    assert!(values(&mut first, &oids).iter().all(|&v| v == START));
    assert_eq!(first.stats().lock_requests, 0, "{:?}", first.stats());
    assert!(first.kept_locks() > 0);
    // A writer of a cache of its own, while the first session's locks wait for the next.
    let mut writer = store.session().unwrap();
    drop(first);
    let before = store.lock_stats();
    set(&mut writer, oids[0], START + 5);
    let after = store.lock_stats();
    assert!(
        after.callbacks > before.callbacks,
        "called back from the spare cache"
    );
    assert_eq!(after.waits, before.waits);
    drop(writer);
    // Whichever cache the next sessions take, they read what was committed.
    for _ in 0..2 {
        let mut next = store.session().unwrap();
        let seen = values(&mut next, &oids);
        assert_eq!(seen[0], START + 5, "a called-back page was read stale");
        assert!(seen[1..].iter().all(|&v| v == START));
    }
    // Locks waiting in the spare caches do not keep the store from closing.
    store.close().unwrap();
}

#[test]
fn a_writer_calls_back_an_idle_sessions_locks_and_the_session_reads_the_new_values() {
    let (_dir, store, oids) = store(Options::new());
    let mut reader = store.session().unwrap();
    assert!(values(&mut reader, &oids).iter().all(|&v| v == START));
    let kept = reader.kept_locks();
    assert!(kept > 0);
    let mut writer = store.session().unwrap();
    let before = store.lock_stats();
    set(&mut writer, oids[0], START + 1);
    // Not held up by the reader's kept lock: called back, nobody waited.
    let after = store.lock_stats();
    assert_eq!(after.callbacks - before.callbacks, 1);
    assert_eq!(after.waits, before.waits);
    assert_eq!(reader.kept_locks(), kept - 1, "one page called back");
    let after = values(&mut reader, &oids);
    assert_eq!(after[0], START + 1, "the changed page was read stale");
    assert!(after[1..].iter().all(|&v| v == START));
}

#[test]
fn a_writer_waits_for_the_transaction_reading_a_kept_page() {
    let (_dir, store, oids) = store(Options::new());
    let store = Arc::new(store);
    let mut reader = store.session().unwrap();
    values(&mut reader, &oids);
    let blocked_before = store.lock_stats().requests_blocked;
    let mut txn = reader.begin().unwrap();
    assert_eq!(txn.get(oids[0]).unwrap().value, START);
    let wrote = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, oid, wrote) = (store.clone(), oids[0], wrote.clone());
        std::thread::spawn(move || {
            let mut session = store.session().unwrap();
            session
                .transact(|txn| {
                    txn.get_mut(oid)?.value = START + 7;
                    Ok(())
                })
                .unwrap();
            wrote.store(true, Ordering::SeqCst);
        })
    };
    // The writer's request waits (the reader's transaction relies on the kept lock).
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.lock_stats().requests_blocked == blocked_before {
        assert!(Instant::now() < deadline, "the writer never waited");
        std::thread::yield_now();
    }
    assert!(!wrote.load(Ordering::SeqCst), "the writer did not wait");
    // Read again in the same transaction: unchanged.
    assert_eq!(txn.get(oids[0]).unwrap().value, START);
    txn.commit().unwrap();
    writer.join().unwrap();
    assert!(wrote.load(Ordering::SeqCst));
    assert_eq!(values(&mut reader, &oids)[0], START + 7);
}

/// Writers move amounts between counters while readers sum them all, every session keeping
/// its locks: each reader's sum is the same in every transaction, and so is the final one.
#[test]
fn readers_keeping_locks_see_only_committed_states_while_writers_move_amounts() {
    let (_dir, store, oids) = store(Options::new().lock_wait_timeout(Duration::from_secs(2)));
    let store = Arc::new(store);
    let oids = Arc::new(oids);
    let total = START * COUNTERS;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (store, oids, stop) = (store.clone(), oids.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut session = store.session().unwrap();
                let mut i = w * 7;
                let mut moved = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let from = oids[(i * 13 % COUNTERS) as usize];
                    let to = oids[(i * 29 % COUNTERS) as usize];
                    if from == to {
                        continue;
                    }
                    let outcome = session.transact(|txn| {
                        txn.get_mut(from)?.value -= 1;
                        txn.get_mut(to)?.value += 1;
                        Ok(())
                    });
                    match outcome {
                        Ok(()) => moved += 1,
                        // Readers and writers in conflict: a victim, even ten times over.
                        Err(Error::RetriesExhausted { .. }) => {}
                        Err(e) => panic!("a transfer failed: {e}"),
                    }
                }
                moved
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, oids, stop) = (store.clone(), oids.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut session = store.session().unwrap();
                let mut sums = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let outcome = session.transact(|txn| {
                        oids.iter()
                            .map(|&oid| Ok(txn.get(oid)?.value))
                            .sum::<lodestore::Result<u64>>()
                    });
                    match outcome {
                        Ok(sum) => {
                            assert_eq!(sum, total, "a reader saw a state no serial order gives");
                            sums += 1;
                        }
                        Err(Error::RetriesExhausted { .. }) => {}
                        Err(e) => panic!("a reader failed: {e}"),
                    }
                }
                (sums, session.stats().kept_lock_hits)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let moved: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    let mut hits = 0;
    for reader in readers {
        let (sums, reader_hits) = reader.join().unwrap();
        assert!(sums > 0);
        hits += reader_hits;
    }
    assert!(moved > 0);
    assert!(hits > 0, "no page was read under a kept lock");
    let mut session = store.session().unwrap();
    assert_eq!(values(&mut session, &oids).iter().sum::<u64>(), total);
}
