//! Whole-page logging at the server (QuickStore sections 3.4.2 and 3.4.3).
//!
//! Logging a change: every page a transaction ships is appended to the log as a whole image,
//! entered in the WPL table as uncommitted, and kept in the pool as a clean page: the home
//! location must never see it before its transaction commits, so the pool may drop it but
//! never write it back. A page evicted and used again is read back from the log.
//!
//! Commit: the commit record marks the transaction's copies committed; a copy still in the
//! pool is marked dirty there (the paper's "marked as having been read"), so eviction or a
//! checkpoint writes it home. Copies no longer in the pool are written home from the log by the
//! installer (`Server::install_committed`, run by a background thread, and by checkpoints for
//! copies older than the previous checkpoint, which bounds the log without one).
//!
//! Abort: nothing to undo; the transaction's copies are forgotten and the pool drops its pages.
//!
//! Checkpoint: the WPL table (uncommitted copies included, with their transactions) is logged
//! after the pool's committed pages were written home; the log is kept from its oldest copy.
//!
//! Restart: the records after the checkpoint are visited newest first, building the committed
//! transactions list from commit records; the newest image of each page by a committed
//! transaction enters the table. The checkpoint's table then adds, for pages still missing,
//! copies committed before it or by a transaction on the list. Nothing is redone or undone;
//! the restart's checkpoint writes every copy in the table home.

use super::restart::{Replayed, RestartPass};
use super::{apply_client_updates, RecoveryMethod, RecoveryMethodKind, RestartReport};
use crate::interface::PageUpdate;
use crate::server::{Server, State};
use crate::workers::BackgroundWorker;
mod deferred;
mod table;

use lodestore_core::{Lsn, PageId, Result, TxnId};
use lodestore_multilevel::kinds::AFTER_IMAGES;
use lodestore_multilevel::records::decode_after_images;
use lodestore_storage::page;
use lodestore_wal::{LoggedPage, Record, RecordBody};
use std::collections::{BTreeMap, BTreeSet};
use table::WplTable;

/// Whole-page logging; with `deferred`, the database-cache method (`dbcache`, see
/// `deferred.rs`): the same table, installer and restart, page changes logged in atomic writes
/// of persistence spheres instead of as they are shipped.
pub struct Wpl {
    pub deferred: bool,
}

/// The method's state in the engine's (`State::method_state`).
#[derive(Default)]
pub(crate) struct WplState {
    table: WplTable,
    deferred: deferred::Deferred,
}

/// Pages the background installer writes home per turn (a turn holds the server's state).
const INSTALL_BATCH_PAGES: usize = 32;

/// Whole-page logging's table, which it keeps in the engine's state.
fn wpl_state(state: &State) -> &WplState {
    state
        .method_state
        .downcast_ref()
        .expect("whole-page logging's state")
}

fn table(state: &State) -> &WplTable {
    &wpl_state(state).table
}

fn table_mut(state: &mut State) -> &mut WplTable {
    &mut state
        .method_state
        .downcast_mut::<WplState>()
        .expect("whole-page logging's state")
        .table
}

impl RecoveryMethod for Wpl {
    fn kind(&self) -> RecoveryMethodKind {
        if self.deferred {
            RecoveryMethodKind::Dbcache
        } else {
            RecoveryMethodKind::Wpl
        }
    }

    fn fresh_state(&self) -> Box<dyn std::any::Any + Send> {
        Box::new(WplState::default())
    }

    fn defers_page_writes(&self) -> bool {
        self.deferred
    }

    fn write_sphere(
        &self,
        server: &Server,
        state: &mut State,
        sphere: lodestore_multilevel::sphere::Sphere,
        ends: Option<TxnId>,
        evicted: Option<(PageId, &[u8])>,
    ) -> Result<Lsn> {
        assert!(self.deferred, "whole-page logging logs pages as they come");
        deferred::write_sphere(server, state, sphere, ends, evicted)
    }

    fn has_changes(&self, state: &State, txn: TxnId) -> bool {
        if self.deferred {
            wpl_state(state).deferred.has_changes(txn)
        } else {
            state
                .txns
                .get(&txn)
                .is_some_and(|own| own.last_lsn != Lsn::ZERO)
        }
    }

    /// Deferred: a flat transaction's commit is the write of its sphere, flagged EOT; a
    /// subtransaction's writes nothing (its pages join the spheres: `Server::sub_committed`),
    /// its commit point being the EOS record of the write that takes them.
    fn append_commit(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
    ) -> Result<Option<crate::interface::AppendedCommit>> {
        if !self.deferred {
            return Ok(None);
        }
        let pages = deferred::end(state, txn, true);
        let parent = state.txns.get(&txn).and_then(|own| own.parent);
        let lsn = match parent {
            Some(_) => Lsn(server.log.end_lsn().0.saturating_sub(1)),
            None => {
                let spheres = &mut state.multilevel.spheres;
                spheres.end_of_subtransaction(txn, txn, &pages);
                let sphere = spheres.take_for_transaction(txn);
                deferred::write_sphere(server, state, sphere, Some(txn), None)?
            }
        };
        Ok(Some(crate::interface::AppendedCommit {
            lsn,
            durable: false,
            stream: 0,
        }))
    }

    /// Deferred: a checkpoint first writes every sphere, so that every subtransaction whose
    /// L1 record precedes its begin record is durable.
    fn before_checkpoint(
        &self,
        server: &Server,
        state: &mut State,
        _install_all: bool,
    ) -> Result<()> {
        if self.deferred {
            let sphere = state.multilevel.spheres.take_all();
            if !sphere.is_empty() {
                deferred::write_sphere(server, state, sphere, None, None)?;
            }
        }
        Ok(())
    }

    /// A page's newest logged copy is newer than its home one until it is installed.
    fn newer_copy_in_log(&self, state: &State, page: PageId) -> Option<Lsn> {
        table(state).newest(page).map(|copy| copy.lsn)
    }

    /// A logged copy goes home only once its transaction's commit record is durable: before
    /// that, home must keep the committed version (no undo in this log).
    fn durable_before_home(&self, state: &State, page: PageId, lsn: Lsn) -> Lsn {
        let commit = table(state)
            .committed_at(page, lsn)
            .and_then(|copy| copy.commit_lsn);
        commit.map_or(lsn, |c| c.max(lsn))
    }

    /// A committed copy whose commit record is not yet durable (a subtransaction's, under
    /// S2/PS) goes home later from the log, by the installer: writing it at eviction would
    /// force the log first.
    fn may_evict_unwritten(&self, state: &State, page: PageId, lsn: Lsn, durable: Lsn) -> bool {
        table(state)
            .committed_at(page, lsn)
            .and_then(|copy| copy.commit_lsn)
            .is_some_and(|commit| commit >= durable)
    }

    fn written_home(&self, state: &mut State, page: PageId, lsn: Lsn) {
        table_mut(state).written_home(page, lsn);
    }

    fn background_workers(&self) -> Vec<BackgroundWorker> {
        vec![BackgroundWorker {
            name: "installer",
            turn: |server| Ok(server.install_committed(INSTALL_BATCH_PAGES)? == INSTALL_BATCH_PAGES),
        }]
    }

    fn installable(&self, state: &State) -> Vec<(PageId, Lsn)> {
        table(state)
            .committed_before(Lsn(u64::MAX))
            .into_iter()
            .map(|(page, copy)| (page, copy.lsn))
            .collect()
    }

    fn pages_awaiting_install(&self, state: &State) -> usize {
        table(state).len()
    }

    fn log_page_change(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn> {
        if self.deferred {
            return deferred::change_page(server, state, txn, page, image);
        }
        log_image(server, state, txn, page, image.to_vec())
    }

    fn log_client_updates(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        updates: &[PageUpdate<'_>],
    ) -> Result<Lsn> {
        // A client that logs its own changes gets them applied to the server's copy, which is
        // then logged whole like any shipped page.
        server.cache_page_in_change(state, page)?;
        let mut image = state.pool.get(page).expect("page just cached").to_vec();
        apply_client_updates(txn, page, &mut image, updates)?;
        if self.deferred {
            return deferred::change_page(server, state, txn, page, &image);
        }
        log_image(server, state, txn, page, image)
    }

    fn rollback(&self, server: &Server, state: &mut State, txn: TxnId) -> Result<()> {
        if self.deferred {
            // Nothing of it was logged: its before-images go back into the pool.
            deferred::end(state, txn, false);
            return Ok(());
        }
        let Some(own) = state.txns.get(&txn) else {
            return Ok(());
        };
        if own.last_lsn == Lsn::ZERO {
            return Ok(());
        }
        let abort = server
            .log
            .append(Some(txn), own.last_lsn, &RecordBody::Abort)?;
        let own = state.txns.get_mut(&txn).expect("checked");
        own.last_lsn = abort;
        let touched: Vec<PageId> = own.touched.iter().copied().collect();
        for page in touched {
            table_mut(state).abort(page, txn);
            // The pool's copy is the transaction's: never dirty, so dropping it loses nothing.
            debug_assert!(!state.pool.is_dirty(page));
            state.pool.remove(page);
        }
        Ok(())
    }

    /// Under whole-page logging the committed image is the committed copy in the log, or
    /// else the one at home (which only ever holds committed data).
    fn committed_images(
        &self,
        server: &Server,
        state: &mut State,
        _txn: TxnId,
        pages: &[PageId],
    ) -> Result<Vec<Vec<u8>>> {
        if self.deferred {
            return Err(lodestore_core::Error::Unsupported(
                "snapshots with the dbcache method: a page's committed image may wait unlogged in the pool"
                    .into(),
            ));
        }
        let mut images = Vec::with_capacity(pages.len());
        for &page in pages {
            let mut buf = vec![0u8; server.volume.page_size()];
            match table(state).committed(page) {
                Some(copy) => server.read_logged_image(page, copy.lsn, &mut buf)?,
                None => {
                    server.volume.read_page(page, &mut buf)?;
                }
            }
            images.push(buf);
        }
        Ok(images)
    }

    fn committed(&self, state: &mut State, txn: TxnId, commit_lsn: Lsn) {
        if self.deferred {
            // Its copies entered the table committed, at the write that logged them.
            return;
        }
        let Some(own) = state.txns.get(&txn) else {
            return;
        };
        let touched: Vec<PageId> = own.touched.iter().copied().collect();
        for page in touched {
            let Some(copy) = table_mut(state).commit(page, txn, commit_lsn) else {
                continue;
            };
            if state
                .pool
                .get(page)
                .is_some_and(|image| page::lsn(image) == copy.lsn)
            {
                state.pool.mark_dirty(page, copy.lsn);
            }
        }
    }

    fn home_writes_need_double_write(&self) -> bool {
        // A page is installed from its committed copy in the log, which stays there until the
        // installed page is synced: a torn install is done again from it.
        false
    }

    fn checkpoint(
        &self,
        server: &Server,
        state: &mut State,
        previous: Lsn,
        install_all: bool,
    ) -> Result<Option<Lsn>> {
        let before = if install_all { Lsn(u64::MAX) } else { previous };
        for (page, copy) in table(state).committed_before(before) {
            server.install_copy(state, page, copy.lsn)?;
        }
        let entries = table(state).entries();
        server
            .log
            .append(None, Lsn::ZERO, &RecordBody::LoggedPages { entries })?;
        Ok(table(state).oldest_lsn())
    }

    fn restart_pass(&self) -> Box<dyn RestartPass> {
        Box::new(WplRestart::default())
    }
}

/// Whole-page logging's restart. Our log links records forward only, so the scan lists them
/// (without their images); the paper's backward pass then runs over the list.
/// Deferred writes' after-image records are read the same way: each page of a write is an
/// image of the write's transaction (the record's header names it), and the EOS record is its
/// commit, so a write whose EOS record the crash took is not committed.
#[derive(Default)]
struct WplRestart {
    seen: Vec<Seen>,
    /// The table the checkpoint logged.
    at_checkpoint: Option<Vec<LoggedPage>>,
    /// The first after-image record that does not decode.
    damage: Option<(Lsn, String)>,
}

impl RestartPass for WplRestart {
    fn scanned(&mut self, record: Record) {
        match (record.body, record.txn) {
            (RecordBody::Family { kind, flags, body }, Some(txn)) if kind == AFTER_IMAGES => {
                match decode_after_images(flags, &body, lodestore_core::limits::PAGE_SIZE_MAX) {
                    Ok(write) => {
                        self.seen.extend(write.pages.iter().map(|image| Seen {
                            lsn: record.lsn,
                            txn,
                            page: Some(image.page),
                        }));
                        if write.eos {
                            self.seen.push(Seen {
                                lsn: record.lsn,
                                txn,
                                page: None,
                            });
                        }
                    }
                    Err(reason) => {
                        self.damage.get_or_insert((record.lsn, reason));
                    }
                }
            }
            (RecordBody::PageImage { page, .. }, Some(txn)) => self.seen.push(Seen {
                lsn: record.lsn,
                txn,
                page: Some(page),
            }),
            (RecordBody::Commit, Some(txn)) => self.seen.push(Seen {
                lsn: record.lsn,
                txn,
                page: None,
            }),
            (RecordBody::LoggedPages { entries }, _) if self.at_checkpoint.is_none() => {
                self.at_checkpoint = Some(entries);
            }
            _ => {}
        }
    }

    fn replay(
        self: Box<Self>,
        server: &Server,
        state: &mut State,
        report: &mut RestartReport,
    ) -> Result<Replayed> {
        if let Some((lsn, reason)) = self.damage {
            return Err(lodestore_core::Error::CorruptLog {
                path: server.log_dir(),
                offset: lsn.0,
                reason: format!("after-image record: {reason}"),
            });
        }
        // The backward pass: the committed transactions list, and each page's newest image by
        // a transaction on it.
        let mut committed: BTreeMap<TxnId, Lsn> = BTreeMap::new();
        let mut table = WplTable::default();
        let mut touched = BTreeSet::new();
        let mut losers = BTreeSet::new();
        for s in self.seen.iter().rev() {
            match s.page {
                None => {
                    committed.insert(s.txn, s.lsn);
                }
                Some(page) => {
                    touched.insert(page);
                    match committed.get(&s.txn) {
                        Some(&commit_lsn) => {
                            table.recover(page, s.txn, s.lsn, commit_lsn);
                        }
                        None => {
                            losers.insert(s.txn);
                        }
                    }
                }
            }
        }
        // Then the checkpoint's table, newest copy first, for pages the log after it did not
        // settle.
        let mut entries = self.at_checkpoint.unwrap_or_default();
        entries.sort_unstable_by_key(|e| std::cmp::Reverse(e.lsn));
        let mut txn_max = 0;
        for e in entries {
            txn_max = txn_max.max(e.txn.0);
            let commit_lsn = if e.committed {
                Some(e.lsn)
            } else {
                committed.get(&e.txn).copied()
            };
            match commit_lsn {
                Some(commit_lsn) => {
                    touched.insert(e.page);
                    table.recover(e.page, e.txn, e.lsn, commit_lsn);
                }
                None => {
                    losers.insert(e.txn);
                }
            }
        }
        report.images_installed = table.len() as u64;
        report.losers = losers.len() as u64;
        if let Some(last) = table.pages().last() {
            server.volume.extend_to(last.0 + 1)?;
        }
        *table_mut(state) = table;
        Ok(Replayed {
            touched,
            txn_max,
            // Installing everything the table holds leaves the data file alone the store
            // again, as after an ESM restart, so offline tools and `check` read what recovery
            // found.
            install_all: true,
        })
    }
}

/// A record the restart's backward pass looks at: a page image (`page`) or a commit.
struct Seen {
    lsn: Lsn,
    txn: TxnId,
    page: Option<PageId>,
}

/// Appends `image` of `page` to the log for `txn`, enters it in the WPL table, and puts it in
/// the pool as a clean page stamped with the record's LSN.
fn log_image(
    server: &Server,
    state: &mut State,
    txn: TxnId,
    page: PageId,
    mut image: Vec<u8>,
) -> Result<Lsn> {
    let own = state
        .txns
        .get(&txn)
        .expect("caller checked the transaction");
    // The LSN field is the server's: zero it so the stored image does not carry a stale one.
    page::set_lsn(&mut image, Lsn::ZERO);
    let body = RecordBody::PageImage { page, image };
    let lsn = server.log.append(Some(txn), own.last_lsn, &body)?;
    let RecordBody::PageImage { image: mut buf, .. } = body else {
        unreachable!("built above as a page image")
    };
    page::set_lsn(&mut buf, lsn);
    state.stats.page_images_logged += 1;
    let own = state.txns.get_mut(&txn).expect("checked");
    if own.first_lsn == Lsn::ZERO {
        own.first_lsn = lsn;
    }
    own.last_lsn = lsn;
    own.touched.insert(page);
    table_mut(state).logged(page, txn, lsn);
    if !state.pool.contains(page) {
        server.install(state, page, &buf)?;
    }
    let frame = state.pool.get_mut(page).expect("page just installed");
    frame.copy_from_slice(&buf);
    // Uncommitted: the home location must not get it, whatever the pool held before.
    state.pool.mark_clean(page);
    Ok(lsn)
}
