//! DL1P as the records arrive (parallel restart level 2 of Table 1: reading and replaying a
//! stream at once). The backward pass of Algorithm 3 meets a transaction's outcome before its
//! changes; read forwards, most changes arrive with it, because a transaction's record carries
//! its commit ([`crate::xor::FLAG_COMMITS`]). Such a record is decided on arrival. Records of a
//! transaction whose outcome is still to come wait until its commit or abort (or the end of
//! the stream, which makes it a loser), and are then decided by the same rule as in
//! [`super::one_pass`]: a committed change the backup lacks is redone, an uncommitted one it
//! holds is undone. XOR commutes, so deciding a change later than its neighbours changes
//! nothing; the model test checks that both passes build the same image.
//!
//! A decided record's changes are XORed in [`APPLY_LAG_RECORDS`] records later, their image
//! lines prefetched when it was decided: changes land on pages all over a large image, and
//! applying each at once waited for memory on every one.

use super::{
    count, older_losers, one_pass_decision, xor_in_runs, Entry, Image, Replay, StreamTail, Window,
};
use crate::marks::CheckpointBegin;
use crate::xor::XorRange;
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_wal::{Record, RecordBody};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::path::Path;

/// Decided records whose changes wait, prefetched, before they are XORed in: enough for the
/// memory reads of the oldest to be done when it is applied, few enough to stay in cache.
pub const APPLY_LAG_RECORDS: usize = 8;

/// Bytes of records waiting for their transaction's outcome beyond which the stream is
/// refused: a transaction appends its pending changes at 64 KiB, so only damage or a vast
/// number of open transactions gets here.
pub const WAITING_BYTES_MAX: usize = 1 << 30;

fn no_read(lsn: Lsn) -> Result<Record> {
    Err(Error::InvalidArgument(format!(
        "record {lsn} asked for while a stream is still being read"
    )))
}

/// One stream's DL1P replay, fed record by record.
pub struct OnePassForward<'a> {
    path: &'a Path,
    window: Window,
    checkpoint_id: bool,
    image: &'a dyn Image,
    begin: Option<CheckpointBegin>,
    seen_first: bool,
    waiting: FxHashMap<TxnId, Vec<Record>>,
    waiting_bytes: usize,
    committed: FxHashSet<TxnId>,
    rolled_back: FxHashSet<TxnId>,
    replay: Replay,
    pages_end: u32,
    /// Decided records, oldest first, with the changes of each to XOR in.
    lagging: VecDeque<Decided>,
    /// Emptied change lists, kept for the next records.
    spare: Vec<Vec<Change>>,
}

/// A record whose changes are decided but not yet XORed in.
struct Decided {
    record: Record,
    changes: Vec<Change>,
}

/// One range of a decided record to XOR in: `len` bytes at `offset` of `page`, taken from
/// the record's body at `at`.
#[derive(Clone, Copy)]
struct Change {
    page: PageId,
    offset: u16,
    at: u32,
    len: u32,
}

impl<'a> OnePassForward<'a> {
    /// Replays into `image`, which holds (or will have XORed in) the backup of the checkpoint
    /// whose BackupID is `checkpoint_id` and whose marks lie at `window` in the stream at
    /// `path` (named in errors).
    pub fn new(
        path: &'a Path,
        window: Window,
        checkpoint_id: bool,
        image: &'a dyn Image,
    ) -> OnePassForward<'a> {
        OnePassForward {
            path,
            window,
            checkpoint_id,
            image,
            begin: None,
            seen_first: false,
            waiting: FxHashMap::default(),
            waiting_bytes: 0,
            committed: FxHashSet::default(),
            rolled_back: FxHashSet::default(),
            replay: Replay::default(),
            pages_end: 0,
            lagging: VecDeque::with_capacity(APPLY_LAG_RECORDS + 1),
            spare: Vec::new(),
        }
    }

    fn tail(&self, read: &'a (dyn Fn(Lsn) -> Result<Record> + Sync)) -> StreamTail<'a> {
        StreamTail {
            path: self.path,
            records: &[],
            window: self.window,
            read,
        }
    }

    /// One past the highest page a change decided so far names (the records still waiting
    /// for their transaction's outcome are counted when it comes). After an error from
    /// [`OnePassForward::push`] or [`OnePassForward::finish`], a value past the image's
    /// pages says the store outgrew the image: the caller may name that instead.
    pub fn pages_end(&self) -> u32 {
        self.pages_end
    }

    /// The stream's next record (in LSN order, from the window's begin mark on).
    pub fn push(&mut self, record: Record) -> Result<()> {
        let tail = self.tail(&no_read);
        if !self.seen_first {
            self.seen_first = true;
            if self.window.begin != Lsn::ZERO {
                if record.lsn != self.window.begin {
                    return Err(tail.corrupt(
                        self.window.begin,
                        "the stream does not start at the checkpoint's begin mark",
                    ));
                }
                match tail.classify(&record)? {
                    Entry::Begin(mark) => self.begin = Some(mark),
                    _ => {
                        return Err(
                            tail.corrupt(record.lsn, "the checkpoint's begin is not a begin mark")
                        )
                    }
                }
                self.replay.records += 1;
                return Ok(());
            }
        }
        self.replay.records += 1;
        match tail.classify(&record)? {
            Entry::Commit(txn) => self.decide(&tail, txn, true)?,
            Entry::Abort(txn) => self.decide(&tail, txn, false)?,
            Entry::Xor {
                txn,
                commits,
                flags,
                body,
            } => {
                if commits {
                    // Its own commit: this record and any waiting ones are decided now.
                    self.apply(&tail, record, flags, true)?;
                    self.decide(&tail, txn, true)?;
                } else {
                    self.waiting_bytes += body.len();
                    if self.waiting_bytes > WAITING_BYTES_MAX {
                        return Err(tail.corrupt(
                            record.lsn,
                            format!(
                                "more than {WAITING_BYTES_MAX} bytes of changes wait for \
                                 their transactions to end"
                            ),
                        ));
                    }
                    self.waiting.entry(txn).or_default().push(record);
                }
            }
            Entry::Physical { .. } => {
                return Err(tail.corrupt(record.lsn, "a physical record in an XOR stream"))
            }
            Entry::Begin(_) | Entry::Other => {}
        }
        Ok(())
    }

    /// `txn` ended (committed or not): its waiting records are decided.
    fn decide(&mut self, tail: &StreamTail<'_>, txn: TxnId, won: bool) -> Result<()> {
        let records = self.waiting.remove(&txn).unwrap_or_default();
        if won {
            self.committed.insert(txn);
        } else if !records.is_empty() {
            self.rolled_back.insert(txn);
        }
        for record in records {
            if let Entry::Xor { flags, body, .. } = tail.classify(&record)? {
                self.waiting_bytes -= body.len();
                self.apply(tail, record, flags, won)?;
            }
        }
        Ok(())
    }

    /// Decides `record`'s changes (its transaction `won` or not), asks for the image lines
    /// they change, and XORs in the record decided [`APPLY_LAG_RECORDS`] records ago.
    fn apply(
        &mut self,
        tail: &StreamTail<'_>,
        record: Record,
        flags: u16,
        won: bool,
    ) -> Result<()> {
        let body = xor_body(&record);
        let mut changes = self.spare.pop().unwrap_or_default();
        let checkpoint_id = self.checkpoint_id;
        let in_backup =
            |range: &XorRange<'_>| tail.in_backup(record.lsn, range.backup_id, checkpoint_id);
        for range in crate::xor::ranges(flags, body) {
            let range = range.map_err(|reason| tail.corrupt(record.lsn, reason))?;
            self.pages_end = self.pages_end.max(range.page.0.saturating_add(1));
            if count(
                &mut self.replay,
                &range,
                one_pass_decision(won, in_backup(&range)),
            ) {
                self.image
                    .prefetch(range.page, range.offset as usize, range.delta.len());
                changes.push(Change {
                    page: range.page,
                    offset: range.offset,
                    at: (range.delta.as_ptr() as usize - body.as_ptr() as usize) as u32,
                    len: range.delta.len() as u32,
                });
            }
        }
        self.lagging.push_back(Decided { record, changes });
        if self.lagging.len() > APPLY_LAG_RECORDS {
            self.xor_oldest(tail)?;
        }
        Ok(())
    }

    /// XORs in the oldest decided record's changes.
    fn xor_oldest(&mut self, tail: &StreamTail<'_>) -> Result<()> {
        let Some(Decided {
            record,
            mut changes,
        }) = self.lagging.pop_front()
        else {
            return Ok(());
        };
        let body = xor_body(&record);
        let ranges = changes.iter().map(|change| XorRange {
            page: change.page,
            offset: change.offset,
            backup_id: false,
            delta: &body[change.at as usize..][..change.len as usize],
        });
        xor_in_runs(self.image, ranges).map_err(|reason| tail.corrupt(record.lsn, reason))?;
        changes.clear();
        self.spare.push(changes);
        Ok(())
    }

    /// The stream ended: transactions still open lost, and those active at the checkpoint
    /// that did not commit have their older changes (read by `read`) undone. Called once.
    pub fn finish(&mut self, read: &'a (dyn Fn(Lsn) -> Result<Record> + Sync)) -> Result<Replay> {
        let tail = self.tail(read);
        if !self.seen_first && self.window.begin != Lsn::ZERO {
            return Err(tail.corrupt(
                self.window.begin,
                "the stream does not start at the checkpoint's begin mark",
            ));
        }
        let open: Vec<TxnId> = self.waiting.keys().copied().collect();
        for txn in open {
            self.decide(&tail, txn, false)?;
        }
        while !self.lagging.is_empty() {
            self.xor_oldest(&tail)?;
        }
        let begin = self.begin.take();
        for (txn, last) in older_losers(&begin, &self.committed) {
            self.rolled_back.insert(txn);
            tail.undo_older_xor(txn, last, self.image, &mut self.replay)?;
        }
        self.replay.committed = self.committed.len() as u64;
        self.replay.rolled_back = self.rolled_back.len() as u64;
        Ok(std::mem::take(&mut self.replay))
    }
}

/// The body of an XOR record (`apply` is only given those).
fn xor_body(record: &Record) -> &[u8] {
    match &record.body {
        RecordBody::Family { body, .. } => body,
        _ => &[],
    }
}
