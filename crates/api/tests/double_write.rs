//! Torn home writes without whole-page images in the log: a change to a page that is not fresh
//! logs only its changed bytes, and the page goes home through the double-write file, so a
//! crash that tears or drops home writes anywhere in a checkpoint loses nothing committed.

use lodestore::{Oid, Options, Persistent, Store};
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
    const TYPE_ID: u32 = 78;
}

/// Enough objects to fill a few dozen 4 KiB pages.
const OBJECTS: u64 = 1500;

fn options(fs: &Arc<SimFileSystem>) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .log_segment_bytes(256 << 10)
}

fn counter(value: u64) -> Counter {
    Counter {
        value,
        pad: [value; 7],
    }
}

/// A store holding `OBJECTS` counters valued 0.., committed and checkpointed (home, so their
/// next changes are not a fresh page's).
fn store_with_counters(fs: &Arc<SimFileSystem>, path: &Path) -> (Store, Vec<Oid<Counter>>) {
    let store = Store::create(path, options(fs)).unwrap();
    let oids = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oids: Vec<Oid<Counter>> = (0..OBJECTS)
            .map(|i| txn.alloc(&counter(i)).unwrap())
            .collect();
        txn.set_root("first", oids[0].raw()).unwrap();
        txn.commit().unwrap();
        oids
    };
    store.checkpoint().unwrap();
    (store, oids)
}

fn add_to_every_counter(store: &Store, oids: &[Oid<Counter>], amount: u64) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        txn.write(oid, &counter(i as u64 + amount)).unwrap();
    }
    txn.commit().unwrap();
}

fn assert_counters(store: &Store, oids: &[Oid<Counter>], amount: u64, context: &str) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        let found = txn.get(oid).unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(found.value, i as u64 + amount, "{context}: counter {i}");
        assert_eq!(found.pad, [i as u64 + amount; 7], "{context}: counter {i}");
    }
}

#[test]
fn a_change_after_a_checkpoint_logs_no_page_image_and_goes_home_through_the_double_write() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/stores/images");
    let (store, oids) = store_with_counters(&fs, path);
    let before = store.server_stats();
    let log_before = store.log_stats().bytes_appended;
    add_to_every_counter(&store, &oids, 1000);
    let after = store.server_stats();
    assert_eq!(
        after.page_images_logged, before.page_images_logged,
        "no page was logged whole"
    );
    // 64 bytes changed per object: the records hold about that, not whole pages.
    let logged = store.log_stats().bytes_appended - log_before;
    assert!(
        logged < OBJECTS * 64 * 4,
        "{logged} bytes logged for {OBJECTS} changed objects"
    );
    store.checkpoint().unwrap();
    let written = store.server_stats();
    assert!(
        written.pages_double_written >= after.pages_double_written + OBJECTS * 64 / 4096,
        "the changed pages went home through the double-write file"
    );
    store.close().unwrap();
    let double_write = path.join(lodestore_storage::doublewrite::DOUBLE_WRITE_FILE_NAME);
    let file = lodestore_storage::FileSystem::open(
        fs.as_ref(),
        &double_write,
        lodestore_storage::OpenMode::Existing,
    )
    .unwrap();
    assert_eq!(file.len().unwrap(), 0, "a clean close empties the file");
}

#[test]
fn a_crash_at_any_write_of_a_checkpoint_loses_nothing_committed() {
    let faults = [
        Fault::TearLast { sector_bytes: 512 },
        Fault::TearLast { sector_bytes: 4096 },
        Fault::Reorder,
        Fault::KeepPrefix,
    ];
    let mut restored = 0;
    for fault in faults {
        for n in 1.. {
            let fs = Arc::new(SimFileSystem::new());
            let path = Path::new("/stores/torn");
            let (store, oids) = store_with_counters(&fs, path);
            add_to_every_counter(&store, &oids, 1000);
            fs.arm(n);
            let checkpointed = store.checkpoint();
            let crashed = fs.has_crashed();
            assert_eq!(checkpointed.is_err(), crashed, "only the crash fails it");
            fs.crash_now();
            drop(store);
            fs.recover(fault, n);
            fs.disarm();
            let context = format!("{} at write {n} of the checkpoint", fault.name());
            let store = Store::open(path, options(&fs))
                .unwrap_or_else(|e| panic!("{context}: the store does not open: {e}"));
            restored += store.restart_report().pages_restored;
            assert_counters(&store, &oids, 1000, &context);
            // And it goes on: another change, a checkpoint, a clean reopen.
            add_to_every_counter(&store, &oids, 2000);
            store.close().unwrap();
            let store = Store::open(path, options(&fs)).unwrap();
            assert_counters(&store, &oids, 2000, &context);
            drop(store);
            if !crashed {
                break;
            }
        }
    }
    assert!(
        restored > 0,
        "some crash tore a home write that the double-write file completed"
    );
}
