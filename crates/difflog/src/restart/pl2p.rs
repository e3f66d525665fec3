//! The physical-logging baseline's restart (PL2P): redo by after-images in the order the
//! changes were made, merged across the streams by serial number, then undo of the losers by
//! before-images, newest first. Unlike the XOR restarts it cannot replay a stream on its own.
//!
//! A record's ranges are parsed when they are applied: ordering needs only its serial number,
//! and only losers' changes are parsed a second time, for the undo.

use super::{Entry, Image, Replay, StreamTail, Window};
use crate::kinds::PHYSICAL_CHANGES;
use crate::physical::{self, PhysicalRange};
use lodestore_core::{Lsn, Result, TxnId};
use lodestore_wal::Record;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::path::Path;
use std::sync::mpsc::Receiver;

/// A change or compensation record of a stream, by its place in the stream's records.
struct Change {
    serial: u64,
    txn: TxnId,
    undoable: bool,
    index: usize,
}

/// What the passes need of every stream: its changes in order and the transactions' outcomes.
struct Collected {
    streams: Vec<Vec<Change>>,
    /// Transactions active at a begin mark: (stream, transaction, its last record before).
    older: Vec<(usize, TxnId, Lsn)>,
    started: HashSet<TxnId>,
    ended: HashSet<TxnId>,
    committed: HashSet<TxnId>,
    records: u64,
}

/// Replays every stream into `image`, which holds the backup of the last complete checkpoint.
pub fn physical_two_pass(tails: &[StreamTail<'_>], image: &dyn Image) -> Result<Replay> {
    let collected = collect(tails)?;
    let mut replay = Replay::default();
    redo(tails, &collected.streams, image, &mut replay)?;
    undo(tails, collected, image, replay)
}

/// Pass 2 after [`physical_redo_merging`] did pass 1 as the streams were read: `tails` hold
/// the records it returned, `pass_one` what it did.
pub fn physical_undo_after_merge(
    tails: &[StreamTail<'_>],
    image: &dyn Image,
    pass_one: Replay,
) -> Result<Replay> {
    let collected = collect(tails)?;
    undo(tails, collected, image, pass_one)
}

fn collect(tails: &[StreamTail<'_>]) -> Result<Collected> {
    let mut c = Collected {
        streams: Vec::with_capacity(tails.len()),
        older: Vec::new(),
        started: HashSet::new(),
        ended: HashSet::new(),
        committed: HashSet::new(),
        records: 0,
    };
    for tail in tails {
        let begin = tail.begin_mark()?;
        let mut changes: Vec<Change> = Vec::new();
        for (index, record) in tail.records.iter().enumerate() {
            c.records += 1;
            match tail.classify(record)? {
                Entry::Physical {
                    txn,
                    kind,
                    commits,
                    body,
                    ..
                } => {
                    let serial = physical::serial(body).map_err(|r| tail.corrupt(record.lsn, r))?;
                    if changes.last().is_some_and(|c| c.serial >= serial) {
                        return Err(tail.corrupt(record.lsn, "serial numbers out of order"));
                    }
                    if commits {
                        c.committed.insert(txn);
                        c.ended.insert(txn);
                    }
                    c.started.insert(txn);
                    changes.push(Change {
                        serial,
                        txn,
                        undoable: kind == PHYSICAL_CHANGES,
                        index,
                    });
                }
                Entry::Commit(txn) => {
                    c.committed.insert(txn);
                    c.ended.insert(txn);
                }
                Entry::Abort(txn) => {
                    c.ended.insert(txn);
                }
                Entry::Xor { .. } => {
                    return Err(tail.corrupt(record.lsn, "an XOR record in a physical stream"))
                }
                Entry::Begin(_) | Entry::Other => {}
            }
        }
        for (txn, last) in begin.iter().flat_map(|m| m.active.iter().copied()) {
            c.started.insert(txn);
            c.older.push((c.streams.len(), txn, last));
        }
        c.streams.push(changes);
    }
    Ok(c)
}

/// Pass 1: repeat history, merging the streams by serial number.
fn redo(
    tails: &[StreamTail<'_>],
    streams: &[Vec<Change>],
    image: &dyn Image,
    replay: &mut Replay,
) -> Result<()> {
    let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = streams
        .iter()
        .enumerate()
        .filter_map(|(s, changes)| changes.first().map(|c| Reverse((c.serial, s, 0))))
        .collect();
    while let Some(Reverse((_, s, i))) = heap.pop() {
        let tail = &tails[s];
        redo_record(tail, &tail.records[streams[s][i].index], image, replay)?;
        if let Some(next) = streams[s].get(i + 1) {
            heap.push(Reverse((next.serial, s, i + 1)));
        }
    }
    Ok(())
}

/// The ranges of a change or compensation record.
fn ranges<'r>(tail: &StreamTail<'_>, record: &'r Record) -> Result<Vec<PhysicalRange<'r>>> {
    match tail.classify(record)? {
        Entry::Physical {
            kind, flags, body, ..
        } => Ok(physical::parse(kind, flags, body)
            .map_err(|r| tail.corrupt(record.lsn, r))?
            .1),
        Entry::Xor { .. } => Err(tail.corrupt(record.lsn, "an XOR record in a physical stream")),
        _ => Ok(Vec::new()),
    }
}

fn redo_record(
    tail: &StreamTail<'_>,
    record: &Record,
    image: &dyn Image,
    replay: &mut Replay,
) -> Result<()> {
    for range in &ranges(tail, record)? {
        write(tail, image, record.lsn, range, range.after, replay)?;
        replay.ranges_redone += 1;
    }
    Ok(())
}

/// Pass 2: losers' changes, newest first, back to their before-images.
fn undo(
    tails: &[StreamTail<'_>],
    c: Collected,
    image: &dyn Image,
    mut replay: Replay,
) -> Result<Replay> {
    replay.records += c.records;
    let losers: HashSet<TxnId> = c.started.difference(&c.ended).copied().collect();
    let mut older_records = Vec::new();
    for &(s, txn, last) in &c.older {
        if losers.contains(&txn) {
            replay.older_records += tails[s].older_chain(txn, last, |record| {
                older_records.push((s, record));
                Ok(())
            })?;
        }
    }
    // (serial, stream, record): losers' changes read with the streams, then those before
    // the begin mark.
    let mut undo: Vec<(u64, usize, &Record)> = Vec::new();
    for (s, changes) in c.streams.iter().enumerate() {
        undo.extend(
            changes
                .iter()
                .filter(|c| c.undoable && losers.contains(&c.txn))
                .map(|c| (c.serial, s, &tails[s].records[c.index])),
        );
    }
    for (s, record) in &older_records {
        let tail = &tails[*s];
        match tail.classify(record)? {
            Entry::Physical { kind, body, .. } if kind == PHYSICAL_CHANGES => {
                let serial = physical::serial(body).map_err(|r| tail.corrupt(record.lsn, r))?;
                undo.push((serial, *s, record));
            }
            Entry::Xor { .. } => {
                return Err(tail.corrupt(record.lsn, "an XOR record in a physical stream"))
            }
            _ => {}
        }
    }
    undo.sort_unstable_by_key(|&(serial, _, _)| Reverse(serial));
    for (_, s, record) in undo {
        let tail = &tails[s];
        for range in ranges(tail, record)?.iter().rev() {
            write(tail, image, record.lsn, range, range.before, &mut replay)?;
            replay.ranges_undone += 1;
        }
    }
    replay.committed = c.committed.len() as u64;
    replay.rolled_back = losers.len() as u64;
    Ok(replay)
}

/// Records of one stream waiting in the merge of [`physical_redo_merging`].
struct Feed<'a> {
    tail: StreamTail<'a>,
    arriving: Receiver<Record>,
    records: Vec<Record>,
    /// The serial number and index of the stream's next change not yet redone.
    head: Option<(u64, usize)>,
}

impl Feed<'_> {
    /// Takes records in until the next change (or the end of the stream).
    fn advance(&mut self) -> Result<()> {
        let last = self.head.take().map(|(serial, _)| serial);
        while let Ok(record) = self.arriving.recv() {
            let serial = match self.tail.classify(&record)? {
                Entry::Physical { body, .. } => {
                    Some(physical::serial(body).map_err(|r| self.tail.corrupt(record.lsn, r))?)
                }
                Entry::Xor { .. } => {
                    return Err(self
                        .tail
                        .corrupt(record.lsn, "an XOR record in a physical stream"))
                }
                _ => None,
            };
            let index = self.records.len();
            let lsn = record.lsn;
            self.records.push(record);
            if let Some(serial) = serial {
                if last.is_some_and(|last| last >= serial) {
                    return Err(self.tail.corrupt(lsn, "serial numbers out of order"));
                }
                self.head = Some((serial, index));
                return Ok(());
            }
        }
        // Every sender gone: the stream was read to its end (or its reader failed, which
        // fails the restart).
        Ok(())
    }
}

fn no_read(lsn: Lsn) -> Result<Record> {
    Err(lodestore_core::Error::InvalidArgument(format!(
        "record {lsn} asked for while a stream is still being read"
    )))
}

/// Pass 1 of PL2P as the streams are read (Table 2 of the paper: PL2P too pipelines reading
/// and replaying). Stream `s`'s records arrive on `streams[s]` (its folder, window and
/// receiver) in LSN order; a change is redone once every stream still being read has shown
/// its next change, so changes land in serial order across the streams as in
/// [`physical_two_pass`]. Returns every stream's records, for
/// [`physical_undo_after_merge`] once the reads have ended, and what pass 1 did.
pub fn physical_redo_merging(
    streams: Vec<(&Path, Window, Receiver<Record>)>,
    image: &dyn Image,
) -> Result<(Vec<Vec<Record>>, Replay)> {
    let mut feeds: Vec<Feed<'_>> = streams
        .into_iter()
        .map(|(path, window, arriving)| Feed {
            tail: StreamTail {
                path,
                records: &[],
                window,
                read: &no_read,
            },
            arriving,
            records: Vec::new(),
            head: None,
        })
        .collect();
    let mut replay = Replay::default();
    let mut heap = BinaryHeap::new();
    for (s, feed) in feeds.iter_mut().enumerate() {
        feed.advance()?;
        if let Some((serial, _)) = feed.head {
            heap.push(Reverse((serial, s)));
        }
    }
    while let Some(Reverse((_, s))) = heap.pop() {
        let feed = &mut feeds[s];
        let (_, index) = feed.head.expect("a stream in the merge has a head");
        redo_record(&feed.tail, &feed.records[index], image, &mut replay)?;
        feed.advance()?;
        if let Some((serial, _)) = feed.head {
            heap.push(Reverse((serial, s)));
        }
    }
    Ok((feeds.into_iter().map(|f| f.records).collect(), replay))
}

fn write(
    tail: &StreamTail<'_>,
    image: &dyn Image,
    lsn: Lsn,
    range: &PhysicalRange<'_>,
    bytes: &[u8],
    replay: &mut Replay,
) -> Result<()> {
    image
        .write(range.page, range.offset as usize, bytes)
        .map_err(|r| tail.corrupt(lsn, r))?;
    replay.bytes_applied += bytes.len() as u64;
    Ok(())
}
