//! A file of page copies: a header, then records, each a page image labelled with the page and
//! a snapshot time, checksummed. Appended only, in batches, each made durable at once and
//! closed by a mark (a record without an image); a scan rebuilds the index. Both the snapshot
//! log (copies waiting for the archive) and the local archive are such files.
//!
//! ```text
//! file header (32 bytes)           record (RECORD_HEADER_BYTES + page size bytes)
//!  0  8 magic "LSCOPIES"            0  4 magic 0x4c53_4350
//!  8  4 format version              4  2 format version
//! 12  4 page size                   6  2 flags (1: a mark, no image)
//! 16  4 kind (1 log, 2 archive)     8  4 page number
//! 20  8 reserved (0)               12  4 image length (the page size; 0 in a mark)
//! 28  4 crc32c of bytes 0..28      16  8 snapshot time (µs since the Unix epoch)
//!                                  24  8 reserved (0)
//!                                  32  4 crc32c of bytes 0..32 and the image
//!                                  36  4 reserved (0)
//!                                  40    the image
//! ```
//!
//! A record that fails its checks with no valid record right after it is a torn last write: a
//! writer drops it. One followed by a valid record is damage, reported with the file and
//! offset. The mark closing each batch is what makes damage to a batch's last copy tell
//! itself apart from a torn write (the transaction log's flush mark does the same); losing a
//! damaged last mark loses no copy.

use lodestore_core::checksum::{crc32c, crc32c_two};
use lodestore_core::{Error, PageId, Result};
use lodestore_storage::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FILE_MAGIC: &[u8; 8] = b"LSCOPIES";
const FILE_VERSION: u32 = 1;
const FILE_HEADER_BYTES: u64 = 32;
const RECORD_MAGIC: u32 = 0x4c53_4350;
const RECORD_VERSION: u16 = 1;
pub const RECORD_HEADER_BYTES: usize = 40;
const FLAG_MARK: u16 = 1;

/// What a copy file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFileKind {
    /// Copies waiting to be archived.
    SnapshotLog = 1,
    /// Archived copies.
    Archive = 2,
}

/// A copy found by a scan: which page, which snapshot time, where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyEntry {
    pub page: PageId,
    pub time_us: u64,
    pub offset: u64,
}

/// An open copy file.
pub struct CopyFile {
    file: Arc<dyn Storage>,
    path: PathBuf,
    page_size: usize,
    /// Where the next record goes.
    end: u64,
}

impl CopyFile {
    /// Opens the file at `path`, creating it if missing, and scans it. A torn last record is
    /// cut off; damage before the end is an error naming the file and offset.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        page_size: usize,
        kind: CopyFileKind,
    ) -> Result<(CopyFile, Vec<CopyEntry>)> {
        let file = if fs.exists(path) {
            fs.open(path, OpenMode::Existing)?
        } else {
            let file = fs.open(path, OpenMode::CreateNew)?;
            file.write_at(0, &file_header(page_size, kind))?;
            file.sync()?;
            file
        };
        let mut copies = CopyFile {
            file,
            path: path.to_path_buf(),
            page_size,
            end: FILE_HEADER_BYTES,
        };
        copies.check_header(kind)?;
        let (entries, valid_end) = copies.scan()?;
        if valid_end < copies.file.len()? {
            tracing::info!(
                path = %copies.path.display(),
                dropped = copies.file.len()? - valid_end,
                "dropped a torn last page copy"
            );
            copies.file.set_len(valid_end)?;
            copies.file.sync()?;
        }
        copies.end = valid_end;
        Ok((copies, entries))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The page size the file at `path` holds copies of, from its header; `None` when there
    /// is no file.
    pub fn page_size_of(fs: &dyn FileSystem, path: &Path) -> Result<Option<usize>> {
        if !fs.exists(path) {
            return Ok(None);
        }
        let file = fs.open(path, OpenMode::Existing)?;
        let corrupt = |reason: String| Error::CorruptFile {
            path: path.to_path_buf(),
            reason,
        };
        if file.len()? < FILE_HEADER_BYTES {
            return Err(corrupt("shorter than its header".into()));
        }
        let mut header = [0u8; FILE_HEADER_BYTES as usize];
        file.read_at(0, &mut header)?;
        if &header[0..8] != FILE_MAGIC || get_u32(&header, 28) != crc32c(&header[..28]) {
            return Err(corrupt(
                "not a file of page copies (wrong magic or header checksum)".into(),
            ));
        }
        Ok(Some(get_u32(&header, 12) as usize))
    }

    /// Bytes of the file.
    pub fn len(&self) -> u64 {
        self.end
    }

    /// Does the file hold no copies?
    pub fn is_empty(&self) -> bool {
        self.end == FILE_HEADER_BYTES
    }

    fn record_bytes(&self) -> u64 {
        (RECORD_HEADER_BYTES + self.page_size) as u64
    }

    fn check_header(&self, kind: CopyFileKind) -> Result<()> {
        let corrupt = |reason: String| Error::CorruptFile {
            path: self.path.clone(),
            reason,
        };
        let len = self.file.len()?;
        if len < FILE_HEADER_BYTES {
            return Err(corrupt(format!(
                "{len} bytes: shorter than the {FILE_HEADER_BYTES}-byte header"
            )));
        }
        let mut header = [0u8; FILE_HEADER_BYTES as usize];
        self.file.read_at(0, &mut header)?;
        if &header[0..8] != FILE_MAGIC {
            return Err(corrupt("not a file of page copies (wrong magic)".into()));
        }
        if get_u32(&header, 28) != crc32c(&header[..28]) {
            return Err(corrupt("the header fails its checksum".into()));
        }
        let version = get_u32(&header, 8);
        if version != FILE_VERSION {
            return Err(Error::UnsupportedFormat {
                path: self.path.clone(),
                structure: "file of page copies",
                found: version,
                supported: FILE_VERSION,
            });
        }
        let page_size = get_u32(&header, 12) as usize;
        if page_size != self.page_size {
            return Err(corrupt(format!(
                "holds pages of {page_size} bytes; the store's are {} bytes",
                self.page_size
            )));
        }
        let found = get_u32(&header, 16);
        if found != kind as u32 {
            return Err(corrupt(format!(
                "is a file of kind {found}, expected {}",
                kind as u32
            )));
        }
        Ok(())
    }

    /// Every valid copy, and where the valid part ends.
    fn scan(&self) -> Result<(Vec<CopyEntry>, u64)> {
        let len = self.file.len()?;
        let mut entries = Vec::new();
        let mut offset = FILE_HEADER_BYTES;
        while offset < len {
            match self.record_at(offset, len)? {
                Ok(Found::Copy(page, time_us)) => {
                    entries.push(CopyEntry {
                        page,
                        time_us,
                        offset,
                    });
                    offset += self.record_bytes();
                }
                Ok(Found::Mark) => offset += RECORD_HEADER_BYTES as u64,
                Err(reason) => {
                    // Torn only if no valid record starts right after it, whether it was a mark
                    // or a copy.
                    for next in [
                        offset + RECORD_HEADER_BYTES as u64,
                        offset + self.record_bytes(),
                    ] {
                        if self.record_at(next, len)?.is_ok() {
                            return Err(Error::CorruptFile {
                                path: self.path.clone(),
                                reason: format!(
                                    "the record at byte {offset} is damaged ({reason}) and a \
                                     valid one follows it"
                                ),
                            });
                        }
                    }
                    return Ok((entries, offset));
                }
            }
        }
        Ok((entries, offset))
    }

    /// The record at `offset` of a file of `len` bytes, or why there is none.
    fn record_at(&self, offset: u64, len: u64) -> Result<std::result::Result<Found, String>> {
        if offset + RECORD_HEADER_BYTES as u64 > len {
            return Ok(Err("the file ends inside a record".into()));
        }
        let mut header = [0u8; RECORD_HEADER_BYTES];
        self.file.read_at(offset, &mut header)?;
        if get_u32(&header, 0) != RECORD_MAGIC {
            return Ok(Err("no record starts here (wrong magic)".into()));
        }
        if get_u16(&header, 6) == FLAG_MARK {
            return Ok(check_record(&header, 0).map(|_| Found::Mark));
        }
        if offset + self.record_bytes() > len {
            return Ok(Err("the file ends inside a record".into()));
        }
        let mut record = vec![0u8; self.record_bytes() as usize];
        self.file.read_at(offset, &mut record)?;
        Ok(check_record(&record, self.page_size).map(|(page, time)| Found::Copy(page, time)))
    }

    /// Appends copies (not yet durable: see [`Self::sync`]); returns their offsets.
    pub fn append(&mut self, copies: &[(PageId, u64, &[u8])]) -> Result<Vec<u64>> {
        let record_bytes = self.record_bytes() as usize;
        let mut bytes = vec![0u8; record_bytes * copies.len() + RECORD_HEADER_BYTES];
        let mut offsets = Vec::with_capacity(copies.len());
        for (i, (page, time_us, image)) in copies.iter().enumerate() {
            assert_eq!(image.len(), self.page_size, "a copy is one whole page");
            encode_record(
                &mut bytes[i * record_bytes..(i + 1) * record_bytes],
                *page,
                *time_us,
                image,
            );
            offsets.push(self.end + (i * record_bytes) as u64);
        }
        if copies.is_empty() {
            return Ok(offsets);
        }
        encode_mark(&mut bytes[record_bytes * copies.len()..]);
        self.file.write_at(self.end, &bytes)?;
        self.end += bytes.len() as u64;
        Ok(offsets)
    }

    /// Makes every appended copy durable.
    pub fn sync(&self) -> Result<()> {
        self.file.sync()
    }

    /// Reads the copy at `offset`, which must be of `page` at `time_us`, into `buf` (straight
    /// into it: the header apart, no buffer of the record's size).
    pub fn read(&self, offset: u64, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(buf.len(), self.page_size);
        let mut header = [0u8; RECORD_HEADER_BYTES];
        self.file.read_at(offset, &mut header)?;
        self.file
            .read_at(offset + RECORD_HEADER_BYTES as u64, buf)?;
        let corrupt = |reason: String| Error::CorruptArchive {
            path: self.path.clone(),
            page,
            time_us,
            reason,
        };
        let (found_page, found_time) = check_parts(&header, buf, self.page_size)
            .map_err(|reason| corrupt(format!("at byte {offset}: {reason}")))?;
        if found_page != page || found_time != time_us {
            return Err(corrupt(format!(
                "byte {offset} holds the copy of page {found_page} at time {found_time} instead"
            )));
        }
        Ok(())
    }

    /// Empties the file (every copy is elsewhere now), durably.
    pub fn clear(&mut self) -> Result<()> {
        self.file.set_len(FILE_HEADER_BYTES)?;
        self.file.sync()?;
        self.end = FILE_HEADER_BYTES;
        Ok(())
    }
}

fn file_header(page_size: usize, kind: CopyFileKind) -> [u8; FILE_HEADER_BYTES as usize] {
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    header[0..8].copy_from_slice(FILE_MAGIC);
    put_u32(&mut header, 8, FILE_VERSION);
    put_u32(&mut header, 12, page_size as u32);
    put_u32(&mut header, 16, kind as u32);
    let crc = crc32c(&header[..28]);
    put_u32(&mut header, 28, crc);
    header
}

/// What a valid record is.
enum Found {
    Copy(PageId, u64),
    Mark,
}

/// The record closing a batch.
fn encode_mark(out: &mut [u8]) {
    debug_assert_eq!(out.len(), RECORD_HEADER_BYTES);
    put_u32(out, 0, RECORD_MAGIC);
    put_u16(out, 4, RECORD_VERSION);
    put_u16(out, 6, FLAG_MARK);
    let crc = crc32c(&out[..32]);
    put_u32(out, 32, crc);
}

fn encode_record(out: &mut [u8], page: PageId, time_us: u64, image: &[u8]) {
    put_u32(out, 0, RECORD_MAGIC);
    put_u16(out, 4, RECORD_VERSION);
    put_u16(out, 6, 0);
    put_u32(out, 8, page.0);
    put_u32(out, 12, image.len() as u32);
    put_u64(out, 16, time_us);
    put_u64(out, 24, 0);
    out[RECORD_HEADER_BYTES..].copy_from_slice(image);
    let crc = crc32c_two(&out[..32], image);
    put_u32(out, 32, crc);
    put_u32(out, 36, 0);
}

/// The page and time of a valid record (of a copy, with `page_size` bytes of image; of a mark,
/// with none), or why it is not one.
fn check_record(record: &[u8], page_size: usize) -> std::result::Result<(PageId, u64), String> {
    let (header, rest) = record.split_at(RECORD_HEADER_BYTES);
    check_parts(header, &rest[..page_size], page_size)
}

/// [`check_record`] of a record read in two parts.
fn check_parts(
    record: &[u8],
    image: &[u8],
    page_size: usize,
) -> std::result::Result<(PageId, u64), String> {
    if get_u32(record, 0) != RECORD_MAGIC {
        return Err("no page copy starts here (wrong magic)".into());
    }
    if get_u32(record, 32) != crc32c_two(&record[..32], image) {
        return Err("checksum mismatch".into());
    }
    let version = get_u16(record, 4);
    if version != RECORD_VERSION {
        return Err(format!(
            "format version {version}; this build reads {RECORD_VERSION}"
        ));
    }
    let len = get_u32(record, 12) as usize;
    if len != page_size {
        return Err(format!(
            "an image of {len} bytes in a file of {page_size}-byte pages"
        ));
    }
    Ok((PageId(get_u32(record, 8)), get_u64(record, 16)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    const PAGE: usize = 512;

    fn image(fill: u8) -> Vec<u8> {
        vec![fill; PAGE]
    }

    #[test]
    fn copies_survive_reopening_and_read_back() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/copies");
        let (mut file, entries) = CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive).unwrap();
        assert!(entries.is_empty());
        let a = image(1);
        let b = image(2);
        let offsets = file
            .append(&[(PageId(3), 10, &a[..]), (PageId(4), 11, &b[..])])
            .unwrap();
        file.sync().unwrap();
        drop(file);
        let (file, entries) = CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].offset, offsets[1]);
        let mut buf = vec![0u8; PAGE];
        file.read(offsets[1], PageId(4), 11, &mut buf).unwrap();
        assert_eq!(buf, b);
        // Asking for another page at that place is an error, not a wrong page.
        let wrong = file.read(offsets[1], PageId(3), 11, &mut buf).unwrap_err();
        assert!(matches!(wrong, Error::CorruptArchive { .. }), "{wrong}");
    }

    #[test]
    fn a_torn_last_copy_is_dropped_and_damage_before_the_end_is_reported() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/copies");
        let (mut file, _) = CopyFile::open(&fs, path, PAGE, CopyFileKind::SnapshotLog).unwrap();
        let a = image(7);
        let offsets = file
            .append(&[(PageId(1), 1, &a[..]), (PageId(2), 2, &a[..])])
            .unwrap();
        file.sync().unwrap();
        drop(file);
        let raw = fs.open(path, OpenMode::Existing).unwrap();
        // Tear the last batch inside its second copy: that copy and the mark go, the first
        // copy stays.
        let torn_len = offsets[1] + 100;
        raw.set_len(torn_len).unwrap();
        let (file, entries) = CopyFile::open(&fs, path, PAGE, CopyFileKind::SnapshotLog).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(file.len(), offsets[1]);
        drop(file);
        // Damage the first with a valid one after it: an error naming the offset.
        let (mut file, _) = CopyFile::open(&fs, path, PAGE, CopyFileKind::SnapshotLog).unwrap();
        file.append(&[(PageId(2), 2, &a[..])]).unwrap();
        file.sync().unwrap();
        drop(file);
        raw.write_at(offsets[0] + 60, &[0xff; 4]).unwrap();
        let err = CopyFile::open(&fs, path, PAGE, CopyFileKind::SnapshotLog)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains(&format!("byte {}", offsets[0])),
            "{err}"
        );
    }

    #[test]
    fn damage_to_the_last_copy_of_a_durable_batch_is_reported_not_dropped() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/copies");
        let (mut file, _) = CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive).unwrap();
        let a = image(3);
        let offsets = file.append(&[(PageId(5), 50, &a[..])]).unwrap();
        file.sync().unwrap();
        drop(file);
        let raw = fs.open(path, OpenMode::Existing).unwrap();
        raw.write_at(offsets[0] + 200, &[0x55]).unwrap();
        let err = CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive)
            .err()
            .unwrap();
        assert!(
            err.to_string().contains(&format!("byte {}", offsets[0])),
            "{err}"
        );
    }

    #[test]
    fn a_file_of_another_kind_or_page_size_is_refused() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/copies");
        drop(CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive).unwrap());
        assert!(CopyFile::open(&fs, path, PAGE, CopyFileKind::SnapshotLog).is_err());
        assert!(CopyFile::open(&fs, path, PAGE * 2, CopyFileKind::Archive).is_err());
    }
}
