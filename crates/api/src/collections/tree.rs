//! The B+-tree itself, on bytes: keys and values as the typed layer encoded them. Every node
//! is an object of its own filling a page, so a node is also the unit of locking.
//!
//! Locking (strict two-phase, page locks, as for any object): a lookup locks the header and
//! every node on its path shared. An insert or remove locks the header and the inner nodes
//! on its path shared and the leaf exclusive; only a split or merge locks the parent (and its
//! parent, up to where the change stops) exclusive, and only a split of the root or a collapse
//! of it writes the header. So concurrent writers to different leaves go on side by side, and
//! writers meet only on a leaf they share or on a split, whose exclusive lock on the parent
//! waits for every other writer below it (and can make one of two splitters a deadlock victim,
//! which `Session::transact` retries).

use super::header::{Meta, MetaCache, HEADER_LEN};
use super::node::{self, Bracket, Entry, EntryBytes, Node};
use crate::{ReadTransaction, Transaction};
use lodestore_core::{Error, Oid as RawOid, Result, TypeId};
use std::ops::Bound;

/// What the tree's reads need of a transaction: the bytes of its objects, reserved ones
/// included. Object safe, so a scan keeps `&mut dyn NodeReader` whatever the transaction's
/// kind.
pub(crate) trait NodeReader {
    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]>;

    /// Where the reader keeps the header it read last, if it keeps one.
    fn meta_cache(&mut self) -> Option<&mut MetaCache> {
        None
    }
}

impl<T: ReadTransaction + ?Sized> NodeReader for T {
    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        ReadTransaction::object_bytes(self, oid, expected)
    }

    fn meta_cache(&mut self) -> Option<&mut MetaCache> {
        self.collection_meta_cache()
    }
}

/// A tree by its header's OID.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tree {
    pub header: RawOid,
    /// The key and value kinds the caller expects.
    pub kinds: (u64, u64),
}

/// What `check` found in a sound tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeReport {
    /// Entries in the leaves.
    pub entries: u64,
    /// Nodes, inner and leaves.
    pub nodes: u64,
    /// Levels of inner nodes above the leaves.
    pub height: u32,
}

/// Entries copied out of a leaf, in the order a scan yields them: the leaf copied whole (one
/// copy, not one per key and value) into a buffer the next leaf reuses, and where each entry
/// to yield lies in it. A scan allocates nothing per entry and, once its buffers have grown,
/// nothing per leaf.
#[derive(Default)]
pub(crate) struct Entries {
    bytes: Vec<u8>,
    /// Each entry's key and value start in `bytes` and their lengths, in yield order.
    spans: Vec<(u32, u16, u32, u16)>,
    /// The next entry to yield.
    next: usize,
}

impl Entries {
    #[inline]
    fn span(&self, at: usize) -> Option<(&[u8], &[u8])> {
        let &(key_at, key_len, value_at, value_len) = self.spans.get(at)?;
        let (key_at, value_at) = (key_at as usize, value_at as usize);
        Some((
            &self.bytes[key_at..key_at + key_len as usize],
            &self.bytes[value_at..value_at + value_len as usize],
        ))
    }

    /// The next entry's key and value.
    #[inline]
    pub fn front(&self) -> Option<(&[u8], &[u8])> {
        self.span(self.next)
    }

    #[inline]
    pub fn pop_front(&mut self) {
        debug_assert!(self.next < self.spans.len());
        self.next += 1;
    }

    /// The key of the entry yielded last, while the buffer still holds it.
    #[inline]
    pub fn last_yielded_key(&self) -> Option<&[u8]> {
        Some(self.span(self.next.checked_sub(1)?)?.0)
    }

    /// Replaces the entries with entries `indexes` of leaf `n`.
    fn refill(
        &mut self,
        n: &Node<'_>,
        indexes: impl ExactSizeIterator<Item = usize>,
    ) -> std::result::Result<(), node::Damage> {
        // Nodes fit a page: offsets and lengths fit the span's fields.
        debug_assert!(n.bytes.len() <= u16::MAX as usize);
        self.bytes.clear();
        self.bytes.extend_from_slice(n.bytes);
        self.spans.clear();
        self.spans.reserve(indexes.len());
        self.next = 0;
        for i in indexes {
            let (key, value) = n.ranges(i)?;
            self.spans.push((
                key.start as u32,
                key.len() as u16,
                value.start as u32,
                value.len() as u16,
            ));
        }
        Ok(())
    }
}

/// What an insert found in its leaf and did there.
enum LeafInsert {
    /// The key was at this index; its value, of the same length, was overwritten in place.
    Overwrite(usize, Vec<u8>),
    /// The key was at this index with a value of another length: the entry was removed, for
    /// the new one to go in.
    Replace(usize, Vec<u8>),
    /// The key was new and went in at this index (of the leaf whose header the plan read).
    Insert(usize, node::Header),
    /// The key was new, belongs at this index, and the leaf of this many entries is full.
    Full(usize, usize),
}

/// The inner nodes on the way to a leaf: each node and the child taken.
type Path = Vec<(RawOid, usize)>;

/// The leaf that holds a key: whether it is the tree's last, and the bracket of its keys
/// when known (for its search).
#[derive(Clone, Copy, Debug)]
struct Located {
    leaf: RawOid,
    last: bool,
    bracket: Option<Bracket>,
}

/// The leaf a transaction's last descent of a collection reached, the keys it can hold, and
/// the way there: an insert or lookup whose key falls within those bounds goes straight to
/// the leaf (keys inserted in ascending order, or near each other, descend once per leaf).
/// Valid while the transaction holds the locks it took on the way down (to its end) and has
/// changed no inner node, header or node allocation since: every such change forgets it.
#[derive(Debug, Default)]
pub(crate) struct LeafHint {
    valid: bool,
    tree: RawOid,
    leaf: RawOid,
    /// The leaf is the tree's last.
    last: bool,
    /// The lowest key the leaf may hold, if bounded (buffers kept for the next descent).
    low: Option<()>,
    low_key: Vec<u8>,
    /// The key the next leaf starts at, if any.
    high: Option<()>,
    high_key: Vec<u8>,
    /// The same bounds as integers, when the descent's searches learnt them: the leaf's
    /// search starts from them.
    bracket: Option<Bracket>,
    path: Path,
}

impl LeafHint {
    /// The leaf of `tree` that holds `key`, if known.
    #[inline]
    fn leaf_for(&self, tree: RawOid, key: &[u8]) -> Option<Located> {
        let holds = self.valid
            && self.tree == tree
            && (self.low.is_none() || node::compare_keys(key, &self.low_key).is_ge())
            && (self.high.is_none() || node::compare_keys(key, &self.high_key).is_lt());
        holds.then_some(Located {
            leaf: self.leaf,
            last: self.last,
            bracket: self.bracket,
        })
    }

    pub(crate) fn forget(&mut self) {
        self.valid = false;
    }
}

fn node_type(meta: &Meta) -> (TypeId, usize) {
    (TypeId::COLLECTION_NODE, meta.node_len)
}

impl Tree {
    #[cold]
    fn damaged(&self, node: RawOid, reason: impl Into<String>) -> Error {
        Error::CorruptCollection {
            collection: self.header,
            node,
            reason: reason.into(),
        }
    }

    /// A node that is not a node of the expected type and size is damage in this tree, not
    /// a caller's mistake.
    fn node_error(&self, node: RawOid, error: Error) -> Error {
        match error {
            Error::TypeMismatch {
                found, found_len, ..
            } => self.damaged(
                node,
                format!("a child that is an object of type {found}, {found_len} bytes"),
            ),
            Error::ObjectNotFound { .. } => self.damaged(node, "a child that does not exist"),
            other => other,
        }
    }

    /// Creates an empty tree: a header and one empty leaf.
    pub fn create(txn: &mut Transaction<'_>, kinds: (u64, u64), flags: u16) -> Result<Tree> {
        let page_size = txn.client().page_size();
        let node_len = lodestore_storage::slotted::payload_max(page_size).min(u16::MAX as usize);
        let entry_max = node::entry_max(node_len);
        let key_max = (entry_max / 2).min(1024);
        let value_max = entry_max - key_max;
        let root = txn
            .client()
            .alloc_collection_object(TypeId::COLLECTION_NODE, node_len)?;
        let meta = Meta {
            flags,
            key_kind: kinds.0,
            value_kind: kinds.1,
            root,
            height: 0,
            node_len,
            key_max,
            value_max,
        };
        node::init(
            txn.client().collection_bytes_mut(root, node_type(&meta))?,
            0,
        );
        let header = txn
            .client()
            .alloc_collection_object(TypeId::COLLECTION, HEADER_LEN)?;
        let tree = Tree { header, kinds };
        tree.write_meta(txn, &meta)?;
        Ok(tree)
    }

    /// The header, checked against the kinds expected.
    pub fn meta<T: NodeReader + ?Sized>(&self, txn: &mut T) -> Result<Meta> {
        let cached = txn
            .meta_cache()
            .and_then(|cache| cache.last)
            .filter(|(oid, _)| *oid == self.header);
        let meta = match cached {
            Some((_, meta)) => meta,
            None => {
                let meta = self.read_meta(txn)?;
                if let Some(cache) = txn.meta_cache() {
                    cache.last = Some((self.header, meta));
                }
                meta
            }
        };
        if (meta.key_kind, meta.value_kind) != self.kinds {
            return Err(Error::NotACollection {
                oid: self.header,
                reason: format!(
                    "its keys and values are of kinds {:#x} and {:#x}, not {:#x} and {:#x}",
                    meta.key_kind, meta.value_kind, self.kinds.0, self.kinds.1
                ),
            });
        }
        Ok(meta)
    }

    /// The header as the header object holds it, locked shared and checked.
    fn read_meta<T: NodeReader + ?Sized>(&self, txn: &mut T) -> Result<Meta> {
        let bytes = txn
            .object_bytes(self.header, Some((TypeId::COLLECTION, HEADER_LEN)))
            .map_err(|e| match e {
                Error::TypeMismatch {
                    found, found_len, ..
                } => Error::NotACollection {
                    oid: self.header,
                    reason: format!("it is an object of type {found}, {found_len} bytes"),
                },
                other => other,
            })?;
        Meta::decode(bytes).map_err(|reason| self.damaged(self.header, reason))
    }

    fn write_meta(&self, txn: &mut Transaction<'_>, meta: &Meta) -> Result<()> {
        // Forgotten first: should the write fail, the next read goes to the object.
        txn.meta_cache().last = None;
        txn.meta_cache().leaf.forget();
        txn.client()
            .collection_bytes_mut(self.header, (TypeId::COLLECTION, HEADER_LEN))?
            .copy_from_slice(&meta.encode());
        txn.meta_cache().last = Some((self.header, *meta));
        Ok(())
    }

    /// Runs `f` on node `oid`, locked shared, checked to be at `level`.
    fn read<T: NodeReader + ?Sized, R>(
        &self,
        txn: &mut T,
        meta: &Meta,
        oid: RawOid,
        level: u32,
        f: impl FnOnce(Node<'_>) -> std::result::Result<R, node::Damage>,
    ) -> Result<R> {
        let bytes = txn
            .object_bytes(oid, Some(node_type(meta)))
            .map_err(|e| self.node_error(oid, e))?;
        let node = Node::read(bytes).map_err(|r| self.damaged(oid, r))?;
        self.check_level(oid, node.header.level, level)?;
        f(node).map_err(|r| self.damaged(oid, r))
    }

    /// One change to node `oid`, locked exclusive and checked to be at `level`: `plan` reads
    /// the node and names the bytes the change writes (`None`: no change), then `apply` makes
    /// it, with the detector told of just those bytes. What `plan` found, and what `apply`
    /// returned if it ran.
    fn change<P, R>(
        &self,
        txn: &mut Transaction<'_>,
        meta: &Meta,
        oid: RawOid,
        level: u32,
        plan: impl FnOnce(Node<'_>) -> std::result::Result<(P, Option<node::Writes>), node::Damage>,
        apply: impl FnOnce(&mut [u8], &P) -> std::result::Result<R, node::Damage>,
    ) -> Result<(P, Option<R>)> {
        if level > 0 {
            // A change above the leaves may move a leaf's bounds.
            txn.meta_cache().leaf.forget();
        }
        let mut planned = None;
        let (found, bytes) = txn
            .client()
            .collection_change(oid, node_type(meta), |bytes| {
                let node = Node::read(bytes).map_err(|r| self.damaged(oid, r))?;
                self.check_level(oid, node.header.level, level)?;
                let (found, writes) = plan(node).map_err(|r| self.damaged(oid, r))?;
                planned = writes.clone();
                Ok((found, writes))
            })
            .map_err(|e| self.node_error(oid, e))?;
        let (Some(bytes), Some(writes)) = (bytes, planned) else {
            return Ok((found, None));
        };
        let before = cfg!(debug_assertions).then(|| bytes.to_vec());
        let applied = apply(bytes, &found).map_err(|r| self.damaged(oid, r))?;
        if let Some(before) = before {
            node::debug_assert_within(&before, bytes, &writes);
        }
        Ok((found, Some(applied)))
    }

    #[inline]
    fn check_level(&self, oid: RawOid, found: u8, level: u32) -> Result<()> {
        if found as u32 != level {
            return Err(self.damaged(
                oid,
                format!("a node at level {found} where {level} belongs"),
            ));
        }
        Ok(())
    }

    /// Rewrites node `oid` at `level` with `entries` (which fit).
    fn rebuild(
        &self,
        txn: &mut Transaction<'_>,
        meta: &Meta,
        oid: RawOid,
        level: u32,
        entries: &[Entry],
    ) -> Result<()> {
        txn.meta_cache().leaf.forget();
        self.change(
            txn,
            meta,
            oid,
            level,
            |n| Ok(((), Some(node::whole(n.bytes.len())))),
            |bytes, _| {
                node::build(bytes, level as u8, entries);
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Inserts an entry at index `i` of node `oid` in place; false, the node untouched, when
    /// it does not fit.
    #[allow(clippy::too_many_arguments)]
    fn insert_in_place(
        &self,
        txn: &mut Transaction<'_>,
        meta: &Meta,
        oid: RawOid,
        level: u32,
        i: usize,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        let ((), inserted) = self.change(
            txn,
            meta,
            oid,
            level,
            |n| Ok(((), node::insert_writes(&n, i, key.len(), value.len()))),
            |bytes, _| node::insert_at(bytes, i, key, value),
        )?;
        debug_assert!(inserted != Some(false), "the plan said the entry fits");
        Ok(inserted.is_some())
    }

    fn alloc_node(&self, txn: &mut Transaction<'_>, meta: &Meta) -> Result<RawOid> {
        txn.meta_cache().leaf.forget();
        txn.client()
            .alloc_collection_object(TypeId::COLLECTION_NODE, meta.node_len)
    }

    fn free_node(&self, txn: &mut Transaction<'_>, meta: &Meta, oid: RawOid) -> Result<()> {
        txn.meta_cache().leaf.forget();
        txn.client()
            .free_collection_object(oid, node_type(meta))
            .map_err(|e| self.node_error(oid, e))
    }

    /// The leaf whose keys include `key`, and whether it is the tree's last: from the
    /// transaction's hint when `key` is within its bounds, else by a descent from the root
    /// that takes each inner node shared and leaves the hint for the next call (with the way
    /// down, for [`Tree::take_path`]).
    #[inline]
    fn locate(&self, txn: &mut Transaction<'_>, meta: &Meta, key: &[u8]) -> Result<Located> {
        match txn.meta_cache().leaf.leaf_for(self.header, key) {
            Some(found) => Ok(found),
            None => self.descend(txn, meta, key),
        }
    }

    /// [`Tree::locate`] without the hint: the descent, which leaves a new hint.
    fn descend(&self, txn: &mut Transaction<'_>, meta: &Meta, key: &[u8]) -> Result<Located> {
        txn.meta_cache().leaf.forget();
        let mut hint = std::mem::take(&mut txn.meta_cache().leaf);
        hint.path.clear();
        hint.low = None;
        hint.high = None;
        let mut oid = meta.root;
        let mut last = true;
        let mut bracket = None;
        for level in (1..=meta.height).rev() {
            let (i, child, last_child, child_bracket) = self.read(txn, meta, oid, level, |n| {
                let (i, child_bracket) = n.child_within(key, bracket)?;
                // The child's bounds: its separator and the next one, where the node has
                // them; else the node's own, from further up. Where the search learnt the
                // child's bracket, its bounds are those separators, already compared.
                if i > 0 {
                    hint.low = Some(());
                    hint.low_key.clear();
                    match child_bracket.and_then(|b| b.below) {
                        Some(below) => hint.low_key.extend_from_slice(&below.to_be_bytes()),
                        None => hint.low_key.extend_from_slice(n.key(i)?),
                    }
                    debug_assert_eq!(hint.low_key, n.key(i)?);
                }
                if i + 1 < n.count() {
                    hint.high = Some(());
                    hint.high_key.clear();
                    match child_bracket.and_then(|b| b.above) {
                        Some(above) => hint.high_key.extend_from_slice(&above.to_be_bytes()),
                        None => hint.high_key.extend_from_slice(n.key(i + 1)?),
                    }
                    debug_assert_eq!(hint.high_key, n.key(i + 1)?);
                }
                Ok((i, n.child(i)?, i + 1 == n.count(), child_bracket))
            })?;
            last &= last_child;
            hint.path.push((oid, i));
            oid = child;
            bracket = child_bracket;
        }
        hint.valid = true;
        hint.tree = self.header;
        hint.leaf = oid;
        hint.last = last;
        hint.bracket = bracket;
        txn.meta_cache().leaf = hint;
        Ok(Located {
            leaf: oid,
            last,
            bracket,
        })
    }

    /// The way down to `leaf`, which [`Tree::locate`] found for `key`: the hint's, taken
    /// (the caller is about to change the tree above the leaves), or found again.
    fn take_path(
        &self,
        txn: &mut Transaction<'_>,
        meta: &Meta,
        key: &[u8],
        leaf: RawOid,
    ) -> Result<Path> {
        let hint = &mut txn.meta_cache().leaf;
        if hint
            .leaf_for(self.header, key)
            .is_some_and(|found| found.leaf == leaf)
        {
            hint.forget();
            return Ok(std::mem::take(&mut hint.path));
        }
        // The hint is gone (a change above the leaves since): descend again, which leaves it.
        let found = self.descend(txn, meta, key)?.leaf;
        let hint = &mut txn.meta_cache().leaf;
        hint.forget();
        let path = std::mem::take(&mut hint.path);
        if found != leaf {
            return Err(self.damaged(
                leaf,
                format!("a second descent for a key reached node {found}, not this leaf"),
            ));
        }
        Ok(path)
    }

    pub fn check_key(&self, meta: &Meta, key: &[u8]) -> Result<()> {
        if key.len() > meta.key_max {
            return Err(Error::EntryTooLong {
                collection: self.header,
                what: "key",
                len: key.len(),
                max: meta.key_max,
            });
        }
        Ok(())
    }

    /// `read` of the value stored under `key`, in place in its leaf.
    pub fn get_with<T: NodeReader + ?Sized, R>(
        &self,
        txn: &mut T,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        let meta = self.meta(txn)?;
        if key.len() > meta.key_max {
            return Ok(None);
        }
        let hinted = txn
            .meta_cache()
            .and_then(|cache| cache.leaf.leaf_for(self.header, key));
        let (oid, bracket) = match hinted {
            Some(found) => (found.leaf, found.bracket),
            None => {
                // The way down without the path a change would need.
                // Each node's search brackets the child's keys for the next search.
                let (mut oid, mut bracket) = (meta.root, None);
                for level in (1..=meta.height).rev() {
                    (oid, bracket) = self.read(txn, &meta, oid, level, |n| {
                        let (i, child_bracket) = n.child_within(key, bracket)?;
                        Ok((n.child(i)?, child_bracket))
                    })?;
                }
                (oid, bracket)
            }
        };
        self.read(txn, &meta, oid, 0, |n| {
            match n.search_within(key, bracket)?.0 {
                Ok(i) => Ok(Some(read(n.value(i)?))),
                Err(_) => Ok(None),
            }
        })
    }

    /// In a transaction rerun after a lock conflict, locks the header exclusive before a
    /// change: every operation on the tree reads the header first, so once this lock is
    /// granted (after the transactions reading the tree have ended) the transaction has the
    /// tree to itself and its splits and merges wait for nobody. Taking it again is a
    /// lookup in the transaction's lock map.
    fn claim_whole_tree(&self, txn: &mut Transaction<'_>) -> Result<()> {
        if !txn.collections_exclusive {
            return Ok(());
        }
        txn.client()
            .collection_change(self.header, (TypeId::COLLECTION, HEADER_LEN), |_| {
                Ok(((), None::<[std::ops::Range<usize>; 0]>))
            })
            .map(|_| ())
    }

    /// Stores `value` under `key`; the value it replaced, if any.
    pub fn insert(
        &self,
        txn: &mut Transaction<'_>,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        self.claim_whole_tree(txn)?;
        let mut meta = self.meta(txn)?;
        self.check_key(&meta, key)?;
        if value.len() > meta.value_max {
            return Err(Error::EntryTooLong {
                collection: self.header,
                what: "value",
                len: value.len(),
                max: meta.value_max,
            });
        }
        let Located {
            leaf,
            last: last_leaf,
            bracket,
        } = self.locate(txn, &meta, key)?;
        // The leaf is locked exclusive from the start: a shared lock upgraded later would let
        // two inserters into one leaf deadlock.
        let (found, done) = self.change(
            txn,
            &meta,
            leaf,
            0,
            |n| {
                Ok(match n.search_within(key, bracket)?.0 {
                    Ok(i) => {
                        let old = n.value(i)?.to_vec();
                        match node::overwrite_writes(&n, i, value.len())? {
                            Some(writes) => (LeafInsert::Overwrite(i, old), Some(writes)),
                            None => (
                                LeafInsert::Replace(i, old),
                                Some(node::remove_writes(&n, i)),
                            ),
                        }
                    }
                    Err(i) => match node::insert_writes(&n, i, key.len(), value.len()) {
                        Some(writes) => (LeafInsert::Insert(i, n.header), Some(writes)),
                        None => (LeafInsert::Full(i, n.count()), None),
                    },
                })
            },
            |bytes, found| match *found {
                LeafInsert::Overwrite(i, _) => node::overwrite_value(bytes, i, value),
                LeafInsert::Replace(i, _) => node::remove_at(bytes, i).map(|()| true),
                LeafInsert::Insert(i, header) => node::insert_planned(bytes, header, i, key, value),
                LeafInsert::Full(..) => unreachable!("no change was planned"),
            },
        )?;
        debug_assert!(done != Some(false), "the plan said the change fits");
        let (old, at, append) = match found {
            LeafInsert::Overwrite(_, old) => return Ok(Some(old)),
            LeafInsert::Insert(..) => return Ok(None),
            LeafInsert::Replace(i, old) => {
                if self.insert_in_place(txn, &meta, leaf, 0, i, key, value)? {
                    return Ok(Some(old));
                }
                (Some(old), i, false)
            }
            LeafInsert::Full(i, count) => (None, i, last_leaf && i == count),
        };
        let mut path = self.take_path(txn, &meta, key, leaf)?;
        if append {
            // Past the last key of the tree (keys inserted in ascending order): the full leaf
            // stays as it is and the new key starts a leaf of its own, so an ascending load
            // fills its leaves instead of leaving each half empty.
            let new = self.alloc_node(txn, &meta)?;
            self.write_fresh(txn, &meta, new, 0, &[node::entry(key, value)])?;
            if let Some((parent, entries)) = self.link(
                txn,
                &mut meta,
                &mut path,
                leaf,
                0,
                EntryBytes::from_slice(key),
                new,
            )? {
                self.split(txn, &mut meta, path, parent, 1, entries)?;
            }
            return Ok(old);
        }
        let mut entries = self.read(txn, &meta, leaf, 0, |n| n.entries())?;
        entries.insert(at, node::entry(key, value));
        self.split(txn, &mut meta, path, leaf, 0, entries)?;
        Ok(old)
    }

    /// Splits node `oid` at `level` (at the bottom of `path`), which `entries` overfill, and
    /// links the new node into the parent, splitting upwards as far as needed.
    fn split(
        &self,
        txn: &mut Transaction<'_>,
        meta: &mut Meta,
        mut path: Path,
        mut oid: RawOid,
        mut level: u32,
        mut entries: Vec<Entry>,
    ) -> Result<()> {
        loop {
            let mut right = entries.split_off(node::split_point(&entries));
            let separator = right[0].0.clone();
            if level > 0 {
                // An inner node's first key is implied; the separator moves up.
                right[0].0.clear();
            }
            let new = self.alloc_node(txn, meta)?;
            self.write_fresh(txn, meta, new, level, &right)?;
            self.rebuild(txn, meta, oid, level, &entries)?;
            match self.link(txn, meta, &mut path, oid, level, separator, new)? {
                None => return Ok(()),
                Some((parent, parent_entries)) => {
                    oid = parent;
                    entries = parent_entries;
                    level += 1;
                }
            }
        }
    }

    /// Puts `separator` and the new node `new` right after node `oid` (at `level`, the
    /// bottom of `path`) in its parent, or under a new root when `oid` is the root. When the
    /// parent is full, its entries with the new one, for the caller to split it.
    #[allow(clippy::too_many_arguments)]
    fn link(
        &self,
        txn: &mut Transaction<'_>,
        meta: &mut Meta,
        path: &mut Path,
        oid: RawOid,
        level: u32,
        separator: EntryBytes,
        new: RawOid,
    ) -> Result<Option<(RawOid, Vec<Entry>)>> {
        let child = new.0.to_le_bytes();
        let Some((parent, i)) = path.pop() else {
            // The root split: a new root above the two halves.
            let root = self.alloc_node(txn, meta)?;
            let entries = vec![
                (
                    EntryBytes::new(),
                    EntryBytes::from_slice(&oid.0.to_le_bytes()),
                ),
                (separator, EntryBytes::from_slice(&child)),
            ];
            self.write_fresh(txn, meta, root, level + 1, &entries)?;
            meta.root = root;
            meta.height += 1;
            self.write_meta(txn, meta)?;
            return Ok(None);
        };
        if self.insert_in_place(txn, meta, parent, level + 1, i + 1, &separator, &child)? {
            return Ok(None);
        }
        let mut entries = self.read(txn, meta, parent, level + 1, |n| n.entries())?;
        entries.insert(i + 1, (separator, EntryBytes::from_slice(&child)));
        Ok(Some((parent, entries)))
    }

    /// Formats a freshly allocated node with `entries`.
    fn write_fresh(
        &self,
        txn: &mut Transaction<'_>,
        meta: &Meta,
        oid: RawOid,
        level: u32,
        entries: &[Entry],
    ) -> Result<()> {
        debug_assert!(node::fits(entries, meta.node_len));
        let bytes = txn.client().collection_bytes_mut(oid, node_type(meta))?;
        node::build(bytes, level as u8, entries);
        Ok(())
    }

    /// Removes `key`; the value it had, if any.
    pub fn remove(&self, txn: &mut Transaction<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.claim_whole_tree(txn)?;
        let mut meta = self.meta(txn)?;
        if key.len() > meta.key_max {
            return Ok(None);
        }
        let Located { leaf, bracket, .. } = self.locate(txn, &meta, key)?;
        // A removal may merge nodes, which needs the way down: taken now, as the merge would
        // forget the hint.
        let path = self.take_path(txn, &meta, key, leaf)?;
        let (found, _) = self.change(
            txn,
            &meta,
            leaf,
            0,
            |n| match n.search_within(key, bracket)?.0 {
                Ok(i) => Ok((
                    Some((i, n.value(i)?.to_vec())),
                    Some(node::remove_writes(&n, i)),
                )),
                Err(_) => Ok((None, None)),
            },
            |bytes, found| match found {
                Some((i, _)) => node::remove_at(bytes, *i),
                None => unreachable!("no change was planned"),
            },
        )?;
        let Some((_, old)) = found else {
            return Ok(None);
        };
        self.rebalance(txn, &mut meta, path, leaf)?;
        Ok(Some(old))
    }

    /// After a removal from node `oid`: merges it with a sibling when it is under a quarter
    /// full and the two fit in one node, removing the separator from the parent and going on
    /// upwards; collapses a root left with one child. Nodes are merged but never
    /// redistributed, so a node may stay sparse when its sibling is too full to merge with;
    /// every leaf stays at the same depth.
    fn rebalance(
        &self,
        txn: &mut Transaction<'_>,
        meta: &mut Meta,
        mut path: Path,
        mut oid: RawOid,
    ) -> Result<()> {
        let mut level = 0u32;
        loop {
            let header = self.read(txn, meta, oid, level, |n| Ok(n.header))?;
            let Some((parent, _)) = path.last().copied() else {
                return self.collapse_root(txn, meta);
            };
            if header.used(meta.node_len) * 4 >= meta.node_len {
                return Ok(());
            }
            let i = path.pop().expect("checked above").1;
            level += 1;
            let (left_at, right_at) = if i > 0 { (i - 1, i) } else { (0, 1) };
            let sibling = self.read(txn, meta, parent, level, |n| {
                if right_at >= n.count() {
                    return Ok(None);
                }
                Ok(Some((
                    n.child(left_at)?,
                    n.child(right_at)?,
                    EntryBytes::from_slice(n.key(right_at)?),
                )))
            })?;
            let Some((left, right, separator)) = sibling else {
                // An only child: nothing to merge with here; see whether the parent can.
                oid = parent;
                continue;
            };
            let child_level = level - 1;
            let mut merged = self.read(txn, meta, left, child_level, |n| n.entries())?;
            let mut right_entries = self.read(txn, meta, right, child_level, |n| n.entries())?;
            if child_level > 0 {
                // The separator comes down as the right node's first key.
                let Some(first) = right_entries.first_mut() else {
                    return Err(self.damaged(right, "an inner node without children"));
                };
                first.0 = separator;
            }
            merged.append(&mut right_entries);
            if !node::fits(&merged, meta.node_len) {
                return Ok(());
            }
            self.rebuild(txn, meta, left, child_level, &merged)?;
            self.free_node(txn, meta, right)?;
            self.change(
                txn,
                meta,
                parent,
                level,
                |n| Ok(((), Some(node::remove_writes(&n, right_at)))),
                |bytes, _| node::remove_at(bytes, right_at),
            )?;
            oid = parent;
        }
    }

    /// While the root is an inner node with one child, makes the child the root.
    fn collapse_root(&self, txn: &mut Transaction<'_>, meta: &mut Meta) -> Result<()> {
        let mut changed = false;
        while meta.height > 0 {
            let only = self.read(txn, meta, meta.root, meta.height, |n| {
                Ok(if n.count() == 1 {
                    Some(n.child(0)?)
                } else {
                    None
                })
            })?;
            let Some(child) = only else { break };
            self.free_node(txn, meta, meta.root)?;
            meta.root = child;
            meta.height -= 1;
            changed = true;
        }
        if changed {
            self.write_meta(txn, meta)?;
        }
        Ok(())
    }

    /// Puts into `into` the entries of the leaf holding the first keys at or after `from`,
    /// from there on; where the next leaf's keys begin (`None`: this leaf is the last).
    pub fn scan_forward<T: NodeReader + ?Sized>(
        &self,
        txn: &mut T,
        from: Bound<&[u8]>,
        into: &mut Entries,
    ) -> Result<Option<Vec<u8>>> {
        let meta = self.meta(txn)?;
        let mut oid = meta.root;
        let mut fence = None;
        for level in (1..=meta.height).rev() {
            let (child, upper) = self.read(txn, &meta, oid, level, |n| {
                let i = match from {
                    Bound::Unbounded => 0,
                    Bound::Included(k) | Bound::Excluded(k) => n.child_for(k)?,
                };
                let upper = if i + 1 < n.count() {
                    Some(n.key(i + 1)?.to_vec())
                } else {
                    None
                };
                Ok((n.child(i)?, upper))
            })?;
            fence = upper.or(fence);
            oid = child;
        }
        self.read(txn, &meta, oid, 0, |n| {
            let start = match from {
                Bound::Unbounded => 0,
                Bound::Included(k) => n.search(k)?.unwrap_or_else(|i| i),
                Bound::Excluded(k) => n.search(k)?.map_or_else(|i| i, |i| i + 1),
            };
            into.refill(&n, start..n.count())
        })?;
        Ok(fence)
    }

    /// Puts into `into` the entries of the leaf holding the last keys at or before `to`, up to
    /// there, last first; the lowest key that leaf can hold (`None`: it is the first).
    pub fn scan_backward<T: NodeReader + ?Sized>(
        &self,
        txn: &mut T,
        to: Bound<&[u8]>,
        into: &mut Entries,
    ) -> Result<Option<Vec<u8>>> {
        let meta = self.meta(txn)?;
        let mut oid = meta.root;
        let mut fence = None;
        for level in (1..=meta.height).rev() {
            let (child, lower) = self.read(txn, &meta, oid, level, |n| {
                let i = match to {
                    Bound::Unbounded => n.count().saturating_sub(1),
                    Bound::Included(k) => n.child_for(k)?,
                    // The last child that can hold a key below `k`.
                    Bound::Excluded(k) => match n.search(k)? {
                        Ok(i) | Err(i) => i.saturating_sub(1),
                    },
                };
                let lower = if i > 0 {
                    Some(n.key(i)?.to_vec())
                } else {
                    None
                };
                Ok((n.child(i)?, lower))
            })?;
            fence = lower.or(fence);
            oid = child;
        }
        self.read(txn, &meta, oid, 0, |n| {
            let end = match to {
                Bound::Unbounded => n.count(),
                Bound::Included(k) => n.search(k)?.map_or_else(|i| i, |i| i + 1),
                Bound::Excluded(k) => n.search(k)?.unwrap_or_else(|i| i),
            };
            into.refill(&n, (0..end).rev())
        })?;
        Ok(fence)
    }

    /// Visits every node, parents before children, with its level.
    fn walk<T: NodeReader + ?Sized>(
        &self,
        txn: &mut T,
        meta: &Meta,
        mut visit: impl FnMut(RawOid, u32, Node<'_>) -> std::result::Result<(), node::Damage>,
    ) -> Result<()> {
        let mut stack = vec![(meta.root, meta.height)];
        while let Some((oid, level)) = stack.pop() {
            let children = self.read(txn, meta, oid, level, |n| {
                visit(oid, level, n)?;
                if n.is_leaf() {
                    return Ok(Vec::new());
                }
                (0..n.count()).rev().map(|i| n.child(i)).collect()
            })?;
            stack.extend(children.into_iter().map(|c| (c, level - 1)));
        }
        Ok(())
    }

    /// Entries in the tree, counted by reading every leaf.
    pub fn len<T: NodeReader + ?Sized>(&self, txn: &mut T) -> Result<u64> {
        let meta = self.meta(txn)?;
        let mut entries = 0;
        self.walk(txn, &meta, |_, level, n| {
            if level == 0 {
                entries += n.count() as u64;
            }
            Ok(())
        })?;
        Ok(entries)
    }

    /// Frees every node and leaves one empty leaf.
    pub fn clear(&self, txn: &mut Transaction<'_>) -> Result<()> {
        let mut meta = self.meta(txn)?;
        self.free_all(txn, &meta)?;
        meta.root = self.alloc_node(txn, &meta)?;
        meta.height = 0;
        self.write_fresh(txn, &meta, meta.root, 0, &[])?;
        self.write_meta(txn, &meta)
    }

    /// Frees every node and the header.
    pub fn destroy(&self, txn: &mut Transaction<'_>) -> Result<()> {
        let meta = self.meta(txn)?;
        self.free_all(txn, &meta)?;
        txn.meta_cache().last = None;
        txn.meta_cache().leaf.forget();
        txn.client()
            .free_collection_object(self.header, (TypeId::COLLECTION, HEADER_LEN))
    }

    fn free_all(&self, txn: &mut Transaction<'_>, meta: &Meta) -> Result<()> {
        let mut nodes = Vec::new();
        self.walk(txn, meta, |oid, _, _| {
            nodes.push(oid);
            Ok(())
        })?;
        for oid in nodes {
            self.free_node(txn, meta, oid)?;
        }
        Ok(())
    }

    /// Verifies the whole tree: every node readable and at its level, keys strictly
    /// increasing within each node and within the bounds its parent gives it, every leaf at
    /// the same depth, no node reached twice.
    pub fn check<T: NodeReader + ?Sized>(&self, txn: &mut T) -> Result<TreeReport> {
        let meta = self.meta(txn)?;
        let mut report = TreeReport {
            height: meta.height,
            ..TreeReport::default()
        };
        let mut seen = std::collections::HashSet::new();
        // Each node with the bounds its keys must keep: at least `low`, below `high`.
        type Bounds = (Option<Vec<u8>>, Option<Vec<u8>>);
        let mut stack: Vec<(RawOid, u32, Bounds)> = vec![(meta.root, meta.height, (None, None))];
        while let Some((oid, level, (low, high))) = stack.pop() {
            if !seen.insert(oid) {
                return Err(self.damaged(oid, "a node reached twice"));
            }
            report.nodes += 1;
            let children = self.read(txn, &meta, oid, level, |n| {
                let mut previous: Option<&[u8]> = None;
                let mut children = Vec::new();
                if level > 0 && n.count() == 0 {
                    return Err("an inner node without children".into());
                }
                for i in 0..n.count() {
                    let (key, value) = n.entry(i)?;
                    let implied = level > 0 && i == 0;
                    if implied && !key.is_empty() {
                        return Err("an inner node whose first key is not empty".into());
                    }
                    if !implied {
                        if key.len() > meta.key_max {
                            return Err(format!("entry {i}: a key of {} bytes", key.len()));
                        }
                        if previous.is_some_and(|p| p >= key) {
                            return Err(format!("entry {i}: keys out of order"));
                        }
                        if low.as_deref().is_some_and(|l| key < l)
                            || high.as_deref().is_some_and(|h| key >= h)
                        {
                            return Err(format!(
                                "entry {i}: a key outside the range its parent gives it"
                            ));
                        }
                        previous = Some(key);
                    }
                    if level == 0 {
                        if value.len() > meta.value_max {
                            return Err(format!("entry {i}: a value of {} bytes", value.len()));
                        }
                        continue;
                    }
                    let child_low = if implied {
                        low.clone()
                    } else {
                        Some(key.to_vec())
                    };
                    let child_high = if i + 1 < n.count() {
                        Some(n.key(i + 1)?.to_vec())
                    } else {
                        high.clone()
                    };
                    children.push((n.child(i)?, level - 1, (child_low, child_high)));
                }
                if level == 0 {
                    return Ok((Vec::new(), n.count() as u64));
                }
                Ok((children, 0))
            })?;
            report.entries += children.1;
            stack.extend(children.0);
        }
        Ok(report)
    }
}
