//! Finding the byte ranges in which two images of a page differ, merged so that the log
//! records describing them are as small as possible.
//!
//! A record costs a fixed header plus its bytes twice (before and after). Two changed ranges
//! separated by `gap` unchanged bytes cost one header less if merged, but log the gap twice
//! more; merging pays exactly when `2 * gap <= header` (QuickStore section 3.2.2).

use std::ops::Range;

/// Bytes of a log record that do not depend on its length: header plus update body fields.
pub const UPDATE_RECORD_FIXED_BYTES: usize = lodestore_wal::RECORD_HEADER_BYTES + 16;

/// The changed ranges of `after` relative to `before` inside `within`, merged by the
/// minimal-traffic rule. Compares a word at a time.
pub fn changed_ranges(before: &[u8], after: &[u8], within: Range<usize>) -> Vec<Range<usize>> {
    assert_eq!(before.len(), after.len());
    let mut raw: Vec<Range<usize>> = Vec::new();
    let mut at = within.start;
    let end = within.end;
    while at < end {
        // Skip equal words quickly.
        while at + 8 <= end && before[at..at + 8] == after[at..at + 8] {
            at += 8;
        }
        while at < end && before[at] == after[at] {
            at += 1;
        }
        if at >= end {
            break;
        }
        let start = at;
        while at < end && before[at] != after[at] {
            at += 1;
        }
        raw.push(start..at);
    }
    merge(raw, UPDATE_RECORD_FIXED_BYTES)
}

/// Merges neighbouring ranges whenever `2 * gap <= header`.
pub fn merge(ranges: Vec<Range<usize>>, header: usize) -> Vec<Range<usize>> {
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if 2 * (range.start - last.end) <= header => last.end = range.end,
            _ => merged.push(range),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            let ranges = changed_ranges(&before, &after, 0..before.len());
            let mut rebuilt = before.clone();
            for r in &ranges {
                rebuilt[r.clone()].copy_from_slice(&after[r.clone()]);
            }
            prop_assert_eq!(&rebuilt, &after);
            for pair in ranges.windows(2) {
                prop_assert!(2 * (pair[1].start - pair[0].end) > UPDATE_RECORD_FIXED_BYTES);
            }
        }
    }

    #[test]
    fn close_changes_merge_far_ones_do_not() {
        let before = vec![0u8; 200];
        let mut after = before.clone();
        after[10] = 1;
        after[20] = 1; // gap 9: merged
        after[150] = 1; // gap 129: separate
        assert_eq!(
            changed_ranges(&before, &after, 0..200),
            vec![10..21, 150..151]
        );
        assert!(changed_ranges(&before, &before, 0..200).is_empty());
    }
}
