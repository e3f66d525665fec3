//! Several objects at once: references to many objects read in place and one written in
//! place live together, under every detection scheme; what is written through them is
//! committed and survives reopening; a request that cannot be honoured says why.

use lodestore::{Error, MemoryFileSystem, Oid, Options, Persistent, Scheme, Store};
use std::sync::Arc;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Cell {
    value: i64,
    /// Padding so that each cell takes most of a 4 KiB page: cells sit on different pages.
    fill: [[u8; 1024]; 3],
}
impl Persistent for Cell {
    const TYPE_ID: u32 = 21;
}

fn cell(value: i64) -> Cell {
    Cell {
        value,
        fill: [[value as u8; 1024]; 3],
    }
}

#[test]
fn many_objects_read_and_one_written_at_once_under_every_scheme() {
    for scheme in Scheme::all() {
        let fs = Arc::new(MemoryFileSystem::new());
        let options = Options::new()
            .file_system(fs.clone())
            .page_size(4096)
            .scheme(scheme)
            .recovery_method(lodestore::paired_method(scheme))
            // Four pages: bringing in one object's page may evict another's.
            .client_cache_bytes(4 * 4096);
        let store = Store::create("/s", options.clone()).unwrap();
        let mut session = store.session().unwrap();
        let cells: Vec<Oid<Cell>> = {
            let mut txn = session.begin().unwrap();
            let cells = (1..=6).map(|v| txn.alloc(&cell(v)).unwrap()).collect();
            txn.commit().unwrap();
            cells
        };
        let pages: std::collections::BTreeSet<_> = cells.iter().map(|c| c.raw().page()).collect();
        assert_eq!(pages.len(), 6, "one cell a page");
        for round in 0..3 {
            let mut txn = session.begin().unwrap();
            // Touch other pages first, so the cache is full of them.
            for &other in &cells[3..] {
                txn.get(other).unwrap();
            }
            let ([a, b], sum) = txn
                .get_many_and_mut([cells[0], cells[1]], cells[2])
                .unwrap();
            sum.value = a.value + b.value + round;
            assert_eq!(a.fill[0][0], 1, "{scheme}");
            let [x, y, z] = txn.get_many([cells[0], cells[1], cells[2]]).unwrap();
            assert_eq!(x.value + y.value + round, z.value, "{scheme}");
            txn.commit().unwrap();
        }
        drop(session);
        store.close().unwrap();
        let store = Store::open("/s", options).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        assert_eq!(
            txn.read(cells[2]).unwrap().value,
            1 + 2 + 2,
            "{scheme}: after reopening"
        );
    }
}

#[test]
fn requests_that_cannot_be_honoured_say_why() {
    let fs = Arc::new(MemoryFileSystem::new());
    let store = Store::create(
        "/s",
        Options::new()
            .file_system(fs)
            .page_size(4096)
            .client_cache_bytes(4 * 4096),
    )
    .unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let cells: Vec<Oid<Cell>> = (0..8).map(|v| txn.alloc(&cell(v)).unwrap()).collect();
    // Eight pages at once in a cache of four.
    let eight: [Oid<Cell>; 8] = cells.clone().try_into().unwrap();
    match txn.get_many(eight) {
        Err(Error::InvalidArgument(reason)) => assert!(reason.contains("cache"), "{reason}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // The same object to read and to write.
    match txn.get_many_and_mut([cells[0]], cells[0]) {
        Err(Error::InvalidArgument(reason)) => {
            assert!(reason.contains("both to read and to write"), "{reason}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // An object of another type.
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Other {
        x: u64,
    }
    impl Persistent for Other {
        const TYPE_ID: u32 = 22;
    }
    let wrong: Oid<Other> = Oid::from_raw(cells[1].raw());
    assert!(matches!(
        txn.get_many([wrong]),
        Err(Error::TypeMismatch { .. })
    ));
    txn.commit().unwrap();
}

#[test]
fn objects_of_a_type_are_found_by_a_scan_with_the_transactions_own_changes() {
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Small {
        n: u64,
    }
    impl Persistent for Small {
        const TYPE_ID: u32 = 23;
    }
    let fs = Arc::new(MemoryFileSystem::new());
    let store = Store::create(
        "/s",
        Options::new()
            .file_system(fs)
            .page_size(4096)
            .client_cache_bytes(8 * 4096),
    )
    .unwrap();
    let mut session = store.session().unwrap();
    // Many pages of two types, interleaved, and a page of a large object between them.
    let (mut smalls, cells): (Vec<Oid<Small>>, Vec<Oid<Cell>>) = {
        let mut txn = session.begin().unwrap();
        let mut smalls = Vec::new();
        let mut cells = Vec::new();
        for n in 0..900u64 {
            smalls.push(txn.alloc(&Small { n }).unwrap());
            if n % 100 == 0 {
                cells.push(txn.alloc(&cell(n as i64)).unwrap());
                txn.alloc_bytes(99, &vec![7u8; 10_000]).unwrap();
            }
        }
        txn.commit().unwrap();
        (smalls, cells)
    };
    let mut txn = session.begin().unwrap();
    txn.free(smalls.remove(17)).unwrap();
    smalls.push(txn.alloc(&Small { n: 5000 }).unwrap());
    let mut found: Vec<Oid<Small>> = txn.objects_of::<Small>().collect::<Result<_, _>>().unwrap();
    let found_cells: Vec<Oid<Cell>> = txn.objects_of::<Cell>().collect::<Result<_, _>>().unwrap();
    found.sort_by_key(|o| o.raw().0);
    smalls.sort_by_key(|o| o.raw().0);
    assert_eq!(
        found, smalls,
        "the scan sees the transaction's own frees and allocations"
    );
    assert_eq!(found_cells, cells);
    let sum: u64 = found.iter().map(|&o| txn.get(o).unwrap().n).sum();
    assert_eq!(sum, (0..900u64).sum::<u64>() - 17 + 5000);
    txn.commit().unwrap();
}
