//! A file system held in memory: files are byte vectors, `sync` does nothing and every write is
//! immediately "durable". For tests that need many stores or many variations of one store
//! quickly; the crash-simulating file system builds on the same idea but keeps unsynced data
//! apart. Files are not locked against a second opener.

use crate::fs::{FileSystem, OpenMode, Storage};
use lodestore_core::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
pub struct MemoryFileSystem {
    files: Mutex<HashMap<PathBuf, Arc<MemoryFile>>>,
    dirs: Mutex<HashSet<PathBuf>>,
}

struct MemoryFile {
    path: PathBuf,
    bytes: Mutex<Vec<u8>>,
    /// The write-behind hints given, in order (`MemoryFileSystem::write_behind_hints`).
    hints: Mutex<Vec<(u64, u64)>>,
}

impl MemoryFile {
    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MemoryFileSystem {
    pub fn new() -> MemoryFileSystem {
        MemoryFileSystem::default()
    }

    /// Runs `change` on the bytes of the file at `path`; `None` if there is no such file.
    pub fn with_file<R>(&self, path: &Path, change: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let file = self.lock_files().get(path).cloned()?;
        let mut bytes = file.bytes();
        Some(change(&mut bytes))
    }

    /// The write-behind hints the file at `path` was given, in order, as (offset, length):
    /// for tests that the engine hints where it should. Empty if there is no such file.
    pub fn write_behind_hints(&self, path: &Path) -> Vec<(u64, u64)> {
        self.lock_files().get(path).map_or_else(Vec::new, |file| {
            file.hints.lock().unwrap_or_else(|e| e.into_inner()).clone()
        })
    }

    fn lock_files(&self) -> MutexGuard<'_, HashMap<PathBuf, Arc<MemoryFile>>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_dirs(&self) -> MutexGuard<'_, HashSet<PathBuf>> {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FileSystem for MemoryFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let mut files = self.lock_files();
        let file = match (mode, files.get(path)) {
            (OpenMode::CreateNew, Some(_)) => {
                return Err(Error::io(path, "open", io::ErrorKind::AlreadyExists.into()))
            }
            (OpenMode::CreateNew, None) => {
                let file = Arc::new(MemoryFile {
                    path: path.to_path_buf(),
                    bytes: Mutex::new(Vec::new()),
                    hints: Mutex::default(),
                });
                files.insert(path.to_path_buf(), file.clone());
                file
            }
            (_, Some(file)) => file.clone(),
            (_, None) => return Err(Error::io(path, "open", io::ErrorKind::NotFound.into())),
        };
        Ok(Arc::new(MemoryStorage { file }))
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock_files().contains_key(path) || self.lock_dirs().contains(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut dirs = self.lock_dirs();
        for ancestor in path.ancestors() {
            dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.lock_dirs().contains(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        match self.lock_files().remove(path) {
            Some(_) => Ok(()),
            None => Err(Error::io(path, "remove", io::ErrorKind::NotFound.into())),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.lock_files();
        let file = files
            .remove(from)
            .ok_or_else(|| Error::io(from, "rename", io::ErrorKind::NotFound.into()))?;
        let renamed = Arc::new(MemoryFile {
            path: to.to_path_buf(),
            bytes: Mutex::new(std::mem::take(&mut *file.bytes())),
            hints: Mutex::default(),
        });
        files.insert(to.to_path_buf(), renamed);
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = self
            .lock_files()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect();
        paths.sort();
        Ok(paths)
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = self
            .lock_dirs()
            .iter()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect();
        paths.sort();
        Ok(paths)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.lock_files();
        let mut dirs = self.lock_dirs();
        crate::fs::check_folder_rename(
            from,
            to,
            dirs.contains(from),
            dirs.iter().chain(files.keys()),
        )?;
        let moved: Vec<PathBuf> = files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            let file = files.remove(&old).expect("listed above");
            let new = to.join(old.strip_prefix(from).expect("under the folder"));
            let renamed = Arc::new(MemoryFile {
                path: new.clone(),
                bytes: Mutex::new(std::mem::take(&mut *file.bytes())),
                hints: Mutex::default(),
            });
            files.insert(new, renamed);
        }
        let moved: Vec<PathBuf> = dirs
            .iter()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            dirs.remove(&old);
            dirs.insert(to.join(old.strip_prefix(from).expect("under the folder")));
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let mut dirs = self.lock_dirs();
        if !dirs.contains(path) {
            return Err(Error::io(
                path,
                "remove folder",
                io::ErrorKind::NotFound.into(),
            ));
        }
        dirs.retain(|p| !p.starts_with(path));
        self.lock_files().retain(|p, _| !p.starts_with(path));
        Ok(())
    }
}

struct MemoryStorage {
    file: Arc<MemoryFile>,
}

impl Storage for MemoryStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let bytes = self.file.bytes();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start.checked_add(buf.len()) {
            Some(end) if end <= bytes.len() => {
                buf.copy_from_slice(&bytes[start..end]);
                Ok(())
            }
            _ => Err(Error::io(
                &self.file.path,
                "read",
                io::ErrorKind::UnexpectedEof.into(),
            )),
        }
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let mut bytes = self.file.bytes();
        let start = usize::try_from(offset)
            .map_err(|_| Error::io(&self.file.path, "write", io::ErrorKind::InvalidInput.into()))?;
        let end = start + data.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[start..end].copy_from_slice(data);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn write_behind(&self, offset: u64, len: u64) {
        let mut hints = self.file.hints.lock().unwrap_or_else(|e| e.into_inner());
        hints.push((offset, len));
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.bytes().len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let len = usize::try_from(len).map_err(|_| {
            Error::io(
                &self.file.path,
                "set length",
                io::ErrorKind::InvalidInput.into(),
            )
        })?;
        self.file.bytes().resize(len, 0);
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.file.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_file() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/m/f");
        fs.create_dir_all(Path::new("/m")).unwrap();
        assert!(fs.is_dir(Path::new("/m")));
        let file = fs.open(path, OpenMode::CreateNew).unwrap();
        assert!(fs.open(path, OpenMode::CreateNew).is_err());
        file.write_at(3, b"abc").unwrap();
        assert_eq!(file.len().unwrap(), 6);
        let mut buf = [9u8; 6];
        file.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"\0\0\0abc");
        assert!(file.read_at(4, &mut buf).is_err());
        fs.with_file(path, |bytes| bytes[0] = 7).unwrap();
        let again = fs.open(path, OpenMode::Existing).unwrap();
        again.read_at(0, &mut buf[..1]).unwrap();
        assert_eq!(buf[0], 7);
        file.set_len(1).unwrap();
        assert_eq!(again.len().unwrap(), 1);
        assert!(fs.open(Path::new("/m/g"), OpenMode::Existing).is_err());
    }
}
