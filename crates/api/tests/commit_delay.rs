//! The adaptive commit delay (`Options::commit_delay`): a committing transaction waits before
//! its log sync only while enough other transactions are active, and an option out of range
//! is refused by name.

use lodestore::{Error, Options, Store};
use std::time::{Duration, Instant};

const DELAY: Duration = Duration::from_millis(100);

fn timed_commit(store: &Store) -> Duration {
    let mut session = store.session().unwrap();
    let started = Instant::now();
    session
        .transact(|txn| txn.alloc_bytes(1, &[7u8; 64]).map(|_| ()))
        .unwrap();
    started.elapsed()
}

#[test]
fn a_commit_waits_the_delay_when_enough_other_transactions_are_active() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().commit_delay(DELAY).commit_siblings(3);
    let store = Store::create(dir.path().join("store"), options).unwrap();
    // Three other sessions with transactions open: siblings enough.
    let mut others: Vec<_> = (0..3).map(|_| store.session().unwrap()).collect();
    let open: Vec<_> = others.iter_mut().map(|s| s.begin().unwrap()).collect();
    let waited = timed_commit(&store);
    assert!(
        waited >= DELAY,
        "the commit took {waited:?}, less than the delay"
    );
    for txn in open {
        txn.abort().unwrap();
    }
    drop(others);
    store.close().unwrap();
}

#[test]
fn a_delay_past_its_limit_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new().commit_delay(Duration::from_secs(1));
    match Store::create(dir.path().join("store"), options) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("commit_delay"), "{message}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}
