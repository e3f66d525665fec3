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

/// Multi-level transactions over TCP: increment locks travel on the wire (two clients add to
/// one counter at once), a client's abort compensates through the server, and a client that
/// leaves mid-transaction is compensated by the store that serves it, which then releases
/// its semantic locks.
#[test]
fn multi_level_transactions_run_over_the_network_and_a_client_that_leaves_is_compensated() {
    use lodestore::multilevel::{Add, WriteBytes};
    use lodestore::RawOid;
    use std::time::{Duration, Instant};
    let served = common::Served::new(Options::new().lock_wait_timeout(Duration::from_millis(500)));
    let address = served.address.clone();
    let value = |oid: RawOid| -> i64 {
        let mut session = served.store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let mut b = [0u8; 8];
        txn.read_at(oid, 0, &mut b).unwrap();
        i64::from_le_bytes(b)
    };
    let (a, b) = (
        Store::connect(&address, Options::new()).unwrap(),
        Store::connect(&address, Options::new()).unwrap(),
    );
    let counters: Vec<RawOid> = a
        .session()
        .unwrap()
        .transact(|txn| (0..2).map(|_| txn.alloc_zeroed(5, 3000)).collect())
        .unwrap();
    let (c0, c1) = (counters[0], counters[1]);
    let (mut s1, mut s2) = (a.session().unwrap(), b.session().unwrap());
    let mut t1 = s1.begin_multi_level().unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    assert_eq!(t1.apply(&Add::field(c0, 0, 5)).unwrap(), 5);
    // Increments share the counter: no wait (one would time out after 500 ms and fail).
    assert_eq!(t2.apply(&Add::field(c0, 0, 7)).unwrap(), 12);
    t2.abort().unwrap();
    t1.commit().unwrap();
    assert_eq!(value(c0), 5);

    // A client leaves with its transaction open: its connection closes, nothing compensated
    // at the client.
    let leaving = Store::connect(&address, Options::new()).unwrap();
    let mut session = leaving.session().unwrap();
    let mut txn = session.begin_multi_level().unwrap();
    txn.apply(&Add::field(c1, 0, 100)).unwrap();
    txn.apply(&Add::field(c0, 0, 1)).unwrap();
    std::mem::forget(txn);
    drop(session);
    drop(leaving);
    let deadline = Instant::now() + Duration::from_secs(10);
    while (value(c0), value(c1)) != (5, 0) {
        assert!(
            Instant::now() < deadline,
            "not compensated: {} {}",
            value(c0),
            value(c1)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its semantic locks went with it: an exclusive one is granted at once.
    let mut txn = s2.begin_multi_level().unwrap();
    txn.apply(&WriteBytes {
        object: c1,
        offset: 0,
        bytes: 42i64.to_le_bytes().to_vec(),
    })
    .unwrap();
    txn.commit().unwrap();
    assert_eq!(value(c1), 42);
}

/// Strategy S2/PS over the network: a subtransaction's end ships its pages, appends its commit
/// and releases its page locks in one request without forcing the log; only the transaction's
/// end is forced. S2 forces every subtransaction's end as well.
#[test]
fn s2ps_over_the_network_forces_only_the_end_of_the_transaction() {
    use lodestore::multilevel::{Add, Strategy};
    use lodestore::RawOid;
    use std::time::Duration;
    let served = common::Served::new(Options::new().lock_wait_timeout(Duration::from_millis(500)));
    let (a, b) = (
        Store::connect(&served.address, Options::new()).unwrap(),
        Store::connect(&served.address, Options::new()).unwrap(),
    );
    let counters: Vec<RawOid> = a
        .session()
        .unwrap()
        .transact(|txn| (0..3).map(|_| txn.alloc_zeroed(5, 64)).collect())
        .unwrap();
    let (mut s1, mut s2) = (a.session().unwrap(), b.session().unwrap());
    let flushes = || served.store.log_stats().flushes;
    for (strategy, want) in [(Strategy::S2Ps, 1), (Strategy::S2, 4)] {
        let before = flushes();
        let mut txn = s1.begin_multi_level_with(strategy).unwrap();
        for &counter in &counters {
            txn.apply(&Add::field(counter, 0, 1)).unwrap();
        }
        // The subtransactions' page locks are gone: another client's increment of a counter
        // on the same page goes through while this transaction is open (a wait would time
        // out after 500 ms).
        let mut other = s2.begin_multi_level_with(strategy).unwrap();
        other.apply(&Add::field(counters[0], 0, 10)).unwrap();
        other.commit().unwrap();
        let other_flushes = if strategy == Strategy::S2 { 2 } else { 1 };
        txn.commit().unwrap();
        assert_eq!(flushes() - before, want + other_flushes, "{strategy:?}");
    }
    let mut session = served.store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let value = |txn: &mut lodestore::Transaction<'_>, oid: RawOid| {
        let mut bytes = [0u8; 8];
        txn.read_at(oid, 0, &mut bytes).unwrap();
        i64::from_le_bytes(bytes)
    };
    assert_eq!(value(&mut txn, counters[0]), 22);
    assert_eq!(value(&mut txn, counters[1]), 2);
    assert_eq!(value(&mut txn, counters[2]), 2);
}

/// Over TCP an S2/PS subtransaction of increments is one request (`RunIncrements`): the server
/// runs it in one hold of its state and asks its lock manager for no page lock. S2 forces each
/// end, so the server runs its steps and locks the page once per subtransaction.
#[test]
fn increments_travel_to_the_server_in_one_request() {
    use lodestore::multilevel::{Add, Strategy};
    use lodestore::RawOid;
    let served = common::Served::new(Options::new());
    let client = Store::connect(&served.address, Options::new()).unwrap();
    let mut session = client.session().unwrap();
    let counters: Vec<RawOid> = session
        .transact(|txn| (0..3).map(|_| txn.alloc_zeroed(5, 64)).collect())
        .unwrap();
    let mut lock_requests = Vec::new();
    for strategy in [Strategy::S2Ps, Strategy::S2] {
        let before = served.store.lock_stats().requests;
        let mut txn = session.begin_multi_level_with(strategy).unwrap();
        for &counter in &counters {
            assert_eq!(txn.apply(&Add::field(counter, 0, 3)).unwrap() % 3, 0);
        }
        txn.commit().unwrap();
        lock_requests.push(served.store.lock_stats().requests - before);
    }
    // Both ask for the same semantic locks; S2 adds a page lock for each subtransaction.
    assert_eq!(
        lock_requests[1] - lock_requests[0],
        counters.len() as u64,
        "{lock_requests:?}"
    );
    let mut txn = session.begin().unwrap();
    for &counter in &counters {
        let mut bytes = [0u8; 8];
        txn.read_at(counter, 0, &mut bytes).unwrap();
        assert_eq!(i64::from_le_bytes(bytes), 6);
    }
}
