//! Page diffing: the ranges of a page to log, never spanning two objects. Object boundaries are
//! taken from both images (objects may have moved in between, by compaction), and the page's
//! header fields and slot table count as objects of their own. The checksum (bytes 0..4) and
//! the LSN (8..16) are never logged: the server sets them.

use crate::diff::push_changed_ranges;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted::{self, SLOT_BYTES, SLOT_TABLE_AT};
use std::ops::Range;

/// The ranges to log for a page that changed from `before` to `after`, merged within each
/// object by the minimal-traffic rule for records of fixed cost `header`.
pub fn page_ranges(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
    assert_eq!(before.len(), after.len());
    let cuts = object_cuts(&[before, after]);
    // Room for a typical update's ranges, so a page's diff allocates once.
    let mut ranges = Vec::with_capacity(RANGES_RESERVED);
    for window in cuts.windows(2) {
        let (start, end) = (window[0], window[1]);
        if is_server_owned(start..end) {
            continue;
        }
        push_changed_ranges(before, after, start..end, header, &mut ranges);
    }
    ranges
}

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
        if page::kind(image) == Some(PageKind::Slotted) {
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
    if page::kind(page) == Some(PageKind::Slotted) {
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
    use lodestore_core::{PageId, TypeId};

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
    fn checksum_and_lsn_are_not_logged() {
        let before = slotted_page();
        let mut after = before.clone();
        after[0..4].fill(0xAA);
        after[8..16].fill(0xBB);
        assert!(page_ranges(&before, &after, 56).is_empty());
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
