//! Session counters outlive their process: every session that ends before its store closes
//! is added, per scheme, to the counters kept with the store, which `lodestore info` shows.

use lodestore::{Error, Options, Persistent, Scheme, Store};

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Part {
    x: u64,
    padding: [u64; 7],
}
impl Persistent for Part {
    const TYPE_ID: u32 = 14;
}

fn write_parts(store: &Store, scheme: Scheme, parts: u64) {
    let mut session = store.session_with_scheme(scheme).unwrap();
    let mut txn = session.begin().unwrap();
    for x in 0..parts {
        txn.alloc(&Part { x, padding: [0; 7] }).unwrap();
    }
    txn.commit().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn
        .alloc(&Part {
            x: 0,
            padding: [0; 7],
        })
        .unwrap();
    txn.commit().unwrap();
    let mut txn = session.begin().unwrap();
    txn.get_mut(oid).unwrap().x = 7;
    txn.commit().unwrap();
    let txn = session.begin().unwrap();
    drop(txn); // an abort
}

#[test]
fn counters_of_ended_sessions_are_kept_per_scheme_across_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let fs = lodestore::RealFileSystem;
    let store = Store::create(&path, Options::new()).unwrap();
    write_parts(&store, Scheme::PD_ESM, 500);
    drop(store);
    let first = lodestore::session_counters(&fs, &path).unwrap();
    let pd = &first["PD-ESM"];
    assert_eq!(pd["sessions"], 1);
    assert_eq!(pd["commits"], 3);
    assert!(pd["traps"] >= 1, "{pd:?}");
    assert!(pd["log_records"] >= 1, "{pd:?}");
    assert!(pd["pages_shipped"] >= 1, "{pd:?}");

    let store = Store::open(&path, Options::new()).unwrap();
    write_parts(&store, Scheme::PD_ESM, 10);
    write_parts(&store, Scheme::SD_ESM, 10);
    drop(store);
    let second = lodestore::session_counters(&fs, &path).unwrap();
    assert_eq!(second["PD-ESM"]["sessions"], 2);
    assert_eq!(second["PD-ESM"]["commits"], 6);
    assert_eq!(second["SD-ESM"]["sessions"], 1);
    assert_eq!(second["SD-ESM"]["traps"], 0);
    assert!(second["SD-ESM"]["pieces_copied"] >= 1);

    // A damaged counters file is named, and the next close starts the counters again.
    let file = path.join(lodestore::counters::COUNTERS_FILE_NAME);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let error = lodestore::session_counters(&fs, &path).unwrap_err();
    assert!(matches!(error, Error::CorruptFile { .. }), "{error}");
    let store = Store::open(&path, Options::new()).unwrap();
    write_parts(&store, Scheme::SD_ESM, 1);
    drop(store);
    let third = lodestore::session_counters(&fs, &path).unwrap();
    assert_eq!(third.len(), 1);
    assert_eq!(third["SD-ESM"]["sessions"], 1);
}
