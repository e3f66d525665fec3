//! The restart driver: what every recovery method's restart shares. It first puts home any
//! page whose home write the crash tore, from its copy in the double-write file; scans the log
//! from the last checkpoint once (opening the log only found its end), handing each record to
//! the method's pass, so damage anywhere in it is reported before any redo; checks that the
//! scan began at a checkpoint; lets the method replay (repeat history and roll losers back,
//! or rebuild its table); then closes the same way for all: torn pages past the recorded end
//! of the file formatted again, the free-space map reloaded and its hints refreshed for the
//! pages recovery touched, and a checkpoint so that the next restart starts from here (unless
//! the log held only the quiet checkpoint of a clean close, which already does). A method
//! whose replay can simply be repeated (ESM) leaves its redone pages dirty in the pool for the
//! next checkpoint instead, when nothing else on disk needs mending: the store opens after one
//! log sync, not after a checkpoint's double write and syncs.

use super::{check_checkpoint_record, repair_unrecorded_tail, RestartReport};
use crate::server::{Server, State};
use lodestore_core::{Lsn, PageId, Result};
use lodestore_wal::{LogEnd, Record, RecordBody};
use std::collections::BTreeSet;
use std::time::Instant;

/// A recovery method's part of a restart.
pub(crate) trait RestartPass {
    /// The next record of the log from the checkpoint on, in log order.
    fn scanned(&mut self, record: Record);

    /// Brings the pages (and the method's state) back to every committed transaction and
    /// nothing else, once the scan has ended.
    fn replay(
        self: Box<Self>,
        server: &Server,
        state: &mut State,
        report: &mut RestartReport,
    ) -> Result<Replayed>;
}

/// What a method's replay leaves for the driver's closing steps.
#[derive(Default)]
pub(crate) struct Replayed {
    /// Pages whose free-space hints may be stale.
    pub touched: BTreeSet<PageId>,
    /// The largest transaction id the method found beyond the records' own (in a table it
    /// logged, say).
    pub txn_max: u64,
    /// The closing checkpoint writes everything committed home (the method keeps committed
    /// pages in the log, and the data file alone should be the store again).
    pub install_all: bool,
}

/// Restarts `server` from the checkpoint at `checkpoint`; `end` is where the log ends.
pub(crate) fn run(
    server: &Server,
    state: &mut State,
    checkpoint: Lsn,
    end: LogEnd,
) -> Result<RestartReport> {
    let started = Instant::now();
    let mut report = RestartReport {
        checkpoint_lsn: checkpoint.0,
        log_end: end.end.0,
        discarded_bytes: end.discarded_bytes,
        ..RestartReport::default()
    };
    // Before anything reads the data file: a home write the crash tore is completed from its
    // copy in the double-write file.
    report.pages_restored = u64::from(
        state
            .double_write
            .restore(&server.volume, checkpoint)?
            .pages_restored,
    );
    let mut pass = server.method.restart_pass();
    let mut level_one = crate::multilevel::RestartScan::new();
    let mut first: Option<Record> = None;
    let mut txn_max = 0;
    // Does the log hold nothing but a checkpoint with no transaction active (a clean close)?
    let mut only_a_quiet_checkpoint = end.discarded_bytes == 0;
    server.log.scan(checkpoint, |record| {
        report.records_scanned += 1;
        only_a_quiet_checkpoint &= match &record.body {
            RecordBody::CheckpointBegin { active } => active.is_empty(),
            RecordBody::CheckpointEnd { .. } | RecordBody::FlushMark => true,
            _ => false,
        };
        txn_max = txn_max.max(record.txn.map_or(0, |t| t.0));
        if let RecordBody::CheckpointBegin { active } = &record.body {
            txn_max = active.iter().map(|a| a.txn.0).fold(txn_max, u64::max);
        }
        if first.is_none() {
            first = Some(record.clone());
        }
        level_one.scanned(&record);
        pass.scanned(record);
        Ok(())
    })?;
    check_checkpoint_record(server, checkpoint, first.as_ref())?;
    state.next_txn = txn_max + 1;
    state.restart_lsn = checkpoint;

    let mut replayed = pass.replay(server, state, &mut report)?;
    state.next_txn = state.next_txn.max(replayed.txn_max + 1);
    // Pages are back (committed subtransactions redone, incomplete ones rolled back): the
    // level-1 losers can be told apart now.
    level_one.finish(server, state)?;

    report.pages_repaired = repair_unrecorded_tail(server, state)?;
    // Hints next: a torn map page is rebuilt here, and the checkpoint below writes it.
    state.space = crate::space::SpaceManager::load(&server.volume)?;
    // A map page rebuilt because its copy on disk was torn is dirty before any hint changes.
    let maps_rebuilt = state.space.has_dirty_maps();
    // A loser may have used pages of a file extension the crash took back: they are gone.
    let page_count = server.volume.page_count();
    replayed.touched.retain(|page| page.0 < page_count);
    let nothing_changed = only_a_quiet_checkpoint
        && report.pages_repaired == 0
        && report.pages_restored == 0
        && replayed.touched.is_empty()
        && !replayed.install_all
        && !state.space.has_dirty_maps()
        && superblock_copies_agree(server);
    server.refresh_hints(state, replayed.touched)?;
    let may_defer = server.method.restart_may_defer_checkpoint()
        && !replayed.install_all
        && report.pages_repaired == 0
        && report.pages_restored == 0
        && !maps_rebuilt
        // Unfinished multi-level transactions: the closing checkpoint lists them, with the
        // level-1 chains their warm start compensates along.
        && state.multilevel.parents.is_empty()
        && state.multilevel.warm_start.is_empty()
        && superblock_copies_agree(server);
    // After a clean close the last checkpoint already describes the store: another one would
    // only cost its syncs (five or so, on every open of a closed store).
    if nothing_changed {
        state.home_at_checkpoint = true;
    } else if may_defer {
        defer_checkpoint(server, state, checkpoint, &report)?;
        report.checkpoint_deferred = true;
    } else {
        server.checkpoint_locked_with(state, replayed.install_all)?;
    }
    report.elapsed_us = started.elapsed().as_micros() as u64;
    Ok(report)
}

/// Leaves the restart point where it is and the redone pages dirty in the pool: the next
/// checkpoint writes them (through the double-write file, as any). A second crash before it
/// replays the same log again, now with what the restart appended (compensations, ends),
/// which is made durable here so that the undo is not repeated from scratch. The records
/// replayed count toward the next checkpoint's bound, so the log to replay stays bounded.
fn defer_checkpoint(
    server: &Server,
    state: &mut State,
    checkpoint: Lsn,
    report: &RestartReport,
) -> Result<()> {
    server.log.flush_all()?;
    state.checkpoint_log_end = checkpoint;
    state.checkpoint_log_records = server.log.stats().records;
    state.checkpoint_records_carried = report.records_scanned;
    state.home_at_checkpoint = false;
    tracing::debug!(
        checkpoint = checkpoint.0,
        records = report.records_scanned,
        "restart left its pages to the next checkpoint"
    );
    Ok(())
}

/// Are both superblock copies readable and of the same generation? (A checkpoint rewrites a
/// damaged or older copy.)
fn superblock_copies_agree(server: &Server) -> bool {
    server
        .volume
        .superblock_copies()
        .is_ok_and(|found| matches!(&found.copies, [Ok(a), Ok(b)] if a.generation == b.generation))
}
