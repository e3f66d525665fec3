//! Placement of new objects: in free space anywhere by default, or clustered on pages of the
//! session's own, as a loader keeping groups of objects apart (OO7's private modules) needs.

use lodestore::{Options, PageId, Placement, RawOid, Store};
use std::collections::BTreeSet;

/// Allocates `count` objects of `len` bytes in one transaction and returns their pages.
fn allocate(session: &mut lodestore::Session, count: usize, len: usize) -> BTreeSet<PageId> {
    let mut txn = session.begin().unwrap();
    let pages = (0..count)
        .map(|i| {
            let oid: RawOid = txn.alloc_bytes(1, &vec![i as u8; len]).unwrap();
            oid.page()
        })
        .collect();
    txn.commit().unwrap();
    pages
}

#[test]
fn clustered_objects_stay_off_other_pages_and_fill_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    // Another loader leaves a page with room to spare.
    let mut other = store.session().unwrap();
    let others = allocate(&mut other, 3, 100);
    assert_eq!(others.len(), 1, "three small objects share a page");

    // By default a new object goes into that free space.
    let mut anywhere = store.session().unwrap();
    assert_eq!(anywhere.placement(), Placement::Anywhere);
    let filled = allocate(&mut anywhere, 1, 100);
    assert!(
        filled.is_subset(&others),
        "free space reused: {filled:?} {others:?}"
    );

    // A cluster takes pages of its own, and its later transactions fill them further.
    let mut loader = store.session().unwrap();
    loader.set_placement(Placement::Clustered);
    let first = allocate(&mut loader, 3, 100);
    assert!(
        first.is_disjoint(&others),
        "{first:?} shares a page with {others:?}"
    );
    let second = allocate(&mut loader, 3, 100);
    assert_eq!(
        second, first,
        "the second transaction fills the cluster's page"
    );

    // A new cluster starts on a page of its own again.
    loader.set_placement(Placement::Clustered);
    let next = allocate(&mut loader, 1, 100);
    assert!(
        next.is_disjoint(&first) && next.is_disjoint(&others),
        "{next:?}"
    );
}

#[test]
fn an_aborted_transaction_leaves_nothing_in_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut loader = store.session().unwrap();
    loader.set_placement(Placement::Clustered);
    let committed = allocate(&mut loader, 2, 100);
    {
        let mut txn = loader.begin().unwrap();
        txn.alloc_bytes(1, &[7; 5000]).unwrap();
        txn.abort().unwrap();
    }
    // The cluster goes on from its committed page.
    let after = allocate(&mut loader, 2, 100);
    assert_eq!(after, committed);
}
