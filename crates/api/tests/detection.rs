//! No write escapes a detector. Under every scheme, each write path the API offers changes an
//! object; the transaction commits, the machine crashes before any data page reached the disk,
//! and recovery (which can only use the log records the client generated) must bring back
//! exactly the committed bytes. A missed write fails twice: the server refuses the commit (the
//! shipped page holds a change no record describes), and the crash would lose it.

use bytemuck::{Pod, Zeroable};
use lodestore::{Options, Persistent, RawOid, Scheme, Store, Transaction};
use lodestore_storage::{Fault, SimFileSystem};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const PAGE_SIZE: usize = 4096;
const LARGE_BYTES: usize = 3 * PAGE_SIZE + 100;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Pair {
    a: u64,
    b: u64,
}
impl Persistent for Pair {
    const TYPE_ID: u32 = 3;
}

/// The ways an application can change stored bytes.
#[derive(Clone, Copy, Debug)]
enum WritePath {
    TypedGetMut,
    TypedWrite,
    BytesMut,
    WriteAtSmall,
    WriteAtLarge,
    AllocSmall,
    AllocLarge,
    Free,
    Resize,
    SetRoot,
}

const PATHS: [WritePath; 10] = [
    WritePath::TypedGetMut,
    WritePath::TypedWrite,
    WritePath::BytesMut,
    WritePath::WriteAtSmall,
    WritePath::WriteAtLarge,
    WritePath::AllocSmall,
    WritePath::AllocLarge,
    WritePath::Free,
    WritePath::Resize,
    WritePath::SetRoot,
];

/// What the store should hold: objects by OID, and the roots.
#[derive(Clone, Debug, Default, PartialEq)]
struct Expected {
    objects: BTreeMap<RawOid, Vec<u8>>,
    roots: BTreeMap<String, RawOid>,
}

fn options(fs: &Arc<SimFileSystem>, scheme: Scheme) -> Options {
    Options::new()
        .page_size(PAGE_SIZE)
        .scheme(scheme)
        .recovery_buffer_bytes(PAGE_SIZE)
        .client_cache_bytes(32 * PAGE_SIZE)
        .server_pool_bytes(32 * PAGE_SIZE)
        .file_system(fs.clone())
}

struct Fixture {
    pair: lodestore::Oid<Pair>,
    blob: RawOid,
    large: RawOid,
}

/// Objects every path starts from, committed and checkpointed (on disk).
fn setup(txn: &mut Transaction<'_>, expected: &mut Expected) -> Fixture {
    let pair = txn.alloc(&Pair { a: 1, b: 2 }).unwrap();
    let blob_bytes: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let blob = txn.alloc_bytes(9, &blob_bytes).unwrap();
    let large_bytes: Vec<u8> = (0..LARGE_BYTES as u32).map(|i| (i * 7) as u8).collect();
    let large = txn.alloc_bytes(9, &large_bytes).unwrap();
    txn.set_root("pair", pair).unwrap();
    expected.objects.insert(
        pair.raw(),
        bytemuck::bytes_of(&Pair { a: 1, b: 2 }).to_vec(),
    );
    expected.objects.insert(blob, blob_bytes);
    expected.objects.insert(large, large_bytes);
    expected.roots.insert("pair".into(), pair.raw());
    Fixture { pair, blob, large }
}

fn apply(path: WritePath, txn: &mut Transaction<'_>, f: &Fixture, expected: &mut Expected) {
    let objects = &mut expected.objects;
    match path {
        WritePath::TypedGetMut => {
            let pair = txn.get_mut(f.pair).unwrap();
            pair.a += 40;
            pair.b = 99;
            objects.insert(
                f.pair.raw(),
                bytemuck::bytes_of(&Pair { a: 41, b: 99 }).to_vec(),
            );
        }
        WritePath::TypedWrite => {
            txn.write(f.pair, &Pair { a: 7, b: 8 }).unwrap();
            objects.insert(
                f.pair.raw(),
                bytemuck::bytes_of(&Pair { a: 7, b: 8 }).to_vec(),
            );
        }
        WritePath::BytesMut => {
            let bytes = txn.bytes_mut(f.blob).unwrap();
            bytes[0] = 0xAA;
            bytes[150..170].fill(0xBB);
            bytes[299] = 0xCC;
            let model = objects.get_mut(&f.blob).unwrap();
            model[0] = 0xAA;
            model[150..170].fill(0xBB);
            model[299] = 0xCC;
        }
        WritePath::WriteAtSmall => {
            txn.write_at(f.blob, 10, &[1, 2, 3, 4, 5]).unwrap();
            objects.get_mut(&f.blob).unwrap()[10..15].copy_from_slice(&[1, 2, 3, 4, 5]);
        }
        WritePath::WriteAtLarge => {
            // Crosses two data pages.
            let at = PAGE_SIZE - 100;
            let patch = vec![0x5A; 300];
            txn.write_at(f.large, at as u64, &patch).unwrap();
            objects.get_mut(&f.large).unwrap()[at..at + 300].copy_from_slice(&patch);
        }
        WritePath::AllocSmall => {
            let oid = txn.alloc_bytes(9, b"a new small object").unwrap();
            objects.insert(oid, b"a new small object".to_vec());
        }
        WritePath::AllocLarge => {
            let bytes = vec![0x33; 2 * PAGE_SIZE];
            let oid = txn.alloc_bytes(9, &bytes).unwrap();
            objects.insert(oid, bytes);
        }
        WritePath::Free => {
            txn.free(f.blob).unwrap();
            txn.free(f.large).unwrap();
            objects.remove(&f.blob);
            objects.remove(&f.large);
        }
        WritePath::Resize => {
            txn.resize(f.blob, 40).unwrap();
            objects.get_mut(&f.blob).unwrap().truncate(40);
        }
        WritePath::SetRoot => {
            txn.set_root("blob", f.blob).unwrap();
            expected.roots.insert("blob".into(), f.blob);
        }
    }
}

fn objects_of(fs: &SimFileSystem, path: &Path) -> BTreeMap<RawOid, Vec<u8>> {
    let mut objects = BTreeMap::new();
    lodestore::objects(fs, path, |object| {
        if !object.type_id.is_reserved() {
            objects.insert(object.oid, object.bytes);
        }
        Ok(())
    })
    .unwrap();
    objects
}

fn check_path(scheme: Scheme, path: WritePath) {
    let fs = Arc::new(SimFileSystem::new());
    let dir = Path::new("/detection/store");
    let mut expected = Expected::default();
    {
        let store = Store::create(dir, options(&fs, scheme)).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let fixture = setup(&mut txn, &mut expected);
        txn.commit().unwrap();
        store.checkpoint().unwrap();

        let mut txn = session.begin().unwrap();
        apply(path, &mut txn, &fixture, &mut expected);
        txn.commit()
            .unwrap_or_else(|e| panic!("{scheme} {path:?}: commit refused: {e}"));
        // The machine dies: nothing written since the last sync survives, so the data pages
        // of the second transaction are lost and only its log records can bring it back.
        fs.crash_now();
        drop(session);
        drop(store);
    }
    fs.recover(Fault::DropUnsynced, 1);
    drop(Store::open(dir, options(&fs, scheme)).unwrap());
    let found = Expected {
        objects: objects_of(&fs, dir),
        roots: lodestore::roots(fs.as_ref(), dir).unwrap(),
    };
    assert_eq!(found, expected, "{scheme} {path:?}: store after recovery");
    let report = lodestore::check(fs.as_ref(), dir).unwrap();
    assert!(
        report.is_sound(),
        "{scheme} {path:?}: {:?}",
        report.problems
    );
}

#[test]
fn no_write_path_escapes_any_detector() {
    for scheme in Scheme::all() {
        for path in PATHS {
            check_path(scheme, path);
        }
    }
}
