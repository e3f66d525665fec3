//! The OO7 traversals over one module, each returning what it counted.
//!
//! All of them walk the assembly hierarchy depth first from the module's design root and visit
//! each composite part of each base assembly (a composite part two base assemblies use is
//! visited twice). At a composite part, T1 and the T2 variants walk its atomic-part graph depth
//! first from the root part through the connection objects, visiting each atomic part once per
//! composite-part visit; T6 visits the root part only.

use super::schema::{AtomicPart, BaseAssembly, ComplexAssembly, CompositePart, Module};
use crate::lists::typed;
use lodestore::{AsOfTransaction, Error, Oid, ReadTransaction, Result, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashSet;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Traversal {
    /// Read-only: every atomic part of every composite-part visit.
    T1,
    /// As T1, updating the root atomic part of each composite part visited.
    T2a,
    /// As T1, updating every atomic part visited.
    T2b,
    /// As T1, updating every atomic part visited four times.
    T2c,
    /// Root atomic parts only, read-only.
    T6,
    /// Thor's modified T2B: each visited atomic part is updated with probability 0.1.
    T2b10,
}

pub const TRAVERSALS: [Traversal; 6] = [
    Traversal::T1,
    Traversal::T2a,
    Traversal::T2b,
    Traversal::T2c,
    Traversal::T6,
    Traversal::T2b10,
];

impl Traversal {
    pub fn name(self) -> &'static str {
        match self {
            Traversal::T1 => "t1",
            Traversal::T2a => "t2a",
            Traversal::T2b => "t2b",
            Traversal::T2c => "t2c",
            Traversal::T6 => "t6",
            Traversal::T2b10 => "t2b-10",
        }
    }

    pub fn updates(self) -> bool {
        !matches!(self, Traversal::T1 | Traversal::T6)
    }
}

impl fmt::Display for Traversal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Traversal {
    type Err = Error;
    fn from_str(text: &str) -> Result<Traversal> {
        let lower = text.to_ascii_lowercase();
        TRAVERSALS
            .into_iter()
            .find(|t| t.name() == lower)
            .ok_or_else(|| {
                let known: Vec<&str> = TRAVERSALS.iter().map(|t| t.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown OO7 traversal {text:?}; known traversals: {}",
                    known.join(", ")
                ))
            })
    }
}

/// What a traversal did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TraversalCounts {
    pub atomic_parts_visited: u64,
    /// Updates done (an atomic part updated four times counts four).
    pub updates: u64,
    pub distinct_objects_modified: u64,
    pub distinct_composite_parts_visited: u64,
    /// A sum over the atomic-part visits of a hash of the part's id and fields as read:
    /// equal on any two stores that hold the same graph with the same updates.
    pub checksum: u64,
}

/// What a traversal needs of a transaction: reads, and for the T2 variants an update of an
/// atomic part. A transaction as of a snapshot runs the read-only traversals.
pub trait Traverse: ReadTransaction {
    fn update(&mut self, oid: Oid<AtomicPart>) -> Result<()>;
}

impl Traverse for Transaction<'_> {
    fn update(&mut self, oid: Oid<AtomicPart>) -> Result<()> {
        let part = self.get_mut(oid)?;
        part.x += 1;
        part.y += 1;
        Ok(())
    }
}

impl Traverse for AsOfTransaction<'_> {
    fn update(&mut self, oid: Oid<AtomicPart>) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "atomic part {oid:?}: an updating traversal cannot run as of a snapshot"
        )))
    }
}

/// Runs `traversal` over `module` inside `txn`. `seed` drives the random choices of `t2b-10`.
pub fn traverse(
    txn: &mut impl Traverse,
    module: Oid<Module>,
    traversal: Traversal,
    seed: u64,
) -> Result<TraversalCounts> {
    let design_root = txn.get(module)?.design_root;
    let mut walker = Walker {
        traversal,
        rng: StdRng::seed_from_u64(seed),
        counts: TraversalCounts::default(),
        composite_parts: FxHashSet::default(),
        modified: FxHashSet::default(),
        visited: Vec::new(),
        stack: Vec::new(),
    };
    walker.complex(txn, design_root)?;
    walker.counts.distinct_composite_parts_visited = walker.composite_parts.len() as u64;
    walker.counts.distinct_objects_modified = walker.modified.len() as u64;
    Ok(walker.counts)
}

struct Walker {
    traversal: Traversal,
    rng: StdRng,
    counts: TraversalCounts,
    composite_parts: FxHashSet<u64>,
    modified: FxHashSet<u64>,
    /// Visited marks of the current composite part's atomic parts, by index.
    visited: Vec<bool>,
    stack: Vec<Oid<AtomicPart>>,
}

impl Walker {
    fn complex(&mut self, txn: &mut impl Traverse, oid: Oid<ComplexAssembly>) -> Result<()> {
        let assembly = *txn.get(oid)?;
        for &sub in &assembly.sub_assemblies[..assembly.subs as usize] {
            if assembly.level == 2 {
                self.base(txn, typed(sub))?;
            } else {
                self.complex(txn, typed(sub))?;
            }
        }
        Ok(())
    }

    fn base(&mut self, txn: &mut impl Traverse, oid: Oid<BaseAssembly>) -> Result<()> {
        let assembly = *txn.get(oid)?;
        for &part in &assembly.composite_parts[..assembly.components as usize] {
            self.composite(txn, part)?;
        }
        Ok(())
    }

    fn composite(&mut self, txn: &mut impl Traverse, oid: Oid<CompositePart>) -> Result<()> {
        self.composite_parts.insert(oid.raw().0);
        let root = txn.get(oid)?.root_part;
        match self.traversal {
            Traversal::T6 => {
                let part = txn.get(root)?;
                null_procedure(part.x, part.y);
                self.counts.atomic_parts_visited += 1;
                self.counts.checksum = self.counts.checksum.wrapping_add(part_hash(part));
                Ok(())
            }
            _ => self.atomic_graph(txn, root),
        }
    }

    /// Depth first over the atomic parts reachable from `root`, each visited once.
    fn atomic_graph(&mut self, txn: &mut impl Traverse, root: Oid<AtomicPart>) -> Result<()> {
        self.visited.clear();
        self.stack.clear();
        self.stack.push(root);
        while let Some(oid) = self.stack.pop() {
            let part = *txn.get(oid)?;
            let index = part.index as usize;
            if index >= self.visited.len() {
                self.visited.resize(index + 1, false);
            }
            if self.visited[index] {
                continue;
            }
            self.visited[index] = true;
            self.counts.atomic_parts_visited += 1;
            self.counts.checksum = self.counts.checksum.wrapping_add(part_hash(&part));
            null_procedure(part.x, part.y);
            let times = match self.traversal {
                Traversal::T2a if oid == root => 1,
                Traversal::T2b => 1,
                Traversal::T2c => 4,
                Traversal::T2b10 if self.rng.random_bool(0.1) => 1,
                _ => 0,
            };
            if times > 0 {
                for _ in 0..times {
                    txn.update(oid)?;
                }
                self.counts.updates += times;
                self.modified.insert(oid.raw().0);
            }
            // Push in reverse so the first connection is followed first.
            for &connection in part.outgoing[..part.outgoing_count as usize].iter().rev() {
                let to = txn.get(connection)?.to;
                self.stack.push(to);
            }
        }
        Ok(())
    }
}

/// What an atomic part adds to a traversal's checksum.
fn part_hash(part: &AtomicPart) -> u64 {
    let mixed = part.id ^ (part.x as u64).rotate_left(21) ^ (part.y as u64).rotate_left(42);
    mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The benchmark's null procedure: takes the fields and does nothing the optimiser can drop.
#[inline]
fn null_procedure(x: i64, y: i64) {
    std::hint::black_box((x, y));
}
