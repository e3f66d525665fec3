//! Scanning the log from an LSN to its end.
//!
//! The end of the log is the first position that does not hold a valid record. Because the log
//! writer never has more than one unsynced write outstanding, a crash can only damage the last
//! write: everything after the first invalid record is then garbage of that write, never a
//! valid record. So a valid record found after an invalid one means the log was damaged before
//! its end (a flipped bit, a lost block): that is reported as an error naming the segment and
//! offset, never silently cut off.

use crate::record::{self, Invalid, Record, RecordBody, RecordFormat};
use crate::segment::SEGMENT_HEADER_BYTES;
use lodestore_core::{Error, Lsn, Result};
use lodestore_storage::bytes::first_nonzero;
use lodestore_storage::Storage;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where the log ends, and how much of a torn tail was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEnd {
    /// The LSN the next record gets.
    pub end: Lsn,
    /// Bytes after the end that were written but do not form valid records.
    pub discarded_bytes: u64,
}

/// Where a compact record keeps its format version.
const VERSION_AT: usize = 4;

/// Segments past the one being scanned that the scan asks the operating system to read ahead.
pub(crate) const PREFETCH_SEGMENTS: u64 = 4;

/// A segment's bytes as a scan read them, kept for the next scan: a buffer of a segment's size
/// costs a page fault per 4 KiB the first time it is filled (1 ms for 1 MiB), and a scan that
/// follows another over an unchanged log (a restart's, after the opening scan) need not read
/// the last segment again.
#[derive(Default)]
pub(crate) struct ScanBuffer {
    bytes: Vec<u8>,
    /// The segment `bytes` holds, if any.
    loaded: Option<u64>,
}

impl ScanBuffer {
    /// The log may have changed since the segment was read: keep only the memory.
    pub fn forget_contents(&mut self) {
        self.loaded = None;
    }
}

pub(crate) struct Segments<'a> {
    pub files: &'a BTreeMap<u64, Arc<dyn Storage>>,
    pub segment_bytes: u64,
    pub page_size_max: usize,
    pub format: RecordFormat,
}

impl Segments<'_> {
    fn load(&self, index: u64) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.load_into(index, &mut bytes)?;
        Ok(bytes)
    }

    /// Reads segment `index` into `bytes`, reusing its allocation: a scan reads segment after
    /// segment into one buffer (a fresh one each time cost a page fault per 4 KiB).
    fn load_into(&self, index: u64, bytes: &mut Vec<u8>) -> Result<()> {
        let file = &self.files[&index];
        bytes.resize(self.segment_bytes as usize, 0);
        let available = file.len()?.saturating_sub(SEGMENT_HEADER_BYTES);
        let n = available.min(self.segment_bytes) as usize;
        file.read_at(SEGMENT_HEADER_BYTES, &mut bytes[..n])?;
        bytes[n..].fill(0);
        // The next segments are read while this one's records are decoded and visited.
        for ahead in 1..=PREFETCH_SEGMENTS {
            if let Some(next) = self.files.get(&(index + ahead)) {
                next.prefetch(0, SEGMENT_HEADER_BYTES + self.segment_bytes);
            }
        }
        Ok(())
    }

    /// Visits every valid record from `from` to the end of the log.
    pub fn scan(&self, from: Lsn, visit: impl FnMut(Record) -> Result<()>) -> Result<LogEnd> {
        self.scan_into(from, &mut ScanBuffer::default(), visit)
    }

    /// [`Self::scan`], reading segments into `buffer`, and using the segment it holds as it
    /// is (the caller makes sure the log has not changed since, or forgets it).
    pub fn scan_into(
        &self,
        from: Lsn,
        buffer: &mut ScanBuffer,
        mut visit: impl FnMut(Record) -> Result<()>,
    ) -> Result<LogEnd> {
        let size = self.segment_bytes;
        let mut position = from.0;
        loop {
            let index = position / size;
            if !self.files.contains_key(&index) {
                if position == from.0 {
                    return Err(Error::CorruptLog {
                        path: format!("log segment {index}").into(),
                        offset: 0,
                        reason: format!("segment holding LSN {position} is missing"),
                    });
                }
                return Ok(LogEnd {
                    end: Lsn(position),
                    discarded_bytes: 0,
                });
            }
            if buffer.loaded != Some(index) {
                buffer.loaded = None;
                self.load_into(index, &mut buffer.bytes)?;
                buffer.loaded = Some(index);
            }
            let bytes = &buffer.bytes;
            let offset = (position % size) as usize;
            let room = size as usize - offset;
            if room < self.format.smallest_record() {
                position = (index + 1) * size;
                continue;
            }
            let parsed = record::header(&bytes[offset..], Lsn(position), room).and_then(|h| {
                let record = record::decode(
                    &bytes[offset..offset + h.len],
                    Lsn(position),
                    self.page_size_max,
                )?;
                Ok((h.len as u64, record))
            });
            match parsed {
                Ok((len, record)) => {
                    if record.body == RecordBody::Skip {
                        position = (index + 1) * size;
                    } else {
                        position += len;
                        visit(record)?;
                    }
                }
                Err(Invalid::NewerVersion(found)) => {
                    return Err(Error::UnsupportedFormat {
                        path: self.files[&index].path().to_path_buf(),
                        structure: "log record",
                        found: u32::from(found),
                        supported: u32::from(self.format.version()),
                    })
                }
                Err(Invalid::Damaged(reason)) if position == from.0 => {
                    // A scan starts where a record is known to be (the last checkpoint).
                    return Err(Error::CorruptLog {
                        path: self.files[&index].path().to_path_buf(),
                        offset: SEGMENT_HEADER_BYTES + offset as u64,
                        reason: format!(
                            "no valid record at LSN {position}, where the scan must start (the last checkpoint): {reason}"
                        ),
                    });
                }
                Err(Invalid::Damaged(reason)) => {
                    return self.end_at(index, offset, bytes, reason);
                }
            }
        }
    }

    /// The end of the log from `from` on, found from the start of the newest segment past the
    /// one holding `from` that begins with a valid record (records never span segments, so
    /// each begins with one), or from `from` if none does: a crash damages only the last
    /// write, so the end lies there. Damage before that segment is left to a full scan.
    pub fn find_end(&self, from: Lsn, buffer: &mut ScanBuffer) -> Result<LogEnd> {
        let size = self.segment_bytes;
        let first = from.0 / size;
        for &index in self.files.keys().rev().take_while(|&&index| index > first) {
            if self.begins_with_record(index)? {
                return self.scan_into(Lsn(index * size), buffer, |_| Ok(()));
            }
        }
        self.scan_into(from, buffer, |_| Ok(()))
    }

    /// Does segment `index` begin with a valid record of its own (not one a recycled segment
    /// held before, which names another LSN)?
    fn begins_with_record(&self, index: u64) -> Result<bool> {
        let file = &self.files[&index];
        let room = file
            .len()?
            .saturating_sub(SEGMENT_HEADER_BYTES)
            .min(self.segment_bytes) as usize;
        if room < self.format.smallest_record() {
            return Ok(false);
        }
        let lsn = Lsn(index * self.segment_bytes);
        // The header first: it tells how much more to read.
        let mut bytes = vec![0u8; room.min(record::RECORD_HEADER_BYTES)];
        file.read_at(SEGMENT_HEADER_BYTES, &mut bytes)?;
        let Ok(header) = record::header(&bytes, lsn, room) else {
            return Ok(false);
        };
        bytes.resize(header.len, 0);
        file.read_at(SEGMENT_HEADER_BYTES, &mut bytes)?;
        Ok(record::decode(&bytes, lsn, self.page_size_max).is_ok())
    }

    /// The first invalid record is at `offset` of segment `index`: the end of the log, unless a
    /// valid record follows anywhere.
    fn end_at(&self, index: u64, offset: usize, bytes: &[u8], reason: String) -> Result<LogEnd> {
        let size = self.segment_bytes;
        let mut segment_bytes = std::borrow::Cow::Borrowed(bytes);
        let mut segment = index;
        let mut from = offset + self.format.alignment();
        loop {
            if let Some(found) = self.valid_record_in(segment, &segment_bytes, from) {
                return Err(Error::CorruptLog {
                    path: self.files[&index].path().to_path_buf(),
                    offset: SEGMENT_HEADER_BYTES + offset as u64,
                    reason: format!(
                        "{reason}, but a valid record follows at LSN {found}: the log is damaged \
                         before its end"
                    ),
                });
            }
            segment += 1;
            if !self.files.contains_key(&segment) {
                break;
            }
            segment_bytes = std::borrow::Cow::Owned(self.load(segment)?);
            from = 0;
        }
        let end = Lsn(index * size + offset as u64);
        // A record that was being written when the log stopped claims this very LSN. Anything
        // else past the end is what a recycled segment held before (records of an older
        // LSN), not part of this log: nothing to report. A compact record does not store its
        // LSN: one that begins here is taken for the torn one.
        let claims_end = self.format.may_begin(&bytes[offset..], end);
        let discarded = if claims_end {
            bytes[offset..]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |last| last as u64 + 1)
        } else {
            tracing::debug!(end = end.0, reason = %reason, "log ends before stale bytes of a recycled segment");
            0
        };
        if discarded > 0 {
            tracing::warn!(end = end.0, discarded, reason = %reason, "log ends in a torn record; discarded it");
        }
        Ok(LogEnd {
            end,
            discarded_bytes: discarded,
        })
    }

    fn valid_record_in(&self, segment: u64, bytes: &[u8], from: usize) -> Option<Lsn> {
        let base = segment * self.segment_bytes;
        let step = self.format.alignment();
        let mut offset = from.next_multiple_of(step);
        while offset + self.format.smallest_record() <= bytes.len() {
            if self.format == RecordFormat::Compact {
                // Straight to the next byte that could be a compact record's version.
                let at = offset + VERSION_AT;
                match memchr::memchr(record::COMPACT_FORMAT_VERSION, &bytes[at..]) {
                    Some(skip) => offset += skip,
                    None => break,
                }
                if offset + self.format.smallest_record() > bytes.len() {
                    break;
                }
            } else {
                // Past a run of zeros (the unwritten rest of a segment) in one step.
                match skip_zero_lsn_fields(bytes, offset) {
                    Some(next) if next == offset => {}
                    Some(next) => {
                        offset = next;
                        continue;
                    }
                    None => break,
                }
            }
            let lsn = base + offset as u64;
            if self.format.may_begin(&bytes[offset..], Lsn(lsn)) {
                let room = bytes.len() - offset;
                let valid = record::header(&bytes[offset..], Lsn(lsn), room)
                    .and_then(|h| {
                        record::decode(&bytes[offset..offset + h.len], Lsn(lsn), self.page_size_max)
                    })
                    .is_ok();
                if valid {
                    return Some(Lsn(lsn));
                }
            }
            offset += step;
        }
        None
    }
}

/// Aligned records: the first offset from `offset` on (`offset` itself if its field is not
/// all zeros or runs past `bytes`) where a record's LSN field holds a non-zero byte, or `None`
/// if no such offset is left. A record names its own LSN there, never 0, so no record begins
/// at the offsets passed over.
fn skip_zero_lsn_fields(bytes: &[u8], offset: usize) -> Option<usize> {
    const FIELD: usize = 8;
    let field = offset + record::LSN_AT;
    match bytes.get(field..field + FIELD) {
        Some(lsn) if lsn.iter().all(|&b| b == 0) => {}
        _ => return Some(offset),
    }
    let from = field + FIELD;
    let nonzero = from + first_nonzero(&bytes[from..])?;
    // The offsets whose field holds byte `nonzero`: nonzero - 15 ..= nonzero - 8, one of them
    // aligned.
    Some((nonzero + 1 - record::LSN_AT - FIELD).next_multiple_of(RecordFormat::Aligned.alignment()))
}

#[cfg(test)]
mod skip_tests {
    use super::*;

    /// Against a plain walk over every aligned offset: the skip lands on the first offset
    /// whose LSN field has a non-zero byte, whatever byte of the field that is.
    #[test]
    fn a_skip_lands_where_the_walk_would() {
        let align = RecordFormat::Aligned.alignment();
        for len in [0usize, 15, 16, 17, 64, 100, 200] {
            for at in 0..len {
                let mut bytes = vec![0u8; len];
                bytes[at] = 1;
                for offset in (0..len).step_by(align) {
                    let walk = (offset..)
                        .step_by(align)
                        .take_while(|o| o + record::LSN_AT + 8 <= len)
                        .find(|o| bytes[o + record::LSN_AT..o + record::LSN_AT + 8] != [0; 8]);
                    let skipped = skip_zero_lsn_fields(&bytes, offset)
                        .filter(|o| o + record::LSN_AT + 8 <= len);
                    assert_eq!(skipped, walk, "len {len}, byte {at}, from {offset}");
                }
            }
        }
    }
}
