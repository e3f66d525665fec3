//! The header every page carries, whatever its kind.
//!
//! ```text
//! offset size field
//!      0    4 checksum      xxh3-64 of bytes 4..page_size, low 32 bits (see checksum)
//!      4    2 version       page format version (PAGE_FORMAT_VERSION)
//!      6    1 kind          PageKind
//!      7    1 flags         reserved, 0
//!      8    8 lsn           LSN of the last change applied to this page
//!     16    4 page number   where this page belongs: catches misdirected writes
//!     20    2 volume id
//!     22    2 reserved, 0
//!     24    8 kind area     meaning depends on the kind (large data: owner OID; space map:
//!                           first covered page and count)
//!     32      body
//! ```
//!
//! The checksum is set by [`seal`] just before a page goes to disk and verified by [`verify`]
//! right after it is read back; copies in memory may carry a stale checksum.

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use lodestore_core::checksum::page_checksum;
use lodestore_core::{Lsn, PageId, VolumeId};

/// Version of the page layout described above, which every page written gets. Version 2
/// changed the checksum from crc32c to xxh3 (see `lodestore_core::checksum` for why); pages of
/// version 1 are still read, checked by crc32c, and become version 2 when next written.
pub const PAGE_FORMAT_VERSION: u16 = 2;
/// The oldest page version this build reads.
pub const PAGE_FORMAT_VERSION_MIN: u16 = 1;

/// The checksum of a page of `version` (unverified: a wrong version fails the check).
fn checksum_of(version: u16, page: &[u8]) -> u32 {
    let covered = &page[CHECKSUM_AT + 4..];
    if version == 1 {
        lodestore_core::checksum::crc32c(covered)
    } else {
        page_checksum(covered)
    }
}
/// Bytes of the common header; the body starts here.
pub const PAGE_HEADER_BYTES: usize = 32;

const CHECKSUM_AT: usize = 0;
const VERSION_AT: usize = 4;
const KIND_AT: usize = 6;
const FLAGS_AT: usize = 7;
const LSN_AT: usize = 8;
const NUMBER_AT: usize = 16;
const VOLUME_AT: usize = 20;
const RESERVED_AT: usize = 22;
/// Offset of the 8-byte kind-specific area.
pub const KIND_AREA_AT: usize = 24;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PageKind {
    /// Allocated in the file, holding nothing; its body is all zeros.
    Free = 0,
    /// One of the two superblock copies (pages 0 and 1).
    Superblock = 1,
    /// Small objects behind a slot table.
    Slotted = 2,
    /// A run of bytes of a large object.
    LargeData = 3,
    /// Free-space hints for the pages that follow it.
    SpaceMap = 4,
}

impl PageKind {
    pub fn from_u8(value: u8) -> Option<PageKind> {
        Some(match value {
            0 => PageKind::Free,
            1 => PageKind::Superblock,
            2 => PageKind::Slotted,
            3 => PageKind::LargeData,
            4 => PageKind::SpaceMap,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            PageKind::Free => "free",
            PageKind::Superblock => "superblock",
            PageKind::Slotted => "slotted",
            PageKind::LargeData => "large-data",
            PageKind::SpaceMap => "space-map",
        }
    }
}

/// Formats `page` as an empty page of `kind`: all zeros but the header.
pub fn format(page: &mut [u8], kind: PageKind, number: PageId, volume: VolumeId) {
    page.fill(0);
    put_u16(page, VERSION_AT, PAGE_FORMAT_VERSION);
    page[KIND_AT] = kind as u8;
    put_u32(page, NUMBER_AT, number.0);
    put_u16(page, VOLUME_AT, volume);
}

/// The kind byte, unvalidated.
pub fn kind_byte(page: &[u8]) -> u8 {
    page[KIND_AT]
}

/// The kind, if the kind byte is a known one.
pub fn kind(page: &[u8]) -> Option<PageKind> {
    PageKind::from_u8(page[KIND_AT])
}

pub fn lsn(page: &[u8]) -> Lsn {
    Lsn(get_u64(page, LSN_AT))
}

pub fn set_lsn(page: &mut [u8], lsn: Lsn) {
    put_u64(page, LSN_AT, lsn.0);
}

pub fn number(page: &[u8]) -> PageId {
    PageId(get_u32(page, NUMBER_AT))
}

pub fn volume(page: &[u8]) -> VolumeId {
    get_u16(page, VOLUME_AT)
}

pub fn kind_area_u64(page: &[u8]) -> u64 {
    get_u64(page, KIND_AREA_AT)
}

pub fn set_kind_area_u64(page: &mut [u8], value: u64) {
    put_u64(page, KIND_AREA_AT, value);
}

/// Sets the checksum so the page can go to disk.
pub fn seal(page: &mut [u8]) {
    debug_assert!(page.len() >= PAGE_HEADER_BYTES);
    put_u16(page, VERSION_AT, PAGE_FORMAT_VERSION);
    let sum = checksum_of(PAGE_FORMAT_VERSION, page);
    put_u32(page, CHECKSUM_AT, sum);
}

/// Marks a page read from disk and verified as of the current version, so every copy in
/// memory carries one version whatever the disk held (an older page is rewritten in the
/// current format, with its checksum, when it next goes to disk).
pub fn upgrade_in_memory(page: &mut [u8]) {
    put_u16(page, VERSION_AT, PAGE_FORMAT_VERSION);
}

/// Checks a page read from disk at position `expected`: checksum first (so nothing unverified is
/// interpreted), then version, identity and kind. Returns a description of the first problem.
pub fn verify(page: &[u8], expected: PageId, volume_id: VolumeId) -> Result<PageKind, String> {
    let stored = get_u32(page, CHECKSUM_AT);
    let version = get_u16(page, VERSION_AT);
    let computed = checksum_of(version, page);
    if stored != computed {
        if crate::bytes::is_all_zero(page) {
            return Err("page is all zeros (never written, or lost)".into());
        }
        return Err(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    if !(PAGE_FORMAT_VERSION_MIN..=PAGE_FORMAT_VERSION).contains(&version) {
        return Err(format!(
            "page format version {version}, this build reads {PAGE_FORMAT_VERSION_MIN} to \
             {PAGE_FORMAT_VERSION}"
        ));
    }
    if number(page) != expected {
        return Err(format!(
            "page claims to be page {} (misdirected write)",
            number(page)
        ));
    }
    if volume(page) != volume_id {
        return Err(format!(
            "page belongs to volume {}, not {volume_id}",
            volume(page)
        ));
    }
    if page[FLAGS_AT] != 0 || get_u16(page, RESERVED_AT) != 0 {
        return Err("reserved header bytes are not zero".into());
    }
    PageKind::from_u8(page[KIND_AT]).ok_or_else(|| format!("unknown page kind {}", page[KIND_AT]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_page_verifies_and_any_flip_is_caught() {
        let mut page = vec![0u8; 4096];
        format(&mut page, PageKind::Slotted, PageId(7), 0);
        page[100] = 42;
        set_lsn(&mut page, Lsn(99));
        seal(&mut page);
        assert_eq!(verify(&page, PageId(7), 0), Ok(PageKind::Slotted));
        assert!(verify(&page, PageId(8), 0)
            .unwrap_err()
            .contains("misdirected"));
        for at in (0..page.len()).step_by(61).chain([0, 1, 4095]) {
            let mut copy = page.clone();
            copy[at] ^= 0x10;
            assert!(
                verify(&copy, PageId(7), 0).is_err(),
                "flip at {at} not caught"
            );
        }
    }

    #[test]
    fn zero_page_is_named_as_such() {
        let page = vec![0u8; 4096];
        assert!(verify(&page, PageId(3), 0)
            .unwrap_err()
            .contains("all zeros"));
    }

    /// Two versions of a page that differ only inside a block sealed by its own crc32c (a
    /// collection's header at the end of the page): a write torn between them must fail the
    /// check. Under the version-1 checksum (crc32c) it passed.
    #[test]
    fn a_write_torn_between_two_versions_of_a_sealed_block_is_caught() {
        let sealed_block = |fill: u8| -> Vec<u8> {
            let mut block = vec![fill; 60];
            let crc = lodestore_core::checksum::crc32c(&block);
            block.extend_from_slice(&crc.to_le_bytes());
            block
        };
        let version = |fill: u8, lsn: u64| -> Vec<u8> {
            let mut page = vec![0u8; 4096];
            format(&mut page, PageKind::Slotted, PageId(5), 0);
            page[4032..].copy_from_slice(&sealed_block(fill));
            set_lsn(&mut page, Lsn(lsn));
            seal(&mut page);
            page
        };
        let (old, new) = (version(4, 100), version(15, 200));
        let mut torn = new[..1536].to_vec();
        torn.extend_from_slice(&old[1536..]);
        assert!(verify(&torn, PageId(5), 0)
            .unwrap_err()
            .contains("checksum mismatch"));
    }

    /// A page of version 1 (checked by crc32c) still reads, and is written as the current
    /// version once upgraded in memory and sealed.
    #[test]
    fn a_version_1_page_reads_and_is_rewritten_in_the_current_format() {
        let mut page = vec![0u8; 4096];
        format(&mut page, PageKind::Slotted, PageId(9), 0);
        page[200] = 7;
        put_u16(&mut page, VERSION_AT, 1);
        let crc = lodestore_core::checksum::crc32c(&page[CHECKSUM_AT + 4..]);
        put_u32(&mut page, CHECKSUM_AT, crc);
        assert_eq!(verify(&page, PageId(9), 0), Ok(PageKind::Slotted));
        upgrade_in_memory(&mut page);
        seal(&mut page);
        assert_eq!(get_u16(&page, VERSION_AT), PAGE_FORMAT_VERSION);
        assert_eq!(verify(&page, PageId(9), 0), Ok(PageKind::Slotted));
        // A version this build does not know is refused by name.
        put_u16(&mut page, VERSION_AT, 3);
        let sum = checksum_of(3, &page);
        put_u32(&mut page, CHECKSUM_AT, sum);
        assert!(verify(&page, PageId(9), 0)
            .unwrap_err()
            .contains("page format version 3"));
    }
}
