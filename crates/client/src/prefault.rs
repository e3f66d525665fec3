//! The client cache's arena faulted in ahead of the cache's first use of it, on a thread of
//! its own.
//!
//! An arena costs nothing until it is touched; then every page the cache fills for the first
//! time is a page fault and a clear by the kernel, and under a hypervisor that takes back the
//! memory a guest frees (free page reporting), often a fault in the host as well: on the
//! virtual machine Lodestore is measured on, a huge page touched for the first time costs 3
//! to 4 ms per MiB (a small one 0.6 ms), a third of a bulk load into an empty cache
//! (docs/BENCHMARKS.md, "Cache memory faulted in ahead"). A session that fills its cache
//! quickly has a core to spare for that most of the time: this thread faults the arena in a
//! bounded stretch ahead of the highest frame in use, with `MADV_POPULATE_WRITE`, which maps
//! the pages without writing them, so it never races the cache's own writes. The server's
//! pool, of small pages, gained nothing measurable from the same (same section).
//!
//! The thread starts only once a cache has used [`PREFAULT_START_BYTES`] (small sessions never
//! pay for it), stays at most [`PREFAULT_AHEAD_BYTES`] ahead (it never maps more than the cache
//! is about to use), and stops at the first failure (a kernel without the advice): the cache
//! then faults its pages itself, as it always did.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes a cache uses before the thread starts.
pub const PREFAULT_START_BYTES: usize = 8 << 20;

/// How far ahead of the cache's highest used byte the thread maps memory at most; never
/// further than the cache has used so far, so that memory mapped and never used stays below
/// what the cache uses.
pub const PREFAULT_AHEAD_BYTES: usize = 16 << 20;

/// Bytes mapped per call: one huge page, so that a stop waits for one at most.
const PREFAULT_STEP_BYTES: usize = 2 << 20;

/// Faults in the memory of one arena ahead of its use; joined when dropped.
pub struct Prefault {
    /// The arena's address, as a number so that the thread may hold it.
    base: usize,
    len: usize,
    /// The end of the stretch last asked of the thread.
    asked: usize,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Set when the thread could not be started: the cache faults its own pages.
    off: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<Wanted>,
    wake: Condvar,
}

#[derive(Default)]
struct Wanted {
    /// Map the arena up to this byte.
    end: usize,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Wanted> {
        // The state is two plain fields, whole after any panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Prefault {
    /// A prefaulter for the `len` bytes at `base`, idle until [`Prefault::used`] reports use.
    ///
    /// # Safety
    /// The memory must stay mapped, readable and writable until this value is dropped.
    pub unsafe fn new(base: *mut u8, len: usize) -> Prefault {
        Prefault {
            base: base as usize,
            len,
            asked: 0,
            shared: Arc::default(),
            thread: None,
            off: !cfg!(target_os = "linux"),
        }
    }

    /// The cache has now used the arena's first `bytes`: keep the stretch after them mapped.
    #[inline]
    pub fn used(&mut self, bytes: usize) {
        // Most calls: the thread was asked for enough already.
        if bytes + ahead(bytes) / 2 <= self.asked || bytes < PREFAULT_START_BYTES {
            return;
        }
        self.ask(bytes);
    }

    /// Whether the thread has been started.
    pub fn started(&self) -> bool {
        self.thread.is_some()
    }

    #[cold]
    fn ask(&mut self, bytes: usize) {
        if self.off || self.asked >= self.len {
            return;
        }
        let end = (bytes + ahead(bytes)).min(self.len);
        self.asked = end;
        if self.thread.is_none() && !self.start(bytes) {
            self.off = true;
            return;
        }
        self.shared.lock().end = end;
        self.shared.wake.notify_one();
    }

    /// Starts the thread, mapping from the first whole step after `bytes`.
    fn start(&mut self, bytes: usize) -> bool {
        let shared = Arc::clone(&self.shared);
        let (base, len) = (self.base, self.len);
        let from = bytes.next_multiple_of(PREFAULT_STEP_BYTES);
        let spawned = std::thread::Builder::new()
            .name("lodestore-prefault".into())
            .spawn(move || run(&shared, base, len, from));
        match spawned {
            Ok(thread) => {
                self.thread = Some(thread);
                true
            }
            Err(e) => {
                tracing::debug!("cache memory not faulted in ahead: no thread ({e})");
                false
            }
        }
    }
}

/// How far ahead of `used` bytes the thread maps.
fn ahead(used: usize) -> usize {
    used.min(PREFAULT_AHEAD_BYTES)
}

impl Drop for Prefault {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        // The thread only maps memory; a panic there leaves nothing to clean up.
        let _ = thread.join();
    }
}

/// The thread: maps `[done, wanted end)` a step at a time until told to stop.
fn run(shared: &Shared, base: usize, len: usize, mut done: usize) {
    loop {
        let end = {
            let mut wanted = shared.lock();
            while !wanted.stop && done >= wanted.end {
                wanted = shared.wake.wait(wanted).unwrap_or_else(|e| e.into_inner());
            }
            if wanted.stop {
                return;
            }
            wanted.end
        };
        let step_end = (done + PREFAULT_STEP_BYTES).min(end).min(len);
        if !populate(base + done, step_end - done) {
            return;
        }
        done = step_end;
    }
}

/// Maps `len` bytes at `address` writable without writing them; false if the kernel can't.
fn populate(address: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        /// `MADV_POPULATE_WRITE`, Linux 5.14 and later.
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: the range lies inside the arena, which stays mapped until the thread is
        // joined (`Prefault::new`'s contract); populating changes no byte of it.
        let rc = unsafe { libc::madvise(address as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
        if rc != 0 {
            tracing::debug!(
                "cache memory not faulted in ahead: {}",
                std::io::Error::last_os_error()
            );
            return false;
        }
        true
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (address, len);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of `map` the kernel has backed with memory, by `mincore`.
    #[cfg(target_os = "linux")]
    fn resident(map: &memmap2::MmapMut) -> usize {
        let page = 4096;
        let mut vec = vec![0u8; map.len().div_ceil(page)];
        // SAFETY: `vec` has one byte per page of the mapping.
        let rc = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&b| b & 1 == 1).count() * page
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_maps_a_bounded_stretch_ahead_and_writes_nothing() {
        let len = 64 << 20;
        let mut map = memmap2::MmapMut::map_anon(len).unwrap();
        // SAFETY: `map` outlives the prefaulter, dropped first below.
        let mut prefault = unsafe { Prefault::new(map.as_mut_ptr(), len) };
        prefault.used(1 << 20);
        assert!(prefault.thread.is_none(), "a small cache starts no thread");
        let used = PREFAULT_START_BYTES;
        map[..used].fill(7);
        prefault.used(used);
        let target = used + ahead(used);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while resident(&map) < target && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if prefault.off {
            // A kernel before 5.14: nothing is mapped ahead, and nothing breaks.
            return;
        }
        assert!(resident(&map) >= target, "the stretch ahead is mapped");
        drop(prefault);
        assert!(
            resident(&map) <= target + PREFAULT_STEP_BYTES,
            "no more than a step past the stretch asked for"
        );
        assert!(map[..used].iter().all(|&b| b == 7), "used bytes untouched");
        assert!(
            map[used..].iter().all(|&b| b == 0),
            "mapped bytes still zero"
        );
    }

    #[test]
    fn dropping_an_idle_or_running_prefaulter_returns() {
        let len = 32 << 20;
        let mut map = memmap2::MmapMut::map_anon(len).unwrap();
        // SAFETY: `map` outlives both prefaulters.
        drop(unsafe { Prefault::new(map.as_mut_ptr(), len) });
        // SAFETY: as above.
        let mut running = unsafe { Prefault::new(map.as_mut_ptr(), len) };
        running.used(PREFAULT_START_BYTES);
        running.used(len);
        drop(running);
    }
}
