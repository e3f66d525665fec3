//! Which page sits in which frame of a fixed-size pool, and which frame to give up when a new
//! page needs one (the clock algorithm). Both the server's buffer pool and the client cache use
//! this one table; they differ only in where the frame bytes live and in what may be evicted.

use crate::ids::PageId;
use rustc_hash::FxHashMap;

/// A frame index.
pub type FrameId = usize;

/// Page table plus clock replacement over `capacity` frames.
#[derive(Debug)]
pub struct FrameTable {
    /// Frames used so far: they grow up to `capacity` as pages arrive, so a large pool costs
    /// memory (and time to open) only for the frames a store has filled.
    page_of_frame: Vec<Option<PageId>>,
    /// Looked up on every object access: a fast hash (page ids are not attacker-chosen).
    frame_of_page: FxHashMap<PageId, FrameId>,
    referenced: Vec<bool>,
    /// Frames given back by `remove`, used again before any new one.
    free: Vec<FrameId>,
    capacity: usize,
    hand: FrameId,
}

/// Page table entries made room for at once, however large the pool: the rest grow as used.
const FRAMES_RESERVED: usize = 1024;

/// The outcome of asking for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assigned {
    pub frame: FrameId,
    /// The page that had the frame before, which the caller must write back or drop.
    pub evicted: Option<PageId>,
}

impl FrameTable {
    pub fn new(capacity: usize) -> FrameTable {
        assert!(capacity > 0, "a pool needs at least one frame");
        let reserved = capacity.min(FRAMES_RESERVED);
        FrameTable {
            page_of_frame: Vec::with_capacity(reserved),
            frame_of_page: FxHashMap::with_capacity_and_hasher(reserved, Default::default()),
            referenced: Vec::with_capacity(reserved),
            free: Vec::new(),
            capacity,
            hand: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Frames handed out so far (in use or given back): every frame below this exists.
    pub fn frames_used(&self) -> usize {
        self.page_of_frame.len()
    }

    pub fn len(&self) -> usize {
        self.frame_of_page.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frame_of_page.is_empty()
    }

    /// The frame holding `page`, marking it recently used.
    #[inline]
    pub fn lookup(&mut self, page: PageId) -> Option<FrameId> {
        let frame = *self.frame_of_page.get(&page)?;
        self.referenced[frame] = true;
        Some(frame)
    }

    /// The frame holding `page`, without touching its reference bit.
    pub fn peek(&self, page: PageId) -> Option<FrameId> {
        self.frame_of_page.get(&page).copied()
    }

    /// The page in `frame`; `None` for a frame empty or not used yet.
    pub fn page(&self, frame: FrameId) -> Option<PageId> {
        self.page_of_frame.get(frame).copied().flatten()
    }

    /// Gives `page` (not yet present) a frame: a free one, or the clock's victim among the
    /// frames `evictable` accepts. `None` when every frame is in use and none may be evicted.
    pub fn assign(
        &mut self,
        page: PageId,
        mut evictable: impl FnMut(FrameId, PageId) -> bool,
    ) -> Option<Assigned> {
        debug_assert!(!self.frame_of_page.contains_key(&page));
        let unused = self.page_of_frame.len();
        let (frame, evicted) = match self.free.pop() {
            Some(frame) => (frame, None),
            None if unused < self.capacity => {
                self.page_of_frame.push(None);
                self.referenced.push(false);
                (unused, None)
            }
            None => {
                let frame = self.victim(&mut evictable)?;
                let old = self.page_of_frame[frame].take();
                if let Some(old) = old {
                    self.frame_of_page.remove(&old);
                }
                (frame, old)
            }
        };
        self.page_of_frame[frame] = Some(page);
        self.frame_of_page.insert(page, frame);
        self.referenced[frame] = true;
        Some(Assigned { frame, evicted })
    }

    /// Two sweeps of the clock at most: the first clears reference bits, the second must find
    /// an unreferenced evictable frame if any evictable frame exists.
    fn victim(&mut self, evictable: &mut impl FnMut(FrameId, PageId) -> bool) -> Option<FrameId> {
        // Only called once every frame is in use.
        let frames = self.page_of_frame.len();
        debug_assert_eq!(frames, self.capacity);
        for _ in 0..2 * frames + 1 {
            let frame = self.hand;
            self.hand = (self.hand + 1) % frames;
            let Some(page) = self.page_of_frame[frame] else {
                continue;
            };
            if !evictable(frame, page) {
                continue;
            }
            if self.referenced[frame] {
                self.referenced[frame] = false;
            } else {
                return Some(frame);
            }
        }
        None
    }

    /// Drops `page` from the table, freeing its frame.
    pub fn remove(&mut self, page: PageId) -> Option<FrameId> {
        let frame = self.frame_of_page.remove(&page)?;
        self.page_of_frame[frame] = None;
        self.referenced[frame] = false;
        self.free.push(frame);
        Some(frame)
    }

    /// Pages currently held, in no particular order.
    pub fn pages(&self) -> impl Iterator<Item = (PageId, FrameId)> + '_ {
        self.frame_of_page.iter().map(|(&p, &f)| (p, f))
    }
}

/// A value per frame of a pool whose frames come into use lowest first ([`FrameTable`]):
/// values exist only up to the highest frame written, so a cache of many frames costs memory
/// and time to open only for the frames it has used. A frame never written reads as
/// `T::default()`.
#[derive(Debug)]
pub struct FrameVec<T> {
    values: Vec<T>,
    /// What a frame past `values` reads as: never handed out mutably, so always the default.
    unused: T,
    capacity: usize,
}

impl<T: Default> FrameVec<T> {
    pub fn new(capacity: usize) -> FrameVec<T> {
        FrameVec {
            values: Vec::with_capacity(capacity.min(FRAMES_RESERVED)),
            unused: T::default(),
            capacity,
        }
    }

    /// Frames that have a value of their own (every frame below the highest written).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The values of the frames written so far, lowest frame first.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.values.iter()
    }
}

impl<T: Default> std::ops::Index<FrameId> for FrameVec<T> {
    type Output = T;

    #[inline]
    fn index(&self, frame: FrameId) -> &T {
        debug_assert!(frame < self.capacity, "frame {frame} of {}", self.capacity);
        self.values.get(frame).unwrap_or(&self.unused)
    }
}

impl<T: Default> std::ops::IndexMut<FrameId> for FrameVec<T> {
    #[inline]
    fn index_mut(&mut self, frame: FrameId) -> &mut T {
        if frame >= self.values.len() {
            assert!(frame < self.capacity, "frame {frame} of {}", self.capacity);
            self.values.resize_with(frame + 1, T::default);
        }
        &mut self.values[frame]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values come into being as frames are written; a frame not written reads as the
    /// default, and reading never grows the vector.
    #[test]
    fn frame_values_grow_with_the_highest_frame_written() {
        let mut values: FrameVec<u32> = FrameVec::new(1 << 20);
        assert_eq!(values[1000], 0);
        assert!(values.is_empty());
        values[2] = 7;
        assert_eq!(values.len(), 3);
        assert_eq!((values[0], values[2], values[3]), (0, 7, 0));
        values[1] += 1;
        assert_eq!(values.iter().copied().collect::<Vec<_>>(), [0, 1, 7]);
    }

    #[test]
    #[should_panic(expected = "frame 4 of 4")]
    fn a_frame_past_the_capacity_is_refused() {
        let mut values: FrameVec<u8> = FrameVec::new(4);
        values[4] = 1;
    }

    #[test]
    fn fills_then_evicts_unreferenced_first() {
        let mut table = FrameTable::new(3);
        for p in 0..3 {
            assert_eq!(table.assign(PageId(p), |_, _| true).unwrap().evicted, None);
        }
        // Every frame is referenced; touching page 0 again keeps it warm after one sweep.
        let a = table.assign(PageId(10), |_, _| true).unwrap();
        assert!(a.evicted.is_some());
        assert_eq!(table.len(), 3);
        assert!(table.peek(PageId(10)).is_some());
    }

    /// Frames come into use one at a time, lowest first, and a frame given back is used
    /// again before a new one: a large table costs only what it holds.
    #[test]
    fn frames_come_into_use_as_pages_arrive() {
        let mut table = FrameTable::new(1 << 20);
        assert_eq!(table.frames_used(), 0);
        assert_eq!(table.page(5), None);
        for p in 0..3 {
            let assigned = table.assign(PageId(p), |_, _| true).unwrap();
            assert_eq!(assigned.frame, p as usize);
        }
        assert_eq!(table.frames_used(), 3);
        assert_eq!(table.remove(PageId(1)), Some(1));
        assert_eq!(table.assign(PageId(7), |_, _| true).unwrap().frame, 1);
        assert_eq!(table.assign(PageId(8), |_, _| true).unwrap().frame, 3);
        assert_eq!(table.frames_used(), 4);
        assert_eq!(table.page(3), Some(PageId(8)));
        assert_eq!(table.page(4), None);
    }

    #[test]
    fn respects_evictable_and_reports_full() {
        let mut table = FrameTable::new(2);
        table.assign(PageId(1), |_, _| true).unwrap();
        table.assign(PageId(2), |_, _| true).unwrap();
        assert_eq!(table.assign(PageId(3), |_, _| false), None);
        let a = table.assign(PageId(3), |_, p| p == PageId(2)).unwrap();
        assert_eq!(a.evicted, Some(PageId(2)));
        assert_eq!(
            table.remove(PageId(1)),
            Some(0),
            "page 1 had the first free frame"
        );
        assert!(table.peek(PageId(1)).is_none());
        assert!(table.assign(PageId(4), |_, _| false).is_some());
    }
}
