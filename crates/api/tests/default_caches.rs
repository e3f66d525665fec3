//! The default server pool is sized to the machine, and takes memory only as pages come into
//! it: a small store opened with the defaults stays small in memory however large the pool.
//! (A file of its own: resident memory is the process's, and other tests would add to it.)

use lodestore::{Options, Store};

/// Resident memory of this process, from /proc/self/statm (pages).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf only reads a system constant.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

#[test]
fn the_default_pool_is_an_eighth_of_memory_within_its_bounds() {
    let pool = lodestore::default_server_pool_bytes();
    assert!(pool >= lodestore::SERVER_POOL_BYTES_DEFAULT_MIN, "{pool}");
    assert!(pool <= lodestore::SERVER_POOL_BYTES_DEFAULT_MAX, "{pool}");
    let eighth = (lodestore::memory_bytes_max() / 8) as usize;
    if (lodestore::SERVER_POOL_BYTES_DEFAULT_MIN..=lodestore::SERVER_POOL_BYTES_DEFAULT_MAX)
        .contains(&eighth)
    {
        assert_eq!(pool, eighth);
    }
    // A store opened with the defaults reports them as its caches (the outgrown warning uses
    // them): a store of twice the caches fits, one a little larger does not.
    let caches = (lodestore::default_client_cache_bytes() + pool) as u64;
    assert_eq!(Options::new().outgrown_by(2 * caches), None);
    assert!(Options::new().outgrown_by(3 * caches).is_some());
}

#[test]
fn the_default_client_cache_is_a_sixteenth_of_memory_within_its_bounds() {
    let cache = lodestore::default_client_cache_bytes();
    assert!(
        cache >= lodestore::CLIENT_CACHE_BYTES_DEFAULT_MIN,
        "{cache}"
    );
    assert!(
        cache <= lodestore::CLIENT_CACHE_BYTES_DEFAULT_MAX,
        "{cache}"
    );
    let sixteenth = (lodestore::memory_bytes_max() / 16) as usize;
    if (lodestore::CLIENT_CACHE_BYTES_DEFAULT_MIN..=lodestore::CLIENT_CACHE_BYTES_DEFAULT_MAX)
        .contains(&sixteenth)
    {
        assert_eq!(cache, sixteenth);
    }
}

#[test]
fn a_small_store_with_the_default_pool_takes_memory_for_its_pages_only() {
    let dir = tempfile::tempdir().unwrap();
    let before = resident_bytes();
    let store = Store::create(dir.path().join("store"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    for round in 0..20u8 {
        session
            .transact(|txn| {
                for _ in 0..50 {
                    txn.alloc_bytes(1, &[round; 1000])?;
                }
                Ok(())
            })
            .unwrap();
    }
    let grown = resident_bytes().saturating_sub(before);
    // About 1 MB of objects; the pool and client cache may be backed by 2 MiB huge pages, so
    // allow some of those, but far less than the pool's size on any machine of 2 GiB or more.
    assert!(
        grown < 48 << 20,
        "resident memory grew by {grown} bytes for 1 MB of objects (pool {} bytes)",
        lodestore::default_server_pool_bytes()
    );
    drop(session);
    store.close().unwrap();
}
