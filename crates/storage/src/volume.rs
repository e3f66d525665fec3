//! A volume's data file: fixed-size pages, each written whole and sealed with its checksum,
//! each verified when read back. Pages 0 and 1 are the superblock copies, page 2 the first space
//! map, page 3 the named-roots directory; everything after is data.

use crate::bytes::is_all_zero;
use crate::directory::{self, DIRECTORY_PAGE};
use crate::fs::{FileSystem, OpenMode, Storage};
use crate::page::{self, PageKind};
use crate::slotted;
use crate::spacemap::{self, FIRST_MAP_PAGE};
use crate::superblock::{self, CopyProblem, Superblock, SUPERBLOCK_PAGES};
use crate::unwritten::UnwrittenPages;
use lodestore_core::limits::{page_size_is_supported, PAGE_SIZES_SUPPORTED, PAGE_SIZE_MIN};
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TypeId, VolumeId};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Name of the data file of volume 0 inside a store's folder.
pub const DATA_FILE_NAME: &str = "volume-0.data";

/// Pages every store has from creation on: two superblocks, a space map, the directory.
pub const INITIAL_PAGE_COUNT: u32 = 4;

/// The most pages one extension of the file adds (bounds the buffer it writes from).
pub const EXTEND_PAGES_MAX: u32 = 4096;
/// Pages an extension writes per call.
const EXTEND_WRITE_PAGES: usize = 64;
/// Shortest run of [`Volume::write_pages_before_sync`] whose write-back starts at once: a
/// hint per short run would cost more system calls than the sync saves.
const WRITE_BEHIND_MIN_BYTES: usize = 128 << 10;

/// The path of the data file of the store in `dir`.
pub fn data_file_path(dir: &Path) -> PathBuf {
    dir.join(DATA_FILE_NAME)
}

/// One open data file.
pub struct Volume {
    storage: Arc<dyn Storage>,
    page_size: usize,
    volume_id: VolumeId,
    /// Pages in the file, committed or not.
    page_count: AtomicU32,
    superblock: Mutex<Superblock>,
    /// The superblock's page count, read on every page read past it without its lock.
    recorded_pages: AtomicU32,
    /// Serialises file extension, and keeps the buffer extensions write from.
    extend_lock: Mutex<Vec<u8>>,
    /// Pages [`Volume::grow`] added and nothing has written since.
    unwritten: UnwrittenPages,
    read_only: bool,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume")
            .field("path", &self.path())
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// The result of reading both superblock copies, for `check`.
pub struct SuperblockCopies {
    pub copies: [Result<Superblock, CopyProblem>; 2],
}

impl Volume {
    /// Creates a new store with `page_size` pages in folder `dir`.
    pub fn create(fs: &dyn FileSystem, dir: &Path, page_size: usize) -> Result<Volume> {
        if !page_size_is_supported(page_size) {
            return Err(Error::InvalidArgument(format!(
                "page size {page_size} is not one of {PAGE_SIZES_SUPPORTED:?}"
            )));
        }
        let path = data_file_path(dir);
        if fs.exists(&path) {
            return Err(Error::AlreadyExists {
                path: dir.to_path_buf(),
            });
        }
        fs.create_dir_all(dir)?;
        let storage = fs.open(&path, OpenMode::CreateNew)?;
        let volume_id = 0;

        // Data pages first, then the superblocks: a crash in between leaves a file with no
        // valid superblock, which open reports, rather than a superblock pointing at nothing.
        let mut map = vec![0u8; page_size];
        spacemap::init(&mut map, FIRST_MAP_PAGE, volume_id);
        let (_, index) = spacemap::locate(DIRECTORY_PAGE, page_size);
        spacemap::entries_mut(&mut map)[index] = spacemap::ENTRY_UNAVAILABLE;
        page::seal(&mut map);
        storage.write_at(FIRST_MAP_PAGE.offset(page_size), &map)?;

        let mut dir_page = vec![0u8; page_size];
        slotted::init(&mut dir_page, DIRECTORY_PAGE, volume_id);
        let empty = BTreeMap::new();
        let len = directory::encoded_len(&empty);
        let slot = slotted::insert(&mut dir_page, TypeId::ROOT_DIRECTORY, len, false)
            .expect("an empty page holds an empty directory");
        let record = slotted::record(&dir_page, slot)
            .ok()
            .flatten()
            .expect("record just inserted");
        directory::encode(&empty, &mut dir_page[record.payload()]);
        page::seal(&mut dir_page);
        storage.write_at(DIRECTORY_PAGE.offset(page_size), &dir_page)?;
        storage.sync()?;

        let sb = Superblock {
            page_size,
            generation: 1,
            last_lsn: Lsn::ZERO,
            root_directory: Oid::new(volume_id, DIRECTORY_PAGE, slot),
            created_unix_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            volume_id,
            page_count: INITIAL_PAGE_COUNT,
            checkpoint_lsn: Lsn::ZERO,
            log_segment_bytes: 0,
            recovery_method: crate::superblock::RECOVERY_METHOD_CODE_DEFAULT,
            multi_level_strategy: 0,
        };
        write_superblock_copies(storage.as_ref(), &sb)?;
        let current = sb;
        tracing::info!(path = %path.display(), page_size, "created store");
        Ok(Volume {
            storage,
            page_size,
            volume_id,
            page_count: AtomicU32::new(INITIAL_PAGE_COUNT),
            recorded_pages: AtomicU32::new(current.page_count),
            superblock: Mutex::new(current),
            extend_lock: Mutex::new(Vec::new()),
            unwritten: UnwrittenPages::default(),
            read_only: false,
        })
    }

    /// Opens the store in folder `dir`. `requested_page_size`, when given, must match the
    /// store's. Pages past the superblock's page count are kept: they may hold changes the log
    /// still describes; recovery decides what they are. A partial page at the end (a torn
    /// extension) is cut off by a writable open.
    pub fn open(
        fs: &dyn FileSystem,
        dir: &Path,
        requested_page_size: Option<usize>,
        mode: OpenMode,
    ) -> Result<Volume> {
        assert!(mode != OpenMode::CreateNew, "use Volume::create");
        let path = data_file_path(dir);
        if !fs.is_dir(dir) || !fs.exists(&path) {
            return Err(Error::NotAStore {
                path: dir.to_path_buf(),
                reason: format!("no data file {DATA_FILE_NAME}"),
            });
        }
        let storage = fs.open(&path, mode)?;
        let sb = read_superblock(storage.as_ref())?;
        if let Some(requested) = requested_page_size {
            if requested != sb.page_size {
                return Err(Error::PageSizeMismatch {
                    path: path.clone(),
                    stored: sb.page_size,
                    requested,
                });
            }
        }
        let page_size = sb.page_size;
        let length = storage.len()?;
        let committed = u64::from(sb.page_count) * page_size as u64;
        if sb.page_count < INITIAL_PAGE_COUNT {
            return Err(Error::CorruptSuperblock {
                path,
                reason: format!("page count {} is below the minimum", sb.page_count),
            });
        }
        if length < committed {
            return Err(Error::CorruptFile {
                path,
                reason: format!(
                    "file has {length} bytes but the superblock records {} pages ({committed} bytes)",
                    sb.page_count
                ),
            });
        }
        let whole_pages = length / page_size as u64;
        if length % page_size as u64 != 0 && mode == OpenMode::Existing {
            tracing::warn!(path = %path.display(), "cutting a partial page off the end of the file");
            storage.set_len(whole_pages * page_size as u64)?;
            storage.sync()?;
        }
        let page_count = u32::try_from(whole_pages).map_err(|_| Error::CorruptFile {
            path: path.clone(),
            reason: format!("{whole_pages} pages is more than a volume may have"),
        })?;
        Ok(Volume {
            storage,
            page_size,
            volume_id: sb.volume_id,
            page_count: AtomicU32::new(page_count),
            recorded_pages: AtomicU32::new(sb.page_count),
            superblock: Mutex::new(sb),
            extend_lock: Mutex::new(Vec::new()),
            unwritten: UnwrittenPages::default(),
            read_only: mode == OpenMode::ReadOnly,
        })
    }

    pub fn path(&self) -> &Path {
        self.storage.path()
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn volume_id(&self) -> VolumeId {
        self.volume_id
    }

    /// Pages in the file now (including pages not yet committed).
    pub fn page_count(&self) -> u32 {
        self.page_count.load(Ordering::Acquire)
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// Reads page `id` into `buf` and verifies it: checksum and header, then the structure of
    /// its kind. A failure names the file and the page.
    pub fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<PageKind> {
        self.read_page_unverified(id, buf)?;
        let kind =
            page::verify(buf, id, self.volume_id).map_err(|reason| self.corrupt(id, reason))?;
        page::upgrade_in_memory(buf);
        let structure = match kind {
            PageKind::Slotted => slotted::validate(buf),
            PageKind::SpaceMap => spacemap::validate(buf, id),
            PageKind::Free | PageKind::LargeData | PageKind::Superblock => Ok(()),
        };
        structure.map_err(|reason| self.corrupt(id, reason))?;
        Ok(kind)
    }

    /// Reads page `id` and verifies its checksum and header, but not the structure of a
    /// slotted page: for a page its writer may have left between two log records of one
    /// change (written home by a steal), which the log completes or undoes. Space-map pages
    /// are checked whole: no transaction's records leave them half-changed.
    pub fn read_page_sealed(&self, id: PageId, buf: &mut [u8]) -> Result<PageKind> {
        self.read_page_unverified(id, buf)?;
        let kind =
            page::verify(buf, id, self.volume_id).map_err(|reason| self.corrupt(id, reason))?;
        page::upgrade_in_memory(buf);
        if kind == PageKind::SpaceMap {
            spacemap::validate(buf, id).map_err(|reason| self.corrupt(id, reason))?;
        }
        Ok(kind)
    }

    /// Reads page `id` without verifying it (for `check`, which reports every problem).
    pub fn read_page_unverified(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        assert_eq!(buf.len(), self.page_size);
        if id.0 >= self.page_count() {
            return Err(Error::InvalidArgument(format!(
                "page {id} is past the end of {} ({} pages)",
                self.path().display(),
                self.page_count()
            )));
        }
        if self.unwritten.contains(id.0) {
            self.format_new_page(id, buf);
            return Ok(());
        }
        self.storage.read_at(id.offset(self.page_size), buf)?;
        // Past the recorded page count, a page of zeros is one the file grew by and nothing
        // wrote (before a crash, or seen from another open of the file): it reads as the image
        // its growth gives it, and a writer writes it before recording a count that covers it.
        if id.0 >= self.recorded_pages.load(Ordering::Acquire) && is_all_zero(buf) {
            if !self.read_only {
                self.unwritten.grown(id.0, id.0 + 1);
            }
            self.format_new_page(id, buf);
        }
        Ok(())
    }

    /// Seals and writes page `id`. The page's header must name `id`.
    pub fn write_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        assert!(!self.read_only, "write to a read-only volume");
        assert_eq!(buf.len(), self.page_size);
        assert_eq!(page::number(buf), id, "page header names another page");
        assert!(id.0 >= INITIAL_PAGE_COUNT || id == FIRST_MAP_PAGE || id == DIRECTORY_PAGE);
        assert!(id.0 < self.page_count(), "write past the end of the file");
        page::seal(buf);
        self.storage.write_at(id.offset(self.page_size), buf)?;
        self.unwritten.written(id.0, id.0 + 1);
        Ok(())
    }

    /// Writes the consecutive pages `first`, `first + 1`, ... whose images fill `buf`, sealing
    /// each, in one write: a run of pages costs one system call, not one per page.
    pub fn write_pages(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        assert!(!self.read_only, "write to a read-only volume");
        assert!(!buf.is_empty() && buf.len().is_multiple_of(self.page_size));
        let count = (buf.len() / self.page_size) as u32;
        assert!(
            first.0 >= INITIAL_PAGE_COUNT,
            "a run of pages over the volume's header"
        );
        assert!(
            first
                .0
                .checked_add(count)
                .is_some_and(|end| end <= self.page_count()),
            "write past the end of the file"
        );
        for (i, page) in buf.chunks_exact_mut(self.page_size).enumerate() {
            assert_eq!(
                page::number(page),
                PageId(first.0 + i as u32),
                "page header names another page"
            );
            page::seal(page);
        }
        self.storage.write_at(first.offset(self.page_size), buf)?;
        self.unwritten.written(first.0, first.0 + count);
        Ok(())
    }

    /// [`Self::write_pages`] for a caller that syncs the file as soon as its last run is
    /// written (a bulk load's new pages going home): a long run starts for the device at once
    /// ([`Storage::write_behind`]), so the sync waits for less. Not for writes a sync may not
    /// follow for a while (a checkpoint's, an eviction's): their pages are often written again
    /// first, and write-back started early takes the device from the log's syncs.
    pub fn write_pages_before_sync(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        self.write_pages(first, buf)?;
        if buf.len() >= WRITE_BEHIND_MIN_BYTES {
            self.storage
                .write_behind(first.offset(self.page_size), buf.len() as u64);
        }
        Ok(())
    }

    /// The image [`Self::extend`] writes for page `id`: free, or a space-map page where the
    /// layout puts one; sealed. Lets the server know a new page without reading it back.
    pub fn format_new_page(&self, id: PageId, page: &mut [u8]) {
        assert_eq!(page.len(), self.page_size);
        page.fill(0);
        if spacemap::is_map_page(id, self.page_size) {
            spacemap::init(page, id, self.volume_id);
        } else {
            page::format(page, PageKind::Free, id, self.volume_id);
        }
        page::seal(page);
    }

    /// Appends `count` pages, formatted free (or as space-map pages where the layout puts one),
    /// and returns the first new page. Not durable until the next sync.
    pub fn extend(&self, count: u32) -> Result<PageId> {
        assert!(!self.read_only, "extend a read-only volume");
        assert!(count > 0 && count <= EXTEND_PAGES_MAX);
        let mut buf = self.extend_lock.lock().unwrap_or_else(|e| e.into_inner());
        let first = self.page_count();
        let end = first.checked_add(count).ok_or_else(|| {
            Error::InvalidArgument(format!("volume cannot grow past {} pages", u32::MAX))
        })?;
        // Written a few pages at a time from one buffer kept for it: a buffer of the whole
        // extension (up to 32 MiB) cost the kernel clearing fresh memory on every growth.
        buf.resize(EXTEND_WRITE_PAGES * self.page_size, 0);
        let mut at = first;
        while at < end {
            let pages = (end - at).min(EXTEND_WRITE_PAGES as u32);
            let chunk = &mut buf[..pages as usize * self.page_size];
            for (i, page) in chunk.chunks_exact_mut(self.page_size).enumerate() {
                self.format_new_page(PageId(at + i as u32), page);
            }
            self.storage
                .write_at(PageId(at).offset(self.page_size), chunk)?;
            at += pages;
        }
        self.page_count.store(end, Ordering::Release);
        Ok(PageId(first))
    }

    /// Appends `count` pages without writing them: until something is written there, each
    /// reads as the image [`Self::extend`] would have written, and they are written with that
    /// image before a superblock records a page count covering them
    /// ([`Self::write_unwritten`]). A bulk load's new pages are then written once, with their
    /// contents. Returns the first new page.
    pub fn grow(&self, count: u32) -> Result<PageId> {
        assert!(!self.read_only, "grow a read-only volume");
        assert!(count > 0 && count <= EXTEND_PAGES_MAX);
        let _serialised = self.extend_lock.lock().unwrap_or_else(|e| e.into_inner());
        let first = self.page_count();
        let end = first.checked_add(count).ok_or_else(|| {
            Error::InvalidArgument(format!("volume cannot grow past {} pages", u32::MAX))
        })?;
        self.storage
            .set_len(u64::from(end) * self.page_size as u64)?;
        self.unwritten.grown(first, end);
        self.page_count.store(end, Ordering::Release);
        Ok(PageId(first))
    }

    /// Does page `id` hold nothing on disk (zeros, or nothing written there yet)? Past the
    /// recorded page count such a page reads as free; recovery asks this of pages a committed
    /// transaction wrote home, for which it is damage.
    pub fn holds_nothing(&self, id: PageId) -> Result<bool> {
        if self.unwritten.contains(id.0) {
            return Ok(true);
        }
        if id.0 >= self.page_count() {
            return Ok(false);
        }
        let mut buf = vec![0u8; self.page_size];
        self.storage.read_at(id.offset(self.page_size), &mut buf)?;
        Ok(is_all_zero(&buf))
    }

    /// Does the volume hold pages [`Self::grow`] added that are still to be written?
    pub fn has_unwritten(&self) -> bool {
        !self.unwritten.is_empty()
    }

    /// Writes every page [`Self::grow`] added and nothing wrote since with the image it reads
    /// as, in runs; returns how many. Not durable until the next sync. The caller keeps other
    /// writers of the data file out meanwhile (the server holds its state lock, under which
    /// every page is written), or a page written between the look and the write would lose
    /// its contents.
    pub fn write_unwritten(&self) -> Result<u32> {
        let mut written = 0;
        let mut buf = Vec::new();
        for (first, end) in self.unwritten.runs() {
            let mut at = first;
            while at < end {
                let pages = (end - at).min(EXTEND_WRITE_PAGES as u32);
                buf.resize(pages as usize * self.page_size, 0);
                for (i, page) in buf.chunks_exact_mut(self.page_size).enumerate() {
                    self.format_new_page(PageId(at + i as u32), page);
                }
                self.storage
                    .write_at(PageId(at).offset(self.page_size), &buf)?;
                self.unwritten.written(at, at + pages);
                written += pages;
                at += pages;
            }
        }
        Ok(written)
    }

    pub fn sync(&self) -> Result<()> {
        self.storage.sync()
    }

    /// The current superblock.
    pub fn superblock(&self) -> Superblock {
        self.superblock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Applies `change` to the superblock and writes it durably to both copies, one after the
    /// other, each synced before the next is written. A crash tears at most one copy, and the
    /// other then holds either the new state or the one before this update; damage to one copy
    /// later never rolls the store back, because the other holds the same generation.
    pub fn update_superblock(&self, change: impl FnOnce(&mut Superblock)) -> Result<()> {
        assert!(!self.read_only, "superblock update on a read-only volume");
        let mut sb = self.superblock.lock().unwrap_or_else(|e| e.into_inner());
        // Every page a recorded count covers must hold a valid image on disk.
        if self.write_unwritten()? > 0 {
            self.storage.sync()?;
        }
        let mut next = sb.clone();
        change(&mut next);
        next.generation = sb.generation + 1;
        assert_eq!(next.page_size, self.page_size);
        write_superblock_copies(self.storage.as_ref(), &next)?;
        self.recorded_pages
            .store(next.page_count, Ordering::Release);
        *sb = next;
        Ok(())
    }

    /// Both superblock copies as found on disk, for `check`.
    pub fn superblock_copies(&self) -> Result<SuperblockCopies> {
        let mut buf = vec![0u8; self.page_size];
        let mut read = |copy: usize| -> Result<Result<Superblock, CopyProblem>> {
            self.storage
                .read_at(SUPERBLOCK_PAGES[copy].offset(self.page_size), &mut buf)?;
            Ok(superblock::decode(&buf, copy))
        };
        Ok(SuperblockCopies {
            copies: [read(0)?, read(1)?],
        })
    }

    /// Length of the file beyond the pages the last checkpoint recorded.
    pub fn unrecorded_tail_bytes(&self) -> Result<u64> {
        let recorded = u64::from(self.superblock().page_count) * self.page_size as u64;
        Ok(self.storage.len()?.saturating_sub(recorded))
    }

    /// Makes the file at least `pages` pages long (recovery of a change to a page the file lost).
    pub fn extend_to(&self, pages: u32) -> Result<()> {
        while self.page_count() < pages {
            let missing = (pages - self.page_count()).min(EXTEND_PAGES_MAX);
            self.extend(missing)?;
        }
        Ok(())
    }

    /// The error for a page that failed verification.
    pub fn corrupt(&self, id: PageId, reason: impl Into<String>) -> Error {
        Error::CorruptPage {
            path: self.path().to_path_buf(),
            page: id,
            reason: reason.into(),
        }
    }
}

/// Writes `sb` to copy 0, syncs, then to copy 1, and syncs.
fn write_superblock_copies(storage: &dyn Storage, sb: &Superblock) -> Result<()> {
    let mut buf = vec![0u8; sb.page_size];
    for (copy, page) in SUPERBLOCK_PAGES.iter().enumerate() {
        sb.encode(&mut buf, copy);
        storage.write_at(page.offset(sb.page_size), &buf)?;
        storage.sync()?;
    }
    Ok(())
}

/// Finds the current superblock. The page size is not known before the superblock is read, so
/// every supported size is tried: copy 0 at offset 0, copy 1 at offset `page_size`. A damaged
/// page-size field in one copy therefore cannot hide the other copy.
fn read_superblock(storage: &dyn Storage) -> Result<Superblock> {
    let path = storage.path().to_path_buf();
    let length = storage.len()?;
    if length < PAGE_SIZE_MIN as u64 {
        return Err(Error::NotAStore {
            path,
            reason: format!("data file of {length} bytes is shorter than one page"),
        });
    }
    let mut best: Option<Superblock> = None;
    let mut saw_magic = false;
    let mut newer_format: Option<u32> = None;
    let mut problems = Vec::new();
    let mut buf = vec![0u8; *PAGE_SIZES_SUPPORTED.last().unwrap_or(&PAGE_SIZE_MIN)];
    for page_size in PAGE_SIZES_SUPPORTED {
        for (copy, superblock_page) in SUPERBLOCK_PAGES.iter().enumerate() {
            let offset = superblock_page.offset(page_size);
            if offset + page_size as u64 > length {
                continue;
            }
            let page = &mut buf[..page_size];
            storage.read_at(offset, page)?;
            match superblock::decode(page, copy) {
                Ok(sb) => {
                    saw_magic = true;
                    if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Err(CopyProblem::NoMagic) => {}
                Err(CopyProblem::NewerFormat(found)) => {
                    // Only final if no copy is readable: one damaged version field must not
                    // make a sound store unopenable.
                    saw_magic = true;
                    newer_format = Some(found);
                    problems.push(format!("page {copy} (copy {copy}): format version {found}"));
                }
                Err(CopyProblem::Invalid(reason)) => {
                    saw_magic = true;
                    problems.push(format!(
                        "page {copy} (copy {copy}) read as a {page_size}-byte page: {reason}"
                    ));
                }
            }
        }
    }
    match best {
        Some(sb) => Ok(sb),
        None if newer_format.is_some() => Err(Error::UnsupportedFormat {
            path,
            structure: "superblock",
            found: newer_format.unwrap_or_default(),
            supported: superblock::STORE_FORMAT_VERSION,
        }),
        None if !saw_magic => Err(Error::NotAStore {
            path,
            reason: "no superblock with the Lodestore magic number".into(),
        }),
        None => Err(Error::CorruptSuperblock {
            path,
            reason: problems.join("; "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryFileSystem;

    const PAGE: usize = 4096;

    fn images(first: u32, count: u32, volume_id: VolumeId) -> Vec<u8> {
        let mut buf = vec![0u8; count as usize * PAGE];
        for (i, page) in buf.chunks_exact_mut(PAGE).enumerate() {
            page::format(page, PageKind::Free, PageId(first + i as u32), volume_id);
            page[300..400].fill(i as u8 + 1);
        }
        buf
    }

    #[test]
    fn a_run_of_pages_is_written_sealed_in_place() {
        let fs = MemoryFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let first = volume.extend(8).unwrap();
        let start = PageId(first.0 + 2);
        let mut run = images(start.0, 3, volume.volume_id());
        volume.write_pages(start, &mut run).unwrap();
        let mut read = vec![0u8; PAGE];
        for i in 0..3u32 {
            let kind = volume.read_page(PageId(start.0 + i), &mut read).unwrap();
            assert_eq!(kind, PageKind::Free);
            assert_eq!(read[300..400], [i as u8 + 1; 100], "page {i} of the run");
        }
        // The pages around the run are untouched.
        volume.read_page(PageId(start.0 - 1), &mut read).unwrap();
        assert_eq!(read[300..400], [0; 100]);
        volume.read_page(PageId(start.0 + 3), &mut read).unwrap();
        assert_eq!(read[300..400], [0; 100]);
    }

    #[test]
    fn long_runs_written_before_a_sync_start_their_write_back_and_nothing_else_does() {
        let fs = MemoryFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let hints = || fs.write_behind_hints(&data_file_path(Path::new("/v")));
        let long = (WRITE_BEHIND_MIN_BYTES / PAGE) as u32;
        let first = volume.extend(long + 8).unwrap();
        let before = hints();

        let mut short = images(first.0, long - 1, volume.volume_id());
        volume.write_pages_before_sync(first, &mut short).unwrap();
        let mut single = images(first.0, 1, volume.volume_id());
        volume.write_page(first, &mut single).unwrap();
        let mut checkpoint = images(first.0, long, volume.volume_id());
        volume.write_pages(first, &mut checkpoint).unwrap();
        assert_eq!(
            hints(),
            before,
            "nothing below the bound, nothing but before a sync"
        );

        let start = PageId(first.0 + 3);
        let mut run = images(start.0, long, volume.volume_id());
        volume.write_pages_before_sync(start, &mut run).unwrap();
        assert_eq!(
            hints()[before.len()..],
            [(start.offset(PAGE), WRITE_BEHIND_MIN_BYTES as u64)],
            "the whole run, where it was written"
        );
    }

    #[test]
    fn grown_pages_read_as_formatted_until_written_and_are_written_before_a_count_is_recorded() {
        let fs = MemoryFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let first = volume.grow(8).unwrap();
        assert_eq!(volume.page_count(), first.0 + 8);
        assert_eq!(
            volume.storage().len().unwrap(),
            u64::from(first.0 + 8) * PAGE as u64
        );
        let (mut read, mut raw, mut expected) = (vec![0u8; PAGE], vec![0u8; PAGE], vec![0u8; PAGE]);
        for p in first.0..first.0 + 8 {
            let kind = volume.read_page(PageId(p), &mut read).unwrap();
            volume.format_new_page(PageId(p), &mut expected);
            assert_eq!(page::kind(&expected), Some(kind));
            assert!(
                read == expected,
                "page {p} reads as the image an extension writes"
            );
            volume
                .storage()
                .read_at(PageId(p).offset(PAGE), &mut raw)
                .unwrap();
            assert!(
                raw.iter().all(|&b| b == 0),
                "page {p} was written by its growth"
            );
        }
        // A page written reads as written; the rest are written by the next superblock update.
        let mut run = images(first.0 + 2, 2, volume.volume_id());
        volume.write_pages(PageId(first.0 + 2), &mut run).unwrap();
        volume.read_page(PageId(first.0 + 3), &mut read).unwrap();
        assert_eq!(read[300..400], [2; 100]);
        assert!(volume.has_unwritten());
        volume
            .update_superblock(|sb| sb.page_count = first.0 + 8)
            .unwrap();
        assert!(!volume.has_unwritten());
        for p in first.0..first.0 + 8 {
            volume
                .storage()
                .read_at(PageId(p).offset(PAGE), &mut raw)
                .unwrap();
            volume.read_page(PageId(p), &mut read).unwrap();
            assert!(raw == read, "page {p} on disk");
            if p == first.0 + 3 {
                assert_eq!(raw[300..400], [2; 100], "the write survives");
            }
        }
    }

    #[test]
    fn a_page_of_zeros_reads_as_free_only_past_the_recorded_page_count() {
        let fs = MemoryFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let first = volume.extend(4).unwrap();
        volume
            .update_superblock(|sb| sb.page_count = first.0 + 4)
            .unwrap();
        volume.grow(4).unwrap();
        // Another open of the file (an inspection, or the next open after a crash) sees the
        // grown pages as zeros.
        let other = Volume::open(&fs, Path::new("/v"), None, OpenMode::ReadOnly).unwrap();
        let mut read = vec![0u8; PAGE];
        let kind = other.read_page(PageId(first.0 + 5), &mut read).unwrap();
        assert_eq!(kind, PageKind::Free);
        // Below the count a page of zeros is damage.
        volume
            .storage()
            .write_at(PageId(first.0 + 1).offset(PAGE), &[0u8; PAGE])
            .unwrap();
        assert!(matches!(
            other.read_page(PageId(first.0 + 1), &mut read),
            Err(Error::CorruptPage { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "page header names another page")]
    fn a_run_whose_page_names_another_is_refused() {
        let fs = MemoryFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let first = volume.extend(8).unwrap();
        let mut run = images(first.0, 3, volume.volume_id());
        volume.write_pages(PageId(first.0 + 1), &mut run).unwrap();
    }
}
