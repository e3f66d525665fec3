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

/// Parts per generator transaction.
const BATCH_PARTS: usize = 5000;

/// Fraction of connections that go to a close part, and how close (as a fraction of all parts).
const CLOSE_SHARE: f64 = 0.9;
const CLOSE_FRACTION: f64 = 0.01;

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
    let mut incoming = vec![Vec::new(); count];
    for (from, to) in targets.iter().enumerate() {
        for &target in to {
            incoming[target as usize - 1].push(oids[from].raw().0);
        }
    }

    // Parts in part-number order, each with its string fields and incoming list.
    for first in (0..count).step_by(BATCH_PARTS) {
        let mut txn = session.begin()?;
        for index in first..(first + BATCH_PARTS).min(count) {
            let kind = txn.alloc(&Text {
                bytes: label(&format!("part-type{}", rng.random_range(0..10))),
            })?;
            let mut connection_kind = [Oid::NULL; CONNECTIONS];
            for slot in &mut connection_kind {
                *slot = txn.alloc(&Text {
                    bytes: label(&format!("conn-type{}", rng.random_range(0..10))),
                })?;
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
                incoming: alloc_oid_list(&mut txn, &incoming[index])?,
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
