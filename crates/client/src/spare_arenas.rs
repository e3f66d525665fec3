//! Client cache arenas kept from closed sessions for the next sessions of the same store.
//!
//! A new anonymous mapping costs nothing until it is touched, and then a page fault and the
//! kernel's zeroing of every page the cache fills for the first time: with huge pages, a
//! 2 MiB clear per 256 frames of 8 KiB. A session that fills its cache pays that on its first
//! misses, about as much again as the copy each miss makes. A store that opens sessions one
//! after another (a session per request, a loader then a reader) hands a closed session's
//! arena to the next one instead, whose first misses then cost only the copy.
//!
//! A kept arena is marked free (`MADV_FREE`): the kernel takes its memory back when it needs
//! it, and until then the pages stay, so keeping arenas never holds memory the machine wants.
//! A reused frame holds whatever it held before; the cache fills every frame whole before it
//! is read (a fetch, or a new page's format, which clears it), and debug builds fill the
//! start of a reused arena with a poison byte so that a read before a fill shows.

use memmap2::MmapMut;
use std::sync::Mutex;

/// Arenas kept at most: enough for a store whose sessions come and go one or two at a time;
/// sessions beyond it at once map arenas of their own, given back to the system as they close.
pub const SPARE_ARENAS_MAX: usize = 2;

/// Byte a debug build writes over the start of a reused arena.
pub const REUSED_POISON: u8 = 0xA5;

/// Bytes of a reused arena a debug build poisons: the first frames a cache hands out (frames
/// come into use lowest first), bounded so that tests opening many sessions stay quick.
pub const POISONED_BYTES_MAX: usize = 4 << 20;

/// The arenas of closed sessions, at most [`SPARE_ARENAS_MAX`], shared by a store's sessions.
#[derive(Debug, Default)]
pub struct SpareArenas {
    arenas: Mutex<Vec<MmapMut>>,
}

impl SpareArenas {
    pub fn new() -> SpareArenas {
        SpareArenas::default()
    }

    /// A kept arena of exactly `bytes`, if there is one.
    pub fn take(&self, bytes: usize) -> Option<MmapMut> {
        let mut arenas = self.lock();
        let at = arenas.iter().position(|a| a.len() == bytes)?;
        let mut arena = arenas.swap_remove(at);
        drop(arenas);
        if cfg!(debug_assertions) {
            let poisoned = arena.len().min(POISONED_BYTES_MAX);
            arena[..poisoned].fill(REUSED_POISON);
        }
        Some(arena)
    }

    /// Keeps `arena` for a later session if there is room; otherwise unmaps it.
    pub fn give(&self, arena: MmapMut) {
        if self.lock().len() >= SPARE_ARENAS_MAX {
            return;
        }
        mark_free(&arena);
        let mut arenas = self.lock();
        if arenas.len() < SPARE_ARENAS_MAX {
            arenas.push(arena);
        }
    }

    /// Arenas kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<MmapMut>> {
        // A panic while holding the lock leaves a list of whole arenas: still usable.
        self.arenas.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lets the kernel reclaim `arena`'s pages when it needs memory (they read as zeros then).
fn mark_free(arena: &MmapMut) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the arena is no longer read by anyone (its cache is gone), and a page the
        // kernel reclaims reads as zeros, which is as good as any other contents to the next
        // cache, which fills every frame before it reads it.
        if let Err(e) = unsafe { arena.unchecked_advise(memmap2::UncheckedAdvice::Free) } {
            tracing::debug!("spare client cache arena not marked free: {e}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = arena;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(bytes: usize) -> MmapMut {
        MmapMut::map_anon(bytes).unwrap()
    }

    #[test]
    fn an_arena_given_back_is_taken_by_the_next_of_its_size_only() {
        let spares = SpareArenas::new();
        let mut given = arena(64 << 10);
        given[100] = 7;
        let address = given.as_ptr();
        spares.give(given);
        assert_eq!(spares.len(), 1);
        assert!(spares.take(128 << 10).is_none(), "a size it was not");
        let taken = spares.take(64 << 10).expect("the arena given back");
        assert_eq!(taken.as_ptr(), address, "the same mapping, not a new one");
        assert!(spares.is_empty());
        if cfg!(debug_assertions) {
            assert!(taken.iter().all(|&b| b == REUSED_POISON));
        }
    }

    #[test]
    fn no_more_than_the_limit_are_kept() {
        let spares = SpareArenas::new();
        for _ in 0..SPARE_ARENAS_MAX + 3 {
            spares.give(arena(16 << 10));
        }
        assert_eq!(spares.len(), SPARE_ARENAS_MAX);
        for _ in 0..SPARE_ARENAS_MAX {
            assert!(spares.take(16 << 10).is_some());
        }
        assert!(spares.take(16 << 10).is_none());
    }
}
