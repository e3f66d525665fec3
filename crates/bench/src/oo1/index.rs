//! The part-number index of OO1: a B+-tree, bulk-loaded from the sorted part numbers (the
//! benchmark never inserts), searched by binary search in each node.

use super::schema::{IndexNode, Part};
use crate::lists::typed;
use lodestore::{Error, Oid, Persistent, Result, Transaction};

/// Entries per node: 16 bytes each, so a node fills about half an 8 KiB page.
pub const FANOUT: usize = 256;
const HEADER: usize = size_of::<IndexNode>();

/// Builds the tree over `entries` (sorted by key, keys unique) and returns its root.
pub fn bulk_load(txn: &mut Transaction<'_>, entries: &[(u64, u64)]) -> Result<Oid<IndexNode>> {
    assert!(
        entries.windows(2).all(|w| w[0].0 < w[1].0),
        "index keys must be sorted and unique"
    );
    let mut level = 0u32;
    let mut current: Vec<(u64, u64)> = entries.to_vec();
    loop {
        let mut parents = Vec::with_capacity(current.len() / FANOUT + 1);
        for chunk in current.chunks(FANOUT) {
            let node = write_node(txn, level, chunk)?;
            parents.push((chunk[0].0, node));
        }
        if parents.len() == 1 {
            return Ok(typed(parents[0].1));
        }
        current = parents;
        level += 1;
    }
}

fn write_node(txn: &mut Transaction<'_>, level: u32, entries: &[(u64, u64)]) -> Result<u64> {
    let header = IndexNode {
        level,
        count: entries.len() as u32,
    };
    let mut bytes = bytemuck::bytes_of(&header).to_vec();
    for (key, oid) in entries {
        bytes.extend_from_slice(&key.to_le_bytes());
        bytes.extend_from_slice(&oid.to_le_bytes());
    }
    Ok(txn.alloc_bytes(IndexNode::TYPE_ID, &bytes)?.0)
}

/// The part numbered `key`, if the tree holds it.
pub fn lookup(
    txn: &mut Transaction<'_>,
    root: Oid<IndexNode>,
    key: u64,
) -> Result<Option<Oid<Part>>> {
    let mut node = root.raw();
    loop {
        let bytes = txn.bytes(node)?;
        let corrupt = || Error::InvalidArgument(format!("index node {node} is malformed"));
        if bytes.len() < HEADER {
            return Err(corrupt());
        }
        let header: IndexNode = bytemuck::pod_read_unaligned(&bytes[..HEADER]);
        let count = header.count as usize;
        if count == 0 || bytes.len() != HEADER + count * 16 {
            return Err(corrupt());
        }
        let entry = |i: usize| {
            let at = HEADER + i * 16;
            let key = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
            let oid = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
            (key, oid)
        };
        // The last entry whose key is <= `key`.
        let (mut low, mut high) = (0, count);
        while high - low > 1 {
            let mid = (low + high) / 2;
            if entry(mid).0 <= key {
                low = mid;
            } else {
                high = mid;
            }
        }
        let (found_key, child) = entry(low);
        if header.level == 0 {
            return Ok((found_key == key).then(|| typed(child)));
        }
        if found_key > key {
            return Ok(None);
        }
        node = lodestore::RawOid(child);
    }
}
