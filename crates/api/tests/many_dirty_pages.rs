//! Page protection with tens of thousands of dirty pages in one transaction. Each frame made
//! writable splits the cache's mapping, and Linux refuses mprotect past `vm.max_map_count`
//! (65,530 by default) mappings, which scattered writes to about 32,000 pages reach. Lodestore
//! bounds the writable frames (re-arming the oldest) so the transaction still commits;
//! userfaultfd write protection never splits the mapping and needs no bound.

use bytemuck::{Pod, Zeroable};
use lodestore::{DetectionStats, Oid, Options, Persistent, Scheme, Store};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const PAGE_SIZE: usize = 4096;
/// Pages written; twice as many exist, and every other one is written, so no two writable
/// frames are neighbours and no mappings merge.
const PAGES: usize = 40_000;

/// More than half a page: one per page.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Big {
    value: u64,
    padding: [u64; 256],
}
impl Persistent for Big {
    const TYPE_ID: u32 = 11;
}

#[test]
fn forty_thousand_scattered_dirty_pages_commit_under_signal_page_protection() {
    let stats = forty_thousand_scattered_dirty_pages_commit(Scheme::PD_ESM);
    assert!(
        stats.buffer_evictions > 0,
        "writable frames were never bounded: {stats:?}"
    );
}

#[test]
fn forty_thousand_scattered_dirty_pages_commit_under_userfaultfd_page_protection() {
    let stats = forty_thousand_scattered_dirty_pages_commit(Scheme::PD_UFFD_ESM);
    assert_eq!(
        stats.buffer_evictions, 0,
        "the recovery buffer holds every pre-image: {stats:?}"
    );
}

/// Writes one object on each of 40,000 isolated pages in one transaction, commits, reopens and
/// reads them back; returns the session's detection counters.
fn forty_thousand_scattered_dirty_pages_commit(scheme: Scheme) -> DetectionStats {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new()
        .page_size(PAGE_SIZE)
        .scheme(scheme)
        .client_cache_bytes((2 * PAGES + 1000) * PAGE_SIZE)
        .recovery_buffer_bytes((PAGES + 1000) * PAGE_SIZE)
        .server_pool_bytes(16 << 20);
    let store = Store::create(dir.path().join("s"), options.clone()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let all: Vec<Oid<Big>> = (0..2 * PAGES)
        .map(|_| txn.alloc(&Big::zeroed()).unwrap())
        .collect();
    txn.commit().unwrap();
    let mut oids: Vec<Oid<Big>> = all.iter().copied().step_by(2).collect();

    oids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        txn.get_mut(oid).unwrap().value = i as u64 + 1;
    }
    txn.commit().unwrap();
    let stats = session.detection_stats();
    assert!(stats.traps >= PAGES as u64, "{stats:?}");
    drop(session);
    drop(store);

    let store = Store::open(dir.path().join("s"), options).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (i, &oid) in oids.iter().enumerate() {
        assert_eq!(txn.get(oid).unwrap().value, i as u64 + 1);
    }
    stats
}
