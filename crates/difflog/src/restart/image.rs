//! The memory image a restart rebuilds.

use lodestore_core::PageId;
use std::sync::{Mutex, OnceLock};

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
}

/// A store's pages in memory, each behind a latch of its own. A page that nothing has
/// touched reads as zeros and takes no memory, so an image can be made as large as the store
/// may grow before a restart knows which pages its logs name (parallel restart level 4 starts
/// XORing the backup into it at once).
pub struct MemoryImage {
    page_size: usize,
    pages: Vec<OnceLock<Mutex<Box<[u8]>>>>,
}

impl MemoryImage {
    /// `count` pages of zeros (parallel restart level 4 XORs the backup into them).
    pub fn zeroed(count: usize, page_size: usize) -> MemoryImage {
        MemoryImage {
            page_size,
            pages: (0..count).map(|_| OnceLock::new()).collect(),
        }
    }

    /// An image holding `pages` (all of one size).
    pub fn from_pages(pages: Vec<Vec<u8>>) -> MemoryImage {
        let page_size = pages.first().map_or(0, Vec::len);
        assert!(pages.iter().all(|p| p.len() == page_size));
        MemoryImage {
            page_size,
            pages: pages
                .into_iter()
                .map(|p| OnceLock::from(Mutex::new(p.into_boxed_slice())))
                .collect(),
        }
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// A copy of `page`.
    pub fn page(&self, page: usize) -> Vec<u8> {
        match self.pages[page].get() {
            Some(latch) => lock(latch).to_vec(),
            None => vec![0; self.page_size],
        }
    }

    /// `read` run on `page`'s bytes (zeros if nothing touched it), without a copy.
    pub fn with_page<R>(&self, page: usize, read: impl FnOnce(&[u8]) -> R) -> R {
        match self.pages[page].get() {
            Some(latch) => read(&lock(latch)),
            None => read(&vec![0; self.page_size]),
        }
    }

    /// Moves `page` out of the image (zeros if nothing touched it), leaving it untouched: a
    /// restart hands each page over to the pool and frees it, so the store is not held twice.
    pub fn take_page(&mut self, page: usize) -> Vec<u8> {
        match self.pages[page].take() {
            Some(latch) => latch
                .into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .into_vec(),
            None => vec![0; self.page_size],
        }
    }

    /// XORs a whole page into `page` (a backup page under level 4).
    pub fn xor_page(&self, page: usize, bytes: &[u8]) {
        crate::xor::xor_into(&mut self.latch(page), bytes);
    }

    pub fn into_pages(self) -> Vec<Vec<u8>> {
        let page_size = self.page_size;
        self.pages
            .into_iter()
            .map(|p| match p.into_inner() {
                Some(latch) => latch
                    .into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .into_vec(),
                None => vec![0; page_size],
            })
            .collect()
    }

    fn latch(&self, page: usize) -> std::sync::MutexGuard<'_, Box<[u8]>> {
        lock(
            self.pages[page]
                .get_or_init(|| Mutex::new(vec![0u8; self.page_size].into_boxed_slice())),
        )
    }

    fn range(&self, page: PageId, offset: usize, len: usize) -> Result<usize, String> {
        let index = page.0 as usize;
        if index >= self.pages.len() {
            return Err(format!(
                "a change names page {page}, past the image's {} pages",
                self.pages.len()
            ));
        }
        if offset + len > self.page_size {
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
        crate::xor::xor_into(&mut self.latch(index)[offset..offset + delta.len()], delta);
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
        let mut bytes = self.latch(index);
        for &(offset, delta) in run {
            crate::xor::xor_into(&mut bytes[offset..offset + delta.len()], delta);
        }
        Ok(())
    }

    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String> {
        let index = self.range(page, offset, bytes.len())?;
        self.latch(index)[offset..offset + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}

fn lock(latch: &Mutex<Box<[u8]>>) -> std::sync::MutexGuard<'_, Box<[u8]>> {
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
}
