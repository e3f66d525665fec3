//! Snapshots and reads as of them, under every recovery method: a dump taken at the moment of
//! a snapshot equals the dump read as of it later, after any mix of commits, aborts,
//! checkpoints, reopenings and further snapshots.

mod common;

use lodestore::{
    AsOf, Error, MemoryFileSystem, Options, RawOid, RecoveryMethodKind, Scheme, Snapshot, Store,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Objects of the test live under roots named `o0`, `o1`, ...
const ROOTS_MAX: usize = 24;
const TYPE: u32 = 7;

/// Root name -> object bytes.
type Dump = BTreeMap<String, Vec<u8>>;

fn options(fs: &Arc<MemoryFileSystem>, method: RecoveryMethodKind, scheme: Scheme) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .client_cache_bytes(1 << 20)
        .server_pool_bytes(256 << 10)
        .checkpoint_log_bytes(256 << 10)
        .recovery_method(method)
        .scheme(scheme)
        .snapshots(true)
}

fn current_dump(store: &Store) -> Dump {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let mut dump = Dump::new();
    for (name, oid) in txn.roots().unwrap() {
        dump.insert(name, txn.read_all(oid).unwrap());
    }
    txn.commit().unwrap();
    dump
}

fn dump_as_of(store: &Store, snapshot: u64) -> Dump {
    let mut session = store.session().unwrap();
    let mut txn = session.begin_as_of(AsOf::Snapshot(snapshot)).unwrap();
    let mut dump = Dump::new();
    for (name, oid) in txn.roots().unwrap() {
        dump.insert(name, txn.read_all(oid).unwrap());
    }
    txn.finish().unwrap();
    dump
}

/// One random transaction: updates, new objects, deletions; committed or aborted.
fn random_transaction(store: &Store, rng: &mut StdRng) {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let mut roots = txn.roots().unwrap();
    for _ in 0..rng.random_range(1..6) {
        let name = format!("o{}", rng.random_range(0..ROOTS_MAX));
        match (roots.get(&name), rng.random_range(0..10)) {
            (Some(&oid), 0) => {
                txn.free(oid).unwrap();
                txn.remove_root(&name).unwrap();
                roots.remove(&name);
            }
            (Some(&oid), _) => {
                let len = txn.info(oid).unwrap().len as usize;
                let at = rng.random_range(0..len);
                let value: u8 = rng.random();
                txn.write_at(oid, at as u64, &[value]).unwrap();
            }
            (None, _) => {
                // Some objects larger than a page, stored across pages of their own.
                let len = if rng.random_range(0..8) == 0 {
                    rng.random_range(5000..12000)
                } else {
                    rng.random_range(8..400)
                };
                let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let oid: RawOid = txn.alloc_bytes(TYPE, &bytes).unwrap();
                txn.set_root(&name, oid).unwrap();
                roots.insert(name, oid);
            }
        }
    }
    if rng.random_range(0..5) == 0 {
        txn.abort().unwrap();
    } else {
        txn.commit().unwrap();
    }
}

fn check_every_snapshot(store: &Store, taken: &[(Snapshot, Dump)], context: &str) {
    assert_eq!(
        store.snapshots().unwrap(),
        taken.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        "{context}: the history"
    );
    for (snapshot, dump) in taken {
        assert_eq!(
            &dump_as_of(store, snapshot.id),
            dump,
            "{context}: as of snapshot {}",
            snapshot.id
        );
    }
}

#[test]
fn reads_as_of_a_snapshot_see_exactly_what_was_committed_before_it_under_every_method() {
    for (method, scheme) in [
        (RecoveryMethodKind::Esm, Scheme::SD_ESM),
        (RecoveryMethodKind::Redo, Scheme::PD_REDO),
        (RecoveryMethodKind::Wpl, Scheme::WPL),
    ] {
        let fs = Arc::new(MemoryFileSystem::new());
        let path = Path::new("/store");
        let mut store = Store::create(path, options(&fs, method, scheme)).unwrap();
        let mut rng = StdRng::seed_from_u64(0x5eed + method as u64);
        let mut taken: Vec<(Snapshot, Dump)> = Vec::new();
        let mut deleted = 0;
        for step in 0..240 {
            match rng.random_range(0..20) {
                0..=1 => {
                    let dump = current_dump(&store);
                    let snapshot = store.snapshot().unwrap();
                    if let Some((last, _)) = taken.last() {
                        assert!(snapshot.id > last.id && snapshot.time_us > last.time_us);
                    }
                    taken.push((snapshot, dump));
                }
                2 => store.checkpoint().unwrap(),
                4 if !taken.is_empty() => {
                    let victim = rng.random_range(0..taken.len());
                    let (snapshot, _) = taken.remove(victim);
                    assert_eq!(store.delete_snapshot(snapshot.id).unwrap(), snapshot);
                    deleted += 1;
                }
                5 => store.archive_snapshot_pages().unwrap(),
                3 => {
                    store.close().unwrap();
                    store = Store::open(path, options(&fs, method, scheme)).unwrap();
                    check_every_snapshot(&store, &taken, &format!("{method} after reopening"));
                }
                _ => random_transaction(&store, &mut rng),
            }
            if step % 40 == 39 {
                check_every_snapshot(&store, &taken, &format!("{method} at step {step}"));
            }
        }
        assert!(
            taken.len() >= 3 && deleted >= 3,
            "{method}: {} snapshots kept, {deleted} deleted",
            taken.len()
        );
        check_every_snapshot(&store, &taken, &format!("{method} at the end"));
        // Without the option, a store that keeps snapshots still does.
        store.close().unwrap();
        let plain = Options::new()
            .file_system(fs.clone())
            .recovery_method(method)
            .scheme(scheme);
        let store = Store::open(path, plain).unwrap();
        check_every_snapshot(
            &store,
            &taken,
            &format!("{method} opened without the option"),
        );
    }
}

#[test]
fn a_reader_of_the_past_sees_committed_bytes_only_and_never_waits_for_a_writer() {
    const OBJECTS: usize = 12;
    for (method, scheme) in [
        (RecoveryMethodKind::Esm, Scheme::SD_ESM),
        (RecoveryMethodKind::Redo, Scheme::PD_REDO),
        (RecoveryMethodKind::Wpl, Scheme::WPL),
    ] {
        let fs = Arc::new(MemoryFileSystem::new());
        // A client cache of four pages: the writer's changes reach the server on eviction,
        // long before its commit.
        let store = Store::create(
            "/store",
            options(&fs, method, scheme).client_cache_bytes(4 * 4096),
        )
        .unwrap();
        let mut writer = store.session().unwrap();
        let oids: Vec<RawOid> = {
            let mut txn = writer.begin().unwrap();
            let oids = (0..OBJECTS)
                .map(|_| txn.alloc_bytes(TYPE, &[1u8; 3000]).unwrap())
                .collect();
            txn.commit().unwrap();
            oids
        };
        let snapshot = store.snapshot().unwrap();
        let shipped = |store: &Store| {
            let stats = store.server_stats();
            stats.log_records_shipped + stats.dirty_pages_shipped
        };
        let before = shipped(&store);
        let mut txn = writer.begin().unwrap();
        for &oid in &oids {
            txn.write_at(oid, 0, &[9u8; 3000]).unwrap();
        }
        store.checkpoint().unwrap();
        assert!(
            shipped(&store) > before,
            "{method}: the writer shipped nothing before its commit"
        );
        let mut reader = store.session().unwrap();
        {
            let mut past = reader.begin_as_of(AsOf::Snapshot(snapshot.id)).unwrap();
            for &oid in &oids {
                assert_eq!(past.read_all(oid).unwrap(), vec![1u8; 3000], "{method}");
            }
        }
        txn.commit().unwrap();
        let later = store.snapshot().unwrap();
        let mut past = reader.begin_as_of(AsOf::Snapshot(snapshot.id)).unwrap();
        for &oid in &oids {
            assert_eq!(past.read_all(oid).unwrap(), vec![1u8; 3000], "{method}");
        }
        past.finish().unwrap();
        let mut now = reader.begin_as_of(AsOf::Snapshot(later.id)).unwrap();
        for &oid in &oids {
            assert_eq!(now.read_all(oid).unwrap(), vec![9u8; 3000], "{method}");
        }
    }
}

#[test]
fn times_name_the_newest_snapshot_at_or_before_them_and_bad_requests_say_why() {
    let fs = Arc::new(MemoryFileSystem::new());
    let store = Store::create(
        "/store",
        options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM),
    )
    .unwrap();
    let mut session = store.session().unwrap();
    let before_any = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
    match session.begin_as_of(AsOf::Time(before_any)) {
        Err(Error::NoSuchSnapshot { reason }) => {
            assert!(reason.contains("no snapshots"), "{reason}")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a read as of a time with no snapshot began"),
    }
    let oid = {
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(TYPE, b"first").unwrap();
        txn.set_root("x", oid).unwrap();
        txn.commit().unwrap();
        oid
    };
    let first = store.snapshot().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, b"secnd").unwrap();
        txn.commit().unwrap();
    }
    let second = store.snapshot().unwrap();
    let at = |us: u64| std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
    for (time, expected) in [
        (at(first.time_us), first.id),
        (at(second.time_us - 1), first.id),
        (at(second.time_us), second.id),
        (std::time::SystemTime::now(), second.id),
    ] {
        let txn = session.begin_as_of(AsOf::Time(time)).unwrap();
        assert_eq!(txn.snapshot(), expected);
    }
    match session.begin_as_of(AsOf::Time(at(first.time_us - 1))) {
        Err(Error::NoSuchSnapshot { reason }) => {
            assert!(reason.contains("before the first snapshot"), "{reason}")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a read before the first snapshot began"),
    }
    match session.begin_as_of(AsOf::Snapshot(99)) {
        Err(Error::NoSuchSnapshot { reason }) => assert!(reason.contains("99"), "{reason}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a read as of an unknown snapshot began"),
    };
}

#[test]
fn a_store_without_snapshots_refuses_them_by_name() {
    let fs = Arc::new(MemoryFileSystem::new());
    let store = Store::create("/store", Options::new().file_system(fs.clone())).unwrap();
    assert!(matches!(store.snapshot(), Err(Error::Unsupported(_))));
    assert!(store.snapshots().unwrap().is_empty());
    let mut session = store.session().unwrap();
    match session.begin_as_of(AsOf::Snapshot(1)) {
        Err(Error::Unsupported(reason)) => assert!(reason.contains("snapshots"), "{reason}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("began"),
    };
}

#[test]
fn deleting_snapshots_keeps_what_the_others_read_and_reclaims_the_rest() {
    let fs = Arc::new(MemoryFileSystem::new());
    let store = Store::create(
        "/store",
        options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM),
    )
    .unwrap();
    let mut session = store.session().unwrap();
    let oid = {
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(TYPE, &[0u8; 2000]).unwrap();
        txn.commit().unwrap();
        oid
    };
    // Ten snapshots, the object changed after each: one copy of its page per snapshot.
    let mut taken = Vec::new();
    for round in 0..10u8 {
        taken.push(store.snapshot().unwrap());
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[round + 1; 2000]).unwrap();
        txn.commit().unwrap();
    }
    store.archive_snapshot_pages().unwrap();
    let full = store.snapshot_stats().unwrap().archive_bytes;
    // A reader holds snapshot 3: it cannot go.
    {
        let mut reader = store.session().unwrap();
        let _past = reader.begin_as_of(AsOf::Snapshot(taken[2].id)).unwrap();
        match store.delete_snapshot(taken[2].id) {
            Err(Error::InvalidArgument(reason)) => assert!(reason.contains("reading"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
    // The first eight go; the two left still read what they held.
    let cutoff = std::time::UNIX_EPOCH + std::time::Duration::from_micros(taken[8].time_us);
    let deleted = store.delete_snapshots_before(cutoff).unwrap();
    assert_eq!(deleted, taken[..8].to_vec());
    assert_eq!(store.snapshots().unwrap(), taken[8..].to_vec());
    for (i, snapshot) in taken.iter().enumerate().skip(8) {
        let mut past = session.begin_as_of(AsOf::Snapshot(snapshot.id)).unwrap();
        assert_eq!(past.read_all(oid).unwrap(), vec![i as u8; 2000]);
    }
    let after = store.snapshot_stats().unwrap().archive_bytes;
    assert!(
        after * 3 < full,
        "eight of ten copies reclaimed: {after} bytes left of {full}"
    );
    // Deleting the newest while an older one remains keeps the copy the older one reads.
    store.delete_snapshot(taken[9].id).unwrap();
    let mut past = session.begin_as_of(AsOf::Snapshot(taken[8].id)).unwrap();
    assert_eq!(past.read_all(oid).unwrap(), vec![8u8; 2000]);
    drop(past);
    assert!(matches!(
        store.delete_snapshot(taken[9].id),
        Err(Error::NoSuchSnapshot { .. })
    ));
}

#[test]
fn snapshots_over_tcp_behave_as_embedded_ones() {
    let served = common::Served::new(Options::new().snapshots(true));
    let address = served.address.clone();
    let remote = Store::connect(&address, Options::new()).unwrap();
    let mut session = remote.session().unwrap();
    let oid = {
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(TYPE, b"one").unwrap();
        txn.set_root("x", oid).unwrap();
        txn.commit().unwrap();
        oid
    };
    let first = remote.snapshot().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, b"two").unwrap();
        txn.commit().unwrap();
    }
    // Taken in this process, heard of by the remote session through the news on its replies.
    let second = served.store.snapshot().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, b"thr").unwrap();
        txn.commit().unwrap();
    }
    assert_eq!(remote.snapshots().unwrap(), vec![first, second]);
    let at = |us: u64| std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
    for (as_of, expected) in [
        (AsOf::Snapshot(first.id), b"one"),
        (AsOf::Time(at(first.time_us)), b"one"),
        (AsOf::Time(at(second.time_us - 1)), b"one"),
        (AsOf::Snapshot(second.id), b"two"),
        (AsOf::Time(std::time::SystemTime::now()), b"two"),
    ] {
        let mut past = session.begin_as_of(as_of).unwrap();
        assert_eq!(&past.read_all(oid).unwrap()[..], expected, "{as_of:?}");
    }
    match session.begin_as_of(AsOf::Time(at(first.time_us - 1))) {
        Err(Error::NoSuchSnapshot { reason }) => {
            assert!(reason.contains("before the first"), "{reason}")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("began before the first snapshot"),
    }
    // Deleted elsewhere after this session heard of it: a time names the older one now.
    served.store.delete_snapshot(second.id).unwrap();
    {
        let mut past = session
            .begin_as_of(AsOf::Time(std::time::SystemTime::now()))
            .unwrap();
        assert_eq!(past.snapshot(), first.id);
        assert_eq!(&past.read_all(oid).unwrap()[..], b"one");
    }
    assert_eq!(remote.delete_snapshot(first.id).unwrap(), first);
    assert!(remote.snapshots().unwrap().is_empty());
    drop(session);
    drop(remote);
    served.stop();
}

#[test]
fn a_damaged_or_missing_archive_is_named_and_current_work_goes_on() {
    use lodestore::{FileSystem, Snapshots};
    let fs = Arc::new(MemoryFileSystem::new());
    let path = Path::new("/store");
    let opts = || options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM);
    let store = Store::create(path, opts()).unwrap();
    let mut session = store.session().unwrap();
    let oid = {
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(TYPE, &[1u8; 500]).unwrap();
        txn.commit().unwrap();
        oid
    };
    let snapshot = store.snapshot().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[2u8; 500]).unwrap();
        txn.commit().unwrap();
    }
    store.archive_snapshot_pages().unwrap();
    // Flip bytes in the middle of every copy's image in the archive.
    let archive = Snapshots::local_archive_path(path);
    let file = fs.open(&archive, lodestore::OpenMode::Existing).unwrap();
    let len = file.len().unwrap();
    assert!(len > 4096, "the copy was archived");
    file.write_at(len / 2, &[0xAB; 16]).unwrap();
    match session.begin_as_of(AsOf::Snapshot(snapshot.id)) {
        Ok(mut past) => match past.read_all(oid) {
            Err(Error::CorruptArchive { path, page, .. }) => {
                assert_eq!(path, archive);
                assert_eq!(page, oid.page());
            }
            other => panic!("a damaged copy was read: {other:?}"),
        },
        Err(other) => panic!("{other}"),
    }
    // Current transactions do not notice.
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[3u8; 500]).unwrap();
        txn.commit().unwrap();
    }
    drop(session);
    store.close().unwrap();
    // A missing archive is not made afresh: the store opens, current work goes on, and reads
    // of the past fail naming it.
    fs.remove(&archive).unwrap();
    let store = Store::open(path, opts()).unwrap();
    let mut session = store.session().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[4u8; 500]).unwrap();
        txn.commit().unwrap();
    }
    let failed = session
        .begin_as_of(AsOf::Snapshot(snapshot.id))
        .and_then(|mut past| past.read_all(oid));
    match failed {
        Err(Error::CorruptFile { path, reason }) => {
            assert_eq!(path, archive);
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("read the past without its archive: {other:?}"),
    }
    assert!(!fs.exists(&archive), "an empty archive was made");
    drop(session);
    drop(store);
    // An archive damaged where its index cannot be rebuilt (its header) is left as it is for
    // salvage: the store opens, and reads of the past fail naming it.
    let file = fs.open(&archive, lodestore::OpenMode::CreateNew).unwrap();
    file.write_at(0, b"not an archive of page copies at all")
        .unwrap();
    let store = Store::open(path, opts()).unwrap();
    let mut session = store.session().unwrap();
    {
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[5u8; 500]).unwrap();
        txn.commit().unwrap();
    }
    match session
        .begin_as_of(AsOf::Snapshot(snapshot.id))
        .and_then(|mut past| past.read_all(oid))
    {
        Err(Error::CorruptFile { path, reason }) => {
            assert_eq!(path, archive);
            assert!(reason.contains("damaged"), "{reason}");
        }
        other => panic!("read the past from a damaged archive: {other:?}"),
    }
}

#[test]
fn a_snapshot_taken_while_a_writer_runs_holds_the_pages_as_committed_before_it() {
    const OBJECTS: usize = 12;
    for (method, scheme) in [
        (RecoveryMethodKind::Esm, Scheme::SD_ESM),
        (RecoveryMethodKind::Redo, Scheme::PD_REDO),
        (RecoveryMethodKind::Wpl, Scheme::WPL),
    ] {
        let fs = Arc::new(MemoryFileSystem::new());
        let store = Store::create(
            "/store",
            options(&fs, method, scheme).client_cache_bytes(4 * 4096),
        )
        .unwrap();
        let mut writer = store.session().unwrap();
        let oids: Vec<RawOid> = {
            let mut txn = writer.begin().unwrap();
            let oids = (0..OBJECTS)
                .map(|_| txn.alloc_bytes(TYPE, &[1u8; 3000]).unwrap())
                .collect();
            txn.commit().unwrap();
            oids
        };
        // No snapshot yet: the writer's first changes keep no committed images. Its changes
        // reach the server (the cache holds four pages) before the snapshot is taken.
        let mut txn = writer.begin().unwrap();
        for &oid in &oids {
            txn.write_at(oid, 0, &[9u8; 3000]).unwrap();
        }
        store.checkpoint().unwrap();
        let snapshot = store.snapshot().unwrap();
        let mut reader = store.session().unwrap();
        let read_past = |reader: &mut lodestore::Session| {
            let mut past = reader.begin_as_of(AsOf::Snapshot(snapshot.id)).unwrap();
            for &oid in &oids {
                assert_eq!(past.read_all(oid).unwrap(), vec![1u8; 3000], "{method}");
            }
        };
        read_past(&mut reader);
        txn.commit().unwrap();
        read_past(&mut reader);
        store.archive_snapshot_pages().unwrap();
        read_past(&mut reader);
    }
}

/// An archive node on loopback over a local archive in memory.
fn archive_node(page_size: usize) -> lodestore::RunningNode {
    let fs = Arc::new(MemoryFileSystem::new());
    let archive = lodestore::LocalArchive::open(fs, Path::new("/archive"), page_size).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    lodestore::RunningNode::spawn(
        Arc::new(archive),
        page_size,
        listener,
        lodestore::ServeLimits::default(),
        lodestore::ServerAuth::none(),
    )
    .unwrap()
}

/// Every root object as of `snapshot`, or the first error.
fn read_past(store: &Store, snapshot: u64) -> lodestore::Result<Vec<Vec<u8>>> {
    let mut session = store.session()?;
    let mut past = session.begin_as_of(AsOf::Snapshot(snapshot))?;
    let roots = past.roots()?;
    roots.values().map(|&oid| past.read_all(oid)).collect()
}

/// Snapshot pages archived on three archive nodes with a replication factor of two read back
/// as the past they were taken of, while one node is down and after the store reopens.
#[test]
fn snapshot_pages_on_archive_nodes_read_back_while_a_node_is_down() {
    let mut nodes: Vec<lodestore::RunningNode> = (0..3).map(|_| archive_node(4096)).collect();
    let addresses: Vec<String> = nodes.iter().map(|n| n.address().to_string()).collect();
    let archive = Arc::new(
        lodestore::ArchiveNodes::new(&addresses, 2, lodestore::Credentials::default()).unwrap(),
    );
    let fs = Arc::new(MemoryFileSystem::new());
    let path = Path::new("/store");
    let opts =
        || options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM).snapshot_archive(archive.clone());
    let store = Store::create(path, opts()).unwrap();
    let mut rng = StdRng::seed_from_u64(25);
    let mut taken = Vec::new();
    for _ in 0..6 {
        for _ in 0..8 {
            random_transaction(&store, &mut rng);
        }
        taken.push((store.snapshot().unwrap(), current_dump(&store)));
    }
    for _ in 0..8 {
        random_transaction(&store, &mut rng);
    }
    store.archive_snapshot_pages().unwrap();
    let stats = store.snapshot_stats().unwrap();
    assert_eq!(stats.staged_copies, 0, "every copy is on the nodes");
    assert!(stats.archive_bytes > 0);
    check_every_snapshot(&store, &taken, "three nodes");
    nodes[1].stop().unwrap();
    check_every_snapshot(&store, &taken, "node 1 down");
    store.close().unwrap();
    // Opened with its local archive, which never held these pages: the past is refused by
    // name, not read as the present.
    let local = Store::open(path, options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM)).unwrap();
    match read_past(&local, taken[0].0.id) {
        Err(e) => assert!(
            e.to_string().contains("archived at lodestore://") && e.to_string().contains("local"),
            "{e}"
        ),
        Ok(_) => panic!("read the past from an archive that never held it"),
    }
    local.close().unwrap();
    let store = Store::open(path, opts()).unwrap();
    check_every_snapshot(&store, &taken, "reopened, node 1 down");
    // Two of three down: reads of the past fail by name; the present goes on.
    nodes[2].stop().unwrap();
    match read_past(&store, taken[0].0.id) {
        Err(e) => assert!(e.to_string().contains(&addresses[2]), "{e}"),
        Ok(_) => panic!("read the past from one node of three with a factor of two"),
    }
    random_transaction(&store, &mut rng);
    store.close().unwrap();
}

/// One workload, one seed, its snapshot pages archived on each backend in turn (the local
/// archive, an archive node, a folder elsewhere, S3 on s3s-fs and on moto, a DHT of archive
/// peers): every snapshot read back, after a reopening too, is the same dump whichever backend
/// held its pages.
#[cfg(feature = "s3")]
#[test]
fn an_as_of_dump_is_the_same_whichever_backend_holds_the_pages() {
    use lodestore_archive_s3::servers::{S3Server, ServerKind, ACCESS_KEY, SECRET_KEY};
    let node = archive_node(4096);
    let servers: Vec<S3Server> = ServerKind::ALL
        .into_iter()
        .filter_map(|kind| S3Server::start(kind).unwrap())
        .collect();
    let mut backends: Vec<(String, Option<Arc<dyn lodestore::Archive>>)> =
        vec![("local".into(), None)];
    backends.push((
        "archive node".into(),
        Some(Arc::new(
            lodestore::ArchiveNodes::new(
                &[node.address().to_string()],
                1,
                lodestore::Credentials::default(),
            )
            .unwrap(),
        )),
    ));
    let s3_url = |server: &S3Server| {
        server.create_bucket("snapshots").unwrap();
        server.url("snapshots", "stores/a")
    };
    let folder_fs = Arc::new(MemoryFileSystem::new());
    backends.push((
        "a folder".into(),
        Some(Arc::new(
            lodestore::FileArchive::new(folder_fs, Path::new("/history")).unwrap(),
        )),
    ));
    for server in &servers {
        let archive =
            lodestore::S3Archive::open_with_keys(&s3_url(server), ACCESS_KEY, SECRET_KEY).unwrap();
        backends.push((server.kind().name().into(), Some(Arc::new(archive))));
    }
    // A DHT of eight archive peers, each page on two of them.
    let peers = lodestore_archive_p2p::peers::PeerSet::start(
        lodestore_archive_p2p::peers::PeerCommand::find().unwrap(),
        8,
        2,
    )
    .unwrap();
    let dht = lodestore_archive_p2p::P2pArchive::open(&peers.url("store-a", 2)).unwrap();
    backends.push(("a DHT of 8 peers".into(), Some(Arc::new(dht))));
    let mut dumps_by_backend: Vec<(String, Vec<Dump>)> = Vec::new();
    for (name, archive) in backends {
        let fs = Arc::new(MemoryFileSystem::new());
        let path = Path::new("/store");
        let opts = || {
            let options = options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM);
            match &archive {
                Some(archive) => options.snapshot_archive(archive.clone()),
                None => options,
            }
        };
        let store = Store::create(path, opts()).unwrap();
        let mut rng = StdRng::seed_from_u64(2525);
        let mut taken = Vec::new();
        for _ in 0..4 {
            for _ in 0..6 {
                random_transaction(&store, &mut rng);
            }
            taken.push((store.snapshot().unwrap(), current_dump(&store)));
        }
        random_transaction(&store, &mut rng);
        store.archive_snapshot_pages().unwrap();
        let stats = store.snapshot_stats().unwrap();
        assert_eq!(stats.staged_copies, 0, "{name}: every copy archived");
        assert!(stats.archive_bytes > 0, "{name}");
        check_every_snapshot(&store, &taken, &name);
        store.close().unwrap();
        // Reopened: the page map comes back from the backend's listing.
        let store = Store::open(path, opts()).unwrap();
        check_every_snapshot(&store, &taken, &format!("{name}, reopened"));
        let dumps = taken
            .iter()
            .map(|(snapshot, _)| dump_as_of(&store, snapshot.id))
            .collect();
        dumps_by_backend.push((name, dumps));
        store.close().unwrap();
    }
    let (first, expected) = &dumps_by_backend[0];
    for (name, dumps) in &dumps_by_backend[1..] {
        assert!(
            dumps == expected,
            "the as-of dumps on {name} differ from those on {first}"
        );
    }
    assert_eq!(dumps_by_backend.len(), 4 + servers.len());
}

/// The local archive with a gate in `get`, `list` and `bytes`: once armed, a call waits inside
/// the archive until the gate opens, as one to an archive across a slow network does.
struct GatedArchive {
    inner: lodestore::LocalArchive,
    /// (armed, a read is waiting inside, open)
    state: std::sync::Mutex<(bool, bool, bool)>,
    changed: std::sync::Condvar,
}

impl lodestore::Archive for GatedArchive {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn put(&self, copies: &[lodestore::PageCopy<'_>]) -> lodestore::Result<()> {
        self.inner.put(copies)
    }
    fn get(
        &self,
        page: lodestore::PageId,
        time_us: u64,
        buf: &mut [u8],
    ) -> lodestore::Result<Option<u64>> {
        self.gate();
        self.inner.get(page, time_us, buf)
    }
    fn list(&self) -> Option<Vec<(lodestore::PageId, u64)>> {
        self.gate();
        self.inner.list()
    }
    fn get_ts(&self, page: lodestore::PageId) -> lodestore::Result<Option<u64>> {
        self.inner.get_ts(page)
    }
    fn newest_times(&self) -> Option<Vec<(lodestore::PageId, u64)>> {
        self.inner.newest_times()
    }
    fn remove(&self, copies: &[(lodestore::PageId, u64)]) -> lodestore::Result<()> {
        self.inner.remove(copies)
    }
    fn bytes(&self) -> u64 {
        self.gate();
        self.inner.bytes()
    }
}

impl GatedArchive {
    /// Waits here while the gate is armed and shut.
    fn gate(&self) {
        let mut state = self.state.lock().unwrap();
        if state.0 {
            state.1 = true;
            self.changed.notify_all();
            while !state.2 {
                state = self.changed.wait(state).unwrap();
            }
        }
    }

    fn wait_until_inside(&self) {
        let mut state = self.state.lock().unwrap();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }

    fn arm(&self) {
        *self.state.lock().unwrap() = (true, false, false);
    }

    fn open(&self) {
        let mut state = self.state.lock().unwrap();
        *state = (false, state.1, true);
        self.changed.notify_all();
    }
}

/// A read of the past waiting on a slow archive holds up no commit, not even one that must
/// stage a page copy for a newer snapshot.
#[test]
fn a_reader_waiting_on_a_slow_archive_holds_up_no_commit() {
    use std::sync::mpsc;
    use std::time::Duration;
    let fs = Arc::new(MemoryFileSystem::new());
    let path = Path::new("/store");
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM)).unwrap();
    store.close().unwrap();
    let archive = Arc::new(GatedArchive {
        inner: lodestore::LocalArchive::open(
            fs.clone(),
            &lodestore::Snapshots::local_archive_path(path),
            4096,
        )
        .unwrap(),
        state: std::sync::Mutex::new((false, false, false)),
        changed: std::sync::Condvar::new(),
    });
    let store = Arc::new(
        Store::open(
            path,
            options(&fs, RecoveryMethodKind::Esm, Scheme::SD_ESM).snapshot_archive(archive.clone()),
        )
        .unwrap(),
    );
    let write = |store: &Store, oid: RawOid, value: u8| {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        txn.write_at(oid, 0, &[value; 100]).unwrap();
        txn.commit().unwrap();
    };
    let oid = {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(TYPE, &[1u8; 100]).unwrap();
        txn.commit().unwrap();
        oid
    };
    let first = store.snapshot().unwrap();
    write(&store, oid, 2);
    store.archive_snapshot_pages().unwrap();
    store.snapshot().unwrap();
    archive.state.lock().unwrap().0 = true;

    let reader = {
        let store = store.clone();
        std::thread::spawn(move || {
            let mut session = store.session().unwrap();
            let mut past = session.begin_as_of(AsOf::Snapshot(first.id)).unwrap();
            past.read_all(oid).unwrap()
        })
    };
    {
        let mut state = archive.state.lock().unwrap();
        while !state.1 {
            state = archive.changed.wait(state).unwrap();
        }
    }
    // The reader waits inside the archive. A commit that stages a copy for the second
    // snapshot goes through.
    let (done, committed) = mpsc::channel();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            write(&store, oid, 3);
            done.send(()).unwrap();
        })
    };
    let went_through = committed.recv_timeout(Duration::from_secs(20));
    {
        let mut state = archive.state.lock().unwrap();
        state.2 = true;
        archive.changed.notify_all();
    }
    assert!(went_through.is_ok(), "the commit waited for the archive");
    writer.join().unwrap();
    assert_eq!(reader.join().unwrap(), vec![1u8; 100]);

    // The figures of the snapshots (the archive's size asked of it), and a deletion (the
    // archive listed to reclaim copies), each waiting inside the archive: commits that stage
    // copies go through meanwhile.
    let third = store.snapshot().unwrap();
    for asking in ["stats", "delete"] {
        store.snapshot().unwrap();
        archive.arm();
        let waiting = {
            let store = store.clone();
            std::thread::spawn(move || match asking {
                "stats" => drop(store.snapshot_stats().unwrap()),
                _ => drop(store.delete_snapshot(third.id).unwrap()),
            })
        };
        archive.wait_until_inside();
        let (done, committed) = mpsc::channel();
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                write(&store, oid, 4);
                done.send(()).unwrap();
            })
        };
        let went_through = committed.recv_timeout(Duration::from_secs(20));
        archive.open();
        assert!(
            went_through.is_ok(),
            "{asking}: the commit waited for the archive"
        );
        writer.join().unwrap();
        waiting.join().unwrap();
    }
    // The past still reads as it was.
    let mut session = store.session().unwrap();
    let mut past = session.begin_as_of(AsOf::Snapshot(first.id)).unwrap();
    assert_eq!(past.read_all(oid).unwrap(), vec![1u8; 100]);
    past.finish().unwrap();
}
