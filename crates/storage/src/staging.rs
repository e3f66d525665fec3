//! A folder built in full before anything reads it: a new store is made under a temporary
//! name and renamed into place only once it is complete. Until that rename a crash leaves a
//! leftover the next creation clears, never a store, so nothing written inside needs to reach
//! the disk early or in any order. [`StagingFileSystem`] lets the engine run exactly as it does
//! on a live store while it defers every sync it asks for; [`StagingFileSystem::make_durable`]
//! then syncs each file and each folder of the tree once, just before the rename.
//!
//! Creating a store asked for sixteen syncs before its rename (each file's, each new entry's
//! folder, the log and superblock writes of the first checkpoint); staged, it takes six, one
//! per file and one per folder, and on the operating system's file system they run at once.

use crate::fs::{FileSystem, OpenMode, Storage};
use lodestore_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How deep `make_durable` walks below the root: a store's tree is two levels deep.
const MAX_DEPTH: usize = 8;

/// A view of `inner` in which everything under `root` is staged: syncs of files do nothing,
/// and new entries and renames are left volatile, until [`StagingFileSystem::make_durable`].
/// Paths outside `root` behave as in `inner`.
pub struct StagingFileSystem {
    inner: Arc<dyn FileSystem>,
    root: PathBuf,
}

impl StagingFileSystem {
    pub fn new(inner: Arc<dyn FileSystem>, root: &Path) -> StagingFileSystem {
        StagingFileSystem {
            inner,
            root: root.to_path_buf(),
        }
    }

    fn staged(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }

    /// Makes every file and folder under the root durable: each file's data and each
    /// folder's entries. Every handle the staged work opened must be closed (the files are
    /// opened again to be synced, and a real file system locks them). Nothing is read before
    /// the rename that follows, so the order of the syncs is free: where the file system
    /// allows it they run at once, and a creation waits for the slowest instead of the sum
    /// (a new store's six took 2.7 ms one after another here; docs/BENCHMARKS.md, "Fewer
    /// steps between a new store and its first commit").
    pub fn make_durable(&self) -> Result<()> {
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        self.collect_tree(&self.root, 0, &mut files, &mut dirs)?;
        let mut jobs = files
            .iter()
            .map(|file| SyncJob::File(file))
            .chain(dirs.iter().map(|dir| SyncJob::Dir(dir)));
        if !self.inner.syncs_in_parallel() || files.len() + dirs.len() > PARALLEL_SYNCS_MAX {
            return jobs.try_for_each(|job| self.sync(job));
        }
        std::thread::scope(|scope| {
            let running: Vec<_> = jobs
                .map(|job| (job, scope.spawn(move || self.sync(job))))
                .collect();
            running.into_iter().try_for_each(|(job, thread)| {
                thread.join().unwrap_or_else(|_| {
                    Err(Error::InvalidArgument(format!(
                        "the thread syncing {} panicked",
                        job.path().display()
                    )))
                })
            })
        })
    }

    /// The files and folders under `dir`, `dir` last.
    fn collect_tree(
        &self,
        dir: &Path,
        depth: usize,
        files: &mut Vec<PathBuf>,
        dirs: &mut Vec<PathBuf>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "{}: a staged folder more than {MAX_DEPTH} levels deep",
                dir.display()
            )));
        }
        files.extend(self.inner.list(dir)?);
        for sub in self.inner.list_dirs(dir)? {
            self.collect_tree(&sub, depth + 1, files, dirs)?;
        }
        dirs.push(dir.to_path_buf());
        Ok(())
    }

    fn sync(&self, job: SyncJob<'_>) -> Result<()> {
        match job {
            SyncJob::File(file) => self.inner.open(file, OpenMode::Existing)?.sync(),
            SyncJob::Dir(dir) => self.inner.sync_dir(dir),
        }
    }
}

/// Most syncs [`StagingFileSystem::make_durable`] runs at once, a thread each: a store's tree
/// holds a handful of files; a larger tree is synced one at a time.
const PARALLEL_SYNCS_MAX: usize = 16;

/// One sync of [`StagingFileSystem::make_durable`].
#[derive(Clone, Copy)]
enum SyncJob<'a> {
    File(&'a Path),
    Dir(&'a Path),
}

impl SyncJob<'_> {
    fn path(&self) -> &Path {
        match self {
            SyncJob::File(path) | SyncJob::Dir(path) => path,
        }
    }
}

impl FileSystem for StagingFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        if !self.staged(path) {
            return self.inner.open(path, mode);
        }
        let inner = self.inner.open_unsynced(path, mode)?;
        Ok(Arc::new(StagedStorage { inner }))
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.create_dir_all(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.inner.is_dir(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if self.staged(from) && self.staged(to) {
            self.inner.rename_unsynced(from, to)
        } else {
            self.inner.rename(from, to)
        }
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.inner.list(dir)
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.inner.list_dirs(dir)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename_dir(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.inner.remove_dir_all(path)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        if self.staged(dir) {
            Ok(())
        } else {
            self.inner.sync_dir(dir)
        }
    }
}

/// A staged file: every call goes to the file except `sync`, left to `make_durable`.
struct StagedStorage {
    inner: Arc<dyn Storage>,
}

impl Storage for StagedStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write_at(offset, data)
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.inner.prefetch(offset, len)
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Fault, SimFileSystem};

    fn write_file(fs: &dyn FileSystem, path: &Path, data: &[u8]) {
        let file = fs.open(path, OpenMode::CreateNew).unwrap();
        file.write_at(0, data).unwrap();
        file.sync().unwrap();
    }

    fn read_file(fs: &dyn FileSystem, path: &Path) -> Vec<u8> {
        let file = fs.open(path, OpenMode::ReadOnly).unwrap();
        let mut data = vec![0; file.len().unwrap() as usize];
        file.read_at(0, &mut data).unwrap();
        data
    }

    #[test]
    fn staged_syncs_are_deferred_to_make_durable() {
        let sim = Arc::new(SimFileSystem::new());
        let root = Path::new("/s/.store.creating");
        sim.create_dir_all(&root.join("log")).unwrap();
        let staging = StagingFileSystem::new(sim.clone(), root);
        write_file(&staging, &root.join("data"), b"data");
        write_file(&staging, &root.join("log/a"), b"log");

        // A crash now loses what the staged syncs did not make durable.
        sim.crash_now();
        sim.recover(Fault::DropUnsynced, 1);
        assert!(read_file(sim.as_ref(), &root.join("data")).is_empty());
        assert!(read_file(sim.as_ref(), &root.join("log/a")).is_empty());

        // Staged again, then made durable: a crash keeps every file.
        let sim = Arc::new(SimFileSystem::new());
        sim.create_dir_all(&root.join("log")).unwrap();
        let staging = StagingFileSystem::new(sim.clone(), root);
        write_file(&staging, &root.join("data"), b"data");
        write_file(&staging, &root.join("log/a"), b"log");
        staging.make_durable().unwrap();
        sim.crash_now();
        sim.recover(Fault::DropUnsynced, 1);
        assert_eq!(read_file(sim.as_ref(), &root.join("data")), b"data");
        assert_eq!(read_file(sim.as_ref(), &root.join("log/a")), b"log");
    }

    #[test]
    fn paths_outside_the_root_sync_at_once() {
        let sim = Arc::new(SimFileSystem::new());
        let root = Path::new("/s/.store.creating");
        sim.create_dir_all(root).unwrap();
        sim.create_dir_all(Path::new("/s/other")).unwrap();
        let staging = StagingFileSystem::new(sim.clone(), root);
        write_file(&staging, Path::new("/s/other/f"), b"kept");
        sim.crash_now();
        sim.recover(Fault::DropUnsynced, 1);
        assert_eq!(read_file(sim.as_ref(), Path::new("/s/other/f")), b"kept");
    }

    #[test]
    fn real_files_survive_make_durable_and_are_released() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(".store.creating");
        let real: Arc<dyn FileSystem> = Arc::new(crate::fs::RealFileSystem);
        real.create_dir_all(&root.join("log")).unwrap();
        let staging = StagingFileSystem::new(real.clone(), &root);
        write_file(&staging, &root.join("data"), b"data");
        write_file(&staging, &root.join("log/a"), b"log");
        staging
            .rename(&root.join("log/a"), &root.join("log/b"))
            .unwrap();
        staging.make_durable().unwrap();
        // The lock make_durable took to sync is released: the file opens for writing again.
        real.open(&root.join("data"), OpenMode::Existing).unwrap();
        assert_eq!(read_file(real.as_ref(), &root.join("log/b")), b"log");
        assert!(!real.exists(&root.join("log/a")));
    }
}
