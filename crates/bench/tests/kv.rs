//! The key-value comparison runs on every engine and each reads back exactly what was
//! written (its checksum is checked against the keys inside `run`, so a store that lost or
//! changed an entry fails here).

use lodestore_bench::kv::{self, EngineKind};

#[test]
fn every_engine_reads_back_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let mut checksums = Vec::new();
    for engine in EngineKind::ALL {
        let figures = kv::run(engine, &dir.path().join(engine.name()), 3_000, 7).unwrap();
        assert!(
            figures.ops_per_s.iter().all(|&ops| ops > 0.0),
            "{figures:?}"
        );
        checksums.push(figures.read_checksum);
    }
    assert!(checksums.windows(2).all(|w| w[0] == w[1]), "{checksums:?}");
}

#[test]
fn too_few_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(kv::run(EngineKind::Lodestore, dir.path(), 10, 1).is_err());
}
