//! Page diffing: the ranges of a page to log, never spanning two objects. Object boundaries are
//! taken from both images (objects may have moved in between, by compaction), and the page's
//! header fields and slot table count as objects of their own. The checksum (bytes 0..4) and
//! the LSN (8..16) are never logged: the server sets them.

use crate::compare::for_each_run;
use lodestore_core::limits::PAGE_SIZE_MAX;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted::{self, RECORD_ALIGN, SLOT_BYTES, SLOT_TABLE_AT};
use std::ops::Range;

/// The ranges to log for a page that changed from `before` to `after`, merged within each
/// object by the minimal-traffic rule for records of fixed cost `header`.
///
/// The page is scanned once, its runs of changed bytes merged by the rule as they are found;
/// only if a merged range may reach an object bound are the bounds read: an unchanged page
/// costs one scan and no allocation, and its objects are not parsed for nothing.
pub fn page_ranges(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    page_ranges_into(before, after, header, &mut ranges);
    ranges
}

/// [`page_ranges`] into `ranges` (cleared first), so a caller diffing many pages allocates
/// once.
pub fn page_ranges_into(
    before: &[u8],
    after: &[u8],
    header: usize,
    ranges: &mut Vec<Range<usize>>,
) {
    page_ranges_with(before, after, header, None, ranges)
}

/// [`page_ranges_into`] for a caller that diffs the same page again and again: `bounds` keeps
/// the page's record bounds under `key` from one diff to the next (see [`PageBounds`]).
pub fn page_ranges_cached(
    before: &[u8],
    after: &[u8],
    header: usize,
    bounds: &mut PageBounds,
    key: u64,
    ranges: &mut Vec<Range<usize>>,
) {
    page_ranges_with(before, after, header, Some((bounds, key)), ranges)
}

/// [`page_ranges_into`], with the page's bounds kept in `cached` if given (the generators'
/// entry for a whole-page piece).
pub(crate) fn page_ranges_with(
    before: &[u8],
    after: &[u8],
    header: usize,
    cached: Option<(&mut PageBounds, u64)>,
    ranges: &mut Vec<Range<usize>>,
) {
    assert_eq!(before.len(), after.len());
    push_merged_runs(before, after, 0, header, ranges);
    if ranges.is_empty() {
        return;
    }
    if has_objects(before) || has_objects(after) {
        if ranges_stay_in_objects(before, after, ranges, cached) {
            return;
        }
    } else if ranges[0].start >= HEADER_FIELDS_END {
        // A page without objects whose runs all lie past the header fields: they lie in one
        // segment, which ends at the page end.
        return;
    }
    let cuts = Cuts::of(before, after);
    // Some merged range may reach a bound: the runs themselves, split at the cuts. The scan
    // is repeated rather than its runs kept on the way, which the usual page does not need.
    ranges.clear();
    for_each_run(before, after, &mut |run| ranges.push(run));
    let cuts = cuts.as_slice();
    // The segment (between cuts[k] and cuts[k + 1]) the walk is in, and the one the last
    // range lies in: ranges merge only within one segment.
    let mut segment = 0;
    let mut last_segment = usize::MAX;
    // While no run crosses a cut (the usual case: changes inside objects), the ranges are
    // written over the runs already read.
    let mut written = 0;
    let mut index = 0;
    while index < ranges.len() {
        let run = ranges[index].clone();
        while cuts[segment + 1] <= run.start {
            segment += 1;
        }
        if cuts[segment + 1] < run.end {
            break; // this run crosses a cut: the rest go to a vector of their own
        }
        if !is_server_owned(cuts[segment]..cuts[segment + 1]) {
            if written > 0
                && last_segment == segment
                && 2 * (run.start - ranges[written - 1].end) <= header
            {
                ranges[written - 1].end = run.end;
            } else {
                ranges[written] = run;
                written += 1;
            }
            last_segment = segment;
        }
        index += 1;
    }
    if index == ranges.len() {
        ranges.truncate(written);
        return;
    }
    let mut split: Vec<Range<usize>> = Vec::with_capacity(ranges.len() + RANGES_RESERVED);
    split.extend_from_slice(&ranges[..written]);
    for run in &ranges[index..] {
        // The run split at the cuts it crosses; each piece merged or appended.
        let mut start = run.start;
        while start < run.end {
            while cuts[segment + 1] <= start {
                segment += 1;
            }
            let end = run.end.min(cuts[segment + 1]);
            if !is_server_owned(cuts[segment]..cuts[segment + 1]) {
                match split.last_mut() {
                    Some(last) if last_segment == segment && 2 * (start - last.end) <= header => {
                        last.end = end
                    }
                    _ => split.push(start..end),
                }
                last_segment = segment;
            }
            start = end;
        }
    }
    *ranges = split;
}

/// Clears `ranges` and fills it with the runs of changed bytes of `before` and `after`, at
/// offset `at`, merged by the minimal-traffic rule for records of fixed cost `header` as the
/// scan finds them. These are the ranges to log whenever none reaches an object bound.
fn push_merged_runs(
    before: &[u8],
    after: &[u8],
    at: usize,
    header: usize,
    ranges: &mut Vec<Range<usize>>,
) {
    ranges.clear();
    for_each_run(before, after, &mut |run| match ranges.last_mut() {
        Some(last) if 2 * (at + run.start - last.end) <= header => last.end = at + run.end,
        _ => {
            if ranges.capacity() == 0 {
                ranges.reserve(RANGES_RESERVED); // one allocation for a typical update's runs
            }
            ranges.push(at + run.start..at + run.end)
        }
    });
}

/// The ranges of one piece of slotted `page` (bytes `at..at + before.len()`, `before` their
/// earlier copy) into `ranges` (cleared first), cut only at the objects of `page` as it is
/// now, when the merged runs of changed bytes are seen to stay inside those objects (see
/// [`page_ranges`]). False sends the caller to the per-segment diff (`ranges` then holds
/// nothing of use). A commit diffs many small pieces, so the caller keeps one vector for all
/// of them.
pub fn piece_ranges_within_objects(
    page: &[u8],
    at: usize,
    before: &[u8],
    header: usize,
    cached: Option<(&mut PageBounds, u64)>,
    ranges: &mut Vec<Range<usize>>,
) -> bool {
    let end = at + before.len();
    assert!(end <= page.len(), "piece {at}..{end} outside the page");
    ranges.clear();
    if !has_objects(page) {
        return false;
    }
    push_merged_runs(before, &page[at..end], at, header, ranges);
    // The page as both images: its bounds are the only ones that count for a piece.
    ranges.is_empty() || ranges_stay_in_objects(page, page, ranges, cached)
}

/// For two slotted images: the offset from which every cut of either image is a record bound
/// (a multiple of [`RECORD_ALIGN`]), namely the end of the larger slot table. `None` if either
/// image is not a slotted page.
fn record_area_floor(before: &[u8], after: &[u8]) -> Option<usize> {
    if !has_objects(before) || !has_objects(after) {
        return None;
    }
    let table_end = |image: &[u8]| SLOT_TABLE_AT + SLOT_BYTES * slotted::slot_count(image);
    Some(table_end(before).max(table_end(after)).min(before.len()))
}

/// The units of [`RECORD_ALIGN`] bytes a merged range reaches (the first to the last, both
/// inclusive). A range has at least one byte.
fn units_of(range: &Range<usize>) -> (usize, usize) {
    debug_assert!(range.start < range.end);
    (range.start / RECORD_ALIGN, (range.end - 1) / RECORD_ALIGN)
}

/// Are `ranges` (runs merged by the minimal-traffic rule, in order) the ranges to log for two
/// slotted images, each inside one object? They must lie above the slot tables. Then, first
/// without reading any object: a range inside one unit of [`RECORD_ALIGN`] bytes holds no
/// bound, since every bound is a multiple of it (an aligned field, a few bytes of one). Then
/// with the record bounds of `after`, which are those of `before` too when no range reaches
/// the slot table or a record header: neighbouring fields of one object pass.
///
/// `cached`, if given, holds (or gets) the bounds of `before` under the caller's key. They
/// are kept only while a diff shows the structure unchanged: a diff that passes the first test
/// alone may have changed a record's length (a byte of its header), so with bounds held the
/// second test goes first.
fn ranges_stay_in_objects(
    before: &[u8],
    after: &[u8],
    ranges: &[Range<usize>],
    cached: Option<(&mut PageBounds, u64)>,
) -> bool {
    let floor = record_area_floor(before, after);
    let above = floor.is_some_and(|floor| ranges[0].start >= floor);
    let within_units = || {
        ranges.iter().all(|range| {
            let (first, last) = units_of(range);
            first == last
        })
    };
    let Some((bounds, key)) = cached else {
        let Some(floor) = floor.filter(|_| above) else {
            return false;
        };
        return within_units()
            || with_unit_bytes(after, floor, |units| {
                clear_of(ranges, |first, last| any_byte(units, first, last))
            });
    };
    if bounds.holds(key) {
        if above && clear_of(ranges, |first, last| any_bit(&bounds.map, first, last)) {
            return true; // and the structure is as it was: the bounds still hold
        }
        bounds.forget();
        return above && within_units();
    }
    let Some(floor) = floor.filter(|_| above) else {
        return false;
    };
    if within_units() {
        return true;
    }
    bounds.forget(); // another page's, if any
    bounds.map.clear();
    bounds.map.resize(map_words(after.len()), 0);
    with_unit_bytes(after, floor, |units| compress(units, &mut bounds.map));
    let keeps = clear_of(ranges, |first, last| any_bit(&bounds.map, first, last));
    if keeps {
        bounds.key = Some(key);
    }
    keeps
}

/// Does no range reach a set unit, as `any_set(first, last)` tells for the units of each?
fn clear_of(ranges: &[Range<usize>], any_set: impl Fn(usize, usize) -> bool) -> bool {
    ranges.iter().all(|range| {
        let (first, last) = units_of(range);
        !any_set(first, last)
    })
}

/// The record bounds of a page, kept between diffs of it: while a commit diffs its pieces one
/// after another, and from one transaction to the next while its structure stays as it was, so
/// that the slot table is walked once rather than at every diff. A bit per [`RECORD_ALIGN`]
/// bytes (144 bytes for an 8 KiB page, with the word of zeros past it). The holder names the
/// page with a key of its own and must call [`PageBounds::forget`] whenever the page's
/// structure may change (a record added, removed, resized or moved; another page in its
/// place); a diff that sees a range reach a bound forgets them itself.
#[derive(Debug, Default)]
pub struct PageBounds {
    key: Option<u64>,
    /// Bit `u % 64` of word `u / 64` is unit `u` of a [`UnitBytes`] map, with one word of
    /// zeros past the last unit.
    map: Vec<u64>,
}

impl PageBounds {
    pub fn forget(&mut self) {
        self.key = None;
    }

    /// Are bounds held for `key`?
    pub fn holds(&self, key: u64) -> bool {
        self.key == Some(key)
    }
}

// A record's header fills exactly the unit it starts.
const _: () = assert!(slotted::RECORD_HEADER_BYTES == RECORD_ALIGN);

/// Pages up to this size (the default page size) take the smallest map on the stack.
const DEFAULT_PAGE_BYTES: usize = 8192;
/// Pages up to this size take the next one.
const SMALL_PAGE_BYTES: usize = 16384;

/// Bytes of a map of [`UnitBytes`] for pages of `page_bytes`: one per [`RECORD_ALIGN`] bytes,
/// one for the page end (where the last record ends), and zeros past it, so that eight units
/// can be read at once from any unit of the page.
const fn map_bytes(page_bytes: usize) -> usize {
    (page_bytes / RECORD_ALIGN + 1).next_multiple_of(MAP_READ_UNITS) + MAP_READ_UNITS
}

/// Words of a bitmap of the units of pages of `page_bytes` (as [`PageBounds`] keeps it, with
/// a word of zeros past the last unit, and as [`mapped_cuts`] builds it).
const fn map_words(page_bytes: usize) -> usize {
    (page_bytes / RECORD_ALIGN + 1).div_ceil(64) + 1
}

/// Units [`any_byte`] tests with one read.
const MAP_READ_UNITS: usize = 8;

/// Calls `test` with the unit bytes of slotted `page`, on the stack: one byte per
/// [`RECORD_ALIGN`] bytes, nonzero where a merged range must not reach. That is a record
/// header some slot points to, and where a valid record ends (a valid record starts at its
/// header). Built with one read of the slot table and each record header, no sorting. Bytes,
/// not bits: the walk only stores, where setting bits chains a read, an or and a write of the
/// same word from record to record (a word covers the bounds of several records).
///
/// The test is a little stricter than the bounds: a range beginning right after a record's
/// end, in free space, reaches the end's unit. That only sends such a diff the slower, exact
/// way.
fn with_unit_bytes<T>(page: &[u8], floor: usize, test: impl FnOnce(&[u8]) -> T) -> T {
    if page.len() <= DEFAULT_PAGE_BYTES {
        let mut units = [0u8; map_bytes(DEFAULT_PAGE_BYTES)];
        fill_unit_bytes(page, floor, &mut units);
        test(&units)
    } else if page.len() <= SMALL_PAGE_BYTES {
        let mut units = [0u8; map_bytes(SMALL_PAGE_BYTES)];
        fill_unit_bytes(page, floor, &mut units);
        test(&units)
    } else {
        let mut units = vec![0u8; map_bytes(page.len())];
        fill_unit_bytes(page, floor, &mut units);
        test(&units)
    }
}

/// Fills `units`, zeroed and of at least [`map_bytes`] of the page (see [`with_unit_bytes`]).
fn fill_unit_bytes(page: &[u8], floor: usize, units: &mut [u8]) {
    assert!(map_bytes(page.len()) <= units.len());
    debug_assert!(floor >= SLOT_TABLE_AT);
    let page_units = page.len() / RECORD_ALIGN;
    visit_slots(page, floor, |offset, end| {
        // Every aligned header a slot points to, valid or not: if no range reaches it, it
        // reads the same in both images, and so does whether it is a record. (A header off
        // the alignment is none in either image, whatever its bytes.) A slot of a damaged
        // page may point past the page, where no range is.
        if offset.is_multiple_of(RECORD_ALIGN) && offset / RECORD_ALIGN < page_units {
            units[offset / RECORD_ALIGN] = 1;
        }
        if let Some(end) = end {
            // A record lies inside the page, so inside the map.
            units[end / RECORD_ALIGN] = 1;
        }
    });
}

/// Is any unit from `first` to `last` (inclusive) set in `units` ([`with_unit_bytes`])?
#[inline]
fn any_byte(units: &[u8], first: usize, last: usize) -> bool {
    debug_assert!(first <= last);
    let mut at = first;
    loop {
        let Some(read) = units.get(at..at + MAP_READ_UNITS) else {
            return true; // past the map: a range that is no part of this page
        };
        let word = u64::from_le_bytes(read.try_into().expect("eight bytes"));
        let wanted = last - at + 1;
        if wanted < MAP_READ_UNITS {
            return word & ((1u64 << (8 * wanted)) - 1) != 0;
        }
        if word != 0 {
            return true;
        }
        at += MAP_READ_UNITS;
        if at > last {
            return false;
        }
    }
}

/// Packs unit bytes (0 or 1 each) into `bits`, eight at a time.
fn compress(units: &[u8], bits: &mut [u64]) {
    // Multiplying eight bytes of 0 or 1 by this gathers them, in order, into the top byte.
    const GATHER: u64 = 0x0102_0408_1020_4080;
    for (word, chunk) in bits.iter_mut().zip(units.chunks(64)) {
        *word = chunk
            .chunks_exact(8)
            .enumerate()
            .fold(0, |word, (k, eight)| {
                let eight = u64::from_le_bytes(eight.try_into().expect("eight bytes"));
                debug_assert!(eight & !0x0101_0101_0101_0101 == 0, "unit bytes are 0 or 1");
                word | (eight.wrapping_mul(GATHER) >> 56) << (8 * k)
            });
    }
}

/// Is any unit from `first` to `last` (inclusive) set in `bits` ([`PageBounds`])?
#[inline]
fn any_bit(bits: &[u64], first: usize, last: usize) -> bool {
    debug_assert!(first <= last);
    let mut at = first;
    loop {
        let (Some(&low), Some(&high)) = (bits.get(at / 64), bits.get(at / 64 + 1)) else {
            return true; // past the map: a range that is no part of this page
        };
        let shift = at % 64;
        // 64 units from `at` (the high word's bits shifted in, none when `shift` is 0).
        let window = low >> shift | (high << 1) << (63 - shift);
        let wanted = last - at + 1;
        if wanted < 64 {
            return window & ((1u64 << wanted) - 1) != 0;
        }
        if window != 0 {
            return true;
        }
        at += 64;
        if at > last {
            return false;
        }
    }
}

/// Calls `visit` with the offset of every slot in use of slotted `page` whose table entry lies
/// below `limit`, and the end of its record if the header there can be one (as
/// [`slotted::record`] decides).
fn visit_slots(page: &[u8], limit: usize, mut visit: impl FnMut(usize, Option<usize>)) {
    let table_end = SLOT_TABLE_AT + SLOT_BYTES * slotted::slot_count(page);
    let table = &page[SLOT_TABLE_AT..table_end.min(limit).min(page.len())];
    for entry in table.chunks_exact(SLOT_BYTES) {
        let offset = u16::from_le_bytes([entry[0], entry[1]]) as usize;
        if offset != 0 {
            visit(offset, slotted::record_end(page, offset, table_end));
        }
    }
}

/// Every cut of a diff of two images, at least one of them slotted, in order: what
/// [`object_cuts`] gives, with the record bounds gathered in a bitmap instead of sorted.
fn mapped_cuts<const W: usize>(images: [&[u8]; 2]) -> Vec<usize> {
    let size = images[0].len();
    debug_assert!(size / RECORD_ALIGN < W * 64);
    // The header fields' cuts and the slot tables' bounds: few, sorted apart (an image that
    // is not slotted leaves its table end at usize::MAX, never merged).
    let mut fixed = [0, 4, 8, 16, SLOT_TABLE_AT, usize::MAX, usize::MAX];
    let mut bounds = [0u64; W];
    for (image, table_end) in images.into_iter().zip(5..) {
        if has_objects(image) {
            fixed[table_end] = (SLOT_TABLE_AT + SLOT_BYTES * slotted::slot_count(image)).min(size);
            visit_slots(image, size, |offset, end| {
                if let Some(end) = end {
                    set_bit(&mut bounds, offset / RECORD_ALIGN);
                    set_bit(&mut bounds, end / RECORD_ALIGN);
                }
            });
        }
    }
    fixed.sort_unstable();
    set_bit(&mut bounds, size / RECORD_ALIGN);
    // Merge the record bounds, in order from the bitmap, with the fixed cuts.
    let mut cuts = Vec::with_capacity(64);
    let mut push = |cut: usize| {
        if cuts.last() != Some(&cut) {
            cuts.push(cut);
        }
    };
    let mut next_fixed = 0;
    for (index, &word) in bounds.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let cut = (index * 64 + bits.trailing_zeros() as usize) * RECORD_ALIGN;
            while next_fixed < fixed.len() && fixed[next_fixed] <= cut {
                push(fixed[next_fixed]);
                next_fixed += 1;
            }
            push(cut);
            bits &= bits - 1;
        }
    }
    debug_assert!(
        fixed[next_fixed..].iter().all(|&c| c == usize::MAX),
        "size is the last cut"
    );
    cuts
}

/// Sets bit `unit`, if the map has it: a slot of a damaged page can point past the page, where
/// no run is.
fn set_bit(words: &mut [u64], unit: usize) {
    if let Some(word) = words.get_mut(unit / 64) {
        *word |= 1 << (unit % 64);
    }
}

/// The cuts of a page diff, read once the page is known to have changed.
enum Cuts {
    /// A page without objects (a large object's data): the header fields' cuts only.
    Header([usize; 5]),
    Objects(Vec<usize>),
}

/// Is `image` a slotted page (one whose objects cut a diff)?
fn has_objects(image: &[u8]) -> bool {
    page::kind(image) == Some(PageKind::Slotted)
}

impl Cuts {
    fn of(before: &[u8], after: &[u8]) -> Cuts {
        if has_objects(before) || has_objects(after) {
            let images = [before, after];
            Cuts::Objects(if before.len() <= SMALL_PAGE_BYTES {
                mapped_cuts::<{ map_words(SMALL_PAGE_BYTES) }>(images)
            } else if before.len() <= PAGE_SIZE_MAX {
                mapped_cuts::<{ map_words(PAGE_SIZE_MAX) }>(images)
            } else {
                object_cuts(&images)
            })
        } else {
            Cuts::Header([0, 4, 8, HEADER_FIELDS_END, before.len()])
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Cuts::Header(cuts) => cuts,
            Cuts::Objects(cuts) => cuts,
        }
    }
}

/// Where the last of the page header's fields a diff cuts at ends (the checksum at 0..4, the
/// LSN at 8..16); a page without objects has no other cut but its end.
const HEADER_FIELDS_END: usize = 16;

/// Ranges a page diff makes room for at once.
const RANGES_RESERVED: usize = 32;

/// Bytes of the page header the server owns and sets itself: the checksum and the LSN.
pub const SERVER_OWNED: [Range<usize>; 2] = [0..4, 8..16];

/// Does `range` (between two neighbouring cuts) lie in a server-owned field?
fn is_server_owned(range: Range<usize>) -> bool {
    SERVER_OWNED
        .iter()
        .any(|owned| range.start >= owned.start && range.end <= owned.end)
}

/// Every offset where an object (or a header field, or the slot table) of any of `images`
/// begins or ends, with 0 and the page size: a log record never spans two of them.
pub fn object_cuts(images: &[&[u8]]) -> Vec<usize> {
    let size = images[0].len();
    let mut cuts = vec![0, 4, 8, 16, size];
    for image in images {
        debug_assert_eq!(image.len(), size);
        if has_objects(image) {
            object_bounds(image, &mut cuts);
        }
    }
    // Sorting a vector beats building a tree: this runs for every page diffed.
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The cuts of `page` (as [`object_cuts`] finds them) strictly inside `range`, sorted. A
/// sub-page piece needs only these; a page holds a few hundred objects and a commit diffs
/// many pieces of it, so sorting every cut of the page per piece would dominate.
pub fn object_cuts_within(page: &[u8], range: Range<usize>) -> Vec<usize> {
    let mut cuts: Vec<usize> = [4, 8, 16].into_iter().collect();
    if has_objects(page) {
        object_bounds(page, &mut cuts);
    }
    cuts.retain(|&c| c > range.start && c < range.end);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Adds the bounds of a slotted page's header, slot table and records to `cuts`. Slots that
/// point nowhere sensible are ignored (the page is validated elsewhere).
fn object_bounds(image: &[u8], cuts: &mut Vec<usize>) {
    let size = image.len();
    cuts.push(SLOT_TABLE_AT);
    let count = slotted::slot_count(image);
    cuts.push((SLOT_TABLE_AT + SLOT_BYTES * count).min(size));
    for slot in 0..count.min(u16::MAX as usize) {
        if let Ok(Some(record)) = slotted::record(image, slot as u16) {
            cuts.push(record.offset);
            cuts.push((record.offset + slotted::record_bytes(record.payload_len)).min(size));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::push_changed_ranges;
    use lodestore_core::{PageId, TypeId};
    use proptest::prelude::*;

    /// The definition: within each segment between object cuts (server-owned fields left
    /// out), the changed runs merged by the rule.
    fn page_ranges_by_segment(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
        let cuts = object_cuts(&[before, after]);
        let mut ranges = Vec::new();
        for window in cuts.windows(2) {
            if !is_server_owned(window[0]..window[1]) {
                push_changed_ranges(before, after, window[0]..window[1], header, &mut ranges);
            }
        }
        ranges
    }

    /// Fills `len` bytes at `at` with `value`, for each edit, clipped to the page.
    fn overwrite(page: &mut [u8], edits: &[(usize, u8, usize)]) {
        for &(at, value, len) in edits {
            let end = (at + len).min(page.len());
            page[at.min(end)..end].fill(value);
        }
    }

    proptest! {
        /// One scan split at the object cuts gives what diffing each segment gives, for
        /// pages whose objects moved, grew, appeared or vanished in between.
        #[test]
        fn one_scan_equals_the_per_segment_definition(
            sizes in proptest::collection::vec(1usize..300, 0..12),
            removed in proptest::collection::vec(any::<bool>(), 12),
            added in proptest::collection::vec(1usize..200, 0..4),
            edits in proptest::collection::vec((0usize..4096, any::<u8>(), 1usize..40), 0..30),
            header in prop_oneof![Just(32usize), Just(56usize)],
        ) {
            let mut before = slotted_page();
            let slots: Vec<u16> = sizes
                .iter()
                .filter_map(|&len| slotted::insert(&mut before, TypeId(1), len, false))
                .collect();
            let mut after = before.clone();
            for (slot, remove) in slots.iter().zip(&removed) {
                if *remove {
                    let _ = slotted::remove(&mut after, *slot);
                }
            }
            for len in added {
                let _ = slotted::insert(&mut after, TypeId(2), len, false);
            }
            overwrite(&mut after, &edits);
            diff_matches_definition(&before, &after, header)?;
        }

        /// The same for objects updated in place (the structure unchanged), where most
        /// changes are a few bytes of a field and the objects need not be parsed: aligned
        /// and unaligned fields, neighbouring fields, fields at object edges.
        #[test]
        fn in_place_updates_equal_the_per_segment_definition(
            sizes in proptest::collection::vec(1usize..120, 1..40),
            holes in proptest::collection::vec(any::<bool>(), 40),
            fields in proptest::collection::vec((0usize..40, 0usize..128, 1usize..10, any::<u8>()), 0..24),
            raw in proptest::collection::vec(
                (prop_oneof![3 => 0usize..4096, 1 => 0usize..128], 1usize..24, any::<u8>()),
                0..3,
            ),
            header in prop_oneof![Just(32usize), Just(56usize)],
            page_bytes in prop_oneof![Just(4096usize), Just(32768usize)],
        ) {
            let mut before = vec![0u8; page_bytes];
            slotted::init(&mut before, PageId(9), 0);
            let slots: Vec<u16> = sizes
                .iter()
                .filter_map(|&len| slotted::insert(&mut before, TypeId(1), len, false))
                .collect();
            // Some objects freed before the update: their space lies between records, so
            // a record's end is not always the next one's start.
            let mut kept = Vec::new();
            for (index, (&slot, &hole)) in slots.iter().zip(&holes).enumerate() {
                if hole && index > 0 {
                    slotted::remove(&mut before, slot);
                } else {
                    kept.push(slot);
                }
            }
            let slots = kept;
            let mut after = before.clone();
            for (object, at, len, value) in fields {
                let record = slotted::record(&after, slots[object % slots.len()]).unwrap().unwrap();
                let payload = record.payload();
                let start = (payload.start + at).min(payload.end - 1);
                let end = (start + len).min(payload.end);
                after[start..end].fill(value);
            }
            // A few writes anywhere: over record headers and padding, so runs cross record
            // bounds and bounds move, and over the page header and the slot table.
            for (at, len, value) in raw {
                // Low offsets hit the header and the slot table, high ones the records.
                let start = if at < 128 { at } else { after.len() - 4096 + at };
                let end = (start + len).min(after.len());
                after[start..end].fill(value);
            }
            diff_matches_definition(&before, &after, header)?;
        }

        /// Bounds kept from one diff of a page to the next, each diff's after-image the next
        /// one's before-image (as a client's transactions follow one another), give the diff
        /// the definition gives, whatever happened to the page in between: fields written,
        /// records added, removed or resized, bytes written anywhere. No step tells the
        /// holder anything: the diff sees a structure change itself.
        #[test]
        fn bounds_kept_from_diff_to_diff_give_the_definition(
            sizes in proptest::collection::vec(1usize..120, 1..40),
            steps in steps(),
            header in prop_oneof![Just(32usize), Just(56usize)],
        ) {
            let mut page = page_of_objects(&sizes);
            let mut bounds = PageBounds::default();
            for step in steps {
                let mut next = page.clone();
                apply_step(&mut next, &step);
                let mut kept = Vec::new();
                page_ranges_cached(&page, &next, header, &mut bounds, 7, &mut kept);
                prop_assert_eq!(&kept, &page_ranges_by_segment(&page, &next, header));
                page = next;
            }
        }

        /// The same for the pieces of a page diffed with its bounds kept, where the holder
        /// forgets them whenever the page's structure may have changed, as its contract
        /// asks: a piece's diff does not see the slot table.
        #[test]
        fn bounds_kept_from_piece_to_piece_give_the_definition(
            sizes in proptest::collection::vec(1usize..120, 1..40),
            steps in steps(),
            header in prop_oneof![Just(32usize), Just(56usize)],
        ) {
            const PIECE: usize = 64;
            let mut page = page_of_objects(&sizes);
            let mut bounds = PageBounds::default();
            for step in steps {
                let mut next = page.clone();
                if apply_step(&mut next, &step) {
                    bounds.forget();
                }
                for at in (0..page.len()).step_by(PIECE) {
                    let piece = &page[at..at + PIECE];
                    let mut kept = Vec::new();
                    let mut fresh = Vec::new();
                    let cached = Some((&mut bounds, 7));
                    if piece_ranges_within_objects(&next, at, piece, header, cached, &mut kept) {
                        let none = None;
                        prop_assert!(
                            piece_ranges_within_objects(&next, at, piece, header, none, &mut fresh)
                        );
                        prop_assert_eq!(kept, fresh);
                    }
                }
                page = next;
            }
        }

        /// The same for pages of any kind, a large object's data among them.
        #[test]
        fn one_scan_equals_the_definition_on_any_page(
            seed in any::<u8>(),
            edits in proptest::collection::vec((0usize..1024, any::<u8>(), 1usize..20), 0..30),
            header in prop_oneof![Just(32usize), Just(56usize)],
        ) {
            let before: Vec<u8> = (0..1024).map(|i| (i as u8).wrapping_mul(seed)).collect();
            let mut after = before.clone();
            overwrite(&mut after, &edits);
            diff_matches_definition(&before, &after, header)?;
        }
    }

    /// The one-scan diff equals the per-segment definition, and the cuts gathered in a bitmap
    /// equal the sorted ones.
    fn diff_matches_definition(
        before: &[u8],
        after: &[u8],
        header: usize,
    ) -> Result<(), TestCaseError> {
        let slotted = |image: &[u8]| has_objects(image);
        if slotted(before) || slotted(after) {
            prop_assert_eq!(
                mapped_cuts::<{ map_words(PAGE_SIZE_MAX) }>([before, after]),
                object_cuts(&[before, after])
            );
        }
        prop_assert_eq!(
            page_ranges(before, after, header),
            page_ranges_by_segment(before, after, header)
        );
        Ok(())
    }

    /// Steps of edits for [`apply_step`].
    fn steps() -> impl Strategy<Value = Vec<Vec<(u8, usize, usize, u8)>>> {
        let edit = (0u8..6, 0usize..4096, 1usize..24, any::<u8>());
        proptest::collection::vec(proptest::collection::vec(edit, 0..12), 1..6)
    }

    /// A slotted page holding objects of `sizes` (as many as fit).
    fn page_of_objects(sizes: &[usize]) -> Vec<u8> {
        let mut page = slotted_page();
        for &len in sizes {
            let _ = slotted::insert(&mut page, TypeId(1), len, false);
        }
        page
    }

    /// Applies one step of edits to slotted `page`, each (kind, at, len, value): a field
    /// written in an object (kinds 0 to 2), a record added, removed or resized (3), bytes
    /// written anywhere (4 and 5). True if the structure may have changed.
    fn apply_step(page: &mut [u8], edits: &[(u8, usize, usize, u8)]) -> bool {
        let mut structure = false;
        for &(kind, at, len, value) in edits {
            let slots: Vec<u16> = slotted::live_slots(page).collect();
            match kind {
                0..=2 if !slots.is_empty() => {
                    // Bytes written anywhere may have garbled the record.
                    let Ok(Some(record)) = slotted::record(page, slots[at % slots.len()]) else {
                        continue;
                    };
                    let payload = record.payload();
                    if payload.is_empty() {
                        continue;
                    }
                    let start = payload.start + at % payload.len();
                    page[start..(start + len).min(payload.end)].fill(value);
                }
                // The page's own operations expect a sound page.
                3 if slotted::validate(page).is_ok() => {
                    structure = true;
                    match (value % 3, slots.is_empty()) {
                        (0, _) | (_, true) => {
                            let _ = slotted::insert(page, TypeId(2), len * 4, false);
                        }
                        (1, false) => {
                            slotted::remove(page, slots[at % slots.len()]);
                        }
                        _ => {
                            let _ = slotted::resize(page, slots[at % slots.len()], len * 3);
                        }
                    }
                }
                0..=3 => {}
                _ => {
                    structure = true;
                    let size = page.len();
                    let start = at % size;
                    page[start..(start + len).min(size)].fill(value);
                }
            }
        }
        structure
    }

    fn slotted_page() -> Vec<u8> {
        let mut page = vec![0u8; 4096];
        slotted::init(&mut page, PageId(9), 0);
        page
    }

    #[test]
    fn regions_never_span_two_objects() {
        let mut before = slotted_page();
        let a = slotted::insert(&mut before, TypeId(1), 16, false).unwrap();
        let b = slotted::insert(&mut before, TypeId(1), 16, false).unwrap();
        let mut after = before.clone();
        let ra = slotted::record(&after, a).unwrap().unwrap();
        let rb = slotted::record(&after, b).unwrap().unwrap();
        // The last byte of one object and the first of its neighbour: close enough to merge
        // by distance, but they belong to different objects.
        after[ra.payload().end - 1] ^= 1;
        after[rb.payload().start] ^= 1;
        let ranges = page_ranges(&before, &after, 56);
        assert_eq!(ranges.len(), 2, "{ranges:?}");
        let mut rebuilt = before.clone();
        for r in &ranges {
            rebuilt[r.clone()].copy_from_slice(&after[r.clone()]);
        }
        assert_eq!(rebuilt, after);
    }

    #[test]
    fn a_record_that_changed_length_is_split_at_its_old_and_new_end() {
        // A record with free space above it (its neighbour removed), so its old end is no
        // other record's start: only the before-image knows that bound.
        let mut before = slotted_page();
        let neighbour = slotted::insert(&mut before, TypeId(1), 40, false).unwrap();
        let grown = slotted::insert(&mut before, TypeId(1), 40, false).unwrap();
        assert!(slotted::remove(&mut before, neighbour));
        let record = slotted::record(&before, grown).unwrap().unwrap();
        let old_end = record.offset + slotted::record_bytes(40);
        let mut after = before.clone();
        // The length word says 48 now, and bytes across the old end changed.
        after[record.offset + 4] = 48;
        after[old_end - 4..old_end + 4].fill(0x77);
        let ranges = page_ranges(&before, &after, 56);
        assert_eq!(ranges, page_ranges_by_segment(&before, &after, 56));
        assert!(ranges.contains(&(old_end - 4..old_end)), "{ranges:?}");
        assert!(ranges.contains(&(old_end..old_end + 4)), "{ranges:?}");
    }

    #[test]
    fn kept_bounds_are_dropped_when_a_record_header_changes() {
        let mut page = slotted_page();
        let slots: Vec<u16> = (0..4)
            .filter_map(|_| slotted::insert(&mut page, TypeId(1), 64, false))
            .collect();
        let record = slotted::record(&page, slots[1]).unwrap().unwrap();
        let payload = record.payload();
        let mut bounds = PageBounds::default();
        let mut ranges = Vec::new();
        let mut diff = |before: &[u8], after: &[u8], bounds: &mut PageBounds| {
            page_ranges_cached(before, after, 56, bounds, 7, &mut ranges);
            assert_eq!(ranges, page_ranges_by_segment(before, after, 56));
        };
        // Two neighbouring fields of one object: the bounds are read, and kept.
        let mut next = page.clone();
        next[payload.start + 8] ^= 1;
        next[payload.start + 16] ^= 1;
        diff(&page, &next, &mut bounds);
        assert!(bounds.holds(7));
        // The record shrinks by 8 bytes: one byte of its header, a range inside one unit.
        let page = next;
        let mut next = page.clone();
        next[record.offset + 4] -= 8;
        diff(&page, &next, &mut bounds);
        assert!(
            !bounds.holds(7),
            "a header changed: the bounds no longer hold"
        );
        // Bytes on both sides of its new end: two ranges now, not one merged.
        let page = next;
        let mut next = page.clone();
        next[payload.end - 12] ^= 1;
        next[payload.end - 4] ^= 1;
        diff(&page, &next, &mut bounds);
    }

    /// A slotted page larger than a store allows (its slots cannot address all of it) is
    /// diffed as the definition says, its bounds read into a map of its size.
    #[test]
    fn pages_larger_than_any_store_uses_are_diffed_too() {
        // The records of a page of the largest size, then as much again past them.
        let mut before = vec![0u8; PAGE_SIZE_MAX];
        slotted::init(&mut before, PageId(9), 0);
        for _ in 0..4 {
            slotted::insert(&mut before, TypeId(1), 64, false).unwrap();
        }
        before.resize(2 * PAGE_SIZE_MAX, 0);
        let mut after = before.clone();
        for at in [PAGE_SIZE_MAX - 8, PAGE_SIZE_MAX, 2 * PAGE_SIZE_MAX - 90] {
            after[at] ^= 1;
        }
        let mut bounds = PageBounds::default();
        let mut kept = Vec::new();
        page_ranges_cached(&before, &after, 56, &mut bounds, 1, &mut kept);
        assert_eq!(kept, page_ranges_by_segment(&before, &after, 56));
        assert_eq!(page_ranges(&before, &after, 56), kept);
    }

    #[test]
    fn checksum_and_lsn_are_not_logged() {
        let before = slotted_page();
        let (checksum, lsn) = ((0, 4), (8, 16));
        for fields in [&[checksum][..], &[lsn], &[checksum, lsn]] {
            let mut after = before.clone();
            for &(start, end) in fields {
                after[start..end].fill(0xAA);
            }
            assert!(page_ranges(&before, &after, 56).is_empty(), "{fields:?}");
        }
    }

    #[test]
    fn cuts_within_a_range_are_the_page_cuts_inside_it() {
        let mut page = slotted_page();
        for len in [16, 40, 3, 100, 64, 7, 200] {
            slotted::insert(&mut page, TypeId(1), len, false).unwrap();
        }
        let all = object_cuts(&[&page]);
        for range in [0..4096, 0..64, 30..90, 100..164, 4000..4096, 37..38] {
            let expected: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&c| c > range.start && c < range.end)
                .collect();
            assert_eq!(
                object_cuts_within(&page, range.clone()),
                expected,
                "{range:?}"
            );
        }
    }
}
