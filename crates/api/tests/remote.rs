//! A store served over TCP gives the same API as an embedded one: typed objects, roots,
//! commits seen by other clients, aborts leaving no trace, every detection scheme, and the
//! server's counters over the wire.

mod common;

use lodestore::{Oid, Options, Persistent, Scheme, Store};

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: i64,
    next: Oid<Part>,
}
impl Persistent for Part {
    const TYPE_ID: u32 = 77;
}

#[test]
fn a_remote_store_behaves_like_an_embedded_one() {
    let served = common::Served::new(Options::new());
    let address = served.address.clone();

    let schemes = [
        Scheme::SD_ESM,
        Scheme::PD_ESM,
        Scheme::WPL,
        Scheme::WPL_UFFD,
        Scheme::PAGES,
        "CARD-64".parse().unwrap(),
    ];
    for scheme in schemes {
        let remote = Store::connect(&address, Options::new().scheme(scheme)).unwrap();
        assert!(remote.is_remote());
        assert_eq!(remote.page_size(), served.store.page_size());
        let mut session = remote.session().unwrap();
        let root = format!("chain-{scheme}");
        let mut txn = session.begin().unwrap();
        let mut next = Oid::NULL;
        for id in 0..500 {
            next = txn.alloc(&Part { id, x: 0, next }).unwrap();
        }
        txn.set_root(&root, next).unwrap();
        txn.commit().unwrap();

        // Update in place, then abort: nothing of it remains.
        let mut txn = session.begin().unwrap();
        let head: Oid<Part> = txn.root_typed(&root).unwrap();
        txn.get_mut(head).unwrap().x = 99;
        txn.abort().unwrap();
        // Update in place and commit.
        let mut txn = session.begin().unwrap();
        let mut at = head;
        while !at.is_null() {
            let part = txn.get_mut(at).unwrap();
            part.x = part.id as i64 * 2;
            at = part.next;
        }
        txn.commit().unwrap();

        // Another client, on its own connection, sees exactly the committed state.
        let other = Store::connect(&address, Options::new()).unwrap();
        let mut session = other.session().unwrap();
        let mut txn = session.begin().unwrap();
        let mut at: Oid<Part> = txn.root_typed(&root).unwrap();
        let mut count = 0;
        while !at.is_null() {
            let part = txn.read(at).unwrap();
            assert_eq!(part.x, part.id as i64 * 2, "{scheme}");
            at = part.next;
            count += 1;
        }
        assert_eq!(count, 500);
        txn.commit().unwrap();
        assert!(other.server_stats().commits >= 3);
        assert!(other.log_stats().bytes_flushed > 0);
    }
    // The server's own process sees the remote clients' work too.
    let mut session = served.store.session().unwrap();
    let mut txn = session.begin().unwrap();
    assert_eq!(txn.roots().unwrap().len(), schemes.len());
    txn.commit().unwrap();
    let err = Store::connect(&address, Options::new())
        .unwrap()
        .info()
        .unwrap_err();
    assert!(err.to_string().contains("lodestore info"), "{err}");

    served.stop();
    let err = Store::connect("127.0.0.1:1", Options::new())
        .err()
        .expect("nothing listens on port 1");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
}
