//! A B+-tree node: one object that fills a page. A 16-byte header, then an array of 2-byte
//! entry offsets sorted by key, then free space, then the entries, packed from the end of the
//! node towards the front:
//!
//! ```text
//! 0  magic u16   2 version u8   3 level u8 (0 = leaf)   4 count u16
//! 6  heap_start u16 (lowest entry byte)   8 garbage u16 (bytes of dead entries)
//! 10 reserved (zero) to 16, then offsets[count], ..., entries
//! entry: key_len u16, value_len u16, key, value
//! ```
//!
//! An inner node's values are its children's OIDs (8 bytes, little-endian); its first key is
//! empty and stands for "below every other key". Inserting into a node with room writes the
//! new entry and shifts the offsets after it, so a change touches few bytes and the loggers
//! that diff pages log little. Nodes rely on the page checksum against damage on disk; every
//! access is bounds-checked, so a node that passed it but is still wrong (a bug, or a node of
//! another store) gives an error rather than a panic, and `check` verifies the order.

use std::cmp::Ordering;
use std::ops::Range;

pub const MAGIC: u16 = 0x4E4C; // "LN"
pub const VERSION: u8 = 1;
pub const HEADER_BYTES: usize = 16;
const OFFSET_BYTES: usize = 2;
const ENTRY_HEADER_BYTES: usize = 4;
/// Nodes with fewer entries are searched by halves: interpolation would not save a probe.
const INTERPOLATE_MIN: usize = 32;
/// Interpolation probes before a search goes on by halves: enough for evenly spread keys to
/// converge, few enough that unevenly spread ones lose little to halving.
const INTERPOLATE_STEPS: usize = 4;

/// Why a node is unreadable (the caller adds the collection and node).
pub type Damage = String;

/// The largest key plus value one entry may hold in a node of `node_len` bytes: small enough
/// that any node split in two by bytes leaves each half room for one more entry.
pub fn entry_max(node_len: usize) -> usize {
    (node_len - HEADER_BYTES) / 4 - OFFSET_BYTES - ENTRY_HEADER_BYTES
}

/// Bytes one entry takes in a node, its offset included.
pub fn entry_bytes(key_len: usize, value_len: usize) -> usize {
    OFFSET_BYTES + ENTRY_HEADER_BYTES + key_len + value_len
}

/// Byte order of two keys, as `<[u8]>::cmp`; keys of 8 bytes (every `u64` and `i64` key, and
/// each step of a search among them) compare as one big-endian integer instead of a call to
/// memcmp.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (<&[u8; 8]>::try_from(a), <&[u8; 8]>::try_from(b)) {
        (Ok(a), Ok(b)) => u64::from_be_bytes(*a).cmp(&u64::from_be_bytes(*b)),
        _ => a.cmp(b),
    }
}

#[cold]
fn entry_damage(i: usize, at: usize, what: &str) -> Damage {
    format!("entry {i} at byte {at} {what}")
}

#[inline]
fn get_u16(bytes: &[u8], at: usize) -> u16 {
    // One bounds check for both bytes.
    let two: &[u8; 2] = bytes[at..at + 2].try_into().expect("a two-byte slice");
    u16::from_le_bytes(*two)
}

fn put_u16(bytes: &mut [u8], at: usize, value: u16) {
    bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

/// A node's header fields, read and checked against the node's length.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub level: u8,
    pub count: usize,
    pub heap_start: usize,
    pub garbage: usize,
}

impl Header {
    #[inline]
    pub fn read(node: &[u8]) -> Result<Header, Damage> {
        if node.len() < HEADER_BYTES || node.len() > u16::MAX as usize {
            return Err(format!("a node of {} bytes", node.len()));
        }
        let magic = get_u16(node, 0);
        if magic != MAGIC {
            return Err(format!("not a tree node (magic {magic:#06x})"));
        }
        if node[2] != VERSION {
            return Err(format!(
                "node format version {} (this build reads {VERSION})",
                node[2]
            ));
        }
        let header = Header {
            level: node[3],
            count: get_u16(node, 4) as usize,
            heap_start: get_u16(node, 6) as usize,
            garbage: get_u16(node, 8) as usize,
        };
        let offsets_end = HEADER_BYTES + header.count * OFFSET_BYTES;
        if offsets_end > header.heap_start || header.heap_start > node.len() {
            return Err(format!(
                "{} entries with their data from byte {} do not fit {} bytes",
                header.count,
                header.heap_start,
                node.len()
            ));
        }
        if header.garbage > node.len() - header.heap_start {
            return Err(format!(
                "{} bytes of garbage in a smaller heap",
                header.garbage
            ));
        }
        Ok(header)
    }

    fn write(&self, node: &mut [u8]) {
        put_u16(node, 0, MAGIC);
        node[2] = VERSION;
        node[3] = self.level;
        put_u16(node, 4, self.count as u16);
        put_u16(node, 6, self.heap_start as u16);
        put_u16(node, 8, self.garbage as u16);
        node[10..HEADER_BYTES].fill(0);
    }

    /// Bytes free between the offsets and the entries.
    pub fn free(&self) -> usize {
        self.heap_start - HEADER_BYTES - self.count * OFFSET_BYTES
    }

    /// Bytes the live entries and their offsets take.
    pub fn used(&self, node_len: usize) -> usize {
        self.count * OFFSET_BYTES + (node_len - self.heap_start - self.garbage)
    }
}

/// What a search knows of a node's integer keys before reading it: every key is at least
/// `below` and less than `above` (`None`: not known). A descent takes a child's bracket from
/// the two separators around it in the parent, which the parent's search compared anyway,
/// and the child's search interpolates between them rather than reading its own first and
/// last keys: two cache misses fewer in a node just reached. Only a hint: a bracket that is
/// wrong costs probes, never a wrong answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bracket {
    pub below: Option<u64>,
    pub above: Option<u64>,
}

impl Bracket {
    /// Nothing known: the search reads the node's first and last keys.
    pub const UNKNOWN: Bracket = Bracket {
        below: None,
        above: None,
    };

    fn holds(&self, k: u64) -> bool {
        self.below.is_none_or(|below| k >= below) && self.above.is_none_or(|above| k < above)
    }
}

/// A search's answer and, in an inner node, the bracket of the child it leads to when known.
type SearchOutcome = (Result<usize, usize>, Option<Bracket>);

/// A node read in place.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub bytes: &'a [u8],
    pub header: Header,
}

impl<'a> Node<'a> {
    pub fn read(bytes: &'a [u8]) -> Result<Node<'a>, Damage> {
        Ok(Node {
            bytes,
            header: Header::read(bytes)?,
        })
    }

    pub fn count(&self) -> usize {
        self.header.count
    }

    pub fn is_leaf(&self) -> bool {
        self.header.level == 0
    }

    /// Bytes the entries take (their heap), a bound on what copying them needs.
    pub fn bytes_used(&self) -> usize {
        self.bytes.len() - self.header.heap_start
    }

    /// Where entry `i`'s key and value lie. On every step of a search, so the checks are
    /// inline and the error's formatting is not.
    #[inline]
    pub(crate) fn ranges(&self, i: usize) -> Result<(Range<usize>, Range<usize>), Damage> {
        debug_assert!(i < self.header.count);
        let at = get_u16(self.bytes, HEADER_BYTES + i * OFFSET_BYTES) as usize;
        if at < self.header.heap_start || at + ENTRY_HEADER_BYTES > self.bytes.len() {
            return Err(entry_damage(i, at, "lies outside the entries"));
        }
        let key_len = get_u16(self.bytes, at) as usize;
        let value_len = get_u16(self.bytes, at + 2) as usize;
        let key = at + ENTRY_HEADER_BYTES..at + ENTRY_HEADER_BYTES + key_len;
        let value = key.end..key.end + value_len;
        if value.end > self.bytes.len() {
            return Err(entry_damage(i, at, "runs past the node"));
        }
        Ok((key, value))
    }

    /// Entry `i`'s key (what a search needs: not the value's bounds). On every probe of a
    /// search: one bounds check per read, the error's formatting out of line.
    #[inline]
    pub fn key(&self, i: usize) -> Result<&'a [u8], Damage> {
        debug_assert!(i < self.header.count);
        let at = get_u16(self.bytes, HEADER_BYTES + i * OFFSET_BYTES) as usize;
        let head = match self.bytes.get(at..at + ENTRY_HEADER_BYTES) {
            Some(head) if at >= self.header.heap_start => head,
            _ => return Err(entry_damage(i, at, "lies outside the entries")),
        };
        let key_len = u16::from_le_bytes([head[0], head[1]]) as usize;
        let start = at + ENTRY_HEADER_BYTES;
        self.bytes
            .get(start..start + key_len)
            .ok_or_else(|| entry_damage(i, at, "runs past the node"))
    }

    #[inline]
    pub fn value(&self, i: usize) -> Result<&'a [u8], Damage> {
        let (_, value) = self.ranges(i)?;
        Ok(&self.bytes[value])
    }

    #[inline]
    pub fn entry(&self, i: usize) -> Result<(&'a [u8], &'a [u8]), Damage> {
        let (key, value) = self.ranges(i)?;
        Ok((&self.bytes[key], &self.bytes[value]))
    }

    /// Where `key` is among the entries: `Ok(i)` if entry `i` has it, `Err(i)` if it would go
    /// before entry `i`.
    pub fn search(&self, key: &[u8]) -> Result<Result<usize, usize>, Damage> {
        self.search_within(key, None).map(|(found, _)| found)
    }

    /// [`Node::search`] in a node whose keys the caller knows to lie in `bracket` (from the
    /// separators around it in its parent), also returning the bracket of the child the
    /// answer leads to in an inner node, when the search compared the keys that bound it
    /// anyway. Integer keys only; `None` either way for other keys.
    pub fn search_within(
        &self,
        key: &[u8],
        bracket: Option<Bracket>,
    ) -> Result<(Result<usize, usize>, Option<Bracket>), Damage> {
        if let Ok(wide) = <[u8; 8]>::try_from(key) {
            let k = u64::from_be_bytes(wide);
            if self.header.count >= INTERPOLATE_MIN {
                if let Some(found) = self.search_u64(key, k, bracket)? {
                    return Ok(found);
                }
            } else {
                let outer = bracket.filter(|b| b.holds(k)).unwrap_or(Bracket::UNKNOWN);
                let first_real = usize::from(self.header.level > 0);
                return self.halve_u64(key, k, first_real, self.header.count, outer);
            }
        }
        Ok((self.binary_search(key, 0, self.header.count)?, None))
    }

    /// Binary search for `key` among entries `lo..hi`, which the caller knows bound it: the
    /// entries before `lo` are below it and those from `hi` on above.
    fn binary_search(
        &self,
        key: &[u8],
        mut lo: usize,
        mut hi: usize,
    ) -> Result<Result<usize, usize>, Damage> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match compare_keys(self.key(mid)?, key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Search for an 8-byte key (`k` as an integer) by interpolation: each probe goes where
    /// `k` would lie if the keys between the two that bracket it were evenly spread, and the
    /// probe's key narrows the bracket. Each probe is a cache miss (the key's offset, then the
    /// key); for evenly spread integer keys a full leaf takes three to five probes where a
    /// search by halves takes nine. The first bracket is the caller's when it holds `k`;
    /// otherwise the node's first and last keys, two probes more. After
    /// [`INTERPOLATE_STEPS`] probes, or at a key that is not 8 bytes wide, the search goes on
    /// by halves, so keys spread unevenly cost a few probes more than halving, never a walk.
    /// `None` when the first or last key is needed and is not 8 bytes wide (the caller
    /// searches by halves). Only the choice of probes depends on the interpolation and on
    /// the caller's bracket; every answer comes from comparing keys, so it is exact for any
    /// sorted node, whatever bracket it is given.
    fn search_u64(
        &self,
        key: &[u8],
        k: u64,
        outer: Option<Bracket>,
    ) -> Result<Option<SearchOutcome>, Damage> {
        let count = self.header.count;
        let outer = outer.filter(|b| b.holds(k)).unwrap_or(Bracket::UNKNOWN);
        // An inner node's first key is empty: below every key, never probed.
        let first_real = usize::from(self.header.level > 0);
        // The answer lies in start..=end: every entry before `start` is below `k` and every
        // entry from `end` on above it. `k_lo` and `k_hi` are the keys at `start - 1` and
        // `end`, or the outer bracket's bounds where those lie outside the node.
        let (mut start, mut end) = (first_real, count);
        // A side the caller could not bound is bounded by the node's own key there.
        let mut k_lo = if let Some(below) = outer.below {
            below
        } else {
            let Ok(first) = <[u8; 8]>::try_from(self.key(first_real)?) else {
                return Ok(None);
            };
            let first = u64::from_be_bytes(first);
            match first.cmp(&k) {
                Ordering::Greater => {
                    let child = Bracket {
                        below: None,
                        above: Some(first),
                    };
                    return Ok(Some((Err(first_real), Some(child))));
                }
                Ordering::Equal => {
                    let child = Bracket {
                        below: Some(first),
                        above: None,
                    };
                    return Ok(Some((Ok(first_real), Some(child))));
                }
                Ordering::Less => {
                    start = first_real + 1;
                    first
                }
            }
        };
        let mut k_hi = if let Some(above) = outer.above {
            above
        } else {
            let Ok(last) = <[u8; 8]>::try_from(self.key(count - 1)?) else {
                return Ok(None);
            };
            let last = u64::from_be_bytes(last);
            let child = Bracket {
                below: Some(last),
                above: None,
            };
            match last.cmp(&k) {
                Ordering::Less => return Ok(Some((Err(count), Some(child)))),
                Ordering::Equal => return Ok(Some((Ok(count - 1), Some(child)))),
                Ordering::Greater => {
                    end = count - 1;
                    last
                }
            }
        };
        for _ in 0..INTERPOLATE_STEPS {
            if start == end {
                // Entry `end - 1` is the child whose keys lie between the two bounds.
                let child = Bracket {
                    below: Some(k_lo),
                    above: Some(k_hi),
                };
                return Ok(Some((Err(end), Some(child))));
            }
            debug_assert!(start < end && k_lo <= k && k < k_hi);
            // In floating point: a 128-bit division costs more than the cache miss it saves.
            let width = (end - start) as f64;
            let fraction = (k - k_lo) as f64 / (k_hi - k_lo) as f64;
            let probe = start + ((fraction * width) as usize).min(end - start - 1);
            debug_assert!(probe >= start && probe < end);
            let probed = self.key(probe)?;
            let Ok(wide) = <[u8; 8]>::try_from(probed) else {
                // Not an integer to interpolate with: halve from here.
                let found = self.halve_past(key, probed, probe, start, end)?;
                return Ok(Some((found, None)));
            };
            let at = u64::from_be_bytes(wide);
            match at.cmp(&k) {
                Ordering::Equal => {
                    let child = Bracket {
                        below: Some(at),
                        above: (probe + 1 == end).then_some(k_hi),
                    };
                    return Ok(Some((Ok(probe), Some(child))));
                }
                Ordering::Less => (start, k_lo) = (probe + 1, at),
                Ordering::Greater => (end, k_hi) = (probe, at),
            }
        }
        let bracket = Bracket {
            below: Some(k_lo),
            above: Some(k_hi),
        };
        self.halve_u64(key, k, start, end, bracket).map(Some)
    }

    /// Where `key` is among entries `start..end`, which bound it, given the key `probed` at
    /// `probe` inside them: the search by bytes goes on from there, on the side it lies.
    fn halve_past(
        &self,
        key: &[u8],
        probed: &[u8],
        probe: usize,
        start: usize,
        end: usize,
    ) -> Result<Result<usize, usize>, Damage> {
        match compare_keys(probed, key) {
            Ordering::Equal => Ok(Ok(probe)),
            Ordering::Less => self.binary_search(key, probe + 1, end),
            Ordering::Greater => self.binary_search(key, start, probe),
        }
    }

    /// Search by halves for an 8-byte key (`k` as an integer) among entries `start..end`,
    /// which the caller knows bound it, `bracket` holding the keys (or the outer bounds) at
    /// `start - 1` and `end`. Like the interpolation it keeps the last key compared on either
    /// side, so it too returns the bracket of the child it leads to: small nodes (a root of a
    /// few children) pass brackets down as large ones do.
    fn halve_u64(
        &self,
        key: &[u8],
        k: u64,
        mut start: usize,
        mut end: usize,
        bracket: Bracket,
    ) -> Result<SearchOutcome, Damage> {
        let Bracket {
            below: mut k_lo,
            above: mut k_hi,
        } = bracket;
        while start < end {
            let mid = start + (end - start) / 2;
            let probed = self.key(mid)?;
            let Ok(wide) = <[u8; 8]>::try_from(probed) else {
                // A key of another width: no integers to keep, halve on by bytes.
                return Ok((self.halve_past(key, probed, mid, start, end)?, None));
            };
            let at = u64::from_be_bytes(wide);
            match at.cmp(&k) {
                Ordering::Equal => {
                    let child = Bracket {
                        below: Some(at),
                        above: k_hi.filter(|_| mid + 1 == end),
                    };
                    return Ok((Ok(mid), Some(child)));
                }
                Ordering::Less => (start, k_lo) = (mid + 1, Some(at)),
                Ordering::Greater => (end, k_hi) = (mid, Some(at)),
            }
        }
        // Entry `end - 1` is the child whose keys lie between the two bounds.
        let child = Bracket {
            below: k_lo,
            above: k_hi,
        };
        Ok((Err(end), Some(child)))
    }

    /// The child of an inner node whose keys include `key`: the last entry whose key is at
    /// most `key` (the empty first key is below every key).
    pub fn child_for(&self, key: &[u8]) -> Result<usize, Damage> {
        self.child_within(key, None).map(|(i, _)| i)
    }

    /// [`Node::child_for`] in a node whose keys lie in `bracket`, with the child's bracket
    /// when the search learnt it (see [`Node::search_within`]).
    pub fn child_within(
        &self,
        key: &[u8],
        bracket: Option<Bracket>,
    ) -> Result<(usize, Option<Bracket>), Damage> {
        if self.header.count == 0 {
            return Err("an inner node without children".into());
        }
        let (found, child) = self.search_within(key, bracket)?;
        Ok(match found {
            Ok(i) => (i, child),
            Err(i) => (i.saturating_sub(1), child),
        })
    }

    /// Child `i`'s OID.
    pub fn child(&self, i: usize) -> Result<lodestore_core::Oid, Damage> {
        let value = self.value(i)?;
        let raw: [u8; 8] = value
            .try_into()
            .map_err(|_| format!("child {i} is {} bytes, not an OID", value.len()))?;
        let oid = lodestore_core::Oid(u64::from_le_bytes(raw));
        if oid.is_null() {
            return Err(format!("child {i} is the null OID"));
        }
        Ok(oid)
    }

    /// Every entry, copied.
    pub fn entries(&self) -> Result<Vec<Entry>, Damage> {
        (0..self.header.count)
            .map(|i| {
                let (key, value) = self.entry(i)?;
                Ok((EntryBytes::from_slice(key), EntryBytes::from_slice(value)))
            })
            .collect()
    }
}

/// An entry copied out of a node: key and value bytes.
pub type Entry = (EntryBytes, EntryBytes);

/// A key or value copied out of a node: inline up to 16 bytes, so that splitting a node of
/// integer keys, or of OIDs, allocates nothing per entry (a leaf holds hundreds).
pub type EntryBytes = smallvec::SmallVec<[u8; 16]>;

/// An entry holding copies of `key` and `value`.
pub fn entry(key: &[u8], value: &[u8]) -> Entry {
    (EntryBytes::from_slice(key), EntryBytes::from_slice(value))
}

/// Formats `node` as an empty node of `level`.
pub fn init(node: &mut [u8], level: u8) -> Header {
    debug_assert!(node.len() <= u16::MAX as usize);
    let header = Header {
        level,
        count: 0,
        heap_start: node.len(),
        garbage: 0,
    };
    header.write(node);
    node[HEADER_BYTES..].fill(0);
    header
}

/// Writes `entries` (sorted) into `node` as a fresh node of `level`, and returns its header.
/// The caller made sure they fit.
pub fn build(node: &mut [u8], level: u8, entries: &[Entry]) -> Header {
    debug_assert!(bytes_of(entries) + HEADER_BYTES <= node.len());
    let mut header = init(node, level);
    for (i, (key, value)) in entries.iter().enumerate() {
        append(node, &mut header, i, key, value);
    }
    header.write(node);
    header
}

/// Bytes `entries` take in a node, offsets included.
pub fn bytes_of(entries: &[Entry]) -> usize {
    entries
        .iter()
        .map(|(k, v)| entry_bytes(k.len(), v.len()))
        .sum()
}

/// Whether `entries` fit a node of `node_len` bytes.
pub fn fits(entries: &[Entry], node_len: usize) -> bool {
    HEADER_BYTES + bytes_of(entries) <= node_len
}

/// Writes one entry at index `i` of the offsets; the node has room.
/// Writes an entry at index `i` into the free space of `node`, whose header is `header`:
/// updates `header`, which the caller writes back.
fn append(node: &mut [u8], header: &mut Header, i: usize, key: &[u8], value: &[u8]) {
    let len = ENTRY_HEADER_BYTES + key.len() + value.len();
    debug_assert!(header.free() >= len + OFFSET_BYTES);
    let at = header.heap_start - len;
    put_u16(node, at, key.len() as u16);
    put_u16(node, at + 2, value.len() as u16);
    node[at + ENTRY_HEADER_BYTES..at + ENTRY_HEADER_BYTES + key.len()].copy_from_slice(key);
    node[at + ENTRY_HEADER_BYTES + key.len()..at + len].copy_from_slice(value);
    let offsets = HEADER_BYTES + i * OFFSET_BYTES;
    let offsets_end = HEADER_BYTES + header.count * OFFSET_BYTES;
    node.copy_within(offsets..offsets_end, offsets + OFFSET_BYTES);
    put_u16(node, offsets, at as u16);
    header.count += 1;
    header.heap_start = at;
}

/// Inserts an entry at index `i` in place, compacting the node first if its free space is
/// fragmented. False (and the node untouched) if it does not fit even so.
pub fn insert_at(node: &mut [u8], i: usize, key: &[u8], value: &[u8]) -> Result<bool, Damage> {
    let header = Header::read(node)?;
    insert_planned(node, header, i, key, value)
}

/// [`insert_at`] into a node whose header `header` the caller read when it planned the
/// insert (the node unchanged since): an insert reads the header once.
pub fn insert_planned(
    node: &mut [u8],
    mut header: Header,
    i: usize,
    key: &[u8],
    value: &[u8],
) -> Result<bool, Damage> {
    debug_assert_eq!(
        Header::read(node).map(|h| (h.level, h.count, h.heap_start, h.garbage)),
        Ok((
            header.level,
            header.count,
            header.heap_start,
            header.garbage
        )),
        "the node changed since its insert was planned"
    );
    let need = entry_bytes(key.len(), value.len());
    if header.free() < need {
        if header.free() + header.garbage < need {
            return Ok(false);
        }
        let entries = Node::read(node)?.entries()?;
        header = build(node, header.level, &entries);
    }
    append(node, &mut header, i, key, value);
    header.write(node);
    Ok(true)
}

/// Removes entry `i` in place; its bytes become garbage until the node is next compacted.
pub fn remove_at(node: &mut [u8], i: usize) -> Result<(), Damage> {
    let view = Node::read(node)?;
    let (key, value) = view.entry(i)?;
    let dead = ENTRY_HEADER_BYTES + key.len() + value.len();
    let mut header = view.header;
    let offsets = HEADER_BYTES + i * OFFSET_BYTES;
    let offsets_end = HEADER_BYTES + header.count * OFFSET_BYTES;
    node.copy_within(offsets + OFFSET_BYTES..offsets_end, offsets);
    put_u16(node, offsets_end - OFFSET_BYTES, 0);
    header.count -= 1;
    header.garbage += dead;
    if header.count == 0 {
        header.heap_start = node.len();
        header.garbage = 0;
    }
    header.write(node);
    Ok(())
}

/// Replaces entry `i`'s value in place when the new one has the same length. False if not.
pub fn overwrite_value(node: &mut [u8], i: usize, value: &[u8]) -> Result<bool, Damage> {
    let (_, range) = Node::read(node)?.ranges(i)?;
    if range.len() != value.len() {
        return Ok(false);
    }
    node[range].copy_from_slice(value);
    Ok(true)
}

/// The bytes of a node that one change writes, as offsets in the node: up to three ranges,
/// the unused ones empty. The detector copies only these before the change, so a change must
/// stay inside its ranges (checked in debug builds).
pub type Writes = [Range<usize>; 3];

/// All of a node: a change that rebuilds it.
pub fn whole(node_len: usize) -> Writes {
    [0..node_len, 0..0, 0..0]
}

/// What [`insert_at`] of an entry at index `i` writes: the header, the offsets from `i` on
/// (they shift by one) and the new entry's bytes below the heap; all of the node when it
/// must be compacted first. `None` when the entry does not fit even so.
pub fn insert_writes(
    node: &Node<'_>,
    i: usize,
    key_len: usize,
    value_len: usize,
) -> Option<Writes> {
    let header = node.header;
    let need = entry_bytes(key_len, value_len);
    if header.free() >= need {
        let entry = need - OFFSET_BYTES;
        Some([
            0..HEADER_BYTES,
            HEADER_BYTES + i * OFFSET_BYTES..HEADER_BYTES + (header.count + 1) * OFFSET_BYTES,
            header.heap_start - entry..header.heap_start,
        ])
    } else if header.free() + header.garbage >= need {
        Some(whole(node.bytes.len()))
    } else {
        None
    }
}

/// What [`remove_at`] of entry `i` writes: the header and the offsets from `i` on.
pub fn remove_writes(node: &Node<'_>, i: usize) -> Writes {
    [
        0..HEADER_BYTES,
        HEADER_BYTES + i * OFFSET_BYTES..HEADER_BYTES + node.header.count * OFFSET_BYTES,
        0..0,
    ]
}

/// What [`overwrite_value`] of entry `i` with a value of `value_len` bytes writes: the value,
/// if it has that length (else the overwrite cannot be done in place).
pub fn overwrite_writes(
    node: &Node<'_>,
    i: usize,
    value_len: usize,
) -> Result<Option<Writes>, Damage> {
    let (_, value) = node.ranges(i)?;
    Ok((value.len() == value_len).then_some([value, 0..0, 0..0]))
}

/// The first byte where `after` differs from `before` outside `writes`, if any.
pub fn changed_outside(before: &[u8], after: &[u8], writes: &Writes) -> Option<usize> {
    before
        .iter()
        .zip(after)
        .enumerate()
        .find(|(at, (b, a))| b != a && !writes.iter().any(|w| w.contains(at)))
        .map(|(at, _)| at)
}

/// Panics (in debug builds) if `after` differs from `before` outside `writes`: a change that
/// wrote bytes it did not declare would leave them out of the log.
pub fn debug_assert_within(before: &[u8], after: &[u8], writes: &Writes) {
    if cfg!(debug_assertions) {
        if let Some(at) = changed_outside(before, after, writes) {
            panic!("byte {at} of a node changed outside the declared writes {writes:?}");
        }
    }
}

/// Where to split `entries` so each half holds about half the bytes; both halves non-empty.
pub fn split_point(entries: &[Entry]) -> usize {
    debug_assert!(entries.len() >= 2);
    let total = bytes_of(entries);
    let mut running = 0;
    for (i, (key, value)) in entries.iter().enumerate() {
        running += entry_bytes(key.len(), value.len());
        if running * 2 >= total {
            return (i + 1).clamp(1, entries.len() - 1);
        }
    }
    entries.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const LEN: usize = 1024;

    proptest! {
        /// The integer fast path orders keys exactly as their bytes do.
        #[test]
        fn keys_compare_as_their_bytes(
            a in proptest::collection::vec(any::<u8>(), 0..12),
            b in proptest::collection::vec(any::<u8>(), 0..12),
            x: u64,
            y: u64,
        ) {
            prop_assert_eq!(compare_keys(&a, &b), a.cmp(&b));
            let (x, y) = (x.to_be_bytes(), y.to_be_bytes());
            prop_assert_eq!(compare_keys(&x, &y), x.cmp(&y));
        }

        /// The search finds what a scan of the entries finds, for integer keys spread evenly
        /// or bunched, for nodes with an empty first key (inner nodes) and for keys of other
        /// widths among the 8-byte ones, with or without a bracket from outside, right or
        /// wrong; and the bracket it gives a child is the one its separators give.
        #[test]
        fn search_agrees_with_a_scan(
            keys in proptest::collection::btree_set(
                prop_oneof![
                    any::<u64>().prop_map(|k| k.to_be_bytes().to_vec()),
                    (0u64..64).prop_map(|k| k.to_be_bytes().to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..10),
                ],
                0..120,
            ),
            inner: bool,
            probes in proptest::collection::vec(
                prop_oneof![
                    any::<u64>().prop_map(|k| k.to_be_bytes().to_vec()),
                    (0u64..70).prop_map(|k| k.to_be_bytes().to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..10),
                ],
                1..40,
            ),
            slack in (0u64..1 << 40, 0u64..1 << 40),
            random in (proptest::option::of(any::<u64>()), proptest::option::of(any::<u64>()))
                .prop_map(|(below, above)| Bracket { below, above }),
        ) {
            let mut entries: Vec<Entry> =
                keys.iter().map(|k| entry(k, &[1u8; 8])).collect();
            if inner {
                match entries.first_mut() {
                    Some(first) => first.0.clear(),
                    None => entries.push(entry(&[], &[1u8; 8])),
                }
                entries.dedup_by(|a, b| a.0 == b.0);
            }
            let mut node = vec![0u8; 4096];
            prop_assume!(fits(&entries, node.len()));
            build(&mut node, u8::from(inner), &entries);
            let view = Node::read(&node).unwrap();
            let mut all_probes = probes;
            all_probes.extend(entries.iter().map(|(k, _)| k.to_vec()));
            // A bracket that holds every integer key of the node, as a parent's separators
            // give, and one drawn at random, which need not.
            let ints: Vec<u64> = entries
                .iter()
                .filter_map(|(k, _)| <[u8; 8]>::try_from(k.as_slice()).ok())
                .map(u64::from_be_bytes)
                .collect();
            let valid = Bracket {
                below: ints.iter().min().map(|&m| m.saturating_sub(slack.0)),
                above: ints
                    .iter()
                    .max()
                    .and_then(|&m| m.checked_add(1)?.checked_add(slack.1)),
            };
            for probe in all_probes {
                let expected = entries.binary_search_by(|(k, _)| k.as_slice().cmp(&probe));
                prop_assert_eq!(view.search(&probe).unwrap(), expected, "key {:?}", probe);
                for outer in [Some(valid), Some(random), None] {
                    let (found, child) = view.search_within(&probe, outer).unwrap();
                    prop_assert_eq!(found, expected, "key {:?} in {:?}", probe, outer);
                    let (Some(child), true) = (child, inner) else { continue };
                    // In an inner node the bracket returned is the one the child's
                    // separators give: its own key and the next, or the outer bracket's
                    // bounds past the node's first and last separators.
                    // (A bound it could not know is left unknown.)
                    let k = u64::from_be_bytes(probe.as_slice().try_into().unwrap());
                    let outer = outer.filter(|b| b.holds(k)).unwrap_or(Bracket::UNKNOWN);
                    let c = match found { Ok(i) => i, Err(i) => i - 1 };
                    let int = |i: usize| {
                        <[u8; 8]>::try_from(entries[i].0.as_slice()).ok().map(u64::from_be_bytes)
                    };
                    let below = if c == 0 { outer.below } else { int(c) };
                    let above = if c + 1 == entries.len() { outer.above } else { int(c + 1) };
                    prop_assert_eq!(child.below, below, "key {} child {}", k, c);
                    prop_assert!(child.above.is_none() || child.above == above, "key {} child {}", k, c);
                    prop_assert!(child.holds(k));
                }
            }
        }

        /// Entries inserted and removed in place read back as a sorted map holds them.
        #[test]
        fn a_node_holds_what_a_map_holds(
            ops in proptest::collection::vec((any::<bool>(), 0u8..40, 0usize..30), 1..200)
        ) {
            let mut node = vec![0u8; LEN];
            init(&mut node, 0);
            let mut model = BTreeMap::new();
            for (insert, key, value_len) in ops {
                let key = vec![key];
                let found = Node::read(&node).unwrap().search(&key).unwrap();
                match (insert, found) {
                    (true, Ok(_)) | (false, Err(_)) => {}
                    (true, Err(i)) => {
                        let value = vec![key[0]; value_len];
                        let before = node.clone();
                        let writes = insert_writes(&Node::read(&before).unwrap(), i, 1, value_len);
                        let inserted = insert_at(&mut node, i, &key, &value).unwrap();
                        // The plan knows whether it fits, and the insert stays inside it.
                        prop_assert_eq!(inserted, writes.is_some());
                        if let Some(writes) = writes {
                            prop_assert_eq!(changed_outside(&before, &node, &writes), None);
                            model.insert(key, value);
                        }
                    }
                    (false, Ok(i)) => {
                        let before = node.clone();
                        let writes = remove_writes(&Node::read(&before).unwrap(), i);
                        remove_at(&mut node, i).unwrap();
                        prop_assert_eq!(changed_outside(&before, &node, &writes), None);
                        model.remove(&key);
                    }
                }
                let view = Node::read(&node).unwrap();
                let entries: BTreeMap<_, _> = view
                    .entries()
                    .unwrap()
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect();
                prop_assert_eq!(&entries, &model);
                prop_assert_eq!(view.entries().unwrap().len(), model.len());
            }
        }
    }

    #[test]
    fn a_write_outside_the_plan_is_found() {
        let mut node = vec![0u8; LEN];
        init(&mut node, 0);
        let before = node.clone();
        insert_at(&mut node, 0, b"key", b"value").unwrap();
        let header_only = [0..HEADER_BYTES, 0..0, 0..0];
        assert_eq!(
            changed_outside(&before, &node, &header_only),
            Some(HEADER_BYTES)
        );
    }

    #[test]
    fn a_damaged_header_is_an_error_not_a_panic() {
        let mut node = vec![0u8; LEN];
        init(&mut node, 0);
        insert_at(&mut node, 0, b"key", b"value").unwrap();
        let mut bad = node.clone();
        bad[0] ^= 1;
        assert!(Node::read(&bad).is_err());
        let mut bad = node.clone();
        put_u16(&mut bad, 4, 600);
        assert!(Node::read(&bad).is_err());
        let mut bad = node.clone();
        put_u16(&mut bad, HEADER_BYTES, (LEN - 2) as u16);
        assert!(Node::read(&bad).unwrap().entry(0).is_err());
    }

    #[test]
    fn a_split_leaves_both_halves_room_for_the_largest_entry() {
        let max = entry_max(LEN);
        let entries: Vec<Entry> = (0..3u8).map(|i| entry(&[i], &vec![0; max - 1])).collect();
        assert!(!fits(&entries, LEN) || entries.len() < 4);
        let at = split_point(&entries);
        assert!(fits(&entries[..at], LEN) && fits(&entries[at..], LEN));
    }
}
