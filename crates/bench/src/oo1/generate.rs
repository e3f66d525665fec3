//! The seeded OO1 database generator (Hosking, Brown & Moss section 5.1): parts numbered 1 to N,
//! three outgoing connections each, 90% of them to a part among the closest 1% by part number
//! and the rest to any part, string fields as separate objects, and a B+-tree on part number.

use super::index;
use super::schema::{Oo1Root, Part, Text, CONNECTIONS};
use crate::lists::alloc_oid_list;
use crate::oo7::schema::label;
use indicatif::ProgressBar;
use lodestore::{Error, Oid, Result, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Name of the root that holds the [`Oo1Root`].
pub const ROOT_NAME: &str = "oo1";

/// The version of the database layout `generate` makes, part of a cached template's name so a
/// template of an older layout is not reused (2: parts on pages of their own, written once
/// with their OIDs reserved ahead; 1: parts among their strings, linked in a second pass).
pub const LAYOUT: u32 = 2;

/// Parts per generator transaction.
const BATCH_PARTS: usize = 5000;

/// Fraction of connections that go to a close part, and how close (as a fraction of all parts).
const CLOSE_SHARE: f64 = 0.9;
const CLOSE_FRACTION: f64 = 0.01;

/// Kinds of parts and of connections (their names are the string fields).
const KINDS: usize = 10;

/// Each part's incoming connections as raw OIDs, all in one buffer (a list per part would be a
/// million small allocations).
struct Incoming {
    /// Part `i`'s list is `oids[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    oids: Vec<u64>,
}

impl Incoming {
    fn of(targets: &[[u64; CONNECTIONS]], parts: &[Oid<Part>]) -> Incoming {
        let mut starts = vec![0usize; parts.len() + 1];
        for &target in targets.iter().flatten() {
            starts[target as usize] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        // Filled from the back of each list, so lists keep the order of their sources.
        let mut next = starts.clone();
        let mut oids = vec![0u64; starts[parts.len()]];
        for (from, to) in targets.iter().enumerate().rev() {
            for &target in to.iter().rev() {
                next[target as usize] -= 1;
                oids[next[target as usize]] = parts[from].raw().0;
            }
        }
        Incoming { starts, oids }
    }

    fn of_part(&self, index: usize) -> &[u64] {
        &self.oids[self.starts[index]..self.starts[index + 1]]
    }
}

/// The part numbers part `from` (1-based) connects to.
pub fn connection_targets(rng: &mut StdRng, from: u64, parts: u64) -> [u64; CONNECTIONS] {
    let window = ((parts as f64 * CLOSE_FRACTION) as u64).max(2);
    let mut targets = [0; CONNECTIONS];
    for target in &mut targets {
        *target = if rng.random_bool(CLOSE_SHARE) {
            // The `window` part numbers around `from`, shifted inside 1..=parts at the ends.
            let low = from
                .saturating_sub(window / 2)
                .clamp(1, parts.saturating_sub(window - 1).max(1));
            low + rng.random_range(0..window.min(parts))
        } else {
            rng.random_range(1..=parts)
        };
    }
    targets
}

/// Builds an OO1 database of `parts` parts in `store`, deterministically for `seed`, and names
/// it by the root [`ROOT_NAME`]. `progress` advances by one per part.
pub fn generate(
    store: &Store,
    parts: u64,
    seed: u64,
    progress: &ProgressBar,
) -> Result<Oid<Oo1Root>> {
    if parts < 10 {
        return Err(Error::InvalidArgument(format!(
            "OO1 needs at least 10 parts, not {parts}"
        )));
    }
    let mut session = store.session()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let count = parts as usize;
    // Every part's OID before any part is written, so each part names the parts it connects
    // to (and is named by) when it is written: one pass, each page written once.
    let oids: Vec<Oid<Part>> = session.reserve(parts)?;
    let targets: Vec<[u64; CONNECTIONS]> = (1..=parts)
        .map(|from| connection_targets(&mut rng, from, parts))
        .collect();
    let incoming = Incoming::of(&targets, &oids);
    let part_kinds: [Text; KINDS] = std::array::from_fn(|i| Text {
        bytes: label(&format!("part-type{i}")),
    });
    let connection_kinds: [Text; KINDS] = std::array::from_fn(|i| Text {
        bytes: label(&format!("conn-type{i}")),
    });

    // Parts in part-number order, each with its string fields and incoming list.
    for first in (0..count).step_by(BATCH_PARTS) {
        let mut txn = session.begin()?;
        for index in first..(first + BATCH_PARTS).min(count) {
            let kind = txn.alloc(&part_kinds[rng.random_range(0..KINDS)])?;
            let mut connection_kind = [Oid::NULL; CONNECTIONS];
            for slot in &mut connection_kind {
                *slot = txn.alloc(&connection_kinds[rng.random_range(0..KINDS)])?;
            }
            let mut to = [Oid::NULL; CONNECTIONS];
            let mut connection_length = [0; CONNECTIONS];
            for slot in 0..CONNECTIONS {
                to[slot] = oids[targets[index][slot] as usize - 1];
                connection_length[slot] = rng.random_range(1..1000);
            }
            let part = Part {
                id: index as u64 + 1,
                build_date: rng.random_range(1000..2000),
                x: rng.random_range(0..100_000),
                y: rng.random_range(0..100_000),
                kind,
                to,
                connection_kind,
                connection_length,
                _pad: 0,
                incoming: alloc_oid_list(&mut txn, incoming.of_part(index))?,
            };
            txn.fill(oids[index], &part)?;
            progress.inc(1);
        }
        txn.commit()?;
    }
    drop(incoming);

    let index = index::load(&mut session, &oids)?;
    let mut txn = session.begin()?;
    let root = txn.alloc(&Oo1Root { seed, parts, index })?;
    txn.set_root(ROOT_NAME, root)?;
    txn.commit()?;
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore::RawOid;

    #[test]
    fn incoming_lists_hold_every_source_in_order() {
        let parts: u64 = 500;
        let mut rng = StdRng::seed_from_u64(3);
        let targets: Vec<[u64; CONNECTIONS]> = (1..=parts)
            .map(|from| connection_targets(&mut rng, from, parts))
            .collect();
        let oids: Vec<Oid<Part>> = (0..parts)
            .map(|i| Oid::from_raw(RawOid(1000 + i)))
            .collect();
        let mut naive = vec![Vec::new(); parts as usize];
        for (from, to) in targets.iter().enumerate() {
            for &target in to {
                naive[target as usize - 1].push(oids[from].raw().0);
            }
        }
        let incoming = Incoming::of(&targets, &oids);
        for (index, expected) in naive.iter().enumerate() {
            assert_eq!(incoming.of_part(index), &expected[..], "part {}", index + 1);
        }
    }
}
