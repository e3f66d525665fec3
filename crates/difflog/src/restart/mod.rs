//! Restart from a backup image and the log streams (Lee, Kim & Cha, sections 3.4 and 4.2).
//!
//! A restart starts from the backup image that the last complete checkpoint wrote, loaded
//! into memory, and reads each stream from that checkpoint's begin mark to its end. Whether a
//! change is already in the backup is told by its record alone: a record after the
//! checkpoint's end mark never is; a record between the marks is iff the BackupID it carries
//! differs from the checkpoint's (the checkpointer set each page's bit to the checkpoint's just
//! before copying the page); a record before the begin mark always is. XOR is not idempotent,
//! so this is what lets a change be applied exactly when it must:
//!
//! - [`one_pass`] (DL1P, Algorithm 3): each stream backwards, once. A transaction's commit
//!   comes after its changes in its stream, so when a change is met its outcome is known: a
//!   committed change not in the backup is redone, an uncommitted one in the backup undone, the
//!   rest skipped. Aborted transactions need no compensation records.
//! - [`OnePassForward`]: DL1P fed record by record as a stream is read (level 2, reading
//!   and replaying at once): a record that carries its commit is decided on arrival, others
//!   wait for their transaction's outcome.
//! - [`two_pass`] (DL2P): forwards, redoing every change not in the backup (repeating history),
//!   then backwards, undoing every change of a transaction that did not commit.
//! - [`physical_two_pass`] (PL2P, the baseline): before and after images, applied in the
//!   order they were made across all streams (a merge by serial number), then losers undone
//!   in reverse order; it cannot run streams independently.
//!
//! The decisions of the XOR restarts depend on records and the checkpoint only, never on a
//! page's contents, so the streams replay on threads of their own into one image and the
//! backup itself may be XORed in at any moment (parallel restart level 4, [`parallel`]).
//!
//! Restart writes nothing: running it again on the same backup and log gives the same image.

mod dl1p;
mod dl2p;
mod image;
pub mod parallel;
mod pl2p;
mod streaming;

pub use dl1p::one_pass;
pub use dl2p::two_pass;
pub use image::{Image, MemoryImage};
pub use pl2p::{physical_redo_merging, physical_two_pass, physical_undo_after_merge};
pub use streaming::{OnePassForward, WAITING_BYTES_MAX};

use crate::kinds::{
    PHYSICAL_CHANGES, PHYSICAL_COMPENSATION, STREAM_CHECKPOINT_BEGIN, STREAM_CHECKPOINT_END,
    XOR_CHANGES,
};
use crate::marks::CheckpointBegin;
use crate::xor::{XorRange, FLAG_COMMITS};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_wal::{Record, RecordBody};
use std::collections::HashSet;
use std::path::Path;

/// Where the last complete checkpoint's marks lie in one stream. Both zero for a stream that
/// has seen no checkpoint since the store was created (its backup is the initial image).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub begin: Lsn,
    pub end: Lsn,
}

/// What a restart reads of one stream.
pub struct StreamTail<'a> {
    /// The stream's folder, named in errors.
    pub path: &'a Path,
    /// The records from the window's begin mark (or the stream's first record) to the end.
    pub records: &'a [Record],
    pub window: Window,
    /// Reads an older record (a loser's changes before the begin mark).
    pub read: &'a (dyn Fn(Lsn) -> Result<Record> + Sync),
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    pub records: u64,
    pub ranges_redone: u64,
    pub ranges_undone: u64,
    /// Ranges whose change the backup already shows (committed) or never showed (not).
    pub ranges_skipped: u64,
    pub bytes_applied: u64,
    /// Records read before the begin mark, following losers' chains.
    pub older_records: u64,
    pub committed: u64,
    /// Transactions whose changes restart removed (losers and aborted ones).
    pub rolled_back: u64,
}

impl Replay {
    pub fn add(&mut self, other: &Replay) {
        self.records += other.records;
        self.ranges_redone += other.ranges_redone;
        self.ranges_undone += other.ranges_undone;
        self.ranges_skipped += other.ranges_skipped;
        self.bytes_applied += other.bytes_applied;
        self.older_records += other.older_records;
        self.committed += other.committed;
        self.rolled_back += other.rolled_back;
    }
}

/// A record as the restarts see it.
enum Entry<'a> {
    Xor {
        txn: TxnId,
        commits: bool,
        flags: u16,
        body: &'a [u8],
    },
    Physical {
        txn: TxnId,
        kind: u8,
        commits: bool,
        flags: u16,
        body: &'a [u8],
    },
    Commit(TxnId),
    Abort(TxnId),
    Begin(CheckpointBegin),
    Other,
}

impl StreamTail<'_> {
    fn corrupt(&self, lsn: Lsn, reason: impl Into<String>) -> Error {
        Error::CorruptLog {
            path: self.path.to_path_buf(),
            offset: lsn.0,
            reason: reason.into(),
        }
    }

    fn classify<'r>(&self, record: &'r Record) -> Result<Entry<'r>> {
        let txn = || {
            record
                .txn
                .ok_or_else(|| self.corrupt(record.lsn, "a change names no transaction"))
        };
        Ok(match &record.body {
            RecordBody::Commit => Entry::Commit(txn()?),
            RecordBody::Abort => Entry::Abort(txn()?),
            RecordBody::Family { kind, flags, body } => match *kind {
                XOR_CHANGES => Entry::Xor {
                    txn: txn()?,
                    commits: flags & FLAG_COMMITS != 0,
                    flags: *flags,
                    body,
                },
                PHYSICAL_CHANGES | PHYSICAL_COMPENSATION => Entry::Physical {
                    txn: txn()?,
                    kind: *kind,
                    commits: flags & FLAG_COMMITS != 0,
                    flags: *flags,
                    body,
                },
                STREAM_CHECKPOINT_BEGIN => Entry::Begin(
                    CheckpointBegin::parse(body).map_err(|r| self.corrupt(record.lsn, r))?,
                ),
                STREAM_CHECKPOINT_END => Entry::Other,
                other => {
                    return Err(self.corrupt(
                        record.lsn,
                        format!("record kind {other} does not belong in a log stream"),
                    ))
                }
            },
            RecordBody::FlushMark | RecordBody::Skip | RecordBody::End => Entry::Other,
            other => {
                return Err(self.corrupt(
                    record.lsn,
                    format!(
                        "record kind {} of the page-level engine found in a log stream",
                        lodestore_wal::record::Body::kind(other)
                    ),
                ))
            }
        })
    }

    /// The window's begin mark: the first record when the window has one.
    fn begin_mark(&self) -> Result<Option<CheckpointBegin>> {
        if self.window.begin == Lsn::ZERO {
            return Ok(None);
        }
        match self.records.first() {
            Some(first) if first.lsn == self.window.begin => match self.classify(first)? {
                Entry::Begin(mark) => Ok(Some(mark)),
                _ => Err(self.corrupt(first.lsn, "the checkpoint's begin is not a begin mark")),
            },
            _ => Err(self.corrupt(
                self.window.begin,
                "the stream does not start at the checkpoint's begin mark",
            )),
        }
    }

    /// Is the change with `backup_id`, in the record at `lsn`, in the backup image?
    fn in_backup(&self, lsn: Lsn, backup_id: bool, checkpoint_id: bool) -> bool {
        lsn < self.window.end && backup_id != checkpoint_id
    }

    /// Visits the records `txn` wrote before the begin mark, newest first from `last`, and
    /// returns how many it read.
    fn older_chain(
        &self,
        txn: TxnId,
        last: Lsn,
        mut visit: impl FnMut(Record) -> Result<()>,
    ) -> Result<u64> {
        let mut at = last;
        let mut steps = 0u64;
        while at != Lsn::ZERO {
            let record = (self.read)(at)?;
            steps += 1;
            if record.lsn != at
                || record.txn != Some(txn)
                || record.lsn >= self.window.begin
                || steps > CHAIN_MAX
            {
                return Err(self.corrupt(
                    at,
                    format!("transaction {txn}'s chain before the checkpoint is broken here"),
                ));
            }
            if matches!(self.classify(&record)?, Entry::Commit(_) | Entry::Abort(_)) {
                return Err(self.corrupt(
                    at,
                    format!("transaction {txn}, active at the checkpoint, ended before it"),
                ));
            }
            if record.prev >= record.lsn {
                return Err(self.corrupt(at, "a record's previous LSN is not before it"));
            }
            at = record.prev;
            visit(record)?;
        }
        Ok(steps)
    }

    /// Undoes the XOR changes `txn` made before the begin mark: every one is in the backup.
    fn undo_older_xor(
        &self,
        txn: TxnId,
        last: Lsn,
        image: &dyn Image,
        replay: &mut Replay,
    ) -> Result<()> {
        let mut applied = Replay::default();
        replay.older_records += self.older_chain(txn, last, |record| {
            if let Entry::Xor { flags, body, .. } = self.classify(&record)? {
                apply_xor(self, record.lsn, flags, body, image, &mut applied, |_| {
                    Decision::Undo
                })?;
            }
            Ok(())
        })?;
        replay.ranges_undone += applied.ranges_undone;
        replay.bytes_applied += applied.bytes_applied;
        Ok(())
    }
}

/// Longest chain of one transaction's records restart follows (a loop in damaged records
/// must end).
const CHAIN_MAX: u64 = 1 << 32;

/// What a replay does with one range of an XOR record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// The image already shows what the range should leave (the backup has the committed
    /// change, or lacks the uncommitted one).
    Skip,
    Redo,
    Undo,
}

/// DL1P's rule (Algorithm 3): redo a committed change the backup lacks, undo an uncommitted
/// one it holds, leave the rest as the backup shows them.
fn one_pass_decision(committed: bool, in_backup: bool) -> Decision {
    match (committed, in_backup) {
        (true, false) => Decision::Redo,
        (false, true) => Decision::Undo,
        _ => Decision::Skip,
    }
}

/// Ranges of one page a replay XORs under one taking of the page's latch at most: a record's
/// ranges come page by page (a page header, a slot, an object), and each latch is a locked
/// instruction that waits for the stores before it.
const PAGE_RUN_RANGES: usize = 8;

/// XORs into `image` the ranges of `body` (the XOR record at `lsn`) that `decide` redoes or
/// undoes, each run of ranges on one page under one latch, and counts them in `replay`.
fn apply_xor(
    tail: &StreamTail<'_>,
    lsn: Lsn,
    flags: u16,
    body: &[u8],
    image: &dyn Image,
    replay: &mut Replay,
    mut decide: impl FnMut(&XorRange<'_>) -> Decision,
) -> Result<()> {
    let mut decided = Ok(());
    let ranges = crate::xor::ranges(flags, body).map_while(|range| match range {
        Ok(range) => Some(range),
        Err(reason) => {
            decided = Err(reason);
            None
        }
    });
    let applied = xor_in_runs(
        image,
        ranges.filter(|range| count(replay, range, decide(range))),
    );
    decided
        .and(applied)
        .map_err(|reason| tail.corrupt(lsn, reason))
}

/// Counts `range` in `replay` as `decision` says; true if it is to be XORed in.
fn count(replay: &mut Replay, range: &XorRange<'_>, decision: Decision) -> bool {
    match decision {
        Decision::Skip => {
            replay.ranges_skipped += 1;
            return false;
        }
        Decision::Redo => replay.ranges_redone += 1,
        Decision::Undo => replay.ranges_undone += 1,
    }
    replay.bytes_applied += range.delta.len() as u64;
    true
}

/// XORs `ranges` into `image` in order, a run of ranges on one page under one latch.
fn xor_in_runs<'b>(
    image: &dyn Image,
    ranges: impl Iterator<Item = XorRange<'b>>,
) -> std::result::Result<(), String> {
    let mut run: [(usize, &[u8]); PAGE_RUN_RANGES] = [(0, &[]); PAGE_RUN_RANGES];
    let mut run_len = 0;
    let mut run_page = PageId(0);
    for range in ranges {
        if run_len == PAGE_RUN_RANGES || (run_len > 0 && range.page != run_page) {
            image.xor_run(run_page, &run[..run_len])?;
            run_len = 0;
        }
        run_page = range.page;
        run[run_len] = (range.offset as usize, range.delta);
        run_len += 1;
    }
    if run_len > 0 {
        image.xor_run(run_page, &run[..run_len])?;
    }
    Ok(())
}

/// Transactions active at the begin mark that did not commit: their older changes are undone.
fn older_losers<S: std::hash::BuildHasher>(
    begin: &Option<CheckpointBegin>,
    committed: &HashSet<TxnId, S>,
) -> Vec<(TxnId, Lsn)> {
    begin
        .iter()
        .flat_map(|mark| mark.active.iter().copied())
        .filter(|(txn, _)| !committed.contains(txn))
        .collect()
}
