//! kill -9 of real archive nodes: three `lodestore archive-serve` processes hold a store's
//! snapshot pages with a replication factor of two. Each round changes objects, takes a
//! snapshot, archives its pages, kills one node with SIGKILL and reads every snapshot taken so
//! far back from the other two, then starts the killed node again on its folder and port. A
//! node's archive must survive its kills, and the store must lose no snapshot page.

mod common;

use common::spawn_listening;
use lodestore::{ArchiveNodes, AsOf, Credentials, Options, Store, Token};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;

const ROUNDS: usize = 6;
const OBJECTS: usize = 40;
const TOKEN: &str = "archive-node-kill-test-token";

/// Root name -> object bytes.
type Dump = BTreeMap<String, Vec<u8>>;

struct Node {
    dir: PathBuf,
    listen: String,
    child: Option<Child>,
}

impl Node {
    /// Starts `lodestore archive-serve` on `listen` (port 0: a free one, then kept); a port just
    /// freed by a killed node may linger a moment, so the start is retried briefly.
    fn start(&mut self, token_file: &Path) {
        let extra = [
            "--page-size".as_ref(),
            "4096".as_ref(),
            "--token-file".as_ref(),
            token_file.as_os_str(),
        ];
        for _ in 0..50 {
            if let Some((child, address)) =
                spawn_listening("archive-serve", &self.dir, &self.listen, &extra)
            {
                self.listen = address;
                self.child = Some(child);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("archive node on {} did not start", self.listen);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn dump(store: &Store, as_of: Option<u64>) -> Dump {
    let mut session = store.session().unwrap();
    let mut dump = Dump::new();
    match as_of {
        Some(id) => {
            let mut txn = session.begin_as_of(AsOf::Snapshot(id)).unwrap();
            for (name, oid) in txn.roots().unwrap() {
                dump.insert(name, txn.read_all(oid).unwrap());
            }
            txn.finish().unwrap();
        }
        None => {
            let mut txn = session.begin().unwrap();
            for (name, oid) in txn.roots().unwrap() {
                dump.insert(name, txn.read_all(oid).unwrap());
            }
            txn.commit().unwrap();
        }
    }
    dump
}

#[test]
fn kill_minus_nine_of_archive_nodes_loses_no_snapshot_page() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| Node {
            dir: dir.path().join(format!("node-{i}")),
            listen: "127.0.0.1:0".into(),
            child: None,
        })
        .collect();
    for node in &mut nodes {
        node.start(&token_file);
    }
    let addresses: Vec<String> = nodes.iter().map(|n| n.listen.clone()).collect();
    let credentials = Credentials {
        token: Some(Token::new(TOKEN.as_bytes().to_vec()).unwrap()),
        tls: None,
    };
    let archive = Arc::new(ArchiveNodes::new(&addresses, 2, credentials).unwrap());
    let options = Options::new()
        .page_size(4096)
        .snapshots(true)
        .snapshot_archive(archive);
    let store = Store::create(dir.path().join("store"), options).unwrap();

    let mut taken: Vec<(u64, Dump)> = Vec::new();
    for round in 0..ROUNDS {
        // Change a third of the objects (creating them in the first round).
        let mut session = store.session().unwrap();
        let mut txn = session.begin().unwrap();
        for i in (round % 3..OBJECTS).step_by(3) {
            let name = format!("o{i}");
            let bytes = vec![(round * 7 + i) as u8; 300 + i];
            match txn.root(&name).unwrap() {
                Some(oid) => txn.write_at(oid, 0, &bytes).unwrap(),
                None => {
                    let oid = txn.alloc_bytes(5, &bytes).unwrap();
                    txn.set_root(&name, oid).unwrap();
                }
            }
        }
        txn.commit().unwrap();
        drop(session);
        let snapshot = store.snapshot().unwrap();
        taken.push((snapshot.id, dump(&store, None)));
        store.archive_snapshot_pages().unwrap();

        let victim = round % nodes.len();
        nodes[victim].kill();
        for (id, expected) in &taken {
            assert_eq!(
                &dump(&store, Some(*id)),
                expected,
                "round {round}, node {victim} killed: snapshot {id}"
            );
        }
        nodes[victim].start(&token_file);
        assert_eq!(nodes[victim].listen, addresses[victim]);
    }
    let stats = store.snapshot_stats().unwrap();
    assert_eq!(stats.staged_copies, 0, "every copy is on the nodes");
    assert!(stats.archive_bytes > 4096, "{stats:?}");
    store.close().unwrap();
    // Every node holds copies (each was down for one round and missed that round's).
    for node in &nodes {
        let held = std::fs::metadata(node.dir.join("archive")).unwrap().len();
        assert!(held > 4 * 4096, "{}: {held} bytes", node.dir.display());
    }
}
