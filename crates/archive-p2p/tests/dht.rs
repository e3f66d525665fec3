//! The archive contract, damaged records, and peers killed with SIGKILL, on DHTs of 8 and 16
//! archive peers started here as processes on loopback.

use lodestore_archive_p2p::peers::{PeerCommand, PeerSet};
use lodestore_archive_p2p::P2pArchive;
use lodestore_core::{Error, PageId};
use lodestore_protocol::archive::conformance::{check_contract, image};
use lodestore_protocol::archive::{page_copies, Archive, PageCopy};

const PAGE: usize = 4096;

fn command() -> PeerCommand {
    PeerCommand {
        program: env!("CARGO_BIN_EXE_lodestore-archive-peer").into(),
        args: Vec::new(),
    }
}

fn peers(count: usize, replicas: usize) -> PeerSet {
    PeerSet::start(command(), count, replicas).unwrap()
}

fn put_pages(archive: &P2pArchive, pages: u32, times: &[u64]) {
    let labels: Vec<(PageId, u64)> = (0..pages)
        .flat_map(|p| times.iter().map(move |&t| (PageId(p), t)))
        .collect();
    let images: Vec<Vec<u8>> = labels.iter().map(|&(p, t)| image(p, t, PAGE)).collect();
    archive.put(&page_copies(&labels, &images)).unwrap();
}

/// Every copy of `pages` pages reads back at every time, one at a time and in batches.
fn read_all(archive: &P2pArchive, pages: u32, times: &[u64]) {
    let mut buf = vec![0u8; PAGE];
    for p in 0..pages {
        let page = PageId(p);
        for &time in times {
            let got = archive.get(page, time, &mut buf).unwrap();
            assert_eq!(got, Some(time), "page {p} at {time}");
            assert_eq!(buf, image(page, time, PAGE), "page {p} at {time}");
        }
    }
    let wants: Vec<(PageId, u64)> = (0..pages).map(|p| (PageId(p), 0)).collect();
    let mut bufs = vec![0u8; wants.len() * PAGE];
    let found = archive.get_many(&wants, &mut bufs).unwrap();
    for (p, (time, buf)) in found.iter().zip(bufs.chunks_exact(PAGE)).enumerate() {
        assert_eq!(*time, Some(times[0]), "page {p} in a batch");
        assert_eq!(
            buf,
            image(PageId(p as u32), times[0], PAGE),
            "page {p} in a batch"
        );
    }
}

#[test]
fn a_dht_of_eight_peers_meets_the_archive_contract() {
    let set = peers(8, 2);
    let archive = P2pArchive::open(&set.url("contract", 2)).unwrap();
    check_contract(&archive, PAGE).unwrap();
    let traffic = archive.traffic();
    assert!(
        traffic.requests > 10 && traffic.bytes_sent >= 3 * PAGE as u64,
        "{traffic:?}"
    );
    // Each page's record sits on exactly its replicas.
    let holders = set.record_files(archive.page_key(PageId(9)).as_ref());
    assert_eq!(holders.len(), 2);
    // Another namespace in the same DHT sees none of it.
    let other = P2pArchive::open(&set.url("elsewhere", 1)).unwrap();
    assert_eq!(other.get_ts(PageId(9)).unwrap(), None);
    // At two replicas, one of a page's peers killed loses nothing.
    let mut set = set;
    let holder = set.index_of_dir(&holders[0]).unwrap();
    set.kill(holder);
    let reader = P2pArchive::open(&set.url("contract", 8)).unwrap();
    let mut buf = vec![0u8; PAGE];
    assert_eq!(reader.get(PageId(9), 0, &mut buf).unwrap(), Some(20));
    assert_eq!(buf, image(PageId(9), 20, PAGE));
}

#[test]
fn killed_peers_lose_nothing_at_three_replicas() {
    let mut set = peers(16, 3);
    let archive = P2pArchive::open(&set.url("kills", 3)).unwrap();
    let (pages, times) = (48, [10, 20]);
    put_pages(&archive, pages, &times);
    // Two of any page's three replicas may go: kill two peers, then two others after
    // bringing the first back.
    set.kill(3);
    set.kill(11);
    let reader = P2pArchive::open(&set.url("kills", 3)).unwrap();
    read_all(&reader, pages, &times);
    set.restart(3).unwrap();
    set.restart(11).unwrap();
    set.kill(5);
    set.kill(14);
    // A put while they are down goes to the next closest peers.
    put_pages(&archive, pages, &[30]);
    let reader = P2pArchive::open(&set.url("kills", 1)).unwrap();
    read_all(&reader, pages, &[10, 20, 30]);
    // The index lists every copy (the page map a store builds at open, and retention's
    // list), peers down or not.
    let mut listed = reader.list().expect("the index answers");
    listed.sort_unstable();
    let all: Vec<(PageId, u64)> = (0..pages)
        .flat_map(|p| [10, 20, 30].map(|t| (PageId(p), t)))
        .collect();
    assert_eq!(listed, all);
    let newest = reader.newest_times().unwrap();
    assert!(newest.len() == pages as usize && newest.iter().all(|&(_, t)| t == 30));
}

#[test]
fn a_damaged_replica_is_outvoted_and_all_damaged_is_named() {
    let set = peers(8, 2);
    let archive = P2pArchive::open(&set.url("damage", 2)).unwrap();
    let (page, time) = (PageId(4), 77);
    put_pages(&archive, 5, &[time]);
    let files = set.record_files(archive.page_key(page).as_ref());
    assert_eq!(files.len(), 2, "{files:?}");
    let flip = |path: &std::path::Path| {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x20;
        std::fs::write(path, bytes).unwrap();
    };
    flip(&files[0]);
    let mut buf = vec![0u8; PAGE];
    assert_eq!(archive.get(page, 0, &mut buf).unwrap(), Some(time));
    assert_eq!(buf, image(page, time, PAGE));
    flip(&files[1]);
    // Both replicas' records damaged: an error naming the page, never "no copy" (which
    // would serve the current page as the past).
    match archive.get(page, 0, &mut buf) {
        Err(Error::CorruptArchive {
            page: p, reason, ..
        }) => {
            assert_eq!(p, page);
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("a page whose replicas are all damaged read as {other:?}"),
    }
    // The other pages are unharmed.
    for p in [0, 1, 2, 3] {
        assert_eq!(archive.get(PageId(p), 0, &mut buf).unwrap(), Some(time));
    }
}

#[test]
fn a_dht_that_is_down_is_an_error_naming_it_never_no_copy() {
    let mut set = peers(4, 2);
    let url = set.url("down", 4);
    let archive = P2pArchive::open(&url).unwrap();
    put_pages(&archive, 2, &[5]);
    for i in 0..4 {
        set.kill(i);
    }
    let mut buf = vec![0u8; PAGE];
    match archive.get(PageId(0), 0, &mut buf) {
        Err(e @ Error::Connection { .. }) => {
            let text = e.to_string();
            assert!(text.contains("p2p://"), "{text}");
        }
        other => panic!("a read with every peer down gave {other:?}"),
    }
    assert!(archive
        .put(&[PageCopy {
            page: PageId(1),
            time_us: 9,
            image: &[0u8; PAGE]
        }])
        .is_err());
}

#[test]
fn a_private_dht_serves_only_holders_of_its_token() {
    const TOKEN: &[u8] = b"a-dht-token-of-enough-bytes";
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, [TOKEN, b"\n"].concat()).unwrap();
    let set = PeerSet::start_private(command(), 4, 2, Some(token_file)).unwrap();
    let url = set.url("private", 4);
    let member = P2pArchive::open_private(&url, Some(TOKEN)).unwrap();
    put_pages(&member, 3, &[7]);
    read_all(&member, 3, &[7]);
    // Without the token no peer lets a reader in: an error naming the DHT, never "no copy";
    // with another token nothing is stored. (Each waits out the connection set-up time.)
    let stranger = P2pArchive::open_private(&url, None).unwrap();
    let mut buf = vec![0u8; PAGE];
    match stranger.get(PageId(0), 0, &mut buf) {
        Err(Error::Connection { peer, .. }) => assert!(peer.starts_with("p2p://")),
        other => panic!("a stranger's read gave {other:?}"),
    }
    let impostor = P2pArchive::open_private(&url, Some(b"another-token-of-enough-bytes")).unwrap();
    let image = image(PageId(0), 99, PAGE);
    let copy = PageCopy {
        page: PageId(0),
        time_us: 99,
        image: &image,
    };
    assert!(impostor.put(&[copy]).is_err());
    assert_eq!(member.get_ts(PageId(0)).unwrap(), Some(7));
    let short = P2pArchive::open_private(&url, Some(b"short"))
        .err()
        .unwrap();
    assert!(short.to_string().contains("at least 16 bytes"), "{short}");
}
