//! Consecutive new pages gathered for one write to the data file, when a transaction's new
//! pages go home instead of to the log (`Server::write_new_pages_home`): a shipment of new
//! pages is mostly a few long runs, and one write per run instead of one per page takes
//! thousands of system calls off a bulk load.

use lodestore_core::{PageId, Result};
use lodestore_storage::Volume;

/// Pages gathered before a write at most: 512 KiB of 8 KiB pages.
pub const HOME_RUN_PAGES_MAX: usize = 64;

/// A run of consecutive pages waiting to be written.
pub struct HomeRun {
    page_size: usize,
    first: PageId,
    buf: Vec<u8>,
}

impl HomeRun {
    pub fn new(page_size: usize) -> HomeRun {
        HomeRun::with_buffer(page_size, Vec::new())
    }

    /// An empty run in `buf`, the buffer of an earlier run ([`Self::into_buffer`]): its
    /// memory, already touched, is used again instead of new memory at every commit.
    pub fn with_buffer(page_size: usize, mut buf: Vec<u8>) -> HomeRun {
        buf.clear();
        // Room for the longest run at once: growing by doubling copies what was gathered.
        buf.reserve(HOME_RUN_PAGES_MAX * page_size);
        HomeRun {
            page_size,
            first: PageId(0),
            buf,
        }
    }

    /// The run's buffer, for the next run.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    fn len(&self) -> usize {
        self.buf.len() / self.page_size
    }

    /// Can `page` join the run without a write first: the run is empty, or `page` follows its
    /// last page and the run has room.
    pub fn continues_with(&self, page: PageId) -> bool {
        let len = self.len();
        len == 0 || (len < HOME_RUN_PAGES_MAX && self.first.0 as usize + len == page.0 as usize)
    }

    /// Appends `image` as page `page` and returns its copy in the run, to be stamped before the
    /// write. The caller has made room with [`Self::continues_with`] and [`Self::write`].
    pub fn push(&mut self, page: PageId, image: &[u8]) -> &mut [u8] {
        assert!(
            self.continues_with(page),
            "page {page} does not continue the run"
        );
        assert_eq!(image.len(), self.page_size);
        if self.buf.is_empty() {
            self.first = page;
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(image);
        &mut self.buf[at..]
    }

    /// Writes the run, if any, sealing each page, and empties it.
    pub fn write(&mut self, volume: &Volume) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        // The caller syncs the data file once the last run is written.
        volume.write_pages_before_sync(self.first, &mut self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_takes_consecutive_pages_up_to_its_limit() {
        let mut run = HomeRun::new(16);
        assert!(run.continues_with(PageId(9)));
        run.push(PageId(9), &[1; 16]);
        assert!(!run.continues_with(PageId(9)));
        assert!(!run.continues_with(PageId(11)));
        assert!(!run.continues_with(PageId(8)));
        for n in 10..9 + HOME_RUN_PAGES_MAX as u32 {
            assert!(run.continues_with(PageId(n)));
            run.push(PageId(n), &[2; 16]);
        }
        assert!(!run.continues_with(PageId(9 + HOME_RUN_PAGES_MAX as u32)));
        assert_eq!(run.len(), HOME_RUN_PAGES_MAX);
        assert_eq!(run.first, PageId(9));
    }

    #[test]
    fn a_run_in_an_earlier_runs_buffer_starts_empty_in_the_same_memory() {
        let mut run = HomeRun::new(16);
        run.push(PageId(4), &[3; 16]);
        let buf = run.into_buffer();
        assert!(
            buf.capacity() >= HOME_RUN_PAGES_MAX * 16,
            "room for a whole run"
        );
        let address = buf.as_ptr();
        let mut next = HomeRun::with_buffer(16, buf);
        assert_eq!(next.len(), 0);
        assert!(
            next.continues_with(PageId(100)),
            "empty: any page starts it"
        );
        next.push(PageId(100), &[5; 16]);
        assert_eq!(next.first, PageId(100));
        assert_eq!(next.buf, vec![5u8; 16]);
        assert_eq!(next.buf.as_ptr(), address, "no new allocation");
    }
}
