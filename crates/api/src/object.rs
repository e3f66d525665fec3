//! Typed objects: a `Persistent` type is plain old data (bytemuck `Pod`) with a type id, and
//! `Oid<T>` is a reference to a stored `T`. An `Oid<T>` is itself `Pod`, so objects hold
//! references to each other as plain fields.

use bytemuck::{Pod, Zeroable};
use lodestore_core::Oid as RawOid;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

/// A type Lodestore can store. `TYPE_ID` tells the types apart on disk; ids from `0xFFFF_0000`
/// up are Lodestore's own.
pub trait Persistent: Pod {
    const TYPE_ID: u32;
}

/// A typed reference to a stored `T`: the raw 64-bit OID and nothing else.
#[repr(transparent)]
pub struct Oid<T> {
    raw: u64,
    _type: PhantomData<fn() -> T>,
}

// SAFETY: `Oid<T>` is `repr(transparent)` over a `u64` (the PhantomData has size 0 and
// alignment 1), so every bit pattern is valid, it has no padding, and all zeros is the null
// reference.
unsafe impl<T: 'static> Zeroable for Oid<T> {}
// SAFETY: as above; `Oid<T>` is `Copy` for every `T`.
unsafe impl<T: 'static> Pod for Oid<T> {}

impl<T> Oid<T> {
    pub const NULL: Oid<T> = Oid {
        raw: 0,
        _type: PhantomData,
    };

    pub fn from_raw(raw: RawOid) -> Oid<T> {
        Oid {
            raw: raw.0,
            _type: PhantomData,
        }
    }

    pub fn raw(self) -> RawOid {
        RawOid(self.raw)
    }

    pub fn is_null(self) -> bool {
        self.raw == 0
    }
}

impl<T> Clone for Oid<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Oid<T> {}
impl<T> PartialEq for Oid<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl<T> Eq for Oid<T> {}
impl<T> Hash for Oid<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}
impl<T> fmt::Debug for Oid<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.raw())
    }
}
impl<T> From<Oid<T>> for RawOid {
    fn from(oid: Oid<T>) -> RawOid {
        oid.raw()
    }
}
