//! Object API: typed access, own writes, abort, roots, sizes from 1 byte to 1 MiB.

use bytemuck::{Pod, Zeroable};
use lodestore::{Error, Oid, Options, Persistent, RealFileSystem, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: i64,
    y: i64,
    next: Oid<Part>,
}

impl Persistent for Part {
    const TYPE_ID: u32 = 1;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
struct Other {
    value: u32,
}

impl Persistent for Other {
    const TYPE_ID: u32 = 2;
}

fn part(id: u64) -> Part {
    Part {
        id,
        x: id as i64,
        y: -(id as i64),
        next: Oid::NULL,
    }
}

#[test]
fn typed_graph_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let store = Store::create(&path, Options::new()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let mut head = Oid::NULL;
        for id in 0..1000 {
            let mut p = part(id);
            p.next = head;
            head = txn.alloc(&p).unwrap();
        }
        txn.set_root("parts", head).unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let mut cursor: Oid<Part> = txn.root_typed("parts").unwrap();
    let mut seen = 0;
    while !cursor.is_null() {
        let p = txn.read(cursor).unwrap();
        assert_eq!(p.id, 999 - seen);
        assert_eq!((p.x, p.y), (p.id as i64, -(p.id as i64)));
        cursor = p.next;
        seen += 1;
    }
    assert_eq!(seen, 1000);
}

#[test]
fn reads_see_own_writes_and_abort_discards() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let a = txn.alloc(&part(1)).unwrap();
    txn.commit().unwrap();

    let mut txn = session.begin().unwrap();
    txn.get_mut(a).unwrap().x = 42;
    assert_eq!(txn.get(a).unwrap().x, 42, "own write visible");
    let b = txn.alloc(&part(2)).unwrap();
    txn.set_root("b", b).unwrap();
    txn.abort().unwrap();

    let mut txn = session.begin().unwrap();
    assert_eq!(txn.get(a).unwrap().x, 1, "aborted write gone");
    assert_eq!(txn.root("b").unwrap(), None, "aborted root gone");
    assert!(matches!(txn.get(b), Err(Error::ObjectNotFound { .. })));
    // Dropping a transaction aborts it too.
    txn.get_mut(a).unwrap().y = 7;
    drop(txn);
    let mut txn = session.begin().unwrap();
    assert_eq!(txn.get(a).unwrap().y, -1);
    txn.commit().unwrap();

    // Another session sees committed state only.
    let mut other = store.session().unwrap();
    let mut txn = other.begin().unwrap();
    assert_eq!(txn.read(a).unwrap(), part(1));
}

#[test]
fn wrong_type_missing_object_and_reserved_objects_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let a = txn.alloc(&part(1)).unwrap();
    let wrong: Oid<Other> = Oid::from_raw(a.raw());
    assert!(matches!(txn.get(wrong), Err(Error::TypeMismatch { .. })));
    assert!(matches!(
        txn.get(Oid::<Part>::from_raw(lodestore::RawOid(u64::MAX))),
        Err(Error::ObjectNotFound { .. })
    ));
    assert!(matches!(
        txn.get(Oid::<Part>::NULL),
        Err(Error::ObjectNotFound { .. })
    ));
    let directory = lodestore::RawOid::new(0, lodestore::PageId(3), 0);
    assert!(matches!(
        txn.free(directory),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        txn.alloc_zeroed(0xFFFF_0001, 8),
        Err(Error::InvalidArgument(_))
    ));
    txn.free(a).unwrap();
    assert!(matches!(txn.get(a), Err(Error::ObjectNotFound { .. })));
    assert!(matches!(
        txn.set_root("", a),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn roots_set_replace_remove() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let a = txn.alloc(&part(1)).unwrap();
    let b = txn.alloc(&part(2)).unwrap();
    for i in 0..50 {
        txn.set_root(&format!("root-{i:02}"), a).unwrap();
    }
    txn.set_root("root-07", b).unwrap();
    assert!(txn.remove_root("root-08").unwrap());
    assert!(!txn.remove_root("root-08").unwrap());
    txn.commit().unwrap();
    drop(session);
    drop(store);
    let roots = lodestore::roots(&RealFileSystem, &path).unwrap();
    assert_eq!(roots.len(), 49);
    assert_eq!(roots["root-07"], b.raw());
    assert_eq!(roots["root-00"], a.raw());
}

#[test]
fn objects_from_one_byte_to_one_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let page_size = 8192;
    let sizes = [
        1usize,
        7,
        8,
        100,
        page_size - 64,
        page_size - 63,
        page_size,
        100_000,
        1 << 20,
    ];
    let content = |size: usize, seed: usize| -> Vec<u8> {
        (0..size)
            .map(|i| ((i * 31 + seed * 7) % 251) as u8)
            .collect()
    };
    let mut oids = Vec::new();
    {
        let store = Store::create(&path, Options::new()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        for (seed, &size) in sizes.iter().enumerate() {
            let oid = txn.alloc_bytes(9, &content(size, seed)).unwrap();
            assert_eq!(txn.info(oid).unwrap().len, size as u64);
            assert_eq!(txn.info(oid).unwrap().large, size > page_size - 64);
            oids.push(oid);
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (seed, (&size, &oid)) in sizes.iter().zip(&oids).enumerate() {
        assert_eq!(
            txn.read_all(oid).unwrap(),
            content(size, seed),
            "size {size}"
        );
    }
    // Partial overwrite across a page boundary of the 1 MiB object.
    let big = *oids.last().unwrap();
    let patch = vec![0xAB; 20_000];
    txn.write_at(big, 8000, &patch).unwrap();
    let mut back = vec![0u8; 20_002];
    txn.read_at(big, 7999, &mut back).unwrap();
    assert_eq!(back[0], content(1 << 20, sizes.len() - 1)[7999]);
    assert!(back[1..20_001].iter().all(|&b| b == 0xAB));
    assert!(matches!(
        txn.read_at(big, (1 << 20) - 1, &mut [0u8; 2]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(txn.bytes(big), Err(Error::LargeObject { .. })));
    // Freeing large objects returns their pages: the large objects fit again without growth.
    for &oid in &oids {
        txn.free(oid).unwrap();
    }
    txn.commit().unwrap();
    let pages_before = store.info().unwrap().pages;
    let mut txn = session.begin().unwrap();
    for (seed, &size) in sizes
        .iter()
        .enumerate()
        .filter(|(_, &s)| s > page_size - 64)
    {
        txn.alloc_bytes(9, &content(size, seed)).unwrap();
    }
    txn.commit().unwrap();
    assert_eq!(store.info().unwrap().pages, pages_before);
    assert_eq!(store.info().unwrap().large_objects, 4);
    drop(session);
    drop(store);
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
}

#[test]
fn resize_keeps_prefix_and_oid() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let oid = txn.alloc_bytes(3, b"hello").unwrap();
    txn.resize(oid, 11).unwrap();
    assert_eq!(txn.bytes(oid).unwrap(), b"hello\0\0\0\0\0\0");
    txn.resize(oid, 2).unwrap();
    assert_eq!(txn.bytes(oid).unwrap(), b"he");
    assert!(matches!(
        txn.resize(oid, 1 << 20),
        Err(Error::ObjectTooLarge { .. })
    ));
    txn.commit().unwrap();
}

/// Enough data to cross the first space-map page's range (about 4,064 pages of 4 KiB): the
/// second map page is created, large objects span it in two extents, and freed space on both
/// sides is found again after reopening.
#[test]
fn store_grows_past_the_first_space_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let options = Options::new().page_size(4096);
    let object = |seed: u8| -> Vec<u8> {
        (0..1 << 20)
            .map(|i: usize| (i as u8) ^ seed.wrapping_mul(29))
            .collect()
    };
    let mut oids = Vec::new();
    {
        let store = Store::create(&path, options.clone()).unwrap();
        let mut session = store.session().unwrap();
        for seed in 0..20u8 {
            let mut txn = session.begin().unwrap();
            oids.push(txn.alloc_bytes(8, &object(seed)).unwrap());
            txn.commit().unwrap();
        }
        let info = store.info().unwrap();
        assert!(info.pages > 4100, "only {} pages", info.pages);
        assert_eq!(info.pages_by_kind["space-map"], 2);
        let mut txn = session.begin().unwrap();
        for &oid in oids.iter().step_by(2) {
            txn.free(oid).unwrap();
        }
        txn.commit().unwrap();
    }
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    assert!(report.notes.is_empty(), "stale hints: {:?}", report.notes);
    let store = Store::open(&path, options).unwrap();
    let pages = store.info().unwrap().pages;
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (seed, &oid) in oids.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(txn.read_all(oid).unwrap(), object(seed as u8));
    }
    for seed in 100..110u8 {
        txn.alloc_bytes(8, &object(seed)).unwrap();
    }
    txn.commit().unwrap();
    assert_eq!(
        store.info().unwrap().pages,
        pages,
        "freed pages were not reused"
    );
}
