//! The server's buffer pool: a bounded set of page images replaced by the clock. Pages may be
//! dirty (STEAL/NO-FORCE): a dirty page is written back when it is evicted or at a checkpoint,
//! and only after the log is durable up to its LSN. This module only keeps the frames; the
//! server enforces the write-ahead rule when it writes a victim back.

use lodestore_core::frames::{FrameId, FrameTable};
use lodestore_core::spare_memory::{self, MemoryUse};
use lodestore_core::{Lsn, PageId};
use lodestore_storage::page;
use std::mem::ManuallyDrop;

#[derive(Clone, Copy, Debug, Default)]
struct FrameState {
    dirty: bool,
    /// LSN of the first change since the page was last clean (ARIES recLSN).
    rec_lsn: Lsn,
    /// Holds changes of a running transaction that are in no log yet (deferred page writes):
    /// the page may not leave the pool.
    pinned: bool,
    /// The LSN in the page's header, once read: every lock grant returns it, and reading it
    /// from the frame costs a cache miss per page. Forgotten whenever the frame may change.
    page_lsn: Option<Lsn>,
}

pub struct BufferPool {
    page_size: usize,
    frames: FrameTable,
    states: Vec<FrameState>,
    bytes: Frames,
}

/// The pool's memory: an anonymous mapping the kernel is asked to back with ordinary pages, or
/// a plain vector where no mapping can be had. Not huge pages, unlike the client cache: the
/// pool keeps every page a transaction writes home, so a bulk load touches it for the first
/// time as fast as it writes, and a huge page touched for the first time cost 3 ms per MiB on
/// the virtual machine this was measured on (the kernel clears 2 MiB at once, from memory
/// the host had not backed yet), 4 KiB pages 0.6 ms. The pool's copies are read a page at a
/// time, so the larger TLB reach of huge pages bought less than that cost (docs/BENCHMARKS.md,
/// "Bulk loads without reading back what they wrote").
enum Frames {
    Mapped(ManuallyDrop<memmap2::MmapMut>),
    Heap(Vec<u8>),
}

impl Frames {
    /// A closed store's pool memory of the same size if the process kept one ([`spare_memory`]:
    /// memory touched before costs no first touch), else a new mapping.
    fn new(len: usize) -> Frames {
        if let Some(map) = spare_memory::take(MemoryUse::ServerPool, len) {
            return Frames::Mapped(ManuallyDrop::new(map));
        }
        match memmap2::MmapMut::map_anon(len) {
            Ok(map) => {
                #[cfg(target_os = "linux")]
                if let Err(e) = map.advise(memmap2::Advice::NoHugePage) {
                    tracing::debug!("server pool may get huge pages: {e}");
                }
                Frames::Mapped(ManuallyDrop::new(map))
            }
            Err(e) => {
                tracing::debug!("server pool on the heap: no anonymous mapping ({e})");
                Frames::Heap(vec![0u8; len])
            }
        }
    }
}

/// The mapping goes to the process for the next store's pool: the frames hold this store's
/// pages, which nobody reads again (a pool fills a frame whole before it reads it).
impl Drop for Frames {
    fn drop(&mut self) {
        if let Frames::Mapped(map) = self {
            // SAFETY: taken once, here, and the frames are never used after.
            let map = unsafe { ManuallyDrop::take(map) };
            spare_memory::give(MemoryUse::ServerPool, map);
        }
    }
}

impl std::ops::Deref for Frames {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Frames::Mapped(map) => map,
            Frames::Heap(vec) => vec,
        }
    }
}

impl std::ops::DerefMut for Frames {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Frames::Mapped(map) => map,
            Frames::Heap(vec) => vec,
        }
    }
}

/// A page that had to leave to make room, still readable in its old frame until the frame is
/// overwritten.
pub struct Victim {
    pub page: PageId,
    pub dirty: bool,
}

impl BufferPool {
    pub fn new(page_size: usize, frame_count: usize) -> BufferPool {
        assert!(frame_count > 0);
        BufferPool {
            page_size,
            frames: FrameTable::new(frame_count),
            // Grows with the frames the table hands out (see `FrameTable`).
            states: Vec::new(),
            bytes: Frames::new(page_size * frame_count),
        }
    }

    pub fn capacity(&self) -> usize {
        self.frames.capacity()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn contains(&self, page: PageId) -> bool {
        self.frames.peek(page).is_some()
    }

    fn range(&self, frame: FrameId) -> std::ops::Range<usize> {
        frame * self.page_size..(frame + 1) * self.page_size
    }

    /// The cached image of `page`, if present.
    pub fn get(&mut self, page: PageId) -> Option<&[u8]> {
        let frame = self.frames.lookup(page)?;
        let range = self.range(frame);
        Some(&self.bytes[range])
    }

    /// The cached image of `page` for changing in place; the caller marks it dirty.
    pub fn get_mut(&mut self, page: PageId) -> Option<&mut [u8]> {
        let frame = self.frames.lookup(page)?;
        self.states[frame].page_lsn = None;
        let range = self.range(frame);
        Some(&mut self.bytes[range])
    }

    /// The frame of cached `page`, if present, counted as a use.
    pub fn lookup(&mut self, page: PageId) -> Option<FrameId> {
        self.frames.lookup(page)
    }

    /// The LSN in the header of cached `page`, if present.
    pub fn page_lsn(&mut self, page: PageId) -> Option<Lsn> {
        let frame = self.frames.lookup(page)?;
        Some(self.frame_lsn(frame))
    }

    /// The LSN in the header of the page in `frame` (which holds one), kept beside the frame
    /// once read.
    pub fn frame_lsn(&mut self, frame: FrameId) -> Lsn {
        if let Some(lsn) = self.states[frame].page_lsn {
            debug_assert_eq!(lsn, page::lsn(&self.bytes[self.range(frame)]));
            return lsn;
        }
        let lsn = page::lsn(&self.bytes[self.range(frame)]);
        self.states[frame].page_lsn = Some(lsn);
        lsn
    }

    /// Gives `page` (not present) a frame; if another page had to leave, returns it with its
    /// bytes still in `frame_bytes(victim)` until `fill` is called. `None` when every frame
    /// holds a pinned page.
    pub fn reserve(&mut self, page: PageId) -> Option<(FrameId, Option<Victim>)> {
        self.reserve_avoiding(page, |_| false)
    }

    /// [`BufferPool::reserve`], choosing a victim among the pages `avoid` refuses only when
    /// every other frame is pinned or refused too (pages whose eviction costs a forced write).
    pub fn reserve_avoiding(
        &mut self,
        page: PageId,
        avoid: impl Fn(PageId) -> bool,
    ) -> Option<(FrameId, Option<Victim>)> {
        debug_assert!(!self.contains(page));
        let states = &self.states;
        let assigned = match self
            .frames
            .assign(page, |frame, p| !states[frame].pinned && !avoid(p))
        {
            Some(assigned) => assigned,
            None => self.frames.assign(page, |frame, _| !states[frame].pinned)?,
        };
        if assigned.frame == self.states.len() {
            self.states.push(FrameState::default());
        }
        let old = std::mem::take(&mut self.states[assigned.frame]);
        let victim = assigned.evicted.map(|p| Victim {
            page: p,
            dirty: old.dirty,
        });
        Some((assigned.frame, victim))
    }

    /// Keeps `page` (cached) in the pool until [`BufferPool::unpin`].
    pub fn pin(&mut self, page: PageId) {
        let frame = self.frames.peek(page).expect("pinned page is cached");
        self.states[frame].pinned = true;
    }

    pub fn unpin(&mut self, page: PageId) {
        if let Some(frame) = self.frames.peek(page) {
            self.states[frame].pinned = false;
        }
    }

    /// Pages pinned now.
    pub fn pinned_pages(&self) -> usize {
        self.states.iter().filter(|s| s.pinned).count()
    }

    pub fn frame_bytes(&self, frame: FrameId) -> &[u8] {
        &self.bytes[self.range(frame)]
    }

    /// A reserved frame's bytes, to read a page into in place; the caller writes all of them.
    pub fn frame_bytes_mut(&mut self, frame: FrameId) -> &mut [u8] {
        self.states[frame].page_lsn = None;
        let range = self.range(frame);
        &mut self.bytes[range]
    }

    /// Copies `image` into a reserved frame.
    pub fn fill(&mut self, frame: FrameId, image: &[u8]) {
        self.states[frame].page_lsn = None;
        let range = self.range(frame);
        self.bytes[range].copy_from_slice(image);
    }

    pub fn mark_dirty(&mut self, page: PageId, lsn: Lsn) {
        let frame = self.frames.peek(page).expect("dirtied page is cached");
        let state = &mut self.states[frame];
        if !state.dirty {
            state.dirty = true;
            state.rec_lsn = lsn;
        }
    }

    pub fn mark_clean(&mut self, page: PageId) {
        if let Some(frame) = self.frames.peek(page) {
            self.states[frame].dirty = false;
            self.states[frame].rec_lsn = Lsn::default();
        }
    }

    pub fn is_dirty(&self, page: PageId) -> bool {
        self.frames
            .peek(page)
            .is_some_and(|frame| self.states[frame].dirty)
    }

    /// Dirty pages with their recLSN, in page order.
    pub fn dirty_pages(&self) -> Vec<(PageId, Lsn)> {
        let mut dirty: Vec<_> = self
            .frames
            .pages()
            .filter(|(_, f)| self.states[*f].dirty)
            .map(|(p, f)| (p, self.states[f].rec_lsn))
            .collect();
        dirty.sort_unstable();
        dirty
    }

    pub fn remove(&mut self, page: PageId) {
        if let Some(frame) = self.frames.remove(page) {
            self.states[frame] = FrameState::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_pool_leaves_its_memory_to_the_next_pool_of_its_size() {
        // A frame count no other test uses: the process's spare memory is shared by its tests.
        const FRAMES: usize = 37;
        let mut first = BufferPool::new(4096, FRAMES);
        let (frame, victim) = first.reserve(PageId(3)).unwrap();
        assert!(victim.is_none());
        first.fill(frame, &[7u8; 4096]);
        let address = first.bytes.as_ptr();
        drop(first);
        let mut second = BufferPool::new(4096, FRAMES);
        assert!(matches!(second.bytes, Frames::Mapped(_)));
        assert_eq!(
            second.bytes.as_ptr(),
            address,
            "the same memory, not a new mapping"
        );
        if cfg!(debug_assertions) {
            assert!(second
                .bytes
                .iter()
                .all(|&b| b == spare_memory::REUSED_POISON));
        }
        assert!(!second.contains(PageId(3)), "memory only, never the pages");
        let (frame, _) = second.reserve(PageId(4)).unwrap();
        second.fill(frame, &[9u8; 4096]);
        assert_eq!(second.get(PageId(4)).unwrap(), &[9u8; 4096][..]);
    }
}
