//! The OO1 operations: lookup, traversal and update (Hosking, Brown & Moss section 5.2),
//! written once against [`Oo1Access`] so that they run on Lodestore ([`Indexed`]) and on the
//! peer stores of `bench peers` alike.

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
    /// A sum over the part visits of a hash of the part's number and fields as read: equal on
    /// any two stores that hold the same parts with the same updates.
    pub checksum: u64,
}

/// What the OO1 operations need of a transaction.
pub trait Oo1Access {
    /// A copy of the part `oid`.
    fn part(&mut self, oid: Oid<Part>) -> Result<Part>;
    /// The part numbered `number`, through the part-number index.
    fn find(&mut self, number: u64) -> Result<Option<Oid<Part>>>;
    /// Increments the part's `x` and `y`.
    fn increment(&mut self, oid: Oid<Part>) -> Result<()>;
}

/// A Lodestore transaction with the database's part-number index (`None`: operations that do
/// not look parts up by number).
pub struct Indexed<'a, 't> {
    pub txn: &'a mut Transaction<'t>,
    pub index: Option<PartIndex>,
}

impl Oo1Access for Indexed<'_, '_> {
    fn part(&mut self, oid: Oid<Part>) -> Result<Part> {
        self.txn.get(oid).copied()
    }

    fn find(&mut self, number: u64) -> Result<Option<Oid<Part>>> {
        let index = self.index.ok_or_else(|| {
            Error::InvalidArgument(format!("part {number}: no part-number index at hand"))
        })?;
        index::lookup(self.txn, index, number)
    }

    fn increment(&mut self, oid: Oid<Part>) -> Result<()> {
        let part = self.txn.get_mut(oid)?;
        part.x += 1;
        part.y += 1;
        Ok(())
    }
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
    find_part(
        &mut Indexed {
            txn,
            index: Some(index),
        },
        number,
    )
}

/// The part numbered `number`, or an error naming it.
pub fn find_part(access: &mut impl Oo1Access, number: u64) -> Result<Oid<Part>> {
    access
        .find(number)?
        .ok_or_else(|| Error::InvalidArgument(format!("OO1 has no part numbered {number}")))
}

/// Lookup: fetch each part of `numbers` through the index and call the null procedure on its
/// x, y and type.
pub fn lookup(txn: &mut Transaction<'_>, index: PartIndex, numbers: &[u64]) -> Result<OpCounts> {
    lookup_in(
        &mut Indexed {
            txn,
            index: Some(index),
        },
        numbers,
    )
}

/// [`lookup`] through any [`Oo1Access`].
pub fn lookup_in(access: &mut impl Oo1Access, numbers: &[u64]) -> Result<OpCounts> {
    let mut counts = OpCounts::default();
    for &number in numbers {
        let oid = find_part(access, number)?;
        let part = access.part(oid)?;
        null_procedure(part.x, part.y, part.kind);
        counts.parts_visited += 1;
        counts.checksum = counts.checksum.wrapping_add(part_hash(&part));
    }
    Ok(counts)
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
    traverse_in(
        &mut Indexed { txn, index: None },
        start,
        update_probability,
        rng,
    )
}

/// [`traverse`] through any [`Oo1Access`].
pub fn traverse_in(
    access: &mut impl Oo1Access,
    start: Oid<Part>,
    update_probability: f64,
    rng: &mut StdRng,
) -> Result<OpCounts> {
    let mut counts = OpCounts::default();
    let mut modified = FxHashSet::default();
    let mut stack: Vec<(Oid<Part>, u32)> = Vec::with_capacity(64);
    stack.push((start, 0));
    while let Some((oid, depth)) = stack.pop() {
        let part = access.part(oid)?;
        null_procedure(part.x, part.y, part.kind);
        counts.parts_visited += 1;
        counts.checksum = counts.checksum.wrapping_add(part_hash(&part));
        if update_probability > 0.0 && rng.random_bool(update_probability) {
            access.increment(oid)?;
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

/// What a part visit adds to an operation's checksum.
fn part_hash(part: &Part) -> u64 {
    let mixed = part.id ^ (part.x as u64).rotate_left(21) ^ (part.y as u64).rotate_left(42);
    mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn null_procedure(x: i32, y: i32, kind: Oid<Text>) {
    std::hint::black_box((x, y, kind));
}
