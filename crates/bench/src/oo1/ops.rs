//! The OO1 operations: lookup, traversal and update (Hosking, Brown & Moss section 5.2).

use super::index;
use super::schema::{Oo1Root, Part, PartIndex, Text, CONNECTIONS};
use super::ROOT_NAME;
use lodestore::{Error, Oid, Result, Transaction};
use rand::rngs::StdRng;
use rand::Rng;
use rustc_hash::FxHashSet;
use serde::Serialize;

/// Hops of a traversal: 1 + 3 + ... + 3^7 = 3,280 part visits, duplicates included.
pub const TRAVERSAL_HOPS: u32 = 7;
/// Parts a lookup fetches.
pub const LOOKUP_PARTS: usize = 1000;

/// What an operation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    pub parts_visited: u64,
    pub updates: u64,
    pub distinct_objects_modified: u64,
}

/// The database's root object.
pub fn root(txn: &mut Transaction<'_>) -> Result<Oo1Root> {
    let oid: Oid<Oo1Root> = txn.root_typed(ROOT_NAME)?;
    Ok(*txn.get(oid)?)
}

/// The part numbered `number`, through the index.
pub fn part_by_number(
    txn: &mut Transaction<'_>,
    index: PartIndex,
    number: u64,
) -> Result<Oid<Part>> {
    index::lookup(txn, index, number)?
        .ok_or_else(|| Error::InvalidArgument(format!("OO1 has no part numbered {number}")))
}

/// Lookup: fetch each part of `numbers` through the index and call the null procedure on its
/// x, y and type.
pub fn lookup(txn: &mut Transaction<'_>, index: PartIndex, numbers: &[u64]) -> Result<OpCounts> {
    for &number in numbers {
        let part = part_by_number(txn, index, number)?;
        let part = txn.get(part)?;
        null_procedure(part.x, part.y, part.kind);
    }
    Ok(OpCounts {
        parts_visited: numbers.len() as u64,
        ..OpCounts::default()
    })
}

/// Traversal (and update, when `update_probability` > 0): depth first from `start` along the
/// outgoing connections, [`TRAVERSAL_HOPS`] hops deep, duplicates included; each part visited
/// is updated (x and y incremented) with the given probability, decided by `rng`.
pub fn traverse(
    txn: &mut Transaction<'_>,
    start: Oid<Part>,
    update_probability: f64,
    rng: &mut StdRng,
) -> Result<OpCounts> {
    let mut counts = OpCounts::default();
    let mut modified = FxHashSet::default();
    let mut stack: Vec<(Oid<Part>, u32)> = Vec::with_capacity(64);
    stack.push((start, 0));
    while let Some((oid, depth)) = stack.pop() {
        let part = *txn.get(oid)?;
        null_procedure(part.x, part.y, part.kind);
        counts.parts_visited += 1;
        if update_probability > 0.0 && rng.random_bool(update_probability) {
            let part = txn.get_mut(oid)?;
            part.x += 1;
            part.y += 1;
            counts.updates += 1;
            modified.insert(oid.raw().0);
        }
        if depth < TRAVERSAL_HOPS {
            for slot in (0..CONNECTIONS).rev() {
                stack.push((part.to[slot], depth + 1));
            }
        }
    }
    counts.distinct_objects_modified = modified.len() as u64;
    Ok(counts)
}

#[inline]
fn null_procedure(x: i32, y: i32, kind: Oid<Text>) {
    std::hint::black_box((x, y, kind));
}
