//! Differential logging on the public API: a main-memory store that logs XOR records (or the
//! physical baseline's) in several streams, checkpoints to two backups in turn, and comes back
//! after a crash with exactly its committed transactions.

use lodestore::{Oid, Options, Persistent, RecoveryMethodKind, Store};
use lodestore_storage::{Fault, SimFileSystem};
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Counter {
    value: u64,
    pad: [u64; 7],
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 79;
}

const OBJECTS: u64 = 600;

fn options(fs: &Arc<SimFileSystem>, method: RecoveryMethodKind, streams: usize) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .recovery_method(method)
        .log_streams(streams)
        .log_segment_bytes(256 << 10)
        .checkpoint_log_bytes(64 << 10)
        .background_install(false)
}

fn counter(value: u64) -> Counter {
    Counter {
        value,
        pad: [value; 7],
    }
}

fn create(store: &Store) -> Vec<Oid<Counter>> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oids: Vec<Oid<Counter>> = (0..OBJECTS)
        .map(|i| txn.alloc(&counter(i)).unwrap())
        .collect();
    txn.set_root("first", oids[0].raw()).unwrap();
    txn.commit().unwrap();
    oids
}

fn add(store: &Store, oids: &[Oid<Counter>], amount: u64, commit: bool) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        txn.write(oid, &counter(i as u64 + amount)).unwrap();
    }
    if commit {
        txn.commit().unwrap();
    } else {
        txn.abort().unwrap();
    }
}

fn check(store: &Store, oids: &[Oid<Counter>], amount: u64, context: &str) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        let found = txn.get(oid).unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(found.value, i as u64 + amount, "{context}: counter {i}");
        assert_eq!(found.pad, [i as u64 + amount; 7], "{context}: counter {i}");
    }
}

const METHODS: [RecoveryMethodKind; 3] = [
    RecoveryMethodKind::Dl1p,
    RecoveryMethodKind::Dl2p,
    RecoveryMethodKind::Pl2p,
];

#[test]
fn a_clean_close_and_a_crash_keep_exactly_the_commits() {
    for method in METHODS {
        for streams in [1, 3] {
            let context = format!("{} with {streams} streams", method.name());
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/dl");
            let store = Store::create(path, options(&fs, method, streams)).unwrap();
            assert_eq!(store.recovery_method(), method.name());
            let oids = create(&store);
            add(&store, &oids, 100, true);
            add(&store, &oids, 200, false);
            store.close().unwrap();
            let store = Store::open(path, options(&fs, method, streams)).unwrap();
            check(&store, &oids, 100, &format!("{context}, closed"));
            // Several transactions, then a crash with one in flight; three times over.
            let mut store = store;
            for crash in 0..3 {
                let base = 1000 * (crash + 1);
                for round in 1..=5 {
                    add(&store, &oids, base + round, true);
                }
                let mut session = store.session().unwrap();
                let mut txn = session.begin().unwrap();
                txn.write(oids[7], &counter(9999)).unwrap();
                fs.crash_now();
                drop(txn);
                drop(session);
                drop(store);
                fs.recover(Fault::KeepPrefix, crash);
                store = Store::open(path, options(&fs, method, streams))
                    .unwrap_or_else(|e| panic!("{context}: reopen after crash {crash}: {e}"));
                check(
                    &store,
                    &oids,
                    base + 5,
                    &format!("{context}, crash {crash}"),
                );
            }
            drop(store);
        }
    }
}

#[test]
fn pages_added_after_the_checkpoint_come_back_from_the_log() {
    for method in METHODS {
        let fs = Arc::new(SimFileSystem::new());
        let path = Path::new("/stores/grown");
        let store = Store::create(path, options(&fs, method, 2)).unwrap();
        store.close().unwrap();
        let store = Store::open(path, options(&fs, method, 2)).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oids: Vec<Oid<Counter>> = (0..5).map(|i| txn.alloc(&counter(i)).unwrap()).collect();
        txn.set_root("first", oids[0].raw()).unwrap();
        txn.commit().unwrap();
        drop(session);
        fs.crash_now();
        drop(store);
        fs.recover(Fault::KeepPrefix, 7);
        let store = Store::open(path, options(&fs, method, 2)).unwrap();
        check(&store, &oids, 0, method.name());
        // The data file is current once the store is closed, for tools that read it.
        store.close().unwrap();
        let mut found = 0;
        lodestore::objects(fs.as_ref(), path, |_| {
            found += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(found, 5, "{}: objects read offline", method.name());
    }
}
