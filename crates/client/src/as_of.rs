//! Reading the store as of a snapshot (Moh chapter 5): a read-only transaction that takes no
//! locks and fetches each page's version as of the snapshot. Thor keeps the client's page map
//! for the current database as it was and adds a second level, snapshot then page, for
//! snapshot pages, so the common path costs nothing and a snapshot page is never mistaken for
//! a current one. Here the current pages live in the session's client cache, untouched, and
//! snapshot pages in [`SnapshotPages`]: a map from snapshot to that snapshot's pages, which
//! never change and so stay valid across transactions on the same snapshot.

use crate::session::ObjectInfo;
use lodestore_core::{Error, Oid, PageId, Result, TxnId, TypeId, VolumeId};
use lodestore_protocol::{PageServer, TxnKind};
use lodestore_storage::large::{self, Descriptor};
use lodestore_storage::page::{self, PageKind, PAGE_HEADER_BYTES};
use lodestore_storage::{directory, slotted};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One snapshot's pages: page to image.
type Pages = FxHashMap<PageId, Box<[u8]>>;

/// Pages of snapshots a session has read: snapshot id, then page. Bounded by a number of
/// pages; past it, other snapshots' pages go first, then this one's.
#[derive(Default)]
pub struct SnapshotPages {
    /// The snapshots not being read now (a reader holds its own snapshot's pages while it
    /// runs, so its lookups are one hash probe).
    by_snapshot: BTreeMap<u64, Pages>,
    /// Pages held in `by_snapshot`.
    parked: usize,
    pages_max: usize,
}

impl SnapshotPages {
    pub fn new(pages_max: usize) -> SnapshotPages {
        SnapshotPages {
            by_snapshot: BTreeMap::new(),
            parked: 0,
            pages_max: pages_max.max(1),
        }
    }

    /// Pages held, over all snapshots not being read.
    pub fn len(&self) -> usize {
        self.parked
    }

    pub fn is_empty(&self) -> bool {
        self.parked == 0
    }

    /// Takes `snapshot`'s pages out for a reader.
    fn take(&mut self, snapshot: u64) -> Pages {
        let pages = self.by_snapshot.remove(&snapshot).unwrap_or_default();
        self.parked -= pages.len();
        pages
    }

    /// Puts a reader's pages back.
    fn give_back(&mut self, snapshot: u64, pages: Pages) {
        self.parked += pages.len();
        self.by_snapshot.insert(snapshot, pages);
    }

    /// Makes room for one more page of a reader holding `held` pages: other snapshots' pages
    /// go first; `false` when the reader must drop its own.
    fn make_room(&mut self, held: usize) -> bool {
        while self.parked + held >= self.pages_max {
            let Some((_, pages)) = self.by_snapshot.pop_first() else {
                return false;
            };
            self.parked -= pages.len();
        }
        true
    }
}

/// A read-only transaction of the store as of one snapshot.
pub struct AsOfReader<'s> {
    server: Arc<dyn PageServer>,
    txn: Option<TxnId>,
    snapshot: u64,
    volume: VolumeId,
    page_size: usize,
    /// This snapshot's pages, taken from `parked` while the transaction runs.
    pages: Pages,
    parked: &'s mut SnapshotPages,
    /// Pages fetched from the server by this transaction.
    fetched: u64,
}

impl<'s> AsOfReader<'s> {
    /// Begins a transaction as of `snapshot` (its id) at the server.
    pub fn begin_transaction(server: &dyn PageServer, snapshot: u64) -> Result<TxnId> {
        server.begin_transaction(TxnKind::ReadOnlyAsOf { snapshot })
    }

    /// The reader of transaction `txn`, begun as of `snapshot` (see [`Self::begin_transaction`]).
    pub fn new(
        server: Arc<dyn PageServer>,
        txn: TxnId,
        snapshot: u64,
        parked: &'s mut SnapshotPages,
    ) -> AsOfReader<'s> {
        AsOfReader {
            volume: server.volume_id(),
            page_size: server.page_size(),
            server,
            txn: Some(txn),
            snapshot,
            pages: parked.take(snapshot),
            parked,
            fetched: 0,
        }
    }

    /// The snapshot read.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// Pages this transaction fetched from the server (not found among the session's
    /// snapshot pages).
    pub fn pages_fetched(&self) -> u64 {
        self.fetched
    }

    fn txn(&self) -> Result<TxnId> {
        self.txn.ok_or_else(|| Error::TransactionInactive {
            reason: "the transaction as of a snapshot has ended".into(),
        })
    }

    /// `page` as of the snapshot.
    fn page(&mut self, page: PageId) -> Result<&[u8]> {
        if !self.pages.contains_key(&page) {
            self.fetch(page)?;
        }
        Ok(&self.pages[&page])
    }

    #[cold]
    fn fetch(&mut self, page: PageId) -> Result<()> {
        let txn = self.txn()?;
        let mut buf = vec![0u8; self.page_size].into_boxed_slice();
        self.server.fetch_page(txn, page, &mut buf)?;
        // The server checked the page (its checksum from disk or archive, its structure);
        // a remote server's pages are checked again on arrival. Here: that it is the one
        // asked for.
        if page::number(&buf) != page {
            return Err(corrupt(
                page,
                self.snapshot,
                format!("the server sent page {} instead", page::number(&buf)),
            ));
        }
        self.fetched += 1;
        if !self.parked.make_room(self.pages.len()) {
            self.pages.clear();
        }
        self.pages.insert(page, buf);
        Ok(())
    }

    /// The page and record of `oid`.
    fn record(&mut self, oid: Oid) -> Result<(PageId, slotted::Record)> {
        if oid.is_null() || oid.volume() != self.volume {
            return Err(Error::ObjectNotFound { oid });
        }
        let snapshot = self.snapshot;
        let bytes = match self.page(oid.page()) {
            Err(Error::NoSuchPage { .. }) => return Err(Error::ObjectNotFound { oid }),
            other => other?,
        };
        if page::kind(bytes) != Some(PageKind::Slotted) {
            return Err(Error::ObjectNotFound { oid });
        }
        let record = slotted::record(bytes, oid.slot())
            .map_err(|reason| corrupt(oid.page(), snapshot, reason))?
            .ok_or(Error::ObjectNotFound { oid })?;
        Ok((oid.page(), record))
    }

    fn descriptor(&mut self, oid: Oid, record: &slotted::Record) -> Result<Descriptor> {
        let (snapshot, page_size) = (self.snapshot, self.page_size);
        let bytes = self.page(oid.page())?;
        Descriptor::decode(&bytes[record.payload()], page_size)
            .map_err(|reason| corrupt(oid.page(), snapshot, format!("object {oid}: {reason}")))
    }

    /// Type, length and representation of `oid`.
    pub fn object_info(&mut self, oid: Oid) -> Result<ObjectInfo> {
        let (_, record) = self.record(oid)?;
        let len = if record.large {
            self.descriptor(oid, &record)?.length
        } else {
            record.payload_len as u64
        };
        Ok(ObjectInfo {
            type_id: record.type_id,
            len,
            large: record.large,
        })
    }

    /// The bytes of small object `oid`, if its type is `expected` (any type when `None`).
    pub fn object_bytes(&mut self, oid: Oid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        let (_, record) = self.record(oid)?;
        if record.large {
            let len = self.descriptor(oid, &record)?.length;
            return Err(Error::LargeObject { oid, len });
        }
        crate::session::check_type(oid, &record, expected)?;
        // `record` found the page: it is held.
        Ok(&self.pages[&oid.page()][record.payload()])
    }

    /// Copies bytes `offset..offset + buf.len()` of `oid` (small or large) into `buf`.
    pub fn read_at(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (page, record) = self.record(oid)?;
        let object_len = if record.large {
            self.descriptor(oid, &record)?.length
        } else {
            record.payload_len as u64
        };
        let end = offset.saturating_add(buf.len() as u64);
        if end > object_len {
            return Err(Error::OutOfBounds {
                oid,
                offset,
                end,
                len: object_len,
            });
        }
        if !record.large {
            let start = record.payload().start + offset as usize;
            buf.copy_from_slice(&self.page(page)?[start..start + buf.len()]);
            return Ok(());
        }
        let descriptor = self.descriptor(oid, &record)?;
        let pages: Vec<PageId> = descriptor.pages().collect();
        let per_page = large::data_bytes_per_page(self.page_size);
        let snapshot = self.snapshot;
        let mut done = 0usize;
        while done < buf.len() {
            let (index, within) = descriptor.locate(offset + done as u64, self.page_size);
            let piece = (per_page - within).min(buf.len() - done);
            let data_page = pages[index];
            let bytes = self.page(data_page)?;
            if page::kind(bytes) != Some(PageKind::LargeData) || large::owner(bytes) != oid {
                return Err(corrupt(
                    data_page,
                    snapshot,
                    format!("not a data page of object {oid}"),
                ));
            }
            let start = PAGE_HEADER_BYTES + within;
            buf[done..done + piece].copy_from_slice(&bytes[start..start + piece]);
            done += piece;
        }
        Ok(())
    }

    /// Every named root, as of the snapshot.
    pub fn roots(&mut self) -> Result<BTreeMap<String, Oid>> {
        let oid = self.server.root_directory();
        let snapshot = self.snapshot;
        let (page, record) = self.record(oid)?;
        if record.type_id != TypeId::ROOT_DIRECTORY {
            return Err(corrupt(
                page,
                snapshot,
                "root directory object has the wrong type",
            ));
        }
        let bytes = &self.page(page)?[record.payload()];
        directory::decode(bytes).map_err(|reason| corrupt(page, snapshot, reason))
    }

    /// Visits every object of the store as of the snapshot, in OID order, Lodestore's own
    /// included: (oid, type, large, bytes). Walks the pages from the first data page until
    /// the server says there are no more.
    pub fn for_each_object(
        &mut self,
        mut visit: impl FnMut(Oid, TypeId, bool, Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let (snapshot, volume) = (self.snapshot, self.volume);
        for number in directory::DIRECTORY_PAGE.0.. {
            let id = PageId(number);
            if lodestore_storage::spacemap::is_map_page(id, self.page_size) {
                continue;
            }
            let records: Vec<(Oid, slotted::Record)> = match self.page(id) {
                Err(Error::NoSuchPage { .. }) => return Ok(()),
                Err(e) => return Err(e),
                Ok(bytes) if page::kind(bytes) != Some(PageKind::Slotted) => continue,
                Ok(bytes) => slotted::live_slots(bytes)
                    .map(|slot| {
                        let record = slotted::record(bytes, slot)
                            .map_err(|reason| corrupt(id, snapshot, reason))?
                            .ok_or_else(|| corrupt(id, snapshot, "a live slot holds no record"))?;
                        Ok((Oid::new(volume, id, slot), record))
                    })
                    .collect::<Result<_>>()?,
            };
            for (oid, record) in records {
                let len = if record.large {
                    self.descriptor(oid, &record)?.length
                } else {
                    record.payload_len as u64
                };
                let mut bytes = vec![0u8; len as usize];
                self.read_at(oid, 0, &mut bytes)?;
                visit(oid, record.type_id, record.large, bytes)?;
            }
        }
        Ok(())
    }

    /// Ends the transaction (it changed nothing).
    pub fn finish(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        match self.txn.take() {
            Some(txn) => self.server.commit(txn).map(|_| ()),
            None => Ok(()),
        }
    }
}

impl Drop for AsOfReader<'_> {
    fn drop(&mut self) {
        let pages = std::mem::take(&mut self.pages);
        self.parked.give_back(self.snapshot, pages);
        if let Err(e) = self.end() {
            tracing::warn!(error = %e, "ending a transaction as of a snapshot failed");
        }
    }
}

fn corrupt(page: PageId, snapshot: u64, reason: impl Into<String>) -> Error {
    Error::CorruptPage {
        path: format!("snapshot {snapshot}").into(),
        page,
        reason: reason.into(),
    }
}
