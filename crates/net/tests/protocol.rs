//! The wire protocol under good and bad input: frames round-trip; the decoders never panic on
//! arbitrary bytes; a server closes the connection of a client that breaks the protocol (with
//! the other clients unaffected), and rolls back the transaction of a client that vanished.

use lodestore_core::{Error, PageId, TxnId, TypeId};
use lodestore_net::frame::{header, read_frame, write_frame, FrameError, MAX_FRAME_BODY};
use lodestore_net::message::{
    decode, encode, Request, Response, WireError, WireIncrement, WireLockMode, WireLockTarget,
    WireObjectUpdates, WireOperationNote, WirePage, WireRecords, WireTxnKind, WireUpdates,
};
use lodestore_net::RemotePageServer;
use lodestore_server::{LockMode, PageServer};
use lodestore_storage::slotted;
mod common;

use common::{assert_closed, assert_serving, raw, start_server, start_server_with};
use proptest::prelude::*;
use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

/// Sends `request` for a transaction of a raw connection and expects it refused as an invalid
/// argument whose message says `reason`.
fn assert_refused_in_a_transaction(
    address: &str,
    request: impl FnOnce(u64) -> Request,
    reason: &str,
) {
    let mut s = raw(address, true);
    write_frame(
        &mut s,
        2,
        &encode(&Request::Begin {
            kind: WireTxnKind::ReadWrite,
        }),
    )
    .unwrap();
    let Response::Began { txn, .. } =
        decode::<Response>(&read_frame(&mut s).unwrap().body).unwrap()
    else {
        panic!("no transaction");
    };
    write_frame(&mut s, 3, &encode(&request(txn))).unwrap();
    match decode::<Response>(&read_frame(&mut s).unwrap().body).unwrap() {
        Response::Failed(WireError::InvalidArgument(m)) => assert!(m.contains(reason), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn frames_round_trip_and_bad_headers_are_named() {
    let mut wire = Vec::new();
    write_frame(&mut wire, 42, b"hello").unwrap();
    let frame = read_frame(&mut wire.as_slice()).unwrap();
    assert_eq!(
        (frame.request_id, frame.body.as_slice()),
        (42, &b"hello"[..])
    );

    let mut bad = wire.clone();
    bad[0] = b'X';
    assert!(matches!(
        read_frame(&mut bad.as_slice()),
        Err(FrameError::BadMagic(_))
    ));
    let mut bad = wire.clone();
    bad[4] = 99;
    let err = read_frame(&mut bad.as_slice()).unwrap_err();
    assert!(err.to_string().contains("protocol version 99"), "{err}");
    let mut bad = wire.clone();
    bad[16..20].copy_from_slice(&((MAX_FRAME_BODY + 1) as u32).to_le_bytes());
    assert!(matches!(
        read_frame(&mut bad.as_slice()),
        Err(FrameError::TooLarge(_))
    ));
    let mut bad = wire.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(matches!(
        read_frame(&mut bad.as_slice()),
        Err(FrameError::Checksum)
    ));
    let cut = &wire[..wire.len() - 2];
    assert!(matches!(
        read_frame(&mut &cut[..]),
        Err(FrameError::Truncated { .. })
    ));
    assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
}

/// Byte fields travel as a varint length and the bytes themselves, one copy each way.
#[test]
fn byte_fields_travel_as_a_length_and_the_bytes() {
    // Response::Page is variant 4; 300 is the varint 0xAC 0x02.
    let page = vec![9u8; 300];
    let mut expected = vec![4, 0xAC, 0x02];
    expected.extend_from_slice(&page);
    assert_eq!(encode(&Response::Page(page.clone())), expected);
    assert_eq!(decode::<Response>(&expected).unwrap(), Response::Page(page));
    // Request::ShipRecords is variant 7: txn 5, page records (variant 0), one record (page 2,
    // offset 3, 2 bytes), then its before bytes [1, 2] and after bytes [3, 4] in one string.
    let request = Request::ShipRecords {
        txn: 5,
        records: WireRecords::Pages(WireUpdates {
            records: vec![(2, 3, 2)],
            bytes: vec![1, 2, 3, 4],
        }),
    };
    let expected = [7, 5, 0, 1, 2, 3, 2, 4, 1, 2, 3, 4];
    assert_eq!(encode(&request), expected);
    assert_eq!(decode::<Request>(&expected).unwrap(), request);
}

proptest! {
    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = read_frame(&mut bytes.as_slice());
        let _ = decode::<Request>(&bytes);
        let _ = decode::<Response>(&bytes);
        // And behind a valid header.
        let mut wire = header(7, &bytes).to_vec();
        wire.extend_from_slice(&bytes);
        let frame = read_frame(&mut wire.as_slice()).unwrap();
        let _ = decode::<Request>(&frame.body);
    }

    #[test]
    fn requests_round_trip(txn in any::<u64>(), page in any::<u32>(), bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let requests = [
            Request::Lock { txn, target: WireLockTarget::Page(page), mode: WireLockMode::Exclusive },
            Request::Lock { txn, target: WireLockTarget::Object(txn), mode: WireLockMode::Increment },
            Request::NoteOperation { txn, note: WireOperationNote::Undo { inverse: page, args: bytes.clone() } },
            Request::NoteOperation { txn, note: WireOperationNote::Compensates { undone: txn } },
            Request::FindSpace { txn, bytes: bytes.len() as u64, skip: vec![page] },
            Request::ShipRecords { txn, records: WireRecords::Pages(WireUpdates { records: vec![(page, 3, bytes.len() as u32)], bytes: [bytes.clone(), bytes.clone()].concat() }) },
            Request::Begin { kind: WireTxnKind::Sub { parent: txn } },
            Request::RunIncrements { parent: txn, fields: vec![WireIncrement { object: txn, offset: page, delta: txn as i64 }], note: WireOperationNote::Undo { inverse: page, args: bytes.clone() }, force: page % 2 == 0 },
        ];
        for request in requests {
            prop_assert_eq!(decode::<Request>(&encode(&request)).unwrap(), request);
        }
    }
}

#[test]
fn protocol_breakers_are_disconnected_and_others_keep_working() {
    let server = start_server();
    let address = server.address.clone();
    // A well-behaved client connected throughout.
    let steady = RemotePageServer::connect(&address, "steady").unwrap();

    // Oversized frame.
    let mut s = raw(&address, true);
    let mut h = header(2, b"");
    h[16..20].copy_from_slice(&((MAX_FRAME_BODY + 1) as u32).to_le_bytes());
    s.write_all(&h).unwrap();
    assert_closed(&mut s);

    // Wrong protocol version, before hello.
    let mut s = raw(&address, false);
    let mut h = header(1, b"");
    h[4] = 99;
    s.write_all(&h).unwrap();
    assert_closed(&mut s);

    // Not a Lodestore peer at all.
    let mut s = raw(&address, false);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_closed(&mut s);

    // A valid frame whose body is not a request.
    let mut s = raw(&address, true);
    write_frame(&mut s, 2, &[0xFF; 40]).unwrap();
    assert_closed(&mut s);

    // Something other than hello first: answered with the reason, then closed.
    let mut s = raw(&address, false);
    write_frame(
        &mut s,
        1,
        &encode(&Request::Begin {
            kind: WireTxnKind::ReadWrite,
        }),
    )
    .unwrap();
    let frame = read_frame(&mut s).unwrap();
    match decode::<Response>(&frame.body).unwrap() {
        Response::Failed(WireError::PermissionDenied(m)) => assert!(m.contains("hello"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_closed(&mut s);

    // Log records whose bytes do not match their lengths: answered with the reason.
    let page = steady.root_directory().page().0;
    assert_refused_in_a_transaction(
        &address,
        |txn| Request::ShipRecords {
            txn,
            records: WireRecords::Pages(WireUpdates {
                records: vec![(page, 20, 4)],
                bytes: vec![0; 7],
            }),
        },
        "malformed log records",
    );
    // The same for object redo records (a record of 5 bytes, 2 shipped).
    let oid = steady.root_directory().0;
    assert_refused_in_a_transaction(
        &address,
        |txn| Request::ShipRecords {
            txn,
            records: WireRecords::Objects(WireObjectUpdates {
                records: vec![(oid, 0, 5)],
                bytes: vec![0; 2],
            }),
        },
        "malformed object redo records",
    );

    // A page image whose structure is unsound (a slot pointing past the page's end): refused
    // at the connection, before the server takes it as a page.
    let mut image = vec![0u8; steady.page_size()];
    slotted::init(&mut image, PageId(page), 0);
    let slot = slotted::insert(&mut image, TypeId(1), 16, false).unwrap() as usize;
    let entry = slotted::SLOT_TABLE_AT + slotted::SLOT_BYTES * slot;
    image[entry..entry + 2].copy_from_slice(&u16::MAX.to_le_bytes());
    assert_refused_in_a_transaction(
        &address,
        |txn| Request::ShipDirtyPages {
            txn,
            pages: vec![WirePage {
                page,
                logged: false,
                image: image.clone(),
            }],
        },
        &format!("page {page} shipped malformed"),
    );

    // Another connection's page reservation can be neither taken nor released.
    let (reservation, extents) = steady.reserve_pages(2).unwrap();
    let reserved = extents[0].first.0;
    assert_refused_in_a_transaction(
        &address,
        |txn| Request::TakeReserved {
            txn,
            reservation,
            page: reserved,
        },
        &format!("reservation {reservation} is not a reservation of this connection"),
    );
    assert_refused_in_a_transaction(
        &address,
        |_| Request::ReleaseReservation { reservation },
        "not a reservation of this connection",
    );
    let txn = steady.begin().unwrap();
    steady
        .take_reserved(txn, reservation, PageId(reserved))
        .unwrap();
    steady.abort(txn).unwrap();
    steady.release_reservation(reservation).unwrap();

    // Disconnecting in the middle of a frame.
    let mut s = raw(&address, true);
    let body = encode(&Request::Begin {
        kind: WireTxnKind::ReadWrite,
    });
    s.write_all(&header(2, &body)).unwrap();
    drop(s);

    // A page that does not exist: answered with the error naming it, then closed.
    let remote = RemotePageServer::connect(&address, "lost").unwrap();
    let txn = remote.begin().unwrap();
    let err = remote
        .lock_page(txn, PageId(9_999_999), LockMode::Shared)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoSuchPage {
                page: PageId(9_999_999)
            }
        ),
        "{err}"
    );
    let err = remote.commit(txn).unwrap_err();
    assert!(matches!(err, Error::Connection { .. }), "{err}");

    // Using another connection's transaction.
    let other = RemotePageServer::connect(&address, "other").unwrap();
    let theirs = other.begin().unwrap();
    let err = steady
        .lock_page(theirs, steady.root_directory().page(), LockMode::Shared)
        .unwrap_err();
    assert!(matches!(err, Error::TransactionInactive { .. }), "{err}");
    other.abort(theirs).unwrap();

    assert_serving(&address);
    let txn = steady.begin().unwrap();
    steady.commit(txn).unwrap();
}

#[test]
fn a_vanished_client_releases_its_locks() {
    let server = start_server();
    let first = RemotePageServer::connect(&server.address, "first").unwrap();
    let txn = first.begin().unwrap();
    let page = first.root_directory().page();
    first.lock_page(txn, page, LockMode::Exclusive).unwrap();
    // The second client waits for the lock; the first vanishes without a word.
    let address = server.address.clone();
    let waiter = std::thread::spawn(move || {
        let second = RemotePageServer::connect(&address, "second").unwrap();
        let txn = second.begin().unwrap();
        let started = std::time::Instant::now();
        second.lock_page(txn, page, LockMode::Exclusive).unwrap();
        second.commit(txn).unwrap();
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(first);
    let waited = waiter.join().unwrap();
    assert!(
        waited < Duration::from_millis(1900),
        "waited {waited:?}: the lock was not released by the disconnect"
    );
}

/// A client checks the pages a server sends, fetched alone or with their lock in one request: a
/// damaged page, or another page than the one it asked for, is refused by name before it
/// reaches the client's cache.
#[test]
fn a_damaged_page_from_the_server_is_refused_by_name() {
    const PAGE: usize = 4096;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    // A server that answers hello and page fetches: page 5 with a record running past the
    // page, page 6 with page 7's header, any other page sound.
    let fake = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        while let Ok(frame) = read_frame(&mut stream) {
            let response = match decode::<Request>(&frame.body).unwrap() {
                Request::Hello { .. } => Response::Welcome {
                    access: lodestore_net::auth::Access::ReadWrite,
                    server_proof: None,
                    page_size: PAGE as u32,
                    volume: 0,
                    root_directory: 0,
                    recovery_method: "esm".into(),
                    restart: Default::default(),
                },
                Request::FetchPage { page, .. } | Request::LockAndFetch { page, .. } => {
                    let mut image = vec![0u8; PAGE];
                    let number = if page == 6 { 7 } else { page };
                    slotted::init(&mut image, PageId(number), 0);
                    let slot = slotted::insert(&mut image, TypeId(1), 16, false).unwrap();
                    if page == 5 {
                        let record = slotted::record(&image, slot).unwrap().unwrap();
                        let length = record.offset + 4..record.offset + 8;
                        image[length].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
                    }
                    Response::Page(image)
                }
                other => panic!("unexpected request {other:?}"),
            };
            write_frame(&mut stream, frame.request_id, &encode(&response)).unwrap();
        }
    });
    let remote = RemotePageServer::connect(&address, "test").unwrap();
    let mut buf = vec![0u8; PAGE];
    remote.fetch_page(TxnId(1), PageId(4), &mut buf).unwrap();
    assert_eq!(lodestore_storage::page::number(&buf), PageId(4));
    let lsn = remote
        .lock_and_fetch_page(TxnId(1), PageId(3), LockMode::Shared, &mut buf)
        .unwrap();
    assert_eq!(lodestore_storage::page::number(&buf), PageId(3));
    assert_eq!(lsn, lodestore_storage::page::lsn(&buf));
    for (page, reason) in [(5, "page 5 from the server is damaged"), (6, "sent page 7")] {
        for locking in [false, true] {
            let before = buf.clone();
            let fetched = if locking {
                remote
                    .lock_and_fetch_page(TxnId(1), PageId(page), LockMode::Shared, &mut buf)
                    .map(drop)
            } else {
                remote.fetch_page(TxnId(1), PageId(page), &mut buf)
            };
            match fetched {
                Err(Error::Connection { reason: said, .. }) => {
                    assert!(said.contains(reason), "{said}")
                }
                other => panic!("page {page}: {other:?}"),
            }
            assert_eq!(buf, before, "nothing of a refused page is kept");
        }
    }
    drop(remote);
    fake.join().unwrap();
}

/// The memory request bodies take is bounded across connections: a client that announces a
/// large frame and sends it slowly holds its share, and another whose frame does not fit in
/// what is left waits, then is disconnected; once the first is gone, others are served again.
#[test]
fn request_memory_is_bounded_across_connections() {
    let running = start_server_with(lodestore_net::ServeLimits {
        buffered_bytes_max: 1 << 20,
        admit_wait: Duration::from_millis(300),
        ..Default::default()
    });
    let address = &running.address;
    let big = vec![0u8; 900 << 10];
    let mut slow = raw(address, true);
    slow.write_all(&header(7, &big)).unwrap();
    slow.write_all(&big[..1000]).unwrap();
    slow.flush().unwrap();
    std::thread::sleep(Duration::from_millis(100));

    // 200 KiB does not fit beside the 900 KiB held: refused after the wait.
    let mut second = raw(address, true);
    let body = encode(&Request::Begin {
        kind: WireTxnKind::ReadWrite,
    });
    let mut padded = body.clone();
    padded.resize(200 << 10, 0);
    let started = std::time::Instant::now();
    second.write_all(&header(8, &padded)).unwrap();
    second.write_all(&padded).unwrap();
    assert_closed(&mut second);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // A small request still fits, and once the slow client goes its share comes back.
    assert_serving(address);
    drop(slow);
    std::thread::sleep(Duration::from_millis(100));
    let mut third = raw(address, true);
    write_frame(
        &mut third,
        9,
        &encode(&Request::Begin {
            kind: WireTxnKind::ReadWrite,
        }),
    )
    .unwrap();
    assert!(matches!(
        decode::<Response>(&read_frame(&mut third).unwrap().body).unwrap(),
        Response::Began { .. }
    ));
}

/// Transaction kinds and lock requests a server cannot serve are refused with a clear error,
/// in process and over the wire alike, and the connection goes on; object locks are served.
#[test]
fn unservable_transaction_kinds_and_lock_requests_are_refused_clearly() {
    use lodestore_server::{LockTarget, TxnKind};
    let running = start_server();
    let remote = RemotePageServer::connect(&running.address, "kinds").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let embedded = embedded_server(dir.path());
    for server in [&remote as &dyn PageServer, &embedded] {
        match server.begin_transaction(TxnKind::ReadOnlyAsOf { snapshot: 1 }) {
            Err(Error::Unsupported(reason)) => assert!(reason.contains("snapshot"), "{reason}"),
            other => panic!("as of: {other:?}"),
        }
        match server.begin_transaction(TxnKind::Sub { parent: TxnId(999) }) {
            Err(Error::TransactionInactive { reason }) => {
                assert!(reason.contains("parent transaction 999"), "{reason}")
            }
            other => panic!("sub of no parent: {other:?}"),
        }
        let txn = server.begin().unwrap();
        let object = server.root_directory();
        server
            .lock(txn, LockTarget::Object(object), LockMode::Shared)
            .unwrap();
        match server.lock(txn, LockTarget::Page(object.page()), LockMode::Increment) {
            Err(Error::InvalidArgument(reason) | Error::Unsupported(reason)) => {
                assert!(reason.contains("increment"), "{reason}")
            }
            other => panic!("increment lock on a page: {other:?}"),
        }
        server
            .lock(txn, LockTarget::Page(object.page()), LockMode::Shared)
            .unwrap();
        server.commit(txn).unwrap();
    }
}

/// A lock and a fetch in one request, embedded and over TCP: the page arrives with its LSN and
/// the lock is held afterwards (a fetch alone then works, as it does not for a transaction
/// without the lock); a page lock in increment mode is refused as a lock request is.
#[test]
fn a_page_is_locked_and_fetched_in_one_request() {
    let running = start_server();
    let remote = RemotePageServer::connect(&running.address, "miss").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let embedded = embedded_server(dir.path());
    for server in [&remote as &dyn PageServer, &embedded] {
        let page = server.root_directory().page();
        let txn = server.begin().unwrap();
        let mut buf = vec![0u8; 8192];
        let lsn = server
            .lock_and_fetch_page(txn, page, LockMode::Exclusive, &mut buf)
            .unwrap();
        assert_eq!(lodestore_storage::page::number(&buf), page);
        assert_eq!(lsn, lodestore_storage::page::lsn(&buf));
        let mut again = vec![0u8; 8192];
        server.fetch_page(txn, page, &mut again).unwrap();
        assert_eq!(again, buf);
        let other = server.begin().unwrap();
        match server.fetch_page(other, page, &mut again) {
            Err(Error::InvalidArgument(reason)) => assert!(reason.contains("without locking")),
            other => panic!("a fetch without the lock: {other:?}"),
        }
        match server.lock_and_fetch_page(txn, page, LockMode::Increment, &mut again) {
            Err(Error::InvalidArgument(reason)) => {
                assert!(reason.contains("increment"), "{reason}")
            }
            other => panic!("increment lock on a page: {other:?}"),
        }
        server.abort(other).unwrap();
        server.commit(txn).unwrap();
    }
}

/// A server in process on a store in `dir`, for tests that ask the same of it and of a remote
/// one.
fn embedded_server(dir: &std::path::Path) -> lodestore_server::Server {
    lodestore_server::Server::create(
        std::sync::Arc::new(lodestore_storage::RealFileSystem),
        &dir.join("s"),
        8192,
        lodestore_server::ServerOptions::default(),
    )
    .unwrap()
}
