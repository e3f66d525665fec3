//! `Transaction::commit_deferred`: the commit is appended but acknowledged only by
//! `PendingCommit::wait`. Until then the transaction keeps its locks, a crash may drop the
//! commit whole, and several deferred commits share one flush of the log.

use lodestore::{Error, Oid, Options, Persistent, Store};
use lodestore_storage::{Fault, SimFileSystem};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Counter {
    value: u64,
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 78;
}

fn options(fs: &Arc<SimFileSystem>) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
        .lock_wait_timeout(Duration::from_millis(20))
}

fn root_value(store: &Store, name: &str) -> Option<u64> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.root(name).unwrap()?;
    Some(txn.get(Oid::<Counter>::from_raw(oid)).unwrap().value)
}

/// Commits a root `name` holding `value`, deferred; waits only when `wait`.
fn set_counter(store: &Store, name: &str, value: u64, wait: bool) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.alloc(&Counter { value }).unwrap();
    txn.set_root(name, oid).unwrap();
    let pending = txn.commit_deferred().unwrap();
    if wait {
        pending.wait().unwrap();
    } else {
        // Neither dropped (which waits) nor waited for: the machine dies first.
        std::mem::forget(pending);
        std::mem::forget(session);
    }
}

#[test]
fn a_deferred_commit_is_durable_once_waited_for() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/deferred");
    let store = Store::create(path, options(&fs)).unwrap();
    set_counter(&store, "waited", 5, true);
    set_counter(&store, "cut", 6, false);
    // The machine dies with the second commit appended but not flushed.
    fs.crash_now();
    std::mem::forget(store);
    fs.recover(Fault::DropUnsynced, 1);
    let store = Store::open(path, options(&fs)).unwrap();
    assert_eq!(root_value(&store, "waited"), Some(5));
    assert_eq!(root_value(&store, "cut"), None);
}

#[test]
fn a_deferred_commit_keeps_its_locks_until_waited_for() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/stores/locks"), options(&fs)).unwrap();
    set_counter(&store, "c", 1, true);
    let mut writer = store.session().unwrap();
    let mut txn = writer.begin().unwrap();
    let oid = Oid::<Counter>::from_raw(txn.root("c").unwrap().unwrap());
    txn.get_mut(oid).unwrap().value = 2;
    let pending = txn.commit_deferred().unwrap();

    let mut reader = store.session().unwrap();
    let mut read = reader.begin().unwrap();
    match read.get(oid) {
        Err(e @ Error::LockTimeout { .. }) => assert!(e.is_retryable()),
        Err(other) => panic!("expected a lock timeout, got {other}"),
        Ok(counter) => panic!("read {} under a deferred commit's lock", counter.value),
    }
    read.abort().unwrap();

    let lsn = pending.lsn();
    assert_eq!(pending.wait().unwrap(), lsn);
    assert!(store.log_stats().flushes > 0);
    let mut read = reader.begin().unwrap();
    assert_eq!(read.get(oid).unwrap().value, 2);
}

#[test]
fn deferred_commits_of_several_sessions_share_one_flush() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/stores/group"), options(&fs)).unwrap();
    let mut sessions: Vec<_> = (0..4).map(|_| store.session().unwrap()).collect();
    let before = store.log_stats().flushes;
    let mut pending = Vec::new();
    for (i, session) in sessions.iter_mut().enumerate() {
        let mut txn = session.begin().unwrap();
        // Objects larger than half a page: each transaction fills pages of its own.
        let oid = txn.alloc_bytes(9, &vec![i as u8 + 1; 3000]).unwrap();
        pending.push((oid, txn.commit_deferred().unwrap()));
    }
    assert_eq!(
        store.log_stats().flushes,
        before,
        "nothing flushed before a wait"
    );
    let mut oids = Vec::new();
    for (oid, commit) in pending {
        commit.wait().unwrap();
        oids.push(oid);
    }
    assert_eq!(
        store.log_stats().flushes,
        before + 1,
        "one flush for four commits"
    );
    drop(sessions);
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, oid) in oids.into_iter().enumerate() {
        assert_eq!(txn.read_all(oid).unwrap(), vec![i as u8 + 1; 3000]);
    }
}
