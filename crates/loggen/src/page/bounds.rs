//! Do the merged ranges of a page diff stay inside objects? Answered without sorting a bound:
//! first from the ranges alone (a range inside one 8-byte unit holds no bound), then against a
//! map of the units a range must not reach (record headers and record ends), read from the slot
//! table and each record's header, or kept from the page's previous diff ([`PageBounds`]).

use super::cuts::visit_slots;
use super::has_objects;
use lodestore_storage::slotted::{self, RECORD_ALIGN, SLOT_BYTES, SLOT_TABLE_AT};
use std::ops::Range;

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
pub(super) fn ranges_stay_in_objects(
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
pub(super) const SMALL_PAGE_BYTES: usize = 16384;

/// Bytes of a map of [`UnitBytes`] for pages of `page_bytes`: one per [`RECORD_ALIGN`] bytes,
/// one for the page end (where the last record ends), and zeros past it, so that eight units
/// can be read at once from any unit of the page.
const fn map_bytes(page_bytes: usize) -> usize {
    (page_bytes / RECORD_ALIGN + 1).next_multiple_of(MAP_READ_UNITS) + MAP_READ_UNITS
}

/// Words of a bitmap of the units of pages of `page_bytes` (as [`PageBounds`] keeps it, with
/// a word of zeros past the last unit, and as [`mapped_cuts`] builds it).
pub(super) const fn map_words(page_bytes: usize) -> usize {
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
