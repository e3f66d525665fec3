//! Lodestore objects read through a peer's transaction: [`PeerObjects`] implements
//! [`ReadTransaction`] and the OO7 [`Traverse`], so the very traversal code that runs on
//! Lodestore runs on every peer, reading each object by a key lookup and decoding it with the
//! same `bytemuck` types; it also implements the OO1 operations' [`Oo1Access`], finding parts
//! by number through the peer's own index entries.

use super::kv::{
    decode_object, decode_roots, encode_object, index_key, KvAccess, ROOTS_KEY, TYPE_BYTES,
};
use crate::oo1::ops::Oo1Access;
use crate::oo1::schema::Part;
use crate::oo7::schema::AtomicPart;
use crate::oo7::traverse::Traverse;
use lodestore::{Error, ObjectInfo, Oid, Persistent, RawOid, ReadTransaction, Result, TypeId};
use std::collections::BTreeMap;
use std::ops::Range;

/// A peer transaction seen as a Lodestore read transaction.
pub struct PeerObjects<'a> {
    kv: &'a mut dyn KvAccess,
    /// The last value read (type id and bytes).
    value: Vec<u8>,
    /// The last object typed by `get`, copied to 8-byte alignment (a peer's value need not be
    /// aligned).
    aligned: Vec<u64>,
    encoded: Vec<u8>,
}

impl<'a> PeerObjects<'a> {
    pub fn new(kv: &'a mut dyn KvAccess) -> PeerObjects<'a> {
        PeerObjects {
            kv,
            value: Vec::with_capacity(256),
            aligned: Vec::with_capacity(32),
            encoded: Vec::with_capacity(256),
        }
    }

    /// Reads the value of `oid` into `self.value`.
    fn load(&mut self, oid: RawOid) -> Result<()> {
        if oid.0 == ROOTS_KEY || !self.kv.get(oid.0, &mut self.value)? {
            return Err(Error::ObjectNotFound { oid });
        }
        Ok(())
    }

    /// Where the bytes of `oid` lie in `self.value`, checked against the type and length
    /// expected.
    fn checked(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<Range<usize>> {
        self.load(oid)?;
        let (type_id, bytes) = decode_object(oid, &self.value)?;
        if let Some((expected, expected_len)) = expected {
            if type_id != expected.0 || bytes.len() != expected_len {
                return Err(Error::TypeMismatch {
                    oid,
                    expected,
                    expected_len: expected_len as u64,
                    found: TypeId(type_id),
                    found_len: bytes.len() as u64,
                });
            }
        }
        Ok(TYPE_BYTES..self.value.len())
    }
}

impl PeerObjects<'_> {
    /// Stores `value` as the object `oid`.
    pub fn put<T: Persistent>(&mut self, oid: Oid<T>, value: &T) -> Result<()> {
        encode_object(T::TYPE_ID, bytemuck::bytes_of(value), &mut self.encoded);
        self.kv.put(oid.raw().0, &self.encoded)
    }

    /// The OID the index maps `number` to, if any.
    pub fn index_entry(&mut self, number: u64) -> Result<Option<RawOid>> {
        if !self.kv.get(index_key(number)?, &mut self.value)? {
            return Ok(None);
        }
        let oid: [u8; 8] = self.value[..].try_into().map_err(|_| {
            Error::InvalidArgument(format!(
                "the peer's index entry for {number} has {} bytes, not an OID's 8",
                self.value.len()
            ))
        })?;
        Ok(Some(RawOid(u64::from_le_bytes(oid))))
    }
}

impl ReadTransaction for PeerObjects<'_> {
    fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T> {
        debug_assert!(align_of::<T>() <= align_of::<u64>());
        let size = size_of::<T>();
        let range = self.checked(oid.raw(), Some((TypeId(T::TYPE_ID), size)))?;
        self.aligned.clear();
        self.aligned.resize(size.div_ceil(8), 0);
        let aligned = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.aligned)[..size];
        aligned.copy_from_slice(&self.value[range]);
        Ok(bytemuck::from_bytes(aligned))
    }

    fn info(&mut self, oid: RawOid) -> Result<ObjectInfo> {
        let range = self.checked(oid, None)?;
        let (type_id, _) = decode_object(oid, &self.value)?;
        let len = range.len() as u64;
        Ok(ObjectInfo {
            type_id: TypeId(type_id),
            len,
            large: false,
        })
    }

    fn read_at(&mut self, oid: RawOid, offset: u64, buf: &mut [u8]) -> Result<()> {
        let range = self.checked(oid, None)?;
        let bytes = &self.value[range];
        let len = bytes.len() as u64;
        let end = offset.saturating_add(buf.len() as u64);
        if end > len {
            return Err(Error::OutOfBounds {
                oid,
                offset,
                end,
                len,
            });
        }
        buf.copy_from_slice(&bytes[offset as usize..end as usize]);
        Ok(())
    }

    fn roots(&mut self) -> Result<BTreeMap<String, RawOid>> {
        if !self.kv.get(ROOTS_KEY, &mut self.value)? {
            return Ok(BTreeMap::new());
        }
        decode_roots(&self.value)
    }

    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        let range = self.checked(oid, expected)?;
        Ok(&self.value[range])
    }
}

impl Oo1Access for PeerObjects<'_> {
    fn part(&mut self, oid: Oid<Part>) -> Result<Part> {
        self.read(oid)
    }

    fn find(&mut self, number: u64) -> Result<Option<Oid<Part>>> {
        Ok(self.index_entry(number)?.map(Oid::from_raw))
    }

    fn increment(&mut self, oid: Oid<Part>) -> Result<()> {
        let mut part = self.read(oid)?;
        part.x += 1;
        part.y += 1;
        self.put(oid, &part)
    }
}

impl Traverse for PeerObjects<'_> {
    /// Reads the atomic part, increments its `x` and `y`, and writes it back.
    fn update(&mut self, oid: Oid<AtomicPart>) -> Result<()> {
        let mut part = *self.get(oid)?;
        part.x += 1;
        part.y += 1;
        self.put(oid, &part)
    }
}
