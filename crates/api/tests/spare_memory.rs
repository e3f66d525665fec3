//! The cache memory a closed store leaves to its process, kept for the next store, and handed
//! back at once on request. One test in its own process: the memory is the process's.

use bytemuck::{Pod, Zeroable};
use lodestore::{Options, Persistent, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Counter {
    value: u64,
}

impl Persistent for Counter {
    const TYPE_ID: u32 = 1;
}

#[test]
fn a_closed_stores_memory_waits_for_the_next_store_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let options = || Options::new().server_pool_bytes(4 << 20);
    let path = dir.path().join("store");
    let store = Store::create(&path, options()).unwrap();
    {
        let mut session = store.session().unwrap();
        let oid = session
            .transact(|txn| txn.alloc(&Counter { value: 7 }))
            .unwrap();
        let mut txn = session.begin().unwrap();
        assert_eq!(txn.get(oid).unwrap().value, 7);
        txn.commit().unwrap();
    }
    assert_eq!(
        lodestore::spare_memory_bytes(),
        0,
        "nothing kept while open"
    );
    store.close().unwrap();
    let kept = lodestore::spare_memory_bytes();
    assert!(
        kept >= 4 << 20,
        "the pool's mapping at least is kept after the close: {kept} bytes"
    );
    assert_eq!(lodestore::release_spare_memory(), kept);
    assert_eq!(lodestore::spare_memory_bytes(), 0);
    assert_eq!(lodestore::release_spare_memory(), 0);

    // A store opened after the release maps afresh and works as before.
    let store = Store::open(&path, options()).unwrap();
    let mut session = store.session().unwrap();
    let values = session.transact(|txn| {
        let oids = txn
            .objects_of::<Counter>()
            .collect::<lodestore::Result<Vec<_>>>()?;
        oids.into_iter()
            .map(|oid| txn.read(oid))
            .collect::<lodestore::Result<Vec<_>>>()
    });
    assert_eq!(values.unwrap(), vec![Counter { value: 7 }]);
    drop(session);
    store.close().unwrap();
    assert!(lodestore::spare_memory_bytes() >= 4 << 20);
}
