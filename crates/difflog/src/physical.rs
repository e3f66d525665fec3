//! The physical-logging baseline the paper measures against (PL2P): each changed range with
//! its before and after images in full, and a serial number so that restart can merge the
//! streams in the order the changes were made. Aborts write compensation records (after-images
//! only, redo-only), as ARIES does.
//!
//! ```text
//! body       0  8 serial number of the record (one counter across all streams)
//! per range  a range header (crate::range_header: page, offset, length; no BackupID), then
//!            before bytes (changes only), after bytes
//! ```
//!
//! Header flags as for XOR records: bit 0 ([`crate::xor::FLAG_COMMITS`]) commits, bit 1
//! ([`FLAG_COMPACT_RANGES`]) says the range headers are compact (every record written now).

use crate::kinds::{PHYSICAL_CHANGES, PHYSICAL_COMPENSATION};
use crate::range_header::{pieces, RangeHeader, RangeReader, RangeWriter, FLAG_COMPACT_RANGES};
use crate::xor::FLAG_COMMITS;
use lodestore_core::PageId;
use lodestore_wal::record::Body;

/// One range of a physical record; `before` is empty in a compensation record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysicalRange<'a> {
    pub page: PageId,
    pub offset: u16,
    pub before: &'a [u8],
    pub after: &'a [u8],
}

/// Builds a physical change (or compensation) record.
#[derive(Clone, Debug)]
pub struct PhysicalRecordBuilder {
    kind: u8,
    body: Vec<u8>,
    commits: bool,
    headers: RangeWriter,
}

impl PhysicalRecordBuilder {
    /// A record of changes (before and after images).
    pub fn changes(serial: u64) -> PhysicalRecordBuilder {
        PhysicalRecordBuilder::with_kind(PHYSICAL_CHANGES, serial)
    }

    /// A compensation record (after-images only, never undone).
    pub fn compensation(serial: u64) -> PhysicalRecordBuilder {
        PhysicalRecordBuilder::with_kind(PHYSICAL_COMPENSATION, serial)
    }

    fn with_kind(kind: u8, serial: u64) -> PhysicalRecordBuilder {
        PhysicalRecordBuilder {
            kind,
            body: serial.to_le_bytes().to_vec(),
            commits: false,
            headers: RangeWriter::default(),
        }
    }

    /// Adds the change at `offset` of `page`; `before` is ignored in a compensation record.
    pub fn push(&mut self, page: PageId, offset: usize, before: &[u8], after: &[u8]) {
        assert_eq!(
            before.len(),
            after.len(),
            "a change has equal before and after"
        );
        assert!(
            offset + after.len() <= 1 << 16,
            "a range lies inside one page"
        );
        for (at, len) in pieces(after.len()) {
            let header = RangeHeader {
                page,
                offset: (offset + at) as u16,
                len,
                backup_id: false,
            };
            self.headers.push(&mut self.body, header);
            if self.kind == PHYSICAL_CHANGES {
                self.body.extend_from_slice(&before[at..at + len]);
            }
            self.body.extend_from_slice(&after[at..at + len]);
        }
    }

    /// Gives the record its serial number (taken when it is appended, so serial order is the
    /// order records reach the streams).
    pub fn set_serial(&mut self, serial: u64) {
        self.body[..8].copy_from_slice(&serial.to_le_bytes());
    }

    /// No ranges yet.
    pub fn is_empty(&self) -> bool {
        self.body.len() == 8
    }

    /// Bytes of the body so far.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// The body so far (read it with [`parse`] and [`PhysicalRecordBuilder::flags`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The record header's flags.
    pub fn flags(&self) -> u16 {
        FLAG_COMPACT_RANGES | if self.commits { FLAG_COMMITS } else { 0 }
    }

    pub fn commits(mut self, yes: bool) -> PhysicalRecordBuilder {
        self.commits = yes;
        self
    }
}

impl Body for PhysicalRecordBuilder {
    fn kind(&self) -> u8 {
        self.kind
    }

    fn body_len(&self) -> usize {
        self.body.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[..self.body.len()].copy_from_slice(&self.body);
        self.flags()
    }
}

/// A physical record's serial number alone (the merge orders records by it before it needs
/// their ranges).
pub fn serial(body: &[u8]) -> Result<u64, String> {
    let serial = body
        .get(..8)
        .ok_or("physical record shorter than its serial number")?;
    Ok(u64::from_le_bytes(serial.try_into().unwrap()))
}

/// A physical record's serial number and ranges, in the layout its header's `flags` name,
/// checked as read.
pub fn parse(kind: u8, flags: u16, body: &[u8]) -> Result<(u64, Vec<PhysicalRange<'_>>), String> {
    let serial = serial(body)?;
    let images = if kind == PHYSICAL_CHANGES { 2 } else { 1 };
    let mut ranges = Vec::new();
    let mut headers = RangeReader::new(flags);
    let mut at = 8;
    while at < body.len() {
        let (header, header_len) = headers.next(&body[at..], at)?;
        if header.backup_id {
            return Err(format!("range at body byte {at} carries a BackupID"));
        }
        let (page, offset, len) = (header.page, header.offset, header.len);
        let start = at + header_len;
        let bytes = body
            .get(start..start + images * len)
            .ok_or_else(|| format!("range at body byte {at} claims bytes past the body"))?;
        let (before, after) = if images == 2 {
            bytes.split_at(len)
        } else {
            (&bytes[..0], bytes)
        };
        ranges.push(PhysicalRange {
            page,
            offset,
            before,
            after,
        });
        at = start + images * len;
    }
    Ok((serial, ranges))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range_header::RANGE_BYTES_MAX;

    #[test]
    fn changes_and_compensations_read_back() {
        let mut b = PhysicalRecordBuilder::changes(77);
        b.push(PageId(3), 10, &[1, 2, 3], &[4, 5, 6]);
        b.push(PageId(4), 0, &[0; 2], &[9; 2]);
        let (serial, ranges) = parse(PHYSICAL_CHANGES, b.flags(), &b.body).unwrap();
        assert_eq!(serial, 77);
        assert_eq!(ranges.len(), 2);
        assert_eq!(
            (ranges[0].before, ranges[0].after),
            (&[1, 2, 3][..], &[4, 5, 6][..])
        );
        assert_eq!(ranges[1].page, PageId(4));

        let mut c = PhysicalRecordBuilder::compensation(78);
        c.push(PageId(3), 10, &[4, 5, 6], &[1, 2, 3]);
        let (_, ranges) = parse(PHYSICAL_COMPENSATION, c.flags(), &c.body).unwrap();
        assert!(ranges[0].before.is_empty());
        assert_eq!(ranges[0].after, &[1, 2, 3]);

        assert!(parse(PHYSICAL_CHANGES, b.flags(), &b.body[..b.body.len() - 1]).is_err());

        // A change longer than a range's length field splits, and reads back whole.
        let mut long = PhysicalRecordBuilder::changes(9);
        long.push(PageId(5), 100, &vec![1; 40_000], &vec![2; 40_000]);
        let (_, ranges) = parse(PHYSICAL_CHANGES, long.flags(), &long.body).unwrap();
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[1].offset as usize, 100 + RANGE_BYTES_MAX);
        assert_eq!(ranges.iter().map(|r| r.after.len()).sum::<usize>(), 40_000);
        assert!(ranges.iter().all(|r| r.before.iter().all(|&x| x == 1)));
        assert!(parse(PHYSICAL_CHANGES, 0, &[0; 4]).is_err());
    }
}
