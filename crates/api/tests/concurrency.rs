//! Sessions on different threads: strict two-phase locking, deadlock detection that aborts one
//! transaction with a retryable error, and the other finishing.

use lodestore::{Error, Options, Store};
use std::sync::{Arc, Barrier};

#[test]
fn crossing_updates_deadlock_one_and_the_other_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::create(dir.path().join("s"), Options::new()).unwrap());
    // Objects larger than half a page: each on a page of its own.
    let (a, b) = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let a = txn.alloc_zeroed(1, 5000).unwrap();
        let b = txn.alloc_zeroed(1, 5000).unwrap();
        txn.commit().unwrap();
        (a, b)
    };
    assert_ne!(a.page(), b.page());
    let barrier = Arc::new(Barrier::new(2));
    let run = |first, second, value: u8| {
        let (store, barrier) = (store.clone(), barrier.clone());
        std::thread::spawn(move || -> Result<(), Error> {
            let mut session = store.session()?;
            let mut txn = session.begin()?;
            txn.write_at(first, 0, &[value])?;
            barrier.wait();
            match txn.write_at(second, 0, &[value]) {
                Ok(()) => {
                    txn.commit()?;
                    Ok(())
                }
                Err(e) => {
                    txn.abort()?;
                    Err(e)
                }
            }
        })
    };
    let one = run(a, b, 1);
    let two = run(b, a, 2);
    let results = [one.join().unwrap(), two.join().unwrap()];
    let failed: Vec<&Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(failed.len(), 1, "exactly one victim: {results:?}");
    assert!(matches!(failed[0], Error::Deadlock { .. }), "{}", failed[0]);
    assert!(failed[0].is_retryable());
    // The survivor's writes are both there; the victim left no trace.
    let winner = if results[0].is_ok() { 1u8 } else { 2u8 };
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let mut byte = [0u8];
    txn.read_at(a, 0, &mut byte).unwrap();
    assert_eq!(byte[0], winner);
    txn.read_at(b, 0, &mut byte).unwrap();
    assert_eq!(byte[0], winner);
}

#[test]
fn readers_share_writers_wait_for_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::create(dir.path().join("s"), Options::new()).unwrap());
    let oid = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(1, &[0u8; 8]).unwrap();
        txn.commit().unwrap();
        oid
    };
    let mut writer_session = store.session().unwrap();
    let mut writer = writer_session.begin().unwrap();
    writer.write_at(oid, 0, &[7u8; 8]).unwrap();
    // A reader blocks on the writer's exclusive lock until the writer commits.
    let reader = {
        let store = store.clone();
        std::thread::spawn(move || {
            let mut session = store.session().unwrap();
            let mut txn = session.begin().unwrap();
            txn.read_all(oid).unwrap()
        })
    };
    // Wait until the reader is blocked on the lock (bounded), then check it really is.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.lock_stats().waits == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader never waited for the writer's lock"
        );
        std::thread::yield_now();
    }
    assert!(
        !reader.is_finished(),
        "the reader finished while the writer held the lock"
    );
    writer.commit().unwrap();
    assert_eq!(
        reader.join().unwrap(),
        vec![7u8; 8],
        "the reader saw uncommitted or old data"
    );
}
