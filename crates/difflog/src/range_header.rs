//! The header of one changed range in a change record, XOR and physical alike. Two layouts; a
//! record's header flag [`FLAG_COMPACT_RANGES`] says which (records written before the compact
//! layout have the fixed one, and stay readable):
//!
//! ```text
//! fixed     0  4 page | 4  2 offset | 6  2 length (bits 0-14), BackupID (bit 15, XOR only)
//! compact   varint: length << 2 | BackupID << 1 | names its page
//!           varint: page (only when it names its page: the first range of a record, and a
//!                   range on another page than the range before it)
//!           varint: offset
//! ```
//!
//! Varints are unsigned LEB128, minimal. A transaction's record holds a few ranges per page (a
//! page header, slot entries, objects), so most compact headers are 3 or 4 bytes instead of 8.

use lodestore_core::PageId;
use lodestore_wal::record::{push_varint, read_varint};

/// Header flag: the record's ranges have the compact layout.
pub const FLAG_COMPACT_RANGES: u16 = 2;
/// Bytes of a range's fixed header.
pub const FIXED_RANGE_HEADER_BYTES: usize = 8;
/// Longest range one header describes; longer changes are split.
pub const RANGE_BYTES_MAX: usize = 0x7fff;
const FIXED_BACKUP_BIT: u16 = 0x8000;

/// One range's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeHeader {
    pub page: PageId,
    pub offset: u16,
    /// Bytes of the range (1..=[`RANGE_BYTES_MAX`]).
    pub len: usize,
    /// The page's BackupID when the change was made (XOR records; false in physical ones).
    pub backup_id: bool,
}

/// Writes compact range headers, remembering the page of the range before.
#[derive(Clone, Debug, Default)]
pub struct RangeWriter {
    last_page: Option<PageId>,
}

impl RangeWriter {
    pub fn push(&mut self, out: &mut Vec<u8>, header: RangeHeader) {
        debug_assert!((1..=RANGE_BYTES_MAX).contains(&header.len));
        let names_page = self.last_page != Some(header.page);
        let word =
            (header.len as u64) << 2 | u64::from(header.backup_id) << 1 | u64::from(names_page);
        push_varint(out, word);
        if names_page {
            push_varint(out, u64::from(header.page.0));
        }
        push_varint(out, u64::from(header.offset));
        self.last_page = Some(header.page);
    }
}

/// Reads range headers of one record body in the layout its flags name.
#[derive(Clone, Debug)]
pub struct RangeReader {
    compact: bool,
    last_page: Option<PageId>,
}

impl RangeReader {
    pub fn new(flags: u16) -> RangeReader {
        RangeReader {
            compact: flags & FLAG_COMPACT_RANGES != 0,
            last_page: None,
        }
    }

    /// The header at the start of `rest` (body byte `at`, for messages) and its length.
    pub fn next(&mut self, rest: &[u8], at: usize) -> Result<(RangeHeader, usize), String> {
        let header = if self.compact {
            self.next_compact(rest, at)?
        } else {
            next_fixed(rest, at)?
        };
        if header.0.len == 0 || header.0.len > RANGE_BYTES_MAX {
            return Err(format!(
                "range at body byte {at} has length {}",
                header.0.len
            ));
        }
        Ok(header)
    }

    fn next_compact(&mut self, rest: &[u8], at: usize) -> Result<(RangeHeader, usize), String> {
        let field = |bytes, what: &str, max: u64| match read_varint(bytes) {
            Ok((value, after)) if value <= max => Ok((value, after)),
            Ok((value, _)) => Err(format!(
                "range header at body byte {at}: {what} {value} is out of range"
            )),
            Err(e) => Err(format!("range header at body byte {at}: {what}: {e}")),
        };
        let (word, after) = field(rest, "length", u64::MAX)?;
        let (page, after) = if word & 1 != 0 {
            let (page, after) = field(after, "page", u64::from(u32::MAX))?;
            (PageId(page as u32), after)
        } else {
            let page = self.last_page.ok_or_else(|| {
                format!("range at body byte {at} names no page and follows no range")
            })?;
            (page, after)
        };
        let (offset, after) = field(after, "offset", u64::from(u16::MAX))?;
        let offset = offset as u16;
        self.last_page = Some(page);
        let len = usize::try_from(word >> 2).unwrap_or(usize::MAX);
        Ok((
            RangeHeader {
                page,
                offset,
                len,
                backup_id: word & 2 != 0,
            },
            rest.len() - after.len(),
        ))
    }
}

fn next_fixed(rest: &[u8], at: usize) -> Result<(RangeHeader, usize), String> {
    let header = rest
        .get(..FIXED_RANGE_HEADER_BYTES)
        .ok_or_else(|| format!("range header at body byte {at} is cut short"))?;
    let word = u16::from_le_bytes([header[6], header[7]]);
    Ok((
        RangeHeader {
            page: PageId(u32::from_le_bytes(header[0..4].try_into().unwrap())),
            offset: u16::from_le_bytes([header[4], header[5]]),
            len: (word & !FIXED_BACKUP_BIT) as usize,
            backup_id: word & FIXED_BACKUP_BIT != 0,
        },
        FIXED_RANGE_HEADER_BYTES,
    ))
}

/// The pieces (start, length) a change of `len` bytes is split into, each at most
/// [`RANGE_BYTES_MAX`]: one range header each, in XOR and physical records alike.
pub(crate) fn pieces(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(RANGE_BYTES_MAX)
        .map(move |at| (at, (len - at).min(RANGE_BYTES_MAX)))
}

/// A fixed range header, as records before the compact layout carried them (tests read both).
#[cfg(test)]
pub(crate) fn push_fixed(out: &mut Vec<u8>, header: RangeHeader) {
    out.extend_from_slice(&header.page.0.to_le_bytes());
    out.extend_from_slice(&header.offset.to_le_bytes());
    let word = header.len as u16
        | if header.backup_id {
            FIXED_BACKUP_BIT
        } else {
            0
        };
    out.extend_from_slice(&word.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Headers written in either layout read back as written, and a compact header names
        /// its page only when the page changes.
        #[test]
        fn headers_read_back_in_both_layouts(
            ranges in proptest::collection::vec(
                (0u32..4, any::<u32>(), any::<u16>(), 1usize..=RANGE_BYTES_MAX, any::<bool>()), 1..20),
        ) {
            let headers: Vec<RangeHeader> = ranges
                .iter()
                .map(|&(which, page, offset, len, backup_id)| RangeHeader {
                    // Mostly a few pages, so that runs of one page occur.
                    page: PageId(if which < 3 { which } else { page }),
                    offset,
                    len,
                    backup_id,
                })
                .collect();
            for compact in [false, true] {
                let mut body = Vec::new();
                let mut writer = RangeWriter::default();
                for &h in &headers {
                    if compact { writer.push(&mut body, h) } else { push_fixed(&mut body, h) }
                }
                let mut reader = RangeReader::new(if compact { FLAG_COMPACT_RANGES } else { 0 });
                let mut at = 0;
                for &h in &headers {
                    let (read, len) = reader.next(&body[at..], at).unwrap();
                    prop_assert_eq!(read, h);
                    // At most 3 bytes of length, 5 of page and 3 of offset.
                    prop_assert!(len <= 11);
                    at += len;
                }
                prop_assert_eq!(at, body.len());
            }
        }
    }

    #[test]
    fn malformed_compact_headers_are_named() {
        let mut reader = RangeReader::new(FLAG_COMPACT_RANGES);
        // Length 1 on the page before, but there is no range before.
        let err = reader.next(&[1 << 2, 0], 0).unwrap_err();
        assert!(err.contains("follows no range"), "{err}");
        let err = RangeReader::new(FLAG_COMPACT_RANGES)
            .next(&[0b01, 5, 0], 0)
            .unwrap_err();
        assert!(err.contains("length 0"), "{err}");
        assert!(RangeReader::new(FLAG_COMPACT_RANGES)
            .next(&[0x80], 0)
            .is_err());
        // A range of three bytes on page 7 at offset 300, then one on the same page.
        let mut body = Vec::new();
        let mut writer = RangeWriter::default();
        let h = RangeHeader {
            page: PageId(7),
            offset: 300,
            len: 3,
            backup_id: true,
        };
        writer.push(&mut body, h);
        writer.push(&mut body, RangeHeader { offset: 10, ..h });
        assert_eq!(body.len(), 4 + 2, "the second names no page");
    }
}
