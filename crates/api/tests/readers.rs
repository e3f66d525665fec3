//! Readers that never block writers (`Store::read_latest`): a long reader sees one committed
//! state throughout while writers keep committing next to it, and leaves no snapshot behind.

mod common;

use lodestore::{BTreeMap, Error, Options, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 2_000;
const BALANCE: u64 = 1_000;

fn bank(store: &Store) -> BTreeMap<u64, u64> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let accounts: BTreeMap<u64, u64> = BTreeMap::create(&mut txn).unwrap();
    for a in 0..ACCOUNTS {
        accounts.insert(&mut txn, &a, &BALANCE).unwrap();
    }
    txn.set_root("accounts", accounts.oid()).unwrap();
    txn.commit().unwrap();
    accounts
}

#[test]
fn a_long_reader_sees_one_state_while_writers_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        Arc::new(Store::create(dir.path().join("store"), Options::new().snapshots(true)).unwrap());
    let accounts = bank(&store);
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let (store, stop, commits) = (store.clone(), stop.clone(), commits.clone());
            std::thread::spawn(move || {
                let mut session = store.session().unwrap();
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    // A transfer between two accounts: the total never changes.
                    let (from, to) = ((i * 7) % ACCOUNTS, (i * 13 + 1) % ACCOUNTS);
                    i += 2;
                    if from == to {
                        continue;
                    }
                    let done = session.transact(|txn| {
                        let a = accounts.get(txn, &from)?.unwrap();
                        let b = accounts.get(txn, &to)?.unwrap();
                        if a > 0 {
                            accounts.insert(txn, &from, &(a - 1))?;
                            accounts.insert(txn, &to, &(b + 1))?;
                        }
                        Ok(())
                    });
                    match done {
                        Ok(()) => {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
            })
        })
        .collect();

    let mut session = store.session().unwrap();
    let (scans, commits_during) = store
        .read_latest(&mut session, |txn| {
            let started = commits.load(Ordering::Relaxed);
            let first: Vec<(u64, u64)> = accounts.iter(txn).collect::<Result<_, _>>()?;
            assert_eq!(first.len() as u64, ACCOUNTS);
            assert_eq!(
                first.iter().map(|(_, b)| b).sum::<u64>(),
                ACCOUNTS * BALANCE
            );
            let mut scans = 1;
            let deadline = Instant::now() + Duration::from_millis(600);
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
                let again: Vec<(u64, u64)> = accounts.iter(txn).collect::<Result<_, _>>()?;
                assert_eq!(again, first, "the reader's state moved");
                scans += 1;
            }
            Ok((scans, commits.load(Ordering::Relaxed) - started))
        })
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    assert!(scans > 3);
    // The writers went on while the reader held its state: it blocked none of them.
    assert!(
        commits_during > 20,
        "{commits_during} commits next to the reader"
    );
    assert!(
        store.snapshots().unwrap().is_empty(),
        "the reader's snapshot is gone"
    );

    // The next reader sees what the writers committed meanwhile, and the total still holds.
    let total = store
        .read_latest(&mut session, |txn| {
            let mut total = 0;
            for entry in accounts.iter(txn) {
                total += entry?.1;
            }
            Ok(total)
        })
        .unwrap();
    assert_eq!(total, ACCOUNTS * BALANCE);
}

#[test]
fn a_reader_of_a_store_without_snapshots_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("store"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let err = store.read_latest(&mut session, |_| Ok(())).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(
        err.to_string().contains("Options::snapshots(true)"),
        "{err}"
    );
}

/// Over TCP a reader of the latest state works as it does embedded: it sees what was
/// committed before it, not a commit made while it reads, and leaves no snapshot behind.
#[test]
fn a_remote_reader_of_the_latest_state() {
    let served = common::Served::new(Options::new().snapshots(true));
    let address = served.address.clone();
    let remote = Store::connect(&address, Options::new()).unwrap();
    let accounts = bank(&remote);
    let mut reader = remote.session().unwrap();
    let mut writer = remote.session().unwrap();
    let seen = remote
        .read_latest(&mut reader, |txn| {
            // A commit while the reader reads: the reader does not see it.
            let mut w = writer.begin()?;
            accounts.insert(&mut w, &0, &7)?;
            w.commit()?;
            accounts.get(txn, &0)
        })
        .unwrap();
    assert_eq!(seen, Some(BALANCE));
    let after = remote
        .read_latest(&mut reader, |txn| accounts.get(txn, &0))
        .unwrap();
    assert_eq!(after, Some(7));
    assert!(remote.snapshots().unwrap().is_empty());
    drop((reader, writer, remote));
    served.stop();
}
