//! The local archive (Moh section 4.3.2): one append-only file of checksummed page copies on
//! the store's machine, with an in-memory index from page to the times held, rebuilt by a
//! scan when opened.

use super::{Archive, PageCopy};
use crate::copies::{CopyFile, CopyFileKind};
use lodestore_core::{PageId, Result};
use lodestore_storage::FileSystem;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

/// A page's copies: time -> offset in the file.
type PageCopies = BTreeMap<u64, u64>;

pub struct LocalArchive {
    inner: Mutex<Inner>,
}

struct Inner {
    file: CopyFile,
    index: HashMap<PageId, PageCopies>,
}

impl LocalArchive {
    /// Opens the archive file at `path`, creating it if missing.
    pub fn open(fs: &dyn FileSystem, path: &Path, page_size: usize) -> Result<LocalArchive> {
        let (file, entries) = CopyFile::open(fs, path, page_size, CopyFileKind::Archive)?;
        let mut index: HashMap<PageId, PageCopies> = HashMap::new();
        for entry in entries {
            // A copy archived twice (a crash between archiving and clearing the snapshot
            // log) is the same bytes; either serves.
            index
                .entry(entry.page)
                .or_default()
                .insert(entry.time_us, entry.offset);
        }
        Ok(LocalArchive {
            inner: Mutex::new(Inner { file, index }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .expect("local archive poisoned by an earlier panic")
    }
}

impl Archive for LocalArchive {
    fn name(&self) -> String {
        self.lock().file.path().display().to_string()
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let mut inner = self.lock();
        let records: Vec<_> = copies
            .iter()
            .map(|c| (c.page, c.time_us, c.image))
            .collect();
        let offsets = inner.file.append(&records)?;
        inner.file.sync()?;
        for (copy, offset) in copies.iter().zip(offsets) {
            inner
                .index
                .entry(copy.page)
                .or_default()
                .insert(copy.time_us, offset);
        }
        Ok(())
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        let inner = self.lock();
        let Some((&time, &offset)) = inner
            .index
            .get(&page)
            .and_then(|copies| copies.range(time_us..).next())
        else {
            return Ok(None);
        };
        inner.file.read(offset, page, time, buf)?;
        Ok(Some(time))
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        Ok(self
            .lock()
            .index
            .get(&page)
            .and_then(|copies| copies.keys().next_back().copied()))
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        let inner = self.lock();
        Some(
            inner
                .index
                .iter()
                .filter_map(|(page, copies)| copies.keys().next_back().map(|t| (*page, *t)))
                .collect(),
        )
    }

    fn bytes(&self) -> u64 {
        self.lock().file.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    const PAGE: usize = 256;

    #[test]
    fn get_answers_the_oldest_copy_at_or_after_a_time() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/archive");
        let archive = LocalArchive::open(&fs, path, PAGE).unwrap();
        let (a, b) = (vec![1u8; PAGE], vec![2u8; PAGE]);
        let p = PageId(9);
        archive
            .put(&[
                PageCopy {
                    page: p,
                    time_us: 10,
                    image: &a,
                },
                PageCopy {
                    page: p,
                    time_us: 20,
                    image: &b,
                },
            ])
            .unwrap();
        // Reopened: the index comes back from the file.
        drop(archive);
        let archive = LocalArchive::open(&fs, path, PAGE).unwrap();
        let mut buf = vec![0u8; PAGE];
        assert_eq!(archive.get(p, 5, &mut buf).unwrap(), Some(10));
        assert_eq!(buf, a);
        assert_eq!(archive.get(p, 10, &mut buf).unwrap(), Some(10));
        assert_eq!(archive.get(p, 11, &mut buf).unwrap(), Some(20));
        assert_eq!(buf, b);
        assert_eq!(archive.get(p, 21, &mut buf).unwrap(), None);
        assert_eq!(archive.get(PageId(8), 0, &mut buf).unwrap(), None);
        assert_eq!(archive.get_ts(p).unwrap(), Some(20));
        assert_eq!(archive.get_ts(PageId(8)).unwrap(), None);
    }
}
