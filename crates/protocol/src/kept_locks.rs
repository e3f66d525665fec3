//! Shared page locks a session keeps from one transaction to the next (callback locking).
//!
//! QuickStore's client keeps pages in its cache across transactions but asks the server for a
//! lock on each page again in every transaction, and checks its copy is still current. A
//! session that keeps its shared locks instead reads a page it read in an earlier transaction
//! without asking anyone: while the lock is kept nobody else can change the page, so the
//! cached copy validated under it is current. A writer that needs the page calls the lock
//! back: the server drops the kept lock at once when the session is not using it, or waits for
//! the end of the session's transaction when it is.
//!
//! This is the one structure both sides touch: the session under [`KeptLocks::lock`] only, the
//! server's lock manager under its table's lock and then this one (never the other order).

use lodestore_core::{PageId, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::{Mutex, MutexGuard};

/// The shared locks one session keeps, and which of them its running transaction relies on.
#[derive(Debug)]
pub struct KeptLocks {
    /// The lock owner the server files the kept locks under, distinct from every transaction.
    id: TxnId,
    /// At most this many pages are kept (the session's cache holds no more).
    limit: usize,
    inner: Mutex<KeptState>,
}

/// What [`KeptLocks`] guards.
#[derive(Debug, Default)]
pub struct KeptState {
    /// Each kept page, with the transaction under whose lock the session's copy of it was last
    /// validated: the copy is current while the lock stays kept.
    pub pages: FxHashMap<PageId, TxnId>,
    /// The session's transaction now running, which may read kept pages.
    pub active: Option<TxnId>,
    /// Kept pages the running transaction has read: their locks cannot be called back before
    /// it ends, as a lock of its own could not.
    pub in_use: FxHashSet<PageId>,
}

impl KeptLocks {
    pub fn new(id: TxnId, limit: usize) -> KeptLocks {
        KeptLocks {
            id,
            limit,
            inner: Mutex::new(KeptState::default()),
        }
    }

    /// The owner the kept locks are held under.
    pub fn id(&self) -> TxnId {
        self.id
    }

    /// The most pages kept at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn lock(&self) -> MutexGuard<'_, KeptState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `txn` starts: the kept locks serve it from now on. What the session's previous
    /// transaction relied on stays marked until the server ends that transaction (normally
    /// before this one begins).
    pub fn begin(&self, txn: TxnId) {
        self.lock().active = Some(txn);
    }

    /// May `txn` read `page` under a kept lock, its cached copy having last been validated in
    /// `validated_in`? If so the lock is marked in use until `txn` ends.
    pub fn use_page(&self, txn: TxnId, page: PageId, validated_in: Option<TxnId>) -> bool {
        let mut state = self.lock();
        if state.active != Some(txn) || validated_in.is_none() {
            return false;
        }
        if state.pages.get(&page).copied() != validated_in {
            return false;
        }
        state.in_use.insert(page);
        true
    }

    /// Pages kept now (for statistics and tests).
    pub fn len(&self) -> usize {
        self.lock().pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_page_serves_only_the_running_transaction_and_the_copy_it_protects() {
        let kept = KeptLocks::new(TxnId(1 << 40), 8);
        kept.lock().pages.insert(PageId(7), TxnId(3));
        // No transaction running.
        assert!(!kept.use_page(TxnId(4), PageId(7), Some(TxnId(3))));
        kept.begin(TxnId(4));
        // A copy validated in another transaction than the one whose lock was kept.
        assert!(!kept.use_page(TxnId(4), PageId(7), Some(TxnId(2))));
        assert!(!kept.use_page(TxnId(4), PageId(7), None));
        // A page not kept.
        assert!(!kept.use_page(TxnId(4), PageId(8), Some(TxnId(3))));
        // Another transaction than the running one.
        assert!(!kept.use_page(TxnId(5), PageId(7), Some(TxnId(3))));
        assert!(kept.lock().in_use.is_empty());
        assert!(kept.use_page(TxnId(4), PageId(7), Some(TxnId(3))));
        assert!(kept.lock().in_use.contains(&PageId(7)));
        // Still relied on until the server ends the transaction.
        kept.begin(TxnId(5));
        assert!(kept.lock().in_use.contains(&PageId(7)));
    }
}
