//! Ordered keys against the stores a user would pick instead: Lodestore's `BTreeMap` next to
//! redb and LMDB (through heed), each with its default durability, on the same keys in the same
//! run. Four workloads on `keys` u64 keys with u64 values:
//!
//! - **sorted inserts**: keys in ascending order into an empty store, in durable transactions
//!   of [`BATCH`] inserts;
//! - **random inserts**: the same keys shuffled into another empty store;
//! - **point lookups**: [`LOOKUPS`] random keys that exist, in read transactions of [`BATCH`];
//! - **range scans**: [`SCANS`] scans of [`SCAN_LEN`] consecutive keys from random starts, in
//!   read transactions of [`SCANS_PER_TXN`].
//!
//! Every store returns a checksum of what it read, and the checksums must agree: they hold the
//! same entries. Figures are operations per second; the ratios are Lodestore's to each peer's.

mod engines;

pub use engines::{Engine, EngineKind};

use lodestore::{Error, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Instant;

/// Inserts or lookups per transaction.
pub const BATCH: usize = 10_000;
/// Point lookups per run.
pub const LOOKUPS: usize = 200_000;
/// Range scans per run, keys per scan, scans per read transaction.
pub const SCANS: usize = 2_000;
pub const SCAN_LEN: usize = 1_000;
pub const SCANS_PER_TXN: usize = 100;

/// The value stored under `key`: derived from it, so every store's checksum can be predicted.
pub fn value_of(key: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

/// Keys are spread over the u64 range (key i is i times a large odd step), so sorted and
/// random orders differ from the order keys are generated in.
pub fn key_of(i: u64) -> u64 {
    i.wrapping_mul(0x0000_0100_0000_01B3)
}

/// The workloads, in the order they run.
pub const WORKLOADS: [&str; 4] = [
    "sorted inserts",
    "random inserts",
    "point lookups",
    "range scans",
];

/// One engine's figures in one run: operations per second per workload, and the checksum of
/// what its lookups and scans read.
#[derive(Clone, Debug)]
pub struct Figures {
    pub engine: EngineKind,
    pub ops_per_s: [f64; 4],
    pub read_checksum: u64,
    pub bytes_on_disk: u64,
}

/// Runs every workload on `engine` in `dir` (emptied first) with `keys` keys.
pub fn run(engine: EngineKind, dir: &Path, keys: u64, seed: u64) -> Result<Figures> {
    if keys < SCAN_LEN as u64 {
        return Err(Error::InvalidArgument(format!(
            "the key-value benchmark needs at least {SCAN_LEN} keys, not {keys}"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sorted: Vec<u64> = (0..keys).map(key_of).collect();
    sorted.sort_unstable();
    let mut shuffled = sorted.clone();
    shuffled.shuffle(&mut rng);
    let mut ops = [0.0; 4];

    // Sorted inserts into one store; random inserts into a second, which the reads then use.
    let sorted_dir = dir.join("sorted");
    let random_dir = dir.join("random");
    for d in [&sorted_dir, &random_dir] {
        remove(d)?;
    }
    {
        let mut store = Engine::create(engine, &sorted_dir)?;
        ops[0] = insert_all(&mut store, &sorted)?;
    }
    remove(&sorted_dir)?;
    let mut store = Engine::create(engine, &random_dir)?;
    ops[1] = insert_all(&mut store, &shuffled)?;

    let lookups: Vec<u64> = (0..LOOKUPS)
        .map(|_| sorted[rng.random_range(0..sorted.len())])
        .collect();
    let started = Instant::now();
    let mut checksum = 0u64;
    for batch in lookups.chunks(BATCH) {
        checksum = checksum.wrapping_add(store.get_batch(batch)?);
    }
    ops[2] = LOOKUPS as f64 / started.elapsed().as_secs_f64();

    let starts: Vec<u64> = (0..SCANS)
        .map(|_| sorted[rng.random_range(0..sorted.len() - SCAN_LEN)])
        .collect();
    let started = Instant::now();
    for batch in starts.chunks(SCANS_PER_TXN) {
        checksum = checksum.wrapping_add(store.scan_batch(batch, SCAN_LEN)?);
    }
    ops[3] = (SCANS * SCAN_LEN) as f64 / started.elapsed().as_secs_f64();
    let expected = expected_checksum(&sorted, &lookups, &starts);
    if checksum != expected {
        return Err(Error::InvalidArgument(format!(
            "{} read entries other than those written (checksum {checksum:#x}, expected \
             {expected:#x})",
            engine.name()
        )));
    }
    drop(store);
    let bytes_on_disk = crate::workspace::bytes_on_disk(&random_dir);
    remove(&random_dir)?;
    Ok(Figures {
        engine,
        ops_per_s: ops,
        read_checksum: checksum,
        bytes_on_disk,
    })
}

/// Inserts `keys` in transactions of [`BATCH`]; inserts per second.
fn insert_all(store: &mut Engine, keys: &[u64]) -> Result<f64> {
    let started = Instant::now();
    for batch in keys.chunks(BATCH) {
        store.insert_batch(batch)?;
    }
    Ok(keys.len() as f64 / started.elapsed().as_secs_f64())
}

/// What every store's lookups and scans must add up to.
fn expected_checksum(sorted: &[u64], lookups: &[u64], starts: &[u64]) -> u64 {
    let mut sum = 0u64;
    for &k in lookups {
        sum = sum.wrapping_add(value_of(k));
    }
    for &start in starts {
        let at = sorted.partition_point(|&k| k < start);
        for &k in &sorted[at..at + SCAN_LEN] {
            sum = sum.wrapping_add(k ^ value_of(k));
        }
    }
    sum
}

fn remove(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, "remove", e))?;
    }
    Ok(())
}
