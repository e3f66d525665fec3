//! Read-only transactions as of a snapshot.

use crate::object::{Oid, Persistent};
use lodestore_client::{AsOfReader, ObjectInfo, SnapshotPages};
use lodestore_core::{Error, Oid as RawOid, Result, TypeId};
use lodestore_protocol::PageServer;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Which past a read-only transaction sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsOf {
    /// The snapshot with this id.
    Snapshot(u64),
    /// The newest snapshot taken at or before this time.
    Time(SystemTime),
}

/// Microseconds since the Unix epoch (0 for times before it).
pub(crate) fn micros_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A read-only transaction of the store as it was at a snapshot. It has no way to change
/// anything; it takes no locks, so it never waits for writers nor they for it. References
/// returned by `get` live until the next call.
pub struct AsOfTransaction<'s> {
    reader: AsOfReader<'s>,
}

impl<'s> AsOfTransaction<'s> {
    pub(crate) fn begin(
        server: Arc<dyn PageServer>,
        txn: lodestore_core::TxnId,
        snapshot: u64,
        pages: &'s mut SnapshotPages,
    ) -> Result<AsOfTransaction<'s>> {
        Ok(AsOfTransaction {
            reader: AsOfReader::new(server, txn, snapshot, pages),
        })
    }

    /// The id of the snapshot this transaction reads.
    pub fn snapshot(&self) -> u64 {
        self.reader.snapshot()
    }

    /// Pages this transaction fetched from the server.
    pub fn pages_fetched(&self) -> u64 {
        self.reader.pages_fetched()
    }

    /// The object `oid` as it was, read in place.
    pub fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T> {
        if align_of::<T>() > 8 {
            return Err(Error::Misaligned {
                oid: oid.raw(),
                align: align_of::<T>(),
            });
        }
        let bytes = self
            .reader
            .object_bytes(oid.raw(), Some((TypeId(T::TYPE_ID), size_of::<T>())))?;
        bytemuck::try_from_bytes(bytes).map_err(|_| Error::Misaligned {
            oid: oid.raw(),
            align: align_of::<T>(),
        })
    }

    /// A copy of the object `oid` as it was.
    pub fn read<T: Persistent>(&mut self, oid: Oid<T>) -> Result<T> {
        self.get(oid).copied()
    }

    /// Type, length and representation of any object.
    pub fn info(&mut self, oid: impl Into<RawOid>) -> Result<ObjectInfo> {
        self.reader.object_info(oid.into())
    }

    /// The bytes of a small object of any type, checked against `expected`.
    pub(crate) fn object_bytes_of(
        &mut self,
        oid: RawOid,
        expected: Option<(TypeId, usize)>,
    ) -> Result<&[u8]> {
        self.reader.object_bytes(oid, expected)
    }

    /// The bytes of a small object, in place.
    pub fn bytes(&mut self, oid: impl Into<RawOid>) -> Result<&[u8]> {
        self.reader.object_bytes(oid.into(), None)
    }

    /// Copies bytes of any object, small or large, starting at `offset`.
    pub fn read_at(&mut self, oid: impl Into<RawOid>, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.reader.read_at(oid.into(), offset, buf)
    }

    /// All bytes of any object.
    pub fn read_all(&mut self, oid: impl Into<RawOid>) -> Result<Vec<u8>> {
        let oid = oid.into();
        let len = self.reader.object_info(oid)?.len;
        let mut buf = vec![0u8; len as usize];
        self.reader.read_at(oid, 0, &mut buf)?;
        Ok(buf)
    }

    /// The object the root `name` named, if any.
    pub fn root(&mut self, name: &str) -> Result<Option<RawOid>> {
        Ok(self.reader.roots()?.get(name).copied())
    }

    /// The root `name` as a typed reference; an error if it was missing.
    pub fn root_typed<T: Persistent>(&mut self, name: &str) -> Result<Oid<T>> {
        self.root(name)?
            .map(Oid::from_raw)
            .ok_or_else(|| Error::RootNotFound {
                name: name.to_string(),
            })
    }

    /// Every named root.
    pub fn roots(&mut self) -> Result<BTreeMap<String, RawOid>> {
        self.reader.roots()
    }

    /// Visits every application object as it was, in OID order (what `lodestore dump
    /// --snapshot` prints).
    pub fn for_each_object(
        &mut self,
        mut visit: impl FnMut(crate::StoredObject) -> Result<()>,
    ) -> Result<()> {
        self.reader.for_each_object(|oid, type_id, large, bytes| {
            if type_id.is_reserved() {
                return Ok(());
            }
            visit(crate::StoredObject {
                oid,
                type_id,
                large,
                bytes,
            })
        })
    }

    /// Ends the transaction. Dropping it does the same.
    pub fn finish(self) -> Result<()> {
        self.reader.finish()
    }
}
