//! Objects reserved ahead of their contents (`ClientSession::reserve`): a session names the
//! objects of a graph before it writes any of them, so objects that refer to each other
//! forward are written once, in one pass, over as many transactions as the caller likes.
//!
//! The server holds the reserved pages for the session (`PageServer::reserve_pages`). Each
//! page's objects fill slots 0, 1, ... in order, so their OIDs are known at once. The first
//! transaction that writes an object of a page formats the whole page, every object of it
//! zero-filled; once that transaction commits, the page is an ordinary page and the objects
//! ordinary objects (an object never written stays zero-filled, as `alloc` leaves it).

use lodestore_core::{Oid, PageId, Result, TxnId, TypeId, VolumeId};
use lodestore_storage::slotted;
use rustc_hash::FxHashMap;

/// A reserved page not yet formatted by a committed transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReservedPage {
    pub reservation: u64,
    pub type_id: TypeId,
    pub len: usize,
    /// Objects on the page: slots 0 to `objects - 1`.
    pub objects: u16,
    /// The transaction that formatted it, until that transaction ends.
    pub formatted_in: Option<TxnId>,
}

/// The reservations of one session.
#[derive(Default)]
pub(crate) struct Reserved {
    pub pages: FxHashMap<PageId, ReservedPage>,
    /// Reservations not yet released.
    pub ids: Vec<u64>,
}

impl Reserved {
    /// The reserved page of `oid`, if its page is reserved and no transaction of this session
    /// formatted it yet.
    pub fn unformatted(&self, oid: Oid) -> Option<ReservedPage> {
        self.pages
            .get(&oid.page())
            .filter(|p| p.formatted_in.is_none() && oid.slot() < p.objects)
            .copied()
    }

    /// After `txn` committed: the pages it formatted are ordinary pages.
    pub fn committed(&mut self, formatted: &[PageId]) {
        for page in formatted {
            self.pages.remove(page);
        }
    }

    /// After `txn` aborted: the pages it formatted are free and reserved again.
    pub fn aborted(&mut self, formatted: &[PageId]) {
        for page in formatted {
            if let Some(p) = self.pages.get_mut(page) {
                p.formatted_in = None;
            }
        }
    }
}

/// How many objects of `len` bytes one slotted page of `page_size` bytes holds.
pub(crate) fn objects_per_page(page_size: usize, len: usize) -> usize {
    let mut scratch = vec![0u8; page_size];
    slotted::init(&mut scratch, PageId(0), 0);
    let mut count = 0;
    while slotted::insert(&mut scratch, TypeId(0), len, false).is_some() {
        count += 1;
    }
    count
}

/// Formats `bytes` as reserved page `page`: a slotted page holding `objects` zero-filled
/// objects of `type_id` and `len` bytes in slots 0 onward.
pub(crate) fn format_page(
    bytes: &mut [u8],
    page: PageId,
    volume: VolumeId,
    reserved: ReservedPage,
) {
    slotted::init(bytes, page, volume);
    for expected in 0..reserved.objects {
        let slot = slotted::insert(bytes, reserved.type_id, reserved.len, false);
        assert_eq!(
            slot,
            Some(expected),
            "a reserved page holds the objects its reservation counted"
        );
    }
}

/// Checks what `reserve` is asked for: a small object type of Lodestore's users.
pub(crate) fn check_request(type_id: TypeId, len: usize, page_size: usize) -> Result<()> {
    use lodestore_core::Error;
    crate::session::check_user_type(type_id)?;
    let most = slotted::payload_max(page_size);
    if len > most {
        return Err(Error::InvalidArgument(format!(
            "objects of {len} bytes cannot be reserved ahead: only small objects (at most \
             {most} bytes on pages of {page_size}) can"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_formatted_page_holds_exactly_the_objects_counted() {
        for (page_size, len) in [(4096, 1), (8192, 104), (8192, 8000), (65536, 0)] {
            let per_page = objects_per_page(page_size, len);
            assert!(per_page >= 1, "{page_size}/{len}");
            let mut bytes = vec![0u8; page_size];
            let reserved = ReservedPage {
                reservation: 1,
                type_id: TypeId(7),
                len,
                objects: per_page as u16,
                formatted_in: None,
            };
            format_page(&mut bytes, PageId(9), 0, reserved);
            slotted::validate(&bytes).unwrap();
            assert!(!slotted::can_insert(&bytes, len), "the page is full");
            let last = slotted::record(&bytes, per_page as u16 - 1)
                .unwrap()
                .unwrap();
            assert_eq!(last.payload().len(), len);
        }
    }
}
