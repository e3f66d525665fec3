//! The page diff against its definition: every segment between object cuts diffed alone.

use super::bounds::map_words;
use super::cuts::mapped_cuts;
use super::*;
use crate::diff::push_changed_ranges;
use lodestore_core::limits::PAGE_SIZE_MAX;
use lodestore_core::{PageId, TypeId};
use lodestore_storage::slotted;
use proptest::prelude::*;

/// The definition: within each segment between the diff's cuts (server-owned fields left
/// out), the changed runs merged by the rule.
fn page_ranges_by_segment(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
    let cuts = diff_cuts(before, after);
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

/// A free page a transaction took and filled with objects is logged in a few records (the
/// header, the slot table, the objects as one stretch), not one per object, and the records
/// rebuild it; a page that held objects before keeps its per-object records.
#[test]
fn a_page_that_held_no_objects_is_logged_in_a_few_records() {
    let mut free = vec![0u8; 8192];
    lodestore_storage::page::format(
        &mut free,
        lodestore_storage::page::PageKind::Free,
        PageId(9),
        0,
    );
    let mut filled = free.clone();
    slotted::init(&mut filled, PageId(9), 0);
    let mut objects = 0;
    while slotted::insert(&mut filled, TypeId(1), 24, false).is_some() {
        objects += 1;
    }
    for slot in 0..objects as u16 {
        let payload = slotted::record(&filled, slot).unwrap().unwrap().payload();
        for (i, byte) in filled[payload].iter_mut().enumerate() {
            *byte = 1 + (i % 7) as u8;
        }
    }
    assert!(objects > 100, "{objects}");
    let ranges = page_ranges(&free, &filled, 56);
    assert!(
        ranges.len() <= 4,
        "{} ranges for {objects} objects: {ranges:?}",
        ranges.len()
    );
    let mut rebuilt = free.clone();
    for r in &ranges {
        assert!(!is_server_owned(r.clone()), "{r:?}");
        rebuilt[r.clone()].copy_from_slice(&filled[r.clone()]);
    }
    rebuilt[..4].copy_from_slice(&filled[..4]);
    rebuilt[8..16].copy_from_slice(&filled[8..16]);
    assert_eq!(rebuilt, filled);

    // The same objects changed again on the now slotted page: one record each.
    let mut next = filled.clone();
    for slot in 0..objects as u16 {
        let record = slotted::record(&next, slot).unwrap().unwrap();
        let at = record.payload().start;
        next[at] ^= 0x80;
    }
    assert_eq!(page_ranges(&filled, &next, 56).len(), objects);
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
