//! The log generators by name. A client's detector copies the bytes a transaction is about to
//! change into the recovery buffer, a *piece* at a time (a whole page, a sub-page block, a card
//! or an object); a generator turns one piece and the page as it is now into the byte ranges to
//! log.
//!
//! - `PageDiff`: diff, regions within objects (QuickStore section 3.2).
//! - `SubPageDiff`: the same diff over a smaller piece: a block (QuickStore section 3.3), a card
//!   or an object (Hosking section 2.2's diff of modified objects against their originals).
//! - `SubPageLog`: log the piece whole, no diff (QuickStore section 3.3).
//! - `WholePage`: no records at all; the page itself is shipped (whole-page logging, QuickStore
//!   section 3.4). `piece_ranges` then gives the whole piece, for completeness.
//! - `ObjectRedo`: Hosking's checkpoint-style records (section 3): the same diff against the
//!   originals, but each range inside an object becomes a record of (OID, offset in the object,
//!   new bytes), without before bytes; ranges outside objects (a page's slot table and header,
//!   changed by allocation) stay physical records. The server reads the before bytes off its
//!   own copy. A redo record's fixed cost is smaller and it carries the gap once, so ranges merge
//!   when gap <= H_redo (the rule of `changed_ranges` with a cost of 2 x H_redo).
//!
//! A piece that is the whole page is always diffed with objects taken from both images, because
//! a whole-page copy is what detectors take before a page's structure changes (objects added,
//! moved, removed), and the objects of the pre-image bound the regions too.
//! The checksum (bytes 0..4) and the LSN (8..16) are never logged: the server sets them.

use crate::diff::{changed_ranges, OBJECT_REDO_RECORD_FIXED_BYTES, UPDATE_RECORD_FIXED_BYTES};
use crate::page::{
    object_cuts_within, page_ranges_with, piece_ranges_within_objects, PageBounds, SERVER_OWNED,
};
use std::ops::Range;

/// How a client turns what changed into log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Generator {
    PageDiff,
    SubPageDiff,
    SubPageLog,
    WholePage,
    ObjectRedo,
}

impl Generator {
    /// Does this generator ship records (rather than whole pages)?
    pub fn logs_records(self) -> bool {
        self != Generator::WholePage
    }

    /// The record cost the minimal-traffic merge weighs a gap against (`changed_ranges`
    /// merges when 2 x gap <= this): update records carry a gap twice (before and after
    /// bytes), redo records once.
    pub fn merge_cost(self) -> usize {
        match self {
            Generator::ObjectRedo => 2 * OBJECT_REDO_RECORD_FIXED_BYTES,
            _ => UPDATE_RECORD_FIXED_BYTES,
        }
    }

    /// The ranges of `page` to log for one piece: `before` holds bytes
    /// `at..at + before.len()` of the page as they were when the piece was copied, `page` is
    /// the page now. Ranges are in order, never overlap, and lie inside the piece.
    pub fn piece_ranges(self, page: &[u8], at: usize, before: &[u8]) -> Vec<Range<usize>> {
        let mut ranges = Vec::new();
        self.piece_ranges_with(page, at, before, None, &mut ranges);
        ranges
    }

    /// [`Generator::piece_ranges`] into `ranges` (cleared first), for a page diffed again and
    /// again (its pieces at a commit, the page in later transactions): `bounds` keeps the
    /// page's record bounds under `key` between calls (see [`PageBounds`] for when the caller
    /// must forget them), and one vector serves every piece.
    pub fn piece_ranges_cached(
        self,
        page: &[u8],
        at: usize,
        before: &[u8],
        bounds: &mut PageBounds,
        key: u64,
        ranges: &mut Vec<Range<usize>>,
    ) {
        self.piece_ranges_with(page, at, before, Some((bounds, key)), ranges)
    }

    fn piece_ranges_with(
        self,
        page: &[u8],
        at: usize,
        before: &[u8],
        cached: Option<(&mut PageBounds, u64)>,
        ranges: &mut Vec<Range<usize>>,
    ) {
        let size = page.len();
        let end = at + before.len();
        assert!(
            end <= size,
            "piece {at}..{end} lies outside a page of {size} bytes"
        );
        if at == 0 && end == size && self != Generator::WholePage {
            return page_ranges_with(before, page, self.merge_cost(), cached, ranges);
        }
        match self {
            Generator::PageDiff | Generator::SubPageDiff | Generator::ObjectRedo => {
                let header = self.merge_cost();
                if !piece_ranges_within_objects(page, at, before, header, cached, ranges) {
                    *ranges = piece_ranges_by_segment(page, at, before, header);
                }
            }
            Generator::SubPageLog | Generator::WholePage => *ranges = client_owned(at..end),
        }
    }
}

/// A diff piece's ranges by definition: the piece (bytes `at..at + before.len()` of `page`)
/// split at the objects of `page` now, the server-owned header fields left out, each segment
/// diffed and merged for records of fixed cost `header`.
fn piece_ranges_by_segment(
    page: &[u8],
    at: usize,
    before: &[u8],
    header: usize,
) -> Vec<Range<usize>> {
    let end = at + before.len();
    let now = &page[at..end];
    segments(&object_cuts_within(page, at..end), at..end)
        .flat_map(|segment| {
            let within = segment.start - at..segment.end - at;
            changed_ranges(before, now, within, header)
                .into_iter()
                .map(|r| r.start + at..r.end + at)
        })
        .collect()
}

/// `range` split at `cuts` (sorted), without the server-owned header fields.
fn segments(cuts: &[usize], range: Range<usize>) -> impl Iterator<Item = Range<usize>> + '_ {
    let inner = cuts
        .iter()
        .copied()
        .filter(move |&c| c > range.start && c < range.end);
    let starts = std::iter::once(range.start).chain(inner.clone());
    let ends = inner.chain(std::iter::once(range.end));
    starts
        .zip(ends)
        .flat_map(|(start, end)| client_owned(start..end))
}

/// `range` without the server-owned header bytes (at most three pieces).
fn client_owned(range: Range<usize>) -> Vec<Range<usize>> {
    let mut pieces = vec![range];
    for owned in SERVER_OWNED {
        pieces = pieces
            .into_iter()
            .flat_map(|piece| {
                let left = piece.start..piece.end.min(owned.start);
                let right = piece.start.max(owned.end)..piece.end;
                [left, right].into_iter().filter(|r| r.start < r.end)
            })
            .collect();
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_core::{PageId, TypeId};
    use lodestore_storage::slotted;
    use proptest::prelude::*;

    const PAGE: usize = 1024;

    fn generators() -> impl Strategy<Value = Generator> {
        prop_oneof![
            Just(Generator::PageDiff),
            Just(Generator::SubPageDiff),
            Just(Generator::SubPageLog),
            Just(Generator::WholePage),
            Just(Generator::ObjectRedo),
        ]
    }

    /// A slotted page with a few objects, so object cuts fall inside pieces.
    fn page_with_objects(sizes: &[usize]) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        slotted::init(&mut page, PageId(7), 0);
        for &len in sizes {
            slotted::insert(&mut page, TypeId(1), len, false);
        }
        page
    }

    /// Replays `ranges` of `after` onto `before`.
    fn replay(before: &[u8], after: &[u8], ranges: &[Range<usize>]) -> Vec<u8> {
        let mut replayed = before.to_vec();
        for range in ranges {
            replayed[range.clone()].copy_from_slice(&after[range.clone()]);
        }
        replayed
    }

    proptest! {
        /// For every generator and every piece granularity: replaying the ranges generated for
        /// the pieces that cover the written bytes, on the pre-image, yields the after-image
        /// everywhere but the server's header fields; no range touches those fields or leaves
        /// its piece.
        #[test]
        fn replaying_generated_ranges_rebuilds_the_after_image(
            generator in generators(),
            piece_bytes in prop_oneof![Just(8usize), Just(16), Just(64), Just(256), Just(PAGE)],
            sizes in proptest::collection::vec(8usize..200, 0..4),
            edits in proptest::collection::vec((16usize..PAGE, 1usize..40, any::<u8>()), 0..20),
        ) {
            let before = page_with_objects(&sizes);
            let mut after = before.clone();
            let mut written = std::collections::BTreeSet::new();
            for (at, len, value) in edits {
                let end = (at + len).min(PAGE);
                after[at..end].fill(value);
                written.extend(at / piece_bytes..=(end - 1) / piece_bytes);
            }
            let mut ranges = Vec::new();
            for piece in written {
                let at = piece * piece_bytes;
                let piece_ranges =
                    generator.piece_ranges(&after, at, &before[at..at + piece_bytes]);
                for range in &piece_ranges {
                    prop_assert!(range.start >= at && range.end <= at + piece_bytes);
                    prop_assert!(SERVER_OWNED.iter().all(|o| range.end <= o.start || range.start >= o.end));
                }
                ranges.extend(piece_ranges);
            }
            let replayed = replay(&before, &after, &ranges);
            prop_assert_eq!(&replayed[16..], &after[16..]);
            prop_assert_eq!(&replayed[4..8], &after[4..8]);
        }
    }

    proptest! {
        /// The quick path of a piece diff (runs kept inside objects without splitting) gives
        /// what the definition gives, on pages whose objects were updated in place, moved or
        /// damaged, for pieces of every size and place.
        #[test]
        fn piece_diff_equals_the_per_segment_definition(
            sizes in proptest::collection::vec(8usize..120, 0..12),
            piece_bytes in prop_oneof![Just(8usize), Just(16), Just(64), Just(256)],
            edits in proptest::collection::vec(
                (prop_oneof![4 => 300usize..PAGE, 1 => 0usize..PAGE], 1usize..12, any::<u8>()),
                0..12,
            ),
            header in prop_oneof![Just(32usize), Just(56usize)],
        ) {
            let before = page_with_objects(&sizes);
            let mut after = before.clone();
            for (at, len, value) in edits {
                let end = (at + len).min(PAGE);
                after[at..end].fill(value);
            }
            // Alone, and with the page's bounds kept from one piece to the next.
            let mut bounds = PageBounds::default();
            // One vector for every piece, as a commit keeps: nothing of one piece may stay.
            let mut quick = Vec::new();
            for at in (0..PAGE).step_by(piece_bytes) {
                let piece = &before[at..at + piece_bytes];
                let expected = piece_ranges_by_segment(&after, at, piece, header);
                if piece_ranges_within_objects(&after, at, piece, header, None, &mut quick) {
                    prop_assert_eq!(&quick, &expected);
                }
                let cached = Some((&mut bounds, 7));
                if piece_ranges_within_objects(&after, at, piece, header, cached, &mut quick) {
                    prop_assert_eq!(&quick, &expected);
                }
            }
        }
    }

    #[test]
    fn sub_page_log_ships_whole_pieces_and_diff_only_changes() {
        let before = vec![0u8; PAGE];
        let mut after = before.clone();
        after[100] = 1;
        let log = Generator::SubPageLog.piece_ranges(&after, 64, &before[64..128]);
        assert_eq!(log, vec![64..128]);
        let diff = Generator::SubPageDiff.piece_ranges(&after, 64, &before[64..128]);
        assert_eq!(diff, vec![100..101]);
        let whole = Generator::WholePage.piece_ranges(&after, 0, &before);
        assert_eq!(whole, vec![4..8, 16..PAGE]);
    }

    #[test]
    fn piece_diff_does_not_merge_across_objects() {
        // Records fill the page from its end: the second object lies just before the first.
        let before = page_with_objects(&[8, 8]);
        let first = slotted::record(&before, 0).unwrap().unwrap().payload();
        let second = slotted::record(&before, 1).unwrap().unwrap().payload();
        assert!(second.end < first.start);
        let mut after = before.clone();
        // The last byte of one object and the first of its neighbour: close enough to merge
        // by distance (2 x 8 <= 56), but they belong to different objects.
        after[second.end - 1] ^= 1;
        after[first.start] ^= 1;
        let at = second.start;
        let piece = &before[at..first.end];
        let ranges = Generator::SubPageDiff.piece_ranges(&after, at, piece);
        assert_eq!(
            ranges,
            vec![second.end - 1..second.end, first.start..first.start + 1]
        );
    }
}
