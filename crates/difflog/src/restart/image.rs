//! The memory image a restart rebuilds.

use lodestore_core::PageId;
use std::sync::Mutex;

/// Pages a restart applies changes to. Shared by the threads of a parallel restart: each call
/// changes one page under that page's own latch.
pub trait Image: Sync {
    /// XORs `delta` into bytes `offset..offset + delta.len()` of `page`.
    fn xor(&self, page: PageId, offset: usize, delta: &[u8]) -> Result<(), String>;
    /// Writes `bytes` at `offset` of `page` (physical redo and undo).
    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String>;
}

/// A store's pages in memory, each behind a latch of its own.
pub struct MemoryImage {
    page_size: usize,
    pages: Vec<Mutex<Box<[u8]>>>,
}

impl MemoryImage {
    /// `count` pages of zeros (parallel restart level 4 XORs the backup into them).
    pub fn zeroed(count: usize, page_size: usize) -> MemoryImage {
        MemoryImage {
            page_size,
            pages: (0..count)
                .map(|_| Mutex::new(vec![0u8; page_size].into_boxed_slice()))
                .collect(),
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
                .map(|p| Mutex::new(p.into_boxed_slice()))
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
        self.latch(page).to_vec()
    }

    /// XORs a whole page into `page` (a backup page under level 4).
    pub fn xor_page(&self, page: usize, bytes: &[u8]) {
        crate::xor::xor_into(&mut self.latch(page), bytes);
    }

    pub fn into_pages(self) -> Vec<Vec<u8>> {
        self.pages
            .into_iter()
            .map(|p| p.into_inner().unwrap_or_else(|e| e.into_inner()).into_vec())
            .collect()
    }

    fn latch(&self, page: usize) -> std::sync::MutexGuard<'_, Box<[u8]>> {
        // A panicking replay thread fails the whole restart; the bytes are not reused.
        self.pages[page].lock().unwrap_or_else(|e| e.into_inner())
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

    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String> {
        let index = self.range(page, offset, bytes.len())?;
        self.latch(index)[offset..offset + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}
