//! Differential logging on the public API: a main-memory store that logs XOR records (or the
//! physical baseline's) in several streams, checkpoints to two backups in turn, and comes back
//! after a crash with exactly its committed transactions.

use lodestore::{Oid, Options, Persistent, RecoveryMethodKind, RestartLevel, Store};
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

/// Crashes with a transaction in flight that has changed `oid`, and recovers the files
/// keeping a prefix of what was unsynced (chosen by `seed`).
fn crash_in_flight(fs: &Arc<SimFileSystem>, store: Store, oid: Oid<Counter>, seed: u64) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    txn.write(oid, &counter(9999)).unwrap();
    fs.crash_now();
    drop(txn);
    drop(session);
    drop(store);
    fs.recover(Fault::KeepPrefix, seed);
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
                crash_in_flight(&fs, store, oids[7], crash);
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
fn every_restart_level_brings_back_the_same_commits() {
    for method in METHODS {
        for number in 1..=4 {
            let level = RestartLevel::from_number(number).unwrap();
            let context = format!("{} at restart level {number}", method.name());
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/levels");
            let store = Store::create(path, options(&fs, method, 2)).unwrap();
            let oids = create(&store);
            // Enough to pass several checkpoints, an abort among them, and a crash with a
            // transaction in flight.
            for round in 1..=12 {
                add(&store, &oids, round, round != 7);
            }
            crash_in_flight(&fs, store, oids[3], number as u64);
            let store = Store::open(path, options(&fs, method, 2).restart_level(level))
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            assert!(store.restart_report().records_scanned > 0, "{context}");
            check(&store, &oids, 12, &context);
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

/// A large object spread over many pages added after the checkpoint (past what the file's
/// first extensions made room for) comes back whole from the streams at the first and the
/// last restart level, and again from the data file once the close wrote every page home.
#[test]
fn a_large_object_on_pages_past_the_backup_comes_back_at_every_level() {
    const LARGE: u32 = 80;
    // Past what the file's first extensions make room for.
    let bytes: Vec<u8> = (0..150 * 4096 + 100).map(|i| (i % 251) as u8).collect();
    for method in METHODS {
        for level in [RestartLevel::One, RestartLevel::Four] {
            let context = format!("{} at level {}", method.name(), level.number());
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/large");
            // No checkpoint after the close: the new pages are named by the streams only.
            let options = || options(&fs, method, 2).checkpoint_log_bytes(1 << 30);
            let store = Store::create(path, options()).unwrap();
            store.close().unwrap();
            let store = Store::open(path, options()).unwrap();
            let mut session = store.session().unwrap();
            let mut txn = session.begin().unwrap();
            let large = txn.alloc_bytes(LARGE, &bytes).unwrap();
            txn.set_root("large", large).unwrap();
            txn.commit().unwrap();
            drop(session);
            fs.crash_now();
            drop(store);
            fs.recover(Fault::KeepPrefix, 11);
            let reopen = || {
                Store::open(path, options().restart_level(level))
                    .unwrap_or_else(|e| panic!("{context}: {e}"))
            };
            let read_back = |store: &Store, when: &str| {
                let mut session = store.session().unwrap();
                let mut txn = session.begin().unwrap();
                let mut found = vec![0u8; bytes.len()];
                txn.read_at(large, 0, &mut found)
                    .unwrap_or_else(|e| panic!("{context}, {when}: {e}"));
                assert!(
                    found == bytes,
                    "{context}, {when}: the large object differs"
                );
            };
            let store = reopen();
            read_back(&store, "after the crash");
            // The close writes every page home; the next open reads them from the backup.
            store
                .close()
                .unwrap_or_else(|e| panic!("{context}: close: {e}"));
            assert!(
                lodestore::check(fs.as_ref(), path).unwrap().is_sound(),
                "{context}: check after the close"
            );
            read_back(&reopen(), "after the close");
        }
    }
}

/// A store that grew after its last checkpoint past the pool it is reopened with is refused
/// as too large for the pool (not as a damaged log) at every restart level: the one-pass
/// forward replay counts the pages its changes name as it decides them.
#[test]
fn a_store_grown_past_the_pool_since_its_checkpoint_is_refused_by_name() {
    for method in METHODS {
        for level in [RestartLevel::One, RestartLevel::Two, RestartLevel::Four] {
            let context = format!("{} at level {}", method.name(), level.number());
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/outgrown");
            // No checkpoint while it grows: every new page is named by the streams only.
            let roomy = options(&fs, method, 2)
                .checkpoint_log_bytes(1 << 30)
                .server_pool_bytes(4 << 20);
            let store = Store::create(path, roomy.clone()).unwrap();
            let mut session = store.session().unwrap();
            let mut txn = session.begin().unwrap();
            // About 500 KiB of counters: some 130 pages of 4 KiB.
            let first = txn.alloc(&counter(0)).unwrap();
            for i in 1..8000 {
                txn.alloc(&counter(i)).unwrap();
            }
            txn.set_root("first", first.raw()).unwrap();
            txn.commit().unwrap();
            drop(session);
            fs.crash_now();
            drop(store);
            // The data file's growth was never synced: only the streams know the new pages.
            fs.recover(Fault::DropUnsynced, 3);
            let tight = options(&fs, method, 2)
                .server_pool_bytes(256 << 10)
                .restart_level(level);
            let error = match Store::open(path, tight) {
                Ok(_) => panic!("{context}: a store of 130 pages opened in a pool of 64"),
                Err(error) => error.to_string(),
            };
            assert!(
                error.contains("do not fit the server pool"),
                "{context}: {error}"
            );
            // With room again, every counter is back.
            let store = Store::open(path, roomy.restart_level(level)).unwrap();
            let mut session = store.session().unwrap();
            let mut txn = session.begin().unwrap();
            let root = txn.root("first").unwrap().expect("the root survived");
            assert_eq!(root, first.raw(), "{context}");
        }
    }
}

#[test]
fn info_shows_the_streams_and_check_names_a_damaged_backup_or_stream() {
    use lodestore_storage::{FileSystem, OpenMode};
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/checked");
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Dl1p, 2)).unwrap();
    let oids = create(&store);
    add(&store, &oids, 5, true);
    store.close().unwrap();

    let info = lodestore::info(fs.as_ref(), path).unwrap();
    let dl = info
        .differential
        .expect("a main-memory store shows its streams");
    assert_eq!(dl.streams.len(), 2);
    assert!(dl.backup_pages > 3 && dl.checkpoint >= 1, "{dl:?}");
    assert!(lodestore::check(fs.as_ref(), path).unwrap().is_sound());

    // A flipped byte in a page of the backup the anchor names.
    let backup = path.join(format!("differential/backup-{}.image", dl.backup));
    let file = fs.open(&backup, OpenMode::Existing).unwrap();
    let mut byte = [0u8];
    let at = 4 * 4096 + 700;
    file.read_at(at, &mut byte).unwrap();
    file.write_at(at, &[byte[0] ^ 0x10]).unwrap();
    file.sync().unwrap();
    let report = lodestore::check(fs.as_ref(), path).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains(&format!("backup-{}", dl.backup))
                && p.message.contains("page 4")),
        "{:?}",
        report.problems
    );
    file.write_at(at, &byte).unwrap();
    file.sync().unwrap();
    assert!(lodestore::check(fs.as_ref(), path).unwrap().is_sound());

    // A damaged record of a stream, past the checkpoint's begin mark: named with its stream.
    let stream = &dl.streams[0];
    let segment = path.join("differential/stream-0/segment-0000000001.log");
    let file = fs.open(&segment, OpenMode::Existing).unwrap();
    let offset = 4096 + stream.begin - (256 << 10) + 20;
    file.read_at(offset, &mut byte).unwrap();
    file.write_at(offset, &[byte[0] ^ 1]).unwrap();
    file.sync().unwrap();
    let report = lodestore::check(fs.as_ref(), path).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.contains("stream-0")),
        "{:?}",
        report.problems
    );
    assert!(Store::open(path, options(&fs, RecoveryMethodKind::Dl1p, 2)).is_err());
}

#[test]
fn a_checkpoint_asked_for_bounds_the_restart_and_leaving_the_method_removes_its_files() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/switched");
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Dl1p, 2)).unwrap();
    let oids = create(&store);
    let before = lodestore::info(fs.as_ref(), path)
        .unwrap()
        .differential
        .unwrap();
    add(&store, &oids, 7, true);
    store.checkpoint().unwrap();
    let after = lodestore::info(fs.as_ref(), path)
        .unwrap()
        .differential
        .unwrap();
    assert!(after.checkpoint > before.checkpoint, "{before:?} {after:?}");
    fs.crash_now();
    drop(store);
    fs.recover(Fault::DropUnsynced, 3);
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Dl1p, 2)).unwrap();
    assert_eq!(store.restart_report().redo_applied, 0, "all in the backup");
    check(&store, &oids, 7, "after the checkpoint");
    store.close().unwrap();

    let esm = options(&fs, RecoveryMethodKind::Esm, 1);
    let store = Store::open(path, esm.clone()).unwrap();
    assert_eq!(store.recovery_method(), "esm");
    check(&store, &oids, 7, "as esm");
    drop(store);
    assert!(!lodestore_storage::FileSystem::is_dir(
        fs.as_ref(),
        &path.join("differential")
    ));
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Pl2p, 3)).unwrap();
    add(&store, &oids, 8, true);
    drop(store);
    let store = Store::open(path, esm).unwrap();
    check(&store, &oids, 8, "back to esm");
}
