//! Identifiers: volumes, pages, slots, object ids, log sequence numbers, transactions, types.

use std::fmt;

/// A volume: one data file (plus, later, its logs) owned by one server.
pub type VolumeId = u16;

/// An object's type, chosen by the application (`Persistent::TYPE_ID`). Type ids at or above
/// [`TypeId::RESERVED_MIN`] belong to Lodestore itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeId(pub u32);

impl TypeId {
    /// Untyped byte objects.
    pub const BYTES: TypeId = TypeId(0);
    /// First type id reserved for Lodestore's own objects.
    pub const RESERVED_MIN: u32 = 0xFFFF_0000;
    /// The named-roots directory.
    pub const ROOT_DIRECTORY: TypeId = TypeId(0xFFFF_0001);
    /// A persistent collection's header (the library's ordered maps and sets).
    pub const COLLECTION: TypeId = TypeId(0xFFFF_0010);
    /// A node of a persistent collection's B+-tree.
    pub const COLLECTION_NODE: TypeId = TypeId(0xFFFF_0011);

    pub fn is_reserved(self) -> bool {
        self.0 >= Self::RESERVED_MIN
    }

    /// Objects of the library's collections: written only through the collection code.
    pub fn is_collection(self) -> bool {
        self == Self::COLLECTION || self == Self::COLLECTION_NODE
    }
}

impl fmt::Display for TypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A page of a volume, by number. Page 0 and 1 hold the two superblock copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PageId(pub u32);

impl PageId {
    /// Byte offset of this page in a data file of `page_size`-byte pages.
    pub fn offset(self, page_size: usize) -> u64 {
        u64::from(self.0) * page_size as u64
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A slot of a slotted page.
pub type SlotId = u16;

/// A log sequence number. Every page carries the LSN of the last change applied to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A transaction, numbered by the server that runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnId(pub u64);

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A stable 64-bit object identifier: volume (16 bits), page (32 bits), slot (16 bits), most
/// significant first. The raw `u64` is what a stored reference holds, so outside tools can
/// follow references in a dump. The value 0 is the null reference: page 0 is a superblock and
/// never holds objects.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
#[repr(transparent)]
pub struct Oid(pub u64);

impl Oid {
    pub const NULL: Oid = Oid(0);

    pub fn new(volume: VolumeId, page: PageId, slot: SlotId) -> Oid {
        Oid((u64::from(volume) << 48) | (u64::from(page.0) << 16) | u64::from(slot))
    }

    pub fn volume(self) -> VolumeId {
        (self.0 >> 48) as VolumeId
    }

    pub fn page(self) -> PageId {
        PageId((self.0 >> 16) as u32)
    }

    pub fn slot(self) -> SlotId {
        self.0 as SlotId
    }

    pub fn is_null(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oid({}:{}:{})", self.volume(), self.page(), self.slot())
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}:{}:{})",
            self.0,
            self.volume(),
            self.page(),
            self.slot()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn oid_fields_round_trip(volume: u16, page: u32, slot: u16) {
            let oid = Oid::new(volume, PageId(page), slot);
            prop_assert_eq!(oid.volume(), volume);
            prop_assert_eq!(oid.page(), PageId(page));
            prop_assert_eq!(oid.slot(), slot);
            prop_assert_eq!(Oid(oid.0), oid);
        }
    }

    #[test]
    fn null_is_page_zero() {
        assert!(Oid::NULL.is_null());
        assert_eq!(Oid::NULL.page(), PageId(0));
        assert!(!Oid::new(0, PageId(3), 0).is_null());
    }
}
