//! The client/server boundary. Everything a client asks of a server goes through this trait:
//! pages in (fetch), pages and log records out (ship), locks, space, and the end of a
//! transaction. The page shipping follows QuickStore section 3.1: clients cache whole pages
//! across transactions and validate them by LSN when they lock them again.

use lodestore_core::{Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_storage::large::Extent;

/// Page lock modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockMode {
    Shared = 0,
    Exclusive = 1,
}

/// A change a client logged itself (the update-detection schemes): bytes
/// `offset..offset + after.len()` of `page` changed from `before` to `after`. Borrowed from
/// the [`PageUpdates`] that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageUpdate<'a> {
    pub page: PageId,
    pub offset: u32,
    pub before: &'a [u8],
    pub after: &'a [u8],
}

/// Log records shipped together, in the order the client generated them. The bytes of all of
/// them share one buffer, so a record costs no allocation of its own: a commit generates
/// thousands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageUpdates {
    /// Each record's before bytes, then its after bytes, record after record.
    bytes: Vec<u8>,
    records: Vec<UpdateAt>,
}

/// Where a record of a [`PageUpdates`] is: its page and offset, and its bytes in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct UpdateAt {
    page: PageId,
    offset: u32,
    len: u32,
    at: usize,
}

impl PageUpdates {
    pub fn new() -> PageUpdates {
        PageUpdates::default()
    }

    /// Appends a record: bytes `offset..offset + after.len()` of `page` went from `before`
    /// to `after`, which must be as long as each other.
    pub fn push(&mut self, page: PageId, offset: u32, before: &[u8], after: &[u8]) {
        assert_eq!(
            before.len(),
            after.len(),
            "a log record's before and after bytes differ in length"
        );
        let len = u32::try_from(after.len()).expect("a log record shorter than 4 GiB");
        let at = self.bytes.len();
        self.bytes.extend_from_slice(before);
        self.bytes.extend_from_slice(after);
        self.records.push(UpdateAt {
            page,
            offset,
            len,
            at,
        });
    }

    /// Rebuilds records from their pages, offsets and lengths in order, and the bytes they
    /// point into (as [`PageUpdates::parts`] gives them), checking that the bytes are exactly
    /// the records' before and after bytes.
    pub fn from_parts(
        parts: impl IntoIterator<Item = (PageId, u32, u32)>,
        bytes: Vec<u8>,
    ) -> std::result::Result<PageUpdates, String> {
        let mut records = Vec::new();
        let mut at = 0usize;
        for (page, offset, len) in parts {
            records.push(UpdateAt {
                page,
                offset,
                len,
                at,
            });
            at = at
                .checked_add(2 * len as usize)
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| {
                    format!(
                        "log record {} of page {page} needs bytes past the {} shipped",
                        records.len() - 1,
                        bytes.len()
                    )
                })?;
        }
        if at != bytes.len() {
            return Err(format!(
                "{} bytes shipped for log records of {at}",
                bytes.len()
            ));
        }
        Ok(PageUpdates { bytes, records })
    }

    /// Each record's page, offset and length, in order.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = (PageId, u32, u32)> + '_ {
        self.records.iter().map(|r| (r.page, r.offset, r.len))
    }

    /// The bytes of all records, as [`PageUpdates::from_parts`] takes them.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<PageUpdate<'_>> {
        self.records.get(index).map(|r| self.view(r))
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = PageUpdate<'_>> + '_ {
        self.records.iter().map(|r| self.view(r))
    }

    fn view(&self, record: &UpdateAt) -> PageUpdate<'_> {
        let len = record.len as usize;
        PageUpdate {
            page: record.page,
            offset: record.offset,
            before: &self.bytes[record.at..record.at + len],
            after: &self.bytes[record.at + len..record.at + 2 * len],
        }
    }
}

impl<'a> FromIterator<PageUpdate<'a>> for PageUpdates {
    fn from_iter<I: IntoIterator<Item = PageUpdate<'a>>>(updates: I) -> PageUpdates {
        let mut batch = PageUpdates::new();
        for update in updates {
            batch.push(update.page, update.offset, update.before, update.after);
        }
        batch
    }
}

/// A change a client logged as Hosking's checkpoint-style record: bytes
/// `offset..offset + after.len()` of object `oid` are now `after`. No before bytes: the server
/// reads them off its own copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectUpdate {
    pub oid: Oid,
    pub offset: u32,
    pub after: Vec<u8>,
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
    fn ship_object_updates(&self, txn: TxnId, records: &[ObjectUpdate]) -> Result<()>;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Records pushed come back as pushed, one by one and in order, and survive being
        /// taken apart into parts and bytes and put together again.
        #[test]
        fn a_batch_gives_back_its_records(
            records in proptest::collection::vec(
                (any::<u32>(), any::<u32>(), proptest::collection::vec(any::<(u8, u8)>(), 0..40)),
                0..20,
            ),
        ) {
            let mut batch = PageUpdates::new();
            for (page, offset, bytes) in &records {
                let before: Vec<u8> = bytes.iter().map(|b| b.0).collect();
                let after: Vec<u8> = bytes.iter().map(|b| b.1).collect();
                batch.push(PageId(*page), *offset, &before, &after);
            }
            prop_assert_eq!(batch.len(), records.len());
            for (index, ((page, offset, bytes), update)) in records.iter().zip(batch.iter()).enumerate() {
                prop_assert_eq!(update, batch.get(index).unwrap());
                prop_assert_eq!((update.page, update.offset), (PageId(*page), *offset));
                prop_assert!(update.before.iter().eq(bytes.iter().map(|b| &b.0)));
                prop_assert!(update.after.iter().eq(bytes.iter().map(|b| &b.1)));
            }
            let rebuilt = PageUpdates::from_parts(batch.parts(), batch.bytes().to_vec()).unwrap();
            prop_assert_eq!(&rebuilt, &batch);
            prop_assert_eq!(batch.iter().collect::<PageUpdates>(), batch);
        }
    }

    #[test]
    fn parts_that_do_not_match_their_bytes_are_refused() {
        let mut batch = PageUpdates::new();
        batch.push(PageId(3), 16, &[1, 2], &[3, 4]);
        batch.push(PageId(4), 40, &[5], &[6]);
        let parts: Vec<_> = batch.parts().collect();
        let short = batch.bytes()[..5].to_vec();
        let err = PageUpdates::from_parts(parts.clone(), short).unwrap_err();
        assert_eq!(err, "log record 1 of page 4 needs bytes past the 5 shipped");
        let mut long = batch.bytes().to_vec();
        long.push(0);
        let err = PageUpdates::from_parts(parts, long).unwrap_err();
        assert_eq!(err, "7 bytes shipped for log records of 6");
        // A length that would overflow is refused, not wrapped.
        let err = PageUpdates::from_parts([(PageId(1), 0, u32::MAX)], Vec::new()).unwrap_err();
        assert!(err.contains("needs bytes past"), "{err}");
    }
}
