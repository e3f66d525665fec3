//! The collection part of a workload: one `BTreeMap<u64, Packed<[u8; VALUE_LEN]>>` per store,
//! changed by inserts, removes and range removes, read by gets and scans in both directions.
//!
//! The oracle's model is OID to bytes, so the map's entries enter it under pseudo OIDs of a
//! volume no store uses: key `k` is `PSEUDO_BASE | k` and its bytes are the value. The model's
//! machinery (deltas, in-flight subsets, snapshots) then covers the map's logical contents as
//! it covers objects, while the tree's nodes (reserved objects, which `objects` skips) are
//! checked by reading the tree and by its `check`.

use crate::Model;
use lodestore::{BTreeMap, Packed, RawOid, ReadTransaction, Result, Transaction, TreeReport};
use rand::rngs::StdRng;
use rand::Rng;
use std::ops::Bound;

/// Bytes of each value: large enough that a few hundred entries fill several leaves.
pub(crate) const VALUE_LEN: usize = 48;
pub(crate) type Value = Packed<[u8; VALUE_LEN]>;
/// Keys are `u64`, as the benchmarks' are: their nodes are searched by interpolation, with
/// the brackets a descent hands down.
pub(crate) type Map = BTreeMap<u64, Value>;

/// Entries the map holds at most; past it the workload removes more than it inserts.
const ENTRIES_MAX: usize = 700;
/// Keys are drawn below this, so inserts often replace and removes often hit.
const KEY_SPACE: u64 = 4_000;
/// The root that names the map.
pub(crate) const ROOT: &str = "torture-map";

/// The first pseudo OID: volume 0xFFFF, which no store of a campaign has.
const PSEUDO_BASE: u64 = 0xFFFF << 48;

pub(crate) fn pseudo_oid(key: u64) -> RawOid {
    debug_assert!(key < KEY_SPACE);
    RawOid(PSEUDO_BASE | key)
}

pub(crate) fn is_pseudo(oid: RawOid) -> bool {
    oid.0 >= PSEUDO_BASE
}

fn key_of(oid: RawOid) -> u64 {
    debug_assert!(is_pseudo(oid));
    oid.0 & 0xFFFF_FFFF
}

/// The map's entries in the model, in key order.
fn entries(model: &Model) -> impl DoubleEndedIterator<Item = (u64, &Vec<u8>)> {
    model
        .range(RawOid(PSEUDO_BASE)..)
        .map(|(oid, bytes)| (key_of(*oid), bytes))
}

fn value_bytes(value: &Value) -> Vec<u8> {
    value.0.to_vec()
}

/// Creates the map in a store of its own transaction.
pub(crate) fn create(txn: &mut Transaction<'_>) -> Result<Map> {
    let map = Map::create(txn)?;
    txn.set_root(ROOT, map.oid())?;
    Ok(map)
}

fn mismatch(what: String) -> lodestore::Error {
    lodestore::Error::InvalidArgument(format!("the collection {what}"))
}

/// One step on the map inside `txn`, mirrored in `working`.
pub(crate) fn step(
    txn: &mut Transaction<'_>,
    map: Map,
    working: &mut Model,
    rng: &mut StdRng,
) -> Result<()> {
    let len = entries(working).count();
    let crowded = len >= ENTRIES_MAX;
    match rng.random_range(0..100) {
        0..45 if !crowded => {
            for _ in 0..rng.random_range(1..=40) {
                let key = rng.random_range(0..KEY_SPACE);
                let value = Packed(std::array::from_fn(|_| rng.random()));
                let replaced = map.insert(txn, &key, &value)?;
                let expected = working.insert(pseudo_oid(key), value_bytes(&value));
                if replaced.map(|v| value_bytes(&v)) != expected {
                    return Err(mismatch(format!("insert of {key} replaced another value")));
                }
            }
        }
        0..70 => {
            for _ in 0..rng.random_range(1..=40) {
                let key = rng.random_range(0..KEY_SPACE);
                let removed = map.remove(txn, &key)?;
                let expected = working.remove(&pseudo_oid(key));
                if removed.map(|v| value_bytes(&v)) != expected {
                    return Err(mismatch(format!("remove of {key} returned another value")));
                }
            }
        }
        70..78 => {
            // A range removed: the keys a scan finds, each removed.
            let low = rng.random_range(0..KEY_SPACE);
            let high = low.saturating_add(rng.random_range(1..400));
            let keys: Vec<u64> = map
                .range(txn, low..high)
                .map(|e| e.map(|(k, _)| k))
                .collect::<Result<_>>()?;
            for key in keys {
                map.remove(txn, &key)?;
                working.remove(&pseudo_oid(key));
            }
        }
        _ => compare_scan(txn, map, working, rng)?,
    }
    Ok(())
}

/// A range scan, forward or backward, and a few gets, compared with the model.
fn compare_scan<R: ReadTransaction>(
    txn: &mut R,
    map: Map,
    model: &Model,
    rng: &mut StdRng,
) -> Result<()> {
    let low = rng.random_range(0..KEY_SPACE);
    let high = low.saturating_add(rng.random_range(1..1_000));
    let range = (Bound::Included(low), Bound::Excluded(high));
    let expected: Vec<(u64, Vec<u8>)> = entries(model)
        .filter(|(k, _)| (low..high).contains(k))
        .map(|(k, v)| (k, v.clone()))
        .collect();
    let mut found: Vec<(u64, Vec<u8>)> = if rng.random_bool(0.5) {
        map.range(txn, range)
            .map(|e| e.map(|(k, v)| (k, value_bytes(&v))))
            .collect::<Result<_>>()?
    } else {
        let mut backward: Vec<(u64, Vec<u8>)> = map
            .range(txn, range)
            .rev()
            .map(|e| e.map(|(k, v)| (k, value_bytes(&v))))
            .collect::<Result<_>>()?;
        backward.reverse();
        backward
    };
    if found != expected {
        found.truncate(4);
        return Err(mismatch(format!(
            "scan of [{low}, {high}) found {found:?}..., not the {} entries written",
            expected.len()
        )));
    }
    for _ in 0..4 {
        let key = rng.random_range(0..KEY_SPACE);
        let got = map.get(txn, &key)?.map(|v| value_bytes(&v));
        if got.as_ref() != model.get(&pseudo_oid(key)) {
            return Err(mismatch(format!("get of {key} read another value")));
        }
    }
    Ok(())
}

/// The map's entries as pseudo objects, after `check` finds the tree sound and its count of
/// entries agrees with the scan; with what `check` found.
pub(crate) fn read_all<R: ReadTransaction>(txn: &mut R, map: Map) -> Result<(Model, TreeReport)> {
    let report = map.check(txn)?;
    let mut out = Model::new();
    for entry in map.iter(txn) {
        let (key, value) = entry?;
        out.insert(pseudo_oid(key), value_bytes(&value));
    }
    if report.entries != out.len() as u64 {
        return Err(lodestore::Error::CorruptCollection {
            collection: map.oid(),
            node: map.oid(),
            reason: format!(
                "check counts {} entries, a scan finds {}",
                report.entries,
                out.len()
            ),
        });
    }
    Ok((out, report))
}

/// The map's entries in `model`, as pseudo objects.
pub(crate) fn of_model(model: &Model) -> Model {
    model
        .range(RawOid(PSEUDO_BASE)..)
        .map(|(k, v)| (*k, v.clone()))
        .collect()
}

/// How two sets of entries differ, briefly.
pub(crate) fn difference(expected: &Model, found: &Model) -> String {
    let [missing, extra, changed] = crate::oracle::differing(expected, found, key_of);
    format!(
        "{} entries expected, {} found; keys missing {missing:?}, unexpected {extra:?}, with \
         other values {changed:?}",
        expected.len(),
        found.len()
    )
}
