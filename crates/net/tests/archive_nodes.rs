//! Snapshot archives on archive nodes: one node meets the archive contract of the local
//! archive; three nodes with a replication factor of two lose nothing while one is down, and
//! a read gathers enough answers to include a node that took every put, even right after a
//! node that missed some came back; too few nodes fail with an error naming them, never a
//! wrong page; a damaged copy on one node is read from another; tokens guard a node as they
//! guard a store; a node refuses a store's requests and a store is not taken for a node.

use lodestore_core::{Error, PageId};
use lodestore_net::archive::{ArchiveNodes, RunningNode};
use lodestore_net::auth::{Access, Credentials, ServerAuth, Token};
use lodestore_net::{RemotePageServer, ServeLimits};
use lodestore_protocol::archive::conformance::{check_contract, image};
use lodestore_protocol::archive::{Archive, PageCopy};
use lodestore_snapshots::LocalArchive;
use lodestore_storage::{FileSystem, MemoryFileSystem, OpenMode};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const PAGE: usize = 512;
/// Where a node's archive keeps its first copy's image (file header, record header).
const FIRST_IMAGE_AT: u64 = 32 + 40;

/// An archive node on loopback over a local archive in memory, that can be stopped and
/// started again on the same address with the same archive.
struct Node {
    fs: Arc<MemoryFileSystem>,
    address: String,
    token: Option<Token>,
    running: Option<RunningNode>,
}

impl Node {
    fn start(token: Option<Token>) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut node = Node {
            fs: Arc::new(MemoryFileSystem::new()),
            address: listener.local_addr().unwrap().to_string(),
            token,
            running: None,
        };
        node.serve(listener);
        node
    }

    fn serve(&mut self, listener: TcpListener) {
        let archive = LocalArchive::open(self.fs.clone(), Path::new("/archive"), PAGE).unwrap();
        let auth = match &self.token {
            Some(token) => ServerAuth::none().with(token.clone(), Access::ReadWrite),
            None => ServerAuth::none(),
        };
        let running = RunningNode::spawn(
            Arc::new(archive),
            PAGE,
            listener,
            ServeLimits::default(),
            auth,
        );
        self.running = Some(running.unwrap());
    }

    fn stop(&mut self) {
        if let Some(mut running) = self.running.take() {
            running.stop().unwrap();
        }
    }

    fn restart(&mut self) {
        assert!(self.running.is_none());
        let listener = TcpListener::bind(&self.address).unwrap();
        self.serve(listener);
    }

    /// Flips a byte of the first copy this node's archive holds.
    fn damage_first_copy(&self) {
        let file = self
            .fs
            .open(Path::new("/archive"), OpenMode::Existing)
            .unwrap();
        let mut byte = [0u8; 1];
        file.read_at(FIRST_IMAGE_AT + 20, &mut byte).unwrap();
        file.write_at(FIRST_IMAGE_AT + 20, &[byte[0] ^ 0xff])
            .unwrap();
    }
}

fn nodes(nodes: &[Node], factor: usize) -> ArchiveNodes {
    let addresses: Vec<String> = nodes.iter().map(|n| n.address.clone()).collect();
    ArchiveNodes::new(&addresses, factor, Credentials::default()).unwrap()
}

fn put(archive: &dyn Archive, copies: &[(u32, u64)]) -> lodestore_core::Result<()> {
    let images: Vec<Vec<u8>> = copies
        .iter()
        .map(|&(p, t)| image(PageId(p), t, PAGE))
        .collect();
    let copies: Vec<PageCopy<'_>> = copies
        .iter()
        .zip(&images)
        .map(|(&(p, t), image)| PageCopy {
            page: PageId(p),
            time_us: t,
            image,
        })
        .collect();
    archive.put(&copies)
}

/// The time of the copy `get` answers, checking its bytes.
fn get(archive: &dyn Archive, page: u32, at: u64) -> lodestore_core::Result<Option<u64>> {
    let mut buf = vec![0u8; PAGE];
    let got = archive.get(PageId(page), at, &mut buf)?;
    if let Some(time) = got {
        assert_eq!(
            buf,
            image(PageId(page), time, PAGE),
            "bytes of page {page} at {time}"
        );
    }
    Ok(got)
}

#[test]
fn one_node_meets_the_archive_contract() {
    let node = Node::start(None);
    check_contract(&nodes(std::slice::from_ref(&node), 1), PAGE).unwrap();
}

#[test]
fn three_nodes_with_factor_two_lose_nothing_while_one_is_down() {
    let mut three = [Node::start(None), Node::start(None), Node::start(None)];
    let archive = nodes(&three, 2);
    check_contract(&archive, PAGE).unwrap();

    // Node 0 down: puts still reach two nodes, reads gather two answers.
    three[0].stop();
    put(&archive, &[(40, 100), (41, 100)]).unwrap();
    assert_eq!(get(&archive, 40, 50).unwrap(), Some(100));
    assert_eq!(archive.get_ts(PageId(41)).unwrap(), Some(100));

    // Node 0 back without those copies, node 1 down: a read must not take node 0's "none"
    // for the answer (the current page would serve for a past one); node 2 has them.
    // Node 0 was found down a moment ago: it is asked anyway once the others are too few,
    // without waiting for its retry interval.
    three[0].restart();
    three[1].stop();
    assert_eq!(get(&archive, 40, 50).unwrap(), Some(100));
    assert_eq!(get(&archive, 41, 0).unwrap(), Some(100));
    assert_eq!(archive.get_ts(PageId(40)).unwrap(), Some(100));
    assert_eq!(
        get(&archive, 9, 15).unwrap(),
        Some(20),
        "the contract's copies too"
    );
    // The listing is the union of two answers: node 0 lacks pages 40 and 41, node 2 has them.
    let mut listed = archive.newest_times().unwrap();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            (PageId(3), 15),
            (PageId(9), 20),
            (PageId(40), 100),
            (PageId(41), 100)
        ]
    );

    // Two of three down: a put cannot reach the factor, a read cannot gather two answers;
    // both fail naming the archive, never answering wrongly.
    three[2].stop();
    let err = put(&archive, &[(42, 200)]).unwrap_err();
    assert!(
        err.to_string().contains("a put reached 1 of the 2"),
        "{err}"
    );
    let err = get(&archive, 40, 50).unwrap_err();
    assert!(err.to_string().contains(&three[1].address), "{err}");
    assert!(err.to_string().contains("lodestore://"), "{err}");
    assert!(
        archive.newest_times().is_none(),
        "no listing from one node of three"
    );
}

#[test]
fn a_damaged_copy_is_read_from_another_node_and_one_node_alone_names_it() {
    let two = [Node::start(None), Node::start(None)];
    let archive = nodes(&two, 2);
    put(&archive, &[(7, 30)]).unwrap();
    two[0].damage_first_copy();
    // Factor two of two nodes: one answer is enough, and node 0's damaged copy is no answer.
    assert_eq!(get(&archive, 7, 0).unwrap(), Some(30));

    let alone = nodes(&two[..1], 1);
    let err = get(&alone, 7, 0).unwrap_err();
    assert!(
        err.to_string().contains("page 7") && err.to_string().contains(&two[0].address),
        "{err}"
    );
}

#[test]
fn a_node_requires_its_token_and_refuses_a_stores_requests() {
    let token = Token::new(b"archive node token 0123456789".to_vec()).unwrap();
    let node = Node::start(Some(token.clone()));
    let addresses = vec![node.address.clone()];
    let anonymous = ArchiveNodes::new(&addresses, 1, Credentials::default()).unwrap();
    let err = put(&anonymous, &[(1, 1)]).unwrap_err();
    assert!(err.to_string().contains("requires a token"), "{err}");
    let credentials = Credentials {
        token: Some(token.clone()),
        tls: None,
    };
    let with_token = ArchiveNodes::new(&addresses, 1, credentials).unwrap();
    put(&with_token, &[(1, 1)]).unwrap();
    assert_eq!(get(&with_token, 1, 0).unwrap(), Some(1));

    // A store's request to the node, and an archive of another page size.
    let remote = RemotePageServer::connect_with(&node.address, "test", Some(&token)).unwrap();
    use lodestore_server::PageServer;
    assert!(matches!(remote.begin(), Err(Error::Unsupported(_))));
    // A read into a buffer of another page size: the answer does not fit, and the error
    // says so in a line, not with the page's bytes.
    let mut large = vec![0u8; PAGE * 2];
    let err = with_token
        .get(PageId(1), 0, &mut large)
        .unwrap_err()
        .to_string();
    assert!(err.contains("answered a read of page 1"), "{err}");
    assert!(err.len() < 1000, "{err}");
    // A copy of another page size is refused by name.
    let err = with_token
        .put(&[PageCopy {
            page: PageId(2),
            time_us: 1,
            image: &[0u8; PAGE * 2],
        }])
        .unwrap_err();
    assert!(
        err.to_string().contains("this archive holds pages of 512"),
        "{err}"
    );
}

#[test]
fn an_archive_refuses_a_store_server_and_bad_settings() {
    let fs = Arc::new(lodestore_storage::SimFileSystem::new());
    let server = Arc::new(
        lodestore_server::Server::create(
            fs,
            Path::new("/s"),
            PAGE * 8,
            lodestore_server::ServerOptions::default(),
        )
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let serving = std::thread::spawn(move || {
        lodestore_net::serve(server, listener, flag).unwrap();
    });
    let archive =
        ArchiveNodes::new(std::slice::from_ref(&address), 1, Credentials::default()).unwrap();
    let err = archive.get_ts(PageId(1)).unwrap_err();
    assert!(
        err.to_string()
            .contains("serves a store, not a snapshot archive node"),
        "{err}"
    );
    stop.store(true, Ordering::Relaxed);
    serving.join().unwrap();

    let two = ["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
    for (addresses, factor) in [(&two[..], 3), (&two[..], 0), (&[][..], 1)] {
        assert!(matches!(
            ArchiveNodes::new(addresses, factor, Credentials::default()),
            Err(Error::InvalidArgument(_))
        ));
    }
    let twice = vec![two[0].clone(), two[0].clone()];
    assert!(ArchiveNodes::new(&twice, 1, Credentials::default()).is_err());
}
