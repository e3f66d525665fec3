//! The two backup images of a main-memory store (`differential/backup-0.image`,
//! `backup-1.image`), written by checkpoints in turn: checkpoint `k` writes backup `k % 2`, so
//! a crash in the middle of one leaves the other whole, and restart loads the one the anchor
//! names. Page `p` lies at byte `p x page size`. The file has no header of its own: every page
//! is sealed (format version, checksum, number and volume in its header), and the anchor says
//! how many pages the backup holds. Pages that hold no data (superblock, space maps) are not
//! written and stay holes.

use lodestore_core::{Error, PageId, Result, VolumeId};
use lodestore_storage::{page, FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file of backup `index` (0 or 1) in the family's folder `dir`.
pub fn backup_path(dir: &Path, index: usize) -> PathBuf {
    assert!(index < 2, "there are two backups");
    dir.join(format!("backup-{index}.image"))
}

/// An open backup image.
pub struct Backup {
    file: Arc<dyn Storage>,
    page_size: usize,
    volume: VolumeId,
}

impl Backup {
    /// Opens backup `index` in `dir`, creating it empty if it does not exist.
    pub fn open(
        fs: &dyn FileSystem,
        dir: &Path,
        index: usize,
        page_size: usize,
        volume: VolumeId,
    ) -> Result<Backup> {
        let path = backup_path(dir, index);
        let mode = if fs.exists(&path) {
            OpenMode::Existing
        } else {
            OpenMode::CreateNew
        };
        Ok(Backup {
            file: fs.open(&path, mode)?,
            page_size,
            volume,
        })
    }

    /// Opens backup `index` in `dir` read-only (inspection tools).
    pub fn open_read_only(
        fs: &dyn FileSystem,
        dir: &Path,
        index: usize,
        page_size: usize,
        volume: VolumeId,
    ) -> Result<Backup> {
        Ok(Backup {
            file: fs.open(&backup_path(dir, index), OpenMode::ReadOnly)?,
            page_size,
            volume,
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Writes `pages` (each sealed here, numbered by its header), contiguous runs in one
    /// write each.
    pub fn write_pages(&self, pages: &mut [&mut [u8]]) -> Result<()> {
        for bytes in pages.iter_mut() {
            debug_assert_eq!(bytes.len(), self.page_size);
            page::seal(bytes);
        }
        let mut i = 0;
        let mut run = Vec::new();
        while i < pages.len() {
            let first = page::number(pages[i]).0;
            let mut j = i + 1;
            while j < pages.len() && page::number(pages[j]).0 == first + (j - i) as u32 {
                j += 1;
            }
            let offset = first as u64 * self.page_size as u64;
            if j == i + 1 {
                self.file.write_at(offset, pages[i])?;
            } else {
                run.clear();
                for bytes in &pages[i..j] {
                    run.extend_from_slice(bytes);
                }
                self.file.write_at(offset, &run)?;
            }
            i = j;
        }
        Ok(())
    }

    /// Reads page `id` into `buf` and checks it whole.
    pub fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        let offset = id.0 as u64 * self.page_size as u64;
        let len = self.file.len()?;
        if offset + self.page_size as u64 > len {
            return Err(self.corrupt(id, format!("past the end of the file ({len} bytes)")));
        }
        self.file.read_at(offset, buf)?;
        page::verify(buf, id, self.volume).map_err(|reason| self.corrupt(id, reason))?;
        Ok(())
    }

    /// Reads the pages from `first` on into `buf` (a whole number of pages) in one read, left
    /// unchecked: a restart loads a backup in runs and checks each page it keeps with
    /// [`Backup::verify`].
    pub fn read_run(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        assert!(
            buf.len().is_multiple_of(self.page_size),
            "a run of whole pages"
        );
        let offset = first.0 as u64 * self.page_size as u64;
        let len = self.file.len()?;
        if offset + buf.len() as u64 > len {
            return Err(self.corrupt(
                first,
                format!(
                    "a run of {} bytes from it passes the end of the file ({len} bytes)",
                    buf.len()
                ),
            ));
        }
        self.file.read_at(offset, buf)
    }

    /// Checks `bytes` as the backup's copy of page `id`.
    pub fn verify(&self, id: PageId, bytes: &[u8]) -> Result<()> {
        page::verify(bytes, id, self.volume)
            .map(|_| ())
            .map_err(|reason| self.corrupt(id, reason))
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync()
    }

    fn corrupt(&self, id: PageId, reason: impl Into<String>) -> Error {
        Error::CorruptFile {
            path: self.path().to_path_buf(),
            reason: format!("page {id}: {}", reason.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::page::PageKind;
    use lodestore_storage::MemoryFileSystem;

    #[test]
    fn pages_read_back_and_damage_is_named() {
        let fs = MemoryFileSystem::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let volume: VolumeId = 0;
        let backup = Backup::open(&fs, dir, 1, 4096, volume).unwrap();
        let mut pages: Vec<Vec<u8>> = [3u32, 4, 5, 9]
            .iter()
            .map(|&p| {
                let mut b = vec![0u8; 4096];
                page::format(&mut b, PageKind::Free, PageId(p), volume);
                b[100] = p as u8;
                b
            })
            .collect();
        let mut refs: Vec<&mut [u8]> = pages.iter_mut().map(|p| &mut p[..]).collect();
        backup.write_pages(&mut refs).unwrap();
        let mut buf = vec![0u8; 4096];
        for p in [3u32, 4, 5, 9] {
            backup.read_page(PageId(p), &mut buf).unwrap();
            assert_eq!(buf[100], p as u8);
        }
        let err = backup
            .read_page(PageId(6), &mut buf)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("backup-1.image") && err.contains("page 6"),
            "{err}"
        );
        let err = backup
            .read_page(PageId(10), &mut buf)
            .unwrap_err()
            .to_string();
        assert!(err.contains("past the end"), "{err}");
        let file = fs.open(&backup_path(dir, 1), OpenMode::Existing).unwrap();
        file.write_at(4 * 4096 + 200, &[1]).unwrap();
        assert!(backup.read_page(PageId(4), &mut buf).is_err());
    }
}
