//! 10,000 random allocations, frees, updates and reads, in transactions that commit or abort,
//! checked against an in-memory model, under every update-detection scheme. Small pools force
//! eviction throughout, and a recovery buffer of one page forces log records out early. The
//! seed is printed on failure; set LODESTORE_MODEL_SEED to replay one.

use lodestore::{Options, RawOid, RealFileSystem, Scheme, Store, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const OPERATIONS: usize = 10_000;
const PAGE_SIZE: usize = 4096;

type Model = BTreeMap<RawOid, Vec<u8>>;

fn random_size(rng: &mut StdRng) -> usize {
    match rng.random_range(0..100) {
        0..70 => rng.random_range(1..300),
        70..95 => rng.random_range(300..PAGE_SIZE - 64),
        _ => rng.random_range(PAGE_SIZE..40_000),
    }
}

fn pick(model: &Model, rng: &mut StdRng) -> Option<RawOid> {
    if model.is_empty() {
        return None;
    }
    model.keys().nth(rng.random_range(0..model.len())).copied()
}

fn verify(txn: &mut Transaction<'_>, model: &Model) {
    for (oid, bytes) in model {
        assert_eq!(&txn.read_all(*oid).unwrap(), bytes, "object {oid}");
    }
}

fn run(seed: u64, scheme: Scheme, recovery_buffer_bytes: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let options = Options::new()
        .page_size(PAGE_SIZE)
        .client_cache_bytes(16 * PAGE_SIZE)
        .server_pool_bytes(16 * PAGE_SIZE)
        .scheme(scheme)
        .recovery_buffer_bytes(recovery_buffer_bytes);
    let store = Store::create(&path, options.clone()).unwrap();
    let mut session = store.session().unwrap();
    let mut committed = Model::new();
    let mut done = 0;
    while done < OPERATIONS {
        let mut working = committed.clone();
        let mut txn = session.begin().unwrap();
        let length = rng.random_range(1..60);
        for _ in 0..length {
            done += 1;
            match rng.random_range(0..100) {
                0..40 => {
                    let size = random_size(&mut rng);
                    let bytes: Vec<u8> = (0..size).map(|_| rng.random()).collect();
                    let oid = txn.alloc_bytes(7, &bytes).unwrap();
                    assert!(
                        working.insert(oid, bytes).is_none(),
                        "OID {oid} reused live"
                    );
                }
                40..55 => {
                    if let Some(oid) = pick(&working, &mut rng) {
                        txn.free(oid).unwrap();
                        working.remove(&oid);
                    }
                }
                55..90 => {
                    if let Some(oid) = pick(&working, &mut rng) {
                        let bytes = working.get_mut(&oid).unwrap();
                        let start = rng.random_range(0..bytes.len());
                        let end = rng.random_range(start..=bytes.len().min(start + 5000));
                        let patch: Vec<u8> = (start..end).map(|_| rng.random()).collect();
                        txn.write_at(oid, start as u64, &patch).unwrap();
                        bytes[start..end].copy_from_slice(&patch);
                    }
                }
                _ => {
                    if let Some(oid) = pick(&working, &mut rng) {
                        assert_eq!(&txn.read_all(oid).unwrap(), &working[&oid]);
                    }
                }
            }
        }
        if rng.random_range(0..5) == 0 {
            txn.abort().unwrap();
        } else {
            txn.commit().unwrap();
            committed = working;
        }
        if rng.random_range(0..40) == 0 {
            let mut txn = session.begin().unwrap();
            verify(&mut txn, &committed);
        }
    }
    let mut txn = session.begin().unwrap();
    verify(&mut txn, &committed);
    drop(txn);
    assert!(
        session.stats().evictions > 0,
        "the client cache never evicted"
    );
    assert!(
        store.server_stats().pool_evictions > 0,
        "the server pool never evicted"
    );
    drop(session);
    drop(store);

    // After reopening: the same objects, and nothing else.
    let store = Store::open(&path, options).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    verify(&mut txn, &committed);
    drop(txn);
    drop(session);
    drop(store);
    let mut stored = Model::new();
    lodestore::objects(&RealFileSystem, &path, |object| {
        stored.insert(object.oid, object.bytes);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        stored, committed,
        "store holds other objects than the model"
    );
    let report = lodestore::check(&RealFileSystem, &path).unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
}

fn seed() -> u64 {
    let seed = std::env::var("LODESTORE_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x10DE_5702);
    eprintln!("model seed {seed} (replay: LODESTORE_MODEL_SEED={seed} cargo test --test model)");
    seed
}

#[test]
fn ten_thousand_random_operations_match_the_model() {
    run(seed(), Scheme::default(), 4 << 20);
}

/// Every scheme, with a recovery buffer of one page: pre-images leave it all the time.
#[test]
fn every_scheme_matches_the_model_with_a_one_page_recovery_buffer() {
    let only: Option<Scheme> = std::env::var("LODESTORE_MODEL_SCHEME")
        .ok()
        .map(|name| name.parse().unwrap());
    for scheme in Scheme::all() {
        if only.is_some_and(|only| only != scheme) {
            continue;
        }
        eprintln!("scheme {scheme} (replay: LODESTORE_MODEL_SCHEME={scheme})");
        run(seed(), scheme, PAGE_SIZE);
    }
}
