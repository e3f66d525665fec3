//! Differential logging (Lee, Kim & Cha): a main-memory method. Every page stays in the pool;
//! changes are logged as XOR deltas (`dl1p`, `dl2p`) or, for the paper's baseline, as before
//! and after images with serial numbers (`pl2p`), each transaction's records in one of several
//! log streams (the idlest when it first logs); fuzzy checkpoints write the changed pages to
//! two backup images in turn; restart loads the last complete checkpoint's backup and replays
//! the streams (`lodestore_difflog::restart`). The data file is written only when everything
//! must be home (a clean close, a change of method), so offline tools read a closed store as
//! under any method.
//!
//! The records, the restarts and the reasoning about which change a backup holds live in the
//! `lodestore-difflog` crate; this module is the engine's side: logging what clients ship,
//! aborts, commits into streams, the checkpoint's steps, and loading the backup at restart.

mod checkpoint;
pub mod inspect;
mod restart;
pub(crate) mod state;

use super::{apply_client_updates, revert_client_updates, RecoveryMethod, RecoveryMethodKind};
use crate::interface::{AppendedCommit, PageUpdate};
use crate::server::{Server, State};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_difflog::kinds::{PHYSICAL_CHANGES, XOR_CHANGES};
use lodestore_difflog::physical::{self, PhysicalRecordBuilder};
use lodestore_difflog::xor::{self, XorRecordBuilder};
use lodestore_loggen::{page_ranges, UPDATE_RECORD_FIXED_BYTES};
use lodestore_storage::page;
use lodestore_wal::RecordBody;
use state::{DlState, DlTxn, PendingRecord, Streams, PENDING_BYTES_MAX};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Pages a checkpoint step copies at most while it holds the server's state.
pub(crate) const CHECKPOINT_STEP_PAGES: usize = 64;

/// Serves `dl1p`, `dl2p` and `pl2p`: they log, abort and checkpoint alike and differ in the
/// record (XOR or physical) and in how restart replays the streams.
pub(crate) struct Differential {
    pub kind: RecoveryMethodKind,
    streams: OnceLock<Arc<Streams>>,
}

impl Differential {
    pub fn new(kind: RecoveryMethodKind) -> Differential {
        Differential {
            kind,
            streams: OnceLock::new(),
        }
    }

    /// Does the method log XOR deltas (rather than the baseline's physical images)?
    fn logs_xor(&self) -> bool {
        self.kind != RecoveryMethodKind::Pl2p
    }

    fn streams(&self) -> &Arc<Streams> {
        self.streams
            .get()
            .expect("differential logging is attached before it logs")
    }

    /// Logs changes already applied to the pool's copy of `page` (their before bytes given)
    /// in `txn`'s record: kept by the transaction until it commits or the record grows past
    /// [`PENDING_BYTES_MAX`], appended at once while a checkpoint runs (the checkpoint may
    /// copy the page into its backup at any step, and a change in a backup must be in a
    /// stream). Returns the page's new version.
    fn log_changes(
        &self,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        updates: &[PageUpdate<'_>],
    ) -> Result<Lsn> {
        let streams = self.streams();
        let dl = dl_mut(state);
        if !dl.txns.contains_key(&txn) {
            let stream = streams.idlest(&dl.writers);
            dl.writers[stream] += 1;
            dl.txns.insert(
                txn,
                DlTxn {
                    stream,
                    first: Lsn::ZERO,
                    last: Lsn::ZERO,
                    pending: None,
                },
            );
        }
        let backup_id = dl.backup_id_of(page);
        let xor = self.logs_xor();
        let t = dl.txns.get_mut(&txn).expect("inserted above");
        let pending = t.pending.get_or_insert_with(|| {
            if xor {
                PendingRecord::Xor(XorRecordBuilder::new())
            } else {
                PendingRecord::Physical(PhysicalRecordBuilder::changes(0))
            }
        });
        match pending {
            PendingRecord::Xor(record) => {
                for u in updates {
                    record.push_change(page, u.offset as usize, backup_id, u.before, u.after);
                }
            }
            PendingRecord::Physical(record) => {
                for u in updates {
                    record.push(page, u.offset as usize, u.before, u.after);
                }
            }
        }
        if dl.running.is_some() || pending.body_len() >= PENDING_BYTES_MAX {
            dl.append_pending(txn)?;
        }
        dl.changed(page);
        let version = dl.version();
        let current = state.pool.get_mut(page).expect("changed page is cached");
        page::set_lsn(current, version);
        state.pool.mark_dirty(page, version);
        if let Some(own) = state.txns.get_mut(&txn) {
            own.touched.insert(page);
        }
        Ok(version)
    }

    /// Hands every change range of `txn` to `undo` (page, offset, the delta or the before
    /// bytes), newest first: those it has not appended, then its records in its stream.
    fn undo_ranges(
        &self,
        t: &DlTxn,
        txn: TxnId,
        mut undo: impl FnMut(PageId, usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        if let Some(pending) = &t.pending {
            pending.undo(&mut undo)?;
        }
        self.walk_back(t.stream, txn, t.last, undo)
    }

    /// Walks `txn`'s records back from `last` in `stream`, handing each change range to
    /// `undo` (page, offset, the delta or the before bytes), newest record first.
    fn walk_back(
        &self,
        stream: usize,
        txn: TxnId,
        last: Lsn,
        mut undo: impl FnMut(PageId, usize, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let log = &self.streams().logs[stream];
        let mut at = last;
        while at != Lsn::ZERO {
            let record = log.read(at)?;
            let corrupt = |reason: String| Error::CorruptLog {
                path: log_path(log),
                offset: at.0,
                reason,
            };
            if record.txn != Some(txn) || record.prev >= record.lsn {
                return Err(corrupt(format!(
                    "transaction {txn}'s chain of records is broken here"
                )));
            }
            if let RecordBody::Family { kind, flags, body } = &record.body {
                match *kind {
                    XOR_CHANGES => {
                        for range in xor::ranges(*flags, body) {
                            let range = range.map_err(corrupt)?;
                            undo(range.page, range.offset as usize, range.delta)?;
                        }
                    }
                    PHYSICAL_CHANGES => {
                        let (_, ranges) = physical::parse(*kind, *flags, body).map_err(corrupt)?;
                        for range in ranges.iter().rev() {
                            undo(range.page, range.offset as usize, range.before)?;
                        }
                    }
                    _ => {}
                }
            }
            at = record.prev;
        }
        Ok(())
    }

    /// Applies an undo range to `image` (a page): XOR the delta, or write the before bytes.
    fn undo_into(&self, image: &mut [u8], offset: usize, bytes: &[u8]) -> Result<()> {
        let target = image.get_mut(offset..offset + bytes.len()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "an undo range of {} bytes at offset {offset} runs past its page",
                bytes.len()
            ))
        })?;
        if self.logs_xor() {
            xor::xor_into(target, bytes);
        } else {
            target.copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Ends `txn`'s bookkeeping in its stream.
    fn forget(state: &mut State, txn: TxnId) -> Option<DlTxn> {
        let dl = dl_mut(state);
        let t = dl.txns.remove(&txn)?;
        dl.writers[t.stream] -= 1;
        Some(t)
    }
}

pub(crate) fn dl(state: &State) -> &DlState {
    state
        .method_state
        .downcast_ref()
        .expect("differential logging's state is attached")
}

pub(crate) fn dl_mut(state: &mut State) -> &mut DlState {
    state
        .method_state
        .downcast_mut()
        .expect("differential logging's state is attached")
}

fn log_path(log: &lodestore_wal::Log) -> std::path::PathBuf {
    log.dir().to_path_buf()
}

impl RecoveryMethod for Differential {
    fn kind(&self) -> RecoveryMethodKind {
        self.kind
    }

    fn attach(&self, server: &Server, state: &mut State) -> Result<()> {
        let (streams, dl) = checkpoint::attach(self.kind, server, state)?;
        if self.streams.set(streams).is_err() {
            return Err(Error::InvalidArgument(
                "differential logging was attached twice".into(),
            ));
        }
        state.method_state = Box::new(dl);
        Ok(())
    }

    fn detach(&self, server: &Server) -> Result<()> {
        // Safe at any point: a crash before the superblock names the new method reopens with
        // this one, which finds no anchor and starts its files afresh from the data file,
        // complete since the checkpoint that preceded the switch.
        let dir = server.dir.join(state::DIFFERENTIAL_DIR_NAME);
        if server.fs.is_dir(&dir) {
            server.fs.remove_dir_all(&dir)?;
        }
        Ok(())
    }

    fn checkpoint_asked(&self, server: &Server, state: &mut State) -> Result<()> {
        checkpoint::complete(server, state)
    }

    fn keeps_pages_resident(&self) -> bool {
        true
    }

    fn checkpoint_writes_home(&self, install_all: bool) -> bool {
        install_all
    }

    fn home_writes_need_double_write(&self) -> bool {
        // Home is written only once every stream and backup is durable (a clean close or a
        // change of method): the backups, not the data file, are what a restart reads.
        false
    }

    fn durable_before_home(&self, _state: &State, _page: PageId, _lsn: Lsn) -> Lsn {
        Lsn::ZERO
    }

    fn before_checkpoint(
        &self,
        server: &Server,
        state: &mut State,
        install_all: bool,
    ) -> Result<()> {
        if install_all {
            checkpoint::complete(server, state)?;
            // The data file gets pages with no LSN: to any method that reads it next they are
            // fresh, their first change logged whole (versions are not log positions).
            for page in state.pool.dirty_pages() {
                let image = state.pool.get_mut(page.0).expect("dirty page cached");
                page::set_lsn(image, Lsn::ZERO);
            }
        }
        Ok(())
    }

    fn stream_stats(&self) -> Vec<lodestore_wal::LogStats> {
        self.streams
            .get()
            .map_or_else(Vec::new, |s| s.logs.iter().map(|l| l.stats()).collect())
    }

    fn has_changes(&self, state: &State, txn: TxnId) -> bool {
        dl(state).txns.contains_key(&txn)
    }

    fn log_page_change(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn> {
        server.cache_page_in_change(state, page)?;
        let old = state.pool.get(page).expect("page just cached").to_vec();
        let ranges = page_ranges(&old, image, UPDATE_RECORD_FIXED_BYTES);
        if ranges.is_empty() {
            return Ok(page::lsn(&old));
        }
        let updates: Vec<PageUpdate<'_>> = ranges
            .iter()
            .map(|r| PageUpdate {
                page,
                offset: r.start as u32,
                before: &old[r.clone()],
                after: &image[r.clone()],
            })
            .collect();
        let current = state.pool.get_mut(page).expect("page cached");
        for r in &ranges {
            current[r.clone()].copy_from_slice(&image[r.clone()]);
        }
        let logged = self.log_changes(state, txn, page, &updates);
        if logged.is_err() {
            state
                .pool
                .get_mut(page)
                .expect("page cached")
                .copy_from_slice(&old);
        }
        logged
    }

    fn log_client_updates(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        updates: &[PageUpdate<'_>],
    ) -> Result<Lsn> {
        server.cache_page_in_change(state, page)?;
        let current = state.pool.get_mut(page).expect("page just cached");
        apply_client_updates(txn, page, current, updates)?;
        let logged = self.log_changes(state, txn, page, updates);
        if logged.is_err() {
            revert_client_updates(state.pool.get_mut(page).expect("page cached"), updates);
        }
        logged
    }

    /// Undoes in memory. XOR logging writes only an abort record, unforced (a later change
    /// of the same bytes commutes with the undone delta), except while a checkpoint runs: the
    /// undo may then reach the backup or not, so it is logged as XOR records that carry the
    /// pages' BackupIDs, which restart's rule places like any change. The physical baseline
    /// logs compensation records and forces its stream before the locks are released.
    fn rollback(&self, server: &Server, state: &mut State, txn: TxnId) -> Result<()> {
        let Some(t) = Self::forget(state, txn) else {
            return Ok(());
        };
        let mut undone: Vec<(PageId, usize, Vec<u8>)> = Vec::new();
        self.undo_ranges(&t, txn, |page, offset, bytes| {
            undone.push((page, offset, bytes.to_vec()));
            Ok(())
        })?;
        let running = dl(state).running.is_some();
        let mut xor_record = XorRecordBuilder::new();
        let mut compensation = PhysicalRecordBuilder::compensation(0);
        for (page, offset, bytes) in &undone {
            server.cache_page_in_change(state, *page)?;
            let image = state.pool.get_mut(*page).expect("page cached");
            let current = image
                .get(*offset..*offset + bytes.len())
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "transaction {txn} changed bytes {offset}.. of page {page} past its end"
                    ))
                })?
                .to_vec();
            self.undo_into(image, *offset, bytes)?;
            if self.logs_xor() {
                if running {
                    let backup_id = dl(state).backup_id_of(*page);
                    xor_record.push_delta(xor::XorRange {
                        page: *page,
                        offset: *offset as u16,
                        backup_id,
                        delta: bytes,
                    });
                }
            } else {
                compensation.push(*page, *offset, &current, bytes);
            }
            let dl = dl_mut(state);
            dl.changed(*page);
            let version = dl.version();
            let image = state.pool.get_mut(*page).expect("page cached");
            page::set_lsn(image, version);
            state.pool.mark_dirty(*page, version);
        }
        if t.last == Lsn::ZERO {
            // Nothing reached a stream: nothing there to end (XOR), nothing to compensate.
            debug_assert!(xor_record.is_empty());
            return Ok(());
        }
        let log = &self.streams().logs[t.stream];
        let mut last = t.last;
        if !xor_record.is_empty() {
            last = log.append(Some(txn), last, &xor_record)?;
        }
        if !self.logs_xor() && !undone.is_empty() {
            let dl = dl_mut(state);
            compensation.set_serial(dl.next_serial);
            dl.next_serial += 1;
            last = log.append(Some(txn), last, &compensation)?;
        }
        let abort = log.append(Some(txn), last, &RecordBody::Abort)?;
        if !self.logs_xor() {
            log.flush(abort)?;
        }
        Ok(())
    }

    fn append_commit(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
    ) -> Result<Option<AppendedCommit>> {
        let t = Self::forget(state, txn).ok_or_else(|| {
            Error::InvalidArgument(format!("transaction {txn} logged nothing to commit"))
        })?;
        let log = &self.streams().logs[t.stream];
        // The transaction's last changes carry its commit: one record, one header.
        let lsn = match t.pending {
            Some(pending) => {
                pending.append(log, txn, t.last, true, &mut dl_mut(state).next_serial)?
            }
            None => log.append(Some(txn), t.last, &RecordBody::Commit)?,
        };
        checkpoint::progress(server, state, CHECKPOINT_STEP_PAGES)?;
        Ok(Some(AppendedCommit {
            lsn,
            durable: false,
            stream: (t.stream + 1) as u16,
        }))
    }

    fn flush_commit(&self, commit: AppendedCommit, delay: Duration) -> Result<()> {
        let log = (commit.stream as usize)
            .checked_sub(1)
            .and_then(|s| self.streams().logs.get(s))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("no log stream {} to flush", commit.stream))
            })?;
        log.flush_after(commit.lsn, delay)
    }

    fn background_workers(&self) -> Vec<crate::workers::BackgroundWorker> {
        vec![crate::workers::BackgroundWorker {
            name: "checkpointer",
            turn: checkpoint::worker_turn,
        }]
    }

    fn restart_pass(&self) -> Box<dyn super::restart::RestartPass> {
        Box::new(restart::DlRestart {
            streams: self.streams().clone(),
        })
    }

    /// The pool's copies with `txn`'s changes undone, walking its records back (nothing is
    /// logged: the copies are for reading).
    fn committed_images(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        pages: &[PageId],
    ) -> Result<Vec<Vec<u8>>> {
        let mut images = std::collections::BTreeMap::new();
        for &page in pages {
            server.cache_page_in_change(state, page)?;
            images.insert(page, state.pool.get(page).expect("page cached").to_vec());
        }
        if let Some(t) = dl(state).txns.get(&txn) {
            self.undo_ranges(t, txn, |page, offset, bytes| match images.get_mut(&page) {
                Some(image) => self.undo_into(image, offset, bytes),
                None => Ok(()),
            })?;
        }
        Ok(pages
            .iter()
            .map(|p| images.remove(p).expect("filled above"))
            .collect())
    }
}
