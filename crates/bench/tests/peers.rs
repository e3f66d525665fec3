//! The peer comparison: every store holds the same OO7 graph and the same updates, the peers
//! read Lodestore's objects faithfully (wrong types and missing objects refused as Lodestore
//! refuses them), and a peer's commits survive closing and reopening it.

use lodestore::{Error, Oid, Persistent, RawOid, ReadTransaction};
use lodestore_bench::lists::typed;
use lodestore_bench::oo7::schema::{AtomicPart, Connection};
use lodestore_bench::oo7::traverse::Traverse;
use lodestore_bench::oo7::{Oo7Params, Traversal};
use lodestore_bench::peers::{self, Databases, Peer, PeerObjects, PeersConfig, StoreKind};
use std::path::Path;

fn config(out: &Path) -> PeersConfig {
    let params = Oo7Params {
        composite_parts_per_module: 30,
        assembly_levels: 4,
        document_bytes: 300,
        manual_bytes: 5000,
        ..Oo7Params::preset("oo7-small").unwrap()
    };
    PeersConfig {
        preset: "peers-test".into(),
        params,
        seed: 3,
        stores: StoreKind::built(),
        traversals: vec![
            Traversal::T1,
            Traversal::T2a,
            Traversal::T2b,
            Traversal::T2c,
        ],
        traversal_runs: 2,
        threads: vec![1, 3],
        commit_seconds: 0.05,
        out: out.to_path_buf(),
        quiet: true,
        oo1_parts: Some(500),
        crash_child: None,
        crash_updates: 0,
    }
}

fn open(kind: StoreKind, dir: &Path) -> Box<dyn Peer> {
    match kind {
        StoreKind::Lmdb => Box::new(peers::lmdb::Lmdb::open(dir).unwrap()),
        StoreKind::Redb => Box::new(peers::redb::Redb::open(dir).unwrap()),
        StoreKind::Sqlite => Box::new(peers::sqlite::Sqlite::open(dir).unwrap()),
        #[cfg(feature = "rocksdb")]
        StoreKind::RocksDb => Box::new(peers::rocksdb::RocksDb::open(dir).unwrap()),
        #[cfg(not(feature = "rocksdb"))]
        StoreKind::RocksDb => unreachable!("not in this build"),
        StoreKind::Lodestore => unreachable!("not a peer"),
    }
}

#[test]
fn every_store_holds_the_same_graph_and_the_same_updates() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let databases = Databases::prepare(&config).unwrap();
    let figures: Vec<_> = config
        .stores
        .iter()
        .map(|&store| {
            peers::run(store, &config, &databases, &dir.path().join(store.name())).unwrap()
        })
        .collect();
    peers::check_agreement(&figures).unwrap();
    for f in &figures {
        assert!(f.load_s > 0.0 && f.bytes_on_disk > 0, "{f:?}");
        assert!(
            !dir.path().join(f.store.name()).exists(),
            "store left behind"
        );
        let [t1, t2a, t2b, t2c] = &f.traversals[..] else {
            panic!("four traversals: {f:?}")
        };
        assert!(t1.counts.atomic_parts_visited > 0);
        assert_eq!(t1.counts.updates, 0);
        assert!(t2a.counts.updates > 0 && t2a.counts.updates < t2a.counts.atomic_parts_visited);
        assert_eq!(t2b.counts.updates, t2b.counts.atomic_parts_visited);
        assert_eq!(t2c.counts.updates, 4 * t2c.counts.atomic_parts_visited);
        assert_eq!(f.commits_per_s.len(), 2);
        assert!(f.commits_per_s.iter().all(|&(_, rate)| rate > 0.0), "{f:?}");
        let oo1 = f.oo1.as_ref().unwrap();
        // Per run: 1,000 lookups and two traversals of 3,280 visits.
        assert_eq!(oo1.parts_visited, 2 * (1000 + 2 * 3280));
        assert!(oo1.load_s > 0.0 && oo1.update_ms > 0.0);
    }

    // A store whose graph or updates differ is caught, and both stores are named.
    let mut wrong = figures.clone();
    wrong[2].checksum ^= 1;
    let error = peers::check_agreement(&wrong).unwrap_err().to_string();
    assert!(
        error.contains("lodestore") && error.contains(wrong[2].store.name()),
        "{error}"
    );
}

#[test]
fn peers_refuse_wrong_types_and_missing_objects_and_keep_commits() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let databases = Databases::prepare(&config).unwrap();
    let database = &databases.oo7;
    for kind in StoreKind::built().into_iter().skip(1) {
        let store_dir = dir.path().join(kind.name());
        let peer = open(kind, &store_dir);
        database.load(peer.as_ref()).unwrap();
        let part: Oid<AtomicPart> = typed(database.first_part());
        let before = read_part(peer.as_ref(), part);
        peer.read(&mut |kv| {
            let mut objects = PeerObjects::new(kv);
            let as_connection: Oid<Connection> = typed(part.raw().0);
            match objects.get(as_connection) {
                Err(Error::TypeMismatch { found, .. }) => {
                    assert_eq!(found.0, AtomicPart::TYPE_ID)
                }
                other => panic!("{kind}: read as another type: {other:?}"),
            }
            for missing in [0, u64::MAX - 7] {
                match objects.info(RawOid(missing)) {
                    Err(Error::ObjectNotFound { oid }) => assert_eq!(oid.0, missing),
                    other => panic!("{kind}: missing object {missing}: {other:?}"),
                }
            }
            // Updates are refused in a read-only transaction.
            assert!(objects.update(part).is_err(), "{kind}");
            assert!(objects.roots().unwrap().contains_key("oo7"));
            Ok(())
        })
        .unwrap();
        peer.write(&mut |kv| PeerObjects::new(kv).update(part))
            .unwrap();
        // A failed transaction leaves nothing behind.
        let failed = peer.write(&mut |kv| {
            PeerObjects::new(kv).update(part)?;
            Err(Error::InvalidArgument("abandoned".into()))
        });
        assert!(failed.is_err());
        drop(peer);
        let reopened = open(kind, &store_dir);
        let after = read_part(reopened.as_ref(), part);
        assert_eq!((after.x, after.y), (before.x + 1, before.y + 1), "{kind}");
    }
}

fn read_part(peer: &dyn Peer, part: Oid<AtomicPart>) -> AtomicPart {
    let mut found = None;
    peer.read(&mut |kv| {
        found = Some(PeerObjects::new(kv).read(part)?);
        Ok(())
    })
    .unwrap();
    found.unwrap()
}
