//! The client cache: page frames in one memory mapping, a page table from page to frame, and
//! clock replacement. Frames are aligned to the operating system's pages, so page protection
//! can protect them one by one; with page protection the arena is a [`ProtectedArena`], whose
//! frames the client fills through an always-writable second view.

use crate::detect::protection::{FaultMechanism, ProtectedArena};
use crate::detect::written_pages::WrittenPageArena;
use crate::prefault::Prefault;
use crate::spare_caches::{HandedLocks, KeptCache, KeptPages, SpareCaches};
use lodestore_core::frames::{FrameId, FrameTable, FrameVec};
use lodestore_core::spare_memory::{self, MemoryUse};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_storage::page;
use memmap2::MmapMut;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

/// What the cache knows about one frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameState {
    /// Changed by the current transaction and not yet shipped to the server.
    pub dirty: bool,
    /// The transaction in which this copy was last confirmed current.
    pub validated_in: Option<TxnId>,
}

/// Where the frames live.
enum Arena {
    /// One writable anonymous mapping (software detectors).
    Plain(PlainArena),
    /// Protected frames with a writable shadow view (page protection).
    Protected(ProtectedArena),
    /// Frames whose writes the kernel notes, with a shadow view for fills (written pages).
    Written(WrittenPageArena),
}

/// A plain arena, handed to the store's spares when its cache is dropped.
struct PlainArena {
    map: ManuallyDrop<MmapMut>,
    spares: Option<Arc<SpareCaches>>,
    /// Faults the arena in ahead of the frames in use; stopped before the map goes.
    prefault: ManuallyDrop<Prefault>,
    /// The cache's pages, handed on with the arena: set as the cache is dropped, when its
    /// session ended cleanly (`ClientCache::keep_pages_when_dropped`).
    /// Boxed: the arena kinds stay about one size.
    pages: Option<Box<KeptPages>>,
}

impl Deref for PlainArena {
    type Target = MmapMut;
    fn deref(&self) -> &MmapMut {
        &self.map
    }
}

impl DerefMut for PlainArena {
    fn deref_mut(&mut self) -> &mut MmapMut {
        &mut self.map
    }
}

impl Drop for PlainArena {
    fn drop(&mut self) {
        // SAFETY: each field is taken once, here, and never used after; the prefaulter's
        // thread is joined before the memory it maps is unmapped or handed on.
        drop(unsafe { ManuallyDrop::take(&mut self.prefault) });
        // SAFETY: as above.
        let map = unsafe { ManuallyDrop::take(&mut self.map) };
        match &self.spares {
            Some(spares) => spares.give(map, self.pages.take().map(|pages| *pages)),
            None => spare_memory::give(MemoryUse::ClientArena, map),
        }
    }
}

/// Asks the kernel to back `arena` with huge pages where it can: a cache is read at random
/// across its whole size, and with 4 KiB pages nearly every frame touched is a TLB miss as
/// well as a cache miss. Only a hint (the kernel may have huge pages disabled, or none free);
/// arenas that protect single frames keep small pages.
fn advise_huge_pages(arena: &MmapMut) {
    #[cfg(target_os = "linux")]
    if let Err(e) = arena.advise(memmap2::Advice::HugePage) {
        tracing::debug!("client cache arena without huge pages: {e}");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = arena;
}

/// What kind of arena a cache needs: what its detector asks of the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArenaKind {
    Plain,
    Protected(FaultMechanism),
    WrittenPages,
}

pub struct ClientCache {
    page_size: usize,
    arena: Arena,
    table: FrameTable,
    /// Each used frame's state; frames come into use lowest first, so a large cache costs
    /// only what it has used.
    states: FrameVec<FrameState>,
    /// The fill number of each frame's contents: see [`ClientCache::fill_number`].
    fills: FrameVec<u64>,
    /// Fills so far, the last fill number given.
    fill_count: u64,
    /// Whether the pages go to the store's spares with the arena when the cache is dropped.
    keep_pages: bool,
    /// The page locks kept for these pages: handed on with them, or by a closed session to
    /// this cache's.
    locks: Option<HandedLocks>,
}

impl Drop for ClientCache {
    fn drop(&mut self) {
        let Arena::Plain(arena) = &mut self.arena else {
            return;
        };
        if !self.keep_pages || arena.spares.is_none() || self.states.iter().any(|s| s.dirty) {
            return;
        }
        // A cache that filled up holds only part of what its session used, and would make
        // every miss of the next session evict: its frames go on empty (OO1 lookups on
        // 1,000,000 parts took 4.4 ms with a loader's full cache handed on, 3.7 ms with an
        // empty one; docs/BENCHMARKS.md, "Cache memory faulted in ahead").
        if self.table.frames_used() >= self.table.capacity() {
            return;
        }
        // The arena's own drop, after this one, hands the pages on with the memory.
        arena.pages = Some(Box::new(KeptPages {
            page_size: self.page_size,
            table: std::mem::replace(&mut self.table, FrameTable::new(1)),
            states: std::mem::replace(&mut self.states, FrameVec::new(1)),
            fills: std::mem::replace(&mut self.fills, FrameVec::new(1)),
            fill_count: self.fill_count,
            locks: self.locks.take(),
        }));
    }
}

/// A frame that had to be given up to make room, with its bytes if the server must get them.
pub struct Evicted {
    pub page: PageId,
    pub dirty: bool,
}

impl ClientCache {
    /// A cache of `frame_count` frames of `page_size` bytes in an arena of `kind`: with
    /// protection, frames are read-only until a write faults, delivered by that mechanism.
    pub fn new(page_size: usize, frame_count: usize, kind: ArenaKind) -> Result<ClientCache> {
        ClientCache::with_spares(page_size, frame_count, kind, None)
    }

    /// [`ClientCache::new`], taking a plain arena from `spares` when one of the size is kept
    /// there, with the pages a closed session left in it if it left any, and giving it back
    /// when dropped. Kept pages are not known current: a transaction's first use of each
    /// validates it under its lock, as for a page cached by an earlier transaction.
    pub fn with_spares(
        page_size: usize,
        frame_count: usize,
        kind: ArenaKind,
        spares: Option<Arc<SpareCaches>>,
    ) -> Result<ClientCache> {
        if frame_count == 0 {
            return Err(Error::InvalidArgument(
                "client cache needs at least one page".into(),
            ));
        }
        let bytes = page_size.checked_mul(frame_count).ok_or_else(|| {
            Error::InvalidArgument(format!("client cache of {frame_count} pages is too large"))
        })?;
        let mut kept_pages = None;
        let arena = match kind {
            ArenaKind::Protected(mechanism) => {
                Arena::Protected(ProtectedArena::new(page_size, frame_count, mechanism)?)
            }
            ArenaKind::WrittenPages => {
                Arena::Written(WrittenPageArena::new(page_size, frame_count)?)
            }
            ArenaKind::Plain => {
                // The store's spares first, then memory a closed store left to the process.
                let kept = spares.as_ref().and_then(|s| s.take(bytes)).or_else(|| {
                    spare_memory::take(MemoryUse::ClientArena, bytes)
                        .map(|map| KeptCache { map, pages: None })
                });
                let mut map = match kept {
                    Some(kept) => {
                        kept_pages = kept.pages.filter(|pages| {
                            pages.page_size == page_size && pages.table.capacity() == frame_count
                        });
                        kept.map
                    }
                    None => {
                        let map = MmapMut::map_anon(bytes)
                            .map_err(|source| Error::io("client cache arena", "map", source))?;
                        advise_huge_pages(&map);
                        map
                    }
                };
                // SAFETY: the prefaulter is dropped before the map (`PlainArena`'s drop).
                let prefault = unsafe { Prefault::new(map.as_mut_ptr(), map.len()) };
                Arena::Plain(PlainArena {
                    map: ManuallyDrop::new(map),
                    spares,
                    prefault: ManuallyDrop::new(prefault),
                    pages: None,
                })
            }
        };
        // Every kept page is clean and validated in no transaction of this session (in one
        // of the closed session's, which the locks handed on with them may still cover).
        let (table, states, fills, fill_count, locks) = match kept_pages {
            Some(kept) => (
                kept.table,
                kept.states,
                kept.fills,
                kept.fill_count,
                kept.locks,
            ),
            None => (
                FrameTable::new(frame_count),
                FrameVec::new(frame_count),
                FrameVec::new(frame_count),
                0,
                None,
            ),
        };
        debug_assert_eq!(fills.capacity(), frame_count);
        debug_assert_eq!(states.capacity(), frame_count);
        debug_assert!(states.iter().all(|s| !s.dirty));
        Ok(ClientCache {
            page_size,
            arena,
            table,
            states,
            fills,
            fill_count,
            keep_pages: false,
            locks,
        })
    }

    /// Lets the cache's pages go to the store's spares with its arena when it is dropped: the
    /// session saying that every page it holds is as committed at the LSN in its header.
    /// Pages marked dirty are never kept.
    pub fn keep_pages_when_dropped(&mut self) {
        self.keep_pages = true;
    }

    /// Hands `locks`, kept on this cache's pages, on with them when the cache is dropped and
    /// its pages are kept ([`Self::keep_pages_when_dropped`]); otherwise they are released.
    pub fn hand_on_locks(&mut self, locks: HandedLocks) {
        self.locks = Some(locks);
    }

    /// The locks a closed session kept on the pages this cache took from it, if any.
    pub fn take_handed_locks(&mut self) -> Option<HandedLocks> {
        self.locks.take()
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Frames handed out so far: a frame at or above this has never held a page, so nothing
    /// was ever written to it.
    pub fn frames_used(&self) -> usize {
        self.table.frames_used()
    }

    pub fn resident(&self) -> usize {
        self.table.len()
    }

    /// The frame holding `page`, if cached.
    #[inline]
    pub fn lookup(&mut self, page: PageId) -> Option<FrameId> {
        self.table.lookup(page)
    }

    /// A frame for `page` (not cached yet). If a dirty page had to leave, its bytes are still in
    /// the frame: the caller ships them (`frame_bytes`) before it writes the new page there.
    pub fn assign(&mut self, page: PageId) -> Result<(FrameId, Option<Evicted>)> {
        let assigned = self
            .table
            .assign(page, |_, _| true)
            .ok_or_else(|| Error::InvalidArgument("client cache has no frame to give".into()))?;
        if let Arena::Plain(arena) = &mut self.arena {
            arena
                .prefault
                .used(self.table.frames_used() * self.page_size);
        }
        let previous = self.states[assigned.frame];
        self.states[assigned.frame] = FrameState::default();
        let evicted = assigned.evicted.map(|old| Evicted {
            page: old,
            dirty: previous.dirty,
        });
        Ok((assigned.frame, evicted))
    }

    /// The frame holding `page`, without counting it as a use.
    pub fn peek(&self, page: PageId) -> Option<FrameId> {
        self.table.peek(page)
    }

    pub fn state(&self, frame: FrameId) -> FrameState {
        self.states[frame]
    }

    pub fn state_mut(&mut self, frame: FrameId) -> &mut FrameState {
        &mut self.states[frame]
    }

    /// The page in `frame`, if any.
    pub fn page_of(&self, frame: FrameId) -> Option<PageId> {
        self.table.page(frame)
    }

    /// The protected arena, when the cache uses page protection.
    pub fn protection(&self) -> Option<&ProtectedArena> {
        match &self.arena {
            Arena::Protected(arena) => Some(arena),
            _ => None,
        }
    }

    pub fn protection_mut(&mut self) -> Option<&mut ProtectedArena> {
        match &mut self.arena {
            Arena::Protected(arena) => Some(arena),
            _ => None,
        }
    }

    /// The written-page arena, when the cache's detector is the kernel's written bits.
    pub fn written_pages(&self) -> Option<&WrittenPageArena> {
        match &self.arena {
            Arena::Written(arena) => Some(arena),
            _ => None,
        }
    }

    pub fn written_pages_mut(&mut self) -> Option<&mut WrittenPageArena> {
        match &mut self.arena {
            Arena::Written(arena) => Some(arena),
            _ => None,
        }
    }

    pub fn frame(&self, frame: FrameId) -> &[u8] {
        assert!(frame < self.capacity());
        match &self.arena {
            Arena::Plain(map) => &map[frame * self.page_size..][..self.page_size],
            // SAFETY: the user view maps `capacity * page_size` readable bytes for the life of
            // the arena, and `frame` is in range.
            Arena::Protected(arena) => unsafe {
                std::slice::from_raw_parts(arena.user().add(frame * self.page_size), self.page_size)
            },
            // SAFETY: as above, for the written-page arena's user view.
            Arena::Written(arena) => unsafe {
                std::slice::from_raw_parts(arena.user().add(frame * self.page_size), self.page_size)
            },
        }
    }

    /// The frame for writing as the application does: with page protection, the first write
    /// faults and is captured. Callers tell the write tracker first.
    pub fn frame_mut(&mut self, frame: FrameId) -> &mut [u8] {
        assert!(frame < self.capacity());
        match &mut self.arena {
            Arena::Plain(map) => &mut map[frame * self.page_size..][..self.page_size],
            // SAFETY: as in `frame`; the user view is mapped shared and writes to protected
            // frames fault into the capture handler, which makes them writable.
            Arena::Protected(arena) => unsafe {
                std::slice::from_raw_parts_mut(
                    arena.user().add(frame * self.page_size),
                    self.page_size,
                )
            },
            // SAFETY: the user view is mapped writable; the kernel notes the write.
            Arena::Written(arena) => unsafe {
                std::slice::from_raw_parts_mut(
                    arena.user().add(frame * self.page_size),
                    self.page_size,
                )
            },
        }
    }

    /// A pointer to the start of `frame` in the application's view, made without a reference
    /// to it, for views of several objects at once (`ClientSession::objects_many`). Reading
    /// through it is as `frame`; writing, as `frame_mut`.
    pub fn frame_ptr(&mut self, frame: FrameId) -> *mut u8 {
        assert!(frame < self.capacity());
        let base = match &mut self.arena {
            Arena::Plain(map) => map.as_mut_ptr(),
            Arena::Protected(arena) => arena.user(),
            Arena::Written(arena) => arena.user(),
        };
        // The offset stays inside the mapping: `frame` is below the capacity.
        base.wrapping_add(frame * self.page_size)
    }

    /// Number of the last fill of `frame` ([`ClientCache::fill_mut`]), unique in the life of
    /// the cache: what is known of a frame's contents (its record bounds) holds only while its
    /// fill number stays the same.
    pub fn fill_number(&self, frame: FrameId) -> u64 {
        self.fills[frame]
    }

    /// Stamps the page in `frame` with `lsn`, as the server logged it: not a write of the
    /// application (never faults, never tracked) and not a new fill.
    pub fn set_lsn(&mut self, frame: FrameId, lsn: Lsn) {
        page::set_lsn(self.shadow_mut(frame), lsn);
    }

    /// The frame for filling with new contents (from the server, or a new page's format):
    /// never faults, never tracked, and gives the frame a new fill number.
    pub fn fill_mut(&mut self, frame: FrameId) -> &mut [u8] {
        assert!(frame < self.capacity());
        self.fill_count += 1;
        self.fills[frame] = self.fill_count;
        self.shadow_mut(frame)
    }

    /// The frame's bytes through the view that never faults and is never tracked.
    fn shadow_mut(&mut self, frame: FrameId) -> &mut [u8] {
        assert!(frame < self.capacity());
        match &mut self.arena {
            Arena::Plain(map) => &mut map[frame * self.page_size..][..self.page_size],
            // SAFETY: the shadow view maps the same bytes, always writable.
            Arena::Protected(arena) => unsafe {
                std::slice::from_raw_parts_mut(
                    arena.shadow().add(frame * self.page_size),
                    self.page_size,
                )
            },
            // SAFETY: the shadow view maps the same bytes, writable and not watched.
            Arena::Written(arena) => unsafe {
                std::slice::from_raw_parts_mut(
                    arena.shadow().add(frame * self.page_size),
                    self.page_size,
                )
            },
        }
    }

    /// Forgets `page` (its frame becomes free), dirty or not.
    pub fn drop_page(&mut self, page: PageId) {
        if let Some(frame) = self.table.remove(page) {
            self.states[frame] = FrameState::default();
        }
    }

    /// Every cached page with its frame.
    pub fn pages(&self) -> Vec<(PageId, FrameId)> {
        self.table.pages().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spare_caches::SPARE_CACHES_MAX;

    const PAGE: usize = 8192;
    const FRAMES: usize = 16;

    fn cache(spares: &Arc<SpareCaches>, kind: ArenaKind) -> ClientCache {
        ClientCache::with_spares(PAGE, FRAMES, kind, Some(spares.clone())).unwrap()
    }

    #[test]
    fn a_dropped_cache_leaves_its_arena_to_the_next_cache_of_its_size() {
        let spares = Arc::new(SpareCaches::new());
        let mut first = cache(&spares, ArenaKind::Plain);
        let address = first.frame_ptr(0);
        assert!(spares.is_empty());
        drop(first);
        assert_eq!(spares.len(), 1);
        let mut second = cache(&spares, ArenaKind::Plain);
        assert_eq!(second.frame_ptr(0), address, "the first cache's memory");
        assert!(spares.is_empty());
        // A cache of another size maps its own arena, and both are kept when dropped.
        let other =
            ClientCache::with_spares(PAGE, FRAMES * 2, ArenaKind::Plain, Some(spares.clone()))
                .unwrap();
        drop(second);
        drop(other);
        assert_eq!(spares.len(), 2.min(SPARE_CACHES_MAX));
    }

    #[test]
    fn a_reused_frame_is_what_its_fill_writes() {
        let spares = Arc::new(SpareCaches::new());
        let mut first = cache(&spares, ArenaKind::Plain);
        first.fill_mut(3).fill(0x11);
        drop(first);
        let mut second = cache(&spares, ArenaKind::Plain);
        let (frame, evicted) = second.assign(PageId(9)).unwrap();
        assert!(evicted.is_none());
        page::format(
            second.fill_mut(frame),
            page::PageKind::Slotted,
            PageId(9),
            1,
        );
        assert_eq!(page::lsn(second.frame(frame)), Lsn(0));
        assert!(
            second.frame(frame)[page::PAGE_HEADER_BYTES..]
                .iter()
                .all(|&b| b == 0),
            "format clears the frame"
        );
    }

    #[test]
    fn a_cache_that_fills_its_arena_faults_it_in_ahead_and_still_hands_it_on() {
        use crate::prefault::PREFAULT_START_BYTES;
        let spares = Arc::new(SpareCaches::new());
        let frames = 2 * PREFAULT_START_BYTES / PAGE;
        let mut cache =
            ClientCache::with_spares(PAGE, frames, ArenaKind::Plain, Some(spares.clone())).unwrap();
        let started = |cache: &ClientCache| match &cache.arena {
            Arena::Plain(arena) => arena.prefault.started(),
            _ => unreachable!("a plain arena"),
        };
        for page in 0..PREFAULT_START_BYTES / PAGE - 1 {
            let (frame, _) = cache.assign(PageId(page as u32)).unwrap();
            cache.fill_mut(frame).fill(1);
        }
        assert!(!started(&cache), "below the threshold, no thread");
        for page in PREFAULT_START_BYTES / PAGE - 1..frames {
            let (frame, _) = cache.assign(PageId(page as u32)).unwrap();
            cache.fill_mut(frame).fill(1);
        }
        if cfg!(target_os = "linux") {
            assert!(
                started(&cache),
                "past the threshold, memory is faulted in ahead"
            );
        }
        let address = cache.frame_ptr(0);
        drop(cache);
        let mut next =
            ClientCache::with_spares(PAGE, frames, ArenaKind::Plain, Some(spares)).unwrap();
        assert_eq!(next.frame_ptr(0), address, "the arena went to the spares");
    }

    #[test]
    fn a_clean_cache_hands_on_its_pages_and_a_full_or_dirty_one_only_its_memory() {
        let spares = Arc::new(SpareCaches::new());
        let fill = |cache: &mut ClientCache, pages: u32| {
            for page in 0..pages {
                let (frame, _) = cache.assign(PageId(page)).unwrap();
                cache.fill_mut(frame).fill(page as u8 + 1);
            }
        };
        // Clean, with frames to spare: the next cache has the pages, bytes and all.
        let mut first = cache(&spares, ArenaKind::Plain);
        fill(&mut first, 3);
        first.keep_pages_when_dropped();
        drop(first);
        let mut second = cache(&spares, ArenaKind::Plain);
        let frame = second
            .lookup(PageId(2))
            .expect("page 2 came with the cache");
        assert!(second.frame(frame).iter().all(|&b| b == 3));
        assert!(
            second.state(frame).validated_in.is_none(),
            "to be validated again"
        );
        assert_ne!(second.fill_number(frame), 0);
        // Dirty: only the memory.
        second.state_mut(frame).dirty = true;
        second.keep_pages_when_dropped();
        drop(second);
        let mut third = cache(&spares, ArenaKind::Plain);
        assert!(third.lookup(PageId(2)).is_none());
        // Full: only the memory.
        fill(&mut third, FRAMES as u32);
        third.keep_pages_when_dropped();
        drop(third);
        assert_eq!(spares.with_pages(), 0);
        // Not told the session ended cleanly: only the memory.
        let mut fourth = cache(&spares, ArenaKind::Plain);
        fill(&mut fourth, 3);
        drop(fourth);
        assert_eq!(spares.with_pages(), 0);
        assert_eq!(spares.len(), 1);
    }

    #[test]
    fn arenas_of_protected_frames_are_not_kept() {
        let spares = Arc::new(SpareCaches::new());
        drop(cache(
            &spares,
            ArenaKind::Protected(crate::detect::protection::FaultMechanism::Signal),
        ));
        assert!(spares.is_empty());
    }
}
