//! The server's buffer pool: a bounded set of page images in memory, replaced by the clock.
//! Until the write-ahead log exists every image here equals the one on disk (commit forces
//! pages), so eviction simply drops a frame.

use lodestore_core::frames::FrameTable;
use lodestore_core::PageId;

pub struct BufferPool {
    page_size: usize,
    frames: FrameTable,
    bytes: Vec<u8>,
}

impl BufferPool {
    pub fn new(page_size: usize, frame_count: usize) -> BufferPool {
        assert!(frame_count > 0);
        BufferPool {
            page_size,
            frames: FrameTable::new(frame_count),
            bytes: vec![0u8; page_size * frame_count],
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

    /// The cached image of `page`, if present.
    pub fn get(&mut self, page: PageId) -> Option<&[u8]> {
        let frame = self.frames.lookup(page)?;
        Some(&self.bytes[frame * self.page_size..][..self.page_size])
    }

    /// Caches `image` as the current version of `page`. Returns true if another page was
    /// evicted to make room.
    pub fn put(&mut self, page: PageId, image: &[u8]) -> bool {
        assert_eq!(image.len(), self.page_size);
        let (frame, evicted) = match self.frames.lookup(page) {
            Some(frame) => (frame, false),
            None => {
                let assigned = self
                    .frames
                    .assign(page, |_, _| true)
                    .expect("every frame of a clean pool is evictable");
                (assigned.frame, assigned.evicted.is_some())
            }
        };
        self.bytes[frame * self.page_size..][..self.page_size].copy_from_slice(image);
        evicted
    }

    pub fn remove(&mut self, page: PageId) {
        self.frames.remove(page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_returns_latest_image() {
        let mut pool = BufferPool::new(4096, 4);
        for p in 0..10u32 {
            pool.put(PageId(p), &vec![p as u8; 4096]);
            assert!(pool.len() <= 4);
        }
        assert_eq!(pool.len(), 4);
        pool.put(PageId(9), &vec![99; 4096]);
        assert_eq!(pool.get(PageId(9)).unwrap()[0], 99);
        assert!(pool.get(PageId(0)).is_none());
    }
}
