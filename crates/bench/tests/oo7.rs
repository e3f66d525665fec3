//! The OO7 generator builds what the parameters say, with every association present in both
//! directions, deterministically; each traversal counts what the parameters predict.

use indicatif::ProgressBar;
use lodestore::{Options, Persistent, RealFileSystem, Store, Transaction};
use lodestore_bench::lists::{read_oid_list, typed};
use lodestore_bench::oo7::schema::*;
use lodestore_bench::oo7::{self, Oo7Params, Traversal, TraversalCounts};
use std::collections::HashMap;
use std::path::Path;

fn small_params() -> Oo7Params {
    Oo7Params {
        modules: 2,
        composite_parts_per_module: 30,
        atomic_parts_per_composite: 7,
        connections_per_atomic: 3,
        document_bytes: 300,
        manual_bytes: 20_000, // larger than a page: a large object
        assembly_levels: 4,
        assemblies_per_assembly: 3,
        composite_parts_per_assembly: 3,
    }
}

fn build(path: &Path, params: &Oo7Params, seed: u64) -> Store {
    let store = Store::create(path, Options::new()).unwrap();
    oo7::generate(&store, params, seed, &ProgressBar::hidden()).unwrap();
    store
}

fn count_by_type(path: &Path) -> HashMap<u32, u64> {
    let mut counts = HashMap::new();
    lodestore::objects(&RealFileSystem, path, |object| {
        *counts.entry(object.type_id.0).or_default() += 1;
        Ok(())
    })
    .unwrap();
    counts
}

fn list(txn: &mut Transaction<'_>, oid: lodestore::Oid<OidList>) -> Vec<u64> {
    let mut out = Vec::new();
    read_oid_list(txn, oid, &mut out).unwrap();
    out
}

#[test]
fn object_counts_match_the_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let params = small_params();
    drop(build(&path, &params, 7));
    let counts = count_by_type(&path);
    let m = params.modules as u64;
    let composites = m * params.composite_parts_per_module as u64;
    let atomics = composites * params.atomic_parts_per_composite as u64;
    assert_eq!(counts[&Oo7Root::TYPE_ID], 1);
    assert_eq!(counts[&Module::TYPE_ID], m);
    assert_eq!(counts[&Manual::TYPE_ID], m);
    assert_eq!(counts[&ComplexAssembly::TYPE_ID], m * (1 + 3 + 9));
    assert_eq!(counts[&BaseAssembly::TYPE_ID], m * 27);
    assert_eq!(counts[&CompositePart::TYPE_ID], composites);
    assert_eq!(counts[&Document::TYPE_ID], composites);
    assert_eq!(counts[&AtomicPart::TYPE_ID], atomics);
    assert_eq!(counts[&Connection::TYPE_ID], atomics * 3);
    // Lists: the module list, one per composite part (its atomic parts), one per atomic part
    // (incoming connections), one per composite part some base assembly uses.
    let lists = counts[&OidList::TYPE_ID];
    let fixed = 1 + composites + atomics;
    assert!(
        lists > fixed && lists <= fixed + composites,
        "{lists} lists"
    );
}

#[test]
fn every_association_is_present_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let params = small_params();
    let store = build(&dir.path().join("store"), &params, 11);
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    let modules = oo7::modules(&mut txn).unwrap();
    assert_eq!(modules.len(), params.modules as usize);
    for module_oid in modules {
        let module = *txn.get(module_oid).unwrap();
        let mut manual = [0u8; size_of::<Manual>()];
        txn.read_at(module.manual.raw(), 0, &mut manual).unwrap();
        let manual: Manual = bytemuck::pod_read_unaligned(&manual);
        assert_eq!(manual.module, module_oid);
        assert_eq!(
            txn.info(module.manual.raw()).unwrap().len,
            (size_of::<Manual>() + params.manual_bytes as usize) as u64
        );

        // Walk the assembly tree, checking parent links and collecting base-assembly uses.
        let mut uses: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut complex = vec![(module.design_root, params.assembly_levels)];
        let top = txn.get(module.design_root).unwrap();
        assert!(top.super_assembly.is_null());
        let mut bases = 0;
        while let Some((oid, level)) = complex.pop() {
            let assembly = *txn.get(oid).unwrap();
            assert_eq!(assembly.level, level);
            assert_eq!(assembly.module, module_oid);
            for &sub in &assembly.sub_assemblies[..assembly.subs as usize] {
                if level == 2 {
                    let base = *txn.get(typed::<BaseAssembly>(sub)).unwrap();
                    assert_eq!(base.super_assembly, oid);
                    assert_eq!(base.module, module_oid);
                    bases += 1;
                    for part in &base.composite_parts[..base.components as usize] {
                        uses.entry(part.raw().0).or_default().push(sub);
                    }
                } else {
                    let child = *txn.get(typed::<ComplexAssembly>(sub)).unwrap();
                    assert_eq!(child.super_assembly, oid);
                    complex.push((typed(sub), level - 1));
                }
            }
        }
        assert_eq!(bases, params.base_assemblies_per_module());

        // Every used composite part lists exactly the base assemblies that use it.
        for (part_raw, mut users) in uses {
            let part = *txn.get(typed::<CompositePart>(part_raw)).unwrap();
            assert_eq!(part.module, module_oid);
            let mut listed = list(&mut txn, part.used_in);
            listed.sort_unstable();
            users.sort_unstable();
            assert_eq!(listed, users);

            let doc_bytes = txn.read_all(part.document.raw()).unwrap();
            let doc: Document = bytemuck::pod_read_unaligned(&doc_bytes[..size_of::<Document>()]);
            assert_eq!(doc.composite_part.raw().0, part_raw);
            assert_eq!(
                doc_bytes.len(),
                size_of::<Document>() + params.document_bytes as usize
            );

            let atomics = list(&mut txn, part.parts);
            assert_eq!(atomics.len(), params.atomic_parts_per_composite as usize);
            assert_eq!(part.root_part.raw().0, atomics[0]);
            let mut outgoing_total = 0;
            let mut incoming_total = 0;
            for (index, &atomic_raw) in atomics.iter().enumerate() {
                let atomic = *txn.get(typed::<AtomicPart>(atomic_raw)).unwrap();
                assert_eq!(atomic.composite_part.raw().0, part_raw);
                assert_eq!(atomic.index as usize, index);
                assert_eq!(atomic.outgoing_count, params.connections_per_atomic);
                for &connection in &atomic.outgoing[..atomic.outgoing_count as usize] {
                    let c = *txn.get(connection).unwrap();
                    assert_eq!(c.from.raw().0, atomic_raw);
                    let target = *txn.get(c.to).unwrap();
                    assert_eq!(target.composite_part.raw().0, part_raw);
                    assert!(list(&mut txn, target.incoming).contains(&connection.raw().0));
                    outgoing_total += 1;
                }
                for incoming in list(&mut txn, atomic.incoming) {
                    let c = *txn.get(typed::<Connection>(incoming)).unwrap();
                    assert_eq!(c.to.raw().0, atomic_raw);
                    incoming_total += 1;
                }
            }
            assert_eq!(outgoing_total, incoming_total);
        }
    }
}

#[test]
fn generation_is_deterministic_for_a_seed() {
    let dir = tempfile::tempdir().unwrap();
    let params = small_params();
    let dump = |name: &str, seed: u64| {
        let path = dir.path().join(name);
        drop(build(&path, &params, seed));
        let mut objects = Vec::new();
        lodestore::objects(&RealFileSystem, &path, |object| {
            objects.push((object.oid.0, object.type_id.0, object.bytes));
            Ok(())
        })
        .unwrap();
        objects
    };
    let first = dump("a", 5);
    assert_eq!(first, dump("b", 5));
    assert_ne!(first, dump("c", 6));
}

#[test]
fn traversal_counts_follow_from_the_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let params = small_params();
    let store = build(&dir.path().join("store"), &params, 3);
    let mut session = store.session().unwrap();
    let visits = params.composite_visits_per_module();
    let per_composite = params.atomic_parts_per_composite as u64;

    let mut txn = session.begin().unwrap();
    let module = oo7::modules(&mut txn).unwrap()[1];
    // Distinct composite parts the hierarchy reaches: those with a used-in list.
    let root: lodestore::Oid<Oo7Root> = txn.root_typed(oo7::ROOT_NAME).unwrap();
    assert_eq!(txn.get(root).unwrap().params, params);
    let design_root = txn.get(module).unwrap().design_root;
    let mut reached = std::collections::HashSet::new();
    let mut stack = vec![design_root];
    while let Some(oid) = stack.pop() {
        let a = *txn.get(oid).unwrap();
        for &sub in &a.sub_assemblies[..a.subs as usize] {
            if a.level == 2 {
                let base = *txn.get(typed::<BaseAssembly>(sub)).unwrap();
                for p in &base.composite_parts[..base.components as usize] {
                    reached.insert(p.raw().0);
                }
            } else {
                stack.push(typed(sub));
            }
        }
    }
    let distinct = reached.len() as u64;
    assert!(distinct > 1 && distinct <= visits);
    let sum_x = |txn: &mut Transaction<'_>| -> i64 {
        let mut sum = 0;
        for &part in &reached {
            let parts_list = txn_get_parts(txn, part);
            let parts = list(txn, parts_list);
            for atomic in parts {
                sum += txn.get(typed::<AtomicPart>(atomic)).unwrap().x;
            }
        }
        sum
    };
    let before = sum_x(&mut txn);
    txn.commit().unwrap();

    let run = |session: &mut lodestore::Session, traversal| {
        let mut txn = session.begin().unwrap();
        let counts = oo7::traverse(&mut txn, module, traversal, 9).unwrap();
        txn.commit().unwrap();
        counts
    };
    let t1 = run(&mut session, Traversal::T1);
    assert_eq!(t1.atomic_parts_visited, visits * per_composite);
    assert_eq!((t1.updates, t1.distinct_objects_modified), (0, 0));
    assert_eq!(t1.distinct_composite_parts_visited, distinct);

    let t6 = run(&mut session, Traversal::T6);
    assert_eq!(t6.atomic_parts_visited, visits);
    assert_eq!(t6.updates, 0);

    let t2a = run(&mut session, Traversal::T2a);
    assert_eq!(t2a.atomic_parts_visited, visits * per_composite);
    assert_eq!(t2a.updates, visits);
    assert_eq!(t2a.distinct_objects_modified, distinct);

    let t2b = run(&mut session, Traversal::T2b);
    assert_eq!(t2b.updates, visits * per_composite);
    assert_eq!(t2b.distinct_objects_modified, distinct * per_composite);

    let t2c = run(&mut session, Traversal::T2c);
    assert_eq!(t2c.updates, 4 * visits * per_composite);
    assert_eq!(t2c.distinct_objects_modified, distinct * per_composite);

    let t2b10 = run(&mut session, Traversal::T2b10);
    let n = visits * per_composite;
    // Binomial(n, 0.1): mean n/10, far inside 0..n/4 for this n.
    assert!(
        t2b10.updates > 0 && t2b10.updates < n / 4,
        "{}",
        t2b10.updates
    );
    // Same seed, same choices; the checksum differs, as the parts read hold the first run's
    // updates.
    let again = run(&mut session, Traversal::T2b10);
    assert_ne!(t2b10.checksum, again.checksum);
    assert_eq!(
        TraversalCounts {
            checksum: 0,
            ..t2b10
        },
        TraversalCounts {
            checksum: 0,
            ..again
        },
        "same seed, same choices"
    );

    // The committed updates are in the store: x grew by one per update.
    let mut txn = session.begin().unwrap();
    let after = sum_x(&mut txn);
    let total = t2a.updates + t2b.updates + t2c.updates + 2 * t2b10.updates;
    assert_eq!(after - before, total as i64);
}

fn txn_get_parts(txn: &mut Transaction<'_>, composite: u64) -> lodestore::Oid<OidList> {
    txn.get(typed::<CompositePart>(composite)).unwrap().parts
}

#[test]
fn presets_are_the_papers_parameters() {
    let qs_big = Oo7Params::preset("qs-big").unwrap();
    assert_eq!(qs_big.modules, 5);
    assert_eq!(qs_big.composite_parts_per_module, 2000);
    assert_eq!(qs_big.assembly_levels, 8);
    let thor = Oo7Params::preset("thor-medium").unwrap();
    assert_eq!(thor.atomic_parts_per_composite, 200);
    // Thor section 6.2: T1 touches 437,400 atomic parts of the medium database.
    assert_eq!(
        thor.composite_visits_per_module() * thor.atomic_parts_per_composite as u64,
        437_400
    );
    let err = Oo7Params::preset("oo7-huge").unwrap_err().to_string();
    assert!(
        err.contains("oo7-huge") && err.contains("qs-small"),
        "{err}"
    );
    let bad = Oo7Params {
        connections_per_atomic: 10,
        ..small_params()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .to_string()
        .contains("connections_per_atomic"));
}

#[test]
fn the_standard_small_preset_builds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let params = Oo7Params::preset("oo7-small").unwrap();
    drop(build(&path, &params, 1));
    let counts = count_by_type(&path);
    assert_eq!(counts[&AtomicPart::TYPE_ID], 10_000);
    assert_eq!(counts[&Connection::TYPE_ID], 30_000);
    assert_eq!(counts[&BaseAssembly::TYPE_ID], 729);
    assert_eq!(counts[&ComplexAssembly::TYPE_ID], 364);
}
