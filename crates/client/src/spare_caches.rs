//! Client caches kept from closed sessions for the next sessions of the same store: the
//! arena's memory, and the pages in it when the session ended cleanly.
//!
//! A new anonymous mapping costs nothing until it is touched, and then a page fault and the
//! kernel's zeroing of every page the cache fills for the first time: with huge pages, a
//! 2 MiB clear per 256 frames of 8 KiB. A session that fills its cache pays that on its first
//! misses, about as much again as the copy each miss makes. And every page a closed session
//! had cached, the next one fetched again: a lock request, a copy of the page out of the
//! server's pool and a frame to find for it. A store that opens sessions one after another (a
//! session per request, a loader then a reader) hands a closed session's cache to the next
//! one instead, whose first use of a page it holds is then a lock request that finds the page
//! current, as for a page cached by an earlier transaction of the same session.
//!
//! Kept pages are only as good as their LSNs: the next session validates each under its lock
//! (the server answers with the page's committed LSN, and a copy with another LSN is fetched
//! again), so pages other sessions changed meanwhile are never read stale. A session hands on
//! its pages only when it ended with nothing uncommitted in them (no transaction left, no
//! commit whose outcome is unknown); otherwise only the memory goes on.
//!
//! The page locks a session kept between its transactions ([`KeptLocks`]) go on with its
//! pages ([`HandedLocks`]): the next session reads a page kept for it without a lock request,
//! as the closed session would have, and writers call those locks back meanwhile as they would
//! have from the closed session. Locks that no session takes on (the cache dropped, or taken
//! by a session that keeps no locks) are released at the server.
//!
//! An arena kept without pages is marked free (`MADV_FREE`): the kernel takes its memory back
//! when it needs it, and until then the pages stay. An arena kept with pages keeps its memory,
//! as the session did: at most [`SPARE_CACHES_MAX`] caches' worth. A reused frame of an arena
//! without pages holds whatever it held before; the cache fills every frame whole before it
//! is read (a fetch, or a new page's format, which clears it), and debug builds fill the start
//! of such an arena with a poison byte so that a read before a fill shows.
//!
//! A closing store's kept arenas, and arenas given when the spares are full, go on without
//! their pages to the process ([`spare_memory`]), for the next store it opens: memory a
//! process has touched once costs no first touch again, where a fresh mapping on a virtual
//! machine costs as much as a bulk load's own work.

use crate::cache::FrameState;
use lodestore_core::frames::{FrameTable, FrameVec};
use lodestore_core::spare_memory::{self, MemoryUse};
use lodestore_protocol::{KeptLocks, PageServer};
use memmap2::MmapMut;
use std::sync::{Arc, Mutex};

/// Caches kept at most: enough for a store whose sessions come and go one or two at a time;
/// sessions beyond it at once map arenas of their own, left to the process as they close.
pub const SPARE_CACHES_MAX: usize = 2;

/// The pages a closed session's cache held: its page table, the states and fill numbers of
/// its frames, each page as of the LSN in its header, and the locks the session kept on them.
pub(crate) struct KeptPages {
    pub(crate) page_size: usize,
    pub(crate) table: FrameTable,
    /// Clean, each naming the transaction of the closed session that last validated it.
    pub(crate) states: FrameVec<FrameState>,
    pub(crate) fills: FrameVec<u64>,
    pub(crate) fill_count: u64,
    pub(crate) locks: Option<HandedLocks>,
}

/// A closed session's kept locks on their way to the next session, released at the server if
/// none takes them.
pub struct HandedLocks {
    kept: Option<Arc<KeptLocks>>,
    server: Arc<dyn PageServer>,
}

impl HandedLocks {
    /// The locks `kept` keeps at `server`, to be handed on.
    pub fn new(kept: Arc<KeptLocks>, server: Arc<dyn PageServer>) -> HandedLocks {
        HandedLocks {
            kept: Some(kept),
            server,
        }
    }

    /// Takes the locks on: the taker keeps (or forgets) them from now on.
    pub fn take(mut self) -> Arc<KeptLocks> {
        self.kept.take().expect("handed locks are taken once")
    }
}

impl Drop for HandedLocks {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            self.server.forget_kept(&kept);
        }
    }
}

impl std::fmt::Debug for HandedLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandedLocks")
            .field("kept", &self.kept.as_ref().map(|k| k.id()))
            .finish()
    }
}

/// A closed session's arena, with its pages when they may be used again.
pub(crate) struct KeptCache {
    pub(crate) map: MmapMut,
    pub(crate) pages: Option<KeptPages>,
}

/// The caches of closed sessions, at most [`SPARE_CACHES_MAX`], shared by a store's sessions.
#[derive(Default)]
pub struct SpareCaches {
    kept: Mutex<Vec<KeptCache>>,
    /// Pages given are dropped: only the memory goes to the next session.
    memory_only: bool,
}

impl std::fmt::Debug for SpareCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareCaches")
            .field("kept", &self.len())
            .finish()
    }
}

impl SpareCaches {
    pub fn new() -> SpareCaches {
        SpareCaches::default()
    }

    /// Spares that keep the memory of closed sessions' caches but not their pages: for
    /// sessions whose server may restart between them (a remote store), where a page's LSN
    /// may not tell its versions apart.
    pub fn memory_only() -> SpareCaches {
        SpareCaches {
            kept: Mutex::default(),
            memory_only: true,
        }
    }

    /// A kept cache whose arena is exactly `bytes`, one with pages first, if there is one.
    pub(crate) fn take(&self, bytes: usize) -> Option<KeptCache> {
        let mut kept = self.lock();
        let fits = |k: &KeptCache| k.map.len() == bytes;
        let at = kept
            .iter()
            .position(|k| fits(k) && k.pages.is_some())
            .or_else(|| kept.iter().position(fits))?;
        let mut cache = kept.swap_remove(at);
        drop(kept);
        if cache.pages.is_none() {
            spare_memory::poison_reused(&mut cache.map);
        }
        Some(cache)
    }

    /// Keeps `map`, with `pages` if given, for a later session if there is room; otherwise
    /// leaves the memory to the process ([`spare_memory`]).
    pub(crate) fn give(&self, mut map: MmapMut, pages: Option<KeptPages>) {
        if self.lock().len() >= SPARE_CACHES_MAX {
            spare_memory::give(MemoryUse::ClientArena, map);
            return;
        }
        let pages = pages.filter(|_| !self.memory_only);
        if pages.is_none() {
            spare_memory::mark_free(&mut map);
        }
        let mut kept = self.lock();
        if kept.len() < SPARE_CACHES_MAX {
            kept.push(KeptCache { map, pages });
        } else {
            drop(kept);
            drop(pages);
            spare_memory::give(MemoryUse::ClientArena, map);
        }
    }

    /// Caches kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Releases the locks kept with the pages of every cache kept now (the pages stay): a
    /// closing store does, so that nothing here still uses its server.
    pub fn release_locks(&self) {
        let handed: Vec<HandedLocks> = self
            .lock()
            .iter_mut()
            .filter_map(|k| k.pages.as_mut().and_then(|p| p.locks.take()))
            .collect();
        // Released with the list unlocked: the server's lock manager is not called under it.
        drop(handed);
    }

    /// Caches kept now with their pages.
    pub fn with_pages(&self) -> usize {
        self.lock().iter().filter(|k| k.pages.is_some()).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<KeptCache>> {
        // A panic while holding the lock leaves a list of whole caches: still usable.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A closing store's spare arenas go to the process for the next store it opens; the pages in
/// them (and the locks kept with those) are the closing store's and go with it.
impl Drop for SpareCaches {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut *self.lock());
        for cache in kept {
            drop(cache.pages);
            spare_memory::give(MemoryUse::ClientArena, cache.map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(bytes: usize) -> MmapMut {
        MmapMut::map_anon(bytes).unwrap()
    }

    fn pages() -> KeptPages {
        KeptPages {
            page_size: 4096,
            table: FrameTable::new(4),
            states: FrameVec::new(4),
            fills: FrameVec::new(4),
            fill_count: 0,
            locks: None,
        }
    }

    #[test]
    fn an_arena_given_back_is_taken_by_the_next_of_its_size_only() {
        let spares = SpareCaches::new();
        let mut given = arena(64 << 10);
        given[100] = 7;
        let address = given.as_ptr();
        spares.give(given, None);
        assert_eq!(spares.len(), 1);
        assert!(spares.take(128 << 10).is_none(), "a size it was not");
        let taken = spares.take(64 << 10).expect("the arena given back");
        assert_eq!(
            taken.map.as_ptr(),
            address,
            "the same mapping, not a new one"
        );
        assert!(taken.pages.is_none());
        assert!(spares.is_empty());
        if cfg!(debug_assertions) {
            assert!(taken.map.iter().all(|&b| b == spare_memory::REUSED_POISON));
        }
    }

    #[test]
    fn a_cache_with_pages_is_taken_first_and_keeps_its_bytes() {
        let spares = SpareCaches::new();
        spares.give(arena(16 << 10), None);
        let mut with_pages = arena(16 << 10);
        with_pages[5] = 9;
        spares.give(with_pages, Some(pages()));
        assert_eq!(spares.with_pages(), 1);
        let taken = spares.take(16 << 10).unwrap();
        assert!(taken.pages.is_some(), "the one with pages first");
        assert_eq!(
            taken.map[5], 9,
            "its bytes are the pages: never poisoned nor freed"
        );
        assert!(spares.take(16 << 10).unwrap().pages.is_none());
    }

    #[test]
    fn memory_only_spares_drop_the_pages() {
        let spares = SpareCaches::memory_only();
        spares.give(arena(16 << 10), Some(pages()));
        assert_eq!(spares.len(), 1);
        assert_eq!(spares.with_pages(), 0);
        assert!(spares.take(16 << 10).unwrap().pages.is_none());
    }

    #[test]
    fn no_more_than_the_limit_are_kept() {
        let spares = SpareCaches::new();
        for _ in 0..SPARE_CACHES_MAX + 3 {
            spares.give(arena(16 << 10), None);
        }
        assert_eq!(spares.len(), SPARE_CACHES_MAX);
        for _ in 0..SPARE_CACHES_MAX {
            assert!(spares.take(16 << 10).is_some());
        }
        assert!(spares.take(16 << 10).is_none());
    }
}
