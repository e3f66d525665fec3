//! The physical-logging baseline's restart (PL2P): redo by after-images in the order the
//! changes were made, merged across the streams by serial number, then undo of the losers by
//! before-images, newest first. Unlike the XOR restarts it cannot replay a stream on its own.

use super::{Entry, Image, Replay, StreamTail};
use crate::kinds::PHYSICAL_CHANGES;
use crate::physical::{self, PhysicalRange};
use lodestore_core::{Lsn, Result, TxnId};
use lodestore_wal::Record;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

/// A parsed change or compensation record.
struct Change<'a> {
    lsn: Lsn,
    serial: u64,
    txn: TxnId,
    undoable: bool,
    ranges: Vec<PhysicalRange<'a>>,
}

/// Replays every stream into `image`, which holds the backup of the last complete checkpoint.
pub fn physical_two_pass(tails: &[StreamTail<'_>], image: &dyn Image) -> Result<Replay> {
    let mut replay = Replay::default();
    let mut ended = HashSet::new();
    let mut committed = HashSet::new();
    let mut started = HashSet::new();
    let mut streams = Vec::with_capacity(tails.len());
    let mut older = Vec::new();
    for tail in tails {
        let begin = tail.begin_mark()?;
        let mut changes = Vec::new();
        for record in tail.records {
            replay.records += 1;
            match tail.classify(record)? {
                Entry::Physical {
                    txn,
                    kind,
                    commits,
                    body,
                } => {
                    let change = parse(tail, record, txn, kind, body)?;
                    if changes
                        .last()
                        .is_some_and(|c: &Change| c.serial >= change.serial)
                    {
                        return Err(tail.corrupt(record.lsn, "serial numbers out of order"));
                    }
                    if commits {
                        committed.insert(txn);
                        ended.insert(txn);
                    }
                    started.insert(txn);
                    changes.push(change);
                }
                Entry::Commit(txn) => {
                    committed.insert(txn);
                    ended.insert(txn);
                }
                Entry::Abort(txn) => {
                    ended.insert(txn);
                }
                Entry::Xor { .. } => {
                    return Err(tail.corrupt(record.lsn, "an XOR record in a physical stream"))
                }
                Entry::Begin(_) | Entry::Other => {}
            }
        }
        for (txn, last) in begin.iter().flat_map(|m| m.active.iter().copied()) {
            started.insert(txn);
            older.push((streams.len(), txn, last));
        }
        streams.push(changes);
    }

    // Pass 1: repeat history, merging the streams by serial number.
    let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = streams
        .iter()
        .enumerate()
        .filter_map(|(s, changes)| changes.first().map(|c| Reverse((c.serial, s, 0))))
        .collect();
    while let Some(Reverse((_, s, i))) = heap.pop() {
        let change = &streams[s][i];
        for range in &change.ranges {
            write(
                &tails[s],
                image,
                change.lsn,
                range,
                range.after,
                &mut replay,
            )?;
            replay.ranges_redone += 1;
        }
        if let Some(next) = streams[s].get(i + 1) {
            heap.push(Reverse((next.serial, s, i + 1)));
        }
    }

    // Pass 2: losers' changes, newest first, back to their before-images.
    let losers: HashSet<TxnId> = started.difference(&ended).copied().collect();
    let mut older_records = Vec::new();
    for (s, txn, last) in older {
        if losers.contains(&txn) {
            replay.older_records += tails[s].older_chain(txn, last, |record| {
                older_records.push((s, record));
                Ok(())
            })?;
        }
    }
    let mut undo: Vec<(u64, usize, &Change<'_>)> = Vec::new();
    for (s, changes) in streams.iter().enumerate() {
        undo.extend(
            changes
                .iter()
                .filter(|c| c.undoable && losers.contains(&c.txn))
                .map(|c| (c.serial, s, c)),
        );
    }
    let parsed_older: Vec<(usize, Change<'_>)> = older_records
        .iter()
        .map(|(s, record)| {
            let tail = &tails[*s];
            match tail.classify(record)? {
                Entry::Physical {
                    txn, kind, body, ..
                } => Ok(Some((*s, parse(tail, record, txn, kind, body)?))),
                Entry::Xor { .. } => {
                    Err(tail.corrupt(record.lsn, "an XOR record in a physical stream"))
                }
                _ => Ok(None),
            }
        })
        .filter_map(Result::transpose)
        .collect::<Result<_>>()?;
    undo.extend(
        parsed_older
            .iter()
            .filter(|(_, c)| c.undoable)
            .map(|(s, c)| (c.serial, *s, c)),
    );
    undo.sort_unstable_by_key(|&(serial, _, _)| Reverse(serial));
    for (_, s, change) in undo {
        for range in change.ranges.iter().rev() {
            write(
                &tails[s],
                image,
                change.lsn,
                range,
                range.before,
                &mut replay,
            )?;
            replay.ranges_undone += 1;
        }
    }
    replay.committed = committed.len() as u64;
    replay.rolled_back = losers.len() as u64;
    Ok(replay)
}

fn parse<'r>(
    tail: &StreamTail<'_>,
    record: &Record,
    txn: TxnId,
    kind: u8,
    body: &'r [u8],
) -> Result<Change<'r>> {
    let (serial, ranges) = physical::parse(kind, body).map_err(|r| tail.corrupt(record.lsn, r))?;
    Ok(Change {
        lsn: record.lsn,
        serial,
        txn,
        undoable: kind == PHYSICAL_CHANGES,
        ranges,
    })
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
