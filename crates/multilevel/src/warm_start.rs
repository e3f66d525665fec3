//! The warm start's undo pass (Hasse & Weikum section 2): after the forward pass has put back
//! the pages of every complete L0 write, the transactions with no end are losers, and each of
//! their subtransactions whose changes those pages hold is undone by running its inverse
//! operation as a compensating subtransaction, newest first.
//!
//! This module decides what to run from what the log says; it runs nothing. Feed it the
//! family's records as the log is read ([`Plan::undo`], [`Plan::compensated`],
//! [`Plan::durable`], [`Plan::ended`]) in any order, then ask for [`Plan::losers`].
//!
//! Rules, each for a reason:
//! - A subtransaction counts only when an EOS-flagged L0 write names it: before that its
//!   pages are not in the log, so the forward pass did not bring its changes back and
//!   running its inverse would undo what never happened (its L1 record is forced before its
//!   pages, so it may well be in the log alone).
//! - A subtransaction already compensated is skipped only when the compensating
//!   subtransaction is itself durable, by the same rule; a crash during an abort or during
//!   the warm start thus resumes where the log says it stopped, and the plan is the same
//!   however often the warm start is interrupted.
//! - Compensations are never compensated: they write no undo record.
//! - Losers' semantic locks were compatible when they ran, so the compensations of different
//!   losers commute; each loser's own are run newest first, as its operations may depend on
//!   one another.

use crate::records::{Compensated, OperationId, UndoRecord};
use lodestore_core::{Lsn, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};

/// A compensation to run: the inverse of what `sub` did, for loser `parent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compensation {
    pub parent: TxnId,
    pub sub: TxnId,
    /// Where the undo record is, for the compensation record that will say it was undone.
    pub undo_lsn: Lsn,
    pub inverse: OperationId,
    pub args: Vec<u8>,
}

/// A loser transaction and its compensations, newest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loser {
    pub txn: TxnId,
    pub compensations: Vec<Compensation>,
}

/// What the warm start has read so far.
#[derive(Debug, Default)]
pub struct Plan {
    undo: FxHashMap<TxnId, Vec<Compensation>>,
    compensated_by: FxHashMap<TxnId, Vec<TxnId>>,
    durable: FxHashSet<TxnId>,
    ended: FxHashSet<TxnId>,
}

impl Plan {
    pub fn new() -> Plan {
        Plan::default()
    }

    /// An L1 undo record, at `lsn`.
    pub fn undo(&mut self, lsn: Lsn, record: &UndoRecord<'_>) {
        let parent = record.chain.txn;
        self.undo.entry(parent).or_default().push(Compensation {
            parent,
            sub: record.sub,
            undo_lsn: lsn,
            inverse: record.inverse,
            args: record.args.to_vec(),
        });
    }

    /// An L1 record that `record.by` compensated `record.undone`.
    pub fn compensated(&mut self, record: &Compensated) {
        self.compensated_by
            .entry(record.undone)
            .or_default()
            .push(record.by);
    }

    /// An EOS-flagged L0 write made these subtransactions durable.
    pub fn durable(&mut self, subs: &[TxnId]) {
        self.durable.extend(subs);
    }

    /// Did an L0 write (or a commit) make `sub` durable?
    pub fn is_durable(&self, sub: TxnId) -> bool {
        self.durable.contains(&sub)
    }

    /// `txn` ended: committed (its commit record or an EOT flag), or aborted with every
    /// compensation done.
    pub fn ended(&mut self, txn: TxnId) {
        self.ended.insert(txn);
    }

    /// Transactions with undo records and no end, each with what is left to compensate, in
    /// order of transaction id.
    pub fn losers(&self) -> Vec<Loser> {
        let mut losers: Vec<Loser> = self
            .undo
            .iter()
            .filter(|(txn, _)| !self.ended.contains(txn))
            .map(|(&txn, records)| {
                let mut compensations: Vec<Compensation> = records
                    .iter()
                    .filter(|c| self.durable.contains(&c.sub) && !self.undone(c.sub))
                    .cloned()
                    .collect();
                // Records arrive in any order (a warm start reads some back along their
                // chain, newest first, after scanning the rest forwards).
                compensations.sort_unstable_by_key(|c| std::cmp::Reverse(c.undo_lsn));
                // A restart that rewrote the chain leaves two undo records of one operation
                // until its checkpoint: one compensation each, the newest record's.
                let mut seen = FxHashSet::default();
                compensations.retain(|c| seen.insert(c.sub));
                Loser { txn, compensations }
            })
            .collect();
        losers.sort_unstable_by_key(|l| l.txn);
        losers
    }

    fn undone(&self, sub: TxnId) -> bool {
        self.compensated_by
            .get(&sub)
            .is_some_and(|by| by.iter().any(|b| self.durable.contains(b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Chain;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const ADD: OperationId = OperationId(1);

    fn args(counter: u8, delta: i64) -> Vec<u8> {
        let mut a = vec![counter];
        a.extend_from_slice(&delta.to_le_bytes());
        a
    }

    fn apply(state: &mut BTreeMap<u8, i64>, c: &Compensation) {
        assert_eq!(c.inverse, ADD);
        let delta = i64::from_le_bytes(c.args[1..9].try_into().unwrap());
        *state.entry(c.args[0]).or_default() += delta;
    }

    #[test]
    fn a_subtransaction_whose_pages_never_reached_the_log_is_not_compensated() {
        let mut plan = Plan::new();
        let a = args(0, -5);
        let chain = Chain {
            txn: TxnId(1),
            prev: Lsn::ZERO,
        };
        plan.undo(
            Lsn(100),
            &UndoRecord {
                chain,
                sub: TxnId(11),
                inverse: ADD,
                args: &a,
            },
        );
        plan.undo(
            Lsn(200),
            &UndoRecord {
                chain,
                sub: TxnId(12),
                inverse: ADD,
                args: &a,
            },
        );
        plan.durable(&[TxnId(11)]);
        let losers = plan.losers();
        assert_eq!(losers.len(), 1);
        assert_eq!(losers[0].compensations.len(), 1);
        assert_eq!(losers[0].compensations[0].sub, TxnId(11));
        // A compensation whose own pages are not durable did not happen.
        plan.compensated(&Compensated {
            chain,
            by: TxnId(13),
            undone: TxnId(11),
            undo_lsn: Lsn(100),
        });
        assert_eq!(plan.losers()[0].compensations.len(), 1);
        plan.durable(&[TxnId(13)]);
        assert!(plan.losers()[0].compensations.is_empty());
        plan.ended(TxnId(1));
        assert!(plan.losers().is_empty());
    }

    /// One transaction of the model: its subtransactions' (counter, delta, durable), whether it
    /// committed, and how far an abort before the crash got (compensations tried, newest
    /// first, each durable or not).
    #[derive(Clone, Debug)]
    struct Txn {
        subs: Vec<(u8, i64, bool)>,
        committed: bool,
        abort_tries: Vec<bool>,
    }

    fn txn() -> impl Strategy<Value = Txn> {
        (
            proptest::collection::vec((0u8..4, -50i64..50, any::<bool>()), 1..6),
            any::<bool>(),
            proptest::collection::vec(any::<bool>(), 0..6),
        )
            .prop_map(|(mut subs, committed, abort_tries)| {
                if committed {
                    // A commit writes every subtransaction's pages (its sphere) first.
                    subs.iter_mut().for_each(|s| s.2 = true);
                }
                Txn {
                    subs,
                    committed,
                    abort_tries,
                }
            })
    }

    proptest! {
        /// Counters changed by increments in subtransactions of several transactions, a crash
        /// with any subset of them durable and aborts cut anywhere, then warm starts that are
        /// themselves cut anywhere: the counters end as the committed transactions alone made
        /// them, whatever was cut.
        #[test]
        fn compensations_restore_the_committed_state(
            txns in proptest::collection::vec(txn(), 1..6),
            cuts in proptest::collection::vec((0usize..12, proptest::collection::vec(any::<bool>(), 12)), 0..3),
        ) {
            let mut plan = Plan::new();
            let mut state: BTreeMap<u8, i64> = BTreeMap::new();
            let mut expect: BTreeMap<u8, i64> = BTreeMap::new();
            let mut next_sub = 1000u64;
            let mut lsn = 0u64;
            for (i, t) in txns.iter().enumerate() {
                let parent = TxnId(i as u64 + 1);
                let mut done = Vec::new();
                for &(counter, delta, durable) in &t.subs {
                    next_sub += 1;
                    lsn += 1;
                    let inverse = args(counter, -delta);
                    let chain = Chain { txn: parent, prev: Lsn::ZERO };
                    plan.undo(Lsn(lsn), &UndoRecord { chain, sub: TxnId(next_sub), inverse: ADD, args: &inverse });
                    if durable {
                        plan.durable(&[TxnId(next_sub)]);
                        *state.entry(counter).or_default() += delta;
                        done.push((TxnId(next_sub), Lsn(lsn), counter, delta));
                    }
                    if t.committed {
                        *expect.entry(counter).or_default() += delta;
                    }
                }
                if t.committed {
                    plan.ended(parent);
                    continue;
                }
                // An abort before the crash, compensating newest first, each compensation's
                // pages durable or not.
                for (&(sub, at, counter, delta), &durable) in done.iter().rev().zip(&t.abort_tries) {
                    next_sub += 1;
                    plan.compensated(&Compensated { chain: Chain { txn: parent, prev: Lsn::ZERO }, by: TxnId(next_sub), undone: sub, undo_lsn: at });
                    if durable {
                        plan.durable(&[TxnId(next_sub)]);
                        *state.entry(counter).or_default() -= delta;
                    }
                }
            }
            // Warm starts cut after `n` compensations, then one that runs to the end.
            for (n, durable) in cuts.iter().map(|(n, d)| (Some(*n), d.clone())).chain([(None, vec![true; 12])]) {
                let mut run = 0;
                'losers: for loser in plan.losers() {
                    for c in &loser.compensations {
                        if Some(run) == n {
                            break 'losers;
                        }
                        next_sub += 1;
                        plan.compensated(&Compensated { chain: Chain { txn: c.parent, prev: Lsn::ZERO }, by: TxnId(next_sub), undone: c.sub, undo_lsn: c.undo_lsn });
                        if durable[run % durable.len()] || n.is_none() {
                            plan.durable(&[TxnId(next_sub)]);
                            apply(&mut state, c);
                        }
                        run += 1;
                    }
                    if n.is_none() {
                        plan.ended(loser.txn);
                    }
                }
            }
            state.retain(|_, v| *v != 0);
            expect.retain(|_, v| *v != 0);
            prop_assert_eq!(state, expect);
            prop_assert!(plan.losers().is_empty());
        }
    }
}
