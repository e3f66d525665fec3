//! The memory image a restart rebuilds.

use lodestore_core::PageId;
use memmap2::{Advice, MmapMut, UncheckedAdvice};
use std::sync::Mutex;

/// Pages a restart applies changes to. Shared by the threads of a parallel restart: each call
/// changes one page under that page's own latch.
pub trait Image: Sync {
    /// XORs `delta` into bytes `offset..offset + delta.len()` of `page`.
    fn xor(&self, page: PageId, offset: usize, delta: &[u8]) -> Result<(), String>;
    /// XORs each `(offset, delta)` of `run` into `page`, as [`Image::xor`] one after the
    /// other; an image with latches takes the page's latch once for the whole run.
    fn xor_run(&self, page: PageId, run: &[(usize, &[u8])]) -> Result<(), String> {
        for &(offset, delta) in run {
            self.xor(page, offset, delta)?;
        }
        Ok(())
    }
    /// Writes `bytes` at `offset` of `page` (physical redo and undo).
    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String>;
    /// Asks for bytes `offset..offset + len` of `page` to be brought into the cache, as a
    /// hint ahead of a change to them; a range outside the image is ignored.
    fn prefetch(&self, _page: PageId, _offset: usize, _len: usize) {}
}

/// A store's pages in memory, each behind a latch of its own. A page that nothing has
/// touched reads as zeros and takes no memory, so an image can be made as large as the store
/// may grow before a restart knows which pages its logs name (parallel restart level 4 starts
/// XORing the backup into it at once).
///
/// The pages lie one after another in one anonymous mapping, in huge pages where the system
/// allows them: a replay changes pages at random, and with a page of memory per store page a
/// miss in the address translation cache came with nearly every change (and a fault with the
/// first change of each page).
pub struct MemoryImage {
    page_size: usize,
    count: usize,
    /// Held for its memory; its bytes are reached through `base` only.
    _arena: MmapMut,
    /// The start of the mapping, taken once when it was made.
    base: *mut u8,
    latches: Vec<Mutex<()>>,
}

// SAFETY: the bytes behind `base` belong to the mapping the image owns. Page p's bytes are
// only reached with `latches[p]` held (`with_latch`) or through `&mut self`, so no two threads
// ever touch the same bytes at once, and the mapping lives as long as the image.
unsafe impl Send for MemoryImage {}
// SAFETY: as for `Send`: shared access goes through the latches.
unsafe impl Sync for MemoryImage {}

impl MemoryImage {
    /// `count` pages of zeros (parallel restart level 4 XORs the backup into them); fails
    /// only when the system refuses the address space.
    pub fn try_zeroed(count: usize, page_size: usize) -> std::io::Result<MemoryImage> {
        let bytes = count
            .checked_mul(page_size)
            .ok_or_else(|| std::io::Error::other("image size overflows"))?;
        // A mapping cannot be empty.
        let mut arena = MmapMut::map_anon(bytes.max(1))?;
        if let Err(error) = arena.advise(Advice::HugePage) {
            tracing::debug!(%error, "huge pages refused for a restart image");
        }
        let base = arena.as_mut_ptr();
        Ok(MemoryImage {
            page_size,
            count,
            _arena: arena,
            base,
            latches: (0..count).map(|_| Mutex::new(())).collect(),
        })
    }

    /// [`MemoryImage::try_zeroed`] for images that must exist (tests, small stores): running
    /// out of address space ends the process, as running out of memory does.
    pub fn zeroed(count: usize, page_size: usize) -> MemoryImage {
        MemoryImage::try_zeroed(count, page_size).unwrap_or_else(|error| {
            panic!("no address space for an image of {count} pages of {page_size} bytes: {error}")
        })
    }

    /// An image holding `pages` (all of one size).
    pub fn from_pages(pages: Vec<Vec<u8>>) -> MemoryImage {
        let page_size = pages.first().map_or(0, Vec::len);
        assert!(pages.iter().all(|p| p.len() == page_size));
        let mut image = MemoryImage::zeroed(pages.len(), page_size);
        for (p, bytes) in pages.iter().enumerate() {
            image.page_mut(p).copy_from_slice(bytes);
        }
        image
    }

    pub fn page_count(&self) -> usize {
        self.count
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// A copy of `page`.
    pub fn page(&self, page: usize) -> Vec<u8> {
        self.with_latch(page, |bytes| bytes.to_vec())
    }

    /// `read` run on `page`'s bytes (zeros if nothing touched it), without a copy.
    pub fn with_page<R>(&self, page: usize, read: impl FnOnce(&[u8]) -> R) -> R {
        self.with_latch(page, |bytes| read(bytes))
    }

    /// `page`'s bytes, to change in place: with the image held alone, no latch is needed.
    pub fn page_mut(&mut self, page: usize) -> &mut [u8] {
        assert!(
            page < self.count,
            "page {page} of an image of {}",
            self.count
        );
        // SAFETY: `page` lies inside the mapping (asserted above), and `&mut self` excludes
        // every other access to the image while the slice lives.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(page * self.page_size), self.page_size)
        }
    }

    /// Gives the memory of `pages` back to the system; they read as zeros afterwards. A
    /// restart hands the pages over to the pool in order and releases them as it goes, so the
    /// store is not held twice.
    pub fn release(&mut self, pages: std::ops::Range<usize>) {
        self.release_in(pages, lodestore_storage::os_page_bytes());
    }

    /// [`MemoryImage::release`] on a system whose memory pages are `system_page` bytes.
    fn release_in(&mut self, pages: std::ops::Range<usize>, system_page: usize) {
        let end = pages.end.min(self.count);
        if pages.start >= end {
            return;
        }
        // Whole pages of the system only: those partly outside the range keep their bytes
        // (the system drops whole pages of its own, rounding a partial one up).
        debug_assert!(system_page.is_power_of_two());
        let from = (pages.start * self.page_size).next_multiple_of(system_page);
        let to = end * self.page_size / system_page * system_page;
        if from < to {
            // SAFETY: `&mut self` means no slice into the image is alive, the range lies
            // inside the private anonymous mapping, and there dropping pages only makes them
            // read as zeros again, which is what this method promises.
            let released = unsafe {
                self._arena
                    .unchecked_advise_range(UncheckedAdvice::DontNeed, from, to - from)
            };
            if let Err(error) = released {
                tracing::debug!(%error, "restart image pages not released");
            }
        }
    }

    /// XORs a whole page into `page` (a backup page under level 4).
    pub fn xor_page(&self, page: usize, bytes: &[u8]) {
        self.with_latch(page, |target| crate::xor::xor_into(target, bytes));
    }

    pub fn into_pages(mut self) -> Vec<Vec<u8>> {
        (0..self.count).map(|p| self.page_mut(p).to_vec()).collect()
    }

    /// Runs `change` on `page`'s bytes with the page's latch held.
    fn with_latch<R>(&self, page: usize, change: impl FnOnce(&mut [u8]) -> R) -> R {
        let _latched = lock(&self.latches[page]);
        // SAFETY: `latches[page]` exists, so the page lies inside the mapping; holding it
        // excludes every other access to these bytes (see the `Send` and `Sync` impls).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(self.base.add(page * self.page_size), self.page_size)
        };
        change(bytes)
    }

    fn range(&self, page: PageId, offset: usize, len: usize) -> Result<usize, String> {
        let index = page.0 as usize;
        if index >= self.count {
            return Err(format!(
                "a change names page {page}, past the image's {} pages",
                self.count
            ));
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.page_size)
        {
            return Err(format!(
                "a change of {len} bytes at offset {offset} runs past page {page}'s {} bytes",
                self.page_size
            ));
        }
        Ok(index)
    }
}

impl Image for MemoryImage {
    fn xor(&self, page: PageId, offset: usize, delta: &[u8]) -> Result<(), String> {
        let index = self.range(page, offset, delta.len())?;
        self.with_latch(index, |bytes| {
            crate::xor::xor_into(&mut bytes[offset..offset + delta.len()], delta)
        });
        Ok(())
    }

    fn xor_run(&self, page: PageId, run: &[(usize, &[u8])]) -> Result<(), String> {
        // Every range checked before the latch is taken: a bad one changes nothing.
        let mut index = None;
        for &(offset, delta) in run {
            index = Some(self.range(page, offset, delta.len())?);
        }
        let Some(index) = index else {
            return Ok(());
        };
        self.with_latch(index, |bytes| {
            for &(offset, delta) in run {
                crate::xor::xor_into(&mut bytes[offset..offset + delta.len()], delta);
            }
        });
        Ok(())
    }

    fn prefetch(&self, page: PageId, offset: usize, len: usize) {
        let Ok(index) = self.range(page, offset, len) else {
            return;
        };
        let start = index * self.page_size + offset;
        // A line per 64 bytes, the first PREFETCH_LINES_MAX of a long range: the hardware
        // follows on from there.
        let lines = len.div_ceil(64).min(PREFETCH_LINES_MAX);
        for line in 0..lines {
            prefetch_line(self.base.wrapping_add(start + line * 64));
        }
    }

    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String> {
        let index = self.range(page, offset, bytes.len())?;
        self.with_latch(index, |target| {
            target[offset..offset + bytes.len()].copy_from_slice(bytes)
        });
        Ok(())
    }
}

/// Cache lines of one range a prefetch asks for at most.
const PREFETCH_LINES_MAX: usize = 8;

/// Asks for the cache line holding `at`; a hint, which never faults.
#[inline]
fn prefetch_line(at: *const u8) {
    // SAFETY: SSE, which the instruction needs, is part of every x86-64 processor; a
    // prefetch reads nothing into the program and never faults, whatever the address.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

fn lock(latch: &Mutex<()>) -> std::sync::MutexGuard<'_, ()> {
    // A panicking replay thread fails the whole restart; the bytes are not reused.
    latch.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_on_one_page_changes_what_its_ranges_would_one_by_one() {
        let one_by_one = MemoryImage::zeroed(2, 64);
        let run = MemoryImage::zeroed(2, 64);
        let ranges: [(usize, &[u8]); 3] = [(0, &[1, 2, 3]), (10, &[0xff; 20]), (1, &[7, 7])];
        for (offset, delta) in ranges {
            one_by_one.xor(PageId(1), offset, delta).unwrap();
        }
        run.xor_run(PageId(1), &ranges).unwrap();
        assert_eq!(run.into_pages(), one_by_one.into_pages());
    }

    #[test]
    fn threads_changing_the_same_pages_lose_no_change() {
        let image = MemoryImage::zeroed(3, 4096);
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                let image = &image;
                scope.spawn(move || {
                    for i in 0..2000usize {
                        let page = PageId((i % 3) as u32);
                        let offset = (i * 7) % 4000;
                        image.xor(page, offset, &[1 << (t % 8); 8]).unwrap();
                    }
                });
            }
        });
        // The same changes one after another.
        let alone = MemoryImage::zeroed(3, 4096);
        for t in 0..4u8 {
            for i in 0..2000usize {
                alone
                    .xor(PageId((i % 3) as u32), (i * 7) % 4000, &[1 << (t % 8); 8])
                    .unwrap();
            }
        }
        assert_eq!(image.into_pages(), alone.into_pages());
    }

    #[test]
    fn released_pages_read_as_zeros_and_the_others_keep_their_bytes() {
        // Pages of the system's size, so that each is released whole wherever this runs.
        let size = lodestore_storage::os_page_bytes();
        let pages: Vec<Vec<u8>> = (1..=4u8).map(|b| vec![b; size]).collect();
        let mut image = MemoryImage::from_pages(pages);
        image.page_mut(3)[17] = 99;
        image.release(1..3);
        image.release(2..2);
        image.release(7..9);
        assert_eq!(image.page(0), vec![1; size]);
        assert_eq!(image.page(1), vec![0; size]);
        assert_eq!(image.page(2), vec![0; size]);
        let mut last = vec![4; size];
        last[17] = 99;
        assert_eq!(image.page(3), last);
        assert!(image.with_page(0, |bytes| bytes.iter().all(|&b| b == 1)));
    }

    /// Store pages smaller than the system's (8 KiB pages on a system of 16 or 64 KiB pages):
    /// only the system pages wholly inside the range go; the store pages sharing one with a
    /// page outside it keep their bytes, on either side.
    #[test]
    fn a_release_keeps_store_pages_that_share_a_system_page_with_others() {
        for system_page in [16 << 10, 64 << 10] {
            // Multiples of this system's page, so the advice is valid here too.
            if system_page % lodestore_storage::os_page_bytes() != 0 {
                continue;
            }
            let pages: Vec<Vec<u8>> = (1..=16u8).map(|b| vec![b; 8 << 10]).collect();
            let mut image = MemoryImage::from_pages(pages);
            image.release_in(1..6, system_page);
            for p in 0..16usize {
                let released = system_page == 16 << 10 && (2..6).contains(&p);
                let expected = if released { 0 } else { p as u8 + 1 };
                assert!(
                    image.with_page(p, |bytes| bytes.iter().all(|&b| b == expected)),
                    "system pages of {system_page} bytes: store page {p} should hold {expected}"
                );
            }
            image.release_in(0..16, system_page);
            assert!((0..16).all(|p| image.with_page(p, |b| b.iter().all(|&x| x == 0))));
        }
    }

    #[test]
    fn a_run_with_a_bad_range_changes_nothing() {
        let image = MemoryImage::zeroed(2, 64);
        let past_the_page: [(usize, &[u8]); 2] = [(0, &[1, 2, 3]), (60, &[9; 8])];
        let err = image.xor_run(PageId(0), &past_the_page).unwrap_err();
        assert!(err.contains("runs past page"), "{err}");
        let past_the_image: [(usize, &[u8]); 1] = [(0, &[1])];
        let err = image.xor_run(PageId(2), &past_the_image).unwrap_err();
        assert!(err.contains("past the image"), "{err}");
        image.xor_run(PageId(1), &[]).unwrap();
        assert_eq!(image.into_pages(), vec![vec![0u8; 64]; 2]);
    }

    #[test]
    fn a_prefetch_changes_no_byte_wherever_it_points() {
        let image = MemoryImage::from_pages(vec![vec![7u8; 4096]; 2]);
        image.prefetch(PageId(0), 0, 4096);
        image.prefetch(PageId(1), 4000, 96);
        image.prefetch(PageId(1), 4000, 200);
        image.prefetch(PageId(2), 0, 64);
        image.prefetch(PageId(u32::MAX), usize::MAX, usize::MAX);
        image.prefetch(PageId(0), usize::MAX, 2);
        assert_eq!(image.into_pages(), vec![vec![7u8; 4096]; 2]);
    }
}
