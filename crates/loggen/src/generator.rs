//! The log generators by name: given a page's pre-image, its current image and (for the
//! sub-page schemes) which blocks were written, the byte ranges to ship as log records.
//!
//! - `PageDiff`: diff the whole page, regions within objects (QuickStore section 3.2).
//! - `SubPageDiff`: diff only the blocks a write barrier copied (QuickStore section 3.3).
//! - `SubPageLog`: log the copied blocks whole, no diff (QuickStore section 3.3).
//! - `WholePage`: the whole page (whole-page logging, QuickStore section 3.4).
//!
//! The checksum (bytes 0..4) and the LSN (8..16) are never logged: the server sets them.

use crate::diff::{changed_ranges, UPDATE_RECORD_FIXED_BYTES};
use crate::page::page_ranges;
use std::ops::Range;

/// How a client turns what changed into log records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Generator {
    PageDiff,
    SubPageDiff { block_bytes: usize },
    SubPageLog { block_bytes: usize },
    WholePage,
}

/// Bytes of the page header the server owns: checksum, then LSN.
const SERVER_OWNED: [Range<usize>; 2] = [0..4, 8..16];

impl Generator {
    /// The ranges of `after` to log. `written_blocks` are the indexes of the blocks of
    /// `block_bytes` a sub-page detector copied (ignored by the other generators). Every byte
    /// that differs between the images outside the server's header fields must lie in a
    /// written block for the sub-page generators; the detectors guarantee it.
    pub fn ranges(
        self,
        before: &[u8],
        after: &[u8],
        written_blocks: &[usize],
    ) -> Vec<Range<usize>> {
        assert_eq!(before.len(), after.len());
        let size = before.len();
        match self {
            Generator::PageDiff => page_ranges(before, after, UPDATE_RECORD_FIXED_BYTES),
            Generator::SubPageDiff { block_bytes } => blocks(written_blocks, block_bytes, size)
                .flat_map(|block| {
                    client_owned(block).into_iter().flat_map(|part| {
                        changed_ranges(before, after, part, UPDATE_RECORD_FIXED_BYTES)
                    })
                })
                .collect(),
            Generator::SubPageLog { block_bytes } => blocks(written_blocks, block_bytes, size)
                .flat_map(client_owned)
                .collect(),
            Generator::WholePage => client_owned(0..size),
        }
    }
}

/// The byte ranges of the written blocks, in order, each block once.
fn blocks(
    written: &[usize],
    block_bytes: usize,
    size: usize,
) -> impl Iterator<Item = Range<usize>> {
    assert!(
        block_bytes > 0 && size.is_multiple_of(block_bytes),
        "blocks must tile the page"
    );
    let mut indexes: Vec<usize> = written
        .iter()
        .copied()
        .filter(|&b| b < size / block_bytes)
        .collect();
    indexes.sort_unstable();
    indexes.dedup();
    indexes
        .into_iter()
        .map(move |b| b * block_bytes..(b + 1) * block_bytes)
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
    use proptest::prelude::*;

    const PAGE: usize = 1024;

    fn generators() -> impl Strategy<Value = Generator> {
        prop_oneof![
            Just(Generator::PageDiff),
            prop_oneof![Just(8usize), Just(16), Just(32), Just(64)]
                .prop_map(|block_bytes| Generator::SubPageDiff { block_bytes }),
            prop_oneof![Just(8usize), Just(16), Just(32), Just(64)]
                .prop_map(|block_bytes| Generator::SubPageLog { block_bytes }),
            Just(Generator::WholePage),
        ]
    }

    fn block_bytes(generator: Generator) -> usize {
        match generator {
            Generator::SubPageDiff { block_bytes } | Generator::SubPageLog { block_bytes } => {
                block_bytes
            }
            _ => 8,
        }
    }

    proptest! {
        /// For every generator: replaying its ranges (the after-bytes) on the pre-image yields
        /// the after-image, everywhere but the server's header fields.
        #[test]
        fn replaying_generated_ranges_rebuilds_the_after_image(
            generator in generators(),
            before in proptest::collection::vec(any::<u8>(), PAGE..=PAGE),
            edits in proptest::collection::vec((16usize..PAGE, 1usize..40, any::<u8>()), 0..20),
        ) {
            let mut after = before.clone();
            let block = block_bytes(generator);
            let mut written = Vec::new();
            for (at, len, value) in edits {
                let end = (at + len).min(PAGE);
                for byte in &mut after[at..end] {
                    *byte = value;
                }
                written.extend(at / block..=(end - 1) / block);
            }
            let ranges = generator.ranges(&before, &after, &written);
            let mut replayed = before.clone();
            for range in &ranges {
                prop_assert!(SERVER_OWNED.iter().all(|o| range.end <= o.start || range.start >= o.end));
                replayed[range.clone()].copy_from_slice(&after[range.clone()]);
            }
            prop_assert_eq!(&replayed[16..], &after[16..]);
            prop_assert_eq!(&replayed[4..8], &after[4..8]);
        }
    }

    #[test]
    fn sub_page_log_ships_whole_blocks_and_diff_only_changes() {
        let before = vec![0u8; PAGE];
        let mut after = before.clone();
        after[100] = 1;
        let log = Generator::SubPageLog { block_bytes: 64 }.ranges(&before, &after, &[1]);
        assert_eq!(log, vec![64..128]);
        let diff = Generator::SubPageDiff { block_bytes: 64 }.ranges(&before, &after, &[1]);
        assert_eq!(diff, vec![100..101]);
        let whole = Generator::WholePage.ranges(&before, &after, &[]);
        assert_eq!(whole, vec![4..8, 16..PAGE]);
    }
}
