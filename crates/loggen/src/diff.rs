//! Modified regions of two images, and merging them so the log records describing them are as
//! small as possible.
//!
//! A record costs a fixed header H plus its bytes twice (before and after image). Two regions
//! separated by `gap` unchanged bytes cost one header less if logged as one record, but log the
//! gap twice: merging pays exactly when `2 * gap <= H`. The decision for each gap depends on
//! that gap alone, so deciding gap by gap gives the least traffic over all ways of covering the
//! regions with records (QuickStore section 3.2.2; proven here against a brute-force search).

use crate::compare::for_each_run;
use std::ops::Range;

/// H for update records: the 40-byte record header plus the update's 16 bytes of fields (page,
/// offset, length, flags).
pub const UPDATE_RECORD_FIXED_BYTES: usize = 56;

/// H for Hosking's redo records of a client (generator `ObjectRedo`): OID (8 bytes), offset in
/// the object (4) and length (4); no before bytes.
pub const OBJECT_REDO_RECORD_FIXED_BYTES: usize = 16;

/// The modified regions of `after` relative to `before` inside `within`, merged by the
/// minimal-traffic rule for records of fixed cost `header`.
pub fn changed_ranges(
    before: &[u8],
    after: &[u8],
    within: Range<usize>,
    header: usize,
) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    push_changed_ranges(before, after, within, header, &mut ranges);
    ranges
}

/// [`changed_ranges`] appended to `out`, scanning and merging in one pass with no allocation
/// of its own (diffing a page calls it once per object). Ranges already in `out` are never
/// merged with.
pub fn push_changed_ranges(
    before: &[u8],
    after: &[u8],
    within: Range<usize>,
    header: usize,
    out: &mut Vec<Range<usize>>,
) {
    let first = out.len();
    for_each_region(before, after, within, |region| {
        let merges = out.len() > first;
        match out.last_mut() {
            Some(last) if merges && 2 * (region.start - last.end) <= header => {
                last.end = region.end
            }
            _ => out.push(region),
        }
    });
}

/// The maximal runs of differing bytes inside `within`, in order.
pub fn modified_regions(before: &[u8], after: &[u8], within: Range<usize>) -> Vec<Range<usize>> {
    let mut regions = Vec::new();
    for_each_region(before, after, within, |region| regions.push(region));
    regions
}

/// Calls `found` with each maximal run of differing bytes inside `within`, in order.
fn for_each_region(
    before: &[u8],
    after: &[u8],
    within: Range<usize>,
    mut found: impl FnMut(Range<usize>),
) {
    assert_eq!(before.len(), after.len());
    assert!(within.end <= before.len());
    let base = within.start;
    for_each_run(&before[within.clone()], &after[within], &mut |run| {
        found(base + run.start..base + run.end)
    });
}

/// Merges neighbouring regions whenever `2 * gap <= header`.
pub fn merge(regions: Vec<Range<usize>>, header: usize) -> Vec<Range<usize>> {
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(regions.len());
    for region in regions {
        match merged.last_mut() {
            Some(last) if 2 * (region.start - last.end) <= header => last.end = region.end,
            _ => merged.push(region),
        }
    }
    merged
}

/// Log bytes of one record per range: `header` plus the range's bytes twice.
pub fn traffic(ranges: &[Range<usize>], header: usize) -> usize {
    ranges.iter().map(|r| header + 2 * r.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn close_changes_merge_far_ones_do_not() {
        let before = vec![0u8; 200];
        let mut after = before.clone();
        after[10] = 1;
        after[20] = 1; // gap 9: merged
        after[150] = 1; // gap 129: separate
        let h = UPDATE_RECORD_FIXED_BYTES;
        assert_eq!(
            changed_ranges(&before, &after, 0..200, h),
            vec![10..21, 150..151]
        );
        assert!(changed_ranges(&before, &before, 0..200, h).is_empty());
        // The paper's example: words 1 and 3 of an object changed, H of about 50 bytes: one
        // record of 50 + 2 x 12 bytes beats two of 50 + 2 x 4 each (74 against 116).
        let mut object = vec![0u8; 12];
        object[0..4].fill(1);
        object[8..12].fill(1);
        let merged = changed_ranges(&[0u8; 12], &object, 0..12, 50);
        assert_eq!(merged, vec![0..12]);
        assert_eq!(traffic(&merged, 50), 74);
        assert_eq!(traffic(&[0..4, 8..12], 50), 116);
    }

    /// The least traffic of any way to cover `regions` with records, each record covering a
    /// run of consecutive regions (covering anything more only adds bytes): tries all 2^(n-1)
    /// choices of which neighbours share a record.
    fn brute_force_minimum(regions: &[Range<usize>], header: usize) -> usize {
        if regions.is_empty() {
            return 0;
        }
        let gaps = regions.len() - 1;
        (0u32..1 << gaps)
            .map(|joined| {
                let mut records = vec![regions[0].clone()];
                for (i, region) in regions.iter().enumerate().skip(1) {
                    if joined & (1 << (i - 1)) != 0 {
                        records.last_mut().expect("one record at least").end = region.end;
                    } else {
                        records.push(region.clone());
                    }
                }
                traffic(&records, header)
            })
            .min()
            .expect("at least one choice")
    }

    proptest! {
        /// Applying the after-bytes of every range to the before image gives the after image,
        /// and every byte outside the ranges was equal already.
        #[test]
        fn ranges_rebuild_the_after_image(
            before in proptest::collection::vec(any::<u8>(), 1..600),
            edits in proptest::collection::vec((0usize..600, any::<u8>()), 0..40),
        ) {
            let mut after = before.clone();
            for (at, value) in edits {
                let at = at % after.len();
                after[at] = value;
            }
            let ranges = changed_ranges(&before, &after, 0..before.len(), UPDATE_RECORD_FIXED_BYTES);
            let mut rebuilt = before.clone();
            for r in &ranges {
                rebuilt[r.clone()].copy_from_slice(&after[r.clone()]);
            }
            prop_assert_eq!(&rebuilt, &after);
            // The one-pass scan-and-merge equals merging the maximal regions afterwards.
            let two_pass = merge(
                modified_regions(&before, &after, 0..before.len()),
                UPDATE_RECORD_FIXED_BYTES,
            );
            prop_assert_eq!(&ranges, &two_pass);
            for pair in ranges.windows(2) {
                prop_assert!(2 * (pair[1].start - pair[0].end) > UPDATE_RECORD_FIXED_BYTES);
            }
        }

        /// The gap-by-gap rule is minimal: no way of grouping the modified regions of an
        /// object into records logs fewer bytes.
        #[test]
        fn merge_rule_is_minimal(
            len in 1usize..160,
            edits in proptest::collection::vec((0usize..160, 1usize..6), 0..12),
            header in prop_oneof![Just(8usize), Just(24), Just(50), Just(56), Just(100)],
        ) {
            let before = vec![0u8; len];
            let mut after = before.clone();
            for (at, run) in edits {
                let at = at % len;
                for byte in &mut after[at..(at + run).min(len)] {
                    *byte = 1;
                }
            }
            let regions = modified_regions(&before, &after, 0..len);
            prop_assume!(regions.len() <= 14);
            let merged = merge(regions.clone(), header);
            prop_assert_eq!(traffic(&merged, header), brute_force_minimum(&regions, header));
        }
    }
}
