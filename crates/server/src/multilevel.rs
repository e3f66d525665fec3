//! Multi-level transactions at the server (Hasse & Weikum section 2): the level-1 (L1) log
//! beside whatever recovery method keeps the pages (level 0).
//!
//! A level-1 transaction (the parent) runs each high-level operation as a subtransaction: an
//! engine transaction of its own, whose page locks end at its commit (its EOS), so the
//! engine's recovery method makes each subtransaction atomic at the page level. What undoes
//! the operation (its inverse, with arguments) is noted before the subtransaction commits and
//! appended to the log just before its commit record, in the same critical section: the
//! subtransaction's changes are never durable without it, and a checkpoint never falls
//! between the two. The parent holds its semantic locks on objects to its end, which is an
//! L1 end record (forced at commit). Aborting the parent runs compensations first, each a
//! subtransaction noted as compensating one earlier subtransaction.
//!
//! L1 records carry their transaction in the body, not in the log header (see
//! `lodestore_multilevel::records`), so the recovery methods' restarts never see a parent:
//! after their restart has brought back every committed subtransaction and rolled back the
//! incomplete ones, `RestartScan` works out the losers from the L1 records and their
//! subtransactions' commit records, and leaves their compensations for the store to run.

use crate::lock_table::{mode_id, Owner, Resource};
use crate::server::{inactive, Server, State, TxnState};
use lodestore_core::{Error, Lsn, Oid, Result, TxnId};
use lodestore_loggen::UPDATE_RECORD_FIXED_BYTES;
use lodestore_multilevel::kinds::AFTER_IMAGES;
use lodestore_multilevel::records::{
    decode_after_images, decode_l1, ActiveEntry, ActiveTransactions, Chain, Compensated, L1Record,
    OperationId, TransactionEnd, UndoRecord,
};
use lodestore_multilevel::sphere::Spheres;
use lodestore_multilevel::warm_start::{Compensation, Loser, Plan};
use lodestore_protocol::increments::{self, FieldIncrement, IncrementsRan};
use lodestore_protocol::{LockMode, OperationNote, PageServer};
use lodestore_wal::{kinds::MULTI_LEVEL, Record, RecordBody};
use rustc_hash::FxHashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Compensates level-1 transaction `txn` (the compensations, newest first) and aborts it:
/// what a store installs (`Server::set_compensator`) for transactions whose client left.
pub type Compensator = Arc<dyn Fn(TxnId, Vec<Compensation>) -> Result<()> + Send + Sync>;

/// Largest encoded arguments of an inverse operation.
pub const OPERATION_ARGS_BYTES_MAX: usize = 1 << 20;

/// What the server keeps of a level-1 transaction that began subtransactions.
#[derive(Debug, Default)]
pub(crate) struct Parent {
    /// Its first and last L1 records (`Lsn::ZERO`: none yet).
    pub first: Lsn,
    pub last: Lsn,
    pub active_sub: Option<TxnId>,
    /// Completed subtransactions with an undo record, not yet compensated, and where their
    /// undo records are.
    pub to_compensate: BTreeMap<TxnId, Lsn>,
}

/// The server's multi-level state (in `State`).
#[derive(Debug, Default)]
pub(crate) struct MultiLevelState {
    pub parents: BTreeMap<TxnId, Parent>,
    /// The persistence spheres of the subtransactions since the last checkpoint: their size
    /// at each transaction's end is what strategy S2/PS makes durable there.
    pub spheres: Spheres,
    /// Losers the last restart found, for the store to compensate (`Server::warm_start`).
    pub warm_start: Vec<Loser>,
}

/// What a subtransaction logs at level 1 when it commits.
#[derive(Debug)]
pub(crate) enum PendingNote {
    Undo { inverse: OperationId, args: Vec<u8> },
    Compensates { undone: TxnId },
}

/// When a subtransaction whose commit was appended (not forced) gives up its page locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubRelease {
    /// Later, by `release_after_append` (or `wait_durable`, for S2's forced end), once the
    /// session has its answer: the client path.
    AfterAppend,
    /// In the same hold of the state as the append: increments run at the server, which
    /// has nothing left to do with the pages.
    InHold,
}

/// How often increments at the server wait for a page lock and take the state again before
/// they go on in a client's steps.
const ONE_HOLD_ATTEMPTS_MAX: u32 = 4;

impl Server {
    /// Starts a subtransaction of `parent` (see the module's comment).
    pub(crate) fn begin_subtransaction(&self, parent: TxnId) -> Result<TxnId> {
        self.refuse_main_memory_subtransactions()?;
        let sub = self.begin_sub_holding(&mut *self.usable_state()?, parent)?;
        self.locks.holds_briefly(sub);
        Ok(sub)
    }

    fn refuse_main_memory_subtransactions(&self) -> Result<()> {
        if self.recovery_method_kind().is_main_memory() {
            return Err(Error::Unsupported(format!(
                "subtransactions with the {} method: its commits go to log streams of their own",
                self.recovery_method()
            )));
        }
        Ok(())
    }

    /// [`Server::begin_subtransaction`] under a hold of the state, once the method is known
    /// to take subtransactions; the caller tells the lock manager (`holds_briefly`).
    fn begin_sub_holding(&self, state: &mut State, parent: TxnId) -> Result<TxnId> {
        let Some(own) = state.txns.get(&parent) else {
            return Err(Error::TransactionInactive {
                reason: format!("parent transaction {parent} is not active"),
            });
        };
        if own.parent.is_some() || own.as_of.is_some() {
            return Err(Error::InvalidArgument(format!(
                "transaction {parent} cannot have subtransactions: it is a subtransaction or reads as of a snapshot"
            )));
        }
        if self.method.has_changes(state, parent)
            || !own.allocated.is_empty()
            || !own.freed.is_empty()
        {
            // Its own changes would end with its level-1 end record, which no page-level
            // restart reads as a commit.
            return Err(Error::InvalidArgument(format!(
                "transaction {parent} changed pages itself: a level-1 transaction's pages are changed by its subtransactions"
            )));
        }
        let entry = state.multilevel.parents.entry(parent).or_default();
        if let Some(sub) = entry.active_sub {
            return Err(Error::InvalidArgument(format!(
                "transaction {parent} already runs subtransaction {sub}; they run one at a time"
            )));
        }
        let sub = TxnId(state.next_txn);
        state.next_txn += 1;
        state
            .multilevel
            .parents
            .get_mut(&parent)
            .expect("inserted")
            .active_sub = Some(sub);
        state.txns.insert(
            sub,
            TxnState {
                parent: Some(parent),
                ..TxnState::default()
            },
        );
        Ok(sub)
    }

    /// Locks objects for level-1 transaction `txn` (semantic locks, held to its end), with
    /// one check of the transaction before and one after: two holds of the state for all of
    /// them, not two each.
    pub(crate) fn lock_objects(&self, txn: TxnId, objects: &[(Oid, LockMode)]) -> Result<()> {
        for (oid, _) in objects {
            self.check_data_page(oid.page())?;
        }
        {
            let state = self.usable_state()?;
            let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
            if own.parent.is_some() {
                return Err(Error::InvalidArgument(format!(
                    "subtransaction {txn} locked objects: semantic locks belong to its level-1 transaction"
                )));
            }
            if own.as_of.is_some() {
                return Err(Error::InvalidArgument(format!(
                    "transaction {txn} reads as of a snapshot and takes no locks"
                )));
            }
        }
        for &(oid, mode) in objects {
            self.locks
                .lock_resource(Owner::top(txn), Resource::Object(oid), mode_id(mode))?;
        }
        // It may have ended (a deadlock victim's abort, its session closed) while it waited.
        if !self.usable_state()?.txns.contains_key(&txn) {
            self.locks.release_all(txn);
            return Err(inactive(txn));
        }
        Ok(())
    }

    /// A page lock `txn` was granted: a subtransaction's read joins the sphere of the page's
    /// writers. Under deferred page writes (`defers`) a flat transaction's does too, as a
    /// subtransaction of its own: its commit writes what it read.
    pub(crate) fn sub_locked_page(
        state: &mut State,
        txn: TxnId,
        page: lodestore_core::PageId,
        defers: bool,
    ) {
        match state.txns.get(&txn).map(|t| t.parent) {
            Some(Some(parent)) => state.multilevel.spheres.read(txn, parent, page),
            Some(None) if defers && !state.multilevel.parents.contains_key(&txn) => {
                state.multilevel.spheres.read(txn, txn, page)
            }
            _ => {}
        }
    }

    /// Deferred page writes with `ServerOptions::sphere_write_pages`: the sphere of `sub`, just
    /// ended, is written now (not forced) once it has grown to that many pages, so no
    /// transaction's end has to write a sphere much larger (the paper's remedy).
    pub(crate) fn write_large_sphere(&self, state: &mut State, sub: TxnId) -> Result<()> {
        let limit = self.options().sphere_write_pages;
        if limit == 0
            || !self.method.defers_page_writes()
            || state.multilevel.spheres.pages_of_sub(sub) < limit
        {
            return Ok(());
        }
        let sphere = state.multilevel.spheres.take_for_sub(sub);
        self.method.write_sphere(self, state, sphere, None, None)?;
        state.stats.spheres_written_early += 1;
        Ok(())
    }

    /// Deferred page writes, strategy S2: writes the sphere holding subtransaction `sub`'s
    /// changes (if no other write took it already) and returns the LSN to force the log to.
    pub(crate) fn write_sub_sphere(&self, sub: TxnId) -> Result<Lsn> {
        let mut state = self.usable_state()?;
        let sphere = state.multilevel.spheres.take_for_sub(sub);
        if !sphere.is_empty() {
            self.method
                .write_sphere(self, &mut state, sphere, None, None)?;
        }
        // An earlier write that took it precedes the log's end too.
        Ok(Lsn(self.log.end_lsn().0.saturating_sub(1)))
    }

    /// Refuses changes shipped by a level-1 transaction: its pages are changed by its
    /// subtransactions only (see `begin_subtransaction`).
    pub(crate) fn refuse_parent_changes(state: &State, txn: TxnId) -> Result<()> {
        if state.multilevel.parents.contains_key(&txn) {
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} has subtransactions: its pages are changed by them"
            )));
        }
        Ok(())
    }

    /// Notes what `sub` logs at level 1 when it commits.
    pub(crate) fn note(&self, sub: TxnId, note: OperationNote<'_>) -> Result<()> {
        Server::note_holding(&mut *self.usable_state()?, sub, note)
    }

    /// [`Server::note`] under a hold of the state.
    fn note_holding(state: &mut State, sub: TxnId, note: OperationNote<'_>) -> Result<()> {
        let own = state
            .txns
            .get(&sub)
            .ok_or_else(|| Error::TransactionInactive {
                reason: format!("subtransaction {sub} is not active"),
            })?;
        let Some(parent) = own.parent else {
            return Err(Error::InvalidArgument(format!(
                "transaction {sub} is not a subtransaction: only those note operations"
            )));
        };
        if own.note.is_some() {
            return Err(Error::InvalidArgument(format!(
                "subtransaction {sub} already noted its operation"
            )));
        }
        let pending = match note {
            OperationNote::Undo { inverse, args } => {
                if inverse == 0 {
                    return Err(Error::InvalidArgument(
                        "operation id 0 is never used".into(),
                    ));
                }
                if args.len() > OPERATION_ARGS_BYTES_MAX {
                    return Err(Error::InvalidArgument(format!(
                        "{} bytes of operation arguments, more than {OPERATION_ARGS_BYTES_MAX}",
                        args.len()
                    )));
                }
                PendingNote::Undo {
                    inverse: OperationId(inverse),
                    args: args.to_vec(),
                }
            }
            OperationNote::Compensates { undone } => {
                let waiting = state
                    .multilevel
                    .parents
                    .get(&parent)
                    .is_some_and(|p| p.to_compensate.contains_key(&undone));
                if !waiting {
                    return Err(Error::InvalidArgument(format!(
                        "subtransaction {undone} of transaction {parent} has nothing left to compensate"
                    )));
                }
                PendingNote::Compensates { undone }
            }
        };
        state.txns.get_mut(&sub).expect("checked").note = Some(pending);
        Ok(())
    }

    /// Appends the L1 record `txn` noted, if any (it is about to commit). Returns whether it
    /// had one.
    pub(crate) fn append_note(&self, state: &mut State, txn: TxnId) -> Result<bool> {
        let Some(own) = state.txns.get_mut(&txn) else {
            return Ok(false);
        };
        let (Some(parent), Some(note)) = (own.parent, own.note.take()) else {
            return Ok(false);
        };
        let entry = state.multilevel.parents.entry(parent).or_default();
        let chain = Chain {
            txn: parent,
            prev: entry.last,
        };
        let lsn = match &note {
            PendingNote::Undo { inverse, args } => {
                let record = UndoRecord {
                    chain,
                    sub: txn,
                    inverse: *inverse,
                    args,
                };
                let lsn = self.log.append(None, Lsn::ZERO, &record)?;
                entry.to_compensate.insert(txn, lsn);
                lsn
            }
            PendingNote::Compensates { undone } => {
                let undo_lsn = entry.to_compensate.remove(undone).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "subtransaction {undone} of transaction {parent} was compensated already"
                    ))
                })?;
                let record = Compensated {
                    chain,
                    by: txn,
                    undone: *undone,
                    undo_lsn,
                };
                self.log.append(None, Lsn::ZERO, &record)?
            }
        };
        if entry.first == Lsn::ZERO {
            entry.first = lsn;
        }
        entry.last = lsn;
        Ok(true)
    }

    /// Ends `txn` at level 1 if it has L1 records: appends its end record and returns its
    /// LSN (a commit waits for it to be durable). Refuses while a subtransaction runs, and an
    /// abort while subtransactions wait to be compensated.
    pub(crate) fn end_level_one(
        &self,
        state: &mut State,
        txn: TxnId,
        committed: bool,
    ) -> Result<Option<Lsn>> {
        let Some(parent) = state.multilevel.parents.get(&txn) else {
            return Ok(None);
        };
        if let Some(sub) = parent.active_sub {
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} cannot end while its subtransaction {sub} runs"
            )));
        }
        if !committed && !parent.to_compensate.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} has {} completed subtransactions not yet compensated; \
                 compensations run first, each as a subtransaction",
                parent.to_compensate.len()
            )));
        }
        let last = parent.last;
        let sphere = Server::sphere_ended(state, txn);
        // Deferred page writes: the sphere is written here, flagged EOT, before the end
        // record, which is never durable without it.
        let written = if self.method.defers_page_writes() {
            Some(
                self.method
                    .write_sphere(self, state, sphere, Some(txn), None)?,
            )
        } else {
            None
        };
        state.multilevel.parents.remove(&txn);
        if last == Lsn::ZERO {
            // No L1 record to end: its end at level 0 is the write, if there was one.
            return Ok(written);
        }
        let record = TransactionEnd {
            chain: Chain { txn, prev: last },
            committed,
        };
        Ok(Some(self.log.append(None, Lsn::ZERO, &record)?))
    }

    /// Level-1 transaction `txn` ended: its persistence sphere, taken out and counted, is what
    /// its commit makes durable (with writes not deferred the log's order already holds it:
    /// every subtransaction in it committed before the end record).
    fn sphere_ended(state: &mut State, txn: TxnId) -> lodestore_multilevel::sphere::Sphere {
        let sphere = state.multilevel.spheres.take_for_transaction(txn);
        let pages = sphere.pages.len() as u64;
        let stats = &mut state.stats;
        stats.spheres += 1;
        stats.sphere_pages += pages;
        stats.sphere_pages_max = stats.sphere_pages_max.max(pages);
        sphere
    }

    /// Subtransactions whose commit was appended and whose locks wait for
    /// `release_after_append` or `wait_durable` (at most one per session).
    pub(crate) fn subs_appended(&self) -> std::sync::MutexGuard<'_, FxHashSet<TxnId>> {
        self.subs_appended.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A subtransaction ended, committed: its changed pages join the spheres.
    pub(crate) fn sub_committed(state: &mut State, sub: TxnId, parent: TxnId) {
        let touched: Vec<_> = state
            .txns
            .get(&sub)
            .map(|t| t.touched.iter().copied().collect())
            .unwrap_or_default();
        state
            .multilevel
            .spheres
            .end_of_subtransaction(sub, parent, &touched);
        state.stats.subtransactions += 1;
    }

    /// Runs commuting increments as a subtransaction of `parent` (`PageServer::run_increments`):
    /// under S2/PS, when every page is in the pool and no other transaction holds its lock, in
    /// one hold of the state, the page locks taken and released inside it, so other
    /// subtransactions at the server never see them; otherwise, and under S2 or the
    /// database-cache method, in the steps a client takes.
    pub(crate) fn run_increments_here(
        &self,
        parent: TxnId,
        fields: &[FieldIncrement],
        undo: OperationNote<'_>,
        force: bool,
    ) -> Result<IncrementsRan> {
        if force || fields.len() > increments::INCREMENTS_MAX || self.method.defers_page_writes() {
            return increments::run_in_steps(self, parent, fields, undo, force);
        }
        let mut begun = None;
        match self.increments_in_one_hold(parent, &mut begun, fields, undo) {
            Ok(Some(ran)) => Ok(ran),
            Ok(None) => {
                let sub = begun.expect("a subtransaction begins before the pages are looked up");
                increments::run_in_steps_as(self, sub, fields, undo, false)
            }
            Err(e) => {
                if let Some(sub) = begun {
                    let _ = PageServer::abort(self, sub);
                }
                Err(e)
            }
        }
    }

    /// [`Server::run_increments_here`] in one hold of the state, which also begins the
    /// subtransaction (into `begun`); `None` when a page is not in the pool, or stays locked
    /// by another transaction (what the subtransaction was granted stays held). A page
    /// locked by another is waited for without the state, and the hold taken again.
    fn increments_in_one_hold(
        &self,
        parent: TxnId,
        begun: &mut Option<TxnId>,
        fields: &[FieldIncrement],
        undo: OperationNote<'_>,
    ) -> Result<Option<IncrementsRan>> {
        self.refuse_main_memory_subtransactions()?;
        let pages = increments::pages_of(fields);
        for (page, _) in &pages {
            self.check_data_page(*page)?;
        }
        let mut attempts = 0;
        let mut state = self.usable_state()?;
        let sub = self.begin_sub_holding(&mut state, parent)?;
        *begun = Some(sub);
        self.locks.holds_briefly(sub);
        let mut state = loop {
            if pages
                .iter()
                .any(|(page, _)| state.pool.lookup(*page).is_none())
            {
                return Ok(None);
            }
            let busy = pages
                .iter()
                .find(|(page, _)| !self.locks.try_acquire(sub, *page, LockMode::Exclusive));
            let Some(&(busy, _)) = busy else {
                break state;
            };
            // Most often another subtransaction between its end and its release: a wait
            // that spins, then the hold again (the locks granted so far are re-granted).
            drop(state);
            attempts += 1;
            if attempts > ONE_HOLD_ATTEMPTS_MAX {
                return Ok(None);
            }
            self.locks.acquire(sub, busy, LockMode::Exclusive)?;
            state = self.usable_state()?;
        };
        let mut frames = Vec::with_capacity(pages.len());
        for (page, _) in &pages {
            Server::sub_locked_page(&mut state, sub, *page, false);
            frames.push((*page, state.pool.lookup(*page).expect("checked above")));
            state.stats.pool_hits += 1;
        }
        // The changed fields go to the log as records of their own: no copy of the pages to
        // add on and diff against the pool's, which the hold would spend its time on.
        let pool = &state.pool;
        let frame = |page| {
            let &(_, frame) = frames.iter().find(|(p, _)| *p == page).expect("listed");
            pool.frame_bytes(frame)
        };
        let Some((updates, values)) =
            increments::field_updates(frame, fields, UPDATE_RECORD_FIXED_BYTES)?
        else {
            drop(state);
            PageServer::abort(self, sub)?;
            return Ok(Some(IncrementsRan::NotHere));
        };
        Server::note_holding(&mut state, sub, undo)?;
        let records: Vec<_> = updates.iter().collect();
        self.log_updates_holding(&mut state, sub, &records)?;
        self.ship_and_commit_holding(state, sub, &[], SubRelease::InHold)?;
        Ok(Some(IncrementsRan::Committed { sub, values }))
    }

    /// Releases a committed subtransaction's locks before its commit is durable (strategy
    /// S2/PS).
    pub(crate) fn release_sub(&self, sub: TxnId) -> Result<()> {
        if !self.subs_appended().remove(&sub) {
            return Err(Error::InvalidArgument(format!(
                "transaction {sub} is not a subtransaction whose commit was appended"
            )));
        }
        self.locks.release_all(sub);
        Ok(())
    }

    /// A transaction ended (`finish`): a subtransaction frees its parent for the next one; a
    /// parent is forgotten.
    pub(crate) fn multilevel_finished(state: &mut State, txn: TxnId, own: &TxnState) {
        match own.parent {
            Some(parent) => {
                if let Some(p) = state.multilevel.parents.get_mut(&parent) {
                    if p.active_sub == Some(txn) {
                        p.active_sub = None;
                    }
                }
            }
            None => {
                if state.multilevel.parents.remove(&txn).is_some() {
                    // A level-1 transaction whose end did not go through `end_level_one`
                    // (every end does, which writes a deferred sphere): counted only.
                    let _ = Server::sphere_ended(state, txn);
                }
                state.multilevel.warm_start.retain(|l| l.txn != txn);
            }
        }
    }

    /// The L1 record a checkpoint appends after its begin record, and the oldest L1 record
    /// the log must keep.
    pub(crate) fn multilevel_checkpoint(
        state: &mut State,
    ) -> (Option<ActiveTransactions>, Option<Lsn>) {
        // Everything so far is durable once the checkpoint ends: no sphere is left open.
        state.multilevel.spheres.take_all();
        let entries: Vec<ActiveEntry> = state
            .multilevel
            .parents
            .iter()
            .filter(|(_, p)| p.first != Lsn::ZERO)
            .map(|(&txn, p)| ActiveEntry {
                txn,
                first: p.first,
                last: p.last,
            })
            .collect();
        let oldest = entries.iter().map(|e| e.first).min();
        let record = (!entries.is_empty()).then_some(ActiveTransactions { entries });
        (record, oldest)
    }

    /// Writes loser `loser`'s chain of L1 records again: a copy of the undo record of each
    /// compensation still to run, oldest first, chained from none; the compensations now name
    /// the copies. Returns the new chain's first and last LSNs. (A crash before the restart's
    /// checkpoint leaves both the originals and the copies to the next restart, whose plan
    /// keeps one compensation per subtransaction.)
    fn relink(&self, loser: &mut Loser) -> Result<(Lsn, Lsn)> {
        let (mut first, mut prev) = (Lsn::ZERO, Lsn::ZERO);
        for c in loser.compensations.iter_mut().rev() {
            let lsn = self.log.append(
                None,
                Lsn::ZERO,
                &UndoRecord {
                    chain: Chain {
                        txn: loser.txn,
                        prev,
                    },
                    sub: c.sub,
                    inverse: c.inverse,
                    args: &c.args,
                },
            )?;
            c.undo_lsn = lsn;
            if first == Lsn::ZERO {
                first = lsn;
            }
            prev = lsn;
        }
        Ok((first, prev))
    }

    /// The losers the last restart left to compensate, newest compensation first within each.
    pub fn warm_start(&self) -> Vec<Loser> {
        self.lock_state().multilevel.warm_start.clone()
    }

    /// Does `txn` have level-1 records (a transaction of subtransactions)?
    pub fn is_level_one(&self, txn: TxnId) -> bool {
        self.lock_state().multilevel.parents.contains_key(&txn)
    }

    /// Installs what compensates a level-1 transaction whose client left (see
    /// [`Server::abandon`]).
    pub fn set_compensator(&self, compensator: Compensator) {
        *self.compensator.lock().unwrap_or_else(|e| e.into_inner()) = Some(compensator);
    }

    /// Ends `txn`, whose client is gone: aborts it, after compensating its completed
    /// subtransactions when it has any (through the installed compensator; without one it
    /// stays, holding its semantic locks, for the next warm start).
    pub fn abandon(&self, txn: TxnId) -> Result<()> {
        let pending = self.pending_compensations(txn)?;
        if pending.is_empty() {
            return self.abort(txn);
        }
        let compensator = self
            .compensator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match compensator {
            Some(compensate) => compensate(txn, pending),
            None => Err(Error::Unsupported(format!(
                "transaction {txn} has {} completed subtransactions to compensate and this                  server has no compensator: they wait for the next warm start",
                pending.len()
            ))),
        }
    }

    /// The compensations level-1 transaction `txn` still needs, newest first: the undo
    /// records of its completed subtransactions not compensated yet, read back from the log.
    pub fn pending_compensations(&self, txn: TxnId) -> Result<Vec<Compensation>> {
        let mut undo: Vec<(TxnId, Lsn)> = match self.lock_state().multilevel.parents.get(&txn) {
            Some(parent) => parent.to_compensate.iter().map(|(s, l)| (*s, *l)).collect(),
            None => return Ok(Vec::new()),
        };
        undo.sort_unstable_by_key(|&(_, lsn)| std::cmp::Reverse(lsn));
        let corrupt = |lsn: Lsn, reason: String| Error::CorruptLog {
            path: self.log_dir(),
            offset: lsn.0,
            reason: format!("undo record of transaction {txn} at LSN {lsn}: {reason}"),
        };
        undo.into_iter()
            .map(|(sub, lsn)| {
                let record = self.log.read(lsn)?;
                let RecordBody::Family { kind, body, .. } = &record.body else {
                    return Err(corrupt(lsn, "not a multi-level record".into()));
                };
                match decode_l1(*kind, body) {
                    Some(Ok(L1Record::Undo(u))) if u.sub == sub && u.chain.txn == txn => {
                        Ok(Compensation {
                            parent: txn,
                            sub,
                            undo_lsn: lsn,
                            inverse: u.inverse,
                            args: u.args.to_vec(),
                        })
                    }
                    Some(Err(reason)) => Err(corrupt(lsn, reason)),
                    _ => Err(corrupt(
                        lsn,
                        format!("not the undo record of subtransaction {sub}"),
                    )),
                }
            })
            .collect()
    }
}

/// The L1 side of a restart: fed every record the driver scans, then finished once the
/// recovery method has replayed the pages.
#[derive(Default)]
pub(crate) struct RestartScan {
    plan: Plan,
    /// Subtransactions with an L1 record in the scan: their commit record makes them durable.
    noted: FxHashSet<TxnId>,
    /// The L1 records of each transaction not ended, with the subtransaction each depends on
    /// (whose commit makes it count).
    records: BTreeMap<TxnId, Vec<(Lsn, TxnId)>>,
    ended: FxHashSet<TxnId>,
    at_checkpoint: Option<ActiveTransactions>,
    /// Records scanned so far, flush marks and padding not counted.
    scanned: u64,
    largest_id: u64,
    damage: Option<(Lsn, String)>,
}

impl RestartScan {
    pub(crate) fn new() -> RestartScan {
        RestartScan::default()
    }

    pub(crate) fn scanned(&mut self, record: &Record) {
        if !matches!(record.body, RecordBody::FlushMark | RecordBody::Skip) {
            self.scanned += 1;
        }
        match &record.body {
            RecordBody::Commit => {
                if let Some(txn) = record.txn {
                    if self.noted.contains(&txn) {
                        self.plan.durable(&[txn]);
                    }
                }
            }
            RecordBody::Family { kind, flags, body } if *kind == AFTER_IMAGES => {
                // A deferred write (the database-cache method): its EOS record makes the
                // subtransactions it names durable; its EOT flag ends a transaction.
                match decode_after_images(*flags, body, lodestore_core::limits::PAGE_SIZE_MAX) {
                    Ok(write) if write.eos => {
                        self.plan.durable(&write.subs);
                        if let Some(txn) = write.eot {
                            self.plan.ended(txn);
                            self.ended.insert(txn);
                            self.records.remove(&txn);
                        }
                    }
                    Ok(_) => {}
                    Err(reason) => {
                        self.damage.get_or_insert((record.lsn, reason));
                    }
                }
            }
            RecordBody::Family { kind, body, .. } if MULTI_LEVEL.contains(*kind) => {
                match decode_l1(*kind, body) {
                    None => {}
                    Some(Ok(l1)) => self.l1(record.lsn, &l1, false),
                    Some(Err(reason)) => {
                        self.damage.get_or_insert((record.lsn, reason));
                    }
                }
            }
            _ => {}
        }
    }

    /// One L1 record; `before_checkpoint`: read back along its chain, so its subtransaction
    /// committed before the checkpoint (its commit record follows it in the same critical
    /// section, and the checkpoint made both durable).
    fn l1(&mut self, lsn: Lsn, record: &L1Record<'_>, before_checkpoint: bool) {
        if let Some(chain) = record.chain() {
            self.largest_id = self.largest_id.max(chain.txn.0);
            let depends_on = match record {
                L1Record::Undo(undo) => Some(undo.sub),
                L1Record::Compensated(c) => Some(c.by),
                _ => None,
            };
            if let (Some(sub), false) = (depends_on, self.ended.contains(&chain.txn)) {
                self.records.entry(chain.txn).or_default().push((lsn, sub));
            }
        }
        match record {
            L1Record::Undo(undo) => {
                self.largest_id = self.largest_id.max(undo.sub.0);
                self.plan.undo(lsn, undo);
                self.durable_or_noted(undo.sub, before_checkpoint);
            }
            L1Record::Compensated(c) => {
                self.largest_id = self.largest_id.max(c.by.0);
                self.plan.compensated(c);
                self.durable_or_noted(c.by, before_checkpoint);
            }
            L1Record::End(end) => {
                self.plan.ended(end.chain.txn);
                self.ended.insert(end.chain.txn);
                self.records.remove(&end.chain.txn);
            }
            L1Record::Active(active) => {
                // Only the list right after the checkpoint the scan starts from: a later
                // checkpoint's (one the crash kept from the superblock) lists transactions
                // whose records the scan reads anyway.
                if self.scanned == 2 && !before_checkpoint {
                    self.at_checkpoint = Some(active.clone());
                }
            }
        }
    }

    fn durable_or_noted(&mut self, sub: TxnId, before_checkpoint: bool) {
        if before_checkpoint {
            self.plan.durable(&[sub]);
        } else {
            self.noted.insert(sub);
        }
    }

    /// Reads back the records of the transactions the checkpoint listed, works out the
    /// losers, ends those with nothing left to compensate, and registers the others as active
    /// parents for the store's warm start.
    pub(crate) fn finish(mut self, server: &Server, state: &mut State) -> Result<()> {
        let log_dir = server.log_dir();
        let corrupt = |lsn: Lsn, reason: String| Error::CorruptLog {
            path: log_dir.clone(),
            offset: lsn.0,
            reason: format!("multi-level record at LSN {lsn}: {reason}"),
        };
        if let Some((lsn, reason)) = self.damage.take() {
            return Err(corrupt(lsn, reason));
        }
        for entry in self
            .at_checkpoint
            .take()
            .map(|a| a.entries)
            .unwrap_or_default()
        {
            self.largest_id = self.largest_id.max(entry.txn.0);
            let mut next = entry.last;
            while next != Lsn::ZERO {
                let record = server.log.read(next)?;
                let RecordBody::Family { kind, body, .. } = &record.body else {
                    return Err(corrupt(
                        next,
                        "the chain leads to a record of another kind".into(),
                    ));
                };
                let l1 = match decode_l1(*kind, body) {
                    Some(Ok(l1)) => l1,
                    Some(Err(reason)) => return Err(corrupt(next, reason)),
                    None => {
                        return Err(corrupt(
                            next,
                            format!("the chain leads to a record of kind {kind}"),
                        ))
                    }
                };
                let chain = match l1.chain() {
                    Some(chain) if chain.txn == entry.txn && chain.prev < next => chain,
                    _ => {
                        return Err(corrupt(
                            next,
                            format!("not the next record back of transaction {}", entry.txn),
                        ))
                    }
                };
                if matches!(l1, L1Record::End(_)) {
                    return Err(corrupt(
                        next,
                        format!(
                            "transaction {} ended before the checkpoint that lists it",
                            entry.txn
                        ),
                    ));
                }
                self.l1(next, &l1, true);
                next = chain.prev;
            }
        }
        let mut losers = self.plan.losers();
        state.next_txn = state.next_txn.max(self.largest_id + 1);
        for loser in &mut losers {
            // The loser's chain goes on from its newest record that counts: one whose
            // subtransaction's commit the crash took stays out of it (that subtransaction was
            // rolled back at level 0), or a later warm start, reading the chain back from
            // before a checkpoint, would take it as committed.
            let mut chain = self.records.get(&loser.txn).cloned().unwrap_or_default();
            chain.sort_unstable();
            let counts = |sub: TxnId| self.plan.is_durable(sub);
            let counted: Vec<Lsn> = chain
                .iter()
                .filter(|(_, sub)| counts(*sub))
                .map(|(lsn, _)| *lsn)
                .collect();
            // Does a record that counts follow one that does not?
            let gap = chain
                .iter()
                .skip_while(|(_, sub)| counts(*sub))
                .any(|(_, sub)| counts(*sub));
            let (first, last) = if gap && !loser.compensations.is_empty() {
                // A record that does not count lies inside the chain, not only at its end
                // (deferred page writes make subtransactions durable out of log order): the
                // chain is written again, of the undo records still to run.
                server.relink(loser)?
            } else {
                (
                    counted.iter().copied().min().unwrap_or(Lsn::ZERO),
                    counted.iter().copied().max().unwrap_or(Lsn::ZERO),
                )
            };
            state.txns.insert(loser.txn, TxnState::default());
            state.multilevel.parents.insert(
                loser.txn,
                crate::multilevel::Parent {
                    first,
                    last,
                    active_sub: None,
                    to_compensate: loser
                        .compensations
                        .iter()
                        .map(|c| (c.sub, c.undo_lsn))
                        .collect(),
                },
            );
        }
        // Losers with nothing left to run end here.
        let mut waiting = Vec::new();
        for loser in losers {
            if loser.compensations.is_empty() {
                server.end_level_one(state, loser.txn, false)?;
                state.multilevel.parents.remove(&loser.txn);
                state.txns.remove(&loser.txn);
            } else {
                waiting.push(loser);
            }
        }
        if !waiting.is_empty() {
            tracing::info!(
                losers = waiting.len(),
                compensations = waiting.iter().map(|l| l.compensations.len()).sum::<usize>(),
                "multi-level transactions left to compensate"
            );
        }
        state.multilevel.warm_start = waiting;
        Ok(())
    }
}
