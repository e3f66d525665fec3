//! TLS end to end over loopback, with certificate sets made by `tls::certs`: a client that
//! trusts the server's authority commits; a server requiring client certificates grants each
//! the access of the authority that signed it and refuses a missing or foreign one before any
//! page is read; a client refuses a server whose certificate it cannot check; plain and TLS
//! ends that meet say what went wrong; tokens still apply under TLS; and a silent or garbled
//! TLS handshake is closed at the handshake deadline while real clients go on being served.

mod common;

use common::{assert_closed, start_server_auth};
use lodestore_core::Error;
use lodestore_net::auth::{Access, Credentials, ServerAuth, Token};
use lodestore_net::tls::certs::{write_set, CertificateSet};
use lodestore_net::{RemotePageServer, ServeLimits, TlsClient, TlsServer};
use lodestore_server::{LockMode, PageServer};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn certificates() -> (tempfile::TempDir, CertificateSet) {
    let dir = tempfile::tempdir().unwrap();
    let set = write_set(dir.path(), &[]).unwrap();
    (dir, set)
}

/// A server with `set`'s certificate; requiring client certificates if `clients`.
fn tls_server(set: &CertificateSet, clients: bool, auth: ServerAuth) -> common::Running {
    let mut tls = TlsServer::builder(&set.server_certificate, &set.server_key);
    if clients {
        tls = tls
            .client_authority(&set.authority, Access::ReadWrite)
            .client_authority(&set.read_only_authority, Access::ReadOnly);
    }
    start_server_auth(ServeLimits::default(), auth.with_tls(tls.build().unwrap()))
}

fn tls(set: &CertificateSet) -> Credentials {
    Credentials {
        token: None,
        tls: Some(TlsClient::builder(&set.authority).build().unwrap()),
    }
}

fn tls_as(set: &CertificateSet, cert: &std::path::Path, key: &std::path::Path) -> Credentials {
    Credentials {
        token: None,
        tls: Some(
            TlsClient::builder(&set.authority)
                .certificate(cert, key)
                .build()
                .unwrap(),
        ),
    }
}

fn commit_one(remote: &RemotePageServer) {
    let txn = remote.begin().unwrap();
    let page = remote.root_directory().page();
    remote.lock_page(txn, page, LockMode::Exclusive).unwrap();
    let mut buf = vec![0u8; remote.page_size()];
    remote.fetch_page(txn, page, &mut buf).unwrap();
    remote.commit(txn).unwrap();
}

fn refusal(result: lodestore_core::Result<RemotePageServer>) -> String {
    match result {
        Err(Error::PermissionDenied { reason }) => reason,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("connected"),
    }
}

fn failure(result: lodestore_core::Result<RemotePageServer>) -> String {
    match result {
        Err(e) => e.to_string(),
        Ok(_) => panic!("connected"),
    }
}

#[test]
fn a_client_trusting_the_servers_authority_commits_over_tls() {
    let (_dir, set) = certificates();
    let running = tls_server(&set, false, ServerAuth::none());
    let remote = RemotePageServer::connect_secured(&running.address, "tls", &tls(&set)).unwrap();
    assert!(remote.welcome().tls);
    assert_eq!(remote.welcome().access, Access::ReadWrite);
    commit_one(&remote);
    // Many round trips on one session, and a batch larger than a TLS record.
    for _ in 0..200 {
        commit_one(&remote);
    }
    let page = remote.root_directory().page();
    let txn = remote.begin().unwrap();
    remote.lock_page(txn, page, LockMode::Shared).unwrap();
    let mut buf = vec![0u8; remote.page_size()];
    remote.fetch_page(txn, page, &mut buf).unwrap();
    remote.abort(txn).unwrap();
}

#[test]
fn client_certificates_grant_their_authoritys_access_and_others_are_refused() {
    let (_dir, set) = certificates();
    let running = tls_server(&set, true, ServerAuth::none());
    let address = &running.address;

    let writer = RemotePageServer::connect_secured(
        address,
        "writer",
        &tls_as(&set, &set.client_certificate, &set.client_key),
    )
    .unwrap();
    assert_eq!(writer.welcome().access, Access::ReadWrite);
    commit_one(&writer);

    let reader = RemotePageServer::connect_secured(
        address,
        "reader",
        &tls_as(
            &set,
            &set.read_only_client_certificate,
            &set.read_only_client_key,
        ),
    )
    .unwrap();
    assert_eq!(reader.welcome().access, Access::ReadOnly);
    let txn = reader.begin().unwrap();
    let page = reader.root_directory().page();
    reader.lock_page(txn, page, LockMode::Shared).unwrap();
    match reader.lock_page(txn, page, LockMode::Exclusive) {
        Err(Error::PermissionDenied { reason }) => assert!(reason.contains("may only read")),
        other => panic!("a read-only certificate wrote: {other:?}"),
    }
    reader.abort(txn).unwrap();

    // No certificate: refused in the TLS handshake, before any request.
    let reason = refusal(RemotePageServer::connect_secured(
        address,
        "anonymous",
        &tls(&set),
    ));
    assert!(reason.contains("TLS handshake failed"), "{reason}");
    // A certificate from an authority the server does not know.
    let (_other_dir, other) = certificates();
    let foreign = Credentials {
        token: None,
        tls: Some(
            TlsClient::builder(&set.authority)
                .certificate(&other.client_certificate, &other.client_key)
                .build()
                .unwrap(),
        ),
    };
    let reason = refusal(RemotePageServer::connect_secured(
        address, "foreign", &foreign,
    ));
    assert!(reason.contains("TLS handshake failed"), "{reason}");
    // The refusals cost the server nothing: the writer goes on.
    commit_one(&writer);
}

#[test]
fn a_client_refuses_a_server_it_cannot_check() {
    let (_dir, set) = certificates();
    let (_other_dir, other) = certificates();
    let running = tls_server(&set, false, ServerAuth::none());
    // Trusting another authority.
    let reason = refusal(RemotePageServer::connect_secured(
        &running.address,
        "wary",
        &tls(&other),
    ));
    assert!(reason.contains("certificate"), "{reason}");
    // The right authority, the wrong name.
    let wrong_name = Credentials {
        token: None,
        tls: Some(
            TlsClient::builder(&set.authority)
                .server_name("store.example.org")
                .build()
                .unwrap(),
        ),
    };
    let reason = refusal(RemotePageServer::connect_secured(
        &running.address,
        "wary",
        &wrong_name,
    ));
    assert!(reason.contains("certificate"), "{reason}");
}

#[test]
fn plain_and_tls_ends_that_meet_say_what_went_wrong() {
    let (_dir, set) = certificates();
    let tls_running = tls_server(&set, false, ServerAuth::none());
    let error = failure(RemotePageServer::connect(&tls_running.address, "plain"));
    assert!(error.contains("TLS"), "{error}");

    let plain_running = start_server_auth(ServeLimits::default(), ServerAuth::none());
    let error = failure(RemotePageServer::connect_secured(
        &plain_running.address,
        "tls",
        &tls(&set),
    ));
    assert!(error.contains("TLS handshake failed"), "{error}");
    common::assert_serving(&plain_running.address);
}

#[test]
fn tokens_still_apply_under_tls_and_the_narrower_access_wins() {
    let (_dir, set) = certificates();
    let token = Token::new(b"a-token-for-tls-tests".to_vec()).unwrap();
    let running = tls_server(
        &set,
        true,
        ServerAuth::none().with(token.clone(), Access::ReadWrite),
    );
    let mut credentials = tls_as(&set, &set.client_certificate, &set.client_key);
    let reason = refusal(RemotePageServer::connect_secured(
        &running.address,
        "certificate only",
        &credentials,
    ));
    assert!(reason.contains("requires a token"), "{reason}");
    credentials.token = Some(token.clone());
    let both = RemotePageServer::connect_secured(&running.address, "both", &credentials).unwrap();
    assert!(both.welcome().authenticated && both.welcome().tls);
    assert_eq!(both.welcome().access, Access::ReadWrite);
    commit_one(&both);

    let mut reader = tls_as(
        &set,
        &set.read_only_client_certificate,
        &set.read_only_client_key,
    );
    reader.token = Some(token);
    let narrowed =
        RemotePageServer::connect_secured(&running.address, "narrowed", &reader).unwrap();
    assert_eq!(narrowed.welcome().access, Access::ReadOnly);
}

#[test]
fn silent_and_garbled_tls_handshakes_are_closed_and_real_clients_served() {
    let (_dir, set) = certificates();
    let mut tls = TlsServer::builder(&set.server_certificate, &set.server_key);
    tls = tls.client_authority(&set.authority, Access::ReadWrite);
    let limits = ServeLimits {
        handshake_timeout: Duration::from_millis(500),
        ..ServeLimits::default()
    };
    let running = start_server_auth(limits, ServerAuth::none().with_tls(tls.build().unwrap()));
    let credentials = tls_as(&set, &set.client_certificate, &set.client_key);

    let started = Instant::now();
    let mut silent: Vec<TcpStream> = (0..32)
        .map(|_| TcpStream::connect(&running.address).unwrap())
        .collect();
    let mut garbled = TcpStream::connect(&running.address).unwrap();
    // A TLS record header announcing a handshake, then noise.
    garbled
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x40])
        .and_then(|()| garbled.write_all(&[0xAB; 64]))
        .unwrap();
    let real = RemotePageServer::connect_secured(&running.address, "real", &credentials).unwrap();
    commit_one(&real);
    assert!(started.elapsed() < Duration::from_secs(1));
    for stream in silent.iter_mut().chain([&mut garbled]) {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_closed(stream);
    }
    assert!(started.elapsed() < Duration::from_secs(4));
    commit_one(&real);
}
