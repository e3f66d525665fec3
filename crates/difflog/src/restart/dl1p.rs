//! The one-pass backward restart of differential logging (DL1P, Algorithm 3).

use super::{apply_xor, older_losers, one_pass_decision, Entry, Image, Replay, StreamTail};
use lodestore_core::Result;
use std::collections::HashSet;

/// Replays one stream backwards into `image`, which holds the backup of the checkpoint whose
/// BackupID is `checkpoint_id` (or zeros, with the backup XORed in at any time). Each record
/// is read once; no record of an aborted or unfinished transaction is redone.
pub fn one_pass(tail: &StreamTail<'_>, checkpoint_id: bool, image: &dyn Image) -> Result<Replay> {
    let begin = tail.begin_mark()?;
    let mut replay = Replay::default();
    let mut committed = HashSet::new();
    let mut rolled_back = HashSet::new();
    for record in tail.records.iter().rev() {
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
                let won = committed.contains(&txn);
                if !won {
                    rolled_back.insert(txn);
                }
                apply_xor(tail, record.lsn, flags, body, image, &mut replay, |range| {
                    let in_backup = tail.in_backup(record.lsn, range.backup_id, checkpoint_id);
                    one_pass_decision(won, in_backup)
                })?;
            }
            Entry::Physical { .. } => {
                return Err(tail.corrupt(record.lsn, "a physical record in an XOR stream"))
            }
            Entry::Abort(_) | Entry::Begin(_) | Entry::Other => {}
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
