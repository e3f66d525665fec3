//! Object redo records (Hosking's checkpoint-style records): the server finds the object on
//! its copy, takes the before bytes from there, and refuses records it cannot place.

use lodestore_core::{Error, Oid};
use lodestore_server::{LockMode, ObjectUpdates, PageServer, Server, ServerOptions};
use lodestore_storage::{slotted, MemoryFileSystem};
use std::path::Path;
use std::sync::Arc;

#[test]
fn records_land_in_their_object_and_bad_ones_are_refused() {
    let fs = Arc::new(MemoryFileSystem::new());
    let server = Server::create(fs, Path::new("/s"), 4096, ServerOptions::default()).unwrap();
    let directory = server.root_directory();
    let page = directory.page();
    let txn = server.begin().unwrap();
    let batch = |records: &[(Oid, u32, &[u8])]| {
        let mut batch = ObjectUpdates::new();
        for &(oid, offset, after) in records {
            batch.push(oid, offset, after);
        }
        batch
    };

    // Without the page's exclusive lock: refused.
    let err = server
        .ship_object_updates(txn, &batch(&[(directory, 0, &[1])]))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    server.lock_page(txn, page, LockMode::Exclusive).unwrap();
    let mut before = vec![0u8; 4096];
    server.fetch_page(txn, page, &mut before).unwrap();

    // A slot that holds no object, and a range past the object's end: refused by name.
    let missing = Oid::new(directory.volume(), page, 999);
    let err = server
        .ship_object_updates(txn, &batch(&[(missing, 0, &[1])]))
        .unwrap_err();
    assert!(
        matches!(err, Error::ObjectNotFound { oid } if oid == missing),
        "{err}"
    );
    let err = server
        .ship_object_updates(txn, &batch(&[(directory, 1 << 20, &[1])]))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    // Two records of one object in one batch, the second over the first: both apply, in order.
    server
        .ship_object_updates(
            txn,
            &batch(&[(directory, 0, &[7, 7, 7, 7]), (directory, 2, &[9, 9])]),
        )
        .unwrap();
    let mut after = vec![0u8; 4096];
    server.fetch_page(txn, page, &mut after).unwrap();
    let payload = slotted::record(&before, directory.slot())
        .unwrap()
        .expect("the directory object")
        .payload();
    let written = payload.start..payload.start + 4;
    assert_eq!(&after[written.clone()], &[7, 7, 9, 9]);
    // Nothing else changed but the server's own header fields (checksum, LSN).
    for i in 16..4096 {
        if !written.contains(&i) {
            assert_eq!(before[i], after[i], "byte {i}");
        }
    }
    server.abort(txn).unwrap();
}
