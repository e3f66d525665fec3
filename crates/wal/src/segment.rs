//! Segment files. The log's LSN space is cut into segments of `segment_bytes`; segment `k`
//! holds LSNs `k * segment_bytes ..(k + 1) * segment_bytes` after a 4 KiB header, in the file
//! `log/segment-{k}.log`. LSNs start at segment 1, so LSN 0 can mean "none".
//!
//! ```text
//! segment header (4096 bytes)
//!  0  4 crc32c of bytes 4..4096
//!  4  4 segment format version: 1, records aligned; 2, compact records (the log's
//!       RecordFormat: a build that knows only 1 refuses a segment of compact records)
//!  8  8 magic "LODELOG\0"
//! 16  8 segment index k
//! 24  8 segment bytes (the LSN span of every segment)
//! 32    zeros
//! ```
//!
//! A new segment file is created at its full length but sparse, with only its header written
//! and synced before use: the log writer fills zeros a little ahead of its records
//! ([`ZEROS_AHEAD_BYTES`]), so most commits overwrite allocated blocks, which syncs faster than
//! writing into a hole, and a segment takes disk space only as far as the log has come. Old
//! segments are recycled (renamed and given a new header): they are allocated throughout.

use crate::record::RecordFormat;
use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Result};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const SEGMENT_HEADER_BYTES: u64 = 4096;
/// The newest segment format version (see the header's layout).
pub const SEGMENT_FORMAT_VERSION: u32 = 2;
pub const SEGMENT_MAGIC: [u8; 8] = *b"LODELOG\0";
/// Smallest segment: must hold the largest record (a 64 KiB page image or update) with room.
pub const SEGMENT_BYTES_MIN: u64 = 256 << 10;
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;
/// How far ahead of its records the log writer fills a new segment with zeros. At most the
/// smallest segment.
pub const ZEROS_AHEAD_BYTES: u64 = 256 << 10;
// Segment sizes are whole multiples of the header's 4 KiB, and the header fits the smallest.
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(SEGMENT_HEADER_BYTES));
const _: () = assert!(SEGMENT_BYTES_MAX.is_multiple_of(SEGMENT_BYTES_MIN));
const _: () = assert!(SEGMENT_HEADER_BYTES < SEGMENT_BYTES_MIN);
const _: () = assert!(ZEROS_AHEAD_BYTES <= SEGMENT_BYTES_MIN);

pub fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("segment-{index:010}.log"))
}

pub fn spare_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("spare-{index:010}.log"))
}

fn parse(path: &Path, prefix: &str) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix(prefix)?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

pub fn segment_index(path: &Path) -> Option<u64> {
    parse(path, "segment-")
}

pub fn spare_index(path: &Path) -> Option<u64> {
    parse(path, "spare-")
}

fn format_version(format: RecordFormat) -> u32 {
    match format {
        RecordFormat::Aligned => 1,
        RecordFormat::Compact => 2,
    }
}

pub fn encode_header(index: u64, segment_bytes: u64, format: RecordFormat) -> Vec<u8> {
    let mut header = vec![0u8; SEGMENT_HEADER_BYTES as usize];
    header[4..8].copy_from_slice(&format_version(format).to_le_bytes());
    header[8..16].copy_from_slice(&SEGMENT_MAGIC);
    header[16..24].copy_from_slice(&index.to_le_bytes());
    header[24..32].copy_from_slice(&segment_bytes.to_le_bytes());
    let crc = crc32c(&header[4..]);
    header[0..4].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Checks the header of the segment file at `path`, expected to be segment `index`, and
/// returns the format of its records.
pub fn check_header(file: &dyn Storage, index: u64, segment_bytes: u64) -> Result<RecordFormat> {
    let path = file.path().to_path_buf();
    let corrupt = |reason: String| Error::CorruptLog {
        path: path.clone(),
        offset: 0,
        reason,
    };
    let length = file.len()?;
    if length < SEGMENT_HEADER_BYTES {
        return Err(corrupt(format!(
            "segment file of {length} bytes has no header"
        )));
    }
    let mut header = vec![0u8; SEGMENT_HEADER_BYTES as usize];
    file.read_at(0, &mut header)?;
    if header[8..16] != SEGMENT_MAGIC {
        return Err(corrupt("not a Lodestore log segment (bad magic)".into()));
    }
    let version = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if version > SEGMENT_FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            path,
            structure: "log segment",
            found: version,
            supported: SEGMENT_FORMAT_VERSION,
        });
    }
    let stored = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    if stored != crc32c(&header[4..]) {
        return Err(corrupt("segment header checksum mismatch".into()));
    }
    let format = match version {
        1 => RecordFormat::Aligned,
        2 => RecordFormat::Compact,
        _ => {
            return Err(corrupt(format!(
                "segment format version {version} was never written by any build"
            )))
        }
    };
    let found_index = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
    let found_bytes = u64::from_le_bytes(header[24..32].try_into().expect("8 bytes"));
    if found_index != index || found_bytes != segment_bytes {
        return Err(corrupt(format!(
            "header says segment {found_index} of {found_bytes} bytes, expected segment {index} of {segment_bytes}"
        )));
    }
    // Segments are created and recycled at full length and never shortened, so a short file
    // lost its end to something outside Lodestore: its records there are gone, not torn.
    let expected = SEGMENT_HEADER_BYTES + segment_bytes;
    if length != expected {
        return Err(corrupt(format!(
            "segment file is {length} bytes, but every segment is created at {expected}: it was \
             {} outside Lodestore and records in it may be lost",
            if length < expected {
                "shortened"
            } else {
                "extended"
            }
        )));
    }
    Ok(format)
}

/// Name a segment file has while it is being created; renamed when complete, so a crash during
/// creation leaves no half-made segment under a segment name.
pub fn creating_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("creating-{index:010}.log"))
}

/// Creates segment `index`: full length, sparse but for its header, synced, then renamed into
/// place.
pub fn create(
    fs: &dyn FileSystem,
    dir: &Path,
    index: u64,
    segment_bytes: u64,
    format: RecordFormat,
) -> Result<Arc<dyn Storage>> {
    let temporary = creating_path(dir, index);
    if fs.exists(&temporary) {
        fs.remove(&temporary)?;
    }
    let file = fs.open(&temporary, OpenMode::CreateNew)?;
    file.set_len(SEGMENT_HEADER_BYTES + segment_bytes)?;
    file.write_at(0, &encode_header(index, segment_bytes, format))?;
    file.sync()?;
    drop(file);
    let path = segment_path(dir, index);
    fs.rename(&temporary, &path)?;
    fs.open(&path, OpenMode::Existing)
}

/// Turns the spare file at `spare` into segment `index`: the new header is written and synced
/// while the file still has its spare name, then it is renamed. Its old records stay but carry
/// old LSNs, so they are never valid at their new positions.
pub fn reuse(
    fs: &dyn FileSystem,
    spare: &Path,
    dir: &Path,
    index: u64,
    segment_bytes: u64,
    format: RecordFormat,
) -> Result<Arc<dyn Storage>> {
    {
        let file = fs.open(spare, OpenMode::Existing)?;
        if file.len()? != SEGMENT_HEADER_BYTES + segment_bytes {
            // Not a whole segment any more: make a new one instead.
            drop(file);
            fs.remove(spare)?;
            return create(fs, dir, index, segment_bytes, format);
        }
        file.write_at(0, &encode_header(index, segment_bytes, format))?;
        file.sync()?;
    }
    let path = segment_path(dir, index);
    fs.rename(spare, &path)?;
    fs.open(&path, OpenMode::Existing)
}
