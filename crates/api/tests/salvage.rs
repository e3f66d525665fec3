//! Salvage of a store whose large object lost a page: the object is left out whole (never copied with a hole), its other pages are freed, every other
//! object keeps its OID and bytes, and the copy passes `check`.

use lodestore::{Options, Store};
use std::os::unix::fs::FileExt;

const PAGE: usize = 4096;

#[test]
fn a_large_object_missing_a_page_is_left_out_whole_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("s");
    let (small, large) = {
        let store = Store::create(&source, Options::new().page_size(PAGE)).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let small: Vec<_> = (0..50u8)
            .map(|i| txn.alloc_bytes(5, &[i; 100]).unwrap())
            .collect();
        let large = txn.alloc_bytes(6, &vec![7u8; 5 * PAGE]).unwrap();
        txn.set_root("first", small[0]).unwrap();
        txn.commit().unwrap();
        (small, large)
    };
    // Find a page of the large object and flip a byte in it.
    let data = source.join("volume-0.data");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    let pages = file.metadata().unwrap().len() / PAGE as u64;
    let mut victim = None;
    let mut buf = vec![0u8; PAGE];
    for p in 4..pages {
        file.read_exact_at(&mut buf, p * PAGE as u64).unwrap();
        if lodestore_storage::page::kind(&buf) == Some(lodestore_storage::PageKind::LargeData) {
            victim = Some(p);
            break;
        }
    }
    let victim = victim.expect("a large-data page");
    file.write_all_at(&[0xAB], victim * PAGE as u64 + 1000)
        .unwrap();
    drop(file);

    let out = dir.path().join("copy");
    let salvaged = lodestore::salvage(&source, &out).unwrap();
    assert_eq!(salvaged.log_unusable, None);
    assert_eq!(salvaged.report.damaged_pages.len(), 1);
    assert_eq!(salvaged.report.damaged_pages[0].0 as u64, victim);
    assert_eq!(salvaged.report.large_objects_lost, vec![large.0]);
    assert!(salvaged.report.orphaned_pages_freed >= 4);
    assert!(salvaged.report.roots_copied);

    let report = lodestore::check(&lodestore::RealFileSystem, &out).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    let store = Store::open(&out, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in small.iter().enumerate() {
        assert_eq!(txn.read_all(oid).unwrap(), vec![i as u8; 100]);
    }
    assert_eq!(txn.root("first").unwrap(), Some(small[0]));
    assert!(txn.read_all(large).is_err());
}
