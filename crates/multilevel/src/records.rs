//! The family's log records, framed by the log (`lodestore_wal`: header with checksum, format
//! version and LSN). All integers are little-endian.
//!
//! Level 1 (L1), the high-level undo log (Hasse & Weikum section 2, Figure 2). An L1 record
//! has no transaction in its header: the engine's restarts know transactions by their header
//! and would end a level-1 transaction as a loser with nothing to undo, while only this family
//! knows how to undo it. Its transaction is in its body instead, with the LSN of the same
//! transaction's previous L1 record, so a warm start can read a transaction's records back
//! from before the last checkpoint.
//!
//! ```text
//! every L1 record but ACTIVE_TRANSACTIONS begins
//!   0  8 the transaction (level 1)
//!   8  8 LSN of its previous L1 record (0: none)
//! OPERATION_UNDO (64)        what undoes one completed high-level operation
//!  16  8 subtransaction: the engine transaction that ran the operation at level 0
//!  24  4 operation id of the inverse (registered before the store opens; 0 is never used)
//!  28  4 length n of the inverse's arguments
//!  32  n the arguments, as the operation encodes them
//! COMPENSATED (65)           a compensating subtransaction undid one subtransaction
//!  16  8 the compensating subtransaction
//!  24  8 the subtransaction it undid
//!  32  8 LSN of the undone subtransaction's OPERATION_UNDO record
//! TRANSACTION_END (67)       the transaction ended
//!  16  1 1: committed; 0: aborted, every compensation done
//!  17  7 zero
//! ACTIVE_TRANSACTIONS (68)   at a checkpoint: transactions with L1 records and no end
//!   0  4 count c            4  4 zero
//!   8  c x (8 transaction, 8 LSN of its first L1 record, 8 LSN of its last)
//! ```
//!
//! Level 0 (L0), the page after-image log of the database-cache method (section 2, "Ensuring
//! Subtransaction Atomicity"): whole pages, written atomically per subtransaction (S2) or per
//! persistence sphere (S2/PS). One write may take several records, consecutive in the log;
//! the last one carries the EOS flag and names the subtransactions the write makes durable.
//! Images read before an EOS-flagged record that never comes belong to an incomplete write
//! and are ignored at warm start.
//!
//! ```text
//! AFTER_IMAGES (66)    flags: bit 0 EOS (last record of a write), bit 1 EOT (the write also
//!                      ends a transaction: the paper's EOT flag, so that the L1 end record
//!                      need not be forced)
//!   0  4 page count p
//!   4  4 subtransaction count s (0 unless EOS)
//!   8  8 the transaction the write ends (EOT), else 0
//!  16  s × 8 subtransaction ids
//!      p × (4 page, 4 stored length k, k bytes: the page up to its last non-zero byte)
//! ```

use crate::kinds::{
    ACTIVE_TRANSACTIONS, AFTER_IMAGES, COMPENSATED, OPERATION_UNDO, TRANSACTION_END,
};
use lodestore_core::{Lsn, PageId, TxnId};
use lodestore_wal::record::Body;
use rustc_hash::FxHashSet;

/// Header flag of an L0 record: the last record of an atomic write.
pub const FLAG_EOS: u16 = 1;
/// Header flag of an L0 record: the write ends the transaction its body names.
pub const FLAG_EOT: u16 = 2;

/// Which high-level operation undoes another: a number the application registers, stable
/// across runs, because the warm start runs it with no application present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(pub u32);

/// Where an L1 record belongs: its level-1 transaction and that transaction's previous L1
/// record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    pub txn: TxnId,
    /// `Lsn::ZERO`: the transaction's first L1 record.
    pub prev: Lsn,
}

const CHAIN_BYTES: usize = 16;

impl Chain {
    fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.txn.0.to_le_bytes());
        out[8..16].copy_from_slice(&self.prev.0.to_le_bytes());
    }

    fn read(body: &[u8], what: &str) -> Result<Chain, String> {
        if body.len() < CHAIN_BYTES {
            return Err(format!(
                "{what} record of {} bytes, shorter than its {CHAIN_BYTES}-byte prefix",
                body.len()
            ));
        }
        let chain = Chain {
            txn: TxnId(u64_at(body, 0)),
            prev: Lsn(u64_at(body, 8)),
        };
        if chain.txn.0 == 0 {
            return Err(format!("{what} record names transaction 0"));
        }
        Ok(chain)
    }
}

/// An L1 undo record: the inverse of the operation `sub` ran, with its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UndoRecord<'a> {
    pub chain: Chain,
    pub sub: TxnId,
    pub inverse: OperationId,
    pub args: &'a [u8],
}

const UNDO_FIXED_BYTES: usize = 32;

impl Body for UndoRecord<'_> {
    fn kind(&self) -> u8 {
        OPERATION_UNDO
    }

    fn body_len(&self) -> usize {
        UNDO_FIXED_BYTES + self.args.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        assert!(self.inverse.0 != 0, "operation id 0 is never used");
        assert!(self.args.len() <= u32::MAX as usize);
        self.chain.write(out);
        out[16..24].copy_from_slice(&self.sub.0.to_le_bytes());
        out[24..28].copy_from_slice(&self.inverse.0.to_le_bytes());
        out[28..32].copy_from_slice(&(self.args.len() as u32).to_le_bytes());
        out[32..32 + self.args.len()].copy_from_slice(self.args);
        0
    }
}

/// Reads an L1 undo record's body.
pub fn decode_undo(body: &[u8]) -> Result<UndoRecord<'_>, String> {
    let chain = Chain::read(body, "undo")?;
    if body.len() < UNDO_FIXED_BYTES {
        return Err(format!(
            "undo record of {} bytes, shorter than its {UNDO_FIXED_BYTES} fixed bytes",
            body.len()
        ));
    }
    let sub = TxnId(u64_at(body, 16));
    let inverse = OperationId(u32_at(body, 24));
    let len = u32_at(body, 28) as usize;
    if sub.0 == 0 || sub == chain.txn {
        return Err(format!(
            "undo record of transaction {} names subtransaction {sub}",
            chain.txn
        ));
    }
    if inverse.0 == 0 {
        return Err("undo record names operation id 0".into());
    }
    if body.len() != UNDO_FIXED_BYTES + len {
        return Err(format!(
            "undo record claims {len} argument bytes but holds {}",
            body.len() - UNDO_FIXED_BYTES
        ));
    }
    Ok(UndoRecord {
        chain,
        sub,
        inverse,
        args: &body[UNDO_FIXED_BYTES..],
    })
}

/// An L1 record that a compensating subtransaction `by` undid subtransaction `undone`, whose
/// undo record is at `undo_lsn`. It counts only once `by`'s own pages are durable at L0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compensated {
    pub chain: Chain,
    pub by: TxnId,
    pub undone: TxnId,
    pub undo_lsn: Lsn,
}

const COMPENSATED_BYTES: usize = 40;

impl Body for Compensated {
    fn kind(&self) -> u8 {
        COMPENSATED
    }

    fn body_len(&self) -> usize {
        COMPENSATED_BYTES
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        self.chain.write(out);
        out[16..24].copy_from_slice(&self.by.0.to_le_bytes());
        out[24..32].copy_from_slice(&self.undone.0.to_le_bytes());
        out[32..40].copy_from_slice(&self.undo_lsn.0.to_le_bytes());
        0
    }
}

/// Reads a compensation record's body.
pub fn decode_compensated(body: &[u8]) -> Result<Compensated, String> {
    let chain = Chain::read(body, "compensation")?;
    if body.len() != COMPENSATED_BYTES {
        return Err(format!(
            "compensation record of {} bytes, not {COMPENSATED_BYTES}",
            body.len()
        ));
    }
    let record = Compensated {
        chain,
        by: TxnId(u64_at(body, 16)),
        undone: TxnId(u64_at(body, 24)),
        undo_lsn: Lsn(u64_at(body, 32)),
    };
    if record.by.0 == 0 || record.undone.0 == 0 || record.by == record.undone {
        return Err(format!(
            "compensation record names subtransactions {} and {}",
            record.by, record.undone
        ));
    }
    Ok(record)
}

/// An L1 record that a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransactionEnd {
    pub chain: Chain,
    /// Committed; otherwise aborted with every compensation done.
    pub committed: bool,
}

const END_BYTES: usize = 24;

impl Body for TransactionEnd {
    fn kind(&self) -> u8 {
        TRANSACTION_END
    }

    fn body_len(&self) -> usize {
        END_BYTES
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        self.chain.write(out);
        out[16] = u8::from(self.committed);
        0
    }
}

/// Reads a transaction end record's body.
pub fn decode_end(body: &[u8]) -> Result<TransactionEnd, String> {
    let chain = Chain::read(body, "transaction end")?;
    if body.len() != END_BYTES {
        return Err(format!(
            "transaction end record of {} bytes, not {END_BYTES}",
            body.len()
        ));
    }
    if body[16] > 1 || body[17..].iter().any(|&b| b != 0) {
        return Err(format!(
            "transaction end record of {} with outcome byte {} and padding {:?}",
            chain.txn,
            body[16],
            &body[17..]
        ));
    }
    Ok(TransactionEnd {
        chain,
        committed: body[16] == 1,
    })
}

/// A transaction with L1 records and no end when a checkpoint began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveEntry {
    pub txn: TxnId,
    pub first: Lsn,
    pub last: Lsn,
}

/// The L1 record a checkpoint writes: where the active transactions' L1 records are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActiveTransactions {
    pub entries: Vec<ActiveEntry>,
}

const ACTIVE_ENTRY_BYTES: usize = 24;

impl Body for ActiveTransactions {
    fn kind(&self) -> u8 {
        ACTIVE_TRANSACTIONS
    }

    fn body_len(&self) -> usize {
        8 + ACTIVE_ENTRY_BYTES * self.entries.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[0..4].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let at = 8 + ACTIVE_ENTRY_BYTES * i;
            out[at..at + 8].copy_from_slice(&e.txn.0.to_le_bytes());
            out[at + 8..at + 16].copy_from_slice(&e.first.0.to_le_bytes());
            out[at + 16..at + 24].copy_from_slice(&e.last.0.to_le_bytes());
        }
        0
    }
}

/// Reads a checkpoint's list of active transactions.
pub fn decode_active(body: &[u8]) -> Result<ActiveTransactions, String> {
    if body.len() < 8 {
        return Err(format!(
            "active-transactions record of {} bytes",
            body.len()
        ));
    }
    let count = u32_at(body, 0) as usize;
    if (body.len() - 8) / ACTIVE_ENTRY_BYTES != count
        || !(body.len() - 8).is_multiple_of(ACTIVE_ENTRY_BYTES)
    {
        return Err(format!(
            "active-transactions record claims {count} entries in {} bytes",
            body.len()
        ));
    }
    let entries = (0..count)
        .map(|i| {
            let at = 8 + ACTIVE_ENTRY_BYTES * i;
            ActiveEntry {
                txn: TxnId(u64_at(body, at)),
                first: Lsn(u64_at(body, at + 8)),
                last: Lsn(u64_at(body, at + 16)),
            }
        })
        .collect::<Vec<_>>();
    if let Some(bad) = entries
        .iter()
        .find(|e| e.txn.0 == 0 || e.first.0 == 0 || e.first > e.last)
    {
        return Err(format!(
            "active-transactions record names transaction {} with records {}..{}",
            bad.txn, bad.first, bad.last
        ));
    }
    Ok(ActiveTransactions { entries })
}

/// An L1 record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L1Record<'a> {
    Undo(UndoRecord<'a>),
    Compensated(Compensated),
    End(TransactionEnd),
    Active(ActiveTransactions),
}

impl L1Record<'_> {
    /// The transaction and previous record, for all but the checkpoint's list.
    pub fn chain(&self) -> Option<Chain> {
        match self {
            L1Record::Undo(r) => Some(r.chain),
            L1Record::Compensated(r) => Some(r.chain),
            L1Record::End(r) => Some(r.chain),
            L1Record::Active(_) => None,
        }
    }
}

/// Reads a family record of `kind` as an L1 record: `None` for a kind that is not one.
pub fn decode_l1(kind: u8, body: &[u8]) -> Option<Result<L1Record<'_>, String>> {
    Some(match kind {
        OPERATION_UNDO => decode_undo(body).map(L1Record::Undo),
        COMPENSATED => decode_compensated(body).map(L1Record::Compensated),
        TRANSACTION_END => decode_end(body).map(L1Record::End),
        ACTIVE_TRANSACTIONS => decode_active(body).map(L1Record::Active),
        _ => return None,
    })
}

/// One page of an L0 write, as read back: `stored` is the page up to its last non-zero byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageImage<'a> {
    pub page: PageId,
    pub stored: &'a [u8],
}

impl PageImage<'_> {
    /// Writes the whole page into `frame` (the stored bytes, then zeros).
    pub fn write_into(&self, frame: &mut [u8]) {
        assert!(self.stored.len() <= frame.len(), "image longer than a page");
        frame[..self.stored.len()].copy_from_slice(self.stored);
        frame[self.stored.len()..].fill(0);
    }
}

/// An L0 record as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterImages<'a> {
    /// The last record of its write.
    pub eos: bool,
    /// The transaction the write ends, if any (EOT flag).
    pub eot: Option<TxnId>,
    /// The subtransactions the write makes durable (EOS records only).
    pub subs: Vec<TxnId>,
    pub pages: Vec<PageImage<'a>>,
}

const AFTER_FIXED_BYTES: usize = 16;
const PAGE_ENTRY_BYTES: usize = 8;

/// Reads an L0 record: `flags` from its header, `page_size` the store's.
pub fn decode_after_images(
    flags: u16,
    body: &[u8],
    page_size: usize,
) -> Result<AfterImages<'_>, String> {
    if flags & !(FLAG_EOS | FLAG_EOT) != 0 {
        return Err(format!("after-image record with unknown flags {flags:#x}"));
    }
    let eos = flags & FLAG_EOS != 0;
    if flags & FLAG_EOT != 0 && !eos {
        return Err("after-image record flagged EOT but not EOS".into());
    }
    if body.len() < AFTER_FIXED_BYTES {
        return Err(format!(
            "after-image record of {} bytes, shorter than its {AFTER_FIXED_BYTES} fixed bytes",
            body.len()
        ));
    }
    let page_count = u32_at(body, 0) as usize;
    let sub_count = u32_at(body, 4) as usize;
    let ends = u64_at(body, 8);
    let eot = (flags & FLAG_EOT != 0).then_some(TxnId(ends));
    if (eot.is_some() && ends == 0) || (eot.is_none() && ends != 0) {
        return Err(format!(
            "after-image record names transaction {ends} with the EOT flag {}",
            if eot.is_some() { "set" } else { "clear" }
        ));
    }
    if !eos && sub_count != 0 {
        return Err(format!(
            "after-image record not flagged EOS names {sub_count} subtransactions"
        ));
    }
    let mut at = AFTER_FIXED_BYTES;
    let subs_end = sub_count
        .checked_mul(8)
        .and_then(|n| n.checked_add(at))
        .filter(|&end| end <= body.len())
        .ok_or_else(|| {
            format!("after-image record claims {sub_count} subtransactions past its body")
        })?;
    let subs: Vec<TxnId> = (at..subs_end)
        .step_by(8)
        .map(|i| TxnId(u64_at(body, i)))
        .collect();
    if subs.iter().any(|s| s.0 == 0) {
        return Err("after-image record names subtransaction 0".into());
    }
    at = subs_end;
    // Every page entry takes at least its 8 header bytes: a count the body cannot hold is
    // refused before anything is allocated for it.
    if page_count > (body.len() - at) / PAGE_ENTRY_BYTES {
        return Err(format!(
            "after-image record claims {page_count} pages in {} bytes",
            body.len() - at
        ));
    }
    let mut pages = Vec::with_capacity(page_count);
    let mut seen = FxHashSet::default();
    for i in 0..page_count {
        if body.len() - at < PAGE_ENTRY_BYTES {
            return Err(format!("page entry {i} at body byte {at} is cut short"));
        }
        let page = PageId(u32_at(body, at));
        let len = u32_at(body, at + 4) as usize;
        if len > page_size {
            return Err(format!(
                "page {page} at body byte {at} stores {len} bytes, more than a {page_size}-byte page"
            ));
        }
        let stored = body
            .get(at + PAGE_ENTRY_BYTES..at + PAGE_ENTRY_BYTES + len)
            .ok_or_else(|| {
                format!("page {page} at body byte {at} claims {len} bytes past the body")
            })?;
        if !seen.insert(page) {
            return Err(format!(
                "page {page} appears twice in one after-image record"
            ));
        }
        pages.push(PageImage { page, stored });
        at += PAGE_ENTRY_BYTES + len;
    }
    if at != body.len() {
        return Err(format!(
            "after-image record has {} bytes after its last page",
            body.len() - at
        ));
    }
    Ok(AfterImages {
        eos,
        eot,
        subs,
        pages,
    })
}

/// One atomic L0 write being put together: pages, then the subtransactions it makes durable
/// and the transaction it ends. [`AfterImageWrite::records`] cuts it into log records.
#[derive(Clone, Debug, Default)]
pub struct AfterImageWrite {
    pages: Vec<(PageId, Vec<u8>)>,
    subs: Vec<TxnId>,
    eot: Option<TxnId>,
}

impl AfterImageWrite {
    pub fn new() -> AfterImageWrite {
        AfterImageWrite::default()
    }

    /// Adds `page` as `image` (trailing zeros are not stored). Each page once per write.
    pub fn push_page(&mut self, page: PageId, image: &[u8]) {
        debug_assert!(
            self.pages.iter().all(|(p, _)| *p != page),
            "page {page} twice in one write"
        );
        let stored = image.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        self.pages.push((page, image[..stored].to_vec()));
    }

    /// The subtransactions the write makes durable.
    pub fn durable_subs(&mut self, subs: impl IntoIterator<Item = TxnId>) {
        self.subs.extend(subs);
    }

    /// The write also ends `txn` (the EOT flag).
    pub fn ends(&mut self, txn: TxnId) {
        assert!(txn.0 != 0);
        self.eot = Some(txn);
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// The write as log records of at most about `body_bytes_max` bytes each (a record holds
    /// at least one page); the last one is flagged EOS. A write of no pages is one record.
    pub fn records(&self, body_bytes_max: usize) -> Vec<AfterImagesRecord> {
        let mut records = Vec::new();
        let mut current: Vec<usize> = Vec::new();
        let mut bytes = 0;
        for (i, (_, stored)) in self.pages.iter().enumerate() {
            let entry = PAGE_ENTRY_BYTES + stored.len();
            if !current.is_empty() && AFTER_FIXED_BYTES + bytes + entry > body_bytes_max {
                records.push(self.record(&current, false));
                current.clear();
                bytes = 0;
            }
            current.push(i);
            bytes += entry;
        }
        records.push(self.record(&current, true));
        records
    }

    fn record(&self, pages: &[usize], last: bool) -> AfterImagesRecord {
        let subs: &[TxnId] = if last { &self.subs } else { &[] };
        let mut body = Vec::new();
        body.extend_from_slice(&(pages.len() as u32).to_le_bytes());
        body.extend_from_slice(&(subs.len() as u32).to_le_bytes());
        let eot = if last { self.eot } else { None };
        body.extend_from_slice(&eot.map_or(0, |t| t.0).to_le_bytes());
        for sub in subs {
            body.extend_from_slice(&sub.0.to_le_bytes());
        }
        for &i in pages {
            let (page, stored) = &self.pages[i];
            body.extend_from_slice(&page.0.to_le_bytes());
            body.extend_from_slice(&(stored.len() as u32).to_le_bytes());
            body.extend_from_slice(stored);
        }
        let mut flags = 0;
        if last {
            flags |= FLAG_EOS;
        }
        if eot.is_some() {
            flags |= FLAG_EOT;
        }
        AfterImagesRecord { flags, body }
    }
}

/// One L0 record of a write, ready to append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterImagesRecord {
    pub flags: u16,
    pub body: Vec<u8>,
}

impl Body for AfterImagesRecord {
    fn kind(&self) -> u8 {
        AFTER_IMAGES
    }

    fn body_len(&self) -> usize {
        self.body.len()
    }

    fn write_body(&self, out: &mut [u8]) -> u16 {
        out[..self.body.len()].copy_from_slice(&self.body);
        self.flags
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body_of(b: &impl Body) -> (Vec<u8>, u16) {
        let mut out = vec![0; b.body_len()];
        let flags = b.write_body(&mut out);
        (out, flags)
    }

    #[test]
    fn l1_records_read_back_and_refuse_damage() {
        let chain = Chain {
            txn: TxnId(2),
            prev: Lsn(64),
        };
        let undo = UndoRecord {
            chain,
            sub: TxnId(7),
            inverse: OperationId(3),
            args: b"minus five",
        };
        let (body, flags) = body_of(&undo);
        assert_eq!(flags, 0);
        assert_eq!(
            decode_l1(OPERATION_UNDO, &body).unwrap().unwrap(),
            L1Record::Undo(undo)
        );
        let err = decode_undo(&body[..body.len() - 1]).unwrap_err();
        assert!(
            err.contains("claims 10 argument bytes but holds 9"),
            "{err}"
        );
        assert!(decode_undo(&body[..31]).unwrap_err().contains("shorter"));
        assert!(decode_undo(&body[..8]).unwrap_err().contains("prefix"));
        let mut zero_op = body.clone();
        zero_op[24..28].fill(0);
        assert!(decode_undo(&zero_op)
            .unwrap_err()
            .contains("operation id 0"));
        let mut own = body.clone();
        own[16..24].copy_from_slice(&2u64.to_le_bytes());
        assert!(decode_undo(&own)
            .unwrap_err()
            .contains("names subtransaction 2"));

        let comp = Compensated {
            chain,
            by: TxnId(9),
            undone: TxnId(7),
            undo_lsn: Lsn(4096),
        };
        let (body, _) = body_of(&comp);
        assert_eq!(decode_compensated(&body).unwrap(), comp);
        assert!(decode_compensated(&body[..39]).is_err());
        let mut same = body.clone();
        same[24..32].copy_from_slice(&9u64.to_le_bytes());
        assert!(decode_compensated(&same).unwrap_err().contains("9 and 9"));

        let end = TransactionEnd {
            chain,
            committed: true,
        };
        let (mut body, _) = body_of(&end);
        assert_eq!(decode_end(&body).unwrap(), end);
        body[16] = 2;
        assert!(decode_end(&body).unwrap_err().contains("outcome byte 2"));

        let active = ActiveTransactions {
            entries: vec![ActiveEntry {
                txn: TxnId(2),
                first: Lsn(64),
                last: Lsn(640),
            }],
        };
        let (body, _) = body_of(&active);
        assert_eq!(decode_active(&body).unwrap(), active);
        assert!(decode_active(&body[..body.len() - 8]).is_err());
        let mut backwards = body.clone();
        backwards[16..24].copy_from_slice(&1000u64.to_le_bytes());
        assert!(decode_active(&backwards).unwrap_err().contains("1000..640"));
        assert!(decode_l1(AFTER_IMAGES, &body).is_none());
        let mut zero = body.clone();
        zero[0..8].fill(0);
        assert!(decode_end(&zero[..24])
            .unwrap_err()
            .contains("transaction 0"));
    }

    #[test]
    fn a_write_splits_into_records_and_only_the_last_ends_it() {
        let mut w = AfterImageWrite::new();
        for p in 1..=5u32 {
            let mut image = vec![0u8; 512];
            image[..100 * p as usize].fill(p as u8);
            w.push_page(PageId(p), &image);
        }
        w.durable_subs([TxnId(11), TxnId(12)]);
        w.ends(TxnId(10));
        let records = w.records(400);
        assert!(records.len() > 1);
        let mut pages = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let last = i + 1 == records.len();
            let read = decode_after_images(r.flags, &r.body, 512).unwrap();
            assert_eq!(read.eos, last);
            assert_eq!(read.eot, last.then_some(TxnId(10)));
            assert_eq!(read.subs.is_empty(), !last);
            pages.extend(read.pages.iter().map(|p| {
                let mut frame = vec![0xEE; 512];
                p.write_into(&mut frame);
                (p.page, frame)
            }));
        }
        assert_eq!(pages.len(), 5);
        for (page, frame) in pages {
            let n = 100 * page.0 as usize;
            assert!(frame[..n].iter().all(|&b| b == page.0 as u8));
            assert!(frame[n..].iter().all(|&b| b == 0));
        }
        // A write of no pages still ends its subtransactions.
        let mut empty = AfterImageWrite::new();
        empty.durable_subs([TxnId(4)]);
        let r = &empty.records(1 << 20)[0];
        let read = decode_after_images(r.flags, &r.body, 512).unwrap();
        assert_eq!(
            (read.eos, read.subs, read.pages.len()),
            (true, vec![TxnId(4)], 0)
        );
    }

    #[test]
    fn damaged_after_image_records_are_refused_by_name() {
        let mut w = AfterImageWrite::new();
        w.push_page(PageId(3), &[1, 2, 3, 0, 0]);
        w.durable_subs([TxnId(5)]);
        let r = &w.records(1 << 20)[0];
        let check = |flags: u16, body: &[u8], want: &str| {
            let err = decode_after_images(flags, body, 8).unwrap_err();
            assert!(err.contains(want), "{err} lacks {want}");
        };
        check(r.flags | 8, &r.body, "unknown flags");
        check(FLAG_EOT, &r.body, "EOT but not EOS");
        check(0, &r.body, "not flagged EOS names 1");
        check(r.flags, &r.body[..r.body.len() - 1], "past the body");
        let mut long = r.body.clone();
        long.push(0);
        check(r.flags, &long, "after its last page");
        assert!(decode_after_images(r.flags, &r.body, 8).is_ok());
        let err = decode_after_images(r.flags, &r.body, 2).unwrap_err();
        assert!(err.contains("more than a 2-byte page"), "{err}");
        let mut huge = r.body.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        check(r.flags, &huge, "claims 4294967295 pages");
        let mut twice = AfterImageWrite::new();
        twice.push_page(PageId(3), &[1]);
        let mut body = twice.records(1 << 20)[0].body.clone();
        body[0..4].copy_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&3u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.push(9);
        check(FLAG_EOS, &body, "appears twice");
    }

    proptest! {
        /// Any bytes as a body and flags: decoding answers, never panics, and what it accepts
        /// stays inside the body.
        #[test]
        fn decoding_any_bytes_never_panics(body in proptest::collection::vec(any::<u8>(), 0..200), flags in 0u16..8) {
            for kind in [OPERATION_UNDO, COMPENSATED, TRANSACTION_END, ACTIVE_TRANSACTIONS] {
                let _ = decode_l1(kind, &body);
            }
            if let Ok(read) = decode_after_images(flags, &body, 64) {
                let stored: usize = read.pages.iter().map(|p| p.stored.len()).sum();
                prop_assert!(stored <= body.len());
            }
        }
    }
}
