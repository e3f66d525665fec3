//! The seeded OO7 database generator.
//!
//! Per module: the module and its manual; then the composite parts, each followed by its
//! document, its atomic parts and their connections (so a composite part's graph is clustered
//! on neighbouring pages, as OO7 implementations cluster it); then the assembly hierarchy, whose
//! base assemblies pick their composite parts at random (with replacement) from the module's;
//! last, each composite part's list of the base assemblies using it. Atomic part `i` of a
//! composite part connects first to part `i + 1` (modulo the count), so every part is reachable
//! from the root part, then to parts chosen at random.
//!
//! Work is committed in transactions of about `BATCH_BYTES` (2 MiB), so any preset fits the
//! caches.

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
/// template of an older layout is not reused (2: each module clustered on pages of its own).
pub const LAYOUT: u32 = 2;

/// Builds the database described by `params` in `store`, deterministically for `seed`, and
/// names it by the root [`ROOT_NAME`]. `progress` advances by one per composite part.
pub fn generate(
    store: &Store,
    params: &Oo7Params,
    seed: u64,
    progress: &ProgressBar,
) -> Result<Oid<Oo7Root>> {
    params.validate()?;
    let mut session = store.session()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ids = Ids::default();
    let mut modules = Vec::with_capacity(params.modules as usize);
    for _ in 0..params.modules {
        modules.push(generate_module(
            &mut session,
            params,
            &mut rng,
            &mut ids,
            progress,
        )?);
    }
    session.set_placement(Placement::Anywhere);
    let mut txn = session.begin()?;
    let raw_modules: Vec<u64> = modules.iter().map(|m| m.raw().0).collect();
    let module_list = alloc_oid_list(&mut txn, &raw_modules)?;
    let root = txn.alloc(&Oo7Root {
        seed,
        params: *params,
        _pad: 0,
        module_list,
    })?;
    txn.set_root(ROOT_NAME, root)?;
    txn.commit()?;
    Ok(root)
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

fn generate_module(
    session: &mut Session,
    params: &Oo7Params,
    rng: &mut StdRng,
    ids: &mut Ids,
    progress: &ProgressBar,
) -> Result<Oid<Module>> {
    let module_id = next(&mut ids.module);
    // Each module on pages of its own, as QuickStore's clients each had a private module:
    // clients traversing different modules then share no page.
    session.set_placement(Placement::Clustered);
    let mut txn = session.begin()?;
    let module = txn.alloc(&Module {
        id: module_id,
        build_date: rng.random_range(1000..2000),
        kind: label("module"),
        manual: Oid::NULL,
        design_root: Oid::NULL,
    })?;
    let header = Manual {
        id: module_id,
        module,
        text_bytes: params.manual_bytes as u64,
        title: label(&format!("Manual of module {module_id}")),
    };
    let mut manual_bytes = bytemuck::bytes_of(&header).to_vec();
    manual_bytes.extend(text("manual", module_id, params.manual_bytes));
    let manual: Oid<Manual> = typed(txn.alloc_bytes(Manual::TYPE_ID, &manual_bytes)?.0);
    txn.get_mut(module)?.manual = manual;
    txn.commit()?;

    // Composite parts, a batch per transaction.
    let per_part = composite_part_bytes(params);
    let batch = (BATCH_BYTES / per_part).max(1) as u32;
    let mut composite_parts = Vec::with_capacity(params.composite_parts_per_module as usize);
    let mut done = 0;
    while done < params.composite_parts_per_module {
        let count = batch.min(params.composite_parts_per_module - done);
        let mut txn = session.begin()?;
        for _ in 0..count {
            composite_parts.push(generate_composite_part(&mut txn, params, rng, ids, module)?);
            progress.inc(1);
        }
        txn.commit()?;
        done += count;
    }

    // The assembly hierarchy, and which base assemblies use each composite part.
    let mut used_in = vec![Vec::new(); composite_parts.len()];
    let mut txn = session.begin()?;
    let mut builder = AssemblyBuilder {
        params,
        rng,
        ids,
        module,
        composite_parts: &composite_parts,
        used_in: &mut used_in,
    };
    let design_root = builder.complex(&mut txn, params.assembly_levels, Oid::NULL)?;
    txn.get_mut(module)?.design_root = design_root;
    txn.commit()?;

    let lists_per_batch = 4096;
    for (chunk_parts, chunk_uses) in composite_parts
        .chunks(lists_per_batch)
        .zip(used_in.chunks(lists_per_batch))
    {
        let mut txn = session.begin()?;
        for (part, uses) in chunk_parts.iter().zip(chunk_uses) {
            if !uses.is_empty() {
                let list = alloc_oid_list(&mut txn, uses)?;
                txn.get_mut(*part)?.used_in = list;
            }
        }
        txn.commit()?;
    }
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

fn generate_composite_part(
    txn: &mut Transaction<'_>,
    params: &Oo7Params,
    rng: &mut StdRng,
    ids: &mut Ids,
    module: Oid<Module>,
) -> Result<Oid<CompositePart>> {
    let id = next(&mut ids.composite);
    let build_date = rng.random_range(1000..2000);
    let composite = txn.alloc(&CompositePart {
        id,
        build_date,
        kind: type_label(rng.random_range(0..10i32) as usize),
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
        title: label(&format!("Composite Part {id:08}")),
    };
    let mut doc_bytes = bytemuck::bytes_of(&header).to_vec();
    doc_bytes.extend(text("documentation", id, params.document_bytes));
    let document: Oid<Document> = typed(txn.alloc_bytes(Document::TYPE_ID, &doc_bytes)?.0);

    let count = params.atomic_parts_per_composite as usize;
    let fanout = params.connections_per_atomic as usize;
    let mut atomics = Vec::with_capacity(count);
    for index in 0..count {
        atomics.push(txn.alloc(&AtomicPart {
            id: next(&mut ids.atomic),
            build_date: rng.random_range(1000..2000),
            x: rng.random_range(0..100_000),
            y: rng.random_range(0..100_000),
            doc_id: id,
            kind: type_label(rng.random_range(0..10i32) as usize),
            composite_part: composite,
            incoming: Oid::NULL,
            index: index as u32,
            outgoing_count: fanout as u32,
            outgoing: [Oid::NULL; MAX_FANOUT],
        })?);
    }
    let mut outgoing = vec![[Oid::<Connection>::NULL; MAX_FANOUT]; count];
    let mut incoming = vec![Vec::new(); count];
    for from in 0..count {
        for (slot, out) in outgoing[from].iter_mut().enumerate().take(fanout) {
            let to = if slot == 0 {
                (from + 1) % count
            } else {
                rng.random_range(0..count)
            };
            let connection = txn.alloc(&Connection {
                kind: type_label(rng.random_range(0..10i32) as usize),
                length: rng.random_range(1..1000),
                from: atomics[from],
                to: atomics[to],
            })?;
            *out = connection;
            incoming[to].push(connection.raw().0);
        }
    }
    for index in 0..count {
        let incoming_list = alloc_oid_list(txn, &incoming[index])?;
        let part = txn.get_mut(atomics[index])?;
        part.outgoing = outgoing[index];
        part.incoming = incoming_list;
    }
    let raw_atomics: Vec<u64> = atomics.iter().map(|a| a.raw().0).collect();
    let parts: Oid<OidList> = alloc_oid_list(txn, &raw_atomics)?;
    let record = txn.get_mut(composite)?;
    record.document = document;
    record.root_part = atomics[0];
    record.parts = parts;
    Ok(composite)
}

struct AssemblyBuilder<'a> {
    params: &'a Oo7Params,
    rng: &'a mut StdRng,
    ids: &'a mut Ids,
    module: Oid<Module>,
    composite_parts: &'a [Oid<CompositePart>],
    used_in: &'a mut [Vec<u64>],
}

impl AssemblyBuilder<'_> {
    /// A complex assembly at `level` (2 or more) with its whole subtree.
    fn complex(
        &mut self,
        txn: &mut Transaction<'_>,
        level: u32,
        super_assembly: Oid<ComplexAssembly>,
    ) -> Result<Oid<ComplexAssembly>> {
        debug_assert!(level >= 2);
        let fanout = self.params.assemblies_per_assembly as usize;
        let oid = txn.alloc(&ComplexAssembly {
            id: next(&mut self.ids.assembly),
            build_date: self.rng.random_range(1000..2000),
            kind: label("complex"),
            module: self.module,
            super_assembly,
            level,
            subs: fanout as u32,
            sub_assemblies: [0; MAX_FANOUT],
        })?;
        let mut subs = [0u64; MAX_FANOUT];
        for sub in subs.iter_mut().take(fanout) {
            *sub = if level == 2 {
                self.base(txn, oid)?.raw().0
            } else {
                self.complex(txn, level - 1, oid)?.raw().0
            };
        }
        txn.get_mut(oid)?.sub_assemblies = subs;
        Ok(oid)
    }

    fn base(
        &mut self,
        txn: &mut Transaction<'_>,
        super_assembly: Oid<ComplexAssembly>,
    ) -> Result<Oid<BaseAssembly>> {
        let count = self.params.composite_parts_per_assembly as usize;
        let mut picks = [0usize; MAX_FANOUT];
        let mut components = [Oid::NULL; MAX_FANOUT];
        for (pick, component) in picks.iter_mut().zip(components.iter_mut()).take(count) {
            *pick = self.rng.random_range(0..self.composite_parts.len());
            *component = self.composite_parts[*pick];
        }
        let oid = txn.alloc(&BaseAssembly {
            id: next(&mut self.ids.assembly),
            build_date: self.rng.random_range(1000..2000),
            kind: label("base"),
            module: self.module,
            super_assembly,
            components: count as u32,
            _pad: 0,
            composite_parts: components,
        })?;
        for pick in &picks[..count] {
            self.used_in[*pick].push(oid.raw().0);
        }
        Ok(oid)
    }
}
