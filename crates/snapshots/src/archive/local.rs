//! The local archive (Moh section 4.3.2): one append-only file of checksummed page copies on
//! the store's machine, with an in-memory index from page to the times held, rebuilt by a
//! scan when opened. Removed copies leave the index at once; their bytes are reclaimed when
//! they outweigh the live ones, by writing the live copies to a new file and renaming it over
//! the old (a crash leaves one or the other, whole).

use super::{Archive, PageCopy};
use crate::copies::{CopyFile, CopyFileKind};
use lodestore_core::{PageId, Result};
use lodestore_storage::FileSystem;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The location the store records for its local archive (see `crate::location`).
pub const LOCAL_LOCATION: &str = "local";

/// Copies read and written per batch while compacting.
const COMPACT_BATCH_COPIES: usize = 64;

/// A page's copies: time -> offset in the file.
type PageCopies = BTreeMap<u64, u64>;

pub struct LocalArchive {
    inner: Mutex<Inner>,
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    page_size: usize,
}

struct Inner {
    file: CopyFile,
    index: HashMap<PageId, PageCopies>,
    /// Copies in the file that the index no longer holds.
    garbage: u64,
}

impl LocalArchive {
    /// Opens the archive file at `path`, creating it if missing.
    pub fn open(fs: Arc<dyn FileSystem>, path: &Path, page_size: usize) -> Result<LocalArchive> {
        // A compaction cut by a crash before its rename left a partial file: the old one is
        // whole and stays.
        let compacting = compaction_path(path);
        if fs.exists(&compacting) {
            fs.remove(&compacting)?;
        }
        let (file, index, garbage) = Self::load(fs.as_ref(), path, page_size)?;
        Ok(LocalArchive {
            inner: Mutex::new(Inner {
                file,
                index,
                garbage,
            }),
            fs,
            path: path.to_path_buf(),
            page_size,
        })
    }

    fn load(
        fs: &dyn FileSystem,
        path: &Path,
        page_size: usize,
    ) -> Result<(CopyFile, HashMap<PageId, PageCopies>, u64)> {
        let (file, entries) = CopyFile::open(fs, path, page_size, CopyFileKind::Archive)?;
        let mut index: HashMap<PageId, PageCopies> = HashMap::new();
        let mut garbage = 0;
        for entry in entries {
            // A copy archived twice (a crash between archiving and clearing the snapshot
            // log) is the same bytes; either serves.
            let replaced = index
                .entry(entry.page)
                .or_default()
                .insert(entry.time_us, entry.offset);
            garbage += u64::from(replaced.is_some());
        }
        Ok((file, index, garbage))
    }

    /// Bytes of the pages it holds copies of.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Copies held and copies whose bytes wait to be reclaimed.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.lock();
        let live = inner.index.values().map(|c| c.len() as u64).sum();
        (live, inner.garbage)
    }

    /// Writes the live copies to a new file and renames it over the old one.
    fn compact(&self, inner: &mut Inner) -> Result<()> {
        let compacting = compaction_path(&self.path);
        if self.fs.exists(&compacting) {
            self.fs.remove(&compacting)?;
        }
        let (mut fresh, _) = CopyFile::open(
            self.fs.as_ref(),
            &compacting,
            self.page_size,
            CopyFileKind::Archive,
        )?;
        let live: Vec<(PageId, u64, u64)> = inner
            .index
            .iter()
            .flat_map(|(page, copies)| copies.iter().map(move |(t, o)| (*page, *t, *o)))
            .collect();
        let mut images = vec![0u8; COMPACT_BATCH_COPIES * self.page_size];
        for batch in live.chunks(COMPACT_BATCH_COPIES) {
            for ((page, time, offset), image) in
                batch.iter().zip(images.chunks_exact_mut(self.page_size))
            {
                inner.file.read(*offset, *page, *time, image)?;
            }
            let records: Vec<(PageId, u64, &[u8])> = batch
                .iter()
                .zip(images.chunks_exact(self.page_size))
                .map(|((page, time, _), image)| (*page, *time, image))
                .collect();
            fresh.append(&records)?;
        }
        fresh.sync()?;
        drop(fresh);
        self.fs.rename(&compacting, &self.path)?;
        let (file, index, garbage) = Self::load(self.fs.as_ref(), &self.path, self.page_size)?;
        debug_assert_eq!(garbage, 0);
        *inner = Inner {
            file,
            index,
            garbage,
        };
        Ok(())
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

    fn location(&self) -> String {
        LOCAL_LOCATION.into()
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

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        let inner = self.lock();
        Some(
            inner
                .index
                .iter()
                .flat_map(|(page, copies)| copies.keys().map(move |t| (*page, *t)))
                .collect(),
        )
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        let mut inner = self.lock();
        for (page, time) in copies {
            let Some(held) = inner.index.get_mut(page) else {
                continue;
            };
            if held.remove(time).is_some() {
                inner.garbage += 1;
            }
            if inner.index.get(page).is_some_and(BTreeMap::is_empty) {
                inner.index.remove(page);
            }
        }
        let live: u64 = inner.index.values().map(|c| c.len() as u64).sum();
        if inner.garbage > 0 && inner.garbage >= live {
            self.compact(&mut inner)?;
        }
        Ok(())
    }

    fn bytes(&self) -> u64 {
        self.lock().file.len()
    }
}

fn compaction_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".compacting");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    const PAGE: usize = 256;

    #[test]
    fn meets_the_archive_contract() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemoryFileSystem::new());
        let archive = LocalArchive::open(fs, Path::new("/archive"), PAGE).unwrap();
        lodestore_protocol::archive::conformance::check_contract(&archive, PAGE).unwrap();
    }

    #[test]
    fn get_answers_the_oldest_copy_at_or_after_a_time() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemoryFileSystem::new());
        let path = Path::new("/archive");
        let archive = LocalArchive::open(fs.clone(), path, PAGE).unwrap();
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
        let archive = LocalArchive::open(fs.clone(), path, PAGE).unwrap();
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

    #[test]
    fn removed_copies_are_reclaimed_once_they_outweigh_the_live_ones() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemoryFileSystem::new());
        let path = Path::new("/archive");
        let archive = LocalArchive::open(fs.clone(), path, PAGE).unwrap();
        let images: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; PAGE]).collect();
        let copies: Vec<PageCopy<'_>> = (0..6u32)
            .map(|i| PageCopy {
                page: PageId(i % 2),
                time_us: u64::from(10 + i),
                image: &images[i as usize],
            })
            .collect();
        archive.put(&copies).unwrap();
        let full = archive.bytes();
        archive.remove(&[(PageId(0), 10)]).unwrap();
        assert_eq!(archive.counts(), (5, 1));
        assert_eq!(
            archive.bytes(),
            full,
            "one removed copy of six stays in the file"
        );
        archive.remove(&[(PageId(1), 11), (PageId(0), 12)]).unwrap();
        assert_eq!(archive.counts(), (3, 0), "three of six removed: compacted");
        assert!(archive.bytes() < full);
        // What is left reads back, after reopening too.
        drop(archive);
        let archive = LocalArchive::open(fs.clone(), path, PAGE).unwrap();
        let mut buf = vec![0u8; PAGE];
        assert_eq!(archive.get(PageId(0), 0, &mut buf).unwrap(), Some(14));
        assert_eq!(buf, images[4]);
        assert_eq!(archive.get(PageId(1), 0, &mut buf).unwrap(), Some(13));
        assert_eq!(buf, images[3]);
        assert_eq!(archive.counts(), (3, 0));
    }
}
