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
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Pages of snapshots a session has read: snapshot id, then page. Bounded by a number of
/// pages; past it, other snapshots' pages go first, then this one's.
#[derive(Default)]
pub struct SnapshotPages {
    by_snapshot: BTreeMap<u64, HashMap<PageId, Box<[u8]>>>,
    pages: usize,
    pages_max: usize,
}

impl SnapshotPages {
    pub fn new(pages_max: usize) -> SnapshotPages {
        SnapshotPages {
            by_snapshot: BTreeMap::new(),
            pages: 0,
            pages_max: pages_max.max(1),
        }
    }

    /// Pages held, over all snapshots.
    pub fn len(&self) -> usize {
        self.pages
    }

    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Makes room for one more page of `snapshot`.
    fn make_room(&mut self, snapshot: u64) {
        if self.pages < self.pages_max {
            return;
        }
        let others: Vec<u64> = self
            .by_snapshot
            .keys()
            .copied()
            .filter(|&s| s != snapshot)
            .collect();
        for other in others {
            if let Some(pages) = self.by_snapshot.remove(&other) {
                self.pages -= pages.len();
            }
            if self.pages < self.pages_max {
                return;
            }
        }
        if let Some(pages) = self.by_snapshot.get_mut(&snapshot) {
            self.pages -= pages.len();
            pages.clear();
        }
    }
}

/// A read-only transaction of the store as of one snapshot.
pub struct AsOfReader<'s> {
    server: Arc<dyn PageServer>,
    txn: Option<TxnId>,
    snapshot: u64,
    volume: VolumeId,
    page_size: usize,
    pages: &'s mut SnapshotPages,
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
        pages: &'s mut SnapshotPages,
    ) -> AsOfReader<'s> {
        AsOfReader {
            volume: server.volume_id(),
            page_size: server.page_size(),
            server,
            txn: Some(txn),
            snapshot,
            pages,
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
        let cached = self
            .pages
            .by_snapshot
            .get(&self.snapshot)
            .is_some_and(|pages| pages.contains_key(&page));
        if !cached {
            let txn = self.txn()?;
            let mut buf = vec![0u8; self.page_size].into_boxed_slice();
            self.server.fetch_page(txn, page, &mut buf)?;
            check_page(&buf, page).map_err(|reason| corrupt(page, self.snapshot, reason))?;
            self.fetched += 1;
            self.pages.make_room(self.snapshot);
            self.pages
                .by_snapshot
                .entry(self.snapshot)
                .or_default()
                .insert(page, buf);
            self.pages.pages += 1;
        }
        Ok(&self.pages.by_snapshot[&self.snapshot][&page])
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
        let (page, record) = self.record(oid)?;
        if record.large {
            let len = self.descriptor(oid, &record)?.length;
            return Err(Error::LargeObject { oid, len });
        }
        if let Some((type_id, len)) = expected {
            if record.type_id != type_id || record.payload_len != len {
                return Err(Error::TypeMismatch {
                    oid,
                    expected: type_id,
                    expected_len: len as u64,
                    found: record.type_id,
                    found_len: record.payload_len as u64,
                });
            }
        }
        Ok(&self.page(page)?[record.payload()])
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
        if let Err(e) = self.end() {
            tracing::warn!(error = %e, "ending a transaction as of a snapshot failed");
        }
    }
}

/// Checks a page served as of a snapshot before anything is read from it.
fn check_page(image: &[u8], expected: PageId) -> std::result::Result<(), String> {
    if page::number(image) != expected {
        return Err(format!(
            "the server sent page {} instead",
            page::number(image)
        ));
    }
    match page::kind(image) {
        Some(PageKind::Slotted) => slotted::validate(image),
        Some(_) => Ok(()),
        None => Err(format!("unknown page kind {}", page::kind_byte(image))),
    }
}

fn corrupt(page: PageId, snapshot: u64, reason: impl Into<String>) -> Error {
    Error::CorruptPage {
        path: format!("snapshot {snapshot}").into(),
        page,
        reason: reason.into(),
    }
}
