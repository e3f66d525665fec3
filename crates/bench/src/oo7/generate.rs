//! The seeded OO7 database generator: [`Oo7Plan::draw`] makes every choice (the random draws,
//! the ids, the texts), then [`Oo7Plan::build`] writes the database, so a load can be timed
//! apart from the drawing, as the peers' loads of exported entries are.
//!
//! Per module: first the assembly hierarchy is drawn, whose base assemblies pick their
//! composite parts at random (with replacement) from the module's, and OIDs are reserved for
//! its assemblies; then the module and its manual; then the composite parts, each followed by
//! its document, its atomic parts and their connections and its list of the base assemblies
//! using it (so a composite part's graph is clustered on neighbouring pages, as OO7
//! implementations cluster it); last, the assemblies, written into their reserved OIDs. Atomic
//! part `i` of a composite part connects first to part `i + 1` (modulo the count), so every
//! part is reachable from the root part, then to parts chosen at random.
//!
//! Every object is written in one transaction, with every reference it holds: no page is
//! changed again by a later transaction, so a load writes each page once (as the OO1 generator
//! writes its parts, into OIDs reserved ahead). Work is committed in transactions of about
//! `BATCH_BYTES` (2 MiB), the module going with the first batch of composite parts and the
//! assemblies with the last, so any preset fits the caches.

use super::params::Oo7Params;
use super::schema::{
    label, AtomicPart, BaseAssembly, ComplexAssembly, CompositePart, Connection, Document, Manual,
    Module, OidList, Oo7Root, MAX_FANOUT,
};
use crate::lists::{alloc_oid_list, typed};
use indicatif::ProgressBar;
use lodestore::{Oid, Persistent, Placement, Result, Session, Store, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Name of the root that holds the [`Oo7Root`].
pub const ROOT_NAME: &str = "oo7";

/// Bytes of new objects per generator transaction.
const BATCH_BYTES: u64 = 2 << 20;

/// The version of the database layout `generate` makes, part of a cached template's name so a
/// template of an older layout is not reused (3: the assemblies drawn first and written into
/// reserved OIDs, each composite part written with its list of users; 2: each module clustered
/// on pages of its own).
pub const LAYOUT: u32 = 3;

/// Builds the database described by `params` in `store`, deterministically for `seed`, and
/// names it by the root [`ROOT_NAME`]. `progress` advances by one per composite part.
pub fn generate(
    store: &Store,
    params: &Oo7Params,
    seed: u64,
    progress: &ProgressBar,
) -> Result<Oid<Oo7Root>> {
    Oo7Plan::draw(params, seed)?.build(store, progress)
}

/// Every choice the generator makes for one database (the random draws, the ids, the texts),
/// made before anything is written: [`Oo7Plan::build`] then does only what a load of the
/// database does, as the peers of `bench peers` load entries exported beforehand, and the
/// suite draws the plan before its clock starts.
pub struct Oo7Plan {
    params: Oo7Params,
    seed: u64,
    modules: Vec<ModulePlan>,
}

struct ModulePlan {
    id: u64,
    build_date: u64,
    assemblies: AssemblyPlan,
    manual_text: Vec<u8>,
    composites: Vec<CompositePlan>,
}

struct CompositePlan {
    id: u64,
    build_date: u64,
    kind: usize,
    document_title: [u8; 32],
    document_text: Vec<u8>,
    atomics: Vec<AtomicPlan>,
    /// `connections_per_atomic` for each atomic part in turn, from that part.
    connections: Vec<ConnectionPlan>,
    /// The connections into each atomic part, as indexes into `connections` in their order
    /// there: those into part `i` at `incoming[incoming_starts[i]..incoming_starts[i + 1]]`.
    incoming: Vec<u32>,
    incoming_starts: Vec<u32>,
}

struct AtomicPlan {
    id: u64,
    build_date: u64,
    x: i64,
    y: i64,
    kind: usize,
}

struct ConnectionPlan {
    /// Index of the atomic part it leads to, in its composite part.
    to: usize,
    kind: usize,
    length: u64,
}

impl Oo7Plan {
    /// Draws the database of `params` for `seed` (the draws in the order the generator has
    /// always made them, so a seed's database stays byte for byte the same).
    pub fn draw(params: &Oo7Params, seed: u64) -> Result<Oo7Plan> {
        params.validate()?;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ids = Ids::default();
        let modules = (0..params.modules)
            .map(|_| ModulePlan::draw(params, &mut rng, &mut ids))
            .collect();
        Ok(Oo7Plan {
            params: *params,
            seed,
            modules,
        })
    }

    /// Writes the planned database into `store` and names it by the root [`ROOT_NAME`].
    /// `progress` advances by one per composite part.
    pub fn build(&self, store: &Store, progress: &ProgressBar) -> Result<Oid<Oo7Root>> {
        let params = &self.params;
        let mut session = store.session()?;
        let mut modules = Vec::with_capacity(self.modules.len());
        for module in &self.modules {
            modules.push(build_module(&mut session, params, module, progress)?);
        }
        session.set_placement(Placement::Anywhere);
        let mut txn = session.begin()?;
        let raw_modules: Vec<u64> = modules.iter().map(|m| m.raw().0).collect();
        let module_list = alloc_oid_list(&mut txn, &raw_modules)?;
        let root = txn.alloc(&Oo7Root {
            seed: self.seed,
            params: *params,
            _pad: 0,
            module_list,
        })?;
        txn.set_root(ROOT_NAME, root)?;
        txn.commit()?;
        Ok(root)
    }
}

impl ModulePlan {
    fn draw(params: &Oo7Params, rng: &mut StdRng, ids: &mut Ids) -> ModulePlan {
        let id = next(&mut ids.module);
        let build_date = rng.random_range(1000..2000);
        let assemblies = AssemblyPlan::draw(params, rng, ids);
        let composites = (0..params.composite_parts_per_module)
            .map(|_| CompositePlan::draw(params, rng, ids))
            .collect();
        ModulePlan {
            id,
            build_date,
            assemblies,
            manual_text: text("manual", id, params.manual_bytes),
            composites,
        }
    }
}

impl CompositePlan {
    fn draw(params: &Oo7Params, rng: &mut StdRng, ids: &mut Ids) -> CompositePlan {
        let id = next(&mut ids.composite);
        let build_date = rng.random_range(1000..2000);
        let kind = rng.random_range(0..10i32) as usize;
        let count = params.atomic_parts_per_composite as usize;
        let fanout = params.connections_per_atomic as usize;
        let atomics = (0..count)
            .map(|_| AtomicPlan {
                id: next(&mut ids.atomic),
                build_date: rng.random_range(1000..2000),
                x: rng.random_range(0..100_000),
                y: rng.random_range(0..100_000),
                kind: rng.random_range(0..10i32) as usize,
            })
            .collect();
        let mut connections = Vec::with_capacity(count * fanout);
        for from in 0..count {
            for slot in 0..fanout {
                let to = if slot == 0 {
                    (from + 1) % count
                } else {
                    rng.random_range(0..count)
                };
                connections.push(ConnectionPlan {
                    to,
                    kind: rng.random_range(0..10i32) as usize,
                    length: rng.random_range(1..1000),
                });
            }
        }
        let (incoming, incoming_starts) = incoming_by_part(count, &connections);
        CompositePlan {
            id,
            build_date,
            kind,
            document_title: label(&format!("Composite Part {id:08}")),
            document_text: text("documentation", id, params.document_bytes),
            atomics,
            connections,
            incoming,
            incoming_starts,
        }
    }
}

/// The connections into each of `count` atomic parts, grouped by the part they lead to (a
/// counting sort that keeps their order within a part): the indexes, and where each part's
/// run of them starts, `count + 1` entries.
fn incoming_by_part(count: usize, connections: &[ConnectionPlan]) -> (Vec<u32>, Vec<u32>) {
    let mut starts = vec![0u32; count + 1];
    for connection in connections {
        starts[connection.to + 1] += 1;
    }
    for part in 0..count {
        starts[part + 1] += starts[part];
    }
    let mut next = starts.clone();
    let mut incoming = vec![0u32; connections.len()];
    for (index, connection) in connections.iter().enumerate() {
        let slot = &mut next[connection.to];
        incoming[*slot as usize] = index as u32;
        *slot += 1;
    }
    (incoming, starts)
}

/// Buffers one load reuses from composite part to composite part, so that the generator's
/// own allocations stay out of what a load measures.
#[derive(Default)]
struct Scratch {
    document: Vec<u8>,
    atomics: Vec<Oid<AtomicPart>>,
    connections: Vec<Oid<Connection>>,
    list: Vec<u64>,
}

/// Running ids per kind, unique across the database.
#[derive(Default)]
struct Ids {
    module: u64,
    assembly: u64,
    composite: u64,
    atomic: u64,
}

fn next(counter: &mut u64) -> u64 {
    *counter += 1;
    *counter
}

/// `bytes` of a sentence naming the object, repeated (copied a sentence at a time: the
/// generator's own work is no part of what a load measures).
fn text(kind: &str, id: u64, bytes: u32) -> Vec<u8> {
    let sentence = format!("I am the {kind} of object {id}. ");
    let sentence = sentence.as_bytes();
    let bytes = bytes as usize;
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let take = sentence.len().min(bytes - out.len());
        out.extend_from_slice(&sentence[..take]);
    }
    out
}

/// The names of the ten kinds of parts and connections, `type000` to `type009`.
const TYPE_NAMES: [&str; 10] = [
    "type000", "type001", "type002", "type003", "type004", "type005", "type006", "type007",
    "type008", "type009",
];

/// The kind field of kind `n` (below 10), without formatting a string per object.
fn type_label<const N: usize>(n: usize) -> [u8; N] {
    label(TYPE_NAMES[n])
}

fn build_module(
    session: &mut Session,
    params: &Oo7Params,
    planned: &ModulePlan,
    progress: &ProgressBar,
) -> Result<Oid<Module>> {
    // The assembly hierarchy was drawn first and its OIDs are reserved now, so that each
    // composite part is written once, naming the base assemblies that use it, and each
    // assembly once, naming its composite parts: no page is changed again after its
    // transaction.
    let plan = &planned.assemblies;
    let complex_oids: Vec<Oid<ComplexAssembly>> = session.reserve(plan.complex.len() as u64)?;
    let base_oids: Vec<Oid<BaseAssembly>> = session.reserve(plan.base.len() as u64)?;
    let used_in = plan.used_in(params, &base_oids);

    // Each module on pages of its own, as QuickStore's clients each had a private module:
    // clients traversing different modules then share no page.
    session.set_placement(Placement::Clustered);
    let mut txn = session.begin()?;
    let module = txn.alloc(&Module {
        id: planned.id,
        build_date: planned.build_date,
        kind: label("module"),
        manual: Oid::NULL,
        design_root: complex_oids[0],
    })?;
    let header = Manual {
        id: planned.id,
        module,
        text_bytes: params.manual_bytes as u64,
        title: label(&format!("Manual of module {}", planned.id)),
    };
    let mut manual_bytes = bytemuck::bytes_of(&header).to_vec();
    manual_bytes.extend_from_slice(&planned.manual_text);
    let manual: Oid<Manual> = typed(txn.alloc_bytes(Manual::TYPE_ID, &manual_bytes)?.0);
    txn.get_mut(module)?.manual = manual;

    // Composite parts, a batch per transaction (the first with the module, the last with the
    // assemblies).
    let per_part = composite_part_bytes(params);
    let batch = (BATCH_BYTES / per_part).max(1) as usize;
    let mut composite_parts = Vec::with_capacity(planned.composites.len());
    let mut scratch = Scratch::default();
    for (number, chunk) in planned.composites.chunks(batch).enumerate() {
        if number > 0 {
            txn.commit()?;
            txn = session.begin()?;
        }
        for composite in chunk {
            let index = composite_parts.len();
            composite_parts.push(build_composite_part(
                &mut txn,
                params,
                composite,
                module,
                &used_in[index],
                &mut scratch,
            )?);
            progress.inc(1);
        }
    }
    plan.fill(
        &mut txn,
        module,
        &complex_oids,
        &base_oids,
        &composite_parts,
    )?;
    txn.commit()?;
    Ok(module)
}

/// About how many bytes one composite part with its graph and document occupies.
fn composite_part_bytes(params: &Oo7Params) -> u64 {
    let atomic = params.atomic_parts_per_composite as u64;
    let connections = atomic * params.connections_per_atomic as u64;
    size_of::<CompositePart>() as u64
        + params.document_bytes as u64
        + atomic * (size_of::<AtomicPart>() as u64 + 32)
        + connections * (size_of::<Connection>() as u64 + 8)
}

fn build_composite_part(
    txn: &mut Transaction<'_>,
    params: &Oo7Params,
    planned: &CompositePlan,
    module: Oid<Module>,
    used_in: &[u64],
    scratch: &mut Scratch,
) -> Result<Oid<CompositePart>> {
    let id = planned.id;
    let composite = txn.alloc(&CompositePart {
        id,
        build_date: planned.build_date,
        kind: type_label(planned.kind),
        module,
        document: Oid::NULL,
        root_part: Oid::NULL,
        parts: Oid::NULL,
        used_in: Oid::NULL,
    })?;
    let header = Document {
        id,
        composite_part: composite,
        text_bytes: params.document_bytes as u64,
        title: planned.document_title,
    };
    scratch.document.clear();
    scratch
        .document
        .extend_from_slice(bytemuck::bytes_of(&header));
    scratch.document.extend_from_slice(&planned.document_text);
    let document: Oid<Document> = typed(txn.alloc_bytes(Document::TYPE_ID, &scratch.document)?.0);

    let fanout = params.connections_per_atomic as usize;
    let atomics = &mut scratch.atomics;
    atomics.clear();
    for (index, atomic) in planned.atomics.iter().enumerate() {
        atomics.push(txn.alloc(&AtomicPart {
            id: atomic.id,
            build_date: atomic.build_date,
            x: atomic.x,
            y: atomic.y,
            doc_id: id,
            kind: type_label(atomic.kind),
            composite_part: composite,
            incoming: Oid::NULL,
            index: index as u32,
            outgoing_count: fanout as u32,
            outgoing: [Oid::NULL; MAX_FANOUT],
        })?);
    }
    // Connections in plan order: atomic part `from`'s are `fanout` in a row.
    let connections = &mut scratch.connections;
    connections.clear();
    for (from, planned_out) in planned.connections.chunks(fanout.max(1)).enumerate() {
        for connection_plan in planned_out {
            connections.push(txn.alloc(&Connection {
                kind: type_label(connection_plan.kind),
                length: connection_plan.length,
                from: atomics[from],
                to: atomics[connection_plan.to],
            })?);
        }
    }
    for (index, &atomic) in atomics.iter().enumerate() {
        let (start, end) = (
            planned.incoming_starts[index] as usize,
            planned.incoming_starts[index + 1] as usize,
        );
        scratch.list.clear();
        scratch.list.extend(
            planned.incoming[start..end]
                .iter()
                .map(|&connection| connections[connection as usize].raw().0),
        );
        let incoming_list = alloc_oid_list(txn, &scratch.list)?;
        let mut outgoing = [Oid::<Connection>::NULL; MAX_FANOUT];
        let from_part = connections
            .get(index * fanout..(index + 1) * fanout)
            .unwrap_or_default();
        for (out, &connection) in outgoing.iter_mut().zip(from_part) {
            *out = connection;
        }
        let part = txn.get_mut(atomic)?;
        part.outgoing = outgoing;
        part.incoming = incoming_list;
    }
    scratch.list.clear();
    scratch.list.extend(atomics.iter().map(|a| a.raw().0));
    let parts: Oid<OidList> = alloc_oid_list(txn, &scratch.list)?;
    let used_in = if used_in.is_empty() {
        Oid::NULL
    } else {
        alloc_oid_list(txn, used_in)?
    };
    let record = txn.get_mut(composite)?;
    record.document = document;
    record.root_part = atomics[0];
    record.parts = parts;
    record.used_in = used_in;
    Ok(composite)
}

/// One module's assembly hierarchy, drawn before anything of it is written. Complex assemblies
/// are numbered in pre-order (0 is the design root), base assemblies in the order the walk
/// meets them; the OIDs reserved for them follow the same order.
struct AssemblyPlan {
    complex: Vec<PlannedComplex>,
    base: Vec<PlannedBase>,
}

struct PlannedComplex {
    id: u64,
    build_date: u64,
    level: u32,
    /// Index of the complex assembly above it, none for the design root.
    parent: Option<usize>,
    /// Indexes of its sub-assemblies: into `complex` above level 2, into `base` at level 2.
    subs: Vec<usize>,
}

struct PlannedBase {
    id: u64,
    build_date: u64,
    parent: usize,
    /// Indexes of the module's composite parts it uses (with replacement).
    picks: Vec<usize>,
}

impl AssemblyPlan {
    /// Draws the hierarchy: `assembly_levels` levels, base assemblies at the bottom picking
    /// their composite parts at random (with replacement) among the module's.
    fn draw(params: &Oo7Params, rng: &mut StdRng, ids: &mut Ids) -> AssemblyPlan {
        let mut plan = AssemblyPlan {
            complex: Vec::new(),
            base: Vec::new(),
        };
        plan.draw_complex(params, rng, ids, params.assembly_levels, None);
        plan
    }

    fn draw_complex(
        &mut self,
        params: &Oo7Params,
        rng: &mut StdRng,
        ids: &mut Ids,
        level: u32,
        parent: Option<usize>,
    ) -> usize {
        debug_assert!(level >= 2);
        let index = self.complex.len();
        self.complex.push(PlannedComplex {
            id: next(&mut ids.assembly),
            build_date: rng.random_range(1000..2000),
            level,
            parent,
            subs: Vec::new(),
        });
        for _ in 0..params.assemblies_per_assembly {
            let sub = if level == 2 {
                self.draw_base(params, rng, ids, index)
            } else {
                self.draw_complex(params, rng, ids, level - 1, Some(index))
            };
            self.complex[index].subs.push(sub);
        }
        index
    }

    fn draw_base(
        &mut self,
        params: &Oo7Params,
        rng: &mut StdRng,
        ids: &mut Ids,
        parent: usize,
    ) -> usize {
        let composites = params.composite_parts_per_module as usize;
        let picks = (0..params.composite_parts_per_assembly)
            .map(|_| rng.random_range(0..composites))
            .collect();
        self.base.push(PlannedBase {
            id: next(&mut ids.assembly),
            build_date: rng.random_range(1000..2000),
            parent,
            picks,
        });
        self.base.len() - 1
    }

    /// For each composite part of the module, the raw OIDs of the base assemblies using it
    /// (one entry per use).
    fn used_in(&self, params: &Oo7Params, base_oids: &[Oid<BaseAssembly>]) -> Vec<Vec<u64>> {
        let mut used_in = vec![Vec::new(); params.composite_parts_per_module as usize];
        for (base, oid) in self.base.iter().zip(base_oids) {
            for &pick in &base.picks {
                used_in[pick].push(oid.raw().0);
            }
        }
        used_in
    }

    /// Writes every assembly into its reserved OID.
    fn fill(
        &self,
        txn: &mut Transaction<'_>,
        module: Oid<Module>,
        complex_oids: &[Oid<ComplexAssembly>],
        base_oids: &[Oid<BaseAssembly>],
        composite_parts: &[Oid<CompositePart>],
    ) -> Result<()> {
        for (planned, &oid) in self.complex.iter().zip(complex_oids) {
            let mut sub_assemblies = [0u64; MAX_FANOUT];
            for (slot, &sub) in sub_assemblies.iter_mut().zip(&planned.subs) {
                *slot = if planned.level == 2 {
                    base_oids[sub].raw().0
                } else {
                    complex_oids[sub].raw().0
                };
            }
            txn.fill(
                oid,
                &ComplexAssembly {
                    id: planned.id,
                    build_date: planned.build_date,
                    kind: label("complex"),
                    module,
                    super_assembly: planned.parent.map_or(Oid::NULL, |p| complex_oids[p]),
                    level: planned.level,
                    subs: planned.subs.len() as u32,
                    sub_assemblies,
                },
            )?;
        }
        for (planned, &oid) in self.base.iter().zip(base_oids) {
            let mut components = [Oid::NULL; MAX_FANOUT];
            for (slot, &pick) in components.iter_mut().zip(&planned.picks) {
                *slot = composite_parts[pick];
            }
            txn.fill(
                oid,
                &BaseAssembly {
                    id: planned.id,
                    build_date: planned.build_date,
                    kind: label("base"),
                    module,
                    super_assembly: complex_oids[planned.parent],
                    components: planned.picks.len() as u32,
                    _pad: 0,
                    composite_parts: components,
                },
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counting sort groups the connections by the part they lead to and keeps their
    /// order within a part, as pushing each onto its target's list in turn does.
    #[test]
    fn incoming_by_part_matches_a_list_per_part() {
        let mut rng = StdRng::seed_from_u64(11);
        for count in [1usize, 2, 7, 20] {
            let connections: Vec<ConnectionPlan> = (0..count * 3)
                .map(|_| ConnectionPlan {
                    to: rng.random_range(0..count),
                    kind: 0,
                    length: 1,
                })
                .collect();
            let mut lists = vec![Vec::new(); count];
            for (index, connection) in connections.iter().enumerate() {
                lists[connection.to].push(index as u32);
            }
            let (incoming, starts) = incoming_by_part(count, &connections);
            assert_eq!(starts.len(), count + 1);
            for (part, list) in lists.iter().enumerate() {
                let run = &incoming[starts[part] as usize..starts[part + 1] as usize];
                assert_eq!(run, list.as_slice(), "part {part} of {count}");
            }
        }
    }
}
