//! Bad input: things that are not stores, newer formats, wrong page sizes, damaged pages and
//! superblocks. Each gives a clear error naming what and where, never a panic.

use lodestore::{Error, Options, RawOid, RealFileSystem, Store};
use lodestore_storage::{page, volume::data_file_path, MemoryFileSystem};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

const PAGE_SIZE: usize = 4096;

fn page_bytes(path: &Path, page: u32) -> Vec<u8> {
    let file = std::fs::File::open(data_file_path(path)).unwrap();
    let mut buf = vec![0u8; PAGE_SIZE];
    file.read_exact_at(&mut buf, u64::from(page) * PAGE_SIZE as u64)
        .unwrap();
    buf
}

fn put_page(path: &Path, page: u32, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(data_file_path(path))
        .unwrap();
    file.write_all_at(bytes, u64::from(page) * PAGE_SIZE as u64)
        .unwrap();
}

/// A closed store with small objects, a large object and a root; returns the OIDs.
fn sample_store(path: &Path) -> Vec<RawOid> {
    let store = Store::create(path, Options::new().page_size(PAGE_SIZE)).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let mut oids = Vec::new();
    for i in 0..20u8 {
        oids.push(txn.alloc_bytes(4, &[i; 150]).unwrap());
    }
    oids.push(txn.alloc_bytes(4, &[9u8; 10_000]).unwrap());
    txn.set_root("first", oids[0]).unwrap();
    txn.commit().unwrap();
    oids
}

#[test]
fn not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    assert!(matches!(
        Store::open(&missing, Options::new()),
        Err(Error::NotAStore { .. })
    ));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        Store::open(&empty, Options::new()),
        Err(Error::NotAStore { .. })
    ));
    let garbage = dir.path().join("garbage");
    std::fs::create_dir(&garbage).unwrap();
    std::fs::write(data_file_path(&garbage), vec![0x5A; 3 * 8192]).unwrap();
    let error = Store::open(&garbage, Options::new()).err().unwrap();
    assert!(matches!(error, Error::NotAStore { .. }), "{error}");
    assert!(error.to_string().contains("magic"), "{error}");
    let short = dir.path().join("short");
    std::fs::create_dir(&short).unwrap();
    std::fs::write(data_file_path(&short), b"LODESTOR").unwrap();
    assert!(matches!(
        Store::open(&short, Options::new()),
        Err(Error::NotAStore { .. })
    ));
    let plain_file = dir.path().join("file");
    std::fs::write(&plain_file, b"hello").unwrap();
    assert!(matches!(
        Store::open(&plain_file, Options::new()),
        Err(Error::NotAStore { .. })
    ));
}

#[test]
fn create_refuses_existing_store_and_bad_options() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    drop(Store::create(&path, Options::new()).unwrap());
    assert!(matches!(
        Store::create(&path, Options::new()),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        Store::create(dir.path().join("t"), Options::new().page_size(5000)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Store::create(dir.path().join("u"), Options::new().client_cache_bytes(100)),
        Err(Error::InvalidArgument(_))
    ));
    // A second open of a store in use is refused, not corrupted.
    let store = Store::open(&path, Options::new()).unwrap();
    assert!(matches!(
        Store::open(&path, Options::new()),
        Err(Error::StoreLocked { .. })
    ));
    drop(store);
}

#[test]
fn newer_format_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    sample_store(&path);
    for copy in 0..2 {
        let mut bytes = page_bytes(&path, copy);
        bytes[40..44].copy_from_slice(&7u32.to_le_bytes());
        put_page(&path, copy, &bytes);
    }
    let error = Store::open(&path, Options::new()).err().unwrap();
    assert!(
        matches!(
            error,
            Error::UnsupportedFormat {
                found: 7,
                supported: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(matches!(
        lodestore::check(&RealFileSystem, &path),
        Err(Error::UnsupportedFormat { .. })
    ));
}

#[test]
fn wrong_page_size_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    sample_store(&path);
    let error = Store::open(&path, Options::new().page_size(8192))
        .err()
        .unwrap();
    assert!(
        matches!(
            error,
            Error::PageSizeMismatch {
                stored: 4096,
                requested: 8192,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn checksum_failure_names_file_and_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let oids = sample_store(&path);
    let page = oids[0].page().0;
    let mut bytes = page_bytes(&path, page);
    bytes[PAGE_SIZE - 10] ^= 0x01;
    put_page(&path, page, &bytes);

    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let error = txn.bytes(oids[0]).err().unwrap();
    match &error {
        Error::CorruptPage {
            path: p,
            page: bad,
            reason,
        } => {
            assert_eq!(bad.0, page);
            assert!(p.ends_with("volume-0.data"), "{error}");
            assert!(reason.contains("checksum"), "{error}");
        }
        other => panic!("expected a corrupt page, got {other}"),
    }
    drop(txn);
    drop(session);
    // The damaged page was read into a pool frame and refused there: the frame is free again,
    // so a second reader (a fresh session, with an empty cache) is refused too, never served
    // the damaged bytes from the pool.
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    assert!(
        matches!(txn.bytes(oids[0]), Err(Error::CorruptPage { page: p, .. }) if p.0 == page),
        "a second read of the damaged page"
    );
    drop(txn);
    drop(session);
    drop(store);
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(!report.is_sound());
    assert_eq!(report.problems[0].page, Some(page));
    assert!(report.problems[0].message.contains(&format!("page {page}")));
}

#[test]
fn slot_pointing_outside_its_page_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let oids = sample_store(&path);
    let page = oids[1].page().0;
    let slot = oids[1].slot() as usize;
    let mut bytes = page_bytes(&path, page);
    // Point the slot past the end of the page, then reseal so only the structure is wrong.
    bytes[48 + 2 * slot..50 + 2 * slot].copy_from_slice(&8192u16.to_le_bytes());
    page::seal(&mut bytes);
    put_page(&path, page, &bytes);

    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(!report.is_sound());
    assert!(report
        .problems
        .iter()
        .any(|p| p.page == Some(page) && p.message.contains(&format!("slot {slot}"))));

    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    assert!(matches!(
        txn.bytes(oids[1]),
        Err(Error::CorruptPage { page: p, .. }) if p.0 == page
    ));
}

#[test]
fn torn_superblock_copy_is_survived_but_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let oids = sample_store(&path);
    // Damage one copy: the other holds the same generation, so nothing is lost.
    let mut bytes = page_bytes(&path, 0);
    bytes[100..400].fill(0xFF);
    put_page(&path, 0, &bytes);
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].page, Some(0));
    {
        let store = Store::open(&path, Options::new()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        assert_eq!(txn.bytes(oids[3]).unwrap(), &[3u8; 150][..]);
    }
    // Opening and closing took checkpoints, which rewrote both copies: healed.
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);

    // With both copies damaged the store cannot be opened, and the error says why.
    for copy in 0..2 {
        let mut bytes = page_bytes(&path, copy);
        bytes[60] ^= 0x40;
        put_page(&path, copy, &bytes);
    }
    let error = Store::open(&path, Options::new()).err().unwrap();
    assert!(matches!(error, Error::CorruptSuperblock { .. }), "{error}");
    assert!(error.to_string().contains("page 1"), "{error}");
}

/// Flipping any single byte of any page makes `check` fail and name that page: every byte of
/// every page of a store holding small objects, a large object and a root. The store lives in
/// memory so that the sweep (one check per byte) stays fast.
#[test]
fn any_flipped_byte_is_found_and_its_page_named() {
    let fs = Arc::new(MemoryFileSystem::new());
    let path = Path::new("/flip/store");
    {
        let store = Store::create(
            path,
            Options::new().page_size(PAGE_SIZE).file_system(fs.clone()),
        )
        .unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        for i in 0..20u8 {
            txn.alloc_bytes(4, &[i; 150]).unwrap();
        }
        let large = txn.alloc_bytes(4, &[9u8; 10_000]).unwrap();
        txn.set_root("large", large).unwrap();
        txn.commit().unwrap();
    }
    let data = data_file_path(path);
    let report = lodestore::check(fs.as_ref(), path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    let length = fs.with_file(&data, |bytes| bytes.len()).unwrap();
    assert_eq!(length as u64, report.pages_checked * PAGE_SIZE as u64);
    for at in 0..length {
        fs.with_file(&data, |bytes| bytes[at] ^= 0x20).unwrap();
        let report = lodestore::check(fs.as_ref(), path).unwrap();
        fs.with_file(&data, |bytes| bytes[at] ^= 0x20).unwrap();
        let page = (at / PAGE_SIZE) as u32;
        assert!(
            report.problems.iter().any(|p| p.page == Some(page)),
            "flip at page {page} offset {} not reported: {:?}",
            at % PAGE_SIZE,
            report.problems
        );
    }
    assert!(lodestore::check(fs.as_ref(), path).unwrap().is_sound());
}

/// A superblock whose checkpoint LSN points at something that is not a checkpoint (here, 8
/// bytes past the real one) is refused with an error naming the log and the LSN.
#[test]
fn checkpoint_pointing_nowhere_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    sample_store(&path);
    let mut bad = 0;
    for copy in 0..2usize {
        let bytes = page_bytes(&path, copy as u32);
        let mut sb = lodestore_storage::superblock::decode(&bytes, copy).unwrap();
        sb.checkpoint_lsn = lodestore::Lsn(sb.checkpoint_lsn.0 + 8);
        bad = sb.checkpoint_lsn.0;
        let mut rewritten = vec![0u8; PAGE_SIZE];
        sb.encode(&mut rewritten, copy);
        put_page(&path, copy as u32, &rewritten);
    }
    match Store::open(&path, Options::new()) {
        Err(Error::CorruptLog { reason, .. }) => {
            assert!(reason.contains(&format!("LSN {bad}")), "{reason}");
            assert!(reason.contains("checkpoint"), "{reason}");
        }
        Err(other) => panic!("expected a corrupt log error, got {other}"),
        Ok(_) => panic!("opened a store whose checkpoint points nowhere"),
    }
}

/// A log segment missing under the store is named.
#[test]
fn missing_log_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    sample_store(&path);
    std::fs::remove_dir_all(path.join("log")).unwrap();
    match Store::open(&path, Options::new()) {
        Err(Error::CorruptLog { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        Err(other) => panic!("expected a corrupt log error, got {other}"),
        Ok(_) => panic!("opened a store without its log"),
    }
}
