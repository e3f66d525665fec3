//! Log records a client ships together, in the order it generated them, with the bytes of all
//! of them in one buffer: a commit generates thousands of records, and a record owning its
//! bytes would cost an allocation and a free each. Two kinds, sharing one layout:
//!
//! - [`PageUpdates`]: physical records, (page, offset, bytes before, bytes after);
//! - [`ObjectUpdates`]: Hosking's object update records, (OID, offset in the object, bytes
//!   after).

use lodestore_core::{Oid, PageId};
use std::fmt::Display;

/// Records of a key, an offset and `STRINGS` byte strings of one length each, the strings of
/// every record one after another in one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Packed<K, const STRINGS: usize> {
    bytes: Vec<u8>,
    records: Vec<PackedAt<K>>,
}

/// A record of a [`Packed`]: its key and offset, and where its strings start in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PackedAt<K> {
    key: K,
    offset: u32,
    len: u32,
    at: usize,
}

impl<K, const STRINGS: usize> Default for Packed<K, STRINGS> {
    fn default() -> Self {
        Packed {
            bytes: Vec::new(),
            records: Vec::new(),
        }
    }
}

impl<K: Copy + Display, const STRINGS: usize> Packed<K, STRINGS> {
    fn push(&mut self, key: K, offset: u32, strings: [&[u8]; STRINGS]) {
        let len = strings[0].len();
        assert!(
            strings.iter().all(|s| s.len() == len),
            "a log record's byte strings differ in length"
        );
        let at = self.bytes.len();
        for string in strings {
            self.bytes.extend_from_slice(string);
        }
        self.records.push(PackedAt {
            key,
            offset,
            len: u32::try_from(len).expect("a log record shorter than 4 GiB"),
            at,
        });
    }

    /// Records from their parts and the bytes they point into; `noun` names a key in errors
    /// ("page", "object").
    fn from_parts(
        parts: impl IntoIterator<Item = (K, u32, u32)>,
        bytes: Vec<u8>,
        noun: &str,
    ) -> Result<Self, String> {
        let mut records = Vec::new();
        let mut at = 0usize;
        for (key, offset, len) in parts {
            let end = (len as usize)
                .checked_mul(STRINGS)
                .and_then(|size| at.checked_add(size))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(|| {
                    format!(
                        "log record {} of {noun} {key} needs bytes past the {} shipped",
                        records.len(),
                        bytes.len()
                    )
                })?;
            records.push(PackedAt {
                key,
                offset,
                len,
                at,
            });
            at = end;
        }
        if at != bytes.len() {
            return Err(format!(
                "{} bytes shipped for log records of {at}",
                bytes.len()
            ));
        }
        Ok(Packed { bytes, records })
    }

    fn parts(&self) -> impl ExactSizeIterator<Item = (K, u32, u32)> + '_ {
        self.records.iter().map(|r| (r.key, r.offset, r.len))
    }

    fn strings(&self, record: &PackedAt<K>) -> [&[u8]; STRINGS] {
        let len = record.len as usize;
        std::array::from_fn(|i| &self.bytes[record.at + i * len..record.at + (i + 1) * len])
    }
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

/// [`PageUpdate`]s shipped together, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageUpdates(Packed<PageId, 2>);

impl PageUpdates {
    pub fn new() -> PageUpdates {
        PageUpdates::default()
    }

    /// Empty, with room for `records` records of `bytes` before and after bytes in all.
    pub fn with_capacity(records: usize, bytes: usize) -> PageUpdates {
        PageUpdates(Packed {
            bytes: Vec::with_capacity(bytes),
            records: Vec::with_capacity(records),
        })
    }

    /// Appends a record: bytes `offset..offset + after.len()` of `page` went from `before`
    /// to `after`, which must be as long as each other.
    pub fn push(&mut self, page: PageId, offset: u32, before: &[u8], after: &[u8]) {
        self.0.push(page, offset, [before, after]);
    }

    /// Rebuilds records from each one's page, offset and length, in order, and the bytes
    /// they point into (as [`PageUpdates::parts`] and [`PageUpdates::bytes`] give them),
    /// checking that the bytes are exactly the records' before and after bytes.
    pub fn from_parts(
        parts: impl IntoIterator<Item = (PageId, u32, u32)>,
        bytes: Vec<u8>,
    ) -> Result<PageUpdates, String> {
        Packed::from_parts(parts, bytes, "page").map(PageUpdates)
    }

    /// Each record's page, offset and length, in order.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = (PageId, u32, u32)> + '_ {
        self.0.parts()
    }

    /// The bytes of all records: each one's before bytes, then its after bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }

    pub fn len(&self) -> usize {
        self.0.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.records.is_empty()
    }

    pub fn get(&self, index: usize) -> Option<PageUpdate<'_>> {
        self.0.records.get(index).map(|r| self.view(r))
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = PageUpdate<'_>> + '_ {
        self.0.records.iter().map(|r| self.view(r))
    }

    fn view(&self, record: &PackedAt<PageId>) -> PageUpdate<'_> {
        let [before, after] = self.0.strings(record);
        PageUpdate {
            page: record.key,
            offset: record.offset,
            before,
            after,
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
/// reads them off its own copy. Borrowed from the [`ObjectUpdates`] that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectUpdate<'a> {
    pub oid: Oid,
    pub offset: u32,
    pub after: &'a [u8],
}

/// [`ObjectUpdate`]s shipped together, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectUpdates(Packed<Oid, 1>);

impl ObjectUpdates {
    pub fn new() -> ObjectUpdates {
        ObjectUpdates::default()
    }

    /// Appends a record: bytes `offset..offset + after.len()` of object `oid` are now `after`.
    pub fn push(&mut self, oid: Oid, offset: u32, after: &[u8]) {
        self.0.push(oid, offset, [after]);
    }

    /// Rebuilds records from each one's OID, offset and length, in order, and the bytes they
    /// point into, checking that the bytes are exactly the records' after bytes.
    pub fn from_parts(
        parts: impl IntoIterator<Item = (Oid, u32, u32)>,
        bytes: Vec<u8>,
    ) -> Result<ObjectUpdates, String> {
        Packed::from_parts(parts, bytes, "object").map(ObjectUpdates)
    }

    /// Each record's OID, offset and length, in order.
    pub fn parts(&self) -> impl ExactSizeIterator<Item = (Oid, u32, u32)> + '_ {
        self.0.parts()
    }

    /// The after bytes of all records, one after another.
    pub fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }

    pub fn len(&self) -> usize {
        self.0.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.records.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = ObjectUpdate<'_>> + '_ {
        self.0.records.iter().map(|r| {
            let [after] = self.0.strings(r);
            ObjectUpdate {
                oid: r.key,
                offset: r.offset,
                after,
            }
        })
    }
}

impl<'a> FromIterator<ObjectUpdate<'a>> for ObjectUpdates {
    fn from_iter<I: IntoIterator<Item = ObjectUpdate<'a>>>(updates: I) -> ObjectUpdates {
        let mut batch = ObjectUpdates::new();
        for update in updates {
            batch.push(update.oid, update.offset, update.after);
        }
        batch
    }
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
            let mut pages = PageUpdates::new();
            let mut objects = ObjectUpdates::new();
            for (key, offset, bytes) in &records {
                let before: Vec<u8> = bytes.iter().map(|b| b.0).collect();
                let after: Vec<u8> = bytes.iter().map(|b| b.1).collect();
                pages.push(PageId(*key), *offset, &before, &after);
                objects.push(Oid::new(1, PageId(*key), 7), *offset, &after);
            }
            prop_assert_eq!((pages.len(), objects.len()), (records.len(), records.len()));
            let both = pages.iter().zip(objects.iter());
            for (index, ((key, offset, bytes), (page, object))) in records.iter().zip(both).enumerate() {
                prop_assert_eq!(page, pages.get(index).unwrap());
                prop_assert_eq!((page.page, page.offset), (PageId(*key), *offset));
                prop_assert!(page.before.iter().eq(bytes.iter().map(|b| &b.0)));
                prop_assert!(page.after.iter().eq(bytes.iter().map(|b| &b.1)));
                prop_assert_eq!((object.oid.page(), object.offset), (PageId(*key), *offset));
                prop_assert_eq!(object.after, page.after);
            }
            let rebuilt = PageUpdates::from_parts(pages.parts(), pages.bytes().to_vec()).unwrap();
            prop_assert_eq!(&rebuilt, &pages);
            prop_assert_eq!(&pages.iter().collect::<PageUpdates>(), &pages);
            let rebuilt = ObjectUpdates::from_parts(objects.parts(), objects.bytes().to_vec()).unwrap();
            prop_assert_eq!(&rebuilt, &objects);
            prop_assert_eq!(&objects.iter().collect::<ObjectUpdates>(), &objects);
        }
    }

    proptest! {
        /// Parts and bytes off the wire, whatever they are, give a batch whose every record
        /// can be read, or an error: never a panic.
        #[test]
        fn any_parts_give_a_readable_batch_or_an_error(
            parts in proptest::collection::vec((any::<u32>(), any::<u32>(), 0u32..64), 0..8),
            big in proptest::option::of((0usize..8, any::<u32>())),
            bytes in 0usize..300,
        ) {
            let mut parts: Vec<(PageId, u32, u32)> =
                parts.into_iter().map(|(page, offset, len)| (PageId(page), offset, len)).collect();
            if let (Some((index, len)), false) = (big, parts.is_empty()) {
                let at = index % parts.len();
                parts[at].2 = len;
            }
            let needed: u64 = parts.iter().map(|p| 2 * u64::from(p.2)).sum();
            match PageUpdates::from_parts(parts.clone(), vec![5; bytes]) {
                Ok(batch) => {
                    prop_assert_eq!(needed, bytes as u64);
                    let read: usize = batch.iter().map(|u| u.before.len() + u.after.len()).sum();
                    prop_assert_eq!(read, bytes);
                }
                Err(_) => prop_assert_ne!(needed, bytes as u64),
            }
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
        let oid = Oid::new(1, PageId(9), 2);
        let err = ObjectUpdates::from_parts([(oid, 0, 3)], vec![1, 2]).unwrap_err();
        assert_eq!(
            err,
            format!("log record 0 of object {oid} needs bytes past the 2 shipped")
        );
    }
}
