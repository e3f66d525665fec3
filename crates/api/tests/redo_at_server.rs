//! PD-REDO (redo-at-server, QuickStore section 3.5): updates of existing objects reach the
//! server as log records only, no data page is shipped, the server's copy is what the client
//! wrote, and the client's cached pages stay current across transactions.

use lodestore::{Oid, Options, Persistent, Scheme, Store};

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: i64,
    padding: [u64; 30],
}
impl Persistent for Part {
    const TYPE_ID: u32 = 12;
}

#[test]
fn redo_at_server_ships_records_and_no_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let parts: Vec<Oid<Part>> = {
        let store = Store::create(&path, Options::new()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let parts = (0..2000)
            .map(|id| {
                txn.alloc(&Part {
                    id,
                    x: 0,
                    padding: [7; 30],
                })
                .unwrap()
            })
            .collect();
        txn.commit().unwrap();
        parts
    };

    let store = Store::open(&path, Options::new().scheme(Scheme::PD_REDO)).unwrap();
    let mut session = store.session().unwrap();
    // Warm the cache, then update every tenth part, twice, in two transactions.
    let mut txn = session.begin().unwrap();
    for &part in &parts {
        txn.read(part).unwrap();
    }
    txn.commit().unwrap();
    for round in 1..=2 {
        let before = session.stats();
        let server_before = store.server_stats();
        let mut txn = session.begin().unwrap();
        for &part in parts.iter().step_by(10) {
            txn.get_mut(part).unwrap().x += round;
        }
        txn.commit().unwrap();
        let after = session.stats();
        assert_eq!(
            after.pages_shipped, before.pages_shipped,
            "round {round}: no page shipped"
        );
        assert_eq!(
            store.server_stats().dirty_pages_shipped,
            server_before.dirty_pages_shipped
        );
        assert!(store.server_stats().log_records_shipped > server_before.log_records_shipped);
        // The stamped LSNs keep the cached copies current: nothing fetched again.
        assert_eq!(
            after.pages_fetched, before.pages_fetched,
            "round {round}: pages refetched"
        );
    }
    drop(session);
    drop(store);

    // Another scheme, after a restart, reads what the records made.
    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &part) in parts.iter().enumerate() {
        let expected = if i % 10 == 0 { 3 } else { 0 };
        assert_eq!(txn.read(part).unwrap().x, expected, "part {i}");
    }
    txn.commit().unwrap();
}
