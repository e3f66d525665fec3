//! `Store::close` reports what shutting down failed to do: a clean close leaves nothing to
//! recover; a store with a session still open is refused by name; and a close whose writes fail
//! returns the error (the next open then recovers everything committed from the log).

use lodestore::{Error, Options, Persistent, Store};
use lodestore_storage::{Fault, SimFileSystem};
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Counter {
    value: u64,
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 77;
}

fn options(fs: &Arc<SimFileSystem>) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
}

/// Creates a store at `path` holding a root `counter` with `value`, committed.
fn store_with_counter(fs: &Arc<SimFileSystem>, path: &Path, value: u64) -> Store {
    let store = Store::create(path, options(fs)).unwrap();
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc(&Counter { value }).unwrap();
        txn.set_root("counter", oid).unwrap();
        txn.commit().unwrap();
    }
    store
}

fn counter(store: &Store) -> u64 {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.root("counter").unwrap().unwrap();
    txn.get(lodestore::Oid::<Counter>::from_raw(oid))
        .unwrap()
        .value
}

#[test]
fn a_clean_close_leaves_nothing_to_recover() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/clean");
    let store = store_with_counter(&fs, path, 41);
    store.close().unwrap();
    let store = Store::open(path, options(&fs)).unwrap();
    assert!(!store.restart_report().needed_recovery());
    assert_eq!(counter(&store), 41);
}

#[test]
fn opening_a_cleanly_closed_store_writes_nothing_and_a_crashed_one_is_checkpointed_at_close() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/quiet");
    store_with_counter(&fs, path, 5).close().unwrap();
    let before = fs.operations();
    let store = Store::open(path, options(&fs)).unwrap();
    assert_eq!(store.server_stats().checkpoints, 0);
    // Closing it again (no session ran, so no session counters to keep) writes nothing.
    store.close().unwrap();
    assert_eq!(
        fs.operations(),
        before,
        "opening and closing an unchanged store wrote or synced"
    );
    let store = Store::open(path, options(&fs)).unwrap();
    assert_eq!(counter(&store), 5);
    assert_eq!(fs.operations(), before, "reading wrote or synced");

    // A crash after a commit: the restart replays it and leaves the page to the next
    // checkpoint, which the close takes.
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oid = txn.root("counter").unwrap().unwrap();
        txn.get_mut(lodestore::Oid::<Counter>::from_raw(oid))
            .unwrap()
            .value = 6;
        txn.commit().unwrap();
    }
    fs.crash_now();
    drop(store);
    fs.recover(Fault::DropUnsynced, 2);
    let store = Store::open(path, options(&fs)).unwrap();
    assert!(store.restart_report().needed_recovery());
    assert!(store.restart_report().checkpoint_deferred);
    assert_eq!(store.server_stats().checkpoints, 0);
    assert_eq!(counter(&store), 6);
    store.close().unwrap();
    let store = Store::open(path, options(&fs)).unwrap();
    assert!(
        !store.restart_report().needed_recovery(),
        "the close left it clean"
    );
    assert_eq!(counter(&store), 6);
}

#[test]
fn a_store_with_a_session_open_is_not_closed() {
    let fs = Arc::new(SimFileSystem::new());
    let store = store_with_counter(&fs, Path::new("/stores/busy"), 1);
    let session = store.session().unwrap();
    match store.close() {
        Err(Error::InvalidArgument(reason)) => {
            assert!(
                reason.contains("/stores/busy") && reason.contains("still use"),
                "{reason}"
            )
        }
        other => panic!("closed under an open session: {other:?}"),
    }
    drop(session);
}

#[test]
fn a_close_whose_writes_fail_says_so_and_loses_nothing_committed() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/failing");
    let store = store_with_counter(&fs, path, 7);
    // The next write (the close's checkpoint) fails.
    fs.arm(1);
    let error = store.close().unwrap_err();
    assert!(!matches!(error, Error::InvalidArgument(_)), "{error}");
    fs.recover(Fault::DropUnsynced, 1);
    let store = Store::open(path, options(&fs)).unwrap();
    assert_eq!(counter(&store), 7);
}
