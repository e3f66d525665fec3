//! Cache memory a closed store let go, kept for the next store the same process opens.
//!
//! A client cache's arena and the server's pool are anonymous mappings that cost nothing until
//! touched; then every page touched for the first time is a fault and a clear by the kernel,
//! and under a hypervisor that takes back the memory a guest frees (free page reporting) a
//! fault in the host as well. On the virtual machine Lodestore is measured on that first touch
//! cost 3 to 4 ms per MiB of huge pages and about 0.6 ms per MiB of small ones, as much as a
//! bulk load's own work (docs/BENCHMARKS.md, "Cache memory faulted in ahead" and "Memory a
//! closed store used, for the next store"). Memory unmapped goes back to the host within
//! seconds; memory kept does not. So a store's closing hands its caches' mappings here, and a
//! store opened later in the process (a test suite, a tool that opens store after store, a
//! server that closes and opens its store) takes a mapping of the size it needs from here
//! before mapping a new one.
//!
//! Kept mappings are marked free (`MADV_FREE`): the kernel takes their memory back when it
//! needs it (the pages read as zeros then), and until then they stay as they were. What they
//! hold is another store's bytes, never read: both caches fill a frame whole before reading
//! it, and debug builds fill the start of a reused mapping with [`REUSED_POISON`] so that a
//! read before a fill shows. At most [`SPARE_MAPPINGS_MAX`] mappings of each kind are kept;
//! more are unmapped as before, and [`release_all`] unmaps every kept one at once.

use memmap2::MmapMut;
use std::sync::{Mutex, MutexGuard};

/// Mappings of each kind kept at most: a process usually has one store open at a time, whose
/// sessions' arenas come and go by two at most (`SPARE_CACHES_MAX` of the client).
pub const SPARE_MAPPINGS_MAX: usize = 2;

/// Byte a debug build writes over the start of a reused mapping.
pub const REUSED_POISON: u8 = 0xA5;

/// Bytes of a reused mapping a debug build poisons: the first frames a cache hands out
/// (frames come into use lowest first), bounded so that tests opening many stores stay quick.
pub const POISONED_BYTES_MAX: usize = 4 << 20;

/// What a mapping was made for: the kernel was advised differently for each, and a mapping
/// goes back only to the use it was advised for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryUse {
    /// A client cache's plain arena (huge pages advised).
    ClientArena,
    /// The server's buffer pool (small pages advised).
    ServerPool,
}

struct Kept {
    use_: MemoryUse,
    map: MmapMut,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

fn kept() -> MutexGuard<'static, Vec<Kept>> {
    // A panic while holding the lock leaves a list of whole mappings: still usable.
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A kept mapping of exactly `len` bytes made for `use_`, if there is one; poisoned at its
/// start in debug builds.
pub fn take(use_: MemoryUse, len: usize) -> Option<MmapMut> {
    let mut kept = kept();
    let at = kept
        .iter()
        .position(|k| k.use_ == use_ && k.map.len() == len)?;
    let mut map = kept.swap_remove(at).map;
    drop(kept);
    poison_reused(&mut map);
    Some(map)
}

/// Keeps `map`, made for `use_` and read by nobody any more, for a later store if there is room
/// for one more of its kind; otherwise unmaps it.
pub fn give(use_: MemoryUse, mut map: MmapMut) {
    if kept_of(use_) >= SPARE_MAPPINGS_MAX || map.is_empty() {
        return;
    }
    mark_free(&mut map);
    let mut kept = kept();
    if kept.iter().filter(|k| k.use_ == use_).count() < SPARE_MAPPINGS_MAX {
        kept.push(Kept { use_, map });
    }
}

/// Mappings made for `use_` kept now.
pub fn kept_of(use_: MemoryUse) -> usize {
    kept().iter().filter(|k| k.use_ == use_).count()
}

/// Bytes of every kept mapping, of both uses.
pub fn kept_bytes() -> usize {
    kept().iter().map(|k| k.map.len()).sum()
}

/// Unmaps every kept mapping at once, for a process that wants its memory back now rather than
/// when the kernel needs it (a long-lived process done with stores for a while, a memory
/// measurement). Returns the bytes unmapped. The next store maps afresh.
pub fn release_all() -> usize {
    let released: Vec<Kept> = std::mem::take(&mut *kept());
    released.iter().map(|k| k.map.len()).sum()
}

/// Lets the kernel reclaim `map`'s pages when it needs memory (they read as zeros then): for
/// cache memory whose contents nobody will read before writing them again. Also used for the
/// arenas a store keeps for its own next sessions.
pub fn mark_free(map: &mut MmapMut) {
    #[cfg(target_os = "linux")]
    {
        // Advice only: memory not marked free is kept as it is, which costs nothing but memory.
        // SAFETY: the borrow is exclusive, so no slice of the mapping is alive while the kernel
        // is told; afterwards a reclaimed page reads as zeros, as good as any other contents to
        // a cache, which fills every frame before it reads it.
        let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::Free) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

/// In debug builds, fills the start of `map`, memory taken back for a cache, with
/// [`REUSED_POISON`], so that a read before a fill shows.
pub fn poison_reused(map: &mut [u8]) {
    if cfg!(debug_assertions) {
        let poisoned = map.len().min(POISONED_BYTES_MAX);
        map[..poisoned].fill(REUSED_POISON);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the list is the process's, and tests of this crate run in parallel.
    #[test]
    fn a_mapping_given_back_goes_to_the_next_taker_of_its_use_and_size_only() {
        let len = 192 << 10;
        let mut given = MmapMut::map_anon(len).unwrap();
        given[100] = 7;
        let address = given.as_ptr();
        give(MemoryUse::ServerPool, given);
        assert!(
            take(MemoryUse::ServerPool, len + 4096).is_none(),
            "another size"
        );
        assert!(take(MemoryUse::ClientArena, len).is_none(), "another use");
        let taken = take(MemoryUse::ServerPool, len).expect("the mapping given back");
        assert_eq!(taken.as_ptr(), address, "the same mapping, not a new one");
        if cfg!(debug_assertions) {
            assert!(taken.iter().all(|&b| b == REUSED_POISON));
        }
        assert!(take(MemoryUse::ServerPool, len).is_none(), "taken once");

        for _ in 0..SPARE_MAPPINGS_MAX + 2 {
            give(MemoryUse::ClientArena, MmapMut::map_anon(len).unwrap());
        }
        assert_eq!(kept_of(MemoryUse::ClientArena), SPARE_MAPPINGS_MAX);
        while take(MemoryUse::ClientArena, len).is_some() {}
        assert_eq!(kept_of(MemoryUse::ClientArena), 0);

        give(MemoryUse::ClientArena, MmapMut::map_anon(len).unwrap());
        give(MemoryUse::ServerPool, MmapMut::map_anon(2 * len).unwrap());
        assert_eq!(kept_bytes(), 3 * len);
        assert_eq!(release_all(), 3 * len, "both kinds, every byte");
        assert_eq!(kept_bytes(), 0);
        assert_eq!(kept_of(MemoryUse::ClientArena), 0);
        assert_eq!(kept_of(MemoryUse::ServerPool), 0);
        assert_eq!(release_all(), 0, "nothing left to release");
    }
}
