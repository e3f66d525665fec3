//! The versions hook: a component that sits beside any recovery method and keeps old versions
//! of pages, so that a page can be read as of a past point (Thor's snapshots build on it). The
//! engine calls it just before a page's home location is overwritten, with a way to read the
//! version about to be replaced (the pre-image), and asks it for a page as of a past LSN. The
//! engine does not know how or where versions are kept.

use lodestore_core::{Lsn, PageId, Result};
use std::sync::Arc;

/// Reads the version of a page now at its home location into the buffer; `false` when the
/// page has none yet (it is past the end of the data file).
pub type HomeReader<'a> = &'a mut dyn FnMut(&mut [u8]) -> Result<bool>;

/// A component that keeps old versions of pages.
pub trait PageVersions: Send + Sync {
    /// `page`'s home location is about to be overwritten with its version as of `lsn`.
    /// `home` reads the version there now, if the component wants it. An error stops the
    /// write: the server refuses work until reopened, as for a failed write.
    fn before_home_write(&self, page: PageId, lsn: Lsn, home: HomeReader<'_>) -> Result<()>;

    /// Copies `page` as it was at `at` into `buf`. `false`: the component keeps no version of
    /// the page older than its current one that covers `at`.
    fn page_as_of(&self, page: PageId, at: Lsn, buf: &mut [u8]) -> Result<bool>;
}

/// The versions component a server was given, if any.
pub type Versions = Option<Arc<dyn PageVersions>>;
