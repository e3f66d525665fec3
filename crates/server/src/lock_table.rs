//! Page locks for strict two-phase locking, with waiting and deadlock detection. Modes and their
//! compatibility are data (a matrix), so further modes (semantic locks of multi-level
//! transactions) are added as rows and columns, not as code.
//!
//! A request that conflicts waits. Waiters are served in order of arrival: a new request on a
//! page waits behind an earlier waiter whose mode it conflicts with, even where the holders
//! alone would let it in, so that a stream of shared requests cannot starve an exclusive one
//! (a conversion, shared to exclusive, waits for holders only: it goes ahead of the queue).
//! Before each wait the waits-for graph (holders and earlier waiters) is searched from the
//! requester; if the requester would close a cycle it is chosen as the victim and gets
//! `Error::Deadlock` at once. A wait longer than the timeout ends with `Error::LockTimeout`.
//! Both are retryable: the caller aborts and runs the transaction again.

use crate::interface::LockMode;
use lodestore_core::{Error, PageId, Result, TxnId};
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const MODE_COUNT: usize = 2;

/// `COMPATIBLE[held][requested]`: may `requested` be granted while another holds `held`?
const COMPATIBLE: [[bool; MODE_COUNT]; MODE_COUNT] = [
    // requested: Shared, Exclusive
    [true, false],  // held Shared
    [false, false], // held Exclusive
];

#[derive(Default)]
struct Table {
    holders: HashMap<PageId, Vec<(TxnId, LockMode)>>,
    held: HashMap<TxnId, Vec<PageId>>,
    waiting: HashMap<TxnId, Waiter>,
    /// Arrival order of waiters: the next waiter's ticket.
    next_ticket: u64,
    stats: LockStats,
}

/// A transaction waiting for a lock, and when it first waited for it.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    page: PageId,
    mode: LockMode,
    ticket: u64,
}

/// The ticket of a request that has not waited yet: behind every waiter.
const NOT_WAITING: u64 = u64::MAX;

pub struct LockManager {
    table: Mutex<Table>,
    changed: Condvar,
    timeout: Duration,
}

/// Counters of the lock manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockStats {
    pub waits: u64,
    pub deadlocks: u64,
    pub timeouts: u64,
}

impl Table {
    /// Who `txn` must wait for to get `mode` on `page`, having first waited with `ticket`:
    /// holders of a conflicting mode and, unless `txn` converts a lock it holds, earlier
    /// waiters for a conflicting mode.
    fn conflicts(&self, txn: TxnId, page: PageId, mode: LockMode, ticket: u64) -> Vec<TxnId> {
        let mut blockers = Vec::new();
        let mut converts = false;
        for &(t, held) in self.holders.get(&page).into_iter().flatten() {
            if t == txn {
                converts = true;
            } else if !COMPATIBLE[held as usize][mode as usize] {
                blockers.push(t);
            }
        }
        if !converts {
            blockers.extend(
                self.waiting
                    .iter()
                    .filter(|(t, w)| {
                        **t != txn
                            && w.page == page
                            && w.ticket < ticket
                            && !(COMPATIBLE[w.mode as usize][mode as usize]
                                && COMPATIBLE[mode as usize][w.mode as usize])
                    })
                    .map(|(t, _)| *t),
            );
        }
        blockers
    }

    /// `txn`'s ticket if it waits already.
    fn ticket(&self, txn: TxnId) -> u64 {
        self.waiting.get(&txn).map_or(NOT_WAITING, |w| w.ticket)
    }

    fn grant(&mut self, txn: TxnId, page: PageId, mode: LockMode) {
        let holders = self.holders.entry(page).or_default();
        match holders.iter_mut().find(|(t, _)| *t == txn) {
            Some(entry) => entry.1 = entry.1.max(mode),
            None => {
                holders.push((txn, mode));
                self.held.entry(txn).or_default().push(page);
            }
        }
    }

    fn holds(&self, txn: TxnId, page: PageId, mode: LockMode) -> bool {
        self.holders
            .get(&page)
            .is_some_and(|h| h.iter().any(|(t, m)| *t == txn && *m >= mode))
    }

    /// Would `txn` waiting for `blockers` close a cycle? Depth-first over waits-for edges.
    fn closes_cycle(&self, txn: TxnId, blockers: &[TxnId]) -> bool {
        let mut stack: Vec<TxnId> = blockers.to_vec();
        let mut seen: HashSet<TxnId> = HashSet::new();
        while let Some(t) = stack.pop() {
            if t == txn {
                return true;
            }
            if !seen.insert(t) {
                continue;
            }
            if let Some(w) = self.waiting.get(&t) {
                stack.extend(self.conflicts(t, w.page, w.mode, w.ticket));
            }
        }
        false
    }
}

impl LockManager {
    pub fn new(timeout: Duration) -> LockManager {
        LockManager {
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
            timeout,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Grants `mode` on `page` to `txn`, waiting while others hold conflicting locks or wait
    /// for them ahead of it.
    pub fn acquire(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<()> {
        let started = Instant::now();
        let mut table = self.lock();
        loop {
            if table.holds(txn, page, mode) {
                table.waiting.remove(&txn);
                return Ok(());
            }
            let ticket = table.ticket(txn);
            let blockers = table.conflicts(txn, page, mode, ticket);
            if blockers.is_empty() {
                let was_waiting = table.waiting.remove(&txn).is_some();
                table.grant(txn, page, mode);
                drop(table);
                if was_waiting {
                    // Requests behind this one that it held up may go now (the compatible
                    // ones).
                    self.changed.notify_all();
                }
                return Ok(());
            }
            if table.closes_cycle(txn, &blockers) {
                table.stats.deadlocks += 1;
                self.stop_waiting(table, txn);
                return Err(Error::Deadlock { page });
            }
            let waited = started.elapsed();
            if waited >= self.timeout {
                table.stats.timeouts += 1;
                self.stop_waiting(table, txn);
                return Err(Error::LockTimeout {
                    page,
                    waited_ms: waited.as_millis() as u64,
                });
            }
            if ticket == NOT_WAITING {
                let ticket = table.next_ticket;
                table.next_ticket += 1;
                table.waiting.insert(txn, Waiter { page, mode, ticket });
            }
            table.stats.waits += 1;
            table = self
                .changed
                .wait_timeout(table, self.timeout - waited)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// `txn` leaves the queue without its lock: those behind it may go.
    fn stop_waiting(&self, mut table: MutexGuard<'_, Table>, txn: TxnId) {
        let was_waiting = table.waiting.remove(&txn).is_some();
        drop(table);
        if was_waiting {
            self.changed.notify_all();
        }
    }

    /// Grants `mode` if nobody conflicts; never waits.
    pub fn try_acquire(&self, txn: TxnId, page: PageId, mode: LockMode) -> bool {
        let mut table = self.lock();
        if table.holds(txn, page, mode) {
            return true;
        }
        if table.conflicts(txn, page, mode, NOT_WAITING).is_empty() {
            table.grant(txn, page, mode);
            true
        } else {
            false
        }
    }

    pub fn holds(&self, txn: TxnId, page: PageId, mode: LockMode) -> bool {
        self.lock().holds(txn, page, mode)
    }

    /// Is `page` locked by anyone but `txn`?
    pub fn locked_by_other(&self, txn: TxnId, page: PageId) -> bool {
        self.lock()
            .holders
            .get(&page)
            .is_some_and(|h| h.iter().any(|(t, _)| *t != txn))
    }

    /// Releases every lock of `txn` and wakes the waiters.
    pub fn release_all(&self, txn: TxnId) {
        let mut table = self.lock();
        table.waiting.remove(&txn);
        let anyone_waiting = !table.waiting.is_empty();
        for page in table.held.remove(&txn).unwrap_or_default() {
            if let Some(holders) = table.holders.get_mut(&page) {
                holders.retain(|(t, _)| *t != txn);
                if holders.is_empty() {
                    table.holders.remove(&page);
                }
            }
        }
        drop(table);
        if anyone_waiting {
            self.changed.notify_all();
        }
    }

    pub fn locked_pages(&self) -> usize {
        self.lock().holders.len()
    }

    pub fn stats(&self) -> LockStats {
        self.lock().stats
    }

    /// Transactions waiting for a lock right now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn manager() -> LockManager {
        LockManager::new(Duration::from_secs(5))
    }

    /// Returns once `count` transactions wait for a lock (at most 5 s), so tests order
    /// threads by what they do, not by sleeping.
    fn until_waiting(locks: &LockManager, count: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while locks.waiting() < count {
            assert!(
                std::time::Instant::now() < deadline,
                "nobody started waiting"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn shared_compatible_exclusive_waits_for_release() {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let p = PageId(5);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        assert!(!locks.try_acquire(b, p, LockMode::Exclusive));
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                locks.acquire(b, p, LockMode::Exclusive).unwrap();
                locks.stats().waits
            })
        };
        until_waiting(&locks, 1);
        assert!(!locks.holds(b, p, LockMode::Exclusive));
        locks.release_all(a);
        assert!(waiter.join().unwrap() >= 1);
        assert!(locks.holds(b, p, LockMode::Exclusive));
        locks.release_all(b);
        assert_eq!(locks.locked_pages(), 0);
    }

    #[test]
    fn deadlock_picks_the_requester_that_closes_the_cycle() {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let (p, q) = (PageId(1), PageId(2));
        locks.acquire(a, p, LockMode::Exclusive).unwrap();
        locks.acquire(b, q, LockMode::Exclusive).unwrap();
        let first = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, q, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        let second = locks.acquire(b, p, LockMode::Exclusive);
        assert!(matches!(second, Err(Error::Deadlock { page }) if page == p));
        assert_eq!(locks.stats().deadlocks, 1);
        locks.release_all(b);
        first.join().unwrap().unwrap();
    }

    /// A conversion waiting for readers to leave is not starved by readers that keep coming:
    /// a new shared request waits behind it (and, closing a cycle there, is the victim).
    #[test]
    fn new_readers_queue_behind_a_waiting_conversion() {
        let locks = Arc::new(manager());
        let (a, b, c) = (TxnId(1), TxnId(2), TxnId(3));
        let p = PageId(9);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        let converting = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, p, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        // The holders alone would admit c; the queue does not.
        assert!(!locks.try_acquire(c, p, LockMode::Shared));
        let reader = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(c, p, LockMode::Shared))
        };
        until_waiting(&locks, 2);
        assert!(!locks.holds(c, p, LockMode::Shared));
        locks.release_all(b);
        converting.join().unwrap().unwrap();
        assert!(locks.holds(a, p, LockMode::Exclusive));
        locks.release_all(a);
        reader.join().unwrap().unwrap();
        assert!(locks.holds(c, p, LockMode::Shared));
    }

    /// Two holders of a shared lock that both convert: the second closes the cycle and is the
    /// victim; the first then gets its exclusive lock.
    #[test]
    fn two_conversions_on_one_page_make_one_victim() {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let p = PageId(3);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        let first = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, p, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        assert!(matches!(
            locks.acquire(b, p, LockMode::Exclusive),
            Err(Error::Deadlock { .. })
        ));
        locks.release_all(b);
        first.join().unwrap().unwrap();
        assert_eq!(locks.waiting(), 0);
    }

    #[test]
    fn waiting_times_out() {
        let locks = LockManager::new(Duration::from_millis(30));
        locks
            .acquire(TxnId(1), PageId(1), LockMode::Exclusive)
            .unwrap();
        let result = locks.acquire(TxnId(2), PageId(1), LockMode::Shared);
        assert!(matches!(result, Err(Error::LockTimeout { .. })));
        assert!(result.unwrap_err().is_retryable());
    }
}
