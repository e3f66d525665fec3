//! The two bounds on the log between checkpoints: bytes and records. A log of small records
//! reaches the record bound long before the byte bound, and the restart after a crash then
//! replays no more than about that many records.

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
    const TYPE_ID: u32 = 78;
}

const RECORDS_BOUND: u64 = 200;
const COMMITS: u64 = 300;

fn options(fs: &Arc<SimFileSystem>, records: u64) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
        .checkpoint_log_bytes(1 << 30)
        .checkpoint_log_records(records)
}

/// Creates a store with a counter and commits `COMMITS` increments of it, one per transaction
/// (an update, a commit and a flush mark each: about three records). Returns the store and the
/// checkpoints its increments took.
fn counted_store(fs: &Arc<SimFileSystem>, path: &Path, records: u64) -> (Store, u64) {
    let store = Store::create(path, options(fs, records)).unwrap();
    let mut session = store.session().unwrap();
    let oid = {
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc(&Counter { value: 0 }).unwrap();
        txn.set_root("counter", oid).unwrap();
        txn.commit().unwrap();
        oid
    };
    let before = store.server_stats().checkpoints;
    for _ in 0..COMMITS {
        let mut txn = session.begin().unwrap();
        txn.get_mut(oid).unwrap().value += 1;
        txn.commit().unwrap();
    }
    drop(session);
    let taken = store.server_stats().checkpoints - before;
    (store, taken)
}

#[test]
fn small_commits_are_checkpointed_at_the_record_bound_and_the_restart_replays_no_more() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/bounded");
    let (store, taken) = counted_store(&fs, path, RECORDS_BOUND);
    // About 900 records: four or so checkpoints at 200; the byte bound (1 GiB) never met.
    assert!(
        (2..=COMMITS * 3 / RECORDS_BOUND + 1).contains(&taken),
        "{taken} checkpoints for about {} records at a bound of {RECORDS_BOUND}",
        COMMITS * 3
    );
    fs.crash_now();
    drop(store);
    fs.recover(Fault::DropUnsynced, 3);
    let store = Store::open(path, options(&fs, RECORDS_BOUND)).unwrap();
    let report = store.restart_report();
    assert!(report.needed_recovery());
    // The records since the last checkpoint, and the checkpoint's own.
    assert!(
        report.records_scanned <= RECORDS_BOUND + 8,
        "the restart replayed {} records past a bound of {RECORDS_BOUND}",
        report.records_scanned
    );
    assert_eq!(
        counter_value(&store),
        COMMITS,
        "every acknowledged increment survived"
    );
}

#[test]
fn the_default_record_bound_leaves_the_same_commits_to_one_restart() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/unbounded");
    let (store, taken) = counted_store(&fs, path, lodestore_server::CHECKPOINT_LOG_RECORDS_DEFAULT);
    assert_eq!(taken, 0, "no bound was reached");
    fs.crash_now();
    drop(store);
    fs.recover(Fault::DropUnsynced, 4);
    let store = Store::open(
        path,
        options(&fs, lodestore_server::CHECKPOINT_LOG_RECORDS_DEFAULT),
    )
    .unwrap();
    assert!(store.restart_report().records_scanned > COMMITS * 2);
}

#[test]
fn a_record_bound_of_zero_is_refused_by_name() {
    let fs = Arc::new(SimFileSystem::new());
    match Store::create("/stores/zero", options(&fs, 0)) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("checkpoint_log_records"), "{message}")
        }
        Err(other) => panic!("refused as {other:?}"),
        Ok(_) => panic!("a record bound of zero was accepted"),
    }
}

/// The counter's value as `store` holds it.
fn counter_value(store: &Store) -> u64 {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.root("counter").unwrap().unwrap();
    let value = txn
        .get(lodestore::Oid::<Counter>::from_raw(oid))
        .unwrap()
        .value;
    txn.commit().unwrap();
    value
}

/// Crashes the store (dropping unsynced writes) and opens it again.
fn crash_and_reopen(fs: &Arc<SimFileSystem>, store: Store, path: &Path, seed: u64) -> Store {
    fs.crash_now();
    drop(store);
    fs.recover(Fault::DropUnsynced, seed);
    Store::open(path, options(fs, RECORDS_BOUND)).unwrap()
}

#[test]
fn a_restart_leaves_its_pages_to_the_next_checkpoint_and_a_second_crash_loses_nothing() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/deferred");
    let (store, _) = counted_store(&fs, path, RECORDS_BOUND);
    let store = crash_and_reopen(&fs, store, path, 5);
    let first = store.restart_report().clone();
    assert!(first.needed_recovery());
    assert!(
        first.checkpoint_deferred,
        "ESM's restart took a checkpoint it could leave: {first:?}"
    );
    assert_eq!(store.server_stats().checkpoints, 0, "no checkpoint at open");
    assert_eq!(counter_value(&store), COMMITS);

    // A second crash before any checkpoint: the same log replayed again, with no more.
    let store = crash_and_reopen(&fs, store, path, 6);
    let second = store.restart_report().clone();
    assert!(second.checkpoint_deferred);
    assert_eq!(
        second.checkpoint_lsn, first.checkpoint_lsn,
        "the same restart point"
    );
    assert!(second.records_scanned >= first.records_scanned);
    assert_eq!(counter_value(&store), COMMITS, "every increment, once");

    // The replayed records count toward the bound: the next checkpoint comes after fewer new
    // records than the bound, and the restart after it replays no more than the bound.
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = lodestore::Oid::<Counter>::from_raw(txn.root("counter").unwrap().unwrap());
    txn.commit().unwrap();
    let mut commits = 0;
    while store.server_stats().checkpoints == 0 {
        let mut txn = session.begin().unwrap();
        txn.get_mut(oid).unwrap().value += 1;
        txn.commit().unwrap();
        commits += 1;
        assert!(
            commits < RECORDS_BOUND,
            "no checkpoint after {commits} commits"
        );
    }
    // Three records a commit (update, commit, flush mark).
    assert!(
        commits * 3 + second.records_scanned <= RECORDS_BOUND + 12,
        "{commits} commits before the checkpoint after {} records replayed: they were not \
         counted",
        second.records_scanned
    );
    drop(session);
    let store = crash_and_reopen(&fs, store, path, 7);
    assert!(store.restart_report().records_scanned <= RECORDS_BOUND + 8);
    assert_eq!(counter_value(&store), COMMITS + commits);
    store.close().unwrap();
    // Closed cleanly: the data file alone is the store again.
    let store = Store::open(path, options(&fs, RECORDS_BOUND)).unwrap();
    assert!(!store.restart_report().needed_recovery());
    assert!(!store.restart_report().checkpoint_deferred);
    assert_eq!(counter_value(&store), COMMITS + commits);
}
