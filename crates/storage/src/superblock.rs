//! The superblock: what a store is, kept twice (pages 0 and 1) so that a torn write of one copy
//! leaves the other intact. Every update bumps `generation` and writes copy 0, then copy 1,
//! each synced; readers take the valid copy with the highest generation.
//!
//! ```text
//! offset size field                       (after the common 32-byte page header)
//!     32    8 magic               "LODESTOR"
//!     40    4 store format version (STORE_FORMAT_VERSION)
//!     44    4 page size in bytes
//!     48    8 generation          incremented by every superblock write
//!     56    8 last LSN            highest LSN stamped on any page
//!     64    8 root directory OID  the named-roots directory object
//!     72    8 created             seconds since the Unix epoch
//!     80    2 volume id
//!     82    4 page count          pages of the data file at the last checkpoint
//!     86    8 checkpoint LSN      where the last complete checkpoint begins: the log anchor
//!     94    8 log segment bytes   LSN span of one log segment
//!    102    1 recovery method     code of the method that wrote the log, from the server's
//!                                 registry of recovery methods (0 ..= RECOVERY_METHOD_CODE_MAX)
//!    103    1 multi-level strategy how multi-level transactions run unless a session says
//!                                 otherwise: 0 not chosen (the default), 1 S1, 2 S2, 3 S2/PS
//!    104      zeros to the end of the page
//! ```
//!
//! The magic and the format version sit at fixed offsets for every future version, so any build
//! can say "this is a Lodestore store of a newer format" instead of "corrupt".

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use crate::page::{self, PageKind};
use lodestore_core::{Lsn, Oid, PageId, VolumeId};

pub const MAGIC: [u8; 8] = *b"LODESTOR";
pub const STORE_FORMAT_VERSION: u32 = 1;
pub const MAGIC_AT: usize = 32;
pub const FORMAT_VERSION_AT: usize = 40;
const PAGE_SIZE_AT: usize = 44;
const GENERATION_AT: usize = 48;
const LAST_LSN_AT: usize = 56;
const ROOT_DIRECTORY_AT: usize = 64;
const CREATED_AT: usize = 72;
const VOLUME_AT: usize = 80;
const PAGE_COUNT_AT: usize = 82;
const CHECKPOINT_LSN_AT: usize = 86;
const LOG_SEGMENT_BYTES_AT: usize = 94;
const RECOVERY_METHOD_AT: usize = 102;
const MULTI_LEVEL_STRATEGY_AT: usize = 103;
const UNUSED_AT: usize = 104;
/// Recovery method codes this build knows are 0 ..= this; the server's registry of recovery
/// methods names them.
pub const RECOVERY_METHOD_CODE_MAX: u8 = 6;
/// The code a new store starts with (the registry's default method).
pub const RECOVERY_METHOD_CODE_DEFAULT: u8 = 0;
/// Multi-level strategy codes are 0 (none chosen) ..= this; the API names them.
pub const MULTI_LEVEL_STRATEGY_CODE_MAX: u8 = 3;

/// Pages 0 and 1.
// The fields follow the page header without overlapping, in order, and the whole superblock
// fits in the smallest page.
const _: () = {
    assert!(MAGIC_AT >= page::PAGE_HEADER_BYTES);
    assert!(FORMAT_VERSION_AT == MAGIC_AT + 8);
    assert!(PAGE_SIZE_AT == FORMAT_VERSION_AT + 4);
    assert!(GENERATION_AT >= PAGE_SIZE_AT + 4);
    assert!(LAST_LSN_AT == GENERATION_AT + 8);
    assert!(ROOT_DIRECTORY_AT == LAST_LSN_AT + 8);
    assert!(CREATED_AT == ROOT_DIRECTORY_AT + 8);
    assert!(VOLUME_AT == CREATED_AT + 8);
    assert!(PAGE_COUNT_AT == VOLUME_AT + 2);
    assert!(CHECKPOINT_LSN_AT == PAGE_COUNT_AT + 4);
    assert!(LOG_SEGMENT_BYTES_AT == CHECKPOINT_LSN_AT + 8);
    assert!(RECOVERY_METHOD_AT == LOG_SEGMENT_BYTES_AT + 8);
    assert!(MULTI_LEVEL_STRATEGY_AT == RECOVERY_METHOD_AT + 1);
    assert!(UNUSED_AT == MULTI_LEVEL_STRATEGY_AT + 1);
    assert!(UNUSED_AT <= lodestore_core::limits::PAGE_SIZE_MIN);
};

pub const SUPERBLOCK_PAGES: [PageId; 2] = [PageId(0), PageId(1)];

/// The decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub page_size: usize,
    pub generation: u64,
    pub last_lsn: Lsn,
    pub root_directory: Oid,
    pub created_unix_seconds: u64,
    pub volume_id: VolumeId,
    pub page_count: u32,
    /// The log anchor: LSN of the last complete checkpoint's begin record.
    pub checkpoint_lsn: Lsn,
    pub log_segment_bytes: u64,
    /// The recovery method that wrote the log (`RECOVERY_METHOD_*`).
    pub recovery_method: u8,
    /// The store's multi-level strategy (0: none chosen; see `MULTI_LEVEL_STRATEGY_CODE_MAX`).
    pub multi_level_strategy: u8,
}

impl Superblock {
    /// Encodes this superblock into `page` as copy `copy` (0 or 1), sealed.
    pub fn encode(&self, page: &mut [u8], copy: usize) {
        assert!(copy < 2, "superblock copy {copy} does not exist");
        assert_eq!(page.len(), self.page_size);
        page::format(
            page,
            PageKind::Superblock,
            SUPERBLOCK_PAGES[copy],
            self.volume_id,
        );
        page[MAGIC_AT..MAGIC_AT + 8].copy_from_slice(&MAGIC);
        put_u32(page, FORMAT_VERSION_AT, STORE_FORMAT_VERSION);
        put_u32(page, PAGE_SIZE_AT, self.page_size as u32);
        put_u64(page, GENERATION_AT, self.generation);
        put_u64(page, LAST_LSN_AT, self.last_lsn.0);
        put_u64(page, ROOT_DIRECTORY_AT, self.root_directory.0);
        put_u64(page, CREATED_AT, self.created_unix_seconds);
        put_u16(page, VOLUME_AT, self.volume_id);
        put_u32(page, PAGE_COUNT_AT, self.page_count);
        put_u64(page, CHECKPOINT_LSN_AT, self.checkpoint_lsn.0);
        put_u64(page, LOG_SEGMENT_BYTES_AT, self.log_segment_bytes);
        page[RECOVERY_METHOD_AT] = self.recovery_method;
        page[MULTI_LEVEL_STRATEGY_AT] = self.multi_level_strategy;
        page::set_lsn(page, self.last_lsn);
        page::seal(page);
    }
}

/// Why one candidate copy was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyProblem {
    /// The bytes do not start like a superblock at all.
    NoMagic,
    /// A superblock of a format this build does not read.
    NewerFormat(u32),
    /// Looks like a superblock but fails a check.
    Invalid(String),
}

/// Does `prefix` (at least 48 bytes of a page) carry the magic number?
pub fn has_magic(prefix: &[u8]) -> bool {
    prefix.len() >= MAGIC_AT + 8 && prefix[MAGIC_AT..MAGIC_AT + 8] == MAGIC
}

/// The format version field of a page with the magic number.
pub fn format_version(prefix: &[u8]) -> u32 {
    get_u32(prefix, FORMAT_VERSION_AT)
}

/// Decodes copy `copy` from a full page of `page_size` bytes.
pub fn decode(page: &[u8], copy: usize) -> Result<Superblock, CopyProblem> {
    if !has_magic(page) {
        return Err(CopyProblem::NoMagic);
    }
    let version = format_version(page);
    if version > STORE_FORMAT_VERSION {
        return Err(CopyProblem::NewerFormat(version));
    }
    let volume_id = get_u16(page, VOLUME_AT);
    match page::verify(page, SUPERBLOCK_PAGES[copy], volume_id) {
        Ok(PageKind::Superblock) => {}
        Ok(other) => {
            return Err(CopyProblem::Invalid(format!(
                "page kind is {}, not superblock",
                other.name()
            )))
        }
        Err(reason) => return Err(CopyProblem::Invalid(reason)),
    }
    if version != STORE_FORMAT_VERSION {
        return Err(CopyProblem::Invalid(format!(
            "store format version {version} is not one this build reads"
        )));
    }
    let page_size = get_u32(page, PAGE_SIZE_AT) as usize;
    if page_size != page.len() {
        return Err(CopyProblem::Invalid(format!(
            "records page size {page_size} but was read as {} bytes",
            page.len()
        )));
    }
    let recovery_method = page[RECOVERY_METHOD_AT];
    if recovery_method > RECOVERY_METHOD_CODE_MAX {
        return Err(CopyProblem::Invalid(format!(
            "recovery method code {recovery_method} is not one this build knows"
        )));
    }
    let multi_level_strategy = page[MULTI_LEVEL_STRATEGY_AT];
    if multi_level_strategy > MULTI_LEVEL_STRATEGY_CODE_MAX {
        return Err(CopyProblem::Invalid(format!(
            "multi-level strategy code {multi_level_strategy} is not one this build knows"
        )));
    }
    if !crate::bytes::is_all_zero(&page[UNUSED_AT..]) {
        return Err(CopyProblem::Invalid("unused bytes are not zero".into()));
    }
    Ok(Superblock {
        page_size,
        generation: get_u64(page, GENERATION_AT),
        last_lsn: Lsn(get_u64(page, LAST_LSN_AT)),
        root_directory: Oid(get_u64(page, ROOT_DIRECTORY_AT)),
        created_unix_seconds: get_u64(page, CREATED_AT),
        volume_id,
        page_count: get_u32(page, PAGE_COUNT_AT),
        checkpoint_lsn: Lsn(get_u64(page, CHECKPOINT_LSN_AT)),
        log_segment_bytes: get_u64(page, LOG_SEGMENT_BYTES_AT),
        recovery_method,
        multi_level_strategy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(page_size: usize) -> Superblock {
        Superblock {
            page_size,
            generation: 5,
            last_lsn: Lsn(77),
            root_directory: Oid::new(0, PageId(3), 0),
            created_unix_seconds: 1_700_000_000,
            volume_id: 0,
            page_count: 4,
            recovery_method: 1,
            multi_level_strategy: 3,
            checkpoint_lsn: Lsn(1 << 20),
            log_segment_bytes: 1 << 20,
        }
    }

    #[test]
    fn round_trip_both_copies() {
        for copy in 0..2 {
            let sb = sample(8192);
            let mut page = vec![0u8; 8192];
            sb.encode(&mut page, copy);
            assert_eq!(decode(&page, copy), Ok(sb.clone()));
            // Copy 0 read where copy 1 belongs is a misdirected page.
            assert!(matches!(
                decode(&page, 1 - copy),
                Err(CopyProblem::Invalid(_))
            ));
        }
    }

    #[test]
    fn newer_format_is_named() {
        let mut page = vec![0u8; 4096];
        sample(4096).encode(&mut page, 0);
        put_u32(&mut page, FORMAT_VERSION_AT, STORE_FORMAT_VERSION + 1);
        assert_eq!(
            decode(&page, 0),
            Err(CopyProblem::NewerFormat(STORE_FORMAT_VERSION + 1))
        );
    }

    #[test]
    fn unknown_strategy_code_is_refused_with_its_value() {
        let mut sb = sample(4096);
        sb.multi_level_strategy = MULTI_LEVEL_STRATEGY_CODE_MAX + 1;
        let mut page = vec![0u8; 4096];
        sb.encode(&mut page, 0);
        match decode(&page, 0) {
            Err(CopyProblem::Invalid(reason)) => {
                assert!(reason.contains("multi-level strategy code 4"), "{reason}")
            }
            other => panic!("decoded {other:?}"),
        }
        sb.multi_level_strategy = MULTI_LEVEL_STRATEGY_CODE_MAX;
        sb.encode(&mut page, 0);
        assert_eq!(decode(&page, 0), Ok(sb));
    }

    #[test]
    fn not_a_superblock() {
        assert_eq!(decode(&vec![7u8; 4096], 0), Err(CopyProblem::NoMagic));
    }
}
