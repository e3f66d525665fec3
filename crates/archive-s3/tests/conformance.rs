//! The archive contract, damaged and missing copies, and a server going down, against real S3
//! protocol servers on loopback (s3s-fs and moto), each started here as a process.

use lodestore_archive_s3::servers::{S3Server, ServerKind, ACCESS_KEY, SECRET_KEY};
use lodestore_archive_s3::S3Archive;
use lodestore_core::{Error, PageId};
use lodestore_protocol::archive::conformance::{check_contract, image};
use lodestore_protocol::archive::{Archive, PageCopy};

const PAGE: usize = 4096;

fn archive_on(server: &S3Server, bucket: &str, prefix: &str) -> S3Archive {
    server.create_bucket(bucket).unwrap();
    S3Archive::open_with_keys(&server.url(bucket, prefix), ACCESS_KEY, SECRET_KEY).unwrap()
}

#[test]
fn every_server_meets_the_archive_contract() {
    for kind in ServerKind::ALL {
        let Some(server) = S3Server::start(kind).unwrap() else {
            continue;
        };
        let archive = archive_on(&server, "contract", "stores/one");
        check_contract(&archive, PAGE).unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        // Requests were counted: the contract's put, reads and listings.
        let traffic = archive.traffic();
        assert!(
            traffic.requests > 10 && traffic.bytes_sent >= 3 * PAGE as u64,
            "{traffic:?}"
        );
        // A second store under another prefix of the same bucket sees none of it.
        let other = S3Archive::open_with_keys(
            &server.url("contract", "stores/two"),
            ACCESS_KEY,
            SECRET_KEY,
        )
        .unwrap();
        assert_eq!(other.get_ts(PageId(9)).unwrap(), None, "{}", kind.name());
        assert_eq!(other.newest_times(), Some(Vec::new()));
    }
}

#[test]
fn damaged_and_misplaced_copies_are_refused_by_name() {
    for kind in ServerKind::ALL {
        let Some(server) = S3Server::start(kind).unwrap() else {
            continue;
        };
        let archive = archive_on(&server, "damage", "");
        let (page, time) = (PageId(5), 100);
        let bytes = image(page, time, PAGE);
        archive
            .put(&[PageCopy {
                page,
                time_us: time,
                image: &bytes,
            }])
            .unwrap();
        let mut buf = vec![0u8; PAGE];
        assert_eq!(archive.get(page, 0, &mut buf).unwrap(), Some(time));
        assert_eq!(buf, bytes);
        // One bit flipped in the stored object.
        let key = archive.copy_key(page, time);
        let mut blob = lodestore_protocol::archive::sealed::seal(page, time, &bytes);
        blob[100] ^= 0x10;
        archive.overwrite_object(&key, blob).unwrap();
        match archive.get(page, 0, &mut buf) {
            Err(Error::CorruptArchive {
                page: p,
                time_us,
                reason,
                ..
            }) => {
                assert_eq!((p, time_us), (page, time));
                assert!(reason.contains("checksum"), "{reason}");
            }
            other => panic!("{}: a damaged copy read as {other:?}", kind.name()),
        }
        // Another page's copy stored under this key.
        let elsewhere = lodestore_protocol::archive::sealed::seal(PageId(6), time, &bytes);
        archive.overwrite_object(&key, elsewhere).unwrap();
        let err = archive.get(page, 0, &mut buf).unwrap_err().to_string();
        assert!(err.contains("page 6"), "{err}");
        // A truncated object.
        archive.overwrite_object(&key, vec![1, 2, 3]).unwrap();
        let err = archive.get(page, 0, &mut buf).unwrap_err().to_string();
        assert!(err.contains("not a sealed page copy"), "{err}");
        // An object far longer than a page copy: refused before its body is read.
        archive.overwrite_object(&key, vec![7; 8 * PAGE]).unwrap();
        let err = archive.get(page, 0, &mut buf).unwrap_err().to_string();
        assert!(err.contains("where a page copy has at most"), "{err}");
    }
}

#[test]
fn a_server_killed_fails_reads_by_name_keeps_what_it_took_and_a_missing_bucket_is_named() {
    for kind in ServerKind::ALL {
        let Some(mut server) = S3Server::start(kind).unwrap() else {
            continue;
        };
        let missing =
            S3Archive::open_with_keys(&server.url("no-such-bucket", "p"), ACCESS_KEY, SECRET_KEY)
                .unwrap();
        let err = missing.get_ts(PageId(1)).unwrap_err().to_string();
        assert!(
            err.contains("s3://no-such-bucket/p"),
            "{}: {err}",
            kind.name()
        );
        let archive = archive_on(&server, "killed", "p");
        let before = image(PageId(2), 7, PAGE);
        archive
            .put(&[PageCopy {
                page: PageId(2),
                time_us: 7,
                image: &before,
            }])
            .unwrap();
        server.kill();
        let mut buf = vec![0u8; PAGE];
        let err = archive.get(PageId(1), 0, &mut buf).unwrap_err().to_string();
        assert!(
            err.contains("s3://killed/p") && err.contains("failed"),
            "{err}"
        );
        let bytes = image(PageId(1), 1, PAGE);
        let put = archive.put(&[PageCopy {
            page: PageId(1),
            time_us: 1,
            image: &bytes,
        }]);
        assert!(
            put.is_err(),
            "{}: a put to a killed server succeeded",
            kind.name()
        );
        // s3s-fs back on its files: what was put before the kill reads back (moto keeps
        // objects in memory only).
        if kind == ServerKind::S3sFs {
            server.restart().unwrap();
            assert_eq!(archive.get(PageId(2), 0, &mut buf).unwrap(), Some(7));
            assert_eq!(buf, before);
        }
    }
}

/// Once the archive has listed its copies, a read of one it names is a single GET; a copy
/// another process removed since is looked up by a listing instead, and the next copy serves.
#[test]
fn a_listed_archive_reads_a_copy_in_one_request_and_notices_removals_elsewhere() {
    for kind in ServerKind::ALL {
        let Some(server) = S3Server::start(kind).unwrap() else {
            continue;
        };
        let archive = archive_on(&server, "indexed", "p");
        let images: Vec<(u64, Vec<u8>)> = [10, 20]
            .into_iter()
            .map(|t| (t, image(PageId(4), t, PAGE)))
            .collect();
        let put: Vec<PageCopy<'_>> = images
            .iter()
            .map(|(time_us, image)| PageCopy {
                page: PageId(4),
                time_us: *time_us,
                image,
            })
            .collect();
        archive.put(&put).unwrap();
        assert_eq!(archive.newest_times(), Some(vec![(PageId(4), 20)]));
        let mut buf = vec![0u8; PAGE];
        let before = archive.traffic().requests;
        assert_eq!(archive.get(PageId(4), 5, &mut buf).unwrap(), Some(10));
        assert_eq!(archive.traffic().requests - before, 1, "{}", kind.name());
        // Another process removes the copy at 10.
        let other =
            S3Archive::open_with_keys(&server.url("indexed", "p"), ACCESS_KEY, SECRET_KEY).unwrap();
        other.remove(&[(PageId(4), 10)]).unwrap();
        assert_eq!(archive.get(PageId(4), 5, &mut buf).unwrap(), Some(20));
        assert_eq!(buf, images[1].1, "{}", kind.name());
    }
}
