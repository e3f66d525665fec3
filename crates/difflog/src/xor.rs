//! The differential log record (Lee, Kim & Cha, section 3.1-3.2): a changed range carries the
//! XOR of its bytes before and after, which serves redo and undo alike (`p ^ d = q`,
//! `q ^ d = p`), and the changes of any set of records can be applied in any order.
//!
//! One record holds every range a transaction shipped at once, so the record header is paid
//! once per batch rather than once per range. Body: ranges back to back, each a range header
//! ([`crate::range_header`]: page, offset, length and the page's BackupID when logged) and then
//! length bytes, before XOR after.
//!
//! Header flag bit 0 ([`FLAG_COMMITS`]): the record is also its transaction's commit. Bit 1
//! ([`FLAG_COMPACT_RANGES`]): the range headers have the compact layout (every record written
//! now; older ones have the fixed layout).

use crate::kinds::XOR_CHANGES;
use crate::range_header::{pieces, RangeHeader, RangeReader, RangeWriter};
pub use crate::range_header::{FLAG_COMPACT_RANGES, RANGE_BYTES_MAX};
use lodestore_core::PageId;
use lodestore_wal::record::Body;

/// Header flag: this record also commits its transaction (no separate commit record).
pub const FLAG_COMMITS: u16 = 1;

/// XORs `delta` into `target` (equal lengths): redo and undo of a differential record.
#[inline]
pub fn xor_into(target: &mut [u8], delta: &[u8]) {
    assert_eq!(
        target.len(),
        delta.len(),
        "a delta covers its range exactly"
    );
    let mut t = target.chunks_exact_mut(8);
    let mut d = delta.chunks_exact(8);
    for (a, b) in (&mut t).zip(&mut d) {
        let x = u64::from_ne_bytes(a[..8].try_into().unwrap())
            ^ u64::from_ne_bytes(b.try_into().unwrap());
        a.copy_from_slice(&x.to_ne_bytes());
    }
    for (a, b) in t.into_remainder().iter_mut().zip(d.remainder()) {
        *a ^= b;
    }
}

/// `before ^ after` appended to `out`.
pub fn push_delta(before: &[u8], after: &[u8], out: &mut Vec<u8>) {
    assert_eq!(before.len(), after.len());
    out.extend(before.iter().zip(after).map(|(b, a)| b ^ a));
}

/// One changed range of a record: `delta` is the XOR of the bytes before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XorRange<'a> {
    pub page: PageId,
    pub offset: u16,
    /// The BackupID bit the page carried when the change was made (Algorithm 1, step 3).
    pub backup_id: bool,
    pub delta: &'a [u8],
}

/// Builds the body of an XOR record range by range.
#[derive(Clone, Debug, Default)]
pub struct XorRecordBuilder {
    body: Vec<u8>,
    commits: bool,
    headers: RangeWriter,
}

impl XorRecordBuilder {
    pub fn new() -> XorRecordBuilder {
        XorRecordBuilder::default()
    }

    /// Adds the change of `page` at `offset` from `before` to `after` (equal lengths), split
    /// into ranges of at most [`RANGE_BYTES_MAX`] bytes.
    pub fn push_change(
        &mut self,
        page: PageId,
        offset: usize,
        backup_id: bool,
        before: &[u8],
        after: &[u8],
    ) {
        assert_eq!(
            before.len(),
            after.len(),
            "a change has equal before and after"
        );
        assert!(
            offset + before.len() <= 1 << 16,
            "a range lies inside one page"
        );
        for (at, len) in pieces(before.len()) {
            self.push_header(page, offset + at, backup_id, len);
            push_delta(&before[at..at + len], &after[at..at + len], &mut self.body);
        }
    }

    /// Adds a range whose delta is already computed.
    pub fn push_delta(&mut self, range: XorRange<'_>) {
        for (at, len) in pieces(range.delta.len()) {
            self.push_header(range.page, range.offset as usize + at, range.backup_id, len);
            self.body.extend_from_slice(&range.delta[at..at + len]);
        }
    }

    fn push_header(&mut self, page: PageId, offset: usize, backup_id: bool, len: usize) {
        assert!(offset < 1 << 16, "offset {offset} past any page");
        let header = RangeHeader {
            page,
            offset: offset as u16,
            len,
            backup_id,
        };
        self.headers.push(&mut self.body, header);
    }

    /// Marks the record as its transaction's commit.
    pub fn commits(mut self, yes: bool) -> XorRecordBuilder {
        self.commits = yes;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Bytes of the body so far.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// The body so far (read it with [`ranges`] and [`XorRecordBuilder::flags`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The record header's flags.
    pub fn flags(&self) -> u16 {
        FLAG_COMPACT_RANGES | if self.commits { FLAG_COMMITS } else { 0 }
    }
}

impl Body for XorRecordBuilder {
    fn kind(&self) -> u8 {
        XOR_CHANGES
    }

    fn body_len(&self) -> usize {
        self.body.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[..self.body.len()].copy_from_slice(&self.body);
        self.flags()
    }
}

/// The ranges of an XOR record's body, in the layout its header's `flags` name, checked as
/// they are read.
pub fn ranges(flags: u16, body: &[u8]) -> XorRanges<'_> {
    XorRanges {
        body,
        at: 0,
        headers: RangeReader::new(flags),
    }
}

/// Iterator over an XOR record's ranges; an item is `Err` (and the last) when the body is
/// malformed.
pub struct XorRanges<'a> {
    body: &'a [u8],
    at: usize,
    headers: RangeReader,
}

impl<'a> Iterator for XorRanges<'a> {
    type Item = Result<XorRange<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.body.len() {
            return None;
        }
        let item = self.parse_range();
        if item.is_err() {
            self.at = self.body.len();
        }
        Some(item)
    }
}

impl<'a> XorRanges<'a> {
    fn parse_range(&mut self) -> Result<XorRange<'a>, String> {
        let at = self.at;
        let (header, header_len) = self.headers.next(&self.body[at..], at)?;
        let start = at + header_len;
        let delta = self.body.get(start..start + header.len).ok_or_else(|| {
            format!(
                "range at body byte {at} claims {} bytes past the body",
                header.len
            )
        })?;
        self.at = start + header.len;
        Ok(XorRange {
            page: header.page,
            offset: header.offset,
            backup_id: header.backup_id,
            delta,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn redo_and_undo_are_the_same_operation() {
        let (p, q) = (0b0010u8, 0b1100u8);
        let mut d = Vec::new();
        push_delta(&[p], &[q], &mut d);
        assert_eq!(d, [0b1110]);
        let mut x = [p];
        xor_into(&mut x, &d);
        assert_eq!(x, [q]);
        xor_into(&mut x, &d);
        assert_eq!(x, [p]);
    }

    #[test]
    fn long_changes_split_and_malformed_bodies_are_named() {
        let before = vec![1u8; 40_000];
        let after = vec![2u8; 40_000];
        let mut b = XorRecordBuilder::new();
        b.push_change(PageId(9), 100, true, &before, &after);
        let got: Vec<_> = ranges(b.flags(), &b.body)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].delta.len(), RANGE_BYTES_MAX);
        assert_eq!(got[1].offset as usize, 100 + RANGE_BYTES_MAX);
        assert!(got
            .iter()
            .all(|r| r.backup_id && r.delta.iter().all(|&x| x == 3)));

        let mut cut = b.body.clone();
        cut.truncate(cut.len() - 1);
        let last = ranges(b.flags(), &cut).last().unwrap();
        assert!(last.unwrap_err().contains("past the body"));
        let err = ranges(0, &[0u8; 8]).next().unwrap().unwrap_err();
        assert!(err.contains("length 0"), "{err}");
        assert!(ranges(0, &[1, 2, 3]).next().unwrap().is_err());
    }

    /// Records written before the compact layout (fixed range headers, flag bit 1 clear) read
    /// back as they did.
    #[test]
    fn fixed_range_headers_still_read() {
        let mut body = Vec::new();
        for (page, offset, delta) in [(4u32, 10u16, &[1u8, 2][..]), (4, 90, &[3]), (6, 0, &[4])] {
            crate::range_header::push_fixed(
                &mut body,
                RangeHeader {
                    page: PageId(page),
                    offset,
                    len: delta.len(),
                    backup_id: page == 6,
                },
            );
            body.extend_from_slice(delta);
        }
        let got: Vec<_> = ranges(FLAG_COMMITS, &body)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            got.iter()
                .map(|r| (r.page.0, r.offset, r.backup_id, r.delta.to_vec()))
                .collect::<Vec<_>>(),
            vec![
                (4, 10, false, vec![1, 2]),
                (4, 90, false, vec![3]),
                (6, 0, true, vec![4])
            ]
        );
        // The same changes in the compact layout take fewer bytes.
        let mut b = XorRecordBuilder::new();
        for r in &got {
            b.push_delta(*r);
        }
        assert_eq!(
            ranges(b.flags(), b.body())
                .collect::<Result<Vec<_>, _>>()
                .unwrap(),
            got
        );
        assert!(
            b.body_len() + 12 <= body.len(),
            "{} against {}",
            b.body_len(),
            body.len()
        );
    }

    proptest! {
        /// Replaying a record's ranges on the pre-image gives the after-image, and replaying
        /// them again gives the pre-image back.
        #[test]
        fn a_record_redoes_and_undoes_its_changes(
            pre in proptest::collection::vec(any::<u8>(), 64..600),
            edits in proptest::collection::vec((0usize..600, 1usize..80, any::<u8>()), 1..8),
        ) {
            let mut post = pre.clone();
            let mut b = XorRecordBuilder::new();
            for (start, len, value) in edits {
                let start = start % pre.len();
                let end = (start + len).min(pre.len());
                let before = post[start..end].to_vec();
                post[start..end].fill(value);
                b.push_change(PageId(1), start, false, &before, &post[start..end]);
            }
            let mut image = pre.clone();
            for range in ranges(b.flags(), &b.body) {
                let r = range.unwrap();
                let at = r.offset as usize;
                xor_into(&mut image[at..at + r.delta.len()], r.delta);
            }
            prop_assert_eq!(&image, &post);
            for range in ranges(b.flags(), &b.body) {
                let r = range.unwrap();
                let at = r.offset as usize;
                xor_into(&mut image[at..at + r.delta.len()], r.delta);
            }
            prop_assert_eq!(&image, &pre);
        }

        /// Deltas of several changes, some redone and some undone, give the same image in any
        /// order (Theorem 2).
        #[test]
        fn deltas_apply_in_any_order(
            start in proptest::collection::vec(any::<u8>(), 32),
            steps in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 32), 1..10),
            seed in any::<u64>(),
        ) {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            let mut deltas = Vec::new();
            let mut now = start.clone();
            for next in &steps {
                let mut d = Vec::new();
                push_delta(&now, next, &mut d);
                deltas.push(d);
                now = next.clone();
            }
            // Undo the last change too: its delta twice leaves the image before it.
            deltas.push(deltas.last().unwrap().clone());
            let mut in_order = start.clone();
            for d in &deltas {
                xor_into(&mut in_order, d);
            }
            let mut shuffled = deltas.clone();
            shuffled.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
            let mut any_order = start.clone();
            for d in &shuffled {
                xor_into(&mut any_order, d);
            }
            prop_assert_eq!(&in_order, &any_order);
            let expect = if steps.len() >= 2 { &steps[steps.len() - 2] } else { &start };
            prop_assert_eq!(&in_order, expect);
        }
    }
}
