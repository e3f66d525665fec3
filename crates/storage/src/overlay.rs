//! A file system that reads another and keeps every change in memory. Inspection (`check`,
//! `info`, `dump`) runs recovery through it on a store that must stay as it is: files are only
//! ever opened read-only underneath (so a read-only file or file system serves, and a store in
//! use by a writer is refused by its lock as usual), and what recovery would have written is
//! listed by [`OverlayFileSystem::changes`].
//!
//! Written bytes are held in blocks of [`BLOCK_BYTES`], so recovery of a large store holds only
//! what it writes. Nothing is ever synced anywhere: the overlay is gone when it is dropped.

use crate::fs::{FileSystem, OpenMode, Storage};
use lodestore_core::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Granularity of the in-memory copy of written bytes.
pub const BLOCK_BYTES: u64 = 4096;

/// What the overlay holds for a path: a file (read through to the file beneath, if any, with
/// its changes on top) or the mark of one removed.
enum Entry {
    File(Arc<OverlayFile>),
    Removed,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<PathBuf, Entry>,
    dirs: BTreeSet<PathBuf>,
    /// Paths created, renamed away from or removed, in order, for the report.
    events: Vec<String>,
}

/// The overlay over `base`.
pub struct OverlayFileSystem {
    base: Arc<dyn FileSystem>,
    state: Mutex<State>,
}

/// One change the overlay kept from the files beneath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Bytes written to an existing file, by block of [`BLOCK_BYTES`].
    Written { path: PathBuf, blocks: Vec<u64> },
    /// A file created, removed or renamed (described in words).
    Named(String),
}

impl OverlayFileSystem {
    pub fn new(base: Arc<dyn FileSystem>) -> OverlayFileSystem {
        OverlayFileSystem {
            base,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Everything that would have reached the files beneath: names created, renamed and
    /// removed, then the blocks written to each file that existed, in path order.
    pub fn changes(&self) -> Vec<Change> {
        let state = self.lock();
        let mut changes: Vec<Change> = state.events.iter().cloned().map(Change::Named).collect();
        for (path, entry) in &state.entries {
            if let Entry::File(file) = entry {
                let inner = file.lock();
                if file.base.is_some() && !inner.blocks.is_empty() {
                    changes.push(Change::Written {
                        path: path.clone(),
                        blocks: inner.blocks.keys().copied().collect(),
                    });
                }
            }
        }
        changes
    }

    /// The overlay's file at `path`, opening the one beneath on first use.
    fn file(&self, state: &mut State, path: &Path) -> Result<Arc<OverlayFile>> {
        match state.entries.get(path) {
            Some(Entry::File(file)) => return Ok(file.clone()),
            Some(Entry::Removed) => {
                return Err(Error::io(path, "open", io::ErrorKind::NotFound.into()))
            }
            None => {}
        }
        let base = self.base.open(path, OpenMode::ReadOnly)?;
        let len = base.len()?;
        let file = Arc::new(OverlayFile {
            path: path.to_path_buf(),
            base: Some(base),
            inner: Mutex::new(Inner {
                blocks: BTreeMap::new(),
                len,
                base_visible: len,
            }),
        });
        state
            .entries
            .insert(path.to_path_buf(), Entry::File(file.clone()));
        Ok(file)
    }

    fn exists_in(&self, state: &State, path: &Path) -> bool {
        match state.entries.get(path) {
            Some(Entry::File(_)) => true,
            Some(Entry::Removed) => false,
            None => state.dirs.contains(path) || self.base.exists(path),
        }
    }
}

impl FileSystem for OverlayFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let mut state = self.lock();
        if mode == OpenMode::CreateNew {
            if self.exists_in(&state, path) {
                return Err(Error::io(path, "open", io::ErrorKind::AlreadyExists.into()));
            }
            let file = Arc::new(OverlayFile {
                path: path.to_path_buf(),
                base: None,
                inner: Mutex::new(Inner::default()),
            });
            state
                .entries
                .insert(path.to_path_buf(), Entry::File(file.clone()));
            state.events.push(format!("create {}", path.display()));
            return Ok(Arc::new(OverlayStorage { file }));
        }
        let file = self.file(&mut state, path)?;
        Ok(Arc::new(OverlayStorage { file }))
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.lock();
        self.exists_in(&state, path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock();
        if !self.base.is_dir(path) && !state.dirs.contains(path) {
            state
                .events
                .push(format!("create folder {}", path.display()));
            for ancestor in path.ancestors() {
                state.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.lock().dirs.contains(path) || self.base.is_dir(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut state = self.lock();
        if !self.exists_in(&state, path) {
            return Err(Error::io(path, "remove", io::ErrorKind::NotFound.into()));
        }
        state.entries.insert(path.to_path_buf(), Entry::Removed);
        state.events.push(format!("remove {}", path.display()));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock();
        let file = self.file(&mut state, from)?;
        state.entries.insert(from.to_path_buf(), Entry::Removed);
        state.entries.insert(to.to_path_buf(), Entry::File(file));
        state
            .events
            .push(format!("rename {} to {}", from.display(), to.display()));
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let state = self.lock();
        let mut paths: BTreeSet<PathBuf> = if self.base.is_dir(dir) {
            self.base.list(dir)?.into_iter().collect()
        } else {
            BTreeSet::new()
        };
        for (path, entry) in &state.entries {
            if path.parent() != Some(dir) {
                continue;
            }
            match entry {
                Entry::File(_) => paths.insert(path.clone()),
                Entry::Removed => paths.remove(path),
            };
        }
        Ok(paths.into_iter().collect())
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let state = self.lock();
        let mut paths: BTreeSet<PathBuf> = if self.base.is_dir(dir) {
            self.base.list_dirs(dir)?.into_iter().collect()
        } else {
            BTreeSet::new()
        };
        paths.extend(
            state
                .dirs
                .iter()
                .filter(|p| p.parent() == Some(dir))
                .cloned(),
        );
        Ok(paths.into_iter().collect())
    }

    // Inspection never moves or removes a folder; the overlay does not model it.
    fn rename_dir(&self, from: &Path, _to: &Path) -> Result<()> {
        Err(Error::Unsupported(format!(
            "rename of the folder {} in a read-only view",
            from.display()
        )))
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        Err(Error::Unsupported(format!(
            "removal of the folder {} in a read-only view",
            path.display()
        )))
    }
}

#[derive(Default)]
struct Inner {
    /// Blocks written, whole (read from beneath first where the write covered part of one).
    blocks: BTreeMap<u64, Vec<u8>>,
    len: u64,
    /// Bytes of the file beneath still visible: a truncation hides what lay past it for good.
    base_visible: u64,
}

struct OverlayFile {
    path: PathBuf,
    base: Option<Arc<dyn Storage>>,
    inner: Mutex<Inner>,
}

impl OverlayFile {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fills `buf` with block `index` as it stands, from memory or from beneath.
    fn read_block(&self, inner: &Inner, index: u64, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(buf.len() as u64, BLOCK_BYTES);
        if let Some(block) = inner.blocks.get(&index) {
            buf.copy_from_slice(block);
            return Ok(());
        }
        buf.fill(0);
        let start = index * BLOCK_BYTES;
        if let Some(base) = &self.base {
            let end = (start + BLOCK_BYTES).min(inner.base_visible);
            if end > start {
                base.read_at(start, &mut buf[..(end - start) as usize])?;
            }
        }
        Ok(())
    }
}

struct OverlayStorage {
    file: Arc<OverlayFile>,
}

impl Storage for OverlayStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let file = &self.file;
        let inner = file.lock();
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > inner.len) {
            return Err(Error::io(
                &file.path,
                "read",
                io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        // Untouched ranges read straight through, in one call.
        if let Some(base) = &file.base {
            if inner.blocks.is_empty() && offset + buf.len() as u64 <= inner.base_visible {
                return base.read_at(offset, buf);
            }
        }
        let mut block = vec![0u8; BLOCK_BYTES as usize];
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let index = at / BLOCK_BYTES;
            let within = (at % BLOCK_BYTES) as usize;
            let n = (BLOCK_BYTES as usize - within).min(buf.len() - done);
            file.read_block(&inner, index, &mut block)?;
            buf[done..done + n].copy_from_slice(&block[within..within + n]);
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let file = &self.file;
        let mut inner = file.lock();
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let index = at / BLOCK_BYTES;
            let within = (at % BLOCK_BYTES) as usize;
            let n = (BLOCK_BYTES as usize - within).min(data.len() - done);
            if !inner.blocks.contains_key(&index) {
                let mut block = vec![0u8; BLOCK_BYTES as usize];
                file.read_block(&inner, index, &mut block)?;
                inner.blocks.insert(index, block);
            }
            let block = inner.blocks.get_mut(&index).expect("inserted above");
            block[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        inner.len = inner.len.max(offset + data.len() as u64);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.file.lock().len)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut inner = self.file.lock();
        if len < inner.len {
            inner.base_visible = inner.base_visible.min(len);
            let first_gone = len.div_ceil(BLOCK_BYTES);
            inner.blocks.retain(|&index, _| index < first_gone);
            // The block the new end falls in keeps only the bytes before it.
            if let Some(block) = inner.blocks.get_mut(&(len / BLOCK_BYTES)) {
                block[(len % BLOCK_BYTES) as usize..].fill(0);
            }
        }
        inner.len = len;
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.file.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryFileSystem;

    fn base_with(path: &Path, bytes: &[u8]) -> Arc<MemoryFileSystem> {
        let base = Arc::new(MemoryFileSystem::new());
        base.create_dir_all(path.parent().unwrap()).unwrap();
        base.open(path, OpenMode::CreateNew)
            .unwrap()
            .write_at(0, bytes)
            .unwrap();
        base
    }

    #[test]
    fn writes_stay_in_memory_and_read_back_over_the_file_beneath() {
        let path = Path::new("/s/data");
        let original: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        let base = base_with(path, &original);
        let overlay = OverlayFileSystem::new(base.clone());
        let file = overlay.open(path, OpenMode::Existing).unwrap();
        file.write_at(5000, b"changed").unwrap();
        file.write_at(19_998, b"past the end").unwrap();
        file.sync().unwrap();
        let mut expected = original.clone();
        expected[5000..5007].copy_from_slice(b"changed");
        expected.truncate(19_998);
        expected.extend_from_slice(b"past the end");
        let mut seen = vec![0u8; expected.len()];
        overlay
            .open(path, OpenMode::ReadOnly)
            .unwrap()
            .read_at(0, &mut seen)
            .unwrap();
        assert_eq!(seen, expected);
        assert_eq!(file.len().unwrap(), expected.len() as u64);
        // Nothing reached the file beneath.
        assert_eq!(base.with_file(path, |b| b.clone()).unwrap(), original);
        assert_eq!(
            overlay.changes(),
            vec![Change::Written {
                path: path.to_path_buf(),
                blocks: vec![1, 4]
            }]
        );
        // Truncating hides what lay beneath past the cut, even after growing again.
        file.set_len(100).unwrap();
        file.set_len(200).unwrap();
        let mut tail = [1u8; 100];
        file.read_at(100, &mut tail).unwrap();
        assert_eq!(tail, [0u8; 100]);
        assert!(file.read_at(150, &mut tail).is_err());
    }

    #[test]
    fn names_created_renamed_and_removed_only_in_the_overlay() {
        let path = Path::new("/s/log/a");
        let base = base_with(path, b"abc");
        let overlay = OverlayFileSystem::new(base.clone());
        let new = Path::new("/s/log/b");
        overlay
            .open(new, OpenMode::CreateNew)
            .unwrap()
            .write_at(0, b"new")
            .unwrap();
        overlay.rename(path, Path::new("/s/log/c")).unwrap();
        overlay.remove(new).unwrap();
        assert_eq!(
            overlay.list(Path::new("/s/log")).unwrap(),
            vec![PathBuf::from("/s/log/c")]
        );
        assert!(!overlay.exists(path));
        assert!(base.exists(path) && !base.exists(new));
        assert_eq!(overlay.changes().len(), 3);
        let mut bytes = [0u8; 3];
        overlay
            .open(Path::new("/s/log/c"), OpenMode::Existing)
            .unwrap()
            .read_at(0, &mut bytes)
            .unwrap();
        assert_eq!(&bytes, b"abc");
    }
}
