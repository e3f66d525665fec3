//! The file I/O boundary. Lodestore never touches `std::fs` outside this module: the engine talks
//! to [`Storage`] (one open file) obtained from a [`FileSystem`]. The real implementation maps
//! them onto the operating system; a simulated one (crash, tear, corrupt) plugs in for tests.
//!
//! Assumptions about real storage, stated once: a write that returned is in the OS cache, not
//! durable; after `sync` returns, everything written before it is durable; a write that was in
//! flight at a crash may be torn at sector granularity; nothing else is atomic.

use lodestore_core::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One open file, accessed by position.
pub trait Storage: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`; reading past the end is an error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes all of `data` at `offset`, extending the file if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn sync(&self) -> Result<()>;
    /// Current length in bytes.
    fn len(&self) -> Result<u64>;
    /// Is the file empty?
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Sets the length, truncating or zero-extending.
    fn set_len(&self, len: u64) -> Result<()>;
    /// A hint that bytes `offset..offset + len` will be read soon, so the operating system can
    /// start reading them while the caller works on what it read before. Does nothing unless
    /// the storage can act on it; never fails.
    fn prefetch(&self, _offset: u64, _len: u64) {}
    /// A hint that bytes `offset..offset + len`, just written, will be synced soon: the
    /// operating system may start sending them to the device while the caller writes more,
    /// so the sync that follows waits for less. Durability still comes only from
    /// [`Storage::sync`]. Does nothing unless the storage can act on it; never fails.
    fn write_behind(&self, _offset: u64, _len: u64) {}
    /// The path, for error messages.
    fn path(&self) -> &Path;
}

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// The file must not exist yet; it is created empty.
    CreateNew,
    /// The file must exist.
    Existing,
    /// The file must exist; it is only read (no lock is taken that would exclude writers).
    ReadOnly,
}

/// Opens files and answers questions about paths.
pub trait FileSystem: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>>;
    fn exists(&self, path: &Path) -> bool;
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    fn is_dir(&self, path: &Path) -> bool;
    /// Removes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Renames a file, replacing `to` if it exists, and makes the rename durable.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// The files directly inside `dir`, sorted.
    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>>;
    /// The folders directly inside `dir`, sorted.
    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>>;
    /// Renames the folder `from`, with everything in it, to `to`, which must not exist or be an
    /// empty folder, and makes the rename durable. One atomic step: a store built under a
    /// temporary name appears whole or not at all.
    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes the folder `path` and everything in it.
    fn remove_dir_all(&self, path: &Path) -> Result<()>;

    /// Like `open`, but a new file's entry in its folder may stay volatile until `sync_dir` of
    /// that folder: for a folder nothing reads before it is made durable as a whole
    /// ([`crate::staging`]). The default is `open`, which makes the entry durable at once.
    fn open_unsynced(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        self.open(path, mode)
    }
    /// Like `rename`, but the rename may stay volatile until `sync_dir` of the folder. The
    /// default is `rename`.
    fn rename_unsynced(&self, from: &Path, to: &Path) -> Result<()> {
        self.rename(from, to)
    }
    /// Makes the entries of the folder `dir` durable (created, renamed and removed files and
    /// folders). Nothing to do (the default) where every change of a folder is durable when it
    /// returns.
    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }
    /// Whether syncs of different files and folders may run at once, on threads of their own.
    /// Only where the operating system orders the work itself (the default is no: the
    /// simulated file system numbers its crash points in the order the calls arrive, and a
    /// seed must replay the same order).
    fn syncs_in_parallel(&self) -> bool {
        false
    }
}

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFileSystem;

impl FileSystem for RealFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let file = self.open_unsynced(path, mode)?;
        if mode == OpenMode::CreateNew {
            // Make the new file's directory entry durable, so a synced file cannot vanish.
            if let Some(parent) = path.parent() {
                sync_directory(parent)?;
            }
        }
        Ok(file)
    }

    fn open_unsynced(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::CreateNew => options.write(true).create_new(true),
            OpenMode::Existing => options.write(true),
            OpenMode::ReadOnly => &mut options,
        };
        let file = options
            .open(path)
            .map_err(|source| Error::io(path, "open", source))?;
        // An exclusive advisory lock keeps a second writer (another process or another Store in
        // this one) from opening the same data file; readers take a shared lock.
        let locked = match mode {
            OpenMode::ReadOnly => file.try_lock_shared(),
            _ => file.try_lock(),
        };
        match locked {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::StoreLocked {
                    path: path.to_path_buf(),
                })
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(Error::io(path, "lock", source))
            }
        }
        Ok(Arc::new(FileStorage {
            file,
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|source| Error::io(path, "create directory", source))
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|source| Error::io(path, "remove", source))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.rename_unsynced(from, to)?;
        if let Some(parent) = to.parent() {
            sync_directory(parent)?;
        }
        Ok(())
    }

    fn rename_unsynced(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|source| Error::io(from, "rename", source))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        sync_directory(dir)
    }

    fn syncs_in_parallel(&self) -> bool {
        true
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.entries(dir, false)
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.entries(dir, true)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|source| Error::io(to, "rename a folder to", source))?;
        if let Some(parent) = to.parent() {
            sync_directory(parent)?;
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir_all(path).map_err(|source| Error::io(path, "remove folder", source))?;
        if let Some(parent) = path.parent() {
            sync_directory(parent)?;
        }
        Ok(())
    }
}

impl RealFileSystem {
    fn entries(&self, dir: &Path, want_dirs: bool) -> Result<Vec<PathBuf>> {
        let entries =
            std::fs::read_dir(dir).map_err(|source| Error::io(dir, "list directory", source))?;
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| Error::io(dir, "list directory", source))?;
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
            if (want_dirs && is_dir) || (!want_dirs && is_file) {
                paths.push(entry.path());
            }
        }
        paths.sort();
        Ok(paths)
    }
}

/// What a folder rename must find, for the file systems that keep paths in memory: `from` is a
/// folder, and `to` is missing or an empty folder (as rename(2) demands). `entries` are every
/// file and folder path there is.
pub(crate) fn check_folder_rename<'a>(
    from: &Path,
    to: &Path,
    from_is_dir: bool,
    mut entries: impl Iterator<Item = &'a PathBuf>,
) -> Result<()> {
    if !from_is_dir {
        return Err(Error::io(
            from,
            "rename folder",
            std::io::ErrorKind::NotFound.into(),
        ));
    }
    if entries.any(|p| p.starts_with(to) && p.as_path() != to) {
        return Err(Error::io(
            to,
            "rename a folder to",
            std::io::ErrorKind::DirectoryNotEmpty.into(),
        ));
    }
    Ok(())
}

fn sync_directory(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| Error::io(dir, "sync directory", source))
}

/// A file of the real file system.
pub struct FileStorage {
    file: File,
    path: PathBuf,
}

impl Storage for FileStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| Error::io(&self.path, "read", source))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|source| Error::io(&self.path, "write", source))
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|source| Error::io(&self.path, "sync", source))
    }

    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|source| Error::io(&self.path, "stat", source))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|source| Error::io(&self.path, "set length", source))
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.hint("read-ahead", offset, len, |fd, offset, len| {
            // SAFETY: an advisory call on a descriptor this value owns; no memory is passed.
            unsafe { libc::posix_fadvise(fd, offset, len, libc::POSIX_FADV_WILLNEED) }
        });
    }

    #[cfg(target_os = "linux")]
    fn write_behind(&self, offset: u64, len: u64) {
        self.hint("write-behind", offset, len, |fd, offset, len| {
            // SAFETY: starts write-back of a range of a descriptor this value owns, without
            // waiting for it; no memory is passed.
            unsafe { libc::sync_file_range(fd, offset, len, libc::SYNC_FILE_RANGE_WRITE) }
        });
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl FileStorage {
    /// Runs `call`, an advisory system call, on `offset..offset + len` of the file: a range the
    /// call cannot name is skipped and a refusal only logged, since a hint never fails.
    fn hint(
        &self,
        what: &str,
        offset: u64,
        len: u64,
        call: impl FnOnce(libc::c_int, i64, i64) -> libc::c_int,
    ) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        let rc = call(self.file.as_raw_fd(), offset, len);
        if rc != 0 {
            tracing::debug!(path = %self.path.display(), rc, "{what} hint refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_write_read_and_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let fs = RealFileSystem;
        let file = fs.open(&path, OpenMode::CreateNew).unwrap();
        file.write_at(10, b"hello").unwrap();
        file.sync().unwrap();
        assert_eq!(file.len().unwrap(), 15);
        let mut buf = [0u8; 5];
        file.read_at(10, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        // Reading past the end fails instead of returning short data.
        assert!(file.read_at(12, &mut buf).is_err());
        // A second writer is refused while the first holds the file.
        assert!(matches!(
            fs.open(&path, OpenMode::Existing),
            Err(Error::StoreLocked { .. })
        ));
        assert!(matches!(
            fs.open(&path, OpenMode::CreateNew),
            Err(Error::Io { .. })
        ));
        drop(file);
        fs.open(&path, OpenMode::Existing).unwrap();
    }

    #[test]
    fn hints_change_nothing_a_reader_sees_and_take_any_range() {
        let dir = tempfile::tempdir().unwrap();
        let file = RealFileSystem
            .open(&dir.path().join("f"), OpenMode::CreateNew)
            .unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(64 << 10).collect();
        file.write_at(4096, &data).unwrap();
        file.write_behind(4096, data.len() as u64);
        // Past the end, and past what the system call can name: ignored, never a panic.
        file.write_behind(1 << 40, 4096);
        file.write_behind(u64::MAX, u64::MAX);
        file.prefetch(u64::MAX, 1);
        file.sync().unwrap();
        let mut back = vec![0u8; data.len()];
        file.read_at(4096, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(file.len().unwrap(), 4096 + data.len() as u64);
    }
}
