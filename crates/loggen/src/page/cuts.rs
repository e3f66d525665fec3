//! The cuts of a page diff: every offset where an object, a header field or the slot table
//! of either image begins or ends, in order. Read only when some merged range may reach one
//! (a structure changed), to split the runs exactly.

use super::bounds::{map_words, SMALL_PAGE_BYTES};
use super::{has_objects, HEADER_FIELDS_END};
use lodestore_core::limits::PAGE_SIZE_MAX;
use lodestore_storage::slotted::{self, RECORD_ALIGN, SLOT_BYTES, SLOT_TABLE_AT};
use std::ops::Range;

/// Calls `visit` with the offset of every slot in use of slotted `page` whose table entry lies
/// below `limit`, and the end of its record if the header there can be one (as
/// [`slotted::record`] decides).
pub(super) fn visit_slots(page: &[u8], limit: usize, mut visit: impl FnMut(usize, Option<usize>)) {
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
pub(super) fn mapped_cuts<const W: usize>(images: [&[u8]; 2]) -> Vec<usize> {
    let size = images[0].len();
    debug_assert!(size / RECORD_ALIGN < W * 64);
    // The header fields' cuts and the slot tables' bounds: few, sorted apart (an image that
    // is not slotted leaves its table end at usize::MAX, never merged).
    let mut fixed = [0, 4, 8, 16, SLOT_TABLE_AT, usize::MAX, usize::MAX];
    let mut bounds = [0u64; W];
    for (image, table_end) in images.into_iter().zip(5..) {
        if has_objects(image) {
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

/// The cuts of a page diff, read once the page is known to have changed.
pub(super) enum Cuts {
    /// A page without objects (a large object's data): the header fields' cuts only.
    Header([usize; 5]),
    Objects(Vec<usize>),
}

impl Cuts {
    /// The cuts of a diff from `before` to `after` ([`diff_cuts`], found faster).
    pub(super) fn of(before: &[u8], after: &[u8]) -> Cuts {
        if has_objects(before) {
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

    pub(super) fn as_slice(&self) -> &[usize] {
        match self {
            Cuts::Header(cuts) => cuts,
            Cuts::Objects(cuts) => cuts,
        }
    }
}

/// The cuts a diff from `before` to `after` never lets a range cross: every bound of an object
/// (or a header field, or the slot table) of either image ([`object_cuts`]), or only the header
/// fields when `before` held no objects. Such a page is a free page the transaction took: its
/// exclusive lock kept every other transaction off it, so nothing but the transaction's own
/// new objects can lie in a range, and their undo is the page as it was.
pub fn diff_cuts(before: &[u8], after: &[u8]) -> Vec<usize> {
    if has_objects(before) {
        object_cuts(&[before, after])
    } else {
        object_cuts(&[before])
    }
}

/// Every offset where an object (or a header field, or the slot table) of any of `images`
/// begins or ends, with 0 and the page size: a log record never spans two of them.
pub fn object_cuts(images: &[&[u8]]) -> Vec<usize> {
    let size = images[0].len();
    let mut cuts = vec![0, 4, 8, 16, size];
    for image in images {
        debug_assert_eq!(image.len(), size);
        if has_objects(image) {
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
    if has_objects(page) {
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
