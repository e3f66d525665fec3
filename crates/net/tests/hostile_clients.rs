//! Clients that hold a server's resources on purpose, each against small limits so the test
//! runs in seconds: silent and trickling handshakes, idle connections, a client silent with a
//! transaction open, one that stops reading its replies, and floods of idle connections from
//! one address and in total. After each, a legitimate client must still get in and commit
//! within a second.

mod common;

use common::{assert_closed, raw, start_server_with};
use lodestore_net::frame::{header, read_frame, write_frame};
use lodestore_net::message::{
    decode, encode, Request, Response, WireLockMode, WireLockTarget, WireTxnKind,
};
use lodestore_net::{RemotePageServer, ServeLimits};
use lodestore_server::{LockMode, PageServer};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn limits() -> ServeLimits {
    ServeLimits {
        handshake_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(600),
        silent_transaction_timeout: Duration::from_millis(400),
        write_timeout: Duration::from_millis(300),
        ..ServeLimits::default()
    }
}

/// A legitimate client connects, locks the root directory exclusively and commits, within a
/// second.
fn a_real_client_commits_within_a_second(address: &str) {
    let started = Instant::now();
    let remote = RemotePageServer::connect(address, "legitimate").unwrap();
    let txn = remote.begin().unwrap();
    let page = remote.root_directory().page();
    remote.lock_page(txn, page, LockMode::Exclusive).unwrap();
    remote.commit(txn).unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the real client took {took:?}"
    );
}

/// Waits until the server closes `stream`; returns how long that took.
fn closed_after(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_closed(stream);
    started.elapsed()
}

#[test]
fn a_silent_or_trickling_handshake_is_cut_at_its_deadline() {
    let running = start_server_with(limits());
    let mut silent = raw(&running.address, false);
    let took = closed_after(&mut silent);
    assert!(took < Duration::from_millis(1500), "{took:?}");

    // One byte of a hello every 100 ms never finishes within 300 ms.
    let mut trickle = raw(&running.address, false);
    let body = encode(&Request::Hello {
        client: "slow".into(),
        nonce: vec![7u8; 32],
    });
    let mut frame = header(1, &body).to_vec();
    frame.extend_from_slice(&body);
    let started = Instant::now();
    for byte in frame {
        if trickle.write_all(&[byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    closed_after(&mut trickle);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the trickle went on"
    );
    a_real_client_commits_within_a_second(&running.address);
}

#[test]
fn an_idle_connection_is_closed_and_a_silent_transaction_rolled_back() {
    let running = start_server_with(limits());
    let mut idle = raw(&running.address, true);
    let took = closed_after(&mut idle);
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // A client takes the root directory's lock, then says nothing: after the bound the
    // connection is closed and the lock released for others.
    let mut silent = raw(&running.address, true);
    write_frame(
        &mut silent,
        2,
        &encode(&Request::Begin {
            kind: WireTxnKind::ReadWrite,
        }),
    )
    .unwrap();
    let Response::Began { txn, .. } =
        decode::<Response>(&read_frame(&mut silent).unwrap().body).unwrap()
    else {
        panic!("no transaction");
    };
    let probe = RemotePageServer::connect(&running.address, "probe").unwrap();
    let page = probe.root_directory().page().0;
    write_frame(
        &mut silent,
        3,
        &encode(&Request::Lock {
            txn,
            target: WireLockTarget::Page(page),
            mode: WireLockMode::Exclusive,
        }),
    )
    .unwrap();
    read_frame(&mut silent).unwrap();
    let took = closed_after(&mut silent);
    assert!(took < Duration::from_secs(2), "{took:?}");
    a_real_client_commits_within_a_second(&running.address);
}

#[test]
fn a_client_that_stops_reading_is_closed_and_its_locks_released() {
    let running = start_server_with(limits());
    let mut greedy = raw(&running.address, true);
    write_frame(
        &mut greedy,
        2,
        &encode(&Request::Begin {
            kind: WireTxnKind::ReadWrite,
        }),
    )
    .unwrap();
    let Response::Began { txn, .. } =
        decode::<Response>(&read_frame(&mut greedy).unwrap().body).unwrap()
    else {
        panic!("no transaction");
    };
    let probe = RemotePageServer::connect(&running.address, "probe").unwrap();
    let page = probe.root_directory().page().0;
    drop(probe);
    write_frame(
        &mut greedy,
        3,
        &encode(&Request::Lock {
            txn,
            target: WireLockTarget::Page(page),
            mode: WireLockMode::Exclusive,
        }),
    )
    .unwrap();
    read_frame(&mut greedy).unwrap();
    // Ask for the page thousands of times and read none of the replies: the socket buffers
    // fill, the server's write times out, and it closes the connection.
    greedy
        .set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let fetch = encode(&Request::FetchPage { txn, page });
    for id in 0..20_000u64 {
        if write_frame(&mut greedy, 10 + id, &fetch).is_err() {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(800));
    a_real_client_commits_within_a_second(&running.address);
}

#[test]
fn floods_of_idle_connections_do_not_lock_a_real_client_out() {
    let running = start_server_with(ServeLimits {
        max_connections_per_peer: 64,
        ..ServeLimits::default()
    });
    // More greeted, idle connections from this address than it may hold, and half-open ones
    // that never say hello: the newest push out the idlest.
    let mut idle: Vec<TcpStream> = (0..80).map(|_| raw(&running.address, true)).collect();
    idle.extend((0..80).map(|_| raw(&running.address, false)));
    a_real_client_commits_within_a_second(&running.address);

    drop(idle);
    drop(running);

    // At the total limit (the per-address one set above it).
    let running = start_server_with(ServeLimits {
        max_connections_per_peer: 1000,
        ..ServeLimits::default()
    });
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(&running.address).ok())
        .collect();
    assert_eq!(flood.len(), 300);
    std::thread::sleep(Duration::from_millis(300));
    a_real_client_commits_within_a_second(&running.address);
}

#[test]
fn connections_with_transactions_open_are_not_pushed_out() {
    let running = start_server_with(ServeLimits {
        max_connections_per_peer: 2,
        ..limits()
    });
    let begin = |stream: &mut TcpStream| {
        write_frame(
            stream,
            2,
            &encode(&Request::Begin {
                kind: WireTxnKind::ReadWrite,
            }),
        )
        .unwrap();
        read_frame(stream).unwrap();
    };
    let mut first = raw(&running.address, true);
    begin(&mut first);
    let mut second = raw(&running.address, true);
    begin(&mut second);
    // Both hold transactions: a third connection from the same address is refused.
    let mut third = TcpStream::connect(&running.address).unwrap();
    let took = closed_after(&mut third);
    assert!(took < Duration::from_secs(1), "{took:?}");
    // The two go on working.
    begin(&mut first);
    begin(&mut second);
}

#[test]
fn connections_that_never_prove_who_they_are_push_out_only_their_own_kind() {
    let running = start_server_with(ServeLimits {
        max_connections_per_peer: 4,
        ..ServeLimits::default()
    });
    // A real client connects and then idles; a flood of connections that never say hello
    // follows, many more than the address may hold.
    let real = RemotePageServer::connect(&running.address, "real").unwrap();
    let flood: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&running.address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // The real client's connection is still there.
    let txn = real.begin().unwrap();
    real.commit(txn).unwrap();
    drop(flood);
}
