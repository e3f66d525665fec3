//! Inspection never writes: `recover_in_memory` runs a crashed store's recovery over a file
//! system that refuses every write, and the view it gives holds every committed change and
//! nothing of an unfinished transaction.

use lodestore::{Error, FileSystem, Options, Storage, Store};
use lodestore_storage::{OpenMode, SimFileSystem};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file system that fails the test on any attempt to change it.
struct NoWrites(Arc<SimFileSystem>);

struct NoWritesFile(Arc<dyn Storage>);

impl FileSystem for NoWrites {
    fn open(&self, path: &Path, mode: OpenMode) -> lodestore::Result<Arc<dyn Storage>> {
        assert_eq!(
            mode,
            OpenMode::ReadOnly,
            "{} opened for writing",
            path.display()
        );
        Ok(Arc::new(NoWritesFile(self.0.open(path, mode)?)))
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> lodestore::Result<()> {
        panic!("create folder {}", path.display())
    }
    fn is_dir(&self, path: &Path) -> bool {
        self.0.is_dir(path)
    }
    fn remove(&self, path: &Path) -> lodestore::Result<()> {
        panic!("remove {}", path.display())
    }
    fn rename(&self, from: &Path, _: &Path) -> lodestore::Result<()> {
        panic!("rename {}", from.display())
    }
    fn list(&self, dir: &Path) -> lodestore::Result<Vec<PathBuf>> {
        self.0.list(dir)
    }
    fn list_dirs(&self, dir: &Path) -> lodestore::Result<Vec<PathBuf>> {
        self.0.list_dirs(dir)
    }
    fn rename_dir(&self, from: &Path, _: &Path) -> lodestore::Result<()> {
        panic!("rename folder {}", from.display())
    }
    fn remove_dir_all(&self, path: &Path) -> lodestore::Result<()> {
        panic!("remove folder {}", path.display())
    }
}

impl Storage for NoWritesFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> lodestore::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn write_at(&self, _: u64, _: &[u8]) -> lodestore::Result<()> {
        panic!("write to {}", self.0.path().display())
    }
    fn sync(&self) -> lodestore::Result<()> {
        panic!("sync of {}", self.0.path().display())
    }
    fn len(&self) -> lodestore::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, _: u64) -> lodestore::Result<()> {
        panic!("set length of {}", self.0.path().display())
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
}

#[test]
fn a_crashed_store_recovers_in_memory_without_a_write() {
    let sim = Arc::new(SimFileSystem::new());
    let path = Path::new("/store");
    let options = || Options::new().file_system(sim.clone()).page_size(4096);
    let (kept, lost) = {
        let store = Store::create(path, options()).unwrap();
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        let kept = txn.alloc_bytes(7, b"committed").unwrap();
        txn.set_root("kept", kept).unwrap();
        txn.commit().unwrap();
        let mut txn = session.begin().unwrap();
        let lost = txn.alloc_bytes(7, b"never committed").unwrap();
        txn.set_root("lost", lost).unwrap();
        // The power fails with the second transaction open: nothing more reaches the disk.
        sim.crash_now();
        std::mem::forget(txn);
        std::mem::forget(session);
        std::mem::forget(store);
        (kept, lost)
    };
    sim.recover(lodestore_storage::Fault::DropUnsynced, 1);

    let view = lodestore::recover_in_memory(Arc::new(NoWrites(sim.clone())), path).unwrap();
    assert!(view.restart().needed_recovery(), "{:?}", view.restart());
    assert!(!view.changes().is_empty(), "recovery would write nothing");
    let roots = lodestore::roots(view.file_system(), path).unwrap();
    assert_eq!(roots.get("kept").map(|o| o.0), Some(kept.0));
    assert!(!roots.contains_key("lost"));
    let mut found = Vec::new();
    lodestore::objects(view.file_system(), path, |object| {
        found.push((object.oid.0, object.bytes));
        Ok(())
    })
    .unwrap();
    assert!(found.contains(&(kept.0, b"committed".to_vec())));
    assert!(found.iter().all(|(oid, _)| *oid != lost.0));
    let report = lodestore::check(view.file_system(), path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);

    // The view was in memory only: the store still needs recovery, and a real open does it.
    let again = lodestore::recover_in_memory(Arc::new(NoWrites(sim.clone())), path).unwrap();
    let timeless = |report: &lodestore::RestartReport| lodestore::RestartReport {
        elapsed_us: 0,
        ..report.clone()
    };
    assert_eq!(timeless(again.restart()), timeless(view.restart()));
    let store = Store::open(path, options()).unwrap();
    assert!(store.restart_report().needed_recovery());
    drop(store);
    let clean = lodestore::recover_in_memory(Arc::new(NoWrites(sim)), path).unwrap();
    assert!(!clean.restart().needed_recovery(), "{:?}", clean.restart());
}

#[test]
fn a_store_in_use_is_refused_by_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), Options::new()).unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(lodestore::RealFileSystem);
    assert!(matches!(
        lodestore::recover_in_memory(fs, dir.path()),
        Err(Error::StoreLocked { .. })
    ));
    drop(store);
}
