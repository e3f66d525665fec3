//! Where snapshot pages live once archived (Moh chapter 4). The interface is the thesis's
//! (section 4.1): `put` a page copy labelled with a snapshot time, `get` the oldest copy at or
//! after a time (a copy made for one snapshot also serves every older one back to the
//! previous copy, since the page did not change in between), and `get_ts`, the newest time
//! held for a page. Backends are siblings behind it: [`local::LocalArchive`] here; network,
//! object-storage and peer-to-peer ones beside it.

pub mod local;

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

/// An archive that cannot be reached (a local archive file that is missing): every request
/// fails with an error naming it, so reads as of a snapshot fail clearly while current
/// transactions go on (their page copies wait in the snapshot log).
pub struct UnavailableArchive {
    pub path: std::path::PathBuf,
    pub reason: String,
}

impl UnavailableArchive {
    fn error(&self) -> lodestore_core::Error {
        lodestore_core::Error::CorruptFile {
            path: self.path.clone(),
            reason: self.reason.clone(),
        }
    }
}

impl Archive for UnavailableArchive {
    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn put(&self, _copies: &[PageCopy<'_>]) -> Result<()> {
        Err(self.error())
    }

    fn get(&self, _page: PageId, _time_us: u64, _buf: &mut [u8]) -> Result<Option<u64>> {
        Err(self.error())
    }

    fn get_ts(&self, _page: PageId) -> Result<Option<u64>> {
        Err(self.error())
    }

    fn remove(&self, _copies: &[(PageId, u64)]) -> Result<()> {
        Err(self.error())
    }

    fn bytes(&self) -> u64 {
        0
    }

    fn unavailable(&self) -> Option<String> {
        Some(self.error().to_string())
    }
}
