//! Range scans over a collection, in both directions. A scan reads one leaf at a time into a
//! buffer and finds the next leaf by descending again from the root to the key where the
//! leaf's range ends (its fence), so leaves need no sibling links: a split or merge then
//! touches only the nodes on one path, never a neighbour's.

use super::key::{Key, Value};
use super::tree::{Entries, NodeReader, Tree};
use lodestore_core::{Error, Result};
use std::marker::PhantomData;
use std::ops::Bound;

/// The entries of a collection within a range, in key order (and in reverse with `.rev()`),
/// read inside a transaction. Each item is the entry or the error that ended the scan.
pub struct Range<'t, K, V> {
    txn: &'t mut dyn NodeReader,
    tree: Tree,
    /// What is left to yield: keys after `low` and before `high`. Each item yielded from
    /// either end narrows it, so the two ends never yield an entry twice.
    low: Bound<Vec<u8>>,
    high: Bound<Vec<u8>>,
    front: Entries,
    /// Where the leaf after the front buffer starts; `Some(None)` when there is none.
    front_next: Option<Option<Vec<u8>>>,
    back: Entries,
    back_next: Option<Option<Vec<u8>>>,
    /// `low` (`high`) excludes the key the front (back) yielded last, which its buffer still
    /// holds: the key is copied into the bound only when the buffer is refilled, not at every
    /// item.
    low_in_front: bool,
    high_in_back: bool,
    done: bool,
    kinds: PhantomData<fn() -> (K, V)>,
}

fn above(low: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match low {
        Bound::Unbounded => true,
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
    }
}

fn below(high: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match high {
        Bound::Unbounded => true,
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
    }
}

/// Makes `bound` exclude `key` and what lies beyond it, reusing its buffer: each item a scan
/// yields moves one end, and allocating a key per item would cost more than the item.
fn set_excluded(bound: &mut Bound<Vec<u8>>, key: &[u8]) {
    match bound {
        Bound::Excluded(kept) | Bound::Included(kept) => {
            kept.clear();
            kept.extend_from_slice(key);
            *bound = Bound::Excluded(std::mem::take(kept));
        }
        Bound::Unbounded => *bound = Bound::Excluded(key.to_vec()),
    }
}

fn borrowed(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
    }
}

impl<'t, K: Key, V: Value> Range<'t, K, V> {
    pub(crate) fn new(
        txn: &'t mut dyn NodeReader,
        tree: Tree,
        low: Bound<Vec<u8>>,
        high: Bound<Vec<u8>>,
    ) -> Self {
        Range {
            txn,
            tree,
            low,
            high,
            front: Entries::default(),
            front_next: None,
            back: Entries::default(),
            back_next: None,
            low_in_front: false,
            high_in_back: false,
            done: false,
            kinds: PhantomData,
        }
    }

    fn decode(tree: &Tree, key: &[u8], value: &[u8]) -> Result<(K, V)> {
        let damaged = |what: &str| Error::CorruptCollection {
            collection: tree.header,
            node: tree.header,
            reason: format!("a stored {what} that is not one of the collection's type"),
        };
        let key = K::read_key(key).ok_or_else(|| damaged("key"))?;
        let value = V::read_value(value).ok_or_else(|| damaged("value"))?;
        Ok((key, value))
    }

    fn fail(&mut self, error: Error) -> Option<Result<(K, V)>> {
        self.done = true;
        Some(Err(error))
    }

    /// Is `key` above what the front has yielded (and the range's start)?
    #[inline]
    fn above_low(&self, key: &[u8]) -> bool {
        match self.front.last_yielded_key().filter(|_| self.low_in_front) {
            Some(last) => key > last,
            None => above(&self.low, key),
        }
    }

    /// Is `key` below what the back has yielded (and the range's end)?
    #[inline]
    fn below_high(&self, key: &[u8]) -> bool {
        match self.back.last_yielded_key().filter(|_| self.high_in_back) {
            Some(last) => key < last,
            None => below(&self.high, key),
        }
    }

    /// The next entry from the front.
    fn next_entry(&mut self) -> Result<Option<(K, V)>> {
        loop {
            if let Some((key, value)) = self.front.front() {
                if !self.below_high(key) {
                    return Ok(None);
                }
                let item = Self::decode(&self.tree, key, value)?;
                self.front.pop_front();
                self.low_in_front = true;
                return Ok(Some(item));
            }
            // The buffer is refilled below: the key `low` excludes moves into the bound first.
            if std::mem::take(&mut self.low_in_front) {
                if let Some(last) = self.front.last_yielded_key() {
                    set_excluded(&mut self.low, last);
                }
            }
            let from = match &self.front_next {
                None => borrowed(&self.low),
                Some(Some(fence)) => Bound::Included(fence.as_slice()),
                Some(None) => return Ok(None),
            };
            if let Bound::Included(k) | Bound::Excluded(k) = from {
                if !self.below_high(k) {
                    return Ok(None);
                }
            }
            let fence = self.tree.scan_forward(self.txn, from, &mut self.front)?;
            self.front_next = Some(fence);
        }
    }

    /// The next entry from the back.
    fn next_back_entry(&mut self) -> Result<Option<(K, V)>> {
        loop {
            if let Some((key, value)) = self.back.front() {
                if !self.above_low(key) {
                    return Ok(None);
                }
                let item = Self::decode(&self.tree, key, value)?;
                self.back.pop_front();
                self.high_in_back = true;
                return Ok(Some(item));
            }
            if std::mem::take(&mut self.high_in_back) {
                if let Some(last) = self.back.last_yielded_key() {
                    set_excluded(&mut self.high, last);
                }
            }
            let to = match &self.back_next {
                None => borrowed(&self.high),
                Some(Some(fence)) => Bound::Excluded(fence.as_slice()),
                Some(None) => return Ok(None),
            };
            if let Bound::Included(k) | Bound::Excluded(k) = to {
                if !self.above_low(k) {
                    return Ok(None);
                }
            }
            let fence = self.tree.scan_backward(self.txn, to, &mut self.back)?;
            self.back_next = Some(fence);
        }
    }
}

impl<K: Key, V: Value> Range<'_, K, V> {
    /// The item for what one end of the scan found: the entry decoded, or the end of the
    /// scan, or the error that ends it.
    fn item(&mut self, found: Result<Option<(K, V)>>) -> Option<Result<(K, V)>> {
        match found {
            Ok(Some(item)) => Some(Ok(item)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => self.fail(e),
        }
    }
}

impl<K: Key, V: Value> Iterator for Range<'_, K, V> {
    type Item = Result<(K, V)>;

    fn next(&mut self) -> Option<Result<(K, V)>> {
        if self.done {
            return None;
        }
        let found = self.next_entry();
        self.item(found)
    }
}

impl<K: Key, V: Value> DoubleEndedIterator for Range<'_, K, V> {
    fn next_back(&mut self) -> Option<Result<(K, V)>> {
        if self.done {
            return None;
        }
        let found = self.next_back_entry();
        self.item(found)
    }
}

impl<K: Key, V: Value> std::iter::FusedIterator for Range<'_, K, V> {}
