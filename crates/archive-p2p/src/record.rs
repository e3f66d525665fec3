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

/// What a key names: `lodestore/<namespace>/p/<page>` (a page's record),
/// `lodestore/<namespace>/i/<shard>` (a shard of the index), `lodestore/<namespace>/shards`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Page(u32),
    Index(u32),
    Shards,
}

/// The key of `kind` in `namespace`.
pub fn key(namespace: &str, kind: KeyKind) -> String {
    match kind {
        KeyKind::Page(page) => format!("lodestore/{namespace}/p/{page}"),
        KeyKind::Index(shard) => format!("lodestore/{namespace}/i/{shard}"),
        KeyKind::Shards => format!("lodestore/{namespace}/shards"),
    }
}

/// What `key` names, if it is one of ours.
pub fn kind_of_key(key: &[u8]) -> Option<KeyKind> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix("lodestore/")?;
    let (_namespace, what) = rest.split_once('/')?;
    match what.split_once('/') {
        Some(("p", n)) => n.parse().ok().map(KeyKind::Page),
        Some(("i", n)) => n.parse().ok().map(KeyKind::Index),
        None if what == "shards" => Some(KeyKind::Shards),
        _ => None,
    }
}

/// A value a peer holds, of the kind its key names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Page(PageRecord),
    Index(IndexShard),
    Shards(ShardList),
}

impl Value {
    /// `bytes` decoded as the value `key` names, checked to belong under it.
    pub fn decode_for(key: &[u8], bytes: &[u8]) -> Result<Value, String> {
        match kind_of_key(key) {
            Some(KeyKind::Page(page)) => {
                let record = PageRecord::decode(bytes)?;
                if record.page.0 != page {
                    return Err(format!(
                        "a record of page {} under page {page}'s key",
                        record.page
                    ));
                }
                Ok(Value::Page(record))
            }
            Some(KeyKind::Index(shard)) => {
                let index = IndexShard::decode(bytes)?;
                if index.shard != shard {
                    return Err(format!(
                        "index shard {} under shard {shard}'s key",
                        index.shard
                    ));
                }
                Ok(Value::Index(index))
            }
            Some(KeyKind::Shards) => ShardList::decode(bytes).map(Value::Shards),
            None => Err("a key that names no page record, index shard or shard list".into()),
        }
    }

    /// Unites `other` (decoded under the same key) into this value.
    pub fn merge(&mut self, other: Value) {
        match (self, other) {
            (Value::Page(mine), Value::Page(other)) => mine.merge(other),
            (Value::Index(mine), Value::Index(other)) => mine.merge(other),
            (Value::Shards(mine), Value::Shards(other)) => mine.0.extend(other.0),
            (mine, other) => debug_assert!(false, "{mine:?} merged with {other:?} under one key"),
        }
    }

    pub fn encoded_len(&self) -> usize {
        match self {
            Value::Page(v) => v.encoded_len(),
            Value::Index(v) => v.encoded_len(),
            Value::Shards(v) => v.encoded_len(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        match self {
            Value::Page(v) => v.encode(),
            Value::Index(v) => v.encode(),
            Value::Shards(v) => v.encode(),
        }
    }
}

/// Pages per shard of the index.
pub const PAGES_PER_SHARD: u32 = 1 << 16;

/// The shard of the index that lists `page`.
pub fn shard_of(page: PageId) -> u32 {
    page.0 / PAGES_PER_SHARD
}

/// One shard of a namespace's index: the copy times of each of its pages, and the times
/// removed, so that a store learns at open which pages have copies and how new (its page
/// map) and retention can list every copy, without a lookup per page. It merges as page
/// records do; it is written after the copies it names, so it never lacks a copy a put
/// returned for (naming one more than is held costs a lookup, never a wrong page).
///
/// ```text
/// magic "LSP2PIDX" | version u32 | shard u32 | pages n u32
/// | n x (page u32 | times t u32 | removed r u32 | t times u64 | r times u64) | crc32c u32
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexShard {
    pub shard: u32,
    /// Page -> (copy times, removed times).
    pub pages: BTreeMap<u32, (BTreeSet<u64>, BTreeSet<u64>)>,
}

/// First bytes of every index shard.
pub const INDEX_MAGIC: [u8; 8] = *b"LSP2PIDX";

impl IndexShard {
    pub fn new(shard: u32) -> IndexShard {
        IndexShard {
            shard,
            pages: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, page: PageId, time_us: u64) {
        debug_assert_eq!(shard_of(page), self.shard);
        let (times, removed) = self.pages.entry(page.0).or_default();
        if !removed.contains(&time_us) {
            times.insert(time_us);
        }
    }

    pub fn remove(&mut self, page: PageId, time_us: u64) {
        debug_assert_eq!(shard_of(page), self.shard);
        let (times, removed) = self.pages.entry(page.0).or_default();
        times.remove(&time_us);
        removed.insert(time_us);
    }

    pub fn merge(&mut self, other: IndexShard) {
        debug_assert_eq!(self.shard, other.shard);
        for (page, (times, removed)) in other.pages {
            let (mine, gone) = self.pages.entry(page).or_default();
            gone.extend(removed);
            mine.extend(times);
            mine.retain(|time| !gone.contains(time));
        }
    }

    /// Every copy listed, (page, time).
    pub fn copies(&self) -> impl Iterator<Item = (PageId, u64)> + '_ {
        self.pages
            .iter()
            .flat_map(|(&page, (times, _))| times.iter().map(move |&t| (PageId(page), t)))
    }

    pub fn encoded_len(&self) -> usize {
        let entries: usize = self
            .pages
            .values()
            .map(|(times, removed)| 12 + 8 * (times.len() + removed.len()))
            .sum();
        8 + 4 + 4 + 4 + entries + 4
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.shard.to_le_bytes());
        out.extend_from_slice(&count(self.pages.len()).to_le_bytes());
        for (page, (times, removed)) in &self.pages {
            out.extend_from_slice(&page.to_le_bytes());
            out.extend_from_slice(&count(times.len()).to_le_bytes());
            out.extend_from_slice(&count(removed.len()).to_le_bytes());
            for time in times.iter().chain(removed) {
                out.extend_from_slice(&time.to_le_bytes());
            }
        }
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<IndexShard, String> {
        let mut reader = checked_body(bytes, INDEX_MAGIC, "index shard")?;
        let shard = reader.u32()?;
        let pages = reader.u32()?;
        let mut index = IndexShard::new(shard);
        for _ in 0..pages {
            let page = reader.u32()?;
            if page / PAGES_PER_SHARD != shard {
                return Err(format!("page {page} listed in index shard {shard}"));
            }
            let (times, removed) = (reader.u32()?, reader.u32()?);
            let entry = index.pages.entry(page).or_default();
            for _ in 0..times {
                entry.0.insert(reader.u64()?);
            }
            for _ in 0..removed {
                entry.1.insert(reader.u64()?);
            }
        }
        reader.finish()?;
        Ok(index)
    }
}

/// The index shards a namespace has, so a reader knows which to fetch. Merges by union.
///
/// ```text
/// magic "LSP2PSHD" | version u32 | shards n u32 | n shard numbers u32 | crc32c u32
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardList(pub BTreeSet<u32>);

/// First bytes of every shard list.
pub const SHARDS_MAGIC: [u8; 8] = *b"LSP2PSHD";

impl ShardList {
    pub fn encoded_len(&self) -> usize {
        8 + 4 + 4 + 4 * self.0.len() + 4
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&SHARDS_MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&count(self.0.len()).to_le_bytes());
        for shard in &self.0 {
            out.extend_from_slice(&shard.to_le_bytes());
        }
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ShardList, String> {
        let mut reader = checked_body(bytes, SHARDS_MAGIC, "shard list")?;
        let n = reader.u32()?;
        let mut shards = BTreeSet::new();
        for _ in 0..n {
            shards.insert(reader.u32()?);
        }
        reader.finish()?;
        Ok(ShardList(shards))
    }
}

/// A reader over the body of `bytes` after its magic and version, the size, magic, checksum
/// and version checked.
fn checked_body<'a>(bytes: &'a [u8], magic: [u8; 8], what: &str) -> Result<Reader<'a>, String> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(format!(
            "{what} of {} bytes, above the limit of {MAX_RECORD_BYTES}",
            bytes.len()
        ));
    }
    if bytes.len() < 8 + 4 + 4 || bytes[..8] != magic {
        return Err(format!("not a {what} ({} bytes)", bytes.len()));
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    if crc32c(body) != u32::from_le_bytes(tail.try_into().expect("4 bytes")) {
        return Err(format!("{what} checksum mismatch"));
    }
    let mut reader = Reader { bytes: body, at: 8 };
    let version = reader.u32()?;
    if version != VERSION {
        return Err(format!(
            "{what} format version {version}; this build reads version {VERSION}"
        ));
    }
    Ok(reader)
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

    fn finish(&self) -> Result<(), String> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            extra => Err(format!("{extra} bytes after the last entry")),
        }
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

    proptest! {
        /// Index shards and shard lists decode to themselves and refuse damage; shards merge
        /// whatever the order, a removal winning.
        #[test]
        fn index_shards_round_trip_merge_and_refuse_damage(
            copies in proptest::collection::vec((0u32..5, 0u64..30), 0..12),
            more in proptest::collection::vec((0u32..5, 0u64..30), 0..12),
            gone in proptest::collection::vec((0u32..5, 0u64..30), 0..4),
            flip in any::<prop::sample::Index>(),
        ) {
            let shard = |list: &[(u32, u64)], removed: &[(u32, u64)]| {
                let mut index = IndexShard::new(0);
                for &(p, t) in list {
                    index.add(PageId(p), t);
                }
                for &(p, t) in removed {
                    index.remove(PageId(p), t);
                }
                index
            };
            let (x, y) = (shard(&copies, &gone), shard(&more, &[]));
            let bytes = x.encode();
            prop_assert_eq!(&IndexShard::decode(&bytes).unwrap(), &x);
            let mut damaged = bytes.clone();
            let bit = flip.index(damaged.len() * 8);
            damaged[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(IndexShard::decode(&damaged).is_err());
            let mut xy = x.clone();
            xy.merge(y.clone());
            let mut yx = y;
            yx.merge(x);
            prop_assert_eq!(&xy, &yx);
            let listed: Vec<(PageId, u64)> = xy.copies().collect();
            for &(p, t) in copies.iter().chain(&more) {
                prop_assert_eq!(listed.contains(&(PageId(p), t)), !gone.contains(&(p, t)));
            }
            let shards = ShardList(copies.iter().map(|&(p, _)| p).collect());
            prop_assert_eq!(ShardList::decode(&shards.encode()).unwrap(), shards);
        }
    }

    #[test]
    fn keys_name_their_kind_and_values_must_match_it() {
        for kind in [KeyKind::Page(7), KeyKind::Index(2), KeyKind::Shards] {
            assert_eq!(kind_of_key(key("ns", kind).as_bytes()), Some(kind));
        }
        for other in [
            "lodestore/ns/7",
            "lodestore/ns/p/x",
            "someone/else",
            "lodestore/ns/q/1",
        ] {
            assert_eq!(kind_of_key(other.as_bytes()), None, "{other}");
        }
        let page = record(7, &[1], &[]).encode();
        assert!(Value::decode_for(key("ns", KeyKind::Page(7)).as_bytes(), &page).is_ok());
        assert!(Value::decode_for(key("ns", KeyKind::Page(8)).as_bytes(), &page).is_err());
        assert!(Value::decode_for(key("ns", KeyKind::Index(0)).as_bytes(), &page).is_err());
    }

    #[test]
    fn an_index_shard_listing_a_page_of_another_shard_is_refused() {
        let mut index = IndexShard::new(1);
        index.pages.insert(3, Default::default());
        let why = IndexShard::decode(&index.encode()).unwrap_err();
        assert!(why.contains("page 3"), "{why}");
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
