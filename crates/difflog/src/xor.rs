//! The differential log record (Lee, Kim & Cha, section 3.1-3.2): a changed range carries the
//! XOR of its bytes before and after, which serves redo and undo alike (`p ^ d = q`,
//! `q ^ d = p`), and the changes of any set of records can be applied in any order.
//!
//! One record holds every range a transaction shipped at once, so the 40-byte record header
//! is paid once per batch rather than once per range. Body (all integers little-endian,
//! ranges back to back, not aligned):
//!
//! ```text
//! per range   0  4 page
//!             4  2 offset in the page
//!             6  2 bits 0..15: length (1..=32767); bit 15: the page's BackupID when logged
//!             8    length bytes: before XOR after
//! ```
//!
//! Header flag bit 0 ([`FLAG_COMMITS`]): the record is also its transaction's commit.

use crate::kinds::XOR_CHANGES;
use lodestore_core::PageId;
use lodestore_wal::record::Body;

/// Header flag: this record also commits its transaction (no separate commit record).
pub const FLAG_COMMITS: u16 = 1;

/// Bytes of a range's header in a record body.
pub const RANGE_HEADER_BYTES: usize = 8;
/// Longest range one header describes; longer changes are split.
pub const RANGE_BYTES_MAX: usize = 0x7fff;
const BACKUP_BIT: u16 = 0x8000;

/// The pieces (start, length) a change of `len` bytes is split into, each at most
/// [`RANGE_BYTES_MAX`]: one range header each, in XOR and physical records alike.
pub(crate) fn pieces(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(RANGE_BYTES_MAX)
        .map(move |at| (at, (len - at).min(RANGE_BYTES_MAX)))
}

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
        debug_assert!((1..=RANGE_BYTES_MAX).contains(&len));
        assert!(offset < 1 << 16, "offset {offset} past any page");
        self.body.extend_from_slice(&page.0.to_le_bytes());
        self.body.extend_from_slice(&(offset as u16).to_le_bytes());
        let word = len as u16 | if backup_id { BACKUP_BIT } else { 0 };
        self.body.extend_from_slice(&word.to_le_bytes());
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

    /// The body so far (read it with [`ranges`]).
    pub fn body(&self) -> &[u8] {
        &self.body
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
        if self.commits {
            FLAG_COMMITS
        } else {
            0
        }
    }
}

/// The ranges of an XOR record's body, checked as they are read.
pub fn ranges(body: &[u8]) -> XorRanges<'_> {
    XorRanges { body, at: 0 }
}

/// Iterator over an XOR record's ranges; an item is `Err` (and the last) when the body is
/// malformed.
pub struct XorRanges<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Iterator for XorRanges<'a> {
    type Item = Result<XorRange<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.body.len() {
            return None;
        }
        let rest = &self.body[self.at..];
        let item = parse_range(rest, self.at);
        match &item {
            Ok(range) => self.at += RANGE_HEADER_BYTES + range.delta.len(),
            Err(_) => self.at = self.body.len(),
        }
        Some(item)
    }
}

fn parse_range(rest: &[u8], at: usize) -> Result<XorRange<'_>, String> {
    if rest.len() < RANGE_HEADER_BYTES {
        return Err(format!("range header at body byte {at} is cut short"));
    }
    let page = PageId(u32::from_le_bytes(rest[0..4].try_into().unwrap()));
    let offset = u16::from_le_bytes(rest[4..6].try_into().unwrap());
    let word = u16::from_le_bytes(rest[6..8].try_into().unwrap());
    let len = (word & !BACKUP_BIT) as usize;
    if len == 0 {
        return Err(format!("range at body byte {at} is empty"));
    }
    let delta = rest
        .get(RANGE_HEADER_BYTES..RANGE_HEADER_BYTES + len)
        .ok_or_else(|| format!("range at body byte {at} claims {len} bytes past the body"))?;
    Ok(XorRange {
        page,
        offset,
        backup_id: word & BACKUP_BIT != 0,
        delta,
    })
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
        let got: Vec<_> = ranges(&b.body).collect::<Result<_, _>>().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].delta.len(), RANGE_BYTES_MAX);
        assert_eq!(got[1].offset as usize, 100 + RANGE_BYTES_MAX);
        assert!(got
            .iter()
            .all(|r| r.backup_id && r.delta.iter().all(|&x| x == 3)));

        let mut cut = b.body.clone();
        cut.truncate(cut.len() - 1);
        let last = ranges(&cut).last().unwrap();
        assert!(last.unwrap_err().contains("past the body"));
        let err = ranges(&[0u8; 8]).next().unwrap().unwrap_err();
        assert!(err.contains("empty"), "{err}");
        assert!(ranges(&[1, 2, 3]).next().unwrap().is_err());
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
            for range in ranges(&b.body) {
                let r = range.unwrap();
                let at = r.offset as usize;
                xor_into(&mut image[at..at + r.delta.len()], r.delta);
            }
            prop_assert_eq!(&image, &post);
            for range in ranges(&b.body) {
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
