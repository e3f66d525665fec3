//! The snapshot component in the engine, under every recovery method, through the
//! `PageServer` interface a remote client uses too: transactions as of a snapshot take no
//! locks, see the past, and cannot change anything.

use lodestore_core::{Error, PageId};
use lodestore_server::{
    LockMode, PageServer, PageUpdates, RecoveryMethodKind, Server, ServerOptions, TxnKind,
};
use lodestore_snapshots::Snapshots;
use lodestore_storage::MemoryFileSystem;
use std::path::Path;
use std::sync::Arc;

const PAGE: usize = 4096;
const AT: usize = PAGE / 2;

fn server(method: RecoveryMethodKind) -> (Server, Arc<Snapshots>) {
    let fs = Arc::new(MemoryFileSystem::new());
    let dir = Path::new("/s");
    drop(Server::create(fs.clone(), dir, PAGE, ServerOptions::default()).unwrap());
    let snapshots = Arc::new(Snapshots::open(fs.clone(), dir, PAGE, None).unwrap());
    let options = ServerOptions {
        method: Some(method),
        versions: Some(snapshots.clone()),
        ..ServerOptions::default()
    };
    (Server::open(fs, dir, None, options).unwrap(), snapshots)
}

/// Commits `value` at byte `AT` of `page`.
fn set_byte(server: &Server, page: PageId, value: u8) {
    let txn = server.begin().unwrap();
    server.lock_page(txn, page, LockMode::Exclusive).unwrap();
    let mut current = vec![0u8; PAGE];
    server.fetch_page(txn, page, &mut current).unwrap();
    let mut batch = PageUpdates::new();
    batch.push(page, AT as u32, &current[AT..AT + 1], &[value]);
    server.ship_log_records(txn, &batch).unwrap();
    server.commit(txn).unwrap();
}

#[test]
fn a_transaction_as_of_a_snapshot_reads_the_past_and_changes_nothing() {
    // dbcache refuses snapshots (a test of its own in the API's).
    for method in RecoveryMethodKind::ALL
        .into_iter()
        .filter(|m| *m != RecoveryMethodKind::Dbcache)
    {
        let (server, snapshots) = server(method);
        let page = server.root_directory().page();
        set_byte(&server, page, 1);
        let first = server.take_snapshot().unwrap();
        set_byte(&server, page, 2);
        server.checkpoint().unwrap();

        let past = server
            .begin_transaction(TxnKind::ReadOnlyAsOf { snapshot: first.id })
            .unwrap();
        let mut buf = vec![0u8; PAGE];
        // No lock is needed, and a shared one is granted without waiting.
        server.fetch_page(past, page, &mut buf).unwrap();
        assert_eq!(buf[AT], 1, "{method}");
        server.lock_page(past, page, LockMode::Shared).unwrap();
        // A writer holding the page exclusively does not stop the reader.
        let writer = server.begin().unwrap();
        server.lock_page(writer, page, LockMode::Exclusive).unwrap();
        server.fetch_page(past, page, &mut buf).unwrap();
        assert_eq!(buf[AT], 1, "{method}");
        server.abort(writer).unwrap();
        // Every way of changing the store is refused, by name.
        let refused = [
            server.lock_page(past, page, LockMode::Exclusive).err(),
            server.allocate_pages(past, 1).err(),
            server.find_space(past, 10, &[]).err(),
            server.free_pages(past, &[page]).err(),
        ];
        for error in refused {
            match error {
                Some(Error::InvalidArgument(reason)) => {
                    assert!(reason.contains("as of a snapshot"), "{method}: {reason}")
                }
                other => panic!("{method}: {other:?}"),
            }
        }
        // The snapshot cannot be deleted while read; once the reader ends, it can.
        assert!(snapshots.delete(&|s| s.id == first.id).is_err(), "{method}");
        server.commit(past).unwrap();
        assert_eq!(
            snapshots.delete(&|s| s.id == first.id).unwrap(),
            vec![first],
            "{method}"
        );
        assert!(matches!(
            server.begin_transaction(TxnKind::ReadOnlyAsOf { snapshot: first.id }),
            Err(Error::NoSuchSnapshot { .. })
        ));
    }
}
