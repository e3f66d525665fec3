//! The recovery buffer (QuickStore section 3.2.1): pre-images of the pieces a transaction is
//! changing (whole pages, blocks, cards or objects), in a bounded ring of bytes with FIFO
//! replacement. When a new piece does not fit, the oldest entries leave first; the caller
//! generates their log records before they go.
//!
//! Entries can also die out of order (their page was logged early because it left the client
//! cache, or its piece was replaced by a whole-page copy); a dead entry's bytes come back when
//! the ring's head passes it, so the buffer never holds more than its capacity.

use lodestore_core::PageId;
use std::collections::VecDeque;

/// What a pre-image covers, so the detector can re-arm it when the entry leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granule {
    /// The whole page.
    Page,
    /// `count` consecutive units from `first`, of the detector's unit size (blocks or cards):
    /// a run copied by one write is one entry.
    Units { first: u32, count: u32 },
    /// The object in this slot.
    Object(u16),
}

/// One pre-image.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub page: PageId,
    pub granule: Granule,
    /// Offset of the piece in its page.
    pub at: u32,
    pub len: u32,
    /// Where its bytes start in the ring.
    start: usize,
    /// Bytes skipped at the end of the ring before it (it did not fit there).
    skipped: usize,
    pub live: bool,
}

/// Where the ring starts: a page boundary (of the smallest page size).
const RING_ALIGN: usize = 4096;

/// Numbers entries for their whole life, so they can be found after older ones left.
pub type EntrySeq = u64;

pub struct RecoveryBuffer {
    /// The ring's bytes start at `ring_at` of this allocation, on a page boundary: a page's
    /// pre-image then lies as the page does in its frame, and the diff's wide loads never
    /// straddle a cache line (a misaligned operand made each one two).
    storage: Box<[u8]>,
    ring_at: usize,
    capacity: usize,
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`.
    front_seq: EntrySeq,
    /// Next write position in the ring.
    tail: usize,
    /// Bytes held by entries (live or dead) and the gaps skipped before them.
    used: usize,
    live_bytes: usize,
}

impl RecoveryBuffer {
    /// A buffer of `capacity_bytes`; it must hold at least one piece of `piece_bytes_max`.
    pub fn new(capacity_bytes: usize, piece_bytes_max: usize) -> RecoveryBuffer {
        assert!(
            capacity_bytes >= piece_bytes_max && piece_bytes_max > 0,
            "a recovery buffer of {capacity_bytes} bytes cannot hold a {piece_bytes_max}-byte piece"
        );
        // A zeroed allocation the kernel maps as the ring first reaches each page: touching
        // it all here cost every session's opening about 0.6 ms per MiB of fresh memory,
        // though a session that writes little (a load's new objects need no pre-images)
        // never reaches most of it.
        let storage = vec![0u8; capacity_bytes + RING_ALIGN - 1].into_boxed_slice();
        let ring_at = storage.as_ptr().align_offset(RING_ALIGN);
        assert!(ring_at < RING_ALIGN, "a byte pointer can always be aligned");
        RecoveryBuffer {
            storage,
            ring_at,
            capacity: capacity_bytes,
            entries: VecDeque::new(),
            front_seq: 0,
            tail: 0,
            used: 0,
            live_bytes: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes not held by any entry (a piece placed at the ring's end may still need to skip
    /// some of them).
    pub fn free_bytes(&self) -> usize {
        self.capacity - self.used
    }

    /// Bytes of live pre-images.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Where a piece of `len` bytes would go, and the bytes skipped at the ring's end to get
    /// there; `None` if the oldest entries must leave first.
    fn place(&self, len: usize) -> Option<(usize, usize)> {
        let (start, skipped) = if self.tail + len <= self.capacity {
            (self.tail, 0)
        } else {
            (0, self.capacity - self.tail)
        };
        (self.used + skipped + len <= self.capacity).then_some((start, skipped))
    }

    /// Can a piece of `len` bytes be added without an eviction?
    pub fn has_room(&self, len: usize) -> bool {
        self.place(len).is_some()
    }

    /// The oldest entry, live or dead, if any.
    pub fn oldest(&self) -> Option<(EntrySeq, Entry)> {
        self.entries.front().map(|e| (self.front_seq, *e))
    }

    /// Removes the oldest entry (after the caller generated its log records if it was live).
    pub fn pop_oldest(&mut self) {
        let entry = self.entries.pop_front().expect("an entry to pop");
        self.front_seq += 1;
        self.used -= entry.skipped + entry.len as usize;
        if entry.live {
            self.live_bytes -= entry.len as usize;
        }
        if self.entries.is_empty() {
            debug_assert_eq!(self.used, 0);
            self.tail = 0;
        }
    }

    /// The ring space for a piece of `len` bytes, to be filled before `push_reserved`. The
    /// caller made room first (`has_room`).
    pub fn reserve(&mut self, len: usize) -> &mut [u8] {
        let (start, _) = self.place(len).expect("caller made room");
        &mut self.storage[self.ring_at + start..self.ring_at + start + len]
    }

    /// Adds the piece just written into the space `reserve(len)` gave.
    pub fn push_reserved(
        &mut self,
        page: PageId,
        granule: Granule,
        at: usize,
        len: usize,
    ) -> EntrySeq {
        let (start, skipped) = self.place(len).expect("caller made room");
        self.entries.push_back(Entry {
            page,
            granule,
            at: at as u32,
            len: len as u32,
            start,
            skipped,
            live: true,
        });
        self.tail = start + len;
        self.used += skipped + len;
        self.live_bytes += len;
        debug_assert!(self.used <= self.capacity);
        self.front_seq + self.entries.len() as u64 - 1
    }

    /// Copies `bytes` in as a new entry. The caller made room first.
    pub fn push(&mut self, page: PageId, granule: Granule, at: usize, bytes: &[u8]) -> EntrySeq {
        self.reserve(bytes.len()).copy_from_slice(bytes);
        self.push_reserved(page, granule, at, bytes.len())
    }

    /// The entry `seq`, if it is still in the ring.
    pub fn get(&self, seq: EntrySeq) -> Option<Entry> {
        let index = seq.checked_sub(self.front_seq)?;
        self.entries.get(index as usize).copied()
    }

    /// The pre-image bytes of `entry`.
    pub fn bytes(&self, entry: &Entry) -> &[u8] {
        let start = self.ring_at + entry.start;
        &self.storage[start..start + entry.len as usize]
    }

    /// Marks entry `seq` dead: its records were generated (or are no longer needed).
    pub fn kill(&mut self, seq: EntrySeq) {
        let index = seq
            .checked_sub(self.front_seq)
            .expect("entry still in the ring") as usize;
        let entry = &mut self.entries[index];
        if entry.live {
            entry.live = false;
            self.live_bytes -= entry.len as usize;
        }
    }

    /// Every live entry, oldest first.
    pub fn live(&self) -> impl Iterator<Item = (EntrySeq, Entry)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.live)
            .map(|(i, e)| (self.front_seq + i as u64, *e))
    }

    /// Empties the buffer.
    pub fn clear(&mut self) {
        self.front_seq += self.entries.len() as u64;
        self.entries.clear();
        self.tail = 0;
        self.used = 0;
        self.live_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_pieces_lie_on_page_boundaries() {
        let mut buffer = RecoveryBuffer::new(3 * 8192, 8192);
        let page = vec![7u8; 8192];
        for n in 0..3u32 {
            let seq = buffer.push(PageId(n), Granule::Page, 0, &page);
            let entry = buffer.get(seq).expect("just pushed");
            let bytes = buffer.bytes(&entry);
            assert_eq!(bytes, &page[..]);
            assert_eq!(
                bytes.as_ptr() as usize % RING_ALIGN,
                0,
                "page {n} misaligned"
            );
        }
    }

    #[test]
    fn oldest_entries_leave_first_and_space_comes_back() {
        let mut buffer = RecoveryBuffer::new(100, 40);
        let a = buffer.push(PageId(1), Granule::Page, 0, &[1; 40]);
        let b = buffer.push(PageId(2), Granule::Page, 0, &[2; 40]);
        assert!(!buffer.has_room(40));
        assert_eq!(buffer.oldest().unwrap().0, a);
        buffer.pop_oldest();
        assert!(buffer.has_room(40));
        let c = buffer.push(
            PageId(3),
            Granule::Units { first: 1, count: 1 },
            8,
            &[3; 40],
        );
        // c wrapped to the ring's start: 20 bytes at the end were skipped.
        assert_eq!(buffer.bytes(&buffer.get(c).unwrap()), &[3; 40]);
        assert_eq!(buffer.bytes(&buffer.get(b).unwrap()), &[2; 40]);
        assert!(!buffer.has_room(1));
        buffer.pop_oldest();
        assert!(buffer.has_room(40));
        assert_eq!(buffer.get(a).map(|e| e.page), None);
    }

    #[test]
    fn dead_entries_hold_space_until_the_head_passes() {
        let mut buffer = RecoveryBuffer::new(64, 32);
        let a = buffer.push(PageId(1), Granule::Page, 0, &[1; 32]);
        let b = buffer.push(PageId(2), Granule::Page, 0, &[2; 32]);
        buffer.kill(b);
        assert_eq!(buffer.live_bytes(), 32);
        assert!(!buffer.has_room(32));
        assert_eq!(buffer.live().map(|(s, _)| s).collect::<Vec<_>>(), vec![a]);
        buffer.pop_oldest();
        buffer.pop_oldest();
        assert_eq!(buffer.live_bytes(), 0);
        assert!(buffer.has_room(64));
    }
}
