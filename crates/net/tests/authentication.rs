//! Authentication end to end over loopback: a client proves it holds a token, never sending
//! it; a wrong or missing token is refused before any page is read, with a clear error on both
//! sides; a read-only token reads and is refused every write; a recorded handshake cannot be
//! replayed; and a client with a token refuses a server that does not ask for one.

mod common;

use common::{assert_closed, raw, start_server_auth, start_server_with};
use lodestore_core::Error;
use lodestore_net::auth::{Access, ServerAuth, Token};
use lodestore_net::frame::{read_frame, write_frame};
use lodestore_net::message::{decode, encode, Request, Response, WireError};
use lodestore_net::{RemotePageServer, ServeLimits};
use lodestore_server::{LockMode, PageServer};

fn token(text: &str) -> Token {
    Token::new(text.as_bytes().to_vec()).unwrap()
}

fn server() -> common::Running {
    start_server_auth(
        ServeLimits::default(),
        ServerAuth::none()
            .with(token("read-write-token-0123"), Access::ReadWrite)
            .with(token("read-only-token-45678"), Access::ReadOnly),
    )
}

fn refused(result: lodestore_core::Result<RemotePageServer>) -> String {
    match result {
        Err(Error::PermissionDenied { reason }) => reason,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("connected"),
    }
}

#[test]
fn the_right_token_commits_and_wrong_or_missing_ones_are_refused() {
    let running = server();
    let address = &running.address;
    let remote =
        RemotePageServer::connect_with(address, "writer", Some(&token("read-write-token-0123")))
            .unwrap();
    assert!(remote.welcome().authenticated);
    assert_eq!(remote.welcome().access, Access::ReadWrite);
    let txn = remote.begin().unwrap();
    let page = remote.root_directory().page();
    remote.lock_page(txn, page, LockMode::Exclusive).unwrap();
    remote.commit(txn).unwrap();

    let reason = refused(RemotePageServer::connect_with(
        address,
        "intruder",
        Some(&token("not-the-token-at-all")),
    ));
    assert!(reason.contains("authentication failed"), "{reason}");
    assert!(
        !reason.contains("not-the-token"),
        "the refusal shows a secret: {reason}"
    );
    let reason = refused(RemotePageServer::connect(address, "no token"));
    assert!(reason.contains("requires a token"), "{reason}");
}

#[test]
fn a_read_only_token_reads_and_is_refused_every_write() {
    let running = server();
    let remote = RemotePageServer::connect_with(
        &running.address,
        "reader",
        Some(&token("read-only-token-45678")),
    )
    .unwrap();
    assert_eq!(remote.welcome().access, Access::ReadOnly);
    let txn = remote.begin().unwrap();
    let page = remote.root_directory().page();
    remote.lock_page(txn, page, LockMode::Shared).unwrap();
    let mut buf = vec![0u8; remote.page_size()];
    remote.fetch_page(txn, page, &mut buf).unwrap();
    match remote.lock_page(txn, page, LockMode::Exclusive) {
        Err(Error::PermissionDenied { reason }) => {
            assert!(reason.contains("may only read"), "{reason}")
        }
        other => panic!("an exclusive lock for a reader: {other:?}"),
    }
    assert!(matches!(
        remote.allocate_pages(txn, 1),
        Err(Error::PermissionDenied { .. })
    ));
    remote.commit(txn).unwrap();
}

#[test]
fn a_recorded_handshake_cannot_be_replayed() {
    let running = server();
    let address = &running.address;
    // Record a real client's hello and proof against one challenge.
    let secret = token("read-write-token-0123");
    let client_nonce = vec![3u8; 32];
    let mut first = raw(address, false);
    let hello = encode(&Request::Hello {
        client: "c".into(),
        nonce: client_nonce.clone(),
    });
    write_frame(&mut first, 1, &hello).unwrap();
    let Response::Challenge { nonce } = decode(&read_frame(&mut first).unwrap().body).unwrap()
    else {
        panic!("no challenge");
    };
    let proof = encode(&Request::Prove {
        proof: secret.client_proof(&nonce, &client_nonce, "c"),
    });
    write_frame(&mut first, 2, &proof).unwrap();
    assert!(matches!(
        decode::<Response>(&read_frame(&mut first).unwrap().body).unwrap(),
        Response::Welcome { .. }
    ));
    // The same two frames on a new connection meet a new challenge and fail.
    let mut replay = raw(address, false);
    write_frame(&mut replay, 1, &hello).unwrap();
    read_frame(&mut replay).unwrap();
    write_frame(&mut replay, 2, &proof).unwrap();
    match decode::<Response>(&read_frame(&mut replay).unwrap().body).unwrap() {
        Response::Failed(WireError::PermissionDenied(reason)) => {
            assert!(reason.contains("authentication failed"), "{reason}")
        }
        other => panic!("the replay got {other:?}"),
    }
    assert_closed(&mut replay);
    // A proof without a hello, or a second hello, is refused too.
    let mut early = raw(address, false);
    write_frame(&mut early, 1, &proof).unwrap();
    assert!(matches!(
        decode::<Response>(&read_frame(&mut early).unwrap().body).unwrap(),
        Response::Failed(WireError::PermissionDenied(_))
    ));
    assert_closed(&mut early);
}

#[test]
fn a_client_with_a_token_refuses_a_server_that_asks_for_none() {
    let running = start_server_with(ServeLimits::default());
    let reason = refused(RemotePageServer::connect_with(
        &running.address,
        "careful",
        Some(&token("read-write-token-0123")),
    ));
    assert!(reason.contains("does not ask for a token"), "{reason}");
    let open = RemotePageServer::connect(&running.address, "anyone").unwrap();
    assert!(!open.welcome().authenticated);
}
