//! Fuzz target: the diff of any two page images (a slot table pointing anywhere, records that
//! overlap or run past the page, a page garbled in memory) must not panic, and its ranges must
//! rebuild the after-image: in order, apart, inside the page (or the piece), never across an
//! object bound, covering every changed byte but the server-owned checksum and LSN. The same
//! for one piece of the page, as sub-page diffing takes it. And with the record bounds kept
//! from an earlier diff of the page, the diff is the one read afresh.
//! Run with `cargo fuzz run page_diff` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::PageId;
use lodestore_loggen::page::{diff_cuts, object_cuts, SERVER_OWNED};
use lodestore_loggen::{
    page_ranges, page_ranges_cached, Generator, PageBounds, UPDATE_RECORD_FIXED_BYTES,
};
use lodestore_storage::page::PAGE_HEADER_BYTES;
use lodestore_storage::slotted;
use std::ops::Range;

const PAGE_BYTES: usize = 4096;

fuzz_target!(|data: &[u8]| {
    // Byte 0: bit 0 formats the pre-image as a slotted page before the data fills it past the
    // page header (so the slotted paths are reached at once); bits 1-2 pick the piece size.
    // Bytes 1-2: the piece's place. Then the pre-image's bytes (zero-filled to a page), then
    // 3-byte edits of the after-image (a little-endian offset and a byte).
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let Some((place, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let (image, edits) = rest.split_at(rest.len().min(PAGE_BYTES));
    let mut before = vec![0u8; PAGE_BYTES];
    let from = if control & 1 == 1 {
        slotted::init(&mut before, PageId(1), 0);
        PAGE_HEADER_BYTES
    } else {
        0
    };
    let fill = image.len().min(PAGE_BYTES - from);
    before[from..from + fill].copy_from_slice(&image[..fill]);
    let mut after = before.clone();
    for edit in edits.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % PAGE_BYTES;
        after[at] = edit[2];
    }

    let ranges = page_ranges(&before, &after, UPDATE_RECORD_FIXED_BYTES);
    check(
        &ranges,
        0..PAGE_BYTES,
        &before,
        &after,
        &diff_cuts(&before, &after),
    );

    // An earlier diff of the page, of two bytes 8 apart (so its bounds are read and kept,
    // if its merged range stays in an object), then this one with the bounds it kept.
    let mut earlier = before.clone();
    let first = usize::from(u16::from_le_bytes(*place)) % (PAGE_BYTES - 8);
    earlier[first] ^= 1;
    earlier[first + 8] ^= 1;
    let mut bounds = PageBounds::default();
    let mut kept = Vec::new();
    let header = UPDATE_RECORD_FIXED_BYTES;
    page_ranges_cached(&earlier, &before, header, &mut bounds, 1, &mut kept);
    page_ranges_cached(&before, &after, header, &mut bounds, 1, &mut kept);
    assert_eq!(kept, ranges, "the diff with kept bounds");

    // A piece as sub-page diffing cuts it: 8 to 64 bytes, aligned to its size.
    let size = 8 << ((control >> 1) & 3);
    let at = usize::from(u16::from_le_bytes(*place)) % (PAGE_BYTES / size) * size;
    let piece = at..at + size;
    let ranges = Generator::SubPageDiff.piece_ranges(&after, at, &before[piece.clone()]);
    check(&ranges, piece, &before, &after, &object_cuts(&[&after]));
});

/// The ranges of a diff of `area` of the two images, against what every diff must be.
fn check(ranges: &[Range<usize>], area: Range<usize>, before: &[u8], after: &[u8], cuts: &[usize]) {
    let mut rebuilt = before.to_vec();
    let mut previous_end = area.start;
    for range in ranges {
        assert!(
            range.start >= previous_end && range.start < range.end && range.end <= area.end,
            "range {range:?} out of order or outside {area:?}"
        );
        previous_end = range.end;
        assert!(
            !cuts.iter().any(|&cut| range.start < cut && cut < range.end),
            "range {range:?} spans an object bound"
        );
        assert!(
            !SERVER_OWNED
                .iter()
                .any(|owned| range.start < owned.end && owned.start < range.end),
            "range {range:?} holds a server-owned byte"
        );
        rebuilt[range.clone()].copy_from_slice(&after[range.clone()]);
    }
    for i in area {
        let owned = SERVER_OWNED.iter().any(|owned| owned.contains(&i));
        assert!(
            owned || rebuilt[i] == after[i],
            "byte {i} changed but no range holds it"
        );
    }
}
