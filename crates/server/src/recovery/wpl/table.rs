//! The WPL table of whole-page logging (QuickStore section 3.4.2): which page images in the log
//! recovery may still need, because their page's home location does not hold them yet.
//!
//! Per page there are at most two copies. The newest is either committed or belongs to the one
//! transaction holding the page's exclusive lock; while that transaction runs, the committed
//! copy before it stays too (the paper's link to an older copy still needed), because an abort
//! falls back to it and a crash recovers it. A commit drops the older copy; writing a committed
//! copy to the home location drops that copy. The table is the method's own state: other
//! methods have none.

use lodestore_core::{Lsn, PageId, TxnId};
use lodestore_wal::LoggedPage;
use std::collections::BTreeMap;

/// A page image in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedCopy {
    /// Where the image is in the log; also the page's LSN when it holds this copy.
    pub lsn: Lsn,
    pub txn: TxnId,
    /// The commit record of `txn`, once it committed: the log must be durable up to it before
    /// this copy may overwrite the home location.
    pub commit_lsn: Option<Lsn>,
}

impl LoggedCopy {
    pub fn is_committed(&self) -> bool {
        self.commit_lsn.is_some()
    }
}

#[derive(Clone, Copy, Debug)]
struct PageCopies {
    newest: LoggedCopy,
    /// The committed copy a running transaction's newest copy would fall back to.
    older: Option<LoggedCopy>,
}

#[derive(Clone, Debug, Default)]
pub struct WplTable {
    pages: BTreeMap<PageId, PageCopies>,
}

impl WplTable {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Pages with a copy in the table.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// The newest copy of `page`: the version a reader of the page gets.
    pub fn newest(&self, page: PageId) -> Option<LoggedCopy> {
        self.pages.get(&page).map(|c| c.newest)
    }

    /// `txn` logged an image of `page` at `lsn`.
    pub fn logged(&mut self, page: PageId, txn: TxnId, lsn: Lsn) {
        let copy = LoggedCopy {
            lsn,
            txn,
            commit_lsn: None,
        };
        match self.pages.get_mut(&page) {
            None => {
                self.pages.insert(
                    page,
                    PageCopies {
                        newest: copy,
                        older: None,
                    },
                );
            }
            Some(copies) => {
                assert!(
                    copies.newest.is_committed() || copies.newest.txn == txn,
                    "page {page} logged by {txn} while {} holds an uncommitted copy",
                    copies.newest.txn
                );
                debug_assert!(copies.newest.lsn < lsn);
                if copies.newest.is_committed() {
                    copies.older = Some(copies.newest);
                }
                // An earlier copy of the same transaction is never needed again.
                copies.newest = copy;
            }
        }
    }

    /// `txn` committed at `commit_lsn`: its copy of `page` becomes the committed one and the
    /// copy before it is no longer needed. Returns the now committed copy.
    pub fn commit(&mut self, page: PageId, txn: TxnId, commit_lsn: Lsn) -> Option<LoggedCopy> {
        let copies = self.pages.get_mut(&page)?;
        if copies.newest.txn != txn || copies.newest.is_committed() {
            return None;
        }
        copies.newest.commit_lsn = Some(commit_lsn);
        copies.older = None;
        Some(copies.newest)
    }

    /// `txn` aborted: its copy of `page` is forgotten and the committed copy, if any, is the
    /// newest again.
    pub fn abort(&mut self, page: PageId, txn: TxnId) {
        let Some(copies) = self.pages.get_mut(&page) else {
            return;
        };
        if copies.newest.txn != txn || copies.newest.is_committed() {
            return;
        }
        match copies.older.take() {
            Some(older) => copies.newest = older,
            None => {
                self.pages.remove(&page);
            }
        }
    }

    /// The committed copy of `page` in the table, if any: the newest when committed, else the
    /// one a running transaction's copy would fall back to.
    pub fn committed(&self, page: PageId) -> Option<LoggedCopy> {
        let copies = self.pages.get(&page)?;
        if copies.newest.is_committed() {
            Some(copies.newest)
        } else {
            copies.older
        }
    }

    /// The committed copy of `page` at `lsn`, if the table has it.
    pub fn committed_at(&self, page: PageId, lsn: Lsn) -> Option<LoggedCopy> {
        let copies = self.pages.get(&page)?;
        [Some(copies.newest), copies.older]
            .into_iter()
            .flatten()
            .find(|c| c.lsn == lsn && c.is_committed())
    }

    /// The home location of `page` now holds the committed copy at `lsn`: that copy, and any
    /// committed copy older than it, is no longer needed.
    pub fn written_home(&mut self, page: PageId, lsn: Lsn) {
        let Some(copies) = self.pages.get_mut(&page) else {
            return;
        };
        if copies.older.is_some_and(|c| c.lsn <= lsn) {
            copies.older = None;
        }
        if copies.newest.is_committed() && copies.newest.lsn <= lsn {
            debug_assert!(copies.older.is_none());
            self.pages.remove(&page);
        }
    }

    /// Committed copies with an LSN below `before`, oldest first.
    pub fn committed_before(&self, before: Lsn) -> Vec<(PageId, LoggedCopy)> {
        let mut found: Vec<(PageId, LoggedCopy)> = self
            .pages
            .iter()
            .flat_map(|(page, c)| [Some(c.newest), c.older].map(|copy| copy.map(|c| (*page, c))))
            .flatten()
            .filter(|(_, c)| c.is_committed() && c.lsn < before)
            .collect();
        found.sort_unstable_by_key(|(_, c)| c.lsn);
        found
    }

    /// The oldest log position a copy in the table lies at.
    pub fn oldest_lsn(&self) -> Option<Lsn> {
        self.pages
            .values()
            .map(|c| c.older.map_or(c.newest.lsn, |o| o.lsn))
            .min()
    }

    /// The table as a checkpoint writes it.
    pub fn entries(&self) -> Vec<LoggedPage> {
        self.pages
            .iter()
            .flat_map(|(page, c)| [c.older, Some(c.newest)].map(|copy| copy.map(|c| (*page, c))))
            .flatten()
            .map(|(page, c)| LoggedPage {
                page,
                lsn: c.lsn,
                txn: c.txn,
                committed: c.is_committed(),
            })
            .collect()
    }

    /// Restart: `page`'s newest committed copy is at `lsn`, by `txn` committed at
    /// `commit_lsn`. Only the first copy put for a page counts (restart goes newest first).
    pub fn recover(&mut self, page: PageId, txn: TxnId, lsn: Lsn, commit_lsn: Lsn) -> bool {
        if self.pages.contains_key(&page) {
            return false;
        }
        self.pages.insert(
            page,
            PageCopies {
                newest: LoggedCopy {
                    lsn,
                    txn,
                    commit_lsn: Some(commit_lsn),
                },
                older: None,
            },
        );
        true
    }

    /// Pages with a copy, in page order.
    pub fn pages(&self) -> impl Iterator<Item = PageId> + '_ {
        self.pages.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PageId = PageId(7);

    #[test]
    fn abort_falls_back_to_the_committed_copy() {
        let mut t = WplTable::default();
        t.logged(P, TxnId(1), Lsn(100));
        t.commit(P, TxnId(1), Lsn(150));
        t.logged(P, TxnId(2), Lsn(200));
        t.logged(P, TxnId(2), Lsn(300));
        assert_eq!(t.newest(P).unwrap().lsn, Lsn(300));
        assert_eq!(t.oldest_lsn(), Some(Lsn(100)));
        assert_eq!(t.entries().len(), 2);
        t.abort(P, TxnId(2));
        let newest = t.newest(P).unwrap();
        assert_eq!((newest.lsn, newest.commit_lsn), (Lsn(100), Some(Lsn(150))));
        t.abort(P, TxnId(1)); // committed: not the aborting transaction's to drop
        assert!(t.newest(P).is_some());
    }

    #[test]
    fn commit_supersedes_and_home_write_drops() {
        let mut t = WplTable::default();
        t.logged(P, TxnId(1), Lsn(100));
        t.commit(P, TxnId(1), Lsn(150));
        t.logged(P, TxnId(2), Lsn(200));
        // Installing the older committed copy while the newer one runs keeps the newer.
        assert_eq!(t.committed_before(Lsn(1000)).len(), 1);
        t.written_home(P, Lsn(100));
        assert_eq!(t.oldest_lsn(), Some(Lsn(200)));
        t.commit(P, TxnId(2), Lsn(250));
        assert_eq!(
            t.committed_at(P, Lsn(200)).unwrap().commit_lsn,
            Some(Lsn(250))
        );
        t.written_home(P, Lsn(200));
        assert!(t.is_empty());
    }

    #[test]
    fn an_uncommitted_copy_is_never_installed() {
        let mut t = WplTable::default();
        t.logged(P, TxnId(1), Lsn(100));
        assert!(t.committed_before(Lsn(1000)).is_empty());
        t.written_home(P, Lsn(100));
        assert_eq!(t.newest(P).unwrap().lsn, Lsn(100));
    }
}
