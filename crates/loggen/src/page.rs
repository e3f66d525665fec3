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
/// The page is scanned once for runs of changed bytes first; only if there are any are the
/// object bounds read, and the runs split at them: an unchanged page costs one scan and no
/// allocation, and its objects are not parsed for nothing.
pub fn page_ranges(before: &[u8], after: &[u8], header: usize) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    page_ranges_into(before, after, header, &mut ranges);
    ranges
}

/// [`page_ranges`] into `runs` (cleared first), so a caller diffing many pages allocates once.
pub fn page_ranges_into(before: &[u8], after: &[u8], header: usize, runs: &mut Vec<Range<usize>>) {
    assert_eq!(before.len(), after.len());
    runs.clear();
    // The scan's own work stays small (it runs in the vector loop): collect the runs, then
    // split and merge them in a second pass.
    for_each_run(before, after, &mut |run| {
        if runs.capacity() == 0 {
            runs.reserve(RANGES_RESERVED); // one allocation for a typical update's runs
        }
        runs.push(run)
    });
    if runs.is_empty() {
        return;
    }
    if runs_stay_in_objects(before, after, runs, header, None) {
        merge_close_runs(runs, header);
        return;
    }
    let cuts = Cuts::of(before, after);
    if matches!(cuts, Cuts::Header(_)) && runs[0].start >= HEADER_FIELDS_END {
        // A page without objects whose runs all lie past the header fields: they lie in one
        // segment, which ends at the page end.
        merge_close_runs(runs, header);
        return;
    }
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
        return;
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
    *runs = ranges;
}

/// The ranges of one piece of slotted `page` (bytes `at..at + before.len()`, `before` their
/// earlier copy) into `runs` (cleared first), cut only at the objects of `page` as it is now,
/// when the runs of changed bytes are seen to stay inside those objects without splitting (see
/// [`page_ranges`]). False sends the caller to the per-segment diff (`runs` then holds nothing
/// of use). A commit diffs many small pieces, so the caller keeps one vector for all of them.
pub fn piece_ranges_within_objects(
    page: &[u8],
    at: usize,
    before: &[u8],
    header: usize,
    cached: Option<(&mut PageBounds, u64)>,
    runs: &mut Vec<Range<usize>>,
) -> bool {
    let end = at + before.len();
    assert!(end <= page.len(), "piece {at}..{end} outside the page");
    runs.clear();
    if page::kind(page) != Some(PageKind::Slotted) {
        return false;
    }
    for_each_run(before, &page[at..end], &mut |run| {
        runs.push(run.start + at..run.end + at)
    });
    if runs.is_empty() {
        return true;
    }
    // The page as both images: its bounds are the only ones that count for a piece.
    if !runs_stay_in_objects(page, page, runs, header, cached) {
        return false;
    }
    merge_close_runs(runs, header);
    true
}

/// For two slotted images: the offset from which every cut of either image is a record bound
/// (a multiple of [`RECORD_ALIGN`]), namely the end of the larger slot table. `None` if either
/// image is not a slotted page.
fn record_area_floor(before: &[u8], after: &[u8]) -> Option<usize> {
    let slotted = |image: &[u8]| page::kind(image) == Some(PageKind::Slotted);
    if !slotted(before) || !slotted(after) {
        return None;
    }
    let table_end = |image: &[u8]| SLOT_TABLE_AT + SLOT_BYTES * slotted::slot_count(image);
    Some(table_end(before).max(table_end(after)).min(before.len()))
}

/// Can `runs` be merged without splitting any, knowing only `bounds` (which units of
/// [`RECORD_ALIGN`] bytes may begin with a record bound)? Yes if every run lies above `floor`,
/// no run has a possible bound strictly inside it, and no two runs close enough to merge have
/// one between them.
fn runs_stay_in_segments(
    runs: &[Range<usize>],
    floor: usize,
    header: usize,
    bounds: &impl Fn(Range<usize>) -> bool,
) -> bool {
    let mut previous_end: Option<usize> = None;
    for run in runs {
        if run.start < floor {
            return false;
        }
        // Units whose first byte lies strictly inside the run, or in the gap before it.
        let inside = run.start / RECORD_ALIGN + 1..run.end.div_ceil(RECORD_ALIGN);
        if bounds(inside) {
            return false;
        }
        if let Some(end) = previous_end {
            let gap = end.div_ceil(RECORD_ALIGN)..run.start / RECORD_ALIGN + 1;
            if 2 * (run.start - end) <= header && bounds(gap) {
                return false;
            }
        }
        previous_end = Some(run.end);
    }
    true
}

/// Do `runs` stay in their segments on two slotted images? First without reading any object
/// (every multiple of [`RECORD_ALIGN`] a possible bound): an aligned field or a few bytes of
/// one pass. Then with the record bounds of `after`, which are those of `before` too when no
/// run touches the slot table or a record header: neighbouring fields of one object pass.
/// `cached`, if given, holds (or gets) the bounds of `after` under the caller's key.
fn runs_stay_in_objects(
    before: &[u8],
    after: &[u8],
    runs: &[Range<usize>],
    header: usize,
    cached: Option<(&mut PageBounds, u64)>,
) -> bool {
    let Some(floor) = record_area_floor(before, after) else {
        return false;
    };
    if runs_stay_in_segments(runs, floor, header, &|units| !units.is_empty()) {
        return true;
    }
    match cached {
        Some((bounds, key)) => {
            if bounds.key != Some(key) {
                bounds.key = None;
                let units = map_units(after.len());
                for map in [&mut bounds.map.starts, &mut bounds.map.bounds] {
                    map.clear();
                    map.resize(units, 0);
                }
                bounds.map.fill(after, floor);
                bounds.key = Some(key);
            }
            bounds.map.keeps(runs, floor, header)
        }
        // A map on the stack, as small as the page allows: zeroing it is part of the cost.
        None if after.len() <= DEFAULT_PAGE_BYTES => {
            BoundMap::<[u8; map_units(DEFAULT_PAGE_BYTES)]>::zeroed()
                .fits(after, runs, floor, header)
        }
        None if after.len() <= SMALL_PAGE_BYTES => {
            BoundMap::<[u8; map_units(SMALL_PAGE_BYTES)]>::zeroed().fits(after, runs, floor, header)
        }
        None => {
            BoundMap::<[u8; map_units(PAGE_SIZE_MAX)]>::zeroed().fits(after, runs, floor, header)
        }
    }
}

/// The record bounds of one page, kept while its pieces are diffed one after another, so the
/// slot table is walked once per page rather than once per piece. The holder names the page
/// with a key of its own and must call [`PageBounds::forget`] whenever the page may change.
#[derive(Debug, Default)]
pub struct PageBounds {
    key: Option<u64>,
    map: BoundMap<Vec<u8>>,
}

impl PageBounds {
    pub fn forget(&mut self) {
        self.key = None;
    }
}

// A record's header fills exactly the unit it starts.
const _: () = assert!(slotted::RECORD_HEADER_BYTES == RECORD_ALIGN);

/// Pages up to this size (the default page size) take the smallest bound map on the stack.
const DEFAULT_PAGE_BYTES: usize = 8192;
/// Pages up to this size take the next one.
const SMALL_PAGE_BYTES: usize = 16384;

/// Units of a bound map for pages of `page_bytes`: one per [`RECORD_ALIGN`] bytes, and one for
/// the page end (where the last record ends).
const fn map_units(page_bytes: usize) -> usize {
    page_bytes / RECORD_ALIGN + 1
}

/// Words of a bitmap of the units of pages of `page_bytes` ([`mapped_cuts`]).
const fn map_words(page_bytes: usize) -> usize {
    (page_bytes / RECORD_ALIGN + 1).div_ceil(64)
}

/// The record bounds of a slotted page, one byte per [`RECORD_ALIGN`] bytes (nonzero where
/// set): the units holding a record header some slot points to, and where any valid record
/// starts or ends. Built with one read of the slot table and each record header, no sorting.
/// Bytes, not bits: the walk only stores, where setting bits chains a read, an or and a write
/// of the same word from record to record (a word covers the bounds of several records).
#[derive(Debug, Default)]
struct BoundMap<S> {
    starts: S,
    bounds: S,
}

impl<const N: usize> BoundMap<[u8; N]> {
    fn zeroed() -> Self {
        BoundMap {
            starts: [0; N],
            bounds: [0; N],
        }
    }

    /// Fills this zeroed map from `page` and tests `runs` against it (see [`BoundMap::keeps`]).
    fn fits(mut self, page: &[u8], runs: &[Range<usize>], floor: usize, header: usize) -> bool {
        debug_assert!(map_units(page.len()) <= N);
        self.fill(page, floor);
        self.keeps(runs, floor, header)
    }
}

impl<S: AsRef<[u8]> + AsMut<[u8]>> BoundMap<S> {
    /// Fills the map, zeroed and of at least [`map_units`] of the page, from `page`.
    fn fill(&mut self, page: &[u8], floor: usize) {
        let (starts, bounds) = (self.starts.as_mut(), self.bounds.as_mut());
        assert!(map_units(page.len()) <= bounds.len().min(starts.len()));
        debug_assert!(floor >= SLOT_TABLE_AT);
        visit_slots(page, floor, |offset, end| {
            // Every aligned header a slot points to, valid or not: if no run touches it, it
            // reads the same in both images, and so does whether it is a record. (A header
            // off the alignment is none in either image, whatever its bytes.) A slot of a
            // damaged page may point past the page, and the map, where no run is.
            let unit = offset / RECORD_ALIGN;
            if offset.is_multiple_of(RECORD_ALIGN) {
                if let Some(start) = starts.get_mut(unit) {
                    *start = 1;
                }
            }
            if let Some(end) = end {
                // A record lies inside the page, so inside the map.
                bounds[unit] = 1;
                bounds[end / RECORD_ALIGN] = 1;
            }
        });
    }

    /// The second test of [`runs_stay_in_objects`]: no run touches a header, none needs a
    /// split, no two mergeable runs have a bound between them.
    fn keeps(&self, runs: &[Range<usize>], floor: usize, header: usize) -> bool {
        let (starts, bounds) = (self.starts.as_ref(), self.bounds.as_ref());
        let touches_header = runs.iter().any(|run| {
            any_set(
                starts,
                run.start / RECORD_ALIGN..(run.end - 1) / RECORD_ALIGN + 1,
            )
        });
        !touches_header
            && runs_stay_in_segments(runs, floor, header, &|units| any_set(bounds, units))
    }
}

/// Is any unit of `units` set in byte map `map`? Units past the map are not.
fn any_set(map: &[u8], units: Range<usize>) -> bool {
    let end = units.end.min(map.len());
    map.get(units.start..end)
        .is_some_and(|set| set.iter().any(|&unit| unit != 0))
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
        if page::kind(image) == Some(PageKind::Slotted) {
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

/// Merges neighbouring runs by the minimal-traffic rule, in place; every run is known to lie
/// in one segment with any neighbour close enough to merge with.
fn merge_close_runs(runs: &mut Vec<Range<usize>>, header: usize) {
    let mut written = 0;
    for index in 0..runs.len() {
        let run = runs[index].clone();
        if written > 0 && 2 * (run.start - runs[written - 1].end) <= header {
            runs[written - 1].end = run.end;
        } else {
            runs[written] = run;
            written += 1;
        }
    }
    runs.truncate(written);
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
        let slotted = |image: &[u8]| page::kind(image) == Some(PageKind::Slotted);
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
