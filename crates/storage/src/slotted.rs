//! Slotted pages: small objects behind a table of slots, so objects can move inside their page
//! (compaction, growth) while their OID (page, slot) stays the same.
//!
//! ```text
//! offset size field                       (after the common 32-byte page header)
//!     32    2 slot count      slots in the table, the last one always live
//!     34    2 reserved, 0
//!     36    4 data start      lowest byte used by records; records fill [data start, page end)
//!     40    4 free bytes      page size - end of slot table - bytes of live records
//!     44    4 reserved, 0
//!     48  2*n slot table      per slot: u16 record offset, 0 = free slot
//!    ...      gap
//!             records, each 8-aligned: u32 type id, u32 length | LARGE flag, payload, padding
//! ```
//!
//! A record with the LARGE flag holds a large-object descriptor (see `large`) instead of the
//! object's bytes. Record payloads start 8-aligned, so typed views of up to 8-byte alignment work.

use crate::bytes::{get_u16, get_u32, put_u16, put_u32};
use crate::page::{self, PageKind};
use lodestore_core::limits::PAGE_SIZE_MAX;
use lodestore_core::{PageId, SlotId, TypeId, VolumeId};
use std::ops::Range;

const SLOT_COUNT_AT: usize = 32;
const RESERVED_16_AT: usize = 34;
const DATA_START_AT: usize = 36;
const FREE_BYTES_AT: usize = 40;
const RESERVED_32_AT: usize = 44;
/// Where the slot table starts.
pub const SLOT_TABLE_AT: usize = 48;
/// Bytes of one slot table entry.
pub const SLOT_BYTES: usize = 2;
/// Bytes of a record header (type id, length and flags).
pub const RECORD_HEADER_BYTES: usize = 8;
/// Set in a record's length word when the payload is a large-object descriptor.
pub const LARGE_FLAG: u32 = 1 << 31;
/// Records start at multiples of this and take a multiple of it, so every record bound is one.
pub const RECORD_ALIGN: usize = 8;

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub type_id: TypeId,
    /// Payload bytes (for a large object: bytes of its descriptor).
    pub payload_len: usize,
    pub large: bool,
    /// Byte offset of the record header in the page.
    pub offset: usize,
}

impl Record {
    pub fn payload(&self) -> Range<usize> {
        let start = self.offset + RECORD_HEADER_BYTES;
        start..start + self.payload_len
    }
}

/// Bytes a record with `payload_len` payload bytes occupies.
pub fn record_bytes(payload_len: usize) -> usize {
    (RECORD_HEADER_BYTES + payload_len).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// The largest payload a slotted page of `page_size` can hold (alone, in slot 0).
pub fn payload_max(page_size: usize) -> usize {
    let room = page_size - SLOT_TABLE_AT - SLOT_BYTES;
    room / RECORD_ALIGN * RECORD_ALIGN - RECORD_HEADER_BYTES
}

/// Formats `page` as an empty slotted page.
pub fn init(page: &mut [u8], number: PageId, volume: VolumeId) {
    page::format(page, PageKind::Slotted, number, volume);
    put_u16(page, SLOT_COUNT_AT, 0);
    put_u32(page, DATA_START_AT, page.len() as u32);
    put_u32(page, FREE_BYTES_AT, (page.len() - SLOT_TABLE_AT) as u32);
}

pub fn slot_count(page: &[u8]) -> usize {
    get_u16(page, SLOT_COUNT_AT) as usize
}

pub fn free_bytes(page: &[u8]) -> usize {
    get_u32(page, FREE_BYTES_AT) as usize
}

fn data_start(page: &[u8]) -> usize {
    get_u32(page, DATA_START_AT) as usize
}

fn slot_offset(page: &[u8], slot: usize) -> usize {
    get_u16(page, SLOT_TABLE_AT + SLOT_BYTES * slot) as usize
}

fn set_slot_offset(page: &mut [u8], slot: usize, offset: usize) {
    debug_assert!(offset <= u16::MAX as usize);
    put_u16(page, SLOT_TABLE_AT + SLOT_BYTES * slot, offset as u16);
}

fn slot_table_end(page: &[u8]) -> usize {
    SLOT_TABLE_AT + SLOT_BYTES * slot_count(page)
}

/// Reads the record in `slot`, checking it lies inside the page. `None` for a free or
/// nonexistent slot; `Err` when the slot points somewhere impossible.
pub fn record(page: &[u8], slot: SlotId) -> Result<Option<Record>, String> {
    let slot = slot as usize;
    if slot >= slot_count(page) {
        return Ok(None);
    }
    if SLOT_TABLE_AT + SLOT_BYTES * (slot + 1) > page.len() {
        return Err(format!(
            "slot table of {} slots runs past the page end",
            slot_count(page)
        ));
    }
    checked_record(page, slot, slot_offset(page, slot), slot_table_end(page))
}

/// The record slot `slot` places at `offset` (`None` at 0, a free slot), checked as
/// [`record`] checks it; `table_end` is the end of the page's slot table.
#[inline]
fn checked_record(
    page: &[u8],
    slot: usize,
    offset: usize,
    table_end: usize,
) -> Result<Option<Record>, String> {
    if offset == 0 {
        return Ok(None);
    }
    match read_header(page, offset, table_end) {
        Header::OutsideRecordArea => Err(format!(
            "slot {slot} points to offset {offset}, outside the record area"
        )),
        Header::RunsPastPageEnd { payload_len } => Err(format!(
            "slot {slot}: record at offset {offset} with {payload_len} payload bytes runs past the page end"
        )),
        Header::Record(record) => Ok(Some(record)),
    }
}

/// Where the record whose header a slot places at `offset` ends, if that header can be one
/// (the same checks as [`record`]); `table_end` is the end of the page's slot table. For
/// callers that walk every slot and cannot afford to reread the slot count each time.
#[inline]
pub fn record_end(page: &[u8], offset: usize, table_end: usize) -> Option<usize> {
    match read_header(page, offset, table_end) {
        Header::Record(record) => Some(record.offset + record_bytes(record.payload_len)),
        _ => None,
    }
}

/// What a record header at a slot's offset says.
enum Header {
    OutsideRecordArea,
    RunsPastPageEnd { payload_len: usize },
    Record(Record),
}

#[inline]
fn read_header(page: &[u8], offset: usize, table_end: usize) -> Header {
    if !offset.is_multiple_of(RECORD_ALIGN)
        || offset < table_end
        || offset + RECORD_HEADER_BYTES > page.len()
    {
        return Header::OutsideRecordArea;
    }
    let length_word = get_u32(page, offset + 4);
    let payload_len = (length_word & !LARGE_FLAG) as usize;
    if offset + record_bytes(payload_len) > page.len() {
        return Header::RunsPastPageEnd { payload_len };
    }
    Header::Record(Record {
        type_id: TypeId(get_u32(page, offset)),
        payload_len,
        large: length_word & LARGE_FLAG != 0,
        offset,
    })
}

/// Can a record of `payload_len` bytes be inserted (after compaction if need be)?
pub fn can_insert(page: &[u8], payload_len: usize) -> bool {
    // The slot table is scanned only when the answer depends on it: a page being filled has
    // room for a new slot too, or not even for the record (the common answers, found from
    // the header alone).
    let (need, free) = (record_bytes(payload_len), free_bytes(page));
    if slot_count(page) >= u16::MAX as usize || need > free {
        return false;
    }
    need + SLOT_BYTES <= free || first_free_slot(page).is_some()
}

/// [`can_insert`] knowing whether the page has a free slot to reuse.
fn fits(page: &[u8], payload_len: usize, free_slot: bool) -> bool {
    let extra_slot = if free_slot { 0 } else { SLOT_BYTES };
    slot_count(page) < u16::MAX as usize
        && record_bytes(payload_len) + extra_slot <= free_bytes(page)
}

/// The first free slot of the page's table (of the part that lies inside the page).
fn first_free_slot(page: &[u8]) -> Option<usize> {
    first_free_slot_from(page, 0)
}

/// The first free slot at or after slot `from`.
fn first_free_slot_from(page: &[u8], from: usize) -> Option<usize> {
    let end = slot_table_end(page).min(page.len());
    let inside = end.saturating_sub(SLOT_TABLE_AT) / SLOT_BYTES;
    let from = from.min(inside);
    // Slot by slot up to a multiple of four, where the word-at-a-time scan starts: a word's
    // lanes below `from` cannot be masked off after its zero-lane test, as a zero lane there
    // may flag the lanes above it.
    let aligned = from.next_multiple_of(4).min(inside);
    if let Some(free) = (from..aligned).find(|&slot| slot_offset(page, slot) == 0) {
        return Some(free);
    }
    let table = &page[(SLOT_TABLE_AT + aligned * SLOT_BYTES).min(end)..end];
    // Four slots per 8-byte word, read at once: inserts scan the table of every page they
    // fill, which otherwise cost a read per slot per insert. The lowest lane flagged by the
    // zero-lane test is always a zero lane (a borrow only flags lanes above one).
    let mut words = table.chunks_exact(8);
    for (i, word) in (&mut words).enumerate() {
        let word = u64::from_le_bytes(word.try_into().expect("chunks of eight"));
        let zero_lanes = word.wrapping_sub(0x0001_0001_0001_0001) & !word & 0x8000_8000_8000_8000;
        if zero_lanes != 0 {
            return Some(aligned + i * 4 + zero_lanes.trailing_zeros() as usize / 16);
        }
    }
    let done = table.len() / 8 * 4;
    words
        .remainder()
        .chunks_exact(SLOT_BYTES)
        .position(|slot| slot == [0, 0])
        .map(|p| done + p)
        .map(|p| aligned + p)
}

/// Inserts a zero-filled record and returns its slot, or `None` when it does not fit.
pub fn insert(page: &mut [u8], type_id: TypeId, payload_len: usize, large: bool) -> Option<SlotId> {
    insert_after(page, type_id, payload_len, large, 0)
}

/// [`insert`] for a caller that knows every slot below `live_below` to be live (as one filling
/// the page, whose last insert took slot `live_below - 1`): the search for a free slot to
/// reuse starts there instead of at slot 0, so filling a page costs no scan of its table per
/// record. A wrong guess only leaves a free slot below it unused (the whole table is searched
/// when the page has no room for a new slot), never a record misplaced.
pub fn insert_after(
    page: &mut [u8],
    type_id: TypeId,
    payload_len: usize,
    large: bool,
    live_below: usize,
) -> Option<SlotId> {
    let mut reused = first_free_slot_from(page, live_below);
    if reused.is_none() && live_below > 0 && !fits(page, payload_len, false) {
        reused = first_free_slot(page);
    }
    if !fits(page, payload_len, reused.is_some()) {
        return None;
    }
    let extra_slot = if reused.is_some() { 0 } else { SLOT_BYTES };
    if data_start(page) < slot_table_end(page) + extra_slot + record_bytes(payload_len) {
        // Compact before the table grows, so the new slot entry never lands on a record.
        compact(page);
    }
    let slot = match reused {
        Some(slot) => slot,
        None => {
            let slot = slot_count(page);
            put_u16(page, SLOT_COUNT_AT, (slot + 1) as u16);
            set_slot_offset(page, slot, 0);
            let free = free_bytes(page) - SLOT_BYTES;
            put_u32(page, FREE_BYTES_AT, free as u32);
            slot
        }
    };
    place(page, slot, type_id, payload_len, large);
    Some(slot as SlotId)
}

/// Writes a fresh zeroed record for the (currently free) `slot`, compacting if the gap is short.
/// The caller has checked that the free bytes suffice.
fn place(page: &mut [u8], slot: usize, type_id: TypeId, payload_len: usize, large: bool) {
    let size = record_bytes(payload_len);
    debug_assert!(size <= free_bytes(page));
    debug_assert_eq!(slot_offset(page, slot), 0);
    if data_start(page) < slot_table_end(page) + size {
        compact(page);
    }
    let offset = data_start(page) - size;
    debug_assert!(offset >= slot_table_end(page));
    page[offset..offset + size].fill(0);
    put_u32(page, offset, type_id.0);
    let flag = if large { LARGE_FLAG } else { 0 };
    put_u32(page, offset + 4, payload_len as u32 | flag);
    put_u32(page, DATA_START_AT, offset as u32);
    set_slot_offset(page, slot, offset);
    put_u32(page, FREE_BYTES_AT, (free_bytes(page) - size) as u32);
}

/// Frees `slot`. Returns false if it held no record. Trailing free slots are dropped from the
/// table so the table never ends in a free slot.
pub fn remove(page: &mut [u8], slot: SlotId) -> bool {
    let Ok(Some(rec)) = record(page, slot) else {
        return false;
    };
    let size = record_bytes(rec.payload_len);
    page[rec.offset..rec.offset + size].fill(0);
    set_slot_offset(page, slot as usize, 0);
    let mut free = free_bytes(page) + size;
    let mut count = slot_count(page);
    while count > 0 && slot_offset(page, count - 1) == 0 {
        count -= 1;
        free += SLOT_BYTES;
    }
    put_u16(page, SLOT_COUNT_AT, count as u16);
    put_u32(page, FREE_BYTES_AT, free as u32);
    if data_start(page) == rec.offset {
        // The record was the lowest one: the gap grows back over it.
        put_u32(page, DATA_START_AT, lowest_record_offset(page) as u32);
    }
    true
}

fn lowest_record_offset(page: &[u8]) -> usize {
    (0..slot_count(page))
        .map(|s| slot_offset(page, s))
        .filter(|&o| o != 0)
        .min()
        .unwrap_or(page.len())
}

/// Changes the payload length of the record in `slot`, keeping its slot, type, flag and the
/// first `min(old, new)` payload bytes; new bytes are zero. Returns false if it does not fit.
pub fn resize(page: &mut [u8], slot: SlotId, new_len: usize) -> bool {
    let Ok(Some(rec)) = record(page, slot) else {
        return false;
    };
    let old_size = record_bytes(rec.payload_len);
    let new_size = record_bytes(new_len);
    if new_size > old_size && new_size - old_size > free_bytes(page) {
        return false;
    }
    let kept: Vec<u8> = page[rec.payload()][..rec.payload_len.min(new_len)].to_vec();
    // Release the old record (without trimming the slot table), then place the new one.
    page[rec.offset..rec.offset + old_size].fill(0);
    set_slot_offset(page, slot as usize, 0);
    put_u32(page, FREE_BYTES_AT, (free_bytes(page) + old_size) as u32);
    if data_start(page) == rec.offset {
        put_u32(page, DATA_START_AT, lowest_record_offset(page) as u32);
    }
    place(page, slot as usize, rec.type_id, new_len, rec.large);
    let placed = record(page, slot)
        .ok()
        .flatten()
        .expect("record just placed");
    page[placed.offset + RECORD_HEADER_BYTES..][..kept.len()].copy_from_slice(&kept);
    true
}

/// Packs all records against the end of the page so the gap holds every free byte.
pub fn compact(page: &mut [u8]) {
    let mut live: Vec<(usize, usize, usize)> = (0..slot_count(page))
        .filter_map(|s| {
            let offset = slot_offset(page, s);
            (offset != 0).then(|| {
                let len = (get_u32(page, offset + 4) & !LARGE_FLAG) as usize;
                (offset, record_bytes(len), s)
            })
        })
        .collect();
    // Moving the highest record first means every move goes toward the end, never over a
    // record that has not moved yet.
    live.sort_unstable_by_key(|&(offset, _, _)| std::cmp::Reverse(offset));
    let mut end = page.len();
    for (offset, size, slot) in live {
        let target = end - size;
        if target != offset {
            page.copy_within(offset..offset + size, target);
        }
        set_slot_offset(page, slot, target);
        end = target;
    }
    let table_end = slot_table_end(page);
    page[table_end..end].fill(0);
    put_u32(page, DATA_START_AT, end as u32);
    debug_assert_eq!(end - table_end, free_bytes(page));
}

/// Slots holding records, in slot order. A slot count that runs past the page end (a page
/// garbled in memory) is cut at the page end rather than read out of bounds.
pub fn live_slots(page: &[u8]) -> impl Iterator<Item = SlotId> + '_ {
    let fits = page.len().saturating_sub(SLOT_TABLE_AT) / SLOT_BYTES;
    (0..slot_count(page).min(fits))
        .filter(move |&s| slot_offset(page, s) != 0)
        .map(|s| s as SlotId)
}

/// Words of the coverage bitmap [`validate`] keeps: one bit per 8-byte unit of the largest
/// page.
const COVER_WORDS_MAX: usize = PAGE_SIZE_MAX / RECORD_ALIGN / 64;

/// Marks units `from..to` as covered; false if any of them already was.
#[inline]
fn cover(covered: &mut [u64; COVER_WORDS_MAX], from: usize, to: usize) -> bool {
    let mut unit = from;
    while unit < to {
        let word = unit / 64;
        let bit = unit % 64;
        let span = (64 - bit).min(to - unit);
        let mask = if span == 64 {
            u64::MAX
        } else {
            ((1u64 << span) - 1) << bit
        };
        if covered[word] & mask != 0 {
            return false;
        }
        covered[word] |= mask;
        unit += span;
    }
    true
}

/// The message naming two overlapping records of a page [`validate`] found to have some.
#[cold]
fn overlap(page: &[u8], count: usize) -> String {
    let mut extents: Vec<(usize, usize, usize)> = (0..count)
        .filter_map(|slot| {
            record(page, slot as SlotId)
                .ok()
                .flatten()
                .map(|r| (r.offset, r.offset + record_bytes(r.payload_len), slot))
        })
        .collect();
    extents.sort_unstable();
    extents
        .windows(2)
        .find(|pair| pair[0].1 > pair[1].0)
        .map_or_else(
            || "records overlap".to_string(),
            |pair| format!("records of slots {} and {} overlap", pair[0].2, pair[1].2),
        )
}

/// Full structural check of a slotted page whose header already verified: slot table inside
/// the page, every record aligned and inside the record area, no two records overlapping, the
/// free-byte count consistent, no trailing free slot.
pub fn validate(page: &[u8]) -> Result<(), String> {
    let page_size = page.len();
    if page_size > PAGE_SIZE_MAX {
        return Err(format!(
            "{page_size} bytes is larger than any page ({PAGE_SIZE_MAX})"
        ));
    }
    let count = slot_count(page);
    let table_end = SLOT_TABLE_AT + SLOT_BYTES * count;
    let start = data_start(page);
    if get_u16(page, RESERVED_16_AT) != 0 || get_u32(page, RESERVED_32_AT) != 0 {
        return Err("reserved slotted-header bytes are not zero".into());
    }
    if table_end > page_size {
        return Err(format!(
            "slot table of {count} slots runs past the page end"
        ));
    }
    if start < table_end || start > page_size || !start.is_multiple_of(RECORD_ALIGN) {
        return Err(format!(
            "data start {start} is outside {table_end}..={page_size} or unaligned"
        ));
    }
    if count > 0 && slot_offset(page, count - 1) == 0 {
        return Err(format!("last slot {} is free", count - 1));
    }
    // Overlaps are found by marking the 8-byte units each record covers (records and their
    // lengths are aligned to units), with no allocation or sort: this runs on every page read
    // from disk. Only a page found bad is looked at again, to name the two slots.
    let mut covered = [0u64; COVER_WORDS_MAX];
    let mut used = 0usize;
    for slot in 0..count {
        // The table was checked to fit the page above.
        let Some(rec) = checked_record(page, slot, slot_offset(page, slot), table_end)? else {
            continue;
        };
        if rec.offset < start {
            return Err(format!(
                "slot {slot} points to offset {}, below data start {start}",
                rec.offset
            ));
        }
        if rec.type_id == TypeId::ROOT_DIRECTORY && rec.large {
            return Err(format!("slot {slot}: root directory marked large"));
        }
        let end = rec.offset + record_bytes(rec.payload_len);
        debug_assert!(rec.offset.is_multiple_of(RECORD_ALIGN) && end <= page_size);
        if !cover(&mut covered, rec.offset / RECORD_ALIGN, end / RECORD_ALIGN) {
            return Err(overlap(page, count));
        }
        used += end - rec.offset;
    }
    let expected_free = page_size - table_end - used;
    if free_bytes(page) != expected_free {
        return Err(format!(
            "free-byte count says {}, records leave {expected_free}",
            free_bytes(page)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn new_page(size: usize) -> Vec<u8> {
        let mut page = vec![0u8; size];
        init(&mut page, PageId(9), 0);
        page
    }

    #[test]
    fn live_slots_of_a_garbled_slot_count_stay_inside_the_page() {
        let mut page = new_page(4096);
        put_u16(&mut page, SLOT_COUNT_AT, u16::MAX);
        page[SLOT_TABLE_AT..].fill(8);
        let fits = (4096 - SLOT_TABLE_AT) / SLOT_BYTES;
        assert_eq!(live_slots(&page).count(), fits);
    }

    #[test]
    fn insert_read_remove() {
        let mut page = new_page(4096);
        let a = insert(&mut page, TypeId(5), 3, false).unwrap();
        let b = insert(&mut page, TypeId(6), 100, false).unwrap();
        assert_eq!((a, b), (0, 1));
        let rec = record(&page, b).unwrap().unwrap();
        assert_eq!(rec.type_id, TypeId(6));
        assert_eq!(rec.payload_len, 100);
        assert_eq!(rec.payload().start % 8, 0);
        validate(&page).unwrap();
        assert!(remove(&mut page, a));
        assert!(!remove(&mut page, a));
        assert_eq!(record(&page, a).unwrap(), None);
        validate(&page).unwrap();
        assert!(remove(&mut page, b));
        assert_eq!(slot_count(&page), 0);
        assert_eq!(free_bytes(&page), 4096 - SLOT_TABLE_AT);
        validate(&page).unwrap();
    }

    #[test]
    fn largest_payload_fits_exactly() {
        for size in lodestore_core::limits::PAGE_SIZES_SUPPORTED {
            let mut page = new_page(size);
            let max = payload_max(size);
            assert!(!can_insert(&page, max + 1), "page {size}");
            insert(&mut page, TypeId(1), max, false).unwrap();
            validate(&page).unwrap();
        }
    }

    #[test]
    fn slot_table_past_the_page_is_an_error_not_a_panic() {
        let mut page = new_page(4096);
        put_u16(&mut page, SLOT_COUNT_AT, u16::MAX);
        assert!(record(&page, 3000).is_err());
        assert!(validate(&page).is_err());
    }

    #[test]
    fn slot_pointing_outside_is_reported() {
        let mut page = new_page(4096);
        insert(&mut page, TypeId(1), 10, false).unwrap();
        set_slot_offset(&mut page, 0, 4090);
        assert!(record(&page, 0).is_err());
        assert!(validate(&page).is_err());
    }

    proptest! {
        /// The word-at-a-time scan finds the same first free slot as a scan slot by slot.
        #[test]
        fn first_free_slot_matches_a_scan_by_slot(
            offsets in proptest::collection::vec(prop_oneof![3 => 1u16..=u16::MAX, 1 => Just(0u16)], 0..300),
            garbled_count in proptest::option::of(any::<u16>()),
        ) {
            let mut page = new_page(4096);
            let count = offsets.len().min((4096 - SLOT_TABLE_AT) / SLOT_BYTES);
            for (slot, &offset) in offsets[..count].iter().enumerate() {
                put_u16(&mut page, SLOT_TABLE_AT + SLOT_BYTES * slot, offset);
            }
            put_u16(&mut page, SLOT_COUNT_AT, garbled_count.unwrap_or(count as u16));
            let inside = slot_count(&page).min((4096 - SLOT_TABLE_AT) / SLOT_BYTES);
            let naive = (0..inside).find(|&s| slot_offset(&page, s) == 0);
            prop_assert_eq!(first_free_slot(&page), naive);
            for from in 0..=inside + 1 {
                let naive = (from..inside).find(|&s| slot_offset(&page, s) == 0);
                prop_assert_eq!(first_free_slot_from(&page, from), naive, "from slot {}", from);
            }
            prop_assert_eq!(first_free_slot_from(&page, usize::MAX), None);
        }

        /// Inserting with any guess of where the live slots end leaves a sound page holding
        /// every record inserted, and refuses only what does not fit.
        #[test]
        fn insert_after_any_guess_keeps_the_page_sound(
            ops in proptest::collection::vec((1usize..300, any::<bool>(), 0usize..64), 1..200),
        ) {
            let mut page = new_page(4096);
            let mut live: Vec<(SlotId, usize)> = Vec::new();
            for (n, (len, delete, guess)) in ops.into_iter().enumerate() {
                if delete && !live.is_empty() {
                    let (slot, _) = live.remove(guess % live.len());
                    prop_assert!(remove(&mut page, slot));
                    continue;
                }
                match insert_after(&mut page, TypeId(n as u32 + 2), len, false, guess) {
                    Some(slot) => {
                        prop_assert!(live.iter().all(|(s, _)| *s != slot), "slot {} given twice", slot);
                        live.push((slot, n));
                    }
                    None => prop_assert!(!can_insert(&page, len), "refused what fits"),
                }
                prop_assert!(validate(&page).is_ok(), "{:?}", validate(&page));
                for (slot, n) in &live {
                    let record = record(&page, *slot).unwrap().unwrap();
                    prop_assert_eq!(record.type_id, TypeId(*n as u32 + 2));
                }
            }
        }
    }

    #[test]
    fn insert_after_a_wrong_guess_still_reuses_the_last_free_slot_of_a_full_page() {
        let mut page = new_page(4096);
        let mut slots = 0;
        while insert(&mut page, TypeId(1), 40, false).is_some() {
            slots += 1;
        }
        assert!(remove(&mut page, 3));
        // A record of all the free bytes: no room for a new slot entry as well, so only slot 3,
        // below the guess, can take it.
        let free = free_bytes(&page);
        assert_eq!(free % RECORD_ALIGN, 0);
        let len = free - RECORD_HEADER_BYTES;
        assert!(can_insert(&page, len) && !fits(&page, len, false));
        assert_eq!(
            insert_after(&mut page, TypeId(2), len, false, slots),
            Some(3)
        );
        assert_eq!(record(&page, 3).unwrap().unwrap().type_id, TypeId(2));
    }

    #[test]
    fn a_buffer_larger_than_any_page_is_refused_not_indexed_past() {
        let mut page = vec![0u8; PAGE_SIZE_MAX * 2];
        init(&mut page[..PAGE_SIZE_MAX], PageId(9), 0);
        let error = validate(&page).unwrap_err();
        assert!(error.contains("larger than any page"), "{error}");
    }

    #[test]
    fn overlapping_records_are_named() {
        let mut page = new_page(4096);
        let a = insert(&mut page, TypeId(1), 40, false).unwrap();
        let b = insert(&mut page, TypeId(1), 40, false).unwrap();
        let at = record(&page, a).unwrap().unwrap().offset;
        // Slot b's record (below a's) moved up to end 32 bytes into a's; the free-byte count
        // is left as it was.
        let b_at = record(&page, b).unwrap().unwrap().offset;
        set_slot_offset(&mut page, b as usize, at - 16);
        page.copy_within(b_at..b_at + 8, at - 16);
        assert_eq!(
            validate(&page).unwrap_err(),
            format!("records of slots {b} and {a} overlap")
        );
    }

    proptest! {
        /// `validate` finds overlapping records exactly when a check of every pair does, and
        /// names a pair that overlaps.
        #[test]
        fn overlaps_are_found_as_every_pair_finds_them(
            records in proptest::collection::vec((0usize..60, 0usize..300), 1..10),
        ) {
            let mut page = new_page(4096);
            let count = records.len();
            put_u16(&mut page, SLOT_COUNT_AT, count as u16);
            let table_end = SLOT_TABLE_AT + SLOT_BYTES * count;
            let first_unit = table_end.div_ceil(RECORD_ALIGN);
            for (slot, &(unit, len)) in records.iter().enumerate() {
                let offset = (first_unit + unit) * RECORD_ALIGN;
                set_slot_offset(&mut page, slot, offset);
                put_u32(&mut page, offset, 1);
                put_u32(&mut page, offset + 4, len as u32);
            }
            // Headers written later may land inside earlier records: read back what is there.
            let mut extents = Vec::new();
            for slot in 0..count {
                let rec = record(&page, slot as SlotId);
                prop_assume!(rec.is_ok());
                let rec = rec.unwrap().unwrap();
                extents.push(rec.offset..rec.offset + record_bytes(rec.payload_len));
            }
            let overlapping = |x: usize, y: usize| {
                x != y && extents[x].start < extents[y].end && extents[y].start < extents[x].end
            };
            let any = (0..count).any(|x| (0..count).any(|y| overlapping(x, y)));
            let start = extents.iter().map(|e| e.start).min().unwrap();
            let used: usize = extents.iter().map(|e| e.len()).sum();
            put_u32(&mut page, DATA_START_AT, start as u32);
            put_u32(&mut page, FREE_BYTES_AT, (4096 - table_end).saturating_sub(used) as u32);
            match validate(&page) {
                Ok(()) => prop_assert!(!any),
                Err(message) => {
                    prop_assert!(any, "{}", message);
                    let named: Vec<usize> = message
                        .split(' ')
                        .filter_map(|word| word.parse().ok())
                        .collect();
                    prop_assert!(named.len() == 2 && overlapping(named[0], named[1]), "{}", message);
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize),
        Remove(usize),
        Resize(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..600).prop_map(Op::Insert),
            (0usize..64).prop_map(Op::Remove),
            (0usize..64, 0usize..900).prop_map(|(s, l)| Op::Resize(s, l)),
        ]
    }

    proptest! {
        /// Any sequence of inserts, removes and resizes keeps the page valid and every object's
        /// bytes intact, as a map from slot to bytes says they should be.
        #[test]
        fn matches_model(ops in proptest::collection::vec(op(), 1..200)) {
            let mut page = new_page(4096);
            let mut model: BTreeMap<SlotId, Vec<u8>> = BTreeMap::new();
            let mut stamp = 0u8;
            for op in ops {
                match op {
                    Op::Insert(len) => {
                        let predicted = can_insert(&page, len);
                        let inserted = insert(&mut page, TypeId(1), len, false);
                        prop_assert_eq!(predicted, inserted.is_some());
                        if let Some(slot) = inserted {
                            prop_assert!(!model.contains_key(&slot));
                            stamp = stamp.wrapping_add(1);
                            let rec = record(&page, slot).unwrap().unwrap();
                            page[rec.payload()].fill(stamp);
                            model.insert(slot, vec![stamp; len]);
                        } else {
                            let extra = if live_slots(&page).count() < slot_count(&page) { 0 } else { SLOT_BYTES };
                            prop_assert!(record_bytes(len) + extra > free_bytes(&page));
                        }
                    }
                    Op::Remove(i) => {
                        if let Some(&slot) = model.keys().nth(i % model.len().max(1)) {
                            prop_assert!(remove(&mut page, slot));
                            model.remove(&slot);
                        }
                    }
                    Op::Resize(i, len) => {
                        if let Some(&slot) = model.keys().nth(i % model.len().max(1)) {
                            if resize(&mut page, slot, len) {
                                let bytes = model.get_mut(&slot).unwrap();
                                bytes.resize(len, 0);
                            }
                        }
                    }
                }
                validate(&page).map_err(TestCaseError::fail)?;
                let used: usize = model.values().map(|v| record_bytes(v.len())).sum();
                prop_assert_eq!(free_bytes(&page), 4096 - SLOT_TABLE_AT - SLOT_BYTES * slot_count(&page) - used);
                for (slot, bytes) in &model {
                    let rec = record(&page, *slot).unwrap().unwrap();
                    prop_assert_eq!(&page[rec.payload()], &bytes[..]);
                }
                prop_assert_eq!(live_slots(&page).count(), model.len());
            }
        }
    }
}
