//! Log records.
//!
//! ```text
//! header (40 bytes)
//!  0  4 crc32c of bytes 4..length (header rest, body, padding)
//!  4  4 length of the whole record, a multiple of 8
//!  8  8 LSN: the record's own position (a record found elsewhere is not valid there)
//! 16  8 previous LSN of the same transaction (0: none)
//! 24  8 transaction id (0: none)
//! 32  1 kind
//! 33  1 record format version (RECORD_FORMAT_VERSION)
//! 34  2 flags
//! 36  4 the engine's kinds: reserved, 0; a family's kinds: the body's length in bytes
//! 40    body, by kind:
//!   update         u32 page, u32 offset, u32 length, u32 0, before bytes (absent when flag
//!                  BEFORE_ZERO: they were all zero), after bytes
//!   compensation   u32 page, u32 offset, u32 length, u32 0, u64 undo-next LSN, after bytes
//!   page image     u32 page, u32 stored length, the page's bytes up to its last non-zero
//!                  byte (the rest are zero)
//!   checkpoint     u32 count, u32 0, per active transaction: u64 id, u64 first LSN,
//!   begin          u64 last LSN
//!   checkpoint end u64 LSN of its checkpoint begin
//!   logged pages   u32 count, u32 0, per entry: u32 page, u32 flags (1: committed), u64 LSN
//!                  of the page's image, u64 transaction id (a checkpoint's list of the page
//!                  images in the log that a method keeps as the pages' current copies)
//!   pages home     u32 count, u32 0, per page: u32 page (new pages a transaction wrote to
//!                  the data file itself instead of logging them; undone by formatting them
//!                  free)
//!   commit, abort, end, skip, flush mark: no body (skip pads a segment's tail; a flush mark
//!                  ends every flushed batch, so that damage to the batch's last real record is
//!                  followed by a valid record and is told apart from a torn tail)
//! ```
//! New kinds get new kind numbers; a new layout of an existing kind gets a new version, and a
//! reader refuses versions it does not know instead of misreading them.
//!
//! A log created with [`RecordFormat::Compact`] (the differential logging streams, where the
//! fixed part of a small transaction's record is a visible share of the log) frames the same
//! bodies with a short header instead, records back to back without alignment. Varints are
//! unsigned LEB128, minimal.
//!
//! ```text
//! compact record (format version 2)
//!  0  4 crc32c of the record's LSN (8 bytes, little-endian) followed by bytes 4..length: the
//!       position is checked without being stored
//!  4  1 format version, 2 (in an aligned record this byte is its length's low byte, a
//!       multiple of 8: the two never look alike; later compact versions keep bytes 0..5 and
//!       the length, and avoid multiples of 8)
//!  5    varint: length of the whole record
//!       1 kind
//!       2 flags
//!       varint: transaction id (0: none)
//!       varint: distance back to the transaction's previous record (0: none)
//!       body, exactly the rest
//! ```

use lodestore_core::checksum::{crc32c, crc32c_two};
use lodestore_core::{Lsn, PageId, TxnId};

pub const RECORD_HEADER_BYTES: usize = 40;
pub const RECORD_FORMAT_VERSION: u8 = 1;
/// The format version of a compact record (see the module docs).
pub const COMPACT_FORMAT_VERSION: u8 = 2;
/// Bytes of the smallest compact record: no body, no transaction, no previous record.
pub const COMPACT_RECORD_MIN: usize = 11;
/// Most bytes a compact record's header takes (every varint at its longest).
pub const COMPACT_HEADER_MAX: usize = 4 + 1 + 5 + 1 + 2 + 10 + 10;

/// How a log frames its records. Chosen when the log is created and recorded in every
/// segment's header, so a log never mixes the two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordFormat {
    /// The 40-byte header, records aligned to 8 bytes: the engine's log.
    #[default]
    Aligned,
    /// The short header of varints, records back to back (module docs).
    Compact,
}

impl RecordFormat {
    /// Bytes of the smallest record: a segment's tail with less room holds none.
    pub fn smallest_record(self) -> usize {
        match self {
            RecordFormat::Aligned => RECORD_HEADER_BYTES,
            RecordFormat::Compact => COMPACT_RECORD_MIN,
        }
    }

    /// Records start at multiples of this many bytes.
    pub fn alignment(self) -> usize {
        match self {
            RecordFormat::Aligned => RECORD_ALIGN,
            RecordFormat::Compact => 1,
        }
    }

    /// The newest record format version this build reads in such a log.
    pub fn version(self) -> u8 {
        match self {
            RecordFormat::Aligned => RECORD_FORMAT_VERSION,
            RecordFormat::Compact => COMPACT_FORMAT_VERSION,
        }
    }

    /// The cheap test before a record at `lsn` is decoded: an aligned record's LSN field
    /// names `lsn`; a compact record's version byte is there (its checksum names the LSN).
    pub fn may_begin(self, bytes: &[u8], lsn: Lsn) -> bool {
        match self {
            RecordFormat::Aligned => bytes
                .get(LSN_AT..LSN_AT + 8)
                .is_some_and(|field| field == lsn.0.to_le_bytes()),
            RecordFormat::Compact => bytes.get(4) == Some(&COMPACT_FORMAT_VERSION),
        }
    }

    /// Bytes a record with `body` takes at most, wherever it goes.
    pub fn encoded_len_max(self, body: &(impl Body + ?Sized)) -> usize {
        match self {
            RecordFormat::Aligned => encoded_len(body),
            RecordFormat::Compact => COMPACT_HEADER_MAX + body.body_len(),
        }
    }

    /// Bytes the record takes at `lsn`.
    pub fn encoded_len(
        self,
        lsn: Lsn,
        prev: Lsn,
        txn: Option<TxnId>,
        body: &(impl Body + ?Sized),
    ) -> usize {
        match self {
            RecordFormat::Aligned => encoded_len(body),
            RecordFormat::Compact => compact_len(lsn, prev, txn, body),
        }
    }

    /// Appends the record's encoding at `lsn` to `out`.
    pub fn encode(
        self,
        lsn: Lsn,
        prev: Lsn,
        txn: Option<TxnId>,
        body: &(impl Body + ?Sized),
        out: &mut Vec<u8>,
    ) {
        match self {
            RecordFormat::Aligned => encode(lsn, prev, txn, body, out),
            RecordFormat::Compact => encode_compact(lsn, prev, txn, body, out),
        }
    }
}
const RECORD_ALIGN: usize = 8;
/// Where an aligned record's header holds its own LSN (8 bytes, little-endian; never 0).
pub(crate) const LSN_AT: usize = 8;
const FLAG_BEFORE_ZERO: u16 = 1;

/// A transaction active when a checkpoint began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveTxn {
    pub txn: TxnId,
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
}

/// A page image in the log that a recovery method keeps as the page's current copy, as a
/// checkpoint records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedPage {
    pub page: PageId,
    pub lsn: Lsn,
    pub txn: TxnId,
    /// Its transaction had committed when the checkpoint was taken.
    pub committed: bool,
}

const LOGGED_PAGE_BYTES: usize = 24;
const LOGGED_PAGE_COMMITTED: u32 = 1;

/// What a record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordBody {
    /// Bytes `offset..offset + after.len()` of `page` changed from `before` to `after`.
    /// `before` is `None` when they were all zero.
    Update {
        page: PageId,
        offset: u32,
        before: Option<Vec<u8>>,
        after: Vec<u8>,
    },
    /// Undo of an update, never undone itself: write `after` at `offset`; undo continues at
    /// `undo_next`.
    Compensation {
        page: PageId,
        offset: u32,
        after: Vec<u8>,
        undo_next: Lsn,
    },
    /// The whole page as of this record's LSN: a base for later changes (so recovery can
    /// rebuild a torn page), or the page a transaction shipped (its after-image), as the
    /// recovery method chooses. Trailing zeros are not stored.
    PageImage {
        page: PageId,
        image: Vec<u8>,
    },
    Commit,
    Abort,
    End,
    CheckpointBegin {
        active: Vec<ActiveTxn>,
    },
    CheckpointEnd {
        begin: Lsn,
    },
    /// A checkpoint's list of the page images in the log that a method keeps as the pages'
    /// current copies, and that recovery may still need.
    LoggedPages {
        entries: Vec<LoggedPage>,
    },
    /// New pages (free until then, never changed by a logged record) that the transaction
    /// wrote to the data file itself, each carrying this record's LSN, instead of logging
    /// their contents: durable before the pages are written, undone by formatting the pages
    /// free again.
    PagesHome {
        pages: Vec<PageId>,
    },
    /// Padding to the end of a segment.
    Skip,
    /// Ends a flushed batch. Carries no meaning for recovery.
    FlushMark,
    /// A record of a family outside the engine (see [`crate::kinds`]): the log keeps its
    /// kind, flags and body and knows nothing of their meaning; the family reads the body.
    /// Restart passes such records by; the family that wrote them replays them.
    Family {
        kind: u8,
        flags: u16,
        body: Vec<u8>,
    },
}

impl RecordBody {
    /// The page this record changes, if any.
    pub fn page(&self) -> Option<PageId> {
        match self {
            RecordBody::Update { page, .. }
            | RecordBody::Compensation { page, .. }
            | RecordBody::PageImage { page, .. } => Some(*page),
            _ => None,
        }
    }
}

fn stored_image_len(image: &[u8]) -> usize {
    // Block by block from the end (the OR of a block vectorizes; a byte loop over a mostly
    // empty 8 KiB image was a visible share of a commit), then byte by byte in the last
    // block that holds anything.
    const BLOCK: usize = 64;
    let mut end = image.len();
    for block in image.rchunks(BLOCK) {
        if block.iter().fold(0u8, |acc, &b| acc | b) != 0 {
            let last = block
                .iter()
                .rposition(|&b| b != 0)
                .expect("a non-zero byte");
            return end - block.len() + last + 1;
        }
        end -= block.len();
    }
    0
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub lsn: Lsn,
    pub prev: Lsn,
    pub txn: Option<TxnId>,
    pub body: RecordBody,
}

/// An update record's body borrowing the bytes it names, so a change is logged without first
/// being copied into a [`RecordBody`]: the server's path for every change a client ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateRef<'a> {
    pub page: PageId,
    pub offset: u32,
    /// `None` when the bytes before were all zero.
    pub before: Option<&'a [u8]>,
    pub after: &'a [u8],
}

/// A record body as the log encodes it: a [`RecordBody`], or an [`UpdateRef`].
pub trait Body {
    /// The kind number in the record header.
    fn kind(&self) -> u8;
    /// Bytes of the body, padding not included.
    fn body_len(&self) -> usize;
    /// Writes the body into `out` (`body_len` zeroed bytes or more) and returns the header's
    /// flags.
    fn write_body(&self, out: &mut [u8]) -> u16;
}

use crate::kinds::{self, UPDATE as KIND_UPDATE};

/// A family's record as the log frames it: a kind of the family's range, its flags and its
/// body's bytes. A family defines its records as types implementing [`Body`] (or builds one of
/// these) and reads them back from [`RecordBody::Family`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyRef<'a> {
    kind: u8,
    flags: u16,
    body: &'a [u8],
}

impl<'a> FamilyRef<'a> {
    /// A record of `kind`, which must be in a family's registered range (not the engine's).
    pub fn new(kind: u8, flags: u16, body: &'a [u8]) -> lodestore_core::Result<FamilyRef<'a>> {
        match kinds::range_of(kind) {
            Some(range) if range != kinds::ENGINE => Ok(FamilyRef { kind, flags, body }),
            Some(_) => Err(lodestore_core::Error::InvalidArgument(format!(
                "record kind {kind} is the engine's; a family's kinds are in its own range"
            ))),
            None => Err(lodestore_core::Error::InvalidArgument(format!(
                "record kind {kind} is in no registered range (see lodestore_wal::kinds)"
            ))),
        }
    }
}

impl Body for FamilyRef<'_> {
    fn kind(&self) -> u8 {
        assert!(
            kinds::range_of(self.kind).is_some_and(|r| r != kinds::ENGINE),
            "record kind {} is not in a family's registered range",
            self.kind
        );
        self.kind
    }

    fn body_len(&self) -> usize {
        self.body.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[..self.body.len()].copy_from_slice(self.body);
        self.flags
    }
}

impl Body for UpdateRef<'_> {
    fn kind(&self) -> u8 {
        KIND_UPDATE
    }

    fn body_len(&self) -> usize {
        16 + self.after.len() + self.before.map_or(0, <[u8]>::len)
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        put_u32(out, 0, self.page.0);
        put_u32(out, 4, self.offset);
        put_u32(out, 8, self.after.len() as u32);
        let mut at = 16;
        let mut flags = 0;
        match self.before {
            Some(before) => {
                debug_assert_eq!(before.len(), self.after.len());
                out[at..at + before.len()].copy_from_slice(before);
                at += before.len();
            }
            None => flags |= FLAG_BEFORE_ZERO,
        }
        out[at..at + self.after.len()].copy_from_slice(self.after);
        flags
    }
}

impl Body for RecordBody {
    fn kind(&self) -> u8 {
        match self {
            RecordBody::Update { .. } => KIND_UPDATE,
            RecordBody::Compensation { .. } => kinds::COMPENSATION,
            RecordBody::PageImage { .. } => kinds::PAGE_IMAGE,
            RecordBody::Commit => kinds::COMMIT,
            RecordBody::Abort => kinds::ABORT,
            RecordBody::End => kinds::END,
            RecordBody::CheckpointBegin { .. } => kinds::CHECKPOINT_BEGIN,
            RecordBody::CheckpointEnd { .. } => kinds::CHECKPOINT_END,
            RecordBody::Skip => kinds::SKIP,
            RecordBody::FlushMark => kinds::FLUSH_MARK,
            RecordBody::LoggedPages { .. } => kinds::LOGGED_PAGES,
            RecordBody::PagesHome { .. } => kinds::PAGES_HOME,
            RecordBody::Family { kind, flags, body } => FamilyRef {
                kind: *kind,
                flags: *flags,
                body,
            }
            .kind(),
        }
    }

    fn body_len(&self) -> usize {
        match self {
            RecordBody::Update {
                page,
                offset,
                before,
                after,
            } => update_ref(*page, *offset, before, after).body_len(),
            RecordBody::Compensation { after, .. } => 24 + after.len(),
            RecordBody::PageImage { image, .. } => 8 + stored_image_len(image),
            RecordBody::CheckpointBegin { active } => 8 + 24 * active.len(),
            RecordBody::CheckpointEnd { .. } => 8,
            RecordBody::LoggedPages { entries } => 8 + LOGGED_PAGE_BYTES * entries.len(),
            RecordBody::PagesHome { pages } => 8 + 4 * pages.len(),
            RecordBody::Family { body, .. } => body.len(),
            RecordBody::Commit
            | RecordBody::Abort
            | RecordBody::End
            | RecordBody::Skip
            | RecordBody::FlushMark => 0,
        }
    }

    fn write_body(&self, body_bytes: &mut [u8]) -> u16 {
        match self {
            RecordBody::Update {
                page,
                offset,
                before,
                after,
            } => return update_ref(*page, *offset, before, after).write_body(body_bytes),
            RecordBody::Family { kind, flags, body } => {
                return FamilyRef {
                    kind: *kind,
                    flags: *flags,
                    body,
                }
                .write_body(body_bytes)
            }
            RecordBody::Compensation {
                page,
                offset,
                after,
                undo_next,
            } => {
                put_u32(body_bytes, 0, page.0);
                put_u32(body_bytes, 4, *offset);
                put_u32(body_bytes, 8, after.len() as u32);
                body_bytes[16..24].copy_from_slice(&undo_next.0.to_le_bytes());
                body_bytes[24..24 + after.len()].copy_from_slice(after);
            }
            RecordBody::PageImage { page, image } => {
                let stored = stored_image_len(image);
                put_u32(body_bytes, 0, page.0);
                put_u32(body_bytes, 4, stored as u32);
                body_bytes[8..8 + stored].copy_from_slice(&image[..stored]);
            }
            RecordBody::CheckpointBegin { active } => {
                put_u32(body_bytes, 0, active.len() as u32);
                for (i, a) in active.iter().enumerate() {
                    let at = 8 + 24 * i;
                    body_bytes[at..at + 8].copy_from_slice(&a.txn.0.to_le_bytes());
                    body_bytes[at + 8..at + 16].copy_from_slice(&a.first_lsn.0.to_le_bytes());
                    body_bytes[at + 16..at + 24].copy_from_slice(&a.last_lsn.0.to_le_bytes());
                }
            }
            RecordBody::CheckpointEnd { begin } => {
                body_bytes[0..8].copy_from_slice(&begin.0.to_le_bytes());
            }
            RecordBody::LoggedPages { entries } => {
                put_u32(body_bytes, 0, entries.len() as u32);
                for (i, e) in entries.iter().enumerate() {
                    let at = 8 + LOGGED_PAGE_BYTES * i;
                    put_u32(body_bytes, at, e.page.0);
                    let flags = if e.committed {
                        LOGGED_PAGE_COMMITTED
                    } else {
                        0
                    };
                    put_u32(body_bytes, at + 4, flags);
                    body_bytes[at + 8..at + 16].copy_from_slice(&e.lsn.0.to_le_bytes());
                    body_bytes[at + 16..at + 24].copy_from_slice(&e.txn.0.to_le_bytes());
                }
            }
            RecordBody::PagesHome { pages } => {
                put_u32(body_bytes, 0, pages.len() as u32);
                for (i, page) in pages.iter().enumerate() {
                    put_u32(body_bytes, 8 + 4 * i, page.0);
                }
            }
            RecordBody::Commit
            | RecordBody::Abort
            | RecordBody::End
            | RecordBody::Skip
            | RecordBody::FlushMark => {}
        }
        0
    }
}

/// An owned update's fields as an [`UpdateRef`]: one encoding for both.
fn update_ref<'a>(
    page: PageId,
    offset: u32,
    before: &'a Option<Vec<u8>>,
    after: &'a [u8],
) -> UpdateRef<'a> {
    UpdateRef {
        page,
        offset,
        before: before.as_deref(),
        after,
    }
}

/// Bytes a record with `body` takes in the log.
pub fn encoded_len(body: &(impl Body + ?Sized)) -> usize {
    (RECORD_HEADER_BYTES + body.body_len()).div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Appends the encoding of a record at `lsn` to `out`.
pub fn encode(
    lsn: Lsn,
    prev: Lsn,
    txn: Option<TxnId>,
    body: &(impl Body + ?Sized),
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let len = encoded_len(body);
    out.resize(start + len, 0);
    let rec = &mut out[start..];
    rec[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    rec[LSN_AT..LSN_AT + 8].copy_from_slice(&lsn.0.to_le_bytes());
    rec[16..24].copy_from_slice(&prev.0.to_le_bytes());
    rec[24..32].copy_from_slice(&txn.map_or(0, |t| t.0).to_le_bytes());
    let kind = body.kind();
    rec[32] = kind;
    rec[33] = RECORD_FORMAT_VERSION;
    if !kinds::ENGINE.contains(kind) {
        // A family's body is opaque to the log: its exact length travels with it.
        rec[36..40].copy_from_slice(&(body.body_len() as u32).to_le_bytes());
    }
    let flags = body.write_body(&mut rec[RECORD_HEADER_BYTES..]);
    rec[34..36].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32c(&rec[4..]);
    rec[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Bytes of `value` as a varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends `value` as a varint (unsigned LEB128, minimal): the compact formats' integers.
pub fn push_varint(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(unsigned_varint::encode::u64(
        value,
        &mut unsigned_varint::encode::u64_buffer(),
    ));
}

/// A compact record's distance back to the transaction's previous record (0: none).
fn back_distance(lsn: Lsn, prev: Lsn) -> u64 {
    if prev.0 == 0 {
        return 0;
    }
    assert!(prev.0 < lsn.0, "previous record {prev} is not before {lsn}");
    lsn.0 - prev.0
}

/// Bytes a compact record takes at `lsn`.
fn compact_len(lsn: Lsn, prev: Lsn, txn: Option<TxnId>, body: &(impl Body + ?Sized)) -> usize {
    let rest = 1
        + 2
        + varint_len(txn.map_or(0, |t| t.0))
        + varint_len(back_distance(lsn, prev))
        + body.body_len();
    // The length counts its own varint.
    let mut n = 1;
    while varint_len((5 + n + rest) as u64) != n {
        n += 1;
    }
    5 + n + rest
}

/// Appends the compact encoding of a record at `lsn` to `out`.
fn encode_compact(
    lsn: Lsn,
    prev: Lsn,
    txn: Option<TxnId>,
    body: &(impl Body + ?Sized),
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let len = compact_len(lsn, prev, txn, body);
    out.reserve(len);
    out.extend_from_slice(&[0; 4]);
    out.push(COMPACT_FORMAT_VERSION);
    push_varint(out, len as u64);
    out.push(body.kind());
    let flags_at = out.len();
    out.extend_from_slice(&[0; 2]);
    push_varint(out, txn.map_or(0, |t| t.0));
    push_varint(out, back_distance(lsn, prev));
    let body_at = out.len();
    debug_assert_eq!(body_at - start + body.body_len(), len);
    out.resize(start + len, 0);
    let flags = body.write_body(&mut out[body_at..]);
    out[flags_at..flags_at + 2].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32c_two(&lsn.0.to_le_bytes(), &out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Is the byte where an aligned record keeps its length's low byte that of a compact record?
fn is_compact(bytes: &[u8]) -> bool {
    bytes.get(4).is_some_and(|&b| b & 7 != 0)
}

/// A varint at the start of `bytes`: one or two bytes read inline, longer ones by the crate,
/// which also refuses those not minimal.
#[inline]
pub fn read_varint(bytes: &[u8]) -> Result<(u64, &[u8]), unsigned_varint::decode::Error> {
    match *bytes {
        [b, ..] if b < 0x80 => Ok((u64::from(b), &bytes[1..])),
        // Two bytes, the second not zero (that would not be minimal).
        [b0, b1, ..] if b1 < 0x80 && b1 != 0 => {
            Ok((u64::from(b0 & 0x7f) | u64::from(b1) << 7, &bytes[2..]))
        }
        _ => unsigned_varint::decode::u64(bytes),
    }
}

/// A compact record's length, and where its fields after the length begin.
fn compact_header(bytes: &[u8], lsn: Lsn, room: usize) -> Result<(Header, usize), Invalid> {
    let after_version = bytes.get(5..).unwrap_or_default();
    let (len, rest) = read_varint(after_version)
        .map_err(|e| Invalid::Damaged(format!("compact record length: {e}")))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len < COMPACT_RECORD_MIN || len > room {
        return Err(Invalid::Damaged(format!("implausible record length {len}")));
    }
    Ok((Header { len, lsn }, bytes.len() - rest.len()))
}

fn decode_compact(bytes: &[u8], lsn: Lsn, page_size_max: usize) -> Result<Record, Invalid> {
    let (header, fields) = compact_header(bytes, lsn, bytes.len())?;
    if header.len != bytes.len() {
        return Err(Invalid::Damaged("record length mismatch".into()));
    }
    let stored = get_u32(bytes, 0);
    let computed = crc32c_two(&lsn.0.to_le_bytes(), &bytes[4..]);
    if stored != computed {
        return Err(Invalid::Damaged(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x} (or not the \
             record of LSN {lsn})"
        )));
    }
    let version = bytes[4];
    if version > COMPACT_FORMAT_VERSION {
        return Err(Invalid::NewerVersion(version));
    }
    if version != COMPACT_FORMAT_VERSION {
        return Err(Invalid::Damaged(format!("bad version {version}")));
    }
    let short = || Invalid::Damaged("compact record header is cut short".into());
    let kind = *bytes.get(fields).ok_or_else(short)?;
    let flags_bytes = bytes.get(fields + 1..fields + 3).ok_or_else(short)?;
    let flags = u16::from_le_bytes([flags_bytes[0], flags_bytes[1]]);
    let bad = |what: &str, e: unsigned_varint::decode::Error| {
        Invalid::Damaged(format!("compact record {what}: {e}"))
    };
    let (txn, rest) = read_varint(&bytes[fields + 3..]).map_err(|e| bad("transaction id", e))?;
    let (back, body_bytes) = read_varint(rest).map_err(|e| bad("previous record", e))?;
    if back > lsn.0 {
        return Err(Invalid::Damaged(format!(
            "previous record {back} bytes back from LSN {lsn}"
        )));
    }
    let body = decode_body(kind, flags, body_bytes, page_size_max).map_err(Invalid::Damaged)?;
    Ok(Record {
        lsn,
        prev: Lsn(if back == 0 { 0 } else { lsn.0 - back }),
        txn: (txn != 0).then_some(TxnId(txn)),
        body,
    })
}

fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// What the header of a candidate record says, before the body is trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub len: usize,
    pub lsn: Lsn,
}

/// Why bytes at a position are not a valid record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// A record of a format version this build does not read.
    NewerVersion(u8),
    /// Anything else: torn, never written, stale, or damaged.
    Damaged(String),
}

/// Reads the header of a record expected at `lsn`, checking what can be checked without the
/// body: a plausible length and, in an aligned record, the LSN field (a compact record's
/// checksum covers its LSN instead).
pub fn header(bytes: &[u8], lsn: Lsn, room: usize) -> Result<Header, Invalid> {
    if is_compact(bytes) {
        return compact_header(bytes, lsn, room).map(|(header, _)| header);
    }
    if bytes.len() < RECORD_HEADER_BYTES {
        return Err(Invalid::Damaged("shorter than a record header".into()));
    }
    let stored_lsn = Lsn(get_u64(bytes, 8));
    if stored_lsn != lsn {
        return Err(Invalid::Damaged(format!(
            "record claims LSN {stored_lsn}, found at {lsn}"
        )));
    }
    let len = get_u32(bytes, 4) as usize;
    if len < RECORD_HEADER_BYTES || !len.is_multiple_of(RECORD_ALIGN) || len > room {
        return Err(Invalid::Damaged(format!("implausible record length {len}")));
    }
    Ok(Header { len, lsn })
}

/// Decodes a whole record (`bytes` exactly its length) found at `lsn`.
pub fn decode(bytes: &[u8], lsn: Lsn, page_size_max: usize) -> Result<Record, Invalid> {
    if is_compact(bytes) {
        return decode_compact(bytes, lsn, page_size_max);
    }
    let header = header(bytes, lsn, bytes.len())?;
    if header.len != bytes.len() {
        return Err(Invalid::Damaged("record length mismatch".into()));
    }
    let stored = get_u32(bytes, 0);
    let computed = crc32c(&bytes[4..]);
    if stored != computed {
        return Err(Invalid::Damaged(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    let version = bytes[33];
    if version > RECORD_FORMAT_VERSION {
        return Err(Invalid::NewerVersion(version));
    }
    let kind = bytes[32];
    let family = !kinds::ENGINE.contains(kind);
    let reserved = get_u32(bytes, 36) as usize;
    if version != RECORD_FORMAT_VERSION || (!family && reserved != 0) {
        return Err(Invalid::Damaged(format!(
            "bad version {version} or reserved bytes"
        )));
    }
    let mut body_bytes = &bytes[RECORD_HEADER_BYTES..];
    if family {
        // The family's exact body length, then zero padding to the alignment.
        let padding = body_bytes.len().checked_sub(reserved);
        if padding.is_none_or(|p| p >= RECORD_ALIGN)
            || body_bytes[reserved.min(body_bytes.len())..]
                .iter()
                .any(|&b| b != 0)
        {
            return Err(Invalid::Damaged(format!(
                "a record of kind {kind} claims a body of {reserved} bytes in {}",
                body_bytes.len()
            )));
        }
        body_bytes = &body_bytes[..reserved];
    }
    let flags = u16::from_le_bytes([bytes[34], bytes[35]]);
    let txn = match get_u64(bytes, 24) {
        0 => None,
        id => Some(TxnId(id)),
    };
    let body = decode_body(kind, flags, body_bytes, page_size_max).map_err(Invalid::Damaged)?;
    Ok(Record {
        lsn,
        prev: Lsn(get_u64(bytes, 16)),
        txn,
        body,
    })
}

fn decode_body(
    kind: u8,
    flags: u16,
    body: &[u8],
    page_size_max: usize,
) -> Result<RecordBody, String> {
    let need = |n: usize| -> Result<(), String> {
        if body.len() < n {
            Err(format!("record body of {} bytes is too short", body.len()))
        } else {
            Ok(())
        }
    };
    Ok(match kind {
        KIND_UPDATE => {
            need(16)?;
            let len = get_u32(body, 8) as usize;
            let zero = flags & FLAG_BEFORE_ZERO != 0;
            let total = 16 + len * if zero { 1 } else { 2 };
            need(total)?;
            let offset = get_u32(body, 4);
            if offset as usize + len > page_size_max {
                return Err(format!("update of {len} bytes at {offset} exceeds a page"));
            }
            let (before, after_at) = if zero {
                (None, 16)
            } else {
                (Some(body[16..16 + len].to_vec()), 16 + len)
            };
            RecordBody::Update {
                page: PageId(get_u32(body, 0)),
                offset,
                before,
                after: body[after_at..after_at + len].to_vec(),
            }
        }
        kinds::COMPENSATION => {
            need(24)?;
            let len = get_u32(body, 8) as usize;
            need(24 + len)?;
            let offset = get_u32(body, 4);
            if offset as usize + len > page_size_max {
                return Err(format!(
                    "compensation of {len} bytes at {offset} exceeds a page"
                ));
            }
            RecordBody::Compensation {
                page: PageId(get_u32(body, 0)),
                offset,
                undo_next: Lsn(get_u64(body, 16)),
                after: body[24..24 + len].to_vec(),
            }
        }
        kinds::PAGE_IMAGE => {
            need(8)?;
            let stored = get_u32(body, 4) as usize;
            need(8 + stored)?;
            if stored > page_size_max {
                return Err(format!("page image of {stored} bytes exceeds a page"));
            }
            RecordBody::PageImage {
                page: PageId(get_u32(body, 0)),
                image: body[8..8 + stored].to_vec(),
            }
        }
        kinds::COMMIT => RecordBody::Commit,
        kinds::ABORT => RecordBody::Abort,
        kinds::END => RecordBody::End,
        kinds::CHECKPOINT_BEGIN => {
            need(8)?;
            let count = get_u32(body, 0) as usize;
            need(8 + 24 * count)?;
            let active = (0..count)
                .map(|i| {
                    let at = 8 + 24 * i;
                    ActiveTxn {
                        txn: TxnId(get_u64(body, at)),
                        first_lsn: Lsn(get_u64(body, at + 8)),
                        last_lsn: Lsn(get_u64(body, at + 16)),
                    }
                })
                .collect();
            RecordBody::CheckpointBegin { active }
        }
        kinds::CHECKPOINT_END => {
            need(8)?;
            RecordBody::CheckpointEnd {
                begin: Lsn(get_u64(body, 0)),
            }
        }
        kinds::SKIP => RecordBody::Skip,
        kinds::FLUSH_MARK => RecordBody::FlushMark,
        kinds::LOGGED_PAGES => {
            need(8)?;
            let count = get_u32(body, 0) as usize;
            need(8 + LOGGED_PAGE_BYTES * count)?;
            let mut entries = Vec::with_capacity(count);
            for i in 0..count {
                let at = 8 + LOGGED_PAGE_BYTES * i;
                let flags = get_u32(body, at + 4);
                if flags & !LOGGED_PAGE_COMMITTED != 0 {
                    return Err(format!(
                        "logged page entry {i} has unknown flags {flags:#x}"
                    ));
                }
                entries.push(LoggedPage {
                    page: PageId(get_u32(body, at)),
                    committed: flags & LOGGED_PAGE_COMMITTED != 0,
                    lsn: Lsn(get_u64(body, at + 8)),
                    txn: TxnId(get_u64(body, at + 16)),
                });
            }
            RecordBody::LoggedPages { entries }
        }
        kinds::PAGES_HOME => {
            need(8)?;
            let count = get_u32(body, 0) as usize;
            need(8 + 4 * count)?;
            RecordBody::PagesHome {
                pages: (0..count)
                    .map(|i| PageId(get_u32(body, 8 + 4 * i)))
                    .collect(),
            }
        }
        other => match kinds::range_of(other) {
            Some(range) if range != kinds::ENGINE => RecordBody::Family {
                kind: other,
                flags,
                body: body.to_vec(),
            },
            _ => return Err(format!("unknown record kind {other}")),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn stored_image_len_is_the_last_non_zero_byte(
            len in 0usize..300,
            marks in proptest::collection::vec((0usize..300, 1u8..), 0..4),
        ) {
            let mut image = vec![0u8; len];
            for (at, byte) in marks {
                if at < len {
                    image[at] = byte;
                }
            }
            let expected = image.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            prop_assert_eq!(stored_image_len(&image), expected);
        }
    }

    fn round_trip(body: RecordBody) {
        for format in [RecordFormat::Aligned, RecordFormat::Compact] {
            let mut out = Vec::new();
            format.encode(Lsn(4096), Lsn(77), Some(TxnId(5)), &body, &mut out);
            assert_eq!(
                out.len(),
                format.encoded_len(Lsn(4096), Lsn(77), Some(TxnId(5)), &body)
            );
            assert!(out.len() <= format.encoded_len_max(&body));
            assert_eq!(header(&out, Lsn(4096), out.len()).unwrap().len, out.len());
            let record = decode(&out, Lsn(4096), 65536).unwrap();
            let expected = match body.clone() {
                RecordBody::PageImage { page, image } => RecordBody::PageImage {
                    page,
                    image: image[..stored_image_len(&image)].to_vec(),
                },
                other => other,
            };
            assert_eq!(record.body, expected, "{format:?}");
            assert_eq!((record.prev, record.txn), (Lsn(77), Some(TxnId(5))));
            // The same bytes are not a record anywhere else.
            assert!(decode(&out, Lsn(4104), 65536).is_err());
            assert!(decode(&out, Lsn(4097), 65536).is_err());
        }
    }

    #[test]
    fn a_compact_record_is_short() {
        let mut out = Vec::new();
        encode_compact(Lsn(1 << 20), Lsn(0), None, &RecordBody::FlushMark, &mut out);
        assert_eq!(out.len(), COMPACT_RECORD_MIN);
        out.clear();
        // A commit of transaction 300,000 whose previous record is 700 bytes back.
        encode_compact(
            Lsn(1 << 30),
            Lsn((1 << 30) - 700),
            Some(TxnId(300_000)),
            &RecordBody::Commit,
            &mut out,
        );
        assert_eq!(out.len(), COMPACT_RECORD_MIN + 2 + 1);
        let record = decode(&out, Lsn(1 << 30), 8192).unwrap();
        assert_eq!(record.prev, Lsn((1 << 30) - 700));
        assert_eq!(record.txn, Some(TxnId(300_000)));
    }

    #[test]
    fn the_inline_varint_reads_what_the_crate_writes_and_refuses_what_it_refuses() {
        for value in (0..70_000u64).chain([u64::from(u32::MAX), u64::MAX]) {
            let mut bytes = Vec::new();
            push_varint(&mut bytes, value);
            assert_eq!(read_varint(&bytes).unwrap(), (value, &[][..]));
        }
        assert!(read_varint(&[0x80, 0x00]).is_err(), "not minimal");
        assert!(read_varint(&[0x80]).is_err(), "cut short");
        assert!(read_varint(&[]).is_err());
    }

    #[test]
    fn a_newer_compact_version_is_named() {
        let mut out = Vec::new();
        encode_compact(Lsn(64), Lsn(0), None, &RecordBody::Commit, &mut out);
        out[4] = COMPACT_FORMAT_VERSION + 1;
        let crc = crc32c_two(&64u64.to_le_bytes(), &out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&out, Lsn(64), 4096),
            Err(Invalid::NewerVersion(COMPACT_FORMAT_VERSION + 1))
        );
    }

    #[test]
    fn every_kind_round_trips() {
        for len in [0, 1, 7, 8, 9, 100] {
            round_trip(RecordBody::Family {
                kind: kinds::EXTENSIONS.first + 1,
                flags: 0x8001,
                body: (0..len).map(|i| i as u8 + 1).collect(),
            });
        }
        round_trip(RecordBody::Family {
            kind: kinds::SNAPSHOTS.first,
            flags: 0,
            body: vec![0; 12],
        });
        round_trip(RecordBody::Update {
            page: PageId(9),
            offset: 100,
            before: Some(vec![1, 2, 3]),
            after: vec![4, 5, 6],
        });
        round_trip(RecordBody::Update {
            page: PageId(9),
            offset: 0,
            before: None,
            after: vec![7; 33],
        });
        round_trip(RecordBody::Compensation {
            page: PageId(3),
            offset: 8,
            after: vec![1; 5],
            undo_next: Lsn(12),
        });
        let mut image = vec![0u8; 4096];
        image[100] = 1;
        round_trip(RecordBody::PageImage {
            page: PageId(4),
            image,
        });
        for body in [
            RecordBody::Commit,
            RecordBody::Abort,
            RecordBody::End,
            RecordBody::Skip,
            RecordBody::FlushMark,
        ] {
            round_trip(body);
        }
        round_trip(RecordBody::CheckpointBegin {
            active: vec![ActiveTxn {
                txn: TxnId(3),
                first_lsn: Lsn(10),
                last_lsn: Lsn(20),
            }],
        });
        round_trip(RecordBody::CheckpointEnd { begin: Lsn(8) });
        round_trip(RecordBody::LoggedPages { entries: vec![] });
        round_trip(RecordBody::PagesHome { pages: vec![] });
        round_trip(RecordBody::PagesHome {
            pages: vec![PageId(7), PageId(8), PageId(u32::MAX)],
        });
        round_trip(RecordBody::LoggedPages {
            entries: vec![
                LoggedPage {
                    page: PageId(9),
                    lsn: Lsn(4096),
                    txn: TxnId(4),
                    committed: true,
                },
                LoggedPage {
                    page: PageId(9),
                    lsn: Lsn(8192),
                    txn: TxnId(6),
                    committed: false,
                },
            ],
        });
    }

    #[test]
    fn newer_version_is_named() {
        let mut out = Vec::new();
        encode(Lsn(8), Lsn(0), None, &RecordBody::Commit, &mut out);
        out[33] = RECORD_FORMAT_VERSION + 1;
        let crc = crc32c(&out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&out, Lsn(8), 4096),
            Err(Invalid::NewerVersion(RECORD_FORMAT_VERSION + 1))
        );
    }

    proptest! {
        #[test]
        fn any_flip_is_caught(at in 0usize..64, bit in 0u8..8) {
            let mut out = Vec::new();
            let body = RecordBody::Update { page: PageId(1), offset: 2, before: Some(vec![3; 8]), after: vec![4; 8] };
            encode(Lsn(64), Lsn(0), Some(TxnId(1)), &body, &mut out);
            let at = at % out.len();
            out[at] ^= 1 << bit;
            prop_assert!(decode(&out, Lsn(64), 4096).is_err());
        }

        #[test]
        fn any_flip_of_a_compact_record_is_caught(at in 0usize..64, bit in 0u8..8) {
            let mut out = Vec::new();
            let body = RecordBody::Update { page: PageId(1), offset: 2, before: Some(vec![3; 8]), after: vec![4; 8] };
            encode_compact(Lsn(64), Lsn(8), Some(TxnId(1)), &body, &mut out);
            let at = at % out.len();
            out[at] ^= 1 << bit;
            prop_assert!(decode(&out, Lsn(64), 4096).is_err());
        }

        /// The length a compact record is given beforehand is the length it takes, across the
        /// varints' boundaries.
        #[test]
        fn a_compact_length_is_exact(
            body_len in prop_oneof![0usize..200, 100usize..140, 16_300usize..16_400],
            txn in prop_oneof![Just(0u64), 1u64..200, any::<u64>()],
            back in prop_oneof![Just(0u64), 1u64..300, 1u64..(1 << 40)],
        ) {
            let lsn = Lsn(1 << 41);
            let prev = Lsn(if back == 0 { 0 } else { lsn.0 - back });
            let txn = (txn != 0).then_some(TxnId(txn));
            let body = RecordBody::Family { kind: kinds::EXTENSIONS.first, flags: 0x8001, body: vec![7; body_len] };
            let mut out = Vec::new();
            encode_compact(lsn, prev, txn, &body, &mut out);
            prop_assert_eq!(out.len(), compact_len(lsn, prev, txn, &body));
            let record = decode(&out, lsn, 65536).unwrap();
            prop_assert_eq!((record.prev, record.txn, record.body), (prev, txn, body));
        }

        #[test]
        fn a_borrowed_update_encodes_as_its_owned_body(
            bytes in proptest::collection::vec(any::<(u8, u8)>(), 0..80),
            zero_before in any::<bool>(),
            offset in 0u32..8192,
        ) {
            let before: Vec<u8> = bytes.iter().map(|&(b, _)| b).collect();
            let after: Vec<u8> = bytes.iter().map(|&(_, a)| a).collect();
            let before = (!zero_before).then_some(before);
            let owned = RecordBody::Update { page: PageId(3), offset, before: before.clone(), after: after.clone() };
            let borrowed = UpdateRef { page: PageId(3), offset, before: before.as_deref(), after: &after };
            let (mut from_owned, mut from_borrowed) = (Vec::new(), Vec::new());
            encode(Lsn(128), Lsn(64), Some(TxnId(2)), &owned, &mut from_owned);
            encode(Lsn(128), Lsn(64), Some(TxnId(2)), &borrowed, &mut from_borrowed);
            prop_assert_eq!(&from_borrowed, &from_owned);
            prop_assert_eq!(decode(&from_borrowed, Lsn(128), 65536).unwrap().body, owned);
        }
    }
}
