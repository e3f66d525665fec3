//! New pages written home instead of logged (`Options::pages_home_min`): a transaction that
//! ships many pages it allocated writes them to the data file, synced, and logs only their
//! numbers. A commit after that keeps them; an abort, or a crash anywhere before the commit
//! record is durable, leaves them free again with no object of the transaction anywhere.

use lodestore::{Oid, Options, Persistent, Store};
use lodestore_storage::{Fault, SimFileSystem};
use std::path::Path;
use std::sync::Arc;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Row {
    value: u64,
    pad: [u64; 15],
}

impl Persistent for Row {
    const TYPE_ID: u32 = 91;
}

fn row(value: u64) -> Row {
    Row {
        value,
        pad: [value ^ 0x5a5a; 15],
    }
}

/// Rows of 128 bytes: about 30 to a 4 KiB page, so 1,200 of them fill about 40 new pages.
const ROWS: u64 = 1200;

fn options(fs: &Arc<SimFileSystem>, pages_home_min: usize) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
        .pages_home_min(pages_home_min)
}

/// One transaction allocating `ROWS` rows valued `base..`, named by root `name`.
fn load(store: &Store, name: &str, base: u64) -> lodestore::Result<Vec<Oid<Row>>> {
    let mut session = store.session()?;
    let mut txn = session.begin()?;
    let mut oids = Vec::with_capacity(ROWS as usize);
    for i in 0..ROWS {
        oids.push(txn.alloc(&row(base + i))?);
    }
    txn.set_root(name, oids[0].raw())?;
    txn.commit()?;
    Ok(oids)
}

fn assert_rows(store: &Store, oids: &[Oid<Row>], base: u64, context: &str) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        let found = txn
            .get(oid)
            .unwrap_or_else(|e| panic!("{context}: row {i}: {e}"));
        assert_eq!(found.value, base + i as u64, "{context}: row {i}");
        assert_eq!(
            found.pad,
            [(base + i as u64) ^ 0x5a5a; 15],
            "{context}: row {i}"
        );
    }
}

/// Objects in the closed store at `path`, after `check` found it sound.
fn objects_when_sound(fs: &SimFileSystem, path: &Path, context: &str) -> u64 {
    let report = lodestore::check(fs, path).unwrap_or_else(|e| panic!("{context}: check: {e}"));
    assert!(
        report.is_sound(),
        "{context}: check found {:?}",
        report.problems
    );
    report.objects
}

#[test]
fn a_large_commit_writes_its_new_pages_home_and_logs_only_their_numbers() {
    let mut logged = Vec::new();
    for min in [0, 8] {
        let fs = Arc::new(SimFileSystem::new());
        let path = Path::new("/stores/home");
        let store = Store::create(path, options(&fs, min)).unwrap();
        let log_before = store.log_stats().bytes_appended;
        let before = store.server_stats();
        let oids = load(&store, "rows", 0).unwrap();
        let after = store.server_stats();
        let homed = after.new_pages_written_home - before.new_pages_written_home;
        logged.push(store.log_stats().bytes_appended - log_before);
        if min == 0 {
            assert_eq!(homed, 0, "pages_home_min 0 logs every page");
        } else {
            assert!(homed >= 30, "only {homed} new pages written home");
            assert!(after.pages_written >= before.pages_written + homed);
        }
        let reads = store.server_stats().pages_read;
        assert_rows(&store, &oids, 0, "before closing");
        // The pool keeps what went home: reading the rows back reads no page of the file.
        assert_eq!(store.server_stats().pages_read, reads, "pages read back");
        store.close().unwrap();
        let store = Store::open(path, options(&fs, min)).unwrap();
        assert_rows(&store, &oids, 0, "reopened");
        drop(store);
        let objects = objects_when_sound(&fs, path, "closed");
        assert_eq!(objects, ROWS, "objects in the store");
    }
    assert!(
        logged[1] * 10 < logged[0],
        "written home, the rows log {} bytes; logged, {}",
        logged[1],
        logged[0]
    );
}

#[test]
fn an_abort_after_new_pages_went_home_leaves_them_free() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/abort");
    // A client cache of 16 pages: the rows' pages leave it one by one before the end of the
    // transaction, each shipment a new page on its own.
    let options = || options(&fs, 1).client_cache_bytes(16 * 4096);
    let store = Store::create(path, options()).unwrap();
    let kept = load(&store, "kept", 1_000_000).unwrap();
    let before = store.server_stats();
    let aborted = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oids: Vec<Oid<Row>> = (0..ROWS).map(|i| txn.alloc(&row(i)).unwrap()).collect();
        txn.set_root("aborted", oids[0].raw()).unwrap();
        txn.abort().unwrap();
        oids
    };
    let homed = store.server_stats().new_pages_written_home - before.new_pages_written_home;
    assert!(homed > 0, "no evicted page went home");
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        assert_eq!(txn.root("aborted").unwrap(), None);
        for oid in aborted.iter().step_by(97) {
            assert!(txn.get(*oid).is_err(), "aborted row {oid:?} is readable");
        }
    }
    assert_rows(&store, &kept, 1_000_000, "after the abort");
    // The freed pages serve the next load.
    let again = load(&store, "again", 2_000_000).unwrap();
    store.close().unwrap();
    let store = Store::open(path, options()).unwrap();
    assert_rows(&store, &kept, 1_000_000, "reopened");
    assert_rows(&store, &again, 2_000_000, "reopened");
    drop(store);
    let objects = objects_when_sound(&fs, path, "closed");
    assert_eq!(objects, 2 * ROWS, "the aborted rows left no trace");
}

/// Rows freed in the transaction that allocated them, after their pages went home one by one
/// and left a server pool too small to keep them: the commit finds those pages empty (it
/// reads them again, as changed since they went home) and gives them back to free space.
#[test]
fn pages_emptied_after_they_went_home_are_free_again() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/emptied");
    let options = || {
        options(&fs, 1)
            .client_cache_bytes(16 * 4096)
            .server_pool_bytes(64 * 4096)
    };
    let store = Store::create(path, options()).unwrap();
    let before = store.server_stats();
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        // About 160 pages: more than the pool keeps once they are read back to be emptied.
        let rows = 4 * ROWS;
        let oids: Vec<Oid<Row>> = (0..rows).map(|i| txn.alloc(&row(i)).unwrap()).collect();
        for oid in oids {
            txn.free(oid).unwrap();
        }
        txn.commit().unwrap();
    }
    let homed = store.server_stats().new_pages_written_home - before.new_pages_written_home;
    assert!(homed >= 120, "only {homed} pages went home");
    store.close().unwrap();
    let info = lodestore::info(fs.as_ref(), path).unwrap();
    assert_eq!(info.objects, 0);
    assert_eq!(
        info.pages_by_kind.get("slotted").copied().unwrap_or(0),
        1,
        "only the directory page stays slotted: {info:?}"
    );
}

#[test]
fn a_crash_anywhere_in_a_large_commit_keeps_it_whole_or_not_at_all() {
    let faults = [
        Fault::DropUnsynced,
        Fault::KeepPrefix,
        Fault::TearLast { sector_bytes: 512 },
        Fault::Reorder,
    ];
    let mut outcomes = [0u32; 2];
    for fault in faults {
        for n in 1.. {
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/crash");
            let store = Store::create(path, options(&fs, 8)).unwrap();
            let kept = load(&store, "kept", 1_000_000).unwrap();
            fs.arm(n);
            let loaded = load(&store, "crashed", 0);
            let crashed = fs.has_crashed();
            assert_eq!(loaded.is_err(), crashed, "only the crash fails it");
            fs.crash_now();
            drop(store);
            fs.recover(fault, n);
            fs.disarm();
            let context = format!("{} at operation {n} of the commit", fault.name());
            let store = Store::open(path, options(&fs, 8))
                .unwrap_or_else(|e| panic!("{context}: the store does not open: {e}"));
            assert_rows(&store, &kept, 1_000_000, &context);
            let root = {
                let mut session = store.session().unwrap();
                let mut txn = session.begin().unwrap();
                txn.root("crashed").unwrap()
            };
            match (&loaded, root) {
                (Ok(oids), Some(_)) => assert_rows(&store, oids, 0, &context),
                (Ok(_), None) => panic!("{context}: an acknowledged commit was lost"),
                (Err(_), root) => {
                    // Not acknowledged: whole if its commit record made it, else gone.
                    outcomes[root.is_some() as usize] += 1;
                }
            }
            // It goes on: another load, a clean close, a sound store with only what committed.
            let again = load(&store, "again", 2_000_000)
                .unwrap_or_else(|e| panic!("{context}: the next load: {e}"));
            store.close().unwrap();
            let store = Store::open(path, options(&fs, 8)).unwrap();
            assert_rows(&store, &again, 2_000_000, &context);
            drop(store);
            let objects = objects_when_sound(&fs, path, &context);
            let committed = root.is_some() as u64 + 2;
            assert_eq!(
                objects,
                committed * ROWS,
                "{context}: objects of {committed} committed loads"
            );
            if !crashed {
                break;
            }
        }
    }
    assert!(outcomes[0] > 0, "no crash left the commit out");
}
