//! Page diffing: the ranges of a page to log, never spanning two objects. Object boundaries are
//! taken from both images (objects may have moved in between, by compaction), and the page's
//! header fields and slot table count as objects of their own. A page that held no objects
//! before (a free page the transaction took) is one segment past its header fields: no other
//! transaction can have written it, and its new objects are logged in a few records instead of
//! one each, as ESM logs a new page whole. The checksum (bytes 0..4) and the LSN (8..16) are
//! never logged: the server sets them.
//!
//! - this module: the diff itself: one scan whose runs are merged by the minimal-traffic rule
//!   as they are found, and the exact split at the cuts when a merged range may reach one;
//! - `bounds`: whether the merged ranges stay inside objects, tested without sorting any
//!   bound, and the record bounds a caller keeps from one diff of a page to the next;
//! - `cuts`: every object bound of one or two images, in order, for the exact split.

mod bounds;
mod cuts;
#[cfg(test)]
mod tests;

use crate::compare::for_each_run_bridged;
use bounds::ranges_stay_in_objects;
pub use bounds::PageBounds;
use cuts::Cuts;
pub use cuts::{diff_cuts, object_cuts, object_cuts_within};
use lodestore_storage::page::{self, PageKind};
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
    if has_objects(before) {
        if ranges_stay_in_objects(before, after, ranges, cached) {
            return;
        }
    } else if ranges[0].start >= HEADER_FIELDS_END {
        // A page that held no objects, whose runs all lie past the header fields: they lie
        // in one segment, which ends at the page end (see [`diff_cuts`]).
        return;
    }
    let cuts = Cuts::of(before, after);
    // Some merged range may reach a bound: the runs themselves, split at the cuts. The scan
    // is repeated rather than its runs kept on the way, which the usual page does not need.
    // Runs come joined across gaps the rule would join anyway; a piece cut off at a bound is
    // trimmed to its changed bytes, so the answer is that of the exact runs.
    ranges.clear();
    for_each_run_bridged(
        before,
        after,
        bridge_for(before.len(), header),
        &mut |run| ranges.push(run),
    );
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
            let piece = trim_to_changes(before, after, start..end);
            if let (Some(piece), false) = (piece, is_server_owned(cuts[segment]..cuts[segment + 1]))
            {
                match split.last_mut() {
                    Some(last)
                        if last_segment == segment && 2 * (piece.start - last.end) <= header =>
                    {
                        last.end = piece.end
                    }
                    _ => split.push(piece),
                }
                last_segment = segment;
            }
            start = end;
        }
    }
    *ranges = split;
}

/// How many equal bytes the scan of `len` bytes may join runs across: half a record's fixed
/// cost (what the rule joins) for a page, none for a small piece, whose few masks would pay
/// for the joining without saving a callback.
fn bridge_for(len: usize, header: usize) -> usize {
    const JOIN_FROM_BYTES: usize = 512;
    if len >= JOIN_FROM_BYTES {
        header / 2
    } else {
        0
    }
}

/// The part of `range` from its first to its last changed byte; `None` if none changed. The
/// pieces of a joined run cut at a bound begin or end in a gap of a few bytes, so both loops
/// are short.
fn trim_to_changes(before: &[u8], after: &[u8], range: Range<usize>) -> Option<Range<usize>> {
    let start = range.clone().find(|&i| before[i] != after[i])?;
    let last = (start..range.end).rev().find(|&i| before[i] != after[i])?;
    Some(start..last + 1)
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
    for_each_run_bridged(
        before,
        after,
        bridge_for(before.len(), header),
        &mut |run| match ranges.last_mut() {
            Some(last) if 2 * (at + run.start - last.end) <= header => last.end = at + run.end,
            _ => {
                if ranges.capacity() == 0 {
                    ranges.reserve(RANGES_RESERVED); // one allocation for a typical update's runs
                }
                ranges.push(at + run.start..at + run.end)
            }
        },
    );
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

/// Is `image` a slotted page (one whose objects cut a diff)?
fn has_objects(image: &[u8]) -> bool {
    page::kind(image) == Some(PageKind::Slotted)
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
