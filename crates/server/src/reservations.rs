//! Pages reserved for a client across its transactions, so it can hand out the OIDs of objects
//! before their contents exist (a bulk load of a graph whose objects refer to each other
//! forward, in one pass).
//!
//! A reserved page is free on disk and in the space map written to disk (the map writes
//! `SpaceManager`'s reserved pages as free), and marked unavailable in memory so no allocation
//! gives it out. A client takes a page into one of its transactions before it formats it; once
//! that transaction commits the page is an ordinary page and leaves its reservation, and if it
//! aborts the page stays reserved. Nothing here is durable: after a crash every page no
//! committed transaction took is free again.

use lodestore_core::{Error, PageId, Result};
use std::collections::{BTreeMap, BTreeSet};

/// The reservations of one server.
#[derive(Default)]
pub struct Reservations {
    /// Pages of each reservation not yet taken by a committed transaction.
    pages: BTreeMap<u64, BTreeSet<PageId>>,
    /// Which reservation holds each page.
    owner: BTreeMap<PageId, u64>,
    next_id: u64,
}

impl Reservations {
    /// Pages held over all reservations.
    pub fn pages_held(&self) -> usize {
        self.owner.len()
    }

    /// Records a new reservation of `pages` (reserved in the space map by the caller).
    pub fn add(&mut self, pages: &[PageId]) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        for &page in pages {
            let previous = self.owner.insert(page, id);
            assert!(previous.is_none(), "page {page} reserved twice");
        }
        self.pages.insert(id, pages.iter().copied().collect());
        id
    }

    /// Checks that `page` is still held by `reservation`.
    pub fn check_held(&self, reservation: u64, page: PageId) -> Result<()> {
        if self.owner.get(&page) == Some(&reservation) {
            return Ok(());
        }
        let reason = if self.pages.contains_key(&reservation) {
            format!("page {page} is not held by reservation {reservation}")
        } else {
            format!("reservation {reservation} does not exist (released, or the server restarted)")
        };
        Err(Error::InvalidArgument(reason))
    }

    /// Whether `page` is held by some reservation.
    pub fn holds(&self, page: PageId) -> bool {
        self.owner.contains_key(&page)
    }

    /// `page`, formatted by a committed transaction, leaves its reservation.
    pub fn committed(&mut self, page: PageId) {
        if let Some(id) = self.owner.remove(&page) {
            if let Some(pages) = self.pages.get_mut(&id) {
                pages.remove(&page);
            }
        }
    }

    /// Ends `reservation`; returns the pages it still held.
    pub fn release(&mut self, reservation: u64) -> Result<BTreeSet<PageId>> {
        let pages = self.pages.remove(&reservation).ok_or_else(|| {
            Error::InvalidArgument(format!("reservation {reservation} does not exist"))
        })?;
        for page in &pages {
            self.owner.remove(page);
        }
        Ok(pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_leaves_its_reservation_when_committed_and_the_rest_is_released() {
        let mut r = Reservations::default();
        let a = r.add(&[PageId(10), PageId(11)]);
        let b = r.add(&[PageId(12)]);
        assert_ne!(a, b);
        assert_eq!(r.pages_held(), 3);
        r.check_held(a, PageId(10)).unwrap();
        assert!(r.check_held(b, PageId(10)).is_err());
        assert!(r.check_held(99, PageId(10)).is_err());
        r.committed(PageId(10));
        assert!(!r.holds(PageId(10)));
        assert!(r.check_held(a, PageId(10)).is_err());
        assert_eq!(r.release(a).unwrap(), BTreeSet::from([PageId(11)]));
        assert!(r.release(a).is_err(), "released twice");
        assert_eq!(r.pages_held(), 1);
    }
}
