//! The client/server boundary. Everything a client asks of a server goes through this trait:
//! pages in (fetch), pages and log records out (ship), locks, space, and the end of a
//! transaction. The page shipping follows QuickStore section 3.1: clients cache whole pages
//! across transactions and validate them by LSN when they lock them again.

pub use crate::batch::{ObjectUpdate, ObjectUpdates, PageUpdate, PageUpdates};
use lodestore_core::{Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_storage::large::Extent;

/// Page lock modes. Not ordered: which mode covers which is the lock manager's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    Shared = 0,
    Exclusive = 1,
}

impl LockMode {
    /// Does holding `self` grant `wanted` too? (Exclusive grants both.)
    pub fn covers(self, wanted: LockMode) -> bool {
        self == LockMode::Exclusive || wanted == LockMode::Shared
    }
}

/// A dirty page on its way to the server.
#[derive(Clone, Copy, Debug)]
pub struct ShippedPage<'a> {
    pub page: PageId,
    pub image: &'a [u8],
    /// The client already shipped log records for every change of this page since it last
    /// shipped it: the server checks that the image matches them and logs nothing more.
    /// Otherwise the server diffs the image against its own copy and logs the difference.
    /// A logged page may come with an empty image (redo-at-server): the records describe it
    /// and the server, which applied them to its copy, only answers the page's LSN.
    pub logged: bool,
}

/// What a client asks of a server.
pub trait PageServer: Send + Sync {
    /// Page size of the volume, in bytes.
    fn page_size(&self) -> usize;

    /// The volume this server owns.
    fn volume_id(&self) -> VolumeId;

    /// The OID of the named-roots directory object.
    fn root_directory(&self) -> Oid;

    /// Starts a transaction.
    fn begin(&self) -> Result<TxnId>;

    /// Locks `page` for `txn` (strict two-phase: held until commit or abort) and returns the
    /// LSN of its committed version, so a client can tell whether its cached copy is current.
    fn lock_page(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<Lsn>;

    /// Copies the version of `page` that `txn` sees (the committed one, or the one `txn` itself
    /// shipped earlier) into `buf`. The caller holds a lock on the page.
    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()>;

    /// Finds a slotted page with at least `bytes` free bytes according to the free-space hints,
    /// skipping `skip`, and locks it exclusively for `txn`. Returns the page and the LSN of its
    /// committed version, or `None` when no known page has room.
    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>>;

    /// Allocates `count` free pages for `txn`, as few runs of consecutive pages as it can, locked
    /// exclusively. The caller formats them; until `txn` commits they stay free on disk.
    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>>;

    /// Frees pages at commit of `txn` (the caller holds exclusive locks on them).
    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()>;

    /// Ships a batch of log records `txn` generated for pages it holds exclusively. Always
    /// before the pages they describe. The server logs them and applies them to its copy of
    /// each page; a record whose before bytes differ from the server's copy is refused.
    fn ship_log_records(&self, txn: TxnId, records: &PageUpdates) -> Result<()>;

    /// Ships object redo records `txn` generated, in order, for objects on pages it holds
    /// exclusively: the server finds each object on its copy of the page, takes the before
    /// bytes from there, and logs and applies the change as it does a `PageUpdate`.
    fn ship_object_updates(&self, txn: TxnId, records: &ObjectUpdates) -> Result<()>;

    /// Ships dirty pages of `txn` (on eviction from the client cache, and at commit). Returns
    /// the new LSN of each page, which the client stamps on its cached copy.
    fn ship_dirty_pages(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<Vec<Lsn>>;

    /// Commits `txn`: returns once its commit record is durable, with the record's LSN.
    fn commit(&self, txn: TxnId) -> Result<Lsn>;

    /// Ships the last dirty pages of `txn` and commits it, in one request. Returns the pages'
    /// new LSNs and the commit LSN.
    fn ship_and_commit(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<(Vec<Lsn>, Lsn)> {
        let lsns = self.ship_dirty_pages(txn, pages)?;
        Ok((lsns, self.commit(txn)?))
    }

    /// Aborts `txn`, discarding everything it shipped and releasing its locks.
    fn abort(&self, txn: TxnId) -> Result<()>;
}
