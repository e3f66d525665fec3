//! Pages the data file grew by without their images being written (`Volume::grow`): they read
//! as the image an extension writes (free, or a space map where the layout puts one) and are
//! written before any superblock records a page count that covers them. A bulk load then writes
//! each new page once, with its contents, instead of first formatting it free.
//!
//! In memory only: after a crash the pages past the recorded page count are whatever the file
//! holds (zeros where nothing was written), and recovery formats those that fail their checks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// One bit per page up to the highest unwritten one, and the lowest, so a read of any page
/// below it (nearly every read) is answered without the lock.
#[derive(Debug)]
pub struct UnwrittenPages {
    bits: Mutex<Vec<u64>>,
    /// The lowest unwritten page, `u32::MAX` when none is.
    low: AtomicU32,
}

impl Default for UnwrittenPages {
    fn default() -> UnwrittenPages {
        UnwrittenPages {
            bits: Mutex::new(Vec::new()),
            low: AtomicU32::new(u32::MAX),
        }
    }
}

impl UnwrittenPages {
    /// Pages `first..end` were added to the file without being written.
    pub fn grown(&self, first: u32, end: u32) {
        let mut bits = self.lock();
        let words = (end as usize).div_ceil(64);
        if bits.len() < words {
            bits.resize(words, 0);
        }
        for page in first..end {
            bits[page as usize / 64] |= 1 << (page % 64);
        }
        if first < end {
            self.low.fetch_min(first, Ordering::AcqRel);
        }
    }

    pub fn contains(&self, page: u32) -> bool {
        if page < self.low.load(Ordering::Acquire) {
            return false;
        }
        let bits = self.lock();
        Self::bit(&bits, page)
    }

    pub fn is_empty(&self) -> bool {
        self.low.load(Ordering::Acquire) == u32::MAX
    }

    /// Pages `first..end` now hold what was written to them.
    pub fn written(&self, first: u32, end: u32) {
        if end <= self.low.load(Ordering::Acquire) {
            return;
        }
        let mut bits = self.lock();
        for page in first..end {
            if let Some(word) = bits.get_mut(page as usize / 64) {
                *word &= !(1 << (page % 64));
            }
        }
        self.low.store(Self::lowest(&bits), Ordering::Release);
    }

    /// The unwritten pages as runs of consecutive pages, lowest first.
    pub fn runs(&self) -> Vec<(u32, u32)> {
        let bits = self.lock();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for (w, &word) in bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let page = (w * 64) as u32 + rest.trailing_zeros();
                rest &= rest - 1;
                match runs.last_mut() {
                    Some((_, end)) if *end == page => *end += 1,
                    _ => runs.push((page, page + 1)),
                }
            }
        }
        runs
    }

    fn bit(bits: &[u64], page: u32) -> bool {
        bits.get(page as usize / 64)
            .is_some_and(|word| word & (1 << (page % 64)) != 0)
    }

    fn lowest(bits: &[u64]) -> u32 {
        bits.iter()
            .enumerate()
            .find(|(_, &word)| word != 0)
            .map_or(u32::MAX, |(w, word)| {
                (w * 64) as u32 + word.trailing_zeros()
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.bits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_unwritten_from_their_growth_until_written() {
        let pages = UnwrittenPages::default();
        assert!(pages.is_empty() && !pages.contains(0));
        pages.grown(60, 130);
        assert!(!pages.contains(59) && pages.contains(60) && pages.contains(129));
        assert!(!pages.contains(130) && !pages.contains(100_000));
        pages.written(60, 64);
        assert!(!pages.contains(63) && pages.contains(64));
        pages.written(100, 102);
        assert_eq!(pages.runs(), vec![(64, 100), (102, 130)]);
        pages.written(0, 200);
        assert!(pages.is_empty() && pages.runs().is_empty() && !pages.contains(64));
    }

    #[test]
    fn the_lowest_unwritten_page_follows_the_writes() {
        let pages = UnwrittenPages::default();
        pages.grown(10, 20);
        pages.grown(5, 6);
        assert!(pages.contains(5));
        pages.written(5, 6);
        assert!(!pages.contains(5) && pages.contains(10));
        pages.written(10, 19);
        assert!(pages.contains(19) && !pages.contains(18));
        assert_eq!(pages.runs(), vec![(19, 20)]);
    }
}
