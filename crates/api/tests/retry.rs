//! Transactions that retry themselves: deadlock victims run again until they get through,
//! a transaction that never gets through stops after the attempts allowed and says how many
//! were made, and an error that retrying cannot cure ends it at once.

use lodestore::{Error, Options, PageId, RawOid, RetryPolicy, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TYPE: u32 = 9;
/// Objects of this size each take a page of their own (4 KiB pages).
const ACCOUNT_BYTES: usize = 3000;

fn balance(bytes: &[u8]) -> i64 {
    i64::from_le_bytes(bytes[..8].try_into().unwrap())
}

#[test]
fn deadlock_victims_run_again_until_every_transfer_gets_through() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(Store::create(dir.path().join("s"), Options::new().page_size(4096)).unwrap());
    let accounts: Vec<RawOid> = {
        let mut session = store.session().unwrap();
        session
            .transact(|txn| {
                let mut bytes = vec![0u8; ACCOUNT_BYTES];
                bytes[..8].copy_from_slice(&1000i64.to_le_bytes());
                (0..2).map(|_| txn.alloc_bytes(TYPE, &bytes)).collect()
            })
            .unwrap()
    };
    assert_ne!(accounts[0].page(), accounts[1].page());
    const TRANSFERS: u32 = 40;
    let runs = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..2)
        .map(|me| {
            let (store, runs, accounts) = (store.clone(), runs.clone(), accounts.clone());
            std::thread::spawn(move || {
                let mut session = store.session().unwrap();
                // Opposite orders: each holds one account and waits for the other.
                let (first, second) = if me == 0 {
                    (accounts[0], accounts[1])
                } else {
                    (accounts[1], accounts[0])
                };
                for _ in 0..TRANSFERS {
                    session
                        .transact(|txn| {
                            runs.fetch_add(1, Ordering::Relaxed);
                            let mut from = txn.read_all(first)?;
                            let moved = balance(&from) - 1;
                            from[..8].copy_from_slice(&moved.to_le_bytes());
                            txn.write_at(first, 0, &from[..8])?;
                            std::thread::sleep(Duration::from_micros(200));
                            let mut to = txn.read_all(second)?;
                            let grown = balance(&to) + 1;
                            to[..8].copy_from_slice(&grown.to_le_bytes());
                            txn.write_at(second, 0, &to[..8])
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut session = store.session().unwrap();
    let total: i64 = session
        .transact(|txn| {
            accounts
                .iter()
                .map(|&a| txn.read_all(a).map(|b| balance(&b)))
                .sum()
        })
        .unwrap();
    assert_eq!(total, 2000, "every transfer whole, none twice");
    let deadlocks = store.lock_stats().deadlocks;
    assert!(
        deadlocks > 0,
        "opposite lock orders made no deadlock victim"
    );
    assert!(
        runs.load(Ordering::Relaxed) >= 2 * TRANSFERS,
        "every transfer ran"
    );
    assert_eq!(
        u64::from(runs.load(Ordering::Relaxed) - 2 * TRANSFERS),
        deadlocks + store.lock_stats().timeouts,
        "one more run for each victim"
    );
}

#[test]
fn a_transaction_that_never_gets_through_says_how_many_attempts_were_made() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let commits_before = store.server_stats().commits;
    let policy = RetryPolicy::new()
        .attempts(3)
        .pauses(Duration::from_micros(10), Duration::from_micros(100));
    let mut runs = 0;
    let outcome: lodestore::Result<()> = session.transact_with(&policy, |txn| {
        runs += 1;
        txn.alloc_bytes(TYPE, b"never committed")?;
        Err(Error::Deadlock { page: PageId(7) })
    });
    match outcome {
        Err(Error::RetriesExhausted { attempts, last }) => {
            assert_eq!(attempts, 3);
            assert!(matches!(*last, Error::Deadlock { .. }), "{last}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runs, 3);
    // An error retrying cannot cure ends it at once.
    let mut runs = 0;
    let outcome: lodestore::Result<()> = session.transact(|txn| {
        runs += 1;
        txn.alloc_bytes(TYPE, b"never committed either")?;
        Err(Error::InvalidArgument(
            "the application changed its mind".into(),
        ))
    });
    assert!(matches!(outcome, Err(Error::InvalidArgument(_))));
    assert_eq!(runs, 1);
    // Nothing of either was committed; all four runs were aborted.
    let stats = store.server_stats();
    assert_eq!(stats.commits, commits_before);
    assert!(stats.aborts >= 4, "{stats:?}");
}
