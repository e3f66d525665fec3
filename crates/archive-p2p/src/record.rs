//! A page's record in the DHT: every copy of one page the archive holds, and the times of the
//! copies removed, under one key, so that all copies of a page live on the same replica set
//! (as the thesis keys them, section 4.3) and "the oldest copy at or after a time" is one
//! lookup.
//!
//! Records merge rather than replace: a put sends only the new copies (or removals) of a
//! page, and each peer unites them with what it holds. Union is commutative, associative and
//! idempotent, so replicas that missed a put (a peer down at the time) converge when they next
//! receive the page's record, whatever the order, and a reader unites the records of every
//! replica it reaches. A removal is a tombstone (the copy's time), kept so that a replica that
//! still holds the copy does not bring it back.
//!
//! ```text
//! magic "LSP2PREC" | version u32 | page u32 | removed n u32 | copies m u32
//! | n removed times u64 | m x (length u32 | sealed copy) | crc32c u32 of all before
//! ```
//! (little-endian; each copy sealed by `lodestore_protocol::archive::sealed`, so it is
//! checked again on its own when read).

use lodestore_core::checksum::crc32c;
use lodestore_core::PageId;
use lodestore_protocol::archive::sealed;
use std::collections::{BTreeMap, BTreeSet};

/// First bytes of every record.
pub const MAGIC: [u8; 8] = *b"LSP2PREC";
/// The format version written; readers refuse others by name.
pub const VERSION: u32 = 1;
/// The largest record a peer keeps or a reader accepts: at 8 KiB pages, about 2,000 copies
/// of one page. Kademlia moves a record in one message, so this also bounds what a peer
/// reads from the network per message.
pub const MAX_RECORD_BYTES: usize = 16 << 20;
const HEADER_BYTES: usize = 8 + 4 + 4 + 4 + 4;

/// The copies and removals of one page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageRecord {
    pub page: PageId,
    /// Time -> the sealed copy made for it.
    pub copies: BTreeMap<u64, Vec<u8>>,
    /// Times of copies removed; never served again.
    pub removed: BTreeSet<u64>,
}

impl PageRecord {
    pub fn new(page: PageId) -> PageRecord {
        PageRecord {
            page,
            ..PageRecord::default()
        }
    }

    /// Adds the copy of this page at `time_us`.
    pub fn add_copy(&mut self, time_us: u64, image: &[u8]) {
        if !self.removed.contains(&time_us) {
            self.copies
                .insert(time_us, sealed::seal(self.page, time_us, image));
        }
    }

    /// Removes the copy at `time_us`, for good.
    pub fn remove(&mut self, time_us: u64) {
        self.copies.remove(&time_us);
        self.removed.insert(time_us);
    }

    /// Unites `other` (a record of the same page) into this one.
    pub fn merge(&mut self, other: PageRecord) {
        debug_assert_eq!(self.page, other.page);
        self.removed.extend(other.removed);
        for (time, blob) in other.copies {
            // Two copies of one page for one time are the same page image.
            self.copies.entry(time).or_insert(blob);
        }
        let removed = &self.removed;
        self.copies.retain(|time, _| !removed.contains(time));
    }

    /// The oldest copy at or after `time_us`: its time and sealed bytes.
    pub fn oldest_from(&self, time_us: u64) -> Option<(u64, &[u8])> {
        self.copies
            .range(time_us..)
            .next()
            .map(|(&time, blob)| (time, blob.as_slice()))
    }

    /// The newest time held.
    pub fn newest(&self) -> Option<u64> {
        self.copies.keys().next_back().copied()
    }

    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES
            + 8 * self.removed.len()
            + self.copies.values().map(|b| 4 + b.len()).sum::<usize>()
            + 4
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.page.0.to_le_bytes());
        out.extend_from_slice(&count(self.removed.len()).to_le_bytes());
        out.extend_from_slice(&count(self.copies.len()).to_le_bytes());
        for time in &self.removed {
            out.extend_from_slice(&time.to_le_bytes());
        }
        for blob in self.copies.values() {
            out.extend_from_slice(&count(blob.len()).to_le_bytes());
            out.extend_from_slice(blob);
        }
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// The record in `bytes`, every part checked: magic, version, checksum, counts within the
    /// length, and each copy's seal (its page this record's, its time the one it is filed
    /// under). The reason when it fails.
    pub fn decode(bytes: &[u8]) -> Result<PageRecord, String> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(format!(
                "record of {} bytes, above the limit of {MAX_RECORD_BYTES}",
                bytes.len()
            ));
        }
        if bytes.len() < HEADER_BYTES + 4 || bytes[..8] != MAGIC {
            return Err(format!(
                "not a page record ({} bytes, no LSP2PREC header)",
                bytes.len()
            ));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        if crc32c(body) != u32::from_le_bytes(tail.try_into().expect("4 bytes")) {
            return Err("page record checksum mismatch".into());
        }
        let mut reader = Reader { bytes: body, at: 8 };
        let version = reader.u32()?;
        if version != VERSION {
            return Err(format!(
                "page record format version {version}; this build reads version {VERSION}"
            ));
        }
        let page = PageId(reader.u32()?);
        let (removed, copies) = (reader.u32()? as usize, reader.u32()? as usize);
        let mut record = PageRecord::new(page);
        for _ in 0..removed {
            record.removed.insert(reader.u64()?);
        }
        for _ in 0..copies {
            let len = reader.u32()? as usize;
            let blob = reader.take(len)?;
            let Some((held_page, time, image_len)) = sealed::label(blob) else {
                return Err(format!("a copy of {len} bytes is too short to be sealed"));
            };
            sealed::open(blob, page, time, image_len)
                .map_err(|why| format!("copy labelled page {held_page} at time {time}: {why}"))?;
            if record.copies.insert(time, blob.to_vec()).is_some() {
                return Err(format!("two copies for time {time}"));
            }
        }
        if reader.at != body.len() {
            return Err(format!(
                "{} bytes after the last copy",
                body.len() - reader.at
            ));
        }
        Ok(record)
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).expect("records are bounded far below 4 GiB")
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| {
            format!(
                "record cut short: {n} bytes wanted at offset {} of {}",
                self.at,
                self.bytes.len()
            )
        })?;
        let part = &self.bytes[self.at..end];
        self.at = end;
        Ok(part)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(page: u32, copies: &[u64], removed: &[u64]) -> PageRecord {
        let mut record = PageRecord::new(PageId(page));
        for &time in copies {
            record.add_copy(time, &[time as u8; 16]);
        }
        for &time in removed {
            record.remove(time);
        }
        record
    }

    proptest! {
        /// A record decodes to itself; any flipped bit or cut is refused.
        #[test]
        fn records_round_trip_and_refuse_damage(
            page in 0u32..100,
            copies in proptest::collection::vec(0u64..50, 0..6),
            removed in proptest::collection::vec(0u64..50, 0..4),
            flip in any::<prop::sample::Index>(),
        ) {
            let record = record(page, &copies, &removed);
            let bytes = record.encode();
            prop_assert_eq!(&PageRecord::decode(&bytes).unwrap(), &record);
            prop_assert!(PageRecord::decode(&bytes[..bytes.len() - 1]).is_err());
            let mut damaged = bytes.clone();
            let bit = flip.index(damaged.len() * 8);
            damaged[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(PageRecord::decode(&damaged).is_err());
        }

        /// Merging is a union whatever the order (replicas converge), and a removed copy
        /// stays removed.
        #[test]
        fn merges_commute_and_removals_win(
            a in proptest::collection::vec(0u64..20, 0..6),
            b in proptest::collection::vec(0u64..20, 0..6),
            gone in proptest::collection::vec(0u64..20, 0..3),
        ) {
            let (x, y) = (record(1, &a, &gone), record(1, &b, &[]));
            let mut xy = x.clone();
            xy.merge(y.clone());
            let mut yx = y;
            yx.merge(x);
            prop_assert_eq!(&xy, &yx);
            let mut again = xy.clone();
            again.merge(xy.clone());
            prop_assert_eq!(&again, &xy);
            for time in &gone {
                prop_assert!(!xy.copies.contains_key(time));
            }
            for time in a.iter().chain(&b).filter(|t| !gone.contains(t)) {
                prop_assert!(xy.copies.contains_key(time));
            }
        }
    }

    #[test]
    fn a_copy_of_another_page_is_refused() {
        let mut record = record(1, &[], &[]);
        record
            .copies
            .insert(5, sealed::seal(PageId(2), 5, &[0u8; 16]));
        let why = PageRecord::decode(&record.encode()).unwrap_err();
        assert!(why.contains("page 2"), "{why}");
    }

    #[test]
    fn oldest_from_picks_the_first_copy_at_or_after() {
        let record = record(1, &[10, 20], &[]);
        assert_eq!(record.oldest_from(5).map(|c| c.0), Some(10));
        assert_eq!(record.oldest_from(11).map(|c| c.0), Some(20));
        assert_eq!(record.oldest_from(21), None);
        assert_eq!(record.newest(), Some(20));
    }
}
