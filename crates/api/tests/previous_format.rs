//! Stores written by earlier builds open unchanged: those of the build before the engine's
//! boundaries were drawn (the protocol crate, the record-kind registry, method-owned state),
//! and main-memory stores of the build before log streams took compact records (their streams
//! hold aligned records with fixed range headers). Each fixture was written by its build
//! (`fixtures/*/writer.rs.txt`) and left as a crash would, with committed transactions after
//! the last checkpoint and one still running. This build recovers it with the method the store
//! names and finds exactly what was committed.

use lodestore::{Options, RealFileSystem, Store};
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The bytes the writer gave object `i`.
fn written(i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(5) {
        9000 + i
    } else {
        50 + 37 * i
    };
    let mut bytes: Vec<u8> = (0..len).map(|j| ((i * 7 + j) % 251) as u8).collect();
    if i == 3 {
        bytes[4..24].fill(0xAB);
    }
    bytes
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of fixture `name` (recovery writes to it).
fn fixture(name: &str, scratch: &tempfile::TempDir) -> PathBuf {
    let path = scratch.path().join(name);
    copy_dir(&Path::new(FIXTURES).join(name), &path);
    path
}

fn opens_and_holds_what_was_committed(name: &str, method: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let path = fixture(name, &scratch);
    let store = Store::open(&path, Options::new()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(store.recovery_method(), method);
    assert!(
        store.restart_report().needed_recovery(),
        "{name}: the fixture was left by a crash"
    );
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let roots = txn.roots().unwrap();
        assert_eq!(roots.len(), 39, "{name}: o0 to o39 but the freed o6");
        for i in 0..40 {
            let root = roots.get(&format!("o{i}"));
            if i == 6 {
                assert!(root.is_none(), "{name}: o6 was freed");
                continue;
            }
            let oid = *root.unwrap_or_else(|| panic!("{name}: root o{i} is gone"));
            // o4's update never committed: it is not there.
            assert_eq!(
                txn.read_all(oid).unwrap(),
                written(i),
                "{name}: object o{i}"
            );
        }
    }
    // This build goes on writing to the store (its logs keep their format) ...
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let oid = txn.alloc_bytes(5, b"written by this build").unwrap();
        txn.set_root("added", oid).unwrap();
        txn.commit().unwrap();
    }
    // ... and what a kill -9 would leave now (the files copied while the store is open)
    // recovers with that commit too.
    let crashed = scratch.path().join("crashed");
    copy_dir(&path, &crashed);
    store.close().unwrap();
    let path = crashed;
    let store = Store::open(&path, Options::new()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(store.restart_report().needed_recovery(), "{name}");
    {
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let roots = txn.roots().unwrap();
        assert_eq!(roots.len(), 40, "{name}");
        let added = *roots.get("added").expect("the new root");
        assert_eq!(txn.read_all(added).unwrap(), b"written by this build");
        let o3 = *roots.get("o3").unwrap();
        assert_eq!(txn.read_all(o3).unwrap(), written(3), "{name}");
    }
    store.close().unwrap();
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{name}: {:?}", report.problems);
}

#[test]
fn an_esm_store_of_the_previous_build_opens_unchanged() {
    opens_and_holds_what_was_committed("before-engine-boundaries/esm", "esm");
}

#[test]
fn a_whole_page_logging_store_of_the_previous_build_opens_unchanged() {
    opens_and_holds_what_was_committed("before-engine-boundaries/wpl", "wpl");
}

#[test]
fn a_dl1p_store_whose_streams_hold_aligned_records_opens_unchanged() {
    opens_and_holds_what_was_committed("before-compact-streams/dl1p", "dl1p");
}

#[test]
fn a_pl2p_store_whose_streams_hold_aligned_records_opens_unchanged() {
    opens_and_holds_what_was_committed("before-compact-streams/pl2p", "pl2p");
}
