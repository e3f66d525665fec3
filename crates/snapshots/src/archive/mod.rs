//! Where snapshot pages live once archived (Moh chapter 4), behind the interface of
//! `lodestore_protocol::archive`: [`local::LocalArchive`] here (beside the store, or in a folder
//! of one's choosing: [`file::FileArchive`]), archive nodes over the network in
//! `lodestore-net`, S3 in `lodestore-archive-s3`.

pub mod file;
pub mod local;

use lodestore_core::{PageId, Result};
pub use lodestore_protocol::archive::{Archive, PageCopy};

/// An archive that cannot be reached (a local archive file that is missing): every request
/// fails with an error naming it, so reads as of a snapshot fail clearly while current
/// transactions go on (their page copies wait in the snapshot log).
pub struct UnavailableArchive {
    pub path: std::path::PathBuf,
    pub reason: String,
    /// The location of the archive it stands for (see `crate::location`).
    pub location: String,
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

    fn location(&self) -> String {
        self.location.clone()
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
