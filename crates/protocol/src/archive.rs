//! The snapshot archive's interface (Moh chapter 4, section 4.1): `put` a page copy labelled
//! with a snapshot time, `get` the oldest copy at or after a time (a copy made for one snapshot
//! also serves every older one back to the previous copy, since the page did not change in
//! between), and `get_ts`, the newest time held for a page. It sits here, below the snapshot
//! component and the network crate, so that an archive can be served over the network and
//! reached through it: the backends live with what they need (the local archive in
//! `lodestore-snapshots`, archive nodes in `lodestore-net`).

use lodestore_core::{PageId, Result};

/// A page copy to archive.
#[derive(Clone, Copy, Debug)]
pub struct PageCopy<'a> {
    pub page: PageId,
    /// The snapshot the copy was made for.
    pub time_us: u64,
    pub image: &'a [u8],
}

/// A snapshot archive.
pub trait Archive: Send + Sync {
    /// A name for errors and reports (the path of a local archive, the address of a remote).
    fn name(&self) -> String;

    /// Where the copies are, as the store records it to notice being opened with another
    /// archive later: stable across moves of the store (the local archive's is `local`, its
    /// path moves with the store); a remote archive's names its nodes. A wrapper (adding
    /// latency, say) returns its inner archive's.
    fn location(&self) -> String {
        self.name()
    }

    /// Stores the copies; returns once all are durable.
    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()>;

    /// Copies into `buf` the oldest copy of `page` whose time is at or after `time_us`, and
    /// returns that copy's time; `None` when there is none (the current page serves).
    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>>;

    /// The newest time held for `page`, if any.
    fn get_ts(&self, page: PageId) -> Result<Option<u64>>;

    /// The newest time held for every page, when the backend can list them cheaply (a local
    /// index can; a remote store would answer `get_ts` page by page instead).
    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        None
    }

    /// Every copy held (page, time), when the backend can list them cheaply; `None` means it
    /// cannot, and retention then reclaims only what the snapshot log still holds.
    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        None
    }

    /// Forgets copies no snapshot reads any more, and reclaims their space when it can. A
    /// crash may bring some back; that costs space, never a wrong page (a copy is the page as
    /// of its time, whoever reads it).
    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()>;

    /// Bytes the archive holds.
    fn bytes(&self) -> u64;

    /// Why the archive cannot serve at all, if it cannot (missing or damaged beyond use).
    fn unavailable(&self) -> Option<String> {
        None
    }
}

/// The contract every backend meets, as a check its tests run against an empty archive of
/// pages of `page_size` bytes (at least 8): copies read back at, before, between and after
/// their times, a page never archived, `get_ts`, the listing of newest times where the
/// backend gives one, and removal. Returns the first broken rule.
pub mod conformance {
    use super::{Archive, PageCopy};
    use lodestore_core::PageId;

    /// An image of `page_size` bytes that tells the copy (`page`, `time_us`) apart.
    pub fn image(page: PageId, time_us: u64, page_size: usize) -> Vec<u8> {
        let mut image = vec![(time_us % 251) as u8; page_size];
        image[..4].copy_from_slice(&page.0.to_le_bytes());
        image[4..8].copy_from_slice(&(time_us as u32).to_le_bytes());
        image
    }

    pub fn check_contract(archive: &dyn Archive, page_size: usize) -> Result<(), String> {
        let (p, q, never) = (PageId(9), PageId(3), PageId(8));
        let copies = [(p, 10), (p, 20), (q, 15)];
        let images: Vec<Vec<u8>> = copies
            .iter()
            .map(|&(page, time)| image(page, time, page_size))
            .collect();
        let put: Vec<PageCopy<'_>> = copies
            .iter()
            .zip(&images)
            .map(|(&(page, time_us), image)| PageCopy {
                page,
                time_us,
                image,
            })
            .collect();
        archive.put(&put).map_err(|e| format!("put: {e}"))?;
        let mut buf = vec![0u8; page_size];
        let mut expect = |page: PageId, at: u64, want: Option<u64>| -> Result<(), String> {
            let got = archive
                .get(page, at, &mut buf)
                .map_err(|e| format!("get page {page} at {at}: {e}"))?;
            if got != want {
                return Err(format!(
                    "get page {page} at {at}: copy of time {got:?}, want {want:?}"
                ));
            }
            if let Some(time) = want {
                if buf != image(page, time, page_size) {
                    return Err(format!("get page {page} at {at}: wrong bytes"));
                }
            }
            Ok(())
        };
        expect(p, 5, Some(10))?; // before the first copy
        expect(p, 10, Some(10))?; // at a copy's time
        expect(p, 11, Some(20))?; // between two
        expect(p, 20, Some(20))?;
        expect(p, 21, None)?; // after the last: the current page serves
        expect(q, 0, Some(15))?;
        expect(never, 0, None)?; // never archived
        let ts = |page: PageId| {
            archive
                .get_ts(page)
                .map_err(|e| format!("get_ts {page}: {e}"))
        };
        if ts(p)? != Some(20) || ts(q)? != Some(15) || ts(never)?.is_some() {
            return Err("get_ts: wrong newest times".into());
        }
        if archive.bytes() == 0 {
            return Err("bytes: 0 while holding three copies".into());
        }
        // A backend that lists its newest times lists exactly the pages it holds.
        if let Some(mut listed) = archive.newest_times() {
            listed.sort_unstable();
            if listed != [(q, 15), (p, 20)] {
                return Err(format!("newest_times: {listed:?}"));
            }
        }
        archive
            .remove(&[(p, 10)])
            .map_err(|e| format!("remove: {e}"))?;
        expect(p, 5, Some(20))?; // the next copy serves
        expect(q, 0, Some(15))?;
        if ts(p)? != Some(20) {
            return Err("get_ts after a removal: wrong newest time".into());
        }
        Ok(())
    }
}
