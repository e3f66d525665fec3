//! Whole-page logging at the server (QuickStore sections 3.4.2 and 3.4.3): a page's home
//! location only ever holds committed data, pages evicted mid-transaction come back from the
//! log, an abort falls back to the committed copy, the installer writes committed pages home,
//! and a store can change recovery method without losing a commit.

use lodestore::{MemoryFileSystem, Oid, Options, Persistent, RecoveryMethodKind, Scheme, Store};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: i64,
    padding: [u64; 30],
}
impl Persistent for Part {
    const TYPE_ID: u32 = 13;
}

const PARTS: u64 = 2000;
const PAGE_SIZE: usize = 4096;

/// The stores live in memory: the data file can be read while the store is open (a real
/// file is locked against a second opener).
fn memory() -> Arc<MemoryFileSystem> {
    static FS: OnceLock<Arc<MemoryFileSystem>> = OnceLock::new();
    FS.get_or_init(|| Arc::new(MemoryFileSystem::new())).clone()
}

fn base_options() -> Options {
    Options::new().page_size(PAGE_SIZE).file_system(memory())
}

fn wpl_options() -> Options {
    base_options()
        .recovery_method(RecoveryMethodKind::Wpl)
        .scheme(Scheme::WPL)
        .background_install(false)
        // Small pools on both sides: pages leave the client mid-transaction, and the server
        // drops uncommitted pages it cannot keep.
        .client_cache_bytes(8 * PAGE_SIZE)
        .server_pool_bytes(6 * PAGE_SIZE)
}

fn create_parts(path: &Path, options: Options) -> (Store, Vec<Oid<Part>>) {
    let store = Store::create(path, options).unwrap();
    let parts = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let parts = (0..PARTS)
            .map(|id| {
                txn.alloc(&Part {
                    id,
                    x: 0,
                    padding: [id; 30],
                })
                .unwrap()
            })
            .collect();
        txn.commit().unwrap();
        parts
    };
    (store, parts)
}

/// The `x` of every part as the data file holds it, read without the server.
fn x_at_home(path: &Path) -> BTreeMap<u64, i64> {
    let mut found = BTreeMap::new();
    lodestore::objects(memory().as_ref(), path, |object| {
        if object.bytes.len() == size_of::<Part>() {
            let part: Part = bytemuck::pod_read_unaligned(&object.bytes);
            found.insert(part.id, part.x);
        }
        Ok(())
    })
    .unwrap();
    found
}

/// Does the data file hold every part, each with `x`?
fn all_home(path: &Path, x: i64) -> bool {
    let home = x_at_home(path);
    home.len() == PARTS as usize && home.values().all(|&v| v == x)
}

fn set_all(store: &Store, parts: &[Oid<Part>], x: i64, commit: bool) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for &part in parts {
        txn.get_mut(part).unwrap().x = x;
    }
    // A second pass brings back pages the client cache shipped and dropped.
    for &part in parts {
        assert_eq!(txn.read(part).unwrap().x, x);
    }
    if commit {
        txn.commit().unwrap();
    } else {
        txn.abort().unwrap();
    }
}

fn read_all(store: &Store, parts: &[Oid<Part>]) -> Vec<i64> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    parts.iter().map(|&p| txn.read(p).unwrap().x).collect()
}

#[test]
fn home_locations_only_ever_hold_committed_pages() {
    let path = Path::new("/wpl").join("home");
    let (store, parts) = create_parts(&path, wpl_options());
    assert_eq!(store.recovery_method(), "wpl");
    // Closing writes every committed page home.
    drop(store);
    let home = x_at_home(&path);
    assert_eq!(home.len(), PARTS as usize);
    assert!(home.values().all(|&x| x == 0));
    let store = Store::open(&path, wpl_options()).unwrap();

    let before = store.server_stats();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for &part in &parts {
        txn.get_mut(part).unwrap().x = 5;
    }
    for &part in &parts {
        assert_eq!(txn.read(part).unwrap().x, 5);
    }
    // Mid-transaction, with hundreds of pages shipped and most dropped by the server's pool,
    // the data file still holds the committed values only.
    let home = x_at_home(&path);
    assert_eq!(home.len(), PARTS as usize);
    assert!(
        home.values().all(|&x| x == 0),
        "an uncommitted page went home"
    );
    let during = store.server_stats();
    assert!(during.page_images_logged > before.page_images_logged + 50);
    assert!(
        during.pages_reread_from_log > before.pages_reread_from_log,
        "pages evicted mid-transaction are read back from the log: {during:?}"
    );
    txn.commit().unwrap();
    drop(session);
    assert!(read_all(&store, &parts).iter().all(|&x| x == 5));
    // The server wrote whole pages to its log and logged no update records for them.
    drop(store);
    assert!(all_home(&path, 5));
}

#[test]
fn an_abort_falls_back_to_the_committed_copy_even_from_the_log() {
    let path = Path::new("/wpl").join("abort");
    let (store, parts) = create_parts(&path, wpl_options());
    // Committed x = 1 copies sit in the log (and the pool), not home yet...
    set_all(&store, &parts, 1, true);
    // ...then a transaction overwrites every page, the pool drops what it cannot keep, and
    // the transaction aborts: readers must get x = 1 back, from the log where needed.
    let rereads = store.server_stats().pages_reread_from_log;
    set_all(&store, &parts, 2, false);
    assert!(read_all(&store, &parts).iter().all(|&x| x == 1));
    assert!(store.server_stats().pages_reread_from_log > rereads);
    drop(store);
    assert!(all_home(&path, 1));
    let store = Store::open(&path, base_options()).unwrap();
    assert_eq!(
        store.recovery_method(),
        "wpl",
        "an open without a method keeps the store's"
    );
    assert!(read_all(&store, &parts).iter().all(|&x| x == 1));
}

#[test]
fn the_background_installer_writes_committed_pages_home() {
    let path = Path::new("/wpl").join("installer");
    let options = wpl_options()
        .server_pool_bytes(1 << 20)
        .background_install(true);
    let (store, parts) = create_parts(&path, options);
    store.checkpoint().unwrap();
    let checkpoints = store.server_stats().checkpoints;
    set_all(&store, &parts, 7, true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_home(&path, 7) {
        assert!(
            Instant::now() < deadline,
            "committed pages never reached home"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = store.server_stats();
    assert_eq!(stats.checkpoints, checkpoints, "no checkpoint did it");
    assert!(stats.pages_installed > 0);
}

#[test]
fn changing_recovery_method_keeps_every_commit() {
    let path = Path::new("/wpl").join("switch");
    let esm = base_options;
    let (store, parts) = create_parts(&path, esm());
    set_all(&store, &parts, 1, true);
    drop(store);
    let mut x = 1;
    for (method, scheme) in [
        (RecoveryMethodKind::Wpl, Scheme::WPL),
        (RecoveryMethodKind::Redo, Scheme::PD_REDO),
        (RecoveryMethodKind::Wpl, Scheme::SD_ESM),
        (RecoveryMethodKind::Esm, Scheme::PD_ESM),
    ] {
        let store = Store::open(&path, esm().recovery_method(method).scheme(scheme)).unwrap();
        assert_eq!(store.recovery_method(), method.name());
        assert!(read_all(&store, &parts).iter().all(|&v| v == x), "{method}");
        x += 1;
        set_all(&store, &parts, x, true);
        drop(store);
        assert!(all_home(&path, x), "{method}");
    }
}

/// A subtransaction's commit under S2/PS is appended, not forced. A page it changed that
/// leaves the pool before the commit is durable is dropped, not written home (that would
/// force the log first): reads get it back from the log, the home keeps the committed
/// version until the installer, and the transaction's forced end makes it durable.
#[test]
fn a_page_whose_commit_is_not_durable_leaves_the_pool_without_a_write() {
    use lodestore::multilevel::{Strategy, WriteBytes};
    let path = Path::new("/wpl-evict-unwritten");
    let (store, parts) = create_parts(path, wpl_options());
    // Closing writes every committed page home.
    drop(store);
    assert_eq!(x_at_home(path).len(), PARTS as usize);
    let store = Store::open(path, wpl_options()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin_multi_level_with(Strategy::S2Ps).unwrap();
    txn.apply(&WriteBytes {
        object: parts[0].raw(),
        offset: 8,
        bytes: 77i64.to_le_bytes().to_vec(),
    })
    .unwrap();
    let (flushes, before) = (store.log_stats().flushes, store.server_stats());
    // Every other page passes through the six-page pool.
    let xs = read_all(&store, &parts);
    assert_eq!(
        xs[0], 77,
        "the subtransaction's page comes back from the log"
    );
    let after = store.server_stats();
    assert!(after.pool_evictions > before.pool_evictions);
    assert_eq!(
        after.pages_evicted_unwritten - before.pages_evicted_unwritten,
        1,
        "{after:?}"
    );
    assert_eq!(
        store.log_stats().flushes,
        flushes,
        "an eviction forced the log"
    );
    assert_eq!(
        x_at_home(path)[&0],
        0,
        "the home got a page before its commit was durable"
    );
    txn.commit().unwrap();
    drop(session);
    drop(store);
    let store = Store::open(path, wpl_options()).unwrap();
    assert_eq!(read_all(&store, &parts)[0], 77);
}
