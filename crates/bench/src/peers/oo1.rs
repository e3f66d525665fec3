//! OO1 on any store (Hosking, Brown & Moss section 5.2's operations, as `bench oo1` runs them on
//! Lodestore): load, then per run a lookup of 1,000 random parts, a traversal and an update (a
//! traversal updating every part it visits), each one transaction from random part numbers
//! that every store draws alike. The peers find parts by number through their own index
//! entries; Lodestore through its collection.

use super::database::Database;
use super::engine::Engine;
use super::kv::Peer;
use super::objects::PeerObjects;
use super::{median, PeersConfig, StoreKind};
use crate::oo1::ops::{self, find_part, Indexed, Oo1Access, OpCounts};
use crate::oo1::schema::PartIndex;
use indicatif::ProgressBar;
use lodestore::{Result, Session};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Instant;

/// One store's OO1 figures in one run.
#[derive(Clone, Debug)]
pub struct Oo1Figures {
    pub load_s: f64,
    /// Median milliseconds of a lookup, a traversal and an update.
    pub lookup_ms: f64,
    pub traversal_ms: f64,
    pub update_ms: f64,
    /// Parts visited by every measured operation.
    pub parts_visited: u64,
    /// The sum of every operation's checksum: equal on stores holding the same parts with the
    /// same updates.
    pub checksum: u64,
}

/// One OO1 operation, drawn from a seed.
enum Op {
    Lookup(Vec<u64>),
    Traverse { start: u64, probability: f64 },
}

impl Op {
    fn updates(&self) -> bool {
        matches!(self, Op::Traverse { probability, .. } if *probability > 0.0)
    }

    fn run(&self, access: &mut impl Oo1Access, seed: u64) -> Result<OpCounts> {
        match self {
            Op::Lookup(numbers) => ops::lookup_in(access, numbers),
            Op::Traverse { start, probability } => {
                let start = find_part(access, *start)?;
                let mut rng = StdRng::seed_from_u64(seed);
                ops::traverse_in(access, start, *probability, &mut rng)
            }
        }
    }
}

/// Loads the OO1 database of `parts` parts into a new store of `kind` in `dir` and measures the
/// operations.
pub fn run(
    kind: StoreKind,
    config: &PeersConfig,
    database: &Database,
    parts: u64,
    dir: &Path,
) -> Result<Oo1Figures> {
    let (engine, load_s) = Engine::load(kind, dir, database, |store| {
        crate::oo1::generate(store, parts, config.seed, &ProgressBar::hidden()).map(drop)
    })?;
    let mut runner = Runner::new(&engine)?;
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x001);
    let mut draw = |probability: f64| Op::Traverse {
        start: rng.random_range(1..=parts),
        probability,
    };
    // One unmeasured traversal first, as OO7's warm-up T1.
    let warm = draw(0.0);
    runner.run(&warm, 0)?;
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    let mut checksum = 0u64;
    let mut parts_visited = 0u64;
    let mut numbers_rng = StdRng::seed_from_u64(config.seed ^ 0x002);
    for run in 0..config.traversal_runs {
        let lookup = Op::Lookup(
            (0..ops::LOOKUP_PARTS)
                .map(|_| numbers_rng.random_range(1..=parts))
                .collect(),
        );
        let operations = [lookup, draw(0.0), draw(1.0)];
        for (op, times) in operations.iter().zip(&mut times) {
            let started = Instant::now();
            let counts = runner.run(op, u64::from(run))?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
            checksum = checksum.wrapping_add(counts.checksum);
            parts_visited += counts.parts_visited;
        }
    }
    drop(runner);
    engine.close()?;
    let [lookups, traversals, updates] = times;
    Ok(Oo1Figures {
        load_s,
        lookup_ms: median(lookups),
        traversal_ms: median(traversals),
        update_ms: median(updates),
        parts_visited,
        checksum,
    })
}

/// Runs operations, each in one transaction (committed).
enum Runner<'e> {
    Lodestore {
        session: Box<Session>,
        index: PartIndex,
    },
    Peer(&'e dyn Peer),
}

impl<'e> Runner<'e> {
    fn new(engine: &'e Engine) -> Result<Runner<'e>> {
        Ok(match engine {
            Engine::Lodestore(store) => {
                let mut session = Box::new(store.session()?);
                let mut txn = session.begin()?;
                let index = ops::root(&mut txn)?.index;
                txn.commit()?;
                Runner::Lodestore { session, index }
            }
            Engine::Peer(peer) => Runner::Peer(peer.as_ref()),
        })
    }

    fn run(&mut self, op: &Op, seed: u64) -> Result<OpCounts> {
        match self {
            Runner::Lodestore { session, index } => {
                let mut txn = session.begin()?;
                let counts = op.run(
                    &mut Indexed {
                        txn: &mut txn,
                        index: Some(*index),
                    },
                    seed,
                )?;
                txn.commit()?;
                Ok(counts)
            }
            Runner::Peer(peer) => {
                let mut counts = OpCounts::default();
                let work = &mut |kv: &mut dyn super::kv::KvAccess| {
                    counts = op.run(&mut PeerObjects::new(kv), seed)?;
                    Ok(())
                };
                if op.updates() {
                    peer.write(work)?;
                } else {
                    peer.read(work)?;
                }
                Ok(counts)
            }
        }
    }
}
