//! Typed collections: `BTreeMap<K, V>` and `BTreeSet<K>`, in the spirit of `std`'s, stored in
//! the store. A handle is the header's OID and nothing else, so it is `Pod` and objects hold
//! collections as plain fields; every operation takes the transaction it runs in. Reads take
//! any [`ReadTransaction`], so a collection reads the same as of a snapshot as it does now.

use super::key::{Key, KeyBytes, Value};
use super::range::Range;
use super::tree::{Tree, TreeReport};
use crate::{ReadTransaction, Transaction};
use bytemuck::{Pod, Zeroable};
use lodestore_core::{Oid as RawOid, Result};
use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

/// Header flag: the collection is a set.
const FLAG_SET: u16 = 1;

fn encode<Q: KeyBytes + ?Sized>(key: &Q) -> Vec<u8> {
    let mut out = Vec::new();
    key.write_key(&mut out);
    out
}

fn encode_bound<Q: KeyBytes + ?Sized>(bound: Bound<&Q>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(encode(k)),
        Bound::Excluded(k) => Bound::Excluded(encode(k)),
    }
}

/// The keys of a range of entries (see [`BTreeMap::keys`] and [`BTreeSet::range`]).
pub type Keys<'t, K, V> = std::iter::Map<Range<'t, K, V>, fn(Result<(K, V)>) -> Result<K>>;

fn key_of<K, V>(entry: Result<(K, V)>) -> Result<K> {
    entry.map(|(k, _)| k)
}

/// An ordered map from keys to values, kept as a B+-tree of page-sized nodes.
///
/// ```
/// use lodestore::{BTreeMap, Options, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Store::create(dir.path().join("store"), Options::new())?;
/// let mut session = store.session()?;
/// let mut txn = session.begin()?;
/// let stock: BTreeMap<String, u64> = BTreeMap::create(&mut txn)?;
/// stock.insert(&mut txn, "apples", &12)?;
/// stock.insert(&mut txn, "pears", &7)?;
/// assert_eq!(stock.get(&mut txn, "apples")?, Some(12));
/// let names: Vec<String> = stock.keys(&mut txn).collect::<Result<_, _>>()?;
/// assert_eq!(names, ["apples", "pears"]);
/// txn.set_root("stock", stock.oid())?;
/// txn.commit()?;
/// # Ok::<(), lodestore::Error>(())
/// ```
#[repr(transparent)]
pub struct BTreeMap<K, V> {
    header: u64,
    kinds: PhantomData<fn() -> (K, V)>,
}

// SAFETY: `repr(transparent)` over a `u64` (PhantomData is zero-sized with alignment 1): every
// bit pattern is valid, there is no padding, and all zeros is a null handle.
unsafe impl<K: 'static, V: 'static> Zeroable for BTreeMap<K, V> {}
// SAFETY: as above; the type is `Copy` for every `K` and `V`.
unsafe impl<K: 'static, V: 'static> Pod for BTreeMap<K, V> {}

impl<K, V> Clone for BTreeMap<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K, V> Copy for BTreeMap<K, V> {}
impl<K, V> PartialEq for BTreeMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header
    }
}
impl<K, V> Eq for BTreeMap<K, V> {}
impl<K, V> BTreeMap<K, V> {
    /// The map's OID, to name it as a root or store it in an object.
    pub fn oid(self) -> RawOid {
        RawOid(self.header)
    }
}
impl<K, V> std::fmt::Debug for BTreeMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BTreeMap({:?})", RawOid(self.header))
    }
}

impl<K: Key, V: Value> BTreeMap<K, V> {
    fn tree(self) -> Tree {
        Tree {
            header: RawOid(self.header),
            kinds: (K::KIND, V::KIND),
        }
    }

    fn from_tree(tree: Tree) -> Self {
        BTreeMap {
            header: tree.header.0,
            kinds: PhantomData,
        }
    }

    /// A new, empty map.
    pub fn create(txn: &mut Transaction<'_>) -> Result<Self> {
        Tree::create(txn, (K::KIND, V::KIND), 0).map(Self::from_tree)
    }

    /// The map whose header is `oid`; an error if it is not a map of these key and value
    /// types.
    pub fn open(txn: &mut Transaction<'_>, oid: RawOid) -> Result<Self> {
        let map = BTreeMap {
            header: oid.0,
            kinds: PhantomData,
        };
        map.tree().meta(txn)?;
        Ok(map)
    }

    /// The longest key the map takes, in bytes as stored.
    pub fn key_max(self, txn: &mut Transaction<'_>) -> Result<usize> {
        Ok(self.tree().meta(txn)?.key_max)
    }

    /// The longest value the map takes, in bytes as stored.
    pub fn value_max(self, txn: &mut Transaction<'_>) -> Result<usize> {
        Ok(self.tree().meta(txn)?.value_max)
    }

    fn decode_value(self, bytes: Option<Vec<u8>>) -> Result<Option<V>> {
        bytes
            .map(|b| {
                V::read_value(&b).ok_or_else(|| lodestore_core::Error::CorruptCollection {
                    collection: self.oid(),
                    node: self.oid(),
                    reason: format!("a stored value of {} bytes that is not one", b.len()),
                })
            })
            .transpose()
    }

    /// The value stored under `key`.
    pub fn get<Q>(self, txn: &mut impl ReadTransaction, key: &Q) -> Result<Option<V>>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        let found = key.with_key_bytes(|key| {
            self.tree()
                .get_with(txn, key, |bytes| V::read_value(bytes).ok_or(bytes.len()))
        })?;
        found
            .map(|decoded| {
                decoded.map_err(|len| lodestore_core::Error::CorruptCollection {
                    collection: self.oid(),
                    node: self.oid(),
                    reason: format!("a stored value of {len} bytes that is not one"),
                })
            })
            .transpose()
    }

    /// Whether the map holds `key`.
    pub fn contains_key<Q>(self, txn: &mut impl ReadTransaction, key: &Q) -> Result<bool>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        let found = key.with_key_bytes(|key| self.tree().get_with(txn, key, |_| ()))?;
        Ok(found.is_some())
    }

    /// Stores `value` under `key`; the value it replaced, if any.
    pub fn insert<Q>(self, txn: &mut Transaction<'_>, key: &Q, value: &V) -> Result<Option<V>>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        let old = key.with_key_bytes(|key| {
            value.with_value_bytes(|value| self.tree().insert(txn, key, value))
        })?;
        self.decode_value(old)
    }

    /// Removes `key`; the value it had, if any.
    pub fn remove<Q>(self, txn: &mut Transaction<'_>, key: &Q) -> Result<Option<V>>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        let old = key.with_key_bytes(|key| self.tree().remove(txn, key))?;
        self.decode_value(old)
    }

    /// The entries with keys in `range`, in order; `.rev()` for the reverse.
    pub fn range<'t, Q, R>(self, txn: &'t mut impl ReadTransaction, range: R) -> Range<'t, K, V>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
        R: RangeBounds<Q>,
    {
        let low = encode_bound(range.start_bound());
        let high = encode_bound(range.end_bound());
        Range::new(txn, self.tree(), low, high)
    }

    /// Every entry, in order.
    pub fn iter<'t>(self, txn: &'t mut impl ReadTransaction) -> Range<'t, K, V> {
        Range::new(txn, self.tree(), Bound::Unbounded, Bound::Unbounded)
    }

    /// Every key, in order.
    pub fn keys<'t>(self, txn: &'t mut impl ReadTransaction) -> Keys<'t, K, V> {
        self.iter(txn).map(key_of)
    }

    /// The entry with the smallest key.
    pub fn first(self, txn: &mut impl ReadTransaction) -> Result<Option<(K, V)>> {
        self.iter(txn).next().transpose()
    }

    /// The entry with the largest key.
    pub fn last(self, txn: &mut impl ReadTransaction) -> Result<Option<(K, V)>> {
        self.iter(txn).next_back().transpose()
    }

    /// The number of entries. It reads every leaf (the header keeps no count, so that
    /// writers to different leaves do not all write the header).
    pub fn len(self, txn: &mut impl ReadTransaction) -> Result<u64> {
        self.tree().len(txn)
    }

    /// Whether the map has no entries.
    pub fn is_empty(self, txn: &mut impl ReadTransaction) -> Result<bool> {
        Ok(self.first(txn)?.is_none())
    }

    /// Removes every entry.
    pub fn clear(self, txn: &mut Transaction<'_>) -> Result<()> {
        self.tree().clear(txn)
    }

    /// Frees the map: its nodes and its header. The handle must not be used again.
    pub fn destroy(self, txn: &mut Transaction<'_>) -> Result<()> {
        self.tree().destroy(txn)
    }

    /// Verifies the tree's order and balance; what it holds if it is sound.
    pub fn check(self, txn: &mut impl ReadTransaction) -> Result<TreeReport> {
        self.tree().check(txn)
    }
}

/// An ordered set of keys, kept as a B+-tree (a map whose values are empty).
#[repr(transparent)]
pub struct BTreeSet<K> {
    map: BTreeMap<K, ()>,
}

// SAFETY: `repr(transparent)` over a `BTreeMap`, which is `Pod`.
unsafe impl<K: 'static> Zeroable for BTreeSet<K> {}
// SAFETY: as above.
unsafe impl<K: 'static> Pod for BTreeSet<K> {}

impl<K> Clone for BTreeSet<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for BTreeSet<K> {}
impl<K> PartialEq for BTreeSet<K> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}
impl<K> Eq for BTreeSet<K> {}
impl<K> BTreeSet<K> {
    /// The set's OID.
    pub fn oid(self) -> RawOid {
        self.map.oid()
    }
}
impl<K> std::fmt::Debug for BTreeSet<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BTreeSet({:?})", self.map.oid())
    }
}

impl<K: Key> BTreeSet<K> {
    /// A new, empty set.
    pub fn create(txn: &mut Transaction<'_>) -> Result<Self> {
        let tree = Tree::create(txn, (K::KIND, <() as Value>::KIND), FLAG_SET)?;
        Ok(BTreeSet {
            map: BTreeMap::from_tree(tree),
        })
    }

    /// The set whose header is `oid`.
    pub fn open(txn: &mut Transaction<'_>, oid: RawOid) -> Result<Self> {
        Ok(BTreeSet {
            map: BTreeMap::open(txn, oid)?,
        })
    }

    /// Whether the set holds `key`.
    pub fn contains<Q>(self, txn: &mut impl ReadTransaction, key: &Q) -> Result<bool>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        self.map.contains_key(txn, key)
    }

    /// Adds `key`; false if it was there already.
    pub fn insert<Q>(self, txn: &mut Transaction<'_>, key: &Q) -> Result<bool>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        Ok(self.map.insert(txn, key, &())?.is_none())
    }

    /// Removes `key`; false if it was not there.
    pub fn remove<Q>(self, txn: &mut Transaction<'_>, key: &Q) -> Result<bool>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
    {
        Ok(self.map.remove(txn, key)?.is_some())
    }

    /// The keys in `range`, in order; `.rev()` for the reverse.
    pub fn range<'t, Q, R>(self, txn: &'t mut impl ReadTransaction, range: R) -> Keys<'t, K, ()>
    where
        K: Borrow<Q>,
        Q: KeyBytes + ?Sized,
        R: RangeBounds<Q>,
    {
        self.map.range(txn, range).map(key_of)
    }

    /// Every key, in order.
    pub fn iter<'t>(self, txn: &'t mut impl ReadTransaction) -> Keys<'t, K, ()> {
        self.map.keys(txn)
    }

    /// The smallest key.
    pub fn first(self, txn: &mut impl ReadTransaction) -> Result<Option<K>> {
        Ok(self.map.first(txn)?.map(|(k, ())| k))
    }

    /// The largest key.
    pub fn last(self, txn: &mut impl ReadTransaction) -> Result<Option<K>> {
        Ok(self.map.last(txn)?.map(|(k, ())| k))
    }

    /// The number of keys (reads every leaf).
    pub fn len(self, txn: &mut impl ReadTransaction) -> Result<u64> {
        self.map.len(txn)
    }

    /// Whether the set is empty.
    pub fn is_empty(self, txn: &mut impl ReadTransaction) -> Result<bool> {
        self.map.is_empty(txn)
    }

    /// Removes every key.
    pub fn clear(self, txn: &mut Transaction<'_>) -> Result<()> {
        self.map.clear(txn)
    }

    /// Frees the set.
    pub fn destroy(self, txn: &mut Transaction<'_>) -> Result<()> {
        self.map.destroy(txn)
    }

    /// Verifies the tree's order and balance.
    pub fn check(self, txn: &mut impl ReadTransaction) -> Result<TreeReport> {
        self.map.check(txn)
    }
}
