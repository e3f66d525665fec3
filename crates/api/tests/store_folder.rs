//! A store's folder appears whole or not at all: creation crashed at every step leaves no store
//! or a complete one, and a second creation then works; removal takes the store's lock first,
//! refuses a store in use, and removes all of it or nothing.

use lodestore::{Error, Options, Store};
use lodestore_storage::{Fault, FileSystem, SimFileSystem};
use std::path::Path;
use std::sync::Arc;

fn sim_options(fs: &Arc<SimFileSystem>) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
}

/// A transaction that allocates an object and names it: the store takes work.
fn commit_a_root(store: &Store) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.alloc_bytes(3, b"works").unwrap();
    txn.set_root("r", oid).unwrap();
    txn.commit().unwrap();
}

#[test]
fn creation_crashed_at_every_step_leaves_no_store_or_a_whole_one() {
    let path = Path::new("/stores/s");
    let mut crash_point = 1;
    let mut whole = 0;
    loop {
        let fs = Arc::new(SimFileSystem::new());
        fs.arm(crash_point);
        let result = Store::create(path, sim_options(&fs));
        let crashed = fs.has_crashed();
        drop(result);
        if !crashed {
            // The creation that ran to its end left a whole store.
            let store = Store::open(path, sim_options(&fs)).unwrap();
            assert!(!store.restart_report().needed_recovery());
            break;
        }
        fs.recover(Fault::TearLast { sector_bytes: 512 }, crash_point);
        // Either the store is whole and opens, or there is none under its name and creating it
        // again works (clearing what the crash left).
        match Store::open(path, sim_options(&fs)) {
            Ok(store) => {
                whole += 1;
                drop(store);
            }
            Err(Error::NotAStore { .. }) => {
                assert!(
                    !fs.exists(&path.join("volume-0.data")),
                    "crash point {crash_point}: a data file without a store"
                );
                let store = Store::create(path, sim_options(&fs))
                    .unwrap_or_else(|e| panic!("crash point {crash_point}: create again: {e}"));
                commit_a_root(&store);
            }
            Err(other) => panic!("crash point {crash_point}: the store cannot be opened: {other}"),
        }
        crash_point += 1;
        assert!(crash_point < 10_000, "creation never finished");
    }
    assert!(
        crash_point > 10,
        "creation took only {crash_point} operations"
    );
    // Crash points after the rename would leave a whole store too (counted in `whole`); there
    // may be none, as opening the new store writes nothing.
    eprintln!("{whole} crash points left a whole store");
}

/// The creation's syncs, deferred while the store is built under its temporary name, are all
/// made before the rename: a power cut right after `create` returns loses nothing of the store.
#[test]
fn a_power_cut_right_after_creation_leaves_a_whole_store() {
    let path = Path::new("/stores/s");
    for fault in [Fault::DropUnsynced, Fault::Reorder] {
        let fs = Arc::new(SimFileSystem::new());
        drop(Store::create(path, sim_options(&fs)).unwrap());
        fs.crash_now();
        fs.recover(fault, 7);
        let store = Store::open(path, sim_options(&fs))
            .unwrap_or_else(|e| panic!("{fault:?}: the created store cannot be opened: {e}"));
        commit_a_root(&store);
        drop(store);
        let report = lodestore::check(fs.as_ref(), path).unwrap();
        assert!(report.is_sound(), "{fault:?}: {:?}", report.problems);
    }
}

#[test]
fn a_folder_that_is_not_empty_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    match Store::create(dir.path(), Options::new()) {
        Err(Error::InvalidArgument(message)) => assert!(message.contains("not empty"), "{message}"),
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    assert_eq!(
        std::fs::read(dir.path().join("notes.txt")).unwrap(),
        b"mine"
    );
}

#[test]
fn removal_refuses_a_store_in_use_and_removes_a_closed_one_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, Options::new()).unwrap();
    assert!(matches!(
        Store::remove(&path, &Options::new()),
        Err(Error::StoreLocked { .. })
    ));
    // Still whole: the open store goes on working and reopens.
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.alloc_bytes(3, b"kept").unwrap();
    txn.set_root("r", oid).unwrap();
    txn.commit().unwrap();
    drop(session);
    drop(store);
    drop(Store::open(&path, Options::new()).unwrap());

    Store::remove(&path, &Options::new()).unwrap();
    assert!(!path.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Not a store, or a store with foreign files beside it: nothing is removed.
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("mine.txt"), b"x").unwrap();
    assert!(matches!(
        Store::remove(&path, &Options::new()),
        Err(Error::NotAStore { .. })
    ));
    std::fs::remove_file(path.join("mine.txt")).unwrap();
    drop(Store::create(&path, Options::new()).unwrap());
    std::fs::write(path.join("mine.txt"), b"x").unwrap();
    assert!(matches!(
        Store::remove(&path, &Options::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(path.join("volume-0.data").exists() && path.join("mine.txt").exists());
}

#[test]
fn a_store_created_on_the_memory_file_system_opens() {
    let fs = Arc::new(lodestore::MemoryFileSystem::new());
    let options = || {
        Options::new()
            .file_system(fs.clone())
            .page_size(4096)
            .client_cache_bytes(1 << 20)
            .server_pool_bytes(1 << 20)
            .recovery_buffer_bytes(1 << 16)
            .log_segment_bytes(256 << 10)
    };
    drop(Store::create("/s", options()).unwrap());
    drop(Store::open("/s", options()).unwrap());
    assert!(fs.exists(Path::new("/s/volume-0.data")));
    assert!(!fs.exists(Path::new("/.s.creating")));
}
