//! The in-process server: one volume, its buffer pool, locks and free space, behind the
//! [`PageServer`] interface.
//!
//! Commit policy until the write-ahead log exists: FORCE. At commit the server writes every
//! page the transaction shipped, syncs, then records the new end of the file and the commit LSN
//! in the superblock (and syncs again). A crash in the middle of a commit can leave it half
//! applied; there is no durability or atomicity claim beyond "a commit that returned is on
//! disk".

use crate::buffer_pool::BufferPool;
use crate::interface::{LockMode, PageServer};
use crate::lock_table::LockTable;
use crate::space::{entry_for_image, SpaceManager};
use crate::stats::ServerStats;
use crate::txn_table::TxnState;
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_storage::large::Extent;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::spacemap::{self, ENTRY_FREE, ENTRY_UNAVAILABLE};
use lodestore_storage::volume::EXTEND_PAGES_MAX;
use lodestore_storage::{directory::DIRECTORY_PAGE, slotted, FileSystem, OpenMode, Volume};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// How many pages the file grows by at least, so allocation does not extend page by page.
const EXTEND_PAGES_MIN: u32 = 64;
/// How many hinted pages `find_space` tries before it gives up.
const FIND_SPACE_CANDIDATES_MAX: usize = 16;

/// The fewest frames a buffer pool may have.
pub const POOL_PAGES_MIN: usize = 4;

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Memory of the server buffer pool, in bytes (whole pages of it are used).
    pub pool_bytes: usize,
    /// Most bytes of shipped, uncommitted pages the server holds for all transactions.
    pub pending_bytes_max: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            pool_bytes: 64 << 20,
            pending_bytes_max: 256 << 20,
        }
    }
}

pub struct Server {
    volume: Volume,
    state: Mutex<State>,
    options: ServerOptions,
}

struct State {
    pool: BufferPool,
    space: SpaceManager,
    locks: LockTable,
    txns: HashMap<TxnId, TxnState>,
    next_txn: u64,
    next_lsn: u64,
    pending_bytes: usize,
    stats: ServerStats,
}

impl Server {
    /// Creates a store in folder `dir` and serves it.
    pub fn create(
        fs: &dyn FileSystem,
        dir: &Path,
        page_size: usize,
        options: ServerOptions,
    ) -> Result<Server> {
        let volume = Volume::create(fs, dir, page_size)?;
        Server::serve(volume, options)
    }

    /// Opens the store in folder `dir` and serves it.
    pub fn open(
        fs: &dyn FileSystem,
        dir: &Path,
        requested_page_size: Option<usize>,
        options: ServerOptions,
    ) -> Result<Server> {
        let volume = Volume::open(fs, dir, requested_page_size, OpenMode::Existing)?;
        Server::serve(volume, options)
    }

    fn serve(volume: Volume, options: ServerOptions) -> Result<Server> {
        let pool_pages = pool_pages("server pool", options.pool_bytes, volume.page_size())?;
        let space = SpaceManager::load(&volume)?;
        let next_lsn = volume.superblock().last_lsn.0 + 1;
        let pool = BufferPool::new(volume.page_size(), pool_pages);
        Ok(Server {
            volume,
            state: Mutex::new(State {
                pool,
                space,
                locks: LockTable::default(),
                txns: HashMap::new(),
                next_txn: 1,
                next_lsn,
                pending_bytes: 0,
                stats: ServerStats::default(),
            }),
            options,
        })
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    pub fn stats(&self) -> ServerStats {
        self.lock_state().stats
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("server state poisoned by an earlier panic")
    }

    /// Is `page` one a client may lock and fetch?
    fn check_data_page(&self, page: PageId) -> Result<()> {
        let is_data = page.0 >= DIRECTORY_PAGE.0
            && page.0 < self.volume.page_count()
            && !spacemap::is_map_page(page, self.volume.page_size());
        if is_data {
            Ok(())
        } else {
            Err(Error::NoSuchPage { page })
        }
    }
}

impl State {
    fn txn(&mut self, txn: TxnId) -> Result<&mut TxnState> {
        self.txns
            .get_mut(&txn)
            .ok_or_else(|| Error::TransactionInactive {
                reason: format!("transaction {txn} is not active on this server"),
            })
    }

    fn lock(&mut self, txn: TxnId, page: PageId, mode: LockMode) -> Result<()> {
        self.txn(txn)?;
        match self.locks.acquire(txn, page, mode) {
            Ok(true) => {
                self.txn(txn)?.locked.push(page);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => {
                self.stats.lock_conflicts += 1;
                Err(e)
            }
        }
    }

    /// The committed image of `page`, through the pool.
    fn committed_image(&mut self, volume: &Volume, page: PageId) -> Result<&[u8]> {
        if self.pool.get(page).is_none() {
            let mut buf = vec![0u8; volume.page_size()];
            volume.read_page(page, &mut buf)?;
            self.stats.pages_read += 1;
            if self.pool.put(page, &buf) {
                self.stats.pool_evictions += 1;
            }
        } else {
            self.stats.pool_hits += 1;
        }
        Ok(self.pool.get(page).expect("page just cached"))
    }

    /// Ends `txn` without a trace: its shipped pages are dropped and the pages it allocated,
    /// never written, are free again.
    fn discard(&mut self, txn: TxnId) {
        if let Some(own) = self.finish(txn) {
            for page in own.allocated {
                self.space.set(page, ENTRY_FREE);
            }
            self.stats.aborts += 1;
        }
    }

    fn finish(&mut self, txn: TxnId) -> Option<TxnState> {
        let state = self.txns.remove(&txn)?;
        self.pending_bytes -= state.shipped_bytes();
        self.locks.release(txn, state.locked.iter().copied());
        Some(state)
    }
}

impl PageServer for Server {
    fn page_size(&self) -> usize {
        self.volume.page_size()
    }

    fn volume_id(&self) -> VolumeId {
        self.volume.volume_id()
    }

    fn root_directory(&self) -> Oid {
        self.volume.superblock().root_directory
    }

    fn begin(&self) -> Result<TxnId> {
        let mut state = self.lock_state();
        let txn = TxnId(state.next_txn);
        state.next_txn += 1;
        state.txns.insert(txn, TxnState::default());
        Ok(txn)
    }

    fn lock_page(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<Lsn> {
        self.check_data_page(page)?;
        let mut state = self.lock_state();
        state.lock(txn, page, mode)?;
        let image = state.committed_image(&self.volume, page)?;
        Ok(page::lsn(image))
    }

    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()> {
        self.check_data_page(page)?;
        let mut state = self.lock_state();
        let own = state.txn(txn)?;
        if !own.locked.contains(&page) {
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} fetched page {page} without locking it"
            )));
        }
        if let Some(image) = own.shipped.get(&page) {
            buf.copy_from_slice(image);
        } else {
            buf.copy_from_slice(state.committed_image(&self.volume, page)?);
        }
        state.stats.pages_fetched_by_clients += 1;
        Ok(())
    }

    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>> {
        let mut state = self.lock_state();
        state.txn(txn)?;
        let candidates = state
            .space
            .slotted_candidates(bytes, FIND_SPACE_CANDIDATES_MAX + skip.len());
        for page in candidates {
            if skip.contains(&page) || state.locks.locked_by_other(txn, page) {
                continue;
            }
            // Trust the page, not the hint.
            let image = state.committed_image(&self.volume, page)?;
            let actual = entry_for_image(page, image);
            let kind = page::kind(image);
            let free = slotted::free_bytes(image);
            if kind != Some(PageKind::Slotted) || free < bytes {
                state.space.set(page, actual);
                continue;
            }
            let lsn = page::lsn(image);
            state.lock(txn, page, LockMode::Exclusive)?;
            state.space.note_slotted_success(page);
            return Ok(Some((page, lsn)));
        }
        Ok(None)
    }

    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>> {
        if count == 0 || u64::from(count) > lodestore_core::limits::OBJECT_BYTES_MAX {
            return Err(Error::InvalidArgument(format!(
                "cannot allocate {count} pages"
            )));
        }
        let mut state = self.lock_state();
        state.txn(txn)?;
        let mut pages = Vec::with_capacity(count as usize);
        while pages.len() < count as usize {
            let Some(page) = state.space.next_free() else {
                let missing = count - pages.len() as u32;
                let grow = missing.clamp(EXTEND_PAGES_MIN, EXTEND_PAGES_MAX);
                self.volume.extend(grow)?;
                state.space.grow(self.volume.page_count());
                continue;
            };
            // Reserve it first, so the search moves on whatever the page turns out to be.
            state.space.set(page, ENTRY_UNAVAILABLE);
            if state.locks.locked_by_other(txn, page) {
                continue;
            }
            let image = state.committed_image(&self.volume, page)?;
            if page::kind(image) != Some(PageKind::Free) {
                let actual = entry_for_image(page, image);
                state.space.set(page, actual);
                continue;
            }
            state.lock(txn, page, LockMode::Exclusive)?;
            state.txn(txn)?.allocated.push(page);
            pages.push(page);
        }
        Ok(extents_of(&pages))
    }

    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        let mut state = self.lock_state();
        for &page in pages {
            self.check_data_page(page)?;
            state.lock(txn, page, LockMode::Exclusive)?;
            state.txn(txn)?.freed.push(page);
        }
        Ok(())
    }

    fn ship_log_records(&self, _txn: TxnId, _records: &[u8]) -> Result<()> {
        Err(Error::Unsupported(
            "log records need the write-ahead log; this server forces pages at commit".into(),
        ))
    }

    fn ship_dirty_pages(&self, txn: TxnId, pages: &[(PageId, &[u8])]) -> Result<()> {
        let page_size = self.volume.page_size();
        let mut state = self.lock_state();
        for &(id, image) in pages {
            self.check_data_page(id)?;
            if image.len() != page_size || page::number(image) != id {
                return Err(Error::InvalidArgument(format!(
                    "shipped image for page {id} has {} bytes and names page {}",
                    image.len(),
                    if image.len() >= page::PAGE_HEADER_BYTES {
                        page::number(image).0
                    } else {
                        u32::MAX
                    }
                )));
            }
            let pending = state.pending_bytes;
            let own = state.txn(txn)?;
            if !own.locked.contains(&id) {
                return Err(Error::InvalidArgument(format!(
                    "transaction {txn} shipped page {id} without locking it"
                )));
            }
            let grows = !own.shipped.contains_key(&id);
            if grows && pending + page_size > self.options.pending_bytes_max {
                return Err(Error::TransactionTooLarge {
                    reason: format!(
                        "more than {} bytes of uncommitted pages; until the write-ahead log \
                         exists they must fit in server memory",
                        self.options.pending_bytes_max
                    ),
                });
            }
            own.shipped.insert(id, image.into());
            if grows {
                state.pending_bytes += page_size;
            }
            state.stats.dirty_pages_shipped += 1;
        }
        Ok(())
    }

    fn commit(&self, txn: TxnId) -> Result<Lsn> {
        let mut state = self.lock_state();
        let own = state.txn(txn)?;
        let read_only = own.shipped.is_empty() && own.freed.is_empty() && own.allocated.is_empty();
        if read_only {
            state.finish(txn);
            state.stats.commits += 1;
            return Ok(Lsn(state.next_lsn - 1));
        }
        // Refuse malformed pages before anything reaches the disk.
        let malformed = own
            .shipped
            .iter()
            .find_map(|(id, image)| validate_shipped(image).err().map(|reason| (*id, reason)));
        if let Some((id, reason)) = malformed {
            state.discard(txn);
            return Err(self
                .volume
                .corrupt(id, format!("client shipped it malformed: {reason}")));
        }
        let lsn = Lsn(state.next_lsn);
        state.next_lsn += 1;
        let own = state.finish(txn).expect("transaction checked above");
        let result = self.force_commit(&mut state, own, lsn);
        if result.is_ok() {
            state.stats.commits += 1;
        }
        result.map(|()| lsn)
    }

    fn abort(&self, txn: TxnId) -> Result<()> {
        self.lock_state().discard(txn);
        Ok(())
    }
}

impl Server {
    /// Writes the transaction's pages, the changed space-map pages and the superblock, each
    /// step synced before the next.
    fn force_commit(&self, state: &mut State, own: TxnState, lsn: Lsn) -> Result<()> {
        let mut shipped = own.shipped;
        let mut blank = vec![0u8; self.volume.page_size()];
        for &page in &own.freed {
            shipped.remove(&page);
            page::format(&mut blank, PageKind::Free, page, self.volume.volume_id());
            shipped.insert(page, blank.clone().into());
        }
        let mut ordered: Vec<_> = shipped.into_iter().collect();
        ordered.sort_unstable_by_key(|(id, _)| *id);
        for (id, image) in &mut ordered {
            page::set_lsn(image, lsn);
            self.volume.write_page(*id, image)?;
            state.stats.pages_written += 1;
            if state.pool.put(*id, image) {
                state.stats.pool_evictions += 1;
            }
            state.space.set(*id, entry_for_image(*id, image));
        }
        for page in own.allocated {
            if !ordered.iter().any(|(id, _)| *id == page) {
                state.space.set(page, ENTRY_FREE);
            }
        }
        state.stats.pages_written += state.space.write_dirty_maps(&self.volume, lsn)? as u64;
        self.volume.sync()?;
        let page_count = self.volume.page_count();
        self.volume.update_superblock(|sb| {
            sb.last_lsn = lsn;
            sb.page_count = page_count;
        })?;
        state.stats.syncs += 2;
        Ok(())
    }
}

/// Pages of `bytes` of pool memory, refusing pools too small to work with.
pub fn pool_pages(what: &str, bytes: usize, page_size: usize) -> Result<usize> {
    let pages = bytes / page_size;
    if pages < POOL_PAGES_MIN {
        return Err(Error::InvalidArgument(format!(
            "{what} of {bytes} bytes holds {pages} pages of {page_size} bytes; \
             it needs at least {POOL_PAGES_MIN}"
        )));
    }
    Ok(pages)
}

/// Structural checks on a page a client shipped.
fn validate_shipped(image: &[u8]) -> std::result::Result<(), String> {
    match page::kind(image) {
        Some(PageKind::Slotted) => slotted::validate(image),
        Some(PageKind::LargeData) | Some(PageKind::Free) => Ok(()),
        Some(other) => Err(format!("clients may not write {} pages", other.name())),
        None => Err(format!("unknown page kind {}", page::kind_byte(image))),
    }
}

/// Groups sorted-or-not pages into runs of consecutive pages, keeping their order.
fn extents_of(pages: &[PageId]) -> Vec<Extent> {
    let mut extents: Vec<Extent> = Vec::new();
    for &page in pages {
        match extents.last_mut() {
            Some(last) if last.first.0 + last.count == page.0 => last.count += 1,
            _ => extents.push(Extent {
                first: page,
                count: 1,
            }),
        }
    }
    extents
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::RealFileSystem;

    fn server(dir: &Path) -> Server {
        Server::create(&RealFileSystem, dir, 4096, ServerOptions::default()).unwrap()
    }

    #[test]
    fn allocate_commit_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        {
            let s = server(&path);
            let t = s.begin().unwrap();
            let extents = s.allocate_pages(t, 3).unwrap();
            assert_eq!(extents.len(), 1);
            assert_eq!(extents[0].count, 3);
            let page = extents[0].first;
            let mut image = vec![0u8; 4096];
            slotted::init(&mut image, page, 0);
            slotted::insert(&mut image, lodestore_core::TypeId(1), 10, false).unwrap();
            s.ship_dirty_pages(t, &[(page, &image)]).unwrap();
            let lsn = s.commit(t).unwrap();
            assert_eq!(lsn, Lsn(1));
            // The two unused pages went back to free; the used one has room left.
            let t = s.begin().unwrap();
            let (found, found_lsn) = s.find_space(t, 100, &[]).unwrap().unwrap();
            assert_eq!((found, found_lsn), (page, lsn));
            s.abort(t).unwrap();
        }
        let s = Server::open(&RealFileSystem, &path, None, ServerOptions::default()).unwrap();
        let t = s.begin().unwrap();
        let extents = s.allocate_pages(t, 1).unwrap();
        assert_eq!(extents[0].first.0, 5, "page 4 is used, page 5 free again");
    }

    #[test]
    fn conflicting_lock_is_refused_and_released_at_end() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(&dir.path().join("s"));
        let (a, b) = (s.begin().unwrap(), s.begin().unwrap());
        s.lock_page(a, DIRECTORY_PAGE, LockMode::Exclusive).unwrap();
        assert!(matches!(
            s.lock_page(b, DIRECTORY_PAGE, LockMode::Shared),
            Err(Error::LockConflict { .. })
        ));
        s.commit(a).unwrap();
        s.lock_page(b, DIRECTORY_PAGE, LockMode::Shared).unwrap();
    }

    #[test]
    fn malformed_shipped_page_is_refused_before_disk() {
        let dir = tempfile::tempdir().unwrap();
        let s = server(&dir.path().join("s"));
        let t = s.begin().unwrap();
        let page = s.allocate_pages(t, 1).unwrap()[0].first;
        let mut image = vec![0u8; 4096];
        slotted::init(&mut image, page, 0);
        image[40] = 0xFF; // free-byte count no longer matches
        s.ship_dirty_pages(t, &[(page, &image)]).unwrap();
        assert!(matches!(s.commit(t), Err(Error::CorruptPage { .. })));
        assert_eq!(s.stats().pages_written, 0);
        assert!(matches!(
            s.lock_page(s.begin().unwrap(), PageId(0), LockMode::Shared),
            Err(Error::NoSuchPage { .. })
        ));
    }
}
