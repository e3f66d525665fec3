//! The demo workload: an OO1-style graph of parts, built, committed, reopened and traversed.
//! It stands in for the benchmark suite until that exists.

use bytemuck::{Pod, Zeroable};
use lodestore::{Error, Oid, Options, Persistent, RawOid, Result, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Parts created (or connected) per transaction.
const BATCH_PARTS: u64 = 10_000;
/// Outgoing connections per part, as in OO1.
const CONNECTIONS: usize = 3;
/// Traversals run after reopening, and hops per traversal (OO1's traversal depth).
const TRAVERSALS: usize = 1000;
const TRAVERSAL_HOPS: usize = 7;
/// Type id of the index object holding every part's OID.
const INDEX_TYPE: u32 = 101;

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: i32,
    y: i32,
    build_date: u64,
    kind: [u8; 8],
    to: [Oid<Part>; CONNECTIONS],
}

impl Persistent for Part {
    const TYPE_ID: u32 = 100;
}

pub fn run(path: &Path, objects: u64, replace: bool, page_size: usize) -> Result<ExitCode> {
    if objects == 0 {
        return Err(Error::InvalidArgument(
            "--objects must be at least 1".into(),
        ));
    }
    if replace && path.exists() {
        // Under the store's exclusive lock: a store another process uses is refused, and the
        // store goes whole or not at all.
        Store::remove(path, &Options::new())?;
    }
    let mut rng = StdRng::seed_from_u64(0x00D0_0001);
    let started = Instant::now();
    let store = Store::create(path, Options::new().page_size(page_size))?;
    let oids = create_parts(&store, objects, &mut rng)?;
    let created = started.elapsed();
    connect_parts(&store, &oids, &mut rng)?;
    let connected = started.elapsed();
    drop(store);

    let store = Store::open(path, Options::new())?;
    let visited = traverse(&store, objects, &mut rng)?;
    let traversed = started.elapsed();
    println!("demo: {objects} parts with {CONNECTIONS} connections each");
    println!("  create    {:>10.1} ms", created.as_secs_f64() * 1e3);
    println!(
        "  connect   {:>10.1} ms",
        (connected - created).as_secs_f64() * 1e3
    );
    println!(
        "  reopen + {TRAVERSALS} traversals of {TRAVERSAL_HOPS} hops ({visited} parts visited, all verified) {:>8.1} ms",
        (traversed - connected).as_secs_f64() * 1e3
    );
    drop(store);
    println!();
    crate::inspect::info(path, false)
}

fn create_parts(store: &Store, count: u64, rng: &mut StdRng) -> Result<Vec<Oid<Part>>> {
    let mut session = store.session()?;
    let mut oids = Vec::with_capacity(count as usize);
    let mut id = 0;
    while id < count {
        let mut txn = session.begin()?;
        for _ in 0..BATCH_PARTS.min(count - id) {
            let part = Part {
                id,
                x: rng.random_range(0..100_000),
                y: rng.random_range(0..100_000),
                build_date: rng.random_range(0..10_000),
                kind: *b"part-xyz",
                to: [Oid::NULL; CONNECTIONS],
            };
            oids.push(txn.alloc(&part)?);
            id += 1;
        }
        txn.commit()?;
    }
    Ok(oids)
}

/// Connects each part to three others, 90% of them among the closest 1% by id (OO1), and
/// stores the index of all parts as one large object under the root `parts`.
fn connect_parts(store: &Store, oids: &[Oid<Part>], rng: &mut StdRng) -> Result<()> {
    let count = oids.len();
    let near = (count / 100).max(1);
    let mut session = store.session()?;
    for chunk in oids.chunks(BATCH_PARTS as usize) {
        let mut txn = session.begin()?;
        for &oid in chunk {
            let id = txn.get(oid)?.id as usize;
            let mut to = [Oid::NULL; CONNECTIONS];
            for target in &mut to {
                let index = if rng.random_range(0..10) < 9 {
                    let low = id.saturating_sub(near / 2);
                    rng.random_range(low..(low + near).min(count))
                } else {
                    rng.random_range(0..count)
                };
                *target = oids[index];
            }
            txn.get_mut(oid)?.to = to;
        }
        txn.commit()?;
    }
    let mut txn = session.begin()?;
    let raw: Vec<u64> = oids.iter().map(|o| o.raw().0).collect();
    let index = txn.alloc_bytes(INDEX_TYPE, bytemuck::cast_slice(&raw))?;
    txn.set_root("parts", index)?;
    txn.commit()?;
    Ok(())
}

/// Random 7-hop traversals; every part reached must carry the id its index position says.
fn traverse(store: &Store, count: u64, rng: &mut StdRng) -> Result<u64> {
    let mut session = store.session()?;
    let mut txn = session.begin()?;
    let index = txn.root("parts")?.ok_or_else(|| Error::RootNotFound {
        name: "parts".into(),
    })?;
    let bytes = txn.read_all(index)?;
    let oids: Vec<RawOid> = bytes
        .chunks_exact(8)
        .map(|c| RawOid(u64::from_le_bytes(c.try_into().expect("8-byte chunk"))))
        .collect();
    if oids.len() as u64 != count {
        return Err(Error::InvalidArgument(format!(
            "index holds {} parts, expected {count}",
            oids.len()
        )));
    }
    let position: std::collections::HashMap<RawOid, u64> = oids
        .iter()
        .enumerate()
        .map(|(i, o)| (*o, i as u64))
        .collect();
    let mut visited = 0u64;
    for _ in 0..TRAVERSALS {
        let mut current = Oid::<Part>::from_raw(oids[rng.random_range(0..oids.len())]);
        for _ in 0..TRAVERSAL_HOPS {
            let part = txn.read(current)?;
            if position.get(&current.raw()) != Some(&part.id) {
                return Err(Error::InvalidArgument(format!(
                    "part {:?} carries id {} but the index puts it elsewhere",
                    current, part.id
                )));
            }
            visited += 1;
            current = part.to[rng.random_range(0..CONNECTIONS)];
        }
    }
    txn.commit()?;
    Ok(visited)
}
