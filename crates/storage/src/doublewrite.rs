//! The double-write file: a ring of page slots beside the data file. A page whose home write a
//! crash could tear, and which the log cannot rebuild (no whole image of it since the restart
//! point), is first written to a slot and synced there, then written home. A restart puts a
//! slot's copy home wherever the home copy is torn or older, so redo always starts from a whole
//! page and the log never needs whole-page images to guard against torn writes.
//!
//! The file has no header: every slot is a sealed page (format version, checksum, page number,
//! volume id and LSN in its header), so a slot torn by a crash fails verification and is
//! skipped (its home write had not begun: home writes wait for the slots' sync). A slot is
//! reused only once the home writes of its previous copy are durable: wrapping round the ring
//! syncs the data file first. A checkpoint that leaves everything home empties the file, so a
//! closed store keeps nothing in it.

use crate::fs::{FileSystem, OpenMode, Storage};
use crate::page::{self, PageKind};
use crate::volume::{Volume, INITIAL_PAGE_COUNT};
use lodestore_core::{Lsn, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the double-write file of volume 0 inside a store's folder.
pub const DOUBLE_WRITE_FILE_NAME: &str = "volume-0.doublewrite";

/// Slots in the ring: the most pages one batch writes (2 MiB of 8 KiB pages). More slots mean
/// fewer syncs per checkpoint and more to read at a restart.
pub const DOUBLE_WRITE_SLOTS: usize = 256;

/// The path of the double-write file of the store in `dir`.
pub fn double_write_path(dir: &Path) -> PathBuf {
    dir.join(DOUBLE_WRITE_FILE_NAME)
}

/// What a restart found in the double-write file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Slots holding a whole page newer than the last checkpoint.
    pub slots_whole: u32,
    /// Pages written home from a slot (their home copy was torn or older).
    pub pages_restored: u32,
}

/// The open double-write file.
pub struct DoubleWrite {
    storage: Arc<dyn Storage>,
    page_size: usize,
    /// The slot the next batch starts at.
    next: usize,
    /// Home writes were issued since the data file was last synced.
    home_unsynced: bool,
    /// Slots were written since the file was last emptied.
    used: bool,
    /// The batch being written, sealed, slot after slot.
    buf: Vec<u8>,
}

impl std::fmt::Debug for DoubleWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoubleWrite")
            .field("path", &self.storage.path())
            .field("next", &self.next)
            .finish()
    }
}

impl DoubleWrite {
    /// Opens the double-write file of the store in `dir`, creating it empty if it is missing
    /// (a store made before it existed, or whose creation it did not reach).
    pub fn open(fs: &dyn FileSystem, dir: &Path, page_size: usize) -> Result<DoubleWrite> {
        let path = double_write_path(dir);
        let mode = if fs.exists(&path) {
            OpenMode::Existing
        } else {
            OpenMode::CreateNew
        };
        let storage = fs.open(&path, mode)?;
        let used = storage.len()? > 0;
        Ok(DoubleWrite {
            storage,
            page_size,
            next: 0,
            home_unsynced: false,
            used,
            buf: Vec::new(),
        })
    }

    /// The most pages one call of [`Self::write_home`] takes.
    pub fn batch_limit(&self) -> usize {
        DOUBLE_WRITE_SLOTS
    }

    /// Writes `pages` (each a page image naming its page) to the next slots, syncs them, then
    /// writes each home (not synced: the caller syncs the data file when it needs to, and the
    /// ring does before it reuses these slots). The log must already be durable up to every
    /// page's LSN: a restart may put these copies home.
    pub fn write_home(&mut self, volume: &Volume, pages: &mut [&mut [u8]]) -> Result<()> {
        assert!(
            pages.len() <= DOUBLE_WRITE_SLOTS,
            "batch larger than the ring"
        );
        if pages.is_empty() {
            return Ok(());
        }
        if self.next + pages.len() > DOUBLE_WRITE_SLOTS {
            // The slots ahead hold copies of the last lap, whose home writes must be durable
            // before the copies go.
            self.sync_home(volume)?;
            self.next = 0;
        }
        self.buf.clear();
        for image in pages.iter_mut() {
            debug_assert_eq!(image.len(), self.page_size);
            page::seal(image);
            self.buf.extend_from_slice(image);
        }
        self.storage
            .write_at((self.next * self.page_size) as u64, &self.buf)?;
        self.storage.sync()?;
        self.used = true;
        self.next += pages.len();
        self.home_unsynced = true;
        // Home from the sealed copies just written here: one write per run of consecutive
        // pages (a checkpoint's batch comes in page order) instead of one per page, which
        // cost a checkpoint of a few hundred pages milliseconds of system calls.
        let mut start = 0;
        while start < pages.len() {
            let first = page::number(pages[start]);
            let mut end = start + 1;
            while end < pages.len() && page::number(pages[end]).0 == first.0 + (end - start) as u32
            {
                end += 1;
            }
            if end - start == 1 || first.0 < INITIAL_PAGE_COUNT {
                for image in pages[start..end].iter_mut() {
                    volume.write_page(page::number(image), image)?;
                }
            } else {
                let bytes = &mut self.buf[start * self.page_size..end * self.page_size];
                volume.write_pages(first, bytes)?;
            }
            start = end;
        }
        Ok(())
    }

    /// Syncs the data file if home writes are pending.
    fn sync_home(&mut self, volume: &Volume) -> Result<()> {
        if self.home_unsynced {
            volume.sync()?;
            self.home_unsynced = false;
        }
        Ok(())
    }

    /// The data file was synced by someone else: every home write so far is durable.
    pub fn home_synced(&mut self) {
        self.home_unsynced = false;
    }

    /// Empties the file once every page written through it is durable at home (the data file
    /// synced since), so a closed store keeps no copies.
    pub fn empty(&mut self) -> Result<()> {
        assert!(
            !self.home_unsynced,
            "emptied before the home writes were synced"
        );
        if self.used {
            self.storage.set_len(0)?;
            self.used = false;
        }
        self.next = 0;
        Ok(())
    }

    /// At a restart, before anything else reads the data file: every slot holding a whole page
    /// of this volume, newer than `checkpoint` (the begin LSN of the last checkpoint that
    /// completed), whose home copy is torn or older, goes home, and the data file is synced if
    /// any such slot was found. Running it again finds nothing more to do.
    ///
    /// A copy at or below `checkpoint` was written home before that checkpoint synced the data
    /// file, and may since have been overtaken by a home write that needed no copy (a page the
    /// log holds whole): putting it home over a page damaged some other way would bring back
    /// an old version. Newer copies belong to pages that go home only through this file until
    /// the next checkpoint, and the newest copy of a page leaves the ring last.
    pub fn restore(&mut self, volume: &Volume, checkpoint: Lsn) -> Result<Restored> {
        let mut found = Restored::default();
        let slots = self.storage.len()? / self.page_size as u64;
        // Read a ring's worth at a time, whatever the file's length: memory stays bounded.
        let mut copies = Vec::new();
        let mut home = vec![0u8; self.page_size];
        let mut first = 0u64;
        while first < slots {
            let count = (slots - first).min(DOUBLE_WRITE_SLOTS as u64) as usize;
            copies.resize(count * self.page_size, 0);
            self.storage
                .read_at(first * self.page_size as u64, &mut copies)?;
            for copy in copies.chunks_exact(self.page_size) {
                match restore_slot(volume, checkpoint, copy, &mut home)? {
                    Slot::Ignored => {}
                    Slot::HomeCurrent => found.slots_whole += 1,
                    Slot::Restored => {
                        found.slots_whole += 1;
                        found.pages_restored += 1;
                    }
                }
            }
            first += count as u64;
        }
        // A home copy found current may still be only in the operating system's cache (the
        // process was killed, the machine was not): durable before its slot is reused.
        if found.slots_whole > 0 {
            volume.sync()?;
        }
        // Every slot's copy is durable at home now: the ring starts over.
        self.next = 0;
        self.home_unsynced = false;
        Ok(found)
    }
}

/// What a restart did with one slot.
enum Slot {
    /// Not a whole copy of a data page of this volume newer than the checkpoint.
    Ignored,
    /// A copy whose home copy is whole and at least as new.
    HomeCurrent,
    /// A copy written home over a torn or older home copy.
    Restored,
}

/// Puts `copy` home if it is a whole data page of `volume`, newer than `checkpoint`, and its
/// home copy (read into `home`) is torn or older.
fn restore_slot(volume: &Volume, checkpoint: Lsn, copy: &[u8], home: &mut [u8]) -> Result<Slot> {
    let number = page::number(copy);
    // Only data pages pass through here (superblocks and space maps have their own
    // protection), and only pages the last checkpoint recorded (a page added since is a fresh
    // page, which the log holds whole): anything else is not a copy this file was given.
    let is_data = page::verify(copy, number, volume.volume_id())
        .is_ok_and(|kind| !matches!(kind, PageKind::Superblock | PageKind::SpaceMap));
    if !is_data || page::lsn(copy) <= checkpoint || number.0 >= volume.page_count() {
        return Ok(Slot::Ignored);
    }
    let home_is_current = volume
        .read_page_sealed(number, home)
        .is_ok_and(|_| page::lsn(home) >= page::lsn(copy));
    if home_is_current {
        return Ok(Slot::HomeCurrent);
    }
    tracing::info!(page = %number, lsn = page::lsn(copy).0, "page restored from the double-write file");
    let mut sealed = copy.to_vec();
    volume.write_page(number, &mut sealed)?;
    Ok(Slot::Restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::OpenMode;
    use crate::memory::MemoryFileSystem;
    use lodestore_core::PageId;

    const PAGE: usize = 4096;

    fn store(fs: &MemoryFileSystem) -> (Volume, DoubleWrite) {
        let dir = Path::new("/s");
        let volume = Volume::create(fs, dir, PAGE).unwrap();
        volume.extend(8).unwrap();
        let dw = DoubleWrite::open(fs, dir, PAGE).unwrap();
        (volume, dw)
    }

    fn image(id: u32, lsn: u64, fill: u8) -> Vec<u8> {
        let mut bytes = vec![0u8; PAGE];
        page::format(&mut bytes, PageKind::Free, PageId(id), 0);
        bytes[200..300].fill(fill);
        page::set_lsn(&mut bytes, Lsn(lsn));
        bytes
    }

    fn home(volume: &Volume, id: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; PAGE];
        volume.read_page_unverified(PageId(id), &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_torn_home_write_is_completed_from_its_slot() {
        let fs = MemoryFileSystem::new();
        let (volume, mut dw) = store(&fs);
        let mut a = image(5, 10, 0xAA);
        let mut b = image(6, 11, 0xBB);
        dw.write_home(&volume, &mut [&mut a[..], &mut b[..]])
            .unwrap();
        // Tear page 5 at home as a crash would.
        let mut torn = home(&volume, 5);
        torn[1000..].fill(0x11);
        volume
            .storage()
            .write_at(PageId(5).offset(PAGE), &torn)
            .unwrap();
        let found = dw.restore(&volume, Lsn(1)).unwrap();
        assert_eq!(
            found,
            Restored {
                slots_whole: 2,
                pages_restored: 1
            }
        );
        assert_eq!(home(&volume, 5), a);
        // A second restore finds the pages home.
        assert_eq!(dw.restore(&volume, Lsn(1)).unwrap().pages_restored, 0);
    }

    #[test]
    fn a_batch_goes_home_in_one_write_per_run_of_consecutive_pages() {
        let fs = crate::sim::SimFileSystem::new();
        let dir = Path::new("/s");
        let volume = Volume::create(&fs, dir, PAGE).unwrap();
        volume.extend_to(16).unwrap();
        let mut dw = DoubleWrite::open(&fs, dir, PAGE).unwrap();
        let numbers = [4u32, 5, 6, 9, 10, 12];
        let mut pages: Vec<Vec<u8>> = numbers.iter().map(|&id| image(id, 7, id as u8)).collect();
        let before = fs.operations();
        let mut batch: Vec<&mut [u8]> = pages.iter_mut().map(|p| &mut p[..]).collect();
        dw.write_home(&volume, &mut batch).unwrap();
        // The slots' write and sync, then runs 4-6, 9-10 and 12.
        assert_eq!(fs.operations() - before, 2 + 3);
        for (&id, image) in numbers.iter().zip(&pages) {
            assert_eq!(&home(&volume, id), image, "page {id} at home");
            volume
                .read_page_sealed(PageId(id), &mut vec![0u8; PAGE])
                .unwrap();
        }
    }

    #[test]
    fn a_torn_slot_is_skipped_and_an_older_copy_never_overwrites_a_newer_home() {
        let fs = MemoryFileSystem::new();
        let (volume, mut dw) = store(&fs);
        let mut old = image(5, 10, 0xAA);
        dw.write_home(&volume, &mut [&mut old[..]]).unwrap();
        let mut new = image(5, 20, 0xCC);
        dw.write_home(&volume, &mut [&mut new[..]]).unwrap();
        // Tear the second slot: its home write is whole, the first slot is older.
        let storage = fs
            .open(&double_write_path(Path::new("/s")), OpenMode::Existing)
            .unwrap();
        storage.write_at(PAGE as u64 + 100, &[0x55; 50]).unwrap();
        let found = dw.restore(&volume, Lsn(1)).unwrap();
        assert_eq!(
            found,
            Restored {
                slots_whole: 1,
                pages_restored: 0
            }
        );
        assert_eq!(home(&volume, 5), new);
    }

    #[test]
    fn wrapping_the_ring_syncs_home_first_and_emptying_keeps_nothing() {
        let fs = MemoryFileSystem::new();
        let (volume, mut dw) = store(&fs);
        volume.extend_to(DOUBLE_WRITE_SLOTS as u32 + 20).unwrap();
        let mut pages: Vec<Vec<u8>> = (0..DOUBLE_WRITE_SLOTS as u32)
            .map(|i| image(10 + i, 5, i as u8))
            .collect();
        let mut batch: Vec<&mut [u8]> = pages.iter_mut().map(|p| &mut p[..]).collect();
        dw.write_home(&volume, &mut batch).unwrap();
        assert!(dw.home_unsynced);
        let mut one = image(4, 6, 1);
        dw.write_home(&volume, &mut [&mut one[..]]).unwrap();
        assert_eq!(dw.next, 1, "the ring wrapped");
        dw.sync_home(&volume).unwrap();
        dw.empty().unwrap();
        assert_eq!(dw.storage.len().unwrap(), 0);
        assert_eq!(dw.restore(&volume, Lsn(1)).unwrap(), Restored::default());
    }

    #[test]
    fn a_copy_from_before_the_last_checkpoint_is_never_put_home() {
        let fs = MemoryFileSystem::new();
        let (volume, mut dw) = store(&fs);
        let mut a = image(5, 10, 0xAA);
        dw.write_home(&volume, &mut [&mut a[..]]).unwrap();
        // Page 5 is damaged at home after a checkpoint at LSN 10 made the copy durable there:
        // the old copy must not come back (the page may have changed since without a copy).
        volume
            .storage()
            .write_at(PageId(5).offset(PAGE) + 2000, &[0x11; 8])
            .unwrap();
        assert_eq!(dw.restore(&volume, Lsn(10)).unwrap(), Restored::default());
        assert!(volume
            .read_page_sealed(PageId(5), &mut vec![0u8; PAGE])
            .is_err());
    }

    #[test]
    fn a_slot_naming_a_page_past_the_file_is_ignored_and_a_long_file_is_read_in_pieces() {
        let fs = MemoryFileSystem::new();
        let (volume, mut dw) = store(&fs);
        let pages = volume.page_count();
        let storage = fs
            .open(&double_write_path(Path::new("/s")), OpenMode::Existing)
            .unwrap();
        // A whole copy of a page far past the end, after more than a ring of empty slots.
        let mut far = image(1_000_000, 50, 0xEE);
        page::seal(&mut far);
        let at = (DOUBLE_WRITE_SLOTS as u64 + 3) * PAGE as u64;
        storage.write_at(at, &far).unwrap();
        // And a copy of a page that is there, torn at home, in the second piece too.
        let mut near = image(7, 50, 0x77);
        page::seal(&mut near);
        storage.write_at(at + PAGE as u64, &near).unwrap();
        volume
            .storage()
            .write_at(PageId(7).offset(PAGE) + 100, &[0x99; 8])
            .unwrap();
        let found = dw.restore(&volume, Lsn(1)).unwrap();
        assert_eq!(
            found,
            Restored {
                slots_whole: 1,
                pages_restored: 1
            }
        );
        assert_eq!(volume.page_count(), pages, "the file did not grow");
        assert_eq!(home(&volume, 7), near);
    }
}
