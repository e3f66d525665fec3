//! Space-map pages: one byte of free-space hint per page, so finding room for an object does not
//! mean reading every page. The first map page is page 2; each map page describes the pages
//! right after it, and the next map page follows them.
//!
//! ```text
//! map page: common header, kind area = u32 first covered page, u32 covered count
//!           byte i of the body: hint for page (first covered + i)
//!   0        free page (kind free, or not yet in the file)
//!   1..=253  slotted page with at least (entry - 1) * granule free bytes
//!   254      empty slotted page: room for the largest small object
//!   255      not available for small objects (large data, directory, full page)
//! ```
//!
//! The map is a hint, never the truth: every decision it suggests is checked against the page
//! itself before it is acted on, and it can be rebuilt from the pages it describes.

use crate::page::{self, PageKind, PAGE_HEADER_BYTES};
use lodestore_core::{PageId, VolumeId};

pub const FIRST_MAP_PAGE: PageId = PageId(2);
pub const ENTRY_FREE: u8 = 0;
pub const ENTRY_EMPTY_SLOTTED: u8 = 254;
pub const ENTRY_UNAVAILABLE: u8 = 255;
const SLOTTED_CLASSES: usize = 252;

/// Pages one map page describes.
pub fn entries_per_map(page_size: usize) -> u32 {
    (page_size - PAGE_HEADER_BYTES) as u32
}

/// Is `page` a map page?
pub fn is_map_page(page: PageId, page_size: usize) -> bool {
    page.0 >= FIRST_MAP_PAGE.0
        && (page.0 - FIRST_MAP_PAGE.0).is_multiple_of(entries_per_map(page_size) + 1)
}

/// The map page describing `page` and the entry's index in it. `page` must be a data page
/// (not a superblock, not a map page).
pub fn locate(page: PageId, page_size: usize) -> (PageId, usize) {
    debug_assert!(page.0 > FIRST_MAP_PAGE.0 && !is_map_page(page, page_size));
    let group = entries_per_map(page_size) + 1;
    let relative = page.0 - FIRST_MAP_PAGE.0;
    let map = FIRST_MAP_PAGE.0 + relative / group * group;
    (PageId(map), (relative % group - 1) as usize)
}

/// Bytes one hint step stands for.
pub fn granule(page_size: usize) -> usize {
    page_size.div_ceil(SLOTTED_CLASSES)
}

/// The entry for a slotted page with `free` free bytes. Rounds down, so the hint never promises
/// more room than there is; an empty page gets its own entry so that it is offered even for
/// the largest small object.
pub fn entry_for_free_bytes(free: usize, page_size: usize) -> u8 {
    if free >= empty_slotted_free_bytes(page_size) {
        return ENTRY_EMPTY_SLOTTED;
    }
    (1 + (free / granule(page_size)).min(SLOTTED_CLASSES)) as u8
}

/// The free bytes a slotted-page entry promises at least.
pub fn free_bytes_at_least(entry: u8, page_size: usize) -> usize {
    debug_assert!(entry != ENTRY_FREE && entry != ENTRY_UNAVAILABLE);
    if entry == ENTRY_EMPTY_SLOTTED {
        return empty_slotted_free_bytes(page_size);
    }
    (entry as usize - 1) * granule(page_size)
}

fn empty_slotted_free_bytes(page_size: usize) -> usize {
    page_size - crate::slotted::SLOT_TABLE_AT
}

/// Formats an empty map page at `number`.
pub fn init(page: &mut [u8], number: PageId, volume: VolumeId) {
    page::format(page, PageKind::SpaceMap, number, volume);
    let covered = u64::from(number.0 + 1) | (u64::from(entries_per_map(page.len())) << 32);
    page::set_kind_area_u64(page, covered);
}

/// Checks the kind area of a map page read from `number`.
pub fn validate(page: &[u8], number: PageId) -> Result<(), String> {
    let area = page::kind_area_u64(page);
    let (first, count) = (area as u32, (area >> 32) as u32);
    // In 64 bits: the last page number has no page after it to cover.
    let expected_first = u64::from(number.0) + 1;
    if u64::from(first) != expected_first || count != entries_per_map(page.len()) {
        return Err(format!(
            "space map claims to cover {count} pages from {first}, expected {} from {expected_first}",
            entries_per_map(page.len()),
        ));
    }
    Ok(())
}

/// The entries of a map page.
pub fn entries(page: &[u8]) -> &[u8] {
    &page[PAGE_HEADER_BYTES..]
}

pub fn entries_mut(page: &mut [u8]) -> &mut [u8] {
    &mut page[PAGE_HEADER_BYTES..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry() {
        let ps = 4096;
        let e = entries_per_map(ps);
        assert!(is_map_page(PageId(2), ps));
        assert!(!is_map_page(PageId(3), ps));
        assert!(is_map_page(PageId(3 + e), ps));
        assert_eq!(locate(PageId(3), ps), (PageId(2), 0));
        assert_eq!(locate(PageId(2 + e), ps), (PageId(2), e as usize - 1));
        assert_eq!(locate(PageId(4 + e), ps), (PageId(3 + e), 0));
    }

    #[test]
    fn a_map_claiming_the_last_page_number_is_refused_not_a_panic() {
        let mut page = vec![0u8; 4096];
        init(&mut page, PageId(7), 0);
        assert_eq!(validate(&page, PageId(7)), Ok(()));
        assert!(validate(&page, PageId(8)).is_err());
        // Found by the slotted_page fuzz target: the number after the last one overflowed.
        page::set_kind_area_u64(&mut page, u64::from(entries_per_map(4096)) << 32);
        let refused = validate(&page, PageId(u32::MAX)).unwrap_err();
        assert!(refused.contains("from 4294967296"), "{refused}");
    }

    #[test]
    fn hints_never_overpromise() {
        for ps in lodestore_core::limits::PAGE_SIZES_SUPPORTED {
            for free in (0..ps).step_by(7) {
                let entry = entry_for_free_bytes(free, ps);
                assert!((1..=ENTRY_EMPTY_SLOTTED).contains(&entry));
                assert!(free_bytes_at_least(entry, ps) <= free);
            }
            let empty = ps - crate::slotted::SLOT_TABLE_AT;
            assert_eq!(entry_for_free_bytes(empty, ps), ENTRY_EMPTY_SLOTTED);
            assert!(
                free_bytes_at_least(ENTRY_EMPTY_SLOTTED, ps) >= crate::slotted::payload_max(ps)
            );
        }
    }
}
