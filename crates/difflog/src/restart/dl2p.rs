//! The two-pass restart of differential logging (DL2P): redo forwards, then undo backwards.

use super::{apply_xor, older_losers, Decision, Entry, Image, Replay, StreamTail};
use lodestore_core::Result;
use std::collections::HashSet;

/// Replays one stream into `image` (see [`super::one_pass`] for what it holds): first every
/// change the backup lacks, whatever its transaction's outcome, then, backwards, every change
/// of a transaction that did not commit.
pub fn two_pass(tail: &StreamTail<'_>, checkpoint_id: bool, image: &dyn Image) -> Result<Replay> {
    let begin = tail.begin_mark()?;
    let mut replay = Replay::default();
    let mut committed = HashSet::new();
    for record in tail.records {
        replay.records += 1;
        match tail.classify(record)? {
            Entry::Commit(txn) => {
                committed.insert(txn);
            }
            Entry::Xor {
                txn,
                commits,
                flags,
                body,
            } => {
                if commits {
                    committed.insert(txn);
                }
                // Every change the backup lacks goes in; the losers' come out after.
                apply_xor(tail, record.lsn, flags, body, image, &mut replay, |range| {
                    if tail.in_backup(record.lsn, range.backup_id, checkpoint_id) {
                        Decision::Skip
                    } else {
                        Decision::Redo
                    }
                })?;
            }
            Entry::Physical { .. } => {
                return Err(tail.corrupt(record.lsn, "a physical record in an XOR stream"))
            }
            Entry::Abort(_) | Entry::Begin(_) | Entry::Other => {}
        }
    }
    // Every change is in the image now; those of transactions that did not commit go.
    let mut rolled_back = HashSet::new();
    for record in tail.records.iter().rev() {
        if let Entry::Xor {
            txn, flags, body, ..
        } = tail.classify(record)?
        {
            if !committed.contains(&txn) {
                rolled_back.insert(txn);
                apply_xor(tail, record.lsn, flags, body, image, &mut replay, |_| {
                    Decision::Undo
                })?;
            }
        }
    }
    for (txn, last) in older_losers(&begin, &committed) {
        rolled_back.insert(txn);
        tail.undo_older_xor(txn, last, image, &mut replay)?;
    }
    replay.committed = committed.len() as u64;
    replay.rolled_back = rolled_back.len() as u64;
    Ok(replay)
}
