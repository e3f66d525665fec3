//! Client log records (page, offset, before, after): the server checks each record's before
//! bytes against its copy with the records before it applied, applies them in order, and a
//! batch it refuses leaves its copy as it was, under every recovery method.

use lodestore_core::Error;
use lodestore_server::{
    LockMode, PageServer, PageUpdates, RecoveryMethodKind, Server, ServerOptions,
};
use lodestore_storage::MemoryFileSystem;
use std::path::Path;
use std::sync::Arc;

const PAGE: usize = 4096;

/// The first byte at which two images differ, leaving out the server's own fields: the
/// checksum (0..4) and the LSN (8..16).
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    (0..PAGE).find(|&i| !(0..4).contains(&i) && !(8..16).contains(&i) && a[i] != b[i])
}

#[test]
fn batches_apply_in_order_and_a_refused_one_leaves_nothing() {
    for method in [
        RecoveryMethodKind::Esm,
        RecoveryMethodKind::Redo,
        RecoveryMethodKind::Wpl,
    ] {
        let fs = Arc::new(MemoryFileSystem::new());
        let options = ServerOptions {
            method: Some(method),
            ..ServerOptions::default()
        };
        let server = Server::create(fs, Path::new("/s"), PAGE, options).unwrap();
        let page = server.root_directory().page();
        let txn = server.begin().unwrap();
        server.lock_page(txn, page, LockMode::Exclusive).unwrap();
        let mut original = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut original).unwrap();
        // Log records are physical: any bytes but the server's own may be named.
        let at = PAGE / 2;
        let batch = |records: &[(usize, &[u8], &[u8])]| {
            let mut batch = PageUpdates::new();
            for &(offset, before, after) in records {
                batch.push(page, offset as u32, before, after);
            }
            batch
        };

        // The second record overlaps the first; its before bytes are what the first wrote.
        let mut expected = original.clone();
        expected[at..at + 4].copy_from_slice(&[1, 2, 3, 4]);
        let overlapping_before = expected[at + 2..at + 6].to_vec();
        expected[at + 2..at + 6].copy_from_slice(&[9, 9, 9, 9]);
        server
            .ship_log_records(
                txn,
                &batch(&[
                    (at, &original[at..at + 4], &[1, 2, 3, 4]),
                    (at + 2, &overlapping_before, &[9, 9, 9, 9]),
                ]),
            )
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let mut now = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut now).unwrap();
        assert_eq!(first_difference(&now, &expected), None, "{method}");

        // Two good records, then one whose before bytes are stale (the page's original ones):
        // refused, and the two before it are not applied either.
        let err = server
            .ship_log_records(
                txn,
                &batch(&[
                    (at + 8, &expected[at + 8..at + 10], &[5, 5]),
                    (at + 12, &expected[at + 12..at + 14], &[6, 6]),
                    (at, &original[at..at + 2], &[7, 7]),
                ]),
            )
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("before bytes")),
            "{method}: {err}"
        );
        server.fetch_page(txn, page, &mut now).unwrap();
        assert_eq!(first_difference(&now, &expected), None, "{method}");

        // Rolled back: the page is as it was.
        server.abort(txn).unwrap();
        let txn = server.begin().unwrap();
        server.lock_page(txn, page, LockMode::Shared).unwrap();
        server.fetch_page(txn, page, &mut now).unwrap();
        assert_eq!(first_difference(&now, &original), None, "{method}");
        server.abort(txn).unwrap();
    }
}

#[test]
fn one_allocation_request_is_bounded_in_pages_not_bytes() {
    let fs = Arc::new(MemoryFileSystem::new());
    let server = Server::create(fs, Path::new("/s"), PAGE, ServerOptions::default()).unwrap();
    let txn = server.begin().unwrap();
    let before = server.volume().page_count();
    let most = lodestore_server::allocate_pages_max(PAGE);
    // A million pages of 4 KiB is 4 GiB: more than the largest object could ever need.
    assert!(most < 1_000_000, "{most}");
    for count in [1_000_000, most + 1, u32::MAX, 0] {
        match server.allocate_pages(txn, count) {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("pages"), "{message}"),
            other => panic!("{count} pages: {other:?}"),
        }
    }
    assert_eq!(
        server.volume().page_count(),
        before,
        "a refused request grew the file"
    );
    assert_eq!(
        server
            .allocate_pages(txn, 3)
            .unwrap()
            .iter()
            .map(|e| e.count)
            .sum::<u32>(),
        3
    );
}
