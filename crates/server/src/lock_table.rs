//! Page locks for strict two-phase locking. Modes and their compatibility are data (a matrix),
//! so further modes can be added without touching the code that grants them.
//!
//! This version does not wait: a conflicting request fails at once with
//! `Error::LockConflict`, which the caller may retry. Waiting with deadlock detection comes
//! with concurrent sessions.

use crate::interface::LockMode;
use lodestore_core::{Error, PageId, Result, TxnId};
use std::collections::HashMap;

const MODE_COUNT: usize = 2;

/// `COMPATIBLE[held][requested]`: may `requested` be granted while another holds `held`?
const COMPATIBLE: [[bool; MODE_COUNT]; MODE_COUNT] = [
    // requested: Shared, Exclusive
    [true, false],  // held Shared
    [false, false], // held Exclusive
];

#[derive(Default)]
pub struct LockTable {
    holders: HashMap<PageId, Vec<(TxnId, LockMode)>>,
}

impl LockTable {
    /// Grants `mode` on `page` to `txn`, upgrading a weaker lock it holds. Returns true if the
    /// transaction did not hold any lock on the page before.
    pub fn acquire(&mut self, txn: TxnId, page: PageId, mode: LockMode) -> Result<bool> {
        let holders = self.holders.entry(page).or_default();
        let own = holders.iter().position(|(t, _)| *t == txn);
        if let Some(i) = own {
            if holders[i].1 >= mode {
                return Ok(false);
            }
        }
        let conflict = holders
            .iter()
            .any(|(t, held)| *t != txn && !COMPATIBLE[*held as usize][mode as usize]);
        if conflict {
            return Err(Error::LockConflict { page });
        }
        match own {
            Some(i) => {
                holders[i].1 = mode;
                Ok(false)
            }
            None => {
                holders.push((txn, mode));
                Ok(true)
            }
        }
    }

    /// Is `page` locked by a transaction other than `txn`?
    pub fn locked_by_other(&self, txn: TxnId, page: PageId) -> bool {
        self.holders
            .get(&page)
            .is_some_and(|h| h.iter().any(|(t, _)| *t != txn))
    }

    /// Releases the locks of `txn` on `pages`.
    pub fn release(&mut self, txn: TxnId, pages: impl IntoIterator<Item = PageId>) {
        for page in pages {
            if let Some(holders) = self.holders.get_mut(&page) {
                holders.retain(|(t, _)| *t != txn);
                if holders.is_empty() {
                    self.holders.remove(&page);
                }
            }
        }
    }

    pub fn locked_pages(&self) -> usize {
        self.holders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_compatible_exclusive_not() {
        let (a, b) = (TxnId(1), TxnId(2));
        let p = PageId(5);
        let mut table = LockTable::default();
        assert!(table.acquire(a, p, LockMode::Shared).unwrap());
        assert!(table.acquire(b, p, LockMode::Shared).unwrap());
        assert!(matches!(
            table.acquire(b, p, LockMode::Exclusive),
            Err(Error::LockConflict { page }) if page == p
        ));
        table.release(a, [p]);
        assert!(
            !table.acquire(b, p, LockMode::Exclusive).unwrap(),
            "upgrade"
        );
        assert!(table.acquire(a, p, LockMode::Shared).is_err());
        table.release(b, [p]);
        assert_eq!(table.locked_pages(), 0);
    }
}
