//! What `info` and `check` read of the server's log as the last run left it: the records from
//! the last checkpoint on, by level. Level 0 is the recovery method's own (page changes, page
//! images, commits and aborts, checkpoints); level 1 the multi-level transactions' undo,
//! compensation, end and active-list records (Hasse & Weikum section 2), whose chains are
//! followed back to check that each record's previous one is a record of the same transaction.
//! Only reads; a main-memory method's streams are inspected by its own module.

use lodestore_core::{Lsn, Result, TxnId};
use lodestore_multilevel::kinds::AFTER_IMAGES;
use lodestore_multilevel::records::{decode_after_images, decode_l1, L1Record};
use lodestore_storage::{FileSystem, Volume};
use lodestore_wal::{kinds::MULTI_LEVEL, Log, LogOptions, RecordBody};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Most unfinished level-1 transactions listed by id (the count is always whole).
const UNFINISHED_LISTED_MAX: usize = 32;

/// The server's log from the last checkpoint to its end.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LogSummary {
    /// Where the scan began (the superblock's checkpoint LSN) and the end it found.
    pub checkpoint_lsn: u64,
    pub end_lsn: u64,
    /// Bytes after the end that do not form valid records (a torn last write).
    pub torn_bytes: u64,
    /// Level-0 records: the recovery method's (flush marks not counted).
    pub level0_records: u64,
    pub commits: u64,
    /// Level-0 after-image records of the database-cache layout (kind 66).
    pub after_image_records: u64,
    /// Level-1 records by kind.
    pub undo_records: u64,
    pub compensation_records: u64,
    pub ends_committed: u64,
    pub ends_aborted: u64,
    pub active_lists: u64,
    /// Level-1 transactions with records and no end since the checkpoint, and those the
    /// checkpoint listed that did not end after it: what a warm start compensates.
    pub unfinished: u64,
    /// The first of them by id.
    pub unfinished_ids: Vec<u64>,
    /// Damage found among the level-1 records: each names the log, the offset and, where it
    /// can be read, the transaction.
    pub problems: Vec<String>,
}

/// Reads the log of the store in `store_dir` (whose volume is `volume`) from its last
/// checkpoint. `Err` only when the log cannot be read at all.
pub fn log_summary(fs: &dyn FileSystem, store_dir: &Path, volume: &Volume) -> Result<LogSummary> {
    let sb = volume.superblock();
    let log_dir = store_dir.join(crate::LOG_DIR_NAME);
    let options = LogOptions {
        segment_bytes: sb.log_segment_bytes,
        page_size_max: volume.page_size(),
        ..LogOptions::default()
    };
    let mut summary = LogSummary {
        checkpoint_lsn: sb.checkpoint_lsn.0,
        ..LogSummary::default()
    };
    let at = |lsn: Lsn| format!("{} offset {lsn}", log_dir.display());
    // Each level-1 transaction's records seen so far (LSN order) and whether it ended.
    let mut chains: BTreeMap<TxnId, BTreeSet<Lsn>> = BTreeMap::new();
    let mut ended: BTreeSet<TxnId> = BTreeSet::new();
    let mut listed: BTreeSet<TxnId> = BTreeSet::new();
    let page_size = volume.page_size();
    let end = Log::scan_read_only(fs, &log_dir, &options, sb.checkpoint_lsn, |record| {
        let lsn = record.lsn;
        match &record.body {
            RecordBody::FlushMark | RecordBody::Skip => {}
            RecordBody::Family { kind, flags, body } if *kind == AFTER_IMAGES => {
                summary.after_image_records += 1;
                if let Err(reason) = decode_after_images(*flags, body, page_size) {
                    summary
                        .problems
                        .push(format!("{}: after-image record: {reason}", at(lsn)));
                }
            }
            RecordBody::Family { kind, body, .. } if MULTI_LEVEL.contains(*kind) => {
                match decode_l1(*kind, body) {
                    None => summary.level0_records += 1,
                    Some(Err(reason)) => summary
                        .problems
                        .push(format!("{}: level-1 record: {reason}", at(lsn))),
                    Some(Ok(l1)) => {
                        if let Some(chain) = l1.chain() {
                            let seen = chains.entry(chain.txn).or_default();
                            // The previous record is either before the checkpoint (read by the
                            // restart along the chain) or one this scan saw.
                            let prev_ok = chain.prev == Lsn::ZERO
                                || chain.prev < sb.checkpoint_lsn
                                || seen.contains(&chain.prev);
                            if !prev_ok || chain.prev >= lsn {
                                summary.problems.push(format!(
                                    "{}: transaction {}: its previous level-1 record is said to be at {}, where it has none",
                                    at(lsn),
                                    chain.txn,
                                    chain.prev
                                ));
                            }
                            if ended.contains(&chain.txn) {
                                summary.problems.push(format!(
                                    "{}: transaction {}: a level-1 record after its end",
                                    at(lsn),
                                    chain.txn
                                ));
                            }
                            seen.insert(lsn);
                        }
                        match l1 {
                            L1Record::Undo(_) => summary.undo_records += 1,
                            L1Record::Compensated(_) => summary.compensation_records += 1,
                            L1Record::End(end) => {
                                if end.committed {
                                    summary.ends_committed += 1;
                                } else {
                                    summary.ends_aborted += 1;
                                }
                                ended.insert(end.chain.txn);
                            }
                            L1Record::Active(active) => {
                                summary.active_lists += 1;
                                // The list right after the checkpoint names the transactions
                                // that began before it.
                                if summary.active_lists == 1 {
                                    listed.extend(active.entries.iter().map(|e| e.txn));
                                }
                            }
                        }
                    }
                }
            }
            RecordBody::Commit => {
                summary.level0_records += 1;
                summary.commits += 1;
            }
            _ => summary.level0_records += 1,
        }
        Ok(())
    })?;
    summary.end_lsn = end.end.0;
    summary.torn_bytes = end.discarded_bytes;
    let unfinished: BTreeSet<TxnId> = chains
        .keys()
        .chain(listed.iter())
        .filter(|txn| !ended.contains(txn))
        .copied()
        .collect();
    summary.unfinished = unfinished.len() as u64;
    summary.unfinished_ids = unfinished
        .iter()
        .take(UNFINISHED_LISTED_MAX)
        .map(|t| t.0)
        .collect();
    Ok(summary)
}
