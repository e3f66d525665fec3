//! Persistent collections: ordered maps and sets kept in the store as ordinary objects (a
//! small header and page-sized B+-tree nodes), so every scheme, recovery method and snapshot
//! covers them like any other object.
//!
//! - [`key`]: how keys and values become bytes that order as the keys do.
//! - [`node`]: a node's layout and the in-place edits of it.
//! - [`header`]: the collection's header object.
//! - [`tree`]: lookups, inserts with splits, removes with merges, scans, `check`.
//! - [`range`]: range iterators in both directions.
//! - [`map`]: the typed `BTreeMap` and `BTreeSet`.
//! - `offline`: `check` of a closed store walking every collection.

pub mod header;
pub mod key;
pub mod map;
pub mod node;
pub(crate) mod offline;
pub mod range;
pub mod tree;
