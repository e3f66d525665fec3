//! Pages that still hold the image the file's growth gave them (`Volume::format_new_page`:
//! written by `Volume::extend`, or read as such until written after `Volume::grow`): added
//! when the file grows, each dropped the first time it enters the buffer pool (every change to
//! a page passes through the pool). The server installs such a page's image without a read,
//! and a reservation or an allocation knows it free without holding it in the pool, so a bulk
//! load that reserves or allocates thousands of pages neither reads them nor fills the pool
//! with them ahead of use. In memory only: after a restart every page is read.

use lodestore_core::PageId;
use std::ops::Range;

/// One bit per page of the volume up to the last extension.
#[derive(Debug, Default)]
pub struct FreshPages {
    bits: Vec<u64>,
}

impl FreshPages {
    /// `pages` were just written by an extension.
    pub fn extended(&mut self, pages: Range<u32>) {
        let words = (pages.end as usize).div_ceil(64);
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
        for page in pages {
            self.bits[page as usize / 64] |= 1 << (page % 64);
        }
    }

    pub fn contains(&self, page: PageId) -> bool {
        self.bits
            .get(page.0 as usize / 64)
            .is_some_and(|word| word & (1 << (page.0 % 64)) != 0)
    }

    /// `page` is about to differ from what the extension wrote, or may.
    pub fn remove(&mut self, page: PageId) {
        if let Some(word) = self.bits.get_mut(page.0 as usize / 64) {
            *word &= !(1 << (page.0 % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_fresh_from_their_extension_until_removed() {
        let mut fresh = FreshPages::default();
        assert!(!fresh.contains(PageId(5)));
        fresh.extended(60..130);
        assert!(!fresh.contains(PageId(59)));
        assert!(fresh.contains(PageId(60)) && fresh.contains(PageId(64)));
        assert!(fresh.contains(PageId(129)));
        assert!(!fresh.contains(PageId(130)));
        assert!(!fresh.contains(PageId(100_000)));
        fresh.remove(PageId(64));
        fresh.remove(PageId(100_000));
        assert!(!fresh.contains(PageId(64)));
        assert!(fresh.contains(PageId(63)) && fresh.contains(PageId(65)));
        // A later extension leaves the earlier pages as they were.
        fresh.extended(130..200);
        assert!(fresh.contains(PageId(65)) && fresh.contains(PageId(199)));
        assert!(!fresh.contains(PageId(64)));
    }
}
