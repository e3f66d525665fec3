//! What every transaction can read: code written against [`ReadTransaction`] runs on the
//! current store ([`crate::Transaction`]) and on the store as of a snapshot
//! ([`crate::AsOfTransaction`]) alike.

use crate::object::{Oid, Persistent};
use lodestore_client::ObjectInfo;
use lodestore_core::{Error, Oid as RawOid, Result, TypeId};
use std::collections::BTreeMap;

/// Reading objects and roots inside a transaction. References returned by `get` live until
/// the next call.
pub trait ReadTransaction {
    /// The object `oid`, read in place.
    fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T>;

    /// Type, length and representation of any object.
    fn info(&mut self, oid: RawOid) -> Result<ObjectInfo>;

    /// Copies bytes of any object, small or large, starting at `offset`.
    fn read_at(&mut self, oid: RawOid, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Every named root.
    fn roots(&mut self) -> Result<BTreeMap<String, RawOid>>;

    /// The bytes of a small object of any type, reserved ones included, checked against the
    /// type and length expected: how collections read their nodes in either kind of
    /// transaction. Not for applications, which read typed objects with `get`.
    #[doc(hidden)]
    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]>;

    /// Where the transaction keeps the header of the collection it used last, if it keeps
    /// one (a transaction that holds its locks to the end can). Not for applications.
    #[doc(hidden)]
    fn collection_meta_cache(&mut self) -> Option<&mut crate::collections::header::MetaCache> {
        None
    }

    /// A copy of the object `oid`.
    fn read<T: Persistent>(&mut self, oid: Oid<T>) -> Result<T> {
        self.get(oid).copied()
    }

    /// All bytes of any object.
    fn read_all(&mut self, oid: RawOid) -> Result<Vec<u8>> {
        let len = self.info(oid)?.len;
        let mut buf = vec![0u8; len as usize];
        self.read_at(oid, 0, &mut buf)?;
        Ok(buf)
    }

    /// The object the root `name` names, if any.
    fn root(&mut self, name: &str) -> Result<Option<RawOid>> {
        Ok(self.roots()?.get(name).copied())
    }

    /// The root `name` as a typed reference; an error if it is missing.
    fn root_typed<T: Persistent>(&mut self, name: &str) -> Result<Oid<T>> {
        self.root(name)?
            .map(Oid::from_raw)
            .ok_or_else(|| Error::RootNotFound {
                name: name.to_string(),
            })
    }
}

impl ReadTransaction for crate::Transaction<'_> {
    fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T> {
        crate::Transaction::get(self, oid)
    }

    fn info(&mut self, oid: RawOid) -> Result<ObjectInfo> {
        crate::Transaction::info(self, oid)
    }

    fn read_at(&mut self, oid: RawOid, offset: u64, buf: &mut [u8]) -> Result<()> {
        crate::Transaction::read_at(self, oid, offset, buf)
    }

    fn roots(&mut self) -> Result<BTreeMap<String, RawOid>> {
        crate::Transaction::roots(self)
    }

    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        self.client().object_bytes(oid, expected)
    }

    fn collection_meta_cache(&mut self) -> Option<&mut crate::collections::header::MetaCache> {
        Some(self.meta_cache())
    }
}

impl ReadTransaction for crate::AsOfTransaction<'_> {
    fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T> {
        crate::AsOfTransaction::get(self, oid)
    }

    fn info(&mut self, oid: RawOid) -> Result<ObjectInfo> {
        crate::AsOfTransaction::info(self, oid)
    }

    fn read_at(&mut self, oid: RawOid, offset: u64, buf: &mut [u8]) -> Result<()> {
        crate::AsOfTransaction::read_at(self, oid, offset, buf)
    }

    fn roots(&mut self) -> Result<BTreeMap<String, RawOid>> {
        crate::AsOfTransaction::roots(self)
    }

    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        self.object_bytes_of(oid, expected)
    }
}
