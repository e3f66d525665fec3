//! Page diffing: the ranges of a page to log, never spanning two objects. Object boundaries are
//! taken from both images (objects may have moved in between, by compaction), and the page's
//! header fields and slot table count as objects of their own. The checksum (bytes 0..4) and
//! the LSN (8..16) are never logged: the server sets them.

use crate::compare::for_each_run;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted::{self, SLOT_BYTES, SLOT_TABLE_AT};
use std::ops::Range;

/// The ranges to log for a page that changed from `before` to `after`, merged within each
/// object by the minimal-traffic rule for records of fixed cost `header`.
///
/// The page is scanned once for runs of changed bytes first; only if there are any are the
/// object bounds read, and the runs split at them: an unchanged page costs one scan and no
/// allocation, and its objects are not parsed for nothing.
pub fn page_ranges(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
    assert_eq!(before.len(), after.len());
    // The scan's own work stays small (it runs in the vector loop): collect the runs, then
    // split and merge them in a second pass.
    let mut runs: Vec<Range<usize>> = Vec::new();
    for_each_run(before, after, &mut |run| {
        if runs.capacity() == 0 {
            runs.reserve(RANGES_RESERVED); // one allocation for a typical update's runs
        }
        runs.push(run)
    });
    if runs.is_empty() {
        return runs;
    }
    let cuts = Cuts::of(before, after);
    let cuts = cuts.as_slice();
    // The segment (between cuts[k] and cuts[k + 1]) the walk is in, and the one the last
    // range lies in: ranges merge only within one segment.
    let mut segment = 0;
    let mut last_segment = usize::MAX;
    // While no run crosses a cut (the usual case: changes inside objects), the ranges are
    // written over the runs already read.
    let mut written = 0;
    let mut index = 0;
    while index < runs.len() {
        let run = runs[index].clone();
        while cuts[segment + 1] <= run.start {
            segment += 1;
        }
        if cuts[segment + 1] < run.end {
            break; // this run crosses a cut: the rest go to a vector of their own
        }
        if !is_server_owned(cuts[segment]..cuts[segment + 1]) {
            if written > 0
                && last_segment == segment
                && 2 * (run.start - runs[written - 1].end) <= header
            {
                runs[written - 1].end = run.end;
            } else {
                runs[written] = run;
                written += 1;
            }
            last_segment = segment;
        }
        index += 1;
    }
    if index == runs.len() {
        runs.truncate(written);
        return runs;
    }
    let mut ranges: Vec<Range<usize>> = Vec::with_capacity(runs.len() + RANGES_RESERVED);
    ranges.extend_from_slice(&runs[..written]);
    for run in &runs[index..] {
        // The run split at the cuts it crosses; each piece merged or appended.
        let mut start = run.start;
        while start < run.end {
            while cuts[segment + 1] <= start {
                segment += 1;
            }
            let end = run.end.min(cuts[segment + 1]);
            if !is_server_owned(cuts[segment]..cuts[segment + 1]) {
                match ranges.last_mut() {
                    Some(last) if last_segment == segment && 2 * (start - last.end) <= header => {
                        last.end = end
                    }
                    _ => ranges.push(start..end),
                }
                last_segment = segment;
            }
            start = end;
        }
    }
    ranges
}

/// The cuts of a page diff, read once the page is known to have changed.
enum Cuts {
    /// A page without objects (a large object's data): the header fields' cuts only.
    Header([usize; 5]),
    Objects(Vec<usize>),
}

impl Cuts {
    fn of(before: &[u8], after: &[u8]) -> Cuts {
        if page::kind(before) == Some(PageKind::Slotted)
            || page::kind(after) == Some(PageKind::Slotted)
        {
            Cuts::Objects(object_cuts(&[before, after]))
        } else {
            Cuts::Header([0, 4, 8, 16, before.len()])
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Cuts::Header(cuts) => cuts,
            Cuts::Objects(cuts) => cuts,
        }
    }
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
            prop_assert_eq!(
                page_ranges(&before, &after, header),
                page_ranges_by_segment(&before, &after, header)
            );
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
            prop_assert_eq!(
                page_ranges(&before, &after, header),
                page_ranges_by_segment(&before, &after, header)
            );
        }
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
