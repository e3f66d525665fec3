//! Where small objects read in the current transaction lie in the client cache, so that a read
//! that comes back to one (a collection's descent reads the same few nodes for every key)
//! skips the page table, the lock map and the slot table.
//!
//! An entry is trusted only while nothing can have moved its object: the frame still holds
//! the same fill of the page (no eviction, refill or revalidation since), the frame was
//! validated in the reading transaction (so the transaction holds a lock on the page, and
//! locks last to its end), and no write has changed any page's record layout since the entry
//! was made (the session counts those writes). Everything else re-reads the slot table.

use lodestore_core::frames::FrameId;
use lodestore_core::{Oid, TxnId, TypeId};
use std::ops::Range;

/// Entries kept: a direct-mapped table. The nodes above the leaves of a tree of a million
/// keys are a few dozen, and each leaf read takes a slot too; a collision only costs the slow
/// path.
const ENTRIES: usize = 256;

#[derive(Clone, Debug)]
struct Entry {
    oid: Oid,
    txn: TxnId,
    frame: FrameId,
    fill: u64,
    layout: u64,
    type_id: TypeId,
    payload: Range<usize>,
}

/// A small object's place, as the slot table gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub frame: FrameId,
    pub type_id: TypeId,
    pub payload: Range<usize>,
}

/// What must be unchanged since an entry was made for it to be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub txn: TxnId,
    pub fill: u64,
    pub layout: u64,
}

pub(crate) struct Located {
    entries: Box<[Option<Entry>]>,
    /// The object changed last, kept apart from the table: an ascending load changes one leaf
    /// thousands of times in a row, while random inserts change each leaf once or twice and,
    /// in the table, would push out the inner nodes every descent reads.
    last_changed: Option<Entry>,
    /// Writes that changed a page's record layout (records added, removed, resized, moved).
    layout_changes: u64,
}

impl Located {
    pub fn new() -> Located {
        Located {
            entries: vec![None; ENTRIES].into_boxed_slice(),
            last_changed: None,
            layout_changes: 0,
        }
    }

    /// Called before any write that may move records on a page.
    #[inline]
    pub fn layout_changing(&mut self) {
        self.layout_changes += 1;
    }

    pub fn layout(&self) -> u64 {
        self.layout_changes
    }

    #[inline]
    fn slot(oid: Oid) -> usize {
        (oid.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % ENTRIES
    }

    /// The place of `oid` if an entry for it is still trusted: `stamp_of(frame)` gives the
    /// reading transaction's view of the entry's frame (`None` if the frame holds another
    /// page now).
    #[inline]
    pub fn get(&self, oid: Oid, stamp_of: impl FnOnce(FrameId) -> Option<Stamp>) -> Option<Place> {
        self.trusted(self.entries[Self::slot(oid)].as_ref()?, oid, stamp_of)
    }

    /// Remembers where `oid` lies, as read under `stamp`.
    #[inline]
    pub fn put(&mut self, oid: Oid, place: Place, stamp: Stamp) {
        self.entries[Self::slot(oid)] = Some(self.entry(oid, place, stamp));
    }

    /// [`Located::get`] for the object changed last.
    #[inline]
    pub fn get_changed(
        &self,
        oid: Oid,
        stamp_of: impl FnOnce(FrameId) -> Option<Stamp>,
    ) -> Option<Place> {
        self.trusted(self.last_changed.as_ref()?, oid, stamp_of)
    }

    /// Remembers where `oid`, about to be changed, lies.
    #[inline]
    pub fn put_changed(&mut self, oid: Oid, place: Place, stamp: Stamp) {
        self.last_changed = Some(self.entry(oid, place, stamp));
    }

    #[inline]
    fn trusted(
        &self,
        entry: &Entry,
        oid: Oid,
        stamp_of: impl FnOnce(FrameId) -> Option<Stamp>,
    ) -> Option<Place> {
        if entry.oid != oid || entry.layout != self.layout_changes {
            return None;
        }
        let stamp = stamp_of(entry.frame)?;
        (stamp.txn == entry.txn && stamp.fill == entry.fill).then(|| Place {
            frame: entry.frame,
            type_id: entry.type_id,
            payload: entry.payload.clone(),
        })
    }

    fn entry(&self, oid: Oid, place: Place, stamp: Stamp) -> Entry {
        debug_assert_eq!(stamp.layout, self.layout_changes);
        Entry {
            oid,
            txn: stamp.txn,
            frame: place.frame,
            fill: stamp.fill,
            layout: stamp.layout,
            type_id: place.type_id,
            payload: place.payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(txn: u64, fill: u64, layout: u64) -> Stamp {
        Stamp {
            txn: TxnId(txn),
            fill,
            layout,
        }
    }

    #[test]
    fn an_entry_is_trusted_only_while_frame_transaction_and_layout_are_unchanged() {
        let mut located = Located::new();
        let oid = Oid(0x0001_0000_0005_0003);
        let place = Place {
            frame: 7,
            type_id: TypeId(9),
            payload: 100..164,
        };
        located.put(oid, place.clone(), stamp(1, 40, 0));
        assert_eq!(located.get(oid, |_| Some(stamp(1, 40, 0))), Some(place));
        // Another transaction, a new fill of the frame, or the frame given to another page.
        assert_eq!(located.get(oid, |_| Some(stamp(2, 40, 0))), None);
        assert_eq!(located.get(oid, |_| Some(stamp(1, 41, 0))), None);
        assert_eq!(located.get(oid, |_| None), None);
        // Another object in the same slot of the table.
        assert_eq!(
            located.get(Oid(oid.0 + (1 << 40)), |_| Some(stamp(1, 40, 0))),
            None
        );
        // Any change of a record layout.
        located.layout_changing();
        assert_eq!(located.get(oid, |_| Some(stamp(1, 40, 1))), None);
    }

    #[test]
    fn the_object_changed_last_is_kept_apart_under_the_same_rules() {
        let mut located = Located::new();
        let (leaf, other) = (Oid(0x0001_0000_0009_0001), Oid(0x0001_0000_000A_0001));
        let place = Place {
            frame: 3,
            type_id: TypeId(5),
            payload: 40..8_000,
        };
        located.put_changed(leaf, place.clone(), stamp(1, 10, 0));
        assert_eq!(
            located.get_changed(leaf, |_| Some(stamp(1, 10, 0))),
            Some(place.clone())
        );
        // Not in the table, and the table's entries do not answer for it.
        assert_eq!(located.get(leaf, |_| Some(stamp(1, 10, 0))), None);
        located.put(other, place.clone(), stamp(1, 10, 0));
        assert_eq!(located.get_changed(other, |_| Some(stamp(1, 10, 0))), None);
        // Another transaction, another fill, another page in the frame, a layout change.
        assert_eq!(located.get_changed(leaf, |_| Some(stamp(2, 10, 0))), None);
        assert_eq!(located.get_changed(leaf, |_| Some(stamp(1, 11, 0))), None);
        assert_eq!(located.get_changed(leaf, |_| None), None);
        located.layout_changing();
        assert_eq!(located.get_changed(leaf, |_| Some(stamp(1, 10, 1))), None);
    }
}
